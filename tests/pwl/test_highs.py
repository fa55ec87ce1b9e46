"""The HiGHS baseline: binary SOS2 formulations (CC, Log), their MPS output, and solves
checked against brute-force enumeration of segments."""

import functools
import itertools
import math

import numpy as np
import pytest

pytest.importorskip("highspy")
from scipy.optimize import linprog  # noqa: E402

from jaxopt_suite.lp import read_mps  # noqa: E402
from jaxopt_suite.pwl import PWLModel  # noqa: E402
from jaxopt_suite.pwl.highs import (  # noqa: E402
    HighsResult,
    binary_formulation,
    gray_code,
    log_branch_sets,
    solve_highs,
    write_pwl_mps,
)


def random_model(seed: int, maximize: bool = False) -> PWLModel:
    """2-4 nonconvex PWL terms of 2-8 segments whose arguments have ranges that cut
    segments (so the lambda LP alone is not exact), a budget row, a row mixing z and x."""
    rng = np.random.default_rng(seed)
    terms = int(rng.integers(2, 5))
    segments = rng.integers(2, 9, size=terms)
    while np.prod(segments) > 300:  # keep the brute force small
        segments[np.argmax(segments)] -= 1
    m = PWLModel(f"random{seed}")
    xs, zs, middle = [], [], 0.0
    for i, k in enumerate(segments):
        lo = float(rng.uniform(0.5, 6.0))
        hi = lo + float(rng.uniform(1.5, 4.0))
        xs.append(m.add_variable(lo, hi, name=f"x{i}"))
        middle += (lo + hi) / 2
        inner = np.sort(rng.choice(np.arange(1, 40), size=int(k) - 1, replace=False)) / 4.0
        d = np.concatenate([[0.0], inner, [10.0]])
        f = rng.normal(0.0, 5.0, size=int(k) + 1)
        zs.append(m.add_pwl(xs[-1], d, f, name=f"f{i}"))
    m.add_constraint({x: 1.0 for x in xs}, lower=middle - 0.5, upper=middle, name="budget")
    m.add_constraint({zs[0]: 1.0, zs[1]: -1.0, xs[0]: 0.5}, upper=3.0, name="mix")
    objective = {z: float(rng.uniform(0.5, 2.0)) for z in zs}
    objective.update({x: float(rng.normal(0.0, 0.5)) for x in xs})
    if maximize:
        m.maximize(objective, constant=1.25)
    else:
        m.minimize(objective, constant=-0.75)
    return m


def lp_arrays(lp):
    """``lp`` for ``scipy.optimize.linprog``: (A_ub, b_ub, A_eq, b_eq)."""
    A = lp.A.toarray()
    eq = lp.row_lower == lp.row_upper
    up = ~eq & np.isfinite(lp.row_upper)
    lo = ~eq & np.isfinite(lp.row_lower)
    A_ub = np.vstack([A[up], -A[lo]])
    b_ub = np.concatenate([lp.row_upper[up], -lp.row_lower[lo]])
    return A_ub, b_ub, A[eq], lp.row_lower[eq]


def lp_optimum(lp, upper=None) -> float:
    """The LP optimum in the model's sense (``+inf`` / ``-inf`` when infeasible)."""
    upper = lp.var_upper if upper is None else upper
    res = linprog(
        lp.c, *lp_arrays(lp), bounds=list(zip(lp.var_lower, upper, strict=True)), method="highs"
    )
    assert res.status in (0, 2), res.message
    return lp.objective_sign * (res.fun + lp.objective_offset if res.status == 0 else math.inf)


@functools.cache
def brute_force(seed: int, maximize: bool) -> float:
    """The optimum (model sense) of ``random_model(seed, maximize)``: one LP per choice of
    a segment for each term, the lambdas off that segment fixed to 0."""
    comp = random_model(seed, maximize).compile()
    lp = comp.lp
    best = -math.inf if maximize else math.inf
    for choice in itertools.product(*[range(int(s) - 1) for s in comp.set_size]):
        upper = lp.var_upper.copy()
        for start, size, seg in zip(comp.set_start, comp.set_size, choice, strict=True):
            off = np.setdiff1d(np.arange(size), [seg, seg + 1])
            upper[start + off] = 0.0
        value = lp_optimum(lp, upper)
        best = max(best, value) if maximize else min(best, value)
    return best


CASES = [(0, False), (1, False), (2, False), (3, False), (8, False), (4, True)]


def test_random_models_need_the_binaries():
    """The lambda LP alone is strictly looser than the optimum on every test model."""
    for seed, maximize in CASES:
        relaxed = lp_optimum(random_model(seed, maximize).compile().lp)
        optimum = brute_force(seed, maximize)
        assert math.isfinite(optimum)
        gap = relaxed - optimum if maximize else optimum - relaxed
        assert gap > 0.01 * (1 + abs(optimum)), (seed, maximize, relaxed, optimum)


