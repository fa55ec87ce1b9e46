"""The DICE dual shared by AETDICE and its baselines: f-divergences, the closed-form density
ratio, the dual loss, weighted behaviour cloning, and one jitted training scan.

Regularised policy optimisation over occupancies ``d`` (OptiDICE, Lee et al., arXiv
2106.10783; with a concave utility of the expected return, FairDICE, arXiv 2506.08062):

.. math::
  \\max_{d \\ge 0} \\; g\\Big(h_0 + \\textstyle\\sum E_d[\\tilde r]\\Big)
      - \\alpha\\, D_f(d \\,\\|\\, d^D) \\quad \\text{s.t. Bellman flow},

with ``g(y) = min_mu mu^T y - g_*(mu)`` (:mod:`.utilities`). Its Lagrangian dual, after the
inner maximisation over ``w = d / d^D`` in closed form, is the loss minimised here over the
value-like ``nu`` and the multipliers ``mu``:

.. math::
  L(\\nu, \\mu) = c_0 \\Big[\\frac{\\mu^\\top h_0 - g_*(\\mu)}{\\sigma}
      + E_{p_0}[\\nu(s_0)]\\Big] + c_1\\, E_{D}\\big[\\alpha f^*(e_\\nu / \\alpha)\\big],
  \\qquad e_\\nu = \\frac{\\mu^\\top \\tilde r}{\\sigma} + \\gamma_t\\, \\nu(s') - \\nu(s),

where ``f*`` is the convex conjugate of ``f`` on ``w >= 0`` and the optimal ratio is
``w* = max(0, (f')^{-1}(e / alpha))``. Two settings use it:

* discounted (the baselines): ``c_0 = 1 - gamma``, ``c_1 = 1``, ``gamma_t = gamma`` unless
  the step ended the episode; the objective is ``(1 - gamma) g(discounted return)``.
* finite horizon ``T`` (AETDICE): ``c_0 = 1 / T``, ``c_1`` = the fraction of the dataset's
  ``N x T`` steps that happened, ``gamma_t = 1`` until the horizon or the episode's end; the
  objective is ``g(E[h(G)]) / T`` and ``nu`` is indexed by time through its input.

Both are divided by a reward scale ``sigma`` (the spread of the per-step rewards), which
makes ``alpha`` comparable across tasks.

**Mass bound** (ours, ``DiceConfig.mass_constraint``; OptiDICE's normalisation
``E_D[w] = 1``, here an inequality). Every occupancy the flow admits has mass
``c_1 E_D[w] <= 1``: the finite horizon's sums to the policy's mean episode length over
``T``, the discounted one to 1 less what ending episodes take out of it, so equality holds
only where every episode runs to the horizon (not on the hopper, which falls). With ``nu``
a network the dual does not keep to it by itself: the shift of ``nu`` that moves every
residual alike (``kappa (T - t)`` under the finite horizon) is a slow direction for the
network, and on the balance task's data the ratios' batch mean ends training above 1.3
without the bound (AETDICE with the accumulated anchor of its rewards,
``tests/rl/test_aetdice.py``).
The estimated returns are then inflated as much, which misleads a nonlinear utility: on the
``morl`` suite's halfcheetah data under Tchebycheff, ``mu`` settled on the run objective
where energy's term binds (``benchmarks.morl_policy_probe``). The bound enters with its own
multiplier ``lambda >= 0``, which takes projected Adam steps at ``mass_learning_rate``
(``3e-2``, ten times ``mu``'s: ``lambda`` climbs from 0 to several units, up to 6.5 on that
data, ``probes/morl_mass_halfcheetah.json``):

.. math::
  L(\\nu, \\mu, \\lambda) = \\lambda + L(\\nu, \\mu)\\big|_{e_\\nu \\to e_\\nu - \\lambda},
  \\qquad w^* = \\max\\big(0, (f')^{-1}((e_\\nu - \\lambda) / \\alpha)\\big),

whose gradient in ``lambda`` is ``1 - c_1 E_D[w*]``.

The policy is fitted by weighted behaviour cloning,
``max E_D[w* log pi(a|s)]`` with ``w*`` normalised over the batch (OptiDICE's extraction),
into a mixture of Gaussians: the re-weighted behaviour distribution is multimodal wherever
the data's actions are.

**Behaviour-conditioned extraction** (ours, ``DiceConfig.behaviour_conditioned``; OptiDICE
and FairDICE extract a policy of the state alone). Data from several behaviour policies
(D4MORL's preference-conditioned ones) hold distinct gaits in the same states, and a policy of
the state alone mixes them step by step, which a gait does not survive: on the ``morl``
suite's halfcheetah data the DICE policies ran slower *and* spent more energy than
preference-conditioned cloning's. With this option the weighted cloning is also conditioned
on each episode's behaviour annotation ``b`` (the dataset's ``preferences`` over their
sums, standardised like the features), ``max E_D[w* log pi(a|s, b)]``, and the policy acts
at ``b`` = the objective's utility weights (normalised), where D4MORL's BC(P), the same fit
with ``w = 1``, acts too. Why not at the label the optimised occupancy ``d* = w* d^D``
favours: in a probe on that halfcheetah data the labels' mass ``sum_{steps of b} w*``
stayed near each label's share of the data, too flat to choose one (acting at the heaviest
label did worse than at the utility's weights on ESR Tchebycheff).
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from jaxopt_suite._checks import check_flag, check_number, check_settings, python_numbers
from jaxopt_suite.rl.networks import (
    MixturePolicy,
    ValueNetwork,
    mixture_log_prob,
    mixture_mode,
    mixture_sample,
)

DIVERGENCES = ("chi2", "soft_chi2", "kl")
# KL's ratio is exp(y - 1); the exponent is capped so float32 cannot overflow.
_KL_MAX_EXPONENT = 30.0


def f_value(divergence: str, w: jax.Array) -> jax.Array:
    """``f(w)``: chi^2 ``(w - 1)^2 / 2``; soft-chi^2 ``w log w - w + 1`` below 1, chi^2
    above; KL ``w log w``."""
    chi2 = 0.5 * (w - 1.0) ** 2
    if divergence == "chi2":
        return chi2
    safe = jnp.maximum(w, 1e-30)
    entropy = jnp.where(w > 0, w * jnp.log(safe), 0.0)
    if divergence == "soft_chi2":
        return jnp.where(w < 1.0, entropy - w + 1.0, chi2)
    if divergence == "kl":
        return entropy
    raise ValueError(f"divergence must be one of {DIVERGENCES}, got {divergence!r}")


def ratio(divergence: str, y: jax.Array) -> jax.Array:
    """``w*(y) = max(0, (f')^{-1}(y))``, the maximiser of ``w y - f(w)`` over ``w >= 0``."""
    if divergence == "chi2":
        return jax.nn.relu(y + 1.0)
    if divergence == "soft_chi2":
        return jnp.where(y < 0.0, jnp.exp(jnp.minimum(y, 0.0)), y + 1.0)
    if divergence == "kl":
        return jnp.exp(jnp.minimum(y - 1.0, _KL_MAX_EXPONENT))
    raise ValueError(f"divergence must be one of {DIVERGENCES}, got {divergence!r}")


def conjugate(divergence: str, y: jax.Array) -> jax.Array:
    """``f*(y) = max_{w >= 0} w y - f(w)``, in closed form (smooth in ``y``)."""
    if divergence == "chi2":
        return jnp.where(y >= -1.0, 0.5 * y * y + y, -0.5)
    if divergence == "soft_chi2":
        return jnp.where(y < 0.0, jnp.expm1(jnp.minimum(y, 0.0)), 0.5 * y * y + y)
    if divergence == "kl":
        return ratio("kl", y)
    raise ValueError(f"divergence must be one of {DIVERGENCES}, got {divergence!r}")


@dataclasses.dataclass(frozen=True)
class DiceConfig:
    """Settings of the DICE training scan (static: they fix the compiled program)."""

    divergence: str = "soft_chi2"
    alpha: float = 0.1
    iterations: int = 20_000
    batch_size: int = 512
    hidden: tuple[int, ...] = (256, 256)
    policy_hidden: tuple[int, ...] = (256, 256)
    policy_components: int = 5  # Gaussians in the policy's mixture
    learning_rate: float = 3e-4  # nu and the policy
    dual_learning_rate: float = 3e-3  # the multipliers mu
    gradient_penalty: float = 1e-4  # times ||grad_s nu||^2: keeps nu smooth in s (ours)
    # nu's, mu's and e_phi's learning rates decay (cosine) to this fraction of theirs by the
    # last iteration; 1 keeps them constant (module docstring of make_fit)
    final_lr_fraction: float = 0.05
    # the policy also takes each episode's behaviour preference (module docstring)
    behaviour_conditioned: bool = False
    # the occupancy's mass bound c_1 E_D[w] <= 1 with its own multiplier (module docstring)
    mass_constraint: bool = True
    mass_learning_rate: float = 3e-2  # the mass bound's multiplier lambda (module docstring)

    def __post_init__(self):
        # tuples, so the config hashes (it keys the compiled training functions); a string
        # stays one, for checked() to refuse ("64" is not the widths ('6', '4'))
        for name in ("hidden", "policy_hidden"):
            if isinstance(getattr(self, name), list):
                object.__setattr__(self, name, tuple(getattr(self, name)))

    def checked(self) -> DiceConfig:
        """The config with its numbers as Python ints and floats (it keys compiled
        functions, and an array does not hash), or a ``ValueError`` naming the first bad
        setting."""
        if self.divergence not in DIVERGENCES:
            raise ValueError(f"divergence must be one of {DIVERGENCES}, got {self.divergence!r}")
        check_settings(
            self,
            integers=("iterations", "batch_size", "policy_components"),
            nonnegative=("gradient_penalty",),
            positive=("alpha", "learning_rate", "dual_learning_rate", "mass_learning_rate"),
            widths=("hidden", "policy_hidden"),
            scalar=True,
        )
        check_number(
            "final_lr_fraction", self.final_lr_fraction, "lie in [0, 1]", lambda v: 0 <= v <= 1
        )
        for name in ("behaviour_conditioned", "mass_constraint"):  # "no" would read as true
            check_flag(name, getattr(self, name))
        return python_numbers(self)


class DiceData(NamedTuple):
    """The dataset's transitions that happened, flattened; shared by every objective."""

    features: jax.Array  # (M, F) nu's input at s, and the policy's unless policy_features
    next_features: jax.Array  # (M, F) at s'
    actions: jax.Array  # (M, A)
    continues: jax.Array  # (M,) gamma_t: 0 after a termination (and at the horizon, finite)
    initial_features: jax.Array  # (N, F) at each episode's first state
    feature_mean: jax.Array  # (F,)
    feature_std: jax.Array  # (F,)
    labels: jax.Array | None = None  # (M, m) each step's behaviour preference, if annotated
    # () how many of the M step rows are real when the step arrays are padded (the rows from
    # ``count`` on are padding: never sampled, left out of every statistic); None: all of them
    count: jax.Array | None = None
    # (M, P) the policy's input at s where it is not ``features``: a policy of the
    # environment's state fitted to a DICE on augmented states; None: ``features``
    policy_features: jax.Array | None = None


class DiceProblem(NamedTuple):
    """One objective on the data (every leaf may carry a leading axis for ``vmap``)."""

    rewards: jax.Array  # (M, k) per-step (transformed) reward vectors
    outer: Any  # the concave utility g of :mod:`.utilities`
    offset: jax.Array  # (k,) h_0, the transformation at a zero return
    scale: jax.Array  # () sigma
    initial_weight: jax.Array  # () c_0
    step_weight: jax.Array  # () c_1
    initial_dual: jax.Array  # (dual_size,) where mu starts


class DiceParams(NamedTuple):
    nu: Any
    dual: jax.Array  # (dual_size,) unconstrained parameters of mu
    policy: Any
    residual: Any  # the residual model's: E[r / std | s, a] and E[gamma_t nu(s') | s, a]
    mass: jax.Array  # () lambda >= 0, the mass bound's multiplier (0 while it is off)


class DiceResult(NamedTuple):
    params: DiceParams
    # per iteration: loss, policy_loss, ratio_mean, ratio_max, mu (k,), mass (lambda)
    metrics: dict


def step_count(data: DiceData) -> int | jax.Array:
    """The number of real step rows of ``data`` (:attr:`DiceData.count`)."""
    return data.features.shape[0] if data.count is None else data.count


def row_moments(values: jax.Array, count: jax.Array | None = None):
    """Mean and standard deviation over the rows of ``values (M, ...)``, or over its first
    ``count`` rows when the rest are padding."""
    if count is None:
        return jnp.mean(values, axis=0), jnp.std(values, axis=0)
    real = (jnp.arange(values.shape[0]) < count).reshape((-1,) + (1,) * (values.ndim - 1))
    real = jnp.broadcast_to(real, values.shape)
    mean = jnp.sum(jnp.where(real, values, 0.0), axis=0) / count
    deviation = values - jnp.broadcast_to(mean, values.shape)
    variance = jnp.sum(jnp.where(real, deviation**2, 0.0), axis=0) / count
    return mean, jnp.sqrt(variance)


def feature_statistics(
    features: jax.Array, count: jax.Array | None = None
) -> tuple[jax.Array, jax.Array]:
    """Mean and standard deviation (floored at 1e-3) of ``features (M, F)`` (of its first
    ``count`` rows when given)."""
    mean, std = row_moments(features, count)
    return mean, jnp.maximum(std, 1e-3)


def standardize(features: jax.Array, mean: jax.Array, std: jax.Array) -> jax.Array:
    """``(features - mean) / std`` for features ``(..., F)``."""
    return (features - jnp.broadcast_to(mean, features.shape)) / jnp.broadcast_to(
        std, features.shape
    )


def _networks(config: DiceConfig, action_size: int):
    policy = MixturePolicy(action_size, config.policy_components, config.policy_hidden)
    return ValueNetwork(config.hidden), policy


def nu_values(nu_apply, nu_params, data: DiceData, features: jax.Array) -> jax.Array:
    """``nu`` at ``features (..., F)``, standardised with the data's statistics."""
    return nu_apply(nu_params, standardize(features, data.feature_mean, data.feature_std))


def dual_loss(
    config: DiceConfig, nu_apply, nu_params, dual, data: DiceData, problem: DiceProblem,
    steps: jax.Array, starts: jax.Array, expected: jax.Array | None = None,
    mass: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array]:  # fmt: skip
    """``L(nu, mu)`` (module docstring) on the transitions ``steps`` and the episodes
    ``starts`` (index arrays); returns the loss and the sampled Bellman residuals ``e``.

    With ``mass`` (the multiplier ``lambda >= 0`` of the mass bound ``c_1 E_D[w] <= 1``) it is
    ``L(nu, mu, lambda)``: every residual is shifted to ``e - lambda`` and ``lambda`` is added,
    and the residuals returned are the shifted ones, those the ratio ``w*`` reads.

    With ``expected`` (an estimate of ``E[e | s, a]`` per step, no gradient) the inner
    maximum is taken at ``w* = w*(expected)``, i.e. the Lagrangian ``E_D[w* e - alpha f(w*)]``
    replaces ``E_D[alpha f*(e / alpha)]``: its gradient in ``nu`` and ``mu`` is the dual's
    gradient without the bias of plugging one sampled ``s'`` into a nonlinear ``f*``.
    """

    def nu_of(features):
        return nu_values(nu_apply, nu_params, data, features)

    mu = problem.outer.multipliers(dual)
    features = data.features[steps]
    if config.gradient_penalty > 0:
        value, value_grad = jax.vmap(jax.value_and_grad(nu_of))(features)
        penalty = config.gradient_penalty * jnp.mean(jnp.sum(value_grad**2, axis=-1))
    else:  # no per-sample gradient of nu to take
        value, penalty = nu_of(features), jnp.zeros(())
    e = (
        problem.rewards[steps] @ mu / problem.scale
        + data.continues[steps] * nu_of(data.next_features[steps])
        - value
    )
    if mass is not None:
        e = e - mass
        # w* takes no gradient (as ``expected``): the Lagrangian's gradient in lambda is then
        # the dual's, 1 - c_1 E_D[w*]
        expected = None if expected is None else expected - jax.lax.stop_gradient(mass)
    if expected is None:
        inner = config.alpha * conjugate(config.divergence, e / config.alpha)
    else:
        w = ratio(config.divergence, expected / config.alpha)
        inner = w * e - config.alpha * f_value(config.divergence, w)
    outer_term = (mu @ problem.offset - problem.outer.conjugate(mu)) / problem.scale
    initial = jnp.mean(nu_of(data.initial_features[starts]))
    loss = problem.initial_weight * (outer_term + initial) + problem.step_weight * jnp.mean(inner)
    if mass is not None:
        loss = loss + mass
    return loss + penalty, e


def residual_inputs(data: DiceData, steps: jax.Array) -> jax.Array:
    """The expected-residual network's input: the standardised features and the action."""
    features = standardize(data.features[steps], data.feature_mean, data.feature_std)
    return jnp.concatenate([features, data.actions[steps]], axis=-1)


def policy_rows(data: DiceData) -> jax.Array:
    """The policy's input at each step row: ``data.policy_features`` where given, else the
    features ``nu`` reads."""
    return data.features if data.policy_features is None else data.policy_features


def policy_statistics(data: DiceData, conditioned: bool) -> tuple[jax.Array, jax.Array]:
    """The policy input's normalisation ``(mean, std)``: its features' (:func:`policy_rows`),
    followed, for a policy conditioned on the behaviour labels, by the labels' own (over the
    same steps)."""
    if data.policy_features is None:
        mean, std = data.feature_mean, data.feature_std
    else:
        mean, std = feature_statistics(data.policy_features, data.count)
    if not conditioned:
        return mean, std
    label_mean, label_std = feature_statistics(data.labels, data.count)
    return jnp.concatenate([mean, label_mean]), jnp.concatenate([std, label_std])


def policy_inputs(features: jax.Array, policy_stats, labels: jax.Array | None) -> jax.Array:
    """The policy network's input: the features, followed by the behaviour labels when the
    policy is conditioned on them, standardised with ``policy_stats``
    (:func:`policy_statistics`)."""
    if labels is not None:
        labels = jnp.broadcast_to(labels, (*features.shape[:-1], labels.shape[-1]))
        features = jnp.concatenate([features, labels], axis=-1)
    return standardize(features, *policy_stats)


def policy_loss(
    policy_apply, policy_params, data: DiceData, policy_stats, steps: jax.Array,
    weights: jax.Array, conditioned: bool = False,
) -> jax.Array:  # fmt: skip
    """Weighted behaviour cloning: ``-sum w log pi(a|s[, b]) / sum w`` over the batch."""
    labels = data.labels[steps] if conditioned else None
    features = policy_inputs(policy_rows(data)[steps], policy_stats, labels)
    log_prob = mixture_log_prob(*policy_apply(policy_params, features), data.actions[steps])
    return -jnp.sum(weights * log_prob) / jnp.maximum(jnp.sum(weights), 1e-8)


def _schedule(config: DiceConfig, rate: float):
    """``rate``, decayed by a cosine to ``final_lr_fraction * rate`` over the iterations."""
    if config.final_lr_fraction == 1.0:
        return rate
    return optax.cosine_decay_schedule(rate, config.iterations, config.final_lr_fraction)


def _critic(params: DiceParams) -> dict:
    """The parameters the dual loss trains, by name (the optimiser's labels)."""
    return {"nu": params.nu, "dual": params.dual, "residual": params.residual, "mass": params.mass}


def make_fit(config: DiceConfig, action_size: int, *, weighted: bool = True):
    """``fit(data, problem, key) -> DiceResult``: one jitted scan of ``config.iterations``
    Adam steps on ``nu``, ``mu``, the expected-residual network and the policy (concurrently,
    as FairDICE trains ``nu``, ``mu`` and the policy). With ``weighted=False`` the policy is
    plain behaviour cloning (``w = 1``; conditioned on the behaviour labels with
    ``config.behaviour_conditioned``, as BC(P)) and nothing else is trained. ``fit`` is pure,
    so it ``vmap``s over problems and keys.

    The ratio is ``w*(e_phi(s, a) / alpha)`` with ``e_phi`` an estimate of
    ``E[e | s, a] = mu^T E[r | s, a] / sigma + E[gamma_t nu(s') | s, a] - nu(s)``: a
    residual model (a ``ValueNetwork`` with ``k + 1`` outputs) regresses (least squares) the
    reward vector over its standard deviation and the bootstrap ``gamma_t nu(s')`` on
    ``(s, a)``, and ``mu`` and ``nu(s)`` enter as they are. OptiDICE's reference code fits
    such a model (one output, the whole residual) for its policy's weights, but its ``nu``
    loss puts the sampled residual in ``w*``; here (ours) the dual's gradient in ``nu`` and
    ``mu`` takes ``w*`` at ``e_phi`` too (:func:`dual_loss`'s ``expected``), and the model's
    outputs keep the rewards apart from ``mu``. The sampled residual in ``w*`` is biased under
    stochastic transitions: on the balance task's data it ranked actions by their lucky
    outcomes and learned a policy worse than the data's; ``w*(E[e | s, a])`` recovers the
    optimum there (``tests/rl/test_aetdice.py``). The reward part does not depend on ``mu``,
    so a moving ``mu`` does not leave the estimate behind, as a regression of the whole
    residual did.

    The critic's learning rates (``nu``, ``mu``, ``e_phi``) decay to ``final_lr_fraction`` of
    theirs, the policy's stays constant. With small ``alpha`` the ratios are steep in ``mu``,
    and at a constant rate the stochastic gradients kept ``mu`` jittering around the optimum
    and drifting; the policy, fitted to the weights of the moment, followed it (balance task,
    SER Tchebycheff at 6000 iterations, otherwise the ``morl`` suite's setting: gaps to the
    optimum of 21% at a constant rate, 3% with the decay).
    """
    config = config.checked()
    nu_net, policy_net = _networks(config, action_size)
    critic_optimizer = optax.multi_transform(
        {
            "nu": optax.adam(_schedule(config, config.learning_rate)),
            "dual": optax.adam(_schedule(config, config.dual_learning_rate)),
            "residual": optax.adam(_schedule(config, config.learning_rate)),
            "mass": (
                optax.adam(_schedule(config, config.mass_learning_rate))
                if config.mass_constraint
                else optax.set_to_zero()
            ),
        },
        {"nu": "nu", "dual": "dual", "residual": "residual", "mass": "mass"},
    )
    policy_optimizer = optax.adam(config.learning_rate)

    conditioned = config.behaviour_conditioned

    def fit(data: DiceData, problem: DiceProblem, key: jax.Array) -> DiceResult:
        if conditioned and data.labels is None:
            raise ValueError(
                "behaviour_conditioned=True needs the data's behaviour labels (DiceData.labels: "
                "each step's behaviour preference), got None"
            )
        feature_size = data.features.shape[-1]
        reward_size = problem.rewards.shape[-1]
        # (s, a) -> (E[r_i / std_i | s, a] for each objective i, E[gamma_t nu(s') | s, a]):
        # the parts of the expected Bellman residual that need a regression
        residual_net = ValueNetwork(config.hidden, outputs=reward_size + 1)
        reward_std = jnp.maximum(row_moments(problem.rewards, data.count)[1], 1e-8)
        k_nu, k_residual, k_pi, k_run = jax.random.split(key, 4)
        dummy = jnp.zeros((1, feature_size))
        label_size = data.labels.shape[-1] if conditioned else 0
        policy_size = policy_rows(data).shape[-1]
        params = DiceParams(
            nu=nu_net.init(k_nu, dummy),
            dual=problem.initial_dual,
            policy=policy_net.init(k_pi, jnp.zeros((1, policy_size + label_size))),
            residual=residual_net.init(k_residual, jnp.zeros((1, feature_size + action_size))),
            mass=jnp.zeros(()),
        )
        critic = _critic(params)
        carry = (params, critic_optimizer.init(critic), policy_optimizer.init(params.policy))
        policy_stats = policy_statistics(data, conditioned)
        num_steps, num_episodes = step_count(data), data.initial_features.shape[0]

        def nu_terms(nu_params, steps):
            """``nu(s)`` and the bootstrap ``gamma_t nu(s')`` on the batch. ``dual_loss``
            runs the same forward passes. XLA's common-subexpression pass merges such
            repeats (a toy MLP's compiled value-and-gradient has the same dot count with and
            without a repeat under ``stop_gradient``), so they should cost nothing."""
            value = nu_values(nu_net.apply, nu_params, data, data.features[steps])
            after = nu_values(nu_net.apply, nu_params, data, data.next_features[steps])
            return value, data.continues[steps] * after

        def critic_loss(critic, steps, starts):
            predicted = residual_net.apply(critic["residual"], residual_inputs(data, steps))
            rewards = problem.rewards[steps] / reward_std[None, :]
            nu, bootstrap = jax.lax.stop_gradient(nu_terms(critic["nu"], steps))
            mu = jax.lax.stop_gradient(problem.outer.multipliers(critic["dual"]))
            expected = (
                (predicted[:, :reward_size] * reward_std[None, :]) @ mu / problem.scale
                + predicted[:, reward_size]
                - nu
            )
            regression = jnp.mean(jnp.sum((predicted[:, :reward_size] - rewards) ** 2, -1))
            regression += jnp.mean((predicted[:, reward_size] - bootstrap) ** 2)
            expected = jax.lax.stop_gradient(expected)
            mass = critic["mass"] if config.mass_constraint else None
            loss, _ = dual_loss(
                config, nu_net.apply, critic["nu"], critic["dual"], data, problem, steps,
                starts, expected, mass,
            )  # fmt: skip
            # the ratios' argument: the expected residual less the mass bound's multiplier
            return loss + regression, (loss, expected - critic["mass"])

        def step(carry, key):
            params, critic_state, policy_state = carry
            k_steps, k_starts = jax.random.split(key)
            steps = jax.random.randint(k_steps, (config.batch_size,), 0, num_steps)
            starts = jax.random.randint(k_starts, (config.batch_size,), 0, num_episodes)
            critic = _critic(params)
            if weighted:
                (_, (loss, expected)), grads = jax.value_and_grad(critic_loss, has_aux=True)(
                    critic, steps, starts
                )
                updates, critic_state = critic_optimizer.update(grads, critic_state, critic)
                critic = optax.apply_updates(critic, updates)
                # projected onto lambda >= 0 (the bound is an inequality)
                critic["mass"] = jnp.maximum(critic["mass"], 0.0)
                weights = ratio(config.divergence, expected / config.alpha)
            else:
                loss = jnp.zeros(())
                weights = jnp.ones((config.batch_size,))
            pi_loss, pi_grads = jax.value_and_grad(
                lambda p: policy_loss(
                    policy_net.apply, p, data, policy_stats, steps, weights, conditioned
                )
            )(params.policy)
            pi_updates, policy_state = policy_optimizer.update(pi_grads, policy_state)
            policy = optax.apply_updates(params.policy, pi_updates)
            params = DiceParams(
                critic["nu"], critic["dual"], policy, critic["residual"], critic["mass"]
            )
            metrics = {
                "loss": loss,
                "policy_loss": pi_loss,
                "ratio_mean": jnp.mean(weights),
                "ratio_max": jnp.max(weights),
                "mu": problem.outer.multipliers(params.dual),
                "mass": params.mass,
            }
            return (params, critic_state, policy_state), metrics

        keys = jax.random.split(k_run, config.iterations)
        (params, _, _), metrics = jax.lax.scan(step, carry, keys)
        return DiceResult(params, metrics)

    return fit


def policy_action(
    config: DiceConfig, action_size: int, policy_params, policy_stats, features: jax.Array,
    key: jax.Array | None = None, label: jax.Array | None = None,
) -> jax.Array:  # fmt: skip
    """The policy's action at ``features`` (with ``label``, the behaviour label a conditioned
    policy acts at; normalised with ``policy_stats = (mean, std)`` as in training), clipped to
    ``[-1, 1]``: the mean of the mixture's most probable component, or a sample when ``key``
    is given."""
    _, policy_net = _networks(config, action_size)
    inputs = policy_inputs(features, policy_stats, label)
    logits, means, log_stds = policy_net.apply(policy_params, inputs)
    if key is None:
        action = mixture_mode(logits, means)
    else:
        action = mixture_sample(key, logits, means, log_stds)
    return jnp.clip(action, -1.0, 1.0)
