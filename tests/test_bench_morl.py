"""The morl suite: training keys paired with datasets, pooled utilities, per-key margins."""

import functools

import jax
import numpy as np
import pytest

import envs
from benchmarks import (
    morl,
    morl_anchor_probe,
    morl_behaviour_probe,
    morl_label_probe,
    morl_policy_probe,
    morl_probe,
)
from jaxopt_suite.rl import aetdice as A
from jaxopt_suite.rl.aetdice import utilities as U


def _largest_gap(a, b) -> float:
    """The largest absolute difference between two parameter trees of one structure."""
    gaps = jax.tree.map(lambda x, y: float(np.max(np.abs(x - y))), a, b)
    return max(jax.tree.leaves(gaps))


def test_bc_is_fitted_with_the_keys_the_dice_methods_fit_each_objective_with():
    """At a huge ``alpha`` OptiDICE's weights are nearly flat (its largest ratio within
    ``1e-3`` of 1) and its weighted cloning is BC(P)'s fit: with paired keys (same initial
    network, same minibatches) the two policies agree; BC(P)'s one network from the key itself
    does not."""
    data, _ = morl.normalised(morl.dataset("mo_balance", morl.TASKS["mo_balance"])[0])
    config = A.DiceConfig(iterations=200, batch_size=64, hidden=(16,), policy_hidden=(16,),
                          alpha=1e4, behaviour_conditioned=True)  # fmt: skip
    objectives = [U.ser(U.linear(w)) for w in ((0.3, 0.7), (0.7, 0.3))]
    key = jax.random.key(3)
    paired = morl._paired_bc(data, objectives, key, config)
    dice = A.train_optidice(data, objectives, key, config, discount=0.9)
    single = A.train_bc(data, objectives, key, config)
    for ours, theirs in zip(paired, dice, strict=True):
        assert float(np.max(np.abs(theirs.metrics["ratio_max"] - 1.0))) < 1e-3
        assert _largest_gap(ours.params, theirs.params) < 1e-3
    assert _largest_gap(single[0].params, dice[0].params) > 0.1


def test_replicate_datasets_differ_and_share_one_normalisation_and_one_set_of_utilities():
    """Replicates are fresh draws of the balance data; the pooled normalisation divides every
    replicate by the range over all of them, and the utilities' parameters (the Tchebycheff
    point, the thresholds) are read off all of them together. (The balance task's rewards
    are not negative, so its Nash shift is ``NASH_FLOOR`` whichever data it is read off.)"""
    task = morl.TASKS["mo_balance"]
    raws = [morl.dataset("mo_balance", task, r)[0] for r in range(2)]
    assert float(np.max(np.abs(raws[0].rewards - raws[1].rewards))) > 0.1
    spread = morl.return_range(raws)
    raw_returns = np.concatenate([np.asarray(raw.rewards, np.float64).sum(1) for raw in raws])
    np.testing.assert_allclose(spread, raw_returns.max(0) - raw_returns.min(0), rtol=1e-9)
    data = [morl.normalised(raw, spread)[0] for raw in raws]
    np.testing.assert_allclose(
        data[1].rewards, np.asarray(raws[1].rewards, np.float64) / spread, rtol=1e-6
    )
    returns = [np.asarray(d.rewards, np.float64).sum(1) for d in data]  # masks are full
    assert all(bool(np.all(np.asarray(d.mask) == 1)) for d in data)
    pooled = np.concatenate(returns)
    (cheb,) = morl.utilities("tchebycheff", data, [(0.5, 0.5)])
    np.testing.assert_allclose(np.asarray(cheb.reference), pooled.min(0), rtol=1e-6)
    (thr,) = morl.utilities("threshold", data, [(0.5, 0.5)])
    np.testing.assert_allclose(np.asarray(thr.thresholds), pooled.mean(0), rtol=1e-5)
    assert float(np.max(np.abs(np.asarray(thr.thresholds) - returns[0].mean(0)))) > 1e-3
    # task_data is this pipeline; with a given spread (held-out data) it divides by that
    pooled_data, pooled_spread, made = morl.task_data("mo_balance", task, range(2))
    np.testing.assert_array_equal(pooled_spread, spread)
    np.testing.assert_array_equal(pooled_data[1].rewards, data[1].rewards)
    assert [m["replicate"] for m in made] == [0, 1]
    (held,), held_spread, _ = morl.task_data("mo_balance", task, [1], spread=2 * spread)
    np.testing.assert_array_equal(held_spread, 2 * spread)
    np.testing.assert_allclose(held.rewards, data[1].rewards / 2, rtol=1e-6)
    # replicate_data keeps the suite's own datasets and makes the others with its spread
    chosen = morl.replicate_data("mo_balance", task, [2, 0], pooled_data[:2], 2 * spread)
    assert list(chosen) == [2, 0] and chosen[0] is pooled_data[0]
    (third,), _, _ = morl.task_data("mo_balance", task, [2], spread=2 * spread)
    np.testing.assert_array_equal(chosen[2].rewards, third.rewards)


