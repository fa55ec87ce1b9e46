"""Vector rewards for multi-objective RL on Brax environments, and the AET augmented state.

A *multi-objective environment* here is a Brax ``Env`` that

- has the attributes ``reward_names`` (a tuple of ``m`` names) and ``reward_size`` (``m``);
- writes each step's float32 reward vector ``r_t`` of shape ``(m,)`` to
  ``state.info['reward_vector']`` and its entries to ``state.metrics['reward_<name>']`` (so
  Brax's ``EpisodeWrapper`` sums them into the episode's vector return), all zeros on reset;
- sets ``state.reward`` to a scalarisation of ``r_t``: the plain sum ``sum_i r_t[i]``, or
  ``w . r_t`` under :class:`ScalarizedRewardWrapper` and :class:`PreferenceConditionedWrapper`,
  which also record the weights ``w`` in force in ``state.info['reward_weights']`` (shape of
  ``r_t``) so that :class:`RewardScaleWrapper` around them keeps the weighting:
  ``w . (r_t / scale)``, as the weighting wrapper around the scaled environment gives.

:class:`VectorRewardWrapper` makes one from any Brax environment and a function per objective;
:class:`envs.BalanceTask` is one natively. Brax's ``Wrapper`` forwards unknown attributes to the
environment it wraps, so ``reward_names`` and ``reward_size`` stay readable through the wrappers
here and through ``brax.envs.training.wrap``.

:class:`AccumulatedReturnWrapper` builds the augmented state of the AET framework (AETDICE,
arXiv 2606.31178; the accumulated-reward state of EUPG, Roijers et al. 2018, and RAVI, Peng,
Tian & Fain, arXiv 2311.02544): with ``x_t = sum_{tau < t} r_tau`` the vector return so far,

.. math::
  \\hat s_t = (s_t,\\; x_t / \\text{scale},\\; t / H), \\qquad x_0 = 0,

so a policy or value of ``\\hat s_t`` can act on a nonlinear utility of the whole return
``x_H`` (ESR). :func:`augment_observations` computes the same augmentation for stored episodes,
summing in the same order; along a rollout the two agree bitwise when ``scale`` is a power of
two (1 included) and to float32 rounding otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from envs._brax import Env, State, Wrapper

RewardComponent = Callable[[State, jax.Array, State], jax.Array]
"""``component(state, action, next_state)``: one objective's reward for the step
``state --action--> next_state``, float32 with the shape of ``next_state.reward``."""


def energy_efficiency(action: jax.Array) -> jax.Array:
    """The bounded energy objective ``1 - mean_j clip(a_j, -1, 1)^2`` over the last axis.

    It lies in ``[0, 1]``: 1 for no effort, 0 for full effort on every actuator. PGMORL (Xu et
    al., ICML 2020) and D4MORL (Zhu, Dang & Grover, ICLR 2023) use an unbounded relative of it
    (``c - sum_j a_j^2`` plus an alive bonus); this exact form keeps it non-negative and
    independent of the number of actuators, which also makes staying alive worth up to 1 per
    step on this objective.
    """
    clipped = jnp.clip(action, -1.0, 1.0)
    return (1.0 - jnp.mean(jnp.square(clipped), axis=-1)).astype(jnp.float32)


def reward_names_of(env: Env) -> tuple[str, ...]:
    """``env.reward_names``, or a ValueError saying ``env`` is not multi-objective."""
    names = getattr(env, "reward_names", None)
    if names is None:
        raise ValueError(
            f"env must be a multi-objective environment (with reward_names and "
            f"info['reward_vector'], e.g. a VectorRewardWrapper or envs.BalanceTask), "
            f"got {type(env).__name__}"
        )
    return tuple(names)


def check_positive_int(value: int, name: str) -> int:
    """``value`` if it is a positive int (not a bool), else a ValueError naming ``name``."""
    if not isinstance(value, int | np.integer) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{name}={value!r} must be a positive int")
    return int(value)


def check_weights(weights, size: int, name: str = "weights") -> np.ndarray:
    """``weights`` as float32 ``(size,)``: finite, >= 0 and not all zero."""
    array = np.asarray(weights, dtype=np.float64)
    if array.shape != (size,):
        raise ValueError(f"{name} must have shape ({size},), one per objective, got {array.shape}")
    if not np.all(np.isfinite(array)) or np.any(array < 0) or not np.any(array > 0):
        raise ValueError(f"{name}={array.tolist()} must be finite, >= 0 and not all zero")
    return array.astype(np.float32)


def check_scale(scale, size: int) -> np.ndarray:
    """``scale`` (a number, or one per objective) as float64 ``(size,)``; a ValueError unless
    it is finite and > 0 with that shape (ragged or non-numeric input included)."""
    try:
        array = np.asarray(scale, dtype=np.float64)
    except (TypeError, ValueError):  # ragged, or not numbers
        array = None
    if array is None or array.shape not in ((), (size,)):
        shape = "not an array of numbers" if array is None else f"shape {array.shape}"
        raise ValueError(
            f"scale must be a number or {size} numbers (one per objective), got {scale!r} ({shape})"
        )
    if not np.all(np.isfinite(array)) or np.any(array <= 0):
        raise ValueError(f"scale={array.tolist()} must be finite and > 0")
    return np.broadcast_to(array, (size,)).copy()


def _check_scale(scale, size: int) -> np.ndarray:
    """:func:`check_scale` in float32, the wrappers' precision."""
    return check_scale(scale, size).astype(np.float32)


