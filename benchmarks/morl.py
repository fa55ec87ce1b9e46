"""Suite ``morl``: offline nonlinear multi-objective RL, AETDICE against linear OptiDICE, a
FairDICE-style SER-DICE and preference-conditioned behaviour cloning.

Tasks (``envs.make_multi_objective``):

* ``mo_balance`` (10 steps, slip 0.3): data from a scripted behaviour that picks objective 0
  with probability ``w_0`` at 11 preferences ``w`` (40 episodes each, action noise 0.2); the
  optimum of every objective is known (:mod:`jaxopt_suite.rl.aetdice.exact`).
* ``mo_hopper`` (forward, height, energy) and ``mo_halfcheetah`` (run, energy), 100-step
  episodes: a preference-conditioned PPO behaviour policy (``train_behaviour``) is trained
  in the run, then rolled out with action noise ``NOISE`` at its preferences (D4MORL-like
  "amateur, wide" data: :func:`envs.collect` calls noisy data amateur). Halfcheetah's
  behaviour run trains 400 iterations, each slot on one row of the preference grid
  (``behaviour_sampling="rows"``); hopper's 60, on mixtures of the rows (the suite's
  :data:`BEHAVIOUR_SAMPLING`). At 80 iterations on mixtures, as up to the run at cdc44da,
  halfcheetah's data barely depended on the preference: the rows' mean run returns lay
  between 96 and 150 and fell as the run weight rose (rank correlation -0.3), while at 400
  iterations on rows they lie between 178 and 273 and follow it (0.7;
  ``benchmarks.morl_behaviour_probe``, ``probes/morl_behaviour_halfcheetah.json``). On such
  data AETDICE came out ahead of every baseline on halfcheetah Nash, SER and ESR, where it had
  trailed (``probes/morl_nash_halfcheetah_behaviour400.json``). Hopper's rows already follow
  their weights at 60 iterations (rank correlation 0.93 on forward and height,
  ``probes/morl_behaviour_hopper.json``).

Each task has ``LINEAR_SEEDS`` datasets, replicates of its data-making (:func:`dataset`; the
behaviour run and its rollouts draw with the replicate's keys), and training key ``s`` trains
every method on dataset ``s``: a score is then a mean over datasets too. One dataset was one
draw of the whole comparison: the hopper's PPO behaviour run ends elsewhere on another CPU
(final return 125.06 on an AMD EPYC (avx2) against 134.16 in the runs up to 79fe376 and at
d1b70ec, the latter on an AMD EPYC (avx512f), from the same keys), and on the avx2 machine's
data AETDICE led SER-DICE on hopper Tchebycheff SER (0.190 against 0.187 over 3 training keys)
where the run at 79fe376 had it behind (0.151 against 0.159). All of a task's rewards are
divided by the range of the episode returns per objective over its datasets together, and the
utilities' parameters are read off them together, so every replicate optimises the same
objectives and the parameters mean the same on every task. The utilities, each at the
evaluation preferences ``w`` (3 per task):

* nonlinear: Nash welfare ``sum w_i log(G_i + shift)`` (``shift`` lifts the data's lowest
  accumulated return to ``NASH_FLOOR``), Tchebycheff ``min_i w_i (G_i - z_i)`` (``z`` the data's
  per-objective minimum), threshold ``sum w_i min(G_i, tau_i)`` (``tau`` the data's mean
  return), risk-averse ``sum w_i (1 - exp(-2 G_i)) / 2``;
* linear ``w^T G``, where SER and ESR coincide.

On the Brax tasks every DICE method (AETDICE, SER-DICE, OptiDICE) fits its policy conditioned
on the episodes' behaviour preferences and acts at the utility's normalised weights, as BC(P)
does (``DiceConfig.behaviour_conditioned``): a policy of the state alone mixed the behaviour
policies' gaits step by step (the run at 9e6b49b: on halfcheetah every DICE policy ran slower and
spent more energy than BC(P)). The weights are read as a behaviour preference, which weighs
the rewards as collected, not as normalised (halfcheetah's run rewards are divided by 14
times more than its energy ones); ``benchmarks.morl_label_probe`` scores the policies at their
translation into the behaviour's units (:func:`envs.behaviour_label`) as well.

For every nonlinear utility and criterion (SER, ESR): AETDICE on that objective; SER-DICE on the
utility's SER (the Markov method has no ESR form; its policy is scored on both); OptiDICE at
``w`` (one policy per preference, scored on everything); BC conditioned on ``w``. Each policy's
value comes from :func:`jaxopt_suite.rl.aetdice.evaluate` (online rollouts: sampled or
deterministic actions, chosen on one batch, measured on a fresh one). Every method is trained
with ``SEEDS`` keys (each on its own dataset), and its score is the mean over those keys and the
preferences, each key's policies scored on the same evaluation keys: one training key's score
moves by about as much as the methods differ, so a single key's ranking is mostly the draw of
its keys (hopper, run at a3d3515, Nash SER: SER-DICE's three keys scored 0.199, 0.231 and 0.253,
while the four methods' means lie between 0.218 and 0.239). The training keys are paired too: at
training key ``k`` every method fits its policy for the ``i``-th objective with
``split(k, n)[i]``, so all of them draw the same minibatches, and BC(P)'s network is fitted once
per objective for that (``_paired_bc``). One network for all objectives, from ``k`` itself, gave
BC(P) a draw of its own (run at a3d3515, hopper, Nash SER: 0.239 against AETDICE's 0.220).
``se`` is the standard error over the keys' scores (training and evaluation noise),
``se_evaluation`` that of the evaluation alone (a bootstrap over episodes). Hypervolume and
sparsity are those of each key's expected returns across the preferences, averaged over the
keys. ``key_margins`` holds the margins to the best baseline key by key as well
(:func:`key_margins`).

AETDICE anchors its ESR rewards at the projected return since 0069647
(:func:`jaxopt_suite.rl.aetdice.utilities.projected_rewards`); the run at 2d87c21 is the
first with it. Against the run at 9bba5f7 (accumulated anchor; the same datasets and keys:
every SER cell, which the anchor does not touch, came out equal to the last digit) it lifted
every ESR cell of the balance task (the worst gap to the optimum from 3.6% to 1.2%); on the
Brax tasks its ESR cells moved within their standard errors (halfcheetah Tchebycheff ESR
+0.008, hopper Nash ESR -0.004 at an SE of 0.025). Halfcheetah Nash ESR trailed the best
baseline by 0.013 there (by 0.015 in the run at cdc44da, on an Intel CPU where 2d87c21's ran
on an AMD one: its Brax datasets and scores differ, as chaotic training's do with the float
rounding; the code changed between the two runs as well), and on held-out replicates
(``benchmarks.morl_policy_probe``) AETDICE trailed SER-DICE there at every key. That data came
from 80 behaviour iterations on mixtures, whose preferences barely acted apart. In the run at
f229f37, the first with 400 iterations on rows (the same CPU model as cdc44da's; balance and
hopper came out equal to the last digit), AETDICE leads halfcheetah Nash SER by 0.0032 and ESR
by 0.0034; halfcheetah's worst margin is risk-averse SER, 0.0024 behind BC(P) (SEs 0.0019 and
0.0017), and the Brax tasks' worst is still hopper Nash SER, 0.0062 behind BC(P) (SEs 0.018
and 0.012).

Targets (same run): for every nonlinear utility and both criteria, AETDICE's score >= the best
baseline's on the balance task (and within 5% of the optimum at every preference) and on both
Brax tasks; for the linear utility AETDICE matches OptiDICE within noise (``|diff| <= 2 SE``).

The linear match's noise is that of the methods' scores over ``LINEAR_SEEDS`` training keys
(the table's ``SEEDS`` and ``LINEAR_SEEDS - SEEDS`` more, each on its own dataset and scored
on the same evaluation keys):
``SE = sqrt(Var_a / S + Var_o / S)`` over the per-key scores, which holds the evaluation's
sampling noise and the training's. The evaluation's alone understates it wherever the
episodes barely vary (hopper, run at d15fa0b: a bootstrap SE of 0.001 on a score of 1.06,
while each method's score moved by a std of 0.008 from key to key); the result keeps that
ratio too (``linear_match.evaluation_only``).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import envs
from benchmarks.harness import Progress, SuiteResult, SummaryRow, Target
from jaxopt_suite.rl import aetdice as A
from jaxopt_suite.rl.aetdice import exact
from jaxopt_suite.rl.aetdice import utilities as U
from jaxopt_suite.rl.aetdice.behaviour import train_behaviour
from jaxopt_suite.rl.morl_metrics import hypervolume, pareto_front, sparsity
from jaxopt_suite.rl.ppo_lagrangian import PPOLagrangianConfig

NOISE = 0.3
# How the PPO behaviour run draws each slot's preference (envs.PreferenceConditionedWrapper):
# Dirichlet(1) mixtures of the grid's rows, which gather near the rows' mean, so the end rows,
# where the data is collected, are hardly trained (benchmarks.morl_behaviour_probe measures how
# far apart the data's rows end up).
BEHAVIOUR_SAMPLING = "mixture"
SLIP = 0.3  # the balance task's
# Nash welfare's shift lifts the data's lowest accumulated return to this (returns are scaled
# to a range of 1): the smaller, the more the log bends over the returns. At 0.5 it was nearly
# linear there: on the balance task the best Markov policy came within 1% of the optimum.
NASH_FLOOR = 0.1
EVAL_EPISODES = {"mo_balance": 1000, "mo_hopper": 200, "mo_halfcheetah": 200}
SEEDS = 3  # training keys per method (module docstring)
LINEAR_SEEDS = 5  # training keys of the linear match (module docstring)
BOOTSTRAP = 200
# The DICE methods' alpha on the Brax tasks (every DICE method's, so the comparison stays
# paired). It was 0.05 up to the run at d1b70ec; there one step's ratio reached about 30 times
# the batch mean (AETDICE, hopper Nash SER: the weighted cloning's gradient came from a
# handful of steps), and AETDICE trailed BC(P) on hopper Nash at every training key. On
# held-out datasets (replicates 5-7, which no table uses) alpha = 1 brought hopper Nash SER
# from 0.0352 to 0.0419 (BC(P): 0.0430) and ESR from 0.0433 to 0.0505, with the largest ratio
# near 4-6 times the mean (``benchmarks.morl_probe``).
BRAX_ALPHA = 1.0
FAMILIES = ("nash", "tchebycheff", "threshold", "risk_averse")
CRITERIA = ("ser", "esr")
# a task's objectives, in the order they are trained and scored (``family/criterion``)
OBJECTIVES = (*(f"{f}/{c}" for f in FAMILIES for c in CRITERIA), "linear/ser")
TRAIN_KEY = 7  # training key s is fold_in(key(TRAIN_KEY), s)
EVALUATION_KEY = 1000  # :func:`evaluation_keys`
BASELINES = ("serdice", "optidice", "bc")
TASKS = {
    "mo_balance": {
        "horizon": 10, "preferences": ((0.3, 0.7), (0.5, 0.5), (0.7, 0.3)),
        "dice": A.DiceConfig(iterations=12000, batch_size=256, hidden=(64, 64),
                             policy_hidden=(64, 64), alpha=0.02),
    },
    "mo_hopper": {
        "horizon": 100, "behaviour_iterations": 60, "episodes_per_preference": 50,
        "preferences": ((1 / 3, 1 / 3, 1 / 3), (0.5, 0.25, 0.25), (0.25, 0.5, 0.25)),
        "dice": A.DiceConfig(iterations=6000, batch_size=256, hidden=(128, 128),
                             policy_hidden=(128, 128), alpha=BRAX_ALPHA,
                             behaviour_conditioned=True),
    },
    "mo_halfcheetah": {
        "horizon": 100, "behaviour_iterations": 400, "behaviour_sampling": "rows",
        "episodes_per_preference": 50, "preferences": ((0.3, 0.7), (0.5, 0.5), (0.7, 0.3)),
        "dice": A.DiceConfig(iterations=6000, batch_size=256, hidden=(128, 128),
                             policy_hidden=(128, 128), alpha=BRAX_ALPHA,
                             behaviour_conditioned=True),
    },
}  # fmt: skip
QUICK_TASKS = {
    "mo_balance": dict(
        TASKS["mo_balance"], dice=dataclasses.replace(TASKS["mo_balance"]["dice"], iterations=3000)
    )
}


def _balance_behaviour(preference, observation, key):
    del observation
    choose_left = jax.random.bernoulli(key, preference[0] / jnp.sum(preference))
    return jnp.where(choose_left, 0.5, -0.5)[None]


def dataset(name: str, task: dict, replicate: int = 0) -> tuple[object, dict]:
    """The task's ``replicate``-th offline dataset (rewards not yet normalised) and how it was
    made: the balance task's scripted rollouts draw with ``key(replicate)``; on a Brax task
    the PPO behaviour run trains with ``key(2 * replicate)`` and is rolled out with
    ``key(2 * replicate + 1)``."""
    if name == "mo_balance":
        env = envs.make_multi_objective(name, slip=SLIP)
        prefs = envs.preference_grid(2, 11, "wide")
        data = envs.collect(
            env, _balance_behaviour, prefs, key=jax.random.key(replicate),
            episodes_per_preference=40, horizon=task["horizon"], action_noise=0.2,
            metadata={"coverage": "wide", "policy": "scripted: objective 0 w.p. w_0"},
        )  # fmt: skip
        return data, {"behaviour": "scripted", "replicate": replicate}
    env, prefs, policy, metrics, seconds = behaviour_run(name, task, replicate)
    data = envs.collect(
        env, policy, prefs, key=jax.random.key(2 * replicate + 1),
        episodes_per_preference=task["episodes_per_preference"], horizon=task["horizon"],
        action_noise=NOISE, metadata={"coverage": "wide", "policy": "PPO, preference-conditioned"},
    )  # fmt: skip
    curve = np.asarray(metrics["episode_return"], np.float64)
    return data, {
        "behaviour": "ppo",
        "replicate": replicate,
        "behaviour_preferences": prefs.tolist(),
        "behaviour_seconds": seconds,
        "behaviour_return_first_last": [float(curve[0]), float(curve[-1])],
    }


def behaviour_run(name: str, task: dict, replicate: int = 0):
    """The PPO behaviour run behind a Brax task's ``replicate``-th dataset (:func:`dataset`),
    at the task's ``behaviour_iterations`` and ``behaviour_sampling`` (the suite's
    :data:`BEHAVIOUR_SAMPLING` when absent), trained with ``key(2 * replicate)``:
    ``(env, preferences, policy, metrics, seconds)``, the preferences the grid it trains
    for and the data is collected at."""
    env = envs.make_multi_objective(name)
    m = env.reward_size
    prefs = envs.preference_grid(m, 3 if m == 3 else 5, "wide")
    config = PPOLagrangianConfig(
        num_envs=4 * len(prefs), episode_length=task["horizon"], unroll_length=task["horizon"],
        iterations=task["behaviour_iterations"],
    )  # fmt: skip
    start = time.perf_counter()
    policy, metrics = train_behaviour(
        env, prefs, jax.random.key(2 * replicate), config,
        sampling=task.get("behaviour_sampling", BEHAVIOUR_SAMPLING),
    )  # fmt: skip
    return env, prefs, policy, metrics, time.perf_counter() - start


def task_data(name: str, task: dict, replicates=range(LINEAR_SEEDS), spread=None):
    """The task's datasets ``replicates`` (:func:`dataset`), their rewards divided by
    ``spread`` (by default each objective's range of episode returns over these datasets
    together, :func:`return_range`): ``(data, spread, made)``, ``made`` how each was made."""
    raws, made = zip(*(dataset(name, task, r) for r in replicates), strict=True)
    spread = return_range(raws) if spread is None else np.asarray(spread, np.float64)
    return [normalised(raw, spread)[0] for raw in raws], spread, list(made)


def replicate_data(name: str, task: dict, replicates, data, spread) -> dict:
    """``{r: dataset}`` for ``replicates``: the suite's own (``data``, replicates
    ``0..LINEAR_SEEDS-1`` from :func:`task_data`) where it has them, the others (held out) made
    here and divided by the suite's ``spread``."""
    held_out = [r for r in replicates if r >= len(data)]
    made = task_data(name, task, held_out, spread)[0] if held_out else []
    made = dict(zip(held_out, made, strict=True))
    return {r: data[r] if r < len(data) else made[r] for r in replicates}


