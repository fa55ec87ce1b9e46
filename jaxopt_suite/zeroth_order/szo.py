"""SZO-kappa: spectral zeroth-order estimation along activation-supported directions.

For a linear layer ``z = W a`` the minibatch gradient is ``sum_b delta_b a_b^T``: its fan-in
side lies in the span of the layer's inputs ``a_b`` of the same forward pass. SZO-kappa
(seed abstract 8) therefore spends its perturbation budget inside the top-kappa eigenspace
``U_k`` of the input second-moment matrix ``A^T A / N`` of each 2-D (or convolution) weight,
probing ``V = U_k Z`` with Gaussian ``Z`` (``Z U_k^T`` in the ``W a`` orientation). A bias
next to its weight (a sibling leaf named ``bias`` or ``b``) is the weight of a constant
input, so the pair is probed in the span of ``[a, 1]``; other leaves without activations
(embeddings, scales, anything the caller leaves ``None``) are probed isotropically. Over the
whole pytree the probe lives in a space of dimension
``k_eff = sum_l kappa * fan_out_l + (isotropic sizes)`` instead of ``D``, so the expected
cosine with the gradient rises from ``sqrt(q / D)`` to about ``rho * sqrt(q / k_eff)`` where
``rho^2`` is the share of the gradient's energy inside the subspace.

Reconstruction. The paper's full text is not available; the following are this module's
reading of its abstract and are kept together in :func:`_layer_block` (weights) and
:func:`szo_estimate` (probes):

* covariance correction: head direction j is probed, and enters the estimate, with weight
  ``w_j = (s_j / mean(s)) ** covariance_power`` normalised to mean square 1 (``s_j`` the
  eigenvalues; the normalisation is the unbiasing factor: the correction averages to 1 over
  the subspace). Then ``E[ghat] = U diag(w^2) U^T g`` -- the projection times the documented
  correction. For a linear layer the gradient's fan-in covariance and the loss curvature
  are both proportional to ``A^T A``, so the sign of the power picks a trade-off:
  ``+1/2`` is the minimum-MSE guess under that gradient model and gives the best cosine;
  ``-1/2`` whitens the curvature (a natural-gradient-like step) and trains fastest.
  A head direction whose eigenvalue is rounding error of 0 (``s_j <= fan_in * eps * s_1``:
  dead units, inputs that are always 0, ``kappa`` past the numerical rank) carries no
  gradient and gets ``w_j = 0``; the normalisation runs over the other directions;
* probe orthogonalisation: the q coordinate vectors are replaced by a Haar-random orthonormal
  q-frame of the k_eff-dimensional probe space scaled by ``sqrt(k_eff)``, which keeps
  ``E[c c^T] = I`` (hence the same expectation) while removing the cross terms between probes;
* bias correction: with ``bias_correction=True`` the remaining directions of the activation
  span (eigenvectors ``kappa+1 .. rank``) are probed as a tail with small weight
  ``tail_weight`` and enter the estimate with ``1 / tail_weight``, adding ``P_tail g`` to the
  expectation. Since the gradient's fan-in side lies in the activation span, this removes
  the truncation bias (exactly, when ``covariance_power == 0``) at the price of variance
  growing like ``1 / tail_weight^2``.

References:
  Singhal et al., "How to guess a gradient", 2023 (gradients lie in a predictable subspace).
  Nesterov and Spokoiny 2017 (two-point Gaussian estimator).
"""

from __future__ import annotations

import math
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
    check_value,
    check_value_fn,
    directional_differences,
    flat_view,
    flatten_like,
    key_name,
    params_required,
    true_grad_leaves,
)

__all__ = ["SZOEstimate", "SZOState", "scale_by_szo", "szo_estimate"]

Layout = Literal["auto", "in_out", "out_in"]
_LAYOUTS = ("auto", "in_out", "out_in")


class SZOEstimate(NamedTuple):
    """An SZO gradient estimate with its diagnostics."""

    grad: Any  # pytree like params
    num_evals: int  # value_fn evaluations (2 per probe; forward: 1 per probe, +1 for f(x))
    subspace_dim: int  # k_eff, dimension of the probe space
    captured_energy: jax.Array  # float [], ||P_U g||^2 / ||g||^2 (NaN without true_grad)


