"""Multi-objective tasks: the tiny :class:`BalanceTask` and three Brax locomotion bodies with
D4MORL-like objectives; :func:`make_multi_objective` / :func:`multi_objective_names` is their
registry.

==================  ===========================================================  ====  ===
name                objectives, per step                                         obs   act
==================  ===========================================================  ====  ===
``mo_balance``      ``left``, ``right``: one unit to one of them (one-hot)          1    1
``mo_halfcheetah``  ``run`` = ``v_x``; ``energy``                                  17    6
``mo_hopper``       ``forward`` = ``v_x + b``; ``height`` = ``10 dz + b``;         11    3
                    ``energy``
``mo_ant``          ``forward`` = ``v_x + b``; ``lateral`` = ``v_y + b``;          27    8
                    ``energy``
==================  ===========================================================  ====  ===

The objectives mirror D4MORL's (Zhu, Dang & Grover, ICLR 2023) MO-HalfCheetah, MO-Hopper-3obj
and MO-Ant, which take theirs from PGMORL (Xu et al., ICML 2020):

- ``v_x``, ``v_y`` are Brax's torso velocities over the step (``metrics['x_velocity']``,
  ``metrics['y_velocity']``), without Brax's forward-reward weight.
- ``energy`` is :func:`envs.energy_efficiency`, ``1 - mean_j clip(a_j, -1, 1)^2`` in ``[0, 1]``;
  it replaces Brax's control cost, which is dropped.
- ``b`` is Brax's healthy / survive bonus (``healthy_reward``, 1 by default; with Brax's
  default termination it is paid on every step). It is added to the locomotion objectives, as
  PGMORL does, and not to ``energy``, which keeps that one in ``[0, 1]``; a non-negative energy
  objective already pays for staying alive. The halfcheetah has no bonus.
- ``dz`` is the hopper torso's height above its initial height (1.25): the root slide joint
  ``q[1] - init_q[1]``, scaled by ``height_weight`` (10, MO-Gymnasium's ``mo-hopper`` factor).

Brax's termination is kept (the hopper and the ant end an episode when they fall). The Brax
bodies default to :data:`envs.DEFAULT_BACKENDS`.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from envs._brax import Env, State, load_body
from envs._checks import check_kind, check_nonnegative
from envs.multi_objective import VectorRewardWrapper, check_positive_int, energy_efficiency
from envs.registry import BACKENDS, DEFAULT_BACKENDS


class BalanceTask(Env):
    """Two objectives, one unit of reward per step, and a slip: a one-state bandit.

    The observation is the constant ``[1.0]`` and the action one number. Each step the agent
    chooses objective 0 (``left``) if ``action[0] > 0`` and objective 1 (``right``) otherwise;
    with probability ``slip`` the unit goes instead to an objective drawn uniformly at random,
    independently of the action. The reward vector is the one-hot of the objective that got the
    unit, so each step pays exactly 1 in total, and ``state.reward`` is 1. ``done`` is always 0:
    the horizon is the episode length. ``metrics['slipped']`` is 1 on a slipped step.

    The randomness comes from a key kept in ``state.info['rng']`` and split every step, as
    Brax's environments do; the pipeline state is ``None``, which Brax's training wrappers
    carry through.

    Under a utility of the whole return (ESR) the best policy balances the two objectives and
    must know the return so far, hence :class:`envs.AccumulatedReturnWrapper`; the expected
    returns are in :meth:`pareto_front`.

    Args:
      slip: probability, in ``[0, 1]``, that a step's unit goes to a random objective.
    """

    reward_names = ("left", "right")
    reward_size = 2

    def __init__(self, *, slip: float = 0.3):
        self.slip = check_nonnegative(slip, "slip")
        if self.slip > 1.0:
            raise ValueError(f"slip={slip!r} must be a probability in [0, 1]")

    def reset(self, rng: jax.Array) -> State:
        zero = jnp.zeros((), jnp.float32)
        return State(
            pipeline_state=None,
            obs=jnp.ones((1,), jnp.float32),
            reward=zero,
            done=zero,
            metrics={"reward_left": zero, "reward_right": zero, "slipped": zero},
            info={"rng": rng, "reward_vector": jnp.zeros((2,), jnp.float32)},
        )

    def step(self, state: State, action: jax.Array) -> State:
        rng, slip_key, objective_key = jax.random.split(state.info["rng"], 3)
        chosen = jnp.where(action[0] > 0, 0, 1)
        slipped = jax.random.bernoulli(slip_key, self.slip)
        drawn = jax.random.randint(objective_key, (), 0, 2)
        vector = jax.nn.one_hot(jnp.where(slipped, drawn, chosen), 2, dtype=jnp.float32)
        metrics = {
            **state.metrics,
            "reward_left": vector[0],
            "reward_right": vector[1],
            "slipped": slipped.astype(jnp.float32),
        }
        return state.replace(
            reward=jnp.sum(vector),
            metrics=metrics,
            info={**state.info, "rng": rng, "reward_vector": vector},
        )

    def pareto_front(self, horizon: int, num: int) -> np.ndarray:
        """Expected vector returns over ``horizon`` steps of the stationary policies.

        For ``p = P(choose left)`` in ``linspace(0, 1, num)``,
        ``E[G] = horizon * ((1 - slip) p + slip / 2, (1 - slip)(1 - p) + slip / 2)``. These are
        the expected returns of every policy (a history-dependent one spends some expected
        number ``p * horizon`` of choices on ``left``), so the front is this segment.

        Returns:
          float64 ``(num, 2)``, ``p`` increasing (from all-right to all-left).
        """
        horizon = check_positive_int(horizon, "horizon")
        num = check_positive_int(num, "num")
        p = np.linspace(0.0, 1.0, num)
        keep = 1.0 - self.slip
        return horizon * np.stack([keep * p + self.slip / 2, keep * (1 - p) + self.slip / 2], -1)

    @property
    def observation_size(self) -> int:
        return 1

    @property
    def action_size(self) -> int:
        return 1

    @property
    def backend(self) -> str:
        return "jax"


def _metric(*names: str) -> Callable[[State, jax.Array, State], jax.Array]:
    """A component summing ``next_state.metrics[name]`` over ``names``."""

    def component(state: State, action: jax.Array, next_state: State) -> jax.Array:
        return sum(next_state.metrics[name] for name in names)

    return component


def _energy(state: State, action: jax.Array, next_state: State) -> jax.Array:
    return energy_efficiency(action)


# Brax options that only weight terms of its scalar reward, which no objective reads (they
# take the raw velocities and their own energy): accepted, they would change nothing
_UNREAD_REWARD_WEIGHTS = ("forward_reward_weight", "ctrl_cost_weight", "contact_cost_weight")


def _load(body: str, backend: str, body_kwargs: dict) -> Env:
    # Checked before loading the body, which takes a while.
    check_kind(backend, BACKENDS, "backend")
    unread = sorted(set(body_kwargs) & set(_UNREAD_REWARD_WEIGHTS))
    if unread:
        raise ValueError(
            f"{', '.join(unread)} weight Brax's scalar reward, which the objectives do not read "
            "(they take the raw velocities and their own energy term): leave them out"
        )
    return load_body(body, backend=backend, **body_kwargs)


def _mo_halfcheetah(*, backend: str = DEFAULT_BACKENDS["halfcheetah"], **body_kwargs) -> Env:
    """Brax halfcheetah with objectives (run, energy); kwargs go to Brax's halfcheetah."""
    env = _load("halfcheetah", backend, body_kwargs)
    return VectorRewardWrapper(env, {"run": _metric("x_velocity"), "energy": _energy})


