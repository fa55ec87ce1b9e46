"""A parameter-server cluster, simulated: asynchronous event loops and synchronous rounds,
each one jit-compiled ``lax.scan``.

Workers ``0 .. f-1`` are Byzantine; of the honest ones the last ``stragglers`` compute
``straggler_factor`` times slower. Worker ``i`` holds a data shard ``(x[i], y[i])`` and,
per message, draws a minibatch of it. A message takes a compute time (``fixed``: exactly
the worker's mean; ``exponential``; ``lognormal`` with mean 1 times the worker's mean) plus
an upload time ``bits x seconds_per_bit``.

Asynchronous (:func:`run_async`): every worker starts at time 0 on the initial parameters;
the next event is the worker whose message finishes first; the server applies the message
(computed on the parameters the worker started from: staleness = server updates since
then), and the worker starts its next message on the current parameters. Two protocols:
``far_sign`` (one-bit residual signs, :mod:`.far_sign`; the directions and residuals are
fixed when a worker starts; ``K`` bits and a 32-bit message id an upload) and ``sgd``
(asynchronous SGD: full gradients, ``32 D`` bits).
The arrival order does not depend on the parameters, so the loop first draws the schedule,
then runs it in waves: events ``a .. a + m - 1`` whose workers all started at or before
update ``a`` have their snapshots ready at ``a``, so up to ``parallel_events`` of them
compute their messages together (the in-flight workers laid out over the devices when
there are several, ``jax.sharding``) before the server applies them in arrival order. Every
event draws its randomness from its index, so the trace is the same at any width. (Under
``vmap`` a Byzantine branch is a select: with a width above one the attack's extra
gradients are computed for every message of the wave.)

Synchronous (:func:`run_sync`): every round all workers compute a gradient on the current
parameters; the round lasts as long as its slowest worker; an aggregator of
:mod:`.aggregators` combines the messages and the server takes ``x <- x - lr * update``.
When several devices are present the workers' shards and per-round gradients are laid
out over them, one block of workers per device.

Byzantine workers compute their honest message first (on flipped labels for
``label_flip``), then the attack of :mod:`.attacks` replaces it, with ``honest_samples``
honest gradients at the same parameters for the omniscient attacks (:func:`run_async`;
in :func:`run_sync` they see every honest gradient of the round); on FAR-SIGN a crafted
vector ``a`` becomes the bits ``sign(<a, u_k> - r_k)``, and the direction-aware attack
sends the negation of the honest mean's bits.

Worker momentum (``worker_momentum = mu > 0``, first-order protocols and synchronous
rounds): each worker keeps ``m <- mu m + (1 - mu) g`` over its own gradients (``m = g`` at
its first message) and sends ``m`` where it would send ``g``: its bits are those of ``m``
on FAR-SIGN. Averaging over time shrinks the honest spread that an attack hiding inside it
(ALIE) can use, at the price of a lag of about ``mu / (1 - mu)`` of the worker's own
messages. The omniscient attacks then craft from the honest workers' momenta instead of
fresh gradients: asynchronously, as they were when the Byzantine worker started the
message (zero for a worker that has not sent yet); synchronously, this round's.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from jaxopt_suite._checks import check_integer, check_key
from jaxopt_suite.robust import far_sign as fs
from jaxopt_suite.robust.aggregators import make_aggregator
from jaxopt_suite.robust.attacks import Attack, make_attack

DELAYS = ("fixed", "exponential", "lognormal")
PROTOCOLS = ("far_sign", "far_sign_zo", "sgd")


@dataclasses.dataclass(frozen=True)
class Cluster:
    """The simulated cluster (see the module docstring)."""

    num_workers: int = 20
    num_byzantine: int = 0
    delay: str = "exponential"
    mean_compute: float = 1.0
    lognormal_sigma: float = 0.5
    stragglers: int = 2
    straggler_factor: float = 5.0
    seconds_per_bit: float = 0.0
    batch_size: int = 32
    honest_samples: int = 4

    def checked(self) -> Cluster:
        for name in ("num_workers", "batch_size", "honest_samples"):
            check_integer(name, getattr(self, name), 1)
        for name in ("num_byzantine", "stragglers"):
            check_integer(name, getattr(self, name), 0)
        if self.num_byzantine >= self.num_workers:
            raise ValueError(
                f"num_byzantine must be < num_workers, got {self.num_byzantine} of "
                f"{self.num_workers}"
            )
        if self.num_byzantine + self.stragglers > self.num_workers:
            raise ValueError("stragglers are honest workers: num_byzantine + stragglers > n")
        if self.delay not in DELAYS:
            raise ValueError(f"delay must be one of {DELAYS}, got {self.delay!r}")
        # finite: an infinite time made every clock inf and argmin chose worker 0 every time
        for name in ("mean_compute", "straggler_factor", "lognormal_sigma"):
            if not 0 < float(getattr(self, name)) < math.inf:
                raise ValueError(f"{name} must be finite and > 0, got {getattr(self, name)!r}")
        if not 0 <= float(self.seconds_per_bit) < math.inf:
            raise ValueError(
                f"seconds_per_bit must be finite and >= 0, got {self.seconds_per_bit!r}"
            )
        return self

    def mean_times(self) -> np.ndarray:
        """Each worker's mean compute time."""
        means = np.full(self.num_workers, float(self.mean_compute))
        if self.stragglers:
            means[self.num_workers - self.stragglers :] *= float(self.straggler_factor)
        return means


