"""The branch-and-bound's node stores: open nodes in fixed-capacity arrays, on the device
(:class:`NodeStore`) or in host NumPy (:class:`HostNodeStore`), with one contract.

Each row holds a node: its interval per SOS2 set (``lo``, ``hi``), its bound, depth, a
push counter (``order``, the newest node has the largest) and the key of its warm start
(``warm``, -1 for none). In :class:`NodeStore` the arrays live on the device, and the
selection and pruning over them run there as jitted programs; the host keeps only the list
of free rows and the count. The arrays start small and double (each size compiles its
programs once) up to the capacity the search allows; a row is recycled as soon as its node
leaves.

Pushes are gathered on the host and written in one call before the next read (a
selection, a pruning, the least bound), so a round of the search costs a few calls, not one
per child. The arrays are float64 and int64 whatever ``jax_enable_x64`` says: a bound
rounded to float32 could prune a node whose bound lies within the gap below the cutoff.

Selection: ``dive`` newest nodes, then the rest by best bound, ties by lowest row (as a
stable sort over the rows in order). Rows are handed out last freed first, from the lowest
never used, so a store that grew holds its nodes in the rows one of full size would have.
Both stores select the same nodes, so a search runs the same with either.

Which one a search uses (``PWLOptions.store``, :func:`make_store`): by default the device
store on an accelerator and the host store on the CPU backend, where the device is the host
and XLA's top-k costs about 0.1 us per row (a selection over 8,192 rows took 3.2 ms, three
top-k passes, against 0.3 ms for NumPy's over the open rows in a B=64 round; scratch).
"""

from __future__ import annotations

import abc
import functools

import jax
import jax.numpy as jnp
import numpy as np

# rows allocated at first (the arrays double from there, up to the capacity)
START_ROWS = 1024


STORES = ("auto", "device", "host")
# the per-node arrays, readable as host copies (NodeStore.__getattr__)
_FIELDS = ("lo", "hi", "bound", "depth", "order", "warm", "open")


class StoreFull(Exception):
    """A push found no free row and the store is at its capacity."""


def _bucket(count: int, smallest: int = 4) -> int:
    """The padded size of ``count`` items: a power of four (each compiles once)."""
    size = smallest
    while size < count:
        size *= 4
    return size


def _ordered(bound: jax.Array) -> jax.Array:
    """int64 keys ordered as the float64 ``bound`` (-0.0 as 0.0; -inf and inf included)."""
    # (bound + 0.0 did not turn -0.0 into 0.0 once compiled)
    bits = jax.lax.bitcast_convert_type(jnp.where(bound == 0.0, 0.0, bound), jnp.int64)
    return jnp.where(bits >= 0, bits, bits ^ jnp.int64(0x7FFF_FFFF_FFFF_FFFF))


@functools.partial(jax.jit, donate_argnums=0)
def _write(arrays: dict, rows, lo, hi, bound, depth, order, warm):
    """``arrays`` with the given rows written and opened (a row index past the end is
    padding, dropped)."""
    out = dict(arrays)
    for name, value in (
        ("lo", lo),
        ("hi", hi),
        ("bound", bound),
        ("depth", depth),
        ("order", order),
        ("warm", warm),
    ):
        out[name] = arrays[name].at[rows].set(value, mode="drop")
    out["open"] = arrays["open"].at[rows].set(True, mode="drop")
    return out


