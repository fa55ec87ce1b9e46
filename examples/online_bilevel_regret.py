"""Online bilevel learners on a drifting quadratic stream: regret against the drift.

    python examples/online_bilevel_regret.py            # T = 100, 1000, 10000
    python examples/online_bilevel_regret.py --quick    # T = 100, 1000

The stream's inner and outer problems are quadratics whose targets turn on a circle with
speed 1/sqrt(t), so the function variation V_T grows as sqrt(T). The exact local regret
sum_t ||grad F_t(x_t)||^2 of AOBO stays below a constant times (1 + V_T), at O(log t)
inner gradients per round; the single-loop learners pay more regret for less work.
"""

from __future__ import annotations

import argparse

from jaxopt_suite.bilevel import online


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--drift", default="sqrt", choices=["static", "sqrt", "linear"])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    horizons = (100, 1000) if args.quick else (100, 1000, 10_000)
    stream = online.quadratic_stream(drift=args.drift, outer_condition=10.0)
    learners = {
        "AOBO": online.aobo(inner_lr=0.25, outer_lr=0.5),
        "FSOBO": online.fsobo(inner_lr=0.25, outer_lr=0.1),
        "SOBOW (W=4)": online.sobow(window=4, inner_lr=0.25, outer_lr=0.1),
    }
    out = {}
    for T in horizons:
        variation = stream.variation(T, radius=5.0)
        for name, learner in learners.items():
            result = online.run_online(
                stream.problem, learner, stream.x0, stream.y0, T, oracle=stream.oracle
            )
            out[name, T] = {
                "regret": result.regret,
                "V_T": variation,
                "inner": int(result.history["inner"][-1]),
            }
            print(
                f"T={T:>6} {name:>12}: regret {result.regret:9.2f}   V_T {variation:8.2f}   "
                f"regret/(1+V_T) {result.regret / (1 + variation):6.3f}   inner gradients "
                f"{out[name, T]['inner']}"
            )
    return out


if __name__ == "__main__":
    main()
