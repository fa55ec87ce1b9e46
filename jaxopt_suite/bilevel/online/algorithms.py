"""Online bilevel learners: AOBO, FSOBO, WOBO, and the baselines OAGD and SOBOW.

Every learner is an :class:`OnlineSolver` with ``init(problem, x0, y0) -> OnlineState``
and a jittable ``step(state) -> state`` that plays one round: it reads ``d_t`` for
``t = state.round`` (the learner has already played ``x_t``), updates ``y``, ``v`` and
``x``, and counts its oracle calls. :func:`~jaxopt_suite.bilevel.online.run_online` drives
it and charges the regret.

Variables follow the offline solvers: ``v`` estimates ``-[nabla^2_yy g_t]^{-1} nabla_y f_t``
and the hypergradient estimate is ``nabla_x f_t + nabla^2_xy g_t v``.

Oracle counts (per round, summed in the state): ``inner`` = evaluations of
``nabla_y g``; ``hvp`` = second-order products (``nabla^2_yy g v``, ``nabla^2_xy g v``);
``outer`` = evaluations of ``nabla f``.

Reconstruction (seed abstract 17, arXiv 2602.06457; only the abstract is public): the
update rules of ``aobo``, ``fsobo`` and ``wobo`` are not taken from the paper. They are the
rules in :func:`_aobo_round`, :func:`_fsobo_round` and :func:`_wobo_round`, chosen to be
consistent with the stated bounds (see the design notes, section 3): AOBO keeps the
hypergradient error summable by iterating the warm-started inner and linear-system solves
until their residuals are below ``tol / (t + 1)``; WOBO evaluates all ``W`` functions of
its window at the current ``x`` (Hazan, Singh and Zhang, 2017), keeping one ``(y, v)`` per
window slot.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
from collections.abc import Callable
from typing import Any, Literal

import jax
import jax.numpy as jnp

from jaxopt_suite.bilevel.online.problem import OnlineBilevelProblem, check_online_problem
from jaxopt_suite.bilevel.online.problem import _check_count as _count
from jaxopt_suite.bilevel.problem import cross_term, finite_sum, hvp, joint_vjp

OK = 0
_BITS = {"x": 1, "y": 2, "v": 4, "memory": 8}


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=[
        "x",
        "y",
        "v",
        "memory",
        "round",
        "inner",
        "hvp",
        "outer",
        "round_inner",
        "status",
        "failed_round",
    ],
    meta_fields=["problem"],
)
@dataclasses.dataclass
class OnlineState:
    """Learner state; ``problem`` is static metadata, everything else an array."""

    x: Any  # the point to play next, x_t
    y: Any  # lower-level variable (WOBO: the newest window slot's)
    v: Any  # linear-system variable (WOBO: the newest window slot's)
    memory: Any  # learner-specific: window slots or stored hypergradients (None if unused)
    round: jax.Array  # int32 [], rounds played
    inner: jax.Array  # int32 [], nabla_y g evaluations so far
    hvp: jax.Array  # int32 [], second-order products so far
    outer: jax.Array  # int32 [], nabla f evaluations so far
    round_inner: jax.Array  # int32 [], nabla_y g evaluations in the last round
    status: jax.Array  # int32 [], 0 = OK, else a bit per non-finite variable
    failed_round: jax.Array  # int32 [], first round that went non-finite, -1 if none

    problem: OnlineBilevelProblem

    @property
    def total(self) -> jax.Array:
        return self.inner + self.hvp + self.outer


def explain(status: int, failed_round: int = -1) -> str:
    status = int(status)
    if status == OK:
        return "OK"
    names = [name for name, bit in _BITS.items() if status & bit]
    return (
        f"non-finite {', '.join(names)} after round {int(failed_round)}: lower the step sizes "
        "(inner_lr / aux_lr / outer_lr) or check the losses for NaN"
    )


@dataclasses.dataclass(frozen=True)
class OnlineSolver:
    """``init(problem, x0, y0) -> OnlineState``; ``step(state) -> state`` plays one round."""

    name: str
    init: Callable[[OnlineBilevelProblem, Any, Any], OnlineState]
    step: Callable[[OnlineState], OnlineState]
    window: int = 1


# --- shared pieces ---------------------------------------------------------------------------


def _positive(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a positive float, got {value!r}")
    if not 0 < float(value) < math.inf:  # an infinite tolerance or rate: a learner that never moves
        raise ValueError(f"{name} must be finite and > 0, got {value!r}")
    return float(value)


def _norm(tree: Any) -> jax.Array:
    return jnp.sqrt(sum(jnp.vdot(a, a).real for a in jax.tree.leaves(tree)))


def _axpy(a: Any, x: Any, y: Any) -> Any:
    """``y + a x`` on pytrees."""
    return jax.tree.map(lambda xi, yi: yi + jnp.asarray(a, yi.dtype) * xi, x, y)


def _int(value: Any) -> jax.Array:
    return jnp.asarray(value, jnp.int32)


def _count_valid(mask: jax.Array, per_slot: Any = 1) -> jax.Array:
    """``sum(per_slot * mask)`` as int32: ``jnp.sum`` of int32 gives int64 under
    ``jax_enable_x64``, and an int64 count in the int32 counters of the state makes the
    branches of ``run_online``'s ``lax.cond`` differ."""
    return jnp.sum(jnp.where(mask, per_slot, 0), dtype=jnp.int32)


