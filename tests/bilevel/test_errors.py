"""Bad input gets a clear error naming the argument."""

import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxopt_suite import bilevel
from tests.bilevel.conftest import Quadratic


def _named_problem():
    """Losses that index x["scale"] and y["w"]: structure mismatches must be caught."""

    def inner(x, y, batch):
        return 0.5 * jnp.sum((y["w"] - x["scale"] * batch) ** 2)

    def outer(x, y, batch):
        return jnp.sum(y["w"] * batch)

    sample = lambda k: jax.random.normal(k, (4,))  # noqa: E731
    return bilevel.BilevelProblem(outer, inner, sample, sample)


def test_inner_loss_must_be_scalar():
    q = Quadratic()
    problem = bilevel.BilevelProblem(
        q.problem.outer_loss,
        lambda x, y, b: y["b"] * 2.0,
        q.problem.sample_inner,
        q.problem.sample_outer,
    )
    with pytest.raises(ValueError, match=r"inner_loss\(x, y, batch\) must return a scalar"):
        bilevel.soba(inner_lr=0.1, outer=0.1).init(problem, q.x0, q.y0, jax.random.key(0))


def test_mismatched_pytrees_name_the_loss():
    problem = _named_problem()
    solver = bilevel.ma_soba(inner_lr=0.1, outer=0.1)
    y0 = {"w": jnp.zeros(4)}
    with pytest.raises(ValueError, match=r"inner_loss\(x0, y0, batch\) failed on the given x0"):
        solver.init(problem, (jnp.ones(()),), y0, jax.random.key(0))
    with pytest.raises(ValueError, match="failed on the given x0"):
        solver.init(problem, {"scale": jnp.ones(())}, {"v": jnp.zeros(4)}, jax.random.key(0))
    # The right structures pass.
    solver.init(problem, {"scale": jnp.ones(())}, y0, jax.random.key(0))


def test_integer_leaves_are_rejected():
    problem = _named_problem()
    with pytest.raises(TypeError, match=r"y0\['w'\] must be floating point"):
        bilevel.soba(inner_lr=0.1, outer=0.1).init(
            problem, {"scale": jnp.ones(())}, {"w": jnp.zeros(4, jnp.int32)}, jax.random.key(0)
        )


def test_rank_larger_than_a_leaf():
    q = Quadratic()  # y = {"w": (3, 2), "b": (2,)}
    solver = bilevel.bros(rank=3, inner_lr=0.1, outer=0.1)
    with pytest.raises(ValueError, match=r"rank=3 exceeds the first dimension 2 of y0\['b'\]"):
        solver.init(q.problem, q.x0, q.y0, jax.random.key(0))
    ok = bilevel.bros(rank=3, inner_lr=0.1, outer=0.1, exact_small_leaves=True)
    ok.init(q.problem, q.x0, q.y0, jax.random.key(0))
    with pytest.raises(ValueError, match="rank must be a Python int >= 1"):
        bilevel.bros(rank=0, inner_lr=0.1, outer=0.1)


@pytest.mark.parametrize(
    "make",
    [
        lambda: bilevel.soba(inner_lr=0.0, outer=0.1),
        lambda: bilevel.soba(inner_lr=0.1, aux_lr=-1.0, outer=0.1),
        lambda: bilevel.ma_soba(inner_lr=0.1, outer=-0.5),
        lambda: bilevel.bros(rank=1, inner_lr=-0.1, outer=0.1),
        lambda: bilevel.implicit_reference(inner_lr=0.0, outer=0.1),
    ],
)
def test_step_sizes_must_be_positive(make):
    with pytest.raises(ValueError, match=r"(inner_lr|aux_lr|outer) must be (finite and )?> 0"):
        make()


def test_step_sizes_nan_arrays_and_traced():
    with pytest.raises(ValueError, match="inner_lr must be > 0, got nan"):
        bilevel.soba(inner_lr=float("nan"), outer=0.1)
    with pytest.raises(ValueError, match=r"inner_lr must be a scalar, got shape \(2,\)"):
        bilevel.soba(inner_lr=np.array([0.1, 0.2]), outer=0.1)
    # a step size traced under vmap passes (its value is checked where it is concrete)
    q = Quadratic()

    def final_y(inner_lr):
        solver = bilevel.soba(inner_lr=inner_lr, outer=0.1)
        state = solver.init(q.problem, q.x0, q.y0, jax.random.key(0))
        return solver.step(state, q.problem.sample(jax.random.key(1))).y["b"]

    both = jax.vmap(final_y)(jnp.array([0.1, 0.2]))
    np.testing.assert_allclose(both[1], final_y(0.2), rtol=1e-6)


