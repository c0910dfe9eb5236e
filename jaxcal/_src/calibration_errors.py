"""Binned calibration errors: truthful (LinCE, LinCE_cw, ConfCE_corr) and not.

As defined by Lu, Wu, Hartline & Hu (2025), arXiv:2510.06388 (§3, App. C-D)
and its first version, "Making and Evaluating Calibrated Forecasts"
(arXiv:2510.06388v1). All errors reduce to per-bin sums of residuals ``u_i - phi(y_i)`` computed
by :mod:`jaxcal._src.binning`.

Every public function here:

* takes one data set ``(n, C)``; batch with ``jax.vmap``;
* accepts ``num_bins`` as a Python int (one compilation per value), or an int
  array of any shape (one compilation for the whole array; the result has
  its shape), or a traced scalar under a user's ``vmap``/``jit`` (bounded by
  ``max_bins`` if given, else by ``n``);
* validates eagerly (ValueError) and never modifies its inputs.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcal._src import binning as B
from jaxcal._src import validation as V
from jaxcal._src.scores import prepare
from jaxcal._src.sorting import stable_argsort

__all__ = [
  "conf_ece",
  "conf_ce",
  "conf_ce_corr",
  "classwise_ce",
  "classwise_ece",
  "binary_ce",
  "lin_ce",
  "lin_ece",
  "ecce",
  "reliability_stats",
  "ReliabilityStats",
]


# --------------------------------------------------------------------------
# Pure cores: one data set, scalar (possibly traced) num_bins, static max_bins.
# --------------------------------------------------------------------------

# The sample count ``n`` divides every error. Without a mask it is the static
# ``p.shape[0]``; with ``where`` it is the traced count of True entries. It is
# used as a float (``n * n`` as an int32 overflows for n > 46340).


def _count(where: jax.Array | None, n: int, dtype) -> jax.Array:
  """The number of samples as a float: ``n``, or the count of True in ``where``."""
  if where is None:
    return jnp.asarray(float(n), dtype)
  return jnp.sum(where, dtype=jnp.int32).astype(dtype)


def _sq(sums: jax.Array, n: jax.Array) -> jax.Array:
  return jnp.sum(sums**2) / n / n


def _l1(sums: jax.Array, n: jax.Array) -> jax.Array:
  return jnp.sum(jnp.abs(sums)) / n


def _confidence_parts(p: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Top label (ties -> lowest index) and its probability.

  ``max`` then the first index attaining it: two plain reductions, faster
  on CPU than ``argmax``'s variadic (value, index) reduction; same result.
  """
  c = jnp.max(p, axis=-1)
  num_classes = p.shape[-1]
  iota = jnp.arange(num_classes, dtype=jnp.int32)
  r = jnp.min(jnp.where(p == c[..., None], iota, num_classes), axis=-1)
  return r, c


