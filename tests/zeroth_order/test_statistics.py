"""Theory checks: unbiasedness and variance, with tolerances derived from the variance.

Every mean is compared with ``Z * standard error`` (Z = 5, a false alarm per coordinate has
probability ~6e-7), where the standard error comes from the theoretical variance when it is
known in closed form and from the sample otherwise.
"""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxopt_suite.zeroth_order import (
    cv_zod_estimate,
    gaussian_smoothing_estimate,
    hint_basis,
    scale_by_cv_zod,
    spsa_estimate,
    szo_estimate,
)
from tests.zeroth_order.conftest import quadratic

Z = 5.0
DRAWS = 20_000


def _draws(estimate, draws=DRAWS, seed=0):
    keys = jax.random.split(jax.random.key(seed), draws)
    return jax.jit(jax.vmap(estimate))(keys)


def test_spsa_unbiased_on_quadratic_with_the_rademacher_variance():
    value_fn, grad_fn = quadratic()
    params = {"x": jnp.linspace(-1.0, 2.0, 8)}
    g = np.asarray(grad_fn(params)["x"], np.float64)
    samples = np.asarray(_draws(lambda k: spsa_estimate(value_fn, params, k, sigma=1e-2).grad)["x"])
    # ghat_i = sum_j g_j D_j D_i: variance ||g||^2 - g_i^2 per coordinate.
    variance = g @ g - g**2
    np.testing.assert_array_less(np.abs(samples.mean(0) - g), Z * np.sqrt(variance / DRAWS))
    np.testing.assert_allclose(samples.var(0), variance, rtol=0.1)


def test_gaussian_smoothing_unbiased_on_quadratic_with_its_variance():
    value_fn, grad_fn = quadratic()
    params = {"x": jnp.linspace(-1.0, 2.0, 8)}
    g = np.asarray(grad_fn(params)["x"], np.float64)
    estimate = lambda k: gaussian_smoothing_estimate(value_fn, params, k, sigma=1e-2).grad  # noqa: E731
    samples = np.asarray(_draws(estimate)["x"])
    # E[(g.u)^2 u_i^2] - g_i^2 = ||g||^2 + g_i^2 for Gaussian u.
    variance = g @ g + g**2
    np.testing.assert_array_less(np.abs(samples.mean(0) - g), Z * np.sqrt(variance / DRAWS))
    np.testing.assert_allclose(samples.var(0), variance, rtol=0.1)


def test_gaussian_smoothing_estimates_the_smoothed_gradient_on_a_cubic():
    """f = sum c_i x_i^3: grad f_mu = 3 c (x^2 + mu^2), which differs from grad f = 3 c x^2."""
    coefficients = jnp.linspace(0.5, 1.5, 6)
    mu = 0.8
    draws = 100_000
    params = {"x": jnp.linspace(-1.0, 1.0, 6)}

    def value_fn(p):
        return jnp.sum(coefficients * p["x"] ** 3)

    estimate = lambda k: gaussian_smoothing_estimate(value_fn, params, k, sigma=mu).grad  # noqa: E731
    samples = np.asarray(_draws(estimate, draws=draws)["x"], np.float64)
    x = np.asarray(params["x"], np.float64)
    smoothed = 3 * np.asarray(coefficients) * (x**2 + mu**2)
    plain = 3 * np.asarray(coefficients) * x**2
    tolerance = Z * samples.std(0, ddof=1) / np.sqrt(draws)
    np.testing.assert_array_less(np.abs(samples.mean(0) - smoothed), tolerance)
    assert np.all(np.abs(smoothed - plain) > 3 * tolerance)  # the test can tell them apart


def _hints(g, key):
    keys = jax.random.split(key, 3)
    dim = g.shape[0]
    return {
        "random direction": {"x": jax.random.normal(keys[0], (dim,))},
        "reversed, mis-scaled gradient": {"x": -7.0 * g},
        "subspace k=3": {"x": jax.random.normal(keys[1], (dim, 3))},
        "orthogonal to g": {
            "x": (lambda n: n - (n @ g) / (g @ g) * g)(jax.random.normal(keys[2], (dim,)))
        },
        # a direction with a non-finite entry counts as absent (it made every estimate NaN)
        "subspace k=3, one direction non-finite": {
            "x": jax.random.normal(keys[1], (dim, 3)).at[0, 1].set(jnp.nan)
        },
    }