def _mo_hopper(
    *, height_weight: float = 10.0, backend: str = DEFAULT_BACKENDS["hopper"], **body_kwargs
) -> Env:
    """Brax hopper with objectives (forward, height, energy); kwargs go to Brax's hopper."""
    height_weight = check_nonnegative(height_weight, "height_weight")
    env = _load("hopper", backend, body_kwargs)
    initial_height = float(env.sys.init_q[1])

    def height(state: State, action: jax.Array, next_state: State) -> jax.Array:
        rise = next_state.pipeline_state.q[..., 1] - initial_height
        return height_weight * rise + next_state.metrics["reward_healthy"]

    components = {
        "forward": _metric("x_velocity", "reward_healthy"),
        "height": height,
        "energy": _energy,
    }
    return VectorRewardWrapper(env, components)


def _mo_ant(*, backend: str = DEFAULT_BACKENDS["ant"], **body_kwargs) -> Env:
    """Brax ant with objectives (forward, lateral, energy); kwargs go to Brax's ant."""
    env = _load("ant", backend, body_kwargs)
    components = {
        "forward": _metric("x_velocity", "reward_survive"),
        "lateral": _metric("y_velocity", "reward_survive"),
        "energy": _energy,
    }
    return VectorRewardWrapper(env, components)


_TASKS: dict[str, Callable[..., Env]] = {
    "mo_balance": BalanceTask,
    "mo_halfcheetah": _mo_halfcheetah,
    "mo_hopper": _mo_hopper,
    "mo_ant": _mo_ant,
}


def multi_objective_names() -> tuple[str, ...]:
    """The names :func:`make_multi_objective` accepts, sorted."""
    return tuple(sorted(_TASKS))


def make_multi_objective(name: str, **kwargs) -> Env:
    """The unbatched multi-objective environment ``name`` (see the module docstring).

    Compose the rest as needed: :class:`envs.ScalarizedRewardWrapper` for a preference-weighted
    scalar reward, :class:`envs.AccumulatedReturnWrapper` for the augmented state, then
    ``brax.envs.training.wrap`` for batched, auto-resetting rollouts.

    Args:
      name: one of :func:`multi_objective_names`.
      **kwargs: ``slip`` for ``mo_balance``; ``backend`` (default
        :data:`envs.DEFAULT_BACKENDS`), ``height_weight`` (``mo_hopper``) and Brax's own
        keyword arguments for the others.

    Raises:
      ValueError: for an unknown ``name`` (the message lists the valid ones) or a bad option.
    """
    if name not in _TASKS:
        valid = ", ".join(multi_objective_names())
        raise ValueError(f"unknown multi-objective environment name={name!r}; valid names: {valid}")
    return _TASKS[name](**kwargs)
