"""A probe of AETDICE's policy inputs in the ``morl`` suite (not a suite).

On a Brax task's suite datasets, training keys and evaluation keys (so its AETDICE and
baseline scores reproduce the suite's cells where the machine's rounding agrees), it scores,
for the chosen ``family/criterion`` objectives, AETDICE as the suite runs it (a policy of the
augmented state: ``(s, t)`` under SER, ``(s, x, t)`` under ESR), AETDICE with
``markov_policy=True`` (the same ratios, cloned into a policy of the observation alone, as the
baselines' are) and the baselines (SER-DICE, OptiDICE, BC(P)). Per objective it records every
method's per-key scores, the best baseline by mean, and the paired margins (key by key) of both
AETDICE forms to it and to each other, with their standard errors over the keys.

The question it answers: whether the inputs the augmented state adds cost the weighted cloning
more than the ratios gain where the ratios are nearly flat (``alpha = 1``).

Runs at dbeb14d (``probes/morl_policy_*.json``; both reproduce the committed ``morl.json``
cells key for key), margins paired over the 3 keys (mean, SE):

* halfcheetah threshold ESR: the Markov extraction gains +0.0027 (0.0004) on the augmented
  policy, every key higher, and leads the best baseline (SER-DICE) by +0.0004 (0.0002);
* halfcheetah Tchebycheff SER: +0.0018 (0.0031); OptiDICE leads both forms;
* hopper Nash SER: +0.0054 (0.0079); SER-DICE leads both forms, within the keys' noise
  (the methods' scores range over -0.01 .. 0.09 from one dataset to the next);
* hopper Nash ESR: -0.0034 (0.0015): there the augmented policy does better.

So dropping the extra inputs is no uniform remedy: it pays on one ESR cell and costs on
another.

The run that also records ``mean_returns`` and ``mu_last`` (this module on the library of
bc381de; ``probes/morl_policy_halfcheetah_tchebycheff.json``, Tchebycheff SER alone) shows why
OptiDICE leads there. Every nonlinear DICE
method ends with ``mu`` on the run objective at all three preferences (``(0.699, 0.002)`` at
``w = (0.7, 0.3)``), while at ``w = (0.5, 0.5)`` and ``(0.7, 0.3)`` the minimum of ``w_i (G_i -
z_i)`` lies on energy, both at the data's mean return (0.113 against 0.321 at ``(0.7, 0.3)``;
``z`` is the suite's reference point, :func:`benchmarks.morl.utilities`) and at every
method's deployed returns. So the ratios push the objective that is not binding, and the
linear method, whose ``mu = w``, does better on the Tchebycheff utility than the methods
built for it.

With the mass bound (the DICE dual's ``c_1 E_D[w] <= 1``, :mod:`jaxopt_suite.rl.aetdice.dice`;
this module at 4b66c06, ``probes/morl_mass_halfcheetah.json``, 37 min here; BC(P), which has
no ratios, reproduces its scores above key for key) every DICE method's batch mean of ``w*``
ends at 1.00 and, under Tchebycheff SER, AETDICE's ``mu`` moves to energy at ``w = (0.7, 0.3)``
(``(0.003, 0.299)``) and splits at ``(0.5, 0.5)``. Against the runs above, key by key:

* halfcheetah Tchebycheff SER: SER-DICE +0.025 and AETDICE +0.026 (every key higher),
  OptiDICE +0.0025; AETDICE (0.2652) now leads OptiDICE (0.2479), and the best baseline,
  SER-DICE (0.2638), by +0.0014 (paired SE 0.0018: SER-DICE solves the same problem);
* halfcheetah threshold ESR: within noise (AETDICE +0.0007); AETDICE 2.1250 trails the best
  baseline (OptiDICE, 2.1267) by -0.0017 (SE 0.0024).

The runs before ``morl_mass_halfcheetah.json`` were made without the mass bound, which is on by
default since 4b66c06: to train as they did at a later commit, add ``--without-mass-bound``.

Held out (``--replicates 5,6,7,8,9``: five datasets no table uses, one training key each; this
module at 4ee3105, ``probes/morl_nash_halfcheetah_heldout.json``, 48 min here): is AETDICE's
halfcheetah Nash deficit in the suite (about one standard error over its three keys) the
draw of those keys? It is not. Paired margins to the best baseline, SER-DICE on both, over
the 5 keys (mean, SE):

* Nash SER: AETDICE -0.0108 (0.0030), lower at every key; the Markov extraction -0.0031
  (0.0025), and it gains +0.0077 (0.0041) on the augmented policy. AETDICE's ``mu`` and mass
  multiplier match SER-DICE's to about three digits (the same problem, finite horizon against
  discounted), so what it loses here the policy's time input loses.
* Nash ESR: AETDICE -0.0158 (0.0032), lower at every key; the Markov extraction -0.0028
  (0.0055), +0.0130 (0.0047) on the augmented policy. The ESR ratios are flatter: the mass
  multiplier ends at 0.95 .. 1.37, SER-DICE's at 1.46 .. 4.36.

The ESR rewards' anchor (``--variants``; :func:`jaxopt_suite.rl.aetdice.utilities.
projected_rewards`, the default since 0069647; ``aetdice_accumulated`` is the form of every
run above). On the same held-out data (``probes/morl_projected_halfcheetah_heldout.json``,
this module at 0069647: its ``git_sha`` reads 428dc4a, the commit when the file was written,
which changed this module only; 61 min here; the accumulated form and the baselines reproduce
the run above key for key), paired over the 5 keys, projected minus accumulated:

* Nash ESR: +0.0008 (0.0050); AETDICE still trails SER-DICE (-0.0150, SE 0.0082), and the
  Markov extraction of the projected form trails it by -0.0041 (0.0045);
* threshold ESR: +0.0009 (0.0016); AETDICE -0.0021 (0.0012) to the best baseline (BC(P)).

On the hopper, whose episodes end early (held-out replicates 5-7,
``probes/morl_projected_hopper_heldout.json``, run at 4bf4e20: its ``git_sha`` reads
32f8c3a, the commit when the file was written, which reordered an ``__all__`` only; 14 min
here), Nash ESR: projected minus accumulated +0.0047 (0.0084), the keys
disagreeing (+0.019, +0.005, -0.010); AETDICE +0.0062 (0.0084) over the best baseline (BC(P)).

So the anchor is not what holds AETDICE back on halfcheetah. Under the projected anchor the
mass bound no longer binds there (multiplier 0 .. 0.05) and on threshold ESR the ratios'
batch mean ends at 0.89 .. 0.98: without early ends the flow fixes the mass at 1, which the
bound, an inequality, does not enforce from below.

On the balance task (``probes/morl_projected_balance.json``, the suite's 3 keys, 16 min
here; the accumulated form reproduces the committed ``morl.json`` cells) the projected anchor
does better on every ESR objective at every key, and comes closer to the optimum (worst
preference, mean over the keys):

* Nash ESR: +0.0064 (0.0011), gap to the optimum 1.17% against 3.65%;
* Tchebycheff ESR: +0.0012 (0.0004), 1.06% against 1.63%;
* threshold ESR: +0.0021 (0.0009), 0.36% against 0.78%;
* risk-averse ESR: +0.0003 (0.0001), 0.42% against 0.50%.

Would the Markov extraction under SER alone (where ``h = id`` and the policy drops only the
time) serve as the default? It gains on the Brax tasks (halfcheetah Nash SER +0.0077 held
out, above; Tchebycheff SER +0.0018, hopper Nash SER +0.0054 on the suite's keys), but on
the balance task (``probes/morl_markov_balance_ser.json``, this module at 51cbe8a, the
suite's 3 keys, 33 min here while another suite ran; the augmented form reproduces the
committed ``morl.json`` SER cells) it loses on every SER objective, Markov minus augmented:

* Nash SER: -0.0012 (0.0003); Tchebycheff SER: -0.0058 (0.0018);
* threshold SER: -0.0007 (0.0014), and the Markov form falls below SER-DICE (-0.0006);
* risk-averse SER: -0.0003 (0.00005).

Over 10 steps the time input carries the finite horizon's end, which the policy uses; so
neither form is better everywhere, and the default stays the augmented state.

Behaviour data whose preferences act apart (``--behaviour-iterations 400
--behaviour-sampling rows``: every dataset, the suite's five included, from a PPO behaviour run
whose rows follow their weights more closely, :mod:`benchmarks.morl_behaviour_probe`;
``probes/morl_nash_halfcheetah_behaviour400.json``, this module at b20e761, the suite's 3
keys). The utilities are read off that data, so the scores
do not compare with the suite's. Paired margins of AETDICE to the best baseline (mean, SE):

* Nash SER: +0.0032 (0.0033) over BC(P), two keys of three higher;
* Nash ESR: +0.0034 (0.0037) over OptiDICE, two keys of three higher.

On the suite's data both margins are negative (-0.0066 and -0.0151 at cdc44da), ESR's
systematically so on held-out replicates (above). With the wider data they are positive,
within one standard error.

Is the hopper's Nash SER deficit in the suite (AETDICE -0.0062 to BC(P) over its 3 keys, the
worst Brax cell of ``morl.json``) systematic, as halfcheetah's was on held-out data? Eight
held-out replicates (``--replicates 5,...,12``, one training key each;
``probes/morl_nash_hopper_heldout.json``, this module at c342252, 40 min here while the
tests ran beside it; written to ``/tmp`` as its ``command`` reads, then moved), paired over
the 8 keys (mean, SE): AETDICE -0.0019 (0.0050) to the best baseline (SER-DICE), -0.0014
(0.0065) to BC(P), +0.0011 (0.0055) to OptiDICE; three keys of eight above SER-DICE, the
per-key margins spanning -0.026 .. +0.017. Within half a standard error: no sign of a
systematic deficit there, where halfcheetah's held-out Nash SER margin was -0.0108 (0.0030)
with every key lower.

The hopper's two ESR cells below the best baseline in the suite (Nash ESR -0.0038 and
risk-averse ESR -0.0021 to BC(P), 3 keys) on the same 8 held-out replicates
(``probes/morl_esr_hopper_heldout.json``, this module at 38d34ab, 49 min here, the tests and
other training runs beside it part of the time; written to ``/tmp``, then moved), paired
over the keys:

* Nash ESR: AETDICE +0.0066 (0.0032) over the best baseline (SER-DICE), seven keys of
  eight higher; +0.0070 (0.0036) over BC(P), +0.0094 (0.0034) over OptiDICE;
* risk-averse ESR: +0.0038 (0.0015) over SER-DICE, seven keys of eight higher; +0.0044
  (0.0017) over BC(P), +0.0055 (0.0015) over OptiDICE.

On held-out data AETDICE leads on both, by about two standard errors, which points to the
suite's negative margins there being the draw of its three keys.

The halfcheetah's two cells below the best baseline in the suite (threshold ESR -0.0004 to
OptiDICE, risk-averse SER -0.0024 to BC(P), 3 keys) on 8 held-out replicates of its data
(``probes/morl_halfcheetah_heldout.json``, this module at b1ce842, 39 min here for the
data, 89 min in all, other work beside it; written to ``/tmp``, then moved), paired over
the keys:

* threshold ESR: AETDICE -0.0018 (0.0011) to the best baseline (BC(P)), two keys of eight
  higher; -0.0010 (0.0013) to SER-DICE, +0.0012 (0.0010) over OptiDICE;
* risk-averse SER: -0.0008 (0.0007) to the best baseline (SER-DICE), three keys of eight
  higher; -0.0005 (0.0004) to BC(P), +0.0013 (0.0006) over OptiDICE.

Unlike the hopper's, these deficits do not turn on held-out data: they stay, at 1.6 and 1.1
standard errors and about 0.1% of the utility (1.79 and 0.438 there).

    PYTHONPATH=. python -m benchmarks.morl_policy_probe --task mo_halfcheetah \\
        --objectives tchebycheff/ser,threshold/esr \\
        --out benchmarks/results/probes/morl_policy_halfcheetah.json
    PYTHONPATH=. python -m benchmarks.morl_policy_probe --task mo_halfcheetah \\
        --objectives tchebycheff/ser \\
        --out benchmarks/results/probes/morl_policy_halfcheetah_tchebycheff.json
    PYTHONPATH=. python -m benchmarks.morl_policy_probe --task mo_halfcheetah \\
        --objectives tchebycheff/ser,threshold/esr \\
        --out benchmarks/results/probes/morl_mass_halfcheetah.json
    PYTHONPATH=. python -m benchmarks.morl_policy_probe --task mo_halfcheetah \\
        --objectives nash/ser,nash/esr --replicates 5,6,7,8,9 \\
        --out benchmarks/results/probes/morl_nash_halfcheetah_heldout.json
    PYTHONPATH=. python -m benchmarks.morl_policy_probe --task mo_halfcheetah \\
        --objectives nash/esr,threshold/esr \\
        --variants aetdice,aetdice_accumulated,aetdice_markov --replicates 5,6,7,8,9 \\
        --out benchmarks/results/probes/morl_projected_halfcheetah_heldout.json
    PYTHONPATH=. python -m benchmarks.morl_policy_probe --task mo_hopper \\
        --objectives nash/esr --variants aetdice,aetdice_accumulated --replicates 5,6,7 \\
        --out benchmarks/results/probes/morl_projected_hopper_heldout.json
    PYTHONPATH=. python -m benchmarks.morl_policy_probe --task mo_balance \\
        --objectives nash/esr,tchebycheff/esr,threshold/esr,risk_averse/esr \\
        --variants aetdice,aetdice_accumulated \\
        --out benchmarks/results/probes/morl_projected_balance.json
    PYTHONPATH=. python -m benchmarks.morl_policy_probe --task mo_balance \\
        --objectives nash/ser,tchebycheff/ser,threshold/ser,risk_averse/ser \\
        --variants aetdice,aetdice_markov \\
        --out benchmarks/results/probes/morl_markov_balance_ser.json
    PYTHONPATH=. python -m benchmarks.morl_policy_probe --task mo_halfcheetah \\
        --objectives nash/ser,nash/esr --variants aetdice --behaviour-iterations 400 \\
        --behaviour-sampling rows \\
        --out benchmarks/results/probes/morl_nash_halfcheetah_behaviour400.json
    PYTHONPATH=. python -m benchmarks.morl_policy_probe --task mo_hopper \\
        --objectives nash/ser --variants aetdice --replicates 5,6,7,8,9,10,11,12 \\
        --out benchmarks/results/probes/morl_nash_hopper_heldout.json
    PYTHONPATH=. python -m benchmarks.morl_policy_probe --task mo_hopper \\
        --objectives nash/esr,risk_averse/esr --variants aetdice \\
        --replicates 5,6,7,8,9,10,11,12 \\
        --out benchmarks/results/probes/morl_esr_hopper_heldout.json
    PYTHONPATH=. python -m benchmarks.morl_policy_probe --task mo_halfcheetah \\
        --objectives threshold/esr,risk_averse/ser --variants aetdice \\
        --replicates 5,6,7,8,9,10,11,12 \\
        --out benchmarks/results/probes/morl_halfcheetah_heldout.json
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
from jaxopt_suite.rl.aetdice import exact
from jaxopt_suite.rl.aetdice import utilities as U

LAST = 1000  # iterations the multipliers are averaged over
# AETDICE's forms a probe can score: the policy's inputs and the rewards' anchor
# (:func:`jaxopt_suite.rl.aetdice.train_aetdice`); "aetdice" is the library's default
VARIANTS = {
    "aetdice": {},
    "aetdice_markov": {"markov_policy": True},
    "aetdice_accumulated": {"telescoping": "accumulated"},
    "aetdice_accumulated_markov": {"telescoping": "accumulated", "markov_policy": True},
}


def _data_returns(datasets) -> dict:
    """The datasets' mean episode return, overall and per behaviour preference."""
    returns = np.concatenate([np.asarray(envs.episode_returns(d)) for d in datasets])
    preferences = np.concatenate([np.asarray(d.preferences) for d in datasets])
    by_preference = {}
    for p in np.unique(preferences, axis=0):
        label = str([round(float(x), 3) for x in p])
        by_preference[label] = returns[np.all(preferences == p, axis=1)].mean(0).tolist()
    return {"all": returns.mean(0).tolist(), "by_preference": by_preference}


