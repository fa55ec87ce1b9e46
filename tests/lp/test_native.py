"""The native CPU kernel: CSR times a panel, and PDLP through it."""

import ctypes
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp

from jaxopt_suite import _native
from jaxopt_suite.lp import (
    LP,
    LPOptions,
    Status,
    instances,
    native,
    solve_lp,
    solve_lp_batch,
)

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


def test_matrices_whose_nonzeros_differ_a_little_share_shapes_and_a_compilation():
    # the arrays run past indptr[-1] with padding the kernel never reads (non-finite here,
    # which would show in the product if it did)
    with jax.enable_x64(True):
        A = _matrix(40, 60, 0.25, seed=6)
        B = A.tolil()
        B[0, :] = 0.0  # a few nonzeros fewer
        B = sp.csr_array(B)
        B.eliminate_zeros()
        assert 0 < A.nnz - B.nnz < A.nnz // 16
        a, b = (native.CsrMatrix.from_scipy(M, jnp.float64) for M in (A, B))
        assert a.indices.shape == b.indices.shape == a.data.shape == b.data.shape
        assert a.data.shape[0] == native.padded_length(A.nnz) > A.nnz
        traces = []
        product = jax.jit(lambda m, x: traces.append(1) or native.csr_panel(m, x))
        x = jnp.asarray(np.random.default_rng(7).normal(size=(60, 3)))
        for M, matrix in ((A, a), (B, b)):
            poisoned = dataclasses.replace(matrix, data=matrix.data.at[M.nnz :].set(jnp.nan))
            np.testing.assert_allclose(product(poisoned, x), M.toarray() @ x, atol=1e-12)
        assert len(traces) == 1  # one compilation for both
    lengths = [native.padded_length(n) for n in range(1, 5000)]
    assert all(n <= p <= max(64, n + n / 16) for n, p in zip(range(1, 5000), lengths, strict=True))
    assert len(set(lengths[1000:])) < 4000 / 60  # few distinct lengths


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


def test_build_is_keyed_on_the_headers_beside_the_source(tmp_path):
    # the kernels share vector_width.h: a cache keyed on the source's bytes alone kept
    # serving the old build after the header changed
    source, header = tmp_path / "kernel.cc", tmp_path / "width.h"
    source.write_text('#include "width.h"\nextern "C" int width() { return kWidth; }\n')
    header.write_text("constexpr int kWidth = 32;\n")
    cache = tmp_path / "cache"
    compiler = _native._compiler()
    first, reason = _native.build(source, compiler, cache)
    assert first is not None, reason
    assert _native.build(source, compiler, cache) == (first, "")  # unchanged: the same build
    header.write_text("constexpr int kWidth = 64;\n")
    second, reason = _native.build(source, compiler, cache)
    assert second is not None and second != first, reason
    assert ctypes.cdll.LoadLibrary(str(second)).width() == 64


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


def _halpern_problem(batch, seed, shared):
    """Operands of ``native.halpern_steps`` for a 37 x 53 matrix with an empty row: mixed
    finite and infinite bounds, per-column or shared (``(k, 1)``) costs and bounds."""
    rng = np.random.default_rng(seed)
    A = _matrix(37, 53, 0.1, seed=seed, empty_row=4)
    cols = 1 if shared else batch
    lv = np.where(rng.random((53, cols)) < 0.3, -np.inf, rng.uniform(-2, 0, (53, cols)))
    uv = np.where(rng.random((53, cols)) < 0.3, np.inf, rng.uniform(0, 2, (53, cols)))
    lr = np.where(rng.random((37, 1)) < 0.4, -np.inf, rng.uniform(-1, 0, (37, 1)))
    ur = np.where(rng.random((37, 1)) < 0.4, np.inf, rng.uniform(0, 1, (37, 1)))
    ur[:5] = lr[:5] = rng.uniform(-1, 1, (5, 1))  # equality rows
    lr[5] = -np.inf
    ur[5] = np.inf  # a free row
    panels = {
        "c": rng.normal(size=(53, cols)),
        "var_lower": lv,
        "var_upper": uv,
        "row_lower": lr,
        "row_upper": ur,
        "x": rng.normal(size=(53, batch)),
        "y": rng.normal(size=(37, batch)),
        "x_anchor": rng.normal(size=(53, batch)),
        "y_anchor": rng.normal(size=(37, batch)),
    }
    scalars = {
        "tau": rng.uniform(0.05, 0.2, batch),
        "sigma": rng.uniform(0.05, 0.2, batch),
        "inner": rng.integers(0, 50, batch).astype(float),
    }
    return A, panels, scalars


def _solver_data(matrix, panels, eta, dtype):
    """pdlp's ``_Data`` with what its iterations read (the rest unused): ``matrix`` native
    (the kernel) or a dense array (XLA's loop), the costs and bounds of ``panels``."""
    from jaxopt_suite.lp import pdlp

    fields = dict.fromkeys(pdlp._Data._fields)
    fields.update(
        A=matrix,
        eta=jnp.asarray(eta, dtype),
        **{
            k: jnp.asarray(panels[k], dtype)
            for k in ("c", "var_lower", "var_upper", "row_lower", "row_upper")
        },
    )
    return pdlp._Data(**fields)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
