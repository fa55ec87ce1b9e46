"""The activation helpers return the inputs each dense/conv layer actually multiplies."""

import chex
import equinox as eqx
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxopt_suite.zeroth_order import (
    equinox_forward_with_activations,
    flax_forward_with_activations,
    szo_estimate,
)


class FlaxCNN(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Conv(4, (3, 3), padding="SAME", name="conv_same")(x))
        x = nn.Conv(6, (3, 3), strides=2, padding="VALID", name="conv_strided")(x)
        x = x.reshape(x.shape[0], -1)
        hidden = nn.Dense(7, name="hidden")
        return nn.Dense(3, name="out")(jnp.tanh(hidden(x)) + jnp.tanh(hidden(x) * 0.5)[:, :7])


@pytest.fixture(scope="module")
def flax_setup():
    x = jax.random.normal(jax.random.key(0), (5, 8, 8, 2))
    model = FlaxCNN()
    variables = model.init(jax.random.key(1), x)
    outputs, acts = jax.jit(lambda v, x: flax_forward_with_activations(model, v, x))(variables, x)
    return model, variables, x, outputs, acts


def _check_rows(rows, kernel, bias, output):
    fan_out = kernel.shape[-1]
    predicted = rows @ kernel.reshape(-1, fan_out) + bias[None, :]
    np.testing.assert_allclose(predicted, output.reshape(-1, fan_out), atol=1e-5)


def test_flax_conv_rows_reproduce_each_convolution(flax_setup):
    model, variables, x, outputs, acts = flax_setup
    params = variables["params"]
    chex.assert_trees_all_close(outputs, model.apply(variables, x))
    first = nn.Conv(4, (3, 3), padding="SAME").apply({"params": params["conv_same"]}, x)
    _check_rows(
        acts["params"]["conv_same"]["kernel"],
        params["conv_same"]["kernel"],
        params["conv_same"]["bias"],
        first,
    )
    second = nn.Conv(6, (3, 3), strides=2, padding="VALID").apply(
        {"params": params["conv_strided"]}, nn.relu(first)
    )
    _check_rows(
        acts["params"]["conv_strided"]["kernel"],
        params["conv_strided"]["kernel"],
        params["conv_strided"]["bias"],
        second,
    )
    assert acts["params"]["conv_same"]["bias"] is None


def test_flax_shared_layer_stacks_every_call(flax_setup):
    _, _, x, _, acts = flax_setup
    rows = acts["params"]["hidden"]["kernel"]
    chex.assert_shape(rows, (2 * x.shape[0], 54))
    np.testing.assert_allclose(rows[:5], rows[5:])  # same input, called twice
    chex.assert_shape(acts["params"]["out"]["kernel"], (5, 7))


def test_equinox_helper_on_mlp_and_conv_sequential():
    keys = jax.random.split(jax.random.key(2), 3)
    conv = eqx.nn.Conv2d(2, 3, 3, padding=1, stride=1, key=keys[0])
    model = eqx.nn.Sequential(
        [
            conv,
            eqx.nn.Lambda(jax.nn.relu),
            eqx.nn.Lambda(lambda z: z.reshape(-1)),
            eqx.nn.Linear(3 * 6 * 6, 4, key=keys[1]),
        ]
    )
    x = jax.random.normal(keys[2], (5, 2, 6, 6))
    outputs, acts = eqx.filter_jit(equinox_forward_with_activations)(model, x)
    chex.assert_trees_all_close(outputs, jax.vmap(model)(x), atol=1e-6)
    rows = acts.layers[0].weight
    conv_out = jax.vmap(conv)(x)  # (5, 3, 6, 6)
    predicted = rows @ conv.weight.reshape(3, -1).T + conv.bias.reshape(1, -1)
    np.testing.assert_allclose(predicted, jnp.moveaxis(conv_out, 1, -1).reshape(-1, 3), atol=1e-5)
    hidden = jax.vmap(lambda e: jax.nn.relu(conv(e)).reshape(-1))(x)
    np.testing.assert_allclose(acts.layers[3].weight, hidden, atol=1e-6)
    assert acts.layers[0].bias is None

    mlp = eqx.nn.MLP(4, 2, 8, 2, key=keys[0])
    _, mlp_acts = equinox_forward_with_activations(mlp, jnp.ones((6, 4)))
    chex.assert_shape(mlp_acts.layers[0].weight, (6, 4))
    chex.assert_shape(mlp_acts.layers[2].weight, (6, 8))

    scanned = eqx.nn.MLP(4, 2, 8, 3, scan=True, key=keys[1])
    with pytest.raises(ValueError, match="scan=True"):
        equinox_forward_with_activations(scanned, jnp.ones((6, 4)))


