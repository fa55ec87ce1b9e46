"""FAR-SIGN: Byzantine-robust learning from one-bit signed directional projections.

FAR-SIGN (arXiv 2605.09337) has the server move the parameters along directions it
designs, from workers' one-bit signs, and removes the bias of the signs with two
timescales; first- and zeroth-order workers; fully asynchronous. Only the abstract is
public. **The direction design and the update rules below are a reconstruction** (the
design notes, ``notes/zo_boost.md`` section 3); they live in this module only.

Reconstruction
--------------
Directions. Message ``id`` carries ``K`` orthonormal directions ``u_1..u_K`` of
``R^P`` (``P``: the parameter count padded to a power of two): rows of the randomised
Hadamard rotation ``H diag(sigma) / sqrt(P)``, the signs ``sigma`` and a run of ``K``
consecutive rows (cyclically, from a random first row) drawn from ``fold_in(key, id)``.
Anyone holding the key regenerates them from the id, so a message is the id and ``K``
bits. With ``sigma`` uniform every ``u_k`` is a uniformly random sign vector over
``sqrt(P)``, so ``E[u u^T] = I / P``; no coordinate lets an attacker hide a large push
(a per-coordinate shift projects to a sum of ``P`` random signs), and the ``K`` bits of
one message are never redundant (orthonormal rows).

Fast timescale (the bias correction). The server keeps ``y``, an estimate of the gradient,
and sends the residual projections ``r_k = <y, u_k>`` with the directions. A worker answers

.. math::
  s_k = \\operatorname{sign}(\\langle g, u_k\\rangle - r_k) \\quad\\text{(first order)},
  \\qquad
  s_k = \\operatorname{sign}\\Big(\\frac{f(x + \\delta u_k) - f(x - \\delta u_k)}{2\\delta}
  - r_k\\Big) \\quad\\text{(zeroth order)},

at its (possibly stale) parameters, and on arrival the server moves ``y <- y + beta_t
sum_k s_k u_k``: a stochastic subgradient step on ``E |<g - y, u>|``, whose minimiser has
``<y, u>`` = the median of ``<g, u>`` over workers and noise along every direction. For
noise symmetric about the gradient that is ``<grad f, u>``, so the signs' bias is gone; a
Byzantine fraction ``b < 1/2`` can only shift the median to the ``(1 - 2b) / (2 - 2b)``
quantile of the honest projections, and one message moves ``y`` by at most
``beta_t sqrt(K)``. A weak point: Byzantine workers that all answer for one point inside
that reach (ALIE's ``mean - z std``) pull the median all the way to it along every
direction (a mean moves by the fraction ``b`` of the offset), so every step carries the
whole offset and the parameters drift along it; the last iterate then oscillates, and an
average of the iterates is the steadier output (the ``robust`` suite reports both). The
screen below shuts such workers out.

Slow timescale. After the fast step the server moves ``x`` along the message's own
directions, by the tracked values there:

.. math::
  x \\leftarrow x - \\alpha_t \\frac{P}{K} \\sum_k \\langle y, u_k\\rangle u_k ,

a random-subspace step whose mean over the directions is ``-alpha_t y`` (so ``alpha`` is
in the units of an SGD step; ``K = P`` gives ``x <- x - alpha_t y``). It moves ``x`` only
where ``y`` was just refreshed. ``alpha_t / beta_t -> 0`` (defaults: ``beta_t = beta /
(1 + t / t0)^0.55``, ``alpha_t = alpha / (1 + t / t0)^0.75``; ``sum alpha = sum beta =
inf``, ``sum beta^2 < inf``), so ``y`` sees a quasi-static ``x``.

Screen (optional; an addition of this reconstruction, not from the abstract). The server
keeps each worker's pull ``p_i``, the sum of its messages' lifted bits ``sum_k s_k u_k``,
and their count ``c_i``. Each time a round of ``n`` messages (``n`` workers) is complete,
after the ``n``-th, ``2n``-th, ... message (all workers are admitted until the first), it
scores each worker by

.. math::
  T_i = c_i \\, \\lVert p_i / c_i - \\operatorname{med}_j (p_j / c_j) \\rVert^2

(``med``: the coordinatewise median over all ``n`` workers) and, until the next refresh,
applies the fast step only for admitted workers: an admitted worker stays admitted while
``T_i <= kappa m``, an excluded one is readmitted once ``T_i <= m``, ``m`` the median score
of all workers (so at least half of them are admitted after every refresh). The slow step
is taken for every message. Bits that are fair coins around a shared mean give ``T_i``
about ``K`` whatever ``c_i``; a worker whose bits keep a bias ``b`` that the others do not
share adds ``c_i |b|^2``, which grows with every message. The attacks that move the
tracker need such a bias: ALIE's workers all answer for one point inside the honest
spread, and sign flippers answer against the honest mean while the tracker is off. Honest
workers' data shards give them small biases of their own, hence a threshold relative to the
median score. Both medians are over all workers, whatever the screen decided before: with
fewer than half of the workers Byzantine, honest workers set them at every refresh, so a
screen that went wrong recovers at the next one. (Medians over the admitted workers alone
keep the excluded workers' pulls out of the reference, but once the admitted are mostly
Byzantine the reference is theirs: in the ``robust`` suite's 30% IPM run of commit c6b1f2a
that rule shut the honest workers out for good and the parameters diverged.) Excluded
workers are still recorded; the lower bar for readmission keeps a worker whose bias returns
whenever it is readmitted (a sign flipper: its answers oppose the honest mean only once the
tracker has moved) from hovering at the threshold. Byzantine workers that answer for the
very point the tracker settles at send fair coins and can pass: IPM's point mass at 30%
holds the medians along the directions where the honest spread is wide. The price: the fast
steps of excluded honest workers are lost. Needs fewer than half of the workers Byzantine
(the medians), and a worker's successive messages drawn independently given the parameters:
with worker momentum they are a slowly moving average, honest scores spread, and the
``robust`` suite's runs with both can collapse.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax.flatten_util import ravel_pytree

from jaxopt_suite._checks import check_finite_positive, check_integer, check_key, check_scalar
from jaxopt_suite.robust.aggregators import stack
from jaxopt_suite.zeroth_order._common import directional_differences, flat_plus, flat_view

Schedule = Callable[[jax.Array], jax.Array]


def padded_dim(dim: int) -> int:
    """The smallest power of two ``>= dim``."""
    return 1 << max(0, int(dim) - 1).bit_length()


def hadamard(x: jax.Array) -> jax.Array:
    """``H x`` along the last axis for the Sylvester Hadamard matrix ``H`` (entries +-1,
    ``H H = P I``) in ``O(P log P)``; the last axis must have a power-of-two length."""
    P = x.shape[-1]
    if P & (P - 1):
        raise ValueError(f"hadamard needs a power-of-two length, got {P}")
    lead = x.shape[:-1]
    h = 1
    while h < P:
        pairs = x.reshape(*lead, P // (2 * h), 2, h)
        a, b = pairs[..., 0, :], pairs[..., 1, :]
        x = jnp.stack([a + b, a - b], axis=-2).reshape(*lead, P)
        h *= 2
    return x


class Directions(NamedTuple):
    """The ``K`` orthonormal directions of one message: rows ``rows`` of
    ``H diag(signs) / sqrt(P)``."""

    signs: jax.Array  # (P,) +-1
    rows: jax.Array  # (K,) int32, distinct


def directions(key, message_id, dim: int, num_directions: int) -> Directions:
    """The directions of message ``message_id`` (regenerated from ``key`` and the id)."""
    P = padded_dim(dim)
    if not 1 <= num_directions <= P:
        raise ValueError(f"num_directions must lie in [1, {P}] for {dim} parameters")
    k_signs, k_rows = jax.random.split(jax.random.fold_in(key, message_id))
    # rademacher's bernoulli(0.5) draws in the default float dtype: float64 under
    # jax_enable_x64, other directions; a float32 probability draws as without x64
    signs = jnp.where(jax.random.bernoulli(k_signs, jnp.float32(0.5), (P,)), 1.0, -1.0)
    signs = signs.astype(jnp.float32)
    # int32 draws, as without jax_enable_x64 (an int64 draw picks another first row)
    first = jax.random.randint(k_rows, (), 0, P, jnp.int32) if num_directions < P else 0
    rows = ((first + jnp.arange(num_directions)) % P).astype(jnp.int32)
    return Directions(signs, rows)


def project(v: jax.Array, d: Directions) -> jax.Array:
    """``<v, u_k>`` for the directions ``d`` (``v`` of length ``<= P``, zero-padded)."""
    P = d.signs.shape[0]
    v = jnp.pad(v, (0, P - v.shape[0]))
    return hadamard(d.signs * v)[d.rows] / jnp.sqrt(jnp.float32(P))


def lift(coefficients: jax.Array, d: Directions) -> jax.Array:
    """``sum_k c_k u_k`` as a ``(P,)`` vector."""
    P = d.signs.shape[0]
    full = jnp.zeros(P, coefficients.dtype).at[d.rows].set(coefficients)
    return d.signs * hadamard(full) / jnp.sqrt(jnp.float32(P))


def direction(d: Directions, row, dim: int) -> jax.Array:
    """One direction ``u = H[row] * signs / sqrt(P)`` restricted to its first ``dim``
    entries, built entry by entry (``H[r, j] = (-1)^popcount(r & j)``) instead of by a
    transform."""
    P = d.signs.shape[0]
    j = jnp.arange(dim, dtype=jnp.int32)
    parity = jax.lax.population_count(jnp.bitwise_and(j, row)) & 1
    return (1 - 2 * parity).astype(jnp.float32) * d.signs[:dim] / jnp.sqrt(jnp.float32(P))


def signs_of(values: jax.Array) -> jax.Array:
    """``+1`` where ``values >= 0``, else ``-1`` (int8: one bit each, no zero)."""
    return jnp.where(values >= 0, 1, -1).astype(jnp.int8)


def worker_bits(grad_flat: jax.Array, d: Directions, residual: jax.Array) -> jax.Array:
    """A first-order worker's message: ``sign(<g, u_k> - r_k)`` for its gradient ``g``."""
    return signs_of(project(grad_flat, d) - residual)


