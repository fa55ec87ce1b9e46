"""Zeroth-order gradient estimators as optax transforms and pure functions.

Members (each ``scale_by_*`` returns an ``optax.GradientTransformationExtraArgs`` whose
``update(updates, state, params, *, value_fn, **extra)`` ignores ``updates`` and returns a
gradient estimate, so it goes first in an ``optax.chain``):

* :func:`scale_by_spsa` -- SPSA with Rademacher probes (baseline);
* :func:`scale_by_gaussian_smoothing` -- two-point Gaussian smoothing (baseline);
* :func:`scale_by_szo` -- SZO-kappa, probes on the top activation eigenspace of each layer
  (extra arg ``activations``);
* :func:`scale_by_cv_zod` -- CV-ZOD, control variates from a directional hint
  (extra arg ``hint``).
"""

from jaxopt_suite.zeroth_order._common import Estimate, ZerothOrderState
from jaxopt_suite.zeroth_order.activations import (
    conv_patches,
    equinox_forward_with_activations,
    flax_forward_with_activations,
)
from jaxopt_suite.zeroth_order.cv_zod import (
    CVZODEstimate,
    CVZODState,
    alpha2_from,
    cv_zod_estimate,
    hint_basis,
    scale_by_cv_zod,
)
from jaxopt_suite.zeroth_order.gaussian_smoothing import (
    ScaleByGaussianSmoothingState,
    gaussian_smoothing_estimate,
    scale_by_gaussian_smoothing,
)
from jaxopt_suite.zeroth_order.spsa import ScaleBySPSAState, scale_by_spsa, spsa_estimate
from jaxopt_suite.zeroth_order.szo import SZOEstimate, SZOState, scale_by_szo, szo_estimate

__all__ = [
    "CVZODEstimate",
    "CVZODState",
    "Estimate",
    "SZOEstimate",
    "SZOState",
    "ScaleByGaussianSmoothingState",
    "ScaleBySPSAState",
    "ZerothOrderState",
    "alpha2_from",
    "conv_patches",
    "cv_zod_estimate",
    "equinox_forward_with_activations",
    "flax_forward_with_activations",
    "gaussian_smoothing_estimate",
    "hint_basis",
    "scale_by_cv_zod",
    "scale_by_gaussian_smoothing",
    "scale_by_spsa",
    "scale_by_szo",
    "spsa_estimate",
    "szo_estimate",
]
