"""Utilities, their conjugates, the AET decomposition, and the exact balance-task optima."""

import itertools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxopt_suite.rl.aetdice import exact
from jaxopt_suite.rl.aetdice import utilities as U

UTILITIES = {
    "linear": U.linear([0.3, 0.7]),
    "nash": U.nash_welfare([0.4, 0.6], shift=1.0),
    "tchebycheff": U.tchebycheff([0.5, 1.5], reference=[-1.0, 0.5]),
    "threshold": U.threshold([2.0, 3.0], weights=[1.0, 2.0]),
    "risk_averse": U.risk_averse(0.7, [0.5, 0.5]),
}


@pytest.mark.parametrize("name", sorted(UTILITIES))
def test_conjugate_represents_the_utility(name):
    """``u(y) = min_mu mu^T y - u_*(mu)``: Fenchel-Young (>=) at random multipliers and
    equality at a supergradient of ``u``."""
    utility = UTILITIES[name]
    key = jax.random.key(0)
    ys = jax.random.uniform(key, (64, 2), minval=0.1, maxval=5.0)

    @jax.jit
    def gaps(ys, duals):
        def one(y, dual):
            mu = utility.multipliers(dual)
            return mu @ y - utility.conjugate(mu) - utility.value(y)

        def tight(y):
            mu = jax.grad(utility.value)(y)
            return mu @ y - utility.conjugate(mu) - utility.value(y)

        return jax.vmap(one)(ys, duals), jax.vmap(tight)(ys)

    duals = jax.random.normal(jax.random.key(1), (64, utility.dual_size)) * 2.0
    loose, tight = gaps(ys, duals)
    assert bool(jnp.all(loose >= -1e-4)), loose
    # at a supergradient (for the min, w_i at the argmin: a limit of the softmax
    # parametrisation, but a valid multiplier of the conjugate) the bound is tight
    atol = 1e-5 if name == "tchebycheff" else 1e-4
    chex.assert_trees_all_close(tight, jnp.zeros_like(tight), atol=atol)


@pytest.mark.parametrize("name", ["nash", "threshold", "risk_averse", "tchebycheff"])
def test_ser_and_esr_differ_for_nonlinear_and_agree_for_linear(name):
    returns = jnp.array([[0.0, 4.0], [4.0, 0.0]])
    ser = U.aet_value(U.ser(UTILITIES[name]), returns)
    esr = U.aet_value(U.esr(UTILITIES[name]), returns)
    assert float(ser) > float(esr)  # concave: u(E G) >= E u(G), strictly here
    lin_ser = U.aet_value(U.ser(UTILITIES["linear"]), returns)
    lin_esr = U.aet_value(U.esr(UTILITIES["linear"]), returns)
    chex.assert_trees_all_close(lin_ser, lin_esr, rtol=1e-6)


def _transformed(form, objective, rewards, mask):
    """``(r~, h_0)`` of either anchor: accumulated (:func:`U.telescoped_rewards`, ``h_0 =
    h(0)``) or projected (:func:`U.projected_rewards`)."""
    if form == "projected":
        return U.projected_rewards(objective, rewards, mask)
    transformed = U.telescoped_rewards(objective, rewards, mask)
    return transformed, objective.transform(jnp.zeros(rewards.shape[-1]))


@pytest.mark.parametrize("name", sorted(UTILITIES))
@pytest.mark.parametrize("criterion", ["ser", "esr"])
@pytest.mark.parametrize("form", ["accumulated", "projected"])
def test_telescoped_rewards_reproduce_monte_carlo_ser_and_esr(name, criterion, form):
    """``g(h_0 + mean sum_t r~_t)`` equals SER ``u(mean G)`` / ESR ``mean u(G)`` computed
    directly from sampled returns, with masked (ended) episodes, for both anchors."""
    utility = UTILITIES[name]
    objective = getattr(U, criterion)(utility)
    key = jax.random.key(3)
    rewards = jax.random.uniform(key, (500, 7, 2), minval=0.0, maxval=1.0)
    lengths = jax.random.randint(jax.random.key(4), (500,), 1, 8)
    mask = (jnp.arange(7)[None, :] < lengths[:, None]).astype(jnp.float32)
    returns = jnp.sum(rewards * mask[..., None], axis=1)

    @jax.jit
    def via_decomposition(rewards, mask):
        transformed, offset = _transformed(form, objective, rewards, mask)
        return objective.outer.value(offset + jnp.mean(jnp.sum(transformed, axis=1), axis=0))

    direct = (
        utility.value(jnp.mean(returns, axis=0))
        if criterion == "ser"
        else jnp.mean(utility.value(returns))
    )
    chex.assert_trees_all_close(via_decomposition(rewards, mask), direct, rtol=1e-5, atol=1e-5)
    chex.assert_trees_all_close(U.aet_value(objective, returns), direct, rtol=1e-5, atol=1e-5)


