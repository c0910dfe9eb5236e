"""Local calibration: the class-wise LCE / MLCE, the Gaussian kernel and the
Nadaraya–Watson estimate.

The metric of Barbera et al. (2025, arXiv:2510.26566), §3 and App. D.3, as
their code computes the reported numbers; the LoCal Net loss
(:mod:`jaxcal._src.recal.local_net`) imports the kernel and the estimator
from here, so both use one definition,

    k_gamma(a, b) = exp(-||a - b||^2 / (2 gamma^2)),

and the Nadaraya–Watson weights ``w_ij = k(phi_i, phi_j) / sum_l k(phi_i, phi_l)``.

**Blockwise kernel.** For each class ``c`` the samples are sorted by their bin
of ``p[:, c]``, so every bin is a contiguous run of the sorted order. Anchors
are processed in fixed-size blocks of the sorted order; for one anchor block
only the candidate blocks that overlap the bins of its anchors are visited
(a ``fori_loop`` with data-dependent bounds, static shapes everywhere), and
the kernel between anchors and candidates is masked to equal bins. Memory is
``O(block_size * candidate_block + n * D)`` (also for an array of bin
counts: they run one after another); work is ``O(sum_b |b|^2 D)`` plus
the block rounding, never ``n^2`` beyond one bin. Squared distances use
``|a|^2 + |b|^2 - 2 a.b`` on median-centred features (one matmul per block),
clamped at 0. The anchor's own distance is rounding noise in that form
(about ``eps ||phi||^2``), which a small bandwidth would turn into a kernel
of 0 and an error of 0: its kernel is set to exactly 1, in the candidate
block that holds the anchors (computed first, outside the loop, so that the
other blocks pay nothing for it).

This module never imports training code or recalibrators.
"""

from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcal._src import binning as B
from jaxcal._src import validation as V
from jaxcal._src.calibration_errors import _class_weights_ok
from jaxcal._src.numerics import PRECISION
from jaxcal._src.sorting import float_to_key, key_to_float, sort_rows

__all__ = [
  "LocalCalibration",
  "lce",
  "nadaraya_watson",
  "gaussian_log_kernel",
  "squared_distances",
  "feature_centre",
  "MLCE_MODES",
]

#: Values of ``lce(..., mlce=...)``: the paper's prior-weighted mean of the
#: per-class maxima, or the single largest local error.
MLCE_MODES = ("weighted", "global")


class LocalCalibration(NamedTuple):
  """``(lce, mlce)``: the local calibration error and the maximal local calibration error.

  Attributes:
    lce: ``()`` LCE, the prior-weighted mean over classes of each class's
      mean local error.
    mlce: ``()`` MLCE, with ``mlce="weighted"`` (the default, the paper's)
      the prior-weighted mean over classes of each class's largest local
      error, not the largest error overall; with ``mlce="global"`` the
      largest local error of any class.
  """

  lce: jax.Array
  mlce: jax.Array


# --------------------------------------------------------------------------
# Kernel and Nadaraya–Watson (shared with the LoCal Net loss).
# --------------------------------------------------------------------------


def squared_distances(
  a: jax.Array,
  b: jax.Array,
  a_sq: jax.Array | None = None,
  b_sq: jax.Array | None = None,
  *,
  snap: float = 0.0,
) -> jax.Array:
  """All squared Euclidean distances ``||a_i - b_j||^2``, ``(na, nb)``.

  Computed as ``|a|^2 + |b|^2 - 2 a.b`` (one matrix product) and clamped at 0;
  centre the features first when their norms are large. ``a_sq`` / ``b_sq``
  are the precomputed squared row norms, when the caller has them. The form
  resolves distances only down to a few ``eps * (|a|^2 + |b|^2)``: exact
  copies come out as rounding noise of that size, not 0. With ``snap > 0`` an
  entry at most ``snap * (|a_i|^2 + |b_j|^2)`` whose two squared norms are
  bit-identical (as an exact copy's are) is set to 0, so exact copies are at
  distance 0. Distinct points keep the form's own distance: snapping every
  entry below that bound zeroed whole tight clusters far from the origin
  (50-d clusters at +-1000 e_1: LCE 17 % off float64 at ``gamma = 1``).

  Args:
    a: ``(na, D)`` points.
    b: ``(nb, D)`` points.
    a_sq: optional ``(na,)`` squared norms of ``a``.
    b_sq: optional ``(nb,)`` squared norms of ``b``.
    snap: relative resolution below which a distance is 0 (default 0: off).

  Returns:
    ``(na, nb)`` squared distances, ``>= 0``.

  Example:
    >>> import jax.numpy as jnp
    >>> squared_distances(jnp.array([[0.0, 0.0]]), jnp.array([[3.0, 4.0], [0.0, 1.0]])).tolist()
    [[25.0, 1.0]]
  """
  a_sq = jnp.sum(a * a, axis=-1) if a_sq is None else a_sq
  b_sq = jnp.sum(b * b, axis=-1) if b_sq is None else b_sq
  norms = a_sq[:, None] + b_sq[None, :]
  d2 = norms - 2.0 * jnp.matmul(a, b.T, precision=PRECISION)
  if snap:
    copy = (a_sq[:, None] == b_sq[None, :]) & (d2 <= snap * norms)
    return jnp.where(copy, 0.0, jnp.maximum(d2, 0.0))
  return jnp.maximum(d2, 0.0)