def _compute_time(cluster: Cluster, means: jax.Array, worker, key) -> jax.Array:
    """A compute time of ``worker``, in the dtype of ``means`` (float32: the clocks' dtype;
    under ``jax_enable_x64`` a default draw was float64, and the float32 clock carried
    through the loops became float64)."""
    mean = means[worker]
    if cluster.delay == "fixed":
        return mean
    if cluster.delay == "exponential":
        return mean * jax.random.exponential(key, dtype=means.dtype)
    s = cluster.lognormal_sigma
    return mean * jnp.exp(s * jax.random.normal(key, dtype=means.dtype) - 0.5 * s * s)


# the bits of a FAR-SIGN message's id (its directions are regenerated from it)
MESSAGE_ID_BITS = 32


class Trace(NamedTuple):
    """Per event (async) or per round (sync): the simulated clock after it, the worker
    (-1 for a round), its staleness, and the compute time drawn; ``params``: the flat
    parameters after every ``record_every``-th event, ``(checkpoints, D)``, with their
    clock and event count in ``checkpoint_time`` and ``checkpoint_step``;
    ``bits_per_message``: what one upload is charged (``seconds_per_bit`` each)."""

    time: jax.Array
    worker: jax.Array
    staleness: jax.Array
    compute_time: jax.Array
    params: jax.Array
    checkpoint_time: jax.Array
    checkpoint_step: jax.Array
    bits_per_message: int


def _check_steps(name: str, count, record_every) -> None:
    """``count`` steps recorded every ``record_every``: both integers >= 1, a multiple."""
    check_integer(name, count, 1)
    check_integer("record_every", record_every, 1)
    if count % record_every:
        raise ValueError(f"{name} ({count}) must be a multiple of record_every ({record_every})")


def _check_data(cluster, x, y):
    x, y = jnp.asarray(x), jnp.asarray(y)
    n = cluster.num_workers
    if x.ndim < 2 or x.shape[0] != n or y.shape[:2] != x.shape[:2]:
        raise ValueError(
            f"worker data must be x (n={n}, m, ...) and y (n={n}, m), got {x.shape} and {y.shape}"
        )
    for name, array in (("x", x), ("y", y)):
        if jnp.issubdtype(array.dtype, jnp.floating) and not bool(jnp.all(jnp.isfinite(array))):
            raise ValueError(f"worker data {name} contains NaN or infinite values")
    return x, y


def _batch(cluster, x, y, worker, key, flip, num_classes):
    # int32 draws, as without jax_enable_x64 (an int64 draw picks other samples)
    idx = jax.random.randint(key, (cluster.batch_size,), 0, x.shape[1], jnp.int32)
    labels = y[worker][idx]
    if num_classes is not None:
        labels = jnp.where(flip, num_classes - 1 - labels, labels)
    return x[worker][idx], labels