def _paired(ours, theirs) -> dict:
    difference = np.asarray(ours) - np.asarray(theirs)
    se = float(difference.std(ddof=1) / np.sqrt(difference.size))
    return {"mean": float(difference.mean()), "se": se, "per_key": difference.tolist()}


def probe(
    task_name: str, labels, log=print, mass_constraint: bool = True, replicates=None,
    variants=("aetdice", "aetdice_markov"), behaviour: dict | None = None,
) -> dict:  # fmt: skip
    """Scores on the suite's datasets and training keys, or with ``replicates`` (held out:
    ``>= LINEAR_SEEDS``) on those replicates of the data-making instead, replicate ``r`` with
    the training key ``fold_in(key(TRAIN_KEY), r)``; the suite's datasets still fix the reward
    normalisation and the utilities' parameters, as in :mod:`benchmarks.morl_probe`.
    ``variants``: the AETDICE forms scored (:data:`VARIANTS`; ``"aetdice"`` always).
    ``behaviour`` overrides the task's behaviour run (``behaviour_iterations``,
    ``behaviour_sampling``: :func:`benchmarks.morl.dataset`) for every dataset, the suite's
    included, so the normalisation and the utilities are read off data made that way."""
    variants = ["aetdice", *(v for v in variants if v != "aetdice")]
    task = M.TASKS[task_name]
    # every DICE method with or without the mass bound (:mod:`jaxopt_suite.rl.aetdice.dice`)
    task = dict(task, dice=dataclasses.replace(task["dice"], mass_constraint=mass_constraint))
    task.update(behaviour or {})
    start = time.perf_counter()
    data, spread, _ = M.task_data(task_name, task)
    if replicates is None:
        training, seeds = data, range(M.SEEDS)
    else:
        training = M.replicate_data(task_name, task, replicates, data, spread)
        seeds = list(replicates)
    log(f"data: {time.perf_counter() - start:.0f} s")
    balance = task_name == "mo_balance"
    env = envs.make_multi_objective(task_name, **({"slip": M.SLIP} if balance else {}))
    score = M._Scorer(env, spread, M.EVAL_EPISODES[task_name])
    config, prefs = task["dice"], task["preferences"]
    key = jax.random.key(M.TRAIN_KEY)
    gamma = 1.0 - 1.0 / task["horizon"]

    def scores(seeded, objectives, keys) -> tuple[list, list]:
        """Per key: the value and the mean returns per preference."""
        runs = [
            [score(p, o, k) for p, o, k in zip(policies, objectives, keys, strict=True)]
            for policies in seeded
        ]
        values = [[float(r["value"]) for r in run] for run in runs]
        return values, [[r["mean_return"] for r in run] for run in runs]

    def last(seeded, metric) -> list:
        """Per key and preference, a DICE policy's training ``metric`` averaged over the last
        ``LAST`` iterations: ``mu`` (the utility's supergradient the ratios were trained at),
        ``mass`` (the mass bound's multiplier) or ``ratio_mean`` (the batch mean of ``w*``)."""
        return [
            [np.asarray(p.metrics[metric])[-LAST:].mean(0).tolist() for p in policies]
            for policies in seeded
        ]

    linear = [U.ser(u) for u in M.utilities("linear", data, prefs)]
    shared = {
        "optidice": M._seeded(
            A.train_optidice, training, linear, key, config, seeds, discount=gamma
        ),
        "bc": M._seeded(M._paired_bc, training, linear, key, config, seeds),
    }
    log(f"optidice, bc trained: {time.perf_counter() - start:.0f} s")
    out: dict = {}
    for label in labels:
        family_utilities, objectives, keys = M.objective_set(label, data, prefs)
        seeded = dict(shared)
        seeded["serdice"] = M._seeded(
            A.train_serdice, training, [U.ser(u) for u in family_utilities], key, config,
            seeds, discount=gamma,
        )  # fmt: skip
        for variant in variants:
            seeded[variant] = M._seeded(
                A.train_aetdice, training, objectives, key, config, seeds, **VARIANTS[variant]
            )
        scored = {method: scores(s, objectives, keys) for method, s in seeded.items()}
        per_preference = {method: values for method, (values, _) in scored.items()}
        # per key, the mean over the preferences
        per_key = {m: [float(np.mean(v)) for v in values] for m, values in per_preference.items()}
        best = max(M.BASELINES, key=lambda b: np.mean(per_key[b]))
        out[label] = {
            "per_key": per_key,
            "per_preference": per_preference,
            "mean_returns": {method: returns for method, (_, returns) in scored.items()},
            **{
                f"{metric}_last": {m: last(s, metric) for m, s in seeded.items() if m != "bc"}
                for metric in ("mu", "mass", "ratio_mean")
            },
            "data_mean_return": _data_returns([training[s] for s in seeds]),
            "means": {method: float(np.mean(v)) for method, v in per_key.items()},
            "best_baseline": best,
            **{f"{v} - best": _paired(per_key[v], per_key[best]) for v in variants},
            **{f"{v} - aetdice": _paired(per_key[v], per_key["aetdice"]) for v in variants[1:]},
        }
        if balance:  # the gap of the mean over the keys to the optimum, worst preference
            optimum = [
                float(exact.optimum(o, task["horizon"], M.SLIP, scale=spread)[0])
                for o in objectives
            ]
            out[label]["optimum"] = optimum
            optimal = np.asarray(optimum)
            out[label]["optimum_gap"] = {
                m: float(np.max((optimal - np.mean(values, axis=0)) / np.abs(optimal)))
                for m, values in per_preference.items()
            }
        log(f"{label}: " + ", ".join(f"{m} {v:.4f}" for m, v in out[label]["means"].items())
            + f" ({time.perf_counter() - start:.0f} s)")  # fmt: skip
    return out


