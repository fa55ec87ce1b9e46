"""Bilevel tasks on data that ships offline (Fashion-MNIST when installed, else digits).

Each builder returns a :class:`BilevelTask`: the :class:`BilevelProblem`, starting points,
and a jittable ``evaluate(x, y) -> dict`` of validation / test metrics. Models apply their
weights with :func:`~jaxopt_suite.bilevel.subspace.dense` and penalties with
:func:`~jaxopt_suite.bilevel.subspace.sq_norm`, so every task runs BROS in its
memory-lean factorized form (``bros(..., factorized=True)``).

* :func:`hyper_cleaning`: per-sample weights ``sigmoid(x_i)`` on a training set whose
  labels are re-drawn uniformly with probability ``corruption``; clean validation set;
  lower level a linear model or an MLP (Franceschi et al. 2017; benchopt's setup).
* :func:`data_mixture`: K source groups with different label noise and input shifts;
  ``x`` are the mixture logits, the lower level trains on the softmax-weighted groups.
* :func:`hyper_representation`: ``x`` is an MLP backbone, ``y`` a ridge-regularised linear
  head fitted (squared loss to one-hot targets) on its features.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxopt_suite import datasets
from jaxopt_suite._checks import check_finite_nonnegative, check_real, check_widths
from jaxopt_suite.bilevel.problem import BilevelProblem
from jaxopt_suite.bilevel.subspace import dense, sq_norm


class BilevelTask(NamedTuple):
    name: str
    problem: BilevelProblem
    x0: Any
    y0: Any
    evaluate: Callable[[Any, Any], dict]  # jittable: val/test accuracy and loss
    info: dict


class Split(NamedTuple):
    """Standardised features (flattened) and int labels."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int
    name: str


def load_split(
    dataset: str = "auto", *, n_train: int | None = None, n_val: int | None = None, seed: int = 0
) -> Split:
    """Train / validation / test split of ``"fashion_mnist"``, ``"digits"`` or ``"auto"``
    (Fashion-MNIST when its files are on the machine, else digits).

    The validation set comes out of the training split; features are standardised with the
    training statistics. ``n_train`` / ``n_val`` cap the sizes (defaults: all but the
    validation set, and 20% of the training split).
    """
    if dataset not in ("auto", "fashion_mnist", "digits"):
        raise ValueError(f"dataset must be 'auto', 'fashion_mnist' or 'digits', got {dataset!r}")
    data, name = None, "digits"
    if dataset in ("auto", "fashion_mnist"):
        try:
            data, name = datasets.load_fashion_mnist(), "fashion_mnist"
        except datasets.DatasetNotFoundError:
            if dataset == "fashion_mnist":
                raise
    if data is None:
        data = datasets.load_digits()
    x = data.x_train.reshape(data.x_train.shape[0], -1)
    x_test = data.x_test.reshape(data.x_test.shape[0], -1)
    rng = np.random.default_rng(seed)
    order = rng.permutation(x.shape[0])
    n_val = n_val if n_val is not None else x.shape[0] // 5
    rest = x.shape[0] - n_val
    n_train = rest if n_train is None else n_train
    if n_val < 1 or n_train < 1 or n_train > rest:
        raise ValueError(
            f"n_train={n_train} and n_val={n_val} do not fit the {x.shape[0]} training "
            f"examples of {name}"
        )
    val_idx, train_idx = order[:n_val], order[n_val : n_val + n_train]
    mean = x[train_idx].mean(0)
    std = x[train_idx].std(0) + 1e-3

    def scale(a):
        return ((a - mean) / std).astype(np.float32)

    return Split(
        scale(x[train_idx]),
        data.y_train[train_idx],
        scale(x[val_idx]),
        data.y_train[val_idx],
        scale(x_test),
        data.y_test,
        data.num_classes,
        name,
    )


