"""A CPU kernel for PDLP's batched products: CSR matrix times a dense panel.

Under ``vmap`` (``solve_lp_batch``, the branch-and-bound) every PDHG iteration multiplies
one shared sparse matrix by a ``(n, B)`` panel. XLA's CPU backend has no good way to do
that at a few percent density: its gather moves one element at a time, so an ELL or
BCOO product costs more than the dense one, and the dense one does ``m n B`` work. The
kernel in ``csr_spmm.cc`` adds one scaled panel row per stored entry, with the batch in
registers, through XLA's FFI (``jax.ffi``); the ``lp`` benchmark suite times it against
XLA's dense and BCOO products (its SpMM table).

The kernel is compiled on first use (:mod:`jaxopt_suite._native`). Where no compiler
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
import scipy.sparse as sp

from jaxopt_suite import _native
from jaxopt_suite.lp.operator import SharedOperator, check_rows

SOURCE = Path(__file__).with_name("csr_spmm.cc")
TARGET = "jaxopt_suite_csr_panel"
_TARGETS = ((TARGET, "JaxoptSuiteCsrPanel"),)


def available() -> bool:
    """Whether the kernel is built and registered (it runs on the CPU backend only)."""
    return _native.register(SOURCE, _TARGETS) == ""


def unavailable_reason() -> str:
    """Why :func:`available` is false (``""`` when it is true)."""
    return _native.register(SOURCE, _TARGETS)


def require() -> None:
    reason = _native.register(SOURCE, _TARGETS)
    if reason:
        raise RuntimeError(f"the native CPU kernel is unavailable: {reason}")


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["indptr", "indices", "data"],
    meta_fields=["rows", "columns"],
)
@dataclasses.dataclass(frozen=True)
class CsrMatrix:
    """A CSR matrix on the device, for :func:`csr_panel` (``columns`` None: unchecked)."""

    indptr: jax.Array  # (rows + 1,) int32
    indices: jax.Array  # (nnz,) int32
    data: jax.Array  # (nnz,)
    rows: int
    columns: int | None = None

    @classmethod
    def from_scipy(cls, A, dtype) -> CsrMatrix:
        require()
        A = sp.csr_array(A, copy=True)  # sum_duplicates must not rewrite the caller's
        A.sum_duplicates()
        if A.nnz >= 2**31:
            raise ValueError(f"the native kernel takes under 2**31 nonzeros, got {A.nnz}")
        return cls(
            jnp.asarray(A.indptr, jnp.int32),
            jnp.asarray(A.indices, jnp.int32),
            jnp.asarray(A.data, dtype),
            int(A.shape[0]),
            int(A.shape[1]),
        )

    def matvec(self, x: jax.Array) -> jax.Array:
        return csr_panel(self, x)


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


__all__ = [
    "CsrMatrix",
    "NativeOperator",
    "available",
    "csr_panel",
    "require",
    "unavailable_reason",
]