@functools.partial(jax.jit, static_argnames="width")
def _select(arrays: dict, take, dive, width: int):
    """The rows (``(width,)``, -1 past the chosen) of up to ``take`` open nodes: ``dive``
    newest (at most ``take``), then the rest by best bound; all open nodes, in row order,
    where there are at most ``take``."""
    is_open = arrays["open"]
    size = is_open.shape[0]
    rows = jnp.arange(size, dtype=jnp.int32)
    count = jnp.sum(is_open)
    k = min(width, size)
    position = jnp.arange(width)

    def padded(values):
        return jnp.concatenate([values, jnp.full(width - k, -1, values.dtype)])

    # every open node, in row order
    every = padded(jax.lax.top_k(jnp.where(is_open, size - rows, 0), k)[1].astype(jnp.int32))
    # the newest
    dive = jnp.minimum(dive, take)
    newest = padded(jax.lax.top_k(jnp.where(is_open, arrays["order"], -1), k)[1])
    newest = jnp.where(position < dive, newest.astype(jnp.int32), -1)
    # (a -1 would index the last row: past the end instead, dropped)
    taken = jnp.zeros(size, bool).at[jnp.where(newest >= 0, newest, size)].set(True, mode="drop")
    # best bound first among the others: the largest of ~key (never overflows), closed
    # rows and the newest below every open one
    key = jnp.where(is_open & ~taken, ~_ordered(arrays["bound"]), jnp.iinfo(jnp.int64).min)
    best = padded(jax.lax.top_k(key, k)[1].astype(jnp.int32))
    # newest[:dive] then best[:take - dive]
    shifted = jnp.take(best, jnp.clip(position - dive, 0, width - 1))
    chosen = jnp.where(position < dive, newest, jnp.where(position < take, shifted, -1))
    return jnp.where(count <= take, jnp.where(position < count, every, -1), chosen)


def _close(arrays: dict, rows):
    """``arrays`` with ``rows`` closed (-1: none), and their intervals, bounds, depths and
    warm-start keys."""
    safe = jnp.maximum(rows, 0)
    picked = {name: arrays[name][safe] for name in ("lo", "hi", "bound", "depth", "warm")}
    size = arrays["open"].shape[0]
    out = dict(arrays)
    out["open"] = arrays["open"].at[jnp.where(rows >= 0, rows, size)].set(False, mode="drop")
    return out, picked


_close_jit = jax.jit(_close, donate_argnums=0)


@functools.partial(jax.jit, static_argnames="width", donate_argnums=0)
def _take(arrays: dict, take, dive, width: int):
    """:func:`_select` and :func:`_close` of the rows chosen, in one call."""
    rows = _select(arrays, take, dive, width=width)
    arrays, picked = _close(arrays, rows)
    return arrays, rows, picked


@functools.partial(jax.jit, donate_argnums=0)
def _prune(arrays: dict, cutoff):
    """``arrays`` with the open nodes whose bound is >= ``cutoff`` closed, and which."""
    gone = arrays["open"] & (arrays["bound"] >= cutoff)
    out = dict(arrays)
    out["open"] = arrays["open"] & ~gone
    return out, gone


@jax.jit
def _least(arrays: dict):
    return jnp.min(jnp.where(arrays["open"], arrays["bound"], jnp.inf))


def _grown(arrays: dict, size: int) -> dict:
    """``arrays`` padded with closed rows to ``size``."""
    extra = size - arrays["open"].shape[0]
    return {
        name: jnp.concatenate([a, jnp.zeros((extra,) + a.shape[1:], a.dtype)])
        for name, a in arrays.items()
    }


class _Tally(abc.ABC):
    """The count and least bound of a store's open nodes, kept as nodes come and go (the
    least bound computed again by the store, :meth:`_least_now`, only after one left)."""

    open_count = 0
    _least: float | None = np.inf  # None: to be computed

    def count(self) -> int:
        return self.open_count

    def _opened(self, bound: float) -> None:
        self.open_count += 1
        if self._least is not None:
            self._least = min(self._least, bound)

    def _left(self, count: int) -> None:
        self.open_count -= count
        self._least = None

    def least_bound(self) -> float:
        """The least bound of the open nodes (inf: none)."""
        if self.open_count == 0:
            return np.inf
        if self._least is None:
            self._least = self._least_now()
        return self._least

    @abc.abstractmethod
    def _least_now(self) -> float:
        """The least bound over the open rows (at least one is open)."""


