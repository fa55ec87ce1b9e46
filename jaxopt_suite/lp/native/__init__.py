"""CPU kernels for PDLP: CSR matrix times a dense panel, and fused PDHG iterations.

Under ``vmap`` (``solve_lp_batch``, the branch-and-bound) every PDHG iteration multiplies
one shared sparse matrix by a ``(n, B)`` panel. XLA's CPU backend has no good way to do
that at a few percent density: its gather moves one element at a time, so an ELL or
BCOO product costs more than the dense one, and the dense one does ``m n B`` work. The
kernel in ``csr_spmm.cc`` adds one scaled panel row per stored entry, with the batch in
registers, through XLA's FFI (``jax.ffi``); the ``lp`` benchmark suite times it against
XLA's dense and BCOO products (its SpMM table).

PDLP's inner loop (``eval_every`` PDHG iterations with the Halpern average between two
evaluations) runs as one call of ``halpern_steps.cc`` (:func:`halpern_steps`) when the
matrix is native: XLA ran each iteration as two products and several elementwise passes,
each with its own dispatch cost, which for LPs of a few hundred rows was most of the
iteration. The evaluations (KKT, restarts, certificates) stay in XLA and use
:func:`csr_panel`.

The kernels are compiled on first use (:mod:`jaxopt_suite._native`). Where no compiler
works, :func:`available` is false and says why (:func:`unavailable_reason`); the solvers'
``auto`` matrix choice then uses XLA's products, and asking for ``matrix="native"`` raises.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp

from jaxopt_suite import _native
from jaxopt_suite._checks import check_integer
from jaxopt_suite.lp.operator import SharedOperator, bucketed, check_rows

SOURCE = Path(__file__).with_name("csr_spmm.cc")
TARGET = "jaxopt_suite_csr_panel"
STEPS_SOURCE = Path(__file__).with_name("halpern_steps.cc")
STEPS_TARGET = "jaxopt_suite_halpern_steps"
_KERNELS = (
    (SOURCE, ((TARGET, "JaxoptSuiteCsrPanel"),)),
    (STEPS_SOURCE, ((STEPS_TARGET, "JaxoptSuiteHalpernSteps"),)),
)


def available() -> bool:
    """Whether the kernels are built and registered (they run on the CPU backend only)."""
    return unavailable_reason() == ""


def unavailable_reason() -> str:
    """Why :func:`available` is false (``""`` when it is true)."""
    for source, targets in _KERNELS:
        reason = _native.register(source, targets)
        if reason:
            return reason
    return ""


def require() -> None:
    reason = unavailable_reason()
    if reason:
        raise RuntimeError(f"the native CPU kernel is unavailable: {reason}")


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["indptr", "indices", "data"],
    meta_fields=["rows", "columns"],
)
@dataclasses.dataclass(frozen=True)
class CsrMatrix:
    """A CSR matrix on the device, for :func:`csr_panel` (``columns`` None: unchecked).

    ``indices`` and ``data`` run past ``indptr[-1]`` with padding the kernels never read:
    :meth:`from_scipy` rounds their length up (:func:`padded_length`), so that matrices
    whose numbers of nonzeros differ a little (the polish LPs of a branch-and-bound, one
    set of pairs against another) have the same shapes and share a compiled solve."""

    indptr: jax.Array  # (rows + 1,) int32
    indices: jax.Array  # (padded_length(nnz),) int32
    data: jax.Array  # (padded_length(nnz),)
    rows: int
    columns: int | None = None

    @classmethod
    def from_scipy(cls, A, dtype) -> CsrMatrix:
        require()
        A = sp.csr_array(A, copy=True)  # sum_duplicates must not rewrite the caller's
        A.sum_duplicates()
        if A.nnz >= 2**31:
            raise ValueError(f"the native kernel takes under 2**31 nonzeros, got {A.nnz}")
        length = padded_length(A.nnz)
        indices = np.zeros(length, np.int32)
        indices[: A.nnz] = A.indices
        data = np.zeros(length, np.dtype(dtype))
        data[: A.nnz] = A.data
        return cls(
            jnp.asarray(A.indptr, jnp.int32),
            jnp.asarray(indices),
            jnp.asarray(data, dtype),
            int(A.shape[0]),
            int(A.shape[1]),
        )

    def matvec(self, x: jax.Array) -> jax.Array:
        return csr_panel(self, x)


def padded_length(nnz: int) -> int:
    """``nnz`` rounded up to a multiple of a sixteenth of its power of two (at least 64):
    at most 1/16 more entries, and few distinct lengths."""
    return max(64, bucketed(nnz, 4))


def csr_panel(matrix: CsrMatrix, x: jax.Array) -> jax.Array:
    """``A x`` for ``x`` of shape ``(n,)`` or ``(n, B)`` (CPU backend)."""
    require()
    if x.ndim not in (1, 2):
        raise ValueError(f"x must have shape (n,) or (n, B), got {x.shape}")
    if x.dtype != matrix.data.dtype:
        raise ValueError(f"x has dtype {x.dtype} but the matrix holds {matrix.data.dtype}")
    check_rows(x, matrix.columns)  # the kernel would read past the end of a short x
    out = jax.ShapeDtypeStruct((matrix.rows, *x.shape[1:]), x.dtype)
    call = jax.ffi.ffi_call(TARGET, out, vmap_method="sequential")
    return call(matrix.indptr, matrix.indices, matrix.data, x)


@functools.partial(
    jax.tree_util.register_dataclass, data_fields=["forward", "backward"], meta_fields=[]
)
@dataclasses.dataclass(frozen=True)
class NativeOperator(SharedOperator):
    """``A`` and ``A^T`` as :class:`CsrMatrix`; ``@`` goes through the native kernel."""

    forward: CsrMatrix
    backward: CsrMatrix
    stored: ClassVar[type] = CsrMatrix


def halpern_steps(
    operator: NativeOperator,
    c: jax.Array,
    var_lower: jax.Array,
    var_upper: jax.Array,
    row_lower: jax.Array,
    row_upper: jax.Array,
    x: jax.Array,
    y: jax.Array,
    x_anchor: jax.Array,
    y_anchor: jax.Array,
    tau: jax.Array,
    sigma: jax.Array,
    inner: jax.Array,
    steps: int,
) -> tuple[jax.Array, jax.Array]:
    """``steps`` restarted-Halpern PDHG iterations (PDLP's inner loop: the PDHG step of
    ``jaxopt_suite.lp.pdlp._pdhg`` and the Halpern average towards the anchor, inner
    counter ``inner + k``) in one call of the kernel in ``halpern_steps.cc``, which keeps
    each group of columns in cache for all of them. A batch in columns: ``x, x_anchor``
    ``(n, B)``, ``y, y_anchor`` ``(m, B)``; ``c, var_lower, var_upper`` ``(n, B)`` or
    ``(n, 1)``, ``row_lower, row_upper`` ``(m, B)`` or ``(m, 1)``; ``tau, sigma, inner``
    one per column, any shape of ``B`` entries. A single LP: every vector 1-D, the scalars
    0-D. Returns ``(x, y)``. Infinite bounds are allowed (the bounds, not the iterates)."""
    require()
    steps = check_integer("steps", steps, 0)
    if x.ndim not in (1, 2):
        raise ValueError(f"x must have shape (n,) or (n, B), got {x.shape}")
    single = x.ndim == 1
    n, batch = x.shape[0], 1 if single else x.shape[1]
    m = y.shape[0] if y.ndim else 0
    panels = {}
    for name, value, rows, may_share in (
        ("c", c, n, True),
        ("var_lower", var_lower, n, True),
        ("var_upper", var_upper, n, True),
        ("row_lower", row_lower, m, True),
        ("row_upper", row_upper, m, True),
        ("x", x, n, False),
        ("y", y, m, False),
        ("x_anchor", x_anchor, n, False),
        ("y_anchor", y_anchor, m, False),
    ):
        shapes = [(rows,)] if single else [(rows, batch)] + [(rows, 1)] * may_share
        if value.shape not in shapes or value.dtype != x.dtype:
            raise ValueError(
                f"{name} must be {x.dtype} of shape {' or '.join(map(str, shapes))}, got "
                f"{value.dtype} {value.shape}"
            )
        panels[name] = value[:, None] if single else value  # (rows, B) or (rows, 1)
    scalars = []
    for name, value in (("tau", tau), ("sigma", sigma), ("inner", inner)):
        if jnp.size(value) != batch:
            raise ValueError(
                f"{name} must hold one value per column ({batch}), got {jnp.shape(value)}"
            )
        scalars.append(jnp.reshape(value, (batch,)).astype(x.dtype))
    if operator.forward.rows != m or operator.forward.columns not in (None, n):
        raise ValueError(f"the operator's A is not ({m}, {n}) for x {x.shape} and y {y.shape}")
    out = (jax.ShapeDtypeStruct((n, batch), x.dtype), jax.ShapeDtypeStruct((m, batch), x.dtype))
    # the third output is the kernel's scratch: x_bar for a batch, (n, B); one LP also keeps
    # its two sparse products there, (n + m, 1)
    scratch = jax.ShapeDtypeStruct((n + m, 1) if batch == 1 else (n, batch), x.dtype)
    call = jax.ffi.ffi_call(STEPS_TARGET, (*out, scratch), vmap_method="sequential")
    at, a = operator.backward, operator.forward
    x_new, y_new, _ = call(
        at.indptr,
        at.indices,
        at.data,
        a.indptr,
        a.indices,
        a.data,
        *panels.values(),
        *scalars,
        steps=np.int64(steps),
    )
    return (x_new[:, 0], y_new[:, 0]) if single else (x_new, y_new)


__all__ = [
    "CsrMatrix",
    "NativeOperator",
    "available",
    "csr_panel",
    "halpern_steps",
    "require",
    "unavailable_reason",
]
