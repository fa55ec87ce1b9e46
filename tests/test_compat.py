"""The jax in use computes the reduce-then-broadcast pattern of batched estimates correctly."""

import jax
import jax.numpy as jnp
import numpy as np

import jaxopt_suite  # noqa: F401  (installs the jaxlib guard before any computation)


def test_reduce_then_broadcast_is_compiled_correctly():
    # jaxlib 0.10.2 returns wrong rows past ~32k elements here (jax-ml/jax#39103).
    weights = jnp.linspace(0.5, 1.5, 6)
    directions = jax.random.normal(jax.random.key(0), (20_000, 6))
    fused = jax.jit(lambda u: jnp.sum(weights[None, :] * u**2, axis=1, keepdims=True) * u)(
        directions
    )
    u = np.asarray(directions, np.float64)
    reference = (np.asarray(weights, np.float64) * u**2).sum(1, keepdims=True) * u
    np.testing.assert_allclose(np.asarray(fused), reference, rtol=1e-4, atol=1e-4)
