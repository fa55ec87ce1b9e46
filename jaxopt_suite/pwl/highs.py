"""A HiGHS baseline for PWL models: binary formulations of the SOS2 sets, solved as a MIP.

HiGHS has no SOS constraints (it does not even convert them to binaries, see
ERGO-Code/HiGHS#2148), so the lambda formulation of :meth:`PWLModel.compile` cannot be
handed to it as is. This module adds binary variables that enforce the SOS2 condition
("at most two nonzero lambdas, and adjacent") on each set of ``K + 1`` lambdas (``K``
segments):

* ``"cc"`` (convex combination): one binary ``y_i`` per segment, ``sum_i y_i = 1``, and
  ``lambda_k <= y_{k-1} + y_k`` (only the segments that exist), so only the two
  breakpoints of the chosen segment can be nonzero. ``K`` binaries, ``K + 2`` rows.
* ``"log"`` (logarithmic, Vielma & Nemhauser 2011): segment ``i`` gets the reflected
  binary Gray code ``i ^ (i >> 1)`` on ``ceil(log2 K)`` bits ``y_j``; for each bit,
  ``sum_{k in L_j} lambda_k <= y_j`` and ``sum_{k in R_j} lambda_k <= 1 - y_j``, where
  ``L_j`` (``R_j``) holds the breakpoints whose touching segments all have bit ``j`` equal
  to 1 (0). Adjacent codes differ in one bit, so a binary vector leaves exactly the two
  breakpoints of its segment free (and none when it is no segment's code).

A set with one segment needs no binaries in either formulation. The binaries are appended
after the columns of the lambda LP, set by set (segment order for ``"cc"``, bit order for
``"log"``), so :meth:`CompiledPWL.model_values` applies to the leading columns.
"""

from __future__ import annotations

import functools
import math
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp

from jaxopt_suite._checks import check_integer, check_number
from jaxopt_suite.lp import LP, write_mps
from jaxopt_suite.lp.problem import distinct_names
from jaxopt_suite.pwl.model import CompiledPWL, PWLModel

FORMULATIONS = ("cc", "log")


def gray_code(segments: int) -> np.ndarray:
    """The ``(segments, ceil(log2 segments))`` 0/1 table of the reflected binary Gray code:
    row ``i`` holds the bits (least significant first) of ``i ^ (i >> 1)``."""
    if segments < 1:
        raise ValueError(f"need at least one segment, got {segments}")
    bits = (segments - 1).bit_length()  # ceil(log2 segments)
    codes = np.arange(segments) ^ (np.arange(segments) >> 1)
    return ((codes[:, None] >> np.arange(bits)[None, :]) & 1).astype(np.int8)


