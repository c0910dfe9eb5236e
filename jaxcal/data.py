"""Loading predictions and data sets, and synthetic data with known truth."""

from jaxcal._src.data import (
    DEFAULT_PREDICTIONS,
    Synthetic,
    default_predictions,
    load_predictions,
    looks_like_probs,
    synthetic,
)

__all__ = [
    "DEFAULT_PREDICTIONS",
    "Synthetic",
    "default_predictions",
    "load_predictions",
    "looks_like_probs",
    "synthetic",
]
