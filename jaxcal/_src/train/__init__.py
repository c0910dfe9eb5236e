"""Training code for the experiments: small flax nnx backbones, an optax loop,
feature extraction and PCA. Metrics never import this package."""

from jaxcal._src.train.loop import (
  TrainResult,
  evaluate,
  predict,
  to_float_images,
  train_classifier,
  train_epoch,
)
from jaxcal._src.train.models import ARCHITECTURES, CNN, MLP, make_model
from jaxcal._src.train.pca import PCA, fit_pca, pca_transform, standardize
from jaxcal._src.train.splits import calibration_fit_val, local_calibration_splits, trace_splits

__all__ = [
  "ARCHITECTURES",
  "CNN",
  "MLP",
  "make_model",
  "TrainResult",
  "train_classifier",
  "train_epoch",
  "evaluate",
  "predict",
  "to_float_images",
  "PCA",
  "fit_pca",
  "pca_transform",
  "standardize",
  "local_calibration_splits",
  "trace_splits",
  "calibration_fit_val",
]
