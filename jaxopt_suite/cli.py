"""The ``jaxopt-suite`` command line.

``jaxopt-suite bench [SUITE ...] [--quick] [--out DIR]`` runs benchmark suites (all of them
when none is named), shows progress, writes ``DIR/<suite>.json`` plus a PNG plot per suite,
and prints each method next to its anchor measured in the same run, with the targets.
``DIR`` is ``benchmarks/results`` by default, and ``benchmarks/results/quick`` for
``--quick`` runs, so a quick run never replaces a full-size result.

``jaxopt-suite report [--results DIR] [--readme FILE]`` rewrites the README's benchmark
section from the JSON files.

``jaxopt-suite pwl-instances [NAME ...] [--out DIR] [--formulation cc|log]`` writes the PWL
instance suite (all 43 when no name is given) as ``<name>.json`` (the model, reloadable
with ``jaxopt_suite.pwl.instances.load``) and ``<name>.mps`` (its binary formulation, for
any MIP solver) into ``DIR`` (``pwl_instances``).
"""

from __future__ import annotations

import argparse
import importlib
import math
import sys
from pathlib import Path

__all__ = ["main"]


class _Parser(argparse.ArgumentParser):
    """argparse that names the valid choices when it refuses an argument."""

    def error(self, message: str):
        valid = " ".join(
            opt for action in self._actions for opt in action.option_strings if opt != "-h"
        )
        self.print_usage(sys.stderr)
        hint = f"\nvalid options: {valid}" if valid else ""
        self.exit(2, f"{self.prog}: error: {message}{hint}\n")


def _benchmarks():
    """Imports the ``benchmarks`` package of the source checkout."""
    try:
        return importlib.import_module("benchmarks")
    except ImportError:
        root = Path(__file__).resolve().parent.parent
        if not (root / "benchmarks" / "__init__.py").is_file():
            raise SystemExit(
                "jaxopt-suite bench: the benchmark suites live in the source checkout "
                "(benchmarks/); run from a clone installed with 'pip install -e .[all]'"
            ) from None
        sys.path.insert(0, str(root))
        return importlib.import_module("benchmarks")


def _format(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        return f"{value:.4g}"
    return str(value)


def _print_summary(results) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title="method vs anchor (same run)")
    for column in ("suite", "method", "metric", "value", "anchor", "anchor value", "ratio"):
        table.add_column(column)
    for result in results:
        for row in result.summary:
            table.add_row(
                result.suite,
                row.method,
                row.metric,
                _format(row.value),
                row.anchor,
                _format(row.anchor_value),
                _format(row.ratio),
            )
    console.print(table)
    targets = Table(title="targets")
    for column in ("suite", "target", "value", "threshold", "met"):
        targets.add_column(column)
    for result in results:
        for target in result.targets:
            met = "not evaluated" if target.met is None else _format(target.met)
            threshold = f"{target.comparison} {_format(target.threshold)}"
            targets.add_row(result.suite, target.name, _format(target.value), threshold, met)
    console.print(targets)


def _path(parser, option: str, given: str | None, default: Path) -> Path:
    """``given`` as a path, ``default`` when the option was not given; an empty string (an
    unset shell variable) is an error, not the repository's own files."""
    if given is None:
        return default
    if not given.strip():
        parser.error(f"{option}: expected a path, got {given!r}")
    return Path(given)


def _check_writable(parser, directory: Path) -> None:
    """``directory`` exists (made if need be) and takes a file, or a parser error."""
    import tempfile

    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".write-check-"):
            pass
    except OSError as error:
        parser.error(f"--out {directory}: cannot write results there ({error})")


def _bench(args, parser) -> int:
    benchmarks = _benchmarks()
    from benchmarks.harness import (
        DEFAULT_RESULTS_DIR,
        QUICK_RESULTS_DIR,
        Progress,
        git_sha,
        write_result,
    )

    names = args.suites or sorted(benchmarks.SUITES)
    unknown = [name for name in names if name not in benchmarks.SUITES]
    if unknown:
        parser.error(
            f"unknown suite(s): {', '.join(unknown)}; valid suites: "
            + ", ".join(sorted(benchmarks.SUITES))
        )
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:  # each run is long: one result per suite
        parser.error(f"suite(s) named more than once: {', '.join(repeated)}")
    default = QUICK_RESULTS_DIR if args.quick else DEFAULT_RESULTS_DIR
    out_dir = _path(parser, "--out", args.out, default)
    _check_writable(parser, out_dir)  # before the suites run, not after an hour of them
    results = []
    # The commit measured is the one checked out when the run starts, whatever happens to
    # the working tree while it runs.
    measured_sha = git_sha()
    with Progress(enabled=not args.no_progress) as progress:
        for name in names:
            suite = benchmarks.load_suite(name)
            result = suite.run(quick=args.quick, out_dir=out_dir, progress=progress)
            path = write_result(result, out_dir, measured_sha)
            results.append(result)
            print(f"wrote {path}" + (f" and {out_dir / result.plot.name}" if result.plot else ""))
    _print_summary(results)
    return 0


