"""Preconditioning: the scaled problem is the same LP, and Ruiz equilibrates."""

import numpy as np
import pytest
import scipy.sparse as sp

from jaxopt_suite.lp import LP, precondition
from jaxopt_suite.lp.precondition import equilibrate


def _badly_scaled_lp(seed=0, m=12, n=9):
    rng = np.random.default_rng(seed)
    A = sp.random(m, n, density=0.5, random_state=seed, format="csr")
    A = sp.csr_array(
        sp.diags_array(10.0 ** rng.uniform(-3, 3, m))
        @ A
        @ sp.diags_array(10.0 ** rng.uniform(-2, 2, n))
    )
    lo = -rng.uniform(1, 5, m)
    hi = np.where(rng.random(m) < 0.5, np.inf, rng.uniform(1, 5, m))
    return LP(rng.normal(size=n) * 100, A, lo, hi, -np.ones(n), np.full(n, np.inf))


def test_scaled_problem_is_the_same_lp():
    lp = _badly_scaled_lp()
    s = precondition(lp)
    x = np.random.default_rng(1).normal(size=lp.num_cols)
    y = np.random.default_rng(2).normal(size=lp.num_rows)
    x_s, y_s = s.scale_primal(x), s.scale_dual(y)
    # A~ x~ = s_b D_r^-1 A x and A~^T y~ = s_c D_c^-1 A^T y, so row bounds scale with s_b / D_r
    # and reduced costs with s_c / D_c: feasibility and complementarity are preserved.
    np.testing.assert_allclose(s.A @ x_s, s.bound * (lp.A @ x) / s.row, rtol=1e-12)
    np.testing.assert_allclose(s.A.T @ y_s, s.objective * (lp.A.T @ y) / s.col, rtol=1e-12)
    np.testing.assert_allclose(s.unscale_primal(x_s), x, rtol=1e-12)
    np.testing.assert_allclose(s.unscale_dual(y_s), y, rtol=1e-12)
    assert 0 < s.bound <= 1 and 0 < s.objective <= 1


def test_ruiz_equilibrates_rows_and_columns():
    lp = _badly_scaled_lp(3)
    raw = abs(lp.A)
    assert raw.max(axis=1).toarray().max() / raw.max(axis=1).toarray().min() > 1e3
    s = precondition(lp, ruiz_iterations=20, pock_chambolle_alpha=None, scale_bounds=False)
    scaled = abs(s.A)
    rows = scaled.max(axis=1).toarray()
    cols = scaled.max(axis=0).toarray()
    # Ruiz halves log-imbalance every pass: 20 passes leave the inf-norms within 1%.
    np.testing.assert_allclose(rows, 1.0, atol=1e-2)
    np.testing.assert_allclose(cols, 1.0, atol=1e-2)
    assert s.bound == 1.0 and s.objective == 1.0


def test_empty_rows_and_columns_keep_unit_scale():
    A = sp.csr_array(np.array([[0.0, 0.0], [0.0, 4.0]]))
    lp = LP([1.0, 1.0], A, [-1, 0], [1, 1], [0, 0], [1, 1])
    s = precondition(lp)
    assert s.row[0] == 1.0 and s.col[0] == 1.0 and np.all(np.isfinite(s.A.data))


def test_bad_arguments():
    lp = _badly_scaled_lp()
    with pytest.raises(ValueError, match="ruiz_iterations must be >= 0"):
        precondition(lp, ruiz_iterations=-1)
    with pytest.raises(ValueError, match=r"pock_chambolle_alpha must lie in \[0, 2\]"):
        precondition(lp, pock_chambolle_alpha=3.0)


def test_bound_norm_does_not_overflow():
    from jaxopt_suite.lp.precondition import _finite_norm

    # squared, 1e200 overflowed to inf and the bound scale derived from it became 0
    assert _finite_norm(np.array([1e200, -np.inf]), np.array([3.0])) == pytest.approx(1e200)
    assert _finite_norm(np.array([3.0, 4.0]), np.array([np.inf])) == pytest.approx(5.0)
    assert _finite_norm(np.array([np.inf])) == 0.0


def test_stored_zeros_are_not_entries():
    # 0**0 = 1 counted a stored zero in Pock-Chambolle's sums: a row or column of stored
    # zeros did not keep scale 1, and the scales depended on how the matrix was stored
    stored = sp.csr_array(([2.0, 0.0, 0.0, 3.0], [0, 1, 0, 1], [0, 2, 3, 4]), shape=(3, 2))
    clean = stored.copy()
    clean.eliminate_zeros()
    for alpha in (0.0, 1.0, 2.0):
        a = equilibrate(stored, ruiz_iterations=0, pock_chambolle_alpha=alpha)
        b = equilibrate(clean, ruiz_iterations=0, pock_chambolle_alpha=alpha)
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])
    assert a[0][1] == 1.0  # row 1 holds only a stored zero
