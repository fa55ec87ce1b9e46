"""Offline multi-objective datasets: collection with sticky termination and masks, action noise,
preference coverage, the ``.npz`` round trip, and the errors of each bad input."""

import json
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import envs
from envs._brax import Env, State, training

HORIZON = 8


class _StopAt(Env):
    """Terminates on the step that reaches a per-episode stop drawn at reset, in [2, HORIZON + 3).

    The observation is ``[t, stop]`` and the reward vector ``[1, t]``. Stepping past the end
    gives NaN, as a fallen Brax body may, so collect must not step a finished episode.
    """

    reward_names = ("steps", "time")
    reward_size = 2

    def reset(self, rng):
        stop = jax.random.randint(rng, (), 2, HORIZON + 3).astype(jnp.float32)
        zero = jnp.zeros((), jnp.float32)
        return State(
            pipeline_state=None,
            obs=jnp.stack([zero, stop]),
            reward=zero,
            done=zero,
            info={"reward_vector": jnp.zeros((2,), jnp.float32)},
        )

    def step(self, state, action):
        time, stop = state.obs[0], state.obs[1]
        poison = jnp.where(time >= stop, jnp.nan, 0.0)
        vector = jnp.stack([jnp.ones(()), time]) + poison
        next_time = time + 1.0 + poison
        return state.replace(
            obs=jnp.stack([next_time, stop]),
            reward=jnp.sum(vector),
            done=(next_time >= stop).astype(jnp.float32),
            info={**state.info, "reward_vector": vector},
        )

    @property
    def observation_size(self):
        return 2

    @property
    def action_size(self):
        return 1

    @property
    def backend(self):
        return "jax"


def _policy(preference, observation, key):
    """The first weight, shifted to [-0.5, 0.5], as the action."""
    return preference[:1] - 0.5


PREFERENCES = np.array([[1.0, 0.0], [0.25, 0.75], [0.5, 0.5]], np.float32)


def _collect(env=None, policy=_policy, preferences=PREFERENCES, **kwargs):
    arguments = {"key": jax.random.key(0), "episodes_per_preference": 4, "horizon": HORIZON}
    return envs.collect(env or _StopAt(), policy, preferences, **(arguments | kwargs))


@pytest.fixture(scope="module")
def dataset():
    return _collect(metadata={"env": "stop_at", "coverage": "narrow", "seed": 0})


def test_collect_shapes_and_metadata(dataset):
    n = 3 * 4
    assert dataset.observations.shape == dataset.next_observations.shape == (n, HORIZON, 2)
    assert dataset.actions.shape == (n, HORIZON, 1)
    assert dataset.rewards.shape == (n, HORIZON, 2)
    assert dataset.terminals.shape == dataset.mask.shape == (n, HORIZON)
    np.testing.assert_array_equal(dataset.preferences, np.repeat(PREFERENCES, 4, axis=0))
    for name in envs.offline.ARRAY_FIELDS:
        assert getattr(dataset, name).dtype == np.float32
    metadata = dataset.metadata
    assert metadata["env"] == "stop_at" and metadata["coverage"] == "narrow"
    assert metadata["reward_names"] == ["steps", "time"] and metadata["horizon"] == HORIZON
    assert metadata["quality"] == "expert" and metadata["policy"] == "_policy"
    assert metadata["seed"] == 0 and metadata["action_noise"] == 0.0
    json.dumps(metadata)


def test_collect_masks_after_the_termination(dataset):
    stop = dataset.observations[:, 0, 1].astype(int)
    assert (stop <= HORIZON).any() and (stop > HORIZON).any()  # both ends are exercised
    for arrays in dataset[:-1]:
        assert np.all(np.isfinite(arrays))  # the finished episodes were never stepped
    steps = np.arange(HORIZON)[None, :]
    np.testing.assert_array_equal(dataset.mask, steps < stop[:, None])
    np.testing.assert_array_equal(dataset.terminals, steps == stop[:, None] - 1)
    happened = dataset.mask[..., None]
    clock = np.broadcast_to(steps, dataset.mask.shape)
    np.testing.assert_array_equal(
        dataset.rewards, happened * np.stack([np.ones_like(clock), clock], -1)
    )
    # The steps taken see the clock; the padding repeats the terminal observation.
    time = np.minimum(steps, stop[:, None])
    np.testing.assert_array_equal(dataset.observations[..., 0], time)
    np.testing.assert_array_equal(
        dataset.next_observations[..., 0], np.minimum(steps + 1, stop[:, None])
    )
    expected_actions = (dataset.preferences[:, :1] - 0.5)[:, None, :] * happened
    np.testing.assert_array_equal(dataset.actions, expected_actions)
    length = np.minimum(stop, HORIZON)
    expected = np.stack([length, length * (length - 1) / 2], -1)
    np.testing.assert_array_equal(envs.episode_returns(dataset), expected)


