"""What every safe-RL algorithm here shares around its iteration: the training scan, a
progress bar, orbax checkpoints with resume, and evaluation with the deterministic or the
sampled policy.

An algorithm is a :class:`Trainer`: ``init(key) -> carry`` and ``step(carry, key) ->
(carry, metrics)``, pure and jit-able. :func:`train_function` makes the one-scan
``train(key) -> TrainResult`` (``jit`` and ``vmap`` over seeds); :func:`train_with_checkpoints`
runs the same iterations in chunks, saving the carry after each and resuming from the
latest checkpoint in its directory.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxopt_suite._checks import check_flag, check_integer, check_key, check_widths
from jaxopt_suite.rl import ascpo
from jaxopt_suite.rl.networks import GaussianPolicy, ValueNetwork
from jaxopt_suite.rl.normalization import RunningStats, init_stats, update_stats
from jaxopt_suite.rl.rollout import (
    EpisodeStats,
    Prepared,
    Transition,
    episode_stats,
    latest_stats,
    prepare,
    rollout,
)


class Params(NamedTuple):
    policy: Any
    reward_critic: Any
    cost_critic: Any
    obs_stats: RunningStats


class TrainResult(NamedTuple):
    """The final parameters and, per iteration, the metrics (arrays ``[iterations]``)."""

    params: Params
    metrics: dict[str, jax.Array]


class Trainer(NamedTuple):
    """An algorithm's iteration (see the module docstring); ``params(carry)`` reads the
    parameters out of a carry. ``settings`` names the settings besides ``iterations`` and the
    sizes that fix the shapes of the carry and the metrics (e.g. ``num_envs``, ``hidden``), as
    ``(name, value)`` pairs of hashable JSON values (tuples for lists):
    :func:`train_with_checkpoints` records them, and refuses a checkpoint written with others
    by name rather than failing inside orbax."""

    init: Callable[[jax.Array], Any]
    step: Callable[[Any, jax.Array], tuple[Any, dict]]
    params: Callable[[Any], Params]
    iterations: int
    observation_size: int
    action_size: int
    settings: tuple[tuple[str, Any], ...] = ()


class Networks(NamedTuple):
    """What every algorithm here builds from its config and env (:func:`networks`)."""

    train_env: Any  # the env wrapped for training: episode limit, auto-reset
    policy: GaussianPolicy
    reward_critic: ValueNetwork
    cost_critic: ValueNetwork  # nonnegative, as the costs are


def networks(config, env) -> Networks:
    """``env`` checked (:func:`check_env`) and wrapped for training at
    ``config.episode_length``, and the Gaussian policy and the two critics at
    ``config.hidden``."""
    from envs import wrap_for_training

    check_env(env)
    return Networks(
        wrap_for_training(env, episode_length=config.episode_length),
        GaussianPolicy(env.action_size, config.hidden),
        ValueNetwork(config.hidden),
        ValueNetwork(config.hidden, nonnegative=True),
    )


def init_params(keys, modules: Networks, obs_size: int) -> Params:
    """Fresh networks (``keys``: the policy's, the reward critic's, the cost critic's) and
    empty observation statistics."""
    k_policy, k_reward, k_cost = keys
    dummy = jnp.zeros((1, obs_size))
    return Params(
        modules.policy.init(k_policy, dummy),
        modules.reward_critic.init(k_reward, dummy),
        modules.cost_critic.init(k_cost, dummy),
        init_stats(obs_size),
    )


def no_episodes() -> EpisodeStats:
    """The statistics before any episode has ended (all zero)."""
    zero = jnp.zeros(())
    return EpisodeStats(*([zero] * len(EpisodeStats._fields)))


class Collected(NamedTuple):
    """One iteration's data: the environments after the rollout, the rollout, the
    statistics of the episodes it ended and of the latest batch that ended any, and the
    batch prepared for the losses."""

    env_state: Any
    batch: Transition
    stats: EpisodeStats
    last: EpisodeStats
    data: Prepared


def collect(
    modules: Networks, params: Params, env_state, last: EpisodeStats, key, config, *,
    on_max_mdp: bool, cost_discount: float,
) -> Collected:  # fmt: skip
    """The rollout and advantage estimation every algorithm here starts its iteration
    with (``config`` supplies the limit, unroll length, discounts and GAE lambdas)."""
    env_state, batch = rollout(
        modules.train_env, modules.policy.apply, params.policy, params.obs_stats, env_state, key,
        config.unroll_length,
    )  # fmt: skip
    stats = episode_stats(batch, config.cost_limit)
    data = prepare(
        batch, env_state.obs, params.obs_stats,
        lambda o: modules.reward_critic.apply(params.reward_critic, o),
        lambda o: modules.cost_critic.apply(params.cost_critic, o),
        on_max_mdp=on_max_mdp, discount=config.discount, gae_lambda=config.gae_lambda,
        cost_discount=cost_discount, cost_gae_lambda=config.cost_gae_lambda,
    )  # fmt: skip
    return Collected(env_state, batch, stats, latest_stats(stats, last), data)


def constraint_value(kind: str, last: EpisodeStats, limit, k) -> jax.Array:
    """How far the constraint is exceeded (positive: violated): ``"cost"``, the mean
    episode cost; ``"max_cost"``, the mean episode max cost; ``"bound"``, ASCPO's absolute
    bound (:func:`.ascpo.constraint_value`); each minus ``limit``."""
    if kind == "cost":
        return last.episode_cost - limit
    if kind == "max_cost":
        return last.episode_max_cost - limit
    return ascpo.constraint_value(last.episode_max_cost, jnp.sqrt(last.max_cost_variance), limit, k)


def next_obs_stats(params: Params, batch: Transition, enabled: bool) -> RunningStats:
    """The observation statistics with the rollout's observations added, when enabled."""
    return update_stats(params.obs_stats, batch.obs) if enabled else params.obs_stats


def iteration_metrics(stats: EpisodeStats, last: EpisodeStats, constraint) -> dict:
    """The metrics every algorithm reports per iteration."""
    return {
        "episodes": stats.count,
        "episode_return": last.episode_return,
        "episode_cost": last.episode_cost,
        "episode_max_cost": last.episode_max_cost,
        "cost_rate": last.cost_rate,
        "violation": last.violation,
        "constraint": constraint,
    }


def check_env(env) -> None:
    """The algorithms need the per-step cost and the max-cost increment in ``state.info``:
    an environment from :func:`envs.make` (with ``max_cost=True``, the default), whose
    :class:`envs.MaxCostWrapper` sits outside every cost wrapper (a cost wrapper outside it
    replaces ``info['cost']`` after the increments were taken from the inner cost, so the
    episode's summed cost and its maximum would measure different costs)."""
    from envs import CostWrapper, MaxCostWrapper, wrapper_chain

    layers = wrapper_chain(env)
    names = [type(x).__name__ for x in layers]
    for needed in (CostWrapper, MaxCostWrapper):
        if not any(isinstance(x, needed) for x in layers):
            raise ValueError(
                f"env must carry a {needed.__name__} (build it with envs.make(name), "
                f"max_cost=True); its wrappers are {names}"
            )
    outer_max = min(i for i, x in enumerate(layers) if isinstance(x, MaxCostWrapper))
    outside = [names[i] for i, x in enumerate(layers[:outer_max]) if isinstance(x, CostWrapper)]
    if outside:
        raise ValueError(
            f"env's cost wrapper {outside[0]} sits outside its MaxCostWrapper (wrappers "
            f"{names}): the maximum would track another cost than info['cost']; wrap the "
            "cost wrappers first and MaxCostWrapper last (envs.make(name, max_cost=False), "
            "then the cost wrapper, then envs.MaxCostWrapper)"
        )


def env_description(env) -> str:
    """``env``'s wrapper chain by class, outermost first (recorded with checkpoints)."""
    from envs import wrapper_chain

    return " > ".join(type(x).__name__ for x in wrapper_chain(env))


def config_settings(config, env) -> tuple[tuple[str, Any], ...]:
    """:attr:`Trainer.settings` of a trainer built from the dataclass ``config`` (checked,
    so its numbers are Python ones) for ``env``: every field of the config and the env's
    wrapper chain, so a checkpoint of another algorithm, variant, limit or env is refused by
    name (their carries have the same shapes)."""
    import dataclasses

    fields = tuple((f.name, getattr(config, f.name)) for f in dataclasses.fields(config))
    return (*fields, ("env", env_description(env)))


def _scan(trainer: Trainer, carry, keys, first: int | jax.Array, progress):
    def body(carry, inputs):
        i, key = inputs
        carry, metrics = trainer.step(carry, key)
        if progress is not None:
            jax.debug.callback(progress, i, metrics)
        return carry, metrics

    iterations = first + jnp.arange(keys.shape[0])
    return jax.lax.scan(body, carry, (iterations, keys))


# A chunk of iterations for train_with_checkpoints, compiled once per trainer and progress
# callback (and chunk length): calls that share a trainer, e.g. one per seed or a resume in
# the same process, reuse it.
_chunk = jax.jit(_scan, static_argnums=(0, 4))


def train_function(
    trainer: Trainer, progress: Callable[[Any, dict], None] | None = None
) -> Callable[[jax.Array], TrainResult]:
    """``train(key)``: ``trainer.iterations`` iterations in one ``lax.scan``.
    ``progress(iteration, metrics)`` runs on the host after each (``jax.debug.callback``;
    under ``vmap`` it is called once per seed, with that seed's values)."""

    def train(key: jax.Array) -> TrainResult:
        check_key(key)  # an int key failed inside jax.random
        k_init, k_loop = jax.random.split(key)
        carry = trainer.init(k_init)
        carry, metrics = _scan(
            trainer, carry, jax.random.split(k_loop, trainer.iterations), 0, progress
        )
        return TrainResult(trainer.params(carry), metrics)

    return train


class ProgressBar:
    """A rich progress bar for ``progress=``, showing the latest iteration's return and max
    cost, averaged over the seeds under ``vmap`` (which calls it once per seed)::

    with ProgressBar(config.iterations) as bar:
        result = jax.jit(make_train(config, env, progress=bar))(key)
    """

    def __init__(self, total: int, description: str = "training"):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

        self._bar = Progress(
            "[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), "{task.fields[status]}",
        )  # fmt: skip
        self._task = self._bar.add_task(description, total=total, status="")
        self._iteration, self._seen = -1, []  # the latest iteration's (return, max cost)

    def __enter__(self) -> ProgressBar:
        self._bar.start()
        return self

    def __exit__(self, *exc) -> None:
        self._bar.stop()

    def __call__(self, iteration, metrics: dict) -> None:
        iteration = int(np.max(iteration))
        if iteration != self._iteration:
            self._iteration, self._seen = iteration, []
        self._seen.append(
            (np.mean(metrics["episode_return"]), np.mean(metrics["episode_max_cost"]))
        )
        ret, max_cost = (float(v) for v in np.mean(self._seen, axis=0))
        self._bar.update(
            self._task,
            completed=iteration + 1,
            status=f"EpRet {ret:.3g}  EpMaxCost {max_cost:.3g}",
        )


def _layout(tree) -> dict[str, list]:
    """``path -> [shape, dtype]`` of each leaf of ``tree`` (arrays or shape structs)."""
    return {
        jax.tree_util.keystr(path): [list(leaf.shape), str(leaf.dtype)]
        for path, leaf in jax.tree_util.tree_leaves_with_path(tree)
    }


def _key_words(key: jax.Array) -> list[int]:
    """The words of a typed or raw PRNG key, as JSON stores them."""
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.key_data(key)
    return np.asarray(key).ravel().tolist()


_RESUME_ADVICE = "resume with the same settings, or train in another directory"


def _check_same_run(saved: dict, current: dict, directory: Path) -> None:
    """Raises a ``ValueError`` when the checkpoint's metadata ``saved`` was written by a run
    from another key, or by a trainer whose :attr:`Trainer.settings` (and ``iterations``)
    differ from ``current``'s in a setting both name, naming each with both values."""
    if "key" in saved and saved["key"] != current["key"]:  # recorded since it was checked
        raise ValueError(
            f"the checkpoint in {directory} was written by a run from another key "
            f"({saved['key']} there, {current['key']} here): resuming would continue that "
            "run, not this one; resume with the same key, or train in another directory"
        )
    old, new = saved["settings"], current["settings"]
    # a setting one trainer names and the other does not is left to the layout check
    differing = [name for name in old if name in new and old[name] != new[name]]
    if differing:
        pairs = ", ".join(f"{name}={old[name]!r} there, {new[name]!r} here" for name in differing)
        raise ValueError(
            f"the checkpoint in {directory} was written by a trainer with other settings "
            f"({pairs}): resuming would continue that run, not this one; {_RESUME_ADVICE}"
        )


def _check_layout(saved: dict, layout: dict, directory: Path) -> None:
    """Raises a ``ValueError`` naming the leaves (up to three, with ``[shape, dtype]`` both
    sides) where the checkpoint's carry and metrics differ from ``layout``'s (a trainer that
    names no settings, or one whose settings do not fix every shape)."""
    old = saved["layout"]  # written together with the settings
    mismatches = [
        f"{part}{path}: {old[part].get(path)} there, {layout[part].get(path)} here"
        for part in layout
        for path in {**old[part], **layout[part]}
        if old[part].get(path) != layout[part].get(path)
    ]
    if mismatches:
        shown = "; ".join(mismatches[:3]) + (
            f"; and {len(mismatches) - 3} more" if len(mismatches) > 3 else ""
        )
        raise ValueError(
            f"the checkpoint in {directory} holds a carry and metrics of other shapes than "
            f"this trainer's ([shape, dtype] of {shown}); {_RESUME_ADVICE}"
        )


def train_with_checkpoints(
    trainer: Trainer,
    key: jax.Array,
    directory: str | Path,
    *,
    every: int,
    progress: Callable[[Any, dict], None] | None = None,
    max_to_keep: int = 2,
) -> TrainResult:
    """The iterations of ``train_function(trainer)(key)``, in jitted chunks of ``every``,
    with the carry and the metrics so far saved (orbax) after each chunk; when
    ``directory`` holds checkpoints, training resumes after the latest. The result equals
    an uninterrupted run's. A checkpoint written for other observation or action sizes, or
    by a trainer with another ``iterations`` or other :attr:`Trainer.settings` (every config
    field, the algorithm or variant among them, and the env's wrappers), or whose carry or
    metrics otherwise have other shapes, or from another ``key`` (it would continue that run
    under this one's name), is refused with a ``ValueError`` naming what differs, before
    anything is restored
    (continuing a finished run to more iterations is not supported: the iteration keys are
    split for the whole run). The chunk is compiled once per ``(trainer, progress)``, so
    both must be hashable; calls that share them (several seeds, a resume) compile once."""
    import orbax.checkpoint as ocp

    every = check_integer("every", every, 1)
    check_key(key)
    # 0 kept nothing: a restart retrained from scratch without a word
    check_integer("max_to_keep", max_to_keep, 1)
    try:  # the compiled chunk is cached by trainer and progress (``_chunk``)
        hash((trainer, progress))
    except TypeError as error:
        raise ValueError(
            f"trainer and progress must be hashable (a function, a bound method or an object "
            f"without __eq__ is): {error}"
        ) from None
    directory = Path(directory).absolute()
    shapes = {"observation_size": trainer.observation_size, "action_size": trainer.action_size}
    k_init, k_loop = jax.random.split(key)
    keys = jax.random.split(k_loop, trainer.iterations)
    try:  # as JSON reads it back (tuples become lists), to compare with a checkpoint's
        recorded = json.loads(
            json.dumps(
                {
                    "settings": {"iterations": trainer.iterations, **dict(trainer.settings)},
                    "key": _key_words(key),
                }
            )
        )
    except TypeError as error:
        raise ValueError(
            f"trainer.settings={trainer.settings!r} must hold JSON values: {error}"
        ) from None
    manager = ocp.CheckpointManager(
        directory, options=ocp.CheckpointManagerOptions(max_to_keep=max_to_keep)
    )
    try:  # the manager is closed however this ends: a refusal, a failed trace, a failed chunk
        latest = manager.latest_step()
        meta = None  # the checkpoint's metadata, when it is to be checked
        if latest is not None:  # sizes, key and settings first: refusing on them traces nothing
            meta = manager.restore(
                latest, args=ocp.args.Composite(meta=ocp.args.JsonRestore())
            ).meta
            saved = {name: meta[name] for name in shapes}
            if saved != shapes:
                raise ValueError(
                    f"the checkpoint in {directory} was written for {saved}, but this trainer has "
                    f"{shapes}: the observation or action sizes do not match"
                )
            # a checkpoint written before the settings were recorded is not checked (orbax
            # fails on a mismatch)
            if "settings" not in meta:
                meta = None
            else:
                _check_same_run(meta, recorded, directory)
        # the layouts from shapes alone (one trace of a step): a refused directory costs no env
        # reset or network init
        carry_shape = jax.eval_shape(trainer.init, k_init)
        metrics_shape = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct((trainer.iterations, *x.shape), x.dtype),
            jax.eval_shape(lambda c, k: trainer.step(c, k)[1], carry_shape, keys[0]),
        )
        # lists of ints and strings, as JSON reads them back
        recorded["layout"] = {"carry": _layout(carry_shape), "metrics": _layout(metrics_shape)}
        if meta is not None:
            _check_layout(meta, recorded["layout"], directory)
        carry = trainer.init(k_init)  # after the checks: the target of a restore, or the start
        metrics = jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), metrics_shape)
        done = 0
        if latest is not None:
            state = manager.restore(
                latest,
                args=ocp.args.Composite(
                    state=ocp.args.StandardRestore({"carry": carry, "metrics": metrics})
                ),
            ).state
            carry, metrics, done = state["carry"], state["metrics"], latest
        # restored arrays are committed to their device and fresh ones are not, which made the
        # chunk compile again for a resume: both committed to it, one compile
        devices = jax.tree.leaves(carry)[0].devices()
        if len(devices) == 1:
            carry = jax.device_put(carry, next(iter(devices)))
        while done < trainer.iterations:
            stop = min(done + every, trainer.iterations)
            carry, part = _chunk(trainer, carry, keys[done:stop], done, progress)
            metrics = jax.tree.map(
                lambda m, p, d=done: m.at[d : d + p.shape[0]].set(p), metrics, part
            )
            done = stop
            manager.save(
                done,
                args=ocp.args.Composite(
                    state=ocp.args.StandardSave({"carry": carry, "metrics": metrics}),
                    meta=ocp.args.JsonSave({**shapes, "iterations": done, **recorded}),
                ),
            )
    finally:  # the last save completes even when a later chunk fails
        manager.wait_until_finished()
        manager.close()
    return TrainResult(trainer.params(carry), metrics)


