"""AETDICE against SER-DICE and preference-conditioned BC on the balance task: a risk-averse
(Tchebycheff) utility of the whole return, under ESR.

    python examples/aetdice_balance.py            # 6000 training steps
    python examples/aetdice_balance.py --quick    # 2000
    python examples/aetdice_balance.py --save /tmp/balance.npz   # also store the dataset

Every step pays one unit to one of two objectives: the chosen one, or with probability 0.3 a
random one. The utility ``min(G_0, G_1) / 2`` of the episode's return wants both objectives
even in every episode (ESR), so after a slip the policy must lean the other way: it needs the
return so far, which the Markov methods do not see. AETDICE learns a policy of the augmented
state ``(s, x_t, t)`` from the same offline data; its value is compared with the exact optimum.
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np

import envs
from jaxopt_suite.rl import aetdice as A
from jaxopt_suite.rl.aetdice import exact

HORIZON, SLIP = 10, 0.3


def behaviour(preference, observation, key):
    """The data's policy: objective 0 with probability ``preference[0]``."""
    del observation
    choose_left = jax.random.bernoulli(key, preference[0] / jnp.sum(preference))
    return jnp.where(choose_left, 0.5, -0.5)[None]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=6000)
    parser.add_argument("--save", default=None, help="write the dataset to this .npz path")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    env = envs.BalanceTask(slip=SLIP)
    data = envs.collect(
        env, behaviour, envs.preference_grid(2, 11, "wide"), key=jax.random.key(0),
        episodes_per_preference=40, horizon=HORIZON, action_noise=0.2,
        metadata={"coverage": "wide", "policy": "scripted"},
    )  # fmt: skip
    if args.save:
        envs.save(data, args.save)
    objective = A.esr(A.tchebycheff(m=2))
    config = A.DiceConfig(
        iterations=2000 if args.quick else args.iterations, batch_size=256, hidden=(64, 64),
        policy_hidden=(64, 64), alpha=0.02,
    )  # fmt: skip
    best, _ = exact.optimum(objective, HORIZON, SLIP)
    markov = max(exact.value(objective, p, HORIZON, SLIP) for p in np.linspace(0, 1, 101))
    print(f"optimum {best:.3f}; best Markov policy {markov:.3f}")
    out = {"optimum": best, "markov": markov}
    for method in ("aetdice", "serdice", "bc"):
        kwargs = {"discount": 1 - 1 / HORIZON} if method == "serdice" else {}
        policy = A.METHODS[method](data, objective, jax.random.key(1), config, **kwargs)
        value, returns, deterministic = A.evaluate(
            env, policy, objective, jax.random.key(2), episodes=2000
        )
        out[method] = value
        print(f"{method:8s} ESR {value:.3f}  mean return {np.asarray(returns.mean(0)).round(2)}"
              f"  ({'deterministic' if deterministic else 'sampled'} actions)")  # fmt: skip
    return out


if __name__ == "__main__":
    main()
