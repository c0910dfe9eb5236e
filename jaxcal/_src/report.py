"""The calibration report behind ``jaxcal report``: one model, or several compared.

:func:`calibration_report` computes every number for one set of predictions
(a plain dict, JSON-able): the headline metrics with bootstrap intervals,
each error against the bin count with its bootstrap band, utility
calibration eCDFs and the Brier decomposition. :func:`compare_report` does
the same for several models and adds what the truthful-calibration papers
call binning robustness: the rank correlation of the models' ordering
between bin counts, with bootstrap intervals. :func:`write_report` writes
``report.json`` and the figures (PNG and PDF); :func:`format_summary` and
:func:`format_markdown` render a report for the terminal or a document.
Metric names, labels and number formats come from one vocabulary
(:mod:`jaxcal._src.names`).
"""

from __future__ import annotations

import datetime
import functools
import json
import math
import os
import platform
import stat
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcal import metrics, scores
from jaxcal._src import validation as V
from jaxcal._src.bootstrap import MAX_RESAMPLES, bootstrap, consistency_bands
from jaxcal._src.names import (
  format_interval,
  format_number,
  label,
  metric,
  round_floats,
)
from jaxcal._src.paths import atomic_file, input_file, output_folder
from jaxcal._src.scores import _log_loss_of_logits, log_loss_per_sample

__all__ = [
  "HEADLINE",
  "ROBUSTNESS_CURVES",
  "RANK_BINS",
  "robustness_bins",
  "calibration_report",
  "compare_report",
  "rank_stability",
  "write_report",
  "format_summary",
  "format_markdown",
  "format_comparison",
  "find_models",
]

#: Headline metrics of the report: (name, binning) in display order.
HEADLINE: tuple[tuple[str, str | None], ...] = (
  ("accuracy", None),
  ("NLL", None),
  ("Brier", None),
  ("conf_loss", None),
  ("ConfECE", "fixed"),
  ("ConfECE", "quantile"),
  ("smECE", None),
  ("CWE_bin", "fixed"),
  ("ConfCE", "quantile"),
  ("ConfCE_corr", "quantile"),
  ("LinCE_cw", "quantile"),
  ("ECCE", "fixed"),
  ("UC_TCE", None),
  ("UC_CWE", None),
)

#: Metrics of ``jaxcal recalibrate``'s before/after table.
RECALIBRATION_METRICS: tuple[tuple[str, str | None], ...] = (
  ("accuracy", None),
  ("NLL", None),
  ("Brier", None),
  ("ConfECE", "fixed"),
  ("smECE", None),
  ("CWE_bin", "fixed"),
  ("ConfCE_corr", "quantile"),
  ("LinCE_cw", "quantile"),
)

#: The errors drawn against the bin count (each with the papers' binning).
ROBUSTNESS_CURVES: tuple[tuple[str, str], ...] = (
  ("ConfECE", "fixed"),
  ("CWE_bin", "fixed"),
  ("ConfCE", "quantile"),
  ("ConfCE_corr", "quantile"),
  ("LinCE_cw", "quantile"),
)

#: Bin counts between which model rankings are compared (the truthful paper's
#: Table 1 uses 5, 20 and 2000).
RANK_BINS: tuple[int, ...] = (5, 10, 20, 50, 100, 200, 500, 1000, 2000)

#: The errors whose model rankings are compared across bin counts.
RANK_ERRORS: tuple[tuple[str, str], ...] = (
  ("ConfECE", "fixed"),
  ("ConfCE", "quantile"),
  ("ConfCE_corr", "quantile"),
  ("LinCE_cw", "quantile"),
)


#: Most log-spaced points :func:`robustness_bins` takes (``count``): each is a bin
#: count at which the report computes every error; 3e9 points needed 22 GB.
MAX_ROBUSTNESS_COUNT = 2**20


def robustness_bins(n: int, lo: int = 2, hi: int = 2000, count: int = 20) -> np.ndarray:
  """About ``count`` bin counts from ``lo`` to ``min(hi, n)``, evenly spaced on a log scale.

  Args:
    n: the sample size, an int ``>= 1``; the largest bin count is ``min(hi, n)``
      (``lo`` when that is smaller than ``lo``).
    lo: the smallest bin count, an int ``>= 1`` (default 2).
    hi: the largest bin count when ``n`` allows it, an int from ``lo`` to
      ``2**24`` (default 2000; no metric takes more bins).
    count: number of log-spaced points before rounding, an int from 1 to
      ``2**20`` (default 20).

  Returns:
    A sorted ``(k,)`` int64 numpy array of distinct bin counts, ``k <= count``
    (points that round to the same integer are kept once), from ``lo`` to
    ``max(lo, min(hi, n))``.

  Raises:
    ValueError: a non-int argument, ``n``, ``lo`` or ``count`` below 1,
      ``hi < lo``, ``hi`` above ``2**24`` or ``count`` above ``2**20``
      (checked before anything is allocated).

  Example:
    >>> robustness_bins(10000, count=6).tolist()
    [2, 8, 32, 126, 502, 2000]

  Reference: Lu, Wu, Hartline & Hu (2025), "Truthful Calibration Errors for
  Multi-Class Prediction", arXiv:2510.06388, §5.1-5.2 and Fig. 1 (errors
  compared across bin counts up to ``m = 2000``).
  """
  n = V.check_int_option(n, "n", minimum=1)
  lo = V.check_int_option(lo, "lo", minimum=1)
  # hi = 2**63 - 1 wrapped to a negative bin count in the int64 cast
  hi = V.check_int_option(
    hi, "hi", minimum=lo, maximum=V.MAX_NUM_BINS, hint="no metric takes more bins"
  )
  # count = 3 * 10**9 allocated 22 GB of points (killed) for at most ~hi distinct counts
  count = V.check_int_option(
    count,
    "count",
    minimum=1,
    maximum=MAX_ROBUSTNESS_COUNT,
    hint="each point is a bin count at which every error is computed (the report uses 20)",
  )
  top = max(lo, min(hi, n))
  grid = np.unique(np.geomspace(lo, top, count).round().astype(np.int64))
  return grid


def _uc(family: str) -> Callable:
  def fn(p, y, m, b, w=None):
    from jaxcal import utility

    return utility.uc_class(p, y, family, where=w)

  return fn


#: name -> f(probs, labels, num_bins, binning, where=None): the public function behind each
#: name (``where``: the samples' mask of data padded to a size bucket).
_FUNCTIONS: dict[str, Callable] = {
  # clipped: under jit XLA fuses 1 - mean into fma(-sum, 1/n, 1), -5e-8 for no hit
  "accuracy": lambda p, y, m, b, w=None: jnp.clip(
    1.0 - scores.classification_error(p, y, where=w), 0.0, 1.0
  ),
  "error_rate": lambda p, y, m, b, w=None: scores.classification_error(p, y, where=w),
  "NLL": lambda p, y, m, b, w=None: scores.log_loss(p, y, where=w),
  "Brier": lambda p, y, m, b, w=None: scores.brier(p, y, where=w),
  "spherical": lambda p, y, m, b, w=None: scores.spherical(p, y, where=w),
  "conf_loss": lambda p, y, m, b, w=None: scores.confidence_loss(p, y, where=w),
  "ConfECE": lambda p, y, m, b, w=None: metrics.conf_ece(p, y, m, b, where=w),
  "smECE": lambda p, y, m, b, w=None: metrics.smooth_ece(p, y, where=w),
  "CWE_bin": lambda p, y, m, b, w=None: metrics.classwise_ece(p, y, m, b, where=w),
  "ConfCE": lambda p, y, m, b, w=None: metrics.conf_ce(p, y, m, b, where=w),
  "ConfCE_corr": lambda p, y, m, b, w=None: metrics.conf_ce_corr(p, y, m, b, where=w),
  "LinCE_cw": lambda p, y, m, b, w=None: metrics.classwise_ce(p, y, m, b, where=w),
  "ECCE": lambda p, y, m, b, w=None: metrics.ecce(p, y, m, where=w),
  "UC_TCE": _uc("tce"),
  "UC_CWE": _uc("cwe"),
  "UC_topK": _uc("topk"),
  "UC_comb": _uc("comb"),
}


class _Headline:
  """``f(probs, labels, nll=None, where=None) -> {label: scalar}`` of the headline metrics.

  ``nll``: ``(n,)`` per-sample log losses (:func:`_prepare`); NLL is their
  mean (over ``where``), else ``scores.log_loss(probs, labels)``. Hashable
  by value (a bootstrap's compiled program is reused across calls).
  """

  def __init__(self, num_bins: int, names: tuple[tuple[str, str | None], ...] = HEADLINE):
    self.num_bins = int(num_bins)
    self.names = names

  def labels(self) -> list[str]:
    return [label(nm, b, self.num_bins if b else None) for nm, b in self.names]

  def __call__(self, p, y, nll=None, where=None):
    return {
      lab: _masked_mean(nll, where)
      if nm == "NLL" and nll is not None
      else _FUNCTIONS[nm](p, y, self.num_bins, b, where)
      for lab, (nm, b) in zip(self.labels(), self.names)
    }

  def __hash__(self):
    return hash((type(self), self.num_bins, self.names))

  def __eq__(self, other):
    return type(other) is type(self) and (other.num_bins, other.names) == (
      self.num_bins,
      self.names,
    )


class _Curves:
  """``f(probs, labels) -> {label: (k,)}``: each error at every bin count of a grid."""

  def __init__(self, bins: Sequence[int], names=ROBUSTNESS_CURVES):
    self.bins = tuple(int(m) for m in bins)
    self.names = tuple(names)

  def __call__(self, p, y, where=None):
    m = np.asarray(self.bins)
    return {label(nm, b): _FUNCTIONS[nm](p, y, m, b, where) for nm, b in self.names}

  def __hash__(self):
    return hash((type(self), self.bins, self.names))

  def __eq__(self, other):
    return type(other) is type(self) and (other.bins, other.names) == (self.bins, self.names)


def _masked_mean(v: jax.Array, where: jax.Array | None) -> jax.Array:
  """The mean of ``v`` over the selected entries (all without a mask)."""
  if where is None:
    return jnp.mean(v)
  return jnp.sum(jnp.where(where, v, 0.0)) / jnp.sum(where, dtype=jnp.int32).astype(v.dtype)


class _Padded(NamedTuple):
  """The report's data padded to its size bucket (:func:`_padded_data`)."""

  probs: jax.Array  # (b, C)
  y: jax.Array  # (b,)
  nll: jax.Array  # (b,)
  where: jax.Array  # (b,) bool: the first n rows


def _padded_data(probs: jax.Array, y: jax.Array, nll: jax.Array) -> _Padded:
  """``probs``, ``y`` and ``nll`` filled up to ``size_bucket(n)`` rows, with the mask of the ``n``.

  Every section runs on the padded arrays with ``where=`` (the metrics,
  :func:`~jaxcal._src.bootstrap.bootstrap`, the UC sweeps, the
  decompositions), so reports of different ``n`` in one bucket share their
  compiled programs: a second report at another ``n`` compiled all 36 of
  them again (15 s of its 15 s on 2 idle cores). The padding rows are
  ``(1, 0, ..., 0)`` with label 0 (valid in any dtype), never read.
  """
  from jaxcal._src.study import size_bucket

  n = probs.shape[0]
  return _pad_rows(probs, y, nll, size_bucket(n))


