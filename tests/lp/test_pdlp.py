"""solve_lp against HiGHS (scipy's linprog), statuses, warm starts and the safe bound."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxopt_suite.lp import (
    LP,
    batch_advance,
    batch_refill,
    batch_resize,
    batch_solution,
    batch_start,
    instances,
    pdlp,
)
from jaxopt_suite.lp.pdlp import LPOptions, Status, dual_bound, solve_lp, solve_lp_batch
from tests.lp.conftest import highs


def _feasible_lp(seed, m=20, n=30, free_rows=True, bounds="box"):
    """Rows of every type around A x_f for an interior x_f, box bounds [0, 3]; with
    ``bounds="mixed"``, each column's lower bound 0, -2 or -inf and upper bound 3 or inf
    (the LP may then be unbounded)."""
    rng = np.random.default_rng(seed)
    A = sp.random(m, n, density=0.3, random_state=seed, format="csr")
    x_f = rng.uniform(0.5, 2.5, n)
    ax = A @ x_f
    kinds = rng.integers(0, 4, m)  # 0 equality, 1 <=, 2 >=, 3 two-sided
    width = rng.uniform(0.1, 1.0, m)
    lo = np.where(kinds == 1, -np.inf, np.where(kinds == 0, ax, ax - width))
    hi = np.where(kinds == 2, np.inf, np.where(kinds == 0, ax, ax + width))
    if bounds == "box":
        return LP(rng.normal(size=n), A, lo, hi, np.zeros(n), np.full(n, 3.0))
    lower = rng.choice([0.0, -2.0, -np.inf], n)
    upper = rng.choice([3.0, np.inf], n)
    return LP(rng.normal(size=n), A, lo, hi, lower, upper)


@pytest.mark.parametrize("seed", range(3))
def test_matches_highs_and_satisfies_kkt(seed):
    lp = _feasible_lp(seed)
    reference = highs(lp)
    solution = solve_lp(lp)
    assert solution.status == Status.OPTIMAL, solution.message
    # Relative KKT <= 1e-4 bounds the objective error by about the same relative amount.
    assert abs(solution.objective - reference.fun) <= 5e-4 * (1 + abs(reference.fun))
    assert max(solution.primal_residual, solution.dual_residual, solution.gap) <= 1e-4
    # KKT recomputed here in float64 from the returned point.
    ax = lp.A @ solution.x
    violation = np.linalg.norm(ax - np.clip(ax, lp.row_lower, lp.row_upper))
    assert violation <= 2e-4 * (
        1
        + np.linalg.norm(
            np.r_[lp.row_lower[np.isfinite(lp.row_lower)], lp.row_upper[np.isfinite(lp.row_upper)]]
        )
    )
    assert np.all(solution.x >= lp.var_lower - 1e-6) and np.all(solution.x <= lp.var_upper + 1e-6)
    # ... and the dual side and the gap, from the returned y alone (not the solver's numbers):
    # y weights only finite row sides (y > 0: the lower side), lambda = c - A^T y only finite
    # variable bounds (lambda > 0: the lower bound), and the dual objective meets the primal
    y = np.asarray(solution.y, np.float64)
    assert np.all(y[~np.isfinite(lp.row_lower)] <= 0.0)
    assert np.all(y[~np.isfinite(lp.row_upper)] >= 0.0)
    lam = lp.c - lp.A.T @ y
    dual_violation = np.where(np.isfinite(lp.var_lower), 0.0, np.maximum(lam, 0.0)) + np.where(
        np.isfinite(lp.var_upper), 0.0, np.minimum(lam, 0.0)
    )
    assert np.linalg.norm(dual_violation) <= 2e-4 * (1 + np.linalg.norm(lp.c))
    lam = lam - dual_violation

    def finite(v):
        return np.where(np.isfinite(v), v, 0.0)

    dual_objective = (
        np.maximum(y, 0) @ finite(lp.row_lower)
        - np.maximum(-y, 0) @ finite(lp.row_upper)
        + np.maximum(lam, 0) @ finite(lp.var_lower)
        - np.maximum(-lam, 0) @ finite(lp.var_upper)
    )
    primal_objective = lp.c @ solution.x
    gap = abs(primal_objective - dual_objective)
    assert gap <= 2e-4 * (1 + abs(primal_objective) + abs(dual_objective))
    # The safe bound is below the optimum and close to it at an optimal dual.
    assert solution.dual_bound <= reference.fun + 1e-9
    assert solution.dual_bound >= reference.fun - 1e-3 * (1 + abs(reference.fun))


def test_float32_solves_certify_infeasible_and_unbounded_lps():
    # The default infeasibility tolerance, 1e-8, lay below float32's rounding: no ray passed,
    # and these ran to the iteration limit (with a growing dual residual) or ended in
    # NUMERICAL_ERROR. It is now at least 100 eps of the solve's dtype.
    inf = np.inf
    assert jnp.result_type(float) == jnp.float32
    # x1 + 3 x2 <= -5, 3 x2 = 1, 0 <= x1 <= 4: x1 <= -6, infeasible
    infeasible = LP([-2.0, 0.0], [[1.0, 3.0], [0.0, 3.0]], [-inf, 1.0], [-5.0, 1.0],
                    [0.0, -inf], [4.0, inf])  # fmt: skip
    assert solve_lp(infeasible).status == Status.PRIMAL_INFEASIBLE
    # x3 and x4 are free with costs -3 and 3; 2 x1 + 3 x2 - x3 - 2 x4 in [-1, 2]: x3 = 2 t,
    # x4 = -t stays in the row and the cost falls by 9 t
    unbounded = LP([3.0, 2.0, -3.0, 3.0, 3.0], [[2.0, 3.0, -1.0, -2.0, 0.0]], [-1.0], [2.0],
                   [-2.0, 0.0, -inf, -inf, 0.0], [4.0, 4.0, inf, inf, 4.0])  # fmt: skip
    assert solve_lp(unbounded).status == Status.DUAL_INFEASIBLE
    batch = solve_lp_batch(infeasible, np.array([[0.0, -inf]]), np.array([[4.0, inf]]))
    assert np.asarray(batch.status).tolist() == [Status.PRIMAL_INFEASIBLE]
    # float64 keeps the tolerance it is given
    with jax.enable_x64(True):
        tolerance = pdlp._limits(LPOptions(), jnp.float64)[1]
    assert float(tolerance) == 1e-8


def test_statuses_on_crafted_lps():
    inf = np.inf
    infeasible_rows = LP([1.0, 1.0], [[1, 1], [1, 1]], [3, -inf], [inf, 1], [0, 0], [inf, inf])
    assert solve_lp(infeasible_rows).status == Status.PRIMAL_INFEASIBLE
    infeasible_box = LP([1.0, 1.0], [[1, 1]], [5], [5], [0, 0], [1, 1])
    assert solve_lp(infeasible_box).status == Status.PRIMAL_INFEASIBLE
    unbounded = LP([-1.0, 0.0], [[1, -1]], [-inf], [1], [0, 0], [inf, inf])
    solution = solve_lp(unbounded)
    assert solution.status == Status.DUAL_INFEASIBLE and "unbounded" in solution.message
    free = LP([1.0, 2.0], [[1, 1], [1, -1]], [1, 0], [1, 0], [-inf, -inf], [inf, inf])
    solution = solve_lp(free)
    assert solution.status == Status.OPTIMAL
    np.testing.assert_allclose(solution.x, [0.5, 0.5], atol=1e-3)
    limited = solve_lp(free, LPOptions(max_iterations=64, eval_every=64))
    assert limited.status == Status.ITERATION_LIMIT and limited.iterations == 64
    assert "max_iterations" in limited.message
    assert "jax_enable_x64" in limited.message  # float32 can stall: the message says so
    with jax.enable_x64(True):
        limited = solve_lp(free, LPOptions(max_iterations=64, eval_every=64))
    assert limited.status == Status.ITERATION_LIMIT and "float32" not in limited.message


def test_family_instances_without_an_optimum_get_their_status_from_the_rows():
    # the lp suite's infeasible and unbounded LPs beyond the two crafted on the bounds: the
    # certificates need the rows (checked here), and HiGHS agrees on the status
    from tests.lp.conftest import highs as reference

    infeasible = instances.infeasible_transportation(6, 8, seed=3)
    supply, demand = infeasible.row_upper[:6], infeasible.row_lower[6:]
    assert np.all(np.isinf(infeasible.var_upper)) and demand.sum() > supply.sum()
    y = np.r_[-np.ones(6), np.ones(8)]  # Farkas: A^T y <= 0 on x >= 0, y . sides > 0
    assert np.all(infeasible.A.T @ y <= 0) and y[6:] @ demand - (-y[:6]) @ supply > 0
    unbounded = instances.unbounded_random(12, 20, 0.2, seed=4)
    assert np.all(np.abs(unbounded.A).sum(axis=0) > 0)  # every column is in some row
    assert np.all(np.isinf(unbounded.var_lower)) and np.all(np.isinf(unbounded.var_upper))
    for lp, status, highs_status in (
        (infeasible, Status.PRIMAL_INFEASIBLE, 2),
        (unbounded, Status.DUAL_INFEASIBLE, 3),
    ):
        assert reference(lp).status == highs_status
        with jax.enable_x64(True):
            solution = solve_lp(lp, LPOptions(tolerance=1e-4))
        assert solution.status == status, solution.message


@pytest.mark.parametrize("x64", [False, True])
@pytest.mark.parametrize("scale", [1e9, 1e15])
def test_large_bounds_or_costs_make_no_false_certificate(x64, scale):
    # Feasible, bounded LPs whose data are large: the early iterates' rays have a cone
    # violation about 1e-9 of their objective (which grows with the data), under the
    # tolerance, and these were reported PRIMAL_INFEASIBLE and DUAL_INFEASIBLE at the first
    # evaluation, in float64 too. Genuine rays at the same scale are still certified.
    inf = np.inf
    rows = [[1.0, 0.0]] * 4 + [[1.0, 1.0]]
    with jax.enable_x64(x64):
        big_rows = solve_lp(LP([1.0, 1.0], rows, [scale] * 5, [inf] * 5, [0, 0], [inf] * 2))
        big_cost = solve_lp(LP([-scale, -1.0], rows, [-inf] * 5, [1.0] * 5, [0, 0], [inf] * 2))
        infeasible = solve_lp(
            LP([1.0, 1.0], [[1, 1], [1, 1]], [3 * scale, -inf], [inf, scale], [0, 0], [inf] * 2)
        )
        unbounded = solve_lp(LP([-scale, 0.0], [[1, -1]], [-inf], [scale], [0, 0], [inf] * 2))
    assert big_rows.status == Status.OPTIMAL, big_rows.message
    assert big_rows.objective == pytest.approx(scale, rel=1e-4)
    assert big_cost.status == Status.OPTIMAL, big_cost.message
    assert big_cost.objective == pytest.approx(-scale, rel=1e-4)
    assert infeasible.status == Status.PRIMAL_INFEASIBLE, infeasible.message
    if x64 or scale <= 1e9:
        assert unbounded.status == Status.DUAL_INFEASIBLE, unbounded.message
    else:
        # float32 rounding of a ray at 1e15 (a violation near 1e-7 of the descent) is no
        # certificate at that scale: the iterates may overflow first, and the status says so
        assert unbounded.status in (Status.DUAL_INFEASIBLE, Status.NUMERICAL_ERROR)
        if unbounded.status == Status.NUMERICAL_ERROR:
            assert "jax_enable_x64" in unbounded.message


def test_a_large_side_the_ray_barely_uses_leaves_its_certificate_alone():
    # x1 + x2 >= 3 and <= 1 (infeasible at scale 1), and a row x3 <= 1e6 on a free column.
    # The ray (1, -1 - 1e-10, -1e-12) is the genuine one plus rounding-sized entries: its
    # cone violation (1e-12, on the free x3) is far under the tolerance at the scale of the
    # sides it is made of (about 2), but scaling by the largest side of the whole LP (1e6)
    # asked for 1e-14 of its objective, and rejected it.
    inf = np.inf
    lp = LP([1.0, 1.0, 0.0], [[1, 1, 0], [1, 1, 0], [0, 0, 1]], [3, -inf, -inf], [inf, 1, 1e6],
            [0, 0, -inf], [inf] * 3)  # fmt: skip
    with jax.enable_x64(True):
        data, _ = pdlp._prepare(lp, LPOptions(matrix="dense"))
        tol = jnp.asarray(1e-8)
        dy = jnp.array([1.0, -1.0 - 1e-10, -1e-12])
        primal, dual = pdlp._certificates(data, jnp.zeros(3), dy / data.y_unscale, tol)
        assert bool(primal) and not bool(dual)


def test_warm_start_from_the_solution_stops_at_once():
    lp = _feasible_lp(7)
    cold = solve_lp(lp)
    warm = solve_lp(lp, warm_start=(cold.x, cold.y))
    assert warm.status == Status.OPTIMAL
    assert warm.iterations <= LPOptions().eval_every < cold.iterations
    with pytest.raises(ValueError, match=r"warm_start x must have shape \(30,\)"):
        solve_lp(lp, warm_start=(np.zeros(3), cold.y))


def test_bad_options():
    lp = _feasible_lp(0, m=3, n=4)
    for bad, match in (
        (LPOptions(tolerance=0.0), "tolerance must be finite and > 0"),
        (LPOptions(max_iterations=0), "max_iterations must be an integer >= 1"),
        (LPOptions(time_limit=-1.0), "time_limit must be > 0"),
        (LPOptions(eval_every=2.5), "eval_every must be an integer >= 1, got 2.5"),
        (LPOptions(matrix="csr"), r"matrix must be one of \('auto', 'dense', 'ell'"),
        # an infinite tolerance called an infeasible point OPTIMAL, an infinite
        # infeasibility tolerance certified a boxed LP unbounded
        (LPOptions(tolerance=np.inf), "tolerance must be finite and > 0"),
        (LPOptions(infeasibility_tolerance=np.inf), "infeasibility_tolerance must be finite"),
        # bools read as 1, strings and arrays failed in comparisons, inf or None in int()
        (LPOptions(tolerance=True), "tolerance must be finite and > 0 .a number, not a bool"),
        (LPOptions(time_limit=True), "time_limit must be > 0 .or None. .a number, not a bool"),
        (LPOptions(max_iterations=True), "max_iterations must be an integer >= 1, got True"),
        (LPOptions(tolerance="1e-6"), "tolerance must be finite and > 0"),
        (LPOptions(tolerance=np.array([1e-4, 1e-6])), r"tolerance must be a scalar"),
        (LPOptions(max_iterations=np.inf), "max_iterations must be an integer >= 1"),
        (LPOptions(max_iterations=None), "max_iterations must be an integer >= 1"),
        (LPOptions(ruiz_iterations=2.5), "ruiz_iterations must be an integer >= 0"),
        (LPOptions(eval_every=10**11), "eval_every must be at most 2147483647"),
        (LPOptions(pock_chambolle_alpha="1"), r"pock_chambolle_alpha must lie in \[0, 2\]"),
        (LPOptions(scale_bounds="no"), "scale_bounds must be a bool, got 'no'"),
    ):
        with pytest.raises(ValueError, match=match):
            solve_lp(lp, bad)
        with pytest.raises(ValueError, match=match):
            solve_lp_batch(lp, lp.var_lower[None], lp.var_upper[None], options=bad)
    with pytest.raises(TypeError, match="lp must be an LP"):
        solve_lp("lp")
    with pytest.raises(TypeError, match="options must be an LPOptions, got dict"):
        solve_lp(lp, {"tolerance": 1e-6})
    with pytest.raises(ValueError, match=r"warm_start must be a pair \(x, y\), got tuple of"):
        solve_lp(lp, warm_start=(np.zeros(4),))
    # a jax scalar is a number (it did not hash in the solver's caches)
    assert solve_lp(lp, LPOptions(tolerance=jnp.asarray(1e-6))).status == Status.OPTIMAL


def test_sparse_dense_ell_and_block_matrices_agree():
    lp = _feasible_lp(3, m=12, n=16)
    dense = solve_lp(lp, LPOptions(matrix="dense"))
    ell = solve_lp(lp, LPOptions(matrix="ell"))
    sparse = solve_lp(lp, LPOptions(matrix="sparse"))
    block = solve_lp(lp, LPOptions(matrix="block"))  # the Pallas kernel, interpret mode
    assert dense.status == ell.status == sparse.status == block.status == Status.OPTIMAL
    for other in (ell, sparse, block):
        assert abs(dense.objective - other.objective) <= 1e-3 * (1 + abs(dense.objective))


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    iterations=st.sampled_from([64, 256, 100_000]),
    bounds=st.sampled_from(["box", "mixed"]),
)
def test_safe_dual_bound_never_exceeds_the_optimum(seed, iterations, bounds):
    # Any dual iterate, from a solve stopped at any point, bounds the optimum from below;
    # infinite variable bounds (mixed) take the bounds the rows imply, or -inf.
    lp = _feasible_lp(seed, m=8, n=12, bounds=bounds)
    reference = highs(lp)
    assert reference.status in (0, 3), reference.message  # optimal or unbounded
    optimum = reference.fun if reference.status == 0 else -np.inf
    # an unbounded LP has no finite lower bound: the safe bound must be -inf there
    ceiling = optimum + 1e-9 * (1 + abs(optimum)) if np.isfinite(optimum) else -np.inf
    solution = solve_lp(lp, LPOptions(max_iterations=iterations))
    assert solution.dual_bound <= ceiling
    # ... and so does the bound of an arbitrary y.
    y = np.random.default_rng(seed).normal(size=lp.num_rows)
    assert dual_bound(lp, y)[0] <= ceiling


def test_dual_bound_of_a_non_finite_or_misshapen_y():
    # optimum 1 at x = 1; NaN entries used to fail both sign tests and drop out (bound 0,
    # or 2 here from a column y broadcast against the reduced costs)
    lp = LP(np.array([1.0]), np.array([[1.0], [1.0]]), [1.0, 1.0], [np.inf] * 2, [0.0], [10.0])
    # 1, less the rounding margin: the reduced cost 1 - 0.5 - 0.5 is known to about 1e-15,
    # times x's upper bound 10
    assert 1.0 - 1e-13 < dual_bound(lp, np.array([0.5, 0.5]))[0] <= 1.0
    for y in ([np.nan, 0.5], [np.inf, 0.0], [1e300, -1e300]):
        bound, _ = dual_bound(lp, np.array(y))
        assert bound == -np.inf, y
    with pytest.raises(ValueError, match=r"y must have shape \(2,\), got \(2, 1\)"):
        dual_bound(lp, np.array([[0.5], [0.5]]))


def _perturbed_instances(lp, batch, columns, seed):
    """``(lower, upper, costs)`` of ``batch`` instances of ``lp``: the upper bounds of the
    first ``columns`` columns tightened (branch-and-bound style), the costs jittered."""
    rng = np.random.default_rng(seed)
    lower = np.tile(lp.var_lower, (batch, 1))
    upper = np.tile(lp.var_upper, (batch, 1))
    upper[:, :columns] = rng.uniform(0.5, 3.0, (batch, columns))
    costs = lp.c + 0.1 * rng.normal(size=(batch, lp.num_cols))
    return lower, upper, costs


def test_batched_solve_equals_individual_solves():
    lp = _feasible_lp(1, m=15, n=20)
    batch = 6
    lower, upper, costs = _perturbed_instances(lp, batch, columns=4, seed=0)
    result = solve_lp_batch(lp, lower, upper, costs)
    assert np.all(result.status == Status.OPTIMAL), result.messages()
    for b in range(batch):
        instance = LP(costs[b], lp.A, lp.row_lower, lp.row_upper, lower[b], upper[b])
        single = solve_lp(instance)
        optimum = highs(instance).fun
        # Both within the 1e-4 relative KKT tolerance of the optimum.
        assert abs(result.objective[b] - optimum) <= 5e-4 * (1 + abs(optimum))
        assert abs(single.objective - optimum) <= 5e-4 * (1 + abs(optimum))
        assert result.dual_bound[b] <= optimum + 1e-9 * (1 + abs(optimum))
        np.testing.assert_allclose(result.dual_bound[b], dual_bound(instance, result.y[b])[0])
        # Same algorithm, same data: iteration counts agree up to one or two evaluations
        # (the batch shares one bound scale s_b, the single solve uses its own).
        assert abs(int(result.iterations[b]) - single.iterations) <= 2 * LPOptions().eval_every


@pytest.mark.parametrize("x64", [False, True])
def test_threaded_batch_equals_its_groups_solved_alone(x64):
    # under jax.enable_x64 (a per-thread context) the worker threads must solve in float64
    # too: a float32 group would not equal the same group solved alone
    with jax.enable_x64(x64):
        _threaded_batch_equals_its_groups()


def _threaded_batch_equals_its_groups():
    lp = _feasible_lp(3, m=12, n=16)
    lower, upper, costs = _perturbed_instances(lp, 7, columns=3, seed=1)
    together = solve_lp_batch(lp, lower, upper, costs, threads=3)
    assert np.all(together.status == Status.OPTIMAL), together.messages()
    # three groups of consecutive instances (3, 2, 2), each its own loop of its own width
    for rows in (slice(0, 3), slice(3, 5), slice(5, 7)):
        alone = solve_lp_batch(lp, lower[rows], upper[rows], costs[rows], threads=1)
        for field in ("x", "y", "objective", "dual_bound", "status", "iterations", "residuals"):
            np.testing.assert_array_equal(getattr(together, field)[rows], getattr(alone, field))
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="threads must be an int >= 1"):
            solve_lp_batch(lp, lower, upper, threads=bad)
    # more threads than instances: one instance per group
    assert np.all(solve_lp_batch(lp, lower[:2], upper[:2], threads=4).status == Status.OPTIMAL)


def test_threaded_batch_advance_equals_its_groups_advanced_alone():
    from jaxopt_suite.lp.pdlp import batch_advance, batch_solution, batch_start

    lp = _feasible_lp(4, m=12, n=16)
    lower, upper, _ = _perturbed_instances(lp, 7, columns=3, seed=2)
    with jax.enable_x64(True):  # the worker threads follow this thread's precision
        both = batch_solution(batch_advance(batch_start(lp, lower, upper), 3, threads=2))
    for rows in (slice(0, 4), slice(4, 7)):  # the groups, of uneven sizes
        with jax.enable_x64(True):
            alone = batch_solution(
                batch_advance(batch_start(lp, lower[rows], upper[rows]), 3, threads=1)
            )
        for field in ("x", "y", "status", "iterations", "residuals"):
            np.testing.assert_array_equal(getattr(both, field)[rows], getattr(alone, field))
    assert np.all(both.iterations == 3 * LPOptions().eval_every)  # 3 periods, not finished
    with pytest.raises(ValueError, match="threads must be an int >= 1"):
        batch_advance(batch_start(lp, lower, upper), 1, threads=0)


def test_batch_freezes_finished_instances_and_checks_input():
    lp = _feasible_lp(2, m=10, n=12)
    lower = np.tile(lp.var_lower, (2, 1))
    upper = np.tile(lp.var_upper, (2, 1))
    upper[1] = 0.0  # instance 1: x = 0, rows around A x_f > 0 are violated
    result = solve_lp_batch(lp, lower, upper)
    assert result.status[0] == Status.OPTIMAL
    assert result.status[1] == Status.PRIMAL_INFEASIBLE
    # The infeasible instance stopped early and was not advanced with the other one.
    assert result.iterations[1] < result.iterations[0]
    with pytest.raises(ValueError, match=r"must both have shape \(B, 12\)"):
        solve_lp_batch(lp, lower[:, :5], upper[:, :5])
    bad = upper.copy()
    bad[1, 3] = -1.0
    with pytest.raises(ValueError, match="instance 1: var_lower > var_upper .* for column 3"):
        solve_lp_batch(lp, lower, bad)
    with pytest.raises(ValueError, match=r"c must have shape \(2, 12\)"):
        solve_lp_batch(lp, lower, upper, np.zeros((3, 12)))
    with pytest.raises(ValueError, match="at least one instance, got B = 0"):
        solve_lp_batch(lp, lower[:0], upper[:0])
    # a NaN warm start ran into NUMERICAL_ERROR (solve_lp refuses one)
    x0, y0 = np.zeros((2, 12)), np.zeros((2, 10))
    x0[1, 4] = np.nan
    with pytest.raises(ValueError, match="warm_start x must be finite; instance 1 has nan at"):
        solve_lp_batch(lp, lower, upper, warm_start=(x0, y0))


def test_messages_of_a_batch_in_flight():
    from jaxopt_suite.lp.pdlp import batch_park, batch_solution, batch_start

    lp = _feasible_lp(2, m=10, n=12)
    lower, upper = np.tile(lp.var_lower, (2, 1)), np.tile(lp.var_upper, (2, 1))
    batch = batch_park(batch_start(lp, lower, upper), [1])  # slot 0 not yet advanced
    assert batch_solution(batch).messages() == ["running", "parked (holds no instance)"]


def test_float64_solve():
    import jax

    lp = _feasible_lp(4, m=10, n=14)
    with jax.enable_x64(True):
        solution = solve_lp(lp, LPOptions(tolerance=1e-8))
    assert solution.status == Status.OPTIMAL
    optimum = highs(lp).fun
    # float64 reaches tolerances float32 cannot: 1e-8 relative KKT.
    assert abs(solution.objective - optimum) <= 1e-6 * (1 + abs(optimum))


def test_time_limit_stops_the_solve():
    lp = _feasible_lp(5, m=20, n=30)
    # A limit far below one evaluation's work: the first check after compilation stops it.
    solution = solve_lp(lp, LPOptions(time_limit=1e-9, tolerance=1e-12))
    assert solution.status == Status.TIME_LIMIT and "time limit" in solution.message
    assert solution.iterations == LPOptions().eval_every


def test_a_new_time_limit_does_not_compile_the_solve_again():
    # The loop reads the limit through its deadline argument: a branch-and-bound passes its
    # time left, a new number at every call, and each one compiled anew.
    lp = _feasible_lp(6, m=12, n=16)
    solve_lp(lp, LPOptions(time_limit=100.0))
    compiled = pdlp._solve_jit._cache_size()
    for limit in (50.0, 25.5, 12.25):
        assert solve_lp(lp, LPOptions(time_limit=limit)).status == Status.OPTIMAL
    assert pdlp._solve_jit._cache_size() == compiled
    # nor do new tolerances or iteration limits (they are arguments of the loop too), and
    # they still act: a tighter tolerance takes more iterations, a limit stops the solve
    loose = solve_lp(lp, LPOptions(time_limit=100.0, tolerance=1e-2))
    tight = solve_lp(lp, LPOptions(time_limit=100.0, tolerance=1e-5, infeasibility_tolerance=1e-9))
    capped = solve_lp(lp, LPOptions(time_limit=100.0, tolerance=1e-5, max_iterations=64))
    assert loose.iterations < tight.iterations and capped.status == Status.ITERATION_LIMIT
    assert pdlp._solve_jit._cache_size() == compiled
    before = pdlp._batched_advance.cache_info().misses
    for tolerance in (1e-3, 1e-4):
        lower, upper = np.tile(lp.var_lower, (2, 1)), np.tile(lp.var_upper, (2, 1))
        solve_lp_batch(lp, lower, upper, options=LPOptions(tolerance=tolerance))
    assert pdlp._batched_advance.cache_info().misses <= before + 1


def _slow_batch(batch=64):
    """A tiny LP in ``batch`` copies that never meets its tolerance: only a limit stops it."""
    lp = LP([1.0, 1.0, 1.0], [[1, 2, 3], [3, 1, -1]], [1, 0], [2, np.inf], [0] * 3, [np.inf] * 3)
    return lp, np.zeros((batch, 3)), np.full((batch, 3), np.inf)


@pytest.mark.parametrize("compact", [True, False])
def test_batch_time_limit_counts_from_the_start_of_the_solve(compact):
    # 64 instances on one thread: the compacting loop advances them two evaluations per
    # call, each far shorter than the limit. A clock restarted by every call never
    # reached it, and the batch ran on to the iteration limit (seconds later).
    lp, lower, upper = _slow_batch()
    options = LPOptions(tolerance=1e-30, max_iterations=10**6, time_limit=0.2)
    solve_lp_batch(lp, lower, upper, options=options, compact=compact, threads=1)  # compile
    result = solve_lp_batch(lp, lower, upper, options=options, compact=compact, threads=1)
    assert np.all(result.status == Status.TIME_LIMIT), set(result.status.tolist())
    assert result.iterations.max() < options.max_iterations
    assert result.seconds < 0.2 + 2.0  # one evaluation takes about a millisecond here


def _narrowing_spy(monkeypatch):
    """Records the widths of every narrowing run-to-the-end call that runs (not of the
    compiled functions merely looked up)."""
    calls = []
    narrowing = pdlp._batched_narrowing

    def factory(options, widths):
        run = narrowing(options, widths)
        return lambda *args: calls.append(widths) or run(*args)

    monkeypatch.setattr(pdlp, "_batched_narrowing", factory)
    return calls


def test_narrowing_a_batch_in_the_loop_changes_no_result(monkeypatch):
    # 32 instances on one thread, 26 with every variable fixed at 0 (infeasible: they stop
    # at the first evaluations): the 6 running ones, spread over the batch, and 2 stopped
    # ones are gathered into a batch of 8 inside the compiled loop, and must end as they
    # would in place.
    lp = _feasible_lp(5, m=14, n=18)
    B = 32
    lower, upper, _ = _perturbed_instances(lp, B, columns=4, seed=3)
    run = np.isin(np.arange(B), [1, 5, 9, 14, 20, 27])
    lower[~run], upper[~run] = 0.0, 0.0
    options = LPOptions()
    together = solve_lp_batch(lp, lower, upper, options=options, compact=False, threads=1)
    calls = _narrowing_spy(monkeypatch)
    assert pdlp._narrowing_widths(B) == (8,)
    narrowed = solve_lp_batch(lp, lower, upper, options=options, compact=True, threads=1)
    assert calls == [(8,)]
    assert np.all(together.status[run] == Status.OPTIMAL), together.messages()
    assert np.all(together.status[~run] == Status.PRIMAL_INFEASIBLE)
    assert np.all(together.iterations[run] > together.iterations[~run].max())
    np.testing.assert_array_equal(narrowed.status, together.status)
    # As for the compacting loop: the same arithmetic per slot, vectorised over a batch
    # axis of width 8 instead of 32, so float32 rounding may move a threshold test by one
    # evaluation. A slot that got another's state would be off by far more (the bounds of
    # the running instances differ by about 0.5); a stopped slot written back from the
    # narrow batch must be exactly as it stopped.
    gap = np.abs(narrowed.iterations - together.iterations)[run]
    assert np.all(gap <= options.eval_every)
    np.testing.assert_allclose(narrowed.x[run], together.x[run], rtol=0, atol=1e-4)
    np.testing.assert_allclose(narrowed.y[run], together.y[run], rtol=0, atol=1e-4)
    for field in ("x", "y", "iterations", "residuals"):
        np.testing.assert_array_equal(
            getattr(narrowed, field)[~run], getattr(together, field)[~run]
        )
    # narrow batches only: below 32 slots the step costs about the same at any width
    assert pdlp._narrowing_widths(31) == () and pdlp._narrowing_widths(128) == (32, 8)


def test_a_narrowed_batch_keeps_each_slots_time_limit(monkeypatch):
    # 32 slots, 26 of them infeasible (stopped at once): the 6 slow ones run on in a
    # batch of 8 until their deadlines, gathered with them, stop them
    lp, lower, upper = _slow_batch(32)
    run = np.isin(np.arange(32), [0, 7, 8, 19, 30, 31])
    upper[~run] = 0.0  # row 0 needs x_1 + 2 x_2 + 3 x_3 >= 1
    options = LPOptions(tolerance=1e-30, max_iterations=10**6, time_limit=0.2)
    calls = _narrowing_spy(monkeypatch)
    solve_lp_batch(lp, lower, upper, options=options, threads=1)  # compile
    result = solve_lp_batch(lp, lower, upper, options=options, threads=1)
    assert calls == [(8,), (8,)]
    assert np.all(result.status[run] == Status.TIME_LIMIT), result.messages()
    assert np.all(result.status[~run] == Status.PRIMAL_INFEASIBLE), result.messages()
    assert result.seconds < 0.2 + 2.0


def test_a_narrowed_batch_gathers_each_slots_own_deadline(monkeypatch):
    # 6 slow slots among 26 infeasible ones, narrowed into a batch of 8: three were
    # filled 0.6 s before the others (deadlines 0.4 s and 1 s away). A gather that mixed
    # the deadlines up would stop the wrong ones first.
    from jaxopt_suite.lp.pdlp import batch_solution, batch_start

    lp, lower, upper = _slow_batch(32)
    run = np.isin(np.arange(32), [0, 7, 8, 19, 30, 31])
    upper[~run] = 0.0
    early = np.isin(np.arange(32), [7, 19, 31])
    options = LPOptions(tolerance=1e-30, max_iterations=10**7, time_limit=1.0)
    calls = _narrowing_spy(monkeypatch)
    for _ in range(2):  # the first compiles
        batch = batch_start(lp, lower, upper, options=options)
        batch = batch._replace(started=np.where(early, batch.started - 0.6, batch.started))
        result = batch_solution(pdlp._run_compacting(batch))
    assert calls == [(8,), (8,)]
    assert np.all(result.status[run] == Status.TIME_LIMIT), result.messages()
    late = run & ~early
    assert result.iterations[late].min() > 1.5 * result.iterations[early].max()


def test_batch_advance_time_limit_counts_from_each_slots_fill():
    import time

    from jaxopt_suite.lp import batch_advance, batch_refill, batch_start

    lp, lower, upper = _slow_batch(4)
    # a limit well above what a start, a refill and one evaluation take on a loaded machine
    options = LPOptions(tolerance=1e-30, max_iterations=10**6, time_limit=1.0)
    every = options.eval_every

    def run(wait):
        batch = batch_advance(batch_start(lp, lower, upper, options=options), 1)
        time.sleep(wait)
        late = batch_advance(batch, 1)
        refilled = batch_advance(batch_refill(late, [0], lower[:1], upper[:1]), 1)
        return batch, late, refilled

    run(0.0)  # compiles every step, so that only the sleep below passes the limit
    batch, late, refilled = run(1.2)
    assert np.all(batch.status == -1)
    # the slots' clocks ran between the calls: past the limit at the next evaluation
    assert np.all(late.status == Status.TIME_LIMIT)
    assert np.all(np.asarray(late.state.iterations) == 2 * every)
    # a refilled slot's clock starts at its refill; the others stay stopped
    assert refilled.status.tolist() == [-1] + [int(Status.TIME_LIMIT)] * 3


def test_batched_block_products_are_one_spmm():
    import jax

    from jaxopt_suite.lp import BlockOperator

    A = sp.random(30, 20, density=0.2, random_state=0, format="csr")
    op = BlockOperator.from_scipy(A)
    X = jax.random.normal(jax.random.key(0), (6, 20))
    out = jax.vmap(lambda x: op @ x)(X)
    np.testing.assert_allclose(out, X @ A.toarray().T, atol=1e-5)
    Y = jax.random.normal(jax.random.key(1), (6, 30))
    np.testing.assert_allclose(jax.vmap(lambda y: op.T @ y)(Y), Y @ A.toarray(), atol=1e-5)
    # Under vmap the kernel runs once on the (n, B) panel, not once per vector.
    jaxpr = jax.make_jaxpr(jax.vmap(lambda x: op @ x))(X)
    calls = [e for e in jaxpr.jaxpr.eqns if e.primitive.name == "pallas_call"]
    assert len(calls) == 1 and calls[0].outvars[0].aval.shape[1] == 6


def test_batch_solve_through_the_block_kernel():
    lp = _feasible_lp(6, m=10, n=12)
    lower = np.tile(lp.var_lower, (3, 1))
    upper = np.tile(lp.var_upper, (3, 1))
    upper[:, 0] = [3.0, 2.0, 1.0]
    block = solve_lp_batch(lp, lower, upper, options=LPOptions(matrix="block"))
    dense = solve_lp_batch(lp, lower, upper, options=LPOptions(matrix="dense"))
    assert np.all(block.status == Status.OPTIMAL)
    np.testing.assert_allclose(block.objective, dense.objective, rtol=1e-3, atol=1e-3)


def test_continuous_batching_refills_a_finished_slot():
    from jaxopt_suite.lp import batch_advance, batch_refill, batch_solution, batch_start

    lp = _feasible_lp(2, m=10, n=12)
    lower = np.tile(lp.var_lower, (3, 1))
    upper = np.tile(lp.var_upper, (3, 1))
    upper[1] = 0.0  # infeasible: stops after a few evaluations
    upper[2, 0] = 1.0
    batch = batch_start(lp, lower, upper)
    batch = batch_advance(batch, evaluations=2)
    assert batch.status[1] == Status.PRIMAL_INFEASIBLE and batch.status[0] == -1
    # Refill slot 1 with a new node while slots 0 and 2 keep their progress.
    new_upper = lp.var_upper.copy()
    new_upper[3] = 0.5
    batch = batch_refill(batch, [1], lp.var_lower[None], new_upper[None])
    assert batch.status[1] == -1
    done = batch_solution(batch_advance(batch))
    assert np.all(done.status == Status.OPTIMAL)
    plain = solve_lp_batch(lp, lower, upper)
    for b in (0, 2):  # untouched slots end exactly where an uninterrupted run ends
        np.testing.assert_array_equal(done.x[b], plain.x[b])
        assert done.iterations[b] == plain.iterations[b]
    refilled = LP(lp.c, lp.A, lp.row_lower, lp.row_upper, lp.var_lower, new_upper)
    optimum = highs(refilled).fun
    assert abs(done.objective[1] - optimum) <= 5e-4 * (1 + abs(optimum))
    with pytest.raises(ValueError, match=r"slots must be indices in \[0, 3\)"):
        batch_refill(batch, [3], lp.var_lower[None], new_upper[None])
    with pytest.raises(ValueError, match="slots must be distinct indices, got \\[1, 1\\]"):
        batch_refill(batch, [1, 1], np.tile(lp.var_lower, (2, 1)), np.tile(new_upper, (2, 1)))
    with pytest.raises(ValueError, match="expected 2 instances, got 1"):
        batch_refill(batch, [0, 1], lp.var_lower[None], new_upper[None])


def test_a_donated_refill_equals_a_copying_one_and_consumes_the_batch():
    from jaxopt_suite.lp import batch_advance, batch_park, batch_refill, batch_start

    lp = _feasible_lp(3, m=10, n=12)
    lower, upper, costs = _perturbed_instances(lp, 5, columns=3, seed=4)
    new_lower, new_upper, new_costs = _perturbed_instances(lp, 2, columns=4, seed=9)
    warm = (np.full((2, 12), 0.25), np.full((2, 10), -0.5))

    def started():  # slot 4 parked: its status (-2) differs from a refilled slot's (-1)
        batch = batch_advance(batch_start(lp, lower, upper, costs), evaluations=1)
        return batch_park(batch, [4])

    copied_from = started()
    copied = batch_refill(copied_from, [4, 1], new_lower, new_upper, new_costs, warm_start=warm)
    donor = started()
    donor_upper = donor.var_upper
    status_before = donor.status  # a NumPy view of the status on CPU: that array is copied
    assert status_before[4] == pdlp.PARKED
    kept = status_before.copy()
    donated = batch_refill(
        donor, [4, 1], new_lower, new_upper, new_costs, warm_start=warm, donate=True
    )
    np.testing.assert_array_equal(status_before, kept)
    assert donated.status[4] == -1
    same = ("data", "state", "var_lower", "var_upper", "costs")  # not the fill times
    leaves = [jax.tree.leaves([getattr(b, f) for f in same]) for b in (copied, donated)]
    pairs = zip(*leaves, strict=True)
    for a, b in pairs:
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # the copying refill left its batch as it was; the donating one took its arrays
    np.testing.assert_array_equal(copied_from.var_lower, lower)
    assert not copied_from.state.x.is_deleted()
    assert donor.state.x.is_deleted() and donor.data.c.is_deleted()
    assert donated.var_upper is donor_upper
    np.testing.assert_array_equal(donated.var_upper[[4, 1]], new_upper)
    # the batch wrote into its own copies, not into the arrays it was started with (nor,
    # for a batch started with the LP's costs, into the LP's)
    np.testing.assert_array_equal(upper, _perturbed_instances(lp, 5, columns=3, seed=4)[1])
    c = lp.c.copy()
    one = batch_start(lp, lp.var_lower[None], lp.var_upper[None])
    refilled = batch_refill(one, [0], new_lower[:1], new_upper[:1], new_costs[:1], donate=True)
    np.testing.assert_array_equal(refilled.costs, new_costs[:1])
    np.testing.assert_array_equal(lp.c, c)
    with pytest.raises(ValueError, match="donate"):
        batch_refill(copied, [0], new_lower[:1], new_upper[:1], donate="yes")
    # a donated refill that the scaling refuses (duals beyond float32) writes nothing
    with jax.enable_x64(False):
        kept = started()
        before = [np.array(a) for a in (kept.var_upper, kept.costs, kept.offsets)]
        huge = (np.zeros((1, 12)), np.full((1, 10), 1e39))
        with pytest.raises(ValueError, match="beyond the solver's float32 range"):
            batch_refill(kept, [0], new_lower[:1], new_upper[:1], warm_start=huge, donate=True)
    for a, b in zip(before, (kept.var_upper, kept.costs, kept.offsets), strict=True):
        np.testing.assert_array_equal(a, b)
    assert not kept.state.x.is_deleted()


def test_refilled_slots_keep_their_own_objective_constant():
    from jaxopt_suite.lp import (
        batch_advance,
        batch_refill,
        batch_resize,
        batch_solution,
        batch_start,
    )

    base = _feasible_lp(5, m=10, n=12)
    lp = LP(base.c, base.A, base.row_lower, base.row_upper, base.var_lower, base.var_upper, 2.5)
    lower, upper, costs = _perturbed_instances(lp, 3, columns=2, seed=1)
    with jax.enable_x64(True):
        batch = batch_start(lp, lower, upper, costs)
        # slot 0: an objective three times the LP's, constant included; slot 2: the LP's
        batch = batch_refill(
            batch, [2, 0], lower[[2, 0]], upper[[2, 0]], costs[[2, 0]] * [[1.0], [3.0]],
            objective_offset=[2.5, 7.5],
        )  # fmt: skip
        # the offsets move with their slots (here into a batch of 4, slot 0 last)
        np.testing.assert_array_equal(
            batch_resize(batch, [1, 2, 0], 4).offsets[:3], [2.5, 2.5, 7.5]
        )
        out = batch_solution(batch_advance(batch))
    assert np.all(out.status == Status.OPTIMAL)
    for b, factor, offset in ((0, 3.0, 7.5), (1, 1.0, 2.5), (2, 1.0, 2.5)):
        exact = highs(
            LP(lp.c, lp.A, lp.row_lower, lp.row_upper, lower[b], upper[b]), c=costs[b] * factor
        ).fun
        assert abs(out.objective[b] - (exact + offset)) <= 1e-3 * (1 + abs(exact))
        assert out.dual_bound[b] <= exact + offset + 1e-9
        assert out.dual_bound[b] >= exact + offset - 1e-3 * (1 + abs(exact))
    with pytest.raises(ValueError, match=r"objective_offset must be one number or 2"):
        batch_refill(batch, [0, 1], lower[:2], upper[:2], objective_offset=[1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="objective_offset must be finite; entry 1 is nan"):
        batch_refill(batch, [0, 1], lower[:2], upper[:2], objective_offset=[1.0, np.nan])


def _three_slots():
    """A small LP and three bound-perturbed instances of it (the per-slot tests')."""
    lp = _feasible_lp(7, m=10, n=12)
    return (lp, *_perturbed_instances(lp, 3, columns=2, seed=2))


def test_a_refilled_slot_keeps_its_own_tolerance():
    """A slot refilled with its own tolerance stops on it, the others on the batch's, and
    each slot equals the same instance in a batch run at that tolerance throughout (it
    moves with its slot through a resize, and the thread groups keep it too)."""
    lp, lower, upper, costs = _three_slots()
    loose, tight = LPOptions(tolerance=1e-3), LPOptions(tolerance=1e-7)
    with jax.enable_x64(True):
        batch = batch_start(lp, lower, upper, costs, options=loose)
        batch = batch_refill(batch, [1], lower[[1]], upper[[1]], costs[[1]], tolerance=1e-7)
        batch = batch_resize(batch, [2, 1, 0], 4)  # slot 1 stays second
        out = batch_solution(batch_advance(batch, threads=2))
        alone_loose = solve_lp_batch(lp, lower, upper, costs, options=loose, threads=1)
        alone_tight = solve_lp_batch(lp, lower, upper, costs, options=tight, threads=1)
    assert np.all(out.status[:3] == Status.OPTIMAL)
    for slot, b, want in ((0, 2, alone_loose), (1, 1, alone_tight), (2, 0, alone_loose)):
        np.testing.assert_array_equal(out.x[slot], want.x[b])
        assert out.iterations[slot] == want.iterations[b]
    assert np.max(out.residuals[1]) <= 1e-7 < np.max(alone_loose.residuals[1])
    assert out.iterations[1] > alone_loose.iterations[1]
    for bad, message in (
        (0.0, "tolerance must be finite and > 0; entry 0 is 0.0"),
        ([1e-6, np.nan], "tolerance must be finite and > 0; entry 1 is nan"),
        ([1e-6] * 3, r"tolerance must be one number or 2 \(one per slot\)"),
    ):
        with pytest.raises(ValueError, match=message):
            batch_refill(batch, [0, 1], lower[:2], upper[:2], tolerance=bad)


def test_a_refilled_slot_keeps_its_own_iteration_limit():
    """A slot refilled with its own iteration limit stops there with ITERATION_LIMIT, its
    iterate that of the same instance in a batch whose limit it is throughout; the other
    slots run to the tolerance as without it (through a resize and two thread groups)."""
    lp, lower, upper, costs = _three_slots()
    options = LPOptions(tolerance=1e-7)
    with jax.enable_x64(True):
        free = solve_lp_batch(lp, lower, upper, costs, options=options, threads=1)
        cap = int(free.iterations[1]) // 2 // options.eval_every * options.eval_every
        assert cap >= options.eval_every
        capped = options._replace(max_iterations=cap)
        alone_capped = solve_lp_batch(lp, lower, upper, costs, options=capped, threads=1)
        batch = batch_start(lp, lower, upper, costs, options=options)
        batch = batch_refill(batch, [1], lower[[1]], upper[[1]], costs[[1]], max_iterations=cap)
        batch = batch_resize(batch, [2, 1, 0], 4)  # slot 1 stays second
        out = batch_solution(batch_advance(batch, threads=2))
    assert out.status[1] == Status.ITERATION_LIMIT and out.iterations[1] == cap
    np.testing.assert_array_equal(out.x[1], alone_capped.x[1])
    for slot, b in ((0, 2), (2, 0)):
        assert out.status[slot] == Status.OPTIMAL
        np.testing.assert_array_equal(out.x[slot], free.x[b])
        assert out.iterations[slot] == free.iterations[b]
    for bad, message in (
        (0, "max_iterations must be an integer >= 1; entry 0 is 0.0"),
        ([10, 2.5], "max_iterations must be an integer >= 1; entry 1 is 2.5"),
        ([10, np.nan], "max_iterations must be an integer >= 1; entry 1 is nan"),
        ([10] * 3, r"max_iterations must be one number or 2 \(one per slot\)"),
    ):
        with pytest.raises(ValueError, match=message):
            batch_refill(batch, [0, 1], lower[:2], upper[:2], max_iterations=bad)


def test_slot_arguments_are_indices():
    from jaxopt_suite.lp import (
        batch_advance,
        batch_park,
        batch_resize,
        batch_solution,
        batch_start,
    )

    lp = _feasible_lp(2, m=10, n=12)
    batch = batch_start(lp, np.tile(lp.var_lower, (3, 1)), np.tile(lp.var_upper, (3, 1)))
    # a boolean mask was read as the indices 0 and 1 ([False, True, True] parked slot 0
    # and left slot 2 running), 1.7 as slot 1
    mask = np.array([False, True, True])
    for call in (
        lambda: batch_park(batch, mask),
        lambda: batch_solution(batch, slots=mask),
        lambda: batch_resize(batch, mask, 3),
    ):
        with pytest.raises(ValueError, match="not a boolean mask .pass np.flatnonzero"):
            call()
    with pytest.raises(ValueError, match=r"slots must be integer slot indices, got \[1.7\]"):
        batch_park(batch, [1.7])
    with pytest.raises(ValueError, match=r"slots must be indices in \[0, 3\), got \[5\]"):
        batch_solution(batch, slots=[5])
    done = batch_advance(batch, evaluations=np.int64(1))  # a NumPy integer is an integer
    empty = batch_solution(done, slots=[])  # an IndexError before
    assert empty.x.shape == (0, 12) and empty.status.shape == (0,)
    parked = batch_park(batch, np.flatnonzero(mask))
    np.testing.assert_array_equal(np.asarray(parked.status)[1:], pdlp.PARKED)


def test_preconditioning_is_computed_once_per_matrix():
    pdlp.clear_caches()
    first = instances.random_sparse(30, 40, 0.1, seed=21)
    upper = first.var_upper.copy()
    upper[:3] = 0.5
    # a separately built LP on an equal (copied) matrix with other bounds
    second = LP(first.c, first.A.copy(), first.row_lower, first.row_upper, first.var_lower, upper)
    solve_lp(first)
    misses = pdlp._equilibrated.cache_info().misses
    device_misses = pdlp._device_copy.cache_info().misses
    solve_lp(second)
    assert pdlp._equilibrated.cache_info().misses == misses
    assert pdlp._device_copy.cache_info().misses == device_misses
    other = instances.random_sparse(30, 40, 0.1, seed=22)
    solve_lp(other)
    assert pdlp._equilibrated.cache_info().misses == misses + 1
    # the shared part is right for the second LP: same answer as from a cold cache
    warm = solve_lp(second)
    pdlp.clear_caches()
    cold = solve_lp(second)
    assert warm.objective == cold.objective and warm.iterations == cold.iterations


def test_an_lp_owns_copies_of_its_data():
    # changing the caller's array after a solve changed lp.c under the cached data: the
    # second solve reported "optimal" at objective 5 where the problem's optimum is 2
    c = np.array([1.0, 2.0])
    lp = LP(c, [[1.0, 1.0]], [1.0], [np.inf], [0.0, 0.0], [10.0, 10.0])
    first = solve_lp(lp)
    c[0] = 5.0
    np.testing.assert_array_equal(lp.c, [1.0, 2.0])
    assert solve_lp(lp).objective == first.objective
    with pytest.raises(ValueError, match="read-only"):
        lp.c[0] = 5.0
    with pytest.raises(ValueError, match="read-only"):
        lp.A.data[0] = 5.0
    # summing duplicate entries works on the LP's copy, not the caller's matrix
    A = sp.csr_array((np.array([1.0, 0.0, 2.0]), np.array([0, 0, 1]), np.array([0, 3])), (1, 2))
    lp = LP([1.0, 1.0], A, [1.0], [np.inf], [0.0, 0.0], [5.0, 5.0])
    np.testing.assert_array_equal(A.data, [1.0, 0.0, 2.0])
    np.testing.assert_array_equal(lp.A.toarray(), [[1.0, 2.0]])


@pytest.mark.parametrize("matrix", ["ell", "block"])
def test_an_lp_without_rows_solves_with_every_matrix_kind(matrix):
    # the sparse layouts failed to build for an empty matrix (broadcast and slice errors)
    lp = LP([1.0, -1.0], np.zeros((0, 2)), [], [], [0.0, -3.0], [4.0, 5.0])
    solution = solve_lp(lp, LPOptions(matrix=matrix))
    assert solution.status == Status.OPTIMAL
    assert solution.objective == pytest.approx(-5.0, rel=1e-6)


def test_bounds_beyond_1e20_are_read_as_infinite():
    # a big-M bound of 1e30 set the bound scaling and stalled the solve at x = 0
    # (ITERATION_LIMIT, optimum 1 at x = (1, 0)); 1e200 overflowed it (NUMERICAL_ERROR)
    lp = LP([1.0, 2.0], [[1.0, 1.0]], [1.0], [np.inf], [0.0, 0.0], [1e30, 10.0])
    solution = solve_lp(lp)
    assert solution.status == Status.OPTIMAL
    assert solution.objective == pytest.approx(1.0, rel=1e-4)
    assert solution.dual_bound <= 1.0 + 1e-9
    lp = LP([-1.0], [[1.0]], [-1e25], [1.0], [0.0], [1e200])
    solution = solve_lp(lp)
    assert solution.status == Status.OPTIMAL
    assert solution.objective == pytest.approx(-1.0, rel=1e-4)
    np.testing.assert_array_equal(lp.var_upper, [1e200])  # the LP itself is left as given
    batch = solve_lp_batch(lp, np.zeros((2, 1)), np.array([[1e30], [0.5]]))
    np.testing.assert_allclose(batch.objective, [-1.0, -0.5], rtol=1e-4)


_BIG_M_LPS = {
    # min x s.t. x >= 1 with a variable bound of 1e6 no solution reaches: the bound sets the
    # bound scale s_b near 1e-6, the row side becomes 1e-6, x sits at its bound 0 (dx = 0)
    # while the dual grows, and the primal weight, updated only when both moved, stayed at
    # 1: the dual crawled to ITERATION_LIMIT at x = 0 after 100000 iterations
    "variable": (LP([1.0], [[1.0]], [1.0], [np.inf], [0.0], [1e6]), 1.0),
    "two variables": (
        LP([1.0, 2.0], [[1.0, 1.0]], [3.0], [1e7], [0.0, 0.0], [1e6, 1e6]),
        3.0,
    ),
    # the big side on the row itself
    "row": (LP([1.0], [[1.0]], [1.0], [1e6], [0.0], [np.inf]), 1.0),
    "maximise": (LP([-1.0], [[1.0]], [-np.inf], [1.0], [-1e6], [1e6]), -1.0),
}


@pytest.mark.parametrize("x64", [False, True])
@pytest.mark.parametrize("name", sorted(_BIG_M_LPS))
def test_big_m_bounds_no_solution_reaches_do_not_stall_the_solve(x64, name):
    lp, optimum = _BIG_M_LPS[name]
    with jax.enable_x64(x64):
        solution = solve_lp(lp)
    if not x64 and name == "maximise" and solution.status == Status.ITERATION_LIMIT:
        # float32 at s_b = 7e-7: the scaled optimum x~ = 7e-7 lies 1e-6 times below the
        # dual's scale, where a step rounds to no step; the status says so, and the same
        # LP in float64 is solved below
        assert "jax_enable_x64" in solution.message
        return
    assert solution.status == Status.OPTIMAL, solution.message
    assert solution.iterations <= 2000
    # within the 1e-4 relative KKT tolerance of the optimum, as the other tests here
    assert abs(solution.objective - optimum) <= 5e-4 * (1 + abs(optimum))
    assert solution.dual_bound <= optimum + 1e-9


def test_pdhg_step_is_firmly_nonexpansive_in_the_restart_metric():
    # The restart test measures fixed-point errors in pdlp._pdhg_error; that metric had the
    # cross term's sign of Chambolle-Pock's K = A, while the step works with K = -A, and
    # this inequality failed for 167 of these 200 pairs.
    with jax.enable_x64(True):
        data, _ = pdlp._prepare(instances.random_sparse(20, 30, 0.2), LPOptions(matrix="dense"))
        rng = np.random.default_rng(0)
        failures = 0
        for _ in range(200):
            omega = rng.uniform(0.2, 5.0)
            x1, x2 = rng.normal(size=(2, 30)) * rng.uniform(0.1, 10.0)
            y1, y2 = rng.normal(size=(2, 20)) * rng.uniform(0.1, 10.0)
            tx1, ty1 = pdlp._pdhg(data, x1, y1, omega)
            tx2, ty2 = pdlp._pdhg(data, x2, y2, omega)
            step = pdlp._pdhg_error(data, tx1 - tx2, ty1 - ty2, omega) ** 2
            rest = (
                pdlp._pdhg_error(data, (x1 - tx1) - (x2 - tx2), (y1 - ty1) - (y2 - ty2), omega) ** 2
            )
            whole = pdlp._pdhg_error(data, x1 - x2, y1 - y2, omega) ** 2
            failures += int(step + rest > whole * (1 + 1e-9) + 1e-12)
        assert failures == 0


def test_kkt_counts_an_equality_rows_bound_once_and_does_not_overflow():
    inf = np.inf
    # x1 + x2 = 3 at x = 0: violation 3 against 1 + |b| = 4 (it counted b twice: 0.572)
    lp = LP([1.0, 1.0], [[1.0, 1.0]], [3.0], [3.0], [0.0, 0.0], [inf, inf])
    data, _ = pdlp._prepare(lp, LPOptions(matrix="dense"))
    primal, dual, gap = pdlp._kkt(data, jnp.zeros(2), jnp.zeros(1))
    assert float(primal) == pytest.approx(0.75, rel=1e-6)
    # float32 squares of bounds near 1e19 overflowed the norms (the residual was inf / inf)
    lp = LP([1.0, 1.0], [[1.0, 0.0]] * 4 + [[1.0, 1.0]], [1e19] * 5, [inf] * 5, [0, 0], [inf] * 2)
    data, _ = pdlp._prepare(lp, LPOptions(matrix="dense"))
    primal, dual, gap = pdlp._kkt(data, jnp.zeros(2), jnp.zeros(5))
    assert data.c.dtype == jnp.float32
    assert float(primal) == pytest.approx(np.sqrt(5) * 1e19 / (1 + np.sqrt(5) * 1e19), rel=1e-5)


def test_a_column_of_tiny_entries_no_longer_sets_the_objective_scaling_alone():
    """A column whose only entry is 1e-12 gets a column scale near 1e-12 and a scaled cost
    near 1e12; in the plain norm that set ``s_c`` alone and shrank the other costs to
    rounding (ITERATION_LIMIT at 1.07 on the first LP, at -0.60 against the optimum on the
    second). Left out of the norm, both solve; an LP without such a column keeps PDLP's
    ``s_c``."""
    p = LP([1.0, 1.0], np.array([[1.0, 1e-12]]), [1.0], [np.inf], [0, 0], [np.inf, 5])
    solved = solve_lp(p)
    assert solved.status == Status.OPTIMAL
    np.testing.assert_allclose(solved.objective, 1.0, rtol=1e-4)
    base = instances.random_sparse(20, 30, 0.15)
    tiny = sp.csr_array(([1e-12], ([0], [0])), shape=(20, 1))
    q = LP(np.r_[base.c, 1.0], sp.hstack([base.A, tiny]).tocsr(), base.row_lower,
           base.row_upper, np.r_[base.var_lower, 0.0], np.r_[base.var_upper, 5.0])  # fmt: skip
    solved = solve_lp(q)
    assert solved.status == Status.OPTIMAL
    np.testing.assert_allclose(solved.objective, highs(q).fun, rtol=1e-4)
    from jaxopt_suite.lp.precondition import bound_objective_scales, equilibrate

    row, col, _ = equilibrate(base.A)
    plain = 1.0 / (np.linalg.norm(base.c / col) + 1.0)
    assert bound_objective_scales(base, row, col)[1] == plain


def test_batch_warm_start_and_dual_bound_inputs_are_checked_as_the_lp_checks_its_own():
    """Complex or string bounds, costs and warm starts were cast (the imaginary part dropped
    with only a ComplexWarning, "0" read as 0), ``compact="no"`` read as true, and
    ``dual_bound`` failed on a non-LP with an AttributeError."""
    p = LP([1.0, 1.0], np.array([[1.0, 1.0]]), [1.0], [np.inf], [0, 0], [5, 5])
    lower, upper = np.zeros((2, 2)), np.full((2, 2), 5.0)
    for kwargs, name in (
        ({"var_lower": lower + 0j, "var_upper": upper}, "var_lower"),
        ({"var_lower": lower, "var_upper": [["5", "5"], ["5", "5"]]}, "var_upper"),
        ({"var_lower": lower, "var_upper": upper, "c": np.ones((2, 2)) + 1j}, "c"),
        ({"var_lower": lower, "var_upper": upper,
          "warm_start": (np.zeros((2, 2)) + 1j, np.zeros((2, 1)))}, "warm_start x"),
    ):  # fmt: skip
        with pytest.raises(ValueError, match=f"^{name} must hold real numbers"):
            solve_lp_batch(p, **kwargs)
    with pytest.raises(ValueError, match="compact"):
        solve_lp_batch(p, lower, upper, compact="no")
    with pytest.raises(ValueError, match="^warm_start y must hold real numbers"):
        solve_lp(p, warm_start=(np.zeros(2), np.zeros(1) + 1j))
    with pytest.raises(TypeError, match="lp must be an LP, got str"):
        dual_bound("x", [1.0])
    with pytest.raises(ValueError, match="^y must hold real numbers"):
        dual_bound(p, [1 + 1j])


def test_a_finite_warm_start_beyond_float32_is_an_input_error():
    """A warm start of 1e39 passed the finiteness check, overflowed float32 on the device
    and ended NUMERICAL_ERROR with NaN; it is the input's error, named, in both paths
    (the solver in float32, whatever the session's setting)."""
    with jax.enable_x64(False):
        _check_float32_warm_starts()


def _check_float32_warm_starts():
    p = LP([1.0, 1.0], np.array([[1.0, 1.0]]), [1.0], [np.inf], [0, 0], [np.inf, np.inf])
    with pytest.raises(ValueError, match="warm_start y at 0 is .* beyond the solver's float32"):
        solve_lp(p, warm_start=(np.zeros(2), np.full(1, 1e39)))
    with pytest.raises(ValueError, match="warm_start x at instance 1, index 0 is .* float32"):
        solve_lp_batch(
            p, np.zeros((2, 2)), np.full((2, 2), np.inf),
            warm_start=(np.array([[0.0, 0.0], [1e39, 0.0]]), np.zeros((2, 1))),
        )  # fmt: skip
    assert solve_lp(p, warm_start=(np.zeros(2), np.full(1, 1e3))).status == Status.OPTIMAL


def test_nan_data_is_named_by_the_row_or_column_name():
    ok = dict(c=[1.0, 1.0], A=[[1.0, 1.0]], row_lower=[1.0], row_upper=[2.0],
              var_lower=[0.0, 0.0], var_upper=[1.0, 1.0], row_names=["cap"],
              col_names=["x", "y"])  # fmt: skip
    with pytest.raises(ValueError, match="row_lower contains NaN at row 'cap' \\(index 0\\)"):
        LP(**{**ok, "row_lower": [np.nan]})
    with pytest.raises(ValueError, match="c contains NaN at column 'y' \\(index 1\\)"):
        LP(**{**ok, "c": [1.0, np.nan]})
    with pytest.raises(ValueError, match="var_upper contains NaN at column 'x' \\(index 0\\)"):
        LP(**{**ok, "var_upper": [np.nan, 1.0]})


def test_the_suites_lps_keep_pdlps_objective_scaling():
    """The outlier rule of ``s_c`` changes nothing on the ``lp`` and ``pwl`` suites' LPs: on
    each, the largest scaled cost is far below ``COST_OUTLIER`` times the norm of the rest."""
    from benchmarks import lp as lp_suite
    from jaxopt_suite.lp.precondition import COST_OUTLIER, bound_objective_scales, equilibrate
    from jaxopt_suite.pwl import instances as pwl_instances

    lps = list(lp_suite._instances(quick=False))
    lps += [pwl_instances.build(spec).compile().lp for spec in pwl_instances.SUITE]
    assert len(lps) == 50
    worst = 0.0
    for p in lps:
        row, col, _ = equilibrate(p.A)
        scaled = np.sort(np.abs(p.c) / col)
        worst = max(worst, scaled[-1] / np.linalg.norm(scaled[:-1]))
        plain = 1.0 / (np.linalg.norm(p.c / col) + 1.0)
        assert bound_objective_scales(p, row, col)[1] == plain
    assert worst < 2.0 < COST_OUTLIER


def test_a_feasible_set_of_one_point_is_not_certified_infeasible():
    """``x = 0`` pinned, ``l0 + l1 = 1``, ``x = 10 l1``: the only feasible point is ``(0, 1,
    0)``. Its dual optimal set is unbounded along a ray of exact objective 0 and no
    violation, and the iterates run off along it; the ray's computed objective, rounding
    (0.4 machine epsilons of its terms' size), was positive and the LP was reported
    PRIMAL_INFEASIBLE, alone and in a batch."""
    p = LP([0.0, 0.0, -5.0], np.array([[0.0, 1.0, 1.0], [1.0, 0.0, -10.0]]), [1.0, 0.0],
           [1.0, 0.0], [0.0, 0.0, 0.0], [0.0, 1.0, 1.0])  # fmt: skip
    solved = solve_lp(p)
    assert solved.status == Status.OPTIMAL, solved.message
    np.testing.assert_allclose(solved.objective, 0.0, atol=1e-4)
    batch = solve_lp_batch(p, np.zeros((2, 3)), np.array([[0.0, 1, 1], [1.0, 1, 1]]))
    np.testing.assert_array_equal(batch.status, [Status.OPTIMAL, Status.OPTIMAL])
    np.testing.assert_allclose(batch.objective, [0.0, -0.5], atol=1e-3)


@pytest.mark.parametrize("x64", [False, True])
def test_the_y_of_an_infeasible_solution_proves_it_exactly(x64):
    # PDLP's infeasibility test is first-order, at the data's scale; infeasibility_bound
    # checks the returned y, the ray, exactly (the branch-and-bound drops a node only on
    # that proof: with the last iterate as y, warm-started nodes' y proved nothing and four
    # tests of tests/pwl/test_bnb.py ended INCOMPLETE)
    from jaxopt_suite.lp import infeasibility_bound

    lps = [instances.infeasible(), instances.infeasible_transportation(6, 8, seed=3)]
    with jax.enable_x64(x64):
        for lp in lps:
            solution = solve_lp(lp)
            assert solution.status == Status.PRIMAL_INFEASIBLE
            assert infeasibility_bound(lp, solution.y) > 0.0
            batch = solve_lp_batch(lp, lp.var_lower[None], lp.var_upper[None])
            assert infeasibility_bound(lp, np.asarray(batch.y[0])) > 0.0
    # a feasible LP: no y proves it infeasible, nor a y whose entries sit on infinite sides
    feasible = _feasible_lp(1)
    rng = np.random.default_rng(1)
    for _ in range(20):
        assert infeasibility_bound(feasible, rng.normal(size=feasible.num_rows) * 1e3) <= 0.0
    # other column bounds: the transportation's rows with x <= 0 leave demand unmet
    lp = lps[1]
    y = np.r_[np.zeros(6), np.ones(8)]
    assert infeasibility_bound(lp, y, lp.var_lower, np.zeros(lp.num_cols)) > 0.0
    with pytest.raises(ValueError, match=r"var_upper must be a vector of 48 numbers"):
        infeasibility_bound(lp, y, lp.var_lower, np.zeros(3))
