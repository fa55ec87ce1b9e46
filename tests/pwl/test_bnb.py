"""Branch-and-bound on small PWL models against brute-force enumeration of segments."""

import itertools
import json
import math
import time

import jax
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jaxopt_suite.lp import LPOptions, infeasibility_bound
from jaxopt_suite.pwl import MIPStatus, PWLModel, PWLOptions, solve_pwl
from jaxopt_suite.pwl.bnb import sos2_structure, split_index


@pytest.fixture(autouse=True)
def float64():
    # node LPs to 1e-6 (the float64 default): points feasible to ~1e-6, objectives to 1e-4
    with jax.enable_x64(True):
        yield


def random_model(seed, functions=3, segments=4, nonconvex=True):
    """Sum of PWL costs (concave pieces mixed in) under a budget and a coupling row."""
    rng = np.random.default_rng(seed)
    m = PWLModel(f"random{seed}")
    xs, zs = [], []
    for i in range(functions):
        x = m.add_variable(0.0, 10.0, name=f"x{i}")
        d = np.sort(np.concatenate([[0.0, 10.0], rng.uniform(0.5, 9.5, segments - 1)]))
        d = d + np.arange(d.size) * 1e-3  # strictly increasing
        d[-1] = 10.0 + d.size * 1e-3
        slopes = rng.uniform(0.2, 3.0, segments)
        if nonconvex:
            slopes = slopes * rng.choice([1.0, -0.4], segments)
        f = np.concatenate([[0.0], np.cumsum(slopes * np.diff(d))])
        zs.append(m.add_pwl(x, d, f))
        xs.append(x)
    m.add_constraint({x: 1.0 for x in xs}, lower=float(rng.uniform(5, 12)), upper=22.0)
    m.add_constraint({xs[0]: 1.0, xs[1]: -1.0}, upper=float(rng.uniform(0, 4)))
    m.minimize({**{z: 1.0 for z in zs}, xs[-1]: float(rng.uniform(-0.5, 0.5))})
    return m


def held_lp(comp):
    """``solve(upper, lower=None)``: HiGHS's optimum of the compiled LP with the columns held
    to ``[lower, upper]`` (``lower`` None: the LP's own), in minimisation form with the
    constant included, ``inf`` where it has no solution. One HiGHS model serves every call:
    its column bounds change, and each solve starts from the last one's basis."""
    import highspy

    lp = comp.lp
    A = sp.csc_matrix(lp.A)
    model = highspy.HighsLp()
    model.num_col_, model.num_row_ = A.shape[1], A.shape[0]
    model.col_cost_ = np.asarray(lp.c, np.float64)
    model.col_lower_ = np.asarray(lp.var_lower, np.float64)
    model.col_upper_ = np.asarray(lp.var_upper, np.float64)
    model.row_lower_ = np.asarray(lp.row_lower, np.float64)
    model.row_upper_ = np.asarray(lp.row_upper, np.float64)
    model.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    model.a_matrix_.start_ = A.indptr
    model.a_matrix_.index_ = A.indices
    model.a_matrix_.value_ = A.data
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    assert h.passModel(model) == highspy.HighsStatus.kOk
    columns = np.arange(A.shape[1], dtype=np.int32)

    def solve(upper, lower=None):
        lower = lp.var_lower if lower is None else lower
        h.changeColsBounds(
            columns.size, columns, np.asarray(lower, np.float64), np.asarray(upper, np.float64)
        )
        h.run()
        if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
            # not optimal from the last basis: decided by a solve from scratch (infeasible,
            # say, is then inf)
            h.clearSolver()
            h.run()
        if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
            return math.inf
        return float(h.getInfo().objective_function_value + lp.objective_offset)

    return solve


_BRUTE_FORCE = {}


def brute_force(model):
    """Best objective over every choice of one segment per PWL term (HiGHS LPs). Kept per
    model description: several tests enumerate the same 6^5 choices."""
    description = json.dumps(model.to_dict(), sort_keys=True)
    if description not in _BRUTE_FORCE:
        comp = model.compile()
        lp = comp.lp
        solve = held_lp(comp)
        best = math.inf
        for segs in itertools.product(*[range(t.segments) for t in comp.terms]):
            upper = lp.var_upper.copy()
            for s, k in enumerate(segs):
                cols = comp.set_columns[s][comp.set_columns[s] >= 0]
                off = np.ones(cols.size, bool)
                off[[k, k + 1]] = False
                upper[cols[off]] = 0.0
            best = min(best, solve(upper))
        _BRUTE_FORCE[description] = lp.objective_sign * best
    return _BRUTE_FORCE[description]


def evaluate(model, x):
    """``(objective, largest violation)`` of model-variable values ``x``, read off the
    model's description (``to_dict``) rather than ``objective_value`` / ``check``, the code
    under test: absolute violations of bounds, rows and ``z = f(x)`` (interpolated here)."""
    data = model.to_dict()
    names = [v["name"] for v in data["variables"]]
    value = dict(zip(names, np.asarray(x, np.float64), strict=True))
    worst = 0.0
    for v in data["variables"]:
        if "pwl" in v:
            spec = v["pwl"]
            arg = value[spec["x"]]
            d = spec["breakpoints"]
            worst = max(worst, d[0] - arg, arg - d[-1])
            worst = max(worst, abs(value[v["name"]] - np.interp(arg, d, spec["values"])))
        else:
            worst = max(worst, float(v["lower"]) - value[v["name"]])
            worst = max(worst, value[v["name"]] - float(v["upper"]))
    for row in data["constraints"]:
        a = sum(c * value[k] for k, c in row["terms"].items())
        worst = max(worst, float(row["lower"]) - a, a - float(row["upper"]))
    objective = data["objective"]
    total = objective["constant"] + sum(c * value[k] for k, c in objective["terms"].items())
    return float(total), float(worst)


def assert_gap_closed(sol, options=None):
    """An OPTIMAL status means the reported point and bound are within the tolerances, or
    its message says to which LP tolerance only they are (a leaf whose polishing LP did not
    finish, say)."""
    options = PWLOptions() if options is None else options
    assert sol.status == MIPStatus.OPTIMAL, sol.message
    assert math.isfinite(sol.bound)
    closed = sol.gap <= options.relative_gap or abs(sol.objective - sol.bound) <= (
        options.absolute_gap
    )
    assert closed or "tolerance only" in sol.message, (sol.objective, sol.bound, sol.message)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("batch_size", [1, 8])
def test_matches_brute_force(seed, batch_size):
    model = random_model(seed)
    sol = solve_pwl(model, PWLOptions(batch_size=batch_size))
    exact = brute_force(model)
    assert_gap_closed(sol)
    assert abs(sol.objective - exact) <= 1e-4 * max(1.0, abs(exact))
    assert sol.bound <= sol.objective + 1e-9
    # the returned point is checked on the model: the LP point repaired onto its rows
    # within its SOS2 pairs meets them, and z = f(x), to rounding
    assert sol.violation == model.check(sol.x) <= 1e-9
    # and, evaluated independently of the model's own code, the point is feasible and
    # worth the brute-force optimum
    value, violation = evaluate(model, sol.x)
    assert violation <= 1e-6
    assert abs(value - exact) <= 1e-4 * max(1.0, abs(exact))


def test_maximisation_reports_in_the_model_sense():
    model = random_model(4)
    model.maximize({t.z: -1.0 for t in model.terms})
    sol = solve_pwl(model, PWLOptions(batch_size=4))
    assert sol.status == MIPStatus.OPTIMAL
    exact = brute_force(model)
    assert abs(sol.objective - exact) <= 1e-4 * max(1.0, abs(exact))
    assert sol.bound >= sol.objective - 1e-9  # an upper bound for a maximisation


def test_pwl_in_a_constraint():
    # minimise x subject to f(x) >= 3 with f rising then falling: the answer is the first
    # crossing, a nonconvex feasible set (two intervals)
    m = PWLModel()
    x = m.add_variable(0.0, 10.0, name="x")
    f = m.add_pwl(x, [0, 2, 4, 6, 8, 10], [0, 4, 1, 0, 5, 2])
    m.add_constraint({f: 1.0}, lower=3.0)
    m.add_constraint({x: 1.0}, lower=3.0)  # excludes the first bump: x in [7.2, 9.33]
    m.minimize({x: 1.0})
    sol = solve_pwl(m, PWLOptions(batch_size=4))
    assert sol.status == MIPStatus.OPTIMAL
    assert abs(sol.objective - 7.2) <= 1e-4


def test_infeasible_model_is_proved_by_the_root():
    m = PWLModel()
    x = m.add_variable(0.0, 10.0)
    f = m.add_pwl(x, [0, 5, 10], [0, 1, 2])
    m.add_constraint({f: 1.0}, lower=3.0)  # f <= 2 everywhere
    m.minimize({x: 1.0})
    sol = solve_pwl(m, PWLOptions(batch_size=2))
    assert sol.status == MIPStatus.INFEASIBLE
    assert sol.nodes == 1 and "root relaxation" in sol.message and sol.x is None
    # the proof comes with the solution and is checked here again: the ray's Lagrangian
    # bound on the relaxation with zero cost is positive (before, only PDLP's first-order
    # test of the ray stood behind the status, and no ray was returned)
    assert "checked in float64" in sol.message
    lp = m.compile().lp
    assert sol.certificate is not None and sol.certificate.shape == (lp.num_rows,)
    assert infeasibility_bound(lp, sol.certificate) > 0.0
    # the same model without the impossible row: no y gives its relaxation such a bound
    feasible = PWLModel()
    x2 = feasible.add_variable(0.0, 10.0)
    feasible.add_pwl(x2, [0, 5, 10], [0, 1, 2])
    feasible.minimize({x2: 1.0})
    lp2 = feasible.compile().lp
    rng = np.random.default_rng(0)
    assert all(infeasibility_bound(lp2, rng.normal(size=lp2.num_rows)) <= 0.0 for _ in range(20))


def test_a_node_reported_infeasible_without_a_proof_is_not_dropped(monkeypatch):
    # PDLP's infeasibility test is first-order; a node whose ray the exact check does not
    # confirm keeps its bound, and the search ends INCOMPLETE saying why (it was dropped
    # for good, and a wrong verdict at the root made the model INFEASIBLE)
    from jaxopt_suite.pwl import bnb

    m = PWLModel()
    x = m.add_variable(0.0, 10.0)
    f = m.add_pwl(x, [0, 5, 10], [0, 1, 2])
    m.add_constraint({f: 1.0}, lower=3.0)
    m.minimize({x: 1.0})
    monkeypatch.setattr(bnb, "infeasibility_bound", lambda *args: -1.0)
    sol = solve_pwl(m, PWLOptions(batch_size=2))
    assert sol.status == MIPStatus.INCOMPLETE and sol.certificate is None
    assert "did not confirm" in sol.message and sol.bound == -math.inf


