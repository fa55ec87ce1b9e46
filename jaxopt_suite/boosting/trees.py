"""Fixed-depth histogram regression trees, jit-compiled (XGBoost's ``hist`` method).

A tree of depth ``D`` is grown level by level on binned features: at each level one
``segment_sum`` gives every node's per-(feature, bin) sums of the gradients ``g`` and
Hessians ``h``; a cumulative sum over bins gives every candidate split's left sums, and the
split with the largest Newton gain (Chen & Guestrin, 2016, eq. 7)

.. math::
  \\tfrac12\\Big[\\frac{G_L^2}{H_L+\\lambda} + \\frac{G_R^2}{H_R+\\lambda}
  - \\frac{G^2}{H+\\lambda}\\Big] - \\gamma

is taken, subject to ``H_L, H_R >= min_child_weight``. A node with no split of positive
gain sends all its samples left (its right child stays empty), so every tree has
``2^D`` leaves and the whole build has static shapes. Leaf values are the Newton steps
``w_j = -G_j / (H_j + lambda)``. A decision stump is the depth-1 tree.

Samples go left when their bin is ``<= threshold``.

The histograms come from ``segment_sum`` (``histogram="xla"``) or, on the CPU backend, from
a native kernel (``histogram.cc`` through XLA's FFI, compiled on first use by
:mod:`jaxopt_suite._native`; ``"native"``), several times faster than XLA's CPU scatter;
``"auto"`` takes the kernel where it builds.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxopt_suite import _native
from jaxopt_suite._checks import check_integer

HISTOGRAMS = ("auto", "native", "xla")
_SOURCE = Path(__file__).with_name("histogram.cc")
_TARGET = "jaxopt_suite_histogram"
_TARGET_LEFT = "jaxopt_suite_histogram_left"  # rows of right children skipped
_TARGETS = ((_TARGET, "JaxoptSuiteHistogram"), (_TARGET_LEFT, "JaxoptSuiteHistogramLeft"))


def resolve_histogram(method: str) -> str:
    """``"native"`` or ``"xla"`` for ``method`` (see the module docstring)."""
    if method not in HISTOGRAMS:
        raise ValueError(f"histogram must be one of {HISTOGRAMS}, got {method!r}")
    if method == "xla":
        return method
    reason = _native.register(_SOURCE, _TARGETS)
    if jax.default_backend() != "cpu":
        reason = reason or f"the kernel is CPU-only; the backend is {jax.default_backend()}"
    if method == "native" and reason:
        raise RuntimeError(f"histogram='native' is unavailable: {reason}")
    return "xla" if reason else "native"


class Tree(NamedTuple):
    """Internal nodes in level order (node ``k`` of level ``l`` at ``2^l - 1 + k``)."""

    feature: jax.Array  # (2^D - 1,) int32
    threshold: jax.Array  # (2^D - 1,) int32: left when bin <= threshold
    value: jax.Array  # (2^D,) leaf values


class TreeFit(NamedTuple):
    """A grown tree and what the step rules need from it."""

    tree: Tree
    leaf: jax.Array  # (n,) int32: each training sample's leaf
    grad_sum: jax.Array  # (2^D,) G_j
    hess_sum: jax.Array  # (2^D,) H_j
    gain: jax.Array  # (2^D - 1,) gain of each split taken (0 where none)


def histograms(bins, gh, node, *, nodes: int, num_bins: int, method: str = "xla"):
    """``hist[k, f, b] = sum of gh[i]`` over samples ``i`` in node ``k`` with
    ``bins[i, f] = b``: shape ``(nodes, d, num_bins, 2)``. ``method="native_left"`` fills
    only the even (left-child) nodes and leaves the odd ones zero."""
    n, d = bins.shape
    if method in ("native", "native_left"):
        resolve_histogram("native")  # builds and registers the kernel, or raises
        out = jax.ShapeDtypeStruct((nodes, d, num_bins, 2), gh.dtype)
        target = _TARGET if method == "native" else _TARGET_LEFT
        return jax.ffi.ffi_call(target, out, vmap_method="sequential")(bins, gh, node)
    keys = (node[:, None] * d + jnp.arange(d, dtype=jnp.int32)[None, :]) * num_bins + bins
    return jax.ops.segment_sum(
        jnp.broadcast_to(gh[:, None, :], (n, d, 2)).reshape(n * d, 2),
        keys.reshape(-1),
        num_segments=nodes * d * num_bins,
    ).reshape(nodes, d, num_bins, 2)


def _level_histograms(bins, gh, node, parent, *, level, num_bins, method):
    """The histograms of level ``level``; with the native kernel below the root, only the
    left children are summed and each right child is its parent minus its sibling (half
    the rows, as XGBoost and LightGBM do)."""
    nodes = 2**level
    if method != "native" or parent is None:
        return histograms(bins, gh, node, nodes=nodes, num_bins=num_bins, method=method)
    left = histograms(bins, gh, node, nodes=nodes, num_bins=num_bins, method="native_left")
    left = left[0::2]
    right = parent - left
    return jnp.stack([left, right], axis=1).reshape((nodes, *parent.shape[1:]))


def _score(G, H, l2):
    denominator = H + l2
    return jnp.where(denominator > 0, G * G / jnp.where(denominator > 0, denominator, 1.0), 0.0)


def leaf_values(G, H, l2):
    """Newton leaf values ``-G / (H + l2)`` (0 for an empty leaf)."""
    denominator = H + l2
    return jnp.where(denominator > 0, -G / jnp.where(denominator > 0, denominator, 1.0), 0.0)


def best_splits(hist, l2, min_child_weight, min_split_gain):
    """The best split of each node from its histogram ``hist[node, feature, bin, (G, H)]``:
    ``(feature, threshold, gain, children)``, with ``threshold = num_bins - 1`` (no split,
    everything left) where no candidate has positive gain, and ``children (2 nodes, 2)``
    the ``(G, H)`` sums of the next level's nodes ``2k, 2k + 1``."""
    nodes, d, nb, _ = hist.shape
    cum = jnp.cumsum(hist, axis=2)
    GL, HL = cum[..., 0], cum[..., 1]
    G, H = cum[:, 0, -1, 0], cum[:, 0, -1, 1]  # node totals (same for every feature)
    GR, HR = G[:, None, None] - GL, H[:, None, None] - HL
    gain = (
        0.5 * (_score(GL, HL, l2) + _score(GR, HR, l2) - _score(G, H, l2)[:, None, None])
        - min_split_gain
    )
    candidate = (jnp.arange(nb) < nb - 1)[None, None, :]  # the last bin leaves no right side
    valid = candidate & (HL >= min_child_weight) & (HR >= min_child_weight)
    gain = jnp.where(valid, gain, -jnp.inf).reshape(nodes, d * nb)
    best = jnp.argmax(gain, axis=1)
    best_gain = jnp.take_along_axis(gain, best[:, None], axis=1)[:, 0]
    split = best_gain > 0
    feature = jnp.where(split, best // nb, 0).astype(jnp.int32)
    threshold = jnp.where(split, best % nb, nb - 1).astype(jnp.int32)
    left = cum[jnp.arange(nodes), feature, threshold]  # (nodes, 2)
    total = cum[:, 0, -1]
    children = jnp.stack([left, total - left], axis=1).reshape(2 * nodes, 2)
    return feature, threshold, jnp.where(split, best_gain, 0.0), children


def _check_rows(bins, grad, hess, num_bins: int) -> None:
    """A ValueError naming the argument unless ``bins`` is an (n, d) integer array, ``grad``
    and ``hess`` have shape (n,) (an (n, 1) column failed in a broadcast) and concrete
    ``bins`` lie in ``[0, num_bins)``."""
    shape = jnp.shape(bins)
    if len(shape) != 2 or not jnp.issubdtype(jnp.result_type(bins), jnp.integer):
        raise ValueError(
            f"bins must be an (n, d) integer array, got shape {shape} and dtype "
            f"{jnp.result_type(bins)}"
        )
    for name, value in (("grad", grad), ("hess", hess)):
        if jnp.shape(value) != shape[:1]:
            raise ValueError(
                f"{name} must have shape (n,) = ({shape[0]},), one entry per row of bins "
                f"{shape}, got {jnp.shape(value)}"
            )
    if isinstance(bins, jax.core.Tracer) or 0 in shape:
        return
    values = np.asarray(bins)
    low, high = values.min(), values.max()
    if low < 0 or high >= num_bins:
        raise ValueError(
            f"bins must lie in [0, num_bins) = [0, {num_bins}), got values in [{low}, {high}]"
        )


def grow_tree(
    bins: jax.Array,
    grad: jax.Array,
    hess: jax.Array,
    *,
    depth: int,
    num_bins: int,
    l2,
    min_child_weight=1.0,
    min_split_gain=0.0,
    histogram: str = "xla",
) -> TreeFit:
    """Grows one tree on ``bins`` (n, d), integers in ``[0, num_bins)``, for per-sample
    ``grad`` and ``hess`` (n,). ``depth``, ``num_bins`` and ``histogram`` (one of
    :data:`HISTOGRAMS`, see :func:`resolve_histogram`) are static; the rest may be traced.
    Concrete ``bins`` are checked to lie in range; traced ones (under ``jit`` or ``vmap``)
    cannot be, and there a bin ``>= num_bins`` lands in another feature's or node's
    histogram on the ``"xla"`` path (the native kernel raises)."""
    method = resolve_histogram(histogram)  # "bogus" fell through to the XLA path
    depth = check_integer("depth", depth, 1)
    num_bins = check_integer("num_bins", num_bins, 1)
    _check_rows(bins, grad, hess, num_bins)
    n, d = bins.shape
    gh = jnp.stack([grad, hess], axis=-1)  # (n, 2)
    node = jnp.zeros(n, jnp.int32)
    features, thresholds, gains = [], [], []
    hist = None
    for level in range(depth):
        hist = _level_histograms(
            bins, gh, node, hist, level=level, num_bins=num_bins, method=method
        )
        feature, threshold, gain, children = best_splits(hist, l2, min_child_weight, min_split_gain)
        sample_bin = jnp.take_along_axis(bins, feature[node][:, None], axis=1)[:, 0]
        node = 2 * node + (sample_bin > threshold[node]).astype(jnp.int32)
        features.append(feature)
        thresholds.append(threshold)
        gains.append(gain)
    # the leaves' sums are the last level's split sums (no pass over the rows)
    G, H = children[:, 0], children[:, 1]
    tree = Tree(jnp.concatenate(features), jnp.concatenate(thresholds), leaf_values(G, H, l2))
    return TreeFit(tree, node, G, H, jnp.concatenate(gains))


def tree_leaf(tree: Tree, bins: jax.Array) -> jax.Array:
    """The leaf of every row of ``bins`` (n, d)."""
    depth = (tree.value.shape[0]).bit_length() - 1
    node = jnp.zeros(bins.shape[0], jnp.int32)
    for level in range(depth):
        index = 2**level - 1 + node
        sample_bin = jnp.take_along_axis(bins, tree.feature[index][:, None], axis=1)[:, 0]
        node = 2 * node + (sample_bin > tree.threshold[index]).astype(jnp.int32)
    return node


def tree_predict(tree: Tree, bins: jax.Array) -> jax.Array:
    """The tree's value at every row of ``bins``."""
    return tree.value[tree_leaf(tree, bins)]
