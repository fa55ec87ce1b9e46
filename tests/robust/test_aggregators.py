"""Robust aggregators against numpy references; attacks; tolerance errors."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import minimize
from scipy.stats import norm

from jaxopt_suite.robust import (
    AGGREGATORS,
    alie_z,
    centered_clipping,
    coordinate_median,
    geometric_median,
    krum,
    make_aggregator,
    make_attack,
    mean,
    multi_krum,
    sign_majority,
    trimmed_mean,
)

N, F = 11, 3


def _updates(key, n=N):
    a, b = jax.random.split(key)
    return {"w": jax.random.normal(a, (n, 3, 2)), "b": jax.random.normal(b, (n, 4)) * 3.0}


def _flat(tree):
    """(n, D) numpy matrix in ravel_pytree's leaf order (dict keys sorted: b, w)."""
    n = tree["w"].shape[0]
    return np.concatenate(
        [np.asarray(tree["b"]).reshape(n, -1), np.asarray(tree["w"]).reshape(n, -1)], 1
    )


def _vec(tree):
    return np.concatenate([np.asarray(tree["b"]).ravel(), np.asarray(tree["w"]).ravel()])


def _krum_reference(M, f, m):
    n = len(M)
    scores = []
    for i in range(n):
        d = sorted(float(np.sum((M[i] - M[j]) ** 2)) for j in range(n) if j != i)
        scores.append(sum(d[: n - f - 2]))
    best = np.argsort(scores, kind="stable")[:m]
    return M[best].mean(axis=0)


