"""The search machinery of the branch-and-bound: node selection, warm starts from the
parent, the intervals SOS2 branching pushes, the feasibility pump's cycle handling and
seeds, and the progress line. Small models (tests/pwl/test_bnb.py's random_model), jax's
default precision."""

import math
import re

import numpy as np
import pytest

from jaxopt_suite.pwl import MIPStatus, PWLOptions, bnb, solve_pwl
from jaxopt_suite.pwl.bnb import _Solver, resolve_options
from jaxopt_suite.pwl.store import HostNodeStore, NodeStore
from tests.pwl.test_bnb import _objective_times, random_model


def _intervals(solver, upper):
    """``(lo, hi)`` per set of a job's column upper bounds (the lambdas its node allows)."""
    lo = np.full(solver.S, -1, np.int64)
    hi = np.full(solver.S, -1, np.int64)
    allowed = upper[solver.lam_cols] > 0
    for s in range(solver.S):
        positions = solver.lam_pos[(solver.lam_set == s) & allowed]
        lo[s], hi[s] = positions.min(), positions.max()
    return lo, hi


def _key(lo, hi):
    return (tuple(int(v) for v in lo), tuple(int(v) for v in hi))


class _Recorder:
    """Wraps ``_Solver.run`` / ``_process`` and the stores' push to record the solver, each
    branching (the parent job's intervals and the two children's, with the parent's LP
    point and duals in the model's units) and each store push."""

    def __init__(self, monkeypatch):
        self.solvers: list[_Solver] = []
        self.current: list = []  # the job being processed (a stack of one)
        self.branchings: list[tuple] = []  # (parent job, x, y, [(lo, hi), ...])
        run, process = _Solver.run, _Solver._process

        def recording_run(solver):
            self.solvers.append(solver)
            return run(solver)

        def recording_process(solver, job, sol, row, elapsed):
            children: list = []
            x = np.array(sol.x[row], np.float64)
            y = np.array(solver._unscaled(sol, row)[2], np.float64)
            self.current.append(children)
            try:
                result = process(solver, job, sol, row, elapsed)
            finally:
                self.current.pop()
            if children:
                self.branchings.append((job, x, y, children))
            return result

        def recording(push):
            def recording_push(store, lo, hi, bound, depth, warm):
                if self.current:
                    self.current[-1].append((np.array(lo).copy(), np.array(hi).copy(), warm))
                return push(store, lo, hi, bound, depth, warm)

            return recording_push

        monkeypatch.setattr(_Solver, "run", recording_run)
        monkeypatch.setattr(_Solver, "_process", recording_process)
        for kind in (HostNodeStore, NodeStore):
            monkeypatch.setattr(kind, "push", recording(kind.push))


# -- node selection ------------------------------------------------------------------------


def _filled_store(bounds, kind, capacity=8):
    store = kind(capacity, 1)
    for depth, b in enumerate(bounds):
        store.push(np.zeros(1), np.ones(1), b, depth, -1)
    return store


@pytest.mark.parametrize("kind", [HostNodeStore, NodeStore])
def test_select_takes_the_newest_for_diving_and_the_rest_best_bound_first(kind):
    # Guards the node order of the search: `dive` newest nodes, then best bound first
    # among the others, no node twice, closed nodes never. A selection by bound alone
    # (dive ignored) gives [1, 3, 5] below, one by order alone [5, 4, 3]; a dive that took
    # the highest row instead of the newest node picks row 5 after the recycling below.
    store = _filled_store([5.0, 1.0, 3.0, 1.0, 4.0, 2.0], kind)  # rows 0..5 in order
    assert store.select(3, 1) == [5, 1, 3]  # newest (row 5), then bounds 1, 1 (a tie)
    assert store.select(3, 0) == [1, 3, 5]  # dive 0: best bound only
    assert store.select(4, 2) == [5, 4, 1, 3]
    assert store.select(2, 5) == [5, 4]  # dive capped at take: the two newest
    assert store.select(0, 0) == [] and store.select(0, 3) == []
    # the tie (rows 1 and 3, bound 1) breaks the same way every time
    assert store.select(1, 0) == [1] and store.select(2, 0) == [1, 3]
    # take larger than the open nodes: all of them, whatever the dive
    assert sorted(store.select(10, 2)) == [0, 1, 2, 3, 4, 5]
    assert sorted(store.select(6, 0)) == [0, 1, 2, 3, 4, 5]
    # closed nodes are never chosen; a recycled row holds the newest node
    store.pop(1)
    store.pop(5)
    assert sorted(store.select(10, 0)) == [0, 2, 3, 4]
    assert store.select(2, 0) == [3, 2]
    row = store.push(np.zeros(1), np.ones(1), 9.0, 7, -1)
    assert row == 5  # the last freed row is reused first
    store.pop(3)
    row = store.push(np.zeros(1), np.ones(1), 8.0, 8, -1)
    assert row == 3  # row 3 now holds the newest node, row 5 the one before
    assert store.select(2, 1) == [3, 2]  # newest (row 3, bound 8), then best bound (3)
    assert store.select(3, 2) == [3, 5, 2]
    assert store.select(3, 0) == [2, 4, 0]
    for take in range(8):
        for dive in range(4):
            chosen = store.select(take, dive)
            assert len(chosen) == len(set(chosen)) == min(take, store.count())
            assert all(store.open[i] for i in chosen)


