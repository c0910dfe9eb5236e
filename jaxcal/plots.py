"""Figures for papers: reliability diagrams (binned and smooth), bin-count robustness, rankings, eCDFs, MCB-DSC, intervals, local calibration.

All functions take numbers (JAX or numpy arrays) and return a matplotlib
``Figure``; none of them computes a metric that ``jaxcal.metrics`` does not.
They share one style (fonts sized for a paper column, legends outside the
data, readable log ticks, titles naming the model and ``n``) and the metric
names of :mod:`jaxcal.report`. :func:`savefig` writes PNG beside PDF or SVG.
Matplotlib is imported lazily, so ``import jaxcal`` stays light.
"""

from jaxcal._src.plots._mpl import savefig
from jaxcal._src.plots.decomposition import mcb_dsc_plot
from jaxcal._src.plots.ecdf import ecdf_plot
from jaxcal._src.plots.intervals import interval_plot
from jaxcal._src.plots.local import lce_bandwidth_plot
from jaxcal._src.plots.reliability import reliability_diagram
from jaxcal._src.plots.robustness import bin_robustness_plot, rank_stability_plot
from jaxcal._src.plots.smooth_reliability import smooth_reliability_diagram

__all__ = [
  "bin_robustness_plot",
  "ecdf_plot",
  "interval_plot",
  "lce_bandwidth_plot",
  "mcb_dsc_plot",
  "rank_stability_plot",
  "reliability_diagram",
  "savefig",
  "smooth_reliability_diagram",
]
