"""The LP type's checks and MPS reading / writing."""

import textwrap
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

from jaxopt_suite.lp import LP, MPSError, Status, read_mps, solve_lp, write_mps


def _random_lp(seed, m=6, n=5):
    rng = np.random.default_rng(seed)
    A = sp.random(m, n, density=0.5, random_state=seed, format="csr")
    A.data = np.round(rng.normal(size=A.data.shape), 3)
    kinds = rng.integers(0, 4, m)  # equality, <=, >=, two-sided
    base = np.round(rng.normal(size=m), 3)
    row_lower = np.where(kinds == 1, -np.inf, base)
    row_upper = np.where(kinds == 2, np.inf, np.where(kinds == 3, base + 1.5, base))
    var_lower = np.array([0.0, -np.inf, -2.0, 1.0, -np.inf])[:n]
    var_upper = np.array([np.inf, np.inf, 3.0, 1.0, -0.5])[:n]
    return LP(
        np.round(rng.normal(size=n), 3),
        A,
        row_lower,
        row_upper,
        var_lower,
        var_upper,
        objective_offset=1.25,
        integer=np.array([False, True, True, False, False])[:n],
    )


@pytest.mark.parametrize("seed", range(5))
def test_round_trip(tmp_path, seed):
    lp = _random_lp(seed)
    path = tmp_path / "lp.mps"
    write_mps(lp, path)
    back = read_mps(path)
    np.testing.assert_array_equal(back.c, lp.c)
    np.testing.assert_array_equal(back.A.toarray(), lp.A.toarray())
    for field in ("row_lower", "row_upper", "var_lower", "var_upper", "integer"):
        np.testing.assert_array_equal(getattr(back, field), getattr(lp, field), err_msg=field)
    assert back.objective_offset == lp.objective_offset and back.objective_sign == 1


def test_round_trip_keeps_lopsided_two_sided_rows(tmp_path):
    # A two-sided row written as its larger side plus a range loses the smaller side:
    # [-1e15, 1e-5] as -1e15 + 1e15 reads back as [-1e15, 0].
    lo = np.array([-1e15, -1e-5, 1e-7, -4e14, 0.1, -3.0])
    hi = np.array([1e-5, 1e15, 3e12, -2.5e-3, 0.3, 7e13])
    rng = np.random.default_rng(0)
    lo = np.r_[lo, -(10.0 ** rng.uniform(0, 15, 50))]  # and 50 random lopsided rows
    hi = np.r_[hi, 10.0 ** rng.uniform(-8, 0, 50)]
    lp = LP(np.ones(1), np.ones((lo.size, 1)), lo, hi, [0.0], [np.inf])
    path = tmp_path / "lopsided.mps"
    write_mps(lp, path)
    back = read_mps(path)
    np.testing.assert_array_equal(back.row_lower, lo)
    np.testing.assert_array_equal(back.row_upper, hi)


def test_values_from_1e20_on_read_as_infinite(tmp_path):
    path = tmp_path / "big.mps"
    path.write_text(
        textwrap.dedent(
            """\
            NAME BIG
            ROWS
             N COST
             G LIM1
             L LIM2
             E LIM3
             G LIM4
            COLUMNS
                X COST 1 LIM1 1
                Y COST 1 LIM2 1
                Y LIM3 1 LIM4 1
            RHS
                RHS LIM1 1 LIM2 1e30
                RHS LIM3 2 LIM4 -1e20
                RHS COST 1e30
            RANGES
                RNG LIM3 -1e25
            BOUNDS
             UP BND X 1e30
             LO BND Y -1e21
             UP BND Y 5
            ENDATA
            """
        )
    )
    lp = read_mps(path)
    np.testing.assert_array_equal(lp.row_lower, [1.0, -np.inf, -np.inf, -np.inf])
    np.testing.assert_array_equal(lp.row_upper, [np.inf, np.inf, 2.0, np.inf])
    np.testing.assert_array_equal(lp.var_lower, [0.0, -np.inf])
    np.testing.assert_array_equal(lp.var_upper, [np.inf, 5.0])
    assert lp.objective_offset == -1e30  # the objective constant is not a bound
    # Kept finite, 1e30 entered the norm of the bounds that scales the primal residual,
    # and x = 0 (violating X >= 1 by 1) passed as optimal with objective 0.
    small = LP(lp.c, lp.A[:2], lp.row_lower[:2], lp.row_upper[:2], [0.0, 0.0], [np.inf] * 2)
    solution = solve_lp(small)
    assert solution.status == Status.OPTIMAL
    np.testing.assert_allclose(solution.x, [1.0, 0.0], atol=1e-3)


