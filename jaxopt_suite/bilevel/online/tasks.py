"""Online bilevel tasks on data that ships offline (Fashion-MNIST when installed, else
digits), each a stream whose distribution drifts over the rounds.

* :func:`online_hyper_cleaning`: the stream walks through a training pool whose labels are
  corrupted at a rate rising with the position (so the noise level drifts over time);
  ``x`` are per-sample weight logits over the pool, the lower level a ridge-regularised
  linear classifier trained on the round's weighted batch, the upper level the clean
  validation loss.
* :func:`online_loss_tuning`: training batches are class-imbalanced, with the majority
  class rotating through the classes over time; ``x`` are per-class loss-weight logits
  (weights ``K softmax(x)``), the upper level the class-balanced validation loss.

Round ``t``'s batches are a function of ``(seed, t)``, so a stream replays exactly.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxopt_suite.bilevel.online.problem import OnlineBilevelProblem, _check_count
from jaxopt_suite.bilevel.tasks import (
    Split,
    _accuracy,
    _ce,
    check_regularisation,
    corrupt_labels,
    load_split,
)


class OnlineTask(NamedTuple):
    name: str
    problem: OnlineBilevelProblem
    x0: Any
    y0: Any
    evaluate: Callable[[Any, Any], dict]  # jittable: val / test accuracy and loss
    info: dict


def _linear(y, inputs):
    return inputs @ y["w"] + y["b"][None, :]


def _linear_init(num_features, num_classes):
    return {"w": jnp.zeros((num_features, num_classes)), "b": jnp.zeros(num_classes)}


def _ridge(y):
    return jnp.vdot(y["w"], y["w"]) + jnp.vdot(y["b"], y["b"])


def _metrics(split: Split):
    x_val, y_val = jnp.asarray(split.x_val), jnp.asarray(split.y_val)
    x_test, y_test = jnp.asarray(split.x_test), jnp.asarray(split.y_test)

    def evaluate(x, y):
        del x
        val_logits, test_logits = _linear(y, x_val), _linear(y, x_test)
        return {
            "val_accuracy": _accuracy(val_logits, y_val),
            "val_loss": jnp.mean(_ce(val_logits, y_val)),
            "test_accuracy": _accuracy(test_logits, y_test),
        }

    return evaluate


def _check_fraction(name, value):
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must lie in [0, 1], got {value!r}")


def online_hyper_cleaning(
    split: Split | None = None,
    *,
    num_rounds: int,
    batch_size: int = 128,
    corruption: tuple[float, float] = (0.2, 0.8),
    segment: float = 0.1,
    reg: float = 1e-2,
    seed: int = 0,
) -> OnlineTask:
    """Online hyper-data cleaning with drifting label noise.

    The training pool is corrupted at rate ``corruption[0]`` for its first example rising
    linearly to ``corruption[1]`` for its last. Round ``t`` draws ``batch_size`` examples
    uniformly from the pool segment of relative length ``segment`` that starts at position
    ``t / num_rounds`` (wrapping around), and ``batch_size`` clean validation examples.

    ``g_t(x, y) = mean_i sigmoid(x_i) CE(y; a_i, b_i) + reg/2 ||y||^2``,
    ``f_t(x, y) = mean CE(y; validation batch)``.
    """
    split = load_split() if split is None else split
    num_rounds = _check_count("num_rounds", num_rounds)
    batch_size = _check_count("batch_size", batch_size)
    check_regularisation(reg)
    if isinstance(corruption, str) or not hasattr(corruption, "__len__") or len(corruption) != 2:
        raise ValueError(f"corruption must be a pair (start, end) of fractions, got {corruption!r}")
    for bound in corruption:
        _check_fraction("corruption", bound)
    if not 0.0 < segment <= 1.0:
        raise ValueError(f"segment must lie in (0, 1], got {segment!r}")
    n = split.x_train.shape[0]
    rng = np.random.default_rng(seed)
    rates = np.linspace(corruption[0], corruption[1], n)
    flip = rng.random(n) < rates
    noisy = np.where(flip, rng.integers(0, split.num_classes, n), split.y_train).astype(np.int32)
    inputs, labels = jnp.asarray(split.x_train), jnp.asarray(noisy)
    x_val, y_val = jnp.asarray(split.x_val), jnp.asarray(split.y_val)
    span = max(1, int(round(segment * n)))
    key = jax.random.key(seed)
    # round t's window starts at floor(t n / num_rounds), computed here in int64: the
    # product overflows int32 once t n > 2^31 (after 44.7k rounds on Fashion-MNIST)
    starts = jnp.asarray((np.arange(num_rounds, dtype=np.int64) * n) // num_rounds, jnp.int32)

    def round_data(t):
        k_in, k_out = jax.random.split(jax.random.fold_in(key, t))
        start = starts[t % num_rounds]
        idx = (start + jax.random.randint(k_in, (batch_size,), 0, span)) % n
        val = jax.random.randint(k_out, (batch_size,), 0, x_val.shape[0])
        return (idx, inputs[idx], labels[idx]), (x_val[val], y_val[val])

    def inner(x, y, data):
        (idx, a, b), _ = data
        return jnp.mean(jax.nn.sigmoid(x[idx]) * _ce(_linear(y, a), b)) + 0.5 * reg * _ridge(y)

    def outer(x, y, data):
        del x
        _, (a, b) = data
        return jnp.mean(_ce(_linear(y, a), b))

    clean = jnp.asarray(noisy == split.y_train)
    metrics = _metrics(split)

    def evaluate(x, y):
        weights = jax.nn.sigmoid(x)
        return {
            **metrics(x, y),
            "weight_clean": jnp.sum(weights * clean) / jnp.maximum(jnp.sum(clean), 1),
            "weight_corrupted": jnp.sum(weights * ~clean) / jnp.maximum(jnp.sum(~clean), 1),
        }

    problem = OnlineBilevelProblem(outer, inner, round_data, num_rounds)
    info = {
        "task": "online_hyper_cleaning",
        "dataset": split.name,
        "n_pool": int(n),
        "corruption": list(corruption),
        "segment": segment,
        "batch_size": batch_size,
        "reg": reg,
        "num_rounds": num_rounds,
    }
    x0 = jnp.zeros(n)
    y0 = _linear_init(split.x_train.shape[1], split.num_classes)
    return OnlineTask("online_hyper_cleaning", problem, x0, y0, evaluate, info)


def online_loss_tuning(
    split: Split | None = None,
    *,
    num_rounds: int,
    batch_size: int = 128,
    imbalance: float = 10.0,
    cycles: float = 1.0,
    label_noise: float = 0.2,
    reg: float = 1e-2,
    seed: int = 0,
) -> OnlineTask:
    """Online tuning of per-class loss weights under a drifting class imbalance.

    Round ``t``'s training batch draws class ``k`` with probability proportional to
    ``imbalance ** -d_t(k)``, where ``d_t(k)`` is the circular distance (in classes,
    divided by ``K/2``) between ``k`` and the majority class ``c_t``, which turns through
    all ``K`` classes ``cycles`` times over the stream; the training labels are noisy
    (``label_noise``). The validation batch is class-balanced and clean.

    ``g_t(x, y) = mean_i w_{b_i} CE(y; a_i, b_i) + reg/2 ||y||^2`` with
    ``w = K softmax(x)``; ``f_t(x, y) = mean CE(y; validation batch)``.
    """
    split = load_split() if split is None else split
    num_rounds = _check_count("num_rounds", num_rounds)
    batch_size = _check_count("batch_size", batch_size)
    check_regularisation(reg)
    _check_fraction("label_noise", label_noise)
    if not 1.0 <= imbalance < math.inf:
        raise ValueError(f"imbalance must be finite and >= 1, got {imbalance!r}")
    if not 0 < cycles < math.inf:  # inf % k is NaN: a stream without drift, all class 0
        raise ValueError(f"cycles must be finite and > 0, got {cycles!r}")
    k = split.num_classes
    noisy = corrupt_labels(split.y_train, label_noise, k, seed)
    # Examples grouped by their (true) class, for sampling a class then a member.
    order = np.argsort(split.y_train, kind="stable")
    counts = np.bincount(split.y_train, minlength=k)
    if np.any(counts == 0):
        raise ValueError("every class needs at least one training example")
    offsets = np.concatenate([[0], np.cumsum(counts)[:-1]])
    inputs = jnp.asarray(split.x_train[order])
    labels = jnp.asarray(noisy[order])
    offsets, counts = jnp.asarray(offsets), jnp.asarray(counts)
    x_val, y_val = jnp.asarray(split.x_val), jnp.asarray(split.y_val)
    val_order = np.argsort(split.y_val, kind="stable")
    val_counts = np.bincount(split.y_val, minlength=k)
    if np.any(val_counts == 0):
        raise ValueError("every class needs at least one validation example")
    val_offsets = jnp.asarray(np.concatenate([[0], np.cumsum(val_counts)[:-1]]))
    val_counts = jnp.asarray(val_counts)
    x_val, y_val = x_val[val_order], y_val[val_order]
    # A class-balanced validation batch: the same number of examples from every class.
    val_classes = jnp.repeat(jnp.arange(k), max(1, batch_size // k))
    key = jax.random.key(seed)
    classes = jnp.arange(k)

    def round_data(t):
        t = jnp.asarray(t, jnp.int32)  # a Python int too, as the other streams take
        k_cls, k_member, k_val = jax.random.split(jax.random.fold_in(key, t), 3)
        majority = (t.astype(jnp.float32) * cycles * k / num_rounds) % k
        dist = jnp.abs(classes - majority)
        dist = jnp.minimum(dist, k - dist) / (k / 2)
        logits = -dist * jnp.log(imbalance)
        cls = jax.random.categorical(k_cls, logits, shape=(batch_size,))
        u = jax.random.uniform(k_member, (batch_size,))
        idx = offsets[cls] + jnp.floor(u * counts[cls]).astype(jnp.int32)
        u_val = jax.random.uniform(k_val, val_classes.shape)
        val = val_offsets[val_classes] + jnp.floor(u_val * val_counts[val_classes]).astype(
            jnp.int32
        )
        return (inputs[idx], labels[idx]), (x_val[val], y_val[val])

    def inner(x, y, data):
        (a, b), _ = data
        weights = k * jax.nn.softmax(x)
        return jnp.mean(weights[b] * _ce(_linear(y, a), b)) + 0.5 * reg * _ridge(y)

    def outer(x, y, data):
        del x
        _, (a, b) = data
        return jnp.mean(_ce(_linear(y, a), b))

    metrics = _metrics(split)

    def evaluate(x, y):
        return {**metrics(x, y), "weight_spread": jnp.std(k * jax.nn.softmax(x))}

    problem = OnlineBilevelProblem(outer, inner, round_data, num_rounds)
    info = {
        "task": "online_loss_tuning",
        "dataset": split.name,
        "imbalance": imbalance,
        "cycles": cycles,
        "label_noise": label_noise,
        "batch_size": batch_size,
        "reg": reg,
        "num_rounds": num_rounds,
    }
    x0 = jnp.zeros(k)
    y0 = _linear_init(split.x_train.shape[1], k)
    return OnlineTask("online_loss_tuning", problem, x0, y0, evaluate, info)
