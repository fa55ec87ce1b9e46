"""repair_rows: a nearly feasible point onto the rows, within the bounds."""

import numpy as np
import pytest
import scipy.sparse as sp

from jaxopt_suite.lp.repair import repair_rows, row_violation


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
