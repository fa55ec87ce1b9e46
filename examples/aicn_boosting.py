"""Weak-AICN boosting against constant-shrinkage Newton boosting on a logistic task.

    python examples/aicn_boosting.py            # 100k x 20, 100 rounds
    python examples/aicn_boosting.py --quick    # 20k x 20, 60 rounds

Four step rules grow the same depth-3 histogram trees: Newton with XGBoost's shrinkage 0.3,
Newton at full step without any Hessian floor (no L2, no minimum child Hessian: a leaf
of confidently misclassified rows has a tiny Hessian sum and takes a huge step), GRN, and
weak-AICN, whose step alpha_k = 2 / (1 + sqrt(1 + 2 L G_k)) shrinks when the tree's Newton
decrement G_k is large and tends to 1 near the optimum. Then the scikit-learn estimator
with early stopping on a validation split.
"""

from __future__ import annotations

import argparse

import jax
import numpy as np
from sklearn.datasets import make_classification
from sklearn.model_selection import train_test_split

from jaxopt_suite.boosting import BoostingConfig, fit_boosting, predict_raw
from jaxopt_suite.boosting.estimators import AICNBoostingClassifier

RULES = {
    "newton eta=0.3": {"step": "newton", "eta": 0.3, "l2": 1.0},
    "newton eta=1, no floor": {"step": "newton", "eta": 1.0, "l2": 0.0, "min_child_weight": 0.0},
    "grn": {"step": "grn", "eta": 1.0, "l2": 0.0, "grn_M": 0.1},
    "aicn": {"step": "aicn", "eta": 1.0, "l2": 1.0, "aicn_L": 0.1},
}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    samples, rounds = (20_000, 60) if args.quick else (args.samples, args.rounds)
    X, y = make_classification(samples, 20, n_informative=10, n_redundant=5, random_state=0)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.2, random_state=0)

    out = {}
    marks = sorted({max(1, rounds // 4), rounds // 2, rounds})
    print(f"train log-loss at rounds {marks}, its largest value, test accuracy ({samples} samples)")
    for name, rule in RULES.items():
        config = BoostingConfig(loss="logistic", rounds=rounds, depth=3, **rule)
        result = fit_boosting(Xtr, ytr, config, jax.random.key(0))
        loss = np.asarray(result.train_loss, np.float64)
        accuracy = float(np.mean((np.asarray(predict_raw(result.model, Xte))[:, 0] > 0) == yte))
        out[name] = {"train_loss": loss, "test_accuracy": accuracy, "alpha": result.alpha}
        curve = "  ".join(f"{loss[m - 1]:10.4g}" for m in marks)
        print(f"  {name:24s} {curve}   max {loss.max():10.4g}   accuracy {100 * accuracy:.2f}%")
    alpha = np.asarray(out["aicn"]["alpha"])
    print(f"aicn step alpha_k: round 1 {alpha[0]:.3f}, last round {alpha[-1]:.3f}")

    clf = AICNBoostingClassifier(rounds=rounds, early_stopping_rounds=10).fit(Xtr, ytr)
    out["estimator"] = {"rounds_kept": clf.best_round_ + 1, "test_accuracy": clf.score(Xte, yte)}
    print(
        f"AICNBoostingClassifier, early stopping: kept {clf.best_round_ + 1} of {rounds} rounds, "
        f"test accuracy {100 * out['estimator']['test_accuracy']:.2f}%"
    )
    return out


if __name__ == "__main__":
    main()