class SZOState(NamedTuple):
    """State of :func:`scale_by_szo`."""

    count: jax.Array  # int32 [], updates applied so far
    key: jax.Array  # PRNG key, split at every update
    num_evals: jax.Array  # int32 [], value_fn evaluations so far
    captured_energy: jax.Array  # float32 [], rho^2 of the last update (NaN without true_grad)


class _Block(NamedTuple):
    """How a slice of the probe coordinates maps into one weight leaf (and its bias)."""

    leaf: int  # index of the leaf among the params leaves
    shape: tuple[int, ...]  # that leaf's shape
    num_coords: int  # static
    basis: jax.Array | None  # (fan_in [+ 1], r) orthonormal, head first; None: isotropic
    probe_weights: jax.Array | None  # (r,) scale of each basis direction in the probes
    estimate_weights: jax.Array | None  # (r,) scale of each basis direction in the estimate
    head: int  # number of leading basis columns spanning the top-kappa subspace
    out_in: bool  # leaf is (fan_out, *fan_in) rather than (*fan_in, fan_out)
    bias: int | None = None  # index of the paired bias leaf (last basis row), if any
    bias_shape: tuple[int, ...] = ()


def _orientation(path: str, shape: tuple[int, ...], fan_in: int, layout: Layout) -> bool:
    """Returns ``out_in`` for a weight leaf given its activations' fan-in.

    ``in_out`` reads the leaf as fan-in axes first, ``(*fan_in, *fan_out)``: flax ``Dense``
    and ``Conv`` (one fan-out axis) or ``DenseGeneral`` (``(d_model, heads, head_dim)``);
    ``out_in`` as fan-in axes last, ``(*fan_out, *fan_in)``. ``auto`` refuses a leaf that
    fits both, as a square matrix or ``(D, H, D / H)`` does: picking one silently probed
    the wrong subspace of such a kernel.
    """
    leading = [math.prod(shape[:i]) for i in range(1, len(shape))]
    trailing = [math.prod(shape[i:]) for i in range(1, len(shape))]
    in_out_fits = fan_in in leading
    out_in_fits = fan_in in trailing
    if layout == "in_out" and in_out_fits:
        return False
    if layout == "out_in" and out_in_fits:
        return True
    if layout == "auto" and in_out_fits != out_in_fits:
        return out_in_fits
    if layout == "auto" and in_out_fits:
        raise ValueError(
            f"activations for params{path}: weight shape {shape} fits fan_in={fan_in} in both "
            "layouts; pass layout='in_out' (fan-in axes first: x @ W, flax Dense, Conv and "
            "DenseGeneral) or layout='out_in' (fan-in axes last: W @ x, equinox)"
        )
    expected = {
        "in_out": f"fan_in = the product of leading axes, one of {leading}",
        "out_in": f"fan_in = the product of trailing axes, one of {trailing}",
        "auto": f"fan_in in {sorted(set(leading + trailing))}",
    }[layout]
    raise ValueError(
        f"activations for params{path}: got (batch, {fan_in}) inputs for a weight of shape "
        f"{shape} with layout={layout!r}; expected {expected}"
    )


