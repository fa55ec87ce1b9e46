"""PPO-Lagrangian, and the PPO-clip variant of ASCPO.

PPO-clip (Schulman et al., 2017) on the Lagrangian ``L = -J_R + lambda (J_C - d)``, the
multiplier updated after each batch by projected ascent on ``lambda (J_C - d)`` (Ray et al.,
"Benchmarking safe exploration in deep RL", 2019):

* ``lagrange_optimizer="adam"`` (the default, OmniSafe's: Adam with learning rate 0.035 from
  ``lambda = 0.001``): Adam's step on the gradient ``-(J_C - d)``, then ``lambda <- max(0,
  lambda)``. The step is about ``lr_lambda`` whatever the cost's units, so a large early
  excess (a summed cost of tens against a limit below one) does not throw the multiplier to
  a value that makes the policy give up the reward;
* ``lagrange_optimizer="sgd"``: ``lambda <- max(0, lambda + lr_lambda (J_C - d))``, the
  plain projected gradient ascent.

The two variants:

* ``ppo_lagrangian``: ``J_C`` the episode cost (the per-step cost, discounted by
  ``cost_discount`` in the advantages), ``d = cost_limit``;
* ``ppo_ascpo`` (the ASCPO code's ``pascpo``): on the maximum MDP, ``J_C`` the absolute
  bound ``mean(D_max) + k std(D_max)`` and the cost term of the loss ASCPO's surrogate
  (:mod:`.ascpo`) with clipped ratios.

The loss is divided by ``1 + lambda`` so the step size does not grow with the multiplier,
and the cost advantages are standardised like the reward's (OmniSafe's default), so the
multiplier weighs advantages of one scale.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from jaxopt_suite._checks import check_flag, check_settings, python_numbers
from jaxopt_suite.rl import ascpo
from jaxopt_suite.rl.networks import gaussian_log_prob
from jaxopt_suite.rl.rollout import EpisodeStats, weight_total
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

VARIANTS = ("ppo_lagrangian", "ppo_ascpo")
LAGRANGE_OPTIMIZERS = ("adam", "sgd")


@dataclasses.dataclass(frozen=True)
class PPOLagrangianConfig:
    """Settings of :func:`make_train`."""

    variant: str = "ppo_lagrangian"
    cost_limit: float = 0.0
    num_envs: int = 16
    episode_length: int = 200
    unroll_length: int = 200
    iterations: int = 50
    discount: float = 0.99
    gae_lambda: float = 0.97
    cost_discount: float = 0.99  # ppo_lagrangian only
    cost_gae_lambda: float = 0.95
    clip: float = 0.2
    learning_rate: float = 3e-4
    epochs: int = 10
    minibatches: int = 8
    lagrange_optimizer: str = "adam"
    lagrange_learning_rate: float = 0.035
    lagrange_init: float = 0.001
    k: float = 7.0
    omega1: float = 0.005
    omega2: float = 0.007
    hidden: tuple[int, ...] = (64, 64)
    normalize_observations: bool = True

    def checked(self) -> PPOLagrangianConfig:
        if self.variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}, got {self.variant!r}")
        if self.lagrange_optimizer not in LAGRANGE_OPTIMIZERS:
            raise ValueError(
                f"lagrange_optimizer must be one of {LAGRANGE_OPTIMIZERS}, got "
                f"{self.lagrange_optimizer!r}"
            )
        check_settings(
            self,
            integers=("num_envs", "episode_length", "unroll_length", "iterations", "epochs",
                      "minibatches"),
            widths=("hidden",),
        )  # fmt: skip
        if (self.num_envs * self.unroll_length) % self.minibatches:
            raise ValueError(
                f"minibatches ({self.minibatches}) must divide num_envs * unroll_length "
                f"({self.num_envs * self.unroll_length})"
            )
        check_settings(
            self,
            nonnegative=("cost_limit", "k", "omega1", "omega2", "lagrange_init",
                         "lagrange_learning_rate"),
            positive=("clip", "learning_rate"),
            unit=("discount", "gae_lambda", "cost_discount", "cost_gae_lambda"),
            scalar=True,  # an array lagrange_init failed as a non-scalar gradient
        )  # fmt: skip
        if self.episode_length < 2:  # a one-step episode is all truncation: no returns
            raise ValueError(f"episode_length must be >= 2, got {self.episode_length}")
        check_flag("normalize_observations", self.normalize_observations)
        return python_numbers(self)


class _Carry(NamedTuple):
    params: Params
    opt_state: Any
    lagrange: jax.Array
    lagrange_opt: Any  # the multiplier's Adam moments (empty for "sgd")
    env_state: Any
    last: EpisodeStats


def make_train(
    config: PPOLagrangianConfig,
    env,
    *,
    progress: Callable[[Any, dict], None] | None = None,
) -> Callable[[jax.Array], TrainResult]:
    """``train(key) -> TrainResult``: :func:`make_trainer`'s iterations in one ``lax.scan``
    (:func:`.training.train_function`; ``progress(iteration, metrics)`` on the host after
    each)."""
    return train_function(make_trainer(config, env), progress)


def make_trainer(config: PPOLagrangianConfig, env) -> Trainer:
    """The algorithm's :class:`.training.Trainer` on ``env`` (see the module docstring)."""
    config = config.checked()
    modules = networks(config, env)
    policy, reward_critic, cost_critic = modules.policy, modules.reward_critic, modules.cost_critic
    obs_size, action_size = env.observation_size, env.action_size
    optimizer = optax.chain(optax.clip_by_global_norm(0.5), optax.adam(config.learning_rate))
    on_max_mdp = config.variant == "ppo_ascpo"
    cost_discount = 1.0 if on_max_mdp else config.cost_discount
    batch_size = config.num_envs * config.unroll_length
    episodes_per_minibatch = batch_size / config.minibatches / config.episode_length
    if config.lagrange_optimizer == "adam":
        lagrange_optimizer = optax.adam(config.lagrange_learning_rate)
    else:
        lagrange_optimizer = optax.sgd(config.lagrange_learning_rate)

    def update_lagrange(lagrange, opt_state, excess):
        """One projected ascent step on ``lambda * excess``."""
        updates, opt_state = lagrange_optimizer.update(-excess, opt_state, lagrange)
        return jnp.maximum(0.0, optax.apply_updates(lagrange, updates)), opt_state

    def loss_fn(nets, lagrange, data):
        obs, action, old_log_prob, adv_r, adv_c, td_c, target_r, target_c, weights = data
        policy_params, reward_params, cost_params = nets
        total = weight_total(weights)
        mean, log_std = policy.apply(policy_params, obs)
        ratio = jnp.exp(gaussian_log_prob(mean, log_std, action) - old_log_prob)
        clipped = jnp.clip(ratio, 1.0 - config.clip, 1.0 + config.clip)
        reward_term = jnp.sum(weights * jnp.minimum(ratio * adv_r, clipped * adv_r)) / total
        # the pessimistic side for the cost: the larger of the two
        if on_max_mdp:
            values_c = jax.lax.stop_gradient(cost_critic.apply(cost_params, obs))

            def surrogate(r):
                return ascpo.surrogate(
                    r, adv_c, td_c, values_c, weights, episodes_per_minibatch,
                    k=config.k, omega1=config.omega1, omega2=config.omega2,
                )  # fmt: skip

            # per sample, like the expected-cost term: S counts per episode
            cost_term = jnp.maximum(surrogate(ratio), surrogate(clipped))
            cost_term = cost_term * episodes_per_minibatch / total
        else:
            cost_term = jnp.sum(weights * jnp.maximum(ratio * adv_c, clipped * adv_c)) / total
        policy_loss = (-reward_term + lagrange * cost_term) / (1.0 + lagrange)
        value_loss = jnp.sum(weights * (reward_critic.apply(reward_params, obs) - target_r) ** 2)
        cost_loss = jnp.sum(weights * (cost_critic.apply(cost_params, obs) - target_c) ** 2)
        return policy_loss + 0.5 * (value_loss + cost_loss) / total

    def iteration(carry: _Carry, key):
        params = carry.params
        k_roll, k_perm = jax.random.split(key)
        env_state, batch, stats, last, data = collect(
            modules, params, carry.env_state, carry.last, k_roll, config, on_max_mdp=on_max_mdp,
            cost_discount=cost_discount,
        )  # fmt: skip
        excess = constraint_value(
            "bound" if on_max_mdp else "cost", last, config.cost_limit, config.k
        )
        lagrange = carry.lagrange

        # standardised like the reward's (OmniSafe's default for its Lagrangian PPO): the
        # multiplier then trades advantages of one scale instead of fighting the cost's units
        total = weight_total(data.weights)
        spread = jnp.sqrt(jnp.sum(data.weights * data.cost_advantage**2) / total)
        cost_advantage = data.cost_advantage / (spread + 1e-8)
        flat = jax.tree.map(
            lambda x: x.reshape(batch_size, *x.shape[2:]),
            (
                data.obs,
                batch.action,
                batch.log_prob,
                data.reward_advantage,
                cost_advantage,
                data.cost_td,
                data.reward_target,
                data.cost_target,
                data.weights,
            ),
        )
        nets = (params.policy, params.reward_critic, params.cost_critic)

        def epoch(state, epoch_key):
            perm = jax.random.permutation(epoch_key, batch_size)
            shuffled = jax.tree.map(
                lambda x: x[perm].reshape(config.minibatches, -1, *x.shape[1:]), flat
            )

            def minibatch(state, data):
                nets, opt_state = state
                grads = jax.grad(loss_fn)(nets, lagrange, data)
                updates, opt_state = optimizer.update(grads, opt_state, nets)
                return (optax.apply_updates(nets, updates), opt_state), None

            return jax.lax.scan(minibatch, state, shuffled)[0], None

        (nets, opt_state), _ = jax.lax.scan(
            epoch, (nets, carry.opt_state), jax.random.split(k_perm, config.epochs)
        )
        # the multiplier follows the constraint after the step, from this batch's episodes
        lagrange, lagrange_opt = update_lagrange(lagrange, carry.lagrange_opt, excess)
        obs_stats = next_obs_stats(params, batch, config.normalize_observations)
        new = Params(*nets, obs_stats)
        metrics = {**iteration_metrics(stats, last, excess), "lagrange": lagrange}
        return _Carry(new, opt_state, lagrange, lagrange_opt, env_state, last), metrics

    def init(key: jax.Array) -> _Carry:
        k_env, *k_params = jax.random.split(key, 4)
        env_state = modules.train_env.reset(jax.random.split(k_env, config.num_envs))
        params = init_params(k_params, modules, obs_size)
        nets = (params.policy, params.reward_critic, params.cost_critic)
        lagrange = jnp.float32(config.lagrange_init)
        return _Carry(
            params, optimizer.init(nets), lagrange, lagrange_optimizer.init(lagrange),
            env_state, no_episodes(),
        )  # fmt: skip

    # every setting and the env's wrappers, for checkpoints: both variants' carries have
    # the same shapes, and one's checkpoint was resumed as the other's run
    settings = config_settings(config, env)
    return Trainer(
        init, iteration, lambda carry: carry.params, config.iterations, obs_size, action_size,
        settings,
    )  # fmt: skip
