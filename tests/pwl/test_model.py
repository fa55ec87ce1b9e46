"""The PWL model builder: compilation to the lambda formulation and input checks."""

import math

import numpy as np
import pytest

from jaxopt_suite.pwl import PWLModel


def small_model():
    m = PWLModel("small")
    x = m.add_variable(0.0, 10.0, name="x")
    y = m.add_variable(0.0, 10.0, name="y")
    fx = m.add_pwl(x, [0, 4, 10], [0, 8, 9], name="fx")
    fy = m.add_pwl(y, [0, 5, 10], [0, 3, 10], name="fy")
    m.add_constraint({x: 1.0, y: 1.0}, lower=8.0, name="demand")
    m.add_constraint({fx: 1.0, y: -2.0}, upper=20.0, name="pwl_row")
    m.minimize({fx: 1.0, fy: 1.0}, constant=1.5)
    return m, (x, y, fx, fy)


def test_compiled_columns_rows_and_sets():
    m, _ = small_model()
    comp = m.compile()
    lp = comp.lp
    # x, y, then 3 + 3 lambda columns; z columns are substituted away
    assert lp.num_cols == 8 and comp.num_vars == 2
    assert lp.num_rows == 2 + 2 * 2  # user rows + convexity and link per term
    np.testing.assert_array_equal(comp.set_columns, [[2, 3, 4], [5, 6, 7]])
    np.testing.assert_array_equal(comp.column_set, [-1, -1, 0, 0, 0, 1, 1, 1])
    np.testing.assert_array_equal(comp.column_position, [-1, -1, 0, 1, 2, 0, 1, 2])
    A = lp.A.toarray()
    # the PWL row substitutes fx = 0 l0 + 8 l1 + 9 l2
    np.testing.assert_allclose(A[1], [0, -2, 0, 8, 9, 0, 0, 0])
    np.testing.assert_allclose(A[2], [0, 0, 1, 1, 1, 0, 0, 0])  # convexity of fx
    np.testing.assert_allclose(A[3], [1, 0, 0, -4, -10, 0, 0, 0])  # x = sum d lambda
    np.testing.assert_allclose(lp.c, [0, 0, 0, 8, 9, 0, 3, 10])
    assert lp.objective_offset == 1.5
    np.testing.assert_allclose(lp.var_upper[2:], 1.0)


def test_model_values_and_check_round_trip():
    m, (x, y, fx, fy) = small_model()
    comp = m.compile()
    v = np.zeros(comp.lp.num_cols)
    v[0], v[1] = 4.0, 5.0
    v[3] = 1.0  # x = 4 at breakpoint 1
    v[6] = 1.0  # y = 5 at breakpoint 1
    values = comp.model_values(v)
    np.testing.assert_allclose(values[[x.index, y.index, fx.index, fy.index]], [4, 5, 8, 3])
    assert m.check(values) <= 1e-12
    assert m.objective_value(values) == pytest.approx(8 + 3 + 1.5)
    values[fx.index] = 7.0  # z off its function
    assert m.check(values) == pytest.approx(1.0 / 9.0)
    snapped = m.snap(values)  # z back onto f(x); nothing else moves
    assert snapped[fx.index] == 8.0 and m.check(snapped) <= 1e-12
    np.testing.assert_array_equal(np.delete(snapped, fx.index), np.delete(values, fx.index))
    with pytest.raises(ValueError, match="values must have shape"):
        m.snap(values[:-1])
    # an LP point (lambdas included) is not a model point: its objective was silently wrong
    with pytest.raises(ValueError, match=rf"values must have shape \({m.num_variables},\)"):
        m.objective_value(v)
    assert PWLModel().check(np.zeros(0)) == 0.0  # no variables: nothing violated


def test_check_sums_each_row_term_by_term_and_sees_rows_added_later():
    # the rows are one sparse product, cached: it must sum each row's terms in the row's
    # order from 0 (as the row reads), to the bit, and follow a model that grows
    m, (x, y, fx, fy) = small_model()
    rng = np.random.default_rng(3)
    for _ in range(20):
        values = rng.normal(size=m.num_variables) * 10.0 ** rng.integers(-3, 4)
        sums = m._row_arrays()[0] @ values
        for row, (coefs, *_) in enumerate(m._rows):
            assert sums[row] == sum(c * values[i] for i, c in coefs.items())
    values = m.snap(np.array([4.0, 5.0, 0.0, 0.0]))
    assert m.check(values) <= 1e-12
    m.add_constraint({x: 1.0, fy: 1.0}, upper=5.0, name="late")  # 4 + 3 = 7 > 5
    assert m.check(values) == pytest.approx(2.0 / 6.0)
    z = m.add_variable(-1.0, 1.0, name="z")  # a variable added too
    m.add_constraint({z: 2.0}, lower=3.0, name="later")
    assert m.check(np.append(values, 0.5)) == pytest.approx(2.0 / 4.0)
    # an infinite side is no violation, whatever the row's value
    assert np.isinf(m._row_arrays()[1]).any() and np.isinf(m._row_arrays()[2]).any()