def test_action_noise_makes_amateur_data(dataset):
    noisy = _collect(action_noise=2.0)
    assert noisy.metadata["quality"] == "amateur" and noisy.metadata["action_noise"] == 2.0
    taken = noisy.actions[noisy.mask == 1]
    assert np.all(np.abs(taken) <= 1.0) and np.any(np.abs(taken) == 1.0)
    scripted = np.broadcast_to(noisy.preferences[:, None, :1] - 0.5, noisy.actions.shape)
    assert np.std(taken - scripted[noisy.mask == 1]) > 0.5
    # Same key, same episodes: the noise changes the actions only.
    np.testing.assert_array_equal(noisy.mask, dataset.mask)


def test_collections_of_one_env_and_policy_compile_once():
    # each call jitted a fresh closure: every quality, coverage or seed compiled again
    from envs import offline

    env = _StopAt()
    first = _collect(env=env, action_noise=0.5)
    again = _collect(env=env, action_noise=0.5)
    calm = _collect(env=env, action_noise=0.0, key=jax.random.key(1))
    assert offline._rollouts(env, _policy, HORIZON)._cache_size() == 1
    np.testing.assert_array_equal(first.actions, again.actions)
    taken = calm.actions[calm.mask == 1]  # no noise: the scripted actions exactly
    np.testing.assert_array_equal(taken, np.broadcast_to(
        calm.preferences[:, None, :1] - 0.5, calm.actions.shape)[calm.mask == 1])  # fmt: skip


def test_collect_d4morl_grid():
    env = _StopAt()
    grid = envs.collect_d4morl(
        env, _policy, key=jax.random.key(2), num_preferences=5, episodes_per_preference=2,
        horizon=HORIZON, amateur_noise=0.5, metadata={"env": "stop_at"},
    )  # fmt: skip
    assert set(grid) == {(q, c) for q in ("expert", "amateur") for c in ("wide", "narrow")}
    for (quality, coverage), data in grid.items():
        assert data.metadata["quality"] == quality and data.metadata["coverage"] == coverage
        assert data.metadata["env"] == "stop_at"
        assert data.metadata["action_noise"] == (0.5 if quality == "amateur" else 0.0)
        np.testing.assert_array_equal(
            np.unique(data.preferences, axis=0), envs.preference_grid(2, 5, coverage)
        )
        taken = data.actions[data.mask == 1]
        scripted = np.broadcast_to(data.preferences[:, None, :1] - 0.5, data.actions.shape)
        noise = np.abs(taken - scripted[data.mask == 1])
        assert np.all(noise == 0) if quality == "expert" else np.mean(noise) > 0.2
    assert len({tuple(d.metadata["key"]) for d in grid.values()}) == 4  # a key each
    # the same policy, env and horizon: one compilation for the whole grid
    from envs import offline

    assert offline._rollouts(env, _policy, HORIZON)._cache_size() == 1
    drawn = envs.collect_d4morl(
        env, _policy, key=jax.random.key(2), num_preferences=3, episodes_per_preference=1,
        horizon=HORIZON, amateur_noise=0.5, qualities=("expert",), random_preferences=True,
    )  # fmt: skip
    assert set(drawn) == {("expert", "wide"), ("expert", "narrow")}
    wide, narrow = (drawn["expert", c].preferences[:, 0] for c in ("wide", "narrow"))
    assert np.all((narrow >= 0.4) & (narrow <= 0.6))
    # Dirichlet draws, not the lattice, and a draw each: the narrow set is not the wide one
    # shrunk
    assert not np.allclose(np.sort(narrow), envs.preference_grid(2, 3, "narrow")[:, 0])
    assert not np.allclose(narrow, 0.5 + 0.2 * (wide - 0.5))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"qualities": ("expert", "novice")}, r"qualities entry='novice' must be one of"),
        ({"coverages": ("medium",)}, r"coverages entry='medium' must be one of"),
        ({"coverages": ()}, r"coverages must name at least one of \['wide', 'narrow'\]"),
        ({"qualities": ("expert", "expert")}, r"qualities=\('expert', 'expert'\) names one"),
        ({"qualities": "expert"}, r"qualities='expert' must be a sequence of names"),
        ({"amateur_noise": 0.0}, "amateur_noise must be > 0 for amateur data"),
        ({"amateur_noise": -1.0}, r"amateur_noise=-1.0 must be >= 0"),
        ({"metadata": {"quality": "expert"}}, r"metadata must not set \['quality'\]"),
        ({"metadata": {"action_noise": 0.0}}, r"metadata must not set \['action_noise'\]"),
    ],
)
def test_collect_d4morl_checks_its_arguments(kwargs, message):
    arguments = {
        "key": jax.random.key(0), "num_preferences": 3, "episodes_per_preference": 1,
        "horizon": HORIZON, "amateur_noise": 0.5,
    }  # fmt: skip
    with pytest.raises(ValueError, match=message):
        envs.collect_d4morl(_StopAt(), _policy, **(arguments | kwargs))


