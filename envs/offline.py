"""D4MORL-like offline datasets for multi-objective RL: collection, preference coverage, files.

D4MORL (Zhu, Dang & Grover, "Scaling Pareto-efficient decision making via offline
multi-objective RL", ICLR 2023) records episodes of preference-conditioned behaviour policies
with their reward vectors and preferences, in "expert" (the policies as trained) and "amateur"
(perturbed) quality and with narrow or wide preference coverage. Here:

- :class:`OfflineDataset` holds fixed-length, episode-shaped arrays with a mask;
- :func:`collect` rolls a policy out at given preferences, with Gaussian action noise for
  amateur data;
- :func:`preference_grid` makes wide or narrow preference sets;
- :func:`collect_d4morl` collects D4MORL's grid: expert and amateur data at wide and narrow
  coverage;
- :func:`save` / :func:`load` write and read ``.npz`` files, :func:`validate_dataset` checks one;
- :func:`episode_returns` sums the vector returns;
- :func:`scale_rewards` divides each objective's rewards by a unit and records it, so that
  :func:`behaviour_label` can still say which behaviour preference acts for given weights on
  the scaled rewards.
"""

from __future__ import annotations

import functools
import itertools
import json
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from envs._brax import Env, Wrapper, training
from envs._checks import check_kind, check_nonnegative
from envs.multi_objective import (
    check_positive_int,
    check_scale,
    check_weights,
    reward_names_of,
)

Policy = Callable[[jax.Array, jax.Array, jax.Array], jax.Array]
"""``policy(preference (m,), observation (obs,), key) -> action (act,)``, jit-traceable."""

COVERAGES = ("wide", "narrow")
QUALITIES = ("expert", "amateur")  # D4MORL's: the behaviour policy as it is, and perturbed
# A narrow preference set is the wide one shrunk towards the uniform preference by this
# factor: for two objectives, the first weight spans [0.4, 0.6] instead of [0, 1].
NARROW_SHRINK = 0.2
# Fields collect sets from its arguments; metadata may repeat them only with the same value.
_MEASURED = ("reward_names", "horizon", "episodes_per_preference", "action_noise", "key")
# metadata entry: the per-objective divisor of the rewards since collection (scale_rewards)
REWARD_SCALE = "reward_scale"


class OfflineDataset(NamedTuple):
    """Episodes of ``T`` steps, padded after a termination; float32 numpy arrays.

    ``mask`` is 1 on the steps that happened, up to and including the terminal one, and 0 on the
    padding after it, whose rewards, actions and terminals are 0 and whose observations and next
    observations both repeat the episode's final observation. The observations are the
    environment's own, not augmented (see :func:`envs.augment_observations`). ``jax.tree.map``
    over a dataset also visits the metadata's values; map over ``dataset[:-1]`` for the arrays
    alone.
    """

    observations: np.ndarray  # (N, T, obs): s_t
    actions: np.ndarray  # (N, T, act): a_t, as taken (noise included, clipped to [-1, 1])
    rewards: np.ndarray  # (N, T, m): reward vectors r_t, 0 on padding
    next_observations: np.ndarray  # (N, T, obs): s_{t+1}
    terminals: np.ndarray  # (N, T): 1 on the step whose transition ended the episode (done)
    mask: np.ndarray  # (N, T): 1 on steps that happened, 0 on padding
    preferences: np.ndarray  # (N, m): the behaviour policy's preference for each episode
    # JSON values that read back unchanged (string keys, lists not tuples): env, reward_names,
    # horizon, quality, coverage, policy, seed, ...
    metadata: dict


ARRAY_FIELDS = OfflineDataset._fields[:-1]
# validate_dataset: how far past [-1, 1] an action may lie (rounding of a rescaled action)
ACTION_TOLERANCE = 1e-6


def episode_returns(dataset: OfflineDataset) -> jax.Array:
    """Summed vector return of each episode over the steps that happened, ``(N, m)``."""
    rewards = jnp.asarray(dataset.rewards, jnp.float32)
    return jnp.sum(jnp.where(jnp.asarray(dataset.mask)[..., None] > 0, rewards, 0.0), axis=1)


