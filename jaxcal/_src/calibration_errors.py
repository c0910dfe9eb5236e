"""Binned calibration errors: truthful (LinCE, LinCE_cw, ConfCE_corr) and not.

From Lu, Wu, Hartline & Hu (2025), *Truthful Calibration Errors for
Multi-Class Prediction* (arXiv:2510.06388, §3 and App. C-D; first version
*Making and Evaluating Calibrated Forecasts*). All errors reduce to per-bin
sums of residuals ``u_i - phi(y_i)`` computed by :mod:`jaxcal._src.binning`.

Every public function here:

* takes one data set ``(n, C)``; batch with ``jax.vmap``;
* accepts ``num_bins`` as a Python int, or an int array of any shape (one
  compiled call for the whole array; the result has its shape), or a traced
  scalar under a user's ``vmap``/``jit`` (then ``max_bins`` is required). The
  per-bin arrays are sized by ``max_bins``, by default the bin count rounded
  up to a power of two: one compilation per octave of bin counts;
* takes ``where=``, an ``(n,)`` bool mask of the samples to use;
* validates through :mod:`jaxcal._src.validation` (ValueError on eager calls,
  NaN for invalid values under ``jit``, an error in :func:`jaxcal.checked`
  mode) and never modifies its inputs.
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
from jaxcal._src.numerics import by_rows, row_reduce, segment_sum_accurate
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
  """The number of samples as a float: ``n``, or the count of True in ``where``.

  In ``dtype`` promoted to at least float32 (the cores never compute in
  float16 / bfloat16: ``n = 70000`` is inf there).
  """
  dtype = jnp.promote_types(dtype, jnp.float32)
  if where is None:
    return jnp.asarray(float(n), dtype)
  return jnp.sum(where, dtype=jnp.int32).astype(dtype)


def _sq(sums: jax.Array, n: jax.Array) -> jax.Array:
  return jnp.sum(sums**2) / n / n


def _l1(sums: jax.Array, n: jax.Array) -> jax.Array:
  return jnp.sum(jnp.abs(sums)) / n


_NORMS = ("l1", "l2", "max")


def _binned_norm(sums: jax.Array, counts: jax.Array, n: jax.Array, norm: str) -> jax.Array:
  """ℓ1 / RMS / max norm of per-bin mean gaps ``sums_b / counts_b`` along the last axis.

  ``l1``: ``sum_b |S_b| / n``; ``l2``: ``sqrt(sum_b S_b^2 / (n * n_b))``
  (bin-mass-weighted RMS); ``max``: ``max_b |S_b| / n_b`` over non-empty bins.
  """
  if norm == "l1":
    return jnp.sum(jnp.abs(sums), axis=-1) / n
  nb = counts.astype(sums.dtype)
  safe = jnp.where(counts > 0, nb, 1.0)
  if norm == "l2":
    return jnp.sqrt(jnp.sum(jnp.where(counts > 0, sums**2 / safe, 0.0), axis=-1) / n)
  return jnp.max(jnp.where(counts > 0, jnp.abs(sums) / safe, 0.0), axis=-1)


def _check_norm(norm: str) -> str:
  if norm not in _NORMS:
    raise ValueError(f"norm must be one of {_NORMS}, got {norm!r}")
  return norm


def _confidence_parts(p: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Top label ``r`` (ties toward the lowest index, ``jnp.argmax``'s rule) and ``c = max p``.

  The first index attaining the max, reduced over column chunks
  (:func:`~jaxcal._src.numerics.row_reduce`): no ``(n, C)`` int32 temporary.
  """
  c = jnp.max(p, axis=-1)
  num_classes = p.shape[-1]
  r = row_reduce(lambda v, i: jnp.where(v == c[..., None], i, num_classes), p, "min")
  return r, c


#: Up to this many classes :func:`_correct` takes ``jnp.argmax`` (XLA:CPU's
#: variadic reduction is faster than the tie test on narrow rows only).
ARGMAX_MAX_CLASSES = 16


def _correct(p: jax.Array, y: jax.Array, c: jax.Array) -> jax.Array:
  """``[argmax p == y]`` (bool) given ``c = max p``, without an ``(n, C)`` temporary.

  The top label breaks ties toward the lowest index (``jnp.argmax``'s
  rule): ``y`` is the top label iff ``p_y == c`` and no column before ``y``
  attains ``c``. One gather and a tie test reduced over column chunks
  (:func:`~jaxcal._src.numerics.row_reduce`); an ``argmin`` over
  ``where(p == c, iota, C)`` writes an int32 ``(n, C)`` array on XLA:CPU.
  ``argmax``'s variadic reduction is the faster one up to
  :data:`ARGMAX_MAX_CLASSES` classes (at ``n = 10^4``: 130 against 143 us
  for ``C = 10``, 120 against 142 us for ``C = 16``) and much slower from
  ``C = 32`` (652 against 154 us; 21 against 4.1 ms at ``n = 10^5``,
  ``C = 100``), so the class count (static) picks. Out-of-range labels are
  never correct.
  """
  num_classes = p.shape[-1]
  if num_classes <= ARGMAX_MAX_CLASSES:
    return jnp.argmax(p, axis=-1) == y
  py = jnp.take_along_axis(p, jnp.clip(y, 0, num_classes - 1)[..., None], axis=-1)[..., 0]
  before = row_reduce(lambda v, r: (v == c[..., None]) & (r < y[..., None]), p, "any")
  return (py == c) & ~before & (y >= 0) & (y < num_classes)