@pytest.mark.parametrize("batch", [None, 1, 3, 8, 17, 40, 100])
@pytest.mark.parametrize("shared", [False, True])
def test_halpern_steps_match_the_loop_they_fuse(dtype, batch, shared):
    """The kernel against the solver's own XLA loop (pdlp._halpern_steps with a dense
    matrix), from the same state, in the solver's layouts: a batch in columns with shared
    vectors as ``(k, 1)``, and a single LP in 1-D."""
    from jaxopt_suite.lp import pdlp

    with jax.enable_x64(dtype == jnp.float64):
        A, panels, scalars = _halpern_problem(batch or 1, seed=batch or 0, shared=shared)
        rng = np.random.default_rng(7)
        omega = rng.uniform(0.3, 3.0, (1, batch or 1))
        if batch is None:  # a single LP: 1-D vectors, 0-D scalars
            panels = {k: v[:, 0] for k, v in panels.items()}
            scalars = {k: v[0] for k, v in scalars.items()}
            omega = omega[0, 0]
        eta = 0.9 / np.linalg.norm(A.toarray(), 2)
        state = [jnp.asarray(panels[k], dtype) for k in ("x", "y", "x_anchor", "y_anchor")]
        inner = jnp.asarray(np.reshape(scalars["inner"], np.shape(omega)), dtype)
        omega = jnp.asarray(omega, dtype)
        steps = jax.jit(pdlp._halpern_steps, static_argnums=7)
        dense = _solver_data(jnp.asarray(A.toarray(), dtype), panels, eta, dtype)
        kernel = _solver_data(native.NativeOperator.from_scipy(A, dtype), panels, eta, dtype)
        expected = steps(dense, *state, omega, inner, 24)
        got = steps(kernel, *state, omega, inner, 24)
        tol = 1e-11 if dtype == jnp.float64 else 2e-4
        for g, e in zip(got, expected, strict=True):
            assert g.shape == e.shape and g.dtype == e.dtype == dtype
            np.testing.assert_allclose(np.asarray(g), np.asarray(e), rtol=tol, atol=tol)


def test_halpern_steps_columns_are_independent():
    """A column's result does not depend on the batch around it or on where it sits (the
    kernel groups columns by width): batched solves equal single ones bit for bit."""
    with jax.enable_x64(True):
        A, panels, scalars = _halpern_problem(37, seed=5, shared=False)
        op = native.NativeOperator.from_scipy(A, jnp.float64)
        steps = jax.jit(native.halpern_steps, static_argnames="steps")
        whole = steps(op, **panels, **scalars, steps=9)
        for b in (0, 17, 36):
            one = steps(
                op,
                **{k: v[:, b] if v.shape[1] > 1 else v[:, 0] for k, v in panels.items()},
                **{k: v[b] for k, v in scalars.items()},
                steps=9,
            )
            for got, want in zip(one, whole, strict=True):
                np.testing.assert_array_equal(np.asarray(got), np.asarray(want)[:, b])


@pytest.mark.parametrize("batch", [None, 1, 9])
def test_halpern_steps_scratch_holds_what_the_kernel_uses(batch):
    """The kernel's scratch output is x_bar alone for a batch, ``(n, B)``, and the two
    sparse products of one LP, ``(n + m, 1)``: nothing allocated that it never touches."""
    A, panels, scalars = _halpern_problem(batch or 1, seed=3, shared=True)
    if batch is None:
        panels = {k: v[:, 0] for k, v in panels.items()}
        scalars = {k: v[0] for k, v in scalars.items()}
    op = native.NativeOperator.from_scipy(A, jnp.float32)
    args = {k: jnp.asarray(v, jnp.float32) for k, v in {**panels, **scalars}.items()}
    jaxpr = jax.make_jaxpr(lambda a: native.halpern_steps(op, **a, steps=2))(args)
    (call,) = [e for e in jaxpr.eqns if e.primitive.name == "ffi_call"]
    shapes = [v.aval.shape for v in call.outvars]
    assert shapes[2] == ((53, batch) if batch and batch > 1 else (53 + 37, 1))
    x, y = jax.jit(native.halpern_steps, static_argnames="steps")(op, **args, steps=2)
    assert np.isfinite(np.asarray(x)).all() and np.isfinite(np.asarray(y)).all()