WEIGHTS_KEY = "reward_weights"
"""``state.info`` key of the weights a weighting wrapper scalarised the reward vector with."""


def _with_reward_vector(state: State, vector: jax.Array, names: tuple[str, ...]) -> State:
    """``state`` with ``vector`` as its reward vector and metrics, and ``state.reward`` its
    scalarisation: ``w . vector`` with the weights an inner weighting wrapper recorded in
    ``info[WEIGHTS_KEY]``, else the plain sum."""
    # New dicts, not in-place updates: the incoming state's dicts may be shared with the caller.
    entries = {f"reward_{name}": vector[..., i] for i, name in enumerate(names)}
    weights = state.info.get(WEIGHTS_KEY)
    reward = jnp.sum(vector if weights is None else vector * weights, axis=-1)
    return state.replace(
        reward=reward,
        metrics={**state.metrics, **entries},
        info={**state.info, "reward_vector": vector},
    )


def _without_weights(state: State) -> State:
    if WEIGHTS_KEY not in state.info:
        return state
    return state.replace(info={k: v for k, v in state.info.items() if k != WEIGHTS_KEY})


class VectorRewardWrapper(Wrapper):
    """Computes a reward vector from per-objective functions; ``state.reward`` is its sum.

    After each step, ``components[name](state, action, next_state)`` for every name (in the
    mapping's order) gives ``r_t``, written to ``info['reward_vector']`` and
    ``metrics['reward_<name>']``; a metric of the inner environment with the same name is
    replaced, and weights an inner weighting wrapper recorded are dropped (they weighed other
    objectives). On reset the vector is zeros. The components see the incoming state as it was:
    Brax's bodies update the incoming ``metrics`` dict in place, so they are handed a copy.

    Args:
      env: the environment, unbatched (or batched, if the components handle the batch).
      components: name -> :data:`RewardComponent`; names are identifiers, at least one.
    """

    def __init__(self, env: Env, components: Mapping[str, RewardComponent]):
        super().__init__(env)
        if not isinstance(components, Mapping) or not components:
            raise ValueError(
                f"components={components!r} must be a non-empty mapping from objective names "
                f"to functions (state, action, next_state) -> reward"
            )
        for name, component in components.items():
            if not isinstance(name, str) or not name.isidentifier():
                raise ValueError(f"components key {name!r} must be an identifier string")
            if not callable(component):
                raise ValueError(f"components[{name!r}]={component!r} must be callable")
        self.components = dict(components)

    @property
    def reward_names(self) -> tuple[str, ...]:
        return tuple(self.components)

    @property
    def reward_size(self) -> int:
        return len(self.components)

    def reset(self, rng: jax.Array) -> State:
        state = _without_weights(self.env.reset(rng))
        vector = jnp.zeros(jnp.shape(state.reward) + (self.reward_size,), jnp.float32)
        return _with_reward_vector(state, vector, self.reward_names)

    def step(self, state: State, action: jax.Array) -> State:
        next_state = self.env.step(state.replace(metrics=dict(state.metrics)), action)
        shape = jnp.shape(next_state.reward)
        entries = []
        for name, component in self.components.items():
            value = jnp.asarray(component(state, action, next_state), jnp.float32)
            if value.shape != shape:
                raise ValueError(
                    f"reward component {name!r} returned shape {value.shape}; expected the "
                    f"reward's shape {shape}"
                )
            entries.append(value)
        vector = jnp.stack(entries, axis=-1)
        return _with_reward_vector(_without_weights(next_state), vector, self.reward_names)