class NodeStore(_Tally):
    """Open nodes of a search over ``sets`` SOS2 sets, at most ``capacity`` at a time (the
    module docstring)."""

    def __init__(self, capacity: int, sets: int, start: int = START_ROWS) -> None:
        self.capacity = int(capacity)
        self.sets = int(sets)
        size = max(1, min(self.capacity, int(start)))
        with jax.enable_x64(True):
            self._arrays = {
                "lo": jnp.zeros((size, self.sets), jnp.int32),
                "hi": jnp.zeros((size, self.sets), jnp.int32),
                "bound": jnp.full(size, jnp.inf, jnp.float64),
                "depth": jnp.zeros(size, jnp.int32),
                "order": jnp.zeros(size, jnp.int64),
                "warm": jnp.full(size, -1, jnp.int64),
                "open": jnp.zeros(size, bool),
            }
        self.size = size
        self.free = list(range(size - 1, -1, -1))  # popped from the end
        self.counter = 0
        self._pending: list[tuple] = []

    # ---- host bookkeeping

    def push(self, lo, hi, bound, depth, warm) -> int:
        """Stores a node; its row (written to the device with the next read)."""
        if not self.free:
            if self.size >= self.capacity:
                raise StoreFull
            self._grow()
        i = self.free.pop()
        # (copies: the caller may change its arrays before the write)
        lo, hi = np.array(lo, np.int32), np.array(hi, np.int32)
        self._pending.append((i, lo, hi, float(bound), int(depth), self.counter, int(warm)))
        self.counter += 1
        self._opened(float(bound))
        return i

    def _grow(self) -> None:
        size = min(2 * self.size, self.capacity)
        self._flush()
        with jax.enable_x64(True):
            self._arrays = _grown(self._arrays, size)
        # the new rows are handed out lowest first, as a store of full size would
        self.free = list(range(size - 1, self.size - 1, -1)) + self.free
        self.size = size

    def _flush(self) -> None:
        if not self._pending:
            return
        n = len(self._pending)
        width = _bucket(n)
        rows = np.full(width, self.size, np.int32)  # padding: past the end, dropped
        lo = np.zeros((width, self.sets), np.int32)
        hi = np.zeros((width, self.sets), np.int32)
        bound = np.full(width, np.inf)
        depth = np.zeros(width, np.int32)
        order = np.zeros(width, np.int64)
        warm = np.full(width, -1, np.int64)
        for j, (i, lo_j, hi_j, b, d, o, w) in enumerate(self._pending):
            rows[j], lo[j], hi[j], bound[j], depth[j], order[j], warm[j] = i, lo_j, hi_j, b, d, o, w
        self._pending = []
        with jax.enable_x64(True):
            self._arrays = _write(self._arrays, rows, lo, hi, bound, depth, order, warm)

    def _release(self, rows) -> None:
        for i in rows:
            self.free.append(int(i))
        self._left(len(rows))

    # ---- device work

    def select(self, k: int, dive: int) -> list[int]:
        """The rows of up to ``k`` open nodes: ``dive`` newest (at most ``k``), the rest by
        best bound (all of them, in row order, where at most ``k`` are open). They stay
        open (:meth:`take` closes them)."""
        self._flush()
        if k <= 0 or self.open_count == 0:
            return []
        with jax.enable_x64(True):
            rows = _select(self._arrays, k, max(0, dive), width=_bucket(k, 1))
        return [int(i) for i in np.asarray(rows) if i >= 0]

    def take(self, k: int, dive: int) -> list[tuple]:
        """As :meth:`select`, and the nodes leave the store: ``(row, lo, hi, bound, depth,
        warm)`` each, in that order."""
        self._flush()
        if k <= 0 or self.open_count == 0:
            return []
        with jax.enable_x64(True):
            self._arrays, rows, picked = _take(self._arrays, k, max(0, dive), width=_bucket(k, 1))
        rows = np.asarray(rows)
        picked = {name: np.array(a) for name, a in picked.items()}  # writeable copies
        out = [
            (
                int(i),
                picked["lo"][j],
                picked["hi"][j],
                float(picked["bound"][j]),
                int(picked["depth"][j]),
                int(picked["warm"][j]),
            )
            for j, i in enumerate(rows)
            if i >= 0
        ]
        self._release([r[0] for r in out])
        return out

    def pop(self, i: int) -> None:
        """Closes row ``i``."""
        self._flush()
        with jax.enable_x64(True):
            self._arrays, _ = _close_jit(self._arrays, jnp.asarray([i], jnp.int32))
        self._release([i])

    def prune_above(self, cutoff: float) -> list[tuple[int, float, int]]:
        """Closes the open nodes whose bound is >= ``cutoff``: ``(row, bound, warm)`` each,
        by row."""
        self._flush()
        if self.open_count == 0:
            return []
        with jax.enable_x64(True):
            self._arrays, gone = _prune(self._arrays, jnp.float64(cutoff))
        rows = np.flatnonzero(np.asarray(gone))
        if rows.size == 0:
            return []
        bound = np.asarray(self._arrays["bound"])[rows]
        warm = np.asarray(self._arrays["warm"])[rows]
        self._release(rows)
        return [(int(i), float(b), int(w)) for i, b, w in zip(rows, bound, warm, strict=True)]

    def _least_now(self) -> float:
        self._flush()
        with jax.enable_x64(True):
            return float(_least(self._arrays))

    # ---- host copies, for inspection: store.open, store.bound, store.lo, ... as NumPy

    def __getattr__(self, name: str) -> np.ndarray:
        if name in _FIELDS:
            self._flush()
            return np.asarray(self._arrays[name])
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")


