"""The ELL operator: products equal scipy's, with split rows, under jit and vmap."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp

from jaxopt_suite.lp import LPOptions, Status, instances, solve_lp_batch
from jaxopt_suite.lp.operator import EllMatrix, EllOperator


def _matrix_with_a_dense_row(seed=0, m=30, n=40):
    rng = np.random.default_rng(seed)
    A = sp.random(m, n, density=0.08, random_state=seed, format="lil")
    A[2, :] = rng.normal(size=n)  # a budget-like row: forces splitting
    A[5, :] = 0.0  # an empty row
    return sp.csr_array(A)


def test_long_rows_are_split_and_short_ones_are_not():
    A = _matrix_with_a_dense_row()
    split = EllMatrix.from_scipy(A, np.float32)
    assert split.split and split.cols.shape[1] < A.shape[1]
    assert split.cols.shape[0] > A.shape[0]
    banded = sp.csr_array(sp.diags_array([1.0, -2.0, 1.0], offsets=[-1, 0, 1], shape=(9, 9)))
    plain = EllMatrix.from_scipy(banded, np.float32)
    assert not plain.split and plain.cols.shape == (16, 3)  # padded to at least 16 slab rows
    np.testing.assert_allclose(plain.matvec(jnp.ones(9)), banded @ np.ones(9), atol=1e-6)


def test_polish_matrices_of_one_model_share_shapes_and_a_compilation():
    # LPs of one model held to different pairs, their lambdas outside the pairs dropped
    # (as the branch-and-bound's polishes were built, and still are over intervals wider
    # than pairs): the patterns differ a little between pair sets (a breakpoint or a
    # function value at 0 drops an entry), which changed the slab width of A^T on this
    # instance and compiled the solve again
    from jaxopt_suite.pwl import instances as pwl_instances

    compiled = pwl_instances.build(pwl_instances.spec_by_name("workforce_p12x8_k8_s0")).compile()
    lp = compiled.lp
    lam = np.arange(compiled.num_vars, lp.num_cols)
    sets, position = compiled.column_set[lam], compiled.column_position[lam]
    by_columns = sp.csc_array(lp.A)
    rng = np.random.default_rng(0)
    traces, shapes, patterns = [], set(), set()
    product = jax.jit(lambda op, x, y: traces.append(1) or (op @ x, op.T @ y))
    for _ in range(12):
        first = rng.integers(0, compiled.set_size - 1)[sets]
        keep = np.ones(lp.num_cols, bool)
        keep[lam] = (position >= first) & (position <= first + 1)
        M = sp.csr_array(by_columns[:, keep])
        patterns.add(tuple(np.diff(M.indptr)) + tuple(np.diff(sp.csr_array(M.T).indptr)))
        op = EllOperator.from_scipy(M, np.float32)
        shapes.add(tuple(leaf.shape for leaf in jax.tree.leaves(op)))
        x = rng.normal(size=(M.shape[1], 3)).astype(np.float32)
        y = rng.normal(size=(M.shape[0], 3)).astype(np.float32)
        forward, backward = product(op, x, y)
        np.testing.assert_allclose(forward, M @ x, rtol=1e-5, atol=1e-4)
        np.testing.assert_allclose(backward, M.T @ y, rtol=1e-5, atol=1e-4)
    assert len(patterns) > 1  # the row lengths did differ
    assert len(shapes) == 1 and len(traces) == 1
    # the slab width: the longest row, at most 1/8 wider ...
    widths = [EllMatrix.from_scipy(_rows(k), np.float32).cols.shape[1] for k in range(1, 64)]
    assert all(k <= w <= k + k / 8 for k, w in zip(range(1, 64), widths, strict=True))
    # ... or, with one long row, a power of two at most twice the mean row length
    split = EllMatrix.from_scipy(_matrix_with_a_dense_row(), np.float32)
    width = split.cols.shape[1]
    assert split.split and width & (width - 1) == 0 and width <= 2 * _mean_row(split)


def _mean_row(matrix):
    return float(np.count_nonzero(matrix.vals)) / matrix.rows


def _rows(k):
    """5 rows of ``k`` entries each."""
    M = np.zeros((5, 64))
    M[:, :k] = 1.0
    return sp.csr_array(M)


@pytest.mark.parametrize("seed", [0, 1])
def test_products_match_scipy(seed):
    A = _matrix_with_a_dense_row(seed)
    op = EllOperator.from_scipy(A, np.float32)
    rng = np.random.default_rng(seed + 10)
    x = rng.normal(size=A.shape[1]).astype(np.float32)
    y = rng.normal(size=A.shape[0]).astype(np.float32)
    np.testing.assert_allclose(jax.jit(lambda v: op @ v)(x), A @ x, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(jax.jit(lambda v: op.T @ v)(y), A.T @ y, rtol=1e-5, atol=1e-5)


def test_vmap_is_one_panel_product():
    A = _matrix_with_a_dense_row(3)
    op = EllOperator.from_scipy(A, np.float32)
    X = jax.random.normal(jax.random.key(0), (5, A.shape[1]))
    Y = jax.random.normal(jax.random.key(1), (5, A.shape[0]))
    np.testing.assert_allclose(jax.jit(jax.vmap(lambda x: op @ x))(X), X @ A.T.toarray(), atol=1e-4)
    np.testing.assert_allclose(jax.vmap(lambda y: op.T @ y)(Y), Y @ A.toarray(), atol=1e-4)
    # the batch goes through one gather over the (n, B) panel
    jaxpr = jax.make_jaxpr(jax.vmap(lambda x: op @ x))(X)
    gathers = [e for e in jaxpr.jaxpr.eqns if e.primitive.name == "gather"]
    assert len(gathers) == 1 and gathers[0].outvars[0].aval.shape[-1] == 5


def test_vmap_over_matrices_too():
    mats = [EllMatrix.from_scipy(sp.csr_array(np.eye(3) * k), np.float32) for k in (1.0, 2.0)]
    stacked = jax.tree.map(lambda *a: jnp.stack(a), *mats)
    x = jnp.arange(3.0)
    out = jax.vmap(lambda m: EllOperator(m, m) @ x)(stacked)
    np.testing.assert_allclose(out, [x, 2 * x])


def test_batched_solve_through_ell_equals_dense():
    lp = instances.random_sparse(30, 45, 0.1, seed=4)
    lower = np.tile(lp.var_lower, (4, 1))
    upper = np.tile(lp.var_upper, (4, 1))
    upper[:, :3] = np.linspace(0.5, 2.0, 4)[:, None]
    ell = solve_lp_batch(lp, lower, upper, options=LPOptions(matrix="ell"))
    dense = solve_lp_batch(lp, lower, upper, options=LPOptions(matrix="dense"))
    assert np.all(ell.status == Status.OPTIMAL) and np.all(dense.status == Status.OPTIMAL)
    np.testing.assert_allclose(ell.objective, dense.objective, rtol=1e-3, atol=1e-3)


def test_compacting_a_batch_changes_no_result(monkeypatch):
    # 20 instances, 12 with every variable fixed at 0 (they stop at the first evaluations):
    # the running ones move into a batch of 8 and must end as they would in place.
    from jaxopt_suite.lp import pdlp

    lp = instances.random_sparse(20, 30, 0.2, seed=5)
    B = 20
    lower = np.tile(lp.var_lower, (B, 1))
    upper = np.tile(lp.var_upper, (B, 1))
    upper[:8, :4] = np.linspace(0.5, 3.0, 8)[:, None]
    lower[8:], upper[8:] = 0.0, 0.0
    options = LPOptions()
    together = solve_lp_batch(lp, lower, upper, options=options, compact=False)
    moves = []
    monkeypatch.setattr(pdlp, "_COMPACT_MIN", 16)  # compact a batch this narrow too
    take = pdlp._take_slots
    monkeypatch.setattr(pdlp, "_take_slots", lambda tree, i: moves.append(i.shape) or take(tree, i))
    compacted = solve_lp_batch(lp, lower, upper, options=options, compact=True)
    assert moves == [(8,)]
    assert np.all(together.iterations[:8] > together.iterations[8:].max())
    np.testing.assert_array_equal(compacted.status, together.status)
    # The same arithmetic per slot, but XLA vectorises the batch axis of width 8 and of
    # width 20 differently, so float32 rounding differs in the last bits and a restart or
    # stopping test that sits on its threshold may fire one evaluation apart. A slot that
    # got another's state would differ by far more (the instances' bounds differ by 0.36).
    # The infeasible slots (1 and the fixed ones) end with an arbitrary x and a ray y, and
    # when the ray's test passes depends on rounding: for them only the status counts.
    solved = together.status == Status.OPTIMAL
    assert solved.sum() >= 5
    gap = np.abs(compacted.iterations - together.iterations)[solved]
    assert np.all(gap <= options.eval_every)
    np.testing.assert_allclose(compacted.x[solved], together.x[solved], rtol=0, atol=1e-4)
    np.testing.assert_allclose(compacted.y[solved], together.y[solved], rtol=0, atol=1e-4)


def test_a_matrix_batched_in_some_leaves_maps_only_those():
    # vmap over the values of one pattern: every leaf was mapped over its first axis, the
    # shared cols too, and the products came out wrong
    base = EllMatrix.from_scipy(sp.csr_array([[1.0, 2, 0], [0, 0, 3], [4, 0, 5]]), np.float32)
    x = jnp.array([1.0, 10.0, 100.0])

    def product(scale):
        m = EllMatrix(base.cols, base.vals * scale, base.segment, base.rows, base.split)
        return EllOperator(m, m) @ x

    out = jax.vmap(product)(jnp.array([1.0, 2.0, 3.0]))
    np.testing.assert_allclose(out, [[21, 300, 504], [42, 600, 1008], [63, 900, 1512]])


def test_a_vector_of_the_wrong_length_is_refused_and_the_input_kept():
    A = sp.csr_array(([1.0, 2.0, 3.0], [1, 1, 0], [0, 2, 3]), shape=(2, 3))  # a duplicate
    op = EllOperator.from_scipy(A, np.float32)
    assert A.nnz == 3 and not A.has_canonical_format  # the caller's matrix is not rewritten
    for bad in (jnp.ones(2), jnp.ones(5)):  # x[cols] clamped and returned wrong values
        with pytest.raises(ValueError, match=f"x has {bad.shape[0]} rows but the matrix has 3"):
            op @ bad
    np.testing.assert_allclose(op @ jnp.array([1.0, 10.0, 100.0]), [30.0, 3.0])
    for shape in ((0, 4), (4, 0)):  # empty matrices failed to build
        empty = EllOperator.from_scipy(sp.csr_array(shape), np.float32)
        assert (empty @ jnp.ones(shape[1])).shape == (shape[0],)
