"""Padded step rows: the DICE training samples only the real ones and leaves the padding out of
its statistics, so datasets of different step counts share one compiled scan."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import envs
from jaxopt_suite.rl import aetdice as A
from jaxopt_suite.rl.aetdice import aetdice, dice, policy
from jaxopt_suite.rl.aetdice import utilities as U

CONFIG = A.DiceConfig(
    iterations=150, batch_size=32, hidden=(16,), policy_hidden=(16,), alpha=0.1,
    behaviour_conditioned=True,
)  # fmt: skip


def _behaviour(preference, observation, key):
    del observation
    return jnp.where(jax.random.bernoulli(key, preference[0] / jnp.sum(preference)), 0.5, -0.5)[
        None
    ]


@functools.cache
def _dataset():
    return envs.collect(
        envs.BalanceTask(slip=0.3), _behaviour, envs.preference_grid(2, 3, "wide"),
        key=jax.random.key(0), episodes_per_preference=6, horizon=6, action_noise=0.2,
    )  # fmt: skip


def _ended_early(data, episode: int, last: int):
    """``data`` with ``episode`` terminated at step ``last``: the steps after it become
    padding (the dataset's rules: zero rewards, actions and terminals, the final observation
    repeated)."""
    arrays = {name: np.array(getattr(data, name)) for name in envs.offline.ARRAY_FIELDS}
    final = arrays["next_observations"][episode, last]
    arrays["terminals"][episode, last] = 1.0
    for name in ("terminals", "mask", "rewards", "actions"):
        arrays[name][episode, last + 1 :] = 0.0
    arrays["observations"][episode, last + 1 :] = final
    arrays["next_observations"][episode, last + 1 :] = final
    return envs.validate_dataset(envs.OfflineDataset(**arrays, metadata=data.metadata))


def _largest_gap(a, b) -> float:
    """The largest absolute difference between two trees of one structure."""
    gaps = jax.tree.map(
        lambda x, y: float(np.max(np.abs(np.asarray(x) - np.asarray(y)), initial=0.0)), a, b
    )
    return max(jax.tree.leaves(gaps))


def _padded_with(data, problem, rows, value):
    padded, (padded_problem,) = policy.pad_steps(data, [problem], rows)
    count = int(padded.count)

    def poison(array):
        return None if array is None else array.at[count:].set(value)

    steps = ("features", "next_features", "actions", "continues", "labels", "policy_features")
    padded = padded._replace(**{f: poison(getattr(padded, f)) for f in steps})
    return padded, padded_problem._replace(rewards=poison(padded_problem.rewards))


@functools.cache
def _fit():
    """One jitted fit for the tests below (a new jit of ``make_fit`` compiles anew)."""
    return jax.jit(dice.make_fit(CONFIG, 1))


@functools.cache
def _plain():
    """The dataset with episode 0 ended at step 2, its augmented rows and ESR Tchebycheff
    problem, and the fit on the real rows alone (key 4)."""
    raw = _ended_early(_dataset(), 0, 2)
    data = aetdice.augmented_data(raw)
    problem = aetdice.aetdice_problem(raw, U.esr(U.tchebycheff(m=2)))
    return raw, data, problem, _fit()(data, problem, jax.random.key(4))


def test_padded_rows_train_as_the_real_ones_alone_and_are_never_read():
    """The same fit on the real rows, on them padded with zeros and on them padded with NaN:
    NaN anywhere in the padding would reach the parameters if a padded row were sampled or
    entered a statistic; the rest agrees up to float32 rounding of the statistics."""
    raw, data, problem, plain = _plain()
    rows = data.features.shape[0]
    assert rows < raw.mask.size  # the early end removed rows
    fit, key = _fit(), jax.random.key(4)
    zeros = fit(*_padded_with(data, problem, rows + 50, 0.0), key)
    nans = fit(*_padded_with(data, problem, rows + 50, jnp.nan), key)
    leaves = jax.tree.leaves(nans)
    assert all(bool(jnp.all(jnp.isfinite(leaf))) for leaf in leaves)
    assert _largest_gap(zeros, nans) == 0.0
    assert _largest_gap(plain.params, zeros.params) < 1e-4
    np.testing.assert_allclose(plain.metrics["loss"], zeros.metrics["loss"], rtol=1e-4, atol=1e-5)


def test_separate_policy_features_are_read_by_the_policy_alone_and_padded():
    """A policy input equal to nu's fits exactly as without one; a policy input of the
    observation alone changes only the policy (nu and the ratios read the augmented state),
    and its padding, NaN, is never read."""
    raw, data, problem, plain = _plain()
    fit, key = _fit(), jax.random.key(4)
    same = fit(data._replace(policy_features=data.features), problem, key)
    assert _largest_gap(plain, same) < 1e-6
    observations = policy.step_rows(raw.observations, policy.flatten_steps(raw.mask))
    markov = data._replace(policy_features=observations)
    alone = fit(markov, problem, key)
    assert _largest_gap(plain.params.nu, alone.params.nu) < 1e-6
    assert _largest_gap(plain.metrics["loss"], alone.metrics["loss"]) < 1e-6
    assert {leaf.shape for leaf in jax.tree.leaves(alone.params.policy)} != {
        leaf.shape for leaf in jax.tree.leaves(plain.params.policy)
    }
    rows = data.features.shape[0]
    nans = fit(*_padded_with(markov, problem, rows + 50, jnp.nan), key)
    assert all(bool(jnp.all(jnp.isfinite(leaf))) for leaf in jax.tree.leaves(nans))
    assert _largest_gap(alone.params, nans.params) < 1e-4


def test_statistics_of_padded_rows_are_those_of_the_real_rows():
    values = jax.random.normal(jax.random.key(1), (37, 3)) * jnp.array([[1.0, 5.0, 0.1]]) + 2.0
    padded = jnp.concatenate([values, jnp.full((27, 3), 1e6)])
    mean, std = dice.row_moments(padded, jnp.asarray(37))
    np.testing.assert_allclose(mean, values.mean(0), rtol=1e-5)
    np.testing.assert_allclose(std, values.std(0), rtol=1e-5)


def test_datasets_of_different_step_counts_share_one_compiled_scan():
    config = dataclasses.replace(CONFIG, iterations=7)  # one no other test compiles
    objective = U.ser(U.linear([0.5, 0.5]))
    full, cut = _dataset(), _ended_early(_dataset(), 1, 3)
    assert int(np.sum(cut.mask)) < int(np.sum(full.mask))
    for data in (full, cut):
        A.train_optidice(data, objective, jax.random.key(0), config, discount=0.9)
    assert policy._fit(config, 1, True, False)._cache_size() == 1


def test_padding_rows_is_checked():
    data = aetdice.augmented_data(_dataset())
    problem = aetdice.aetdice_problem(_dataset(), U.ser(U.linear([0.5, 0.5])))
    rows = data.features.shape[0]
    with pytest.raises(ValueError, match="rows must be >="):
        policy.pad_steps(data, [problem], rows - 1)
    padded, _ = policy.pad_steps(data, [problem], rows)
    with pytest.raises(ValueError, match="padded already"):
        policy.pad_steps(padded, [problem], rows)
    assert policy.padded_rows(1) == policy.MIN_PADDED_ROWS
    assert policy.padded_rows(5000) == 8192 and policy.padded_rows(8192) == 8192