def preference_grid(m: int, num: int, coverage: str = "wide", key=None) -> np.ndarray:
    """Preferences on the simplex ``{w >= 0, sum w = 1}``, spread wide or narrow.

    Without ``key``: the simplex lattice, every ``w`` with entries in
    ``{0, 1/(num-1), ..., 1}``, ``C(num + m - 2, m - 1)`` rows (``num`` for ``m = 2``, ordered
    by increasing first weight). With ``key``: ``num`` independent draws uniform on the simplex
    (Dirichlet(1, ..., 1)). ``coverage="wide"`` keeps them; ``"narrow"`` maps each to
    ``u + NARROW_SHRINK (w - u)``, ``u`` the uniform preference ``1/m``, which concentrates the
    set around ``u`` (with ``m = 2`` and the lattice: first weights evenly in [0.4, 0.6]).

    Args:
      m: number of objectives, >= 2.
      num: lattice points per edge (>= 2) without ``key``, draws (>= 1) with it.
      coverage: ``"wide"`` or ``"narrow"``.
      key: a JAX PRNG key for random draws, or None for the lattice.

    Returns:
      float32 ``(rows, m)``, rows summing to 1.
    """
    m = check_positive_int(m, "m")
    if m < 2:
        raise ValueError(f"m={m} must be >= 2 objectives")
    num = check_positive_int(num, "num")
    check_kind(coverage, COVERAGES, "coverage")
    if key is None:
        if num < 2:
            raise ValueError(f"num={num} must be >= 2 lattice points per edge (or pass a key)")
        # Stars and bars: m - 1 bar positions among num + m - 2 slots give the m counts.
        counts = [
            np.diff(np.r_[-1, bars, num + m - 2]) - 1
            for bars in itertools.combinations(range(num + m - 2), m - 1)
        ]
        weights = np.asarray(counts, np.float64) / (num - 1)
    else:
        weights = np.asarray(jax.random.dirichlet(key, jnp.ones(m), (num,)), np.float64)
    if coverage == "narrow":
        weights = 1.0 / m + NARROW_SHRINK * (weights - 1.0 / m)
    return weights.astype(np.float32)


def _check_unbatched(env: Env) -> None:
    layer = env
    batching = (training.VmapWrapper, training.EpisodeWrapper, training.AutoResetWrapper)
    while True:
        if isinstance(layer, batching):
            raise ValueError(
                "env is wrapped for training (auto-reset, vmap); pass the unbatched environment"
            )
        if not isinstance(layer, Wrapper):
            return
        layer = layer.env


def _key_data(key) -> list[int]:
    if isinstance(key, jax.Array) and jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.key_data(key)
    return np.asarray(key).reshape(-1).tolist()


def _metadata(defaults: dict, metadata: dict | None) -> dict:
    metadata = dict(metadata or {})
    if REWARD_SCALE in metadata:
        raise ValueError(
            f"metadata must not set {REWARD_SCALE!r}: collected rewards are not scaled "
            "(envs.scale_rewards divides them and records it)"
        )
    for name in _MEASURED:
        if name in metadata and metadata[name] != defaults[name]:
            raise ValueError(
                f"metadata[{name!r}]={metadata[name]!r} contradicts the collection's "
                f"{defaults[name]!r}; leave it out, collect records it"
            )
    merged = {**defaults, **metadata}
    _metadata_json(merged)
    return merged


def _json_problems(value, where: str) -> list[str]:
    """What in ``value`` would not read back from JSON as it is, each at its place."""
    if isinstance(value, dict):
        problems = []
        for key, item in value.items():
            if not isinstance(key, str):
                problems.append(
                    f"{where} has the key {key!r} ({type(key).__name__}), which JSON turns into "
                    f"a string"
                )
            problems += _json_problems(item, f"{where}[{key!r}]")
        return problems
    if isinstance(value, list | tuple):
        problems = []
        if isinstance(value, tuple):
            problems.append(f"{where} is a tuple, which JSON reads back as a list")
        for i, item in enumerate(value):
            problems += _json_problems(item, f"{where}[{i}]")
        return problems
    if value is None or isinstance(value, str | int | float):  # bool is an int
        return []
    return [f"{where} is a {type(value).__name__}, which JSON cannot hold"]


