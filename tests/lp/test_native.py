"""The native CPU kernel: CSR times a panel, and PDLP through it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp

from jaxopt_suite import _native
from jaxopt_suite.lp import LP, LPOptions, instances, native, solve_lp, solve_lp_batch

pytestmark = pytest.mark.skipif(
    not native.available(), reason=f"native kernel unavailable: {native.unavailable_reason()}"
)


def _matrix(m, n, density, seed, empty_row=None):
    A = sp.random(m, n, density=density, random_state=seed, format="csr")
    A.data = np.random.default_rng(seed).normal(size=A.nnz)
    A = sp.csr_array(A)
    if empty_row is not None:
        A = A.tolil()
        A[empty_row, :] = 0.0
        A = sp.csr_array(A)
    A.eliminate_zeros()
    return A


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
@pytest.mark.parametrize("batch", [None, 1, 3, 8, 17, 64, 200])
def test_panel_matches_dense(dtype, batch):
    with jax.enable_x64(dtype == jnp.float64):
        A = _matrix(37, 53, 0.1, seed=3, empty_row=5)
        matrix = native.CsrMatrix.from_scipy(A, dtype)
        shape = (53,) if batch is None else (53, batch)
        x = jnp.asarray(np.random.default_rng(1).normal(size=shape), dtype)
        y = jax.jit(native.csr_panel)(matrix, x)
        expected = np.asarray(A.toarray()) @ np.asarray(x, np.float64)
        assert y.shape == expected.shape and y.dtype == dtype
        tol = 1e-12 if dtype == jnp.float64 else 1e-5
        np.testing.assert_allclose(np.asarray(y, np.float64), expected, atol=tol, rtol=tol)
        assert np.all(np.asarray(y)[5] == 0.0)  # the empty row


def test_operator_under_vmap_is_one_panel_product():
    with jax.enable_x64(True):
        A = _matrix(30, 45, 0.15, seed=4)
        op = native.NativeOperator.from_scipy(A, jnp.float64)
        xs = jnp.asarray(np.random.default_rng(2).normal(size=(6, 45)))
        ys = jnp.asarray(np.random.default_rng(3).normal(size=(6, 30)))
        forward = jax.jit(jax.vmap(lambda v: op @ v))(xs)
        backward = jax.jit(jax.vmap(lambda v: op.T @ v))(ys)
        np.testing.assert_allclose(forward, xs @ A.toarray().T, atol=1e-12)
        np.testing.assert_allclose(backward, ys @ A.toarray(), atol=1e-12)
        # the batched call lowers to one custom call, not one per vector
        text = jax.jit(jax.vmap(lambda v: op @ v)).lower(xs).as_text()
        assert text.count(native.TARGET) == 1


def test_bad_input_is_named():
    A = _matrix(10, 12, 0.3, seed=5)
    matrix = native.CsrMatrix.from_scipy(A, jnp.float32)
    with pytest.raises(ValueError, match="dtype"):
        native.csr_panel(matrix, jnp.ones(12, jnp.int32))
    with pytest.raises(ValueError, match=r"\(n,\) or \(n, B\)"):
        native.csr_panel(matrix, jnp.ones((12, 2, 2), jnp.float32))
    for rows in (2, 20):  # a short x was read past its end, a long one accepted
        with pytest.raises(ValueError, match=f"x has {rows} rows but the matrix has 12 columns"):
            native.csr_panel(matrix, jnp.ones(rows, jnp.float32))


def test_build_reports_a_broken_compiler(tmp_path):
    path, reason = _native.build(native.SOURCE, str(tmp_path / "no-such-compiler"), tmp_path)
    assert path is None and "no-such-compiler" in reason
    path, reason = _native.build(native.SOURCE, None, tmp_path)
    assert path is None and "compiler" in reason


def test_auto_picks_native_on_cpu():
    from jaxopt_suite.lp import pdlp

    lp = instances.random_sparse(20, 30, 0.1, seed=0)
    assert pdlp._matrix_kind(lp.A, "auto", batched=False) == "native"
    assert pdlp._matrix_kind(lp.A, "auto", batched=True) == "native"


def test_solves_match_dense_products():
    with jax.enable_x64(True):
        lp = instances.random_sparse(40, 60, 0.1, seed=7)
        options = LPOptions(tolerance=1e-8)
        ours = solve_lp(lp, options._replace(matrix="native"))
        dense = solve_lp(lp, options._replace(matrix="dense"))
        assert ours.status.name == dense.status.name == "OPTIMAL"
        assert abs(ours.objective - dense.objective) <= 1e-6 * max(1.0, abs(dense.objective))
        rng = np.random.default_rng(0)
        B = 5
        lower = np.tile(lp.var_lower, (B, 1))
        upper = np.tile(lp.var_upper, (B, 1))
        upper[:, :6] = rng.uniform(0.5, 3.0, (B, 6))
        batch = solve_lp_batch(lp, lower, upper, options=options._replace(matrix="native"))
        for b in range(B):
            one = solve_lp(
                LP(lp.c, lp.A, lp.row_lower, lp.row_upper, lower[b], upper[b]),
                options._replace(matrix="dense"),
            )
            assert abs(batch.objective[b] - one.objective) <= 1e-6 * max(1.0, abs(one.objective))
