"""Strict jax settings and shared fixtures for the whole test suite."""

import jax
import pytest

jax.config.update("jax_numpy_rank_promotion", "raise")


@pytest.fixture
def key():
    return jax.random.key(0)
