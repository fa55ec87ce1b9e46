"""A sparse matrix for PDLP's products in plain jnp: ELLPACK rows, split when long.

Each row's nonzeros sit in a fixed-width slab ``cols[r, :k], vals[r, :k]`` (padding has
value 0 and column 0), so ``A x`` is one gather and one reduction over the slab, with no
scatter. A row longer than ``k`` is cut into several slab rows whose sums are added back
with one sorted ``segment_sum`` over the (few) slab rows. ``k`` is the longest row when
padding to it at most doubles the storage, else the power of two at or below twice the mean
row length, so one dense row (a budget constraint, say) does not blow the slab up to
``m x n``. The width and the
number of slab rows are then rounded up a little (:func:`bucketed`): padding slab rows hold
value 0, so matrices of similar patterns (the polish LPs of a branch-and-bound, one set of
pairs against another) have the same shapes and share a compiled solve.

:class:`EllOperator` holds ``A`` and ``A^T`` in this form. Times a panel ``(n, B)`` (many
LPs sharing one matrix, as ``solve_lp_batch`` holds them) or under ``vmap`` over the vector,
its product is one gather over the ``(n, B)`` block with the batch in the trailing axis,
which on CPU is
several times faster per instance than a batched dense or BCOO product.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp
from jax import custom_batching


def check_rows(x: jax.Array, columns: int | None) -> None:
    """A ValueError unless ``x`` has as many rows as the matrix has ``columns`` (``None``:
    not recorded, unchecked): a stored matrix's product would clamp or overrun the index."""
    if columns is not None and x.shape[0] != columns:
        raise ValueError(f"x has {x.shape[0]} rows but the matrix has {columns} columns")


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["cols", "vals", "segment"],
    meta_fields=["rows", "split", "columns"],
)
@dataclasses.dataclass(frozen=True)
class EllMatrix:
    """``cols, vals``: ``(r, k)`` slabs; ``segment[i]``: the matrix row of slab row ``i``
    (sorted; used when ``split``, else slab row ``i < rows`` is row ``i``); ``rows`` and
    ``columns``: the matrix's shape (``columns`` None: unchecked)."""

    cols: jax.Array
    vals: jax.Array
    segment: jax.Array
    rows: int
    split: bool
    columns: int | None = None

    @classmethod
    def from_scipy(cls, A, dtype) -> EllMatrix:
        A = sp.csr_array(A, copy=True)  # sum_duplicates must not rewrite the caller's
        A.sum_duplicates()
        m = A.shape[0]
        counts = np.diff(A.indptr)
        mean = A.nnz / max(m, 1)
        longest = int(counts.max()) if m else 0
        if longest * m <= 2 * A.nnz + m:
            width = bucketed(max(longest, 1), 3)
        else:  # a power of two: the same for matrices whose mean rows differ a little
            width = 1 << (max(1, int(2 * mean)).bit_length() - 1)
        pieces = np.maximum(1, -(-counts // width))  # slab rows per matrix row
        split = bool(pieces.sum() != m)
        segment = np.repeat(np.arange(m), pieces)
        first = np.cumsum(pieces) - pieces  # first slab row of each row
        # position of each stored entry: slab row and slot within it
        within = np.arange(A.nnz) - np.repeat(A.indptr[:-1], counts)
        slab_row = np.repeat(first, counts) + within // width
        slot = within % width
        # padding slab rows (value 0): summed into the last row when split, else cut off
        slabs = max(bucketed(len(segment), 4), 16) if m else 0
        segment = np.concatenate([segment, np.full(slabs - len(segment), m - 1)])
        cols = np.zeros((slabs, width), np.int32)
        vals = np.zeros((slabs, width), dtype)
        cols[slab_row, slot] = A.indices
        vals[slab_row, slot] = A.data
        return cls(
            jnp.asarray(cols), jnp.asarray(vals), jnp.asarray(segment, jnp.int32), m, split,
            int(A.shape[1]),
        )  # fmt: skip

    def matvec(self, x: jax.Array) -> jax.Array:
        """``A x`` for ``x`` of shape ``(n,)`` or ``(n, B)``."""
        check_rows(x, self.columns)  # x[cols] would clamp
        if self.cols.shape[0] == 0 or x.shape[0] == 0:  # an empty matrix: nothing to gather
            return jnp.zeros((self.rows, *x.shape[1:]), jnp.result_type(self.vals, x))
        gathered = x[self.cols]  # (r, k) or (r, k, B)
        vals = self.vals if x.ndim == 1 else self.vals[:, :, None]
        out = jnp.sum(vals * gathered, axis=1)
        if self.split:
            return jax.ops.segment_sum(out, self.segment, self.rows, indices_are_sorted=True)
        return out[: self.rows]  # slab row i is row i; the padding rows after them go


def bucketed(count: int, bits: int) -> int:
    """``count`` rounded up to a multiple of ``2**-bits`` of its power of two: at most
    ``2**-bits`` more, and few distinct values (exact below ``2**(bits + 1)``)."""
    step = 1 << max(0, int(count).bit_length() - 1 - bits)
    return -(-int(count) // step) * step


@functools.cache
def _shared_matvec(vector: Callable, panel: Callable):
    """``matrix @ x`` as a ``custom_vmap``: a batch of vectors against one shared matrix
    becomes one panel product with the batch in the trailing axis, ``(A X^T)^T``."""

    @custom_batching.custom_vmap
    def matvec(matrix, x):
        return vector(matrix, x)

    @matvec.def_vmap
    def batched(axis_size, in_batched, matrix, x):
        matrix_batched, x_batched = in_batched
        if any(jax.tree.leaves(matrix_batched)):
            # per leaf: a leaf shared across the batch (the pattern, say) is not mapped
            axes = jax.tree.map(lambda batched: 0 if batched else None, matrix_batched)
            out = jax.vmap(vector, in_axes=(axes, 0 if x_batched else None))(matrix, x)
            return out, True
        if not x_batched:
            return matvec(matrix, x), False
        return panel(matrix, x.T).T, True

    return matvec


class SharedOperator:
    """``A`` and ``A^T`` in some stored form (``forward``, ``backward``): ``@`` a vector,
    ``.T`` the transpose; ``@`` a panel ``(n, B)`` (a batch in columns, what
    ``solve_lp_batch`` multiplies every iteration) and ``@`` a vector under ``vmap`` are one
    panel product. By default a subclass names its stored
    matrix type as ``stored`` (with ``from_scipy(A, dtype)`` and ``matvec(x)`` for ``x`` of
    shape ``(n,)`` or ``(n, B)``); one whose vector and panel products differ overrides
    ``vector(matrix, x[n])`` and ``panel(matrix, X[n, B])``."""

    forward: Any
    backward: Any
    stored: ClassVar[Any]

    @classmethod
    def from_scipy(cls, A, dtype):
        A = sp.csr_array(A)
        return cls(cls.stored.from_scipy(A, dtype), cls.stored.from_scipy(A.T, dtype))

    @staticmethod
    def vector(matrix, x: jax.Array) -> jax.Array:
        return matrix.matvec(x)

    @staticmethod
    def panel(matrix, x: jax.Array) -> jax.Array:
        return matrix.matvec(x)

    def __matmul__(self, x: jax.Array) -> jax.Array:
        if x.ndim == 2:  # a batch in columns
            return type(self).panel(self.forward, x)
        return _shared_matvec(type(self).vector, type(self).panel)(self.forward, x)

    @property
    def T(self):
        return type(self)(self.backward, self.forward)


@functools.partial(
    jax.tree_util.register_dataclass, data_fields=["forward", "backward"], meta_fields=[]
)
@dataclasses.dataclass(frozen=True)
class EllOperator(SharedOperator):
    """``A`` and ``A^T`` as :class:`EllMatrix`."""

    forward: EllMatrix
    backward: EllMatrix
    stored: ClassVar[type] = EllMatrix
