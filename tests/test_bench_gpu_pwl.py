"""The GPU branch-and-bound script: its summary from synthetic rows, and one CPU check run."""

import json
import math
import os

import pytest

from benchmarks import gpu_pwl
from jaxopt_suite.pwl import instances


def _row(size_class, ours_s, highs_s, ours_obj=1.0, highs_obj=1.0, ours="OPTIMAL", highs="optimal"):
    return {
        "size_class": size_class,
        "ours": {"status": ours, "objective": ours_obj, "seconds": ours_s},
        "highs": {"status": highs, "objective": highs_obj, "seconds": highs_s},
    }


def test_summary_per_size_class():
    rows = {
        "a": _row("mid", 1.0, 4.0),
        "b": _row("mid", 2.0, 2.0, ours_obj=1.00002),
        # ours ran out of time (25 s counts as the 20 s limit); HiGHS proved optimality
        "c": _row("large", 25.0, 5.0, ours="TIME_LIMIT", ours_obj=math.nan),
        "d": _row("large", 1.0, 1.0, ours_obj=-2.0, highs_obj=-2.0),
        # no HiGHS result (its process failed), no result of ours (the GPU solve failed)
        "e": {"size_class": "large", "ours": {"status": "OPTIMAL", "seconds": 0.1}},
        "f": {"size_class": "large", "ours_error": "XlaRuntimeError: ..."},
    }
    s = gpu_pwl.summarize(rows, time_limit=20.0)
    assert set(s) == {"mid", "large"}
    mid, large = s["mid"], s["large"]
    assert mid["instances"] == 2 and large["instances"] == 2
    assert mid["time_ratio_geomean"] == pytest.approx(math.sqrt(0.25 * 1.0))
    assert mid["beats_highs"] and mid["ours_faster"] == 1
    assert mid["both_optimal"] == 2 and mid["contradictions"] == 0
    assert mid["max_objective_difference"] == pytest.approx(2e-5)
    assert large["time_ratio_geomean"] == pytest.approx(math.sqrt(4.0 * 1.0))
    assert not large["beats_highs"] and large["ours_faster"] == 0
    assert large["ours_optimal"] == 1 and large["highs_optimal"] == 2
    assert large["both_optimal"] == 1 and large["max_objective_difference"] == 0.0


def test_a_fast_wrong_answer_is_charged_the_limit():
    rows = {
        # a wrong optimum and a wrong infeasibility claim, both fast
        "a": _row("mid", 0.5, 4.0, ours_obj=1.01),
        "b": _row("mid", 0.5, 4.0, ours="INFEASIBLE", ours_obj=math.nan),
        "c": _row("mid", 0.5, 4.0, ours="UNBOUNDED", ours_obj=-math.inf),
        # HiGHS proved nothing: ours is not judged by it
        "d": _row("mid", 0.5, 20.0, ours_obj=1.01, highs="time_limit"),
    }
    mid = gpu_pwl.summarize(rows, time_limit=20.0)["mid"]
    assert mid["contradictions"] == 3
    assert mid["time_ratio_geomean"] == pytest.approx((5.0**3 * 0.025) ** (1 / 4))
    assert mid["ours_faster"] == 1


def test_mid_and_large_instances_alternate_smallest_first():
    specs = gpu_pwl._specs(cpu_check=False)
    expected = [s for s in instances.SUITE if instances.size_class(s) != "small"]
    assert sorted(s.name for s in specs) == sorted(s.name for s in expected)
    classes = [instances.size_class(s) for s in specs]
    n_large = classes.count("large")
    assert n_large >= 2 and classes[: 2 * n_large] == ["mid", "large"] * n_large
    for cls in ("mid", "large"):
        terms = [s.pwl_terms for s in specs if instances.size_class(s) == cls]
        assert terms == sorted(terms)
    assert gpu_pwl._specs(cpu_check=True) == specs[:1]


def test_refuses_cpu_without_check(tmp_path, monkeypatch):
    pytest.importorskip("highspy")
    monkeypatch.setattr(gpu_pwl.jax, "default_backend", lambda: "cpu")
    with pytest.raises(SystemExit):
        gpu_pwl.main(["--out", str(tmp_path)])
    with pytest.raises(SystemExit):
        gpu_pwl.main(["--out", str(tmp_path), "--cpu-check", "--budget", "0"])
    assert not (tmp_path / "gpu_pwl.json").exists()


def test_cpu_check_run(tmp_path, monkeypatch):
    pytest.importorskip("highspy")
    monkeypatch.setattr(gpu_pwl.jax, "default_backend", lambda: "cpu")
    saved = {k: os.environ.get(k) for k in ("CUDA_VISIBLE_DEVICES", "JAX_PLATFORMS")}
    assert gpu_pwl.main(["--out", str(tmp_path), "--cpu-check", "--highs-workers", "1"]) == 0
    result = json.loads((tmp_path / "gpu_pwl.json").read_text())
    (name,) = result["instances"]
    row = result["instances"][name]
    assert row["size_class"] == "mid" and row["pwl_terms"] >= instances.SMALL_MAX
    # the script's bookkeeping, not the solvers' speed: each side's result is recorded
    ours = row["ours"]
    assert ours["status"] in {"OPTIMAL", "TIME_LIMIT"} and row["warmup_seconds"] > 0
    # a solve that hit its limit ran to it; how far past it (its last round, and what the
    # warm-up did not compile) follows the host's speed and load, not checked here
    assert ours["seconds"] >= (result["time_limit"] if ours["status"] == "TIME_LIMIT" else 0.0)
    assert ours["nodes_per_second"] == pytest.approx(ours["nodes"] / ours["seconds"])
    assert row["highs"]["status"] in {"optimal", "time_limit"}
    assert result["skipped"] == []
    assert result["summary"]["mid"]["instances"] == 1
    # the GPU-less environment of HiGHS's processes does not leak into the caller's
    assert {k: os.environ.get(k) for k in saved} == saved
