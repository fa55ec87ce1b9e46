"""Byzantine attacks: what a Byzantine worker sends instead of its honest update.

An attack crafts a flat vector from the worker's own honestly computed update ``own (D,)``
and, for the omniscient attacks, a sample of honest updates ``honest (m, D)`` at the same
parameters:

* ``sign_flip``: ``-scale * own``;
* ``gaussian``: ``N(0, std^2)`` in every coordinate (``std = 200``);
* ``label_flip``: the honest update on flipped labels (``l -> C - 1 - l``): the attack is
  in the data, :attr:`Attack.flips_labels`, and the vector is sent as computed;
* ``alie`` ("a little is enough", Baruch et al., 2019): ``mu - z sigma`` per coordinate
  from the honest mean and standard deviation, ``z = Phi^-1((n - f - s) / (n - f))`` with
  ``s = floor(n / 2 + 1) - f``;
* ``ipm`` (inner-product manipulation, Xie et al., 2020): ``-epsilon * mu``
  (``epsilon = 0.1``);
* ``adaptive``: against FAR-SIGN. It knows each message's directions and sends, on each,
  the bit opposite to the honest mean's (:attr:`Attack.opposes_bits`); its vector form,
  ``-100 mu`` (IPM with ``epsilon = 100``), is only a fallback: the simulator runs this
  attack on FAR-SIGN messages alone.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.scipy.special import ndtri

from jaxopt_suite._checks import check_integer

ATTACKS = ("none", "sign_flip", "gaussian", "label_flip", "alie", "ipm", "adaptive")


class Attack(NamedTuple):
    """``craft(key, own (D,), honest (m, D)) -> (D,)``; ``flips_labels``: the worker trains
    on flipped labels; ``opposes_bits``: on FAR-SIGN messages the worker sends the
    negation of the honest mean's bits (the direction-aware attack)."""

    name: str
    craft: Callable[[jax.Array, jax.Array, jax.Array], jax.Array]
    flips_labels: bool = False
    opposes_bits: bool = False


def alie_z(num_workers: int, num_byzantine: int) -> float:
    """ALIE's ``z_max = Phi^-1((n - f - s) / (n - f))``, ``s = floor(n / 2 + 1) - f``."""
    n, f = num_workers, num_byzantine
    s = math.floor(n / 2 + 1) - f
    q = (n - f - s) / (n - f)
    return float(ndtri(jnp.clip(q, 1e-6, 1 - 1e-6)))


def make_attack(
    name: str,
    *,
    num_workers: int,
    num_byzantine: int,
    scale: float = 1.0,
    std: float = 200.0,
    epsilon: float = 0.1,
) -> Attack:
    """The attack ``name`` of :data:`ATTACKS` for ``num_byzantine`` of ``num_workers``."""
    if name not in ATTACKS:
        raise ValueError(f"attack must be one of {ATTACKS}, got {name!r}")
    check_integer("num_workers", num_workers, 0)
    check_integer("num_byzantine", num_byzantine, 0)
    if not num_byzantine < num_workers:
        raise ValueError(
            f"num_byzantine must be < num_workers, got {num_byzantine} of {num_workers}"
        )
    if name == "none":
        return Attack(name, lambda key, own, honest: own)
    if name == "sign_flip":
        return Attack(name, lambda key, own, honest: -scale * own)
    if name == "gaussian":
        # float32 noise (float64 for float64 updates): the default float64 under
        # jax_enable_x64 drew other noise than without it
        return Attack(
            name,
            lambda key, own, honest: (
                std * jax.random.normal(key, own.shape, jnp.promote_types(own.dtype, jnp.float32))
            ),
        )
    if name == "label_flip":
        return Attack(name, lambda key, own, honest: own, flips_labels=True)
    if name == "alie":
        z = alie_z(int(num_workers), int(num_byzantine))

        def alie(key, own, honest):
            return jnp.mean(honest, axis=0) - z * jnp.std(honest, axis=0)

        return Attack(name, alie)
    if name == "ipm":
        return Attack(name, lambda key, own, honest: -epsilon * jnp.mean(honest, axis=0))
    # adaptive: as a vector, the negated honest mean, made large; on FAR-SIGN bits, exact
    return Attack(
        name, lambda key, own, honest: -100.0 * jnp.mean(honest, axis=0), opposes_bits=True
    )