def test_infeasible_only_after_branching():
    # the relaxation (convex hull of the graph) meets f = 2.5 with x in [4, 6]; the PWL
    # graph never does, so only branching proves infeasibility
    m = PWLModel()
    x = m.add_variable(0.0, 10.0)
    f = m.add_pwl(x, [0, 4, 5, 6, 10], [0, 0, 5, 0, 0])
    m.add_constraint({f: 1.0}, lower=2.5, upper=2.5)
    m.add_constraint({x: 1.0}, lower=4.0, upper=4.4)
    m.minimize({x: 1.0})
    sol = solve_pwl(m, PWLOptions(batch_size=2))
    if sol.status == MIPStatus.OPTIMAL:  # f(x) = 2.5 at x = 4.5 lies outside [4, 4.4]
        pytest.fail(f"found a point that cannot exist: {sol.x}")
    assert sol.status == MIPStatus.INFEASIBLE


def unbounded_model(sense="min"):
    m = PWLModel()
    x = m.add_variable(0.0, 10.0)
    free = m.add_variable(-math.inf, math.inf, name="free")
    f = m.add_pwl(x, [0, 5, 10], [0, 3, 1])
    if sense == "min":
        m.minimize({f: 1.0, free: 1.0})
    else:
        m.maximize({f: -1.0, free: -1.0})
    return m, free


@pytest.mark.parametrize("sense", ["min", "max"])
def test_unbounded_model(sense):
    m, free = unbounded_model(sense)
    sol = solve_pwl(m, PWLOptions(batch_size=2))
    assert sol.status == MIPStatus.UNBOUNDED, sol.message
    # no finite optimum: the bound is -inf for a minimisation, +inf for a maximisation
    assert sol.bound == (-math.inf if sense == "min" else math.inf)
    assert "polishing" not in sol.message
    # the witness: a feasible point from which the ray (free -> -inf) stays feasible and
    # improves the objective without bound
    value, violation = evaluate(m, sol.x)
    assert violation <= 1e-6 and value == pytest.approx(sol.objective)
    further = np.array(sol.x)
    further[free.index] -= 1e3
    value_further, violation_further = evaluate(m, further)
    assert violation_further <= 1e-6
    assert (value_further < value - 999) if sense == "min" else (value_further > value + 999)


def test_unbounded_relaxation_of_an_infeasible_model_is_infeasible():
    # the relaxation has a ray (y -> inf lowers x - y) but no PWL point meets the rows
    # (as in test_infeasible_only_after_branching): a ray alone proves nothing
    m = PWLModel()
    x = m.add_variable(0.0, 10.0, name="x")
    y = m.add_variable(0.0, math.inf, name="y")
    f = m.add_pwl(x, [0, 4, 5, 6, 10], [0, 0, 5, 0, 0])
    m.add_constraint({f: 1.0}, lower=2.5, upper=2.5)
    m.add_constraint({x: 1.0}, lower=4.0, upper=4.4)
    m.minimize({x: 1.0, y: -1.0})
    sol = solve_pwl(m, PWLOptions(batch_size=2))
    assert sol.status == MIPStatus.INFEASIBLE, sol.message
    assert sol.x is None and sol.bound == math.inf
    assert "primal ray" in sol.message and "feasibility search" in sol.message
    assert "polishing" not in sol.message and "nan" not in sol.message


def test_ray_without_room_for_the_feasibility_search():
    # the root's ray uses the only node: infeasible or unbounded, honestly undecided
    m, _ = unbounded_model()
    sol = solve_pwl(m, PWLOptions(batch_size=2, node_limit=1))
    assert sol.status == MIPStatus.INFEASIBLE_OR_UNBOUNDED, sol.message
    assert sol.x is None and sol.bound == -math.inf and sol.nodes == 1
    assert "node limit" in sol.message and "polishing" not in sol.message


def test_node_limit_is_honest():
    model = random_model(7, functions=5, segments=6)
    sol = solve_pwl(model, PWLOptions(batch_size=1, node_limit=2, repair="off", pump=False))
    assert sol.status in (MIPStatus.NODE_LIMIT, MIPStatus.OPTIMAL)
    exact = brute_force(model)
    tol = 1e-4 * max(1.0, abs(exact))
    # whatever the status, the bound is valid and a returned point is feasible, so it can
    # be no better than the optimum
    assert sol.bound <= exact + tol
    if sol.x is not None:
        value, violation = evaluate(model, sol.x)
        assert violation <= 1e-6
        assert value == pytest.approx(sol.objective) and value >= exact - tol
    if sol.status == MIPStatus.NODE_LIMIT:
        assert sol.nodes <= 2
    else:
        assert abs(sol.objective - exact) <= tol


# --------------------------------------------------------------------------------------
# SOS2 branching pieces


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.floats(0.0, 1.0), min_size=3, max_size=12),
    st.sampled_from(["weighted", "middle"]),
)
def test_split_is_strictly_inside_so_children_differ(values, rule):
    lam = np.array(values)[None, :]
    first, last, _, _ = sos2_structure(lam, 1e-9)
    if first[0] < 0 or last[0] - first[0] < 2:
        return
    r = split_index(lam[0], int(first[0]), int(last[0]), rule)
    assert first[0] < r < last[0]
    # left child allows [.., r], right [r, ..]: each drops a nonzero of the parent
    assert lam[0, last[0]] > 1e-9 and lam[0, first[0]] > 1e-9


def test_split_refuses_adjacent_supports():
    with pytest.raises(ValueError, match="strictly between"):
        split_index(np.array([0.0, 0.5, 0.5, 0.0]), 1, 2, "middle")


def test_sos2_structure():
    lam = np.array([[0.0, 0.3, 0.7, 0.0], [0.5, 0.0, 0.0, 0.5], [1.0, 0.0, 0.0, 0.0]])
    first, last, best, violation = sos2_structure(lam, 1e-9)
    np.testing.assert_array_equal(first, [1, 0, 0])
    np.testing.assert_array_equal(last, [2, 3, 0])
    np.testing.assert_array_equal(best, [1, 0, 0])
    np.testing.assert_allclose(violation, [0.0, 0.5, 0.0])


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10_000))
def test_pruning_never_removes_the_optimum(seed):
    model = random_model(seed, functions=2, segments=3)
    sol = solve_pwl(model, PWLOptions(batch_size=4))
    exact = brute_force(model)
    if not math.isfinite(exact):
        assert sol.status == MIPStatus.INFEASIBLE
        return
    assert_gap_closed(sol)
    assert abs(sol.objective - exact) <= 1e-4 * max(1.0, abs(exact))
    assert sol.bound <= exact + 1e-4 * max(1.0, abs(exact))


def test_loose_node_lps_do_not_close_nodes_short_of_the_gap():
    # node LPs at 1e-2 looked SOS2-feasible in pairs worse than the nodes' optima: the nodes
    # were closed with their loose bounds and the solve said OPTIMAL at a gap of 9e-4
    m = PWLModel()
    x, y = m.add_variable(0.0, 10.0, name="x"), m.add_variable(0.0, 10.0, name="y")
    zx = m.add_pwl(x, [0, 2, 5, 7, 10], [0, 4, 1, 6, 2])
    zy = m.add_pwl(y, [0, 3, 6, 10], [5, 0, 6, 1])
    m.add_constraint({x: 1.0, y: 1.0}, upper=11.0)
    m.maximize({zx: 1.0, zy: 1.0})
    options = PWLOptions(batch_size=4, lp=LPOptions(tolerance=1e-2))
    sol = solve_pwl(m, options)
    assert_gap_closed(sol, options)
    assert abs(sol.objective - brute_force(m)) <= 1e-4 * abs(sol.objective)


def test_an_unbounded_pwl_argument_is_confined_to_its_breakpoints():
    # the argument's column kept its infinite bounds: every safe dual bound was -inf
    m = PWLModel()
    x = m.add_variable(-math.inf, math.inf, name="x")
    z = m.add_pwl(x, [0.0, 1.0, 2.0, 3.0], [2.0, 0.0, 1.0, -1.0])
    m.minimize({z: 1.0})
    lp = m.compile().lp  # column 0 is x
    assert (lp.var_lower[0], lp.var_upper[0]) == (0.0, 3.0)
    sol = solve_pwl(m, PWLOptions(batch_size=4))
    assert_gap_closed(sol)
    assert sol.objective == pytest.approx(-1.0) and sol.bound == pytest.approx(-1.0)


def test_a_model_without_pwl_terms_is_an_lp():
    m = PWLModel()
    x = m.add_variable(0.0, 10.0, name="x")
    m.add_constraint({x: 1.0}, lower=2.0)
    m.minimize({x: 1.0})
    sol = solve_pwl(m, PWLOptions(batch_size=4))
    assert_gap_closed(sol)
    assert sol.objective == pytest.approx(2.0, rel=1e-5)


def test_node_limits_are_kept_and_a_tree_finished_at_the_limit_is_complete():
    model = random_model(5, functions=3, segments=16)
    for dive in (0.25, 1.0):  # the dive's share could exceed the nodes left to take
        sol = solve_pwl(model, PWLOptions(batch_size=64, node_limit=10, dive_fraction=dive))
        assert sol.nodes <= 10, (dive, sol.nodes)
    # three nodes prove infeasibility; a limit of three must not call that NODE_LIMIT
    m = PWLModel()
    x = m.add_variable(3.0, 7.0, name="x")
    z = m.add_pwl(x, [0.0, 5.0, 10.0], [10.0, 0.0, 10.0])
    m.add_constraint({z: 1.0}, lower=8.0)
    m.minimize({x: 1.0})
    full = solve_pwl(m, PWLOptions(batch_size=4))
    assert full.status == MIPStatus.INFEASIBLE
    at_limit = solve_pwl(m, PWLOptions(batch_size=4, node_limit=full.nodes))
    assert at_limit.status == MIPStatus.INFEASIBLE, at_limit.message


def test_a_full_node_store_says_so():
    m = PWLModel()
    x, y = m.add_variable(0.0, 8.0, name="x"), m.add_variable(0.0, 8.0, name="y")
    z = m.add_pwl(x, np.arange(9.0), [0, 5, 0, 5, 0, 5, 0, 5, 0])
    w = m.add_pwl(y, np.arange(9.0), [5, 0, 5, 0, 5, 0, 5, 0, 5])
    m.add_constraint({x: 1.0, y: 1.0}, lower=7.5, upper=7.5)
    m.maximize({z: 1.0, w: 1.0, x: 0.01})
    sol = solve_pwl(m, PWLOptions(batch_size=2, capacity=2, pump=False, repair="off"))
    assert sol.status == MIPStatus.INCOMPLETE  # not NODE_LIMIT: far fewer nodes than that
    assert "node store is full (capacity 2" in sol.message