def _confidence(p: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
  r, c = _confidence_parts(p)
  z = (r == y).astype(p.dtype)
  return c, z


def _conf_core(p, y, m, *, binning, max_bins, kind, where=None):
  """Top-label error of one data set: ConfECE (``kind="ece"``), ConfCE or ConfCE_corr.

  ``where``: optional ``(n,)`` bool sample mask; masked-out samples are
  treated exactly as if absent (``n`` becomes the number of True entries).
  """
  n = _count(where, p.shape[0], p.dtype)
  r, c = _confidence_parts(p)
  z = r == y
  sums = B.binned_residual_sums(c, z, m, binning, max_bins, where=where).sums
  if kind == "ece":
    return _l1(sums, n)
  ce = _sq(sums, n)
  if kind == "ce_corr":
    wrong = ~z if where is None else where & ~z
    ce = ce + jnp.sum(wrong, dtype=jnp.int32).astype(p.dtype) / n / n
  return ce


def _per_class_sums(p, y, m, *, binning, max_bins, sign=1.0, where=None):
  """BinnedSums of ``sign * (p[:, r] - 1[y = r])`` on the bins of ``p[:, r]``, per class.

  The columns are transposed to rows first: a batched sort / segment sum
  along the last axis is several times faster on CPU than along axis 0.
  """
  num_classes = p.shape[1]
  pt = p.T  # (C, n)
  bits = y[None, :] == jnp.arange(num_classes)[:, None]  # (C, n)
  w = None if where is None else where[None, :]
  return B.binned_residual_sums(
    pt, bits, m, binning, max_bins, sign=sign, where=w
  )  # rows (C, max_bins, ...)


def _classwise_core(p, y, m, weights, *, binning, max_bins, kind, where=None):
  """Class-wise error of one data set: ``sum_r weights[r] * err_r`` (ℓ1 or squared)."""
  n = _count(where, p.shape[0], p.dtype)
  sums = _per_class_sums(p, y, m, binning=binning, max_bins=max_bins, where=where).sums[..., 0]
  if kind == "ece":
    per = jnp.sum(jnp.abs(sums), axis=1) / n
  else:
    per = jnp.sum(sums**2, axis=1) / n / n
  return jnp.sum(weights * per)


def _binary_core(p, y, m, *, binning, max_bins, where=None):
  """Squared binned error of binary forecasts ``p`` (``(n,)``) and outcomes ``y``."""
  n = _count(where, p.shape[0], p.dtype)
  sums = B.binned_residual_sums(p, y == 1, m, binning, max_bins, where=where).sums
  return _sq(sums, n)


def _ecce_core(p, y, m, weights, *, max_bins, where=None):
  """ECCE of one data set (fixed bins, cumulative residual sums per class)."""
  n = _count(where, p.shape[0], p.dtype)
  bs = _per_class_sums(p, y, m, binning="fixed", max_bins=max_bins, sign=-1.0, where=where)
  per = jnp.sum(jnp.where(bs.counts > 0, jnp.abs(bs.cumsums[..., 0]), 0.0), axis=1) / n
  return jnp.sum(weights * per)


# --------------------------------------------------------------------------
# Dispatch: validation, num_bins as int / array / tracer, jit.
# --------------------------------------------------------------------------


def _guarded(core: Callable, max_bins: int, **static) -> Callable:
  """``core`` returning NaN for a bin count outside ``[1, max_bins]``.

  Such a count can only arrive traced (concrete ones are rejected with a
  ValueError); static-size bin arrays cannot represent it, and NaN is
  better than a silently wrong number.
  """

  def f(p, y, m, *rest):
    val = core(p, y, m, *rest, max_bins=max_bins, **static)
    ok = (m >= 1) & (m <= max_bins)
    return jnp.where(ok, val, jnp.nan)

  return f


@functools.cache
def _compiled(core: Callable, batched: bool, n_args: int, **static) -> Callable:
  f = _guarded(core, **static)
  if batched:  # vmap over the bin-count argument (position 2)
    axes = [None] * n_args
    axes[2] = 0
    f = jax.vmap(f, in_axes=tuple(axes))
  return jax.jit(f)


def _run(
  core: Callable,
  args: tuple,
  num_bins: Any,
  n: int,
  max_bins: int | None,
  binning: str | None,
  **static,
) -> jax.Array:
  """Calls ``core(*args[:2], m, *args[2:])`` for a scalar or an array of ``m``."""
  m = V.check_num_bins(num_bins)
  if binning is not None:
    static["binning"] = V.check_binning(binning)
  mb = B.resolve_max_bins(m, n, max_bins)
  if V.is_concrete(m):
    mmax = m if isinstance(m, int) else (int(np.max(np.asarray(m))) if np.size(m) else 0)
    if mmax > mb:
      raise ValueError(f"num_bins = {mmax} exceeds max_bins = {mb}")
    if binning == "quantile" and mmax > n:
      raise ValueError(
        f"too few samples for the bins: quantile binning with num_bins = {mmax} "
        f"needs at least that many samples, got n = {n}"
      )
  full = (args[0], args[1], None) + tuple(args[2:])
  if not isinstance(m, int) and jnp.size(m) == 0:
    return jnp.zeros(jnp.shape(m), args[0].dtype)
  if isinstance(m, int) or jnp.ndim(m) == 0:
    f = _compiled(core, False, len(full), max_bins=mb, **static)
    return f(*full[:2], jnp.asarray(m, jnp.int32), *full[3:])
  f = _compiled(core, True, len(full), max_bins=mb, **static)
  flat = jnp.reshape(m, (-1,))
  return f(*full[:2], flat, *full[3:]).reshape(jnp.shape(m))


def _class_weights(class_weights: ArrayLike | None, num_classes: int, dtype) -> jax.Array:
  if class_weights is None:
    return jnp.full((num_classes,), 1.0 / num_classes, dtype)
  w = V.as_float(class_weights, "class_weights")
  if w.shape != (num_classes,):
    raise ValueError(f"class_weights must have shape ({num_classes},), got {tuple(w.shape)}")
  V.check_finite(w, "class_weights")
  if V.is_concrete(w) and float(jnp.min(w)) < 0:
    raise ValueError("class_weights must be non-negative")
  return w.astype(dtype)


_BIN_ARGS = """
    num_bins: bin count ``m``: a Python int, or an int array of any shape (one
      compiled call for all of them; the result has that shape). Under a
      user's ``vmap``/``jit`` it may be traced, bounded by ``max_bins``.
    max_bins: static bound on a traced ``num_bins`` (default: ``num_bins``
      itself, the largest entry of an array, or ``n`` when traced). A traced
      ``num_bins`` outside ``[1, max_bins]`` gives NaN.
    from_logits: treat ``probs`` as logits and apply a softmax first."""


def conf_ece(
  probs: ArrayLike,
  labels: ArrayLike,
  num_bins: ArrayLike = 15,
  binning: str = "fixed",
  *,
  max_bins: int | None = None,
  from_logits: bool = False,
) -> jax.Array:
  """Top-label binned ℓ1 calibration error ConfECE (not truthful).

  ``ConfECE = (1/n) sum_B |sum_{i in B} (c_i - z_i)|`` with ``c_i = max p_i``,
  ``z_i = 1[y_i = argmax p_i]`` and bins on ``c``.

  Args:
    probs: ``(n, C)`` probabilities.
    labels: ``(n,)`` integer labels.
    binning: ``"fixed"`` (default, the usual ECE) or ``"quantile"``.{BIN_ARGS}

  Returns:
    Scalar, or an array shaped like ``num_bins``.

  Raises:
    ValueError: bad probabilities or labels, ``num_bins < 1``, unknown
      binning, or quantile ``num_bins > n``.

  Example:
    >>> import jax.numpy as jnp
    >>> p = jnp.array([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7]])
    >>> round(float(conf_ece(p, jnp.array([0, 1, 1]), num_bins=2)), 4)
    0.1333

  Reference: Lu, Wu, Hartline & Hu (2025), arXiv:2510.06388, §2 (ConfECE).
  """
  p, y = prepare(probs, labels, from_logits)
  return _run(_conf_core, (p, y), num_bins, p.shape[0], max_bins, binning, kind="ece")


def conf_ce(
  probs: ArrayLike,
  labels: ArrayLike,
  num_bins: ArrayLike = 15,
  binning: str = "quantile",
  *,
  max_bins: int | None = None,
  from_logits: bool = False,
) -> jax.Array:
  """Squared top-label binned calibration error ConfCE (not truthful).

  ``ConfCE = (1/n^2) sum_B (sum_{i in B} (c_i - z_i))^2``.

  Args:
    probs: ``(n, C)`` probabilities.
    labels: ``(n,)`` integer labels.
    binning: ``"quantile"`` (default) or ``"fixed"``.{BIN_ARGS}

  Returns:
    Scalar, or an array shaped like ``num_bins``.

  Example:
    >>> import jax.numpy as jnp
    >>> p = jnp.array([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7]])
    >>> round(float(conf_ce(p, jnp.array([0, 1, 1]), num_bins=1)), 4)
    0.0178

  Reference: Lu, Wu, Hartline & Hu (2025), arXiv:2510.06388, §3, Example C.1.
  """
  p, y = prepare(probs, labels, from_logits)
  return _run(_conf_core, (p, y), num_bins, p.shape[0], max_bins, binning, kind="ce")


def conf_ce_corr(
  probs: ArrayLike,
  labels: ArrayLike,
  num_bins: ArrayLike = 15,
  binning: str = "quantile",
  *,
  max_bins: int | None = None,
  from_logits: bool = False,
) -> jax.Array:
  """Corrected squared top-label calibration error ConfCE_corr (truthful).

  ``ConfCE_corr = ConfCE + (1/n)(1 - (1/n) sum_i z_i)``. For a calibrated
  predictor ``E[ConfCE_corr] = E[l_conf]/n`` (Lemma D.1).

  Args:
    probs: ``(n, C)`` probabilities.
    labels: ``(n,)`` integer labels.
    binning: ``"quantile"`` (default) or ``"fixed"``.{BIN_ARGS}

  Returns:
    Scalar, or an array shaped like ``num_bins``.

  Example:
    >>> import jax.numpy as jnp
    >>> p = jnp.array([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7]])
    >>> round(float(conf_ce_corr(p, jnp.array([0, 1, 1]), num_bins=1)), 4)
    0.1289

  Reference: Lu, Wu, Hartline & Hu (2025), arXiv:2510.06388, §4 (corrected
  confidence calibration error) and Example C.1.
  """
  p, y = prepare(probs, labels, from_logits)
  return _run(_conf_core, (p, y), num_bins, p.shape[0], max_bins, binning, kind="ce_corr")


def classwise_ce(
  probs: ArrayLike,
  labels: ArrayLike,
  num_bins: ArrayLike = 15,
  binning: str = "quantile",
  *,
  max_bins: int | None = None,
  from_logits: bool = False,
) -> jax.Array:
  """Classwise squared calibration error LinCE_cw (truthful).

  ``LinCE_cw = (1/C) sum_r (1/n^2) sum_B (sum_{i in B} (p_ir - 1[y_i = r]))^2``,
  each class's column binned on its own.

  Args:
    probs: ``(n, C)`` probabilities.
    labels: ``(n,)`` integer labels.
    binning: ``"quantile"`` (default) or ``"fixed"``.{BIN_ARGS}

  Returns:
    Scalar, or an array shaped like ``num_bins``.

  Example:
    >>> import jax.numpy as jnp
    >>> p = jnp.array([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7]])
    >>> round(float(classwise_ce(p, jnp.array([0, 1, 1]), num_bins=1)), 4)
    0.1111

  Reference: Lu, Wu, Hartline & Hu (2025), arXiv:2510.06388, §3 (LinCE_cw),
  Lemma D.1.
  """
  p, y = prepare(probs, labels, from_logits)
  w = _class_weights(None, p.shape[1], p.dtype)
  return _run(_classwise_core, (p, y, w), num_bins, p.shape[0], max_bins, binning, kind="ce")


def classwise_ece(
  probs: ArrayLike,
  labels: ArrayLike,
  num_bins: ArrayLike = 15,
  binning: str = "fixed",
  class_weights: ArrayLike | None = None,
  *,
  max_bins: int | None = None,
  from_logits: bool = False,
) -> jax.Array:
  """Classwise binned ℓ1 calibration error CWE_bin.

  ``CWE = sum_r w_r (1/n) sum_B |sum_{i in B} (p_ir - 1[y_i = r])|``,
  weights ``w_r = 1/C`` by default.

  Args:
    probs: ``(n, C)`` probabilities.
    labels: ``(n,)`` integer labels.
    binning: ``"fixed"`` (default) or ``"quantile"`` (the utility paper's
      ``CWE_bin`` uses 15 equal-mass bins).
    class_weights: ``(C,)`` non-negative weights (default ``1/C``).{BIN_ARGS}

  Returns:
    Scalar, or an array shaped like ``num_bins``.

  Example:
    >>> import jax.numpy as jnp
    >>> p = jnp.array([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7]])
    >>> round(float(classwise_ece(p, jnp.array([0, 1, 1]), num_bins=1)), 4)
    0.3333

  Reference: Lu, Wu, Hartline & Hu (2025), arXiv:2510.06388 (LinECE); Barbera, Perini, De Toni,
  Passerini & Pugnana (2025), arXiv:2510.26566 (class-wise
  ECE), Hegazy, Jordan & Dieuleveut (2025), arXiv:2510.25458, §5.
  """
  p, y = prepare(probs, labels, from_logits)
  w = _class_weights(class_weights, p.shape[1], p.dtype)
  return _run(_classwise_core, (p, y, w), num_bins, p.shape[0], max_bins, binning, kind="ece")


def binary_ce(
  p: ArrayLike,
  y: ArrayLike,
  num_bins: ArrayLike = 15,
  binning: str = "quantile",
  *,
  max_bins: int | None = None,
) -> jax.Array:
  """Binary squared binned calibration error (Hartline et al.'s ℓ2-QECE).

  ``(1/n^2) sum_B (sum_{i in B} (p_i - y_i))^2`` with quantile bins on ``p``.

  Args:
    p: ``(n,)`` predicted probabilities of the positive outcome.
    y: ``(n,)`` outcomes in ``{0, 1}``.
    binning: ``"quantile"`` (default, ℓ2-QECE) or ``"fixed"``.
    num_bins: as for the other errors; max_bins: static bound.

  Returns:
    Scalar, or an array shaped like ``num_bins``.

  Example:
    >>> import jax.numpy as jnp
    >>> round(float(binary_ce(jnp.array([0.2, 0.4, 0.6, 0.8]), jnp.array([0, 1, 0, 1]), 2)), 4)
    0.01

  Reference: Lu, Wu, Hartline & Hu (2025), arXiv:2510.06388v1 (ℓ2-QECE).
  """
  pp = V.as_float(p, "p")
  if pp.ndim != 1 or pp.shape[0] == 0:
    raise ValueError(f"p must have shape (n,) with n >= 1, got {tuple(pp.shape)}")
  V.check_finite(pp, "p")
  if V.is_concrete(pp) and (
    float(jnp.min(pp)) < -V.SIMPLEX_ATOL or float(jnp.max(pp)) > 1 + V.SIMPLEX_ATOL
  ):
    raise ValueError("p must lie in [0, 1]")
  yy = V.check_labels(y, pp.shape[0], 2, name="y")
  return _run(_binary_core, (pp, yy), num_bins, pp.shape[0], max_bins, binning)


def ecce(
  probs: ArrayLike,
  labels: ArrayLike,
  num_bins: ArrayLike = 15,
  class_weights: ArrayLike | None = None,
  *,
  max_bins: int | None = None,
  from_logits: bool = False,
) -> jax.Array:
  """Class-wise cumulative calibration error ECCE.

  ``ECCE = sum_c pi_c sum_b (1/n) |sum_{b' <= b} sum_{j in b'} (1[y_j = c] - p_jc)|``
  over non-empty equal-width bins ``b`` of ``p[:, c]``.

  Args:
    probs: ``(n, C)`` probabilities.
    labels: ``(n,)`` integer labels.
    class_weights: ``(C,)`` class weights ``pi`` (default uniform ``1/C``;
      the paper uses the training-label priors).{BIN_ARGS}

  Returns:
    Scalar, or an array shaped like ``num_bins``.

  Example:
    >>> import jax.numpy as jnp
    >>> p = jnp.array([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7]])
    >>> round(float(ecce(p, jnp.array([0, 1, 1]), num_bins=2)), 4)
    0.5

  Reference: Barbera, Perini, De Toni, Passerini & Pugnana (2025), arXiv:2510.26566, §5 (ECCE).
  """
  p, y = prepare(probs, labels, from_logits)
  w = _class_weights(class_weights, p.shape[1], p.dtype)
  return _run(_ecce_core, (p, y, w), num_bins, p.shape[0], max_bins, None)


for _f in (conf_ece, conf_ce, conf_ce_corr, classwise_ce, classwise_ece, ecce):
  _f.__doc__ = _f.__doc__.replace("{BIN_ARGS}", _BIN_ARGS)
del _f


# --------------------------------------------------------------------------
# Generic vector forms with a user-given partition.
# --------------------------------------------------------------------------


def _lin_sums(reports, signals, bin_ids, num_bins):
  u = V.as_float(reports, "reports")
  s = V.as_float(signals, "signals")
  if u.ndim == 1:
    u = u[:, None]
  if s.ndim == 1:
    s = s[:, None]
  if u.ndim != 2 or u.shape != s.shape:
    raise ValueError(
      f"reports and signals must have the same shape (n, d); got "
      f"{tuple(u.shape)} and {tuple(s.shape)}"
    )
  n = u.shape[0]
  if n == 0:
    raise ValueError("reports is empty (n = 0 samples)")
  V.check_finite(u, "reports")
  V.check_finite(s, "signals")
  if not isinstance(num_bins, (int, np.integer)) or num_bins < 1:
    raise ValueError(f"num_bins must be a static int >= 1 for lin_ce/lin_ece, got {num_bins!r}")
  b = V.check_labels(bin_ids, n, int(num_bins), name="bin_ids")
  sums = jax.ops.segment_sum(u - s.astype(u.dtype), b, num_segments=int(num_bins))
  return sums, n


def lin_ce(reports: ArrayLike, signals: ArrayLike, bin_ids: ArrayLike, num_bins: int) -> jax.Array:
  """Generic squared binned error LinCE for vector reports (truthful for any partition).

  ``LinCE = (1/n^2) sum_B ||sum_{i in B} (u_i - phi(y_i))||_2^2``.

  Args:
    reports: ``(n, d)`` (or ``(n,)``) reports ``u_i``.
    signals: same shape, the signals ``phi(y_i)`` (e.g. one-hot labels).
    bin_ids: ``(n,)`` integer bin of each sample in ``[0, num_bins)``; the
      partition must not depend on the outcomes.
    num_bins: static number of bins.

  Returns:
    Scalar.

  Example:
    >>> import jax.numpy as jnp
    >>> float(lin_ce(jnp.array([0.5, 0.5]), jnp.array([1.0, 0.0]), jnp.array([0, 0]), 1))
    0.0

  Reference: Lu, Wu, Hartline & Hu (2025), arXiv:2510.06388, Thm 3.1.
  """
  sums, n = _lin_sums(reports, signals, bin_ids, num_bins)
  return _sq(sums, n)


def lin_ece(reports: ArrayLike, signals: ArrayLike, bin_ids: ArrayLike, num_bins: int) -> jax.Array:
  """Generic binned ℓ1 error LinECE for vector reports (not truthful).

  ``LinECE = (1/n) sum_B ||sum_{i in B} (u_i - phi(y_i))||_1``.

  Args:
    reports: ``(n, d)`` (or ``(n,)``) reports.
    signals: same shape, the signals.
    bin_ids: ``(n,)`` integer bins in ``[0, num_bins)``.
    num_bins: static number of bins.

  Returns:
    Scalar.

  Example:
    >>> import jax.numpy as jnp
    >>> float(lin_ece(jnp.array([0.5, 0.5]), jnp.array([1.0, 0.0]), jnp.array([0, 1]), 2))
    0.5

  Reference: Lu, Wu, Hartline & Hu (2025), arXiv:2510.06388.
  """
  sums, n = _lin_sums(reports, signals, bin_ids, num_bins)
  return _l1(sums, n)


# --------------------------------------------------------------------------
# Per-bin statistics for reliability diagrams.
# --------------------------------------------------------------------------


class ReliabilityStats(NamedTuple):
  """Per-bin top-label statistics (rows of empty bins are 0)."""

  counts: jax.Array  # (num_bins,)
  confidence: jax.Array  # (num_bins,) mean confidence in the bin
  accuracy: jax.Array  # (num_bins,) mean correctness in the bin
  lower: jax.Array  # (num_bins,) left edge of the bin on the score axis
  upper: jax.Array  # (num_bins,) right edge


@functools.partial(jax.jit, static_argnames=("num_bins", "binning"))
def _reliability_core(p, y, num_bins, binning, where=None):
  """Per-bin counts, mean confidence, accuracy and score range of the top label.

  ``where``: optional ``(n,)`` bool sample mask (masked-out samples are
  treated as absent: they are in no bin, and quantile bins are equal-mass
  over the others).
  """
  # Direct per-bin segment sums (not differences of prefix sums): per-bin
  # *means* are reported, and a prefix-sum difference loses float32 digits
  # in sparsely populated bins.
  c, z = _confidence(p, y)
  n = c.shape[0]
  m = jnp.int32(num_bins)
  if binning == "fixed":
    b = B.fixed_bin_1based(c, m) - 1
    if where is not None:
      b = jnp.where(where, b, num_bins)  # out of range: dropped by the segment sums
  else:
    order = stable_argsort(B.masked_last(c, where))
    ids = B.quantile_bin_of_position(B.sample_count(where, n), m, n)
    ids = jnp.where(ids < 0, num_bins, ids)
    b = jnp.zeros((n,), jnp.int32).at[order].set(ids)
  cnt = jax.ops.segment_sum(jnp.ones((n,), jnp.int32), b, num_segments=num_bins)
  sums = jax.ops.segment_sum(jnp.stack([c, z], axis=1), b, num_segments=num_bins)
  safe = jnp.maximum(cnt, 1)[:, None].astype(p.dtype)
  means = jnp.where((cnt > 0)[:, None], sums / safe, 0.0)
  if binning == "fixed":
    edges = jnp.arange(num_bins + 1, dtype=p.dtype) / num_bins
    lower, upper = edges[:-1], edges[1:]
  else:
    lower = jax.ops.segment_min(c, b, num_segments=num_bins)
    upper = jax.ops.segment_max(c, b, num_segments=num_bins)
    lower = jnp.where(cnt > 0, lower, 0.0)
    upper = jnp.where(cnt > 0, upper, 0.0)
  return ReliabilityStats(cnt, means[:, 0], means[:, 1], lower, upper)


def reliability_stats(
  probs: ArrayLike,
  labels: ArrayLike,
  num_bins: int = 15,
  binning: str = "fixed",
  *,
  from_logits: bool = False,
) -> ReliabilityStats:
  """Per-bin counts, mean confidence and accuracy of the top label.

  The data behind a reliability diagram: ``ConfECE = sum_b (counts_b/n)
  |confidence_b - accuracy_b|``.

  Args:
    probs: ``(n, C)`` probabilities.
    labels: ``(n,)`` labels.
    num_bins: static bin count.
    binning: ``"fixed"`` or ``"quantile"``.
    from_logits: treat ``probs`` as logits.

  Returns:
    :class:`ReliabilityStats` of ``(num_bins,)`` arrays.

  Example:
    >>> import jax.numpy as jnp
    >>> s = reliability_stats(jnp.array([[0.9, 0.1], [0.3, 0.7]]), jnp.array([0, 0]), 2)
    >>> s.counts.tolist(), s.accuracy.tolist()
    ([0, 2], [0.0, 0.5])

  Reference: Lu et al. 2025 (ConfECE bins).
  """
  p, y = prepare(probs, labels, from_logits)
  m = V.check_num_bins(num_bins)
  if not isinstance(m, int):
    raise ValueError("num_bins must be a Python int for reliability_stats")
  binning = V.check_binning(binning)
  if binning == "quantile" and m > p.shape[0]:
    raise ValueError(
      f"quantile binning with num_bins = {m} needs at least that many samples, got n = {p.shape[0]}"
    )
  return _reliability_core(p, y, m, binning)
