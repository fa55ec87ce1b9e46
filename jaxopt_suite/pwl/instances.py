"""Seeded piecewise-linear benchmark instances and the 43-instance suite.

Four families, each ``family(size..., segments, seed) -> PWLModel`` (see
``shared/design/notes/pwl.md`` section 4): :func:`portfolio` (MAD portfolio with concave
transaction costs), :func:`workforce` (shift covering with PWL overtime and hiring costs),
:func:`resource_allocation` (S-shaped returns, a maximisation) and :func:`transportation`
(concave arc costs). Every generator is deterministic in ``seed``, bounds every PWL argument
by its first and last breakpoints, and is feasible and bounded by construction (each
docstring says why). Variable and row names have no spaces (they go into MPS files).

:data:`SUITE` lists 43 :class:`InstanceSpec`; :func:`build` makes one, :func:`save` /
:func:`load` write and read ``<name>.json`` (the model's ``to_dict()`` plus ``"spec"``).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from jaxopt_suite.pwl.model import PWLModel

# -- helpers -----------------------------------------------------------------------------


def _check_sizes(**sizes: int) -> None:
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
        least = 2 if name == "segments" else 1
        if value < least:
            raise ValueError(f"{name} must be >= {least}, got {value}")


def _widths(rng: np.random.Generator, total: float, k: int, growth: float = 1.0) -> np.ndarray:
    """``k`` positive, unequal widths summing to ``total`` (growing by ``growth``)."""
    w = growth ** np.arange(k) * rng.uniform(0.6, 1.4, k)
    return total * w / w.sum()


def _breakpoints(widths: np.ndarray, end: float) -> np.ndarray:
    """``0, cumsum(widths)`` with the last breakpoint exactly ``end`` (the bound of ``x``)."""
    d = np.concatenate([[0.0], np.cumsum(widths)])
    d[-1] = end
    if np.any(np.diff(d) <= 0):
        raise ValueError("breakpoints are not strictly increasing")
    return d


def _from_slopes(d: np.ndarray, slopes: np.ndarray, f0: float = 0.0) -> np.ndarray:
    """Values at breakpoints ``d`` of the PWL function with ``slopes`` and ``f(d_0) = f0``."""
    return f0 + np.concatenate([[0.0], np.cumsum(slopes * np.diff(d))])


def _geometric(first: float, last: float, k: int) -> np.ndarray:
    """``k`` values from ``first`` to ``last`` in geometric progression."""
    if k == 1:
        return np.array([first])
    return first * (last / first) ** (np.arange(k) / (k - 1))


def _concave(
    rng: np.random.Generator, upper: float, k: int, first: float, last: float, growth: float
) -> tuple[np.ndarray, np.ndarray]:
    """Breakpoints on ``[0, upper]`` and values of an increasing concave function,
    ``f(0) = 0``, slopes strictly decreasing from ``first`` to ``last``; pieces widen by
    ``growth`` (a short steep first piece stands in for a fixed charge)."""
    d = _breakpoints(_widths(rng, upper, k, growth), upper)
    return d, _from_slopes(d, _geometric(first, last, k))


# -- families ----------------------------------------------------------------------------


def portfolio(assets: int, scenarios: int, segments: int, seed: int = 0) -> PWLModel:
    """MAD portfolio with concave transaction costs (Konno & Wijayanayake, 1999).

    Weights ``x_j in [0, u_j]``; scenario returns ``r_tj`` from a 3-factor model with mean
    ``rbar_j``; ``d_t >= +/- sum_j (r_tj - rbar_j) x_j``; ``sum_j rbar_j x_j >= rho``;
    budget ``sum_j x_j + sum_j cost_j(x_j) = 1`` with ``cost_j`` concave increasing
    (``segments`` pieces, decreasing rates, a short steep first piece); minimise
    ``(1/T) sum_t d_t``. One PWL term per asset.

    Feasible: ``sum_j u_j >= 2``, so filling assets in decreasing ``rbar`` order (each
    ``x_j`` up to ``u_j``, the last solving ``x + cost(x) = remaining``) spends the budget
    exactly; ``rho`` is at most that portfolio's return (a fraction of the way from the
    return of the diversified portfolio ``x = t u`` to it). Bounded: ``x`` is boxed and
    the objective is ``>= 0``.
    """
    _check_sizes(assets=assets, scenarios=scenarios, segments=segments)
    rng = np.random.default_rng(seed)
    n, T, K = assets, scenarios, segments
    factors = rng.normal(0.0, [0.04, 0.02, 0.015], (T, 3))
    beta = np.column_stack([rng.normal(1.0, 0.3, n), rng.normal(0.0, 0.5, (n, 2))])
    mu = rng.uniform(0.0, 0.015, n)
    returns = mu + factors @ beta.T + rng.normal(0.0, 1.0, (T, n)) * rng.uniform(0.02, 0.08, n)
    rbar = returns.mean(axis=0)
    dev = returns - rbar
    upper = np.minimum(1.0, rng.uniform(2.0, 4.0, n) / n + 0.02)
    costs = [  # rates fall from s0 to 10-30% of s0
        _concave(rng, upper[j], K, s0, s0 * rng.uniform(0.1, 0.3), rng.uniform(1.1, 1.4))
        for j, s0 in enumerate(rng.uniform(0.01, 0.03, n))
    ]
    spend = [d + f for d, f in costs]  # x + cost(x), increasing

    # the max-return witness: greedy in decreasing rbar
    greedy, remaining = np.zeros(n), 1.0
    for j in np.argsort(-rbar, kind="stable"):
        if spend[j][-1] <= remaining:
            greedy[j], remaining = upper[j], remaining - spend[j][-1]
        else:
            greedy[j] = np.interp(remaining, spend[j], costs[j][0])
            break
    # the diversified portfolio x = t * u with budget 1 (bisection on t)
    lo, hi = 0.0, 1.0
    for _ in range(60):
        t = 0.5 * (lo + hi)
        used = sum(float(np.interp(t * upper[j], costs[j][0], spend[j])) for j in range(n))
        lo, hi = (t, hi) if used < 1.0 else (lo, t)
    r_max, r_div = float(rbar @ greedy), float(rbar @ (lo * upper))
    rho = min(r_max, r_div + rng.uniform(0.3, 0.7) * (r_max - r_div))

    m = PWLModel(f"portfolio_n{n}_t{T}_k{K}_s{seed}")
    x = [m.add_variable(0.0, upper[j], name=f"x{j}") for j in range(n)]
    # |dev_t . x| over the box: a finite bound d_t never reaches at an optimum (d_t is the
    # larger of +-dev_t . x there), which keeps safe Lagrangian bounds finite
    d_cap = np.maximum(np.maximum(dev, 0.0) @ upper, np.maximum(-dev, 0.0) @ upper)
    d = [m.add_variable(0.0, float(d_cap[t]), name=f"d{t}") for t in range(T)]
    cost = [m.add_pwl(x[j], *costs[j], name=f"cost{j}") for j in range(n)]
    for t in range(T):
        row = dict(zip(x, dev[t].tolist(), strict=True))
        m.add_constraint({d[t]: 1.0, **{v: -c for v, c in row.items()}}, 0.0, name=f"devp{t}")
        m.add_constraint({d[t]: 1.0, **row}, 0.0, name=f"devm{t}")
    m.add_constraint(dict(zip(x, rbar.tolist(), strict=True)), rho, name="return")
    m.add_constraint({**{v: 1.0 for v in x}, **{z: 1.0 for z in cost}}, 1.0, 1.0, name="budget")
    m.minimize({v: 1.0 / T for v in d})
    return m


def workforce(periods: int, shifts: int, segments: int, seed: int = 0) -> PWLModel:
    """Cyclic shift covering with PWL overtime and hiring costs.

    Shift ``s`` covers ``L_s`` consecutive periods (3..8, wrapping round). Staff
    ``staff_s in [0, base_s + H_s]``, hires ``h_s in [0, H_s]`` with
    ``staff_s - h_s <= base_s``, overtime ``o_t in [0, O_t]``; coverage
    ``sum_s a_ts staff_s + o_t >= demand_t``. Minimise wages ``sum_s w_s staff_s`` plus
    overtime costs (per period, either convex with rising premiums or a steep first piece
    standing for a call-out charge followed by convex pieces: nonconvex) plus concave
    hiring costs (economies of scale). PWL terms: ``periods + shifts``.

    Feasible: the first ``ceil(periods / 8)`` shifts tile the horizon, and staffing every
    shift at the largest demand in its window (hiring the shortfall, ``H_s`` exceeds it)
    covers every period. Bounded: all costs are nonnegative on a box.
    """
    _check_sizes(periods=periods, shifts=shifts, segments=segments)
    P, S, K = periods, shifts, segments
    longest, shortest = min(8, P), min(3, P)
    if math.ceil(P / longest) > S:
        raise ValueError(f"{S} shifts cannot cover {P} periods (need >= {math.ceil(P / 8)})")
    rng = np.random.default_rng(seed)
    tiling = math.ceil(P / longest)
    start = np.concatenate([np.arange(tiling) * longest, rng.integers(0, P, S - tiling)])
    length = np.concatenate(
        [np.full(tiling, longest), rng.integers(shortest, longest + 1, S - tiling)]
    )
    cover = (np.arange(P)[:, None] - start[None, :]) % P < length[None, :]  # (P, S)
    cycle = min(P, 24)
    demand = np.maximum(
        1.0,
        np.round(20 + 10 * np.sin(2 * np.pi * np.arange(P) / cycle) + rng.normal(0, 3, P)),
    )
    need = np.array([demand[cover[:, s]].max() for s in range(S)])
    base = rng.integers(0, 6, S).astype(float)
    hire_cap = np.maximum(need - base, 0.0) + np.ceil(rng.uniform(0.2, 0.5, S) * need) + 1.0
    ot_cap = np.ceil(0.3 * demand) + 1.0
    wage = length * rng.uniform(0.9, 1.1, S)  # unit hourly rate

    m = PWLModel(f"workforce_p{P}x{S}_k{K}_s{seed}")
    staff = [m.add_variable(0.0, base[s] + hire_cap[s], name=f"staff{s}") for s in range(S)]
    hire = [m.add_variable(0.0, hire_cap[s], name=f"hire{s}") for s in range(S)]
    over = [m.add_variable(0.0, ot_cap[t], name=f"over{t}") for t in range(P)]
    ot_cost = []
    for t in range(P):
        if rng.random() < 0.5:  # convex: rising overtime premiums
            d = _breakpoints(_widths(rng, ot_cap[t], K), ot_cap[t])
            f = _from_slopes(d, _geometric(1.2, rng.uniform(3.0, 5.0), K))
        else:  # call-out charge on a short first piece, then convex
            eps = ot_cap[t] * rng.uniform(0.01, 0.05)
            widths = np.concatenate([[eps], _widths(rng, ot_cap[t] - eps, K - 1)])
            d = _breakpoints(widths, ot_cap[t])
            rates = _geometric(1.5, rng.uniform(2.5, 4.0), K - 1)
            f = _from_slopes(d, np.concatenate([[rng.uniform(2.0, 4.0) / eps], rates]))
        ot_cost.append(m.add_pwl(over[t], d, f, name=f"otcost{t}"))
    hire_cost = [
        m.add_pwl(
            hire[s],
            *_concave(rng, hire_cap[s], K, rng.uniform(8.0, 15.0), rng.uniform(0.5, 1.0), 1.3),
            name=f"hirecost{s}",
        )
        for s in range(S)
    ]
    for t in range(P):
        row = {staff[s]: 1.0 for s in np.flatnonzero(cover[t])}
        m.add_constraint({**row, over[t]: 1.0}, demand[t], name=f"cover{t}")
    for s in range(S):
        m.add_constraint({staff[s]: 1.0, hire[s]: -1.0}, upper=base[s], name=f"hiring{s}")
    m.minimize(
        {
            **dict(zip(staff, wage.tolist(), strict=True)),
            **{z: 1.0 for z in ot_cost},
            **{z: 1.0 for z in hire_cost},
        }
    )
    return m


def resource_allocation(activities: int, segments: int, seed: int = 0) -> PWLModel:
    """Maximise ``sum_j f_j(x_j)`` with S-shaped returns (a maximisation).

    ``f_j`` samples a logistic curve at unequal breakpoints on ``[0, U_j]``: increasing,
    convex then concave. ``x_j in [0, U_j]``, budget ``sum_j x_j <= B``; activities fall
    into groups with caps, and two groups also have floors (two-sided rows). One PWL term
    per activity.

    Feasible: floors are at most 15% of their group's capacity, caps at least 40%, and
    ``B`` at least 25% of the total, so spreading each floor over its group (others 0)
    satisfies every row. Bounded: ``x`` is boxed.
    """
    _check_sizes(activities=activities, segments=segments)
    n, K = activities, segments
    rng = np.random.default_rng(seed)
    upper = rng.uniform(5.0, 20.0, n)
    groups = max(2, min(10, n // 10))
    group = rng.permutation(np.arange(n) % groups)
    budget = rng.uniform(0.25, 0.45) * upper.sum()

    m = PWLModel(f"resource_n{n}_k{K}_s{seed}")
    x = [m.add_variable(0.0, upper[j], name=f"x{j}") for j in range(n)]
    gain = []
    for j in range(n):
        d = _breakpoints(_widths(rng, upper[j], K), upper[j])
        mid, steep = rng.uniform(0.25, 0.6) * upper[j], rng.uniform(6.0, 12.0) / upper[j]
        f = 1.0 / (1.0 + np.exp(-steep * (d - mid)))
        f = rng.uniform(10.0, 50.0) * (f - f[0]) / (f[-1] - f[0])
        gain.append(m.add_pwl(x[j], d, f, name=f"gain{j}"))
    m.add_constraint({v: 1.0 for v in x}, upper=budget, name="budget")
    for g in range(groups):
        members = np.flatnonzero(group == g)
        total = upper[members].sum()
        floor = rng.uniform(0.05, 0.15) * total if g < 2 else -math.inf
        cap = rng.uniform(0.4, 0.7) * total
        m.add_constraint({x[j]: 1.0 for j in members}, floor, cap, name=f"group{g}")
    m.maximize({z: 1.0 for z in gain})
    return m


def transportation(sources: int, sinks: int, segments: int, seed: int = 0) -> PWLModel:
    """Transportation with separable concave PWL arc costs (Vielma, Ahmed & Nemhauser).

    Supplies ``s_i`` and demands ``d_j >= 1`` (integers, ``sum d`` 70-95% of ``sum s``);
    ``x_ij in [0, min(s_i, d_j)]``; ``sum_j x_ij <= s_i``, ``sum_i x_ij = d_j``;
    minimise ``sum_ij f_ij(x_ij)``, ``f_ij`` concave increasing with rates falling from
    about twice to about half the arc's distance cost. PWL terms: ``sources * sinks``.

    Feasible: ``sum s >= sum d`` on a complete bipartite graph (the north-west corner
    rule gives a flow; no flow can exceed ``min(s_i, d_j)`` on an arc). Bounded: boxed.
    """
    _check_sizes(sources=sources, sinks=sinks, segments=segments)
    m_, n, K = sources, sinks, segments
    rng = np.random.default_rng(seed)
    supply = rng.integers(20, 101, m_).astype(float)
    total = max(n, int(supply.sum() * rng.uniform(0.7, 0.95)))
    if total > supply.sum():
        raise ValueError(f"{sinks} sinks need at least {sinks} units; supply is {supply.sum()}")
    demand = rng.multinomial(total - n, rng.dirichlet(np.full(n, 5.0))) + 1.0
    distance = np.linalg.norm(rng.uniform(0, 1, (m_, 1, 2)) - rng.uniform(0, 1, (1, n, 2)), axis=-1)
    rate = 1.0 + 10.0 * distance

    model = PWLModel(f"transportation_{m_}x{n}_k{K}_s{seed}")
    x = [
        [model.add_variable(0.0, min(supply[i], demand[j]), name=f"x{i}_{j}") for j in range(n)]
        for i in range(m_)
    ]
    cost = []
    for i in range(m_):
        for j in range(n):
            first = rate[i, j] * rng.uniform(1.5, 2.5)
            last = rate[i, j] * rng.uniform(0.3, 0.6)
            d, f = _concave(rng, min(supply[i], demand[j]), K, first, last, 1.2)
            cost.append(model.add_pwl(x[i][j], d, f, name=f"cost{i}_{j}"))
    for i in range(m_):
        model.add_constraint({v: 1.0 for v in x[i]}, upper=supply[i], name=f"supply{i}")
    for j in range(n):
        model.add_constraint(
            {x[i][j]: 1.0 for i in range(m_)}, demand[j], demand[j], name=f"demand{j}"
        )
    model.minimize({z: 1.0 for z in cost})
    return model


FAMILIES: dict[str, Callable[..., PWLModel]] = {
    "portfolio": portfolio,
    "workforce": workforce,
    "resource_allocation": resource_allocation,
    "transportation": transportation,
}

# -- the suite ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class InstanceSpec:
    """One suite instance: ``FAMILIES[family](**kwargs)`` (``kwargs`` include ``segments``
    and ``seed``)."""

    name: str
    family: str
    kwargs: Mapping[str, int]

    def __hash__(self) -> int:
        return hash((self.name, self.family, tuple(sorted(self.kwargs.items()))))

    @property
    def segments(self) -> int:
        return int(self.kwargs["segments"])

    @property
    def pwl_terms(self) -> int:
        """The number of PWL terms the instance has (computed without building it)."""
        k = self.kwargs
        if self.family == "portfolio":
            return int(k["assets"])
        if self.family == "workforce":
            return int(k["periods"] + k["shifts"])
        if self.family == "resource_allocation":
            return int(k["activities"])
        if self.family == "transportation":
            return int(k["sources"] * k["sinks"])
        raise ValueError(f"unknown family {self.family!r}")


def _spec(family: str, seed: int = 0, **kwargs: int) -> InstanceSpec:
    k = kwargs["segments"]
    size = {
        "portfolio": lambda: f"portfolio_n{kwargs['assets']}_t{kwargs['scenarios']}",
        "workforce": lambda: f"workforce_p{kwargs['periods']}x{kwargs['shifts']}",
        "resource_allocation": lambda: f"resource_n{kwargs['activities']}",
        "transportation": lambda: f"transportation_{kwargs['sources']}x{kwargs['sinks']}",
    }[family]()
    return InstanceSpec(f"{size}_k{k}_s{seed}", family, {**kwargs, "seed": seed})


SUITE: tuple[InstanceSpec, ...] = (
    # portfolio: PWL terms = assets
    _spec("portfolio", assets=10, scenarios=24, segments=4),
    _spec("portfolio", assets=20, scenarios=36, segments=8),
    _spec("portfolio", assets=30, scenarios=48, segments=4),
    _spec("portfolio", assets=50, scenarios=60, segments=16),
    _spec("portfolio", assets=80, scenarios=60, segments=6),
    _spec("portfolio", assets=100, scenarios=104, segments=4),
    _spec("portfolio", assets=150, scenarios=120, segments=8),
    _spec("portfolio", assets=200, scenarios=156, segments=16),
    _spec("portfolio", assets=300, scenarios=200, segments=4),
    _spec("portfolio", assets=500, scenarios=260, segments=8),
    _spec("portfolio", assets=1000, scenarios=260, segments=6),
    # workforce: PWL terms = periods + shifts
    _spec("workforce", periods=8, shifts=4, segments=4),
    _spec("workforce", periods=12, shifts=8, segments=8),
    _spec("workforce", periods=24, shifts=12, segments=4),
    _spec("workforce", periods=24, shifts=24, segments=16),
    _spec("workforce", periods=48, shifts=24, segments=8),
    _spec("workforce", periods=48, shifts=48, segments=32),
    _spec("workforce", periods=96, shifts=48, segments=8),
    _spec("workforce", periods=168, shifts=84, segments=4),
    _spec("workforce", periods=168, shifts=168, segments=16),
    _spec("workforce", periods=336, shifts=200, segments=8),
    _spec("workforce", periods=672, shifts=336, segments=12),
    # resource allocation (maximisation): PWL terms = activities
    _spec("resource_allocation", activities=10, segments=8),
    _spec("resource_allocation", activities=20, segments=4),
    _spec("resource_allocation", activities=40, segments=16),
    _spec("resource_allocation", activities=60, segments=32),
    _spec("resource_allocation", activities=90, segments=8),
    _spec("resource_allocation", activities=150, segments=12),
    _spec("resource_allocation", activities=250, segments=4),
    _spec("resource_allocation", activities=400, segments=24),
    _spec("resource_allocation", activities=700, segments=8),
    _spec("resource_allocation", activities=1200, segments=16),
    _spec("resource_allocation", activities=2000, segments=32),
    # transportation: PWL terms = sources * sinks
    _spec("transportation", sources=2, sinks=5, segments=4),
    _spec("transportation", sources=4, sinks=5, segments=8),
    _spec("transportation", sources=5, sinks=10, segments=4),
    _spec("transportation", sources=8, sinks=10, segments=16),
    _spec("transportation", sources=10, sinks=10, segments=4),
    _spec("transportation", sources=10, sinks=20, segments=8),
    _spec("transportation", sources=15, sinks=20, segments=32),
    _spec("transportation", sources=20, sinks=25, segments=4),
    _spec("transportation", sources=25, sinks=40, segments=8),
    _spec("transportation", sources=40, sinks=50, segments=16),
)

SMALL_MAX, MID_MAX = 100, 600  # small: terms < 100 <= mid < 600 <= large


def spec_by_name(name: str) -> InstanceSpec:
    """The suite entry called ``name``."""
    for spec in SUITE:
        if spec.name == name:
            return spec
    raise KeyError(f"no suite instance named {name!r}")


def build(spec: InstanceSpec) -> PWLModel:
    """The model of ``spec``, named ``spec.name``."""
    if spec.family not in FAMILIES:
        raise ValueError(f"unknown family {spec.family!r}; choose from {sorted(FAMILIES)}")
    model = FAMILIES[spec.family](**spec.kwargs)
    model.name = spec.name
    return model


def size_class(spec: InstanceSpec) -> str:
    """``"small"`` (< 100 PWL terms), ``"mid"`` (< 600) or ``"large"``."""
    terms = spec.pwl_terms
    return "small" if terms < SMALL_MAX else "mid" if terms < MID_MAX else "large"


def save(spec: InstanceSpec, directory: str | Path) -> Path:
    """Writes ``<directory>/<spec.name>.json``: the model's ``to_dict()`` plus ``"spec"``
    (``name``, ``family``, ``kwargs``); returns the path."""
    data: dict[str, Any] = build(spec).to_dict()
    # NumPy integers (which the generators accept) as Python ones: json cannot write them
    kwargs = {k: int(v) if isinstance(v, np.integer) else v for k, v in spec.kwargs.items()}
    data["spec"] = {"name": spec.name, "family": spec.family, "kwargs": kwargs}
    path = Path(directory) / f"{spec.name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


def export(directory: str | Path, specs=None, formulation: str = "cc") -> list[Path]:
    """Writes every instance of ``specs`` (default :data:`SUITE`) as ``<name>.json`` and as
    ``<name>.mps`` (the binary ``formulation`` of :func:`jaxopt_suite.pwl.highs.write_pwl_mps`,
    readable by any MIP solver); returns the paths written."""
    from jaxopt_suite.pwl.highs import write_pwl_mps

    paths = []
    for spec in SUITE if specs is None else specs:
        paths.append(save(spec, directory))
        mps = Path(directory) / f"{spec.name}.mps"
        write_pwl_mps(build(spec), mps, formulation)
        paths.append(mps)
    return paths


def load(path: str | Path) -> PWLModel:
    """The model stored by :func:`save` (or any ``to_dict()`` JSON file)."""
    return PWLModel.from_dict(json.loads(Path(path).read_text()))


def load_spec(path: str | Path) -> InstanceSpec:
    """The :class:`InstanceSpec` stored by :func:`save`."""
    spec = json.loads(Path(path).read_text())["spec"]
    return InstanceSpec(spec["name"], spec["family"], dict(spec["kwargs"]))
