"""Dominance between predictors, rank correlations and bootstrap intervals.

As in Lu, Wu, Hartline & Hu, "Truthful Calibration Errors for Multi-Class
Prediction" (arXiv:2510.06388), §4-5.

``dominance_chain`` extracts the maximum dominance set (longest chain of the
"every loss is no larger" partial order); ``rank_correlation`` compares the
order a calibration error induces with it (Spearman / Kendall, scipy ties);
``bootstrap`` gives the papers' ``±1.96 sd`` intervals by vmapping a statistic
over resampled test indices.
"""

from jaxcal._src.dominance import (
  BootstrapResult,
  bootstrap,
  dominance_chain,
  dominance_matrix,
  rank_correlation,
  resample_indices,
)

__all__ = [
  "BootstrapResult",
  "bootstrap",
  "dominance_chain",
  "dominance_matrix",
  "rank_correlation",
  "resample_indices",
]
