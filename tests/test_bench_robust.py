"""The robust suite's iterate average (no data, no simulation)."""

import jax.numpy as jnp
import numpy as np

from benchmarks import robust
from jaxopt_suite.robust.simulator import Trace


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


def test_an_equal_time_run_ends_at_the_last_round_within_the_budget(monkeypatch):
    # the row ended at the last checkpoint (every rounds // 20 rounds) within the budget,
    # up to that many rounds early: here round 30 of the 31 the budget holds
    def fake_run_sync(loss, params, shards, cluster, *, rounds, record_every, **kwargs):
        assert record_every == 1
        count = jnp.arange(1, rounds + 1, dtype=jnp.float32)
        # clock t after round t; parameters (and so "accuracy") t after round t
        return Trace(
            time=count,
            worker=-jnp.ones(rounds),
            staleness=count * 0,
            compute_time=count,
            params=count[:, None],
            checkpoint_time=count,
            checkpoint_step=count.astype(jnp.int32),
            bits_per_message=32,
        )

    monkeypatch.setattr(robust, "run_sync", fake_run_sync)
    runner = _runner()
    runner.loss = runner.params = runner.shards = None
    runner.cluster = lambda fraction: None
    runner.tail_accuracy = lambda checkpoints: float(checkpoints[-1, 0])
    row = runner.sync("mean", 0.0, "none", 0.1, rounds=60, until=31.5)
    assert row["rounds_within_budget"] == 31
    assert row["final_accuracy"] == 31.0
    assert row["updates"] == [*range(3, 31, 3), 31]
    assert row["time"][-1] == 31.0
    assert runner.sync("mean", 0.0, "none", 0.1, rounds=60, until=0.5)["final_accuracy"] == 0.1