def corrupt_labels(labels: np.ndarray, rate: float, num_classes: int, seed: int) -> np.ndarray:
    """Each label re-drawn uniformly over the classes with probability ``rate``."""
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"corruption must lie in [0, 1], got {rate!r}")
    rng = np.random.default_rng(seed)
    flip = rng.random(labels.shape[0]) < rate
    return np.where(flip, rng.integers(0, num_classes, labels.shape[0]), labels).astype(np.int32)


# --- models ------------------------------------------------------------------------------


def mlp_init(key: jax.Array, sizes: tuple[int, ...]) -> dict:
    """``{"w0", "b0", "w1", ...}`` with LeCun-normal kernels of shape ``(fan_in, fan_out)``."""
    params = {}
    keys = jax.random.split(key, len(sizes) - 1)
    for i, (k, fan_in, fan_out) in enumerate(zip(keys, sizes[:-1], sizes[1:], strict=True)):
        params[f"w{i}"] = jax.random.normal(k, (fan_in, fan_out)) / np.sqrt(fan_in)
        params[f"b{i}"] = jnp.zeros(fan_out)
    return params


def mlp_apply(params: dict, inputs: jax.Array) -> jax.Array:
    """ReLU MLP (a linear model for one layer); plain or factorized weights."""
    layers = len(params) // 2
    h = inputs
    for i in range(layers):
        h = dense(h, params[f"w{i}"], params[f"b{i}"])
        if i < layers - 1:
            h = jax.nn.relu(h)
    return h


def _ce(logits, labels):
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels)


def _accuracy(logits, labels):
    return jnp.mean(jnp.argmax(logits, -1) == labels)


def _batch_sampler(inputs, labels, batch_size):
    inputs, labels = jnp.asarray(inputs), jnp.asarray(labels)
    n = inputs.shape[0]

    def sample(key):
        idx = jax.random.randint(key, (batch_size,), 0, n)
        return idx, inputs[idx], labels[idx]

    return sample


def _check_batch(batch_size: Any) -> None:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a Python int >= 1, got {batch_size!r}")


def check_regularisation(reg: Any) -> None:
    """The lower level's ridge weight: finite and >= 0 (NaN made every loss NaN)."""
    check_finite_nonnegative("reg", reg)


# --- tasks -------------------------------------------------------------------------------


def hyper_cleaning(
    split: Split | None = None,
    *,
    corruption: float = 0.5,
    hidden: tuple[int, ...] = (),
    batch_size: int = 64,
    reg: float = 1e-3,
    seed: int = 0,
) -> BilevelTask:
    """Hyper-data cleaning: learn per-sample weights ``sigmoid(x_i)`` of a corrupted
    training set so that the model trained on the weighted loss fits a clean validation set.

    ``g(x, y) = mean_i sigmoid(x_i) CE(model_y(a_i), b_i) + reg/2 ||y||^2`` on training
    batches, ``f(x, y) = mean CE`` on validation batches. ``hidden=()`` is a linear model
    (the classic, strongly convex lower level); widths make it an MLP.
    """
    split = load_split() if split is None else split
    _check_batch(batch_size)
    check_regularisation(reg)
    hidden = check_widths("hidden", hidden)
    noisy = corrupt_labels(split.y_train, corruption, split.num_classes, seed)
    sizes = (split.x_train.shape[1], *hidden, split.num_classes)

    def inner(x, y, batch):
        idx, inputs, labels = batch
        weights = jax.nn.sigmoid(x[idx])
        return jnp.mean(weights * _ce(mlp_apply(y, inputs), labels)) + 0.5 * reg * sq_norm(y)

    def outer(x, y, batch):
        del x
        _, inputs, labels = batch
        return jnp.mean(_ce(mlp_apply(y, inputs), labels))

    problem = BilevelProblem(
        outer,
        inner,
        _batch_sampler(split.x_train, noisy, batch_size),
        _batch_sampler(split.x_val, split.y_val, batch_size),
    )
    x0 = jnp.zeros(split.x_train.shape[0])
    y0 = mlp_init(jax.random.key(seed), sizes)
    clean = noisy == split.y_train
    evaluate = _classification_metrics(split, lambda x, y, a: mlp_apply(y, a), clean)
    info = {
        "task": "hyper_cleaning",
        "dataset": split.name,
        "corruption": corruption,
        "sizes": list(sizes),
        "n_train": int(split.x_train.shape[0]),
        "n_val": int(split.x_val.shape[0]),
        "batch_size": batch_size,
        "reg": reg,
    }
    return BilevelTask("hyper_cleaning", problem, x0, y0, evaluate, info)


