"""Block-sparse times dense batch, ``Y = A X`` with ``X`` of shape ``(n, B)``, in Pallas.

``A`` is stored in block-ELL form (:class:`BlockELL`): every block row keeps the same number
``K`` of ``(bm, bn)`` tiles, padded with zero tiles, and ``cols[i, k]`` names the block
column of tile ``k`` of block row ``i``. One program per block row accumulates
``tile @ X[cols * bn : cols * bn + bn, :]`` over its ``K`` tiles into a ``(bm, B)`` output
panel: the batch sits in the lane dimension, as the batched LP solver wants (``A`` shared,
``B`` right-hand sides). ``A^T`` is a separate :class:`BlockELL`, built from the host
matrix's transpose (``BlockELL.from_scipy(matrix.T)``).

``interpret=None`` runs compiled on GPU and in interpret mode elsewhere (CPU lowering is
interpret-only); :func:`bsr_spmm_reference` is the same product in plain ``jnp``. Both
multiply in the dtype ``A`` and ``X`` promote to and return it.

``X`` should be finite: a tile is dense, so its zeros (and a padding tile's, which reads
block column 0) multiply entries of ``X`` that the row does not use, and ``0 * nan`` is NaN:
a non-finite entry of ``X`` can reach rows a sparse product would leave finite.
"""

from __future__ import annotations

import dataclasses
import functools
import numbers

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp
from jax.experimental import pallas as pl


