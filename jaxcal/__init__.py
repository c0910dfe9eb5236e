"""jaxcal: calibration errors, utility calibration, score decompositions and
recalibration for multiclass classifiers, as functional JAX."""

__version__ = "0.1.0"

from jaxcal import metrics  # noqa: F401
from jaxcal import scores  # noqa: F401
