"""The jax in use computes the reduce-then-broadcast pattern of batched estimates correctly."""

import inspect
import subprocess
import sys

import jaxopt_suite  # noqa: F401  (installs the jaxlib guard before any computation)


def _reduce_then_broadcast_check():
    # jaxlib 0.10.2 returns wrong rows past ~32k elements here (jax-ml/jax#39103). Imports
    # inside: a child process runs this function's source on its own
    import jax
    import jax.numpy as jnp
    import numpy as np

    weights = jnp.linspace(0.5, 1.5, 6)
    directions = jax.random.normal(jax.random.key(0), (20_000, 6))
    fused = jax.jit(lambda u: jnp.sum(weights[None, :] * u**2, axis=1, keepdims=True) * u)(
        directions
    )
    u = np.asarray(directions, np.float64)
    reference = (np.asarray(weights, np.float64) * u**2).sum(1, keepdims=True) * u
    np.testing.assert_allclose(np.asarray(fused), reference, rtol=1e-4, atol=1e-4)


def test_reduce_then_broadcast_is_compiled_correctly():
    _reduce_then_broadcast_check()


def test_reduce_then_broadcast_is_compiled_correctly_as_users_compile(child_environment):
    # the test above compiles with the suite's flags (tests/conftest.py), which turn XLA's
    # fusion emitters off; users' programs compile with XLA's defaults, under which the
    # defect was found, so the same check runs once more in a process of its own under those
    code = (
        "import jaxopt_suite\n"
        + inspect.getsource(_reduce_then_broadcast_check)
        + "_reduce_then_broadcast_check()\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", code], env=child_environment(), capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