def _metadata_json(metadata) -> str:
    """``metadata`` as JSON text, or a ValueError naming every entry that would not read back
    unchanged: a dataset's metadata must equal itself after :func:`save` and :func:`load`,
    so tuples, non-string keys and non-JSON values (numpy arrays, numpy scalars except
    ``np.float64``, which is a ``float``) are refused rather than silently converted (a NaN float
    passes, and reads back as NaN). ``metadata`` is a dict (:func:`validate_dataset`)."""
    problems = _json_problems(metadata, "metadata")
    if problems:
        raise ValueError(
            f"metadata must read back unchanged from JSON (strings as keys, lists rather than "
            f"tuples, plain str/int/float/bool/None values): {'; '.join(problems)}"
        )
    return json.dumps(metadata)


def collect(
    env: Env,
    policy: Policy,
    preferences,
    *,
    key: jax.Array,
    episodes_per_preference: int,
    horizon: int,
    action_noise: float = 0.0,
    metadata: dict | None = None,
) -> OfflineDataset:
    """Episodes of ``policy`` at each preference, as an :class:`OfflineDataset`.

    Each episode is one ``lax.scan`` over ``horizon`` steps without auto-reset, vmapped over the
    episodes and the preferences, all in one jitted call. The action taken is
    ``clip(policy(w, s, key) + action_noise * eps, -1, 1)``, ``eps`` standard normal (noise makes
    D4MORL's "amateur" data). The first ``done`` is sticky: the environment is not stepped past
    it (its state is kept, so a Brax body cannot turn NaN), and the later steps are padding
    (``mask = 0``, zero reward).

    Args:
      env: an unbatched multi-objective environment (see :mod:`envs.multi_objective`).
      policy: see :data:`Policy`.
      preferences: ``(P, m)``, each row finite, >= 0, not all zero.
      key: a JAX PRNG key.
      episodes_per_preference: ``E`` > 0; the dataset has ``N = P * E`` episodes, preference
        ``p``'s at rows ``p * E`` to ``p * E + E - 1``.
      horizon: ``T`` > 0 steps per episode.
      action_noise: standard deviation of the Gaussian action noise, >= 0.
      metadata: descriptions (``env``, ``quality``, ``coverage``, ``policy``, ``seed``, ...)
        as JSON values that read back unchanged (string keys, lists rather than tuples; others
        are refused, naming them), which override the defaults: the environment's class name,
        ``"expert"`` without noise and ``"amateur"`` with it, ``"unknown"`` coverage, the
        policy's name and ``seed=None``. ``reward_names``, ``horizon``, ``action_noise``,
        ``episodes_per_preference`` and ``key`` (the key's data) are recorded by collect.
    """
    names = reward_names_of(env)
    preferences = np.asarray(preferences, np.float32)
    if preferences.ndim != 2 or preferences.shape[0] < 1:
        raise ValueError(
            f"preferences must be (P, {len(names)}) with P >= 1, got {preferences.shape}"
        )
    for i, row in enumerate(preferences):
        check_weights(row, len(names), f"preferences[{i}]")
    episodes = check_positive_int(episodes_per_preference, "episodes_per_preference")
    horizon = check_positive_int(horizon, "horizon")
    action_noise = check_nonnegative(action_noise, "action_noise")
    if not callable(policy):
        raise ValueError(f"policy={policy!r} must be callable (preference, observation, key)")
    _check_unbatched(env)
    defaults = {
        "env": type(env.unwrapped).__name__,
        "reward_names": list(names),
        "horizon": horizon,
        "quality": "amateur" if action_noise > 0 else "expert",
        "coverage": "unknown",
        "policy": getattr(policy, "__name__", type(policy).__name__),
        "seed": None,
        "episodes_per_preference": episodes,
        "action_noise": action_noise,
        "key": _key_data(key),
    }
    metadata = _metadata(defaults, metadata)

    keys = jax.random.split(key, (preferences.shape[0], episodes))
    try:  # compiled once per (env, policy, horizon); the noise is an argument
        hash((env, policy))
        run = _rollouts(env, policy, horizon)
    except TypeError:  # an unhashable policy: compiled for this call
        run = _rollouts.__wrapped__(env, policy, horizon)
    trajectories = run(jnp.asarray(preferences), keys, jnp.float32(action_noise))
    arrays = {
        name: np.asarray(value, np.float32).reshape((-1,) + value.shape[2:])
        for name, value in trajectories.items()
    }
    return OfflineDataset(
        **arrays, preferences=np.repeat(preferences, episodes, axis=0), metadata=metadata
    )


