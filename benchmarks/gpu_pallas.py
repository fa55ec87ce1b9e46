"""The Pallas block-ELL SpMM compiled for real on a GPU: correctness and timings.

Run on a machine with a GPU (a CUDA build of jax) from the repository root::

    PYTHONPATH=. python3 -m benchmarks.gpu_pallas --out DIR

It tries each lowering (``mosaic`` and ``mosaic_warpgroup``: Mosaic GPU, ``pallas_call``'s
default on Hopper, with Lane and with Warpgroup semantics, named since jax 0.11 changed the
default from the first to the second; ``triton``: with Triton's compiler parameters) on
every case (``n``, density, tile, ``B``), checks the kernel against
:func:`pallas_kernels.bsr_spmm_reference` (float32, relative error), times it against the
reference and XLA's dense and BCOO products (median of ``--repeats`` calls after a
warm-up, ``block_until_ready``), and times ``solve_lp_batch`` with ``matrix="block"``
(``bsr_spmm``'s default compiler parameters) against ``"dense"`` and ``"sparse"`` on the
``lp`` suite's batched LP, at each batch size of ``--batch``.
A lowering that fails to compile is recorded with its error, not raised. Everything goes
to ``DIR/gpu_pallas.json``, rewritten after each case (a run cut short keeps what it
measured); ``--interpret`` runs the same script on a CPU in interpret mode, on one small
case and at most 2 repeats (a check of the script itself: its timings mean nothing).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
import traceback
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp
from jax.experimental import sparse as jsparse

from benchmarks.harness import write_json_atomic
from jaxopt_suite.lp import LPOptions, instances, solve_lp_batch
from pallas_kernels import BlockELL, BlockSizes, bsr_spmm, bsr_spmm_reference

CASES = [  # (n, density, tile, B)
    (n, density, tile, B)
    for n in (4096, 16384)
    for density in (0.001, 0.01)
    for tile in (16, 32)
    for B in (64, 256)
]
SMALL_CASES = [(512, 0.01, 16, 64)]


def _lowerings(interpret: bool) -> dict[str, dict]:
    """Keyword arguments of ``bsr_spmm`` per lowering; a lowering whose parameters this jax
    cannot build maps to ``{"error": ...}`` and is recorded as such."""
    if interpret:
        return {"interpret": {"interpret": True}}

    def mosaic(semantics_name):
        from jax.experimental.pallas import mosaic_gpu as plgpu

        semantics = getattr(plgpu.LoweringSemantics, semantics_name)
        return {"compiler_params": plgpu.CompilerParams(lowering_semantics=semantics)}

    def triton():
        from jax.experimental.pallas import triton as plt

        return {"compiler_params": plt.CompilerParams(num_warps=4, num_stages=2)}

    builders = {
        # named: jax 0.11 made Warpgroup the default, where 0.10 lowered by Lane
        "mosaic": lambda: mosaic("Lane"),
        "mosaic_warpgroup": lambda: mosaic("Warpgroup"),
        "triton": triton,
    }
    lowerings = {}
    for name, build in builders.items():
        try:
            lowerings[name] = {"interpret": False, **build()}
        except Exception as err:
            lowerings[name] = {"error": f"{type(err).__name__}: {err}"[:2000]}
    return lowerings


def _median_seconds(fn, *args, repeats: int) -> float:
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _spmm_case(n, density, tile, B, lowerings, repeats):
    A = sp.random(n, n, density=density, random_state=0, format="csr", dtype=np.float32)
    E = BlockELL.from_scipy(A, BlockSizes(tile, tile), dtype=jnp.float32)
    X = jax.random.normal(jax.random.key(0), (n, B), jnp.float32)
    reference = jax.jit(bsr_spmm_reference)
    expected = np.asarray(reference(E, X))
    scale = float(np.max(np.abs(expected))) or 1.0
    dense = jnp.asarray(A.toarray())
    bcoo = jsparse.BCOO.from_scipy_sparse(A)
    row = {
        "n": n,
        "density": density,
        "tile": tile,
        "B": B,
        "nnz": int(A.nnz),
        "tiles": int(np.prod(E.cols.shape)),
        "reference_s": _median_seconds(reference, E, X, repeats=repeats),
        "xla_dense_s": _median_seconds(jax.jit(lambda M, x: M @ x), dense, X, repeats=repeats),
        "xla_bcoo_s": _median_seconds(jax.jit(lambda M, x: M @ x), bcoo, X, repeats=repeats),
    }
    for name, kwargs in lowerings.items():
        if "error" in kwargs:
            row[f"{name}_error"] = kwargs["error"]
            continue
        kernel = jax.jit(lambda e, x, kw=kwargs: bsr_spmm(e, x, **kw))
        try:
            got = np.asarray(kernel(E, X))
            row[f"{name}_max_rel_error"] = float(np.max(np.abs(got - expected)) / scale)
            row[f"{name}_s"] = _median_seconds(kernel, E, X, repeats=repeats)
        except Exception as err:  # a lowering that does not compile is a result too
            row[f"{name}_error"] = f"{type(err).__name__}: {err}"[:2000]
            row[f"{name}_traceback"] = traceback.format_exc()[-4000:]
    return row


def _batched_lp(B, repeats):
    base = instances.random_sparse(100, 150, 0.05, seed=11)
    rng = np.random.default_rng(0)
    lower = np.tile(base.var_lower, (B, 1))
    upper = np.tile(base.var_upper, (B, 1))
    upper[:, :10] = rng.uniform(0.5, 3.0, (B, 10))
    out = {"B": B}
    for matrix in ("block", "dense", "sparse"):
        options = LPOptions(tolerance=1e-4, matrix=matrix)
        try:
            solve_lp_batch(base, lower, upper, options=options)  # compile
            times, result = [], None
            for _ in range(repeats):
                start = time.perf_counter()
                result = solve_lp_batch(base, lower, upper, options=options)
                times.append(time.perf_counter() - start)
            out[f"{matrix}_s"] = statistics.median(times)
            out[f"{matrix}_optimal"] = int(np.sum(result.status == 0))
            out[f"{matrix}_objective_mean"] = float(np.mean(result.objective))
        except Exception as err:
            out[f"{matrix}_error"] = f"{type(err).__name__}: {err}"[:2000]
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--interpret", action="store_true", help="CPU check of the script")
    parser.add_argument(
        "--batch", type=int, nargs="+", default=None,
        help="batch sizes B of the batched LP (default: 64 256; with --interpret: 64)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    batches = args.batch or ([64] if args.interpret else [64, 256])
    if args.repeats < 1 or min(batches) < 1:
        parser.error(f"--repeats and --batch must be >= 1, got {args.repeats} and {batches}")
    backend = jax.default_backend()
    if backend != "gpu" and not args.interpret:
        parser.error(f"needs a GPU backend (jax sees {backend!r}); --interpret checks on CPU")
    lowerings = _lowerings(args.interpret)
    cases = SMALL_CASES if args.interpret else CASES
    repeats = min(args.repeats, 2) if args.interpret else args.repeats
    results = {
        "command": "PYTHONPATH=. python3 -m benchmarks.gpu_pallas --out DIR"
        + (" --interpret" if args.interpret else "")
        + f" --repeats {repeats} --batch {' '.join(map(str, batches))}",
        "repeats": repeats,
        "jax": jax.__version__,
        "devices": [str(d) for d in jax.devices()],
        "device_kind": jax.devices()[0].device_kind,
        "python": platform.python_version(),
        "spmm": [],
        "batched_lp": [],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "gpu_pallas.json"
    # the batched LP first: it is short, and a run cut short then keeps it
    for B in batches:
        results["batched_lp"].append(_batched_lp(B, repeats=min(repeats, 5)))
        print(json.dumps(results["batched_lp"][-1]), flush=True)
        write_json_atomic(path, results)
    for case in cases:
        results["spmm"].append(_spmm_case(*case, lowerings, repeats))
        print(json.dumps(results["spmm"][-1], default=str)[:400], flush=True)
        write_json_atomic(path, results)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
