"""Robust aggregation rules for synchronous parameter-server training.

Each rule maps the stacked worker updates (a pytree whose leaves have a leading axis of
``n`` workers) to one update of the parameters' shape. Inside, the updates are one
``(n, D)`` matrix (:func:`stack`).

* :func:`mean`: the plain average (not robust: one worker moves it anywhere).
* :func:`coordinate_median`: per-coordinate median (Yin et al., 2018).
* :func:`trimmed_mean`: per coordinate, the mean after dropping the ``f`` largest and ``f``
  smallest values (Yin et al., 2018); needs ``n > 2f``.
* :func:`krum` / :func:`multi_krum`: the update (the mean of the ``m`` updates) whose summed
  squared distance to its ``n - f - 2`` nearest others is smallest (Blanchard et al., 2017);
  needs ``n > 2f + 2``.
* :func:`geometric_median`: Weiszfeld's iteration for ``argmin_z sum_i ||g_i - z||``, with
  distances floored at ``eps`` (Pillutla et al., 2022) and Vardi & Zhang's (2000) step
  off a row the iterate sits on.
* :func:`centered_clipping`: ``v <- v + (1/n) sum_i (g_i - v) min(1, tau / ||g_i - v||)``
  from the previous aggregate (Karimireddy, He & Jaggi, 2021).
* :func:`sign_majority`: ``sign(sum_i sign(g_i))`` (signSGD with majority vote, Bernstein
  et al., 2019): scale it by the learning rate.

:func:`make_aggregator` builds one by name and checks its options (:data:`OPTIONS`) and the
Byzantine count it must tolerate.

A Byzantine worker may send NaN, inf or values near the float limit; the robust rules keep
them out as they keep out any wild update, while the honest workers are enough: the medians
leave NaN entries out (inf sorts like any large value), the trimmed mean sorts NaN past
``+inf``, Krum counts a distance that is not finite (overflowed or NaN) as infinite, the
geometric median and centered clipping give a row with a non-finite entry no weight, and
the sign vote counts a NaN as an abstention. The mean, which is not robust, passes them on.
"""

from __future__ import annotations

import inspect
import math
import numbers
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from jaxopt_suite._checks import check_integer, check_scalar

AGGREGATORS = (
    "mean",
    "coordinate_median",
    "trimmed_mean",
    "krum",
    "multi_krum",
    "geometric_median",
    "centered_clipping",
    "sign_majority",
)


# what each rule needs of n workers with f Byzantine (None: no guarantee at any f > 0)
TOLERANCE = {
    "mean": None,
    "coordinate_median": "n > 2f",
    "trimmed_mean": "n > 2f",
    "krum": "n > 2f + 2",
    "multi_krum": "n > 2f + 2",
    "geometric_median": "n > 2f",
    "centered_clipping": "n > 2f",
    "sign_majority": "n > 2f",
}


# the keyword options each rule takes through make_aggregator
OPTIONS = {
    "mean": (),
    "coordinate_median": (),
    "trimmed_mean": (),
    "krum": (),
    "multi_krum": ("m",),
    "geometric_median": ("iterations", "eps"),
    "centered_clipping": ("tau", "iterations"),
    "sign_majority": (),
}


def _leading_sizes(updates: Any) -> set[int | None]:
    """The leading (worker) axis lengths of the leaves (``None`` for a scalar leaf)."""
    return {jnp.shape(leaf)[0] if jnp.ndim(leaf) else None for leaf in jax.tree.leaves(updates)}


def stack(updates: Any) -> tuple[jax.Array, Callable[[jax.Array], Any]]:
    """``(M, unravel)``: the updates as an ``(n, D)`` matrix (one row per worker) and the
    map from a ``(D,)`` vector back to one update's pytree. Leaves must share the leading
    worker axis."""
    leaves = jax.tree.leaves(updates)
    if not leaves:
        raise ValueError("updates is an empty pytree")
    sizes = _leading_sizes(updates)
    if None in sizes or len(sizes) != 1:
        shapes = [jnp.shape(leaf) for leaf in leaves]
        raise ValueError(
            "updates must be a pytree whose leaves all have the same leading (worker) axis, "
            f"got leaf shapes {shapes}"
        )
    first = jax.tree.map(lambda leaf: leaf[0], updates)
    _, unravel = ravel_pytree(first)
    return jax.vmap(lambda u: ravel_pytree(u)[0])(updates), unravel


