"""Probe: ASCPO on a safe_rl suite task (the walker unless ``--task``) at a given ``k`` and
KL radius.

Trains the suite's configuration of the task (``benchmarks.safe_rl.TASKS``, its seeds, keys
and evaluator) with the bound's ``k`` and the trust region's ``max_kl`` given (default: the
suite's), and writes, per seed, the deterministic and sampled evaluation and, over the last
``WINDOW`` iterations, how often the bound was violated (``c > 0``), the share of each CPO
case, how often the line search accepted, and the training violation rate::

    PYTHONPATH=. python -m benchmarks.safe_rl_probe --task hopper_velocity --k 7 \\
        --max-kl 0.02 --out probe.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time

import jax
import numpy as np

import envs
from benchmarks import safe_rl
from benchmarks.jsonio import dumps
from jaxopt_suite.rl.constrained import make_trainer
from jaxopt_suite.rl.training import train_function

WINDOW = 100
TASK = "walker2d_velocity"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default=TASK, choices=sorted(safe_rl.TASKS))
    parser.add_argument("--k", type=float, default=safe_rl.K)
    parser.add_argument("--max-kl", type=float, default=None, help="default: the task's")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    task = safe_rl.TASKS[args.task]
    env = envs.make(task["env"], **task["kwargs"])
    max_kl = task["max_kl"] if args.max_kl is None else args.max_kl
    config = dataclasses.replace(safe_rl._config("ascpo", task, k=args.k), max_kl=max_kl)
    seeds = safe_rl.SEEDS
    keys = jax.random.split(jax.random.key(0), seeds)
    start = time.perf_counter()
    train = jax.jit(jax.vmap(train_function(make_trainer(config, env))))
    result = jax.block_until_ready(train(keys))
    seconds = time.perf_counter() - start
    deterministic, sampled = safe_rl._evaluator(env, task, seeds)(result.params)
    m = {k: np.asarray(v, np.float64)[:, -WINDOW:] for k, v in result.metrics.items()}
    out = {
        "command": f"python -m benchmarks.safe_rl_probe --task {args.task} --k {args.k} "
        f"--max-kl {max_kl}",
        "task": args.task,
        "config": dataclasses.asdict(config),
        "seeds": seeds,
        "seconds": seconds,
        "window": WINDOW,
        "deterministic_violation": np.asarray(deterministic["violation"]).tolist(),
        "deterministic_return": np.asarray(deterministic["episode_return"]).tolist(),
        "sampled_violation": np.asarray(sampled["violation"]).tolist(),
        "sampled_return": np.asarray(sampled["episode_return"]).tolist(),
        "bound_violated": (m["constraint"] > 0).mean(axis=1).tolist(),
        "cases": {str(c): (m["case"] == c).mean(axis=1).tolist() for c in range(5)},
        "accepted": m["accepted"].mean(axis=1).tolist(),
        "training_violation": m["violation"].mean(axis=1).tolist(),
        "training_max_cost": m["episode_max_cost"].mean(axis=1).tolist(),
    }
    with open(args.out, "w") as f:
        f.write(dumps(out, indent=1))
    print(json.dumps({k: v for k, v in out.items() if k != "config"}, indent=1))


if __name__ == "__main__":
    main()
