"""Reading and writing MPS files (free and fixed format), on the host.

Sections: ``NAME``, ``OBJSENSE`` (``MIN``/``MAX``, on the same or the next line),
``ROWS`` (``N``, ``E``, ``L``, ``G``), ``COLUMNS`` (with ``MARKER`` ``INTORG``/``INTEND``
integer blocks), ``RHS`` (on the objective row: minus the objective constant), ``RANGES``,
``BOUNDS`` (``UP LO FX FR MI PL BV LI UI``), ``ENDATA``. Semantics follow the common
convention (e.g. HiGHS, CPLEX): a range ``R`` on an ``E`` row gives ``[rhs, rhs + R]`` for
``R > 0`` and ``[rhs + R, rhs]`` for ``R < 0``; on ``L`` rows ``[rhs - |R|, rhs]``; on ``G``
rows ``[rhs, rhs + |R|]``; an integer column (``MARKER`` block) with no line in ``BOUNDS``
is binary, bounds ``[0, 1]`` (so :func:`write_mps` writes ``PL`` for an integer column on
``[0, inf)``); an ``UP`` bound below zero on a column whose lower bound is
still the default 0 makes the lower bound ``-inf`` (with a warning); a value on an ``FR``,
``MI``, ``PL`` or ``BV`` line, which these take none of, is ignored with a warning, and the
set name is optional there as on the other bound lines. Only the first ``N``
row is the objective; later ones are dropped.

Infinity: as in HiGHS and CPLEX, a value of magnitude at least ``1e20`` in ``RHS``,
``RANGES`` or ``BOUNDS`` means an infinite one (``1e30`` is the usual spelling); kept
finite, it would constrain nothing yet dominate the norm of the bounds, which scales the
solver's relative residuals. The objective constant (``RHS`` on the objective row) and the
coefficients stay as written. A bound that is infinite on its wrong side (``LO 1e30``,
``UP -1e30``, ``FX 1e30``) or a row whose sides become empty (``L`` row with ``RHS
-1e30``) is an error. :func:`write_mps` therefore writes finite values of that magnitude,
which read back infinite, only with a warning, and only on their own side (a lower value
of ``-1e25``, an upper one of ``1e25``); on the other it refuses them.

Malformed input raises :class:`MPSError` with the line number. A value given twice (a
column's entry in one row or its cost, a row's ``RHS`` or ``RANGES`` value, the objective
constant) is malformed too, and the error names both lines: summing or overwriting it would
read another problem than the one written.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Literal

import numpy as np
import scipy.sparse as sp

from jaxopt_suite.lp.problem import LP

_SECTIONS = ("NAME", "OBJSENSE", "ROWS", "COLUMNS", "RHS", "RANGES", "BOUNDS", "ENDATA")
# Words HiGHS reads as a section header even on an indented line (others, such as ROWS or
# BOUNDS, only at the line's start): a column of one of these names misreads the file.
_HEADER_WORDS = ("NAME", "OBJSENSE", "QSECTION", "CSECTION", "QCMATRIX")
_BOUND_TYPES = ("UP", "LO", "FX", "FR", "MI", "PL", "BV", "LI", "UI")
INFINITY = 1e20  # |value| >= INFINITY in RHS, RANGES and BOUNDS reads as +-inf


def _infinite(value: float) -> float:
    """``value``, or ``+-inf`` from :data:`INFINITY` on (module docstring)."""
    return math.copysign(math.inf, value) if abs(value) >= INFINITY else value


class MPSError(ValueError):
    """A malformed MPS file; the message names the file and line (``line``, 1-based, and
    ``reason``, the message without the file and line, are kept as attributes)."""

    def __init__(self, message: str, *, line: int = 0, reason: str = ""):
        super().__init__(message)
        self.line, self.reason = line, reason or message


def read_mps(path: str | Path, *, format: Literal["auto", "free", "fixed"] = "auto") -> LP:
    """Reads an MPS file into an :class:`~jaxopt_suite.lp.LP` (minimisation; a ``MAX``
    objective is negated and ``objective_sign`` set to ``-1``).

    ``format="auto"`` reads free MPS and falls back to fixed columns when the free reading
    fails (names with spaces exist only in fixed MPS). Where both fail, the error is that of
    the reading that got further into the file, and names where the other failed.
    """
    if format not in ("auto", "free", "fixed"):
        raise ValueError(f"format must be 'auto', 'free' or 'fixed', got {format!r}")
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no MPS file at {path}")
    lines = _text_lines(path)
    if format != "auto":
        return _Reader(path, lines, fixed=format == "fixed").read()
    try:
        return _Reader(path, lines, fixed=False).read()
    except MPSError as free_error:
        try:
            return _Reader(path, lines, fixed=True).read()
        except MPSError as fixed_error:
            # the reading that got further is the one that read the file's format: a fixed
            # file with spaced names fails the free reading early, at a line that is fine
            first, other, other_format = (
                (fixed_error, free_error, "free")
                if fixed_error.line > free_error.line
                else (free_error, fixed_error, "fixed")
            )
            if (other.line, other.reason) == (first.line, first.reason):
                raise first from None
            raise MPSError(
                f"{first} (read as {other_format} MPS it fails at line {other.line}: "
                f"{other.reason})",
                line=first.line,
                reason=first.reason,
            ) from None


def _text_lines(path: Path) -> list[str]:
    """The file's lines as text: UTF-8, except comment lines (``*``), which are only
    skipped and may hold any bytes (a Latin-1 comment is common); other bytes that are not
    UTF-8 raise :class:`MPSError` with the line."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        pass  # line by line, to tell comments from content and name the line
    lines = []
    for number, raw in enumerate(data.splitlines(), start=1):
        try:
            lines.append(raw.decode("utf-8"))
        except UnicodeDecodeError as error:
            if raw.lstrip().startswith(b"*"):
                lines.append(raw.decode("latin-1"))
                continue
            reason = f"not UTF-8 text (byte 0x{raw[error.start]:02x} at position {error.start + 1})"
            raise MPSError(f"{path}:{number}: {reason}", line=number, reason=reason) from None
    return lines


