"""Multi-objective utilities and the Aggregation-Expectation-Transformation (AET) objectives.

A utility ``u`` maps a vector return ``G = sum_t r_t`` in ``R^m`` to a number. Two criteria
rank policies by it (Hayes et al., "A practical guide to multi-objective reinforcement
learning and planning", arXiv 2103.09568):

* SER, the scalarised expected return ``u(E[G])``;
* ESR, the expected scalarised return ``E[u(G)]``.

They agree for a linear ``u`` and differ for every other. The AET framework (seed abstract 19,
arXiv 2606.31178) reads a scalarisation as three steps: the **aggregation** of the rewards
over time into ``G``, an **expectation** over trajectories, and a **transformation**, placed
before or after the expectation. Here an objective is

.. math::
  J(\\pi) = g\\big(\\mathbb{E}_\\pi[h(G)]\\big),

with an inner transformation ``h: R^m -> R^k`` and an outer concave ``g: R^k -> R``: SER is
``h = id, g = u`` and ESR is ``h = u, g = id`` (:func:`ser`, :func:`esr`; :class:`AET` takes
any pair). This decomposition and the per-step rewards that absorb ``h``
(:func:`telescoped_rewards`, :func:`projected_rewards`) are a reconstruction from the
abstract (the paper's text is not available; ``notes/rl.md`` section 5); with the
finite-horizon problem of :mod:`.aetdice` they are all of it, and that module's docstring
lists the parts.

Each utility is a ``NamedTuple`` of arrays, so its weights are pytree leaves (``vmap`` over
preferences needs no recompile), with

* ``value(returns)``: ``u`` on ``(..., m)``;
* ``multipliers(dual)`` and ``conjugate(mu)``: the concave conjugate representation
  ``u(y) = min_mu mu^T y - u_*(mu)`` that DICE duals need when ``u`` is the outer ``g``
  (FairDICE, arXiv 2506.08062), with ``mu`` parametrised by unconstrained ``dual`` variables
  (``dual_size`` of them; ``initial_dual(at)`` puts ``mu`` at, or near, a supergradient of
  ``u`` at a return ``at``, e.g. the data's mean, where the optimum of a policy close to the
  data's lies);
* ``check_returns(returns, name)``: a host-side check that ``u`` is defined on the returns.
"""

from __future__ import annotations

import numbers
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "AET",
    "Linear",
    "NashWelfare",
    "RiskAverse",
    "Tchebycheff",
    "Threshold",
    "aet_value",
    "esr",
    "linear",
    "nash_welfare",
    "projected_rewards",
    "risk_averse",
    "ser",
    "tchebycheff",
    "telescoped_rewards",
    "threshold",
]


def _vector(values, name: str, *, size: int | None = None, positive: bool = False) -> jax.Array:
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1 or array.size == 0 or (size is not None and array.size != size):
        want = f"({size},)" if size is not None else "(m,) with m >= 1"
        raise ValueError(f"{name} must have shape {want}, got {array.shape}")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} must be finite, got {array.tolist()}")
    if positive and not np.all(array > 0):
        raise ValueError(f"{name} must be > 0, got {array.tolist()}")
    return jnp.asarray(array, jnp.float32)


def _weights(weights, m: int | None) -> jax.Array:
    if m is not None and (isinstance(m, bool) or not isinstance(m, numbers.Integral) or m < 1):
        raise ValueError(f"m={m!r} must be a positive int (the number of objectives)")
    if weights is None:
        if m is None:
            raise ValueError("pass weights, or the number of objectives m for equal weights")
        return jnp.full((m,), 1.0 / m, jnp.float32)
    return _vector(weights, "weights", size=m, positive=True)


def _per_objective(value, m: int, name: str) -> jax.Array:
    """A number or an ``(m,)`` vector, as a finite float32 ``(m,)`` vector."""
    array = np.asarray(value, dtype=np.float64)
    if array.ndim == 0:
        array = np.full((m,), float(array))
    return _vector(array, name, size=m)


