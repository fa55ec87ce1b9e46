"""CV-ZOD: control-variate zeroth-order descent with directional hints.

The classical estimator ``(1/q) sum_i D_{u_i} f u_i`` (Gaussian ``u_i``) is refined by the
control variate ``r - (1/q) sum_i <u_i, r> u_i``, which has mean zero for any reference
vector ``r`` independent of the probes:

.. math::
  \\hat g = r + \\frac{1}{q} \\sum_{i=1}^q
    \\big(D_{u_i} f(x) - \\langle u_i, r \\rangle\\big)\\, u_i,
  \\qquad \\mathbb{E}\\|\\hat g - g\\|^2 = \\frac{d + 1}{q} \\|g - r\\|^2 .

A hint (seed abstract 14) is a subspace ``U`` (d x k, orthonormalised here) or one direction.
The best reference inside it is ``r = P_U g = U U^T g``; its coefficients ``U^T g`` are
measured with k directional queries ``D_{U_j} f`` -- estimated, never assumed to be 1, so
a mis-scaled or reversed hint costs nothing -- giving MSE ``(d+1)(1 - alpha^2)/q ||g||^2``
with ``alpha = ||P_U g|| / ||g||`` the hint quality.

Reconstruction. The paper's full text is not available; the adaptive rule below is this
module's reading of its abstract and lives in :func:`cv_zod_estimate` (the alpha^2 estimates)
and :func:`_adaptive_decision` (the query split and the step scale):

* hint quality is estimated every step: with hint queries from the residuals,
  ``alpha^2 ~ ||b||^2 / (||b||^2 + mean_i (y_i - <u_i, r>)^2)``; without them from the
  probe moments, ``||b_reg||^2 = ||(1/Q) sum_i y_i U^T u_i||^2`` corrected by its Gaussian
  bias ``(1 + 1/Q) ||b||^2 + (k/Q) ||g||^2``;
* the next step queries the hint iff the predicted MSE is lower with the queries than
  spending the same k + q queries on random probes: ``(1 - alpha^2)/q < 1/(q + k)``;
* the step is scaled by ``1 / (1 + m)`` with ``m = (d + 1)(1 - alpha^2)/q_eff`` the
  estimated relative MSE (``alpha^2`` taken as 0 on a step that skipped the hint: that
  estimate has no reference, ``m = (d + 1)/(q + k)``) -- the step that minimises the
  L-smooth descent bound ``-eta ||g||^2 + (L/2) eta^2 (1 + m) ||g||^2`` at ``eta = 1/L``.
  The oracle variant uses the true alpha and ``r = P_U g`` from the true gradient (for
  analysis).

References:
  Cheng et al., "Improving black-box adversarial attacks with a transfer-based prior",
  NeurIPS 2019 (PRGF); Cheng et al., "On the convergence of prior-guided zeroth-order
  optimization algorithms", NeurIPS 2021.
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
import optax

from jaxopt_suite._checks import check_key
from jaxopt_suite.zeroth_order._common import (
    ValueFn,
    check_int,
    check_positive,
    check_scalar,
    check_value_fn,
    directional_differences,
    flat_plus,
    flat_view,
    flatten_like,
    params_required,
    true_grad_leaves,
)

__all__ = [
    "CVZODEstimate",
    "CVZODState",
    "alpha2_from",
    "cv_zod_estimate",
    "hint_basis",
    "scale_by_cv_zod",
]

Mode = Literal["query", "adaptive", "oracle"]
_MODES = ("query", "adaptive", "oracle")


class CVZODEstimate(NamedTuple):
    """A CV-ZOD gradient estimate (unbiased, unscaled) and what it measured."""

    grad: Any  # pytree like params
    num_evals: int  # value_fn evaluations (static)
    coefficients: jax.Array  # (k,) reference coefficients U^T g in the orthonormal hint basis
    captured_energy: jax.Array  # [] estimate of ||P_U g||^2
    total_energy: jax.Array  # [] estimate of ||g||^2
    used_hint: jax.Array  # bool [], whether the k hint queries were spent
    num_random: jax.Array  # int32 [], random probes used (q or q + k)


class CVZODState(NamedTuple):
    """State of :func:`scale_by_cv_zod`."""

    count: jax.Array  # int32 [], updates applied so far
    key: jax.Array  # PRNG key, split at every update
    num_evals: jax.Array  # int32 [], value_fn evaluations so far
    captured_ema: jax.Array  # float [], EMA of the ||P_U g||^2 estimates
    total_ema: jax.Array  # float [], EMA of the ||g||^2 estimates
    step_scale: jax.Array  # float [], factor applied to the last estimate (1 in query mode)


def _hint_matrix(params: Any, hint: Any) -> jax.Array:
    """The hint as a (d, k) matrix of raw directions, after checking its shapes."""
    if hint is None:
        raise ValueError("scale_by_cv_zod needs the extra arg hint: a pytree like params")
    leaves = jax.tree.leaves(params)
    hint_leaves = flatten_like(params, hint, "hint")
    widths = set()
    columns = []
    for leaf, hint_leaf in zip(leaves, hint_leaves, strict=True):
        if hint_leaf is None or not hasattr(hint_leaf, "shape"):
            raise ValueError("hint must give an array for every parameter leaf, got None")
        if hint_leaf.shape == leaf.shape:
            widths.add(None)
            columns.append(jnp.reshape(hint_leaf, (-1, 1)))
        elif hint_leaf.shape[:-1] == leaf.shape and hint_leaf.ndim == leaf.ndim + 1:
            widths.add(hint_leaf.shape[-1])
            columns.append(jnp.reshape(hint_leaf, (-1, hint_leaf.shape[-1])))
        else:
            raise ValueError(
                f"hint leaf of shape {hint_leaf.shape} does not match parameter shape "
                f"{leaf.shape}: expected {leaf.shape} (one direction) or {leaf.shape + ('k',)}"
            )
    if len(widths) != 1:
        raise ValueError(
            "hint leaves must all be single directions or all carry the same trailing "
            f"subspace axis; got trailing sizes {sorted(w or 0 for w in widths)}"
        )
    matrix = jnp.concatenate(columns, axis=0)
    if matrix.shape[1] > matrix.shape[0]:
        raise ValueError(f"hint has k={matrix.shape[1]} directions for d={matrix.shape[0]}")
    return matrix.astype(jnp.result_type(*leaves))


def hint_basis(params: Any, hint: Any) -> jax.Array:
    """Orthonormal basis (d, k) of a hint given as a pytree like params.

    Each hint leaf has the shape of its parameter leaf (one direction, k = 1) or that shape
    with a trailing axis of size k (a subspace), the same k for every leaf.

    A hint direction with a non-finite entry (a surrogate gradient that overflowed) is
    treated as absent: its column of the basis is zero, and the others span the finite
    directions. A zero column adds nothing to the reference (its measured coefficient is 0),
    so the estimate stays unbiased; a NaN column made the whole estimate NaN.
    """
    matrix = _hint_matrix(params, hint)
    finite = jnp.all(jnp.isfinite(matrix), axis=0)
    # finite columns first, so that the leading columns of Q span exactly them
    order = jnp.argsort(~finite, stable=True)
    cleaned = jnp.where(finite, matrix, 0.0)[:, order]
    # LAPACK has no bf16 / f16 QR: decompose in at least float32, return the hint's dtype
    q, _ = jnp.linalg.qr(cleaned.astype(jnp.promote_types(matrix.dtype, jnp.float32)))
    return jnp.where(finite, q[:, jnp.argsort(order)], 0.0).astype(matrix.dtype)


def cv_zod_estimate(
    value_fn: ValueFn,
    params: Any,
    hint: Any,
    key: jax.Array,
    *,
    num_directions: int = 10,
    sigma: float | jax.Array = 1e-3,
    query_hint: bool | jax.Array = True,
    true_grad: Any = None,
) -> CVZODEstimate:
    """One CV-ZOD estimate of the gradient (unbiased for any hint).

    A hint direction with a non-finite entry counts as absent (see :func:`hint_basis`): the
    estimate is then unbiased with the remaining directions, though the queries of an absent
    direction are still spent.

    Args:
      value_fn: ``value_fn(params) -> scalar loss``, evaluated under ``jax.vmap`` over the
        probes: a host callback needs a ``vmap_method``, e.g.
        ``jax.pure_callback(..., vmap_method="sequential")``.
      params: the point.
      hint: pytree like params, optionally with a trailing subspace axis of size k.
      key: PRNG key for the probes.
      num_directions: random probes q (static). The budget per call is k + q directional
        queries (2 evaluations each).
      sigma: finite-difference step. With 16-bit float parameters it must exceed the dtype's
        spacing at the parameters' magnitude (bfloat16 at ``|x| ~ 1``: ``2**-7``), or
        ``x + sigma v`` rounds back to ``x`` and the estimate is zero or biased; concrete
        parameters are checked, traced ones (under ``jit``) cannot be.
      query_hint: spend k queries on the hint directions (reference ``r = U b``, q random
        probes) or none (plain estimator on q + k random probes, alpha^2 from moments). May
        be a traced bool, so the adaptive variant decides inside jit.
      true_grad: oracle variant for analysis: ``r = P_U g`` from the true gradient, q random
        probes and no hint queries; a pytree like params with an array of each leaf's shape
        (``None`` leaves are refused).

    Returns:
      :class:`CVZODEstimate`.
    """
    check_value_fn(value_fn, params)
    num_probes = check_int("num_directions", num_directions)
    check_positive("sigma", sigma)
    flat, unravel = flat_view(params)
    basis = hint_basis(params, hint)
    dim, width = basis.shape
    plus = flat_plus(unravel, flat)

    def differences(directions):
        return directional_differences(value_fn, params, plus, directions, sigma, True)[0]

    def control_variate(coefficients, probes, responses):
        reference = basis @ coefficients
        residuals = responses - probes @ reference
        grad = reference + residuals @ probes / probes.shape[0]
        captured = jnp.sum(coefficients**2)
        return grad, captured, jnp.mean(residuals**2)

    if true_grad is not None:
        true_leaves = true_grad_leaves(params, true_grad)
        true_flat = jnp.concatenate([jnp.ravel(g) for g in true_leaves]).astype(flat.dtype)
        coefficients = basis.T @ true_flat
        probes = jax.random.normal(key, (num_probes, dim), flat.dtype)
        grad, captured, _ = control_variate(coefficients, probes, differences(probes))
        return CVZODEstimate(
            unravel(grad.astype(flat.dtype)),
            2 * num_probes,
            coefficients,
            captured,
            jnp.sum(true_flat**2),
            jnp.asarray(False),
            jnp.asarray(num_probes, jnp.int32),
        )

    def with_hint(key):
        probes = jax.random.normal(key, (num_probes, dim), flat.dtype)
        responses = differences(jnp.concatenate([basis.T, probes]))
        coefficients = responses[:width]
        grad, captured, residual = control_variate(coefficients, probes, responses[width:])
        return grad, coefficients, captured, captured + residual

    def without_hint(key):
        total = num_probes + width
        probes = jax.random.normal(key, (total, dim), flat.dtype)
        responses = differences(probes)
        grad = responses @ probes / total
        regression = (probes @ basis).T @ responses / total
        mean_square = jnp.mean(responses**2)
        captured = (jnp.sum(regression**2) - width * mean_square / total) / (1 + 1 / total)
        return grad, regression, jnp.clip(captured, 0.0, mean_square), mean_square

    if isinstance(query_hint, bool):
        grad, coefficients, captured, total = (with_hint if query_hint else without_hint)(key)
    else:
        grad, coefficients, captured, total = jax.lax.cond(query_hint, with_hint, without_hint, key)
    used = jnp.asarray(query_hint)
    return CVZODEstimate(
        unravel(grad.astype(flat.dtype)),
        2 * (num_probes + width),
        coefficients,
        captured,
        total,
        used,
        jnp.where(used, num_probes, num_probes + width).astype(jnp.int32),
    )


def _adaptive_decision(alpha2: jax.Array, num_probes: int, width: int) -> jax.Array:
    """Query the hint iff (1 - alpha^2)/q < 1/(q + k), i.e. alpha^2 > k/(q + k)."""
    return alpha2 > width / (num_probes + width)


def _step_scale(alpha2: jax.Array, dim: int, num_random: jax.Array) -> jax.Array:
    """1 / (1 + m), m = (d + 1)(1 - alpha^2) / q_eff the estimated relative MSE; pass
    ``alpha2 = 0`` for an estimate built without the hint's reference."""
    relative_mse = (dim + 1) * (1.0 - jnp.clip(alpha2, 0.0, 1.0)) / num_random
    return 1.0 / (1.0 + relative_mse)


