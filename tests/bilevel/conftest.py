"""A strongly convex quadratic bilevel problem with a closed-form solution, on pytrees."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from jaxopt_suite.bilevel import BilevelProblem


class Quadratic:
    """g = 1/2 y^T A y - y^T (B x + xi),  f = 1/2 ||y - c||^2 + zeta^T y + lam/2 ||x||^2.

    ``y`` is ``{"w": (3, 2), "b": (2,)}`` (8 numbers), ``x`` is ``(a (2,), c (2, 1))``
    (4 numbers); the batches are the noises ``xi`` and ``zeta`` (scale ``noise``). Then
    ``y*(x) = M x`` with ``M = A^{-1} B`` and ``grad Phi(x) = M^T (M x - c) + lam x``.
    """

    def __init__(self, noise: float = 0.0, lam: float = 0.1, seed: int = 0):
        rng = np.random.default_rng(seed)
        q = np.linalg.qr(rng.normal(size=(8, 8)))[0]
        self.A = jnp.asarray(q @ np.diag(np.linspace(1.0, 3.0, 8)) @ q.T, jnp.float32)
        self.B = jnp.asarray(0.5 * rng.normal(size=(8, 4)), jnp.float32)
        self.c = jnp.asarray(rng.normal(size=8), jnp.float32)
        self.lam = lam
        self.noise = noise
        self.y0 = {"w": jnp.zeros((3, 2)), "b": jnp.zeros(2)}
        self.x0 = (jnp.zeros(2), jnp.zeros((2, 1)))
        _, self.unravel_y = ravel_pytree(self.y0)
        _, self.unravel_x = ravel_pytree(self.x0)
        self.M = jnp.linalg.solve(self.A, self.B)

        def inner(x, y, xi):
            yf, xf = ravel_pytree(y)[0], ravel_pytree(x)[0]
            return 0.5 * yf @ self.A @ yf - yf @ (self.B @ xf + xi)

        def outer(x, y, zeta):
            yf, xf = ravel_pytree(y)[0], ravel_pytree(x)[0]
            return 0.5 * jnp.sum((yf - self.c) ** 2) + zeta @ yf + 0.5 * self.lam * xf @ xf

        self.problem = BilevelProblem(
            outer_loss=outer,
            inner_loss=inner,
            sample_inner=lambda k: noise * jax.random.normal(k, (8,)),
            sample_outer=lambda k: noise * jax.random.normal(k, (8,)),
        )

    def hypergradient(self, x):
        xf = ravel_pytree(x)[0]
        return self.M.T @ (self.M @ xf - self.c) + self.lam * xf

    def x_star(self):
        lhs = self.M.T @ self.M + self.lam * jnp.eye(4)
        return jnp.linalg.solve(lhs, self.M.T @ self.c)

    def y_star(self, x):
        return self.M @ ravel_pytree(x)[0]

    def v_star(self, x):
        return -jnp.linalg.solve(self.A, self.y_star(x) - self.c)
