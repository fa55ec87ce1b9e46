"""Generalized advantage estimation over time-major rollouts.

Schulman et al., "High-dimensional continuous control using generalized advantage
estimation" (ICLR 2016):

.. math::
  \\delta_t = r_t + \\gamma (1 - d_t) V(s_{t+1}) - V(s_t), \\qquad
  \\hat A_t = \\delta_t + \\gamma \\lambda (1 - d_t) \\hat A_{t+1},

with ``d_t`` the termination flag. The rollouts come from auto-resetting environments, so
the observation after a truncated step (a time limit, not a terminal state) is already the
next episode's first one and ``V(s_{t+1})`` is not the value to bootstrap from; such steps
get advantage 0, value target ``V(s_t)``, and cut the recursion (the convention of Brax's
PPO). Losses should weight them by ``1 - truncation``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxopt_suite._checks import check_real


def gae(
    rewards: jax.Array,
    values: jax.Array,
    bootstrap_value: jax.Array,
    termination: jax.Array,
    truncation: jax.Array,
    *,
    discount: float | jax.Array,
    lambda_: float | jax.Array,
) -> tuple[jax.Array, jax.Array]:
    """Advantages and value targets for ``[T, ...]`` rollouts.

    Args:
      rewards: ``r_t``, ``[T, ...]``.
      values: ``V(s_t)``, ``[T, ...]``.
      bootstrap_value: ``V(s_T)`` after the last step, ``[...]``.
      termination: 1 where ``s_{t+1}`` is terminal, ``[T, ...]``.
      truncation: 1 where the episode was cut by a time limit at step ``t``, ``[T, ...]``.
      discount: ``gamma``.
      lambda_: ``lambda``.

    Returns:
      ``(advantages, value_targets)``, each ``[T, ...]``; ``value_targets = advantages +
      values``.
    """
    rewards = jnp.asarray(rewards)
    if values.shape != rewards.shape:
        raise ValueError(f"values must have the rewards' shape {rewards.shape}, got {values.shape}")
    for name, array in (("termination", termination), ("truncation", truncation)):
        if jnp.shape(array) != rewards.shape:
            raise ValueError(
                f"{name} must have the rewards' shape {rewards.shape}, got {jnp.shape(array)}"
            )
    if jnp.shape(bootstrap_value) != rewards.shape[1:]:
        raise ValueError(
            f"bootstrap_value must have shape {rewards.shape[1:]}, got {jnp.shape(bootstrap_value)}"
        )
    # concrete rates are checked (a NaN gave NaN advantages, 1.5 and 2.0 numbers without
    # meaning); traced ones pass
    for name, rate in (("discount", discount), ("lambda_", lambda_)):
        check_real(name, rate, "lie in [0, 1]", lambda v: 0.0 <= v <= 1.0)
    # floating: integer rewards made the scan's carry int32 against float advantages
    dtype = jnp.result_type(rewards, values)
    if not jnp.issubdtype(dtype, jnp.floating):
        dtype = jnp.result_type(float)
    rewards, values = rewards.astype(dtype), jnp.asarray(values, dtype)
    live = 1.0 - jnp.asarray(termination, dtype)
    kept = 1.0 - jnp.asarray(truncation, dtype)
    next_values = jnp.concatenate([values[1:], bootstrap_value[None]], axis=0)
    deltas = (rewards + discount * live * next_values - values) * kept

    def backward(carry, step):
        delta, live_t, kept_t = step
        advantage = delta + discount * lambda_ * live_t * kept_t * carry
        return advantage, advantage

    _, advantages = jax.lax.scan(
        backward, jnp.zeros_like(bootstrap_value, dtype), (deltas, live, kept), reverse=True
    )
    return advantages, advantages + values