def _check_byzantine(name: str, n: int, f: Any, need: str) -> int:
    f = check_integer("num_byzantine", f, 0)
    ok = {"n > 2f": n > 2 * f, "n > 2f + 2": n > 2 * f + 2}[need]
    if not ok:
        raise ValueError(
            f"{name} tolerates fewer Byzantine workers: it needs {need}, got n={n} workers "
            f"and num_byzantine={f} (a Byzantine fraction of {f / n:.2f})"
        )
    return f


def mean(updates: Any) -> Any:
    M, unravel = stack(updates)
    return unravel(jnp.mean(M, axis=0))


def coordinate_median(updates: Any) -> Any:
    M, unravel = stack(updates)
    return unravel(jnp.nanmedian(M, axis=0))


def trimmed_mean(updates: Any, num_byzantine: int) -> Any:
    M, unravel = stack(updates)
    n = M.shape[0]
    f = _check_byzantine("trimmed_mean", n, num_byzantine, "n > 2f")
    ordered = jnp.sort(M, axis=0)
    return unravel(jnp.mean(ordered[f : n - f], axis=0))


def _pairwise_squared_distances(M: jax.Array) -> jax.Array:
    """``|g_i - g_j|^2`` for every pair of rows, ``(n, n)``, in ``O(n^2 + n D)`` memory.

    The Gram expansion ``|a|^2 + |b|^2 - 2 a.b`` loses every digit when the workers share
    a large common part (a gradient of norm 1e4 with a spread of 1e-2 across workers: the
    terms are 1e8 and their float32 rounding is larger than the distances), which let Krum
    pick Byzantine updates a float64 reference rejects. Distances do not change under a
    translation, so the rows are centred on the coordinate-wise median first: what is left
    is the workers' spread, and the expansion's error is relative to it. The median, not the
    mean: a few wild rows would drag a mean away from the honest ones (their distances are
    then computed from large norms again) but cannot move the median far."""
    C = M - jnp.nanmedian(M, axis=0, keepdims=True)
    squared = jnp.sum(C * C, axis=1)
    distance = squared[:, None] + squared[None, :] - 2.0 * C @ C.T
    # a row with a NaN or inf entry, or one so large that its square overflows, is
    # infinitely far from every other (inf - inf would give NaN, which top_k ranks first)
    return jnp.where(jnp.isnan(distance), jnp.inf, jnp.maximum(distance, 0.0))


def _krum_scores(M: jax.Array, f: int) -> jax.Array:
    n = M.shape[0]
    # float16 / bfloat16 in float32: squared distances overflow float16 past 65504, and
    # every score inf left top_k to pick row 0
    distance = _pairwise_squared_distances(M.astype(jnp.promote_types(M.dtype, jnp.float32)))
    distance = jnp.where(jnp.eye(n, dtype=bool), jnp.inf, distance)  # not its own neighbour
    nearest = jnp.sort(distance, axis=1)[:, : n - f - 2]
    return jnp.sum(nearest, axis=1)


def _check_m(m: Any, n: int) -> int:
    """Multi-Krum's count ``m`` of averaged updates as an int in ``[1, n]``."""
    if isinstance(m, bool) or not isinstance(m, numbers.Integral) or not 1 <= m <= n:
        raise ValueError(f"m must be an integer in [1, {n}], got {m!r}")
    return int(m)


def multi_krum(updates: Any, num_byzantine: int, m: int | None = None) -> Any:
    """The mean of the ``m`` updates of best Krum score (``m = n - f`` by default)."""
    M, unravel = stack(updates)
    n = M.shape[0]
    f = _check_byzantine("krum", n, num_byzantine, "n > 2f + 2")
    m = _check_m(n - f if m is None else m, n)
    _, chosen = jax.lax.top_k(-_krum_scores(M, f), m)
    return unravel(jnp.mean(M[chosen], axis=0))


def krum(updates: Any, num_byzantine: int) -> Any:
    return multi_krum(updates, num_byzantine, m=1)


