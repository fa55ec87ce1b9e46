"""The safe_rl suite's targets from its results (no training, no simulation)."""

import pytest

from benchmarks import safe_rl

CURVES = {"episode_return": [1.0, 2.0], "episode_max_cost": [0.1, 0.0], "violation": [0.5, 0.0]}


def _cell(violations: dict, returns: dict) -> dict:
    cell = {"random_steps_per_second": 1000.0}
    for algorithm in safe_rl.ALGORITHMS:
        evaluation = {"violation": violations[algorithm], "episode_return": returns[algorithm]}
        cell[algorithm] = {
            "evaluation": evaluation,
            "sampled_evaluation": dict(evaluation),
            "curves": CURVES,
            "train_steps_per_second": 600.0,
        }
    return cell


def _results(walker_lag_violation: float) -> dict:
    returns = {"ascpo": 90.0, "scpo": 120.0, "cpo": 110.0, "ppo_lagrangian": 100.0,
               "ppo_ascpo": 80.0}  # fmt: skip
    hopper = {"ascpo": 0.0, "scpo": 0.2, "cpo": 0.0, "ppo_lagrangian": 0.0, "ppo_ascpo": 0.0}
    walker = {"ascpo": 0.01, "scpo": 0.4, "cpo": 0.25, "ppo_lagrangian": walker_lag_violation,
              "ppo_ascpo": 0.0}  # fmt: skip
    return {
        "hopper_velocity": _cell(hopper, returns),
        "walker2d_velocity": _cell(walker, returns),
        "throughput": {
            "hopper_velocity": {"train_steps_per_second": 600.0, "random_steps_per_second": 1000.0},
            "walker2d_velocity": {
                "train_steps_per_second": 550.0,
                "random_steps_per_second": 1000.0,
            },
        },  # fmt: skip
    }


def _targets(results, tmp_path) -> list:
    """The suite's targets: violation, margin over the baselines, return ratio, throughput."""
    tasks = {name: safe_rl.TASKS[name] for name in ("hopper_velocity", "walker2d_velocity")}
    targets = safe_rl._summarise(results, tasks, False, safe_rl.SEEDS, tmp_path).targets
    assert [t.name.split(" ")[0] for t in targets] == ["ASCPO", "min(PPO-Lag,", "ASCPO", "ASCPO"]
    return targets


def test_targets_read_the_worst_task(tmp_path):
    violation, margin, ratio, throughput = _targets(_results(walker_lag_violation=0.03), tmp_path)
    assert violation.value == pytest.approx(1.0) and violation.met
    assert ratio.value == pytest.approx(0.9) and ratio.met
    assert throughput.value == pytest.approx(0.55) and throughput.met
    # the walker's margin is 3 - 1 points; the hopper's is 0, where CPO's and
    # PPO-Lagrangian's rates are 0, and the note names it
    assert margin.value == pytest.approx(0.0) and not margin.met
    assert margin.note == "a baseline's rate is 0 on hopper_velocity: ASCPO's cannot be lower there"


def test_the_margin_note_names_every_task_with_a_baseline_at_zero(tmp_path):
    _, margin, _, _ = _targets(_results(walker_lag_violation=0.0), tmp_path)
    assert margin.value == pytest.approx(-1.0) and not margin.met
    assert margin.note == (
        "a baseline's rate is 0 on hopper_velocity, walker2d_velocity: ASCPO's cannot be "
        "lower there"
    )