@pytest.mark.parametrize("sense", ["min", "max"])
def test_a_complete_search_without_a_finite_bound_names_the_infinite_bounds(sense):
    # the free w and v make every safe bound infinite: only the two rows together confine
    # them (w >= x - 5 + |v|), and each row holds both, so neither row alone bounds either
    # (the implied bounds stay infinite). The message blamed the polishing LPs' tolerance
    # ("a leaf's polished bound fell short of the gap")
    m = PWLModel()
    x, y = m.add_variable(0.0, 10.0, name="x"), m.add_variable(0.0, 10.0, name="y")
    w = m.add_variable(-math.inf, math.inf, name="w")
    v = m.add_variable(-math.inf, math.inf, name="v")
    cost_x = m.add_pwl(x, [0, 4, 10], [0, 8, 9])
    cost_y = m.add_pwl(y, [0, 5, 10], [0, 3, 10])
    m.add_constraint({w: 1.0, v: 1.0, x: -1.0}, lower=-5.0)
    m.add_constraint({w: 1.0, v: -1.0, x: -1.0}, lower=-5.0)
    m.add_constraint({x: 1.0, y: 1.0}, lower=8.0)
    sign = 1.0 if sense == "min" else -1.0
    (m.minimize if sense == "min" else m.maximize)({w: sign, cost_x: sign, cost_y: sign})
    sol = solve_pwl(m, PWLOptions(batch_size=16))
    assert sol.status == MIPStatus.OPTIMAL
    assert sol.objective == pytest.approx(sign * 2.2, abs=1e-5)  # w = x - 5, x = 0, y = 8
    assert sol.bound == -sign * math.inf and sol.gap == math.inf
    assert "no finite bound" in sol.message and "no row confines" in sol.message
    assert "column 'w'" in sol.message and "column 'v'" in sol.message
    assert "polish" not in sol.message


@pytest.mark.parametrize("sense", ["min", "max"])
def test_a_free_variable_that_one_row_confines_keeps_the_bound_finite(sense):
    # w >= x - 5 alone bounds the free w (its implied bound, -5): the search proves the
    # optimum with a finite bound, where every safe bound was -inf before
    m = PWLModel()
    x, y = m.add_variable(0.0, 10.0, name="x"), m.add_variable(0.0, 10.0, name="y")
    w = m.add_variable(-math.inf, math.inf, name="w")
    cost_x = m.add_pwl(x, [0, 4, 10], [0, 8, 9])
    cost_y = m.add_pwl(y, [0, 5, 10], [0, 3, 10])
    m.add_constraint({w: 1.0, x: -1.0}, lower=-5.0)
    m.add_constraint({x: 1.0, y: 1.0}, lower=8.0)
    sign = 1.0 if sense == "min" else -1.0
    (m.minimize if sense == "min" else m.maximize)({w: sign, cost_x: sign, cost_y: sign})
    sol = solve_pwl(m, PWLOptions(batch_size=16))
    assert sol.status == MIPStatus.OPTIMAL, sol.message
    assert sol.objective == pytest.approx(sign * 2.2, abs=1e-5)
    assert math.isfinite(sol.bound) and sol.gap <= PWLOptions().relative_gap
    assert sign * sol.bound <= sign * sol.objective + 1e-9


def test_leaf_lps_stopped_before_their_tolerance_leave_the_search_incomplete():
    # with 64 PDHG iterations the leaf LPs of this small model do not converge: the search
    # cannot settle those leaves. It said NODE_LIMIT after 7 of the 1,000,000 nodes allowed.
    m = PWLModel()
    x, y = m.add_variable(0.0, 10.0, name="x"), m.add_variable(0.0, 10.0, name="y")
    cost_x = m.add_pwl(x, [0, 4, 10], [0, 8, 9])
    cost_y = m.add_pwl(y, [0, 5, 10], [0, 3, 10])
    m.add_constraint({x: 1.0, y: 1.0}, lower=8.0)
    m.minimize({cost_x: 1.0, cost_y: 1.0})
    lp = LPOptions(max_iterations=64, eval_every=32)
    sol = solve_pwl(m, PWLOptions(batch_size=4, lp=lp))
    assert sol.status == MIPStatus.INCOMPLETE, sol.message
    assert "stopped before their tolerance" in sol.message
    assert sol.nodes < PWLOptions().node_limit
    assert sol.bound <= 7.2 + 1e-6  # the optimum: the unsettled leaves keep safe bounds


def test_options_are_checked():
    model = random_model(0)
    for bad, match in (
        (PWLOptions(batch_size=0), "batch_size must be an integer >= 1"),
        # counts: not fractional (1.5 reached a slice mid-search), not bools, not strings
        (PWLOptions(node_limit=1.5), "node_limit must be an integer >= 1"),
        (PWLOptions(node_limit=None), "node_limit must be an integer >= 1"),
        (PWLOptions(batch_size=True), "batch_size must be an integer >= 1"),
        (PWLOptions(batch_size="16"), "batch_size must be an integer >= 1"),
        (PWLOptions(capacity=float("inf")), "capacity must be an integer >= 2"),
        (PWLOptions(evaluations=1.9), "evaluations must be an integer >= 1"),
        (PWLOptions(pump_seeds=-3), "pump_seeds must be an integer >= 0"),
        (PWLOptions(pump_iterations=0), "pump_iterations must be an integer >= 1"),
        (PWLOptions(seed=-1), "seed must be an integer >= 0"),
        # numbers: not bools (True was a gap of 1 and a time limit of 1 s), not strings
        (PWLOptions(relative_gap=True), "relative_gap must be >= 0 .a number, not a bool"),
        (PWLOptions(absolute_gap=float("nan")), "absolute_gap must be >= 0"),
        (PWLOptions(time_limit=True), "time_limit must be > 0 .or None. .a number, not"),
        (PWLOptions(time_limit="5"), "time_limit must be > 0"),
        (PWLOptions(dive_fraction=1.5), r"dive_fraction must lie in \[0, 1\]"),
        (PWLOptions(heuristic_fraction=1.0), r"heuristic_fraction must lie in \[0, 1\)"),
        (PWLOptions(polish_tolerance=True), "polish_tolerance must be finite and > 0"),
        (PWLOptions(progress_every=-1.0), "progress_every must be finite and >= 0"),
        (PWLOptions(pump="no"), "pump must be a bool"),
        (PWLOptions(progress=1), "progress must be a bool"),
        (PWLOptions(sos2_tolerance=float("nan")), r"sos2_tolerance must lie in \[0, 1\)"),
        (PWLOptions(sos2_tolerance=1.0), r"sos2_tolerance must lie in \[0, 1\)"),
        (PWLOptions(polish_tolerance=-1.0), "polish_tolerance must be finite and > 0"),
        (PWLOptions(split="left"), "split must be"),
        (PWLOptions(repair="always"), "repair must be"),
        (PWLOptions(store="gpu"), r"store must be one of \('auto', 'device', 'host'\), got 'gpu'"),
        (PWLOptions(time_limit=0.0), "time_limit must be > 0"),
    ):
        with pytest.raises(ValueError, match=match):
            solve_pwl(model, bad)
    with pytest.raises(TypeError, match="model must be a PWLModel"):
        solve_pwl("model")
    with pytest.raises(TypeError, match="lp must be an LPOptions"):
        solve_pwl(model, PWLOptions(lp={}))
    with pytest.raises(TypeError, match="options must be a PWLOptions"):
        solve_pwl(model, {"batch_size": 4})


@pytest.mark.parametrize("rule", ["segment", "mass"])
def test_repair_returns_an_sos2_point_when_its_pairs_are_feasible(rule):
    # repair narrows every set to one adjacent pair inside the node's intervals; whenever
    # that LP is feasible, its answer is SOS2 (support within the pair) and a PWL point
    from jaxopt_suite.lp import LP, LPOptions, Status, solve_lp
    from jaxopt_suite.pwl.bnb import _Solver, resolve_options

    rng = np.random.default_rng(3)
    checked = 0
    for seed in range(6):
        model = random_model(seed, functions=3, segments=5)
        comp = model.compile()
        solver = _Solver(model, comp, resolve_options(PWLOptions(repair=rule)))
        root = solve_lp(comp.lp)
        lo = np.zeros(comp.num_sets, np.int32)
        hi = (comp.set_size - 1).astype(np.int32)
        # a random node: each set's interval shrunk around a random position
        for s in range(comp.num_sets):
            a, b = sorted(rng.integers(0, comp.set_size[s], 2))
            lo[s], hi[s] = a, max(b, a + 1) if a + 1 < comp.set_size[s] else b
        job = solver._repair_job(lo, hi, root.x, None)
        if job is None:
            continue
        assert np.all(job.hi - job.lo <= 1) and np.all(job.lo >= lo) and np.all(job.hi <= hi)
        lower, upper = solver._bounds(job.lo, job.hi)
        lp = comp.lp
        restricted = LP(lp.c, lp.A, lp.row_lower, lp.row_upper, lower, upper)
        sol = solve_lp(restricted, LPOptions(tolerance=1e-8))
        if sol.status != Status.OPTIMAL:
            continue
        first, last, _, _ = sos2_structure(comp.lambdas(sol.x), 1e-9)
        assert np.all(last - first <= 1)
        assert model.check(comp.model_values(sol.x)) <= 1e-6
        checked += 1
    assert checked >= 2  # the random nodes must include feasible repairs


def test_a_solved_node_point_projected_onto_its_segments_is_an_incumbent(monkeypatch):
    # With a node limit of 1 only the root is solved, and its point spreads lambdas over
    # non-adjacent breakpoints; the repair and pump jobs it queues never run. Projected
    # onto the segments of its arguments and moved onto the rows, it is a PWL point.
    pytest.importorskip("highspy")
    from jaxopt_suite.pwl import bnb
    from jaxopt_suite.pwl.highs import solve_highs

    projected = []
    project = bnb._Solver._project
    monkeypatch.setattr(
        bnb._Solver, "_project", lambda self, x, t: projected.append(project(self, x, t))
    )
    found = 0
    for seed in range(4):
        model = random_model(seed, functions=5, segments=6)
        options = PWLOptions(batch_size=1, node_limit=1, pump=False)
        projected.clear()
        sol = solve_pwl(model, options)
        assert sol.nodes == 1
        if sol.x is None:
            continue
        # the projection ran when the root branched (else the root's point was SOS2 and
        # its polish made the incumbent)
        assert projected in ([], [True])
        found += projected == [True]
        # a lower bound on the optimum: HiGHS's MIP dual bound on the binary formulation,
        # solved to gap 0, so the optimum up to rounding (test_highs checks HiGHS against
        # enumeration); enumerating the 6**5 segment choices here took 10 s a model
        reference = solve_highs(model, relative_gap=0.0)
        assert reference.status == "optimal"
        exact = reference.bound
        value, violation = evaluate(model, sol.x)
        assert violation <= 1e-9 * (1 + np.abs(sol.x).max())
        assert value == pytest.approx(sol.objective, rel=1e-12, abs=1e-12)
        assert value >= exact - 1e-9 * max(1.0, abs(exact))
        assert sol.polished and sol.history[0][1] == 1  # found at the root, used to prune
    assert found >= 3


