"""AETDICE and its baselines end to end on the balance task, where the optimum is known."""

import dataclasses
import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import envs
from jaxopt_suite.rl import aetdice as A
from jaxopt_suite.rl.aetdice import exact
from jaxopt_suite.rl.aetdice import utilities as U

HORIZON, SLIP = 10, 0.3
CONFIG = A.DiceConfig(
    iterations=3000, batch_size=256, hidden=(64, 64), policy_hidden=(64, 64), alpha=0.02
)


def _behaviour(preference, observation, key):
    """Chooses objective 0 with probability preference[0] (the action's sign decides)."""
    del observation
    choose_left = jax.random.bernoulli(key, preference[0] / jnp.sum(preference))
    return jnp.where(choose_left, 0.5, -0.5)[None]


@functools.cache
def _dataset():
    return envs.collect(
        envs.BalanceTask(slip=SLIP), _behaviour, envs.preference_grid(2, 11, "wide"),
        key=jax.random.key(0), episodes_per_preference=40, horizon=HORIZON, action_noise=0.2,
    )  # fmt: skip


def _table(policy):
    """The policy's deterministic choice ``P(choose 0 | t, k)`` on every augmented state (a
    Markov policy's on the observation alone)."""
    features = np.array(
        [[1.0, k, t - k, t / HORIZON] for t in range(HORIZON) for k in range(HORIZON + 1)],
        np.float32,
    )
    if policy.features == "timed":
        features = features[:, [0, 3]]
    elif policy.features == "observation":
        features = features[:, :1]
    actions = jax.jit(policy.act)(jnp.asarray(features))
    return (np.asarray(actions[:, 0]) > 0).astype(float).reshape(HORIZON, HORIZON + 1)


ESR_OBJECTIVES = {
    "tchebycheff": U.esr(U.tchebycheff(m=2)),
    "threshold": U.esr(U.threshold([4.0, 4.0])),
}


@functools.cache
def _trained(name):
    return A.train_aetdice(_dataset(), ESR_OBJECTIVES[name], jax.random.key(1), CONFIG)


@pytest.mark.parametrize("name", sorted(ESR_OBJECTIVES))
def test_aetdice_reaches_the_esr_optimum_that_markov_methods_cannot(name):
    objective = ESR_OBJECTIVES[name]
    best, _ = exact.optimum(objective, HORIZON, SLIP)
    policy = _trained(name)
    assert policy.features == "augmented"
    achieved = exact.value(objective, _table(policy), HORIZON, SLIP)
    assert achieved >= best - 0.02 * abs(best)
    # no Markov policy of this task (its observation is constant) comes close
    markov = max(exact.value(objective, p, HORIZON, SLIP) for p in np.linspace(0, 1, 101))
    assert achieved > markov + 0.5 * (best - markov)


def test_rollouts_agree_with_the_exact_value():
    objective = ESR_OBJECTIVES["tchebycheff"]
    policy = _trained("tchebycheff")
    exact_value = exact.value(objective, _table(policy), HORIZON, SLIP)
    returns = A.rollout_returns(
        envs.BalanceTask(slip=SLIP), policy, jax.random.key(2), episodes=4000,
        deterministic=True,
    )  # fmt: skip
    chex.assert_shape(returns, (4000, 2))
    chex.assert_trees_all_close(returns.sum(-1), jnp.full((4000,), float(HORIZON)))
    values = objective.inner.value(returns)
    standard_error = float(jnp.std(values)) / np.sqrt(4000)
    assert float(jnp.mean(values)) == pytest.approx(exact_value, abs=5 * standard_error)