def test_implicit_settings_are_checked_where_they_are_used():
    q = Quadratic()
    batches = q.problem.sample(jax.random.key(0))
    for settings, message in (
        (dict(inner_lr=-0.1, inner_steps=5), "inner_lr must be finite and > 0"),
        (dict(inner_lr=float("nan"), inner_steps=5), "inner_lr must be finite and > 0"),
        (dict(inner_lr=0.1, inner_steps=0), "inner_steps must be a Python int >= 1"),
        (dict(inner_lr=0.1, inner_steps=5, cg_steps=-3), "cg_steps must be a Python int >= 1"),
    ):
        with pytest.raises(ValueError, match=message):
            bilevel.implicit_hypergradient(q.problem, q.x0, q.y0, *batches, **settings)


def test_other_bad_configs():
    with pytest.raises(ValueError, match=r"average must be in \(0, 1\]"):
        bilevel.ma_soba(inner_lr=0.1, outer=0.1, average=0.0)
    with pytest.raises(ValueError, match="aux_radius must be finite and > 0"):
        bilevel.ma_soba(inner_lr=0.1, outer=0.1, aux_radius=0.0)
    with pytest.raises(ValueError, match="hvp_mode must be"):
        bilevel.soba(inner_lr=0.1, outer=0.1, hvp_mode="reverse")
    with pytest.raises(ValueError, match="hessian_probe must be 'bi' or 'one_sided'"):
        bilevel.bros(rank=1, inner_lr=0.1, outer=0.1, hessian_probe="two")
    with pytest.raises(ValueError, match="inner_steps must be a Python int >= 1"):
        bilevel.implicit_reference(inner_lr=0.1, inner_steps=0, outer=0.1)


def test_run_checks_its_arguments():
    q = Quadratic()
    solver = bilevel.soba(inner_lr=0.1, outer=0.1)
    with pytest.raises(ValueError, match="num_steps must be >= 1"):
        bilevel.run(q.problem, solver, q.x0, q.y0, jax.random.key(0), 0)
    with pytest.raises(ValueError, match="eval_every must be >= 1"):
        bilevel.run(q.problem, solver, q.x0, q.y0, jax.random.key(0), 10, eval_every=0)
    with pytest.raises(TypeError, match="key must be a jax PRNG key"):
        bilevel.run(q.problem, solver, q.x0, q.y0, 0, 10)
    with pytest.raises(TypeError, match="solver must be a Solver"):
        bilevel.run(q.problem, "soba", q.x0, q.y0, jax.random.key(0), 10)
    with pytest.raises(TypeError, match="problem must be a BilevelProblem"):
        solver.init(object(), q.x0, q.y0, jax.random.key(0))


def test_run_takes_raw_keys_as_typed_ones():
    q = Quadratic(noise=0.01)
    solver = bilevel.soba(inner_lr=0.1, outer=0.05)
    raw = bilevel.run(q.problem, solver, q.x0, q.y0, jax.random.PRNGKey(3), 12, eval_every=5)
    typed = bilevel.run(
        q.problem, solver, q.x0, q.y0, jax.random.wrap_key_data(jax.random.PRNGKey(3)), 12,
        eval_every=5,
    )  # fmt: skip
    jax.tree.map(np.testing.assert_array_equal, raw.state.y, typed.state.y)


def test_finite_check_of_float16_iterates_sums_in_float32():
    from jaxopt_suite.bilevel.problem import finite_sum

    big = jnp.full((2000,), 100.0, jnp.float16)  # finite, but sums past float16's 65504
    assert bool(finite_sum(big))
    assert not bool(finite_sum(big.at[3].set(jnp.inf)))
    assert not bool(finite_sum(jnp.array([1.0, jnp.nan], jnp.float32)))


def test_eval_fn_cannot_replace_the_runs_records():
    q = Quadratic()
    solver = bilevel.soba(inner_lr=0.1, outer=0.1)
    with pytest.raises(ValueError, match=r"eval_fn's keys \['status', 'step'\]"):
        bilevel.run(
            q.problem, solver, q.x0, q.y0, jax.random.key(0), 4, eval_every=2,
            eval_fn=lambda x, y: {"step": jnp.zeros(()), "status": jnp.zeros(()), "a": 1.0},
        )  # fmt: skip