class _StateMapWrapper(Wrapper):
    """A wrapper that applies one map, :meth:`_map`, to the state of every reset and step.

    Abstract: each subclass (:class:`ScalarizedRewardWrapper`, :class:`RewardScaleWrapper`)
    defines ``_map``."""

    def reset(self, rng: jax.Array) -> State:
        return self._map(self.env.reset(rng))

    def step(self, state: State, action: jax.Array) -> State:
        return self._map(self.env.step(state, action))

    def _map(self, state: State) -> State:
        raise NotImplementedError(f"{type(self).__name__} must define _map(state)")


class ScalarizedRewardWrapper(_StateMapWrapper):
    """Sets ``state.reward = weights . info['reward_vector']``, a linear scalarisation.

    For training a behaviour policy at one preference with a scalar-reward learner (PPO); the
    vector and its metrics pass through unchanged. The weights go to ``info['reward_weights']``
    (broadcast to the vector's shape), where a :class:`RewardScaleWrapper` around this one
    reads them, and replace any an inner weighting wrapper recorded.

    Args:
      env: a multi-objective environment (see the module docstring).
      weights: ``(m,)``, finite, >= 0, not all zero; not normalised.
    """

    def __init__(self, env: Env, weights):
        super().__init__(env)
        self.weights = check_weights(weights, len(reward_names_of(env)))

    def _map(self, state: State) -> State:
        vector = state.info["reward_vector"]
        weights = jnp.broadcast_to(jnp.asarray(self.weights), jnp.shape(vector))
        return state.replace(
            reward=vector @ self.weights, info={**state.info, WEIGHTS_KEY: weights}
        )


class RewardScaleWrapper(_StateMapWrapper):
    """Divides the reward vector (and its metrics) by ``scale``: per objective units, e.g. the
    range of a dataset's returns, so a policy trained on scaled data sees the same accumulated
    returns online.

    ``state.reward`` becomes the scalarisation of the scaled vector: ``w . (r_t / scale)`` when
    an inner :class:`ScalarizedRewardWrapper` or :class:`PreferenceConditionedWrapper` weighs
    the objectives by ``w`` (read from ``info['reward_weights']``), the plain sum otherwise. So
    either order of scaling and weighting gives the same reward; rescaling the inner scalar
    reward instead could not, as ``w . r_t`` does not determine ``w . (r_t / scale)`` for a
    per-objective scale.

    Args:
      env: a multi-objective environment (see the module docstring).
      scale: a float or ``(m,)``, > 0.
    """

    def __init__(self, env: Env, scale):
        super().__init__(env)
        self.scale = _check_scale(scale, len(reward_names_of(env)))

    def _map(self, state: State) -> State:
        vector = state.info["reward_vector"] / self.scale
        return _with_reward_vector(state, vector, reward_names_of(self.env))


PREFERENCE_SAMPLING = ("mixture", "rows")
"""How :class:`PreferenceConditionedWrapper` draws an episode's preference."""