def _check_geometric_median(iterations: Any, eps: Any) -> int:
    """``iterations`` (>= 1) as an int; ``eps`` one number, finite and > 0: it floors the
    distances that Weiszfeld's weights divide by (0 lets a row that sits on the iterate
    give 1/0, inf makes every weight 0 and the step 0/0; an array floored each worker's
    distance by its own entry)."""
    check_scalar("eps", eps, "be finite and > 0", lambda v: 0.0 < v < math.inf)
    return check_integer("iterations", iterations, 1)


def _check_centered_clipping(tau: Any, iterations: Any) -> int:
    """``iterations`` (>= 1) as an int; ``tau`` one number > 0 (the clipping radius: at 0
    or below the step is 0 or reversed; inf is the mean, no clipping; an array clipped
    each coordinate's step by its own entry, a list failed inside)."""
    check_scalar("tau", tau, "be > 0", lambda v: v > 0.0)
    return check_integer("iterations", iterations, 1)


def geometric_median(updates: Any, iterations: int = 100, eps: float = 1e-8) -> Any:
    """Weiszfeld's iteration from the coordinate median, ``iterations`` steps, with the
    modification of Vardi & Zhang (2000) at an iterate that sits on rows.

    Weiszfeld's step ``T(y) = sum_i w_i g_i / sum_i w_i``, ``w_i = 1 / max(|g_i - y|,
    eps)``, cannot leave a row it sits on: the floored distance gives that row the weight
    ``1 / eps``, and the step lands back on it (in float32, exactly). The start, the
    coordinate median, is often a row (an odd count of workers), so rows ``(5, 5), (4,
    -5), (15, 6)`` returned ``(5, 5)``, not the median ``(6.32, 3.68)``. At an iterate
    within ``eps`` of ``eta`` rows the step is ``max(0, 1 - eta / r) T~(y) + min(1, eta /
    r) y``, ``T~`` Weiszfeld's step over the other rows and ``r = |sum_i (g_i - y) / |g_i
    - y||`` over them: it stays only where ``r <= eta``, which is where the median is that
    row (there Weiszfeld's step is kept: it stays within ``eps`` of the row). Every other
    iterate takes Weiszfeld's step as computed before."""
    iterations = _check_geometric_median(iterations, eps)
    M, unravel = stack(updates)
    dtype = M.dtype
    # float16 / bfloat16 iterate in float32: eps = 1e-8 rounds to 0 in float16 (a weight of
    # 1/0 at a row the median sits on gave NaN) and squared norms overflow past 65504
    M = M.astype(jnp.promote_types(dtype, jnp.float32))

    finite = jnp.all(jnp.isfinite(M), axis=1)
    M_finite = jnp.where(finite[:, None], M, 0.0)

    def step(z, _):
        raw = jnp.linalg.norm(M_finite - z[None, :], axis=1)
        distance = jnp.maximum(raw, eps)
        weight = jnp.where(finite, 1.0 / distance, 0.0)
        weiszfeld = weight @ M_finite / jnp.sum(weight)
        # Vardi-Zhang, at an iterate on rows (their count eta, each of weight 1)
        on = finite & (raw <= eps)
        others = jnp.where(on, 0.0, weight)
        eta = jnp.sum(on, dtype=M.dtype)
        r = jnp.linalg.norm(others @ (M_finite - z[None, :]))
        share = eta / r  # inf when no other row pulls (r = 0)
        moved = (1.0 - share) * (others @ M_finite / jnp.sum(others)) + share * z
        # share >= 1: the median is that row, where Weiszfeld's step stays (within eps)
        return jnp.where((eta > 0) & (share < 1.0), moved, weiszfeld), None

    z, _ = jax.lax.scan(step, jnp.nanmedian(M, axis=0), None, length=iterations)
    return unravel(z.astype(dtype))


