"""Reinforcement learning: the shared pieces (GAE, the trust-region step of CPO and its
relatives) and the safe-RL algorithms built on them."""

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
