"""scikit-learn style estimators over :func:`fit_boosting` (needs scikit-learn, which the
``bench`` extra installs).

``AICNBoostingClassifier`` picks the logistic loss for two classes and softmax for more;
``AICNBoostingRegressor`` takes ``loss="squared"`` or ``"poisson"``. Both default to the
weak-AICN step; ``step`` selects any rule of :mod:`.steps`. Early stopping: with
``early_stopping_rounds=k`` the fit scores a validation set (``eval_set`` given to ``fit``,
else a ``validation_fraction`` split of the training data) every round, and the model
keeps the rounds up to the best one, where ``k`` later rounds brought no improvement. The
fit itself runs all ``rounds`` in one compiled scan; only the kept rounds predict (the
coordinate learner keeps one weight matrix, not one per round, so it is fitted again for the
kept rounds, which repeat the first ones exactly: the rounds draw nothing at random). A fit
that raises leaves the estimator as it was; one stopped by a numerical error warns.
``random_state``: an int seeds the fit (row subsampling, the validation split); ``None`` or
a ``numpy.random.RandomState`` draws the seed, as in scikit-learn.

``aicn_L`` (the AICN constant, default 0.1) is in the loss's units, so the weak-AICN step
depends on the scale of the loss (:class:`~jaxopt_suite.boosting.fit.BoostingConfig` has
the details): the step sees ``L sqrt(delta)``, and ``delta``, a sum over the rows, scales
with the loss. For the regressor's squared loss, a target scaled by ``c`` scales
``sqrt(delta)`` by ``c``: ``aicn_L / c`` gives ``c`` times the predictions, while the same
``aicn_L`` takes shorter steps the larger ``c`` is, and fits less in the same rounds.
Standardising the target keeps the default meaningful.
"""

from __future__ import annotations

import contextlib
import dataclasses
import numbers
import warnings

import jax
import jax.numpy as jnp
import numpy as np

try:
    from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
    from sklearn.model_selection import train_test_split
    from sklearn.utils.multiclass import check_classification_targets
    from sklearn.utils.validation import check_is_fitted, check_random_state, validate_data
except ImportError as error:  # pragma: no cover - exercised only without scikit-learn
    raise ImportError(
        "jaxopt_suite.boosting.estimators needs scikit-learn: pip install 'jaxopt_suite[bench]'"
    ) from error

from jaxopt_suite._checks import check_real
from jaxopt_suite.boosting.binning import apply_bins
from jaxopt_suite.boosting.fit import (
    BoostingConfig,
    FitStatus,
    eval_pair,
    fit_boosting,
    predict_raw,
)
from jaxopt_suite.boosting.losses import get_loss
from jaxopt_suite.boosting.trees import tree_predict


def best_round(eval_loss: np.ndarray, patience: int) -> int:
    """The round kept by early stopping: the best round (lowest validation loss, the first
    of equals) before ``patience`` rounds in a row bring no lower loss, or before the end."""
    best, best_value = 0, np.inf
    for r, value in enumerate(eval_loss):
        if value < best_value:
            best, best_value = r, value
        elif r - best >= patience:
            break
    return best