def _classification_metrics(split, predict, clean=None):
    x_val, y_val = jnp.asarray(split.x_val), jnp.asarray(split.y_val)
    x_test, y_test = jnp.asarray(split.x_test), jnp.asarray(split.y_test)
    clean = None if clean is None else jnp.asarray(clean)

    def evaluate(x, y):
        val_logits = predict(x, y, x_val)
        test_logits = predict(x, y, x_test)
        out = {
            "val_accuracy": _accuracy(val_logits, y_val),
            "val_loss": jnp.mean(_ce(val_logits, y_val)),
            "test_accuracy": _accuracy(test_logits, y_test),
        }
        if clean is not None:
            # How well the weights separate clean from corrupted samples.
            weights = jax.nn.sigmoid(x)
            out["weight_clean"] = jnp.sum(weights * clean) / jnp.maximum(jnp.sum(clean), 1)
            out["weight_corrupted"] = jnp.sum(weights * ~clean) / jnp.maximum(jnp.sum(~clean), 1)
        return out

    return evaluate


def data_mixture(
    split: Split | None = None,
    *,
    label_noise: tuple[float, ...] = (0.0, 0.3, 0.6, 0.9),
    input_noise: tuple[float, ...] = (0.0, 0.5, 1.0, 2.0),
    hidden: tuple[int, ...] = (),
    batch_size: int = 64,
    reg: float = 1e-3,
    seed: int = 0,
) -> BilevelTask:
    """Data-mixture learning over K source groups of the training set.

    Group k gets label noise ``label_noise[k]`` and Gaussian input noise of scale
    ``input_noise[k]``; ``x`` (K logits) weights the groups' losses through a softmax:
    ``g = sum_k softmax(x)_k CE_k(y) + reg/2 ||y||^2`` on one batch per group, ``f`` the
    clean validation loss. A good mixture puts its weight on the clean groups: the metric
    ``weight_clean_group`` is the weight of the cleanest one (least label noise, then least
    input noise; group 0 by default).
    """
    split = load_split() if split is None else split
    _check_batch(batch_size)
    check_regularisation(reg)
    hidden = check_widths("hidden", hidden)
    check_finite_nonnegative("input_noise", input_noise)
    check_real("label_noise", label_noise, "lie in [0, 1]", lambda v: 0.0 <= v <= 1.0)
    if len(label_noise) != len(input_noise) or len(label_noise) < 2:
        raise ValueError(
            "label_noise and input_noise must have the same length K >= 2, got "
            f"{len(label_noise)} and {len(input_noise)}"
        )
    groups = len(label_noise)
    cleanest = int(np.lexsort((np.asarray(input_noise), np.asarray(label_noise)))[0])
    rng = np.random.default_rng(seed)
    owner = rng.integers(0, groups, split.x_train.shape[0])
    inputs, labels = [], []
    for k in range(groups):
        members = np.flatnonzero(owner == k)
        a = split.x_train[members]
        a = a + input_noise[k] * rng.normal(size=a.shape).astype(np.float32)
        inputs.append(a.astype(np.float32))
        labels.append(
            corrupt_labels(split.y_train[members], label_noise[k], split.num_classes, seed + k)
        )
    size = min(a.shape[0] for a in inputs)
    if size == 0:
        empty = next(k for k, a in enumerate(inputs) if a.shape[0] == 0)
        raise ValueError(
            f"group {empty} has no training examples ({split.x_train.shape[0]} rows over "
            f"{groups} groups): use fewer groups or more data"
        )
    stacked_x = jnp.asarray(np.stack([a[:size] for a in inputs]))  # (K, n_k, d)
    stacked_y = jnp.asarray(np.stack([b[:size] for b in labels]))
    sizes = (split.x_train.shape[1], *hidden, split.num_classes)

    def sample_inner(key):
        idx = jax.random.randint(key, (groups, batch_size), 0, size)
        rows = jnp.arange(groups)[:, None]
        return idx, stacked_x[rows, idx], stacked_y[rows, idx]

    def inner(x, y, batch):
        _, a, b = batch
        losses = jnp.mean(_ce(mlp_apply(y, a), b), axis=1)  # (K,)
        return jnp.sum(jax.nn.softmax(x) * losses) + 0.5 * reg * sq_norm(y)

    def outer(x, y, batch):
        del x
        _, a, b = batch
        return jnp.mean(_ce(mlp_apply(y, a), b))

    problem = BilevelProblem(
        outer, inner, sample_inner, _batch_sampler(split.x_val, split.y_val, batch_size)
    )
    x0 = jnp.zeros(groups)
    y0 = mlp_init(jax.random.key(seed), sizes)
    metrics = _classification_metrics(split, lambda x, y, a: mlp_apply(y, a))

    def evaluate(x, y):
        out = metrics(x, y)
        out["weight_clean_group"] = jax.nn.softmax(x)[cleanest]
        return out

    info = {
        "task": "data_mixture",
        "dataset": split.name,
        "label_noise": list(label_noise),
        "input_noise": list(input_noise),
        "group_size": int(size),
        "sizes": list(sizes),
        "batch_size": batch_size,
        "reg": reg,
    }
    return BilevelTask("data_mixture", problem, x0, y0, evaluate, info)


