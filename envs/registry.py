"""Named safe-RL tasks: :func:`make` builds the cost-wrapped (by default also max-cost-wrapped)
environment, :func:`names` lists them.

============================  ======================================================  =========
name                          task and cost                                           obs
============================  ======================================================  =========
``ant_velocity``              Brax ant, planar speed limit 2.6222                     27 + 1
``halfcheetah_velocity``      Brax halfcheetah, ``|vx|`` limit 3.2096                 17 + 1
``hopper_velocity``           Brax hopper, ``|vx|`` limit 0.7402                      11 + 1
``walker2d_velocity``         Brax walker2d, ``|vx|`` limit 2.3415                    17 + 1
``ant_goal_hazards``          Brax ant reaching (4, 0) past 3 hazards of radius 0.5   29 + 1
``point_goal_hazards``        pure-JAX point mass reaching (2, 0) past 3 hazards       6 + 1
                              of radius 0.3
============================  ======================================================  =========

The velocity tasks mirror Safety-Gymnasium's ``Safety{Ant,HalfCheetah,Hopper,Walker2d}
Velocity-v1`` (thresholds from its v1 sources); the goal tasks mirror its ``Goal`` navigation
tasks with hazards (GUARD's ``Goal_*_Hazards``), with a fixed layout. The velocity costs
default to ``kind="indicator"`` (Safety-Gymnasium's), the hazard costs to ``kind="dense"``
(the setting of ASCPO's GUARD experiments).

Each Brax body defaults to the backend with the highest scanned throughput measured on a
2-core CPU (jax 0.10.1, 64 environments, 100 steps of random actions under
:func:`envs.wrap_for_training`, env steps/s):

===============  ==========  ==========
body             ``spring``  ``mjx``
===============  ==========  ==========
ant              14.5k       **21.0k**
halfcheetah      **8.7k**    3.9k
hopper           **91.8k**   11.6k
walker2d         **56.3k**   8.0k
===============  ==========  ==========

Brax's own default, ``"generalized"``, was slower still (hopper: 9.1k at 16 environments
against 64.2k for ``"spring"``); every backend compiled in 8-13 s. ``"spring"`` approximates
the contact dynamics more coarsely than MuJoCo (``"mjx"``), and the velocity thresholds were
set on MuJoCo, so pass ``backend="mjx"`` where fidelity to Safety-Gymnasium matters more than
speed.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from envs import ant_goal, point_goal
from envs._brax import Env, load_body
from envs._checks import check_kind, check_nonnegative, check_point, check_points, check_positive
from envs.ant_goal import AntGoal
from envs.costs import (
    HAZARD_KINDS,
    VELOCITY_KINDS,
    VELOCITY_THRESHOLDS,
    HazardCostWrapper,
    VelocityCostWrapper,
)
from envs.max_cost import MaxCostWrapper
from envs.point_goal import PointGoal

DEFAULT_BACKENDS = {"ant": "mjx", "halfcheetah": "spring", "hopper": "spring", "walker2d": "spring"}
BACKENDS = ("generalized", "positional", "spring", "mjx")


def _velocity_task(body: str) -> Callable[..., Env]:
    def build(
        *,
        kind: str = "indicator",
        threshold: float = VELOCITY_THRESHOLDS[body],
        backend: str = DEFAULT_BACKENDS[body],
        **body_kwargs,
    ) -> Env:
        # Checked before loading the body, which takes a while.
        check_kind(kind, VELOCITY_KINDS)
        check_nonnegative(threshold, "threshold")
        check_kind(backend, BACKENDS, "backend")
        env = load_body(body, backend=backend, **body_kwargs)
        return VelocityCostWrapper(env, threshold, kind=kind, planar=body == "ant")

    build.__doc__ = (
        f"Brax {body} with Safety-Gymnasium's velocity cost; ``kind``, ``threshold`` go to "
        f"VelocityCostWrapper, ``backend`` and the rest to Brax's {body}."
    )
    return build


def _ant_goal_hazards(
    *,
    kind: str = "dense",
    goal=ant_goal.DEFAULT_GOAL,
    centres=ant_goal.DEFAULT_CENTRES,
    size: float = ant_goal.DEFAULT_HAZARD_SIZE,
    progress_weight: float = 1.0,
    backend: str = DEFAULT_BACKENDS["ant"],
    **ant_kwargs,
) -> Env:
    """Brax ant reaching ``goal`` past hazards at ``centres``; other kwargs go to Brax's ant."""
    # Checked before loading the ant, which takes a while.
    check_kind(kind, HAZARD_KINDS)
    check_points(centres, "centres")
    check_positive(size, "size")
    check_point(goal, "goal")
    check_nonnegative(progress_weight, "progress_weight")
    check_kind(backend, BACKENDS, "backend")
    env = load_body("ant", backend=backend, **ant_kwargs)
    env = AntGoal(env, goal=goal, progress_weight=progress_weight)
    return HazardCostWrapper(env, centres, size, kind=kind)


def _point_goal_hazards(
    *,
    kind: str = "dense",
    goal=point_goal.DEFAULT_GOAL,
    centres=point_goal.DEFAULT_CENTRES,
    size: float = point_goal.DEFAULT_HAZARD_SIZE,
    **point_kwargs,
) -> Env:
    """Point mass reaching ``goal`` past hazards at ``centres``; other kwargs go to PointGoal."""
    return HazardCostWrapper(PointGoal(goal=goal, **point_kwargs), centres, size, kind=kind)


_TASKS: dict[str, Callable[..., Env]] = {
    **{f"{body}_velocity": _velocity_task(body) for body in VELOCITY_THRESHOLDS},
    "ant_goal_hazards": _ant_goal_hazards,
    "point_goal_hazards": _point_goal_hazards,
}


def names() -> tuple[str, ...]:
    """The names :func:`make` accepts, sorted."""
    return tuple(sorted(_TASKS))


def make(name: str, *, max_cost: bool = True, **kwargs) -> Env:
    """The unbatched environment ``name`` with its cost wrapper, and :class:`MaxCostWrapper`
    outside it when ``max_cost``.

    Pass the result to :func:`envs.wrap_for_training` for batched, auto-resetting rollouts.

    Args:
      name: one of :func:`names`.
      max_cost: append the running maximum cost to the observation (SCPO/ASCPO's maximum MDP).
      **kwargs: the task's options: ``kind`` (``"indicator"``/``"hinge"`` for the velocity
        tasks, ``"dense"``/``"indicator"`` for the hazard tasks), ``threshold`` (velocity),
        ``goal``, ``centres`` ``(h, 2)``, ``size`` (hazard tasks), ``backend`` (Brax bodies,
        default :data:`DEFAULT_BACKENDS`), and the underlying environment's own keyword
        arguments.

    Raises:
      ValueError: for an unknown ``name`` (the message lists the valid ones) or a bad option
        value.
      TypeError: for an option the task does not take (the environment's own message).
    """
    if name not in _TASKS:
        raise ValueError(f"unknown environment name={name!r}; valid names: {', '.join(names())}")
    if not isinstance(max_cost, bool | np.bool_):  # "no" or "False" from a config was truthy
        raise ValueError(f"max_cost must be True or False, got {max_cost!r}")
    env = _TASKS[name](**kwargs)
    return MaxCostWrapper(env) if max_cost else env