def test_halpern_steps_keep_a_nan():
    """A NaN iterate stays NaN through the bounds' clip (the solver's NUMERICAL_ERROR
    depends on it), in every column group the kernel uses."""
    with jax.enable_x64(True):
        A, panels, scalars = _halpern_problem(13, seed=2, shared=False)
        panels["var_lower"] = np.full_like(panels["var_lower"], -1.0)
        panels["var_upper"] = np.full_like(panels["var_upper"], 1.0)
        panels["row_lower"] = np.full_like(panels["row_lower"], -1.0)
        panels["row_upper"] = np.full_like(panels["row_upper"], 1.0)
        panels["x"][3, 0] = panels["x"][3, 12] = np.nan  # a wide group and the last column
        op = native.NativeOperator.from_scipy(A, jnp.float64)
        x, y = native.halpern_steps(op, **panels, **scalars, steps=3)
        assert np.isnan(np.asarray(x)[:, [0, 12]]).any(axis=0).all()
        assert np.isnan(np.asarray(y)[:, [0, 12]]).any(axis=0).all()
        assert np.isfinite(np.asarray(x)[:, 1:12]).all()


def test_halpern_steps_and_solves_ignore_the_padding():
    """The Halpern kernel reads A and A^T only within their row ranges (NaN in the padding
    changes nothing), and solve_lp compiles once for two LPs whose nonzeros differ a
    little (the arrays' padded lengths are equal)."""
    with jax.enable_x64(True):
        A, panels, scalars = _halpern_problem(5, seed=4, shared=False)
        A = A.tolil()
        A[A.nonzero()[0][0], A.nonzero()[1][0]] = 0.0  # one fewer: a padded length
        A = sp.csr_array(A)
        A.eliminate_zeros()
        op = native.NativeOperator.from_scipy(A, jnp.float64)
        clean = native.halpern_steps(op, **panels, **scalars, steps=3)
        nnz = A.nnz
        assert op.forward.data.shape[0] > nnz and op.backward.data.shape[0] > nnz

        def poisoned(matrix):
            return dataclasses.replace(matrix, data=matrix.data.at[nnz:].set(jnp.nan))

        dirty_op = native.NativeOperator(poisoned(op.forward), poisoned(op.backward))
        dirty = native.halpern_steps(dirty_op, **panels, **scalars, steps=3)
        for got, want in zip(dirty, clean, strict=True):
            np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
        # two LPs a few nonzeros apart: one compiled solve
        from jaxopt_suite.lp import pdlp

        lp = instances.transportation(4, 5, seed=0)
        A = lp.A.tolil()
        A[0, 0] = 0.0
        fewer = LP(lp.c, A, lp.row_lower, lp.row_upper, lp.var_lower, lp.var_upper)
        assert fewer.A.nnz == lp.A.nnz - 1
        options = LPOptions(matrix="native")
        solve_lp(lp, options)
        size = pdlp._solve_jit._cache_size()
        assert solve_lp(fewer, options).status in (Status.OPTIMAL, Status.PRIMAL_INFEASIBLE)
        assert pdlp._solve_jit._cache_size() == size


def test_halpern_steps_name_a_bad_operand():
    A, panels, scalars = _halpern_problem(4, seed=1, shared=True)
    op = native.NativeOperator.from_scipy(A, jnp.float32)
    args = {k: jnp.asarray(v, jnp.float32) for k, v in {**panels, **scalars}.items()}
    with pytest.raises(ValueError, match=r"y_anchor must be float32 of shape \(37, 4\)"):
        native.halpern_steps(op, **{**args, "y_anchor": args["y_anchor"][:, :3]}, steps=2)
    with pytest.raises(
        ValueError, match=r"row_upper must be float32 of shape \(37, 4\) or \(37, 1\)"
    ):
        native.halpern_steps(op, **{**args, "row_upper": args["row_upper"][:30]}, steps=2)
    with pytest.raises(ValueError, match="c must be float32"):
        native.halpern_steps(op, **{**args, "c": args["c"].astype(jnp.int32)}, steps=2)
    with pytest.raises(ValueError, match=r"A is not \(37, 53\)"):
        native.halpern_steps(op.T, **args, steps=2)
    with pytest.raises(ValueError, match="steps must be"):
        native.halpern_steps(op, **args, steps=-1)


def test_an_lp_without_rows_goes_through_the_kernel():
    """Bounds only (m = 0): the kernel's dual panel is empty, alone and in a batch."""
    with jax.enable_x64(True):
        c = np.array([1.0, -2.0, 0.5, -1.0])
        lp = LP(c, sp.csr_array((0, 4)), np.zeros(0), np.zeros(0), -np.ones(4), 2 * np.ones(4))
        expected = float(np.sum(np.where(c > 0, -c, 2 * c)))  # each variable at its best bound
        options = LPOptions(tolerance=1e-8, matrix="native")
        one = solve_lp(lp, options)
        assert one.status.name == "OPTIMAL", one.message
        assert abs(one.objective - expected) <= 1e-6
        lower, upper = np.tile(lp.var_lower, (3, 1)), np.tile(lp.var_upper, (3, 1))
        upper[1] = 1.0
        batch = solve_lp_batch(lp, lower, upper, options=options)
        assert np.all(batch.status == Status.OPTIMAL), batch.messages()
        tighter = float(np.sum(np.where(c > 0, -c, c)))  # instance 1: upper bounds at 1
        np.testing.assert_allclose(batch.objective, [expected, tighter, expected], atol=1e-6)