@functools.partial(jax.jit, static_argnums=3)
def _pad_rows(probs, y, nll, nb):
  from jaxcal._src.study import _padded

  n, c = probs.shape
  row = jnp.eye(1, c, dtype=probs.dtype)
  p = _padded([probs], row, nb, jnp)[0]
  yy = _padded([y], jnp.zeros((1,), y.dtype), nb, jnp)[0]
  ll = _padded([nll], jnp.zeros((1,), nll.dtype), nb, jnp)[0]
  return _Padded(p, yy, ll, jnp.arange(nb) < n)


def _plain(tree: Any) -> Any:
  return jax.tree_util.tree_map(lambda a: np.asarray(a, np.float64).tolist(), tree)


def _prepare(scores_in: Any, labels: Any) -> tuple[jax.Array, jax.Array, bool, jax.Array]:
  """``(probs, labels, is_probs, nll)``: ``nll`` the ``(n,)`` per-sample log loss.

  From logits the log loss is computed from them (``scores.log_loss(...,
  from_logits=True)``): the log of their float32 softmax read 1.0729e-6 for a
  near-perfect model's 1.0128e-6. The headline NLL is the mean of ``nll``,
  resampled with the rows.
  """
  x = V.host_array(scores_in, "predictions")
  is_probs = V.probs_or_logits(x)  # the one rule; probabilities off the simplex raise
  if is_probs:
    checked = V.check_probs(x, name="predictions")  # in float32 (at least)
    # bfloat16 / float16 probabilities stay in their dtype: every section checks them again,
    # at their dtype's tolerance (cast up, a bfloat16 softmax's rows are off by up to 5e-3,
    # beyond float32's 1e-3: the headline numbers were NaN and the UC sweep raised)
    low = jnp.issubdtype(x.dtype, jnp.floating) and jnp.finfo(x.dtype).bits < 32
    probs = V._device(x) if low else checked
    y = V.check_labels(labels, probs.shape[0], probs.shape[1])
    return probs, y, is_probs, _nll_of_probs(checked, y)
  z = V.check_logits(x, name="predictions")
  y = V.check_labels(labels, z.shape[0], z.shape[1])
  probs, nll = _probs_and_nll(z, y)
  return probs, y, is_probs, nll


# the per-sample cores of scores.log_loss (the inputs are checked), each one program:
# run op by op they compiled 20 small programs for every new n
_nll_of_probs = jax.jit(log_loss_per_sample)


