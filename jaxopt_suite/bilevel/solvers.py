"""Single-loop stochastic bilevel solvers: SOBA, MA-SOBA, BROS, and the implicit reference.

Every solver is a :class:`Solver` with ``init(problem, x0, y0, key) -> BilevelState`` and a
jittable ``step(state, (inner_batch, outer_batch)) -> BilevelState``; :func:`run` drives
one as a ``lax.scan``. The upper-level update is an optax transformation (``outer``; a
float means ``optax.sgd(outer)``), fed with the hypergradient estimate (SOBA) or its moving
average (MA-SOBA, BROS), ``x``, and ``value=`` the outer loss at the current iterates on
the step's outer batch (``f(x, y)``; the implicit reference's ``f(x, y*(x))``), which the
step has computed anyway. Plain transformations and ones that read ``value`` (such as
``optax.contrib.reduce_on_plateau``) work; line searches (``optax.lbfgs``), which also need
``grad`` and ``value_fn``, are refused with an error naming ``outer``.

Variable names follow SOBA: ``v`` estimates ``-[nabla^2_yy g]^{-1} nabla_y f``, so the
hypergradient estimate is ``nabla_x f + nabla^2_xy g v``.

Statuses instead of crashes: a step that produces a non-finite ``x``, ``y``, ``v`` or
``h`` sets ``state.status`` (a bit per variable) and ``state.failed_step``; :func:`run`
stops advancing at the end of that segment and raises (or returns) with a message.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import numbers
import time
import warnings
from collections.abc import Callable
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.experimental import io_callback

from jaxopt_suite._checks import check_finite_positive, check_key, check_real, check_scalar
from jaxopt_suite.bilevel import subspace
from jaxopt_suite.bilevel.problem import (
    BilevelProblem,
    check_problem,
    cross_term,
    finite_sum,
    grad_and_hvp,
    joint_vjp,
)

OK = 0
_VARIABLE_BITS = {"x": 1, "y": 2, "v": 4, "h": 8}


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=[
        "x",
        "y",
        "v",
        "h",
        "outer_state",
        "key",
        "count",
        "status",
        "failed_step",
        "diagnostics",
    ],
    meta_fields=["problem"],
)
@dataclasses.dataclass
class BilevelState:
    """Solver state; ``problem`` is static metadata, everything else an array."""

    x: Any  # upper-level variable
    y: Any  # lower-level variable
    v: Any  # linear-system variable (estimate of -H^{-1} nabla_y f)
    h: Any  # moving average of the hypergradient (None without averaging)
    outer_state: Any  # optax state of the upper-level update
    key: jax.Array  # PRNG key for probes
    count: jax.Array  # int32 [], steps taken
    status: jax.Array  # int32 [], 0 = OK, else a bit per non-finite variable
    failed_step: jax.Array  # int32 [], first step that went non-finite, -1 if none
    diagnostics: dict  # scalars from the last step: outer_loss, hypergrad_norm

    problem: BilevelProblem


def explain(status: int, failed_step: int = -1) -> str:
    """A readable message for a solver status."""
    status = int(status)
    if status == OK:
        return "OK"
    names = [name for name, bit in _VARIABLE_BITS.items() if status & bit]
    return (
        f"non-finite {', '.join(names)} after step {int(failed_step)}: lower the step sizes "
        "(inner_lr / aux_lr / outer), bound v with aux_radius, or check the losses for NaN"
    )


@dataclasses.dataclass(frozen=True)
class Solver:
    """``init(problem, x0, y0, key) -> BilevelState``; ``step(state, batches) -> state``."""

    name: str
    init: Callable[..., BilevelState]
    step: Callable[[BilevelState, tuple[Any, Any]], BilevelState]


Schedule = float | Callable[[jax.Array], jax.Array]


def _schedule(name: str, value: Schedule) -> Callable[[jax.Array], jax.Array]:
    """A constant step size (a positive number, also a traced one under ``jit`` or
    ``vmap``, checked when concrete) or an optax schedule, as a schedule."""
    if callable(value):
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Real | np.ndarray | jax.Array):
        raise TypeError(f"{name} must be a positive float or an optax schedule, got {value!r}")
    if np.ndim(value) != 0:
        raise ValueError(f"{name} must be a scalar, got shape {np.shape(value)}")
    check_real(name, value, "be > 0", lambda v: v > 0.0)
    return lambda count: jnp.asarray(value)


def _outer(outer: Any) -> optax.GradientTransformationExtraArgs:
    """``outer`` as a transformation that takes extra keyword arguments (``value=``); a plain
    one ignores them."""
    if isinstance(outer, optax.GradientTransformation):
        return optax.with_extra_args_support(outer)
    if callable(outer) and not isinstance(outer, numbers.Real):
        return optax.with_extra_args_support(optax.sgd(outer))  # a schedule
    _schedule("outer", outer)
    # a traced step size (under jit or vmap) stays an array; a concrete one a float
    step = outer if isinstance(outer, jax.core.Tracer) else float(outer)
    return optax.with_extra_args_support(optax.sgd(step))


def _outer_update(outer_tx, direction, outer_state, x, value):
    """``outer_tx.update`` with ``value=`` the outer loss at ``x``; a transformation that
    needs more (a line search's ``grad`` and ``value_fn``) gets an error naming ``outer``."""
    try:
        return outer_tx.update(direction, outer_state, x, value=value)
    except TypeError as err:
        if "required keyword-only argument" not in str(err):
            raise
        raise TypeError(
            f"outer: the optax transformation needs arguments the solvers do not have ({err}); "
            "its update gets the direction, its state, x and value= (the outer loss at x on "
            "the step's batch) only, so line searches such as optax.lbfgs (grad=, value_fn=) "
            "cannot drive x: use a first-order transformation (optax.sgd, optax.adam, ...)"
        ) from err


def _check_scalar(name: str, value: Any, expected: str, ok: Callable[[float], bool]) -> None:
    """One real number passing ``ok`` (a traced one passes unchecked), else an error that
    names ``name`` (a string or an array reached the step and failed there)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real | np.ndarray | jax.Array):
        raise TypeError(f"{name} must be a number, got {value!r}")
    check_scalar(name, value, expected, ok)


def _finite_positive(v: float) -> bool:
    return 0.0 < v < math.inf


def _check_unit(name: str, value: Any) -> None:
    _check_scalar(name, value, "be in (0, 1]", lambda v: 0.0 < v <= 1.0)


def _tree_norm(tree: Any) -> jax.Array:
    """Euclidean norm over a pytree, leaf by leaf as dots (no leaf-sized temporaries)."""
    return jnp.sqrt(subspace.sq_norm(tree))


def _tree_sum(tree: Any) -> jax.Array:
    """The sum of every entry, accumulated in at least float32 (a float16 sum overflows
    past 65504)."""
    return sum(
        (
            jnp.sum(leaf, dtype=jnp.promote_types(jnp.result_type(leaf), jnp.float32))
            for leaf in jax.tree.leaves(tree)
        ),
        jnp.zeros([]),
    )


def _project_ball(v: Any, radius: float | None) -> Any:
    """``min(1, radius / ||v||) v`` (MA-SOBA's projection), identity without a radius."""
    if radius is None:
        return v
    norm = _tree_norm(v)
    scale = jnp.minimum(1.0, radius / jnp.maximum(norm, jnp.finfo(norm.dtype).tiny))
    return jax.tree.map(lambda leaf: leaf * scale.astype(leaf.dtype), v)


def _nonfinite_bits(**trees: Any) -> jax.Array:
    bits = jnp.zeros([], jnp.int32)
    for name, tree in trees.items():
        leaves = jax.tree.leaves(tree)
        if not leaves:
            continue
        finite = jnp.all(jnp.stack([finite_sum(leaf) for leaf in leaves]))
        bits = bits | jnp.where(finite, 0, _VARIABLE_BITS[name]).astype(jnp.int32)
    return bits


# A direction rule maps (problem, x, y, v, inner_batch, outer_batch, key, inner_lr, aux_lr)
# to (new y, new v before projection, hypergradient estimate, diagnostics).
Directions = Callable[..., tuple[Any, Any, Any, dict]]


def _single_loop(
    name: str,
    directions: Directions,
    *,
    inner_lr: Schedule,
    aux_lr: Schedule | None,
    outer: Any,
    average: float | None,
    aux_radius: float | None,
    validate: Callable[[Any, Any, Any, jax.Array], None] | None = None,
) -> Solver:
    inner_schedule = _schedule("inner_lr", inner_lr)
    aux_schedule = inner_schedule if aux_lr is None else _schedule("aux_lr", aux_lr)
    outer_tx = _outer(outer)
    if average is not None:
        _check_unit("average", average)
    if aux_radius is not None:
        _check_scalar("aux_radius", aux_radius, "be finite and > 0 (or None)", _finite_positive)

    def init(problem: BilevelProblem, x0: Any, y0: Any, key: jax.Array) -> BilevelState:
        check_key(key)
        check_problem(problem, x0, y0, key)
        if validate is not None:
            validate(problem, x0, y0, key)
        # Copies: a step jitted with a donated state must not consume the caller's x0 / y0.
        x0 = jax.tree.map(jnp.array, x0)
        y0 = jax.tree.map(jnp.array, y0)
        # at least float32: a loss of 123457.7 was stored as 123392 in bfloat16, inf in float16
        dtype = jnp.promote_types(jnp.result_type(*jax.tree.leaves(x0)), jnp.float32)
        # Distinct buffers per field, so a donated state never donates one buffer twice.
        return BilevelState(
            x=x0,
            y=y0,
            v=jax.tree.map(jnp.zeros_like, y0),
            h=None if average is None else jax.tree.map(jnp.zeros_like, x0),
            outer_state=outer_tx.init(x0),
            key=key,
            count=jnp.zeros([], jnp.int32),
            status=jnp.zeros([], jnp.int32),
            failed_step=jnp.full([], -1, jnp.int32),
            diagnostics={
                "outer_loss": jnp.zeros([], dtype),
                "hypergrad_norm": jnp.zeros([], dtype),
            },
            problem=problem,
        )

    def step(state: BilevelState, batches: tuple[Any, Any]) -> BilevelState:
        inner_batch, outer_batch = batches
        problem = state.problem
        key, probe_key = jax.random.split(state.key)
        y, v, d_x, diagnostics = directions(
            problem,
            state.x,
            state.y,
            state.v,
            inner_batch,
            outer_batch,
            probe_key,
            inner_schedule(state.count),
            aux_schedule(state.count),
        )
        v = _project_ball(v, aux_radius)
        if average is None:
            h, direction = None, d_x
        else:
            h = jax.tree.map(
                lambda a, d: ((1.0 - average) * a + average * d).astype(a.dtype), state.h, d_x
            )
            direction = h
        updates, outer_state = _outer_update(
            outer_tx, direction, state.outer_state, state.x, diagnostics["outer_loss"]
        )
        x = optax.apply_updates(state.x, updates)
        bits = _nonfinite_bits(x=x, y=y, v=v, h=h)
        first = (state.status == OK) & (bits != OK)
        diagnostics = {
            "outer_loss": diagnostics["outer_loss"],
            "hypergrad_norm": _tree_norm(d_x),
        }
        diagnostics = {k: val.astype(state.diagnostics[k].dtype) for k, val in diagnostics.items()}
        return dataclasses.replace(
            state,
            x=x,
            y=y,
            v=v,
            h=h,
            outer_state=outer_state,
            key=key,
            count=state.count + 1,
            status=state.status | bits,
            failed_step=jnp.where(first, state.count, state.failed_step),
            diagnostics=diagnostics,
        )

    return Solver(name, init, step)


# --- SOBA / MA-SOBA ----------------------------------------------------------------------

HvpMode = Literal["joint_vjp", "forward_over_reverse"]


def _full_space_directions(mode: HvpMode) -> Directions:
    if mode not in ("joint_vjp", "forward_over_reverse"):
        raise ValueError(f"hvp_mode must be 'joint_vjp' or 'forward_over_reverse', got {mode!r}")

    def directions(problem, x, y, v, inner_batch, outer_batch, key, beta, gamma):
        del key
        g = problem.inner_loss
        if mode == "joint_vjp":
            grad_y, hv, cross = joint_vjp(g, x, y, v, inner_batch)
        else:
            grad_y, hv = grad_and_hvp(lambda y_: g(x, y_, inner_batch), y, v)
            cross = cross_term(g, x, y, v, inner_batch)
        f_value, (f_x, f_y) = jax.value_and_grad(problem.outer_loss, (0, 1))(x, y, outer_batch)
        # in each leaf's dtype: a step that is not weakly typed (a schedule, a NumPy float,
        # a traced value) must not promote y or v (the scan's carry would change type)
        y_new = jax.tree.map(lambda a, d: (a - beta * d).astype(a.dtype), y, grad_y)
        v_new = jax.tree.map(
            lambda a, hv_, fy: (a - gamma * (hv_ + fy)).astype(a.dtype), v, hv, f_y
        )
        d_x = jax.tree.map(jnp.add, f_x, cross)
        return y_new, v_new, d_x, {"outer_loss": f_value}

    return directions


def soba(
    *,
    inner_lr: Schedule,
    aux_lr: Schedule | None = None,
    outer: Any,
    hvp_mode: HvpMode = "joint_vjp",
) -> Solver:
    """SOBA (Dagreou, Ablin, Vaiter and Moreau, NeurIPS 2022).

    One step, all from the old ``(x, y, v)``::

      y <- y - inner_lr * grad_y g
      v <- v - aux_lr * (H_yy g v + grad_y f)
      x <- outer(grad_x f + H_xy g v)

    Args:
      inner_lr: lower-level step (float or schedule of the step count).
      aux_lr: step of ``v`` (defaults to ``inner_lr``).
      outer: optax transformation for ``x`` (a float means ``optax.sgd``); its update also
        gets ``value=`` (the outer loss on the step's batch), see the module's docstring.
      hvp_mode: ``"joint_vjp"`` (one VJP of ``grad_y g`` gives ``H v`` and the cross term,
        the usual SOBA oracle) or ``"forward_over_reverse"``.
    """
    return _single_loop(
        "soba",
        _full_space_directions(hvp_mode),
        inner_lr=inner_lr,
        aux_lr=aux_lr,
        outer=outer,
        average=None,
        aux_radius=None,
    )


def ma_soba(
    *,
    inner_lr: Schedule,
    aux_lr: Schedule | None = None,
    outer: Any,
    average: float = 0.1,
    aux_radius: float | None = None,
    hvp_mode: HvpMode = "joint_vjp",
) -> Solver:
    """MA-SOBA: SOBA with a moving average of the hypergradient and a projected ``v``.

    arXiv 2306.12067: O(eps^-2) without high-order smoothness::

      v <- Proj_{||v|| <= aux_radius}(v - aux_lr * (H_yy g v + grad_y f))
      h <- (1 - average) h + average * (grad_x f + H_xy g v)
      x <- outer(h)

    Args:
      average: weight ``theta`` of the newest hypergradient in ``h`` (0.1 is the 0.9
        momentum of the public code).
      aux_radius: radius of the ball ``v`` is projected on (``None``: no projection).
      others: as :func:`soba`.
    """
    return _single_loop(
        "ma_soba",
        _full_space_directions(hvp_mode),
        inner_lr=inner_lr,
        aux_lr=aux_lr,
        outer=outer,
        average=average,
        aux_radius=aux_radius,
    )


# --- BROS ---------------------------------------------------------------------------------


def bros(
    *,
    rank: int,
    inner_lr: Schedule,
    aux_lr: Schedule | None = None,
    outer: Any,
    average: float = 0.1,
    aux_radius: float | None = None,
    factorized: bool = False,
    exact_small_leaves: bool = False,
    hessian_probe: Literal["bi", "one_sided"] = "bi",
) -> Solver:
    """BROS: single-loop stochastic bilevel optimisation in randomized subspaces.

    Seed abstract 1 (arXiv 2605.10288). The lower-level and auxiliary updates move each
    leaf of ``y`` / ``v`` only along a fresh rank-``rank`` Rademacher subspace per step,
    the Hessian action comes from the bi-probe, and ``x`` follows MA-SOBA's moving average.
    The step rule is a reconstruction (see :func:`bros_directions`, where all of it lives).

    Memory: gradients and Hessian actions exist only as ``(rank, *rest)`` coordinates, and
    the lifted updates are applied in place in row blocks, so no ``y``-sized temporary is
    formed -- when the losses apply their weights with
    :func:`jaxopt_suite.bilevel.subspace.dense` and ``factorized=True`` (otherwise the
    perturbed weights are merged and autodiff forms full-size gradients again).

    Args:
      rank: subspace rank r per leaf (static); must not exceed any leaf's first dimension
        unless ``exact_small_leaves``.
      inner_lr, aux_lr, outer, average, aux_radius: as :func:`ma_soba`.
      factorized: pass :class:`~jaxopt_suite.bilevel.subspace.Factorized` leaves to both
        losses (they must accept them, e.g. through ``subspace.dense``).
      exact_small_leaves: update leaves with a dimension <= rank (biases, thin read-out
        layers) in full instead of raising.
      hessian_probe: ``"bi"`` (the Rademacher bi-probe ``P1 P1^T H P2 P2^T v``) or
        ``"one_sided"`` (``P1 P1^T H v``, with ``v`` as the forward tangent): both unbiased
        and free of ``y``-sized buffers; the one-sided estimate drops the bi-probe's
        second variance term ``(d + r - 1)/r^2 (tr(H^2) ||v||^2 + ...)``.
    """
    if hessian_probe not in ("bi", "one_sided"):
        raise ValueError(f"hessian_probe must be 'bi' or 'one_sided', got {hessian_probe!r}")
    if isinstance(rank, bool) or not isinstance(rank, numbers.Integral) or rank < 1:
        raise ValueError(f"rank must be a Python int >= 1, got {rank!r}")
    rank = int(rank)

    def validate(problem, x0, y0, key):
        ranks = subspace.probe_shapes(y0, rank, exact_small_leaves)
        if factorized:
            _check_factorized_losses(problem, x0, y0, key, ranks)

    def directions(problem, x, y, v, inner_batch, outer_batch, key, beta, gamma):
        ranks = subspace.probe_shapes(y, rank, exact_small_leaves)
        return bros_directions(
            problem,
            x,
            y,
            v,
            inner_batch,
            outer_batch,
            key,
            beta,
            gamma,
            ranks,
            factorized,
            hessian_probe,
        )

    return _single_loop(
        f"bros(r={rank})",
        directions,
        inner_lr=inner_lr,
        aux_lr=aux_lr,
        outer=outer,
        average=average,
        aux_radius=aux_radius,
        validate=validate,
    )


def _check_factorized_losses(problem, x0, y0, key, ranks) -> None:
    """``factorized=True`` hands both losses :class:`~.subspace.Factorized` leaves. A loss
    that reads them as plain pytrees (``jax.tree.leaves``, ``ravel_pytree``) sees the
    factors as extra leaves: it fails, or, worse, computes another function. Both losses
    are evaluated once at a perturbed ``y0``, factorized and merged, on one drawn batch
    (a key derived from ``key``; the state's key is not consumed); under a trace only the
    factorized calls are checked. Eager: two evaluations of each loss per init (and, the
    first time in a process, the compiles of their operations)."""
    k_probe, k_coords, k_batch = jax.random.split(jax.random.fold_in(key, 0x5EED), 3)
    probes = subspace.sample_probes(k_probe, y0, ranks)
    zeros = subspace.zero_coords(y0, probes)
    coords = [
        jax.random.normal(k, z.shape, z.dtype)
        for k, z in zip(jax.random.split(k_coords, len(zeros)), zeros, strict=True)
    ]
    moves = [(probes, coords)]
    inner_batch, outer_batch = problem.sample(k_batch)
    for name, loss, batch in (
        ("inner_loss", problem.inner_loss, inner_batch),
        ("outer_loss", problem.outer_loss, outer_batch),
    ):
        try:
            factored = loss(x0, subspace.perturb(y0, moves, True), batch)
        except Exception as err:  # any failure on the leaves: name the cause and the fix
            raise TypeError(
                f"bros(factorized=True) passes subspace.Factorized leaves to {name}, which "
                f"failed on them ({type(err).__name__}: {err}); apply the weights with "
                "jaxopt_suite.bilevel.subspace.dense (or subspace.materialize), or use "
                "factorized=False"
            ) from err
        merged = loss(x0, subspace.perturb(y0, moves, False), batch)
        if isinstance(factored, jax.core.Tracer) or isinstance(merged, jax.core.Tracer):
            continue
        a, b = float(factored), float(merged)
        if not abs(a - b) <= 1e-3 * (1.0 + abs(b)):
            raise ValueError(
                f"bros(factorized=True): {name} gives {a:.6g} on subspace.Factorized leaves "
                f"and {b:.6g} on the same weights merged; it reads the leaves as plain "
                "pytrees (their factors as extra leaves). Apply the weights with "
                "jaxopt_suite.bilevel.subspace.dense (or subspace.materialize), or use "
                "factorized=False"
            )


def bros_directions(
    problem,
    x,
    y,
    v,
    inner_batch,
    outer_batch,
    key,
    beta,
    gamma,
    ranks,
    factorized,
    hessian_probe="bi",
):
    """One BROS step of ``y`` and ``v`` and its hypergradient estimate.

    Reconstruction (the paper's full text is not available; its abstract names randomized
    subspaces, a single loop, Rademacher bi-probes and MA-SOBA's rate). Per leaf, with
    independent Rademacher probes ``P1, P2`` (``E[P P^T] = I``) drawn fresh each step::

      s_y  = P1^T grad_y g                       (r-dim, from g(y + P1 b1))
      s_v  = P1^T H_yy g P2 (P2^T v) + P1^T grad_y f   (bi-probe + projected grad of f)
      y   <- y - inner_lr * P1 s_y
      v   <- v - aux_lr  * P1 s_v
      d_x  = grad_x f + H_xy g v                 (exact, reverse over forward)

    so ``E[P1 s_y] = grad_y g`` and ``E[P1 s_v] = H v + grad_y f``: the expected steps are
    MA-SOBA's, and ``v``'s fixed point is the true ``-H^{-1} grad_y f``. The cross term is
    taken exactly because it needs no ``y``-sized buffer (``x`` is the small side in the
    intended uses).
    """
    key1, key2 = jax.random.split(key)
    probes1 = subspace.sample_probes(key1, y, ranks)
    probes2 = subspace.sample_probes(key2, y, ranks)
    g = problem.inner_loss
    if hessian_probe == "bi":
        s_y, s_hv = subspace.bi_probe(
            lambda y_: g(x, y_, inner_batch), y, v, probes1, probes2, factorized=factorized
        )
    else:
        s_y, s_hv = subspace.one_sided_probe(
            lambda y_: g(x, y_, inner_batch), y, v, probes1, factorized=factorized
        )
    zeros = subspace.zero_coords(y, probes1)

    def outer_in_coords(x_, b):
        return problem.outer_loss(x_, subspace.perturb(y, [(probes1, b)], factorized), outer_batch)

    f_value, (f_x, s_f) = jax.value_and_grad(outer_in_coords, (0, 1))(x, zeros)
    cross = cross_term(g, x, y, v, inner_batch)
    s_v = [a + b for a, b in zip(s_hv, s_f, strict=True)]
    # The in-place updates of y and v must come after every read of either. Only the reads
    # feeding a loop's own coordinates are ordered by data flow; for the rest (the cross
    # term, grad_x f, the other variable's coordinates) XLA keeps a full copy of y and v.
    # A zero-weighted dependence on all of them orders the reads first (an explicit
    # optimization_barrier does not: XLA still copies).
    # The sum is taken in float32 and made finite first: a float16 sum overflowed to inf and
    # 0 * inf put NaN into every step. A NaN in s_y or s_v still reaches y or v directly.
    total = _tree_sum(cross) + _tree_sum(f_x) + _tree_sum(f_value) + _tree_sum(s_y) + _tree_sum(s_v)
    after = 0.0 * jnp.nan_to_num(total)
    y_new = subspace.add_lifted(y, probes1, s_y, -beta + after)
    v_new = subspace.add_lifted(v, probes1, s_v, -gamma + after)
    d_x = jax.tree.map(jnp.add, f_x, cross)
    return y_new, v_new, d_x, {"outer_loss": f_value}


# --- implicit differentiation reference ---------------------------------------------------


def _jaxopt():
    """jaxopt's implicit differentiation, imported on first use.

    jaxopt is in maintenance mode and warns so on import; ``custom_root`` and the CG solve
    used here are stable, so that one warning is silenced at this import only.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "JAXopt is no longer maintained", DeprecationWarning)
        from jaxopt import implicit_diff, linear_solve
    return implicit_diff, linear_solve


def implicit_hypergradient(
    problem: BilevelProblem,
    x: Any,
    y_init: Any,
    inner_batch: Any,
    outer_batch: Any,
    *,
    inner_lr: float,
    inner_steps: int,
    cg_steps: int = 100,
) -> tuple[Any, Any, jax.Array]:
    """``(grad Phi(x), y*(x), f)`` on the given batches by implicit differentiation.

    ``y*`` comes from ``inner_steps`` gradient steps on ``g(x, ., inner_batch)`` from
    ``y_init`` (warm start); the hypergradient from jaxopt's ``custom_root`` with conjugate
    gradients on ``H_yy g`` (symmetric positive definite for a strongly convex ``g``).
    """
    check_implicit_settings(inner_lr, inner_steps, cg_steps)
    implicit_diff, linear_solve = _jaxopt()
    g = problem.inner_loss

    def optimality(y_, x_, batch):
        return jax.grad(g, 1)(x_, y_, batch)

    @implicit_diff.custom_root(
        optimality, solve=functools.partial(linear_solve.solve_cg, maxiter=cg_steps)
    )
    def inner_solve(y0, x_, batch):
        x_ = jax.lax.stop_gradient(x_)

        def body(_, y_):
            grads = jax.grad(g, 1)(x_, y_, batch)
            return jax.tree.map(lambda a, d: (a - inner_lr * d).astype(a.dtype), y_, grads)

        return jax.lax.fori_loop(0, inner_steps, body, y0)

    def phi(x_):
        y_star = inner_solve(y_init, x_, inner_batch)
        return problem.outer_loss(x_, y_star, outer_batch), y_star

    (f_value, y_star), grad = jax.value_and_grad(phi, has_aux=True)(x)
    return grad, jax.lax.stop_gradient(y_star), f_value


def check_implicit_settings(inner_lr: Any, inner_steps: Any, cg_steps: Any) -> None:
    """The inner solve's settings of :func:`implicit_hypergradient`: a finite step size
    > 0 (a negative or NaN one diverged silently to ~1e20) and Python ints >= 1 (0 or fewer
    inner steps gave a zero hypergradient)."""
    check_finite_positive("inner_lr", inner_lr)
    for name, value in (("inner_steps", inner_steps), ("cg_steps", cg_steps)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            raise ValueError(f"{name} must be a Python int >= 1, got {value!r}")


def implicit_reference(
    *, inner_lr: float, inner_steps: int = 100, cg_steps: int = 100, outer: Any
) -> Solver:
    """The accuracy reference: each step solves the inner problem (warm-started gradient
    descent) and the linear system (CG) on its batches, then steps ``x`` with ``outer``."""
    check_implicit_settings(inner_lr, inner_steps, cg_steps)
    inner_lr_value = inner_lr if isinstance(inner_lr, jax.core.Tracer) else float(inner_lr)

    def directions(problem, x, y, v, inner_batch, outer_batch, key, beta, gamma):
        del key, beta, gamma
        grad, y_star, f_value = implicit_hypergradient(
            problem,
            x,
            y,
            inner_batch,
            outer_batch,
            inner_lr=inner_lr_value,
            inner_steps=int(inner_steps),
            cg_steps=int(cg_steps),
        )
        return y_star, v, grad, {"outer_loss": f_value}

    return _single_loop(
        "implicit_reference",
        directions,
        inner_lr=inner_lr_value,
        aux_lr=None,
        outer=outer,
        average=None,
        aux_radius=None,
    )


# --- driver -------------------------------------------------------------------------------


# Host wall clocks of the runs in progress, by run id (an argument of the compiled loop,
# which is shared by runs, so runs at the same time keep their own clocks): started when the
# compiled run starts, so compilation is excluded.
_CLOCKS: dict[int, float] = {}
_RUN_IDS = itertools.count()


def _start_clock(run_id) -> None:
    _CLOCKS[int(run_id)] = time.perf_counter()


def _elapsed(run_id, _count) -> np.ndarray:
    return np.float32(time.perf_counter() - _CLOCKS[int(run_id)])


def _cached(build: Callable, *static: Any) -> Any:
    """``build(*static)`` from its ``lru_cache``, or built afresh when an argument (an
    ``eval_fn`` that is a bound method of an ``eq=True`` object, say) cannot be hashed."""
    try:
        hash(static)
    except TypeError:
        return build.__wrapped__(*static)
    return build(*static)


@functools.lru_cache(maxsize=8)
def _compiled_run(problem, solver, eval_fn, num_steps: int, eval_every: int):
    """``run``'s jitted loop, cached by its static parts (a problem and a solver hash by
    identity), so that repeated runs, over seeds say, compile once. The cache keeps its
    last 8 problems (and the data their losses close over) alive."""
    segments, remainder = divmod(num_steps, eval_every)

    def record(state, run_id):
        # The clock reads the host time once the segment's state exists (it is an operand).
        seconds = io_callback(
            _elapsed, jax.ShapeDtypeStruct((), jnp.float32), run_id, state.count, ordered=True
        )
        out = {"step": state.count, "seconds": seconds, "status": state.status, **state.diagnostics}
        if eval_fn is not None:
            extra = eval_fn(state.x, state.y)
            taken = sorted(set(extra) & set(out))
            if taken:  # they would silently replace the run's own records
                raise ValueError(f"eval_fn's keys {taken} are the run's own records: rename them")
            out.update(extra)
        return out

    def advance(state, keys):
        def one(state, k):
            return solver.step(state, problem.sample(k)), None

        return jax.lax.cond(
            state.status == OK, lambda s: jax.lax.scan(one, s, keys)[0], lambda s: s, state
        )

    @jax.jit
    def go(state, batch_key, run_id):
        io_callback(_start_clock, None, run_id, ordered=True)
        keys = jax.random.split(batch_key, num_steps)
        # raw uint32 keys carry a trailing axis of their own
        main = keys[: segments * eval_every].reshape(segments, eval_every, *keys.shape[1:])

        def segment(state, seg_keys):
            state = advance(state, seg_keys)
            return state, record(state, run_id)

        state, history = jax.lax.scan(segment, state, main)
        if remainder:
            state = advance(state, keys[segments * eval_every :])
            last = jax.tree.map(lambda a: a[None], record(state, run_id))
            history = jax.tree.map(lambda a, b: jnp.concatenate([a, b]), history, last)
        return state, history

    return go


class RunResult(NamedTuple):
    """``history`` holds one entry per record: ``step``, ``seconds`` (wall time since the
    compiled run started, read on the host when the record is taken), the step diagnostics,
    ``status``,
    and whatever ``eval_fn`` returns."""

    state: BilevelState
    history: dict
    status: int
    message: str


def run(
    problem: BilevelProblem,
    solver: Solver,
    x0: Any,
    y0: Any,
    key: jax.Array,
    num_steps: int,
    *,
    eval_every: int | None = None,
    eval_fn: Callable[[Any, Any], dict] | None = None,
    on_failure: Literal["raise", "return"] = "raise",
) -> RunResult:
    """``num_steps`` steps of ``solver`` as one jitted ``lax.scan``, recording every
    ``eval_every`` steps (default ``max(1, num_steps // 50)``: 50 to 99 records over a run
    of 50 steps or more, one per step below).

    Batches come from ``problem.sample``. After a step goes non-finite the remaining
    segments are skipped; then ``on_failure="raise"`` raises ``FloatingPointError`` with the
    message, ``"return"`` returns the result with its status.
    """
    if not isinstance(solver, Solver):
        raise TypeError(f"solver must be a Solver (soba(...), bros(...), ...), got {solver!r}")
    if isinstance(num_steps, bool) or not isinstance(num_steps, numbers.Integral):
        raise TypeError(f"num_steps must be a Python int, got {num_steps!r}")
    if num_steps < 1:
        raise ValueError(f"num_steps must be >= 1, got {num_steps}")
    if eval_every is None:
        eval_every = max(1, num_steps // 50)
    if isinstance(eval_every, bool) or not isinstance(eval_every, numbers.Integral):
        raise TypeError(f"eval_every must be a Python int, got {eval_every!r}")
    if eval_every < 1:
        raise ValueError(f"eval_every must be >= 1, got {eval_every}")
    if on_failure not in ("raise", "return"):
        raise ValueError(f"on_failure must be 'raise' or 'return', got {on_failure!r}")
    check_key(key)
    init_key, batch_key = jax.random.split(key)
    state = solver.init(problem, x0, y0, init_key)
    go = _cached(_compiled_run, problem, solver, eval_fn, int(num_steps), int(eval_every))
    run_id = next(_RUN_IDS) % 2**31  # an int32 argument
    try:  # the clock is read by callbacks while the dispatched run executes
        state, history = jax.block_until_ready(go(state, batch_key, jnp.int32(run_id)))
    finally:
        _CLOCKS.pop(run_id, None)
    status = int(state.status)
    message = explain(status, int(state.failed_step))
    if status != OK and on_failure == "raise":
        raise FloatingPointError(f"{solver.name}: {message}")
    return RunResult(state, history, status, message)