def _report(args, parser) -> int:
    _benchmarks()
    from benchmarks.harness import DEFAULT_RESULTS_DIR
    from benchmarks.report import update_readme

    results = _path(parser, "--results", args.results, DEFAULT_RESULTS_DIR)
    readme = _path(parser, "--readme", args.readme, DEFAULT_RESULTS_DIR.parent.parent / "README.md")
    try:
        update_readme(readme, results)
    except (ValueError, OSError) as err:  # the user's folder or file: a message, exit 2
        parser.error(str(err))
    print(f"updated {readme} from {results}")
    return 0


def _pwl_instances(args, parser) -> int:
    from jaxopt_suite.pwl import instances

    known = {spec.name: spec for spec in instances.SUITE}
    unknown = [name for name in args.names if name not in known]
    if unknown:
        parser.error(f"unknown instance {unknown[0]!r}; the suite's names: {', '.join(known)}")
    specs = [known[name] for name in args.names] if args.names else None
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        parser.error(f"--out {out} exists and is not a directory")
    paths = instances.export(out, specs, args.formulation)
    print(f"wrote {len(paths) // 2} instances (JSON + MPS, {args.formulation} binaries) to {out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="jaxopt-suite", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", parser_class=_Parser)
    bench = commands.add_parser("bench", help="run benchmark suites and write JSON + plots")
    bench.add_argument("suites", nargs="*", metavar="SUITE", help="suites to run (default: all)")
    bench.add_argument("--quick", action="store_true", help="smaller sizes (make demo)")
    bench.add_argument(
        "--out",
        metavar="DIR",
        help="output directory (benchmarks/results; benchmarks/results/quick with --quick)",
    )
    bench.add_argument("--no-progress", action="store_true", help="no progress bar")
    report = commands.add_parser("report", help="rewrite the README benchmark tables")
    report.add_argument("--results", metavar="DIR", help="JSON directory (benchmarks/results)")
    report.add_argument("--readme", metavar="FILE", help="README to update (README.md)")
    pwl = commands.add_parser(
        "pwl-instances", help="write the PWL instance suite as JSON and MPS files"
    )
    pwl.add_argument("names", nargs="*", metavar="NAME", help="instances (default: all 43)")
    pwl.add_argument("--out", metavar="DIR", default="pwl_instances", help="(pwl_instances)")
    pwl.add_argument(
        "--formulation",
        choices=("cc", "log"),
        default="cc",
        help="binary formulation in the MPS files: convex combination or logarithmic (cc)",
    )
    argv = sys.argv[1:] if argv is None else list(argv)
    args, unknown = parser.parse_known_args(argv)
    if args.command == "bench":
        # suites and options in any order ('bench robust --quick morl'): parse_known_args
        # ends the suites at the first option and would leave 'morl' unrecognised
        start = argv.index("bench")
        before = [arg for arg in unknown if arg in argv[:start]]  # 'jaxopt-suite --x bench'
        args = bench.parse_intermixed_args(argv[start + 1 :])
        args.command, unknown = "bench", []
        if before:
            parser.error(f"unrecognized arguments before bench: {' '.join(before)}")
    if unknown:
        # Report against the subcommand, so the message lists that command's options.
        {"bench": bench, "report": report, "pwl-instances": pwl}.get(args.command, parser).error(
            f"unrecognized arguments: {' '.join(unknown)}"
        )
    if args.command is None:
        parser.print_help()
        return 2
    if args.command == "report":
        return _report(args, report)
    if args.command == "pwl-instances":
        return _pwl_instances(args, pwl)
    return _bench(args, bench)


if __name__ == "__main__":
    sys.exit(main())
