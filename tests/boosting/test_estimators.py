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


def test_best_round_rule():
    assert best_round(np.array([3.0, 2.0, 2.5, 2.6, 1.0]), 2) == 1
    assert best_round(np.array([3.0, 2.0, 2.5, 1.0]), 3) == 3
    assert best_round(np.array([1.0, 1.0, 1.0]), 1) == 0


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