def _like(vector: jax.Array, returns: jax.Array) -> jax.Array:
    """``vector (m,)`` broadcast to ``returns (..., m)`` explicitly (no rank promotion); a
    ``ValueError`` unless both have ``m`` objectives (a one-objective utility's ``(1,)``
    would otherwise stretch over any number)."""
    if jnp.shape(returns)[-1:] != jnp.shape(vector):
        raise ValueError(
            f"the utility is for {jnp.shape(vector)[0]} objectives, but the returns have "
            f"{jnp.shape(returns)[-1] if jnp.ndim(returns) else 0} (shape {jnp.shape(returns)})"
        )
    return jnp.broadcast_to(vector, returns.shape)


# exp(x) overflows float32 past 88.7; the risk-averse utility refuses exponents above this
_MAX_EXPONENT = 80.0


def _format_list(values) -> str:
    """``[a, b, ...]`` with each value to 4 significant digits."""
    return "[" + ", ".join(f"{float(v):.4g}" for v in values) + "]"


def _check_finite(returns, name: str, size: int) -> np.ndarray:
    """``returns`` as float64 ``(..., size)``; a ValueError unless finite, with ``size``
    objectives."""
    array = np.asarray(returns, dtype=np.float64)
    if array.ndim == 0 or array.shape[-1] != size:
        raise ValueError(
            f"the utility is for {size} objectives, but {name} have "
            f"{array.shape[-1] if array.ndim else 0} (shape {array.shape})"
        )
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} must be finite")
    return array


class Linear(NamedTuple):
    """``u(G) = w^T G``: SER and ESR coincide. ``mu = w`` is fixed (no dual variables)."""

    weights: jax.Array  # (m,)

    def value(self, returns: jax.Array) -> jax.Array:
        _like(self.weights, returns)  # a ValueError unless the returns have m objectives
        return returns @ self.weights

    @property
    def dual_size(self) -> int:
        return 0

    def initial_dual(self, at: jax.Array) -> jax.Array:
        del at
        return jnp.zeros((0,), jnp.float32)

    def multipliers(self, dual: jax.Array) -> jax.Array:
        del dual
        return self.weights

    def conjugate(self, mu: jax.Array) -> jax.Array:
        del mu
        return jnp.zeros((), jnp.float32)

    def check_returns(self, returns, name: str = "returns") -> None:
        _check_finite(returns, name, self.weights.shape[0])


class NashWelfare(NamedTuple):
    """Weighted Nash social welfare ``u(G) = sum_i w_i log(G_i + shift_i)``.

    Defined for ``G_i + shift_i > 0`` only: returns that can be negative need a ``shift``.
    Conjugate (FairDICE's form with weights and a shift): ``mu_i = w_i / (y_i + shift_i)`` at
    the minimum, ``u_*(mu) = sum_i w_i (log mu_i + 1 - log w_i) - mu_i shift_i``, ``mu > 0``
    parametrised as ``exp(dual)``.
    """

    weights: jax.Array  # (m,)
    shift: jax.Array  # (m,)

    def value(self, returns: jax.Array) -> jax.Array:
        return jnp.sum(
            _like(self.weights, returns) * jnp.log(returns + _like(self.shift, returns)), axis=-1
        )

    @property
    def dual_size(self) -> int:
        return self.weights.shape[0]

    def initial_dual(self, at: jax.Array) -> jax.Array:
        """``mu = grad u(at)`` (``at`` a mean return): ``w / (at + shift)``."""
        return jnp.log(self.weights) - jnp.log(jnp.maximum(at + self.shift, 1e-6))

    def multipliers(self, dual: jax.Array) -> jax.Array:
        return jnp.exp(dual)

    def conjugate(self, mu: jax.Array) -> jax.Array:
        w = self.weights
        return jnp.sum(w * (jnp.log(mu) + 1.0 - jnp.log(w)) - mu * self.shift)

    def check_returns(self, returns, name: str = "returns") -> None:
        array = _check_finite(returns, name, self.weights.shape[0])
        minimum = array.reshape(-1, array.shape[-1]).min(axis=0)
        shift = np.asarray(self.shift, np.float64)
        if np.any(minimum + shift <= 0):
            worst = int(np.argmin(minimum + shift))
            # the advice lifts every objective: a shift sized for the worst one alone can
            # leave another below 0 (a low return with a larger shift of its own)
            if np.all(shift == shift[0]):
                advice = (
                    f"pass shift > {np.max(-minimum):.4g}, e.g. "
                    f"nash_welfare(..., shift={np.max(-minimum) + 1:.4g})"
                )
            else:
                lifted = np.maximum(shift, -minimum + 1)
                advice = (
                    f"pass shift_i > {_format_list(-minimum)} per objective, e.g. "
                    f"nash_welfare(..., shift={_format_list(lifted)})"
                )
            raise ValueError(
                f"Nash welfare takes log(G + shift), undefined where G + shift <= 0: {name} "
                f"reach {minimum[worst]:.4g} on objective {worst}, and shift "
                f"{shift[worst]:.4g} does not lift that above 0; {advice}"
            )