def test_save_load_round_trip(dataset, tmp_path):
    path = envs.save(dataset, tmp_path / "data.npz")
    assert path == tmp_path / "data.npz"
    loaded = envs.load(path, reward_size=2)
    for name in envs.offline.ARRAY_FIELDS:
        np.testing.assert_array_equal(getattr(loaded, name), getattr(dataset, name))
    assert loaded.metadata == dataset.metadata


def test_scale_rewards_records_the_unit_and_the_label_that_acts_for_given_weights(
    dataset, tmp_path
):
    assert "reward_scale" not in dataset.metadata
    np.testing.assert_array_equal(envs.reward_scale(dataset), [1.0, 1.0])
    np.testing.assert_allclose(envs.behaviour_label(dataset, [3.0, 1.0]), [0.75, 0.25])
    scaled = envs.scale_rewards(dataset, [2.0, 8.0])
    np.testing.assert_allclose(scaled.rewards, np.asarray(dataset.rewards) / [2.0, 8.0])
    np.testing.assert_array_equal(scaled.preferences, dataset.preferences)
    assert scaled.metadata["reward_scale"] == [2.0, 8.0]
    # weights (1, 1) on the scaled rewards weigh the collected ones by (1/2, 1/8)
    np.testing.assert_allclose(envs.behaviour_label(scaled, [1.0, 1.0]), [0.8, 0.2], rtol=1e-6)
    twice = envs.scale_rewards(scaled, 0.5)  # the divisors compose
    assert twice.metadata["reward_scale"] == [1.0, 4.0]
    np.testing.assert_allclose(twice.rewards, np.asarray(dataset.rewards) / [1.0, 4.0])
    loaded = envs.load(envs.save(twice, tmp_path / "scaled.npz"))
    np.testing.assert_array_equal(envs.reward_scale(loaded), [1.0, 4.0])
    for scale in ([1.0, 0.0], [1.0, np.inf], -1.0):
        with pytest.raises(ValueError, match=r"scale=.* must be finite and > 0"):
            envs.scale_rewards(dataset, scale)
    with pytest.raises(ValueError, match=r"scale must be a number or 2 numbers .*shape \(3,\)"):
        envs.scale_rewards(dataset, [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match=r"weights=\[0.0, 0.0\] must be finite, >= 0"):
        envs.behaviour_label(scaled, [0.0, 0.0])
    with pytest.raises(ValueError, match="scale must be a number or 2 numbers.*not an array"):
        envs.scale_rewards(dataset, [[1.0], [1.0, 2.0]])  # ragged
    for bad_scale in ([1.0, -2.0], [1.0], ["2", "8"], [True, 1.0], (1.0, 2.0)):
        bad = dataset._replace(metadata={**dataset.metadata, "reward_scale": bad_scale})
        with pytest.raises(ValueError, match=r"metadata\['reward_scale'\]=.* must be a list of"):
            envs.validate_dataset(bad)
        with pytest.raises(ValueError, match=r"metadata\['reward_scale'\]=.* must be a list of"):
            envs.behaviour_label(bad, [1.0, 1.0])
    with pytest.raises(ValueError, match="metadata must not set 'reward_scale'"):
        _collect(metadata={"reward_scale": [1.0, 1.0]})


def _write(path, dataset, drop=(), **replace):
    arrays = {name: getattr(dataset, name) for name in envs.offline.ARRAY_FIELDS} | replace
    fields = {"metadata": np.asarray(json.dumps(dataset.metadata)), **arrays}
    np.savez(path, **{name: value for name, value in fields.items() if name not in drop})
    return path


def test_load_rejects_bad_files(dataset, tmp_path):
    missing = tmp_path / "missing.npz"
    with pytest.raises(FileNotFoundError, match="missing.npz"):
        envs.load(missing)
    text = tmp_path / "text.npz"
    text.write_text("not an archive")
    with pytest.raises(ValueError, match=r"text.npz is not an .npz archive"):
        envs.load(text)
    no_mask = _write(tmp_path / "no_mask.npz", dataset, drop=("mask",))
    with pytest.raises(ValueError, match=r"lacks the field\(s\) \['mask'\]"):
        envs.load(no_mask)
    bad_preferences = _write(tmp_path / "p.npz", dataset, preferences=dataset.preferences[:5])
    with pytest.raises(ValueError, match=r"preferences must have shape \(12, 2\), got \(5, 2\)"):
        envs.load(bad_preferences)
    rewards = dataset.rewards.copy()
    rewards[0, 0, 1] = np.inf
    with pytest.raises(ValueError, match=r"rewards must be finite; it has 1 non-finite"):
        envs.load(_write(tmp_path / "inf.npz", dataset, rewards=rewards))
    actions = dataset.actions[:, :3]
    with pytest.raises(ValueError, match=r"actions must have shape \(12, 8, act\)"):
        envs.load(_write(tmp_path / "a.npz", dataset, actions=actions))
    with pytest.raises(ValueError, match=r"reward_size=3 does not match the dataset's m=2"):
        envs.load(envs.save(dataset, tmp_path / "ok.npz"), reward_size=3)


def test_validate_dataset_checks_the_padding(dataset):
    mask = dataset.mask.copy()
    mask[:, 0] = 0.0
    with pytest.raises(ValueError, match=r"mask must be non-increasing in time"):
        envs.validate_dataset(dataset._replace(mask=mask))
    with pytest.raises(ValueError, match=r"terminals must hold only 0 and 1"):
        envs.validate_dataset(dataset._replace(terminals=dataset.terminals * 0.5))
    rewards = dataset.rewards + 1.0
    with pytest.raises(ValueError, match=r"rewards must be 0 where mask is 0"):
        envs.validate_dataset(dataset._replace(rewards=rewards))
    # a one-name list; an int crashed on len(), a 2-letter string passed as two names
    for names in (["a"], 2, "ab", [1, 2]):
        metadata = dataset.metadata | {"reward_names": names}
        message = rf"metadata\['reward_names'\]={re.escape(repr(names))} must be a list of m=2"
        with pytest.raises(ValueError, match=message):
            envs.validate_dataset(dataset._replace(metadata=metadata))


def test_validate_dataset_allows_one_terminal_on_the_last_step(dataset):
    """The docstring's rule: mask 1 up to and including the terminal step, 0 after it, so one
    terminal per episode; the error names the first episode that breaks it."""
    # an episode the horizon cut short, without a terminal
    full = int(np.flatnonzero(dataset.mask.all(axis=1) & ~dataset.terminals.any(axis=1))[0])
    terminals = dataset.terminals.copy()
    terminals[full, 2] = 1.0
    with pytest.raises(
        ValueError,
        match=rf"mask must be 0 after an episode's terminal step; episode {full} terminates "
        rf"at step 2 but has mask 1 on {HORIZON - 3} later step\(s\)",
    ):
        envs.validate_dataset(dataset._replace(terminals=terminals))
    ended = int(np.flatnonzero(dataset.terminals.any(axis=1) & (dataset.mask[:, 0] > 0))[0])
    terminals = dataset.terminals.copy()
    terminals[ended, 0] = 1.0
    steps = [0, int(np.flatnonzero(dataset.terminals[ended])[0])]
    with pytest.raises(
        ValueError,
        match=rf"at most one step per episode .*episode {ended} has 2, at steps "
        rf"\[{steps[0]}, {steps[1]}\]",
    ):
        envs.validate_dataset(dataset._replace(terminals=terminals))
    # the last step of a horizon may be terminal: nothing follows it
    terminals = dataset.terminals.copy()
    terminals[full, -1] = 1.0
    envs.validate_dataset(dataset._replace(terminals=terminals))


def test_validate_dataset_rejects_bad_preferences(dataset):
    for row, text in [([-1.0, 2.0], r"\[-1.0, 2.0\]"), ([0.0, 0.0], r"\[0.0, 0.0\]")]:
        preferences = dataset.preferences.copy()
        preferences[5] = row
        with pytest.raises(
            ValueError, match=rf"preferences\[5\]={text} must be >= 0 and not all zero"
        ):
            envs.validate_dataset(dataset._replace(preferences=preferences))


def test_save_refuses_metadata_that_json_would_change(dataset, tmp_path):
    """Tuples come back from JSON as lists and int keys as strings: save refuses them (naming
    each), so what load returns equals what was saved."""
    path = tmp_path / "meta.npz"
    bad = dataset.metadata | {"extra": (1, 2), 3: "x", "nested": {"a": [np.float32(1.0)]}}
    with pytest.raises(ValueError, match=r"metadata must read back unchanged from JSON") as error:
        envs.save(dataset._replace(metadata=bad), path)
    message = str(error.value)
    assert "metadata['extra'] is a tuple, which JSON reads back as a list" in message
    assert "metadata has the key 3 (int), which JSON turns into a string" in message
    assert "metadata['nested']['a'][0] is a float32, which JSON cannot hold" in message
    assert not path.exists()
    good = dataset.metadata | {"extra": [1, 2], "3": "x", "nested": {"a": [1.0, None, True]}}
    loaded = envs.load(envs.save(dataset._replace(metadata=good), path))
    assert loaded.metadata == good


def test_collect_rejects_bad_inputs():
    cases = [
        ({"preferences": [[1.0, 0.0, 0.0]]}, r"preferences\[0\] must have shape \(2,\)"),
        ({"preferences": [1.0, 0.0]}, r"preferences must be \(P, 2\) with P >= 1"),
        (
            {"preferences": [[1.0, 0.0], [0.0, 0.0]]},
            r"preferences\[1\]=\[0.0, 0.0\] must be finite, >= 0",
        ),
        ({"episodes_per_preference": 0}, r"episodes_per_preference=0 must be a positive int"),
        ({"horizon": -2}, r"horizon=-2 must be a positive int"),
        ({"action_noise": -0.1}, r"action_noise=-0.1 must be >= 0"),
        ({"metadata": {"horizon": 3}}, r"metadata\['horizon'\]=3 contradicts the collection's 8"),
        # the key was replaced without a word
        ({"metadata": {"key": [7, 7]}}, r"metadata\['key'\]=\[7, 7\] contradicts the collection's"),
        (
            {"metadata": {"policy": object()}},
            r"metadata must read back unchanged from JSON .*metadata\['policy'\] is a object",
        ),
        ({"metadata": {"seed": (1, 2)}}, r"metadata\['seed'\] is a tuple"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=message):
            _collect(**kwargs)
    with pytest.raises(ValueError, match=r"env must be a multi-objective environment"):
        _collect(env=envs.PointGoal())
    with pytest.raises(ValueError, match=r"env is wrapped for training"):
        _collect(env=training.wrap(_StopAt(), 4))
    with pytest.raises(ValueError, match=r"policy returned an action of shape \(2,\), expected"):
        _collect(policy=lambda preference, observation, key: preference)


def test_preference_grid_wide_and_narrow():
    wide = envs.preference_grid(2, 5)
    np.testing.assert_allclose(wide[:, 0], np.linspace(0.0, 1.0, 5))
    np.testing.assert_allclose(wide.sum(-1), 1.0, rtol=1e-6)
    narrow = envs.preference_grid(2, 5, "narrow")
    np.testing.assert_allclose(narrow[:, 0], np.linspace(0.4, 0.6, 5), rtol=1e-6)
    lattice = envs.preference_grid(3, 4)  # entries in {0, 1/3, 2/3, 1}
    assert lattice.shape == (10, 3) and wide.dtype == np.float32
    assert len({tuple(row) for row in np.round(lattice * 3).astype(int)}) == 10
    np.testing.assert_allclose(lattice.sum(-1), 1.0, rtol=1e-6)
    assert lattice.min() == 0.0 and lattice.max() == 1.0
    drawn = envs.preference_grid(3, 200, key=jax.random.key(1))
    assert drawn.shape == (200, 3) and drawn.min() >= 0.0
    np.testing.assert_allclose(drawn.sum(-1), 1.0, rtol=1e-5)
    assert drawn.max() > 0.8  # wide draws reach near the corners
    close = envs.preference_grid(3, 200, "narrow", key=jax.random.key(1))
    np.testing.assert_allclose(
        close, 1 / 3 + envs.offline.NARROW_SHRINK * (drawn - 1 / 3), atol=1e-6
    )
    assert np.abs(close - 1 / 3).max() <= envs.offline.NARROW_SHRINK * (2 / 3) + 1e-6


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((1, 5), {}, r"m=1 must be >= 2 objectives"),
        ((2, 1), {}, r"num=1 must be >= 2 lattice points per edge"),
        ((2, 0), {}, r"num=0 must be a positive int"),
        ((2, 5), {"coverage": "uniform"}, r"coverage='uniform' must be one of"),
    ],
)
def test_preference_grid_checks_its_arguments(args, kwargs, message):
    with pytest.raises(ValueError, match=message):
        envs.preference_grid(*args, **kwargs)
