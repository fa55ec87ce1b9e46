"""Argument checks shared by the families."""

from __future__ import annotations

import numbers
from typing import Any

import jax
import jax.numpy as jnp


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
    """``value`` as an int, or a ValueError unless it is an integer (not a bool) >= minimum."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)
