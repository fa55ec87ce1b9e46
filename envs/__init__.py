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
from envs.max_cost import MaxCostWrapper, wrap_for_training
from envs.metrics import episode_statistics
from envs.point_goal import PointGoal
from envs.registry import DEFAULT_BACKENDS, make, names

__all__ = [
    "DEFAULT_BACKENDS",
    "HAZARD_KINDS",
    "VELOCITY_KINDS",
    "VELOCITY_THRESHOLDS",
    "AntGoal",
    "CostWrapper",
    "HazardCostWrapper",
    "LimitCostWrapper",
    "MaxCostWrapper",
    "PointGoal",
    "VelocityCostWrapper",
    "episode_statistics",
    "hazard_cost",
    "limit_cost",
    "make",
    "names",
    "velocity_cost",
    "wrap_for_training",
]
