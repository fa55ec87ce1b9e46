"""Brax environments with state-wise costs and vector rewards; none yet."""
