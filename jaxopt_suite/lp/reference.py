"""scipy's HiGHS (``scipy.optimize.linprog``) on an :class:`~jaxopt_suite.lp.LP`: the
reference the tests and the ``lp`` suite compare ``solve_lp`` with."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog

from jaxopt_suite.lp.problem import LP


def linprog_highs(lp: LP, c: Any = None, method: str = "highs") -> tuple[Any, float]:
    """``(result, seconds)`` of ``linprog`` on ``lp`` (objective ``c``, by default
    ``lp.c``; ``result.fun`` leaves ``lp.objective_offset`` out) with ``method`` (``"highs"``,
    ``"highs-ds"`` dual simplex, ``"highs-ipm"``). Two-sided rows become a pair of
    inequalities, equal bounds an equality. ``seconds`` times the first solve only: a result
    of status 2 (infeasible) is solved again without presolve and that result returned,
    since HiGHS's presolve can end an unbounded LP as "infeasible" (its verdict there is
    "infeasible or unbounded")."""
    if not isinstance(lp, LP):
        raise TypeError(f"lp must be an LP, got {type(lp).__name__}")
    eq = lp.row_lower == lp.row_upper
    up = np.isfinite(lp.row_upper) & ~eq
    dn = np.isfinite(lp.row_lower) & ~eq

    def solve(presolve: bool):
        return linprog(
            lp.c if c is None else c,
            A_ub=sp.vstack([lp.A[up], -lp.A[dn]]),
            b_ub=np.concatenate([lp.row_upper[up], -lp.row_lower[dn]]),
            A_eq=lp.A[eq],
            b_eq=lp.row_lower[eq],
            bounds=list(zip(lp.var_lower, lp.var_upper, strict=True)),
            method=method,
            options={"presolve": presolve},
        )

    start = time.perf_counter()
    result = solve(True)
    seconds = time.perf_counter() - start
    return (solve(False) if result.status == 2 else result), seconds