def feature_centre(f: jax.Array, keep: jax.Array | None = None) -> jax.Array:
  """The per-feature median of the rows (of those with ``keep``), the point features are centred on.

  .. math::
    c_d = \\operatorname{median}_{i : \\text{keep}_i} \\phi_{id}

  :func:`squared_distances` resolves a distance only to a few ``eps (|a -
  c|^2 + |b - c|^2)``, so the centre must sit among the data, not be pulled
  away by a few outlying rows: with the mean, one feature row at ``1e10``
  among 299 standard-normal ones moved ``c`` by ``3e7`` and every other
  distance was rounding noise (LCE 8 % and MLCE 18 % off float64); the median
  does not move. Distances do not depend on ``c``, so no gradient flows
  through it (``stop_gradient``).

  Args:
    f: ``(n, D)`` features.
    keep: optional ``(n,)`` bool, the rows to take the median of (all: ``None``).

  Returns:
    ``(1, D)`` the centre (0 when no row is kept).

  Example:
    >>> import jax.numpy as jnp
    >>> feature_centre(jnp.array([[0.0], [1.0], [2.0], [1e10]])).tolist()
    [[1.5]]
  """
  n = f.shape[0]
  f = jax.lax.stop_gradient(f)
  if keep is None:
    k = n
  else:
    f = jnp.where(keep[:, None], f, jnp.inf)  # kept rows sort first
    k = jnp.sum(keep, dtype=jnp.int32)
  # integer keys sort ~6x faster than floats on XLA:CPU (10^4 x 50: 19 against 120 ms)
  keys = sort_rows(float_to_key(f.T))  # (D, n)
  lo = key_to_float(keys[:, jnp.clip((k - 1) // 2, 0, n - 1)]).astype(f.dtype)
  hi = key_to_float(keys[:, jnp.clip(k // 2, 0, n - 1)]).astype(f.dtype)
  centre = jnp.where(k > 0, lo + (hi - lo) / 2, 0.0)
  return centre[None, :]


def gaussian_log_kernel(
  a: jax.Array,
  b: jax.Array,
  bandwidth: ArrayLike,
  a_sq: jax.Array | None = None,
  b_sq: jax.Array | None = None,
  *,
  snap: float = 0.0,
) -> jax.Array:
  """Log of the Gaussian kernel for all pairs, ``(na, nb)``.

  ``log k(a_i, b_j) = -||a_i - b_j||^2 / (2 gamma^2)``, the kernel of the
  local calibration error and of the LoCal Net loss.

  Args:
    a: ``(na, D)`` points.
    b: ``(nb, D)`` points.
    bandwidth: ``gamma > 0``.
    a_sq: optional ``(na,)`` squared norms of ``a``.
    b_sq: optional ``(nb,)`` squared norms of ``b``.
    snap: relative resolution of the distances (:func:`squared_distances`).

  Returns:
    ``(na, nb)`` log-kernel values, ``<= 0``.

  Example:
    >>> import jax.numpy as jnp
    >>> gaussian_log_kernel(jnp.zeros((1, 2)), jnp.array([[2.0, 0.0]]), 2.0).tolist()
    [[-0.5]]

  Reference: Barbera, Perini, De Toni, Passerini & Pugnana (2025),
  "Multiclass Local Calibration with the Jensen-Shannon Distance",
  arXiv:2510.26566, §4 (Eq. 2: "a kernel function k with bandwidth γ") and
  App. D.3; the Gaussian form ``exp(-||a - b||^2 / (2 γ^2))`` is the
  authors' code's (the paper names no kernel).
  """
  d2 = squared_distances(a, b, a_sq, b_sq, snap=snap)
  return -d2 / (2.0 * jnp.asarray(bandwidth, d2.dtype) ** 2)


@V.same_arguments
def nadaraya_watson(
  features: ArrayLike,
  targets: ArrayLike,
  bandwidth: ArrayLike = 10.0,
  *,
  include_self: bool = False,
  mask: ArrayLike | None = None,
) -> jax.Array:
  """Nadaraya–Watson estimate of ``targets`` at every point of a set.

  ``theta_i = sum_{j != i} k(phi_i, phi_j) t_j / sum_{j != i} k(phi_i, phi_j)``
  with the Gaussian kernel ``k(a, b) = exp(-||a - b||^2 / (2 gamma^2))``
  (``j = i`` included when ``include_self``). The weights are a masked
  softmax of the log-kernel, so isolated points (all kernels underflowing in
  float32) still get exact weights, down to the ``gamma -> 0`` limit (the
  nearest neighbours' mean); a row with no admissible neighbour (the one
  selected point of a mask without ``include_self``) gets 0. Differentiable
  in ``features`` (the LoCal Net loss uses it on a batch of refined features
  ``phi'`` with one-hot labels as targets).

  A tool for a batch: it forms the dense ``(n, n)`` kernel, ``O(n^2)`` memory
  (400 MB of compiled temporaries at ``n = 10^4``, 3.6 GB at ``3 10^4``); for
  the local calibration error of a whole data set use :func:`lce`, whose
  memory is ``O(n D)``. Squared distances take the form ``|a|^2 + |b|^2 - 2
  a.b``, whose rounding grows like ``eps |phi|^2 / gamma^2``: on CIFAR-100
  logits as features the float32 estimates were 1e-4 from float64's at
  ``gamma = 0.3``, 1e-5 at 1 and 1e-6 at 3.

  Args:
    features: ``(n, D)`` features ``phi`` (finite, ``D >= 1``).
    targets: ``(n, d)`` values to smooth (e.g. one-hot labels ``Y``); only
      the rows selected by ``mask`` are read (and must be finite).
    bandwidth: kernel bandwidth ``gamma > 0``, at least ``sqrt`` of the
      smallest normal float (1.1e-19 in float32, so that ``gamma**2`` does not
      underflow).
    include_self: include ``j = i`` (the LCE metric's convention) or not
      (the paper's estimator, default).
    mask: optional ``(n,)`` bool; only points with ``mask[j]`` act as
      neighbours (e.g. padding rows of a batch are masked out). Every row
      still gets an estimate.

  Returns:
    ``(n, d)`` estimates ``theta``. Under ``jit`` / ``vmap``, bad values
    (non-finite features or selected targets, a bad bandwidth, an all-False
    mask) give NaN; a row whose kernels all overflow (``||phi_i - phi_j||^2 /
    (2 gamma^2)`` beyond the float range for every neighbour) gives NaN too.

  Raises:
    ValueError: features or targets of the wrong shape or with NaN/inf (in
      selected rows), a bad ``bandwidth`` (not a finite scalar ``> 0``, a
      bool, or too small), a ``mask`` that is not an ``(n,)`` bool array or
      selects nothing, a single point without ``include_self`` (no row
      would have a neighbour), or an ``(n, n)`` kernel of more than ``2^31 -
      1`` entries (``n > 46,340``; refused before it is allocated: ``n =
      300,000`` ran out of memory): use :func:`lce`, blockwise, for a whole
      data set.

  Example:
    >>> import jax.numpy as jnp
    >>> phi = jnp.array([[0.0], [0.1], [5.0]])
    >>> y = jnp.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    >>> nadaraya_watson(phi, y, bandwidth=1.0).round(3).tolist()
    [[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]]

  Reference: Barbera et al. (2025), arXiv:2510.26566, §4 Eq. (2) and §7
  (the Gaussian kernel is the authors' code's: the paper names none);
  Nadaraya (1964); Watson (1964).
  """
  # "no" was read as True and None as False: the other estimator, no error
  include_self = V.check_flag(include_self, "include_self")
  f = V.as_float(features, "features")
  t = V.as_float(targets, "targets")
  # one message for three problems read "must share n" for targets (300,) beside
  # features (300, 5), which do share n: say which rule is broken
  for name, a, shape in (("features", f, "(n, D)"), ("targets", t, "(n, d)")):
    if a.ndim != 2:
      hint = (
        "; one column of values is targets[:, None]" if name == "targets" and a.ndim == 1 else ""
      )
      raise ValueError(f"{name} must be 2-D {shape}, got shape {tuple(a.shape)}{hint}")
  if f.shape[0] != t.shape[0]:
    raise ValueError(
      f"features (n, D) and targets (n, d) must have the same number of rows n; got "
      f"{tuple(f.shape)} and {tuple(t.shape)}"
    )
  n = f.shape[0]
  if n == 0 or f.shape[1] == 0:
    raise ValueError(f"features must have shape (n, D) with n >= 1 and D >= 1, got {f.shape}")
  V.check_entries(
    n * n,
    f"the dense Nadaraya-Watson kernel (n, n) = ({n:,}, {n:,})",
    "nadaraya_watson is for a batch; for the local calibration error of a whole data set "
    "use jaxcal.metrics.lce (blockwise, O(n D) memory), or pass fewer points",
  )
  if n == 1 and not include_self:
    raise ValueError(
      "nadaraya_watson of a single point has no neighbour: pass include_self=True or more points"
    )
  wh = V.check_where(mask, n, "mask")
  g, g_ok = _check_bandwidth(bandwidth, f.dtype)
  ok = g_ok
  if wh is not None:
    t = jnp.where(wh[:, None], t, 0.0)  # unselected rows are never read (0 * NaN is NaN)
    if V.is_concrete(wh):
      with jax.ensure_compile_time_eval():  # a mask closed over by a user's jit: read now
        selects = bool(jax.device_get(jnp.any(wh)))  # a scalar
      if not selects:
        raise ValueError("mask selects no neighbours: at least one entry must be True")
    else:
      V.trace_check(jnp.any(wh), "mask selects no neighbours: at least one entry must be True")
      ok = V.both_ok(ok, jnp.any(wh))
  (f, t), _, _, vals_ok, _ = V.check_arrays({"features": f, "targets": t})
  out = _nw_jit(f, t, g, include_self=include_self, mask=wh)
  return V.fold(out, V.both_ok(ok, vals_ok))


def _overflow_scale(amax: jax.Array, dim: int, dtype: Any) -> jax.Array:
  """The power of two ``s`` to divide features by so that their kernel neither overflows
  nor underflows.

  Features so large that ``|a|^2 + |b|^2 - 2 a.b`` would overflow (``inf -
  inf = NaN``) are divided, with the bandwidth, by one power of two (exact:
  the kernel only depends on ``||a - b|| / gamma``), so that every term stays
  below ``max / 4``; features whose largest entry is below 1 are multiplied
  by one, to a largest entry in ``[1/2, 1)``, so that their squared
  distances stay normal numbers (at a scale of 1e-19 in float32 they
  underflowed while ``gamma^2`` did not: LCE 6 % off). ``s = 1`` for entries
  from 1 to ``4.6e18 / sqrt(D)`` in float32; the fit of other inputs is
  that of the scaled ones, exactly.

  Args:
    amax: the largest ``|phi_ij|`` of the features used, a scalar.
    dim: the feature dimension ``D``.
    dtype: the features' floating dtype.

  Returns:
    The scale ``s``, a power of two in ``dtype``.
  """
  limit = float(np.sqrt(float(jnp.finfo(dtype).max) / (16 * dim)))
  down = jnp.maximum(jnp.frexp(amax / limit)[1], 0)
  up = jnp.minimum(jnp.frexp(amax)[1], 0)  # amax / 2^up in [1/2, 1) (0 for amax = 0)
  return jnp.ldexp(jnp.ones((), dtype), jnp.where(amax < 1, up, down))


def _scaled_bandwidth(bandwidth: ArrayLike, scale: jax.Array, dtype: Any) -> jax.Array:
  """``gamma / s`` for features divided by ``s`` (:func:`_overflow_scale`), kept ``>= sqrt(tiny)``."""
  tiny = V.smallest_bandwidth(dtype, squared=True)
  return jnp.maximum(jnp.asarray(bandwidth, dtype) / scale, jnp.asarray(tiny, dtype))


def _nw_core(f, t, bandwidth, *, include_self=False, mask=None, queries=None):
  """Nadaraya–Watson without validation.

  ``queries`` ``(nq, D)`` (default: ``f`` itself) are the points where the
  estimate is taken; ``f`` / ``t`` are the neighbours. ``include_self``
  only applies when ``queries`` is None. A row without admissible
  neighbours gets 0; one whose admissible kernels all overflow to
  ``log k = -inf`` gets NaN.
  """
  amax = (
    jnp.max(jnp.abs(f))
    if queries is None
    else jnp.maximum(jnp.max(jnp.abs(f)), jnp.max(jnp.abs(queries)))
  )
  scale = _overflow_scale(amax, f.shape[1], f.dtype)
  f = f / scale
  bandwidth = _scaled_bandwidth(bandwidth, scale, f.dtype)
  centre = feature_centre(f)
  f = f - centre
  q = f if queries is None else queries / scale - centre
  logk = gaussian_log_kernel(q, f, bandwidth)
  ok = jnp.ones(logk.shape, bool)
  if queries is None and not include_self:
    ok = ok & ~jnp.eye(f.shape[0], dtype=bool)
  if mask is not None:
    ok = ok & jnp.asarray(mask, bool)[None, :]
  logk = jnp.where(ok, logk, -jnp.inf)
  m = jax.lax.stop_gradient(jnp.max(logk, axis=1, keepdims=True))
  m = jnp.where(jnp.isfinite(m), m, 0.0)  # no admissible neighbour, or all overflowed
  w = jnp.where(ok, jnp.exp(logk - m), 0.0)
  den = jnp.sum(w, axis=1, keepdims=True)
  out = jnp.matmul(w, t.astype(w.dtype), precision=PRECISION) / jnp.where(den > 0, den, 1.0)
  # Rows with admissible neighbours (O(n), from the mask) but zero total weight.
  count = f.shape[0] if mask is None else jnp.sum(jnp.asarray(mask, bool))
  if queries is None and not include_self:
    count = count - (1 if mask is None else jnp.asarray(mask, bool).astype(jnp.int32))
  has = jnp.reshape(jnp.asarray(count) > 0, (-1, 1))
  return jnp.where(has & (den <= 0), jnp.asarray(jnp.nan, out.dtype), out)


#: :func:`_nw_core` as one program: run op by op, an eager call was slower, and its masked
#: kernels' ``-inf`` fill tripped ``jax_debug_infs`` on valid input.
_nw_jit = jax.jit(_nw_core, static_argnames=("include_self",))


def _check_bandwidth(bandwidth: ArrayLike, dtype) -> tuple[jax.Array, jax.Array | None]:
  """The Gaussian bandwidth ``gamma`` in ``dtype`` and its traced validity flag.

  A finite scalar ``> 0`` (not a bool) with ``gamma**2`` a normal float
  (``gamma >= 1.1e-19`` in float32); raises on concrete values, returns the
  flag ``isfinite(gamma) & (gamma >= smallest)`` for traced ones.
  """
  return V.check_bandwidth(bandwidth, dtype, squared=True)


# --------------------------------------------------------------------------
# LCE / MLCE core.
# --------------------------------------------------------------------------


def _lce_one_class(
  s, r, keep, feats, sq, m, min_bin_size, bandwidth, *, max_bins, block_size, candidate_block
):
  """Per-anchor errors of one class: ``(e (n_pad,), valid (n_pad,))``.

  ``s``: (n,) scores p[:, c]; ``r``: (n,) residuals p[:, c] - 1[y = c];
  ``keep``: (n,) bool, the samples present (``where``); ``feats``: (n, D)
  centred features; ``sq``: (n,) their squared norms. Absent samples go to a
  sentinel bin ``max_bins`` after the real ones: they are neither anchors nor
  neighbours and do not count towards bin sizes. The anchor's own kernel is
  exactly 1 (its distance from ``|a|^2 + |b|^2 - 2 a.b`` is rounding noise,
  which a small bandwidth would turn into a kernel of 0 and an error of 0),
  and so is the kernel of an exact copy of the anchor: distances below the
  form's resolution, ``4 sqrt(D) eps (|a|^2 + |b|^2)``, between rows of
  bit-identical squared norms are 0 (:func:`squared_distances`' ``snap``).
  """
  n = s.shape[0]
  snap = 4.0 * math.sqrt(feats.shape[1]) * float(jnp.finfo(feats.dtype).eps)
  A, Bc = block_size, candidate_block
  # (n,) 0-based, sentinel last; the unchecked rule (the public bin_ids would check the
  # already-checked scores again, and in checked mode name them "scores")
  b = jnp.where(keep, B.fixed_bin_1based(s, m) - 1, max_bins)
  order = jnp.argsort(b, stable=True)
  counts = jax.ops.segment_sum(jnp.ones((n,), jnp.int32), b, num_segments=max_bins + 1)
  ends = jnp.cumsum(counts)
  starts = ends - counts
  kept = (counts > min_bin_size).at[max_bins].set(False)  # authors: <= min_bin_size skipped
  n_pad = -(-n // Bc) * Bc
  pad = n_pad - n
  bs = jnp.concatenate([b[order], jnp.full((pad,), max_bins, b.dtype)])
  fs = jnp.concatenate([feats[order], jnp.zeros((pad, feats.shape[1]), feats.dtype)])
  qs = jnp.concatenate([sq[order], jnp.zeros((pad,), sq.dtype)])
  rs = jnp.concatenate([r[order], jnp.zeros((pad,), r.dtype)])
  valid = kept[bs]  # (n_pad,): anchors in kept bins; padding and absent rows are not
  num_anchor_blocks = -(-n // A)

  def anchor_block(k):
    a0 = k * A
    fa = jax.lax.dynamic_slice_in_dim(fs, a0, A)
    qa = jax.lax.dynamic_slice_in_dim(qs, a0, A)
    ba = jax.lax.dynamic_slice_in_dim(bs, a0, A)
    va = jax.lax.dynamic_slice_in_dim(valid, a0, A)
    first = bs[a0]
    last = bs[jnp.minimum(a0 + A - 1, n - 1)]
    lo = starts[first] // Bc
    hi = (ends[last] + Bc - 1) // Bc
    hi = jnp.where(jnp.any(va), hi, lo + 1)  # no kept anchor: skip the loop
    jd = a0 // Bc  # the candidate block holding the anchors themselves, in [lo, hi)

    def body(j, carry, itself=False):
      num, den = carry
      c0 = j * Bc
      fc = jax.lax.dynamic_slice_in_dim(fs, c0, Bc)
      qc = jax.lax.dynamic_slice_in_dim(qs, c0, Bc)
      bc = jax.lax.dynamic_slice_in_dim(bs, c0, Bc)
      rc = jax.lax.dynamic_slice_in_dim(rs, c0, Bc)
      logk = gaussian_log_kernel(fa, fc, bandwidth, qa, qc, snap=snap)
      if itself:  # the anchor's own kernel is exactly 1
        same = (a0 + jnp.arange(A))[:, None] == (c0 + jnp.arange(Bc))[None, :]
        logk = jnp.where(same, 0.0, logk)
      kk = jnp.where(ba[:, None] == bc[None, :], jnp.exp(logk), 0.0)
      return num + jnp.matmul(kk, rc, precision=PRECISION), den + jnp.sum(kk, axis=1)

    zero = jnp.zeros((A,), fs.dtype)
    carry = body(jd, (zero, zero), itself=True)
    # the other candidate blocks, jd skipped (the mask above costs nothing there)
    num, den = jax.lax.fori_loop(
      lo, hi - 1, lambda t, c: body(t + (t >= jd).astype(t.dtype), c), carry
    )
    return jnp.abs(num / jnp.where(den > 0, den, 1.0))

  e = jax.lax.map(anchor_block, jnp.arange(num_anchor_blocks)).reshape(-1)
  e = jnp.concatenate([e, jnp.zeros((n_pad - e.shape[0],), e.dtype)])
  return jnp.where(valid, e, 0.0), valid


def _lce_core(
  p,
  y,
  m,
  feats,
  weights,
  min_bin_size,
  bandwidth,
  where=None,
  *,
  max_bins,
  block_size,
  candidate_block,
):
  """``(LCE, weighted MLCE, global MLCE, kept anchors)`` of one data set.

  ``where`` ``(n,)`` bool drops samples (an absent sample is treated as if it
  were not there). The errors are NaN when no class has a kept anchor (the
  count, int32, is 0), ``min_bin_size < 0`` or ``m`` outside ``[1,
  max_bins]`` (traced: the public function checks concrete values and folds
  the bandwidth's flag).
  """
  n, num_classes = p.shape
  dtype = p.dtype
  keep = jnp.ones((n,), bool) if where is None else jnp.asarray(where, bool)
  feats = feats.astype(dtype)
  amax = jnp.max(jnp.where(keep[:, None], jnp.abs(feats), 0.0))
  scale = _overflow_scale(amax, feats.shape[1], dtype)
  feats = feats / scale
  bandwidth = _scaled_bandwidth(bandwidth, scale, dtype)
  centre = feature_centre(feats, keep)
  feats = jnp.where(keep[:, None], feats - centre, 0.0)  # absent rows: 0, never NaN
  sq = jnp.sum(feats * feats, axis=1)
  resid = jnp.where(keep[:, None], p - jax.nn.one_hot(y, num_classes, dtype=dtype), 0.0)
  one = functools.partial(
    _lce_one_class, max_bins=max_bins, block_size=block_size, candidate_block=candidate_block
  )

  def per_class(c):
    e, valid = one(p[:, c], resid[:, c], keep, feats, sq, m, min_bin_size, bandwidth)
    cnt = jnp.sum(valid, dtype=jnp.int32)
    mean = jnp.sum(e) / jnp.maximum(cnt, 1).astype(dtype)
    return mean, jnp.max(e), cnt  # a class without kept anchors: 0, 0 (see lce)

  means, maxes, counts = jax.lax.map(per_class, jnp.arange(num_classes))
  kept = jnp.sum(counts)
  # checked mode raises what an eager call raises (NaN otherwise)
  V.trace_bin_count(m, max_bins)
  V.trace_check(min_bin_size >= 0, "min_bin_size must be an integer >= 0, got {k}", k=min_bin_size)
  V.trace_check(
    kept > 0,
    _nothing_kept("num_bins = {m}", "{k}", "{n}", where is not None),
    m=m,
    k=min_bin_size,
    n=jnp.sum(keep, dtype=jnp.int32),
  )
  good = (kept > 0) & (min_bin_size >= 0) & (m >= 1) & (m <= max_bins)
  out = (jnp.sum(weights * means), jnp.sum(weights * maxes), jnp.max(maxes))
  return (*V.fold(out, good), kept)


@functools.cache
def _compiled(batched: bool, **static):
  f = functools.partial(_lce_core, **static)  # (p, y, m, feats, w, min_bin_size, gamma, where)
  if batched:  # one bin count after another: O(n D) memory whatever their number (a vmap
    # held a sorted copy of the features per count, 88x the input for 200 counts at
    # n = 10^5, D = 64, and ran every count's loops to the largest count's bounds)
    core = f

    def f(p, y, ms, *args):
      return jax.lax.map(lambda m: core(p, y, m, *args), ms)

  return jax.jit(f)


@V.same_arguments
def lce(
  probs: ArrayLike,
  labels: ArrayLike,
  features: ArrayLike,
  num_bins: ArrayLike = 15,
  min_bin_size: int = 20,
  bandwidth: ArrayLike = 10.0,
  class_weights: ArrayLike | None = None,
  *,
  mlce: str = "weighted",
  max_bins: int | None = None,
  from_logits: bool = False,
  where: ArrayLike | None = None,
  block_size: int = 256,
  candidate_block: int = 1024,
) -> LocalCalibration:
  """Class-wise local calibration error LCE and maximum local calibration error MLCE.

  For each class ``c`` the column ``p[:, c]`` is cut into ``num_bins``
  equal-width bins of [0, 1] (bin of ``s``: ``clip(ceil(s m), 1, m)``); for
  every anchor ``i`` in a kept bin ``b``

      e_ic = | sum_{j in b} w_ij (p_jc - 1[y_j = c]) |,
      w_ij = k(phi_i, phi_j) / sum_{l in b} k(phi_i, phi_l),
      k(a, b) = exp(-||a - b||^2 / (2 gamma^2)),

  the anchor itself included among its neighbours. With ``pi`` the class
  weights,

      LCE  = sum_c pi_c LCE_c,        LCE_c = mean of e_ic over the kept anchors of c,
      MLCE = sum_c pi_c max_i e_ic    (``mlce="weighted"``, default),
      MLCE = max_{c, i} e_ic          (``mlce="global"``),

  The default MLCE is the quantity behind every MLCE the paper reports (its
  authors' code: per-class maxima, averaged with the class priors); the
  paper's §3 formula is a maximum over anchors of the ``l1`` error vector,
  whose class-wise analogue is ``mlce="global"``: a single order statistic
  over ``n C`` anchors, much noisier from one sample to the next (CIFAR-100
  ResNet-110, 1,500 test rows, logits as features, ``gamma = 1``: 0.878
  weighted against 0.9998 global).

  ``LCE_c`` is a mean over the kept anchors, as the authors' code computes
  it; the paper's §3 formula weights each kept bin by ``|B_b| / n``, so there
  dropped small bins pull LCE down (on CIFAR-10 and CIFAR-100 test subsets,
  the formula's value is 0.977-0.987 of this one).

  **Classes without kept bins.** A class none of whose bins holds more than
  ``min_bin_size`` samples has no anchors; it counts as ``LCE_c = max_i e_ic
  = 0`` and keeps its weight ``pi_c`` (the weights are not renormalised over
  the other classes). The paper does not say what to do (App. D.3 only says
  small bins are discarded); its §3 formula sums over the used bins with a
  fixed ``1/n``, where such a class is an empty sum, 0. On small data this
  pulls LCE towards 0: check that every class has bins of more than
  ``min_bin_size`` samples (e.g. with ``num_bins`` lower) before comparing.
  When *no* class has a kept anchor the errors are undefined: an eager call
  raises, and under ``jit`` / ``vmap`` the result is NaN.

  **Bin size rule.** A bin is kept only if it holds *more than*
  ``min_bin_size`` samples: bins with ``<= min_bin_size`` points are skipped,
  as in the authors' code. The paper's text (App. D.3) says bins with "fewer
  than 20 elements were discarded", which differs only for bins of exactly
  20 samples; pass ``min_bin_size=19`` for that reading.

  **Bin edges.** The edges are ``k / m`` as in the authors' code; a score
  exactly on an inner edge ``k / m`` falls in the bin below it here (the
  fixed rule of every binned error in jaxcal) and in the bin above it in the
  authors' code (``torch.bucketize(..., right=True)``). Only scores that
  equal an edge to the last bit are affected.

  The kernel is computed blockwise within bins (see the module docstring), so
  ``n = 50,000`` anchors never materialise an ``n x n`` matrix.

  Args:
    probs: ``(n, C)`` probabilities (logits with ``from_logits=True``).
    labels: ``(n,)`` integer labels.
    features: ``(n, D)`` features ``phi(x)`` (the paper: PCA-50 of the
      standardised penultimate features, fitted on the calibration split;
      for a LoCal Net, its refined features ``phi'``). Computed in the
      probabilities' dtype (at least float32): float64 features with float32
      probabilities are rounded to float32.
    num_bins: equal-width bins per class: a Python int, or an int array (one
      compiled call; the results then have its shape); under a user's
      ``jit``/``vmap`` it may be traced, bounded by ``max_bins``.
    min_bin_size: bins with ``<= min_bin_size`` samples are skipped (paper: 20).
    bandwidth: Gaussian kernel bandwidth ``gamma > 0`` (paper: 10), a finite
      scalar at least ``sqrt`` of the smallest normal float (1.1e-19 in
      float32, so that ``gamma**2`` does not underflow; below about
      ``sqrt(eps) * ||phi||`` the distances are float32 rounding: only the
      anchor itself and its exact copies keep their full weight, and the
      ``gamma -> 0`` limit is read from them).
    class_weights: ``(C,)`` weights ``pi``, class priors summing to 1
      (default uniform ``1/C``; the paper uses training-label priors,
      uniform on balanced data): finite, non-negative, with a positive sum,
      used as given, as every class-weighted metric in jaxcal uses them
      (not normalised): weights summing to ``s`` scale LCE and the default
      MLCE by ``s`` (``np.ones(C)`` gives ``C`` times the LCE; pass
      ``w / w.sum()``). ``mlce="global"`` does not read them.
    mlce: ``"weighted"`` (default, the authors' code's MLCE behind the
      paper's tables) or ``"global"`` (the single largest ``e_ic``).
    max_bins: static bound on the bin counts (needed for a traced
      ``num_bins``); default: the largest count rounded up to a power of
      two, so that counts 9 to 16 share one compiled program.
    from_logits: apply a softmax to ``probs`` first.
    where: optional ``(n,)`` bool mask of the samples to use: the others are
      neither anchors nor neighbours, nor counted in bin sizes (the LCE of
      the selected subset; their values are not checked).
    block_size: anchors per block (static; memory/speed only).
    candidate_block: neighbours per block (static; memory/speed only).

  Returns:
    :class:`LocalCalibration` ``(lce, mlce)``: scalars, or arrays shaped like
    ``num_bins`` (empty for an empty array). Under ``jit`` / ``vmap``, bad
    values (probabilities, labels, features, a bandwidth that is not finite
    and ``>= 1.1e-19``, ``min_bin_size < 0``, a bin count outside ``[1,
    max_bins]``) and a bin count leaving no kept anchor give NaN.
    Differentiable in forward mode (``jax.jvp``) only: its blocked loops over
    candidate neighbours have bounds that depend on the anchor block, which
    JAX cannot transpose (``jax.grad`` raises).

  Raises:
    ValueError: bad probabilities/labels, ``class_weights`` not ``(C,)``,
      finite, non-negative with a positive sum, features that are not ``(n, D)``
      with the same ``n`` and ``D >= 1`` or hold NaN/inf, a ``bandwidth``
      that is not a finite scalar ``> 0`` (or a bool, or below 1.1e-19 in
      float32), a ``min_bin_size`` that is not an integer ``>= 0`` (or,
      traced, not of an integer dtype), unknown
      ``mlce``, a traced ``num_bins`` without ``max_bins``, or no bin of
      any class holding more than ``min_bin_size`` samples (nothing to
      average: lower ``min_bin_size`` or ``num_bins``). ``block_size`` and
      ``candidate_block`` must be positive ints, ``candidate_block`` a
      multiple of ``block_size``, their ``(block_size, candidate_block)``
      kernel block and the features padded to a multiple of
      ``candidate_block`` at most ``2^31 - 1`` entries each (refused before
      anything is allocated: ``10^6`` each ran out of memory, ``2^40`` raised
      a raw ``OverflowError``). Values above ``n`` are allowed (one block) but
      buy nothing; they are not clamped, since another block shape rounds the
      sums differently (by an ulp).

  Example:
    >>> import jax, jax.numpy as jnp
    >>> k1, k2, k3 = jax.random.split(jax.random.key(0), 3)
    >>> p = jax.nn.softmax(jax.random.normal(k1, (200, 3)))
    >>> y = jax.random.categorical(k2, jnp.log(p))
    >>> phi = jax.random.normal(k3, (200, 5))
    >>> err, worst = lce(p, y, phi, num_bins=5, min_bin_size=10, bandwidth=1.0)
    >>> bool(0 <= err <= worst <= 1)
    True

  Reference: Barbera, Perini, De Toni, Passerini & Pugnana (2025),
  "Multiclass Local Calibration with the Jensen-Shannon Distance",
  arXiv:2510.26566, §3 (LCE, MLCE) and App. D.3 (class-wise variant); Luo et
  al. (2022), "Local calibration: metrics and recalibration", UAI, §3.
  """
  # the bound: max_bins, or the largest count rounded up to a power of two (one
  # program per octave, not per count); a traced count needs max_bins. Checked
  # before the data: raised inside a user's jit after the value checks of closed-over
  # data had run at compile time, the error left JAX's cache of that check program
  # broken for a later call under x64 (jax 0.10.2: "RuntimeProgramInputMismatch")
  bins = V.check_bins(num_bins, "fixed", max_bins)
  d = V.check_predictions(probs, labels, from_logits=from_logits, where=where)
  p, y = d.neutral()  # masked-out rows: uniform, label 0 (never NaN)
  # finite (selected rows), D >= 1
  f, f_ok = V.check_features_ok(features, p.shape[0], where=d.where)
  g, g_ok = _check_bandwidth(bandwidth, p.dtype)
  if mlce not in MLCE_MODES:
    raise ValueError(f"mlce must be one of {MLCE_MODES}, got {mlce!r}")
  if min_bin_size is None or isinstance(min_bin_size, (bool, np.bool_, str, bytes)):
    raise ValueError(f"min_bin_size must be an integer >= 0, got {min_bin_size!r}")
  if V.is_concrete(min_bin_size):
    mbs = np.asarray(min_bin_size)
    if (
      mbs.ndim != 0
      or not np.issubdtype(mbs.dtype, np.number)
      or np.iscomplexobj(mbs)
      or not np.isfinite(mbs)
      or mbs != np.round(mbs)
      or mbs < 0
    ):
      raise ValueError(f"min_bin_size must be an integer >= 0, got {min_bin_size!r}")
    # a count of at least n keeps nothing: clipped to the int32 range
    mbs_arg = jnp.asarray(min(int(mbs), np.iinfo(np.int32).max), jnp.int32)
  elif not jnp.issubdtype(jnp.result_type(min_bin_size), jnp.integer) or jnp.ndim(min_bin_size):
    # traced: the dtype is static; a float would be truncated to a plausible count
    raise ValueError(
      f"min_bin_size must be an integer scalar when traced, got "
      f"{jnp.result_type(min_bin_size)} of shape {jnp.shape(min_bin_size)}"
    )
  else:  # saturated to int32 in its own type (a cast wrapped int64 2**32 + 5 to 5)
    k = jnp.asarray(min_bin_size)
    info, i32 = jnp.iinfo(k.dtype), np.iinfo(np.int32)
    mbs_arg = jnp.clip(k, max(info.min, i32.min), min(info.max, i32.max)).astype(jnp.int32)
  for name, v in (("block_size", block_size), ("candidate_block", candidate_block)):
    if not isinstance(v, int) or v < 1:
      raise ValueError(f"{name} must be a positive int, got {v!r}")
  if candidate_block % block_size:
    raise ValueError(
      f"candidate_block ({candidate_block}) must be a multiple of block_size ({block_size})"
    )
  smaller = (
    f"pass a smaller block_size / candidate_block (memory/speed settings only: the defaults "
    f"256 / 1024, and never more than n = {p.shape[0]:,} is useful)"
  )
  V.check_entries(
    block_size * candidate_block,
    f"a kernel block (block_size, candidate_block) = ({block_size:,}, {candidate_block:,})",
    smaller,
  )
  n_pad = -(-p.shape[0] // candidate_block) * candidate_block
  V.check_entries(
    n_pad * f.shape[1], f"the padded features (n_pad, D) = ({n_pad:,}, {f.shape[1]:,})", smaller
  )
  w, w_ok = _class_weights_ok(class_weights, p.shape[1], p.dtype)
  m, mb = bins.m, bins.max_bins
  if isinstance(m, np.ndarray) and m.size == 0:  # as every binned metric: an empty result
    empty = jnp.zeros(m.shape, p.dtype)
    return LocalCalibration(empty, empty)
  args = (f, w, mbs_arg, g)
  static = dict(max_bins=mb, block_size=block_size, candidate_block=candidate_block)
  pick = 1 if mlce == "weighted" else 2
  batched = not (isinstance(m, int) or jnp.ndim(m) == 0)
  mm = jnp.reshape(m, (-1,)) if batched else jnp.asarray(m, jnp.int32)
  out = _compiled(batched, **static)(p, y, mm, *args, d.where)
  if V.is_concrete(out[3]):
    _raise_if_nothing_kept(out[3], m, min_bin_size, d.count, d.where is not None)
  shape = jnp.shape(m)
  # folded with the checks' flags: a NaN input does not reach MLCE, whose max over
  # 4,096 or more entries skips a NaN on XLA:CPU (it read 0 under jit)
  # (bad traced class weights too: MLCE "global" reads none of them)
  ok = V.both_ok(V.both_ok(d.ok, f_ok), V.both_ok(g_ok, w_ok))
  return V.fold(LocalCalibration(out[0].reshape(shape), out[pick].reshape(shape)), ok)


def _raise_if_nothing_kept(kept: jax.Array, m, min_bin_size, n: int, masked: bool = False) -> None:
  """Raises when some bin count leaves no class a kept anchor (one small read)."""
  kept = np.asarray(jax.device_get(kept)).reshape(-1)  # one int per bin count
  if kept.min() > 0:
    return
  bins = np.asarray(m).reshape(-1)[kept == 0]
  which = f"num_bins = {int(bins[0])}" if np.ndim(m) == 0 else f"num_bins in {bins.tolist()}"
  raise ValueError(_nothing_kept(which, int(np.asarray(min_bin_size)), n, masked))


def _nothing_kept(which: str, k: Any, n: Any, masked: bool) -> str:
  """The message of bin counts that keep no anchor (a template for checked mode)."""
  return (
    f"lce: with {which}, no bin of any class holds more than min_bin_size = {k} of the "
    f"n = {n} samples{' selected by where' if masked else ''}, so there is no anchor and "
    "LCE / MLCE are undefined. Lower min_bin_size, use fewer bins (num_bins), or pass "
    "more samples."
  )