@pytest.mark.parametrize("hint_name", list(_hints(jnp.ones(4), jax.random.key(0))))
def test_cv_zod_unbiased_for_any_hint(hint_name):
    value_fn, grad_fn = quadratic(12)
    params = {"x": jnp.linspace(-1.0, 2.0, 12)}
    g = grad_fn(params)["x"]
    hint = _hints(g, jax.random.key(1))[hint_name]
    for query_hint in (True, False):

        def estimate(k, q=query_hint):
            return cv_zod_estimate(
                value_fn, params, hint, k, num_directions=4, sigma=1e-2, query_hint=q
            ).grad

        samples = np.asarray(_draws(estimate, draws=10_000)["x"], np.float64)
        assert np.all(np.isfinite(samples))  # assert_array_less passes NaN against NaN
        tolerance = Z * samples.std(0, ddof=1) / np.sqrt(samples.shape[0])
        np.testing.assert_array_less(np.abs(samples.mean(0) - np.asarray(g)), tolerance)


def test_cv_zod_non_finite_hint_directions_count_as_absent():
    value_fn, grad_fn = quadratic(12)
    params = {"x": jnp.linspace(-1.0, 2.0, 12)}
    g = grad_fn(params)["x"]
    # the gradient, a direction with an overflowed entry, then another finite one
    hint = {"x": jnp.stack([g, jnp.ones(12).at[3].set(jnp.inf), jnp.ones(12)], axis=1)}
    basis = jax.jit(hint_basis)(params, hint)
    chex.assert_tree_all_finite(basis)
    np.testing.assert_array_equal(basis[:, 1], 0.0)
    # the finite columns keep their span: an orthonormal basis of [g, 1]
    finite = basis[:, [0, 2]]
    np.testing.assert_allclose(finite.T @ finite, np.eye(2), atol=1e-6)
    np.testing.assert_allclose(finite @ (finite.T @ g), g, rtol=1e-5, atol=1e-5)
    estimate = jax.jit(
        lambda k: cv_zod_estimate(value_fn, params, hint, k, num_directions=4, sigma=1e-2)
    )(jax.random.key(0))
    chex.assert_tree_all_finite(estimate.grad)
    assert float(estimate.coefficients[1]) == 0.0
    # g is in the finite span: the reference is the gradient, the estimate exact
    np.testing.assert_allclose(estimate.grad["x"], g, rtol=1e-3, atol=1e-3)


def test_cv_zod_adaptive_averages_skip_non_finite_estimates():
    # one NaN probe loss made the averages NaN for good: alpha^2 = NaN never passed the
    # decision, so the hint was never queried again, even when it was the exact gradient
    value_fn, grad_fn = quadratic()
    params = {"x": jnp.ones(8)}
    hint = grad_fn(params)  # the exact gradient: alpha^2 = 1, every step queries it
    transform = scale_by_cv_zod(jax.random.key(0), num_directions=4, sigma=1e-2)

    @jax.jit
    def update(state, offset):
        shifted = lambda p: value_fn(p) + offset  # noqa: E731
        return transform.update(params, state, params, value_fn=shifted, hint=hint)

    state = transform.init(params)
    for _ in range(3):
        _, state = update(state, 0.0)
    _, poisoned = update(state, jnp.nan)
    chex.assert_trees_all_equal(
        (poisoned.captured_ema, poisoned.total_ema), (state.captured_ema, state.total_ema)
    )
    grads, after = update(poisoned, 0.0)
    np.testing.assert_allclose(after.step_scale, 1.0, rtol=1e-3)  # the hint was queried
    np.testing.assert_allclose(grads["x"], hint["x"], rtol=1e-3, atol=1e-3)


def _hint_with_quality(g, alpha, key):
    noise = jax.random.normal(key, g.shape)
    unit = g / jnp.linalg.norm(g)
    noise = noise - (noise @ unit) * unit
    return {"x": 2.5 * (alpha * unit + np.sqrt(1 - alpha**2) * noise / jnp.linalg.norm(noise))}


@pytest.mark.parametrize("alpha", [0.5, 0.9])
@pytest.mark.parametrize("variant", ["query", "oracle"])
def test_cv_zod_mse_matches_the_best_coefficient_theory(alpha, variant):
    dim, probes = 40, 10
    value_fn, grad_fn = quadratic(dim)
    params = {"x": jnp.linspace(-1.0, 2.0, dim)}
    g = grad_fn(params)["x"]
    hint = _hint_with_quality(g, alpha, jax.random.key(3))
    true_grad = {"x": g} if variant == "oracle" else None

    def squared_error(key):
        estimate = cv_zod_estimate(
            value_fn, params, hint, key, num_directions=probes, sigma=1e-2, true_grad=true_grad
        )
        return jnp.sum((estimate.grad["x"] - g) ** 2)

    errors = np.asarray(_draws(squared_error, draws=8_000), np.float64)
    theory = (dim + 1) * (1 - alpha**2) / probes * float(g @ g)
    standard_error = errors.std(ddof=1) / np.sqrt(errors.size)
    assert 4 * standard_error < 0.15 * theory  # the 15% band is far wider than the noise
    assert abs(errors.mean() - theory) < 0.15 * theory


