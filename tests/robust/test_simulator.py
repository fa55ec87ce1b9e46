"""The parameter-server simulator: event order, staleness and delays as the model says;
learning with and without Byzantine workers; determinism; sharded workers; bad input."""

import dataclasses
import heapq
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxopt_suite.robust import far_sign as fs
from jaxopt_suite.robust.attacks import alie_z
from jaxopt_suite.robust.simulator import Cluster, run_async, run_sync

DIM = 8


def _regression(n, m=256, noise=0.1, seed=0):
    rng = np.random.default_rng(seed)
    w = np.linspace(-1.0, 1.0, DIM).astype(np.float32)
    x = rng.normal(size=(n, m, DIM)).astype(np.float32)
    y = (x @ w + noise * rng.normal(size=(n, m))).astype(np.float32)
    return (x, y), w


def _loss(params, batch):
    xb, yb = batch
    return 0.5 * jnp.mean((xb @ params["w"] - yb) ** 2)


PARAMS = {"w": jnp.zeros(DIM)}


def _python_events(means, upload, events):
    """The fixed-delay model by hand: a heap of (finish, worker), ties to the lower index."""
    heap = [(m + upload, i) for i, m in enumerate(means)]
    heapq.heapify(heap)
    started = [0] * len(means)
    out, version = [], 0
    for _ in range(events):
        clock, i = heapq.heappop(heap)
        out.append((clock, i, version - started[i]))
        version += 1
        started[i] = version
        heapq.heappush(heap, (clock + means[i] + upload, i))
    return out


@pytest.mark.parametrize("protocol", ["sgd", "far_sign"])
def test_event_order_and_staleness_follow_the_fixed_delays(key, protocol):
    cluster = Cluster(
        num_workers=4, delay="fixed", stragglers=1, straggler_factor=2.5, seconds_per_bit=1e-3
    )
    data, _ = _regression(4)
    trace = run_async(
        _loss,
        PARAMS,
        data,
        cluster,
        protocol=protocol,
        events=40,
        record_every=10,
        key=key,
        num_directions=4,
    )
    upload = trace.bits_per_message * 1e-3
    # a FAR-SIGN upload: 4 sign bits and the 32-bit id (the id was not charged)
    assert trace.bits_per_message == (32 * DIM if protocol == "sgd" else 4 + 32)
    expected = _python_events(list(cluster.mean_times()), upload, 40)
    np.testing.assert_allclose(trace.time, [e[0] for e in expected], rtol=1e-6)
    assert trace.worker.tolist() == [e[1] for e in expected]
    assert trace.staleness.tolist() == [e[2] for e in expected]
    np.testing.assert_allclose(trace.checkpoint_time, trace.time[9::10])
    assert trace.checkpoint_step.tolist() == [10, 20, 30, 40]


def test_random_delays_have_the_configured_means(key):
    # 4000 events over 10 workers; the sample mean of each worker's draws is within
    # 4 standard errors of its mean (exponential: sd = mean; lognormal: sd = mean *
    # sqrt(exp(s^2) - 1))
    data, _ = _regression(10, m=16)
    for delay, spread in (("exponential", 1.0), ("lognormal", np.sqrt(np.exp(0.25) - 1))):
        cluster = Cluster(num_workers=10, delay=delay, stragglers=2, straggler_factor=4.0)
        trace = run_async(
            _loss,
            PARAMS,
            data,
            cluster,
            protocol="sgd",
            events=4000,
            record_every=100,
            key=key,
            learning_rate=0.0,
        )
        worker, drawn = np.asarray(trace.worker), np.asarray(trace.compute_time)
        for i, mean in enumerate(cluster.mean_times()):
            draws = drawn[worker == i]
            assert abs(draws.mean() - mean) <= 4 * spread * mean / np.sqrt(draws.size), (delay, i)
        # stragglers send fewer messages, in proportion to their speed
        counts = np.bincount(worker, minlength=10)
        assert counts[-2:].mean() < 0.5 * counts[:8].mean()


