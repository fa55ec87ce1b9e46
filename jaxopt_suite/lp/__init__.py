"""Linear programming in bound form: the :class:`LP` type and MPS input/output."""

from jaxopt_suite.lp.mps import MPSError, read_mps, write_mps
from jaxopt_suite.lp.problem import LP

__all__ = ["LP", "MPSError", "read_mps", "write_mps"]