def test_simple_rules_match_numpy(key):
    U = _updates(key)
    M = _flat(U).astype(np.float64)
    np.testing.assert_allclose(_vec(jax.jit(mean)(U)), M.mean(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_vec(jax.jit(coordinate_median)(U)), np.median(M, 0), rtol=1e-6)
    trimmed = np.sort(M, axis=0)[F : N - F].mean(0)
    got = jax.jit(trimmed_mean, static_argnums=1)(U, F)
    np.testing.assert_allclose(_vec(got), trimmed, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_vec(jax.jit(sign_majority)(U)), np.sign(np.sign(M).sum(0)))


def test_krum_and_multi_krum_match_the_definition(key):
    U = _updates(key)
    M = _flat(U).astype(np.float64)
    got = jax.jit(krum, static_argnums=1)(U, F)
    np.testing.assert_allclose(_vec(got), _krum_reference(M, F, 1), rtol=1e-5)
    got = jax.jit(multi_krum, static_argnums=(1, 2))(U, F, 5)
    np.testing.assert_allclose(_vec(got), _krum_reference(M, F, 5), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("seed", range(4))
def test_krum_picks_what_a_float64_reference_picks_under_a_large_common_gradient(seed):
    # The workers share a gradient of norm ~2e4 and differ by ~1 (honest) or ~3
    # (Byzantine): the float32 Gram expansion |a|^2 + |b|^2 - 2 a.b of the distances
    # rounds away more than the distances themselves (the old rule chose a Byzantine
    # update on 19 of 20 such draws); distances from centred rows keep them.
    n, f, D = 11, 3, 4096
    rng = np.random.default_rng(seed)
    g = rng.normal(size=D) * 300.0
    M = np.concatenate(
        [g + 0.05 * rng.normal(size=(f, D)), g + 0.01 * rng.normal(size=(n - f, D))]
    ).astype(np.float32)
    M64 = M.astype(np.float64)  # the reference on the same float32 rows
    U = {"w": jnp.asarray(M)}
    for m, rule in ((1, krum), (n - f, lambda u, f: multi_krum(u, f))):
        reference = _krum_reference(M64, f, m)
        got = np.asarray(jax.jit(rule, static_argnums=1)(U, f)["w"], np.float64)
        np.testing.assert_allclose(got, reference, rtol=1e-6, atol=1e-3)
    chosen = np.argmin(((M64 - np.asarray(krum(U, f)["w"])) ** 2).sum(1))
    assert chosen >= f  # an honest update
    # the same with a few wild rows, which would drag a mean-centred expansion off
    wild = M.copy()
    wild[:f] = 1e6
    got = np.asarray(krum({"w": jnp.asarray(wild)}, f)["w"], np.float64)
    np.testing.assert_allclose(got, _krum_reference(wild.astype(np.float64), f, 1), rtol=1e-6)


def test_geometric_median_minimises_the_sum_of_distances(key):
    U = _updates(key)
    M = _flat(U).astype(np.float64)
    z = _vec(jax.jit(geometric_median)(U))

    def total(v):
        return np.sum(np.linalg.norm(M - v, axis=1))

    best = minimize(total, M.mean(0), method="BFGS", options={"gtol": 1e-10}).x
    assert total(z) <= total(best) * (1 + 1e-5)
    np.testing.assert_allclose(z, best, atol=1e-3)


def test_geometric_median_of_half_precision_updates():
    # eps = 1e-8 rounded to 0 in float16: the median sat on a row, its weight was 1/0 and the
    # result NaN; squared norms past 65504 overflowed float16
    for dtype in (jnp.float16, jnp.bfloat16):
        out = geometric_median(jnp.array([[1.0], [2.0], [3.0]], dtype))
        assert out.dtype == dtype
        np.testing.assert_allclose(np.asarray(out, np.float32), [2.0])
    big = jnp.array([[300.0, 0.0], [0.0, 300.0], [-300.0, 0.0], [0.0, -300.0]], jnp.float16)
    assert bool(jnp.all(jnp.isfinite(geometric_median(big).astype(jnp.float32))))


def test_krum_and_centered_clipping_of_half_precision_updates():
    # squared distances past 65504 overflowed float16: every Krum score was inf and top_k
    # chose row 0 (the outlier here); a norm past 256 made centered clipping's scale
    # tau / inf = 0, so a far row counted for nothing instead of moving the centre by tau
    values = 3.0 * np.array([50.0, -0.3, -0.1, 0.0, 0.1, 0.35, 0.8])  # Krum picks row 3
    rows = values[:, None] * np.ones((7, 40_000))
    for dtype in (jnp.float16, jnp.bfloat16):
        out = krum({"w": jnp.asarray(rows, dtype)}, 1)["w"]
        assert out.dtype == dtype
        np.testing.assert_allclose(np.asarray(out, np.float32), rows[3], atol=1e-2)
        far = jnp.full((5, 1), 300.0, dtype)
        clipped = centered_clipping(far, tau=1.0)
        assert clipped.dtype == dtype
        np.testing.assert_allclose(np.asarray(clipped, np.float32), [1.0])


def test_centered_clipping_matches_numpy(key):
    U = _updates(key)
    M = _flat(U).astype(np.float64)
    center = jax.tree.map(lambda leaf: leaf[0] * 0.5, U)
    v = _vec(center).astype(np.float64)
    for _ in range(3):
        diff = M - v
        scale = np.minimum(1.0, 2.0 / np.linalg.norm(diff, axis=1, keepdims=True))
        v = v + (diff * scale).mean(0)
    got = jax.jit(lambda u, c: centered_clipping(u, c, tau=2.0, iterations=3))(U, center)
    np.testing.assert_allclose(_vec(got), v, rtol=1e-5, atol=1e-6)


def test_robust_rules_ignore_a_wild_minority(key):
    U = _updates(key)
    honest = _flat(U)[: N - F]
    wild = jax.tree.map(lambda leaf: leaf.at[N - F :].set(1e6), U)
    for name in ("coordinate_median", "trimmed_mean", "krum", "multi_krum", "geometric_median"):
        out = _vec(make_aggregator(name, num_workers=N, num_byzantine=F)(wild))
        assert np.all(np.abs(out) <= np.abs(honest).max(0) + 1e-4), name
    assert np.all(np.abs(_vec(mean(wild))) > 1e5)


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf, 3e38])
def test_robust_rules_keep_out_non_finite_and_overflowing_updates(key, value):
    U = _updates(key)
    honest = _flat(U)[: N - F]
    # two Byzantine rows entirely, one with a single bad entry among honest-looking ones
    bad = jax.tree.map(lambda leaf: leaf.at[N - F : N - 1].set(value), U)
    bad = {"b": bad["b"].at[N - 1, 0].set(value), "w": bad["w"]}
    for name in ("coordinate_median", "trimmed_mean", "krum", "multi_krum", "geometric_median"):
        out = _vec(jax.jit(make_aggregator(name, num_workers=N, num_byzantine=F))(bad))
        assert np.all(np.abs(out) <= np.abs(honest).max(0) + 1e-4), (name, out)
    # Krum chooses as if the bad rows were merely far; the geometric median is the honest
    # rows' own
    far = _flat(U)
    far[N - F :] = 1e6
    np.testing.assert_allclose(_vec(krum(bad, F)), _krum_reference(far, F, 1), rtol=1e-5)
    np.testing.assert_allclose(
        _vec(multi_krum(bad, F)), _krum_reference(far, F, N - F), rtol=1e-5, atol=1e-6
    )
    honest_tree = jax.tree.map(lambda leaf: leaf[: N - F], U)
    np.testing.assert_allclose(
        _vec(geometric_median(bad)), _vec(geometric_median(honest_tree)), atol=1e-4
    )
    if not np.isfinite(value):  # a non-finite row has no weight: as if it sat on the center
        at_center = jax.tree.map(lambda leaf: leaf.at[N - F :].set(0.0), U)
        np.testing.assert_allclose(
            _vec(centered_clipping(bad, tau=0.5)), _vec(centered_clipping(at_center, tau=0.5))
        )
    votes = np.sign(_flat(bad))
    np.testing.assert_array_equal(
        _vec(sign_majority(bad)), np.sign(np.sum(np.nan_to_num(votes, nan=0.0), axis=0))
    )


