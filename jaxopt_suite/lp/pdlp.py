"""``solve_lp``: restarted Halpern PDHG (PDLP / cuPDLPx style) for an :class:`LP`.

The scaled problem (:mod:`.precondition`) is solved with the reflected Halpern iteration
of Lu and Yang (r2HPDHG, arXiv 2407.16144; cuPDLPx, arXiv 2507.14051):

.. math::
  z^{k+1} = \\tfrac{k+1}{k+2}\\,(2T(z^k) - z^k) + \\tfrac{1}{k+2}\\, z^0,

where ``T`` is one PDHG step in bound form (no slacks) with ``tau = eta / omega``,
``sigma = eta * omega`` and ``eta = 0.998 / ||A||_2``. Every ``eval_every`` iterations the
PDHG point ``T(z)`` is checked on the *unscaled* problem (relative KKT, l2 norms as
cuPDLPx), for infeasibility certificates (the difference since the last restart, which
grows along a ray when the problem is infeasible), and for an adaptive restart (fixed-point
error in the PDHG norm fell below 0.2x, or below 0.5x and rising, of its value at the last
restart, or the epoch is 36% of all iterations); a restart moves the anchor to ``T(z)`` and
updates the primal weight ``omega`` by PDLP's smoothing
``log omega <- (log(||dy|| / ||dx||) + log omega) / 2``, with each distance floored at
1e-10 when the other one moved: a primal held at its bounds (``dx = 0``) while the dual
moves raises ``omega``, where PDLP's rule (no update unless both moved) left it at 1 and
the dual of ``min x s.t. 1 <= x <= 1e6`` crawled to the iteration limit.

Every solution carries a safe dual bound: the Lagrangian value of its dual iterate,
computed in float64 on the host, valid however early the solve stopped, and below the
exact value of that iterate: a margin covers the rounding of the reduced costs and of the
sums (a reduced cost whose rounding could flip its sign onto an infinite bound is computed
exactly). A reduced cost that meets an infinite variable bound is taken at the bound the
rows imply (:mod:`.bounds`), so free columns that the rows confine leave it finite.

As in HiGHS and in MPS files, the solver reads a lower side (of a row or a variable) at or
below ``-1e20`` as ``-inf`` and an upper side at or above ``1e20`` as ``+inf``
(:data:`INFINITE_BOUND`); the LP itself, its objective and the dual bound keep the values
given.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import math
import os
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp
from jax.experimental import io_callback
from jax.experimental import sparse as jsparse

from jaxopt_suite._checks import check_flag, check_integer, check_number
from jaxopt_suite.lp import native
from jaxopt_suite.lp.bounds import implied_bounds, root_implied_bounds
from jaxopt_suite.lp.operator import EllOperator, SharedOperator
from jaxopt_suite.lp.precondition import Scaling, bound_objective_scales, equilibrate
from jaxopt_suite.lp.problem import LP, _real_array
from pallas_kernels import BlockELL, BlockSizes, bsr_spmm


class Status(enum.IntEnum):
    OPTIMAL = 0
    PRIMAL_INFEASIBLE = 1
    DUAL_INFEASIBLE = 2
    ITERATION_LIMIT = 3
    TIME_LIMIT = 4
    NUMERICAL_ERROR = 5


MESSAGES = {
    Status.OPTIMAL: "optimal: relative KKT error within the tolerance",
    Status.PRIMAL_INFEASIBLE: "primal infeasible: a dual ray certifies that no x satisfies "
    "the constraints",
    Status.DUAL_INFEASIBLE: "dual infeasible: a primal ray decreases the objective without "
    "bound (the LP is unbounded if it is feasible)",
    Status.ITERATION_LIMIT: "iteration limit reached before the tolerance; raise "
    "max_iterations or loosen tolerance",
    Status.TIME_LIMIT: "time limit reached before the tolerance",
    Status.NUMERICAL_ERROR: "numerical error: the iterates became non-finite (check the data "
    "scale, or enable float64 with jax.config.update('jax_enable_x64', True))",
}
_RUNNING = -1
# appended to a float32 solve's ITERATION_LIMIT message: on degenerate LPs (many equality
# rows, fixed columns) float32 rounding can hold the gap far above the
# tolerance until the iteration limit, where float64 converges
_FLOAT32_STALL = (
    " (this solve ran in float32, whose rounding can stall the gap on degenerate LPs; "
    "jax.config.update('jax_enable_x64', True) solves in float64)"
)


class LPOptions(NamedTuple):
    # relative KKT: primal residual / (1 + ||row bounds||), dual residual / (1 + ||c||)
    # and gap / (1 + |primal| + |dual|), as cuPDLPx. Relative to the whole bound vector: a
    # row side 1e8 times the others lets a point that violates the small rows by O(1)
    # pass (min x s.t. 1 <= x <= 1e8 stops OPTIMAL at x = 0); drop such a side or tighten
    # this to resolve the small rows
    tolerance: float = 1e-4
    # a ray certifies infeasibility when its cone violation, times 1 + the size of the
    # bounds its objective uses (of the costs, for a primal ray), is at most this times its
    # objective (descent); see _certificates. Raised to 100 eps of the solve's dtype
    # (1.2e-5 in float32; float64 keeps 1e-8), below which a float32 ray cannot pass
    infeasibility_tolerance: float = 1e-8
    # checked at evaluations, every eval_every iterations: a solve stopped by it has run
    # max_iterations rounded up to a multiple of eval_every (LPSolution.iterations says so)
    max_iterations: int = 100_000
    eval_every: int = 64
    # seconds, checked at evaluations: from the start of solve_lp / solve_lp_batch (for
    # batch_advance, from each slot's batch_start or batch_refill)
    time_limit: float | None = None
    ruiz_iterations: int = 10
    pock_chambolle_alpha: float | None = 1.0
    scale_bounds: bool = True
    # "native" (the CPU kernels of lp.native: CSR times a panel, and the iterations
    # between two evaluations fused into one call), "dense", "ell"
    # (EllOperator, plain jnp gathers), "sparse" (XLA's BCOO), "block" (the Pallas
    # block-ELL kernel; interpret mode off GPU, slow there) or "auto": "native" on the CPU
    # backend where it builds, else dense when A has at most 4e6 entries and a density of
    # at least DENSE_DENSITY (DENSE_DENSITY_BATCHED in a batch), else "ell"
    matrix: str = "auto"


class LPSolution(NamedTuple):
    """Everything in the LP's minimisation form (see ``LP.objective_sign``).

    ``dual_bound`` is a valid lower bound on the optimum whatever the status: where a
    reduced cost meets an infinite variable bound, the bound the rows imply stands in
    (:func:`~jaxopt_suite.lp.bounds.implied_bounds`); ``-inf`` when no row confines such a
    column or the dual iterate puts weight on an infinite row side.

    At ``PRIMAL_INFEASIBLE``, ``y`` is the dual ray that certified it (the dual iterates'
    change since the last restart), not an iterate: :func:`infeasibility_bound` checks
    whether it proves the LP infeasible exactly."""

    x: np.ndarray
    y: np.ndarray
    reduced_costs: np.ndarray
    objective: float
    dual_bound: float
    status: Status
    message: str
    iterations: int
    primal_residual: float  # relative
    dual_residual: float  # relative
    gap: float  # relative
    seconds: float


def _power_norm(A: sp.csr_array, iterations: int = 200, seed: int = 0) -> float:
    if A.nnz == 0:
        return 1.0
    v = np.random.default_rng(seed).normal(size=A.shape[1])
    value = 0.0
    for _ in range(iterations):
        w = A.T @ (A @ v)
        new = float(np.linalg.norm(w))
        if new == 0.0:
            return 1.0
        v = w / new
        if abs(new - value) <= 1e-6 * new:
            value = new
            break
        value = new
    return float(np.sqrt(value))


@functools.partial(
    jax.tree_util.register_dataclass, data_fields=["forward", "backward"], meta_fields=[]
)
@dataclasses.dataclass(frozen=True)
class BlockOperator(SharedOperator):
    """``A`` and ``A^T`` as block-ELL matrices; ``@`` goes through the Pallas kernel."""

    forward: BlockELL
    backward: BlockELL

    @classmethod
    def from_scipy(cls, A, block_sizes: BlockSizes | None = None, dtype=None) -> BlockOperator:
        block_sizes = BlockSizes() if block_sizes is None else block_sizes
        transposed = BlockSizes(block_sizes.bn, block_sizes.bm)
        return cls(
            BlockELL.from_scipy(A, block_sizes, dtype),
            BlockELL.from_scipy(sp.csr_array(A).T, transposed, dtype),
        )

    @staticmethod
    def vector(matrix: BlockELL, x: jax.Array) -> jax.Array:
        return bsr_spmm(matrix, x[:, None])[:, 0]

    @staticmethod
    def panel(matrix: BlockELL, x: jax.Array) -> jax.Array:
        return bsr_spmm(matrix, x)


# matrix="auto" stores A dense (at most 4e6 entries) from this density on, for one LP and
# for a batch. A dense product streams every entry at full vector speed, a gather costs
# several times more per stored entry; batched, XLA on CPU also fuses the producer of the
# vector into the gather, so the dense product wins down to lower densities there.
DENSE_DENSITY = 0.1
DENSE_DENSITY_BATCHED = 0.02
MATRIX_KINDS = ("auto", "dense", "ell", "sparse", "block", "native")


def _matrix_kind(A: sp.csr_array, kind: str, batched: bool) -> str:
    if kind not in MATRIX_KINDS:
        raise ValueError(f"matrix must be one of {MATRIX_KINDS}, got {kind!r}")
    if 0 in A.shape and kind in ("ell", "block"):
        return "dense"  # no rows or no columns: nothing for a sparse layout to hold
    if kind != "auto":
        return kind
    if jax.default_backend() == "cpu" and native.available():
        return "native"
    size = A.shape[0] * A.shape[1]
    density = DENSE_DENSITY_BATCHED if batched else DENSE_DENSITY
    return "dense" if size <= 4_000_000 and A.nnz >= density * size else "ell"


def _device_matrix(A: sp.csr_array, kind: str, dtype):
    if kind == "native":
        if jax.default_backend() != "cpu":
            raise ValueError(
                f"matrix='native' is a CPU kernel; the default backend is {jax.default_backend()}"
            )
        return native.NativeOperator.from_scipy(A, dtype)
    if kind == "block":
        return BlockOperator.from_scipy(A, dtype=dtype)
    if kind == "sparse":
        return jsparse.BCOO.from_scipy_sparse(A.astype(dtype))
    if kind == "dense":
        return jnp.asarray(A.toarray(), dtype)
    return EllOperator.from_scipy(A, dtype)


class _Data(NamedTuple):
    A: Any
    c: jax.Array
    row_lower: jax.Array
    row_upper: jax.Array
    var_lower: jax.Array
    var_upper: jax.Array
    row: jax.Array  # D_r / s_b: A x = row * (A~ x~)
    col: jax.Array  # D_c / s_c: A^T y = col * (A~^T y~)
    x_unscale: jax.Array  # x = x~ * x_unscale
    y_unscale: jax.Array  # y = y~ * y_unscale
    c_raw: jax.Array
    row_lower_raw: jax.Array
    row_upper_raw: jax.Array
    var_lower_raw: jax.Array
    var_upper_raw: jax.Array
    eta: jax.Array
    # a batch's tolerance and iteration limit per slot, (1, B) (batch_refill may set a
    # slot's own); None for one LP, whose tolerance and limit are the limits' (_limits)
    tolerance: jax.Array | None = None
    max_iterations: jax.Array | None = None  # int32


# the solver reads a lower side <= -INFINITE_BOUND or an upper one >= it as infinite
INFINITE_BOUND = 1e20


def _infinite_beyond(lower: np.ndarray, upper: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(lower, upper)`` with sides beyond :data:`INFINITE_BOUND` made infinite."""
    return (
        np.where(lower <= -INFINITE_BOUND, -np.inf, lower),
        np.where(upper >= INFINITE_BOUND, np.inf, upper),
    )


