"""CPO, SCPO and ASCPO: one trust-region training loop, three constraints.

Every iteration rolls out ``num_envs x unroll_length`` steps, fits the reward critic and
the cost critic (Adam on minibatches), and takes one CPO step (:mod:`.trust_region`) on the
policy:

* ``cpo`` (Achiam et al., 2017): the per-step cost, discounted by ``cost_discount``;
  ``c = mean(EpCost) - cost_limit``; ``S`` the mean cost advantage per episode (the
  batch's summed advantage over ``N``, the steps over the mean length of the episodes
  that ended in the batch).
* ``scpo`` (Zhao et al., "State-wise constrained policy optimization", 2023): the same
  update on the maximum MDP: the cost is the max-cost increment (undiscounted), so
  ``c = mean(EpMaxCost) - cost_limit``, an expectation constraint on the episode's max
  state-wise cost.
* ``ascpo`` (arXiv 2410.01212): the maximum MDP with the absolute bound of :mod:`.ascpo`.

``make_train(config, env)(key)`` is one jitted ``lax.scan`` over the iterations, so it
``vmap``s over seeds. ``env`` is an environment of :mod:`envs` (per-step ``cost`` and
``cost_increment`` in its info); the loop wraps it for training (episodes of
``episode_length`` steps, automatic resets). All methods see the same observations (with
the running max cost appended).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax.flatten_util import ravel_pytree

from jaxopt_suite._checks import check_flag, check_settings, python_numbers
from jaxopt_suite.rl import ascpo
from jaxopt_suite.rl.networks import gaussian_kl, gaussian_log_prob
from jaxopt_suite.rl.rollout import (
    EpisodeStats,
    Prepared,
    Transition,
    weight_total,
)
from jaxopt_suite.rl.training import (
    Params,
    Trainer,
    TrainResult,
    collect,
    config_settings,
    constraint_value,
    init_params,
    iteration_metrics,
    networks,
    next_obs_stats,
    no_episodes,
    train_function,
)
from jaxopt_suite.rl.trust_region import (
    backtracking_line_search,
    conjugate_gradient,
    cpo_direction,
    fisher_vector_product,
)

ALGORITHMS = ("ascpo", "scpo", "cpo")
CONSTRAINTS = {"cpo": "cost", "scpo": "max_cost", "ascpo": "bound"}


def episodes_in(batch: Transition, episode_length: int) -> jax.Array:
    """``N``, the number of episodes a batch's steps stand for: its steps over the mean
    length of the episodes that ended in it (Achiam's CPO rescales its cost surrogate by that
    mean length, ``EpLen``), or over ``episode_length`` when none ended. A fixed
    ``steps / episode_length`` overstated every per-episode mean by ``episode_length`` over
    the mean length where episodes end early (at a goal, by a fall)."""
    done = batch.episode_done.astype(jnp.float32)
    ended = jnp.sum(done)
    total = jnp.sum(done * batch.episode_length.astype(jnp.float32))
    length = jnp.where(ended > 0, total / jnp.maximum(ended, 1.0), episode_length)
    return done.size / length


@dataclasses.dataclass(frozen=True)
class TrustRegionConfig:
    """Settings of :func:`make_train`. The defaults are the ASCPO code's (``notes/rl.md``)
    except where a CPU needs less work per iteration: the batch and iteration counts; CG
    runs 10 iterations (the code: 100) with damping 0.01 (the code: none) on Fisher-vector
    products from every ``fisher_subsample``-th sample; each critic takes ``critic_steps``
    Adam steps on ``critic_batch_size``-sample draws (the code: full-batch steps); the line
    search backtracks at most ``max_backtracks = 50`` times (the code: 100)."""

    algorithm: str = "ascpo"
    cost_limit: float = 0.0
    num_envs: int = 16
    episode_length: int = 200
    unroll_length: int = 200
    iterations: int = 50
    discount: float = 0.99
    gae_lambda: float = 0.97
    cost_discount: float = 0.99  # cpo only: scpo and ascpo sum the increments undiscounted
    cost_gae_lambda: float = 0.95
    max_kl: float = 0.02
    cg_iterations: int = 10
    fisher_subsample: int = 5  # the Fisher-vector products use every 5th sample
    cg_damping: float = 0.01
    backtrack_decay: float = 0.8
    max_backtracks: int = 50
    critic_learning_rate: float = 1e-3
    critic_steps: int = 80
    critic_batch_size: int = 256
    k: float = 7.0
    omega1: float = 0.005
    omega2: float = 0.007
    hidden: tuple[int, ...] = (64, 64)
    normalize_observations: bool = True

    def checked(self) -> TrustRegionConfig:
        if self.algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {self.algorithm!r}")
        check_settings(
            self,
            integers=("num_envs", "episode_length", "unroll_length", "iterations",
                      "cg_iterations", "fisher_subsample", "max_backtracks", "critic_steps",
                      "critic_batch_size"),
            nonnegative=("cost_limit", "k", "omega1", "omega2", "cg_damping"),
            positive=("max_kl", "critic_learning_rate"),
            unit=("discount", "gae_lambda", "cost_discount", "cost_gae_lambda",
                  "backtrack_decay"),
            widths=("hidden",),
            scalar=True,  # an array cost_limit failed to broadcast inside the update
        )  # fmt: skip
        if self.episode_length < 2:  # a one-step episode is all truncation: no returns
            raise ValueError(f"episode_length must be >= 2, got {self.episode_length}")
        check_flag("normalize_observations", self.normalize_observations)
        return python_numbers(self)


class _Carry(NamedTuple):
    params: Params
    reward_opt: Any
    cost_opt: Any
    env_state: Any
    last: EpisodeStats  # the latest batch that finished an episode


def make_train(
    config: TrustRegionConfig,
    env,
    *,
    progress: Callable[[Any, dict], None] | None = None,
) -> Callable[[jax.Array], TrainResult]:
    """``train(key) -> TrainResult``: :func:`make_trainer`'s iterations in one ``lax.scan``
    (:func:`.training.train_function`; ``progress(iteration, metrics)`` on the host after
    each)."""
    return train_function(make_trainer(config, env), progress)


def make_trainer(config: TrustRegionConfig, env) -> Trainer:
    """The algorithm's :class:`.training.Trainer` on ``env`` (see the module docstring)."""
    config = config.checked()
    modules = networks(config, env)
    policy, reward_critic, cost_critic = modules.policy, modules.reward_critic, modules.cost_critic
    obs_size, action_size = env.observation_size, env.action_size
    critic_optimizer = optax.adam(config.critic_learning_rate)
    on_max_mdp = config.algorithm != "cpo"
    cost_discount = 1.0 if on_max_mdp else config.cost_discount

    def fit_critic(network, params, opt_state, obs, targets, weights, key):
        """``critic_steps`` Adam steps, each on ``critic_batch_size`` samples drawn with
        replacement (the samples are weighted, truncated steps by 0)."""
        obs = obs.reshape(-1, obs.shape[-1])
        targets, weights = targets.reshape(-1), weights.reshape(-1)

        def loss(p, idx):
            w = weights[idx]
            error = network.apply(p, obs[idx]) - targets[idx]
            return jnp.sum(w * error**2) / jnp.maximum(jnp.sum(w), 1.0)

        def step(carry, step_key):
            p, s = carry
            idx = jax.random.randint(step_key, (config.critic_batch_size,), 0, targets.shape[0])
            updates, s = critic_optimizer.update(jax.grad(loss)(p, idx), s, p)
            return (optax.apply_updates(p, updates), s), None

        (params, opt_state), _ = jax.lax.scan(
            step, (params, opt_state), jax.random.split(key, config.critic_steps)
        )
        return params, opt_state

    def policy_step(params: Params, batch: Transition, data: Prepared, c):
        weights, obs = data.weights, data.obs
        total = weight_total(weights)
        episodes = episodes_in(batch, config.episode_length)
        old_mean, old_log_std = policy.apply(params.policy, obs)
        flat0, unravel = ravel_pytree(params.policy)

        def evaluate(flat):
            mean, log_std = policy.apply(unravel(flat), obs)
            ratio = jnp.exp(gaussian_log_prob(mean, log_std, batch.action) - batch.log_prob)
            loss = -jnp.sum(weights * ratio * data.reward_advantage) / total
            if config.algorithm == "ascpo":
                cost = ascpo.surrogate(
                    ratio, data.cost_advantage, data.cost_td, data.cost_values, weights,
                    episodes, k=config.k, omega1=config.omega1, omega2=config.omega2,
                )  # fmt: skip
            else:
                cost = jnp.sum(weights * ratio * data.cost_advantage) / episodes
            kl = jnp.sum(weights * gaussian_kl(old_mean, old_log_std, mean, log_std)) / total
            return loss, cost, kl

        g = jax.grad(lambda f: evaluate(f)[0])(flat0)
        b = jax.grad(lambda f: evaluate(f)[1])(flat0)
        # the Fisher matrix from a subsample (as OpenAI baselines' TRPO does): the products
        # are the costliest part of the step, and the curvature needs fewer samples
        every = config.fisher_subsample
        sub_obs = obs.reshape(-1, obs.shape[-1])[::every]
        sub_weights = weights.reshape(-1)[::every]
        sub_mean, sub_log_std = policy.apply(params.policy, sub_obs)

        def sub_kl(p):
            mean, log_std = policy.apply(p, sub_obs)
            kl = gaussian_kl(sub_mean, sub_log_std, mean, log_std)
            return jnp.sum(sub_weights * kl) / weight_total(sub_weights)

        fvp = fisher_vector_product(sub_kl, params.policy, damping=config.cg_damping)
        hinv_g = conjugate_gradient(fvp, g, max_iterations=config.cg_iterations).x
        hinv_b = conjugate_gradient(fvp, b, max_iterations=config.cg_iterations).x
        direction = cpo_direction(g, b, c, hinv_g, hinv_b, max_kl=config.max_kl)
        search = backtracking_line_search(
            evaluate, flat0, direction, c, max_kl=config.max_kl,
            decay=config.backtrack_decay, max_backtracks=config.max_backtracks,
        )  # fmt: skip
        _, _, kl = evaluate(search.params)
        info = {"case": direction.case, "accepted": search.accepted,
                "backtracks": search.backtracks, "kl": kl}  # fmt: skip
        return unravel(search.params), info

    def iteration(carry: _Carry, key):
        params = carry.params
        key, k_reward, k_cost = jax.random.split(key, 3)
        env_state, batch, stats, last, data = collect(
            modules, params, carry.env_state, carry.last, key, config, on_max_mdp=on_max_mdp,
            cost_discount=cost_discount,
        )  # fmt: skip
        c = constraint_value(CONSTRAINTS[config.algorithm], last, config.cost_limit, config.k)
        new_policy, info = policy_step(params, batch, data, c)
        reward_params, reward_opt = fit_critic(
            reward_critic, params.reward_critic, carry.reward_opt, data.obs, data.reward_target,
            data.weights, k_reward,
        )  # fmt: skip
        cost_params, cost_opt = fit_critic(
            cost_critic, params.cost_critic, carry.cost_opt, data.obs, data.cost_target,
            data.weights, k_cost,
        )  # fmt: skip
        obs_stats = next_obs_stats(params, batch, config.normalize_observations)
        new = Params(new_policy, reward_params, cost_params, obs_stats)
        metrics = {
            **iteration_metrics(stats, last, c),
            **info,
        }
        return _Carry(new, reward_opt, cost_opt, env_state, last), metrics

    def init(key: jax.Array) -> _Carry:
        k_env, *k_params = jax.random.split(key, 4)
        env_state = modules.train_env.reset(jax.random.split(k_env, config.num_envs))
        params = init_params(k_params, modules, obs_size)
        return _Carry(
            params,
            critic_optimizer.init(params.reward_critic),
            critic_optimizer.init(params.cost_critic),
            env_state,
            no_episodes(),
        )

    # every setting and the env's wrappers, for checkpoints: the three algorithms' carries
    # have the same shapes, and a CPO checkpoint was resumed as an ASCPO run
    settings = config_settings(config, env)
    return Trainer(
        init, iteration, lambda carry: carry.params, config.iterations, obs_size, action_size,
        settings,
    )  # fmt: skip
