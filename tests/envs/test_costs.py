"""The cost kinds against numpy recomputations, as pure functions and as wrappers stepping the
point task; the point task's dynamics and reward; the reset cost."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import envs


def _numpy_velocity_cost(velocity, threshold, kind, planar):
    speed = np.hypot(velocity[..., 0], velocity[..., 1]) if planar else np.abs(velocity[..., 0])
    return (
        (speed > threshold).astype(np.float32)
        if kind == "indicator"
        else np.maximum(speed - threshold, 0.0)
    )


def _numpy_hazard_cost(xy, centres, size, kind):
    distance = np.linalg.norm(xy[..., None, :] - centres[None, :, :], axis=-1)
    if kind == "dense":
        return np.maximum(size - distance, 0.0).sum(-1)
    return (distance < size).any(-1).astype(np.float32)


@pytest.mark.parametrize("planar", [True, False])
@pytest.mark.parametrize("kind", envs.VELOCITY_KINDS)
def test_velocity_cost_matches_numpy(kind, planar):
    velocity = np.asarray(jax.random.normal(jax.random.key(1), (64, 3)) * 2.0)
    cost = jax.jit(lambda v: envs.velocity_cost(v, 1.5, kind=kind, planar=planar))(velocity)
    assert cost.dtype == jnp.float32 and cost.shape == (64,)
    expected = _numpy_velocity_cost(velocity, 1.5, kind, planar)
    np.testing.assert_allclose(cost, expected, rtol=1e-6, atol=1e-6)
    assert 0 < np.count_nonzero(expected) < 64  # both sides of the limit are exercised


@pytest.mark.parametrize("kind", envs.HAZARD_KINDS)
def test_hazard_cost_matches_numpy(kind):
    xy = np.asarray(jax.random.uniform(jax.random.key(2), (8, 16, 2), minval=-1.0, maxval=1.0))
    centres = np.array([[0.0, 0.0], [0.5, 0.5], [-0.6, 0.2]], np.float32)
    cost = jax.jit(lambda p: envs.hazard_cost(p, centres, 0.4, kind=kind))(xy)
    assert cost.dtype == jnp.float32 and cost.shape == (8, 16)
    expected = _numpy_hazard_cost(xy, centres, 0.4, kind)
    np.testing.assert_allclose(cost, expected, rtol=1e-5, atol=1e-6)
    assert 0 < np.count_nonzero(expected) < xy.shape[0] * xy.shape[1]


def test_limit_cost_matches_numpy():
    key_height, key_angles = jax.random.split(jax.random.key(3))
    height = np.asarray(jax.random.uniform(key_height, (32,), minval=0.0, maxval=1.5))
    angles = np.asarray(jax.random.normal(key_angles, (32, 4)))
    cost = jax.jit(lambda h, q: envs.limit_cost(h, q, height_range=(0.3, 1.0), joint_limit=0.8))(
        height, angles
    )
    expected = ((height < 0.3) | (height > 1.0)).astype(np.float32) + np.maximum(
        np.abs(angles) - 0.8, 0.0
    ).sum(-1)
    np.testing.assert_allclose(cost, expected, rtol=1e-6, atol=1e-6)


def _trace(env, steps=40, num_envs=8):
    """Per-step costs and the pipeline states they were computed from, without auto-reset."""

    def run(key):
        reset_key, action_key = jax.random.split(key)
        state = jax.vmap(env.reset)(jax.random.split(reset_key, num_envs))

        def body(state, key):
            action = jax.random.uniform(key, (num_envs, 2), minval=-1.0, maxval=1.0)
            # A push towards +x so the point crosses the hazards.
            state = jax.vmap(env.step)(state, action + jnp.array([0.7, 0.0])[None, :])
            return state, (state.info["cost"], state.metrics["cost"], state.pipeline_state)

        first = state.info["cost"]
        _, trace = jax.lax.scan(body, state, jax.random.split(action_key, steps))
        return first, trace

    return jax.tree.map(np.asarray, jax.jit(run)(jax.random.key(4)))


@pytest.mark.parametrize("kind", envs.HAZARD_KINDS)
def test_hazard_wrapper_charges_the_torso_position(kind):
    centres = np.array([[0.5, 0.0], [0.9, 0.3]], np.float32)
    env = envs.HazardCostWrapper(envs.PointGoal(goal=(3.0, 0.0)), centres, 0.25, kind=kind)
    first, (cost, metric, pipeline_state) = _trace(env)
    np.testing.assert_array_equal(first, 0.0)  # no cost on reset
    np.testing.assert_array_equal(cost, metric)
    expected = _numpy_hazard_cost(pipeline_state.q, centres, 0.25, kind)
    np.testing.assert_allclose(cost, expected, rtol=1e-5, atol=1e-6)
    assert np.count_nonzero(expected) > 10


@pytest.mark.parametrize("kind", envs.VELOCITY_KINDS)
def test_velocity_wrapper_reads_the_pipeline_velocity(kind):
    env = envs.VelocityCostWrapper(envs.PointGoal(), 0.4, kind=kind, planar=True)
    _, (cost, _, pipeline_state) = _trace(env)
    expected = _numpy_velocity_cost(pipeline_state.qd, 0.4, kind, planar=True)
    np.testing.assert_allclose(cost, expected, rtol=1e-5, atol=1e-6)
    assert 0 < np.count_nonzero(expected) < expected.size


def test_limit_wrapper_on_the_point_task():
    # The point's "torso" sits at height 0 and its q is its position.
    env = envs.LimitCostWrapper(envs.PointGoal(), (0.1, 1.0), joint_indices=(0, 1), joint_limit=0.5)
    _, (cost, _, pipeline_state) = _trace(env)
    expected = 1.0 + np.maximum(np.abs(pipeline_state.q) - 0.5, 0.0).sum(-1)
    np.testing.assert_allclose(cost, expected, rtol=1e-5, atol=1e-6)
    bad = envs.LimitCostWrapper(envs.PointGoal(), (0.0, 1.0), joint_indices=(2,))
    with pytest.raises(ValueError, match=r"joint_indices=\[2\] must lie in \[0, 2\)"):
        bad.reset(jax.random.key(0))


def test_point_goal_dynamics_and_reward():
    env = envs.PointGoal(goal=(1.0, 0.0), goal_radius=0.2, goal_bonus=5.0, damping=0.5, dt=0.1)
    state = jax.jit(env.reset)(jax.random.key(5))
    position = np.asarray(state.pipeline_state.q)
    assert np.all(np.abs(position) <= 0.1) and np.any(position != 0.0)
    np.testing.assert_allclose(state.obs, np.r_[position, 0.0, 0.0, [1.0, 0.0] - position])
    step = jax.jit(env.step)
    action = np.array([3.0, -0.5], np.float32)  # clipped to [1, -0.5]
    state = step(state, action)
    velocity = 0.1 * np.array([1.0, -0.5])
    new_position = position + 0.1 * velocity
    np.testing.assert_allclose(state.pipeline_state.q, new_position, rtol=1e-6)
    np.testing.assert_allclose(state.pipeline_state.xd.vel[0, :2], velocity, rtol=1e-6)
    goal = np.array([1.0, 0.0])
    progress = np.linalg.norm(position - goal) - np.linalg.norm(new_position - goal)
    np.testing.assert_allclose(state.reward, progress, rtol=1e-5)
    assert state.done == 0.0
    # Placed next to the goal, the step that ends inside it pays the bonus and ends the episode.
    near = env._pipeline_state(jnp.array([0.85, 0.0]), jnp.zeros(2))
    state = step(state.replace(pipeline_state=near), np.array([1.0, 0.0], np.float32))
    assert state.done == 1.0 and state.reward > 5.0


def test_the_cost_functions_check_concrete_parameters():
    # each gave a cost of 0 (or 1) for a parameter that means nothing
    with pytest.raises(ValueError, match="threshold=nan must be finite and >= 0"):
        envs.velocity_cost(jnp.array([100.0, 0.0, 0.0]), float("nan"), planar=False)
    with pytest.raises(ValueError, match="size=-0.5 must be finite and >= 0"):
        envs.hazard_cost(jnp.zeros(2), jnp.zeros((1, 2)), -0.5)
    with pytest.raises(ValueError, match="joint_limit=-1 must be finite and >= 0"):
        envs.limit_cost(jnp.array(0.5), jnp.zeros(2), height_range=(0.0, 1.0), joint_limit=-1)
    with pytest.raises(ValueError, match=r"height_range=\(1.0, 0.2\) must have low <= high"):
        envs.limit_cost(jnp.array(0.5), jnp.zeros(2), height_range=(1.0, 0.2), joint_limit=1.0)
    # traced parameters pass (their values are unknown while tracing)
    costs = jax.vmap(lambda w: envs.velocity_cost(jnp.array([2.0, 0.0, 0.0]), w, planar=False))(
        jnp.array([1.0, 3.0])
    )
    np.testing.assert_array_equal(costs, [1.0, 0.0])
