"""Brax environments with state-wise costs, for safe reinforcement learning.

- Cost wrappers (:class:`CostWrapper` and its velocity, hazard and limit subclasses) write a
  per-step cost to ``state.metrics['cost']`` and ``state.info['cost']``.
- :class:`MaxCostWrapper` adds SCPO/ASCPO's maximum-MDP state (the running maximum cost in the
  observation) and its cost increments; :func:`wrap_for_training` puts Brax's training
  wrappers around the lot.
- :class:`PointGoal` is a tiny pure-JAX goal-reaching task for fast tests; :class:`AntGoal`
  is goal reaching for Brax's ant.
- :func:`make` / :func:`names` is the registry; :func:`episode_statistics` turns finished
  episodes into ``EpRet``, ``EpCost``, ``EpMaxCost``, ``CostRate`` and the violation rate.

For multi-objective RL (vector rewards in ``state.info['reward_vector']``):

- :class:`VectorRewardWrapper`, :class:`ScalarizedRewardWrapper`,
  :class:`PreferenceConditionedWrapper`, :class:`RewardScaleWrapper` and
  :class:`AccumulatedReturnWrapper` (the AET
  augmented state, with its offline twin :func:`augment_observations`);
- :class:`BalanceTask` and the Brax tasks of :func:`make_multi_objective` /
  :func:`multi_objective_names`;
- D4MORL-like offline data: :class:`OfflineDataset`, :func:`collect`,
  :func:`collect_d4morl`, :func:`preference_grid`, :func:`save`, :func:`load`,
  :func:`episode_returns`, :func:`scale_rewards` (with :func:`reward_scale` and
  :func:`behaviour_label`).

This package depends on Brax and JAX only, never on ``jaxopt_suite``.
"""

from envs.ant_goal import AntGoal
from envs.costs import (
    HAZARD_KINDS,
    VELOCITY_KINDS,
    VELOCITY_THRESHOLDS,
    CostWrapper,
    HazardCostWrapper,
    LimitCostWrapper,
    VelocityCostWrapper,
    hazard_cost,
    limit_cost,
    velocity_cost,
)
from envs.max_cost import MaxCostWrapper, wrap_for_training, wrapper_chain
from envs.metrics import episode_statistics
from envs.mo_tasks import BalanceTask, make_multi_objective, multi_objective_names
from envs.multi_objective import (
    PREFERENCE_SAMPLING,
    AccumulatedReturnWrapper,
    PreferenceConditionedWrapper,
    RewardScaleWrapper,
    ScalarizedRewardWrapper,
    VectorRewardWrapper,
    augment_observations,
    energy_efficiency,
)
from envs.offline import (
    OfflineDataset,
    behaviour_label,
    collect,
    collect_d4morl,
    episode_returns,
    load,
    preference_grid,
    reward_scale,
    save,
    scale_rewards,
    validate_dataset,
)
from envs.point_goal import PointGoal
from envs.registry import DEFAULT_BACKENDS, make, names

__all__ = [
    "DEFAULT_BACKENDS",
    "HAZARD_KINDS",
    "PREFERENCE_SAMPLING",
    "VELOCITY_KINDS",
    "VELOCITY_THRESHOLDS",
    "AccumulatedReturnWrapper",
    "AntGoal",
    "BalanceTask",
    "CostWrapper",
    "HazardCostWrapper",
    "LimitCostWrapper",
    "MaxCostWrapper",
    "OfflineDataset",
    "PointGoal",
    "PreferenceConditionedWrapper",
    "RewardScaleWrapper",
    "ScalarizedRewardWrapper",
    "VectorRewardWrapper",
    "VelocityCostWrapper",
    "augment_observations",
    "behaviour_label",
    "collect",
    "collect_d4morl",
    "energy_efficiency",
    "episode_returns",
    "episode_statistics",
    "hazard_cost",
    "limit_cost",
    "load",
    "make",
    "make_multi_objective",
    "multi_objective_names",
    "names",
    "preference_grid",
    "reward_scale",
    "save",
    "scale_rewards",
    "validate_dataset",
    "velocity_cost",
    "wrap_for_training",
    "wrapper_chain",
]
