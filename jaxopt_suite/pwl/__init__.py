"""Piecewise-linear optimisation: models with SOS2 (lambda) formulations, solved by a
batched PDLP branch-and-bound."""

from jaxopt_suite.pwl.bnb import MIPSolution, MIPStatus, PWLOptions, solve_pwl
from jaxopt_suite.pwl.model import CompiledPWL, PWLModel, PWLTerm, Var

__all__ = [
    "CompiledPWL",
    "MIPSolution",
    "MIPStatus",
    "PWLModel",
    "PWLOptions",
    "PWLTerm",
    "Var",
    "solve_pwl",
]