@pytest.mark.parametrize("kind", [HostNodeStore, NodeStore])
def test_select_with_equal_bounds_and_no_dive_is_deterministic(kind):
    # Guards the best-bound order under ties: all bounds equal, the selection is the
    # lowest rows (a stable sort), and dive still takes the newest whatever their bound.
    store = _filled_store([2.0] * 5, kind)
    assert store.select(3, 0) == [0, 1, 2]
    assert store.select(3, 1) == [4, 0, 1]
    store = _filled_store([math.inf, -math.inf, 0.0], kind)
    assert store.select(2, 0) == [1, 2]  # infinite bounds order too
    assert store.select(1, 1) == [2]


# -- warm starts ---------------------------------------------------------------------------


@pytest.mark.parametrize("factor", [100.0, 1e-3])
def test_children_start_from_their_parents_point(monkeypatch, factor):
    # Guards the warm starts of node jobs: each child LP starts from its parent's LP point
    # (clipped to the child's bounds) and duals (in the scaled LP's units: factor 1e-3
    # makes the objective scale exceed 1, factor 100 leaves it 1), and the parent's entry
    # is kept until both children took it, then freed. Fails if _take_warm returned None
    # (cold starts, zeros), gave a child another node's point, the duals missed the scale,
    # the entry was freed after the first child (the second starts cold) or never freed
    # (its references no longer match the open nodes): each checked on a mutant.
    # Heuristics are off so that every refilled row is a node job.
    model = _objective_times(random_model(0, functions=3, segments=6), factor)
    recorder = _Recorder(monkeypatch)
    refills = []  # (bounds, warm x, warm y, scale) per refill
    refill = bnb.batch_refill

    def recording_refill(batch, slots, lower, upper, costs, *, warm_start, **kwargs):
        solver = recorder.solvers[-1]
        refills.append((np.array(lower), np.array(upper), *map(np.array, warm_start), solver.scale))
        return refill(batch, slots, lower, upper, costs, warm_start=warm_start, **kwargs)

    takes = []  # (key, references before, still kept after, gave a warm start)
    take = _Solver._take_warm

    def recording_take(solver, key):
        before = solver.warm[key][2] if key in solver.warm else 0
        result = take(solver, key)
        takes.append((key, before, key in solver.warm, result is not None))
        return result

    monkeypatch.setattr(bnb, "batch_refill", recording_refill)
    monkeypatch.setattr(_Solver, "_take_warm", recording_take)
    options = PWLOptions(batch_size=4, pump=False, repair="off", node_limit=60)
    sol = solve_pwl(model, options)
    assert sol.status in (MIPStatus.OPTIMAL, MIPStatus.NODE_LIMIT), sol.message
    solver = recorder.solvers[0]
    assert (solver.scale > 1.0) == (factor < 1.0)
    parents = {}  # child intervals -> (parent x, parent y, warm key)
    for job, x, y, children in recorder.branchings:
        assert job.kind == "node" and len(children) == 2
        assert children[0][2] == children[1][2]  # one entry, shared by both children
        for lo, hi, warm in children:
            parents[_key(lo, hi)] = (x, y, warm)
    checked = warm_differs = 0
    for lower, upper, xs, ys, scale in refills:
        for r in range(upper.shape[0]):
            child = _key(*_intervals(solver, upper[r]))
            if child not in parents:  # the root, started cold
                assert child == _key(*solver.root)
                assert not xs[r].any() and not ys[r].any()
                continue
            x, y, warm = parents[child]
            assert np.all(np.isfinite(x)) and warm > 0
            expected = np.clip(x, lower[r], upper[r])
            np.testing.assert_array_equal(xs[r], expected)
            np.testing.assert_allclose(ys[r], y * scale, rtol=1e-12, atol=0)
            checked += 1
            warm_differs += bool(np.any(expected != np.clip(0.0, lower[r], upper[r])))
    assert checked >= 6 and warm_differs >= 1  # else the checks above test cold starts
    # each entry was taken twice at most: the first child leaves it (one reference), the
    # second frees it; keys of nodes that were pruned are released the same way
    by_key: dict[int, list] = {}
    for key, before, kept, gave in takes:
        if key >= 0:
            by_key.setdefault(key, []).append((before, kept, gave))
    assert by_key and all(len(v) <= 2 for v in by_key.values())
    for history in by_key.values():
        assert history[0] == (2, True, True)
        if len(history) == 2:
            assert history[1] == (1, False, True)
    assert sum(len(v) == 2 for v in by_key.values()) >= 3
    # at the end, the live entries are exactly those open nodes still reference, each with
    # as many references as nodes
    open_keys = solver.store.warm[solver.store.open]
    open_keys = open_keys[open_keys >= 0]
    expected = {int(k): int(np.sum(open_keys == k)) for k in np.unique(open_keys)}
    assert {k: v[2] for k, v in solver.warm.items()} == expected