def run_async(
    loss_fn: Callable[[Any, tuple], jax.Array],
    params: Any,
    data: tuple[Any, Any],
    cluster: Cluster,
    *,
    protocol: str = "far_sign",
    attack: str | Attack = "none",
    events: int,
    key,
    record_every: int = 100,
    num_directions: int = 64,
    alpha: float | Callable | None = None,
    beta: float | Callable | None = None,
    learning_rate: float | Callable | None = None,
    smoothing: float | None = None,
    num_classes: int | None = None,
    parallel_events: int | None = None,
    worker_momentum: float = 0.0,
    screen: float | None = None,
) -> Trace:
    """Simulates ``events`` message arrivals of ``protocol`` (see the module docstring).

    ``loss_fn(params, (x_batch, y_batch))`` is a worker's loss; ``data = (x, y)`` the
    shards with a leading worker axis. ``far_sign``: ``num_directions`` bits per message,
    step sizes ``alpha`` (slow, default 0.05) and ``beta`` (fast, default 0.01), numbers or
    schedules of the server's update count; ``far_sign_zo`` adds ``smoothing`` (default
    1e-3); ``sgd``: ``learning_rate`` (default 0.05). A step size or ``smoothing`` that
    the protocol does not use is refused, not ignored. ``num_classes`` is needed by the
    label-flip attack.

    ``worker_momentum`` ``mu`` in ``[0, 1)`` (first-order protocols): each worker keeps
    ``m <- mu m + (1 - mu) g`` over its own gradients (``m = g`` at its first message) and
    sends ``m`` in place of ``g``; the omniscient attacks then craft from the honest
    workers' momenta as they were when the Byzantine worker started its message (see the
    module docstring).

    ``screen`` (FAR-SIGN; the threshold ``kappa > 1``): the server screens its workers
    (:mod:`.far_sign`'s module docstring), applying a worker's fast steps only while its
    bits' score stays within ``kappa`` times the median score. It is not meant to be
    combined with ``worker_momentum`` (see there).

    ``parallel_events`` (default: the number of local devices) is how many in-flight
    messages are computed at once (see the module docstring); the trace does not depend on
    it beyond float rounding. With several devices it must be a multiple of their count."""
    check_key(key)
    cluster = cluster.checked()
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol must be one of {PROTOCOLS}, got {protocol!r}")
    attack = _attack(attack, cluster, num_classes)
    if attack.opposes_bits and protocol == "sgd":
        raise ValueError("the direction-aware attack applies to FAR-SIGN messages only")
    _check_steps("events", events, record_every)
    x, y = _check_data(cluster, *data)
    flat0, _ = ravel_pytree(params)
    D = flat0.shape[0]
    K = check_integer("num_directions", num_directions, 1)  # 2.9 was truncated to 2
    if protocol != "sgd" and not 1 <= K <= fs.padded_dim(D):
        raise ValueError(f"num_directions must lie in [1, {fs.padded_dim(D)}], got {K!r}")
    # an upload: D float32 coordinates, or a FAR-SIGN message's K sign bits and the 32-bit
    # id its directions are regenerated from
    bits = 32 * D if protocol == "sgd" else K + MESSAGE_ID_BITS
    alpha, beta, learning_rate, smoothing = _protocol_settings(
        protocol, alpha=alpha, beta=beta, learning_rate=learning_rate, smoothing=smoothing
    )
    steps = {
        name: _step_sizes(name, value, events)
        for name, value in (("alpha", alpha), ("beta", beta), ("learning_rate", learning_rate))
    }
    if parallel_events is None:
        parallel_events = len(jax.devices())
    check_integer("parallel_events", parallel_events, 1)
    mu = _momentum(worker_momentum)
    if mu and protocol == "far_sign_zo":
        raise ValueError("worker_momentum needs gradients: not available with far_sign_zo")
    if screen is not None:
        if protocol == "sgd":
            raise ValueError("screen applies to the far_sign protocols only")
        screen = fs.check_screen(screen)
    if protocol == "far_sign_zo":
        fs.check_smoothing(smoothing)
    fn = _run_async_jit(
        loss_fn, _layout(params), cluster, protocol, attack, events, record_every, K, bits,
        num_classes, int(parallel_events), bool(mu), screen is not None,
    )  # fmt: skip
    # arguments of the compiled loop, so a new value does not compile it again; 1 - mu is
    # formed here, in float64, as it was when mu was a constant of the loop
    tunables = tuple(
        jnp.float32(v) for v in (smoothing, mu, 1.0 - mu, 2.0 if screen is None else screen)
    )
    out = fn(flat0, x, y, key, steps["alpha"], steps["beta"], steps["learning_rate"], tunables)
    return Trace(*out, bits_per_message=bits)