@functools.lru_cache(maxsize=16)
def _solver_view(lp: LP) -> LP:
    """``lp`` as the solver reads it: a lower side (row or variable) at or below
    ``-INFINITE_BOUND`` is ``-inf``, an upper one at or above ``INFINITE_BOUND`` is ``+inf``,
    as HiGHS and MPS read them. A big-M bound of 1e30 otherwise set the bound scaling and
    the solve stalled (ITERATION_LIMIT at a point far from the optimum); 1e200 overflowed it.
    The solution, its objective and its safe dual bound are still those of ``lp``."""
    rows = _infinite_beyond(lp.row_lower, lp.row_upper)
    cols = _infinite_beyond(lp.var_lower, lp.var_upper)
    given = (lp.row_lower, lp.row_upper, lp.var_lower, lp.var_upper)
    same = all(np.array_equal(a, b) for a, b in zip((*rows, *cols), given, strict=True))
    if same:
        return lp
    return dataclasses.replace(
        lp, row_lower=rows[0], row_upper=rows[1], var_lower=cols[0], var_upper=cols[1]
    )


def _prepare(lp: LP, options: LPOptions, batched: bool = False) -> tuple[_Data, Scaling]:
    """The device data of ``lp`` (its :func:`_solver_view`); ``batched``: the shared vectors
    as columns ``(k, 1)`` (the per-instance fields are then replaced by ``(k, B)`` ones)."""
    lp = _solver_view(lp)
    return _prepare_cached(
        lp,
        options.ruiz_iterations,
        options.pock_chambolle_alpha,
        options.scale_bounds,
        _matrix_kind(lp.A, options.matrix, batched),
        jnp.result_type(float),
        batched,
    )


class _MatrixKey:
    """Hashes a CSR matrix by content, so LPs built separately on one matrix (the
    sequential solves of a batch, the polishes of one set of pairs in a branch-and-bound)
    share its preconditioning and device copy."""

    __slots__ = ("A", "digest")

    def __init__(self, A: sp.csr_array) -> None:
        self.A = A
        h = hashlib.blake2b(digest_size=20)
        for part in (np.asarray(A.shape, np.int64), A.indptr, A.indices, A.data):
            h.update(np.ascontiguousarray(part).view(np.uint8))
            h.update(str(part.dtype).encode())
        self.digest = h.digest()

    def __hash__(self) -> int:
        return hash(self.digest)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _MatrixKey) and self.digest == other.digest


@functools.lru_cache(maxsize=8)
def _equilibrated(key: _MatrixKey, ruiz_iterations, pock_chambolle_alpha):
    """Row and column scales, the scaled matrix and the PDHG step of one matrix."""
    row, col, scaled = equilibrate(
        key.A, ruiz_iterations=ruiz_iterations, pock_chambolle_alpha=pock_chambolle_alpha
    )
    return row, col, scaled, 0.998 / _power_norm(scaled)


@functools.lru_cache(maxsize=8)
def _device_copy(key: _MatrixKey, ruiz_iterations, pock_chambolle_alpha, matrix, dtype):
    scaled = _equilibrated(key, ruiz_iterations, pock_chambolle_alpha)[2]
    return _device_matrix(scaled, matrix, dtype)


@functools.lru_cache(maxsize=16)
def _prepare_cached(
    lp, ruiz_iterations, pock_chambolle_alpha, scale_bounds, matrix, dtype, batched
):
    """Device data of one LP (an LP is immutable and hashes by identity), so repeated and
    warm-started solves of it reuse them; the matrix part is shared by content."""
    key = _MatrixKey(lp.A)
    row, col, scaled, eta = _equilibrated(key, ruiz_iterations, pock_chambolle_alpha)
    s_b, s_c = bound_objective_scales(lp, row, col, scale_bounds)
    scaling = Scaling(row, col, s_b, s_c, scaled)
    vectors = {
        "c": s_c * lp.c / scaling.col,
        "row_lower": s_b * lp.row_lower / scaling.row,
        "row_upper": s_b * lp.row_upper / scaling.row,
        "var_lower": s_b * lp.var_lower * scaling.col,
        "var_upper": s_b * lp.var_upper * scaling.col,
        "row": scaling.row / s_b,
        "col": scaling.col / s_c,
        "x_unscale": 1.0 / (s_b * scaling.col),
        "y_unscale": 1.0 / (s_c * scaling.row),
        "c_raw": lp.c,
        "row_lower_raw": lp.row_lower,
        "row_upper_raw": lp.row_upper,
        "var_lower_raw": lp.var_lower,
        "var_upper_raw": lp.var_upper,
        "eta": np.float64(eta),
    }
    if batched:
        vectors = {k: np.reshape(v, (-1, 1)) if np.ndim(v) else v for k, v in vectors.items()}
    # one transfer for all vectors (a device_put per array costs more than the data)
    on_device = jax.device_put({k: np.asarray(v, dtype) for k, v in vectors.items()})
    A = _device_copy(key, ruiz_iterations, pock_chambolle_alpha, matrix, dtype)
    return _Data(A=A, **on_device), scaling


def clear_caches() -> None:
    """Drops the cached preconditioning and device data of earlier LPs and matrices (a
    solve of a new matrix then pays for them again)."""
    caches = (
        _prepare_cached,
        _device_copy,
        _equilibrated,
        _batched_advance,
        _batched_narrowing,
        _solver_view,
    )
    for cached in (*caches, _limits):
        cached.cache_clear()


def _finite_part(v):
    return jnp.where(jnp.isfinite(v), v, 0.0)


# The solver's arithmetic works on one instance (vectors ``(n,)``, scalars ``()``) and on a
# batch in columns (``(n, B)`` iterates, ``(1, B)`` per-instance scalars, shared vectors as
# ``(n, 1)``): every reduction runs over axis 0, keeping it in a batch. A batch in columns
# makes each product one ``(n, B)`` panel with no transposes around it, which ``vmap`` of
# the single solver could not avoid (more time per iteration on CPU).


def _total(v):
    return jnp.sum(v, axis=0, keepdims=v.ndim > 1)


def _dot(a, b):
    return _total(a * b)


def _norm(v):
    return jnp.sqrt(_dot(v, v))


def _pdhg(data: _Data, x, y, omega):
    """One PDHG step ``T(x, y)`` on the scaled problem; returns ``(x+, y+)``."""
    tau, sigma = data.eta / omega, data.eta * omega
    x_new = jnp.clip(x - tau * (data.c - data.A.T @ y), data.var_lower, data.var_upper)
    t = y / sigma - data.A @ (2.0 * x_new - x)
    y_new = sigma * (t - jnp.clip(t, -data.row_upper, -data.row_lower))
    return x_new, y_new


def _pdhg_error(data: _Data, dx, dy, omega):
    """``eta``-scaled norm of ``(dx, dy)`` in the metric in which :func:`_pdhg` is firmly
    nonexpansive: ``omega |dx|^2 + |dy|^2 / omega + 2 eta dy.(A dx)``. (The step is
    Chambolle-Pock's with operator ``-A``, whose metric ``|dx|^2/tau + |dy|^2/sigma -
    2 dy.(K dx)`` has this plus sign.) The restart test compares fixed-point errors in it."""
    value = omega * _dot(dx, dx) + _dot(dy, dy) / omega + 2.0 * data.eta * _dot(dy, data.A @ dx)
    return jnp.sqrt(jnp.maximum(value, 0.0))


def _safe_norm(v):
    """l2 norm over axis 0 (as :func:`_norm`) that neither overflows nor underflows in
    float32: finite bounds up to 1e20 square past float32's range."""
    top = jnp.max(jnp.abs(v), axis=0, keepdims=v.ndim > 1, initial=0.0)
    unit = jnp.where(top > 0.0, top, 1.0)
    return unit * _norm(v / unit)


def _kkt(data: _Data, x_s, y_s):
    """Relative primal / dual residuals and gap of the unscaled point (l2, as cuPDLPx)."""
    x, y = x_s * data.x_unscale, y_s * data.y_unscale
    ax = data.row * (data.A @ x_s)
    aty = data.col * (data.A.T @ y_s)
    lam = data.c_raw - aty
    lc, uc = data.row_lower_raw, data.row_upper_raw
    lv, uv = data.var_lower_raw, data.var_upper_raw
    primal_violation = ax - jnp.clip(ax, lc, uc)
    # the bounds' norm counts an equality row's right-hand side once (as cuPDLPx)
    b = jnp.concatenate([jnp.where(lc != uc, _finite_part(lc), 0.0), _finite_part(uc)])
    primal = _safe_norm(primal_violation) / (1.0 + _safe_norm(b))
    # lambda may be positive only at a finite lower bound, negative only at a finite upper.
    dual_violation = jnp.where(jnp.isfinite(lv), 0.0, jnp.maximum(lam, 0.0)) + jnp.where(
        jnp.isfinite(uv), 0.0, jnp.minimum(lam, 0.0)
    )
    dual = _safe_norm(dual_violation) / (1.0 + _safe_norm(data.c_raw))
    primal_obj = _dot(data.c_raw, x)
    lam_ok = lam - dual_violation
    dual_obj = _total(
        jnp.maximum(y, 0.0) * _finite_part(lc) - jnp.maximum(-y, 0.0) * _finite_part(uc)
    ) + _total(
        jnp.maximum(lam_ok, 0.0) * _finite_part(lv) - jnp.maximum(-lam_ok, 0.0) * _finite_part(uv)
    )
    gap = jnp.abs(primal_obj - dual_obj) / (1.0 + jnp.abs(primal_obj) + jnp.abs(dual_obj))
    return primal, dual, gap


def _weighted_scale(weight_sides):
    """``sum |w| |side| / sum |w|`` over axis 0 for pairs ``(w, side)`` (sides finite where
    ``w`` is nonzero; 0 when every ``w`` is): the size of the data a ray's objective is
    made of, weighted by the ray."""
    top = sum(_total(jnp.abs(w) * jnp.abs(_finite_part(side))) for w, side in weight_sides)
    weight = sum(_total(jnp.abs(w)) for w, _ in weight_sides)
    return top / jnp.maximum(weight, 1e-30)