# -- SOS2 branching ------------------------------------------------------------------------


def _check_children(parent_lo, parent_hi, children, widest=False):
    """The two children split one set's interval at a point strictly inside it, share
    only that point, cover the parent's interval, and copy every other set's."""
    (left_lo, left_hi, _), (right_lo, right_hi, _) = children
    changed = np.flatnonzero((left_hi != parent_hi) | (right_lo != parent_lo))
    assert changed.size == 1, (parent_lo, parent_hi, children)
    s = int(changed[0])
    np.testing.assert_array_equal(left_lo, parent_lo)
    np.testing.assert_array_equal(right_hi, parent_hi)
    others = np.arange(parent_lo.size) != s
    np.testing.assert_array_equal(left_hi[others], parent_hi[others])
    np.testing.assert_array_equal(right_lo[others], parent_lo[others])
    r = int(left_hi[s])
    assert right_lo[s] == r  # shared split point: the children's columns meet only there
    assert parent_lo[s] < r < parent_hi[s]  # both strictly smaller than the parent
    for lo, hi in ((left_lo, left_hi), (right_lo, right_hi)):
        assert np.all(lo <= hi) and np.all(parent_lo <= lo) and np.all(hi <= parent_hi)
        assert np.sum(hi - lo) < np.sum(parent_hi - parent_lo)
    if widest:
        widths = parent_hi - parent_lo
        assert widths[s] == widths.max() and r == (parent_lo[s] + parent_hi[s] + 1) // 2


@pytest.mark.parametrize("seed", [0, 2, 3])
def test_sos2_branching_pushes_strictly_smaller_children(monkeypatch, seed):
    # Guards the intervals the search pushes, not only split_index: a child equal to its
    # parent (a split at the first or last nonzero, or r written to the wrong side) makes
    # the search loop on one node; overlapping children explore columns twice, and a gap
    # between them loses PWL points. Fails if the push used r + 1 for the right child
    # (no shared point, a lost segment), r = first (left child equals parent), changed
    # another set than the one split, or split a set other than the most violated one.
    # A node whose point is SOS2 in every set but not settled (its polished bound short of
    # the cutoff) falls through to halving its widest interval: checked as such.
    model = random_model(seed, functions=3, segments=6)
    recorder = _Recorder(monkeypatch)
    sol = solve_pwl(model, PWLOptions(batch_size=4, node_limit=60))
    assert sol.status in (MIPStatus.OPTIMAL, MIPStatus.NODE_LIMIT), sol.message
    solver = recorder.solvers[0]
    sos2 = 0
    for job, x, _, children in recorder.branchings:
        assert job.kind == "node" and len(children) == 2
        first, last, _, violation = bnb.sos2_structure(
            solver._lambda_table(x), solver.options.sos2_tolerance
        )
        branchable = last - first >= 2
        _check_children(job.lo, job.hi, children, widest=not branchable.any())
        if branchable.any():
            # the most violated set that spreads over more than a pair, split strictly
            # between its first and last nonzero lambda
            s = int(np.flatnonzero(children[0][1] != job.hi)[0])
            assert s == int(np.argmax(np.where(branchable, violation, -1.0)))
            assert first[s] < children[0][1][s] < last[s]
            sos2 += 1
    assert sos2 >= 1 and len(recorder.branchings) >= 3


