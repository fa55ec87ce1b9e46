"""A tiny hand-computable online bilevel stream and the learners under test.

Round ``t`` carries ``d_t = {"a", "b", "c", "e"}``, each of shape ``(2,)``; with
elementwise products

.. math::
  g_t(x, y) = \\tfrac12 \\sum a_t y^2 - \\sum y (b_t x + c_t), \\qquad
  f_t(x, y) = \\tfrac12 \\|y - e_t\\|^2,

so ``y*_t(x) = (b_t x + c_t) / a_t``, ``F_t(x) = 1/2 ||y*_t(x) - e_t||^2`` and
``nabla F_t(x) = (b_t / a_t) (y*_t(x) - e_t)``: everything is computable in numpy.
"""

import jax.numpy as jnp
import numpy as np

from jaxopt_suite.bilevel import online as ob

NUM_ROUNDS = 8


def hand_data(num_rounds: int = NUM_ROUNDS, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {
        "a": rng.uniform(1.0, 3.0, size=(num_rounds, 2)),
        "b": rng.uniform(0.5, 1.5, size=(num_rounds, 2)) * np.array([1.0, -1.0]),
        "c": rng.normal(size=(num_rounds, 2)),
        "e": rng.normal(size=(num_rounds, 2)),
    }


def inner(x, y, d):
    return 0.5 * jnp.sum(d["a"] * y**2) - jnp.sum(y * (d["b"] * x + d["c"]))


def outer(x, y, d):
    return 0.5 * jnp.sum((y - d["e"]) ** 2)


def _hand_value(x, d):
    y = (d["b"] * x + d["c"]) / d["a"]
    return 0.5 * jnp.sum((y - d["e"]) ** 2)


def _hand_hypergradient(x, d):
    y = (d["b"] * x + d["c"]) / d["a"]
    return d["b"] / d["a"] * (y - d["e"])


HAND_ORACLE = ob.ExactOracle(_hand_value, _hand_hypergradient)


def hand_stream(data: dict | None = None) -> ob.OnlineBilevelProblem:
    data = hand_data() if data is None else data
    return ob.stream_from_arrays(outer, inner, {k: np.float32(v) for k, v in data.items()})


def np_grad_F(x: np.ndarray, data: dict, t: int) -> np.ndarray:
    """``nabla F_t(x)`` in float64 numpy, independently of the module."""
    a, b, c, e = (np.asarray(data[k][t], np.float64) for k in "abce")
    return b / a * ((b * x + c) / a - e)


def np_F(x: np.ndarray, data: dict, t: int) -> float:
    a, b, c, e = (np.asarray(data[k][t], np.float64) for k in "abce")
    return 0.5 * float(np.sum(((b * x + c) / a - e) ** 2))


X0 = jnp.array([0.3, -0.2], jnp.float32)
Y0 = jnp.zeros(2, jnp.float32)


# Step sizes as in /work/exp/smoke.py: 0.5 for the learners that solve the inner problems
# to a tolerance every round, 0.1 for the single-loop ones.
LEARNERS = {
    "aobo": lambda: ob.aobo(inner_lr=0.25, outer_lr=0.5),
    "fsobo": lambda: ob.fsobo(inner_lr=0.25, outer_lr=0.1),
    "wobo_iterate": lambda: ob.wobo(window=3, inner_lr=0.25, outer_lr=0.5),
    "wobo_single_loop": lambda: ob.wobo(
        window=3, inner_lr=0.25, outer_lr=0.1, variant="single_loop"
    ),
    "oagd": lambda: ob.oagd(window=3, inner_lr=0.25, outer_lr=0.1),
    "sobow": lambda: ob.sobow(window=3, inner_lr=0.25, outer_lr=0.1),
}
