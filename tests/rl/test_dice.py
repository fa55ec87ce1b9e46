"""The DICE dual: closed forms, and the finite-horizon dual of AETDICE on a tabular MDP against
exact occupancies (flow constraints, exact occupancy ratios of the implied policy, strong
duality, and the optimum as the regulariser vanishes) for each f-divergence, and the
expected-residual form that training minimises against the dual's gradient."""

import dataclasses
from math import comb

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.optimize

from jaxopt_suite.rl.aetdice import dice, exact
from jaxopt_suite.rl.aetdice import utilities as U
from jaxopt_suite.rl.aetdice.policy import reward_scale


@pytest.mark.parametrize("divergence", dice.DIVERGENCES)
def test_ratio_and_conjugate_are_the_maximiser_and_maximum(divergence):
    ys = jnp.linspace(-4.0, 3.0, 57)
    ws = jnp.linspace(0.0, 30.0, 300_001)

    @jax.jit
    def check(ys):
        values = ws[None, :] * ys[:, None] - dice.f_value(divergence, ws)[None, :]
        return jnp.max(values, axis=1), dice.conjugate(divergence, ys), dice.ratio(divergence, ys)

    grid_max, closed, w = check(ys)
    chex.assert_trees_all_close(closed, grid_max, atol=1e-4)
    chex.assert_trees_all_close(closed, w * ys - dice.f_value(divergence, w), atol=1e-5)
    # f* is differentiable with derivative w* (the envelope theorem)
    slope = jax.vmap(jax.grad(lambda y: dice.conjugate(divergence, y)))(ys)
    chex.assert_trees_all_close(slope, w, atol=1e-5)


def test_bad_config_raises():
    with pytest.raises(ValueError, match="divergence must be one of"):
        dice.DiceConfig(divergence="tv").checked()
    with pytest.raises(ValueError, match="alpha must be finite and > 0"):
        dice.DiceConfig(alpha=0.0).checked()
    with pytest.raises(ValueError, match="mass_learning_rate must be finite and > 0"):
        dice.DiceConfig(mass_learning_rate=-1e-3).checked()
    with pytest.raises(ValueError, match="iterations must be an integer >= 1"):
        dice.DiceConfig(iterations=0).checked()
    with pytest.raises(ValueError, match="policy_components must be an integer >= 1"):
        dice.DiceConfig(policy_components=0).checked()
    # infinite settings turned the losses into NaN
    with pytest.raises(ValueError, match="alpha must be finite and > 0, got inf"):
        dice.DiceConfig(alpha=float("inf")).checked()
    with pytest.raises(ValueError, match="gradient_penalty must be finite and >= 0, got inf"):
        dice.DiceConfig(gradient_penalty=float("inf")).checked()
    for fraction in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match=r"final_lr_fraction must lie in \[0, 1\]"):
            dice.DiceConfig(final_lr_fraction=fraction).checked()
    # widths: 0 divided by zero in an initialiser, -3, 8.5 or "64" failed inside jax
    for widths in ((0,), (-3,), (8.5,), "64"):
        with pytest.raises(ValueError, match="hidden must be a tuple of layer widths"):
            dice.DiceConfig(hidden=widths).checked()
        with pytest.raises(ValueError, match="policy_hidden must be a tuple of layer widths"):
            dice.DiceConfig(policy_hidden=widths).checked()
    # bools were read as 1.0, arrays failed to hash in the compiled functions' cache
    with pytest.raises(ValueError, match="learning_rate must be a number, not a bool"):
        dice.DiceConfig(learning_rate=True).checked()
    with pytest.raises(ValueError, match=r"final_lr_fraction must lie in \[0, 1\] \(a number, not"):
        dice.DiceConfig(final_lr_fraction=True).checked()
    with pytest.raises(ValueError, match=r"alpha must be a scalar, got shape \(2,\)"):
        dice.DiceConfig(alpha=np.array([0.1, 0.2])).checked()
    for flag in ("behaviour_conditioned", "mass_constraint"):  # "no" read as true
        with pytest.raises(ValueError, match=f"{flag} must be a bool, got 'no'"):
            dice.DiceConfig(**{flag: "no"}).checked()


def test_checked_config_holds_python_numbers():
    given = dice.DiceConfig(alpha=jnp.float32(0.5), iterations=np.int64(7), hidden=[8, 8])
    config = given.checked()
    assert type(config.alpha) is float and config.alpha == 0.5
    assert type(config.iterations) is int and config.hidden == (8, 8)
    flags = dice.DiceConfig(mass_constraint=np.bool_(False), final_lr_fraction=np.float64(1))
    flagged = flags.checked()
    assert flagged.mass_constraint is False and type(flagged.final_lr_fraction) is float
    hash(config)  # keys the compiled functions
    assert dice.DiceConfig(alpha=0.5, iterations=7, hidden=(8, 8)).checked() == config


