"""The maximum-MDP augmentation of SCPO/ASCPO, as a Brax wrapper.

SCPO (Zhao et al., "State-wise constrained policy optimization", arXiv 2306.12594) and ASCPO
(Zhao et al., "Absolute state-wise constrained policy optimization", arXiv 2410.01212) turn a
state-wise constraint ``C_t <= w for all t`` into an expected-return constraint on an augmented
"maximum MDP": the state carries the running maximum ``M_t`` of the cost, and the cost signal
becomes the increment

.. math::
  D_t = \\max(C_t - M_t, 0), \\qquad M_{t+1} = M_t + D_t = \\max(M_t, C_t), \\qquad M_0 = 0,

so that, for non-negative costs, :math:`\\sum_t D_t = \\max_t C_t`, the episode's maximum
state-wise cost (``EpMaxCost``).

:class:`MaxCostWrapper` appends ``M`` to the observation and writes ``D`` to
``metrics['cost_increment']`` and ``info['cost_increment']``. Brax's ``EpisodeWrapper`` sums
every metric over the episode, so its ``episode_metrics['cost_increment']`` is ``EpMaxCost``
without a custom max-reducer.

``M`` is read back from the incoming observation, not kept in ``info``: Brax's
``AutoResetWrapper`` restores the first observation (with ``M = 0``) when an episode ends but
leaves ``info`` as it was, so a maximum kept in ``info`` would leak into the next episode.
"""

from __future__ import annotations

import numbers

import jax
import jax.numpy as jnp

from envs._brax import Env, State, Wrapper, training
from envs.costs import CostWrapper


class MaxCostWrapper(Wrapper):
    """Appends the running maximum cost ``M`` to the observation (``observation_size + 1``).

    The inner environment must write the per-step cost to ``state.info['cost']`` (a
    :class:`envs.CostWrapper` does). On reset ``M = 0`` and the increment is 0. On step, with
    ``M`` the incoming observation's last entry and ``C`` the new ``info['cost']``, the wrapper
    writes ``D = max(C - M, 0)`` to ``metrics['cost_increment']`` and ``info['cost_increment']``,
    ``M' = max(M, C)`` to ``metrics['max_cost']``, and the inner observation with ``M'``
    appended. ``M'`` is computed as ``max(M, C)`` rather than ``M + D`` so the observed maximum
    is exactly a past cost; the two agree up to float rounding.

    Put it inside Brax's training wrappers, e.g. with :func:`wrap_for_training`; the episode sum
    of ``metrics['max_cost']`` that ``EpisodeWrapper`` also reports has no meaning of its own.
    """

    def reset(self, rng: jax.Array) -> State:
        batching = (training.VmapWrapper, training.EpisodeWrapper, training.AutoResetWrapper)
        if any(isinstance(layer, batching) for layer in wrapper_chain(self.env)):
            raise ValueError(
                "MaxCostWrapper must sit inside Brax's training wrappers (its maximum resets "
                "with each episode): wrap the unbatched environment, then wrap_for_training"
            )
        state = self.env.reset(rng)
        if "cost" not in state.info:
            raise ValueError(
                "MaxCostWrapper needs an inner environment that writes state.info['cost']; "
                "wrap it in a CostWrapper (e.g. envs.HazardCostWrapper) first"
            )
        zero = jnp.zeros_like(state.info["cost"])
        return self._augment(state, max_cost=zero, increment=zero)

    def step(self, state: State, action: jax.Array) -> State:
        max_cost = state.obs[..., -1]
        state = self.env.step(state.replace(obs=state.obs[..., :-1]), action)
        # the maximum keeps the cost's dtype, which the observation's may exceed (float64
        # under jax_enable_x64): a step then returns the types its reset did
        cost = state.info["cost"]
        max_cost = max_cost.astype(cost.dtype)
        new_max_cost = jnp.maximum(max_cost, cost)
        return self._augment(state, max_cost=new_max_cost, increment=new_max_cost - max_cost)

    @staticmethod
    def _augment(state: State, *, max_cost: jax.Array, increment: jax.Array) -> State:
        obs = jnp.concatenate([state.obs, max_cost[..., None].astype(state.obs.dtype)], axis=-1)
        return state.replace(
            obs=obs,
            metrics={**state.metrics, "cost_increment": increment, "max_cost": max_cost},
            info={**state.info, "cost_increment": increment},
        )

    @property
    def observation_size(self) -> int:
        return self.env.observation_size + 1


