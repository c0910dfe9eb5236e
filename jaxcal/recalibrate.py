"""Recalibration: fit a map on a calibration split, apply it to new predictions.

``fit(method, inputs, labels, **options)`` returns a fitted recalibrator (a
pytree, ``rc(inputs) -> probs``), saved and loaded without pickle by
``save``/``load``. Inputs are logits by default (``from_logits=True``).
Also the pure-JAX isotonic regression behind the class-wise methods and the
score decomposition.
"""

from jaxcal._src.isotonic import (
  IsotonicFit,
  isotonic_fit,
  isotonic_predict,
  isotonic_regression,
)
from jaxcal._src.recal.base import Recalibrator, fit, load, methods, save
from jaxcal._src.recal.bbq import BBQ, fit_bbq
from jaxcal._src.recal.beta import BetaCalibration, fit_beta
from jaxcal._src.recal.binning_methods import (
  HistogramBinning,
  IsotonicRecalibrator,
  SmoothIsotonicRecalibrator,
)
from jaxcal._src.recal.ensemble_temperature import (
  EnsembleTemperatureScaling,
  fit_ensemble_temperature,
)
from jaxcal._src.recal.scaling import (
  DirichletCalibration,
  LinearScaling,
  PlattScaling,
  TemperatureScaling,
  VectorScaling,
)

__all__ = [
  "BBQ",
  "BetaCalibration",
  "DirichletCalibration",
  "EnsembleTemperatureScaling",
  "HistogramBinning",
  "IsotonicFit",
  "IsotonicRecalibrator",
  "LinearScaling",
  "PlattScaling",
  "Recalibrator",
  "SmoothIsotonicRecalibrator",
  "TemperatureScaling",
  "VectorScaling",
  "fit",
  "fit_bbq",
  "fit_beta",
  "fit_ensemble_temperature",
  "isotonic_fit",
  "isotonic_predict",
  "isotonic_regression",
  "load",
  "methods",
  "save",
]