def test_telescoped_rewards_sum_to_the_transformed_return_per_episode():
    objective = U.esr(UTILITIES["nash"])
    rewards = jax.random.uniform(jax.random.key(5), (3, 5, 2))
    mask = jnp.ones((3, 5))
    transformed = U.telescoped_rewards(objective, rewards, mask)
    chex.assert_shape(transformed, (3, 5, 1))
    expected = objective.transform(rewards.sum(1)) - objective.transform(jnp.zeros((3, 2)))
    chex.assert_trees_all_close(transformed.sum(1), expected, atol=1e-5)


def test_projected_rewards_on_a_hand_computed_example_clip_into_the_data_range():
    """Two 3-step episodes, one ended after 2 steps, Nash ESR on objective 0 (objective 1 has
    no reward): ``A = (-3, 0, 0)``, ``B = (0, -1, pad)``. The mean returns from ``t`` on are
    ``bar R = (-2, -0.5, 0)`` (B no longer runs at ``t = 2``), the accumulated returns range
    over ``[-3, 0]``, and A's projected ``x_1 + bar R_1 = -3.5`` lies below it: clipped to -3,
    where the log is defined (``shift = 3.1``; unclipped it is NaN). Per episode ``h(y_0) +
    sum r~ = h(G)``, and ``r~`` differs from the accumulated anchor's by the potential
    ``Phi_t(x) = h(clip(x + bar R_t)) - h(x)``, zero where the episode ends."""
    utility = U.nash_welfare([1.0, 1.0], shift=3.1)
    objective = U.esr(utility)
    rewards = jnp.array([[[-3.0, 0.0], [0.0, 0.0], [0.0, 0.0]],
                         [[0.0, 0.0], [-1.0, 0.0], [7.0, 0.0]]])  # fmt: skip
    mask = jnp.array([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    transformed, offset = jax.jit(lambda r, m: U.projected_rewards(objective, r, m))(rewards, mask)
    h = lambda a: float(utility.value(jnp.array([a, 0.0])))  # noqa: E731
    chex.assert_trees_all_close(offset, jnp.array([h(-2.0)]), atol=1e-6)
    expected = [[h(-3.0) - h(-2.0), 0.0, 0.0], [h(-0.5) - h(-2.0), h(-1.0) - h(-0.5), 0.0]]
    chex.assert_trees_all_close(transformed[..., 0], jnp.array(expected), atol=1e-6)
    returns = jnp.sum(rewards * mask[..., None], axis=1)
    chex.assert_trees_all_close(offset[None] + transformed.sum(1), objective.transform(returns),
                                atol=1e-6)  # fmt: skip
    # r~_proj - r~_acc = c_t Phi_{t+1}(x_{t+1}) - Phi_t(x_t)
    mean_remaining = np.array([-2.0, -0.5, 0.0, 0.0])
    accumulated = U.telescoped_rewards(objective, rewards, mask)[..., 0]
    partial = np.concatenate([np.zeros((2, 1)), np.cumsum(rewards[..., 0] * mask, 1)], 1)
    potential = lambda t, x: h(np.clip(x + mean_remaining[t], -3.0, 0.0)) - h(x)  # noqa: E731
    for n in range(2):
        for t in range(int(mask[n].sum())):
            ends = t + 1 == int(mask[n].sum())
            shaped = (0.0 if ends else potential(t + 1, partial[n, t + 1])) - potential(
                t, partial[n, t]
            )
            assert abs(transformed[n, t, 0] - accumulated[n, t] - shaped) < 1e-6


def test_criterion_labels():
    u = UTILITIES["nash"]
    assert U.ser(u).criterion == "SER"
    assert U.esr(u).criterion == "ESR"
    assert U.AET(u, UTILITIES["risk_averse"]._replace(weights=jnp.ones(1))).criterion == "AET"


def test_nash_welfare_on_negative_returns_asks_for_a_shift():
    objective = U.esr(U.nash_welfare(m=2))
    partial = np.array([[[0.0, 0.0], [-2.5, 1.0]]])
    with pytest.raises(ValueError, match=r"undefined where G \+ shift <= 0.*shift=3\.5"):
        objective.check_returns(partial, partial[:, -1])
    U.esr(U.nash_welfare(m=2, shift=3.0)).check_returns(partial, partial[:, -1])


def test_the_shift_nash_welfare_asks_for_lifts_every_objective():
    # one shift for all: the objective with the lowest return sets it
    returns = np.array([[-10.0, -1.0], [5.0, 4.0]])
    with pytest.raises(
        ValueError, match=r"pass shift > 10, e\.g\. nash_welfare\(\.\.\., shift=11\)"
    ):
        U.esr(U.nash_welfare(m=2)).check_returns(returns[:, None], returns)
    U.esr(U.nash_welfare(m=2, shift=11.0)).check_returns(returns[:, None], returns)
    # a per-objective shift: the advice was sized for the objective with the lowest
    # G + shift alone, objective 1 (-1 + 0), and its "shift=2" left objective 0 at -10 + 2;
    # now each objective's own bound, keeping the shifts already large enough
    per_objective = U.esr(U.nash_welfare(m=2, shift=[20.0, 0.0]))
    with pytest.raises(
        ValueError,
        match=r"objective 1, and shift 0 does not lift that above 0; pass shift_i > \[10, 1\] "
        r"per objective, e\.g\. nash_welfare\(\.\.\., shift=\[20, 2\]\)",
    ):
        per_objective.check_returns(returns[:, None], returns)
    U.esr(U.nash_welfare(m=2, shift=[20.0, 2.0])).check_returns(returns[:, None], returns)


def test_check_returns_checks_the_outer_utility_on_h_of_the_returns():
    """A linear ``h`` is defined everywhere, but Nash welfare outside it needs ``h(G) > 0``:
    returns down to (-2, -2) give ``h = -4`` (and a NaN value), so ``shift > 4``."""
    partial = np.array([[[0.0, 0.0], [-1.0, -1.0], [-2.0, -2.0]]])
    objective = U.AET(U.linear([1.0, 1.0]), U.nash_welfare(m=1))
    with pytest.raises(
        ValueError,
        match=r"h of the dataset's episode returns reach -4 on objective 0.*pass shift > 4",
    ):
        objective.check_returns(partial, partial[:, -1])
    shifted = U.AET(U.linear([1.0, 1.0]), U.nash_welfare(m=1, shift=5.0))
    shifted.check_returns(partial, partial[:, -1])
    assert float(U.aet_value(shifted, jnp.asarray(partial[:, -1]))) == pytest.approx(0.0)


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: U.linear([1.0, -1.0]), "weights must be > 0"),
        (lambda: U.linear([[1.0, 1.0]]), r"weights must have shape"),
        (lambda: U.nash_welfare(), "pass weights, or the number of objectives"),
        (lambda: U.nash_welfare([0.5, 0.5], shift=[1.0, 2.0, 3.0]), "shift must have shape"),
        (lambda: U.risk_averse(0.0, m=2), "rho must be > 0"),
        (lambda: U.threshold([1.0, np.nan]), "thresholds must be finite"),
    ],
)
def test_bad_utilities_raise(build, match):
    with pytest.raises(ValueError, match=match):
        build()


