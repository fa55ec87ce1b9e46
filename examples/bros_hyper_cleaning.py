"""Hyper-data cleaning with BROS against MA-SOBA: learn which training labels to trust.

    python examples/bros_hyper_cleaning.py                  # Fashion-MNIST, else digits
    python examples/bros_hyper_cleaning.py --quick          # digits, a few hundred steps
    python examples/bros_hyper_cleaning.py --hidden 512 512 # an MLP lower level

Half of the training labels are re-drawn at random; x holds one logit per training sample,
the lower level fits a model on the sigmoid(x)-weighted loss, and the upper level asks that
model to fit a clean validation set. A good x gives clean samples high weight.
"""

from __future__ import annotations

import argparse

import jax

from jaxopt_suite import bilevel, datasets
from jaxopt_suite.bilevel import tasks


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--hidden", type=int, nargs="*", default=[])
    parser.add_argument("--corruption", type=float, default=0.5)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    steps = 400 if args.quick else args.steps
    if args.quick:
        split = tasks.load_split("digits")
    else:  # 20k Fashion-MNIST samples where its files are installed, else all of digits
        try:
            split = tasks.load_split("fashion_mnist", n_train=20_000)
        except datasets.DatasetNotFoundError:
            split = tasks.load_split("digits")
    task = tasks.hyper_cleaning(split, corruption=args.corruption, hidden=tuple(args.hidden))
    solvers = {
        "MA-SOBA": bilevel.ma_soba(inner_lr=0.1, outer=100.0),
        f"BROS r={args.rank}": bilevel.bros(
            rank=args.rank,
            inner_lr=0.1 if not args.hidden else 0.01,
            outer=100.0,
            factorized=True,
            exact_small_leaves=True,
        ),
    }
    out = {}
    for name, solver in solvers.items():
        result = bilevel.run(
            task.problem,
            solver,
            task.x0,
            task.y0,
            jax.random.key(0),
            steps,
            eval_fn=task.evaluate,
        )
        final = {k: float(v[-1]) for k, v in result.history.items()}
        out[name] = final
        print(
            f"{name:>10}: test accuracy {final['test_accuracy']:.3f}, mean weight of clean "
            f"samples {final['weight_clean']:.2f} vs corrupted {final['weight_corrupted']:.2f}"
        )
    return out


if __name__ == "__main__":
    main()