class _Boosting(BaseEstimator):
    def __init__(
        self,
        rounds=100,
        step="aicn",
        learner="tree",
        depth=3,
        max_bins=256,
        eta=1.0,
        l2=1.0,
        min_child_weight=1.0,
        min_split_gain=0.0,
        aicn_L=0.1,
        grn_M=0.1,
        subsample=1.0,
        early_stopping_rounds=None,
        validation_fraction=0.1,
        random_state=0,
    ):
        self.rounds = rounds
        self.step = step
        self.learner = learner
        self.depth = depth
        self.max_bins = max_bins
        self.eta = eta
        self.l2 = l2
        self.min_child_weight = min_child_weight
        self.min_split_gain = min_split_gain
        self.aicn_L = aicn_L
        self.grn_M = grn_M
        self.subsample = subsample
        self.early_stopping_rounds = early_stopping_rounds
        self.validation_fraction = validation_fraction
        self.random_state = random_state

    def _config(self, loss, num_classes=None) -> BoostingConfig:
        return BoostingConfig(
            loss=loss,
            num_classes=num_classes,
            rounds=self.rounds,
            step=self.step,
            learner=self.learner,
            depth=self.depth,
            max_bins=self.max_bins,
            eta=self.eta,
            l2=self.l2,
            min_child_weight=self.min_child_weight,
            min_split_gain=self.min_split_gain,
            aicn_L=self.aicn_L,
            grn_M=self.grn_M,
            subsample=self.subsample,
        )

    @contextlib.contextmanager
    def _unchanged_on_error(self):
        """Restores every attribute if the block raises, so a failed refit cannot leave the
        labels or feature count of the new data beside the model of the old."""
        saved = dict(self.__dict__)
        try:
            yield
        except BaseException:
            self.__dict__.clear()
            self.__dict__.update(saved)
            raise

    def _check_early_stopping(self) -> None:
        patience = self.early_stopping_rounds
        if patience is None:
            return
        if isinstance(patience, bool) or not isinstance(patience, numbers.Integral) or patience < 1:
            raise ValueError(
                f"early_stopping_rounds must be None or a positive int, got {patience!r}"
            )
        check_real(
            "validation_fraction", self.validation_fraction, "lie in (0, 1)",
            lambda v: 0.0 < v < 1.0,
        )  # fmt: skip

    def _seed(self) -> int:
        """An int ``random_state`` is the seed; ``None`` or a ``RandomState`` draws one,
        as in scikit-learn."""
        state = self.random_state
        if isinstance(state, numbers.Integral) and not isinstance(state, bool):
            return int(state)
        if state is None or isinstance(state, np.random.RandomState):
            return int(check_random_state(state).randint(np.iinfo(np.int32).max))
        raise ValueError(f"random_state must be None, an int or a RandomState, got {state!r}")

    def _fit(self, X, y, config, eval_set, stratify=None):
        seed = self._seed()
        config = config.checked()
        if self.early_stopping_rounds is not None and eval_set is None:
            X, X_val, y, y_val = train_test_split(
                X,
                y,
                test_size=self.validation_fraction,
                random_state=seed,
                stratify=stratify,
            )
            eval_set = (X_val, y_val)
        result = fit_boosting(X, y, config, jax.random.key(seed), eval_set=eval_set)
        if int(result.status) != FitStatus.OK:
            warnings.warn(
                "the fit stopped early: the score or the loss became non-finite (lower eta, "
                "or raise l2 or min_child_weight); the model keeps the rounds before it",
                RuntimeWarning,
                stacklevel=3,
            )
        self.result_ = result
        self.model_ = result.model
        self.train_loss_ = np.asarray(result.train_loss)
        self.eval_loss_ = np.asarray(result.eval_loss)
        if self.early_stopping_rounds is not None:
            self.best_round_ = best_round(self.eval_loss_, int(self.early_stopping_rounds))
        else:
            self.best_round_ = int(config.rounds) - 1
        if self.best_round_ < int(config.rounds) - 1:
            if self.model_.weights is not None:
                kept = dataclasses.replace(config, rounds=self.best_round_ + 1)
                self.model_ = fit_boosting(X, y, kept, jax.random.key(seed)).model
            else:  # the kept rounds only, so predict_raw(model_, X) is the estimator's score
                trees = jax.tree.map(lambda a: a[: self.best_round_ + 1], self.model_.trees)
                self.model_ = self.model_._replace(trees=trees)
        return self

    def _raw(self, X, rounds=None):
        check_is_fitted(self, "model_")
        X = validate_data(self, X, reset=False, dtype=np.float64)
        if self.model_.weights is not None:
            return np.asarray(predict_raw(self.model_, X))
        return np.asarray(
            predict_raw(self.model_, X, self.best_round_ + 1 if rounds is None else rounds)
        )

    def _staged_raw(self, X):
        """Raw scores after each kept round, one array per round (the coordinate learner's
        after the last kept round only)."""
        check_is_fitted(self, "model_")
        if self.model_.weights is not None:
            yield self._raw(X)
            return
        X = validate_data(self, X, reset=False, dtype=np.float64)
        bins = apply_bins(self.model_.bins, X)
        kept = jax.tree.map(lambda a: a[: self.best_round_ + 1], self.model_.trees)
        per_round = jax.vmap(jax.vmap(lambda t: tree_predict(t, bins)))(kept)  # (R, K, n)
        F = jnp.broadcast_to(self.model_.base, (bins.shape[0], self.model_.base.shape[0]))
        for contribution in per_round:
            F = F + contribution.T
            yield np.asarray(F)


