"""Row-implied variable bounds, and the safe dual bound: free columns and rounding."""

from fractions import Fraction

import jax
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxopt_suite.lp import LP, LPOptions, Status, dual_bound, solve_lp, solve_lp_batch
from jaxopt_suite.lp.bounds import implied_bounds
from tests.lp.conftest import highs


def _lp_with_free_columns(seed, m=8, n=12, free=4):
    """Rows of every type around ``A x_f`` for an interior ``x_f``; the first ``free``
    columns free, each also in an equality row with bounded columns (so its rows confine
    it), the rest in ``[0, 3]``."""
    rng = np.random.default_rng(seed)
    A = sp.random(m, n, density=0.4, random_state=seed, format="lil")
    for j in range(free):  # x_j = sum of two bounded columns, in a row of its own
        A[j, :] = 0.0
        A[j, j] = 1.0
        A[j, free + 2 * j % (n - free)] = -rng.uniform(0.5, 2.0)
        A[j, free + (2 * j + 1) % (n - free)] = -rng.uniform(0.5, 2.0)
    A = sp.csr_array(A)
    x_f = rng.uniform(0.5, 2.5, n)
    ax = A @ x_f
    kinds = rng.integers(0, 4, m)
    kinds[:free] = 0
    width = rng.uniform(0.1, 1.0, m)
    lo = np.where(kinds == 1, -np.inf, np.where(kinds == 0, ax, ax - width))
    hi = np.where(kinds == 2, np.inf, np.where(kinds == 0, ax, ax + width))
    lower = np.r_[np.full(free, -np.inf), np.zeros(n - free)]
    upper = np.r_[np.full(free, np.inf), np.full(n - free, 3.0)]
    return LP(rng.normal(size=n), A, lo, hi, lower, upper)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_implied_bounds_contain_the_feasible_set(seed):
    """Each column's implied range holds its true range over the feasible set (its min and
    max by HiGHS), and the free columns' come out finite."""
    lp = _lp_with_free_columns(seed)
    lower, upper = implied_bounds(lp)
    assert np.all(np.isfinite(lower[:4])) and np.all(np.isfinite(upper[:4]))
    for j in range(lp.num_cols):
        e = np.zeros(lp.num_cols)
        e[j] = 1.0
        low, high = highs(lp, e), highs(lp, -e)
        assert low.status == high.status == 0
        assert lower[j] <= low.fun + 1e-7 * (1 + abs(low.fun))
        assert upper[j] >= -high.fun - 1e-7 * (1 + abs(high.fun))
    # never looser than the given bounds
    assert np.all(lower >= lp.var_lower) and np.all(upper <= lp.var_upper)


def test_a_chain_of_rows_takes_a_round_per_link():
    # x0 = x1 + x3, x1 = x2, x2 = x4, with x3, x4 in [0, 1]: x2 is bounded in the first
    # round, x1 in the second, x0 in the third
    A = np.array(
        [[1.0, -1.0, 0.0, -1.0, 0.0], [0.0, 1.0, -1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0, -1.0]]
    )
    free = np.full(3, np.inf)
    lp = LP(np.zeros(5), A, np.zeros(3), np.zeros(3), np.r_[-free, 0, 0], np.r_[free, 1, 1])
    for rounds, finite in ((1, 1), (2, 2), (3, 3)):
        lower, upper = implied_bounds(lp, max_rounds=rounds)
        assert np.isfinite(lower[:3]).sum() == finite == np.isfinite(upper[:3]).sum()
    lower, upper = implied_bounds(lp)
    np.testing.assert_allclose(lower, [0, 0, 0, 0, 0], atol=1e-8)
    np.testing.assert_allclose(upper, [2, 1, 1, 1, 1], atol=1e-8)
    # rows that give no bound: a free column in a one-sided row with another free column
    lp = LP(np.zeros(2), np.array([[1.0, 1.0]]), [0.0], [np.inf], [-np.inf] * 2, [np.inf] * 2)
    lower, upper = implied_bounds(lp)
    assert np.all(lower == -np.inf) and np.all(upper == np.inf)


