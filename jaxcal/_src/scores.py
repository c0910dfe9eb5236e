"""Proper scores and the confidence loss.

Each score takes ``(probs, labels)`` for one data set and returns the mean
over samples, or the ``(n,)`` per-sample losses with ``per_sample=True``;
``where=`` restricts both to a subset of the samples. :func:`prepare` is the
validation entry point the other metrics share.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from jaxcal._src import validation as V
from jaxcal._src.numerics import NARROW_ROW, RowBlocks, by_rows, narrow_row_sums

__all__ = [
  "prepare",
  "brier",
  "log_loss",
  "spherical",
  "classification_error",
  "confidence_loss",
  "brier_per_sample",
  "log_loss_per_sample",
  "spherical_per_sample",
  "classification_error_per_sample",
  "confidence_loss_per_sample",
  "LOG_CLIP",
]

#: Probabilities are clipped below at this value inside the log score.
LOG_CLIP = 1e-12


def prepare(
  probs: ArrayLike,
  labels: ArrayLike,
  from_logits: bool = False,
  name: str = "probs",
  *,
  where: ArrayLike | None = None,
) -> tuple[jax.Array, jax.Array]:
  """Validates ``(probs, labels)`` and returns them as JAX arrays.

  The entry point every metric shares (see :mod:`jaxcal._src.validation`):
  shapes and dtypes always; values (finite, on the simplex, labels in
  ``[0, C)``, and a non-empty ``where``) in one fused device reduction. On an
  eager call bad values raise; under a transformation the returned
  probabilities are NaN when the inputs are invalid (so the caller's result
  is NaN, not a plausible number), and in :func:`jaxcal.checked` mode the
  check raises from compiled code. Samples masked out by ``where`` are not
  checked; pass the same ``where`` on to the computation.

  Args:
    probs: ``(n, C)`` probabilities, or logits with ``from_logits=True``.
    labels: ``(n,)`` integer labels in ``[0, C)``.
    from_logits: check ``probs`` as logits and return their softmax.
    name: the argument's name in error messages.
    where: optional ``(n,)`` bool mask of the samples to use.

  Returns:
    ``(probs (n, C) in at least float32, labels (n,) int32)``.

  Raises:
    ValueError: naming the argument, the problem and the fix.

  Example:
    >>> import numpy as np
    >>> p, y = prepare(np.array([[0.25, 0.75]], np.float16), np.array([1], np.int64))
    >>> p.dtype, y.dtype
    (dtype('float32'), dtype('int32'))
  """
  if from_logits and name == "probs":
    name = "logits"
  d = V.check_predictions(probs, labels, from_logits=from_logits, where=where, name=name)
  return V.fold(d.probs(), d.ok), d.labels


def _squares(p: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
  """``(p_y, B, off)``: the Brier score ``B`` and ``off = sum_{r != y} p_r^2``, both near 0 too.

  The plain forms ``B = sum_r p_r^2 - 2 p_y + 1`` and ``off = sum_r p_r^2 -
  p_y^2`` subtract numbers near 1 when ``p_y`` is: their float32 error is
  ~1e-7 whatever the loss, so a confident row's Brier score (2.5e-8 on
  CIFAR-10) came out 0. ``Q = sum_r min(p_r, 1 - p_r)^2`` holds ``off``
  and the label's term ``(1 - p_y)^2`` term by term (``Q`` is ``B``) where
  ``y`` holds the row's one entry above 1/2; that is so where ``p_y > 1/2``
  and the plain ``off`` is below 1/8, as a second entry above 1/2 adds more
  than 1/4 to ``off`` on its own. A row summing to one within the tolerance
  can hold two (``[-0.0008, 0.5004, 0.5004]``): where a single reduction
  assumed one, that row's Brier score came out 0.4992 for 0.5 (0.41 for
  0.50 at C = 100). Elsewhere ``off`` (and ``B``, at least ``off``) is at
  least 1/8 or ``p_y <= 1/2`` (``B >= 1/4``), and the plain forms are
  accurate. ``B`` keeps a few roundings of itself; ``off`` where ``near``
  holds is ``Q - (1 - p_y)^2``, which keeps about ``C`` roundings of itself
  when the mass off the label is spread over many classes (7e-4 relative at
  C = 1,000 in float32, as before this form). Two reductions: ``sum p^2``
  streams at memory speed (0.8 against 1.6 ms for ``Q`` at n = 10^5, C =
  100 on 2 CPU cores); a per-entry select or an ``(n, C)`` one-hot mask,
  which XLA:CPU does not vectorise, took 11-21 ms.
  """
  py = jnp.take_along_axis(p, y[..., None], axis=-1)[..., 0]
  if p.shape[-1] <= NARROW_ROW:  # both sums in one pass (n = 10^5, C = 10: 0.20 against 0.78 ms)
    plain, big = narrow_row_sums(p, jnp.square, lambda c: jnp.square(jnp.minimum(c, 1.0 - c)))
  else:
    q = jnp.minimum(p, 1.0 - p)
    plain, big = jnp.sum(p * p, axis=-1), jnp.sum(q * q, axis=-1)
  off = plain - jnp.square(py)
  near = (py > 0.5) & (off < 0.125)
  brier = jnp.where(near, big, plain - 2.0 * py + 1.0)
  return py, brier, jnp.where(near, big - jnp.square(1.0 - py), off)


def brier_per_sample(p: jax.Array, y: jax.Array) -> jax.Array:
  """``sum_r (p_r - 1[y = r])^2`` per sample (no validation), accurate near 0 (:func:`_squares`)."""
  return _squares(p, y)[1]


def log_loss_per_sample(p: jax.Array, y: jax.Array) -> jax.Array:
  """``-log max(p_y, LOG_CLIP)`` per sample (no validation)."""
  py = jnp.take_along_axis(p, y[:, None], axis=-1)[:, 0]
  return -jnp.log(jnp.maximum(py, LOG_CLIP))


def _log_loss_of_logits(x: jax.Array, y: jax.Array) -> jax.Array:
  """``-log softmax(x)_y`` per sample, clipped like :func:`log_loss_per_sample`, accurate near 0.

  ``log(sum_r e_r)`` with ``e_r = exp(x_r - x_y)`` is ``log(1 + 5e-8)``, 0 in
  float32, for a confident row (so is ``log_softmax``: the log of the softmax
  gave 2.4e-8 for 5.2e-8 at a logit gap of 20). Where ``sum_r e_r < 1.5``,
  ``y`` is the top class and every other ``e_r < 1/2``, so ``sum_r min(e_r,
  |1 - e_r|)`` is ``sum_{r != y} e_r`` term by term (``e_y = 1`` counts 0)
  and the loss is its ``log1p``; elsewhere the loss is above ``log 1.5`` and
  ``log_softmax`` is accurate (and finite where ``e_r`` overflows).
  """
  xy = jnp.take_along_axis(x, y[:, None], axis=-1)
  # at most e: the test total < 1.5 reads the same, and a gap beyond 88 no
  # longer overflows to inf (0 * inf: a NaN gradient through the unused branch)
  e = jnp.exp(jnp.minimum(x - xy, 1.0))
  total = jnp.sum(e, axis=-1)
  others = jnp.sum(jnp.minimum(e, jnp.abs(1.0 - e)), axis=-1)
  plain = -jnp.take_along_axis(jax.nn.log_softmax(x, axis=-1), y[:, None], axis=-1)[:, 0]
  loss = jnp.where(total < 1.5, jnp.log1p(jnp.where(total < 1.5, others, 0.0)), plain)
  return jnp.minimum(loss, -math.log(LOG_CLIP))


def spherical_per_sample(p: jax.Array, y: jax.Array) -> jax.Array:
  """``1 - p_y / ||p||_2`` per sample (no validation), accurate near 0.

  As ``sum_{r != y} p_r^2 / (||p|| (||p|| + p_y))``: ``1 - p_y / ||p||``
  cancels when ``p_y`` is near 1 (up to 15x the loss on CIFAR-10 rows).
  """
  py, _, off = _squares(p, y)
  norm = jnp.sqrt(off + jnp.square(py))
  return off / (norm * (norm + py))


def classification_error_per_sample(p: jax.Array, y: jax.Array) -> jax.Array:
  """``1[y != argmax p]`` per sample, ties to the lowest class (no validation)."""
  return (jnp.argmax(p, axis=-1) != y).astype(p.dtype)


def confidence_loss_per_sample(p: jax.Array, y: jax.Array) -> jax.Array:
  """``1 - z + (c - z)^2`` per sample, ``c = max p``, ``z = 1[y = argmax p]`` (no validation)."""
  r = jnp.argmax(p, axis=-1)
  c = jnp.max(p, axis=-1)
  z = (r == y).astype(p.dtype)
  return 1.0 - z + (c - z) ** 2


@functools.cache
def _scorer(per_sample_fn: Callable, per_sample: bool, from_logits: bool) -> Callable:
  """The jitted mean (or per-sample) score ``(x, y, where) -> loss`` (one per rule and mode)."""

  def rows(x, y):
    if from_logits and per_sample_fn is log_loss_per_sample:
      return _log_loss_of_logits(x, y)
    return per_sample_fn(jax.nn.softmax(x, axis=-1) if from_logits else x, y)

  def score(x, y, where):
    if not per_sample and where is None:
      # the mean of the blocks' losses (x: RowBlocks, a borrowed host buffer) in the
      # blocks' row order: putting the rows back in order first cost 0.25 ms at n = 10^5
      losses = by_rows(rows, x, y, join=False)
      if isinstance(losses, RowBlocks):
        return sum(jnp.sum(b) for b in losses.parts) / x.shape[0]
      return jnp.mean(losses)
    losses = by_rows(rows, x, y)  # x: (n, C) or RowBlocks
    if where is not None:
      losses = jnp.where(where, losses, 0.0)
    if per_sample:
      return losses
    if where is None:
      return jnp.mean(losses)
    return jnp.sum(losses) / jnp.sum(where, dtype=jnp.int32).astype(losses.dtype)

  return jax.jit(score)


def _evaluate(
  per_sample_fn: Callable, probs, labels, per_sample: bool, from_logits: bool, where
) -> jax.Array:
  d = V.check_predictions(
    probs, labels, from_logits=from_logits, where=where, defer=True, borrow=True
  )
  f = _scorer(per_sample_fn, V.check_flag(per_sample, "per_sample"), bool(from_logits))
  out, _ = V.run_checked(d, f, d.scores, d.labels, d.where)
  return V.fold(out, d.ok)


@V.same_arguments
def brier(
  probs: ArrayLike,
  labels: ArrayLike,
  *,
  per_sample: bool = False,
  from_logits: bool = False,
  where: ArrayLike | None = None,
) -> jax.Array:
  """Multiclass Brier score (lower is better).

  ``S(p, y) = sum_r (p_r - 1[y = r])^2``, in ``[0, 2]``; the mean over samples.

  Args:
    probs: ``(n, C)`` predicted probabilities (logits with ``from_logits=True``).
    labels: ``(n,)`` integer labels in ``[0, C)``.
    per_sample: return the ``(n,)`` losses instead of their mean.
    from_logits: treat ``probs`` as logits and apply a softmax first.
    where: optional ``(n,)`` bool mask: the mean is over the selected samples
      and the per-sample losses of the others are 0.

  Returns:
    Scalar mean loss, or ``(n,)`` losses with ``per_sample=True``.

  Raises:
    ValueError: NaN/inf, wrong shapes, rows off the simplex, labels out of
      range, an empty mask (eager calls; NaN under ``jit``).

  Example:
    >>> import jax.numpy as jnp
    >>> float(brier(jnp.array([[0.5, 0.5], [1.0, 0.0]]), jnp.array([0, 0])))
    0.25

  Reference: Brier (1950), *Verification of forecasts expressed in terms of
  probability*, Monthly Weather Review 78(1); Lu, Wu, Hartline & Hu (2025),
  *Truthful Calibration Errors for Multi-Class Prediction*, arXiv:2510.06388,
  App. B.2 (commonly used proper losses).
  """
  return _evaluate(brier_per_sample, probs, labels, per_sample, from_logits, where)


@V.same_arguments
def log_loss(
  probs: ArrayLike,
  labels: ArrayLike,
  *,
  per_sample: bool = False,
  from_logits: bool = False,
  where: ArrayLike | None = None,
) -> jax.Array:
  """Log loss (negative log-likelihood) ``-log p_y``, ``p_y`` clipped below at 1e-12.

  ``S(p, y) = -log max(p_y, 1e-12)``; the mean over samples.

  Args:
    probs: ``(n, C)`` predicted probabilities (logits with ``from_logits=True``).
    labels: ``(n,)`` integer labels in ``[0, C)``.
    per_sample: return the ``(n,)`` losses instead of their mean.
    from_logits: treat ``probs`` as logits and apply a softmax first.
    where: optional ``(n,)`` bool mask: the mean is over the selected samples
      and the per-sample losses of the others are 0.

  Returns:
    Scalar mean loss, or ``(n,)`` losses with ``per_sample=True``.

  Raises:
    ValueError: NaN/inf, wrong shapes, rows off the simplex, labels out of
      range, an empty mask (eager calls; NaN under ``jit``).

  Example:
    >>> import jax.numpy as jnp
    >>> round(float(log_loss(jnp.array([[0.5, 0.5]]), jnp.array([1]))), 6)
    0.693147

  Reference: Good (1952), *Rational Decisions*, JRSS B 14(1); Lu, Wu,
  Hartline & Hu (2025), *Truthful Calibration Errors for Multi-Class
  Prediction*, arXiv:2510.06388, §5.1 (the cross-entropy loss among the
  evaluation losses; App. B.2 defines only the Brier loss and the
  classification error).
  """
  return _evaluate(log_loss_per_sample, probs, labels, per_sample, from_logits, where)


@V.same_arguments
def spherical(
  probs: ArrayLike,
  labels: ArrayLike,
  *,
  per_sample: bool = False,
  from_logits: bool = False,
  where: ArrayLike | None = None,
) -> jax.Array:
  """Spherical loss ``1 - p_y / ||p||_2``.

  ``S(p, y) = 1 - p_y / sqrt(sum_r p_r^2)``, in ``[0, 1]``; the mean over samples.

  Args:
    probs: ``(n, C)`` predicted probabilities (logits with ``from_logits=True``).
    labels: ``(n,)`` integer labels in ``[0, C)``.
    per_sample: return the ``(n,)`` losses instead of their mean.
    from_logits: treat ``probs`` as logits and apply a softmax first.
    where: optional ``(n,)`` bool mask: the mean is over the selected samples
      and the per-sample losses of the others are 0.

  Returns:
    Scalar mean loss, or ``(n,)`` losses with ``per_sample=True``.

  Raises:
    ValueError: NaN/inf, wrong shapes, rows off the simplex, labels out of
      range, an empty mask (eager calls; NaN under ``jit``).

  Example:
    >>> import jax.numpy as jnp
    >>> float(spherical(jnp.array([[1.0, 0.0]]), jnp.array([0])))
    0.0

  Reference: Gneiting & Raftery (2007), *Strictly Proper Scoring Rules,
  Prediction, and Estimation*, JASA 102(477), §3.1 (spherical score); Lu, Wu,
  Hartline & Hu (2025), arXiv:2510.06388, §5.1 (the spherical loss among the
  evaluation losses).
  """
  return _evaluate(spherical_per_sample, probs, labels, per_sample, from_logits, where)


@V.same_arguments
def classification_error(
  probs: ArrayLike,
  labels: ArrayLike,
  *,
  per_sample: bool = False,
  from_logits: bool = False,
  where: ArrayLike | None = None,
) -> jax.Array:
  """Top-1 classification error ``1[y != argmax p]`` (ties to the lowest class).

  ``S(p, y) = 1[y != argmax_r p_r]``; the mean over samples is one minus the
  accuracy.

  Args:
    probs: ``(n, C)`` predicted probabilities (logits with ``from_logits=True``).
    labels: ``(n,)`` integer labels in ``[0, C)``.
    per_sample: return the ``(n,)`` losses instead of their mean.
    from_logits: treat ``probs`` as logits and apply a softmax first.
    where: optional ``(n,)`` bool mask: the mean is over the selected samples
      and the per-sample losses of the others are 0.

  Returns:
    Scalar error rate, or ``(n,)`` 0/1 losses with ``per_sample=True``.

  Raises:
    ValueError: NaN/inf, wrong shapes, rows off the simplex, labels out of
      range, an empty mask (eager calls; NaN under ``jit``).

  Example:
    >>> import jax.numpy as jnp
    >>> float(classification_error(jnp.array([[0.5, 0.5], [0.2, 0.8]]), jnp.array([1, 1])))
    0.5

  Reference: Lu, Wu, Hartline & Hu (2025), *Truthful Calibration Errors for
  Multi-Class Prediction*, arXiv:2510.06388, App. B.2 (the 0-1 loss among
  the proper losses of the dominance comparisons).
  """
  return _evaluate(classification_error_per_sample, probs, labels, per_sample, from_logits, where)


@V.same_arguments
def confidence_loss(
  probs: ArrayLike,
  labels: ArrayLike,
  *,
  per_sample: bool = False,
  from_logits: bool = False,
  where: ArrayLike | None = None,
) -> jax.Array:
  """Confidence loss ``l_conf(p, y) = 1 - z + (c - z)^2``.

  ``c = max p``, ``z = 1[y = argmax p]``. Proper for the top-label
  confidence; for a calibrated predictor its expectation equals
  ``n E[ConfCE_corr]``.

  Args:
    probs: ``(n, C)`` predicted probabilities (logits with ``from_logits=True``).
    labels: ``(n,)`` integer labels in ``[0, C)``.
    per_sample: return the ``(n,)`` losses instead of their mean.
    from_logits: treat ``probs`` as logits and apply a softmax first.
    where: optional ``(n,)`` bool mask: the mean is over the selected samples
      and the per-sample losses of the others are 0.

  Returns:
    Scalar mean loss, or ``(n,)`` losses with ``per_sample=True``.

  Raises:
    ValueError: NaN/inf, wrong shapes, rows off the simplex, labels out of
      range, an empty mask (eager calls; NaN under ``jit``).

  Example:
    >>> import jax.numpy as jnp
    >>> float(confidence_loss(jnp.array([[0.75, 0.25]]), jnp.array([0])))
    0.0625

  Reference: Lu, Wu, Hartline & Hu (2025), *Truthful Calibration Errors for
  Multi-Class Prediction*, arXiv:2510.06388, Lemma D.1.
  """
  return _evaluate(confidence_loss_per_sample, probs, labels, per_sample, from_logits, where)