class PreferenceConditionedWrapper(Wrapper):
    """Draws a preference per episode and conditions the task on it: the observation gets the
    preference ``w`` appended (``observation_size + m``) and ``state.reward = w . r_t``
    (``w`` also goes to ``info['reward_weights']``, as in :class:`ScalarizedRewardWrapper`).

    One scalar-reward learner (PPO) on this environment trains a preference-conditioned
    behaviour policy ``pi(a | s, w)`` for all the preferences at once, as PGMORL-style data
    needs. On reset ``w`` is drawn by ``sampling``:

    * ``"mixture"`` (the default): a random convex combination of the rows with Dirichlet(1)
      weights over them. The draws do not cover the rows' hull evenly but gather around the
      rows' mean, the more so the more rows there are: for the five rows ``(0, 1), (1/4,
      3/4), ..., (1, 0)`` the first weight has mean 1/2 and standard deviation 0.14, so the
      end rows lie 3.5 standard deviations out and are almost never drawn.
    * ``"rows"``: one row of ``preferences``, uniformly at random, so that the rows
      themselves (where :func:`envs.collect` rolls a behaviour policy out) are trained on.
      Each slot draws on its own, so with few slots per row a run may give a row few slots
      or none (a given row none with probability ``(1 - 1/P)^num_envs``: 1.2% for 20 slots
      on 5 rows).

    Steps read ``w`` back from the incoming observation (not from ``info``), so under Brax's
    ``AutoResetWrapper``, which restores each environment's first observation, every batch
    slot keeps the preference it was reset with: a training run that resets its batch once
    trains at one draw per slot, ``num_envs`` preferences in all.

    Args:
      env: a multi-objective environment (see the module docstring).
      preferences: ``(P, m)``, each row finite, >= 0 and not all zero.
      sampling: ``"mixture"`` or ``"rows"`` (above).
    """

    def __init__(self, env: Env, preferences, sampling: str = "mixture"):
        super().__init__(env)
        size = len(reward_names_of(env))
        array = np.asarray(preferences, dtype=np.float32)
        if array.ndim != 2 or array.shape[0] < 1:
            raise ValueError(f"preferences must be (P, {size}) with P >= 1, got {array.shape}")
        for i, row in enumerate(array):
            check_weights(row, size, f"preferences[{i}]")
        if sampling not in PREFERENCE_SAMPLING:
            raise ValueError(f"sampling must be one of {PREFERENCE_SAMPLING}, got {sampling!r}")
        self.preferences = array
        self.sampling = sampling

    def reset(self, rng: jax.Array) -> State:
        rng, pick = jax.random.split(rng)
        state = self.env.reset(rng)
        rows = jnp.asarray(self.preferences)
        if self.sampling == "rows":
            preference = rows[jax.random.randint(pick, (), 0, rows.shape[0])]
        else:
            preference = jax.random.dirichlet(pick, jnp.ones(rows.shape[0])) @ rows
        return self._condition(state, preference)

    def step(self, state: State, action: jax.Array) -> State:
        size = self.preferences.shape[1]
        preference = state.obs[..., -size:]
        state = self.env.step(state.replace(obs=state.obs[..., :-size]), action)
        return self._condition(state, preference)

    @staticmethod
    def _condition(state: State, preference: jax.Array) -> State:
        vector = state.info["reward_vector"]
        obs = jnp.concatenate([state.obs, preference.astype(state.obs.dtype)], axis=-1)
        # Recorded for a RewardScaleWrapper around this one (see _with_reward_vector).
        weights = jnp.broadcast_to(preference.astype(vector.dtype), jnp.shape(vector))
        return state.replace(
            obs=obs,
            reward=jnp.sum(vector * preference, axis=-1),
            info={**state.info, WEIGHTS_KEY: weights},
        )

    @property
    def observation_size(self) -> int:
        return self.env.observation_size + self.preferences.shape[1]


class AccumulatedReturnWrapper(Wrapper):
    """Appends ``x_t / scale`` (m) and ``t / horizon`` (1) to the observation.

    ``x_t = sum_{tau < t} r_tau`` is the vector return accumulated before step ``t`` and ``t``
    counts this wrapper's steps since the reset. On reset ``x = 0`` and ``t = 0``; each step adds
    ``info['reward_vector'] / scale`` and ``1 / horizon``. Both are read back from the incoming
    observation, not kept in ``info``: Brax's ``AutoResetWrapper`` restores the first
    observation when an episode ends but leaves ``info`` as it was (see
    :class:`envs.MaxCostWrapper`). Put it inside Brax's training wrappers, with
    ``episode_length = horizon`` so that ``t / horizon`` stays in ``[0, 1)``.

    Args:
      env: a multi-objective environment (see the module docstring), unbatched.
      horizon: the episode length ``H`` that normalises the time, a positive int.
      scale: divides the accumulated return, > 0: a float or one per objective ``(m,)``.
    """

    def __init__(self, env: Env, horizon: int, scale=1.0):
        super().__init__(env)
        self.horizon = check_positive_int(horizon, "horizon")
        self.scale = _check_scale(scale, len(reward_names_of(env)))

    def reset(self, rng: jax.Array) -> State:
        state = self.env.reset(rng)
        if "reward_vector" not in state.info:
            raise ValueError(
                "AccumulatedReturnWrapper needs an inner environment that writes "
                "state.info['reward_vector']; wrap it in a VectorRewardWrapper first"
            )
        scaled_return = jnp.zeros_like(state.info["reward_vector"])
        return self._augment(state, scaled_return, jnp.zeros_like(state.reward))

    def step(self, state: State, action: jax.Array) -> State:
        size = self.scale.shape[0]
        scaled_return = state.obs[..., -size - 1 : -1]
        # t / H * H is within rounding of the integer t; rounding recovers it exactly.
        steps = jnp.round(state.obs[..., -1] * self.horizon)
        state = self.env.step(state.replace(obs=state.obs[..., : -size - 1]), action)
        scaled_return = scaled_return + state.info["reward_vector"] / self.scale
        return self._augment(state, scaled_return, (steps + 1) / self.horizon)

    @staticmethod
    def _augment(state: State, scaled_return: jax.Array, time: jax.Array) -> State:
        dtype = state.obs.dtype
        parts = [state.obs, scaled_return.astype(dtype), time[..., None].astype(dtype)]
        return state.replace(obs=jnp.concatenate(parts, axis=-1))

    @property
    def observation_size(self) -> int:
        return self.env.observation_size + self.scale.shape[0] + 1