class Tchebycheff(NamedTuple):
    """Weighted Tchebycheff (max-min) utility ``u(G) = min_i w_i (G_i - z_i)``.

    Conjugate: ``u(y) = min over the simplex of sum_i p_i w_i (y_i - z_i)``, so
    ``mu = w * p`` with ``p = softmax(dual)`` and ``u_*(mu) = mu^T z``.
    """

    weights: jax.Array  # (m,)
    reference: jax.Array  # (m,) the point z

    def value(self, returns: jax.Array) -> jax.Array:
        return jnp.min(
            _like(self.weights, returns) * (returns - _like(self.reference, returns)), axis=-1
        )

    @property
    def dual_size(self) -> int:
        return self.weights.shape[0]

    def initial_dual(self, at: jax.Array) -> jax.Array:
        """Equal mass on every objective (the middle of the supergradients at a tie): the
        data's mean return often sits near the kink, where a one-sided start would bias
        ``mu``."""
        del at
        return jnp.zeros(self.weights.shape, jnp.float32)

    def multipliers(self, dual: jax.Array) -> jax.Array:
        return self.weights * jax.nn.softmax(dual)

    def conjugate(self, mu: jax.Array) -> jax.Array:
        return mu @ self.reference

    def check_returns(self, returns, name: str = "returns") -> None:
        _check_finite(returns, name, self.weights.shape[0])


class Threshold(NamedTuple):
    """Satiating utility ``u(G) = sum_i w_i min(G_i, tau_i)``: a return beyond its threshold
    is worth nothing more, so a risk-neutral linear gain below it turns into risk aversion
    across it under ESR.

    Conjugate: ``min(y, tau) = min_{p in [0, 1]} p y + (1 - p) tau``, so ``mu = w * p`` with
    ``p = sigmoid(dual)`` and ``u_*(mu) = -sum_i (w_i - mu_i) tau_i``.
    """

    weights: jax.Array  # (m,)
    thresholds: jax.Array  # (m,)

    def value(self, returns: jax.Array) -> jax.Array:
        return jnp.sum(
            _like(self.weights, returns) * jnp.minimum(returns, _like(self.thresholds, returns)),
            axis=-1,
        )

    @property
    def dual_size(self) -> int:
        return self.weights.shape[0]

    def initial_dual(self, at: jax.Array) -> jax.Array:
        """``p = 1/2`` (the middle of the supergradients at the kink): thresholds are often set
        near the data's mean return, where a one-sided start would bias ``mu``."""
        del at
        return jnp.zeros(self.weights.shape, jnp.float32)

    def multipliers(self, dual: jax.Array) -> jax.Array:
        return self.weights * jax.nn.sigmoid(dual)

    def conjugate(self, mu: jax.Array) -> jax.Array:
        return -jnp.sum((self.weights - mu) * self.thresholds)

    def check_returns(self, returns, name: str = "returns") -> None:
        _check_finite(returns, name, self.weights.shape[0])