# run_async's protocol settings: which protocols use each, and its default
_PROTOCOL_SETTINGS = {
    "alpha": (("far_sign", "far_sign_zo"), 0.05),
    "beta": (("far_sign", "far_sign_zo"), 0.01),
    "learning_rate": (("sgd",), 0.05),
    "smoothing": (("far_sign_zo",), 1e-3),
}


def _protocol_settings(protocol: str, **given) -> tuple:
    """``given``'s settings (``None``: not given) with the defaults of
    :data:`_PROTOCOL_SETTINGS` filled in, in its order; a setting given to a protocol that
    does not use it is refused (``learning_rate`` under FAR-SIGN, ``alpha`` under SGD: it
    was silently ignored). The unused ones keep their defaults: the compiled loop takes
    every setting as an argument."""
    values = []
    for name, (protocols, default) in _PROTOCOL_SETTINGS.items():
        value = given[name]
        if value is not None and protocol not in protocols:
            uses = ", ".join(n for n, (p, _) in _PROTOCOL_SETTINGS.items() if protocol in p)
            raise ValueError(
                f"{name} applies to the {' and '.join(protocols)} protocol"
                f"{'s' if len(protocols) > 1 else ''} only, got {name}={value!r} with "
                f"protocol={protocol!r} (it takes {uses})"
            )
        values.append(default if value is None else value)
    return tuple(values)


def _step_sizes(name: str, value, count: int) -> jax.Array:
    """A step size (a number, or a schedule of the update count) at updates ``0 ..
    count - 1``, as an array: the compiled loops take the values, not the function, so a
    new step size does not compile them again.

    Every value must be finite and >= 0. Zero is allowed: it holds a quantity still (a
    schedule that warms up from 0; ``learning_rate=0`` to study the delays alone; ``alpha
    = 0`` to watch the tracker on fixed parameters); a negative step ascends the loss (a
    negative ``beta`` pushes the tracker away from the workers' medians) and is refused."""
    if callable(value):
        values = jax.vmap(lambda t: jnp.asarray(value(t), jnp.float32))(
            jnp.arange(count, dtype=jnp.int32)
        )
        if values.shape != (count,):
            raise ValueError(f"{name} must map an update count to a scalar, got {values.shape[1:]}")
    else:
        values = jnp.full(count, value, jnp.float32)
    if not bool(jnp.all(jnp.isfinite(values))):
        raise ValueError(f"{name} must be finite at every update, got NaN or inf")
    negative = np.flatnonzero(np.asarray(values) < 0)
    if negative.size:
        t = int(negative[0])
        shown = value if not callable(value) else f"{float(values[t]):.6g} at update {t}"
        raise ValueError(f"{name} must be >= 0 at every update, got {shown}")
    return values


def _momentum(value) -> float:
    """``worker_momentum`` checked: a number in ``[0, 1)``."""
    try:
        mu = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"worker_momentum must be a number, got {type(value).__name__}") from None
    if not 0.0 <= mu < 1.0:
        raise ValueError(f"worker_momentum must lie in [0, 1), got {value!r}")
    return mu


def _layout(params) -> tuple:
    """``params``' tree structure with its leaves' shapes and dtypes: hashable, what the
    compiled loops depend on."""
    leaves, treedef = jax.tree.flatten(params)
    return treedef, tuple((jnp.shape(v), jnp.result_type(v)) for v in leaves)


def _unravel(layout):
    treedef, leaves = layout
    template = jax.tree.unflatten(treedef, [jnp.zeros(s, d) for s, d in leaves])
    return ravel_pytree(template)[1]


@functools.lru_cache(maxsize=64)
def _named_attack(name: str, num_workers: int, num_byzantine: int) -> Attack:
    """One :class:`Attack` object per name and cluster, so the compiled loops are reused."""
    return make_attack(name, num_workers=num_workers, num_byzantine=num_byzantine)


