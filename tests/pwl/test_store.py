"""The node stores (device and host) against a plain-Python model of their contract."""

import math

import numpy as np
import pytest

from jaxopt_suite.pwl.store import HostNodeStore, NodeStore, StoreFull, make_store


class _Model:
    """The store's contract in plain Python: rows handed out last freed first, from the
    lowest never used; ``dive`` newest, then best bound with ties by row."""

    def __init__(self, capacity):
        self.free = list(range(capacity - 1, -1, -1))
        self.nodes = {}  # row -> (lo, hi, bound, depth, order, warm)
        self.counter = 0

    def push(self, lo, hi, bound, depth, warm):
        if not self.free:
            raise StoreFull
        i = self.free.pop()
        self.nodes[i] = (lo, hi, bound, depth, self.counter, warm)
        self.counter += 1
        return i

    def select(self, k, dive):
        rows = sorted(self.nodes)
        if len(rows) <= k:
            return rows
        dive = min(dive, k)
        newest = sorted(rows, key=lambda i: -self.nodes[i][4])[:dive]
        rest = sorted((i for i in rows if i not in newest), key=lambda i: self.nodes[i][2])
        return newest + rest[: k - dive]

    def take(self, k, dive):
        out = []
        for i in self.select(k, dive):
            lo, hi, bound, depth, _, warm = self.nodes.pop(i)
            self.free.append(i)
            out.append((i, lo, hi, bound, depth, warm))
        return out

    def prune_above(self, cutoff):
        out = []
        for i in sorted(self.nodes):
            if self.nodes[i][2] >= cutoff:
                out.append((i, self.nodes[i][2], self.nodes[i][5]))
                del self.nodes[i]
                self.free.append(i)
        return out


@pytest.mark.parametrize("kind", ["device", "host"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_store_follows_its_model_through_pushes_takes_and_prunes(seed, kind):
    """Random pushes (tied, infinite and signed-zero bounds among them), takes, pops and
    prunes, in a store of capacity 40 (the device one starting at 2 rows and growing),
    filled to it twice: every row, selection, taken node, pruned node, count and least
    bound is the model's, and a push past the capacity raises StoreFull."""
    rng = np.random.default_rng(seed)
    sets, capacity = 3, 40
    store = NodeStore(capacity, sets, start=2) if kind == "device" else HostNodeStore(40, sets)
    model = _Model(capacity)
    choices = np.array([-math.inf, -0.0, 0.0, 1.0, 1.0, 2.5, 1e-300, math.inf])
    full = 0
    for step in range(600):
        op = rng.choice(["push", "push", "push", "take", "select", "pop", "prune"])
        if step in (200, 400):
            op = "fill"  # pushes until the store is full (then one more, refused)
        if op == "fill":
            while model.free:
                assert store.push(np.zeros(sets), np.ones(sets), 0.5, 0, -1) == model.push(
                    np.zeros(sets), np.ones(sets), 0.5, 0, -1
                )
            op = "push"
        if op == "push":
            lo = rng.integers(0, 5, sets)
            hi = lo + rng.integers(0, 5, sets)
            bound = float(rng.choice(choices) if rng.random() < 0.4 else rng.normal())
            depth, warm = int(rng.integers(0, 50)), int(rng.integers(-1, 100))
            try:
                want = model.push(lo, hi, bound, depth, warm)
            except StoreFull:
                full += 1
                with pytest.raises(StoreFull):
                    store.push(lo, hi, bound, depth, warm)
                continue
            assert store.push(lo, hi, bound, depth, warm) == want
        elif op == "select":
            k, dive = int(rng.integers(0, 12)), int(rng.integers(0, 5))
            assert store.select(k, dive) == model.select(k, dive)
        elif op == "take":
            k, dive = int(rng.integers(0, 12)), int(rng.integers(0, 5))
            got, want = store.take(k, dive), model.take(k, dive)
            assert [g[0] for g in got] == [w[0] for w in want]
            for g, w in zip(got, want, strict=True):
                np.testing.assert_array_equal(g[1], w[1])
                np.testing.assert_array_equal(g[2], w[2])
                assert g[3:] == w[3:] and type(g[3]) is float
                assert g[1].flags.writeable
        elif op == "pop" and model.nodes:
            i = int(rng.choice(sorted(model.nodes)))
            store.pop(i)
            del model.nodes[i]
            model.free.append(i)
        elif op == "prune":
            cutoff = float(rng.normal() + 1.0)
            assert store.prune_above(cutoff) == model.prune_above(cutoff)
        assert store.count() == len(model.nodes)
        least = min((node[2] for node in model.nodes.values()), default=math.inf)
        assert store.least_bound() == least
    assert full > 0 and store.size == capacity
    np.testing.assert_array_equal(np.flatnonzero(store.open), sorted(model.nodes))


def test_bounds_are_kept_in_float64_without_x64():
    """A bound 1e-12 above the cutoff survives a prune and is the least bound to the last
    bit, with jax_enable_x64 off (float32 would round both to 1.0)."""
    import jax

    assert not jax.config.jax_enable_x64
    store = NodeStore(8, 1)
    above, below = 1.0 + 1e-12, 1.0 - 1e-12
    store.push(np.zeros(1), np.ones(1), above, 1, 3)
    store.push(np.zeros(1), np.ones(1), below, 1, 4)
    assert store.least_bound() == below
    assert store.prune_above(1.0) == [(0, above, 3)]
    assert store.least_bound() == below and store.count() == 1
    assert store.bound.dtype == np.float64


def test_a_grown_store_holds_its_nodes_where_a_full_size_one_would():
    small, big = NodeStore(64, 2, start=1), NodeStore(64, 2)
    for j in range(64):
        lo = np.array([j % 3, 0])
        assert small.push(lo, lo + 2, float(j % 5), j, j) == big.push(
            lo, lo + 2, float(j % 5), j, j
        )
    assert small.size == 64
    for name in ("lo", "hi", "bound", "depth", "warm", "open"):
        np.testing.assert_array_equal(getattr(small, name), getattr(big, name))
    got, want = small.take(10, 3), big.take(10, 3)
    assert [g[0] for g in got] == [w[0] for w in want] and len(got) == 10
    assert [g[3:] for g in got] == [w[3:] for w in want]
    for _ in range(10):  # the rows taken, last freed first
        small.push(np.zeros(2), np.ones(2), 0.0, 0, -1)
    with pytest.raises(StoreFull):
        small.push(np.zeros(2), np.ones(2), 0.0, 0, -1)


def test_make_store_picks_by_backend_and_names_a_bad_kind():
    import jax

    auto = make_store("auto", 4, 2)
    assert isinstance(auto, HostNodeStore if jax.default_backend() == "cpu" else NodeStore)
    assert isinstance(make_store("device", 4, 2), NodeStore)
    assert isinstance(make_store("host", 4, 2), HostNodeStore)
    with pytest.raises(ValueError, match=r"store must be one of \('auto', 'device', 'host'\)"):
        make_store("gpu", 4, 2)


@pytest.mark.parametrize("kind", [NodeStore, HostNodeStore])
def test_a_pushed_node_keeps_its_intervals_when_the_caller_changes_its_arrays(kind):
    # (the device store writes pushes later, in one call: it holds copies until then)
    store = kind(4, 2)
    lo, hi = np.array([0, 1]), np.array([3, 4])
    store.push(lo, hi, 1.0, 0, -1)
    lo[0], hi[0] = 9, 9
    ((_, got_lo, got_hi, *_),) = store.take(1, 0)
    assert got_lo.tolist() == [0, 1] and got_hi.tolist() == [3, 4]