@pytest.mark.parametrize("formulation", ["cc", "log"])
@pytest.mark.parametrize("seed,maximize", CASES)
def test_matches_brute_force(seed, maximize, formulation):
    model = random_model(seed, maximize)
    expected = brute_force(seed, maximize)
    result = solve_highs(model, formulation=formulation, relative_gap=0.0)
    assert isinstance(result, HighsResult)
    assert result.status == "optimal"
    assert result.objective == pytest.approx(expected, rel=1e-6, abs=1e-6)
    assert result.bound == pytest.approx(expected, rel=1e-6, abs=1e-6)
    assert result.x is not None and model.check(result.x) <= 1e-6
    assert model.objective_value(result.x) == pytest.approx(expected, rel=1e-6, abs=1e-6)
    assert 0.0 <= result.first_incumbent_seconds <= result.seconds
    assert result.threads == 1 and result.nodes >= 0


@pytest.mark.parametrize("formulation", ["cc", "log"])
def test_infeasible_random_model(formulation):
    """Seed 5's mixed row cannot hold on any segment choice (brute force agrees)."""
    assert brute_force(5, False) == math.inf
    result = solve_highs(random_model(5), formulation=formulation)
    assert result.status == "infeasible"
    assert result.x is None and result.objective == math.inf
    # the minimum of an infeasible model is +inf, and so is its bound (HiGHS left +inf under
    # one formulation and -inf under the other on seed 7)
    assert result.bound == math.inf
    assert solve_highs(random_model(7), formulation=formulation).bound == math.inf


def test_gray_code():
    for K in range(1, 34):
        code = gray_code(K)
        assert code.shape == (K, math.ceil(math.log2(K)))
        assert len({tuple(c) for c in code}) == K
        if K > 1:
            assert np.all(np.abs(np.diff(code, axis=0)).sum(axis=1) == 1)
        L, R = log_branch_sets(K)
        for j, (left, right) in enumerate(zip(L, R, strict=True)):
            for k in range(K + 1):
                touching = code[[s for s in (k - 1, k) if 0 <= s < K], j]
                assert (k in left) == bool(np.all(touching == 1))
                assert (k in right) == bool(np.all(touching == 0))


def one_term(K: int, formulation: str):
    """A one-term model, its binary LP, and the LP's SOS2 rows/columns."""
    m = PWLModel()
    x = m.add_variable(0.0, float(K), name="x")
    m.add_pwl(x, np.arange(K + 1.0), np.cos(np.arange(K + 1.0)), name="f")
    m.minimize({x: 1.0})
    lp, comp = binary_formulation(m, formulation)
    return lp, comp


def sos2_rows_hold(lp, comp, lam, y) -> bool:
    """Whether the added rows hold at lambda ``lam`` and binaries ``y``."""
    m0, n0 = comp.lp.num_rows, comp.lp.num_cols
    v = np.zeros(lp.num_cols)
    v[comp.set_start[0] : comp.set_start[0] + comp.set_size[0]] = lam
    v[n0:] = y
    a = lp.A[m0:] @ v
    return bool(np.all(a <= lp.row_upper[m0:] + 1e-12) and np.all(a >= lp.row_lower[m0:] - 1e-12))


@pytest.mark.parametrize("K", range(1, 10))
def test_log_rows_allow_exactly_one_segment(K):
    lp, comp = one_term(K, "log")
    code = gray_code(K)
    bits = code.shape[1]
    assert lp.num_cols - comp.lp.num_cols == bits and lp.integer.sum() == bits
    assert lp.num_rows - comp.lp.num_rows == 2 * bits
    for i in range(K):  # any lambda on segment i's breakpoints, with segment i's code
        for t in (0.0, 0.3, 0.5, 1.0):
            lam = np.zeros(K + 1)
            lam[i], lam[i + 1] = 1.0 - t, t
            assert sos2_rows_hold(lp, comp, lam, code[i])
    codes = {tuple(c): i for i, c in enumerate(code)}
    for y in itertools.product((0, 1), repeat=bits):
        for k in range(K + 1):  # a single breakpoint is allowed exactly by its segments
            lam = np.eye(K + 1)[k]
            allowed = y in codes and k in (codes[y], codes[y] + 1)
            assert sos2_rows_hold(lp, comp, lam, np.array(y)) == allowed
        for a in range(K + 1):  # two non-adjacent breakpoints: violated for every y
            for b in range(a + 2, K + 1):
                for t in (0.5, 0.1):
                    lam = np.zeros(K + 1)
                    lam[a], lam[b] = t, 1.0 - t
                    assert not sos2_rows_hold(lp, comp, lam, np.array(y))