def test_an_aggregator_holds_to_its_worker_count():
    # its Byzantine tolerance was checked for num_workers; a median built for 10 workers with
    # 4 Byzantine aggregated 3 updates without a word
    median = make_aggregator("coordinate_median", num_workers=10, num_byzantine=4)
    with pytest.raises(ValueError, match=r"num_workers=10 updates, got leading axes \[3\]"):
        median(jnp.ones((3, 2)))
    np.testing.assert_array_equal(median(jnp.ones((10, 2))), jnp.ones(2))


def test_centered_clippings_center_must_be_laid_out_as_an_update():
    U = {"a": jnp.ones((3, 2)), "b": 10.0 * jnp.ones((3, 3))}
    # as many entries, another layout: it was ravelled into the wrong coordinates
    with pytest.raises(ValueError, match="center must have the structure and leaf shapes"):
        centered_clipping(U, (10.0 * jnp.ones(3), jnp.ones(2)), tau=0.5)
    with pytest.raises(ValueError, match="center must have the structure and leaf shapes"):
        centered_clipping(U, {"a": jnp.ones(3), "b": jnp.ones(2)}, tau=0.5)
    center = {"a": jnp.ones(2), "b": 10.0 * jnp.ones(3)}
    out = centered_clipping(U, center, tau=0.5)  # every update sits on the center
    jax.tree.map(np.testing.assert_allclose, out, center)


def test_tolerance_and_shape_errors(key):
    with pytest.raises(ValueError, match="needs n > 2f \\+ 2, got n=8 workers and num_byzantine=3"):
        make_aggregator("krum", num_workers=8, num_byzantine=3)
    for name in ("coordinate_median", "trimmed_mean", "geometric_median", "sign_majority"):
        with pytest.raises(ValueError, match="Byzantine fraction of 0.50"):
            make_aggregator(name, num_workers=10, num_byzantine=5)
    make_aggregator("mean", num_workers=10, num_byzantine=5)  # the baseline takes any count
    with pytest.raises(ValueError, match="aggregator must be one of"):
        make_aggregator("bulyan", num_workers=10)
    with pytest.raises(ValueError, match="same leading"):
        mean({"a": jnp.zeros((3, 2)), "b": jnp.zeros((4, 2))})
    assert set(AGGREGATORS) >= {"krum", "sign_majority"}