def objective_set(objective: str, data, preferences) -> tuple[list, list, object]:
    """For ``objective`` (a ``family/criterion`` of :data:`OBJECTIVES`): the family's utilities
    at ``preferences`` (:func:`utilities`, read off ``data``), the objectives of that criterion,
    and their evaluation keys (:func:`evaluation_keys`)."""
    family, criterion = objective.split("/")
    family_utilities = utilities(family, data, preferences)
    objectives = [getattr(U, criterion)(u) for u in family_utilities]
    return family_utilities, objectives, evaluation_keys(objective, len(objectives))


def evaluation_keys(objective: str, count: int):
    """The evaluation keys of ``objective`` (a ``family/criterion`` of :data:`OBJECTIVES`), one
    per preference: every method and training key is scored on them."""
    index = OBJECTIVES.index(objective)
    return jax.random.split(jax.random.fold_in(jax.random.key(EVALUATION_KEY), index), count)


def normalised(data, spread=None):
    """The dataset with each objective's rewards divided by ``spread`` (by default the range
    of its episode returns, :func:`return_range`), and that divisor."""
    spread = return_range([data]) if spread is None else np.asarray(spread, np.float64)
    return envs.scale_rewards(data, spread), spread


def return_range(datasets) -> np.ndarray:
    """Each objective's range of episode returns over all of ``datasets`` together."""
    returns = np.concatenate([np.asarray(envs.episode_returns(d), np.float64) for d in datasets])
    return np.maximum(returns.max(0) - returns.min(0), 1e-6)