def _deterministic_policies(horizon):
    cells = [(t, k) for t in range(horizon) for k in range(t + 1)]
    for bits in itertools.product([0.0, 1.0], repeat=len(cells)):
        table = np.zeros((horizon, horizon + 1))
        for (t, k), bit in zip(cells, bits, strict=True):
            table[t, k] = bit
        yield table


@pytest.mark.parametrize("name", ["nash", "tchebycheff", "threshold", "risk_averse"])
def test_exact_esr_optimum_matches_brute_force_over_history_policies(name):
    horizon, slip = 3, 0.3
    objective = U.esr(UTILITIES[name])
    best, policy = exact.optimum(objective, horizon, slip)
    brute = max(exact.value(objective, p, horizon, slip) for p in _deterministic_policies(3))
    assert best == pytest.approx(brute, abs=1e-5)
    assert exact.value(objective, policy, horizon, slip) == pytest.approx(best, abs=1e-5)


def test_exact_ser_optimum_and_the_markov_gap():
    horizon, slip = 10, 0.3
    tcheb = UTILITIES["tchebycheff"]
    ser_best, _ = exact.optimum(U.ser(tcheb), horizon, slip)
    # SER: the best stationary mixture over a grid of probabilities
    grid = max(exact.value(U.ser(tcheb), p, horizon, slip) for p in np.linspace(0, 1, 2001))
    # the value moves at most max(w) (1 - slip) T per unit of p; the grid's step is 1/2000
    assert grid - 1e-5 <= ser_best <= grid + 1.5 * (1 - slip) * horizon * 0.5 / 2000
    # ESR needs the history: no stationary (Markov) policy reaches the optimum
    esr_best, _ = exact.optimum(U.esr(tcheb), horizon, slip)
    markov = max(exact.value(U.esr(tcheb), p, horizon, slip) for p in np.linspace(0, 1, 201))
    assert esr_best > markov + 0.1