def test_szo_accepts_both_helpers(flax_setup):
    model, variables, x, _, acts = flax_setup

    def value_fn(v):
        return jnp.mean(model.apply(v, x) ** 2)

    estimate = jax.jit(
        lambda v, a: szo_estimate(
            value_fn, v, jax.random.key(0), activations=a, kappa=2, layout="in_out"
        )
    )(variables, acts)
    chex.assert_trees_all_equal_shapes(estimate.grad, variables)
    chex.assert_tree_all_finite(estimate.grad)

    mlp = eqx.nn.MLP(4, 2, 8, 2, key=jax.random.key(3))
    inputs = jax.random.normal(jax.random.key(4), (6, 4))
    params, static = eqx.partition(mlp, eqx.is_inexact_array)
    _, mlp_acts = equinox_forward_with_activations(mlp, inputs)

    def mlp_loss(p):
        return jnp.mean(jax.vmap(eqx.combine(p, static))(inputs) ** 2)

    def estimate(pair_biases):
        return szo_estimate(
            mlp_loss,
            params,
            jax.random.key(0),
            activations=mlp_acts,
            kappa=2,
            layout="out_in",
            pair_biases=pair_biases,
        )

    paired = estimate(True)
    chex.assert_trees_all_equal_shapes(paired.grad, params)
    # 2 directions x (8 + 8 + 2) outputs; each bias rides with its weight as a constant input.
    assert paired.subspace_dim == 2 * 8 + 2 * 8 + 2 * 2
    # Unpaired, the biases (8 + 8 + 2 entries) are probed isotropically.
    assert estimate(False).subspace_dim == 2 * 8 + 2 * 8 + 2 * 2 + 8 + 8 + 2


def test_equinox_same_lower_padding_is_recorded():
    # "SAME_LOWER" reached conv_general_dilated as None and raised
    keys = jax.random.split(jax.random.key(2), 2)
    conv = eqx.nn.Conv2d(2, 3, 2, padding="SAME_LOWER", key=keys[0])
    x = jax.random.normal(keys[1], (5, 2, 6, 6))
    outputs, acts = equinox_forward_with_activations(conv, x)
    predicted = acts.weight @ conv.weight.reshape(3, -1).T + conv.bias.reshape(1, -1)
    np.testing.assert_allclose(predicted, jnp.moveaxis(outputs, 1, -1).reshape(-1, 3), atol=1e-5)


def test_layers_inside_an_inner_transformation_are_refused_by_name():
    # their inputs are tracers of a transformation that has returned: equinox raised
    # UnexpectedTracerError, flax returned them and failed at their first use
    class PerToken(eqx.Module):
        lin: eqx.nn.Linear

        def __call__(self, x):  # x: (tokens, 4)
            return jax.vmap(self.lin)(x)

    model = PerToken(eqx.nn.Linear(4, 3, key=jax.random.key(0)))
    with pytest.raises(ValueError, match=r"layer model\.lin is called inside a transformation"):
        equinox_forward_with_activations(model, jnp.ones((5, 6, 4)))

    class FlaxPerToken(nn.Module):
        @nn.compact
        def __call__(self, x):  # (batch, tokens, 4)
            dense = nn.vmap(
                nn.Dense, in_axes=1, out_axes=1, variable_axes={"params": None},
                split_rngs={"params": False},
            )  # fmt: skip
            return dense(3)(x)

    flax_model = FlaxPerToken()
    x = jnp.ones((5, 6, 4))
    variables = flax_model.init(jax.random.key(0), x)
    with pytest.raises(ValueError, match=r"layer VmapDense_0 is called inside a transformation"):
        flax_forward_with_activations(flax_model, variables, x)
    # under an outer jit the recorded inputs are that jit's own, live tracers: recorded
    dense = nn.Dense(3)
    dense_variables = dense.init(jax.random.key(0), x)
    _, acts = jax.jit(lambda v, x: flax_forward_with_activations(dense, v, x))(dense_variables, x)
    np.testing.assert_array_equal(acts["params"]["kernel"], x.reshape(-1, 4))