@pytest.mark.slow  # 31 s of a make-test run
def test_linear_utility_aetdice_matches_linear_optidice():
    """For a linear utility SER = ESR and AETDICE solves OptiDICE's problem: both reach the
    optimum (always choose objective 1) within the noise of the learned policies. The
    ``morl`` benchmark's linear-utility target measures the same, over several training
    keys on the balance and Brax tasks; run this with ``pytest -m slow``."""
    objective = U.ser(U.linear([0.3, 0.7]))
    best, _ = exact.optimum(objective, HORIZON, SLIP)
    env = envs.BalanceTask(slip=SLIP)
    values = {}
    for method in ("aetdice", "optidice"):
        kwargs = {"discount": 1 - 1 / HORIZON} if method == "optidice" else {}
        policy = A.METHODS[method](_dataset(), objective, jax.random.key(3), CONFIG, **kwargs)
        values[method], _, _ = A.evaluate(env, policy, objective, jax.random.key(4),
                                          episodes=2000)  # fmt: skip
    # one step's utility is 0.3 or 0.7, so the standard error of a 2000-episode mean is
    # below 0.4 * sqrt(10 / 4 / 2000) = 0.015
    for value in values.values():
        assert value >= 0.95 * best
    assert values["aetdice"] == pytest.approx(values["optidice"], abs=5 * 0.015 * np.sqrt(2))


def test_mass_multiplier_holds_the_ratios_mean_at_the_bound():
    """Every balance episode runs to the horizon, so the flow gives the ratios mass exactly 1
    (``c_1 = 1``). Without the mass bound the learned ratios' batch mean is far above it at
    the end of training; with it (the default) it is 1 within 0.05, a band at least four
    standard errors wide (from the batch means of ten blocks of 100 iterations). The drift
    without the bound is shown under the accumulated anchor of the rewards."""
    tail = 1000
    with_bound = _trained("tchebycheff").metrics
    assert float(jnp.min(with_bound["mass"])) >= 0.0
    assert float(with_bound["mass"][-1]) > 0.1  # the bound binds
    blocks = np.asarray(with_bound["ratio_mean"][-tail:]).reshape(10, -1).mean(axis=1)
    se = blocks.std(ddof=1) / np.sqrt(blocks.size)
    assert 4 * se < 0.05
    assert abs(blocks.mean() - 1.0) < 0.05
    config = dataclasses.replace(CONFIG, mass_constraint=False)
    without = A.train_aetdice(_dataset(), ESR_OBJECTIVES["tchebycheff"], jax.random.key(1),
                              config, telescoping="accumulated")  # fmt: skip
    np.testing.assert_array_equal(without.metrics["mass"], 0.0)
    assert float(jnp.mean(without.metrics["ratio_mean"][-tail:])) > 1.3


def test_markov_policy_extraction_clones_the_ratios_onto_the_observation():
    """``markov_policy``: the ratios of the augmented state, cloned into a policy of the
    observation alone. Under the linear utility (0.3, 0.7) the best policy always chooses
    objective 1, a Markov one; the data's behaviours choose it half the time, so an
    unweighted cloning would not. (Rollouts of a Markov policy: the aetdice example's test,
    which evaluates BC.)"""
    objective = U.ser(U.linear([0.3, 0.7]))
    policy = A.train_aetdice(_dataset(), objective, jax.random.key(3), CONFIG, markov_policy=True)
    assert policy.features == "observation"
    chex.assert_shape(policy.feature_mean, (1,))
    table = _table(policy)
    np.testing.assert_array_equal(table, 0.0)
    best, _ = exact.optimum(objective, HORIZON, SLIP)
    assert exact.value(objective, table, HORIZON, SLIP) >= 0.95 * best
    with pytest.raises(ValueError, match="episodes must be an integer >= 1, got 0"):
        A.evaluate(envs.BalanceTask(slip=SLIP), policy, objective, jax.random.key(4), episodes=0)


