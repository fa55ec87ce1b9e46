"""State-wise cost wrappers for Brax environments.

Every wrapper here computes a per-step cost ``C_t = c(s_{t+1})`` from the pipeline state that
the step produced and writes it, as a float32 scalar per environment, to both
``state.metrics['cost']`` (so Brax's ``EpisodeWrapper`` sums it into the episode cost) and
``state.info['cost']`` (so :class:`envs.MaxCostWrapper` and hand-written rollouts can read it).
On reset the cost is 0: a cost belongs to a transition, and the reset state has none; a start
inside a hazard is charged on the first step.

The torso is link 0 of the pipeline state: ``x.pos[..., 0, :]`` is its position and
``xd.vel[..., 0, :]`` its linear velocity in the world frame. That holds for every Brax backend
(``generalized``, ``positional``, ``spring`` build ``xd`` from the link frames; ``mjx`` shifts
MuJoCo's ``cvel`` to the body origin) and for :class:`envs.PointGoal`. The wrappers read only
link 0, so they work on unbatched and batched states alike; wrap the unbatched environment and
let ``brax.envs.training.wrap`` add the batch.

Sources: the velocity and hazard costs follow Safety-Gymnasium (Ji et al., "Safety-Gymnasium:
A unified safe reinforcement learning benchmark", NeurIPS 2023 Datasets and Benchmarks;
``safety_gymnasium/tasks/safe_velocity/*_v1.py`` and the hazards of the navigation tasks),
which GUARD (Zhao et al., arXiv 2305.13681) and ASCPO (arXiv 2410.01212) also use.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from envs._brax import Env, State, Wrapper
from envs._checks import (
    check_kind,
    check_limit,
    check_nonnegative,
    check_points,
    check_positive,
)

# Safety-Gymnasium v1 velocity thresholds (``SafetyXVelocity-v1``; the v0 ones are lower).
VELOCITY_THRESHOLDS: dict[str, float] = {
    "ant": 2.6222,
    "halfcheetah": 3.2096,
    "hopper": 0.7402,
    "walker2d": 2.3415,
}
VELOCITY_KINDS = ("indicator", "hinge")
HAZARD_KINDS = ("dense", "indicator")


def velocity_cost(
    velocity: jax.Array, threshold: float | jax.Array, *, kind: str = "indicator", planar: bool
) -> jax.Array:
    """Velocity-limit cost of a torso velocity ``velocity[..., :3]``.

    The speed is ``sqrt(vx^2 + vy^2)`` when ``planar`` (Safety-Gymnasium's ant) and ``|vx|``
    otherwise (the planar robots, which can only run along x). ``kind="indicator"`` gives
    ``1[speed > threshold]`` (Safety-Gymnasium's cost); ``kind="hinge"`` gives
    ``max(0, speed - threshold)``, a graded variant that says how far over the limit it is.
    """
    check_kind(kind, VELOCITY_KINDS)
    check_limit(threshold, "threshold")  # NaN: never over the limit
    if planar:
        speed = jnp.sqrt(velocity[..., 0] ** 2 + velocity[..., 1] ** 2)
    else:
        speed = jnp.abs(velocity[..., 0])
    if kind == "indicator":
        return (speed > threshold).astype(jnp.float32)
    return jnp.maximum(speed - threshold, 0.0).astype(jnp.float32)


def hazard_cost(
    xy: jax.Array, centres: jax.Array, size: float | jax.Array, *, kind: str = "dense"
) -> jax.Array:
    """Cost of a position ``xy[..., 2]`` among circles ``centres (h, 2)`` of radius ``size``.

    With ``dist_i = ||xy - centres[i]||``, ``kind="dense"`` gives ``sum_i max(0, size - dist_i)``
    (Safety-Gymnasium's and GUARD's hazard cost with unit weight) and ``kind="indicator"``
    gives ``1[min_i dist_i < size]`` (their ``constrain_indicator`` form).
    """
    check_kind(kind, HAZARD_KINDS)
    check_limit(size, "size")  # a negative radius costs nothing anywhere
    centres = jnp.asarray(centres)
    # Lead the centres with one axis per batch axis of xy (rank promotion is explicit here).
    centres = centres.reshape((1,) * (xy.ndim - 1) + centres.shape)
    distance = jnp.linalg.norm(xy[..., None, :] - centres, axis=-1)
    if kind == "dense":
        return jnp.sum(jnp.maximum(size - distance, 0.0), axis=-1).astype(jnp.float32)
    return jnp.any(distance < size, axis=-1).astype(jnp.float32)


def limit_cost(
    height: jax.Array,
    joint_angles: jax.Array,
    *,
    height_range: tuple[float, float],
    joint_limit: float,
) -> jax.Array:
    """Height-and-joint limit cost: ``1[height outside [low, high]] + sum_j max(0, |q_j| - limit)``.

    ``height`` is ``[...]`` and ``joint_angles`` ``[..., j]`` (``j`` may be 0, then only the
    height indicator counts).
    """
    low, high = height_range
    check_limit(joint_limit, "joint_limit")
    if not any(isinstance(v, jax.core.Tracer) for v in (low, high)) and not low <= high:
        raise ValueError(f"height_range={height_range!r} must have low <= high (no NaN)")
    outside = ((height < low) | (height > high)).astype(jnp.float32)
    excess = jnp.sum(jnp.maximum(jnp.abs(joint_angles) - joint_limit, 0.0), axis=-1)
    return (outside + excess).astype(jnp.float32)


def _with_cost(state: State, cost: jax.Array) -> State:
    # New dicts, not in-place updates: the incoming state's dicts may be shared with the caller.
    return state.replace(metrics={**state.metrics, "cost": cost}, info={**state.info, "cost": cost})


class CostWrapper(Wrapper):
    """Base class: writes ``cost(pipeline_state)`` after each step, 0 on reset.

    Subclasses implement :meth:`cost`. Wrapping two cost wrappers keeps the outer one's cost.
    """

    def cost(self, pipeline_state) -> jax.Array:
        """Per-step cost of the state the step produced, float32 ``[...]``."""
        raise NotImplementedError

    def reset(self, rng: jax.Array) -> State:
        state = self.env.reset(rng)
        return _with_cost(state, jnp.zeros(jnp.shape(state.reward), jnp.float32))

    def step(self, state: State, action: jax.Array) -> State:
        state = self.env.step(state, action)
        return _with_cost(state, self.cost(state.pipeline_state))


class VelocityCostWrapper(CostWrapper):
    """Velocity limit on the torso, Safety-Gymnasium's ``SafetyXVelocity`` cost.

    Safety-Gymnasium takes the velocity as a finite difference of the torso position over the
    environment step and compares ``vx`` (planar robots) or ``||v_xy||`` (ant) with the
    threshold. Here the velocity is the pipeline state's instantaneous torso velocity at the
    end of the step (Brax's ``info`` holds no reliable previous position across automatic
    resets), and the planar robots use ``|vx|`` so running backwards fast also counts.

    Args:
      env: the Brax environment, unbatched.
      threshold: speed limit, >= 0; see :data:`VELOCITY_THRESHOLDS`.
      kind: ``"indicator"`` or ``"hinge"``, see :func:`velocity_cost`.
      planar: speed from ``(vx, vy)`` (True) or ``|vx|`` (False).
    """

    def __init__(self, env: Env, threshold: float, *, kind: str = "indicator", planar: bool):
        super().__init__(env)
        self.threshold = check_nonnegative(threshold, "threshold")
        self.kind = check_kind(kind, VELOCITY_KINDS)
        self.planar = bool(planar)

    def cost(self, pipeline_state) -> jax.Array:
        velocity = pipeline_state.xd.vel[..., 0, :]
        return velocity_cost(velocity, self.threshold, kind=self.kind, planar=self.planar)


class HazardCostWrapper(CostWrapper):
    """Circular hazards on the xy plane of the torso (Safety-Gymnasium / GUARD hazards).

    Args:
      env: the Brax environment, unbatched.
      centres: hazard centres, ``(h, 2)``.
      size: hazard radius, > 0.
      kind: ``"dense"`` or ``"indicator"``, see :func:`hazard_cost`.
    """

    def __init__(self, env: Env, centres, size: float, *, kind: str = "dense"):
        super().__init__(env)
        self.centres = check_points(centres, "centres")
        self.size = check_positive(size, "size")
        self.kind = check_kind(kind, HAZARD_KINDS)

    def cost(self, pipeline_state) -> jax.Array:
        xy = pipeline_state.x.pos[..., 0, :2]
        return hazard_cost(xy, self.centres, self.size, kind=self.kind)


class LimitCostWrapper(CostWrapper):
    """Torso height range and, optionally, joint-angle limits (see :func:`limit_cost`).

    The height is the torso's z (``x.pos[..., 0, 2]``); the joint angles are entries
    ``joint_indices`` of the pipeline state's ``q`` (for Brax's ant the hinge joints are
    ``q[7:]``, after the free joint's position and quaternion). A fallen robot that Brax
    terminates still pays the indicator on its last step.

    Args:
      env: the Brax environment, unbatched.
      height_range: ``(low, high)`` with ``low < high``.
      joint_indices: indices into ``q``; empty (the default) for a height-only cost.
      joint_limit: ``|q_j|`` above this costs ``|q_j| - joint_limit``, >= 0.
    """

    def __init__(
        self,
        env: Env,
        height_range: tuple[float, float],
        *,
        joint_indices: Sequence[int] = (),
        joint_limit: float = 0.0,
    ):
        super().__init__(env)
        if (
            not isinstance(height_range, tuple | list)
            or len(height_range) != 2
            or not height_range[0] < height_range[1]
        ):
            raise ValueError(f"height_range={height_range!r} must be (low, high) with low < high")
        self.height_range = (float(height_range[0]), float(height_range[1]))
        indices = np.asarray(joint_indices)
        if indices.size and indices.dtype.kind not in "iu":  # 1.9 read as 1, True as 1
            raise ValueError(f"joint_indices={joint_indices!r} must be integers (indices into q)")
        self.joint_indices = indices.astype(np.int32).reshape(-1)
        self.joint_limit = check_nonnegative(joint_limit, "joint_limit")

    def reset(self, rng: jax.Array) -> State:
        state = super().reset(rng)
        # Shapes are static, so out-of-range indices are caught here rather than clamped by
        # jax's gather.
        q_size = state.pipeline_state.q.shape[-1]
        bad = self.joint_indices[(self.joint_indices < 0) | (self.joint_indices >= q_size)]
        if bad.size:
            raise ValueError(
                f"joint_indices={self.joint_indices.tolist()} must lie in [0, {q_size}), "
                f"the pipeline state's q size; out of range: {bad.tolist()}"
            )
        return state

    def cost(self, pipeline_state) -> jax.Array:
        height = pipeline_state.x.pos[..., 0, 2]
        joint_angles = pipeline_state.q[..., self.joint_indices]
        return limit_cost(
            height, joint_angles, height_range=self.height_range, joint_limit=self.joint_limit
        )