def test_each_training_key_trains_on_its_own_replicate_dataset():
    """``_seeded`` pairs training key ``s`` with dataset ``s``."""
    calls = []

    def train(data, objectives, key, config):
        calls.append((data, jax.random.key_data(key).tolist(), objectives, config))
        return [data]

    key = jax.random.key(5)
    out = morl._seeded(train, ["d0", "d1", "d2", "d3"], ["o"], key, "c", seeds=range(1, 4))
    assert out == [["d1"], ["d2"], ["d3"]]
    expected = [jax.random.key_data(jax.random.fold_in(key, s)).tolist() for s in (1, 2, 3)]
    assert [c[1] for c in calls] == expected
    assert all(c[2] == ["o"] and c[3] == "c" for c in calls)


def test_key_margins_compare_each_key_with_the_baseline_best_on_average():
    """The best baseline is chosen by its mean score; the margins are then taken key by key,
    linear objectives are left out, and ``worst`` is each key's lowest margin."""
    cell = {
        "objectives": {
            "nash/ser": {
                "aetdice": {"score": 0.5, "seed_scores": [0.4, 0.6, 0.5]},
                "serdice": {"score": 0.45, "seed_scores": [0.5, 0.4, 0.45]},
                "bc": {"score": 0.3, "seed_scores": [0.6, 0.1, 0.2]},
            },
            "nash/esr": {
                "aetdice": {"score": 0.2, "seed_scores": [0.2, 0.2, 0.2]},
                "optidice": {"score": 0.1, "seed_scores": [0.1, 0.3, 0.0]},
            },
            "linear/ser": {
                "aetdice": {"score": 0.0, "seed_scores": [0.0, 0.0, 0.0]},
                "optidice": {"score": 9.0, "seed_scores": [9.0, 9.0, 9.0]},
            },
        }
    }
    margins = morl.key_margins(cell)
    assert set(margins["objectives"]) == {"nash/ser", "nash/esr"}
    assert margins["objectives"]["nash/ser"]["baseline"] == "serdice"
    np.testing.assert_allclose(margins["objectives"]["nash/ser"]["per_key"], [-0.1, 0.2, 0.05])
    np.testing.assert_allclose(margins["objectives"]["nash/esr"]["per_key"], [0.1, -0.1, 0.2])
    np.testing.assert_allclose(margins["worst"], [-0.1, -0.1, 0.05])


def _entry(score, per_preference=None):
    return {"score": score, "per_preference": per_preference or [{"value": score}]}