def _check_policy_params(env, params: Params, hidden: tuple[int, ...]) -> None:
    """``params`` must be one run's (not a vmapped run's stacked ones) for ``env``'s
    observation and a policy of ``hidden`` layers: a ValueError saying which differs."""
    mean = np.shape(params.obs_stats.mean)
    if len(mean) != 1:
        raise ValueError(
            f"params hold observation statistics of shape {mean}: stacked params of several "
            "seeds? index one seed (jax.tree.map(lambda a: a[i], params))"
        )
    if mean[0] != env.observation_size:
        raise ValueError(
            f"params are for observations of size {mean[0]}, env's are "
            f"{env.observation_size} (built with another env, or max_cost otherwise?)"
        )
    policy = GaussianPolicy(env.action_size, hidden)
    expected = jax.eval_shape(policy.init, jax.random.key(0), jnp.zeros((1, env.observation_size)))
    same = jax.tree.structure(expected) == jax.tree.structure(params.policy) and all(
        np.shape(a) == b.shape
        for a, b in zip(jax.tree.leaves(params.policy), jax.tree.leaves(expected), strict=True)
    )
    if not same:
        raise ValueError(
            f"params.policy is not a policy of hidden={hidden} for this env: pass the hidden "
            "widths it was trained with"
        )


def evaluate(
    env,
    params: Params,
    key: jax.Array,
    *,
    num_envs: int,
    episode_length: int,
    cost_limit: float,
    hidden: tuple[int, ...] = (64, 64),
    deterministic: bool = True,
) -> dict[str, jax.Array]:
    """Rollouts of the deterministic (mean) policy, or of the sampled one when
    ``deterministic`` is false: ``num_envs`` environments for ``episode_length`` steps; the
    statistics of the episodes that ended (every environment ends at least one: the time
    limit). An environment whose episodes end early (a goal, a fall) ends several in the
    window, so short episodes weigh more than in a sample of first episodes."""
    from envs import wrap_for_training

    # no rollouts would read as no violations
    num_envs = check_integer("num_envs", num_envs, 1)
    episode_length = check_integer("episode_length", episode_length, 1)
    check_key(key)
    check_flag("deterministic", deterministic)  # "False" would read as true
    check_env(env)
    hidden = check_widths("hidden", hidden)
    _check_policy_params(env, params, hidden)
    train_env = wrap_for_training(env, episode_length=episode_length)
    policy = GaussianPolicy(env.action_size, hidden)
    k_reset, k_roll = jax.random.split(key)
    state = train_env.reset(jax.random.split(k_reset, num_envs))
    _, batch = rollout(
        train_env, policy.apply, params.policy, params.obs_stats, state, k_roll, episode_length,
        deterministic=deterministic,
    )  # fmt: skip
    return episode_stats(batch, cost_limit)._asdict()
