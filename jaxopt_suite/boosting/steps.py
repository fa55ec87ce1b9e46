"""Step rules: how far to move along a fitted weak learner.

Every rule sees the learner's direction ``d`` (per-sample change of the raw score), the
gradient ``g`` and the Hessian metric, through two numbers:

.. math::
  \\langle g, d\\rangle, \\qquad \\langle d, (H + \\lambda) d\\rangle,

from which the weak-Newton step ``t* = -<g,d>/<d,(H+lambda)d>`` and the squared Newton
decrement along ``d``, ``delta = <g,d>^2/<d,(H+lambda)d>``, follow. For a tree with
Newton leaves ``w_j = -G_j/(H_j+lambda)`` these are ``t* = 1`` and
``delta = sum_j G_j^2/(H_j+lambda)``, the structure score, so they cost nothing extra.

* ``newton``: ``eta * d`` (XGBoost's constant shrinkage).
* ``grn``: ``eta * d`` with the learner fitted under ``lambda + sqrt(M ||g||_2)``
  (gradient-regularised Newton, Mishchenko 2021; the boosting form of arXiv 2605.00581).
* ``aicn``: ``eta * alpha(delta) * t* * d`` with the AICN step (Hanzely et al., 2022)

  .. math::
    \\alpha = \\frac{-1 + \\sqrt{1 + 2 L G}}{L G} = \\frac{2}{1 + \\sqrt{1 + 2 L G}},
    \\qquad G = \\sqrt{\\delta},

  in ``(0, 1]``. ``L`` is in the loss's units (those of ``1 / sqrt(loss)``): ``delta``
  scales with the loss (with ``lambda`` scaled alike), so a loss scaled by ``s`` takes
  ``L / sqrt(s)`` for the same step (``fit.BoostingConfig`` spells out what that means for
  the target and the row count).
  The weak-learner mapping (Newton decrement along the learner, measured in
  ``H + lambda``, the Hessian floor that keeps logistic loss from diverging on leaves of
  tiny Hessian) is a reconstruction from the design notes (``notes/zo_boost.md`` section 4),
  not the paper's text; it lives here only.
* ``newton_cd``: Newton coordinate descent: a coordinate learner with the ``newton`` rule.
"""

from __future__ import annotations

import jax.numpy as jnp

STEPS = ("newton", "grn", "aicn", "newton_cd")


def aicn_alpha(decrement, L):
    """``alpha = 2 / (1 + sqrt(1 + 2 L G))`` for the Newton decrement ``G`` (the
    cancellation-free form of ``(-1 + sqrt(1 + 2 L G)) / (L G)``); 1 at ``G = 0``."""
    return 2.0 / (1.0 + jnp.sqrt(1.0 + 2.0 * L * decrement))


def grn_l2(l2, grad, M):
    """The GRN regulariser ``lambda + sqrt(M ||g||_2)`` for per-sample gradients ``grad``."""
    return l2 + jnp.sqrt(M * jnp.sqrt(jnp.sum(grad * grad)))


def weak_newton(grad_dot, curvature):
    """``(t*, delta)`` from ``<g,d>`` and ``<d,(H+lambda)d>`` (``(0, 0)`` for a null
    direction)."""
    positive = curvature > 0
    safe = jnp.where(positive, curvature, 1.0)
    t_star = jnp.where(positive, -grad_dot / safe, 0.0)
    delta = jnp.where(positive, grad_dot * grad_dot / safe, 0.0)
    return t_star, delta


def step_size(rule: str, eta, grad_dot, curvature, L):
    """The multiplier of the direction ``d`` under ``rule``, and ``(t*, delta, alpha)``
    for the trace (``alpha = 1`` outside ``aicn``)."""
    t_star, delta = weak_newton(grad_dot, curvature)
    if rule == "aicn":
        alpha = aicn_alpha(jnp.sqrt(delta), L)
        return eta * alpha * t_star, t_star, delta, alpha
    return eta * jnp.ones_like(t_star), t_star, delta, jnp.ones_like(t_star)
