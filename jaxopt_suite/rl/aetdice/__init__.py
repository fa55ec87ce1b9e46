"""Offline nonlinear multi-objective RL: AETDICE (seed abstract 19) and its baselines.

* :mod:`.utilities`: linear, Nash-welfare, Tchebycheff, threshold and risk-averse utilities,
  and the AET objectives ``g(E[h(G)])`` with SER (:func:`ser`) and ESR (:func:`esr`);
* :mod:`.dice`: the DICE dual, closed-form ratios and the training scan shared by all;
* :mod:`.aetdice`: :func:`train_aetdice`, finite-horizon DICE on augmented states;
* :mod:`.baselines`: :func:`train_optidice` (linear), :func:`train_serdice` (FairDICE-style
  SER) and :func:`train_bc` (preference-conditioned behaviour cloning);
* :mod:`.policy`: :class:`TrainedPolicy`, :func:`rollout_returns` and :func:`evaluate`
  (online evaluation);
* :mod:`.exact`: exact optima on the balance task.
"""

from jaxopt_suite.rl.aetdice.aetdice import train_aetdice
from jaxopt_suite.rl.aetdice.baselines import train_bc, train_optidice, train_serdice
from jaxopt_suite.rl.aetdice.dice import DIVERGENCES, DiceConfig
from jaxopt_suite.rl.aetdice.policy import TrainedPolicy, evaluate, rollout_returns
from jaxopt_suite.rl.aetdice.utilities import (
    AET,
    aet_value,
    esr,
    linear,
    nash_welfare,
    risk_averse,
    ser,
    tchebycheff,
    threshold,
)

METHODS = {
    "aetdice": train_aetdice,
    "optidice": train_optidice,
    "serdice": train_serdice,
    "bc": train_bc,
}

__all__ = [
    "AET",
    "DIVERGENCES",
    "METHODS",
    "DiceConfig",
    "TrainedPolicy",
    "aet_value",
    "evaluate",
    "esr",
    "linear",
    "nash_welfare",
    "risk_averse",
    "rollout_returns",
    "ser",
    "tchebycheff",
    "threshold",
    "train_aetdice",
    "train_bc",
    "train_optidice",
    "train_serdice",
]
