"""The PWL branch-and-bound on a GPU against HiGHS on the host, mid and large instances.

Run on a machine with a GPU (a CUDA build of jax, and highspy) from the repository root::

    PYTHONPATH=. python3 -m benchmarks.gpu_pwl --out DIR

For every mid and large instance of :data:`jaxopt_suite.pwl.instances.SUITE` (100 PWL
terms or more; :func:`~jaxopt_suite.pwl.instances.size_class`), a mid and a large one in
turn, each class smallest first, it runs ``solve_pwl`` on the default (GPU) device as the
``pwl`` suite does on a CPU: float64, batch 64, a warm-up solve before the timed one, the
same time limit (``--time-limit``, the suite's 20 s by default). The warm-up lasts
:data:`WARMUP` seconds, not the whole limit as the suite's: the device time is short. So a
timed solve may still compile what its warm-up did not reach, which counts against it.
HiGHS solves the same instances on the convex-combination binary formulation, one thread
per solve as in the suite, in ``--highs-workers`` (2) processes of their own that start
without the GPU (``JAX_PLATFORMS=cpu``), while the GPU solves run; unlike the suite's,
these solves share the host with each other and with the GPU solve's host side (16 cores
on the machines in view; the JSON records the count). ``--budget`` bounds the GPU part's wall time:
instances not started by then are listed as skipped, so a short lease still returns what
it measured; an instance whose GPU solve fails is recorded with its error.

Everything goes to ``DIR/gpu_pwl.json``, rewritten after each instance with the HiGHS
results finished by then: per instance both solvers' status, objective, gap and time; per
size class the geometric-mean time ratio ours / HiGHS, times capped at the limit and ours
charged the whole limit where it contradicts an optimum HiGHS proved (the issue's GPU
target: below 1 on the mid and on the large instances), and the objective agreement where
both prove optimality. ``--cpu-check`` runs the script on the CPU on the smallest mid
instance with a 2 s limit: a check of the script itself, whose timings mean nothing.
"""

from __future__ import annotations

import argparse
import concurrent.futures as futures
import importlib.util
import json
import math
import multiprocessing
import os
import platform
import time
from pathlib import Path

import jax

from benchmarks import pwl as suite
from benchmarks.harness import cpu_description, write_json_atomic
from jaxopt_suite.pwl import instances

CLASSES = ("mid", "large")
WARMUP = 3.0  # seconds of the warm-up solve before each timed one (the module docstring)


def _specs(cpu_check: bool) -> list[instances.InstanceSpec]:
    """Mid and large instances alternately, each class smallest first (so a run that its
    budget cuts short has measured both classes), then the rest of the longer class."""
    by_class = [
        sorted(
            (s for s in instances.SUITE if instances.size_class(s) == cls),
            key=lambda s: (s.pwl_terms, s.name),
        )
        for cls in CLASSES
    ]
    if cpu_check:
        return by_class[0][:1]
    order = []
    for i in range(max(map(len, by_class))):
        order.extend(specs[i] for specs in by_class if i < len(specs))
    return order


def _highs_worker_init() -> None:
    # besides the environment they inherit (main): HiGHS's processes build the models
    # only, and must not claim the GPU
    jax.config.update("jax_platforms", "cpu")


def _highs_job(name: str, time_limit: float) -> dict:
    model = instances.build(instances.spec_by_name(name))
    return suite._highs(model, time_limit)


# statuses that deny the optimum HiGHS proved
DENIALS = ("INFEASIBLE", "UNBOUNDED", "INFEASIBLE_OR_UNBOUNDED")


def _contradicts(row: dict) -> bool:
    """Whether ours claimed another answer than the optimum HiGHS proved: another optimum
    beyond the objective tolerance, infeasibility or unboundedness."""
    ours, highs = row["ours"], row["highs"]
    if highs["status"] != "optimal":
        return False
    return ours["status"] in DENIALS or (
        ours["status"] == "OPTIMAL" and suite.relative_difference(row) > suite.OBJECTIVE_TOLERANCE
    )


def _charged(row: dict, time_limit: float) -> float:
    """Our time capped at the limit, and the whole limit where it contradicts HiGHS's
    proven optimum (:func:`_contradicts`): a fast wrong answer is no win."""
    if _contradicts(row):
        return time_limit
    return min(row["ours"]["seconds"], time_limit)


def summarize(rows: dict, time_limit: float) -> dict:
    """Per size class over the instances both solvers finished: the geometric-mean time
    ratio ours / HiGHS (times capped at ``time_limit``; ours charged the whole limit where
    it contradicts HiGHS's proven optimum: :func:`_charged`), the instances where ours was
    faster, the contradictions, and the largest relative objective difference where both
    proved optimality."""
    out = {}
    for cls in CLASSES:
        done = {
            n: r for n, r in rows.items() if r["size_class"] == cls and "highs" in r and "ours" in r
        }
        if not done:
            continue
        ours = {n: _charged(r, time_limit) for n, r in done.items()}
        highs = {n: min(r["highs"]["seconds"], time_limit) for n, r in done.items()}
        both = [
            r
            for r in done.values()
            if r["ours"]["status"] == "OPTIMAL" and r["highs"]["status"] == "optimal"
        ]
        diffs = [suite.relative_difference(r) for r in both]
        ratio = suite._geomean([ours[n] / highs[n] for n in done])
        out[cls] = {
            "instances": len(done),
            "time_ratio_geomean": ratio,
            "beats_highs": bool(ratio < 1.0),
            "ours_faster": sum(ours[n] < highs[n] for n in done),
            "ours_optimal": sum(r["ours"]["status"] == "OPTIMAL" for r in done.values()),
            "highs_optimal": sum(r["highs"]["status"] == "optimal" for r in done.values()),
            "both_optimal": len(both),
            "contradictions": sum(_contradicts(r) for r in done.values()),
            "max_objective_difference": max(diffs) if diffs else math.nan,
        }
    return out