def test_evaluation_randomises_only_where_the_first_batch_shows_it_pays():
    """BC(P) at equal weights picks each objective half the time; its mode always picks one.
    Under SER Tchebycheff sampling is worth far more, and ``evaluate`` samples. Under the
    linear utility with equal weights every step pays exactly 1 whatever the action, the two
    ways of acting tie, and the tie goes to the mode."""
    config = dataclasses.replace(CONFIG, iterations=1500, behaviour_conditioned=True)
    env = envs.BalanceTask(slip=SLIP)
    fair = U.ser(U.tchebycheff([1.0, 1.0]))
    policy = A.train_bc(_dataset(), fair, jax.random.key(9), config)
    value, _, deterministic = A.evaluate(env, policy, fair, jax.random.key(10), episodes=500)
    assert not deterministic
    # sampling at 50/50 (slip aside) gives each objective 5 in expectation, the mode at most
    # 0.15 * 10 = 1.5 to the objective it neglects
    assert value > 4.0
    flat = U.ser(U.linear([1.0, 1.0]))
    value, returns, deterministic = A.evaluate(env, policy, flat, jax.random.key(11),
                                               episodes=500)  # fmt: skip
    assert deterministic
    assert value == pytest.approx(HORIZON)
    np.testing.assert_allclose(returns.sum(-1), HORIZON)


def test_a_batch_of_preferences_trains_in_one_call():
    objectives = [U.esr(U.tchebycheff([w, 1 - w])) for w in (0.3, 0.5, 0.7)]
    config = A.DiceConfig(iterations=200, batch_size=64, hidden=(32,), policy_hidden=(32,))
    policies = A.train_aetdice(_dataset(), objectives, jax.random.key(5), config)
    assert len(policies) == 3
    chex.assert_shape(policies[0].metrics["loss"], (200,))
    leaves = [jax.tree.leaves(p.params)[0] for p in policies]
    assert not np.allclose(leaves[0], leaves[1])
    bc = A.train_bc(_dataset(), objectives, jax.random.key(6), config)
    chex.assert_trees_all_close(bc[0].label, jnp.array([0.3, 0.7]))


def test_behaviour_conditioned_policies_act_at_the_utility_weights():
    """Conditioned on the behaviour preference, the fitted policy keeps the behaviours'
    actions apart (preference (1, 0) chose objective 0 in every data episode, (0, 1) never;
    under equal weights every action is worth the same, so the ratios are flat), and it acts at
    the objective's normalised weights, where it reaches the linear optimum. BC(P) is the same
    fit unweighted. The value is the exact one of the policy's deterministic table (the linear
    optimum is deterministic); rollouts of a conditioned policy are
    test_evaluation_randomises_only_where_the_first_batch_shows_it_pays's."""
    config = dataclasses.replace(CONFIG, iterations=1500, behaviour_conditioned=True)
    for method in ("aetdice", "optidice", "bc"):
        kwargs = {"discount": 1 - 1 / HORIZON} if method == "optidice" else {}
        train = functools.partial(A.METHODS[method], _dataset(), key=jax.random.key(7),
                                  config=config, **kwargs)  # fmt: skip
        even = train(U.ser(U.linear([1.0, 1.0])))
        chex.assert_trees_all_close(even.label, jnp.array([0.5, 0.5]))
        for label, side in (([1.0, 0.0], 1.0), ([0.0, 1.0], 0.0)):
            at = dataclasses.replace(even, label=jnp.asarray(label))
            np.testing.assert_array_equal(_table(at), side)
        objective = U.ser(U.linear([1.8, 0.2]))
        tilted = train(objective)
        chex.assert_trees_all_close(tilted.label, jnp.array([0.9, 0.1]))
        best, _ = exact.optimum(objective, HORIZON, SLIP)
        assert exact.value(objective, _table(tilted), HORIZON, SLIP) >= 0.95 * best
    with pytest.raises(ValueError, match="a label is given exactly for a behaviour-cond"):
        dataclasses.replace(tilted, label=None)
    fit = A.dice.make_fit(config, 1)
    unlabelled = A.aetdice.augmented_data(_dataset())._replace(labels=None)
    problem = A.aetdice.aetdice_problem(_dataset(), objective)
    with pytest.raises(ValueError, match=r"behaviour_conditioned=True needs the data's behav"):
        fit(unlabelled, problem, jax.random.key(0))