class RiskAverse(NamedTuple):
    """Exponential (constant absolute risk aversion) utility
    ``u(G) = sum_i w_i (1 - exp(-rho G_i)) / rho``, ``rho > 0``.

    Conjugate: ``mu_i = w_i exp(-rho y_i)`` at the minimum,
    ``u_*(mu) = sum_i (mu_i - w_i - mu_i log(mu_i / w_i)) / rho``, ``mu = exp(dual)``.
    """

    weights: jax.Array  # (m,)
    rho: jax.Array  # ()

    def value(self, returns: jax.Array) -> jax.Array:
        return (
            jnp.sum(_like(self.weights, returns) * -jnp.expm1(-self.rho * returns), axis=-1)
            / self.rho
        )

    @property
    def dual_size(self) -> int:
        return self.weights.shape[0]

    def initial_dual(self, at: jax.Array) -> jax.Array:
        """``mu = grad u(at)`` (``at`` a mean return): ``w exp(-rho at)``."""
        return jnp.log(self.weights) - self.rho * at

    def multipliers(self, dual: jax.Array) -> jax.Array:
        return jnp.exp(dual)

    def conjugate(self, mu: jax.Array) -> jax.Array:
        w = self.weights
        return jnp.sum(mu - w - mu * jnp.log(mu / w)) / self.rho

    def check_returns(self, returns, name: str = "returns") -> None:
        array = _check_finite(returns, name, self.weights.shape[0])
        rho = float(self.rho)
        exponent = float(np.max(-rho * array, initial=-np.inf))
        if exponent > _MAX_EXPONENT:  # exp(-rho G) and mu = w exp(-rho y) overflow float32
            raise ValueError(
                f"the risk-averse utility takes exp(-rho G), which float32 cannot hold for "
                f"rho * G < -{_MAX_EXPONENT:g}: {name} reach {float(np.min(array)):.4g} with "
                f"rho = {rho:.4g}; rescale the rewards or lower rho below "
                f"{_MAX_EXPONENT / -float(np.min(array)):.4g}"
            )


Utility = Linear | NashWelfare | Tchebycheff | Threshold | RiskAverse


def linear(weights) -> Linear:
    """``u(G) = w^T G`` with weights ``(m,)``, each > 0."""
    return Linear(_weights(weights, None))


def nash_welfare(weights=None, *, m: int | None = None, shift=0.0) -> NashWelfare:
    """``sum_i w_i log(G_i + shift_i)``; equal weights ``1/m`` when ``weights`` is None.
    ``shift`` (a number or ``(m,)``) must make every return positive."""
    w = _weights(weights, m)
    return NashWelfare(w, _per_objective(shift, w.shape[0], "shift"))


def tchebycheff(weights=None, *, m: int | None = None, reference=0.0) -> Tchebycheff:
    """``min_i w_i (G_i - z_i)`` with reference point ``z`` (a number or ``(m,)``)."""
    w = _weights(weights, m)
    return Tchebycheff(w, _per_objective(reference, w.shape[0], "reference"))


def threshold(thresholds, weights=None) -> Threshold:
    """``sum_i w_i min(G_i, tau_i)`` with thresholds ``tau`` ``(m,)``; equal weights if None."""
    tau = _vector(thresholds, "thresholds")
    return Threshold(_weights(weights, tau.shape[0]), tau)


def risk_averse(rho: float, weights=None, *, m: int | None = None) -> RiskAverse:
    """``sum_i w_i (1 - exp(-rho G_i)) / rho`` with risk aversion ``rho > 0``."""
    w = _weights(weights, m)
    rho = float(_vector([rho], "rho", positive=True)[0])
    return RiskAverse(w, jnp.asarray(rho, jnp.float32))


class AET(NamedTuple):
    """The objective ``g(E[h(G)])`` (module docstring).

    Attributes:
      inner: ``h``: None for the identity (``k = m``), or a utility, read as ``h(G) =
        [u(G)]`` (``k = 1``).
      outer: ``g``, a concave utility over ``R^k`` with a conjugate (one of this module's).
    """

    inner: Utility | None
    outer: Utility

    @property
    def criterion(self) -> str:
        """ "SER" (``h = id``), "ESR" (``h = u``, ``g`` linear) or "AET" (any other pair)."""
        if self.inner is None:
            return "SER"
        return "ESR" if isinstance(self.outer, Linear) else "AET"

    @property
    def utility(self) -> Utility:
        """The utility of the vector return: ``g`` for SER, ``h`` otherwise (its weights are
        the objective's preference)."""
        return self.outer if self.inner is None else self.inner

    def transform(self, returns: jax.Array) -> jax.Array:
        """``h(returns)``, ``(..., k)``."""
        return returns if self.inner is None else self.inner.value(returns)[..., None]

    @property
    def size(self) -> int:
        """``k``, the number of transformed objectives."""
        return self.outer.weights.shape[0]

    def check_returns(self, partial_returns, episode_returns) -> None:
        """Raises where the objective is undefined on a dataset's returns (e.g. Nash welfare
        of a negative return without a shift): ``h`` at every accumulated return ``x_t`` an
        episode passes through (``partial_returns``), and ``g`` at every episode's ``h(G)``
        (for SER ``h(G) = G``; a conservative stand-in for the expected ``h(G)`` its dual can
        reach: ``g(mean h(G))`` needs ``g`` defined there, which an ``h`` defined everywhere
        does not ensure, e.g. Nash welfare of a negative linear ``h``)."""
        if self.inner is None:
            self.outer.check_returns(episode_returns, "the dataset's episode returns")
            return
        self.inner.check_returns(partial_returns, "the dataset's accumulated returns")
        transformed = self.transform(jnp.asarray(episode_returns, jnp.float32))
        self.outer.check_returns(transformed, "h of the dataset's episode returns")


