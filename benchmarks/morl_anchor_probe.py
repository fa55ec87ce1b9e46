"""Statistics of AETDICE's two reward anchors on a ``morl`` task's data (not a suite; no
training).

For ESR objectives AETDICE telescopes ``h`` into per-step rewards anchored either at the
accumulated return ``x_t`` or at the projected one, ``x_t`` plus the data's mean return from
``t`` on (:func:`jaxopt_suite.rl.aetdice.utilities.projected_rewards`). Both sum to the same
``h(G)`` per episode; this probe measures how they spread it over the steps, on the suite's
datasets (its normalisation and utilities, :func:`benchmarks.morl.task_data` and
:func:`benchmarks.morl.utilities`), per evaluation preference: the reward scale ``sigma``
that divides the rewards in the dual (:func:`jaxopt_suite.rl.aetdice.policy.reward_scale`),
the rewards' mean at the first and the last step, and their spread within a step (the root
mean over ``t`` of the variance over the episodes at ``t``), which is what tells actions
apart at a given time.

On halfcheetah (suite replicate 0, Nash ESR; ``probes/morl_anchor_halfcheetah.json``, this
module at 428dc4a, 6 min here) the accumulated anchor's scale is 4 to 13 times the projected
one's (0.028 against 0.0022 at ``w = (0.3, 0.7)``, 0.017 against 0.0044 at ``(0.7, 0.3)``),
its mean increment falls from 0.157 at the first step to 0.009 at the last, and its
within-step spread is two to three times the projected one's; the projected scale is its
within-step spread.

    PYTHONPATH=. python -m benchmarks.morl_anchor_probe --task mo_halfcheetah \\
        --out benchmarks/results/probes/morl_anchor_halfcheetah.json
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from benchmarks import morl as M
from benchmarks.harness import environment
from benchmarks.jsonio import dumps
from jaxopt_suite.rl import aetdice as A
from jaxopt_suite.rl.aetdice import utilities as U
from jaxopt_suite.rl.aetdice.policy import flatten_steps


def anchor_statistics(dataset, objective) -> dict:
    """Per anchor (``"accumulated"``, ``"projected"``): ``sigma``, the mean reward at the
    first and last step over the episodes running there, and the within-step spread, all
    read off the DICE problem AETDICE builds (:func:`jaxopt_suite.rl.aetdice.aetdice.
    aetdice_problem`: its reward rows are the steps that happened, in ``flatten_steps``
    order)."""
    horizon = dataset.mask.shape[1]
    times = flatten_steps(dataset.mask) % horizon  # each step row's t
    count = np.maximum(np.bincount(times, minlength=horizon), 1)
    out = {}
    for form in A.aetdice.TELESCOPING:
        problem = A.aetdice.aetdice_problem(dataset, objective, form)
        values = np.asarray(problem.rewards, np.float64)[:, 0]  # ESR: k = 1
        mean = np.bincount(times, values, horizon) / count
        variance = np.bincount(times, (values - mean[times]) ** 2, horizon) / count
        out[form] = {
            "sigma": float(problem.scale),
            "mean_first_step": float(mean[0]),
            "mean_last_step": float(mean[-1]),
            "within_step_spread": float(np.sqrt(variance.mean())),
        }
    return out


def probe(task_name: str, family: str, replicates) -> dict:
    task = M.TASKS[task_name]
    data, spread, _ = M.task_data(task_name, task)  # the suite's: replicates 0..LINEAR_SEEDS-1
    chosen = M.replicate_data(task_name, task, replicates, data, spread)
    utilities = M.utilities(family, data, task["preferences"])
    out = {}
    for replicate in replicates:
        dataset = chosen[replicate]
        for w, utility in zip(task["preferences"], utilities, strict=True):
            out[f"replicate {replicate}, w = {list(w)}"] = anchor_statistics(
                dataset, U.esr(utility)
            )
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="mo_halfcheetah", choices=tuple(M.TASKS))
    parser.add_argument("--family", default="nash", choices=M.FAMILIES)
    parser.add_argument("--replicates", default="0", help="the datasets, e.g. 0 or 0,5")
    parser.add_argument("--out", required=True)
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    replicates = [int(r) for r in args.replicates.split(",")]
    if min(replicates) < 0:
        raise ValueError(f"--replicates must be >= 0, got {replicates}")
    results = probe(args.task, args.family, replicates)
    with open(args.out, "w") as f:
        f.write(dumps(
            {"command": "python -m benchmarks.morl_anchor_probe " + " ".join(argv),
             "environment": environment(), "task": args.task, "family": args.family,
             "replicates": replicates, "results": results}, indent=1,
        ))  # fmt: skip


if __name__ == "__main__":
    main()
