"""What every benchmark suite shares: timing, memory, environment, targets, JSON, progress.

Only ratios measured in the same run mean anything on a shared 2-core machine, so every
suite measures its anchor (the baseline method) next to the method and reports both.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import jax

from benchmarks.jsonio import dumps

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_RESULTS_DIR = REPO_ROOT / "benchmarks" / "results"
# where `bench --quick` writes unless given --out (`make demo`): not over the committed
# full-size results, which `jaxopt-suite report` reads (ignored by git)
QUICK_RESULTS_DIR = DEFAULT_RESULTS_DIR / "quick"

Comparison = Literal[">=", "<=", ">", "<"]
_COMPARE: dict[str, Callable[[float, float], bool]] = {
    ">=": lambda value, threshold: value >= threshold,
    "<=": lambda value, threshold: value <= threshold,
    ">": lambda value, threshold: value > threshold,
    "<": lambda value, threshold: value < threshold,
}


@dataclasses.dataclass(frozen=True)
class Target:
    """One target of a suite, evaluated in the run that produced the JSON.

    ``met`` is ``None`` when the run did not evaluate it (``value`` is then ``None`` too).
    """

    name: str
    value: float | None
    threshold: float
    comparison: Comparison
    met: bool | None
    note: str = ""

    @classmethod
    def evaluate(
        cls, name: str, value: float | None, threshold: float, comparison: Comparison, note=""
    ) -> Target:
        if comparison not in _COMPARE:
            raise ValueError(f"comparison must be one of {sorted(_COMPARE)}, got {comparison!r}")
        if value is None:
            return cls(name, None, threshold, comparison, None, note or "not evaluated")
        finite = math.isfinite(value)
        met = finite and _COMPARE[comparison](value, threshold)
        return cls(name, float(value), threshold, comparison, bool(met), note)


@dataclasses.dataclass(frozen=True)
class SummaryRow:
    """A line of the printed table: a method's figure next to its anchor's, same run."""

    method: str
    metric: str
    value: float
    anchor: str
    anchor_value: float

    @property
    def ratio(self) -> float:
        return self.value / self.anchor_value if self.anchor_value else math.nan


@dataclasses.dataclass
class SuiteResult:
    """Everything a suite writes to ``<suite>.json`` in its results folder (write_result)."""

    suite: str
    quick: bool
    parameters: dict[str, Any]
    results: dict[str, Any]
    summary: list[SummaryRow]
    targets: list[Target]
    plot: Path | None = None
    notes: list[str] = dataclasses.field(default_factory=list)

    def to_json(self, measured_sha: str | None = None) -> dict[str, Any]:
        """``measured_sha``: the commit when the run started (the code that was measured);
        by default the commit now."""
        env = environment(with_git=measured_sha is None)
        if measured_sha is not None:
            env["git_sha"] = measured_sha
        return {
            "suite": self.suite,
            "quick": self.quick,
            "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "command": "jaxopt-suite bench " + self.suite + (" --quick" if self.quick else ""),
            "environment": env,
            "parameters": self.parameters,
            "results": self.results,
            "summary": [dict(dataclasses.asdict(row), ratio=row.ratio) for row in self.summary],
            "targets": [dataclasses.asdict(t) for t in self.targets],
            "plot": self.plot.name if self.plot else None,
            "notes": self.notes,
        }


def git_sha() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    # The results being written (JSON, plots) do not make the measured code dirty.
    try:  # a slow git status on a busy machine must not discard a finished run
        dirty = subprocess.run(
            [
                "git",
                "status",
                "--porcelain",
                "--untracked-files=no",
                "--",
                ".",
                ":!benchmarks/results",
            ],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return out.stdout.strip() + "-unknown-status"
    return out.stdout.strip() + ("-dirty" if dirty else "")


def cpu_description(cpuinfo: str | Path = "/proc/cpuinfo") -> str:
    """The CPU's model name and widest vector extension (``cpuinfo`` on Linux, else
    ``platform.processor()``). XLA compiles CPU code for the host's instruction set, so the
    same program's float results can differ between CPUs, and a long chaotic computation
    (a PPO run, say) then ends elsewhere: results measured on CPU say where."""
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return platform.processor() or "unknown"
    first = text.split("\n\n", 1)[0]  # the first processor's block
    pairs = (line.split(":", 1) for line in first.splitlines() if ":" in line)
    fields = {k.strip(): v.strip() for k, v in pairs}
    flags = set(fields.get("flags", "").split())
    widest = next((isa for isa in ("avx512f", "avx2", "avx") if isa in flags), "none")
    return f"{fields.get('model name', 'unknown')} ({widest})"


def environment(*, with_git: bool = True) -> dict[str, Any]:
    """The machine and software of a run; ``git_sha`` asks git unless ``with_git`` is off
    (the caller knows the commit measured)."""
    device = jax.devices()[0]
    return {
        "jax": jax.__version__,
        "jaxlib": jax.lib.__version__ if hasattr(jax.lib, "__version__") else None,
        "backend": jax.default_backend(),
        "device": device.device_kind,
        "device_count": jax.device_count(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "cpu": cpu_description(),
        "git_sha": git_sha() if with_git else None,
    }


@dataclasses.dataclass(frozen=True)
class Timing:
    compile_s: float
    median_s: float
    iqr_s: float
    repeats: int
    memory_bytes: int | None  # XLA's estimate for the compiled call (see compiled_memory)


def compiled_memory(compiled: Any) -> int | None:
    """XLA's peak estimate of a compiled call: argument + output + temp - alias bytes."""
    analysis = compiled.memory_analysis()
    if analysis is None:
        return None
    return int(
        analysis.argument_size_in_bytes
        + analysis.output_size_in_bytes
        + analysis.temp_size_in_bytes
        - analysis.alias_size_in_bytes
    )


