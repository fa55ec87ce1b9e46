"""Piecewise-linear models: a builder, and its compilation to one LP with SOS2 sets.

A model has continuous variables with bounds, linear constraints, a linear objective, and
univariate piecewise-linear terms ``z = f(x)`` given by breakpoints ``d_0 < ... < d_K``
and values ``f_0, ..., f_K`` (nonconvex allowed). ``add_pwl`` returns ``z`` as a
variable that can enter the objective and constraints like any other.

Compilation uses the convex-combination (lambda) formulation: each term gets columns
``lambda_0..lambda_K`` in ``[0, 1]``, a convexity row ``sum_k lambda_k = 1``, and a link
row ``x - sum_k d_k lambda_k = 0``; ``z`` is substituted by ``sum_k f_k lambda_k``
wherever it appears, so it costs no column or row. ``lambda`` must be SOS2 (at most two
nonzeros, adjacent). Every branch-and-bound node is then the same matrix with some
``lambda`` upper bounds set to 0, which is what the batched LP solver shares.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import scipy.sparse as sp

from jaxopt_suite.lp import LP
from jaxopt_suite.lp.problem import distinct_names


@dataclasses.dataclass(frozen=True)
class Var:
    """A handle on a model variable (``index`` in the model; ``pwl`` is the term's index
    when the variable is the value ``z = f(x)`` of a piecewise-linear term)."""

    index: int
    name: str
    pwl: int | None = None
    # part of equality and hashing: a dict of coefficients must not merge another model's
    # variable of the same index and name into this one's before it is checked
    owner: int = dataclasses.field(default=0, repr=False)

    def __repr__(self) -> str:
        return f"Var({self.name!r})"


def _real(value: Any, what: str) -> float:
    """``value`` as a float, or a TypeError naming ``what``: one real number, not a string
    (float("2") read it), a bool or an array."""
    if isinstance(value, str | bytes | bool | np.bool_):
        raise TypeError(f"{what} must be a real number, got {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{what} must be a real number, got {value!r}") from None


def _field(entry: Any, key: str, what: str) -> Any:
    """``entry[key]`` of a model description, or a ValueError naming ``what`` and ``key``."""
    if not isinstance(entry, Mapping) or key not in entry:
        raise ValueError(f"{what}: the description has no {key!r}")
    return entry[key]


def _stored_number(value: Any, what: str) -> float:
    """A bound or side of a model description: a real number, or ``"inf"`` / ``"-inf"`` as
    :meth:`PWLModel.to_dict` writes infinite ones (other strings and bools are refused)."""
    if isinstance(value, str) and value in ("inf", "-inf"):
        return float(value)
    return _real(value, what)


@dataclasses.dataclass(frozen=True)
class PWLTerm:
    """``z = f(x)``: ``x`` the argument, ``breakpoints`` ``d`` (K+1,), ``values`` ``f``."""

    x: Var
    z: Var
    breakpoints: np.ndarray
    values: np.ndarray
    name: str

    @property
    def segments(self) -> int:
        return len(self.breakpoints) - 1

    def __call__(self, x: Any) -> np.ndarray:
        """``f(x)`` by linear interpolation (``x`` inside the breakpoints)."""
        return np.interp(x, self.breakpoints, self.values)


@dataclasses.dataclass(frozen=True)
class CompiledPWL:
    """The lambda formulation of a model.

    ``lp``: min ``c^T v`` over ``v = (model variables, lambda columns)`` (a maximisation
    model is negated, as ``LP.objective_sign`` records). SOS2 set ``s`` owns the columns
    ``set_start[s] : set_start[s] + set_size[s]``; ``set_columns`` is the ``(S, K_max+1)``
    padded column table (``-1`` padding), ``column_set`` / ``column_position`` map a
    lambda column to its set and position (``-1`` for model variables). The rows are the
    model's constraints (``num_model_rows`` of them), then for each set ``s`` its convexity
    row ``sum lambda = 1`` (row ``num_model_rows + 2 s``) and its link row
    ``x - sum d_k lambda_k = 0`` (the next).
    """

    lp: LP
    num_vars: int
    set_start: np.ndarray
    set_size: np.ndarray
    set_columns: np.ndarray
    column_set: np.ndarray
    column_position: np.ndarray
    terms: tuple[PWLTerm, ...]
    var_names: tuple[str, ...]
    model_columns: np.ndarray  # model-variable index of each of the first num_vars columns
    model_size: int  # number of model variables, z included

    @property
    def num_sets(self) -> int:
        return len(self.set_start)

    @property
    def num_model_rows(self) -> int:
        return self.lp.num_rows - 2 * self.num_sets

    def model_values(self, v: np.ndarray) -> np.ndarray:
        """Model-variable values (``z`` included, as ``sum f_k lambda_k``) of an LP point."""
        v = np.asarray(v, np.float64)
        out = np.zeros(self.model_size)
        out[self.model_columns] = v[: self.num_vars]
        for t, s, size in zip(self.terms, self.set_start, self.set_size, strict=True):
            out[t.z.index] = float(t.values @ v[s : s + size])
        return out

    def split(self, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(model variables, lambda columns)`` of a column vector ``v`` (or ``(B, n)``)."""
        v = np.asarray(v)
        return v[..., : self.num_vars], v[..., self.num_vars :]

    def lambdas(self, v: np.ndarray) -> np.ndarray:
        """The ``(..., S, K_max+1)`` padded lambda table of ``v`` (padding 0)."""
        v = np.asarray(v)
        table = np.where(self.set_columns >= 0, v[..., np.maximum(self.set_columns, 0)], 0.0)
        return table