@pytest.mark.parametrize(
    ("body", "line", "match"),
    [
        ("BOUNDS\n LO BND a 1e30\n", 8, "LO bound 1e30 on column 'a' is infinite on the wrong"),
        ("BOUNDS\n UP BND a -1e20\n", 8, "UP bound -1e20 on column 'a' is infinite"),
        ("BOUNDS\n FX BND a 1e21\n", 8, "FX bound 1e21 on column 'a' is infinite"),
        ("RHS\n RHS r -1e30\n", 8, r"L row 'r' with RHS -inf and RANGES None has bounds"),
        ("RHS\n RHS r 1e30\nRANGES\n RNG r 4\n", 8, r"bounds \[inf, inf\]"),
    ],
)
def test_infinite_values_on_the_wrong_side_name_the_line(tmp_path, body, line, match):
    path = tmp_path / "bad.mps"
    path.write_text(f"NAME x\nROWS\n N obj\n L r\nCOLUMNS\n a r 1\n{body}ENDATA\n")
    with pytest.raises(MPSError, match=rf"bad.mps:{line}: .*{match}"):
        read_mps(path, format="free")


def test_writing_huge_finite_bounds_warns(tmp_path):
    lp = LP([1.0], [[1.0]], [-1e25], [1.0], [0.0], [3e20])
    with pytest.warns(UserWarning, match="1e.20 in row_lower, var_upper read back as infinite"):
        write_mps(lp, tmp_path / "huge.mps")
    back = read_mps(tmp_path / "huge.mps")
    assert back.row_lower[0] == -np.inf and back.var_upper[0] == np.inf


@pytest.mark.parametrize(
    "lp, named",
    [
        (LP([1.0], [[1.0]], [1e25], [1e25], [0.0], [1.0]), r"row_lower\[0\] = 1e\+25"),
        (LP([1.0], [[1.0]], [1e25], [np.inf], [0.0], [1.0]), r"row_lower\[0\] = 1e\+25"),
        (LP([1.0], [[1.0]], [-np.inf], [-3e20], [0.0], [1.0]), r"row_upper\[0\] = -3e\+20"),
        (LP([1.0], [[1.0]], [0.0], [1.0], [2e20], [2e20]), r"var_lower\[0\] = 2e\+20"),
        (LP([1.0], [[1.0]], [0.0], [1.0], [-np.inf], [-1e20]), r"var_upper\[0\] = -1e\+20"),
    ],
)
def test_writing_huge_values_on_their_wrong_side_is_refused(tmp_path, lp, named):
    # each would read back as an empty side (an E row at +inf, a lower bound of +inf, ...),
    # and read_mps refuses such a file: the writer refuses to make it
    path = tmp_path / "wrong.mps"
    with pytest.raises(ValueError, match=named + ".*read_mps would refuse"):
        write_mps(lp, path)
    assert not path.exists()


@pytest.mark.parametrize(
    ("names", "match"),
    [
        ({"col_names": ["*x", "y"]}, r"cannot start with '\*' or be 'MARKER': '\*x'"),
        ({"col_names": ["MARKER", "y"]}, r"cannot start with '\*' or be 'MARKER'"),
    ],
)
def test_names_the_reader_would_read_otherwise_are_refused(tmp_path, names, match):
    # repeated columns were merged into one, a '*x' column was read as a comment line
    lp = LP([1.0, 2.0], [[1.0, 1.0], [1.0, -1.0]], [1.0, -1.0], [4.0, 1.0], [0, 0], [5, 5],
            **names)  # fmt: skip
    with pytest.raises(ValueError, match=match):
        write_mps(lp, tmp_path / "names.mps")


def _card(f1="", f2="", f3="", f4="", f5="", f6=""):
    """A fixed-MPS data line: fields at columns 2-3, 5-12, 15-22, 25-36, 40-47, 50-61."""
    return f" {f1:<2} {f2:<8}  {f3:<8}  {f4:>12}   {f5:<8}  {f6:>12}".rstrip()


