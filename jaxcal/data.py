"""Loading predictions and data sets, and synthetic data with known truth."""

from jaxcal._src.data import (
  DEFAULT_PREDICTIONS,
  Synthetic,
  default_predictions,
  load_predictions,
  load_split,
  looks_like_probs,
  synthetic,
)
from jaxcal._src.fashion_mnist import load_fashion_mnist
from jaxcal._src.paths import dataset_dir

__all__ = [
  "DEFAULT_PREDICTIONS",
  "Synthetic",
  "dataset_dir",
  "default_predictions",
  "load_fashion_mnist",
  "load_predictions",
  "load_split",
  "looks_like_probs",
  "synthetic",
]