def utilities(family: str, data, preferences) -> list:
    """The family's utility at each preference, its parameters read off the (normalised)
    dataset, or off a list of datasets of one horizon together."""
    datasets = data if isinstance(data, list) else [data]  # (a dataset is a tuple)
    rewards = np.concatenate(
        [np.asarray(d.rewards, np.float64) * np.asarray(d.mask)[..., None] for d in datasets]
    )
    partial = np.cumsum(rewards, axis=1)
    lowest = min(0.0, float(partial.min()))
    returns = partial[:, -1]
    out = []
    for w in preferences:
        w = np.asarray(w, np.float64)
        if family == "nash":
            out.append(U.nash_welfare(w, shift=NASH_FLOOR - lowest))
        elif family == "tchebycheff":
            out.append(U.tchebycheff(w, reference=returns.min(0)))
        elif family == "threshold":
            out.append(U.threshold(returns.mean(0), weights=w))
        elif family == "risk_averse":
            out.append(U.risk_averse(2.0, w))
        else:
            out.append(U.linear(w))
    return out


class _Scorer:
    """Evaluates policies online on the normalised rewards, with bootstrap standard errors.

    Every method is scored on one objective with the same key (common random numbers: the
    environment's randomness, e.g. the balance task's slips, and the first states are shared),
    so the differences between methods carry less noise than their values."""

    def __init__(self, env, spread, episodes: int):
        self.env = envs.RewardScaleWrapper(env, spread)
        self.episodes = episodes
        self.draws = np.random.default_rng(0).integers(0, episodes, (BOOTSTRAP, episodes))

    def __call__(self, policy, objective, key) -> dict:
        value, returns, deterministic = A.evaluate(
            self.env, policy, objective, key, episodes=self.episodes
        )
        boot = jax.vmap(lambda d: U.aet_value(objective, returns[d]))(jnp.asarray(self.draws))
        return {
            "value": value,
            "se": float(jnp.std(boot)),
            "mean_return": np.asarray(returns.mean(0)).tolist(),
            "deterministic": bool(deterministic),
        }