def log_branch_sets(segments: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """``(L, R)``: for each Gray-code bit ``j``, the breakpoints (``0..segments``) all of
    whose touching segments (``k - 1`` and ``k``, where they exist) have bit ``j`` equal
    to 1 (``L[j]``) or to 0 (``R[j]``)."""
    code = gray_code(segments)
    # bits of the segments left / right of each breakpoint; a missing side copies the other
    left = np.vstack([code[:1], code])
    right = np.vstack([code, code[-1:]])
    ones = (left == 1) & (right == 1)
    zeros = (left == 0) & (right == 0)
    nbits = code.shape[1]
    return (
        [np.flatnonzero(ones[:, j]) for j in range(nbits)],
        [np.flatnonzero(zeros[:, j]) for j in range(nbits)],
    )


@functools.lru_cache(maxsize=256)
def _log_rows(segments: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """The log rows of one set as ``(row, column, value)`` triplets relative to the set:
    row ``2j`` / ``2j + 1`` is bit ``j``'s left / right row; a column ``c >= 0`` is lambda
    ``c``, ``c < 0`` is bit ``-c - 1``. Also returns the number of bits."""
    L, R = log_branch_sets(segments)
    rows, cols, vals = [], [], []
    for j, (left, right) in enumerate(zip(L, R, strict=True)):
        rows += [2 * j] * (left.size + 1) + [2 * j + 1] * (right.size + 1)
        cols += [*left.tolist(), -j - 1, *right.tolist(), -j - 1]
        vals += [1.0] * left.size + [-1.0] + [1.0] * right.size + [1.0]
    return np.array(rows, np.int64), np.array(cols, np.int64), np.array(vals), len(L)


def binary_formulation(model: PWLModel, formulation: str = "cc") -> tuple[LP, CompiledPWL]:
    """The lambda LP of ``model`` plus binaries and rows enforcing SOS2 (see the module
    docstring). Returns ``(lp, compiled)``: ``lp.integer`` marks the binaries (bounds
    ``[0, 1]``, cost 0), appended after the ``compiled.lp`` columns, whose rows are kept
    first, in order."""
    if not isinstance(model, PWLModel):
        raise TypeError(f"model must be a PWLModel, got {type(model).__name__}")
    if formulation not in FORMULATIONS:
        raise ValueError(
            f"unknown formulation {formulation!r}; choose one of {', '.join(FORMULATIONS)}"
        )
    compiled = model.compile()
    base = compiled.lp
    m0, n0 = base.num_rows, base.num_cols
    rows: list[np.ndarray] = []
    cols: list[np.ndarray] = []
    vals: list[np.ndarray] = []
    row_lower: list[float] = []
    row_upper: list[float] = []
    row_names: list[str] = []
    col_names: list[str] = []

    for term, start, size in zip(
        compiled.terms, compiled.set_start, compiled.set_size, strict=True
    ):
        K = int(size) - 1
        if K < 2:
            continue
        lam = np.arange(start, start + size)
        first = n0 + len(col_names)
        if formulation == "cc":
            y = np.arange(first, first + K)
            col_names.extend(f"seg[{term.name}][{i}]" for i in range(K))
            r = m0 + len(row_lower)
            # row r: sum_i y_i = 1; row r + 1 + k: lambda_k - y_{k-1} - y_k <= 0
            seg = np.arange(K)
            rows.extend([np.full(K, r), r + 1 + np.arange(K + 1), r + 1 + seg, r + 2 + seg])
            cols.extend([y, lam, y, y])
            vals.extend([np.ones(K), np.ones(K + 1), np.full(K, -1.0), np.full(K, -1.0)])
            row_lower.extend([1.0] + [-math.inf] * (K + 1))
            row_upper.extend([1.0] + [0.0] * (K + 1))
            row_names.append(f"sos2_one[{term.name}]")
            row_names.extend(f"sos2_cc[{term.name}][{i}]" for i in range(K + 1))
        else:
            t_rows, t_cols, t_vals, nbits = _log_rows(K)
            r = m0 + len(row_lower)
            rows.append(r + t_rows)
            cols.append(np.where(t_cols >= 0, start + t_cols, first - t_cols - 1))
            vals.append(t_vals)
            col_names.extend(f"bit[{term.name}][{j}]" for j in range(nbits))
            row_lower.extend([-math.inf] * (2 * nbits))
            row_upper.extend([0.0, 1.0] * nbits)
            for j in range(nbits):
                row_names += [f"sos2_left[{term.name}][{j}]", f"sos2_right[{term.name}][{j}]"]

    nb, mb = len(col_names), len(row_lower)
    coo = base.A.tocoo()
    empty_i, empty_f = np.zeros(0, np.int64), np.zeros(0)
    A = sp.csr_array(
        (
            np.concatenate([coo.data, *vals, empty_f]),
            (
                np.concatenate([coo.row.astype(np.int64), *rows, empty_i]),
                np.concatenate([coo.col.astype(np.int64), *cols, empty_i]),
            ),
        ),
        shape=(m0 + mb, n0 + nb),
    )
    lp = LP(
        np.concatenate([base.c, np.zeros(nb)]),
        A,
        np.concatenate([base.row_lower, row_lower]),
        np.concatenate([base.row_upper, row_upper]),
        np.concatenate([base.var_lower, np.zeros(nb)]),
        np.concatenate([base.var_upper, np.ones(nb)]),
        objective_offset=base.objective_offset,
        objective_sign=base.objective_sign,
        name=f"{model.name}_{formulation}",
        row_names=distinct_names([*(base.row_names or [f"R{i}" for i in range(m0)]), *row_names]),
        col_names=distinct_names([*(base.col_names or [f"C{j}" for j in range(n0)]), *col_names]),
        integer=np.concatenate([base.integer, np.ones(nb, bool)]),
    )
    return lp, compiled


def write_pwl_mps(model: PWLModel, path: str | Path, formulation: str = "cc") -> None:
    """Writes the binary formulation of ``model`` as free MPS (binaries in ``MARKER``
    blocks; a maximisation is written negated, as :func:`write_mps` does). A generated
    name that equals a user's carries a suffix (``~1``), as in the model's
    LP, so that every row and column has its own name."""
    lp, _ = binary_formulation(model, formulation)
    write_mps(lp, path)


class HighsResult(NamedTuple):
    """A HiGHS solve of a PWL model, in the model's sense (a maximisation reports the
    maximum and an upper bound).

    ``objective``: the incumbent's value, ``+inf`` (``-inf`` for a maximisation) without a
    feasible point, ``-inf`` (``+inf``) when HiGHS proves the model unbounded (whatever
    feasible point it holds is then in ``x``). ``bound``: HiGHS's MIP dual bound (the LP
    optimum when no set needed binaries); ``+inf`` (``-inf``) when HiGHS proves the model
    infeasible and ``-inf`` (``+inf``) when it proves it unbounded, whatever HiGHS itself
    leaves there (it differs between formulations). ``gap``: HiGHS's relative MIP gap.
    ``status``: ``"optimal"``, ``"infeasible"``, ``"time_limit"``, ``"unbounded"``, else
    HiGHS's model status in snake case (e.g. ``"unbounded_or_infeasible"``). ``seconds``:
    wall time of ``Highs.run``. ``nodes``: branch-and-bound nodes.
    ``first_incumbent_seconds``: wall time from the start of ``run`` to the first feasible
    solution (NaN without one). ``x``: the model-variable values (``z`` included) of the
    incumbent, or ``None``.
    """

    objective: float
    bound: float
    gap: float
    status: str
    seconds: float
    nodes: int
    first_incumbent_seconds: float
    x: np.ndarray | None
    threads: int
    formulation: str


_STATUS = {
    "kOptimal": "optimal",
    "kInfeasible": "infeasible",
    "kTimeLimit": "time_limit",
    "kUnbounded": "unbounded",
}


def _status_name(status) -> str:
    """Short names for the common HiGHS model statuses, else the enum name in snake case
    (``kUnboundedOrInfeasible`` -> ``unbounded_or_infeasible``)."""
    name = status.name
    if name in _STATUS:
        return _STATUS[name]
    name = name[1:] if name.startswith("k") else name
    return "".join("_" + ch.lower() if ch.isupper() else ch for ch in name).lstrip("_")


def _highspy():
    try:
        import highspy
    except ImportError as error:  # an optional dependency (the "bench" extra)
        raise ImportError(
            "solve_highs needs highspy: pip install 'jaxopt_suite[bench]' (or highspy>=1.16)"
        ) from error
    return highspy


def _highs_lp(lp: LP):
    """``lp`` as a ``highspy.HighsLp`` (column-wise matrix, integrality, offset)."""
    highspy = _highspy()
    csc = sp.csc_array(lp.A)
    csc.sort_indices()
    h = highspy.HighsLp()
    h.num_col_ = lp.num_cols
    h.num_row_ = lp.num_rows
    h.col_cost_ = lp.c
    h.col_lower_ = lp.var_lower
    h.col_upper_ = lp.var_upper
    h.row_lower_ = lp.row_lower
    h.row_upper_ = lp.row_upper
    h.offset_ = float(lp.objective_offset)
    h.sense_ = highspy.ObjSense.kMinimize
    h.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    h.a_matrix_.num_col_ = lp.num_cols
    h.a_matrix_.num_row_ = lp.num_rows
    h.a_matrix_.start_ = csc.indptr.astype(np.int32)
    h.a_matrix_.index_ = csc.indices.astype(np.int32)
    h.a_matrix_.value_ = csc.data.astype(np.float64)
    kinds = (highspy.HighsVarType.kContinuous, highspy.HighsVarType.kInteger)
    h.integrality_ = [kinds[int(b)] for b in lp.integer]
    return h


def solve_highs(
    model: PWLModel,
    *,
    formulation: str = "cc",
    time_limit: float | None = None,
    threads: int = 1,
    relative_gap: float = 1e-4,
) -> HighsResult:
    """Solves ``model`` with HiGHS on its binary formulation (``"cc"`` or ``"log"``).

    Options: ``output_flag`` off, ``threads``, ``mip_rel_gap = relative_gap``,
    ``time_limit`` (seconds, when given), ``random_seed`` 0. ``first_incumbent_seconds``
    comes from HiGHS's improving-MIP-solution callback (``kCallbackMipImprovingSolution``);
    when a solution exists but the callback never fired (HiGHS found it outside the MIP
    search, e.g. presolve solved the model), it is ``seconds``, an upper bound.

    HiGHS sizes one process-wide thread pool at its first run and refuses a later run with
    another ``threads``, so the pool is reset before each run: do not call this while
    another HiGHS solve runs in the same process.
    """
    # checked before HiGHS sees them: it took a NaN time limit or gap as none, and int()
    # truncated 1.7 threads (and True) to 1
    threads = check_integer("threads (0: HiGHS chooses)", threads, 0)
    check_number("relative_gap", relative_gap, "be >= 0", lambda v: v >= 0)
    if time_limit is not None:
        check_number("time_limit", time_limit, "be > 0 (or None)", lambda v: v > 0)
    lp, compiled = binary_formulation(model, formulation)
    highspy = _highspy()
    h = highspy.Highs()
    options: dict[str, object] = {
        "output_flag": False,
        "threads": threads,
        "mip_rel_gap": float(relative_gap),
        "random_seed": 0,
    }
    if time_limit is not None:
        options["time_limit"] = float(time_limit)
    for key, value in options.items():
        if h.setOptionValue(key, value) != highspy.HighsStatus.kOk:
            raise ValueError(f"HiGHS rejected option {key} = {value!r}")
    status = h.passModel(_highs_lp(lp))
    if status == highspy.HighsStatus.kError:
        raise RuntimeError(f"HiGHS could not load the model ({status.name})")

    first: list[float] = []
    start = 0.0

    def on_improving(_event) -> None:
        if not first:
            first.append(time.perf_counter() - start)

    h.cbMipImprovingSolution.subscribe(on_improving)
    highspy.Highs.resetGlobalScheduler(True)  # see the docstring
    start = time.perf_counter()
    run_status = h.run()
    seconds = time.perf_counter() - start
    h.cbMipImprovingSolution.unsubscribe(on_improving)
    model_status = h.getModelStatus()
    if run_status == highspy.HighsStatus.kError and model_status in (
        highspy.HighsModelStatus.kNotset,
        highspy.HighsModelStatus.kLoadError,
        highspy.HighsModelStatus.kModelError,
    ):
        raise RuntimeError(f"HiGHS run failed (model status {model_status.name})")

    info = h.getInfo()
    sign = lp.objective_sign
    has_point = info.primal_solution_status == highspy.kSolutionStatusFeasible
    x = None
    objective = sign * math.inf
    if has_point:
        col_value = np.asarray(h.getSolution().col_value, np.float64)
        x = compiled.model_values(col_value[: compiled.lp.num_cols])
        objective = sign * float(info.objective_function_value)
    if first:
        first_incumbent = first[0]
    else:
        first_incumbent = seconds if has_point else math.nan
    bound, gap, nodes = float(info.mip_dual_bound), float(info.mip_gap), int(info.mip_node_count)
    if not lp.integer.any():  # no set needed binaries: HiGHS solved an LP, no MIP info
        optimal = model_status == highspy.HighsModelStatus.kOptimal
        bound = float(info.objective_function_value) if optimal else -math.inf
        gap, nodes = (0.0 if optimal else math.inf), 0
    if model_status == highspy.HighsModelStatus.kInfeasible:  # minimisation form: min = +inf
        bound = math.inf
    elif model_status == highspy.HighsModelStatus.kUnbounded:  # and min = -inf
        objective, bound = -sign * math.inf, -math.inf
    return HighsResult(
        objective=objective,
        bound=sign * bound,
        gap=gap,
        status=_status_name(model_status),
        seconds=seconds,
        nodes=nodes,
        first_incumbent_seconds=first_incumbent,
        x=x,
        threads=threads,
        formulation=formulation,
    )
