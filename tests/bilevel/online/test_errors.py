"""Bad input gets a clear error naming the argument; non-finite rounds stop the learner."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxopt_suite import bilevel
from jaxopt_suite.bilevel import online as ob
from jaxopt_suite.bilevel.online.problem import window_data
from tests.bilevel.online.conftest import (
    HAND_ORACLE,
    LEARNERS,
    NUM_ROUNDS,
    X0,
    Y0,
    hand_data,
    hand_stream,
    inner,
    outer,
)


@pytest.mark.parametrize(
    "make",
    [
        lambda: ob.wobo(window=0, inner_lr=0.1, outer_lr=0.1),
        lambda: ob.oagd(window=0, inner_lr=0.1, outer_lr=0.1),
        lambda: ob.sobow(window=0, inner_lr=0.1, outer_lr=0.1),
    ],
    ids=["wobo", "oagd", "sobow"],
)
def test_window_must_be_positive(make):
    with pytest.raises(ValueError, match="window must be >= 1, got 0"):
        make()


def test_window_must_be_an_int():
    with pytest.raises(TypeError, match="window must be a Python int"):
        ob.wobo(window=2.0, inner_lr=0.1, outer_lr=0.1)


@pytest.mark.parametrize(
    "make, name",
    [
        (lambda: ob.aobo(inner_lr=0.0, outer_lr=0.1), "inner_lr"),
        (lambda: ob.aobo(inner_lr=0.1, outer_lr=-0.5), "outer_lr"),
        (lambda: ob.aobo(inner_lr=0.1, outer_lr=0.1, aux_lr=0.0), "aux_lr"),
        (lambda: ob.aobo(inner_lr=0.1, outer_lr=0.1, tol=-1.0), "tol"),
        (lambda: ob.fsobo(inner_lr=-0.1, outer_lr=0.1), "inner_lr"),
        (lambda: ob.fsobo(inner_lr=0.1, outer_lr=float("nan")), "outer_lr"),
        (lambda: ob.wobo(window=2, inner_lr=0.1, outer_lr=0.0), "outer_lr"),
        (lambda: ob.wobo(window=2, inner_lr=0.1, outer_lr=0.1, delta=0.0), "delta"),
        (lambda: ob.oagd(window=2, inner_lr=0.0, outer_lr=0.1), "inner_lr"),
        (
            lambda: ob.oagd(window=2, inner_lr=0.1, outer_lr=0.1, neumann_alpha=-1.0),
            "neumann_alpha",
        ),
        (lambda: ob.sobow(window=2, inner_lr=0.1, outer_lr=-1.0), "outer_lr"),
    ],
)
def test_step_sizes_must_be_positive(make, name):
    with pytest.raises(ValueError, match=rf"^{name} must be finite and > 0"):
        make()


@pytest.mark.parametrize(
    "make, name",
    [
        (lambda: ob.aobo(inner_lr=0.25, outer_lr=0.5, tol=float("inf")), "tol"),
        (lambda: ob.wobo(window=2, inner_lr=0.25, outer_lr=0.5, delta=float("inf")), "delta"),
        (lambda: ob.sobow(window=2, inner_lr=0.25, outer_lr=0.5, decay=float("inf")), "decay"),
        (lambda: ob.fsobo(inner_lr=float("inf"), outer_lr=0.5), "inner_lr"),
    ],
)
def test_infinite_settings_are_refused(make, name):
    # an infinite tolerance never ran the inner loops: a learner that never moved, status OK
    with pytest.raises(ValueError, match=rf"^{name} must be finite and > 0, got inf"):
        make()


def test_window_hypergradient_checks_its_window():
    problem = hand_stream()
    oracle = ob.ExactOracle(lambda x, d: jnp.zeros(()), lambda x, d: jnp.ones_like(x))
    for window, error, message in (
        (0, ValueError, "window must be >= 1, got 0"),
        (-1, ValueError, "window must be >= 1, got -1"),
        (2.5, TypeError, "window must be a Python int, got 2.5"),
    ):
        with pytest.raises(error, match=re.escape(message)):
            ob.window_hypergradient(oracle, problem, X0, Y0, 3, window)
        with pytest.raises(error, match=re.escape(message)):
            window_data(problem, 3, window)


def test_quadratic_stream_settings_must_be_finite():
    for kwargs, message in (
        ({"inner_condition": float("inf")}, "inner_condition must be finite and >= 1"),
        ({"outer_condition": float("inf")}, "outer_condition must be finite and >= 1"),
        ({"lam": float("inf")}, "lam must be finite and >= 0"),
    ):
        with pytest.raises(ValueError, match=message):
            ob.quadratic_stream(**kwargs)
    stream = ob.quadratic_stream(drift="sqrt")
    with pytest.raises(ValueError, match="radius must be finite and >= 0, got -1"):
        stream.variation(10, -1.0)
    with pytest.raises(TypeError, match="num_rounds must be a Python int, got 2.5"):
        stream.variation(2.5, 1.0)
    with pytest.raises(ValueError, match="num_rounds must be >= 1, got -3"):
        stream.variation(-3, 1.0)


def test_wobo_variant_is_checked():
    with pytest.raises(ValueError, match="variant must be 'iterate' or 'single_loop'"):
        ob.wobo(window=2, inner_lr=0.1, outer_lr=0.1, variant="double_loop")


@pytest.mark.parametrize(
    "setting", [{"delta": 1e-9}, {"inner_tol": 1e-9}, {"max_inner": 1}, {"max_iters": 1}]
)
def test_wobo_single_loop_refuses_the_iterate_settings(setting):
    # they were accepted and ignored: a single-loop run with max_iters=1 was bit-identical
    # to one without
    ((name, value),) = setting.items()
    message = rf"^{name} applies only to variant='iterate'.*\(got {name}={value!r}\)"
    with pytest.raises(ValueError, match=message):
        ob.wobo(window=2, inner_lr=0.1, outer_lr=0.1, variant="single_loop", **setting)
    with pytest.raises(ValueError, match=r"^delta, max_iters apply only to variant='iterate'"):
        ob.wobo(window=2, inner_lr=0.1, outer_lr=0.1, variant="single_loop", delta=0.1, max_iters=5)
    ob.wobo(window=2, inner_lr=0.1, outer_lr=0.1, variant="iterate", **setting)  # used there


def test_wobo_iterate_defaults_are_unchanged():
    # delta = 1 / window, inner_tol = delta / 4, max_inner = max_iters = 1000
    problem = hand_stream()
    runs = [
        ob.run_online(problem, solver, X0, Y0, NUM_ROUNDS, oracle=HAND_ORACLE)
        for solver in (
            ob.wobo(window=4, inner_lr=0.25, outer_lr=0.5),
            ob.wobo(
                window=4,
                inner_lr=0.25,
                outer_lr=0.5,
                delta=0.25,
                inner_tol=0.0625,
                max_inner=1000,
                max_iters=1000,
            ),
        )
    ]
    for key in runs[0].history:
        np.testing.assert_array_equal(runs[0].history[key], runs[1].history[key], err_msg=key)
    with pytest.raises(ValueError, match="max_iters must be >= 1, got 0"):
        ob.wobo(window=2, inner_lr=0.1, outer_lr=0.1, max_iters=0)
    with pytest.raises(TypeError, match="max_inner must be a Python int"):
        ob.wobo(window=2, inner_lr=0.1, outer_lr=0.1, max_inner=2.5)


def test_oagd_neumann_alpha_defaults_to_inner_lr_and_is_checked():
    problem = hand_stream()
    runs = [
        ob.run_online(problem, solver, X0, Y0, NUM_ROUNDS)
        for solver in (
            ob.oagd(window=3, inner_lr=0.2, outer_lr=0.1),
            ob.oagd(window=3, inner_lr=0.2, outer_lr=0.1, neumann_alpha=0.2),
        )
    ]
    np.testing.assert_array_equal(runs[0].state.x, runs[1].state.x)
    np.testing.assert_array_equal(runs[0].state.v, runs[1].state.v)
    for alpha in (0.0, float("inf")):
        with pytest.raises(ValueError, match=r"^neumann_alpha must be finite and > 0"):
            ob.oagd(window=3, inner_lr=0.2, outer_lr=0.1, neumann_alpha=alpha)


def test_stream_from_arrays_checks_the_round_axis():
    with pytest.raises(ValueError, match=r"data\['a'\]: 5, data\['b'\]: 4"):
        ob.stream_from_arrays(outer, inner, {"a": np.zeros((5, 2)), "b": np.zeros((4, 2))})
    with pytest.raises(ValueError, match=r"data\['c'\] is a scalar"):
        ob.stream_from_arrays(outer, inner, {"a": np.zeros((5, 2)), "c": np.float32(1.0)})
    with pytest.raises(ValueError, match="data has no array leaves"):
        ob.stream_from_arrays(outer, inner, {})
    problem = ob.stream_from_arrays(outer, inner, {"a": np.zeros((5, 2)), "b": np.ones((5,))})
    assert problem.num_rounds == 5
    np.testing.assert_array_equal(problem.round_data(jnp.int32(4))["b"], 1.0)


def test_run_online_checks_its_arguments():
    problem = hand_stream()
    solver = LEARNERS["fsobo"]()
    with pytest.raises(ValueError, match="window must be >= 1, got 0"):
        ob.run_online(problem, solver, X0, Y0, 4, window=0)
    with pytest.raises(ValueError, match="regret_every must be >= 1"):
        ob.run_online(problem, solver, X0, Y0, 4, regret_every=0)
    with pytest.raises(ValueError, match="num_rounds must be >= 1"):
        ob.run_online(problem, solver, X0, Y0, 0)
    with pytest.raises(
        ValueError, match=rf"num_rounds={NUM_ROUNDS + 1} exceeds the stream's length \(8 rounds\)"
    ):
        ob.run_online(problem, solver, X0, Y0, NUM_ROUNDS + 1)
    with pytest.raises(ValueError, match="on_failure must be 'raise' or 'return'"):
        ob.run_online(problem, solver, X0, Y0, 4, on_failure="ignore")
    with pytest.raises(ValueError, match="eval_every must be >= 1"):  # even without eval_fn
        ob.run_online(problem, solver, X0, Y0, 4, eval_every=-5)
    with pytest.raises(TypeError, match="solver must be an OnlineSolver"):
        ob.run_online(problem, bilevel.soba(inner_lr=0.1, outer=0.1), X0, Y0, 4)
    with pytest.raises(TypeError, match="solver must be an OnlineSolver"):
        ob.run_online(problem, "aobo", X0, Y0, 4)
    # The whole stream is fine.
    assert ob.run_online(problem, solver, X0, Y0, NUM_ROUNDS).status == ob.OK


def test_init_rejects_an_offline_problem():
    offline = bilevel.BilevelProblem(outer, inner, lambda k: None, lambda k: None)
    with pytest.raises(
        TypeError, match="problem must be an OnlineBilevelProblem, got BilevelProblem"
    ):
        LEARNERS["aobo"]().init(offline, X0, Y0)


@pytest.mark.parametrize("kind", ["offline", "quadratic_stream"])
def test_run_online_rejects_a_non_online_problem(kind):
    if kind == "offline":
        problem = bilevel.BilevelProblem(outer, inner, lambda k: None, lambda k: None)
    else:  # passing the QuadraticStream wrapper instead of its .problem
        problem = ob.quadratic_stream()
    x0, y0 = (X0, Y0) if kind == "offline" else (problem.x0, problem.y0)
    with pytest.raises(TypeError, match="problem must be an OnlineBilevelProblem"):
        ob.run_online(problem, LEARNERS["aobo"](), x0, y0, 4)


def test_losses_that_cannot_take_x0_are_named():
    problem = hand_stream()
    solver = LEARNERS["aobo"]()
    with pytest.raises(ValueError, match=r"inner_loss\(x0, y0, round_data\(t\)\) failed"):
        solver.init(problem, {"x": X0}, Y0)
    with pytest.raises(ValueError, match=r"inner_loss\(x0, y0, round_data\(t\)\) failed"):
        solver.init(problem, jnp.zeros(3), Y0)  # (3,) * (2,) does not broadcast

    # Only the outer loss reads x["scale"]: the error must name outer_loss, not inner_loss.
    def inner_any(x, y, d):
        return inner(jax.tree.leaves(x)[0], y, d)

    def outer_named(x, y, d):
        return jnp.sum(x["scale"]) * jnp.sum(y * d["e"])

    data = {k: np.float32(v) for k, v in hand_data().items()}
    named = ob.stream_from_arrays(outer_named, inner_any, data)
    with pytest.raises(ValueError, match=r"^outer_loss\(x0, y0, round_data\(t\)\) failed"):
        solver.init(named, X0, Y0)
    solver.init(named, {"scale": X0}, Y0)  # the right structure passes
    with pytest.raises(TypeError, match=r"y0 must be floating point"):
        solver.init(problem, X0, jnp.zeros(2, jnp.int32))


def test_inner_loss_must_be_scalar():
    data = {k: np.float32(v) for k, v in hand_data().items()}
    problem = ob.stream_from_arrays(outer, lambda x, y, d: d["a"] * y**2, data)
    with pytest.raises(ValueError, match=r"inner_loss\(.*\) must return a scalar floating loss"):
        LEARNERS["fsobo"]().init(problem, X0, Y0)


def test_problem_fields_are_checked():
    with pytest.raises(TypeError, match="OnlineBilevelProblem.round_data must be callable"):
        ob.OnlineBilevelProblem(outer, inner, np.zeros(3))
    with pytest.raises(ValueError, match="num_rounds must be >= 1"):
        ob.OnlineBilevelProblem(outer, inner, lambda t: t, num_rounds=0)


# --- non-finite rounds ----------------------------------------------------------------------

BAD_ROUND = 3


def _nan_stream(leaves):
    data = hand_data()
    for leaf in leaves:
        data[leaf][BAD_ROUND] = np.nan
    return hand_stream(data)


@pytest.mark.parametrize("name", list(LEARNERS))
def test_a_nan_round_stops_the_run(name):
    problem = _nan_stream("abce")  # every leaf of round 3's data is NaN
    solver = LEARNERS[name]()
    with pytest.raises(
        FloatingPointError, match=rf"^{re.escape(solver.name)}: non-finite .* after round 3"
    ):
        ob.run_online(problem, solver, X0, Y0, NUM_ROUNDS)

    result = ob.run_online(problem, solver, X0, Y0, NUM_ROUNDS, on_failure="return")
    assert result.status != ob.OK and "after round 3" in result.message
    state = result.state
    # Rounds 0..3 were played; the state is frozen after the failing round.
    assert int(state.round) == BAD_ROUND + 1 and int(state.failed_round) == BAD_ROUND
    status = result.history["status"]
    assert np.all(status[:BAD_ROUND] == ob.OK) and np.all(status[BAD_ROUND:] == result.status)
    for key in ("inner", "hvp", "outer", "total"):
        assert np.all(result.history[key][BAD_ROUND:] == result.history[key][BAD_ROUND]), key
    # ... and equal to the state that four rounds played by hand leave.
    by_hand, step = solver.init(problem, X0, Y0), jax.jit(solver.step)
    for _ in range(BAD_ROUND + 1):
        by_hand = step(by_hand)
    np.testing.assert_array_equal(state.x, by_hand.x)
    np.testing.assert_array_equal(state.y, by_hand.y)
    # Stepping on by hand past the failure keeps the first failing round.
    for _ in range(2):
        by_hand = step(by_hand)
    assert int(by_hand.failed_round) == BAD_ROUND and int(by_hand.status) != ob.OK


@pytest.mark.parametrize("name", list(LEARNERS))
@pytest.mark.parametrize("leaf", ["c", "e"], ids=["inner_data", "outer_data"])
def test_nan_in_one_leaf_of_a_round_is_caught(name, leaf):
    # A NaN only in g_3's data (c) or only in f_3's data (e) must stop the learner too:
    # otherwise it plays on as if round 3 had been fine.
    solver = LEARNERS[name]()
    with pytest.raises(FloatingPointError, match="after round 3"):
        ob.run_online(_nan_stream(leaf), solver, X0, Y0, NUM_ROUNDS)


def test_divergent_steps_are_reported():
    # inner_lr = aux_lr = 1.5 with A's eigenvalues in [1, 4]: |1 - 1.5 * 4| = 5, so y and v
    # grow 5x per round and overflow float32 within ~60 rounds.
    s = ob.quadratic_stream(inner_condition=4.0, seed=0, drift="sqrt")
    solver = ob.fsobo(inner_lr=1.5, outer_lr=0.1)
    result = ob.run_online(s.problem, solver, s.x0, s.y0, 300, on_failure="return")
    assert result.status & (2 | 4)  # y or v
    failed = int(result.state.failed_round)
    assert 0 <= failed < 300 and int(result.state.round) == failed + 1
    assert jax.tree.all(jax.tree.map(lambda a: a.shape == (300,), result.history))