def _fixed_fields(line: str) -> list[str]:
    """Fields 1-6 of fixed MPS: columns 2-3, 5-12, 15-22, 25-36, 40-47, 50-61."""
    spans = ((1, 3), (4, 12), (14, 22), (24, 36), (39, 47), (49, 61))
    fields = [line[a:b].strip() for a, b in spans]
    while fields and not fields[-1]:
        fields.pop()
    return fields


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _ordered_names(index: dict[str, int], count: int) -> list[str]:
    """The names of ``index`` (name -> position) in position order."""
    names = [None] * count
    for name, position in index.items():
        names[position] = name
    return names


class _Reader:
    def __init__(self, path: Path, lines: list[str], fixed: bool):
        self.path, self.lines, self.fixed = path, lines, fixed
        self.name = ""
        self.sense = 1
        self.objective: str | None = None
        self.row_index: dict[str, int] = {}
        self.row_types: list[str] = []
        self.dropped_n: set[str] = set()
        self.col_index: dict[str, int] = {}
        self.entries: list[tuple[int, int, float]] = []
        self.cost: dict[int, float] = {}
        self.integer: list[bool] = []
        self.rhs: dict[int, float] = {}
        self.rhs_lines: dict[int, int] = {}
        self.ranges: dict[int, float] = {}
        self.range_lines: dict[int, int] = {}
        self.entry_lines: dict[tuple[int, int], int] = {}  # (row or -1: objective, column)
        self.offset_lines: dict[int, int] = {}
        self.offset = 0.0
        self.lower: dict[int, float] = {}
        self.upper: dict[int, float] = {}
        self.lower_set: set[int] = set()
        self.bound_lines: dict[int, int] = {}  # column -> its last line in BOUNDS

    def fail(self, number: int, message: str) -> MPSError:
        return MPSError(f"{self.path}:{number}: {message}", line=number, reason=message)

    def once(self, seen: dict, key, number: int, what: str) -> None:
        """Records that line ``number`` gives ``what``; a second line giving it is an
        error (summing or overwriting it would read another problem than written)."""
        if key in seen:
            raise self.fail(number, f"{what} is given a second time (first on line {seen[key]})")
        seen[key] = number

    def number(self, number: int, text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise self.fail(number, f"expected a number, got {text!r}") from None
        if math.isnan(value):
            raise self.fail(number, "NaN is not a valid coefficient")
        return value

    def read(self) -> LP:
        section = None
        in_integer = False
        ended = False
        for number, raw in enumerate(self.lines, start=1):
            line = raw.rstrip()
            if not line.strip() or line.lstrip().startswith("*"):
                continue
            if not raw[0].isspace():
                words = line.split()
                head = words[0].upper()
                if head not in _SECTIONS:
                    raise self.fail(number, f"unknown section {words[0]!r}")
                section = head
                if head == "NAME":
                    self.name = line[4:].strip() if self.fixed else " ".join(words[1:])
                elif head == "OBJSENSE" and len(words) > 1:
                    self.set_sense(number, words[1])
                elif head == "ENDATA":
                    ended = True
                    break
                elif len(words) > 1 and head not in ("RHS", "RANGES", "BOUNDS"):
                    raise self.fail(
                        number, f"unexpected text after {head}: {' '.join(words[1:])!r}"
                    )
                continue
            if section == "OBJSENSE":
                # MIN / MAX sits wherever the writer put it (write_mps indents it four
                # columns, in field 2 of a fixed card): the first word, in either format
                self.set_sense(number, line.split()[0])
                continue
            fields = _fixed_fields(raw) if self.fixed else line.split()
            if self.fixed and section in ("COLUMNS", "RHS", "RANGES"):
                if fields and fields[0]:
                    raise self.fail(number, f"field 1 (columns 2-3) must be empty in {section}")
                fields = fields[1:]
            if section is None:
                raise self.fail(number, "data before any section header")
            if section == "ROWS":
                self.read_row(number, fields)
            elif section == "COLUMNS":
                in_integer = self.read_column(number, fields, in_integer)
            elif section in ("RHS", "RANGES"):
                self.read_values(number, fields, section)
            elif section == "BOUNDS":
                self.read_bound(number, fields)
            else:
                raise self.fail(number, f"unexpected data in section {section}")
        if section is None:
            raise self.fail(1, "no MPS section in the file (it is empty or all comments)")
        if not ended:
            raise self.fail(len(self.lines), "missing ENDATA")
        if self.objective is None:
            raise self.fail(1, "no objective (N) row in ROWS")
        return self.build()

    def set_sense(self, number: int, word: str) -> None:
        word = word.upper()
        if word in ("MIN", "MINIMIZE", "MINIMISE"):
            self.sense = 1
        elif word in ("MAX", "MAXIMIZE", "MAXIMISE"):
            self.sense = -1
        else:
            raise self.fail(number, f"OBJSENSE must be MIN or MAX, got {word!r}")

    def read_row(self, number: int, fields: list[str]) -> None:
        if len(fields) != 2:
            raise self.fail(number, f"a ROWS line has a type and a name, got {fields}")
        kind, name = fields[0].upper(), fields[1]
        if kind not in ("N", "E", "L", "G"):
            raise self.fail(number, f"unknown row type {fields[0]!r} for row {name!r}")
        if name in self.row_index or name == self.objective or name in self.dropped_n:
            raise self.fail(number, f"duplicate row {name!r}")
        if kind == "N":
            if self.objective is None:
                self.objective = name
            else:
                self.dropped_n.add(name)
            return
        self.row_index[name] = len(self.row_types)
        self.row_types.append(kind)

    def column(self, number: int, name: str) -> int:
        if name not in self.col_index:
            self.col_index[name] = len(self.col_index)
            self.integer.append(False)
        return self.col_index[name]

    def read_column(self, number: int, fields: list[str], in_integer: bool) -> bool:
        if len(fields) >= 3 and fields[1].strip("'\"").upper() == "MARKER":
            marker = [f for f in fields[2:] if f][-1].strip("'\"").upper()
            if marker == "INTORG":
                return True
            if marker == "INTEND":
                return False
            raise self.fail(number, f"unknown MARKER {fields[2]!r}")
        if len(fields) not in (3, 5):
            raise self.fail(
                number, f"a COLUMNS line has a column and 1 or 2 (row, value) pairs, got {fields}"
            )
        j = self.column(number, fields[0])
        if in_integer:
            self.integer[j] = True
        for row, text in zip(fields[1::2], fields[2::2], strict=True):
            value = self.number(number, text)
            if math.isinf(value):
                raise self.fail(
                    number,
                    f"coefficient {text} of column {fields[0]!r} in row {row!r} is not finite",
                )
            if row == self.objective:
                self.once(self.entry_lines, (-1, j), number, f"column {fields[0]!r}'s cost")
                self.cost[j] = value
            elif row in self.dropped_n:
                continue
            elif row in self.row_index:
                i = self.row_index[row]
                self.once(
                    self.entry_lines, (i, j), number, f"column {fields[0]!r}'s entry in row {row!r}"
                )
                self.entries.append((i, j, value))
            else:
                raise self.fail(number, f"column {fields[0]!r} refers to unknown row {row!r}")
        return in_integer

    def read_values(self, number: int, fields: list[str], section: str) -> None:
        # The set name (first field) is optional in free MPS: pairs decide.
        if len(fields) in (3, 5):
            pairs = fields[1:]
        elif len(fields) in (2, 4):
            pairs = fields
        else:
            raise self.fail(number, f"a {section} line has (row, value) pairs, got {fields}")
        for row, text in zip(pairs[0::2], pairs[1::2], strict=True):
            value = self.number(number, text)
            if section == "RHS" and row == self.objective:
                if math.isinf(value):
                    raise self.fail(number, f"the objective constant (RHS {text}) is not finite")
                self.once(self.offset_lines, 0, number, "the objective constant (RHS)")
                self.offset = -value
            elif row in self.dropped_n:
                continue
            elif row in self.row_index:
                i = self.row_index[row]
                if section == "RHS":
                    self.once(self.rhs_lines, i, number, f"the RHS of row {row!r}")
                    self.rhs[i] = _infinite(value)
                else:
                    self.once(self.range_lines, i, number, f"the RANGES value of row {row!r}")
                    self.ranges[i] = _infinite(value)
            else:
                raise self.fail(number, f"{section} refers to unknown row {row!r}")

    def read_bound(self, number: int, fields: list[str]) -> None:
        if not fields:
            return
        kind = fields[0].upper()
        if kind not in _BOUND_TYPES:
            raise self.fail(number, f"unknown bound type {fields[0]!r}")
        needs_value = kind not in ("FR", "MI", "PL", "BV")
        # [type, set?, column, value?]: the set name is optional in free MPS.
        rest = fields[1:]
        if needs_value:
            if len(rest) == 3:
                rest = rest[1:]
            if len(rest) != 2:
                raise self.fail(number, f"a {kind} bound needs a column and a value, got {fields}")
            name, value = rest[0], _infinite(self.number(number, rest[1]))
            wrong_side = (
                (kind in ("UP", "UI") and value == -np.inf)
                or (kind in ("LO", "LI") and value == np.inf)
                or (kind == "FX" and math.isinf(value))
            )
            if wrong_side:
                raise self.fail(
                    number,
                    f"{kind} bound {rest[1]} on column {name!r} is infinite on the wrong "
                    f"side (|values| >= {INFINITY:g} are infinite)",
                )
        else:
            name, value = self.valueless_bound_column(number, kind, fields), None
        if name not in self.col_index:
            raise self.fail(number, f"bound on unknown column {name!r}")
        j = self.col_index[name]
        self.bound_lines[j] = number
        if kind == "UP" or kind == "UI":
            self.upper[j] = value
            if value < 0 and j not in self.lower_set and self.lower.get(j, 0.0) == 0.0:
                warnings.warn(
                    f"{self.path}:{number}: UP bound {value} < 0 on column {name!r} with the "
                    "default lower bound 0: lower bound set to -inf",
                    stacklevel=3,
                )
                self.lower[j] = -np.inf
        elif kind in ("LO", "LI"):
            self.lower[j] = value
            self.lower_set.add(j)
        elif kind == "FX":
            self.lower[j] = self.upper[j] = value
            self.lower_set.add(j)
        elif kind == "FR":
            self.lower[j], self.upper[j] = -np.inf, np.inf
            self.lower_set.add(j)
        elif kind == "MI":
            self.lower[j] = -np.inf
            self.lower_set.add(j)
        elif kind == "PL":
            self.upper[j] = np.inf
        if kind in ("BV", "LI", "UI"):
            self.integer[j] = True
        if kind == "BV":
            self.lower[j], self.upper[j] = 0.0, 1.0
            self.lower_set.add(j)

    def valueless_bound_column(self, number: int, kind: str, fields: list[str]) -> str:
        """The column of an ``FR``, ``MI``, ``PL`` or ``BV`` line, ``[type, set?, column,
        value?]``: these take no value (``BV``'s bounds are 0 and 1), but writers put one
        there anyway, which HiGHS and CPLEX read and ignore; so does this reader, with a
        warning. Two fields are ``set column`` unless only the first names a column and the
        second is a number (``column value``)."""
        rest = fields[1:]
        if len(rest) == 3:
            name, text = rest[1], rest[2]
        elif len(rest) == 2:
            column_value = (
                rest[1] not in self.col_index and rest[0] in self.col_index and _is_number(rest[1])
            )
            name, text = (rest[0], rest[1]) if column_value else (rest[1], None)
        elif len(rest) == 1:
            name, text = rest[0], None
        else:
            raise self.fail(
                number, f"a {kind} bound needs a column (and an optional set name), got {fields}"
            )
        if text is not None:
            self.number(number, text)
            warnings.warn(
                f"{self.path}:{number}: the value {text} on the {kind} bound of column "
                f"{name!r} is ignored ({kind} bounds take none)",
                stacklevel=4,
            )
        return name

    def row_names(self) -> list[str]:
        return _ordered_names(self.row_index, len(self.row_types))

    def build(self) -> LP:
        m, n = len(self.row_types), len(self.col_index)
        rows = np.array([e[0] for e in self.entries], np.int64)
        cols = np.array([e[1] for e in self.entries], np.int64)
        vals = np.array([e[2] for e in self.entries], np.float64)
        A = sp.csr_array(sp.coo_array((vals, (rows, cols)), shape=(m, n)))
        c = np.zeros(n)
        for j, value in self.cost.items():
            c[j] = value
        row_lower, row_upper = np.empty(m), np.empty(m)
        for i, kind in enumerate(self.row_types):
            rhs = self.rhs.get(i, 0.0)
            r = self.ranges.get(i)
            if kind == "E":
                lo = hi = rhs
                if r is not None:
                    lo, hi = (rhs, rhs + r) if r >= 0 else (rhs + r, rhs)
            elif kind == "L":
                lo, hi = (-np.inf if r is None else rhs - abs(r)), rhs
            else:
                lo, hi = rhs, (np.inf if r is None else rhs + abs(r))
            if math.isnan(lo) or math.isnan(hi) or lo == np.inf or hi == -np.inf:
                # only an infinite RHS can empty a row (an infinite range frees a side)
                raise self.fail(
                    self.rhs_lines[i],
                    f"{kind} row {self.row_names()[i]!r} with RHS {rhs} and RANGES {r} "
                    f"has bounds [{lo}, {hi}], which nothing satisfies (|values| >= "
                    f"{INFINITY:g} are infinite)",
                )
            row_lower[i], row_upper[i] = lo, hi
        var_lower, var_upper = np.zeros(n), np.full(n, np.inf)
        # an integer column with no bound line is binary (module docstring)
        bounded = np.zeros(n, bool)
        bounded[list(self.lower.keys() | self.upper.keys())] = True
        var_upper[np.array(self.integer, bool) & ~bounded] = 1.0
        for j, value in self.lower.items():
            var_lower[j] = value
        for j, value in self.upper.items():
            var_upper[j] = value
        names = _ordered_names(self.col_index, n)
        crossed = np.flatnonzero(var_lower > var_upper)
        if crossed.size:
            j = int(crossed[0])
            raise self.fail(
                self.bound_lines[j],
                f"column {names[j]!r} has lower bound {var_lower[j]} > upper bound "
                f"{var_upper[j]} after this line",
            )
        return LP(
            c * self.sense,
            A,
            row_lower,
            row_upper,
            var_lower,
            var_upper,
            objective_offset=self.offset * self.sense,
            objective_sign=self.sense,
            name=self.name,
            row_names=self.row_names(),
            col_names=names,
            integer=np.array(self.integer, bool),
        )


def _num(value) -> str:
    """Shortest text that reads back to the same float64."""
    return repr(float(value))


def _range(rhs: float, other: float) -> float:
    """``|R|`` of a range row whose RHS is ``rhs``, so that the reader's ``rhs + |R|``
    (``G`` row, ``other > rhs``) or ``rhs - |R|`` (``L`` row) gives ``other`` back: the
    rounded difference, nudged by an ulp or two where rounding the sum misses ``other``
    and a nearby ``|R|`` hits it."""
    sign = 1.0 if other > rhs else -1.0
    r = abs(other - rhs)
    for _ in range(4):
        got = rhs + sign * r
        if got == other:
            return r
        r = float(np.nextafter(r, np.inf if sign * (other - got) > 0 else 0.0))
    return abs(other - rhs)


def _unused(base: str, taken: set[str]) -> str:
    """``base``, or ``base`` with the first number appended that makes it a name not in
    ``taken``."""
    name, k = base, 1
    while name in taken:
        name, k = f"{base}{k}", k + 1
    return name


def write_mps(lp: LP, path: str | Path, *, objective_name: str = "OBJ") -> None:
    """Writes ``lp`` as free MPS (integer columns in ``MARKER`` blocks). The minimisation
    form is written (``OBJSENSE`` ``MIN``). A two-sided row is a ``G`` row on its lower side
    or an ``L`` row on its upper side, whichever is smaller in magnitude, with the width in
    ``RANGES``: the reader rebuilds the far side as ``RHS +- |R|``, exactly wherever some
    float ``|R|`` allows and else within one rounding of the far side (writing the larger
    side would round a small one away: ``[-1e15, 1e-5]`` as ``-1e15`` plus ``1e15`` gives an
    upper side of 0). Finite bounds of magnitude at least :data:`INFINITY` read back as
    infinite (module docstring): they are written with a warning where infinity is their
    side (a lower side or bound of ``-1e25``, an upper one of ``1e25``), and refused with a
    ``ValueError`` where it is not (``1e25`` as a lower side, ``E`` row or fixed bound),
    which would make a file that :func:`read_mps` refuses. Names default to ``R<i>`` /
    ``C<j>``; names with spaces cannot be written, nor columns named after the section headers
    HiGHS reads anywhere on a line (``NAME``, ``OBJSENSE``, ``QSECTION``, ``CSECTION``,
    ``QCMATRIX``). The RHS, RANGES and BOUNDS sets are named ``RHS``, ``RNG`` and ``BND``,
    with a number appended where a row or column has that name. A free row (both sides infinite)
    constrains nothing and is written as an extra ``N`` row, which :func:`read_mps` drops."""
    m, n = lp.num_rows, lp.num_cols
    row_names = list(lp.row_names) if lp.row_names is not None else [f"R{i}" for i in range(m)]
    col_names = list(lp.col_names) if lp.col_names is not None else [f"C{j}" for j in range(n)]
    for name in [*row_names, *col_names, objective_name]:
        if not name or any(ch.isspace() for ch in name):
            raise ValueError(f"free MPS names cannot be empty or contain spaces: {name!r}")
        # a line starting with * is a comment, and MARKER opens an integer section
        if name.startswith("*") or name == "MARKER":
            raise ValueError(f"MPS names cannot start with '*' or be 'MARKER': {name!r}")
    for name in col_names:  # a column's name opens its COLUMNS lines
        if name.upper() in _HEADER_WORDS:
            raise ValueError(
                f"column name {name!r} cannot be written: free-MPS readers such as HiGHS take "
                "it for a section header wherever it opens a line"
            )
    # names are distinct: the LP refuses repeats (the reader would merge or refuse them)
    if objective_name in row_names:
        raise ValueError(f"objective_name {objective_name!r} is also a row name")
    # HiGHS (and other free-MPS readers) take the RHS / RANGES / BOUNDS set name as optional
    # and decide by the row and column names whether a line starts with one: a row named RHS
    # or a column named BND made them read every side or bound wrong. The set names avoid
    # every row and column name.
    taken = {*row_names, *col_names, objective_name}
    rhs_set, range_set, bound_set = (_unused(base, taken) for base in ("RHS", "RNG", "BND"))
    out = [f"NAME {lp.name or 'LP'}", "OBJSENSE", "    MIN", "ROWS", f" N {objective_name}"]
    for name, values, sign in (
        ("row_lower", lp.row_lower, 1.0),
        ("row_upper", lp.row_upper, -1.0),
        ("var_lower", lp.var_lower, 1.0),
        ("var_upper", lp.var_upper, -1.0),
    ):
        wrong = np.flatnonzero(np.isfinite(values) & (sign * np.asarray(values) >= INFINITY))
        if wrong.size:
            k = int(wrong[0])
            raise ValueError(
                f"{name}[{k}] = {float(values[k])} would read back as {sign:+g} * inf, a side "
                f"nothing satisfies, and read_mps would refuse the file (|values| >= "
                f"{INFINITY:g} are infinite in MPS)"
            )
    huge = [
        name
        for name, values in (
            ("row_lower", lp.row_lower),
            ("row_upper", lp.row_upper),
            ("var_lower", lp.var_lower),
            ("var_upper", lp.var_upper),
        )
        if np.any(np.isfinite(values) & (np.abs(values) >= INFINITY))
    ]
    if huge:
        warnings.warn(
            f"finite values of magnitude >= {INFINITY:g} in {', '.join(huge)} read back "
            "as infinite (read_mps, HiGHS, CPLEX)",
            stacklevel=2,
        )
    kinds, rhs, ranges = [], {}, {}
    for i in range(m):
        lo, hi = float(lp.row_lower[i]), float(lp.row_upper[i])
        if lo == hi:
            kinds.append("E")
            rhs[i] = lo
        elif np.isfinite(lo) and np.isfinite(hi):
            # the side of smaller magnitude is the RHS: the far side is rebuilt from it
            if abs(hi) < abs(lo):
                kinds.append("L")
                rhs[i], ranges[i] = hi, _range(hi, lo)
            else:
                kinds.append("G")
                rhs[i], ranges[i] = lo, _range(lo, hi)
        elif np.isfinite(hi):
            kinds.append("L")
            rhs[i] = hi
        elif np.isfinite(lo):
            kinds.append("G")
            rhs[i] = lo
        else:
            kinds.append("N")  # a free row carries no constraint
        out.append(f" {kinds[-1]} {row_names[i]}")
    out.append("COLUMNS")
    csc = lp.A.tocsc()
    in_integer = False
    for j in range(n):
        if lp.integer[j] != in_integer:
            marker = "INTORG" if lp.integer[j] else "INTEND"
            out.append(f"    MARKER 'MARKER' '{marker}'")
            in_integer = bool(lp.integer[j])
        out.append(f"    {col_names[j]} {objective_name} {_num(lp.c[j])}")
        start, stop = csc.indptr[j], csc.indptr[j + 1]
        for i, value in zip(csc.indices[start:stop], csc.data[start:stop], strict=True):
            out.append(f"    {col_names[j]} {row_names[i]} {_num(value)}")
    if in_integer:
        out.append("    MARKER 'MARKER' 'INTEND'")
    out.append("RHS")
    if lp.objective_offset:
        out.append(f"    {rhs_set} {objective_name} {_num(-lp.objective_offset)}")
    for i, value in rhs.items():
        if value:
            out.append(f"    {rhs_set} {row_names[i]} {_num(value)}")
    if ranges:
        out.append("RANGES")
        for i, value in ranges.items():
            out.append(f"    {range_set} {row_names[i]} {_num(value)}")
    out.append("BOUNDS")
    for j in range(n):
        lo, hi, name = lp.var_lower[j], lp.var_upper[j], col_names[j]
        if lo == hi:
            out.append(f" FX {bound_set} {name} {_num(lo)}")
            continue
        if lo == -np.inf and hi == np.inf:
            out.append(f" FR {bound_set} {name}")
            continue
        if lo == -np.inf:
            out.append(f" MI {bound_set} {name}")
        elif lo != 0.0:
            out.append(f" LO {bound_set} {name} {_num(lo)}")
        if hi != np.inf:
            out.append(f" UP {bound_set} {name} {_num(hi)}")
        elif lp.integer[j] and lo == 0.0:  # with no bound line it would read as binary
            out.append(f" PL {bound_set} {name}")
    out.append("ENDATA")
    Path(path).write_text("\n".join(out) + "\n")
