"""Goal reaching for Brax's ant: Safety-Gymnasium's ``AntGoal`` idea on Brax physics.

The ant's forward-velocity reward is replaced by the velocity towards a fixed goal on the xy
plane, measured on the torso from the pipeline states before and after the step:

.. math::
  r_t = w \\, \\frac{\\|p_t - g\\| - \\|p_{t+1} - g\\|}{\\Delta t}
        + r^{\\text{survive}}_t + r^{\\text{ctrl}}_t,

with the ant's own survive and control terms (``metrics['reward_survive']``,
``metrics['reward_ctrl']``), so the reward keeps the scale of Brax's ant. The goal does not end
the episode (the ant's own termination when it falls still does); once there, standing still
earns the survive term. The observation is the ant's with ``g - p_t`` (2) appended, because
Brax's ant leaves its xy position out of the observation. Hazards come from
:class:`envs.HazardCostWrapper`, added by :func:`envs.make`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from envs._brax import Ant, Env, State, Wrapper
from envs._checks import check_nonnegative, check_point

DEFAULT_GOAL = (4.0, 0.0)
# One hazard on the straight line from the start (the origin) to the goal and two flanking it;
# the radius is about the ant's leg span, and the cost is measured on the torso.
DEFAULT_CENTRES = ((2.0, 0.0), (2.6, 1.4), (2.6, -1.4))
DEFAULT_HAZARD_SIZE = 0.5


class AntGoal(Wrapper):
    """Brax's ant rewarded for approaching ``goal``; observation ``ant + 2``.

    Args:
      env: a Brax ``Ant`` (``brax.envs.get_environment("ant", backend=...)``), unbatched.
      goal: goal position ``(2,)``.
      progress_weight: weight ``w`` of the approach velocity, >= 0.
    """

    def __init__(self, env: Env, *, goal=DEFAULT_GOAL, progress_weight: float = 1.0):
        if not isinstance(env.unwrapped, Ant):
            raise ValueError(f"env must be Brax's Ant, got {type(env.unwrapped).__name__}")
        super().__init__(env)
        self.goal = check_point(goal, "goal")
        self.progress_weight = check_nonnegative(progress_weight, "progress_weight")

    def _distance(self, pipeline_state) -> jax.Array:
        return jnp.linalg.norm(pipeline_state.x.pos[0, :2] - self.goal)

    def _observation(self, obs: jax.Array, pipeline_state) -> jax.Array:
        return jnp.concatenate([obs, self.goal - pipeline_state.x.pos[0, :2]])

    def reset(self, rng: jax.Array) -> State:
        state = self.env.reset(rng)
        metrics = {
            **state.metrics,
            "reward_goal": jnp.zeros_like(state.reward),
            "distance_to_goal": self._distance(state.pipeline_state),
        }
        obs = self._observation(state.obs, state.pipeline_state)
        return state.replace(obs=obs, metrics=metrics)

    def step(self, state: State, action: jax.Array) -> State:
        distance = self._distance(state.pipeline_state)
        # the reward keeps the reset's dtype (Brax's: float64 under jax_enable_x64)
        dtype = state.reward.dtype
        state = self.env.step(state.replace(obs=state.obs[:-2]), action)
        new_distance = self._distance(state.pipeline_state)
        reward_goal = self.progress_weight * (distance - new_distance) / self.env.dt
        reward = reward_goal + state.metrics["reward_survive"] + state.metrics["reward_ctrl"]
        metrics = {
            **state.metrics,
            "reward_goal": reward_goal.astype(dtype),
            "distance_to_goal": new_distance,
        }
        return state.replace(
            obs=self._observation(state.obs, state.pipeline_state),
            reward=reward.astype(dtype),
            metrics=metrics,
        )

    @property
    def observation_size(self) -> int:
        return self.env.observation_size + 2