@dataclasses.dataclass(frozen=True)
class BlockSizes:
    """Tile shape ``(bm, bn)`` of the block-sparse matrix."""

    bm: int = 16
    bn: int = 16

    def __post_init__(self):
        for name in ("bm", "bn"):
            value = getattr(self, name)
            # a NumPy integer is one (kept as a Python int: the sizes are static)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
            object.__setattr__(self, name, int(value))


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["blocks", "cols"],
    meta_fields=["shape", "block_sizes"],
)
@dataclasses.dataclass(frozen=True)
class BlockELL:
    """``blocks (nbr, K, bm, bn)``, ``cols (nbr, K)`` int32, logical ``shape (m, n)``."""

    blocks: jax.Array
    cols: jax.Array
    shape: tuple[int, int]
    block_sizes: BlockSizes

    @classmethod
    def from_scipy(cls, matrix, block_sizes: BlockSizes = BlockSizes(), dtype=None) -> BlockELL:
        """Tiles a scipy sparse (or dense numpy) matrix; rows and columns are padded to
        multiples of the tile shape with zeros."""
        if isinstance(block_sizes, tuple | list):  # (bm, bn)
            block_sizes = BlockSizes(*block_sizes)
        if not isinstance(block_sizes, BlockSizes):
            raise TypeError(
                f"block_sizes must be a BlockSizes or a (bm, bn) pair, got {block_sizes!r}"
            )
        A = sp.csr_array(matrix)
        m, n = A.shape
        bm, bn = block_sizes.bm, block_sizes.bn
        nbr = -(-m // bm)
        coo = A.tocoo()
        # int64 codes: scipy's int32 indices overflowed row * nbc past 2**31 tiles (a
        # 50000 x 50000 matrix in 1 x 1 tiles), and a wrapped code put a tile elsewhere
        row, col = coo.row.astype(np.int64), coo.col.astype(np.int64)
        nbc = -(-n // bn)
        # Tiles present, as codes row * nbc + col, sorted: each block row's tiles are a run.
        codes = np.unique((row // bm) * nbc + col // bn)
        tile_row = codes // nbc
        counts = np.bincount(tile_row, minlength=nbr)
        K = max(1, int(counts.max()) if codes.size else 1)
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        slot_of_code = np.arange(codes.size) - starts[tile_row]
        cols = np.zeros((nbr, K), np.int32)
        cols[tile_row, slot_of_code] = codes % nbc
        blocks = np.zeros((nbr, K, bm, bn), np.float64)
        entry_code = (row // bm) * nbc + col // bn
        entry_slot = slot_of_code[np.searchsorted(codes, entry_code)]
        np.add.at(blocks, (row // bm, entry_slot, row % bm, col % bn), coo.data)
        dtype = dtype or jnp.result_type(float)
        return cls(jnp.asarray(blocks, dtype), jnp.asarray(cols), (int(m), int(n)), block_sizes)

    @property
    def padded_shape(self) -> tuple[int, int]:
        nbr = self.cols.shape[0]
        nbc = -(-self.shape[1] // self.block_sizes.bn)
        return nbr * self.block_sizes.bm, nbc * self.block_sizes.bn


def _check(A: BlockELL, X: jax.Array) -> None:
    """Shapes (and, for concrete ``cols``, their range): a hand-built :class:`BlockELL` with
    too few block rows for its ``shape`` returned fewer rows, and a column index past the
    last block column was clamped by the gather to another column's panel."""
    if not isinstance(A, BlockELL):
        raise TypeError(f"A must be a BlockELL, got {type(A).__name__}")
    bm, bn = A.block_sizes.bm, A.block_sizes.bn
    m, n = A.shape
    if A.cols.ndim != 2 or not jnp.issubdtype(A.cols.dtype, jnp.integer):
        raise ValueError(f"A.cols must be integers of shape (nbr, K), got {A.cols.dtype} "
                         f"{A.cols.shape}")  # fmt: skip
    nbr, K = A.cols.shape
    if A.blocks.shape != (nbr, K, bm, bn):
        raise ValueError(
            f"A.blocks must have shape (nbr, K, bm, bn) = {(nbr, K, bm, bn)}, got {A.blocks.shape}"
        )
    if nbr * bm < m:
        raise ValueError(f"A has {nbr} block rows of {bm}, too few for its {m} rows")
    if not isinstance(A.cols, jax.core.Tracer) and A.cols.size:
        cols = np.asarray(A.cols)
        nbc = max(-(-n // bn), 1)  # no columns: the padding tiles still name column 0
        if cols.min() < 0 or cols.max() >= nbc:
            raise ValueError(
                f"A.cols must lie in [0, {nbc}) (block columns of {bn} for {n} columns), got "
                f"values in [{cols.min()}, {cols.max()}]"
            )
    if X.ndim != 2:
        raise ValueError(f"X must have shape (n, B), got {X.shape}")
    if X.shape[0] != A.shape[1]:
        raise ValueError(f"X has {X.shape[0]} rows but A has {A.shape[1]} columns")


def _pad_rows(A: BlockELL, X: jax.Array) -> jax.Array:
    n_pad = A.padded_shape[1]
    return jnp.pad(X, ((0, n_pad - X.shape[0]), (0, 0)))


def bsr_spmm_reference(A: BlockELL, X: jax.Array) -> jax.Array:
    """``A @ X`` in plain ``jnp`` (gather the row panels, one einsum)."""
    _check(A, X)
    bn = A.block_sizes.bn
    dtype = jnp.result_type(A.blocks, X)  # the kernel's too
    if 0 in (A.shape[0], A.shape[1], X.shape[1]):  # nothing to gather
        return jnp.zeros((A.shape[0], X.shape[1]), dtype)
    Xp = _pad_rows(A, X)
    panels = Xp.reshape(-1, bn, X.shape[1])[A.cols]  # (nbr, K, bn, B)
    Y = jnp.einsum("rkij,rkjb->rib", A.blocks.astype(dtype), panels.astype(dtype))
    return Y.reshape(-1, X.shape[1])[: A.shape[0]]


def _kernel(cols_ref, blocks_ref, x_ref, o_ref, *, K, bn):
    # cols, blocks and X stay where they are (memory space ANY); the program reads its K
    # column indices and tiles and the K row panels of X it needs, nothing else. No block
    # shape then depends on nbr, K or n, which Triton (power-of-two blocks) requires.
    # The sum runs in the output's precision, at least float32: a float64 product (x64
    # enabled) summed in float32 would lose half its digits.
    i = pl.program_id(0)
    acc_dtype = jnp.promote_types(o_ref.dtype, jnp.float32)

    def body(k, acc):
        c = cols_ref[i, k]
        panel = x_ref[pl.ds(c * bn, bn), :]
        return acc + jnp.dot(blocks_ref[i, k], panel, preferred_element_type=acc_dtype)

    acc = jnp.zeros(o_ref.shape, acc_dtype)
    o_ref[...] = jax.lax.fori_loop(0, K, body, acc).astype(o_ref.dtype)


def bsr_spmm(
    A: BlockELL,
    X: jax.Array,
    *,
    interpret: bool | None = None,
    compiler_params: pl.CompilerParams | None = None,
) -> jax.Array:
    """``A @ X`` for ``X`` of shape ``(n, B)`` with the Pallas kernel (module docstring).

    ``compiler_params``: passed to ``pallas_call`` (on GPU, Triton's
    ``jax.experimental.pallas.triton.CompilerParams`` selects the Triton lowering; the
    tile shape ``(bm, bn)`` and ``B`` must then be powers of two). ``vmap``-safe (an extra
    grid axis per mapped dimension)."""
    _check(A, X)
    if interpret is not None and not isinstance(interpret, bool | np.bool_):  # "no" is true
        raise ValueError(f"interpret must be a bool or None, got {interpret!r}")
    if interpret is None:
        interpret = jax.default_backend() != "gpu"
    nbr, K = A.cols.shape
    bm, bn = A.block_sizes.bm, A.block_sizes.bn
    # the product of the two dtypes, as the reference's (a float64 X was cut to float32)
    dtype = jnp.result_type(A.blocks, X)
    B = X.shape[1]
    if 0 in (A.shape[0], A.shape[1], B):  # an empty grid or panel: nothing to multiply
        return jnp.zeros((A.shape[0], B), dtype)
    Xp = _pad_rows(A, X).astype(dtype)
    whole = pl.BlockSpec(memory_space=pl.ANY)
    out = pl.pallas_call(
        functools.partial(_kernel, K=K, bn=bn),
        out_shape=jax.ShapeDtypeStruct((nbr * bm, B), dtype),
        grid=(nbr,),
        in_specs=[whole, whole, whole],
        out_specs=pl.BlockSpec((bm, B), lambda i: (i, 0)),
        interpret=interpret,
        compiler_params=compiler_params,
    )(A.cols, A.blocks.astype(dtype), Xp)
    return out[: A.shape[0]]
