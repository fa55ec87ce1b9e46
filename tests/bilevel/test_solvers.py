"""Every solver on a strongly convex quadratic bilevel problem with a known solution."""

import dataclasses

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.flatten_util import ravel_pytree

from jaxopt_suite import bilevel
from tests.bilevel.conftest import Quadratic


def decay(lr, scale=100.0, power=0.5):
    return lambda count: lr / (1.0 + count / scale) ** power


SOLVERS = {
    "soba": lambda outer: bilevel.soba(inner_lr=decay(0.3), outer=outer),
    "ma_soba": lambda outer: bilevel.ma_soba(inner_lr=decay(0.3), outer=outer),
    "bros": lambda outer: bilevel.bros(
        rank=1, inner_lr=decay(0.1), aux_lr=decay(0.03), outer=outer
    ),
    "implicit_reference": lambda outer: bilevel.implicit_reference(
        inner_lr=0.3, inner_steps=50, outer=outer
    ),
}


def _relative_error(x, x_star):
    return float(jnp.linalg.norm(ravel_pytree(x)[0] - x_star) / jnp.linalg.norm(x_star))


@pytest.mark.parametrize("name", list(SOLVERS))
def test_converges_to_the_bilevel_solution(name):
    q = Quadratic(noise=0.05)
    outer = decay(0.05 if name == "bros" else 0.1)
    result = bilevel.run(q.problem, SOLVERS[name](outer), q.x0, q.y0, jax.random.key(0), 4000)
    assert result.status == bilevel.OK and result.message == "OK"
    # From a relative error of 1 at x0 = 0; the noise (0.05) and, for BROS, the probe
    # variance leave a floor that the decaying steps shrink like 1 / sqrt(t).
    assert _relative_error(result.state.x, q.x_star()) < 0.1
    chex.assert_shape(result.history["step"], (50,))
    assert int(result.history["step"][-1]) == 4000


@pytest.mark.parametrize(
    "solver, steps, tol",
    [
        (bilevel.soba(inner_lr=0.3, outer=optax.set_to_zero()), 400, 1e-4),
        (bilevel.ma_soba(inner_lr=0.3, outer=optax.set_to_zero()), 400, 1e-4),
        (
            bilevel.ma_soba(
                inner_lr=0.3, outer=optax.set_to_zero(), hvp_mode="forward_over_reverse"
            ),
            400,
            1e-4,
        ),
        # The bi-probe's variance with 1/t steps: error ~ 1/sqrt(t) (0.02-0.03 at 4e4).
        (
            bilevel.bros(
                rank=2, inner_lr=0.1, aux_lr=decay(0.05, power=1.0), outer=optax.set_to_zero()
            ),
            40_000,
            0.06,
        ),
        (
            bilevel.bros(
                rank=2,
                inner_lr=0.1,
                aux_lr=decay(0.05, power=1.0),
                outer=optax.set_to_zero(),
                hessian_probe="one_sided",
            ),
            40_000,
            0.06,
        ),
    ],
    ids=["soba", "ma_soba", "ma_soba_fwd", "bros", "bros_one_sided"],
)
def test_hypergradient_converges_at_fixed_x(solver, steps, tol):
    q = Quadratic(noise=0.0)
    x = (jnp.ones(2), jnp.ones((2, 1)))
    result = bilevel.run(q.problem, solver, x, q.y0, jax.random.key(1), steps)
    state = result.state
    zero = jnp.zeros(8)
    f_x = jax.grad(q.problem.outer_loss)(x, state.y, zero)
    estimate = jax.tree.map(
        jnp.add, f_x, bilevel.cross_term(q.problem.inner_loss, x, state.y, state.v, zero)
    )
    true = q.hypergradient(x)
    error = jnp.linalg.norm(ravel_pytree(estimate)[0] - true) / jnp.linalg.norm(true)
    assert error < tol
    np.testing.assert_allclose(ravel_pytree(state.y)[0], q.y_star(x), atol=1e-4)


def test_implicit_hypergradient_is_exact():
    q = Quadratic(noise=0.0)
    x = (jnp.ones(2), -jnp.ones((2, 1)))
    grad, y_star, _ = jax.jit(
        lambda x_: bilevel.implicit_hypergradient(
            q.problem, x_, q.y0, jnp.zeros(8), jnp.zeros(8), inner_lr=0.3, inner_steps=200
        )
    )(x)
    np.testing.assert_allclose(ravel_pytree(grad)[0], q.hypergradient(x), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ravel_pytree(y_star)[0], q.y_star(x), atol=1e-5)