def run_task(name: str, task: dict, advance) -> dict:
    data, spread, made = task_data(name, task)  # replicate r's dataset: data[r]
    env = envs.make_multi_objective(name, **({"slip": SLIP} if name == "mo_balance" else {}))
    score = _Scorer(env, spread, EVAL_EPISODES[name])
    config = task["dice"]
    prefs = task["preferences"]
    key = jax.random.key(TRAIN_KEY)
    gamma = 1.0 - 1.0 / task["horizon"]
    cell: dict = {
        "data": made,
        "spread": spread.tolist(),
        "episodes": [int(d.mask.shape[0]) for d in data],
    }
    timings: dict = {}

    def timed(label, fn):
        start = time.perf_counter()
        out = fn()
        timings[label] = timings.get(label, 0.0) + time.perf_counter() - start
        return out

    # the hypervolume's reference point: below every replicate's lowest episode return
    reference = np.min([np.asarray(d.rewards.sum(1)).min(0) for d in data], 0) - 0.05
    linear_objectives = [U.ser(u) for u in utilities("linear", data, prefs)]
    optidice = timed("optidice", lambda: _seeded(
        A.train_optidice, data, linear_objectives, key, config, discount=gamma))  # fmt: skip
    bc = timed("bc", lambda: _seeded(_paired_bc, data, linear_objectives, key, config))
    advance()
    families = {}
    for family in (*FAMILIES, "linear"):
        family_utilities = utilities(family, data, prefs)
        serdice = None
        if family != "linear":
            objectives = [U.ser(u) for u in family_utilities]
            serdice = timed("serdice", lambda o=objectives: _seeded(
                A.train_serdice, data, o, key, config, discount=gamma))  # fmt: skip
        for criterion in CRITERIA if family != "linear" else ("ser",):
            objectives = [getattr(U, criterion)(u) for u in family_utilities]
            ours = timed("aetdice", lambda o=objectives: _seeded(
                A.train_aetdice, data, o, key, config))  # fmt: skip
            methods = {"aetdice": ours, "optidice": optidice, "bc": bc}
            if serdice is not None:
                methods["serdice"] = serdice
            keys = evaluation_keys(f"{family}/{criterion}", len(objectives))
            if family == "linear":
                linear_keys = keys  # the linear match scores its other keys on these
            entry = {
                method: _method_entry(score, seeded, objectives, keys, reference)
                for method, seeded in methods.items()
            }
            if name == "mo_balance":
                entry["optimum"] = [
                    exact.optimum(o, task["horizon"], SLIP, scale=spread)[0] for o in objectives
                ]
            families[f"{family}/{criterion}"] = entry
            advance()
    assert tuple(families) == OBJECTIVES  # the order evaluation_keys indexes
    cell["objectives"] = families
    cell["linear_match"] = timed("linear_seeds", lambda: _linear_match(
        data, linear_objectives, key, config, gamma, score, families["linear/ser"], linear_keys,
    ))  # fmt: skip
    cell["train_seconds"] = timings
    cell["key_margins"] = key_margins(cell)
    return cell


