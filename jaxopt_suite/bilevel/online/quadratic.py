"""Quadratic bilevel streams with closed-form ``y*_t``, ``F_t``, hypergradient and drift.

.. math::
  g_t(x, y) = \\tfrac12 y^\\top A y - y^\\top (B x + b_t), \\qquad
  f_t(x, y) = \\tfrac12 \\|y - c_t\\|^2 + \\tfrac\\lambda2 \\|x\\|^2,

so ``y*_t(x) = M x + A^{-1} b_t`` with ``M = A^{-1} B``, and with ``u_t = c_t - A^{-1} b_t``

.. math::
  F_t(x) = \\tfrac12 \\|M x - u_t\\|^2 + \\tfrac\\lambda2 \\|x\\|^2, \\qquad
  \\nabla F_t(x) = M^\\top (M x - u_t) + \\lambda x .

The drift of the stream is the path of ``(b_t, c_t)``; the function variation
``V_T = sum_t sup_{||x|| <= R} |F_t(x) - F_{t-1}(x)|`` is exact:
``F_t - F_{t-1} = -(M x)^T (u_t - u_{t-1}) + (||u_t||^2 - ||u_{t-1}||^2) / 2``, whose sup
over the ball is ``R ||M^T (u_t - u_{t-1})|| + |(||u_t||^2 - ||u_{t-1}||^2) / 2|``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np

from jaxopt_suite._checks import check_finite_nonnegative
from jaxopt_suite.bilevel.online.problem import ExactOracle, OnlineBilevelProblem, _check_count

Drift = Literal["static", "sqrt", "linear", "iid"]


@dataclasses.dataclass(frozen=True, eq=False)
class QuadraticStream:
    """A quadratic online bilevel stream and its exact oracle (see the module docstring).

    Build with :func:`quadratic_stream`. ``problem`` is what learners see; ``oracle``
    charges exact regret.
    """

    problem: OnlineBilevelProblem
    oracle: ExactOracle
    A: jax.Array
    B: jax.Array
    M: jax.Array
    lam: float
    drift: str
    x0: jax.Array
    y0: jax.Array

    def u(self, t: jax.Array) -> jax.Array:
        b, c = self.problem.round_data(t)
        return c - jnp.linalg.solve(self.A, b)

    def y_star(self, x: jax.Array, t: jax.Array) -> jax.Array:
        b, _ = self.problem.round_data(t)
        return jnp.linalg.solve(self.A, self.B @ x + b)

    def x_star(self, t: jax.Array) -> jax.Array:
        """Minimiser of ``F_t`` (requires ``lam > 0`` or ``M`` of full column rank)."""
        lhs = self.M.T @ self.M + self.lam * jnp.eye(self.M.shape[1])
        return jnp.linalg.solve(lhs, self.M.T @ self.u(t))

    def variation(self, num_rounds: int, radius: float) -> float:
        """``V_T`` over the ball ``||x|| <= radius`` for ``T = num_rounds`` (an int >= 1;
        ``radius`` finite and >= 0)."""
        num_rounds = _check_count("num_rounds", num_rounds)
        check_finite_nonnegative("radius", radius)
        u = jax.vmap(self.u)(jnp.arange(num_rounds, dtype=jnp.int32))
        du = jnp.diff(u, axis=0)
        sq = jnp.sum(u * u, axis=1)
        terms = radius * jnp.linalg.norm(du @ self.M, axis=1) + 0.5 * jnp.abs(jnp.diff(sq))
        return float(jnp.sum(terms))

    def smoothness(self) -> float:
        """``L`` of ``F_t``: the largest eigenvalue of ``M^T M + lam I``."""
        return float(jnp.linalg.eigvalsh(self.M.T @ self.M)[-1]) + self.lam


def quadratic_stream(
    *,
    dim_x: int = 4,
    dim_y: int = 8,
    drift: Drift = "static",
    scale: float = 1.0,
    inner_condition: float = 4.0,
    outer_condition: float | None = None,
    lam: float = 0.0,
    seed: int = 0,
    dtype=jnp.float32,
) -> QuadraticStream:
    """A quadratic stream with drift pattern ``drift`` of size ``scale``:

    - ``"static"``: ``b_t, c_t`` fixed, ``V_T = 0``;
    - ``"sqrt"``: ``c_t`` turns on a circle of radius ``scale`` with angular speed
      ``1 / sqrt(t + 1)``, so the path length and ``V_T`` grow as ``sqrt(T)``;
    - ``"linear"``: the same circle at constant angular speed ``1 / 10``: ``V_T ~ T``;
    - ``"iid"``: ``c_t = c + scale * xi_t``, ``xi_t`` i.i.d. standard normal (fixed by
      ``seed``): the regime of window regret, ``V_T ~ T``.

    ``A`` has eigenvalues in ``[1, inner_condition]``; ``B`` is random, rescaled so that
    ``M = A^{-1} B`` has singular values spread over ``[1 / sqrt(outer_condition), 1]``
    when ``outer_condition`` is given (``F_t`` then has condition number
    ``outer_condition`` for ``lam = 0``).
    """
    if drift not in ("static", "sqrt", "linear", "iid"):
        raise ValueError(f"drift must be 'static', 'sqrt', 'linear' or 'iid', got {drift!r}")
    _check_count("dim_x", dim_x)
    _check_count("dim_y", dim_y, minimum=2)
    if dim_y < dim_x:
        raise ValueError(f"dim_y ({dim_y}) must be >= dim_x ({dim_x}) so M can have full rank")
    if not 1 <= inner_condition < math.inf:
        raise ValueError(f"inner_condition must be finite and >= 1, got {inner_condition}")
    # NaN made every c_t NaN
    check_finite_nonnegative("scale", scale)
    if outer_condition is not None and not 1 <= outer_condition < math.inf:
        raise ValueError(
            f"outer_condition must be finite and >= 1 (or None), got {outer_condition}"
        )
    check_finite_nonnegative("lam", lam)
    rng = np.random.default_rng(seed)
    q = np.linalg.qr(rng.normal(size=(dim_y, dim_y)))[0]
    A = q @ np.diag(np.linspace(1.0, inner_condition, dim_y)) @ q.T
    if outer_condition is None:
        B = rng.normal(size=(dim_y, dim_x)) / np.sqrt(dim_y)
    else:
        left = np.linalg.qr(rng.normal(size=(dim_y, dim_x)))[0]
        right = np.linalg.qr(rng.normal(size=(dim_x, dim_x)))[0]
        sv = np.sqrt(np.geomspace(1.0, 1.0 / outer_condition, dim_x))
        B = A @ (left * sv) @ right.T  # M = A^{-1} B = left diag(sv) right^T
    b0 = rng.normal(size=dim_y) / np.sqrt(dim_y)
    c0 = rng.normal(size=dim_y)
    plane = np.linalg.qr(rng.normal(size=(dim_y, 2)))[0]
    A, B, b0, c0, plane = (jnp.asarray(a, dtype) for a in (A, B, b0, c0, plane))
    noise_key = jax.random.key(seed)

    def round_data(t):
        t = jnp.asarray(t, jnp.int32)
        tf = t.astype(dtype)
        if drift == "static":
            c = c0
        elif drift in ("sqrt", "linear"):
            # Angle after t rounds: sum of the per-round speeds (closed form for "linear";
            # 2 (sqrt(t + 1) - 1) approximates sum_{s <= t} 1 / sqrt(s + 1) within 1).
            angle = 0.1 * tf if drift == "linear" else 2.0 * (jnp.sqrt(tf + 1.0) - 1.0)
            c = c0 + scale * (plane @ jnp.stack([jnp.cos(angle) - 1.0, jnp.sin(angle)]))
        else:
            c = c0 + scale * jax.random.normal(jax.random.fold_in(noise_key, t), c0.shape, dtype)
        return b0, c

    def inner(x, y, data):
        b, _ = data
        return 0.5 * y @ A @ y - y @ (B @ x + b)

    def outer(x, y, data):
        _, c = data
        return 0.5 * jnp.sum((y - c) ** 2) + 0.5 * lam * x @ x

    M = jnp.linalg.solve(A, B)

    def u_of(data):
        b, c = data
        return c - jnp.linalg.solve(A, b)

    def value(x, data):
        r = M @ x - u_of(data)
        return 0.5 * r @ r + 0.5 * lam * x @ x

    def hypergradient(x, data):
        return M.T @ (M @ x - u_of(data)) + lam * x

    problem = OnlineBilevelProblem(outer, inner, round_data)
    return QuadraticStream(
        problem=problem,
        oracle=ExactOracle(value, hypergradient),
        A=A,
        B=B,
        M=M,
        lam=float(lam),
        drift=drift,
        x0=jnp.zeros(dim_x, dtype),
        y0=jnp.zeros(dim_y, dtype),
    )