def worker_bits_zo(
    value_fn: Callable[[Any], jax.Array],
    params: Any,
    d: Directions,
    residual: jax.Array,
    smoothing: float,
) -> jax.Array:
    """A zeroth-order worker's message: ``sign((f(x + delta u_k) - f(x - delta u_k)) /
    (2 delta) - r_k)``, ``2K`` evaluations of ``value_fn`` (the central differences of
    :mod:`jaxopt_suite.zeroth_order`)."""
    check_smoothing(smoothing)
    # the step as a float32 array (as run_async passes it): a Python float kept
    # x + delta u in a bfloat16 parameter's dtype, where a step of delta / sqrt(P) rounds
    # away and every difference was 0
    smoothing = jnp.asarray(smoothing, jnp.float32)
    flat, unravel = flat_view(params)
    basis = jax.vmap(lambda row: direction(d, row, flat.shape[0]))(d.rows)  # (K, D)
    differences, _ = directional_differences(
        value_fn, params, flat_plus(unravel, flat), basis, smoothing, antithetic=True
    )
    return signs_of(differences - residual)


def check_smoothing(smoothing) -> None:
    """The zeroth-order difference step must be finite and > 0: at 0 every difference is
    0 / 0, whose sign bit is -1, and the parameters drift in one fixed direction."""
    check_finite_positive("smoothing", smoothing)


