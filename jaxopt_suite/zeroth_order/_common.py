"""Pieces shared by every zeroth-order estimator: validation, flat views, finite differences.

All estimators here use the two-point (antithetic) directional difference

.. math::
  D_v f(x) = \\frac{f(x + \\sigma v) - f(x - \\sigma v)}{2\\sigma},

which is exact for quadratics and has O(sigma^2) bias otherwise, or the one-point forward
difference ``(f(x + sigma v) - f(x)) / sigma`` when ``antithetic=False`` (O(sigma) bias). A
forward difference reuses ``f(x)`` when the caller already has it (optax's ``value`` extra
arg, e.g. from the forward pass that produced the activations), so q probes cost q
evaluations instead of 2q.

Two properties of ``value_fn`` and ``sigma`` hold for every estimator:

* ``value_fn`` is evaluated under ``jax.vmap`` over the probes, so it must be batchable: a
  host callback (``jax.pure_callback``) needs a ``vmap_method`` such as ``"sequential"``.
* the perturbed parameters ``x + sigma v`` are formed in the dtype ``jnp`` promotes them
  to, the parameters' own for a Python float ``sigma``. With 16-bit floats (bfloat16 keeps
  8 significant bits: at ``|x| ~ 1`` its spacing is ``2**-7``) a ``sigma`` below the dtype's
  spacing at the parameters' magnitude rounds away or to a different step, and the estimate
  is zero or biased. Concrete parameters are checked (:func:`check_step_resolves`); traced
  ones (under ``jit``) cannot be, so there ``sigma`` must exceed that spacing.
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
    check_step_resolves(params, plus, directions, sigma)
    if antithetic:

        def central(direction):
            f_plus = value_fn(plus(direction, sigma))
            f_minus = value_fn(plus(direction, -sigma))
            return (f_plus - f_minus) / (2.0 * sigma)

        return _over_probes(central, directions), 2 * num
    f_zero = value_fn(params) if value is None else value
    forward = lambda direction: (value_fn(plus(direction, sigma)) - f_zero) / sigma  # noqa: E731
    return _over_probes(forward, directions), num + (1 if value is None else 0)


def _over_probes(difference: Callable[[Any], jax.Array], directions: Any) -> jax.Array:
    """``jax.vmap(difference)(directions)``, naming value_fn when it cannot be batched (a
    ``jax.pure_callback`` without ``vmap_method`` failed with vmap's own message). Other
    ``NotImplementedError``s, which do not speak of batching, pass as they are."""
    try:
        return jax.vmap(difference)(directions)
    except NotImplementedError as err:
        if "vmap" not in str(err) and "batch" not in str(err):
            raise
        raise TypeError(
            "value_fn must be batchable: it is evaluated under jax.vmap over the probe "
            "directions, which raised NotImplementedError: "
            f"{str(err).splitlines()[0] if str(err) else type(err).__name__}. A host callback "
            "needs a vmap_method, e.g. jax.pure_callback(..., vmap_method='sequential')"
        ) from err


def check_step_resolves(
    params: Any, plus: Callable[[Any, jax.Array], Any], directions: Any, sigma: Any
) -> None:
    """Raises unless ``x + sigma`` and ``x - sigma`` differ from ``x`` at every entry of
    concrete ``params``, in the dtype ``plus`` forms the perturbed parameters in.

    A step below half the dtype's spacing at ``|x|`` rounds away (bfloat16 at ``|x| ~ 1``
    and the default sigma = 1e-3): the differences lose those entries and the estimate is
    zero or biased. Float32 too, far enough out: at sigma = 1e-3 from ``|x| >= 2**15``.
    Probe entries have unit scale, so ``|v| = 1`` is the yardstick: this is a necessary
    condition, not a sufficient one. Non-finite entries are left to the estimate (they make
    it non-finite, which the callers' statuses report). Traced params or sigma (under
    ``jit``) pass unchecked, as their values are unknown while tracing.
    """
    flat_paths = jax.tree_util.tree_flatten_with_path(params)[0]
    if isinstance(sigma, jax.core.Tracer) or any(
        isinstance(leaf, jax.core.Tracer) for _, leaf in flat_paths
    ):
        return
    probe = jax.tree.map(lambda d: jax.ShapeDtypeStruct(d.shape[1:], d.dtype), directions)
    perturbed = jax.tree.leaves(jax.eval_shape(lambda v: plus(v, sigma), probe))
    with jax.ensure_compile_time_eval():  # concrete params inside a jit trace: still eager
        for (path, leaf), out in zip(flat_paths, perturbed, strict=True):
            if not jnp.issubdtype(out.dtype, jnp.floating):
                continue
            x = jnp.asarray(leaf, out.dtype)
            step = jnp.asarray(sigma, out.dtype)
            stuck = jnp.isfinite(x) & ((x + step == x) | (x - step == x))
            count = int(jnp.sum(stuck))
            if count:
                smallest = float(jnp.min(jnp.where(stuck, jnp.abs(x), jnp.inf)))
                spacing = float(jnp.finfo(out.dtype).eps) * 2.0 ** math.floor(
                    math.log2(max(smallest, float(jnp.finfo(out.dtype).tiny)))
                )
                raise ValueError(
                    f"sigma={float(sigma):g} is lost to rounding in {out.dtype} parameters: "
                    f"x +- sigma rounds back to x at {count} of {x.size} entries of "
                    f"params{jax.tree_util.keystr(path)} (the smallest such |x| is "
                    f"{smallest:g}, where the {out.dtype} spacing is {spacing:g}), so the "
                    f"estimate would be zero or biased. sigma must exceed the {out.dtype} "
                    "spacing at the parameters' magnitude: raise it, or perturb in float32 "
                    "(float32 parameters, cast inside value_fn)"
                )


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
    """Leaves of ``other`` aligned with the leaves of ``params``.

    ``None`` is allowed at a leaf and reads "not covered"; each caller says what that means:
    ``activations`` probes such a leaf isotropically, while ``hint`` and ``true_grad`` (see
    :func:`true_grad_leaves`) refuse it.
    """
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


def true_grad_leaves(params: Any, true_grad: Any) -> list:
    """Leaves of ``true_grad`` aligned with those of ``params``, each of its parameter's
    shape. A ``None`` leaf is refused: the diagnostics built on the true gradient need all
    of it, and reading a missing leaf as zeros would misreport them (a TypeError from deep
    inside ``jnp`` said only that None is not an array)."""
    leaves = flatten_like(params, true_grad, "true_grad")
    for (path, _), leaf in zip(
        jax.tree_util.tree_flatten_with_path(params)[0], leaves, strict=True
    ):
        if leaf is None:
            raise ValueError(
                f"true_grad{jax.tree_util.keystr(path)} is None: true_grad must give the "
                "gradient of every parameter leaf, an array of its shape"
            )
    check_leaf_shapes(params, leaves, "true_grad")
    return leaves


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
