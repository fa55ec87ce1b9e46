"""Strict jax settings and shared fixtures for the whole test suite."""

import jax
import pytest

jax.config.update("jax_numpy_rank_promotion", "raise")


@pytest.fixture
def key():
    return jax.random.key(0)


# The longest test files run first: `make test` spreads whole files over its processes
# (pytest-xdist, --dist loadfile) in collection order, and a long file collected last would
# be left running alone at the end.
_LONGEST_FILES = (
    "tests/test_examples.py",
    "tests/rl/test_aetdice.py",
    "tests/robust/test_simulator.py",
    "tests/rl/test_training.py",
)


def pytest_collection_modifyitems(config, items):
    def rank(item):
        path = item.nodeid.split("::", 1)[0]
        return _LONGEST_FILES.index(path) if path in _LONGEST_FILES else len(_LONGEST_FILES)

    items.sort(key=rank)  # stable: each file's tests keep their order
