"""Rollouts of a Gaussian policy in a batched, auto-resetting Brax environment, as one
``lax.scan``, and the episode statistics the safe-RL algorithms constrain.

The environment is one of :mod:`envs` (a per-step ``cost`` and the maximum-MDP
``cost_increment`` in ``state.info``) wrapped by ``envs.wrap_for_training`` (Brax's
episode and auto-reset wrappers), so ``info['episode_metrics']`` holds each episode's sums
and ``info['episode_done']`` flags the step that ended it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxopt_suite._checks import check_finite_nonnegative
from jaxopt_suite.rl.gae import gae
from jaxopt_suite.rl.networks import gaussian_log_prob
from jaxopt_suite.rl.normalization import RunningStats, normalize


class Transition(NamedTuple):
    """One step of ``B`` environments (a rollout stacks them to ``[T, B, ...]``)."""

    obs: jax.Array  # (B, obs) raw observation the action was taken at
    action: jax.Array  # (B, act) the sampled (unclipped) action
    log_prob: jax.Array  # (B,) under the behaviour policy
    reward: jax.Array  # (B,)
    cost: jax.Array  # (B,) the state-wise cost of the step
    cost_increment: jax.Array  # (B,) its maximum-MDP increment
    termination: jax.Array  # (B,) 1 where the next state is terminal
    truncation: jax.Array  # (B,) 1 where a time limit ended the episode
    episode_done: jax.Array  # (B,) 1 where an episode ended (either way)
    episode_return: jax.Array  # (B,) the episode's sums, valid where episode_done
    episode_cost: jax.Array  # (B,)
    episode_max_cost: jax.Array  # (B,) the sum of increments = the episode's max cost
    episode_length: jax.Array  # (B,)


def rollout(
    env,
    policy_apply: Callable[[Any, jax.Array], tuple[jax.Array, jax.Array]],
    policy_params: Any,
    stats: RunningStats,
    state,
    key: jax.Array,
    unroll_length: int,
    *,
    deterministic: bool = False,
):
    """``unroll_length`` steps from ``state``: ``(final_state, Transition [T, B, ...])``.
    Actions are clipped to ``[-1, 1]`` for the environment; the log-probability is of the
    unclipped sample. ``deterministic`` takes the mean action."""

    def step(state, step_key):
        mean, log_std = policy_apply(policy_params, normalize(stats, state.obs))
        noise = jax.random.normal(step_key, mean.shape)
        action = mean if deterministic else mean + jnp.exp(log_std) * noise
        next_state = env.step(state, jnp.clip(action, -1.0, 1.0))
        info = next_state.info
        metrics = info["episode_metrics"]
        truncation = info["truncation"]
        transition = Transition(
            obs=state.obs,
            action=action,
            log_prob=gaussian_log_prob(mean, log_std, action),
            reward=next_state.reward,
            cost=info["cost"],
            cost_increment=info["cost_increment"],
            termination=next_state.done * (1.0 - truncation),
            truncation=truncation,
            episode_done=info["episode_done"],
            episode_return=metrics["sum_reward"],
            episode_cost=metrics["cost"],
            episode_max_cost=metrics["cost_increment"],
            episode_length=metrics["length"],
        )
        return next_state, transition

    return jax.lax.scan(step, state, jax.random.split(key, unroll_length))


class EpisodeStats(NamedTuple):
    """Means over the episodes that ended in a batch (``count`` of them); ``violation``
    is the fraction whose max cost exceeded the limit ``w``."""

    count: jax.Array
    episode_return: jax.Array
    episode_cost: jax.Array
    episode_max_cost: jax.Array
    max_cost_variance: jax.Array
    cost_rate: jax.Array
    violation: jax.Array


def episode_stats(batch: Transition, limit: float | jax.Array) -> EpisodeStats:
    """The statistics of the episodes that ended in ``batch`` (zeros when none did).
    ``limit`` (the cost limit ``w``) must be finite and >= 0 when concrete: against a NaN
    limit no episode would count as a violation; a traced one is not checked."""
    if isinstance(limit, bool | np.bool_):  # True read as a limit of 1
        raise ValueError(f"cost_limit must be a number, not a bool, got {limit!r}")
    check_finite_nonnegative("cost_limit", limit)
    done = batch.episode_done.astype(jnp.float32)
    count = jnp.sum(done)
    safe = jnp.maximum(count, 1.0)

    def mean(x):
        return jnp.sum(done * x) / safe

    # a finished episode's NaN max cost makes the rate NaN, not a safe episode
    violated = jnp.where(
        (done > 0) & jnp.isnan(batch.episode_max_cost),
        jnp.nan,
        (batch.episode_max_cost > limit).astype(jnp.float32),
    )
    max_cost = mean(batch.episode_max_cost)
    variance = mean((batch.episode_max_cost - max_cost) ** 2)
    steps = jnp.maximum(jnp.sum(done * batch.episode_length), 1.0)
    return EpisodeStats(
        count=count,
        episode_return=mean(batch.episode_return),
        episode_cost=mean(batch.episode_cost),
        episode_max_cost=max_cost,
        max_cost_variance=variance,
        cost_rate=jnp.sum(done * batch.episode_cost) / steps,
        violation=mean(violated),
    )


def latest_stats(new: EpisodeStats, previous: EpisodeStats) -> EpisodeStats:
    """``new`` when its batch finished an episode, else ``previous``."""
    return jax.tree.map(lambda a, b: jnp.where(new.count > 0, a, b), new, previous)


class Prepared(NamedTuple):
    """A batch ready for the losses (all ``[T, B]`` but ``obs``)."""

    obs: jax.Array  # normalised observations
    weights: jax.Array  # 1 - truncation: truncated steps have no valid advantage
    reward_advantage: jax.Array  # normalised to mean 0, std 1
    reward_target: jax.Array
    cost_advantage: jax.Array  # centred, not scaled (its size is the constraint's)
    cost_target: jax.Array
    cost_td: jax.Array  # centred one-step TD residual of the cost critic
    cost_values: jax.Array


def weight_total(weights: jax.Array) -> jax.Array:
    """The sum of the step weights (``1 - truncation``) that weighted means divide by, at
    least 1: when every step is truncated (``unroll_length`` 1 as all envs hit the time
    limit) ``0 / 0`` made the advantages NaN, and the NaN gradients (times weight 0) every
    parameter NaN for good. Every weighted mean of the batch's losses divides by this."""
    return jnp.maximum(jnp.sum(weights), 1.0)