def test_run_records_a_remainder_segment():
    q = Quadratic(noise=0.01)
    solver = bilevel.soba(inner_lr=0.1, outer=0.05)

    def eval_fn(x, y):
        return {"y_norm": jnp.linalg.norm(y["w"])}

    result = bilevel.run(
        q.problem, solver, q.x0, q.y0, jax.random.key(0), 25, eval_every=10, eval_fn=eval_fn
    )
    assert [int(s) for s in result.history["step"]] == [10, 20, 25]
    assert result.history["y_norm"].shape == (3,)
    # Wall time per record: measured on the host after each segment, so it increases.
    seconds = np.asarray(result.history["seconds"])
    assert seconds.shape == (3,) and seconds[0] >= 0.0
    assert np.all(np.diff(seconds) > 0.0)


def test_record_times_follow_the_work_done():
    # Records after 2000 cheap steps vs after 10: the clock must see the segments' work,
    # not fire when the compiled program starts (a callback without a data dependence).
    q = Quadratic(noise=0.01)
    solver = bilevel.soba(inner_lr=0.1, outer=0.05)
    result = bilevel.run(q.problem, solver, q.x0, q.y0, jax.random.key(0), 4010, eval_every=2000)
    seconds = np.asarray(result.history["seconds"])
    long_segment, short_segment = seconds[1] - seconds[0], seconds[2] - seconds[1]
    assert long_segment > 5 * short_segment


def test_non_finite_starts_and_task_settings_are_named():
    from jaxopt_suite.bilevel import tasks
    from jaxopt_suite.bilevel.online import quadratic_stream

    q = Quadratic()
    solver = bilevel.soba(inner_lr=0.1, outer=0.1)
    y0 = {"w": q.y0["w"].at[0, 0].set(jnp.nan), "b": q.y0["b"]}
    with pytest.raises(ValueError, match=r"y0\['w'\] must be finite"):
        solver.init(q.problem, q.x0, y0, jax.random.key(0))
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(3, 2)).astype(np.float32), np.array([0, 1, 0], np.int32)
    split = tasks.Split(x, y, x, y, x, y, num_classes=2, name="tiny")
    with pytest.raises(ValueError, match="reg must be finite and >= 0, got nan"):
        tasks.hyper_cleaning(split, reg=float("nan"))
    # three rows over six groups: a group without examples failed later inside a gather
    with pytest.raises(ValueError, match=r"group \d has no training examples"):
        tasks.data_mixture(split, label_noise=(0.0,) * 6, input_noise=(0.0,) * 6)
    with pytest.raises(ValueError, match="input_noise must be finite and >= 0"):
        tasks.data_mixture(split, label_noise=(0.0, 0.1), input_noise=(0.0, float("nan")))
    with pytest.raises(ValueError, match=r"backbone must list at least one hidden width"):
        tasks.hyper_representation(split, backbone=())
    with pytest.raises(ValueError, match="scale must be finite and >= 0, got nan"):
        quadratic_stream(drift="sqrt", scale=float("nan"))


def test_repeated_runs_compile_once():
    # each call built and jitted a fresh loop: a sweep over seeds compiled at every seed
    from jaxopt_suite.bilevel import solvers

    q = Quadratic(noise=0.01)
    solver = bilevel.soba(inner_lr=0.1, outer=0.05)
    results, seconds = [], []
    for seed in range(3):
        start = time.perf_counter()
        key = jax.random.key(seed)
        results.append(bilevel.run(q.problem, solver, q.x0, q.y0, key, 12, eval_every=5))
        seconds.append(time.perf_counter() - start)
    go = solvers._compiled_run(q.problem, solver, None, 12, 5)
    assert go._cache_size() == 1
    # the seeds still give their own runs, and the clock restarts with each (its records
    # fall within the call's own time, not the time since the first run started)
    assert not np.array_equal(results[0].state.y["b"], results[1].state.y["b"])
    assert 0.0 <= float(results[2].history["seconds"][-1]) <= seconds[2]


def test_an_unhashable_eval_fn_still_runs():
    # the compiled loops are cached by their static parts; an eval_fn that cannot be hashed
    # (a bound method of an eq=True dataclass) is compiled for its call instead of refused
    import dataclasses

    @dataclasses.dataclass
    class Evaluator:
        scale: float = 2.0

        def __call__(self, x, y):
            return {"b_norm": self.scale * jnp.linalg.norm(y["b"])}

    q = Quadratic()
    solver = bilevel.soba(inner_lr=0.1, outer=0.1)
    result = bilevel.run(
        q.problem, solver, q.x0, q.y0, jax.random.key(0), 6, eval_every=3, eval_fn=Evaluator()
    )
    assert result.history["b_norm"].shape == (2,)


