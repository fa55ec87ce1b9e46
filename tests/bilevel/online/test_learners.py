"""The learners on quadratic streams: the offline limit, per-round guarantees,
determinism and compilation."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxopt_suite.bilevel import online as ob
from tests.bilevel.online.conftest import LEARNERS

KAPPA = 4.0  # outer_condition: M^T M has eigenvalues in [1 / KAPPA, 1]
LAM = 0.1  # so that grad_x f = LAM x is not zero and F's Hessian is M^T M + LAM I
T = 300


def _static():
    return ob.quadratic_stream(drift="static", outer_condition=KAPPA, lam=LAM, seed=0)


def _lambda_min_A(s):
    return float(jnp.linalg.eigvalsh(s.A)[0])


def _norm_B(s):
    return float(jnp.linalg.norm(s.B, ord=2))


# Each learner with the relative tolerance its convergence argument gives on the static
# stream ``s`` (x0 = 0, so the initial error is ||x*||; mu = 1 / KAPPA + LAM is F's strong
# convexity; a hypergradient error <= e per round leaves ||x - x*|| <= e / mu).
MU = 1.0 / KAPPA + LAM


def _single_loop_rtol(s):
    # Outer contraction (1 - eta mu)^T = 2.3e-5 with eta = 0.1, times 2 for the lag of the
    # one-step inner and linear-system updates behind x.
    return 2.0 * (1.0 - 0.1 * MU) ** T


def _aobo_rtol(s):
    # Inner residuals <= eps give y and v errors <= eps / lambda_min(A) each, so a
    # hypergradient error <= 2 ||B|| eps / lambda_min(A). Over the last 100 rounds
    # eps_t <= tol / sqrt(T - 100); the error before them contracts by (1 - 0.5 mu)^100.
    eps = AOBO_TOL / np.sqrt(T - 100)
    bias = 2.0 * _norm_B(s) * eps / (_lambda_min_A(s) * MU)
    return bias / float(jnp.linalg.norm(s.x_star(0))) + 2.0 * (1.0 - 0.5 * MU) ** 100


def _wobo_rtol(s):
    # Certified ||estimate|| <= delta with inner_tol = delta / 4: the exact gradient of
    # F_{t,W} = F is <= delta + 2 ||B|| (delta / 4) / lambda_min(A); 1e-6 for float32.
    grad = WOBO_DELTA * (1.0 + _norm_B(s) / (2.0 * _lambda_min_A(s)))
    return grad / MU / float(jnp.linalg.norm(s.x_star(0))) + 1e-6


AOBO_TOL, WOBO_DELTA = 1e-3, 1e-5
STATIC_CASES = {
    "aobo": (
        lambda: ob.aobo(inner_lr=0.25, outer_lr=0.5, tol=AOBO_TOL, tol_power=0.5),
        _aobo_rtol,
    ),
    "wobo_iterate": (
        lambda: ob.wobo(window=3, inner_lr=0.25, outer_lr=0.5, delta=WOBO_DELTA),
        _wobo_rtol,
    ),
    "fsobo": (lambda: ob.fsobo(inner_lr=0.25, outer_lr=0.1), _single_loop_rtol),
    "wobo_single_loop": (
        lambda: ob.wobo(window=3, inner_lr=0.25, outer_lr=0.1, variant="single_loop"),
        _single_loop_rtol,
    ),
    # alpha = 0.25 <= 1 / L_g (A's eigenvalues are in [1, 4]) with 60 terms: the Neumann
    # bias is 0.75^60 ~ 3e-8; alpha = 0.5 has |1 - 0.5 * 4| = 1 and a biased fixed point.
    # (0.25 is also the default, alpha = inner_lr: test_oagd_default_neumann_alpha_...)
    "oagd": (
        lambda: ob.oagd(
            window=3, inner_lr=0.25, outer_lr=0.1, neumann_alpha=0.25, neumann_terms=60
        ),
        _single_loop_rtol,
    ),
    "sobow": (lambda: ob.sobow(window=3, inner_lr=0.25, outer_lr=0.1), _single_loop_rtol),
}


@pytest.mark.parametrize("name", list(STATIC_CASES))
def test_static_stream_converges_to_the_offline_solution(name):
    make, rtol_of = STATIC_CASES[name]
    s = _static()
    rtol = rtol_of(s)
    assert rtol < 2e-3  # a bound loose enough to pass anything would make the test moot
    x_star = s.x_star(0)
    result = ob.run_online(s.problem, make(), s.x0, s.y0, T, oracle=s.oracle)
    assert result.status == ob.OK
    error = float(jnp.linalg.norm(result.state.x - x_star) / jnp.linalg.norm(x_star))
    assert error < rtol, (error, rtol)
    # The same holds for the recorded losses: F_t(x_t) -> min F.
    np.testing.assert_allclose(
        result.history["value"][-1], s.oracle.value(x_star, s.problem.round_data(0)), rtol=1e-3
    )


def test_fsobo_matches_the_single_loop_update_by_hand():
    s = ob.quadratic_stream(drift="static", lam=0.2, seed=5)
    A, B = (np.asarray(m, np.float64) for m in (s.A, s.B))
    b, c = (np.asarray(a, np.float64) for a in s.problem.round_data(0))
    beta, gamma, eta, lam = 0.25, 0.15, 0.1, 0.2
    x0 = jax.random.normal(jax.random.key(1), (4,))
    y0 = jax.random.normal(jax.random.key(2), (8,))
    solver = ob.fsobo(inner_lr=beta, aux_lr=gamma, outer_lr=eta)
    state = solver.init(s.problem, x0, y0)
    x, y, v = np.asarray(x0, np.float64), np.asarray(y0, np.float64), np.zeros(8)
    for _ in range(2):
        state = solver.step(state)
        # SOBA on (f_t, g_t): a y step, then the v step and the hypergradient at the new y
        # with the old v. grad_y g = A y - B x - b, grad^2_xy g v = -B^T v,
        # grad_x f = lam x, grad_y f = y - c.
        y = y - beta * (A @ y - B @ x - b)
        v, x = v - gamma * (y - c + A @ v), x - eta * (lam * x - B.T @ v)
    assert np.linalg.norm(v) > 0.1 and np.linalg.norm(x - np.asarray(x0)) > 1e-3
    # float32 arithmetic on O(1) numbers, two rounds.
    for got, want in ((state.x, x), (state.y, y), (state.v, v)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    chex.assert_trees_all_equal((state.round, state.inner, state.hvp, state.outer), (2, 2, 2, 2))


def test_aobo_solves_each_round_to_its_tolerance():
    s = _static()
    tol = 1.0
    solver = ob.aobo(inner_lr=0.25, outer_lr=0.5, tol=tol)
    state = solver.init(s.problem, s.x0, s.y0)
    step = jax.jit(solver.step)
    data = s.problem.round_data(0)
    previous_total = 0
    for t in range(50):
        x_t = state.x
        state = step(state)
        # y and v were solved at the played point x_t, to eps_t = tol / (t + 1).
        eps = tol / (t + 1)
        grad_y = jax.grad(s.problem.inner_loss, 1)(x_t, state.y, data)
        residual = s.A @ state.v + (state.y - data[1])
        assert float(jnp.linalg.norm(grad_y)) <= eps, t
        assert float(jnp.linalg.norm(residual)) <= eps * (1 + 1e-5), t
        assert int(state.total) == int(state.inner + state.hvp + state.outer)
        assert int(state.total) > previous_total
        assert int(state.outer) == t + 1
        previous_total = int(state.total)
    # Tighter tolerances cost more inner steps: the count really follows the loop.
    assert int(state.round_inner) >= 1
    assert int(state.inner) > 50


@pytest.mark.parametrize("drift", ["static", "iid"])
def test_wobo_iterate_certifies_delta_stationarity(drift):
    window, delta = 3, 1.0 / 3
    s = ob.quadratic_stream(drift=drift, outer_condition=KAPPA, seed=0)
    solver = ob.wobo(window=window, inner_lr=0.25, outer_lr=0.5)  # default delta = 1 / W
    # inner_tol = delta / 4 bounds each slot's y and v errors by 2 inner_tol /
    # lambda_min(A), so the estimate is within ||B|| 2 inner_tol / lambda_min(A) of the
    # exact window hypergradient; 1e-5 covers float32.
    slack = _norm_B(s) * 2 * (delta / 4) / _lambda_min_A(s) + 1e-5
    state = solver.init(s.problem, s.x0, s.y0)
    step = jax.jit(solver.step)
    window_grad = jax.jit(
        lambda x, t: ob.window_hypergradient(s.oracle, s.problem, x, None, t, window)
    )
    before = []
    for t in range(30):
        t = jnp.asarray(t, jnp.int32)
        before.append(float(jnp.linalg.norm(window_grad(state.x, t))))
        state = step(state)
        after = float(jnp.linalg.norm(window_grad(state.x, t)))
        assert after <= delta + slack, (int(t), after)
    # Not vacuous: the learner had to move to get there (at x_0 = 0, and for iid at the
    # points carried over from the previous round).
    assert max(before) > delta + slack
    assert bool(jnp.all(jnp.isfinite(state.x))) and int(state.status) == ob.OK


# The learners with data-dependent while_loops, the likeliest to differ between runs.
@pytest.mark.parametrize("name", ["aobo", "wobo_iterate"])
def test_runs_are_bit_identical(name):
    s = ob.quadratic_stream(drift="iid", seed=3)
    first, second = (
        ob.run_online(s.problem, LEARNERS[name](), s.x0, s.y0, 40, oracle=s.oracle, window=2)
        for _ in range(2)
    )
    assert set(first.history) == set(second.history)
    for key in first.history:
        np.testing.assert_array_equal(first.history[key], second.history[key], err_msg=key)
    chex.assert_trees_all_equal(first.state.x, second.state.x)
    chex.assert_trees_all_equal(first.state.memory, second.state.memory)
    assert first.regret == second.regret


@pytest.mark.parametrize("name", list(LEARNERS))
def test_step_compiles_once(name):
    s = ob.quadratic_stream(drift="sqrt", seed=0)
    solver = LEARNERS[name]()
    traces = []

    def counted(state):
        traces.append(1)
        return solver.step(state)

    step = jax.jit(counted)
    state = solver.init(s.problem, s.x0, s.y0)
    for _ in range(3):
        state = step(state)
    # The state coming out of a round has the same avals (dtypes, weak types, shapes) as
    # the one from init, so rounds 2 and 3 reuse round 1's trace.
    assert len(traces) == 1
    assert step._cache_size() == 1
    assert int(state.round) == 3
    chex.assert_trees_all_equal_shapes_and_dtypes(state.x, s.x0)
    chex.assert_trees_all_equal_shapes_and_dtypes(state.y, s.y0)


@pytest.mark.parametrize("name", list(LEARNERS))
def test_learners_run_under_x64(name):
    # jnp.sum of int32 window counts is int64 under x64: WOBO's and OAGD's counters left
    # int32, and run_online's lax.cond refused the two branch types (TypeError).
    with jax.enable_x64(True):
        s = ob.quadratic_stream(drift="iid", seed=2, dim_x=2, dim_y=3, dtype=jnp.float64)
        solver = LEARNERS[name]()
        state = jax.jit(solver.step)(solver.init(s.problem, s.x0, s.y0))
        result = ob.run_online(s.problem, solver, s.x0, s.y0, 5, oracle=s.oracle, window=3)
    for counts in (state, result.state):
        for key in ("round", "inner", "hvp", "outer", "round_inner", "status", "failed_round"):
            assert getattr(counts, key).dtype == jnp.int32, (key, getattr(counts, key).dtype)
    assert result.state.x.dtype == jnp.float64 and result.status == ob.OK
    # The same counts as in float32 (the window learners count their valid slots).
    s32 = ob.quadratic_stream(drift="iid", seed=2, dim_x=2, dim_y=3)
    expected = ob.run_online(s32.problem, LEARNERS[name](), s32.x0, s32.y0, 5).history
    if name not in ("aobo", "wobo_iterate"):  # tolerance loops may stop a step apart
        for key in ("inner", "hvp", "outer"):
            np.testing.assert_array_equal(result.history[key], expected[key], err_msg=key)


def test_oagd_default_neumann_alpha_is_inner_lr():
    # The default neumann_alpha was 0.5: with A's eigenvalues up to 4, |1 - 0.5 * 4| = 1,
    # the Neumann terms never decay and x stopped 36% away from x* on quadratic_stream().
    s = _static()
    assert float(jnp.linalg.eigvalsh(s.A)[-1]) > 2.0 / 0.5 - 1e-3  # the old default's edge
    default = ob.oagd(window=3, inner_lr=0.25, outer_lr=0.1, neumann_terms=60)
    explicit = ob.oagd(window=3, inner_lr=0.25, outer_lr=0.1, neumann_alpha=0.25, neumann_terms=60)
    runs = [
        ob.run_online(s.problem, m, s.x0, s.y0, T, oracle=s.oracle) for m in (default, explicit)
    ]
    chex.assert_trees_all_equal(runs[0].state.x, runs[1].state.x)
    x_star = s.x_star(0)
    error = float(jnp.linalg.norm(runs[0].state.x - x_star) / jnp.linalg.norm(x_star))
    assert error < _single_loop_rtol(s), error
