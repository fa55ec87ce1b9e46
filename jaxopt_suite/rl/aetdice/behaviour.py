"""Behaviour policies for offline multi-objective datasets, trained with the RL module's PPO.

D4MORL's data come from PGMORL's policies, one per preference. Here one PPO run trains a
preference-conditioned policy ``pi(a | s, w)`` on :class:`envs.PreferenceConditionedWrapper`
(each environment slot draws ``w`` from the preference rows once and keeps it, and the reward
is ``w . r``), and :class:`BehaviourPolicy` is the callable :func:`envs.collect` rolls out (at
the preference rows themselves).

The PPO is :mod:`..ppo_lagrangian` with the constraint switched off: a zero cost, a multiplier
held at 0 (``lagrange_learning_rate = 0``), so the update is plain PPO-clip.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxopt_suite.rl.networks import GaussianPolicy
from jaxopt_suite.rl.normalization import RunningStats, normalize
from jaxopt_suite.rl.ppo_lagrangian import PPOLagrangianConfig, make_train


def _zero_cost_env(env, preferences, sampling: str):
    from envs import CostWrapper, MaxCostWrapper, PreferenceConditionedWrapper

    class ZeroCost(CostWrapper):
        """No cost: the PPO-Lagrangian machinery reduces to PPO."""

        def cost(self, pipeline_state) -> jax.Array:
            del pipeline_state
            return jnp.zeros((), jnp.float32)

    return MaxCostWrapper(ZeroCost(PreferenceConditionedWrapper(env, preferences, sampling)))


class BehaviourPolicy(NamedTuple):
    """``policy(preference, observation, key) -> action`` (the :func:`envs.collect`
    protocol): the trained Gaussian's mean, clipped to ``[-1, 1]``. The data's spread comes
    from ``collect``'s ``action_noise`` (small for "expert", large for "amateur" data)."""

    policy: dict  # the Gaussian policy's parameters
    obs_stats: RunningStats
    hidden: tuple[int, ...]
    action_size: int

    def __call__(self, preference: jax.Array, observation: jax.Array, key: jax.Array):
        # the training observation: the env's, the preference, the max cost (always 0)
        full = jnp.concatenate([observation, preference, jnp.zeros((1,), observation.dtype)])
        net = GaussianPolicy(self.action_size, self.hidden)
        del key
        mean, _ = net.apply(self.policy, normalize(self.obs_stats, full[None])[0])
        return jnp.clip(mean, -1.0, 1.0)


def train_behaviour(
    env,
    preferences,
    key: jax.Array,
    config: PPOLagrangianConfig | None = None,
    sampling: str = "mixture",
) -> tuple[BehaviourPolicy, dict]:
    """Trains a preference-conditioned behaviour policy on a multi-objective ``env`` of
    :mod:`envs` (unbatched) for the rows of ``preferences (P, m)``.

    ``config`` sets the PPO run (its cost settings are overridden). Each of the ``num_envs``
    slots trains at one preference for the whole run, drawn by ``sampling``
    (:class:`envs.PreferenceConditionedWrapper`: ``"mixture"``, a Dirichlet(1) mixture of
    the rows, which gathers near their mean and seldom trains the end rows, or ``"rows"``, a
    row uniformly at random), so ``num_envs`` need not relate to ``P``.
    Returns the policy and the per-iteration training metrics (``episode_return`` is the
    preference-weighted return).
    """
    config = PPOLagrangianConfig() if config is None else config
    config = dataclasses.replace(
        config, variant="ppo_lagrangian", cost_limit=1e9, lagrange_init=0.0,
        lagrange_learning_rate=0.0,
    )  # fmt: skip
    preferences = np.asarray(preferences, np.float32)
    train_env = _zero_cost_env(env, preferences, sampling)
    result = jax.jit(make_train(config, train_env))(key)
    policy = BehaviourPolicy(
        result.params.policy, result.params.obs_stats, tuple(config.hidden), env.action_size
    )
    return policy, result.metrics
