"""Online bilevel problems: a stream of ``(f_t, g_t)`` and the oracles that charge regret.

At round ``t`` (0-based) the learner has played ``x_t``; it then receives the round's data
``d_t = problem.round_data(t)`` and with it ``f_t(x, y) = outer_loss(x, y, d_t)`` and
``g_t(x, y) = inner_loss(x, y, d_t)``, ``g_t`` strongly convex in ``y``. It is charged the
local-regret term of ``F_t(x) = f_t(x, y*_t(x))`` at ``x_t`` before it updates.

An :class:`ExactOracle` gives ``nabla F_t`` in closed form (quadratic streams); for learned
tasks :func:`implicit_oracle` estimates it by solving the inner problem and the linear
system on the round's data.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from jaxopt_suite.bilevel.problem import _check_floating_tree, _check_scalar

Loss = Callable[[Any, Any, Any], jax.Array]


@dataclasses.dataclass(frozen=True, eq=False)
class OnlineBilevelProblem:
    """A time-varying bilevel problem.

    Attributes:
      outer_loss: ``f(x, y, d) -> scalar``; ``f_t = f(., ., d_t)``.
      inner_loss: ``g(x, y, d) -> scalar``, strongly convex in ``y``; ``g_t = g(., ., d_t)``.
      round_data: ``t -> d_t`` for an int32 scalar round index ``t >= 0``; jittable, with
        the same pytree structure and shapes for every ``t`` (e.g. :func:`stream_from_arrays`).
      num_rounds: how many rounds the stream has (``None``: unbounded).

    Instances compare and hash by identity, so a problem can be static solver metadata.
    """

    outer_loss: Loss
    inner_loss: Loss
    round_data: Callable[[jax.Array], Any]
    num_rounds: int | None = None

    def __post_init__(self):
        for name in ("outer_loss", "inner_loss", "round_data"):
            if not callable(getattr(self, name)):
                raise TypeError(
                    f"OnlineBilevelProblem.{name} must be callable, got "
                    f"{type(getattr(self, name)).__name__}"
                )
        if self.num_rounds is not None:
            _check_count("num_rounds", self.num_rounds)

    def f(self, x: Any, y: Any, data: Any) -> jax.Array:
        return self.outer_loss(x, y, data)

    def g(self, x: Any, y: Any, data: Any) -> jax.Array:
        return self.inner_loss(x, y, data)


def _check_count(name: str, value: Any, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be a Python int, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def stream_from_arrays(outer_loss: Loss, inner_loss: Loss, data: Any) -> OnlineBilevelProblem:
    """A problem whose round ``t`` data is ``data[t]`` for every leaf of ``data``.

    Every leaf must have the same leading length ``T`` (the number of rounds).
    """
    leaves, _ = jax.tree_util.tree_flatten_with_path(data)
    if not leaves:
        raise ValueError("data has no array leaves")
    lengths = {}
    for path, leaf in leaves:
        shape = jnp.shape(leaf)
        if len(shape) == 0:
            raise ValueError(
                f"data{jax.tree_util.keystr(path)} is a scalar; every leaf needs a leading "
                "round axis"
            )
        lengths[jax.tree_util.keystr(path)] = shape[0]
    if len(set(lengths.values())) > 1:
        raise ValueError(
            "every leaf of data must have the same leading (round) length; got "
            + ", ".join(f"data{k}: {n}" for k, n in lengths.items())
        )
    num_rounds = next(iter(lengths.values()))
    arrays = jax.tree.map(jnp.asarray, data)

    def round_data(t):
        return jax.tree.map(lambda a: a[t], arrays)

    return OnlineBilevelProblem(outer_loss, inner_loss, round_data, num_rounds)


def check_online_problem(problem: Any, x: Any, y: Any) -> Any:
    """Eager checks at the Python boundary; returns the abstract round data."""
    if not isinstance(problem, OnlineBilevelProblem):
        raise TypeError(f"problem must be an OnlineBilevelProblem, got {type(problem).__name__}")
    _check_floating_tree("x0", x)
    _check_floating_tree("y0", y)
    data = jax.eval_shape(problem.round_data, jax.ShapeDtypeStruct((), jnp.int32))
    for name, fun in (("inner_loss", problem.inner_loss), ("outer_loss", problem.outer_loss)):
        try:
            _check_scalar(name, fun, x, y, data)
        except (TypeError, ValueError, KeyError, IndexError) as err:
            if "must return a scalar" in str(err):
                raise
            raise ValueError(
                f"{name}(x0, y0, round_data(t)) failed on the given x0 / y0 (structures "
                f"{jax.tree.structure(x)} and {jax.tree.structure(y)}): {err}"
            ) from err
    return data


@dataclasses.dataclass(frozen=True, eq=False)
class ExactOracle:
    """Closed-form ``F_t``: ``value(x, d)`` and ``hypergradient(x, d)`` (jittable).

    Used only to charge regret; the learners never see it.
    """

    value: Callable[[Any, Any], jax.Array]
    hypergradient: Callable[[Any, Any], Any]

    def __call__(self, x: Any, data: Any, y_hint: Any) -> Any:
        del y_hint
        return self.hypergradient(x, data)


def implicit_oracle(
    problem: OnlineBilevelProblem, *, inner_lr: float, inner_steps: int, cg_steps: int = 50
) -> Callable[[Any, Any, Any], Any]:
    """An estimate of ``nabla F_t(x)`` for problems without closed forms.

    ``inner_steps`` gradient steps on ``g_t(x, .)`` from the learner's current ``y`` (the
    hint), then conjugate gradients on ``nabla^2_yy g_t v = -nabla_y f_t``. The estimate is
    as good as that inner solve; the regret it charges is labelled "estimated".
    """
    from jaxopt_suite.bilevel.problem import BilevelProblem
    from jaxopt_suite.bilevel.solvers import check_implicit_settings, implicit_hypergradient

    check_implicit_settings(inner_lr, inner_steps, cg_steps)
    offline = BilevelProblem(problem.outer_loss, problem.inner_loss, _no_sampler, _no_sampler)

    def oracle(x, data, y_hint):
        grad, _, _ = implicit_hypergradient(
            offline,
            x,
            y_hint,
            data,
            data,
            inner_lr=float(inner_lr),
            inner_steps=int(inner_steps),
            cg_steps=int(cg_steps),
        )
        return grad

    return oracle


def _no_sampler(key):
    raise NotImplementedError("online problems draw their data from round_data(t)")


def window_data(problem: OnlineBilevelProblem, t: jax.Array, window: int) -> tuple[Any, Any]:
    """``(d_{t - i} for i < window)`` stacked on a leading axis, and the mask ``t - i >= 0``.

    Rounds before the first are clamped to round 0 and masked out: following Hazan, Singh
    and Zhang (2017), functions of rounds ``< 0`` are zero. ``window`` is a Python int >= 1
    (it fixes the stack's length).
    """
    window = _check_count("window", window)
    offsets = jnp.arange(window, dtype=jnp.int32)
    rounds = t - offsets
    valid = rounds >= 0
    data = jax.vmap(problem.round_data)(jnp.maximum(rounds, 0))
    return data, valid


def window_hypergradient(oracle, problem, x, y_hint, t, window):
    """``nabla F_{t,W}(x) = (1/W) sum_{i<W, t-i>=0} nabla F_{t-i}(x)`` from ``oracle``
    (``window``: a Python int >= 1)."""
    window = _check_count("window", window)
    data, valid = window_data(problem, t, window)
    grads = jax.vmap(lambda d: oracle(x, d, y_hint))(data)
    weights = valid.astype(jnp.result_type(*jax.tree.leaves(x))) / window
    return jax.tree.map(lambda g: jnp.tensordot(weights, g, axes=1), grads)
