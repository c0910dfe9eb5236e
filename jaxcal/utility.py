"""Utility calibration (Hegazy, Jordan & Dieuleveut 2025, "Scalable Utility-Aware
Multiclass Calibration", arXiv:2510.25458, §3-4).

Utilities are pytrees (:class:`Utility`); a batch is the same pytree with a
leading axis. :func:`uc` measures one utility with its worst interval,
:func:`uc_sweep` thousands at once (chunked, sharded over devices),
:func:`uc_class` the finite families, :func:`ecdf` the distribution of errors.
Ranks (of :func:`rank`, :func:`top_k`, :func:`dcg`) are 1-based with ties
to the lowest class first, as ``argmax``.
"""

from jaxcal._src.utility.families import (
  Utility,
  classwise,
  dcg,
  decision,
  gain_matrix,
  linear,
  rank,
  sample_aligned_gain,
  sample_decision,
  sample_linear,
  sample_misaligned_gain,
  sample_rank,
  similarity,
  top_class,
  top_k,
)
from jaxcal._src.utility.sweep import family, uc_class, uc_sweep
from jaxcal._src.utility.uc import UCResult, ecdf, uc

__all__ = [
  "UCResult",
  "Utility",
  "classwise",
  "dcg",
  "decision",
  "ecdf",
  "family",
  "gain_matrix",
  "linear",
  "rank",
  "sample_aligned_gain",
  "sample_decision",
  "sample_linear",
  "sample_misaligned_gain",
  "sample_rank",
  "similarity",
  "top_class",
  "top_k",
  "uc",
  "uc_class",
  "uc_sweep",
]