class PWLModel:
    """A piecewise-linear optimisation model (see the module docstring).

    >>> m = PWLModel()
    >>> x = m.add_variable(0.0, 10.0, name="x")
    >>> cost = m.add_pwl(x, [0, 4, 10], [0, 8, 9])       # concave cost of x
    >>> m.add_constraint({x: 1.0}, lower=2.0)
    >>> m.minimize({cost: 1.0, x: -0.5})
    """

    def __init__(self, name: str = "pwl") -> None:
        self.name = name
        self._names: list[str] = []
        self._lower: list[float] = []
        self._upper: list[float] = []
        self._alias: list[int | None] = []  # PWL term index for a z variable
        self._rows: list[tuple[dict[int, float], float, float, str]] = []
        self._terms: list[PWLTerm] = []
        self._objective: dict[int, float] = {}
        self._constant = 0.0
        self._sense = "min"
        self._token = id(self)
        self._name_set: set[str] = set()
        self._row_names: set[str] = set()
        self._row_cache = None  # see _row_arrays

    # -- building ------------------------------------------------------------------------

    @property
    def num_variables(self) -> int:
        return len(self._names)

    @property
    def num_constraints(self) -> int:
        return len(self._rows)

    @property
    def terms(self) -> tuple[PWLTerm, ...]:
        return tuple(self._terms)

    def add_variable(
        self, lower: float = 0.0, upper: float = math.inf, *, name: str | None = None
    ) -> Var:
        """A continuous variable in ``[lower, upper]`` (infinite bounds allowed)."""
        label = "a new variable" if name is None else f"variable {str(name)!r}"
        lower = _real(lower, f"{label}: lower bound")
        upper = _real(upper, f"{label}: upper bound")
        name = self._fresh_name("v", name)
        if math.isnan(lower) or math.isnan(upper):
            raise ValueError(f"variable {name!r}: bounds must not be NaN")
        if lower > upper or lower == math.inf or upper == -math.inf:
            raise ValueError(f"variable {name!r}: lower bound {lower} > upper bound {upper}")
        self._names.append(name)
        self._name_set.add(name)
        self._lower.append(lower)
        self._upper.append(upper)
        self._alias.append(None)
        return Var(len(self._names) - 1, name, owner=self._token)

    def _fresh_name(self, prefix: str, name: str | None) -> str:
        """``name`` if unused (else an error), or the first free ``prefix<i>``."""
        if name is not None:
            name = str(name)
            if name in self._name_set:
                raise ValueError(f"variable name {name!r} is already used in this model")
            return name
        i = len(self._names)
        while f"{prefix}{i}" in self._name_set:
            i += 1
        return f"{prefix}{i}"

    def add_pwl(
        self,
        x: Var,
        breakpoints: Iterable[float],
        values: Iterable[float],
        *,
        name: str | None = None,
    ) -> Var:
        """``z = f(x)`` with ``f`` linear between ``(breakpoints[k], values[k])``; returns
        ``z``. Breakpoints must be finite and strictly increasing (at least two); ``x`` is
        confined to ``[breakpoints[0], breakpoints[-1]]`` by the formulation."""
        self._check_var(x, "x")
        if x.pwl is not None:
            raise ValueError(f"x must be a model variable, not the value of PWL term {x.name!r}")
        arrays = []
        for label, given in (("breakpoints", breakpoints), ("values", values)):
            try:
                entries = list(given)
                if any(isinstance(v, str | bytes) for v in entries):  # "5" read as 5.0
                    raise TypeError
                arrays.append(np.asarray(entries, np.float64))
            except (TypeError, ValueError):
                raise TypeError(f"{label} must be a list of numbers, got {given!r}") from None
        d, f = arrays
        if name is None:
            name = f"f{len(self._terms)}_{x.name}"
            if name in self._name_set:
                name = self._fresh_name(f"{name}_", None)
        name = self._fresh_name("", str(name))
        if d.ndim != 1 or d.size < 2:
            raise ValueError(f"PWL term {name!r}: breakpoints must be a 1-d list of >= 2 values")
        if f.shape != d.shape:
            raise ValueError(
                f"PWL term {name!r}: values of shape {f.shape} for breakpoints of shape "
                f"{d.shape} (need one number each)"
            )
        if np.any(np.isnan(d)):
            raise ValueError(f"PWL term {name!r}: breakpoints must not be NaN")
        if not np.all(np.isfinite(d)):
            raise ValueError(
                f"PWL term {name!r}: breakpoints must be finite (an unbounded PWL domain cannot "
                "be written as a convex combination); bound x and give the last breakpoint"
            )
        if not np.all(np.isfinite(f)):
            raise ValueError(f"PWL term {name!r}: values must be finite")
        bad = np.flatnonzero(np.diff(d) <= 0)
        if bad.size:
            k = int(bad[0])
            raise ValueError(
                f"PWL term {name!r}: breakpoints must be strictly increasing, got "
                f"d[{k}] = {d[k]} >= d[{k + 1}] = {d[k + 1]}"
            )
        lo, hi = self._lower[x.index], self._upper[x.index]
        if hi < d[0] or lo > d[-1]:
            raise ValueError(
                f"PWL term {name!r}: the bounds [{lo}, {hi}] of {x.name!r} miss the breakpoint "
                f"range [{d[0]}, {d[-1]}]: the model is infeasible"
            )
        index = len(self._terms)
        self._names.append(name)
        self._name_set.add(name)
        self._lower.append(float(f.min()))
        self._upper.append(float(f.max()))
        self._alias.append(index)
        z = Var(len(self._names) - 1, name, pwl=index, owner=self._token)
        d.flags.writeable = f.flags.writeable = False  # checked: kept as checked
        self._terms.append(PWLTerm(x, z, d, f, name))
        return z

    def add_constraint(
        self,
        terms: Mapping[Var, float] | Iterable[tuple[Var, float]],
        lower: float = -math.inf,
        upper: float = math.inf,
        *,
        name: str | None = None,
    ) -> int:
        """``lower <= sum coef * var <= upper`` (equality: ``lower == upper``); returns
        the row index."""
        label = f"constraint {name or len(self._rows)}"
        coefs = self._linear(terms, label)
        lower, upper = _real(lower, f"{label}: lower"), _real(upper, f"{label}: upper")
        if name is None:
            i = len(self._rows)
            while f"r{i}" in self._row_names:
                i += 1
            name = f"r{i}"
        name = str(name)
        if name in self._row_names:
            raise ValueError(f"constraint name {name!r} is already used in this model")
        if math.isnan(lower) or math.isnan(upper):
            raise ValueError(f"constraint {name!r}: bounds must not be NaN")
        if lower > upper or lower == math.inf or upper == -math.inf:
            raise ValueError(f"constraint {name!r}: lower {lower} > upper {upper}")
        if lower == -math.inf and upper == math.inf:
            raise ValueError(f"constraint {name!r}: give at least one finite side")
        self._rows.append((coefs, lower, upper, name))
        self._row_names.add(name)
        return len(self._rows) - 1

    def minimize(
        self, terms: Mapping[Var, float] | Iterable[tuple[Var, float]], constant: float = 0.0
    ) -> None:
        self._set_objective(terms, constant, "min")

    def maximize(
        self, terms: Mapping[Var, float] | Iterable[tuple[Var, float]], constant: float = 0.0
    ) -> None:
        self._set_objective(terms, constant, "max")

    @property
    def sense(self) -> str:
        return self._sense

    def _set_objective(self, terms, constant, sense) -> None:
        self._objective = self._linear(terms, "objective")
        constant = _real(constant, "objective constant")
        if not math.isfinite(constant):
            raise ValueError(f"objective constant must be finite, got {constant}")
        self._constant = constant
        self._sense = sense

    def _check_var(self, v: Any, what: str) -> None:
        if not isinstance(v, Var):
            raise TypeError(f"{what}: expected a Var of this model, got {type(v).__name__}")
        if (
            v.owner != self._token
            or not 0 <= v.index < len(self._names)
            or self._names[v.index] != v.name
        ):
            raise ValueError(f"{what}: {v!r} does not belong to this model")

    def _linear(self, terms, what) -> dict[int, float]:
        items = terms.items() if isinstance(terms, Mapping) else terms
        out: dict[int, float] = {}
        for item in items:
            try:
                var, coef = item
            except (TypeError, ValueError):
                raise TypeError(
                    f"{what}: terms must be a mapping {{Var: coefficient}} or (Var, coefficient) "
                    f"pairs, got the entry {item!r}"
                ) from None
            self._check_var(var, what)
            coef = _real(coef, f"{what}: coefficient of {var.name!r}")
            if not math.isfinite(coef):
                raise ValueError(f"{what}: coefficient of {var.name!r} is {coef}")
            out[var.index] = out.get(var.index, 0.0) + coef
            if not math.isfinite(out[var.index]):  # repeated entries are summed
                raise ValueError(
                    f"{what}: the coefficients of {var.name!r} sum to {out[var.index]}"
                )
        return out

    # -- serialisation -------------------------------------------------------------------

    def to_dict(self) -> dict:
        """A JSON-ready description (``from_dict`` rebuilds the same model); infinite
        bounds are written as the strings ``"inf"`` / ``"-inf"``."""

        def num(v: float):
            return v if math.isfinite(v) else ("inf" if v > 0 else "-inf")

        variables = []
        for i, name in enumerate(self._names):
            alias = self._alias[i]
            if alias is None:
                variables.append(
                    {"name": name, "lower": num(self._lower[i]), "upper": num(self._upper[i])}
                )
            else:
                t = self._terms[alias]
                variables.append(
                    {
                        "name": name,
                        "pwl": {
                            "x": t.x.name,
                            "breakpoints": t.breakpoints.tolist(),
                            "values": t.values.tolist(),
                        },
                    }
                )
        return {
            "format": "jaxopt_suite.pwl/1",
            "name": self.name,
            "variables": variables,
            "constraints": [
                {
                    "name": name,
                    "terms": {self._names[i]: c for i, c in coefs.items()},
                    "lower": num(lo),
                    "upper": num(hi),
                }
                for coefs, lo, hi, name in self._rows
            ],
            "objective": {
                "sense": self._sense,
                "terms": {self._names[i]: c for i, c in self._objective.items()},
                "constant": self._constant,
            },
        }

    @classmethod
    def from_dict(cls, data: Mapping) -> PWLModel:
        """The model described by ``data`` (as written by :meth:`to_dict`)."""
        if not isinstance(data, Mapping):
            raise ValueError(f"not a PWL model description (a {type(data).__name__})")
        if data.get("format") != "jaxopt_suite.pwl/1":
            raise ValueError(f"not a PWL model description (format {data.get('format')!r})")
        model = cls(str(data.get("name", "pwl")))
        by_name: dict[str, Var] = {}
        for entry in _field(data, "variables", "the model"):
            name = _field(entry, "name", "a variable")
            if name in by_name:
                raise ValueError(f"variable name {name!r} appears twice")
            if "pwl" in entry:
                spec = entry["pwl"]
                what = f"PWL term {name!r}"
                argument = _field(spec, "x", what)
                if argument not in by_name:
                    raise ValueError(f"{what}: argument {argument!r} is not defined before it")
                by_name[name] = model.add_pwl(
                    by_name[argument],
                    _field(spec, "breakpoints", what),
                    _field(spec, "values", what),
                    name=name,
                )
            else:
                what = f"variable {name!r}"
                by_name[name] = model.add_variable(
                    _stored_number(_field(entry, "lower", what), f"{what}: lower bound"),
                    _stored_number(_field(entry, "upper", what), f"{what}: upper bound"),
                    name=name,
                )

        def linear(terms: Mapping[str, float], what: str) -> dict[Var, float]:
            unknown = [k for k in terms if k not in by_name]
            if unknown:
                raise ValueError(f"{what}: unknown variable {unknown[0]!r}")
            return {by_name[k]: _real(v, f"{what}: coefficient of {k!r}") for k, v in terms.items()}

        for row in _field(data, "constraints", "the model"):
            what = f"constraint {_field(row, 'name', 'a constraint')!r}"
            model.add_constraint(
                linear(_field(row, "terms", what), what),
                _stored_number(_field(row, "lower", what), f"{what}: lower side"),
                _stored_number(_field(row, "upper", what), f"{what}: upper side"),
                name=row["name"],
            )
        objective = _field(data, "objective", "the model")
        terms = linear(_field(objective, "terms", "the objective"), "objective")
        sense = _field(objective, "sense", "the objective")
        if sense not in ("min", "max"):
            raise ValueError(f"objective sense must be 'min' or 'max', got {sense!r}")
        constant = _real(objective.get("constant", 0.0), "objective: constant")
        if sense == "max":
            model.maximize(terms, constant)
        else:
            model.minimize(terms, constant)
        return model

    # -- evaluation ----------------------------------------------------------------------

    def objective_value(self, values: np.ndarray) -> float:
        """The objective at model-variable values (``z`` entries taken as given)."""
        v = np.asarray(values, np.float64)
        if v.shape != (self.num_variables,):  # an LP point (lambdas too) read as a model's
            raise ValueError(f"values must have shape ({self.num_variables},), got {v.shape}")
        return float(sum(c * v[i] for i, c in self._objective.items()) + self._constant)

    def snap(self, values: np.ndarray) -> np.ndarray:
        """``values`` with every term's ``z`` set to ``f(x)`` exactly (``x`` clipped to
        its breakpoint range first). An LP point satisfies ``z = f(x)`` only to its
        tolerance, through the lambda rows; this removes that error (a row that holds
        ``z`` may then move by as much)."""
        v = np.array(values, np.float64)
        if v.shape != (self.num_variables,):
            raise ValueError(f"values must have shape ({self.num_variables},), got {v.shape}")
        for t in self._terms:
            x = float(np.clip(v[t.x.index], t.breakpoints[0], t.breakpoints[-1]))
            v[t.x.index] = x
            v[t.z.index] = t(x)
        return v

    def check(self, values: np.ndarray) -> float:
        """The largest relative violation at model-variable values ``values``: of a bound or
        row side ``b`` as ``violation / (1 + |b|)``, of the breakpoint range and of
        ``z = f(x)`` as ``violation / (1 + |x|)`` and ``/ (1 + |f(x)|)``."""
        v = np.asarray(values, np.float64)
        if v.shape != (self.num_variables,):
            raise ValueError(f"values must have shape ({self.num_variables},), got {v.shape}")
        lo, hi = np.asarray(self._lower, np.float64), np.asarray(self._upper, np.float64)
        below = np.maximum(lo - v, 0.0) / (1 + np.abs(np.where(np.isfinite(lo), lo, 0)))
        above = np.maximum(v - hi, 0.0) / (1 + np.abs(np.where(np.isfinite(hi), hi, 0)))
        worst = float(np.max(below, initial=0.0))  # initial: a model without variables
        worst = max(worst, float(np.max(above, initial=0.0)))
        rows, rl, ru = self._row_arrays()
        a = rows @ v
        with np.errstate(invalid="ignore"):  # inf - inf on the infinite sides, masked
            low = np.where(np.isfinite(rl), (rl - a) / (1 + np.abs(rl)), -np.inf)
            high = np.where(np.isfinite(ru), (a - ru) / (1 + np.abs(ru)), -np.inf)
        for violation in (low, high):  # a NaN row (a NaN value) counts for nothing
            worst = max(
                worst, float(np.max(violation, where=~np.isnan(violation), initial=-np.inf))
            )
        for t in self._terms:
            x = v[t.x.index]
            outside = max(t.breakpoints[0] - x, x - t.breakpoints[-1], 0.0)
            worst = max(worst, outside / (1 + abs(x)))
            worst = max(worst, abs(v[t.z.index] - t(x)) / (1 + abs(t(x))))
        return worst

    def _row_arrays(self) -> tuple[sp.csr_array, np.ndarray, np.ndarray]:
        """The rows as CSR (each row's entries in its own order, so a product sums them as
        the row's terms in turn, from 0) with their sides; rebuilt when rows or variables
        were added (models only grow)."""
        key = (len(self._rows), self.num_variables)
        cached = getattr(self, "_row_cache", None)
        if cached is None or cached[0] != key:
            indptr = np.cumsum([0] + [len(coefs) for coefs, *_ in self._rows])
            indices = [i for coefs, *_ in self._rows for i in coefs]
            data = [c for coefs, *_ in self._rows for c in coefs.values()]
            rows = sp.csr_array(
                (np.asarray(data, np.float64), np.asarray(indices, np.int64), indptr),
                shape=(len(self._rows), self.num_variables),
            )
            sides = np.array([(lo, hi) for _, lo, hi, _ in self._rows], np.float64).reshape(-1, 2)
            cached = self._row_cache = (key, rows, sides[:, 0], sides[:, 1])
        return cached[1:]

    # -- compilation ---------------------------------------------------------------------

    def compile(self) -> CompiledPWL:
        """The lambda formulation (see :class:`CompiledPWL`). ``z`` variables are
        substituted by ``sum f_k lambda_k`` and get no column: the LP's columns are the
        other model variables followed by the lambda columns
        (:meth:`CompiledPWL.model_values` maps an LP point back)."""
        keep = [i for i, a in enumerate(self._alias) if a is None]
        col_of = {i: j for j, i in enumerate(keep)}
        num_vars = len(keep)
        sizes = np.array([t.segments + 1 for t in self._terms], np.int64)
        starts = num_vars + (np.cumsum(sizes) - sizes).astype(np.int64)
        n = num_vars + int(sizes.sum())
        rows, cols, vals = [], [], []
        row_lower, row_upper = [], []

        def emit(coefs: dict[int, float]) -> None:
            r = len(row_lower)
            for i, c in coefs.items():
                if c == 0.0:
                    continue
                alias = self._alias[i]
                if alias is None:
                    rows.append(r)
                    cols.append(col_of[i])
                    vals.append(c)
                else:  # z = sum f_k lambda_k
                    t = self._terms[alias]
                    s = starts[alias]
                    rows.extend([r] * (t.segments + 1))
                    cols.extend(range(s, s + t.segments + 1))
                    vals.extend(c * t.values)

        for coefs, lo, hi, _ in self._rows:
            emit(coefs)
            row_lower.append(lo)
            row_upper.append(hi)
        for s, t in zip(starts, self._terms, strict=True):
            k = t.segments + 1
            r = len(row_lower)  # convexity
            rows.extend([r] * k)
            cols.extend(range(s, s + k))
            vals.extend([1.0] * k)
            row_lower.append(1.0)
            row_upper.append(1.0)
            r += 1  # link: x - sum d_k lambda_k = 0
            rows.append(r)
            cols.append(col_of[t.x.index])
            vals.append(1.0)
            rows.extend([r] * k)
            cols.extend(range(s, s + k))
            vals.extend(-t.breakpoints)
            row_lower.append(0.0)
            row_upper.append(0.0)
        m = len(row_lower)
        A = sp.csr_array((vals, (rows, cols)), shape=(m, n))
        A.sum_duplicates()
        A.eliminate_zeros()
        c = np.zeros(n)
        sign = 1 if self._sense == "min" else -1
        for i, coef in self._objective.items():
            alias = self._alias[i]
            if alias is None:
                c[col_of[i]] += sign * coef
            else:
                t = self._terms[alias]
                c[starts[alias] : starts[alias] + t.segments + 1] += sign * coef * t.values
        lower = np.concatenate([np.asarray(self._lower)[keep], np.zeros(n - num_vars)])
        upper = np.concatenate([np.asarray(self._upper)[keep], np.ones(n - num_vars)])
        # The link rows confine each PWL argument to its breakpoints; its column bounds say
        # so too, or an unbounded argument leaves every safe dual bound at -inf (nothing is
        # pruned). An empty intersection is left to the LP, which finds it infeasible.
        for t in self._terms:
            j = col_of[t.x.index]
            lo, hi = max(lower[j], t.breakpoints[0]), min(upper[j], t.breakpoints[-1])
            if lo <= hi:
                lower[j], upper[j] = lo, hi
        names = [self._names[i] for i in keep]
        col_names = names + [
            f"lambda[{t.name}][{k}]" for t in self._terms for k in range(t.segments + 1)
        ]
        lp = LP(
            c,
            A,
            np.asarray(row_lower),
            np.asarray(row_upper),
            lower,
            upper,
            objective_offset=sign * self._constant,
            objective_sign=sign,
            name=self.name,
            # a user's name may equal a generated one (a variable "lambda[f][0]"): the
            # generated name then takes a suffix
            row_names=distinct_names(
                [r[3] for r in self._rows]
                + [n_ for t in self._terms for n_ in (f"convex[{t.name}]", f"link[{t.name}]")]
            ),
            col_names=distinct_names(col_names),
        )
        width = int(sizes.max()) if sizes.size else 0
        table = np.full((len(sizes), width), -1, np.int64)
        column_set = np.full(n, -1, np.int64)
        column_position = np.full(n, -1, np.int64)
        for s, (start, size) in enumerate(zip(starts, sizes, strict=True)):
            table[s, :size] = np.arange(start, start + size)
            column_set[start : start + size] = s
            column_position[start : start + size] = np.arange(size)
        return CompiledPWL(
            lp=lp,
            num_vars=num_vars,
            set_start=starts,
            set_size=sizes,
            set_columns=table,
            column_set=column_set,
            column_position=column_position,
            terms=tuple(self._terms),
            var_names=tuple(names),
            model_columns=np.asarray(keep, np.int64),
            model_size=self.num_variables,
        )