def test_any_optax_optimizer_drives_the_upper_level():
    q = Quadratic(noise=0.05)
    solver = bilevel.ma_soba(inner_lr=0.3, outer=optax.adam(decay(0.03)))
    result = bilevel.run(q.problem, solver, q.x0, q.y0, jax.random.key(2), 3000)
    assert _relative_error(result.state.x, q.x_star()) < 0.1
    assert isinstance(result.state.outer_state[0], optax.ScaleByAdamState)


@pytest.mark.parametrize("name", list(SOLVERS))
def test_the_outer_transformation_gets_the_outer_loss_as_value(name):
    # update(direction, state, x) passed no value=: reduce_on_plateau and any transform
    # reading it raised TypeError
    def record_value():
        def update(updates, state, params=None, *, value, **extra_args):
            del state, params, extra_args
            return jax.tree.map(lambda g: -0.1 * g, updates), jnp.asarray(value, jnp.float32)

        return optax.GradientTransformationExtraArgs(lambda params: jnp.zeros([]), update)

    q = Quadratic(noise=0.1)
    solver = SOLVERS[name](record_value())
    state = solver.init(q.problem, q.x0, q.y0, jax.random.key(0))
    state = jax.jit(solver.step)(state, q.problem.sample(jax.random.key(1)))
    assert float(state.outer_state) == float(state.diagnostics["outer_loss"]) != 0.0
    plateau = optax.chain(optax.sgd(0.1), optax.contrib.reduce_on_plateau())
    result = bilevel.run(q.problem, SOLVERS[name](plateau), q.x0, q.y0, jax.random.key(0), 4)
    assert result.status == bilevel.OK
    # a line search needs grad= and value_fn=, which a stochastic step does not have
    with pytest.raises(TypeError, match=r"outer: .*'grad' and 'value_fn'.* line searches"):
        bilevel.run(q.problem, SOLVERS[name](optax.lbfgs()), q.x0, q.y0, jax.random.key(0), 4)


@pytest.mark.parametrize("name", list(SOLVERS))
def test_step_compiles_once(name):
    q = Quadratic(noise=0.05)
    solver = SOLVERS[name](0.01)
    state = solver.init(q.problem, q.x0, q.y0, jax.random.key(3))
    step = jax.jit(solver.step)
    for k in jax.random.split(jax.random.key(4), 3):
        state = step(state, q.problem.sample(k))
    assert step._cache_size() == 1
    assert int(state.count) == 3
    chex.assert_trees_all_equal_structs(state.y, q.y0)
    chex.assert_trees_all_equal_shapes(state.x, q.x0)


def test_divergence_sets_a_status_and_stops_the_run():
    q = Quadratic(noise=0.0)
    solver = bilevel.soba(inner_lr=5.0, outer=0.1)  # unstable inner step: |1 - 5 * 3| > 1
    with pytest.raises(FloatingPointError, match=r"soba: non-finite .*y.* after step \d+"):
        bilevel.run(q.problem, solver, q.x0, q.y0, jax.random.key(5), 400, eval_every=10)
    result = bilevel.run(
        q.problem, solver, q.x0, q.y0, jax.random.key(5), 400, eval_every=10, on_failure="return"
    )
    assert result.status & 2  # y
    failed = int(result.state.failed_step)
    assert 0 <= failed < 400
    steps = np.asarray(result.history["step"])
    # Segments after the failure were skipped: the step counter stops advancing.
    assert steps[-1] == steps[-2] < 400
    assert steps[-1] == (failed // 10 + 1) * 10


def test_bros_factorized_checks_that_the_losses_take_factorized_leaves():
    # factorized=True hands the losses Factorized leaves: the quadratic's ravel_pytree saw
    # their factors as extra entries and failed deep in the first step, and a loss summing
    # over jax.tree.leaves computed another function without a word
    q = Quadratic(noise=0.1)
    key = jax.random.key(0)
    solver = bilevel.bros(rank=2, inner_lr=0.1, outer=0.1, factorized=True)
    with pytest.raises(TypeError, match="passes subspace.Factorized leaves to inner_loss"):
        solver.init(q.problem, q.x0, q.y0, key)

    def leafwise(x, y, batch):
        return sum(jnp.sum(leaf**2) for leaf in jax.tree.leaves(y)) + jnp.sum(batch**2)

    def merged(x, y, batch):
        return leafwise(x, bilevel.subspace.materialize(y), batch)

    bad = dataclasses.replace(q.problem, inner_loss=leafwise)
    with pytest.raises(ValueError, match="inner_loss gives .* merged"):
        solver.init(bad, q.x0, q.y0, key)
    good = dataclasses.replace(q.problem, inner_loss=merged, outer_loss=merged)
    state = solver.init(good, q.x0, q.y0, key)
    assert jnp.array_equal(jax.random.key_data(state.key), jax.random.key_data(key))