def key_margins(cell: dict) -> dict:
    """Per nonlinear objective (``family/criterion``) of a task's ``cell``, AETDICE's score
    minus the best baseline's at each training key (the best by mean, as in the targets), and
    per key the worst of them (``"worst"``): whether a mean margin's sign holds key by key.
    Keys are paired (same dataset, minibatches and evaluation keys), so these differences
    carry less noise than the scores themselves."""
    margins = {}
    for label, entry in cell["objectives"].items():
        if label.startswith("linear"):
            continue
        best = _best_baseline(entry)
        ours, theirs = (np.asarray(entry[m]["seed_scores"]) for m in ("aetdice", best))
        margins[label] = {"baseline": best, "per_key": (ours - theirs).tolist()}
    per_key = np.array([m["per_key"] for m in margins.values()])
    worst = per_key.min(axis=0).tolist() if per_key.size else []
    return {"objectives": margins, "worst": worst}


def _best_baseline(entry: dict) -> str:
    """The baseline with the highest mean score on one objective."""
    return max((b for b in BASELINES if b in entry), key=lambda b: entry[b]["score"])


def _seeded(train, data, objectives, key, config, seeds=range(SEEDS), **kwargs) -> list:
    """``train``'s policies for ``objectives``, replicate ``s`` trained on ``data[s]`` with the
    training key ``fold_in(key, s)``: a list over the seeds of lists over the objectives."""
    return [train(data[s], objectives, jax.random.fold_in(key, s), config, **kwargs) for s in seeds]


