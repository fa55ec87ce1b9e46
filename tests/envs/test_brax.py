"""The cost wrappers on Brax physics: the Brax bodies of the fast suite (the hopper, and the ant
under the limit cost, on the backend that compiles fastest) and, marked slow, the ant goal
task on the default backend. Each rollout is one jitted scan, so each body compiles once."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import envs

FAST_BACKEND = "spring"
NUM_ENVS, STEPS = 4, 25


def _rollout(env, key, extra):
    """``extra(state)`` after each of ``STEPS`` random-action steps, no auto-reset."""

    def run(key):
        reset_key, action_key = jax.random.split(key)
        state = jax.vmap(env.reset)(jax.random.split(reset_key, NUM_ENVS))

        def body(state, key):
            action = jax.random.uniform(key, (NUM_ENVS, env.action_size), minval=-1, maxval=1)
            next_state = jax.vmap(env.step)(state, action)
            return next_state, extra(state, next_state)

        return state, jax.lax.scan(body, state, jax.random.split(action_key, STEPS))[1]

    return jax.tree.map(np.asarray, jax.jit(run)(key))


@pytest.fixture(scope="module")
def hopper():
    env = envs.make("hopper_velocity", kind="hinge", threshold=0.3, backend=FAST_BACKEND)

    def extra(_, state):
        return {
            "cost": state.info["cost"],
            "observed_max": state.obs[:, -1],
            "velocity": state.pipeline_state.xd.vel[:, 0],
            "qd": state.pipeline_state.qd,
        }

    first, trace = _rollout(env, jax.random.key(3), extra)
    return env, first, trace


def test_velocity_cost_from_the_pipeline_state(hopper):
    _, first, trace = hopper
    np.testing.assert_array_equal(first.info["cost"], 0.0)
    expected = np.maximum(np.abs(trace["velocity"][..., 0]) - 0.3, 0.0)
    np.testing.assert_allclose(trace["cost"], expected, rtol=1e-5, atol=1e-6)
    assert np.count_nonzero(expected) > 0
    np.testing.assert_allclose(
        trace["observed_max"], np.maximum.accumulate(trace["cost"], axis=0), rtol=1e-6
    )
    # The torso is link 0 and its x velocity is the root slide joint's (the joint sits at the
    # torso's origin), so xd.vel[0] is the velocity Safety-Gymnasium differentiates.
    np.testing.assert_allclose(trace["velocity"][..., 0], trace["qd"][..., 0], atol=1e-3)


def test_brax_observation_size_is_inner_plus_one(hopper):
    env, first, _ = hopper
    assert env.observation_size == env.env.observation_size + 1 == 12
    assert first.obs.shape == (NUM_ENVS, 12)
    np.testing.assert_array_equal(first.obs[:, -1], 0.0)


@pytest.mark.slow
def test_ant_goal_hazards_reward_and_cost():
    env = envs.make("ant_goal_hazards", centres=((0.0, 0.0), (0.3, 0.3)), size=0.4)
    task = env.env.env  # MaxCostWrapper(HazardCostWrapper(AntGoal(ant)))

    def extra(state, next_state):
        return {
            "xy": state.pipeline_state.x.pos[:, 0, :2],
            "next_xy": next_state.pipeline_state.x.pos[:, 0, :2],
            "reward": next_state.reward,
            "survive": next_state.metrics["reward_survive"],
            "ctrl": next_state.metrics["reward_ctrl"],
            "cost": next_state.info["cost"],
            "goal_vector": next_state.obs[:, -3:-1],
        }

    first, trace = _rollout(env, jax.random.key(5), extra)
    assert env.observation_size == 27 + 2 + 1 and first.obs.shape == (NUM_ENVS, 30)
    goal = np.asarray(envs.ant_goal.DEFAULT_GOAL)
    distance = np.linalg.norm(trace["xy"] - goal, axis=-1)
    next_distance = np.linalg.norm(trace["next_xy"] - goal, axis=-1)
    progress = (distance - next_distance) / float(task.dt)
    np.testing.assert_allclose(
        trace["reward"], progress + trace["survive"] + trace["ctrl"], rtol=1e-4, atol=1e-4
    )
    np.testing.assert_allclose(trace["goal_vector"], goal - trace["next_xy"], atol=1e-5)
    centres = np.array([[0.0, 0.0], [0.3, 0.3]])
    hazard_distance = np.linalg.norm(trace["next_xy"][..., None, :] - centres, axis=-1)
    expected = np.maximum(0.4 - hazard_distance, 0.0).sum(-1)
    np.testing.assert_allclose(trace["cost"], expected, rtol=1e-4, atol=1e-5)
    assert np.count_nonzero(expected) > 0
    assert jnp.dtype(trace["cost"].dtype) == jnp.float32


def test_a_brax_step_keeps_its_input_and_compiles_once(hopper):
    # Brax wrote the new metrics into the caller's state, and its step returned weakly typed
    # reward, done and metrics where reset returns strong ones: jit(step) compiled twice
    env = hopper[0]
    state = jax.jit(env.reset)(jax.random.key(0))
    before = {name: np.asarray(value) for name, value in state.metrics.items()}
    step = jax.jit(env.step)
    moved = step(state, jnp.ones(env.action_size))
    for name, value in before.items():
        np.testing.assert_array_equal(np.asarray(state.metrics[name]), value, err_msg=name)
    step(moved, jnp.ones(env.action_size))
    assert step._cache_size() == 1


def test_limit_cost_on_the_ant_body():
    # the joint indices the LimitCostWrapper docstring gives for Brax's ant, q[7:] after the
    # free joint's position and quaternion, are its hinges: one per action
    ant = envs._brax.load_body("ant", backend=FAST_BACKEND)
    hinges = tuple(range(7, 7 + ant.action_size))
    env = envs.LimitCostWrapper(ant, (0.3, 0.6), joint_indices=hinges, joint_limit=0.4)

    def extra(_, state):
        return {
            "cost": state.info["cost"],
            "metric": state.metrics["cost"],
            "height": state.pipeline_state.x.pos[:, 0, 2],
            "q": state.pipeline_state.q,
        }

    _, trace = _rollout(env, jax.random.key(7), extra)
    assert trace["q"].shape[-1] == 7 + ant.action_size == 15
    outside = (trace["height"] < 0.3) | (trace["height"] > 0.6)
    excess = np.maximum(np.abs(trace["q"][..., 7:]) - 0.4, 0.0).sum(-1)
    np.testing.assert_allclose(trace["cost"], outside + excess, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(trace["metric"], trace["cost"])
    assert np.count_nonzero(excess) > 0
    # the torso starts at 0.75 (ant.xml), above the range, and falls into it
    assert 0 < np.count_nonzero(outside) < outside.size
