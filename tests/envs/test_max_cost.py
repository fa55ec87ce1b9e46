"""The maximum-MDP wrapper over several auto-reset episodes: per episode, the summed
increments (and Brax's episode sum of them) equal a numpy recomputation of the episode's
maximum cost, and the running maximum in the observation restarts at 0 with each episode."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import envs

NUM_ENVS, STEPS, EPISODE_LENGTH = 16, 80, 20


@pytest.fixture(scope="module", params=[1, 2], ids=["action_repeat=1", "action_repeat=2"])
def trace(request):
    # Hazards close to the start and a near goal: some episodes end at the goal, the others at
    # the time limit, and the costs rise and fall within an episode.
    env = envs.make(
        "point_goal_hazards", goal=(0.8, 0.0), centres=((0.35, 0.0), (0.6, 0.25)), size=0.2
    )
    training_env = envs.wrap_for_training(env, EPISODE_LENGTH, action_repeat=request.param)

    def run(key):
        reset_key, action_key = jax.random.split(key)
        state = training_env.reset(jax.random.split(reset_key, NUM_ENVS))

        def body(state, key):
            noise = jax.random.uniform(key, (NUM_ENVS, 2), minval=-1.0, maxval=1.0)
            state = training_env.step(state, noise + jnp.array([0.8, 0.0])[None, :])
            return state, {
                "cost": state.info["cost"],
                "increment": state.info["cost_increment"],
                "increment_metric": state.metrics["cost_increment"],
                "max_cost": state.metrics["max_cost"],
                "observed_max": state.obs[:, -1],
                "done": state.done,
                "truncation": state.info["truncation"],
                "episode_increment": state.info["episode_metrics"]["cost_increment"],
                "episode_cost": state.info["episode_metrics"]["cost"],
            }

        return jax.lax.scan(body, state, jax.random.split(action_key, STEPS))[1]

    return jax.tree.map(np.asarray, jax.jit(run)(jax.random.key(7)))


def _episodes(done):
    """``(start, end)`` step ranges, end inclusive, of each env's completed episodes."""
    for env in range(done.shape[1]):
        start = 0
        for t in np.flatnonzero(done[:, env]):
            yield env, start, t
            start = t + 1