def _layer_block(
    index: int,
    path: str,
    leaf: jax.Array,
    inputs: jax.Array,
    bias: tuple[int, tuple[int, ...]] | None,
    kappa: int,
    layout: Layout,
    covariance_power: jax.Array,
    bias_correction: bool,
    tail_weight: jax.Array,
) -> _Block:
    """Spectral probe block of one weight leaf from its layer inputs (batch, fan_in).

    With a paired ``bias`` (its leaf index and shape) the layer is treated as linear in the
    augmented input ``[a, 1]``: the bias is the weight of a constant input.
    """
    if inputs.ndim != 2:
        raise ValueError(
            f"activations for params{path} must be (batch, fan_in), got shape {inputs.shape}"
        )
    num_rows, fan_in = inputs.shape
    out_in = _orientation(path, leaf.shape, fan_in, layout)
    fan_out = leaf.size // fan_in
    # LAPACK has no bf16 / f16 decompositions: they run in at least float32
    work = jnp.promote_types(leaf.dtype, jnp.float32)
    inputs = jax.lax.stop_gradient(inputs).astype(work)
    if bias is not None:
        inputs = jnp.concatenate([inputs, jnp.ones((num_rows, 1), work)], axis=1)
        fan_in += 1
    # Directions outside the inputs' span carry no gradient: never probe past the rank.
    rank = min(num_rows, fan_in)
    head = min(kappa, rank)
    if num_rows >= fan_in:
        eigvals, eigvecs = jnp.linalg.eigh(inputs.T @ inputs / num_rows)
        eigvals, eigvecs = eigvals[::-1], eigvecs[:, ::-1]
    else:  # few rows: the thin SVD is cheaper and spans the same row space
        _, singular, vt = jnp.linalg.svd(inputs, full_matrices=False)
        eigvals, eigvecs = singular**2 / num_rows, vt.T
    width = rank if bias_correction else head
    eigvals = jnp.maximum(eigvals[:width], 0.0)
    head_vals = eigvals[:head]
    # rank bounds the numerical rank only: dead units or inputs that are always 0 leave head
    # directions whose eigenvalue is rounding error. They carry no gradient and get no
    # weight; whitened at the floor below they took almost all of it (weight 100 each
    # against ~1, after the mean-square normalisation), and the estimate shrank ~1000-fold.
    live = head_vals > fan_in * jnp.finfo(work).eps * head_vals[0]
    # The floor keeps whitening (negative powers) finite on small live directions.
    relative = jnp.maximum(head_vals / (jnp.mean(head_vals) + jnp.finfo(work).tiny), 1e-4)
    head_weights = jnp.where(live, relative**covariance_power, 0.0)
    # the mean square over the live directions (jnp.mean where all live: XLA folds its
    # static count into the division, which a traced count would round differently)
    mean_square = jnp.where(
        jnp.all(live),
        jnp.mean(head_weights**2),
        jnp.sum(head_weights**2) / jnp.maximum(jnp.sum(live), 1),
    )
    head_weights = head_weights / jnp.sqrt(jnp.where(mean_square > 0, mean_square, 1.0))
    head_weights = head_weights.astype(leaf.dtype)
    tail = jnp.full((width - head,), tail_weight, leaf.dtype)
    return _Block(
        index,
        tuple(leaf.shape),
        width * fan_out,
        eigvecs[:, :width].astype(leaf.dtype),
        jnp.concatenate([head_weights, tail]),
        jnp.concatenate([head_weights, 1.0 / tail]),
        head,
        out_in,
        None if bias is None else bias[0],
        () if bias is None else bias[1],
    )


def _embed(block: _Block, coords: jax.Array, probe: bool) -> dict[int, jax.Array]:
    """Maps coordinates into the block's leaves, with the probe's or the estimate's weights."""
    if block.basis is None:
        return {block.leaf: coords.reshape(block.shape)}
    width = block.basis.shape[1]
    weights = block.probe_weights if probe else block.estimate_weights
    matrix = block.basis @ (coords.reshape(width, -1) * weights[:, None])
    parts = {}
    if block.bias is not None:
        parts[block.bias] = matrix[-1].reshape(block.bias_shape)
        matrix = matrix[:-1]
    parts[block.leaf] = (matrix.T if block.out_in else matrix).reshape(block.shape)
    return parts


def _captured_energy(blocks: list[_Block], grads: list[jax.Array]) -> jax.Array:
    """Share of the gradient's energy inside the head subspaces (isotropic leaves: all)."""
    total = sum(jnp.sum(jnp.square(grad)) for grad in grads)
    captured = 0.0
    for block in blocks:
        grad = grads[block.leaf]
        if block.basis is None:
            captured = captured + jnp.sum(jnp.square(grad))
            continue
        fan_in = block.basis.shape[0] - (block.bias is not None)
        oriented = grad.reshape(-1, fan_in).T if block.out_in else grad.reshape(fan_in, -1)
        if block.bias is not None:
            oriented = jnp.concatenate([oriented, grads[block.bias].reshape(1, -1)], axis=0)
        captured = captured + jnp.sum(jnp.square(block.basis[:, : block.head].T @ oriented))
    return captured / total


