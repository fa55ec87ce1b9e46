"""How far apart the ``morl`` suite's Brax behaviour policies act across preferences (not a
suite).

The suite's Brax datasets (:func:`benchmarks.morl.dataset`) roll one preference-conditioned
PPO behaviour out at the rows of a preference grid. Offline methods can only tell the
preferences apart as far as the data does: where every row's episodes end near the same
vector return, every policy fitted to them does too, and the methods' scores differ by less
than their noise. This probe trains the behaviour as the suite does (its PPO settings, keys
and grid, replicate ``r`` with ``key(2 r)`` and rolls out with ``key(2 r + 1)``), varying the
PPO iterations and the way the training draws an episode's preference
(:class:`envs.PreferenceConditionedWrapper`'s ``sampling``: ``"mixture"``, the suite's, or
``"rows"``), and records per grid row the mean and standard deviation of the raw vector
returns, with the suite's action noise and without. Per objective it summarises the spread of
the rows' mean returns (largest less smallest) and the rank correlation between the rows'
weight on that objective and their mean return on it (1: the more weight, the more return).

    PYTHONPATH=. python -m benchmarks.morl_behaviour_probe --task mo_halfcheetah \\
        --iterations 80,400 --sampling mixture,rows \\
        --out benchmarks/results/probes/morl_behaviour_halfcheetah.json

(and ``--task mo_hopper --iterations 60,400``; ``probes/morl_behaviour_*.json``, this module at
c971a9b, replicate 0, with the suite's action noise.) At the suite's setting the halfcheetah
data hardly tells its preferences apart: the rows' mean run returns range over 96 .. 150 and
their energy returns over 73 .. 79, and the run returns do not follow the run weight (rank
correlation -0.3): they peak at the middle row and are lowest at the all-run row. At 400
iterations both objectives follow their weights more closely (rank correlation 0.7 with
either sampling, though the all-run row still runs less than the next one) and the run
returns range over 78 (mixture) or 96 (rows), while the energy returns still span 7 or
less. The hopper's forward and height returns follow their weights at the suite's 60
iterations already (0.93 and 0.93), its energy returns do not (-0.34; spread 6).
"""

from __future__ import annotations

import argparse
import sys

import jax
import numpy as np

import envs
from benchmarks import morl as M
from benchmarks.harness import environment
from benchmarks.jsonio import dumps

BRAX_TASKS = tuple(name for name, task in M.TASKS.items() if "behaviour_iterations" in task)


def _rank_correlation(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation (average ranks for ties); NaN when either is constant."""

    def ranks(x):
        order = np.argsort(x, kind="stable")
        r = np.empty(len(x))
        r[order] = np.arange(len(x), dtype=np.float64)
        for value in np.unique(x):  # ties share their mean rank
            r[x == value] = r[x == value].mean()
        return r

    ra, rb = ranks(np.asarray(a, np.float64)), ranks(np.asarray(b, np.float64))
    if np.std(ra) == 0 or np.std(rb) == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


def front(preferences: np.ndarray, returns: np.ndarray, episodes: int) -> dict:
    """Per grid row the mean and standard deviation of ``returns (P * episodes, m)`` (rows in
    :func:`envs.collect`'s order), and per objective the spread of the rows' means and their
    rank correlation with the rows' weight on it."""
    per_row = returns.reshape(len(preferences), episodes, -1)
    means, stds = per_row.mean(1), per_row.std(1)
    return {
        "mean": means.tolist(),
        "std": stds.tolist(),
        "spread": (means.max(0) - means.min(0)).tolist(),
        "rank_correlation": [
            _rank_correlation(preferences[:, i], means[:, i]) for i in range(means.shape[1])
        ],
    }


def probe(task_name: str, iterations, samplings, replicate: int = 0, log=print):
    """``(grid, rows)``: the preference grid the data is collected at and a row per
    (iterations, sampling) setting (module docstring)."""
    task = M.TASKS[task_name]
    episodes = task["episodes_per_preference"]
    rows, prefs = [], None
    for count in iterations:
        for sampling in samplings:
            setting = dict(task, behaviour_iterations=count, behaviour_sampling=sampling)
            env, prefs, policy, metrics, seconds = M.behaviour_run(task_name, setting, replicate)
            row = {"iterations": count, "sampling": sampling, "train_seconds": seconds}
            curve = np.asarray(metrics["episode_return"], np.float64)
            row["training_return_first_last"] = [float(curve[0]), float(curve[-1])]
            for label, noise in (("noise", M.NOISE), ("no_noise", 0.0)):
                data = envs.collect(
                    env, policy, prefs, key=jax.random.key(2 * replicate + 1),
                    episodes_per_preference=episodes, horizon=task["horizon"],
                    action_noise=noise,
                )  # fmt: skip
                returns = np.asarray(envs.episode_returns(data), np.float64)
                row[label] = front(np.asarray(prefs), returns, episodes)
            log(
                f"{task_name} iterations={count} sampling={sampling} ({seconds:.0f} s): "
                f"spread {np.round(row['noise']['spread'], 1).tolist()}, rank correlation "
                f"{np.round(row['noise']['rank_correlation'], 2).tolist()}"
            )
            rows.append(row)
    return prefs, rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="mo_halfcheetah", choices=BRAX_TASKS)
    parser.add_argument("--iterations", default="80,400", help="PPO iterations, e.g. 80,400")
    parser.add_argument("--sampling", default="mixture,rows", help="e.g. mixture,rows")
    parser.add_argument("--replicate", type=int, default=0)
    parser.add_argument("--out", required=True)
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    iterations = [int(i) for i in args.iterations.split(",")]
    if min(iterations) < 1:
        raise ValueError(f"--iterations must be >= 1, got {iterations}")
    samplings = args.sampling.split(",")
    unknown = [s for s in samplings if s not in envs.PREFERENCE_SAMPLING]
    if unknown:
        raise ValueError(f"--sampling must be from {envs.PREFERENCE_SAMPLING}, got {unknown}")
    if args.replicate < 0:
        raise ValueError(f"--replicate must be >= 0, got {args.replicate}")
    task = M.TASKS[args.task]
    grid, results = probe(args.task, iterations, samplings, args.replicate)
    with open(args.out, "w") as f:
        f.write(dumps(
            {"command": "python -m benchmarks.morl_behaviour_probe " + " ".join(argv),
             "environment": environment(), "task": args.task, "replicate": args.replicate,
             "suite_setting": {"iterations": task["behaviour_iterations"],
                               "sampling": M.BEHAVIOUR_SAMPLING},
             "preferences": np.asarray(grid).tolist(), "results": results}, indent=1,
        ))  # fmt: skip


if __name__ == "__main__":
    main()