def test_return_distribution_is_binomial_for_a_markov_policy():
    horizon, slip, p = 6, 0.2, 0.3
    probs = exact.return_distribution(p, horizon, slip)
    up = p * (1 - slip / 2) + (1 - p) * slip / 2
    from math import comb

    binomial = [comb(horizon, k) * up**k * (1 - up) ** (horizon - k) for k in range(7)]
    np.testing.assert_allclose(probs, binomial, atol=1e-12)


@pytest.mark.parametrize("name", ["nash", "risk_averse", "tchebycheff", "threshold"])
def test_initial_dual_starts_at_a_supergradient_or_the_kinks_middle(name):
    utility = UTILITIES[name]
    at = jnp.array([1.5, 2.5])
    mu = utility.multipliers(utility.initial_dual(at))
    if name in ("nash", "risk_averse"):  # smooth: the gradient itself
        chex.assert_trees_all_close(mu, jax.grad(utility.value)(at), rtol=1e-5)
    else:  # kinked: the middle (sigmoid(0) = 1/2; softmax of two zeros = (1/2, 1/2))
        chex.assert_trees_all_close(mu, utility.weights * 0.5, rtol=1e-6)


def test_a_utility_for_other_objectives_than_the_returns_is_refused():
    # a one-weight utility's (1,) vectors stretched over two objectives without an error
    returns = jnp.ones((4, 2))
    for objective in (U.ser(U.nash_welfare(m=1)), U.esr(U.risk_averse(1.0, m=1))):
        with pytest.raises(ValueError, match=r"is for 1 objectives, but the returns have 2"):
            U.aet_value(objective, returns)
    with pytest.raises(ValueError, match=r"utility is for 3 objectives, but the returns have 2"):
        U.aet_value(U.ser(U.tchebycheff([0.2, 0.3, 0.5])), returns)


def test_aet_value_refuses_returns_outside_the_utilitys_domain():
    # Nash welfare of a negative return without a shift read as NaN, which a comparison of
    # scores then took as a loss without a word
    returns = jnp.asarray([[-1.0, 2.0], [3.0, 3.0]])
    with pytest.raises(ValueError, match=r"log\(G \+ shift\).*pass shift > 1"):
        U.aet_value(U.esr(U.nash_welfare(m=2)), returns)
    # under SER only the mean return must be in the domain, and here it is
    assert np.isfinite(float(U.aet_value(U.ser(U.nash_welfare(m=2)), returns)))
    with pytest.raises(ValueError, match=r"the mean of h\(returns\) reach -2"):
        U.aet_value(U.ser(U.nash_welfare(m=2)), returns - 3.0)
    # traced returns are not checked (their values are unknown while tracing)
    value = jax.jit(lambda r: U.aet_value(U.esr(U.nash_welfare(m=2)), r))(returns)
    assert np.isnan(float(value))


def test_risk_averse_returns_that_overflow_exp_are_refused():
    # rho * G = -100: exp overflowed float32, mu was inf and the conjugate NaN
    utility = U.risk_averse(1.0, m=2)
    returns = np.array([[-100.0, 5.0], [-90.0, 3.0]])
    with pytest.raises(ValueError, match=r"rescale the rewards or lower rho below 0.8"):
        U.ser(utility).check_returns(np.zeros((2, 1, 2)), returns)
    with pytest.raises(ValueError, match=r"float32 cannot hold"):
        U.aet_value(U.esr(utility), jnp.asarray(returns))
    U.ser(U.risk_averse(0.5, m=2)).check_returns(np.zeros((2, 1, 2)), returns)  # 50 < 80


@pytest.mark.parametrize("m", [0, -1, 2.5, True])
def test_the_number_of_objectives_must_be_a_positive_int(m):
    for build in (U.nash_welfare, U.tchebycheff, lambda m: U.risk_averse(1.0, m=m)):
        with pytest.raises(ValueError, match=r"m=.* must be a positive int"):
            build(m=m)


def test_check_returns_counts_the_objectives():
    # Nash welfare broadcast a one-objective return over two weights and accepted it
    for utility in (U.nash_welfare(m=2), U.linear([0.5, 0.5]), U.risk_averse(1.0, m=2)):
        for returns in (np.ones((4, 1)), np.ones((2, 3)), 3.0):
            with pytest.raises(ValueError, match=r"the utility is for 2 objectives"):
                utility.check_returns(returns)
    with pytest.raises(
        ValueError, match=r"the utility is for 2 objectives, but the returns have 3"
    ):
        U.aet_value(U.ser(U.linear([0.5, 0.5])), jnp.ones((4, 3)))
