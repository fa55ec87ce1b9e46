"""Argument checks shared by the families."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


def check_key(key: Any, name: str = "key") -> None:
    """Raises unless ``key`` is a jax PRNG key (typed, or a raw uint32[2])."""
    if isinstance(key, jax.Array) or hasattr(key, "dtype"):
        if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key) and key.shape == ():
            return
        if key.dtype == jnp.uint32 and key.shape == (2,):
            return
    raise TypeError(
        f"{name} must be a jax PRNG key such as jax.random.key(0), got {type(key).__name__} "
        f"with shape {getattr(key, 'shape', None)}"
    )


def check_integer(name: str, value: Any, minimum: int = 0) -> int:
    """``value`` as an int, or a ValueError unless it is a Python or NumPy integer (not a
    bool) >= minimum. An integer array, even 0-d, is refused with its own message: these
    settings fix shapes and loop counts, and a static argument must be a hashable int."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        if getattr(value, "dtype", None) is not None and not isinstance(value, np.generic):
            raise ValueError(
                f"{name} must be an integer >= {minimum} given as a Python or NumPy int, got "
                f"an array {value!r}; pass int(...) of a concrete one"
            )
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def check_real(name: str, value: Any, expected: str, ok: Callable[[float], bool]) -> None:
    """A ValueError saying ``name`` must ``expected`` unless the concrete ``value`` (a real
    number, or an array of them) passes ``ok`` at every entry (NaN fails every comparison);
    a traced value (under ``jit`` or ``vmap``, a hyper-parameter given as a leaf) passes
    unchecked, as its value is unknown while tracing."""
    if isinstance(value, jax.core.Tracer):
        return
    try:
        raw = np.asarray(value)
        if raw.dtype.kind not in "biuf":  # strings, bytes, objects: not numbers
            raise TypeError
        values = raw.astype(np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must {expected} (a real number), got {value!r}") from None
    if not all(ok(float(v)) for v in values.ravel()):
        raise ValueError(f"{name} must {expected}, got {value!r}")


def check_scalar(name: str, value: Any, expected: str, ok: Callable[[float], bool]) -> None:
    """:func:`check_real` for one number: a concrete hyper-parameter must be a scalar (an
    array would set one value per entry of whatever it meets) that passes ``ok``; a traced
    one (a schedule, a ``vmap``-ed setting) passes unchecked."""
    if isinstance(value, jax.core.Tracer):
        return
    shape = np.shape(value) if hasattr(value, "shape") or isinstance(value, list | tuple) else ()
    if shape != ():
        raise ValueError(f"{name} must be a scalar, got shape {shape}")
    check_real(name, value, expected, ok)


def check_finite_nonnegative(name: str, value: Any) -> None:
    """:func:`check_real` for a finite number (or array of them) >= 0."""
    check_real(name, value, "be finite and >= 0", lambda v: 0.0 <= v < math.inf)


def check_finite_positive(name: str, value: Any) -> None:
    """:func:`check_real` for a finite number (or array of them) > 0."""
    check_real(name, value, "be finite and > 0", lambda v: 0.0 < v < math.inf)


def check_widths(name: str, value: Any) -> tuple[int, ...]:
    """Hidden-layer widths: a tuple or list of integers >= 1 (possibly empty), as a tuple;
    a ValueError naming ``name`` otherwise (0 divided by zero in an initialiser, 8.5 or
    "64" failed as a shape)."""
    if not isinstance(value, tuple | list) or not all(
        isinstance(width, numbers.Integral) and not isinstance(width, bool) and width >= 1
        for width in value
    ):
        raise ValueError(f"{name} must be a tuple of layer widths, integers >= 1, got {value!r}")
    return tuple(int(width) for width in value)


def check_settings(
    config,
    *,
    integers: tuple[str, ...] = (),
    nonnegative: tuple[str, ...] = (),
    positive: tuple[str, ...] = (),
    unit: tuple[str, ...] = (),
    widths: tuple[str, ...] = (),
    scalar: bool = False,
) -> None:
    """The named fields of ``config``: integers >= 1, finite numbers >= 0, finite numbers
    > 0, numbers in ``(0, 1]`` (none of them bools), layer widths; a ``ValueError`` naming
    the first that is not (an infinite step size, limit or penalty turns a training run into
    NaN, not into a limit case). With ``scalar`` the numbers must be single numbers too
    (:func:`check_scalar`)."""
    check = check_scalar if scalar else check_real
    for name in integers:
        check_integer(name, getattr(config, name), 1)
    for name in (*nonnegative, *positive, *unit):  # True read as 1.0
        value = getattr(config, name)
        if isinstance(value, bool | np.bool_):
            raise ValueError(f"{name} must be a number, not a bool, got {value!r}")
    for name in nonnegative:
        check(name, getattr(config, name), "be finite and >= 0", lambda v: 0.0 <= v < math.inf)
    for name in positive:
        check(name, getattr(config, name), "be finite and > 0", lambda v: 0.0 < v < math.inf)
    for name in unit:
        check(name, getattr(config, name), "lie in (0, 1]", lambda v: 0 < v <= 1)
    for name in widths:
        check_widths(name, getattr(config, name))


def check_flag(name: str, value: Any) -> bool:
    """``value`` as a bool, or a ValueError naming ``name``: a Python or NumPy bool only
    (the string "no" would read as true, 0.5 as a flag)."""
    if not isinstance(value, bool | np.bool_):
        raise ValueError(f"{name} must be a bool, got {value!r}")
    return bool(value)


def python_numbers(config):
    """The dataclass ``config`` (already checked) with its NumPy and JAX scalars as Python
    ints and floats, and ``hidden``-like tuples of ints: a config is hashed as a static
    argument and recorded as JSON (checkpoints), and an array scalar does neither."""
    import dataclasses

    values = {}
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if isinstance(value, bool | np.bool_):
            value = bool(value)
        elif isinstance(value, numbers.Integral):
            value = int(value)
        elif isinstance(value, numbers.Real | np.floating) or (
            isinstance(value, jax.Array) and value.shape == ()
        ):
            value = float(value)
        elif isinstance(value, tuple) and all(
            isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in value
        ):
            value = tuple(int(v) for v in value)
        values[field.name] = value
    return dataclasses.replace(config, **values)


def check_number(name: str, value: Any, expected: str, ok: Callable[[float], bool]) -> float:
    """:func:`check_scalar` for one concrete number that is not a bool (``True`` would read
    as 1), returned as a float."""
    if isinstance(value, bool | np.bool_):
        raise ValueError(f"{name} must {expected} (a number, not a bool), got {value!r}")
    check_scalar(name, value, expected, ok)
    return float(value)