def nonlinear_objectives(argument: str) -> list[str]:
    """The comma-separated ``--objectives``, each a nonlinear objective of the suite, or a
    ValueError naming those that are not."""
    names = argument.split(",")
    unknown = [name for name in names if name not in M.OBJECTIVES or name.startswith("lin")]
    if unknown:
        raise ValueError(
            f"--objectives must be nonlinear objectives of the suite "
            f"{[o for o in M.OBJECTIVES if not o.startswith('lin')]}, got {unknown}"
        )
    return names


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="mo_halfcheetah", choices=tuple(M.TASKS))
    parser.add_argument("--objectives", default="tchebycheff/ser,threshold/esr")
    parser.add_argument("--out", required=True)
    parser.add_argument(
        "--without-mass-bound", action="store_true",
        help="train every DICE method without the mass bound (DiceConfig.mass_constraint)",
    )  # fmt: skip
    parser.add_argument(
        "--replicates", default=None,
        help="held-out replicates of the data-making to train on (>= LINEAR_SEEDS; by default "
        "the suite's datasets and training keys)",
    )  # fmt: skip
    parser.add_argument(
        "--variants", default="aetdice,aetdice_markov",
        help=f"the AETDICE forms to score, among {list(VARIANTS)} ('aetdice' always)",
    )  # fmt: skip
    parser.add_argument(
        "--behaviour-iterations", type=int, default=None,
        help="PPO iterations of the behaviour run behind every dataset (default: the suite's)",
    )  # fmt: skip
    parser.add_argument(
        "--behaviour-sampling", default=None, choices=envs.PREFERENCE_SAMPLING,
        help="how the behaviour run draws each slot's preference (default: the suite's)",
    )  # fmt: skip
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    behaviour = {}
    if args.behaviour_iterations is not None:
        if args.task == "mo_balance" or args.behaviour_iterations < 1:
            raise ValueError(
                f"--behaviour-iterations must be >= 1 on a Brax task (the balance task's "
                f"behaviour is scripted), got {args.behaviour_iterations} on {args.task}"
            )
        behaviour["behaviour_iterations"] = args.behaviour_iterations
    if args.behaviour_sampling is not None:
        if args.task == "mo_balance":
            raise ValueError("--behaviour-sampling is for a Brax task (the balance task's "
                             "behaviour is scripted)")  # fmt: skip
        behaviour["behaviour_sampling"] = args.behaviour_sampling
    behaviour = behaviour or None
    replicates = None
    if args.replicates is not None:
        replicates = [int(r) for r in args.replicates.split(",")]
        if any(r < M.LINEAR_SEEDS for r in replicates) or len(set(replicates)) < 2:
            raise ValueError(
                f"--replicates must be at least two distinct held-out replicates >= "
                f"{M.LINEAR_SEEDS} (the suite's are 0..{M.LINEAR_SEEDS - 1}), got {replicates}"
            )
    variants = args.variants.split(",")
    if any(v not in VARIANTS for v in variants):
        raise ValueError(f"--variants must be among {list(VARIANTS)}, got {variants}")
    variants = ["aetdice", *(v for v in variants if v != "aetdice")]
    labels = nonlinear_objectives(args.objectives)
    results = probe(
        args.task, labels, mass_constraint=not args.without_mass_bound, replicates=replicates,
        variants=variants, behaviour=behaviour,
    )  # fmt: skip
    with open(args.out, "w") as f:
        f.write(dumps(
            {"command": "python -m benchmarks.morl_policy_probe " + " ".join(argv),
             "environment": environment(), "task": args.task,
             "seeds": M.SEEDS if replicates is None else len(replicates),
             "mass_constraint": not args.without_mass_bound,
             "replicates": replicates, "variants": variants, "behaviour": behaviour,
             "results": results}, indent=1,
        ))  # fmt: skip


if __name__ == "__main__":
    main()
