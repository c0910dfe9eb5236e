"""Figures: reliability diagrams (binned and smooth), bin-count robustness, utility eCDFs, MCB-DSC plots.

All functions take numbers (JAX or numpy arrays) and return a matplotlib
``Figure``; none of them computes a metric that ``jaxcal.metrics`` does not.
Matplotlib is imported lazily, so ``import jaxcal`` stays light.
"""

from jaxcal._src.plots.decomposition import mcb_dsc_plot
from jaxcal._src.plots.ecdf import ecdf_plot
from jaxcal._src.plots.reliability import bin_robustness_plot, reliability_diagram
from jaxcal._src.plots.smooth_reliability import smooth_reliability_diagram

__all__ = [
  "bin_robustness_plot",
  "ecdf_plot",
  "mcb_dsc_plot",
  "reliability_diagram",
  "smooth_reliability_diagram",
]