class AICNBoostingClassifier(ClassifierMixin, _Boosting):
    """Binary (logistic) or multiclass (softmax) boosting; labels may be any values."""

    def fit(self, X, y, eval_set=None):
        with self._unchanged_on_error():
            return self._fit_classifier(X, y, eval_set)

    def _fit_classifier(self, X, y, eval_set):
        self._check_early_stopping()
        X, y = validate_data(self, X, y, dtype=np.float64)
        check_classification_targets(y)
        self.classes_, encoded = np.unique(y, return_inverse=True)
        K = len(self.classes_)
        if K < 2:
            raise ValueError(f"y has only {K} class; a classifier needs at least 2")
        config = self._config("logistic" if K == 2 else "softmax", None if K == 2 else K)
        if eval_set is not None:
            X_val, y_val = eval_pair(eval_set)
            unknown = ~np.isin(np.asarray(y_val), self.classes_)
            if np.any(unknown):
                raise ValueError(f"eval_set has labels not in y: {np.asarray(y_val)[unknown][:3]}")
            eval_set = (X_val, np.searchsorted(self.classes_, np.asarray(y_val)))
        return self._fit(X, encoded, config, eval_set, stratify=encoded)

    def _probabilities(self, F):
        if len(self.classes_) == 2:
            p = np.asarray(jax.nn.sigmoid(F[:, 0]), np.float64)
            return np.c_[1.0 - p, p]
        return np.asarray(jax.nn.softmax(F, axis=1), np.float64)

    def predict_proba(self, X):
        return self._probabilities(self._raw(X))

    def predict(self, X):
        proba = self.predict_proba(X)
        return self.classes_[np.argmax(proba, axis=1)]

    def staged_predict_proba(self, X):
        for F in self._staged_raw(X):
            yield self._probabilities(F)

    def staged_predict(self, X):
        for p in self.staged_predict_proba(X):
            yield self.classes_[np.argmax(p, axis=1)]


class AICNBoostingRegressor(RegressorMixin, _Boosting):
    """Regression with ``loss="squared"`` or ``"poisson"`` (log link). With the default
    weak-AICN step, ``aicn_L`` is in the loss's units: for the squared loss, a target
    scaled by ``c`` needs ``aicn_L / c`` for the same fit; standardise the target to keep
    the default meaningful (see the module docstring)."""

    def __init__(
        self,
        loss="squared",
        rounds=100,
        step="aicn",
        learner="tree",
        depth=3,
        max_bins=256,
        eta=1.0,
        l2=1.0,
        min_child_weight=1.0,
        min_split_gain=0.0,
        aicn_L=0.1,
        grn_M=0.1,
        subsample=1.0,
        early_stopping_rounds=None,
        validation_fraction=0.1,
        random_state=0,
    ):
        # scikit-learn reads the parameters from this signature, so it lists them all
        super().__init__(
            rounds=rounds,
            step=step,
            learner=learner,
            depth=depth,
            max_bins=max_bins,
            eta=eta,
            l2=l2,
            min_child_weight=min_child_weight,
            min_split_gain=min_split_gain,
            aicn_L=aicn_L,
            grn_M=grn_M,
            subsample=subsample,
            early_stopping_rounds=early_stopping_rounds,
            validation_fraction=validation_fraction,
            random_state=random_state,
        )
        self.loss = loss

    def fit(self, X, y, eval_set=None):
        if self.loss not in ("squared", "poisson"):
            raise ValueError(f"loss must be 'squared' or 'poisson', got {self.loss!r}")
        with self._unchanged_on_error():
            self._check_early_stopping()
            X, y = validate_data(self, X, y, dtype=np.float64, y_numeric=True)
            self.loss_ = self.loss  # predictions use the fitted loss's link, not a later one
            return self._fit(X, y, self._config(self.loss), eval_set)

    def predict(self, X):
        check_is_fitted(self, "model_")
        return np.asarray(get_loss(self.loss_).link(self._raw(X))[:, 0], np.float64)

    def staged_predict(self, X):
        check_is_fitted(self, "model_")
        link = get_loss(self.loss_).link
        for F in self._staged_raw(X):
            yield np.asarray(link(F)[:, 0], np.float64)