def augment_observations(
    observations: jax.Array,
    next_observations: jax.Array,
    rewards: jax.Array,
    horizon: int,
    scale=1.0,
) -> tuple[jax.Array, jax.Array]:
    """The augmentation of :class:`AccumulatedReturnWrapper`, on stored episodes.

    For episode ``n`` and step ``t`` the first result is ``(s_t, x_t / scale, t / H)`` and the
    second ``(s_{t+1}, x_{t+1} / scale, (t + 1) / H)``, with the exclusive and the inclusive
    running sums ``x_t = sum_{tau < t} r_tau`` and ``x_{t+1} = x_t + r_t``. The sums are taken
    in time order on the scaled rewards, as the wrapper does, so on the steps an episode took
    the results equal the wrapper's observations: bitwise when ``scale`` is a power of two,
    within float32 rounding otherwise (XLA may turn a division by a constant into a
    multiplication by its reciprocal, and fuse that with the sum, differently in the two
    programs). Padding steps after a termination (zero reward) keep ``x`` and advance ``t``.

    Args:
      observations: ``(N, T, obs)`` environment observations ``s_t``.
      next_observations: ``(N, T, obs)``, ``s_{t+1}``.
      rewards: ``(N, T, m)`` reward vectors ``r_t``.
      horizon: ``H``, a positive int.
      scale: a float or ``(m,)``, > 0; concrete, not traced.

    Returns:
      ``(augmented, next_augmented)``, each float32 ``(N, T, obs + m + 1)``.
    """
    horizon = check_positive_int(horizon, "horizon")
    if jnp.ndim(observations) != 3 or jnp.ndim(rewards) != 3:
        raise ValueError(
            f"observations and rewards must be (N, T, obs) and (N, T, m), got "
            f"{jnp.shape(observations)} and {jnp.shape(rewards)}"
        )
    if jnp.shape(next_observations) != jnp.shape(observations):
        raise ValueError(
            f"next_observations must have the shape of observations {jnp.shape(observations)}, "
            f"got {jnp.shape(next_observations)}"
        )
    episodes, steps, size = jnp.shape(rewards)
    if jnp.shape(observations)[:2] != (episodes, steps):
        raise ValueError(
            f"rewards must share (N, T) with observations {jnp.shape(observations)[:2]}, "
            f"got {(episodes, steps)}"
        )
    scale = _check_scale(scale, size)
    scaled = jnp.asarray(rewards, jnp.float32) / scale.reshape(1, 1, size)

    def accumulate(total, reward):
        new_total = total + reward
        return new_total, (total, new_total)

    zeros = jnp.zeros((episodes, size), jnp.float32)
    _, (before, after) = jax.lax.scan(accumulate, zeros, jnp.swapaxes(scaled, 0, 1))
    time = jnp.arange(steps, dtype=jnp.float32)

    def augment(obs, scaled_return, time):
        time = jnp.broadcast_to((time / horizon)[None, :, None], (episodes, steps, 1))
        obs = jnp.asarray(obs, jnp.float32)
        return jnp.concatenate([obs, jnp.swapaxes(scaled_return, 0, 1), time], axis=-1)

    return augment(observations, before, time), augment(next_observations, after, time + 1)
