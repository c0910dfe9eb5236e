"""Proper scores, the confidence loss and score decompositions.

The losses that define dominance between predictors (Lu, Wu, Hartline & Hu,
"Truthful Calibration Errors for Multi-Class Prediction", arXiv:2510.06388,
App. B.2 and Lemma D.1) and the decomposition ``S = MCB - DSC + UNC`` (Resin
2025, "Calibration in Context: A Case Study with Score Decompositions",
§2.4-2.6).
"""

from jaxcal._src.decomposition import Decomposition, decompose
from jaxcal._src.scores import (
  brier,
  classification_error,
  confidence_loss,
  log_loss,
  spherical,
)

__all__ = [
  "Decomposition",
  "brier",
  "classification_error",
  "confidence_loss",
  "decompose",
  "log_loss",
  "spherical",
]