def _collect(pending: dict, rows: dict, *, wait: bool) -> None:
    """Moves HiGHS's results into ``rows``: those finished, or (``wait``) all of the
    instances the GPU part reached."""
    jobs = [j for j, n in pending.items() if n in rows and "highs" not in rows[n]]
    for job in futures.as_completed(jobs) if wait else [j for j in jobs if j.done()]:
        name = pending[job]
        try:
            rows[name]["highs"] = job.result()
        except Exception as err:  # recorded, not raised: the rest still counts
            rows[name]["highs_error"] = f"{type(err).__name__}: {err}"[:2000]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--time-limit", type=float, default=20.0)
    parser.add_argument("--budget", type=float, default=300.0, help="seconds for the GPU part")
    parser.add_argument("--highs-workers", type=int, default=2)
    parser.add_argument("--sha", default=None, help="the commit measured, for the record")
    parser.add_argument("--cpu-check", action="store_true", help="CPU check of the script")
    args = parser.parse_args(argv)
    if not (args.time_limit > 0 and args.budget > 0 and args.highs_workers >= 1):
        parser.error("--time-limit and --budget must be > 0 and --highs-workers >= 1")
    if importlib.util.find_spec("highspy") is None:
        parser.error("HiGHS's side needs highspy (pip install highspy, or wheels in .whl/)")
    backend = jax.default_backend()
    if backend != "gpu" and not args.cpu_check:
        parser.error(f"needs a GPU backend (jax sees {backend!r}); --cpu-check checks on CPU")
    time_limit = min(args.time_limit, 2.0) if args.cpu_check else args.time_limit
    specs = _specs(args.cpu_check)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "gpu_pwl.json"
    results = {
        "command": "PYTHONPATH=. python3 -m benchmarks.gpu_pwl --out DIR"
        + (" --cpu-check" if args.cpu_check else "")
        + f" --time-limit {time_limit:g} --budget {args.budget:g}"
        f" --highs-workers {args.highs_workers}",
        "sha": args.sha,
        "jax": jax.__version__,
        "devices": [str(d) for d in jax.devices()],
        "device_kind": jax.devices()[0].device_kind,
        "host_cpu": cpu_description(),
        "host_cores": os.cpu_count(),
        "python": platform.python_version(),
        "time_limit": time_limit,
        "ours": f"solve_pwl, batch {suite.BATCH}, float64, warm-up solve of {WARMUP:g} s first",
        "highs": f"highspy, convex-combination binaries, threads={suite.THREADS} per solve, "
        f"{args.highs_workers} solves at a time in processes of their own",
        "instances": {},
        "skipped": [],
        "summary": {},
    }
    rows = results["instances"]

    def write():
        results["summary"] = summarize(rows, time_limit)
        write_json_atomic(path, results)

    # HiGHS's processes inherit this: they build models and call HiGHS only, and must not
    # claim the GPU (jax reserves most of its memory in every process that starts on it);
    # this process's backend has started already (jax.devices above)
    saved = {k: os.environ.get(k) for k in ("JAX_PLATFORMS", "CUDA_VISIBLE_DEVICES")}
    os.environ.update(JAX_PLATFORMS="cpu", CUDA_VISIBLE_DEVICES="")
    try:
        _run(args, specs, time_limit, rows, results, write)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    print(json.dumps(results["summary"], indent=1))
    print(f"wrote {path}")
    return 0


def _run(args, specs, time_limit, rows, results, write) -> None:
    context = multiprocessing.get_context("spawn")  # no fork of a process holding the GPU
    with futures.ProcessPoolExecutor(
        args.highs_workers, mp_context=context, initializer=_highs_worker_init
    ) as pool:
        pending = {pool.submit(_highs_job, s.name, time_limit): s.name for s in specs}
        start = time.perf_counter()
        with jax.enable_x64(True):
            for spec in specs:
                if time.perf_counter() - start > args.budget:
                    results["skipped"].append(spec.name)
                    continue
                row = rows[spec.name] = {
                    "family": spec.family,
                    "size_class": instances.size_class(spec),
                    "pwl_terms": spec.pwl_terms,
                    "segments": spec.segments,
                }
                try:
                    suite._release()
                    model = instances.build(spec)
                    row["warmup_seconds"] = suite._warm_up(model, time_limit, seconds=WARMUP)
                    row["ours"] = suite._ours(model, time_limit)
                except Exception as err:  # recorded: the other instances still count
                    row["ours_error"] = f"{type(err).__name__}: {err}"[:2000]
                print(spec.name, json.dumps(row.get("ours", row.get("ours_error")), default=str))
                _collect(pending, rows, wait=False)
                write()
        # instances the GPU never reached need no HiGHS result
        for job, name in pending.items():
            if name not in rows:
                job.cancel()
        _collect(pending, rows, wait=True)
        pool.shutdown(wait=True, cancel_futures=True)
    write()


if __name__ == "__main__":
    raise SystemExit(main())