def _poison(tree: Any, residual: Any) -> Any:
    """``tree``, or NaNs when ``residual`` is not finite.

    A loop that runs ``while ||residual|| > tol`` stops on a NaN residual as if converged;
    this makes the NaN reach the state, where the step's status check sees it.
    """
    finite = jnp.isfinite(_norm(residual))
    return jax.tree.map(lambda a: jnp.where(finite, a, jnp.nan).astype(a.dtype), tree)


def _descend_until(residual, z, lr, tol, max_steps):
    """``z <- z - lr * residual(z)`` while ``||residual(z)|| > tol``, at most ``max_steps``
    steps. Returns ``(z, residual evaluations)``; a NaN residual poisons ``z``."""

    def cond(carry):
        _, r, k = carry
        return (_norm(r) > tol) & (k < max_steps)

    def body(carry):
        z_, r, k = carry
        z_ = _axpy(-lr, r, z_)
        return z_, residual(z_), k + 1

    z, r, k = jax.lax.while_loop(cond, body, (z, residual(z), _int(0)))
    return _poison(z, r), k + 1


def _inner_until(problem, x, y, data, lr, tol, max_steps):
    """Gradient descent on ``g(x, ., data)`` from ``y`` until ``||nabla_y g|| <= tol``
    (at most ``max_steps`` steps). Returns ``(y, gradient evaluations)``."""
    return _descend_until(
        lambda y_: jax.grad(problem.inner_loss, 1)(x, y_, data), y, lr, tol, max_steps
    )


def _aux_until(problem, x, y, v, grad_y_f, data, lr, tol, max_steps):
    """Gradient descent on ``1/2 v^T H v + <nabla_y f, v>`` from ``v`` until the residual
    ``||H v + nabla_y f|| <= tol``. Returns ``(v, Hessian-vector products)``."""

    def residual(v_):
        return _axpy(1.0, grad_y_f, hvp(lambda y_: problem.inner_loss(x, y_, data), y, v_))

    return _descend_until(residual, v, lr, tol, max_steps)


def _grad_f(problem, x, y, data):
    return jax.grad(problem.outer_loss, (0, 1))(x, y, data)


def _hypergradient(problem, x, y, v, grad_x_f, data):
    return _axpy(1.0, cross_term(problem.inner_loss, x, y, v, data), grad_x_f)


def _single_step(problem, x, y, v, data, beta, gamma):
    """One y step, then one v step and the hypergradient at the new ``y`` (the v step and
    the cross term share one VJP of ``nabla_y g``, SOBA's oracle)."""
    y = _axpy(-beta, jax.grad(problem.inner_loss, 1)(x, y, data), y)
    _, hv, cross = joint_vjp(problem.inner_loss, x, y, v, data)
    f_x, f_y = _grad_f(problem, x, y, data)
    v_new = _axpy(-gamma, _axpy(1.0, f_y, hv), v)
    return y, v_new, _axpy(1.0, cross, f_x)


def _dot(a: Any, b: Any) -> jax.Array:
    pairs = zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    return sum(jnp.vdot(p, q).real for p, q in pairs)


