"""The PWL instance generators and the 43-instance suite."""

from __future__ import annotations

import math
from collections import Counter

import jax
import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import linprog

from jaxopt_suite.lp import LP, LPOptions, Status, solve_lp
from jaxopt_suite.pwl import PWLModel
from jaxopt_suite.pwl import instances as inst

FAMILIES = tuple(inst.FAMILIES)


def smallest(family: str) -> inst.InstanceSpec:
    return min((s for s in inst.SUITE if s.family == family), key=lambda s: s.pwl_terms)


def slopes(term) -> np.ndarray:
    return np.diff(term.values) / np.diff(term.breakpoints)


def rows_by_name(model: PWLModel) -> dict[str, dict]:
    return {r["name"]: r for r in model.to_dict()["constraints"]}


def bounds_by_name(model: PWLModel) -> dict[str, tuple[float, float]]:
    return {
        v["name"]: (float(v["lower"]), float(v["upper"]))
        for v in model.to_dict()["variables"]
        if "pwl" not in v
    }


def point(model: PWLModel, values: dict[str, float]) -> np.ndarray:
    """All model-variable values from the given ones (others 0), ``z = f(x)`` filled in."""
    names = [v["name"] for v in model.to_dict()["variables"]]
    v = np.array([values.get(n, 0.0) for n in names])
    for t in model.terms:
        v[t.z.index] = t(v[t.x.index])
    return v


def highs(lp: LP) -> float:
    """The LP's optimum (in its own sense) by HiGHS."""
    eq = lp.row_lower == lp.row_upper
    up, lo = ~eq & np.isfinite(lp.row_upper), ~eq & np.isfinite(lp.row_lower)
    res = linprog(
        lp.c,
        A_ub=sp.vstack([lp.A[up], -lp.A[lo]]),
        b_ub=np.concatenate([lp.row_upper[up], -lp.row_lower[lo]]),
        A_eq=lp.A[eq],
        b_eq=lp.row_lower[eq],
        bounds=np.column_stack([lp.var_lower, lp.var_upper]),
        method="highs",
    )
    assert res.status == 0, res.message
    return lp.objective_sign * (res.fun + lp.objective_offset)


# -- the suite ---------------------------------------------------------------------------


def test_suite_names_families_and_spread():
    names = [s.name for s in inst.SUITE]
    assert len(inst.SUITE) == 43 and len(set(names)) == 43
    counts = Counter(s.family for s in inst.SUITE)
    assert set(counts) == set(FAMILIES) and all(10 <= c <= 12 for c in counts.values())
    terms = [s.pwl_terms for s in inst.SUITE]
    assert min(terms) == 10 and max(terms) == 2000
    assert all(10 <= t <= 2000 for t in terms)
    segments = [s.segments for s in inst.SUITE]
    assert min(segments) == 4 and max(segments) == 32
    classes = Counter(inst.size_class(s) for s in inst.SUITE)
    assert set(classes) == {"small", "mid", "large"}
    for s in inst.SUITE:
        assert " " not in s.name and s.name.endswith(f"_k{s.segments}_s{s.kwargs['seed']}")
        assert inst.spec_by_name(s.name) is s
    assert len(set(inst.SUITE)) == 43  # hashable


def test_size_class_thresholds():
    by_terms = {s.pwl_terms: inst.size_class(s) for s in inst.SUITE}
    assert by_terms[90] == "small" and by_terms[100] == "mid"
    assert by_terms[536] == "mid" and by_terms[700] == "large"


def test_every_instance_builds_with_its_terms_segments_and_clean_names():
    for s in inst.SUITE:
        m = inst.build(s)
        assert m.name == s.name
        assert len(m.terms) == s.pwl_terms
        assert {t.segments for t in m.terms} == {s.segments}
        data = m.to_dict()
        names = [v["name"] for v in data["variables"]] + [r["name"] for r in data["constraints"]]
        assert len(set(names)) == len(names)
        assert not any(c.isspace() for n in names for c in n)
        bounds = bounds_by_name(m)
        for t in m.terms:  # PWL arguments have finite bounds equal to the breakpoint range
            lo, hi = bounds[t.x.name]
            assert math.isfinite(lo) and math.isfinite(hi)
            assert (lo, hi) == (t.breakpoints[0], t.breakpoints[-1])
            assert np.all(np.diff(t.breakpoints) > 0)


def test_generation_is_deterministic_and_seeded():
    for family in FAMILIES:
        s = smallest(family)
        assert inst.build(s).to_dict() == inst.build(s).to_dict()
        other = dict(s.kwargs, seed=s.kwargs["seed"] + 1)
        a = inst.FAMILIES[family](**s.kwargs).to_dict()
        b = inst.FAMILIES[family](**other).to_dict()
        assert a["name"] != b["name"]
        a.pop("name"), b.pop("name")
        assert a != b


