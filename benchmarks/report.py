"""Renders ``benchmarks/results/*.json`` as the README's "Benchmarks" section."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from benchmarks.jsonio import read_result

START = "<!-- benchmarks:start (jaxopt-suite report rewrites this block) -->"
END = "<!-- benchmarks:end -->"
# what a suite's result JSON (``benchmarks.harness``) holds and :func:`render` reads
SUITE_KEYS = ("suite", "command", "environment", "targets", "summary")


def _number(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _cell(text) -> str:
    """A table cell: a literal ``|`` would end the cell, so it is escaped."""
    return str(text).replace("|", "\\|")


def _morl_fronts(results: dict) -> list[str]:
    """The ``morl`` suite's hypervolume and sparsity per task, objective and method (its
    results hold them; the summary rows carry the utilities)."""
    methods = ("aetdice", "optidice", "serdice", "bc")
    lines = [
        "| task | objective | " + " | ".join(f"{m} HV / sparsity" for m in methods) + " |",
        "|---|---|" + "---|" * len(methods),
    ]
    for task, cell in results.items():
        for label, entry in cell.get("objectives", {}).items():
            values = [
                f"{_number(entry[m]['hypervolume'])} / {_number(entry[m]['sparsity'])}"
                if m in entry
                else "-"
                for m in methods
            ]
            lines.append(f"| {_cell(task)} | {_cell(label)} | " + " | ".join(values) + " |")
    return lines + [""]


# tables a suite's results hold beyond its targets and summary rows
EXTRA_TABLES = {"morl": _morl_fronts}


def render(results_dir: Path, relative_to: Path | None = None) -> str:
    """Markdown tables of every suite's targets and method-vs-anchor figures, and its plot
    (linked relative to ``relative_to``, the README's directory)."""
    lines = []
    for path in sorted(results_dir.glob("*.json")):
        try:
            payload = read_result(path)
        except (json.JSONDecodeError, UnicodeDecodeError) as error:  # which file, too
            raise ValueError(f"{path} is not valid JSON: {error}") from None
        try:
            lines.extend(_suite_lines(path, payload, results_dir, relative_to))
        except (KeyError, TypeError, IndexError, AttributeError) as error:
            raise ValueError(
                f"{path} is not a complete suite result ({type(error).__name__}: {error}): "
                "rerun its suite, or move the file out of the results folder"
            ) from None
    return "\n".join(lines).rstrip() + "\n"


def _suite_lines(path: Path, payload, results_dir: Path, relative_to: Path | None) -> list[str]:
    """The Markdown of one suite's result (:func:`render`)."""
    lines = []
    fields = payload if isinstance(payload, dict) else {}
    missing = [key for key in SUITE_KEYS if key not in fields]
    if missing:
        raise ValueError(
            f"{path} is not a suite's result (it lacks {', '.join(missing)}): every JSON "
            f"file directly under {results_dir} is read as one; keep other files in a "
            "subfolder"
        )
    env = payload["environment"]
    lines.append(
        f"**{payload['suite']}** — `{payload['command']}` on {env['device']} "
        f"({env['cpu_count']} cores), jax {env['jax']}, commit `{(env['git_sha'] or '?')[:12]}`"
    )
    lines.append("")
    if payload.get("plot"):
        plot = path.parent / payload["plot"]
        link = os.path.relpath(plot, relative_to) if relative_to else str(plot)
        lines.append(f"![{payload['suite']} benchmark]({link})")
        lines.append("")
    lines.append("| target | value | threshold | met |")
    lines.append("|---|---|---|---|")
    for target in payload["targets"]:
        met = {True: "yes", False: "**no**", None: "not evaluated"}[target["met"]]
        lines.append(
            f"| {_cell(target['name'])} | {_number(target['value'])} | "
            f"{target['comparison']} {_number(target['threshold'])} | {met} |"
        )
    lines.append("")
    lines.append("| method | metric | value | anchor | anchor value | ratio |")
    lines.append("|---|---|---|---|---|---|")
    for row in payload["summary"]:
        lines.append(
            f"| {_cell(row['method'])} | {_cell(row['metric'])} | "
            f"{_number(row['value'])} | {_cell(row['anchor'])} | "
            f"{_number(row['anchor_value'])} | {_number(row['ratio'])} |"
        )
    lines.append("")
    if payload["suite"] in EXTRA_TABLES and isinstance(payload.get("results"), dict):
        lines.extend(EXTRA_TABLES[payload["suite"]](payload["results"]))
    return lines


def update_readme(readme: Path, results_dir: Path) -> None:
    """Rewrites the block between ``START`` and ``END`` in ``readme`` from the suites' JSON
    files directly under ``results_dir``; refuses (``ValueError``, ``readme`` untouched) a
    folder that is missing or holds none, which would empty the block."""
    if not results_dir.is_dir():
        raise ValueError(f"results folder {results_dir} does not exist")
    if not any(results_dir.glob("*.json")):
        raise ValueError(f"results folder {results_dir} holds no suite results (*.json)")
    text = readme.read_text()
    if START not in text or END not in text:
        raise ValueError(f"{readme} has no benchmark markers ({START} ... {END})")
    head, rest = text.split(START, 1)
    if END not in rest:
        raise ValueError(f"{readme}: the marker {END} must come after {START}")
    _, tail = rest.split(END, 1)
    body = render(results_dir.resolve(), readme.resolve().parent)
    readme.write_text(head + START + "\n" + body + END + tail)
