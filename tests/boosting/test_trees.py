"""Histogram trees against a brute-force numpy reference."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxopt_suite import _native
from jaxopt_suite.boosting import apply_bins, fit_bins, grow_tree, tree_predict
from jaxopt_suite.boosting.trees import (
    _SOURCE,
    _TARGETS,
    histograms,
    resolve_histogram,
    tree_leaf,
)

NATIVE = _native.register(_SOURCE, _TARGETS)
METHODS = ["xla", pytest.param("native", marks=pytest.mark.skipif(bool(NATIVE), reason=NATIVE))]


def _score(G, H, l2):
    return G * G / (H + l2) if H + l2 > 0 else 0.0


def _best_split_reference(bins, g, h, l2, mcw, num_bins):
    """Every (feature, threshold) tried; the largest gain with both children >= mcw."""
    G, H = g.sum(), h.sum()
    best = (0.0, None, None)
    for f in range(bins.shape[1]):
        for t in range(num_bins - 1):
            left = bins[:, f] <= t
            GL, HL = g[left].sum(), h[left].sum()
            GR, HR = G - GL, H - HL
            if HL < mcw or HR < mcw:
                continue
            gain = 0.5 * (_score(GL, HL, l2) + _score(GR, HR, l2) - _score(G, H, l2))
            if gain > best[0] + 1e-9:
                best = (gain, f, t)
    return best


def _grow_reference(bins, g, h, depth, l2, mcw, num_bins):
    """Level-order features, thresholds and leaf values of the greedy tree."""
    node = np.zeros(len(g), int)
    features, thresholds = [], []
    for level in range(depth):
        for k in range(2**level):
            rows = node == k
            gain, f, t = _best_split_reference(bins[rows], g[rows], h[rows], l2, mcw, num_bins)
            features.append(0 if f is None else f)
            thresholds.append(num_bins - 1 if f is None else t)
        index = 2**level - 1 + node
        f_of = np.asarray(features)[index]
        t_of = np.asarray(thresholds)[index]
        node = 2 * node + (bins[np.arange(len(g)), f_of] > t_of)
    leaves = 2**depth
    G = np.bincount(node, g, leaves)
    H = np.bincount(node, h, leaves)
    values = np.where(H + l2 > 0, -G / np.where(H + l2 > 0, H + l2, 1.0), 0.0)
    return np.asarray(features), np.asarray(thresholds), values, node


def _data(n=240, d=4, num_bins=8, seed=0):
    rng = np.random.default_rng(seed)
    bins = rng.integers(0, num_bins, size=(n, d)).astype(np.int32)
    g = rng.normal(size=n) + 0.8 * (bins[:, 1] > 3) - 0.5 * (bins[:, 2] < 2)
    h = rng.uniform(0.1, 1.0, size=n)
    return bins, g, h


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("depth", [1, 2, 3])
@pytest.mark.parametrize("l2,mcw", [(1.0, 1.0), (0.0, 5.0)])
def test_tree_matches_brute_force(depth, l2, mcw, method):
    num_bins = 8
    bins, g, h = _data(num_bins=num_bins)
    with jax.enable_x64(True):
        grow = jax.jit(
            lambda b, g, h: grow_tree(
                b,
                g,
                h,
                depth=depth,
                num_bins=num_bins,
                l2=l2,
                min_child_weight=mcw,
                histogram=method,
            )
        )
        fit = grow(jnp.asarray(bins), jnp.asarray(g), jnp.asarray(h))
        features, thresholds, values, leaf = _grow_reference(bins, g, h, depth, l2, mcw, num_bins)
        np.testing.assert_array_equal(fit.tree.feature, features)
        np.testing.assert_array_equal(fit.tree.threshold, thresholds)
        np.testing.assert_allclose(fit.tree.value, values, rtol=1e-10, atol=1e-12)
        np.testing.assert_array_equal(fit.leaf, leaf)
        # the tree routes the training rows to the leaves the build assigned
        np.testing.assert_array_equal(tree_leaf(fit.tree, jnp.asarray(bins)), leaf)
        np.testing.assert_allclose(
            tree_predict(fit.tree, jnp.asarray(bins)), values[leaf], rtol=1e-12
        )


def test_grow_tree_checks_its_arguments():
    bins, g, h = _data()  # bins in [0, 8)
    bins, g, h = jnp.asarray(bins), jnp.asarray(g, jnp.float32), jnp.asarray(h, jnp.float32)

    def grow(bins=bins, g=g, h=h, **settings):
        return grow_tree(bins, g, h, **{"depth": 2, "num_bins": 8, "l2": 1.0, **settings})

    # any other name than "native" took the XLA path
    with pytest.raises(ValueError, match="histogram must be one of"):
        grow(histogram="bogus")
    np.testing.assert_array_equal(
        grow(histogram="auto").tree.value, grow(histogram=resolve_histogram("auto")).tree.value
    )
    # a bin >= num_bins went to another feature's or node's histogram on the XLA path (a
    # wrong tree, no error); the native kernel raised a runtime error
    for method in ("xla", *(() if NATIVE else ("native",))):
        with pytest.raises(
            ValueError, match=r"bins must lie in \[0, num_bins\) = \[0, 4\), got values in \[0, 7\]"
        ):
            grow(num_bins=4, histogram=method)
    with pytest.raises(ValueError, match=r"got values in \[-1, 7\]"):
        grow(bins=bins.at[3, 1].set(-1))
    with pytest.raises(ValueError, match=r"bins must be an \(n, d\) integer array"):
        grow(bins=bins.astype(jnp.float32))
    # an (n, 1) column failed in a broadcast
    with pytest.raises(
        ValueError, match=r"grad must have shape \(n,\) = \(240,\).* got \(240, 1\)"
    ):
        grow(g=g[:, None], h=h[:, None])
    with pytest.raises(ValueError, match=r"hess must have shape \(n,\) = \(240,\).* got \(239,\)"):
        grow(h=h[1:])
    with pytest.raises(ValueError, match="depth must be an integer >= 1, got 0"):
        grow(depth=0)


def test_no_valid_split_sends_everything_left():
    bins = jnp.zeros((10, 3), jnp.int32)  # one occupied bin: no split separates anything
    g = jnp.linspace(-1.0, 1.0, 10)
    h = jnp.ones(10)
    fit = grow_tree(bins, g, h, depth=2, num_bins=4, l2=1.0)
    assert np.all(np.asarray(fit.tree.threshold) == 3)
    assert np.all(np.asarray(fit.leaf) == 0)
    assert np.all(np.asarray(fit.gain) == 0)
    np.testing.assert_allclose(fit.tree.value[0], -float(g.sum()) / (10 + 1.0), rtol=1e-6)
    np.testing.assert_array_equal(fit.tree.value[1:], 0.0)


def test_bins_keep_small_integer_features_exact():
    X = np.array([[0.0, 5.0], [1.0, 5.0], [2.0, 7.0], [1.0, 9.0]])
    edges = fit_bins(X, max_bins=16)
    bins = np.asarray(apply_bins(edges, X))
    np.testing.assert_array_equal(bins[:, 0], [0, 1, 2, 1])
    np.testing.assert_array_equal(bins[:, 1], [0, 0, 1, 2])
    many = np.random.default_rng(0).normal(size=(1000, 1))
    counts = np.bincount(np.asarray(apply_bins(fit_bins(many, 8), many))[:, 0], minlength=8)
    assert counts.min() >= 100  # quantile bins: near-equal occupancy


def test_bin_edges_are_midpoints_or_numpy_quantiles():
    # the edges from one sort per feature equal the definition: midpoints between the
    # distinct values when there are few, else the distinct np.quantile cut points
    rng = np.random.default_rng(3)
    X = np.column_stack(
        [
            rng.normal(size=5000),
            rng.integers(0, 40, 5000).astype(float),  # 40 distinct values < max_bins
            np.round(rng.exponential(size=5000), 2),  # ties: repeated quantiles
        ]
    )
    max_bins = 64
    edges = fit_bins(X, max_bins).edges
    for j in range(X.shape[1]):
        values = np.unique(X[:, j])
        if values.size <= max_bins:
            expected = (values[:-1] + values[1:]) / 2.0
        else:
            levels = np.linspace(0.0, 1.0, max_bins + 1)[1:-1]
            expected = np.unique(np.quantile(X[:, j], levels))
        np.testing.assert_array_equal(edges[j, : expected.size], expected)
        assert np.all(np.isinf(edges[j, expected.size :]))


def test_bins_separate_values_at_the_ends_of_the_float_range():
    # Midpoints by (a + b) / 2 overflowed to inf here and put every row in bin 0; adjacent
    # floats have no midpoint strictly between them, so the cut is the lower one.
    tiny = np.nextafter(0.0, 1.0)
    for values in (
        [1e308, 1.2e308, 1.4e308, 1.6e308],
        [-1.7e308, -1e308, 1e308, 1.7e308],
        [1.0, np.nextafter(1.0, 2.0), 2.0],
        [0.0, tiny, 2 * tiny],
    ):
        X = np.asarray(values)[:, None]
        bins = np.asarray(apply_bins(fit_bins(X), X))[:, 0]
        np.testing.assert_array_equal(bins, np.arange(len(values)))


def test_binning_errors_name_the_problem():
    with pytest.raises(ValueError, match=r"X\[1, 0\] is nan"):
        fit_bins(np.array([[0.0], [np.nan]]))
    with pytest.raises(ValueError, match="max_bins"):
        fit_bins(np.zeros((3, 2)), max_bins=1)
    edges = fit_bins(np.zeros((3, 2)))
    with pytest.raises(ValueError, match="3 features but the bins were fitted on 2"):
        apply_bins(edges, np.zeros((2, 3)))


@pytest.mark.skipif(bool(NATIVE), reason=NATIVE)
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_native_histograms_equal_segment_sums(dtype):
    with jax.enable_x64(dtype == jnp.float64):
        rng = np.random.default_rng(3)
        n, d, nb, nodes = 500, 6, 16, 4
        bins = jnp.asarray(rng.integers(0, nb, (n, d)), jnp.int32)
        node = jnp.asarray(rng.integers(0, nodes, n), jnp.int32)
        gh = jnp.asarray(rng.normal(size=(n, 2)), dtype)
        run = jax.jit(histograms, static_argnames=("nodes", "num_bins", "method"))
        native = run(bins, gh, node, nodes=nodes, num_bins=nb, method="native")
        xla = run(bins, gh, node, nodes=nodes, num_bins=nb, method="xla")
        assert native.shape == (nodes, d, nb, 2) and native.dtype == dtype
        np.testing.assert_allclose(
            native,
            xla,
            rtol=1e-5 if dtype == jnp.float32 else 1e-12,
            atol=1e-5 if dtype == jnp.float32 else 1e-12,
        )
        # several gradient columns at once (softmax classes) under vmap
        ghs = jnp.asarray(rng.normal(size=(3, n, 2)), dtype)
        batched = jax.vmap(lambda g: run(bins, g, node, nodes=nodes, num_bins=nb, method="native"))
        np.testing.assert_allclose(
            batched(ghs)[2],
            run(bins, ghs[2], node, nodes=nodes, num_bins=nb, method="xla"),
            rtol=1e-5,
            atol=1e-5,
        )
        with pytest.raises(Exception, match="out of range"):
            jax.block_until_ready(
                run(bins.at[0, 0].set(nb), gh, node, nodes=nodes, num_bins=nb, method="native")
            )


def test_histogram_choice_is_checked():
    assert resolve_histogram("xla") == "xla"
    assert resolve_histogram("auto") == ("xla" if NATIVE else "native")
    with pytest.raises(ValueError, match="histogram must be one of"):
        resolve_histogram("gpu")
