"""fit_boosting: step rules, losses, Newton coordinate descent, bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import minimize

from jaxopt_suite.boosting import (
    BoostingConfig,
    FitStatus,
    aicn_alpha,
    custom,
    fit_boosting,
    get_loss,
    predict_raw,
)
from jaxopt_suite.datasets import load_breast_cancer, load_digits


def test_aicn_alpha_is_the_closed_form_root():
    G = np.array([1e-8, 0.1, 1.0, 10.0, 1e4])
    for L in (0.1, 1.0, 3.0):
        alpha = np.asarray(aicn_alpha(jnp.asarray(G), L), np.float64)
        closed = (-1.0 + np.sqrt(1.0 + 2.0 * L * G)) / (L * G)
        np.testing.assert_allclose(alpha, closed, rtol=1e-5)
        # the minimiser of -a G^2 + a^2 G^2 / 2 + (L / 6) a^3 G^3: (L G / 2) a^2 + a - 1 = 0
        np.testing.assert_allclose(L * G / 2 * alpha**2 + alpha - 1.0, 0.0, atol=1e-5)
        assert np.all((alpha > 0) & (alpha <= 1))
    assert float(aicn_alpha(0.0, 1.0)) == 1.0


def test_aicn_trace_on_trees_is_the_structure_score(key):
    data = load_breast_cancer()
    config = BoostingConfig(rounds=5, step="aicn", l2=1.0, aicn_L=0.1)
    result = fit_boosting(data.x_train, data.y_train, config, key)
    # Newton leaves make t* = 1 and delta the structure score sum_j G_j^2 / (H_j + l2)
    np.testing.assert_allclose(result.t_star, 1.0, rtol=1e-5)
    # The first tree's leaves are -step G_j / (H_j + l2), so sum_i g_i f_1(x_i) = -step delta
    # with g the gradient at the base score: delta from the tree the fit stored.
    F0 = predict_raw(result.model, data.x_train, 0)
    F1 = predict_raw(result.model, data.x_train, 1)
    g, _ = get_loss("logistic").grad_hess(jnp.asarray(data.y_train, jnp.float32), F0)
    structure = -float(jnp.sum(g * (F1 - F0))) / float(result.step[0])
    np.testing.assert_allclose(result.delta[0], structure, rtol=1e-4)
    expected = np.asarray(aicn_alpha(np.sqrt(np.asarray(result.delta)), 0.1))
    np.testing.assert_allclose(result.alpha, expected, rtol=1e-5)
    np.testing.assert_allclose(result.step, result.alpha, rtol=1e-6)
    assert np.all((np.asarray(result.alpha) > 0) & (np.asarray(result.alpha) <= 1))


def _regression(n=256, d=5, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    return X, X @ rng.normal(size=d) + np.sin(3 * X[:, 0]) + 0.3 * rng.normal(size=n)


@pytest.mark.parametrize("learner", ["tree", "coordinate"])
def test_aicn_L_scales_as_one_over_the_target_scale(learner, key):
    # squared loss: y -> c y scales g and sqrt(delta) by c (h = 1), and alpha sees
    # L sqrt(delta), so aicn_L / c fits c times the predictions (BoostingConfig's docstring);
    # a power of two keeps every product exact
    X, y = _regression()
    c, L = 64.0, 0.1

    def fit(target, aicn_L):
        config = BoostingConfig(loss="squared", rounds=10, learner=learner, aicn_L=aicn_L)
        result = fit_boosting(X, target, config, key)
        return np.asarray(predict_raw(result.model, X)), np.asarray(result.alpha)

    F, alpha = fit(y, L)
    assert alpha[0] < 0.9  # L shortens the steps here
    F_scaled, alpha_scaled = fit(c * y, L / c)
    np.testing.assert_allclose(F_scaled / c, F, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(alpha_scaled, alpha, rtol=1e-5)
    for wrong in (L, L / c**2, L / np.sqrt(c)):  # any other factor steps otherwise
        assert np.max(np.abs(fit(c * y, wrong)[1] - alpha)) > 1e-2


def test_aicn_L_of_the_mean_loss_is_sqrt_n_times_that_of_the_sum(key):
    # the fit works on the summed loss: scaling it by s (l2 and min_child_weight by s too,
    # which keeps the trees) scales delta by s, so the same fit needs aicn_L / sqrt(s); for
    # the mean loss, s = 1/n, that is L sqrt(n). AICN's own constant rescales so by itself
    # (notes/zo_boost.md section 4: "invariant to rescaling f"); a fixed aicn_L does not.
    X, y = _regression()
    n, L = X.shape[0], 0.1  # n = 256: s = 1/n is a power of two, the products exact
    total = custom(lambda t, f: 0.5 * (t - f) ** 2)
    mean = custom(lambda t, f: 0.5 * (t - f) ** 2 / n)

    def fit(loss, aicn_L, s):
        config = BoostingConfig(loss=loss, rounds=10, aicn_L=aicn_L, l2=s, min_child_weight=s)
        result = fit_boosting(X, y, config, key)
        return np.asarray(predict_raw(result.model, X)), np.asarray(result.alpha)

    F, alpha = fit(total, L, 1.0)
    assert alpha[0] < 0.9
    F_mean, alpha_mean = fit(mean, L * np.sqrt(n), 1.0 / n)
    np.testing.assert_allclose(F_mean, F, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(alpha_mean, alpha, rtol=1e-5)
    for wrong in (L, L * n):
        assert np.max(np.abs(fit(mean, wrong, 1.0 / n)[1] - alpha)) > 1e-2


def test_min_split_gain_is_half_of_xgboost_gamma(key):
    xgb = pytest.importorskip("xgboost")
    rng = np.random.default_rng(0)
    X = rng.integers(0, 30, size=(400, 5)).astype(float)  # 30 values a feature: hist = exact
    y = 0.3 * X[:, 0] - 0.2 * X[:, 1] + rng.normal(size=400)
    gamma = 80.0

    def ours(min_split_gain):
        config = BoostingConfig(
            loss="squared", rounds=5, step="newton", eta=0.3, min_split_gain=min_split_gain
        )
        result = fit_boosting(X, y, config, key)
        return np.asarray(predict_raw(result.model, X))[:, 0], float(result.model.base[0])

    F, base = ours(gamma / 2)
    params = {
        "objective": "reg:squarederror",
        "eta": 0.3,
        "reg_lambda": 1.0,
        "max_depth": 3,
        "min_child_weight": 1.0,
        "tree_method": "exact",
        "base_score": base,
        "gamma": gamma,
        "nthread": 1,
    }
    booster = xgb.train(params, xgb.DMatrix(X, label=y), 5)
    F_xgb = booster.predict(xgb.DMatrix(X), output_margin=True)
    np.testing.assert_allclose(F, F_xgb, rtol=1e-5, atol=1e-5)
    # gamma prunes here: min_split_gain = gamma, or no pruning, fits other trees
    for other in (gamma, 0.0):
        assert np.max(np.abs(ours(other)[0] - F_xgb)) > 0.1


@pytest.mark.parametrize("step", ["newton", "grn", "aicn"])
def test_logistic_fits_breast_cancer(step, key):
    data = load_breast_cancer()
    config = BoostingConfig(rounds=40, step=step, eta=0.3 if step != "aicn" else 1.0)
    result = fit_boosting(data.x_train, data.y_train, config, key)
    assert int(result.status) == FitStatus.OK
    loss = np.asarray(result.train_loss)
    assert loss[-1] < 0.2 * loss[0]
    p = jax.nn.sigmoid(predict_raw(result.model, data.x_test))[:, 0]
    accuracy = np.mean((np.asarray(p) > 0.5) == data.y_test)
    assert accuracy >= 0.93
    # predictions from the stored trees reproduce the training loss the fit recorded
    F = predict_raw(result.model, data.x_train)
    logistic = get_loss("logistic")
    again = float(jnp.mean(logistic.value(jnp.asarray(data.y_train, jnp.float32), F)))
    np.testing.assert_allclose(again, loss[-1], rtol=1e-4)


def test_plain_newton_without_a_hessian_floor_diverges_where_aicn_does_not(key):
    # eta = 1, no L2 and no child Hessian floor: a leaf of confidently misclassified rows
    # has G ~ its size and H ~ 0, so its Newton step is huge (notes/zo_boost.md section 4).
    # weak-AICN, whose only floor is l2 in its metric, keeps decreasing on the same data.
    from sklearn.datasets import make_classification

    X, y = make_classification(5000, 10, n_informative=6, random_state=1)
    losses = {}
    for step, l2 in (("newton", 0.0), ("aicn", 1.0)):
        config = BoostingConfig(rounds=30, step=step, eta=1.0, l2=l2, min_child_weight=0.0)
        losses[step] = np.asarray(fit_boosting(X, y, config, key).train_loss, np.float64)
    assert np.max(losses["newton"]) > 100 * losses["newton"][0]
    aicn = losses["aicn"]
    assert np.all(np.diff(aicn) <= 1e-6 * aicn[:-1]) and aicn[-1] < 0.2 * aicn[0]


def test_softmax_fits_digits(key):
    data = load_digits()
    config = BoostingConfig(loss="softmax", num_classes=10, rounds=30, depth=3, eta=1.0)
    result = fit_boosting(data.x_train, data.y_train, config, key)
    assert result.model.trees.value.shape == (30, 10, 8)
    F = predict_raw(result.model, data.x_test)
    accuracy = np.mean(np.asarray(jnp.argmax(F, axis=1)) == data.y_test)
    assert accuracy >= 0.9


@pytest.mark.parametrize("loss", ["squared", "poisson"])
def test_regression_losses_decrease(loss, key):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 5))
    mean = np.exp(0.5 * X[:, 0] - 0.3 * X[:, 1])
    y = rng.poisson(mean) if loss == "poisson" else mean + 0.1 * rng.normal(size=400)
    result = fit_boosting(X, y, BoostingConfig(loss=loss, rounds=30, step="aicn"), key)
    train = np.asarray(result.train_loss)
    assert np.all(np.diff(train) <= 1e-6)  # damped Newton steps never increase the loss here
    assert train[-1] < train[0]


def test_custom_loss_derivatives_match_closed_form():
    squared = get_loss("squared")
    mine = custom(lambda y, f: 0.5 * (y - f) ** 2)
    y = jnp.linspace(-1.0, 2.0, 7)
    F = jnp.linspace(0.5, -0.5, 7)[:, None]
    for a, b in zip(mine.grad_hess(y, F), squared.grad_hess(y, F), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_subsample_is_reproducible_from_the_key():
    data = load_breast_cancer()
    config = BoostingConfig(rounds=5, subsample=0.5)
    a = fit_boosting(data.x_train, data.y_train, config, jax.random.key(1))
    b = fit_boosting(data.x_train, data.y_train, config, jax.random.key(1))
    c = fit_boosting(data.x_train, data.y_train, config, jax.random.key(2))
    np.testing.assert_array_equal(a.train_loss, b.train_loss)
    assert not np.array_equal(np.asarray(a.train_loss), np.asarray(c.train_loss))


def _separable_quadratic():
    rng = np.random.default_rng(0)
    M = rng.normal(size=(60, 5))
    # orthogonal columns, centred (combinations of centred columns): the intercept
    # separates from the features too
    Q, _ = np.linalg.qr(M - M.mean(axis=0))
    X = Q * np.array([1.0, 2.0, 0.5, 3.0, 1.5])
    y = X @ np.array([1.0, -2.0, 0.5, 0.0, 3.0]) + 0.7 + 0.01 * rng.normal(size=60)
    return X, y


def test_newton_cd_reproduces_the_newton_path_on_a_separable_quadratic(key):
    X, y = _separable_quadratic()
    A = np.c_[X, np.ones(len(y))]
    w_star = np.linalg.lstsq(A, y, rcond=None)[0]
    w0 = np.r_[np.zeros(5), y.mean()]  # the fit starts from the base score
    for eta in (1.0, 0.5):
        for rounds in (1, 2, 3):
            config = BoostingConfig(
                loss="squared", step="newton_cd", selection="all", l2=0.0, eta=eta, rounds=rounds
            )
            model = fit_boosting(X, y, config, key).model
            w = np.r_[np.asarray(model.weights)[:, 0], float(model.base[0])]
            # exact Newton with step eta on a quadratic: w_k = w* + (1 - eta)^k (w_0 - w*)
            np.testing.assert_allclose(w, w_star + (1 - eta) ** rounds * (w0 - w_star), atol=2e-5)
    # one coordinate a round, greedy, full steps: exact after every coordinate once
    config = BoostingConfig(loss="squared", step="newton_cd", l2=0.0, eta=1.0, rounds=6)
    model = fit_boosting(X, y, config, key).model
    w = np.r_[np.asarray(model.weights)[:, 0], float(model.base[0])]
    np.testing.assert_allclose(w, w_star, atol=2e-5)
    # only the final weights are kept: an earlier round is refused, not the last one returned
    with pytest.raises(ValueError, match="rounds must be None for a coordinate learner"):
        predict_raw(model, X, 3)


def test_newton_cd_reaches_the_lbfgs_optimum_of_logistic_regression(key):
    data = load_breast_cancer()
    X = (data.x_train - data.x_train.mean(0)) / data.x_train.std(0)
    y = data.y_train.astype(np.float64)
    l2 = 1.0

    def objective(v):
        w, b = v[:-1], v[-1]
        F = X @ w + b
        p = 1 / (1 + np.exp(-F))
        value = np.sum(np.logaddexp(0, F) - y * F) + 0.5 * l2 * w @ w
        grad = np.r_[X.T @ (p - y) + l2 * w, np.sum(p - y)]
        return value, grad

    ref = minimize(
        objective,
        np.zeros(X.shape[1] + 1),
        jac=True,
        method="L-BFGS-B",
        options={"gtol": 1e-10, "maxiter": 10000},
    )
    config = BoostingConfig(step="newton_cd", selection="cyclic", l2=l2, eta=1.0, rounds=3100)
    result = fit_boosting(X, y, config, key)
    w = np.r_[np.asarray(result.model.weights)[:, 0], float(result.model.base[0])]
    ours = objective(w)[0]
    assert abs(ours - ref.fun) <= 1e-4 * abs(ref.fun)
    np.testing.assert_allclose(w, ref.x, atol=2e-2)


def test_coordinate_eval_loss_is_the_held_out_mean_loss(key):
    # It added the l2 term divided by the eval set's size: with l2 = 50 and 100 eval rows it
    # read 0.87 where the held-out log-loss was 0.49, and a tiled eval set changed it, so
    # early stopping favoured small weights. The training loss keeps its l2 term over n.
    rng = np.random.default_rng(0)
    X = rng.normal(size=(1000, 5))
    y = (X @ np.array([2.0, -1.0, 0.5, 0.0, 0.0]) + rng.logistic(size=1000) > 0).astype(int)
    config = BoostingConfig(rounds=30, learner="coordinate", step="newton_cd", l2=50.0)
    result = fit_boosting(X[:900], y[:900], config, key, eval_set=(X[900:], y[900:]))
    logistic = get_loss("logistic")
    held_out = logistic.value(jnp.asarray(y[900:], jnp.float32), predict_raw(result.model, X[900:]))
    np.testing.assert_allclose(result.eval_loss[-1], jnp.mean(held_out), rtol=1e-6)
    tiled = (np.tile(X[900:], (5, 1)), np.tile(y[900:], 5))
    again = fit_boosting(X[:900], y[:900], config, key, eval_set=tiled)
    np.testing.assert_allclose(again.eval_loss, result.eval_loss, rtol=1e-5)
    weights = np.asarray(result.model.weights)
    train = logistic.value(jnp.asarray(y[:900], jnp.float32), predict_raw(result.model, X[:900]))
    penalty = 0.5 * 50.0 * np.sum(weights**2) / 900
    np.testing.assert_allclose(result.train_loss[-1], jnp.mean(train) + penalty, rtol=1e-5)


def test_bad_input_is_named(key):
    X = np.random.default_rng(0).normal(size=(20, 3))
    y = (X[:, 0] > 0).astype(int)
    with pytest.raises(ValueError, match=r"labels in \{0, 1\}"):
        fit_boosting(X, y + 1, BoostingConfig(rounds=2), key)
    with pytest.raises(ValueError, match="y >= 0"):
        fit_boosting(X, -np.ones(20), BoostingConfig(loss="poisson", rounds=2), key)
    with pytest.raises(ValueError, match=r"labels in \[0, 3\)"):
        fit_boosting(X, np.full(20, 3), BoostingConfig(loss="softmax", num_classes=3), key)
    with pytest.raises(ValueError, match="depth must be an integer >= 1"):
        fit_boosting(X, y, BoostingConfig(depth=0), key)
    with pytest.raises(ValueError, match="step must be one of"):
        fit_boosting(X, y, BoostingConfig(step="adam"), key)
    with pytest.raises(ValueError, match="needs l2 > 0"):
        fit_boosting(X, y, BoostingConfig(step="aicn", l2=0.0), key)
    with pytest.raises(ValueError, match=r"X\[2, 1\] is nan"):
        Xn = X.copy()
        Xn[2, 1] = np.nan
        fit_boosting(Xn, y, BoostingConfig(rounds=2), key)
    with pytest.raises(ValueError, match="20 samples but y has 19"):
        fit_boosting(X, y[:-1], BoostingConfig(rounds=2), key)
    with pytest.raises(TypeError, match="PRNG key"):
        fit_boosting(X, y, BoostingConfig(rounds=2), 0)
    # infinite settings learned nothing (or failed) without a word; a bool is no count
    for field, value, message in (
        ("l2", np.inf, "l2 must be finite and >= 0, got inf"),
        ("eta", np.inf, "eta must be finite and > 0, got inf"),
        ("aicn_L", np.inf, "aicn_L must be finite and > 0"),
        ("rounds", True, "rounds must be an integer >= 1, got True"),
        ("subsample", 1.5, r"subsample must lie in \(0, 1\]"),
    ):
        with pytest.raises(ValueError, match=message):
            fit_boosting(X, y, BoostingConfig(**{field: value}), key)
    # the coordinate learner sees every row: a subsample was silently ignored
    with pytest.raises(ValueError, match="subsample=0.5 needs a tree learner"):
        fit_boosting(X, y, BoostingConfig(step="newton_cd", subsample=0.5), key)
    # strings failed inside a comparison ufunc; int(2.5) fitted two classes; a class count
    # beside another loss was ignored
    with pytest.raises(ValueError, match="y must hold numbers, got dtype <U1"):
        fit_boosting(
            X, np.array(list("ab") * 10), BoostingConfig(loss="softmax", num_classes=2), key
        )
    with pytest.raises(ValueError, match="num_classes must be an integer >= 2, got 2.5"):
        fit_boosting(X, y, BoostingConfig(loss="softmax", num_classes=2.5), key)
    with pytest.raises(ValueError, match="num_classes=3 is for loss='softmax'"):
        fit_boosting(X, y, BoostingConfig(loss="logistic", num_classes=3), key)
    # an eval_set that is not a pair failed on an index; its bad labels blamed y
    for bad in ((X,), X):
        with pytest.raises(ValueError, match=r"eval_set must be a pair \(X, y\)"):
            fit_boosting(X, y, BoostingConfig(rounds=2), key, eval_set=bad)
    with pytest.raises(ValueError, match=r"eval_set y: poisson loss needs y >= 0"):
        fit_boosting(X, np.abs(X[:, 0]), BoostingConfig(loss="poisson", rounds=2), key,
                     eval_set=(X, X[:, 0]))  # fmt: skip


def test_settings_are_single_numbers_and_a_loss_keeps_its_outputs(key):
    # an array or a list passed the real-number check and failed later in float() with a
    # TypeError naming no field
    for field, value in (
        ("eta", np.array([0.5, 0.2])),
        ("l2", [0.5, 0.2]),
        ("aicn_L", (0.1,)),
        ("min_split_gain", np.zeros((1, 1))),
        ("subsample", [1.0]),
    ):
        with pytest.raises(ValueError, match=f"{field} must be a scalar, got shape"):
            BoostingConfig(**{field: value}).checked()
    BoostingConfig(eta=np.array(0.5), l2=np.float32(2.0)).checked()  # 0-d: one number
    # a class count that disagrees with a Loss object's outputs was ignored (the loss's
    # outputs were fitted); the same count beside a named loss is refused
    X = np.random.default_rng(0).normal(size=(30, 3))
    y = np.arange(30) % 3
    three = get_loss("softmax", 3)
    with pytest.raises(ValueError, match="num_classes=5 disagrees with the Loss 'softmax', "
                       "whose num_outputs is 3"):  # fmt: skip
        fit_boosting(X, y, BoostingConfig(loss=three, num_classes=5, rounds=2), key)
    with pytest.raises(ValueError, match="num_classes=2 disagrees with the Loss 'logistic'"):
        BoostingConfig(loss=get_loss("logistic"), num_classes=2).checked()
    fit_boosting(X, y, BoostingConfig(loss=three, num_classes=3, rounds=2), key)


def test_coordinate_features_beyond_float32_are_named(key):
    # cast to float32 they became inf, and the fit's losses NaN with status 1
    X = np.random.default_rng(0).normal(size=(30, 4))
    y = (X[:, 0] > 0).astype(int)
    big = X.copy()
    big[:, 2] *= 1e39
    config = BoostingConfig(rounds=3, step="newton_cd")
    with pytest.raises(ValueError, match=r"X\[:, 2\] holds values beyond float32's range"):
        fit_boosting(big, y, config, key)
    model = fit_boosting(X, y, config, key).model
    with pytest.raises(ValueError, match=r"X\[:, 2\] holds values beyond float32's range"):
        predict_raw(model, big)


def test_a_failed_round_is_not_applied_and_its_loss_must_be_finite(key):
    # a finite score of ~130 overflows the Poisson loss: the round was kept as OK, the next
    # produced NaN leaves that the model stored (0 * NaN), predicting NaN everywhere
    X = np.random.default_rng(0).normal(size=(60, 3))
    y = np.zeros(60)
    y[0] = 1e6
    config = BoostingConfig(loss="poisson", step="newton", rounds=3, eta=2.0)
    result = fit_boosting(X, y, config, key)
    assert int(result.status) == FitStatus.NUMERICAL_ERROR
    assert np.all(np.isfinite(np.asarray(result.train_loss)))
    assert np.all(np.isfinite(np.asarray(result.model.trees.value)))
    failed = int(np.argmax(np.asarray(result.step) == 0.0))
    kept = predict_raw(result.model, X, failed)  # the rounds before the failed one
    np.testing.assert_array_equal(predict_raw(result.model, X), kept)


def test_predicting_round_by_round_compiles_once(key):
    from jaxopt_suite.boosting import fit

    data = load_breast_cancer()
    result = fit_boosting(data.x_train, data.y_train, BoostingConfig(rounds=6), key)
    before = fit._predict_trees._cache_size()
    F = [np.asarray(predict_raw(result.model, data.x_test, r)) for r in range(7)]
    assert fit._predict_trees._cache_size() <= before + 1
    np.testing.assert_array_equal(F[-1], predict_raw(result.model, data.x_test))
    assert not np.array_equal(F[2], F[3])
    with pytest.raises(ValueError, match="rounds must be an integer >= 0, got 2.7"):
        predict_raw(result.model, data.x_test, 2.7)
    with pytest.raises(ValueError, match=r"rounds must lie in \[0, 6\], got 7"):
        predict_raw(result.model, data.x_test, 7)


def test_a_new_subsample_fraction_does_not_compile_the_fit_again(key):
    from jaxopt_suite.boosting import fit

    data = load_breast_cancer()
    fits = [
        fit_boosting(data.x_train, data.y_train, BoostingConfig(rounds=3, subsample=s), key)
        for s in (0.5, 0.6, 0.7)
    ]
    size = fit._fit_trees._cache_size()
    fit_boosting(data.x_train, data.y_train, BoostingConfig(rounds=3, subsample=0.8), key)
    assert fit._fit_trees._cache_size() == size
    assert not np.array_equal(fits[0].train_loss, fits[2].train_loss)


def test_softmax_hessian_is_a_diagonal_upper_bound():
    # the K trees of a round are fitted independently: their diagonal metric must bound
    # the coupled Hessian diag(p) - p p^T from above, or the joint step overshoots
    K = 5
    loss = get_loss("softmax", K)
    F = jax.random.normal(jax.random.key(3), (64, K)) * 2.0
    y = jnp.arange(64) % K
    _, h = loss.grad_hess(y, F)
    p = np.asarray(jax.nn.softmax(F, axis=1), np.float64)
    d = np.asarray(jax.random.normal(jax.random.key(4), (64, K)), np.float64)
    exact = np.sum(p * d * d, axis=1) - np.sum(p * d, axis=1) ** 2
    assert np.all(exact <= np.sum(np.asarray(h) * d * d, axis=1) * (1 + 1e-5))
    # tight: two equally likely classes moved in opposite directions
    two = get_loss("softmax", 2)
    _, h2 = two.grad_hess(jnp.zeros(1, jnp.int32), jnp.zeros((1, 2)))
    np.testing.assert_allclose(np.sum(np.asarray(h2)[0] * np.array([1.0, 1.0])), 1.0, rtol=1e-6)