def test_maximisation_is_negated_with_its_sign():
    m, (_, _, fx, _) = small_model()
    m.maximize({fx: 2.0}, constant=1.0)
    lp = m.compile().lp
    assert lp.objective_sign == -1 and lp.objective_offset == -1.0
    np.testing.assert_allclose(lp.c[2:5], [0, -16, -18])


@pytest.mark.parametrize(
    ("breakpoints", "values", "match"),
    [
        ([0, 2, 2, 5], [0, 1, 2, 3], r"strictly increasing, got d\[1\] = 2.0 >= d\[2\] = 2.0"),
        ([0, 3, 1], [0, 1, 2], "strictly increasing"),
        ([0, math.inf], [0, 1], "must be finite .*unbounded PWL domain"),
        ([0, math.nan, 2], [0, 1, 2], "breakpoints must not be NaN"),
        ([0, 1, 2], [0, 1], r"values of shape \(2,\) for breakpoints of shape \(3,\)"),
        ([0, 1, 2], [[0], [1], [2]], r"values of shape \(3, 1\) for breakpoints of shape"),
        ([1.0], [2.0], ">= 2 values"),
        ([0, 1], [0, math.nan], "values must be finite"),
        ([20, 30], [0, 1], "miss the breakpoint range"),
    ],
)
def test_bad_breakpoints(breakpoints, values, match):
    m = PWLModel()
    x = m.add_variable(0.0, 10.0, name="x")
    with pytest.raises(ValueError, match=match):
        m.add_pwl(x, breakpoints, values)


def test_bad_variables_and_rows():
    m = PWLModel()
    with pytest.raises(ValueError, match="lower bound 2.0 > upper bound 1.0"):
        m.add_variable(2.0, 1.0, name="v")
    with pytest.raises(ValueError, match="must not be NaN"):
        m.add_variable(math.nan, 1.0)
    x = m.add_variable(0.0, 1.0, name="x")
    with pytest.raises(ValueError, match="give at least one finite side"):
        m.add_constraint({x: 1.0})
    with pytest.raises(ValueError, match="lower 2.0 > upper 1.0"):
        m.add_constraint({x: 1.0}, lower=2.0, upper=1.0)
    with pytest.raises(ValueError, match="coefficient of 'x' is nan"):
        m.add_constraint({x: math.nan}, upper=1.0)
    other = PWLModel()
    foreign = other.add_variable(0.0, 1.0, name="elsewhere")
    foreign2 = other.add_variable(0.0, 1.0, name="elsewhere2")
    with pytest.raises(ValueError, match="does not belong to this model"):
        m.add_constraint({foreign2: 1.0}, upper=1.0)
    del foreign
    with pytest.raises(TypeError, match="expected a Var"):
        m.minimize({"x": 1.0})
    z = m.add_pwl(x, [0, 1], [0, 1])
    with pytest.raises(ValueError, match="x must be a model variable"):
        m.add_pwl(z, [0, 1], [0, 1])
    with pytest.raises(TypeError, match="breakpoints must be a list of numbers, got 5"):
        m.add_pwl(x, 5, [1, 2])
    with pytest.raises(TypeError, match=r"values must be a list of numbers, got \['a', 'b'\]"):
        m.add_pwl(x, [0, 1], ["a", "b"])
    with pytest.raises(TypeError, match=r"mapping \{Var: coefficient\} or \(Var, coefficient\)"):
        m.add_constraint([x], upper=1.0)


def test_numbers_that_are_not_real_numbers_are_refused_by_name():
    # float() read "2" as 2.0 and True as 1.0, and failed on "abc" or an array with a
    # message that named neither the argument nor the variable or row
    m = PWLModel()
    x = m.add_variable(0.0, 10.0, name="x")
    for call, match in (
        (lambda: m.add_variable("abc", 1.0, name="v"), "variable 'v': lower bound must be a real"),
        (lambda: m.add_variable(0.0, np.array([0.0, 1.0])), "a new variable: upper bound must be"),
        (lambda: m.add_variable(True, 2.0), "lower bound must be a real number, got True"),
        (lambda: m.add_constraint({x: "2"}, lower=1.0), "coefficient of 'x' must be a real number"),
        (lambda: m.add_constraint({x: 1.0}, lower="x", name="c"), "constraint c: lower must be"),
        (lambda: m.add_constraint({x: 1.0}, upper=[5.0]), "upper must be a real number"),
        (lambda: m.minimize({x: 1.0}, constant="1"), "objective constant must be a real"),
        (lambda: m.add_pwl(x, ["0", "5"], [0, 1]), "breakpoints must be a list of numbers"),
    ):
        with pytest.raises(TypeError, match=match):
            call()
    # each coefficient finite, their sum not: refused when the row is added (compile said
    # only "A must be finite")
    with pytest.raises(ValueError, match="coefficients of 'x' sum to inf"):
        m.add_constraint([(x, 1e308), (x, 1e308)], upper=5.0)
    assert m.num_variables == 1 and m.num_constraints == 0