FIXED = "\n".join(
    [
        "NAME          TESTLP",
        "ROWS",
        _card("N", "COST"),
        _card("L", "LIM 1"),
        _card("G", "LIM 2"),
        _card("E", "MYEQN"),
        "COLUMNS",
        _card("", "X ONE", "COST", "1.0", "LIM 1", "1.0"),
        _card("", "X ONE", "LIM 2", "1.0"),
        _card("", "Y TWO", "COST", "2.0", "LIM 1", "1.0"),
        _card("", "Y TWO", "MYEQN", "-1.0"),
        _card("", "ZTHREE", "COST", "-1.0", "MYEQN", "1.0"),
        "RHS",
        _card("", "RHS", "COST", "-3.5"),
        _card("", "RHS", "LIM 1", "4.0", "LIM 2", "1.0"),
        _card("", "RHS", "MYEQN", "7.0"),
        "RANGES",
        _card("", "RNG", "LIM 1", "2.5", "MYEQN", "-2.0"),
        "BOUNDS",
        _card("UP", "BND", "X ONE", "4.0"),
        _card("MI", "BND", "Y TWO"),
        _card("UP", "BND", "Y TWO", "1.0"),
        _card("FX", "BND", "ZTHREE", "2.5"),
        "ENDATA",
    ]
)


def test_fixed_format_with_spaces_in_names(tmp_path):
    path = tmp_path / "fixed.mps"
    path.write_text(FIXED)
    lp = read_mps(path)  # auto: the free reading fails on the spaced names
    assert lp.name == "TESTLP"
    assert lp.col_names == ("X ONE", "Y TWO", "ZTHREE")
    assert lp.row_names == ("LIM 1", "LIM 2", "MYEQN")
    np.testing.assert_array_equal(lp.c, [1.0, 2.0, -1.0])
    np.testing.assert_array_equal(lp.A.toarray(), [[1, 1, 0], [1, 0, 0], [0, -1, 1]])
    # L row with range 2.5: [4 - 2.5, 4]; G row: [1, inf); E row with range -2: [5, 7].
    np.testing.assert_array_equal(lp.row_lower, [1.5, 1.0, 5.0])
    np.testing.assert_array_equal(lp.row_upper, [4.0, np.inf, 7.0])
    np.testing.assert_array_equal(lp.var_lower, [0.0, -np.inf, 2.5])
    np.testing.assert_array_equal(lp.var_upper, [4.0, 1.0, 2.5])
    assert lp.objective_offset == 3.5  # RHS on the objective row is minus the constant
    with pytest.raises(MPSError, match=r"fixed.mps:\d+"):
        read_mps(path, format="free")


@pytest.mark.parametrize("format", ["fixed", "auto"])
def test_fixed_format_objsense_on_the_next_line(tmp_path, format):
    # write_mps's layout: OBJSENSE alone, MAX indented on the next line (field 2 of a
    # fixed card, where field 1 is empty).
    path = tmp_path / "sense.mps"
    path.write_text(FIXED.replace("ROWS", "OBJSENSE\n    MAX\nROWS", 1))
    lp = read_mps(path, format=format)  # auto: the spaced names fail the free reading
    assert lp.objective_sign == -1
    np.testing.assert_array_equal(lp.c, [-1.0, -2.0, 1.0])
    assert lp.objective_offset == -3.5


def test_free_format_objsense_max_markers_and_bound_types(tmp_path):
    path = tmp_path / "free.mps"
    path.write_text(
        textwrap.dedent(
            """\
            NAME demo
            OBJSENSE
                MAX
            ROWS
             N obj
             G r1
             N other
            COLUMNS
                MARKER 'MARKER' 'INTORG'
                a obj 3 r1 1
                MARKER 'MARKER' 'INTEND'
                b obj 2 r1 1
                b other 9
                c obj 1 r1 1
            RHS
                rhs r1 2
            BOUNDS
             BV BND a
             UP BND b -1
             PL BND c
             LI BND c 1
            ENDATA
            """
        )
    )
    with pytest.warns(UserWarning, match="lower bound set to -inf"):
        lp = read_mps(path)
    assert lp.objective_sign == -1
    np.testing.assert_array_equal(lp.c, [-3.0, -2.0, -1.0])  # maximisation negated
    assert lp.num_rows == 1  # the second N row is dropped, with its entries
    np.testing.assert_array_equal(lp.integer, [True, False, True])
    np.testing.assert_array_equal(lp.var_lower, [0.0, -np.inf, 1.0])
    np.testing.assert_array_equal(lp.var_upper, [1.0, -1.0, np.inf])


