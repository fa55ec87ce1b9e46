"""Forward differences that reuse a known loss value (optax's ``value`` extra arg)."""

import chex
import jax
import jax.numpy as jnp
import pytest

from jaxopt_suite.zeroth_order import (
    gaussian_smoothing_estimate,
    scale_by_gaussian_smoothing,
    scale_by_spsa,
    scale_by_szo,
    spsa_estimate,
    szo_estimate,
)
from tests.zeroth_order.conftest import quadratic


def _szo(value_fn, params, key, **kwargs):
    return szo_estimate(value_fn, params, key, activations={"x": None}, **kwargs)


ESTIMATES = [spsa_estimate, gaussian_smoothing_estimate, _szo]


@pytest.mark.parametrize("estimate", ESTIMATES)
def test_given_value_saves_one_evaluation_and_changes_nothing_else(estimate, key):
    value_fn, _ = quadratic()
    params = {"x": jnp.linspace(-1.0, 2.0, 8)}
    kwargs = dict(num_directions=3, antithetic=False, sigma=0.1)
    run = jax.jit(lambda k, v: estimate(value_fn, params, k, value=v, **kwargs))
    own = estimate(value_fn, params, key, **kwargs)
    given = run(key, value_fn(params))
    assert own.num_evals == 4
    assert given.num_evals == 3
    # Same responses up to float32 rounding of f (|f| ~ 10) divided by sigma: ~1e-5.
    chex.assert_trees_all_close(given.grad, own.grad, rtol=1e-4, atol=1e-4)
    # The value is really used as the base point: a wrong one moves the estimate.
    wrong = run(key, value_fn(params) + 1.0)
    assert not jnp.allclose(wrong.grad["x"], own.grad["x"])


def test_szo_forward_matches_central_on_a_linear_loss(linear_regression, key):
    # A loss linear in both leaves: central and forward differences are then both exact.
    _, params, activations, inputs = linear_regression
    direction = jax.random.normal(jax.random.key(7), (inputs.shape[0], 3))

    def value_fn(p):
        return jnp.mean(jnp.sum((inputs @ p["w"] + p["b"][None, :]) * direction, axis=-1))

    kwargs = dict(activations=activations, kappa=4, num_directions=5, sigma=1e-2)
    central = szo_estimate(value_fn, params, key, **kwargs)
    forward = szo_estimate(
        value_fn, params, key, antithetic=False, value=value_fn(params), **kwargs
    )
    assert central.num_evals == 10 and forward.num_evals == 5
    chex.assert_trees_all_close(forward.grad, central.grad, rtol=2e-3, atol=2e-5)


@pytest.mark.parametrize("factory", [scale_by_spsa, scale_by_gaussian_smoothing, scale_by_szo])
def test_transforms_take_value_as_extra_arg(factory, key):
    value_fn, _ = quadratic()
    params = {"x": jnp.linspace(-1.0, 2.0, 8)}
    forward = factory(key, num_directions=2, antithetic=False)
    central = factory(key, num_directions=2)

    @jax.jit
    def step(state_f, state_c):
        value = value_fn(params)
        _, state_f = forward.update(params, state_f, params, value_fn=value_fn, value=value)
        # Central differences ignore ``value`` (an optax chain may pass it to everyone).
        _, state_c = central.update(params, state_c, params, value_fn=value_fn, value=value)
        return state_f, state_c

    state_f, state_c = step(forward.init(params), central.init(params))
    assert int(state_f.num_evals) == 2
    assert int(state_c.num_evals) == 4


@pytest.mark.parametrize("estimate", ESTIMATES)
def test_value_must_be_a_scalar(estimate, key):
    value_fn, _ = quadratic()
    params = {"x": jnp.ones(8)}
    with pytest.raises(ValueError, match="value must be the scalar floating loss"):
        estimate(value_fn, params, key, antithetic=False, value=jnp.ones(2))
    with pytest.raises(ValueError, match="value must be the scalar floating loss"):
        estimate(value_fn, params, key, antithetic=False, value=jnp.asarray(1))