def test_traced_outer_average_and_radius_pass_and_bad_ones_are_named():
    # outer, average, aux_radius and the reference's inner_lr went through float(): traced
    # under vmap they raised ConcretizationTypeError, a string reached the step
    q = Quadratic()
    batches = q.problem.sample(jax.random.key(1))

    def final_x(value):
        solver = bilevel.ma_soba(inner_lr=0.1, outer=value, average=value, aux_radius=10 * value)
        state = solver.init(q.problem, q.x0, q.y0, jax.random.key(0))
        return solver.step(state, batches).x[0]

    both = jax.vmap(final_x)(jnp.array([0.1, 0.2]))
    np.testing.assert_allclose(both[1], final_x(0.2), rtol=1e-6)

    def reference_x(inner_lr):
        solver = bilevel.implicit_reference(inner_lr=inner_lr, inner_steps=5, outer=0.1)
        state = solver.init(q.problem, q.x0, q.y0, jax.random.key(0))
        return solver.step(state, batches).x[0]

    np.testing.assert_allclose(
        jax.vmap(reference_x)(jnp.array([0.2]))[0], reference_x(0.2), rtol=1e-6
    )
    for kwargs, error, message in (
        ({"average": "0.5"}, TypeError, "average must be a number, got '0.5'"),
        ({"average": np.array([0.1, 0.2])}, ValueError, r"average must be a scalar"),
        ({"average": 1.5}, ValueError, r"average must be in \(0, 1\], got 1.5"),
        ({"aux_radius": "1.0"}, TypeError, "aux_radius must be a number"),
        ({"aux_radius": float("inf")}, ValueError, "aux_radius must be finite and > 0"),
    ):
        with pytest.raises(error, match=message):
            bilevel.ma_soba(inner_lr=0.1, outer=0.1, **kwargs)


def test_float16_iterates_keep_their_dtype_and_their_norm():
    from jaxopt_suite.bilevel import subspace
    from jaxopt_suite.bilevel.solvers import _project_ball

    # ||v||^2 = 1e5 overflowed float16 to inf, and the projection set v to 0
    v = {"w": jnp.full((1000,), 10.0, jnp.float16)}
    assert float(subspace.sq_norm(v)) == pytest.approx(1e5, rel=1e-3)
    np.testing.assert_array_equal(_project_ball(v, 1e6)["w"], v["w"])
    # BROS's exact (small) leaves took a float32 step and the scan's carry changed dtype
    q = Quadratic()
    y0 = jax.tree.map(lambda leaf: leaf.astype(jnp.float16), q.y0)
    solver = bilevel.bros(rank=2, inner_lr=0.1, outer=0.1, exact_small_leaves=True)
    result = bilevel.run(q.problem, solver, q.x0, y0, jax.random.key(0), 4)
    assert all(leaf.dtype == jnp.float16 for leaf in jax.tree.leaves(result.state.y))


def test_data_mixture_reads_the_cleanest_group_and_names_label_noise():
    from jaxopt_suite.bilevel import tasks

    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 3)).astype(np.float32)
    y = rng.integers(0, 2, 40).astype(np.int32)
    split = tasks.Split(x, y, x, y, x, y, num_classes=2, name="tiny")
    with pytest.raises(ValueError, match=r"label_noise must lie in \[0, 1\], got \(0.0, 1.5\)"):
        tasks.data_mixture(split, label_noise=(0.0, 1.5), input_noise=(0.0, 0.0), batch_size=4)
    task = tasks.data_mixture(split, label_noise=(0.9, 0.0), input_noise=(0.0, 0.0), batch_size=4)
    metrics = task.evaluate(jnp.array([-5.0, 5.0]), task.y0)
    assert float(metrics["weight_clean_group"]) > 0.99  # group 1 is the clean one


def _bf16(tree):
    return jax.tree.map(lambda leaf: leaf.astype(jnp.bfloat16), tree)


@pytest.mark.parametrize(
    "make",
    [
        lambda: bilevel.soba(inner_lr=optax.exponential_decay(0.1, 10, 0.9), outer=0.1),
        lambda: bilevel.soba(inner_lr=np.float32(0.1), outer=0.1),
        lambda: bilevel.ma_soba(inner_lr=0.1, aux_lr=np.float32(0.1), outer=0.1),
        lambda: bilevel.ma_soba(inner_lr=0.1, outer=0.1, average=np.float32(0.2)),
    ],
    ids=["schedule", "numpy_inner_lr", "numpy_aux_lr", "numpy_average"],
)
def test_steps_that_are_not_weakly_typed_keep_the_iterates_dtype(make):
    # a float32 step promoted bfloat16 y, v or h to float32, and run's scan refused the carry
    q = Quadratic(noise=0.1)
    x0, y0 = _bf16(q.x0), _bf16(q.y0)
    result = bilevel.run(q.problem, make(), x0, y0, jax.random.key(0), 4, eval_every=2)
    for leaf in jax.tree.leaves((result.state.x, result.state.y, result.state.v, result.state.h)):
        assert leaf.dtype == jnp.bfloat16


