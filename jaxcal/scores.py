"""Proper scores, the confidence loss and score decompositions (SPEC §3-4)."""

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
