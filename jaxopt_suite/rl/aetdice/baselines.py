"""The baselines of AETDICE, on the environment's own (Markov) state:

* :func:`train_optidice`: OptiDICE (Lee et al., arXiv 2106.10783) on the linearly
  scalarised reward ``w^T r``, ``w`` the utility's weights: SER and ESR agree for it, so
  it is what a linear method can do for any preference.
* :func:`train_serdice`: a FairDICE-style SER method (Kim et al., arXiv 2506.08062): the
  discounted DICE dual with the utility's conjugate, ``max_d u(E_d[r] / (1 - gamma))``. It
  optimises SER of a Markov policy and has no way to express ESR.
* :func:`train_bc`: preference-conditioned behaviour cloning (D4MORL's BC(P), Zhu et al.,
  ICLR 2023): ``pi(a | s, preference)`` fitted on every episode with its behaviour
  preference, evaluated at the utility's (normalised) weights.

The discounted DICE problem of the first two takes ``gamma`` on every step except a
termination; the last stored step bootstraps from its next state, as the time limit does not
end the task for a Markov policy.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from jaxopt_suite.rl.aetdice.dice import DiceConfig, DiceData, DiceProblem
from jaxopt_suite.rl.aetdice.policy import (
    as_list,
    check_dataset,
    dice_data,
    fit_problems,
    flatten_steps,
    reward_scale,
    step_rows,
    trained_policies,
)
from jaxopt_suite.rl.aetdice.utilities import AET, Linear, linear, ser


def markov_data(dataset, discount: float) -> DiceData:
    """The dataset's transitions on the environment's state, ``gamma_t = gamma (1 -
    terminal)``."""
    observations = jnp.asarray(dataset.observations, jnp.float32)
    next_observations = jnp.asarray(dataset.next_observations, jnp.float32)
    continues = discount * (1.0 - np.asarray(dataset.terminals, np.float32))
    return dice_data(dataset, observations, next_observations, continues)


def discounted_problem(dataset, objective: AET, discount: float) -> DiceProblem:
    """The discounted DICE problem of an SER objective (``h = id``) on the Markov state."""
    if objective.inner is not None:
        raise ValueError(
            f"the discounted DICE baselines optimise SER objectives (h = id), got "
            f"{objective.criterion}; AETDICE handles the others"
        )
    dataset = check_dataset(dataset, objective)
    rewards = step_rows(dataset.rewards, flatten_steps(dataset.mask))
    # g's argument is the discounted return, E_d[r] / (1 - gamma); sigma is taken along g's
    # gradient at the dataset's value of it.
    data_return = jnp.mean(rewards, axis=0) / (1.0 - discount)
    direction = jax.grad(objective.outer.value)(data_return)
    return DiceProblem(
        rewards=rewards,
        outer=objective.outer,
        offset=jnp.zeros(rewards.shape[-1], jnp.float32),
        scale=reward_scale(rewards, direction),
        initial_weight=jnp.asarray(1.0 - discount, jnp.float32),
        step_weight=jnp.asarray(1.0, jnp.float32),
        initial_dual=objective.outer.initial_dual(data_return),
    )


def _check_discount(discount: float) -> float:
    # one real number: float() read "0.9" and True, and failed on an array by itself
    if isinstance(discount, str | bytes | bool | np.bool_) or np.ndim(discount) != 0:
        raise ValueError(f"discount must lie in (0, 1) (a number), got {discount!r}")
    if not 0.0 < float(discount) < 1.0:
        raise ValueError(f"discount must lie in (0, 1), got {discount!r}")
    return float(discount)


def _train_discounted(method, dataset, objectives, key, config, discount):
    config = DiceConfig() if config is None else config
    discount = _check_discount(discount)
    dataset = check_dataset(dataset)
    data = markov_data(dataset, discount)
    problems = [discounted_problem(dataset, objective, discount) for objective in objectives]
    keys = jax.random.split(key, len(problems))
    results = fit_problems(config, data.actions.shape[-1], data, problems, keys)
    return trained_policies(
        method, "observation", config, data, results, dataset.mask.shape[1], objectives
    )


def train_optidice(
    dataset, objectives, key: jax.Array, config: DiceConfig | None = None, *,
    discount: float = 0.99,
):  # fmt: skip
    """Linear OptiDICE at each objective's utility weights (module docstring); one
    Markov policy per objective."""
    objectives, single = as_list(objectives)
    linearised = [ser(linear(np.asarray(o.utility.weights))) for o in objectives]
    policies = _train_discounted("optidice", dataset, linearised, key, config, discount)
    return policies[0] if single else policies


def train_serdice(
    dataset, objectives, key: jax.Array, config: DiceConfig | None = None, *,
    discount: float = 0.99,
):  # fmt: skip
    """The FairDICE-style SER method (module docstring) for the SER form of each objective's
    utility (for an ESR objective, its utility's SER: the Markov method's best proxy)."""
    objectives, single = as_list(objectives)
    as_ser = [o if o.inner is None else ser(o.inner) for o in objectives]
    policies = _train_discounted("serdice", dataset, as_ser, key, config, discount)
    return policies[0] if single else policies


def train_bc(dataset, objectives, key: jax.Array, config: DiceConfig | None = None):
    """Preference-conditioned behaviour cloning (module docstring): one network trained on all
    episodes, conditioned on each episode's behaviour preference (the unweighted fit with
    ``behaviour_conditioned``, whatever ``config`` says), returned once per objective acting
    at the objective's normalised weights."""
    config = dataclasses.replace(
        DiceConfig() if config is None else config, behaviour_conditioned=True
    )
    dataset = check_dataset(dataset)
    objectives, single = as_list(objectives)
    size = dataset.rewards.shape[-1]
    for objective in objectives:
        if objective.utility.weights.shape[0] != size:
            raise ValueError(
                f"the dataset's reward vectors have {size} objectives but the utility has "
                f"{objective.utility.weights.shape[0]} weights"
            )
    data = markov_data(dataset, 0.99)  # cloning reads no discount
    problem = DiceProblem(  # unused by plain cloning beyond its shapes
        rewards=jnp.zeros((data.features.shape[0], 1)), outer=Linear(jnp.ones((1,))),
        offset=jnp.zeros((1,)), scale=jnp.ones(()), initial_weight=jnp.ones(()),
        step_weight=jnp.ones(()), initial_dual=jnp.zeros((0,)),
    )  # fmt: skip
    (result,) = fit_problems(
        config, data.actions.shape[-1], data, [problem], key[None], weighted=False
    )
    policies = trained_policies(
        "bc", "observation", config, data, [result] * len(objectives), dataset.mask.shape[1],
        objectives,
    )  # fmt: skip
    return policies[0] if single else policies