def _attack(attack, cluster, num_classes) -> Attack:
    if isinstance(attack, str):
        attack = _named_attack(attack, cluster.num_workers, cluster.num_byzantine)
    if not isinstance(attack, Attack):
        raise TypeError(f"attack must be a name or an Attack, got {type(attack).__name__}")
    if attack.flips_labels and num_classes is None:
        raise ValueError("the label-flip attack needs num_classes")
    return attack


class _Schedule(NamedTuple):
    """The event schedule, which does not depend on the parameters: per event, the
    worker, its arrival clock, the server update count when it started (its snapshot's
    version), the compute time drawn for it and its message id."""

    worker: jax.Array
    clock: jax.Array
    started: jax.Array
    drawn: jax.Array
    message_id: jax.Array


def _schedule(cluster: Cluster, upload, events: int, k_init, k_delay) -> _Schedule:
    """Every worker starts at time 0; the next event is the earliest finish; the worker
    then starts its next message (id ``n + e`` after event ``e``) at update count
    ``e + 1``."""
    n = cluster.num_workers
    means = jnp.asarray(cluster.mean_times(), jnp.float32)
    draws = jax.vmap(lambda i, k: _compute_time(cluster, means, i, k))(
        jnp.arange(n), jax.random.split(k_init, n)
    )

    def step(carry, e):
        finish, started, drawn, message_id = carry
        i = jnp.argmin(finish)
        clock = finish[i]
        out = _Schedule(i.astype(jnp.int32), clock, started[i], drawn[i], message_id[i])
        draw = _compute_time(cluster, means, i, jax.random.fold_in(k_delay, e))
        carry = (
            finish.at[i].set(clock + draw + upload),
            started.at[i].set(e + 1),
            drawn.at[i].set(draw),
            message_id.at[i].set(n + e),
        )
        return carry, out

    init = (draws + upload, jnp.zeros(n, jnp.int32), draws, jnp.arange(n, dtype=jnp.int32))
    _, schedule = jax.lax.scan(step, init, jnp.arange(events, dtype=jnp.int32))
    return schedule


def _slot_sharding(width: int):
    """A sharding of the ``width`` in-flight messages of a wave over the local devices, or
    ``None`` with one device."""
    devices = jax.devices()
    if len(devices) < 2:
        return None
    if width % len(devices):
        raise ValueError(
            f"parallel_events ({width}) must be a multiple of the {len(devices)} devices"
        )
    mesh = jax.sharding.Mesh(np.array(devices), ("workers",))
    return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("workers"))


