"""Observation statistics against numpy (an empty batch changes nothing), the Gaussian
policy's log-probability, KL and entropy against closed forms and samples, and the rollout
statistics' check of the cost limit."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxopt_suite.rl.networks import (
    GaussianPolicy,
    gaussian_entropy,
    gaussian_kl,
    gaussian_log_prob,
)
from jaxopt_suite.rl.normalization import init_stats, normalize, update_stats
from jaxopt_suite.rl.rollout import Transition, episode_stats


def test_running_stats_match_numpy_over_several_batches(key):
    batches = [
        jax.random.normal(jax.random.fold_in(key, i), (3, 5 + i, 4)) * (i + 1) + i for i in range(4)
    ]
    stats = init_stats(4)
    update = jax.jit(update_stats)
    for batch in batches:
        stats = update(stats, batch)
    everything = np.concatenate([np.asarray(b).reshape(-1, 4) for b in batches])
    np.testing.assert_allclose(stats.mean, everything.mean(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(stats.m2 / (stats.count - 1), everything.var(0, ddof=1), rtol=1e-4)
    z = normalize(stats, jnp.asarray(everything), clip=100.0)
    np.testing.assert_allclose(np.asarray(z).mean(0), 0.0, atol=1e-4)
    np.testing.assert_allclose(np.asarray(z).std(0, ddof=1), 1.0, rtol=1e-4)
    # before any data it is the identity
    x = jnp.arange(8.0).reshape(2, 4)
    np.testing.assert_allclose(normalize(init_stats(4), x), x)


def test_gaussian_policy_distribution_pieces(key):
    policy = GaussianPolicy(action_size=3)
    params = policy.init(key, jnp.zeros((1, 5)))
    mean, log_std = policy.apply(params, jnp.ones((7, 5)))
    assert mean.shape == log_std.shape == (7, 3)
    np.testing.assert_allclose(log_std, -0.5)
    # log-probability against scipy's formula by hand
    a = jax.random.normal(key, (7, 3))
    std = np.exp(np.asarray(log_std))
    ref = (-0.5 * ((np.asarray(a) - np.asarray(mean)) / std) ** 2 - np.log(std)
           - 0.5 * np.log(2 * np.pi)).sum(-1)  # fmt: skip
    np.testing.assert_allclose(gaussian_log_prob(mean, log_std, a), ref, rtol=1e-5)
    # KL(p || q) is the mean of log p - log q over samples of p (Monte Carlo, 4 sd)
    mp, lp = jnp.array([[0.3, -0.2]]), jnp.array([[-0.4, 0.1]])
    mq, lq = jnp.array([[0.0, 0.1]]), jnp.array([[-0.2, -0.1]])
    n = 200_000
    x = mp + jnp.exp(lp) * jax.random.normal(jax.random.fold_in(key, 1), (n, 2))
    diff = gaussian_log_prob(jnp.broadcast_to(mp, x.shape), jnp.broadcast_to(lp, x.shape), x)
    diff = diff - gaussian_log_prob(jnp.broadcast_to(mq, x.shape), jnp.broadcast_to(lq, x.shape), x)
    kl = float(gaussian_kl(mp, lp, mq, lq)[0])
    assert abs(float(diff.mean()) - kl) <= 4 * float(diff.std()) / np.sqrt(n)
    np.testing.assert_allclose(gaussian_kl(mp, lp, mp, lp), 0.0, atol=1e-7)
    # entropy: -E[log p]
    ent = float(gaussian_entropy(lp)[0])
    logp = gaussian_log_prob(jnp.broadcast_to(mp, x.shape), jnp.broadcast_to(lp, x.shape), x)
    assert abs(-float(logp.mean()) - ent) <= 4 * float(logp.std()) / np.sqrt(n)


def test_an_empty_batch_leaves_the_running_stats_unchanged():
    stats = update_stats(init_stats(2), jnp.arange(6.0).reshape(3, 2))
    for empty in (jnp.zeros((0, 2)), jnp.zeros((4, 0, 2))):
        for update in (update_stats, jax.jit(update_stats)):
            after = update(stats, empty)
            for a, b in zip(after, stats, strict=True):
                np.testing.assert_array_equal(a, b)


def test_episode_stats_check_a_concrete_cost_limit():
    """As envs.episode_statistics: a NaN limit would count every episode as safe."""
    fields = {name: jnp.ones((2, 3)) for name in Transition._fields}
    batch = Transition(**fields | {"episode_max_cost": jnp.array([[0.0, 1.0, 2.0]] * 2)})
    assert float(episode_stats(batch, 1.5).violation) == pytest.approx(1 / 3)
    for limit in (float("nan"), -0.1):
        with pytest.raises(ValueError, match=r"cost_limit must be finite and >= 0"):
            episode_stats(batch, limit)
    # traced (a vmapped limit) passes unchecked
    violation = jax.vmap(lambda w: episode_stats(batch, w).violation)(jnp.array([0.5, 1.5]))
    np.testing.assert_allclose(violation, [2 / 3, 1 / 3])


def test_episode_stats_count_a_finished_nan_max_cost_as_no_safe_episode():
    fields = {name: jnp.ones((1, 2)) for name in Transition._fields}
    batch = Transition(**fields | {"episode_max_cost": jnp.array([[2.0, jnp.nan]])})
    assert np.isnan(float(episode_stats(batch, 1.0).violation))  # was 0.5
    unfinished = batch._replace(episode_done=jnp.array([[1.0, 0.0]]))
    assert float(episode_stats(unfinished, 1.0).violation) == 1.0


def test_progress_bar_averages_the_seeds_of_an_iteration():
    from jaxopt_suite.rl.training import ProgressBar

    bar = ProgressBar(3)
    shown = []
    bar._bar.update = lambda task, completed, status: shown.append((completed, status))
    # under vmap the callback runs once per seed, with that seed's scalars
    for iteration, returns in ((0, (1.0, 3.0)), (1, (-2.0, 4.0, 7.0))):
        for value in returns:
            bar(np.int32(iteration), {"episode_return": value, "episode_max_cost": 0.5})
    assert shown[1] == (1, "EpRet 2  EpMaxCost 0.5")  # the mean of seeds 1 and 3
    assert shown[-1] == (2, "EpRet 3  EpMaxCost 0.5")  # (-2 + 4 + 7) / 3, not the last seed
