"""A probe of the ``morl`` suite's DICE ``alpha`` on held-out hopper datasets (not a suite).

The hopper's datasets ``0 .. LINEAR_SEEDS - 1`` are the suite's: they fix the reward
normalisation and the Nash utilities' parameters, as in :func:`benchmarks.morl.run_task`. The
probe trains on other replicates of the data-making (by default 5, 6 and 7, which no table
uses), each with the training key ``fold_in(key(TRAIN_KEY), replicate)``, and scores Nash
welfare at the suite's preferences under SER and ESR (both on the suite's Nash SER evaluation
keys): BC(P) (paired as in the suite) and AETDICE at each ``alpha``. Per replicate it records
the score, the values per preference, the mean returns and, for AETDICE, each policy's largest
ratio in a batch over the last 500 iterations (the ratios' batch mean is 1: ``ratio_max_last``
says how few steps the weighted cloning follows).

    PYTHONPATH=. python -m benchmarks.morl_probe --replicates 5,6,7 --alphas 0.05,0.2,1.0 \\
        --out benchmarks/results/probes/morl_alpha.json

About 25 minutes on 2 CPU cores (the eight PPO behaviour runs take 7 of them).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time

import jax
import numpy as np

import envs
from benchmarks import morl as M
from benchmarks.harness import environment
from benchmarks.jsonio import dumps
from jaxopt_suite.rl import aetdice as A
from jaxopt_suite.rl.aetdice import utilities as U

TASK = "mo_hopper"
LAST = 500  # iterations over which the largest ratio is averaged


def probe(replicates, alphas, log=print) -> dict:
    task = M.TASKS[TASK]
    start = time.perf_counter()
    suite, spread, _ = M.task_data(TASK, task)
    held_out = dict(zip(replicates, M.task_data(TASK, task, replicates, spread)[0], strict=True))
    log(f"data: {time.perf_counter() - start:.0f} s")
    score = M._Scorer(envs.make_multi_objective(TASK), spread, M.EVAL_EPISODES[TASK])
    family = M.utilities("nash", suite, task["preferences"])
    key = jax.random.key(M.TRAIN_KEY)
    out: dict = {}

    def run(label, train, objectives, criterion):
        # both criteria are scored on the suite's Nash SER evaluation keys
        keys = M.evaluation_keys("nash/ser", len(objectives))
        rows = []
        for r, data in held_out.items():
            policies = train(data, objectives, jax.random.fold_in(key, r))
            scored = [score(p, o, k) for p, o, k in zip(policies, objectives, keys, strict=True)]
            row = {
                "replicate": r,
                "score": float(np.mean([s["value"] for s in scored])),
                "values": [s["value"] for s in scored],
                "mean_returns": [s["mean_return"] for s in scored],
            }
            if label != "bc":
                row["ratio_max_last"] = [
                    float(np.mean(np.asarray(p.metrics["ratio_max"])[-LAST:])) for p in policies
                ]
            rows.append(row)
        mean = float(np.mean([row["score"] for row in rows]))
        out[f"{label}/{criterion}"] = {"mean": mean, "replicates": rows}
        log(f"{label} {criterion}: {mean:.4f} ({time.perf_counter() - start:.0f} s)")

    for criterion in ("ser", "esr"):
        objectives = [getattr(U, criterion)(u) for u in family]
        run("bc", lambda d, o, k: M._paired_bc(d, o, k, task["dice"]), objectives, criterion)
        for alpha in alphas:
            config = dataclasses.replace(task["dice"], alpha=alpha)
            train = lambda d, o, k, c=config: A.train_aetdice(d, o, k, c)  # noqa: E731
            run(f"aetdice alpha={alpha}", train, objectives, criterion)
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicates", default="5,6,7")
    parser.add_argument("--alphas", default="0.05,0.2,1.0")
    parser.add_argument("--out", required=True)
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    replicates = [int(r) for r in args.replicates.split(",")]
    if any(r < M.LINEAR_SEEDS for r in replicates):
        raise ValueError(
            f"--replicates must be held out: >= {M.LINEAR_SEEDS} (the suite's are 0.."
            f"{M.LINEAR_SEEDS - 1}), got {replicates}"
        )
    alphas = [float(a) for a in args.alphas.split(",")]
    results = probe(replicates, alphas)
    with open(args.out, "w") as f:
        f.write(dumps(
            {"command": "python -m benchmarks.morl_probe " + " ".join(argv),
             "environment": environment(), "replicates": replicates, "alphas": alphas,
             "results": results}, indent=1,
        ))  # fmt: skip


if __name__ == "__main__":
    main()