@pytest.mark.parametrize(
    ("text", "line", "match"),
    [
        ("NAME x\nROWZ\nENDATA\n", 2, "unknown section 'ROWZ'"),
        ("NAME x\nROWS\n N obj\n Q r\nENDATA\n", 4, "unknown row type 'Q'"),
        ("NAME x\nROWS\n N obj\nCOLUMNS\n a nope 1\nENDATA\n", 5, "unknown row 'nope'"),
        ("NAME x\nROWS\n N obj\n L r\nCOLUMNS\n a r one\nENDATA\n", 6, "expected a number"),
        ("NAME x\nROWS\n N obj\n L r\n L r\nENDATA\n", 5, "duplicate row 'r'"),
        ("NAME x\nROWS\n N obj\nCOLUMNS\n a obj 1\nBOUNDS\n XX BND a 1\nENDATA\n", 7, "bound type"),
        ("NAME x\nROWS\n N obj\nCOLUMNS\n a obj 1\nBOUNDS\n UP BND b 1\nENDATA\n", 7, "column 'b'"),
        ("NAME x\nROWS\n N obj\n", 3, "missing ENDATA"),
        ("NAME x\nROWS\n L r\nENDATA\n", 1, "no objective"),
    ],
)
def test_malformed_files_name_the_line(tmp_path, text, line, match):
    path = tmp_path / "bad.mps"
    path.write_text(text)
    with pytest.raises(MPSError, match=rf"bad.mps:{line}: .*{match}"):
        read_mps(path, format="free")


def test_lp_checks_name_the_row_or_column():
    A = np.eye(2)
    ok = dict(c=np.ones(2), A=A, row_lower=np.zeros(2), row_upper=np.ones(2))
    bounds = dict(var_lower=np.zeros(2), var_upper=np.ones(2))
    with pytest.raises(ValueError, match="A has 2 columns but c has 3"):
        LP(np.ones(3), A, np.zeros(2), np.ones(2), np.zeros(3), np.ones(3))
    with pytest.raises(ValueError, match="row_lower has 3 entries, expected 2"):
        LP(**{**ok, "row_lower": np.zeros(3)}, **bounds)
    with pytest.raises(ValueError, match=r"var_lower > var_upper for column 'y' \(index 1\)"):
        LP(**ok, var_lower=[0, 2], var_upper=[1, 1], col_names=["x", "y"])
    with pytest.raises(ValueError, match="row_lower > row_upper for row 0"):
        LP(**{**ok, "row_lower": [2, 0]}, **bounds)
    with pytest.raises(ValueError, match="c contains NaN at column 1"):
        LP(**{**ok, "c": [1.0, np.nan]}, **bounds)
    with pytest.raises(ValueError, match=r"A must be finite; entry \(row 1, column 0\)"):
        LP(**{**ok, "A": np.array([[1.0, 0.0], [np.inf, 1.0]])}, **bounds)
    with pytest.raises(ValueError, match="var_lower of column 0 is inf"):
        LP(**ok, var_lower=[np.inf, 0], var_upper=[np.inf, 1])
    lp = LP(**ok, **bounds)  # dense input is stored as CSR
    assert sp.issparse(lp.A) and lp.A.nnz == 2
    # complex data lost its imaginary part (only NumPy's ComplexWarning said so), True was
    # kept as the objective sign, 0.5 and "no" were integer markers, a 1-d sparse A gave an
    # IndexError, an array offset a TypeError and a string offset was read
    with pytest.raises(ValueError, match="A must hold real numbers, got dtype complex128"):
        LP(**{**ok, "A": np.array([[1 + 5j, 1], [0, 1]])}, **bounds)
    with pytest.raises(ValueError, match="c must hold real numbers, got dtype complex128"):
        LP(**{**ok, "c": np.array([1 - 3j, 1])}, **bounds)
    with pytest.raises(ValueError, match="objective_sign must be 1 or -1, got True"):
        LP(**ok, **bounds, objective_sign=True)
    with pytest.raises(ValueError, match="integer must be booleans .or 0/1."):
        LP(**ok, **bounds, integer=[0.5, 1])
    with pytest.raises(ValueError, match="integer must be booleans .or 0/1."):
        LP(**ok, **bounds, integer=[0, "no"])
    with pytest.raises(ValueError, match=r"A must be a matrix, got shape \(2,\)"):
        LP(**{**ok, "A": sp.coo_array(np.ones(2))}, **bounds)
    # repeated names were accepted here and refused only by write_mps; a ragged A gave
    # NumPy's own message; a NaN in a row vector was "at index 1"
    with pytest.raises(ValueError, match="col_names must be distinct: 'x' names columns 0 and 1"):
        LP(**ok, **bounds, col_names=["x", "x"])
    with pytest.raises(ValueError, match="row_names must be distinct: 'r' names rows 0 and 1"):
        LP(**ok, **bounds, row_names=["r", "r"])
    with pytest.raises(ValueError, match="A must be an array of real numbers; it holds nested"):
        LP(**{**ok, "A": [[1.0, 0.0], [1.0]]}, **bounds)
    with pytest.raises(ValueError, match="row_upper contains NaN at row 1$"):
        LP(**{**ok, "row_upper": [1.0, np.nan]}, **bounds)
    for offset in (np.array([1.5]), "1.5"):
        with pytest.raises(ValueError, match="objective_offset must be a real number"):
            LP(**ok, **bounds, objective_offset=offset)
    signed = LP(**ok, **bounds, objective_sign=np.int64(-1), integer=[1, 0])
    assert type(signed.objective_sign) is int and signed.integer.tolist() == [True, False]


