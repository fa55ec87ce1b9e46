"""GAE by hand, conjugate gradient against a direct solve, Fisher-vector products against
the explicit Hessian, the CPO step in each of its five cases against the optimum of the
linearised problem, and the line search's acceptance rules."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxopt_suite.rl import (
    backtracking_line_search,
    conjugate_gradient,
    cpo_direction,
    fisher_vector_product,
    gae,
)


def test_gae_matches_a_hand_computed_example():
    # one env, 4 steps: the episode terminates after step 1, step 3 is truncated
    rewards = jnp.array([[1.0], [2.0], [0.5], [1.5]])
    values = jnp.array([[0.3], [0.2], [0.7], [0.4]])
    termination = jnp.array([[0.0], [1.0], [0.0], [0.0]])
    truncation = jnp.array([[0.0], [0.0], [0.0], [1.0]])
    bootstrap = jnp.array([9.0])  # ignored: the last step is truncated
    gamma, lam = 0.9, 0.8
    adv, targets = jax.jit(gae, static_argnames=())(
        rewards, values, bootstrap, termination, truncation, discount=gamma, lambda_=lam
    )
    # by hand, backwards
    a3 = 0.0  # truncated
    d2 = 0.5 + gamma * 0.4 - 0.7
    a2 = d2  # the recursion is cut by the truncation after it
    d1 = 2.0 - 0.2  # terminal: no bootstrap
    a1 = d1
    d0 = 1.0 + gamma * 0.2 - 0.3
    a0 = d0 + gamma * lam * a1
    np.testing.assert_allclose(adv[:, 0], [a0, a1, a2, a3], rtol=1e-6)
    np.testing.assert_allclose(targets, adv + values, rtol=1e-6)


def test_gae_without_boundaries_is_the_discounted_sum_of_deltas(key):
    T, B = 7, 3
    k1, k2, k3 = jax.random.split(key, 3)
    r = jax.random.normal(k1, (T, B))
    v = jax.random.normal(k2, (T, B))
    boot = jax.random.normal(k3, (B,))
    zeros = jnp.zeros((T, B))
    adv, _ = gae(r, v, boot, zeros, zeros, discount=0.97, lambda_=0.9)
    nxt = np.concatenate([np.asarray(v[1:]), np.asarray(boot)[None]], axis=0)
    deltas = np.asarray(r) + 0.97 * nxt - np.asarray(v)
    w = (0.97 * 0.9) ** np.arange(T)
    expected = np.stack([(w[: T - t, None] * deltas[t:]).sum(0) for t in range(T)])
    np.testing.assert_allclose(adv, expected, rtol=1e-5, atol=1e-6)
    # lambda = 1, gamma = 1: the advantage is the return to go plus bootstrap minus V
    adv1, targets1 = gae(r, v, boot, zeros, zeros, discount=1.0, lambda_=1.0)
    togo = np.cumsum(np.asarray(r)[::-1], axis=0)[::-1] + np.asarray(boot)[None, :]
    np.testing.assert_allclose(targets1, togo, rtol=1e-5, atol=1e-5)


def test_gae_rejects_mismatched_shapes():
    r = jnp.zeros((4, 2))
    with pytest.raises(ValueError, match="values must have the rewards' shape"):
        gae(r, jnp.zeros((4, 3)), jnp.zeros(2), r, r, discount=0.9, lambda_=0.9)
    with pytest.raises(ValueError, match="bootstrap_value must have shape"):
        gae(r, r, jnp.zeros(3), r, r, discount=0.9, lambda_=0.9)
    with pytest.raises(ValueError, match="truncation must have"):
        gae(r, r, jnp.zeros(2), r, jnp.zeros(4), discount=0.9, lambda_=0.9)
    # a NaN discount gave NaN advantages, 1.5 and 2.0 numbers without meaning
    for discount, lambda_, name in ((float("nan"), 0.9, "discount"), (1.5, 0.9, "discount"),
                                    (0.9, 2.0, "lambda_")):  # fmt: skip
        with pytest.raises(ValueError, match=f"{name} must lie in \\[0, 1\\]"):
            gae(r, r, jnp.zeros(2), r, r, discount=discount, lambda_=lambda_)


def test_gae_of_integer_rewards_is_the_float_one():
    # integer rewards made the scan's carry int32 against float32 advantages
    ints = jnp.array([1, 2, 3])
    zeros = jnp.zeros(3)
    got = gae(ints, zeros, jnp.zeros(()), zeros, zeros, discount=0.5, lambda_=1.0)
    want = gae(ints.astype(jnp.float32), zeros, jnp.zeros(()), zeros, zeros, discount=0.5,
               lambda_=1.0)  # fmt: skip
    np.testing.assert_allclose(got[0], want[0])
    np.testing.assert_allclose(got[0], [2.75, 3.5, 3.0])


def test_conjugate_gradient_matches_a_direct_solve(key):
    n = 12
    m = jax.random.normal(key, (n, n))
    A = m @ m.T + 0.5 * jnp.eye(n)
    b = jax.random.normal(jax.random.fold_in(key, 1), (n,))
    result = jax.jit(
        lambda b: conjugate_gradient(lambda x: A @ x, b, max_iterations=50, tolerance=1e-20)
    )(b)
    np.testing.assert_allclose(result.x, np.linalg.solve(np.asarray(A), np.asarray(b)), rtol=1e-3)
    assert int(result.iterations) <= 50
    # exact arithmetic would stop after n steps; it must at least not stop early
    assert int(result.iterations) >= n
    short = conjugate_gradient(lambda x: A @ x, b, max_iterations=3)
    assert int(short.iterations) == 3 and float(short.residual_norm) > 1e-3


def test_fisher_vector_product_is_the_kl_hessian(key):
    # a Gaussian policy's KL from a fixed reference, at a point off the reference
    params = {"mu": jnp.array([0.2, -0.1, 0.4]), "log_std": jnp.array([0.1, -0.3, 0.0])}
    ref_mu, ref_log_std = jnp.zeros(3), jnp.zeros(3)

    def kl(p):
        var, ref_var = jnp.exp(2 * p["log_std"]), jnp.exp(2 * ref_log_std)
        return jnp.sum(
            p["log_std"] - ref_log_std + (ref_var + (ref_mu - p["mu"]) ** 2) / (2 * var) - 0.5
        )

    from jax.flatten_util import ravel_pytree

    flat, unravel = ravel_pytree(params)
    H = jax.hessian(lambda z: kl(unravel(z)))(flat)
    product = fisher_vector_product(kl, params, damping=0.1)
    v = jax.random.normal(key, flat.shape)
    np.testing.assert_allclose(jax.jit(product)(v), H @ v + 0.1 * v, rtol=1e-5, atol=1e-6)


def _qcqp_optimum(g, b, c, H, delta, samples=400_001):
    """The 2-D problem min g.d s.t. c + b.d <= 0, d.H.d / 2 <= delta, by its extreme points:
    a fine sweep of the ellipse's boundary and the line's two crossings of it; when the
    set is empty, the recovery problem min b.d on the ellipse."""
    L = np.linalg.cholesky(np.linalg.inv(H))  # d = sqrt(2 delta) L (cos, sin)
    t = np.linspace(0.0, 2 * np.pi, samples)
    ring = np.sqrt(2 * delta) * (L @ np.stack([np.cos(t), np.sin(t)]))
    feasible = c + b @ ring <= 0
    if not feasible.any():
        return ring[:, np.argmin(b @ ring)], False
    candidates = ring[:, feasible]
    # the line b.d = -c crosses the boundary where b.(rL z) = -c, |z| = 1
    w = np.sqrt(2 * delta) * (L.T @ b)
    norm = np.linalg.norm(w)
    if abs(c) <= norm:
        base = -c * w / norm**2
        perp = np.array([-w[1], w[0]]) / norm
        h = np.sqrt(max(0.0, 1 - (c / norm) ** 2))
        for z in (base + h * perp, base - h * perp):
            candidates = np.concatenate([candidates, np.sqrt(2 * delta) * (L @ z)[:, None]], 1)
    return candidates[:, np.argmin(g @ candidates)], True


H2 = np.array([[2.0, 0.3], [0.3, 0.5]])
CASES = {
    # name: (g, b, c, expected case)
    "pure trpo (b = 0)": ([1.0, -0.5], [0.0, 0.0], -0.2, 4),
    "trust region inside the constraint": ([1.0, -0.5], [0.3, 0.2], -2.0, 3),
    "feasible, the constraint binds": ([1.0, -0.5], [-1.0, 0.2], -0.05, 2),
    "feasible, the constraint is slack at the TRPO step": ([1.0, -0.5], [1.0, -0.4], -0.05, 2),
    "infeasible, recoverable": ([1.0, -0.5], [0.6, 0.8], 0.1, 1),
    "infeasible, recovery only": ([1.0, -0.5], [0.6, 0.8], 2.0, 0),
}


@pytest.mark.parametrize("name", list(CASES))
def test_cpo_direction_solves_the_linearised_problem_in_each_case(name):
    g, b, c, expected = CASES[name]
    g, b = np.array(g), np.array(b)
    delta = 0.05
    Hinv = np.linalg.inv(H2)
    step = jax.jit(cpo_direction, static_argnames=())(
        jnp.asarray(g, jnp.float32),
        jnp.asarray(b, jnp.float32),
        jnp.float32(c),
        jnp.asarray(Hinv @ g, jnp.float32),
        jnp.asarray(Hinv @ b, jnp.float32),
        max_kl=delta,
    )
    chex.assert_shape(step.x, (2,))
    assert int(step.case) == expected
    d = -np.asarray(step.x, np.float64)
    best, recoverable = _qcqp_optimum(g, b, c, H2, delta)
    assert recoverable == (expected != 0)
    # the sweep's grid limits how close the reference is: 2 pi / 4e5 of the radius
    np.testing.assert_allclose(d, best, atol=2e-4)
    assert 0.5 * d @ H2 @ d <= delta * (1 + 1e-4)
    if expected:
        assert c + b @ d <= 1e-5
    # the closed forms (Achiam et al. 2017): TRPO's step where the constraint does not
    # matter, the recovery step along -H^-1 b; in cases 1 and 2 the multipliers solve the
    # KKT conditions x = (H^-1 g + nu H^-1 b) / lambda, x.H.x = 2 delta and, where nu > 0,
    # b.x = c, which give a quadratic in nu (solved here, independently of the dual the code
    # maximises)
    x = np.asarray(step.x, np.float64)
    q, r, s_ = g @ Hinv @ g, g @ Hinv @ b, b @ Hinv @ b
    lam, nu = float(step.lagrange_kl), float(step.lagrange_cost)
    if expected >= 3:
        np.testing.assert_allclose(x, np.sqrt(2 * delta / q) * Hinv @ g, rtol=1e-5)
        assert nu == 0.0
    elif expected == 0:
        np.testing.assert_allclose(x, np.sqrt(2 * delta / s_) * Hinv @ b, rtol=1e-5)
    elif nu == 0.0:  # the constraint is slack: TRPO's multiplier
        assert lam == pytest.approx(np.sqrt(q / (2 * delta)), rel=1e-5)
        assert c - b @ x <= 1e-6  # c + b.d <= 0 at d = -x
    else:
        # lambda = (r + nu s) / c from b.x = c, into x.H.x = 2 delta
        k = 2 * delta / c**2
        roots = np.roots([s_ - k * s_**2, 2 * r - 2 * k * r * s_, q - k * r**2])
        candidates = []
        for root in roots[np.isreal(roots)].real:
            lam_root = (r + root * s_) / c
            if root >= 0 and lam_root > 0:
                x_root = (Hinv @ g + root * Hinv @ b) / lam_root
                candidates.append((-(g @ x_root), root, lam_root))  # the objective g.d
        _, nu_ref, lam_ref = min(candidates)
        assert nu == pytest.approx(nu_ref, rel=1e-3) and lam == pytest.approx(lam_ref, rel=1e-3)


def test_line_search_accepts_the_first_point_that_satisfies_every_rule():
    # loss (theta - 1)^2 / 2, cost theta, "kl" theta^2 / 2 around 0
    def evaluate(theta):
        t = theta[0]
        return 0.5 * (t - 1.0) ** 2, t, 0.5 * t * t

    from jaxopt_suite.rl.trust_region import CPODirection

    direction = CPODirection(jnp.array([-2.0]), jnp.int32(2), jnp.float32(1), jnp.float32(0))
    theta0 = jnp.zeros(1)
    search = jax.jit(
        lambda d, c: backtracking_line_search(evaluate, theta0, d, c, max_kl=0.02, decay=0.5)
    )
    # trial j moves to 2 * 0.5^j; kl <= 0.02 needs theta <= 0.2, i.e. j >= 4; the cost may
    # rise by -c = 0.3, and the loss falls for every theta in (0, 2)
    out = search(direction, jnp.float32(-0.3))
    assert bool(out.accepted) and int(out.backtracks) == 4
    np.testing.assert_allclose(out.params, [0.125])
    # allowed cost rise 0.1: theta <= 0.1, j >= 5
    out = search(direction, jnp.float32(-0.1))
    assert int(out.backtracks) == 5
    # infeasible start (c > 0) with a step that raises the cost: never accepted
    out = search(direction, jnp.float32(0.5))
    assert not bool(out.accepted) and int(out.backtracks) == 100
    np.testing.assert_allclose(out.params, theta0)
    # a loss that rises is refused in case 2, allowed in a recovery case
    # (10 trials: past about 20 the loss's rise is below float32's resolution at 0.5)
    up = CPODirection(jnp.array([0.1]), jnp.int32(2), jnp.float32(1), jnp.float32(0))
    short = backtracking_line_search(evaluate, theta0, up, jnp.float32(-1.0), max_kl=0.02,
                                     decay=0.5, max_backtracks=10)  # fmt: skip
    assert not bool(short.accepted) and int(short.backtracks) == 10
    recovery = up._replace(case=jnp.int32(0))
    out = search(recovery, jnp.float32(-1.0))
    assert bool(out.accepted) and int(out.backtracks) == 0


def test_the_surrogates_episode_count_follows_the_episodes_that_ended():
    # N was fixed at steps / episode_length: where episodes end early (at a goal, by a fall)
    # every per-episode mean of the cost surrogate came out episode_length / mean length
    # times too large
    from jaxopt_suite.rl.constrained import episodes_in
    from jaxopt_suite.rl.rollout import Transition

    steps, envs_ = 10, 4
    zeros = jnp.zeros((steps, envs_))
    done = zeros.at[3, 0].set(1.0).at[7, 0].set(1.0).at[9, 2].set(1.0)
    length = zeros.at[3, 0].set(4.0).at[7, 0].set(4.0).at[9, 2].set(10.0)
    batch = Transition(
        obs=jnp.zeros((steps, envs_, 1)), action=jnp.zeros((steps, envs_, 1)),
        log_prob=zeros, reward=zeros, cost=zeros, cost_increment=zeros, termination=zeros,
        truncation=zeros, episode_done=done, episode_return=zeros, episode_cost=zeros,
        episode_max_cost=zeros, episode_length=length,
    )  # fmt: skip
    # three episodes ended, of mean length 6: 40 steps stand for 40 / 6 episodes
    np.testing.assert_allclose(float(jax.jit(episodes_in, static_argnums=1)(batch, 10)), 40 / 6)
    none_ended = batch._replace(episode_done=zeros)
    np.testing.assert_allclose(float(episodes_in(none_ended, 10)), 4.0)


def test_trust_region_pieces_check_concrete_settings():
    # each returned something that looked like a result: x = 0 after no iteration, a NaN
    # step, or a search that rejected every trial
    matvec, b = (lambda v: 2.0 * v), jnp.ones(2)
    for kwargs, match in (
        ({"tolerance": float("nan")}, "tolerance must be >= 0"),
        ({"max_iterations": -3}, "max_iterations must be an integer >= 1"),
    ):
        with pytest.raises(ValueError, match=match):
            conjugate_gradient(matvec, b, **kwargs)
    g = jnp.array([1.0, 0.0])
    with pytest.raises(ValueError, match="max_kl must be finite and > 0, got -0.01"):
        cpo_direction(g, g, jnp.array(-1.0), g, g, max_kl=-0.01)
    direction = cpo_direction(g, g, jnp.array(-1.0), g, g, max_kl=0.01)

    def evaluate(flat):
        return jnp.sum(flat), jnp.sum(flat), jnp.sum(flat**2)

    for kwargs, match in (
        ({"max_kl": float("nan")}, "max_kl must be finite and > 0"),
        ({"max_kl": 0.01, "decay": 1.5}, r"decay must lie in \(0, 1\]"),
        ({"max_kl": 0.01, "max_backtracks": 0}, "max_backtracks must be an integer >= 1"),
    ):
        with pytest.raises(ValueError, match=match):
            backtracking_line_search(evaluate, jnp.zeros(2), direction, jnp.array(-1.0), **kwargs)
