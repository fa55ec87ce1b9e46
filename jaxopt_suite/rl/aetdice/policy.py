"""Fitting a DICE problem into a policy, and evaluating policies by online rollouts.

:class:`TrainedPolicy` is what every method of this package returns: the policy network's
parameters with the feature normalisation it was trained with and how its input is built
from the environment's observation (``features``):

* ``"observation"``: the observation itself (the Markov baselines, and AETDICE with
  ``markov_policy``);
* ``"augmented"``: the observation with the accumulated return and the time appended, as
  :class:`envs.AccumulatedReturnWrapper` builds it (AETDICE);
* ``"timed"``: the observation with the time appended (AETDICE for SER).

A policy fitted with ``DiceConfig.behaviour_conditioned`` (every BC(P) policy, and DICE
policies that ask for it, :mod:`.dice`) also takes a behaviour preference and acts at its
``label``: its objective's normalised utility weights.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxopt_suite._checks import check_integer
from jaxopt_suite.rl.aetdice.dice import (
    DiceConfig,
    DiceData,
    DiceProblem,
    DiceResult,
    feature_statistics,
    make_fit,
    policy_action,
    policy_statistics,
)
from jaxopt_suite.rl.aetdice.utilities import AET

FEATURES = ("observation", "augmented", "timed")


@dataclasses.dataclass(frozen=True, eq=False)
class TrainedPolicy:
    """A policy learned from a dataset; ``act(features)`` is its action (the mixture's mode,
    or a sample with a key).

    Attributes:
      method: the method that trained it.
      features: how its input is built (module docstring).
      config: the training settings (the network sizes are read from it).
      action_size: the environment's action size.
      params: the policy network's parameters.
      feature_mean, feature_std: the policy input's normalisation, ``(F,)``, or ``(F + m,)``
        with the label's (:func:`.dice.policy_statistics`).
      horizon: the episode length the time feature is normalised by.
      metrics: the training metrics, per iteration.
      label: ``(m,)``, the behaviour preference a behaviour-conditioned policy acts at.
    """

    method: str
    features: str
    config: DiceConfig
    action_size: int
    params: Any
    feature_mean: jax.Array
    feature_std: jax.Array
    horizon: int
    metrics: dict | None = None
    label: jax.Array | None = None

    def __post_init__(self):
        if self.features not in FEATURES:
            raise ValueError(f"features must be one of {FEATURES}, got {self.features!r}")
        if (self.label is not None) != self.config.behaviour_conditioned:
            raise ValueError("a label is given exactly for a behaviour-conditioned policy")

    def act(self, features: jax.Array, key: jax.Array | None = None) -> jax.Array:
        """The action at ``features``: the mean, or a sample when ``key`` is given."""
        return policy_action(
            self.config, self.action_size, self.params,
            (self.feature_mean, self.feature_std), features, key, self.label,
        )  # fmt: skip


def check_dataset(dataset, objective: AET | None = None):
    """``dataset`` as :func:`envs.validate_dataset` returns it (float32 numpy arrays; train on
    this copy, which is the one checked), or a ``ValueError`` unless it passes that check (an
    episode-shaped :class:`envs.OfflineDataset`, consistent and finite), its reward vectors
    match ``objective``'s number of objectives, and the objective is defined on its
    returns."""
    from envs import OfflineDataset, validate_dataset

    if not isinstance(dataset, OfflineDataset):
        raise ValueError(
            f"dataset must be an envs.OfflineDataset (envs.collect or envs.load), got "
            f"{type(dataset).__name__}"
        )
    dataset = validate_dataset(dataset)
    mask = np.asarray(dataset.mask)
    if mask.shape[0] == 0:
        raise ValueError("dataset holds no episodes (dataset.mask has shape (0, T))")
    empty = np.flatnonzero(mask[:, 0] == 0)
    if empty.size:  # its padding would enter the dual as a first state, and N
        raise ValueError(
            f"dataset.mask is 0 from the first step of episode {int(empty[0])} ({empty.size} "
            "episode(s) without a step): drop them"
        )
    if objective is None:
        return dataset
    size = np.shape(dataset.rewards)[-1]
    expected = objective.utility.weights.shape[0]
    if size != expected:
        raise ValueError(
            f"the dataset's reward vectors have {size} objectives but the {objective.criterion} "
            f"objective's utility has {expected} weights"
        )
    rewards = np.asarray(dataset.rewards, np.float64) * np.asarray(dataset.mask)[..., None]
    partial = np.concatenate([np.zeros_like(rewards[:, :1]), np.cumsum(rewards, axis=1)], 1)
    objective.check_returns(partial, partial[:, -1])
    return dataset


def flatten_steps(mask: np.ndarray) -> np.ndarray:
    """The flat indices ``n * T + t`` of the steps that happened (``mask == 1``)."""
    return np.flatnonzero(np.asarray(mask).reshape(-1) > 0.5)


def step_rows(array, steps: np.ndarray) -> jax.Array:
    """The rows of an episode-shaped ``(N, T, ...)`` array at the flat ``steps``, float32."""
    array = jnp.asarray(array, jnp.float32)
    return array.reshape((-1, *array.shape[2:]))[steps]


def dice_data(dataset, features, next_features, continues) -> DiceData:
    """The :class:`.dice.DiceData` of the steps that happened, from episode-shaped features
    ``(N, T, F)`` at ``s`` and ``s'`` and ``gamma_t`` ``(N, T)``; the features' statistics
    are taken over those steps."""
    steps = flatten_steps(dataset.mask)
    flat = step_rows(features, steps)
    mean, std = feature_statistics(flat)
    episodes, horizon = dataset.mask.shape
    preferences = normalised_preferences(dataset)
    labels = np.broadcast_to(preferences[:, None, :], (episodes, horizon, preferences.shape[-1]))
    return DiceData(
        features=flat,
        next_features=step_rows(next_features, steps),
        actions=step_rows(dataset.actions, steps),
        continues=step_rows(continues, steps),
        initial_features=jnp.asarray(features[:, 0], jnp.float32),
        feature_mean=mean,
        feature_std=std,
        labels=step_rows(labels, steps),
    )


def normalised_preferences(dataset) -> np.ndarray:
    """The episodes' behaviour preferences ``(N, m)`` over their sums (rows summing to 0 stay
    0), on the scale of the normalised utility weights a conditioned policy acts at."""
    preferences = np.asarray(dataset.preferences, np.float32)
    total = preferences.sum(axis=-1, keepdims=True)
    return np.where(total > 0, preferences / np.where(total > 0, total, 1.0), preferences)


def as_list(objectives) -> tuple[list, bool]:
    """``(objectives as a list, whether one objective was given)``; a ``TypeError`` for
    anything but :class:`.utilities.AET` objectives, a ``ValueError`` for none."""
    single = isinstance(objectives, AET)
    if not single and (isinstance(objectives, tuple) and hasattr(objectives, "_fields")):
        # a bare utility is a NamedTuple too: list() took its fields for objectives
        raise TypeError(
            f"objectives must be AET objectives, got {type(objectives).__name__}: wrap a "
            "utility with ser(...) or esr(...)"
        )
    listed = [objectives] if single else list(objectives)
    if not listed:
        raise ValueError("objectives is empty: give an AET objective or a list of them")
    for objective in listed:
        if not isinstance(objective, AET):
            raise TypeError(
                f"objectives must be AET objectives, got {type(objective).__name__}: wrap a "
                "utility with ser(...) or esr(...)"
            )
    return listed, single


def trained_policies(
    method: str, features: str, config: DiceConfig, data: DiceData, results, horizon: int,
    objectives: Sequence[AET],
) -> list[TrainedPolicy]:  # fmt: skip
    """One :class:`TrainedPolicy` per training result and its objective; a policy fitted
    behaviour-conditioned acts at the objective's utility weights over their sum."""
    if config.behaviour_conditioned:
        labels = [o.utility.weights / jnp.sum(o.utility.weights) for o in objectives]
    else:
        labels = [None] * len(objectives)
    mean, std = policy_statistics(data, config.behaviour_conditioned)
    return [
        TrainedPolicy(
            method=method,
            features=features,
            config=config,
            action_size=data.actions.shape[-1],
            params=result.params.policy,
            feature_mean=mean,
            feature_std=std,
            horizon=horizon,
            metrics=result.metrics,
            label=label,
        )  # fmt: skip
        for result, label in zip(results, labels, strict=True)
    ]