@jax.jit
def _probs_and_nll(z: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
  return jax.nn.softmax(z, axis=-1), _log_loss_of_logits(z, y)


def _check_utilities(num_utilities: Any, num_classes: int) -> int:
  """``num_utilities`` per family: an int ``>= 0`` whose ``(m, C)`` draws fit the samplers' bound.

  Checked with the other settings, not when the utility section samples them
  after the bootstraps have started.
  """
  m = V.check_int_option(num_utilities, "num_utilities", minimum=0)
  V.check_entries(
    m * num_classes, f"num_utilities = {m} utilities of C = {num_classes} classes", "fewer"
  )
  return m


def _binnable(n: int, interval: str, resamples: int) -> int:
  """The most quantile bins every evaluation of a statistic on ``n`` samples can hold.

  BCa's delete-a-group jackknife (100 groups, fewer for ``n < 100``; see
  :func:`jaxcal.bootstrap.bootstrap`) evaluates it without one group of
  ``n // groups`` samples: on ``n - n // groups``. The other intervals
  resample ``n``, and without resamples (``resamples = 0``) nothing but the
  ``n`` samples is evaluated.
  """
  if interval != "bca" or not resamples:
    return n
  groups = min(100, n)
  return n - n // groups


def _check_settings(num_bins, resamples, confidence, interval, n, name="resamples"):
  from jaxcal._src.bootstrap import METHODS, _check_confidence

  num_bins = V.check_int(num_bins, "num_bins")
  resamples = V.check_int(resamples, name, 0, MAX_RESAMPLES)
  confidence = _check_confidence(confidence)  # a number in (0, 1): not the string "0.9"
  if resamples == 1:
    raise ValueError(f"{name} must be 0 (no intervals) or at least 2, got 1")
  if resamples and n < 2:
    raise ValueError(
      f"{name} = {resamples}: bootstrap intervals need at least 2 samples, got n = {n}; "
      f"pass {name}=0 for none"
    )
  if interval not in METHODS:
    raise ValueError(f"interval must be one of {METHODS}, got {interval!r}")
  if num_bins > n:
    raise ValueError(
      f"num_bins = {num_bins} quantile bins need at least that many samples, got n = {n}"
    )
  if num_bins > _binnable(n, interval, resamples):
    raise ValueError(
      f"num_bins = {num_bins} quantile bins need at least that many samples in each of BCa's "
      f"jackknife evaluations, which leave out a group: {_binnable(n, interval, resamples)} "
      f"of n = {n}; "
      "use fewer bins or another interval"
    )
  return num_bins, resamples, confidence


def _with_interval(est, res=None) -> dict:
  """``{"estimate", "lo", "hi"}``; a scalar estimate outside ``[lo, hi]`` is flagged.

  A bootstrap interval of a biased estimator (binned ℓ1 errors grow under
  resampling) can miss its own estimate; ``estimate_outside_interval``
  records it so that the summaries can say so.
  """
  if res is None:
    return {"estimate": est}
  out = {"estimate": est, "lo": res[0], "hi": res[1]}
  if np.ndim(est) == 0:
    e, lo, hi = (float(v) for v in (est, res[0], res[1]))
    out["estimate_outside_interval"] = bool(e < lo or e > hi)
  return out


def _metric_entry(lab: str, nm: str, binning: str | None, m: int | None) -> dict:
  meta = metric(nm)
  return {
    "name": meta.name,
    "function": meta.function,
    "kind": meta.kind,
    "truthful": meta.truthful,
    "binning": binning,
    "num_bins": m if binning else None,
  }


class _Pending(NamedTuple):
  """A report section whose programs are dispatched: ``finish()`` reads its numbers back.

  JAX runs a dispatched program while the caller goes on, but XLA:CPU runs
  the programs one after another, so reading back any number waits for every
  program dispatched before it. Read back section by section, the report
  compiled each section's programs only once the previous section's had run
  (a bootstrap runs on one core; the others sat idle): the first call was
  the sum of every compile and every run. Started first and read back at the
  end, the later sections compile while the earlier ones run (the CIFAR-10
  report's first call on 2 idle cores: 16.3 -> 14.4 s, the same compiles and
  runs; with more cores more of the runs hide behind the compiles).
  """

  finish: Callable[[], Any]


def _finished(section: Any) -> Any:
  """A section's value: a :class:`_Pending`'s ``finish()``, anything else as it is."""
  return section.finish() if isinstance(section, _Pending) else section


@functools.partial(jax.jit, static_argnums=0)
def _statistic(stat: Callable, *arrays: jax.Array, where: jax.Array | None = None) -> Any:
  """``stat(*arrays, where=where)`` compiled once per statistic (hashable by value) and shapes.

  A fresh ``jax.jit(stat)`` per call compiled the headline and curve
  programs of every report without resamples again (2.5 and 1.2 s of a 5 s
  report at n = 2200, the same n included).
  """
  return stat(*arrays, where=where)


def _estimate_and_interval(key, stat, probs, y, resamples, confidence, interval, *rows, where):
  """``(estimate, lo, hi)`` trees of ``stat`` on the device; no interval (``None``) without resamples.

  Dispatched, not waited for: :func:`_plain` reads them back. ``rows``:
  further ``(n,)`` arrays resampled with the samples (the per-sample log loss);
  ``where``: the mask of the samples (:func:`_padded_data`).
  """
  if not resamples:
    return _statistic(stat, probs, y, *rows, where=where), None, None
  r = bootstrap(
    key,
    stat,
    probs,
    y,
    *rows,
    num_resamples=resamples,
    method=interval,
    confidence=confidence,
    where=where,
  )
  return r.estimate, r.lo, r.hi


def _headline_section(key, data, num_bins, resamples, confidence, interval) -> _Pending:
  stat = _Headline(num_bins)
  est, lo, hi = _estimate_and_interval(
    key, stat, data.probs, data.y, resamples, confidence, interval, data.nll, where=data.where
  )

  def finish() -> dict:
    ests, los, his = _plain(est), _plain(lo), _plain(hi)
    out = {}
    for lab, (nm, b) in zip(stat.labels(), stat.names):
      entry = _with_interval(ests[lab], None if los is None else (los[lab], his[lab]))
      entry.update(_metric_entry(lab, nm, b, num_bins))
      out[lab] = entry
    return out

  return _Pending(finish)


@jax.jit
def _calibrated_means(
  probs: jax.Array, where: jax.Array | None = None
) -> tuple[jax.Array, jax.Array]:
  """``(mean(1 − c²), mean(1 − ‖p‖²))`` over ``where``: :func:`_calibrated_values` before ``/ n``."""
  probs = V.upcast(probs)  # bfloat16 / float16 probabilities: computed in float32
  top = jnp.max(probs, axis=1)
  return _masked_mean(1.0 - top**2, where), _masked_mean(1.0 - jnp.sum(probs**2, axis=1), where)


def _calibrated_dict(means: tuple[jax.Array, jax.Array], n: int, c: int) -> dict:
  """:func:`_calibrated_values` from :func:`_calibrated_means` (read back here) and ``(n, C)``."""
  conf = float(means[0]) / n
  brier = float(means[1]) / (c * n)
  return {label("ConfCE_corr", "quantile"): conf, label("LinCE_cw", "quantile"): brier}


def _calibrated_values(probs: jax.Array) -> dict:
  """Expected truthful errors of a calibrated predictor with these probabilities (Lemma D.1).

  With ``y ~ p_i``: ``E[ℓ_conf] = 1 − c_i²`` (``c_i`` the top probability)
  and ``E[Brier] = 1 − ‖p_i‖²``, so ``E[ConfCE_corr] = mean(1 − c²)/n`` and
  ``E[LinCE_cw] = mean(1 − ‖p‖²)/(C·n)`` at every bin count.
  """
  return _calibrated_dict(_calibrated_means(probs), *probs.shape)


def _robustness_section(key, data, n, num_bins, resamples, confidence, interval) -> _Pending:
  c = data.probs.shape[1]
  # the grid's largest count fits every jackknife evaluation of a BCa interval too
  m = _binnable(n, interval, resamples)
  bins = np.union1d(robustness_bins(m, lo=min(2, m)), [num_bins])  # the headline m on the grid
  stat = _Curves(bins)
  est, lo, hi = _estimate_and_interval(
    key, stat, data.probs, data.y, resamples, confidence, interval, where=data.where
  )
  means = _calibrated_means(data.probs, data.where)

  def finish() -> dict:
    ests, los, his = _plain(est), _plain(lo), _plain(hi)
    order = [label(nm, b) for nm, b in stat.names]  # tree_map sorts dict keys: restore the order
    curves = {k: _with_interval(ests[k], None if los is None else (los[k], his[k])) for k in order}
    return {
      "num_bins": bins.tolist(),
      "resamples": resamples,
      "curves": curves,
      "calibrated_value": _calibrated_dict(means, n, c),
    }

  return _Pending(finish)


#: The utility families of the report's eCDFs, in the order of their keys
#: (:func:`_sampled_utilities`).
UTILITY_FAMILIES: tuple[str, ...] = ("linear", "rank")


def _sampled_utilities(seed: int, family: str, m: int, num_classes: int):
  """The report's ``m`` sampled utilities of one family (``jaxcal sweep`` draws the same).

  The key of family ``i`` (its place in ``UTILITY_FAMILIES``: linear 0, rank
  1) is ``jax.random.split(jax.random.split(jax.random.key(seed), 4)[3])[i]``
  (the key made under ``jax.enable_x64``, :func:`~jaxcal._src.validation.seed_key`),
  so a sweep of ``m`` utilities of one family reproduces the report's eCDF of
  that family. The fourth key of :func:`_keys`'s split: with partitionable
  threefry ``split(k, 2)[i] == split(k, 3)[i]``, and the keys were
  ``split(k)[i]``, the headline bootstrap's key (linear) and the bin-count
  bands' key (rank).
  """
  from jaxcal import utility

  sampler = {"linear": utility.sample_linear, "rank": utility.sample_rank}[family]
  key = jax.random.split(_keys(seed, 4)[3])[UTILITY_FAMILIES.index(family)]
  return sampler(key, m, num_classes)


def _utility_section(data, num_utilities: int, seed: int) -> _Pending:
  from jaxcal import utility

  if num_utilities <= 0:
    return _Pending(dict)
  c = data.probs.shape[1]
  sweeps = {
    name: utility.uc_sweep(
      data.probs, data.y, _sampled_utilities(seed, name, num_utilities, c), where=data.where
    )
    for name in UTILITY_FAMILIES
  }

  def finish() -> dict:
    out: dict[str, Any] = {}
    for name, errors in sweeps.items():
      errs = np.sort(np.asarray(errors, np.float64))
      out[name] = {
        "num_utilities": int(num_utilities),
        "quantiles": {
          str(q): float(np.quantile(errs, q)) for q in (0.1, 0.25, 0.5, 0.75, 0.9, 1.0)
        },
        "errors": errs.tolist(),
      }
    return out

  return _Pending(finish)


def _decomposition_section(data) -> _Pending:
  """Both Brier decompositions of the checked probabilities (one program: the fits are shared)."""
  from jaxcal._src.decomposition import decompose_all

  modes = ("classwise", "normalized")
  # (in float32 at least, as scores.decompose computes: bfloat16 / float16 probabilities)
  specs = tuple(("brier", m) for m in modes)
  both = decompose_all(V.upcast(data.probs), data.y, specs, data.where)

  def finish() -> dict:
    return {
      mode: {k.upper() if k != "score" else "S": float(getattr(d, k)) for k in d._fields}
      for mode, d in zip(modes, both)
    }

  return _Pending(finish)


def _keys(seed: int, num: int = 3) -> jax.Array:
  """The report's keys: bootstrap, bin-count bands, consistency bands (and the utilities')."""
  return jax.random.split(V.seed_key(int(seed)), num)


def _environment() -> dict:
  import jaxcal

  devices = jax.devices()
  return {
    "jaxcal": jaxcal.__version__,
    "jax": jax.__version__,
    "python": platform.python_version(),
    "platform": devices[0].platform,
    "device": str(devices[0].device_kind),
    "device_count": len(devices),
    "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
  }


#: Bootstrap resamples of the bands across bin counts of one model's report (default).
ROBUSTNESS_RESAMPLES = 50


@V.outside_explicit_context
def calibration_report(
  scores_in: ArrayLike,
  labels: ArrayLike,
  *,
  num_bins: int = 15,
  num_utilities: int = 1500,
  resamples: int = 200,
  robustness_resamples: int = ROBUSTNESS_RESAMPLES,
  confidence: float = 0.95,
  interval: str = "percentile",
  seed: int = 0,
  source: str = "",
  path: str | None = None,
) -> dict:
  """Every number of the calibration report of one set of predictions.

  Headline metrics (``HEADLINE``: accuracy, NLL, Brier, confidence loss,
  ConfECE, CWE_bin, ConfCE, ConfCE_corr, LinCE_cw, ECCE at ``num_bins``
  bins, the smooth ECE smECE beside the binned ECE, UC over U_TCE and
  U_CWE) with bootstrap intervals over the test
  samples, all in one compiled call; each error of ``ROBUSTNESS_CURVES``
  at about 20 bin counts from 2 to ``min(2000, n)`` with its bootstrap band,
  and the value a calibrated predictor with these probabilities would have
  for the truthful errors (Lemma D.1 of the truthful paper); the eCDF of
  utility calibration over sampled linear and rank utilities; the class-wise
  and normalised Brier decompositions.

  Args:
    scores_in: ``(n, C)`` logits or probabilities (rows on the simplex are
      taken as probabilities, anything else as logits, except entries all
      in ``[0, 1]`` with rows near but off the simplex, and rows summing to
      one with an entry just outside ``[0, 1]``, which raise: see
      :func:`~jaxcal._src.validation.probs_or_logits`).
    labels: ``(n,)`` integer labels.
    num_bins: bin count of the headline errors.
    num_utilities: utilities sampled per family for the eCDFs (0 skips them).
    resamples: bootstrap resamples of the headline intervals (0: no intervals).
    robustness_resamples: bootstrap resamples of the bin-count bands (0: none).
    confidence: nominal coverage of the intervals.
    interval: ``"percentile"``, ``"bca"``, ``"basic"`` or ``"normal"``
      (see :func:`jaxcal.bootstrap.bootstrap`).
    seed: the one seed; the bootstrap, the bands and the utility samples use
      keys split from it (recorded in ``seeds``).
    source: a description of the predictions (for titles and the summary).
    path: the input file or folder (recorded in ``input``).

  Returns:
    A JSON-able dict with sections ``jaxcal`` (versions, device, date),
    ``input``, ``settings``, ``seeds``, ``metrics`` (label -> estimate, lo,
    hi and what the metric is), ``robustness``, ``utility``,
    ``decomposition`` and ``timing`` (seconds: ``total_s`` from the call to
    the return; per section ``<name>_s`` the time spent starting it, which
    traces and compiles its programs, and reading its numbers back, which
    waits for them to run; the sections compile while earlier ones run, so
    these add up to less than the total's compile and run time).

  Raises:
    ValueError: invalid predictions or labels, a bin count above ``n``, or a
      bad setting (``num_utilities`` not an int ``>= 0``, ``seed`` not an
      int, ...).

  Example:
    >>> import jax
    >>> from jaxcal import data
    >>> x, y = data.default_predictions()
    >>> rep = calibration_report(x[:500], y[:500], num_utilities=0, resamples=0,
    ...                          robustness_resamples=0)
    >>> rep["metrics"]["ConfECE(fix;15)"]["estimate"] > 0
    True

  Reference: Lu, Wu, Hartline & Hu (2025), "Truthful Calibration Errors for
  Multi-Class Prediction", arXiv:2510.06388 (ConfCE_corr, LinCE_cw; §5
  binning robustness; Lemma D.1); Hegazy, Jordan & Dieuleveut (2025),
  "Scalable Utility-Aware Multiclass Calibration", arXiv:2510.25458 (UC);
  Resin (2025), "Calibration in Context: A Case Study with Score
  Decompositions" (MCB, DSC, UNC); Błasiok & Nakkiran (2023), "Smooth ECE:
  Principled Reliability Diagrams via Kernel Smoothing", arXiv:2309.12236,
  §4-5 (smECE with its automatic bandwidth).
  """
  t0 = time.perf_counter()
  V.require_eager("calibration_report", "it reads its numbers back into a dict", scores_in, labels)
  probs, y, is_probs, nll = _prepare(scores_in, labels)
  n, c = probs.shape
  num_bins, resamples, confidence = _check_settings(num_bins, resamples, confidence, interval, n)
  # both were passed through int(): 2.5 utilities became 2, seed "7" became 7
  num_utilities = _check_utilities(num_utilities, c)
  seed = V.check_seed(seed)
  if path is not None and not isinstance(path, str | os.PathLike):
    raise TypeError(f"path must be a file or folder path or None, got {type(path).__name__}")
  rob_resamples = _check_settings(
    num_bins, robustness_resamples, confidence, interval, n, "robustness_resamples"
  )[1]
  k_head, k_rob, _ = _keys(seed)
  data = _padded_data(probs, y, nll)
  rep: dict[str, Any] = {
    "jaxcal": _environment(),
    "input": {
      "source": source,
      "path": None if path is None else os.path.abspath(path),
      "n": int(n),
      "num_classes": int(c),
      "kind": "probabilities" if is_probs else "logits",
    },
    "settings": {
      "num_bins": num_bins,
      "num_utilities": int(num_utilities),
      "resamples": resamples,
      "robustness_resamples": rob_resamples,
      "confidence": confidence,
      "interval": interval,
      "consistency_resamples": 1000,
      "consistency_confidence": confidence,
    },
    "seeds": {
      "seed": int(seed),
      "keys": "jax.random.split(jax.random.key(seed), 4) -> bootstrap, bin-count bands, "
      "consistency bands, utilities; jax.random.split(utilities) -> linear, rank; "
      "jax.random.key(seed) made under jax.enable_x64 (all 64 bits of the seed)",
    },
  }
  # Every section's programs are dispatched before any number is read back (_Pending): the
  # robustness bands and the decomposition compile while the headline bootstrap runs. The
  # utility sweeps go first: their input checks read back, which waits for every program
  # dispatched before them.
  starts = (
    ("utility", _utility_section, (data, int(num_utilities), int(seed))),
    ("metrics", _headline_section, (k_head, data, num_bins, resamples, confidence, interval)),
    (
      "robustness",
      _robustness_section,
      (k_rob, data, n, num_bins, rob_resamples, confidence, interval),
    ),
    ("decomposition", _decomposition_section, (data,)),
  )
  started: dict[str, Any] = {}
  spent: dict[str, float] = {}
  for name, start, args in starts:
    t = time.perf_counter()
    started[name] = start(*args)
    spent[name] = time.perf_counter() - t
  sections = ("metrics", "robustness", "utility", "decomposition")  # the report's order
  for name in sections:
    t = time.perf_counter()
    rep[name] = _finished(started[name])
    spent[name] += time.perf_counter() - t
  # a section's time: starting it (tracing, compiling, dispatching) and reading it back
  rep["timing"] = {f"{name}_s": spent[name] for name in sections}
  rep["timing"]["total_s"] = time.perf_counter() - t0
  return rep


# --------------------------------------------------------------------------
# Several models: rankings across bin counts.
# --------------------------------------------------------------------------


def rank_stability(errors: ArrayLike, method: str = "spearman") -> jax.Array:
  """Rank correlation of the models' ordering between every pair of bin counts.

  ``R[i, j] = rank_correlation(errors[:, i], errors[:, j])`` over the ``P``
  models: 1 when an error orders the models the same way at bin counts
  ``i`` and ``j``. The truthful-calibration papers' binning-robustness claim
  is about this quantity, not about one model's error being constant in the
  bin count.

  Args:
    errors: ``(P, k)`` one error of ``P >= 3`` models at ``k`` bin counts
      (e.g. ``jax.vmap(lambda p, y: metrics.conf_ece(p, y, bins))(probs, labels)``,
      or a :class:`jaxcal.study.StudyResult` entry).
    method: ``"spearman"`` or ``"kendall"``.

  Returns:
    ``(k, k)`` symmetric matrix with ones on the diagonal, NaN in the row and
    column of a bin count where every model has the same error (no order to
    compare); jit- and vmap-able, all NaN for traced errors holding NaN or
    ±inf.

  Raises:
    ValueError: ``errors`` not 2-D, not finite, or fewer than 3 models.

  Example:
    >>> import jax.numpy as jnp
    >>> e = jnp.array([[1.0, 1.0], [2.0, 3.0], [3.0, 2.0]])
    >>> rank_stability(e).round(2).tolist()
    [[1.0, 0.5], [0.5, 1.0]]

  Reference: Lu, Wu, Hartline & Hu (2025), "Truthful Calibration Errors for
  Multi-Class Prediction", arXiv:2510.06388, §5 and Table 1.
  """
  e = V.as_float(errors, "errors")
  if e.ndim != 2:
    raise ValueError(f"errors must be (num_models, num_bin_counts), got shape {tuple(e.shape)}")
  e = V.check_finite(e, "errors")  # a NaN error has no rank: all NaN when traced
  if e.shape[0] < 3:
    raise ValueError(f"ranking needs at least 3 models, got {e.shape[0]}")
  if method not in ("spearman", "kendall"):
    raise ValueError(f"method must be 'spearman' or 'kendall', got {method!r}")
  # the ranks of NaN are finite (searchsorted places it): the matrix is NaN instead
  return jnp.where(jnp.all(jnp.isfinite(e)), _rank_matrix(e, method), jnp.nan)


def _rank_matrix(e: jax.Array, method: str = "spearman") -> jax.Array:
  from jaxcal._src.dominance import _kendall, _spearman

  corr = _spearman if method == "spearman" else _kendall
  cols = e.T
  return jax.vmap(lambda a: jax.vmap(lambda b: corr(a, b))(cols))(cols)


class _Compare:
  """Statistic of one group of models: headline metrics and ranking correlations."""

  def __init__(self, num_bins: int, rank_bins: Sequence[int], paired: bool):
    self.head = _Headline(num_bins)
    self.rank_bins = tuple(int(m) for m in rank_bins)
    self.paired = paired

  def _one(self, p, y, nll, where=None):
    m = np.asarray(self.rank_bins)
    errs = jnp.stack([_FUNCTIONS[nm](p, y, m, b, where) for nm, b in RANK_ERRORS])
    return self.head(p, y, nll, where), errs, scores.classification_error(p, y, where=where)

  def __call__(self, *arrays, where=None):
    # paired: (probs (M, n, C), labels (n,), nll (M, n)), padded to a size bucket with the
    # samples' mask where; else (p, y, nll) per model
    if self.paired:
      probs, y, nll = arrays
      head, errs, cls = jax.vmap(self._one, in_axes=(0, None, 0, None))(probs, y, nll, where)
    else:
      outs = [self._one(*arrays[i : i + 3]) for i in range(0, len(arrays), 3)]
      head = jax.tree_util.tree_map(lambda *v: jnp.stack(v), *[o[0] for o in outs])
      errs = jnp.stack([o[1] for o in outs])
      cls = jnp.stack([o[2] for o in outs])
    ranks = {}
    for f, (nm, b) in enumerate(RANK_ERRORS):
      e = errs[:, f, :]
      ranks[label(nm, b)] = {
        "between_bins": _rank_matrix(e),
        "with_error_rate": jax.vmap(lambda col: _rank_matrix(jnp.stack([cls, col], 1))[0, 1])(e.T),
      }
    return {"metrics": head, "rank": ranks}

  def __hash__(self):
    return hash((type(self), self.head, self.rank_bins, self.paired))

  def __eq__(self, other):
    return type(other) is type(self) and (other.head, other.rank_bins, other.paired) == (
      self.head,
      self.rank_bins,
      self.paired,
    )


def _check_per_model(
  given: Any, name: str, models: Mapping, kind: Any, one: str, each: str
) -> None:
  """Checks an optional dict model name -> value (``paths``, ``sources``) of ``compare_report``."""
  if given is None:
    return
  if not isinstance(given, Mapping):
    raise TypeError(f"{name} must be a dict name -> {each}, got {type(given).__name__}")
  unknown = [k for k in given if k not in models]
  if unknown:
    raise ValueError(f"{name} names no model {unknown!r}; the models are {list(models)!r}")
  for k, v in given.items():
    if not isinstance(v, kind):
      raise TypeError(f"{name}[{k!r}] must be {one}, got {type(v).__name__}")


def compare_report(
  models: Mapping[str, tuple[ArrayLike, ArrayLike]],
  *,
  num_bins: int = 15,
  rank_bins: Sequence[int] = RANK_BINS,
  resamples: int = 200,
  confidence: float = 0.95,
  interval: str = "percentile",
  seed: int = 0,
  paths: Mapping[str, str] | None = None,
  sources: Mapping[str, str] | None = None,
) -> dict:
  """The report of several models: headline metrics and binning robustness of rankings.

  Models are grouped by their test set size and class count ``(n, C)``; in a
  group of at least three models, each error of ``RANK_ERRORS`` (ConfECE,
  ConfCE, ConfCE_corr, LinCE_cw) is computed for every model at every bin
  count of ``rank_bins`` (those ``<= n``), and the report gives, with
  bootstrap intervals, the Spearman correlation of the models' ordering
  between every two bin counts and between each bin count and the error
  rate: the truthful paper's Table 1 for these models. Models with
  identical labels are resampled together (a paired bootstrap: the
  intervals reflect the sampling of one shared test set); otherwise each
  model's test samples are resampled independently. Everything of one
  group is one compiled call.

  Args:
    models: name -> ``(scores, labels)``, scores ``(n, C)`` logits or
      probabilities as in :func:`calibration_report`.
    num_bins: bin count of the headline errors.
    rank_bins: bin counts compared.
    resamples: bootstrap resamples (0: estimates only).
    confidence: nominal coverage of the intervals.
    interval: the bootstrap interval method.
    seed: the one seed (group ``g`` uses ``jax.random.fold_in(key(seed), g)``).
    paths: name -> input path, recorded in ``models``.
    sources: name -> a description of the predictions (the file and split
      read, as ``source`` of :func:`calibration_report`), recorded in
      ``models``.

  Returns:
    A JSON-able dict with ``jaxcal``, ``settings``, ``seeds``, ``models``
    (name, n, C, kind, group), ``metrics`` (model -> label -> estimate, lo,
    hi) and ``rank_stability`` (one entry per group of >= 3 models).

  Raises:
    ValueError: fewer than two models, or invalid predictions of a model
      (its name is in the message).

  Example:
    >>> from jaxcal import data
    >>> x, y = data.default_predictions()
    >>> ms = {f"T={t}": (x[:600] / t, y[:600]) for t in (0.5, 1.0, 2.0)}
    >>> rep = compare_report(ms, rank_bins=(5, 20), resamples=0)
    >>> sorted(rep["rank_stability"][0]["errors"])[0]
    'ConfCE(qua)'

  Reference: Lu, Wu, Hartline & Hu (2025), "Truthful Calibration Errors for
  Multi-Class Prediction", arXiv:2510.06388, §5 and Table 1 (Spearman
  correlations between bin counts with bootstrap intervals over test samples).
  """
  if not isinstance(models, Mapping):
    raise TypeError(f"models must be a dict name -> (scores, labels), got {type(models).__name__}")
  if len(models) < 2:
    raise ValueError(f"compare_report needs at least two models, got {len(models)}")
  V.require_eager("compare_report", "it reads its numbers back into a dict", list(models.values()))
  prepared = {}
  for name, pair in models.items():
    if not isinstance(name, str):
      raise TypeError(f"model names must be strings, got {name!r} ({type(name).__name__})")
    if not isinstance(pair, tuple | list) or len(pair) != 2:
      raise ValueError(
        f"model {name!r}: expected a pair (scores, labels), got {type(pair).__name__}"
      )
    try:
      prepared[name] = _prepare(*pair)
    except ValueError as e:
      raise ValueError(f"model {name!r}: {e}") from None
  min_n = min(v[0].shape[0] for v in prepared.values())
  num_bins, resamples, confidence = _check_settings(
    num_bins, resamples, confidence, interval, min_n
  )
  seed = V.check_seed(seed)
  rank_bins = _check_rank_bins(rank_bins)
  _check_per_model(paths, "paths", models, str | os.PathLike, "a path", "path or None")
  _check_per_model(sources, "sources", models, str, "a str", "str")
  shapes = {name: tuple(v[0].shape) for name, v in prepared.items()}
  groups = _groups(shapes, rank_bins, interval, resamples)
  rep: dict[str, Any] = {
    "jaxcal": _environment(),
    "settings": {
      "num_bins": num_bins,
      "rank_bins": [int(m) for m in rank_bins],
      "resamples": resamples,
      "confidence": confidence,
      "interval": interval,
    },
    "seeds": {"seed": int(seed), "group_g": "jax.random.fold_in(key(seed), g)"},
    "models": [],
    "metrics": {},
    "rank_stability": [],
  }
  t0 = time.perf_counter()
  base_key = V.seed_key(seed)  # each group's key is fold_in(base_key, g)
  for g, (shape, names) in enumerate(groups.items()):
    binnable = _binnable(shape[0], interval, resamples)
    bins = tuple(int(m) for m in rank_bins if int(m) <= binnable)
    probs = [prepared[k][0] for k in names]
    labs = [prepared[k][1] for k in names]
    nlls = [prepared[k][3] for k in names]
    paired = all(bool(jnp.array_equal(labs[0], lb)) for lb in labs[1:])
    dtypes = {k: jnp.dtype(pr.dtype) for k, pr in zip(names, probs)}
    if (
      paired
      and len(set(dtypes.values())) > 1
      and any(jnp.finfo(d).bits < 32 for d in dtypes.values())
    ):
      shown = ", ".join(f"{k!r} ({d.name})" for k, d in dtypes.items())
      raise ValueError(
        f"models {shown} share their labels, so they are resampled together in one stack, "
        "in float32: there bfloat16 / float16 probabilities (rows off the simplex by up to "
        "4e-3) fail float32's 1e-3 check and every number would be NaN. Pass these models "
        "in one dtype (all in the low precision, or cast up with the rows renormalised: "
        "p / p.sum(-1, keepdims=True))"
      )
    stat = _Compare(num_bins, bins, paired)
    where = None
    if paired:  # in a size bucket (masked): comparisons of other n share the programs
      pads = [_padded_data(pr, labs[0], ll) for pr, ll in zip(probs, nlls)]
      arrays: list[Any] = [
        jnp.stack([d.probs for d in pads]),
        pads[0].y,
        jnp.stack([d.nll for d in pads]),
      ]
      axes: list[int] = [1, 0, 1]
      grp = [0, 0, 0]
      where = pads[0].where
    else:
      arrays = [a for trio in zip(probs, labs, nlls) for a in trio]
      axes = [0] * len(arrays)
      grp = [i // 3 for i in range(len(arrays))]
    key = jax.random.fold_in(base_key, g)
    if len(names) < 3:
      stat_fn = _HeadOnly(stat)
    else:
      stat_fn = stat
    if resamples:
      r = bootstrap(
        key,
        stat_fn,
        *arrays,
        num_resamples=resamples,
        method=interval,
        confidence=confidence,
        sample_axis=axes,
        groups=grp,
        where=where,
      )
      est, lo, hi = _plain(r.estimate), _plain(r.lo), _plain(r.hi)
    else:
      est, lo, hi = _plain(_statistic(stat_fn, *arrays, where=where)), None, None
    for i, name in enumerate(names):
      p_, _, is_probs, _ = prepared[name]
      rep["models"].append(
        {
          "name": name,
          "path": None if not paths or name not in paths else os.path.abspath(paths[name]),
          "source": None if not sources else sources.get(name),
          "n": int(p_.shape[0]),
          "num_classes": int(p_.shape[1]),
          "kind": "probabilities" if is_probs else "logits",
          "group": g,
        }
      )
      entries = {}
      for lab, (nm, b) in zip(stat.head.labels(), stat.head.names):
        e = est["metrics"][lab][i]
        entry = _with_interval(
          e, None if lo is None else (lo["metrics"][lab][i], hi["metrics"][lab][i])
        )
        entry.update(_metric_entry(lab, nm, b, num_bins))
        entries[lab] = entry
      rep["metrics"][name] = entries
    if len(names) >= 3:
      errors = {}
      for lab in est["rank"]:
        errors[lab] = {
          part: _with_interval(
            est["rank"][lab][part],
            None if lo is None else (lo["rank"][lab][part], hi["rank"][lab][part]),
          )
          for part in ("between_bins", "with_error_rate")
        }
      rep["rank_stability"].append(
        {
          "group": g,
          "n": int(shape[0]),
          "num_classes": int(shape[1]),
          "models": names,
          "paired": paired,
          "num_bins": list(bins),
          "method": "spearman",
          "errors": errors,
        }
      )
  rep["timing"] = {"total_s": time.perf_counter() - t0}
  return rep


def _groups(
  shapes: Mapping[str, tuple[int, ...]], rank_bins: Sequence[int], interval: str, resamples: int
) -> dict[tuple[int, ...], list[str]]:
  """The models grouped by their ``(n, C)``, in order; raises for a group that cannot be ranked.

  A group of at least three models needs two bin counts of ``rank_bins`` that
  every evaluation of its statistic can hold (:func:`_binnable`).
  """
  groups: dict[tuple[int, ...], list[str]] = {}
  for name, shape in shapes.items():
    groups.setdefault(tuple(shape), []).append(name)
  for shape, names in groups.items():
    n = _binnable(shape[0], interval, resamples)
    if len(names) >= 3 and sum(m <= n for m in rank_bins) < 2:
      raise ValueError(
        f"rank_bins {list(rank_bins)} leave fewer than two bin counts <= n = {n} "
        f"to compare the ranking of models {names}"
      )
  return groups


def _check_rank_bins(rank_bins: Any) -> tuple[int, ...]:
  """``rank_bins`` as distinct ints ``>= 1`` (floats were truncated, ``True`` was 1 bin)."""
  if isinstance(rank_bins, str | bytes) or not isinstance(rank_bins, Sequence | np.ndarray):
    raise TypeError(f"rank_bins must be a sequence of bin counts, got {type(rank_bins).__name__}")
  out = tuple(V.check_int_option(m, "rank_bins entries", minimum=1) for m in rank_bins)
  if len(set(out)) != len(out):
    raise ValueError(f"rank_bins must be distinct bin counts, got {list(out)}")
  if len(out) < 2:
    raise ValueError(f"rank_bins must hold at least two bin counts to compare, got {list(out)}")
  return out


class _HeadOnly:
  """The headline part of a :class:`_Compare` (groups too small to rank)."""

  def __init__(self, stat: _Compare):
    self.stat = stat

  def __call__(self, *arrays, where=None):
    if self.stat.paired:
      probs, y, nll = arrays
      head = jax.vmap(self.stat.head, in_axes=(0, None, 0, None))(probs, y, nll, where)
    else:
      outs = [self.stat.head(*arrays[i : i + 3]) for i in range(0, len(arrays), 3)]
      head = jax.tree_util.tree_map(lambda *v: jnp.stack(v), *outs)
    return {"metrics": head}

  def __hash__(self):
    return hash((type(self), self.stat))

  def __eq__(self, other):
    return type(other) is type(self) and other.stat == self.stat


def find_models(path: str) -> dict[str, str] | None:
  """The prediction sets in a folder of models, or ``None`` for a single set.

  A folder is a folder of models when it holds no ``.npy`` files itself and
  either sub-folders or at least two ``.npz`` files; each sub-folder and
  ``.npz`` file is one model, named after it. A sub-folder holding a
  ``report.json`` and no ``.npy`` or ``.npz`` file is a report's output (a
  second ``jaxcal report .`` read the first one's ``jaxcal-report/`` as a
  model), not a model. A file ``m.npz`` beside a sub-folder ``m`` is named
  ``m.npz`` (one of them was dropped).

  Args:
    path: a file or folder path (a ``str`` or an ``os.PathLike`` of one).

  Returns:
    ``None`` when ``path`` is not a folder, holds ``.npy`` files, or has no
    sub-folders and fewer than two ``.npz`` files (a single prediction set);
    otherwise a dict model name -> path: each sub-folder not starting with
    ``.`` under its own name, then each ``.npz`` file under its name without
    the suffix, or with it where a sub-folder has that name (both in sorted
    order; the paths are joined to ``path``).

  Raises:
    TypeError: ``path`` is not a ``str`` or ``os.PathLike`` of a ``str``
      (``None``, bytes).

  Example:
    >>> from jaxcal.data import DEFAULT_PREDICTIONS
    >>> find_models(str(DEFAULT_PREDICTIONS)) is None
    True
  """
  # None raised os.stat's TypeError; bytes str.endswith's
  text = os.fspath(path) if isinstance(path, os.PathLike) else path
  if not isinstance(text, str):
    raise TypeError(
      f"path must be a file or folder path (a str or os.PathLike), got {type(path).__name__}"
    )
  if not os.path.isdir(path):
    return None
  entries = sorted(os.listdir(path))
  if any(e.endswith(".npy") for e in entries):
    return None

  def report_output(folder: str) -> bool:
    inside = os.listdir(folder)
    return "report.json" in inside and not any(e.endswith((".npy", ".npz")) for e in inside)

  subdirs = [
    e
    for e in entries
    if os.path.isdir(os.path.join(path, e))
    and not e.startswith(".")
    and not report_output(os.path.join(path, e))
  ]
  npz = [e for e in entries if e.endswith(".npz") and os.path.isfile(os.path.join(path, e))]
  if not subdirs and len(npz) < 2:
    return None
  out = {e: os.path.join(path, e) for e in subdirs}
  for e in npz:
    stem = e[: -len(".npz")]
    out[e if stem in out else stem] = os.path.join(path, e)
  return out


# --------------------------------------------------------------------------
# Output: JSON, figures, terminal and markdown.
# --------------------------------------------------------------------------


def _json_ready(rep: dict) -> dict:
  rep = dict(rep)
  rep["timing"] = {k: float(f"{v:.3g}") for k, v in rep.get("timing", {}).items()}
  return round_floats(rep)


def write_report(
  rep: dict,
  scores_in: ArrayLike | None = None,
  labels: ArrayLike | None = None,
  out_dir: str = "jaxcal-report",
  *,
  formats: Sequence[str] = ("png", "pdf"),
) -> dict[str, str]:
  """Writes ``report.json`` and the report's figures to ``out_dir``.

  One model (from :func:`calibration_report`, with its ``scores_in`` and
  ``labels``): ``reliability`` (with consistency bands),
  ``smooth_reliability`` (the kernel-smoothed diagram behind smECE),
  ``bin_robustness`` (each error against the bin count, ℓ1 and squared
  panels, bootstrap bands, calibrated-predictor values) and
  ``utility_ecdf``. Several models (from :func:`compare_report`):
  ``rank_stability_C<C>_n<n>`` per group of models with the same class and
  sample counts, and ``intervals_<error>`` (the headline
  errors of every model with their intervals). Each figure is written once
  per format. The two reliability diagrams need the predictions and labels:
  a one-model report without them gets the other figures only.

  ``report.json`` lists the files written (``files``: names relative to
  ``out_dir``, ``report.json`` last). Written into the folder of an earlier
  report, the figures that report's ``files`` named and this one does not
  rewrite (other formats, other models' figures) are removed once the new
  ``report.json`` is written: they would contradict it. Nothing else is
  removed: only names of plain files directly in ``out_dir`` ending in
  ``.png``, ``.pdf`` or ``.svg``, and nothing when the earlier
  ``report.json`` cannot be read, is not a jaxcal report (its ``jaxcal``
  and ``settings``) or has no ``files`` list; a file that cannot be
  removed is kept.

  Args:
    rep: a report dict.
    scores_in: ``(n, C)`` predictions of a one-model report (for the
      reliability diagrams), with ``labels``; ``None`` (with ``labels``
      ``None``): no reliability diagrams. A comparison report takes neither.
    labels: ``(n,)`` labels of a one-model report, with ``scores_in``.
    out_dir: output folder (created).
    formats: figure formats (``"png"``, ``"pdf"``, ``"svg"``); none (an
      empty sequence): ``report.json`` alone.

  Returns:
    name -> path of every file written (figures by their first format; the
    other formats' files lie beside them).

  Raises:
    ValueError: ``rep`` not a report or lacking a key the figures read (the
      message names them), an unknown format, ``out_dir`` a file, not
      creatable or not writable, ``scores_in`` without ``labels`` or
      ``labels`` without ``scores_in``, either of them with a comparison
      report, or ``scores_in`` of another shape than the report's
      predictions (checked before anything is written).
    TypeError: ``out_dir`` not a path.

  Example:
    A hand-made report with ``formats=()`` (``report.json`` alone; a report
    from :func:`calibration_report` with ``formats=("png",)`` also gets its
    figures):

    >>> import json, os, tempfile
    >>> rep = {"settings": {"num_bins": 15}, "metrics": {"accuracy": {"estimate": 0.9452}}}
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...   paths = write_report(rep, out_dir=os.path.join(tmp, "report"), formats=())
    ...   with open(paths["json"]) as f:
    ...     saved = json.load(f)
    >>> sorted(paths), os.path.basename(paths["json"]), saved["metrics"]
    (['json'], 'report.json', {'accuracy': {'estimate': 0.9452}})
  """
  from jaxcal import plots

  _check_report(rep)
  if isinstance(formats, str) or not isinstance(formats, Sequence):
    raise ValueError(f"formats must be a sequence of names such as ('png', 'pdf'), got {formats!r}")
  for fmt in formats:  # before any file is written
    if fmt not in ("png", "pdf", "svg"):
      raise ValueError(f"formats must be among ('png', 'pdf', 'svg'), got {fmt!r}")
  # half a pair left the reliability diagrams out, and a comparison ignored both, silently
  given = [k for k, v in (("scores_in", scores_in), ("labels", labels)) if v is not None]
  if given and "rank_stability" in rep:
    raise ValueError(
      f"{' and '.join(given)}: a comparison report (from compare_report) has no reliability "
      "diagrams, so it takes no predictions; pass neither"
    )
  if len(given) == 1:
    other = "labels" if given[0] == "scores_in" else "scores_in"
    raise ValueError(
      f"{given[0]} was given without {other}: the reliability diagrams need both; "
      "pass both, or neither to leave those figures out"
    )
  if formats:  # every key the figures read
    _check_report(rep, "figures", arrays=bool(given))
  output_folder(out_dir, "out_dir", create=False)  # the type, and not a file, before any work
  if scores_in is not None and "input" in rep:
    shape = (rep["input"].get("n"), rep["input"].get("num_classes"))
    if tuple(np.shape(scores_in)) != shape:  # the figures would show other predictions
      raise ValueError(
        f"scores_in has shape {tuple(np.shape(scores_in))} but the report is of predictions of "
        f"shape {shape}: pass the predictions the report was computed on"
      )
  output_folder(out_dir, "out_dir")
  earlier = _listed_figures(out_dir)  # before report.json is replaced
  plt = None
  paths: dict[str, str] = {}
  files: list[str] = []

  def save(name, fig):
    nonlocal plt
    written = plots.savefig(fig, os.path.join(out_dir, name), formats)
    paths[name] = written[0]
    files.extend(os.path.basename(p) for p in written)
    from jaxcal._src.plots._mpl import pyplot

    plt = pyplot()
    plt.close(fig)

  if formats:
    if "rank_stability" in rep:
      _write_compare_figures(rep, save)
    else:
      _write_single_figures(rep, scores_in, labels, save)
  paths["json"] = os.path.join(out_dir, "report.json")
  ready = _json_ready(rep)
  ready["files"] = [*files, "report.json"]
  with atomic_file(paths["json"]) as f:
    json.dump(ready, f, indent=1)
    f.write("\n")
  # an earlier report's figures beside this report.json had contradicted it (its
  # bin_robustness.pdf beside a report of other models, written as PNG only)
  for name in earlier:
    if name not in files:
      _remove_figure(out_dir, name)
  return paths


#: The suffixes of the files :func:`write_report` removes of an earlier report's.
_FIGURE_SUFFIXES = (".png", ".pdf", ".svg")


def _figure_name(name: Any) -> bool:
  """Whether ``name`` (an entry of a report.json's ``files``) is a figure's file name in
  its folder: a str ending in a figure suffix, with no folder part (``../x.png``, ``a/b.png``
  and absolute paths are not)."""
  return (
    isinstance(name, str)
    and name.endswith(_FIGURE_SUFFIXES)
    and not name.startswith(".")
    and os.path.basename(name) == name
    and not any(sep and sep in name for sep in ("/", "\\", os.sep, os.altsep))
    and "\0" not in name
  )


def _plain_file(path: str) -> bool:
  """Whether ``path`` is a regular file itself (not a link, folder, pipe or device)."""
  try:
    return stat.S_ISREG(os.lstat(path).st_mode)
  except (OSError, ValueError):
    return False


def _listed_figures(out_dir: Any) -> list[str]:
  """The figure files the ``report.json`` in ``out_dir`` lists that are there (its ``files``).

  Only figure names (:func:`_figure_name`) of plain files; none where there is no
  ``report.json``, or one that is not a plain file, not JSON or has no list ``files``
  (a report of an earlier jaxcal, or someone else's file).
  """
  path = os.path.join(out_dir, "report.json")
  if not _plain_file(path):
    return []
  try:
    with open(input_file(path), encoding="utf-8") as f:
      earlier = json.load(f)
  except (OSError, ValueError):  # (UnicodeDecodeError and JSONDecodeError are ValueErrors)
    return []
  # a jaxcal report's (its "jaxcal" and "settings"): another tool's report.json with a
  # "files" list named a user's figures for removal (found by the session's reread)
  ours = isinstance(earlier, dict) and isinstance(earlier.get("jaxcal"), dict)
  listed = earlier.get("files") if ours and "settings" in earlier else None
  if not isinstance(listed, list):
    return []
  names = [x for x in listed if _figure_name(x)]
  return [x for x in dict.fromkeys(names) if _plain_file(os.path.join(out_dir, x))]


def _remove_figure(out_dir: Any, name: str) -> None:
  """Removes the figure file ``name`` of ``out_dir`` when it is still a plain file."""
  path = os.path.join(out_dir, name)
  if _figure_name(name) and _plain_file(path):
    try:
      os.remove(path)
    except OSError:  # removed meanwhile, or not ours to remove (a shared folder): kept
      pass


def _write_single_figures(rep, scores_in, labels, save):
  from jaxcal import plots
  from jaxcal._src.plots import _mpl

  inp = rep["input"]
  model, n = inp.get("source") or None, inp["n"]
  if scores_in is not None and labels is not None:
    # in the report's size bucket (masked), as the report's sections: the kernel smoothing,
    # the bands and the diagram compiled again for every new n (20-40 s on 2 busy cores)
    probs, y, _, nll = _prepare(scores_in, labels)
    data = _padded_data(probs, y, nll)
    m = rep["settings"]["num_bins"]
    key = _keys(rep["seeds"]["seed"])[2]
    p, y, w = data.probs, data.y, data.where
    bands = consistency_bands(key, p, m, "fixed", confidence=rep["settings"]["confidence"], where=w)
    save("reliability", plots.reliability_diagram(p, y, m, where=w, bands=bands, model=model))
    save("smooth_reliability", plots.smooth_reliability_diagram(p, y, where=w, model=model))
  rob = rep["robustness"]
  curves = {k: v["estimate"] for k, v in rob["curves"].items()}
  bands = {k: (v["lo"], v["hi"]) for k, v in rob["curves"].items() if "lo" in v}
  save(
    "bin_robustness",
    plots.bin_robustness_plot(
      rob["num_bins"],
      curves,
      bands=bands or None,
      reference=rob["calibrated_value"],
      model=model,
      n=n,
      title=_mpl.title(
        "Calibration error against the bin count" + (f" ({t})" if (t := _band_text(rep)) else ""),
        model,
        n,
      ),
    ),
  )
  ecdfs = {fam: v["errors"] for fam, v in rep.get("utility", {}).items()}
  if ecdfs:
    fig = plots.ecdf_plot(
      {f"{fam} utilities": e for fam, e in ecdfs.items()},
      log_x=True,
      title=None,
      model=model,
      n=n,
    )
    save("utility_ecdf", fig)


#: The errors of a comparison's ``intervals_<error>`` figures.
_INTERVAL_FIGURES = (("ConfECE", "fixed"), ("ConfCE_corr", "quantile"), ("LinCE_cw", "quantile"))


def _write_compare_figures(rep, save):
  from jaxcal import plots

  for block in rep["rank_stability"]:
    corr = {k: v["between_bins"]["estimate"] for k, v in block["errors"].items()}
    save(
      f"rank_stability_C{block['num_classes']}_n{block['n']}",
      plots.rank_stability_plot(
        block["num_bins"], corr, num_models=len(block["models"]), n=block["n"]
      ),
    )
  for nm, lab in _figure_columns(rep["settings"]["num_bins"]):
    rows = {}
    for model, entries in rep["metrics"].items():
      e = entries[lab]
      rows[model] = (e["estimate"], e.get("lo", np.nan), e.get("hi", np.nan))
    save(
      f"intervals_{nm}",
      plots.interval_plot(
        rows,
        metric=lab,
        log_x=metric(nm).kind == "squared",
        title=f"{lab}: {_interval_text(rep)}",
      ),
    )


def _interval_text(rep: dict, resamples: str = "resamples") -> str:
  """What the intervals are: the headline metrics' (``resamples``), or the bin-count
  bands' (``"robustness_resamples"``, their own count: the headline's had named it)."""
  s = rep["settings"]
  if not s.get(resamples):
    return f"no intervals ({resamples} = 0)"
  # enough digits for 99.99 (three significant digits read "100", stripped to "1")
  pct = format(100 * s["confidence"], ".6g")
  return f"{pct}% {s['interval']} bootstrap intervals over {s[resamples]} resamples"


def _table_pairs(bins: Sequence[int]) -> list[tuple[int, int]]:
  """The bin-count pairs of the Markdown ranking table: the fewest, 20 (else the middle)
  and the most bins, pairwise (the truthful paper's Table 1: 5, 20 and 2000 bins).

  The first six pairs in the given order had been all from 5 bins (5 vs 10 ... 5 vs
  500 with the default bin counts), never 5 or 20 against 2000.

  Example:
    >>> _table_pairs([5, 10, 20, 50, 100, 200, 500, 1000, 2000])
    [(5, 20), (5, 2000), (20, 2000)]
  """
  s = sorted(set(bins))
  mid = 20 if 20 in s else s[len(s) // 2]
  keep = sorted({s[0], mid, s[-1]})
  return [(a, b) for i, a in enumerate(keep) for b in keep[i + 1 :]]


def _band_text(rep: dict) -> str:
  """What the bin-count bands are (:func:`_interval_text`), or ``""`` where none are drawn."""
  curves = (rep.get("robustness") or {}).get("curves", {})
  if not rep["settings"].get("robustness_resamples") or all("lo" not in v for v in curves.values()):
    return ""
  return _interval_text(rep, "robustness_resamples")


#: Why a rank correlation between two bin counts reads ``nan``.
UNRANKED_NOTE = (
  "nan: at one of the two bin counts every model has the same error, so there is no order "
  "to compare"
)


def _unranked(block: dict, cells: list[tuple[int, int]]) -> bool:
  """Whether one of the ``(i, j)`` correlations shown of a ranking block is NaN (or null)."""
  return any(
    v is None or (isinstance(v, float) and math.isnan(v))
    for e in block["errors"].values()
    for v in (e["between_bins"]["estimate"][i][j] for i, j in cells)
  )


#: Footnote of the starred (truthful) rows.
TRUTHFUL_NOTE = "* truthful calibration error: the true probabilities minimise its expectation"

#: Footnote of the rows whose estimate lies outside its own interval.
OUTSIDE_NOTE = (
  "† the estimate lies outside its bootstrap interval: the error's estimator is biased "
  "upward, more so on a resample (which duplicates samples), so the resampled errors lie "
  "above the estimate; the interval is the spread of the estimate, shifted, and no "
  "interval method removes that bias (--interval basic reflects the shift to the other "
  "side and can fall below 0)"
)


#: Footnote of the rank correlations that lie outside their own interval.
RANK_OUTSIDE_NOTE = (
  "† the correlation lies outside its bootstrap interval: a resample (which duplicates "
  "samples) biases the binned errors, more so at many bins, which shifts the rankings it "
  "compares; the interval is the spread of the correlation, shifted"
)

#: Footnote of the † intervals of zero width of a BCa report (OUTSIDE_NOTE's "spread of
#: the estimate, shifted" is false for them).
COLLAPSED_NOTE = (
  "† on an interval of zero width: the BCa interval collapsed (nearly every resample lies on "
  "one side of the estimate, which makes its bias correction extreme); --interval percentile "
  "shows the resamples' spread"
)


def _outside(estimate: Any, lo: Any, hi: Any) -> bool:
  """Whether a real ``estimate`` lies outside ``[lo, hi]`` (never where one is None or NaN)."""
  if any(v is None for v in (estimate, lo, hi)):
    return False
  e, a, b = (float(v) for v in (estimate, lo, hi))
  return e < a or e > b


def _notes(
  rep: dict, marked: Sequence[tuple[Any, Any]], digits: int = 3, note: str = OUTSIDE_NOTE
) -> list[str]:
  """The footnotes of the † cells, given the ``(lo, hi)`` of each (in a table of ``digits``).

  ``note`` explains a † (:data:`OUTSIDE_NOTE`, :data:`RANK_OUTSIDE_NOTE`), except on an
  interval of a BCa report that reads as zero width (``[1.61e-6, 1.61e-6]``): a collapsed
  interval, which :data:`COLLAPSED_NOTE` explains. No cell: no note.
  """
  bca = rep["settings"].get("interval") == "bca"
  collapsed = [
    bca and None not in (lo, hi) and format_number(lo, digits) == format_number(hi, digits)
    for lo, hi in marked
  ]
  return ([note] if not all(collapsed) else []) + ([COLLAPSED_NOTE] if any(collapsed) else [])


def _once(shown: list[str], notes: list[str]) -> list[str]:
  """The ``notes`` not in ``shown`` yet, added to it (each footnote once per document)."""
  new = [x for x in notes if x not in shown]
  shown += new
  return new


def _marked(entries: Mapping[str, dict], labels: Sequence[str] | None = None) -> list[tuple]:
  """``(lo, hi)`` of the metric entries (of ``labels``, default all) marked †."""
  keys = entries if labels is None else labels
  return [
    (entries[k].get("lo"), entries[k].get("hi"))
    for k in keys
    if entries[k].get("estimate_outside_interval")
  ]


def _rank_cell(bb: dict, i: int, j: int) -> tuple[str, tuple | None]:
  """``estimate [lo, hi]`` of the rank correlation ``[i][j]`` (2 digits), marked † when the
  estimate lies outside its interval, and the marked ``(lo, hi)`` (else ``None``)."""
  lo, hi = bb.get("lo"), bb.get("hi")
  a = None if lo is None else lo[i][j]
  b = None if lo is None or hi is None else hi[i][j]
  est = bb["estimate"][i][j]
  text = format_interval(est, a, b, 2)
  if _outside(est, a, b):
    return text + " †", (a, b)
  return text, None


def _interval_cell(e: dict) -> str:
  """``estimate [lo, hi]`` of one metric entry, marked † when the estimate lies outside."""
  val = format_interval(e["estimate"], e.get("lo"), e.get("hi"))
  return val + " †" if e.get("estimate_outside_interval") else val


def _metric_rows(entries: Mapping[str, dict]) -> list[tuple[str, str, str]]:
  rows = []
  for lab, e in entries.items():
    mark = "*" if e.get("truthful") else ""
    rows.append((lab + mark, _interval_cell(e), _desc(lab)))
  return rows


def _desc(lab: str) -> str:
  return metric(lab).description


def _robustness_lines(rob: dict) -> list[str]:
  bins = rob["num_bins"]
  lines = []
  for lab, v in rob["curves"].items():
    est = v["estimate"]
    ref = rob["calibrated_value"].get(lab)
    tail = f" (calibrated predictor: {format_number(ref)})" if ref is not None else ""
    lines.append(
      f"    {lab:17s} {format_number(est[0])} at m = {bins[0]} → "
      f"{format_number(est[-1])} at m = {bins[-1]}{tail}"
    )
  return lines


def _figure(figures: Mapping[str, str] | None, name: str) -> str:
  """`` (<file name>)`` of figure ``name`` as written (``write_report``'s paths), or ``""``."""
  if not figures or name not in figures:
    return ""
  return f" ({os.path.basename(figures[name])})"


def _key_text(path: tuple) -> str:
  """``['input']['n']``: where a key lies in a report."""
  return "".join(f"[{k!r}]" for k in path)


def _at(rep: Any, path: tuple, default: Any = None) -> Any:
  """The value at ``path`` (dict keys, list indices) in ``rep``, or ``default`` when absent."""
  node = rep
  for k in path:
    if isinstance(node, Mapping) and k in node:
      node = node[k]
    elif isinstance(node, list) and isinstance(k, int) and 0 <= k < len(node):
      node = node[k]
    else:
      return default
  return node


def _keys_of(section: Any) -> list:
  """The keys of a dict section (nothing for anything else, which its own path reports)."""
  return list(section) if isinstance(section, Mapping) else []


_ABSENT = object()  # (a key holding None is there)

#: What each reader of a report reads (``_check_report``'s ``use``).
_READERS = {"summary": "format_summary", "markdown": "format_markdown", "figures": "write_report"}


def _report_reads(rep: dict, use: str, arrays: bool) -> list[tuple]:
  """The key paths that ``use`` (a key of ``_READERS``) reads of ``rep`` (given its sections)."""
  one = "rank_stability" not in rep
  need: list[tuple] = []
  if (use != "figures" or not one) and _at(rep, ("settings", "resamples")):  # _interval_text
    need += [("settings", "confidence"), ("settings", "interval")]
  if one:
    if use in ("summary", "markdown"):
      need += [("input", k) for k in ("n", "num_classes", "kind")]
      need += [("metrics", lab, "estimate") for lab in _keys_of(rep["metrics"])]
      for fam in _keys_of(rep.get("utility")):
        need += [("utility", fam, "num_utilities")]
        need += [("utility", fam, "quantiles", q) for q in ("0.5", "0.9", "1.0")]
      for mode in _keys_of(rep.get("decomposition")):
        need += [("decomposition", mode, k) for k in ("S", "MCB", "DSC", "UNC")]
      if use == "summary" and rep.get("timing"):
        need += [("timing", "total_s"), ("jaxcal", "device"), ("jaxcal", "jaxcal")]
    else:  # the figures of one model
      need += [("input", "n")]
      need += [("utility", fam, "errors") for fam in _keys_of(rep.get("utility"))]
      if arrays:
        need += [("settings", "num_bins"), ("settings", "confidence"), ("seeds", "seed")]
    if use == "figures" or rep.get("robustness"):
      need += [("robustness", k) for k in ("num_bins", "curves", "calibrated_value")]
      curves = _at(rep, ("robustness", "curves"))
      need += [("robustness", "curves", lab, "estimate") for lab in _keys_of(curves)]
    return need
  need += [("settings", "num_bins")]
  if use != "figures":
    need += [("models",)]
  models = _at(rep, ("models",))
  if models is not None and not isinstance(models, list):
    need += [("models", 0)]  # (a list of dicts)
  names = [_at(models, (i, "name")) for i in range(len(models))] if isinstance(models, list) else []
  if use == "summary":
    need += [("models", i, "name") for i in range(len(names))]
  m = _at(rep, ("settings", "num_bins"))
  if isinstance(m, int | np.integer) and not isinstance(m, bool) and m >= 1:
    if use == "figures":  # the headline errors each reader shows of every model
      labs = [lab for _, lab in _figure_columns(m)]
    else:
      labs = (_summary_columns if use == "summary" else _markdown_columns)(m)
    rows = [x for x in names if isinstance(x, str)] if use == "summary" else rep["metrics"]
    need += [("metrics", x, lab, "estimate") for x in rows for lab in labs]
  blocks = rep["rank_stability"]
  if not isinstance(blocks, list):
    return [*need, ("rank_stability", 0)]  # (a list of groups)
  keys = ("num_bins", "models", "errors", "n", "num_classes")
  for i, block in enumerate(blocks):
    need += [("rank_stability", i, k) for k in keys]
    if use == "summary" and _at(rep, ("settings", "resamples")):
      need += [("rank_stability", i, "paired")]
    for lab in _keys_of(_at(block, ("errors",))):
      need += [("rank_stability", i, "errors", lab, "between_bins", "estimate")]
  return need


def _check_report(rep: Any, use: str | None = None, *, arrays: bool = False) -> None:
  """A report dict from :func:`calibration_report` or :func:`compare_report`, else a ValueError.

  With ``use`` (a key of ``_READERS``) every key that reader reads must be
  there too (``format_summary({"settings": {}, "metrics": {}})`` raised a
  ``KeyError: 'input'``); ``arrays``: ``write_report`` was given the
  predictions and labels (the reliability figures read the seed).
  """
  if not isinstance(rep, dict):
    raise ValueError(
      "rep must be a report dict from calibration_report or compare_report, "
      f"got {type(rep).__name__}"
    )
  lacking = [
    _key_text((k,)) for k in ("settings", "metrics") if not isinstance(rep.get(k), Mapping)
  ]
  reader = ""
  if not lacking and use is not None:
    reads = _report_reads(rep, use, arrays)
    lacking = [_key_text(p) for p in reads if _at(rep, p, _ABSENT) is _ABSENT]
    reader = f" ({_READERS[use]} reads them)"
  if lacking:
    raise ValueError(
      "rep must be a report dict from calibration_report or compare_report; missing: "
      f"{', '.join(dict.fromkeys(lacking))}{reader}"
    )


def format_summary(rep: dict, *, figures: Mapping[str, str] | None = None) -> str:
  """The terminal summary of a report (one model or several).

  Numbers have three significant digits; ``*`` marks the truthful errors and
  ``†`` an estimate outside its own interval (explained once in a footnote).

  Args:
    rep: a report dict from :func:`calibration_report` (one model) or
      :func:`compare_report` (several models, recognised by its
      ``rank_stability`` section). It needs ``settings``, ``metrics`` and
      ``input`` (one model) or ``models`` (several); the ``robustness``,
      ``utility``, ``decomposition`` and ``timing`` sections are shown when
      present.
    figures: the files :func:`write_report` wrote (its name -> path); a
      section names its figure's file (e.g. ``bin_robustness.svg``) only
      when it is there. ``None`` (default): no figure file is named.

  Returns:
    The summary as one ``str`` of newline-separated lines (no trailing
    newline): the input and the interval settings, one line per metric
    (``estimate [lo, hi]`` and what it measures), then the present sections;
    for several models a table of headline errors per model and the Spearman
    correlations of their rankings between bin counts.

  Raises:
    ValueError: ``rep`` is not a report dict, or lacks a key the summary
      reads (the message names every missing key, e.g. ``['input']['n']``).

  Example:
    >>> rep = {
    ...   "settings": {"resamples": 0},
    ...   "input": {"n": 500, "num_classes": 10, "kind": "logits"},
    ...   "metrics": {"accuracy": {"estimate": 0.9452},
    ...               "LinCE_cw(qua;15)": {"estimate": 0.0123, "truthful": True}},
    ... }
    >>> print(format_summary(rep))
    jaxcal report — predictions
      n = 500 samples, C = 10 classes (logits); no intervals (resamples = 0)
        accuracy           0.945   top-1 accuracy
        LinCE_cw(qua;15)*  0.0123  class-wise squared binned error (truthful)
        (* truthful calibration error: the true probabilities minimise its expectation)
  """
  _check_report(rep, "summary")
  if "rank_stability" in rep:
    return _compare_summary(rep)
  inp = rep["input"]
  lines = [
    f"jaxcal report — {inp.get('source') or 'predictions'}",
    f"  n = {inp['n']:,} samples, C = {inp['num_classes']} classes ({inp['kind']}); "
    f"{_interval_text(rep)}",
  ]
  rows = _metric_rows(rep["metrics"])
  w = max((len(r[0]) for r in rows), default=0)  # (no metrics: max() raised)
  w2 = max((len(r[1]) for r in rows), default=0)
  for name, val, desc in rows:
    lines.append(f"    {name:{w}s}  {val:{w2}s}  {desc}")
  lines.append(f"    ({TRUTHFUL_NOTE})")
  lines += [f"    ({x})" for x in _notes(rep, _marked(rep["metrics"]))]
  rob = rep.get("robustness")
  if rob:
    lines.append(
      f"  bin count{_figure(figures, 'bin_robustness')}: one model's errors change with m; "
      "squared errors fall toward a calibrated predictor's value"
    )
    lines += _robustness_lines(rob)
  u = rep.get("utility") or {}
  for fam, v in u.items():
    q = v["quantiles"]
    lines.append(
      f"  UC over {v['num_utilities']:,} {fam} utilities: median {format_number(q['0.5'])}, "
      f"90% {format_number(q['0.9'])}, max {format_number(q['1.0'])}"
    )
  for mode, d in (rep.get("decomposition") or {}).items():
    lines.append(
      f"  Brier/C decomposition ({mode}): S {format_number(d['S'])} = MCB "
      f"{format_number(d['MCB'])} − DSC {format_number(d['DSC'])} + UNC {format_number(d['UNC'])}"
    )
  t = rep.get("timing", {})
  if t:
    lines.append(
      f"  computed in {format_number(t['total_s'])} s on {rep['jaxcal']['device']} "
      f"(jaxcal {rep['jaxcal']['jaxcal']})"
    )
  return "\n".join(lines)


def _rank_interval_text(rep: dict, block: dict) -> str:
  """How the rank correlations of a group got their intervals (none without resamples)."""
  if not rep["settings"].get("resamples"):
    return "estimates, no intervals"
  return f"{'paired' if block['paired'] else 'unpaired'} bootstrap"


def _markdown_columns(m: int) -> list[str]:
  """The headline labels the comparison's Markdown table shows of every model (``m`` bins)."""
  return [label(nm, b, m if b else None) for nm, b in HEADLINE]


def _figure_columns(m: int) -> list[tuple[str, str]]:
  """``(name, label)`` of the errors the comparison draws an interval figure of (``m`` bins)."""
  return [(nm, label(nm, b, m)) for nm, b in _INTERVAL_FIGURES]


def _summary_columns(m: int) -> list[str]:
  """The headline labels the comparison summary shows of every model (``m`` bins)."""
  show = [
    label(nm, b, m) for nm, b in HEADLINE if nm in ("accuracy", "ConfECE", "smECE", "LinCE_cw")
  ]
  return [x for x in show if "qua" not in x or x.startswith("LinCE")]


def _compare_summary(rep: dict) -> str:
  s = rep["settings"]
  lines = [f"jaxcal report — {len(rep['models'])} models; {_interval_text(rep)}"]
  show = _summary_columns(s["num_bins"])
  names = [x["name"] for x in rep["models"]]
  w = max((len(x) for x in names), default=0)
  lines.append("    " + " " * w + "  " + "  ".join(f"{x:26s}" for x in show))
  marked = []
  for name in names:
    e = rep["metrics"][name]
    vals = [_interval_cell(e[x]) for x in show]
    marked += _marked(e, show)
    lines.append(f"    {name:{w}s}  " + "  ".join(f"{v:26s}" for v in vals))
  shown = _notes(rep, marked)
  lines += [f"    ({x})" for x in shown]
  for block in rep["rank_stability"]:
    bins = block["num_bins"]
    i, j = bins.index(min(bins)), bins.index(max(bins))  # the counts as given: any order
    a, b = bins[i], bins[j]
    lines.append(
      f"  ranking of {len(block['models'])} models (n = {block['n']:,}, C = "
      f"{block['num_classes']}) kept between {a} and {b} bins — Spearman "
      f"({_rank_interval_text(rep, block)}):"
    )
    marked = []
    for lab, v in block["errors"].items():
      text, miss = _rank_cell(v["between_bins"], i, j)
      marked += [miss] if miss else []
      lines.append(f"    {lab:17s} {text}")
    if _unranked(block, [(i, j)]):
      lines.append(f"    ({UNRANKED_NOTE})")
    lines += [f"    ({x})" for x in _once(shown, _notes(rep, marked, 2, RANK_OUTSIDE_NOTE))]
  if not rep["rank_stability"]:
    lines.append("  (no group of >= 3 models with the same n and C: no ranking comparison)")
  return "\n".join(lines)


def format_markdown(rep: dict, *, figures: Mapping[str, str] | None = None) -> str:
  """The report as markdown tables (metrics with intervals; rankings for several models).

  Args:
    rep: a report dict from :func:`calibration_report` (one model) or
      :func:`compare_report` (several models, recognised by its
      ``rank_stability`` section). It needs ``settings``, ``metrics`` and
      ``input`` (one model); the ``robustness``, ``utility`` and
      ``decomposition`` sections get their own tables when present.
    figures: the files :func:`write_report` wrote (its name -> path); a
      table names its figure's file (e.g. ``utility_ecdf.svg``) only when it
      is there. ``None`` (default): no figure file is named.

  Returns:
    The markdown text, a ``str`` ending in a newline. One model: a metric |
    estimate [interval] | what table, then tables of the errors across bin
    counts, of the UC quantiles and of the Brier decompositions. Several
    models: a model-by-headline-error table and, per group of models (its
    title names their ``n``, ``C`` and the models), the Spearman correlations
    of their ranking between pairs of bin counts. ``†`` marks an estimate
    outside its own interval, explained once in a footnote.

  Raises:
    ValueError: ``rep`` is not a report dict, or lacks a key the tables
      read (the message names every missing key, e.g. ``['input']['n']``).

  Example:
    >>> rep = {
    ...   "settings": {"resamples": 0},
    ...   "input": {"n": 500, "num_classes": 10, "kind": "logits"},
    ...   "metrics": {"accuracy": {"estimate": 0.9452}},
    ... }
    >>> lines = format_markdown(rep).splitlines()
    >>> lines[2]
    '| metric | estimate [interval] | what |'
    >>> lines[4]
    '| accuracy | 0.945 | top-1 accuracy |'
  """
  _check_report(rep, "markdown")
  if "rank_stability" in rep:
    labs = _markdown_columns(rep["settings"]["num_bins"])
    out = [f"{len(rep['models'])} models; {_interval_text(rep)}.", ""]
    out.append("| model | " + " | ".join(labs) + " |")
    out.append("|---" * (len(labs) + 1) + "|")
    marked = []
    for model in rep["metrics"]:
      e = rep["metrics"][model]
      out.append(f"| {model} | " + " | ".join(_interval_cell(e[x]) for x in labs) + " |")
      marked += _marked(e, labs)
    shown = _notes(rep, marked)
    out += [x for note in shown for x in ("", note + ".")]
    for block in rep["rank_stability"]:
      bins = block["num_bins"]
      # two groups (C = 100 and C = 10 models, say) had the same title
      out += [
        "",
        f"Spearman correlation of the ranking of {len(block['models'])} models (n = "
        f"{block['n']:,}, C = {block['num_classes']}: {', '.join(block['models'])}):",
        "",
      ]
      pairs = _table_pairs(bins)
      head = [f"{a} vs {b} bins" for a, b in pairs]
      out.append("| error | " + " | ".join(head) + " |")
      out.append("|---" * (len(head) + 1) + "|")
      marked = []
      for lab, v in block["errors"].items():
        cells = []
        for a, b in pairs:
          text, miss = _rank_cell(v["between_bins"], bins.index(a), bins.index(b))
          cells.append(text)
          marked += [miss] if miss else []
        out.append(f"| {lab} | " + " | ".join(cells) + " |")
      if _unranked(block, [(bins.index(a), bins.index(b)) for a, b in pairs]):
        out += ["", UNRANKED_NOTE + "."]
      # each note once, below the first table that needs it
      out += [
        x
        for note in _once(shown, _notes(rep, marked, 2, RANK_OUTSIDE_NOTE))
        for x in ("", note + ".")
      ]
    return "\n".join(out) + "\n"
  inp = rep["input"]
  out = [
    f"{inp.get('source') or 'predictions'}: n = {inp['n']:,}, C = {inp['num_classes']}; "
    f"{_interval_text(rep)}.",
    "",
    "| metric | estimate [interval] | what |",
    "|---|---|---|",
  ]
  for name, val, desc in _metric_rows(rep["metrics"]):
    out.append(f"| {name} | {val} | {desc} |")
  out.append("")
  out.append(f"\\{TRUTHFUL_NOTE}.")
  shown = _notes(rep, _marked(rep["metrics"]))
  out += [x for note in shown for x in ("", note + ".")]
  rob = rep.get("robustness")
  if rob:
    bins = rob["num_bins"]
    cols = sorted({bins[0], bins[len(bins) // 2], bins[-1]})
    what = f"; {t}" if (t := _band_text(rep)) else ""
    out += ["", f"Errors across the bin count m{_figure(figures, 'bin_robustness')}{what}:", ""]
    out.append("| error | " + " | ".join(f"m = {b}" for b in cols) + " | calibrated predictor |")
    out.append("|---" * (len(cols) + 2) + "|")
    marked = []
    for lab, v in rob["curves"].items():
      lo, hi = v.get("lo"), v.get("hi")
      cells = []
      for b in cols:
        i = bins.index(b)
        e = float(v["estimate"][i])
        if lo is None:
          cells.append(format_number(e))
          continue
        miss = _outside(e, lo[i], hi[i])
        marked += [(lo[i], hi[i])] if miss else []
        cells.append(format_interval(e, lo[i], hi[i]) + (" †" if miss else ""))
      ref = rob["calibrated_value"].get(lab)
      cells.append("—" if ref is None else format_number(ref))
      out.append(f"| {lab} | " + " | ".join(cells) + " |")
    # (each note once: those of the metrics' table are not repeated)
    out += [x for note in _once(shown, _notes(rep, marked)) for x in ("", note + ".")]
  u = rep.get("utility") or {}
  if u:
    fig = _figure(figures, "utility_ecdf")
    out += ["", f"Utility calibration UC over sampled utilities{fig}:", ""]
    out += ["| family | utilities | median | 90% | max |", "|---|---|---|---|---|"]
    for fam, v in u.items():
      q = v["quantiles"]
      out.append(
        f"| {fam} | {v['num_utilities']:,} | {format_number(q['0.5'])} | "
        f"{format_number(q['0.9'])} | {format_number(q['1.0'])} |"
      )
  dec = rep.get("decomposition") or {}
  if dec:
    out += ["", "Brier score decompositions (multiclass Brier / C), S = MCB − DSC + UNC:", ""]
    out += ["| mode | S | MCB | DSC | UNC |", "|---|---|---|---|---|"]
    for mode, d in dec.items():
      out.append(
        f"| {mode} | {format_number(d['S'])} | {format_number(d['MCB'])} | "
        f"{format_number(d['DSC'])} | {format_number(d['UNC'])} |"
      )
  return "\n".join(out) + "\n"


def format_comparison(
  rows: Mapping[str, Mapping[str, float]], columns: Sequence[str], markdown: bool = False
) -> str:
  """A metric-by-column table (e.g. before / after recalibration), 3 significant digits.

  Args:
    rows: a mapping row label -> {column name: value}; every value is a real
      scalar (Python or numpy number, or a 0-d array), written with
      :func:`format_number`.
    columns: the column names to show, in order (a sequence, not a string);
      every row must have each of them.
    markdown: a markdown table instead of aligned plain text (default False).

  Returns:
    The table as a ``str`` without a trailing newline: a ``metric`` column
    of the row labels, then one column per name in ``columns``. Plain text
    indents each line by two spaces and pads the columns; markdown writes
    ``| ... |`` rows under a ``|---|`` separator.

  Raises:
    TypeError: ``rows`` is not a mapping of mappings, or ``columns`` is not
      a sequence of names.
    ValueError: a row lacks a column, a value is not a real number, or
      ``markdown`` is not a bool.

  Example:
    >>> print(format_comparison({"NLL": {"before": 0.2041, "after": 0.1712}}, ("before", "after")))
      metric  before  after
      NLL     0.204   0.171
  """
  if not isinstance(rows, Mapping) or not all(isinstance(v, Mapping) for v in rows.values()):
    raise TypeError("rows must be a dict label -> {column: value}")
  if isinstance(columns, str | bytes) or not isinstance(columns, Sequence):
    raise TypeError(f"columns must be a sequence of column names, got {type(columns).__name__}")
  markdown = V.check_flag(markdown, "markdown")
  cells = []
  for lab, v in rows.items():
    missing = [c for c in columns if c not in v]
    if missing:
      raise ValueError(f"row {lab!r} has no column {missing[0]!r}; it has {list(v)!r}")
    for c in columns:
      x = v[c]
      if (
        isinstance(x, bool | np.bool_)
        or not isinstance(x, int | float | np.number | np.ndarray | jax.Array)
        or np.ndim(x) != 0
        or not np.isrealobj(x)
      ):
        raise ValueError(f"rows[{lab!r}][{c!r}] must be a real number, got {x!r}")
    cells.append([str(lab)] + [format_number(v[c]) for c in columns])
  head = ["metric", *(str(c) for c in columns)]
  if markdown:
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in cells]
    return "\n".join(lines)
  widths = [max(len(r[i]) for r in [head, *cells]) for i in range(len(head))]
  fmt = "  ".join(f"{{:{w}s}}" for w in widths)
  return "\n".join("  " + fmt.format(*r).rstrip() for r in [head, *cells])
