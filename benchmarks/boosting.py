"""Suite ``boosting``: Newton, GRN and weak-AICN boosting with the JAX tree builder, against
XGBoost and LightGBM.

Measured in one run, same depth (3), rounds (100), L2 and bins (256), both libraries on
2 threads (``hist``):

1. train and test loss per round, test accuracy, time per round, on breast_cancer,
   digits (10 classes, softmax), a 100k x 20 synthetic classification set
   (``make_classification(100000, 20, n_informative=10, n_redundant=5, random_state=0)``,
   80/20 split), a regression set (a 20k-sample ``make_friedman1``), and Fashion-MNIST
   (10k training images, 20 rounds) when its files are on the machine;
2. test accuracy on the two small sets (breast_cancer, 569 samples; digits, 1797) by
   4 x 5-fold stratified cross-validation as well, every method on the same folds: one
   split's test set (142 and 450 samples) has a standard error of about 1.4 and 1 points,
   above the 0.5-point target, so on these sets the target reads the cross-validated mean
   (the single split is reported next to it);
3. divergence: every method at shrinkage 0.3 and 1.0 over 5 seeds (row subsample 0.8 drawn
   from the seed) on every classification set, and weak-AICN once more with no child
   Hessian floor (``min_child_weight=0``, its floor is then ``l2`` alone); plain Newton at
   eta = 1 without L2 is run as the known-divergent reference, with ``min_child_weight``
   1 (XGBoost's default), 0.1 and 0;
4. the delta_k and step-size trace of weak-AICN per round (synthetic set).

Targets: aicn train log-loss at round 100 <= 0.75x XGBoost's (eta 0.3) on the synthetic
set; aicn never diverges; aicn test accuracy >= XGBoost's - 0.5 point on every
classification set; time per round of the JAX builder <= 3x XGBoost's at 100k x 20; plain
Newton (eta 1, no L2, no child Hessian floor) diverges.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.harness import Progress, SuiteResult, SummaryRow, Target
from jaxopt_suite import datasets
from jaxopt_suite.boosting import BoostingConfig, FitStatus, fit_boosting, get_loss, predict_raw

ROUNDS = 100
DEPTH = 3
THREADS = 2
SEEDS = 5
CV_FOLDS, CV_REPEATS = 5, 4  # stratified k-fold on the small sets, every method on the same folds
SMALL = ("breast_cancer", "digits")
REPEATS = 3  # timed fits per method: best of this many, for every library alike
METHODS = {
    "newton": {"step": "newton", "eta": 0.3, "l2": 1.0},
    "grn": {"step": "grn", "eta": 1.0, "l2": 0.0, "grn_M": 0.1},
    "aicn": {"step": "aicn", "eta": 1.0, "l2": 1.0, "aicn_L": 0.1},
}


def _datasets(quick: bool) -> dict:
    from sklearn.datasets import make_classification, make_friedman1
    from sklearn.model_selection import train_test_split

    out = {}
    for name, loader in (
        ("breast_cancer", datasets.load_breast_cancer),
        ("digits", datasets.load_digits),
    ):
        d = loader()
        out[name] = (d.x_train, d.y_train, d.x_test, d.y_test)
    n = 20_000 if quick else 100_000
    X, y = make_classification(n, 20, n_informative=10, n_redundant=5, random_state=0)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.2, random_state=0)
    out[f"synthetic_{n // 1000}k"] = (Xtr, ytr, Xte, yte)
    X, y = make_friedman1(20_000, n_features=10, noise=1.0, random_state=0)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.2, random_state=0)
    out["friedman1_20k"] = (Xtr, ytr, Xte, yte)
    if not quick:
        try:
            f = datasets.load_fashion_mnist()
            out["fashion_mnist_10k"] = (
                f.x_train[:10_000].reshape(10_000, -1),
                f.y_train[:10_000],
                f.x_test.reshape(len(f.x_test), -1),
                f.y_test,
            )
        except datasets.DatasetNotFoundError:
            pass
    return out  # name -> (X_train, y_train, X_test, y_test)


def _task(y) -> tuple[str, int | None]:
    classes = np.unique(y)
    if np.issubdtype(np.asarray(y).dtype, np.floating) and classes.size > 20:
        return "squared", None
    return ("logistic", None) if classes.size == 2 else ("softmax", int(classes.size))


def _accuracy(loss, F, y) -> float:
    if loss == "squared":
        return math.nan
    pred = (np.asarray(F[:, 0]) > 0).astype(int) if loss == "logistic" else np.argmax(F, axis=1)
    return float(np.mean(pred == y))


def _ours(
    data, method: dict, rounds: int, seed: int = 0, subsample: float = 1.0, timed: bool = True
) -> dict:
    X, y, Xt, yt = data
    loss, K = _task(y)
    config = BoostingConfig(
        loss=loss, num_classes=K, rounds=rounds, depth=DEPTH, subsample=subsample, **method
    )
    key = jax.random.key(seed)
    seconds = math.nan
    if timed:
        # timed like XGBoost's: the fit alone, no per-round evaluation of a test set
        jax.block_until_ready(fit_boosting(X, y, config, key).train_loss)  # compile
        seconds = math.inf
        for _ in range(REPEATS):
            start = time.perf_counter()
            jax.block_until_ready(fit_boosting(X, y, config, key).train_loss)
            seconds = min(seconds, time.perf_counter() - start)
    result = fit_boosting(X, y, config, key, eval_set=(Xt, yt))
    F = np.asarray(predict_raw(result.model, Xt))
    return {
        "train_loss": np.asarray(result.train_loss, np.float64).tolist(),
        "test_loss": np.asarray(result.eval_loss, np.float64).tolist(),
        "test_accuracy": _accuracy(loss, F, yt),
        "seconds": seconds,
        "seconds_per_round": seconds / rounds,
        "status": FitStatus(int(result.status)).name,
        "delta": np.asarray(result.delta, np.float64).tolist(),
        "step": np.asarray(result.step, np.float64).tolist(),
    }


def _mean_loss(loss, K, y, F) -> float:
    fn = get_loss(loss, K)
    y = fn.check(y)
    return float(jnp.mean(fn.value(jnp.asarray(y), jnp.asarray(F, jnp.float32))))


def _xgboost(data, rounds: int, eta: float = 0.3, curves: bool = True) -> dict:
    """Timed fit, loss per round and test accuracy; ``curves=False``: one untimed fit, the
    test accuracy alone."""
    import xgboost as xgb

    X, y, Xt, yt = data
    loss, K = _task(y)
    objective = {
        "logistic": "binary:logistic",
        "softmax": "multi:softprob",
        "squared": "reg:squarederror",
    }[loss]
    params = {
        "objective": objective,
        "max_depth": DEPTH,
        "eta": eta,
        "lambda": 1.0,
        "tree_method": "hist",
        "max_bin": 256,
        "nthread": THREADS,
    }
    if K:
        params["num_class"] = K
    train, test = xgb.DMatrix(X, label=y), xgb.DMatrix(Xt, label=yt)
    if not curves:
        F = xgb.train(params, train, rounds).predict(test, output_margin=True)
        return {"test_accuracy": _accuracy(loss, F.reshape(len(yt), -1), yt)}
    xgb.train(params, train, 2)  # warm-up
    seconds = math.inf
    for _ in range(REPEATS):
        start = time.perf_counter()
        booster = xgb.train(params, train, rounds)
        seconds = min(seconds, time.perf_counter() - start)
    loss_curves = {"train": [], "test": []}
    for r in range(1, rounds + 1):
        for name, (M, labels) in (("train", (train, y)), ("test", (test, yt))):
            F = booster.predict(M, output_margin=True, iteration_range=(0, r))
            F = F.reshape(len(labels), -1)
            loss_curves[name].append(_mean_loss(loss, K, labels, F))
    F = booster.predict(test, output_margin=True).reshape(len(yt), -1)
    return {
        "train_loss": loss_curves["train"],
        "test_loss": loss_curves["test"],
        "test_accuracy": _accuracy(loss, F, yt),
        "seconds": seconds,
        "seconds_per_round": seconds / rounds,
    }


def _lightgbm(data, rounds: int, curves: bool = True) -> dict:
    """As :func:`_xgboost`, for LightGBM."""
    import lightgbm as lgb

    X, y, Xt, yt = data
    loss, K = _task(y)
    objective = {"logistic": "binary", "softmax": "multiclass", "squared": "regression"}[loss]
    params = {
        "objective": objective,
        "num_leaves": 2**DEPTH,
        "max_depth": DEPTH,
        "learning_rate": 0.3,
        "lambda_l2": 1.0,
        "num_threads": THREADS,
        "max_bin": 255,
        "verbose": -1,
    }
    if K:
        params["num_class"] = K
    if not curves:
        F = lgb.train(params, lgb.Dataset(X, label=y), rounds).predict(Xt, raw_score=True)
        return {"test_accuracy": _accuracy(loss, np.asarray(F).reshape(len(yt), -1), yt)}
    seconds = math.inf
    for _ in range(REPEATS):
        start = time.perf_counter()
        booster = lgb.train(params, lgb.Dataset(X, label=y), rounds)
        seconds = min(seconds, time.perf_counter() - start)
    loss_curves, raw = {"train": [], "test": []}, {}
    for name, (M, labels) in (("train", (X, y)), ("test", (Xt, yt))):
        F = np.zeros((len(labels), K or 1))
        for r in range(rounds):  # one tree (per class) at a time: the sum is the raw score
            step = booster.predict(M, raw_score=True, start_iteration=r, num_iteration=1)
            F = F + np.asarray(step).reshape(F.shape)
            loss_curves[name].append(_mean_loss(loss, K, labels, F))
        raw[name] = F
    return {
        "train_loss": loss_curves["train"],
        "test_loss": loss_curves["test"],
        "test_accuracy": _accuracy(loss, raw["test"], yt),
        "seconds": seconds,
        "seconds_per_round": seconds / rounds,
    }


def _fold_accuracies(data, rounds: int, repeats: int) -> dict:
    """Test accuracy of every method (ours, XGBoost, LightGBM) on each fold of a repeated
    stratified k-fold over the whole set (train and test parts together), same folds for
    all; with the mean, its standard error, and each method's paired difference from
    XGBoost in points."""
    from sklearn.model_selection import RepeatedStratifiedKFold

    X = np.concatenate([data[0], data[2]])
    y = np.concatenate([data[1], data[3]])
    folds = RepeatedStratifiedKFold(n_splits=CV_FOLDS, n_repeats=repeats, random_state=0)
    accuracy = {m: [] for m in (*METHODS, "xgboost", "lightgbm")}
    for train, test in folds.split(X, y):
        fold = (X[train], y[train], X[test], y[test])
        for m, cfg in METHODS.items():
            accuracy[m].append(_ours(fold, cfg, rounds, timed=False)["test_accuracy"])
        accuracy["xgboost"].append(_xgboost(fold, rounds, curves=False)["test_accuracy"])
        accuracy["lightgbm"].append(_lightgbm(fold, rounds, curves=False)["test_accuracy"])
    out = {}
    anchor = 100 * np.asarray(accuracy["xgboost"])
    for m, values in accuracy.items():
        a = 100 * np.asarray(values)
        diff = a - anchor
        out[m] = {
            "folds": a.tolist(),
            "mean": float(a.mean()),
            "standard_error": float(a.std(ddof=1) / math.sqrt(a.size)),
            "minus_xgboost": float(diff.mean()),
            "minus_xgboost_standard_error": float(diff.std(ddof=1) / math.sqrt(a.size)),
        }
    return out


def _diverged(row: dict) -> bool:
    loss = np.asarray(row["train_loss"])
    return (
        row["status"] != "OK"
        or not np.all(np.isfinite(loss))
        or loss[-1] > loss[0]
        or (np.max(loss) > 10 * loss[0])
    )


def run(*, quick: bool, out_dir: Path, progress: Progress) -> SuiteResult:
    rounds = 30 if quick else ROUNDS
    data = _datasets(quick)
    synthetic = next(k for k in data if k.startswith("synthetic"))
    rows = {}
    with progress.stage("boosting: datasets", len(data)) as advance:
        for name, d in data.items():
            r = 20 if name.startswith("fashion") else rounds
            rows[name] = {m: _ours(d, cfg, r) for m, cfg in METHODS.items()}
            rows[name]["xgboost"] = _xgboost(d, r)
            rows[name]["lightgbm"] = _lightgbm(d, r)
            advance()
    classification = [k for k in data if _task(data[k][1])[0] != "squared"]
    small = [k for k in SMALL if k in data]
    repeats = 1 if quick else CV_REPEATS
    cross_validated = {}
    with progress.stage("boosting: cross-validated accuracy", len(small)) as advance:
        for k in small:
            cross_validated[k] = _fold_accuracies(data[k], rounds, repeats)
            advance()
    divergence = {}
    variants = {**METHODS, "aicn_min_child_weight_0": dict(METHODS["aicn"], min_child_weight=0.0)}
    checks = [
        (k, m, eta, s)
        for k in classification
        if not k.startswith("fashion")
        for m in variants
        for eta in (0.3, 1.0)
        for s in range(SEEDS)
    ]
    plain_floors = (1.0, 0.1, 0.0)  # min_child_weight of the plain Newton reference
    with progress.stage("boosting: divergence", len(checks) + len(plain_floors)) as advance:
        for k, m, eta, s in checks:
            cfg = dict(variants[m], eta=eta)
            row = _ours(data[k], cfg, rounds, seed=s, subsample=0.8, timed=False)
            divergence.setdefault(k, {}).setdefault(m, []).append(
                {
                    "eta": eta,
                    "seed": s,
                    "diverged": _diverged(row),
                    "final_train_loss": row["train_loss"][-1],
                }
            )
            advance()
        plain = {}
        for floor in plain_floors:
            cfg = {"step": "newton", "eta": 1.0, "l2": 0.0, "min_child_weight": floor}
            row = _ours(data[synthetic], cfg, rounds, timed=False)
            plain[f"min_child_weight_{floor:g}"] = {
                "diverged": _diverged(row),
                "train_loss": row["train_loss"],
            }
            advance()
        divergence["newton_eta1_l2_0_on_" + synthetic] = plain
    results = {
        "datasets": rows,
        "cross_validated_accuracy": cross_validated,
        "divergence": divergence,
    }
    aicn_diverged = sum(
        c["diverged"]
        for k in classification
        if k in divergence
        for m in ("aicn", "aicn_min_child_weight_0")
        for c in divergence[k][m]
    )
    plain_diverged = plain["min_child_weight_0"]["diverged"]
    ratio_loss = (
        rows[synthetic]["aicn"]["train_loss"][-1] / rows[synthetic]["xgboost"]["train_loss"][-1]
    )
    accuracy_gap = min(
        cross_validated[k]["aicn"]["minus_xgboost"]
        if k in cross_validated
        else 100 * (rows[k]["aicn"]["test_accuracy"] - rows[k]["xgboost"]["test_accuracy"])
        for k in classification
    )
    # the time target is stated at 100k x 20: both fits timed on all rows of the set
    full = tuple(
        np.concatenate(part) for part in zip(data[synthetic][:2], data[synthetic][2:], strict=True)
    )
    with progress.stage(f"boosting: time per round on all of {synthetic}", 2) as advance:
        timing = {"aicn": _ours((*full, *data[synthetic][2:]), METHODS["aicn"], rounds)}
        advance()
        timing["xgboost"] = _xgboost((*full, *data[synthetic][2:]), rounds)
        advance()
    timing = {
        m: {"rows": int(full[0].shape[0]), "seconds_per_round": row["seconds_per_round"]}
        for m, row in timing.items()
    }
    results["timing_all_rows"] = timing
    time_ratio = timing["aicn"]["seconds_per_round"] / timing["xgboost"]["seconds_per_round"]
    summary = []
    for k, row in rows.items():
        for m in (*METHODS, "lightgbm"):
            summary.append(
                SummaryRow(
                    m,
                    f"train loss r{len(row[m]['train_loss'])}, {k}",
                    row[m]["train_loss"][-1],
                    "XGBoost",
                    row["xgboost"]["train_loss"][-1],
                )
            )
        summary.append(
            SummaryRow(
                "aicn",
                f"s/round, {k}",
                row["aicn"]["seconds_per_round"],
                "XGBoost",
                row["xgboost"]["seconds_per_round"],
            )
        )
        if k in classification:
            for m in (*METHODS, "lightgbm"):
                summary.append(
                    SummaryRow(
                        m,
                        f"test accuracy %, {k}",
                        100 * row[m]["test_accuracy"],
                        "XGBoost",
                        100 * row["xgboost"]["test_accuracy"],
                    )
                )
        if k in cross_validated:
            cv = cross_validated[k]
            for m in (*METHODS, "lightgbm"):
                summary.append(
                    SummaryRow(
                        m,
                        f"test accuracy %, {k}, {repeats}x{CV_FOLDS}-fold mean",
                        cv[m]["mean"],
                        "XGBoost",
                        cv["xgboost"]["mean"],
                    )
                )
    note = "quick run: 20k synthetic, 30 rounds" if quick else ""
    targets = [
        Target.evaluate(
            f"aicn train log-loss / XGBoost's (eta 0.3), {synthetic}", ratio_loss, 0.75, "<=", note
        ),
        Target.evaluate(
            "aicn runs that diverged (classification sets x 5 seeds x eta {0.3, 1} x "
            "min_child_weight {1, 0})",
            float(aicn_diverged),
            0.0,
            "<=",
            note,
        ),
        Target.evaluate(
            "min over classification sets: aicn test accuracy - XGBoost's (points; "
            f"{'/'.join(small)}: {repeats}x{CV_FOLDS}-fold cross-validated mean)",
            accuracy_gap,
            -0.5,
            ">=",
            note,
        ),
        Target.evaluate(
            f"time per round, JAX trees (aicn) / XGBoost hist, all {full[0].shape[0]} rows "
            f"x {full[0].shape[1]} of {synthetic}",
            time_ratio,
            3.0,
            "<=",
            note,
        ),
        Target.evaluate(
            f"plain newton (eta 1, l2 0, min_child_weight 0) diverged on {synthetic} (1 = yes)",
            float(plain_diverged),
            1.0,
            ">=",
            note,
        ),
    ]
    parameters = {
        "rounds": rounds,
        "depth": DEPTH,
        "threads": THREADS,
        "methods": METHODS,
        "xgboost": "hist, eta 0.3, lambda 1, max_bin 256",
        "lightgbm": "8 leaves, depth 3, learning_rate 0.3, lambda_l2 1",
        "datasets": list(data),
        "cross_validation": f"{repeats} x stratified {CV_FOLDS}-fold on {', '.join(small)}",
    }
    plot = out_dir / "boosting.png"
    _plot(rows[synthetic], synthetic, plot)
    return SuiteResult("boosting", quick, parameters, results, summary, targets, plot)


def _plot(row: dict, name: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, t, b) = plt.subplots(1, 3, figsize=(15, 4))
    for m in (*METHODS, "xgboost", "lightgbm"):
        rounds = np.arange(1, len(row[m]["train_loss"]) + 1)
        (line,) = a.plot(rounds, row[m]["train_loss"], label=f"{m} train")
        a.plot(rounds, row[m]["test_loss"], "--", color=line.get_color(), label=f"{m} test")
        # fit time grows linearly with the rounds: round r ends at r x the measured s/round
        t.plot(rounds * row[m]["seconds_per_round"], row[m]["train_loss"], label=m)
    a.set_yscale("log")
    a.set_xlabel("round")
    a.set_ylabel("log-loss (dashed: test)")
    a.set_title(name)
    a.legend(fontsize=7, ncol=2)
    t.set_yscale("log")
    t.set_xlabel("seconds (round x measured s/round, 2 threads)")
    t.set_ylabel("train log-loss")
    t.set_title(f"{name}: loss against time")
    t.legend(fontsize=8)
    b.plot(row["aicn"]["delta"], label="delta_k")
    b.plot(row["aicn"]["step"], label="step alpha_k t*")
    b.set_yscale("log")
    b.set_xlabel("round")
    b.set_title("weak-AICN trace")
    b.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
