"""The HiGHS reference (scipy's linprog) the LP tests and the lp suite compare with."""

import types

import numpy as np
import pytest

from jaxopt_suite.lp import LP, instances, reference
from jaxopt_suite.lp.reference import linprog_highs


def test_two_sided_rows_and_equalities_reach_highs_as_written():
    # min -x - y  s.t.  1 <= x + y <= 3,  x - y == 1,  0 <= x <= 2,  y >= -5: x = 2, y = 1
    lp = LP(
        c=[-1.0, -1.0],
        A=[[1.0, 1.0], [1.0, -1.0]],
        row_lower=[1.0, 1.0],
        row_upper=[3.0, 1.0],
        var_lower=[0.0, -5.0],
        var_upper=[2.0, np.inf],
    )
    result, seconds = linprog_highs(lp)
    assert result.status == 0 and seconds > 0
    np.testing.assert_allclose(result.x, [2.0, 1.0], atol=1e-9)
    # another objective, same rows
    np.testing.assert_allclose(linprog_highs(lp, c=[1.0, 0.0])[0].x, [1.0, 0.0], atol=1e-9)
    assert linprog_highs(instances.unbounded())[0].status == 3


def test_an_infeasible_verdict_from_presolve_is_checked_without_it(monkeypatch):
    # HiGHS's presolve can end an unbounded LP as "infeasible" (status 2): the answer is
    # the solve without presolve, and the time is the first solve's
    calls = []

    def fake(*args, options, **kwargs):
        calls.append(options["presolve"])
        return types.SimpleNamespace(status=2 if options["presolve"] else 3)

    monkeypatch.setattr(reference, "linprog", fake)
    result, _ = linprog_highs(instances.unbounded())
    assert result.status == 3 and calls == [True, False]
    calls.clear()
    monkeypatch.setattr(
        reference,
        "linprog",
        lambda *a, options, **k: calls.append(1) or types.SimpleNamespace(status=0),
    )
    assert linprog_highs(instances.unbounded())[0].status == 0 and calls == [1]


def test_only_an_lp_is_taken():
    with pytest.raises(TypeError, match="lp must be an LP, got dict"):
        linprog_highs({"c": [1.0]})