def test_schedule_decays_to_the_final_fraction():
    config = dice.DiceConfig(iterations=100, final_lr_fraction=0.05)
    rate = dice._schedule(config, 3e-3)
    chex.assert_trees_all_close(rate(0), 3e-3, rtol=1e-6)
    chex.assert_trees_all_close(rate(100), 0.05 * 3e-3, rtol=1e-5)
    assert dice._schedule(dataclasses.replace(config, final_lr_fraction=1.0), 3e-3) == 3e-3


def test_reward_scale_leaves_out_the_covariance():
    # one-hot rewards are perfectly anti-correlated: a balanced direction has no spread, but
    # the scale is each objective's spread, weighted by the direction
    rewards = jnp.asarray([[1.0, 0.0], [0.0, 1.0]] * 8)
    direction = jnp.asarray([0.3, 0.3])
    assert float(jnp.std(rewards @ direction)) == 0.0
    expected = jnp.sqrt(2 * 0.3**2 * 0.25)
    chex.assert_trees_all_close(reward_scale(rewards, direction), expected, rtol=1e-6)
    chex.assert_trees_all_close(reward_scale(jnp.ones((4, 2)), direction), 1.0)


HORIZON = 4


def _balance_population(objective, behaviour=0.5):
    """Every transition of the deterministic balance task (slip 0) on augmented states
    ``(t, k)``, with integer multiplicities proportional to the behaviour's occupancy."""
    states = [(t, k) for t in range(HORIZON + 1) for k in range(t + 1)]
    index = {s: i for i, s in enumerate(states)}
    rows, counts = [], []
    for t in range(HORIZON):
        for k in range(t + 1):
            for a in (0, 1):
                rows.append((t, k, a))
                # P(k at t) P(a) under a 50/50 behaviour, times 2^(T + 1): an integer
                counts.append(comb(t, k) * 2 ** (HORIZON - t))
    assert behaviour == 0.5
    onehot = np.eye(len(states), dtype=np.float32)
    features = onehot[[index[(t, k)] for t, k, _ in rows]]
    next_features = onehot[[index[(t + 1, k + (a == 0))] for t, k, a in rows]]
    x = np.array([[k, t - k] for t, k, _ in rows], np.float32)
    r = np.array([[a == 0, a == 1] for _, _, a in rows], np.float32)
    transformed = objective.transform(jnp.asarray(x + r)) - objective.transform(jnp.asarray(x))
    data = dice.DiceData(
        features=jnp.asarray(features),
        next_features=jnp.asarray(next_features),
        actions=jnp.zeros((len(rows), 1)),
        continues=jnp.asarray([float(t + 1 < HORIZON) for t, _, _ in rows]),
        initial_features=jnp.asarray(onehot[[index[(0, 0)]]]),
        feature_mean=jnp.zeros(len(states)),
        feature_std=jnp.ones(len(states)),
    )
    problem = dice.DiceProblem(
        rewards=transformed,
        outer=objective.outer,
        offset=objective.transform(jnp.zeros(2)),
        scale=jnp.asarray(1.0),
        initial_weight=jnp.asarray(1.0 / HORIZON),
        step_weight=jnp.asarray(1.0),
        initial_dual=objective.outer.initial_dual(jnp.full((objective.size,), HORIZON / 2.0)),
    )
    steps = np.repeat(np.arange(len(rows)), counts)
    occupancy = np.asarray(counts, np.float64) / np.sum(counts)  # d^D, mass 1/T per step t
    return rows, data, problem, jnp.asarray(steps), occupancy, len(states)


def _tabular_nu(params, features):
    """``nu`` as a table over the one-hot states."""
    return features @ params


def _solve_dual(config, data, problem, steps, num_states, with_mass=False):
    """Minimises the dual over a tabular ``nu``, ``mu`` and, ``with_mass``, the mass bound's
    multiplier ``lambda >= 0``; returns the minimum and every distinct transition's residual
    (shifted by ``lambda``: the ratios' argument)."""

    starts = jnp.zeros((1,), jnp.int32)
    dual_size = problem.outer.dual_size

    def unpack(flat):
        nu, dual = flat[:num_states], flat[num_states : num_states + dual_size]
        return nu, dual, (flat[-1] if with_mass else None)

    @jax.jit
    def loss_and_grad(flat):
        def loss(flat):
            nu, dual, mass = unpack(flat)
            return dice.dual_loss(
                config, _tabular_nu, nu, dual, data, problem, steps, starts, mass=mass
            )[0]

        return jax.value_and_grad(loss)(flat)

    start = [np.zeros(num_states), np.asarray(problem.initial_dual)]
    bounds = [(None, None)] * (num_states + dual_size)
    if with_mass:
        start.append(np.zeros(1))
        bounds.append((0.0, None))
    result = scipy.optimize.minimize(
        lambda v: tuple(np.asarray(a, np.float64) for a in loss_and_grad(jnp.asarray(v))),
        np.concatenate(start), jac=True, method="L-BFGS-B", bounds=bounds,
        options={"maxiter": 5000, "gtol": 1e-10, "ftol": 1e-15},
    )  # fmt: skip
    nu, dual, mass = unpack(jnp.asarray(result.x, jnp.float32))
    value, _ = dice.dual_loss(
        config, _tabular_nu, nu, dual, data, problem, steps, starts, mass=mass
    )
    # the residuals of every distinct transition (in the order of the rows)
    _, e = dice.dual_loss(
        config, _tabular_nu, nu, dual, data, problem, jnp.arange(data.features.shape[0]), starts,
        mass=mass,
    )  # fmt: skip
    return float(value), np.asarray(e, np.float64)


