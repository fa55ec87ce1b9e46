"""The prepared GPU check runs end to end in interpret mode and refuses a CPU run."""

import json

import jax
import pytest

from benchmarks import gpu_pallas


def test_interpret_run_writes_checked_results(tmp_path):
    assert gpu_pallas.main(["--out", str(tmp_path), "--interpret", "--repeats", "1"]) == 0
    results = json.loads((tmp_path / "gpu_pallas.json").read_text())
    (case,) = results["spmm"]
    assert case["interpret_max_rel_error"] < 1e-5
    (lp,) = results["batched_lp"]
    for matrix in ("block", "dense", "sparse"):
        assert lp[f"{matrix}_optimal"] == 64
    assert abs(lp["block_objective_mean"] - lp["dense_objective_mean"]) < 1e-2


@pytest.mark.skipif(jax.default_backend() == "gpu", reason="the refusal is for CPU runs")
def test_refuses_to_time_a_cpu(tmp_path):
    with pytest.raises(SystemExit):
        gpu_pallas.main(["--out", str(tmp_path)])
