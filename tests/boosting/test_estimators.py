"""The scikit-learn style estimators."""

import numpy as np
import pytest

pytest.importorskip("sklearn")

from sklearn.base import clone  # noqa: E402
from sklearn.utils.estimator_checks import parametrize_with_checks  # noqa: E402

from jaxopt_suite.boosting.estimators import (  # noqa: E402
    AICNBoostingClassifier,
    AICNBoostingRegressor,
    best_round,
)
from jaxopt_suite.datasets import load_breast_cancer, load_digits  # noqa: E402


def test_classifier_with_string_labels_and_staged_predictions():
    data = load_breast_cancer()
    names = np.array(["benign", "malignant"])
    clf = AICNBoostingClassifier(rounds=30).fit(data.x_train, names[data.y_train])
    assert list(clf.classes_) == ["benign", "malignant"]
    proba = clf.predict_proba(data.x_test)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=1e-6)
    assert clf.score(data.x_test, names[data.y_test]) >= 0.93
    staged = list(clf.staged_predict(data.x_test))
    assert len(staged) == 30
    np.testing.assert_array_equal(staged[-1], clf.predict(data.x_test))


def test_multiclass_early_stopping_keeps_the_best_round():
    data = load_digits()
    clf = AICNBoostingClassifier(rounds=60, early_stopping_rounds=5, random_state=1)
    clf.fit(data.x_train, data.y_train)
    assert clf.best_round_ == best_round(clf.eval_loss_, 5)
    assert clf.eval_loss_[clf.best_round_] == np.min(clf.eval_loss_[: clf.best_round_ + 6])
    assert clf.score(data.x_test, data.y_test) >= 0.9
    assert len(list(clf.staged_predict_proba(data.x_test))) == clf.best_round_ + 1


def _noise(n=300, d=40):
    rng = np.random.default_rng(0)
    return rng.normal(size=(n, d)), rng.integers(0, 2, n)


def test_tree_models_keep_only_the_rounds_up_to_the_best():
    # model_ held every round, so predict_raw(model_, X) disagreed with the estimator
    from jaxopt_suite.boosting import predict_raw

    X, y = _noise()
    clf = AICNBoostingClassifier(rounds=40, early_stopping_rounds=2).fit(X, y)
    assert clf.best_round_ < 39
    assert clf.model_.trees.value.shape[0] == clf.best_round_ + 1
    np.testing.assert_allclose(
        np.asarray(predict_raw(clf.model_, X))[:, 0], clf._raw(X)[:, 0], rtol=1e-6
    )


def test_regressor_predicts_with_the_loss_it_was_fitted_with():
    # predict read self.loss: after set_params(loss="squared") a Poisson model returned raw
    # log-scores
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3))
    y = rng.poisson(np.exp(0.5 * X[:, 0]) + 1.0)
    reg = AICNBoostingRegressor(loss="poisson", rounds=10).fit(X, y)
    before = reg.predict(X[:5])
    reg.set_params(loss="squared")
    np.testing.assert_array_equal(reg.predict(X[:5]), before)
    assert np.all(before > 0)
    with pytest.raises(ValueError, match=r"eval_set must be a pair \(X, y\)"):
        AICNBoostingClassifier(rounds=2).fit(X, (X[:, 0] > 0).astype(int), eval_set=X)


def test_coordinate_learner_early_stopping_keeps_the_best_round():
    # The coordinate learner keeps one weight matrix; with early stopping it must still
    # predict from the best round, not the last (on noise the validation loss rises).
    X, y = _noise()
    settings = dict(step="newton_cd", l2=1e-3)
    clf = AICNBoostingClassifier(rounds=60, early_stopping_rounds=5, **settings)
    clf.fit(X[:240], y[:240], eval_set=(X[240:], y[240:]))
    best = clf.best_round_
    assert best == best_round(clf.eval_loss_, 5) and best < 59
    assert clf.eval_loss_[best] < clf.eval_loss_[-1]
    kept = AICNBoostingClassifier(rounds=best + 1, **settings).fit(X[:240], y[:240])
    np.testing.assert_allclose(clf.predict_proba(X), kept.predict_proba(X), rtol=1e-6)
    full = AICNBoostingClassifier(rounds=60, **settings).fit(X[:240], y[:240])
    assert not np.allclose(clf.predict_proba(X), full.predict_proba(X))


