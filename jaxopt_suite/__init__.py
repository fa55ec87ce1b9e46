"""jaxopt_suite: JAX-native optimization methods, jit-compiled and optax-composable.

Unrelated to the deprecated ``jaxopt`` package (which it uses for implicit differentiation).
"""

from jaxopt_suite._compat import guard_jaxlib_ynn_miscompile

guard_jaxlib_ynn_miscompile()

__version__ = "0.1.0"