def scale_by_cv_zod(
    key: jax.Array,
    *,
    num_directions: int = 10,
    sigma: float | jax.Array = 1e-3,
    mode: Mode = "adaptive",
    ema_decay: float | jax.Array = 0.9,
) -> optax.GradientTransformationExtraArgs:
    """CV-ZOD as an optax transform; the hint comes each step as the extra arg ``hint``.

    ``update(updates, state, params, *, value_fn, hint, true_grad=None)``. Modes:

    * ``"query"``: k hint queries + q random probes every step; returns the unbiased estimate.
    * ``"adaptive"``: keeps EMAs of the captured and total gradient energy (their ratio
      estimates the hint quality alpha^2; a step whose estimates are not finite, e.g. from
      a NaN probe loss, leaves them unchanged), decides each step
      whether to query the hint (see :func:`_adaptive_decision`) and scales the estimate by
      ``1 / (1 + m)``, the step that matches the estimated MSE; no knowledge of alpha needed.
    * ``"oracle"``: reference ``P_U g`` and step scale from ``true_grad`` (analysis only).

    Args:
      key: PRNG key kept in the state and split every update.
      num_directions: random probes q per step (static).
      sigma: finite-difference step (with 16-bit parameters, and for ``value_fn``, see
        :func:`cv_zod_estimate`).
      mode: one of ``"query"``, ``"adaptive"``, ``"oracle"``.
      ema_decay: decay of the alpha^2 average in adaptive mode, in ``[0, 1)`` (0 keeps the
        last step's estimate only; at 1 the averages never leave their initial 0, above 1
        they diverge).
    """
    check_key(key)
    num_probes = check_int("num_directions", num_directions)
    check_positive("sigma", sigma)
    check_scalar("ema_decay", ema_decay, "lie in [0, 1)", lambda v: 0.0 <= v < 1.0)
    if mode not in _MODES:
        raise ValueError(f"mode must be one of {_MODES}, got {mode!r}")

    def init_fn(params):
        dtype = jnp.result_type(*jax.tree.leaves(params))
        zero = jnp.zeros([], jnp.int32)
        return CVZODState(
            zero, key, zero, jnp.zeros([], dtype), jnp.zeros([], dtype), jnp.ones([], dtype)
        )

    def update_fn(updates, state, params=None, *, value_fn=None, **extra_args):
        del updates
        params_required(params, "scale_by_cv_zod")
        hint = extra_args.get("hint")
        true_grad = extra_args.get("true_grad")
        if mode == "oracle" and true_grad is None:
            raise ValueError("scale_by_cv_zod(mode='oracle') needs the extra arg true_grad")
        next_key, probe_key = jax.random.split(state.key)
        dim, width = _hint_matrix(params, hint).shape  # shapes only: no QR traced here
        # Ratio of averages: the EMAs' common debiasing factor cancels.
        previous = alpha2_from(state.captured_ema, state.total_ema)
        if mode == "adaptive":
            # The first update always queries the hint; later ones follow the estimate.
            query = (state.count == 0) | _adaptive_decision(previous, num_probes, width)
        else:
            query = True
        estimate = cv_zod_estimate(
            value_fn,
            params,
            hint,
            probe_key,
            num_directions=num_probes,
            sigma=sigma,
            query_hint=query,
            true_grad=true_grad if mode == "oracle" else None,
        )
        dtype = state.total_ema.dtype
        # A non-finite estimate (a NaN probe loss) would stay in the averages forever, and
        # a NaN alpha^2 never passes the decision: hint queries stopped for good. Such a
        # step leaves both averages as they were (the inner where keeps NaN out of the
        # arithmetic, the outer one keeps the old averages exactly; finite steps compile
        # to the same numbers as a plain update).
        finite = jnp.isfinite(estimate.captured_energy) & jnp.isfinite(estimate.total_energy)

        def average(old, new):
            new = jnp.where(finite, new, old)
            return jnp.where(finite, ema_decay * old + (1 - ema_decay) * new, old)

        captured = average(state.captured_ema, estimate.captured_energy)
        total = average(state.total_ema, estimate.total_energy)
        if mode == "query":
            scale = jnp.ones([], dtype)
        else:
            current = alpha2_from(estimate.captured_energy, estimate.total_energy)
            # Adaptive steps use the estimate from before this step's probes, so the scale
            # does not correlate with the estimate it multiplies (the first step has none).
            quality = jnp.where((state.count == 0) | (mode == "oracle"), current, previous)
            # The hint only lowers the MSE when the estimate is built on it: a step that
            # skipped the hint queries is the plain estimator on q + k probes, of relative
            # MSE (d + 1)/(q + k) whatever the hint's quality (alpha^2 = 0 below). The
            # oracle's reference P_U g is always used (its used_hint is False: no queries).
            with_reference = estimate.used_hint | (mode == "oracle")
            quality = jnp.where(with_reference, quality, 0.0)
            scale = _step_scale(quality, dim, estimate.num_random).astype(dtype)
        grad = jax.tree.map(lambda g: g * scale.astype(g.dtype), estimate.grad)
        new_state = CVZODState(
            optax.safe_increment(state.count),
            next_key,
            state.num_evals + estimate.num_evals,
            captured.astype(dtype),
            total.astype(dtype),
            scale,
        )
        return grad, new_state

    return optax.GradientTransformationExtraArgs(init_fn, update_fn)


def alpha2_from(captured_energy: jax.Array, total_energy: jax.Array) -> jax.Array:
    """Hint quality alpha^2 = captured / total, clipped to [0, 1] (0 when nothing measured)."""
    tiny = jnp.finfo(jnp.result_type(total_energy, jnp.float32)).tiny
    return jnp.clip(captured_energy / (total_energy + tiny), 0.0, 1.0)
