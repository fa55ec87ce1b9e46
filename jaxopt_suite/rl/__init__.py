"""Reinforcement learning: the shared pieces (GAE, the trust-region step of CPO and its
relatives), exported here, and the safe-RL algorithms built on them, which need the ``rl``
extra (Brax, flax, orbax) and are imported from their modules:

* :mod:`.constrained`: ``cpo``, ``scpo``, ``ascpo`` (``TrustRegionConfig``, ``make_train``);
* :mod:`.ppo_lagrangian`: ``ppo_lagrangian`` and ASCPO's PPO-clip variant ``ppo_ascpo``;
* :mod:`.training`: checkpoints and resume, the progress bar, evaluation of the
  deterministic or the sampled policy.
"""

from jaxopt_suite.rl.gae import gae
from jaxopt_suite.rl.trust_region import (
    CGResult,
    CPODirection,
    LineSearchResult,
    backtracking_line_search,
    conjugate_gradient,
    cpo_direction,
    fisher_vector_product,
)

__all__ = [
    "CGResult",
    "CPODirection",
    "LineSearchResult",
    "backtracking_line_search",
    "conjugate_gradient",
    "cpo_direction",
    "fisher_vector_product",
    "gae",
]
