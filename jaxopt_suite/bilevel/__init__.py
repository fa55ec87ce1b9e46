"""Stochastic bilevel optimisation: SOBA, MA-SOBA, BROS and an implicit-differentiation
reference over a common :class:`BilevelProblem` (see :mod:`.problem`, :mod:`.solvers`)."""

from jaxopt_suite.bilevel import subspace
from jaxopt_suite.bilevel.problem import (
    BilevelProblem,
    cross_term,
    directional_derivative,
    grad_and_hvp,
    hvp,
    joint_vjp,
)
from jaxopt_suite.bilevel.solvers import (
    OK,
    BilevelState,
    RunResult,
    Solver,
    bros,
    bros_directions,
    explain,
    implicit_hypergradient,
    implicit_reference,
    ma_soba,
    run,
    soba,
)
from jaxopt_suite.bilevel.subspace import Factorized, dense, materialize

__all__ = [
    "OK",
    "BilevelProblem",
    "BilevelState",
    "Factorized",
    "RunResult",
    "Solver",
    "bros",
    "bros_directions",
    "cross_term",
    "dense",
    "directional_derivative",
    "explain",
    "grad_and_hvp",
    "hvp",
    "implicit_hypergradient",
    "implicit_reference",
    "joint_vjp",
    "ma_soba",
    "materialize",
    "run",
    "soba",
    "subspace",
]