def test_far_sign_learns_with_30_percent_sign_flippers_and_is_deterministic(key):
    n = 10
    data, w = _regression(n)
    cluster = Cluster(num_workers=n, num_byzantine=3, delay="exponential", batch_size=16)
    alpha, beta = fs.default_schedules(alpha=0.02, beta=0.02, t0=2000.0)
    kwargs = dict(
        protocol="far_sign",
        attack="sign_flip",
        events=6000,
        record_every=1000,
        key=key,
        num_directions=4,
        alpha=alpha,
        beta=beta,
    )
    trace = run_async(_loss, PARAMS, data, cluster, **kwargs)
    error = np.linalg.norm(np.asarray(trace.params[-1]) - w)
    assert error < 0.1 * np.linalg.norm(w)
    again = run_async(_loss, PARAMS, data, cluster, **kwargs)
    assert np.array_equal(trace.params, again.params)
    assert np.array_equal(trace.worker, again.worker)
    # Gaussian noise (sd 200) from the same 30% breaks asynchronous SGD, not FAR-SIGN,
    # whose message is one bit whatever the vector behind it
    noisy = dict(kwargs, attack="gaussian")
    trace = run_async(_loss, PARAMS, data, cluster, **noisy)
    assert np.linalg.norm(np.asarray(trace.params[-1]) - w) < 0.1 * np.linalg.norm(w)
    sgd = run_async(
        _loss,
        PARAMS,
        data,
        cluster,
        protocol="sgd",
        attack="gaussian",
        events=6000,
        record_every=1000,
        key=key,
        learning_rate=0.02,
    )
    assert np.linalg.norm(np.asarray(sgd.params[-1]) - w) > 2.0 * np.linalg.norm(w)


def _greedy_waves(staleness, width, record_every):
    """Wave sizes by the rule of the module docstring, from a trace's staleness."""
    started = np.arange(staleness.size) - staleness
    sizes, a = [], 0
    while a < staleness.size:
        m = 1
        while (
            m < width and (a + m) % record_every and a + m < staleness.size and started[a + m] <= a
        ):
            m += 1
        sizes.append(m)
        a += m
    return np.array(sizes)


@pytest.mark.parametrize(
    "protocol, attack, momentum",
    [
        ("far_sign", "sign_flip", 0.0),
        ("far_sign", "alie", 0.0),
        ("sgd", "ipm", 0.0),
        ("far_sign", "alie", 0.9),
        ("sgd", "sign_flip", 0.5),
        ("far_sign", "alie", "screen"),
    ],
)
def test_messages_computed_in_waves_give_the_same_trace(key, protocol, attack, momentum):
    data, _ = _regression(8)
    cluster = Cluster(num_workers=8, num_byzantine=2, delay="exponential", batch_size=8)
    screen = None
    if momentum == "screen":  # the server's screen instead of momentum
        momentum, screen = 0.0, 1.2
    steps = {"learning_rate": 0.02} if protocol == "sgd" else {"alpha": 0.02, "beta": 0.02}
    kwargs = dict(
        protocol=protocol, attack=attack, events=600, record_every=200, key=key,
        num_directions=4, worker_momentum=momentum, screen=screen, **steps,
    )  # fmt: skip
    one = run_async(_loss, PARAMS, data, cluster, parallel_events=1, **kwargs)
    four = run_async(_loss, PARAMS, data, cluster, parallel_events=4, **kwargs)
    for field in ("time", "worker", "staleness", "compute_time", "checkpoint_step"):
        assert np.array_equal(getattr(one, field), getattr(four, field)), field
    np.testing.assert_allclose(four.params, one.params, rtol=1e-4, atol=1e-5)
    assert np.linalg.norm(np.asarray(one.params[-1])) > 0.1  # it moved
    # the waves are not trivial: most events share theirs with others
    sizes = _greedy_waves(np.asarray(one.staleness), 4, 200)
    assert sizes.sum() == 600 and sizes.mean() > 2.0


def _one_sample_per_worker(n, seed=0):
    """Shards whose rows all repeat one sample per worker: every minibatch of worker ``i``
    has the gradient ``(a_i . w - b_i) a_i``, so a run can be replayed by hand."""
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(n, DIM)).astype(np.float32)
    b = rng.normal(size=n).astype(np.float32)
    x = np.broadcast_to(a[:, None, :], (n, 16, DIM)).copy()
    y = np.broadcast_to(b[:, None], (n, 16)).copy()
    return (x, y), a.astype(np.float64), b.astype(np.float64)