def default_schedules(alpha: float, beta: float, t0: float = 1000.0) -> tuple[Schedule, Schedule]:
    """``(alpha_t, beta_t)``: ``alpha / (1 + t / t0)^0.75`` and ``beta / (1 + t / t0)^0.55``
    (see the module docstring). ``alpha``, ``beta`` and ``t0`` must be single numbers,
    finite, ``beta`` and ``t0`` > 0 and ``alpha`` >= 0 (0 holds the parameters still, to
    watch the tracker alone): a negative step ascends the loss or pushes the tracker away
    from the workers' medians, ``t0 = 0`` gives ``0 / 0`` at ``t = 0``."""
    check_scalar("alpha", alpha, "be finite and >= 0", lambda v: 0.0 <= v < math.inf)
    for name, value in (("beta", beta), ("t0", t0)):
        check_scalar(name, value, "be finite and > 0", lambda v: 0.0 < v < math.inf)

    def alpha_t(t):
        return alpha / (1.0 + t / t0) ** 0.75

    def beta_t(t):
        return beta / (1.0 + t / t0) ** 0.55

    return alpha_t, beta_t


class Screen(NamedTuple):
    """The screen's record of each worker (see the module docstring)."""

    pulls: jax.Array  # (n, P): the sum of the worker's lifted bits
    counts: jax.Array  # (n,) float32: its messages
    admitted: jax.Array  # (n,) bool: its fast steps are applied (until the next refresh)