def test_behaviour_labels_are_normalised_like_the_weights_they_act_at():
    data = _dataset()
    scaled = data._replace(preferences=3.0 * np.asarray(data.preferences))
    labels = A.aetdice.augmented_data(scaled).labels
    chex.assert_trees_all_close(labels, A.aetdice.augmented_data(data).labels, atol=1e-6)
    chex.assert_trees_all_close(labels.sum(-1), jnp.ones(labels.shape[0]), atol=1e-6)


def test_bad_inputs_raise():
    data = _dataset()
    with pytest.raises(ValueError, match="reward vectors have 2 objectives but the ESR"):
        A.train_aetdice(data, U.esr(U.tchebycheff(m=3)), jax.random.key(0), CONFIG)
    # the baselines too (SER-DICE trains an ESR objective's SER form)
    for train, objective in [
        (A.train_optidice, U.ser(U.linear([1.0, 1.0, 1.0]))),
        (A.train_serdice, U.esr(U.tchebycheff(m=3))),
        (A.train_bc, U.ser(U.tchebycheff(m=3))),
    ]:
        with pytest.raises(ValueError, match="reward vectors have 2 objectives but the .*has 3"):
            train(data, objective, jax.random.key(0), CONFIG)
    shifted = data._replace(rewards=data.rewards - 1.0)
    with pytest.raises(ValueError, match=r"undefined where G \+ shift <= 0.*pass shift >"):
        A.train_aetdice(shifted, U.esr(U.nash_welfare(m=2)), jax.random.key(0), CONFIG)
    with pytest.raises(ValueError, match="dataset must be an envs.OfflineDataset"):
        A.train_aetdice(tuple(data), U.esr(U.linear([1, 1])), jax.random.key(0), CONFIG)
    with pytest.raises(ValueError, match=r"telescoping must be one of \('projected', 'accu"):
        A.train_aetdice(data, U.esr(U.linear([1, 1])), jax.random.key(0), CONFIG,
                        telescoping="anchored")  # fmt: skip
    with pytest.raises(ValueError, match="discount must lie in"):
        A.train_optidice(data, U.ser(U.linear([1.0, 1.0])), jax.random.key(0), discount=1.0)
    for discount in ("0.9", True, [0.9]):  # the string and True were read as numbers
        with pytest.raises(ValueError, match=r"discount must lie in \(0, 1\) \(a number\)"):
            A.train_optidice(data, U.ser(U.linear([1.0, 1.0])), jax.random.key(0),
                             discount=discount)  # fmt: skip
    with pytest.raises(ValueError, match=r"actions must have shape \(440, 10, act\)"):
        A.train_aetdice(data._replace(actions=data.actions[..., 0]), U.esr(U.linear([1, 1])),
                        jax.random.key(0), CONFIG)  # fmt: skip
    with pytest.raises(ValueError, match="rewards must be finite; it has 1 non-finite"):
        bad = data.rewards.copy()
        bad[0, 0, 0] = np.nan
        A.train_aetdice(data._replace(rewards=bad), U.esr(U.linear([1, 1])),
                        jax.random.key(0), CONFIG)  # fmt: skip
    # no objectives, or utilities of two classes in one vmap: errors from inside jax before
    with pytest.raises(ValueError, match="objectives is empty"):
        A.train_aetdice(data, [], jax.random.key(0), CONFIG)
    with pytest.raises(ValueError, match=r"share one utility class, got \['Tchebycheff', 'Thr"):
        A.train_aetdice(data, [U.ser(U.tchebycheff(m=2)), U.ser(U.threshold([1.0, 1.0]))],
                        jax.random.key(0), CONFIG)  # fmt: skip
    # SER with a linear g next to ESR (whose g is linear too) passed the class check and
    # failed stacking (M, 2) rewards on (M, 1)
    with pytest.raises(ValueError, match="train SER and ESR objectives in separate calls"):
        A.train_aetdice(data, [U.ser(U.linear([0.5, 0.5])), U.esr(U.tchebycheff(m=2))],
                        jax.random.key(0), CONFIG)  # fmt: skip
    # an episode without a step put its padding into the dual as a first state; none at all
    # trained NaN policies or failed inside jax
    mask = data.mask.copy()
    mask[3] = 0.0
    empty = data._replace(
        mask=mask, rewards=data.rewards * mask[..., None], actions=data.actions * mask[..., None],
        terminals=data.terminals * mask,
    )  # fmt: skip
    for train in (A.train_aetdice, A.train_optidice, A.train_bc):
        with pytest.raises(ValueError, match=r"dataset.mask is 0 from the first step of episode 3"):
            train(empty, U.esr(U.linear([1.0, 1.0])), jax.random.key(0), CONFIG)
    none = data._replace(**{f: getattr(data, f)[:0] for f in data._fields if f != "metadata"})
    with pytest.raises(ValueError, match="dataset holds no episodes"):
        A.train_aetdice(none, U.esr(U.linear([1.0, 1.0])), jax.random.key(0), CONFIG)