def test_pwl_terms_keep_the_breakpoints_they_were_checked_with():
    m = PWLModel()
    x = m.add_variable(0.0, 10.0, name="x")
    given = np.array([0.0, 5.0, 10.0])
    m.add_pwl(x, given, [0.0, 1.0, 0.0])
    given[1] = 20.0  # the caller's array is copied
    term = m.terms[0]
    np.testing.assert_array_equal(term.breakpoints, [0.0, 5.0, 10.0])
    with pytest.raises(ValueError, match="read-only"):
        term.breakpoints[1] = 11.0  # would pass no check: not increasing
    with pytest.raises(ValueError, match="read-only"):
        term.values[0] = math.nan


def test_dict_round_trip_rebuilds_the_same_lp():
    import json

    m, _ = small_model()
    m.add_variable(-math.inf, math.inf, name="free")
    again = PWLModel.from_dict(json.loads(json.dumps(m.to_dict())))
    a, b = m.compile().lp, again.compile().lp
    assert (a.A != b.A).nnz == 0
    for field in ("c", "row_lower", "row_upper", "var_lower", "var_upper"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    assert a.objective_offset == b.objective_offset and a.col_names == b.col_names
    with pytest.raises(ValueError, match="not a PWL model description"):
        PWLModel.from_dict({"format": "other"})
    # any sense but "max" used to minimise
    data = m.to_dict()
    data["objective"]["sense"] = "maximize"
    with pytest.raises(ValueError, match="objective sense must be 'min' or 'max', got 'maximize'"):
        PWLModel.from_dict(data)


def test_a_description_is_checked_as_the_builder_checks_its_input():
    """``from_dict`` read bounds with ``float()``: "0.05" and True passed where the builder
    refuses them, "abc" failed with no variable named, a missing key raised a bare
    KeyError."""
    m, _ = small_model()
    first = m.to_dict()["variables"][0]["name"]
    cases = [
        (("variables", 0, "lower"), "abc", TypeError, f"variable '{first}': lower bound"),
        (("variables", 0, "lower"), "0.05", TypeError, f"variable '{first}': lower bound"),
        (("variables", 0, "upper"), True, TypeError, f"variable '{first}': upper bound"),
        (("constraints", 0, "lower"), "1", TypeError, "constraint .*: lower side"),
        (("objective", "constant"), "2", TypeError, "objective: constant"),
    ]
    for path, value, error, match in cases:
        data = m.to_dict()
        entry = data
        for key in path[:-1]:
            entry = entry[key]
        entry[path[-1]] = value
        with pytest.raises(error, match=match):
            PWLModel.from_dict(data)
    data = m.to_dict()
    del data["variables"][0]["lower"]
    with pytest.raises(ValueError, match=f"variable '{first}': the description has no 'lower'"):
        PWLModel.from_dict(data)
    with pytest.raises(ValueError, match="not a PWL model description \\(a list\\)"):
        PWLModel.from_dict([m.to_dict()])
    data = m.to_dict()
    del data["constraints"]
    with pytest.raises(ValueError, match="the model: the description has no 'constraints'"):
        PWLModel.from_dict(data)
    data = m.to_dict()
    next(iter(data["constraints"]))["terms"].update({first: "3"})
    with pytest.raises(TypeError, match=f"coefficient of '{first}'"):
        PWLModel.from_dict(data)


def test_names_are_unique_and_vars_belong_to_their_model():
    m = PWLModel()
    x = m.add_variable(0.0, 1.0, name="x")
    with pytest.raises(ValueError, match="variable name 'x' is already used"):
        m.add_variable(0.0, 1.0, name="x")
    m.add_constraint({x: 1.0}, upper=1.0, name="cap")
    with pytest.raises(ValueError, match="constraint name 'cap' is already used"):
        m.add_constraint({x: 1.0}, upper=2.0, name="cap")
    m.add_variable(0.0, 1.0, name="v2")  # a user name that a default would take
    assert m.add_variable(0.0, 1.0).name == "v3"
    twin = PWLModel()
    same = twin.add_variable(0.0, 1.0, name="x")  # same index and name, other model
    with pytest.raises(ValueError, match="does not belong to this model"):
        m.add_constraint({same: 1.0}, upper=1.0)
    # mixed with this model's x, the twin compared equal to it and the dict merged the two
    # coefficients into x's (stored {'x': 2.0}) before any check saw the twin
    assert same != x and len({same, x}) == 2
    with pytest.raises(ValueError, match="does not belong to this model"):
        m.add_constraint({x: 1.0, same: 2.0}, upper=4.0)


def test_a_model_without_pwl_terms_compiles_to_a_plain_lp():
    m = PWLModel("plain")
    x = m.add_variable(0.0, 4.0, name="x")
    m.add_constraint({x: 1.0}, lower=1.0)
    m.minimize({x: 2.0})
    comp = m.compile()
    assert comp.num_sets == 0 and comp.lp.num_cols == 1 and comp.lp.name == "plain"
