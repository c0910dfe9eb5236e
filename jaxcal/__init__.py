"""jaxcal: calibration errors, utility calibration, score decompositions and
recalibration for multiclass classifiers, as functional JAX.

Submodules: ``metrics``, ``scores``, ``utility``, ``recalibrate``,
``dominance``, ``bootstrap``, ``report``, ``data``, ``plots``, ``train``,
``streaming``, ``study``. They load on first access, so ``import jaxcal``
stays cheap (matplotlib, flax and optax are only imported by the parts that
need them). ``jaxcal.evaluate`` is ``jaxcal.study.evaluate``: a whole study in
one call. ``jaxcal.checked(f)`` compiles jaxcal's input checks into ``f``
(see :func:`jaxcal._src.validation.checked`).
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
  "streaming",
  "study",
  "train",
  "utility",
)

__all__ = list(_SUBMODULES) + ["evaluate", "checked", "__version__"]


def __getattr__(name):
  if name in _SUBMODULES:
    return importlib.import_module(f"jaxcal.{name}")
  if name == "checked":
    return importlib.import_module("jaxcal._src.validation").checked
  if name == "evaluate":
    return importlib.import_module("jaxcal.study").evaluate
  raise AttributeError(f"module 'jaxcal' has no attribute {name!r}")


def __dir__():
  return sorted(__all__)
