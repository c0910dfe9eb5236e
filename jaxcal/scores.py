"""Proper scores, the confidence loss and score decompositions (SPEC §3-4)."""

from jaxcal._src.scores import (
    brier,
    classification_error,
    confidence_loss,
    log_loss,
    spherical,
)

__all__ = [
    "brier",
    "classification_error",
    "confidence_loss",
    "log_loss",
    "spherical",
]