_VALUELESS = """\
NAME v
ROWS
 N obj
 L r
COLUMNS
    x obj 1 r 1
    y obj 1 r 1
    z obj 1 r 1
RHS
    rhs r 4
BOUNDS
{bounds}
ENDATA
"""


@pytest.mark.parametrize(
    ("bounds", "lower", "upper", "integer", "ignored"),
    [
        # set name and a value (which these bound types do not take): read, value ignored
        (" FR BND x 0\n MI BND y 3\n PL BND z 1", [-np.inf, -np.inf, 0], [np.inf] * 3, 0, 3),
        # no set name, with a value: the first field is the column
        (" MI x 5\n BV y 1\n UP z 2\n PL z 7", [-np.inf, 0, 0], [np.inf, 1, np.inf], 1, 3),
        # no set name, no value; and a BV with set name and value
        (" FR x\n BV y\n BV BND z 1", [-np.inf, 0, 0], [np.inf, 1, 1], 2, 1),
    ],
)
def test_valueless_bound_types_with_and_without_set_names_and_values(
    tmp_path, bounds, lower, upper, integer, ignored
):
    path = tmp_path / "v.mps"
    path.write_text(_VALUELESS.format(bounds=bounds))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lp = read_mps(path, format="free")
    messages = [str(w.message) for w in caught]
    assert sum("is ignored" in m for m in messages) == ignored, messages
    np.testing.assert_array_equal(lp.var_lower, lower)
    np.testing.assert_array_equal(lp.var_upper, upper)
    assert int(np.sum(lp.integer)) == integer


def test_valueless_bound_in_fixed_format_with_blank_set_name_and_a_value(tmp_path):
    def card(*fields):  # fields 1-6 at columns 2, 5, 15, 25, 40, 50
        line = ""
        for start, field in zip((1, 4, 14, 24, 39, 49), fields, strict=False):
            line = line.ljust(start) + field
        return line

    lines = ["NAME          F", "ROWS", card("N", "obj"), card("L", "r"), "COLUMNS"]
    lines += [card("", name, "obj", "1", "r", "1") for name in ("x", "y", "z")]
    lines += ["RHS", card("", "rhs", "r", "4"), "BOUNDS"]
    lines += [card("FR", "", "x", "0.0"), card("BV", "BND", "y"), "ENDATA"]
    path = tmp_path / "f.mps"
    path.write_text("\n".join(lines) + "\n")
    with pytest.warns(UserWarning, match=r"value 0.0 on the FR bound of column 'x' is ignored"):
        lp = read_mps(path, format="fixed")
    np.testing.assert_array_equal(lp.var_lower, [-np.inf, 0, 0])
    np.testing.assert_array_equal(lp.var_upper, [np.inf, 1, np.inf])
    np.testing.assert_array_equal(lp.integer, [False, True, False])


