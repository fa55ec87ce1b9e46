"""Generated LP instances (seeded): transportation, covering, random sparse with mixed row
types, and crafted infeasible / unbounded ones."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from jaxopt_suite.lp.problem import LP


def transportation(sources: int, sinks: int, seed: int = 0) -> LP:
    """Balanced transportation: ship supply ``s_i`` to demand ``d_j`` at cost ``c_ij``;
    rows ``sum_j x_ij = s_i`` and ``sum_i x_ij = d_j``, ``x >= 0``."""
    rng = np.random.default_rng(seed)
    supply = rng.integers(10, 50, sources).astype(float)
    demand = rng.multinomial(int(supply.sum()), np.ones(sinks) / sinks).astype(float)
    n = sources * sinks
    index = np.arange(n).reshape(sources, sinks)
    rows = np.concatenate(
        [np.repeat(np.arange(sources), sinks), sources + np.tile(np.arange(sinks), sources)]
    )
    cols = np.concatenate([index.ravel(), index.ravel()])
    A = sp.csr_array((np.ones(2 * n), (rows, cols)), shape=(sources + sinks, n))
    b = np.concatenate([supply, demand])
    cost = rng.uniform(1.0, 10.0, n)
    return LP(cost, A, b, b, np.zeros(n), np.full(n, np.inf), name=f"transport_{sources}x{sinks}")


def covering(rows: int, cols: int, density: float, seed: int = 0) -> LP:
    """Fractional set cover: ``min c^T x``, ``A x >= 1`` for 0/1 ``A`` (every row covered
    at least once), ``0 <= x <= 1``."""
    rng = np.random.default_rng(seed)
    A = sp.random(rows, cols, density=density, random_state=seed, format="lil")
    for i in range(rows):  # every row needs a covering column
        if A[i].nnz == 0:
            A[i, rng.integers(cols)] = 1.0
    A = sp.csr_array(A)
    A.data[:] = 1.0
    return LP(
        rng.uniform(1.0, 5.0, cols),
        A,
        np.ones(rows),
        np.full(rows, np.inf),
        np.zeros(cols),
        np.ones(cols),
        name=f"cover_{rows}x{cols}",
    )


def _rows_around(A, rng):
    """Row bounds of every type around ``A x_f`` for an interior ``x_f`` of ``[0, 3]``."""
    rows = A.shape[0]
    ax = A @ rng.uniform(0.5, 2.5, A.shape[1])
    kinds = rng.integers(0, 4, rows)  # equality, <=, >=, two-sided
    width = rng.uniform(0.1, 1.0, rows)
    lo = np.where(kinds == 1, -np.inf, np.where(kinds == 0, ax, ax - width))
    hi = np.where(kinds == 2, np.inf, np.where(kinds == 0, ax, ax + width))
    return lo, hi


def random_sparse(rows: int, cols: int, density: float, seed: int = 0) -> LP:
    """Mixed rows (equality, <=, >=, two-sided) around ``A x_f`` for an interior ``x_f``,
    bounds ``[0, 3]``: feasible and bounded."""
    rng = np.random.default_rng(seed)
    A = sp.random(
        rows,
        cols,
        density=density,
        random_state=seed,
        format="csr",
        data_rvs=lambda k: rng.normal(size=k),
    )
    lo, hi = _rows_around(A, rng)
    return LP(
        rng.normal(size=cols),
        A,
        lo,
        hi,
        np.zeros(cols),
        np.full(cols, 3.0),
        name=f"random_{rows}x{cols}",
    )


def infeasible(seed: int = 0) -> LP:
    """``sum x >= 2 n`` with ``0 <= x <= 1`` plus random rows: no feasible point."""
    lp = random_sparse(20, 30, 0.2, seed)
    A = sp.vstack([lp.A, sp.csr_array(np.ones((1, 30)))])
    return LP(
        lp.c,
        A,
        np.r_[lp.row_lower, 60.0],
        np.r_[lp.row_upper, np.inf],
        np.zeros(30),
        np.ones(30),
        name="infeasible",
    )


def unbounded(seed: int = 0) -> LP:
    """Feasible rows in which ``x_0`` does not appear; ``x_0`` has cost -1 and no upper
    bound, so the objective decreases without bound along ``x_0``."""
    rng = np.random.default_rng(seed)
    A = sp.random(20, 30, density=0.2, random_state=seed, format="lil")
    A[:, 0] = 0.0
    A = sp.csr_array(A)
    lo, hi = _rows_around(A, rng)
    c = rng.normal(size=30)
    c[0] = -1.0
    upper = np.full(30, 3.0)
    upper[0] = np.inf
    return LP(c, A, lo, hi, np.zeros(30), upper, name="unbounded")


def infeasible_transportation(sources: int, sinks: int, seed: int = 0) -> LP:
    """Transportation whose demand exceeds its supply: rows ``sum_j x_ij <= s_i`` and
    ``sum_i x_ij >= d_j`` with ``sum d > sum s``, ``x >= 0`` unbounded above. No bound is
    in the way; the proof needs every row (``y = 1`` on the demand rows, ``-1`` on the
    supply rows)."""
    lp = transportation(sources, sinks, seed)
    supply = lp.row_upper[:sources]
    demand = lp.row_upper[sources:] + 1.0  # one more unit per sink than is shipped
    inf = np.inf
    return LP(
        lp.c,
        lp.A,
        np.concatenate([np.full(sources, -inf), demand]),
        np.concatenate([supply, np.full(sinks, inf)]),
        lp.var_lower,
        lp.var_upper,
        name=f"infeasible_transport_{sources}x{sinks}",
    )


def unbounded_random(rows: int, cols: int, density: float, seed: int = 0) -> LP:
    """A :func:`random_sparse` LP made unbounded through its rows: free variables, the rows'
    bounds kept around ``A x_f``, and a cost with a part ``A^T``'s range does not hold, so
    that along some ``d`` with ``A d = 0`` the objective falls without bound. Every column
    appears in some row; the ray is a combination of columns, not one free column."""
    rng = np.random.default_rng(seed)
    lp = random_sparse(rows, cols, density, seed)
    dense = lp.A.toarray()
    empty = np.flatnonzero(~dense.any(axis=0))
    dense[rng.integers(rows, size=empty.size), empty] = rng.normal(size=empty.size)
    A = sp.csr_array(dense)
    lo, hi = _rows_around(A, rng)
    # the component of a random cost in A's null space: d = -that satisfies A d = 0, c^T d < 0
    c = rng.normal(size=cols)
    null = c - np.linalg.lstsq(dense, dense @ c, rcond=None)[0]
    c = c + 10.0 * null / np.linalg.norm(null)
    inf = np.full(cols, np.inf)
    return LP(c, A, lo, hi, -inf, inf, name=f"unbounded_random_{rows}x{cols}")
