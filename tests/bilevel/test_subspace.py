"""Randomized subspaces: the bi-probe is unbiased with the variance of the notes; one probe
used twice is biased; factorized and merged weights give the same numbers."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxopt_suite.bilevel import subspace

DIM, RANK, DRAWS = 20, 4, 20_000


@pytest.fixture(scope="module")
def quadratic_form():
    """A dense SPD H on a single (DIM,) leaf, a vector v, and fun(y) = 1/2 y^T H y."""
    a = jax.random.normal(jax.random.key(11), (DIM, DIM))
    h = a @ a.T / DIM + jnp.eye(DIM)
    v = jnp.linspace(-1.0, 1.0, DIM) + 0.3
    y = jnp.full(DIM, 0.2)
    return h, v, y, (lambda y_: 0.5 * y_ @ h @ y_)


def _draw(fun, y, v, key, same_probe=False):
    ranks = subspace.probe_shapes(y, RANK, False)
    k1, k2 = jax.random.split(key)
    p1 = subspace.sample_probes(k1, y, ranks)
    p2 = p1 if same_probe else subspace.sample_probes(k2, y, ranks)
    _, s = subspace.bi_probe(fun, y, v, p1, p2)
    return subspace.lift(p1, s, y)


def _draws(fun, y, v, same_probe=False):
    keys = jax.random.split(jax.random.key(0), DRAWS)
    return jax.jit(jax.vmap(lambda k: _draw(fun, y, v, k, same_probe)))(keys)


def test_bi_probe_is_unbiased(quadratic_form):
    h, v, y, fun = quadratic_form
    est = _draws(fun, y, v)
    mean, stderr = est.mean(0), est.std(0, ddof=1) / np.sqrt(DRAWS)
    # 5 standard errors per coordinate: a false alarm over 20 coordinates has odds ~1e-5.
    np.testing.assert_array_less(np.abs(mean - h @ v), 5 * stderr)


def test_bi_probe_variance_matches_the_formula(quadratic_form):
    h, v, y, fun = quadratic_form
    est = _draws(fun, y, v)
    hv = h @ v
    sq_err = jnp.sum((est - hv[None, :]) ** 2, axis=1)
    d, r = DIM, RANK
    h2 = h @ h
    formula = (d - 1) / r * hv @ hv + (d + r - 1) / r**2 * (
        hv @ hv + jnp.trace(h2) * v @ v - 2 * v @ (jnp.diag(h2) * v)
    )
    empirical = sq_err.mean()
    stderr = sq_err.std(ddof=1) / np.sqrt(DRAWS)
    assert 4 * stderr < 0.15 * formula, "too few draws for a 15% check"
    assert abs(empirical - formula) <= 0.15 * formula, (empirical, formula)


def test_one_probe_used_twice_is_biased(quadratic_form):
    h, v, y, fun = quadratic_form
    est = _draws(fun, y, v, same_probe=True)
    mean, stderr = est.mean(0), est.std(0, ddof=1) / np.sqrt(DRAWS)
    d_h = jnp.diag(jnp.diag(h))
    biased = h @ v + (h + jnp.trace(h) * jnp.eye(DIM) - 2 * d_h) @ v / RANK
    np.testing.assert_array_less(np.abs(mean - biased), 5 * stderr)
    # ... and far from H v: the bias is many standard errors in norm.
    assert jnp.linalg.norm(mean - h @ v) > 20 * jnp.linalg.norm(stderr)


def test_subspace_gradient_is_unbiased(quadratic_form):
    h, _, y, fun = quadratic_form
    ranks = subspace.probe_shapes(y, RANK, False)

    def draw(key):
        probes = subspace.sample_probes(key, y, ranks)
        return subspace.lift(probes, subspace.subspace_grad(fun, y, probes), y)

    est = jax.jit(jax.vmap(draw))(jax.random.split(jax.random.key(1), DRAWS))
    mean, stderr = est.mean(0), est.std(0, ddof=1) / np.sqrt(DRAWS)
    np.testing.assert_array_less(np.abs(mean - h @ y), 5 * stderr + 1e-6)


def _mlp_loss(params, inputs):
    hidden = jnp.tanh(subspace.dense(inputs, params["w1"], params["b1"]))
    return jnp.mean(subspace.dense(hidden, params["w2"], params["b2"]) ** 2)


def _mlp_params(key):
    k1, k2 = jax.random.split(key)
    return {
        "w1": jax.random.normal(k1, (6, 16)) / 3,
        "b1": jnp.zeros(16),
        "w2": jax.random.normal(k2, (16, 3)) / 4,
        "b2": jnp.ones(3),
    }


def test_factorized_weights_give_the_merged_numbers():
    params = _mlp_params(jax.random.key(2))
    inputs = jax.random.normal(jax.random.key(3), (5, 6))
    v = jax.tree.map(lambda p: jnp.ones_like(p) * 0.1, params)
    ranks = subspace.probe_shapes(params, 2, False)
    p1 = subspace.sample_probes(jax.random.key(4), params, ranks)
    p2 = subspace.sample_probes(jax.random.key(5), params, ranks)
    fun = lambda p: _mlp_loss(p, inputs)  # noqa: E731
    merged = subspace.bi_probe(fun, params, v, p1, p2, factorized=False)
    factored = jax.jit(lambda: subspace.bi_probe(fun, params, v, p1, p2, factorized=True))()
    chex.assert_trees_all_close(factored, merged, rtol=1e-5, atol=1e-6)
    wrapped = subspace.Factorized(params["w1"], ((p1[2], jnp.ones((2, 16))),))
    chex.assert_trees_all_close(
        subspace.materialize({"w": wrapped})["w"], params["w1"] + p1[2] @ jnp.ones((2, 16))
    )


@pytest.mark.parametrize("rows", [12, 13, 1])
def test_add_lifted_equals_the_plain_update(rows):
    tree = {"a": jnp.arange(rows * 3.0).reshape(rows, 3), "s": jnp.ones(())}
    ranks = subspace.probe_shapes(tree, 1 if rows == 1 else 2, False)
    probes = subspace.sample_probes(jax.random.key(6), tree, ranks)
    coords = [jnp.ones((ranks[0], 3)), jnp.asarray(2.0)]
    out = jax.jit(lambda t: subspace.add_lifted(t, probes, coords, -0.5, chunks=4))(tree)
    expected = jax.tree.map(lambda t, d: t - 0.5 * d, tree, subspace.lift(probes, coords, tree))
    chex.assert_trees_all_close(out, expected, rtol=1e-6)


def test_rank_above_a_leaf_dimension_is_an_error():
    tree = {"w": jnp.ones((8, 6)), "b": jnp.ones(3), "thin": jnp.ones((8, 2))}
    with pytest.raises(ValueError, match=r"rank=4 exceeds the first dimension 3 of y0\['b'\]"):
        subspace.probe_shapes(tree, 4, False)
    # Leaves in key order b, thin, w: any dimension <= rank means an exact update.
    assert subspace.probe_shapes(tree, 4, True) == [None, None, 4]


def test_one_sided_probe_is_unbiased_with_the_first_variance_term(quadratic_form):
    h, v, y, fun = quadratic_form
    ranks = subspace.probe_shapes(y, RANK, False)

    def draw(key):
        probes = subspace.sample_probes(key, y, ranks)
        _, s = subspace.one_sided_probe(fun, y, v, probes)
        return subspace.lift(probes, s, y)

    est = jax.jit(jax.vmap(draw))(jax.random.split(jax.random.key(9), DRAWS))
    hv = h @ v
    mean, stderr = est.mean(0), est.std(0, ddof=1) / np.sqrt(DRAWS)
    np.testing.assert_array_less(np.abs(mean - hv), 5 * stderr + 1e-6)
    sq_err = jnp.sum((est - hv[None, :]) ** 2, axis=1)
    formula = (DIM - 1) / RANK * hv @ hv  # Rademacher: E||P P^T w - w||^2 = (d-1)/r ||w||^2
    stderr_sq = sq_err.std(ddof=1) / np.sqrt(DRAWS)
    assert 4 * stderr_sq < 0.15 * formula
    assert abs(sq_err.mean() - formula) <= 0.15 * formula
