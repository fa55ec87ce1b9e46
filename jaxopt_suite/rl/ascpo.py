"""ASCPO's cost surrogate and constraint (Zhao et al., "Absolute state-wise constrained
policy optimization", arXiv 2410.01212).

ASCPO is CPO run on the maximum MDP (the state carries the running max cost ``M``; the
cost increments ``D_t = max(C_t - M_t, 0)`` sum to the episode's max state-wise cost
``D_max``), with the expectation constraint of SCPO replaced by an absolute bound.

**Reconstruction.** Only the abstract and the authors' code are public (``notes/rl.md``
section 1); the paper's exact inequality is not. The pieces below are kept here only:

* The surrogate is the code's ``compute_cost_pi``: over a batch of ``N`` episodes, with
  ``rho`` the probability ratio, ``A_D`` the centred GAE of the increments, ``delta_D``
  the centred one-step TD residual of the increment critic ``V_D``,

  .. math::
    S(\\theta) = \\tfrac1N \\sum \\rho A_D
      + k\\,\\omega_1 \\Big|\\tfrac1N \\sum \\big((\\rho - 1)\\,\\delta_D^2
      + 2 \\rho\\, \\delta_D\\, \\omega_2\\big)\\Big|
      + k\\,\\omega_1 \\big(L^2 + 2 L\\, |\\overline{V_D}|\\big),
    \\qquad L = \\big|\\tfrac1N \\sum \\delta_D\\big|,

  (the mean max-cost advantage plus ``k`` times the bounds on the change of the max
  cost's spread; the last term does not depend on ``theta``). Its gradient is CPO's ``b``
  and its change is what the line search limits.
* The constraint value is the absolute bound at the current policy,
  ``c = mean(D_max) + k std(D_max) - w``, from the batch's finished episodes. The authors'
  code uses ``mean(D_max) - target`` there; we add ``k std`` so that the constraint is
  the bound the certificate needs.
* The certificate (Cantelli's inequality, any distribution with finite variance): if
  ``E[D_max] + k Std[D_max] <= w`` then ``P(D_max > w) <= 1 / (1 + k^2)``; ``k = 4.36``
  gives 5%, ``k = 7`` (the code's default) 2%. It holds for the true moments; the batch
  estimates carry sampling error.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp


def certificate(k: float) -> float:
    """The violation probability ``1 / (1 + k^2)`` the absolute bound certifies, for a
    finite ``k >= 0`` (Cantelli's inequality is about ``k`` standard deviations above the
    mean; a negative ``k`` would certify a bound below the mean, which it does not)."""
    value = float(k)
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"k={k!r} must be finite and >= 0")
    return 1.0 / (1.0 + value**2)


def constraint_value(mean_max_cost, std_max_cost, limit, k) -> jax.Array:
    """``c = mean + k std - w`` (positive: the bound is violated)."""
    return mean_max_cost + k * std_max_cost - limit


def surrogate(
    ratio: jax.Array,
    advantage: jax.Array,
    td_residual: jax.Array,
    cost_values: jax.Array,
    weights: jax.Array,
    episodes: jax.Array,
    *,
    k: float,
    omega1: float,
    omega2: float,
) -> jax.Array:
    """``S(theta)`` of the module docstring; ``weights`` mask the samples (truncated steps
    get 0) and ``episodes`` is ``N``."""

    def per_episode(x):
        return jnp.sum(weights * x) / episodes

    mean_advantage = per_episode(ratio * advantage)
    mean_variance = jnp.abs(
        per_episode((ratio - 1.0) * td_residual**2 + 2.0 * ratio * td_residual * omega2)
    )
    drift = jnp.abs(per_episode(td_residual))
    mean_value = jnp.sum(weights * cost_values) / jnp.maximum(jnp.sum(weights), 1.0)
    variance_mean = drift**2 + 2.0 * drift * jnp.abs(mean_value)
    return mean_advantage + k * omega1 * (mean_variance + variance_mean)
