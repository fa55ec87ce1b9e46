"""Running observation statistics (parallel Welford: Chan et al., 1979), as pure functions."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp


class RunningStats(NamedTuple):
    """Mean and sum of squared deviations of everything seen, over the leading axes."""

    mean: jax.Array  # (obs_size,)
    m2: jax.Array  # (obs_size,)
    count: jax.Array  # () float32


def init_stats(size: int) -> RunningStats:
    return RunningStats(jnp.zeros(size), jnp.zeros(size), jnp.zeros(()))


def update_stats(stats: RunningStats, batch: jax.Array) -> RunningStats:
    """Adds ``batch (..., obs_size)`` to the statistics. An empty batch (no rows; its size
    is static) leaves them as they are: its mean would be ``0 / 0``, NaN, and poison them."""
    flat = batch.reshape(-1, batch.shape[-1])
    if flat.shape[0] == 0:
        return stats
    n = jnp.float32(flat.shape[0])
    mean_b = jnp.mean(flat, axis=0)
    m2_b = jnp.sum((flat - mean_b[None, :]) ** 2, axis=0)
    total = stats.count + n
    delta = mean_b - stats.mean
    mean = stats.mean + delta * n / total
    m2 = stats.m2 + m2_b + delta * delta * stats.count * n / total
    return RunningStats(mean, m2, total)


def normalize(stats: RunningStats, obs: jax.Array, clip: float = 10.0) -> jax.Array:
    """``(obs - mean) / std`` clipped to ``[-clip, clip]`` (the identity before any data)."""
    var = jnp.where(stats.count > 1, stats.m2 / jnp.maximum(stats.count - 1, 1.0), 1.0)
    std = jnp.sqrt(jnp.maximum(var, 1e-8))
    lead = (1,) * (obs.ndim - 1)
    return jnp.clip((obs - stats.mean.reshape(*lead, -1)) / std.reshape(*lead, -1), -clip, clip)