def ser(utility: Utility) -> AET:
    """SER: ``u(E[G])``, i.e. ``h = id`` and ``g = u``."""
    return AET(None, utility)


def esr(utility: Utility) -> AET:
    """ESR: ``E[u(G)]``, i.e. ``h = u`` (``k = 1``) and ``g = id``."""
    return AET(utility, Linear(jnp.ones((1,), jnp.float32)))


def telescoped_rewards(objective: AET, rewards: jax.Array, mask: jax.Array) -> jax.Array:
    """Per-step transformed rewards ``r~_t = h(x_t + r_t) - h(x_t)`` with ``x_t`` the
    accumulated return before step ``t``; their episode sum is ``h(G) - h(0)``.

    Args:
      rewards: ``(..., T, m)`` reward vectors of episodes.
      mask: ``(..., T)``, 1 for steps that happened (padding after an episode's end is 0).

    Returns:
      ``(..., T, k)``, zero on masked steps.
    """
    rewards = rewards * mask[..., None]
    after = jnp.cumsum(rewards, axis=-2)
    before = after - rewards
    return (objective.transform(after) - objective.transform(before)) * mask[..., None]


def projected_rewards(
    objective: AET, rewards: jax.Array, mask: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """Per-step transformed rewards anchored at the projected return (**reconstruction**,
    refined here: ``notes/rl.md`` section 5 anchors them at ``x_t``, :func:`telescoped_rewards`):

    .. math::
      \\tilde r_t = h(y_t^+) - h(y_t), \\qquad y_t = x_t + \\bar R_t, \\qquad
      y_t^+ = x_{t+1} + c_t \\bar R_{t+1},

    with ``x_t`` the accumulated return before step ``t``, ``bar R_t`` the mean over the
    episodes still running at ``t`` of their return from ``t`` on, and ``c_t`` 0 where the
    episode ends with step ``t`` (termination or horizon), 1 otherwise; ``y`` is clipped, per
    objective, into the range of the accumulated returns ``x`` (0 included). The steps
    telescope: ``y_0 = clip(bar R_0)`` is the same for every episode and the last step's
    ``y^+`` is the episode's return ``G``, so ``h(y_0) + sum_t r~_t = h(G)``, exactly as for
    :func:`telescoped_rewards`. The two differ by a potential of the augmented state,
    ``h(clip(x + bar R_t)) - h(x)``, zero at the horizon and after a termination, so a finite-
    horizon DICE over ``(s, x, t)`` has the same optimum under both.

    Why anchor at ``y``: ``r~_t`` is then about ``h'(y_t) (r_t - bar r_t)``, the step's effect
    on ``h`` at the return the episode is heading for. Anchored at ``x_t`` a concave ``h``
    front-loads the increments (``h`` is steepest near a zero return), and their spread over
    all steps, which sets the reward scale that divides them in the dual
    (:func:`.policy.reward_scale`), is mostly that drift over time, which ``nu(., t)``
    absorbs, not the differences between actions. On the ``morl`` suite's halfcheetah data
    under Nash ESR at ``w = (0.3, 0.7)`` the mean increment falls from 0.157 at ``t = 0`` to
    0.009 at ``t = 99`` and the scale is 0.028, against 0.0022 anchored at ``y``
    (``benchmarks/results/probes/morl_anchor_halfcheetah.json``). Measured effect
    (``benchmarks.morl_policy_probe``): on the balance task every ESR objective scores higher
    at every key (Nash ESR's gap to the optimum 1.2% against 3.6%); on held-out halfcheetah
    data the scores moved within their noise.

    Args:
      rewards: ``(..., T, m)`` reward vectors of episodes (every leading index an episode).
      mask: ``(..., T)``, 1 for steps that happened (each episode's first ones).

    Returns:
      ``(transformed, offset)``: ``(..., T, k)`` rewards, zero on masked steps, and ``h(y_0)``,
      ``(k,)``.
    """
    rewards = rewards * mask[..., None]
    after = jnp.cumsum(rewards, axis=-2)
    before = after - rewards
    remaining = jnp.flip(jnp.cumsum(jnp.flip(rewards, -2), axis=-2), -2)  # from t on
    flat_mask = mask.reshape((-1, mask.shape[-1]))
    running = jnp.sum(flat_mask, axis=0)  # (T,) episodes still running at t
    total = jnp.sum(remaining.reshape((-1, *remaining.shape[-2:])), axis=0)  # (T, m)
    mean_remaining = total / jnp.maximum(running, 1.0)[:, None]
    next_remaining = jnp.concatenate([mean_remaining[1:], jnp.zeros_like(mean_remaining[:1])])
    continues = jnp.concatenate([mask[..., 1:], jnp.zeros_like(mask[..., :1])], axis=-1)
    flat_after = after.reshape((-1, after.shape[-1]))
    low = jnp.minimum(jnp.min(flat_after, axis=0), 0.0)  # (m,)
    high = jnp.maximum(jnp.max(flat_after, axis=0), 0.0)

    def clipped(returns):  # into [low, high] per objective
        shape = returns.shape
        return jnp.clip(returns, jnp.broadcast_to(low, shape), jnp.broadcast_to(high, shape))

    start = clipped(before + jnp.broadcast_to(mean_remaining, after.shape))
    end = clipped(after + continues[..., None] * jnp.broadcast_to(next_remaining, after.shape))
    transformed = (objective.transform(end) - objective.transform(start)) * mask[..., None]
    return transformed, objective.transform(clipped(mean_remaining[0]))


def aet_value(objective: AET, returns: jax.Array, weights: jax.Array | None = None) -> jax.Array:
    """``g(mean h(G))`` over sample returns ``(n, m)`` (optionally weighted): the Monte Carlo
    value of the objective. Concrete returns are checked first: a ValueError where ``h`` is
    undefined on them or ``g`` on their mean ``h`` (e.g. Nash welfare of a negative return
    without a shift, which would read as NaN); traced ones (under ``jit`` or ``vmap``) are
    not. ``returns`` must be ``(n, m)`` with ``n >= 1``, ``weights`` (concrete ones) ``n``
    finite numbers >= 0 with a positive sum."""
    if not isinstance(objective, AET):
        raise TypeError(
            f"objective must be an AET objective, got {type(objective).__name__}: wrap a "
            "utility with ser(...) or esr(...)"
        )
    returns = jnp.asarray(returns)
    if returns.ndim != 2 or returns.shape[0] < 1:  # (k, n, m) gave k values
        raise ValueError(f"returns must have shape (n >= 1, m), got {returns.shape}")
    _like(objective.utility.weights, returns)  # a ValueError unless they have m objectives
    if weights is not None:
        weights = jnp.asarray(weights)
        if weights.shape != returns.shape[:1]:
            raise ValueError(
                f"weights must have shape ({returns.shape[0]},), one per return, got "
                f"{weights.shape}"
            )
        if not isinstance(weights, jax.core.Tracer):
            w = np.asarray(weights, np.float64)
            if not (np.all(np.isfinite(w)) and np.all(w >= 0) and w.sum() > 0):
                raise ValueError(
                    "weights must be finite and >= 0 with a positive sum (a weighted mean), "
                    f"got min {w.min():.4g}, sum {w.sum():.4g}"
                )
    if objective.inner is not None and not isinstance(returns, jax.core.Tracer):
        objective.inner.check_returns(returns, "the returns")
    transformed = objective.transform(returns)
    if weights is None:
        mean = jnp.mean(transformed, axis=0)
    else:
        mean = weights @ transformed / jnp.sum(weights)
    if not isinstance(mean, jax.core.Tracer):
        objective.outer.check_returns(mean, "the mean of h(returns)")
    return objective.outer.value(mean)