def _cg(matvec, b, x0, steps):
    """``steps`` conjugate-gradient iterations on ``matvec(x) = b`` from ``x0``."""
    r = _axpy(-1.0, matvec(x0), b)

    def body(_, carry):
        x, r, p, rr = carry
        ap = matvec(p)
        alpha = rr / jnp.maximum(_dot(p, ap), jnp.finfo(rr.dtype).tiny)
        x = _axpy(alpha, p, x)
        r = _axpy(-alpha, ap, r)
        rr_new = _dot(r, r)
        p = _axpy(rr_new / jnp.maximum(rr, jnp.finfo(rr.dtype).tiny), p, r)
        return x, r, p, rr_new

    x, *_ = jax.lax.fori_loop(0, steps, body, (x0, r, r, _dot(r, r)))
    return x


def _stack(tree: Any, n: int) -> Any:
    return jax.tree.map(lambda a: jnp.broadcast_to(a, (n, *a.shape)).copy(), tree)


def _slot_rounds(t: jax.Array, window: int) -> jax.Array:
    """Round held by each of the ``window`` slots at round ``t`` (slot = round mod W)."""
    slots = jnp.arange(window, dtype=jnp.int32)
    return t - jnp.mod(t - slots, window)


def _finite_bits(**trees: Any) -> jax.Array:
    bits = jnp.zeros([], jnp.int32)
    for name, tree in trees.items():
        leaves = jax.tree.leaves(tree)
        if leaves:
            finite = jnp.all(jnp.stack([finite_sum(a) for a in leaves]))
            bits = bits | jnp.where(finite, 0, _BITS[name]).astype(jnp.int32)
    return bits


def _make(name: str, round_fn, *, memory_init=None, window: int = 1) -> OnlineSolver:
    """Wraps ``round_fn(problem, state, t) -> (x, y, v, memory, inner, hvp, outer)``."""

    def init(problem: OnlineBilevelProblem, x0: Any, y0: Any) -> OnlineState:
        check_online_problem(problem, x0, y0)
        x0 = jax.tree.map(jnp.array, x0)
        y0 = jax.tree.map(jnp.array, y0)
        v0 = jax.tree.map(jnp.zeros_like, y0)
        zero = jnp.zeros([], jnp.int32)
        return OnlineState(
            x=x0,
            y=y0,
            v=v0,
            memory=None if memory_init is None else memory_init(x0, y0, v0),
            round=zero,
            inner=zero,
            hvp=zero,
            outer=zero,
            round_inner=zero,
            status=zero,
            failed_round=jnp.full([], -1, jnp.int32),
            problem=problem,
        )

    def step(state: OnlineState) -> OnlineState:
        x, y, v, memory, n_inner, n_hvp, n_outer = round_fn(state.problem, state, state.round)
        bits = _finite_bits(x=x, y=y, v=v, memory=memory)
        first = (state.status == OK) & (bits != OK)
        return dataclasses.replace(
            state,
            x=x,
            y=y,
            v=v,
            memory=memory,
            round=state.round + 1,
            inner=state.inner + _int(n_inner),
            hvp=state.hvp + _int(n_hvp),
            outer=state.outer + _int(n_outer),
            round_inner=_int(n_inner),
            status=state.status | bits,
            failed_round=jnp.where(first, state.round, state.failed_round),
        )

    return OnlineSolver(name, init, step, window)


# --- AOBO, FSOBO, WOBO (reconstructions) -------------------------------------------------------


def _aobo_round(problem, state, t, *, beta, gamma, eta, tol, power, max_inner):
    data = problem.round_data(t)
    eps = tol / (t.astype(jnp.float32) + 1.0) ** power
    x = state.x
    y, n_inner = _inner_until(problem, x, state.y, data, beta, eps, max_inner)
    f_x, f_y = _grad_f(problem, x, y, data)
    v, n_hvp = _aux_until(problem, x, y, state.v, f_y, data, gamma, eps, max_inner)
    x = _axpy(-eta, _hypergradient(problem, x, y, v, f_x, data), x)
    return x, y, v, None, n_inner, n_hvp + 1, _int(1)


