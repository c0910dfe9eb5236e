"""Class-wise non-parametric recalibrators: histogram binning, isotonic
regression and smoothed isotonic regression (the score
decomposition case study, §2.2 and App. B).

Each class ``c`` gets a binary calibration map ``g_c`` fitted on
``(p_i[c], 1[y_i = c])`` of the calibration split (``p = softmax(logits)``,
or the given probabilities with ``from_logits=False``); the recalibrated
prediction is ``q_i[c] = g_c(p_i[c])``, divided by the row sum when
``normalize=True`` (the default, "N-" methods of the case study; rows whose
class-wise values are all 0 become uniform). With ``normalize=False`` (the
"CW-" methods) rows need not sum to one.

* ``"histogram"``: 15 equal-mass bins by rank, fitted value = frequency of
  the class in the bin. Ranks are average ranks (ties share a bin): the
  sample with average rank ``r`` (1-based) of ``n`` goes to bin
  ``max(ceil((r - 1) m / n), 1)``, exactly the rule of the case study's
  code; a new score gets the value of the last bin whose smallest
  calibration score is ``<=`` it (right-continuous steps at the bin minima).
* ``"isotonic"``: the PAV fit, as a left-continuous step function constant
  outside the calibration range (R's ``as.stepfun(isoreg(x, y))``).
* ``"smooth_isotonic"``: the piecewise-linear interpolation through
  ``(0, 0)``, ``(m_j, ybar_j)`` for every PAV pool ``j`` (``m_j`` the lower
  median of the pool's scores, ``ybar_j`` its fitted value) and ``(1, 1)``.
  Pools are the maximal runs of equal fitted value.
"""

from __future__ import annotations

import functools

import flax.struct
import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from jaxcal._src import isotonic as iso
from jaxcal._src.recal.base import Recalibrator, prepare_fit, recalibrator_class, register, to_probs

__all__ = [
  "HistogramBinning",
  "IsotonicRecalibrator",
  "SmoothIsotonicRecalibrator",
  "fit_histogram",
  "fit_isotonic",
  "fit_smooth_isotonic",
  "normalize_rows",
]


def normalize_rows(q: jax.Array) -> jax.Array:
  """Divides each row by its sum; rows summing to 0 become uniform."""
  s = jnp.sum(q, axis=-1, keepdims=True)
  c = q.shape[-1]
  return jnp.where(s > 0, q / jnp.where(s > 0, s, 1), 1.0 / c)


def _finish(q: jax.Array, normalize: bool) -> jax.Array:
  return normalize_rows(q) if normalize else q


# ---------------------------------------------------------------------------
# Histogram binning


@recalibrator_class
@flax.struct.dataclass
class HistogramBinning(Recalibrator):
  """Class-wise histogram binning (right-continuous step maps).

  Attributes:
    thresholds: ``(C, m - 1)`` smallest calibration score of bins ``2..m``
      (an empty bin takes the next bin's value; ``+inf`` if none follows).
    values: ``(C, m)`` class frequency per bin.
    normalize: divide rows by their sums (static).
    num_classes: ``C`` (static).
  """

  method = "histogram"
  thresholds: jax.Array = None
  values: jax.Array = None
  normalize: bool = flax.struct.field(pytree_node=False, default=True)
  num_classes: int = flax.struct.field(pytree_node=False, default=0)

  def apply(self, inputs: jax.Array) -> jax.Array:
    p = to_probs(inputs, self.from_logits)
    th = self.thresholds.astype(p.dtype)
    idx = jax.vmap(
      lambda t, col: jnp.searchsorted(t, col, side="right"), in_axes=(0, 1), out_axes=1
    )(th, p)
    q = jax.vmap(lambda v, i: v[i], in_axes=(0, 1), out_axes=1)(self.values.astype(p.dtype), idx)
    return _finish(q, self.normalize)


