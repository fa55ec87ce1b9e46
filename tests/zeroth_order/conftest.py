"""Small problems shared by the zeroth-order tests."""

import jax
import jax.numpy as jnp
import pytest


def quadratic(dim: int = 8):
    """f(x) = 0.5 x^T diag(a) x - b^T x on a {"x": (dim,)} pytree, with its gradient."""
    curvature = jnp.linspace(0.5, 2.0, dim)
    shift = jnp.linspace(-1.0, 1.0, dim)

    def value_fn(params):
        x = params["x"]
        return 0.5 * jnp.sum(curvature * x**2) - shift @ x

    def grad_fn(params):
        return {"x": curvature * params["x"] - shift}

    return value_fn, grad_fn


@pytest.fixture
def linear_regression():
    """0.5/N ||A W + b - T||^2 with activations A (N, n): the gradient of W lies in span(A)."""
    keys = jax.random.split(jax.random.key(42), 4)
    inputs = jax.random.normal(keys[0], (24, 10)) * jnp.linspace(2.0, 0.2, 10)[None, :]
    targets = jax.random.normal(keys[1], (24, 3))
    params = {
        "w": 0.1 * jax.random.normal(keys[2], (10, 3)),
        "b": 0.1 * jax.random.normal(keys[3], (3,)),
    }

    def value_fn(p):
        residual = inputs @ p["w"] + p["b"][None, :] - targets
        return 0.5 * jnp.mean(jnp.sum(residual**2, axis=-1))

    activations = {"w": inputs, "b": None}
    return value_fn, params, activations, inputs
