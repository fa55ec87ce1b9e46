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
