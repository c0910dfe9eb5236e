"""Recalibration: fit a map on a calibration split, apply it to new predictions.

``fit(method, inputs, labels, **options)`` returns a fitted recalibrator (a
pytree, ``rc(inputs) -> probs``), saved and loaded without pickle by
``save``/``load``. Inputs are logits by default (``from_logits=True``).
Also the pure-JAX isotonic regression behind the class-wise methods and the
score decomposition. The LoCal Net names (``LocalNet``, ``KernelCalibrator``,
``fit_local_net``, ``fit_kcal``, ``kernel_calibrator``) load flax nnx and
optax on first use.
"""

from typing import TYPE_CHECKING

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

if TYPE_CHECKING:  # loaded lazily by __getattr__ below
  from jaxcal._src.recal.local_net import (
    KernelCalibrator,
    LocalNet,
    fit_kcal,
    fit_local_net,
    kernel_calibrator,
  )

_LOCAL_NET = ("KernelCalibrator", "LocalNet", "fit_kcal", "fit_local_net", "kernel_calibrator")

__all__ = [
  "BBQ",
  "BetaCalibration",
  "DirichletCalibration",
  "EnsembleTemperatureScaling",
  "HistogramBinning",
  "IsotonicFit",
  "IsotonicRecalibrator",
  "KernelCalibrator",
  "LinearScaling",
  "LocalNet",
  "PlattScaling",
  "Recalibrator",
  "SmoothIsotonicRecalibrator",
  "TemperatureScaling",
  "VectorScaling",
  "fit",
  "fit_bbq",
  "fit_beta",
  "fit_ensemble_temperature",
  "fit_kcal",
  "fit_local_net",
  "isotonic_fit",
  "isotonic_predict",
  "isotonic_regression",
  "kernel_calibrator",
  "load",
  "methods",
  "save",
]


def __getattr__(name: str):
  if name in _LOCAL_NET:  # imports flax nnx and optax: only when asked for
    from jaxcal._src.recal import local_net

    return getattr(local_net, name)
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