def reward_scale(rewards: jax.Array, direction: jax.Array) -> jax.Array:
    """``sigma = sqrt(sum_i direction_i^2 Var(r_i))`` over the steps (1 if it is 0): the
    spread ``direction^T r`` would have without the objectives' covariance.

    The covariance is left out on purpose: where the objectives trade off (negatively
    correlated rewards) and ``direction`` balances them, as a kinked utility's supergradient
    does at its optimum, ``Std(direction^T r)`` is near 0, and dividing by it made the reward
    ``mu^T r / sigma`` so steep in ``mu`` that the ratios jumped to one objective (threshold
    utility on the balance task: the policy chose one side at every step)."""
    spread = jnp.sqrt(jnp.sum(direction**2 * jnp.var(rewards, axis=0)))
    return jnp.where(spread > 1e-8, spread, 1.0)


@functools.lru_cache(maxsize=32)
def _fit(config: DiceConfig, action_size: int, weighted: bool, batched: bool):
    fit = make_fit(config, action_size, weighted=weighted)
    if batched:
        fit = jax.vmap(fit, in_axes=(None, 0, 0))
    return jax.jit(fit)


MIN_PADDED_ROWS = 1024


def padded_rows(rows: int) -> int:
    """The row count ``fit_problems`` pads ``rows`` step rows to: the next power of two, at
    least ``MIN_PADDED_ROWS``."""
    return max(MIN_PADDED_ROWS, 1 << max(int(rows) - 1, 0).bit_length())


