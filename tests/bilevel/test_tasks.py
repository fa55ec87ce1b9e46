"""The offline tasks, and BROS's factorized path on a real model: same numbers, lean memory."""

import chex
import jax
import jax.numpy as jnp
import pytest

from jaxopt_suite import bilevel
from jaxopt_suite.bilevel import tasks


@pytest.fixture(scope="module")
def split():
    return tasks.load_split("digits", n_train=600, n_val=200)


def test_split_and_corruption(split):
    chex.assert_shape(split.x_train, (600, 64))
    chex.assert_shape(split.x_val, (200, 64))
    assert split.name == "digits" and split.num_classes == 10
    noisy = tasks.corrupt_labels(split.y_train, 0.5, 10, seed=0)
    changed = float((noisy != split.y_train).mean())
    # Re-drawn with probability 0.5, and a re-draw keeps the label 1 time in 10: 0.45,
    # binomial standard error sqrt(0.45 * 0.55 / 600) = 0.02.
    assert abs(changed - 0.45) < 4 * 0.0203
    with pytest.raises(ValueError, match=r"corruption must lie in \[0, 1\]"):
        tasks.corrupt_labels(split.y_train, 1.5, 10, seed=0)
    with pytest.raises(ValueError, match="n_train=5000 and n_val=10 do not fit"):
        tasks.load_split("digits", n_train=5000, n_val=10)
    with pytest.raises(ValueError, match="dataset must be"):
        tasks.load_split("cifar")


@pytest.mark.parametrize(
    "build",
    [
        lambda s: tasks.hyper_cleaning(s, hidden=(16,), batch_size=8),
        lambda s: tasks.data_mixture(s, batch_size=8),
        lambda s: tasks.hyper_representation(s, backbone=(16, 8), batch_size=8),
    ],
    ids=["hyper_cleaning", "data_mixture", "hyper_representation"],
)
def test_tasks_run_under_every_kind_of_solver(build, split):
    task = build(split)
    for solver in (
        bilevel.ma_soba(inner_lr=0.05, outer=0.01),
        bilevel.bros(rank=4, inner_lr=0.01, outer=0.01, factorized=True, exact_small_leaves=True),
    ):
        result = bilevel.run(
            task.problem, solver, task.x0, task.y0, jax.random.key(0), 20, eval_fn=task.evaluate
        )
        assert result.status == bilevel.OK
        for name in ("val_accuracy", "test_accuracy"):
            values = result.history[name]
            assert bool(jnp.all((values >= 0) & (values <= 1)))


@pytest.mark.parametrize("bad", [0, 2.5])
def test_batch_size_is_checked(split, bad):
    with pytest.raises(ValueError, match="batch_size must be a Python int >= 1"):
        tasks.hyper_cleaning(split, batch_size=bad)


def test_factorized_step_equals_the_merged_step(split):
    task = tasks.hyper_cleaning(split, hidden=(32, 32), batch_size=16)
    batches = task.problem.sample(jax.random.key(1))
    states = []
    for factorized in (True, False):
        solver = bilevel.bros(
            rank=4, inner_lr=0.05, outer=1.0, factorized=factorized, exact_small_leaves=True
        )
        state = solver.init(task.problem, task.x0, task.y0, jax.random.key(0))
        states.append(jax.jit(solver.step)(state, batches))
    chex.assert_trees_all_close(states[0].y, states[1].y, rtol=1e-5, atol=1e-6)
    chex.assert_trees_all_close(states[0].v, states[1].v, rtol=1e-4, atol=1e-6)
    chex.assert_trees_all_close(states[0].x, states[1].x, rtol=1e-4, atol=1e-6)


def test_bros_step_has_no_lower_level_sized_temporaries(split):
    """The point of BROS: XLA's temporaries of one donated step stay well below one copy
    of the largest weight (MA-SOBA needs several copies of y), at a width where y
    dominates the activations."""
    task = tasks.hyper_cleaning(split, hidden=(1024, 1024), batch_size=16)
    y_bytes = sum(leaf.size * 4 for leaf in jax.tree.leaves(task.y0))
    largest = max(leaf.size * 4 for leaf in jax.tree.leaves(task.y0))
    batches = task.problem.sample(jax.random.key(1))

    def temp_bytes(solver):
        state = solver.init(task.problem, task.x0, task.y0, jax.random.key(0))
        compiled = jax.jit(solver.step, donate_argnums=0).lower(state, batches).compile()
        return compiled.memory_analysis().temp_size_in_bytes

    bros = bilevel.bros(rank=8, inner_lr=0.01, outer=1.0, factorized=True, exact_small_leaves=True)
    ma_soba = bilevel.ma_soba(inner_lr=0.01, outer=1.0)
    assert temp_bytes(bros) < 0.5 * largest
    assert temp_bytes(ma_soba) > 2 * y_bytes


@pytest.mark.parametrize("bad", [(0,), (8, 0), (8.5,), ("8",), 8])
@pytest.mark.parametrize(
    "build",
    [
        lambda s, w: tasks.hyper_cleaning(s, hidden=w, batch_size=8),
        lambda s, w: tasks.data_mixture(s, hidden=w, batch_size=8),
        lambda s, w: tasks.hyper_representation(s, backbone=w, batch_size=8),
    ],
    ids=["hyper_cleaning", "data_mixture", "hyper_representation"],
)
def test_layer_widths_are_checked(split, build, bad):
    # a zero width ran with status OK and a zero hypergradient; 8.5, "8" or 8 failed as shapes
    with pytest.raises(ValueError, match=r"(hidden|backbone) must be a tuple of layer widths"):
        build(split, bad)