def _bias_partners(flat_paths: list, inputs: list) -> dict[int, int]:
    """Weight leaf index -> index of its bias: a sibling named ``bias`` or ``b`` that has no
    activations of its own and one entry per output (checked against fan_out later)."""
    siblings: dict[tuple, dict] = {}
    for index, (path, _) in enumerate(flat_paths):
        name = key_name(path[-1]) if path else None
        siblings.setdefault(tuple(str(k) for k in path[:-1]), {})[name] = index
    partners = {}
    for index, (path, _) in enumerate(flat_paths):
        if inputs[index] is None or not path:
            continue
        family = siblings[tuple(str(k) for k in path[:-1])]
        for name in ("bias", "b"):
            candidate = family.get(name)
            if candidate is not None and candidate != index and inputs[candidate] is None:
                partners[index] = candidate
                break
    return partners


def _check_options(
    kappa, num_directions, sigma, tail_weight, layout, covariance_power
) -> tuple[int, int]:
    kappa = check_int("kappa", kappa)
    num_directions = check_int("num_directions", num_directions)
    check_positive("sigma", sigma)
    check_positive("tail_weight", tail_weight)
    # any real exponent is a weighting (the docstring's three are the reasoned ones); NaN
    # or inf makes every weight NaN, hence a NaN estimate
    check_scalar("covariance_power", covariance_power, "be finite", math.isfinite)
    if layout not in _LAYOUTS:
        raise ValueError(f"layout must be one of {_LAYOUTS}, got {layout!r}")
    return kappa, num_directions