def pad_steps(
    data: DiceData, problems: Sequence[DiceProblem], rows: int
) -> tuple[DiceData, list[DiceProblem]]:
    """``data`` and ``problems`` with their step rows padded with zeros to ``rows`` and
    ``data.count`` set to the number of real ones (:class:`.dice.DiceData`)."""
    if data.count is not None:
        raise ValueError("the data's step rows are padded already (DiceData.count is set)")
    count = data.features.shape[0]
    if rows < count:
        raise ValueError(f"rows must be >= the data's {count} step rows, got {rows}")

    def pad(array):
        return jnp.pad(array, [(0, rows - count)] + [(0, 0)] * (array.ndim - 1))

    steps = ("features", "next_features", "actions", "continues", "labels", "policy_features")
    padded = data._replace(
        **{f: pad(getattr(data, f)) for f in steps if getattr(data, f) is not None},
        count=jnp.asarray(count, jnp.int32),
    )
    return padded, [problem._replace(rewards=pad(problem.rewards)) for problem in problems]


def fit_problems(
    config: DiceConfig, action_size: int, data: DiceData, problems: Sequence[DiceProblem],
    keys: jax.Array, *, weighted: bool = True,
) -> list[DiceResult]:  # fmt: skip
    """Runs the training scan on each problem (with its key), all in one ``vmap`` when there
    are several of one kind (e.g. one utility at several preferences).

    The step rows are padded to :func:`padded_rows` first (the training samples only the real
    ones and its statistics leave the padding out), so datasets whose step counts differ,
    as those of episodes that end early do, share one compiled scan."""
    data, problems = pad_steps(data, problems, padded_rows(data.features.shape[0]))
    if len(problems) == 1:
        return [_fit(config, action_size, weighted, False)(data, problems[0], keys[0])]
    kinds = {type(problem.outer).__name__ for problem in problems}
    if len(kinds) > 1:  # one vmap over the problems stacks their utilities' fields
        raise ValueError(
            f"objectives trained in one call must share one utility class, got "
            f"{sorted(kinds)}: train each class in a call of its own"
        )
    sizes = {problem.rewards.shape[-1] for problem in problems}
    if len(sizes) > 1:  # SER's m transformed rewards against ESR's one (both linear g)
        raise ValueError(
            f"objectives trained in one call must transform the rewards alike, got "
            f"{sorted(sizes)} transformed objectives: train SER and ESR objectives in "
            "separate calls"
        )
    stacked = jax.tree.map(lambda *leaves: jnp.stack(leaves), *problems)
    results = _fit(config, action_size, weighted, True)(data, stacked, keys)
    return [jax.tree.map(lambda leaf, i=i: leaf[i], results) for i in range(len(problems))]


@functools.partial(
    jax.jit, static_argnames=("env", "policy_static", "episodes", "horizon", "deterministic")
)
def _rollout(
    env, policy_static, params, mean, std, label, key, *, episodes, horizon, deterministic,
):  # fmt: skip
    features, config, action_size = policy_static
    k_reset, k_steps = jax.random.split(key)
    state = jax.vmap(env.reset)(jax.random.split(k_reset, episodes))
    size = state.info["reward_vector"].shape[-1]
    # checked while tracing: the policy's input (and the label's share of it) against the
    # env's observation as the policy sees it
    width = state.obs.shape[-1] - (size if features == "timed" else 0)
    trained = mean.shape[-1] - (0 if label is None else label.shape[-1])
    if width != trained:
        raise ValueError(
            f"env gives the policy {width} features ({features} features of its observation), "
            f"but the policy was trained on {trained}: evaluate it in the environment its "
            "dataset came from"
        )
    if action_size != env.action_size:
        raise ValueError(
            f"env takes actions of size {env.action_size}, the policy gives {action_size}"
        )

    def step(carry, key):
        state, alive, total = carry
        obs = state.obs
        if features == "timed":  # the wrapper's (s, x, t) without x
            obs = jnp.concatenate([obs[:, : -size - 1], obs[:, -1:]], -1)
        key = None if deterministic else key
        action = policy_action(config, action_size, params, (mean, std), obs, key, label)
        state = jax.vmap(env.step)(state, action)
        # Steps after an episode's end are not defined (they may even be NaN): masked out.
        reward = jnp.where(alive[:, None] > 0, state.info["reward_vector"], 0.0)
        return (state, alive * (1.0 - state.done), total + reward), None

    carry = (state, jnp.ones((episodes,)), jnp.zeros((episodes, size)))
    (_, _, total), _ = jax.lax.scan(step, carry, jax.random.split(k_steps, horizon))
    return total