def _paired_bc(data, objectives, key, config) -> list:
    """BC(P) fitted once per objective, each fit with the key the DICE methods fit that
    objective with (their ``split(key, len(objectives))``): the same minibatches as theirs and,
    where the inputs agree (OptiDICE's and SER-DICE's), the same initial network (module
    docstring)."""
    keys = jax.random.split(key, len(objectives))
    return [A.train_bc(data, o, k, config) for o, k in zip(objectives, keys, strict=True)]


def _method_entry(score, seeded, objectives, keys, reference) -> dict:
    """A method's scores: each training key's policies on the evaluation ``keys`` (one per
    objective, shared by every key and method), and their means (module docstring)."""
    runs = [
        [score(p, o, k) for p, o, k in zip(policies, objectives, keys, strict=True)]
        for policies in seeded
    ]
    seed_scores = np.array([[r["value"] for r in run] for run in runs]).mean(axis=1)
    points = [np.array([r["mean_return"] for r in run]) for run in runs]
    evaluation = np.array([[r["se"] for r in run] for run in runs])
    return {
        "per_preference": [
            {
                "value": float(np.mean([run[i]["value"] for run in runs])),
                "seed_values": [run[i]["value"] for run in runs],
                "mean_return": np.mean([run[i]["mean_return"] for run in runs], axis=0).tolist(),
                "deterministic": [run[i]["deterministic"] for run in runs],
            }
            for i in range(len(objectives))
        ],
        "seed_scores": seed_scores.tolist(),
        "score": float(seed_scores.mean()),
        "se": float(seed_scores.std(ddof=1) / np.sqrt(len(runs))) if len(runs) > 1 else None,
        "se_evaluation": float(np.sqrt(np.sum(evaluation**2)) / evaluation.size),
        "hypervolume": float(np.mean([hypervolume(x, reference) for x in points])),
        "sparsity": float(np.mean([sparsity(x) for x in points])),
        "front_size": float(np.mean([pareto_front(x).shape[0] for x in points])),
    }


