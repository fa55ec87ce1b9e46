"""Helpers shared by the LP tests."""

from jaxopt_suite.lp.reference import linprog_highs


def highs(lp, c=None):
    """scipy's HiGHS on ``lp`` (its objective ``c``, or ``lp.c``; the offset left out):
    the reference optimum the tests compare against (an "infeasible" from presolve checked
    again without it, :func:`jaxopt_suite.lp.reference.linprog_highs`)."""
    return linprog_highs(lp, c)[0]