def test_summary_targets_take_the_worst_margin_to_the_best_baseline_per_task():
    """Each objective's margin is to its best baseline by mean score; each task keeps its
    worst; the gaps to the optimum are relative, per preference; the linear match reports
    the worst task's ``z``, and linear rows count in none of the margins."""
    results = {
        "mo_balance": {
            "objectives": {
                "nash/ser": {"aetdice": _entry(0.98), "serdice": _entry(0.97),
                             "bc": _entry(0.5), "optimum": [1.0]},
                "nash/esr": {"aetdice": _entry(0.9), "optidice": _entry(0.95),
                             "optimum": [1.0]},
                "linear/ser": {"aetdice": _entry(0.1), "optidice": _entry(0.9)},
            },
            "linear_match": {"z": 0.5},
        },
        "mo_hopper": {
            "objectives": {
                "tchebycheff/esr": {"aetdice": _entry(0.3), "bc": _entry(0.1)},
                "linear/ser": {"aetdice": _entry(0.9), "optidice": _entry(0.9)},
            },
            "linear_match": {"z": 2.5},
        },
    }  # fmt: skip
    suite = morl._summarise(results, {}, quick=False)
    values = [t.value for t in suite.targets]
    np.testing.assert_allclose(values, [-0.05, 0.1, 0.2, 2.5])
    assert [t.met for t in suite.targets] == [False, False, True, False]
    rows = {row.metric: row.anchor for row in suite.summary}
    assert rows["mo_balance nash/esr: utility"] == "optidice"
    assert rows["mo_balance nash/ser: utility"] == "serdice"


def test_the_alpha_probe_refuses_the_suites_own_datasets(tmp_path):
    """The probe is for held-out data: a replicate the suite's tables use is refused, named,
    before any training."""
    with pytest.raises(ValueError, match=r"--replicates must be held out: >= 5.*\[5, 4\]"):
        morl_probe.main(["--replicates", "5,4", "--out", str(tmp_path / "x.json")])
    assert not (tmp_path / "x.json").exists()


def test_the_policy_probe_refuses_objectives_the_suite_does_not_score(tmp_path):
    """Only the suite's nonlinear objectives are probed; anything else is refused, named,
    before any data is made."""
    for bad in ("linear/ser", "nash/xyz"):
        with pytest.raises(ValueError, match=rf"--objectives must be nonlinear.*{bad}"):
            out = str(tmp_path / "x")
            morl_policy_probe.main(["--objectives", f"nash/ser,{bad}", "--out", out])
    assert not (tmp_path / "x").exists()


def test_the_policy_probe_refuses_the_suites_own_datasets_as_held_out(tmp_path):
    """``--replicates`` is for held-out data (the suite's keys are the default): a suite
    replicate, or a single replicate (no standard error over one), is refused before any
    training."""
    out = tmp_path / "x.json"
    for bad in ("5,4", "6"):
        with pytest.raises(ValueError, match=r"--replicates must be at least two distinct"):
            morl_policy_probe.main(["--replicates", bad, "--out", str(out)])
    assert not out.exists()


def test_the_policy_probe_refuses_unknown_aetdice_variants(tmp_path):
    out = tmp_path / "x.json"
    with pytest.raises(ValueError, match=r"--variants must be among \['aetdice', .*'ours'\]"):
        morl_policy_probe.main(["--variants", "aetdice_markov,ours", "--out", str(out)])
    assert not out.exists()


def test_the_policy_probe_takes_behaviour_settings_on_brax_tasks_only(tmp_path):
    out = tmp_path / "x.json"
    with pytest.raises(ValueError, match=r"--behaviour-iterations must be >= 1 on a Brax"):
        morl_policy_probe.main(["--task", "mo_balance", "--behaviour-iterations", "400",
                                "--out", str(out)])  # fmt: skip
    with pytest.raises(ValueError, match=r"--behaviour-iterations must be >= 1 .* got 0"):
        morl_policy_probe.main(["--behaviour-iterations", "0", "--out", str(out)])
    with pytest.raises(ValueError, match=r"--behaviour-sampling is for a Brax task"):
        morl_policy_probe.main(["--task", "mo_balance", "--behaviour-sampling", "rows",
                                "--out", str(out)])  # fmt: skip
    with pytest.raises(SystemExit):  # argparse's choices
        morl_policy_probe.main(["--behaviour-sampling", "hull", "--out", str(out)])
    assert not out.exists()


