"""Variable bounds implied by an LP's rows (activity-based bound propagation).

For a row ``l_i <= sum_k a_ik x_k <= u_i`` and a column ``j`` in it, every feasible ``x``
satisfies ``a_ij x_j <= u_i - sum_{k != j} min(a_ik x_k)`` and
``a_ij x_j >= l_i - sum_{k != j} max(a_ik x_k)``, the minima and maxima over the other
columns' bounds; where those are finite, the row bounds ``x_j``. Rounds repeat this with
the bounds found so far, so a chain of rows can bound a column several rows away.

Each derived bound is moved outward by ``1e-9 (|side| + sum_k |a_ik x_k|) / |a_ij|`` (the
row's finite terms at the bounds used, column ``j``'s own included: the other columns' sum
is the row's minus it), far above the rounding of the sums (``n eps`` of the same
quantity), so that no feasible point lies outside it. The safe dual bound
(:func:`jaxopt_suite.lp.dual_bound`) takes these bounds where a column's own bound is
infinite on the side its reduced cost needs: a free column with a nonzero reduced cost no
longer makes the bound ``-inf`` when its rows confine it.
"""

from __future__ import annotations

import weakref

import numpy as np
import scipy.sparse as sp

from jaxopt_suite._checks import check_integer
from jaxopt_suite.lp.problem import LP

# relative outward margin of a derived bound (see the module docstring)
MARGIN = 1e-9


def implied_bounds(
    lp: LP, var_lower=None, var_upper=None, *, max_rounds: int = 20
) -> tuple[np.ndarray, np.ndarray]:
    """``(lower, upper)``: the variable bounds intersected with those the rows imply.

    ``var_lower, var_upper`` default to the LP's; they may be ``(n,)`` or a batch
    ``(B, n)`` (each row an instance), and the result has their shape. Rounds stop when no
    bound tightens by more than its margin, or after ``max_rounds``. A box that comes out
    empty (some lower above its upper) proves the instance infeasible."""
    if not isinstance(lp, LP):
        raise TypeError(f"lp must be an LP, got {type(lp).__name__}")
    max_rounds = check_integer("max_rounds", max_rounds, 0)
    n = lp.num_cols
    lower = lp.var_lower if var_lower is None else np.asarray(var_lower, np.float64)
    upper = lp.var_upper if var_upper is None else np.asarray(var_upper, np.float64)
    single = lower.ndim == 1
    lower, upper = np.atleast_2d(lower).copy(), np.atleast_2d(upper).copy()
    if lower.ndim != 2 or lower.shape[1] != n or upper.shape != lower.shape:
        raise ValueError(
            f"var_lower and var_upper must both have shape ({n},) or (B, {n}), got "
            f"{np.shape(var_lower)} and {np.shape(var_upper)}"
        )
    if np.isnan(lower).any() or np.isnan(upper).any():
        raise ValueError("var_lower and var_upper must not contain NaN")
    csc = lp.A.tocsc()  # nonzeros in column order, so each column's are one run
    csc.sort_indices()
    keep = csc.data != 0
    col = np.repeat(np.arange(n), np.diff(csc.indptr))[keep]
    row, a = csc.indices[keep], csc.data[keep]
    present, starts = np.unique(col, return_index=True)  # each column's first nonzero
    m = lp.num_rows
    # by_row @ v.T: the sums over each row's nonzeros of a (B, nnz) array v, (m, B)
    by_row = sp.csr_array((np.ones(a.size), (row, np.arange(a.size))), shape=(m, a.size))
    row_lower, row_upper = lp.row_lower[row], lp.row_upper[row]
    positive = a > 0
    for _ in range(max_rounds):
        at_lower, at_upper = lower[:, col], upper[:, col]
        with np.errstate(invalid="ignore"):
            low_term = np.where(positive, a * at_lower, a * at_upper)  # min of a x_j
            high_term = np.where(positive, a * at_upper, a * at_lower)  # max of a x_j
        new_lower, new_upper = lower.copy(), upper.copy()
        for term, side, toward_upper in (
            (low_term, row_upper, True),
            (high_term, row_lower, False),
        ):
            infinite = ~np.isfinite(term)
            finite_term = np.where(infinite, 0.0, term)
            total = by_row @ finite_term.T  # (m, B)
            count = by_row @ infinite.T.astype(np.float64)
            size = by_row @ np.abs(finite_term).T
            others = total.T[:, row] - finite_term  # the other columns' sum, (B, nnz)
            usable = (count.T[:, row] - infinite == 0) & np.isfinite(side)
            if not usable.any():
                continue
            with np.errstate(invalid="ignore", over="ignore"):
                value = (side - others) / a
                # the row's every finite term, the column's own included: removing it from
                # the row's sum cancels up to its size in rounding
                margin = MARGIN * (np.abs(side) + size.T[:, row]) / np.abs(a)
                # a > 0 on the upper side, or a < 0 on the lower, bounds x_j from above
                caps = usable & (positive == toward_upper)
                floors = usable & (positive != toward_upper)
                cap = np.where(caps, value + margin, np.inf)
                floor = np.where(floors, value - margin, -np.inf)
            if present.size:  # each column's tightest cap and floor over its rows
                cap = np.minimum.reduceat(np.where(np.isnan(cap), np.inf, cap), starts, axis=1)
                floor = np.where(np.isnan(floor), -np.inf, floor)
                floor = np.maximum.reduceat(floor, starts, axis=1)
                new_upper[:, present] = np.minimum(new_upper[:, present], cap)
                new_lower[:, present] = np.maximum(new_lower[:, present], floor)
        tol = MARGIN * (1.0 + np.abs(np.where(np.isfinite(upper), upper, 0.0)))
        changed = bool(np.any(new_upper < upper - tol))
        tol = MARGIN * (1.0 + np.abs(np.where(np.isfinite(lower), lower, 0.0)))
        changed |= bool(np.any(new_lower > lower + tol))
        lower, upper = new_lower, new_upper
        if not changed:
            break
    return (lower[0], upper[0]) if single else (lower, upper)


_ROOT: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def root_implied_bounds(lp: LP) -> tuple[np.ndarray, np.ndarray]:
    """:func:`implied_bounds` of the LP's own bounds, computed once per LP (read-only).
    They hold for every instance whose box lies inside the LP's: its feasible points are
    the LP's."""
    found = _ROOT.get(lp)
    if found is None:
        found = implied_bounds(lp)
        for v in found:
            v.setflags(write=False)
        _ROOT[lp] = found
    return found