def test_a_failed_refit_leaves_the_estimator_unchanged():
    X, y = _noise(120, 4)
    clf = AICNBoostingClassifier(rounds=5).fit(X, y)
    before = clf.predict_proba(X)
    with pytest.raises(ValueError, match="eta"):
        clf.set_params(eta=-1.0).fit(X[:, :3], np.where(y == 1, "yes", "no"))
    assert list(clf.classes_) == [0, 1] and clf.n_features_in_ == 4
    np.testing.assert_array_equal(clf.predict_proba(X), before)


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"early_stopping_rounds": 0}, "early_stopping_rounds must be None or a positive int"),
        ({"early_stopping_rounds": -3}, "early_stopping_rounds"),
        ({"early_stopping_rounds": 2.5}, "early_stopping_rounds"),
        (
            {"early_stopping_rounds": 3, "validation_fraction": 0.0},
            r"validation_fraction .*\(0, 1\)",
        ),
        ({"early_stopping_rounds": 3, "validation_fraction": 1.5}, "validation_fraction"),
    ],
)
def test_early_stopping_settings_are_checked(settings, message):
    X, y = _noise(60, 3)
    with pytest.raises(ValueError, match=message):
        AICNBoostingClassifier(rounds=3, **settings).fit(X, y)
    with pytest.raises(ValueError, match=message):
        AICNBoostingRegressor(rounds=3, **settings).fit(X, y.astype(float))


def test_best_round_rule():
    assert best_round(np.array([3.0, 2.0, 2.5, 2.6, 1.0]), 2) == 1
    assert best_round(np.array([3.0, 2.0, 2.5, 1.0]), 3) == 3
    assert best_round(np.array([1.0, 1.0, 1.0]), 1) == 0
    # patience never used up: the best round seen, not the last
    assert best_round(np.array([5.0, 4.0, 3.0, 3.5, 3.6]), 5) == 2


def test_random_state_and_failed_fits():
    X, y = _noise(60, 3)
    # a RandomState is taken as scikit-learn takes it (it crashed in int())
    model = AICNBoostingClassifier(rounds=2, subsample=0.5, random_state=np.random.RandomState(0))
    model.fit(X, y)
    with pytest.raises(ValueError, match="random_state must be None, an int or a RandomState"):
        AICNBoostingClassifier(rounds=2, random_state="seed").fit(X, y)
    # a fit that stops on a numerical error says so (its status was not read)
    counts = np.zeros(60)
    counts[0] = 1e6
    regressor = AICNBoostingRegressor(loss="poisson", step="newton", rounds=3, eta=2.0)
    with pytest.warns(RuntimeWarning, match="the fit stopped early"):
        regressor.fit(X, counts)
    assert np.all(np.isfinite(regressor.predict(X)))


@pytest.mark.parametrize("loss", ["squared", "poisson"])
def test_regressor(loss):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(2500, 4))
    mean = 10.0 * np.exp(0.4 * X[:, 0] + 0.2 * X[:, 1])  # counts large enough to learn from
    y = rng.poisson(mean) if loss == "poisson" else mean + 0.5 * rng.normal(size=2500)
    reg = AICNBoostingRegressor(loss=loss, rounds=20).fit(X[:2000], y[:2000])
    pred = reg.predict(X[2000:])
    assert np.corrcoef(pred, mean[2000:])[0, 1] > 0.9
    assert np.all(np.diff(reg.train_loss_) <= 1e-5)
    assert reg.get_params()["loss"] == loss
    assert clone(reg).set_params(rounds=3).get_params()["rounds"] == 3


@parametrize_with_checks(
    [AICNBoostingClassifier(rounds=5), AICNBoostingRegressor(rounds=5)],
)
def test_sklearn_checks(estimator, check):
    check(estimator)