def test_the_label_probe_refuses_what_the_suite_does_not_score(tmp_path):
    """Only the suite's nonlinear objectives on its Brax tasks, whose policies are
    behaviour-conditioned, are probed; anything else is refused before any data is made."""
    out = str(tmp_path / "x.json")
    for bad in ("linear/ser", "nash/aet", "nash"):
        with pytest.raises(ValueError, match=rf"--objectives must be nonlinear .*{bad}"):
            morl_label_probe.main(["--objectives", f"nash/ser,{bad}", "--out", out])
    with pytest.raises(SystemExit):
        morl_label_probe.main(["--task", "mo_balance", "--out", out])
    for labels in ("mu", "weights,mu,mu", "weights,units"):
        with pytest.raises(SystemExit):
            morl_label_probe.main(["--labels", labels, "--out", out])
    assert not (tmp_path / "x.json").exists()


def test_the_label_probes_multiplier_labels():
    """``multipliers`` translates the final ``mu`` into the behaviours' units as ``scaled``
    does the weights; ``mu`` reads it over its sum, as ``weights`` reads the weights."""
    from types import SimpleNamespace

    tiny = envs.collect(
        envs.BalanceTask(), lambda preference, observation, key: preference[:1] - 0.5,
        envs.preference_grid(2, 3, "wide"), key=jax.random.key(0), episodes_per_preference=1,
        horizon=4,
    )  # fmt: skip
    data = envs.scale_rewards(tiny, [4.0, 1.0])
    objective = SimpleNamespace(utility=SimpleNamespace(weights=np.array([1.0, 3.0])))
    mu = np.array([[9.0, 9.0], [2.0, -1.0], [1.0, 3.0]])
    # ``weights`` is the policy's own label, not recomputed from the utility
    policy = SimpleNamespace(metrics={"mu": mu}, label=np.float32([0.2, 0.8]))
    label = functools.partial(morl_label_probe._label, dataset=data, objective=objective,
                              policy=policy)  # fmt: skip
    np.testing.assert_array_equal(label("weights"), np.float32([0.2, 0.8]))
    np.testing.assert_allclose(label("mu"), [0.25, 0.75])  # the last row, over its sum
    # weights (1, 3) on rewards divided by (4, 1): (1/4, 3) over its sum
    np.testing.assert_allclose(label("scaled"), [1 / 13, 12 / 13], rtol=1e-6)
    np.testing.assert_allclose(label("multipliers"), label("scaled"))
    with pytest.raises(ValueError, match="label kind must be one of"):
        label("units")
    policy.metrics["mu"][-1] = [0.0, -2.0]  # no preference to read: refused, not NaN
    with pytest.raises(ValueError, match=r"no positive entry: \[0.0, 0.0\]"):
        label("mu")
    policy.label = None
    with pytest.raises(ValueError, match="carries no label"):
        label("weights")


def test_the_anchor_probe_refuses_negative_replicates(tmp_path):
    out = tmp_path / "x.json"
    with pytest.raises(ValueError, match=r"--replicates must be >= 0, got \[0, -1\]"):
        morl_anchor_probe.main(["--replicates", "0,-1", "--out", str(out)])
    assert not out.exists()


def test_the_behaviour_probe_refuses_bad_settings(tmp_path):
    out = tmp_path / "x.json"
    with pytest.raises(ValueError, match=r"--sampling must be from \('mixture', 'rows'\)"):
        morl_behaviour_probe.main(["--sampling", "rows,hull", "--out", str(out)])
    with pytest.raises(ValueError, match=r"--iterations must be >= 1, got \[80, 0\]"):
        morl_behaviour_probe.main(["--iterations", "80,0", "--out", str(out)])
    with pytest.raises(SystemExit):  # argparse: the balance task has no behaviour run
        morl_behaviour_probe.main(["--task", "mo_balance", "--out", str(out)])
    assert not out.exists()