def _hb_one(p: jax.Array, t: jax.Array, m: int):
  n = p.shape[0]
  key = iso._to_key(p)
  skey = jnp.sort(key)
  left = jnp.searchsorted(skey, key, side="left").astype(jnp.int32)
  right = jnp.searchsorted(skey, key, side="right").astype(jnp.int32)
  a = left + right - 1  # 2 * (average rank - 1)
  b = jnp.maximum((a * m + 2 * n - 1) // (2 * n), 1) - 1  # 0-based bin
  cnt = jax.ops.segment_sum(jnp.ones_like(t), b, num_segments=m)
  hits = jax.ops.segment_sum(t, b, num_segments=m)
  mins = jax.ops.segment_min(p, b, num_segments=m)  # +inf for empty bins
  values = jnp.where(cnt > 0, hits / jnp.where(cnt > 0, cnt, 1), 0)
  thresholds = jax.lax.cummin(jnp.where(cnt[1:] > 0, mins[1:], jnp.inf), reverse=True)
  return thresholds, values


@functools.partial(jax.jit, static_argnames=("m",))
def _fit_hb(p, onehot, m):
  return jax.vmap(lambda pc, tc: _hb_one(pc, tc, m), in_axes=(1, 1))(p, onehot)


@register("histogram")
def fit_histogram(
  inputs: ArrayLike,
  labels: ArrayLike,
  *,
  from_logits: bool = True,
  normalize: bool = True,
  num_bins: int = 15,
) -> HistogramBinning:
  """Class-wise histogram binning with equal-mass bins by rank.

  .. math::
    g_c(s) = \\frac{\\sum_{i \\in B_j} 1[y_i = c]}{|B_j|} \\text{ for }
    \\min_{i \\in B_j} p_i[c] \\le s < \\min_{i \\in B_{j+1}} p_i[c]

  Args:
    inputs: ``(n, C)`` logits (probabilities with ``from_logits=False``).
    labels: ``(n,)`` integer labels; every class must occur.
    from_logits: whether ``inputs`` are logits.
    normalize: divide rows by their sums (N-HB, default) or not (CW-HB).
    num_bins: number of equal-mass bins ``m`` (default 15).

  Returns:
    :class:`HistogramBinning`.

  Example:
    >>> import jax.numpy as jnp
    >>> p = jnp.array([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7], [0.4, 0.6]])
    >>> rc = fit_histogram(p, jnp.array([0, 1, 1, 1]), from_logits=False,
    ...                    normalize=False, num_bins=2)
    >>> [[round(v, 3) for v in row] for row in rc.values.tolist()]
    [[0.0, 1.0], [0.667, 1.0]]

  Reference: Zadrozny & Elkan (2001); Gupta & Ramdas (2022); the score
  decomposition case study, §3 (15 equal-mass bins, CW-HB / N-HB).
  """
  x, y = prepare_fit(
    inputs, labels, from_logits=from_logits, method="histogram", require_all_classes=True
  )
  m = int(num_bins)
  if m < 1 or m > x.shape[0]:
    raise ValueError(f"num_bins must be in [1, n = {x.shape[0]}], got {num_bins}")
  p = to_probs(x, from_logits)
  onehot = jax.nn.one_hot(y, p.shape[1], dtype=p.dtype)
  th, vals = _fit_hb(p, onehot, m)
  return HistogramBinning(
    thresholds=th,
    values=vals,
    normalize=bool(normalize),
    num_classes=int(p.shape[1]),
    from_logits=from_logits,
  )


# ---------------------------------------------------------------------------
# Isotonic regression


@recalibrator_class
@flax.struct.dataclass
class IsotonicRecalibrator(Recalibrator):
  """Class-wise isotonic step maps (left-continuous, constant outside the data).

  Attributes:
    x: ``(C, n)`` sorted calibration scores per class.
    y: ``(C, n)`` fitted values at ``x``.
    normalize: divide rows by their sums (static).
    num_classes: ``C`` (static).
  """

  method = "isotonic"
  x: jax.Array = None
  y: jax.Array = None
  normalize: bool = flax.struct.field(pytree_node=False, default=True)
  num_classes: int = flax.struct.field(pytree_node=False, default=0)

  def apply(self, inputs: jax.Array) -> jax.Array:
    p = to_probs(inputs, self.from_logits)
    q = jax.vmap(
      lambda xs, ys, col: iso.isotonic_predict(iso.IsotonicFit(xs, ys), col),
      in_axes=(0, 0, 1),
      out_axes=1,
    )(self.x.astype(p.dtype), self.y.astype(p.dtype), p)
    return _finish(q, self.normalize)


@jax.jit
def _fit_ir(p, onehot):
  core = jax.vmap(iso.isotonic_fit_sorted, in_axes=(1, 1))(p, onehot)
  return core.sorted_x, core.sorted_fit


@register("isotonic")
def fit_isotonic(
  inputs: ArrayLike, labels: ArrayLike, *, from_logits: bool = True, normalize: bool = True
) -> IsotonicRecalibrator:
  """Class-wise isotonic regression (PAV), optionally normalised.

  .. math:: g_c = \\arg\\min_{g \\uparrow} \\sum_i (1[y_i = c] - g(p_i[c]))^2

  Args:
    inputs: ``(n, C)`` logits (probabilities with ``from_logits=False``).
    labels: ``(n,)`` integer labels; every class must occur.
    from_logits: whether ``inputs`` are logits.
    normalize: divide rows by their sums (N-IR, default) or not (CW-IR).

  Returns:
    :class:`IsotonicRecalibrator`.

  Example:
    >>> import jax.numpy as jnp
    >>> p = jnp.array([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7], [0.4, 0.6]])
    >>> rc = fit_isotonic(p, jnp.array([0, 1, 1, 1]), from_logits=False, normalize=False)
    >>> rc(jnp.array([[0.85, 0.15], [0.5, 0.5]])).tolist()
    [[1.0, 1.0], [0.0, 1.0]]

  Reference: Zadrozny & Elkan (2002); the score decomposition case study, §2.2.
  """
  x, y = prepare_fit(
    inputs, labels, from_logits=from_logits, method="isotonic", require_all_classes=True
  )
  p = to_probs(x, from_logits)
  onehot = jax.nn.one_hot(y, p.shape[1], dtype=p.dtype)
  xs, ys = _fit_ir(p, onehot)
  return IsotonicRecalibrator(
    x=xs, y=ys, normalize=bool(normalize), num_classes=int(p.shape[1]), from_logits=from_logits
  )


# ---------------------------------------------------------------------------
# Smoothed isotonic regression


@recalibrator_class
@flax.struct.dataclass
class SmoothIsotonicRecalibrator(Recalibrator):
  """Class-wise piecewise-linear maps through pool medians (App. B of the case study).

  Attributes:
    knots_x: ``(C, n + 2)`` knots ``0, m_1, ..., m_k, 1`` (padded with 1).
    knots_y: ``(C, n + 2)`` values ``0, ybar_1, ..., ybar_k, 1`` (padded with 1).
    normalize: divide rows by their sums (static).
    num_classes: ``C`` (static).
  """

  method = "smooth_isotonic"
  knots_x: jax.Array = None
  knots_y: jax.Array = None
  normalize: bool = flax.struct.field(pytree_node=False, default=True)
  num_classes: int = flax.struct.field(pytree_node=False, default=0)

  def apply(self, inputs: jax.Array) -> jax.Array:
    p = to_probs(inputs, self.from_logits)
    q = jax.vmap(jnp.interp, in_axes=(1, 0, 0), out_axes=1)(
      p, self.knots_x.astype(p.dtype), self.knots_y.astype(p.dtype)
    )
    return _finish(q, self.normalize)


def _sir_knots(sorted_x: jax.Array, sorted_fit: jax.Array):
  n = sorted_x.shape[0]
  pid, start, end = iso.pools(sorted_fit)
  num = pid[-1] + 1
  med = (start + end) // 2  # lower median position of each pool
  j = jnp.arange(n)
  kx = jnp.where(j < num, sorted_x[med], 1)
  ky = jnp.where(j < num, sorted_fit[med], 1)
  one = jnp.ones((1,), sorted_x.dtype)
  return (
    jnp.concatenate([0 * one, kx.astype(sorted_x.dtype), one]),
    jnp.concatenate([0 * one, ky.astype(sorted_x.dtype), one]),
  )


@jax.jit
def _fit_sir(p, onehot):
  core = jax.vmap(iso.isotonic_fit_sorted, in_axes=(1, 1))(p, onehot)
  return jax.vmap(_sir_knots)(core.sorted_x, core.sorted_fit)


@register("smooth_isotonic")
def fit_smooth_isotonic(
  inputs: ArrayLike, labels: ArrayLike, *, from_logits: bool = True, normalize: bool = True
) -> SmoothIsotonicRecalibrator:
  """Class-wise smoothed isotonic regression (SIR), optionally normalised.

  .. math::
    g_c = \\text{linear interpolation of } (0, 0), (m_1, \\bar y_1), \\dots,
    (m_k, \\bar y_k), (1, 1)

  with ``m_j`` the lower median of the scores in PAV pool ``j`` and
  ``ybar_j`` its fitted value. Strictly increasing on the data range, so it
  keeps distinct scores distinct (preserving discrimination).

  Args:
    inputs: ``(n, C)`` logits (probabilities with ``from_logits=False``).
    labels: ``(n,)`` integer labels; every class must occur.
    from_logits: whether ``inputs`` are logits.
    normalize: divide rows by their sums (N-SIR, default) or not (CW-SIR).

  Returns:
    :class:`SmoothIsotonicRecalibrator`.

  Example:
    >>> import jax.numpy as jnp
    >>> p = jnp.array([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7], [0.4, 0.6]])
    >>> rc = fit_smooth_isotonic(p, jnp.array([0, 1, 1, 1]), from_logits=False,
    ...                          normalize=False)
    >>> [round(v, 4) for v in rc(jnp.array([[0.65, 0.35]]))[0].tolist()]
    [0.5, 0.5]

  Reference: the score decomposition case study, §2.2 and App. B; Jiang et
  al. (2011) for the cubic variant.
  """
  x, y = prepare_fit(
    inputs, labels, from_logits=from_logits, method="smooth_isotonic", require_all_classes=True
  )
  p = to_probs(x, from_logits)
  onehot = jax.nn.one_hot(y, p.shape[1], dtype=p.dtype)
  kx, ky = _fit_sir(p, onehot)
  return SmoothIsotonicRecalibrator(
    knots_x=kx,
    knots_y=ky,
    normalize=bool(normalize),
    num_classes=int(p.shape[1]),
    from_logits=from_logits,
  )