@pytest.mark.parametrize(("alpha2", "queries"), [(0.5, False), (0.9, True)])
def test_cv_zod_adaptive_step_scale_matches_the_estimate_it_scales(alpha2, queries):
    # q = 2 probes and a k = 10 hint: the adaptive rule queries the hint iff the hint
    # quality alpha^2 it estimated exceeds k/(q + k) = 0.83. A step that skips the hint is
    # the plain estimator on q + k probes, whose relative MSE is (d + 1)/(q + k) whatever
    # alpha^2 is; a step that queries it has (d + 1)(1 - alpha^2)/q. The step scale is
    # 1 / (1 + that MSE).
    dim, probes, width = 40, 2, 10
    value_fn, grad_fn = quadratic(dim)
    params = {"x": jnp.linspace(-1.0, 2.0, dim)}
    hint = {"x": jax.random.normal(jax.random.key(5), (dim, width))}
    transform = scale_by_cv_zod(jax.random.key(0), num_directions=probes, sigma=1e-2)
    # a state whose averages put the estimated alpha^2 at alpha2 (after the first step)
    state = transform.init(params)._replace(
        count=jnp.asarray(1, jnp.int32),
        captured_ema=jnp.asarray(alpha2, jnp.float32),
        total_ema=jnp.asarray(1.0, jnp.float32),
    )
    update = jax.jit(lambda s: transform.update(params, s, params, value_fn=value_fn, hint=hint))
    grads, new_state = update(state)
    if queries:
        relative_mse = (dim + 1) * (1 - alpha2) / probes
    else:
        relative_mse = (dim + 1) / (probes + width)
    np.testing.assert_allclose(new_state.step_scale, 1 / (1 + relative_mse), rtol=1e-6)
    # the estimate it scaled: the same probes, unscaled
    _, probe_key = jax.random.split(state.key)
    raw = cv_zod_estimate(
        value_fn, params, hint, probe_key, num_directions=probes, sigma=1e-2, query_hint=queries
    )
    # (float32 finite differences, jitted or not: agree to ~1e-3)
    np.testing.assert_allclose(
        grads["x"], raw.grad["x"] * new_state.step_scale, rtol=5e-3, atol=5e-3
    )
    if not queries:  # and the MSE the scale assumes is the one the plain estimate has
        g = grad_fn(params)["x"]

        def squared_error(key):
            estimate = cv_zod_estimate(
                value_fn, params, hint, key, num_directions=probes, sigma=1e-2, query_hint=False
            )
            return jnp.sum((estimate.grad["x"] - g) ** 2) / jnp.sum(g**2)

        errors = np.asarray(_draws(squared_error, draws=8_000), np.float64)
        assert 4 * errors.std(ddof=1) / np.sqrt(errors.size) < 0.1 * relative_mse
        assert abs(errors.mean() - relative_mse) < 0.1 * relative_mse


def _corrected_projection(inputs, grad_w, kappa, power):
    """U diag(w^2) U^T G with the documented correction w = (s / mean s)^power, ms(w) = 1."""
    inputs = np.asarray(inputs, np.float64)
    eigvals, eigvecs = np.linalg.eigh(inputs.T @ inputs / inputs.shape[0])
    eigvals, eigvecs = eigvals[::-1][:kappa], eigvecs[:, ::-1][:, :kappa]
    weights = (eigvals / eigvals.mean()) ** power
    weights = weights / np.sqrt(np.mean(weights**2))
    return eigvecs @ np.diag(weights**2) @ eigvecs.T @ np.asarray(grad_w, np.float64)


def _expected_szo(inputs, grads, kappa, power, pair_biases):
    """Expected SZO estimate of the (w, b) layer: paired, the bias is the weight of the
    constant input [a, 1]; unpaired, it is probed isotropically (kept whole)."""
    if not pair_biases:
        return _corrected_projection(inputs, grads["w"], kappa, power), np.asarray(grads["b"])
    augmented = np.concatenate([np.asarray(inputs), np.ones((inputs.shape[0], 1))], axis=1)
    stacked = np.concatenate([np.asarray(grads["w"]), np.asarray(grads["b"])[None, :]])
    projected = _corrected_projection(augmented, stacked, kappa, power)
    return projected[:-1], projected[-1]


