"""Eager argument checks at the Python boundary; errors name the argument, value and need."""

from __future__ import annotations

import math
from collections.abc import Collection

import jax
import numpy as np


def check_kind(kind: str, valid: Collection[str], name: str = "kind") -> str:
    if kind not in valid:
        raise ValueError(f"{name}={kind!r} must be one of {sorted(valid)}")
    return kind


def _real_scalar(value) -> bool:
    """A finite real number: a Python or NumPy scalar or a 0-d real array, not a bool."""
    if isinstance(value, bool | np.bool_) or isinstance(value, jax.core.Tracer):
        return False
    array = np.asarray(value) if hasattr(value, "dtype") else None
    if array is not None:
        return array.ndim == 0 and array.dtype.kind in "iuf" and math.isfinite(float(array))
    return isinstance(value, int | float) and math.isfinite(value)


def check_nonnegative(value: float, name: str) -> float:
    if not _real_scalar(value):
        raise ValueError(f"{name}={value!r} must be a finite number >= 0")
    if value < 0:
        raise ValueError(f"{name}={value!r} must be >= 0")
    return float(value)


def check_limit(value, name: str):
    """``value`` unchanged, after checking it is a real number (or array of them), finite and
    >= 0, when it is concrete; a traced value (a ``jit`` or ``vmap`` argument) passes
    unchecked, as its value is unknown while tracing. For limits compared against, where NaN
    would silently make every comparison false."""
    if isinstance(value, jax.core.Tracer):
        return value
    array = np.asarray(value)
    if not (np.issubdtype(array.dtype, np.integer) or np.issubdtype(array.dtype, np.floating)):
        raise ValueError(f"{name}={value!r} must be a real number, finite and >= 0")
    if not np.all(np.isfinite(array)) or np.any(array < 0):
        raise ValueError(f"{name}={value!r} must be finite and >= 0")
    return value


def check_positive(value: float, name: str) -> float:
    if not _real_scalar(value):
        raise ValueError(f"{name}={value!r} must be a finite number > 0")
    if value <= 0:
        raise ValueError(f"{name}={value!r} must be > 0")
    return float(value)


def check_points(points, name: str) -> np.ndarray:
    """``points`` as a float32 ``(n, 2)`` array of finite xy coordinates, n >= 1."""
    try:
        array = np.asarray(points, dtype=np.float32)
    except (TypeError, ValueError):  # ragged, or not numbers
        raise ValueError(f"{name} must be xy points of shape (n, 2), got {points!r}") from None
    if array.ndim != 2 or array.shape[0] < 1 or array.shape[1] != 2:
        raise ValueError(f"{name} must be xy points of shape (n, 2) with n >= 1, got {array.shape}")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} must be finite, got {array.tolist()}")
    return array


def check_point(point, name: str) -> np.ndarray:
    """``point`` as a float32 ``(2,)`` array of finite xy coordinates."""
    try:
        array = np.asarray(point, dtype=np.float32)
    except (TypeError, ValueError):
        raise ValueError(f"{name}={point!r} must be a finite xy point of shape (2,)") from None
    if array.shape != (2,) or not np.all(np.isfinite(array)):
        raise ValueError(f"{name}={point!r} must be a finite xy point of shape (2,)")
    return array