@pytest.mark.parametrize("attack", ["none", "alie"])
def test_async_worker_momentum_matches_a_replay_by_hand(key, attack):
    """Asynchronous SGD with worker momentum ``mu``: worker ``i`` keeps ``m <- mu m + (1 -
    mu) g`` over the gradients at its snapshots (``m = g`` at its first message); under
    ALIE a Byzantine worker sends ``mean - z std`` of the honest workers' momenta as they
    were when it started the message (zero before their first message)."""
    n, f, mu, lr = 5, 1 if attack == "alie" else 0, 0.8, 0.05
    data, a, b = _one_sample_per_worker(n)
    cluster = Cluster(num_workers=n, num_byzantine=f, delay="exponential", stragglers=1)
    events, every = 120, 40
    trace = run_async(
        _loss, PARAMS, data, cluster, protocol="sgd", attack=attack, events=events,
        record_every=every, key=key, learning_rate=lr, worker_momentum=mu,
    )  # fmt: skip
    z = alie_z(n, f) if f else 0.0
    x = np.zeros(DIM)
    snapshot, momenta = np.zeros((n, DIM)), np.zeros((n, DIM))
    seen = np.zeros((n, n - f, DIM))  # the honest momenta when each worker started
    first, started = np.ones(n, bool), np.zeros(n, int)
    workers, staleness = np.asarray(trace.worker), np.asarray(trace.staleness)
    for e in range(events):
        i = workers[e]
        assert staleness[e] == e - started[i]
        g = (a[i] @ snapshot[i] - b[i]) * a[i]
        honest = seen[i]
        momenta[i] = g if first[i] else mu * momenta[i] + (1 - mu) * g
        first[i] = False
        sent = honest.mean(0) - z * honest.std(0) if i < f else momenta[i]
        x = x - lr * sent
        snapshot[i] = x
        seen[i] = momenta[f:]
        started[i] = e + 1
        if (e + 1) % every == 0:
            np.testing.assert_allclose(trace.params[e // every], x, rtol=1e-4, atol=1e-5)
    assert np.linalg.norm(x) > 0.1  # it moved


def test_sync_worker_momentum_matches_a_replay_by_hand(key):
    """Synchronous rounds with worker momentum: the aggregator combines the momenta."""
    n, mu, lr = 4, 0.5, 0.1
    data, a, b = _one_sample_per_worker(n, seed=1)
    trace = run_sync(
        _loss, PARAMS, data, Cluster(num_workers=n, stragglers=0), aggregator="mean",
        rounds=30, record_every=10, key=key, learning_rate=lr, worker_momentum=mu,
    )  # fmt: skip
    x, momenta = np.zeros(DIM), np.zeros((n, DIM))
    for t in range(30):
        g = (a @ x - b)[:, None] * a
        momenta = g if t == 0 else mu * momenta + (1 - mu) * g
        x = x - lr * momenta.mean(0)
        if (t + 1) % 10 == 0:
            np.testing.assert_allclose(trace.params[t // 10], x, rtol=1e-4, atol=1e-5)


def test_zeroth_order_far_sign_learns_without_adversaries(key):
    data, w = _regression(4)
    cluster = Cluster(num_workers=4, stragglers=0, batch_size=32)
    alpha, beta = fs.default_schedules(alpha=0.02, beta=0.02, t0=2000.0)
    trace = run_async(
        _loss,
        PARAMS,
        data,
        cluster,
        protocol="far_sign_zo",
        events=4000,
        record_every=1000,
        key=key,
        num_directions=4,
        alpha=alpha,
        beta=beta,
    )
    assert np.linalg.norm(np.asarray(trace.params[-1]) - w) < 0.1 * np.linalg.norm(w)


@pytest.mark.parametrize(
    "aggregator",
    [
        "mean",
        "coordinate_median",
        "trimmed_mean",
        "krum",
        "geometric_median",
        "centered_clipping",
        "sign_majority",
    ],
)
def test_sync_aggregators_learn_and_robust_ones_survive_sign_flips(key, aggregator):
    n = 10
    data, w = _regression(n)
    options = {"tau": 1.0} if aggregator == "centered_clipping" else {}
    lr = 0.01 if aggregator == "sign_majority" else 0.1
    cluster = Cluster(num_workers=n, num_byzantine=0, delay="lognormal", batch_size=16)
    trace = run_sync(
        _loss,
        PARAMS,
        data,
        cluster,
        aggregator=aggregator,
        rounds=300,
        record_every=100,
        key=key,
        learning_rate=lr,
        **options,
    )
    assert np.linalg.norm(np.asarray(trace.params[-1]) - w) < 0.1 * np.linalg.norm(w)
    assert np.all(np.diff(np.asarray(trace.time)) > 0) and np.all(trace.worker == -1)
    if aggregator in ("coordinate_median", "trimmed_mean", "krum", "geometric_median"):
        attacked = run_sync(
            _loss,
            PARAMS,
            data,
            dataclasses.replace(cluster, num_byzantine=3),
            aggregator=aggregator,
            attack="sign_flip",
            rounds=300,
            record_every=100,
            key=key,
            learning_rate=lr,
            **options,
        )
        assert np.linalg.norm(np.asarray(attacked.params[-1]) - w) < 0.2 * np.linalg.norm(w)


@pytest.mark.parametrize("aggregator", ["mean", "sign_majority"])
def test_sync_rounds_charge_the_message_size(key, aggregator):
    # a sign vote's message is one bit a coordinate (it was charged 32, as a float's)
    cluster = Cluster(num_workers=4, delay="fixed", seconds_per_bit=1e-3)
    data, _ = _regression(4)
    trace = run_sync(
        _loss, PARAMS, data, cluster, aggregator=aggregator, rounds=20, record_every=10, key=key
    )
    bits = (1 if aggregator == "sign_majority" else 32) * DIM
    assert trace.bits_per_message == bits
    round_seconds = max(cluster.mean_times()) + bits * 1e-3
    np.testing.assert_allclose(trace.time, round_seconds * np.arange(1, 21), rtol=1e-5)


def test_bad_input_is_named(key):
    data, _ = _regression(4)
    cluster = Cluster(num_workers=4, stragglers=0)
    with pytest.raises(ValueError, match="num_byzantine must be < num_workers"):
        run_async(
            _loss,
            PARAMS,
            data,
            Cluster(num_workers=4, num_byzantine=4),
            events=10,
            record_every=10,
            key=key,
        )
    with pytest.raises(ValueError, match="protocol must be one of"):
        run_async(
            _loss, PARAMS, data, cluster, protocol="zeno", events=10, record_every=10, key=key
        )
    with pytest.raises(ValueError, match="multiple of record_every"):
        run_async(_loss, PARAMS, data, cluster, events=15, record_every=10, key=key)
    with pytest.raises(ValueError, match="num_directions must be an integer >= 1, got 2.9"):
        run_async(
            _loss, PARAMS, data, cluster, events=10, record_every=10, key=key, num_directions=2.9
        )
    with pytest.raises(ValueError, match="smoothing must be finite and > 0, got 0.0"):
        run_async(
            _loss, PARAMS, data, cluster, protocol="far_sign_zo", events=10, record_every=10,
            key=key, num_directions=4, smoothing=0.0,
        )  # fmt: skip
    with pytest.raises(ValueError, match="parallel_events must be an integer >= 1"):
        run_async(
            _loss,
            PARAMS,
            data,
            cluster,
            events=10,
            record_every=10,
            key=key,
            parallel_events=0,
            num_directions=4,
        )
    with pytest.raises(ValueError, match="worker data must be"):
        run_async(_loss, PARAMS, _regression(3)[0], cluster, events=10, record_every=10, key=key)
    with pytest.raises(ValueError, match="FAR-SIGN messages only"):
        run_async(
            _loss,
            PARAMS,
            data,
            Cluster(num_workers=4, num_byzantine=1, stragglers=0),
            protocol="sgd",
            attack="adaptive",
            events=10,
            record_every=10,
            key=key,
        )
    with pytest.raises(ValueError, match="needs num_classes"):
        run_async(
            _loss,
            PARAMS,
            data,
            Cluster(num_workers=4, num_byzantine=1, stragglers=0),
            attack="label_flip",
            events=10,
            record_every=10,
            key=key,
        )
    with pytest.raises(ValueError, match="krum tolerates fewer Byzantine workers"):
        run_sync(
            _loss,
            PARAMS,
            data,
            Cluster(num_workers=4, num_byzantine=1, stragglers=0),
            aggregator="krum",
            rounds=10,
            record_every=10,
            key=key,
        )
    bad = (data[0].copy(), data[1])
    bad[0][1, 2, 3] = np.nan
    with pytest.raises(ValueError, match="worker data x contains NaN"):
        run_async(_loss, PARAMS, bad, cluster, events=10, record_every=10, key=key)
    with pytest.raises(ValueError, match="delay must be one of"):
        Cluster(delay="pareto").checked()
    common = dict(events=10, record_every=10, key=key, num_directions=4)
    with pytest.raises(ValueError, match=r"worker_momentum must lie in \[0, 1\), got 1.0"):
        run_async(_loss, PARAMS, data, cluster, worker_momentum=1.0, **common)
    rounds = dict(rounds=10, record_every=10, key=key, aggregator="mean")
    with pytest.raises(TypeError, match="worker_momentum must be a number"):
        run_sync(_loss, PARAMS, data, cluster, worker_momentum="high", **rounds)
    with pytest.raises(ValueError, match="worker_momentum must lie in"):
        run_sync(_loss, PARAMS, data, cluster, worker_momentum=-0.1, **rounds)
    with pytest.raises(ValueError, match="worker_momentum needs gradients"):
        run_async(
            _loss, PARAMS, data, cluster, protocol="far_sign_zo", worker_momentum=0.5, **common
        )
    with pytest.raises(ValueError, match="screen applies to the far_sign protocols only"):
        run_async(_loss, PARAMS, data, cluster, protocol="sgd", screen=1.2, **common)
    with pytest.raises(ValueError, match=r"screen \(kappa.*must be > 1.*got 0.9"):
        run_async(_loss, PARAMS, data, cluster, screen=0.9, **common)


def test_repeated_runs_compile_once_and_use_their_own_step_sizes(key):
    """A new step size (number or schedule) or a fresh attack name does not trace the loss
    again; the run still uses its own step sizes."""
    traced = []

    def loss(params, batch):
        traced.append(1)
        return _loss(params, batch)

    data, w = _regression(4)
    cluster = Cluster(num_workers=4, num_byzantine=1, stragglers=0, delay="fixed")
    common = dict(events=40, record_every=40, key=key, num_directions=4, attack="sign_flip")
    first = run_async(loss, PARAMS, data, cluster, alpha=0.05, **common)
    count = len(traced)
    assert count > 0
    second = run_async(loss, PARAMS, data, cluster, alpha=lambda t: 0.2 / (1.0 + t), **common)
    third = run_async(loss, PARAMS, data, cluster, alpha=0.05, **common)
    assert len(traced) == count
    np.testing.assert_array_equal(first.params, third.params)
    assert not np.allclose(first.params, second.params)
    # nor does a new momentum or screen threshold (once there is one), or a new smoothing
    run_async(loss, PARAMS, data, cluster, worker_momentum=0.5, screen=1.5, **common)
    count = len(traced)
    run_async(loss, PARAMS, data, cluster, worker_momentum=0.9, screen=3.0, **common)
    assert len(traced) == count
    zeroth = {**common, "protocol": "far_sign_zo"}
    run_async(loss, PARAMS, data, cluster, smoothing=1e-2, **zeroth)
    count = len(traced)
    run_async(loss, PARAMS, data, cluster, smoothing=1e-4, **zeroth)
    assert len(traced) == count

    sync = dict(aggregator="trimmed_mean", rounds=20, record_every=10, key=key)
    slow = run_sync(loss, PARAMS, data, cluster, learning_rate=0.01, **sync)
    count = len(traced)
    fast = run_sync(loss, PARAMS, data, cluster, learning_rate=0.1, **sync)
    assert len(traced) == count
    # the larger step gets closer to the regression weights
    assert np.linalg.norm(fast.params[-1] - w) < np.linalg.norm(slow.params[-1] - w)


def test_bad_step_sizes_are_named(key):
    data, _ = _regression(4)
    cluster = Cluster(num_workers=4, stragglers=0)
    common = dict(events=10, record_every=10, key=key, num_directions=4)
    with pytest.raises(ValueError, match="alpha must be finite"):
        run_async(_loss, PARAMS, data, cluster, alpha=float("nan"), **common)
    with pytest.raises(ValueError, match="beta must map an update count to a scalar"):
        run_async(_loss, PARAMS, data, cluster, beta=lambda t: jnp.ones(2) * t, **common)
    with pytest.raises(ValueError, match="learning_rate must be finite"):
        run_sync(
            _loss, PARAMS, data, cluster, aggregator="mean", rounds=10, record_every=10,
            key=key, learning_rate=lambda t: jnp.where(t == 3, jnp.nan, 0.1),
        )  # fmt: skip


@pytest.mark.parametrize(
    ("protocol", "steps", "message"),
    [
        ("far_sign", {"alpha": -0.05}, "alpha must be >= 0 at every update, got -0.05"),
        ("far_sign", {"beta": -0.01}, "beta must be >= 0 at every update, got -0.01"),
        ("sgd", {"learning_rate": -0.1}, "learning_rate must be >= 0 at every update, got -0.1"),
        (
            "far_sign",
            {"beta": lambda t: 0.01 - 0.005 * t},
            "beta must be >= 0 at every update, got -0.005 at update 3",
        ),
        ("sync", {"learning_rate": -0.1}, "learning_rate must be >= 0 at every update, got -0.1"),
    ],
)
def test_negative_step_sizes_are_refused(key, protocol, steps, message):
    # a negative step ascends the loss (or, for beta, pushes the tracker away from the
    # workers' medians); zero holds a quantity still and is allowed (the delay tests run
    # with learning_rate=0)
    data, _ = _regression(4)
    cluster = Cluster(num_workers=4, stragglers=0)
    with pytest.raises(ValueError, match=message):
        if protocol == "sync":
            run_sync(
                _loss, PARAMS, data, cluster, aggregator="mean", rounds=10, record_every=10,
                key=key, **steps,
            )  # fmt: skip
        else:
            run_async(
                _loss, PARAMS, data, cluster, protocol=protocol, events=10, record_every=10,
                key=key, num_directions=4, **steps,
            )  # fmt: skip


def test_unknown_aggregator_options_are_refused(key):
    data, _ = _regression(4)
    cluster = Cluster(num_workers=4, stragglers=0)
    with pytest.raises(ValueError, match="'trimmed_mean' does not take the option\\(s\\) tau"):
        run_sync(
            _loss, PARAMS, data, cluster, aggregator="trimmed_mean", rounds=10, record_every=10,
            key=key, tau=1.0,
        )  # fmt: skip


def _numbers_on_four_virtual_devices(script: str) -> list[float]:
    """Runs ``script`` in a fresh interpreter with four virtual CPU devices (and the test
    suite's compiler flags, which this process's environment holds); the numbers it printed
    on its last line."""
    flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=4"
    env = dict(os.environ, XLA_FLAGS=flags.strip(), JAX_PLATFORMS="cpu")
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return [float(word) for word in out.stdout.strip().splitlines()[-1].split()]


def test_sync_workers_and_async_messages_are_sharded_over_virtual_devices():
    """One child process with four virtual devices (one interpreter start, not two): the
    synchronous workers are sharded and learn; the asynchronous wave of 4 messages (one per
    device) gives the trace of one message at a time, and learns."""
    script = textwrap.dedent(
        """
        import jax, numpy as np, pytest
        import jax.numpy as jnp
        from jaxopt_suite.robust.simulator import Cluster, run_async, run_sync, worker_sharding
        assert len(jax.devices()) == 4 and worker_sharding(8) is not None
        rng = np.random.default_rng(0)
        x = rng.normal(size=(8, 64, 4)).astype(np.float32)
        y = (x @ np.ones(4, np.float32)).astype(np.float32)
        loss = lambda p, b: 0.5 * jnp.mean((b[0] @ p["w"] - b[1]) ** 2)
        cluster = Cluster(num_workers=8, num_byzantine=2, stragglers=0, batch_size=8)
        t = run_sync(loss, {"w": jnp.zeros(4)}, (x, y), cluster, aggregator="trimmed_mean",
                     attack="alie", rounds=200, record_every=100, key=jax.random.key(0),
                     learning_rate=0.1)
        kw = dict(protocol="far_sign", attack="sign_flip", events=2000, record_every=500,
                  key=jax.random.key(0), num_directions=2, alpha=0.05, beta=0.05)
        wide = run_async(loss, {"w": jnp.zeros(4)}, (x, y), cluster, **kw)  # width 4
        one = run_async(loss, {"w": jnp.zeros(4)}, (x, y), cluster, parallel_events=1, **kw)
        assert np.array_equal(wide.worker, one.worker)
        np.testing.assert_allclose(wide.params, one.params, rtol=1e-4, atol=1e-5)
        with pytest.raises(ValueError, match="multiple of the 4 devices"):
            run_async(loss, {"w": jnp.zeros(4)}, (x, y), cluster, parallel_events=6, **kw)
        print(float(np.linalg.norm(np.asarray(t.params[-1]) - 1.0)),
              float(np.linalg.norm(np.asarray(wide.params[-1]) - 1.0)))
        """
    )
    sync_error, async_error = _numbers_on_four_virtual_devices(script)
    assert sync_error < 0.2, "sync"
    assert async_error < 0.2, "async"


def test_low_precision_parameters_and_infinite_timings(key):
    # float32 step sizes promoted bf16 parameters and the scan's carry changed its dtype
    data, _ = _regression(4, m=32)

    def loss(params, batch):
        xb, yb = batch
        return 0.5 * jnp.mean((xb @ params["w"].astype(jnp.float32) - yb) ** 2)

    params = {"w": jnp.zeros(DIM, jnp.bfloat16)}
    cluster = Cluster(num_workers=4, stragglers=0)
    sync = run_sync(loss, params, data, cluster, aggregator="mean", rounds=4, record_every=4,
                    key=key)  # fmt: skip
    sgd = run_async(loss, params, data, cluster, protocol="sgd", events=8, record_every=4,
                    key=key)  # fmt: skip
    # worker momenta (float32) made the carried centre float32, and the gaussian attack's
    # float32 noise met bfloat16 gradients in lax.cond: both failed to trace
    momentum = run_sync(loss, params, data, cluster, aggregator="centered_clipping", rounds=4,
                        record_every=4, key=key, worker_momentum=0.9)  # fmt: skip
    attacked = run_async(loss, params, data, Cluster(num_workers=4, num_byzantine=1,
                         stragglers=0), protocol="sgd", attack="gaussian", events=8,
                         record_every=4, key=key)  # fmt: skip
    for trace in (sync, sgd, momentum, attacked):
        assert trace.params.dtype == jnp.bfloat16
        assert bool(jnp.all(jnp.isfinite(trace.params.astype(jnp.float32))))
    # an infinite time made every clock inf and worker 0 send every message
    for field in ("mean_compute", "straggler_factor", "lognormal_sigma", "seconds_per_bit"):
        with pytest.raises(ValueError, match=f"{field} must be finite"):
            Cluster(num_workers=4, **{field: float("inf")}).checked()


def test_runs_under_x64_as_without_it(key):
    # under jax_enable_x64 the wave's event count summed to int64 against the int32 counter
    # and the delays were drawn in float64 against the float32 clock: every run failed to
    # trace. Now float32 parameters give the same trace, in the same dtypes, as without x64
    data, _ = _regression(6, m=32)
    cluster = Cluster(num_workers=6, num_byzantine=1, stragglers=1, batch_size=8)

    def runs():
        common = dict(events=40, record_every=20, key=key, num_directions=4, parallel_events=2)
        return [
            run_async(_loss, PARAMS, data, cluster, attack="alie", worker_momentum=0.5, **common),
            run_async(_loss, PARAMS, data, cluster, attack="gaussian", screen=1.5, **common),
            run_async(_loss, PARAMS, data, dataclasses.replace(cluster, delay="lognormal"),
                      protocol="sgd", attack="gaussian", worker_momentum=0.5, **common),
            run_sync(_loss, PARAMS, data, cluster, aggregator="centered_clipping", attack="alie",
                     rounds=20, record_every=10, key=key, worker_momentum=0.5),
            run_sync(_loss, PARAMS, data, cluster, aggregator="geometric_median",
                     attack="sign_flip", rounds=20, record_every=10, key=key),
        ]  # fmt: skip

    plain = runs()
    with jax.enable_x64(True):
        wide = runs()
    for a, b in zip(plain, wide, strict=True):
        assert b.params.dtype == jnp.float32 and b.time.dtype == jnp.float32
        for field in a._fields[:-1]:
            assert getattr(b, field).dtype == getattr(a, field).dtype, field
            np.testing.assert_array_equal(getattr(b, field), getattr(a, field), err_msg=field)

    # float64 parameters (and data) under x64: the parameters stay float64
    with jax.enable_x64(True):
        wide_data = tuple(np.asarray(v, np.float64) for v in data)
        params = {"w": jnp.zeros(DIM, jnp.float64)}
        common = dict(key=key, worker_momentum=0.5, attack="alie")
        for trace in (
            run_async(_loss, params, wide_data, cluster, events=20, record_every=20,
                      num_directions=4, **common),
            run_async(_loss, params, wide_data, cluster, protocol="sgd", events=20,
                      record_every=20, **common),
            run_sync(_loss, params, wide_data, cluster, aggregator="geometric_median",
                     rounds=10, record_every=10, **common),
        ):  # fmt: skip
            assert trace.params.dtype == jnp.float64 and trace.time.dtype == jnp.float32
            assert bool(jnp.all(jnp.isfinite(trace.params)))


@pytest.mark.parametrize(
    ("protocol", "setting", "message"),
    [
        ("far_sign", {"learning_rate": 100.0},
         r"learning_rate applies to the sgd protocol only, got learning_rate=100.0 with "
         r"protocol='far_sign' \(it takes alpha, beta\)"),
        ("far_sign", {"smoothing": 1e-2}, "smoothing applies to the far_sign_zo protocol only"),
        ("far_sign_zo", {"learning_rate": 0.1}, "learning_rate applies to the sgd protocol only"),
        ("sgd", {"alpha": 100.0},
         r"alpha applies to the far_sign and far_sign_zo protocols only, got alpha=100.0 with "
         r"protocol='sgd' \(it takes learning_rate\)"),
        ("sgd", {"beta": lambda t: 0.01}, "beta applies to the far_sign and far_sign_zo"),
        ("sgd", {"smoothing": 5.0}, "smoothing applies to the far_sign_zo protocol only"),
    ],
)  # fmt: skip
def test_settings_the_protocol_does_not_use_are_refused(key, protocol, setting, message):
    # they were silently ignored: learning_rate=100 under FAR-SIGN ran its defaults
    data, _ = _regression(4)
    cluster = Cluster(num_workers=4, stragglers=0)
    with pytest.raises(ValueError, match=message):
        run_async(
            _loss, PARAMS, data, cluster, protocol=protocol, events=10, record_every=10,
            key=key, num_directions=4, **setting,
        )  # fmt: skip


def test_protocol_settings_left_out_take_their_defaults(key):
    data, _ = _regression(4)
    cluster = Cluster(num_workers=4, stragglers=0)
    common = dict(events=20, record_every=20, key=key, num_directions=4)
    for protocol, defaults in (
        ("far_sign", {"alpha": 0.05, "beta": 0.01}),
        ("far_sign_zo", {"alpha": 0.05, "beta": 0.01, "smoothing": 1e-3}),
        ("sgd", {"learning_rate": 0.05}),
    ):
        left_out = run_async(_loss, PARAMS, data, cluster, protocol=protocol, **common)
        given = run_async(_loss, PARAMS, data, cluster, protocol=protocol, **defaults, **common)
        np.testing.assert_array_equal(left_out.params, given.params)