def test_a_node_without_a_finite_point_halves_its_widest_interval(monkeypatch):
    # Guards the fallback split when a node LP gives no usable point (non-finite x, made
    # here by replacing every LP answer's x with NaN): the widest interval is halved,
    # strictly inside, and the children get no warm start from it. Fails if the fallback
    # split at lo or hi (a child equal to its parent, which the search would process
    # again and again until the node limit) or halved a narrower set.
    model = random_model(1, functions=3, segments=6)
    solution = bnb.batch_solution

    def non_finite(*args, **kwargs):
        sol = solution(*args, **kwargs)
        return sol._replace(x=np.full_like(sol.x, np.nan))

    monkeypatch.setattr(bnb, "batch_solution", non_finite)
    recorder = _Recorder(monkeypatch)
    sol = solve_pwl(model, PWLOptions(batch_size=4, node_limit=40))
    assert sol.x is None
    assert len(recorder.branchings) >= 10
    for job, _, _, children in recorder.branchings:
        _check_children(job.lo, job.hi, children, widest=True)
        assert all(warm == -1 for _, _, warm in children)


# -- the feasibility pump ------------------------------------------------------------------


def _pump_solver(pump_iterations):
    model = random_model(0, functions=3, segments=4)
    comp = model.compile()
    options = resolve_options(PWLOptions(pump_iterations=pump_iterations, seed=0))
    return _Solver(model, comp, options), comp


def _point(comp, table):
    """An LP point (model columns 0) with the ``(S, W)`` lambda table ``table``."""
    x = np.zeros(comp.lp.num_cols)
    for s, row in enumerate(table):
        cols = comp.set_columns[s]
        x[cols[cols >= 0]] = row[: np.sum(cols >= 0)]
    return x


def test_a_pump_whose_target_repeats_perturbs_the_worst_set_and_ends():
    # Guards the pump's cycle handling: an LP answer that rounds to pairs already tried
    # (here the same point every step, the worst case) moves the worst set's pair by noise
    # instead of re-solving the same job, the other sets keep theirs, and the job ends after
    # pump_iterations steps. Without the cycle test every step targets the same pairs (one
    # distinct target, fails below); without the step limit the loop never ends (fails the
    # count); perturbing every set changes sets 1 and 2 (fails).
    solver, comp = _pump_solver(pump_iterations=8)
    lo, hi = solver.root
    spread = [0.25, 0.25, 0.25, 0.25, 0.0]  # pairs 0..2 hold 0.5 each: a tie
    # held in pair 2 (no mass outside it), with mass 0.7 on pair 1: noise could move it
    held = [0.0, 0.0, 0.7, 0.3, 0.0]
    x = _point(comp, [spread, held, held])
    job = solver._pump_job(lo, hi, x, None, 0)
    np.testing.assert_array_equal(job.pairs, [0, 2, 2])
    assert job.step == 0 and job.seen == frozenset({job.pairs.tobytes()})
    chain = [job]
    while (nxt := solver._pump_next(chain[-1], x)) is not None:
        assert nxt.kind == "pump" and len(chain) < 100
        chain.append(nxt)
    assert [j.step for j in chain] == list(range(8))  # ends within pump_iterations
    targets = {j.pairs.tobytes() for j in chain}
    assert len(targets) >= 2  # perturbed: the same point gave other targets
    assert chain[-1].seen == targets  # every target is remembered
    for j in chain:
        np.testing.assert_array_equal(j.pairs[1:], [2, 2])  # only the worst set moves
        assert 0 <= j.pairs[0] <= 3
        np.testing.assert_array_equal(j.costs, solver._pump_costs(j.pairs, j.step))
    # a new target is taken as rounded, without noise: from pairs the job has not tried
    moved = _point(comp, [[0.0, 0.0, 0.1, 0.6, 0.3], held, held])
    rng_state = solver.rng.bit_generator.state
    nxt = solver._pump_next(job, moved)
    np.testing.assert_array_equal(nxt.pairs, [3, 2, 2])
    assert solver.rng.bit_generator.state == rng_state  # no noise drawn
    assert nxt.warm[0] is moved and nxt.warm[1] is None
    assert nxt.seen == job.seen | {nxt.pairs.tobytes()}


