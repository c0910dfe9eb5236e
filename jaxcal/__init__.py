"""jaxcal: calibration errors, utility calibration, score decompositions and
recalibration for multiclass classifiers, as functional JAX.

Submodules: ``metrics``, ``scores``, ``utility``, ``recalibrate``,
``dominance``, ``bootstrap``, ``report``, ``data``, ``plots``, ``train``. They load on first access, so
``import jaxcal`` stays cheap (matplotlib, flax and optax are only imported
by the parts that need them).
"""

import importlib

__version__ = "0.1.0"

_SUBMODULES = (
  "bootstrap",
  "data",
  "dominance",
  "metrics",
  "plots",
  "recalibrate",
  "report",
  "scores",
  "train",
  "utility",
)

__all__ = list(_SUBMODULES) + ["__version__"]


def __getattr__(name):
  if name in _SUBMODULES:
    return importlib.import_module(f"jaxcal.{name}")
  raise AttributeError(f"module 'jaxcal' has no attribute {name!r}")


def __dir__():
  return sorted(__all__)
