"""SPSA: simultaneous-perturbation stochastic approximation with Rademacher probes.

References:
  Spall, "Multivariate stochastic approximation using a simultaneous perturbation gradient
  approximation", IEEE TAC 1992.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import optax

from jaxopt_suite.zeroth_order._common import (
    Estimate,
    ValueFn,
    ZerothOrderState,
    check_positive,
    check_scalar,
    random_direction_estimate,
    random_direction_transform,
)

__all__ = ["ScaleBySPSAState", "scale_by_spsa", "spsa_estimate"]

ScaleBySPSAState = ZerothOrderState


def _rademacher(key: jax.Array, shape: tuple[int, int], dtype: Any) -> jax.Array:
    return jax.random.rademacher(key, shape, dtype=dtype)


def spsa_estimate(
    value_fn: ValueFn,
    params: Any,
    key: jax.Array,
    *,
    num_directions: int = 1,
    sigma: float | jax.Array = 1e-3,
    antithetic: bool = True,
    value: jax.Array | None = None,
) -> Estimate:
    """SPSA gradient estimate averaged over ``num_directions`` Rademacher probes.

    .. math::
      \\hat g = \\frac{1}{q} \\sum_{i=1}^q
        \\frac{f(x + \\sigma \\Delta_i) - f(x - \\sigma \\Delta_i)}{2 \\sigma} \\Delta_i,
      \\qquad \\Delta_i \\in \\{-1, +1\\}^d,

    using ``1 / Delta_ij = Delta_ij`` (Spall 1992, eq. 2.2). On a quadratic the difference is
    exact and ``E[ghat] = grad f``; otherwise the bias is O(sigma^2).

    Args:
      value_fn: ``value_fn(params) -> scalar loss``, evaluated under ``jax.vmap`` over the
        probes: a host callback needs a ``vmap_method``, e.g.
        ``jax.pure_callback(..., vmap_method="sequential")``.
      params: the point (any pytree of floating arrays).
      key: PRNG key for the probes.
      num_directions: number of probes q (static).
      sigma: perturbation size c. With 16-bit float parameters it must exceed the dtype's
        spacing at the parameters' magnitude (bfloat16 at ``|x| ~ 1``: ``2**-7``), or
        ``x + sigma v`` rounds back to ``x`` and the estimate is zero or biased; concrete
        parameters are checked, traced ones (under ``jit``) cannot be.
      antithetic: central (2q evaluations) or forward (q + 1) differences.
      value: ``value_fn(params)`` if already known: forward differences then cost q.

    Returns:
      :class:`Estimate` with the gradient estimate (a pytree like params) and its cost.
    """
    return random_direction_estimate(
        value_fn,
        params,
        key,
        sample=_rademacher,
        num_directions=num_directions,
        sigma=sigma,
        antithetic=antithetic,
        value=value,
    )


def scale_by_spsa(
    key: jax.Array,
    *,
    num_directions: int = 1,
    sigma: float | jax.Array = 1e-3,
    sigma_decay: float | jax.Array = 0.101,
    antithetic: bool = True,
) -> optax.GradientTransformationExtraArgs:
    """SPSA as an optax transform: returns the gradient estimate, ignoring incoming updates.

    The perturbation follows Spall's gain sequence ``c_k = sigma / (k + 1) ** sigma_decay``
    (0.101 is Spall's recommended exponent; 0 keeps it constant). The step-size sequence
    ``a_k`` is the job of the optimizer chained after this transform.

    Example::

      opt = optax.chain(scale_by_spsa(jax.random.key(0), num_directions=4), optax.sgd(1e-2))
      updates, state = opt.update(params, state, params, value_fn=lambda p: loss(p, batch))

    Args:
      key: PRNG key kept in the state and split at every update.
      num_directions: probes per update (static).
      sigma: initial perturbation size (with 16-bit parameters, and for ``value_fn``, see
        :func:`spsa_estimate`).
      sigma_decay: exponent of the perturbation decay, finite and >= 0 (a negative one
        grows the perturbation without bound).
      antithetic: central or forward differences; forward differences reuse the extra arg
        ``value`` (the loss at params, as optax passes it) when given.

    Returns:
      An ``optax.GradientTransformationExtraArgs`` whose ``update`` takes ``value_fn``.
    """
    check_positive("sigma", sigma)
    check_scalar("sigma_decay", sigma_decay, "be finite and >= 0", lambda v: 0 <= v < math.inf)
    return random_direction_transform(
        "scale_by_spsa",
        key,
        sample=_rademacher,
        num_directions=num_directions,
        sigma_at=lambda count: sigma / (count + 1.0) ** sigma_decay,
        antithetic=antithetic,
    )
