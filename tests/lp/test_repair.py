"""repair_rows: a nearly feasible point onto the rows, within the bounds."""

import numpy as np
import pytest
import scipy.sparse as sp

from jaxopt_suite.lp import repair as repair_module
from jaxopt_suite.lp.repair import _least_norm_step, repair_rows, row_violation


def _feasible_system(seed, m=30, n=50):
    rng = np.random.default_rng(seed)
    A = sp.random(m, n, density=0.2, random_state=seed, format="csr")
    A = A + sp.eye(m, n, format="csr")  # no empty row
    point = rng.uniform(0.2, 0.8, n)  # strictly inside [0, 1]
    act = A @ point
    kind = rng.integers(0, 3, m)
    # 0: equality at A point; 1: A point <= side with slack; 2: two-sided, at its upper side
    row_lower = np.select([kind == 0, kind == 1], [act, -np.inf], act - 0.1)
    row_upper = np.select([kind == 0, kind == 1], [act, act + 0.05], act)
    return A, row_lower, row_upper, np.zeros(n), np.ones(n), point


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_repairs_a_perturbed_point_to_rounding_accuracy(seed):
    A, rl, ru, lo, hi, point = _feasible_system(seed)
    rng = np.random.default_rng(10 + seed)
    noisy = point + 1e-5 * rng.normal(size=point.size)
    before = row_violation(A, rl, ru, lo, hi, noisy)
    assert before > 1e-7  # the equalities are off
    fixed, after = repair_rows(A, rl, ru, lo, hi, noisy)
    assert after <= 1e-12
    assert after == row_violation(A, rl, ru, lo, hi, fixed)
    assert np.all((fixed >= lo) & (fixed <= hi))
    # a minimum-norm correction: it moves the point by about as much as the noise
    assert np.max(np.abs(fixed - noisy)) < 1e-3


def test_columns_at_a_bound_move_when_the_interior_cannot_finish():
    # x0 + x1 = 1 with x0 pinned at its upper bound 0.25 by the start and x1 at 0: only
    # moving x1 off its bound repairs the row
    A = sp.csr_array(np.array([[1.0, 1.0]]))
    fixed, after = repair_rows(A, [1.0], [1.0], [0.0, 0.0], [0.25, 1.0], [0.25, 0.0])
    assert after <= 1e-12
    np.testing.assert_allclose(fixed, [0.25, 0.75])


def test_an_unrepairable_point_keeps_its_bounds_and_reports_the_violation():
    # x0 + x1 = 3 with both in [0, 1]: no point meets the row
    A = sp.csr_array(np.array([[1.0, 1.0]]))
    fixed, after = repair_rows(A, [3.0], [3.0], [0.0, 0.0], [1.0, 1.0], [0.5, 0.5])
    np.testing.assert_allclose(fixed, [1.0, 1.0])
    assert after == pytest.approx(1.0 / 4.0)  # (3 - 2) / (1 + 3)


def test_bad_input_is_named():
    A = sp.eye(3, format="csr")
    with pytest.raises(ValueError, match=r"v, lower and upper must have shape \(3,\)"):
        repair_rows(A, np.zeros(3), np.zeros(3), np.zeros(3), np.ones(3), np.zeros(2))
    with pytest.raises(ValueError, match=r"row_lower and row_upper must have shape \(3,\)"):
        repair_rows(A, np.zeros(2), np.zeros(3), np.zeros(3), np.ones(3), np.zeros(3))
    with pytest.raises(ValueError, match="v must be finite"):
        repair_rows(A, np.zeros(3), np.zeros(3), np.zeros(3), np.ones(3), [0.0, np.nan, 0.0])


def test_interior_columns_that_stall_hand_over_at_once():
    # x0 = 0.3 and x0 + x1 = 1 with x0 inside [0, 1] and x1 at its lower bound: the
    # interior column alone reaches a least-squares point (x0 = 0.65, both rows off by
    # 0.35) and stalls there; the columns at a bound take over in the round that stalls,
    # not after half the rounds, so two rounds suffice
    A = sp.csr_array(np.array([[1.0, 0.0], [1.0, 1.0]]))
    fixed, after = repair_rows(
        A, [0.3, 1.0], [0.3, 1.0], [0.0, 0.0], [1.0, 1.0], [0.3, 0.0], rounds=2
    )
    assert after <= 1e-12
    np.testing.assert_allclose(fixed, [0.3, 0.7], atol=1e-12)