def test_rollouts_and_values_check_their_inputs():
    objective = ESR_OBJECTIVES["tchebycheff"]
    policy = _trained("tchebycheff")  # augmented features, horizon 10
    env = envs.BalanceTask(slip=SLIP)
    key = jax.random.key(5)
    for kwargs, match in (
        ({"horizon": 0}, "horizon must be an integer >= 1, got 0"),  # returned zeros
        ({"horizon": -2}, "horizon must be an integer >= 1"),  # an MLIR error
        ({"horizon": True}, "horizon must be an integer >= 1, got True"),  # a 1-step rollout
        ({"episodes": 2.5}, "episodes must be an integer >= 1"),
        ({"episodes": 0}, "episodes must be an integer >= 1"),  # returned shape (0, 2)
        # its time feature t / 10 would run to 5, far outside what it was trained on
        ({"horizon": 50}, "horizon=50 exceeds the policy's horizon 10"),
    ):
        with pytest.raises(ValueError, match=match):
            A.rollout_returns(env, policy, key, **({"episodes": 4} | kwargs))
    with pytest.raises(TypeError, match="policy must be a TrainedPolicy, got list"):
        A.rollout_returns(env, [policy], key, episodes=4)
    from brax.envs import training

    with pytest.raises(ValueError, match="env is wrapped for training"):
        A.rollout_returns(training.VmapWrapper(env), policy, key, episodes=4)
    # a policy of another env's observations: a broadcasting error inside jax before
    wide = dataclasses.replace(policy, feature_mean=jnp.zeros(7), feature_std=jnp.ones(7))
    with pytest.raises(ValueError, match="env gives the policy 4 features .*trained on 7"):
        A.rollout_returns(env, wide, key, episodes=4)
    # a bare utility: an AttributeError after the rollouts, or the type of its first field
    with pytest.raises(TypeError, match="objective must be an AET objective, got Tchebycheff"):
        A.evaluate(env, policy, U.tchebycheff(m=2), key, episodes=4)
    with pytest.raises(TypeError, match="got Tchebycheff: wrap a utility with ser"):
        A.train_bc(_dataset(), U.tchebycheff(m=2), key, CONFIG)
    # aet_value: (n, m) returns, n weights >= 0
    returns = jnp.array([[1.0, 2.0], [3.0, 4.0]])
    for args, match in (
        ((jnp.ones((4, 3, 2)),), r"returns must have shape \(n >= 1, m\), got \(4, 3, 2\)"),
        ((jnp.ones((0, 2)),), r"returns must have shape \(n >= 1, m\)"),
        ((jnp.array([1.0, 2.0]),), r"returns must have shape \(n >= 1, m\), got \(2,\)"),
        ((returns, jnp.array([2.0, -1.0])), "weights must be finite and >= 0"),
        ((returns, jnp.array([0.0, 0.0])), "with a positive sum"),
        ((returns, jnp.array([1.0, 2.0, 3.0])), r"weights must have shape \(2,\)"),
    ):
        with pytest.raises(ValueError, match=match):
            U.aet_value(objective, *args)
    value = U.aet_value(objective, [[1.0, 2.0], [3.0, 4.0]], [1.0, 1.0])  # lists are arrays
    assert float(value) == pytest.approx(float(U.aet_value(objective, returns)))


