"""Brax, imported and loaded in one place, with two of its habits contained.

Brax imports jaxopt, which warns on import that it is no longer maintained, and every Brax
body load warns that Brax itself is not actively maintained. This package chose Brax knowingly
and uses neither jaxopt nor the parts of Brax the notices are about (its training agents), so
the two notices are silenced where they arise, and only there; other warnings pass.

Brax's physics also relies on implicit rank promotion (the ``spring`` pipeline adds gravity
``(3,)`` to ``(links, 3)`` arrays), so under ``jax_numpy_rank_promotion="raise"`` its steps
fail. The bodies :func:`load_body` returns run Brax's own code with promotion allowed; the
code around them keeps whatever setting the caller chose.
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "JAXopt is no longer maintained", DeprecationWarning)
    from brax import base
    from brax import envs as brax_envs
    from brax.envs import training
    from brax.envs.ant import Ant
    from brax.envs.base import Env, State, Wrapper

__all__ = ["Ant", "Env", "State", "Wrapper", "base", "load_body", "training"]


def _strong(value) -> jax.Array:
    """``value`` with its own dtype, strongly typed."""
    array = jnp.asarray(value)
    return jnp.asarray(array, dtype=array.dtype)


class _AllowRankPromotion(Wrapper):
    """Runs the wrapped Brax body with implicit rank promotion allowed."""

    def reset(self, rng: jax.Array) -> State:
        with jax.numpy_rank_promotion("allow"):
            return self.env.reset(rng)

    def step(self, state: State, action: jax.Array) -> State:
        # Brax updates the metrics dict in place: a copy keeps the caller's state intact
        state = state.replace(metrics=dict(state.metrics))
        # Brax's physics state, reward and metrics are float64 under jax_enable_x64, and a
        # float32 action made the step's metrics['reward_ctrl'] float32 and broke the ant's
        # substep scan (its ctrl turned float32): actions take the default float dtype
        # (float32 without x64, where this changes nothing for float32 actions)
        action = jnp.asarray(action, jax.dtypes.canonicalize_dtype(jnp.float64))
        with jax.numpy_rank_promotion("allow"):
            new = self.env.step(state, action)
        # Brax's step returns weakly typed reward, done and metrics where its reset returns
        # strong float32 ones, so a jitted step compiled twice (once per state type)
        return new.replace(
            reward=_strong(new.reward),
            done=_strong(new.done),
            metrics={name: _strong(value) for name, value in new.metrics.items()},
        )

    @property
    def observation_size(self) -> int:
        # Brax's PipelineEnv finds it by running a reset.
        with jax.numpy_rank_promotion("allow"):
            return self.env.observation_size


def load_body(name: str, **kwargs) -> Env:
    """``brax.envs.get_environment(name, **kwargs)``, without Brax's maintenance notice and
    with implicit rank promotion allowed inside Brax's code."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Brax System, piplines", UserWarning)
        return _AllowRankPromotion(brax_envs.get_environment(name, **kwargs))
