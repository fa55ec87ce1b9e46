"""Online bilevel baselines that average stale hypergradients over a window.

- OAGD (Tarzanagh, Nazari, Hou, Shen and Balzano, AISTATS 2024; code ``BojianHou/OAGD``):
  the lower level takes one gradient pass over the window's inner functions per round; the
  round's hypergradient uses a Neumann-series inverse-Hessian product (``alpha``, ``terms``)
  and is stored; ``x`` steps along the ``decay^i``-weighted average of the stored ones.
- SOBOW (Lin, Huang and Liu, NeurIPS 2023): one (or ``inner_steps``) lower-level gradient
  steps, warm-started conjugate gradients for ``v``, and ``x`` steps along
  ``(1/W) sum_{i<w} decay^i h_{t-i}`` with ``W = sum_{i<w} decay^i``.

Both hypergradients are stale: ``h_{t-i}`` was taken at ``x_{t-i}``, unlike WOBO's.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxopt_suite.bilevel.online.algorithms import (
    OnlineSolver,
    _axpy,
    _cg,
    _count,
    _count_valid,
    _grad_f,
    _hypergradient,
    _int,
    _make,
    _positive,
    _slot_rounds,
    _stack,
    _window_slots,
)
from jaxopt_suite.bilevel.problem import hvp


def _store(buffer, h, t, window):
    slot = jnp.mod(t, window)
    return jax.tree.map(lambda b, a: b.at[slot].set(a), buffer, h)


def _weighted(buffer, t, window, decay, normalise_valid):
    """``sum_i decay^i h_{t-i} / norm`` over the stored rounds (slot = round mod W)."""
    rounds = _slot_rounds(t, window)
    valid = rounds >= 0
    dtype = jnp.result_type(*jax.tree.leaves(buffer))
    weights = jnp.where(valid, decay ** (t - rounds).astype(dtype), 0.0).astype(dtype)
    if normalise_valid:
        norm = jnp.sum(weights)
    else:
        norm = jnp.sum(decay ** jnp.arange(window, dtype=dtype))
    return jax.tree.map(lambda b: jnp.tensordot(weights / norm, b, axes=1), buffer)


def _oagd_round(problem, state, t, *, window, beta, eta, alpha, terms, decay, passes):
    x = state.x
    data, valid = _window_slots(problem, t, window)
    order = jnp.argsort(_slot_rounds(t, window))  # oldest first
    n_valid = _count_valid(valid)

    def sweep(y, slot):
        d = jax.tree.map(lambda a: a[slot], data)
        grad = jax.grad(problem.inner_loss, 1)(x, y, d)
        return jax.tree.map(lambda a, g: jnp.where(valid[slot], a - beta * g, a), y, grad), None

    def one_pass(_, y):
        return jax.lax.scan(sweep, y, order)[0]

    y = jax.lax.fori_loop(0, passes, one_pass, state.y)
    current = problem.round_data(t)
    f_x, f_y = _grad_f(problem, x, y, current)

    def neumann(_, carry):
        p, acc = carry
        p = _axpy(-alpha, hvp(lambda y_: problem.inner_loss(x, y_, current), y, p), p)
        return p, _axpy(1.0, p, acc)

    _, acc = jax.lax.fori_loop(0, terms - 1, neumann, (f_y, f_y))
    v = jax.tree.map(lambda a: -alpha * a, acc)
    h = _hypergradient(problem, x, y, v, f_x, current)
    buffer = _store(state.memory, h, t, window)
    x = _axpy(-eta, _weighted(buffer, t, window, decay, normalise_valid=True), x)
    return x, y, v, buffer, passes * n_valid, _int(terms), _int(1)


def oagd(
    *,
    window: int,
    inner_lr: float,
    outer_lr: float,
    neumann_alpha: float | None = None,
    neumann_terms: int = 5,
    decay: float = 1.0,
    inner_passes: int = 1,
) -> OnlineSolver:
    """OAGD (see the module docstring). ``inner_passes`` gradient passes over the window's
    inner functions per round; ``neumann_terms`` terms of
    ``H^{-1} ~ alpha sum_k (I - alpha H)^k`` with ``alpha = neumann_alpha`` (default
    ``inner_lr``).

    The series converges only for ``0 < alpha < 2 / L_g``, ``L_g`` the largest eigenvalue
    of the inner Hessian ``nabla^2_yy g_t`` -- the same condition as for gradient descent
    on ``g_t`` with step ``alpha``, which is why the default is ``inner_lr``. At
    ``alpha >= 2 / L_g`` the terms do not decay (beyond it they grow), so more terms do
    not reduce the bias of the hypergradient (``quadratic_stream()`` has ``L_g`` up to
    ``inner_condition = 4``: ``alpha = 0.5`` is already on the boundary)."""
    window = _count("window", window)
    decay = _positive("decay", decay)
    beta = _positive("inner_lr", inner_lr)
    alpha = beta if neumann_alpha is None else _positive("neumann_alpha", neumann_alpha)
    round_fn = functools.partial(
        _oagd_round,
        window=window,
        beta=beta,
        eta=_positive("outer_lr", outer_lr),
        alpha=alpha,
        terms=_count("neumann_terms", neumann_terms),
        decay=decay,
        passes=_count("inner_passes", inner_passes),
    )
    return _make(
        f"oagd(W={window})",
        round_fn,
        memory_init=lambda x0, y0, v0: _stack(jax.tree.map(jnp.zeros_like, x0), window),
        window=window,
    )


def _sobow_round(problem, state, t, *, window, beta, eta, cg_steps, decay, inner_steps):
    x = state.x
    data = problem.round_data(t)

    def inner_step(_, y):
        return _axpy(-beta, jax.grad(problem.inner_loss, 1)(x, y, data), y)

    y = jax.lax.fori_loop(0, inner_steps, inner_step, state.y)
    f_x, f_y = _grad_f(problem, x, y, data)

    def matvec(p):
        return hvp(lambda y_: problem.inner_loss(x, y_, data), y, p)

    v = _cg(matvec, jax.tree.map(jnp.negative, f_y), state.v, cg_steps)
    h = _hypergradient(problem, x, y, v, f_x, data)
    buffer = _store(state.memory, h, t, window)
    x = _axpy(-eta, _weighted(buffer, t, window, decay, normalise_valid=False), x)
    return x, y, v, buffer, _int(inner_steps), _int(cg_steps + 2), _int(1)


def sobow(
    *,
    window: int,
    inner_lr: float,
    outer_lr: float,
    cg_steps: int = 10,
    decay: float = 1.0,
    inner_steps: int = 1,
) -> OnlineSolver:
    """SOBOW (see the module docstring): ``inner_steps`` lower-level steps and
    ``cg_steps`` warm-started CG iterations per round, then a step along the window of
    stored hypergradients."""
    window = _count("window", window)
    round_fn = functools.partial(
        _sobow_round,
        window=window,
        beta=_positive("inner_lr", inner_lr),
        eta=_positive("outer_lr", outer_lr),
        cg_steps=_count("cg_steps", cg_steps),
        decay=_positive("decay", decay),
        inner_steps=_count("inner_steps", inner_steps),
    )
    return _make(
        f"sobow(W={window})",
        round_fn,
        memory_init=lambda x0, y0, v0: _stack(jax.tree.map(jnp.zeros_like, x0), window),
        window=window,
    )
