"""The block-sparse SpMM kernel (interpret mode on CPU) against its reference and dense."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp

from pallas_kernels import BlockELL, BlockSizes, bsr_spmm, bsr_spmm_reference

# float32 products of O(1) entries over <= 64 terms: errors ~ 64 * 6e-8 * |terms|.
ATOL = 1e-5


@pytest.mark.parametrize(
    ("m", "n", "density", "block"),
    [
        (50, 37, 0.1, (8, 8)),
        (64, 64, 0.02, (16, 16)),
        (33, 70, 0.3, (8, 16)),
        (20, 20, 0.0, (8, 8)),
    ],
)
def test_kernel_matches_reference_and_dense(m, n, density, block):
    A = sp.random(m, n, density=density, random_state=0, format="csr")
    E = BlockELL.from_scipy(A, BlockSizes(*block))
    X = jax.random.normal(jax.random.key(0), (n, 6))
    dense = A.toarray() @ np.asarray(X, np.float64)
    np.testing.assert_allclose(bsr_spmm_reference(E, X), dense, atol=ATOL)
    np.testing.assert_allclose(bsr_spmm(E, X), dense, atol=ATOL)
    np.testing.assert_allclose(jax.jit(bsr_spmm)(E, X), dense, atol=ATOL)
    # The transpose as its own block-ELL matrix.
    ET = BlockELL.from_scipy(A.T, BlockSizes(block[1], block[0]))
    Y = jax.random.normal(jax.random.key(1), (m, 3))
    np.testing.assert_allclose(bsr_spmm(ET, Y), A.toarray().T @ np.asarray(Y), atol=ATOL)


def test_kernel_under_vmap():
    A = sp.random(40, 24, density=0.2, random_state=1, format="csr")
    E = BlockELL.from_scipy(A, BlockSizes(8, 8))
    Xs = jax.random.normal(jax.random.key(2), (4, 24, 5))
    out = jax.vmap(lambda x: bsr_spmm(E, x))(Xs)
    np.testing.assert_allclose(out, np.einsum("mn,vnb->vmb", A.toarray(), Xs), atol=ATOL)
    np.testing.assert_allclose(out, jax.vmap(lambda x: bsr_spmm_reference(E, x))(Xs), atol=ATOL)


def test_float64_inputs_accumulate_in_float64():
    # 0.5-density 20 x 20 in 8 x 8 tiles: three tiles per block row, sums of ~10 terms.
    # A float32 accumulator leaves errors ~1e-7; a float64 one ~1e-15.
    A = sp.random(20, 20, density=0.5, random_state=0, format="csr")
    X = np.random.default_rng(0).normal(size=(20, 3))
    exact = A @ X
    with jax.enable_x64(True):
        E = BlockELL.from_scipy(A, BlockSizes(8, 8))
        assert E.blocks.dtype == jnp.float64
        out = bsr_spmm(E, jnp.asarray(X), interpret=True)
        reference = bsr_spmm_reference(E, jnp.asarray(X))
    assert out.dtype == jnp.float64
    np.testing.assert_allclose(out, exact, rtol=0, atol=1e-13)
    np.testing.assert_allclose(out, reference, rtol=0, atol=1e-13)


def test_block_ell_layout_pads_each_block_row_to_the_same_count():
    # Block row 0 has tiles in block columns 0 and 2, block row 1 only in column 1.
    dense = np.zeros((4, 6))
    dense[0, 0] = 1.0
    dense[1, 5] = 2.0
    dense[3, 2] = 3.0
    E = BlockELL.from_scipy(dense, BlockSizes(2, 2))
    assert E.blocks.shape == (2, 2, 2, 2) and E.cols.shape == (2, 2)
    assert sorted(np.asarray(E.cols[0]).tolist()) == [0, 2]
    # the padding tile of block row 1 is zero, whatever column it names
    k = int(np.flatnonzero(np.asarray(E.cols[1]) == 1)[0])
    np.testing.assert_array_equal(np.asarray(E.blocks[1, 1 - k]), 0.0)


def test_bad_input():
    E = BlockELL.from_scipy(np.eye(4), BlockSizes(2, 2))
    with pytest.raises(ValueError, match="X has 3 rows but A has 4 columns"):
        bsr_spmm(E, jnp.ones((3, 2)))
    with pytest.raises(ValueError, match=r"X must have shape \(n, B\)"):
        bsr_spmm(E, jnp.ones(4))
    with pytest.raises(TypeError, match="A must be a BlockELL"):
        bsr_spmm(np.eye(4), jnp.ones((4, 2)))
    with pytest.raises(ValueError, match="bm must be an int >= 1"):
        BlockSizes(0, 2)
    # a hand-built BlockELL: too few block rows returned fewer rows, a column past the last
    # block column was clamped to another panel, "no" ran in interpret mode
    X = jnp.ones((4, 2))
    for bad, match in (
        (dataclasses.replace(E, shape=(5, 4)), "2 block rows of 2, too few for its 5 rows"),
        (dataclasses.replace(E, cols=E.cols.at[0, 0].set(7)), r"A.cols must lie in \[0, 2\)"),
        (dataclasses.replace(E, cols=E.cols.astype(jnp.float32)), "A.cols must be integers"),
        (dataclasses.replace(E, blocks=E.blocks[..., 0]), r"A.blocks must have shape"),
    ):
        for product in (bsr_spmm, bsr_spmm_reference):
            with pytest.raises(ValueError, match=match):
                product(bad, X)
    with pytest.raises(ValueError, match="interpret must be a bool or None, got 'no'"):
        bsr_spmm(E, X, interpret="no")
    # NumPy integers and (bm, bn) pairs are block sizes
    assert BlockSizes(np.int64(2), 2) == BlockSizes(2, 2)
    pair = BlockELL.from_scipy(np.eye(4), (2, 2))
    np.testing.assert_array_equal(bsr_spmm_reference(pair, X), X)
    with pytest.raises(TypeError, match="block_sizes must be a BlockSizes or a .bm, bn. pair"):
        BlockELL.from_scipy(np.eye(4), 2)


def test_tile_codes_past_int32_land_in_their_block_row():
    # 70000 x 70000 in 1 x 1 tiles: row * nbc overflowed scipy's int32 indices, and the
    # entry at row 61400 was put in another block row (its product read 0, not 10)
    n = 70000
    rows, cols = np.array([0, 61400], np.int32), np.array([0, 5], np.int32)
    A = sp.csr_array(sp.coo_array(([1.0, 2.0], (rows, cols)), shape=(n, n)))
    E = BlockELL.from_scipy(A, BlockSizes(1, 1))
    out = bsr_spmm_reference(E, jnp.arange(n, dtype=jnp.float32)[:, None])
    assert float(out[61400, 0]) == 10.0 and float(out[0, 0]) == 0.0


def test_kernel_and_reference_share_the_promoted_dtype_and_empty_shapes():
    A = sp.random(12, 10, density=0.4, random_state=1, format="csr")
    X = np.random.default_rng(1).normal(size=(10, 2))
    with jax.enable_x64(True):  # float32 A, float64 X: the kernel cut X to float32
        E = BlockELL.from_scipy(A, BlockSizes(8, 8), dtype=jnp.float32)
        out = bsr_spmm(E, jnp.asarray(X), interpret=True)
        reference = bsr_spmm_reference(E, jnp.asarray(X))
    assert out.dtype == reference.dtype == jnp.float64
    np.testing.assert_allclose(out, reference, rtol=0, atol=1e-12)
    for shape, batch in (((0, 4), 2), ((4, 0), 2), ((3, 4), 0)):
        empty = BlockELL.from_scipy(sp.csr_array(shape), BlockSizes(8, 8))
        X0 = jnp.ones((shape[1], batch), jnp.float32)
        for product in (bsr_spmm, bsr_spmm_reference):
            got = product(empty, X0)
            assert got.shape == (shape[0], batch) and not np.any(np.asarray(got))
