"""Which bound norm the LP preconditioning's bound scale ``s_b`` should take, measured on the
``pwl`` suite's branch-and-bound (not a suite).

:func:`jaxopt_suite.lp.precondition.bound_objective_scales` takes ``s_b = 1 / (||b|| + 1)``
with ``b`` the finite row *and* variable bounds; PDLP and cuPDLPx take the row bounds alone
(an equality row's side once). This probe solves each instance of one suite family with
both rules, in the same process and with the suite's settings (batch 64, its time limit, a
warm-up solve first; the rules alternate per instance), and records time, status and nodes.

    PYTHONPATH=. python -m benchmarks.pwl_bound_scale_probe --family resource_allocation \\
        --out benchmarks/results/probes/pwl_bound_scale_resource_allocation.json

On resource allocation (``probes/pwl_bound_scale_resource_allocation.json``, this module at
edf8b87, 7 min here) the rows-only rule's geometric-mean time is 2.71 s against 2.13 s, and
it solves 9 of the 11 instances within 20 s against 10 (resource_n400_k24: 187 nodes to the
time limit against 21 nodes and 4.9 s). It is faster on 4 of the instances, so the
difference is that of a family, not of every instance. The whole ``pwl`` suite run with the
rows-only rule (at 9273a6a, with the primal-weight update the solver has now) is
``probes/pwl_row_bound_scale_9273a6a.json``: every target met, resource allocation's ratio to
HiGHS 7.14 against 5.87 in ``results/pwl.json`` at edf8b87.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time

import numpy as np

from benchmarks import pwl as P
from benchmarks.harness import environment
from benchmarks.jsonio import dumps
from jaxopt_suite.lp import pdlp
from jaxopt_suite.lp.precondition import _finite_norm, bound_objective_scales
from jaxopt_suite.pwl import instances, solve_pwl


def rows_only(lp, row, col, scale_bounds=True):
    """PDLP's and cuPDLPx's rule: ``b`` the finite row sides, an equality's once."""
    if not scale_bounds:
        return 1.0, 1.0
    lower = np.where(lp.row_lower == lp.row_upper, np.inf, lp.row_lower)
    bound = 1.0 / (_finite_norm(lower / row, lp.row_upper / row) + 1.0)
    return bound, bound_objective_scales(lp, row, col, True)[1]


RULES = {"rows_and_variables": bound_objective_scales, "rows_only": rows_only}


def _solve(model, rule, time_limit):
    pdlp.bound_objective_scales = RULES[rule]
    P._release()  # the preconditioned data of the other rule are cached
    P._warm_up(model, time_limit)
    start = time.perf_counter()
    sol = solve_pwl(model, P._options(time_limit))
    return {
        "status": sol.status.name,
        "seconds": time.perf_counter() - start,
        "nodes": int(sol.nodes),
        "objective": sol.objective,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--family", default="resource_allocation")
    parser.add_argument("--time-limit", type=float, default=20.0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    specs = [s for s in instances.SUITE if s.family == args.family]
    if not specs:
        parser.error(f"no suite instance of family {args.family!r}")
    rows = {}
    for i, spec in enumerate(specs):
        model = instances.build(spec)
        order = list(RULES) if i % 2 == 0 else list(RULES)[::-1]
        rows[spec.name] = {rule: _solve(model, rule, args.time_limit) for rule in order}
        print(spec.name, json.dumps(rows[spec.name]), flush=True)
    pdlp.bound_objective_scales = bound_objective_scales

    def geomean(rule):
        times = [min(r[rule]["seconds"], args.time_limit) for r in rows.values()]
        return math.exp(np.mean(np.log(times)))

    summary = {rule: geomean(rule) for rule in RULES}
    summary["solved"] = {
        rule: sum(r[rule]["status"] == "OPTIMAL" for r in rows.values()) for rule in RULES
    }
    out = {"environment": environment(), "family": args.family, "rows": rows, "summary": summary}
    with open(args.out, "w") as f:
        f.write(dumps(out, indent=1))
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
