"""Episode statistics of safe-RL rollouts, as logged by ASCPO and OmniSafe.

ASCPO (arXiv 2410.01212, its ``safe_rl_lib`` logger) reports ``EpRet``, ``EpCost``,
``EpMaxCost`` and ``CostRate``; the absolute constraint it targets is on the probability that
the episode's maximum cost exceeds the limit ``w``, estimated here as the fraction of episodes
with ``EpMaxCost > w``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from envs._checks import check_limit


def episode_statistics(
    episode_return: jax.Array,
    episode_cost: jax.Array,
    episode_max_cost: jax.Array,
    episode_length: jax.Array,
    completed: jax.Array,
    cost_limit: float | jax.Array,
) -> dict[str, jax.Array]:
    """Means over completed episodes and the probability of violating ``cost_limit``.

    With Brax's wrappers (:func:`envs.wrap_for_training`) the inputs are, at each step,
    ``info['episode_metrics']['sum_reward' | 'cost' | 'cost_increment' | 'length']`` and
    ``completed = info['episode_done']``; stacked over a rollout, every entry with
    ``completed = 1`` is one finished episode. All arrays share one shape (any).

    Args:
      episode_return: summed reward of each episode.
      episode_cost: summed per-step cost (per action under ``action_repeat``: each action's
        cost is the largest of its repeats', see :func:`envs.wrap_for_training`).
      episode_max_cost: summed cost increments, i.e. the episode's maximum per-step cost.
      episode_length: steps in the episode.
      completed: 1 (or True) where the entry is a finished episode, else 0.
      cost_limit: the limit ``w`` on the maximum cost, finite and >= 0 (checked when concrete:
        a NaN limit would count every episode as safe); a traced value does not recompile.

    Returns:
      A dict of float32 scalars: ``EpRet``, ``EpCost``, ``EpMaxCost``, ``EpLen`` (means over
      completed episodes), ``CostRate`` (their total cost over their total steps),
      ``ViolationProbability`` (fraction with ``EpMaxCost > cost_limit``) and ``NumEpisodes``.
      The means are NaN when no episode is completed.
    """
    arrays = {
        "episode_return": episode_return,
        "episode_cost": episode_cost,
        "episode_max_cost": episode_max_cost,
        "episode_length": episode_length,
        "completed": completed,
    }
    check_limit(cost_limit, "cost_limit")
    shape = jnp.shape(completed)
    for name, array in arrays.items():
        if jnp.shape(array) != shape:
            raise ValueError(
                f"{name} must have the shape of completed {shape}, got {jnp.shape(array)}"
            )
    mask = jnp.asarray(completed) > 0
    count = jnp.sum(mask.astype(jnp.float32))

    def total(values):
        # where, not a product with the mask: unfinished entries may hold anything, even NaN.
        return jnp.sum(jnp.where(mask, jnp.asarray(values, jnp.float32), 0.0))

    # a NaN max cost makes the probability NaN, not a safe episode
    episode_max = jnp.asarray(episode_max_cost, jnp.float32)
    violated = jnp.where(jnp.isnan(episode_max), jnp.nan, episode_max > cost_limit)
    # 0/0 gives NaN, the honest mean of no episodes.
    return {
        "EpRet": total(episode_return) / count,
        "EpCost": total(episode_cost) / count,
        "EpMaxCost": total(episode_max_cost) / count,
        "EpLen": total(episode_length) / count,
        "CostRate": total(episode_cost) / total(episode_length),
        "ViolationProbability": total(violated) / count,
        "NumEpisodes": count,
    }
