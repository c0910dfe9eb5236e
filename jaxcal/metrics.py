"""Calibration errors (Lu et al. 2025 and Barbera et al. 2025).

Truthful squared binned errors (``classwise_ce``, ``conf_ce_corr``,
``lin_ce``, ``binary_ce``), the usual ℓ1 binned errors (``conf_ece``,
``classwise_ece``, ``lin_ece``), the cumulative ``ecce`` and the local
``lce`` (with MLCE). Each works on one data set and under ``jax.jit`` /
``jax.vmap``; ``num_bins`` may be an int array (one compiled call).
"""

from jaxcal._src.binning import bin_ids
from jaxcal._src.calibration_errors import (
  ReliabilityStats,
  binary_ce,
  classwise_ce,
  classwise_ece,
  conf_ce,
  conf_ce_corr,
  conf_ece,
  ecce,
  lin_ce,
  lin_ece,
  reliability_stats,
)
from jaxcal._src.local import LocalCalibration, lce, nadaraya_watson

__all__ = [
  "LocalCalibration",
  "ReliabilityStats",
  "bin_ids",
  "binary_ce",
  "classwise_ce",
  "classwise_ece",
  "conf_ce",
  "conf_ce_corr",
  "conf_ece",
  "ecce",
  "lce",
  "lin_ce",
  "lin_ece",
  "nadaraya_watson",
  "reliability_stats",
]