def szo_estimate(
    value_fn: ValueFn,
    params: Any,
    key: jax.Array,
    *,
    activations: Any = None,
    kappa: int = 8,
    num_directions: int = 1,
    sigma: float | jax.Array = 1e-3,
    orthogonalize: bool = True,
    covariance_power: float | jax.Array = -0.5,
    bias_correction: bool = False,
    tail_weight: float | jax.Array = 0.1,
    layout: Layout = "auto",
    pair_biases: bool = True,
    antithetic: bool = True,
    value: jax.Array | None = None,
    true_grad: Any = None,
) -> SZOEstimate:
    """SZO-kappa gradient estimate from ``num_directions`` activation-supported probes.

    .. math::
      \\hat g = \\frac{1}{q} \\sum_{i=1}^q D_{v_i} f(x)\\, v_i, \\qquad
      v_i = U\\,\\mathrm{diag}(w)\\, c_i,

    with ``E[c c^T] = I`` and ``w`` the covariance correction (a probe enters the estimate
    with the weight it was probed with; only the tail of ``bias_correction`` enters with
    the inverse of its ``tail_weight``), so
    ``E[ghat] = U diag(w^2) U^T g``: each covered weight's gradient with its fan-in side
    projected on the top-kappa activation eigenspace, times the correction (isotropic leaves
    are kept whole). With ``bias_correction`` the rest of the activation span is added.

    Args:
      value_fn: ``value_fn(params) -> scalar loss``, evaluated under ``jax.vmap`` over the
        probes: a host callback needs a ``vmap_method``, e.g.
        ``jax.pure_callback(..., vmap_method="sequential")``.
      params: the point (any pytree of floating arrays).
      key: PRNG key for the probes.
      activations: pytree with the structure of ``params`` mapping each weight leaf to the
        (N, fan_in) inputs its layer saw in the current forward pass (conv layers: their
        im2col patches), ``None`` elsewhere; see :mod:`jaxopt_suite.zeroth_order.activations`.
        ``None`` means isotropic probes everywhere.
      kappa: eigenvectors kept per layer (static), capped at the rank bound
        ``min(rows, fan_in)`` of the layer's inputs.
      num_directions: probes q (static); with ``orthogonalize`` at most k_eff.
      sigma: finite-difference step. With 16-bit float parameters it must exceed the dtype's
        spacing at the parameters' magnitude (bfloat16 at ``|x| ~ 1``: ``2**-7``), or
        ``x + sigma v`` rounds back to ``x`` and the estimate is zero or biased; concrete
        parameters are checked, traced ones (under ``jit``) cannot be.
      orthogonalize: QR-orthogonalise the q probes within the probe space.
      covariance_power: eigenvalue weighting exponent, a finite number: 0 plain, -1/2
        whitened (the default, fastest training), +1/2 best aligned (see the module
        docstring). The weights' squares are formed in the parameters' dtype, so in float32
        powers below about -4.8 (with a direction at the 1e-4 eigenvalue floor) or far
        above 1 overflow them.
      bias_correction: also probe the tail of the activation span (see module docstring).
      tail_weight: probe weight of the tail directions.
      layout: ``"in_out"`` if weights are (*fan_in, *fan_out), fan-in axes first (x @ W:
        flax, including ``DenseGeneral`` kernels such as ``(d_model, heads, head_dim)``),
        ``"out_in"`` if (*fan_out, *fan_in) (W @ x: equinox, PyTorch), ``"auto"`` to infer
        from shapes; ``"auto"`` refuses a weight that fits both (a square matrix, or
        ``(D, H, D / H)``).
      pair_biases: treat a weight's sibling leaf named ``bias`` or ``b`` (one entry per
        output, no activations of its own) as the weight of a constant input, so the layer
        is probed in the span of ``[a, 1]`` instead of probing the bias isotropically.
      antithetic: central differences (2q evaluations) or forward differences
        ``(f(x + sigma v) - f(x)) / sigma`` (q evaluations when ``value`` is given, else
        q + 1; O(sigma) bias instead of O(sigma^2)).
      value: ``value_fn(params)`` when the caller has it; SZO needs a forward pass for the
        activations anyway, and the loss of that same pass is the base point of a forward
        difference, so one probe then costs one extra evaluation. Ignored by central
        differences.
      true_grad: optional true gradient, only for the ``captured_energy`` diagnostic: a
        pytree like params with an array of each leaf's shape (``None`` leaves are refused).

    Returns:
      :class:`SZOEstimate`.
    """
    flat_view(params)  # floating leaves, as the other estimators require
    value = check_value(value, check_value_fn(value_fn, params))
    kappa, num_directions = _check_options(
        kappa, num_directions, sigma, tail_weight, layout, covariance_power
    )
    flat_paths, treedef = jax.tree_util.tree_flatten_with_path(params)
    leaves = [leaf for _, leaf in flat_paths]
    inputs = (
        [None] * len(leaves)
        if activations is None
        else flatten_like(params, activations, "activations")
    )
    partners = _bias_partners(flat_paths, inputs) if pair_biases else {}
    blocks, paired = [], set()
    for index, ((path, leaf), leaf_inputs) in enumerate(zip(flat_paths, inputs, strict=True)):
        if leaf_inputs is None or jnp.ndim(leaf) < 2:
            continue
        leaf_inputs = jnp.asarray(leaf_inputs)
        bias = None
        partner = partners.get(index)
        if partner is not None and partner not in paired and leaf_inputs.ndim == 2:
            fan_out = jnp.size(leaf) // leaf_inputs.shape[-1]
            if jnp.size(leaves[partner]) == fan_out:
                bias = (partner, tuple(jnp.shape(leaves[partner])))
                paired.add(partner)
        blocks.append(
            _layer_block(
                index,
                jax.tree_util.keystr(path),
                leaf,
                leaf_inputs,
                bias,
                kappa,
                layout,
                covariance_power,
                bias_correction,
                tail_weight,
            )
        )
    covered = {block.leaf for block in blocks} | paired
    for index, leaf in enumerate(leaves):
        if index not in covered:
            shape = tuple(jnp.shape(leaf))
            blocks.append(_Block(index, shape, math.prod(shape), None, None, None, 0, False))
    offsets = [0]
    for block in blocks:
        offsets.append(offsets[-1] + block.num_coords)
    dim = offsets[-1]
    dtype = jnp.result_type(*leaves)

    def embed(coords: jax.Array, probe: bool) -> Any:
        parts: dict[int, jax.Array] = {}
        for block, start, stop in zip(blocks, offsets[:-1], offsets[1:], strict=True):
            parts.update(_embed(block, coords[start:stop], probe))
        return jax.tree.unflatten(
            treedef, [parts[i].astype(leaf.dtype) for i, leaf in enumerate(leaves)]
        )

    if orthogonalize:
        if num_directions > dim:
            raise ValueError(
                f"num_directions={num_directions} exceeds the probe-space dimension {dim}; "
                "lower it or pass orthogonalize=False"
            )
        work = jnp.promote_types(dtype, jnp.float32)  # LAPACK has no bf16 / f16 QR
        gaussian = jax.random.normal(key, (dim, num_directions), dtype)
        q, r = jnp.linalg.qr(gaussian.astype(work))
        q, r = q.astype(dtype), r.astype(dtype)
        # Sign fix makes the frame Haar-distributed, hence E[c c^T] = I after scaling.
        coords = (q * jnp.sign(jnp.diagonal(r))[None, :]).T * jnp.sqrt(jnp.asarray(dim, dtype))
    else:
        coords = jax.random.normal(key, (num_directions, dim), dtype)

    def plus(direction, step):
        return jax.tree.map(lambda p, v: p + step * v, params, embed(direction, True))

    responses, num_evals = directional_differences(
        value_fn, params, plus, coords, sigma, antithetic, value
    )
    grad = embed(responses @ coords / num_directions, False)
    if true_grad is None:
        captured = jnp.asarray(jnp.nan, dtype)
    else:
        captured = _captured_energy(blocks, true_grad_leaves(params, true_grad))
    return SZOEstimate(grad, num_evals, dim, captured.astype(dtype))