def aobo(
    *,
    inner_lr: float,
    outer_lr: float,
    aux_lr: float | None = None,
    tol: float = 1.0,
    tol_power: float = 1.0,
    max_inner: int = 1000,
) -> OnlineSolver:
    """AOBO: adaptive inner iterations, one hypergradient step per round.

    Round ``t``: warm-started gradient descent on ``g_t(x_t, .)`` until
    ``||nabla_y g_t|| <= eps_t``, then on the linear system until
    ``||H v + nabla_y f_t|| <= eps_t``, with ``eps_t = tol / (t + 1)^tol_power``; then
    ``x_{t+1} = x_t - outer_lr (nabla_x f_t + nabla^2_xy g_t v)``. With linear inner
    convergence each round costs ``O(log t)`` steps (``O(T log T)`` in all) and the
    hypergradient errors are square-summable for ``tol_power > 1/2``, which is what the
    ``O(1 + V_T)`` local-regret bound needs (seed abstract 17). Reconstruction: see the
    module docstring. ``max_inner`` caps each solve (a cap that binds shows up in the
    per-round counts).
    """
    beta = _positive("inner_lr", inner_lr)
    gamma = beta if aux_lr is None else _positive("aux_lr", aux_lr)
    eta = _positive("outer_lr", outer_lr)
    tol = _positive("tol", tol)
    power = _positive("tol_power", tol_power)
    max_inner = _count("max_inner", max_inner)
    round_fn = functools.partial(
        _aobo_round, beta=beta, gamma=gamma, eta=eta, tol=tol, power=power, max_inner=max_inner
    )
    return _make("aobo", round_fn)


def _fsobo_round(problem, state, t, *, beta, gamma, eta):
    data = problem.round_data(t)
    y, v, d_x = _single_step(problem, state.x, state.y, state.v, data, beta, gamma)
    return _axpy(-eta, d_x, state.x), y, v, None, _int(1), _int(1), _int(1)


def fsobo(*, inner_lr: float, outer_lr: float, aux_lr: float | None = None) -> OnlineSolver:
    """FSOBO: fully single loop -- one ``y`` step, one ``v`` step and one ``x`` step per
    round, all on ``(f_t, g_t)`` (seed abstract 17's ``O(1 + V_T + H_{2,T} + E_{2,T})``
    variant). Reconstruction: see the module docstring."""
    beta = _positive("inner_lr", inner_lr)
    gamma = beta if aux_lr is None else _positive("aux_lr", aux_lr)
    eta = _positive("outer_lr", outer_lr)
    return _make("fsobo", functools.partial(_fsobo_round, beta=beta, gamma=gamma, eta=eta))


def _window_slots(problem, t, window):
    rounds = _slot_rounds(t, window)
    return jax.vmap(problem.round_data)(jnp.maximum(rounds, 0)), rounds >= 0


def _enter_slot(memory, t, window):
    """The new round's slot starts from the previous round's ``(y, v)`` (warm start)."""
    ys, vs = memory
    new, prev = jnp.mod(t, window), jnp.mod(t - 1, window)

    def put(a):
        return jnp.where(t > 0, a.at[new].set(a[prev]), a)

    return jax.tree.map(put, ys), jax.tree.map(put, vs)


def _wobo_round(
    problem, state, t, *, window, variant, beta, gamma, eta, delta, inner_tol, max_inner, max_iters
):
    ys, vs = _enter_slot(state.memory, t, window)
    data, valid = _window_slots(problem, t, window)
    weights = valid.astype(jnp.result_type(*jax.tree.leaves(state.x))) / window
    n_valid = _count_valid(valid)

    def average(per_slot):
        return jax.tree.map(lambda a: jnp.tensordot(weights, a, axes=1), per_slot)

    if variant == "single_loop":
        ys, vs, grads = jax.vmap(
            lambda y, v, d: _single_step(problem, state.x, y, v, d, beta, gamma)
        )(ys, vs, data)
        x = _axpy(-eta, average(grads), state.x)
        counts = (n_valid, n_valid, n_valid)
    else:

        def solve(x, ys, vs):
            def one(y, v, d):
                y, k_y = _inner_until(problem, x, y, d, beta, inner_tol, max_inner)
                f_x, f_y = _grad_f(problem, x, y, d)
                v, k_v = _aux_until(problem, x, y, v, f_y, d, gamma, inner_tol, max_inner)
                return y, v, _hypergradient(problem, x, y, v, f_x, d), k_y, k_v

            ys, vs, grads, k_y, k_v = jax.vmap(one)(ys, vs, data)
            return ys, vs, average(grads), _count_valid(valid, k_y), _count_valid(valid, k_v + 1)

        def cond(carry):
            _, _, _, grad, it, _ = carry
            return (_norm(grad) > delta) & (it < max_iters)

        def body(carry):
            x, ys, vs, grad, it, (a, b, c) = carry
            x = _axpy(-eta, grad, x)
            ys, vs, grad, k_y, k_v = solve(x, ys, vs)
            return x, ys, vs, grad, it + 1, (a + k_y, b + k_v, c + n_valid)

        ys, vs, grad, k_y, k_v = solve(state.x, ys, vs)
        start = (state.x, ys, vs, grad, _int(0), (k_y, k_v, n_valid))
        x, ys, vs, grad, _, counts = jax.lax.while_loop(cond, body, start)
        x = _poison(x, grad)
        # The last solve certified ||grad F_{t,W}(x)|| <= delta; x_{t+1} is that point.
    newest = jnp.mod(t, window)
    y = jax.tree.map(lambda a: a[newest], ys)
    v = jax.tree.map(lambda a: a[newest], vs)
    return (x, y, v, (ys, vs), *counts)