def collect_d4morl(
    env: Env,
    policy: Policy,
    *,
    key: jax.Array,
    num_preferences: int,
    episodes_per_preference: int,
    horizon: int,
    amateur_noise: float,
    qualities: Sequence[str] = QUALITIES,
    coverages: Sequence[str] = COVERAGES,
    random_preferences: bool = False,
    metadata: dict | None = None,
) -> dict[tuple[str, str], OfflineDataset]:
    """D4MORL's grid of datasets: each quality at each coverage, one :func:`collect` each.

    Every dataset has its own key (``key`` split over the grid in the order of
    ``qualities`` x ``coverages``), the same ``policy`` and horizon (one compilation), and
    its ``quality`` and ``coverage`` in its metadata.

    Args:
      env, policy, episodes_per_preference, horizon: as :func:`collect`'s.
      key: a JAX PRNG key.
      num_preferences: :func:`preference_grid`'s ``num`` (lattice points per edge, or
        draws with ``random_preferences``).
      amateur_noise: the Gaussian action noise of ``"amateur"`` data, > 0 when
        ``qualities`` asks for it (``"expert"`` data is the policy as it is).
      qualities: a sequence of ``"expert"`` and ``"amateur"``.
      coverages: a sequence of ``"wide"`` and ``"narrow"`` (:func:`preference_grid`).
      random_preferences: Dirichlet draws instead of the simplex lattice (a key each).
      metadata: descriptions shared by every dataset (see :func:`collect`); the grid sets
        ``quality``, ``coverage``, ``action_noise`` and ``key``, so it may name none of them.

    Returns:
      ``{(quality, coverage): OfflineDataset}``.
    """
    grid = {}
    for name, values, valid in (
        ("qualities", qualities, QUALITIES),
        ("coverages", coverages, COVERAGES),
    ):
        if isinstance(values, str):
            raise ValueError(f"{name}={values!r} must be a sequence of names, e.g. ({values!r},)")
        values = tuple(values)
        if not values:
            raise ValueError(f"{name} must name at least one of {list(valid)}")
        for value in values:
            check_kind(value, valid, f"{name} entry")
        if len(set(values)) < len(values):
            raise ValueError(f"{name}={values} names one more than once")
        grid[name] = values
    amateur_noise = check_nonnegative(amateur_noise, "amateur_noise")
    if "amateur" in grid["qualities"] and amateur_noise == 0:
        raise ValueError("amateur_noise must be > 0 for amateur data (0 would be expert data)")
    given = dict(metadata or {})
    clash = sorted({"quality", "coverage", "action_noise", "key"} & set(given))
    if clash:
        raise ValueError(f"metadata must not set {clash}: the grid records them per dataset")
    m = len(reward_names_of(env))
    keys = jax.random.split(key, (len(grid["qualities"]), len(grid["coverages"]), 2))
    datasets = {}
    for i, quality in enumerate(grid["qualities"]):
        for j, coverage in enumerate(grid["coverages"]):
            draw_key, rollout_key = keys[i, j]
            preferences = preference_grid(
                m, num_preferences, coverage, key=draw_key if random_preferences else None
            )
            datasets[quality, coverage] = collect(
                env, policy, preferences, key=rollout_key,
                episodes_per_preference=episodes_per_preference, horizon=horizon,
                action_noise=amateur_noise if quality == "amateur" else 0.0,
                metadata={**given, "quality": quality, "coverage": coverage},
            )  # fmt: skip
    return datasets