def hyper_representation(
    split: Split | None = None,
    *,
    backbone: tuple[int, ...] = (64, 32),
    batch_size: int = 64,
    reg: float = 1e-2,
    seed: int = 0,
) -> BilevelTask:
    """Hyper-representation: ``x`` an MLP backbone, ``y`` a linear head on its features.

    ``g(x, y) = 1/2 mean ||head_y(phi_x(a)) - onehot(b)||^2 + reg/2 ||y||^2`` (ridge
    regression, strongly convex in ``y``) on training batches; ``f`` the cross-entropy of
    the head's scores on validation batches.
    """
    split = load_split() if split is None else split
    _check_batch(batch_size)
    check_regularisation(reg)
    backbone = check_widths("backbone", backbone)
    if not backbone:
        raise ValueError("backbone must list at least one hidden width, got ()")
    sizes = (split.x_train.shape[1], *backbone)
    classes = split.num_classes

    def features(x, a):
        return jax.nn.relu(mlp_apply(x, a))

    def inner(x, y, batch):
        _, a, b = batch
        scores = mlp_apply(y, features(x, a))
        target = jax.nn.one_hot(b, classes)
        return 0.5 * jnp.mean(jnp.sum((scores - target) ** 2, -1)) + 0.5 * reg * sq_norm(y)

    def outer(x, y, batch):
        _, a, b = batch
        return jnp.mean(_ce(mlp_apply(y, features(x, a)), b))

    problem = BilevelProblem(
        outer,
        inner,
        _batch_sampler(split.x_train, split.y_train, batch_size),
        _batch_sampler(split.x_val, split.y_val, batch_size),
    )
    kx, ky = jax.random.split(jax.random.key(seed))
    x0 = mlp_init(kx, sizes)
    y0 = mlp_init(ky, (backbone[-1], classes))
    evaluate = _classification_metrics(split, lambda x, y, a: mlp_apply(y, features(x, a)))
    info = {
        "task": "hyper_representation",
        "dataset": split.name,
        "backbone": list(sizes),
        "head": [backbone[-1], classes],
        "batch_size": batch_size,
        "reg": reg,
    }
    return BilevelTask("hyper_representation", problem, x0, y0, evaluate, info)
