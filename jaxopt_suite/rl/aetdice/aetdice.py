"""AETDICE: offline optimisation of an AET objective ``g(E[h(G)])`` (seed abstract 19, arXiv
2606.31178) by finite-horizon DICE over augmented states.

**Reconstruction** (the paper's text is not available; ``notes/rl.md`` section 5; this module
and :mod:`.utilities` hold all of it):

1. The state is augmented with the accumulated vector return and the time,
   ``s^_t = (s_t, x_t, t / T)``, ``x_t = sum_{tau < t} r_tau``, as
   :class:`envs.AccumulatedReturnWrapper` builds it. On it an ESR objective is Markov, and
   non-Markov policies of the original state (which nonlinear ESR needs) are Markov ones.
   When ``h`` is the identity (SER) the return is left out: nothing depends on it, and the
   finite-horizon problem needs only ``(s_t, t / T)``.
2. The nonlinearity is absorbed per step by the telescoped reward
   ``r~_t = h(x_t + r_t) - h(x_t)``, whose episode sum is ``h(G) - h(0)``, so
   ``E[h(G)] = h(0) + sum_t E_{d_t}[r~]`` is linear in the finite-horizon occupancies
   ``d_t`` of the augmented MDP (:func:`.utilities.telescoped_rewards`).
3. ``g`` is handled by its concave conjugate, ``g(y) = min_mu mu^T y - g_*(mu)``, as FairDICE
   handles the Nash welfare; ``mu`` is trained with ``nu`` (for ESR ``g`` is the identity and
   ``mu = 1``).
4. The density ratios are estimated by the finite-horizon dual of :mod:`.dice` (``c_0 = 1/T``,
   ``nu(s^_T) = 0`` and ``nu = 0`` after a termination) with an f-divergence regulariser
   (chi^2, soft-chi^2 or KL), and the policy of the augmented state is extracted by weighted
   behaviour cloning.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxopt_suite.rl.aetdice.dice import DiceConfig, DiceData, DiceProblem, feature_statistics
from jaxopt_suite.rl.aetdice.policy import (
    TrainedPolicy,
    check_dataset,
    fit_problems,
    flatten_steps,
    reward_scale,
)
from jaxopt_suite.rl.aetdice.utilities import AET, telescoped_rewards


def augmented_data(dataset, with_return: bool = True) -> DiceData:
    """The dataset's transitions on augmented states (``x`` unscaled: the features are
    standardised), with ``gamma_t = 0`` at the horizon and after a termination. Without
    ``with_return`` the state is ``(s, t / T)``: enough when ``h`` is the identity (SER),
    whose telescoped rewards do not depend on ``x``."""
    from envs import augment_observations

    episodes, horizon = dataset.mask.shape
    features, next_features = augment_observations(
        dataset.observations, dataset.next_observations, dataset.rewards, horizon
    )
    if not with_return:
        size = dataset.rewards.shape[-1]
        features, next_features = (
            jnp.concatenate([f[..., : -size - 1], f[..., -1:]], axis=-1)
            for f in (features, next_features)
        )
    last = np.arange(horizon) == horizon - 1
    continues = (1.0 - np.asarray(dataset.terminals)) * (1.0 - last[None, :])
    steps = flatten_steps(dataset.mask)

    def flat(array):
        array = jnp.asarray(array, jnp.float32)
        return array.reshape((episodes * horizon, *array.shape[2:]))[steps]

    features_flat = flat(features)
    mean, std = feature_statistics(features_flat)
    return DiceData(
        features=features_flat,
        next_features=flat(next_features),
        actions=flat(dataset.actions),
        continues=flat(continues),
        initial_features=jnp.asarray(features[:, 0], jnp.float32),
        feature_mean=mean,
        feature_std=std,
    )


def aetdice_problem(dataset, objective: AET) -> DiceProblem:
    """The finite-horizon DICE problem of ``objective`` on ``dataset`` (module docstring).

    ``sigma`` is the spread of ``mu_bar^T r~`` over the steps, with ``mu_bar`` the gradient of
    ``g`` at the dataset's mean ``h(G)``: the first-order size of a step's contribution.
    """
    check_dataset(dataset, objective)
    episodes, horizon = dataset.mask.shape
    rewards = jnp.asarray(dataset.rewards, jnp.float32)
    mask = jnp.asarray(dataset.mask, jnp.float32)
    transformed = telescoped_rewards(objective, rewards, mask)  # (N, T, k)
    offset = objective.transform(jnp.zeros(rewards.shape[-1]))
    mean_transformed = offset + jnp.mean(jnp.sum(transformed, axis=1), axis=0)
    direction = jax.grad(objective.outer.value)(mean_transformed)
    steps = flatten_steps(dataset.mask)
    flat = transformed.reshape(episodes * horizon, -1)[steps]
    return DiceProblem(
        rewards=flat,
        outer=objective.outer,
        offset=offset,
        scale=reward_scale(flat, direction),
        initial_weight=jnp.asarray(1.0 / horizon, jnp.float32),
        step_weight=jnp.asarray(steps.size / (episodes * horizon), jnp.float32),
        initial_dual=objective.outer.initial_dual(mean_transformed),
    )


def train_aetdice(
    dataset, objectives: AET | list[AET], key: jax.Array, config: DiceConfig | None = None
) -> TrainedPolicy | list[TrainedPolicy]:
    """AETDICE on ``dataset`` (an :class:`envs.offline.OfflineDataset`) for one objective, or
    for several of one kind (one utility class, e.g. at several preferences) in one ``vmap``;
    a policy of the augmented state for each (``config``: :class:`.dice.DiceConfig`). SER
    objectives (``h = id``) drop the accumulated return from the state and keep the time."""
    config = DiceConfig() if config is None else config
    single = isinstance(objectives, AET)
    objectives = [objectives] if single else list(objectives)
    check_dataset(dataset)
    with_return = any(objective.inner is not None for objective in objectives)
    data = augmented_data(dataset, with_return)
    problems = [aetdice_problem(dataset, objective) for objective in objectives]
    action_size = data.actions.shape[-1]
    keys = jax.random.split(key, len(problems))
    results = fit_problems(config, action_size, data, problems, keys)
    policies = [
        TrainedPolicy(
            method="aetdice",
            features="augmented" if with_return else "timed",
            config=config,
            action_size=action_size,
            params=result.params.policy,
            feature_mean=data.feature_mean,
            feature_std=data.feature_std,
            horizon=dataset.mask.shape[1],
            metrics=result.metrics,
        )
        for result in results
    ]
    return policies[0] if single else policies