def test_projection_stops_after_its_failures(monkeypatch):
    # a projection that never meets the model is tried on PROJECTION_TRIES node points
    # only (each is a least-squares solve on the host), and makes no incumbent; without
    # repair jobs and the pump, and with every SOS2-feasible node point rejected, the
    # search finds none at all
    from jaxopt_suite.pwl import bnb

    monkeypatch.setattr(bnb, "PROJECTION_VIOLATION", -1.0)
    monkeypatch.setattr(bnb._Solver, "_repair_job", lambda *args: None)
    monkeypatch.setattr(bnb._Solver, "_offer", lambda *args: ("rejected", -math.inf))
    calls = []
    project = bnb._Solver._project
    monkeypatch.setattr(
        bnb._Solver, "_project", lambda self, x, t: calls.append(t) or project(self, x, t)
    )
    model = random_model(7, functions=5, segments=6)
    sol = solve_pwl(model, PWLOptions(batch_size=1, node_limit=40, pump=False))
    assert sol.nodes > bnb.PROJECTION_TRIES
    assert len(calls) == bnb.PROJECTION_TRIES
    assert sol.x is None and not sol.history


def test_no_polish_starts_after_the_time_limit(monkeypatch):
    # A round that processed several SOS2-feasible nodes polished each with an LP of up to
    # an eighth of the time limit, past the limit too (the pwl suite's portfolio_n100 ran
    # seconds over). A polish now gets the time left, and none starts once it is gone.
    from jaxopt_suite.pwl import bnb
    from jaxopt_suite.pwl.bnb import _Solver, resolve_options

    model = random_model(0, functions=3, segments=4)
    comp = model.compile()
    solver = _Solver(model, comp, resolve_options(PWLOptions(time_limit=10.0)))
    lo = np.zeros(comp.num_sets, np.int32)
    hi = np.ones(comp.num_sets, np.int32)
    x = np.zeros(comp.lp.num_cols)
    limits = []
    solve = bnb.solve_lp
    monkeypatch.setattr(
        bnb,
        "solve_lp",
        lambda lp, options, **kw: limits.append(options.time_limit) or solve(lp, options, **kw),
    )
    solver.deadline = time.perf_counter() + 0.5
    solver._polish(lo, hi, x, None)
    assert len(limits) == 1 and 0 < limits[0] <= 0.5  # the time left, not 10 / 8
    solver.deadline = time.perf_counter() - 1.0
    solver.polished.clear()  # (a remembered verdict needs no LP)
    assert solver._polish(lo, hi, x, None)[0] == "no time"
    assert len(limits) == 1  # no LP was started
    verdict, _ = solver._offer(lo, hi, x, None, 1.0, 11.0)
    assert verdict == "fallback" and solver.polish_failures == 0  # kept, not a failure
    assert solver.fallback[0] == 1.0
    # a search sets its deadline from its start and time limit
    deadlines = []
    polish = _Solver._polish
    monkeypatch.setattr(
        _Solver,
        "_polish",
        lambda self, *a, **k: deadlines.append(self.deadline) or polish(self, *a, **k),
    )
    monkeypatch.setattr(bnb, "PROJECTION_TRIES", 0)  # incumbents by polishing only
    before = time.perf_counter()
    solve_pwl(model, PWLOptions(time_limit=30.0))
    assert deadlines and all(before + 30.0 <= d <= time.perf_counter() + 30.0 for d in deadlines)


def test_rounds_near_the_time_limit_fit_in_it_and_none_starts_after_it(monkeypatch):
    from jaxopt_suite.lp.pdlp import LPBatch
    from jaxopt_suite.pwl import bnb

    model = random_model(2, functions=4, segments=6)
    advance = bnb.batch_advance
    # Evaluation periods of 0.1 s (node LPs that never meet their tolerance, and a sleep
    # per period when the round's status is read), 4 per round: a round started with less
    # than 0.4 s left ran past the limit by the rest of it.
    calls = []

    def slow_advance(batch, evaluations, **kwargs):
        calls.append((time.perf_counter(), evaluations))
        pending.append(0.1 * evaluations)  # done when the status is read, as jax's
        return advance(batch, evaluations, **kwargs)  # asynchronous dispatch does

    def slow_status(batch):
        while pending:
            time.sleep(pending.pop())
        return status.fget(batch)

    options = PWLOptions(
        time_limit=1.5,
        batch_size=4,
        evaluations=4,
        lp=LPOptions(tolerance=1e-30, max_iterations=10**9),
    )
    _compile(model, options)
    pending, status = [], LPBatch.status
    monkeypatch.setattr(bnb, "batch_advance", slow_advance)
    monkeypatch.setattr(LPBatch, "status", property(slow_status))
    begun = time.perf_counter()
    sol = solve_pwl(model, options)
    deadline = begun + 1.5
    assert sol.status == MIPStatus.TIME_LIMIT and len(calls) >= 3
    for start, evaluations in calls[1:]:  # (the first round has no measured period yet)
        assert evaluations == 1 or 0.1 * evaluations <= deadline - start + 0.05
    assert any(evaluations < 4 for _, evaluations in calls)
    assert all(start < deadline for start, _ in calls)
    # A round whose processing (polishes, repairs) ran past the limit started another
    # round: the clock was read before the processing.
    monkeypatch.undo()
    sol, starts, deadline, stalls = _stalled_search(monkeypatch, model, "process")
    assert stalls and sol.status in (MIPStatus.TIME_LIMIT, MIPStatus.OPTIMAL)
    assert all(start < deadline for start in starts)


def _compile(model, options, tries: int = 5) -> None:
    """Solves ``model`` until a solve compiles no new program, so that a timed solve after
    it runs compiled programs only. One solve was not enough on a slow host: a solve whose
    first round compiles past its time limit stops before the programs of later rounds (a
    new batch width, the refill with lent iterates), and the timed solve compiled them."""
    from jax._src.dispatch import BACKEND_COMPILE_EVENT

    compiles = []

    def count(event, duration, **kwargs):
        if event == BACKEND_COMPILE_EVENT:
            compiles.append(duration)

    jax.monitoring.register_event_duration_secs_listener(count)
    try:
        for _ in range(tries):
            compiles.clear()
            solve_pwl(model, options)
            if not compiles:
                return
    finally:
        jax.monitoring.unregister_event_duration_listener(count)
    raise AssertionError(f"solve_pwl still compiled after {tries} solves: {len(compiles)}")


def _stalled_search(monkeypatch, model, stall: str):
    """Solves ``model`` (1 s limit, batch 4; compiled first) with one step sleeping past
    the solver's deadline, ``stall``: ``"process"`` the first job processed, ``"refill"``
    the refill after the root's round. Returns the solution, the rounds' start times, the
    deadline (read in ``_process``) and how many times the step slept."""
    from jaxopt_suite.pwl import bnb
    from jaxopt_suite.pwl.bnb import _Solver

    options = PWLOptions(time_limit=1.0, batch_size=4)
    _compile(model, options)
    advance, refill, process = bnb.batch_advance, bnb.batch_refill, _Solver._process
    starts, refills, deadlines, stalls = [], [], [], []

    def past_deadline():
        stalls.append(1)
        time.sleep(max(0.0, deadlines[0] - time.perf_counter()) + 0.05)

    def recording_process(self, *args, **kwargs):
        deadlines.append(self.deadline)
        if stall == "process" and not stalls:
            past_deadline()
        return process(self, *args, **kwargs)

    def recording_refill(*args, **kwargs):
        refills.append(1)
        if stall == "refill" and deadlines and len(refills) == 2:
            past_deadline()
        return refill(*args, **kwargs)

    monkeypatch.setattr(
        bnb, "batch_advance", lambda *a, **k: starts.append(time.perf_counter()) or advance(*a, **k)
    )
    monkeypatch.setattr(bnb, "batch_refill", recording_refill)
    monkeypatch.setattr(_Solver, "_process", recording_process)
    return solve_pwl(model, options), starts, deadlines[0], stalls


def test_no_round_starts_after_the_limit_that_refilling_passed(monkeypatch):
    # resizing and refilling the batch take time (a compile of a new width, most): a refill
    # that ran past the limit started a round after it
    model = random_model(2, functions=4, segments=6)
    sol, starts, deadline, stalls = _stalled_search(monkeypatch, model, "refill")
    assert stalls and sol.status == MIPStatus.TIME_LIMIT
    assert all(start < deadline for start in starts)
    # the root's children, filled and never run, keep their bound (the root's) in the
    # result: without them the bound rose to the incumbent (the root's projection found)
    assert math.isfinite(sol.objective) and sol.gap > PWLOptions().relative_gap


def _polished(monkeypatch, model, lo, hi):
    """Polishes ``model``'s LP held to ``[lo, hi]`` from 0: ``(solver, (lower, upper),
    shapes of the LPs solved, objective, point, bound)``, the point checked to be a point
    of the LP's columns with the polish's value, its rows met to the polish tolerance."""
    from jaxopt_suite.pwl import bnb
    from jaxopt_suite.pwl.bnb import _Solver, resolve_options

    comp = model.compile()
    solver = _Solver(model, comp, resolve_options(PWLOptions()))
    solver.deadline = math.inf
    shapes = []
    solve = bnb.solve_lp
    monkeypatch.setattr(
        bnb, "solve_lp", lambda lp, o, **kw: shapes.append(lp.A.shape) or solve(lp, o, **kw)
    )
    state, objective, point, bound = solver._polish(lo, hi, np.zeros(comp.lp.num_cols), None)
    assert state == "optimal"
    lp = comp.lp
    assert point.shape == (lp.num_cols,)
    assert float(lp.c @ point + lp.objective_offset) == pytest.approx(objective, abs=1e-12)
    rows = lp.A @ point
    tolerance = 10 * solver.polish_options().tolerance
    assert np.all(rows >= lp.row_lower - tolerance * (1 + np.abs(lp.row_lower)))
    assert np.all(rows <= lp.row_upper + tolerance * (1 + np.abs(lp.row_upper)))
    return solver, solver._bounds(lo, hi), shapes, objective, point, bound


