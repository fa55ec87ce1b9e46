"""Multi-objective environments: the vector-reward and scalarising wrappers, the accumulated
return of the AET augmented state across Brax's automatic resets and its offline twin, the
balance task's statistics and Pareto front, one Brax body's objectives, and the registry."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import envs
from envs._brax import training

NUM_ENVS, STEPS, EPISODE_LENGTH = 4, 40, 10


def _point_components():
    return {
        "progress": lambda state, action, next_state: next_state.reward,
        "energy": lambda state, action, next_state: envs.energy_efficiency(action),
    }


def _point_task():
    """Point mass with (progress, energy) rewards and a near goal: episodes end both ways."""
    point = envs.PointGoal(goal=(0.3, 0.0), goal_radius=0.1)
    return envs.VectorRewardWrapper(point, _point_components())


def _pushed_actions(key, shape):
    """Uniform actions pushed towards +x, so the point reaches the goal within some episodes."""
    push = jnp.broadcast_to(jnp.array([0.9, 0.0]), shape)
    return jax.random.uniform(key, shape, minval=-1.0, maxval=1.0) + push


@pytest.fixture(
    scope="module",
    params=["balance", "point"],
    ids=["balance (truncations)", "point (terminations and truncations)"],
)
def auto_reset_trace(request):
    scale = np.array([2.0, 0.5], np.float32)
    inner = envs.BalanceTask() if request.param == "balance" else _point_task()
    env = training.wrap(envs.AccumulatedReturnWrapper(inner, EPISODE_LENGTH, scale), EPISODE_LENGTH)
    action_size = env.action_size

    def run(key):
        reset_key, action_key = jax.random.split(key)
        state = env.reset(jax.random.key_data(jax.random.split(reset_key, NUM_ENVS)))

        def body(state, key):
            if action_size == 2:
                action = _pushed_actions(key, (NUM_ENVS, 2))
            else:
                action = jax.random.uniform(key, (NUM_ENVS, 1), minval=-1.0, maxval=1.0)
            state = env.step(state, action)
            return state, {
                "obs": state.obs,
                "reward_vector": state.info["reward_vector"],
                "done": state.done,
                "truncation": state.info["truncation"],
            }

        return state.obs, jax.lax.scan(body, state, jax.random.split(action_key, STEPS))[1]

    first, trace = jax.tree.map(np.asarray, jax.jit(run)(jax.random.key(1)))
    return env, scale, first, trace


def test_accumulated_return_restarts_at_each_auto_reset(auto_reset_trace):
    env, scale, first, trace = auto_reset_trace
    # Forwarded through Brax's wrappers.
    assert env.reward_names in (("left", "right"), ("progress", "energy"))
    assert env.reward_size == 2
    np.testing.assert_array_equal(first[:, -3:], 0.0)
    obs, vector, done = trace["obs"], trace["reward_vector"], trace["done"]
    episodes = 0
    for index in range(NUM_ENVS):
        total, steps = np.zeros(2, np.float32), 0
        for t in range(STEPS):
            total, steps = total + vector[t, index] / scale, steps + 1
            if done[t, index]:
                # The auto-reset restored the first observation: x = 0 and t = 0.
                np.testing.assert_array_equal(obs[t, index, -3:], 0.0)
                total, steps, episodes = np.zeros(2, np.float32), 0, episodes + 1
            else:
                np.testing.assert_allclose(obs[t, index, -3:-1], total, rtol=1e-6, atol=1e-6)
                np.testing.assert_allclose(obs[t, index, -1], steps / EPISODE_LENGTH, rtol=1e-6)
    assert episodes >= NUM_ENVS * (STEPS // EPISODE_LENGTH)
    terminated = done.astype(bool) & (trace["truncation"] == 0)
    if env.action_size == 2:  # the point task: some episodes end at the goal, some time out
        assert terminated.any() and trace["truncation"].any()


@pytest.mark.parametrize(
    ("scale", "exact"), [((0.25, 2.0), True), ((0.3, 1.7), False)], ids=["scale=2^k", "scale"]
)
def test_augment_observations_matches_the_wrapper(scale, exact):
    horizon, scale = 12, np.array(scale, np.float32)
    env = envs.AccumulatedReturnWrapper(_point_task(), horizon, scale)
    assert env.observation_size == 6 + 2 + 1

    def policy(preference, observation, key):
        return _pushed_actions(key, (2,)) * preference[0]

    dataset = envs.collect(
        env, policy, [[1.0, 0.0]], key=jax.random.key(2), episodes_per_preference=6, horizon=12
    )
    augmented, next_augmented = envs.augment_observations(
        dataset.observations[..., :6],
        dataset.next_observations[..., :6],
        dataset.rewards,
        horizon,
        scale,
    )
    augmented, next_augmented = np.asarray(augmented), np.asarray(next_augmented)
    happened = dataset.mask == 1
    assert 0 < np.count_nonzero(dataset.terminals) and not happened.all()
    pairs = [(augmented, dataset.observations), (next_augmented, dataset.next_observations)]
    for actual, expected in pairs:
        # The observations and the time agree bitwise; the scaled return, bitwise when the
        # scale is a power of two, else within float32 rounding (XLA's division by a constant).
        np.testing.assert_array_equal(actual[happened][:, :6], expected[happened][:, :6])
        np.testing.assert_array_equal(actual[happened][:, -1], expected[happened][:, -1])
        if exact:
            np.testing.assert_array_equal(actual[happened], expected[happened])
        else:
            np.testing.assert_allclose(actual[happened], expected[happened], rtol=1e-6, atol=1e-7)
    # Padding keeps the return and advances the time.
    np.testing.assert_array_equal(augmented[:, 1:, 6:8], next_augmented[:, :-1, 6:8])
    np.testing.assert_allclose(augmented[0, :, -1], np.arange(horizon) / horizon, rtol=1e-6)


def _balance_trace(slip, choose_left, steps=200, num_envs=64):
    env = envs.BalanceTask(slip=slip)

    def run(key):
        reset_key, action_key = jax.random.split(key)
        state = jax.vmap(env.reset)(jax.random.split(reset_key, num_envs))

        def body(state, key):
            if choose_left:
                action = jnp.ones((num_envs, 1))
            else:
                action = jax.random.uniform(key, (num_envs, 1), minval=-1.0, maxval=1.0)
            next_state = jax.vmap(env.step)(state, action)
            chosen_left = action[:, 0] > 0
            return next_state, (
                next_state.info["reward_vector"],
                next_state.metrics["slipped"],
                chosen_left,
                next_state.done,
                next_state.obs,
            )

        return jax.lax.scan(body, state, jax.random.split(action_key, steps))[1]

    return jax.tree.map(np.asarray, jax.jit(run)(jax.random.key(3)))


def _within(frequency, probability, count, deviations=5.0):
    """|frequency - probability| within ``deviations`` binomial standard deviations."""
    sigma = np.sqrt(probability * (1 - probability) / count)
    return abs(frequency - probability) <= deviations * sigma


@pytest.mark.parametrize("slip", [0.3, 0.7])
def test_balance_task_slips_at_the_rate_given(slip):
    vector, slipped, chosen_left, done, obs = _balance_trace(slip, choose_left=False)
    count = slipped.size
    np.testing.assert_array_equal(vector.sum(-1), 1.0)
    assert set(np.unique(vector)) == {0.0, 1.0}
    np.testing.assert_array_equal(done, 0.0)
    np.testing.assert_array_equal(obs, 1.0)
    assert _within(slipped.mean(), slip, count)
    # The unit misses the chosen objective only on a slip, half the time.
    missed = vector[..., 0] != chosen_left
    assert not missed[slipped == 0].any()
    assert _within(missed.mean(), slip / 2, count)


def test_balance_task_always_left_earns_the_expected_return():
    slip = 0.3
    vector, *_ = _balance_trace(slip, choose_left=True)
    left = (1 - slip) + slip / 2
    assert _within(vector[..., 0].mean(), left, vector[..., 0].size)
    front = envs.BalanceTask(slip=slip).pareto_front(200, 5)
    np.testing.assert_allclose(front[-1] / 200, [left, 1 - left])


def test_balance_task_pareto_front():
    front = envs.BalanceTask(slip=0.2).pareto_front(10, 3)
    np.testing.assert_allclose(front, [[1.0, 9.0], [5.0, 5.0], [9.0, 1.0]])
    np.testing.assert_allclose(front.sum(-1), 10.0)
    assert envs.BalanceTask().pareto_front(4, 7).shape == (7, 2)
    with pytest.raises(ValueError, match=r"horizon=0 must be a positive int"):
        envs.BalanceTask().pareto_front(0, 3)
    with pytest.raises(ValueError, match=r"slip=1.5 must be a probability in \[0, 1\]"):
        envs.BalanceTask(slip=1.5)


def test_vector_and_scalarized_rewards_on_the_point_task():
    env = envs.ScalarizedRewardWrapper(_point_task(), [0.25, 2.0])
    assert env.reward_names == ("progress", "energy") and env.reward_size == 2
    state = jax.jit(env.reset)(jax.random.key(4))
    np.testing.assert_array_equal(state.info["reward_vector"], [0.0, 0.0])
    assert state.metrics["reward_progress"] == 0.0 and state.reward == 0.0
    action = jnp.array([0.5, -2.0])
    inner = envs.PointGoal(goal=(0.3, 0.0), goal_radius=0.1)
    inner_state = jax.jit(inner.step)(inner.reset(jax.random.key(4)), action)
    state = jax.jit(env.step)(state, action)
    expected = np.array([inner_state.reward, 1 - (0.25 + 1.0) / 2], np.float32)
    np.testing.assert_allclose(state.info["reward_vector"], expected, rtol=1e-6)
    np.testing.assert_allclose(state.metrics["reward_energy"], expected[1], rtol=1e-6)
    np.testing.assert_allclose(state.reward, expected @ [0.25, 2.0], rtol=1e-6)
    unweighted = jax.jit(_point_task().step)(_point_task().reset(jax.random.key(4)), action)
    np.testing.assert_allclose(unweighted.reward, expected.sum(), rtol=1e-6)


def test_energy_efficiency_is_bounded():
    actions = jnp.array([[0.0, 0.0], [1.0, -1.0], [3.0, 0.5], [-0.5, 0.5]])
    np.testing.assert_allclose(envs.energy_efficiency(actions), [1.0, 0.0, 0.375, 0.75])


def _rollout(env, steps, num_envs, extra):
    """Random actions in [-1.5, 1.5] for ``steps`` steps in one jitted scan: the first state
    and, per step, the reward vector, metrics, reward, action and ``extra(state, new)``."""

    def run(key):
        reset_key, action_key = jax.random.split(key)
        state = jax.vmap(env.reset)(jax.random.split(reset_key, num_envs))

        def body(state, key):
            shape = (num_envs, env.action_size)
            action = jax.random.uniform(key, shape, minval=-1.5, maxval=1.5)
            new = jax.vmap(env.step)(state, action)
            return new, {
                "vector": new.info["reward_vector"],
                "metrics": new.metrics,
                "reward": new.reward,
                "action": action,
                **extra(state, new),
            }

        return state, jax.lax.scan(body, state, jax.random.split(action_key, steps))[1]

    return jax.tree.map(np.asarray, jax.jit(run)(jax.random.key(5)))


@pytest.fixture(scope="module")
def hopper():
    env = envs.make_multi_objective("mo_hopper", backend="spring")
    first, trace = _rollout(env, 15, 3, lambda _, new: {"rise": new.pipeline_state.q[:, 1]})
    return env, first, trace


def test_brax_hopper_objectives(hopper):
    env, first, trace = hopper
    assert env.reward_names == ("forward", "height", "energy") and env.reward_size == 3
    # (env.observation_size would run an unjitted Brax reset, which takes seconds.)
    assert first.obs.shape == (3, 11) and env.action_size == 3
    np.testing.assert_array_equal(first.info["reward_vector"], 0.0)
    vector, metrics = trace["vector"], trace["metrics"]
    assert vector.shape == (15, 3, 3) and vector.dtype == np.float32
    assert np.all(np.isfinite(vector))
    energy = 1.0 - np.mean(np.clip(trace["action"], -1.0, 1.0) ** 2, axis=-1)
    np.testing.assert_allclose(vector[..., 2], energy, rtol=1e-6, atol=1e-6)
    assert np.all((vector[..., 2] >= 0.0) & (vector[..., 2] <= 1.0))
    healthy = metrics["reward_healthy"]
    np.testing.assert_array_equal(healthy, 1.0)
    np.testing.assert_allclose(vector[..., 0], metrics["x_velocity"] + healthy, rtol=1e-6)
    np.testing.assert_allclose(vector[..., 1], 10.0 * trace["rise"] + healthy, rtol=1e-5)
    for index, name in enumerate(env.reward_names):
        np.testing.assert_array_equal(metrics[f"reward_{name}"], vector[..., index])
    np.testing.assert_allclose(trace["reward"], vector.sum(-1), rtol=1e-6)


@pytest.mark.parametrize(
    ("name", "names"),
    [("mo_halfcheetah", ("run", "energy")), ("mo_ant", ("forward", "lateral", "energy"))],
)
def test_brax_halfcheetah_and_ant_objectives(name, names):
    # the velocities checked against the torso's displacement over a step, not only
    # against Brax's metrics of the same name
    env = envs.make_multi_objective(name, backend="spring")
    steps, num_envs = 10, 2

    def torso(state, new):
        return {
            "before": state.pipeline_state.x.pos[:, 0, :2],
            "after": new.pipeline_state.x.pos[:, 0, :2],
        }

    _, trace = _rollout(env, steps, num_envs, torso)
    assert env.reward_names == names and env.reward_size == len(names)
    vector, metrics = trace["vector"], trace["metrics"]
    assert vector.shape == (steps, num_envs, len(names)) and np.all(np.isfinite(vector))
    velocity = (trace["after"] - trace["before"]) / float(env.dt)
    energy = 1.0 - np.mean(np.clip(trace["action"], -1.0, 1.0) ** 2, axis=-1)
    np.testing.assert_allclose(vector[..., -1], energy, rtol=1e-6, atol=1e-6)
    if name == "mo_halfcheetah":
        np.testing.assert_allclose(vector[..., 0], velocity[..., 0], rtol=1e-5, atol=1e-5)
    else:  # the ant's survival bonus enters both movement objectives
        survive = metrics["reward_survive"]
        np.testing.assert_array_equal(survive, 1.0)
        np.testing.assert_allclose(vector[..., 0], velocity[..., 0] + survive, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(vector[..., 1], velocity[..., 1] + survive, rtol=1e-5, atol=1e-5)
    for index, objective in enumerate(names):
        np.testing.assert_array_equal(metrics[f"reward_{objective}"], vector[..., index])
    np.testing.assert_allclose(trace["reward"], vector.sum(-1), rtol=1e-5)


def test_registry():
    assert envs.multi_objective_names() == ("mo_ant", "mo_balance", "mo_halfcheetah", "mo_hopper")
    assert isinstance(envs.make_multi_objective("mo_balance", slip=0.1), envs.BalanceTask)
    with pytest.raises(ValueError, match="unknown multi-objective environment name='mo_'") as error:
        envs.make_multi_objective("mo_")
    for name in envs.multi_objective_names():
        assert name in str(error.value)


@pytest.mark.parametrize(
    ("name", "kwargs", "message"),
    [
        ("mo_balance", {"slip": -0.1}, r"slip=-0.1 must be >= 0"),
        ("mo_hopper", {"backend": "warp"}, r"backend='warp' must be one of"),
        ("mo_hopper", {"height_weight": -1.0}, r"height_weight=-1.0 must be >= 0"),
        ("mo_ant", {"backend": "brax"}, r"backend='brax' must be one of"),
        ("mo_halfcheetah", {"backend": ""}, r"backend='' must be one of"),
        # weights of Brax's scalar reward, which no objective reads: they changed nothing
        ("mo_hopper", {"ctrl_cost_weight": 1000.0}, r"ctrl_cost_weight weight Brax's scalar"),
        ("mo_halfcheetah", {"forward_reward_weight": 0.0}, r"forward_reward_weight weight"),
    ],
)
def test_bad_options_name_the_argument(name, kwargs, message):
    with pytest.raises(ValueError, match=message):
        envs.make_multi_objective(name, **kwargs)


def test_wrappers_check_their_arguments():
    task = envs.BalanceTask()
    with pytest.raises(ValueError, match=r"components=\{\} must be a non-empty mapping"):
        envs.VectorRewardWrapper(envs.PointGoal(), {})
    with pytest.raises(ValueError, match=r"components key 'a b' must be an identifier"):
        envs.VectorRewardWrapper(envs.PointGoal(), {"a b": lambda *_: 0.0})
    with pytest.raises(ValueError, match=r"components\['a'\]=1 must be callable"):
        envs.VectorRewardWrapper(envs.PointGoal(), {"a": 1})
    bad_shape = envs.VectorRewardWrapper(envs.PointGoal(), {"a": lambda s, a, n: n.obs})
    with pytest.raises(ValueError, match=r"component 'a' returned shape \(6,\); expected"):
        bad_shape.step(bad_shape.reset(jax.random.key(0)), jnp.zeros(2))
    for weights, message in [
        ([1.0], r"weights must have shape \(2,\), one per objective, got \(1,\)"),
        ([1.0, -0.5], r"weights=\[1.0, -0.5\] must be finite, >= 0 and not all zero"),
        ([0.0, 0.0], r"weights=\[0.0, 0.0\] must be finite"),
        ([np.nan, 1.0], r"weights=\[nan, 1.0\] must be finite"),
    ]:
        with pytest.raises(ValueError, match=message):
            envs.ScalarizedRewardWrapper(task, weights)
    with pytest.raises(ValueError, match=r"env must be a multi-objective environment"):
        envs.ScalarizedRewardWrapper(envs.PointGoal(), [1.0])
    with pytest.raises(ValueError, match=r"env must be a multi-objective environment"):
        envs.AccumulatedReturnWrapper(envs.PointGoal(), 10)
    with pytest.raises(ValueError, match=r"horizon=0 must be a positive int"):
        envs.AccumulatedReturnWrapper(task, 0)
    with pytest.raises(ValueError, match=r"horizon=2.5 must be a positive int"):
        envs.AccumulatedReturnWrapper(task, 2.5)
    with pytest.raises(ValueError, match=r"scale=\[1.0, 0.0\] must be finite and > 0"):
        envs.AccumulatedReturnWrapper(task, 10, scale=[1.0, 0.0])
    with pytest.raises(ValueError, match=r"scale must be a number or 2 numbers .*shape \(3,\)"):
        envs.AccumulatedReturnWrapper(task, 10, scale=[1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match=r"scale must be a number or 2 numbers .*not an array"):
        envs.AccumulatedReturnWrapper(task, 10, scale=[[1.0], [1.0, 2.0]])  # ragged: numpy's


def test_augment_observations_checks_shapes():
    observations, rewards = np.zeros((2, 5, 3)), np.zeros((2, 5, 2))
    with pytest.raises(ValueError, match=r"must be \(N, T, obs\) and \(N, T, m\)"):
        envs.augment_observations(observations[0], observations[0], rewards, 5)
    with pytest.raises(ValueError, match=r"next_observations must have the shape"):
        envs.augment_observations(observations, observations[:, :4], rewards, 5)
    with pytest.raises(ValueError, match=r"rewards must share \(N, T\) with observations"):
        envs.augment_observations(observations, observations, rewards[:, :4], 5)
    with pytest.raises(ValueError, match=r"horizon=-1 must be a positive int"):
        envs.augment_observations(observations, observations, rewards, -1)
    augmented, next_augmented = envs.augment_observations(
        observations, observations, np.ones((2, 5, 2)), 5, scale=2.0
    )
    assert augmented.shape == next_augmented.shape == (2, 5, 6)
    np.testing.assert_allclose(next_augmented[0, :, 3], np.arange(1, 6) / 2.0)


def test_preference_conditioned_wrapper_keeps_each_slot_preference_across_resets():
    preferences = np.array([[1.0, 0.0], [0.2, 0.8], [0.5, 0.5]], np.float32)
    env = training.wrap(
        envs.PreferenceConditionedWrapper(envs.BalanceTask(), preferences), EPISODE_LENGTH
    )
    assert env.observation_size == 1 + 2

    @jax.jit
    def run(key):
        state = env.reset(jax.random.key_data(jax.random.split(key, 16)))
        first = state.obs[:, 1:]

        def body(state, key):
            action = jax.random.uniform(key, (16, 1), minval=-1.0, maxval=1.0)
            state = env.step(state, action)
            return state, (state.obs[:, 1:], state.reward, state.info["reward_vector"])

        _, (prefs, rewards, vectors) = jax.lax.scan(body, state, jax.random.split(key, 35))
        return first, prefs, rewards, vectors

    first, prefs, rewards, vectors = run(jax.random.key(7))
    # every slot holds a convex combination of the preferences (rows on the simplex, so
    # weights >= 0 summing to 1), and keeps it over 3 automatic resets
    assert np.all(np.asarray(first) >= 0)
    np.testing.assert_allclose(np.asarray(first).sum(-1), 1.0, rtol=1e-5)
    np.testing.assert_array_equal(np.asarray(prefs), np.broadcast_to(first, prefs.shape))
    assert len({tuple(row) for row in np.asarray(first)}) > 1
    expected = jnp.sum(vectors * prefs, axis=-1)
    np.testing.assert_allclose(np.asarray(rewards), np.asarray(expected), rtol=1e-6)


def test_preference_conditioned_wrapper_draws_rows_or_mixtures():
    # It could only mix the rows with Dirichlet(1) weights, which gather near the rows' mean
    # (its docstring said they cover the hull): on the five-row grid of two objectives a first
    # weight above 0.9 comes up in 0.1% of draws, so the end rows are hardly ever trained.
    rows = envs.preference_grid(2, 5, "wide")
    keys = jax.random.split(jax.random.key(3), 4000)

    def drawn(sampling):
        env = envs.PreferenceConditionedWrapper(envs.BalanceTask(), rows, sampling)
        return np.asarray(jax.jit(jax.vmap(env.reset))(keys).obs[:, 1:])

    picked = drawn("rows")
    index = np.argmin(np.abs(picked[:, None, 0] - rows[None, :, 0]), axis=1)
    np.testing.assert_array_equal(picked, rows[index].astype(np.float32))
    counts = np.bincount(index, minlength=len(rows))
    # uniform over the 5 rows: each count is Binomial(4000, 1/5), sd sqrt(4000 * 0.16) = 25.3
    assert np.all(np.abs(counts - 800) < 5 * 25.3), counts
    mixed = drawn("mixture")[:, 0]
    # the first weight of a Dirichlet(1) mixture of the rows: mean 1/2, sd 0.144; the sample
    # sd's own sd is about 0.144 / sqrt(2 * 4000) < 0.002
    assert abs(mixed.mean() - 0.5) < 5 * 0.144 / np.sqrt(4000)
    assert abs(mixed.std() - 0.1442) < 0.01
    assert np.mean(mixed > 0.9) < 0.005
    assert envs.PreferenceConditionedWrapper(envs.BalanceTask(), rows).sampling == "mixture"
    with pytest.raises(ValueError, match=r"sampling must be one of \('mixture', 'rows'\)"):
        envs.PreferenceConditionedWrapper(envs.BalanceTask(), rows, "hull")


def test_preference_conditioned_wrapper_rejects_bad_preferences():
    with pytest.raises(ValueError, match=r"preferences must be \(P, 2\)"):
        envs.PreferenceConditionedWrapper(envs.BalanceTask(), [1.0, 0.0])
    with pytest.raises(ValueError, match=r"preferences\[1\].*not all zero"):
        envs.PreferenceConditionedWrapper(envs.BalanceTask(), [[1.0, 0.0], [0.0, 0.0]])


def test_reward_scale_wrapper_divides_the_vector_and_its_metrics():
    env = envs.RewardScaleWrapper(envs.BalanceTask(slip=0.0), [2.0, 4.0])
    state = env.step(env.reset(jax.random.key(0)), jnp.array([1.0]))
    np.testing.assert_allclose(np.asarray(state.info["reward_vector"]), [0.5, 0.0])
    assert float(state.metrics["reward_left"]) == 0.5
    assert float(state.reward) == 0.5
    with pytest.raises(ValueError, match="scale=.*must be finite and > 0"):
        envs.RewardScaleWrapper(envs.BalanceTask(), [1.0, 0.0])


def test_reward_scale_keeps_an_inner_weighting_in_either_order():
    """Scaling and weighting commute: the reward is ``w . (r / scale)`` whichever wraps the
    other. With ``w = (0.25, 0.75)`` and ``scale = (2, 4)``: ``left`` (r = (1, 0)) pays
    0.25 * 1/2 = 0.125 and ``right`` (r = (0, 1)) 0.75 * 1/4 = 0.1875 (exact in float32)."""
    base, weights, scale = envs.BalanceTask(slip=0.0), [0.25, 0.75], [2.0, 4.0]
    built = {
        "scale(scalarized)": envs.RewardScaleWrapper(
            envs.ScalarizedRewardWrapper(base, weights), scale
        ),
        "scalarized(scale)": envs.ScalarizedRewardWrapper(
            envs.RewardScaleWrapper(base, scale), weights
        ),
        # one preference row: the reset's Dirichlet mix of one row is that row
        "scale(preference)": envs.RewardScaleWrapper(
            envs.PreferenceConditionedWrapper(base, [weights]), scale
        ),
        "preference(scale)": envs.PreferenceConditionedWrapper(
            envs.RewardScaleWrapper(base, scale), [weights]
        ),
    }
    for name, env in built.items():
        step = jax.jit(env.step)
        for action, vector, reward in [(1.0, [0.5, 0.0], 0.125), (-1.0, [0.0, 0.25], 0.1875)]:
            state = step(env.reset(jax.random.key(0)), jnp.array([action]))
            np.testing.assert_array_equal(state.info["reward_vector"], vector, err_msg=name)
            assert float(state.reward) == reward, (name, action, float(state.reward))
    # the outermost weighting rules, scaled by every scale around it
    nested = envs.RewardScaleWrapper(
        envs.ScalarizedRewardWrapper(built["scale(scalarized)"], [1.0, 0.0]), 0.5
    )
    state = nested.step(nested.reset(jax.random.key(0)), jnp.array([1.0]))
    assert float(state.reward) == 1.0  # 1 * (1 / 2 / 0.5)
    # new objectives drop the old weights: the reward is their plain sum again
    renamed = envs.VectorRewardWrapper(
        built["scale(scalarized)"], {"a": lambda s, a, n: n.info["reward_vector"][0]}
    )
    state = renamed.step(renamed.reset(jax.random.key(0)), jnp.array([1.0]))
    assert "reward_weights" not in state.info and float(state.reward) == 0.5