class ServerState(NamedTuple):
    """The server's state: the tracker ``y (P,)``, the count ``t`` of messages applied and,
    when the server screens its ``n`` workers, their :class:`Screen` (else ``None``)."""

    tracker: jax.Array
    count: jax.Array  # () int32
    screen: Screen | None = None


def server_init(params: Any, num_workers: int | None = None) -> ServerState:
    """The initial state; ``num_workers`` (``n``) sets up the screen of the module
    docstring, used by :func:`server_step` when it is given ``worker`` and ``screen``."""
    flat, _ = ravel_pytree(params)
    P = padded_dim(flat.shape[0])
    screen = None
    if num_workers is not None:
        n = check_integer("num_workers", num_workers, 1)
        screen = Screen(
            jnp.zeros((n, P), jnp.float32), jnp.zeros(n, jnp.float32), jnp.ones(n, bool)
        )
    return ServerState(jnp.zeros(P, jnp.float32), jnp.zeros((), jnp.int32), screen)


def check_screen(screen) -> float | jax.Array:
    """``screen`` (the threshold ``kappa``) as a float above 1, else a ValueError; a traced
    one (an argument of a compiled loop, checked where it was concrete) passes as it is."""
    if isinstance(screen, jax.core.Tracer):
        return screen
    value = float(screen)
    if not value > 1.0:  # also NaN
        raise ValueError(
            f"screen (kappa, the threshold on a worker's score over the median score) must "
            f"be > 1 (lower, every admitted worker above the median would be excluded at "
            f"each refresh), got {screen!r}"
        )
    return value


def screen_scores(screen: Screen) -> jax.Array:
    """``T_i = c_i |p_i / c_i - med_j (p_j / c_j)|^2`` for every worker, the median over
    all workers ``j`` (``c_i`` counts at least 1)."""
    c = jnp.maximum(screen.counts, 1.0)
    means = screen.pulls / c[:, None]
    reference = jnp.median(means, axis=0, keepdims=True)
    return c * jnp.sum((means - reference) ** 2, axis=1)


def refresh_screen(screen: Screen, kappa) -> Screen:
    """Keeps the admitted workers with ``T_i <= kappa m`` and readmits the excluded ones
    with ``T_i <= m``, ``m`` the median score of all workers. Neither median depends on who
    was admitted before, so the outcome does not either: the screen cannot be captured by
    a past decision."""
    scores = screen_scores(screen)
    median = jnp.median(scores)
    return screen._replace(admitted=scores <= jnp.where(screen.admitted, kappa * median, median))


def residual(state: ServerState, d: Directions) -> jax.Array:
    """``r_k = <y, u_k>``: sent with the directions."""
    return project(state.tracker, d)


def track(state: ServerState, d: Directions, bits: jax.Array, beta: jax.Array) -> ServerState:
    """The fast step on arrival of ``bits`` for directions ``d``: ``y += beta sum_k s_k u_k``."""
    return _fast_step(state, lift(_signs(bits), d), beta)


def _signs(bits: jax.Array) -> jax.Array:
    """A message's entries as signs in float32: a message carries one bit per direction, so
    whatever else arrives counts by its sign (a value of 1e6 moved ``y`` 1e6 times as far as
    the ``beta sqrt(K)`` a message may, and outweighed honest ones in the screen)."""
    return jnp.sign(bits.astype(jnp.float32))


