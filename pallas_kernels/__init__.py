"""Pallas kernels (block-sparse batched SpMM for the batched LP solver); none yet."""