def centered_clipping(updates: Any, center: Any = None, tau: float = 1.0, iterations: int = 1):
    """``iterations`` clipping steps from ``center`` (the previous aggregate; zeros when
    ``None``)."""
    iterations = _check_centered_clipping(tau, iterations)
    M, unravel = stack(updates)
    if center is not None:  # ravelled, another layout of as many entries would pass
        same = jax.tree.structure(center) == jax.tree.structure(updates) and all(
            jnp.shape(c) == jnp.shape(u)[1:]
            for c, u in zip(jax.tree.leaves(center), jax.tree.leaves(updates), strict=True)
        )
        if not same:
            raise ValueError(
                "center must have the structure and leaf shapes of one update, got "
                f"{jax.tree.map(jnp.shape, center)} for updates of "
                f"{jax.tree.map(lambda u: jnp.shape(u)[1:], updates)}"
            )
    dtype = M.dtype
    # float16 / bfloat16 step in float32: a norm past 256 squares past float16's range, and
    # tau / inf gave a far row no weight instead of clipping it to tau
    M = M.astype(jnp.promote_types(dtype, jnp.float32))
    v = jnp.zeros(M.shape[1], M.dtype) if center is None else ravel_pytree(center)[0]
    v = v.astype(M.dtype)

    finite = jnp.all(jnp.isfinite(M), axis=1, keepdims=True)

    def step(v, _):
        diff = jnp.where(finite, M - v[None, :], 0.0)
        norm = jnp.linalg.norm(diff, axis=1, keepdims=True)
        scale = jnp.minimum(1.0, tau / jnp.maximum(norm, 1e-30))
        return v + jnp.mean(diff * scale, axis=0), None

    v, _ = jax.lax.scan(step, v, None, length=iterations)
    return unravel(v.astype(dtype))


def sign_majority(updates: Any) -> Any:
    M, unravel = stack(updates)
    votes = jnp.where(jnp.isnan(M), 0.0, jnp.sign(M))
    return unravel(jnp.sign(jnp.sum(votes, axis=0)))


_RULES = {
    "mean": mean,
    "coordinate_median": coordinate_median,
    "trimmed_mean": trimmed_mean,
    "krum": krum,
    "multi_krum": multi_krum,
    "geometric_median": geometric_median,
    "centered_clipping": centered_clipping,
    "sign_majority": sign_majority,
}


def make_aggregator(
    name: str, *, num_workers: int, num_byzantine: int = 0, **options
) -> Callable[..., Any]:
    """The rule ``name`` of :data:`AGGREGATORS` as ``aggregate(updates) -> update``, with
    its options (:data:`OPTIONS`) bound and checked now, as is the Byzantine count against
    :data:`TOLERANCE` (the mean is the non-robust baseline and accepts any count): a
    misspelt or foreign option is an error here, not a default silently kept.
    ``centered_clipping``'s function also takes ``center``."""
    if name not in AGGREGATORS:
        raise ValueError(f"aggregator must be one of {AGGREGATORS}, got {name!r}")
    unknown = sorted(set(options) - set(OPTIONS[name]))
    if unknown:
        takes = ", ".join(OPTIONS[name]) if OPTIONS[name] else "none"
        raise ValueError(
            f"aggregator {name!r} does not take the option(s) {', '.join(unknown)} "
            f"(its options: {takes})"
        )
    n = check_integer("num_workers", num_workers, 1)
    rule = _RULES[name]
    # the options a call would see: the rule's own defaults, overridden by those given
    settings = {
        option: inspect.signature(rule).parameters[option].default for option in OPTIONS[name]
    } | options
    if name == "geometric_median":
        _check_geometric_median(settings["iterations"], settings["eps"])
    elif name == "centered_clipping":
        _check_centered_clipping(settings["tau"], settings["iterations"])
    elif name == "multi_krum" and settings["m"] is not None:
        _check_m(settings["m"], n)
    need = TOLERANCE[name]
    if need is None:  # the mean: no tolerance to check, the count must still make sense
        if check_integer("num_byzantine", num_byzantine, 0) > n:
            raise ValueError(f"num_byzantine must lie in [0, {n}], got {num_byzantine}")
    else:
        _check_byzantine(name, n, num_byzantine, need)
    if name in ("trimmed_mean", "krum", "multi_krum"):
        settings = {"num_byzantine": num_byzantine, **settings}

    def aggregate(updates, *center):
        # the tolerance was checked for n workers: another count would void it unseen
        rows = _leading_sizes(updates)
        if rows != {n}:
            raise ValueError(
                f"this {name} aggregator was made for num_workers={n} updates, got leading "
                f"axes {sorted(rows, key=str)}"
            )
        return rule(updates, *center, **settings)

    if name == "centered_clipping":
        return lambda updates, center=None: aggregate(updates, center)
    return aggregate