def wobo(
    *,
    window: int,
    inner_lr: float,
    outer_lr: float,
    aux_lr: float | None = None,
    variant: Literal["iterate", "single_loop"] = "iterate",
    delta: float | None = None,
    inner_tol: float | None = None,
    max_inner: int | None = None,
    max_iters: int | None = None,
) -> OnlineSolver:
    """WOBO: descent on the window-averaged ``F_{t,W}(x) = (1/W) sum_{i<W} F_{t-i}(x)``,
    every function of the window evaluated at the current ``x`` (one warm-started
    ``(y, v)`` per window slot).

    - ``variant="iterate"``: within round ``t``, solve every slot's inner problem and
      linear system to ``inner_tol`` (default ``delta / 4``; at most ``max_inner`` steps
      each, default 1000), and step ``x`` until the window hypergradient has norm
      ``<= delta`` (default ``1 / window``, the ``delta ~ 1/W`` that gives window regret
      ``O(T / W^2)``), at most ``max_iters`` steps (default 1000);
    - ``variant="single_loop"``: one ``y``, ``v`` step per slot and one ``x`` step per
      round, ``W`` gradients per round: window regret ``O(T / W)`` with ``O(W T)``
      gradients. It has no tolerances or loops: ``delta``, ``inner_tol``, ``max_inner``
      and ``max_iters`` are refused (``ValueError``).

    Seed abstract 17; the rules are a reconstruction (module docstring).
    """
    window = _count("window", window)
    if variant not in ("iterate", "single_loop"):
        raise ValueError(f"variant must be 'iterate' or 'single_loop', got {variant!r}")
    if variant == "single_loop":
        loop_settings = {
            "delta": delta,
            "inner_tol": inner_tol,
            "max_inner": max_inner,
            "max_iters": max_iters,
        }
        given = {name: value for name, value in loop_settings.items() if value is not None}
        if given:  # they used to be accepted and had no effect
            verb, them = ("applies", "it") if len(given) == 1 else ("apply", "them")
            got = ", ".join(f"{name}={value!r}" for name, value in given.items())
            raise ValueError(
                f"{', '.join(given)} {verb} only to variant='iterate'; variant='single_loop' "
                f"takes one x step per round and would ignore {them} (got {got})"
            )
    beta = _positive("inner_lr", inner_lr)
    gamma = beta if aux_lr is None else _positive("aux_lr", aux_lr)
    eta = _positive("outer_lr", outer_lr)
    delta = 1.0 / window if delta is None else _positive("delta", delta)
    inner_tol = delta / 4.0 if inner_tol is None else _positive("inner_tol", inner_tol)
    max_inner = 1000 if max_inner is None else _count("max_inner", max_inner)
    max_iters = 1000 if max_iters is None else _count("max_iters", max_iters)
    round_fn = functools.partial(
        _wobo_round,
        window=window,
        variant=variant,
        beta=beta,
        gamma=gamma,
        eta=eta,
        delta=delta,
        inner_tol=inner_tol,
        max_inner=max_inner,
        max_iters=max_iters,
    )
    return _make(
        f"wobo({variant}, W={window})",
        round_fn,
        memory_init=lambda x0, y0, v0: (_stack(y0, window), _stack(v0, window)),
        window=window,
    )