def test_the_behaviour_probe_summarises_the_rows_fronts():
    grid = np.array([[0.0, 1.0], [0.5, 0.5], [1.0, 0.0]])
    # two episodes per row: run rises with its weight, energy does not follow its own
    returns = np.array([[1.0, 9.0], [3.0, 9.0], [4.0, 8.0], [6.0, 8.0], [7.0, 9.0], [9.0, 9.0]])
    summary = morl_behaviour_probe.front(grid, returns, 2)
    np.testing.assert_allclose(summary["mean"], [[2.0, 9.0], [5.0, 8.0], [8.0, 9.0]])
    np.testing.assert_allclose(summary["std"], [[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    np.testing.assert_allclose(summary["spread"], [6.0, 1.0])
    # energy's weights 1, 0.5, 0 against means 9, 8, 9: ranks (3, 2, 1) and (2.5, 1, 2.5)
    np.testing.assert_allclose(summary["rank_correlation"], [1.0, 0.0], atol=1e-12)
    assert np.isnan(morl_behaviour_probe._rank_correlation([1, 2, 3], [5, 5, 5]))


def test_report_renders_the_fronts_of_each_method(tmp_path):
    import json

    from benchmarks import report

    entry = {
        "aetdice": {"hypervolume": 0.5, "sparsity": 0.01},
        "optidice": {"hypervolume": 0.25, "sparsity": 0.125},
        "bc": {"hypervolume": 0.75, "sparsity": 0.0625},
    }
    payload = {
        "suite": "morl", "command": "jaxopt-suite bench morl", "targets": [], "summary": [],
        "environment": {"device": "cpu", "cpu_count": 2, "jax": "0", "git_sha": None},
        "results": {"mo_balance": {"objectives": {"nash/ser": entry}, "spread": 1.0}},
    }  # fmt: skip
    (tmp_path / "morl.json").write_text(json.dumps(payload))
    text = report.render(tmp_path)
    assert "| task | objective | aetdice HV / sparsity | optidice HV / sparsity |" in text
    # SER-DICE has no entry here: a dash, the others in the header's order
    assert "| mo_balance | nash/ser | 0.5 / 0.01 | 0.25 / 0.125 | - | 0.75 / 0.0625 |" in text


def test_the_label_probe_scores_each_method_at_each_label(monkeypatch):
    """``probe``'s loops on stand-ins for the data, the training and the scoring (the real
    ones take an hour on a Brax task): every method at each label asked for, the multiplier
    labels for the SER DICE methods only, and the margins to ``weights``."""
    import dataclasses
    from types import SimpleNamespace

    M = morl_label_probe.M

    @dataclasses.dataclass(frozen=True)
    class Policy:
        label: object = None
        metrics: dict = dataclasses.field(default_factory=lambda: {"mu": np.array([[3.0, 1.0]])})

    objective = SimpleNamespace(utility=SimpleNamespace(weights=np.array([1.0, 3.0])))
    monkeypatch.setattr(M, "task_data", lambda name, task: ("data", np.ones(2), None))
    monkeypatch.setattr(morl_label_probe.envs, "make_multi_objective", lambda name: None)
    # a policy scores the first entry of the label it acts at
    monkeypatch.setattr(M, "_Scorer", lambda *a: lambda p, o, k: {"value": float(p.label[0])})
    monkeypatch.setattr(M, "utilities", lambda *a: [])
    monkeypatch.setattr(M, "objective_set", lambda *a: ([], [objective] * 2, [0, 1]))
    monkeypatch.setattr(
        M, "_seeded", lambda train, data, objectives, *a, **k: [[Policy()] * 2] * M.SEEDS
    )
    monkeypatch.setattr(morl_label_probe, "_label", lambda kind, data, objective, policy: (
        np.array([0.25, 0.75]) if kind == "weights" else np.array([0.75, 0.25])))  # fmt: skip
    out = morl_label_probe.probe("mo_halfcheetah", ["nash/ser"], ("weights", "mu"), log=str)
    entry = out["nash/ser"]
    assert entry["means"] == {
        "optidice/weights": 0.25, "bc/weights": 0.25, "serdice/weights": 0.25,
        "serdice/mu": 0.75, "aetdice/weights": 0.25, "aetdice/mu": 0.75,
    }  # fmt: skip
    assert set(entry["mu - weights"]) == {"serdice", "aetdice"}
    assert entry["mu - weights"]["aetdice"]["mean"] == pytest.approx(0.5)
    assert entry["aetdice - best"]["mean"] == 0.0