OBJECTIVES = {
    "esr_tchebycheff": U.esr(U.tchebycheff([0.5, 0.5])),
    "ser_nash": U.ser(U.nash_welfare([0.3, 0.7], shift=1.0)),
}


@pytest.mark.parametrize("with_mass", [False, True])
@pytest.mark.parametrize("name", sorted(OBJECTIVES))
@pytest.mark.parametrize("divergence", dice.DIVERGENCES)
def test_finite_horizon_dual_gives_exact_occupancy_ratios(name, divergence, with_mass):
    # with_mass: the mass bound (every episode runs to the horizon, so the flow implies it
    # with equality) leaves the optimum, its ratios and the dual's value as they are
    objective = OBJECTIVES[name]
    alpha = 0.2
    config = dice.DiceConfig(divergence=divergence, alpha=alpha, gradient_penalty=0.0)
    rows, data, problem, steps, d_data, num_states = _balance_population(objective)
    dual_value, e = _solve_dual(config, data, problem, steps, num_states, with_mass)
    w = np.asarray(dice.ratio(divergence, jnp.asarray(e / alpha)), np.float64)
    d = w * d_data  # the occupancy the dual's ratios describe
    assert np.sum(d) == pytest.approx(1.0, abs=1e-3)

    # 1. Bellman flow: mass 1/T enters at (0, 0); each (t + 1, k') receives what leaves.
    inflow = {(0, 0): 1.0 / HORIZON}
    for (t, k, a), mass in zip(rows, d, strict=True):
        if t + 1 < HORIZON:
            key = (t + 1, k + (a == 0))
            inflow[key] = inflow.get(key, 0.0) + mass
    outflow = {}
    for (t, k, _), mass in zip(rows, d, strict=True):
        outflow[(t, k)] = outflow.get((t, k), 0.0) + mass
    for state, mass in outflow.items():
        assert mass == pytest.approx(inflow.get(state, 0.0), abs=2e-4), state

    # 2. the ratios are exact occupancy ratios: run the implied policy forward
    policy = {}
    for (t, k, a), mass in zip(rows, d, strict=True):
        policy.setdefault((t, k), np.zeros(2))[a] = mass
    reach = {(0, 0): 1.0}
    d_policy = np.zeros(len(rows))
    for i, (t, k, a) in enumerate(rows):
        pi = policy[(t, k)] / max(policy[(t, k)].sum(), 1e-30)
        d_policy[i] = reach.get((t, k), 0.0) * pi[a] / HORIZON
        if t + 1 < HORIZON:
            key = (t + 1, k + (a == 0))
            reach[key] = reach.get(key, 0.0) + reach.get((t, k), 0.0) * pi[a]
    np.testing.assert_allclose(d_policy / d_data, w, atol=3e-3)

    # 3. strong duality: the primal value at these ratios equals the dual's minimum
    transformed = np.asarray(problem.rewards, np.float64)
    expected = np.asarray(problem.offset) + HORIZON * (d @ transformed)
    primal = float(objective.outer.value(jnp.asarray(expected, jnp.float32))) / HORIZON
    primal -= alpha * float(d_data @ np.asarray(dice.f_value(divergence, jnp.asarray(w))))
    assert primal == pytest.approx(dual_value, abs=2e-4)


