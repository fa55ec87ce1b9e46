"""Evaluation metrics of multi-objective RL: the Pareto front, its hypervolume and sparsity.

These are the two numbers that PGMORL (Xu et al., "Prediction-Guided Multi-Objective
Reinforcement Learning for Continuous Robot Control", ICML 2020) and D4MORL / PEDA (Zhu et
al., "Scaling Pareto-Efficient Decision Making via Offline Multi-Objective RL", ICLR 2023)
report for a set of policies: the vector returns of the policies, one point each, are reduced
to their Pareto front, whose hypervolume (larger is better) and sparsity (smaller is better)
are computed. Every objective is maximised.

They run on the host, in NumPy and float64, over small sets of points (up to a few hundred,
with ``m <= 4`` objectives); nothing here is traced or jitted.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

# Rows of the pairwise dominance test done at once, so that memory stays near this many
# (row, column) pairs whatever the number of points.
_DOMINANCE_BLOCK_PAIRS = 1 << 20


def _as_points(points: ArrayLike) -> np.ndarray:
    """``points`` as a finite float64 ``(n, m)`` array with ``m >= 1``, or a ValueError."""
    array = np.asarray(points, dtype=np.float64)
    if array.ndim != 2 or array.shape[1] < 1:
        raise ValueError(
            f"points must be an (n, m) array of n points with m >= 1 objectives, "
            f"got shape {array.shape}"
        )
    bad = ~np.isfinite(array)
    if bad.any():
        row = int(np.argwhere(bad)[0, 0])
        raise ValueError(
            f"points must be finite, got {int(bad.sum())} non-finite entries "
            f"(the first in row {row}: {array[row].tolist()})"
        )
    return array


def _as_reference(reference: ArrayLike, num_objectives: int) -> np.ndarray:
    """``reference`` as a finite float64 ``(m,)`` array, or a ValueError."""
    array = np.asarray(reference, dtype=np.float64)
    if array.shape != (num_objectives,):
        raise ValueError(
            f"reference must have shape ({num_objectives},) to match the points' "
            f"{num_objectives} objectives, got shape {array.shape}"
        )
    if not np.isfinite(array).all():
        raise ValueError(f"reference must be finite, got {array.tolist()}")
    return array


def _pareto_mask(points: np.ndarray) -> np.ndarray:
    """Which of the distinct rows of ``points`` no other row dominates."""
    n = points.shape[0]
    dominated = np.zeros(n, dtype=bool)
    block = max(1, _DOMINANCE_BLOCK_PAIRS // max(n, 1))
    for start in range(0, n, block):
        rows = points[start : start + block, None, :]
        # others[i, k]: point k is at least as good as row i everywhere and better somewhere.
        others = np.all(points[None] >= rows, axis=-1) & np.any(points[None] > rows, axis=-1)
        dominated[start : start + block] = others.any(axis=1)
    return ~dominated


def pareto_front(points: ArrayLike) -> np.ndarray:
    """The non-dominated subset of ``points``, every objective maximised.

    A point ``p`` is dominated when some point ``q`` has ``q_j >= p_j`` for every objective
    ``j`` and ``q_j > p_j`` for at least one. Repeated points are kept once.

    Args:
      points: ``(n, m)`` array of ``n`` points with ``m >= 1`` objectives; finite.

    Returns:
      ``(k, m)`` float64 array of the non-dominated points, in the order of their first
      appearance in ``points``.

    Raises:
      ValueError: if ``points`` is not a finite ``(n, m)`` array with ``m >= 1``.
    """
    points = _as_points(points)
    _, first = np.unique(points, axis=0, return_index=True)
    distinct = points[np.sort(first)]
    return distinct[_pareto_mask(distinct)]


def _hypervolume(points: np.ndarray, reference: np.ndarray) -> float:
    """Exact hypervolume of ``points``, all of which strictly dominate ``reference``."""
    n, m = points.shape
    if n == 0:
        return 0.0
    if m == 1:
        return float(points[:, 0].max() - reference[0])
    if m == 2:
        # Sweep x from the largest down: the strip (x_{k+1}, x_k] is covered up to the
        # highest y among the first k points.
        order = np.lexsort((-points[:, 1], -points[:, 0]))
        x, y = points[order, 0], points[order, 1]
        widths = x - np.append(x[1:], reference[0])
        return float(np.sum(widths * (np.maximum.accumulate(y) - reference[1])))
    # Slice along the last objective (HSO, While et al., IEEE TEC 2006): between the k-th
    # and (k+1)-th largest last coordinates, the covered set is the (m-1)-dimensional
    # hypervolume of the first k points' projections. Their front is kept incrementally, so
    # the lower-dimensional volume is recomputed only when it changes.
    order = np.argsort(-points[:, -1], kind="stable")
    points = points[order]
    depths = points[:, -1]
    thicknesses = depths - np.append(depths[1:], reference[-1])
    front = np.empty((0, m - 1))
    volume, stale, total = 0.0, False, 0.0
    for projection, thickness in zip(points[:, :-1], thicknesses, strict=True):
        if not np.all(front >= projection, axis=1).any():
            front = np.vstack([front[~np.all(projection >= front, axis=1)], projection])
            stale = True
        if thickness > 0.0:
            if stale:
                volume, stale = _hypervolume(front, reference[:-1]), False
            total += thickness * volume
    return total


def hypervolume(points: ArrayLike, reference: ArrayLike) -> float:
    """Exact hypervolume dominated by ``points`` relative to ``reference`` (maximisation).

    .. math::
      \\mathrm{HV}(P; r) = \\lambda\\Big(\\bigcup_{p \\in P,\\, p > r} [r_1, p_1] \\times
      \\cdots \\times [r_m, p_m]\\Big),

    with :math:`\\lambda` the Lebesgue measure (Zitzler and Thiele, PPSN 1998; the
    hypervolume of PGMORL and D4MORL, whose reference point is the origin). A point that
    does not strictly dominate ``r`` in every objective contributes nothing. For ``m = 2``
    the points are swept in sorted order; for ``m >= 3`` the volume is sliced along the last
    objective (HSO, While et al., "A faster algorithm for calculating hypervolume", IEEE TEC
    2006), which costs about ``n^(m-1)`` and suits a few hundred points with ``m <= 4``.

    Args:
      points: ``(n, m)`` array of ``n`` points with ``m >= 1`` objectives; finite.
      reference: ``(m,)`` reference point ``r``; finite.

    Returns:
      The hypervolume, a float ``>= 0``; 0 when no point strictly dominates ``reference``.

    Raises:
      ValueError: if ``points`` is not a finite ``(n, m)`` array with ``m >= 1``, or
        ``reference`` is not a finite ``(m,)`` array.
    """
    points = _as_points(points)
    reference = _as_reference(reference, points.shape[1])
    points = points[np.all(points > reference, axis=1)]
    return _hypervolume(pareto_front(points), reference)


def sparsity(points: ArrayLike) -> float:
    """PGMORL's sparsity of the Pareto front of ``points`` (also D4MORL's).

    With :math:`P` the Pareto front of ``points`` (:func:`pareto_front`) and
    :math:`\\tilde P_j(i)` the :math:`i`-th smallest value of objective :math:`j` over
    :math:`P` (Xu et al., ICML 2020):

    .. math::
      S(P) = \\frac{1}{|P| - 1} \\sum_{j=1}^{m} \\sum_{i=1}^{|P|-1}
      \\big(\\tilde P_j(i) - \\tilde P_j(i + 1)\\big)^2,

    and :math:`S(P) = 0` when :math:`|P| < 2`. Smaller is denser. Repeated points count
    once: PGMORL's and PEDA's code would keep copies, which add zero gaps but grow
    :math:`|P|` and so would lower the sparsity of a front merely evaluated twice.

    Args:
      points: ``(n, m)`` array of ``n`` points with ``m >= 1`` objectives; finite.

    Returns:
      The sparsity, a float ``>= 0``.

    Raises:
      ValueError: if ``points`` is not a finite ``(n, m)`` array with ``m >= 1``.
    """
    front = pareto_front(points)
    if front.shape[0] < 2:
        return 0.0
    gaps = np.diff(np.sort(front, axis=0), axis=0)
    return float(np.sum(gaps**2) / (front.shape[0] - 1))
