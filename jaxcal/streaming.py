"""Streaming calibration metrics: accumulate over batches, devices and hosts.

States in the style of CLU metrics: ``State.empty(...)``, ``state.update(probs,
labels, where=None)`` (one batch, jit-able), ``state.merge(other)``,
``state.reduce()`` (a stack, e.g. after ``jax.lax.all_gather``) and
``state.compute()``. :class:`FixedBins` and :class:`Scores` are exact under any
batching (integer counts, compensated sums) and ``psum``-able; :class:`Records`
keeps compact per-sample records for the errors that need a global sort
(quantile bins, UC, decompositions); :class:`Calibration` holds all three.
:func:`merge_across_processes` merges the states of ``jax.distributed``
processes so that every host computes the union's numbers.

This is a module of its own (not ``jaxcal.metrics.streaming``) because a state
spans calibration errors, proper scores and per-sample records, and because
``jaxcal.metrics`` stays a set of one-shot functions.
"""

from jaxcal._src.streaming import (
  Calibration,
  FixedBins,
  Records,
  Scores,
  interval_thresholds,
  merge_across_processes,
)

__all__ = [
  "Calibration",
  "FixedBins",
  "Records",
  "Scores",
  "interval_thresholds",
  "merge_across_processes",
]