def test_a_free_column_no_longer_makes_the_bound_minus_infinity():
    # min x0 with x0 = x1 + x2, x1, x2 in [0, 1]: optimum 0. y = 0.9 leaves reduced cost
    # 0.1 on the free x0, which made the bound -inf; its rows bound it below by 0
    lp = LP([1.0, 0.0, 0.0], np.array([[1.0, -1.0, -1.0]]), [0.0], [0.0],
            [-np.inf, 0.0, 0.0], [np.inf, 1.0, 1.0])  # fmt: skip
    bound, lam = dual_bound(lp, np.array([0.9]))
    np.testing.assert_allclose(lam, [0.1, 0.9, 0.9])
    assert -1e-300 < bound <= 0.0  # 0 less the rounding margin
    # a bound beyond the solver's infinity (1e20) is read the same way, not as 1e30 x 0.1
    wide = LP(lp.c, lp.A, lp.row_lower, lp.row_upper, [-1e30, 0.0, 0.0], lp.var_upper)
    assert -1e-300 < dual_bound(wide, np.array([0.9]))[0] <= 0.0
    # where no row confines the column the bound stays -inf (x0 + x1 >= 0, both free)
    loose = LP([1.0, 0.0], np.array([[1.0, 1.0]]), [0.0], [np.inf], [-np.inf] * 2, [np.inf] * 2)
    assert dual_bound(loose, np.array([0.5]))[0] == -np.inf


@pytest.mark.parametrize("seed", range(3))
def test_solutions_with_free_columns_carry_a_finite_safe_bound(seed):
    lp = _lp_with_free_columns(seed)
    optimum = highs(lp, lp.c).fun
    early = solve_lp(lp, LPOptions(max_iterations=64))
    assert np.isfinite(early.dual_bound)
    assert early.dual_bound <= optimum + 1e-9 * (1 + abs(optimum))
    with jax.enable_x64(True):
        done = solve_lp(lp, LPOptions(tolerance=1e-8))
    assert done.status == Status.OPTIMAL, done.message
    assert optimum - 1e-5 * (1 + abs(optimum)) <= done.dual_bound
    assert done.dual_bound <= optimum + 1e-9 * (1 + abs(optimum))


def test_batched_bounds_of_free_columns_inside_and_outside_the_lps_box():
    """An instance inside the LP's box uses the LP's implied bounds; one with a wider box
    (here the bounded columns widened to [0, 30]) its own: both bounds stay below each
    instance's optimum; the outer one equals the single-LP bound of the same y, the inner
    one is at most it."""
    lp = _lp_with_free_columns(4)
    lower = np.tile(lp.var_lower, (2, 1))
    upper = np.tile(lp.var_upper, (2, 1))
    upper[0, 4:] = 2.6  # inside (every interior point x_f lies in [0.5, 2.5])
    upper[1, 4:] = 30.0  # outside
    result = solve_lp_batch(lp, lower, upper, options=LPOptions(max_iterations=64))
    for b in range(2):
        instance = LP(lp.c, lp.A, lp.row_lower, lp.row_upper, lower[b], upper[b])
        optimum = highs(instance, lp.c).fun
        assert np.isfinite(result.dual_bound[b])
        assert result.dual_bound[b] <= optimum + 1e-9 * (1 + abs(optimum))
        single = dual_bound(instance, result.y[b])[0]
        if b == 1:  # its own box: the single LP's bound (to the sums' rounding)
            np.testing.assert_allclose(result.dual_bound[b], single, rtol=1e-13)
        else:  # the LP's looser implied bounds: at most the instance's own
            assert result.dual_bound[b] <= single + 1e-13 * (1 + abs(single))


