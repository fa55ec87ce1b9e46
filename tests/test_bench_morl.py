"""The morl suite's pairing of BC(P)'s training keys with the DICE methods'."""

import jax
import numpy as np

from benchmarks import morl
from jaxopt_suite.rl import aetdice as A
from jaxopt_suite.rl.aetdice import utilities as U


def _largest_gap(a, b) -> float:
    """The largest absolute difference between two parameter trees of one structure."""
    gaps = jax.tree.map(lambda x, y: float(np.max(np.abs(x - y))), a, b)
    return max(jax.tree.leaves(gaps))


def test_bc_is_fitted_with_the_keys_the_dice_methods_fit_each_objective_with():
    """At a huge ``alpha`` OptiDICE's weights are nearly flat (its largest ratio within
    ``1e-3`` of 1) and its weighted cloning is BC(P)'s fit: with paired keys (same initial
    network, same minibatches) the two policies agree; BC(P)'s one network from the key itself
    does not."""
    data, _ = morl.normalised(morl.dataset("mo_balance", morl.TASKS["mo_balance"])[0])
    config = A.DiceConfig(iterations=200, batch_size=64, hidden=(16,), policy_hidden=(16,),
                          alpha=1e4, behaviour_conditioned=True)  # fmt: skip
    objectives = [U.ser(U.linear(w)) for w in ((0.3, 0.7), (0.7, 0.3))]
    key = jax.random.key(3)
    paired = morl._paired_bc(data, objectives, key, config)
    dice = A.train_optidice(data, objectives, key, config, discount=0.9)
    single = A.train_bc(data, objectives, key, config)
    for ours, theirs in zip(paired, dice, strict=True):
        assert float(np.max(np.abs(theirs.metrics["ratio_max"] - 1.0))) < 1e-3
        assert _largest_gap(ours.params, theirs.params) < 1e-3
    assert _largest_gap(single[0].params, dice[0].params) > 0.1
