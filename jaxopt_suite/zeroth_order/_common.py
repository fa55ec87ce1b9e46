"""Pieces shared by every zeroth-order estimator: validation, flat views, finite differences.

All estimators here use the two-point (antithetic) directional difference

.. math::
  D_v f(x) = \\frac{f(x + \\sigma v) - f(x - \\sigma v)}{2\\sigma},

which is exact for quadratics and has O(sigma^2) bias otherwise, or the one-point forward
difference ``(f(x + sigma v) - f(x)) / sigma`` when ``antithetic=False`` (O(sigma) bias). A
forward difference reuses ``f(x)`` when the caller already has it (optax's ``value`` extra
arg, e.g. from the forward pass that produced the activations), so q probes cost q
evaluations instead of 2q.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.flatten_util import ravel_pytree

from jaxopt_suite._checks import check_key, check_scalar

ValueFn = Callable[[Any], jax.Array]


class Estimate(NamedTuple):
    """A gradient estimate and what it cost."""

    grad: Any  # pytree like params
    num_evals: int  # value_fn evaluations used (static)


def check_int(name: str, value: Any, minimum: int = 1) -> int:
    """Static integer sizes must be Python ints >= minimum."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(
            f"{name} must be a Python int >= {minimum} (a static size), got {value!r}; under "
            f"optax.inject_hyperparams pass static_args=({name!r},)"
        )
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def check_positive(name: str, value: Any) -> None:
    """Checks a concrete hyper-parameter is a finite scalar > 0 (an infinite step made every
    difference NaN); traced values (schedules) pass through."""
    check_scalar(name, value, "be finite and > 0", lambda v: 0 < v < math.inf)


def check_value_fn(value_fn: Any, params: Any) -> jnp.dtype:
    """Raises unless ``value_fn(params)`` returns a real scalar (checked abstractly); returns
    the loss dtype."""
    if value_fn is None:
        raise TypeError("value_fn is required: pass update(..., value_fn=lambda p: loss(p, batch))")
    if not callable(value_fn):
        raise TypeError(f"value_fn must be callable, got {type(value_fn).__name__}")
    out = jax.eval_shape(value_fn, params)
    if not hasattr(out, "shape"):
        raise ValueError(
            "value_fn must return a scalar loss, got a "
            f"{type(out).__name__} (is it a has_aux function returning (loss, aux)?)"
        )
    if out.shape != () or not jnp.issubdtype(out.dtype, jnp.floating):
        raise ValueError(
            f"value_fn must return a scalar floating loss, got shape {out.shape} dtype {out.dtype}"
        )
    return out.dtype


def flat_view(params: Any) -> tuple[jax.Array, Callable[[jax.Array], Any]]:
    """The parameters as one flat vector and the map back to the pytree."""
    flat, unravel = ravel_pytree(params)
    if flat.size == 0:
        raise ValueError("params has no array leaves to estimate a gradient for")
    if not jnp.issubdtype(flat.dtype, jnp.floating):
        raise TypeError(f"params must be floating point, got dtype {flat.dtype}")
    return flat, unravel


def directional_differences(
    value_fn: ValueFn,
    params: Any,
    plus: Callable[[Any, jax.Array], Any],
    directions: Any,
    sigma: jax.Array,
    antithetic: bool,
    value: jax.Array | None = None,
) -> tuple[jax.Array, int]:
    """Finite-difference directional derivatives along a batch of directions.

    Args:
      value_fn: scalar loss of params.
      params: the point.
      plus: ``plus(direction, step)`` returns ``params + step * direction`` as a params pytree.
      directions: a pytree whose leaves carry a leading axis of size q.
      sigma: the finite-difference step.
      antithetic: two-point central differences if True, else forward differences.
      value: ``value_fn(params)`` if already known (forward differences then skip that
        evaluation); unused by central differences.

    Returns:
      ``(responses[q], num_evals)``.
    """
    num = jax.tree.leaves(directions)[0].shape[0]
    if antithetic:

        def central(direction):
            f_plus = value_fn(plus(direction, sigma))
            f_minus = value_fn(plus(direction, -sigma))
            return (f_plus - f_minus) / (2.0 * sigma)

        return jax.vmap(central)(directions), 2 * num
    f_zero = value_fn(params) if value is None else value
    forward = jax.vmap(lambda direction: (value_fn(plus(direction, sigma)) - f_zero) / sigma)
    return forward(directions), num + (1 if value is None else 0)


def check_value(value: Any, loss_dtype: jnp.dtype) -> jax.Array | None:
    """``value`` (the loss at params, optax's extra arg) as a scalar of ``loss_dtype`` (what
    :func:`check_value_fn` returns)."""
    if value is None:
        return None
    value = jnp.asarray(value)
    if value.shape != () or not jnp.issubdtype(value.dtype, jnp.floating):
        raise ValueError(
            "value must be the scalar floating loss value_fn(params) (e.g. from the forward "
            f"pass that gave the activations), got shape {value.shape} dtype {value.dtype}"
        )
    return value.astype(loss_dtype)