def _certificates(data: _Data, dx_s, dy_s, tol):
    """Whether the differences since the last restart certify infeasibility.

    A unit dual ray ``dy`` whose cone violation is ``V`` and objective ``R > 0`` says only
    that a feasible ``x`` has ``|x| >= R / V`` or so (``R <= V |x|`` for every feasible
    ``x``), and ``R`` grows with the bounds it is made of: with rows ``x_1 >= 1e9`` a ray
    of the early iterates had ``V / R`` of 1e-9, under the tolerance, on a feasible LP. So
    the test is ``V (1 + B) <= tol R``, ``B`` the magnitude of the bounds in ``R`` weighted
    by the ray's entries on them (:func:`_weighted_scale`; a large bound that the ray does
    not use leaves it alone); likewise ``V (1 + C) <= tol D`` for a primal ray of descent
    ``D``, ``C`` the costs weighted by the ray. A heuristic at the data's scale, as every
    first-order certificate is, not a proof.

    ``R`` and ``D`` must also stand above their own rounding: above ``8 u sqrt(m + n + 1)``
    (``u`` the working float's machine epsilon) times the sum of the sizes of their terms.
    Where the feasible set is one point (``x = 0`` pinned, a PWL argument at the end of its
    breakpoints), the dual iterates run off along a ray whose exact objective is 0 and whose
    violation is 0; its computed objective, rounding well under ``u`` of its terms' size,
    came out positive, and a feasible LP was reported PRIMAL_INFEASIBLE (float32 and
    float64; ``tests/lp/test_pdlp.py``). A genuine certificate stands far above the floor:
    for ``x >= 1, x <= 1 - 1e-3`` the ray ``(1, -1) / sqrt(2)`` has objective
    ``1e-3 / sqrt(2)``, 5e-4 of its terms' size."""
    m, n = data.row_lower_raw.shape[0], data.var_lower_raw.shape[0]
    floor = 8.0 * float(jnp.finfo(data.c.dtype).eps) * math.sqrt(m + n + 1)
    dx, dy = dx_s * data.x_unscale, dy_s * data.y_unscale
    lc, uc = data.row_lower_raw, data.row_upper_raw
    lv, uv = data.var_lower_raw, data.var_upper_raw
    # Dual ray dy (primal infeasibility): -A^T dy in the cone of the variable bounds, and
    # sum(dy+ lc - dy- uc) + sum(lam+ lv - lam- uv) > 0.
    dy_norm = jnp.maximum(_norm(dy), 1e-30)
    dyn = dy / dy_norm
    lam = -data.col * (data.A.T @ dy_s) / dy_norm
    bad_dy = jnp.where(jnp.isfinite(lc), 0.0, jnp.maximum(dyn, 0.0)) + jnp.where(
        jnp.isfinite(uc), 0.0, jnp.minimum(dyn, 0.0)
    )
    bad_lam = jnp.where(jnp.isfinite(lv), 0.0, jnp.maximum(lam, 0.0)) + jnp.where(
        jnp.isfinite(uv), 0.0, jnp.minimum(lam, 0.0)
    )
    dyn_ok, lam_ok = dyn - bad_dy, lam - bad_lam
    row_terms = jnp.maximum(dyn_ok, 0.0) * _finite_part(lc) - jnp.maximum(
        -dyn_ok, 0.0
    ) * _finite_part(uc)
    col_terms = jnp.maximum(lam_ok, 0.0) * _finite_part(lv) - jnp.maximum(
        -lam_ok, 0.0
    ) * _finite_part(uv)
    ray_obj = _total(row_terms) + _total(col_terms)
    ray_size = _total(jnp.abs(row_terms)) + _total(jnp.abs(col_terms))
    violation = jnp.sqrt(_dot(bad_dy, bad_dy) + _dot(bad_lam, bad_lam))
    # (dyn_ok is positive only where lc is finite and negative only where uc is: the sides
    # its objective uses; lam_ok likewise with lv, uv)
    bound_scale = 1.0 + _weighted_scale(
        [
            (jnp.maximum(dyn_ok, 0.0), lc),
            (jnp.maximum(-dyn_ok, 0.0), uc),
            (jnp.maximum(lam_ok, 0.0), lv),
            (jnp.maximum(-lam_ok, 0.0), uv),
        ]
    )
    primal_infeasible = (
        (ray_obj > floor * ray_size)
        & (violation * bound_scale <= tol * ray_obj)
        & (dy_norm > 1e-12)
    )
    # Primal ray dx (dual infeasibility): c^T dx < 0, A dx in the rows' recession cone,
    # dx in the variable bounds' recession cone.
    dx_norm = jnp.maximum(_norm(dx), 1e-30)
    dxn = dx / dx_norm
    adx = data.row * (data.A @ dx_s) / dx_norm
    row_bad = jnp.where(jnp.isfinite(lc), jnp.minimum(adx, 0.0), 0.0) + jnp.where(
        jnp.isfinite(uc), jnp.maximum(adx, 0.0), 0.0
    )
    var_bad = jnp.where(jnp.isfinite(lv), jnp.minimum(dxn, 0.0), 0.0) + jnp.where(
        jnp.isfinite(uv), jnp.maximum(dxn, 0.0), 0.0
    )
    descent = -_dot(data.c_raw, dxn)
    descent_size = _total(jnp.abs(data.c_raw * dxn))
    cost_scale = 1.0 + _weighted_scale([(dxn, data.c_raw)])
    violation = jnp.sqrt(_dot(row_bad, row_bad) + _dot(var_bad, var_bad))
    dual_infeasible = (
        (descent > floor * descent_size)
        & (violation * cost_scale <= tol * descent)
        & (dx_norm > 1e-12)
    )
    return primal_infeasible, dual_infeasible


class _State(NamedTuple):
    x: jax.Array
    y: jax.Array
    x_anchor: jax.Array
    y_anchor: jax.Array
    omega: jax.Array
    inner: jax.Array  # iterations since the last restart
    iterations: jax.Array
    error_restart: jax.Array  # fixed-point error at the last restart
    error_last: jax.Array  # at the last evaluation
    status: jax.Array
    x_out: jax.Array
    y_out: jax.Array
    residuals: jax.Array  # (primal, dual, gap) at the last evaluation


# Time limits are deadlines on the host's perf_counter clock, passed into the jitted loop
# as arrays shaped like the status (one per instance of a batch): whole seconds as int32
# and the fraction as float32, so the float32 arithmetic of x64-disabled jax keeps them to
# the microsecond however long the machine has been up. Deadlines, not a clock started by
# each call, because one solve makes many calls (the compacting batch loop advances a few
# evaluations at a time, continuous batching advances between refills) and concurrent
# thread groups run the same compiled loop.
_INT32_MAX = int(np.iinfo(np.int32).max)  # loop counters and deadlines are int32
_MAX_DEADLINE = float(_INT32_MAX)


def _deadline(started, time_limit: float | None):
    """``(whole seconds int32, fraction float32)`` of ``started + time_limit`` (host
    perf_counter values, any shape), or ``None`` without a time limit."""
    if time_limit is None:
        return None
    end = np.minimum(np.asarray(started, np.float64) + float(time_limit), _MAX_DEADLINE)
    whole = np.floor(end)
    return whole.astype(np.int32), (end - whole).astype(np.float32)


def _seconds_left(whole, fraction, _iterations):
    """Host callback: seconds left until the deadline (negative once past it)."""
    now = time.perf_counter()
    # jax may hand the operands over as its own arrays: float64 arithmetic needs numpy's
    whole, fraction = np.asarray(whole, np.float64), np.asarray(fraction, np.float64)
    return np.asarray(whole - now + fraction, np.float32)


def _initial_state(x0: jax.Array, y0: jax.Array) -> _State:
    """Fresh state at ``(x0, y0)``: vectors ``(n,)`` / ``(m,)``, or a batch in columns."""
    dtype = x0.dtype
    lanes = (1, *x0.shape[1:]) if x0.ndim > 1 else ()
    zero = jnp.zeros(lanes, jnp.int32)
    return _State(
        x=x0,
        y=y0,
        x_anchor=x0,
        y_anchor=y0,
        omega=jnp.ones(lanes, dtype),
        inner=zero,
        iterations=zero,
        error_restart=jnp.full(lanes, jnp.inf, dtype),
        error_last=jnp.full(lanes, jnp.inf, dtype),
        status=jnp.full(lanes, _RUNNING, jnp.int32),
        x_out=x0,
        y_out=y0,
        residuals=jnp.full((3, *x0.shape[1:]), jnp.inf, dtype),
    )


def _solve(data: _Data, x0, y0, options: LPOptions, deadline, limits):
    return _advance(data, _initial_state(x0, y0), options, None, deadline, limits)