@pytest.mark.parametrize(
    ("bounds", "match"),
    [
        (" FR BND x 0 9", "a FR bound needs a column"),
        (" MI BND x one", "expected a number, got 'one'"),
        (" BV x one", "bound on unknown column 'one'"),
    ],
)
def test_malformed_valueless_bounds_name_the_line(tmp_path, bounds, match):
    path = tmp_path / "bad.mps"
    path.write_text(_VALUELESS.format(bounds=bounds))
    with pytest.raises(MPSError, match=rf"bad.mps:12: .*{match}"):
        read_mps(path, format="free")


@pytest.mark.parametrize(
    ("bounds", "lower", "upper"),
    [("", 0.0, 1.0), (" LO BND x 2", 2.0, np.inf), (" UP BND x 5", 0.0, 5.0),
     (" PL BND x", 0.0, np.inf), (" MI BND x", -np.inf, np.inf)],
)  # fmt: skip
def test_an_integer_column_without_bounds_is_binary_as_highs_reads_it(
    tmp_path, bounds, lower, upper
):
    """An integer (``MARKER``) column with no line in ``BOUNDS`` is binary (CPLEX's rule,
    HiGHS reads it so: ``max x s.t. x <= 4`` is 1, not 4); any bound line of its own keeps
    the usual defaults."""
    path = tmp_path / "int.mps"
    path.write_text(
        "NAME t\nROWS\n N obj\n L c\nCOLUMNS\n    MARKER 'MARKER' 'INTORG'\n"
        "    x obj -1 c 1\n    MARKER 'MARKER' 'INTEND'\nRHS\n    RHS c 4\n"
        f"BOUNDS\n{bounds}\nENDATA\n"
    )
    lp = read_mps(path)
    assert lp.integer[0]
    assert (lp.var_lower[0], lp.var_upper[0]) == (lower, upper)


def test_an_integer_column_on_zero_to_infinity_reads_back_as_written(tmp_path):
    """``write_mps`` names the infinite upper bound of an integer column on ``[0, inf)``
    (``PL``); without it the file read back as a binary column, here and in HiGHS."""
    lp = LP([-1.0, 1.0], [[1.0, 1.0]], [-np.inf], [4.0], [0.0, 0.0], [np.inf, np.inf],
            integer=[True, False])  # fmt: skip
    path = tmp_path / "int.mps"
    write_mps(lp, path)
    back = read_mps(path)
    np.testing.assert_array_equal(back.var_upper, [np.inf, np.inf])
    np.testing.assert_array_equal(back.integer, [True, False])
    highspy = pytest.importorskip("highspy")
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.readModel(str(path))
    assert list(h.getLp().col_upper_) == [np.inf, np.inf]


_SMALL = (
    "NAME t\nROWS\n N obj\n L c\nCOLUMNS\n    x obj {cost} c 1\nRHS\n    RHS c 4\n{obj_rhs}"
    "BOUNDS\n{bounds}ENDATA\n"
)


def _small(tmp_path, cost="-1", obj_rhs="", bounds="", comment=b""):
    path = tmp_path / "small.mps"
    text = _SMALL.format(cost=cost, obj_rhs=obj_rhs, bounds=bounds).encode()
    path.write_bytes(comment + text)
    return path


def test_a_latin1_comment_is_read_and_other_non_utf8_bytes_name_their_line(tmp_path):
    lp = read_mps(_small(tmp_path, comment="* mod\xe8le\n".encode("latin-1")))
    assert lp.num_cols == 1
    path = tmp_path / "bad.mps"
    path.write_bytes(_small(tmp_path).read_bytes().replace(b"x obj", b"\xe9 obj"))
    with pytest.raises(MPSError, match=r"bad\.mps:6: not UTF-8 text \(byte 0xe9"):
        read_mps(path)