@pytest.mark.parametrize("K", range(1, 8))
def test_cc_rows_allow_exactly_one_segment(K):
    lp, comp = one_term(K, "cc")
    nb = K if K > 1 else 0
    assert lp.num_cols - comp.lp.num_cols == nb and lp.integer.sum() == nb
    for y in itertools.product((0, 1), repeat=nb):
        for k in range(K + 1):
            lam = np.eye(K + 1)[k]
            allowed = K == 1 or (sum(y) == 1 and k in (y.index(1), y.index(1) + 1))
            assert sos2_rows_hold(lp, comp, lam, np.array(y)) == allowed


@pytest.mark.parametrize("formulation", ["cc", "log"])
def test_original_columns_and_rows_are_kept(formulation):
    model = random_model(2)
    lp, comp = binary_formulation(model, formulation)
    m0, n0 = comp.lp.num_rows, comp.lp.num_cols
    np.testing.assert_array_equal(lp.A[:m0, :n0].toarray(), comp.lp.A.toarray())
    assert lp.A[:m0, n0:].nnz == 0
    np.testing.assert_array_equal(lp.c[:n0], comp.lp.c)
    np.testing.assert_array_equal(lp.c[n0:], 0.0)
    assert not lp.integer[:n0].any() and lp.integer[n0:].all()
    np.testing.assert_array_equal(lp.var_lower[n0:], 0.0)
    np.testing.assert_array_equal(lp.var_upper[n0:], 1.0)
    assert lp.col_names[:n0] == comp.lp.col_names and len(set(lp.col_names)) == lp.num_cols
    assert len(set(lp.row_names)) == lp.num_rows
    assert lp.objective_offset == comp.lp.objective_offset
    assert lp.objective_sign == comp.lp.objective_sign


@pytest.mark.parametrize("formulation", ["cc", "log"])
@pytest.mark.parametrize("maximize", [False, True])
def test_mps_round_trip(tmp_path, formulation, maximize):
    model = random_model(3, maximize)
    lp, _ = binary_formulation(model, formulation)
    path = tmp_path / "model.mps"
    write_pwl_mps(model, path, formulation)
    back = read_mps(path)
    assert back.A.shape == lp.A.shape
    np.testing.assert_allclose(back.A.toarray(), lp.A.toarray())
    for field in ("c", "row_lower", "row_upper", "var_lower", "var_upper"):
        np.testing.assert_allclose(getattr(back, field), getattr(lp, field), err_msg=field)
    np.testing.assert_array_equal(back.integer, lp.integer)
    # the minimisation form is written: a maximisation comes back negated, sign +1
    assert back.objective_offset == pytest.approx(lp.objective_offset)
    assert back.objective_sign == 1


def _named_model(x="x", y="y", row="r"):
    m = PWLModel("m")
    xv = m.add_variable(0, 10, name=x)
    yv = m.add_variable(1, 3, name=y)
    z = m.add_pwl(xv, [0, 3, 5, 10], [0, 8, 2, 3], name="f")
    m.add_constraint({xv: 1, yv: 1}, lower=6, upper=12, name=row)
    m.minimize({z: 1.0, yv: 0.5}, constant=2.0)
    return m


@pytest.mark.parametrize(
    "names", [{}, {"row": "RHS"}, {"row": "RNG"}, {"x": "BND"}, {"y": "BND"}, {"x": "RHS"}]
)
def test_highs_reads_the_exported_mps_as_the_model(tmp_path, names):
    # HiGHS takes the RHS / RANGES / BOUNDS set names as optional and decided by the row and
    # column names: a row named RHS read as 0.5 (every side 0), a column named BND as 5.0
    import highspy

    model = _named_model(**names)
    path = tmp_path / "named.mps"
    write_pwl_mps(model, path)
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    assert h.readModel(str(path)) == highspy.HighsStatus.kOk
    h.run()
    expected = solve_highs(model).objective
    assert expected == pytest.approx(4.5)
    assert h.getInfo().objective_function_value == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize("name", ["NAME", "OBJSENSE", "QCMATRIX"])
def test_column_names_highs_takes_for_headers_are_refused(tmp_path, name):
    with pytest.raises(ValueError, match=f"column name {name!r} cannot be written"):
        write_pwl_mps(_named_model(x=name), tmp_path / "header.mps")


@pytest.mark.parametrize("formulation", ["cc", "log"])
def test_infeasible(formulation):
    m = PWLModel()
    x = m.add_variable(0.0, 10.0, name="x")
    z = m.add_pwl(x, [0, 3, 5, 10], [0, 8, 2, 3], name="f")
    m.add_constraint({z: 1.0}, lower=9.0)  # f <= 8 everywhere
    m.minimize({x: 1.0})
    result = solve_highs(m, formulation=formulation)
    assert result.status == "infeasible"
    assert result.x is None and result.objective == math.inf
    assert math.isnan(result.first_incumbent_seconds)


