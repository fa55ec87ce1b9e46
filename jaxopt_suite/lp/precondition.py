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
The row scaling depends only on ``A``, and bounds enter only through ``s_b``: every LP of
a batch that shares ``A`` and is scaled with the same ``s_b`` reuses one factorisation.
"""

from __future__ import annotations

import dataclasses

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


def _abs_max(matrix: sp.csr_array, axis: int) -> np.ndarray:
    out = np.asarray(abs(matrix).max(axis=axis).todense()).ravel()
    return out


def _finite_norm(*vectors: np.ndarray) -> float:
    parts = [v[np.isfinite(v)] for v in vectors]
    return float(np.sqrt(sum(np.sum(p * p) for p in parts)))


def precondition(
    lp: LP,
    *,
    ruiz_iterations: int = 10,
    pock_chambolle_alpha: float | None = 1.0,
    scale_bounds: bool = True,
) -> Scaling:
    """The :class:`Scaling` of ``lp`` (see the module docstring). Empty rows and columns
    keep scale 1."""
    if ruiz_iterations < 0:
        raise ValueError(f"ruiz_iterations must be >= 0, got {ruiz_iterations}")
    if pock_chambolle_alpha is not None and not 0.0 <= pock_chambolle_alpha <= 2.0:
        raise ValueError(f"pock_chambolle_alpha must lie in [0, 2], got {pock_chambolle_alpha}")
    m, n = lp.A.shape
    A = lp.A.copy()
    row, col = np.ones(m), np.ones(n)

    def apply(r, c_):
        nonlocal A, row, col
        r = np.where(r > 0, r, 1.0)
        c_ = np.where(c_ > 0, c_, 1.0)
        A = sp.csr_array(sp.diags_array(1.0 / r) @ A @ sp.diags_array(1.0 / c_))
        row, col = row * r, col * c_

    for _ in range(ruiz_iterations):
        apply(np.sqrt(_abs_max(A, 1)), np.sqrt(_abs_max(A, 0)))
    if pock_chambolle_alpha is not None:
        absolute = abs(A)
        r = np.sqrt(np.asarray((absolute.power(pock_chambolle_alpha)).sum(axis=1)).ravel())
        c_ = np.sqrt(np.asarray((absolute.power(2.0 - pock_chambolle_alpha)).sum(axis=0)).ravel())
        apply(r, c_)
    bound = objective = 1.0
    if scale_bounds:
        bound = 1.0 / (
            _finite_norm(
                lp.row_lower / row, lp.row_upper / row, lp.var_lower * col, lp.var_upper * col
            )
            + 1.0
        )
        objective = 1.0 / (float(np.linalg.norm(lp.c / col)) + 1.0)
    A.sort_indices()
    return Scaling(row, col, bound, objective, A)