class HostNodeStore(_Tally):
    """The same contract as :class:`NodeStore` in host NumPy arrays of the full capacity.
    The count and the least bound are tallied (:class:`_Tally`): a reduction over the
    capacity's 200,000 rows every round cost about 0.1 ms (scratch profile at B=1)."""

    def __init__(self, capacity: int, sets: int) -> None:
        self.capacity = self.size = int(capacity)
        self.lo = np.zeros((capacity, sets), np.int32)
        self.hi = np.zeros((capacity, sets), np.int32)
        self.bound = np.full(capacity, np.inf)
        self.depth = np.zeros(capacity, np.int32)
        self.order = np.zeros(capacity, np.int64)
        self.warm = np.full(capacity, -1, np.int64)
        self.open = np.zeros(capacity, bool)
        self.free = list(range(capacity - 1, -1, -1))
        self.counter = 0

    def push(self, lo, hi, bound, depth, warm) -> int:
        if not self.free:
            raise StoreFull
        i = self.free.pop()
        self.lo[i], self.hi[i] = lo, hi
        self.bound[i], self.depth[i], self.warm[i] = bound, depth, warm
        self.order[i] = self.counter
        self.counter += 1
        self.open[i] = True
        self._opened(float(self.bound[i]))
        return i

    def pop(self, i: int) -> None:
        self._left(int(self.open[i]))
        self.open[i] = False
        self.free.append(i)

    def select(self, k: int, dive: int) -> list[int]:
        dive = min(max(dive, 0), k)
        idx = np.flatnonzero(self.open)
        if idx.size <= k:
            return idx.tolist()
        chosen: list[int] = []
        if dive > 0:
            newest = idx[np.argsort(-self.order[idx], kind="stable")[:dive]]
            chosen.extend(newest.tolist())
            idx = np.setdiff1d(idx, newest, assume_unique=True)
        rest = k - len(chosen)
        if rest > 0:
            best = idx[np.argsort(self.bound[idx], kind="stable")[:rest]]
            chosen.extend(best.tolist())
        return chosen

    def take(self, k: int, dive: int) -> list[tuple]:
        out = []
        for i in self.select(k, dive):
            b, d, w = float(self.bound[i]), int(self.depth[i]), int(self.warm[i])
            out.append((i, self.lo[i].copy(), self.hi[i].copy(), b, d, w))
            self.pop(i)
        return out

    def prune_above(self, cutoff: float) -> list[tuple[int, float, int]]:
        gone = np.flatnonzero(self.open & (self.bound >= cutoff))
        for i in gone:
            self.pop(int(i))
        return [(int(i), float(self.bound[i]), int(self.warm[i])) for i in gone]

    def _least_now(self) -> float:
        return float(self.bound[self.open].min())


def make_store(kind: str, capacity: int, sets: int):
    """The node store ``kind`` (:data:`STORES`; "auto": the device store unless jax's
    default backend is the CPU)."""
    if kind not in STORES:
        raise ValueError(f"store must be one of {STORES}, got {kind!r}")
    if kind == "auto":
        kind = "host" if jax.default_backend() == "cpu" else "device"
    return NodeStore(capacity, sets) if kind == "device" else HostNodeStore(capacity, sets)
