"""Trust-region pieces shared by CPO, SCPO and ASCPO: conjugate gradient, Fisher-vector
products, the CPO step (all five cases) and the backtracking line search.

CPO (Achiam et al., "Constrained policy optimization", ICML 2017, appendix 10.2) solves,
around the current policy ``theta``, with ``d = theta' - theta``,

.. math::
  \\min_d \\; g^\\top d \\quad \\text{s.t.} \\quad c + b^\\top d \\le 0, \\qquad
  \\tfrac12 d^\\top H d \\le \\delta,

``g`` the gradient of the loss to minimise, ``b`` that of the cost surrogate, ``c`` the
constraint's current value (``J_C - limit``), ``H`` the Fisher matrix (the Hessian of the
mean KL divergence) and ``delta`` the KL radius. With ``v = H^-1 g``, ``u = H^-1 b``,
``q = g.v``, ``r = g.u``, ``s = b.u``, ``A = q - r^2/s``, ``B = 2 delta - c^2/s``, the dual
gives ``d = -(v + nu u) / lambda``, in five cases:

====  ==================================  =======================================
case  condition                           step
====  ==================================  =======================================
4     ``b.b <= 1e-8`` and ``c < 0``       TRPO: ``lambda = sqrt(q / 2 delta)``, ``nu = 0``
3     ``c < 0``, ``B < 0``                the whole trust region is feasible: TRPO
2     ``c < 0``, ``B >= 0``               the dual's projection (below)
1     ``c >= 0``, ``B >= 0``              infeasible now, recoverable: the projection
0     ``c >= 0``, ``B < 0``               recovery: ``d = -sqrt(2 delta / s) u``
====  ==================================  =======================================

The projection, as in the authors' code (and the ASCPO code that reuses it): with
``L_A = [0, r/c]``, ``L_B = [r/c, inf)`` (swapped when ``c >= 0``), ``lambda_A =
proj(sqrt(A/B), L_A)``, ``lambda_B = proj(sqrt(q / 2 delta), L_B)``, take the one with the
larger dual value ``f_A(lambda) = -(A/lambda + B lambda)/2 - r c / s`` or ``f_B(lambda) =
-(q/lambda + 2 delta lambda)/2``, then ``nu = max(0, lambda c - r) / s``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from jaxopt_suite._checks import check_integer, check_scalar

_EPS = 1e-8


class CGResult(NamedTuple):
    """``x`` with ``A x ~ b``; ``iterations`` run; the final residual norm ``|b - A x|``."""

    x: jax.Array
    iterations: jax.Array
    residual_norm: jax.Array


def conjugate_gradient(
    matvec: Callable[[jax.Array], jax.Array],
    b: jax.Array,
    *,
    max_iterations: int = 10,
    tolerance: float = 1e-10,
) -> CGResult:
    """Solves ``A x = b`` for symmetric positive definite ``A`` given as ``matvec``, from
    ``x = 0``, until ``|r|^2 <= tolerance`` or ``max_iterations`` (a ``lax.while_loop``)."""
    # a NaN tolerance or max_iterations <= 0 returned x = 0 after no iteration
    check_integer("max_iterations", max_iterations, 1)
    check_scalar("tolerance", tolerance, "be >= 0", lambda v: v >= 0)

    def cond(state):
        _, _, _, rr, k = state
        return (k < max_iterations) & (rr > tolerance)

    def body(state):
        x, r, p, rr, k = state
        Ap = matvec(p)
        step = rr / jnp.maximum(jnp.vdot(p, Ap), jnp.finfo(b.dtype).tiny)
        x = x + step * p
        r = r - step * Ap
        rr_next = jnp.vdot(r, r)
        p = r + (rr_next / rr) * p
        return x, r, p, rr_next, k + 1

    rr = jnp.vdot(b, b)
    x, _, _, rr, k = jax.lax.while_loop(
        cond, body, (jnp.zeros_like(b), b, b, rr, jnp.zeros((), jnp.int32))
    )
    return CGResult(x, k, jnp.sqrt(rr))


def fisher_vector_product(
    kl_fn: Callable[[Any], jax.Array], params: Any, *, damping: float | jax.Array = 0.0
) -> Callable[[jax.Array], jax.Array]:
    """``v -> (H + damping I) v`` on the flat parameters, ``H`` the Hessian of
    ``kl_fn(params)`` (the mean KL divergence from the current policy, whose Hessian at the
    current policy is the Fisher matrix), by forward-over-reverse differentiation."""
    flat, unravel = ravel_pytree(params)
    grad = jax.grad(lambda z: kl_fn(unravel(z)))

    def product(v: jax.Array) -> jax.Array:
        return jax.jvp(grad, (flat,), (v,))[1] + damping * v

    return product


class CPODirection(NamedTuple):
    """The CPO step: the parameters move to ``theta - t x`` for the line search's ``t``
    (``t = 1`` is the linearised problem's solution). ``case`` as in the module table;
    ``lagrange_kl`` and ``lagrange_cost`` are the dual variables ``lambda`` and ``nu``."""

    x: jax.Array
    case: jax.Array
    lagrange_kl: jax.Array
    lagrange_cost: jax.Array


def cpo_direction(
    g: jax.Array,
    b: jax.Array,
    c: jax.Array,
    hinv_g: jax.Array,
    hinv_b: jax.Array,
    *,
    max_kl: float | jax.Array,
) -> CPODirection:
    """The CPO step from the gradients ``g`` (loss) and ``b`` (cost surrogate), the
    constraint value ``c`` and ``H^-1 g``, ``H^-1 b`` (see the module docstring)."""
    # a negative max_kl gave a NaN step (case 3), a NaN one a step of any size
    check_scalar("max_kl", max_kl, "be finite and > 0", lambda v: 0 < v < float("inf"))
    delta = jnp.asarray(max_kl, g.dtype)
    v, u = hinv_g, hinv_b
    q, r, s = jnp.vdot(g, v), jnp.vdot(g, u), jnp.vdot(b, u)
    s_safe = jnp.maximum(s, _EPS)
    A = jnp.maximum(q - r * r / s_safe, 0.0)  # >= 0 by Cauchy-Schwarz in the H^-1 inner product
    B = 2.0 * delta - c * c / s_safe
    feasible = c < 0
    case = jnp.select(
        [(jnp.vdot(b, b) <= 1e-8) & feasible, feasible & (B < 0), feasible, B >= 0],
        [4, 3, 2, 1],
        0,
    ).astype(jnp.int32)

    # cases 1 and 2: the projected dual
    c_safe = jnp.where(jnp.abs(c) < _EPS, jnp.where(feasible, -_EPS, _EPS), c)
    ratio = r / c_safe
    inf = jnp.asarray(jnp.inf, g.dtype)
    zero = jnp.zeros((), g.dtype)
    la_lo, la_hi = jnp.where(feasible, zero, ratio), jnp.where(feasible, ratio, inf)
    lb_lo, lb_hi = jnp.where(feasible, ratio, zero), jnp.where(feasible, inf, ratio)

    def project(x, lo, hi):  # the authors' max(lo, min(hi, x)): lo wins on an empty interval
        return jnp.maximum(lo, jnp.minimum(hi, x))

    lam_trpo = jnp.sqrt(q / (2.0 * delta))
    lam_a = project(jnp.sqrt(A / jnp.maximum(B, _EPS)), la_lo, la_hi)
    lam_b = project(lam_trpo, lb_lo, lb_hi)
    f_a = -0.5 * (A / (lam_a + _EPS) + B * lam_a) - r * c / s_safe
    f_b = -0.5 * (q / (lam_b + _EPS) + 2.0 * delta * lam_b)
    lam_proj = jnp.where(f_a >= f_b, lam_a, lam_b)
    nu_proj = jnp.maximum(0.0, lam_proj * c - r) / s_safe

    trpo = case >= 3
    recovery = case == 0
    lam = jnp.where(trpo, lam_trpo, jnp.where(recovery, 0.0, lam_proj))
    nu = jnp.where(trpo, 0.0, jnp.where(recovery, jnp.sqrt(2.0 * delta / s_safe), nu_proj))
    x = jnp.where(recovery, nu * u, (v + nu * u) / (lam + _EPS))
    return CPODirection(x, case, lam, nu)


class LineSearchResult(NamedTuple):
    """``params``: the accepted point, or the start when no trial was accepted;
    ``accepted``; ``backtracks``: the index ``j`` of the accepted trial ``theta - decay^j x``
    (``max_backtracks`` when none was)."""

    params: jax.Array
    accepted: jax.Array
    backtracks: jax.Array


def backtracking_line_search(
    evaluate: Callable[[jax.Array], tuple[jax.Array, jax.Array, jax.Array]],
    params: jax.Array,
    direction: CPODirection,
    constraint: jax.Array,
    *,
    max_kl: float | jax.Array,
    decay: float = 0.8,
    max_backtracks: int = 100,
) -> LineSearchResult:
    """CPO's line search over ``theta_j = theta - decay^j x`` (a ``lax.while_loop``):
    accept the first trial whose KL is ``<= max_kl``, whose cost surrogate rose by at most
    ``max(-c, 0)``, and, when the step was not a recovery (case > 1), whose loss did not
    rise. ``evaluate(flat) -> (loss, cost_surrogate, kl)`` on flat parameters."""
    # decay > 1 or a NaN max_kl rejected every trial without a word
    check_scalar("max_kl", max_kl, "be finite and > 0", lambda v: 0 < v < float("inf"))
    check_scalar("decay", decay, "lie in (0, 1]", lambda v: 0 < v <= 1)
    check_integer("max_backtracks", max_backtracks, 1)
    loss0, cost0, _ = evaluate(params)
    allowed = jnp.maximum(-constraint, 0.0)

    def ok(j):
        trial = params - decay**j * direction.x
        loss, cost, kl = evaluate(trial)
        good = (kl <= max_kl) & (cost - cost0 <= allowed) & jnp.isfinite(loss)
        return good & ((direction.case <= 1) | (loss <= loss0))

    def cond(state):
        j, found = state
        return (~found) & (j < max_backtracks)

    def body(state):
        j, _ = state
        found = ok(j.astype(params.dtype))
        return jnp.where(found, j, j + 1), found

    j, found = jax.lax.while_loop(cond, body, (jnp.zeros((), jnp.int32), jnp.zeros((), bool)))
    new = jnp.where(found, params - decay ** j.astype(params.dtype) * direction.x, params)
    return LineSearchResult(new, found, j)
