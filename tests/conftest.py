"""Strict jax settings and shared fixtures for the whole test suite."""

import os

# Most of the suite's time is XLA:CPU compiling many small programs once each. A lighter LLVM
# pipeline compiles them faster (the balance-task AETDICE example: 32 s against 44 s) and the
# programs still compute the same functions; a run's floats may differ in the last bits from
# the default pipeline's, as they do between CPUs. A test whose outcome follows a long
# training trajectory must hold under both (the ASCPO training test in tests/rl/test_training.py
# did not at 80 iterations, and runs 160). Set before jax starts its backend; a caller's own
# XLA_FLAGS come after these and win.
LIGHT_LLVM_FLAGS = "--xla_backend_optimization_level=1 --xla_llvm_disable_expensive_passes=true"
# XLA:CPU's legacy elementwise emitters instead of its MLIR fusion emitters: the same functions,
# compiled in about half the time (the x64 test of tests/robust/test_simulator.py: 9.4 s of
# backend compile against 17.3 s). Its rounding differs again; the jax#39103 check runs once
# more under XLA's defaults (tests/test_compat.py).
_TEST_XLA_FLAGS = f"{LIGHT_LLVM_FLAGS} --xla_cpu_use_fusion_emitters=false"
# the caller's own flags, as the first process saw them: pytest-xdist's workers inherit the
# environment this module has already set in the process that started them
CALLER_XLA_FLAGS = os.environ.setdefault(
    "JAXOPT_SUITE_TEST_CALLER_XLA_FLAGS", os.environ.get("XLA_FLAGS", "")
)
os.environ["XLA_FLAGS"] = f"{_TEST_XLA_FLAGS} {CALLER_XLA_FLAGS}".strip()

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_numpy_rank_promotion", "raise")


@pytest.fixture
def key():
    return jax.random.key(0)


@pytest.fixture
def child_environment():
    """``environment(flags="")``: this process's environment for a child process whose
    XLA_FLAGS are ``flags`` followed by the caller's own, without the suite's test flags
    (``flags=""``: XLA's defaults, as users compile)."""

    def environment(flags: str = "") -> dict[str, str]:
        return {**os.environ, "XLA_FLAGS": f"{flags} {CALLER_XLA_FLAGS}".strip()}

    return environment


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """Drops jax's compiled programs after each test file. XLA:CPU maps memory for every
    executable it keeps, and jax keeps them all: tests/lp alone left a process with 7665
    memory maps (945 when cleared per file), so a make-test worker that runs half the suite
    heads for the kernel's limit (vm.max_map_count, 65530 here). Two make-test runs had a
    worker segfault inside an XLA compile late in the run (in test_examples.py and
    test_padded_steps.py), and xdist then hung; the map limit is the likely cause."""
    yield
    jax.clear_caches()


# The longest test files run first, longest first: `make test` spreads whole files over its
# processes (pytest-xdist, --dist loadfile) in collection order, each process taking the next
# file when it is free, and a long file collected last would be left running alone at the
# end. The order is that of the files' summed durations in one make-test run
# (`pytest -n 2 --dist loadfile --durations=0`, the 18 files of 36 s and over); the rest
# follow in collection order.
_LONGEST_FILES = (
    "tests/robust/test_simulator.py",
    "tests/rl/test_aetdice.py",
    "tests/test_examples.py",
    "tests/rl/test_training.py",
    "tests/pwl/test_bnb.py",
    "tests/boosting/test_estimators.py",
    "tests/lp/test_pdlp.py",
    "tests/envs/test_x64.py",
    "tests/bilevel/test_tasks.py",
    "tests/envs/test_multi_objective.py",
    "tests/boosting/test_fit.py",
    "tests/robust/test_far_sign.py",
    "tests/bilevel/online/test_learners.py",
    "tests/bilevel/test_solvers.py",
    "tests/zeroth_order/test_statistics.py",
    "tests/envs/test_brax.py",
    "tests/bilevel/test_errors.py",
    "tests/zeroth_order/test_contract.py",
)


def pytest_collection_modifyitems(config, items):
    def rank(item):
        path = item.nodeid.split("::", 1)[0]
        return _LONGEST_FILES.index(path) if path in _LONGEST_FILES else len(_LONGEST_FILES)

    items.sort(key=rank)  # stable: each file's tests keep their order
