"""The contract every zeroth-order member keeps, parameterised over the family."""

import functools

import chex
import jax
import jax.numpy as jnp
import optax
import pytest

from jaxopt_suite.zeroth_order import (
    scale_by_cv_zod,
    scale_by_gaussian_smoothing,
    scale_by_spsa,
    scale_by_szo,
)
from tests.zeroth_order.conftest import quadratic

# name -> (factory, keyword options, static args for inject_hyperparams, learning rate)
MEMBERS = {
    "spsa": (scale_by_spsa, {"num_directions": 4, "sigma": 1e-3}, ("num_directions",), 0.1),
    "gaussian_smoothing": (
        scale_by_gaussian_smoothing,
        {"num_directions": 4, "sigma": 1e-3},
        ("num_directions",),
        0.1,
    ),
    "szo": (scale_by_szo, {"num_directions": 4, "sigma": 1e-3}, ("num_directions", "kappa"), 0.1),
    "cv_zod": (scale_by_cv_zod, {"num_directions": 4, "sigma": 1e-3}, ("num_directions",), 0.5),
}
EVALS_PER_UPDATE = {"spsa": 8, "gaussian_smoothing": 8, "szo": 8, "cv_zod": 10}


def _extra(name, grad, key):
    """Extra args a member needs: CV-ZOD takes a hint (here a noisy gradient)."""
    if name != "cv_zod":
        return {}
    noise = jax.tree.map(lambda g: 0.3 * jax.random.normal(key, g.shape), grad)
    return {"hint": jax.tree.map(jnp.add, grad, noise)}


def _run(name, transform, params, value_fn, grad_fn, lr, steps, extra_fn=None):
    """``steps`` updates of chain(transform, sgd(lr)) inside one lax.scan."""
    opt = optax.chain(transform, optax.sgd(lr))

    def body(carry, key):
        params, state = carry
        extra = _extra(name, grad_fn(params), key)
        if extra_fn is not None:
            extra.update(extra_fn(params))
        updates, state = opt.update(params, state, params, value_fn=value_fn, **extra)
        return (optax.apply_updates(params, updates), state), value_fn(params)

    keys = jax.random.split(jax.random.key(7), steps)
    (params, state), losses = jax.lax.scan(body, (params, opt.init(params)), keys)
    return params, state, losses


@pytest.mark.parametrize("name", sorted(MEMBERS))
def test_converges_on_quadratic_inside_scan(name):
    factory, options, _, lr = MEMBERS[name]
    value_fn, grad_fn = quadratic()
    params = {"x": jnp.zeros(8)}
    run = jax.jit(
        lambda p: _run(name, factory(jax.random.key(1), **options), p, value_fn, grad_fn, lr, 300)
    )
    final, state, _ = run(params)
    optimum = value_fn({"x": jnp.linspace(-1.0, 1.0, 8) / jnp.linspace(0.5, 2.0, 8)})
    gap0 = value_fn(params) - optimum
    assert value_fn(final) - optimum < 1e-2 * gap0
    assert int(state[0].num_evals) == 300 * EVALS_PER_UPDATE[name]


def _mixed_problem():
    """Nested dict/tuple pytree: a linear layer (with activations), a bias and a scalar."""
    inputs = jax.random.normal(jax.random.key(3), (24, 6))
    targets = jax.random.normal(jax.random.key(4), (24, 3))

    def value_fn(p):
        w, b = p["layer"]
        residual = inputs @ w + b[None, :] - targets
        return 0.5 * jnp.mean(jnp.sum(residual**2, -1)) + 0.5 * (p["scale"] - 2.0) ** 2

    design = jnp.concatenate([inputs, jnp.ones((24, 1))], axis=1)
    solution = jnp.linalg.lstsq(design, targets)[0]
    optimum = value_fn({"layer": (solution[:6], solution[6]), "scale": jnp.asarray(2.0)})
    params = {"layer": (jnp.zeros((6, 3)), jnp.zeros(3)), "scale": jnp.asarray(0.0)}
    activations = {"layer": (inputs, None), "scale": None}
    return value_fn, params, activations, optimum


@pytest.mark.parametrize("name", sorted(MEMBERS))
def test_converges_on_mixed_pytree(name):
    factory, options, _, lr = MEMBERS[name]
    value_fn, params, activations, optimum = _mixed_problem()
    grad_fn = jax.grad(value_fn)
    extra_fn = (lambda p: {"activations": activations}) if name == "szo" else None
    run = jax.jit(
        lambda p: _run(
            name, factory(jax.random.key(2), **options), p, value_fn, grad_fn, lr, 600, extra_fn
        )
    )
    final, _, _ = run(params)
    chex.assert_trees_all_equal_shapes_and_dtypes(final, params)
    assert value_fn(final) - optimum < 2e-2 * (value_fn(params) - optimum)


