"""Pallas kernels: block-sparse times dense-batch products for the batched LP solver."""

from pallas_kernels.bsr_spmm import BlockELL, BlockSizes, bsr_spmm, bsr_spmm_reference

__all__ = ["BlockELL", "BlockSizes", "bsr_spmm", "bsr_spmm_reference"]
