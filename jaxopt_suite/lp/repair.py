"""Moving a nearly feasible point of an LP onto its rows, to rounding accuracy.

A first-order solve stops at a relative KKT tolerance measured in norms over all rows, so
single rows of its point can be off by more than that tolerance relative to their own
sides. :func:`repair_rows` corrects such a point with minimum-norm steps: each round
solves ``A_S d = r_S`` in the least-squares sense over the movable columns, for the rows
``S`` that are violated, equalities or at a side (so the rows that hold keep holding),
moves the point by ``d`` and clips it to its bounds; a column the clip stopped is not
moved again (an active set that only grows). A few rounds reach rounding accuracy when
the point was close; the objective moves by about as much as the rows did.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import lsqr


def row_violation(A, row_lower, row_upper, lower, upper, v) -> float:
    """The largest violation of a row side ``b`` or a bound, relative to ``1 + |b|``."""
    A = sp.csr_array(A)
    v = np.asarray(v, np.float64)
    act = A @ v
    worst = 0.0
    for value, lo, hi in ((act, row_lower, row_upper), (v, lower, upper)):
        lo, hi = np.asarray(lo, np.float64), np.asarray(hi, np.float64)
        with np.errstate(invalid="ignore"):
            below = np.where(np.isfinite(lo), (lo - value) / (1 + np.abs(lo)), 0.0)
            above = np.where(np.isfinite(hi), (value - hi) / (1 + np.abs(hi)), 0.0)
        if value.size:
            worst = max(worst, float(np.max(below)), float(np.max(above)))
    return worst


def repair_rows(
    A,
    row_lower,
    row_upper,
    lower,
    upper,
    v,
    *,
    tolerance: float = 1e-12,
    rounds: int = 30,
    passes: int = 4,
) -> tuple[np.ndarray, float]:
    """``(point, violation)``: ``v`` clipped to ``[lower, upper]`` and corrected (module
    docstring) until every row holds to ``tolerance`` relative to ``1 + |side|``, in at
    most ``passes`` passes of at most ``rounds`` rounds (each pass starts its active set
    afresh from the point it is given, and runs only while the violation falls);
    ``violation`` is :func:`row_violation` of the point.

    The correction never leaves the bounds, so a point whose rows cannot be met within
    them keeps part of its violation (compare ``violation`` with that of ``v``)."""
    A = sp.csr_array(A, dtype=np.float64)
    m, n = A.shape
    lower, upper = (np.asarray(a, np.float64) for a in (lower, upper))
    row_lower, row_upper = (np.asarray(a, np.float64) for a in (row_lower, row_upper))
    v = np.asarray(v, np.float64)
    if v.shape != (n,) or lower.shape != (n,) or upper.shape != (n,):
        raise ValueError(f"v, lower and upper must have shape ({n},)")
    if row_lower.shape != (m,) or row_upper.shape != (m,):
        raise ValueError(f"row_lower and row_upper must have shape ({m},)")
    if not np.all(np.isfinite(v)):
        raise ValueError("v must be finite")
    v = np.clip(v, lower, upper)
    violation = row_violation(A, row_lower, row_upper, lower, upper, v)
    for _ in range(passes):
        if violation <= tolerance:
            break
        moved = _repair_pass(A, row_lower, row_upper, lower, upper, v, tolerance, rounds)
        moved_violation = row_violation(A, row_lower, row_upper, lower, upper, moved)
        if not moved_violation < violation:
            break
        v, violation = moved, moved_violation
    return v, violation


def _repair_pass(A, row_lower, row_upper, lower, upper, v, tolerance, rounds):
    equality = row_lower == row_upper
    span = upper - lower
    # first only the columns strictly inside their bounds move (a basic-like point keeps
    # its columns at their bounds, and the objective moves least); when those cannot
    # finish, every column that is not fixed may
    movable = (v - lower > 1e-9 * (1 + span)) & (upper - v > 1e-9 * (1 + span))
    widened = False
    for round_ in range(rounds):
        act = A @ v
        target = np.clip(act, row_lower, row_upper)
        r = target - act
        scale = 1.0 + np.abs(target)
        violated = np.abs(r) > tolerance * scale
        if not violated.any():
            break
        if not widened and (not movable.any() or round_ > rounds // 2):
            movable, widened = lower < upper, True
        # hold the rows at a side (within a hair) and the equalities where they are
        near = np.minimum(np.abs(act - row_lower), np.abs(act - row_upper)) <= 1e-9 * scale
        rows = np.flatnonzero(violated | equality | near)
        free = np.flatnonzero(movable)
        if free.size == 0:
            break
        system = A[rows][:, free]
        step = lsqr(system, r[rows], atol=1e-15, btol=1e-15, iter_lim=20 * (rows.size + 10))[0]
        proposed = v[free] + step
        clipped = np.clip(proposed, lower[free], upper[free])
        movable[free[clipped != proposed]] = False
        v = v.copy()
        v[free] = clipped
    return v