@functools.lru_cache(maxsize=16)
def _rollouts(env, policy, horizon: int):
    """``collect``'s jitted rollouts ``run(preferences (P, m), keys (P, E), action_noise)``,
    cached by ``env``, ``policy`` and ``horizon`` so repeated collections (another quality,
    coverage or seed) compile once. The cache keeps its last 16 environments and policies
    alive."""

    def episode(preference, key, action_noise):
        reset_key, steps_key = jax.random.split(key)
        state = env.reset(reset_key)
        if jnp.ndim(state.obs) != 1:
            raise ValueError(f"env observations must be flat vectors, got {jnp.shape(state.obs)}")

        def step(carry, key):
            state, done = carry
            policy_key, noise_key = jax.random.split(key)
            action = policy(preference, state.obs, policy_key)
            if jnp.shape(action) != (env.action_size,):
                raise ValueError(
                    f"policy returned an action of shape {jnp.shape(action)}, expected "
                    f"({env.action_size},)"
                )
            noise = action_noise * jax.random.normal(noise_key, jnp.shape(action))
            action = jnp.clip(action + noise, -1.0, 1.0)
            next_state = env.step(state, action)
            active = jnp.logical_not(done)
            kept = jax.tree.map(lambda new, old: jnp.where(active, new, old), next_state, state)
            record = {
                "observations": state.obs,
                "actions": jnp.where(active, action, 0.0),
                "rewards": jnp.where(active, next_state.info["reward_vector"], 0.0),
                "next_observations": kept.obs,
                "terminals": (active & (next_state.done > 0)).astype(jnp.float32),
                "mask": active.astype(jnp.float32),
            }
            return (kept, done | (kept.done > 0)), record

        start = (state, jnp.zeros((), bool))
        return jax.lax.scan(step, start, jax.random.split(steps_key, horizon))[1]

    def run(preferences, keys, action_noise):
        per_preference = jax.vmap(episode, in_axes=(None, 0, None))
        return jax.vmap(per_preference, in_axes=(0, 0, None))(preferences, keys, action_noise)

    return jax.jit(run)


def _shape_error(field: str, expected: str, shape: tuple) -> ValueError:
    return ValueError(f"{field} must have shape {expected}, got {shape}")


