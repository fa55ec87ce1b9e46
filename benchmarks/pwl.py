"""Suite ``pwl``: the batched PDLP branch-and-bound against HiGHS on the binary formulation.

Measured in one run, float64 (``jax.enable_x64`` inside the suite):

1. every instance of :data:`jaxopt_suite.pwl.instances.SUITE` (43, four families; the
   quick run takes the smallest of each family): ``solve_pwl`` (batch 64) and HiGHS on the
   convex-combination binary formulation (``solve_highs``, one thread), the same time
   limit: status, objective, bound, relative gap, time to proven optimality (relative gap
   1e-4) or to the limit, time to the first incumbent, nodes. Our solve follows a warm-up
   solve of the same model with the same time limit (XLA compilation of the batch widths
   and slot-update shapes it reaches and of the polishing LP is excluded, as it is paid
   once per matrix); the warm-up time is recorded. Up to the run at b1b9ef2 the warm-up
   lasted 3 s, which the compilation took on many instances, so their timed solves compiled
   the rest (transportation_4x5_k8: 3.5 to 6.1 s timed, 0.2 to 0.3 s solved again). XLA
   uses both cores of the machine;
2. nodes/s against the batch size B in {1, 16, 64, 256} on one mid-size instance: after a
   warm-up solve for every B, :data:`THROUGHPUT_REPEATS` rounds each run every B in turn
   for the same wall time, and each B's median run is reported (all runs are recorded):
   a change in the machine's load during the stage shows as spread between a B's runs
   instead of landing on one batch size (the results record each run's nodes/s, as
   ``nodes_per_second_runs``).

Targets: on every instance both prove optimal (relative gap <= 1e-4), the same objective
(relative difference <= 1e-4); a feasible incumbent on all instances; nodes/s at B=64 >= 8x
B=1. Reported without a threshold (the issue asks for it honestly, per family): the
geometric-mean ratio of the times to proven optimality, a run without a proof (time limit,
or an early stop without one) counting as the whole limit.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import jax
import numpy as np

from benchmarks.harness import Progress, SuiteResult, SummaryRow, Target
from jaxopt_suite.lp import pdlp, solve_lp
from jaxopt_suite.pwl import MIPStatus, PWLOptions, instances, solve_pwl
from jaxopt_suite.pwl.bnb import polish_options
from jaxopt_suite.pwl.highs import solve_highs

BATCH = 64
THREADS = 1
THROUGHPUT_INSTANCE = "transportation_10x10_k4_s0"
# an incumbent counts as feasible when PWLModel.check (largest relative violation of a
# bound, row or z = f(x)) is at most this
FEASIBILITY = 1e-6
THROUGHPUT_BATCHES = (1, 16, 64, 256)
THROUGHPUT_REPEATS = 3  # rounds over the batch sizes; the median run of each is reported
OBJECTIVE_TOLERANCE = 1e-4  # relative difference to HiGHS's optimum


PROOF_GAP = 1e-4  # "proven optimal": relative gap at most this


def proven(row: dict, side: str) -> bool:
    """``side`` ("ours" or "highs") proved optimality to a relative gap of 1e-4: our
    ``OPTIMAL`` can also end "optimal to the node LPs' tolerance only" with a wider gap,
    which is not a proof at 1e-4; HiGHS runs with mip_rel_gap=1e-4."""
    result = row[side]
    if side == "highs":
        return result["status"] == "optimal"
    return result["status"] == MIPStatus.OPTIMAL.name and result["gap"] <= PROOF_GAP * (1 + 1e-9)


def time_to_proof(row: dict, side: str, time_limit: float) -> float:
    """Seconds to proven optimality, or the time limit where there is no proof (a run that
    stopped early without one counts as the whole limit, not as a fast solve)."""
    return min(row[side]["seconds"], time_limit) if proven(row, side) else time_limit


def relative_difference(row: dict) -> float:
    """``|ours - HiGHS| / max(|HiGHS|, 1e-9)`` for an instance row holding both results."""
    ours, highs = row["ours"]["objective"], row["highs"]["objective"]
    return abs(ours - highs) / max(abs(highs), 1e-9)


def _options(time_limit: float, batch: int = BATCH) -> PWLOptions:
    return PWLOptions(batch_size=batch, time_limit=time_limit)


def _warm_up(model, time_limit: float, batch: int = BATCH, seconds: float | None = None) -> float:
    """Compiles what the timed solve will need: the batch widths, slot-update shapes and
    polishing LPs a solve of ``seconds`` (by default ``time_limit``: as long as the timed
    one) reaches, and a solve of the whole LP at the polish options (same static options as
    the timed run)."""
    start = time.perf_counter()
    seconds = time_limit if seconds is None else min(seconds, time_limit)
    solve_pwl(model, _options(seconds, batch))
    solve_lp(model.compile().lp, polish_options(_options(time_limit, batch)))
    return time.perf_counter() - start


def _ours(model, time_limit: float, batch: int = BATCH) -> dict:
    sol = solve_pwl(model, _options(time_limit, batch))
    return {
        "status": sol.status.name,
        "objective": sol.objective,
        "bound": sol.bound,
        "gap": sol.gap,
        "seconds": sol.time,
        "first_incumbent_seconds": sol.first_incumbent_time,
        "nodes": sol.nodes,
        "rounds": sol.rounds,
        "nodes_per_second": sol.nodes / sol.time if sol.time > 0 else math.nan,
        "polished": sol.polished,
        "heuristic_share": sol.heuristic_share,
        # the incumbent checked against the model itself (rows, bounds, z = f(x))
        "violation": sol.violation,
    }


def _throughput(model, seconds: float, batches, repeats: int, advance=lambda: None) -> dict:
    """``{str(B): median run}`` (:func:`_median_run`): a warm-up solve of ``seconds`` for
    every B (steady state: it compiles every batch width and slot-update shape the timed
    solves meet; all are kept, one small model's programs), then ``repeats`` rounds that
    each time a solve of ``seconds`` for every B in turn."""
    for B in batches:
        _warm_up(model, seconds, B)
        advance()
    runs: dict[str, list[dict]] = {str(B): [] for B in batches}
    for _ in range(repeats):
        for B in batches:
            runs[str(B)].append(_ours(model, seconds, B))
            advance()
    return {B: _median_run(r) for B, r in runs.items()}


def _median_run(runs: list[dict]) -> dict:
    """The run of median nodes/s (the lower middle one of an even count), with every run's
    nodes/s added as ``nodes_per_second_runs`` (in the order run)."""
    rates = [r["nodes_per_second"] for r in runs]
    middle = sorted(range(len(runs)), key=lambda i: rates[i])[(len(runs) - 1) // 2]
    return {**runs[middle], "nodes_per_second_runs": rates}


def _highs(model, time_limit: float) -> dict:
    res = solve_highs(model, formulation="cc", time_limit=time_limit, threads=THREADS)
    return {
        "status": res.status,
        "objective": res.objective,
        "bound": res.bound,
        "gap": res.gap,
        "seconds": res.seconds,
        "first_incumbent_seconds": res.first_incumbent_seconds,
        "nodes": res.nodes,
    }


def _release() -> None:
    """Drops the compiled programs and device data of earlier instances: 43 instances with
    several batch widths each compile hundreds of programs, and keeping them all exhausts
    the memory maps of a small machine."""
    jax.clear_caches()
    pdlp.clear_caches()


def _geomean(values) -> float:
    values = [v for v in values if math.isfinite(v) and v > 0]
    return float(np.exp(np.mean(np.log(values)))) if values else math.nan


def run(*, quick: bool, out_dir: Path, progress: Progress) -> SuiteResult:
    with jax.enable_x64(True):
        return _run(quick=quick, out_dir=out_dir, progress=progress)


def _run(*, quick: bool, out_dir: Path, progress: Progress) -> SuiteResult:
    time_limit = 5.0 if quick else 20.0
    if quick:
        specs = [
            min((s for s in instances.SUITE if s.family == f), key=lambda s: s.pwl_terms)
            for f in sorted({s.family for s in instances.SUITE})
        ]
    else:
        specs = list(instances.SUITE)
    throughput_time = 4.0 if quick else 15.0
    throughput_batches = (1, 16, 64) if quick else THROUGHPUT_BATCHES
    throughput_repeats = 1 if quick else THROUGHPUT_REPEATS
    parameters = {
        "time_limit": time_limit,
        "batch_size": BATCH,
        "relative_gap": PWLOptions().relative_gap,
        "highs": f"highspy, convex-combination binaries, threads={THREADS}, mip_rel_gap=1e-4",
        "ours": "float64 node LPs at 1e-4, incumbents polished to 1e-6; XLA on 2 CPU cores",
        "warmup": "a solve of the same instance with the same time limit",
        "warmup_seconds": time_limit,
        "instances": [s.name for s in specs],
        "throughput_instance": THROUGHPUT_INSTANCE,
        "throughput_seconds": throughput_time,
        "throughput_timing": (
            "steady state: a warm-up solve of the same length for every B, then rounds that "
            "each time every B in turn; the median run of each B"
        ),
        "throughput_repeats": throughput_repeats,
        "throughput_batches": list(throughput_batches),
    }
    rows = {}
    with progress.stage("pwl: instances", len(specs)) as advance:
        for spec in specs:
            _release()
            model = instances.build(spec)
            warm = _warm_up(model, time_limit)
            ours = _ours(model, time_limit)
            highs = _highs(model, time_limit)
            rows[spec.name] = {
                "family": spec.family,
                "size_class": instances.size_class(spec),
                "pwl_terms": spec.pwl_terms,
                "segments": spec.segments,
                "warmup_seconds": warm,
                "ours": ours,
                "highs": highs,
            }
            advance()
    model = instances.build(instances.spec_by_name(THROUGHPUT_INSTANCE))
    _release()
    with progress.stage(
        "pwl: nodes/s vs B", len(throughput_batches) * (1 + throughput_repeats)
    ) as advance:
        throughput = _throughput(
            model, throughput_time, throughput_batches, throughput_repeats, advance
        )
    results = {"instances": rows, "throughput": throughput}

    both = [r for r in rows.values() if proven(r, "ours") and proven(r, "highs")]
    diffs = [relative_difference(r) for r in both]
    feasible = sum(
        math.isfinite(r["ours"]["objective"]) and r["ours"]["violation"] <= FEASIBILITY
        for r in rows.values()
    )
    ratios = {
        name: time_to_proof(r, "ours", time_limit) / time_to_proof(r, "highs", time_limit)
        for name, r in rows.items()
    }
    families = sorted({r["family"] for r in rows.values()})
    per_family = {
        f: _geomean([ratios[n] for n, r in rows.items() if r["family"] == f]) for f in families
    }
    overall = _geomean(list(ratios.values()))
    rate = {B: throughput[B]["nodes_per_second"] for B in throughput}
    results["summary"] = {
        "both_optimal": len(both),
        "max_objective_difference": max(diffs) if diffs else math.nan,
        "feasible": feasible,
        "time_ratio_geomean": overall,
        "time_ratio_geomean_per_family": per_family,
        "ours_optimal": sum(proven(r, "ours") for r in rows.values()),
        "highs_optimal": sum(proven(r, "highs") for r in rows.values()),
    }
    summary = []
    # times to proven optimality; a run without a proof counts as the whole limit
    for f in [*families, None]:
        names = [n for n, r in rows.items() if f is None or r["family"] == f]
        summary.append(
            SummaryRow(
                "PWL B&B",
                f"geomean s to proof (limit {time_limit:g} s), {f or 'all'} ({len(names)})",
                _geomean([time_to_proof(rows[n], "ours", time_limit) for n in names]),
                "HiGHS",
                _geomean([time_to_proof(rows[n], "highs", time_limit) for n in names]),
            )
        )
    summary.append(
        SummaryRow(
            "PWL B&B",
            f"instances proved optimal (gap 1e-4) of {len(rows)}",
            float(results["summary"]["ours_optimal"]),
            "HiGHS",
            float(results["summary"]["highs_optimal"]),
        )
    )
    for B in throughput:
        if B != "1":
            summary.append(SummaryRow(f"B={B}", "nodes/s", rate[B], "B=1", rate["1"]))
    note = "quick run: the smallest instance of each family" if quick else ""
    targets = [
        Target.evaluate(
            "max relative objective difference to HiGHS where both prove optimal",
            max(diffs) if diffs else None,
            OBJECTIVE_TOLERANCE,
            "<=",
            f"{len(both)} instances proved optimal by both" + (f"; {note}" if note else ""),
        ),
        Target.evaluate(
            f"share of instances with a feasible incumbent (model violation <= {FEASIBILITY:g})",
            feasible / len(rows),
            1.0,
            ">=",
            note,
        ),
        Target.evaluate(
            "nodes/s at B=64 / B=1",
            rate["64"] / rate["1"] if rate.get("1") else None,
            8.0,
            ">=",
            note,
        ),
    ]
    plot = out_dir / "pwl.png"
    _plot(rows, throughput, time_limit, plot)
    return SuiteResult("pwl", quick, parameters, results, summary, targets, plot)


def _plot(rows, throughput, time_limit, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    ax = axes[0]
    families = sorted({r["family"] for r in rows.values()})
    for f, marker in zip(families, "osd^v<>", strict=False):
        pts = [
            (time_to_proof(r, "highs", time_limit), time_to_proof(r, "ours", time_limit))
            for r in rows.values()
            if r["family"] == f
        ]
        ax.scatter(*zip(*pts, strict=True), marker=marker, label=f)
    lims = [1e-3, time_limit * 1.5]
    ax.plot(lims, lims, "k--", lw=0.8)
    ax.set(xscale="log", yscale="log", xlabel="HiGHS seconds", ylabel="PWL B&B seconds")
    ax.set_title(f"time to gap 1e-4 (limit {time_limit:g} s)")
    ax.legend(fontsize=7)
    ax = axes[1]
    batches = [int(b) for b in throughput]
    ax.plot(batches, [throughput[str(b)]["nodes_per_second"] for b in batches], marker="o")
    ax.set(xscale="log", yscale="log", xlabel="batch size B", ylabel="nodes / s")
    ax.set_title(f"throughput, {THROUGHPUT_INSTANCE}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
