"""The command line and the benchmark harness, on a tiny stand-in suite."""

import json
import platform
import re
import sys
import types

import pytest

import benchmarks
from benchmarks.harness import (
    Progress,
    SuiteResult,
    SummaryRow,
    Target,
    cpu_description,
    memory_bytes,
    time_interleaved,
    time_jitted,
)
from jaxopt_suite import cli


def test_unknown_suite_lists_the_valid_ones(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["bench", "no-such-suite"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert (
        "unknown suite(s): no-such-suite" in err
        and "valid suites: bilevel, boosting, lp, morl, online_bilevel, pwl, robust, safe_rl, zo"
        in err
    )


def test_unknown_flag_lists_the_valid_ones(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["bench", "--fast"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments: --fast" in err
    assert "valid options:" in err and "--quick" in err and "--out" in err


def test_unknown_command(capsys):
    with pytest.raises(SystemExit):
        cli.main(["launch"])
    assert "invalid choice" in capsys.readouterr().err


def _tiny_suite(out_dir_seen):
    def run(*, quick, out_dir, progress):
        import jax.numpy as jnp

        out_dir_seen.append(out_dir)
        with progress.stage("tiny", 2) as advance:
            advance()
            advance()
        timing = time_jitted(lambda x: jnp.sum(x**2), jnp.ones(8), repeats=3)
        plot = out_dir / "tiny.png"
        out_dir.mkdir(parents=True, exist_ok=True)
        plot.write_bytes(b"\x89PNG")
        return SuiteResult(
            "tiny",
            quick,
            {"size": 8},
            {"median_s": timing.median_s, "bytes": memory_bytes(lambda x: x * 2, jnp.ones(8))},
            [SummaryRow("method", "seconds", 1.0, "anchor", 4.0)],
            [
                Target.evaluate("speed-up", 4.0, 3.0, ">="),
                Target.evaluate("missed", 0.5, 0.25, "<="),
                Target.evaluate("skipped in quick mode", None, 1.0, ">="),
                Target.evaluate("|slope + 2| / 2", 0.1, 0.2, "<="),
            ],
            plot,
        )

    return types.SimpleNamespace(run=run)


def test_bench_writes_json_with_targets_and_environment(tmp_path, monkeypatch, capsys):
    seen = []
    monkeypatch.setitem(benchmarks.SUITES, "tiny", "tests.tiny_suite")
    monkeypatch.setitem(sys.modules, "tests.tiny_suite", _tiny_suite(seen))
    assert cli.main(["bench", "tiny", "--quick", "--out", str(tmp_path), "--no-progress"]) == 0
    assert seen == [tmp_path]
    payload = json.loads((tmp_path / "tiny.json").read_text())
    assert payload["suite"] == "tiny" and payload["quick"] is True
    assert payload["command"] == "jaxopt-suite bench tiny --quick"
    assert payload["plot"] == "tiny.png" and (tmp_path / "tiny.png").is_file()
    env = payload["environment"]
    assert {"jax", "device", "backend", "git_sha", "python", "cpu"} <= set(env)
    assert isinstance(env["cpu"], str) and env["cpu"]
    targets = {t["name"]: t for t in payload["targets"]}
    assert targets["speed-up"]["met"] is True
    assert targets["missed"]["met"] is False
    assert targets["skipped in quick mode"]["met"] is None
    assert set(targets["speed-up"]) >= {"name", "value", "threshold", "comparison", "met"}
    assert payload["summary"][0]["ratio"] == pytest.approx(0.25)
    assert payload["results"]["bytes"] > 0
    out = capsys.readouterr().out
    assert "method vs anchor" in out and "not evaluated" in out


def test_quick_runs_leave_the_full_size_results_alone(tmp_path, monkeypatch):
    # `make demo` (bench --quick, no --out) wrote its quick results over the committed
    # full-size ones in benchmarks/results, which `jaxopt-suite report` then put in the README
    import benchmarks.harness as harness

    full, quick = tmp_path / "results", tmp_path / "results" / "quick"
    monkeypatch.setattr(harness, "DEFAULT_RESULTS_DIR", full)
    monkeypatch.setattr(harness, "QUICK_RESULTS_DIR", quick)
    seen = []
    monkeypatch.setitem(benchmarks.SUITES, "tiny", "tests.tiny_suite")
    monkeypatch.setitem(sys.modules, "tests.tiny_suite", _tiny_suite(seen))
    assert cli.main(["bench", "tiny", "--quick", "--no-progress"]) == 0
    assert seen == [quick] and json.loads((quick / "tiny.json").read_text())["quick"] is True
    assert not (full / "tiny.json").exists()
    assert cli.main(["bench", "tiny", "--no-progress"]) == 0
    assert seen == [quick, full] and json.loads((full / "tiny.json").read_text())["quick"] is False
    # an explicit --out is kept, quick or not
    assert cli.main(["bench", "tiny", "--quick", "--out", str(full), "--no-progress"]) == 0
    assert seen[-1] == full and json.loads((full / "tiny.json").read_text())["quick"] is True


def test_target_comparisons():
    assert Target.evaluate("a", float("nan"), 1.0, ">=").met is False
    assert Target.evaluate("b", float("inf"), 1.0, "<=").met is False
    assert Target.evaluate("c", 2.0, 2.0, ">=").met is True
    with pytest.raises(ValueError, match="comparison"):
        Target.evaluate("d", 1.0, 1.0, "==")


def test_interleaved_timing_reports_every_function():
    import jax.numpy as jnp

    fns = {"small": lambda x: x * 2, "large": lambda x: jnp.sort(jnp.tile(x, 500))}
    timings = time_interleaved(fns, jnp.ones(64), repeats=5)
    assert set(timings) == {"small", "large"}
    assert all(t.repeats == 5 and t.median_s > 0 and t.compile_s > 0 for t in timings.values())
    assert timings["large"].median_s > timings["small"].median_s


def test_progress_stages_are_silent_when_disabled():
    with Progress(enabled=False) as progress, progress.stage("x", 3) as advance:
        advance()
        advance(2)


def test_report_rewrites_only_the_marked_block(tmp_path, monkeypatch, capsys):
    from benchmarks.report import END, START

    seen = []
    monkeypatch.setitem(benchmarks.SUITES, "tiny", "tests.tiny_suite")
    monkeypatch.setitem(sys.modules, "tests.tiny_suite", _tiny_suite(seen))
    results = tmp_path / "results"
    cli.main(["bench", "tiny", "--out", str(results), "--no-progress"])
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{START}\nstale\n{END}\noutro\n")
    assert cli.main(["report", "--results", str(results), "--readme", str(readme)]) == 0
    text = readme.read_text()
    assert text.startswith("intro\n") and text.endswith(f"{END}\noutro\n")
    assert "stale" not in text
    assert "| speed-up | 4 | >= 3 | yes |" in text
    assert "| missed | 0.5 | <= 0.25 | **no** |" in text
    # A "|" in a name would split its cell: it is escaped.
    assert "| \\|slope + 2\\| / 2 | 0.1 | <= 0.2 | yes |" in text
    assert "| method | seconds | 1 | anchor | 4 | 0.25 |" in text
    assert "![tiny benchmark](results/tiny.png)" in text

    def refused(message, folder=results):
        with pytest.raises(SystemExit) as exit_info:
            cli.main(["report", "--results", str(folder), "--readme", str(readme)])
        assert exit_info.value.code == 2
        err = capsys.readouterr().err
        assert re.search(message, err), err

    readme.write_text("no markers\n")
    refused("no benchmark markers")
    readme.write_text(f"{END}\nstale\n{START}\n")
    refused(f"the marker {re.escape(END)} must come after")
    # A JSON file that is not a suite's result (a probe's, say) is refused by name, not read
    # until a KeyError.
    readme.write_text(f"intro\n{START}\n{END}\n")
    (results / "probe.json").write_text(json.dumps({"rows": [1, 2]}))
    refused(r"probe\.json is not a suite's result .*suite, command")
    assert readme.read_text() == f"intro\n{START}\n{END}\n"
    # A missing or empty results folder would empty the block: refused, README untouched.
    (results / "probe.json").unlink()
    cli.main(["report", "--results", str(results), "--readme", str(readme)])
    done = readme.read_text()
    for folder, message in ((tmp_path / "missing", "does not exist"), (tmp_path, "no suite")):
        refused(message, folder)
        assert readme.read_text() == done
    readme.unlink()  # a README that is not there: a message, not a traceback
    refused("No such file or directory")


def test_timing_needs_a_repeat():
    for repeats in (0, 2.5, True):
        with pytest.raises(ValueError, match=f"repeats must be an int >= 1, got {repeats!r}"):
            time_jitted(lambda x: x + 1, 1.0, repeats=repeats)


def test_suites_may_follow_options(tmp_path, monkeypatch):
    seen = []
    for name in ("tiny", "tiny2"):
        monkeypatch.setitem(benchmarks.SUITES, name, f"tests.{name}_suite")
        monkeypatch.setitem(sys.modules, f"tests.{name}_suite", _tiny_suite(seen))
    out = tmp_path / "out"
    assert cli.main(["bench", "tiny", "--out", str(out), "tiny2", "--no-progress"]) == 0
    assert seen == [out, out]


def test_paths_repeated_suites_and_stray_options_are_refused_before_running(
    tmp_path, monkeypatch, capsys
):
    seen = []
    monkeypatch.setitem(benchmarks.SUITES, "tiny", "tests.tiny_suite")
    monkeypatch.setitem(sys.modules, "tests.tiny_suite", _tiny_suite(seen))
    afile = tmp_path / "afile"
    afile.write_text("")
    for argv, message in (
        # an empty path (an unset shell variable) meant the repository's own results/README
        (["bench", "tiny", "--out", ""], "--out: expected a path, got ''"),
        (["report", "--results", ""], "--results: expected a path, got ''"),
        (["report", "--readme", " "], "--readme: expected a path, got ' '"),
        # a file where the folder goes: a raw FileExistsError; checked before the suite runs
        (["bench", "tiny", "--out", str(afile)], "--out .*afile: cannot write results there"),
        (["bench", "tiny", "--out", str(afile / "sub")], "cannot write results there"),
        # one result per suite: 'tiny tiny' ran it twice
        (["bench", "tiny", "tiny", "--out", str(tmp_path)], "named more than once: tiny"),
        # options before the command were dropped without a word
        (["--bogus", "bench", "tiny", "--out", str(tmp_path)], "before bench: --bogus"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            cli.main(argv)
        assert exit_info.value.code == 2
        assert re.search(message, capsys.readouterr().err), argv
    assert seen == []  # no suite ran


def test_report_names_a_broken_result_file(tmp_path, monkeypatch, capsys):
    from benchmarks.report import END, START

    monkeypatch.setitem(benchmarks.SUITES, "tiny", "tests.tiny_suite")
    monkeypatch.setitem(sys.modules, "tests.tiny_suite", _tiny_suite([]))
    results = tmp_path / "results"
    cli.main(["bench", "tiny", "--out", str(results), "--no-progress"])
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{START}\n{END}\n")
    good = json.loads((results / "tiny.json").read_text())
    broken = [
        ("truncated", None, "tiny.json is not valid JSON"),
        ("environment", {k: v for k, v in good["environment"].items() if k != "device"},
         r"tiny.json is not a complete suite result \(KeyError: 'device'\)"),
        ("targets", [{**good["targets"][0], "met": "yes"}], "KeyError: 'yes'"),
        ("summary", [{"method": "m"}], "KeyError: 'metric'"),
    ]  # fmt: skip
    for field, value, message in broken:
        text = (
            json.dumps(good)[:300] if field == "truncated" else json.dumps({**good, field: value})
        )
        (results / "tiny.json").write_text(text)
        with pytest.raises(SystemExit) as exit_info:
            cli.main(["report", "--results", str(results), "--readme", str(readme)])
        assert exit_info.value.code == 2
        assert re.search(message, capsys.readouterr().err), field
    assert readme.read_text() == f"intro\n{START}\n{END}\n"


def test_json_records_the_commit_checked_out_when_the_run_started(tmp_path, monkeypatch):
    import benchmarks.harness as harness

    calls = []

    def moving_head():
        calls.append(None)
        return "start-sha" if len(calls) == 1 else "later-sha"

    monkeypatch.setattr(harness, "git_sha", moving_head)
    monkeypatch.setitem(benchmarks.SUITES, "tiny", "tests.tiny_suite")
    monkeypatch.setitem(sys.modules, "tests.tiny_suite", _tiny_suite([]))
    assert cli.main(["bench", "tiny", "--quick", "--out", str(tmp_path), "--no-progress"]) == 0
    payload = json.loads((tmp_path / "tiny.json").read_text())
    # git is not asked again when the result is written (a slow git status there failed a
    # finished run)
    assert payload["environment"]["git_sha"] == "start-sha" and len(calls) == 1


def test_cpu_description_names_the_model_and_the_widest_vector_extension(tmp_path):
    """Results measured on CPU say on which: the first processor's model name and the widest
    of AVX-512, AVX2 and AVX it has."""
    info = tmp_path / "cpuinfo"
    info.write_text(
        "processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: fpu avx avx2 sse\n\n"
        "processor\t: 1\nmodel name\t: Other\nflags\t\t: avx512f\n"
    )
    assert cpu_description(info) == "Some CPU (avx2)"
    assert cpu_description(tmp_path / "missing") == (platform.processor() or "unknown")


def test_git_sha_survives_a_git_status_that_times_out(monkeypatch):
    import subprocess

    import benchmarks.harness as harness

    real = subprocess.run

    def slow_status(command, *args, **kwargs):
        if command[:2] == ["git", "status"]:
            raise subprocess.TimeoutExpired(command, 10)
        return real(command, *args, **kwargs)

    monkeypatch.setattr(harness.subprocess, "run", slow_status)
    sha = harness.git_sha()  # the TimeoutExpired escaped and failed a finished run
    assert sha is None or sha.endswith("-unknown-status")


def _strict(text: str):
    """``text`` parsed as RFC 8259 JSON: no NaN or Infinity tokens."""

    def refuse(token):
        raise ValueError(f"not JSON: {token}")

    return json.loads(text, parse_constant=refuse)


def test_results_are_strict_json_and_read_back_with_their_non_finite_numbers(tmp_path):
    import numpy as np

    from benchmarks.harness import write_json_atomic, write_result
    from benchmarks.jsonio import read_result
    from benchmarks.report import render

    result = SuiteResult(
        "odd",
        False,
        {"limit": float("inf")},
        {"gap": [0.5, float("inf"), -np.inf], "first": np.float32("nan"),
         "table": np.array([[1.0, np.nan]]), "status": "inf-free", "pair": (1, -np.inf),
         "by_limit": {np.float64(np.inf): 1, np.int64(3): 2, 0.5: 3}},
        [SummaryRow("method", "ratio", float("nan"), "anchor", 1.0)],
        [Target.evaluate("gap", float("inf"), 1e-4, "<=")],
        None,
    )  # fmt: skip
    path = write_result(result, tmp_path)
    text = path.read_text()
    payload = _strict(text)  # no NaN / Infinity tokens
    assert payload["results"]["gap"] == [0.5, "inf", "-inf"]
    assert payload["results"]["first"] == "nan" and payload["parameters"]["limit"] == "inf"
    back = read_result(path)
    assert back["results"]["gap"] == [0.5, float("inf"), float("-inf")]
    assert np.isnan(back["results"]["first"]) and np.isnan(back["results"]["table"][0][1])
    assert back["results"]["pair"] == [1, float("-inf")]
    assert back["results"]["status"] == "inf-free"  # other strings stay strings
    assert back["results"]["by_limit"] == {"inf": 1, "3": 2, "0.5": 3}  # keys are strings
    assert np.isnan(back["summary"][0]["ratio"]) and back["targets"][0]["met"] is False
    assert back["targets"][0]["value"] == float("inf")
    table = render(tmp_path)
    assert "| gap | inf | <= 0.0001 | **no** |" in table
    assert "| method | ratio | nan | anchor | 1 | nan |" in table
    # the GPU scripts' writer too; files with bare NaN / Infinity still read
    write_json_atomic(tmp_path / "gpu.json", {"t": [float("nan")], "p": tmp_path})
    assert _strict((tmp_path / "gpu.json").read_text()) == {"t": ["nan"], "p": str(tmp_path)}
    (tmp_path / "old.json").write_text('{"a": NaN, "b": -Infinity}')
    old = read_result(tmp_path / "old.json")
    assert np.isnan(old["a"]) and old["b"] == float("-inf")


def test_pwl_instances_are_written_as_json_and_mps_and_read_back(tmp_path, capsys):
    # the suite's instances could be saved only from Python (instances.export), which no
    # command called: "saved as JSON and MPS so others can rerun them" had no way in
    from jaxopt_suite.lp import read_mps
    from jaxopt_suite.pwl import instances
    from jaxopt_suite.pwl.highs import binary_formulation

    name = "portfolio_n10_t24_k4_s0"
    assert cli.main(["pwl-instances", name, "--out", str(tmp_path / "out")]) == 0
    assert "wrote 1 instances" in capsys.readouterr().out
    json_path, mps_path = tmp_path / "out" / f"{name}.json", tmp_path / "out" / f"{name}.mps"
    model = instances.load(json_path)
    assert model.to_dict() == instances.build(instances.spec_by_name(name)).to_dict()
    binary, _ = binary_formulation(model, "cc")
    read = read_mps(mps_path)
    assert read.col_names == binary.col_names and read.A.nnz == binary.A.nnz
    assert read.integer.sum() == binary.integer.sum() > 0
    with pytest.raises(SystemExit):
        cli.main(["pwl-instances", "no_such_instance", "--out", str(tmp_path)])
    assert "unknown instance 'no_such_instance'; the suite's names: portfolio_" in (
        capsys.readouterr().err
    )
