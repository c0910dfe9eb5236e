"""Recalibration: fit a map on a calibration split, apply it to new predictions.

Every method has a typed fit function documenting its options
(``fit_temperature``, ``fit_vector``, ``fit_matrix``, ``fit_dirichlet``,
``fit_platt``, ``fit_histogram``, ``fit_isotonic``, ``fit_smooth_isotonic``,
``fit_beta``, ``fit_bbq``, ``fit_ensemble_temperature``, ``fit_patching``,
``fit_local_net``, ``fit_kcal``); ``fit(method, inputs, labels, **options)``
is the string front door to them and checks option names. A fitted
recalibrator is a pytree (``rc(inputs) -> probs``; the parametric and
class-wise fits also run inside ``jax.jit``/``jax.vmap``), saved and loaded
without pickle by ``save``/``load``. To jit an apply, pass the recalibrator
as an argument, ``jax.jit(lambda rc, x: rc(x))(rc, x)``: it holds arrays, so
``jax.jit(rc)`` (which hashes its function) raises "unhashable type". Inputs are logits by default
(``from_logits=True``). Also the pure-JAX isotonic regression behind the
class-wise methods and the score decomposition.

Importing this module imports neither flax, jaxopt nor the training code
(it does import optax, whose L-BFGS fits the scaling maps): patching
(jaxopt) and the LoCal Net names (``LocalNet``, ``KernelCalibrator``,
``fit_local_net``, ``fit_kcal``, ``kernel_calibrator``; flax nnx) load on
first use.
"""

from typing import TYPE_CHECKING

from jaxcal._src.isotonic import (
  IsotonicFit,
  isotonic_fit,
  isotonic_predict,
  isotonic_regression,
)
from jaxcal._src.recal.base import Recalibrator, fit, fit_function, load, methods, save
from jaxcal._src.recal.bbq import BBQ, fit_bbq
from jaxcal._src.recal.beta import BetaCalibration, fit_beta
from jaxcal._src.recal.binning_methods import (
  HistogramBinning,
  IsotonicRecalibrator,
  SmoothIsotonicRecalibrator,
  fit_histogram,
  fit_isotonic,
  fit_smooth_isotonic,
)
from jaxcal._src.recal.ensemble_temperature import (
  EnsembleTemperatureScaling,
  fit_ensemble_temperature,
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

if TYPE_CHECKING:  # imported lazily below (they import flax / optax / jaxopt)
  from jaxcal._src.recal.local_net import (
    KernelCalibrator,
    LocalNet,
    fit_kcal,
    fit_local_net,
    kernel_calibrator,
  )
  from jaxcal._src.recal.patching import Patching, fit_patching

__all__ = [
  "BBQ",
  "ODIR_GRID",
  "BetaCalibration",
  "DirichletCalibration",
  "EnsembleTemperatureScaling",
  "HistogramBinning",
  "IsotonicFit",
  "IsotonicRecalibrator",
  "KernelCalibrator",
  "LinearScaling",
  "LocalNet",
  "Patching",
  "PlattScaling",
  "Recalibrator",
  "SmoothIsotonicRecalibrator",
  "TemperatureScaling",
  "VectorScaling",
  "fit",
  "fit_bbq",
  "fit_beta",
  "fit_dirichlet",
  "fit_ensemble_temperature",
  "fit_function",
  "fit_histogram",
  "fit_isotonic",
  "fit_kcal",
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
  "kernel_calibrator",
  "load",
  "methods",
  "save",
]

_LAZY = {  # public name -> module under jaxcal._src.recal (imported on first access)
  "Patching": "patching",
  "fit_patching": "patching",
  "LocalNet": "local_net",
  "KernelCalibrator": "local_net",
  "fit_local_net": "local_net",
  "fit_kcal": "local_net",
  "kernel_calibrator": "local_net",
}


def __getattr__(name):
  if name in _LAZY:
    import importlib

    return getattr(importlib.import_module(f"jaxcal._src.recal.{_LAZY[name]}"), name)
  raise AttributeError(f"module 'jaxcal.recalibrate' has no attribute {name!r}")


def __dir__():
  return sorted(__all__)
