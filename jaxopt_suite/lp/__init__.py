"""Linear programming in bound form: the :class:`LP` type, MPS input/output,
preconditioning, and ``solve_lp`` (restarted Halpern PDHG) with a safe dual bound."""

from jaxopt_suite.lp import instances
from jaxopt_suite.lp.bounds import implied_bounds
from jaxopt_suite.lp.mps import MPSError, read_mps, write_mps
from jaxopt_suite.lp.pdlp import (
    PARKED,
    BlockOperator,
    LPBatch,
    LPBatchSolution,
    LPOptions,
    LPSolution,
    Status,
    batch_advance,
    batch_park,
    batch_refill,
    batch_resize,
    batch_solution,
    batch_start,
    dual_bound,
    infeasibility_bound,
    solve_lp,
    solve_lp_batch,
)
from jaxopt_suite.lp.precondition import Scaling, precondition
from jaxopt_suite.lp.problem import LP

__all__ = [
    "LP",
    "LPBatch",
    "PARKED",
    "batch_advance",
    "batch_park",
    "batch_refill",
    "batch_resize",
    "batch_solution",
    "batch_start",
    "BlockOperator",
    "LPBatchSolution",
    "LPOptions",
    "LPSolution",
    "MPSError",
    "Scaling",
    "Status",
    "dual_bound",
    "implied_bounds",
    "infeasibility_bound",
    "instances",
    "precondition",
    "read_mps",
    "solve_lp",
    "solve_lp_batch",
    "write_mps",
]