def _fast_step(state: ServerState, lifted: jax.Array, beta) -> ServerState:
    """``y += beta lifted`` and one more message counted."""
    return state._replace(tracker=state.tracker + beta * lifted, count=state.count + 1)


def screened_track(
    state: ServerState, d: Directions, bits: jax.Array, beta, worker, kappa
) -> ServerState:
    """The fast step behind the screen: records ``worker``'s bits, refreshes the screen
    every ``n`` messages, and applies the step only if the worker is admitted.

    ``state.count`` messages were recorded before this one, so the refresh comes once
    ``count + 1`` is a multiple of ``n``: after ``n``, ``2n``, ... messages, when a round of
    ``n`` messages is complete (in synchronous rounds, every worker's). Refreshing on
    ``count % n == 0`` instead scored the first message alone: its sender, the only worker
    with a pull, stood out from ``n - 1`` empty records and was shut out, and every later
    refresh saw one worker a message ahead of the others."""
    screen = state.screen
    lifted = lift(_signs(bits), d)
    screen = screen._replace(
        pulls=screen.pulls.at[worker].add(lifted), counts=screen.counts.at[worker].add(1.0)
    )
    screen = jax.lax.cond(
        (state.count + 1) % screen.counts.shape[0] == 0,
        lambda s: refresh_screen(s, kappa),
        lambda s: s,
        screen,
    )
    beta = jnp.where(screen.admitted[worker], beta, 0.0)
    return _fast_step(state._replace(screen=screen), lifted, beta)


def server_step(
    params: Any,
    state: ServerState,
    d: Directions,
    bits: jax.Array,
    alpha,
    beta,
    worker=None,
    screen: float | None = None,
) -> tuple[Any, ServerState]:
    """One arrival: the fast step, then the slow one along the message's directions (see
    the module docstring). With ``screen`` (the threshold ``kappa > 1``) the fast step is
    behind the screen, which needs a state from ``server_init(params, num_workers)`` and
    the sender's index ``worker``."""
    if screen is None:
        if state.screen is not None:  # a screen set up but no threshold: never consulted
            raise ValueError(
                "the state has a screen (server_init with num_workers): pass its threshold "
                "screen, or a state from server_init(params)"
            )
        state = track(state, d, bits, beta)
    else:
        kappa = check_screen(screen)
        if state.screen is None or worker is None:
            raise ValueError(
                "screen needs a state from server_init(params, num_workers) and the "
                "sender's index worker"
            )
        n = state.screen.counts.shape[0]
        if not isinstance(worker, jax.core.Tracer) and not 0 <= int(worker) < n:
            # out of range, .at[] would drop the message and clamp the admission lookup
            raise ValueError(f"worker must lie in [0, {n}) for this state, got {worker!r}")
        state = screened_track(state, d, bits, beta, worker, kappa)
    flat, unravel = ravel_pytree(params)
    flat = flat - (alpha * subspace_step(state.tracker, d))[: flat.shape[0]].astype(flat.dtype)
    return unravel(flat), state


def subspace_step(tracker: jax.Array, d: Directions) -> jax.Array:
    """``(P / K) sum_k <y, u_k> u_k``: the tracker seen through one message's directions,
    unbiased for ``y`` over the directions."""
    return lift(project(tracker, d), d) * (tracker.shape[0] / d.rows.shape[0])


class FarSignState(NamedTuple):
    """State of :func:`scale_by_far_sign`: the server's and the directions' key."""

    server: ServerState
    key: jax.Array


