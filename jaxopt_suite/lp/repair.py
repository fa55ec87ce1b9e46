"""Moving a nearly feasible point of an LP onto its rows, to rounding accuracy.

A first-order solve stops at a relative KKT tolerance measured in norms over all rows, so
single rows of its point can be off by more than that tolerance relative to their own
sides. :func:`repair_rows` corrects such a point with minimum-norm steps: each round
solves ``A_S d = r_S`` in the least-squares sense over the movable columns, for the rows
``S`` that are violated, equalities or at a side (so the rows that hold keep holding),
moves the point by ``d`` and clips it to its bounds; a column the clip stopped is not
moved again (an active set that only grows). A few rounds reach rounding accuracy when
the point was close; the objective moves by about as much as the rows did.

Each step is one sparse LU solve of the regularised augmented system
``[[I, A_S^T], [A_S, -delta I]]`` (:func:`_least_norm_step`), whose ``d`` is the
minimum-norm least-squares step up to ``delta``, on the rows scaled to norm 1. A round
whose step would not reduce the rows' residual (the rows left violated are out of the
movable columns' reach) lets every column move at once, or ends the pass once they may.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import lsqr, splu

# the augmented system's regularisation, relative to the largest |A_S|^2. Where the rows
# can be met it leaves a residual of about delta / sigma_min(A_S)^2 times the one the
# step corrects, which the next rounds take out. Where they cannot and A_S is rank
# deficient too (a transportation problem's balanced supplies and demands), the part of
# the residual no column reaches enters y divided by delta, and d = -A_S^T y carries
# rounding / delta of it: the smaller delta, the larger that error.
_REGULARISATION = 1e-10


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
        # each row scaled to norm 1: the same steps where the rows can be met, and a
        # regularisation and a stall test that see small rows as large ones
        system, rhs = _normalised(A[rows][:, free], r[rows])
        step = _least_norm_step(system, rhs)
        if _stalled(system, step, rhs) and not widened:
            # the rows left violated are out of the interior columns' reach, and the
            # next rounds would repeat this one: every column may move from now on
            movable, widened = lower < upper, True
            free = np.flatnonzero(movable)
            system, rhs = _normalised(A[rows][:, free], r[rows])
            step = _least_norm_step(system, rhs)
        if _stalled(system, step, rhs):
            break
        proposed = v[free] + step
        clipped = np.clip(proposed, lower[free], upper[free])
        movable[free[clipped != proposed]] = False
        v = v.copy()
        v[free] = clipped
    return v


def _normalised(system: sp.csr_array, r: np.ndarray) -> tuple[sp.csr_array, np.ndarray]:
    """``system`` and ``r`` with each row divided by the row's 2-norm: the same solutions
    where the rows can be met, a row-weighted least-squares point where they cannot. A
    row without an entry (no free column) drops out: no step changes its residual, which
    would only hide the others' progress from :func:`_stalled`."""
    row_of_entry = np.repeat(np.arange(system.shape[0]), np.diff(system.indptr))
    norms = np.sqrt(np.bincount(row_of_entry, system.data**2, system.shape[0]))
    weights = np.divide(1.0, norms, out=np.zeros_like(norms), where=norms > 0)
    scaled = sp.csr_array(system, copy=True)
    scaled.data *= weights[row_of_entry]
    return scaled, weights * r


def _stalled(system: sp.csr_array, step: np.ndarray, r: np.ndarray) -> bool:
    """Whether ``step`` leaves the residual ``r`` of the rows ``system`` as it is (to a
    millionth of its norm): the least-squares point of the movable columns is reached."""
    return bool(np.linalg.norm(r - system @ step) >= (1 - 1e-6) * np.linalg.norm(r))


def _least_norm_step(system: sp.csr_array, r: np.ndarray) -> np.ndarray:
    """``d`` minimising ``|system d - r|`` with the least ``|d|``, to the regularisation:
    ``d`` of the augmented system ``[[I, S^T], [S, -delta I]] [d; y] = [0; r]``, that is
    ``d = S^T (S S^T + delta I)^{-1} r``, by one sparse LU factorisation. LSQR takes over
    where the factorisation fails or its step is not finite."""
    m, n = system.shape
    if m == 0 or n == 0:
        return np.zeros(n)
    largest = float(np.max(np.abs(system.data))) if system.nnz else 0.0
    delta = _REGULARISATION * (largest**2 if largest > 0 else 1.0)
    augmented = sp.block_array(
        [[sp.eye_array(n), system.T], [system, -delta * sp.eye_array(m)]], format="csc"
    )
    rhs = np.concatenate([np.zeros(n), r])
    try:
        with np.errstate(all="ignore"):
            factor = splu(augmented)
            solution = factor.solve(rhs)
            solution += factor.solve(rhs - augmented @ solution)  # one refinement
            step = solution[:n]
    except RuntimeError:  # an exactly singular pivot: rounding beat the regularisation
        step = None
    if step is None or not np.all(np.isfinite(step)):
        step = lsqr(system, r, atol=1e-15, btol=1e-15, iter_lim=20 * (m + 10))[0]
    return step
