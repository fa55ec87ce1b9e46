"""Benchmark suites, run with ``jaxopt-suite bench [SUITE ...]``.

Each suite module exposes ``run(*, quick, out_dir, progress) -> SuiteResult`` and writes its
plot into ``out_dir``; the command line writes ``<out_dir>/<suite>.json``.
"""

import importlib

SUITES = {
    "bilevel": "benchmarks.bilevel",
    "boosting": "benchmarks.boosting",
    "lp": "benchmarks.lp",
    "morl": "benchmarks.morl",
    "online_bilevel": "benchmarks.online_bilevel",
    "pwl": "benchmarks.pwl",
    "robust": "benchmarks.robust",
    "safe_rl": "benchmarks.safe_rl",
    "zo": "benchmarks.zo",
}


def load_suite(name: str):
    if name not in SUITES:
        raise KeyError(f"unknown suite {name!r}; valid suites: {', '.join(sorted(SUITES))}")
    return importlib.import_module(SUITES[name])