def test_bad_input_is_named():
    lp = LP([1.0, 0.0], np.array([[1.0, -1.0]]), [0.0], [0.0], [-np.inf, 0.0], [np.inf, 1.0])
    with pytest.raises(TypeError, match="lp must be an LP"):
        implied_bounds("lp")
    with pytest.raises(ValueError, match=r"shape \(2,\) or \(B, 2\)"):
        implied_bounds(lp, np.zeros(3), np.ones(3))
    with pytest.raises(ValueError, match="must not contain NaN"):
        implied_bounds(lp, [np.nan, 0.0], [1.0, 1.0])
    with pytest.raises(ValueError, match="max_rounds"):
        implied_bounds(lp, max_rounds=-1)
    # a batch keeps its shape; zero rounds changes nothing
    lower, upper = implied_bounds(lp, np.tile(lp.var_lower, (3, 1)), np.tile(lp.var_upper, (3, 1)))
    assert lower.shape == upper.shape == (3, 2)
    np.testing.assert_array_equal(implied_bounds(lp, max_rounds=0)[0], lp.var_lower)


def test_a_row_whose_sum_rounds_away_a_small_term_bounds_nothing_it_should_not():
    # x0 + x1 <= 1 with x0 in [-1e16, 1e16], x1 in [-0.7, 0]: x0 reaches 1.7. The row's
    # minimum activity -1e16 - 0.7 rounds to -1e16, so the other column's term comes out 0
    # and the derived cap 1: the margin must cover the rounding of the huge own term
    lp = LP([0.0, 0.0], np.array([[1.0, 1.0]]), [-np.inf], [1.0], [-1e16, -0.7], [1e16, 0.0])
    lower, upper = implied_bounds(lp)
    assert upper[0] >= 1.7 and lower[1] <= -0.7


def _exact_lagrangian(lp, y):
    """The Lagrangian value of the float ``y`` in rational arithmetic (finite boxes), and
    the size of its terms: ``sum |y_i side_i| + sum_j (|c_j| + |a_j|^T |y|) max|bound_j|``."""
    A = lp.A.tocsc()
    value = Fraction(lp.objective_offset)
    size = Fraction(abs(lp.objective_offset))
    for i, yi in enumerate(y):
        side = lp.row_lower[i] if yi > 0 else lp.row_upper[i] if yi < 0 else 0.0
        if yi != 0 and not np.isfinite(side):
            return -np.inf, None
        value += Fraction(yi) * Fraction(side)
        size += abs(Fraction(yi) * Fraction(side))
    for j in range(lp.num_cols):
        entries = slice(A.indptr[j], A.indptr[j + 1])
        pairs = list(zip(A.data[entries], y[A.indices[entries]], strict=True))
        lam = Fraction(lp.c[j]) - sum((Fraction(a) * Fraction(v) for a, v in pairs), Fraction())
        value += lam * Fraction(lp.var_lower[j] if lam > 0 else lp.var_upper[j])
        reach = max(abs(lp.var_lower[j]), abs(lp.var_upper[j]))
        size += (abs(lp.c[j]) + sum(abs(Fraction(a) * Fraction(v)) for a, v in pairs)) * reach
    return value, size


@pytest.mark.parametrize("seed", range(4))
def test_the_safe_bound_lies_below_the_exact_lagrangian_value(seed):
    """The float sums overshot the exact value of ``y`` in 42 of these 100 draws before
    the rounding margins; the bound now lies below it, by at most 1e-13 of the terms'
    size."""
    for draw in range(25):
        rng = np.random.default_rng(100 * seed + draw)
        m, n = 15, 30
        A = sp.random(m, n, density=0.4, random_state=rng, format="csr")
        A.data = rng.normal(size=A.nnz) * 10.0 ** rng.uniform(-3, 3, A.nnz)
        ax = A @ rng.uniform(-1, 1, n)
        sides = rng.integers(0, 3, m)  # two-sided, lower only, upper only
        lo = np.where(sides == 2, -np.inf, ax - rng.uniform(0, 1, m))
        hi = np.where(sides == 1, np.inf, ax + rng.uniform(0, 1, m))
        lp = LP(rng.normal(size=n) * 10.0 ** rng.uniform(-2, 2, n), A, lo, hi,
                -rng.uniform(1, 2, n), rng.uniform(1, 2, n))  # fmt: skip
        y = rng.normal(size=m)  # of the sign a one-sided row allows
        y = np.where(sides == 1, np.abs(y), np.where(sides == 2, -np.abs(y), y))
        bound = dual_bound(lp, y)[0]
        exact, size = _exact_lagrangian(lp, y)
        assert np.isfinite(bound)
        assert Fraction(bound) <= exact
        assert exact - Fraction(bound) <= 1e-13 * size