class _RepeatAction(Wrapper):
    """Steps the inner environment ``action_repeat`` times per action and aggregates the costs.

    Brax's ``EpisodeWrapper`` repeats actions itself but sums only the last repeat's metrics,
    which would drop the cost increments of the other repeats. Here the reward and the
    increments are summed over the repeats, the cost is their maximum (a repeated step violates
    the constraint if any of its states does), and ``done`` is set if any repeat ended the
    episode; the repeats after the one that ended it change nothing.
    """

    def __init__(self, env: Env, action_repeat: int):
        super().__init__(env)
        self.action_repeat = action_repeat

    def step(self, state: State, action: jax.Array) -> State:
        def substep(carry, _):
            state, ended = carry
            new = self.env.step(state, action)
            # once a repeat ends the episode, the later ones neither move the state nor earn
            # or cost anything (they paid a goal bonus again and met hazards never reached)
            new = jax.tree.map(lambda kept, moved: jnp.where(ended, kept, moved), state, new)
            increment = new.info.get("cost_increment", jnp.zeros_like(new.info["cost"]))
            outputs = tuple(
                jnp.where(ended, jnp.zeros_like(v), v)
                for v in (new.reward, new.done, new.info["cost"], increment)
            )
            return (new, ended | (new.done > 0)), outputs

        start = (state, jnp.zeros(jnp.shape(state.done), bool))
        (state, _), (rewards, dones, costs, increments) = jax.lax.scan(
            substep, start, None, length=self.action_repeat
        )
        aggregated = {"cost": jnp.max(costs, axis=0)}
        if "cost_increment" in state.info:
            aggregated["cost_increment"] = jnp.sum(increments, axis=0)
        return state.replace(
            reward=jnp.sum(rewards, axis=0),
            done=jnp.max(dones, axis=0),
            metrics={**state.metrics, **aggregated},
            info={**state.info, **aggregated},
        )


class _RawKeys(Wrapper):
    """Accepts typed keys (``jax.random.key``) as well as raw ``uint32`` ones.

    Brax's ``EpisodeWrapper`` sizes its counters by ``rng.shape[:-1]``, which assumes raw keys
    of shape ``(num_envs, 2)``; a typed key array of shape ``(num_envs,)`` would give scalars.
    """

    def reset(self, rng: jax.Array) -> State:
        typed = jnp.issubdtype(rng.dtype, jax.dtypes.prng_key)
        if rng.ndim < (1 if typed else 2):  # one key: Brax's counters would have no batch
            raise ValueError(
                f"reset takes one key per environment, (num_envs,) typed or (num_envs, 2) raw "
                f"keys, got shape {rng.shape}: jax.random.split(key, num_envs)"
            )
        if typed:
            rng = jax.random.key_data(rng)
        return self.env.reset(rng)


def wrapper_chain(env: Env) -> list[Env]:
    """``env`` and the environments it wraps, outermost first."""
    layers = [env]
    while isinstance(layers[-1], Wrapper):
        layers.append(layers[-1].env)
    return layers


def wrap_for_training(env: Env, episode_length: int, action_repeat: int = 1) -> Wrapper:
    """Brax's training wrappers (vmap, episode, auto-reset) around a cost-wrapped environment.

    ``wrap_for_training(envs.make("point_goal_hazards"), 200)`` is
    ``brax.envs.training.wrap(MaxCostWrapper(HazardCostWrapper(PointGoal(...))), 200)``: the
    cost and max-cost wrappers sit inside, where each sees one unbatched environment and the
    auto-reset restores the observation that carries ``M``. The result is batched: reset it with
    ``(num_envs,)`` typed keys (``jax.random.split(jax.random.key(0), num_envs)``) or
    ``(num_envs, 2)`` raw ones.

    With ``action_repeat > 1`` the repeats run inside Brax's wrappers (see :class:`_RepeatAction`)
    so that no cost increment is lost; an episode ends after ``ceil(episode_length /
    action_repeat)`` actions, that is ``episode_length`` inner steps rounded up to a whole
    action (as in Brax), and ``info['steps']`` and the episode length count actions taken.
    A step's cost is then the largest cost of its repeats, so the episode's summed cost
    (``EpCost``, and ``CostRate`` with it) counts each action once and changes with
    ``action_repeat`` for the same trajectory; the maximum cost (``EpMaxCost``) does not.

    Args:
      env: an unbatched environment with a :class:`envs.CostWrapper` in its wrapper chain
        (usually from :func:`envs.make`, which adds :class:`MaxCostWrapper` by default).
      episode_length: inner steps per episode before truncation, > 0.
      action_repeat: inner steps per action, > 0.
    """
    for name, value in (("episode_length", episode_length), ("action_repeat", action_repeat)):
        # a NumPy integer is one (the configs' checks take it)
        if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"{name}={value!r} must be a positive int")
    episode_length, action_repeat = int(episode_length), int(action_repeat)
    layers = wrapper_chain(env)
    if not any(isinstance(layer, CostWrapper) for layer in layers):
        raise ValueError(
            f"env must have a CostWrapper in its wrapper chain, got "
            f"{[type(layer).__name__ for layer in layers]}; build it with envs.make"
        )
    batching = (training.VmapWrapper, training.EpisodeWrapper, training.AutoResetWrapper)
    if any(isinstance(layer, batching) for layer in layers):
        raise ValueError("env is already wrapped for training; pass the unbatched environment")
    if action_repeat > 1:
        env = _RepeatAction(env, action_repeat)
    # Brax ends an episode once its step count reaches episode_length; counted in actions,
    # that is after ceil(episode_length / action_repeat) of them.
    actions = -(-episode_length // action_repeat)
    return _RawKeys(training.wrap(env, episode_length=actions, action_repeat=1))
