"""Recalibration: fit a map on a calibration split, apply it to new predictions.

Every method has a typed fit function documenting its options
(``fit_temperature``, ``fit_vector``, ``fit_matrix``, ``fit_dirichlet``,
``fit_platt``, ``fit_histogram``, ``fit_isotonic``, ``fit_smooth_isotonic``,
``fit_patching``, ``fit_local_net``); ``fit(method, inputs, labels,
**options)`` is the string front door to them and checks option names. A
fitted recalibrator is a pytree (``rc(inputs) -> probs``; the parametric and
class-wise fits also run inside ``jax.jit``/``jax.vmap``), saved and loaded
without pickle by ``save``/``load``. Inputs are logits by default
(``from_logits=True``). Also the pure-JAX isotonic regression behind the
class-wise methods and the score decomposition.

Importing this module imports neither flax, jaxopt nor the training code:
patching and LoCal Nets load on first use.
"""

from typing import TYPE_CHECKING

from jaxcal._src.isotonic import (
  IsotonicFit,
  isotonic_fit,
  isotonic_predict,
  isotonic_regression,
)
from jaxcal._src.recal.base import Recalibrator, fit, fit_function, load, methods, save
from jaxcal._src.recal.binning_methods import (
  HistogramBinning,
  IsotonicRecalibrator,
  SmoothIsotonicRecalibrator,
  fit_histogram,
  fit_isotonic,
  fit_smooth_isotonic,
)
from jaxcal._src.recal.scaling import (
  ODIR_GRID,
  DirichletCalibration,
  LinearScaling,
  PlattScaling,
  TemperatureScaling,
  VectorScaling,
  fit_dirichlet,
  fit_matrix,
  fit_platt,
  fit_temperature,
  fit_vector,
)

if TYPE_CHECKING:  # imported lazily below (they import flax / jaxopt)
  from jaxcal._src.recal.local_net import LocalNet, fit_local_net
  from jaxcal._src.recal.patching import Patching, fit_patching

__all__ = [
  "ODIR_GRID",
  "DirichletCalibration",
  "HistogramBinning",
  "IsotonicFit",
  "IsotonicRecalibrator",
  "LinearScaling",
  "LocalNet",
  "Patching",
  "PlattScaling",
  "Recalibrator",
  "SmoothIsotonicRecalibrator",
  "TemperatureScaling",
  "VectorScaling",
  "fit",
  "fit_dirichlet",
  "fit_function",
  "fit_histogram",
  "fit_isotonic",
  "fit_local_net",
  "fit_matrix",
  "fit_patching",
  "fit_platt",
  "fit_smooth_isotonic",
  "fit_temperature",
  "fit_vector",
  "isotonic_fit",
  "isotonic_predict",
  "isotonic_regression",
  "load",
  "methods",
  "save",
]

_LAZY = {  # public name -> module under jaxcal._src.recal (imported on first access)
  "Patching": "patching",
  "fit_patching": "patching",
  "LocalNet": "local_net",
  "fit_local_net": "local_net",
}


def __getattr__(name):
  if name in _LAZY:
    import importlib

    return getattr(importlib.import_module(f"jaxcal._src.recal.{_LAZY[name]}"), name)
  raise AttributeError(f"module 'jaxcal.recalibrate' has no attribute {name!r}")


def __dir__():
  return sorted(__all__)