def _segment_polish(monkeypatch, model, lo, hi):
    """Polishes ``model``'s LP held to ``[lo, hi]`` (pairs or single breakpoints) from 0
    and checks it against HiGHS on the LP held to them; returns the solver and point."""
    solver, (lower, upper), shapes, objective, point, bound = _polished(monkeypatch, model, lo, hi)
    comp = solver.compiled
    assert shapes == [(comp.num_model_rows, comp.num_vars)]
    assert np.all(point[upper == 0] == 0)
    assert np.all(point >= lower) and np.all(point <= upper)  # the pairs' lambdas in [0, 1]
    # the point is an LP point held to the pairs: convexity and link rows to rounding
    U = comp.num_model_rows
    np.testing.assert_allclose((comp.lp.A @ point)[U:], comp.lp.row_lower[U:], rtol=0, atol=1e-12)
    tolerance = 10 * solver.polish_options().tolerance
    # the optimum of the LP held to the pairs, and a safe bound on it, close to it
    optimum = held_lp(comp)(upper, lower)
    assert math.isfinite(optimum)
    slack = tolerance * (1 + abs(optimum))
    assert objective == pytest.approx(optimum, abs=slack)
    assert optimum - slack <= bound <= optimum
    return solver, point


@pytest.mark.parametrize("single", [False, True])
def test_a_polish_held_to_pairs_solves_the_lp_of_their_segments(monkeypatch, single):
    # held to a pair (or one breakpoint), a set's lambdas are affine in its argument and
    # its convexity and link rows hold identically: the polish solves the LP over the
    # model's columns and rows alone
    lo = np.array([0, 2, 3], np.int32)
    hi = lo + np.array([1, 0 if single else 1, 1], np.int32)
    model = random_model(2, functions=3, segments=5)
    solver, point = _segment_polish(monkeypatch, model, lo, hi)
    if single:  # the argument sits at the breakpoint
        assert point[solver.x_lp_cols[1]] == solver.breaks[1, 2]


def test_a_segment_polish_with_pwl_values_in_rows_and_a_shared_argument(monkeypatch):
    # PWL values in rows (the rows' sides shift by the pieces' values at 0), two terms of
    # one argument whose pieces overlap, and an argument bound inside its breakpoints
    m = PWLModel("rows")
    x = m.add_variable(1.0, 9.0, name="x")
    y = m.add_variable(0.0, 10.0, name="y")
    f = m.add_pwl(x, [0, 3, 6, 10], [2, 5, 4, 9], name="f")
    g = m.add_pwl(x, [0, 4, 10], [1, 0, 6], name="g")
    h = m.add_pwl(y, [0, 5, 10], [0, 4, 5], name="h")
    m.add_constraint({f: 1.0, h: 2.0, y: -1.0}, lower=3.0, name="mix")
    m.add_constraint({x: 1.0, y: 1.0}, upper=12.0, name="cap")
    m.add_constraint({g: 1.0, f: -0.5, x: 0.2}, upper=-1.0, name="spread")
    m.minimize({f: 1.0, g: 2.0, h: -1.0, y: 0.3})
    # f on [3, 6], g on [0, 4] (so x in [3, 4]), h on [5, 10]; then x pinned by g's
    # breakpoint 4 and f's pair
    for lo, hi in (([1, 0, 1], [2, 1, 2]), ([1, 1, 1], [2, 1, 2])):
        solver, point = _segment_polish(monkeypatch, m, np.array(lo), np.array(hi))
        monkeypatch.undo()
        assert 3.0 - 1e-9 <= point[solver.x_lp_cols[0]] <= 4.0 + 1e-9


def test_pieces_of_one_argument_that_do_not_meet_are_infeasible_without_an_lp(monkeypatch):
    from jaxopt_suite.pwl import bnb
    from jaxopt_suite.pwl.bnb import _Solver, resolve_options

    m = PWLModel("shared")
    x = m.add_variable(0.0, 10.0, name="x")
    f = m.add_pwl(x, [0, 5, 10], [0, 5, 6], name="f")
    g = m.add_pwl(x, [0, 2, 10], [3, 0, 8], name="g")
    m.minimize({f: 1.0, g: 1.0})
    comp = m.compile()
    solver = _Solver(m, comp, resolve_options(PWLOptions()))
    solver.deadline = math.inf
    calls = []
    monkeypatch.setattr(bnb, "solve_lp", lambda *a, **k: calls.append(1))
    # f on [5, 10], g on [0, 2]: no x lies on both
    state, *_ = solver._polish(np.array([1, 0]), np.array([2, 1]), np.zeros(comp.lp.num_cols), None)
    assert state == "infeasible" and not calls
    # f on [5, 10], g on [2, 10]: they meet, and the LP puts x on both
    monkeypatch.undo()
    state, _, point, _ = solver._polish(
        np.array([1, 1]), np.array([2, 2]), np.zeros(comp.lp.num_cols), None
    )
    assert state == "optimal" and 5.0 - 1e-9 <= point[solver.x_lp_cols[0]] <= 10.0 + 1e-9


def test_a_polish_over_wider_intervals_solves_the_lp_without_the_lambdas_outside_them(
    monkeypatch,
):
    # the lambdas outside the intervals are fixed at 0 and add nothing to a row or the
    # objective; the polish solves the LP without them and returns the whole point
    from jaxopt_suite.lp import LP, solve_lp

    model = random_model(2, functions=3, segments=5)
    lo = np.array([0, 2, 3], np.int32)
    hi = lo + np.array([1, 2, 1], np.int32)  # set 1 over two segments
    solver, (lower, upper), shapes, objective, point, bound = _polished(monkeypatch, model, lo, hi)
    lp = solver.compiled.lp
    removed = (lower == 0) & (upper == 0)
    assert removed.sum() >= 3 * (5 + 1 - 2) - 1  # each set's lambdas outside its interval
    assert [n for _, n in shapes] == [lp.num_cols - removed.sum()]
    # the point is the solution scattered back (its value and rows checked by _polished)
    assert np.all(point[removed] == 0)
    # the same LP with every column: the same optimum, to the polish tolerance
    full = solve_lp(
        LP(lp.c, lp.A, lp.row_lower, lp.row_upper, lower, upper, lp.objective_offset),
        solver.polish_options()._replace(time_limit=None),
    )
    tolerance = 10 * solver.polish_options().tolerance * (1 + abs(float(full.objective)))
    assert objective == pytest.approx(float(full.objective), abs=tolerance)
    assert bound <= float(full.objective) + tolerance


def test_a_settled_polish_is_not_solved_again(monkeypatch):
    # a polish's LP is set by its intervals and tolerance alone: one that came out optimal
    # is remembered, with its objective and bound; one that did not finish, or came out
    # infeasible (PDLP's test is a heuristic), is solved again
    from jaxopt_suite.pwl import bnb
    from jaxopt_suite.pwl.bnb import _Solver, resolve_options

    model = random_model(2, functions=3, segments=5)
    comp = model.compile()
    solver = _Solver(model, comp, resolve_options(PWLOptions()))
    solver.deadline = math.inf
    solves = []
    solve = bnb.solve_lp
    monkeypatch.setattr(bnb, "solve_lp", lambda *a, **k: solves.append(1) or solve(*a, **k))
    lo = np.array([0, 2, 3], np.int32)
    hi = lo + 1
    first = solver._polish(lo, hi, np.zeros(comp.lp.num_cols), None)
    assert first[0] == "optimal" and first[2] is not None and len(solves) == 1
    again = solver._polish(lo.copy(), hi.copy(), np.ones(comp.lp.num_cols), None)
    assert again == (first[0], first[1], None, first[3]) and len(solves) == 1
    solver.deadline = time.perf_counter() - 1.0  # a remembered verdict needs no time
    assert solver._polish(lo, hi, np.zeros(comp.lp.num_cols), None)[0] == "optimal"
    solver.deadline = math.inf
    # a tighter polish of the same intervals is another LP
    tight = solver._polish(lo, hi, np.zeros(comp.lp.num_cols), None, tighter=100.0)
    assert tight[2] is not None and len(solves) == 2
    # other intervals are another LP; an unfinished or infeasible polish is not remembered
    unsettled = []
    for verdict in ("unfinished", "infeasible"):
        unsettled.clear()

        def unsettled_polish(self, *args, _verdict=verdict):
            unsettled.append(1)
            return _verdict, math.nan, None, -math.inf

        monkeypatch.setattr(_Solver, "_solve_polish", unsettled_polish)
        for _ in range(2):
            assert solver._polish(lo, hi + np.array([0, 0, 1]), None, None)[0] == verdict
        assert len(unsettled) == 2
        assert solver._polish(lo, hi, None, None)[0] == "optimal" and len(unsettled) == 2


def test_an_offer_of_pairs_polished_before_leaves_the_incumbent(monkeypatch):
    # offered again (from another node, another warm start), pairs polished before give
    # their remembered bound and no point: the incumbent only falls, so what their polish
    # could give it, it gave the first time
    from jaxopt_suite.pwl.bnb import _Solver, resolve_options

    model = random_model(2, functions=3, segments=5)
    comp = model.compile()
    solver = _Solver(model, comp, resolve_options(PWLOptions()))
    solver.deadline = math.inf
    lo = np.array([0, 2, 3], np.int32)
    hi = lo + 1
    x = np.zeros(comp.lp.num_cols)
    verdict, bound = solver._offer(lo, hi, x, None, -math.inf, 0.0)
    assert verdict == "accepted" and math.isfinite(solver.incumbent)
    incumbent, point = solver.incumbent, solver.incumbent_x.copy()
    reports = []
    monkeypatch.setattr(_Solver, "_report", lambda self, *a: reports.append(1))
    solver.incumbent = math.inf  # even where it would beat the incumbent
    assert solver._offer(lo, hi, x + 0.5, None, -math.inf, 1.0) == ("accepted", bound)
    assert not reports and solver.incumbent == math.inf
    solver.incumbent = incumbent
    np.testing.assert_array_equal(solver.incumbent_x, point)


