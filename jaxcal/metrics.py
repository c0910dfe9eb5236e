"""Calibration errors (Lu et al. 2025 and Barbera et al. 2025).

Truthful squared binned errors (``classwise_ce``, ``conf_ce_corr``,
``lin_ce``, ``binary_ce``), the usual binned errors (``conf_ece``,
``classwise_ece`` with ℓ1 / RMS / max norms, ``lin_ece``), the cumulative
``ecce``, the local ``lce`` (with MLCE), and the measures of other papers:
``smooth_ece`` (Błasiok & Nakkiran 2023), ``skce`` (Widmann et al. 2019),
``mmce`` (Kumar et al. 2018), ``debiased_ce`` (Kumar, Liang & Ma 2019) and
``ks_ce`` (Gupta et al. 2021). Each works on one data set and under
``jax.jit`` / ``jax.vmap``; ``num_bins`` (and ``smooth_ece``'s bandwidth)
may be an array (one compiled call).

Bins (:func:`bin_ids`): ``"fixed"`` bins are ``((j-1)/m, j/m]`` (0 in the
first) with the product ``s m`` rounded in the scores' dtype, as numpy's
``np.ceil(s * np.float32(m))`` on float32 scores: a score within an ulp
above ``j/m`` can take bin ``j`` (across the 24 CIFAR splits and 3 to 1,000
bins, 8 top-label confidences and 10 class probabilities), where a float64
run of the same values bins it one higher; ``"quantile"`` (equal-mass) bins
put the ``i``-th smallest score (1-based, ties in sample order) in bin
``ceil(i m / n)``, so each holds ``floor(n/m)`` or ``ceil(n/m)`` samples.
Where tied scores straddle a bin's end, the samples' order decides which bin
each takes, so shuffling the rows can move a quantile-binned error
(``conf_ce`` with 15 bins by up to 1.8e-4 relative over 30 shuffles of the
CIFAR-10 ResNet-110 test logits ``resnet110_c10_logits.npz`` of the
``cifar_logits`` data set, whose 2,911 confidences of exactly 1 are tied);
fixed bins never depend on the order. Peers cut otherwise, and
their numbers differ where a score lies on an edge or in how equal-mass bins
are sized: torchmetrics' fixed bins are ``[k/m, (k+1)/m)`` with a bin of
their own for 1; netcal and scikit-learn's ``calibration_curve`` cut
equal-mass bins at ``np.quantile`` / ``np.percentile`` edges; Kumar et al.'s
``calibration`` library uses ``np.array_split`` (its first ``n mod m`` bins
are the longer ones). On CIFAR-100 DenseNet-121's test logits the equal-mass
``conf_ece`` with 15 bins is 0.05045 here and 0.05038 in netcal and Kumar et
al.'s library.
"""

from jaxcal._src.binning import bin_ids
from jaxcal._src.calibration_errors import (
  ReliabilityStats,
  binary_ce,
  classwise_ce,
  classwise_ece,
  conf_ce,
  conf_ce_corr,
  conf_ece,
  ecce,
  lin_ce,
  lin_ece,
  reliability_stats,
)
from jaxcal._src.debiased import debiased_ce
from jaxcal._src.kernel_ce import GaussianKernel, LaplacianKernel, mmce, skce
from jaxcal._src.ks import ks_ce
from jaxcal._src.local import LocalCalibration, lce, nadaraya_watson
from jaxcal._src.smooth_ece import (
  SmoothReliability,
  smooth_ece,
  smooth_ece_bandwidth,
  smooth_reliability,
)

__all__ = [
  "GaussianKernel",
  "LaplacianKernel",
  "LocalCalibration",
  "ReliabilityStats",
  "SmoothReliability",
  "bin_ids",
  "binary_ce",
  "classwise_ce",
  "classwise_ece",
  "conf_ce",
  "conf_ce_corr",
  "conf_ece",
  "debiased_ce",
  "ecce",
  "ks_ce",
  "lce",
  "lin_ce",
  "lin_ece",
  "mmce",
  "nadaraya_watson",
  "reliability_stats",
  "skce",
  "smooth_ece",
  "smooth_ece_bandwidth",
  "smooth_reliability",
]
