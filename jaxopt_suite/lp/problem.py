"""The linear program every solver in :mod:`jaxopt_suite.lp` takes.

.. math::
  \\min_x\\; c^\\top x + \\text{offset} \\quad \\text{s.t.} \\quad
  \\ell_c \\le A x \\le u_c, \\qquad \\ell_v \\le x \\le u_v,

with two-sided rows (equality rows have ``row_lower == row_upper``, one-sided rows an
infinite side) and infinite variable bounds allowed: the bound form of cuPDLPx, with no
slack variables. The data live on the host (numpy, ``A`` as a scipy CSR matrix); solvers
move what they need to the device once per matrix.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp


@dataclasses.dataclass(frozen=True, eq=False)
class LP:
    """A linear program in bound form (see the module docstring).

    Attributes:
      c: objective, shape ``(n,)``.
      A: constraint matrix ``(m, n)``: a dense array (numpy or jax) or any scipy sparse
        matrix; stored as ``scipy.sparse.csr_array`` with float64 entries.
      row_lower, row_upper: ``(m,)``; ``-inf`` / ``+inf`` for an open side.
      var_lower, var_upper: ``(n,)``; ``-inf`` / ``+inf`` for an open side.
      objective_offset: constant added to ``c^T x``.
      objective_sign: ``+1``, or ``-1`` when the problem was a maximisation turned into this
        minimisation (:func:`~jaxopt_suite.lp.read_mps` with ``OBJSENSE MAX``): the
        original objective is ``objective_sign * (c^T x + offset)``.
      name, row_names, col_names: labels used in messages and by ``write_mps``.
      integer: ``(n,)`` bool mask of columns marked integer in an MPS file (the LP solvers
        ignore it; the branch-and-bound reads it).

    Construction checks shapes, NaNs and bounds and raises naming the row or column.
    """

    c: Any
    A: Any
    row_lower: Any
    row_upper: Any
    var_lower: Any
    var_upper: Any
    objective_offset: float = 0.0
    objective_sign: int = 1
    name: str = ""
    row_names: Sequence[str] | None = None
    col_names: Sequence[str] | None = None
    integer: Any = None

    def __post_init__(self):
        c = _vector("c", self.c, kind="column", names=self.col_names)
        n = c.shape[0]
        A = _matrix(self.A)
        m = A.shape[0]
        if A.shape[1] != n:
            raise ValueError(f"A has {A.shape[1]} columns but c has {n} entries")
        set_ = _setter(self)
        set_("c", c)
        set_("A", A)
        for field, count, what in (("col_names", n, "columns"), ("row_names", m, "rows")):
            given = getattr(self, field)
            if given is None:
                continue
            names_ = tuple(str(s) for s in given)
            set_(field, names_)
            if len(names_) != count:
                raise ValueError(f"{field} has {len(names_)} names for {count} {what}")
            # messages, write_mps and the MPS reader find a row or column by its name
            first: dict[str, int] = {}
            for index, name in enumerate(names_):
                if name in first:
                    raise ValueError(
                        f"{field} must be distinct: {name!r} names {what} {first[name]} and {index}"
                    )
                first[name] = index
        for kind, size, names in (("row", m, self.row_names), ("var", n, self.col_names)):
            label_kind = "row" if kind == "row" else "column"
            lower = _vector(
                f"{kind}_lower", getattr(self, f"{kind}_lower"), size, label_kind, names
            )
            upper = _vector(
                f"{kind}_upper", getattr(self, f"{kind}_upper"), size, label_kind, names
            )
            bad = np.flatnonzero(lower > upper)
            if bad.size:
                i = int(bad[0])
                label = _label("row" if kind == "row" else "column", i, names)
                raise ValueError(
                    f"{kind}_lower > {kind}_upper for {label}: {lower[i]} > {upper[i]}"
                    + (f" ({bad.size} such entries)" if bad.size > 1 else "")
                )
            for side, values, forbidden in (("lower", lower, np.inf), ("upper", upper, -np.inf)):
                wrong = np.flatnonzero(values == forbidden)
                if wrong.size:
                    label = _label("row" if kind == "row" else "column", int(wrong[0]), names)
                    raise ValueError(f"{kind}_{side} of {label} is {forbidden}: infeasible bound")
            set_(f"{kind}_lower", lower)
            set_(f"{kind}_upper", upper)
        if not np.all(np.isfinite(c)):
            i = int(np.flatnonzero(~np.isfinite(c))[0])
            raise ValueError(
                f"c must be finite; entry of {_label('column', i, self.col_names)} is {c[i]}"
            )
        if not np.all(np.isfinite(A.data)):
            coo = A.tocoo()
            k = int(np.flatnonzero(~np.isfinite(coo.data))[0])
            raise ValueError(
                f"A must be finite; entry ({_label('row', int(coo.row[k]), self.row_names)}, "
                f"{_label('column', int(coo.col[k]), self.col_names)}) is {coo.data[k]}"
            )
        offset = self.objective_offset
        if (
            isinstance(offset, str | bytes | bool | np.bool_)
            or np.ndim(offset) != 0
            or np.asarray(offset).dtype.kind not in "iuf"
        ):
            raise ValueError(f"objective_offset must be a real number, got {offset!r}")
        if not np.isfinite(float(offset)):
            raise ValueError(f"objective_offset must be finite, got {offset}")
        set_("objective_offset", float(offset))
        sign = self.objective_sign  # True == 1 passed, and was kept as True
        if isinstance(sign, bool | np.bool_) or sign not in (1, -1):
            raise ValueError(f"objective_sign must be 1 or -1, got {sign!r}")
        set_("objective_sign", int(sign))
        if self.integer is None:
            set_("integer", _frozen(np.zeros(n, bool)))
        else:
            given = np.asarray(self.integer)
            # 0.5 or "no" was read as True
            if given.dtype != np.bool_ and not (
                given.dtype.kind in "iuf" and np.all((given == 0) | (given == 1))
            ):
                raise ValueError(f"integer must be booleans (or 0/1), got {given.tolist()!r}")
            integer = _frozen(np.array(given, bool))
            if integer.shape != (n,):
                raise ValueError(f"integer must have shape ({n},), got {integer.shape}")
            set_("integer", integer)

    @property
    def num_rows(self) -> int:
        return self.A.shape[0]

    @property
    def num_cols(self) -> int:
        return self.A.shape[1]

    def objective(self, x: Any) -> float:
        """``c^T x + offset`` in this (minimisation) form."""
        return float(self.c @ np.asarray(x, np.float64) + self.objective_offset)

    def row_label(self, i: int) -> str:
        return _label("row", i, self.row_names)

    def col_label(self, j: int) -> str:
        return _label("column", j, self.col_names)


def distinct_names(names: Sequence[str]) -> list[str]:
    """``names`` with every repeat of an earlier name given the first free suffix ``~1``,
    ``~2``, ...: for an LP built with generated names after the user's, where a user name
    may equal a generated one (the user's, coming first, stays as given)."""
    taken = set(names)
    seen: set[str] = set()
    out = []
    for name in names:
        if name in seen:
            k = 1
            while f"{name}~{k}" in taken:
                k += 1
            name = f"{name}~{k}"
            taken.add(name)
        seen.add(name)
        out.append(name)
    return out


def _setter(obj):
    """Field assignment in ``__post_init__`` of a frozen dataclass (normalised values)."""

    def set_(name, value):
        object.__setattr__(obj, name, value)

    return set_


def _label(kind: str, index: int, names: Sequence[str] | None) -> str:
    if names is not None:
        return f"{kind} {names[index]!r} (index {index})"
    return f"{kind} {index}"


def _frozen(array: np.ndarray) -> np.ndarray:
    """``array`` made read-only. Each LP owns copies of its data, so a caller that changes
    its arrays afterwards, or writes into the LP's, cannot leave the per-matrix caches
    (keyed on the LP) describing another problem."""
    array.flags.writeable = False
    return array


def _real_array(name: str, value: Any) -> None:
    """A ValueError unless ``value`` holds real numbers: a complex one lost its imaginary
    part to a float64 cast (with only NumPy's ComplexWarning), strings became numbers."""
    if hasattr(value, "dtype"):
        dtype = value.dtype
    else:
        try:
            dtype = np.asarray(value).dtype
        except ValueError:  # NumPy refuses nested sequences of unequal lengths
            raise ValueError(
                f"{name} must be an array of real numbers; it holds nested sequences of "
                "different lengths"
            ) from None
    if dtype.kind not in "biuf":
        raise ValueError(f"{name} must hold real numbers, got dtype {dtype}")


def _vector(
    name: str, value: Any, size: int | None = None, kind: str = "", names=None
) -> np.ndarray:
    """``value`` as a read-only float64 vector of ``size`` entries; a NaN entry is named as
    ``kind`` (``"row"``/``"column"``) with its name from ``names`` where that has one."""
    _real_array(name, value)
    array = np.array(value, np.float64)  # a copy
    if array.ndim == 0 and size is not None:
        array = np.full(size, float(array))
    if array.ndim != 1:
        raise ValueError(f"{name} must be a vector, got shape {array.shape}")
    if size is not None and array.shape[0] != size:
        raise ValueError(f"{name} has {array.shape[0]} entries, expected {size}")
    if np.any(np.isnan(array)):
        i = int(np.flatnonzero(np.isnan(array))[0])
        named = names is not None and i < len(names)
        label = _label(kind, i, names if named else None) if kind else f"index {i}"
        raise ValueError(f"{name} contains NaN at {label}")
    return _frozen(array)


def _matrix(value: Any) -> sp.csr_array:
    _real_array("A", value)
    if sp.issparse(value) and len(value.shape) != 2:  # a 1-d sparse array: an IndexError
        raise ValueError(f"A must be a matrix, got shape {value.shape}")
    if sp.issparse(value):  # a copy: summing duplicates below works in place
        matrix = sp.csr_array(value, dtype=np.float64, copy=True)
    else:
        dense = np.asarray(value, np.float64)
        if dense.ndim != 2:
            raise ValueError(f"A must be a matrix, got shape {dense.shape}")
        matrix = sp.csr_array(dense)
    matrix.sum_duplicates()
    matrix.eliminate_zeros()
    for part in (matrix.data, matrix.indices, matrix.indptr):
        _frozen(part)
    return matrix
