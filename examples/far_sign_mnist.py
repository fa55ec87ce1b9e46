"""FAR-SIGN on MNIST with 30% Byzantine workers, against asynchronous SGD and a robust
aggregator, in a simulated parameter-server cluster.

    python examples/far_sign_mnist.py                   # ALIE, 20,000 uploads
    python examples/far_sign_mnist.py --attack sign_flip
    python examples/far_sign_mnist.py --quick           # 4,000 uploads

20 workers hold i.i.d. shards of MNIST (2x2-pooled to 14 x 14; an MLP 196-16-10), compute
for an exponential time of mean 1 per message, two of them five times slower; 6 are
Byzantine. FAR-SIGN workers send 512 one-bit signs per upload against 106,304 bits for a
full gradient. The synchronous baseline waits for its slowest worker every round and runs
for the same simulated time.
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from jaxopt_suite.datasets import load_mnist
from jaxopt_suite.robust import far_sign as fs
from jaxopt_suite.robust.simulator import Cluster, run_async, run_sync

WORKERS, BYZANTINE, HIDDEN = 20, 6, 16


def data():
    d = load_mnist()

    def pool(x):
        return x.reshape(-1, 14, 2, 14, 2).mean((2, 4)).reshape(x.shape[0], -1)

    x = pool(d.x_train.reshape(-1, 28, 28))
    m = x.shape[0] // WORKERS
    shards = (
        x[: WORKERS * m].reshape(WORKERS, m, -1),
        d.y_train[: WORKERS * m].reshape(WORKERS, m),
    )
    return shards, (jnp.asarray(pool(d.x_test.reshape(-1, 28, 28))), jnp.asarray(d.y_test))


def model():
    k1, k2 = jax.random.split(jax.random.key(0))
    params = {
        "w1": jax.random.normal(k1, (196, HIDDEN)) * np.sqrt(2 / 196),
        "b1": jnp.zeros(HIDDEN),
        "w2": jax.random.normal(k2, (HIDDEN, 10)) * np.sqrt(1 / HIDDEN),
        "b2": jnp.zeros(10),
    }

    def logits(p, x):
        return jax.nn.relu(x @ p["w1"] + p["b1"][None, :]) @ p["w2"] + p["b2"][None, :]

    def loss(p, batch):
        z = logits(p, batch[0])
        picked = jnp.take_along_axis(z, batch[1][:, None], axis=1)[:, 0]
        return jnp.mean(jax.nn.logsumexp(z, axis=1) - picked)

    return params, logits, loss


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--attack", default="alie")
    parser.add_argument("--uploads", type=int, default=20_000)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    uploads = 4_000 if args.quick else args.uploads
    shards, (x_test, y_test) = data()
    params, logits, loss = model()
    _, unravel = ravel_pytree(params)

    def accuracy(flat):
        return float(jnp.mean(jnp.argmax(logits(unravel(flat), x_test), axis=1) == y_test))

    cluster = Cluster(num_workers=WORKERS, num_byzantine=BYZANTINE, stragglers=2)
    common = dict(attack=args.attack, key=jax.random.key(1), num_classes=10)
    alpha, beta = fs.default_schedules(0.1, 0.005)
    ours = run_async(
        loss, params, shards, cluster, protocol="far_sign", events=uploads,
        record_every=uploads // 10, num_directions=512, alpha=alpha, beta=beta, **common,
    )  # fmt: skip
    sgd = run_async(
        loss, params, shards, cluster, protocol="sgd", events=uploads,
        record_every=uploads // 10, learning_rate=0.1, **common,
    )  # fmt: skip
    budget = float(ours.checkpoint_time[-1])
    rounds = 10 * max(1, int(budget / 4.0) // 10)  # more rounds than fit in the budget
    trimmed = run_sync(
        loss, params, shards, cluster, aggregator="trimmed_mean", rounds=rounds,
        record_every=rounds // 10, learning_rate=1.0, **common,
    )  # fmt: skip
    within = int(np.searchsorted(np.asarray(trimmed.checkpoint_time), budget, side="right")) - 1
    out = {
        "far_sign": accuracy(ours.params[-1]),
        "async_sgd": accuracy(sgd.params[-1]),
        "trimmed_mean": accuracy(trimmed.params[max(within, 0)]) if within >= 0 else 0.1,
        "simulated_time": budget,
        "bits": {"far_sign": ours.bits_per_message + 32, "async_sgd": sgd.bits_per_message},
    }
    print(
        f"{args.attack}, {BYZANTINE} of {WORKERS} Byzantine, simulated time {budget:.0f}: "
        f"test accuracy FAR-SIGN {100 * out['far_sign']:.1f}%  async SGD "
        f"{100 * out['async_sgd']:.1f}%  trimmed mean (synchronous) "
        f"{100 * out['trimmed_mean']:.1f}%; bits per upload {out['bits']['far_sign']} vs "
        f"{out['bits']['async_sgd']}"
    )
    return out


if __name__ == "__main__":
    main()
