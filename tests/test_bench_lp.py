"""Pieces of the lp suite's target arithmetic."""

import math

from benchmarks.lp import relative_error


def test_relative_error_is_relative_and_a_failed_solve_is_the_worst():
    assert relative_error(101.0, 100.0) == 0.01
    assert relative_error(-99.0, -100.0) == 0.01
    assert relative_error(1e-6, 0.0) == 1e-6  # absolute where the reference is 0
    # a failed HiGHS solve (nan) was skipped by max() unless it came first
    for value, reference in ((1.0, math.nan), (math.nan, 1.0), (math.inf, 1.0)):
        assert relative_error(value, reference) == math.inf
    assert max(relative_error(*pair) for pair in ((1.0, 1.0), (1.0, math.nan))) == math.inf