@pytest.mark.parametrize("name", sorted(MEMBERS))
def test_accepts_unknown_extra_args_and_does_not_recompile(name):
    factory, options, _, _ = MEMBERS[name]
    value_fn, grad_fn = quadratic()
    transform = factory(jax.random.key(1), **options)

    @jax.jit
    def step(params, state, offset):
        shifted = lambda p: value_fn(p) + offset * jnp.sum(p["x"])  # noqa: E731
        extra = _extra(name, grad_fn(params), jax.random.key(5))
        return transform.update(
            params, state, params, value_fn=shifted, unknown_extra=offset, **extra
        )

    params = {"x": jnp.ones(8)}
    state = transform.init(params)
    updates, state = step(params, state, 0.0)
    updates, state = step(params, state, 1.0)
    assert step._cache_size() == 1
    chex.assert_trees_all_equal_shapes_and_dtypes(updates, params)
    chex.assert_tree_all_finite(updates)
    assert int(state.count) == 2


@pytest.mark.parametrize("name", sorted(MEMBERS))
def test_works_under_inject_hyperparams(name):
    factory, options, static_args, lr = MEMBERS[name]
    value_fn, grad_fn = quadratic()
    transform = optax.inject_hyperparams(factory, static_args=static_args)(
        key=jax.random.key(1), **options
    )
    final, state, _ = jax.jit(lambda p: _run(name, transform, p, value_fn, grad_fn, lr, 300))(
        {"x": jnp.zeros(8)}
    )
    assert float(state[0].hyperparams["sigma"]) == pytest.approx(options["sigma"])
    assert value_fn(final) < value_fn({"x": jnp.zeros(8)})
    # The injected sigma is a state leaf: changing it needs no new transform.
    inner = state[0]
    changed = inner._replace(hyperparams={**inner.hyperparams, "sigma": jnp.asarray(1e-2)})
    extra = _extra(name, grad_fn(final), jax.random.key(0))
    updates, _ = transform.update(final, changed, final, value_fn=value_fn, **extra)
    chex.assert_tree_all_finite(updates)


@pytest.mark.parametrize("name", sorted(MEMBERS))
def test_vmaps_over_keys(name):
    factory, options, _, lr = MEMBERS[name]
    value_fn, grad_fn = quadratic()

    def run(key):
        transform = factory(key, **options)
        final, _, losses = _run(name, transform, {"x": jnp.zeros(8)}, value_fn, grad_fn, lr, 100)
        return losses[-1], final

    last_losses, finals = jax.jit(jax.vmap(run))(jax.random.split(jax.random.key(9), 3))
    chex.assert_shape(finals["x"], (3, 8))
    assert bool(jnp.all(last_losses < value_fn({"x": jnp.zeros(8)})))
    # Different keys give different trajectories.
    assert float(jnp.max(jnp.abs(finals["x"][0] - finals["x"][1]))) > 0


@pytest.mark.parametrize("name", sorted(MEMBERS))
def test_key_is_split_every_update(name):
    factory, options, _, _ = MEMBERS[name]
    value_fn, grad_fn = quadratic()
    transform = factory(jax.random.key(1), **options)
    params = {"x": jnp.ones(8)}
    extra = _extra(name, grad_fn(params), jax.random.key(5))
    update = jax.jit(functools.partial(transform.update, value_fn=value_fn, **extra))
    first, state = update(params, transform.init(params), params)
    second, _ = update(params, state, params)
    assert float(jnp.max(jnp.abs(first["x"] - second["x"]))) > 0


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_low_precision_params_keep_their_dtype(dtype):
    # LAPACK has no bf16 / f16 QR, eigh or SVD (SZO and CV-ZOD raised NotImplementedError),
    # and a float32 loss promoted SPSA's and Gaussian smoothing's estimate to float32, which
    # broke an optax chain's carry in lax.scan
    from jaxopt_suite.zeroth_order import (
        cv_zod_estimate,
        gaussian_smoothing_estimate,
        spsa_estimate,
        szo_estimate,
    )

    params = {"w": jnp.ones((4, 3), dtype), "b": jnp.zeros(3, dtype)}
    inputs = jax.random.normal(jax.random.key(1), (6, 4))

    def loss(p):
        out = inputs @ p["w"].astype(jnp.float32) + p["b"].astype(jnp.float32)[None, :]
        return jnp.mean(out**2)

    key = jax.random.key(0)
    sigma = 1e-2  # above the bfloat16 spacing at 1 (2**-7): the default 1e-3 rounds away
    estimates = [
        spsa_estimate(loss, params, key, num_directions=2, sigma=sigma).grad,
        gaussian_smoothing_estimate(loss, params, key, num_directions=2, sigma=sigma).grad,
        szo_estimate(
            loss, params, key, activations={"w": inputs, "b": None}, kappa=2, sigma=sigma
        ).grad,
        szo_estimate(loss, params, key, orthogonalize=True, num_directions=2, sigma=sigma).grad,
        cv_zod_estimate(loss, params, params, key, num_directions=2, sigma=sigma).grad,
    ]
    for grad in estimates:
        for leaf in jax.tree.leaves(grad):
            assert leaf.dtype == dtype
            assert bool(jnp.all(jnp.isfinite(leaf.astype(jnp.float32))))