def _linear_match(data, objectives, key, config, gamma, score, entry, keys) -> dict:
    """AETDICE's and OptiDICE's linear-utility scores over ``LINEAR_SEEDS`` training keys
    (the table's ``SEEDS``, ``entry``, and seeds ``SEEDS, ..., LINEAR_SEEDS - 1``), each
    scored on the table's evaluation ``keys``, and ``|mean difference| / SE`` over them
    (module docstring)."""
    scores = {method: list(entry[method]["seed_scores"]) for method in ("aetdice", "optidice")}
    extra = range(SEEDS, LINEAR_SEEDS)
    more = {
        "aetdice": _seeded(A.train_aetdice, data, objectives, key, config, extra),
        "optidice": _seeded(A.train_optidice, data, objectives, key, config, extra,
                            discount=gamma),
    }  # fmt: skip
    for method, seeded in more.items():
        for trained in seeded:
            values = [score(p, o, e)["value"] for p, o, e in zip(trained, objectives, keys,
                                                                 strict=True)]  # fmt: skip
            scores[method].append(float(np.mean(values)))
    ours, theirs = (np.asarray(scores[m]) for m in ("aetdice", "optidice"))
    noise = np.sqrt((ours.var(ddof=1) + theirs.var(ddof=1)) / LINEAR_SEEDS)
    evaluation = np.hypot(entry["aetdice"]["se_evaluation"], entry["optidice"]["se_evaluation"])

    def ratio(difference, se):
        # equal to float32 precision (the balance task's optimum): no difference to weigh
        if abs(difference) <= 1e-6 * max(1.0, abs(float(ours.mean()))):
            return 0.0
        return float(abs(difference) / max(se, 1e-12))

    return {
        "seed_scores": scores,
        "difference": float(ours.mean() - theirs.mean()),
        "se": float(noise),
        "z": ratio(ours.mean() - theirs.mean(), noise),
        "evaluation_only": ratio(
            entry["aetdice"]["score"] - entry["optidice"]["score"], evaluation
        ),
    }


