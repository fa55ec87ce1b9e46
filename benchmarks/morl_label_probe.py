"""A probe of the label a behaviour-conditioned policy acts at, on the ``morl`` suite's Brax
data (not a suite).

On a task's suite datasets, training keys and evaluation keys, it trains every method once per
objective, as the suite does, and scores each policy at two labels
(:func:`jaxopt_suite.rl.aetdice.policy.acting_label`; the label is read only when the policy
acts, so both scores come from one network):

* ``weights``: the utility's weights over their sum, read as a behaviour preference (every
  method up to the run at f229f37);
* ``scaled``: the preference that weighs the normalised rewards as the utility's weights do
  (:func:`envs.behaviour_label`);
* ``acting``: the library's label: ``scaled`` for BC(P), OptiDICE and ESR objectives; for a
  DICE policy of a SER objective, the preference that weighs the normalised rewards as its
  multipliers ``mu`` do (since a piecewise-linear utility's policies act at ``scaled`` too:
  Tchebycheff and threshold).

Per objective it records each method's per-key scores and labels under each (BC(P)'s and
OptiDICE's ``scaled`` is their ``acting``, scored once), and the paired margins (over the
keys) of AETDICE to the best baseline under each, and of each method's ``acting`` and
``scaled`` to its ``weights``.

    PYTHONPATH=. python -m benchmarks.morl_label_probe --task mo_halfcheetah \\
        --objectives risk_averse/ser,nash/ser,tchebycheff/ser,threshold/ser \\
        --out benchmarks/results/probes/morl_label_halfcheetah.json
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import envs
from benchmarks import morl as M
from benchmarks.harness import environment
from benchmarks.jsonio import dumps
from benchmarks.morl_policy_probe import _paired, nonlinear_objectives
from jaxopt_suite.rl import aetdice as A
from jaxopt_suite.rl.aetdice import utilities as U

LABELS = ("weights", "scaled", "acting")


def probe(task_name: str, objective_names, log=print) -> dict:
    task = M.TASKS[task_name]
    if not task["dice"].behaviour_conditioned:
        raise ValueError(f"{task_name}'s DICE policies are not behaviour-conditioned")
    start = time.perf_counter()
    data, spread, _ = M.task_data(task_name, task)
    log(f"data: {time.perf_counter() - start:.0f} s, spread {spread.tolist()}")
    score = M._Scorer(envs.make_multi_objective(task_name), spread, M.EVAL_EPISODES[task_name])
    config, prefs = task["dice"], task["preferences"]
    key = jax.random.key(M.TRAIN_KEY)
    gamma = 1.0 - 1.0 / task["horizon"]
    seeds = range(M.SEEDS)
    linear = [U.ser(u) for u in M.utilities("linear", data, prefs)]
    shared = {
        "optidice": M._seeded(A.train_optidice, data, linear, key, config, discount=gamma),
        "bc": M._seeded(M._paired_bc, data, linear, key, config),
    }
    log(f"optidice, bc trained: {time.perf_counter() - start:.0f} s")
    out: dict = {"spread": spread.tolist()}
    for name in objective_names:
        family_utilities, objectives, keys = M.objective_set(name, data, prefs)
        seeded = dict(shared)
        seeded["serdice"] = M._seeded(
            A.train_serdice, data, [U.ser(u) for u in family_utilities], key, config,
            discount=gamma,
        )  # fmt: skip
        seeded["aetdice"] = M._seeded(A.train_aetdice, data, objectives, key, config)
        per_key: dict = {}
        labels: dict = {}
        for method, policies_by_key in seeded.items():
            for kind in LABELS:
                if kind == "scaled" and method in ("bc", "optidice"):
                    continue  # their acting label (checked below)
                values, used = [], []
                for s in seeds:
                    row, row_labels = [], []
                    for policy, objective, k in zip(
                        policies_by_key[s], objectives, keys, strict=True
                    ):
                        label = policy.label
                        w = np.asarray(objective.utility.weights, np.float64)
                        if kind == "weights":
                            label = jnp.asarray(w / w.sum(), jnp.float32)
                        elif kind == "scaled":
                            label = jnp.asarray(envs.behaviour_label(data[s], w))
                        elif method in ("bc", "optidice"):
                            scaled = envs.behaviour_label(data[s], w)
                            np.testing.assert_allclose(policy.label, scaled, rtol=1e-6)
                        result = score(dataclasses.replace(policy, label=label), objective, k)
                        row.append(float(result["value"]))
                        row_labels.append(np.asarray(label, np.float64).round(4).tolist())
                    values.append(float(np.mean(row)))
                    used.append(row_labels)
                per_key[f"{method}/{kind}"] = values
                labels[f"{method}/{kind}"] = used
                if kind == "acting" and method in ("bc", "optidice"):
                    per_key[f"{method}/scaled"] = values
                    labels[f"{method}/scaled"] = used
        entry = {"per_key": per_key, "labels": labels,
                 "means": {m: float(np.mean(v)) for m, v in per_key.items()}}  # fmt: skip
        for kind in LABELS:
            best = max(M.BASELINES, key=lambda b, kind=kind: np.mean(per_key[f"{b}/{kind}"]))
            entry[f"best_baseline/{kind}"] = best
            entry[f"aetdice - best/{kind}"] = _paired(
                per_key[f"aetdice/{kind}"], per_key[f"{best}/{kind}"]
            )
        for kind in ("scaled", "acting"):
            entry[f"{kind} - weights"] = {
                method: _paired(per_key[f"{method}/{kind}"], per_key[f"{method}/weights"])
                for method in seeded
            }
        entry["acting - scaled"] = {
            method: _paired(per_key[f"{method}/acting"], per_key[f"{method}/scaled"])
            for method in ("serdice", "aetdice")
        }
        out[name] = entry
        log(f"{name}: " + ", ".join(f"{m} {v:.4f}" for m, v in entry["means"].items())
            + f" ({time.perf_counter() - start:.0f} s)")  # fmt: skip
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="mo_halfcheetah", choices=("mo_hopper", "mo_halfcheetah"))
    parser.add_argument("--objectives", default="risk_averse/ser")
    parser.add_argument("--out", required=True)
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    names = nonlinear_objectives(args.objectives)
    results = probe(args.task, names)
    with open(args.out, "w") as f:
        f.write(dumps(
            {"command": "python -m benchmarks.morl_label_probe " + " ".join(argv),
             "environment": environment(), "task": args.task, "seeds": M.SEEDS,
             "results": results}, indent=1,
        ))  # fmt: skip


if __name__ == "__main__":
    main()
