"""Registry names and errors; episode statistics against numpy."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import envs

EXPECTED_NAMES = {
    "ant_velocity",
    "halfcheetah_velocity",
    "hopper_velocity",
    "walker2d_velocity",
    "ant_goal_hazards",
    "point_goal_hazards",
}


def test_names():
    assert EXPECTED_NAMES <= set(envs.names())
    assert list(envs.names()) == sorted(envs.names())


def test_unknown_name_lists_the_valid_ones():
    with pytest.raises(ValueError, match="unknown environment name='pointgoal'") as error:
        envs.make("pointgoal")
    for name in envs.names():
        assert name in str(error.value)


@pytest.mark.parametrize(
    ("name", "kwargs", "message"),
    [
        ("point_goal_hazards", {"size": 0.0}, r"size=0.0 must be > 0"),
        ("point_goal_hazards", {"size": -1}, r"size=-1 must be > 0"),
        ("point_goal_hazards", {"kind": "hinge"}, r"kind='hinge' must be one of"),
        ("point_goal_hazards", {"centres": [1.0, 2.0]}, r"centres must be xy points"),
        ("point_goal_hazards", {"goal": (1.0, 2.0, 3.0)}, r"goal=\(1.0, 2.0, 3.0\) must be"),
        ("point_goal_hazards", {"dt": 0.0}, r"dt=0.0 must be > 0"),
        ("hopper_velocity", {"threshold": -0.5}, r"threshold=-0.5 must be >= 0"),
        ("hopper_velocity", {"kind": "dense"}, r"kind='dense' must be one of"),
        ("hopper_velocity", {"backend": "warp"}, r"backend='warp' must be one of"),
        ("ant_goal_hazards", {"size": 0}, r"size=0 must be > 0"),
        # a bool read as 1.0; ragged points failed inside numpy without the argument's name
        ("point_goal_hazards", {"size": True}, r"size=True must be a finite number > 0"),
        ("point_goal_hazards", {"centres": [(1, 2), (3,)]}, r"centres must be xy points"),
        ("hopper_velocity", {"threshold": True}, r"threshold=True must be a finite number"),
        # any truthy value added the max-cost augmentation (one more observation entry)
        ("point_goal_hazards", {"max_cost": "no"}, r"max_cost must be True or False, got 'no'"),
        ("point_goal_hazards", {"max_cost": None}, r"max_cost must be True or False, got None"),
    ],
)
def test_bad_options_name_the_argument(name, kwargs, message):
    with pytest.raises(ValueError, match=message):
        envs.make(name, **kwargs)


def test_array_scalars_are_numbers():
    # a 0-d array was refused as "must be a finite number" though it is one
    env = envs.make("point_goal_hazards", size=np.array(0.3))
    assert env.reset(jax.random.key(0)).obs.shape[-1] == env.observation_size


def test_velocity_thresholds_are_safety_gymnasium_v1():
    assert envs.VELOCITY_THRESHOLDS == {
        "ant": 2.6222,
        "halfcheetah": 3.2096,
        "hopper": 0.7402,
        "walker2d": 2.3415,
    }


def test_episode_statistics_match_numpy():
    keys = jax.random.split(jax.random.key(11), 5)
    shape = (50, 8)
    episode_return = np.asarray(jax.random.normal(keys[0], shape)) * 10.0
    episode_length = np.asarray(jax.random.randint(keys[1], shape, 1, 100)).astype(np.float32)
    episode_cost = np.asarray(jax.random.uniform(keys[2], shape)) * episode_length
    episode_max_cost = np.asarray(jax.random.uniform(keys[3], shape))
    completed = np.asarray(jax.random.bernoulli(keys[4], 0.2, shape)).astype(np.float32)
    # Unfinished entries may hold partial sums or garbage; they must not leak into the means.
    episode_return[completed == 0] = np.nan
    stats = jax.jit(envs.episode_statistics)(
        episode_return, episode_cost, episode_max_cost, episode_length, completed, 0.7
    )
    done = completed == 1
    expected = {
        "EpRet": episode_return[done].mean(),
        "EpCost": episode_cost[done].mean(),
        "EpMaxCost": episode_max_cost[done].mean(),
        "EpLen": episode_length[done].mean(),
        "CostRate": episode_cost[done].sum() / episode_length[done].sum(),
        "ViolationProbability": (episode_max_cost[done] > 0.7).mean(),
        "NumEpisodes": done.sum(),
    }
    assert set(stats) == set(expected)
    for name, value in expected.items():
        assert stats[name].shape == () and stats[name].dtype == jnp.float32
        np.testing.assert_allclose(stats[name], value, rtol=1e-5, err_msg=name)


def test_episode_statistics_without_episodes_are_nan():
    zeros = jnp.zeros((4,))
    stats = envs.episode_statistics(zeros, zeros, zeros, zeros, zeros, 0.0)
    assert stats["NumEpisodes"] == 0 and np.isnan(stats["EpRet"])


def test_episode_statistics_check_shapes():
    with pytest.raises(ValueError, match=r"episode_length must have the shape of completed"):
        envs.episode_statistics(
            jnp.zeros(4), jnp.zeros(4), jnp.zeros(4), jnp.zeros(3), jnp.zeros(4), 0.0
        )


def test_episode_statistics_check_a_concrete_cost_limit():
    """A NaN limit would make every episode count as safe (``x > nan`` is false); a negative
    one is no limit on a max cost. A traced limit (here vmapped) is not checked."""
    ones, max_cost = jnp.ones(3), jnp.array([0.0, 1.0, 2.0])
    for limit in (float("nan"), -1.0, float("inf"), np.float32(np.nan), jnp.array(-0.5)):
        with pytest.raises(ValueError, match=r"cost_limit=.* must be finite and >= 0"):
            envs.episode_statistics(ones, ones, max_cost, ones, ones, limit)
    violation = jax.vmap(
        lambda w: envs.episode_statistics(ones, ones, max_cost, ones, ones, w)[
            "ViolationProbability"
        ]
    )(jnp.array([0.0, 1.5]))
    np.testing.assert_allclose(violation, [2 / 3, 1 / 3])
    assert envs.episode_statistics(ones, ones, max_cost, ones, ones, 0)["NumEpisodes"] == 3


def test_a_finished_episode_with_a_nan_max_cost_is_not_counted_safe():
    ones = jnp.ones(2)
    stats = envs.episode_statistics(ones, ones, jnp.array([2.0, jnp.nan]), ones, ones, 1.0)
    assert np.isnan(stats["ViolationProbability"])  # was 0.5: the NaN episode read as safe
    # an unfinished entry may hold anything
    done = jnp.array([1.0, 0.0])
    stats = envs.episode_statistics(ones, ones, jnp.array([2.0, jnp.nan]), ones, done, 1.0)
    assert float(stats["ViolationProbability"]) == 1.0
