"""AETDICE: offline optimisation of an AET objective ``g(E[h(G)])`` (seed abstract 19, arXiv
2606.31178) by finite-horizon DICE over augmented states.

**Reconstruction** (the paper's text is not available; ``notes/rl.md`` section 5). All of it
is in two places: this module (the augmented, finite-horizon problem: items 1 and 4) and
:mod:`.utilities` (the AET objective ``g(E[h(G)])`` and the per-step rewards that absorb
``h``: items 2 and 3); :mod:`.dice` holds the dual they share with the baselines, whose own
departures from OptiDICE and FairDICE are marked "ours" there:

1. The state is augmented with the accumulated vector return and the time,
   ``s^_t = (s_t, x_t, t / T)``, ``x_t = sum_{tau < t} r_tau``, as
   :class:`envs.AccumulatedReturnWrapper` builds it. On it an ESR objective is Markov, and
   non-Markov policies of the original state (which nonlinear ESR needs) are Markov ones.
   When ``h`` is the identity (SER) the return is left out: nothing depends on it, and the
   finite-horizon problem needs only ``(s_t, t / T)``.
2. The nonlinearity is absorbed per step by telescoped rewards whose episode sum is
   ``h(G)`` less a constant ``h_0``, so ``E[h(G)] = h_0 + sum_t E_{d_t}[r~]`` is linear in
   the finite-horizon occupancies ``d_t`` of the augmented MDP. ``telescoping="accumulated"``
   anchors them at the return so far, ``r~_t = h(x_t + r_t) - h(x_t)``, ``h_0 = h(0)``
   (:func:`.utilities.telescoped_rewards`); ``"projected"`` (the default: ours) at the return
   the episode is heading for, ``x_t`` plus the data's mean return from ``t`` on
   (:func:`.utilities.projected_rewards`, which says why). The two differ by a potential of
   the augmented state: the same optimum, but the accumulated anchor front-loads a concave
   ``h``'s increments. With ``h`` the identity (SER) both are ``r_t`` itself.
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

from jaxopt_suite.rl.aetdice.dice import DiceConfig, DiceData, DiceProblem
from jaxopt_suite.rl.aetdice.policy import (
    TrainedPolicy,
    as_list,
    check_dataset,
    dice_data,
    fit_problems,
    flatten_steps,
    reward_scale,
    step_rows,
    trained_policies,
)
from jaxopt_suite.rl.aetdice.utilities import AET, projected_rewards, telescoped_rewards

TELESCOPING = ("projected", "accumulated")


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
    return dice_data(dataset, features, next_features, continues)


def aetdice_problem(dataset, objective: AET, telescoping: str = "projected") -> DiceProblem:
    """The finite-horizon DICE problem of ``objective`` on ``dataset`` (module docstring; its
    item 2 for ``telescoping``).

    ``sigma`` is the spread of ``mu_bar^T r~`` over the steps without the objectives'
    covariance (:func:`.policy.reward_scale`), with ``mu_bar`` the gradient of ``g`` at the
    dataset's mean ``h(G)``: the first-order size of a step's contribution.
    """
    check_telescoping(telescoping)
    dataset = check_dataset(dataset, objective)
    episodes, horizon = dataset.mask.shape
    rewards = jnp.asarray(dataset.rewards, jnp.float32)
    mask = jnp.asarray(dataset.mask, jnp.float32)
    if telescoping == "projected" and objective.inner is not None:
        transformed, offset = projected_rewards(objective, rewards, mask)  # (N, T, k), (k,)
    else:  # with h = id the anchor only shifts r_t by the data's mean at t, which nu absorbs
        transformed = telescoped_rewards(objective, rewards, mask)
        offset = objective.transform(jnp.zeros(rewards.shape[-1]))
    mean_transformed = offset + jnp.mean(jnp.sum(transformed, axis=1), axis=0)
    direction = jax.grad(objective.outer.value)(mean_transformed)
    steps = flatten_steps(dataset.mask)
    flat = step_rows(transformed, steps)
    return DiceProblem(
        rewards=flat,
        outer=objective.outer,
        offset=offset,
        scale=reward_scale(flat, direction),
        initial_weight=jnp.asarray(1.0 / horizon, jnp.float32),
        step_weight=jnp.asarray(steps.size / (episodes * horizon), jnp.float32),
        initial_dual=objective.outer.initial_dual(mean_transformed),
    )


def check_telescoping(telescoping) -> None:
    if telescoping not in TELESCOPING:
        raise ValueError(f"telescoping must be one of {TELESCOPING}, got {telescoping!r}")


def train_aetdice(
    dataset, objectives: AET | list[AET], key: jax.Array, config: DiceConfig | None = None,
    *, markov_policy: bool = False, telescoping: str = "projected",
) -> TrainedPolicy | list[TrainedPolicy]:  # fmt: skip
    """AETDICE on ``dataset`` (an :class:`envs.offline.OfflineDataset`) for one objective, or
    for several of one kind (one utility class, e.g. at several preferences) in one ``vmap``;
    a policy of the augmented state for each (``config``: :class:`.dice.DiceConfig`). SER
    objectives (``h = id``) drop the accumulated return from the state and keep the time.

    With ``markov_policy`` the ratios are still those of the augmented state, but the
    weighted cloning fits a policy of the environment's observation alone (features
    ``"observation"``), as the baselines' is: the projection of the optimised occupancy onto
    policies that ignore the return so far and the time. Under ESR that gives up what the
    augmented state is for; it is there to measure what the extra inputs cost the cloning.

    ``telescoping`` (``"projected"`` or ``"accumulated"``) anchors the transformed rewards
    (module docstring, item 2); it changes nothing under SER."""
    check_telescoping(telescoping)
    config = DiceConfig() if config is None else config
    objectives, single = as_list(objectives)
    dataset = check_dataset(dataset)
    with_return = any(objective.inner is not None for objective in objectives)
    data = augmented_data(dataset, with_return)
    if markov_policy:
        observations = step_rows(dataset.observations, flatten_steps(dataset.mask))
        data = data._replace(policy_features=observations)
    problems = [aetdice_problem(dataset, objective, telescoping) for objective in objectives]
    keys = jax.random.split(key, len(problems))
    results = fit_problems(config, data.actions.shape[-1], data, problems, keys)
    features = "observation" if markov_policy else "augmented" if with_return else "timed"
    policies = trained_policies(
        "aetdice", features, config, data, results, dataset.mask.shape[1], objectives
    )
    return policies[0] if single else policies
