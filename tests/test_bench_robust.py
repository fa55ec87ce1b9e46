"""The robust suite's iterate average (no data, no simulation)."""

import jax.numpy as jnp
import numpy as np

from benchmarks import robust


def _runner():
    runner = object.__new__(robust._Runner)
    # "accuracy" of a parameter vector: its first entry, so the average is visible
    runner._accuracy = lambda flats: flats[:, 0]
    return runner


def test_tail_accuracy_scores_the_mean_of_the_second_half_of_the_checkpoints():
    checkpoints = jnp.asarray([[100.0], [50.0], [2.0], [3.0], [10.0], [-3.0]])
    np.testing.assert_allclose(_runner().tail_accuracy(checkpoints), 10.0 / 3.0, rtol=1e-6)
    # an odd count keeps the middle checkpoint in the second half
    np.testing.assert_allclose(_runner().tail_accuracy(checkpoints[:5]), 5.0, rtol=1e-6)
    np.testing.assert_allclose(_runner().tail_accuracy(checkpoints[:1]), 100.0, rtol=1e-6)


def test_mean_tail_uses_every_key_when_repeated():
    assert robust._mean_tail({"tail_accuracy": 0.5}) == 0.5
    row = {"tail_accuracy": 0.5, "tail_accuracy_seeds": [0.5, 0.7, 0.9]}
    np.testing.assert_allclose(robust._mean_tail(row), 0.7)