@pytest.mark.parametrize("consistent", [True, False])
def test_least_norm_step_is_the_pseudo_inverse_solution(consistent, monkeypatch):
    # rank-deficient rows, as a balanced transportation problem's supplies and demands:
    # the row sums of the two blocks are equal
    supplies, demands = 3, 4
    rows = [np.kron(np.eye(supplies)[i], np.ones(demands)) for i in range(supplies)]
    rows += [np.kron(np.ones(supplies), np.eye(demands)[j]) for j in range(demands)]
    dense = np.array(rows) * np.linspace(1.0, 2.0, supplies * demands)
    dense[:, -1] = 0.0  # one column unused
    rng = np.random.default_rng(3)
    r = dense @ rng.normal(size=dense.shape[1]) if consistent else rng.normal(size=len(rows))
    expected = np.linalg.pinv(dense) @ r
    system = sp.csr_array(dense)
    best = np.linalg.norm(dense @ expected - r)

    def check(step, atol):
        # the least residual, and of the steps that reach it the shortest: the
        # regularisation delta = 1e-10 |A|_max^2 leaves about delta / sigma_min^2 of the
        # residual (the least nonzero sigma^2 is 3.5 here), and where the rows cannot be met the
        # step carries rounding / delta of the unreachable residual (about 1e-6)
        assert np.linalg.norm(dense @ step - r) <= best + 1e-9 * np.linalg.norm(r)
        np.testing.assert_allclose(step, expected, rtol=0, atol=atol)

    check(_least_norm_step(system, r), 1e-8 if consistent else 1e-5)

    # LSQR takes over where the factorisation fails
    def failing(_):
        raise RuntimeError("Factor is exactly singular")

    monkeypatch.setattr(repair_module, "splu", failing)
    check(_least_norm_step(system, r), 1e-8)
    assert _least_norm_step(sp.csr_array((0, 4)), np.zeros(0)).shape == (4,)


@pytest.mark.parametrize("c", [1e-8, 1e-6, 1e-4])
@pytest.mark.parametrize("mixed", [False, True])
def test_rows_of_small_or_mixed_scale_are_repaired(c, mixed):
    # the regularisation and the stall test act on rows scaled to norm 1: a row of tiny
    # coefficients (alone, or next to a row of coefficients about 1) is not shrunk away
    if mixed:
        A, side = np.array([[c, 0.0], [0.0, 1.0]]), [c, 0.5]
    else:
        A, side = np.array([[c, c], [c, -c]]), [c, 0.0]
    lo, hi, start = -10 * np.ones(2), 10 * np.ones(2), np.zeros(2)
    assert row_violation(A, side, side, lo, hi, start) > 1e-9
    fixed, after = repair_rows(sp.csr_array(A), side, side, lo, hi, start)
    assert after <= 1e-12  # the tolerance
    expected = [0.5, 0.5] if not mixed else [1.0, 0.5]
    np.testing.assert_allclose(fixed, expected, rtol=1e-9)


def test_rows_out_of_reach_end_at_the_least_squares_point():
    # x0 = 1 and x0 = 2: no point meets both; the repair stops at x0 = 1.5 (each row off
    # by 0.5, to the regularisation's 1e-10) instead of repeating steps that change
    # nothing
    A = sp.csr_array(np.array([[1.0], [1.0]]))
    fixed, after = repair_rows(A, [1.0, 2.0], [1.0, 2.0], [-10.0], [10.0], [0.0])
    np.testing.assert_allclose(fixed, [1.5], rtol=1e-9)
    assert after == pytest.approx(0.5 / 2.0, rel=1e-9)  # (1.5 - 1) / (1 + 1)


def test_rows_out_of_reach_take_the_row_weighted_least_squares_point():
    # x0 = 1 and 2 x0 = 4 with the rows scaled to norm 1 (x0 = 1, x0 = 2): x0 = 1.5, not
    # the unweighted least-squares 1.8
    A = sp.csr_array(np.array([[1.0], [2.0]]))
    fixed, _ = repair_rows(A, [1.0, 4.0], [1.0, 4.0], [-10.0], [10.0], [0.0])
    np.testing.assert_allclose(fixed, [1.5], rtol=1e-9)


def test_a_row_without_a_free_column_does_not_end_the_pass():
    # x0 fixed at 0 with x0 = 1e-4 (violated, out of any column's reach) next to
    # 1e4 x1 = 1e-3 with x1 free: scaled to norm 1 the second row's residual is 1e-7, and
    # next to the first row's constant 1e-4 its repair would look like no progress
    A = sp.csr_array(np.array([[1.0, 0.0], [0.0, 1e4]]))
    side = [1e-4, 1e-3]
    fixed, after = repair_rows(A, side, side, [0.0, -1.0], [0.0, 1.0], [0.0, 0.0])
    np.testing.assert_allclose(fixed, [0.0, 1e-7], rtol=1e-9)
    assert after == pytest.approx(1e-4 / (1 + 1e-4))  # the first row alone