def test_the_bound_of_the_optimal_dual_no_longer_rounds_above_the_optimum():
    # min 0.1 x s.t. x = 3, x >= 0: the optimum is 3 * fl(0.1), exactly, and y = fl(0.1) is
    # the optimal dual; its float value fl(3 * 0.1) = 0.30000000000000004 lies above it
    lp = LP([0.1], np.array([[1.0]]), [3.0], [3.0], [0.0], [np.inf])
    bound = dual_bound(lp, np.array([0.1]))[0]
    assert Fraction(bound) <= 3 * Fraction(0.1)
    assert 3 * Fraction(0.1) - Fraction(bound) <= 1e-15


def test_a_reduced_cost_that_rounds_to_zero_is_taken_at_its_exact_sign():
    # min x over a free x with x + t >= 1 (t in [0, 1]) and x >= -5: the rows bound x
    # below (by 0), not above. y = (1, 2^-60): the float reduced cost 1 - fl(1 + 2^-60) is
    # 0, the exact one -2^-60 needs x's upper bound: the Lagrangian value is -inf, which
    # the float sum took as about 0
    lp = LP([1.0, 0.0], np.array([[1.0, 1.0], [1.0, 0.0]]), [1.0, -5.0], [np.inf] * 2,
            [-np.inf, 0.0], [np.inf, 1.0])  # fmt: skip
    bound, lam = dual_bound(lp, np.array([1.0, 2.0**-60]))
    assert lam[0] == 0.0
    assert bound == -np.inf
    # exactly zero (y = (1, 0)): the free column's term is 0, and the bound finite
    bound = dual_bound(lp, np.array([1.0, 0.0]))[0]
    assert -1e-13 < bound <= 0.0  # 1 - 1 (t at its upper bound), less the rounding margin
    # on the row -5 <= x <= 5, y = (1, -2^-60) leaves the exact reduced cost +2^-60 (its
    # float value again 0): x needs its lower bound, which the rows imply (0, less a margin)
    lp2 = LP([1.0, 0.0], lp.A, [1.0, -5.0], [np.inf, 5.0], lp.var_lower, lp.var_upper)
    bound = dual_bound(lp2, np.array([1.0, -(2.0**-60)]))[0]
    assert -1e-6 < bound < 0.0


def test_the_bound_builds_the_moduli_of_a_once_per_lp(monkeypatch):
    """The reduced costs' rounding intervals need ``|A|^T`` and the column counts; the
    branch-and-bound asks for bounds every round, so they are built once per LP, and are
    the modulus and counts of this LP's ``A`` (not of another's)."""
    from jaxopt_suite.lp import pdlp

    first, second = _lp_with_free_columns(0), _lp_with_free_columns(1)
    builds = []
    original_abs = abs

    y = np.random.default_rng(2).normal(size=(3, first.A.shape[0]))
    lower = np.broadcast_to(first.var_lower, (3, first.A.shape[1]))
    upper = np.broadcast_to(first.var_upper, (3, first.A.shape[1]))
    costs = np.broadcast_to(first.c, (3, first.A.shape[1]))
    monkeypatch.setattr(
        pdlp,
        "abs",
        lambda v: (sp.issparse(v) and builds.append(v)) or original_abs(v),
        raising=False,
    )
    for _ in range(3):
        pdlp._dual_bounds(first, costs, lower, upper, y)
    assert len(builds) == 1
    moduli, counts = pdlp._column_moduli(first)
    np.testing.assert_array_equal(moduli.toarray(), np.abs(first.A.toarray()).T)
    np.testing.assert_array_equal(counts, (first.A.toarray() != 0).sum(axis=0) + 2)
    other, _ = pdlp._column_moduli(second)
    np.testing.assert_array_equal(other.toarray(), np.abs(second.A.toarray()).T)
    assert len(builds) == 2
    with pytest.raises(ValueError):
        counts[0] = 1.0  # read-only: shared by every later call