def test_a_repair_job_is_made_once_for_its_pairs():
    # a repair job's LP is set by its pairs: pairs repaired or polished before make none
    from jaxopt_suite.pwl.bnb import _digest, _Solver, resolve_options

    model = random_model(2, functions=3, segments=5)
    comp = model.compile()
    solver = _Solver(model, comp, resolve_options(PWLOptions()))
    x = np.zeros(comp.lp.num_cols)
    lo, hi = solver.root
    job = solver._repair_job(lo, hi, x, None)
    assert job is not None and np.all(job.hi - job.lo <= 1)
    assert solver._repair_job(lo, hi, x, None) is None
    # another point, in other pairs: a job, unless those pairs were polished
    other = solver._repair_job(lo, hi, x + 1e-3, None)
    elsewhere = x.copy()
    elsewhere[solver.x_lp_cols] = solver.breaks[np.arange(comp.num_sets), -1]
    pairs = solver._repair_job(lo, hi, elsewhere, None)
    assert pairs is not None and not np.array_equal(pairs.lo, job.lo)
    assert other is None or not np.array_equal(other.lo, job.lo)
    solver.repairs.clear()
    solver.polished[_digest(pairs.lo, pairs.hi)] = (1.0, 0.0)
    assert solver._repair_job(lo, hi, elsewhere, None) is None
    assert solver._repair_job(lo, hi, x, None) is not None
    # a pump job whose point has no lambda mass outside its pairs sends them to repair,
    # through the same record
    solver.repairs.clear()
    pump = solver._pump_job(lo, hi, x, None, 0)
    assert pump.kind == "pump"
    sent = solver._pump_next(pump, x)
    assert sent.kind == "repair" and np.array_equal(sent.lo, pump.pairs)
    assert solver._pump_next(pump, x) is None  # those pairs are repaired once
    assert solver._repair_job(lo, hi, x, None) is None  # a node's repair of them too


@pytest.mark.parametrize("absolute_gap", [1e-6, math.inf])
def test_a_projection_is_not_repeated_for_the_same_pairs(monkeypatch, absolute_gap):
    # once polishes stop finishing, the same pairs come back from node after node; their
    # projection is tried again only for an LP value a gap below the one tried (with an
    # infinite gap tolerance, as the search for a first point has, only once)
    from jaxopt_suite.pwl.bnb import _Solver, resolve_options

    model = random_model(0, functions=3, segments=4)
    comp = model.compile()
    options = resolve_options(PWLOptions(absolute_gap=absolute_gap))
    solver = _Solver(model, comp, options)
    solver.deadline = math.inf
    solver.polish_failures = 2  # polishing has stopped
    calls = []
    outcome = [False]
    monkeypatch.setattr(_Solver, "_project", lambda self, x, t: calls.append(t) or outcome[0])
    # the pairs a projection repairs in: here set by x[0]
    monkeypatch.setattr(
        _Solver,
        "_projection_pairs",
        lambda self, x: (np.full(comp.num_sets, int(x[0]), np.int32),) * 2,
    )
    lo = np.zeros(comp.num_sets, np.int32)
    hi = np.ones(comp.num_sets, np.int32)
    x, other = np.zeros(comp.lp.num_cols), np.eye(1, comp.lp.num_cols).ravel()
    gap = max(options.relative_gap, absolute_gap)  # the slack at values about 1
    assert solver._offer(lo, hi, x, None, 1.0, 0.0)[0] == "fallback"
    assert solver._offer(lo, hi, x, None, 1.0 - 0.5 * options.relative_gap, 1.0)[0] == "fallback"
    assert calls == [0.0]  # within the gap of the tried value: not tried again
    assert solver.fallback[0] == 1.0 - 0.5 * options.relative_gap  # the fallback takes it
    # another point, from another box, with the same pairs: the same entry
    same_pairs = x.copy()
    same_pairs[1] = 0.5
    assert solver._offer(lo, hi + 1, same_pairs, None, 1.0, 1.5)[0] == "fallback"
    assert calls == [0.0]
    outcome[0] = True
    drop = 2 * gap if math.isfinite(gap) else 1e300
    verdict = solver._offer(lo, hi, x, None, 1.0 - drop, 2.0)[0]
    if math.isinf(gap):  # never again
        assert verdict == "fallback" and calls == [0.0]
        return
    assert verdict == "projected" and calls == [0.0, 2.0]
    # other pairs are tried; a met projection's verdict is kept for its pairs
    assert solver._offer(lo, hi, other, None, 1.0, 3.0)[0] == "projected"
    outcome[0] = False
    assert solver._offer(lo, hi, x, None, 1.0 - drop, 4.0)[0] == "projected"
    assert calls == [0.0, 2.0, 3.0]


def _pinned_models():
    """Feasible models whose only feasible argument is an end of a PWL term's breakpoints
    (the objective pushing inwards): the root relaxation's feasible set is one point."""
    a = PWLModel("pinned_bound")
    x = a.add_variable(0, 0, name="x")  # e.g. a closed arc
    a.minimize({a.add_pwl(x, [0, 10], [0, -5], name="f"): 1.0})
    b = PWLModel("pinned_row")
    x = b.add_variable(-10, 10, name="x")
    b.add_constraint({x: 1.0}, 2, 2)
    b.minimize({b.add_pwl(x, [2, 5], [4, -4], name="f"): 1.0})
    c = PWLModel("touching_bounds")
    x = c.add_variable(-2, 4, name="x")
    c.maximize({c.add_pwl(x, [-3, -2], [-1, -4], name="f"): 1.0})
    return [(a, 0.0), (b, 4.0), (c, -4.0)]


@pytest.mark.parametrize("index", range(3))
@pytest.mark.parametrize("x64", [True, False])
def test_a_pwl_argument_pinned_at_a_breakpoint_end_is_feasible(index, x64):
    """The dual iterates of such a root run off along a ray whose exact objective is 0; its
    rounding error was taken for a positive ray objective, and the feasible model came back
    INFEASIBLE with a false proof (float32 and float64)."""
    model, optimum = _pinned_models()[index]
    with jax.enable_x64(x64):
        sol = solve_pwl(model)
    assert sol.status == MIPStatus.OPTIMAL, sol.message
    np.testing.assert_allclose(sol.objective, optimum, atol=1e-4)


def test_every_bound_in_the_history_is_a_bound():
    """An incumbent found while a round's stopped node jobs were still being read recorded
    the bound of the store and the jobs in flight only; the stopped nodes had left both, so
    the recorded bound fell to the incumbent, above the optimum (here -16.476 against
    -24.714 at the second entry)."""
    m = PWLModel()
    x0, x1, x2, x3 = (m.add_variable(lo, hi) for lo, hi in [(-2, 1), (-3, 5), (0, 4), (-1, 5)])
    f = m.add_pwl(x2, [-4, 0, 1, 3, 4], [4, -6, 2, 1, -5])
    g = m.add_pwl(x3, [-7, -4, -3, 2, 4], [5, -2, -1, -2, 2])
    h = m.add_pwl(x2, [-4, -2, -1, 6], [2, 3, -4, 1])
    m.add_constraint({g: 1, x0: -3, x3: 2, x1: -2, f: 2}, 3, 3)
    m.minimize({x0: -1, x1: 3, x3: -3, f: 1, g: 1, h: -3}, -1)
    optimum = brute_force(m)
    sol = solve_pwl(m, PWLOptions(batch_size=8))
    assert sol.status == MIPStatus.OPTIMAL
    np.testing.assert_allclose(sol.objective, optimum, atol=1e-4)
    assert len(sol.history) >= 2
    for _, _, incumbent, bound in sol.history:
        assert bound <= optimum + 1e-6 <= incumbent + 2e-6


def _objective_times(model, factor, plus=0.0):
    """``model`` with its objective (terms and constant) multiplied by ``factor``, and
    ``plus`` added to its constant."""
    data = model.to_dict()
    objective = data["objective"]
    objective["terms"] = {k: v * factor for k, v in objective["terms"].items()}
    objective["constant"] = objective["constant"] * factor + plus
    return PWLModel.from_dict(data)


def test_objective_scale():
    from jaxopt_suite.pwl.bnb import MAX_OBJECTIVE_SCALE, objective_scale, resolve_options

    options = resolve_options(PWLOptions())  # node tolerance 1e-4, gaps 1e-4 and 1e-6
    # a large optimum: PDLP's gap test is relative already
    assert objective_scale(7805.0, options) == 1.0
    assert objective_scale(-7805.0, options) == 1.0
    # 0.0245 (the pwl suite's portfolios): the floor 1e-4 / scale is a tenth of 1e-4 * 0.0245
    assert objective_scale(0.0245, options) == pytest.approx(1e-4 / (0.1 * 1e-4 * 0.0245))
    # near 0 the absolute gap is what the search closes
    assert objective_scale(0.0, options) == pytest.approx(1e-4 / (0.1 * 1e-6))
    assert objective_scale(math.nan, options) == 1.0
    exact = options._replace(absolute_gap=0.0)
    assert objective_scale(0.0, exact) == MAX_OBJECTIVE_SCALE
    assert objective_scale(1e-12, exact) == MAX_OBJECTIVE_SCALE


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_search_does_not_depend_on_the_objectives_units(seed):
    # The node LPs stop on PDLP's test |p - d| <= tol (1 + |p| + |d|), whose 1 set an
    # absolute floor of 1e-4 on their gaps: with the objective in units a thousand times
    # larger (optima near 0.007), the safe bounds trailed by far more than the relative gap
    # and seed 1 took 105 nodes where the model took 7. The search now scales the
    # objective once the root is solved (bnb.objective_scale).
    model = random_model(seed, functions=5, segments=6)
    small = _objective_times(model, 1e-3)
    options = PWLOptions(batch_size=8, node_limit=300, absolute_gap=1e-12)
    exact = brute_force(model)
    plain, scaled = solve_pwl(model, options), solve_pwl(small, options)
    for sol, factor in ((plain, 1.0), (scaled, 1e-3)):
        assert_gap_closed(sol, options)
        assert sol.objective / factor == pytest.approx(exact, rel=1e-4)
        assert sol.bound / factor <= exact + 1e-4 * abs(exact)
        value, violation = evaluate(model, sol.x)
        assert violation <= 1e-6 and value == pytest.approx(sol.objective / factor, rel=1e-9)
        # history and bound in the model's units, not the search's
        assert sol.history[-1][2] == pytest.approx(sol.objective, rel=1e-9)
        assert all(b <= o + 1e-12 for _, _, o, b in sol.history)
    assert scaled.nodes <= 2 * plain.nodes + 4


