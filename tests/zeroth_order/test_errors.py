"""Bad input gets a clear error that names the argument."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxopt_suite.zeroth_order import (
    cv_zod_estimate,
    gaussian_smoothing_estimate,
    scale_by_cv_zod,
    scale_by_gaussian_smoothing,
    scale_by_spsa,
    scale_by_szo,
    spsa_estimate,
    szo_estimate,
)
from tests.zeroth_order.conftest import quadratic

FACTORIES = [scale_by_spsa, scale_by_gaussian_smoothing, scale_by_szo, scale_by_cv_zod]
PARAMS = {"x": jnp.ones(8)}

# every estimator as estimate(value_fn, params, key, **options) (CV-ZOD: the params as hint)
ESTIMATES = {
    "spsa": spsa_estimate,
    "gaussian_smoothing": gaussian_smoothing_estimate,
    "szo": szo_estimate,
    "cv_zod": lambda value_fn, params, key, **kw: cv_zod_estimate(
        value_fn, params, jax.tree.map(jnp.ones_like, params), key, **kw
    ),
}


def _hint_args(factory):
    return {"hint": {"x": jnp.ones(8)}} if factory is scale_by_cv_zod else {}


@pytest.mark.parametrize("factory", FACTORIES)
def test_value_fn_must_return_a_scalar(factory):
    transform = factory(jax.random.key(0))
    state = transform.init(PARAMS)
    with pytest.raises(ValueError, match="value_fn must return a scalar"):
        transform.update(
            PARAMS, state, PARAMS, value_fn=lambda p: p["x"] ** 2, **_hint_args(factory)
        )
    with pytest.raises(ValueError, match="has_aux"):
        transform.update(
            PARAMS,
            state,
            PARAMS,
            value_fn=lambda p: (jnp.sum(p["x"]), p),
            **_hint_args(factory),
        )
    with pytest.raises(TypeError, match="value_fn is required"):
        transform.update(PARAMS, state, PARAMS, **_hint_args(factory))


@pytest.mark.parametrize("factory", FACTORIES)
@pytest.mark.parametrize("bad", [0, -3, 2.5, True])
def test_num_directions_must_be_a_positive_int(factory, bad):
    with pytest.raises((ValueError, TypeError), match="num_directions"):
        factory(jax.random.key(0), num_directions=bad)


@pytest.mark.parametrize("factory", FACTORIES)
def test_key_and_sigma_are_checked(factory):
    with pytest.raises(TypeError, match="key must be a jax PRNG key"):
        factory(0)
    for bad in (0.0, float("inf")):  # an infinite step made every difference NaN
        with pytest.raises(ValueError, match="sigma must be finite and > 0"):
            factory(jax.random.key(0), sigma=bad)


@pytest.mark.parametrize("factory", FACTORIES)
def test_params_are_required(factory):
    value_fn, _ = quadratic()
    transform = factory(jax.random.key(0))
    with pytest.raises(ValueError, match="needs params"):
        transform.update(PARAMS, transform.init(PARAMS), None, value_fn=value_fn)


def test_activations_must_match_their_weight(linear_regression):
    value_fn, params, _, inputs = linear_regression
    key = jax.random.key(0)
    with pytest.raises(ValueError, match=r"activations for params\['w'\].*\(batch, 7\)"):
        szo_estimate(value_fn, params, key, activations={"w": inputs[:, :7], "b": None})
    with pytest.raises(
        ValueError, match=r"activations for params\['w'\] must be \(batch, fan_in\)"
    ):
        szo_estimate(value_fn, params, key, activations={"w": inputs[None], "b": None})
    with pytest.raises(ValueError, match="activations must have the pytree structure"):
        szo_estimate(value_fn, params, key, activations=[inputs])


def test_square_weights_need_a_layout():
    params = {"w": jnp.ones((4, 4))}
    value_fn = lambda p: jnp.sum(p["w"] ** 2)  # noqa: E731
    activations = {"w": jnp.ones((3, 4))}
    with pytest.raises(ValueError, match="layout='in_out'"):
        szo_estimate(value_fn, params, jax.random.key(0), activations=activations)
    estimate = szo_estimate(
        value_fn, params, jax.random.key(0), activations=activations, layout="out_in"
    )
    assert estimate.grad["w"].shape == (4, 4)
    with pytest.raises(ValueError, match="layout must be one of"):
        scale_by_szo(jax.random.key(0), layout="rows")


def test_auto_layout_refuses_a_kernel_both_layouts_fit():
    # a DenseGeneral query kernel (d_model, heads, head_dim) with heads * head_dim ==
    # d_model: auto read it silently as (fan_out, *fan_in) and probed the wrong subspace
    rows, d_model, heads, head_dim = 6, 8, 2, 4
    keys = jax.random.split(jax.random.key(0), 3)
    inputs = jax.random.normal(keys[0], (rows, d_model))
    targets = jax.random.normal(keys[1], (rows, heads, head_dim))
    params = {"w": 0.1 * jax.random.normal(keys[2], (d_model, heads, head_dim))}

    def value_fn(p):
        out = jnp.einsum("nd,dhk->nhk", inputs, p["w"])
        return 0.5 * jnp.mean(jnp.sum((out - targets) ** 2, (1, 2)))

    true_grad = jax.grad(value_fn)(params)
    options = dict(activations={"w": inputs}, kappa=rows, covariance_power=0.0, true_grad=true_grad)
    with pytest.raises(ValueError, match=r"shape \(8, 2, 4\) fits fan_in=8 in both layouts"):
        szo_estimate(value_fn, params, jax.random.key(1), **options)
    # the fan-in axes first: the gradient lies in span(inputs), all of it captured
    estimate = jax.jit(lambda k: szo_estimate(value_fn, params, k, layout="in_out", **options))(
        jax.random.key(1)
    )
    np.testing.assert_allclose(estimate.captured_energy, 1.0, rtol=1e-4)
    chex.assert_shape(estimate.grad["w"], (d_model, heads, head_dim))


def test_szo_orthogonalisation_needs_room():
    value_fn, _ = quadratic()
    with pytest.raises(ValueError, match="num_directions=9 exceeds the probe-space dimension 8"):
        szo_estimate(value_fn, PARAMS, jax.random.key(0), num_directions=9)


def test_hint_must_match_params():
    value_fn, _ = quadratic()
    key = jax.random.key(0)
    with pytest.raises(ValueError, match=r"hint leaf of shape \(7,\)"):
        cv_zod_estimate(value_fn, PARAMS, {"x": jnp.ones(7)}, key)
    with pytest.raises(ValueError, match=r"hint leaf of shape \(8, 2, 2\)"):
        cv_zod_estimate(value_fn, PARAMS, {"x": jnp.ones((8, 2, 2))}, key)
    with pytest.raises(ValueError, match="hint has k=9 directions for d=8"):
        cv_zod_estimate(value_fn, PARAMS, {"x": jnp.ones((8, 9))}, key)
    two_leaves = {"a": jnp.ones(3), "b": jnp.ones(2)}
    with pytest.raises(ValueError, match="same trailing"):
        cv_zod_estimate(
            lambda p: jnp.sum(p["a"]) + jnp.sum(p["b"]),
            two_leaves,
            {"a": jnp.ones((3, 2)), "b": jnp.ones(2)},
            key,
        )
    transform = scale_by_cv_zod(key)
    with pytest.raises(ValueError, match="needs the extra arg hint"):
        transform.update(PARAMS, transform.init(PARAMS), PARAMS, value_fn=value_fn)


NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize(
    ("build", "name", "bad", "expected"),
    [
        *[(scale_by_spsa, "sigma_decay", v, "be finite and >= 0") for v in (-1.0, NAN, INF)],
        *[(scale_by_cv_zod, "ema_decay", v, "lie in \\[0, 1\\)") for v in (-0.1, 1.0, 1.5, NAN)],
        *[(scale_by_szo, "covariance_power", v, "be finite") for v in (NAN, INF, -INF)],
    ],
)
def test_hyperparameters_out_of_range_are_named(build, name, bad, expected):
    with pytest.raises(ValueError, match=f"{name} must {expected}, got {bad!r}"):
        build(jax.random.key(0), **{name: bad})


@pytest.mark.parametrize(
    ("build", "name"),
    [
        (scale_by_cv_zod, "ema_decay"),
        (scale_by_spsa, "sigma_decay"),
        (scale_by_szo, "covariance_power"),
        (scale_by_spsa, "sigma"),
        (scale_by_szo, "tail_weight"),
    ],
)
def test_hyperparameters_are_scalars(build, name):
    # an array set one value per entry of whatever it met: cv_zod's averages became (2,)
    # and failed at the second update, SPSA's decay failed naming sigma
    with pytest.raises(ValueError, match=rf"{name} must be a scalar, got shape \(2,\)"):
        build(jax.random.key(0), **{name: jnp.array([0.1, 0.2])})


def test_tail_weight_must_be_finite(linear_regression):
    value_fn, params, activations, _ = linear_regression
    with pytest.raises(ValueError, match="tail_weight must be finite and > 0, got inf"):
        szo_estimate(
            value_fn, params, jax.random.key(0), activations=activations,
            bias_correction=True, tail_weight=INF,
        )  # fmt: skip


def test_true_grad_leaves_must_have_their_parameters_shapes():
    params = {"a": jnp.ones(3), "b": jnp.ones(2)}
    value_fn = lambda p: jnp.sum(p["a"] ** 2) + jnp.sum(p["b"] ** 2)  # noqa: E731
    swapped = {"a": jnp.ones(2), "b": jnp.ones(3)}  # read silently as one flat vector
    key = jax.random.key(0)
    with pytest.raises(ValueError, match=r"true_grad\['a'\] must have the shape of params"):
        cv_zod_estimate(value_fn, params, params, key, true_grad=swapped)
    with pytest.raises(ValueError, match=r"true_grad\['a'\] must have the shape of params"):
        szo_estimate(value_fn, params, key, true_grad=swapped)


def test_true_grad_leaves_must_not_be_none():
    # flatten_like lets None through ("not covered"); the diagnostics need the whole
    # gradient, and a None leaf failed with a TypeError from inside jnp
    params = {"w": jnp.ones((3, 2)), "b": jnp.ones(2)}
    value_fn = lambda p: jnp.sum(p["w"] ** 2) + jnp.sum(p["b"] ** 2)  # noqa: E731
    partial = {"w": 2.0 * jnp.ones((3, 2)), "b": None}
    key = jax.random.key(0)
    message = r"true_grad\['b'\] is None: true_grad must give the gradient of every"
    with pytest.raises(ValueError, match=message):
        szo_estimate(value_fn, params, key, true_grad=partial)
    with pytest.raises(ValueError, match=message):
        cv_zod_estimate(value_fn, params, params, key, true_grad=partial)
    transform = scale_by_cv_zod(key, mode="oracle")
    with pytest.raises(ValueError, match=message):
        transform.update(
            params, transform.init(params), params, value_fn=value_fn, hint=params,
            true_grad=partial,
        )  # fmt: skip


@pytest.mark.parametrize("name", sorted(ESTIMATES))
def test_sigma_lost_to_rounding_is_refused(name):
    # bfloat16 at |x| ~ 1 has spacing 2**-7: x +- 1e-3 rounded back to x, so eager calls
    # returned exactly 0 and jitted ones a biased estimate
    estimate = ESTIMATES[name]
    params = {"w": jnp.ones((4, 3), jnp.bfloat16), "b": jnp.full(3, 0.01, jnp.bfloat16)}

    def value_fn(p):
        return jnp.sum(p["w"].astype(jnp.float32) ** 2) + jnp.sum(p["b"].astype(jnp.float32))

    key = jax.random.key(0)
    message = (
        r"sigma=0.001 is lost to rounding in bfloat16 parameters: x \+- sigma rounds back to x "
        r"at 12 of 12 entries of params\['w'\] \(the smallest such \|x\| is 1, "
    )
    with pytest.raises(ValueError, match=message):
        estimate(value_fn, params, key, num_directions=2)
    # parameters closed over by a jitted function are concrete: checked all the same
    with pytest.raises(ValueError, match=message):
        jax.jit(lambda k: estimate(value_fn, params, k, num_directions=2).grad)(key)
    # a step above the spacing passes, in float32 the default does
    grad = estimate(value_fn, params, key, num_directions=2, sigma=0.02).grad
    chex.assert_trees_all_equal_dtypes(grad, params)
    as_float32 = jax.tree.map(lambda x: x.astype(jnp.float32), params)
    chex.assert_tree_all_finite(estimate(value_fn, as_float32, key, num_directions=2).grad)
    # traced parameters cannot be checked (the docstrings say so)
    jax.jit(lambda p: estimate(value_fn, p, key, num_directions=2).grad)(params)
    # an infinite entry is the estimate's to report (inf + sigma == inf is no rounding; the
    # check raised an OverflowError computing the spacing at |x| = inf)
    infinite = {"w": jnp.ones((4, 3)).at[0, 0].set(jnp.inf), "b": jnp.zeros(3)}
    grad = estimate(value_fn, infinite, key, num_directions=2).grad
    assert not np.all(np.isfinite(np.asarray(grad["w"])))


@pytest.mark.parametrize("name", sorted(ESTIMATES))
def test_value_fn_that_cannot_be_vmapped_is_named(name):
    # a host callback without vmap_method failed inside the estimator with vmap's own
    # NotImplementedError, which named neither value_fn nor the fix
    estimate = ESTIMATES[name]
    params = {"x": jnp.arange(1.0, 5.0)}

    def host_loss(x):
        return np.asarray(0.5 * np.sum(np.asarray(x) ** 2), np.float32)

    def callback_loss(vmap_method=None):
        result = jax.ShapeDtypeStruct((), jnp.float32)
        return lambda p: jax.pure_callback(host_loss, result, p["x"], vmap_method=vmap_method)

    key = jax.random.key(0)
    with pytest.raises(TypeError, match=r"value_fn must be batchable.*vmap_method") as info:
        estimate(callback_loss(), params, key, num_directions=2, sigma=1e-2)
    assert isinstance(info.value.__cause__, NotImplementedError)
    grad = estimate(callback_loss("sequential"), params, key, num_directions=2, sigma=1e-2)
    chex.assert_tree_all_finite(grad.grad)

    def unsupported(p):  # a NotImplementedError that is not about batching passes as it is
        raise NotImplementedError("this loss is not written yet")

    with pytest.raises(NotImplementedError, match="this loss is not written yet"):
        estimate(unsupported, params, key, num_directions=2, sigma=1e-2)


@pytest.mark.parametrize("bad", [NAN, INF])
def test_szo_estimate_checks_covariance_power(linear_regression, bad):
    value_fn, params, activations, _ = linear_regression
    with pytest.raises(ValueError, match=f"covariance_power must be finite, got {bad!r}"):
        szo_estimate(
            value_fn, params, jax.random.key(0), activations=activations, covariance_power=bad
        )


@pytest.mark.parametrize(
    ("build", "name", "good"),
    [
        (scale_by_spsa, "sigma_decay", 0.0),
        (scale_by_cv_zod, "ema_decay", 0.0),
        (scale_by_szo, "covariance_power", 2.0),
    ],
)
def test_hyperparameters_in_range_and_traced_ones_pass(build, name, good):
    build(jax.random.key(0), **{name: good})
    build(jax.random.key(0), **{name: jnp.asarray(good)})
    # under jit (optax.inject_hyperparams, a schedule) the value is traced: not checked
    jax.jit(lambda v: build(jax.random.key(0), **{name: v}).init(PARAMS))(good)


def test_cv_zod_mode_checks():
    value_fn, _ = quadratic()
    with pytest.raises(ValueError, match="mode must be one of"):
        scale_by_cv_zod(jax.random.key(0), mode="best")
    transform = scale_by_cv_zod(jax.random.key(0), mode="oracle")
    with pytest.raises(ValueError, match="needs the extra arg true_grad"):
        transform.update(
            PARAMS, transform.init(PARAMS), PARAMS, value_fn=value_fn, hint={"x": jnp.ones(8)}
        )


def test_integer_params_are_refused():
    with pytest.raises(TypeError, match="params must be floating point"):
        cv_zod_estimate(
            lambda p: jnp.sum(p["x"]).astype(jnp.float32),
            {"x": jnp.ones(3, jnp.int32)},
            {"x": jnp.ones(3)},
            jax.random.key(0),
        )
    # SZO said only that the probes' normal draw needs a float dtype
    with pytest.raises(TypeError, match="params must be floating point"):
        szo_estimate(
            lambda p: jnp.sum(p["x"]).astype(jnp.float32),
            {"x": jnp.ones(3, jnp.int32)},
            jax.random.key(0),
        )
