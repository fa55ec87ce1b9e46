"""Per-leaf random subspaces, factorized weights and the Rademacher bi-probe.

A leaf ``W`` of shape ``(d0, *rest)`` is moved only along ``W + P B`` with a probe
``P in {+-1/sqrt(r)}^{d0 x r}`` (so ``E[P P^T] = I``, in fact ``diag(P P^T) = 1`` exactly)
and coordinates ``B`` of shape ``(r, *rest)``. Gradients with respect to ``B`` at ``B = 0``
are ``P^T nabla_W``: r-row buffers instead of d0-row ones -- provided the loss never forms
``W + P B``. :class:`Factorized` leaves carry ``(W, P, B)`` unmerged, and :func:`dense`
applies them as ``a W + (a P) B``, so a model written with :func:`dense` keeps every
parameter-sized temporary out of the gradient (a loss that merges them, e.g. through
:func:`materialize`, still gets the right numbers, only without the memory saving).

Bi-probe (Hessian action). With independent probes ``P1, P2`` and
``phi(b1, b2) = g(y + P1 b1 + P2 b2)``, ``d^2 phi / db1 db2 = P1^T H P2``, so one
forward-over-reverse product gives ``s = P1^T H P2 (P2^T v)`` and ``P1 s`` is an unbiased
estimate of ``H v`` (``E[P1 P1^T] H E[P2 P2^T] = H``). One probe used twice is biased by
``(H + tr(H) I - 2 Diag H) / r`` per block, which is why there are two.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp


@jax.tree_util.register_pytree_node_class
class Factorized:
    """A weight ``base + sum_i P_i @ B_i`` kept unmerged (contracting ``P_i``'s last axis
    with ``B_i``'s first)."""

    def __init__(self, base: jax.Array, factors: tuple[tuple[jax.Array, jax.Array], ...]):
        self.base = base
        self.factors = tuple(factors)

    def tree_flatten(self):
        return (self.base, self.factors), None

    @classmethod
    def tree_unflatten(cls, aux, children):
        del aux
        return cls(*children)

    @property
    def shape(self):
        return jnp.shape(self.base)

    @property
    def dtype(self):
        return jnp.result_type(self.base)

    def materialize(self) -> jax.Array:
        out = self.base
        for p, b in self.factors:
            out = out + jnp.tensordot(p, b, axes=1).astype(out.dtype)
        return out

    def __repr__(self):
        ranks = [jnp.shape(p)[-1] for p, _ in self.factors]
        return f"Factorized(shape={self.shape}, ranks={ranks})"


def is_factorized(leaf: Any) -> bool:
    return isinstance(leaf, Factorized)


def materialize(tree: Any) -> Any:
    """Merges every :class:`Factorized` leaf of ``tree`` (other leaves pass through)."""
    return jax.tree.map(
        lambda leaf: leaf.materialize() if is_factorized(leaf) else leaf,
        tree,
        is_leaf=is_factorized,
    )


def dense(inputs: jax.Array, kernel: Any, bias: Any = None) -> jax.Array:
    """``inputs @ kernel + bias`` for plain or :class:`Factorized` ``kernel`` / ``bias``.

    A factorized kernel ``(W, P, B)`` is applied as ``inputs @ W + (inputs @ P) @ B``, so no
    kernel-sized array is formed, nor is one needed for gradients with respect to ``B``.
    """
    if is_factorized(kernel):
        out = inputs @ kernel.base
        for p, b in kernel.factors:
            out = out + (inputs @ p.astype(inputs.dtype)) @ b
    else:
        out = inputs @ kernel
    if bias is not None:
        bias = bias.materialize() if is_factorized(bias) else bias
        out = out + jnp.reshape(bias, (1,) * (out.ndim - jnp.ndim(bias)) + jnp.shape(bias))
    return out


def _dot_self(leaf: jax.Array) -> jax.Array:
    """``sum(leaf**2)`` as one dot: on CPU, XLA runs ``sum(square(w))`` as two kernels with
    a leaf-sized temporary between them, while a dot reads the leaf in place."""
    flat = jnp.ravel(leaf)
    if jnp.issubdtype(flat.dtype, jnp.floating) and jnp.finfo(flat.dtype).bits < 32:
        # a float16 sum of squares overflows past 65504
        return jnp.vdot(flat, flat, preferred_element_type=jnp.float32)
    return jnp.vdot(flat, flat)


def sq_norm(tree: Any) -> jax.Array:
    """``sum ||leaf||^2`` over ``tree``, with :class:`Factorized` leaves left unmerged.

    ``||W + sum_i P_i B_i||^2 = ||W||^2 + 2 sum_i <P_i^T W, B_i> + sum_ij <P_i B_i, P_j B_j>``,
    each term computed in the small coordinates, so an L2 penalty adds no leaf-sized buffer
    to the subspace gradient. Plain leaves are reduced with a dot for the same reason.
    """
    total = jnp.zeros([], jnp.float32)
    for leaf in jax.tree.leaves(tree, is_leaf=is_factorized):
        if not is_factorized(leaf):
            total = total + _dot_self(leaf)
            continue
        base = leaf.base
        total = total + _dot_self(base)
        for p, b in leaf.factors:
            total = total + 2.0 * jnp.sum(jnp.tensordot(p, base, axes=(0, 0)) * b)
        for p_i, b_i in leaf.factors:
            for p_j, b_j in leaf.factors:
                gram = p_i.T @ p_j  # (r_i, r_j)
                total = total + jnp.sum(b_i * jnp.tensordot(gram, b_j, axes=1))
    return total


# --- probes ------------------------------------------------------------------------------


def probe_shapes(y: Any, rank: int, exact_small_leaves: bool) -> list[int | None]:
    """Per leaf of ``y``: the subspace rank, or ``None`` for a leaf updated exactly.

    Raises if ``rank`` exceeds a leaf's first dimension, unless ``exact_small_leaves``: then
    every leaf with a dimension <= ``rank`` is updated exactly. Such a thin leaf (a bias, a
    ``(width, classes)`` read-out) is no larger than ``rank`` times its other dimensions,
    the size of the coordinates a projected wide leaf carries, so projecting it saves no
    memory worth its variance.
    """
    ranks = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(y)[0]:
        shape = jnp.shape(leaf)
        if not shape:
            ranks.append(None)  # scalars: nothing to project
            continue
        if exact_small_leaves and rank >= min(shape):
            ranks.append(None)
            continue
        if rank > shape[0]:
            raise ValueError(
                f"rank={rank} exceeds the first dimension {shape[0]} of y0"
                f"{jax.tree_util.keystr(path)} (shape {shape}); lower rank or pass "
                "exact_small_leaves=True to update such leaves in full"
            )
        ranks.append(rank)
    return ranks


def sample_probes(key: jax.Array, y: Any, ranks: list[int | None]) -> list[jax.Array | None]:
    """Independent Rademacher probes ``(d0, r) / sqrt(r)`` per projected leaf of ``y``."""
    leaves = jax.tree.leaves(y)
    keys = jax.random.split(key, len(leaves))
    probes = []
    for k, leaf, r in zip(keys, leaves, ranks, strict=True):
        if r is None:
            probes.append(None)
            continue
        dtype = jnp.result_type(leaf)
        sign = jax.random.rademacher(k, (jnp.shape(leaf)[0], r), dtype=dtype)
        probes.append(sign / jnp.sqrt(jnp.asarray(r, dtype)))
    return probes


def zero_coords(y: Any, probes: list) -> list[jax.Array]:
    """Zero coordinates: ``(r, *rest)`` per projected leaf, the leaf's shape otherwise."""
    out = []
    for leaf, p in zip(jax.tree.leaves(y), probes, strict=True):
        shape = jnp.shape(leaf)
        dtype = jnp.result_type(leaf)
        out.append(jnp.zeros(shape if p is None else (p.shape[1], *shape[1:]), dtype))
    return out


def project(probes: list, tree: Any) -> list[jax.Array]:
    """``P^T w`` per leaf (identity on exact leaves)."""
    return [
        leaf if p is None else jnp.tensordot(p, leaf, axes=(0, 0))
        for p, leaf in zip(probes, jax.tree.leaves(tree), strict=True)
    ]


def add_lifted(tree: Any, probes: list, coords: list, scale: jax.Array, chunks: int = 16) -> Any:
    """``tree + scale * P c`` per leaf, in place and in row blocks.

    ``tree - lr * (P @ c)`` written plainly makes XLA form the whole ``P @ c`` before the
    subtraction: one leaf-sized temporary. Row blocks updated with ``dynamic_update_slice``
    in a loop keep the temporary at ``1/chunks`` of the leaf (and are faster on CPU).
    """
    out = []
    for leaf, p, c in zip(jax.tree.leaves(tree), probes, coords, strict=True):
        if p is None:  # in the leaf's dtype: a float32 scale must not promote a float16 y
            out.append(leaf + (scale * c).astype(leaf.dtype))
            continue
        rows = leaf.shape[0]
        blocks = max(1, min(chunks, rows))
        while rows % blocks:
            blocks -= 1
        size = rows // blocks
        c_scaled = (scale * c).astype(leaf.dtype)
        if blocks == 1:
            out.append(leaf + jnp.tensordot(p, c_scaled, axes=1))
            continue

        def body(i, acc, p=p, c_scaled=c_scaled, size=size):
            start = i * size
            block = jax.lax.dynamic_slice_in_dim(acc, start, size, 0)
            p_block = jax.lax.dynamic_slice_in_dim(p, start, size, 0)
            block = block + jnp.tensordot(p_block, c_scaled, axes=1)
            return jax.lax.dynamic_update_slice_in_dim(acc, block, start, 0)

        out.append(jax.lax.fori_loop(0, blocks, body, leaf))
    return jax.tree.unflatten(jax.tree.structure(tree), out)


def lift(probes: list, coords: list, like: Any) -> Any:
    """``P c`` per leaf, as a pytree like ``like``."""
    leaves = [
        c if p is None else jnp.tensordot(p, c, axes=1) for p, c in zip(probes, coords, strict=True)
    ]
    return jax.tree.unflatten(jax.tree.structure(like), leaves)


def perturb(y: Any, moves: list[tuple[list, list]], factorized: bool) -> Any:
    """``y + sum_i P_i b_i`` per leaf; :class:`Factorized` leaves when ``factorized``."""
    out = []
    for index, leaf in enumerate(jax.tree.leaves(y)):
        exact = [b[index] for p, b in moves if p[index] is None]
        pairs = tuple((p[index], b[index]) for p, b in moves if p[index] is not None)
        for b in exact:
            leaf = leaf + b
        if pairs:
            if factorized:
                leaf = Factorized(leaf, pairs)
            else:
                for p, b in pairs:
                    leaf = leaf + jnp.tensordot(p, b, axes=1)
        out.append(leaf)
    return jax.tree.unflatten(jax.tree.structure(y), out)


def bi_probe(
    fun: Any, y: Any, v: Any, probes1: list, probes2: list, *, factorized: bool = False
) -> tuple[list, list]:
    """``(P1^T nabla fun(y), P1^T H P2 P2^T v)`` in the coordinates of ``P1``.

    One forward-over-reverse pass through ``phi(b1, b2) = fun(y + P1 b1 + P2 b2)``:
    the gradient in ``b1`` at 0, differentiated forward in ``b2`` along ``P2^T v``.
    ``lift(probes1, ...)`` of the second output is the unbiased estimate of ``H v``.
    """
    zeros1 = zero_coords(y, probes1)
    zeros2 = zero_coords(y, probes2)
    tangent = project(probes2, v)

    def grad_b1(b2):
        return jax.grad(lambda b1: fun(perturb(y, [(probes1, b1), (probes2, b2)], factorized)))(
            zeros1
        )

    return jax.jvp(grad_b1, (zeros2,), (tangent,))


def one_sided_probe(
    fun: Any, y: Any, v: Any, probes1: list, *, factorized: bool = False
) -> tuple[list, list]:
    """``(P1^T nabla fun(y), P1^T H v)``: the Hessian action projected on one side only.

    Forward-over-reverse with the full tangent ``v`` on the weights (its forward products
    are activation-sized) and the reverse pass in ``P1``'s coordinates. Unbiased like the
    bi-probe, with only the first term of its variance, ``(d - 1)/r ||H v||^2``.
    """
    zeros1 = zero_coords(y, probes1)

    def grad_b1(y_):
        return jax.grad(lambda b1: fun(perturb(y_, [(probes1, b1)], factorized)))(zeros1)

    return jax.jvp(grad_b1, (y,), (v,))


def subspace_grad(fun: Any, y: Any, probes: list, *, factorized: bool = False) -> list:
    """``P^T nabla fun(y)`` in the coordinates of ``probes``."""
    zeros = zero_coords(y, probes)
    return jax.grad(lambda b: fun(perturb(y, [(probes, b)], factorized)))(zeros)
