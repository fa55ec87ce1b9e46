"""Under ``jax_enable_x64`` a step returns the types its reset did, so steps scan."""

import functools

import jax
import jax.numpy as jnp
import pytest

import envs


@functools.cache
def _env_and_reset(make, name):
    """The env built under x64 and its reset's types, once per env for both action dtypes
    (tracing a Brax reset takes a second or two)."""
    with jax.enable_x64(True):
        env = make(name)
        return env, jax.eval_shape(env.reset, jax.random.key(0))


def _types(state):
    return jax.tree.map(lambda leaf: (leaf.shape, leaf.dtype), state)


@pytest.mark.parametrize(
    ("make", "name"),
    [(envs.make, name) for name in envs.names()]
    + [(envs.make_multi_objective, name) for name in envs.multi_objective_names()],
)
@pytest.mark.parametrize("action_dtype", [jnp.float32, jnp.float64])
def test_steps_keep_the_reset_types_under_x64(make, name, action_dtype):
    # Brax's reset gives float64 reward and metrics under x64 while a float32 action made its
    # step's metrics['reward_ctrl'] float32; the max-cost wrapper read its running maximum
    # back from the (float64) observation and returned a float64 one where reset had the
    # cost's float32. A lax.scan over steps refused either. Traced only (eval_shape).
    env, state = _env_and_reset(make, name)
    with jax.enable_x64(True):
        action = jax.ShapeDtypeStruct((env.action_size,), action_dtype)
        stepped = jax.eval_shape(env.step, state, action)
        twice = jax.eval_shape(env.step, stepped, action)
    assert _types(stepped) == _types(state)
    assert _types(twice) == _types(state)