def _confidence(p: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Confidence ``c = max_r p_r`` and correctness ``z = [argmax p == y]`` (in ``p``'s dtype)."""
  c, z = _top_label(p, y)
  return c, z.astype(p.dtype)


def _binary_rows(p: jax.Array, y: jax.Array, mode: str) -> tuple[jax.Array, jax.Array]:
  """Binary problems as rows ``(scores, outcomes)``, each ``(rows, n)``.

  ``"top_label"``: one row, confidence ``max p`` against ``1[argmax p = y]``;
  ``"classwise"`` (or ``"marginal"``): ``C`` rows, ``p[:, c]`` against
  ``1[y = c]``.
  """
  if mode == "top_label":
    c, z = _confidence(p, y)
    return c[None, :], z[None, :]
  hits = (y[None, :] == jnp.arange(p.shape[1])[:, None]).astype(p.dtype)
  return p.T, hits


def _top_label(p: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Confidence ``c = max_r p_r`` and correctness ``[argmax p == y]`` (bool), per row."""
  c = jnp.max(p, axis=-1)
  return c, _correct(p, y, c)


def _conf_core(p, y, m, *, kind, norm="l1", where=None, **bins):
  """Top-label error of one data set: ConfECE (``kind="ece"``, with ``norm``), ConfCE or ConfCE_corr.

  ``where``: optional ``(n,)`` bool sample mask; masked-out samples are
  treated exactly as if absent (``n`` becomes the number of True entries).
  The public calls run the same two steps as two programs above 1 MiB of
  scores, as one below (:func:`_run` with ``rows=_top_label``). ``bins``:
  ``binning``, ``max_bins`` and optionally ``single_count``
  (:func:`_conf_from_scores`).
  """
  c, z = _top_label(p, y)
  return _conf_from_scores(c, z, m, kind=kind, norm=norm, where=where, **bins)


def _conf_from_scores(
  c, z, m, *, binning, max_bins, kind, norm="l1", where=None, single_count=False
):
  """Top-label error from confidences ``c`` and correctness ``z`` (bool), ``(n,)`` each.

  The part of :func:`_conf_core` after the top label; the streaming
  records (which keep only ``c`` and ``z``) call it too. ``single_count``:
  ``m`` is not batched (see :func:`~jaxcal._src.binning.binned_residual_sums`).
  """
  n = _count(where, c.shape[0], c.dtype)
  need_counts = kind == "ece" and norm != "l1"
  bs = B.binned_residual_sums(
    c, z, m, binning, max_bins, where=where, counts=need_counts, single_count=single_count
  )
  return _conf_from_sums(bs, z, n, kind=kind, norm=norm, where=where)


def _conf_from_sums(bs: B.BinnedSums, z, n, *, kind, norm="l1", where=None) -> jax.Array:
  """ConfECE (``norm``), ConfCE or ConfCE_corr from the top-label per-bin sums ``bs``.

  ``z``: ``(n,)`` bool correctness (ConfCE_corr adds the misclassification
  rate over ``n``); the study call reduces the same sums.
  """
  if kind == "ece":
    return _binned_norm(bs.sums[:, 0], bs.counts, n, norm)
  ce = _sq(bs.sums, n)
  if kind == "ce_corr":
    wrong = ~z if where is None else where & ~z
    ce = ce + jnp.sum(wrong, dtype=jnp.int32).astype(ce.dtype) / n / n
  return ce


def _per_class_sums(p, y, m, *, where=None, **options):
  """BinnedSums of ``sign * (p[:, r] - 1[y = r])`` on the bins of ``p[:, r]``, per class.

  ``p`` stays in its ``(n, C)`` layout (samples along axis 0): fixed bins
  need no transposition at all, and the sort strategy transposes the
  scores (rows last) before sorting them a chunk of classes at a time.
  ``options``:
  :func:`~jaxcal._src.binning.binned_residual_sums`' ``binning``,
  ``max_bins``, ``sign``, ``counts`` and ``single_count``.
  """
  w = None if where is None else where[:, None]
  return B.binned_residual_sums(p, None, m, where=w, axis=0, labels=y, **options)


def _classwise_core(p, y, m, weights, *, kind, norm="l1", where=None, **bins):
  """Class-wise error of one data set: ``sum_r weights[r] * err_r`` (``norm`` for ℓ1, or squared).

  ``bins``: ``binning``, ``max_bins`` and optionally ``single_count``
  (:func:`_per_class_sums`).
  """
  n = _count(where, p.shape[0], p.dtype)
  need_counts = kind == "ece" and norm != "l1"
  bs = _per_class_sums(p, y, m, where=where, counts=need_counts, **bins)
  return _classwise_from_sums(bs, n, weights, kind=kind, norm=norm)


def _classwise_from_sums(bs: B.BinnedSums, n, weights, *, kind, norm="l1") -> jax.Array:
  """``sum_r weights[r] * err_r`` from the per-class per-bin sums ``bs`` (rows ``(C, max_bins)``)."""
  sums = bs.sums[..., 0]  # (C, max_bins)
  if kind == "ece":
    per = _binned_norm(sums, bs.counts, n, norm)
  else:
    per = jnp.sum(sums**2, axis=1) / n / n
  return jnp.sum(weights * per)


def _binary_core(p, y, m, *, binning, max_bins, where=None, single_count=False):
  """Squared binned error of binary forecasts ``p`` (``(n,)``) and outcomes ``y``."""
  n = _count(where, p.shape[0], p.dtype)
  sums = B.binned_residual_sums(
    p, y == 1, m, binning, max_bins, where=where, counts=False, single_count=single_count
  ).sums
  return _sq(sums, n)


def _ecce_core(p, y, m, weights, *, reduction="mean", where=None, **bins):
  """ECCE of one data set (fixed bins, cumulative residual sums per class),
  ``reduction="mean"``: each class's sum divided by its number of non-empty bins.
  ``bins``: ``binning`` (always ``"fixed"``), ``max_bins`` and optionally
  ``single_count`` (:func:`_per_class_sums`)."""
  n = _count(where, p.shape[0], p.dtype)
  bs = _per_class_sums(p, y, m, sign=-1.0, where=where, counts=True, **bins)
  return _ecce_from_sums(bs, n, weights, reduction=reduction)


def _ecce_from_sums(bs: B.BinnedSums, n, weights, *, reduction="mean") -> jax.Array:
  """ECCE from per-class fixed-bin sums with counts (the sign of the residual is immaterial)."""
  nonempty = bs.counts > 0  # (C, max_bins)
  per = jnp.sum(jnp.where(nonempty, jnp.abs(bs.cumsums[..., 0]), 0.0), axis=1) / n
  if reduction == "mean":  # mean over the K_c non-empty bins of each class
    per = per / jnp.maximum(jnp.sum(nonempty, axis=1), 1).astype(per.dtype)
  return jnp.sum(weights * per)


# --------------------------------------------------------------------------
# Dispatch: validation, num_bins as int / array / tracer, jit.
# --------------------------------------------------------------------------


def _guarded(core: Callable, max_bins: int, **static) -> Callable:
  """``core`` returning NaN for a bin count outside ``[1, max_bins]``.

  Such a count can only arrive traced (concrete ones are rejected with a
  ValueError); static-size bin arrays cannot represent it, and NaN is better
  than a silently wrong number (checked mode raises instead). A traced
  quantile count above ``n`` is defined: some bins are empty (each sample
  alone in its bin, the value of ``m = n``); eager calls refuse it as a
  likely mistake.
  """

  def f(p, y, where, m, *rest):
    val = core(p, y, m, *rest, max_bins=max_bins, where=where, **static)
    ok = (m >= 1) & (m <= max_bins)
    V.trace_bin_count(m, max_bins)
    return jnp.where(ok, val, jnp.nan)

  return f


def _softmaxed(rows: Callable) -> Callable:
  """``rows`` of the softmax of logits."""
  return lambda b, yb: rows(jax.nn.softmax(b, axis=-1), yb)


@functools.cache
def _row_stage(rows: Callable, from_logits: bool) -> Callable:
  """Jitted ``rows(probs, labels)`` on each block of rows of the scores (see :func:`_run`).

  The outputs are joined, in the rows' order, as the stage's last step:
  borrowed blocks hold the rows rotated, and undoing that in the program of
  the core and the value checks cost 1.4 ms of 5.6 (``ks_ce``, ``n = 10^5``).
  """

  def g(x, y):
    return by_rows(_softmaxed(rows) if from_logits else rows, x, y)

  return jax.jit(g)


def _row_inputs(x, y, where, rows, from_logits: bool, staged: bool, neutral: bool = False):
  """A core's per-row inputs, inside its program: ``rows(probs, labels)`` or the row stage's.

  ``staged``: ``x`` holds the (joined) outputs of :func:`_row_stage`.
  Otherwise ``rows`` runs on the scores ``x`` (whole or in blocks; softmaxed
  with ``from_logits``); with ``neutral`` and a ``where`` mask, on
  :func:`~jaxcal._src.validation.neutral` probabilities, so unchecked values
  in masked-out rows never reach the core.
  """
  if staged:
    return x
  if neutral and where is not None:  # (x is an array: borrowed blocks come without a mask)
    return rows(*V.neutral(x, y, where, from_logits))
  return by_rows(_softmaxed(rows) if from_logits else rows, x, y)


@functools.cache
def _compiled(
  core: Callable,
  batched: bool,
  n_extra: int,
  from_logits: bool,
  staged: bool,
  rows: Callable | None = None,
  **static,
) -> Callable:
  """Jitted ``core(x, y, where, m, *rest)``: on the row stage's outputs (``staged``),
  on ``rows(probs, labels)`` computed in the same program (``rows``), or on
  the probabilities themselves."""
  f = _guarded(core, **static)

  def g(x, y, where, m, *rest):
    if staged or rows is not None:
      return f(*_row_inputs(x, y, where, rows, from_logits, staged), where, m, *rest)
    p = jax.nn.softmax(x, axis=-1) if from_logits else x
    return f(p, y, where, m, *rest)

  if batched:  # vmap over the bin-count argument (position 3)
    g = jax.vmap(g, in_axes=(None, None, None, 0) + (None,) * n_extra)
  return jax.jit(g)


def _run(
  core: Callable,
  d: V.Checked,
  bins: V.BinCounts,
  *extra: jax.Array,
  rows: Callable | None = None,
  **static,
) -> jax.Array:
  """``core(probs, labels, m, *extra)`` for a scalar or an array of bin counts ``m``.

  ``d`` holds the validated data (its value checks possibly pending: they are
  then read back after ``core``'s program is dispatched; under a
  transformation its validity flag is folded into the result); ``bins`` the
  validated bin counts.

  With ``rows`` (a function of ``(probs, labels)`` returning a pair of
  per-row ``(n,)`` arrays, such as :func:`_top_label`) the computation has
  two stages, ``core(*rows(probs, labels), m, *extra)``: the row stage is a
  program of its own, run block by block on
  :class:`~jaxcal._src.numerics.RowBlocks` scores (a borrowed host buffer).
  XLA:CPU fuses the top label's tie test into one pass over ``probs`` in a
  program of its own, but splits it into one pass per column chunk when the
  binning shares the program (4.7 against 3.8 ms for the eager ConfECE at
  ``n = 10^5``, ``C = 100``). Under a transformation both stages trace into
  the caller's program, and for small eager input (``validation.small``)
  both stages are one program with the value checks. A fixed-bin core is
  told ``single_count`` when ``m`` is one concrete count (not an array, not
  traced): its bins are then histogrammed without the threshold table that
  serves every count (:func:`~jaxcal._src.binning.binned_residual_sums`).
  """
  if bins.binning is not None:
    static["binning"] = bins.binning
  m = bins.m
  if not isinstance(m, int) and np.size(m) == 0:
    V.run_checked(d, _nothing, d.scores)  # the value checks still run
    return jnp.zeros(np.shape(m), d.scores.dtype)
  batched = not (isinstance(m, int) or np.ndim(m) == 0)
  if bins.binning == "fixed":  # one known count: histogrammed into its own bins
    static["single_count"] = not batched and not isinstance(m, jax.core.Tracer)
  one = V.small(d)  # small eager input: rows, core and checks in one program
  staged = rows is not None and not one
  from_logits = d.from_logits and not staged
  f = _compiled(
    core,
    batched,
    len(extra),
    from_logits,
    staged,
    rows=rows if one else None,
    max_bins=bins.max_bins,
    **static,
  )
  xp = np if isinstance(m, int | np.integer | np.ndarray) else jnp  # host: no dispatch
  m_arr = xp.reshape(xp.asarray(m), (-1,)) if batched else xp.asarray(m, xp.int32)
  x, y = d.scores, d.labels
  if staged:
    x, y = _row_stage(rows, d.from_logits)(x, y), None
  out, count = V.run_checked(d, f, x, y, d.where, m_arr, *extra)
  if bins.binning == "quantile" and bins.largest is not None:
    what = (
      f"too few samples for the bins: quantile binning with num_bins = {bins.largest} "
      "needs at least that many samples, got n = {n}"
      + (" selected by where" if d.where is not None else "")
    )
    if isinstance(count, int):
      if bins.largest > count:
        raise ValueError(what.format(n=count))
    elif count is not None:  # a traced where: checked mode raises as an eager call does
      V.trace_check(jnp.all(count >= bins.largest), what, n=count)
  if batched:
    out = out.reshape(np.shape(m))
  return V.fold(out, d.ok)


@jax.jit
def _nothing(x: jax.Array) -> jax.Array:
  return jnp.zeros((), x.dtype)


@functools.cache
def _top_label_program(core: Callable, from_logits: bool, staged: bool, **static) -> Callable:
  """Jitted ``core(c, z, *rest, where=where, **static)`` on the top label of ``(x, y)``.

  The compiled function takes ``(x, y, where, *rest)``: the scores and
  labels (``z``, the correctness, is bool), or with ``staged`` the row
  stage's ``(c, z)`` and ``y = None``. Masked-out rows are made neutral
  first (:func:`_row_inputs`).
  """

  def g(x, y, where, *rest):
    c, z = _row_inputs(x, y, where, _top_label, from_logits, staged, neutral=True)
    return core(c, z, *rest, where=where, **static)

  return jax.jit(g)


def _run_top_label(core: Callable, d: V.Checked, *rest: Any, **static: Any) -> jax.Array:
  """``core(c, z, *rest, where=..., **static)`` on the top label of ``d``, value checks included.

  For a metric of the confidence ``c = max p`` and the correctness ``z =
  [argmax p = y]`` only (``d`` from ``check_predictions(..., defer=True,
  borrow=True)``), laid out as :func:`_run` lays out the binned ones: for
  small eager input the top label, ``core`` and the value checks are one
  program; otherwise (without a mask) the top label is a program of its own,
  run block by block on a borrowed host matrix (``ks_ce`` on the CIFAR-100
  test set, ``n = 10^4``, ``C = 100``: 1.65 against 3.75 ms with a private
  copy and one program, alternated in one process; at ``C = 10`` both 0.95 ms).

  Args:
    core: jitted-traceable ``core(c (n,), z (n,) bool, *rest, where=None, **static)``.
    d: the validated (or pending) data set.
    *rest: ``core``'s further arguments.
    **static: ``core``'s static keyword arguments (hashable).

  Returns:
    ``core``'s result, NaN-folded under a transformation when the input is bad.
  """
  staged = d.where is None and not V.small(d)
  x, y = d.scores, d.labels
  if staged:
    x, y = _row_stage(_top_label, d.from_logits)(x, y), None
  f = _top_label_program(core, d.from_logits and not staged, staged, **static)
  out, _ = V.run_checked(d, f, x, y, d.where, *rest)
  return V.fold(out, d.ok)


def _class_weights(class_weights: ArrayLike | None, num_classes: int, dtype) -> jax.Array:
  """Validated ``(C,)`` class weights (finite, non-negative, positive sum); default ``1/C``."""
  return _class_weights_ok(class_weights, num_classes, dtype)[0]


def _class_weights_ok(
  class_weights: ArrayLike | None, num_classes: int, dtype
) -> tuple[jax.Array, jax.Array | None]:
  """:func:`_class_weights` and the traced check's flag (None when concrete or default)."""
  if class_weights is None:
    return jnp.full((num_classes,), 1.0 / num_classes, dtype), None
  w = V.as_float(class_weights, "class_weights")
  if w.shape != (num_classes,):
    raise ValueError(f"class_weights must have shape ({num_classes},), got {tuple(w.shape)}")
  ok, _ = V._validate(V._Spec(w_name="class_weights"), (), None, None, w)
  return V.fold(w.astype(dtype), ok), ok


def _weights_or_uniform(d: V.Checked) -> jax.Array | np.ndarray:
  """The class weights in the scores' dtype; uniform ``1/C`` (a host constant) by default."""
  c = d.scores.shape[1]
  if d.weights is None:
    return np.full((c,), 1.0 / c, d.scores.dtype)
  return d.weights.astype(d.scores.dtype)


@V.same_arguments
def conf_ece(
  probs: ArrayLike,
  labels: ArrayLike,
  num_bins: ArrayLike = 15,
  binning: str = "fixed",
  *,
  norm: str = "l1",
  max_bins: int | None = None,
  from_logits: bool = False,
  where: ArrayLike | None = None,
) -> jax.Array:
  """Top-label binned calibration error ConfECE (ℓ1; also RMS and max norms; not truthful).

  ``ConfECE = (1/n) sum_B |sum_{i in B} (c_i - z_i)|`` with ``c_i = max p_i``,
  ``z_i = 1[y_i = argmax p_i]`` (ties to the lowest class) and bins on ``c``.
  With ``S_B = sum_{i in B} (c_i - z_i)`` and ``n_B = |B|`` the three norms
  are, as torchmetrics defines them: ``"l1"`` ``sum_B (n_B/n) |S_B/n_B|`` (the
  ECE), ``"l2"`` ``sqrt(sum_B (n_B/n) (S_B/n_B)^2)`` (the RMS calibration
  error) and ``"max"`` ``max_B |S_B/n_B|`` over non-empty bins (the MCE).
  (torchmetrics' equal-width bins are ``[k/m, (k+1)/m)`` plus a bin of their
  own for a confidence of exactly 1; jaxcal's are ``((j-1)/m, j/m]``, so the
  two agree unless a confidence lies exactly on a bin edge.)

  Args:
    probs: ``(n, C)`` probabilities (logits with ``from_logits=True``).
    labels: ``(n,)`` integer labels in ``[0, C)``.
    num_bins: bin count ``m``: a Python int, or an int array of any shape (one
      compiled call for all of them; the result has that shape). A traced
      bin count (under a user's ``vmap``/``jit``) needs ``max_bins``.
    binning: ``"fixed"`` (default, equal-width bins) or ``"quantile"``.
    norm: ``"l1"`` (default), ``"l2"`` or ``"max"``.
    max_bins: static bound on the bin count; it sizes the per-bin arrays
      (default: the bin count, or the largest of an array, rounded up to a
      power of two). A traced bin count outside ``[1, max_bins]`` gives NaN.
    from_logits: treat ``probs`` as logits and apply a softmax first.
    where: optional ``(n,)`` bool mask; masked-out samples are treated as
      absent (``n`` is the number of ``True`` entries).

  Returns:
    Scalar, or an array shaped like ``num_bins``.

  Raises:
    ValueError: bad probabilities, labels, mask or bin counts, or quantile
      bins outnumbering the samples (on eager calls; under ``jit`` invalid
      values give NaN, see :func:`jaxcal.checked`, and a traced count above
      ``n`` leaves bins empty, the value of ``m = n``; in
      :func:`jaxcal.checked` a concrete count above the samples a traced
      ``where`` selects raises).

  Example:
    >>> import jax.numpy as jnp
    >>> p = jnp.array([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7]])
    >>> round(float(conf_ece(p, jnp.array([0, 1, 1]), num_bins=2)), 4)
    0.1333
    >>> round(float(conf_ece(p, jnp.array([0, 1, 1]), num_bins=4, norm="max")), 4)
    0.35

  Reference: Guo, Pleiss, Sun & Weinberger (2017), *On Calibration of Modern
  Neural Networks*, arXiv:1706.04599, §2 (ECE); Naeini, Cooper & Hauskrecht
  (2015), AAAI, §2 (ECE and MCE); Nixon et al. (2019), *Measuring Calibration
  in Deep Learning*, arXiv:1904.01685 (RMS); Lu, Wu, Hartline & Hu (2025),
  *Truthful Calibration Errors for Multi-Class Prediction*, arXiv:2510.06388,
  §3.2 (confidence calibration, why it is not truthful).
  """
  norm = _check_norm(norm)
  bins = V.check_bins(num_bins, binning, max_bins)
  d = V.check_predictions(
    probs, labels, from_logits=from_logits, where=where, defer=True, borrow=True
  )
  return _run(_conf_from_scores, d, bins, rows=_top_label, kind="ece", norm=norm)


@V.same_arguments
def conf_ce(
  probs: ArrayLike,
  labels: ArrayLike,
  num_bins: ArrayLike = 15,
  binning: str = "quantile",
  *,
  max_bins: int | None = None,
  from_logits: bool = False,
  where: ArrayLike | None = None,
) -> jax.Array:
  """Squared top-label binned calibration error ConfCE (not truthful).

  ``ConfCE = (1/n^2) sum_B (sum_{i in B} (c_i - z_i))^2`` with ``c_i = max p_i``,
  ``z_i = 1[y_i = argmax p_i]`` and bins on ``c``.

  Args:
    probs: ``(n, C)`` probabilities (logits with ``from_logits=True``).
    labels: ``(n,)`` integer labels in ``[0, C)``.
    num_bins: bin count ``m``: a Python int, or an int array of any shape (one
      compiled call for all of them; the result has that shape). A traced
      bin count (under a user's ``vmap``/``jit``) needs ``max_bins``.
    binning: ``"quantile"`` (default, equal-mass bins) or ``"fixed"``.
    max_bins: static bound on the bin count; it sizes the per-bin arrays
      (default: the bin count, or the largest of an array, rounded up to a
      power of two). A traced bin count outside ``[1, max_bins]`` gives NaN.
    from_logits: treat ``probs`` as logits and apply a softmax first.
    where: optional ``(n,)`` bool mask; masked-out samples are treated as
      absent (``n`` is the number of ``True`` entries).

  Returns:
    Scalar, or an array shaped like ``num_bins``.

  Raises:
    ValueError: bad probabilities, labels, mask or bin counts, or quantile
      bins outnumbering the samples (eager calls; a traced count above ``n``
      leaves bins empty, the value of ``m = n``; in :func:`jaxcal.checked` a
      concrete count above the samples a traced ``where`` selects raises).

  Example:
    >>> import jax.numpy as jnp
    >>> p = jnp.array([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7]])
    >>> round(float(conf_ce(p, jnp.array([0, 1, 1]), num_bins=1)), 4)
    0.0178

  Reference: Lu, Wu, Hartline & Hu (2025), *Truthful Calibration Errors for
  Multi-Class Prediction*, arXiv:2510.06388, §3.2 and Example C.1 (ConfCE is
  not truthful).
  """
  bins = V.check_bins(num_bins, binning, max_bins)
  d = V.check_predictions(
    probs, labels, from_logits=from_logits, where=where, defer=True, borrow=True
  )
  return _run(_conf_from_scores, d, bins, rows=_top_label, kind="ce")


@V.same_arguments
def conf_ce_corr(
  probs: ArrayLike,
  labels: ArrayLike,
  num_bins: ArrayLike = 15,
  binning: str = "quantile",
  *,
  max_bins: int | None = None,
  from_logits: bool = False,
  where: ArrayLike | None = None,
) -> jax.Array:
  """Corrected squared top-label calibration error ConfCE_corr (truthful).

  ``ConfCE_corr = ConfCE + (1/n) (1 - (1/n) sum_i z_i)``. For a calibrated
  predictor ``E[ConfCE_corr] = E[l_conf] / n`` with
  ``l_conf(p, y) = 1 - z + (c - z)^2``.

  Args:
    probs: ``(n, C)`` probabilities (logits with ``from_logits=True``).
    labels: ``(n,)`` integer labels in ``[0, C)``.
    num_bins: bin count ``m``: a Python int, or an int array of any shape (one
      compiled call for all of them; the result has that shape). A traced
      bin count (under a user's ``vmap``/``jit``) needs ``max_bins``.
    binning: ``"quantile"`` (default, equal-mass bins) or ``"fixed"``.
    max_bins: static bound on the bin count; it sizes the per-bin arrays
      (default: the bin count, or the largest of an array, rounded up to a
      power of two). A traced bin count outside ``[1, max_bins]`` gives NaN.
    from_logits: treat ``probs`` as logits and apply a softmax first.
    where: optional ``(n,)`` bool mask; masked-out samples are treated as
      absent (``n`` is the number of ``True`` entries).

  Returns:
    Scalar, or an array shaped like ``num_bins``.

  Raises:
    ValueError: bad probabilities, labels, mask or bin counts, or quantile
      bins outnumbering the samples (eager calls; a traced count above ``n``
      leaves bins empty, the value of ``m = n``; in :func:`jaxcal.checked` a
      concrete count above the samples a traced ``where`` selects raises).

  Example:
    >>> import jax.numpy as jnp
    >>> p = jnp.array([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7]])
    >>> round(float(conf_ce_corr(p, jnp.array([0, 1, 1]), num_bins=1)), 4)
    0.1289

  Reference: Lu, Wu, Hartline & Hu (2025), *Truthful Calibration Errors for
  Multi-Class Prediction*, arXiv:2510.06388, §3.2, Definition 3.2 and
  Theorem 3.3; the expectation is Lemma D.1.
  """
  bins = V.check_bins(num_bins, binning, max_bins)
  d = V.check_predictions(
    probs, labels, from_logits=from_logits, where=where, defer=True, borrow=True
  )
  return _run(_conf_from_scores, d, bins, rows=_top_label, kind="ce_corr")


@V.same_arguments
def classwise_ce(
  probs: ArrayLike,
  labels: ArrayLike,
  num_bins: ArrayLike = 15,
  binning: str = "quantile",
  *,
  max_bins: int | None = None,
  from_logits: bool = False,
  where: ArrayLike | None = None,
) -> jax.Array:
  """Classwise squared calibration error LinCE_cw (truthful).

  ``LinCE_cw = (1/C) sum_r (1/n^2) sum_B (sum_{i in B} (p_ir - 1[y_i = r]))^2``,
  each class's column binned on its own.

  Args:
    probs: ``(n, C)`` probabilities (logits with ``from_logits=True``).
    labels: ``(n,)`` integer labels in ``[0, C)``.
    num_bins: bin count ``m``: a Python int, or an int array of any shape (one
      compiled call for all of them; the result has that shape). A traced
      bin count (under a user's ``vmap``/``jit``) needs ``max_bins``.
    binning: ``"quantile"`` (default, equal-mass bins) or ``"fixed"``.
    max_bins: static bound on the bin count; it sizes the per-bin arrays
      (default: the bin count, or the largest of an array, rounded up to a
      power of two). A traced bin count outside ``[1, max_bins]`` gives NaN.
    from_logits: treat ``probs`` as logits and apply a softmax first.
    where: optional ``(n,)`` bool mask; masked-out samples are treated as
      absent (``n`` is the number of ``True`` entries).

  Returns:
    Scalar, or an array shaped like ``num_bins``.

  Raises:
    ValueError: bad probabilities, labels, mask or bin counts, or quantile
      bins outnumbering the samples (eager calls; a traced count above ``n``
      leaves bins empty, the value of ``m = n``; in :func:`jaxcal.checked` a
      concrete count above the samples a traced ``where`` selects raises).

  Example:
    >>> import jax.numpy as jnp
    >>> p = jnp.array([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7]])
    >>> round(float(classwise_ce(p, jnp.array([0, 1, 1]), num_bins=1)), 4)
    0.1111

  Reference: Lu, Wu, Hartline & Hu (2025), *Truthful Calibration Errors for
  Multi-Class Prediction*, arXiv:2510.06388, §3.1 (classwise calibration as a
  linear property, Theorem 3.1); the expectation is Lemma D.1.
  """
  bins = V.check_bins(num_bins, binning, max_bins)
  d = V.check_predictions(probs, labels, from_logits=from_logits, where=where, defer=True)
  return _run(_classwise_core, d, bins, _weights_or_uniform(d), kind="ce")


@V.same_arguments
def classwise_ece(
  probs: ArrayLike,
  labels: ArrayLike,
  num_bins: ArrayLike = 15,
  binning: str = "fixed",
  class_weights: ArrayLike | None = None,
  *,
  norm: str = "l1",
  max_bins: int | None = None,
  from_logits: bool = False,
  where: ArrayLike | None = None,
) -> jax.Array:
  """Classwise binned calibration error CWE_bin (ℓ1; also RMS and max norms; not truthful).

  ``CWE = sum_r w_r (1/n) sum_B |sum_{i in B} (p_ir - 1[y_i = r])|``, each
  class's column binned on its own, weights ``w_r = 1/C`` by default.
  ``norm`` extends torchmetrics' top-label norms class by class: each class's
  binned gaps ``S_rB / n_rB`` get the ``"l1"`` (default), ``"l2"``
  (bin-mass-weighted RMS) or ``"max"`` (largest over non-empty bins) norm of
  :func:`conf_ece`, and the per-class values are averaged with the weights
  ``w_r`` (so ``"max"`` is the weighted mean of the per-class MCEs, not the
  largest gap over all classes).

  Args:
    probs: ``(n, C)`` probabilities (logits with ``from_logits=True``).
    labels: ``(n,)`` integer labels in ``[0, C)``.
    num_bins: bin count ``m``: a Python int, or an int array of any shape (one
      compiled call for all of them; the result has that shape). A traced
      bin count (under a user's ``vmap``/``jit``) needs ``max_bins``.
    binning: ``"fixed"`` (default) or ``"quantile"`` (the utility paper's
      ``CWE_bin`` uses 15 equal-mass bins).
    class_weights: ``(C,)`` finite non-negative weights with a positive sum
      (default ``1/C``), used as given: weights summing to ``s`` scale the
      error by ``s`` (pass ``w / w.sum()`` for a weighted mean).
    norm: ``"l1"`` (default), ``"l2"`` or ``"max"``.
    max_bins: static bound on the bin count; it sizes the per-bin arrays
      (default: the bin count, or the largest of an array, rounded up to a
      power of two). A traced bin count outside ``[1, max_bins]`` gives NaN.
    from_logits: treat ``probs`` as logits and apply a softmax first.
    where: optional ``(n,)`` bool mask; masked-out samples are treated as
      absent (``n`` is the number of ``True`` entries).

  Returns:
    Scalar, or an array shaped like ``num_bins``.

  Raises:
    ValueError: bad probabilities, labels, mask, class weights or bin counts,
      or quantile bins outnumbering the samples (eager calls; a traced count
      above ``n`` leaves bins empty, the value of ``m = n``; in
      :func:`jaxcal.checked` a concrete count above the samples a traced
      ``where`` selects raises).

  Example:
    >>> import jax.numpy as jnp
    >>> p = jnp.array([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7]])
    >>> round(float(classwise_ece(p, jnp.array([0, 1, 1]), num_bins=1)), 4)
    0.3333

  Reference: Kull, Perello-Nieto, Kängsepp, Silva Filho, Song & Flach (2019),
  *Beyond temperature scaling*, arXiv:1910.12656, §3 (classwise-ECE);
  Hegazy, Jordan & Dieuleveut (2025), *Scalable Utility-Aware Multiclass
  Calibration*, arXiv:2510.25458, §5 (CWE_bin).
  """
  norm = _check_norm(norm)
  bins = V.check_bins(num_bins, binning, max_bins)
  d = V.check_predictions(
    probs,
    labels,
    from_logits=from_logits,
    where=where,
    class_weights=class_weights,
    defer=True,
  )
  return _run(_classwise_core, d, bins, _weights_or_uniform(d), kind="ece", norm=norm)


@V.same_arguments
def binary_ce(
  p: ArrayLike,
  y: ArrayLike,
  num_bins: ArrayLike = 15,
  binning: str = "quantile",
  *,
  max_bins: int | None = None,
  where: ArrayLike | None = None,
) -> jax.Array:
  """Binary squared binned calibration error (Hartline et al.'s ℓ2-QECE).

  ``(1/n^2) sum_B (sum_{i in B} (p_i - y_i))^2`` with (by default) quantile
  bins on ``p``.

  Args:
    p: ``(n,)`` predicted probabilities of the positive outcome, in ``[0, 1]``.
    y: ``(n,)`` outcomes in ``{0, 1}``.
    num_bins: bin count ``m``: a Python int, or an int array of any shape (one
      compiled call for all of them; the result has that shape). A traced
      bin count (under a user's ``vmap``/``jit``) needs ``max_bins``.
    binning: ``"quantile"`` (default, ℓ2-QECE) or ``"fixed"``.
    max_bins: static bound on the bin count; it sizes the per-bin arrays
      (default: the bin count, or the largest of an array, rounded up to a
      power of two). A traced bin count outside ``[1, max_bins]`` gives NaN.
    where: optional ``(n,)`` bool mask; masked-out samples are treated as
      absent.

  Returns:
    Scalar, or an array shaped like ``num_bins``.

  Raises:
    ValueError: ``p`` not a finite vector in ``[0, 1]``, outcomes not in
      ``{0, 1}``, bad mask or bin counts (eager calls).

  Example:
    >>> import jax.numpy as jnp
    >>> round(float(binary_ce(jnp.array([0.2, 0.4, 0.6, 0.8]), jnp.array([0, 1, 0, 1]), 2)), 4)
    0.02

  Reference: Hartline, Hu & Wu (2025), *A Perfectly Truthful Calibration
  Measure*, arXiv:2508.13100 (ℓ2-QECE); Lu, Wu, Hartline & Hu (2025),
  arXiv:2510.06388, Theorem 3.1 with ``d = 1``.
  """
  bins = V.check_bins(num_bins, binning, max_bins)
  d = V.check_binary(p, y, where=where)
  return _run(_binary_core, d, bins)


@V.same_arguments
def ecce(
  probs: ArrayLike,
  labels: ArrayLike,
  num_bins: ArrayLike = 15,
  class_weights: ArrayLike | None = None,
  *,
  reduction: str = "mean",
  max_bins: int | None = None,
  from_logits: bool = False,
  where: ArrayLike | None = None,
) -> jax.Array:
  """Class-wise expected cumulative calibration error ECCE.

  With ``p[:, c]`` cut into equal-width bins, ``S_cb`` the running sum
  ``sum_{b' <= b} sum_{j in b'} (1[y_j = c] - p_jc)`` and ``K_c`` the number
  of non-empty bins of class ``c``,

      reduction="mean" (default):  ECCE = sum_c pi_c (1/K_c) sum_b (1/n) |S_cb|,
      reduction="sum":             ECCE = sum_c pi_c        sum_b (1/n) |S_cb|,

  both sums over the non-empty bins ``b``. The default is the ECCE every
  table of the local calibration paper reports (its authors' code divides
  each class's sum by ``K_c``, so ECCE stays below the class-wise ECE);
  ``"sum"`` is the paper's appendix formula, 1 to ``num_bins`` times larger.

  Args:
    probs: ``(n, C)`` probabilities (logits with ``from_logits=True``).
    labels: ``(n,)`` integer labels in ``[0, C)``.
    num_bins: bin count ``m``: a Python int, or an int array of any shape (one
      compiled call for all of them; the result has that shape). A traced
      bin count (under a user's ``vmap``/``jit``) needs ``max_bins``.
    class_weights: ``(C,)`` class weights ``pi`` (default uniform ``1/C``;
      the paper uses the training-label priors): finite, non-negative, with a
      positive sum, used as given (not normalised: priors sum to one).
    reduction: ``"mean"`` or ``"sum"`` over the non-empty bins (see above).
    max_bins: static bound on the bin count; it sizes the per-bin arrays
      (default: the bin count, or the largest of an array, rounded up to a
      power of two). A traced bin count outside ``[1, max_bins]`` gives NaN.
    from_logits: treat ``probs`` as logits and apply a softmax first.
    where: optional ``(n,)`` bool mask; masked-out samples are treated as
      absent (``n`` is the number of ``True`` entries).

  Returns:
    Scalar, or an array shaped like ``num_bins``.

  Raises:
    ValueError: bad probabilities, labels, mask, class weights or bin counts
      (eager calls).

  Example:
    >>> import jax.numpy as jnp
    >>> p = jnp.array([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7]])
    >>> round(float(ecce(p, jnp.array([0, 1, 1]), num_bins=2)), 4)
    0.25
    >>> round(float(ecce(p, jnp.array([0, 1, 1]), num_bins=2, reduction="sum")), 4)
    0.5

  Reference: Barbera, Perini, De Toni, Passerini & Pugnana (2025),
  *Multiclass Local Calibration with the Jensen-Shannon Distance*,
  arXiv:2510.26566, §3 and App. C.1, D.3; Ibarra et al. (2022), *Metrics of
  calibration for probabilistic predictions*, JMLR 23.
  """
  if reduction not in ("mean", "sum"):
    raise ValueError(f"reduction must be 'mean' or 'sum', got {reduction!r}")
  bins = V.check_bins(num_bins, "fixed", max_bins)  # ECCE bins are fixed
  d = V.check_predictions(
    probs,
    labels,
    from_logits=from_logits,
    where=where,
    class_weights=class_weights,
    defer=True,
  )
  return _run(_ecce_core, d, bins, _weights_or_uniform(d), reduction=reduction)


# --------------------------------------------------------------------------
# Generic vector forms with a user-given partition.
# --------------------------------------------------------------------------


def _lin_sums(reports, signals, bin_ids, num_bins, where):
  if (
    isinstance(num_bins, bool | np.bool_)
    or not isinstance(num_bins, int | np.integer)
    or num_bins < 1
  ):
    raise ValueError(f"num_bins must be a static int >= 1 for lin_ce/lin_ece, got {num_bins!r}")
  V.check_num_bins(num_bins)  # the bound of every binned metric (per-bin sums are (num_bins, d))
  u = V.as_float(reports, "reports")
  s = V.as_float(signals, "signals")
  if u.ndim == 1:
    u = u[:, None]
  if s.ndim == 1:
    s = s[:, None]
  if u.ndim != 2 or s.ndim != 2:
    raise ValueError(
      f"reports and signals must have shape (n,) or (n, d); got "
      f"{tuple(u.shape)} and {tuple(s.shape)}"
    )
  if u.shape != s.shape:
    raise ValueError(
      f"reports and signals must have the same shape (n, d); got "
      f"{tuple(u.shape)} and {tuple(s.shape)}"
    )
  if u.shape[0] == 0:
    raise ValueError("reports is empty (n = 0 samples)")
  if u.shape[1] == 0:
    raise ValueError(
      f"reports must have at least one column (shape (n,) or (n, d) with d >= 1), "
      f"got {tuple(u.shape)}"
    )
  (u, s), b, wh, ok, count = V.check_arrays(
    {"reports": u, "signals": s}, labels=("bin_ids", bin_ids, int(num_bins)), where=where
  )
  sums, counts = _lin_bin_sums(u, s, b, wh, int(num_bins))
  n = float(count) if isinstance(count, int) else count.astype(sums.dtype)  # traced with where
  return sums, counts, n, ok


@functools.partial(jax.jit, static_argnames="num_bins")
def _lin_bin_sums(u, s, b, wh, num_bins: int) -> tuple[jax.Array, jax.Array]:
  """Per-bin residual sums ``(num_bins, d)`` and counts of :func:`lin_ce` / :func:`lin_ece`.

  One program (op by op, the accurate segment sum's loop compiled again on
  every eager call: 0.15 s for a 1 ms computation).
  """
  r = u - s.astype(u.dtype)
  if wh is not None:
    r = jnp.where(wh[:, None], r, 0.0)
  sums = segment_sum_accurate(r, b, num_bins)  # no drift with n (a float scatter-add has)
  ones = jnp.ones(b.shape, jnp.int32) if wh is None else wh.astype(jnp.int32)
  return sums, jax.ops.segment_sum(ones, b, num_segments=num_bins)


@V.same_arguments
def lin_ce(
  reports: ArrayLike,
  signals: ArrayLike,
  bin_ids: ArrayLike,
  num_bins: int,
  *,
  where: ArrayLike | None = None,
) -> jax.Array:
  """Generic squared binned error LinCE for vector reports (truthful for any partition).

  ``LinCE = (1/n^2) sum_B ||sum_{i in B} (u_i - phi(y_i))||_2^2``.

  Args:
    reports: ``(n, d)`` (or ``(n,)``) reports ``u_i``.
    signals: same shape, the signals ``phi(y_i)`` (e.g. one-hot labels).
    bin_ids: ``(n,)`` integer bin of each sample in ``[0, num_bins)``; the
      partition must not depend on the outcomes.
    num_bins: static number of bins.
    where: optional ``(n,)`` bool mask; masked-out samples are treated as
      absent (``n`` is the number of ``True`` entries).

  Returns:
    Scalar.

  Raises:
    ValueError: mismatched shapes, reports without columns, non-finite
      reports or signals, bin ids outside ``[0, num_bins)``, ``num_bins`` not
      an int in ``[1, 2**24]``, a bad mask (eager calls).

  Example:
    >>> import jax.numpy as jnp
    >>> float(lin_ce(jnp.array([0.5, 0.5]), jnp.array([1.0, 0.0]), jnp.array([0, 0]), 1))
    0.0

  Reference: Lu, Wu, Hartline & Hu (2025), *Truthful Calibration Errors for
  Multi-Class Prediction*, arXiv:2510.06388, §2, Definition 2.1 (LinCE) and
  §3.1, Theorem 3.1 (truthful).
  """
  sums, _, n, ok = _lin_sums(reports, signals, bin_ids, num_bins, where)
  return V.fold(jnp.sum(sums**2) / n / n, ok)


@V.same_arguments
def lin_ece(
  reports: ArrayLike,
  signals: ArrayLike,
  bin_ids: ArrayLike,
  num_bins: int,
  *,
  norm: str = "l1",
  where: ArrayLike | None = None,
) -> jax.Array:
  """Generic binned ℓ1 error LinECE for vector reports (not truthful; also RMS and max norms).

  ``LinECE = (1/n) sum_B ||S_B||_1`` with ``S_B = sum_{i in B} (u_i - phi(y_i))``.
  With ``n_B = |B|``, the norms across bins are those of :func:`conf_ece`
  applied to the per-bin gaps ``||S_B||_1 / n_B``: ``"l1"``
  ``sum_B (n_B/n) ||S_B||_1/n_B`` (LinECE), ``"l2"``
  ``sqrt(sum_B (n_B/n) (||S_B||_1/n_B)^2)`` and ``"max"``
  ``max_B ||S_B||_1/n_B`` over non-empty bins.

  Args:
    reports: ``(n, d)`` (or ``(n,)``) reports.
    signals: same shape, the signals.
    bin_ids: ``(n,)`` integer bins in ``[0, num_bins)``.
    num_bins: static number of bins.
    norm: ``"l1"`` (default), ``"l2"`` or ``"max"``.
    where: optional ``(n,)`` bool mask; masked-out samples are treated as
      absent (``n`` is the number of ``True`` entries).

  Returns:
    Scalar.

  Raises:
    ValueError: mismatched shapes, reports without columns, non-finite
      reports or signals, bin ids outside ``[0, num_bins)``, ``num_bins`` not
      an int in ``[1, 2**24]``, a bad mask, an unknown norm (eager calls).

  Example:
    >>> import jax.numpy as jnp
    >>> u, s = jnp.array([0.5, 0.5, 0.9]), jnp.array([1.0, 0.0, 1.0])
    >>> float(lin_ece(u[:2], s[:2], jnp.array([0, 1]), 2))
    0.5
    >>> round(float(lin_ece(u, s, jnp.array([0, 0, 1]), 2, norm="max")), 4)
    0.1

  Reference: Lu, Wu, Hartline & Hu (2025), *Truthful Calibration Errors for
  Multi-Class Prediction*, arXiv:2510.06388, §2 (the binned ℓ1 error) and
  §3.1.
  """
  norm = _check_norm(norm)
  sums, counts, n, ok = _lin_sums(reports, signals, bin_ids, num_bins, where)
  per_bin = jnp.sum(jnp.abs(sums), axis=-1)  # ||S_B||_1, (num_bins,)
  return V.fold(_binned_norm(per_bin, counts, n, norm), ok)


# --------------------------------------------------------------------------
# Per-bin statistics for reliability diagrams.
# --------------------------------------------------------------------------


class ReliabilityStats(NamedTuple):
  """Per-bin top-label statistics (rows of empty bins are 0).

  Attributes:
    counts: ``(num_bins,)`` samples in each bin.
    confidence: ``(num_bins,)`` mean confidence in the bin.
    accuracy: ``(num_bins,)`` mean correctness in the bin.
    lower: ``(num_bins,)`` left edge of the bin on the score axis.
    upper: ``(num_bins,)`` right edge of the bin.
  """

  counts: jax.Array
  confidence: jax.Array
  accuracy: jax.Array
  lower: jax.Array
  upper: jax.Array


@functools.partial(jax.jit, static_argnames=("num_bins", "binning"))
def _reliability_core(p, y, num_bins, binning, where=None):
  """Per-bin counts, mean confidence, accuracy and score range of the top label.

  ``where``: optional ``(n,)`` bool sample mask (masked-out samples are
  treated as absent: they are in no bin, and quantile bins are equal-mass
  over the others).
  """
  c, z = _confidence(p, y)
  return _reliability_of_top(c, z, num_bins, binning, where)


def _reliability_of_top(c, z, num_bins, binning, where=None):
  """:func:`_reliability_core` of confidences ``c`` and correctness ``z`` ``(n,)``."""
  # Direct per-bin segment sums (not differences of prefix sums): per-bin
  # *means* are reported, and a prefix-sum difference loses float32 digits
  # in sparsely populated bins.
  acc = jnp.promote_types(c.dtype, jnp.float32)  # never sum in float16 / bfloat16
  c, z = c.astype(acc), z.astype(acc)
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
  sums = segment_sum_accurate(jnp.stack([c, z], axis=1), b, num_bins)
  safe = jnp.maximum(cnt, 1)[:, None].astype(acc)
  means = jnp.where((cnt > 0)[:, None], sums / safe, 0.0)
  if binning == "fixed":
    edges = jnp.arange(num_bins + 1, dtype=acc) / num_bins
    lower, upper = edges[:-1], edges[1:]
  else:
    lower = jax.ops.segment_min(c, b, num_segments=num_bins)
    upper = jax.ops.segment_max(c, b, num_segments=num_bins)
    lower = jnp.where(cnt > 0, lower, 0.0)
    upper = jnp.where(cnt > 0, upper, 0.0)
  return ReliabilityStats(cnt, means[:, 0], means[:, 1], lower, upper)


@V.same_arguments
def reliability_stats(
  probs: ArrayLike,
  labels: ArrayLike,
  num_bins: int = 15,
  binning: str = "fixed",
  *,
  from_logits: bool = False,
  where: ArrayLike | None = None,
) -> ReliabilityStats:
  """Per-bin counts, mean confidence and accuracy of the top label.

  The data behind a reliability diagram:
  ``ConfECE = sum_b (counts_b / n) |confidence_b - accuracy_b|``.

  Args:
    probs: ``(n, C)`` probabilities (logits with ``from_logits=True``).
    labels: ``(n,)`` integer labels in ``[0, C)``.
    num_bins: static bin count (a Python or numpy integer, not an array).
    binning: ``"fixed"`` or ``"quantile"``.
    from_logits: treat ``probs`` as logits and apply a softmax first.
    where: optional ``(n,)`` bool mask; masked-out samples are left out of
      every bin.

  Returns:
    :class:`ReliabilityStats` of ``(num_bins,)`` arrays (under ``jit`` /
    ``vmap``, for bad input: NaN, and counts of ``-1``).

  Raises:
    ValueError: bad probabilities, labels or mask, a bin count that is not a
      Python or numpy integer (a JAX array included), quantile bins
      outnumbering the samples (eager calls).

  Example:
    >>> import jax.numpy as jnp
    >>> s = reliability_stats(jnp.array([[0.9, 0.1], [0.3, 0.7]]), jnp.array([0, 0]), 2)
    >>> s.counts.tolist(), s.accuracy.tolist()
    ([0, 2], [0.0, 0.5])

  Reference: Guo, Pleiss, Sun & Weinberger (2017), *On Calibration of Modern
  Neural Networks*, arXiv:1706.04599, §2 (reliability diagrams).
  """
  m = V.check_num_bins(num_bins)
  if not isinstance(m, int):
    raise ValueError(
      "num_bins must be a Python or numpy integer (not an array) for reliability_stats, "
      f"got {num_bins!r}"
    )
  binning = V.check_binning(binning)
  d = V.check_predictions(probs, labels, from_logits=from_logits, where=where)
  if binning == "quantile" and isinstance(d.count, int) and m > d.count:
    raise ValueError(
      f"quantile binning with num_bins = {m} needs at least that many samples, got n = {d.count}"
    )
  out = _reliability_core(d.probs(), d.labels, m, binning, where=d.where)
  return V.fold(out, d.ok, ints=-1)  # counts of bad input: -1, as FixedBins.reliability