def test_attacks(key):
    n, f = 20, 6
    assert alie_z(n, f) == pytest.approx(norm.ppf((n - f - (n // 2 + 1 - f)) / (n - f)), rel=1e-5)
    honest = jax.random.normal(key, (14, 5)) + 2.0
    own = honest[0]
    mu, sd = np.asarray(honest).mean(0), np.asarray(honest).std(0)
    alie = make_attack("alie", num_workers=n, num_byzantine=f)
    np.testing.assert_allclose(alie.craft(key, own, honest), mu - alie_z(n, f) * sd, rtol=1e-5)
    flip = make_attack("sign_flip", num_workers=n, num_byzantine=f)
    np.testing.assert_allclose(flip.craft(key, own, honest), -np.asarray(own))
    ipm = make_attack("ipm", num_workers=n, num_byzantine=f, epsilon=0.5)
    np.testing.assert_allclose(ipm.craft(key, own, honest), -0.5 * mu, rtol=1e-5)
    noise = make_attack("gaussian", num_workers=n, num_byzantine=f).craft(key, own, honest)
    assert 50 < float(jnp.std(noise)) < 400
    assert make_attack("label_flip", num_workers=n, num_byzantine=f).flips_labels
    assert make_attack("adaptive", num_workers=n, num_byzantine=f).opposes_bits
    with pytest.raises(ValueError, match="num_byzantine must be < num_workers"):
        make_attack("alie", num_workers=4, num_byzantine=4)


@pytest.mark.parametrize(
    ("name", "options", "message"),
    [
        ("centered_clipping", {"tau": -1.0}, "tau must be > 0, got -1.0"),
        ("centered_clipping", {"tau": 0.0}, "tau must be > 0, got 0.0"),
        ("centered_clipping", {"tau": float("nan")}, "tau must be > 0, got nan"),
        ("centered_clipping", {"iterations": 0}, "iterations must be an integer >= 1, got 0"),
        ("centered_clipping", {"iterations": 2.5}, "iterations must be an integer >= 1"),
        ("geometric_median", {"eps": -1.0}, "eps must be finite and > 0, got -1.0"),
        ("geometric_median", {"eps": 0.0}, "eps must be finite and > 0, got 0.0"),
        ("geometric_median", {"eps": float("inf")}, "eps must be finite and > 0, got inf"),
        ("geometric_median", {"iterations": -3}, "iterations must be an integer >= 1, got -3"),
        ("multi_krum", {"m": 0}, "m must be an integer in \\[1, 11\\], got 0"),
        ("multi_krum", {"m": 12}, "m must be an integer in \\[1, 11\\], got 12"),
    ],
)
def test_bad_options_are_named(key, name, options, message):
    U = _updates(key)
    rule = {"centered_clipping": centered_clipping, "geometric_median": geometric_median}
    if name in rule:  # called directly
        with pytest.raises(ValueError, match=message):
            rule[name](U, **options)
    # and through make_aggregator, at once (not at the first round)
    with pytest.raises(ValueError, match=message):
        make_aggregator(name, num_workers=N, num_byzantine=F, **options)


@pytest.mark.parametrize(
    ("name", "options", "unknown", "takes"),
    [
        ("geometric_median", {"bogus": 1}, "bogus", "iterations, eps"),
        ("centered_clipping", {"tau": 1.0, "iters": 3}, "iters", "tau, iterations"),
        ("krum", {"m": 3}, "m", "none"),
        ("mean", {"tau": 1.0, "eps": 0.1}, "eps, tau", "none"),
        ("multi_krum", {"eps": 1e-6}, "eps", "m"),
    ],
)
def test_options_a_rule_does_not_take_are_refused(name, options, unknown, takes):
    expected = f"{name!r} does not take the option\\(s\\) {unknown} \\(its options: {takes}\\)"
    with pytest.raises(ValueError, match=expected):
        make_aggregator(name, num_workers=N, num_byzantine=F, **options)


def test_good_options_are_bound_and_traced_ones_pass(key):
    U = _updates(key)
    M = _flat(U).astype(np.float64)
    best = make_aggregator("multi_krum", num_workers=N, num_byzantine=F, m=5)(U)
    np.testing.assert_allclose(_vec(best), _krum_reference(M, F, 5), rtol=1e-5, atol=1e-6)
    clip = make_aggregator("centered_clipping", num_workers=N, tau=2.0, iterations=3)
    np.testing.assert_allclose(
        _vec(clip(U)), _vec(centered_clipping(U, tau=2.0, iterations=3)), rtol=1e-6
    )
    # a traced tau or eps is not checked (no concrete value), only used
    got = jax.jit(lambda u, tau: centered_clipping(u, tau=tau, iterations=2))(U, 2.0)
    np.testing.assert_allclose(_vec(got), _vec(centered_clipping(U, tau=2.0, iterations=2)))
    got = jax.jit(lambda u, eps: geometric_median(u, iterations=5, eps=eps))(U, 1e-8)
    np.testing.assert_allclose(
        _vec(got), _vec(geometric_median(U, iterations=5)), rtol=1e-5, atol=1e-6
    )


def _median_objective_reference(M):
    """The least ``sum_i |g_i - z|`` in float64, and where: Nelder-Mead from the mean, and
    every row (the minimiser may sit on one, where the objective has a kink)."""
    M = np.asarray(M, np.float64)

    def total(z):
        return float(np.sum(np.linalg.norm(M - z, axis=1)))

    options = {"xatol": 1e-12, "fatol": 1e-14, "maxiter": 20_000, "maxfev": 40_000}
    fitted = minimize(total, M.mean(0), method="Nelder-Mead", options=options).x
    return min((total(z), tuple(z)) for z in [fitted, *M])


def test_geometric_median_leaves_a_row_it_starts_on_unless_the_median_is_there():
    # the start, the coordinate median, was row 0: its distance floored at eps gave it the
    # weight 1e8 and every Weiszfeld step landed back on it (20.0998 against 19.8362)
    P = np.array([[5.0, 5.0], [4.0, -5.0], [15.0, 6.0]], np.float32)
    best, where = _median_objective_reference(P)
    for iterations in (100, 1000):
        z = np.asarray(geometric_median(jnp.asarray(P), iterations=iterations), np.float64)
        np.testing.assert_allclose(z, where, atol=1e-4)
        np.testing.assert_allclose(np.linalg.norm(P - z, axis=1).sum(), best, rtol=1e-6)
    np.testing.assert_allclose(where, [6.3245735, 3.6754265], atol=1e-6)
    # Byzantine rows with non-finite entries still count for nothing, here too
    wild = np.concatenate([P, [[np.nan, 0.0], [np.inf, -np.inf]]]).astype(np.float32)
    np.testing.assert_allclose(np.asarray(geometric_median(jnp.asarray(wild))), where, atol=1e-4)
    # where the median is a row (the others' unit vectors sum to less than its count), it
    # stays there
    on = np.array([[1.0, 1.0], [1.0, 1.0], [2.0, 1.0], [1.0, 3.0], [-4.0, 1.0]], np.float32)
    np.testing.assert_array_equal(np.asarray(geometric_median(jnp.asarray(on))), [1.0, 1.0])


def test_geometric_median_matches_a_float64_reference_where_the_start_is_a_row():
    # small integer rows, an odd count: the coordinate median is often a row (and every
    # other case is made so: row 0 set to the others' coordinate median), and where the
    # median is not there the iteration stayed on it
    rng = np.random.default_rng(1)
    gm = jax.jit(geometric_median)
    started_on_a_row = 0
    for case in range(40):
        n, d = int(rng.choice([3, 5, 7])), int(rng.integers(2, 4))
        P = rng.integers(-6, 7, size=(n, d)).astype(np.float32)
        if case % 2:
            P[0] = np.median(P[1:], axis=0)
        started_on_a_row += bool((np.abs(P - np.median(P, axis=0)).max(1) == 0).any())
        best, _ = _median_objective_reference(P)
        z = np.asarray(gm(jnp.asarray(P)), np.float64)
        assert np.linalg.norm(P - z, axis=1).sum() <= best * (1 + 1e-6) + 1e-6, P
    assert started_on_a_row >= 20


@pytest.mark.parametrize(
    ("name", "options", "shape"),
    [
        ("centered_clipping", {"tau": np.array([1.0, 100.0])}, (2,)),
        ("centered_clipping", {"tau": [1.0, 100.0]}, (2,)),
        ("geometric_median", {"eps": np.full(N, 1e-8)}, (N,)),
        ("geometric_median", {"eps": (1e-8,)}, (1,)),
    ],
)
def test_tau_and_eps_must_be_single_numbers(key, name, options, shape):
    # an array tau clipped each coordinate's step by its own entry (an eps floored each
    # worker's distance by its own), and a list failed with a TypeError inside the step
    message = f"{next(iter(options))} must be a scalar, got shape {re.escape(str(shape))}"
    U = _updates(key)
    rule = {"centered_clipping": centered_clipping, "geometric_median": geometric_median}[name]
    with pytest.raises(ValueError, match=message):
        rule(U, **options)
    with pytest.raises(ValueError, match=message):
        make_aggregator(name, num_workers=N, num_byzantine=F, **options)
    # a 0-d array is one number
    make_aggregator(name, num_workers=N, num_byzantine=F, **{k: np.float32(1.0) for k in options})
