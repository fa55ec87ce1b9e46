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
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp


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


def _score(G, H, l2):
    denominator = H + l2
    return jnp.where(denominator > 0, G * G / jnp.where(denominator > 0, denominator, 1.0), 0.0)


def leaf_values(G, H, l2):
    """Newton leaf values ``-G / (H + l2)`` (0 for an empty leaf)."""
    denominator = H + l2
    return jnp.where(denominator > 0, -G / jnp.where(denominator > 0, denominator, 1.0), 0.0)


def best_splits(hist, l2, min_child_weight, min_split_gain):
    """The best split of each node from its histogram ``hist[node, feature, bin, (G, H)]``:
    ``(feature, threshold, gain)``, with ``threshold = num_bins - 1`` (no split) where no
    candidate has positive gain."""
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
    return feature, threshold, jnp.where(split, best_gain, 0.0)


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
) -> TreeFit:
    """Grows one tree on ``bins`` (n, d) int32 for per-sample ``grad`` and ``hess`` (n,).
    ``depth`` and ``num_bins`` are static; the rest may be traced."""
    n, d = bins.shape
    gh = jnp.stack([grad, hess], axis=-1)  # (n, 2)
    node = jnp.zeros(n, jnp.int32)
    features, thresholds, gains = [], [], []
    column = jnp.arange(d, dtype=jnp.int32)[None, :]
    for level in range(depth):
        nodes = 2**level
        keys = (node[:, None] * d + column) * num_bins + bins  # (n, d)
        hist = jax.ops.segment_sum(
            jnp.broadcast_to(gh[:, None, :], (n, d, 2)).reshape(n * d, 2),
            keys.reshape(-1),
            num_segments=nodes * d * num_bins,
        ).reshape(nodes, d, num_bins, 2)
        feature, threshold, gain = best_splits(hist, l2, min_child_weight, min_split_gain)
        sample_bin = jnp.take_along_axis(bins, feature[node][:, None], axis=1)[:, 0]
        node = 2 * node + (sample_bin > threshold[node]).astype(jnp.int32)
        features.append(feature)
        thresholds.append(threshold)
        gains.append(gain)
    sums = jax.ops.segment_sum(gh, node, num_segments=2**depth)
    G, H = sums[:, 0], sums[:, 1]
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
