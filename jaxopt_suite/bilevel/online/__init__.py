"""Online bilevel optimisation: AOBO, FSOBO and WOBO (seed abstract 17) against OAGD and
SOBOW, on streams of ``(f_t, g_t)`` with exact or estimated local-regret accounting."""

from jaxopt_suite.bilevel.online.algorithms import (
    OK,
    OnlineSolver,
    OnlineState,
    aobo,
    explain,
    fsobo,
    wobo,
)
from jaxopt_suite.bilevel.online.baselines import oagd, sobow
from jaxopt_suite.bilevel.online.problem import (
    ExactOracle,
    OnlineBilevelProblem,
    implicit_oracle,
    stream_from_arrays,
    window_hypergradient,
)
from jaxopt_suite.bilevel.online.quadratic import QuadraticStream, quadratic_stream
from jaxopt_suite.bilevel.online.regret import OnlineResult, fit_power_law, run_online

__all__ = [
    "OK",
    "ExactOracle",
    "OnlineBilevelProblem",
    "OnlineResult",
    "OnlineSolver",
    "OnlineState",
    "QuadraticStream",
    "aobo",
    "explain",
    "fit_power_law",
    "fsobo",
    "implicit_oracle",
    "oagd",
    "quadratic_stream",
    "run_online",
    "sobow",
    "stream_from_arrays",
    "window_hypergradient",
    "wobo",
]
