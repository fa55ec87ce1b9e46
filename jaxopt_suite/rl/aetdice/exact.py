"""Exact values and optima of AET objectives on the balance task (``envs``' ``mo_balance``).

Every step of the task gives one unit of reward: to the chosen objective (0 when
``action > 0``, else 1) with probability ``1 - slip``, otherwise to an objective drawn
uniformly. Choosing objective 0 thus sends the unit there with probability ``1 - slip/2``,
choosing 1 with probability ``slip/2``. After ``t`` steps the accumulated return is
``(k, t - k)``, so ``(t, k)`` is the whole augmented state, and a policy is a table
``P(choose 0 | t, k)`` of shape ``(T, T + 1)`` (entries with ``k > t`` are never read).

* ESR-type objectives (``h = u``, so ``k = 1``, and an increasing ``g``): the optimum is
  ``g`` of the best expected ``u(G)``, found by backward induction over ``(t, k)``; it
  needs the history (``k``), which is why Markov policies fall short.
* SER (``h = id``): the expected return of any policy is
  ``T (slip/2, slip/2) + (1 - slip) (s, T - s)`` with ``s`` the expected number of steps
  that choose 0, a number in ``[0, T]``; so the optimum is a maximum over one scalar, taken
  on a fine grid (``g`` is concave in it).

The tests and the ``morl`` suite use these to say how far a learned policy is from the
optimum.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from jaxopt_suite._checks import check_integer, check_real
from jaxopt_suite.rl.aetdice.utilities import AET


def _check(horizon, slip) -> None:
    """``horizon`` an int >= 1 and ``slip`` a probability (a slip of 3 gave negative
    probabilities and values without an error)."""
    check_integer("horizon", horizon, 1)
    check_real("slip", slip, "lie in [0, 1]", lambda v: 0.0 <= v <= 1.0)


def _unit_probabilities(slip: float) -> np.ndarray:
    """``P(unit to objective 0 | choice)`` for the choices (0, 1)."""
    return np.array([1.0 - slip / 2.0, slip / 2.0])


def _transformed(objective: AET, horizon: int, scale) -> np.ndarray:
    """``h((k, T - k) / scale)`` for ``k = 0..T``, ``(T + 1, k_out)``."""
    k = np.arange(horizon + 1, dtype=np.float64)
    returns = (np.stack([k, horizon - k], axis=-1) / np.asarray(scale)).astype(np.float32)
    return np.asarray(objective.transform(jnp.asarray(returns)), np.float64)


def return_distribution(policy: np.ndarray, horizon: int, slip: float) -> np.ndarray:
    """``P(G = (k, T - k))`` for ``k = 0..T`` under a policy table ``P(choose 0 | t, k)``
    ``(T, T + 1)`` (or a scalar: a Markov policy), entries in ``[0, 1]``."""
    _check(horizon, slip)
    array = np.asarray(policy, np.float64)
    if array.shape not in ((), (horizon, horizon + 1)):
        raise ValueError(
            f"policy must be a probability or a (T, T + 1) = ({horizon}, {horizon + 1}) table, "
            f"got shape {array.shape}"
        )
    if not np.all((array >= 0.0) & (array <= 1.0)):
        raise ValueError("policy's entries are probabilities: they must lie in [0, 1]")
    table = np.broadcast_to(array, (horizon, horizon + 1))
    q0, q1 = _unit_probabilities(slip)
    probs = np.zeros(horizon + 1)
    probs[0] = 1.0
    for t in range(horizon):
        up = table[t] * q0 + (1.0 - table[t]) * q1  # P(k -> k + 1)
        new = probs * (1.0 - up)
        new[1:] += (probs * up)[:-1]
        probs = new
    return probs


def value(objective: AET, policy: np.ndarray, horizon: int, slip: float, scale=1.0) -> float:
    """The exact ``g(E[h(G / scale)])`` of a policy table (see :func:`return_distribution`);
    ``scale`` (a number or ``(2,)``) divides the returns, as for rewards scaled by it."""
    probs = return_distribution(policy, horizon, slip)
    expected = probs @ _transformed(objective, horizon, scale)
    return float(objective.outer.value(jnp.asarray(expected, jnp.float32)))


def optimum(objective: AET, horizon: int, slip: float, scale=1.0, grid: int = 200_001):
    """The optimal value of ``objective`` (of the returns divided by ``scale``) over all
    (history-dependent) policies and an optimal policy table ``(T, T + 1)``.

    ``objective.inner`` None (SER) is solved over the expected number of 0-choices on a grid of
    ``grid`` points, with the stationary policy that attains it; otherwise (``k = 1``) by
    backward induction on ``E[h(G)]``, exact, valid because every utility here increases in
    its argument.
    """
    _check(horizon, slip)
    q = _unit_probabilities(slip)
    if objective.inner is None:
        chosen = np.linspace(0.0, horizon, grid)
        base = horizon * slip / 2.0
        returns = np.stack([base + (1 - slip) * chosen, base + (1 - slip) * (horizon - chosen)])
        returns = returns.T / np.asarray(scale)
        values = np.asarray(objective.outer.value(jnp.asarray(returns, jnp.float32)))
        best = int(np.argmax(values))
        policy = np.full((horizon, horizon + 1), chosen[best] / horizon)
        return float(values[best]), policy
    values = _transformed(objective, horizon, scale)[:, 0]
    policy = np.zeros((horizon, horizon + 1))
    for t in reversed(range(horizon)):
        stay, up = values[: t + 1], values[1 : t + 2]
        choose = q[:, None] * up[None, :] + (1.0 - q[:, None]) * stay[None, :]  # (2, t + 1)
        policy[t, : t + 1] = (choose[0] >= choose[1]).astype(np.float64)
        values = np.max(choose, axis=0)
    expected = np.asarray([values[0]], np.float32)
    return float(objective.outer.value(jnp.asarray(expected))), policy
