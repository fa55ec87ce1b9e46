"""The shared argument checks: what they accept and how they say what they refuse."""

import jax.numpy as jnp
import numpy as np
import pytest

from jaxopt_suite._checks import check_finite_positive, check_integer


@pytest.mark.parametrize("value", ["0.5", b"3", [0.1, "2"]])
def test_strings_are_not_numbers(value):
    with pytest.raises(ValueError, match=r"lr must be finite and > 0 \(a real number\)"):
        check_finite_positive("lr", value)


def test_numbers_and_arrays_of_them_pass():
    for value in (0.5, 2, np.float32(1e-3), jnp.float32(2.0), [0.1, 0.2]):
        check_finite_positive("lr", value)


def test_integers_and_integer_arrays():
    assert check_integer("n", 3, 1) == 3 and check_integer("n", np.int64(4), 1) == 4
    assert type(check_integer("n", np.int64(4), 1)) is int
    for value in (jnp.int32(3), np.array(3)):  # a count that fixes a shape: a Python int
        with pytest.raises(ValueError, match="n must be an integer >= 1 given as a Python or"):
            check_integer("n", value, 1)
    for value in (True, 2.5, 0):
        with pytest.raises(ValueError, match=f"n must be an integer >= 1, got {value!r}"):
            check_integer("n", value, 1)