def test_datasets_are_checked_and_trained_as_checked():
    data = _dataset()
    # fields given as lists passed the check (on a converted copy) and failed after it
    listed = data._replace(mask=data.mask.tolist(), rewards=data.rewards.tolist())
    policy = A.train_bc(listed, U.ser(U.linear([1.0, 1.0])), jax.random.key(0),
                        dataclasses.replace(CONFIG, iterations=2))  # fmt: skip
    assert policy.method == "bc"
    # no steps: an IndexError at mask[:, 0] before
    none = data._replace(**{f: getattr(data, f)[:, :0] for f in data._fields
                            if f not in ("metadata", "preferences")})  # fmt: skip
    with pytest.raises(ValueError, match=r"observations must have shape \(N, T >= 1, obs >= 1\)"):
        A.train_aetdice(none, U.esr(U.linear([1.0, 1.0])), jax.random.key(0), CONFIG)
    # an action outside [-1, 1] was cloned by a policy that acts in [-1, 1] only
    actions = data.actions.copy()
    actions[2, 3, 0] = 3.0
    with pytest.raises(ValueError, match="actions must lie in .-1, 1.*1 entries do not.* 3"):
        envs.validate_dataset(data._replace(actions=actions))


def test_the_exact_solver_checks_its_inputs():
    objective = U.esr(U.tchebycheff(m=2))
    for kwargs, message in (
        ({"slip": 3.0}, r"slip must lie in \[0, 1\], got 3.0"),
        ({"horizon": 0}, "horizon must be an integer >= 1, got 0"),
    ):
        arguments = {"horizon": 3, "slip": 0.3} | kwargs
        with pytest.raises(ValueError, match=message):
            exact.optimum(objective, arguments["horizon"], arguments["slip"])
        with pytest.raises(ValueError, match=message):
            exact.return_distribution(0.5, arguments["horizon"], arguments["slip"])
    with pytest.raises(ValueError, match=r"policy must be a probability or a \(T, T \+ 1\)"):
        exact.value(objective, np.full((4, 4), 0.5), 4, 0.3)
    with pytest.raises(ValueError, match="policy's entries are probabilities"):
        exact.return_distribution(2.0, 2, 0.3)


def test_behaviour_policy_trains_on_preferences_and_collects():
    from jaxopt_suite.rl.aetdice.behaviour import train_behaviour
    from jaxopt_suite.rl.ppo_lagrangian import PPOLagrangianConfig

    env = envs.BalanceTask(slip=0.0)
    preferences = np.array([[1.0, 0.0], [0.0, 1.0]], np.float32)
    config = PPOLagrangianConfig(num_envs=8, episode_length=10, unroll_length=10, iterations=30,
                                 hidden=(16,))  # fmt: skip
    policy, metrics = train_behaviour(env, preferences, jax.random.key(0), config)
    chex.assert_shape(metrics["episode_return"], (30,))
    data = envs.collect(env, policy, preferences, key=jax.random.key(1),
                        episodes_per_preference=20, horizon=10)  # fmt: skip
    returns = np.asarray(envs.episode_returns(data)).reshape(2, 20, 2).mean(1)
    # each preference's episodes favour its own objective: PPO learned to condition on it
    assert returns[0, 0] > returns[0, 1] and returns[1, 1] > returns[1, 0]
