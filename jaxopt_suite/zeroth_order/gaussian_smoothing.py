"""Two-point Gaussian-smoothing gradient estimator (Nesterov and Spokoiny).

References:
  Nesterov and Spokoiny, "Random gradient-free minimization of convex functions",
  Foundations of Computational Mathematics 2017.
"""

from __future__ import annotations

from typing import Any

import jax
import optax

from jaxopt_suite.zeroth_order._common import (
    Estimate,
    ValueFn,
    ZerothOrderState,
    check_positive,
    random_direction_estimate,
    random_direction_transform,
)

__all__ = [
    "ScaleByGaussianSmoothingState",
    "gaussian_smoothing_estimate",
    "scale_by_gaussian_smoothing",
]

ScaleByGaussianSmoothingState = ZerothOrderState


def _gaussian(key: jax.Array, shape: tuple[int, int], dtype: Any) -> jax.Array:
    return jax.random.normal(key, shape, dtype=dtype)


def gaussian_smoothing_estimate(
    value_fn: ValueFn,
    params: Any,
    key: jax.Array,
    *,
    num_directions: int = 1,
    sigma: float | jax.Array = 1e-3,
    antithetic: bool = True,
    value: jax.Array | None = None,
) -> Estimate:
    """Two-point estimate of the gradient of the Gaussian smoothing ``f_sigma``.

    .. math::
      \\hat g = \\frac{1}{q} \\sum_{i=1}^q
        \\frac{f(x + \\sigma u_i) - f(x - \\sigma u_i)}{2 \\sigma} u_i,
      \\qquad u_i \\sim N(0, I_d),

    unbiased for ``grad f_sigma(x)`` with ``f_sigma(x) = E_u f(x + sigma u)``, and
    ``E ||ghat - g||^2 = (d + 1) / q ||g||^2`` on a quadratic (Nesterov and Spokoiny 2017).

    Args:
      value_fn: ``value_fn(params) -> scalar loss``, evaluated under ``jax.vmap`` over the
        probes: a host callback needs a ``vmap_method``, e.g.
        ``jax.pure_callback(..., vmap_method="sequential")``.
      params: the point (any pytree of floating arrays).
      key: PRNG key for the probes.
      num_directions: number of probes q (static).
      sigma: smoothing radius mu. With 16-bit float parameters it must exceed the dtype's
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
        sample=_gaussian,
        num_directions=num_directions,
        sigma=sigma,
        antithetic=antithetic,
        value=value,
    )


def scale_by_gaussian_smoothing(
    key: jax.Array,
    *,
    num_directions: int = 1,
    sigma: float | jax.Array = 1e-3,
    antithetic: bool = True,
) -> optax.GradientTransformationExtraArgs:
    """Gaussian smoothing as an optax transform (returns the estimate, ignores updates).

    Args:
      key: PRNG key kept in the state and split at every update.
      num_directions: probes per update (static).
      sigma: smoothing radius (with 16-bit parameters, and for ``value_fn``, see
        :func:`gaussian_smoothing_estimate`).
      antithetic: central or forward differences; forward differences reuse the extra arg
        ``value`` (the loss at params, as optax passes it) when given.

    Returns:
      An ``optax.GradientTransformationExtraArgs`` whose ``update`` takes ``value_fn``.
    """
    check_positive("sigma", sigma)
    return random_direction_transform(
        "scale_by_gaussian_smoothing",
        key,
        sample=_gaussian,
        num_directions=num_directions,
        sigma_at=lambda count: sigma,
        antithetic=antithetic,
    )
