"""Newton-type gradient boosting with jit-compiled histogram trees: XGBoost-style Newton,
gradient-regularised Newton (GRN), weak-AICN, and Newton coordinate descent.

``fit_boosting(X, y, BoostingConfig(...), key)`` is the functional core (one ``lax.scan``
over rounds); :mod:`.trees` grows the trees, :mod:`.steps` holds the step rules.
"""

from jaxopt_suite.boosting.binning import BinEdges, apply_bins, fit_bins
from jaxopt_suite.boosting.fit import (
    LEARNERS,
    SELECTIONS,
    BoostingConfig,
    BoostingModel,
    BoostingResult,
    FitStatus,
    fit_boosting,
    predict_raw,
)
from jaxopt_suite.boosting.losses import LOSSES, Loss, custom, get_loss
from jaxopt_suite.boosting.steps import STEPS, aicn_alpha
from jaxopt_suite.boosting.trees import Tree, TreeFit, grow_tree, tree_predict

__all__ = [
    "LEARNERS",
    "LOSSES",
    "SELECTIONS",
    "STEPS",
    "BinEdges",
    "BoostingConfig",
    "BoostingModel",
    "BoostingResult",
    "FitStatus",
    "Loss",
    "Tree",
    "TreeFit",
    "aicn_alpha",
    "apply_bins",
    "custom",
    "fit_bins",
    "fit_boosting",
    "get_loss",
    "grow_tree",
    "predict_raw",
    "tree_predict",
]
