"""A 2-D point mass that must reach a goal: a tiny, fast stand-in for Safety-Gymnasium's
``PointGoal`` / GUARD's ``Goal_Point`` tasks, in pure JAX behind the Brax ``Env`` interface.

Dynamics (semi-implicit Euler with linear damping, unit mass):

.. math::
  v_{t+1} = v_t + \\Delta t\\,(a_t - \\kappa v_t), \\qquad p_{t+1} = p_t + \\Delta t\\, v_{t+1},
  \\qquad a_t \\in [-1, 1]^2,

so the terminal speed under full force is ``1 / kappa`` per axis. The reward is the decrease of
the distance to the goal, ``||p_t - g|| - ||p_{t+1} - g||``, plus ``goal_bonus`` on a step
that ends within ``goal_radius`` of the goal; such a step also sets ``done`` (the episode ends
at the goal, like GUARD's ``noconti`` tasks). The hazards are not part of the
task: :func:`envs.make` adds them with :class:`envs.HazardCostWrapper`.

The pipeline state is a one-link ``brax.base.State`` (``q = p``, ``qd = v``, the link at
``(p, 0)``), so the cost wrappers read it exactly as they read a Brax body, and Brax's
``AutoResetWrapper`` restores it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from envs._brax import Env, State, base
from envs._checks import check_nonnegative, check_point, check_positive

DEFAULT_GOAL = (2.0, 0.0)
# Three hazards between the start (the origin) and the goal: one on the straight line, two
# flanking it, so the shortest safe path bends around the middle one.
DEFAULT_CENTRES = ((1.0, 0.0), (1.3, 0.7), (1.3, -0.7))
DEFAULT_HAZARD_SIZE = 0.3


class PointGoal(Env):
    """Point-mass goal reaching; observation ``[p, v, g - p]`` (6), action force (2).

    Args:
      goal: goal position ``(2,)``.
      goal_radius: the goal is reached within this distance, > 0.
      goal_bonus: reward on reaching the goal, >= 0.
      start_noise: the start is uniform in ``[-start_noise, start_noise]^2``, >= 0.
      damping: linear damping ``kappa``, >= 0.
      dt: time step, > 0.
    """

    def __init__(
        self,
        *,
        goal=DEFAULT_GOAL,
        goal_radius: float = 0.2,
        goal_bonus: float = 1.0,
        start_noise: float = 0.1,
        damping: float = 1.0,
        dt: float = 0.1,
    ):
        self.goal = check_point(goal, "goal")
        self.goal_radius = check_positive(goal_radius, "goal_radius")
        self.goal_bonus = check_nonnegative(goal_bonus, "goal_bonus")
        self.start_noise = check_nonnegative(start_noise, "start_noise")
        self.damping = check_nonnegative(damping, "damping")
        self.dt = check_positive(dt, "dt")

    def _pipeline_state(self, position: jax.Array, velocity: jax.Array) -> base.State:
        zero = jnp.zeros((1, 1), jnp.float32)
        return base.State(
            q=position,
            qd=velocity,
            x=base.Transform(
                pos=jnp.concatenate([position[None, :], zero], axis=-1),
                rot=jnp.array([[1.0, 0.0, 0.0, 0.0]], jnp.float32),
            ),
            xd=base.Motion(
                vel=jnp.concatenate([velocity[None, :], zero], axis=-1),
                ang=jnp.zeros((1, 3), jnp.float32),
            ),
            contact=None,
        )

    def _observation(self, position: jax.Array, velocity: jax.Array) -> jax.Array:
        return jnp.concatenate([position, velocity, self.goal - position])

    def reset(self, rng: jax.Array) -> State:
        position = jax.random.uniform(
            rng, (2,), jnp.float32, minval=-self.start_noise, maxval=self.start_noise
        )
        velocity = jnp.zeros((2,), jnp.float32)
        zero = jnp.zeros((), jnp.float32)
        distance = jnp.linalg.norm(position - self.goal)
        return State(
            pipeline_state=self._pipeline_state(position, velocity),
            obs=self._observation(position, velocity),
            reward=zero,
            done=zero,
            metrics={"distance_to_goal": distance, "goal_reached": zero},
        )

    def step(self, state: State, action: jax.Array) -> State:
        position, velocity = state.pipeline_state.q, state.pipeline_state.qd
        # the task computes in float32 (a float64 action under jax_enable_x64 turned the
        # state float64, where reset makes it float32)
        force = jnp.clip(jnp.asarray(action, jnp.float32), -1.0, 1.0)
        velocity = velocity + self.dt * (force - self.damping * velocity)
        new_position = position + self.dt * velocity
        distance = jnp.linalg.norm(position - self.goal)
        new_distance = jnp.linalg.norm(new_position - self.goal)
        reached = (new_distance < self.goal_radius).astype(jnp.float32)
        reward = distance - new_distance + self.goal_bonus * reached
        return state.replace(
            pipeline_state=self._pipeline_state(new_position, velocity),
            obs=self._observation(new_position, velocity),
            reward=reward.astype(jnp.float32),
            done=reached,
            metrics={**state.metrics, "distance_to_goal": new_distance, "goal_reached": reached},
        )

    @property
    def observation_size(self) -> int:
        return 6

    @property
    def action_size(self) -> int:
        return 2

    @property
    def backend(self) -> str:
        return "jax"