def memory_bytes(fn: Callable, *args: Any) -> int | None:
    """:func:`compiled_memory` of ``jax.jit(fn)`` on these arguments."""
    return compiled_memory(jax.jit(fn).lower(*args).compile())


def time_interleaved(fns: dict[str, Callable], *args: Any, repeats: int = 7) -> dict[str, Timing]:
    """Compile time (lower + compile) apart from the steady-state median of ``repeats`` runs,
    for several functions with their runs interleaved.

    Round-robin repeats spread the machine's drift (other load, frequency changes) over
    every function alike, so the ratios between them are what the run can trust.
    """
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be an int >= 1, got {repeats!r}")
    compiled, compile_s = {}, {}
    for name, fn in fns.items():
        start = time.perf_counter()
        compiled[name] = jax.jit(fn).lower(*args).compile()
        compile_s[name] = time.perf_counter() - start
        jax.block_until_ready(compiled[name](*args))  # warm-up: first run may allocate
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, call in compiled.items():
            start = time.perf_counter()
            jax.block_until_ready(call(*args))
            samples[name].append(time.perf_counter() - start)
    timings = {}
    for name, values in samples.items():
        quartiles = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
        timings[name] = Timing(
            compile_s[name],
            statistics.median(values),
            quartiles[2] - quartiles[0],
            repeats,
            compiled_memory(compiled[name]),
        )
    return timings


def time_jitted(fn: Callable, *args: Any, repeats: int = 7) -> Timing:
    """:func:`time_interleaved` for a single function."""
    return time_interleaved({"fn": fn}, *args, repeats=repeats)["fn"]


class Progress:
    """A progress bar (rich) that suites drive with ``stage``; silent when disabled."""

    def __init__(self, enabled: bool = True):
        self._bar = None
        if enabled:
            from rich.progress import BarColumn, TimeElapsedColumn
            from rich.progress import Progress as RichProgress

            self._bar = RichProgress(
                "[progress.description]{task.description}",
                BarColumn(),
                "{task.completed}/{task.total}",
                TimeElapsedColumn(),
                transient=False,
            )

    def __enter__(self) -> Progress:
        if self._bar is not None:
            self._bar.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.stop()

    @contextlib.contextmanager
    def stage(self, description: str, total: int) -> Iterator[Callable[[int], None]]:
        """Yields ``advance(n=1)`` for a stage of ``total`` units of work."""
        if self._bar is None:
            yield lambda n=1: None
            return
        task = self._bar.add_task(description, total=total)
        try:
            yield lambda n=1: self._bar.advance(task, n)
        finally:
            self._bar.update(task, completed=total)


def write_result(result: SuiteResult, out_dir: Path, measured_sha: str | None = None) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{result.suite}.json"
    payload = result.to_json(measured_sha)
    # through a temporary file: a run killed while writing keeps the last complete result
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(dumps(payload, indent=2) + "\n")
    tmp.replace(path)
    return path


def write_json_atomic(path: Path, payload: Any) -> None:
    """``payload`` as JSON at ``path`` (:func:`dumps`; what JSON has no type for as its
    ``str``) through a temporary file, so a process killed while writing leaves the last
    complete file (the GPU scripts rewrite theirs after each case)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(dumps(payload, indent=1, default=str))
    tmp.replace(path)