@pytest.mark.parametrize(
    ("kwargs", "line", "match"),
    [
        ({"cost": "1e400"}, 6, "coefficient 1e400 of column 'x' in row 'obj' is not finite"),
        ({"cost": "-inf"}, 6, "coefficient -inf of column 'x'"),
        ({"obj_rhs": "    RHS obj inf\n"}, 9, r"the objective constant \(RHS inf\) is not finite"),
        ({"bounds": " UP BND x 1\n LO BND x 4\n"}, 11, "column 'x' has lower bound 4.0 > upper"),
    ],
)
def test_values_the_lp_would_refuse_name_their_line(tmp_path, kwargs, line, match):
    """Non-finite coefficients, a non-finite objective constant and crossed bounds are the
    file's errors, with its line, not the LP constructor's (which names no line)."""
    with pytest.raises(MPSError, match=rf"small\.mps:{line}: {match}"):
        read_mps(_small(tmp_path, **kwargs), format="free")


@pytest.mark.parametrize(
    ("columns", "rhs", "line", "match"),
    [
        # summed into 6 before: the entry was read as the sum of its two lines
        (
            " x obj 1 c1 1\n x c2 1\n x c2 5\n",
            "",
            9,
            r"column 'x'.s entry in row 'c2' is "
            r"given a second time \(first on line 8\)",
        ),
        # a column that comes back after another, to the same row: merged into 1 + 7
        (" x obj 1 c1 1\n y c1 2\n x c1 7\n", "", 9, r"column 'x'.s entry in row 'c1' .*line 7"),
        (" x obj 1 c1 1\n x obj 2\n", "", 8, r"column 'x'.s cost is given a second time .*line 7"),
        # overwritten before: the last RHS or RANGES line won
        (" x obj 1 c1 1\n", " rhs c1 1\n rhs c1 2\n", 10, r"the RHS of row 'c1' .*line 9"),
        (" x obj 1 c1 1\n", " rhs obj 1\n rhs obj 2\n", 10, r"the objective constant .*line 9"),
    ],
)
def test_a_value_given_twice_names_both_lines(tmp_path, columns, rhs, line, match):
    path = tmp_path / "twice.mps"
    path.write_text(f"NAME t\nROWS\n N obj\n L c1\n L c2\nCOLUMNS\n{columns}RHS\n{rhs}ENDATA\n")
    for format in ("free", "auto"):
        with pytest.raises(MPSError, match=rf"twice.mps:{line}: {match}"):
            read_mps(path, format=format)


def test_a_repeated_range_names_both_lines(tmp_path):
    path = tmp_path / "ranges.mps"
    path.write_text(
        "NAME t\nROWS\n N obj\n L c1\nCOLUMNS\n x obj 1 c1 1\nRHS\n rhs c1 4\n"
        "RANGES\n rng c1 1\n rng c1 2\nENDATA\n"
    )
    with pytest.raises(MPSError, match=r"ranges.mps:11: the RANGES value of row 'c1' .*line 10"):
        read_mps(path)


def test_auto_format_reports_the_reading_that_got_further(tmp_path):
    # a fixed file with a bad number on line 9: the free reading fails first, on the spaced
    # row name of line 4, and auto reported that line, which is fine
    bad = FIXED.replace(_card("", "X ONE", "LIM 2", "1.0"), _card("", "X ONE", "LIM 2", "abc"))
    path = tmp_path / "fixed.mps"
    path.write_text(bad)
    with pytest.raises(MPSError, match=r"fixed.mps:9: expected a number, got 'abc'") as fixed:
        read_mps(path, format="fixed")
    with pytest.raises(MPSError) as auto:
        read_mps(path)
    assert str(auto.value).startswith(str(fixed.value))
    assert "(read as free MPS it fails at line 4: a ROWS line has a type and a name" in str(
        auto.value
    )
    assert (auto.value.line, auto.value.reason) == (9, "expected a number, got 'abc'")
    # where both readings fail on the same line for the same reason, the message is one
    path.write_text("NAME x\nROWZ\nENDATA\n")
    with pytest.raises(MPSError, match=r"fixed.mps:2: unknown section 'ROWZ'$"):
        read_mps(path)


@pytest.mark.parametrize("text", ["", "* only a comment\n\n"])
def test_an_empty_file_says_so(tmp_path, text):
    path = tmp_path / "empty.mps"
    path.write_text(text)
    with pytest.raises(MPSError, match=r"empty.mps:1: no MPS section in the file"):
        read_mps(path)