@pytest.mark.parametrize("pair_biases", [True, False])
@pytest.mark.parametrize(
    "options",
    [
        {"covariance_power": 0.0, "orthogonalize": True},
        {"covariance_power": 0.0, "orthogonalize": False},
        {"covariance_power": 0.5, "orthogonalize": True},
        {"covariance_power": -0.5, "orthogonalize": True},
    ],
)
def test_szo_expectation_is_the_corrected_activation_projection(
    linear_regression, options, pair_biases
):
    value_fn, params, activations, inputs = linear_regression
    grads = jax.grad(value_fn)(params)
    kappa = 3

    def estimate(key):
        return szo_estimate(
            value_fn,
            params,
            key,
            activations=activations,
            kappa=kappa,
            num_directions=2,
            sigma=1e-2,
            pair_biases=pair_biases,
            **options,
        ).grad

    samples = _draws(estimate)
    expected_w, expected_b = _expected_szo(
        inputs, grads, kappa, options["covariance_power"], pair_biases
    )
    for leaf, expected in (("w", expected_w), ("b", expected_b)):
        values = np.asarray(samples[leaf], np.float64)
        tolerance = Z * values.std(0, ddof=1) / np.sqrt(DRAWS)
        np.testing.assert_array_less(np.abs(values.mean(0) - expected), tolerance)
    # The projection is far from the full gradient, so the test separates the two.
    tolerance_w = Z * np.asarray(samples["w"]).std(0, ddof=1) / np.sqrt(DRAWS)
    assert np.max(np.abs(expected_w - np.asarray(grads["w"])) / tolerance_w) > 10


def test_szo_bias_correction_recovers_the_full_gradient(linear_regression):
    value_fn, params, activations, _ = linear_regression
    grads = jax.grad(value_fn)(params)

    def estimate(key):
        return szo_estimate(
            value_fn,
            params,
            key,
            activations=activations,
            kappa=3,
            num_directions=2,
            sigma=1e-2,
            covariance_power=0.0,
            bias_correction=True,
            tail_weight=0.5,
        ).grad

    values = np.asarray(_draws(estimate)["w"], np.float64)
    tolerance = Z * values.std(0, ddof=1) / np.sqrt(DRAWS)
    np.testing.assert_array_less(np.abs(values.mean(0) - np.asarray(grads["w"])), tolerance)


def test_szo_captured_energy_diagnostic(linear_regression):
    value_fn, params, activations, inputs = linear_regression
    grads = jax.grad(value_fn)(params)
    estimate = szo_estimate(
        value_fn, params, jax.random.key(0), activations=activations, kappa=3, true_grad=grads
    )
    projected_w, projected_b = _expected_szo(inputs, grads, 3, 0.0, pair_biases=True)
    energy = np.sum(projected_w**2) + np.sum(projected_b**2)
    total = sum(float(jnp.sum(leaf**2)) for leaf in jax.tree.leaves(grads))
    assert float(estimate.captured_energy) == pytest.approx(energy / total, rel=1e-4)
    assert estimate.subspace_dim == 3 * 3
    assert estimate.num_evals == 2
    without = szo_estimate(value_fn, params, jax.random.key(0), activations=activations, kappa=3)
    assert np.isnan(float(without.captured_energy))


def test_szo_never_probes_past_the_rank_of_the_inputs(linear_regression):
    value_fn, params, _, inputs = linear_regression
    few_rows = {"w": inputs[:2], "b": None}
    estimate = szo_estimate(
        value_fn, params, jax.random.key(0), activations=few_rows, kappa=8, covariance_power=-0.5
    )
    # Two input rows span two directions of [a, 1]: 2 x 3 outputs (the bias rides along).
    assert estimate.subspace_dim == 2 * 3
    chex.assert_tree_all_finite(estimate.grad)


def test_szo_gives_no_weight_to_dead_directions(linear_regression):
    # Inputs that are always 0 (dead units) leave directions of eigenvalue ~0 inside kappa:
    # whitened at the floor they took almost all the probe's weight and the estimate shrank
    # ~1000-fold. An orthonormal frame of the whole probe space (num_directions =
    # subspace_dim) makes the estimate its own expectation, so kappa one past the rank must
    # give what kappa at the rank gives.
    value_fn, params, _, inputs = linear_regression
    dead = inputs.at[:, 6:].set(0.0)  # [a, 1] has rank 7

    def loss(p):
        residual = dead @ p["w"] + p["b"][None, :]
        return 0.5 * jnp.mean(jnp.sum(residual**2, axis=-1))

    def exact(kappa):
        dim = kappa * 3
        return szo_estimate(
            loss, params, jax.random.key(0), activations={"w": dead, "b": None}, kappa=kappa,
            num_directions=dim, covariance_power=-0.5, orthogonalize=True,
        )  # fmt: skip

    at_rank, past_rank = exact(7), exact(8)
    assert (at_rank.subspace_dim, past_rank.subspace_dim) == (21, 24)
    for leaf in ("w", "b"):
        np.testing.assert_allclose(past_rank.grad[leaf], at_rank.grad[leaf], rtol=1e-3, atol=1e-4)
    assert float(jnp.linalg.norm(at_rank.grad["w"])) > 0.1 * float(
        jnp.linalg.norm(jax.grad(loss)(params)["w"])
    )