def validate_dataset(dataset: OfflineDataset, *, reward_size: int | None = None) -> OfflineDataset:
    """``dataset`` with float32 numpy arrays, after checking its shapes and values.

    Raises:
      ValueError: naming the field (or ``reward_size``) when shapes disagree between fields,
        a value is not finite, an episode has no steps (``T = 0``), an action lies outside
        ``[-1, 1]``, ``terminals``/``mask`` are not 0/1 or break the padding rules
        (mask non-increasing in time, terminals only on steps that happened, at most one per
        episode and on its last step that happened, zero rewards on padding; the errors name
        the first episode that breaks them), a preference has a negative weight or is all
        zero, the metadata is not a dict whose ``reward_names`` match ``m`` and whose
        ``reward_scale``, if any, is a list of ``m`` finite numbers > 0, or
        ``reward_size`` is not the dataset's ``m``.
    """
    arrays = {name: np.asarray(getattr(dataset, name), np.float32) for name in ARRAY_FIELDS}
    observations, rewards = arrays["observations"], arrays["rewards"]
    if observations.ndim != 3:
        raise _shape_error("observations", "(N, T, obs)", observations.shape)
    n, t = observations.shape[:2]
    if t < 1 or observations.shape[2] < 1:  # an episode of no steps, a state of no features
        raise _shape_error("observations", "(N, T >= 1, obs >= 1)", observations.shape)
    if rewards.ndim != 3 or rewards.shape[:2] != (n, t):
        raise _shape_error("rewards", f"({n}, {t}, m)", rewards.shape)
    m = rewards.shape[2]
    expected = {
        "actions": (f"({n}, {t}, act)", lambda s: len(s) == 3 and s[:2] == (n, t)),
        "next_observations": (str(observations.shape), lambda s: s == observations.shape),
        "terminals": (f"({n}, {t})", lambda s: s == (n, t)),
        "mask": (f"({n}, {t})", lambda s: s == (n, t)),
        "preferences": (f"({n}, {m})", lambda s: s == (n, m)),
    }
    for name, (description, matches) in expected.items():
        if not matches(arrays[name].shape):
            raise _shape_error(name, description, arrays[name].shape)
    for name, array in arrays.items():
        bad = np.size(array) - np.count_nonzero(np.isfinite(array))
        if bad:
            raise ValueError(f"{name} must be finite; it has {bad} non-finite values")
    # actions live in [-1, 1] (the policies fitted to them act there): one outside was
    # cloned by a policy that can never take it
    actions = arrays["actions"]
    if actions.shape[2] < 1 or m < 1:
        raise ValueError(
            f"actions and rewards need at least one entry each per step, got shapes "
            f"{actions.shape} and {rewards.shape}"
        )
    outside = np.abs(actions) > 1.0 + ACTION_TOLERANCE
    if np.any(outside):
        raise ValueError(
            f"actions must lie in [-1, 1] (as envs.collect clips them): {int(outside.sum())} "
            f"entries do not, the largest magnitude is {float(np.abs(actions).max()):.4g}; "
            "rescale them to [-1, 1]"
        )
    mask, terminals = arrays["mask"], arrays["terminals"]
    for name, array in (("mask", mask), ("terminals", terminals)):
        if not np.all((array == 0) | (array == 1)):
            raise ValueError(f"{name} must hold only 0 and 1")
    if np.any(np.diff(mask, axis=1) > 0):
        raise ValueError("mask must be non-increasing in time (padding only after the end)")
    if np.any(terminals > mask):
        raise ValueError("terminals must be 0 where mask is 0 (on padding)")
    # One terminal, on the episode's last step: the steps after it are padding (mask 0).
    counts = terminals.sum(axis=1)
    several = np.flatnonzero(counts > 1)
    if several.size:
        n = int(several[0])
        raise ValueError(
            f"terminals must mark at most one step per episode (the last that happened); "
            f"episode {n} has {int(counts[n])}, at steps {np.flatnonzero(terminals[n]).tolist()}"
        )
    continued = np.flatnonzero(np.any((terminals[:, :-1] > 0) & (mask[:, 1:] > 0), axis=1))
    if continued.size:
        n = int(continued[0])
        end = int(np.flatnonzero(terminals[n])[0])
        raise ValueError(
            f"mask must be 0 after an episode's terminal step; episode {n} terminates at step "
            f"{end} but has mask 1 on {int(mask[n, end + 1 :].sum())} later step(s)"
        )
    if np.any(rewards[mask == 0] != 0):
        raise ValueError("rewards must be 0 where mask is 0 (on padding)")
    preferences = arrays["preferences"]
    # As collect requires of the behaviour policy's preferences (check_weights).
    bad = np.flatnonzero(np.any(preferences < 0, axis=1) | ~np.any(preferences > 0, axis=1))
    if bad.size:
        i = int(bad[0])
        raise ValueError(
            f"preferences[{i}]={preferences[i].tolist()} must be >= 0 and not all zero "
            f"({bad.size} row(s) are not)"
        )
    if not isinstance(dataset.metadata, dict):
        raise ValueError(f"metadata must be a dict, got {type(dataset.metadata).__name__}")
    names = dataset.metadata.get("reward_names")
    if names is not None and (
        not isinstance(names, list | tuple)
        or len(names) != m
        or not all(isinstance(name, str) for name in names)
    ):
        raise ValueError(f"metadata['reward_names']={names!r} must be a list of m={m} strings")
    _check_reward_scale(dataset.metadata.get(REWARD_SCALE), m)
    if reward_size is not None and check_positive_int(reward_size, "reward_size") != m:
        raise ValueError(
            f"reward_size={reward_size} does not match the dataset's m={m} (rewards.shape[-1])"
        )
    return OfflineDataset(**arrays, metadata=dataset.metadata)


def scale_rewards(dataset: OfflineDataset, scale) -> OfflineDataset:
    """The dataset with each objective's rewards divided by ``scale`` (a float or ``(m,)``,
    finite and > 0, e.g. the range of its episode returns), and ``metadata["reward_scale"]``
    the divisor since collection (``scale`` times any earlier one, as a list).

    The preferences stay as they were: they are what the behaviour policy acted at, weights on
    the rewards as collected. Weights ``v`` on the scaled rewards weigh the collected ones by
    ``v / scale``, so the behaviour preference that acts for ``v`` is that, normalised
    (:func:`behaviour_label`); reading ``v`` itself as a preference would weigh the collected
    rewards by ``v``.
    """
    dataset = validate_dataset(dataset)
    values = check_scale(scale, dataset.rewards.shape[-1])
    total = reward_scale(dataset) * values
    rewards = (np.asarray(dataset.rewards, np.float64) / values).astype(np.float32)
    metadata = {**dataset.metadata, REWARD_SCALE: [float(x) for x in total]}
    return validate_dataset(dataset._replace(rewards=rewards, metadata=metadata))


