"""Helpers shared by the LP tests."""

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog


def highs(lp, c=None):
    """scipy's HiGHS on ``lp`` (its objective ``c``, or ``lp.c``; the offset left out):
    the reference optimum the tests compare against."""
    eq = lp.row_lower == lp.row_upper
    up = np.isfinite(lp.row_upper) & ~eq
    dn = np.isfinite(lp.row_lower) & ~eq

    def solve(presolve):
        return linprog(
            lp.c if c is None else c,
            A_ub=sp.vstack([lp.A[up], -lp.A[dn]]),
            b_ub=np.concatenate([lp.row_upper[up], -lp.row_lower[dn]]),
            A_eq=lp.A[eq],
            b_eq=lp.row_lower[eq],
            bounds=list(zip(lp.var_lower, lp.var_upper, strict=True)),
            method="highs",
            options={"presolve": presolve},
        )

    result = solve(True)
    # HiGHS's presolve can end an unbounded LP as "infeasible" (its verdict there is
    # "infeasible or unbounded"): an infeasible one is solved again without it
    return solve(False) if result.status == 2 else result