@functools.lru_cache(maxsize=64)
def _limits(options: LPOptions, dtype) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(tolerance, infeasibility_tolerance, max_iterations)``: traced arguments of the
    compiled loops, so a new value does not compile them again (:func:`_compiled_options`);
    the tolerances in the data's ``dtype``, as the residuals they are compared with. Cached:
    a branch-and-bound advances its batch thousands of times, and three transfers a call
    took a sixth of its time at one slot.

    ``infeasibility_tolerance`` is at least ``100 eps`` of ``dtype``: at float32's 1.2e-7
    rounding the default 1e-8 let no certificate pass, and infeasible or unbounded LPs as
    small as 2 x 2 ran to the iteration limit or ended in NUMERICAL_ERROR."""
    floor = 100.0 * float(jnp.finfo(dtype).eps)
    return (
        jnp.asarray(options.tolerance, dtype),
        jnp.asarray(max(float(options.infeasibility_tolerance), floor), dtype),
        jnp.asarray(min(int(options.max_iterations), _INT32_MAX), jnp.int32),
    )


def _advance(data: _Data, init: _State, options: LPOptions, evaluations, deadline, limits):
    """Runs ``init`` until it stops, or for at most ``evaluations`` evaluation periods;
    ``deadline`` (:func:`_deadline`, shaped like the status) when ``options.time_limit``
    is set; ``limits`` from :func:`_limits`."""
    frozen_body = _frozen_body(data, options, deadline, limits)
    if evaluations is None:
        return jax.lax.while_loop(lambda s: jnp.any(s.status == _RUNNING), frozen_body, init)

    def limited(carry):
        state, count = carry
        return jnp.any(state.status == _RUNNING) & (count < evaluations)

    state, _ = jax.lax.while_loop(
        limited, lambda c: (frozen_body(c[0]), c[1] + 1), (init, jnp.zeros([], jnp.int32))
    )
    return state


def _halpern_steps(data: _Data, x, y, x_anchor, y_anchor, omega, inner, steps: int):
    """``steps`` restarted-Halpern iterations from ``(x, y)``: the PDHG step
    :func:`_pdhg` reflected and averaged towards the anchor with weight
    ``(inner + k + 1) / (inner + k + 2)`` at step ``k``; returns ``(x, y)``. With the
    native matrix, one call of the fused CPU kernel (:func:`native.halpern_steps`, the
    same arithmetic, tested against this loop)."""
    if isinstance(data.A, native.NativeOperator):
        return native.halpern_steps(
            data.A,
            data.c,
            data.var_lower,
            data.var_upper,
            data.row_lower,
            data.row_upper,
            x,
            y,
            x_anchor,
            y_anchor,
            data.eta / omega,
            data.eta * omega,
            inner,
            steps,
        )

    def halpern(k, carry):
        x, y = carry
        xt, yt = _pdhg(data, x, y, omega)
        w = (inner + k + 1.0) / (inner + k + 2.0)
        x = w * (2.0 * xt - x) + (1.0 - w) * x_anchor
        y = w * (2.0 * yt - y) + (1.0 - w) * y_anchor
        return x, y

    return jax.lax.fori_loop(0, steps, halpern, (x, y))


def _frozen_body(data: _Data, options: LPOptions, deadline, limits):
    """One evaluation period (``options.eval_every`` PDHG iterations, then the restart,
    termination and primal-weight updates) as ``state -> state``; in a batch, stopped
    instances keep their state."""
    freq = int(options.eval_every)
    dtype = data.c.dtype
    tol, infeasibility_tol, max_iterations = limits
    if data.tolerance is not None:  # a batch: each slot's own
        tol, max_iterations = data.tolerance, data.max_iterations

    def body(s: _State) -> _State:
        x, y = _halpern_steps(
            data, s.x, s.y, s.x_anchor, s.y_anchor, s.omega, s.inner.astype(dtype), freq
        )
        iterations = s.iterations + freq
        inner_count = s.inner + freq
        xt, yt = _pdhg(data, x, y, s.omega)
        error = _pdhg_error(data, x - xt, y - yt, s.omega)
        primal, dual, gap = _kkt(data, xt, yt)
        optimal = (primal <= tol) & (dual <= tol) & (gap <= tol)
        p_inf, d_inf = _certificates(data, xt - s.x_anchor, yt - s.y_anchor, infeasibility_tol)
        finite = jnp.isfinite(error) & jnp.isfinite(primal + dual + gap)
        status = jnp.where(optimal, int(Status.OPTIMAL), _RUNNING).astype(jnp.int32)
        status = jnp.where((status == _RUNNING) & p_inf, int(Status.PRIMAL_INFEASIBLE), status)
        status = jnp.where((status == _RUNNING) & d_inf, int(Status.DUAL_INFEASIBLE), status)
        status = jnp.where(finite, status, int(Status.NUMERICAL_ERROR))
        status = jnp.where(
            (status == _RUNNING) & (iterations >= max_iterations),
            int(Status.ITERATION_LIMIT),
            status,
        )
        if options.time_limit is not None:
            # a host callback takes the call off jax's C++ dispatch path (a slower call),
            # so the clock is read only when a time limit needs it
            whole, fraction = deadline
            left = io_callback(
                _seconds_left,
                jax.ShapeDtypeStruct(whole.shape, jnp.float32),
                whole,
                fraction,
                iterations,
            )
            status = jnp.where(
                (status == _RUNNING) & (left <= 0.0),
                int(Status.TIME_LIMIT),
                status,
            )
        restart = (
            (error <= 0.2 * s.error_restart)
            | ((error <= 0.5 * s.error_restart) & (error > s.error_last))
            | (inner_count >= 0.36 * iterations)
        )
        dx = _norm(xt - s.x_anchor)
        dy = _norm(yt - s.y_anchor)
        floor = 1e-10
        smooth = jnp.exp(
            0.5 * jnp.log(jnp.maximum(dy, floor) / jnp.maximum(dx, floor)) + 0.5 * jnp.log(s.omega)
        )
        ok = ((dx > floor) | (dy > floor)) & jnp.isfinite(smooth)
        omega = jnp.where(restart & ok, smooth, s.omega)
        return _State(
            x=jnp.where(restart, xt, x),
            y=jnp.where(restart, yt, y),
            x_anchor=jnp.where(restart, xt, s.x_anchor),
            y_anchor=jnp.where(restart, yt, s.y_anchor),
            omega=omega,
            inner=jnp.where(restart, 0, inner_count),
            iterations=iterations,
            error_restart=jnp.where(restart, error, s.error_restart),
            error_last=error,
            status=status.astype(jnp.int32),
            x_out=xt,
            # at PRIMAL_INFEASIBLE the certificate: the ray the test above passed (a warm
            # start's iterate, far from the ray's size, proves nothing)
            y_out=jnp.where(status == int(Status.PRIMAL_INFEASIBLE), yt - s.y_anchor, yt),
            residuals=jnp.concatenate([jnp.atleast_1d(v) for v in (primal, dual, gap)]).astype(
                dtype
            ),
        )

    def frozen_body(s: _State) -> _State:
        # a batch runs while any instance runs; the stopped ones keep their state
        new = body(s)
        if s.x.ndim == 1:
            return new
        running = s.status == _RUNNING
        return jax.tree.map(lambda a, b: jnp.where(running, a, b), new, s)

    return frozen_body


# narrowest batch the run-to-the-end loop narrows into: below about this width the batched
# step costs about the same whatever the width (on CPU, per-operation overhead dominates),
# and each width compiles the loop's body once more
_NARROW_MIN = 8


def _narrowing_widths(size: int) -> tuple[int, ...]:
    """The widths a batch of ``size`` slots narrows through when run to the end
    (:func:`_advance_narrowing`): quarters while they hold at least ``_NARROW_MIN`` slots."""
    widths = []
    while size // 4 >= _NARROW_MIN:
        size //= 4
        widths.append(size)
    return tuple(widths)


def _advance_narrowing(data: _Data, init: _State, options: LPOptions, deadline, limits, widths):
    """Runs the batch ``init`` until every slot stops, narrowing in the compiled loop: while
    more than ``widths[0]`` slots run, all of them advance; then the running ones (padded
    with stopped ones) are gathered into a batch of ``widths[0]`` slots that goes on the
    same way with ``widths[1:]``, and is scattered back when it stops. A stopped slot costs
    a running one's arithmetic in a batched step, and the slowest instances of a batch may
    take twice the mean's iterations (the lp suite's batch of 64 did); narrowing here needs
    no return to the host between the stages."""
    frozen_body = _frozen_body(data, options, deadline, limits)
    if not widths:
        return jax.lax.while_loop(lambda s: jnp.any(s.status == _RUNNING), frozen_body, init)
    width = widths[0]
    state = jax.lax.while_loop(lambda s: jnp.sum(s.status == _RUNNING) > width, frozen_body, init)
    # running slots first (a stable sort keeps the order among them)
    pick = jnp.argsort(state.status.reshape(-1) != _RUNNING, stable=True)[:width]
    take = functools.partial(jax.tree.map, lambda a: a[..., pick])
    fields = take({k: getattr(data, k) for k in _BATCHED_FIELDS})
    narrow = _advance_narrowing(
        data._replace(**fields),
        take(state),
        options,
        None if deadline is None else take(deadline),
        limits,
        widths[1:],
    )
    return jax.tree.map(lambda a, b: a.at[..., pick].set(b), state, narrow)


_solve_jit = jax.jit(_solve, static_argnums=3)


def _compiled_options(options: LPOptions) -> LPOptions:
    """``options`` as a compiled loop's static key: the loop reads the time limit only as
    the ``deadline`` argument and whether there is one, and the tolerances and iteration
    limit as the ``limits`` argument (:func:`_limits`), so all of them map to one key and a
    new value (a branch-and-bound's time left, a tighter tolerance) does not compile the
    loop again."""
    fixed = options._replace(tolerance=1.0, infeasibility_tolerance=1.0, max_iterations=1)
    return fixed if options.time_limit is None else fixed._replace(time_limit=1.0)


def _check_options(options: LPOptions) -> LPOptions:
    """``options`` with Python numbers (they key compiled functions and caches, where a jax
    scalar does not hash), or a ValueError naming the first bad one."""
    if not isinstance(options, LPOptions):
        raise TypeError(f"options must be an LPOptions, got {type(options).__name__}")
    # an infinite tolerance called an infeasible point OPTIMAL, an infinite infeasibility
    # tolerance certified a boxed LP unbounded
    tolerance = check_number(
        "tolerance", options.tolerance, "be finite and > 0", lambda v: 0 < v < math.inf
    )
    infeasibility = check_number(
        "infeasibility_tolerance",
        options.infeasibility_tolerance,
        "be finite and > 0",
        lambda v: 0 < v < math.inf,
    )
    # counts are loop bounds in int32: integers (a float would be truncated where the loop
    # is traced: 2.5 ran periods of 2), not bools, not beyond int32
    counts = {}
    for name, minimum in (("max_iterations", 1), ("eval_every", 1), ("ruiz_iterations", 0)):
        value = check_integer(name, getattr(options, name), minimum)
        if value > _INT32_MAX:
            raise ValueError(f"{name} must be at most {_INT32_MAX}, got {value}")
        counts[name] = value
    if options.matrix not in MATRIX_KINDS:
        raise ValueError(f"matrix must be one of {MATRIX_KINDS}, got {options.matrix!r}")
    time_limit = options.time_limit
    if time_limit is not None:
        time_limit = check_number("time_limit", time_limit, "be > 0 (or None)", lambda v: v > 0)
    alpha = options.pock_chambolle_alpha
    if alpha is not None:
        alpha = check_number(
            "pock_chambolle_alpha", alpha, "lie in [0, 2] (or None)", lambda v: 0 <= v <= 2
        )
    return options._replace(
        tolerance=tolerance,
        infeasibility_tolerance=infeasibility,
        time_limit=time_limit,
        pock_chambolle_alpha=alpha,
        scale_bounds=check_flag("scale_bounds", options.scale_bounds),  # "no" read as true
        **counts,
    )


def _real(name: str, value: Any) -> np.ndarray:
    """``value`` as float64, or a ``ValueError`` unless it holds real numbers (a complex
    one lost its imaginary part with only a warning, strings became numbers), as the
    :class:`LP` checks its own data."""
    _real_array(name, value)
    return np.asarray(value, np.float64)


def _representable(name: str, scaled: np.ndarray, dtype) -> None:
    """A ``ValueError`` where a finite warm start overflows the solver's float type once
    scaled (it ran to NUMERICAL_ERROR with NaN iterates)."""
    limit = float(np.finfo(dtype).max)
    with np.errstate(invalid="ignore"):
        big = np.isfinite(scaled) & (np.abs(scaled) > limit)
    if big.any():
        index = tuple(int(i) for i in np.argwhere(big)[0])
        where = index[0] if len(index) == 1 else f"instance {index[0]}, index {index[1]}"
        raise ValueError(
            f"{name} at {where} is {scaled[index]:.3g} once scaled, beyond the solver's "
            f"{np.dtype(dtype).name} range ({limit:.3g}): give smaller values, or solve in "
            "float64 (jax.config.update('jax_enable_x64', True))"
        )


def _warm_vector(name, value, size):
    v = _real(name, value)
    if v.shape != (size,):
        raise ValueError(f"{name} must have shape ({size},), got {v.shape}")
    if not np.all(np.isfinite(v)):
        raise ValueError(f"{name} must be finite")
    return v


def _checked_y(lp: LP, y: Any) -> np.ndarray:
    """``y`` as a float64 vector of ``lp``'s rows, or the error naming what is wrong."""
    if not isinstance(lp, LP):
        raise TypeError(f"lp must be an LP, got {type(lp).__name__}")
    y = _real("y", y)
    m = lp.A.shape[0]
    if y.shape != (m,):
        raise ValueError(f"y must have shape ({m},), got {y.shape}")
    return y


def dual_bound(lp: LP, y: np.ndarray) -> tuple[float, np.ndarray]:
    """``(bound, reduced costs)``: the Lagrangian lower bound of ``y`` (float64, below the
    exact value of ``y`` by a rounding margin; see :func:`_dual_bounds`); ``-inf`` where
    ``y`` is not finite."""
    y = _checked_y(lp, y)
    bounds, lam = _dual_bounds(lp, lp.c[None], lp.var_lower[None], lp.var_upper[None], y[None])
    return float(bounds[0]), lam[0]


def infeasibility_bound(
    lp: LP, y: np.ndarray, var_lower: Any = None, var_upper: Any = None
) -> float:
    """A proof that ``lp`` has no feasible point when positive: the Lagrangian bound of the
    row weights ``y`` on ``lp`` with its cost set to 0 (and no objective constant), in
    float64, below its exact value by a rounding margin (:func:`dual_bound`). With
    ``var_lower`` / ``var_upper`` (``(n,)``), the bounds of ``lp``'s columns are replaced by
    those (a branch-and-bound node's LP).

    Every feasible ``x`` gives that zero-cost LP the value 0, and every ``y`` bounds it from
    below, so an exactly positive bound leaves no feasible ``x`` (Farkas). Entries of ``y``
    on an infinite row side (positive on a row without a lower side, negative on one
    without an upper side), which would make the bound ``-inf``, are set to 0 first: the
    test holds for any ``y``. Use it on the ``y`` of a ``PRIMAL_INFEASIBLE`` solution (the
    dual ray); ``-inf`` where ``y`` is not finite."""
    y = _checked_y(lp, y)
    n = lp.A.shape[1]
    lower = lp.var_lower if var_lower is None else _real("var_lower", var_lower)
    upper = lp.var_upper if var_upper is None else _real("var_upper", var_upper)
    for name, value in (("var_lower", lower), ("var_upper", upper)):
        if value.shape != (n,) or np.any(np.isnan(value)):
            raise ValueError(f"{name} must be a vector of {n} numbers, not NaN, got {value}")
    y = np.where((y > 0) & np.isneginf(lp.row_lower), 0.0, y)
    y = np.where((y < 0) & np.isposinf(lp.row_upper), 0.0, y)
    bounds, _ = _dual_bounds(lp, np.zeros((1, n)), lower[None], upper[None], y[None], offsets=[0.0])
    return float(bounds[0])


def solve_lp(
    lp: LP, options: LPOptions | None = None, *, warm_start: tuple[Any, Any] | None = None
) -> LPSolution:
    """Solves ``lp`` (see the module docstring). ``warm_start=(x, y)`` in the LP's units."""
    if not isinstance(lp, LP):
        raise TypeError(f"lp must be an LP, got {type(lp).__name__}")
    options = LPOptions() if options is None else options
    options = _check_options(options)
    start = time.perf_counter()
    data, scaling = _prepare(lp, options)
    m, n = lp.A.shape
    if warm_start is None:
        x0, y0 = np.zeros(n), np.zeros(m)
    else:
        if not isinstance(warm_start, tuple | list) or len(warm_start) != 2:
            raise ValueError(
                f"warm_start must be a pair (x, y), got {type(warm_start).__name__}"
                + (f" of length {len(warm_start)}" if isinstance(warm_start, tuple | list) else "")
            )
        x0 = _warm_vector("warm_start x", warm_start[0], n)
        y0 = _warm_vector("warm_start y", warm_start[1], m)
    x0 = np.clip(
        scaling.scale_primal(x0), *(np.asarray(v) for v in (data.var_lower, data.var_upper))
    )
    y0 = scaling.scale_dual(y0)
    dtype = data.c.dtype
    _representable("warm_start x", x0, dtype)
    _representable("warm_start y", y0, dtype)
    state = _solve_jit(
        data,
        *jax.device_put((np.asarray(x0, dtype), np.asarray(y0, dtype))),
        _compiled_options(options),
        _deadline(start, options.time_limit),
        _limits(options, dtype),
    )
    x = scaling.unscale_primal(np.asarray(state.x_out, np.float64))
    y = scaling.unscale_dual(np.asarray(state.y_out, np.float64))
    status = Status(int(state.status))
    bound, lam = dual_bound(lp, y)
    primal, dual, gap = (float(v) for v in np.asarray(state.residuals))
    return LPSolution(
        x=x,
        y=y,
        reduced_costs=lam,
        objective=lp.objective(x),
        dual_bound=bound,
        status=status,
        message=MESSAGES[status]
        + (_FLOAT32_STALL if dtype == np.float32 and status == Status.ITERATION_LIMIT else ""),
        iterations=int(state.iterations),
        primal_residual=primal,
        dual_residual=dual,
        gap=gap,
        seconds=time.perf_counter() - start,
    )


class LPBatchSolution(NamedTuple):
    """Per-instance results of :func:`solve_lp_batch` (leading axis ``B``), in the LP's
    minimisation form; ``dual_bound[b]`` is a valid lower bound for instance ``b``."""

    x: np.ndarray  # (B, n)
    y: np.ndarray  # (B, m)
    objective: np.ndarray  # (B,)
    dual_bound: np.ndarray  # (B,)
    status: np.ndarray  # (B,) int, values of Status
    iterations: np.ndarray  # (B,)
    residuals: np.ndarray  # (B, 3): relative primal, dual residual and gap
    seconds: float

    def messages(self) -> list[str]:
        """A readable status per instance (also for slots still running or parked)."""
        other = {_RUNNING: "running", PARKED: "parked (holds no instance)"}
        return [other.get(int(s)) or MESSAGES[Status(int(s))] for s in self.status]


# Fields of _Data that differ between the instances of a batch.
_BATCHED_FIELDS = (
    "c",
    "var_lower",
    "var_upper",
    "c_raw",
    "var_lower_raw",
    "var_upper_raw",
    "tolerance",
    "max_iterations",
)


def _batched_fields(data: _Data) -> dict:
    return {k: getattr(data, k) for k in _BATCHED_FIELDS}


# unit roundoff and the least positive float64, for the safe bound's rounding margins
_UNIT = float(np.finfo(np.float64).eps) / 2
_TINY = float(np.finfo(np.float64).smallest_subnormal)


def _dual_bounds(lp: LP, costs, lower, upper, y, offsets=None) -> tuple[np.ndarray, np.ndarray]:
    """``(bounds (B,), reduced costs (B, n))``: :func:`dual_bound` for every row of ``y``
    ``(B, m)`` (float64, vectorised), each with its objective constant ``offsets[b]``
    (default ``lp.objective_offset``).

    An infinite bound or row side enters only with the sign that makes its term ``-inf``,
    so a bound can be ``+inf`` or NaN only through a non-finite ``y`` (a diverged iterate,
    whose NaN entries would fail both sign tests and drop out) or an overflowing product:
    such a bound is ``-inf``, never one that could lie above the optimum.

    Rounding: the bound lies below the exact Lagrangian value of the float ``y``. Each
    reduced cost enters through an interval that holds its exact value
    (:func:`_reduced_cost_interval`), each column's term is the least over that interval
    and the column's box, and the sum then loses twice the error bound of its own rounding,
    ``(m + n + 4) u`` times the sum of the terms' sizes (``u = 2^-53``), and is rounded
    down."""
    m, n = lp.A.shape
    lam = costs - (lp.A.T @ y.T).T
    with np.errstate(invalid="ignore", over="ignore"):
        finite = np.all(np.isfinite(y), axis=1) & np.all(np.isfinite(lam), axis=1)
        lam_lo, lam_hi = _reduced_cost_interval(lp, costs, lower, upper, y, lam, finite)
        rows = np.where(y > 0, y * lp.row_lower, np.where(y < 0, y * lp.row_upper, 0.0))
        cols = _column_terms(lam_lo, lam_hi, lower, upper)
        # a column whose bound is infinite (or beyond INFINITE_BOUND) on the side its
        # reduced cost needs takes the bound its rows imply where that is tighter
        # (bounds.implied_bounds: every feasible point obeys it)
        redo = np.flatnonzero(finite & _open_columns(lam_lo, lam_hi, lower, upper).any(axis=1))
        if redo.size:
            lo, hi = lower[redo], upper[redo]
            implied_lower, implied_upper = _implied(lp, lo, hi)
            cols[redo] = _column_terms(
                lam_lo[redo],
                lam_hi[redo],
                np.where(lo <= -INFINITE_BOUND, np.maximum(lo, implied_lower), lo),
                np.where(hi >= INFINITE_BOUND, np.minimum(hi, implied_upper), hi),
            )
        offset = lp.objective_offset if offsets is None else np.asarray(offsets, np.float64)
        total = rows.sum(axis=1) + cols.sum(axis=1) + offset
        size = np.abs(rows).sum(axis=1) + np.abs(cols).sum(axis=1) + np.abs(offset)
        margin = 2 * (m + n + 4) * (_UNIT * size + _TINY)
        bounds = np.nextafter(total - margin, -np.inf)
    return np.where(finite & (bounds < np.inf), bounds, -np.inf), lam


def _reduced_cost_interval(lp: LP, costs, lower, upper, y, lam, finite):
    """``(lo, hi)`` ``(B, n)``: an interval around each computed reduced cost ``lam`` that
    holds the exact ``c_j - a_j^T y`` of the float ``y``.

    Its half-width is twice the error bound of the product and the subtraction,
    ``gamma_{k+2} (|c_j| + |a_j|^T |y|)`` for a column of ``k`` entries (underflow
    included). Where that interval holds zero on a column with an infinite bound (or one
    beyond :data:`INFINITE_BOUND`), a rounding error of either sign could make the term
    ``-inf``; there the exact value is computed in rational arithmetic (such columns are
    rare: their costs cancel to the last bit), and the interval shrinks to the neighbours
    of its float on its own side of zero, or to zero itself."""
    abs_transpose, counts = _column_moduli(lp)
    size = np.abs(costs) + (abs_transpose @ np.abs(y).T).T
    err = 2 * counts * (_UNIT * size + _TINY)
    lo, hi = lam - err, lam + err
    unbounded = (lower <= -INFINITE_BOUND) | (upper >= INFINITE_BOUND)
    ambiguous = np.argwhere((lo < 0) & (hi > 0) & unbounded & finite[:, None])
    if len(ambiguous):
        A = lp.A.tocsc()
        for b, j in ambiguous:
            entries = slice(A.indptr[j], A.indptr[j + 1])
            exact = Fraction(float(costs[b, j])) - sum(
                (
                    Fraction(float(a)) * Fraction(float(v))
                    for a, v in zip(A.data[entries], y[b, A.indices[entries]], strict=True)
                ),
                Fraction(0),
            )
            lo[b, j], hi[b, j] = _enclosure(exact)
    return lo, hi


_MODULI: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _column_moduli(lp: LP):
    """``(|A|^T, k + 2)``: the entrywise modulus of ``A^T`` (CSR) and each column's entry
    count plus two, as :func:`_reduced_cost_interval` needs them; computed once per LP
    (the branch-and-bound asks for them at every round) and read-only."""
    found = _MODULI.get(lp)
    if found is None:
        abs_transpose = abs(lp.A).T.tocsr()
        counts = np.bincount(lp.A.indices, minlength=lp.A.shape[1]) + 2.0
        for v in (abs_transpose.data, abs_transpose.indices, abs_transpose.indptr, counts):
            v.setflags(write=False)
        found = _MODULI[lp] = (abs_transpose, counts)
    return found


def _enclosure(value: Fraction) -> tuple[float, float]:
    """Floats ``lo <= value <= hi`` with the sign of ``value`` (zero only where it is)."""
    f = float(value)
    if Fraction(f) == value:
        return f, f
    lo, hi = np.nextafter(f, -np.inf), np.nextafter(f, np.inf)
    return (max(lo, 0.0), hi) if value > 0 else (lo, min(hi, 0.0))


def _column_terms(lam_lo, lam_hi, lower, upper):
    """``min lam_j x_j`` over each instance's box and each reduced cost's interval, per
    column, ``(B, n)`` (``-inf`` where the box is open on a side the interval needs)."""
    with np.errstate(invalid="ignore", over="ignore"):
        return np.minimum(_box_minimum(lam_lo, lower, upper), _box_minimum(lam_hi, lower, upper))


def _box_minimum(lam, lower, upper):
    return np.where(lam > 0, lam * lower, np.where(lam < 0, lam * upper, 0.0))


def _open_columns(lam_lo, lam_hi, lower, upper):
    """Columns whose bound on a side their reduced cost's interval needs is infinite or
    beyond :data:`INFINITE_BOUND`, ``(B, n)``."""
    return ((lam_hi > 0) & (lower <= -INFINITE_BOUND)) | ((lam_lo < 0) & (upper >= INFINITE_BOUND))


def _implied(lp: LP, lower, upper):
    """Row-implied bounds for the instances ``(lower, upper)`` ``(k, n)``: the LP's own,
    computed once, for instances inside its box; their own for the rest."""
    inside = np.all(lower >= lp.var_lower, axis=1) & np.all(upper <= lp.var_upper, axis=1)
    implied_lower, implied_upper = np.empty_like(lower), np.empty_like(upper)
    if inside.any():
        implied_lower[inside], implied_upper[inside] = root_implied_bounds(lp)
    if not inside.all():
        implied_lower[~inside], implied_upper[~inside] = implied_bounds(
            lp, lower[~inside], upper[~inside]
        )
    return implied_lower, implied_upper


def _first_entry(mask: np.ndarray) -> tuple[int, int] | None:
    """``(instance, index)`` of the first true entry of a ``(B, k)`` mask, or ``None``."""
    bad = np.argwhere(mask)
    return (int(bad[0, 0]), int(bad[0, 1])) if bad.size else None


def _batch_inputs(lp, var_lower, var_upper, c, warm_start, batch=None):
    """Checked float64 ``(lower, upper, costs, x0, y0)`` for a batch of instances."""
    m, n = lp.A.shape
    lower = _real("var_lower", var_lower)
    upper = _real("var_upper", var_upper)
    if lower.ndim != 2 or lower.shape[1] != n or upper.shape != lower.shape:
        raise ValueError(
            f"var_lower and var_upper must both have shape (B, {n}), got {lower.shape} "
            f"and {upper.shape}"
        )
    if batch is not None and lower.shape[0] != batch:
        raise ValueError(f"expected {batch} instances, got {lower.shape[0]}")
    batch = lower.shape[0]
    costs = np.broadcast_to(lp.c, (batch, n)) if c is None else _real("c", c)
    if costs.shape != (batch, n):
        raise ValueError(f"c must have shape ({batch}, {n}), got {costs.shape}")
    for name, values in (("c", costs), ("var_lower", lower), ("var_upper", upper)):
        bad = _first_entry(np.isnan(values) | (np.isinf(values) if name == "c" else False))
        if bad is not None:
            b, j = bad
            raise ValueError(f"instance {b}: {name} of {lp.col_label(j)} is {values[b, j]}")
    bad = _first_entry((lower > upper) | (lower == np.inf) | (upper == -np.inf))
    if bad is not None:
        b, j = bad
        raise ValueError(
            f"instance {b}: var_lower > var_upper (or an infinite bound on the wrong side) "
            f"for {lp.col_label(j)}: {lower[b, j]} > {upper[b, j]}"
        )
    if warm_start is None:
        x0, y0 = np.zeros((batch, n)), np.zeros((batch, m))
    else:
        if not isinstance(warm_start, tuple | list) or len(warm_start) != 2:
            raise ValueError(f"warm_start must be a pair (x[B, n], y[B, m]), got {warm_start!r}")
        x0, y0 = (_real(f"warm_start {v}", w) for v, w in zip("xy", warm_start, strict=True))
        if x0.shape != (batch, n) or y0.shape != (batch, m):
            raise ValueError(
                f"warm_start must be (x[{batch}, {n}], y[{batch}, {m}]), got {x0.shape} "
                f"and {y0.shape}"
            )
        for name, values in (("x", x0), ("y", y0)):  # as solve_lp's warm start must be
            bad = _first_entry(~np.isfinite(values))
            if bad is not None:
                b, j = bad
                raise ValueError(
                    f"warm_start {name} must be finite; instance {b} has {values[b, j]} at "
                    f"index {j}"
                )
    return lower, upper, np.ascontiguousarray(costs), x0, y0


class LPBatch(NamedTuple):
    """A batch in flight (:func:`batch_start`): per-slot data and solver state on the
    device, the host copies of each slot's bounds and costs. Advance it, refill finished
    slots with new instances, read results; the matrix and its preconditioning are shared."""

    lp: LP
    options: LPOptions
    scaling: Scaling
    data: _Data  # per-instance fields (k, B); shared vectors (k, 1)
    state: _State  # slot axis last: x (n, B), y (m, B), residuals (3, B), scalars (1, B)
    var_lower: np.ndarray  # (B, n)
    var_upper: np.ndarray  # (B, n)
    costs: np.ndarray  # (B, n)
    # (B,) host perf_counter when each slot was filled (batch_start, batch_refill): a
    # slot's options.time_limit counts from there, across all the calls that advance it
    started: np.ndarray
    # (B,) each slot's objective constant (lp.objective_offset unless a refill gave one),
    # added to its objective and dual bound as its costs are to c^T x
    offsets: np.ndarray

    @property
    def status(self) -> np.ndarray:
        """Per-slot status; ``-1`` while a slot is still running, :data:`PARKED` (-2) for
        a slot parked by :func:`batch_park`."""
        return np.asarray(self.state.status).reshape(-1)


def _scaled_rows(
    scaling: Scaling, dtype, lower, upper, costs, x0, y0, tolerance, max_iterations
) -> dict:
    """The per-instance data fields and the starting point of instances given as host rows
    ``(k, n)`` (``y0``: ``(k, m)``; ``tolerance`` and ``max_iterations``: ``(k,)``), in the
    solver's units and ``dtype`` (the iteration limits int32), still as rows."""
    s_b, s_c = scaling.bound, scaling.objective
    # the solver's reading of the bounds, as _solver_view's of the LP's; the batch keeps the
    # values given, which its dual bounds use
    lower, upper = _infinite_beyond(lower, upper)
    lower_s, upper_s = s_b * lower * scaling.col, s_b * upper * scaling.col
    rows = {
        "c": s_c * costs / scaling.col,
        "var_lower": lower_s,
        "var_upper": upper_s,
        "c_raw": costs,
        "var_lower_raw": lower,
        "var_upper_raw": upper,
        "x0": np.clip(scaling.scale_primal(x0), lower_s, upper_s),
        "y0": scaling.scale_dual(y0),
        "tolerance": np.reshape(tolerance, (-1, 1)),
    }
    _representable("warm_start x", rows["x0"], dtype)
    _representable("warm_start y", rows["y0"], dtype)
    rows = {name: np.asarray(value, dtype) for name, value in rows.items()}
    rows["max_iterations"] = np.reshape(max_iterations, (-1, 1)).astype(np.int32)
    return rows


def _scaled_batch(base: _Data, scaling: Scaling, lower, upper, costs, x0, y0, tolerance, cap):
    """The per-instance data fields and the fresh state of instances given as host rows
    ``(k, n)``, moved to the device in columns ``(n, k)`` (``cap``: the iteration limits)."""
    rows = _scaled_rows(scaling, base.c.dtype, lower, upper, costs, x0, y0, tolerance, cap)
    fields = _fresh_batch(rows)
    state = fields.pop("state")
    return base._replace(**fields), state


@jax.jit
def _fresh_batch(rows):
    """The per-instance fields and the fresh state, in columns, of :func:`_scaled_rows`'s
    ``rows`` (host arrays passed as they are: a jitted call takes each for a few
    microseconds, where stacking them on the host first cost a copy of all)."""
    columns = {name: value.T for name, value in rows.items()}
    fields = {name: columns[name] for name in _BATCHED_FIELDS}
    return {**fields, "state": _initial_state(columns["x0"], columns["y0"])}


def _merge_rows(fields, state, source, refill, rows):
    """``(fields, state)`` with each slot ``b`` where ``refill[b]`` replaced by row
    ``source[b]`` of ``rows`` (:func:`_scaled_rows`) and a fresh state there. A select over
    the whole batch: XLA's CPU scatter into a few columns of ``(n, B)`` arrays moves one
    element at a time and cost several times more."""
    columns = {name: value[source].T for name, value in rows.items()}
    fresh = _initial_state(columns["x0"], columns["y0"])

    def pick(new, old):
        return jnp.where(refill, new, old)

    new_fields = {name: columns[name] for name in _BATCHED_FIELDS}
    return jax.tree.map(pick, new_fields, fields), jax.tree.map(pick, fresh, state)


_merge_jit = jax.jit(_merge_rows)
# the batch's own arrays reused for the result (batch_refill(..., donate=True)): the select
# then writes in place instead of into a new copy of every per-slot array
_merge_donated = jax.jit(_merge_rows, donate_argnums=(0, 1))


def _slot_indices(slots: Any, size: int, *, name: str = "slots", distinct: bool) -> np.ndarray:
    """``slots`` as int64 indices in ``[0, size)`` (distinct ones when ``distinct``), or a
    ValueError naming ``name``: a boolean mask was read as the indices 0 and 1, and 1.7 as
    slot 1."""
    array = np.asarray(slots)
    if array.dtype == np.bool_:
        raise ValueError(
            f"{name} must be slot indices, not a boolean mask (pass np.flatnonzero(mask)), "
            f"got {array.tolist()}"
        )
    if array.size and array.dtype.kind not in "iu":
        raise ValueError(f"{name} must be integer slot indices, got {array.tolist()!r}")
    array = array.astype(np.int64).reshape(-1)
    if array.size and (array.min() < 0 or array.max() >= size):
        raise ValueError(f"{name} must be indices in [0, {size}), got {array.tolist()}")
    if distinct and len(set(array.tolist())) != array.size:
        raise ValueError(f"{name} must be distinct indices, got {array.tolist()}")
    return array


def _pad_index(index: np.ndarray) -> np.ndarray:
    """``index`` padded to the next power of four by repeating its last entry, so that
    the jitted slot updates see few distinct shapes (each compiles once; a repeated write
    of the same row is harmless, and a refill never selects its padded rows)."""
    size = 1
    while size < index.size:
        size *= 4
    return np.concatenate([index, np.full(size - index.size, index[-1], index.dtype)])


@functools.lru_cache(maxsize=16)
def _batched_advance(options: LPOptions):
    return jax.jit(lambda d, s, n, t, limits: _advance(d, s, options, n, t, limits))


@functools.lru_cache(maxsize=16)
def _batched_narrowing(options: LPOptions, widths: tuple[int, ...]):
    return jax.jit(lambda d, s, t, limits: _advance_narrowing(d, s, options, t, limits, widths))


def _narrowing_run(options: LPOptions, size: int):
    """The compiled run to the end of :func:`_run_compacting` for a working batch of
    ``size`` slots, when it narrows (``None`` otherwise: the host compacts a batch of
    ``_COMPACT_MIN`` or more, and one under ``4 * _NARROW_MIN`` runs as it is)."""
    widths = _narrowing_widths(size) if size < _COMPACT_MIN else ()
    return _batched_narrowing(_compiled_options(options), widths) if widths else None


def _slot_deadlines(batch: LPBatch):
    """The slots' deadlines in the state's ``(1, B)`` layout (``None``: no time limit)."""
    return _deadline(batch.started.reshape(1, -1), batch.options.time_limit)


def batch_start(
    lp: LP,
    var_lower: Any,
    var_upper: Any,
    c: Any = None,
    *,
    options: LPOptions | None = None,
    warm_start: tuple[Any, Any] | None = None,
) -> LPBatch:
    """A batch of ``B`` instances of ``lp`` (bounds ``(B, n)``, costs ``(B, n)`` or
    ``lp.c``) ready to :func:`batch_advance`; nothing is solved yet."""
    options, inputs = _start_inputs(lp, var_lower, var_upper, c, options, warm_start)
    base, scaling = _prepare(lp, options, batched=True)
    return _batch_of(lp, options, base, scaling, inputs, time.perf_counter())


def _start_inputs(lp, var_lower, var_upper, c, options, warm_start):
    """``(options, (lower, upper, costs, x0, y0))`` checked for a new batch."""
    if not isinstance(lp, LP):
        raise TypeError(f"lp must be an LP, got {type(lp).__name__}")
    options = LPOptions() if options is None else options
    options = _check_options(options)
    inputs = _batch_inputs(lp, var_lower, var_upper, c, warm_start)
    if inputs[0].shape[0] == 0:
        raise ValueError("var_lower and var_upper must hold at least one instance, got B = 0")
    return options, inputs


def _batch_of(lp, options, base, scaling, inputs, started: float) -> LPBatch:
    """The batch of the checked host rows ``inputs`` (:func:`_start_inputs`), filled at
    ``started`` (a perf_counter time)."""
    size = inputs[0].shape[0]
    tolerance = np.full(size, float(options.tolerance))
    cap = np.full(size, min(int(options.max_iterations), _INT32_MAX), np.int32)
    data, state = _scaled_batch(base, scaling, *inputs, tolerance, cap)
    # the batch's own copies (the checked inputs may be the caller's arrays, or costs
    # broadcast read-only from the LP's): batch_refill(..., donate=True) writes into them
    lower, upper, costs = (np.array(a) for a in inputs[:3])
    size = lower.shape[0]
    return LPBatch(
        lp,
        options,
        scaling,
        data,
        state,
        lower,
        upper,
        costs,
        np.full(size, started),
        np.full(size, float(lp.objective_offset)),
    )


def batch_advance(
    batch: LPBatch, evaluations: int | None = None, *, threads: int | None = None
) -> LPBatch:
    """Runs every unfinished slot for at most ``evaluations`` evaluation periods of
    ``options.eval_every`` iterations (``None``: until every slot stops). Finished slots do
    not change. ``threads`` as in :func:`solve_lp_batch`: the slots are cut into that many
    groups of consecutive slots, each advanced by its own loop on its own thread.
    ``options.time_limit`` counts from each slot's fill (:func:`batch_start`,
    :func:`batch_refill`), not from this call."""
    if evaluations is not None:  # a NumPy integer is one
        evaluations = check_integer("evaluations (or None)", evaluations, 1)
    # a NumPy scalar: the jitted call takes it on its fast path, where jnp.asarray ran an
    # eager conversion costing about 0.18 ms a call (a branch-and-bound calls this every
    # round; scratch profile at B=1)
    limit = np.int32(_INT32_MAX if evaluations is None else evaluations)
    advance = _batched_advance(_compiled_options(batch.options))
    limits = _limits(batch.options, batch.data.c.dtype)
    return _in_groups(
        batch,
        threads,
        lambda part: part._replace(
            state=advance(part.data, part.state, limit, _slot_deadlines(part), limits)
        ),
    )


def batch_refill(
    batch: LPBatch,
    slots: Any,
    var_lower: Any,
    var_upper: Any,
    c: Any = None,
    *,
    warm_start: tuple[Any, Any] | None = None,
    objective_offset: Any = None,
    tolerance: Any = None,
    max_iterations: Any = None,
    donate: bool = False,
) -> LPBatch:
    """Puts new instances into ``slots`` (indices, shape ``(k,)``) with bounds ``(k, n)``,
    costs ``(k, n)`` (default ``lp.c``) and optional warm starts ``(x[k, n], y[k, m])``;
    the other slots keep their state. Typically the slots that finished.

    ``objective_offset``: each new instance's objective constant, one number or ``(k,)``
    (default ``lp.objective_offset``); a slot's objective and dual bound include its own
    (an instance whose costs are ``lp.c`` times a factor wants the offset times it too).

    ``tolerance``: each new instance's ``options.tolerance`` (its relative KKT test), one
    number or ``(k,)``, each finite and > 0 (default the batch's ``options.tolerance``): a
    slot may be solved tighter (or looser) than the others, at no new compilation.

    ``max_iterations``: each new instance's iteration limit, one integer or ``(k,)``, each
    >= 1 (default the batch's ``options.max_iterations``; at most 2**31 - 1), checked at
    evaluations as ``options.max_iterations`` is: a slot that reaches it stops with
    ITERATION_LIMIT. No new compilation either.

    ``donate=True``: the result reuses ``batch``'s arrays (its per-slot device arrays, and
    its host bounds, costs, fill times and offsets, written in place), so ``batch`` must
    not be used again, nor any batch that shares those arrays with it (the one it was
    advanced or parked from: :func:`batch_advance` and :func:`batch_park` return batches
    that share them with their input). An array of it that NumPy still views is copied,
    not reused. A refill that raises (a warm start the solver's float type cannot hold)
    writes nothing. A refill otherwise
    copies every per-slot array of the batch, which for a wide batch of a large LP costs
    more than the rest of the refill."""
    check_flag("donate", donate)
    slots = _slot_indices(slots, batch.var_lower.shape[0], distinct=True)
    lower, upper, costs, x0, y0 = _batch_inputs(
        batch.lp, var_lower, var_upper, c, warm_start, batch=slots.size
    )
    offsets = _slot_offsets(batch.lp, objective_offset, slots.size)
    tolerances = _slot_tolerances(batch.options, tolerance, slots.size)
    caps = _slot_iteration_limits(batch.options, max_iterations, slots.size)
    if slots.size == 0:
        return batch
    base, scaling = _prepare(batch.lp, batch.options, batched=True)
    # only the refilled rows move to the device, padded to a power of four (each count
    # compiles once); scaled before anything is written, as the scaling may still refuse
    # a warm start (then a donated batch is left as it was)
    padded = _pad_index(np.arange(slots.size))
    rows = _scaled_rows(
        scaling,
        base.c.dtype,
        *(a[padded] for a in (lower, upper, costs, x0, y0, tolerances, caps)),
    )
    host = {name: getattr(batch, name) for name in _HOST_FIELDS}
    host = {name: a if donate and a.flags.writeable else a.copy() for name, a in host.items()}
    new = (lower, upper, costs, time.perf_counter(), offsets)  # in _HOST_FIELDS' order
    for name, value in zip(_HOST_FIELDS, new, strict=True):
        host[name][slots] = value
    size = batch.var_lower.shape[0]
    source = np.zeros(size, np.int32)
    source[slots] = np.arange(slots.size)
    refill = np.zeros(size, bool)
    refill[slots] = True
    merge = _merge_donated if donate else _merge_jit
    fields, state = merge(_batched_fields(batch.data), batch.state, source, refill, rows)
    return batch._replace(data=batch.data._replace(**fields), state=state, **host)


def _per_slot(name: str, value: Any, default: float, size: int, ok, expected: str):
    """``(size,)`` float64 values of the argument ``name``: ``default`` for every slot when
    ``value`` is None, else one number or ``size`` of them; a ValueError names the first
    for which ``ok`` fails (``expected``: what each must be)."""
    if value is None:
        return np.full(size, float(default))
    values = _real(name, value)
    if values.ndim == 0:
        values = np.full(size, float(values))
    if values.shape != (size,):
        raise ValueError(
            f"{name} must be one number or {size} (one per slot), got shape {values.shape}"
        )
    bad = np.flatnonzero(~ok(values))
    if bad.size:
        raise ValueError(f"{name} must be {expected}; entry {int(bad[0])} is {values[bad[0]]}")
    return values


def _slot_offsets(lp: LP, offset: Any, size: int) -> np.ndarray:
    """The slots' objective constants (``None``: the LP's), each finite."""
    return _per_slot("objective_offset", offset, lp.objective_offset, size, np.isfinite, "finite")


def _slot_tolerances(options: LPOptions, tolerance: Any, size: int) -> np.ndarray:
    """The slots' tolerances (``None``: ``options.tolerance``), each finite and > 0."""
    return _per_slot(
        "tolerance",
        tolerance,
        options.tolerance,
        size,
        lambda v: np.isfinite(v) & (v > 0),
        "finite and > 0",
    )


def _slot_iteration_limits(options: LPOptions, limit: Any, size: int) -> np.ndarray:
    """The slots' iteration limits (``None``: ``options.max_iterations``), each an integer
    >= 1, as int32 (larger ones are 2**31 - 1, as :func:`_limits` reads them)."""
    values = _per_slot(
        "max_iterations",
        limit,
        options.max_iterations,
        size,
        lambda v: np.isfinite(v) & (v >= 1) & (v == np.floor(v)),
        "an integer >= 1",
    )
    return np.minimum(values, _INT32_MAX).astype(np.int32)


PARKED = -2  # status of a slot parked by batch_park: frozen, holding no instance


def batch_park(batch: LPBatch, slots: Any) -> LPBatch:
    """Freezes ``slots`` without a new instance (status :data:`PARKED`), so they cost
    nothing but their lane until :func:`batch_refill` fills them again."""
    slots = _slot_indices(slots, batch.var_lower.shape[0], distinct=False)  # again: harmless
    if slots.size == 0:
        return batch
    status = _park_slots(batch.state.status, jnp.asarray(_pad_index(slots)))
    return batch._replace(state=batch.state._replace(status=status))


@jax.jit
def _park_slots(status, index):
    return status.at[..., index].set(PARKED)


def batch_resize(batch: LPBatch, keep: Any, size: int) -> LPBatch:
    """A batch of ``size`` slots whose first ``len(keep)`` slots are ``batch``'s slots
    ``keep`` (state and data as they are, mid-solve) and the rest parked: the batched loop
    costs every lane, so a batch with few instances should be narrow. Each new size
    compiles once."""
    old = batch.var_lower.shape[0]
    keep = _slot_indices(keep, old, name="keep", distinct=False)  # a slot kept twice is copied
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
        raise ValueError(f"size must be an int >= 1, got {size!r}")
    if keep.size > size:
        raise ValueError(f"keep must hold at most {size} indices, got {keep.tolist()}")
    resized = _select_slots(batch, np.concatenate([keep, np.zeros(size - keep.size, np.int64)]))
    return batch_park(resized, np.arange(keep.size, size)) if size > keep.size else resized


def _select_slots(batch: LPBatch, pick: np.ndarray) -> LPBatch:
    """The batch made of ``batch``'s slots ``pick`` (repeats allowed), state and data."""
    state, fields = _take_slots((batch.state, _batched_fields(batch.data)), jnp.asarray(pick))
    return _with_slots(batch, fields, state, pick)


def _with_slots(batch: LPBatch, fields: dict, state, index) -> LPBatch:
    """``batch`` with the per-slot device ``fields`` and ``state`` of its slots ``index``
    (an index array or a slice) and those slots' host rows."""
    host = {name: getattr(batch, name)[index] for name in _HOST_FIELDS}
    return batch._replace(data=batch.data._replace(**fields), state=state, **host)


# the LPBatch fields that hold one host row per slot
_HOST_FIELDS = ("var_lower", "var_upper", "costs", "started", "offsets")


def batch_solution(batch: LPBatch, seconds: float = math.nan, slots: Any = None) -> LPBatchSolution:
    """Per-slot results (in the LP's units, float64 dual bounds) of the batch's state;
    ``slots`` (indices): only those, in that order (the others stay on the device)."""
    lp, scaling, state = batch.lp, batch.scaling, batch.state
    if slots is None:
        pick = slice(None)
        x_out, y_out, status, iterations, residuals = (
            state.x_out,
            state.y_out,
            state.status,
            state.iterations,
            state.residuals,
        )
    else:
        pick = _slot_indices(slots, batch.var_lower.shape[0], distinct=False)
        if pick.size == 0:  # _pad_index needs an entry to repeat
            return _empty_batch_solution(lp, seconds)
        taken = _take_slots(
            (state.x_out, state.y_out, state.status, state.iterations, state.residuals),
            jnp.asarray(_pad_index(pick)),
        )
        x_out, y_out, status, iterations, residuals = (
            np.asarray(a)[..., : pick.size] for a in taken
        )
    costs, lower, upper = batch.costs[pick], batch.var_lower[pick], batch.var_upper[pick]
    offsets = batch.offsets[pick]
    x = scaling.unscale_primal(np.asarray(x_out, np.float64).T)
    y = scaling.unscale_dual(np.asarray(y_out, np.float64).T)
    return LPBatchSolution(
        x=x,
        y=y,
        objective=np.einsum("bn,bn->b", costs, x) + offsets,
        dual_bound=_dual_bounds(lp, costs, lower, upper, y, offsets)[0],
        status=np.asarray(status).reshape(-1),
        iterations=np.asarray(iterations).reshape(-1),
        residuals=np.asarray(residuals, np.float64).T,
        seconds=seconds,
    )


def _empty_batch_solution(lp: LP, seconds: float) -> LPBatchSolution:
    m, n = lp.A.shape
    return LPBatchSolution(
        x=np.zeros((0, n)),
        y=np.zeros((0, m)),
        objective=np.zeros(0),
        dual_bound=np.zeros(0),
        status=np.zeros(0, np.int32),
        iterations=np.zeros(0, np.int32),
        residuals=np.zeros((0, 3)),
        seconds=seconds,
    )


def solve_lp_batch(
    lp: LP,
    var_lower: Any,
    var_upper: Any,
    c: Any = None,
    *,
    options: LPOptions | None = None,
    warm_start: tuple[Any, Any] | None = None,
    compact: bool = True,
    threads: int | None = None,
) -> LPBatchSolution:
    """Solves ``B`` LPs that share ``lp``'s matrix and row bounds, in one call.

    Instance ``b`` has variable bounds ``var_lower[b], var_upper[b]`` (shape ``(B, n)``)
    and objective ``c[b]`` (shape ``(B, n)``; default ``lp.c`` for all). The preconditioner
    and step size come from ``lp`` once; each instance keeps its own primal weight, restart
    state and status, and an instance that finishes stops changing while the others run
    (one jitted ``while_loop`` over the batch held in columns, ``x`` of shape ``(n, B)``).
    ``warm_start=(x[B, n], y[B, m])``. For continuous batching (refilling finished slots)
    use :func:`batch_start`, :func:`batch_advance`, :func:`batch_refill` and
    :func:`batch_solution`.

    ``compact=True``: the batched loop costs as much for a finished instance as for a
    running one, so whenever at most half of the working batch still runs, the running
    instances move into a batch of the next power of two (each new size compiles once),
    and a batch of 32 to 63 finishes its last instances in a batch of a quarter of its
    width, gathered inside the compiled loop; ``False`` runs all ``B`` together to the end.

    ``threads``: the batch is cut into this many groups of consecutive instances, each
    solved by its own loop on its own thread (XLA runs one loop on one core; the groups
    run on several). ``None``: one group per :data:`THREAD_GROUP` instances, at most one
    per core this process may use. A group's results equal those of solving it alone.
    """
    start = time.perf_counter()
    check_flag("compact", compact)
    options, inputs = _start_inputs(lp, var_lower, var_upper, c, options, warm_start)
    size = inputs[0].shape[0]
    groups = [g for g in np.array_split(np.arange(size), _thread_count(threads, size)) if g.size]
    base, scaling = _prepare(lp, options, batched=True)  # once, before any thread
    # the cached jit wrappers too, so that the threads share them (a wrapper made in each
    # thread would compile in each)
    _limits(options, base.c.dtype)
    _batched_advance(_compiled_options(options))
    for width in {g.size for g in groups}:
        _narrowing_run(options, width)
    run = _run_compacting if compact else functools.partial(batch_advance, threads=1)

    def one(rows) -> LPBatchSolution:
        # each group's batch is made from its own rows on its own thread (taking slots
        # out of one batch of all B costs more, with the threads contending); the time
        # limit counts from this call, for every instance and every advance
        return batch_solution(
            run(_batch_of(lp, options, base, scaling, [a[rows] for a in inputs], start))
        )

    if len(groups) == 1:
        parts = [one(groups[0])]
    else:
        parts = list(_thread_pool(len(groups)).map(_in_callers_precision(one), groups))
    fields = {
        name: np.concatenate([getattr(p, name) for p in parts])
        for name in LPBatchSolution._fields
        if name != "seconds"
    }
    return LPBatchSolution(**fields, seconds=time.perf_counter() - start)


# solve_lp_batch's default: one thread per this many instances (a narrower loop spends
# more of its time on per-operation overhead than on the instances)
THREAD_GROUP = 32


def _in_groups(batch: LPBatch, threads: int | None, run) -> LPBatch:
    """``run(part) -> part`` on groups of consecutive slots (:func:`_thread_count` of
    them), each group on its own thread, their states put back in place; one group runs
    on the calling thread. A group is a slice of the batch's slots and the states come
    back joined end to end: a gather and a scatter per group (any slots, one element at a
    time on CPU) cost several times as much."""
    size = batch.var_lower.shape[0]
    count = _thread_count(threads, size)
    if count == 1:
        return run(batch)
    groups = [g for g in np.array_split(np.arange(size), count) if g.size]
    if len(groups) == 1:
        return run(batch)

    def one(rows):
        return jax.block_until_ready(run(_slot_range(batch, int(rows[0]), int(rows[-1]) + 1)).state)

    parts = _thread_pool(len(groups)).map(_in_callers_precision(one), groups)
    return batch._replace(state=_join_slots(tuple(parts)))


def _slot_range(batch: LPBatch, start: int, stop: int) -> LPBatch:
    """The batch of ``batch``'s slots ``start`` to ``stop - 1``, state and data (the host
    rows as views)."""
    state, fields = _slice_slots((batch.state, _batched_fields(batch.data)), start, stop)
    return _with_slots(batch, fields, state, slice(start, stop))


@functools.partial(jax.jit, static_argnums=(1, 2))
def _slice_slots(tree, start: int, stop: int):
    return jax.tree.map(lambda a: a[..., start:stop], tree)


@jax.jit
def _join_slots(parts):
    """The trees ``parts`` joined along the slot axis (the last), in order."""
    return jax.tree.map(lambda *a: jnp.concatenate(a, axis=-1), *parts)


def _thread_count(threads: int | None, size: int) -> int:
    if threads is None:
        return max(1, min(_usable_cores(), size // THREAD_GROUP))
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or threads < 1:
        raise ValueError(f"threads must be an int >= 1 or None, got {threads!r}")
    return int(threads)


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


_POOL_LOCK = threading.Lock()
_POOLS: dict[int, ThreadPoolExecutor] = {}


def _in_callers_precision(fn):
    """``fn`` run under the calling thread's float64 setting: ``jax.enable_x64`` is a
    per-thread context, and a worker thread would otherwise trace in float32."""
    x64 = bool(jnp.result_type(float) == jnp.float64)

    def wrapped(*args):
        with jax.enable_x64(x64):
            return fn(*args)

    return wrapped


def _thread_pool(workers: int) -> ThreadPoolExecutor:
    with _POOL_LOCK:
        if workers not in _POOLS:
            _POOLS[workers] = ThreadPoolExecutor(workers, thread_name_prefix="solve_lp_batch")
        return _POOLS[workers]


@jax.jit
def _take_slots(tree, index):
    return jax.tree.map(lambda a: a[..., index], tree)


@jax.jit
def _put_slots(full, index, part):
    return jax.tree.map(lambda f, p: f.at[..., index].set(p), full, part)


_COMPACT_MIN = 64  # batches smaller than this run to the end in one call


def _run_compacting(batch: LPBatch, evaluations: int = 2) -> LPBatch:
    """Runs ``batch`` to the end, ``evaluations`` periods per call, moving the running
    instances into a batch of half the size or less (at least ``_COMPACT_MIN // 2``)
    whenever at most half of the slots still run; a batch under ``_COMPACT_MIN`` slots
    then runs to the end in one call (below that, the calls cost more than they save),
    narrowing inside the compiled loop (:func:`_advance_narrowing`) when it holds at least
    ``4 * _NARROW_MIN`` slots."""
    advance = _batched_advance(_compiled_options(batch.options))
    limits = _limits(batch.options, batch.data.c.dtype)
    chunk = jnp.asarray(evaluations, jnp.int32)
    to_the_end = jnp.asarray(_INT32_MAX, jnp.int32)
    full = batch.state
    active = np.arange(batch.var_lower.shape[0])  # original index of each working slot
    work = batch
    compacted = False
    while True:
        small = active.size < _COMPACT_MIN
        narrowing = _narrowing_run(batch.options, active.size)
        if narrowing is not None:
            state = narrowing(work.data, work.state, _slot_deadlines(work), limits)
        else:
            state = advance(
                work.data, work.state, to_the_end if small else chunk, _slot_deadlines(work), limits
            )
        work = work._replace(state=state)
        running = np.asarray(state.status).reshape(-1) == _RUNNING
        count = int(running.sum())
        if count == 0 or small:
            break
        if 2 * count <= running.size:
            size = max(_COMPACT_MIN // 2, 1 << (count - 1).bit_length())
            # padding slots copy a finished slot: frozen, so writing them back is a no-op
            pick = np.concatenate(
                [np.flatnonzero(running), np.full(size - count, np.flatnonzero(~running)[0])]
            )
            full = _put_slots(full, jnp.asarray(active), state)
            work = _select_slots(work, pick)
            active = active[pick]
            compacted = True
    if not compacted:
        # never compacted: the working state is the whole one (writing it back cost a
        # scatter of every field, a few percent of a small batch's solve)
        return batch._replace(state=work.state)
    return batch._replace(state=_put_slots(full, jnp.asarray(active), work.state))