def _check_reward_scale(scale, m: int) -> np.ndarray:
    """``metadata["reward_scale"]`` as float64 ``(m,)`` (ones when absent), or a ValueError
    unless it is a list of ``m`` finite numbers > 0."""
    if scale is None:
        return np.ones(m)
    numbers = isinstance(scale, list) and all(
        isinstance(x, int | float) and not isinstance(x, bool) for x in scale
    )
    values = np.asarray(scale, np.float64) if numbers else None
    if values is None or values.shape != (m,) or not np.all(np.isfinite(values) & (values > 0)):
        raise ValueError(
            f"metadata[{REWARD_SCALE!r}]={scale!r} must be a list of m={m} finite numbers > 0 "
            "(the rewards' divisor since collection, scale_rewards)"
        )
    return values


def reward_scale(dataset: OfflineDataset) -> np.ndarray:
    """``(m,)``: the divisor of the dataset's rewards since collection (``metadata
    ["reward_scale"]``, :func:`scale_rewards`), ones if they were never scaled; a ValueError
    if that entry is not a list of ``m`` finite numbers > 0 (:func:`validate_dataset`)."""
    metadata = dataset.metadata if isinstance(dataset.metadata, dict) else {}
    return _check_reward_scale(metadata.get(REWARD_SCALE), np.shape(dataset.rewards)[-1])


def behaviour_label(dataset: OfflineDataset, weights) -> np.ndarray:
    """The behaviour preference, over its sum, that weighs the objectives as ``weights``
    (``(m,)``, >= 0, not all zero) weigh the dataset's rewards: ``weights / reward_scale``
    normalised (:func:`scale_rewards`); ``weights`` normalised if they were never scaled."""
    m = np.shape(dataset.rewards)[-1]
    check_weights(weights, m, "weights")
    raw = np.asarray(weights, np.float64) / reward_scale(dataset)
    return (raw / raw.sum()).astype(np.float32)


def save(dataset: OfflineDataset, path) -> Path:
    """Writes a validated ``dataset`` to ``path`` exactly (name it ``*.npz``): the arrays, and
    the metadata as a JSON string. Returns the path.

    Raises:
      ValueError: ``dataset`` fails :func:`validate_dataset`, or its metadata would not read
        back unchanged from JSON (a tuple, a non-string key, a numpy value), naming each
        offending entry; :func:`load` would otherwise return different metadata.
    """
    dataset = validate_dataset(dataset)
    text = _metadata_json(dataset.metadata)
    arrays = {name: getattr(dataset, name) for name in ARRAY_FIELDS}
    path = Path(path)
    with path.open("wb") as file:
        np.savez(file, metadata=np.asarray(text), **arrays)
    return path


def load(path, *, reward_size: int | None = None) -> OfflineDataset:
    """Reads a dataset written by :func:`save` and validates it (see :func:`validate_dataset`).

    Args:
      path: the ``.npz`` file.
      reward_size: if given, the dataset's ``m`` must equal it.

    Raises:
      FileNotFoundError: no file at ``path``.
      ValueError: the file is not such a dataset: not an ``.npz``, a missing field, metadata
        that is not a JSON object, or a failed validation.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no offline dataset file at {path}")
    if not zipfile.is_zipfile(path):
        raise ValueError(f"{path} is not an .npz archive, so not an offline dataset file")
    with np.load(path, allow_pickle=False) as data:
        missing = [name for name in OfflineDataset._fields if name not in data.files]
        if missing:
            raise ValueError(
                f"{path} lacks the field(s) {missing}; a dataset file has "
                f"{list(OfflineDataset._fields)}"
            )
        arrays = {name: data[name] for name in ARRAY_FIELDS}
        text = str(data["metadata"])
    try:
        metadata = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"metadata in {path} is not JSON: {error}") from None
    if not isinstance(metadata, dict):
        raise ValueError(f"metadata in {path} must be a JSON object, got {text[:80]!r}")
    return validate_dataset(OfflineDataset(**arrays, metadata=metadata), reward_size=reward_size)
