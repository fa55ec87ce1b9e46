"""A probe of the label a behaviour-conditioned policy acts at, on the ``morl`` suite's Brax
data (not a suite).

On a task's suite datasets, training keys and evaluation keys, it trains every method once per
objective, as the suite does, and scores each policy at up to four labels (the label is read
only when the policy acts, so every score comes from one network; ``--labels`` picks them):

* ``weights``: the utility's weights over their sum, read as a behaviour preference: the label
  the library gives its conditioned policies, ``policy.label``
  (:func:`jaxopt_suite.rl.aetdice.policy.trained_policies`), read from the policy itself;
* ``scaled``: the preference that weighs the normalised rewards as the utility's weights do
  (:func:`envs.behaviour_label`): a behaviour preference weighs the rewards as collected,
  and the suite divides them by ``spread`` (:func:`benchmarks.morl.normalised`);
* ``multipliers``: for a DICE policy of a SER objective (SER-DICE, AETDICE), the preference
  that weighs the normalised rewards as its final multipliers ``mu`` do (``metrics["mu"]``'s
  last row): for a concave ``g`` the SER optimum maximises the linear scalarisation at ``mu``;
* ``mu``: the same multipliers over their sum, read as a behaviour preference the way
  ``weights`` reads the utility's weights (no translation into the rewards' units).

Per objective it records each method's per-key scores and labels under each, and the paired
margins (over the keys) of AETDICE to the best baseline under ``weights``, and of each
method's other labels to its ``weights``.

    PYTHONPATH=. python -m benchmarks.morl_label_probe --task mo_halfcheetah \\
        --objectives risk_averse/ser,nash/ser \\
        --out /tmp/morl_label_halfcheetah.json

``benchmarks/results/probes/morl_label_halfcheetah.json`` is that command with
``--labels weights,mu`` (and another ``--out``; its ``command`` field), at e2aeb41 (its
``environment``). Means over the three training keys:

* risk-averse SER: OptiDICE 0.4398, BC(P) 0.4408, SER-DICE 0.4413, AETDICE 0.4422 at
  ``weights``; at ``mu`` SER-DICE 0.4451 and AETDICE 0.4443;
* Nash SER: OptiDICE 0.6411, BC(P) 0.6228, SER-DICE 0.6341, AETDICE 0.6399 at ``weights``;
  at ``mu`` SER-DICE 0.6465 and AETDICE 0.6454.

Acting at ``mu`` raises both SER DICE methods (paired over the keys, SER-DICE by
0.0038 +- 0.0014 and 0.0124 +- 0.0033, AETDICE by 0.0021 +- 0.0016 and 0.0055 +- 0.0045), and
SER-DICE, a baseline, gains more: acting at the multipliers would not put AETDICE above the
best baseline on this task.
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

LABELS = ("weights", "scaled", "multipliers", "mu")
MULTIPLIER_LABELS = ("multipliers", "mu")  # SER-DICE and AETDICE under SER only


def _label(kind: str, dataset, objective, policy) -> jax.Array:
    """The label of ``kind`` (module docstring) for ``policy`` trained on ``dataset`` for
    ``objective``."""
    if kind == "weights":  # the label the library gave the policy, to the last bit
        if policy.label is None:
            raise ValueError("the policy carries no label: it is not behaviour-conditioned")
        return jnp.asarray(policy.label)
    if kind == "scaled":
        label = envs.behaviour_label(dataset, np.asarray(objective.utility.weights, np.float64))
    elif kind in MULTIPLIER_LABELS:  # the final multipliers, metrics["mu"]'s last row
        mu = np.maximum(np.asarray(policy.metrics["mu"][-1], np.float64), 0)
        if kind == "multipliers":
            label = envs.behaviour_label(dataset, mu)
        elif mu.sum() > 0:
            label = mu / mu.sum()
        else:
            raise ValueError(f"the final multipliers have no positive entry: {mu.tolist()}")
    else:
        raise ValueError(f"label kind must be one of {LABELS}, got {kind!r}")
    return jnp.asarray(label, jnp.float32)


def probe(task_name: str, objective_names, kinds=LABELS, log=print) -> dict:
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
        criterion = name.split("/")[1]
        seeded = dict(shared)
        seeded["serdice"] = M._seeded(
            A.train_serdice, data, [U.ser(u) for u in family_utilities], key, config,
            discount=gamma,
        )  # fmt: skip
        seeded["aetdice"] = M._seeded(A.train_aetdice, data, objectives, key, config)
        per_key: dict = {}
        labels: dict = {}
        for method, policies_by_key in seeded.items():
            for kind in kinds:
                if kind in MULTIPLIER_LABELS and (
                    method not in ("serdice", "aetdice") or criterion != "ser"
                ):
                    continue
                values, used = [], []
                for s in seeds:
                    row, row_labels = [], []
                    for policy, objective, k in zip(
                        policies_by_key[s], objectives, keys, strict=True
                    ):
                        label = _label(kind, data[s], objective, policy)
                        result = score(dataclasses.replace(policy, label=label), objective, k)
                        row.append(float(result["value"]))
                        row_labels.append(np.asarray(label, np.float64).round(4).tolist())
                    values.append(float(np.mean(row)))
                    used.append(row_labels)
                per_key[f"{method}/{kind}"] = values
                labels[f"{method}/{kind}"] = used
        entry = {"per_key": per_key, "labels": labels,
                 "means": {m: float(np.mean(v)) for m, v in per_key.items()}}  # fmt: skip
        best = max(M.BASELINES, key=lambda b: np.mean(per_key[f"{b}/weights"]))
        entry["best_baseline"] = best
        entry["aetdice - best"] = _paired(per_key["aetdice/weights"], per_key[f"{best}/weights"])
        for kind in kinds[1:]:
            entry[f"{kind} - weights"] = {
                method: _paired(per_key[f"{method}/{kind}"], per_key[f"{method}/weights"])
                for method in seeded
                if f"{method}/{kind}" in per_key
            }
        out[name] = entry
        log(f"{name}: " + ", ".join(f"{m} {v:.4f}" for m, v in entry["means"].items())
            + f" ({time.perf_counter() - start:.0f} s)")  # fmt: skip
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="mo_halfcheetah", choices=("mo_hopper", "mo_halfcheetah"))
    parser.add_argument("--objectives", default="risk_averse/ser")
    parser.add_argument(
        "--labels", default=",".join(LABELS),
        help=f"comma-separated, 'weights' first, among {', '.join(LABELS)}",
    )  # fmt: skip
    parser.add_argument("--out", required=True)
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    names = nonlinear_objectives(args.objectives)
    labels = tuple(args.labels.split(","))
    if labels[0] != "weights" or len(set(labels)) != len(labels) or set(labels) - set(LABELS):
        parser.error(f"--labels must name 'weights' first and then others of {LABELS} once "
                     f"each, got {args.labels!r}")  # fmt: skip
    results = probe(args.task, names, labels)
    with open(args.out, "w") as f:
        f.write(dumps(
            {"command": "python -m benchmarks.morl_label_probe " + " ".join(argv),
             "environment": environment(), "task": args.task, "seeds": M.SEEDS,
             "results": results}, indent=1,
        ))  # fmt: skip


if __name__ == "__main__":
    main()
