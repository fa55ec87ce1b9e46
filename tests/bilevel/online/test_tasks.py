"""The learned online tasks: streams replay exactly, drift as documented, and run under
every learner."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxopt_suite.bilevel import online as ob
from jaxopt_suite.bilevel import tasks
from jaxopt_suite.bilevel.online import tasks as online_tasks

T = 40


@pytest.fixture(scope="module")
def split():
    return tasks.load_split("digits")


def test_hyper_cleaning_stream_replays_and_walks_through_the_pool(split):
    task = online_tasks.online_hyper_cleaning(split, num_rounds=T, batch_size=32, segment=0.1)
    data = jax.jit(task.problem.round_data)
    first, again = data(jnp.int32(3)), data(jnp.int32(3))
    jax.tree.map(np.testing.assert_array_equal, first, again)
    n = split.x_train.shape[0]
    span = round(0.1 * n)
    for t in (0, T // 2, T - 1):
        (idx, inputs, _), (val_inputs, _) = data(jnp.int32(t))
        start = (t * n) // T
        # Every index lies in the round's segment of the pool (wrapping around).
        assert np.all((np.asarray(idx) - start) % n < span)
        np.testing.assert_array_equal(inputs, split.x_train[np.asarray(idx)])
        assert val_inputs.shape == (32, split.x_train.shape[1])


def test_hyper_cleaning_stream_walks_the_pool_past_int32_products():
    # t n passes 2^31 after 42950 of these rounds; the windows must still start at t n / T
    n, rounds = 50_000, 100_000
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(n, 2)).astype(np.float32), rng.integers(0, 2, n).astype(np.int32)
    pool = tasks.Split(x, y, x[:8], y[:8], x[:8], y[:8], num_classes=2, name="synthetic")
    task = online_tasks.online_hyper_cleaning(pool, num_rounds=rounds, batch_size=16, segment=0.01)
    data = jax.jit(task.problem.round_data)
    for t in (50_000, 90_000, rounds - 1):
        (idx, _, _), _ = data(jnp.int32(t))
        start = (t * n) // rounds  # Python integers: exact
        assert np.all((np.asarray(idx) - start) % n < round(0.01 * n)), t


@pytest.mark.parametrize("name", ["online_hyper_cleaning", "online_loss_tuning"])
def test_round_data_takes_a_python_int(split, name):
    # online_loss_tuning called t.astype: round_data(3) raised AttributeError
    task = getattr(online_tasks, name)(split, num_rounds=T, batch_size=16)
    expected = jax.jit(task.problem.round_data)(jnp.int32(3))
    jax.tree.map(np.testing.assert_array_equal, task.problem.round_data(3), expected)
    jax.tree.map(np.testing.assert_array_equal, task.problem.round_data(np.int64(3)), expected)


def test_hyper_cleaning_noise_rises_along_the_pool(split):
    task = online_tasks.online_hyper_cleaning(
        split, num_rounds=T, batch_size=256, corruption=(0.0, 1.0), segment=0.1
    )
    data = jax.jit(task.problem.round_data)

    def disagreement(rounds):
        wrong = []
        for t in rounds:
            (idx, _, labels), _ = data(jnp.int32(t))
            wrong.append(np.asarray(labels) != split.y_train[np.asarray(idx)])
        return np.mean(wrong)

    # Rounds 0-3 draw from the first ~20% of the pool (flip rate <= 0.2, a redraw keeps the
    # label with probability 1/10); the last rounds from the last ~20% (flip rate >= 0.8).
    # Means over ~1000 draws each: sd < 0.015, far from the 0.5 boundary.
    assert disagreement(range(4)) < 0.25
    assert disagreement(range(T - 5, T - 1)) > 0.6


def test_loss_tuning_majority_class_rotates(split):
    task = online_tasks.online_loss_tuning(
        split, num_rounds=T, batch_size=200, imbalance=50.0, label_noise=0.0
    )
    data = jax.jit(task.problem.round_data)
    k = split.num_classes
    majority = []
    for t in range(0, T, T // k):
        (_, labels), (_, val_labels) = data(jnp.int32(t))
        majority.append(int(np.bincount(np.asarray(labels), minlength=k).argmax()))
        # The validation batch is class-balanced.
        assert np.all(np.bincount(np.asarray(val_labels), minlength=k) == 200 // k)
    # The majority class at round t = 4j is class j. With imbalance 50 it has probability
    # 0.38 against 0.17 for each neighbour: in 200 draws ~76 vs ~35 (sd ~6), so the
    # batch's most frequent label is it.
    assert majority == list(range(k)), majority


def test_learned_tasks_run_under_every_learner(split):
    built = {
        name: getattr(online_tasks, name)(split, num_rounds=T, batch_size=64)
        for name in ("online_hyper_cleaning", "online_loss_tuning")
    }
    # Each learner on one task (both tasks covered); regret estimated on two of the runs.
    cases = [
        ("online_hyper_cleaning", ob.aobo(inner_lr=0.1, outer_lr=1.0, max_inner=5), True),
        ("online_loss_tuning", ob.fsobo(inner_lr=0.1, outer_lr=1.0), True),
        (
            "online_loss_tuning",
            ob.wobo(window=3, inner_lr=0.1, outer_lr=1.0, variant="single_loop"),
            False,
        ),
        (
            "online_hyper_cleaning",
            ob.oagd(window=3, inner_lr=0.1, outer_lr=1.0, neumann_alpha=0.1),
            False,
        ),
        ("online_loss_tuning", ob.sobow(window=3, inner_lr=0.1, outer_lr=1.0), False),
    ]
    for name, learner, charged in cases:
        task = built[name]
        oracle = None
        if charged:
            oracle = ob.implicit_oracle(task.problem, inner_lr=0.1, inner_steps=20, cg_steps=10)
        result = ob.run_online(
            task.problem,
            learner,
            task.x0,
            task.y0,
            T,
            oracle=oracle,
            regret_every=10,
            eval_fn=task.evaluate,
            eval_every=20,
        )
        assert result.status == ob.OK, (name, learner.name)
        if charged:
            assert result.estimated and np.isfinite(result.regret) and result.regret > 0
        accuracy = result.history["eval"]["val_accuracy"]
        assert accuracy.shape == (2,)
        # 40 rounds of 64 digits already beat chance (0.1) by far.
        assert accuracy[-1] > 0.5, (name, learner.name, accuracy)


def test_task_arguments_are_checked(split):
    with pytest.raises(ValueError, match="num_rounds must be >= 1"):
        online_tasks.online_hyper_cleaning(split, num_rounds=0)
    with pytest.raises(ValueError, match="corruption must lie in"):
        online_tasks.online_hyper_cleaning(split, num_rounds=5, corruption=(0.2, 1.5))
    with pytest.raises(ValueError, match="segment must lie in"):
        online_tasks.online_hyper_cleaning(split, num_rounds=5, segment=0.0)
    for corruption in ((0.2,), 0.3, (0.1, 0.5, 0.9), "ab"):
        with pytest.raises(ValueError, match=r"corruption must be a pair \(start, end\)"):
            online_tasks.online_hyper_cleaning(split, num_rounds=5, corruption=corruption)
    for imbalance in (0.5, float("inf")):
        with pytest.raises(ValueError, match="imbalance must be finite and >= 1"):
            online_tasks.online_loss_tuning(split, num_rounds=5, imbalance=imbalance)
    for cycles in (0.0, float("inf")):  # inf % k is NaN: every label class 0, no drift
        with pytest.raises(ValueError, match="cycles must be finite and > 0"):
            online_tasks.online_loss_tuning(split, num_rounds=5, cycles=cycles)
