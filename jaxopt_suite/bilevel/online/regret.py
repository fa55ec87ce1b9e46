"""Driving a learner over a stream and charging local regret.

Bilevel local regret with window ``w`` (Hazan, Singh and Zhang 2017; Tarzanagh et al.
2024): ``BLR_w(T) = sum_{t<T} ||nabla F_{t,w}(x_t)||^2`` with
``F_{t,w} = (1/w) sum_{i<w} F_{t-i}`` (``F_s = 0`` for ``s < 0``); ``w = 1`` is the
standard local regret. ``x_t`` is the point played before ``(f_t, g_t)`` is revealed.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxopt_suite.bilevel.online.algorithms import OK, OnlineSolver, OnlineState, explain
from jaxopt_suite.bilevel.online.problem import (
    ExactOracle,
    OnlineBilevelProblem,
    _check_count,
    window_hypergradient,
)
from jaxopt_suite.bilevel.solvers import _cached


class OnlineResult(NamedTuple):
    """``history`` has one entry per round ``t``: ``regret_term`` (``||nabla F_{t,w}(x_t)||^2``,
    NaN on rounds not charged), ``value`` (``F_t(x_t)`` for exact oracles, else NaN),
    cumulative oracle counts ``inner``/``hvp``/``outer``/``total`` after the round,
    ``round_inner`` and ``status``. ``regret_term`` and ``value`` are in the played
    point's precision, but at least float32 (float32 for bfloat16 / float16 ``x``), and
    ``regret`` is the sum of the charged terms (rounds ``0, k, 2k, ...`` for
    ``k = regret_every``) taken in float64 on the host and scaled by ``num_rounds`` over
    their number, so it estimates the full sum when rounds are sampled (exactly ``k`` when
    ``k`` divides ``num_rounds``)."""

    state: OnlineState
    history: dict
    regret: float
    estimated: bool
    status: int
    message: str


def run_online(
    problem: OnlineBilevelProblem,
    solver: OnlineSolver,
    x0: Any,
    y0: Any,
    num_rounds: int,
    *,
    oracle: Callable[[Any, Any, Any], Any] | None = None,
    window: int = 1,
    regret_every: int = 1,
    eval_every: int | None = None,
    eval_fn: Callable[[Any, Any], dict] | None = None,
    on_failure: Literal["raise", "return"] = "raise",
) -> OnlineResult:
    """Plays ``num_rounds`` rounds of ``solver`` as one jitted ``lax.scan``.

    Args:
      oracle: ``(x, d, y_hint) -> nabla F(x)`` charging the regret: an
        :class:`ExactOracle` (exact regret) or :func:`implicit_oracle` (estimated regret);
        ``None`` charges nothing.
      window: ``w`` of the local regret charged (independent of the learner's own window).
      regret_every: charge every k-th round only (for expensive oracles).
      eval_every, eval_fn: ``eval_fn(x, y) -> dict of scalars`` every ``eval_every`` rounds,
        returned in ``history["eval"]`` (with the rounds in ``history["eval_round"]``).
      on_failure: after a round goes non-finite the learner stops; ``"raise"`` raises
        ``FloatingPointError`` with the message, ``"return"`` returns with the status.
    """
    if not isinstance(problem, OnlineBilevelProblem):
        raise TypeError(f"problem must be an OnlineBilevelProblem, got {type(problem).__name__}")
    if not isinstance(solver, OnlineSolver):
        raise TypeError(
            f"solver must be an OnlineSolver (aobo(...), wobo(...), ...), got {solver!r}"
        )
    num_rounds = _check_count("num_rounds", num_rounds)
    window = _check_count("window", window)
    regret_every = _check_count("regret_every", regret_every)
    if problem.num_rounds is not None and num_rounds > problem.num_rounds:
        raise ValueError(
            f"num_rounds={num_rounds} exceeds the stream's length ({problem.num_rounds} rounds)"
        )
    if on_failure not in ("raise", "return"):
        raise ValueError(f"on_failure must be 'raise' or 'return', got {on_failure!r}")
    if eval_every is not None:  # checked even without eval_fn, which alone reads it
        eval_every = _check_count("eval_every", eval_every)
    if eval_fn is not None and eval_every is None:
        eval_every = max(1, num_rounds // 20)
    state = solver.init(problem, x0, y0)
    go = _cached(
        _compiled_rounds, problem, solver, oracle, window, regret_every, eval_fn,
        None if eval_fn is None else eval_every, num_rounds,
    )  # fmt: skip
    state, history = go(state)
    history = jax.tree.map(np.asarray, history)
    if eval_fn is not None:
        keep = np.arange(num_rounds)[(np.arange(num_rounds) + 1) % eval_every == 0]
        history["eval"] = {k: v[keep] for k, v in history["eval"].items()}
        history["eval_round"] = keep + 1
    # Only the charged rounds enter the sum; a charged term that is NaN makes it NaN. The
    # sum is float64: summed in the terms' float32 it loses the small terms of long runs.
    charged = history["regret_term"][::regret_every]
    scale = num_rounds / len(charged)  # = regret_every when it divides num_rounds
    if oracle is not None:
        regret = float(np.sum(charged, dtype=np.float64) * scale)
    else:
        regret = float("nan")
    status = int(state.status)
    message = explain(status, int(state.failed_round))
    if status != OK and on_failure == "raise":
        raise FloatingPointError(f"{solver.name}: {message}")
    return OnlineResult(
        state,
        history,
        regret,
        regret_every > 1 or not isinstance(oracle, ExactOracle),
        status,
        message,
    )


@functools.lru_cache(maxsize=8)
def _compiled_rounds(
    problem, solver, oracle, window: int, regret_every: int, eval_fn, eval_every, num_rounds: int
):
    """``run_online``'s jitted scan over the rounds, cached by its static parts (problems,
    solvers and oracles hash by identity), so that repeated runs compile once. The cache
    keeps its last 8 streams alive."""

    def charge(state, t):
        # At least float32: a bfloat16 / float16 square overflows past |g| = 256 (float16)
        # or rounds to 8 bits, with the learner's status still OK.
        dtype = jnp.promote_types(jnp.result_type(*jax.tree.leaves(state.x)), jnp.float32)
        nan = jnp.full([], jnp.nan, dtype)
        if oracle is None:
            return nan, nan

        def term(_):
            grad = window_hypergradient(oracle, problem, state.x, state.y, t, window)
            leaves = [g.astype(jnp.promote_types(g.dtype, dtype)) for g in jax.tree.leaves(grad)]
            sq = sum(jnp.vdot(g, g).real for g in leaves)
            return sq.astype(dtype)

        sq = jax.lax.cond(t % regret_every == 0, term, lambda _: nan, None)
        if isinstance(oracle, ExactOracle):
            value = oracle.value(state.x, problem.round_data(t)).astype(dtype)
        else:
            value = nan
        return sq, value

    def round_(state, t):
        sq, value = charge(state, t)
        state = jax.lax.cond(state.status == OK, solver.step, lambda s: s, state)
        out = {
            "regret_term": sq,
            "value": value,
            "inner": state.inner,
            "hvp": state.hvp,
            "outer": state.outer,
            "total": state.total,
            "round_inner": state.round_inner,
            "status": state.status,
        }
        if eval_fn is not None:
            out["eval"] = jax.lax.cond(
                (t + 1) % eval_every == 0,
                lambda s: eval_fn(s.x, s.y),
                lambda s: jax.tree.map(
                    lambda a: jnp.full(a.shape, jnp.nan, a.dtype),
                    jax.eval_shape(eval_fn, s.x, s.y),
                ),
                state,
            )
        return state, out

    @jax.jit
    def go(state):
        return jax.lax.scan(round_, state, jnp.arange(num_rounds, dtype=jnp.int32))

    return go


def fit_power_law(xs: Any, ys: Any) -> tuple[float, float]:
    """Least-squares fit of ``log y = log c + a log x``; returns ``(a, c)``."""
    xs, ys = np.asarray(xs, float), np.asarray(ys, float)
    if xs.shape != ys.shape or xs.ndim != 1 or xs.size < 2:
        raise ValueError(f"need two 1-D arrays of equal length >= 2, got {xs.shape}, {ys.shape}")
    if not (np.all(np.isfinite(xs)) and np.all(np.isfinite(ys))):
        raise ValueError(f"xs and ys must be finite, got {xs} and {ys}")
    if np.any(xs <= 0) or np.any(ys <= 0):
        raise ValueError("a power law needs positive xs and ys")
    if np.ptp(xs) == 0:
        raise ValueError("xs must not all be equal")
    slope, intercept = np.polyfit(np.log(xs), np.log(ys), 1)
    return float(slope), float(np.exp(intercept))
