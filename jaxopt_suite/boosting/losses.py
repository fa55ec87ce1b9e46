"""Losses for boosting: per-sample value, gradient and a diagonal Hessian (the Hessian itself
for the scalar losses, a diagonal upper bound for ``softmax``) in the raw score
``F``, a constant starting score, and a label check.

All are sums over samples, as in XGBoost (``G_j = sum g_i``), so the regularisation
``lambda`` and ``min_child_weight`` have XGBoost's units. ``F`` has shape ``(n, K)``:
``K = 1`` for the scalar losses, ``K`` classes for ``softmax``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np


class Loss(NamedTuple):
    """``value(y, F) -> (n,)``; ``grad_hess(y, F) -> (g, h)`` each ``(n, K)``;
    ``base_score(y) -> (K,)``; ``link(F)``: predictions (probabilities, means);
    ``check(y)``: host-side label check that returns ``y`` as the array the loss wants."""

    name: str
    num_outputs: int
    value: Callable
    grad_hess: Callable
    base_score: Callable
    link: Callable
    check: Callable


def _labels(y, name="y") -> np.ndarray:
    y = np.asarray(y)
    if y.ndim != 1:
        raise ValueError(f"{name} must be 1-d (one label per sample), got shape {y.shape}")
    if y.dtype.kind not in "biuf":  # strings failed inside a comparison ufunc
        raise ValueError(
            f"{name} must hold numbers, got dtype {y.dtype} (encode the classes as 0..K-1; "
            "AICNBoostingClassifier takes any labels)"
        )
    if y.dtype.kind in "fc" and not np.all(np.isfinite(y)):
        raise ValueError(f"{name} contains NaN or infinite labels")
    return y


def _reject(y: np.ndarray, bad: np.ndarray, expected: str) -> None:
    """Raises naming the first label where ``bad`` holds, unless none does."""
    if np.any(bad):
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{expected}; y[{i}] = {y[i]!r}")


def logistic() -> Loss:
    """Binary log-loss on ``y in {0, 1}``: ``softplus(F) - y F``."""

    def check(y):
        y = _labels(y)
        _reject(y, ~np.isin(y, (0, 1)), "logistic loss needs labels in {0, 1}")
        return y.astype(np.float32)

    def value(y, F):
        return jax.nn.softplus(F[:, 0]) - y * F[:, 0]

    def grad_hess(y, F):
        p = jax.nn.sigmoid(F)
        return p - y[:, None], p * (1.0 - p)

    def base_score(y):
        mean = jnp.clip(jnp.mean(y), 1e-6, 1 - 1e-6)
        return jnp.log(mean / (1.0 - mean))[None]

    return Loss("logistic", 1, value, grad_hess, base_score, jax.nn.sigmoid, check)


def softmax(num_classes: int) -> Loss:
    """Multiclass log-loss on ``y in {0, ..., K-1}``; one tree per class per round, as
    XGBoost's ``multi:softprob``.

    The per-sample Hessian ``diag(p) - p p^T`` couples the classes, but the K trees are
    fitted independently, so each needs a diagonal metric that bounds it from above:
    ``h_k = 2 p_k (1 - p_k)``, the diagonal plus the absolute off-diagonal row sum
    (Gershgorin; tight at two classes of equal probability), which is XGBoost's choice.
    The diagonal alone, ``p_k (1 - p_k)``, can undershoot the curvature along the joint
    step by up to half, and steps twice as far."""
    if int(num_classes) < 2:
        raise ValueError(f"num_classes must be >= 2, got {num_classes}")
    K = int(num_classes)

    def check(y):
        y = _labels(y)
        if y.dtype.kind == "f" and np.any(y != np.round(y)):
            raise ValueError("softmax loss needs integer class labels")
        _reject(y, (y < 0) | (y >= K), f"softmax loss with {K} classes needs labels in [0, {K})")
        return y.astype(np.int32)

    def value(y, F):
        return jax.nn.logsumexp(F, axis=1) - jnp.take_along_axis(F, y[:, None], axis=1)[:, 0]

    def grad_hess(y, F):
        p = jax.nn.softmax(F, axis=1)
        # the Gershgorin diagonal bound of diag(p) - p p^T (see the docstring)
        return p - jax.nn.one_hot(y, K, dtype=F.dtype), 2.0 * p * (1.0 - p)

    def base_score(y):
        counts = jnp.bincount(y, length=K).astype(jnp.float32) + 1.0
        logp = jnp.log(counts / jnp.sum(counts))
        return logp - jnp.mean(logp)

    return Loss(
        "softmax", K, value, grad_hess, base_score, lambda F: jax.nn.softmax(F, axis=1), check
    )


def squared() -> Loss:
    """``(y - F)^2 / 2``."""

    def check(y):
        return _labels(y).astype(np.float32)

    def value(y, F):
        return 0.5 * (y - F[:, 0]) ** 2

    def grad_hess(y, F):
        return F - y[:, None], jnp.ones_like(F)

    return Loss("squared", 1, value, grad_hess, lambda y: jnp.mean(y)[None], lambda F: F, check)


def poisson() -> Loss:
    """Poisson deviance in the log link, ``exp(F) - y F``, on ``y >= 0``."""

    def check(y):
        y = _labels(y).astype(np.float32)
        _reject(y, y < 0, "poisson loss needs y >= 0")
        return y

    def value(y, F):
        return jnp.exp(F[:, 0]) - y * F[:, 0]

    def grad_hess(y, F):
        mu = jnp.exp(F)
        return mu - y[:, None], mu

    def base_score(y):
        return jnp.log(jnp.maximum(jnp.mean(y), 1e-6))[None]

    return Loss("poisson", 1, value, grad_hess, base_score, jnp.exp, check)


def custom(loss_fn: Callable, name: str = "custom") -> Loss:
    """Any scalar per-sample loss ``loss_fn(y_i, F_i)`` (``F_i`` a scalar); gradient and
    Hessian by autodiff. Starts from ``F = 0``."""
    if not callable(loss_fn):
        raise TypeError(f"loss_fn must be callable, got {type(loss_fn).__name__}")
    first = jax.grad(loss_fn, argnums=1)
    second = jax.grad(first, argnums=1)

    def check(y):
        return _labels(y).astype(np.float32)

    def value(y, F):
        return jax.vmap(loss_fn)(y, F[:, 0])

    def grad_hess(y, F):
        f = F[:, 0]
        return jax.vmap(first)(y, f)[:, None], jax.vmap(second)(y, f)[:, None]

    return Loss(name, 1, value, grad_hess, lambda y: jnp.zeros(1), lambda F: F, check)


LOSSES = ("logistic", "softmax", "squared", "poisson")


def get_loss(loss: str | Loss, num_classes: int | None = None) -> Loss:
    """A :class:`Loss` from its name (``softmax`` needs ``num_classes``) or as given. Named
    losses are built once, so fits with equal configs share their compiled programs."""
    if isinstance(loss, Loss):
        return loss
    if loss not in LOSSES:
        raise ValueError(f"loss must be one of {LOSSES} or a Loss, got {loss!r}")
    if loss == "softmax":
        if num_classes is None:
            raise ValueError("loss='softmax' needs num_classes")
        return _named(loss, int(num_classes))
    return _named(loss, None)


@functools.cache
def _named(name: str, num_classes: int | None) -> Loss:
    if name == "softmax":
        return softmax(num_classes)
    return {"logistic": logistic, "squared": squared, "poisson": poisson}[name]()