def prepare(
    batch: Transition,
    final_obs: jax.Array,
    stats: RunningStats,
    reward_value: Callable[[jax.Array], jax.Array],
    cost_value: Callable[[jax.Array], jax.Array],
    *,
    on_max_mdp: bool,
    discount: float,
    gae_lambda: float,
    cost_discount: float,
    cost_gae_lambda: float,
) -> Prepared:
    """GAE for the reward and for the cost signal (the max-cost increment on the maximum
    MDP, else the per-step cost), with the critics evaluated on normalised observations
    (``final_obs``: the observation after the last step, for bootstrapping)."""
    obs = normalize(stats, batch.obs)
    last_obs = normalize(stats, final_obs)
    weights = 1.0 - batch.truncation
    total = weight_total(weights)

    def weighted_mean(x):
        return jnp.sum(weights * x) / total

    values_c, boot_c = cost_value(obs), cost_value(last_obs)
    signal = batch.cost_increment if on_max_mdp else batch.cost
    adv_r, target_r = gae(
        batch.reward, reward_value(obs), reward_value(last_obs), batch.termination,
        batch.truncation, discount=discount, lambda_=gae_lambda,
    )  # fmt: skip
    adv_c, target_c = gae(
        signal, values_c, boot_c, batch.termination, batch.truncation,
        discount=cost_discount, lambda_=cost_gae_lambda,
    )  # fmt: skip
    centred = adv_r - weighted_mean(adv_r)
    adv_r = centred / (jnp.sqrt(weighted_mean(centred**2)) + 1e-8)
    next_c = jnp.concatenate([values_c[1:], boot_c[None]], axis=0)
    td_c = (signal + cost_discount * (1.0 - batch.termination) * next_c - values_c) * weights
    return Prepared(
        obs=obs,
        weights=weights,
        reward_advantage=adv_r,
        reward_target=target_r,
        cost_advantage=adv_c - weighted_mean(adv_c),
        cost_target=target_c,
        cost_td=td_c - weighted_mean(td_c),
        cost_values=values_c,
    )
