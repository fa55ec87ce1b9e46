"""Native CPU kernels through XLA's FFI, compiled on first use.

A kernel is a C++ source next to the module that uses it (with the ``*.h`` headers beside
it). It is compiled once per machine
with the C++ compiler found on the path (``CXX`` if set) against the FFI headers that ship
with jaxlib, into a cache directory (``JAXOPT_SUITE_CACHE`` or
``$XDG_CACHE_HOME/jaxopt_suite``), and registered as a custom-call target of XLA's CPU
backend. Where no compiler works, :func:`register` says why and the callers fall back to
plain XLA.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
from pathlib import Path

import jax

# -ffp-contract=off: no fused multiply-adds, so a kernel's vector and scalar code paths
# round alike and a batched LP's column gets the bits it gets alone, whatever the batch's
# width (the kernels pick their code path by width); fusing only in some paths moved the
# stopping evaluation of a float32 batch that narrows
_FLAGS = (
    "-O3",
    "-march=native",
    "-ffp-contract=off",
    "-std=c++17",
    "-shared",
    "-fPIC",
    "-pthread",
    "-w",
)


def cache_dir() -> Path:
    """Where the compiled kernel is kept."""
    root = os.environ.get("JAXOPT_SUITE_CACHE")
    if root:
        return Path(root)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "jaxopt_suite"


def _compiler() -> str | None:
    named = os.environ.get("CXX")
    if named:
        return shutil.which(named) or named
    for name in ("g++", "c++", "clang++"):
        found = shutil.which(name)
        if found:
            return found
    return None


def _cpu_tag() -> str:
    """Identifies the instruction set the library is built for (``-march=native``)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
        flags = next((line for line in text.splitlines() if line.startswith("flags")), "")
    except OSError:
        flags = ""
    return f"{platform.machine()}|{platform.processor()}|{flags}"


def build(source: Path, compiler: str | None, directory: Path) -> tuple[Path | None, str]:
    """Compiles ``source`` with ``compiler`` into ``directory`` unless a build for this
    source, the headers beside it (``*.h``, which it may include), jaxlib, compiler and CPU
    is there: ``(path, "")`` or ``(None, reason)``."""
    if compiler is None:
        return None, "no C++ compiler found (set CXX or install g++)"
    try:
        include = jax.ffi.include_dir()
    except Exception as error:  # noqa: BLE001 - any failure means: no headers
        return None, f"jax.ffi.include_dir() failed: {error}"
    if not Path(include, "xla", "ffi", "api", "ffi.h").exists():
        return None, f"jaxlib ships no FFI headers under {include}"
    key = hashlib.sha256()
    headers = [(h.name.encode(), h.read_bytes()) for h in sorted(source.parent.glob("*.h"))]
    parts = (source.read_bytes(), *(p for pair in headers for p in pair))
    for part in (*parts, jax.__version__, compiler, _cpu_tag(), " ".join(_FLAGS)):
        key.update(part if isinstance(part, bytes) else part.encode())
        key.update(b"\0")
    path = directory / f"{source.stem}_{key.hexdigest()[:16]}.so"
    if path.exists():
        return path, ""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        return None, f"cannot create the kernel cache {directory}: {error}"
    partial = directory / f".{path.name}.{os.getpid()}"
    command = [compiler, *_FLAGS, "-I", str(include), str(source), "-o", str(partial)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as error:
        return None, f"compiling {source.name} with {compiler} failed: {error}"
    if done.returncode != 0:
        tail = " | ".join(done.stderr.strip().splitlines()[-5:])
        return None, f"compiling {source.name} with {compiler} failed: {tail}"
    os.replace(partial, path)  # atomic: a concurrent build writes the same bytes
    return path, ""


@functools.cache
def register(source: Path, targets: tuple[tuple[str, str], ...]) -> str:
    """Builds ``source``, loads it and registers each ``(target, symbol)`` with XLA's CPU
    backend; ``""`` on success, else the reason (cached per process)."""
    path, reason = build(source, _compiler(), cache_dir())
    if path is None:
        return reason
    try:
        library = ctypes.cdll.LoadLibrary(str(path))
        for target, symbol in targets:
            handler = getattr(library, symbol)
            jax.ffi.register_ffi_target(target, jax.ffi.pycapsule(handler), platform="cpu")
    except (OSError, AttributeError) as error:
        return f"loading {path} failed: {error}"
    return ""
