"""The stochastic bilevel problem and the derivative products its solvers need.

.. math::
  \\min_x \\Phi(x) = \\mathbb E_\\xi f(x, y^*(x); \\xi), \\qquad
  y^*(x) = \\arg\\min_y \\mathbb E_\\zeta g(x, y; \\zeta),

with ``g`` strongly convex in ``y``. The hypergradient is

.. math::
  \\nabla\\Phi(x) = \\nabla_x f + \\nabla^2_{xy} g\\, v^*, \\qquad
  v^* = -[\\nabla^2_{yy} g]^{-1} \\nabla_y f,

all at ``(x, y^*(x))``. ``x`` (upper) and ``y`` (lower) are arbitrary pytrees of floating
arrays; batches are arbitrary pytrees produced by the problem's samplers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

Loss = Callable[[Any, Any, Any], jax.Array]
Sampler = Callable[[jax.Array], Any]


@dataclasses.dataclass(frozen=True, eq=False)
class BilevelProblem:
    """A stochastic bilevel problem.

    Attributes:
      outer_loss: ``f(x, y, batch) -> scalar``, the upper-level (e.g. validation) loss.
      inner_loss: ``g(x, y, batch) -> scalar``, the lower-level (e.g. training) loss,
        strongly convex in ``y``.
      sample_inner: ``key -> batch`` for ``g``; jittable.
      sample_outer: ``key -> batch`` for ``f``; jittable.

    Instances compare and hash by identity, so a problem can sit in a solver state as
    static metadata (the state's arrays are the only traced leaves).
    """

    outer_loss: Loss
    inner_loss: Loss
    sample_inner: Sampler
    sample_outer: Sampler

    def __post_init__(self):
        for name in ("outer_loss", "inner_loss", "sample_inner", "sample_outer"):
            if not callable(getattr(self, name)):
                raise TypeError(
                    f"BilevelProblem.{name} must be callable, got "
                    f"{type(getattr(self, name)).__name__}"
                )

    def sample(self, key: jax.Array) -> tuple[Any, Any]:
        """``(inner_batch, outer_batch)`` from independent halves of ``key``."""
        inner_key, outer_key = jax.random.split(key)
        return self.sample_inner(inner_key), self.sample_outer(outer_key)


def _check_scalar(name: str, fun: Callable, *args: Any) -> None:
    out = jax.eval_shape(fun, *args)
    if not hasattr(out, "shape") or out.shape != () or not jnp.issubdtype(out.dtype, jnp.floating):
        got = (
            f"shape {out.shape} dtype {out.dtype}" if hasattr(out, "shape") else type(out).__name__
        )
        raise ValueError(f"{name}(x, y, batch) must return a scalar floating loss, got {got}")


def _check_floating_tree(name: str, tree: Any) -> None:
    leaves = jax.tree.leaves(tree)
    if not leaves:
        raise ValueError(f"{name} has no array leaves")
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        dtype = jnp.result_type(leaf)
        if not jnp.issubdtype(dtype, jnp.floating):
            raise TypeError(
                f"{name}{jax.tree_util.keystr(path)} must be floating point, got dtype {dtype}"
            )
        # a NaN start was reported after the first step as a divergence of the step sizes
        if not isinstance(leaf, jax.core.Tracer) and not np.all(np.isfinite(np.asarray(leaf))):
            raise ValueError(f"{name}{jax.tree_util.keystr(path)} must be finite")


def check_problem(problem: Any, x: Any, y: Any, key: jax.Array) -> None:
    """Eager checks at the Python boundary: types, floating leaves, scalar losses.

    Mismatched pytrees between ``x``/``y`` and what the losses expect surface here as an
    error naming the loss, instead of deep inside a traced step.
    """
    if not isinstance(problem, BilevelProblem):
        raise TypeError(f"problem must be a BilevelProblem, got {type(problem).__name__}")
    _check_floating_tree("x0", x)
    _check_floating_tree("y0", y)
    inner_batch, outer_batch = jax.eval_shape(problem.sample, key)
    for name, fun, batch in (
        ("inner_loss", problem.inner_loss, inner_batch),
        ("outer_loss", problem.outer_loss, outer_batch),
    ):
        try:
            _check_scalar(name, fun, x, y, batch)
        except (TypeError, ValueError, KeyError, IndexError) as err:
            if "must return a scalar" in str(err):
                raise
            raise ValueError(
                f"{name}(x0, y0, batch) failed on the given x0 / y0 (structures "
                f"{jax.tree.structure(x)} and {jax.tree.structure(y)}): {err}"
            ) from err


# --- derivative products -------------------------------------------------------------------


def finite_sum(leaf: jax.Array) -> jax.Array:
    """Whether ``leaf``'s entries are finite, read off their sum: it is non-finite iff some
    entry is (or the sum overflows, |values| ~ 1e38), and unlike ``all(isfinite(.))`` it
    needs no leaf-sized temporary on CPU. Summed in float32 at least: a float16 sum
    overflows at 65504, which flagged finite float16 iterates."""
    return jnp.isfinite(jnp.sum(leaf, dtype=jnp.promote_types(leaf.dtype, jnp.float32)))


def hvp(fun: Callable[[Any], jax.Array], y: Any, v: Any) -> Any:
    """``H v`` for ``H = nabla^2 fun(y)``, forward-over-reverse (the lean mode in memory)."""
    return jax.jvp(jax.grad(fun), (y,), (v,))[1]


def grad_and_hvp(fun: Callable[[Any], jax.Array], y: Any, v: Any) -> tuple[Any, Any]:
    """``(nabla fun(y), nabla^2 fun(y) v)`` from one forward-over-reverse pass."""
    return jax.jvp(jax.grad(fun), (y,), (v,))


def joint_vjp(inner_loss: Loss, x: Any, y: Any, v: Any, batch: Any) -> tuple[Any, Any, Any]:
    """``(nabla_y g, nabla^2_yy g v, nabla^2_xy g v)`` from one VJP of ``nabla_y g``.

    The Hessian of ``g`` is symmetric, so the VJP of ``(y, x) -> nabla_y g(x, y)`` at
    cotangent ``v`` gives the Hessian action and the cross term together (the SOBA oracle).
    """
    grad_y, vjp = jax.vjp(lambda y_, x_: jax.grad(inner_loss, 1)(x_, y_, batch), y, x)
    hv, cross = vjp(v)
    return grad_y, hv, cross


def cross_term(inner_loss: Loss, x: Any, y: Any, v: Any, batch: Any) -> Any:
    """``nabla^2_xy g v = nabla_x <nabla_y g(x, y), v>``, reverse over forward.

    Only ``x``-sized and activation-sized temporaries: the ``y`` gradient is never formed.
    """

    def directional(x_):
        return jax.jvp(lambda y_: inner_loss(x_, y_, batch), (y,), (v,))[1]

    return jax.grad(directional)(x)


def directional_derivative(fun: Callable[[Any], jax.Array], y: Any, v: Any) -> jax.Array:
    """``<nabla fun(y), v>`` by forward mode."""
    return jax.jvp(fun, (y,), (v,))[1]
