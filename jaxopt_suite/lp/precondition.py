"""Diagonal preconditioning of an LP, computed once per matrix (on the host, float64).

Order (PDLP; cuPDLPx): ``ruiz_iterations`` of Ruiz equilibration in the infinity norm, then
one Pock-Chambolle step with ``alpha``, then (optionally) bound and objective scaling. The
scaled problem is

.. math::
  \\tilde A = D_r^{-1} A D_c^{-1}, \\quad \\tilde c = s_c\\, c / D_c, \\quad
  [\\tilde\\ell_c, \\tilde u_c] = s_b [\\ell_c, u_c] / D_r, \\quad
  [\\tilde\\ell_v, \\tilde u_v] = s_b [\\ell_v, u_v] D_c,

with ``s_b = 1 / (||b|| + 1)`` (``b`` the finite row and variable bounds) and
``s_c = 1 / (||c|| + 1)``, so ``x = x~ / (s_b D_c)`` and ``y = y~ / (s_c D_r)``.

PDLP and cuPDLPx take ``b`` from the row bounds alone. With that rule the ``pwl`` suite's
branch-and-bound took 1.28x as long on the resource-allocation family (geometric mean 2.71 s
against 2.13 s, solving 9 of 11 instances against 10 within the 20 s limit; both rules in
one run, ``benchmarks.pwl_bound_scale_probe`` at edf8b87,
``probes/pwl_bound_scale_resource_allocation.json``), so the variable bounds stay in. The
price: a big-M variable bound no solution reaches makes ``s_b`` and the scaled optimum
tiny; the primal-weight update of :mod:`.pdlp` lets float64 solve such LPs, while float32
can stall at its rounding (``min -x s.t. x <= 1``, ``|x| <= 1e6`` ends ITERATION_LIMIT
with a message pointing to float64).

The row scaling depends only on ``A``, and bounds enter only through ``s_b``: every LP of
a batch that shares ``A`` and is scaled with the same ``s_b`` reuses one factorisation.

``||c||`` in ``s_c`` is the norm of the scaled costs ``|c| / D_c`` less outliers (ours): a
column whose entries are all tiny next to its cost (one coefficient of 1e-12) gets a tiny
``D_c`` and a scaled cost of ~1e12, which in the plain norm set ``s_c`` alone and shrank every
other scaled cost to rounding: ``min x_0 + x_1 s.t. x_0 + 1e-12 x_1 >= 1``, and a random
sparse LP with such a column added, ran to ITERATION_LIMIT far from their optima, in float32
and float64 alike. So the largest scaled costs are left out while each is at least
:data:`COST_OUTLIER` (1e6) times the norm of the smaller ones, and both solve
(``tests/lp/test_pdlp.py``). On the ``lp`` and ``pwl`` suites' LPs the largest scaled cost
is under twice the norm of the rest, so ``s_c`` is PDLP's there (tested too).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import scipy.sparse as sp

from jaxopt_suite.lp.problem import LP


@dataclasses.dataclass(frozen=True)
class Scaling:
    """``row`` = ``D_r`` (m,), ``col`` = ``D_c`` (n,), ``bound`` = ``s_b``,
    ``objective`` = ``s_c``, and the scaled matrix ``A`` (CSR)."""

    row: np.ndarray
    col: np.ndarray
    bound: float
    objective: float
    A: sp.csr_array

    def scale_primal(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(x) * self.col * self.bound

    def scale_dual(self, y: np.ndarray) -> np.ndarray:
        return np.asarray(y) * self.row * self.objective

    def unscale_primal(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(x) / (self.col * self.bound)

    def unscale_dual(self, y: np.ndarray) -> np.ndarray:
        return np.asarray(y) / (self.row * self.objective)


def _segment_max(values: np.ndarray, pointers: np.ndarray) -> np.ndarray:
    """Max of ``values[pointers[i]:pointers[i + 1]]`` per segment; 0 for empty ones."""
    out = np.zeros(len(pointers) - 1)
    starts = pointers[:-1]
    nonempty = starts < pointers[1:]
    if np.any(nonempty):
        # reduceat over the nonempty starts only: each runs to the next nonempty start,
        # which is its own end because empty segments hold no entries in between.
        out[nonempty] = np.maximum.reduceat(values, starts[nonempty])
    return out


def _finite_norm(*vectors: np.ndarray) -> float:
    """The 2-norm of the finite entries, computed without overflow (a bound of 1e200
    squared to inf, and the scaling derived from it to 0)."""
    parts = [v[np.isfinite(v)] for v in vectors]
    with np.errstate(over="ignore"):
        norm = float(np.sqrt(sum(np.sum(p * p) for p in parts)))
    if math.isfinite(norm):
        return norm
    finite = np.concatenate(parts)  # rescaled only where the squares overflow
    largest = float(np.max(np.abs(finite)))
    return largest * float(np.linalg.norm(finite / largest))


def equilibrate(
    A: sp.csr_array, *, ruiz_iterations: int = 10, pock_chambolle_alpha: float | None = 1.0
) -> tuple[np.ndarray, np.ndarray, sp.csr_array]:
    """Row and column scales ``(D_r, D_c)`` of ``A`` and the scaled matrix
    ``D_r^{-1} A D_c^{-1}``: Ruiz passes then one Pock-Chambolle step. Depends on ``A``
    alone, so every LP on one matrix shares it. Empty rows and columns keep scale 1.

    Works on the CSR arrays directly (row segments, and column segments through one
    stable sort), so a small matrix costs tens of microseconds per pass rather than the
    milliseconds of sparse-matrix products.
    """
    if ruiz_iterations < 0:
        raise ValueError(f"ruiz_iterations must be >= 0, got {ruiz_iterations}")
    if pock_chambolle_alpha is not None and not 0.0 <= pock_chambolle_alpha <= 2.0:
        raise ValueError(f"pock_chambolle_alpha must lie in [0, 2], got {pock_chambolle_alpha}")
    m, n = A.shape
    A = sp.csr_array(A, copy=True)
    A.sum_duplicates()
    A.eliminate_zeros()  # a stored zero is no entry: 0**0 = 1 counted it in Pock-Chambolle
    A.sort_indices()
    rows = np.repeat(np.arange(m), np.diff(A.indptr))
    cols = A.indices
    by_col = np.argsort(cols, kind="stable")
    col_ptr = np.concatenate([[0], np.cumsum(np.bincount(cols, minlength=n))])
    magnitude = np.abs(A.data).astype(np.float64)
    row, col = np.ones(m), np.ones(n)

    def apply(r, c_):
        nonlocal magnitude, row, col
        r = np.where(r > 0, r, 1.0)
        c_ = np.where(c_ > 0, c_, 1.0)
        magnitude = magnitude / (r[rows] * c_[cols])
        row, col = row * r, col * c_

    for _ in range(ruiz_iterations):
        apply(
            np.sqrt(_segment_max(magnitude, A.indptr)),
            np.sqrt(_segment_max(magnitude[by_col], col_ptr)),
        )
    if pock_chambolle_alpha is not None:
        r = np.sqrt(np.bincount(rows, magnitude**pock_chambolle_alpha, minlength=m))
        c_ = np.sqrt(np.bincount(cols, magnitude ** (2.0 - pock_chambolle_alpha), minlength=n))
        apply(r, c_)
    scaled = sp.csr_array((np.sign(A.data) * magnitude, A.indices, A.indptr), shape=(m, n))
    return row, col, scaled


def bound_objective_scales(
    lp: LP, row: np.ndarray, col: np.ndarray, scale_bounds: bool = True
) -> tuple[float, float]:
    """``(s_b, s_c)`` of ``lp`` under the matrix scales ``row``, ``col`` (1 and 1 when
    ``scale_bounds`` is off)."""
    if not scale_bounds:
        return 1.0, 1.0
    bound = 1.0 / (
        _finite_norm(lp.row_lower / row, lp.row_upper / row, lp.var_lower * col, lp.var_upper * col)
        + 1.0
    )
    objective = 1.0 / (_cost_norm(lp.c / col) + 1.0)
    return bound, objective


# a scaled cost at least this many times the norm of the smaller ones is left out of s_c
COST_OUTLIER = 1e6


def _cost_norm(scaled: np.ndarray) -> float:
    """The 2-norm of the scaled costs ``c / D_c`` that ``s_c`` normalises, leaving out the
    largest ones while each is at least :data:`COST_OUTLIER` times the norm of all smaller
    ones (module docstring)."""
    order = np.sort(np.abs(scaled))  # ascending
    below = np.sqrt(np.cumsum(order * order))  # below[k]: the norm of order[: k + 1]
    keep = order.size
    while keep > 1 and order[keep - 1] >= COST_OUTLIER * below[keep - 2] > 0:
        keep -= 1
    # with none left out, PDLP's value to the last bit (the cumulative sum rounds otherwise)
    return float(np.linalg.norm(scaled if keep == order.size else order[:keep]))


def precondition(
    lp: LP,
    *,
    ruiz_iterations: int = 10,
    pock_chambolle_alpha: float | None = 1.0,
    scale_bounds: bool = True,
) -> Scaling:
    """The :class:`Scaling` of ``lp`` (see the module docstring): :func:`equilibrate` on
    its matrix, then :func:`bound_objective_scales`."""
    row, col, scaled = equilibrate(
        lp.A, ruiz_iterations=ruiz_iterations, pock_chambolle_alpha=pock_chambolle_alpha
    )
    bound, objective = bound_objective_scales(lp, row, col, scale_bounds)
    return Scaling(row, col, bound, objective, scaled)
