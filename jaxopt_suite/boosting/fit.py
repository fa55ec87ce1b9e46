"""``fit_boosting``: the functional core. The whole fit is one jitted ``lax.scan`` over
rounds; each round computes ``g, h`` at the current score, fits the weak learner(s) (one
tree per output, or a coordinate of a linear model), and moves by the step rule of
:mod:`.steps`.

Learners: ``tree`` (depth ``depth``), ``stump`` (depth 1), ``coordinate`` (a linear model
``F = X w + b``; per round the coordinate of largest decrement, ``greedy``, the next one,
``cyclic``, or every coordinate at once with its own Newton step, ``all``). With
``coordinate`` the objective is ``sum_i l(y_i, F_i) + (l2/2) ||w||^2`` (intercept free).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxopt_suite._checks import check_integer, check_key, check_settings
from jaxopt_suite.boosting import steps as step_rules
from jaxopt_suite.boosting.binning import BinEdges, apply_bins, check_features, fit_bins
from jaxopt_suite.boosting.losses import Loss, get_loss
from jaxopt_suite.boosting.trees import (
    HISTOGRAMS,
    Tree,
    grow_tree,
    resolve_histogram,
    tree_predict,
)

LEARNERS = ("tree", "stump", "coordinate")
SELECTIONS = ("greedy", "cyclic", "all")


class FitStatus(enum.IntEnum):
    OK = 0
    NUMERICAL_ERROR = 1  # the score or the loss became non-finite; that round and later
    # ones were not applied


@dataclasses.dataclass(frozen=True)
class BoostingConfig:
    """What to fit. ``loss``: a name of :data:`losses.LOSSES` or a :class:`Loss`
    (``softmax`` needs ``num_classes``). ``step``: one of :data:`steps.STEPS`;
    ``newton_cd`` implies ``learner="coordinate"``. ``l2`` is XGBoost's ``lambda`` (and the
    Hessian floor of ``aicn``); ``grn_M`` the GRN constant; ``subsample`` the fraction of
    rows each round sees (drawn from ``key``).
    ``min_split_gain`` is compared with the split gain
    ``1/2 [G_L^2/(H_L+l2) + G_R^2/(H_R+l2) - G^2/(H+l2)]`` (Chen & Guestrin's eq. 7), half
    the gain XGBoost's ``gamma`` and LightGBM's ``min_split_gain`` are compared with (they
    drop the 1/2): to match their ``gamma``, set ``min_split_gain = gamma / 2``.

    ``aicn_L`` is the AICN constant, in the loss's units (``1 / sqrt(loss)``): the step
    ``alpha = 2 / (1 + sqrt(1 + 2 L G))`` (:mod:`.steps`) sees the loss only through
    ``L G``, where ``G = sqrt(delta)``, the Newton decrement of the summed loss
    ``sum_i l(y_i, F_i)`` along the learner, is in the units of the loss's square root.
    Scaling the loss by ``s`` (``l2``, ``min_child_weight`` and ``min_split_gain`` scaled by
    ``s`` as well, which leaves the trees and ``t*`` as they were) multiplies ``G`` by
    ``sqrt(s)``: the fit is unchanged with ``aicn_L / sqrt(s)``, and not with ``aicn_L``.
    So one ``L`` does not serve the sum and the mean of the same losses (``s = 1/n``: the
    mean calls for ``L sqrt(n)``), nor a data set and its copy repeated ``k`` times.
    Exact AICN is invariant to rescaling the objective (its semi-strong self-concordance
    constant becomes ``L / sqrt(s)`` by itself); a fixed ``aicn_L`` is not. For the squared
    loss, a target scaled by ``c`` scales ``g`` and ``G`` by ``c`` (``h = 1``): with
    ``aicn_L / c`` (and ``min_split_gain c^2``, ``l2`` and ``min_child_weight`` as they
    were) the predictions are ``c`` times those for the target; with ``aicn_L`` as it was,
    ``alpha`` falls as ``c`` grows (as ``1 / sqrt(c)`` once ``L G >> 1``). Standardising
    the target keeps the default ``aicn_L`` meaningful."""

    loss: Any = "logistic"
    num_classes: int | None = None
    rounds: int = 100
    step: str = "aicn"
    learner: str = "tree"
    depth: int = 3
    max_bins: int = 256
    eta: float = 1.0
    l2: float = 1.0
    min_child_weight: float = 1.0
    min_split_gain: float = 0.0
    aicn_L: float = 0.1
    grn_M: float = 0.1
    subsample: float = 1.0
    selection: str = "greedy"
    histogram: str = "auto"  # trees.HISTOGRAMS: the native CPU kernel where it builds

    def checked(self) -> BoostingConfig:
        """Validated copy (errors name the field); ``newton_cd`` resolved."""
        if self.step not in step_rules.STEPS:
            raise ValueError(f"step must be one of {step_rules.STEPS}, got {self.step!r}")
        if self.learner not in LEARNERS:
            raise ValueError(f"learner must be one of {LEARNERS}, got {self.learner!r}")
        if self.histogram not in HISTOGRAMS:
            raise ValueError(f"histogram must be one of {HISTOGRAMS}, got {self.histogram!r}")
        if self.selection not in SELECTIONS:
            raise ValueError(f"selection must be one of {SELECTIONS}, got {self.selection!r}")
        # integers (not bools) >= 1, finite numbers: an infinite l2, L or M learned nothing
        # without a word, an infinite eta ended in NUMERICAL_ERROR; one number each (an
        # array or a list failed later in float() with a TypeError naming no field)
        check_settings(
            self,
            integers=("rounds", "depth", "max_bins"),
            positive=("eta", "aicn_L", "grn_M"),
            nonnegative=("l2", "min_child_weight", "min_split_gain"),
            unit=("subsample",),
            scalar=True,
        )
        if self.depth > 16:
            raise ValueError(f"depth must be <= 16 (2^depth leaves), got {self.depth}")
        if self.max_bins < 2:
            raise ValueError(f"max_bins must be >= 2, got {self.max_bins}")
        coordinate = self.learner == "coordinate" or self.step == "newton_cd"
        if coordinate and float(self.subsample) < 1.0:
            raise ValueError(
                f"subsample={self.subsample!r} needs a tree learner: the coordinate learner "
                "sees every row in every round"
            )
        if self.step == "aicn" and float(self.l2) == 0.0 and self.learner != "coordinate":
            raise ValueError(
                "step='aicn' needs l2 > 0: the Hessian floor keeps logistic loss from "
                "diverging on leaves with tiny Hessian sums"
            )
        out = self
        if self.step == "newton_cd":
            out = dataclasses.replace(out, learner="coordinate")
        if out.learner == "stump":
            out = dataclasses.replace(out, learner="tree", depth=1)
        if self.num_classes is not None:
            check_integer("num_classes", self.num_classes, 2)  # int(2.5) fitted 2 classes
            if isinstance(self.loss, Loss):
                # a Loss object fits its own outputs: a disagreeing count was ignored
                if self.num_classes != self.loss.num_outputs:
                    raise ValueError(
                        f"num_classes={self.num_classes!r} disagrees with the Loss "
                        f"{self.loss.name!r}, whose num_outputs is {self.loss.num_outputs} "
                        "(leave num_classes None)"
                    )
            elif self.loss != "softmax":
                raise ValueError(
                    f"num_classes={self.num_classes!r} is for loss='softmax'; loss="
                    f"{self.loss!r} has its own number of outputs (leave num_classes None)"
                )
        get_loss(out.loss, out.num_classes)  # raises on a bad loss
        return out

    def hyper(self) -> dict:
        """The tunable numbers, passed as traced leaves (no recompile when they change)."""
        names = ("eta", "l2", "min_child_weight", "min_split_gain", "aicn_L", "grn_M", "subsample")
        return {k: jnp.asarray(float(getattr(self, k)), jnp.float32) for k in names}


def eval_pair(eval_set) -> tuple:
    """``eval_set`` as ``(X, y)``; a ValueError unless it is a pair (it failed on an index)."""
    if not isinstance(eval_set, tuple | list) or len(eval_set) != 2:
        raise ValueError(f"eval_set must be a pair (X, y), got {type(eval_set).__name__}")
    return tuple(eval_set)


def _float32(X: np.ndarray, name: str) -> jax.Array:
    """``X`` in float32, the coordinate learner's precision; a ValueError naming the first
    column whose finite values overflow it (they became inf and the fit NaN)."""
    with np.errstate(over="ignore"):
        narrow = np.asarray(X, np.float32)
    overflow = np.isinf(narrow) & np.isfinite(X)
    if np.any(overflow):
        column = int(np.flatnonzero(overflow.any(axis=0))[0])
        raise ValueError(
            f"{name}[:, {column}] holds values beyond float32's range (|x| > 3.4e38), which "
            "the coordinate learner computes in: rescale that feature"
        )
    return jnp.asarray(narrow)


class BoostingModel(NamedTuple):
    """A fitted ensemble: ``base (K,)`` plus, for trees, ``trees`` with leading axes
    ``(rounds, K)`` and leaf values already scaled by each round's step; for the
    coordinate learner, ``weights (d, K)`` and ``intercept (K,)`` instead."""

    base: jax.Array
    trees: Tree | None
    weights: jax.Array | None
    bins: BinEdges | None


class BoostingResult(NamedTuple):
    """``train_loss[r]``: mean loss after round ``r`` (with the ``l2`` term for the
    coordinate learner, ``l2 |W|^2 / (2 n)`` over the ``n`` training rows); ``eval_loss`` the
    mean loss on ``eval_set``, without the ``l2`` term (NaN without an eval set);
    ``delta``, ``t_star``, ``alpha``, ``step``: the step rule's trace per round."""

    model: BoostingModel
    train_loss: jax.Array  # (rounds,)
    eval_loss: jax.Array  # (rounds,)
    delta: jax.Array  # (rounds,)
    t_star: jax.Array  # (rounds,)
    alpha: jax.Array  # (rounds,)
    step: jax.Array  # (rounds,)
    status: jax.Array  # () int32, FitStatus


def _round_update(F, move, failed, loss_of, last_loss):
    """Applies ``move`` unless it makes the score or its loss ``loss_of(score)``
    non-finite (then freezes the fit: a finite score of 130 under the Poisson loss
    overflowed exp and went on as OK); returns the score, the flag and the score's loss."""
    new = F + move
    new_loss = loss_of(new)
    finite = jnp.all(jnp.isfinite(new)) & jnp.isfinite(new_loss) & ~failed
    return jnp.where(finite, new, F), failed | ~finite, jnp.where(finite, new_loss, last_loss)


@functools.partial(
    jax.jit,
    static_argnames=("loss", "rounds", "rule", "depth", "num_bins", "sampled", "histogram"),
)
def _fit_trees(
    bins,
    y,
    eval_bins,
    eval_y,
    key,
    hyper,
    *,
    loss,
    rounds,
    rule,
    depth,
    num_bins,
    sampled,
    histogram,
):
    K = loss.num_outputs
    n = bins.shape[0]
    base = loss.base_score(y)
    F0 = jnp.broadcast_to(base, (n, K)).astype(jnp.float32)
    E0 = jnp.broadcast_to(base, (eval_bins.shape[0], K)).astype(jnp.float32)

    def train_loss(F):
        return jnp.mean(loss.value(y, F))

    def round_(carry, round_key):
        F, E, failed, last_loss = carry
        g, h = loss.grad_hess(y, F)
        if sampled:  # whether rows are drawn is static, the fraction is not
            keep = jax.random.bernoulli(round_key, hyper["subsample"], (n, 1)).astype(F.dtype)
            g, h = g * keep, h * keep
        l2 = hyper["l2"]
        if rule == "grn":
            l2 = step_rules.grn_l2(l2, g, hyper["grn_M"])
        grow = functools.partial(
            grow_tree,
            depth=depth,
            num_bins=num_bins,
            l2=l2,
            min_child_weight=hyper["min_child_weight"],
            min_split_gain=hyper["min_split_gain"],
            histogram=histogram,
        )
        fit = jax.vmap(lambda gk, hk: grow(bins, gk, hk), in_axes=(1, 1))(g, h)
        w = fit.tree.value  # (K, leaves)
        grad_dot = jnp.sum(fit.grad_sum * w)
        curvature = jnp.sum((fit.hess_sum + l2) * w * w)
        scale, t_star, delta, alpha = step_rules.step_size(
            rule, hyper["eta"], grad_dot, curvature, hyper["aicn_L"]
        )
        d = jnp.take_along_axis(w, fit.leaf, axis=1).T  # (n, K)
        F, failed, last_loss = _round_update(F, scale * d, failed, train_loss, last_loss)
        # zero the whole product: a failed round's leaves may be NaN, and 0 * NaN is NaN
        tree = fit.tree._replace(value=jnp.where(failed, 0.0, scale * w))
        E = E + jax.vmap(lambda t: tree_predict(t, eval_bins))(tree).T
        trace = (
            last_loss,
            jnp.mean(loss.value(eval_y, E)) if eval_y.shape[0] else jnp.nan,
            delta,
            t_star,
            alpha,
            jnp.where(failed, 0.0, scale),
        )
        return (F, E, failed, last_loss), (tree, trace)

    keys = jax.random.split(key, rounds)
    start = (F0, E0, jnp.zeros((), bool), train_loss(F0))
    (_, _, failed, _), (trees, trace) = jax.lax.scan(round_, start, keys)
    return base, trees, trace, failed


@functools.partial(jax.jit, static_argnames=("loss", "rounds", "rule", "selection"))
def _fit_coordinates(X, y, eval_X, eval_y, hyper, *, loss, rounds, rule, selection):
    K = loss.num_outputs
    n, d = X.shape
    Xa = jnp.concatenate([X, jnp.ones((n, 1), X.dtype)], axis=1)  # intercept last
    Ea = jnp.concatenate([eval_X, jnp.ones((eval_X.shape[0], 1), X.dtype)], axis=1)
    penalised = (jnp.arange(d + 1) < d).astype(X.dtype)[:, None]  # intercept unpenalised
    l2 = hyper["l2"]
    W0 = jnp.zeros((d + 1, K), X.dtype).at[d].set(loss.base_score(y))

    def objective(W):
        """The training objective: mean loss plus the l2 term over the training rows."""
        penalty = 0.5 * l2 * jnp.sum(penalised * W * W) / n
        return jnp.mean(loss.value(y, Xa @ W)) + penalty

    def round_(carry, r):
        W, failed, last_loss = carry
        F = Xa @ W
        g, h = loss.grad_hess(y, F)
        reg = l2 * penalised
        if rule == "grn":
            reg = reg + step_rules.grn_l2(0.0, g, hyper["grn_M"])
        grad = Xa.T @ g + l2 * penalised * W  # (d + 1, K)
        hess = (Xa * Xa).T @ h + reg
        newton = -grad / jnp.where(hess > 0, hess, 1.0)
        if selection == "all":
            mask = jnp.ones((d + 1, 1), X.dtype)
        else:
            if selection == "greedy":
                j = jnp.argmax(jnp.sum(grad * grad / jnp.where(hess > 0, hess, 1.0), axis=1))
            else:
                j = r % (d + 1)
            mask = (jnp.arange(d + 1) == j).astype(X.dtype)[:, None]
        dW = mask * newton
        D = Xa @ dW  # (n, K)
        grad_dot = jnp.sum(grad * dW)
        curvature = jnp.sum(h * D * D) + jnp.sum(reg * dW * dW)
        scale, t_star, delta, alpha = step_rules.step_size(
            rule, hyper["eta"], grad_dot, curvature, hyper["aicn_L"]
        )
        W, failed, last_loss = _round_update(W, scale * dW, failed, objective, last_loss)
        trace = (
            last_loss,
            # the held-out mean loss alone: a property of the model, not of the eval set's size
            jnp.mean(loss.value(eval_y, Ea @ W)) if eval_y.shape[0] else jnp.nan,
            delta,
            t_star,
            alpha,
            jnp.where(failed, 0.0, scale),
        )
        return (W, failed, last_loss), trace

    start = (W0, jnp.zeros((), bool), objective(W0))
    (W, failed, _), trace = jax.lax.scan(round_, start, jnp.arange(rounds))
    return W, trace, failed


def fit_boosting(
    X, y, config: BoostingConfig, key, *, eval_set: tuple[Any, Any] | None = None
) -> BoostingResult:
    """Fits ``config`` to ``(X, y)`` (see the module docstring); ``eval_set=(X, y)`` is
    scored after every round."""
    check_key(key)
    config = config.checked()
    loss = get_loss(config.loss, config.num_classes)
    X = check_features(X)
    y = loss.check(y)
    if y.shape[0] != X.shape[0]:
        raise ValueError(f"X has {X.shape[0]} samples but y has {y.shape[0]} labels")
    if eval_set is None:
        eval_X, eval_y = X[:0], y[:0]
    else:
        eval_X, eval_y = eval_pair(eval_set)
        eval_X = check_features(eval_X, "eval_set X")
        try:
            eval_y = loss.check(eval_y)
        except ValueError as err:  # the loss's message names y: these are eval_set's
            raise ValueError(f"eval_set y: {err}") from None
        if eval_X.shape[1] != X.shape[1] or eval_X.shape[0] != eval_y.shape[0]:
            raise ValueError(
                f"eval_set must be (X[m, {X.shape[1]}], y[m]), got {eval_X.shape} and "
                f"{eval_y.shape}"
            )
    hyper = config.hyper()
    if config.learner == "coordinate":
        W, trace, failed = _fit_coordinates(
            _float32(X, "X"),
            jnp.asarray(y),
            _float32(eval_X, "eval_set X"),
            jnp.asarray(eval_y),
            hyper,
            loss=loss,
            rounds=int(config.rounds),
            rule=config.step,
            selection=config.selection,
        )
        model = BoostingModel(base=W[-1], trees=None, weights=W[:-1], bins=None)
    else:
        edges = fit_bins(X, config.max_bins)
        base, trees, trace, failed = _fit_trees(
            apply_bins(edges, X),
            jnp.asarray(y),
            apply_bins(edges, eval_X) if eval_X.shape[0] else jnp.zeros((0, X.shape[1]), jnp.int32),
            jnp.asarray(eval_y),
            key,
            hyper,
            loss=loss,
            rounds=int(config.rounds),
            rule=config.step,
            depth=int(config.depth),
            num_bins=edges.num_bins,
            sampled=float(config.subsample) < 1.0,
            histogram=resolve_histogram(config.histogram),
        )
        model = BoostingModel(base=base, trees=trees, weights=None, bins=edges)
    train_loss, eval_loss, delta, t_star, alpha, step = trace
    status = jnp.where(failed, FitStatus.NUMERICAL_ERROR, FitStatus.OK).astype(jnp.int32)
    return BoostingResult(model, train_loss, eval_loss, delta, t_star, alpha, step, status)


def predict_raw(model: BoostingModel, X, rounds: int | None = None) -> jax.Array:
    """The raw score ``F (n, K)`` of ``model`` at ``X``, from its first ``rounds`` rounds
    (all by default). A coordinate learner's model keeps only its final weights, so it takes
    ``rounds=None`` alone (fit it with fewer rounds for an earlier one: its rounds draw
    nothing at random)."""
    X = check_features(X)
    if model.weights is not None:
        if rounds is not None:
            raise ValueError(
                f"rounds must be None for a coordinate learner's model, which keeps only its "
                f"final weights, got {rounds!r}; fit with rounds={rounds!r} instead"
            )
        if X.shape[1] != model.weights.shape[0]:
            raise ValueError(f"X has {X.shape[1]} features, the model {model.weights.shape[0]}")
        return _float32(X, "X") @ model.weights + model.base[None, :]
    total = model.trees.value.shape[0]
    rounds = total if rounds is None else check_integer("rounds", rounds, 0)  # 2.7 was 2
    if rounds > total:
        raise ValueError(f"rounds must lie in [0, {total}], got {rounds}")
    bins = apply_bins(model.bins, X)
    return _predict_trees(model.trees, bins, model.base, jnp.asarray(rounds, jnp.int32))


@jax.jit
def _predict_trees(trees: Tree, bins, base, rounds: jax.Array):
    """The first ``rounds`` trees' sum; ``rounds`` is traced, so predicting round by round
    compiles once (the later trees add exact zeros)."""

    def add(F, tree_and_round):
        tree, r = tree_and_round
        contribution = jax.vmap(lambda t: tree_predict(t, bins))(tree).T
        return F + jnp.where(r < rounds, contribution, 0.0), None

    F0 = jnp.broadcast_to(base, (bins.shape[0], base.shape[0])).astype(jnp.float32)
    total = trees.value.shape[0]
    return jax.lax.scan(add, F0, (trees, jnp.arange(total)))[0]
