"""Train an MLP on digits with zeroth-order estimates only (no backprop in the update).

    python examples/szo_mlp.py --method szo       # SZO-kappa, activation-supported probes
    python examples/szo_mlp.py --method spsa      # the SPSA baseline
    python examples/szo_mlp.py --quick            # a few hundred steps

Each step runs one forward pass that returns the loss's layer inputs (flax helper), then the
transform queries the loss once per probe (SZO: forward differences based at that pass's
loss; SPSA: central differences, twice per probe) and SGD applies the estimate.
"""

from __future__ import annotations

import argparse

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from jaxopt_suite import datasets
from jaxopt_suite.zeroth_order import flax_forward_with_activations, scale_by_spsa, scale_by_szo


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = jnp.tanh(nn.Dense(256)(x))
        x = jnp.tanh(nn.Dense(256)(x))
        return nn.Dense(10)(x)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--method", choices=("szo", "spsa"), default="szo")
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--learning-rate", type=float, default=None)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    steps = 300 if args.quick else args.steps
    data = datasets.load_digits()
    x, y = jnp.asarray(data.x_train), jnp.asarray(data.y_train)
    model = MLP()
    params = model.init(jax.random.key(0), x[:1])

    def loss_fn(params, xb, yb):
        logits = model.apply(params, xb)
        return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, yb))

    if args.method == "szo":
        # Defaults: kappa=8 eigenvectors per layer, whitened probes (covariance_power=-1/2).
        # Forward differences based at the activation pass's loss: 2 forward passes a step.
        transform = scale_by_szo(jax.random.key(1), layout="in_out", antithetic=False)
        lr = args.learning_rate or 1e-2
    else:
        transform = scale_by_spsa(jax.random.key(1))
        lr = args.learning_rate or 1e-3
    opt = optax.chain(transform, optax.sgd(lr))

    @jax.jit
    def step(params, state, key):
        idx = jax.random.choice(key, x.shape[0], (32,), replace=False)
        xb, yb = x[idx], y[idx]
        logits, activations = flax_forward_with_activations(model, params, xb)
        value = jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, yb))
        updates, state = opt.update(
            params,
            state,
            params,
            value_fn=lambda p: loss_fn(p, xb, yb),
            activations=activations,  # ignored by SPSA
            value=value,  # the base point of SZO's forward differences; SPSA is central
        )
        return optax.apply_updates(params, updates), state

    state = opt.init(params)
    for i, key in enumerate(jax.random.split(jax.random.key(2), steps)):
        params, state = step(params, state, key)
        if (i + 1) % max(1, steps // 10) == 0:
            print(f"step {i + 1:5d}  train loss {float(loss_fn(params, x, y)):.4f}")
    test_logits = model.apply(params, jnp.asarray(data.x_test))
    accuracy = float(jnp.mean(jnp.argmax(test_logits, -1) == jnp.asarray(data.y_test)))
    print(f"{args.method}: test accuracy {accuracy:.3f} after {steps} steps")
    return accuracy


if __name__ == "__main__":
    main()
