"""Quantile binning of features, as histogram tree builders do (XGBoost ``hist``,
LightGBM): each feature's values are cut at up to ``max_bins - 1`` quantiles once, and a
tree then searches splits over bins instead of raw values.

Binning runs on the host (numpy) once per data set; the bins are a small integer matrix
on the device. Missing values are not supported: NaN or infinite features raise an error
that names the column (impute them first).
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np


class BinEdges(NamedTuple):
    """``edges[j, b]``: the upper edge of bin ``b`` of feature ``j`` (a value ``v`` falls
    in the first bin whose edge is ``>= v``); rows are padded with ``+inf``, so every
    feature has ``max_bins`` bins, some of them empty."""

    edges: np.ndarray  # (d, max_bins - 1) float64, non-decreasing per row

    @property
    def num_bins(self) -> int:
        return self.edges.shape[1] + 1

    @property
    def num_features(self) -> int:
        return self.edges.shape[0]


def check_features(X, name: str = "X") -> np.ndarray:
    """``X`` as a float64 ``(n, d)`` array, or an error naming the first bad entry."""
    X = np.asarray(X, np.float64)
    if X.ndim != 2:
        raise ValueError(f"{name} must be a 2-d array (samples, features), got shape {X.shape}")
    if X.shape[0] == 0 or X.shape[1] == 0:
        raise ValueError(f"{name} must have at least one sample and one feature, got {X.shape}")
    bad = np.argwhere(~np.isfinite(X))
    if bad.size:
        i, j = (int(v) for v in bad[0])
        raise ValueError(
            f"{name}[{i}, {j}] is {X[i, j]}: missing or infinite features are not supported "
            f"(impute them first); {len(bad)} such entries"
        )
    return X


def fit_bins(X, max_bins: int = 256) -> BinEdges:
    """Cut points at the quantiles of each feature (midpoints between distinct values when
    a feature has fewer than ``max_bins`` of them, so small integer features keep one bin
    per value)."""
    if not 2 <= int(max_bins) <= 65536:
        raise ValueError(f"max_bins must lie in [2, 65536], got {max_bins}")
    X = check_features(X)
    n, d = X.shape
    edges = np.full((d, max_bins - 1), np.inf)
    levels = np.linspace(0.0, 1.0, max_bins + 1)[1:-1]
    for j in range(d):
        column = np.sort(X[:, j])  # one sort gives both the distinct values and quantiles
        distinct = np.concatenate([[True], column[1:] != column[:-1]])
        if np.count_nonzero(distinct) <= max_bins:
            cuts = _midpoints(column[distinct])
        else:
            cuts = np.unique(_sorted_quantiles(column, levels))
        edges[j, : cuts.size] = cuts
    return BinEdges(edges)


def _midpoints(values: np.ndarray) -> np.ndarray:
    """Cut points between consecutive distinct sorted ``values``, each ``c`` with
    ``a <= c < b`` for its pair ``(a, b)`` (``apply_bins`` puts ``a`` below the cut and ``b``
    above). Halves are added so values near the float range do not overflow; where rounding
    puts the midpoint on ``b`` (adjacent floats) the cut is ``a``."""
    low, high = values[:-1], values[1:]
    middle = low / 2.0 + high / 2.0
    return np.where((middle >= low) & (middle < high), middle, low)


def _sorted_quantiles(column: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """``np.quantile(column, levels)`` (its default linear method, the same arithmetic) of
    an already sorted ``column``, by indexing instead of a selection per level."""
    position = levels * (column.size - 1)
    below = np.floor(position).astype(np.int64)
    above = np.minimum(below + 1, column.size - 1)
    t = position - below
    a, b = column[below], column[above]
    diff = b - a
    return np.where(t >= 0.5, b - diff * (1.0 - t), a + diff * t)


def apply_bins(bins: BinEdges, X) -> jnp.ndarray:
    """The bin index of every entry of ``X`` as an ``(n, d)`` device array: uint8 when
    there are at most 256 bins (a quarter of the memory the histogram pass reads), else
    int32."""
    X = check_features(X)
    if X.shape[1] != bins.num_features:
        raise ValueError(
            f"X has {X.shape[1]} features but the bins were fitted on {bins.num_features}"
        )
    out = np.empty(X.shape, np.uint8 if bins.num_bins <= 256 else np.int32)
    for j in range(X.shape[1]):
        out[:, j] = np.searchsorted(bins.edges[j], X[:, j], side="left")
    return jnp.asarray(out)