@pytest.mark.parametrize("seed", [1, 2])
def test_an_unpolished_repair_point_that_meets_the_model_is_an_incumbent(seed, monkeypatch):
    # Where polishing LPs do not finish (the pwl suite's larger portfolios: a 1e-6 polish
    # takes longer than its share of the time limit), a repair job's SOS2 point was kept
    # only as a fallback answer, and after the root's projection no point became an
    # incumbent: seed 1 stopped at the node limit with -6.722 against -7.148. Such a point,
    # moved onto the rows within its pairs, now becomes the incumbent when it meets the
    # model to rounding.
    from jaxopt_suite.pwl import bnb

    monkeypatch.setattr(
        bnb._Solver, "_polish", lambda self, *a, **k: ("unfinished", math.nan, None, -math.inf)
    )
    model = random_model(seed, functions=5, segments=6)
    options = PWLOptions(batch_size=8, node_limit=300)
    sol = solve_pwl(model, options)
    exact = brute_force(model)
    assert sol.status == MIPStatus.OPTIMAL, sol.message
    assert sol.objective == pytest.approx(exact, rel=1e-4)
    value, violation = evaluate(model, sol.x)
    assert violation <= 1e-9 * (1 + np.abs(sol.x).max())
    assert value == pytest.approx(sol.objective, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("plus", [-0.005, 0.005])
def test_a_scaled_search_keeps_the_objectives_constant(plus):
    # Once the search scales c (not 1 here: optima near 0.002), node LPs need the constant
    # scaled too (each slot's own, batch_refill's objective_offset). When the batch added
    # the unscaled constant of the LP it started with to every slot, node objectives and
    # bounds lacked (scale - 1) times it: with -0.005 the node bounds came out too high and
    # the search stopped OPTIMAL above the optimum; with +0.005 too low.
    model = random_model(1, functions=5, segments=6)
    small = _objective_times(model, 1e-3, plus)
    options = PWLOptions(batch_size=8, node_limit=300, absolute_gap=1e-12)
    exact = 1e-3 * brute_force(model) + plus
    sol = solve_pwl(small, options)
    assert_gap_closed(sol, options)
    assert sol.objective == pytest.approx(exact, rel=1e-4)
    assert sol.bound <= exact + 1e-4 * abs(exact)
    assert all(b <= exact + 1e-4 * abs(exact) for _, _, _, b in sol.history)


@pytest.mark.parametrize("fraction", [0.25, 0.1])
def test_a_batch_of_one_keeps_the_heuristic_share(fraction):
    # with one slot, every queued heuristic took it before any node (a cap of "at least one
    # slot"): 47% of the LP jobs were heuristics at batch_size=1 against the documented 25%,
    # which halved B=1's nodes/s. The share now holds over the run's slot-rounds, within
    # the rounds of the one heuristic that may be running when it is reached
    from jaxopt_suite.pwl import instances

    model = instances.build(instances.spec_by_name("transportation_10x10_k4_s0"))
    options = PWLOptions(batch_size=1, node_limit=120, heuristic_fraction=fraction)
    solution = solve_pwl(model, options)
    assert solution.status == MIPStatus.NODE_LIMIT and solution.rounds > 500
    assert 0.0 < solution.heuristic_share <= fraction + 0.03


@pytest.mark.parametrize("seed", range(3))
def test_with_one_sos2_set_an_infeasible_repair_tries_every_pair_the_node_allows(seed):
    # minimise x with f(x) >= t and x >= a: the root's repair pair (segment or mass rule)
    # can be infeasible while another segment holds the answer (test_pwl_in_a_constraint's
    # model: x = 7.2 on the fourth segment, repair tried the second or the first); a repair
    # whose pairs came out infeasible made no other, so repair found no point there
    from jaxopt_suite.lp import solve_lp
    from jaxopt_suite.pwl import bnb

    rng = np.random.default_rng(seed)
    segments = 7
    m = PWLModel()
    x = m.add_variable(0.0, 10.0, name="x")
    breaks = np.linspace(0.0, 10.0, segments + 1)
    f = m.add_pwl(x, breaks, rng.uniform(0.0, 5.0, segments + 1))
    m.add_constraint({f: 1.0}, lower=3.0)
    m.add_constraint({x: 1.0}, lower=float(rng.uniform(1.0, 4.0)))
    m.minimize({x: 1.0})
    comp = m.compile()
    solver = bnb._Solver(m, comp, bnb.resolve_options(PWLOptions()))
    root = solve_lp(comp.lp)
    lo, hi = np.zeros(1, np.int32), (comp.set_size - 1).astype(np.int32)
    job = solver._repair_job(lo, hi, root.x, None)
    alternatives = solver._repair_alternatives(job)
    assert {int(j.lo[0]) for j in [job, *alternatives]} == set(range(segments))
    assert all(int(j.hi[0]) == int(j.lo[0]) + 1 for j in alternatives)
    # nearest first; alternatives make none of their own, and pairs are tried once
    assert [abs(int(j.lo[0]) - int(job.lo[0])) for j in alternatives] == sorted(
        abs(int(j.lo[0]) - int(job.lo[0])) for j in alternatives
    )
    assert solver._repair_alternatives(alternatives[0]) == []
    assert solver._repair_alternatives(job) == []
    # a node interval narrower than the set (a fresh solver: those pairs were tried): only
    # its pairs, all of them
    fresh = bnb._Solver(m, comp, bnb.resolve_options(PWLOptions()))
    narrow = fresh._repair_job(np.array([2], np.int32), np.array([5], np.int32), root.x, None)
    pairs = {int(j.lo[0]) for j in [narrow, *fresh._repair_alternatives(narrow)]}
    assert pairs == {2, 3, 4}


def _coupled_model(seed, functions=3, segments=6):
    """Minimise the sum of the arguments with each PWL output held above a level, and the
    outputs of neighbours above another, the arguments over random floors and under a
    budget. The relaxation meets the rows with the upper envelope, mixing breakpoints far
    apart, so the pairs a repair takes from its point are often infeasible in several sets
    at once: a PWL point then needs another pair in each (the one-set model of
    test_with_one_sos2_set_an_infeasible_repair_tries_every_pair_the_node_allows, coupled)."""
    rng = np.random.default_rng(seed)
    m = PWLModel(f"coupled{seed}")
    xs, zs = [], []
    for i in range(functions):
        x = m.add_variable(0.0, 10.0, name=f"x{i}")
        breaks = np.linspace(0.0, 10.0, segments + 1)
        z = m.add_pwl(x, breaks, rng.uniform(0.0, 5.0, segments + 1))
        m.add_constraint({z: 1.0}, lower=float(rng.uniform(1.0, 3.5)))
        m.add_constraint({x: 1.0}, lower=float(rng.uniform(0.5, 3.0)))
        xs.append(x)
        zs.append(z)
    for i in range(functions - 1):
        m.add_constraint({zs[i]: 1.0, zs[i + 1]: 1.0}, lower=float(rng.uniform(3.0, 6.5)))
    m.add_constraint({x: 1.0 for x in xs}, upper=float(rng.uniform(12.0, 24.0)))
    m.minimize({x: 1.0 for x in xs})
    return m


def test_with_several_sets_a_repair_dive_finds_a_point_whenever_the_node_holds_one():
    # a repair's pairs, and every pair one move away, can all be infeasible while the node
    # holds a PWL point that needs other pairs in several sets ("beyond_repair"): the
    # alternatives of test_with_one_sos2_set_an_infeasible_repair_tries_every_pair_the_node_
    # allows do not reach it. The dive searches every pair choice its LPs do not rule out;
    # here its jobs are solved one by one to a tight tolerance, and whether it ends at a
    # PWL point is compared with HiGHS on every choice of one pair per set in the node
    from jaxopt_suite.lp import LP, Status, solve_lp
    from jaxopt_suite.pwl import bnb

    rng = np.random.default_rng(100)
    tight = LPOptions(tolerance=1e-9, max_iterations=200_000)
    outcomes = {"found": 0, "none": 0, "beyond_repair": 0}
    for trial in range(48):
        model = _coupled_model(trial)
        comp = model.compile()
        lp = comp.lp
        solver = bnb._Solver(model, comp, bnb.resolve_options(PWLOptions()))
        solve = held_lp(comp)
        # the root, or a random node: each set's interval a random run of at least three
        # breakpoints
        lo = np.zeros(comp.num_sets, np.int32)
        hi = (comp.set_size - 1).astype(np.int32)
        for s in range(comp.num_sets if trial % 2 else 0):
            a = int(rng.integers(0, comp.set_size[s] - 2))
            lo[s], hi[s] = a, int(rng.integers(a + 2, comp.set_size[s]))

        def restricted(lo_, hi_, solver=solver, lp=lp):
            lower, upper = solver._bounds(lo_, hi_)
            return LP(lp.c, lp.A, lp.row_lower, lp.row_upper, lower, upper), upper

        node_lp, _ = restricted(lo, hi)
        node = solve_lp(node_lp, tight)
        if node.status != Status.OPTIMAL:
            continue
        # HiGHS on every choice of one pair per set inside the node
        choices = itertools.product(*[range(lo[s], hi[s]) for s in range(comp.num_sets)])
        exists = any(
            math.isfinite(solve(restricted(np.array(p), np.array(p) + 1)[1])) for p in choices
        )
        first, last, _, _ = sos2_structure(comp.lambdas(node.x), 1e-9)
        if np.all(last - first <= 1):
            continue  # the node's own point is SOS2: nothing to repair
        repair = solver._repair_job(lo, hi, node.x, None)
        pairs_ok = repair is not None and solve_lp(restricted(repair.lo, repair.hi)[0], tight)
        if repair is not None and pairs_ok.status == Status.PRIMAL_INFEASIBLE:
            alternatives = solver._repair_alternatives(repair._replace(origin=(lo, hi)))
            if exists and all(
                solve_lp(restricted(j.lo, j.hi)[0], tight).status != Status.OPTIMAL
                for j in alternatives
            ):
                outcomes["beyond_repair"] += 1
        job, point, solves = solver._dive_start(lo, hi, node.x, None), None, 0
        while job is not None:
            assert np.all(job.lo >= lo) and np.all(job.hi <= hi)
            sol = solve_lp(restricted(job.lo, job.hi)[0], tight)
            solves += 1
            outcome, job = solver._dive_step(job, sol.status, np.asarray(sol.x))
            if outcome == "point":
                point = np.asarray(sol.x)
                break
        assert solves <= bnb.REPAIR_DIVE
        assert (point is not None) == exists, trial
        if point is not None:
            first, last, _, _ = sos2_structure(comp.lambdas(point), 1e-9)
            assert np.all(last - first <= 1)
            assert model.check(comp.model_values(point)) <= 1e-6
            outcomes["found"] += 1
        else:
            outcomes["none"] += 1
    # (48 models, this key: 31 points found, 3 nodes without one, 7 found only by the dive)
    assert outcomes["found"] >= 20 and outcomes["none"] >= 1, outcomes
    assert outcomes["beyond_repair"] >= 3, outcomes


def test_a_dive_stops_at_its_budget_and_runs_inside_the_search(monkeypatch):
    from jaxopt_suite.lp import solve_lp
    from jaxopt_suite.pwl import bnb

    model = _coupled_model(9)
    comp = model.compile()
    solver = bnb._Solver(model, comp, bnb.resolve_options(PWLOptions()))
    lo, hi = np.zeros(comp.num_sets, np.int32), (comp.set_size - 1).astype(np.int32)
    root = solve_lp(comp.lp)
    job = solver._dive_start(lo, hi, np.asarray(root.x), None)
    assert job is not None and job.left == bnb.REPAIR_DIVE - 1
    # every remaining pair of the fixed set is tried while LPs are left, then none
    s, a, b, untried = job.stack[-1]
    assert (a, b) == (lo[s], hi[s]) and len(untried) == b - a - 1
    assert solver._dive_next(job.lo, job.hi, job.stack, 0, None) is None
    nxt = solver._dive_next(job.lo, job.hi, job.stack, 1, None)
    assert nxt.left == 0 and nxt.lo[s] == untried[0] and nxt.hi[s] == untried[0] + 1
    # in solve_pwl: this model's root repair is infeasible, and the dive's jobs run
    steps = []
    step = bnb._Solver._dive_step
    monkeypatch.setattr(
        bnb._Solver, "_dive_step", lambda self, *a: steps.append(1) or step(self, *a)
    )
    sol = solve_pwl(model, PWLOptions(batch_size=8, pump=False, node_limit=400))
    assert steps and sol.status == MIPStatus.OPTIMAL
    assert sol.objective == pytest.approx(brute_force(model), rel=1e-4)


def test_a_node_whose_bound_the_lp_tolerance_leaves_short_of_the_cutoff_is_solved_again():
    """A node (not a leaf) is queued to be solved again ten times tighter, instead of
    settled or branched, exactly when the cutoff lies within its LP's spread (objective
    against safe bound) above its bound, its LP ended OPTIMAL, and the tighter tolerance
    stays at or above the polish tolerance; the queued job keeps the node, its point and
    its LP's objective and bound, holds its bound in the search's bound until it is
    solved, and may take RESOLVE_COST times the iterations of the node's LP, or of the
    mean node LP where that is more."""
    from jaxopt_suite.lp import Status
    from jaxopt_suite.pwl.bnb import RESOLVE_COST, TIGHTEN_STEP, _Job, _Solver, resolve_options

    model = random_model(0)
    comp = model.compile()
    options = resolve_options(PWLOptions(lp=LPOptions(tolerance=1e-4)))  # polish 1e-6
    solver = _Solver(model, comp, options)
    n, m = comp.lp.num_cols, comp.lp.num_rows
    x, y = np.full(n, 0.5), np.full(m, -0.25)
    lo, hi = solver.root
    job = _Job("node", 3, lo.copy(), hi.copy(), 9.0, 2, None, None)

    def tighten(st, objective, db, point=x, node=job, iterations=640):
        return solver._tighten(node, st, objective, db, 9.99, point, y, iterations)

    assert not tighten(Status.OPTIMAL, 10.0, 9.99)  # no incumbent: nothing to prune against
    solver.incumbent = 10.01  # cutoff 10.01 - 1e-4 * 10.01 = 10.009
    cutoff = solver._cutoff()
    assert not tighten(Status.OPTIMAL, 10.0, 9.99)  # cutoff - bound 0.019 > spread 0.01
    assert not tighten(Status.ITERATION_LIMIT, 10.0, 9.98)
    assert not tighten(Status.OPTIMAL, 10.0, 9.98, point=np.full(n, np.nan))
    leaf = job._replace(hi=np.minimum(lo + 1, hi))  # a pair (or a segment) per set
    assert not tighten(Status.OPTIMAL, 10.0, 9.98, node=leaf)
    assert not solver.tighten
    # the spread may lie either way round (a point a little infeasible has the lower
    # objective): 0.02 >= 0.019 both times
    assert tighten(Status.OPTIMAL, 10.0, 9.98)
    assert tighten(Status.OPTIMAL, 9.97, 9.99)
    queued = solver.tighten[0]
    assert queued.kind == "node" and queued.again and queued.tighter == TIGHTEN_STEP
    assert queued.bound == 9.99 and queued.depth == 2 and queued.warm[0] is x
    assert queued.previous == (10.0, 9.98) and queued.cap == math.ceil(RESOLVE_COST * 640)
    np.testing.assert_array_equal(queued.lo, lo)
    assert solver.store.count() == 0 and solver.bound() == 9.99 < cutoff
    # the cap follows the mean node LP where that took more
    solver.node_iterations = [30_000, 10]
    assert tighten(Status.OPTIMAL, 10.0, 9.98, iterations=64)
    assert solver.tighten[-1].cap == math.ceil(RESOLVE_COST * 3000)
    # tighter still, down to the polish tolerance (1e-4 / 100 = 1e-6), and no further; the
    # cap stays the node's
    assert tighten(Status.OPTIMAL, 10.0, 9.97, node=queued, iterations=5000)
    again = solver.tighten[-1]
    assert again.tighter == TIGHTEN_STEP**2 and again.cap == queued.cap
    assert again.previous == (10.0, 9.97)
    assert not tighten(Status.OPTIMAL, 10.0, 9.98, node=again)


def test_a_re_solve_stopped_at_its_cap_branches_the_node_from_the_solve_before():
    """A node solved again whose LP ends short of its tolerance (its cap reached) is
    branched as its solve before would have been: from that solve's point, under the better
    of the two safe bounds, not queued again, not counted as a node."""
    from types import SimpleNamespace

    from jaxopt_suite.lp import Status, solve_lp
    from jaxopt_suite.pwl.bnb import _Job, _Solver, resolve_options

    model = random_model(0)
    comp = model.compile()
    options = resolve_options(PWLOptions())
    solver = _Solver(model, comp, options)
    lo, hi = solver.root
    root = solve_lp(comp.lp, options.lp)
    assert root.status == Status.OPTIMAL
    x, y = np.asarray(root.x), np.asarray(root.y)
    first, last, _, _ = sos2_structure(solver._lambda_table(x), options.sos2_tolerance)
    assert np.any(last - first >= 2)  # the point is not SOS2-feasible: the node branches
    db = float(root.dual_bound)
    solver.incumbent = db + 1.0  # far above: the node is branched
    job = _Job("node", -1, lo.copy(), hi.copy(), db - 0.5, 0, None, (x, y))
    job = job._replace(tighter=10.0, cap=128, previous=(float(root.objective), db))
    n, m = comp.lp.num_cols, comp.lp.num_rows

    def capped(dual_bound):
        return SimpleNamespace(
            status=np.array([int(Status.ITERATION_LIMIT)]),
            x=np.full((1, n), np.nan),  # not a point the node may use
            y=np.full((1, m), np.nan),
            objective=np.array([np.nan]),
            dual_bound=np.array([dual_bound]),
            iterations=np.array([128]),
        )

    for later_bound, want in ((db - 1.0, db - 0.5), (db + 0.25, db + 0.25)):
        solver.nodes, solver.store = 5, type(solver.store)(16, solver.S)
        assert solver._process(job, capped(later_bound), 0, 0.0) is None
        assert solver.nodes == 5 and not solver.tighten
        rows = np.flatnonzero(solver.store.open)
        assert rows.size == 2 and np.all(solver.store.bound[rows] == want)
        # the children split one set of the solve before's point, and start from it
        for i in rows:
            assert solver.warm[int(solver.store.warm[i])][0] is x
        hi_l, lo_r = solver.store.hi[rows[0]], solver.store.lo[rows[1]]
        split = np.flatnonzero((hi_l != hi) | (lo_r != lo))
        assert split.size == 1 and hi_l[split[0]] == lo_r[split[0]]


def test_solving_nodes_again_tighter_closes_a_gap_that_loose_node_lps_cannot(monkeypatch):
    """Node LPs at 1e-3 against a gap of 1e-4, on the suite's 30-asset portfolio: the
    search that solves nodes near the cutoff again, tighter, proves the optimum (HiGHS's)
    within 400 nodes; without it, the search branches on such nodes and stops at the node
    limit with the gap open."""
    from jaxopt_suite.pwl import instances
    from jaxopt_suite.pwl.bnb import _Solver
    from jaxopt_suite.pwl.highs import solve_highs

    model = instances.build(instances.spec_by_name("portfolio_n30_t48_k4_s0"))
    options = PWLOptions(batch_size=4, lp=LPOptions(tolerance=1e-3), node_limit=400)
    tightened, again = [], []
    tighten, process = _Solver._tighten, _Solver._process

    def counted(self, *args):
        tightened.append(tighten(self, *args))
        return tightened[-1]

    def processed(self, job, sol, row, elapsed):
        if job.kind == "node" and job.again:
            again.append((int(sol.iterations[row]), job.cap))
        return process(self, job, sol, row, elapsed)

    monkeypatch.setattr(_Solver, "_tighten", counted)
    monkeypatch.setattr(_Solver, "_process", processed)
    sol = solve_pwl(model, options)
    assert_gap_closed(sol, options)
    assert sum(tightened) >= 1 and sol.nodes < 400
    # each re-solve stopped at its cap, or the first evaluation at or past it
    every = options.lp.eval_every
    assert again and all(it <= -(-cap // every) * every for it, cap in again)
    exact = solve_highs(model, formulation="cc", time_limit=60.0)
    assert exact.status == "optimal"
    assert abs(sol.objective - exact.objective) <= 1e-4 * abs(exact.objective)
    assert sol.bound <= exact.objective + 1e-9
    monkeypatch.setattr(_Solver, "_tighten", lambda self, *args: False)
    loose = solve_pwl(model, options)
    assert loose.status == MIPStatus.NODE_LIMIT and loose.gap > options.relative_gap


@pytest.mark.parametrize(("seed", "functions", "segments"), [(0, 4, 6), (3, 6, 8)])
def test_a_search_with_the_device_store_runs_as_with_the_host_store(seed, functions, segments):
    """Both stores select the same nodes, so a search (node-limited, no time limit) runs
    the same: nodes, incumbent history, objective, bound and point (one search proves
    its optimum in 29 nodes, the other stops at the node limit of 60)."""
    model = random_model(seed, functions=functions, segments=segments)
    options = PWLOptions(batch_size=4, node_limit=60)
    host = solve_pwl(model, options._replace(store="host"))
    device = solve_pwl(model, options._replace(store="device"))
    assert host.nodes == device.nodes and host.nodes >= 29
    assert host.status == device.status
    assert host.objective == device.objective and host.bound == device.bound
    np.testing.assert_array_equal(host.x, device.x)
    assert [h[1:] for h in host.history] == [h[1:] for h in device.history]
