"""Zeroth-order descent with a directional hint: CV-ZOD against plain Gaussian smoothing.

    python examples/cv_zod_hints.py --alpha 0.9    # hint quality cos(hint, gradient)
    python examples/cv_zod_hints.py --quick

The objective is an ill-conditioned quadratic in 500 dimensions; each step gets a hint whose
cosine with the true gradient is ``alpha``, deliberately mis-scaled. The adaptive variant
estimates the hint quality on the fly, decides whether to spend a query on the hint, and
scales its step to the estimated error; it needs no knowledge of alpha.
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import optax

from jaxopt_suite.zeroth_order import scale_by_cv_zod, scale_by_gaussian_smoothing

DIM = 500


def value_fn(params):
    curvature = jnp.linspace(0.1, 1.0, DIM)
    return 0.5 * jnp.sum(curvature * params["x"] ** 2)


def noisy_hint(params, alpha, key):
    grad = jax.grad(value_fn)(params)["x"]
    unit = grad / (jnp.linalg.norm(grad) + 1e-12)
    noise = jax.random.normal(key, grad.shape)
    noise = noise - (noise @ unit) * unit
    noise = noise / jnp.linalg.norm(noise)
    return {"x": 5.0 * (alpha * unit + jnp.sqrt(1 - alpha**2) * noise)}


def run(transform, alpha, steps, needs_hint):
    opt = optax.chain(transform, optax.sgd(1.0))
    params = {"x": jnp.ones(DIM)}

    def body(carry, key):
        params, state = carry
        extra = {"hint": noisy_hint(params, alpha, key)} if needs_hint else {}
        updates, state = opt.update(params, state, params, value_fn=value_fn, **extra)
        return (optax.apply_updates(params, updates), state), value_fn(params)

    keys = jax.random.split(jax.random.key(3), steps)
    _, losses = jax.jit(lambda c: jax.lax.scan(body, c, keys))((params, opt.init(params)))
    return losses


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--alpha", type=float, default=0.9)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    steps = 100 if args.quick else args.steps
    # Same queries per step: 1 hint query + 10 random probes, or 11 random probes.
    cv = run(scale_by_cv_zod(jax.random.key(0), num_directions=10), args.alpha, steps, True)
    # Plain ZO needs a step that matches its error (d + 1)/q: the classical 1 / (L d / q).
    plain = run(
        optax.chain(
            scale_by_gaussian_smoothing(jax.random.key(0), num_directions=11),
            optax.scale(11 / (DIM + 1)),
        ),
        args.alpha,
        steps,
        False,
    )
    print(
        f"alpha={args.alpha}: loss after {steps} steps  CV-ZOD {float(cv[-1]):.4g}  "
        f"plain ZO {float(plain[-1]):.4g}  (start {float(cv[0]):.4g})"
    )
    return float(cv[-1]), float(plain[-1])


if __name__ == "__main__":
    main()