def test_traced_and_float64_steps_keep_the_iterates_dtype():
    # traced (vmapped) settings: solver.step silently returned float32 y / h from bfloat16,
    # and the reference's inner loop refused its carry
    q = Quadratic()
    x0, y0 = _bf16(q.x0), _bf16(q.y0)
    batches = q.problem.sample(jax.random.key(1))
    for make in (
        lambda value: bilevel.soba(inner_lr=value, outer=0.1),
        lambda value: bilevel.ma_soba(inner_lr=0.1, outer=0.1, average=value),
        lambda value: bilevel.implicit_reference(inner_lr=value, inner_steps=3, outer=0.1),
    ):

        def final(value, make=make):
            solver = make(value)
            state = solver.init(q.problem, x0, y0, jax.random.key(0))
            state = solver.step(state, batches)
            return state.x, state.y, state.v, state.h

        out = jax.eval_shape(jax.vmap(final), jnp.array([0.1, 0.2]))
        assert {leaf.dtype for leaf in jax.tree.leaves(out)} == {jnp.dtype(jnp.bfloat16)}
    # float64 settings under x64 with float32 iterates
    with jax.enable_x64(True):
        for solver in (
            bilevel.soba(inner_lr=np.float64(0.1), outer=0.1),
            bilevel.ma_soba(inner_lr=0.1, outer=0.1, average=np.float64(0.2)),
        ):
            result = bilevel.run(q.problem, solver, q.x0, q.y0, jax.random.key(0), 4)
            leaves = jax.tree.leaves((result.state.x, result.state.y, result.state.v))
            assert all(leaf.dtype == jnp.float32 for leaf in leaves)


def test_bros_float16_iterates_stay_finite_and_a_real_nan_is_still_caught():
    # the zero-weighted ordering sum overflowed float16 (65504) and 0 * inf put NaN into y
    def inner(x, y, batch):  # strongly convex, minimiser y = 3 + x + batch
        return 0.5 * jnp.sum((y.astype(jnp.float32) - 3.0 - x[0] - batch) ** 2)

    def outer(x, y, batch):
        return 0.5 * jnp.mean(y.astype(jnp.float32) ** 2) + 0.5 * jnp.sum(x**2)

    zero = lambda k: jnp.zeros(())  # noqa: E731
    problem = bilevel.BilevelProblem(outer, inner, zero, zero)
    x0, y0 = jnp.zeros(1), jnp.zeros((4, 20000), jnp.float16)
    solver = bilevel.bros(rank=1, inner_lr=0.1, outer=0.01)
    result = bilevel.run(problem, solver, x0, y0, jax.random.key(0), 3, on_failure="return")
    assert result.status == bilevel.OK, result.message
    assert result.state.y.dtype == jnp.float16 and bool(jnp.isfinite(result.state.y).all())
    # a NaN gradient of the inner loss still reaches y (through its own coordinates)
    nan = dataclasses.replace(problem, sample_inner=lambda k: jnp.full((), jnp.nan))
    with pytest.raises(FloatingPointError, match=r"bros\(r=1\): non-finite .*y.* after step 0"):
        bilevel.run(nan, solver, x0, y0, jax.random.key(0), 3)


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_diagnostics_are_kept_in_at_least_float32(dtype):
    # they were stored in x0's dtype: a loss of 123457.7 became 123392 (bf16) or inf (fp16)
    def inner(x, y, batch):
        return 0.5 * jnp.sum((y - x.astype(jnp.float32).sum()) ** 2)

    def outer(x, y, batch):
        return 1234.567 * jnp.sum(y**2) + 1.0 + 2e4 * jnp.sum(x.astype(jnp.float32))

    zero = lambda k: jnp.zeros(())  # noqa: E731
    problem = bilevel.BilevelProblem(outer, inner, zero, zero)
    y0 = jnp.ones(100)
    solver = bilevel.soba(inner_lr=0.01, outer=1e-9)
    result = bilevel.run(problem, solver, jnp.zeros(4, dtype), y0, jax.random.key(0), 1)
    loss = result.history["outer_loss"][0]
    assert loss.dtype == jnp.float32
    assert float(loss) == pytest.approx(float(outer(jnp.zeros(4), y0, 0.0)), rel=1e-6)
    assert result.history["hypergrad_norm"].dtype == jnp.float32