@pytest.mark.parametrize("with_mass", [False, True])
@pytest.mark.parametrize("divergence", dice.DIVERGENCES)
def test_expected_residual_form_has_the_dual_gradient(divergence, with_mass):
    # the training scan's form (``expected``: w* taken at an estimate of E[e | s, a]) has the
    # dual's gradient in nu, mu and lambda where the estimate is exact, as here: the
    # tabular task's transitions are deterministic, so E[e | s, a] = e (envelope theorem)
    objective = OBJECTIVES["ser_nash"]
    config = dice.DiceConfig(divergence=divergence, alpha=0.2, gradient_penalty=0.0)
    rows, data, problem, steps, _, num_states = _balance_population(objective)
    starts = jnp.zeros((1,), jnp.int32)
    k1, k2 = jax.random.split(jax.random.key(3))
    nu = 0.3 * jax.random.normal(k1, (num_states,))
    dual = problem.initial_dual + 0.2 * jax.random.normal(k2, problem.initial_dual.shape)
    mass = jnp.asarray(0.1) if with_mass else None

    def loss(args, expected):
        nu, dual, mass = args
        return dice.dual_loss(
            config, _tabular_nu, nu, dual, data, problem, steps, starts, expected=expected,
            mass=mass,
        )  # fmt: skip

    (_, e), dual_grad = jax.jit(jax.value_and_grad(loss, has_aux=True))((nu, dual, mass), None)
    shift = 0.0 if mass is None else mass  # the returned residuals are already shifted
    expected = jax.lax.stop_gradient(e + shift)
    grad = jax.jit(jax.grad(lambda args: loss(args, expected)[0]))((nu, dual, mass))
    chex.assert_trees_all_close(grad, dual_grad, atol=1e-5, rtol=1e-5)
    # and the estimate matters: a wrong one moves the gradient
    wrong = jax.jit(jax.grad(lambda args: loss(args, expected + 0.5)[0]))((nu, dual, mass))
    assert float(jnp.max(jnp.abs(wrong[0] - dual_grad[0]))) > 1e-3


@pytest.mark.parametrize("name", sorted(OBJECTIVES))
def test_vanishing_regulariser_recovers_the_optimum(name):
    objective = OBJECTIVES[name]
    config = dice.DiceConfig(divergence="soft_chi2", alpha=0.002, gradient_penalty=0.0)
    rows, data, problem, steps, d_data, num_states = _balance_population(objective)
    _, e = _solve_dual(config, data, problem, steps, num_states)
    d = np.asarray(dice.ratio("soft_chi2", jnp.asarray(e / config.alpha))) * d_data
    table = np.full((HORIZON, HORIZON + 1), 0.5)
    for t in range(HORIZON):
        for k in range(t + 1):
            masses = [d[rows.index((t, k, a))] for a in (0, 1)]
            if sum(masses) > 1e-9:
                table[t, k] = masses[0] / sum(masses)
    best, _ = exact.optimum(objective, HORIZON, 0.0)
    achieved = exact.value(objective, table, HORIZON, 0.0)
    assert achieved == pytest.approx(best, rel=2e-2)
    # the data's own policy is clearly worse, so the check can fail
    assert exact.value(objective, 0.5, HORIZON, 0.0) < best - 0.05 * abs(best)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_mass_multiplier_holds_the_occupancy_to_its_bound(sign):
    # nu fixed at zero cannot shift the residuals: the ratios' mass c_1 E_D[w] then follows
    # the rewards, above 1 for these (sign 1), below for their negatives (sign -1). The
    # multiplier minimising the dual brings an excess mass down to the bound exactly
    # (d/d lambda = 1 - c_1 E_D[w]) and stays at 0 where the bound does not bind.
    objective = U.ser(U.linear([0.5, 0.5]))
    _, data, problem, steps, _, _ = _balance_population(objective)
    problem = problem._replace(rewards=sign * problem.rewards, step_weight=jnp.asarray(0.8))
    config = dice.DiceConfig(divergence="soft_chi2", alpha=0.2, gradient_penalty=0.0)
    starts = jnp.zeros((1,), jnp.int32)

    def nu_apply(params, features):
        return jnp.zeros(features.shape[:-1])

    @jax.jit
    def dual(lam):
        # the loss's mean over ``steps`` (the rows repeated as often as d^D holds them)
        value, e = dice.dual_loss(
            config, nu_apply, None, problem.initial_dual, data, problem, steps, starts,
            mass=lam,
        )  # fmt: skip
        ratios = dice.ratio(config.divergence, e / config.alpha)
        return value, problem.step_weight * jnp.mean(ratios)

    def evaluate(lam):  # the dual's value and the ratios' mass c_1 E_D[w] at lambda
        value, occupancy_mass = dual(jnp.asarray(lam, jnp.float32))
        return float(value), float(occupancy_mass)

    found = scipy.optimize.minimize_scalar(
        lambda lam: evaluate(lam)[0], bounds=(0.0, 20.0), method="bounded",
        options={"xatol": 1e-7},
    )  # fmt: skip
    if sign > 0:
        assert evaluate(0.0)[1] > 1.2  # the bound binds
        assert found.x > 1e-2
        assert evaluate(found.x)[1] == pytest.approx(1.0, abs=1e-4)
    else:
        assert evaluate(0.0)[1] < 0.9
        assert found.x == pytest.approx(0.0, abs=1e-4)