def test_bad_sizes_are_rejected():
    with pytest.raises(ValueError, match="segments"):
        inst.transportation(2, 3, 1)
    with pytest.raises(TypeError, match="assets"):
        inst.portfolio(2.5, 10, 4)
    with pytest.raises(ValueError, match="cannot cover"):
        inst.workforce(100, 3, 4)
    with pytest.raises(ValueError, match="unknown family"):
        inst.build(inst.InstanceSpec("x", "knapsack", {"segments": 4, "seed": 0}))


@pytest.mark.parametrize("name", [smallest(f).name for f in FAMILIES] + ["portfolio_n80_t60_k6_s0"])
def test_json_round_trip_gives_the_same_lp(tmp_path, name):
    spec = inst.spec_by_name(name)
    path = inst.save(spec, tmp_path)
    assert path.name == f"{name}.json"
    assert inst.load_spec(path) == spec
    a, b = inst.build(spec).compile().lp, inst.load(path).compile().lp
    assert a.A.shape == b.A.shape and (a.A != b.A).nnz == 0
    for field in ("c", "row_lower", "row_upper", "var_lower", "var_upper"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    assert (a.objective_offset, a.objective_sign) == (b.objective_offset, b.objective_sign)
    assert list(a.row_names) == list(b.row_names) and list(a.col_names) == list(b.col_names)


def test_numpy_integer_sizes_are_saved(tmp_path):
    # the generators accept NumPy integers; json.dumps could not write them
    sizes = {"sources": np.int64(2), "sinks": 3, "segments": np.int32(2), "seed": 0}
    spec = inst.InstanceSpec("t", "transportation", sizes)
    path = inst.save(spec, tmp_path)
    assert inst.load_spec(path).kwargs == {"sources": 2, "sinks": 3, "segments": 2, "seed": 0}


# -- LP relaxations ----------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_smallest_relaxation_solves_optimal(family):
    model = inst.build(smallest(family))
    assert model.sense == ("max" if family == "resource_allocation" else "min")
    lp = model.compile().lp
    assert lp.objective_sign == (-1 if family == "resource_allocation" else 1)
    reference = highs(lp)
    # float32 PDLP stalls near 1e-5 relative KKT on some of these, so 1e-6 runs in float64
    with jax.enable_x64(True):
        sol = solve_lp(lp, LPOptions(tolerance=1e-6))
    assert sol.status == Status.OPTIMAL, sol.message
    value = lp.objective_sign * sol.objective
    assert value == pytest.approx(reference, rel=1e-4, abs=1e-6)
    sol32 = solve_lp(lp, LPOptions(tolerance=1e-4))  # the default dtype
    assert sol32.status == Status.OPTIMAL, sol32.message


# -- structure and feasibility witnesses -------------------------------------------------


def test_portfolio_structure_and_witness():
    spec = smallest("portfolio")
    m = inst.build(spec)
    T, n = spec.kwargs["scenarios"], spec.kwargs["assets"]
    rows = rows_by_name(m)
    assert sum(r.startswith("dev") for r in rows) == 2 * T
    budget = rows["budget"]
    assert budget["lower"] == budget["upper"] == 1.0 and len(budget["terms"]) == 2 * n
    assert set(budget["terms"].values()) == {1.0}
    for t in m.terms:  # concave increasing from 0: positive, strictly decreasing slopes
        s = slopes(t)
        assert t.values[0] == 0.0 and np.all(s > 0) and np.all(np.diff(s) < 0)
    # the greedy max-return portfolio is feasible, so rho <= its return
    rbar = rows["return"]["terms"]
    remaining, x = 1.0, {}
    for t in sorted(m.terms, key=lambda t: -rbar[t.x.name]):
        spend = t.breakpoints + t.values
        if spend[-1] <= remaining:
            x[t.x.name], remaining = t.breakpoints[-1], remaining - spend[-1]
        else:
            x[t.x.name] = float(np.interp(remaining, spend, t.breakpoints))
            break
    ret = sum(rbar[j] * v for j, v in x.items())
    assert ret >= rows["return"]["lower"]
    dev = {}  # d_t = |sum_j (r_tj - rbar_j) x_j|, read off the row d_t + sum_j ... >= 0
    for t in range(T):
        terms = rows[f"devm{t}"]["terms"]
        dev[f"d{t}"] = abs(sum(c * x.get(k, 0.0) for k, c in terms.items() if k != f"d{t}"))
    assert m.check(point(m, {**x, **dev})) <= 1e-9


def test_workforce_structure_and_witness():
    spec = smallest("workforce")
    m = inst.build(spec)
    P, S = spec.kwargs["periods"], spec.kwargs["shifts"]
    rows = rows_by_name(m)
    bounds = bounds_by_name(m)
    for t in m.terms:
        s = slopes(t)
        assert t.values[0] == 0.0 and np.all(s > 0)
        if t.name.startswith("hirecost"):  # economies of scale: concave
            assert np.all(np.diff(s) < 0)
        else:  # convex, or a steep call-out piece followed by convex pieces
            assert t.name.startswith("otcost")
            assert np.all(np.diff(s[1:]) > 0)
    # staff every shift at the largest demand it covers, hiring the shortfall
    need = {f"staff{s}": 0.0 for s in range(S)}
    for t in range(P):
        row = rows[f"cover{t}"]
        shifts = [k for k in row["terms"] if k.startswith("staff")]
        assert shifts, f"period {t} is covered by no shift"
        for k in shifts:
            need[k] = max(need[k], row["lower"])
    hires = {
        f"hire{s}": max(0.0, need[f"staff{s}"] - rows[f"hiring{s}"]["upper"]) for s in range(S)
    }
    assert all(hires[k] <= bounds[k][1] for k in hires)
    assert m.check(point(m, {**need, **hires})) <= 1e-12


def test_resource_allocation_structure_and_witness():
    spec = smallest("resource_allocation")
    m = inst.build(spec)
    assert m.sense == "max"
    rows = rows_by_name(m)
    bounds = bounds_by_name(m)
    for t in m.terms:  # S-shaped: increasing, slopes rise then fall
        s = slopes(t)
        assert t.values[0] == 0.0 and np.all(s > 0)
        signs = np.sign(np.diff(s))
        peak = int(np.argmax(s))
        assert np.all(signs[:peak] > 0) and np.all(signs[peak:] < 0)
    assert rows["budget"]["upper"] < sum(b[1] for b in bounds.values())
    # spread each group's floor over the group in proportion to the bounds
    x = {}
    for name, row in rows.items():
        if name.startswith("group") and row["lower"] != "-inf":
            total = sum(bounds[k][1] for k in row["terms"])
            x.update({k: row["lower"] * bounds[k][1] / total for k in row["terms"]})
    assert x and m.check(point(m, x)) <= 1e-12


def test_transportation_structure_and_witness():
    spec = smallest("transportation")
    m = inst.build(spec)
    n_src, n_dst = spec.kwargs["sources"], spec.kwargs["sinks"]
    rows = rows_by_name(m)
    bounds = bounds_by_name(m)
    supply = [rows[f"supply{i}"]["upper"] for i in range(n_src)]
    demand = []
    for j in range(n_dst):
        row = rows[f"demand{j}"]
        assert row["lower"] == row["upper"] >= 1.0  # equality rows
        assert row["terms"] == {f"x{i}_{j}": 1.0 for i in range(n_src)}
        demand.append(row["lower"])
    assert sum(supply) >= sum(demand)
    for i in range(n_src):
        for j in range(n_dst):
            assert bounds[f"x{i}_{j}"] == (0.0, min(supply[i], demand[j]))
    for t in m.terms:  # concave increasing
        s = slopes(t)
        assert t.values[0] == 0.0 and np.all(s > 0) and np.all(np.diff(s) < 0)
    # north-west corner rule
    x, s, d, i, j = {}, list(supply), list(demand), 0, 0
    while j < n_dst:
        q = min(s[i], d[j])
        x[f"x{i}_{j}"] = q
        s[i] -= q
        d[j] -= q
        if d[j] == 0:
            j += 1
        else:
            i += 1
    assert m.check(point(m, x)) <= 1e-12


def test_export_writes_json_and_mps(tmp_path):
    from jaxopt_suite.lp import read_mps
    from jaxopt_suite.pwl.highs import binary_formulation

    spec = min(inst.SUITE, key=lambda s: s.pwl_terms)
    paths = inst.export(tmp_path, [spec])
    assert sorted(p.suffix for p in paths) == [".json", ".mps"]
    lp = read_mps(tmp_path / f"{spec.name}.mps")
    expected, _ = binary_formulation(inst.build(spec), "cc")
    assert lp.A.shape == expected.A.shape and int(lp.integer.sum()) == int(expected.integer.sum())
    again = inst.load(tmp_path / f"{spec.name}.json")
    assert again.to_dict()["variables"] == inst.build(spec).to_dict()["variables"]
