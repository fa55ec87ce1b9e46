"""Local-regret accounting against numpy, the quadratic stream's closed forms, and the
power-law fit."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxopt_suite.bilevel import online as ob
from tests.bilevel.online.conftest import (
    HAND_ORACLE,
    LEARNERS,
    NUM_ROUNDS,
    X0,
    Y0,
    hand_data,
    hand_stream,
    np_F,
    np_grad_F,
)


def _played_points(problem, solver, num_rounds):
    """``x_0, ..., x_{T-1}``: the points played before each round, by stepping by hand."""
    state = solver.init(problem, X0, Y0)
    step = jax.jit(solver.step)
    xs = []
    for _ in range(num_rounds):
        xs.append(np.asarray(state.x, np.float64))
        state = step(state)
    return xs


def _np_terms(xs, data, window):
    """``||(1/w) sum_{i<w, t-i>=0} nabla F_{t-i}(x_t)||^2`` for every round, in float64."""
    terms = []
    for t, x in enumerate(xs):
        grad = sum(np_grad_F(x, data, t - i) for i in range(window) if t - i >= 0) / window
        terms.append(float(grad @ grad))
    return np.array(terms)


@pytest.mark.parametrize("name, window", [("aobo", 1), ("aobo", 3), ("fsobo", 1), ("sobow", 3)])
def test_regret_terms_match_numpy(name, window):
    data = hand_data()
    problem = hand_stream(data)
    solver = LEARNERS[name]()
    xs = _played_points(problem, solver, NUM_ROUNDS)
    # The learner moves: otherwise a charge at the wrong x could not be told apart.
    assert np.linalg.norm(xs[-1] - xs[0]) > 1e-2
    result = ob.run_online(problem, solver, X0, Y0, NUM_ROUNDS, oracle=HAND_ORACLE, window=window)
    expected = _np_terms(xs, data, window)
    # float32 losses on O(1) data: a few ulps of relative error per term.
    np.testing.assert_allclose(result.history["regret_term"], expected, rtol=2e-5, atol=1e-7)
    np.testing.assert_allclose(result.regret, expected.sum(), rtol=2e-5)
    values = [np_F(x, data, t) for t, x in enumerate(xs)]
    np.testing.assert_allclose(result.history["value"], values, rtol=2e-5, atol=1e-7)
    assert result.estimated is False and result.status == ob.OK and result.message == "OK"
    assert int(result.state.round) == NUM_ROUNDS


def test_window_terms_differ_from_window_one():
    # Guards the test above: with w = 3 the (1/w)-weighted window sum is a different number.
    data = hand_data()
    xs = _played_points(hand_stream(data), LEARNERS["fsobo"](), NUM_ROUNDS)
    assert np.all(np.abs(_np_terms(xs, data, 3) - _np_terms(xs, data, 1)) > 1e-4)


def test_regret_every_charges_every_kth_round():
    data = hand_data()
    problem = hand_stream(data)
    solver = LEARNERS["fsobo"]()
    xs = _played_points(problem, solver, NUM_ROUNDS)
    expected = _np_terms(xs, data, 3)
    result = ob.run_online(
        problem, solver, X0, Y0, NUM_ROUNDS, oracle=HAND_ORACLE, window=3, regret_every=2
    )
    terms = result.history["regret_term"]
    assert np.all(np.isnan(terms[1::2]))
    np.testing.assert_allclose(terms[0::2], expected[0::2], rtol=2e-5, atol=1e-7)
    np.testing.assert_allclose(result.regret, 2.0 * expected[0::2].sum(), rtol=2e-5)
    assert result.estimated is True
    # The uncharged rounds still record F_t(x_t).
    assert np.all(np.isfinite(result.history["value"]))


def test_sampled_regret_is_scaled_by_the_rounds_it_stands_for():
    # a constant hypergradient costs every round the same, so the estimate is exact: the
    # ceil(T / k) charged rounds stand for all T of them (k * ceil(T / k) overcounted)
    constant = ob.ExactOracle(lambda x, d: jnp.zeros(()), lambda x, d: jnp.ones_like(x))
    solver = LEARNERS["fsobo"]()
    exact = 2.0 * NUM_ROUNDS  # ||(1, 1)||^2 per round
    for every in (1, 2, 3, 8, 100):
        result = ob.run_online(
            hand_stream(), solver, X0, Y0, NUM_ROUNDS, oracle=constant, regret_every=every
        )
        np.testing.assert_allclose(result.regret, exact, rtol=1e-6, err_msg=f"every={every}")


def test_no_oracle_charges_nothing():
    result = ob.run_online(hand_stream(), LEARNERS["fsobo"](), X0, Y0, NUM_ROUNDS)
    assert np.isnan(result.regret) and result.estimated is True
    assert np.all(np.isnan(result.history["regret_term"]))


def test_history_counts_are_cumulative_and_consistent():
    result = ob.run_online(hand_stream(), LEARNERS["aobo"](), X0, Y0, NUM_ROUNDS)
    h = result.history
    np.testing.assert_array_equal(h["total"], h["inner"] + h["hvp"] + h["outer"])
    for key in ("inner", "hvp", "outer", "total"):
        assert np.all(np.diff(h[key]) >= 0), key
        assert h[key].shape == (NUM_ROUNDS,)
    # One hypergradient step (one outer gradient) per AOBO round.
    np.testing.assert_array_equal(h["outer"], np.arange(1, NUM_ROUNDS + 1))
    np.testing.assert_array_equal(np.diff(h["inner"]), h["round_inner"][1:])
    assert h["round_inner"][0] == h["inner"][0] >= 1
    assert int(result.state.total) == h["total"][-1]


# Per-round oracle counts as documented, with tolerances so loose that AOBO's and WOBO's
# loops stop at their first check (one gradient / residual evaluation each). n = the
# number of valid window slots, min(t + 1, 3).
PER_ROUND_COUNTS = {
    # inner: 1 gradient; hvp: 1 residual + 1 cross term; outer: 1.
    "aobo": (lambda: ob.aobo(inner_lr=0.25, outer_lr=0.5, tol=1e9), lambda n: (1, 2, 1)),
    "fsobo": (lambda: LEARNERS["fsobo"](), lambda n: (1, 1, 1)),
    "wobo_iterate": (
        lambda: ob.wobo(window=3, inner_lr=0.25, outer_lr=0.5, delta=1e9),
        lambda n: (n, 2 * n, n),
    ),
    "wobo_single_loop": (lambda: LEARNERS["wobo_single_loop"](), lambda n: (n, n, n)),
    # inner_passes = 2 over the n window functions; neumann_terms - 1 products + cross term.
    "oagd": (
        lambda: ob.oagd(window=3, inner_lr=0.25, outer_lr=0.1, inner_passes=2, neumann_terms=4),
        lambda n: (2 * n, 4, 1),
    ),
    # inner_steps; cg_steps + 1 products (initial residual) + cross term.
    "sobow": (
        lambda: ob.sobow(window=3, inner_lr=0.25, outer_lr=0.1, cg_steps=3, inner_steps=2),
        lambda n: (2, 5, 1),
    ),
}


@pytest.mark.parametrize("name", list(PER_ROUND_COUNTS))
def test_per_round_oracle_counts(name):
    make, counts = PER_ROUND_COUNTS[name]
    h = ob.run_online(hand_stream(), make(), X0, Y0, 5).history
    expected = np.array([counts(min(t + 1, 3)) for t in range(5)])
    got = np.diff(np.stack([h["inner"], h["hvp"], h["outer"]], axis=1), axis=0, prepend=0)
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(h["round_inner"], expected[:, 0])


# --- quadratic streams ---------------------------------------------------------------------


def test_static_stream_has_no_variation():
    s = ob.quadratic_stream(drift="static", seed=1)
    assert s.variation(200, radius=5.0) == 0.0
    drifting = ob.quadratic_stream(drift="sqrt", seed=1)
    assert drifting.variation(200, radius=5.0) > 1.0


def test_sqrt_drift_variation_grows_like_sqrt_T():
    s = ob.quadratic_stream(drift="sqrt", scale=1.0, seed=0)
    ratio = s.variation(400, radius=5.0) / s.variation(100, radius=5.0)
    # sqrt(400 / 100) = 2; the angle 2 (sqrt(T) - 1) gives 38 / 18 = 2.1 for the path term.
    assert 1.6 < ratio < 2.4
    # Constant angular speed: V_T ~ T, so the same ratio is near 4 -- the bound above
    # separates the two regimes.
    linear = ob.quadratic_stream(drift="linear", scale=1.0, seed=0)
    assert linear.variation(400, radius=5.0) / linear.variation(100, radius=5.0) > 3.0


def test_variation_matches_a_brute_force_sup():
    # V_T = sum_t sup_{||x|| <= R} |F_t(x) - F_{t-1}(x)|; the sup of |linear + const| over
    # the ball is attained on the sphere. With dim_x = 2, 20000 points on the circle are
    # 3e-4 rad apart, so the sampled max is within (3e-4)^2 / 2 (relative) of the sup;
    # 1e-3 leaves room for the float32 values of F.
    s = ob.quadratic_stream(drift="iid", dim_x=2, dim_y=3, seed=3, outer_condition=3.0)
    radius, T = 2.0, 6
    angles = np.linspace(0.0, 2 * np.pi, 20000, endpoint=False)
    circle = jnp.asarray(radius * np.stack([np.cos(angles), np.sin(angles)], axis=1))

    @jax.jit
    def values(t):
        return jax.vmap(lambda x: s.oracle.value(x, s.problem.round_data(t)))(circle)

    F = np.stack([np.asarray(values(jnp.int32(t)), np.float64) for t in range(T)])
    brute = np.sum(np.max(np.abs(np.diff(F, axis=0)), axis=1))
    assert brute > 0.1
    np.testing.assert_allclose(s.variation(T, radius), brute, rtol=1e-3)


def test_oracle_matches_autodiff_through_y_star():
    s = ob.quadratic_stream(drift="iid", lam=0.3, seed=2, outer_condition=5.0)
    t = jnp.asarray(5, jnp.int32)
    _, c = s.problem.round_data(t)
    x = jax.random.normal(jax.random.key(7), (4,))

    def F(x_):
        r = s.y_star(x_, t) - c
        return 0.5 * r @ r + 0.5 * s.lam * x_ @ x_

    data = s.problem.round_data(t)
    # float32 linear solves with cond(A) = 4: ~1e-6 relative.
    np.testing.assert_allclose(
        s.oracle.hypergradient(x, data), jax.grad(F)(x), rtol=1e-4, atol=1e-5
    )
    np.testing.assert_allclose(s.oracle.value(x, data), F(x), rtol=1e-5)
    # y_star minimises g_t(x, .), and x_star is a stationary point of F_t.
    grad_y = jax.grad(s.problem.inner_loss, 1)(x, s.y_star(x, t), data)
    assert float(jnp.linalg.norm(grad_y)) < 1e-4
    grad_at_star = s.oracle.hypergradient(s.x_star(t), data)
    assert float(jnp.linalg.norm(grad_at_star)) < 1e-4
    assert float(jnp.linalg.norm(s.oracle.hypergradient(x, data))) > 0.1


def test_smoothness_is_the_largest_curvature_of_F():
    s = ob.quadratic_stream(outer_condition=10.0, lam=0.5, seed=4)
    hessian = jax.jit(jax.hessian(lambda x: s.oracle.value(x, s.problem.round_data(0))))(s.x0)
    eig = np.linalg.eigvalsh(np.asarray(hessian, np.float64))
    np.testing.assert_allclose(s.smoothness(), eig[-1], rtol=1e-4)
    # outer_condition sets the spread of M^T M: eigenvalues of F's Hessian in [0.1, 1] + lam.
    np.testing.assert_allclose(eig[0], 0.1 + 0.5, rtol=1e-4)


# --- fit_power_law ------------------------------------------------------------------------


def test_fit_power_law_recovers_the_exponent():
    xs = np.array([10.0, 100.0, 1000.0, 10000.0])
    a, c = ob.fit_power_law(xs, 3.0 * xs**0.5)
    np.testing.assert_allclose([a, c], [0.5, 3.0], rtol=1e-10)
    # Multiplicative noise of +-5% moves the slope by at most log(1.05/0.95)/log(10^3).
    noisy = 2.0 * xs**1.5 * np.array([1.05, 0.95, 1.05, 0.95])
    a, _ = ob.fit_power_law(list(xs), list(noisy))
    assert abs(a - 1.5) < 0.02


@pytest.mark.parametrize(
    "xs, ys, match",
    [
        ([1.0, 2.0, 3.0], [1.0, 2.0], "equal length"),
        ([1.0], [1.0], "equal length >= 2"),
        ([[1.0, 2.0]], [[1.0, 2.0]], "1-D"),
        ([0.0, 1.0, 2.0], [1.0, 2.0, 3.0], "positive"),
        ([1.0, 2.0, 3.0], [1.0, -2.0, 3.0], "positive"),
        ([2.0, 2.0, 2.0], [1.0, 2.0, 3.0], "equal"),
    ],
)
def test_fit_power_law_rejects_bad_input(xs, ys, match):
    with pytest.raises(ValueError, match=match):
        ob.fit_power_law(xs, ys)


def test_fit_power_law_rejects_nan():
    with pytest.raises(ValueError, match="finite"):
        ob.fit_power_law([1.0, 2.0, 4.0], [1.0, np.nan, 3.0])


def test_repeated_runs_compile_once():
    # each call jitted a fresh scan: 1.1 s a run on a 2x3 quadratic, every time
    from jaxopt_suite.bilevel.online import regret

    qs = ob.quadratic_stream(drift="sqrt", dim_x=2, dim_y=3)
    solver = ob.fsobo(inner_lr=0.2, outer_lr=0.1)
    first = ob.run_online(qs.problem, solver, qs.x0, qs.y0, 20, oracle=qs.oracle)
    again = ob.run_online(qs.problem, solver, qs.x0, qs.y0, 20, oracle=qs.oracle)
    go = regret._compiled_rounds(qs.problem, solver, qs.oracle, 1, 1, None, None, 20)
    assert go._cache_size() == 1
    assert first.regret == again.regret


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_low_precision_points_are_charged_in_float32(dtype):
    # |grad| = 300 in every coordinate: 300^2 overflows float16 (max 65504), and a
    # bfloat16 sum stalls once the total passes 2^8 times the term (it returned 512 for
    # 6000). The terms are squared in float32, the regret summed in float64.
    big = ob.ExactOracle(lambda x, d: jnp.zeros((), x.dtype), lambda x, d: jnp.full_like(x, 300.0))
    s = ob.quadratic_stream(drift="iid", seed=2, dim_x=2, dim_y=3)
    solver = ob.fsobo(inner_lr=0.25, outer_lr=0.1)
    x0, y0 = s.x0.astype(dtype), s.y0.astype(dtype)
    rounds = 3000
    result = ob.run_online(s.problem, solver, x0, y0, rounds, oracle=big)
    assert result.state.x.dtype == dtype and result.status == ob.OK
    terms = result.history["regret_term"]
    assert terms.dtype == np.float32
    np.testing.assert_array_equal(terms, 2 * 300.0**2)  # exact in float32
    assert result.regret == rounds * 2 * 300.0**2  # exact in float64


def test_regret_is_summed_in_float64():
    # one term of 1e8 and seven of 1: a float32 sum has no 1e8 + 7 (its neighbours are
    # 8 apart there) and lost the small terms
    data = hand_data()
    data["g"] = np.zeros((NUM_ROUNDS, 2))
    data["g"][:, 0] = 1.0
    data["g"][0, 0] = 1e4
    oracle = ob.ExactOracle(lambda x, d: jnp.zeros(()), lambda x, d: d["g"])
    result = ob.run_online(
        hand_stream(data), LEARNERS["fsobo"](), X0, Y0, NUM_ROUNDS, oracle=oracle
    )
    np.testing.assert_array_equal(result.history["regret_term"], [1e8] + [1.0] * 7)
    assert result.regret == 1e8 + 7
