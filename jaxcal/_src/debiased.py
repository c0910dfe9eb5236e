"""Debiased ℓ2 calibration error of Kumar, Liang & Ma (2019).

For one binary column (scores ``s_i``, outcomes ``b_i``) and bins ``B`` of
size ``n_B``, the plug-in squared error ``Σ_B (n_B/n) (mean_B(s) - mean_B(b))^2``
is biased upwards by the sampling noise of the bin frequencies; the
debiased estimate subtracts the per-bin variance estimate:

``SQ = Σ_{B: n_B >= 2} (n_B/n) [(mean_B(s) - ȳ_B)^2 - ȳ_B (1 - ȳ_B) / (n_B - 1)]``

with ``ȳ_B = mean_B(b)``; bins with fewer than two samples contribute 0.
The reported calibration error is ``sqrt(max(SQ, 0))`` (top label, on the
confidences and correctness), or ``sqrt(mean_c max(SQ_c, 0))`` over the
class columns (marginal). Bins are equal-mass with cuts at midpoints
(:func:`jaxcal._src.binning.midpoint_mass_ends`).

This is ``calibration.get_calibration_error(probs, labels, p=2, debias=True,
mode=...)`` of the authors' ``uncertainty-calibration`` package (0.1.4) on
continuous predictions, i.e. ``lower_bound_scaling_ce`` with 15
``get_equal_bins`` bins. That function first tests whether the
predictions look discrete (fewer distinct values than a quarter of the
samples in every column) and then uses one bin per distinct value instead;
jaxcal always uses the equal-mass bins; for discrete predictors pass
``num_bins = n`` (one part per sample: the midpoint cuts then fall between
distinct values only, which is the package's ``get_discrete_bins``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcal._src import binning as B
from jaxcal._src import validation as V
from jaxcal._src.calibration_errors import _binary_rows, _run
from jaxcal._src.numerics import map_rows, safe_sqrt
from jaxcal._src.sorting import stable_argsort

__all__ = ["debiased_ce"]

_MODES = ("top_label", "marginal")


def _row_sq(s, b, m, max_bins, where=None):
  """Debiased squared error of one binary column for bin count ``m``.

  Masked-out samples (``where`` False) sort last (:func:`binning.masked_last`)
  with zero values, and only the kept ones are counted.
  """
  n = B.sample_count(where, s.shape[0])
  key = B.masked_last(s, where)
  if where is None:
    gap, bits = s - b, b
  else:
    gap, bits = jnp.where(where, s - b, 0.0), jnp.where(where, b, 0.0)
  order = stable_argsort(key)
  ks, gs, bs = key[order], gap[order], bits[order]
  ends = B.midpoint_mass_ends(ks, m, max_bins, n)
  vals = jnp.stack([gs, bs], axis=1)
  prefix = jnp.concatenate([jnp.zeros((1, 2), s.dtype), B.blocked_cumsum(vals)])
  at = prefix[ends]
  sums = at[1:] - at[:-1]  # (max_bins, 2)
  cnt = (ends[1:] - ends[:-1]).astype(s.dtype)
  ok = cnt >= 2
  safe = jnp.where(ok, cnt, 2.0)
  gap = sums[:, 0] / safe
  ybar = sums[:, 1] / safe
  per = gap**2 - ybar * (1.0 - ybar) / (safe - 1.0)
  sq = jnp.sum(jnp.where(ok, cnt * per, 0.0)) / jnp.asarray(n, s.dtype)
  # no bin of two samples: no estimate (an exact 0 had come back for num_bins >= n)
  return jnp.where(jnp.any(ok), sq, jnp.nan)


def _debiased_core(p, y, m, where=None, *, max_bins, mode, squared):
  s, b = _binary_rows(p, y, mode)
  sq = map_rows(lambda si, bi: _row_sq(si, bi, m, max_bins, where), s, b)  # 8 rows at a time
  mean = jnp.mean(sq)  # NaN where a row has no bin of two samples
  if squared:
    return mean
  # all clipped to 0: a zero gradient, not NaN; the NaN kept explicitly (XLA:CPU's maximum
  # drops it under some compile options)
  return jnp.where(jnp.isnan(mean), mean, safe_sqrt(jnp.mean(jnp.maximum(sq, 0.0))))


@V.same_arguments
def debiased_ce(
  probs: ArrayLike,
  labels: ArrayLike,
  num_bins: ArrayLike = 15,
  mode: str = "top_label",
  *,
  squared: bool = False,
  max_bins: int | None = None,
  from_logits: bool = False,
  where: ArrayLike | None = None,
) -> jax.Array:
  """Debiased ℓ2 calibration error (Kumar, Liang & Ma 2019), top-label or marginal.

  ``SQ = Σ_{B: n_B >= 2} (n_B/n) [(mean_B(s) - ȳ_B)^2 - ȳ_B (1 - ȳ_B)/(n_B - 1)]``
  on equal-mass bins cut at midpoints; the result is ``sqrt(max(SQ, 0))``
  (top label: scores ``max p``, outcomes ``1[argmax p = y]``) or
  ``sqrt(mean_c max(SQ_c, 0))`` (marginal: every class column), exactly as
  ``calibration.get_calibration_error(probs, labels, p=2, debias=True)``
  computes it for continuous predictions (see the module docstring for the
  discrete-prediction case it handles differently).

  Args:
    probs: ``(n, C)`` probabilities (logits with ``from_logits=True``).
    labels: ``(n,)`` integer labels.
    num_bins: bins per column (default 15); values above ``n`` act as ``n``.
      An int, or an int array (one compiled call; the result has its shape;
      an eager call raises when any of its counts has no bin of two samples).
      Bins of one sample are dropped but ``n`` still counts them, so the
      estimate shrinks toward 0 as ``num_bins`` nears ``n``; keep ``n /
      num_bins >= 2`` on distinct scores. For discrete predictors,
      ``num_bins = n`` gives the package's one bin per distinct value
      (midpoint cuts fall between distinct values only).
    mode: ``"top_label"`` (default) or ``"marginal"``.
    squared: return the debiased squared error itself (the mean of ``SQ_c``
      for marginal), unclipped and without the square root; it can be
      negative, and it is the quantity whose bias the correction removes:
      the bins' frequency noise. Scores that vary within a bin leave a
      downward bias, ``-sum_B (n_B / n) var_B(s) / (n_B - 1)`` in
      expectation on calibrated samples (small, but visible in a Monte Carlo
      mean: -1.8e-4 for CIFAR-10 ResNet-110's probabilities with labels drawn
      from them, n = 1000, 15 bins, ``"marginal"``).
    max_bins: static bound on a traced ``num_bins`` (a traced count above it
      gives NaN; a concrete one is checked, and counts above ``n`` act as ``n``).
    from_logits: treat ``probs`` as logits.
    where: optional ``(n,)`` bool mask; masked-out samples are treated as
      absent (``n`` is the number of ``True`` entries).

  Returns:
    Scalar, or an array shaped like ``num_bins``.

  Raises:
    ValueError: bad probabilities or labels, ``num_bins < 1``, an unknown
      ``mode`` or a ``squared`` that is not a bool; eagerly and in
      :func:`jaxcal.checked`, no bin of two samples (NaN under plain ``jit``).

  Example:
    >>> import jax.numpy as jnp
    >>> p = jnp.array([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4]])
    >>> y = jnp.array([0, 1, 1, 0])
    >>> round(float(debiased_ce(p, y, num_bins=2, squared=True)), 4)
    -0.0025

  Reference: Kumar, Liang & Ma (2019), "Verified Uncertainty Calibration",
  NeurIPS, arXiv:1909.10155, §5 (Def. 5.2, debiased estimator) and App. D.
  """
  if mode not in _MODES:
    raise ValueError(f"mode must be one of {_MODES}, got {mode!r}")
  # Bin counts above n act as n (no equal-mass rule to refuse them): no binning check.
  # Concrete ones are clamped to n first, so the per-bin arrays never outgrow the data
  # (num_bins = 10**7 on n = 100 sized them at 10**7) and any count above n is taken.
  rows = np.shape(probs)[0] if np.ndim(probs) == 2 and np.shape(probs)[0] else None
  bins = V.check_bins(num_bins, "fixed", max_bins, at_most=rows)._replace(binning=None)
  d = V.check_predictions(probs, labels, from_logits=from_logits, where=where, defer=True)
  out = _run(_debiased_core, d, bins, mode=mode, squared=V.check_flag(squared, "squared"))
  none = (
    "debiased_ce: no bin holds two samples (every bin of the equal-mass rule has one, as "
    "num_bins >= n does on distinct scores), so there is no estimate; use fewer bins "
    "(n / num_bins >= 2)"
  )
  if not V.is_concrete(out):  # checked mode raises as an eager call does (bad values first)
    V.trace_check(~jnp.any(jnp.isnan(out)), none)
  elif bool(jnp.any(jnp.isnan(out))):  # eager: the inputs were checked, so no bin
    raise ValueError(none)
  return out
