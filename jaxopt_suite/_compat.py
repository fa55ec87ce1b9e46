"""Guards against known defects of the jax versions this package can meet."""

from __future__ import annotations

import os
import warnings

YNN_FLAG = "--xla_cpu_experimental_ynn_fusion_type="


def guard_jaxlib_ynn_miscompile() -> None:
    """jaxlib 0.10.2 miscompiles reduce-then-broadcast fusions on CPU (jax-ml/jax#39103).

    ``jnp.sum(c * u**2, axis=1, keepdims=True) * u`` on a (20000, 6) array returns wrong rows
    under ``jit`` -- the exact shape of a batch of zeroth-order estimates. The pyproject
    excludes 0.10.2; if it is installed anyway, this turns the offending YNN fusions off
    (before the backend starts) or warns when it is too late to do so.
    """
    import jaxlib

    if jaxlib.__version__ != "0.10.2" or "ynn_fusion_type" in os.environ.get("XLA_FLAGS", ""):
        return
    from jax._src import xla_bridge

    if xla_bridge.backends_are_initialized():
        warnings.warn(
            "jaxlib 0.10.2 silently miscompiles some CPU reductions (jax-ml/jax#39103) and "
            f"its backend is already running: restart with XLA_FLAGS={YNN_FLAG} or use "
            "jax 0.10.1",
            RuntimeWarning,
            stacklevel=3,
        )
        return
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + YNN_FLAG).strip()


EIGEN_FLAG = "--xla_cpu_multi_thread_eigen=false"


def set_safe_cpu_flags() -> bool:
    """Runs XLA:CPU's Eigen kernels single-threaded, avoiding a thread-pool wedge.

    With jaxlib 0.10.x the CPU runtime occasionally leaves every worker idle while the
    caller waits forever for a vmapped result (reported upstream, e.g. PyAutoFit#1530;
    seen here on the zo benchmark). Single-threaded Eigen avoids it at a small cost on
    2-core machines. The command line and the test suite call this before any
    computation; library imports do not, so user programs keep their own settings.

    Returns:
      True if the flag is in effect for the backend this process will start.
    """
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_cpu_multi_thread_eigen" in flags:
        return EIGEN_FLAG in flags
    from jax._src import xla_bridge

    if xla_bridge.backends_are_initialized():
        warnings.warn(
            f"the jax backend is already running, so {EIGEN_FLAG} cannot take effect",
            RuntimeWarning,
            stacklevel=2,
        )
        return False
    os.environ["XLA_FLAGS"] = (flags + " " + EIGEN_FLAG).strip()
    return True
