"""Policy and critic networks (flax) and the diagonal-Gaussian policy's distribution.

The defaults follow the ASCPO and CPO reference code (``notes/rl.md`` section 1): MLPs of
64 x 2 tanh units, a state-independent log standard deviation initialised at -0.5, and a
cost critic with a softplus output (the remaining max-cost rise is never negative).
"""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp


class GaussianPolicy(nn.Module):
    """``obs -> (mean, log_std)`` of a diagonal Gaussian over actions."""

    action_size: int
    hidden: Sequence[int] = (64, 64)
    init_log_std: float = -0.5

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        h = obs
        for width in self.hidden:
            h = jnp.tanh(nn.Dense(width)(h))
        # a small last layer: the first actions are near zero whatever the observation
        mean = nn.Dense(self.action_size, kernel_init=nn.initializers.variance_scaling(
            0.01, "fan_in", "truncated_normal"))(h)  # fmt: skip
        log_std = self.param(
            "log_std", nn.initializers.constant(self.init_log_std), (self.action_size,)
        )
        return mean, jnp.broadcast_to(log_std, mean.shape)


class ValueNetwork(nn.Module):
    """``obs -> V(obs)``; ``nonnegative`` puts a softplus on the output."""

    hidden: Sequence[int] = (64, 64)
    nonnegative: bool = False

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        h = obs
        for width in self.hidden:
            h = jnp.tanh(nn.Dense(width)(h))
        value = nn.Dense(1)(h)[..., 0]
        return jax.nn.softplus(value) if self.nonnegative else value


def gaussian_log_prob(mean: jax.Array, log_std: jax.Array, action: jax.Array) -> jax.Array:
    """``log N(action; mean, exp(log_std)^2)`` summed over the action axis."""
    z = (action - mean) * jnp.exp(-log_std)
    return jnp.sum(-0.5 * z * z - log_std - 0.5 * jnp.log(2.0 * jnp.pi), axis=-1)


def gaussian_kl(
    mean_p: jax.Array, log_std_p: jax.Array, mean_q: jax.Array, log_std_q: jax.Array
) -> jax.Array:
    """``KL(p || q)`` of diagonal Gaussians, summed over the action axis."""
    var_p, var_q = jnp.exp(2.0 * log_std_p), jnp.exp(2.0 * log_std_q)
    return jnp.sum(
        log_std_q - log_std_p + (var_p + (mean_p - mean_q) ** 2) / (2.0 * var_q) - 0.5, axis=-1
    )


def gaussian_entropy(log_std: jax.Array) -> jax.Array:
    return jnp.sum(log_std + 0.5 * (1.0 + jnp.log(2.0 * jnp.pi)), axis=-1)
