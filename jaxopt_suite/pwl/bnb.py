"""Branch-and-bound for piecewise-linear models over the batched PDLP solver.

Every node is the lambda formulation of the model (:meth:`PWLModel.compile`) with, for each
SOS2 set ``s``, only the columns of an interval ``[lo_s, hi_s]`` allowed to be nonzero (the
others get upper bound 0). The root allows everything; SOS2 branching (Beale-Tomlin) on a
set whose LP nonzeros span more than two adjacent columns picks ``r`` strictly between the
first and the last nonzero and makes the children ``[lo_s, r]`` and ``[r, hi_s]``, so both
are strictly smaller than the parent (a split at the first or last nonzero would
reproduce it). A node whose nonzeros are adjacent in every set is solved: its LP point is
a feasible PWL point.

A round fills the free slots of one :class:`~jaxopt_suite.lp.LPBatch` with jobs, advances
the batch a few evaluation periods, and reads the slots that stopped:

- node jobs, chosen best-bound first, with some slots diving (the newest nodes), warm
  started from the parent's LP point;
- while there is no incumbent, a solved node's point is projected on the host (each set's
  lambdas held to their pair, or to the segment of its argument, the rows met by a
  least-squares repair); a result that meets the model to rounding is an incumbent at once;
- SOS2 repair jobs: a node's intervals narrowed, per set, to the segment holding
  ``x = sum d_k lambda_k`` (or the adjacent pair of largest mass); any optimal answer is a
  feasible PWL point, re-solved to a tight tolerance (polished: with each set held to its
  pair, its lambdas are affine in its argument, so the LP solved is the one over the
  model's columns and rows with each PWL term replaced by its piece), or where that LP
  does not finish, projected as above. Polishes that come out optimal are remembered, and
  pairs are repaired once (the same pairs come back from node after node). Pairs whose LP
  is infeasible queue repairs that move one set's pair within the node's interval,
  nearest positions first, every set in turn (at most :data:`REPAIR_ALTERNATIVES`): with
  one SOS2 set of up to that many segments, every pair the node allows is tried, so repair
  finds a PWL point of the node whenever one exists; with several sets, only those one
  move away. A PWL point may need a move in every set, so with several sets (and while
  there is no incumbent) such a node also starts a repair dive, one at a time: a
  depth-first search whose jobs hold the most violated set of their parent's point to one
  pair, tried in the order of that point's mass, and move the last fixed set to its next
  pair when an LP is infeasible. It visits every choice of pairs its LPs do not rule out,
  so it ends at a PWL point of the node whenever one exists, unless it first spends its
  :data:`REPAIR_DIVE` LPs (which covers every choice on models of three sets of seven
  pairs; a larger model's dive can stop short);
- feasibility-pump jobs: the node's polytope with the objective replaced by the lambda mass
  outside a chosen pair per set (plus a decaying share of the true objective); a point
  with no such mass is sent to repair, else the pairs are re-chosen from it, and a repeated
  choice (a cycle) is perturbed. Only the objective changes, so pump jobs share the batch.

Nodes are pruned with the safe Lagrangian dual bound of their LP
(:func:`~jaxopt_suite.lp.dual_bound`), which holds however early the LP stopped. A node
whose bound falls short of the cutoff by less than its LP's own spread (objective against
safe bound) is solved again, ten times tighter, before it is settled or branched, down to
``polish_tolerance`` (:meth:`_Solver._tighten`): the node tolerance is the gap the search
closes, and such nodes were otherwise branched without end. A re-solve may take twice the
iterations of the node's first LP (or of the mean node LP); one that reaches that cap
leaves the node to be settled or branched from the solve before. Once the
root is solved, the node LPs see the objective multiplied by a factor of at least 1
(:func:`objective_scale`): PDLP's gap test has an absolute floor (its ``1 + |p| + |d|``),
which for an optimum near 0.025 let node bounds trail their optima by forty times the gap
the search closes (1e-4 against 1e-4 * 0.025), and the search stalled; results are in the
model's units. The node store (:mod:`jaxopt_suite.pwl.store`) keeps the open nodes
(intervals, bound, depth, order, warm-start key) in arrays on the device, where jitted
programs select and prune them, the arrays growing by doubling up to ``capacity`` rows; on
the CPU backend a NumPy store with the same selection is the default (``store``), being
faster there. The LP work, which is where the time goes, runs batched on the device.

A primal ray of a node LP (``DUAL_INFEASIBLE``) does not by itself make the model
unbounded. The ray ``d`` lies in the recession cone of the relaxation, and that cone is the
same for every node: the lambda columns are boxed in ``[0, 1]``, so ``d`` moves no lambda,
hence (link rows ``x = sum d_k lambda_k``) no PWL argument and no ``z``; the node bounds only
touch lambdas. So a feasible PWL point ``v`` gives feasible PWL points ``v + t d`` for every
``t >= 0`` (same rows' recession directions, same SOS2 support) with the objective going to
``-inf``: the model is unbounded if and only if it is feasible. A ray therefore starts a
feasibility search, the same branch-and-bound on the model with objective 0 that stops at
the first PWL point: a point makes the answer ``UNBOUNDED`` (the point is returned as the
witness), a completed search ``INFEASIBLE``, and a search stopped by the node or time limit
(or left incomplete) ``INFEASIBLE_OR_UNBOUNDED`` (there is no finite optimum either way).
The ray is the LP solver's certificate, to its tolerance, like every other status it
reports.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import math
import sys
import time
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp

from jaxopt_suite._checks import check_integer, check_number
from jaxopt_suite.lp import (
    LP,
    LPOptions,
    Status,
    batch_advance,
    batch_park,
    batch_refill,
    batch_resize,
    batch_solution,
    batch_start,
    dual_bound,
    infeasibility_bound,
    solve_lp,
)
from jaxopt_suite.lp.bounds import root_implied_bounds
from jaxopt_suite.lp.repair import repair_rows
from jaxopt_suite.pwl.model import CompiledPWL, PWLModel
from jaxopt_suite.pwl.store import STORES, make_store
from jaxopt_suite.pwl.store import StoreFull as _StoreFull


class MIPStatus(enum.IntEnum):
    # gap within the tolerances; or, for a complete search held up by an LP's precision, to
    # the tolerance the message names (an unpolished point, a leaf whose polish did not end)
    OPTIMAL = 0
    INFEASIBLE = 1
    UNBOUNDED = 2
    NODE_LIMIT = 3
    TIME_LIMIT = 4
    # the relaxation has a primal ray (no finite optimum), and the feasibility search that
    # would tell the two apart stopped at the node or time limit
    INFEASIBLE_OR_UNBOUNDED = 5
    # the search ended with nodes it could not settle: the node store filled up
    # (PWLOptions.capacity), or leaf LPs stopped before their tolerance (lp.max_iterations);
    # the bound keeps those nodes' bounds, and the message says which
    INCOMPLETE = 6


MESSAGES = {
    MIPStatus.OPTIMAL: "optimal within the gap tolerances",
    MIPStatus.INFEASIBLE: "infeasible",
    MIPStatus.UNBOUNDED: "unbounded: the relaxation has a primal ray (it moves no lambda, so "
    "no PWL argument) and the model has a feasible point x, so x plus any nonnegative multiple "
    "of the ray is feasible and the objective has no bound",
    MIPStatus.NODE_LIMIT: "node limit reached",
    MIPStatus.TIME_LIMIT: "time limit reached",
    MIPStatus.INFEASIBLE_OR_UNBOUNDED: "infeasible or unbounded: the relaxation has a primal "
    "ray, so there is no finite optimum, but the feasibility search that decides between the "
    "two stopped",
    MIPStatus.INCOMPLETE: "search incomplete: nodes left unsettled",
}


class PWLOptions(NamedTuple):
    batch_size: int = 64  # LP slots solved together
    relative_gap: float = 1e-4  # |incumbent - bound| / max(|incumbent|, 1e-9)
    absolute_gap: float = 1e-6
    node_limit: int = 1_000_000
    time_limit: float | None = None  # seconds
    capacity: int = 200_000  # open nodes the store may hold
    # the node store (jaxopt_suite.pwl.store): "device" (jitted, its arrays grow up to
    # capacity), "host" (NumPy) or "auto" (the device one unless the backend is the CPU);
    # both select the same nodes
    store: str = "auto"
    evaluations: int = 2  # LP evaluation periods per round
    split: str = "weighted"  # SOS2 split index: "weighted" (mean index) or "middle"
    dive_fraction: float = 0.25  # share of node slots given to the newest nodes
    repair: str = "segment"  # "segment", "mass" or "off"
    pump: bool = True
    pump_seeds: int = 4  # pump jobs started from the root relaxation
    pump_iterations: int = 10  # per pump job before it gives up
    # at most this share of slots runs heuristics: per round (at least one slot), and over
    # the run's busy slot-rounds, so that a batch of one to three slots keeps the share
    # too; slots that no node needs are lent to heuristics beyond it
    heuristic_fraction: float = 0.25
    # while there is no incumbent, a node LP still running after this many rounds lends
    # its current iterate to a repair and a pump job (large LPs converge slowly)
    early_heuristic_rounds: int = 8
    sos2_tolerance: float = 1e-9  # lambda above this counts as nonzero
    # node LPs (None: tolerance 1e-4). Pruning uses safe dual bounds, so a loose node
    # tolerance costs only weaker bounds; incumbents are polished (below) for accuracy
    lp: LPOptions | None = None
    # each new incumbent's LP (its SOS2 pairs fixed) is re-solved to this tolerance, except a
    # projected node point that meets the model to rounding (_Solver._project) (None:
    # 1e-6 in float64 (jax_enable_x64), 1e-5 in float32, which cannot reach much lower)
    polish_tolerance: float | None = None
    progress: bool = False
    progress_every: float = 1.0  # seconds between progress lines
    seed: int = 0


# _Solver._project: the largest model violation (PWLModel.check, relative) of a projected
# point taken as an incumbent (rounding, as _report admits), and the failed projections
# after which a search stops trying (each is a least-squares solve on the host)
PROJECTION_VIOLATION = 1e-9
PROJECTION_TRIES = 4
# _Solver._polish and _Solver._repair: how many entries (one per set of intervals) the memo
# of optimal polishes and the record of repair jobs hold; past it, new ones are solved
# without being recorded. In a search the same pairs come back from node after node.
POLISH_MEMO = 100_000
# repairs queued after a repair's pairs came out infeasible (one set's pair moved each)
REPAIR_ALTERNATIVES = 32
# the LPs a repair dive may solve (_Solver._dive_start): with 3 sets of 7 pairs each, its
# whole tree is at most 7 + 49 + 343 = 399 LPs, so on such a model it is complete
REPAIR_DIVE = 400

# a node whose bound its LP's tolerance leaves just short of the cutoff is solved again
# this many times tighter before it is branched (_Solver._tighten), down to
# PWLOptions.polish_tolerance
TIGHTEN_STEP = 10.0
# ... within at most this many times the iterations of the node's first LP (or of the
# search's mean first node LP where that is more): a re-solve that reaches the cap leaves
# the node to be settled or branched from the solve before (scratch runs at 1, 2, 4 and no
# cap on five portfolio instances: 2 was the fastest, _Solver._tighten)
RESOLVE_COST = 2.0

# The objective scale (objective_scale): a node LP stops on PDLP's relative KKT test, whose
# gap term is |p - d| <= tolerance * (1 + |p| + |d|) and whose dual residual is measured
# against 1 + ||c||. Where the relaxation's optimum is small (|p| << 1) the 1s dominate and a
# node's safe bound may sit `tolerance` below its optimum in absolute terms, which the
# search's relative gap, a multiple of |p|, cannot absorb: pruning stalls. So once the root
# is solved the search multiplies the objective by a factor that brings that absolute floor
# (`tolerance / scale` in the model's units) down to OBJECTIVE_SCALE_SHARE of the gap it
# must close at the root's optimum. Never below 1 (a large optimum already makes the test
# relative) nor above MAX_OBJECTIVE_SCALE.
OBJECTIVE_SCALE_SHARE = 0.1
MAX_OBJECTIVE_SCALE = 1e4


def gap_slack(options: PWLOptions, value: float) -> float:
    """How far below ``value`` a bound closes the gap: ``max(absolute_gap, relative_gap *
    |value|)`` (``options`` resolved)."""
    return max(float(options.absolute_gap), float(options.relative_gap) * abs(value))


def objective_scale(estimate: float, options: PWLOptions) -> float:
    """The factor the search multiplies the objective by (comment above
    :data:`OBJECTIVE_SCALE_SHARE`), for a relaxation optimum of magnitude about
    ``estimate`` and the (resolved) ``options``: ``tolerance / (share * slack)`` clipped
    to ``[1, MAX_OBJECTIVE_SCALE]``, ``slack`` the gap the search closes at that optimum,
    ``max(absolute_gap, relative_gap * |estimate|)``."""
    if not math.isfinite(estimate):
        return 1.0
    slack = gap_slack(options, estimate)
    if slack <= 0:
        return MAX_OBJECTIVE_SCALE
    scale = float(options.lp.tolerance) / (OBJECTIVE_SCALE_SHARE * slack)
    return float(min(MAX_OBJECTIVE_SCALE, max(1.0, scale)))


class MIPSolution(NamedTuple):
    """``x``: model-variable values (``z`` included); ``objective`` and ``bound`` in the
    model's sense (a lower bound for a minimisation, an upper bound for a maximisation);
    ``gap`` relative; ``history``: ``(seconds, nodes, objective, bound)`` at each new
    incumbent of the search (not the witness of ``UNBOUNDED`` that a feasibility search
    found, below); ``lp_x``: the incumbent's LP point (lambda columns included).

    ``UNBOUNDED`` and ``INFEASIBLE_OR_UNBOUNDED`` report ``bound = -inf`` (``+inf`` for a
    maximisation); ``UNBOUNDED`` returns a feasible point as ``x`` (its ``objective`` is that
    point's value, the ``gap`` infinite), the witness that the ray of the relaxation is a ray
    of the model (module docstring). ``INFEASIBLE`` reports ``bound = +inf`` (``-inf``)."""

    x: np.ndarray | None
    objective: float
    bound: float
    gap: float
    status: MIPStatus
    message: str
    nodes: int
    time: float
    history: list[tuple[float, int, float, float]]
    first_incumbent_time: float
    lp_x: np.ndarray | None
    rounds: int
    # the incumbent was re-solved to polish_tolerance, or is a node's point projected onto
    # its segments that meets the model to rounding; False for a point feasible to the
    # node tolerance only, reported when no other exists (never used to prune)
    polished: bool
    # PWLModel.check at x: the largest relative violation of a bound, row or z = f(x)
    # (NaN without an incumbent)
    violation: float = math.nan
    # the share of the busy LP slot-rounds that ran heuristics (repair, pump, polishing
    # jobs); NaN where no round ran
    heuristic_share: float = math.nan
    # INFEASIBLE proved at the root: the root relaxation's dual ray, weights on the rows of
    # model.compile().lp, for which lp.infeasibility_bound(lp, certificate) > 0 (Farkas)
    certificate: np.ndarray | None = None


# --------------------------------------------------------------------------------------
# SOS2 analysis of LP points (vectorised over sets)


def sos2_structure(lam: np.ndarray, tolerance: float):
    """For a ``(S, W)`` lambda table: ``first, last`` nonzero position per set (``-1`` if
    none), the best adjacent pair ``k`` (columns ``k, k+1``) by mass, and the mass outside
    that pair (the set's SOS2 violation)."""
    if lam.shape[0] == 0:  # a model without PWL terms
        empty = np.zeros(0, np.int64)
        return empty, empty, empty, np.zeros(0)
    nz = lam > tolerance
    has = nz.any(axis=1)
    width = lam.shape[1]
    first = np.where(has, np.argmax(nz, axis=1), -1)
    last = np.where(has, width - 1 - np.argmax(nz[:, ::-1], axis=1), -1)
    if width >= 2:
        pair = lam[:, :-1] + lam[:, 1:]
        best = np.argmax(pair, axis=1)
        inside = pair[np.arange(lam.shape[0]), best]
    else:
        best = np.zeros(lam.shape[0], np.int64)
        inside = lam[:, 0]
    violation = np.maximum(lam.sum(axis=1) - inside, 0.0)
    return first, last, best, violation


def split_index(lam_row: np.ndarray, first: int, last: int, rule: str) -> int:
    """The SOS2 split ``r`` with ``first < r < last`` (requires ``last - first >= 2``)."""
    if last - first < 2:
        raise ValueError(f"no split strictly between first={first} and last={last}")
    if rule == "middle":
        r = (first + last) // 2
    else:
        w = np.maximum(lam_row[first : last + 1], 0.0)
        total = w.sum()
        mean = first + (w @ np.arange(w.size) / total if total > 0 else (last - first) / 2)
        r = int(round(mean))
    return int(min(max(r, first + 1), last - 1))


# --------------------------------------------------------------------------------------


def _node_bounds(slots) -> list[float]:
    """Bounds of the node jobs in flight."""
    return [j.bound for j in slots if j is not None and j.kind == "node"]


def _digest(lo: np.ndarray, hi: np.ndarray, tighter: float = 1.0) -> bytes:
    """A key for the intervals ``[lo, hi]`` of every set (and a polish's ``tighter``)."""
    data = np.concatenate([np.asarray(lo, np.int64), np.asarray(hi, np.int64)]).tobytes()
    return hashlib.blake2b(data + np.float64(tighter).tobytes(), digest_size=16).digest()


def _pair_within(k: np.ndarray, lo: np.ndarray, hi: np.ndarray):
    """Intervals ``[k, k + 1]`` per set, moved inside ``[lo, hi]`` (a single column when
    ``lo == hi``)."""
    k = np.minimum(np.maximum(k, lo), np.maximum(lo, hi - 1))
    return k.astype(np.int32), np.minimum(k + 1, hi).astype(np.int32)


class _Job(NamedTuple):
    kind: str  # "node", "repair", "pump", "dive"
    node: int  # store row of a node job; -1 otherwise
    lo: np.ndarray
    hi: np.ndarray
    bound: float
    depth: int
    costs: np.ndarray | None  # None: the LP's own objective
    warm: tuple[np.ndarray, np.ndarray] | None
    pairs: np.ndarray | None = None  # pump: the chosen pair per set
    step: int = 0  # pump iteration
    seen: frozenset = frozenset()  # pump: pair choices already tried
    # repair made from a node: the node's intervals, within which the pairs may move when
    # these turn out infeasible (None: no alternatives, e.g. for an alternative itself)
    origin: tuple[np.ndarray, np.ndarray] | None = None
    # dive: per fixed set, outermost first, (set, its interval before the fix, the pair
    # positions not yet tried), and the LPs the dive may still solve
    stack: tuple = ()
    left: int = 0
    # node: the factor by which its LP is solved tighter than PWLOptions.lp's tolerance
    tighter: float = 1.0
    # a node solved again (tighter > 1): its LP's iteration cap, and the objective and
    # safe bound of the solve before, whose point is ``warm`` (_Solver._tighten)
    cap: int = 0
    previous: tuple[float, float] = (math.nan, math.nan)

    @property
    def again(self) -> bool:
        """A node solved once more, tighter (:meth:`_Solver._tighten`), not a new node of
        the tree: only those have ``tighter > 1`` (children start at the node tolerance)."""
        return self.tighter > 1.0


def _check_options(options: PWLOptions) -> None:
    if not isinstance(options, PWLOptions):
        raise TypeError(f"options must be a PWLOptions, got {type(options).__name__}")
    # counts size arrays and loops: integers, not bools or 2.5 (int() truncated them, and a
    # fractional node_limit reached a slice mid-search)
    for name, minimum in (
        ("batch_size", 1),
        ("node_limit", 1),
        ("capacity", 2),
        ("evaluations", 1),
        ("early_heuristic_rounds", 1),
        ("pump_seeds", 0),
        ("pump_iterations", 1),
        ("seed", 0),
    ):
        check_integer(name, getattr(options, name), minimum)
    for name in ("relative_gap", "absolute_gap"):  # inf: any incumbent closes the gap
        check_number(name, getattr(options, name), "be >= 0", lambda v: v >= 0)
    if options.time_limit is not None:
        check_number("time_limit", options.time_limit, "be > 0 (or None)", lambda v: v > 0)
    if options.split not in ("weighted", "middle"):
        raise ValueError(f"split must be 'weighted' or 'middle', got {options.split!r}")
    if options.store not in STORES:
        raise ValueError(f"store must be one of {STORES}, got {options.store!r}")
    if options.repair not in ("segment", "mass", "off"):
        raise ValueError(f"repair must be 'segment', 'mass' or 'off', got {options.repair!r}")
    check_number("dive_fraction", options.dive_fraction, "lie in [0, 1]", lambda v: 0 <= v <= 1)
    check_number(
        "heuristic_fraction", options.heuristic_fraction, "lie in [0, 1)", lambda v: 0 <= v < 1
    )
    # lambdas are convex weights in [0, 1]: at a tolerance of 1 or more every one counts as
    # zero (NaN: every comparison is false), and no point is ever branched on
    check_number("sos2_tolerance", options.sos2_tolerance, "lie in [0, 1)", lambda v: 0 <= v < 1)
    if options.polish_tolerance is not None:
        check_number(
            "polish_tolerance",
            options.polish_tolerance,
            "be finite and > 0 (or None)",
            lambda v: 0 < v < math.inf,
        )
    check_number(
        "progress_every", options.progress_every, "be finite and >= 0", lambda v: 0 <= v < math.inf
    )
    for name in ("pump", "progress"):  # "no" would read as true
        if not isinstance(getattr(options, name), bool | np.bool_):
            raise ValueError(f"{name} must be a bool, got {getattr(options, name)!r}")
    if options.lp is not None and not isinstance(options.lp, LPOptions):
        raise TypeError(
            f"lp must be an LPOptions (or None for the default), got {type(options.lp).__name__}"
        )


def resolve_options(options: PWLOptions) -> PWLOptions:
    """``options`` with the precision-dependent defaults filled in."""
    x64 = jnp.result_type(float) == jnp.float64
    if options.lp is None:
        options = options._replace(lp=LPOptions(tolerance=1e-4))
    if options.polish_tolerance is None:
        options = options._replace(polish_tolerance=1e-6 if x64 else 1e-5)
    return options


def polish_options(options: PWLOptions) -> LPOptions:
    """The LP options incumbents are polished with: the node options at
    ``polish_tolerance``, limited to an eighth of the time limit (a search gives each
    polish at most the time it has left, :meth:`_Solver._polish`; the time limit is not
    part of what the LP solve compiles)."""
    options = resolve_options(options)
    limit = None if options.time_limit is None else options.time_limit / 8
    return options.lp._replace(tolerance=options.polish_tolerance, time_limit=limit)


def solve_pwl(model: PWLModel, options: PWLOptions | None = None) -> MIPSolution:
    """Solves ``model`` by batched branch-and-bound (see the module docstring)."""
    if not isinstance(model, PWLModel):
        raise TypeError(f"model must be a PWLModel, got {type(model).__name__}")
    options = PWLOptions() if options is None else options
    _check_options(options)
    options = resolve_options(options)
    compiled = model.compile()
    return _Solver(model, compiled, options).run()


class _Solver:
    def __init__(
        self,
        model: PWLModel,
        compiled: CompiledPWL,
        options: PWLOptions,
        *,
        feasibility: bool = False,
    ) -> None:
        self.model, self.compiled, self.options = model, compiled, options
        # a feasibility search (objective 0, started by a ray). With c = 0 no ray descends,
        # so its LPs never report one; the flag guards against a search starting another
        self.feasibility = feasibility
        # set when a ray was met: the rest of the status message (see _settle_ray)
        self.ray_detail: str | None = None
        # busy LP slot-rounds of the search: [heuristic jobs', all jobs'] (heuristic_share)
        self.slot_rounds = [0, 0]
        lp = compiled.lp
        self.lp = lp
        # the objective scale (objective_scale) and the LP the node jobs solve, whose
        # objective (constant included) is multiplied by it; the search reads their values
        # and duals divided by it (_process, _lend_iterates), so all of its own state is in
        # the model's units (minimisation form)
        self.scale = 1.0
        self.node_lp = lp
        self.sign = lp.objective_sign
        self.S = compiled.num_sets
        self.sizes = compiled.set_size
        # every set's whole interval of breakpoints (lo, hi): the root node's
        self.root = (np.zeros(self.S, np.int32), (self.sizes - 1).astype(np.int32))
        self.lam_cols = np.arange(compiled.num_vars, lp.num_cols)
        self.lam_set = compiled.column_set[self.lam_cols]
        self.lam_pos = compiled.column_position[self.lam_cols]
        width = compiled.set_columns.shape[1] if self.S else 0
        self.breaks = np.zeros((self.S, width))
        for s, t in enumerate(compiled.terms):
            self.breaks[s, : t.segments + 1] = t.breakpoints
            self.breaks[s, t.segments + 1 :] = t.breakpoints[-1]
        col_of = {int(i): j for j, i in enumerate(compiled.model_columns)}
        self.x_lp_cols = np.array([col_of[t.x.index] for t in compiled.terms], np.int64)
        self.rng = np.random.default_rng(options.seed)
        self.store = make_store(options.store, int(options.capacity), self.S)
        self.warm: dict[int, list] = {}  # id -> [x, y, references]
        self.warm_id = 0
        self.incumbent = math.inf  # minimisation form
        self.incumbent_x: np.ndarray | None = None
        # the incumbent as reported (_report): LP point, model values, violation
        self.incumbent_report: tuple[np.ndarray, np.ndarray, float] | None = None
        self.history: list[tuple[float, int, float, float]] = []
        self.first_time = math.nan
        self.nodes = 0
        # bounds of: leaves whose LP never finished; a node whose children found no room
        # in the store; nodes reported infeasible whose infeasibility was not proved
        self.unresolved: list[float] = []
        # node LPs reported infeasible whose ray the exact check did not confirm
        self.unproved_infeasible = 0
        # the root relaxation's dual ray and its infeasibility bound, where it proved the
        # model infeasible (lp.infeasibility_bound)
        self.certificate: tuple[np.ndarray, float] | None = None
        self.store_full = False  # a node's children found no room (PWLOptions.capacity)
        # which LPs' tolerance left a closed leaf's bound short of the cutoff ("node":
        # its polish did not finish; "polishing": its polished bound fell short)
        self.loose: set[str] = set()
        # smallest bound of a node closed by the cutoff or by its own optimum: the search
        # proves nothing tighter for those subtrees (the cutoff sits a gap below the
        # incumbent), so the reported bound never exceeds it
        self.closed = math.inf
        self.heuristics: list[_Job] = []
        # nodes to be solved again, tighter, before they are branched (_tighten), and the
        # iterations and count of the node LPs solved the first time
        self.tighten: list[_Job] = []
        self.node_iterations = [0, 0]
        self.diving = False  # a repair dive is under way (one at a time)
        # bounds of the node jobs in flight or not yet processed, by slot
        self.running: dict[int, float] = {}
        self.polish_failures = 0
        self.projection_failures = 0  # node points that _project could not make feasible
        # pairs whose projection _offer tried (_projection_pairs): (the candidate's LP value,
        # whether it met the model), by a digest of the pairs
        self.projected: dict[bytes, tuple[float, bool]] = {}
        # polishes whose LP came out optimal (_polish): (objective, bound), by a digest of
        # the intervals and the tightening
        self.polished: dict[bytes, tuple[float, float]] = {}
        # repair jobs made (_repair), by a digest of their intervals
        self.repairs: set[bytes] = set()
        self.by_columns = None  # the LP's matrix by columns, for the polishes (_polish)
        self.model_rows = None  # the LP's model rows (CSR), for the segment polishes
        self.deadline = math.inf  # perf_counter time of the time limit (set by run)
        self.fallback: tuple[float, np.ndarray | None] = (math.inf, None)  # unpolished

    # -- bounds and costs of jobs ----------------------------------------------------------

    def _bounds(self, lo: np.ndarray, hi: np.ndarray):
        lower = self.lp.var_lower.copy()
        upper = self.lp.var_upper.copy()
        allowed = (self.lam_pos >= lo[self.lam_set]) & (self.lam_pos <= hi[self.lam_set])
        upper[self.lam_cols] = np.where(allowed, 1.0, 0.0)
        return lower, upper

    def _lambda_table(self, x: np.ndarray) -> np.ndarray:
        return self.compiled.lambdas(x)

    # -- warm starts ---------------------------------------------------------------------

    def _keep_warm(self, x, y, references: int) -> int:
        self.warm_id += 1
        self.warm[self.warm_id] = [x, y, references]
        return self.warm_id

    def _take_warm(self, key: int):
        if key < 0 or key not in self.warm:
            return None
        entry = self.warm[key]
        entry[2] -= 1
        if entry[2] <= 0:
            del self.warm[key]
        return entry[0], entry[1]

    # -- incumbents ----------------------------------------------------------------------

    def polish_options(self) -> LPOptions:
        return polish_options(self.options)

    def _candidate_intervals(self, x: np.ndarray, lo: np.ndarray, hi: np.ndarray):
        """Per set, the pair of ``x``'s lambda support when it is a pair, else the
        segment holding the argument's value, inside the node's ``[lo, hi]``."""
        lam = self._lambda_table(x)
        first, last, _, _ = sos2_structure(lam, self.options.sos2_tolerance)
        seg_lo, seg_hi = _pair_within(self._segments(x), lo, hi)
        pair = (last - first) == 1
        return np.where(pair, first, seg_lo).astype(np.int32), np.where(pair, last, seg_hi).astype(
            np.int32
        )

    def _segments(self, x: np.ndarray) -> np.ndarray:
        """The segment of each PWL argument's value in ``x``."""
        xhat = x[self.x_lp_cols]
        # breakpoints <= x, counted on the padded table (padding repeats the last one,
        # so the count only overshoots past the last segment, which the clip undoes)
        k = np.sum(self.breaks <= xhat[:, None], axis=1) - 1
        return np.clip(k, 0, np.maximum(self.sizes - 2, 0))

    def _polish(self, lo, hi, x: np.ndarray, y: np.ndarray | None, tighter: float = 1.0):
        """Solves the LP with only the lambda intervals ``[lo, hi]`` (pairs) allowed, to
        ``polish_tolerance`` (divided by ``tighter``), warm started from ``(x, y)``:
        ``("optimal", objective, x, bound)`` with the safe dual bound of that LP,
        ``("infeasible", ...)`` when that LP has no point (a dual ray proves it, or the
        pieces of one argument do not meet), or
        ``("unfinished", ...)`` (time or iteration limit), or ``("no time", ...)`` without
        a solve once the search's time limit has passed (a polish gets at most the time
        left, so a round that polishes several points ends near the limit).

        An LP polished before (the same intervals and ``tighter``) that came out optimal is
        not solved again: its objective and bound are returned with ``x = None``
        (:attr:`polished`), time left or not. (Infeasible ones are: PDLP's infeasibility
        test is a heuristic, and one wrong verdict kept would reject those pairs for good.)"""
        key = _digest(lo, hi, tighter)
        memo = self.polished.get(key)
        if memo is not None:
            objective, bound = memo
            return "optimal", objective, None, bound
        result = self._solve_polish(lo, hi, x, y, tighter)
        if result[0] == "optimal" and len(self.polished) < POLISH_MEMO:
            self.polished[key] = (result[1], result[3])
        return result

    def _solve_polish(self, lo, hi, x: np.ndarray, y: np.ndarray | None, tighter: float):
        """:meth:`_polish` without the memo."""
        options = self.polish_options()
        if options.time_limit is not None:
            left = self.deadline - time.perf_counter()
            if left <= 0:
                return "no time", math.nan, None, -math.inf
            options = options._replace(time_limit=min(options.time_limit, left))
        options = options._replace(tolerance=options.tolerance / tighter)
        if np.all(hi - lo <= 1):  # pairs (or single breakpoints): the segment LP
            return self._polish_segments(lo, hi, x, y, options)
        lower, upper = self._bounds(lo, hi)
        lp = self.lp  # unscaled: a polish wants the point, to its own tolerance
        # the lambdas outside the pairs (and any column fixed at 0) add nothing to a row
        # or the objective: the LP without them is the same LP, and smaller
        keep = (lower != 0) | (upper != 0)
        if self.by_columns is None:
            self.by_columns = sp.csc_array(lp.A)
        restricted = LP(
            lp.c[keep],
            self.by_columns[:, keep],
            lp.row_lower,
            lp.row_upper,
            lower[keep],
            upper[keep],
            lp.objective_offset,
        )
        y0 = np.zeros(lp.num_rows) if y is None else y
        start = np.clip(x, lower, upper)[keep]
        sol = solve_lp(restricted, options, warm_start=(start, y0))
        if sol.status == Status.OPTIMAL and np.all(np.isfinite(sol.x)):
            point = np.zeros(lp.num_cols)
            point[keep] = sol.x
            return "optimal", float(sol.objective), point, float(sol.dual_bound)
        if sol.status == Status.PRIMAL_INFEASIBLE:
            return "infeasible", math.nan, None, -math.inf
        return "unfinished", math.nan, None, -math.inf

    def _pieces(self, lo, hi):
        """``(k0, k1, d0, d1)`` per set: the first and last breakpoint index of its
        interval ``[lo, hi]`` and those breakpoints."""
        k0, k1, sets = np.asarray(lo, np.int64), np.asarray(hi, np.int64), np.arange(self.S)
        return k0, k1, self.breaks[sets, k0], self.breaks[sets, k1]

    def _segment_map(self, pieces):
        """``(T, t0, lower, upper)`` for sets held to pairs or single breakpoints
        (``hi - lo <= 1``; ``pieces`` from :meth:`_pieces`): ``v = T x + t0`` maps the
        model columns ``x`` to the LP's columns, and ``[lower, upper]`` is their box with
        each argument held to its piece (empty where two pieces of one argument do not
        meet).

        With set ``s`` held to breakpoints ``d_k < d_{k+1}`` (``w`` apart), its lambdas
        are affine in its argument ``x``: ``lambda_k = (d_{k+1} - x) / w``,
        ``lambda_{k+1} = (x - d_k) / w``, the others 0, for ``x`` in ``[d_k, d_{k+1}]``;
        held to one breakpoint, ``lambda_k = 1`` and ``x = d_k``. Every such point meets
        the set's convexity and link rows, and every point of the LP held to the pairs is
        one, so the LP over ``x`` with the model's rows alone is the same LP."""
        comp, lp = self.compiled, self.lp
        nv, n = comp.num_vars, lp.num_cols
        k0, k1, d0, d1 = pieces
        col0, col1 = comp.set_start + k0, comp.set_start + k1
        pair = k1 > k0
        w, j = (d1 - d0)[pair], self.x_lp_cols[pair]
        T = sp.csr_array(
            (
                np.concatenate([np.ones(nv), -1.0 / w, 1.0 / w]),
                (
                    np.concatenate([np.arange(nv), col0[pair], col1[pair]]),
                    np.concatenate([np.arange(nv), j, j]),
                ),
            ),
            shape=(n, nv),
        )
        t0 = np.zeros(n)
        t0[col0[pair]] = d1[pair] / w
        t0[col1[pair]] = -d0[pair] / w
        t0[col0[~pair]] = 1.0
        lower, upper = lp.var_lower[:nv].copy(), lp.var_upper[:nv].copy()
        np.maximum.at(lower, self.x_lp_cols, d0)
        np.minimum.at(upper, self.x_lp_cols, d1)
        return T, t0, lower, upper

    def _polish_segments(self, lo, hi, x, y, options: LPOptions):
        """:meth:`_polish` for sets held to pairs or single breakpoints: the LP over the
        model's columns with each PWL term replaced by its piece (:meth:`_segment_map`), the
        same LP as the one held to the pairs without the lambdas, the convexity and the
        link rows, which PDLP solves in far fewer iterations. The point is mapped back to
        the LP's columns; the bound is the Lagrangian bound (:func:`dual_bound`) of the
        LP held to the pairs at the duals of the model's rows, with convexity and link
        duals that give each pair's lambdas reduced cost 0 (so the argument's is the one
        of the segment LP)."""
        comp, lp = self.compiled, self.lp
        pieces = self._pieces(lo, hi)
        T, t0, lower, upper = self._segment_map(pieces)
        if np.any(lower > upper):  # two pieces of one argument that do not meet
            return "infeasible", math.nan, None, -math.inf
        U = comp.num_model_rows
        if self.model_rows is None:
            self.model_rows = sp.csr_array(lp.A)[:U]
        rows = self.model_rows
        shift = rows @ t0
        segment = LP(
            T.T @ lp.c,
            sp.csr_array(rows @ T),
            lp.row_lower[:U] - shift,
            lp.row_upper[:U] - shift,
            lower,
            upper,
            lp.objective_offset + float(lp.c @ t0),
        )
        y0 = np.zeros(U) if y is None else np.asarray(y)[:U]
        sol = solve_lp(segment, options, warm_start=(np.clip(x[: comp.num_vars], lower, upper), y0))
        if sol.status == Status.PRIMAL_INFEASIBLE:
            return "infeasible", math.nan, None, -math.inf
        if sol.status != Status.OPTIMAL or not np.all(np.isfinite(sol.x)):
            return "unfinished", math.nan, None, -math.inf
        # in its box (unscaling can leave a bound by rounding), mapped back: T x + t0,
        # with the pairs' lambdas from the argument's distances to the breakpoints, so in
        # [0, 1] and 0 or 1 at the ends exactly (d1 / w - x / w would leave rounding there)
        columns = np.clip(sol.x, lower, upper)
        k0, k1, d0, d1 = pieces
        pair = k1 > k0
        x_arg = columns[self.x_lp_cols[pair]]
        w = (d1 - d0)[pair]
        point = t0.copy()  # a single breakpoint's lambda (1); the rest set here
        point[: comp.num_vars] = columns
        point[(comp.set_start + k0)[pair]] = (d1[pair] - x_arg) / w
        point[(comp.set_start + k1)[pair]] = (x_arg - d0[pair]) / w
        # duals of the LP held to the pairs: the model rows' from the segment LP; each
        # set's convexity (mu) and link (nu) duals solve g_k - mu + nu d_k = 0 at the
        # pair's lambdas (g: their reduced costs from the model rows alone)
        g = lp.c - rows.T @ sol.y
        g0, g1 = g[comp.set_start + k0], g[comp.set_start + k1]
        nu = np.zeros(self.S)
        nu[pair] = -(g1 - g0)[pair] / w
        mu = g0 + nu * d0
        duals = np.concatenate([sol.y, np.stack([mu, nu], axis=1).ravel()])
        box_lower, box_upper = self._bounds(lo, hi)
        box_lower[: comp.num_vars], box_upper[: comp.num_vars] = lower, upper
        held = dataclasses.replace(lp, var_lower=box_lower, var_upper=box_upper)
        bound, _ = dual_bound(held, duals)
        return "optimal", float(sol.objective), point, bound

    def _offer(
        self, lo, hi, x: np.ndarray, y: np.ndarray | None, objective: float, elapsed: float
    ) -> tuple[str, float]:
        """Polishes the candidate ``x`` of intervals ``[lo, hi]`` (pairs; LP objective
        ``objective``) and keeps it if it beats the incumbent: ``"accepted"``, with the
        polished LP's safe dual bound (a bound on the box ``[lo, hi]``; ``-inf`` with the
        other verdicts). Pairs whose polish came out optimal before are accepted with their
        remembered bound and nothing is kept (:meth:`_polish`): what their point could give
        the incumbent, it gave then, for the incumbent only falls.
        ``"rejected"`` when the polished LP is infeasible (``x`` was no PWL point).
        When the polish runs out of time (or the search has none left; after two polishes
        that ran out of time, polishing stops: the LPs of this model are too slow for it),
        ``"projected"`` if ``x`` moved onto the rows within its pairs meets the model to
        rounding (:meth:`_report`, :data:`PROJECTION_VIOLATION`): a PWL point, kept if it
        beats the incumbent, with its value on the model (pairs whose projection was tried
        before, :meth:`_projection_pairs`, are projected again only when ``objective`` is
        lower than the tried one's by more than the search's gap tolerances, else they take
        its verdict: a heuristic's saving, since the same pairs come back from node after
        node once polishes stop finishing, each projection a least-squares repair on the
        host); else ``"fallback"``: the candidate is kept, feasible to the node tolerance
        only, as the answer if no polished one turns up (``MIPSolution.polished`` says so),
        and never used to prune."""
        state = "unfinished"
        if self.polish_failures < 2:
            state, polished_objective, polished_x, box_bound = self._polish(lo, hi, x, y)
        if state == "infeasible":
            return "rejected", -math.inf
        if state != "optimal":
            self.polish_failures += state == "unfinished"
            # moved onto the rows within its pairs, the candidate may meet the model to
            # rounding: then it is a PWL point valued on the model, an incumbent (pairs
            # tried before: again only for an LP value a gap below the tried one)
            pairs = np.concatenate(self._projection_pairs(x)) if np.all(np.isfinite(x)) else x
            key = hashlib.blake2b(pairs.tobytes(), digest_size=16).digest()
            tried, met = self.projected.get(key, (None, False))
            if tried is None or objective < tried - gap_slack(self.options, objective):
                outcome = self._project(x, elapsed)  # None: no time left to try it
                met = bool(outcome)
                if outcome is not None:
                    self.projected[key] = (float(objective), met)
            if met:
                return "projected", -math.inf
            # feasible only to the node tolerance: kept as a fallback answer, never used to
            # prune (an objective a little below the true one would cut off the optimum)
            if objective < self.fallback[0]:
                self.fallback = (float(objective), x.copy())
                if math.isnan(self.first_time):
                    self.first_time = elapsed
            return "fallback", -math.inf
        if polished_x is None or not polished_objective < self.incumbent:
            # (None: polished before, when it gave the incumbent what it could, for the
            # incumbent only falls)
            return "accepted", box_bound
        # the incumbent's value is that of the point that would be reported, so that the
        # gap the search closes is the gap reported (the polished LP's own objective can
        # differ from it by the LP tolerance)
        lp_x, values, violation, objective = self._report(polished_x)
        if objective < self.incumbent:
            self._accept(lp_x, values, violation, objective, elapsed)
        return "accepted", box_bound

    def _accept(self, lp_x, values, violation: float, objective: float, elapsed: float) -> None:
        """Makes the reported point ``lp_x`` (:meth:`_report`) the incumbent and prunes."""
        self.incumbent, self.incumbent_x = objective, lp_x.copy()
        self.incumbent_report = (lp_x.copy(), values, violation)
        if math.isnan(self.first_time):
            self.first_time = elapsed
        bound = self.bound(list(self.running.values()))
        self.history.append((elapsed, self.nodes, self.sign * self.incumbent, self.sign * bound))
        for _, closed, warm in self.store.prune_above(self._cutoff()):
            self.closed = min(self.closed, closed)
            self._take_warm(warm)  # releases its share

    def _project(self, x: np.ndarray, elapsed: float) -> bool | None:
        """Direct SOS2 projection of an LP point ``x``, an incumbent without another LP: a
        solved node's point while there is no incumbent, or a candidate whose polishing LP
        did not finish (:meth:`_offer`). Each set's lambdas held to their pair when they are
        one, else to the segment of the argument (:meth:`_candidate_intervals`), and the
        point moved onto the rows (:meth:`_report`, a least-squares repair on the host).
        Part of the repair heuristic: ``repair="off"`` turns it off too. A result that meets
        the model to rounding (:data:`PROJECTION_VIOLATION`) is a PWL point, so it becomes
        the incumbent (and prunes) with its value on the model; it is not re-solved (the
        repair and polish that follow may improve it). Returns whether it met the model, or
        None once the time limit has passed (none starts then). Whether the rows can be met
        within the segments depends on the point: after :data:`PROJECTION_TRIES` failures on
        node points the search stops trying them (:meth:`_process` counts)."""
        if time.perf_counter() >= self.deadline:
            return None
        lp_x, values, violation, objective = self._report(x)
        if not violation <= PROJECTION_VIOLATION:
            return False
        if objective < self.incumbent:
            self._accept(lp_x, values, violation, objective, elapsed)
        return True

    def _cutoff(self) -> float:
        if not math.isfinite(self.incumbent):
            return math.inf
        return self.incumbent - gap_slack(self.options, self.incumbent)

    def bound(self, running: list[float] | None = None) -> float:
        values = [np.array([self.store.least_bound()])]
        if running:
            values.append(np.asarray(running))
        if self.tighten:
            values.append(np.array([job.bound for job in self.tighten]))
        if self.unresolved:
            values.append(np.asarray(self.unresolved))
        values = np.concatenate(values) if values else np.array([])
        proved = min(self.incumbent, self.closed)
        if values.size == 0:
            return proved
        return float(min(values.min(), proved))

    # -- heuristics ----------------------------------------------------------------------

    def _repair_job(self, lo, hi, x, warm) -> _Job | None:
        lam = self._lambda_table(x)
        if self.options.repair == "mass":
            *_, best, _ = sos2_structure(lam, self.options.sos2_tolerance)
            k = best
        else:
            k = self._segments(x)
        new_lo, new_hi = _pair_within(k, lo, hi)
        if np.array_equal(new_lo, lo) and np.array_equal(new_hi, hi):
            return None
        return self._repair(new_lo, new_hi, warm, origin=(lo, hi))

    def _repair_alternatives(self, job: _Job, limit: int = REPAIR_ALTERNATIVES) -> list[_Job]:
        """Repairs of ``job``'s pairs with one set's pair moved within the node's interval
        (``job.origin``), at distance 1, 2, ... from its pair, every set at each distance,
        at most ``min(limit, REPAIR_ALTERNATIVES)`` (pairs repaired before are skipped). For
        a repair whose pairs came out infeasible; alternatives make none of their own."""
        limit = min(limit, REPAIR_ALTERNATIVES)
        if job.origin is None or limit <= 0:
            return []
        node_lo, node_hi = job.origin
        # the pair's first breakpoint may sit at positions node_lo .. node_hi - 1 (a set
        # held to one breakpoint has no other)
        last = np.maximum(node_hi - 1, node_lo)
        reach = int(np.max(np.maximum(job.lo - node_lo, last - job.lo), initial=0))
        out: list[_Job] = []
        for distance in range(1, reach + 1):
            for s in range(job.lo.size):
                for p in (job.lo[s] - distance, job.lo[s] + distance):
                    if not node_lo[s] <= p <= last[s]:
                        continue
                    lo, hi = job.lo.copy(), job.hi.copy()
                    lo[s], hi[s] = p, min(p + 1, node_hi[s])
                    alternative = self._repair(lo, hi, job.warm)
                    if alternative is not None:
                        out.append(alternative)
                        if len(out) == limit:  # (the loop ran on over every set)
                            return out
        return out

    def _repair(self, lo, hi, warm, origin=None) -> _Job | None:
        """A repair job over the pairs ``[lo, hi]``, or None for pairs repaired before or
        whose polish came out optimal (:attr:`polished`): the job's LP is the same, and it
        only feeds a polish of those pairs, which once optimal can give the incumbent
        nothing it did not give before (an incumbent only falls). Pairs are repaired once
        whatever came of it: a repair whose LP or polish did not finish, or whose LP value
        was not below the incumbent, is not retried."""
        key = _digest(lo, hi)
        if key in self.repairs or key in self.polished:
            return None
        if len(self.repairs) < POLISH_MEMO:
            self.repairs.add(key)
        return _Job("repair", -1, lo, hi, -math.inf, 0, None, warm, origin=origin)

    # -- repair dive: a depth-first search over pair choices, complete within REPAIR_DIVE

    def _dive_start(self, lo, hi, x: np.ndarray, warm) -> _Job | None:
        """The first job of a repair dive in the node ``[lo, hi]`` whose LP point is ``x``
        (started where a repair's pairs came out infeasible, :meth:`_process`). Each job
        holds the most violated set of its parent's point to one pair, tried in the order
        of the point's pair mass; an infeasible job moves the last fixed set to its next
        pair, and a set out of pairs is freed and the set fixed before it moves on. So the
        dive visits every choice of pairs that its LPs do not rule out: it ends at a PWL
        point of the node (up to the LPs' tolerance) whenever one exists, unless it first
        spends its :data:`REPAIR_DIVE` LPs. None when ``x`` is SOS2 already."""
        lam, s = self._most_violated(x)
        if s is None:
            return None
        return self._dive_fix(np.asarray(lo, np.int32), np.asarray(hi, np.int32), lam, s, (),
                              REPAIR_DIVE, warm)  # fmt: skip

    def _most_violated(self, x: np.ndarray) -> tuple[np.ndarray, int | None]:
        """``x``'s lambda table and its most violated set (lambdas over more than two
        adjacent columns), None when ``x`` is SOS2 in every set."""
        lam = self._lambda_table(x)
        first, last, _, violation = sos2_structure(lam, self.options.sos2_tolerance)
        violated = (last - first) >= 2
        if not np.any(violated):
            return lam, None
        return lam, int(np.argmax(np.where(violated, violation, -1.0)))

    def _dive_fix(self, lo, hi, lam, s: int, stack, left, warm) -> _Job | None:
        """A deeper job: set ``s`` (violated in the lambda table ``lam``) held to its
        pairs."""
        a, b = int(lo[s]), int(hi[s])  # b - a >= 2: the point spans three columns
        positions = np.arange(a, b)
        mass = lam[s, positions] + lam[s, positions + 1]
        order = positions[np.argsort(-mass, kind="stable")]
        stack = (*stack, (s, a, b, tuple(int(p) for p in order)))
        return self._dive_next(lo, hi, stack, left, warm)

    def _dive_next(self, lo, hi, stack, left, warm) -> _Job | None:
        """The job with the innermost fixed set moved to its next untried pair (a set out of
        pairs gets its interval back, and the set before it moves); None when every choice
        was tried or the dive's LPs are spent."""
        lo, hi = np.array(lo, np.int32), np.array(hi, np.int32)
        while stack:
            s, a, b, untried = stack[-1]
            if untried:
                if left <= 0:
                    return None
                p = untried[0]
                stack = (*stack[:-1], (s, a, b, untried[1:]))
                lo[s], hi[s] = p, min(p + 1, b)
                return _Job("dive", -1, lo, hi, -math.inf, 0, None, warm,
                            stack=stack, left=left - 1)  # fmt: skip
            lo[s], hi[s] = a, b
            stack = stack[:-1]
        return None

    def _dive_onward(self, job: _Job) -> _Job | None:
        """The next job after ``job`` ruled its pairs out (:meth:`_dive_next`)."""
        return self._dive_next(job.lo, job.hi, job.stack, job.left, job.warm)

    def _dive_step(self, job: _Job, status: Status, x: np.ndarray) -> tuple[str, _Job | None]:
        """What a dive job's LP answer leads to: ``("point", None)`` when it is optimal and
        SOS2 in every set (a PWL point, to be offered), else ``("next", job)`` with the
        next job of the dive (deeper from an optimal point, the next pair otherwise; None:
        the dive is over). An LP stopped without an answer (its iteration or time limit)
        is passed over as an infeasible one is: the dive's completeness holds for LPs that
        finish."""
        if status == Status.OPTIMAL and np.all(np.isfinite(x)):
            lam, s = self._most_violated(x)
            if s is None:
                return "point", None
            return "next", self._dive_fix(job.lo, job.hi, lam, s, job.stack, job.left, job.warm)
        return "next", self._dive_onward(job)

    def _pump_costs(self, pairs: np.ndarray, step: int) -> np.ndarray:
        """Mass outside the pairs, plus a decaying share of the normalised true objective."""
        costs = np.zeros(self.lp.num_cols)
        outside = (self.lam_pos < pairs[self.lam_set]) | (self.lam_pos > pairs[self.lam_set] + 1)
        costs[self.lam_cols] = outside.astype(np.float64)
        alpha = 0.5 * 0.7**step
        norm = np.linalg.norm(self.lp.c)
        if alpha > 1e-3 and norm > 0:
            costs = (1 - alpha) * costs + alpha * np.sqrt(self.lam_cols.size) * self.lp.c / norm
        return costs

    def _pump_job(self, lo, hi, x, warm, seed_index: int) -> _Job:
        lam = self._lambda_table(x)
        pairs = self._choose_pairs(lam, lo, hi, noise=0.0 if seed_index == 0 else 0.3)
        return _Job(
            "pump",
            -1,
            lo,
            hi,
            -math.inf,
            0,
            self._pump_costs(pairs, 0),
            warm,
            pairs,
            0,
            frozenset({pairs.tobytes()}),
        )

    def _choose_pairs(self, lam, lo, hi, noise: float) -> np.ndarray:
        pair = lam[:, :-1] + lam[:, 1:] if lam.shape[1] >= 2 else lam.copy()
        if noise > 0:
            pair = pair + noise * self.rng.random(pair.shape)
        positions = np.arange(pair.shape[1])[None, :]
        valid = (positions >= lo[:, None]) & (positions <= np.maximum(lo, hi - 1)[:, None])
        pair = np.where(valid, pair, -np.inf)
        return np.argmax(pair, axis=1).astype(np.int32)

    def _pump_next(self, job: _Job, x: np.ndarray) -> _Job | None:
        lam = self._lambda_table(x)
        outside = self._outside_mass(lam, job.pairs)
        if outside.max(initial=0.0) <= self.options.sos2_tolerance * 10:
            hi = np.minimum(job.pairs + 1, job.hi)
            return self._repair(job.pairs.astype(np.int32), hi.astype(np.int32), (x, None))
        if job.step + 1 >= self.options.pump_iterations:
            return None
        pairs = self._choose_pairs(lam, job.lo, job.hi, noise=0.0)
        if pairs.tobytes() in job.seen:  # cycle: move the worst sets toward other mass
            worst = np.argsort(-outside)[: max(1, self.S // 10)]
            noisy = self._choose_pairs(lam, job.lo, job.hi, noise=0.5)
            pairs[worst] = noisy[worst]
        step = job.step + 1
        return job._replace(
            pairs=pairs,
            step=step,
            costs=self._pump_costs(pairs, step),
            warm=(x, None),
            seen=job.seen | {pairs.tobytes()},
        )

    def _outside_mass(self, lam: np.ndarray, pairs: np.ndarray) -> np.ndarray:
        positions = np.arange(lam.shape[1])[None, :]
        inside = (positions >= pairs[:, None]) & (positions <= pairs[:, None] + 1)
        return np.where(inside, 0.0, np.maximum(lam, 0.0)).sum(axis=1)

    # -- the objective scale -------------------------------------------------------------

    def _scale_objective(self, root_objective: float, root_bound: float) -> None:
        """Sets :attr:`scale` from the root LP's objective and safe bound (the larger in
        magnitude) and the node LP, :attr:`node_lp`, with the objective times it. Called
        once, when the root node has been processed and before any other node job starts
        (the root's own LP is solved unscaled). Repair jobs, pump jobs (whose objective is
        their own) and polishes solve the unscaled LP."""
        sizes = [abs(v) for v in (root_objective, root_bound) if math.isfinite(v)]
        if self.feasibility or not sizes or not np.any(self.lp.c):
            return
        scale = objective_scale(max(sizes), self.options)
        if scale == 1.0:
            return
        lp = self.lp
        self.node_lp = dataclasses.replace(
            lp, c=lp.c * scale, objective_offset=lp.objective_offset * scale
        )
        self.scale = scale

    # -- the loop ------------------------------------------------------------------------

    def run(self) -> MIPSolution:
        opts = self.options
        start = time.perf_counter()
        limit = opts.time_limit
        self.deadline = math.inf if limit is None else start + limit
        period = 0.0  # seconds per LP evaluation period in the last round
        B = int(opts.batch_size)
        m, n = self.lp.num_rows, self.lp.num_cols
        self.store.push(*self.root, -math.inf, 0, -1)
        lower, upper = self._bounds(*self.root)
        # batch widths B, B/4, B/16, ...: the batched loop costs every lane, parked or not,
        # so the batch is as narrow as the work at hand (each width compiles once)
        widths = sorted({max(1, B // 4**k) for k in range(12)})
        width = widths[0]
        batch = batch_start(
            self.lp, np.tile(lower, (width, 1)), np.tile(upper, (width, 1)), options=opts.lp
        )
        batch = batch_park(batch, np.arange(width))
        slots: list[_Job | None] = [None] * width
        started: list[int] = [0] * width  # round each slot's job started (-1: lent)
        status = None
        rounds = 0
        last_print = -math.inf
        root_done = False
        heuristic_cap = max(1, int(opts.heuristic_fraction * B))
        while True:
            elapsed = time.perf_counter() - start
            # a batch narrower than 1 / heuristic_fraction slots gives a heuristic its one
            # slot only while the run's heuristic share is within the fraction
            share_left = self.slot_rounds[0] <= opts.heuristic_fraction * self.slot_rounds[1]
            cap = heuristic_cap if share_left else 0
            # ---- resize to the work at hand
            busy = [i for i, job in enumerate(slots) if job is not None]
            busy_heuristics = sum(1 for i in busy if slots[i].kind != "node")
            waiting = min(len(self.heuristics), max(0, cap - busy_heuristics))
            demand = len(busy) + waiting + len(self.tighten) + self.store.count()
            target = next((w for w in widths if w >= demand), B)
            if target != width:
                batch = batch_resize(batch, busy, target)
                slots = [slots[i] for i in busy] + [None] * (target - len(busy))
                started = [started[i] for i in busy] + [0] * (target - len(busy))
                width = target
            # ---- fill free slots
            free = [i for i, job in enumerate(slots) if job is None]
            jobs: list[_Job] = []
            busy_heuristics = sum(1 for j in slots if j is not None and j.kind != "node")
            room = min(len(free), max(0, cap - busy_heuristics))
            while self.heuristics and room > 0:
                jobs.append(self.heuristics.pop(0))
                room -= 1
            node_room = len(free) - len(jobs)
            # nodes to solve again come first (they are not new nodes: no node limit); one
            # that the incumbent has closed meanwhile is done
            while self.tighten and node_room > 0:
                job = self.tighten.pop(0)
                if job.bound >= self._cutoff():
                    self.closed = min(self.closed, job.bound)
                    continue
                jobs.append(job)
                node_room -= 1
            if node_room > 0 and self.nodes < opts.node_limit:
                dive = (
                    int(round(opts.dive_fraction * node_room))
                    if math.isfinite(self.incumbent) or root_done
                    else 0
                )
                take = min(
                    node_room,
                    opts.node_limit - self.nodes - len(_node_bounds(slots)),
                )
                for i, lo, hi, bound, depth, key in self.store.take(max(0, take), dive):
                    warm = self._take_warm(key)
                    jobs.append(_Job("node", i, lo, hi, bound, depth, None, warm))
            # a leftover heuristic may use a slot no node needs
            while self.heuristics and len(jobs) < len(free):
                jobs.append(self.heuristics.pop(0))
            if jobs:
                use = free[: len(jobs)]
                lows, ups, costs, offsets, xs, ys, tolerances, caps = ([] for _ in range(8))
                for job in jobs:
                    lo_b, up_b = self._bounds(job.lo, job.hi)
                    lows.append(lo_b)
                    ups.append(up_b)
                    wx = np.zeros(n) if job.warm is None or job.warm[0] is None else job.warm[0]
                    wy = np.zeros(m) if job.warm is None or job.warm[1] is None else job.warm[1]
                    # warm starts hold duals in the model's units; a node LP's are scaled
                    lp = self.node_lp if job.kind == "node" else self.lp
                    if job.kind == "node":
                        wy = wy * self.scale
                    costs.append(lp.c if job.costs is None else job.costs)
                    offsets.append(lp.objective_offset)
                    tolerances.append(float(opts.lp.tolerance) / job.tighter)
                    caps.append(job.cap if job.again else int(opts.lp.max_iterations))
                    xs.append(np.clip(wx, lo_b, up_b))
                    ys.append(wy)
                batch = batch_refill(
                    batch,
                    use,
                    np.stack(lows),
                    np.stack(ups),
                    np.stack(costs),
                    warm_start=(np.stack(xs), np.stack(ys)),
                    objective_offset=np.array(offsets),
                    tolerance=np.array(tolerances),
                    max_iterations=np.array(caps),
                    donate=True,  # the old batch is not used again
                )
                for i, job in zip(use, jobs, strict=True):
                    slots[i] = job
                    started[i] = rounds
            if all(job is None for job in slots):
                status = self._final_status()
                break
            # ---- advance and read the slots that stopped
            # a round near the time limit runs only the evaluation periods that fit in the
            # time left (at least one), at the last round's seconds per period; none starts
            # once the limit has passed (resizing and refilling take time, a compile of a
            # new width or count most; the jobs just filled keep their bounds in the slots)
            evaluations = int(opts.evaluations)
            if limit is not None:
                left = self.deadline - time.perf_counter()
                if left <= 0:
                    status = MIPStatus.TIME_LIMIT
                    break
                if period > 0.0:
                    evaluations = max(1, min(evaluations, int(left / period)))
            advanced = time.perf_counter()
            batch = batch_advance(batch, evaluations=evaluations)
            rounds += 1
            self.slot_rounds[0] += sum(1 for j in slots if j is not None and j.kind != "node")
            self.slot_rounds[1] += sum(1 for j in slots if j is not None)
            stat = batch.status  # (waits for the round: the advance may return before)
            period = (time.perf_counter() - advanced) / evaluations
            done = [i for i, job in enumerate(slots) if job is not None and stat[i] >= 0]
            elapsed = time.perf_counter() - start
            # every node job not yet processed, the stopped ones included until their turn
            # below: an incumbent found meanwhile records the bound over all of them (the
            # stopped ones have left the store; without them the recorded bound fell to the
            # incumbent, above the optimum)
            self.running = {
                i: j.bound for i, j in enumerate(slots) if j is not None and j.kind == "node"
            }
            if done:
                sol = batch_solution(batch, slots=done)
                for row, i in enumerate(done):
                    job = slots[i]
                    slots[i] = None
                    result = self._process(job, sol, row, elapsed)
                    if result is not None:
                        status = result
                        break
                    if job.kind == "node":
                        if not root_done:
                            self._scale_objective(
                                float(sol.objective[row]), float(sol.dual_bound[row])
                            )
                        root_done = True
                        del self.running[i]
                if status is not None:
                    break
            if not math.isfinite(self.incumbent) and not self.heuristics:
                self._lend_iterates(batch, slots, started, rounds)
            bound = self.bound(_node_bounds(slots))
            if self._gap_closed(bound):
                status = MIPStatus.OPTIMAL
                break
            # (the clock again: processing the round, polishes included, takes time)
            if limit is not None and time.perf_counter() - start >= limit:
                status = MIPStatus.TIME_LIMIT
                break
            # (a tree explored to its last node exactly at the limit is complete)
            if self.nodes >= opts.node_limit and not _node_bounds(slots) and self.store.count():
                status = MIPStatus.NODE_LIMIT
                break
            if opts.progress and elapsed - last_print >= opts.progress_every:
                last_print = elapsed
                self._print(elapsed, bound)
        if status == MIPStatus.UNBOUNDED and not self.feasibility:
            status, rounds = self._settle_ray(start, rounds)
        elapsed = time.perf_counter() - start
        if status in (MIPStatus.UNBOUNDED, MIPStatus.INFEASIBLE_OR_UNBOUNDED):
            bound = -math.inf  # no finite optimum (or, for the latter, perhaps no point)
        elif status == MIPStatus.INFEASIBLE:
            bound = math.inf  # the minimum over an empty set
        else:
            bound = self.bound(_node_bounds(slots))
        if status == MIPStatus.OPTIMAL and not self.has_point:
            status = MIPStatus.INFEASIBLE
        if opts.progress:
            self._print(elapsed, bound)
        return self._solution(status, bound, elapsed, rounds)

    def _settle_ray(self, start: float, rounds: int) -> tuple[MIPStatus, int]:
        """A node LP has a primal ray, so the model is infeasible or unbounded (module
        docstring): a PWL point decides. The incumbent (or the fallback) is one; else the
        model with objective 0 is searched, with the nodes and time left, by this same
        branch-and-bound, stopped at its first point (``absolute_gap = inf``: any point is
        optimal). Returns the status (``UNBOUNDED``, ``INFEASIBLE`` or
        ``INFEASIBLE_OR_UNBOUNDED``) and the rounds, with the search's point made the
        incumbent (the witness reported as ``x``)."""
        if self.has_point:
            self.ray_detail = "; x is the incumbent found before the ray"
            return MIPStatus.UNBOUNDED, rounds
        opts = self.options
        nodes_left = int(opts.node_limit) - self.nodes
        elapsed = time.perf_counter() - start
        time_left = None if opts.time_limit is None else opts.time_limit - elapsed
        if nodes_left < 1 or (time_left is not None and time_left <= 0):
            limit = "node" if nodes_left < 1 else "time"
            self.ray_detail = f" (the {limit} limit left no room for it)"
            return MIPStatus.INFEASIBLE_OR_UNBOUNDED, rounds
        lp = self.lp
        zero = dataclasses.replace(lp, c=np.zeros(lp.num_cols), objective_offset=0.0)
        search = _Solver(
            self.model,
            dataclasses.replace(self.compiled, lp=zero),
            opts._replace(absolute_gap=math.inf, node_limit=nodes_left, time_limit=time_left),
            feasibility=True,
        ).run()
        self.nodes += search.nodes
        rounds += search.rounds
        what = f"a feasibility search (objective 0) of {search.nodes} nodes"
        if search.lp_x is not None:
            point = np.asarray(search.lp_x, np.float64)
            objective = lp.objective(point)
            if search.polished:
                self.incumbent, self.incumbent_x = objective, point.copy()
                self.incumbent_report = None  # reported as found (_solution)
            else:
                self.fallback = (objective, point.copy())
            self.first_time = elapsed + search.first_incumbent_time
            self.ray_detail = f"; x was found by {what}"
            return MIPStatus.UNBOUNDED, rounds
        if search.status == MIPStatus.INFEASIBLE:
            self.ray_detail = (
                f"infeasible: the relaxation has a primal ray, but {what} proved that no point "
                "meets the rows, bounds and SOS2 conditions"
            )
            return MIPStatus.INFEASIBLE, rounds
        stopped = {
            MIPStatus.NODE_LIMIT: "the node limit",
            MIPStatus.TIME_LIMIT: "the time limit",
            MIPStatus.INCOMPLETE: "nodes it could not settle",
        }.get(search.status, f"its status {search.status.name}")
        self.ray_detail = f" ({what}, stopped by {stopped})"
        return MIPStatus.INFEASIBLE_OR_UNBOUNDED, rounds

    def _lend_iterates(self, batch, slots, started, rounds) -> None:
        """Repair and pump jobs from the current iterate of node LPs that have run for
        ``early_heuristic_rounds`` (once per node job)."""
        wait = int(self.options.early_heuristic_rounds)
        lend = [
            i
            for i, job in enumerate(slots)
            if job is not None
            and job.kind == "node"
            and started[i] >= 0
            and rounds - started[i] >= wait
        ]
        if not lend:
            return
        sol = batch_solution(batch, slots=lend)
        for row, i in enumerate(lend):
            started[i] = -1
            job, x, y = slots[i], sol.x[row], self._unscaled(sol, row)[2]
            if not np.all(np.isfinite(x)):
                continue
            if self.options.repair != "off":
                rep = self._repair_job(job.lo, job.hi, x, (x, y))
                if rep is not None:
                    self.heuristics.append(rep)
            if self.options.pump:
                self.heuristics.append(self._pump_job(job.lo, job.hi, x, (x, y), 0))

    def _gap_closed(self, bound: float) -> bool:
        if not math.isfinite(self.incumbent):
            return False
        gap = self.incumbent - bound
        relative = self.options.relative_gap * max(abs(self.incumbent), 1e-9)
        return gap <= self.options.absolute_gap or gap <= relative

    @property
    def has_point(self) -> bool:
        """Whether a PWL-feasible point was found: an incumbent, or a fallback."""
        return math.isfinite(self.incumbent) or math.isfinite(self.fallback[0])

    def _final_status(self) -> MIPStatus:
        """The tree is exhausted (or the node limit stopped it)."""
        if self.unresolved:
            return MIPStatus.INCOMPLETE
        if self.store.count() and self.nodes >= self.options.node_limit:
            return MIPStatus.NODE_LIMIT
        # a complete search: optimal (to the node tolerance when only a fallback exists)
        return MIPStatus.OPTIMAL if self.has_point else MIPStatus.INFEASIBLE

    def _unscaled(self, sol, row: int) -> tuple[float, float, np.ndarray]:
        """A node job's LP objective, safe bound and duals in the model's units (of row
        ``row`` of ``sol``, a batch solution or iterate): its LP is :attr:`node_lp`, the
        objective times :attr:`scale`, so each is divided by it (the bound rounded down, to
        stay safe)."""
        objective, bound, y = float(sol.objective[row]), float(sol.dual_bound[row]), sol.y[row]
        if self.scale == 1.0:
            return objective, bound, y
        scale = self.scale
        return objective / scale, float(np.nextafter(bound / scale, -math.inf)), y / scale

    def _process(self, job: _Job, sol, row: int, elapsed: float) -> MIPStatus | None:
        st = Status(int(sol.status[row]))
        x, y = sol.x[row], sol.y[row]
        if job.kind == "repair":
            objective = float(sol.objective[row])
            if st == Status.OPTIMAL and objective < self.incumbent:
                self._offer(job.lo, job.hi, x, y, objective, elapsed)
            elif st == Status.PRIMAL_INFEASIBLE:
                # the queue stays bounded (node repairs join it only below batch_size)
                room = max(self.options.batch_size, REPAIR_ALTERNATIVES) - len(self.heuristics)
                self.heuristics.extend(self._repair_alternatives(job, room))
                # with several sets, a PWL point may need a move in each: while there is no
                # incumbent, a dive searches the node's pairs (one dive at a time)
                node_x = None if job.warm is None else job.warm[0]
                if (
                    self.S >= 2
                    and job.origin is not None
                    and node_x is not None
                    and not self.diving
                    and not math.isfinite(self.incumbent)
                ):
                    dive = self._dive_start(*job.origin, node_x, job.warm)
                    if dive is not None:
                        self.heuristics.append(dive)
                        self.diving = True
            return None
        if job.kind == "dive":
            if math.isfinite(self.incumbent):  # the dive's purpose is met
                self.diving = False
                return None
            outcome, nxt = self._dive_step(job, st, x)
            if outcome == "point":
                lo, hi = self._candidate_intervals(x, job.lo, job.hi)
                verdict, _ = self._offer(lo, hi, x, y, float(sol.objective[row]), elapsed)
                if verdict != "rejected":
                    self.diving = False
                    return None
                # not a PWL point after all (its polished LP is infeasible): the next pair
                nxt = self._dive_onward(job)
            if nxt is None:
                self.diving = False
            else:
                self.heuristics.append(nxt)
            return None
        if job.kind == "pump":
            if st in (Status.OPTIMAL, Status.ITERATION_LIMIT) and np.all(np.isfinite(x)):
                nxt = self._pump_next(job, x)
                if nxt is not None:
                    self.heuristics.append(nxt)
            return None
        # node
        if not job.again:
            self.nodes += 1
            self.node_iterations[0] += int(sol.iterations[row])
            self.node_iterations[1] += 1
        is_root = job.depth == 0 and self.nodes == 1
        if st == Status.PRIMAL_INFEASIBLE:
            # PDLP's test of the ray is first-order, at the data's scale; the node is
            # dropped only once its ray (the solution's y) proves it empty in float64, with
            # rounding margins
            lower, upper = self._bounds(job.lo, job.hi)
            proof = infeasibility_bound(self.lp, y, lower, upper)
            if proof > 0.0:
                if is_root:
                    self.certificate = (np.array(y, np.float64), proof)
                return MIPStatus.INFEASIBLE if is_root and not self.store.count() else None
            if not job.again:  # (a re-solve falls back on its first solve, below)
                self.unproved_infeasible += 1
                self.unresolved.append(job.bound)
                return None
        if st == Status.DUAL_INFEASIBLE:
            # a ray of the relaxation (every node has the same recession cone): the model
            # is infeasible or unbounded, which run() settles (_settle_ray)
            return MIPStatus.UNBOUNDED
        bound = job.bound
        node_objective, db, y = self._unscaled(sol, row)
        if math.isfinite(db):
            bound = max(bound, db)
        fallback = job.again and st != Status.OPTIMAL
        if fallback:
            # the re-solve stopped short of its tolerance (at its cap, _tighten): the node
            # goes on from the solve before, whose LP ended OPTIMAL, under the better of
            # the two safe bounds
            st, (x, y), (node_objective, db) = Status.OPTIMAL, job.warm, job.previous
        if bound >= self._cutoff():
            self.closed = min(self.closed, bound)
            return None
        if not fallback and self._tighten(
            job, st, node_objective, db, bound, x, y, int(sol.iterations[row])
        ):
            return None
        finite = np.all(np.isfinite(x))
        lam = self._lambda_table(x) if finite else None
        leaf = bool(np.all(job.hi - job.lo <= 1))
        if finite:
            first, last, _, violation = sos2_structure(lam, self.options.sos2_tolerance)
            span = last - first
            branchable = span >= 2
        if st == Status.OPTIMAL and finite and not np.any(branchable):
            # the point looks SOS2-feasible: its polished LP decides
            lo, hi = (job.lo, job.hi) if leaf else self._candidate_intervals(x, job.lo, job.hi)
            verdict, box_bound = self._offer(lo, hi, x, y, node_objective, elapsed)
            if verdict == "accepted" and leaf:
                bound = max(bound, box_bound)  # the polished LP is this node's, tighter
                if bound < self._cutoff():
                    # its safe bound can trail the LP's optimum (reduced costs times wide
                    # bounds): once more, a hundred times tighter
                    state, _, _, tight_bound = self._polish(lo, hi, x, y, tighter=100.0)
                    if state == "optimal":
                        bound = max(bound, tight_bound)
            # The node is settled only if its bound is within the gap tolerances of the
            # incumbent (as a pruned node's): an inexact node LP may look SOS2-feasible in
            # pairs that hold a worse point than the node's optimum, in others.
            if (
                verdict == "accepted"
                and (leaf or bool(np.all(hi - lo <= 1)))
                and bound >= self._cutoff()
            ):
                self.closed = min(self.closed, bound)
                return None  # the node's optimum is that point (to the gap tolerances)
            if leaf:
                # "accepted" here: its polished LP, the leaf's own, is solved but its bound
                # is short of the cutoff; "fallback" or "projected": the polish did not
                # finish (or found no time left to start). Either way the leaf's optimum is
                # known only to an LP's tolerance, which the result says (_solution).
                # "rejected": the leaf holds no PWL point.
                if verdict in ("accepted", "fallback", "projected"):
                    self.closed = min(self.closed, bound)
                    if bound < self._cutoff():
                        self.loose.add("polishing" if verdict == "accepted" else "node")
                return None
            branchable = np.zeros(self.S, bool)  # fall through to a middle split
        elif leaf:
            # a leaf left without a usable point keeps its bound (an OPTIMAL status with a
            # non-finite point as well: dropping it made the search claim INFEASIBLE)
            if st != Status.OPTIMAL or not finite:
                self.unresolved.append(bound)
            return None
        # branch
        if finite and np.any(branchable):
            s = int(np.argmax(np.where(branchable, violation, -1.0)))
            r = split_index(lam[s], int(first[s]), int(last[s]), self.options.split)
        else:  # no usable point: halve the widest interval (width >= 2 off a leaf)
            s = int(np.argmax(job.hi - job.lo))
            r = int((job.lo[s] + job.hi[s] + 1) // 2)
        left_hi, right_lo = job.hi.copy(), job.lo.copy()
        left_hi[s], right_lo[s] = r, r
        warm = self._keep_warm(x, y, 2) if finite else -1
        try:
            self.store.push(job.lo, left_hi, bound, job.depth + 1, warm)
            self.store.push(right_lo, job.hi, bound, job.depth + 1, warm)
        except _StoreFull:
            self.unresolved.append(bound)
            self.store_full = True
            return MIPStatus.INCOMPLETE
        # heuristics from this node's point
        if (
            finite
            and st == Status.OPTIMAL
            and not math.isfinite(self.incumbent)
            and self.options.repair != "off"
            and self.projection_failures < PROJECTION_TRIES
        ):
            if self._project(x, elapsed) is False:
                self.projection_failures += 1
        if (
            finite
            and self.options.repair != "off"
            and len(self.heuristics) < self.options.batch_size
        ):
            rep = self._repair_job(job.lo, job.hi, x, (x, y))
            if rep is not None:
                self.heuristics.append(rep)
        if (
            finite
            and self.options.pump
            and not math.isfinite(self.incumbent)
            and (is_root or len(self.heuristics) < self.options.batch_size // 4)
        ):
            seeds = self.options.pump_seeds if is_root else 1
            for k in range(seeds):
                self.heuristics.append(self._pump_job(job.lo, job.hi, x, (x, y), k))
        return None

    def _tighten(self, job: _Job, st: Status, objective, db, bound, x, y, iterations: int) -> bool:
        """Whether the node (its LP ended ``st`` with ``objective`` and safe bound ``db``
        after ``iterations``, the node's bound now ``bound``, point ``x`` and duals ``y`` in
        the model's units) is queued to be solved again :data:`TIGHTEN_STEP` times tighter
        instead of being settled or branched now.

        A node LP stops at its tolerance: its objective and its safe bound may lie apart by
        as much as the gap the search closes (``relative_gap`` is the default tolerance),
        either above the other (a point a little infeasible has the lower objective). A
        node whose optimum lies above the cutoff can then show a bound below it, and the
        search branched on such nodes, or closed leaves with such bounds (which cap the
        bound it reports), without end: portfolio instances stopped at gaps of 1.1e-4 to
        2.8e-4, where node LPs at 1e-5 proved them with one or two nodes. So a node is
        solved again when the cutoff lies within that spread above its bound (``cutoff -
        bound <= |objective - db|``), warm started from its point, while the tolerance
        stays at or above ``polish_tolerance`` (the precision the search asks of its LPs).
        The search waits for it; storing its children at once instead explored them before
        the re-solve ended and gained nothing. Not a leaf: its polish already solves it
        tighter (:meth:`_polish`), and a re-solve that hit the iteration limit would leave
        the leaf, solved before, unresolved.

        The re-solve may take :data:`RESOLVE_COST` times the iterations of the node's first
        LP, or of the search's mean first node LP where that is more (the cap stays with
        the node when it is solved again once more, counted afresh). Uncapped, a re-solve
        on portfolio_n80 took 46k and 65k iterations after a first solve of 13k, and still
        fell short, so the node branched anyway. One that reaches its cap leaves the node
        to be settled or branched from the solve before, with the better of the two safe
        bounds (:meth:`_process`)."""
        cutoff = self._cutoff()
        tighter = job.tighter * TIGHTEN_STEP
        if (
            st != Status.OPTIMAL
            or not (math.isfinite(objective) and math.isfinite(db) and math.isfinite(cutoff))
            or cutoff - bound > abs(objective - db)
            or float(self.options.lp.tolerance) / tighter
            < float(self.options.polish_tolerance) * (1.0 - 1e-9)
            or not np.all(np.isfinite(x))
            or bool(np.all(job.hi - job.lo <= 1))  # a leaf
        ):
            return False
        if job.again:
            cap = job.cap
        else:
            total, count = self.node_iterations
            reference = max(iterations, total / max(count, 1))
            cap = min(math.ceil(RESOLVE_COST * reference), int(self.options.lp.max_iterations))
        # (previous: this solve's, whose point the re-solve starts from and falls back on)
        self.tighten.append(
            job._replace(
                bound=bound, warm=(x, y), tighter=tighter, cap=max(cap, 1), previous=(objective, db)
            )
        )
        return True

    def _projection_pairs(self, lp_x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The pairs :meth:`_repaired` holds each set's lambdas to: of ``lp_x``'s support
        where it is a pair, else the segment of the argument's value."""
        return self._candidate_intervals(lp_x, *self.root)

    def _repaired(self, lp_x: np.ndarray) -> np.ndarray:
        """``lp_x`` moved onto the LP's rows to rounding accuracy (:func:`repair_rows`)
        with each set's lambdas held to its pair (or to the segment of its argument): a
        polished LP point meets its rows only to the polish tolerance, in norm."""
        lower, upper = self._bounds(*self._projection_pairs(lp_x))
        lp = self.lp
        if not np.all(np.isfinite(lp_x)):
            return lp_x
        return repair_rows(lp.A, lp.row_lower, lp.row_upper, lower, upper, lp_x)[0]

    def _report(self, lp_x: np.ndarray) -> tuple[np.ndarray, np.ndarray, float, float]:
        """``(LP point, model values, violation, objective)`` of the point reported for
        the LP point ``lp_x``: of ``lp_x`` repaired onto its rows within its SOS2 pairs,
        ``lp_x`` itself, and ``lp_x`` with ``z = f(x)`` exactly, those the model's own check
        finds least violated (to 1e-9: rounding), and of them the best by the objective
        evaluated on the model (in minimisation form)."""
        repaired = self._repaired(lp_x)
        points = [(p, self.compiled.model_values(p)) for p in (repaired, lp_x)]
        points.append((lp_x, self.model.snap(points[1][1])))
        checked = [(pair, self.model.check(pair[1])) for pair in points]
        measured = [violation for _, violation in checked if not math.isnan(violation)]
        least = min(measured, default=math.inf)
        # (all NaN, from a non-finite point: none is admitted, so all are)
        admitted = [item for item in checked if item[1] <= max(least, 1e-9)] or checked
        scored = [
            (self.sign * self.model.objective_value(pair[1]), pair, violation)
            for pair, violation in admitted
        ]
        objective, (point, values), violation = min(scored, key=lambda item: item[0])
        return point, values, violation, objective

    def _solution(
        self, status: MIPStatus, bound: float, elapsed: float, rounds: int
    ) -> MIPSolution:
        inc, lp_x, polished = self.incumbent, self.incumbent_x, True
        if not math.isfinite(inc) and math.isfinite(self.fallback[0]):
            (inc, lp_x), polished = self.fallback, False
        violation = math.nan
        if math.isfinite(inc):
            if polished and self.incumbent_report is not None:
                lp_x, x, violation = self.incumbent_report
            else:  # a fallback, or the point of a feasibility search
                lp_x, x, violation, _ = self._report(lp_x)
            objective = self.model.objective_value(x)
            inc = self.sign * objective
            gap = max(inc - bound, 0.0) / max(abs(inc), 1e-9)
        else:
            gap, x, objective, polished = math.inf, None, math.nan, False
        message = MESSAGES[status]
        if self.ray_detail is not None and status == MIPStatus.INFEASIBLE:
            message = self.ray_detail
        elif self.ray_detail is not None:
            message += self.ray_detail
        elif status == MIPStatus.INFEASIBLE:
            message = (
                "infeasible: proved by the root relaxation, whose dual ray (certificate) "
                "gives the relaxation with zero cost a lower bound of "
                f"{self.certificate[1]:.3g} > 0, checked in float64 with rounding margins "
                "(lp.infeasibility_bound): no point satisfies the rows and bounds"
                if self.certificate is not None
                else f"infeasible: every one of {self.nodes} nodes was proved infeasible by "
                "its dual ray (checked exactly) or closed"
            )
        elif status in (
            MIPStatus.NODE_LIMIT,
            MIPStatus.TIME_LIMIT,
            MIPStatus.INCOMPLETE,
        ) and not math.isfinite(inc):
            message += "; no feasible point found"
        unpolished = (
            "the point comes from a node LP, unpolished (its polishing LP did not finish, "
            f"or had no time left); largest relative model violation {violation:.1e}"
        )
        if not polished and math.isfinite(inc) and status == MIPStatus.OPTIMAL:
            # the gap tolerances were never checked against an unpolished point's value
            message = (
                f"search complete, optimal to the node LPs' tolerance only (gap {gap:.1e}): "
                + unpolished
            )
        elif status == MIPStatus.OPTIMAL and bound == -math.inf and math.isfinite(inc):
            # not the LPs' precision: a safe bound is -inf where a reduced cost of the wrong
            # sign meets an infinite variable bound that no row confines on its own
            lp = self.lp
            lower, upper = root_implied_bounds(lp)
            free = np.flatnonzero(np.isinf(lower) | np.isinf(upper))
            names = ", ".join(lp.col_label(j) for j in free[:3])
            more = f" and {free.size - 3} more" if free.size > 3 else ""
            message = (
                "search complete, but with no finite bound (gap inf): the safe dual bounds meet "
                f"infinite variable bounds that no row confines on its own ({names}{more}); "
                "give these variables finite bounds"
                if free.size
                else "search complete, but with no finite bound (gap inf)"
            )
        elif status == MIPStatus.OPTIMAL and not self._gap_closed(bound):
            which, advice = (
                ("node LPs'", "leaves whose polishing LP did not finish kept their node bounds")
                if "node" in self.loose
                else ("polishing LPs'", "a leaf's polished bound fell short of the gap")
            )
            message = (
                f"search complete, optimal to the {which} tolerance only (gap {gap:.1e}): {advice}"
            )
        elif not polished and math.isfinite(inc):
            message += "; " + unpolished
        if self.store_full and status == MIPStatus.INCOMPLETE:
            message = (
                f"the node store is full (capacity {self.options.capacity}: raise "
                "PWLOptions.capacity); the bound keeps the bounds of the nodes not explored"
            )
        elif self.unproved_infeasible and status == MIPStatus.INCOMPLETE:
            message = (
                f"{self.unproved_infeasible} node LPs reported infeasible with a dual ray that "
                "the exact check (lp.infeasibility_bound) did not confirm; the bound keeps "
                "their bounds"
            )
        elif self.unresolved and status == MIPStatus.INCOMPLETE:
            message = (
                f"{len(self.unresolved)} leaf LPs stopped before their tolerance (raise "
                "lp.max_iterations); the bound keeps their safe dual bounds"
            )
        return MIPSolution(
            x=x,
            objective=objective,
            bound=self.sign * bound,
            gap=gap,
            status=status,
            message=message,
            nodes=self.nodes,
            time=elapsed,
            history=list(self.history),
            first_incumbent_time=self.first_time,
            lp_x=None if lp_x is None else lp_x.copy(),
            rounds=rounds,
            polished=polished,
            violation=violation,
            certificate=None if self.certificate is None else self.certificate[0].copy(),
            heuristic_share=(
                self.slot_rounds[0] / self.slot_rounds[1] if self.slot_rounds[1] else math.nan
            ),
        )

    def _print(self, elapsed: float, bound: float) -> None:
        inc = self.sign * self.incumbent if math.isfinite(self.incumbent) else math.nan
        gap = (
            max(self.incumbent - bound, 0.0) / max(abs(self.incumbent), 1e-9)
            if math.isfinite(self.incumbent)
            else math.inf
        )
        rate = self.nodes / elapsed if elapsed > 0 else 0.0
        print(
            f"{elapsed:8.1f}s  nodes {self.nodes:8d}  open {self.store.count():7d}  "
            f"bound {self.sign * bound:14.7g}  incumbent {inc:14.7g}  gap {gap:9.3%}  "
            f"nodes/s {rate:8.1f}",
            file=sys.stderr,
        )
