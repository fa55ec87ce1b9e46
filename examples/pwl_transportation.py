"""Transportation with concave (economies-of-scale) arc costs, by batched branch-and-bound.

    python examples/pwl_transportation.py            # 5 x 10 arcs, 4 segments each
    python examples/pwl_transportation.py --quick    # 2 x 5 arcs

Concave costs make the problem nonconvex: the LP relaxation of the lambda formulation is
the convex envelope, which spreads flow over many arcs, while an optimum concentrates it.
SOS2 branching closes that gap; every round solves a batch of node LPs that differ only in
bounds. HiGHS (when installed) solves the binary formulation for comparison.
"""

from __future__ import annotations

import argparse

import jax

from jaxopt_suite.pwl import PWLOptions, instances, solve_pwl


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args(argv)
    with jax.enable_x64(True):  # node LPs in float64; incumbents polished to 1e-6
        return _run(args)


def _run(args):
    sources, sinks = (2, 5) if args.quick else (5, 10)
    model = instances.transportation(sources, sinks, segments=4, seed=0)
    relaxation = model.compile()
    print(
        f"{len(model.terms)} concave arc costs, LP {relaxation.lp.num_rows} x "
        f"{relaxation.lp.num_cols}"
    )
    sol = solve_pwl(model, PWLOptions(batch_size=args.batch_size, time_limit=60.0))
    print(
        f"ours : {sol.status.name:10s} cost {sol.objective:.6g} bound {sol.bound:.6g} "
        f"nodes {sol.nodes} ({sol.time:.1f} s, with compilation)"
    )
    out = {"ours": sol}
    try:
        from jaxopt_suite.pwl.highs import solve_highs
    except ImportError:  # pragma: no cover - highspy is in the bench extra
        return out
    ref = solve_highs(model, time_limit=60.0)
    print(f"HiGHS: {ref.status:10s} cost {ref.objective:.6g} ({ref.seconds:.2f} s)")
    out["highs"] = ref
    return out


if __name__ == "__main__":
    main()