def test_increments_sum_to_the_episode_max_across_auto_resets(trace):
    episodes = list(_episodes(trace["done"]))
    maxima = []
    for env, start, end in episodes:
        cost = trace["cost"][start : end + 1, env]
        increment = trace["increment"][start : end + 1, env]
        maxima.append(cost.max())
        assert np.all(increment >= 0.0)
        np.testing.assert_allclose(increment.sum(), cost.max(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(trace["episode_increment"][end, env], cost.max(), rtol=1e-5)
        np.testing.assert_allclose(trace["episode_cost"][end, env], cost.sum(), rtol=1e-5)
        # The running maximum within the episode, and 0 in the observation after the reset.
        running = np.maximum.accumulate(cost)
        np.testing.assert_allclose(trace["max_cost"][start : end + 1, env], running, rtol=1e-6)
        np.testing.assert_allclose(trace["observed_max"][start:end, env], running[:-1], rtol=1e-6)
        assert trace["observed_max"][end, env] == 0.0
    np.testing.assert_array_equal(trace["increment"], trace["increment_metric"])
    # The data can tell a leaking maximum from a correct one: episodes end both ways, and some
    # episode's maximum is below the one before it in the same env (a maximum kept across the
    # reset would make its increments sum to 0 instead).
    ends_at_goal = trace["done"].astype(bool) & (trace["truncation"] == 0)
    assert ends_at_goal.any() and trace["truncation"].any()
    assert np.count_nonzero(np.asarray(maxima) > 0) > len(maxima) // 4
    assert any(
        previous[0] == current[0] and maxima[i + 1] < maxima[i]
        for i, (previous, current) in enumerate(zip(episodes, episodes[1:], strict=False))
    )


def test_observation_size_is_inner_plus_one():
    inner = envs.make("point_goal_hazards", max_cost=False)
    outer = envs.make("point_goal_hazards")
    assert isinstance(outer, envs.MaxCostWrapper)
    assert outer.observation_size == inner.observation_size + 1 == 7
    state = jax.jit(outer.reset)(jax.random.key(0))
    assert state.obs.shape == (7,) and state.obs[-1] == 0.0
    assert state.metrics["cost_increment"] == 0.0 and state.info["cost_increment"] == 0.0
    np.testing.assert_array_equal(state.obs[:-1], jax.jit(inner.reset)(jax.random.key(0)).obs)


def test_step_compiles_once():
    # Reset and step return states of one type, so jit(step) traces once (Brax's own envs
    # trace twice, see the design notes).
    env = envs.wrap_for_training(envs.make("point_goal_hazards"), EPISODE_LENGTH)
    step = jax.jit(env.step)
    state = jax.jit(env.reset)(jax.random.split(jax.random.key(0), 4))
    for _ in range(3):
        state = step(state, jnp.zeros((4, 2)))
    assert step._cache_size() == 1


def test_max_cost_wrapper_needs_a_cost():
    env = envs.MaxCostWrapper(envs.PointGoal())
    with pytest.raises(ValueError, match=r"info\['cost'\]"):
        env.reset(jax.random.key(0))


def test_the_wrappers_order_and_keys_are_checked():
    # outside Brax's training wrappers the max never reset and the first step failed in Brax
    inner = envs.make("point_goal_hazards", max_cost=False)
    from envs._brax import training

    outside = envs.MaxCostWrapper(training.wrap(inner, 5))
    with pytest.raises(ValueError, match="MaxCostWrapper must sit inside Brax's training"):
        outside.reset(jax.random.split(jax.random.key(0), 2))
    # one key instead of one per environment failed inside Brax's key handling
    env = envs.wrap_for_training(envs.make("point_goal_hazards"), 10)
    for key in (jax.random.key(0), jax.random.key_data(jax.random.key(0))):
        with pytest.raises(ValueError, match="reset takes one key per environment"):
            env.reset(key)
    # joint indices must be integers: 1.9 and True were read as joint 1
    for indices in ([1.9], [True]):
        with pytest.raises(ValueError, match="joint_indices=.* must be integers"):
            envs.LimitCostWrapper(envs.PointGoal(), (-1.0, 1.0), joint_indices=indices)
    with pytest.raises(ValueError, match=r"height_range=1.0 must be \(low, high\)"):
        envs.LimitCostWrapper(envs.PointGoal(), 1.0)


def test_wrap_for_training_checks_its_input():
    with pytest.raises(ValueError, match="CostWrapper"):
        envs.wrap_for_training(envs.PointGoal(), 10)
    with pytest.raises(ValueError, match="already wrapped"):
        envs.wrap_for_training(envs.wrap_for_training(envs.make("point_goal_hazards"), 10), 10)
    with pytest.raises(ValueError, match="episode_length=0 must be a positive int"):
        envs.wrap_for_training(envs.make("point_goal_hazards"), 0)
    with pytest.raises(ValueError, match="action_repeat=1.5 must be a positive int"):
        envs.wrap_for_training(envs.make("point_goal_hazards"), 10, action_repeat=1.5)


def test_repeats_after_the_end_of_an_episode_change_nothing():
    # Straight at a goal past a hazard: the episode ends at the goal within a repeated step.
    # The repeats after it paid the goal bonus again and met a hazard never reached.
    env = envs.make("point_goal_hazards", centres=[(2.0, 0.0)], size=0.15, start_noise=0.0)
    first_episode = {}
    for repeat in (1, 4):
        wrapped = envs.wrap_for_training(env, 200, action_repeat=repeat)
        state = wrapped.reset(jax.random.split(jax.random.key(1), 1))

        def body(state, _, wrapped=wrapped):
            state = wrapped.step(state, jnp.array([[1.0, 0.0]]))
            metrics = state.info["episode_metrics"]
            return state, (state.info["episode_done"][0], metrics["sum_reward"][0],
                           metrics["cost"][0], metrics["cost_increment"][0])  # fmt: skip

        _, (done, ret, cost, max_cost) = jax.lax.scan(body, state, None, 100 // repeat)
        end = int(np.flatnonzero(np.asarray(done))[0])
        first_episode[repeat] = np.array([ret[end], cost[end], max_cost[end]])
    np.testing.assert_allclose(first_episode[4], first_episode[1], rtol=1e-5, atol=1e-7)