def scale_by_szo(
    key: jax.Array,
    *,
    kappa: int = 8,
    num_directions: int = 1,
    sigma: float | jax.Array = 1e-3,
    orthogonalize: bool = True,
    covariance_power: float | jax.Array = -0.5,
    bias_correction: bool = False,
    tail_weight: float | jax.Array = 0.1,
    layout: Layout = "auto",
    pair_biases: bool = True,
    antithetic: bool = True,
) -> optax.GradientTransformationExtraArgs:
    """SZO-kappa as an optax transform (returns the estimate, ignores incoming updates).

    ``update(updates, state, params, *, value_fn, activations=None, value=None,
    true_grad=None)``: the layer inputs of the current forward pass come as the extra arg
    ``activations`` (see :func:`szo_estimate`); with ``antithetic=False`` the loss of that
    same pass, passed as ``value``, is the base point of the forward differences (one
    evaluation per probe); ``true_grad`` only feeds the ``captured_energy`` diagnostic kept
    in the state. Unknown extra args are ignored, so the transform chains with any optax
    optimizer::

      opt = optax.chain(scale_by_szo(jax.random.key(0)), optax.sgd(1e-2))
      loss, acts = flax_forward_with_activations(...)  # one forward pass
      updates, state = opt.update(params, state, params, value_fn=loss_fn, activations=acts)

    Args: as :func:`szo_estimate`, with ``key`` kept in the state and split every update.
    """
    check_key(key)
    kappa, num_directions = _check_options(
        kappa, num_directions, sigma, tail_weight, layout, covariance_power
    )

    def init_fn(params):
        dtype = jnp.result_type(*jax.tree.leaves(params))
        zero = jnp.zeros([], jnp.int32)
        return SZOState(zero, key, zero, jnp.asarray(jnp.nan, dtype))

    def update_fn(updates, state, params=None, *, value_fn=None, **extra_args):
        del updates
        params_required(params, "scale_by_szo")
        next_key, probe_key = jax.random.split(state.key)
        estimate = szo_estimate(
            value_fn,
            params,
            probe_key,
            activations=extra_args.get("activations"),
            kappa=kappa,
            num_directions=num_directions,
            sigma=sigma,
            orthogonalize=orthogonalize,
            covariance_power=covariance_power,
            bias_correction=bias_correction,
            tail_weight=tail_weight,
            layout=layout,
            pair_biases=pair_biases,
            antithetic=antithetic,
            value=None if antithetic else extra_args.get("value"),
            true_grad=extra_args.get("true_grad"),
        )
        new_state = SZOState(
            optax.safe_increment(state.count),
            next_key,
            state.num_evals + estimate.num_evals,
            estimate.captured_energy.astype(state.captured_energy.dtype),
        )
        return estimate.grad, new_state

    return optax.GradientTransformationExtraArgs(init_fn, update_fn)