def run(*, quick: bool, out_dir: Path, progress: Progress) -> SuiteResult:
    tasks = QUICK_TASKS if quick else TASKS
    units = len(tasks) * (1 + len(FAMILIES) * len(CRITERIA) + 1)
    results = {}
    with progress.stage("morl: tasks x objectives", units) as advance:
        for name, task in tasks.items():
            results[name] = run_task(name, task, advance)
    return _summarise(results, tasks, quick)


def _summarise(results, tasks, quick) -> SuiteResult:
    summary, margins, optimum_gaps, linear_gaps = [], {}, [], []
    for name, cell in results.items():
        worst = np.inf
        for label, entry in cell["objectives"].items():
            ours = entry["aetdice"]
            best_name = _best_baseline(entry)
            best = entry[best_name]
            summary.append(SummaryRow("aetdice", f"{name} {label}: utility", ours["score"],
                                      best_name, best["score"]))  # fmt: skip
            if label.startswith("linear"):
                linear_gaps.append(cell["linear_match"]["z"])
                continue
            worst = min(worst, ours["score"] - best["score"])
            if "optimum" in entry:
                for value, opt in zip(ours["per_preference"], entry["optimum"], strict=True):
                    optimum_gaps.append((opt - value["value"]) / abs(opt))
        margins[name] = worst
    note = "quick run: the balance task only, 3000 iterations" if quick else ""
    brax = [margins[n] for n in margins if n != "mo_balance"]
    targets = [
        Target.evaluate(
            f"balance: AETDICE - best baseline (means over {SEEDS} training keys, each on its "
            "own dataset), worst nonlinear utility x criterion",
            margins.get("mo_balance"), 0.0, ">=", note,
        ),
        Target.evaluate(
            f"balance: AETDICE's gap to the optimum (mean over {SEEDS} training keys, each on "
            "its own dataset), worst utility x criterion x preference",
            max(optimum_gaps) if optimum_gaps else None, 0.05, "<=", note,
        ),
        Target.evaluate(
            f"Brax tasks: AETDICE - best baseline (means over {SEEDS} training keys, each on its "
            "own dataset), worst task x nonlinear utility x criterion",
            min(brax) if brax else None, 0.0, ">=", note,
        ),
        Target.evaluate(
            f"linear utility: |AETDICE - OptiDICE| / SE over {LINEAR_SEEDS} training keys (each "
            "on its own dataset), worst task",
            max(linear_gaps) if linear_gaps else None, 2.0, "<=", note,
        ),
    ]  # fmt: skip
    parameters = {
        "tasks": {
            name: {k: (dataclasses.asdict(v) if k == "dice" else v) for k, v in task.items()}
            for name, task in tasks.items()
        },
        "families": list(FAMILIES),
        "criteria": list(CRITERIA),
        "noise": NOISE,
        "evaluation_episodes": EVAL_EPISODES,
        "seeds": SEEDS,
        "linear_seeds": LINEAR_SEEDS,
        "bootstrap": BOOTSTRAP,
    }
    return SuiteResult("morl", quick, parameters, results, summary, targets)