def flat_plus(unravel: Callable, flat: jax.Array) -> Callable[[jax.Array, jax.Array], Any]:
    """``plus`` for flat directions: ``unravel(flat + step * v)``."""
    return lambda direction, step: unravel(flat + step * direction.astype(flat.dtype))


def key_name(entry: Any) -> Any:
    """The name or index inside one pytree path entry (dict key, attribute, sequence index)."""
    for attribute in ("key", "name", "idx"):
        if hasattr(entry, attribute):
            return getattr(entry, attribute)
    raise TypeError(f"unsupported pytree key {entry!r}")


def flatten_like(params: Any, other: Any, name: str) -> list:
    """Leaves of ``other`` aligned with the leaves of ``params`` (``None`` allowed)."""
    treedef = jax.tree.structure(params)
    try:
        leaves = treedef.flatten_up_to(other)
    except (ValueError, TypeError) as err:
        raise ValueError(
            f"{name} must have the pytree structure of params ({treedef}), with None for "
            f"leaves it does not cover; got {jax.tree.structure(other)}"
        ) from err
    return leaves


def check_leaf_shapes(params: Any, leaves: list, name: str) -> None:
    """Raises unless every non-None entry of ``leaves`` (from :func:`flatten_like`) has the
    shape of its parameter leaf (a gradient of swapped leaf sizes was read silently)."""
    for (path, leaf), other in zip(
        jax.tree_util.tree_flatten_with_path(params)[0], leaves, strict=True
    ):
        if other is not None and np.shape(other) != np.shape(leaf):
            raise ValueError(
                f"{name}{jax.tree_util.keystr(path)} must have the shape of "
                f"params{jax.tree_util.keystr(path)}, {np.shape(leaf)}, got {np.shape(other)}"
            )


class ZerothOrderState(NamedTuple):
    """State of the random-direction transforms."""

    count: jax.Array  # int32 [], updates applied so far
    key: jax.Array  # PRNG key, split at every update
    num_evals: jax.Array  # int32 [], value_fn evaluations so far


def random_direction_estimate(
    value_fn: ValueFn,
    params: Any,
    key: jax.Array,
    *,
    sample: Callable[[jax.Array, tuple[int, int], Any], jax.Array],
    num_directions: int,
    sigma: jax.Array,
    antithetic: bool,
    value: jax.Array | None = None,
) -> Estimate:
    """``(1/q) sum_i D_{v_i} f(x) v_i`` with ``v_i = sample(...)`` i.i.d., E[v v^T] = I."""
    value = check_value(value, check_value_fn(value_fn, params))
    num_directions = check_int("num_directions", num_directions)
    check_positive("sigma", sigma)
    flat, unravel = flat_view(params)
    directions = sample(key, (num_directions, flat.size), flat.dtype)
    responses, num_evals = directional_differences(
        value_fn, params, flat_plus(unravel, flat), directions, sigma, antithetic, value
    )
    # in the parameters' dtype: a float32 loss would promote bf16 parameters' estimate
    grad = (responses @ directions / num_directions).astype(flat.dtype)
    return Estimate(unravel(grad), num_evals)


def params_required(params: Any, name: str) -> None:
    if params is None:
        raise ValueError(
            f"{name}.update needs params: call update(updates, state, params, value_fn=...)"
        )


def random_direction_transform(
    name: str,
    key: jax.Array,
    *,
    sample: Callable[[jax.Array, tuple[int, int], Any], jax.Array],
    num_directions: int,
    sigma_at: Callable[[jax.Array], jax.Array],
    antithetic: bool,
):
    """An optax transform around :func:`random_direction_estimate`.

    ``sigma_at(count)`` gives the finite-difference step of update ``count``.
    """
    check_key(key)
    num_directions = check_int("num_directions", num_directions)

    def init_fn(params):
        del params
        return ZerothOrderState(jnp.zeros([], jnp.int32), key, jnp.zeros([], jnp.int32))

    def update_fn(updates, state, params=None, *, value_fn=None, **extra_args):
        del updates
        params_required(params, name)
        next_key, probe_key = jax.random.split(state.key)
        estimate = random_direction_estimate(
            value_fn,
            params,
            probe_key,
            sample=sample,
            num_directions=num_directions,
            sigma=sigma_at(state.count),
            antithetic=antithetic,
            value=None if antithetic else extra_args.get("value"),
        )
        new_state = ZerothOrderState(
            optax.safe_increment(state.count), next_key, state.num_evals + estimate.num_evals
        )
        return estimate.grad, new_state

    return optax.GradientTransformationExtraArgs(init_fn, update_fn)