def test_unbounded_models_report_an_infinite_objective():
    # with no binaries HiGHS said 'unbounded' but the objective was the value of whatever
    # feasible point it held (1.0)
    m = PWLModel()
    x = m.add_variable(0.0, 10.0, name="x")
    y = m.add_variable(0.0, math.inf, name="y")
    z = m.add_pwl(x, [0.0, 10.0], [1.0, 3.0], name="f")
    m.minimize({z: 1.0, y: -1.0})
    result = solve_highs(m)
    assert result.status == "unbounded"
    assert result.objective == -math.inf and result.bound == -math.inf
    m.maximize({z: 1.0, y: 1.0})
    result = solve_highs(m)
    assert result.status == "unbounded"
    assert result.objective == math.inf and result.bound == math.inf


def test_threads_and_time_limit_options():
    model = random_model(0)
    first = solve_highs(model, threads=2, time_limit=30.0)
    second = solve_highs(model, threads=1)  # a different pool size must still run
    assert first.threads == 2 and second.threads == 1
    assert first.status == second.status == "optimal"
    assert first.objective == pytest.approx(second.objective, rel=1e-4)


def test_errors(tmp_path):
    model = random_model(0)
    for call in (
        lambda: binary_formulation(model, "sos2"),
        lambda: solve_highs(model, formulation="incremental"),
        lambda: write_pwl_mps(model, tmp_path / "x.mps", formulation="CC"),
    ):
        with pytest.raises(ValueError, match="'cc', 'log'|cc, log"):
            call()
    with pytest.raises(TypeError, match="PWLModel"):
        binary_formulation(model.compile().lp)
    with pytest.raises(TypeError, match="PWLModel"):
        solve_highs(model.to_dict())
    # HiGHS took a NaN time limit or gap as none, and 1.7 threads (or True) ran on one
    for kwargs, match in (
        ({"time_limit": math.nan}, r"time_limit must be > 0 \(or None\)"),
        ({"time_limit": True}, "time_limit must be > 0 .or None. .a number, not a bool"),
        ({"relative_gap": math.nan}, "relative_gap must be >= 0"),
        ({"relative_gap": -1e-4}, "relative_gap must be >= 0"),
        ({"threads": 1.7}, "threads .0: HiGHS chooses. must be an integer >= 0"),
        ({"threads": True}, "threads .0: HiGHS chooses. must be an integer >= 0"),
    ):
        with pytest.raises(ValueError, match=match):
            solve_highs(model, **kwargs)


def test_single_segment_terms_need_no_binaries():
    m = PWLModel()
    x = m.add_variable(0.0, 4.0, name="x")
    y = m.add_variable(0.0, 4.0, name="y")
    fx = m.add_pwl(x, [0, 4], [1, 3], name="fx")
    fy = m.add_pwl(y, [0, 4], [5, -3], name="fy")
    m.add_constraint({x: 1.0, y: 1.0}, upper=5.0)
    m.maximize({fx: 1.0, fy: 1.0}, constant=2.0)
    for formulation in ("cc", "log"):
        lp, comp = binary_formulation(m, formulation)
        assert lp.num_cols == comp.lp.num_cols and not lp.integer.any()
        result = solve_highs(m, formulation=formulation)
        assert result.status == "optimal" and result.gap == 0.0 and result.nodes == 0
        # best: x = 4 (fx = 3), y = 0 (fy = 5): 3 + 5 + 2
        assert result.objective == pytest.approx(10.0) and result.bound == pytest.approx(10.0)
        assert m.check(result.x) <= 1e-9


def test_a_user_name_equal_to_a_generated_one_keeps_every_name_distinct(tmp_path):
    # the builder refuses repeated names, but a user name can still equal a generated one:
    # the MPS writer refused the model, and (once the LP refused repeated names) so did the
    # compile; the generated name now takes a suffix
    m = PWLModel()
    a = m.add_variable(0.0, 10.0, name="x")
    m.add_variable(0.0, 1.0, name="lambda[f0_x][0]")
    m.add_constraint({a: 1.0}, 2.0, name="convex[f0_x]")
    m.add_pwl(a, [0, 5, 10], [0, 3, 1])
    m.minimize({a: 1.0})
    lp = m.compile().lp
    assert lp.col_names[1] == "lambda[f0_x][0]" and "lambda[f0_x][0]~1" in lp.col_names
    assert lp.row_names[0] == "convex[f0_x]" and "convex[f0_x]~1" in lp.row_names
    write_pwl_mps(m, tmp_path / "dup.mps")
    read = read_mps(tmp_path / "dup.mps")
    binary, _ = binary_formulation(m, "cc")
    assert read.col_names == binary.col_names and read.row_names == binary.row_names
