"""Strict jax settings and shared fixtures for the whole test suite."""

import jax
import pytest

from jaxopt_suite._compat import set_safe_cpu_flags

# Before any computation: XLA:CPU's multi-threaded Eigen pool can wedge (see the helper).
set_safe_cpu_flags()
jax.config.update("jax_numpy_rank_promotion", "raise")


@pytest.fixture
def key():
    return jax.random.key(0)