@functools.lru_cache(maxsize=16)
def _run_async_jit(
    loss_fn, layout, cluster, protocol, attack, events, record_every, K, bits, num_classes,
    width, momentum: bool, screened: bool,
):  # fmt: skip
    """The compiled event loop; cached on what it depends on (the step sizes, the
    smoothing, the momentum and the screen's threshold are arguments: only whether there is
    momentum or a screen is not), so repeated runs compile once. The cache keeps
    ``loss_fn`` (and what it closes over) alive for its last 16 entries."""
    unravel = _unravel(layout)
    n, f = cluster.num_workers, cluster.num_byzantine
    upload = jnp.float32(bits * float(cluster.seconds_per_bit))
    is_far_sign = protocol != "sgd"
    attacked = bool(f) and attack.name not in ("none", "label_flip")
    sharding = _slot_sharding(width) if width > 1 else None

    def loss_flat(flat, batch):
        return loss_fn(unravel(flat), batch)

    grad_flat = jax.grad(loss_flat)

    def honest_stats(flat, x, y, key):
        """``honest_samples`` gradients of random honest workers at ``flat``."""
        keys = jax.random.split(key, cluster.honest_samples)

        def one(k):
            k_worker, k_batch = jax.random.split(k)
            worker = jax.random.randint(k_worker, (), f, n, jnp.int32)
            return grad_flat(flat, _batch(cluster, x, y, worker, k_batch, False, num_classes))

        return jax.vmap(one)(keys)

    @jax.jit
    def run(flat0, x, y, key, alphas, betas, lrs, tunables):
        smoothing, mu, one_minus_mu, kappa = tunables
        screen = kappa if screened else None
        D = flat0.shape[0]
        k_dirs, k_init, k_delay, k_events = jax.random.split(key, 4)
        plan = _schedule(cluster, upload, events, k_init, k_delay)
        server = fs.server_init(unravel(flat0), n if screened else None)

        def dirs(message_id):
            return fs.directions(k_dirs, message_id, D, K)

        def assign(server, message_id):
            if not is_far_sign:
                return jnp.zeros(K, jnp.float32)
            return fs.residual(server, dirs(message_id))

        def _seen_row(i):
            """The row of ``seen`` read by worker ``i`` (any row for an honest one)."""
            return jnp.clip(i, 0, max(f, 1) - 1) if momentum else jnp.zeros_like(i)

        def message(e, stale, r, m_prev, honest_m):
            """Event ``e``'s message, computed on its worker's snapshot ``stale`` with the
            residuals ``r`` it was sent: ``K`` bits (FAR-SIGN) or a gradient (SGD); and the
            worker's momentum after it (``m_prev``, and ``honest_m``: the honest workers'
            momenta when the worker started, are read only with ``worker_momentum``)."""
            i = plan.worker[e]
            k_batch, k_attack, k_stats = jax.random.split(jax.random.fold_in(k_events, e), 3)
            byzantine = i < f
            batch = _batch(cluster, x, y, i, k_batch, byzantine & attack.flips_labels, num_classes)

            def own_vector():
                """The worker's gradient, or its momentum (the gradient at its first
                message: only first messages start at update 0)."""
                g = grad_flat(stale, batch)
                if not momentum:
                    return g
                return jnp.where(plan.started[e] == 0, g, mu * m_prev + one_minus_mu * g)

            def stats():
                """What the omniscient attacks see of the honest workers."""
                return honest_m if momentum else honest_stats(stale, x, y, k_stats)

            if not is_far_sign:
                g = own_vector()
                if not attacked:
                    return g, g
                sent = jax.lax.cond(
                    byzantine,
                    # in the gradient's dtype: the gaussian attack draws float32 noise
                    lambda _: attack.craft(k_attack, g, stats()).astype(g.dtype),
                    lambda _: g,
                    None,
                )
                return sent, g
            d = dirs(plan.message_id[e])
            if protocol == "far_sign":
                v = own_vector()
                honest = fs.worker_bits(v, d, r)
            else:
                v = m_prev
                honest = fs.worker_bits_zo(
                    lambda p: loss_fn(p, batch), unravel(stale), d, r, smoothing
                )
            if not attacked:
                return honest, v

            def byzantine_bits(_):
                seen = stats()
                if attack.opposes_bits:
                    return -fs.worker_bits(jnp.mean(seen, axis=0), d, r)
                # the worker's own gradient (or momentum), computed once for first order
                own = v if protocol == "far_sign" else grad_flat(stale, batch)
                return fs.worker_bits(attack.craft(k_attack, own, seen), d, r)

            return jax.lax.cond(byzantine, byzantine_bits, lambda _: honest, None), v

        def wave(state, end):
            """Events ``a .. a + m - 1``: every one started from a snapshot that exists at
            ``a`` (started <= a), so their messages are computed together (over the
            devices when there are several), then applied in arrival order."""
            a, flat, server, snapshot, residual, momenta, seen = state
            slots = a + jnp.arange(width, dtype=jnp.int32)
            idx = jnp.minimum(slots, events - 1)
            ready = (plan.started[idx] <= a) & (slots < end)
            # int32 as the event counter it advances (the default int64 under x64)
            m = jnp.sum(jnp.cumprod(ready.astype(jnp.int32)), dtype=jnp.int32)
            if width == 1:
                i = plan.worker[a]
                msg, v = message(a, snapshot[i], residual[i], momenta[i], seen[_seen_row(i)])
                messages, vs = msg[None], v[None]
            else:
                workers = plan.worker[idx]
                stale, r = snapshot[workers], residual[workers]
                if sharding is not None:
                    stale = jax.lax.with_sharding_constraint(stale, sharding)
                    r = jax.lax.with_sharding_constraint(r, sharding)
                messages, vs = jax.vmap(message)(
                    idx, stale, r, momenta[workers], seen[_seen_row(workers)]
                )

            def apply(j, inner):
                flat, server, snapshot, residual, momenta, seen = inner
                e = a + j
                i = plan.worker[e]
                if is_far_sign:
                    flat, server = fs.server_step(
                        flat, server, dirs(plan.message_id[e]), messages[j], alphas[e], betas[e],
                        worker=i, screen=screen,
                    )  # fmt: skip
                else:
                    # in the parameters' dtype: float32 rates must not promote bf16 ones
                    flat = flat - (lrs[e] * messages[j]).astype(flat.dtype)
                # the worker starts its next message on the current parameters
                snapshot = snapshot.at[i].set(flat)
                residual = residual.at[i].set(assign(server, n + e))
                if momentum:  # its momentum; a Byzantine one sees the honest ones as they are now
                    momenta = momenta.at[i].set(vs[j])
                    seen = seen.at[jnp.where(i < f, i, seen.shape[0])].set(momenta[f:], mode="drop")
                return flat, server, snapshot, residual, momenta, seen

            inner = (flat, server, snapshot, residual, momenta, seen)
            return (a + m, *jax.lax.fori_loop(0, m, apply, inner))

        def chunk(state, c):
            end = (c + 1) * record_every
            state = jax.lax.while_loop(lambda s: s[0] < end, lambda s: wave(s, end), state)
            return state, (state[1], plan.clock[end - 1])

        ids = jnp.arange(n, dtype=jnp.int32)
        # momenta in the gradients' dtype, at least float32 (bfloat16 ones in float32)
        acc = jnp.promote_types(flat0.dtype, jnp.float32)
        init = (
            jnp.zeros((), jnp.int32),
            flat0,
            server,
            jnp.broadcast_to(flat0, (n, D)),
            jax.vmap(lambda i: assign(server, i))(ids),
            jnp.zeros((n, D) if momentum else (n, 1), acc),
            jnp.zeros((max(f, 1), n - f, D) if momentum else (1, 1, 1), acc),
        )
        _, (params, times) = jax.lax.scan(
            chunk, init, jnp.arange(events // record_every, dtype=jnp.int32)
        )
        staleness = jnp.arange(events, dtype=jnp.int32) - plan.started
        steps = (jnp.arange(events // record_every, dtype=jnp.int32) + 1) * record_every
        return plan.clock, plan.worker, staleness, plan.drawn, params, times, steps

    return run


def worker_sharding(num_workers: int):
    """A sharding of the leading (worker) axis over the local devices, or ``None`` with
    one device or when they do not divide the workers evenly."""
    devices = jax.devices()
    if len(devices) < 2 or num_workers % len(devices):
        return None
    mesh = jax.sharding.Mesh(np.array(devices), ("workers",))
    return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("workers"))


def run_sync(
    loss_fn: Callable[[Any, tuple], jax.Array],
    params: Any,
    data: tuple[Any, Any],
    cluster: Cluster,
    *,
    aggregator: str,
    attack: str | Attack = "none",
    rounds: int,
    key,
    record_every: int = 10,
    learning_rate: float | Callable = 0.05,
    num_classes: int | None = None,
    worker_momentum: float = 0.0,
    **aggregator_options,
) -> Trace:
    """Simulates ``rounds`` synchronous rounds with ``aggregator`` (a name of
    :data:`aggregators.AGGREGATORS`; its options as keywords; ``centered_clipping`` is
    centred on the previous round's aggregate). Staleness is 0 and ``worker`` is -1.
    ``worker_momentum`` as in :func:`run_async`: the workers send their momenta, and the
    attacks craft from the honest ones."""
    check_key(key)
    cluster = cluster.checked()
    attack = _attack(attack, cluster, num_classes)
    if attack.opposes_bits:
        raise ValueError("the direction-aware attack applies to FAR-SIGN messages only")
    _check_steps("rounds", rounds, record_every)
    n, f = cluster.num_workers, cluster.num_byzantine
    make_aggregator(aggregator, num_workers=n, num_byzantine=f, **aggregator_options)  # checks
    x, y = _check_data(cluster, *data)
    flat0, _ = ravel_pytree(params)
    # a worker's message: float32 coordinates, or one sign bit each for the sign vote
    bits = (1 if aggregator == "sign_majority" else 32) * flat0.shape[0]
    lrs = _step_sizes("learning_rate", learning_rate, rounds)
    mu = _momentum(worker_momentum)
    options = tuple(sorted(aggregator_options.items()))
    build = _run_sync_jit
    try:
        hash(options)
    except TypeError:  # options that cannot be hashed: compiled for this call only
        build = _run_sync_jit.__wrapped__
    fn = build(
        loss_fn, _layout(params), cluster, attack, aggregator, options, rounds, record_every,
        bits, num_classes, mu,
    )  # fmt: skip
    sharding = worker_sharding(n)
    if sharding is not None:
        x, y = jax.device_put(x, sharding), jax.device_put(y, sharding)
    return Trace(*fn(flat0, x, y, key, lrs), bits_per_message=bits)


@functools.lru_cache(maxsize=16)
def _run_sync_jit(
    loss_fn, layout, cluster, attack, aggregator, options, rounds, record_every, bits,
    num_classes, mu,
):  # fmt: skip
    """The compiled rounds; cached like :func:`_run_async_jit`."""
    n, f = cluster.num_workers, cluster.num_byzantine
    aggregate = make_aggregator(aggregator, num_workers=n, num_byzantine=f, **dict(options))
    sharding = worker_sharding(n)
    unravel = _unravel(layout)
    means = jnp.asarray(cluster.mean_times(), jnp.float32)
    upload = jnp.float32(bits * float(cluster.seconds_per_bit))
    centred = aggregator == "centered_clipping"

    def loss_flat(flat, batch):
        return loss_fn(unravel(flat), batch)

    grad_flat = jax.grad(loss_flat)
    byzantine = jnp.arange(n) < f

    @jax.jit
    def run(flat0, x, y, key, lrs):
        def round_(carry, round_key):
            flat, center, clock, t, momenta = carry
            k_batch, k_attack, k_delay = jax.random.split(round_key, 3)
            workers = jnp.arange(n)
            flips = byzantine & attack.flips_labels

            def gradient(i, k, flip):
                return grad_flat(flat, _batch(cluster, x, y, i, k, flip, num_classes))

            G = jax.vmap(gradient)(workers, jax.random.split(k_batch, n), flips)
            if sharding is not None:
                G = jax.lax.with_sharding_constraint(G, sharding)
            if mu:
                G = momenta = jnp.where(t == 0, G, mu * momenta + (1.0 - mu) * G)
            if f and attack.name not in ("none", "label_flip"):
                honest = G[f:]
                crafted = jax.vmap(lambda k, own: attack.craft(k, own, honest))(
                    jax.random.split(k_attack, f), G[:f]
                )
                G = G.at[:f].set(crafted)
            if centred:
                update = aggregate(G, center)
            else:
                update = aggregate(G)
            flat = flat - (lrs[t] * update).astype(flat.dtype)
            draws = jax.vmap(lambda i, k: _compute_time(cluster, means, i, k))(
                workers, jax.random.split(k_delay, n)
            )
            clock = clock + jnp.max(draws) + upload
            record = (clock, jnp.int32(-1), jnp.int32(0), jnp.max(draws))
            # the carried centre in the parameters' dtype (float32 momenta make the update
            # float32 under bfloat16 parameters)
            return (flat, update.astype(flat.dtype), clock, t + 1, momenta), record

        def chunk(carry, chunk_key):
            carry, records = jax.lax.scan(round_, carry, jax.random.split(chunk_key, record_every))
            return carry, (records, carry[0], carry[2], carry[3])

        # momenta in the gradients' dtype, at least float32 (bfloat16 ones in float32)
        acc = jnp.promote_types(flat0.dtype, jnp.float32)
        momenta = jnp.zeros((n, flat0.shape[0]) if mu else (n, 1), acc)
        init = (flat0, jnp.zeros_like(flat0), jnp.float32(0.0), jnp.zeros((), jnp.int32), momenta)
        _, (records, params, times, steps) = jax.lax.scan(
            chunk, init, jax.random.split(key, rounds // record_every)
        )
        time, worker, staleness, drawn = (r.reshape(-1) for r in records)
        return time, worker, staleness, drawn, params, times, steps

    return run
