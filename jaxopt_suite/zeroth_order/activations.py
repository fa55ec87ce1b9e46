"""Layer inputs of one forward pass, in the form :func:`scale_by_szo` takes them.

Each helper runs the model once and returns ``(outputs, activations)``, where
``activations`` has the structure of the parameters and maps every dense weight to its
``(N, fan_in)`` inputs and every convolution kernel to its im2col patches, ordered like the
kernel's fan-in axes; all other leaves are ``None``. A layer applied several times stacks
the inputs of every call (its gradient is the sum over calls).

* :func:`flax_forward_with_activations`: ``flax.linen`` models (``nn.Dense``, ``nn.Conv``);
  weights are (*fan_in, fan_out), so pass ``layout="in_out"`` to SZO.
* :func:`equinox_forward_with_activations`: equinox models built from ``eqx.nn.Linear`` and
  ``eqx.nn.Conv*`` called per example (``MLP``, ``Sequential``, custom modules); weights are
  (fan_out, *fan_in), so pass ``layout="out_in"``.

Convolutions with feature groups or non-zero padding modes are left ``None`` (SZO then probes
them isotropically).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp

from jaxopt_suite.zeroth_order._common import key_name

__all__ = [
    "conv_patches",
    "equinox_forward_with_activations",
    "flax_forward_with_activations",
]


def conv_patches(
    inputs: jax.Array,
    kernel_size: Sequence[int],
    strides: Sequence[int],
    padding: str | Sequence[tuple[int, int]],
    *,
    input_dilation: Sequence[int] | None = None,
    kernel_dilation: Sequence[int] | None = None,
    channels_last: bool,
) -> jax.Array:
    """im2col rows (N * positions, fan_in) of a batched convolution input.

    ``channels_last`` inputs are (B, *spatial, C) with fan-in ordered (*kernel, C) as in a
    flax kernel; otherwise (B, C, *spatial) with fan-in ordered (C, *kernel) as in an
    equinox/PyTorch weight.
    """
    num_spatial = len(kernel_size)
    spatial = "DHW"[-num_spatial:] if num_spatial <= 3 else None
    if spatial is None:
        raise ValueError(f"convolutions with {num_spatial} spatial dims are not supported")
    layout = ("N" + spatial + "C") if channels_last else ("NC" + spatial)
    patches = jax.lax.conv_general_dilated_patches(
        inputs,
        tuple(kernel_size),
        tuple(strides),
        padding,
        lhs_dilation=None if input_dilation is None else tuple(input_dilation),
        rhs_dilation=None if kernel_dilation is None else tuple(kernel_dilation),
        dimension_numbers=(layout, "OI" + spatial, layout),
    )
    channels = inputs.shape[-1] if channels_last else inputs.shape[1]
    window = 1
    for size in kernel_size:
        window *= size
    if channels_last:
        # Features come channel-major (C, *kernel); a flax kernel flattens as (*kernel, C).
        rows = patches.reshape(-1, channels, window).transpose(0, 2, 1)
        return rows.reshape(-1, channels * window)
    moved = jnp.moveaxis(patches, 1, -1)
    return moved.reshape(-1, channels * window)


def _as_pairs(padding: Any, num_spatial: int) -> str | list[tuple[int, int]] | None:
    if isinstance(padding, str):
        return padding.upper() if padding.upper() in ("SAME", "SAME_LOWER", "VALID") else None
    if isinstance(padding, int):
        return [(padding, padding)] * num_spatial
    pairs = []
    for item in padding:
        pairs.append((item, item) if isinstance(item, int) else tuple(item))
    return pairs if len(pairs) == num_spatial else None


def _tuple(value: Any, num_spatial: int) -> tuple[int, ...]:
    if value is None:
        return (1,) * num_spatial
    if isinstance(value, int):
        return (value,) * num_spatial
    return tuple(value)


def _flax_rows(module: Any, inputs: jax.Array) -> jax.Array | None:
    import flax.linen as nn

    if isinstance(module, nn.Dense):
        return inputs.reshape(-1, inputs.shape[-1])
    kernel_size = _tuple(module.kernel_size, 1)
    num_spatial = len(kernel_size)
    padding = _as_pairs(module.padding, num_spatial)
    if padding is None or module.feature_group_count != 1:
        return None
    if inputs.ndim == num_spatial + 1:
        inputs = inputs[None]
    inputs = inputs.reshape(-1, *inputs.shape[-num_spatial - 1 :])
    return conv_patches(
        inputs,
        kernel_size,
        _tuple(module.strides, num_spatial),
        padding,
        input_dilation=_tuple(module.input_dilation, num_spatial),
        kernel_dilation=_tuple(module.kernel_dilation, num_spatial),
        channels_last=True,
    )


def _escaped(value: Any) -> bool:
    """Whether ``value`` is a tracer of a transformation that has already returned (a layer
    called inside an inner ``vmap``, ``scan`` or ``jit``): its value cannot be used."""
    trace = getattr(value, "_trace", None)
    return (
        isinstance(value, jax.core.Tracer) and hasattr(trace, "is_valid") and not trace.is_valid()
    )


def _inner_transform_error(layer: str) -> ValueError:
    return ValueError(
        f"{layer} is called inside a transformation of its own (jax.vmap, lax.scan, jax.jit or "
        "flax's lifted nn.vmap / nn.scan), whose inputs cannot be recorded from outside; call "
        "the layer directly on the batch (a per-token layer: reshape the tokens into the batch)"
    )


def _tree_from_lookup(tree: Any, lookup: dict[tuple, jax.Array]) -> Any:
    """A tree like ``tree`` holding ``lookup[path]`` at matching leaves, ``None`` elsewhere."""

    def pick(path, _):
        return lookup.get(tuple(key_name(entry) for entry in path))

    return jax.tree_util.tree_map_with_path(pick, tree)


def flax_forward_with_activations(
    module: Any, variables: Any, *args: Any, **kwargs: Any
) -> tuple[Any, Any]:
    """Runs ``module.apply(variables, *args, **kwargs)`` and records dense/conv inputs.

    Returns:
      ``(outputs, activations)`` with ``activations`` structured like ``variables`` (the
      kernel of every ``nn.Dense`` / ``nn.Conv`` holds its input rows, everything else
      ``None``). If ``variables`` is the inner ``params`` dict, pass it as
      ``{"params": params}`` and use ``activations["params"]``.

    A layer called inside a lifted transformation (``nn.vmap``, ``nn.scan``) is refused by
    name: its inputs are that transformation's tracers, which cannot be recorded from
    outside.
    """
    import flax.linen as nn

    records: dict[tuple, list] = {}

    def interceptor(next_fun, call_args, call_kwargs, context):
        target = context.module
        if context.method_name == "__call__" and isinstance(target, (nn.Dense, nn.Conv)):
            records.setdefault(tuple(target.scope.path), []).append((target, call_args[0]))
        return next_fun(*call_args, **call_kwargs)

    with nn.intercept_methods(interceptor):
        outputs = module.apply(variables, *args, **kwargs)
    lookup = {}
    for path, calls in records.items():
        if any(_escaped(inputs) for _, inputs in calls):
            raise _inner_transform_error(f"layer {'/'.join(path)}")
        rows = [_flax_rows(target, inputs) for target, inputs in calls]
        if all(r is not None for r in rows):
            lookup[("params", *path, "kernel")] = jnp.concatenate(rows)
    return outputs, _tree_from_lookup(variables, lookup)


class _Recorder:
    """Stands in for a layer during one traced call and keeps the inputs it sees."""

    def __init__(self, layer: Any, store: list):
        self.layer, self.store = layer, store

    def __call__(self, x, *args, **kwargs):
        self.store.append(x)
        return self.layer(x, *args, **kwargs)


def _get(tree: Any, path: Sequence[Any]) -> Any:
    for entry in path:
        if isinstance(entry, jax.tree_util.GetAttrKey):
            tree = getattr(tree, entry.name)
        else:
            tree = tree[key_name(entry)]
    return tree


def _equinox_rows(layer: Any, calls: Sequence[jax.Array]) -> jax.Array | None:
    if isinstance(layer, eqx.nn.Linear):
        fan_in = layer.weight.shape[1]
        return jnp.concatenate([c.reshape(-1, fan_in) for c in calls])
    padding = _as_pairs(layer.padding, layer.num_spatial_dims)
    if layer.groups != 1 or layer.padding_mode != "ZEROS" or padding is None:
        return None
    rows = [
        conv_patches(
            c,
            layer.kernel_size,
            layer.stride,
            padding,
            kernel_dilation=layer.dilation,
            channels_last=False,
        )
        for c in calls
    ]
    return jnp.concatenate(rows)


def equinox_forward_with_activations(model: Any, inputs: jax.Array) -> tuple[Any, Any]:
    """Runs ``jax.vmap(model)(inputs)`` and records the inputs of its Linear/Conv layers.

    The model must call its layers directly in Python: an ``eqx.nn.MLP`` built with
    ``scan=True`` is refused, and so is a layer called inside a transformation of its own
    (``jax.vmap`` per token, ``lax.scan``, ``jax.jit``), by name, whose inputs cannot be
    recorded from outside.

    Returns:
      ``(outputs, activations)`` with ``activations`` structured like
      ``eqx.filter(model, eqx.is_inexact_array)``.
    """
    if getattr(model, "scan", False):
        raise ValueError("equinox_forward_with_activations cannot see inside scan=True MLPs")
    layer_types = (eqx.nn.Linear, eqx.nn.Conv)
    found, _ = jax.tree_util.tree_flatten_with_path(
        model, is_leaf=lambda node: isinstance(node, layer_types)
    )
    layers = [(path, node) for path, node in found if isinstance(node, layer_types)]

    def forward(example):
        stores = [[] for _ in layers]
        wrapped = eqx.tree_at(
            lambda m: [_get(m, path) for path, _ in layers],
            model,
            [_Recorder(layer, store) for (_, layer), store in zip(layers, stores, strict=True)],
        )
        outputs = wrapped(example)
        for (path, _), store in zip(layers, stores, strict=True):
            if any(_escaped(x) for x in store):
                raise _inner_transform_error(f"layer model{jax.tree_util.keystr(path)}")
        return outputs, tuple(tuple(store) for store in stores)

    outputs, recorded = jax.vmap(forward)(inputs)
    lookup = {}
    for (path, layer), calls in zip(layers, recorded, strict=True):
        rows = _equinox_rows(layer, calls) if calls else None
        if rows is not None:
            lookup[(*(key_name(entry) for entry in path), "weight")] = rows
    return outputs, _tree_from_lookup(eqx.filter(model, eqx.is_inexact_array), lookup)