@functools.lru_cache(maxsize=32)
def _augmented(env, horizon: int):
    # One wrapper per (env, horizon), so the jitted rollout sees the same static env.
    from envs import AccumulatedReturnWrapper

    return AccumulatedReturnWrapper(env, horizon)


def rollout_returns(
    env, policy: TrainedPolicy, key: jax.Array, *, episodes: int, horizon: int | None = None,
    deterministic: bool = False,
) -> jax.Array:  # fmt: skip
    """Vector returns ``(episodes, m)`` of ``policy`` in ``env`` (a multi-objective environment
    of :mod:`envs`, unbatched) over ``horizon`` steps (the policy's own by default) or until
    the episode ends. Actions are sampled unless ``deterministic``: under SER a stationary
    policy may need to randomise to reach the optimum (a deterministic one picks a vertex).
    A behaviour-conditioned policy acts at its ``label``."""
    from envs.offline import _check_unbatched

    if not isinstance(policy, TrainedPolicy):
        raise TypeError(
            f"policy must be a TrainedPolicy, got {type(policy).__name__} (training on a list "
            "of objectives returns a list of policies: pass one)"
        )
    _check_unbatched(env)
    episodes = check_integer("episodes", episodes, 1)
    horizon = policy.horizon if horizon is None else check_integer("horizon", horizon, 1)
    if policy.features in ("augmented", "timed") and horizon > policy.horizon:
        raise ValueError(
            f"horizon={horizon} exceeds the policy's horizon {policy.horizon}: its time feature "
            f"t / {policy.horizon} was trained on t < {policy.horizon} only"
        )
    if policy.features in ("augmented", "timed"):
        env = _augmented(env, policy.horizon)
    static = (policy.features, policy.config, policy.action_size)
    return _rollout(
        env, static, policy.params, policy.feature_mean, policy.feature_std, policy.label, key,
        episodes=episodes, horizon=horizon, deterministic=deterministic,
    )  # fmt: skip


def evaluate(env, policy: TrainedPolicy, objective, key: jax.Array, *, episodes: int):
    """The policy's achieved value of ``objective`` (an :class:`.utilities.AET`) by online
    rollouts, acting by sampling or deterministically, whichever scores higher on a first batch
    of ``episodes`` rollouts; the value is then measured on a fresh batch, so the choice does
    not bias it. Sampling suits SER (which may need a randomised stationary policy),
    the mixture's mode suits ESR on augmented states (deterministic there is optimal).
    A tie goes to the mode: randomising is kept only where the first batch shows that it
    pays. A nearly deterministic sampled policy often scores exactly what its mode does on the
    first batch and then, on the fresh one, loses what its rare off-mode actions cost (the
    balance task's linear utility: ``1e-4`` at one preference).

    Returns:
      ``(value, returns, deterministic)``: the value, the fresh batch's vector returns
      ``(episodes, m)`` and the chosen way of acting.
    """
    from jaxopt_suite.rl.aetdice.utilities import aet_value

    check_integer("episodes", episodes, 1)
    if not isinstance(objective, AET):  # before the rollouts, not after them
        raise TypeError(
            f"objective must be an AET objective, got {type(objective).__name__}: wrap a "
            "utility with ser(...) or esr(...)"
        )
    k_select, k_measure = jax.random.split(key)
    scores = {
        mode: float(
            aet_value(
                objective,
                rollout_returns(env, policy, k_select, episodes=episodes, deterministic=mode),
            )
        )  # fmt: skip
        for mode in (False, True)
    }
    deterministic = scores[True] >= scores[False]
    returns = rollout_returns(
        env, policy, k_measure, episodes=episodes, deterministic=deterministic
    )
    return float(aet_value(objective, returns)), returns, deterministic
