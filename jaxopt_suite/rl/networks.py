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
    """``obs -> V(obs)``; ``nonnegative`` puts a softplus on the output. With ``outputs``
    set, the last axis holds that many values instead of one scalar."""

    hidden: Sequence[int] = (64, 64)
    nonnegative: bool = False
    outputs: int | None = None

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        h = obs
        for width in self.hidden:
            h = jnp.tanh(nn.Dense(width)(h))
        value = nn.Dense(1 if self.outputs is None else self.outputs)(h)
        if self.outputs is None:
            value = value[..., 0]
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


class MixturePolicy(nn.Module):
    """``obs -> (logits, means, log_stds)`` of a mixture of ``components`` diagonal Gaussians
    over actions (shapes ``(..., K)``, ``(..., K, A)``, ``(..., K, A)``). Weighted behaviour
    cloning (OptiDICE's policy extraction) fits a re-weighted behaviour distribution, which is
    multimodal wherever the data's actions are, and a single Gaussian would average the modes.
    """

    action_size: int
    components: int = 5
    hidden: Sequence[int] = (256, 256)
    min_log_std: float = -5.0
    max_log_std: float = 1.0

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        h = obs
        for width in self.hidden:
            h = nn.relu(nn.Dense(width)(h))
        k, a = self.components, self.action_size
        logits = nn.Dense(k)(h)
        means = nn.Dense(k * a)(h).reshape(*h.shape[:-1], k, a)
        log_stds = nn.Dense(k * a)(h).reshape(*h.shape[:-1], k, a)
        return logits, means, jnp.clip(log_stds, self.min_log_std, self.max_log_std)


def mixture_log_prob(
    logits: jax.Array, means: jax.Array, log_stds: jax.Array, action: jax.Array
) -> jax.Array:
    """``log sum_k softmax(logits)_k N(action; means_k, exp(log_stds_k)^2)``."""
    per_component = gaussian_log_prob(means, log_stds, jnp.expand_dims(action, -2))
    return jax.scipy.special.logsumexp(jax.nn.log_softmax(logits) + per_component, axis=-1)


def mixture_mode(logits: jax.Array, means: jax.Array) -> jax.Array:
    """The mean of the most probable component: the deterministic action."""
    best = jnp.argmax(logits, axis=-1)
    return jnp.take_along_axis(means, best[..., None, None], axis=-2)[..., 0, :]


def mixture_sample(
    key: jax.Array, logits: jax.Array, means: jax.Array, log_stds: jax.Array
) -> jax.Array:
    """One action per leading index: a component from ``softmax(logits)``, then its Gaussian."""
    k_component, k_noise = jax.random.split(key)
    chosen = jax.random.categorical(k_component, logits, axis=-1)
    mean = jnp.take_along_axis(means, chosen[..., None, None], axis=-2)[..., 0, :]
    log_std = jnp.take_along_axis(log_stds, chosen[..., None, None], axis=-2)[..., 0, :]
    return mean + jnp.exp(log_std) * jax.random.normal(k_noise, mean.shape)