def scale_by_far_sign(
    key,
    num_directions: int,
    beta: float | Schedule = 0.01,
    screen: float | None = None,
    num_workers: int | None = None,
) -> optax.GradientTransformation:
    """FAR-SIGN for the synchronous case, as an optax transform.

    ``update(updates, state, params)``: ``updates`` holds the workers' gradients stacked on
    a leading axis (``n`` workers; a single worker passes its gradient with an axis of
    one). Each worker's message is its ``num_directions`` bits on fresh directions,
    applied to the tracker one after another (the fast step with ``beta``, a number or a
    schedule of the message count); the returned update is the tracker seen through the
    round's directions, ``(P / (n K)) sum <y, u_k> u_k`` (``y`` in expectation), so

    ``optax.chain(scale_by_far_sign(key, K), optax.sgd(alpha))``

    is the slow step once per round.

    A numeric ``beta`` must be finite and > 0; a schedule's values are not checked (they
    are computed inside ``update``, often traced): a schedule from
    :func:`default_schedules` has checked arguments, any other must stay finite and > 0
    itself.

    ``screen`` (the threshold ``kappa > 1``) puts the fast steps behind the screen of the
    module docstring; it needs ``num_workers``, and the workers' index on the stacked axis
    is the one the screen records them under.

    The update has the parameters' dtypes (the tracker is float32).
    """
    check_key(key)
    K = check_integer("num_directions", num_directions, 1)
    if not callable(beta):
        # 0 never moves the tracker, a negative step moves it away from the workers'
        # medians, NaN or inf spoil it at the first message
        check_finite_positive("beta", beta)
    kappa = None if screen is None else check_screen(screen)
    if kappa is not None and num_workers is None:
        raise ValueError("screen needs num_workers (the length of the stacked worker axis)")
    # checked whenever given: the stacked updates must then have that many workers
    n = None if num_workers is None else check_integer("num_workers", num_workers, 1)
    beta_t = beta if callable(beta) else (lambda t: jnp.asarray(beta, jnp.float32))

    def init(params):
        flat, _ = ravel_pytree(params)
        if K > padded_dim(flat.shape[0]):
            raise ValueError(
                f"num_directions must be <= {padded_dim(flat.shape[0])} for "
                f"{flat.shape[0]} parameters, got {K}"
            )
        return FarSignState(server_init(params, None if kappa is None else n), key)

    def update(updates, state, params=None):
        if params is None:
            raise ValueError("scale_by_far_sign needs params (update(updates, state, params))")
        check_stacked(updates, params)
        G, unravel = stack(updates)
        if n is not None and G.shape[0] != n:
            raise ValueError(f"updates must stack num_workers={n} gradients, got {G.shape[0]}")

        def message(server, worker_g):
            worker, g = worker_g
            d = directions(state.key, server.count, G.shape[1], K)
            bits = worker_bits(g, d, residual(server, d))
            if kappa is None:
                return track(server, d, bits, beta_t(server.count)), d
            return screened_track(server, d, bits, beta_t(server.count), worker, kappa), d

        workers = jnp.arange(G.shape[0], dtype=jnp.int32)
        server, used = jax.lax.scan(message, state.server, (workers, G))

        # the round's subspace step: the mean of the messages' (P / K) projections
        steps = jax.vmap(
            lambda signs, rows: subspace_step(server.tracker, Directions(signs, rows))
        )(used.signs, used.rows)
        step = jnp.mean(steps, axis=0)
        # in the parameters' dtypes: the float32 step came back float32 for bfloat16 or
        # float64 parameters
        out = jax.tree.map(
            lambda u, p: u.astype(jnp.result_type(p)), unravel(step[: G.shape[1]]), params
        )
        return out, FarSignState(server, state.key)

    return optax.GradientTransformation(init, update)


def check_stacked(updates: Any, params: Any) -> None:
    """Raises unless ``updates`` is ``params``' pytree with one leading worker axis."""
    u_leaves, u_def = jax.tree.flatten(updates)
    p_leaves, p_def = jax.tree.flatten(params)
    if u_def != p_def:
        raise ValueError(f"updates and params must be the same pytree, got {u_def} and {p_def}")
    n = {jnp.shape(u)[0] if jnp.ndim(u) else None for u in u_leaves}
    bad = [
        (jnp.shape(u), jnp.shape(p))
        for u, p in zip(u_leaves, p_leaves, strict=True)
        if jnp.shape(u)[1:] != jnp.shape(p) or jnp.ndim(u) != jnp.ndim(p) + 1
    ]
    if bad or len(n) != 1:
        raise ValueError(
            "updates must stack the workers' gradients on a leading axis: each leaf of shape "
            f"(n, *param.shape) with one n for all; got (update, param) shapes {bad[:3]}"
        )
