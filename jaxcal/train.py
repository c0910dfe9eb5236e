"""Training utilities for the experiments: flax nnx classifiers, an optax loop, PCA, splits.

These are what jaxcal's experiments use to train their own Fashion-MNIST
models (checkpoint traces, LoCal Nets backbones) and to prepare features.
They live apart from the metrics: nothing in :mod:`jaxcal.metrics` imports
them. flax and optax are imported on first use of this module.

* models: ``make_model(name, ...)`` for the architectures in
  ``ARCHITECTURES`` (``MLP``, ``CNN``);
* loop: ``train_classifier`` (optax, minibatches, optional per-epoch
  checkpoints), ``train_epoch`` / ``evaluate`` (one compiled epoch of any
  flax nnx model and loss, as the classifiers and the LoCal Nets use it),
  ``predict`` (logits and penultimate features), ``to_float_images``;
* PCA: ``fit_pca``, ``pca_transform``, ``standardize``;
* splits: ``local_calibration_splits``, ``trace_splits``,
  ``calibration_fit_val`` (seeded index splits used by the experiments).
"""

from jaxcal._src.train import (
  ARCHITECTURES,
  CNN,
  MLP,
  PCA,
  TrainResult,
  calibration_fit_val,
  evaluate,
  fit_pca,
  local_calibration_splits,
  make_model,
  pca_transform,
  predict,
  standardize,
  to_float_images,
  trace_splits,
  train_classifier,
  train_epoch,
)

__all__ = [
  "ARCHITECTURES",
  "CNN",
  "MLP",
  "PCA",
  "TrainResult",
  "calibration_fit_val",
  "evaluate",
  "fit_pca",
  "local_calibration_splits",
  "make_model",
  "pca_transform",
  "predict",
  "standardize",
  "to_float_images",
  "trace_splits",
  "train_classifier",
  "train_epoch",
]