@pytest.mark.parametrize("seeds", [0, 1, 3])
def test_the_root_starts_pump_seeds_pump_jobs_run_together(monkeypatch, seeds):
    # Guards the pump's seeds: the root (branched, no incumbent) queues exactly pump_seeds
    # pump jobs over the root's intervals, seed 0 without noise and the others with it,
    # and they share the next batch (up to the heuristic cap); every pump job processed
    # stays within pump_iterations. Fails if the root made one seed (or seeds for other
    # nodes), if the seeds ran one per round, or if a pump chain ran past its limit.
    model = random_model(2, functions=3, segments=6)
    recorder = _Recorder(monkeypatch)
    made = []  # (seed index, lo, hi, nodes processed so far, pairs, noise-free pairs)
    make = _Solver._pump_job

    def recording_pump_job(solver, lo, hi, x, warm, seed_index):
        job = make(solver, lo, hi, x, warm, seed_index)
        rounded = solver._choose_pairs(solver._lambda_table(x), lo, hi, noise=0.0)
        made.append((seed_index, lo.copy(), hi.copy(), solver.nodes, job.pairs, rounded))
        return job

    processed = []  # pump jobs' steps
    process = _Solver._process

    def recording_process(solver, job, sol, row, elapsed):
        if job.kind == "pump":
            processed.append(job.step)
        return process(solver, job, sol, row, elapsed)

    pumps_per_refill = []
    refill = bnb.batch_refill

    def recording_refill(batch, slots, lower, upper, costs, **kwargs):
        solver = recorder.solvers[-1]
        node_costs = (solver.lp.c, solver.node_lp.c)
        pumps_per_refill.append(
            sum(not any(np.array_equal(c, n) for n in node_costs) for c in np.asarray(costs))
        )
        return refill(batch, slots, lower, upper, costs, **kwargs)

    monkeypatch.setattr(_Solver, "_pump_job", recording_pump_job)
    monkeypatch.setattr(_Solver, "_process", recording_process)
    monkeypatch.setattr(bnb, "batch_refill", recording_refill)
    # repair off: no projection makes an incumbent at the root before the pump is asked;
    # iterates are not lent (early_heuristic_rounds), so only nodes make pump jobs
    options = PWLOptions(
        batch_size=16,
        repair="off",
        pump_seeds=seeds,
        pump_iterations=3,
        early_heuristic_rounds=10**6,
        node_limit=30,
    )
    solve_pwl(model, options)
    root_children = recorder.branchings[0][3]
    assert recorder.branchings[0][0].depth == 0 and len(root_children) == 2  # it branched
    at_root = [m for m in made if m[3] == 1]  # made while the root was the only node
    assert [m[0] for m in at_root] == list(range(seeds))
    # other nodes queue one pump job each (seed 0, without noise)
    later = [m[3] for m in made if m[3] > 1]
    assert len(later) == len(set(later)) and all(m[0] == 0 for m in made if m[3] > 1)
    assert seeds == 0 or later  # (this model's search has such nodes)
    lo, hi = recorder.solvers[0].root
    for _, m_lo, m_hi, _, _, _ in at_root:
        np.testing.assert_array_equal(m_lo, lo)
        np.testing.assert_array_equal(m_hi, hi)
    if seeds:  # seed 0 targets the root point's own pairs
        np.testing.assert_array_equal(at_root[0][4], at_root[0][5])
    cap = max(1, int(options.heuristic_fraction * options.batch_size))
    assert pumps_per_refill[0] == 0  # the root alone
    assert pumps_per_refill[1] == min(seeds, cap)  # the seeds together, beside the children
    assert sum(step == 0 for step in processed) >= seeds
    assert all(step < options.pump_iterations for step in processed)


# -- the progress line ---------------------------------------------------------------------

