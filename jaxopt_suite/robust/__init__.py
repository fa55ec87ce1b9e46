"""Byzantine-robust distributed learning: FAR-SIGN, robust aggregators, attacks.

* :mod:`.far_sign`: FAR-SIGN, one-bit signed projections on server-designed directions
  with a two-timescale bias correction (first and zeroth order; the update rules are a
  reconstruction, documented there), an optional server-side screen of the workers, and
  :func:`scale_by_far_sign` for the synchronous case;
* :mod:`.aggregators`: mean, coordinate median, trimmed mean, Krum / Multi-Krum,
  geometric median, centered clipping, signSGD majority vote;
* :mod:`.attacks`: sign flip, Gaussian noise, label flip, ALIE, IPM, and a
  direction-aware attack on FAR-SIGN.
"""

from jaxopt_suite.robust.aggregators import (
    AGGREGATORS,
    TOLERANCE,
    centered_clipping,
    coordinate_median,
    geometric_median,
    krum,
    make_aggregator,
    mean,
    multi_krum,
    sign_majority,
    stack,
    trimmed_mean,
)
from jaxopt_suite.robust.attacks import ATTACKS, Attack, alie_z, make_attack
from jaxopt_suite.robust.far_sign import (
    Directions,
    FarSignState,
    Screen,
    ServerState,
    default_schedules,
    directions,
    hadamard,
    scale_by_far_sign,
    server_init,
    server_step,
    worker_bits,
    worker_bits_zo,
)

__all__ = [
    "AGGREGATORS",
    "ATTACKS",
    "TOLERANCE",
    "Attack",
    "Directions",
    "FarSignState",
    "Screen",
    "ServerState",
    "alie_z",
    "centered_clipping",
    "coordinate_median",
    "default_schedules",
    "directions",
    "geometric_median",
    "hadamard",
    "krum",
    "make_aggregator",
    "make_attack",
    "mean",
    "multi_krum",
    "scale_by_far_sign",
    "server_init",
    "server_step",
    "sign_majority",
    "stack",
    "trimmed_mean",
    "worker_bits",
    "worker_bits_zo",
]
