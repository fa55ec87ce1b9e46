"""Suite ``zo``: zeroth-order estimators on an MLP on digits (and a CNN on Fashion-MNIST).

Measured in one run, each method next to its anchor:

1. cosine with the true minibatch gradient vs forward passes: SPSA and Gaussian smoothing
   against SZO-kappa (kappa in {4, 8, 16}, with and without orthogonalisation), q in
   {1, 4, 16} probes, at a point reached by 50 SGD steps;
2. training loss vs forward passes, SPSA against SZO (constant-step SGD over one shared
   step-size grid; SZO is charged its activation pass every step, and the target run uses
   forward differences based at that pass's loss, so it costs 2 passes per step like SPSA);
3. CV-ZOD relative MSE vs hint quality alpha in {0, 0.6, 0.9, 0.99} against the plain
   Gaussian estimator at equal queries (k + q);
4. per-update time and XLA memory of each estimator at q = 16;
5. when Fashion-MNIST is on the machine, the cosine comparison on a small CNN.

Targets: SZO cosine >= 5x SPSA's at q = 1 and q = 16; SZO reaches SPSA's final
training loss in at most 1/3 of the forward passes; CV-ZOD (adaptive) MSE <= 0.25x plain
ZO at alpha = 0.9 and <= 1.1x at alpha = 0.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from benchmarks.harness import (
    Progress,
    SuiteResult,
    SummaryRow,
    Target,
    time_interleaved,
)
from jaxopt_suite import datasets
from jaxopt_suite.zeroth_order import (
    cv_zod_estimate,
    flax_forward_with_activations,
    gaussian_smoothing_estimate,
    scale_by_cv_zod,
    scale_by_spsa,
    scale_by_szo,
    spsa_estimate,
    szo_estimate,
)

SIGMA = 1e-3
BATCH = 32
# Two covariance corrections, declared before measuring (see jaxopt_suite.zeroth_order.szo):
# the aligned one (+1/2, the minimum-MSE guess) is the one the cosine targets use; the
# whitened one (-1/2, the library default) is the one the training target uses.
SZO_ALIGNED = {"kappa": 4, "covariance_power": 0.5}
SZO_WHITENED = {"kappa": 8, "covariance_power": -0.5}
# Training charges forward passes, and SZO runs a forward pass for the activations anyway:
# with forward differences that pass's loss is the base point, so a probe costs one pass.
SZO_TRAIN = {**SZO_WHITENED, "antithetic": False}
ALIGNED_NAME = "SZO k=4 aligned"
WHITENED_NAME = "SZO k=8 whitened"
TRAIN_NAME = "SZO k=8 whitened fwd"
PROBES = (1, 4, 16)
KAPPAS = (4, 8, 16)
ALPHAS = (0.0, 0.6, 0.9, 0.99)
HINT_PROBES = 20  # CV-ZOD: k = 1 hint query + 20 random probes = 21 queries
DRAW_BATCH = 8  # estimates computed together when averaging over draws


class MLP(nn.Module):
    """64-256-256-10 tanh MLP."""

    @nn.compact
    def __call__(self, x):
        x = jnp.tanh(nn.Dense(256)(x))
        x = jnp.tanh(nn.Dense(256)(x))
        return nn.Dense(10)(x)


class CNN(nn.Module):
    """Two strided 3x3 convolutions and a dense read-out for 28x28 images."""

    @nn.compact
    def __call__(self, x):
        x = x.reshape(x.shape[0], 28, 28, 1)
        x = nn.relu(nn.Conv(8, (3, 3), strides=2, padding="SAME")(x))
        x = nn.relu(nn.Conv(16, (3, 3), strides=2, padding="SAME")(x))
        return nn.Dense(10)(x.reshape(x.shape[0], -1))


def _loss(model, params, x, y):
    logits = model.apply(params, x)
    return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, y))


def _flat(tree):
    return jnp.concatenate([jnp.ravel(leaf) for leaf in jax.tree.leaves(tree)])


def _map_draws(fn, keys):
    """``fn`` over a batch of keys, DRAW_BATCH at a time (memory stays bounded).

    The number of keys must be a multiple of DRAW_BATCH: with jaxlib 0.10.1 the remainder
    path of ``lax.map(batch_size=...)`` made the CPU runtime hang (every worker idle) on
    the whitened SZO estimator at q = 16, reproducibly, while whole batches never did.
    """
    if keys.shape[0] % DRAW_BATCH:
        raise ValueError(f"{keys.shape[0]=} must be a multiple of {DRAW_BATCH=}")
    return jax.lax.map(fn, keys, batch_size=DRAW_BATCH)


def _cosine(a, b):
    a, b = _flat(a), _flat(b)
    return a @ b / (jnp.linalg.norm(a) * jnp.linalg.norm(b))


def _pretrain(model, x, y, key, steps=50, lr=0.1):
    """50 first-order SGD steps, so gradients are measured away from the initialisation."""
    init_key, batch_key = jax.random.split(key)
    params = model.init(init_key, x[:1])

    def step(params, key):
        idx = jax.random.choice(key, x.shape[0], (BATCH,), replace=False)
        grads = jax.grad(functools.partial(_loss, model))(params, x[idx], y[idx])
        return jax.tree.map(lambda p, g: p - lr * g, params, grads), None

    params, _ = jax.lax.scan(step, params, jax.random.split(batch_key, steps))
    return params


def _probe_configs():
    configs = [("SPSA", {}), ("Gaussian", {})]
    for kappa in KAPPAS:
        for orthogonalize in (True, False):
            name = f"SZO k={kappa}" + ("" if orthogonalize else " (no orth)")
            options = {"kappa": kappa, "orthogonalize": orthogonalize, "covariance_power": 0.0}
            configs.append((name, options))
    configs.append((ALIGNED_NAME, SZO_ALIGNED))
    configs.append(("SZO k=8 aligned", {"kappa": 8, "covariance_power": 0.5}))
    configs.append((WHITENED_NAME, SZO_WHITENED))
    return configs


def _estimator(name, options, value_fn, params, acts, q):
    if name == "SPSA":
        return lambda key: spsa_estimate(value_fn, params, key, num_directions=q, sigma=SIGMA)
    if name == "Gaussian":
        return lambda key: gaussian_smoothing_estimate(
            value_fn, params, key, num_directions=q, sigma=SIGMA
        )
    return lambda key: szo_estimate(
        value_fn,
        params,
        key,
        activations=acts,
        num_directions=q,
        sigma=SIGMA,
        layout="in_out",
        **options,
    )


def _cosines(model, params, xb, yb, draws, key, probes, configs, advance):
    """Mean cosine (and its standard error) of each estimator with the true gradient."""
    value_fn = lambda p: _loss(model, p, xb, yb)  # noqa: E731
    true_grad = jax.grad(value_fn)(params)
    _, acts = flax_forward_with_activations(model, params, xb)
    out = {}
    for name, options in configs:
        out[name] = {}
        for q in probes:
            estimate = _estimator(name, options, value_fn, params, acts, q)

            @jax.jit
            def draw_cosines(keys, estimate=estimate):
                return _map_draws(lambda k: _cosine(estimate(k).grad, true_grad), keys)

            cos = np.asarray(draw_cosines(jax.random.split(jax.random.fold_in(key, q), draws)))
            passes = 2 * q + (1 if name.startswith("SZO") else 0)
            out[name][str(q)] = {
                "cosine": float(cos.mean()),
                "stderr": float(cos.std(ddof=1) / math.sqrt(draws)),
                "forward_passes": passes,
            }
            advance()
    return out


def _train(model, x, y, szo_options, lrs, steps, eval_every, key):
    """SGD on a ZO transform (SPSA if ``szo_options`` is None, else SZO), vmapped over
    step sizes; the full-train loss at every evaluation point."""
    init_key, run_key = jax.random.split(key)
    params0 = model.init(init_key, x[:1])
    loss = functools.partial(_loss, model)

    def one(lr):
        if szo_options is None:
            transform = scale_by_spsa(run_key, num_directions=1, sigma=SIGMA)
        else:
            transform = scale_by_szo(
                run_key, num_directions=1, sigma=SIGMA, layout="in_out", **szo_options
            )
        opt = optax.chain(transform, optax.sgd(lr))

        def step(carry, key):
            params, state = carry
            idx = jax.random.choice(key, x.shape[0], (BATCH,), replace=False)
            xb, yb = x[idx], y[idx]
            extra = {}
            if szo_options is not None:
                # The activation pass: its loss is the base point of forward differences.
                logits, extra["activations"] = flax_forward_with_activations(model, params, xb)
                extra["value"] = jnp.mean(
                    optax.softmax_cross_entropy_with_integer_labels(logits, yb)
                )
            updates, state = opt.update(
                params, state, params, value_fn=lambda p: loss(p, xb, yb), **extra
            )
            return (optax.apply_updates(params, updates), state), None

        def segment(carry, keys):
            carry, _ = jax.lax.scan(step, carry, keys)
            return carry, loss(carry[0], x, y)

        keys = jax.random.split(jax.random.fold_in(run_key, 1), steps).reshape(
            steps // eval_every, eval_every
        )
        carry = (params0, opt.init(params0))
        _, curve = jax.lax.scan(segment, carry, keys)
        return jnp.concatenate([loss(params0, x, y)[None], curve])

    return np.asarray(jax.jit(jax.vmap(one))(lrs))


def _best(curves):
    final = np.where(np.isfinite(curves[:, -1]), curves[:, -1], np.inf)
    return int(np.argmin(final))


def _hint(true_flat, alpha, key):
    noise = jax.random.normal(key, true_flat.shape)
    unit = true_flat / jnp.linalg.norm(true_flat)
    noise = noise - (noise @ unit) * unit
    direction = alpha * unit + math.sqrt(1 - alpha**2) * noise / jnp.linalg.norm(noise)
    return 3.0 * direction  # deliberately mis-scaled: the coefficient is estimated


def _cv_zod(model, params, xb, yb, draws, chains, chain_steps, key, advance):
    value_fn = lambda p: _loss(model, p, xb, yb)  # noqa: E731
    true_grad = jax.grad(value_fn)(params)
    true_flat = _flat(true_grad)
    unravel = jax.flatten_util.ravel_pytree(params)[1]
    energy = float(true_flat @ true_flat)
    dim = true_flat.size
    out = {}

    def relative_mse(grads):
        return jnp.sum((_flat(grads) - true_flat) ** 2) / energy

    for alpha in ALPHAS:
        hint = unravel(_hint(true_flat, alpha, jax.random.fold_in(key, int(alpha * 100))))
        keys = jax.random.split(jax.random.fold_in(key, 7), draws)

        def plain_estimate(k):
            return gaussian_smoothing_estimate(
                value_fn, params, k, num_directions=HINT_PROBES + 1, sigma=SIGMA
            ).grad

        def cv(k, hint=hint, **kwargs):
            return cv_zod_estimate(
                value_fn, params, hint, k, num_directions=HINT_PROBES, sigma=SIGMA, **kwargs
            ).grad

        plain = jax.jit(lambda ks: _map_draws(lambda k: relative_mse(plain_estimate(k)), ks))(keys)
        query = jax.jit(lambda ks, cv=cv: _map_draws(lambda k: relative_mse(cv(k)), ks))(keys)
        oracle = jax.jit(
            lambda ks, cv=cv: _map_draws(lambda k: relative_mse(cv(k, true_grad=true_grad)), ks)
        )(keys)

        def chain(k, hint=hint):
            transform = scale_by_cv_zod(k, num_directions=HINT_PROBES, sigma=SIGMA)

            def body(state, _):
                grads, state = transform.update(params, state, params, value_fn=value_fn, hint=hint)
                raw = jax.tree.map(lambda g: g / state.step_scale, grads)
                return state, relative_mse(raw)

            _, mses = jax.lax.scan(body, transform.init(params), None, chain_steps)
            return mses[chain_steps // 4 :]  # after the hint-quality estimate settles

        adaptive = jax.jit(lambda ks: jax.lax.map(chain, ks))(
            jax.random.split(jax.random.fold_in(key, 11), chains)
        )
        entry = {}
        for label, values in (
            ("plain", plain),
            ("query", query),
            ("oracle", oracle),
            ("adaptive", adaptive),
        ):
            values = np.asarray(values).ravel()
            entry[label] = {
                "relative_mse": float(values.mean()),
                "stderr": float(values.std(ddof=1) / math.sqrt(values.size)),
            }
        entry["theory_best_coefficient"] = (dim + 1) * (1 - alpha**2) / HINT_PROBES
        entry["theory_plain"] = (dim + 1) / (HINT_PROBES + 1)
        out[str(alpha)] = entry
        advance()
    return out


def _timings(model, params, xb, yb, key, repeats):
    """Per-estimate time and XLA memory at q = 16 (SZO includes its activation pass)."""
    value_fn = lambda p: _loss(model, p, xb, yb)  # noqa: E731
    hint = jax.grad(value_fn)(params)
    q = 16
    estimators = {
        "SPSA": lambda p, k: spsa_estimate(value_fn, p, k, num_directions=q).grad,
        "Gaussian": lambda p, k: gaussian_smoothing_estimate(value_fn, p, k, num_directions=q).grad,
        "SZO": lambda p, k: (
            szo_estimate(
                value_fn,
                p,
                k,
                activations=flax_forward_with_activations(model, p, xb)[1],
                num_directions=q,
                layout="in_out",
            ).grad
        ),
        "CV-ZOD": lambda p, k: cv_zod_estimate(value_fn, p, hint, k, num_directions=q - 1).grad,
        "backprop": lambda p, k: jax.grad(value_fn)(p),
    }
    out = {}
    for name, timing in time_interleaved(estimators, params, key, repeats=repeats).items():
        out[name] = {
            "compile_s": timing.compile_s,
            "median_s": timing.median_s,
            "iqr_s": timing.iqr_s,
            "memory_bytes": timing.memory_bytes,
        }
    return out


def _plot(results, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(12, 9))
    ax = axes[0, 0]
    colors = plt.get_cmap("tab20").colors
    for index, (name, per_q) in enumerate(results["cosine_mlp"].items()):
        passes = [v["forward_passes"] for v in per_q.values()]
        cos = [v["cosine"] for v in per_q.values()]
        style = "--" if name in ("SPSA", "Gaussian") else "-"
        ax.plot(passes, cos, style, marker="o", label=name, color=colors[index % len(colors)])
    ax.set(xscale="log", yscale="log", xlabel="forward passes per estimate", ylabel="cosine")
    ax.minorticks_off()
    ax.set_xticks([2, 4, 8, 16, 32], ["2", "4", "8", "16", "32"])
    ax.set_title("MLP on digits: cosine with the true gradient")
    ax.legend(fontsize=7)
    ax = axes[0, 1]
    for name, run in results["training"]["runs"].items():
        if name == "SPSA" or run["fastest_lr"] is None:
            curve, lr = run["curve"], run["best_lr"]
        else:
            curve, lr = run["fastest_curve"], run["fastest_lr"]
        passes = np.arange(len(curve)) * run["passes_per_eval"]
        ax.plot(passes, curve, label=f"{name} (lr={lr:.0e})")
    ax.axhline(results["training"]["spsa_final_loss"], color="gray", lw=0.8, ls=":")
    ax.set(xlabel="forward passes", ylabel="training loss", yscale="log")
    ax.set_title("training loss vs forward passes")
    ax.legend()
    ax = axes[1, 0]
    alphas = [float(a) for a in results["cv_zod"]]
    for label in ("plain", "query", "adaptive", "oracle"):
        ax.plot(
            alphas,
            [v[label]["relative_mse"] for v in results["cv_zod"].values()],
            marker="o",
            label=label,
        )
    ax.plot(
        alphas,
        [v["theory_best_coefficient"] for v in results["cv_zod"].values()],
        "k:",
        label="(d+1)(1-a^2)/q",
    )
    ax.set(xlabel="hint quality alpha", ylabel="||g_hat - g||^2 / ||g||^2", yscale="log")
    ax.set_title(f"CV-ZOD at equal queries (k + q = {HINT_PROBES + 1})")
    ax.legend()
    ax = axes[1, 1]
    if "cosine_cnn" in results:
        for name, per_q in results["cosine_cnn"].items():
            passes = [v["forward_passes"] for v in per_q.values()]
            ax.plot(passes, [v["cosine"] for v in per_q.values()], marker="o", label=name)
        ax.set(xscale="log", yscale="log", xlabel="forward passes", ylabel="cosine")
        ax.minorticks_off()
        ax.set_xticks([2, 4, 8, 16, 32], ["2", "4", "8", "16", "32"])
        ax.set_title("CNN on Fashion-MNIST: cosine with the true gradient")
        ax.legend(fontsize=7)
    else:
        names = list(results["timing"])
        ax.bar(names, [results["timing"][n]["median_s"] * 1e3 for n in names])
        ax.set(ylabel="ms per estimate (q = 16)")
        ax.set_title("time per estimate")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(*, quick: bool, out_dir: Path, progress: Progress) -> SuiteResult:
    key = jax.random.key(0)
    digits = datasets.load_digits()
    x, y = jnp.asarray(digits.x_train), jnp.asarray(digits.y_train)
    model = MLP()
    draws = 96 if quick else 400
    train_steps = 2000 if quick else 4000
    eval_every = 25
    lrs = jnp.asarray([1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1])
    cv_draws, chains, chain_steps = (64, 8, 40) if quick else (200, 16, 60)
    parameters = {
        "model": "MLP 64-256-256-10 tanh",
        "dataset": "sklearn digits (train split, 1347 x 64)",
        "batch": BATCH,
        "sigma": SIGMA,
        "pretrain_sgd_steps": 50,
        "probes": list(PROBES),
        "kappas": list(KAPPAS),
        "cosine_draws": draws,
        "szo_cosine_target_config": {ALIGNED_NAME: SZO_ALIGNED},
        "szo_training_target_config": {TRAIN_NAME: SZO_TRAIN},
        "train_steps": train_steps,
        "train_probes": 1,
        "train_protocol": (
            "SGD with a constant step size from the grid (the same grid for every method). "
            "The anchor is SPSA's lowest final full-train loss over the grid; SZO's figure is "
            "the fewest forward passes any grid step size needs to reach it (time to target), "
            "read off full-train evaluations every eval_every steps. Every method uses 1 "
            "probe per step. SPSA (central differences) is charged 2 forward passes per "
            "step; SZO 1 for the activation pass plus 2 with central differences or 1 "
            "with forward differences, whose base point is the activation pass's loss"
        ),
        "eval_every": eval_every,
        "learning_rates": [float(v) for v in lrs],
        "cv_zod": {
            "alphas": list(ALPHAS),
            "hint_queries": 1,
            "random_probes": HINT_PROBES,
            "draws": cv_draws,
            "adaptive_chains": chains,
            "adaptive_chain_steps": chain_steps,
            "hint_scale": 3.0,
        },
    }
    results: dict = {}
    params = _pretrain(model, x, y, key)
    xb, yb = x[:BATCH], y[:BATCH]
    configs = _probe_configs()
    with progress.stage("zo: cosine (MLP)", len(configs) * len(PROBES)) as advance:
        results["cosine_mlp"] = _cosines(
            model, params, xb, yb, draws, jax.random.key(1), PROBES, configs, advance
        )
    training_methods = {
        "SPSA": None,
        TRAIN_NAME: SZO_TRAIN,
        WHITENED_NAME: SZO_WHITENED,
        "SZO k=4": {"kappa": 4, "covariance_power": 0.0},
    }
    with progress.stage("zo: training", len(training_methods)) as advance:
        curves = {}
        for method, options in training_methods.items():
            curves[method] = _train(
                model, x, y, options, lrs, train_steps, eval_every, jax.random.key(2)
            )
            advance()
    # The anchor: SPSA's lowest final loss over the step-size grid.
    spsa_best = _best(curves["SPSA"])
    spsa_final = float(curves["SPSA"][spsa_best, -1])
    spsa_passes = 2 * train_steps
    runs = {}
    for method, options in training_methods.items():
        if options is None:
            per_step = 2
        else:
            per_step = 1 + (2 if options.get("antithetic", True) else 1)
        per_eval = per_step * eval_every
        best = _best(curves[method])
        # Time to target: each step size's first evaluation at or below the anchor's loss.
        reached = [np.flatnonzero(curve <= spsa_final) for curve in curves[method]]
        passes = [float(r[0] * per_eval) if r.size else math.inf for r in reached]
        # Step sizes that never reach the target leave the fastest one undefined.
        fastest = int(np.argmin(passes)) if math.isfinite(min(passes)) else None
        runs[method] = {
            "best_lr": float(lrs[best]),
            "final_loss_per_lr": [float(v) for v in curves[method][:, -1]],
            "curve": [float(v) for v in curves[method][best]],
            "passes_to_spsa_final_per_lr": passes,
            "fastest_lr": None if fastest is None else float(lrs[fastest]),
            "fastest_curve": [
                float(v) for v in curves[method][best if fastest is None else fastest]
            ],
            "passes_per_eval": per_eval,
        }
    szo_passes = min(runs[TRAIN_NAME]["passes_to_spsa_final_per_lr"])
    results["training"] = {
        "runs": runs,
        "spsa_final_loss": spsa_final,
        "spsa_passes": spsa_passes,
        "szo_passes_to_spsa_final": szo_passes,
    }
    with progress.stage("zo: CV-ZOD", len(ALPHAS)) as advance:
        results["cv_zod"] = _cv_zod(
            model, params, xb, yb, cv_draws, chains, chain_steps, jax.random.key(3), advance
        )
    with progress.stage("zo: timing", 1) as advance:
        results["timing"] = _timings(model, params, xb, yb, jax.random.key(4), 5 if quick else 15)
        advance()
    notes = []
    try:
        fashion = datasets.load_fashion_mnist()
    except datasets.DatasetNotFoundError as err:
        notes.append(f"CNN on Fashion-MNIST skipped: {err}")
        fashion = None
    if fashion is not None:
        cnn = CNN()
        fx = jnp.asarray(fashion.x_train[:5000].reshape(5000, -1))
        fy = jnp.asarray(fashion.y_train[:5000])
        cnn_params = _pretrain(cnn, fx, fy, jax.random.key(5))
        cnn_configs = [
            ("SPSA", {}),
            ("SZO k=4", {"kappa": 4, "covariance_power": 0.0}),
            (ALIGNED_NAME, SZO_ALIGNED),
            (WHITENED_NAME, SZO_WHITENED),
        ]
        with progress.stage("zo: cosine (CNN)", 2 * len(cnn_configs)) as advance:
            results["cosine_cnn"] = _cosines(
                cnn,
                cnn_params,
                fx[:BATCH],
                fy[:BATCH],
                draws,
                jax.random.key(6),
                (1, 16),
                cnn_configs,
                advance,
            )
        parameters["cnn"] = "conv8 s2 - conv16 s2 - dense10 on Fashion-MNIST (5000 train images)"
    cos = results["cosine_mlp"]
    summary = [
        SummaryRow(
            name,
            f"cosine q={q}",
            cos[name][str(q)]["cosine"],
            "SPSA",
            cos["SPSA"][str(q)]["cosine"],
        )
        for name in (ALIGNED_NAME, WHITENED_NAME, "SZO k=4")
        for q in PROBES
    ]
    summary.append(
        SummaryRow(
            TRAIN_NAME, "passes to SPSA's final loss", szo_passes, "SPSA", float(spsa_passes)
        )
    )
    cvz = results["cv_zod"]
    for alpha in ALPHAS:
        summary.append(
            SummaryRow(
                "CV-ZOD adaptive",
                f"rel. MSE alpha={alpha}",
                cvz[str(alpha)]["adaptive"]["relative_mse"],
                "plain ZO",
                cvz[str(alpha)]["plain"]["relative_mse"],
            )
        )
    timing = results["timing"]
    for name in ("SZO", "CV-ZOD"):
        summary.append(
            SummaryRow(
                name,
                "s per estimate q=16",
                timing[name]["median_s"],
                "SPSA",
                timing["SPSA"]["median_s"],
            )
        )
        summary.append(
            SummaryRow(
                name,
                "XLA bytes q=16",
                float(timing[name]["memory_bytes"] or 0),
                "SPSA",
                float(timing["SPSA"]["memory_bytes"] or 0),
            )
        )
    if "cosine_cnn" in results:
        cnn = results["cosine_cnn"]
        for name in cnn:
            if name != "SPSA":
                summary.extend(
                    SummaryRow(
                        f"{name} (CNN)",
                        f"cosine q={q}",
                        cnn[name][str(q)]["cosine"],
                        "SPSA (CNN)",
                        cnn["SPSA"][str(q)]["cosine"],
                    )
                    for q in (1, 16)
                )

    def ratio(method, q):
        return cos[method][str(q)]["cosine"] / cos["SPSA"][str(q)]["cosine"]

    targets = [
        Target.evaluate(
            f"{ALIGNED_NAME} cosine / SPSA cosine, q=1", ratio(ALIGNED_NAME, 1), 5.0, ">="
        ),
        Target.evaluate(
            f"{ALIGNED_NAME} cosine / SPSA cosine, q=16", ratio(ALIGNED_NAME, 16), 5.0, ">="
        ),
        Target.evaluate(
            f"{TRAIN_NAME} forward passes to SPSA's final training loss / SPSA's passes",
            szo_passes / spsa_passes,
            1 / 3,
            "<=",
        ),
        Target.evaluate(
            "CV-ZOD (adaptive) MSE / plain ZO MSE at equal queries, alpha=0.9",
            cvz["0.9"]["adaptive"]["relative_mse"] / cvz["0.9"]["plain"]["relative_mse"],
            0.25,
            "<=",
        ),
        Target.evaluate(
            "CV-ZOD (adaptive) MSE / plain ZO MSE at equal queries, alpha=0",
            cvz["0.0"]["adaptive"]["relative_mse"] / cvz["0.0"]["plain"]["relative_mse"],
            1.1,
            "<=",
        ),
    ]
    plot = out_dir / "zo.png"
    out_dir.mkdir(parents=True, exist_ok=True)
    _plot(results, plot)
    return SuiteResult("zo", quick, parameters, results, summary, targets, plot, notes)