_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?(?:e[-+]?\d+)?|inf|nan)"
_LINE = re.compile(
    rf"^\s*(?P<time>{_NUMBER})s\s+nodes\s+(?P<nodes>\d+)\s+open\s+(?P<open>\d+)\s+"
    rf"bound\s+(?P<bound>{_NUMBER})\s+incumbent\s+(?P<incumbent>{_NUMBER})\s+"
    rf"gap\s+(?P<gap>{_NUMBER})%\s+nodes/s\s+(?P<rate>{_NUMBER})$"
)


def _progress_lines(capsys, model, **options):
    sol = solve_pwl(model, PWLOptions(batch_size=4, **options))
    captured = capsys.readouterr()
    lines = [line for line in (captured.out + captured.err).splitlines() if line.strip()]
    return sol, lines


def test_the_progress_line_shows_bound_incumbent_gap_and_rate(capsys):
    # Guards the progress output: with progress_every=0 a line per round, each with the
    # time, nodes, open nodes, bound, incumbent, gap and nodes/s fields, the last one the
    # result's numbers; none without progress=True, and fewer with a long period. Fails if
    # a field is dropped or renamed, progress_every is ignored, or the final line is
    # missing or shows another bound or incumbent than the result.
    model = random_model(1, functions=3, segments=4)
    sol, lines = _progress_lines(capsys, model, progress=True, progress_every=0.0)
    assert sol.status == MIPStatus.OPTIMAL
    parsed = [_LINE.match(line) for line in lines]
    assert all(parsed), lines
    assert len(lines) >= 3
    nodes = [int(m["nodes"]) for m in parsed]
    assert nodes == sorted(nodes)
    assert all(float(m["rate"]) >= 0.0 for m in parsed)
    last = parsed[-1]
    assert int(last["nodes"]) == sol.nodes and float(last["rate"]) > 0.0
    assert float(last["bound"]) == pytest.approx(sol.bound, rel=1e-6, abs=1e-9)
    assert float(last["incumbent"]) == pytest.approx(sol.objective, rel=1e-6, abs=1e-9)
    assert float(last["gap"]) / 100 == pytest.approx(sol.gap, abs=1e-5)
    # without an incumbent (at least before the root is solved) the incumbent shows as nan
    # and the gap as inf; with one, both are finite
    assert all((m["incumbent"] == "nan") == (m["gap"] == "inf") for m in parsed)
    assert all(m["incumbent"] == "nan" for m in parsed if m["nodes"] == "0")
    assert math.isfinite(float(last["incumbent"])) and math.isfinite(float(last["gap"]))
    # a long period: the first round's line and the final one only
    _, sparse = _progress_lines(capsys, model, progress=True, progress_every=1e9)
    assert len(sparse) == 2 and all(_LINE.match(line) for line in sparse)
    _, silent = _progress_lines(capsys, model)
    assert silent == []


def test_a_maximisation_prints_its_bound_and_incumbent_in_the_model_sense(capsys):
    # Guards the sign of the printed numbers: a maximisation's bound and incumbent are shown
    # as the result reports them (an upper bound above the incumbent), not negated.
    model = random_model(4, functions=3, segments=4)
    model.maximize({t.z: -1.0 for t in model.terms})
    sol, lines = _progress_lines(capsys, model, progress=True, progress_every=0.0)
    last = _LINE.match(lines[-1])
    assert last is not None and sol.status == MIPStatus.OPTIMAL
    assert float(last["incumbent"]) == pytest.approx(sol.objective, rel=1e-6, abs=1e-9)
    assert float(last["bound"]) == pytest.approx(sol.bound, rel=1e-6, abs=1e-9)
    assert sol.objective != 0.0  # else the sign would not show


def test_a_leaf_with_an_optimal_status_but_no_finite_point_keeps_its_bound(monkeypatch):
    # such a leaf was dropped without its bound: the search then claimed INFEASIBLE for a
    # model with points ("every one of N nodes was proved infeasible")
    from jaxopt_suite.pwl import bnb

    original = bnb.batch_solution

    def nan_points(*args, **kwargs):
        solution = original(*args, **kwargs)
        return solution._replace(x=np.full_like(solution.x, np.nan))

    from tests.pwl.test_bnb import brute_force

    model = random_model(1, functions=2, segments=4)
    monkeypatch.setattr(bnb, "batch_solution", nan_points)
    sol = solve_pwl(model, PWLOptions(batch_size=4))
    assert sol.status == MIPStatus.INCOMPLETE and sol.x is None
    assert sol.bound <= brute_force(model) + 1e-6  # the leaves' bounds are kept
