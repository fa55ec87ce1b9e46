"""Result files as strict JSON: what every suite and GPU script writes, and what the
report reads."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

# JSON has no NaN or infinities (RFC 8259), and Python's bare NaN / Infinity tokens are
# refused by strict parsers (JavaScript's JSON.parse among them): result files hold them as
# these strings, as the PWL model files hold infinite bounds, and read_result turns them
# back into floats.
NONFINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def to_json_value(value: Any) -> Any:
    """``value`` ready for strict JSON: every non-finite float (NumPy's and JAX's included,
    dict keys too) as its string of :data:`NONFINITE`, arrays and NumPy scalars as Python
    values, tuples as lists, paths as strings; anything else as it is. (A string field that
    reads ``"nan"``, ``"inf"`` or ``"-inf"`` comes back from :func:`read_result` as the
    float.)"""
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {_key(key): to_json_value(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json_value(item) for item in value]
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "tolist"):  # NumPy and JAX arrays and scalars
        return to_json_value(value.tolist())
    return value


def _key(key: Any) -> Any:
    """A dict key JSON can write: NumPy scalars as Python values, non-finite floats as their
    strings (JSON writes every key as a string anyway)."""
    if hasattr(key, "item"):
        key = key.item()
    return to_json_value(key) if isinstance(key, float) else key


def from_json_value(value: Any) -> Any:
    """The inverse of :func:`to_json_value` on parsed JSON: the strings of
    :data:`NONFINITE` back into floats."""
    if isinstance(value, str):
        return NONFINITE.get(value, value)
    if isinstance(value, dict):
        return {key: from_json_value(item) for key, item in value.items()}
    if isinstance(value, list):
        return [from_json_value(item) for item in value]
    return value


def dumps(payload: Any, indent: int = 2, default: Callable[[Any], Any] | None = None) -> str:
    """``payload`` as strict JSON (:func:`to_json_value`); ``default`` serialises what JSON
    has no type for (by default: a TypeError naming it)."""
    return json.dumps(
        to_json_value(payload), indent=indent, allow_nan=False, default=default or _json_default
    )


def read_result(path: Path) -> Any:
    """A result file written by :func:`write_result` or :func:`write_json_atomic`, its
    non-finite numbers as floats again (files with bare NaN / Infinity, as written before,
    read the same)."""
    return from_json_value(json.loads(Path(path).read_text()))


def _json_default(value: Any) -> Any:
    """What :func:`dumps` does, by default, with a value JSON has no type for (arrays and
    paths :func:`to_json_value` has already turned into lists and strings): a TypeError."""
    raise TypeError(f"cannot serialise {type(value).__name__}")
