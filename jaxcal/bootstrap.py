"""Bootstrap intervals of any statistic, and consistency bands for reliability diagrams.

:func:`bootstrap` resamples test samples with replacement and evaluates any
traceable statistic (a metric, a dict of metrics, a ``jax.vmap`` of one over
stacked models, a rank correlation between them) on every resample in one
compiled call, returning the estimate, an interval (percentile by default;
BCa, basic or normal), the standard deviation and the resampled values.

Which interval. Binned ℓ1 errors such as ConfECE are biased upward and more
so on a resample (which duplicates samples): their resamples sit *above*
the estimate, so the symmetric ``estimate ± 1.96 sd`` (the ``"normal"``
method, what the truthful-calibration papers report) is centred in the
wrong place. The percentile interval (the default) follows the skewed,
shifted resampling distribution; BCa corrects it for bias and skew but
collapses when every resample lies above the estimate. An interval
describes the spread of the estimate, not its bias: where the bias of an ℓ1
error is larger than its spread (class-wise ECE, many bins, small ``n``) no
method covers the population value. ``experiments/bootstrap_coverage.py``
measures the coverage of each method on synthetic data whose true
calibration errors are known.

:func:`consistency_bands` is a different resampling (Bröcker & Smith 2007):
labels redrawn from the predicted probabilities, giving the spread of a
*calibrated* predictor's reliability diagram
(:func:`jaxcal.plots.reliability_diagram` draws it).
"""

from jaxcal._src.bootstrap import (
  METHODS,
  BootstrapResult,
  ConsistencyBands,
  bootstrap,
  consistency_bands,
  interval,
  resample_indices,
)

__all__ = [
  "METHODS",
  "BootstrapResult",
  "ConsistencyBands",
  "bootstrap",
  "consistency_bands",
  "interval",
  "resample_indices",
]
