"""The prepared GPU check runs end to end in interpret mode and refuses a CPU run."""

import json

import jax
import pytest

from benchmarks import gpu_pallas


def test_interpret_run_writes_checked_results(tmp_path):
    argv = ["--out", str(tmp_path), "--interpret", "--repeats", "1", "--batch", "8"]
    assert gpu_pallas.main(argv) == 0
    results = json.loads((tmp_path / "gpu_pallas.json").read_text())
    assert results["command"].endswith("--interpret --repeats 1 --batch 8")
    assert results["repeats"] == 1
    (case,) = results["spmm"]
    assert case["interpret_max_rel_error"] < 1e-5
    (lp,) = results["batched_lp"]
    assert lp["B"] == 8
    for matrix in ("block", "dense", "sparse"):
        assert lp[f"{matrix}_optimal"] == 8
    assert abs(lp["block_objective_mean"] - lp["dense_objective_mean"]) < 1e-2


@pytest.mark.parametrize("argv", [["--repeats", "0"], ["--batch", "64", "0"]])
def test_bad_sizes_are_named(tmp_path, argv, capsys):
    with pytest.raises(SystemExit):
        gpu_pallas.main(["--out", str(tmp_path), "--interpret", *argv])
    assert "--repeats and --batch must be >= 1" in capsys.readouterr().err
    assert not (tmp_path / "gpu_pallas.json").exists()


@pytest.mark.skipif(jax.default_backend() == "gpu", reason="the refusal is for CPU runs")
def test_refuses_to_time_a_cpu(tmp_path):
    with pytest.raises(SystemExit):
        gpu_pallas.main(["--out", str(tmp_path)])
