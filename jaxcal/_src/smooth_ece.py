"""Smooth ECE: kernel-smoothed calibration error with an automatic bandwidth.

Błasiok & Nakkiran (2023), "Smooth ECE: Principled Reliability Diagrams via
Kernel Smoothing", arXiv:2309.12236. For binary predictions ``f_i`` and
outcomes ``y_i`` the residuals ``r_i = f_i - y_i`` are smoothed with a
Gaussian kernel of width ``sigma`` reflected at 0 and 1 (§4), and

``smECE_sigma = ∫_0^1 |r̂_sigma(t)| δ̂_sigma(t) dt``

where ``r̂`` is the Nadaraya–Watson estimate of the residual and ``δ̂`` the
kernel density of the predictions, so that ``|r̂| δ̂ = |(1/n) Σ_i K(t, f_i) r_i|``.
The automatic bandwidth is the fixed point ``sigma* = smECE_sigma*`` (§5),
found by bisection on ``[0, 1]``.

The discretisation is exactly that of the authors' package ``relplot``
(1.0.3, ``relplot.metrics.smooth_ece`` / ``smECE``), so the numbers agree
with it:

* the samples are split linearly onto a grid of ``G = max(2000,
  round(20/sigma)) // 2 + 1`` points on ``[0, 1]`` (``smooth_round_to_grid``);
* the grid is extended by reflection at both ends (without repeating the end
  points) and correlated with ``G`` kernel taps ``φ_sigma(t_j - 1/2)``,
  ``t_j = j/(G-1)`` (for even ``G`` the taps are offset by half a grid step,
  as in ``relplot``);
* the smoothed grid is interpolated linearly at ``ev = max(round(10/sigma),
  200)`` evaluation points ``i/(ev-1)`` and ``smECE = Σ_i |A_r(t_i)| /
  Σ_i (A_1(t_i) + 10^-4)`` with ``A_v`` the smoothed sums of ``v``;
* the bandwidth search is ``relplot.metrics.search_param``: if ``1`` is not
  a fixed point, 10 bisection steps on ``[0, 1]`` keeping the upper end,
  ``sigma < 0.001`` counting as "below the fixed point" (``1`` never is one,
  as ``smECE < 1`` at every bandwidth, so jaxcal does not evaluate it).

Predictions at the ends. Because the reflection does not repeat the end
points, a prediction within a grid step of 0 or 1 keeps only about half of
its kernel mass inside ``[0, 1]`` (the paper's reflected kernel keeps all of
it: the image of 0 is 0 itself), and as the value is normalised by the total
smoothed density, such predictions weigh about half. On data saturated at
the ends the value then lies well above the integral: class-wise on CIFAR-10
ResNet-110 (72 % of the class probabilities below 1e-3) 0.00715 against
0.00552 (+30 %), top-label on CIFAR-10 logits × 3 (76 % of the confidences
1.0 in float32) 0.068 against 0.048 (+41 %); 500 predictions at exactly 1
beside 500 at 1/2 read 0.066 for the integral's 0.050, and 0.0495 once
they move by 1e-3. Ordinary top-label confidences differ by 1-3 %. jaxcal
keeps ``relplot``'s numbers, so that they compare with published ones.

Grid sizes depend on ``sigma``; here they are traced values under static
bounds (``G <= 5121`` for the automatic bandwidth, whose smallest possible
result is ``2/1024``), and the correlation runs as one FFT of static length,
so the whole search is one compiled function that also works under
``vmap``. Under ``vmap`` the batch shares the FFT length of its smallest
bandwidth, so a member's value can differ from its own call's by float32
rounding of the longer transform (about 2e-7 relative; a member NaN from bad
input counts as the smallest). Bandwidths below ``SMOOTH_ECE_MIN_BANDWIDTH`` (``1e-4``) are
refused: the grid would exceed ``G = 100,001`` points (an FFT of ``2**19``
points and ``10**5`` evaluation points per column; ``1e-7`` would need
``5.4e8``).
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcal._src import validation as V
from jaxcal._src.calibration_errors import (
  _binary_rows,
  _nothing,
  _run_top_label,
  _top_label,
  _weights_or_uniform,
)
from jaxcal._src.numerics import PRECISION, carry_like, lift, map_rows, segment_sum_accurate

__all__ = [
  "smooth_ece",
  "smooth_ece_bandwidth",
  "smooth_reliability",
  "SmoothReliability",
  "SMOOTH_ECE_MIN_AUTO_BANDWIDTH",
  "SMOOTH_ECE_MIN_BANDWIDTH",
]

#: Smallest bandwidth the automatic search can return (``relplot``: 10
#: halvings of ``[0, 1]``, with ``sigma < 0.001`` never evaluated).
SMOOTH_ECE_MIN_AUTO_BANDWIDTH = 2.0 / 1024.0

#: Smallest accepted bandwidth (and ``min_bandwidth``): the smoothing grid has
#: ``G = max(2000, round(20 / sigma)) // 2 + 1`` points, 100,001 at ``1e-4``
#: (an FFT of ``2**19`` points and ``10**5`` evaluation points per column).
SMOOTH_ECE_MIN_BANDWIDTH = 1e-4

_DENSITY_EPS = 1e-4  # relplot's BaseKernelMixin.smooth
_SEARCH_EPS = 1e-3  # relplot's smECE(eps=0.001)
_SEARCH_STEPS = 10  # relplot's search_param(refine=10)
_MODES = ("top_label", "classwise")


def _grid_points(sigma):
  """``G``, the smoothing grid size at bandwidth ``sigma`` (numpy or traced)."""
  if isinstance(sigma, (float, int, np.floating)):
    return max(2000, round(20.0 / float(sigma))) // 2 + 1
  r = jnp.round(20.0 / sigma).astype(jnp.int32)
  return jnp.maximum(2000, r) // 2 + 1


def _eval_points(sigma):
  """``ev``, the number of evaluation points at bandwidth ``sigma``."""
  if isinstance(sigma, (float, int, np.floating)):
    return max(round(10.0 / float(sigma)), 200)
  return jnp.maximum(jnp.round(10.0 / sigma).astype(jnp.int32), 200)


class _Sizes(NamedTuple):
  grid: int  # static bound on G
  evals: int  # static bound on ev
  fft: int  # FFT length (power of two >= 3 * grid - 2)


@functools.lru_cache(maxsize=64)
def _sizes(min_sigma: float) -> _Sizes:
  g = _grid_points(min_sigma)
  e = _eval_points(min_sigma)
  return _Sizes(int(g), int(e), 1 << math.ceil(math.log2(3 * g - 2)))


def _grid_sums(f, v, sigma, sizes: _Sizes):
  """relplot's histogram: ``(vals, G)``, each sample's ``v`` split linearly between its two
  grid points ``t_j = j/(G-1)`` (``(sizes.grid, k)``, zero beyond ``G``)."""
  dt = v.dtype
  g = _grid_points(sigma)
  x = f.astype(dt) * (g - 1).astype(dt)
  b = jnp.clip(jnp.floor(x).astype(jnp.int32), 0, g - 2)
  frac = (x - b.astype(dt))[:, None]
  # each sample split between its two grid points, summed without drift in n
  vals = segment_sum_accurate(
    jnp.stack([(1.0 - frac) * v, frac * v], axis=1), jnp.stack([b, b + 1], axis=1), sizes.grid
  )
  return vals, g


def _taps(d, g, sigma, dt):
  """The kernel's taps ``k(d) = phi(t_{G//2 - d} - 1/2)``, 0 outside ``d in [-(G-1-G//2), G//2]``
  (relplot's Gaussian, truncated at distance 1/2)."""
  half = g // 2
  ok = (d <= half) & (d >= -(g - 1 - half))
  tj = (half - d).astype(dt) / (g - 1).astype(dt)
  taps = jnp.exp(-((tj - 0.5) ** 2) / (2.0 * sigma**2)) / (math.sqrt(2.0 * math.pi) * sigma)
  return jnp.where(ok, taps, 0.0).astype(dt)


def _smoothed_grid(f, v, sigma, sizes: _Sizes):
  """Reflected-Gaussian smoothing of the columns ``v`` (n, k) on the grid, by one FFT.

  Returns ``(smoothed, G)``: ``(sizes.grid, k)`` values at ``t_j = j/(G-1)``
  for ``j < G`` (entries beyond ``G`` are garbage) and the traced ``G``. Each
  value carries the FFT's float32 round-off, about ``1e-7`` of the column's
  largest (see :func:`_smoothed_points` for values far below it).
  """
  vals, g = _grid_sums(f, v, sigma, sizes)
  # Extended signal E[e] = vals reflected at u = e - (G - 1), for e <= 3G - 3.
  e = jnp.arange(sizes.fft, dtype=jnp.int32)
  u = e - (g - 1)
  idx = jnp.where(u < 0, -u, jnp.where(u > g - 1, 2 * (g - 1) - u, u))
  ext = jnp.where((e <= 3 * g - 3)[:, None], vals[jnp.clip(idx, 0, sizes.grid - 1)], 0.0)
  # Kernel taps k(d), stored circularly at position d mod N.
  d = jnp.where(e <= g // 2, e, e - sizes.fft)
  taps = _taps(d, g, sigma, v.dtype)
  # corr[x] = sum_d E[x + d] k(d): a circular cross-correlation (no wrap-around
  # reaches the outputs x in [G - 1, 2G - 2] because N >= 3G - 2).
  spec = jnp.fft.rfft(ext, axis=0) * jnp.conj(jnp.fft.rfft(taps))[:, None]
  corr = jnp.fft.irfft(spec, n=sizes.fft, axis=0).astype(v.dtype)
  out = jax.lax.dynamic_slice_in_dim(corr, g - 1, sizes.grid, axis=0)
  return out, g


def _interp_weights(g, t, dt):
  """relplot's ``interpolate`` at ``t``: the grid index below each point and its weight."""
  gm1 = (g - 1).astype(dt)
  inds = jnp.clip(jnp.floor(t * gm1).astype(jnp.int32), 0, g - 2)
  return inds, ((t - inds.astype(dt) / gm1) * gm1)[:, None]


def _interpolate(smoothed, g, t):
  """relplot's ``interpolate``: linear interpolation of the grid at ``t``."""
  inds, res = _interp_weights(g, t, smoothed.dtype)
  return smoothed[inds] * (1.0 - res) + smoothed[inds + 1] * res


def _smoothed_points(f, v, sigma, sizes: _Sizes, t):
  """:func:`_interpolate` of :func:`_smoothed_grid` at the points ``t``, by direct sums.

  ``smoothed[j] = sum_i vals[i] (k(i - j) + k(-i - j) + k(2(G-1) - i - j))``
  (the reflections at 0 and 1; the last two only for ``i > 0`` and ``i <
  G - 1``), a sum of products with non-negative kernel weights: each value
  is accurate relative to itself, where the FFT's round-off is relative to the
  column's largest value. On two clusters of confidences with a gap between
  them, sums 1e-7 of the peak read as the FFT's noise (the accuracy there set
  to 0, relplot's 0.93). ``O(len(t) G)`` work, in blocks of rows.
  """
  dt = v.dtype
  vals, g = _grid_sums(f, v, sigma, sizes)
  inds, res = _interp_weights(g, t, dt)
  rows = jnp.concatenate([inds, inds + 1])
  block = max(1, min(rows.shape[0], (1 << 20) // sizes.grid))
  pad = -rows.shape[0] % block
  rows = jnp.pad(rows, (0, pad)).reshape(-1, block)
  i = jnp.arange(sizes.grid, dtype=jnp.int32)[None, :]

  def smooth(j):  # (block,) grid rows -> (block, k)
    j = j[:, None]
    w = _taps(i - j, g, sigma, dt)
    w += jnp.where(i > 0, _taps(-i - j, g, sigma, dt), 0.0)
    w += jnp.where(i < g - 1, _taps(2 * (g - 1) - i - j, g, sigma, dt), 0.0)
    return jnp.dot(jnp.where(i < g, w, 0.0), vals, precision=PRECISION)

  sm = jax.lax.map(smooth, rows).reshape(-1, vals.shape[1])
  m = t.shape[0]
  return sm[:m] * (1.0 - res) + sm[m : 2 * m] * res


#: The smallest FFT length any bandwidth needs (``G >= 1001``: ``3 G - 2 <= 4096``).
_MIN_FFT = 4096


@functools.lru_cache(maxsize=64)
def _buckets(sizes: _Sizes) -> tuple[_Sizes, ...]:
  """Static sizes for a 4096-point FFT and ``sizes`` itself, smallest first.

  Each bucket holds every bandwidth whose grid and evaluation points fit it
  (:func:`_bucket`): the small one every ``sigma >= 0.00733`` (``G <= 1366``).
  Each bucket is compiled as a branch of its own, so two, not one per power
  of two: the automatic top-label core compiles in 0.9 s (0.55 s with one
  size, 1.1-1.2 s with the 8192-point bucket too, 2 CPU cores).
  """
  if sizes.fft <= _MIN_FFT:
    return (sizes,)
  g = min(sizes.grid, (_MIN_FFT + 2) // 3)
  return (_Sizes(g, min(sizes.evals, g), _MIN_FFT), sizes)


@jax.custom_batching.custom_vmap
def _shared_bucket(i: jax.Array) -> jax.Array:
  """The bucket index ``i`` itself, and under ``vmap`` the largest over the batch.

  A ``lax.switch`` on a batched index runs every branch; on the batch's
  largest bucket (which holds every member's bandwidth) it runs one.
  """
  return i


@_shared_bucket.def_vmap
def _shared_bucket_rule(axis_size: int, in_batched: list, i: jax.Array) -> tuple[jax.Array, bool]:
  """The batch's largest index, unbatched; shared again by any enclosing ``vmap``.

  An empty batch (``axis_size == 0``) takes bucket 0: no member runs it.
  """
  return _shared_bucket(jnp.max(i, axis=0, initial=0) if in_batched[0] else i), False


def _bucket(sigma, buckets: tuple[_Sizes, ...]) -> jax.Array:
  """Index of the smallest bucket holding bandwidth ``sigma``'s grid (the last if none)."""
  sigma = jax.lax.stop_gradient(sigma)
  g, ev = _grid_points(sigma), _eval_points(sigma)
  small = [(3 * g - 2 > b.fft) | (g > b.grid) | (ev > b.evals) for b in buckets[:-1]]
  return _shared_bucket(sum(x.astype(jnp.int32) for x in small))


def _smece_at(f, r, w, sigma, sizes: _Sizes):
  """smECE at one (traced) bandwidth; ``w`` are the sample weights (0/1).

  Computed with the smallest static sizes that hold ``sigma`` (:func:`_buckets`):
  relplot's grid has 1001 points from ``sigma = 0.01`` up, where the FFT
  needs 4096 points, not the 16384 of the search's floor ``2/1024``
  (the automatic top-label smECE of 10^4 CIFAR-10 samples: 2.7 against 8.0 ms).
  """
  buckets = _buckets(sizes)
  if len(buckets) == 1:
    return _smece_sized(f, r, w, sigma, sizes)
  branches = [functools.partial(_smece_sized, sizes=b) for b in buckets]
  return jax.lax.switch(_bucket(sigma, buckets), branches, f, r, w, sigma)


def _smece_sized(f, r, w, sigma, sizes: _Sizes):
  """smECE at one (traced) bandwidth whose grid fits ``sizes``."""
  dt = r.dtype
  sm, g = _smoothed_grid(f, jnp.stack([r * w, w], axis=1), sigma, sizes)
  ev = _eval_points(sigma)
  i = jnp.arange(sizes.evals, dtype=jnp.int32)
  t = i.astype(dt) / (ev - 1).astype(dt)
  a = _interpolate(sm, g, t)
  keep = i < ev
  num = jnp.sum(jnp.where(keep, jnp.abs(a[:, 0]), 0.0))
  den = jnp.sum(jnp.where(keep, a[:, 1] + _DENSITY_EPS, 0.0))
  return num / den


def _auto(f, r, w, sizes: _Sizes):
  """``relplot.metrics.smECE``: fixed-point bandwidth by bisection; (smECE, sigma).

  One loop of ``_SEARCH_STEPS + 1`` evaluations (the bisection midpoints,
  then the final bandwidth), so the smoothing is compiled once. relplot's
  ``search_param`` first tests ``sigma = 1`` itself (``1 < smECE(1)``) and
  returns 1 if it passes; it never does, so that evaluation is skipped:
  ``|r| <= 1`` and the smoothing and interpolation weights are non-negative,
  so the numerator ``sum |smoothed r w|`` is at most the denominator's
  ``sum smoothed w``, to which ``_DENSITY_EPS`` per point is added: smECE < 1
  at every bandwidth.
  """
  dt = r.dtype
  lo = jnp.asarray(SMOOTH_ECE_MIN_AUTO_BANDWIDTH, dt)
  last = _SEARCH_STEPS

  def body(k, carry):
    start, end, _ = carry
    mid = (start + end) / 2
    alpha = jnp.where(k == last, start, mid)
    val = _smece_at(f, r, w, jnp.maximum(alpha, lo), sizes)
    ok = (alpha < _SEARCH_EPS) | (alpha < val)
    search = k < last
    start = jnp.where(search & ~ok, mid, start)
    end = jnp.where(search & ok, mid, end)
    return start, end, val

  init = carry_like((jnp.ones((), dt), jnp.zeros((), dt), jnp.zeros((), dt)), r)
  start, _, val = jax.lax.fori_loop(0, last + 1, body, init)
  return val, start


def _top_label_parts(c, z):
  """The one binary row of the top label: (confidence, confidence - correctness), ``(1, n)`` each."""
  return c[None], (c - z.astype(c.dtype))[None]


def _binary_parts(p, y, mode):
  """Rows of (score, residual score - outcome)."""
  if mode == "top_label":
    return _top_label_parts(*_top_label(p, y))
  f, b = _binary_rows(p, y, mode)
  return f, f - b


def _weights(r, where):
  """0/1 sample weights per row: a masked-out sample contributes nothing."""
  if where is None:
    return jnp.ones_like(r)
  return jnp.broadcast_to(where.astype(r.dtype), r.shape)


#: Rows (classes) smoothed at once; rows in batches and bandwidths one after another: a
#: ``vmap`` over all of them held an ``(n, 2, 2)`` split per row and bandwidth (448 MB of
#: compiled temporaries for the class-wise error at n = 10^5, C = 100, 5.2 GB for 20
#: bandwidths).
ROW_BATCH = 4


def _by_rows(fn, f, r, w):
  return map_rows(fn, f, r, w, batch_size=ROW_BATCH)


def _auto_rows(f, r, where, sizes):
  """(smECE, bandwidth) of each row of scores ``f`` and residuals ``r`` ``(rows, n)``."""
  return _by_rows(lambda a, b, c: _auto(a, b, c, sizes), f, r, _weights(r, where))


def _fixed_rows(f, r, sigma, where, sizes):
  """smECE of each row at each bandwidth of ``sigma`` ``(k,)``: ``(k, rows)``."""
  w = _weights(r, where)
  return jax.lax.map(
    lambda s: _by_rows(lambda a, b, c: _smece_at(a, b, c, s, sizes), f, r, w), sigma
  )


@functools.partial(jax.jit, static_argnames=("mode", "sizes"))
def _auto_core(p, y, where=None, *, mode, sizes):
  return _auto_rows(*_binary_parts(p, y, mode), where, sizes)


@functools.partial(jax.jit, static_argnames=("mode", "sizes"))
def _fixed_core(p, y, sigma, where=None, *, mode, sizes):
  return _fixed_rows(*_binary_parts(p, y, mode), sigma, where, sizes)


def _auto_value(p, y, w, where=None, *, sizes):
  """Class-wise smECE at the automatic bandwidth: the class rows weighted by ``w``."""
  vals, _ = _auto_core(p, y, where, mode="classwise", sizes=sizes)
  return jnp.sum(w * vals)


def _fixed_value(p, y, sigma, w, where=None, *, sizes):
  """Class-wise smECE at each bandwidth of ``sigma`` ``(k,)``: the class rows weighted by ``w``."""
  vals = _fixed_core(p, y, sigma, where, mode="classwise", sizes=sizes)
  return jnp.sum(vals * lift(w, vals.ndim), axis=1)


def _auto_top_label(c, z, where=None, *, sizes):
  """Top-label smECE at the automatic bandwidth, from ``c = max p`` and ``z`` (bool)."""
  return _auto_rows(*_top_label_parts(c, z), where, sizes)[0][0]


def _fixed_top_label(c, z, sigma, where=None, *, sizes):
  """Top-label smECE at each bandwidth of ``sigma`` ``(k,)``, from ``c`` and ``z`` (bool)."""
  return _fixed_rows(*_top_label_parts(c, z), sigma, where, sizes)[:, 0]


def _check_mode(mode: str) -> str:
  if mode not in _MODES:
    raise ValueError(f"mode must be one of {_MODES}, got {mode!r}")
  return mode


def _check_min_bandwidth(min_bandwidth):
  """``None`` or a validated static bound in ``[SMOOTH_ECE_MIN_BANDWIDTH, inf)``."""
  if min_bandwidth is None:
    return None
  if isinstance(min_bandwidth, jax.core.Tracer):
    raise ValueError("min_bandwidth must be a static Python float (it sizes the grid)")
  v = V.check_float_option(min_bandwidth, "min_bandwidth", positive=True)
  if v < SMOOTH_ECE_MIN_BANDWIDTH:
    raise ValueError(
      f"min_bandwidth = {v:g} is below the smallest supported bandwidth "
      f"{SMOOTH_ECE_MIN_BANDWIDTH:g} (the smoothing grid would exceed 100,001 points)"
    )
  return v


def _bandwidths(bandwidth, min_bandwidth):
  """Validated bandwidths as a flat array, the static grid bound, and a traced flag.

  Concrete bandwidths must be finite and ``>= max(min_bandwidth,
  SMOOTH_ECE_MIN_BANDWIDTH)``; traced ones come back with the flag
  ``isfinite(sigma) & (sigma >= bound)`` (per entry) to fold into the result.
  """
  if (
    bandwidth is None
    or isinstance(bandwidth, (bool, np.bool_, str, bytes))
    or getattr(bandwidth, "dtype", None) == np.bool_
  ):
    raise ValueError(f"bandwidth must be None or a finite number > 0, got {bandwidth!r}")
  min_bandwidth = _check_min_bandwidth(min_bandwidth)
  sig = V.as_float(bandwidth, "bandwidth")
  if V.is_concrete(sig):
    a = np.asarray(jax.device_get(sig)).ravel()  # bandwidths: a few numbers
    bad = a[~(np.isfinite(a) & (a > 0))]
    if bad.size:
      raise ValueError(f"bandwidth must be positive and finite, got {bad[:3]}")
    low = a.min() if a.size else a.dtype.type(1.0)
    # compared in the bandwidths' dtype: 1e-4 as float32 is 9.99999974e-05
    if low < a.dtype.type(SMOOTH_ECE_MIN_BANDWIDTH):
      raise ValueError(
        f"bandwidth {low:g} is below the smallest supported bandwidth "
        f"{SMOOTH_ECE_MIN_BANDWIDTH:g}: the smoothing grid would exceed 100,001 points"
      )
    if min_bandwidth is not None and low < a.dtype.type(min_bandwidth):
      raise ValueError(f"bandwidth {low:g} is below min_bandwidth = {min_bandwidth:g}")
    low = float(low)
    bound = low if min_bandwidth is None else min_bandwidth
    return sig, bound, None
  bound = SMOOTH_ECE_MIN_AUTO_BANDWIDTH if min_bandwidth is None else min_bandwidth
  good = jnp.isfinite(sig) & (sig > 0)  # checked mode raises the eager messages
  V.trace_check(jnp.all(good), "bandwidth must be positive and finite, got {s}", s=sig)
  V.trace_check(
    jnp.all(~good | (sig >= bound)),
    f"bandwidth {{s}} is below {bound:g}, the smallest a traced bandwidth may take "
    "(smooth_ece's min_bandwidth lowers it)",
    s=sig,
  )
  return sig, bound, jnp.isfinite(sig) & (sig >= bound)


@V.same_arguments
def smooth_ece(
  probs: ArrayLike,
  labels: ArrayLike,
  bandwidth: ArrayLike | None = None,
  *,
  mode: str = "top_label",
  class_weights: ArrayLike | None = None,
  min_bandwidth: float | None = None,
  from_logits: bool = False,
  where: ArrayLike | None = None,
) -> jax.Array:
  """Smooth ECE of Błasiok & Nakkiran, with their automatic bandwidth.

  ``smECE_sigma = ∫_0^1 |(1/n) Σ_i K_sigma(t, f_i) (f_i - y_i)| dt`` with the
  Gaussian kernel ``K_sigma`` reflected at 0 and 1, discretised exactly as
  the authors' ``relplot`` package does (see the module docstring: its
  reflection weighs predictions at exactly 0 or 1 about half, +30-41 % on
  data saturated at the ends). With
  ``bandwidth=None`` the bandwidth is the fixed point ``sigma* =
  smECE_sigma*`` found by ``relplot``'s bisection (``relplot.smECE``).

  ``mode="top_label"`` smooths the top-label confidences ``f_i = max p_i``
  against ``y_i = 1[argmax p_i = label_i]`` (relplot's
  ``multiclass_logits_to_confidences``); ``mode="classwise"`` computes the
  binary smooth ECE of every column ``p[:, c]`` against ``1[label = c]``
  (each with its own automatic bandwidth) and averages them with
  ``class_weights`` (default ``1/C``).

  Args:
    probs: ``(n, C)`` probabilities (logits with ``from_logits=True``).
    labels: ``(n,)`` integer labels.
    bandwidth: ``None`` (automatic), a finite float ``>= 1e-4``
      (``SMOOTH_ECE_MIN_BANDWIDTH``: smaller ones would need a smoothing
      grid of more than 100,001 points), or an array of them (one compiled
      call; the result has its shape). May be traced under a user's
      ``vmap``/``jit``, bounded below by ``min_bandwidth``.
    mode: ``"top_label"`` (default) or ``"classwise"``.
    class_weights: ``(C,)`` weights of the class-wise mean (default ``1/C``);
      ``mode="classwise"`` only (with the top label they raise).
    min_bandwidth: static lower bound on a traced ``bandwidth`` (sizes the
      smoothing grid; default: the smallest given bandwidth, or ``2/1024``
      when traced), a finite float ``>= 1e-4``; validated even with
      ``bandwidth=None`` (where it is unused). A traced bandwidth below it,
      or not finite, gives NaN.
    from_logits: treat ``probs`` as logits and apply a softmax first.
    where: optional ``(n,)`` bool mask; masked-out samples are treated as
      absent (``n`` is the number of ``True`` entries).

  Returns:
    Scalar, or an array shaped like ``bandwidth``.

  Raises:
    ValueError: bad probabilities or labels, a bandwidth that is not a
      finite number ``> 0`` (a bool, a string) or lies below ``1e-4`` or
      ``min_bandwidth``, a ``min_bandwidth`` that is not a finite number
      ``>= 1e-4``, an unknown ``mode``, or ``class_weights`` with
      ``mode="top_label"``.

  Example:
    >>> import jax.numpy as jnp
    >>> p = jnp.array([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4]])
    >>> y = jnp.array([0, 1, 1, 0])
    >>> round(float(smooth_ece(p, y, bandwidth=0.1)), 4)
    0.1812

  Reference: Błasiok & Nakkiran (2023), "Smooth ECE: Principled Reliability
  Diagrams via Kernel Smoothing", arXiv:2309.12236, §4 (Def. 4.1, reflected
  kernel) and §5 (automatic bandwidth).
  """
  mode = _check_mode(mode)
  _check_min_bandwidth(min_bandwidth)  # also with bandwidth=None: never silently ignored
  top = mode == "top_label"
  if top:
    V.check_unused(
      class_weights,
      "class_weights",
      "applies to mode='classwise' only (the top-label error has no classes to weigh)",
    )
  d = V.check_predictions(
    probs,
    labels,
    from_logits=from_logits,
    where=where,
    class_weights=class_weights,
    defer=True,
    borrow=top,
  )
  w = None if top else _weights_or_uniform(d)
  if bandwidth is None:
    sizes = _sizes(SMOOTH_ECE_MIN_AUTO_BANDWIDTH)
    if top:  # a host matrix is read in place, its top label a program of its own
      return _run_top_label(_auto_top_label, d, sizes=sizes)
    f = V.neutral_program(_auto_value, d.from_logits, sizes=sizes)
    out, _ = V.run_checked(d, f, d.scores, d.labels, d.where, w)
    return V.fold(out, d.ok)
  sig, bound, sig_ok = _bandwidths(bandwidth, min_bandwidth)
  shape = sig.shape
  flat = jnp.reshape(sig, (-1,)).astype(d.scores.dtype)
  if flat.size == 0:
    V.run_checked(d, _nothing, d.scores)  # the value checks still run
    return jnp.zeros(shape, d.scores.dtype)
  sigma = jnp.maximum(flat, bound)
  if top:
    out = _run_top_label(_fixed_top_label, d, sigma, sizes=_sizes(bound))
    return V.fold(out.reshape(shape), sig_ok)
  f = V.neutral_program(_fixed_value, d.from_logits, sizes=_sizes(bound))
  out, _ = V.run_checked(d, f, d.scores, d.labels, d.where, sigma, w)
  return V.fold(out.reshape(shape), V.both_ok(sig_ok, d.ok))


@V.same_arguments
def smooth_ece_bandwidth(
  probs: ArrayLike,
  labels: ArrayLike,
  *,
  mode: str = "top_label",
  from_logits: bool = False,
  where: ArrayLike | None = None,
) -> jax.Array:
  """The automatic smooth-ECE bandwidth ``sigma*`` (the fixed point ``sigma = smECE_sigma``).

  ``relplot.smECE(f, y, return_width=True)[1]``: if ``1 >= smECE_1``, 10
  bisection steps on ``[0, 1]`` keeping the end above the fixed point.

  Args:
    probs: ``(n, C)`` probabilities (logits with ``from_logits=True``).
    labels: ``(n,)`` integer labels.
    mode: ``"top_label"`` (scalar result) or ``"classwise"`` (``(C,)``).
    from_logits: treat ``probs`` as logits.
    where: optional ``(n,)`` bool mask; masked-out samples are treated as
      absent (the bandwidth :func:`smooth_ece` uses with the same ``where``).

  Returns:
    Scalar (top label) or ``(C,)`` bandwidths, multiples of ``1/1024``; NaN
    under ``jit`` / ``vmap`` for invalid probabilities or labels.

  Raises:
    ValueError: bad probabilities or labels, or an unknown ``mode``.

  Example:
    >>> import jax.numpy as jnp
    >>> p = jnp.array([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4]])
    >>> float(smooth_ece_bandwidth(p, jnp.array([0, 1, 1, 0]))) * 1024
    142.0

  Reference: Błasiok & Nakkiran (2023), arXiv:2309.12236, §5.
  """
  mode = _check_mode(mode)
  d = V.check_predictions(probs, labels, from_logits=from_logits, where=where)
  p, y = d.neutral()  # masked-out rows: valid neutral values, weight 0
  _, sig = _auto_core(p, y, d.where, mode=mode, sizes=_sizes(SMOOTH_ECE_MIN_AUTO_BANDWIDTH))
  # the bisection's comparisons swallow NaN: the validity flag is folded in
  return V.fold(sig[0] if mode == "top_label" else sig, d.ok)


#: Most points of a smooth reliability curve's mesh (:func:`smooth_reliability`): a
#: diagram's grid, whose sums are ``(2 num_points, 3)``.
MAX_NUM_POINTS = 10**6


class SmoothReliability(NamedTuple):
  """The data of a smooth reliability diagram (top label).

  Attributes:
    mesh: ``(num_points,)`` points ``t`` on ``[0, 1]``.
    accuracy: ``(num_points,)`` kernel-smoothed ``E[y | f = t]``.
    density: ``(num_points,)`` kernel density of the confidences.
    bandwidth: ``()`` the bandwidth ``sigma`` used.
    smooth_ece: ``()`` smECE at that bandwidth.
  """

  mesh: jax.Array
  accuracy: jax.Array
  density: jax.Array
  bandwidth: jax.Array
  smooth_ece: jax.Array


@functools.partial(jax.jit, static_argnames=("num_points", "sizes"))
def _reliability_core(p, y, where, sigma, *, num_points, sizes):
  f, r = _binary_parts(p, y, "top_label")
  f, r = f[0], r[0]
  w = _weights(r, where)  # a masked-out sample weighs 0 in every sum
  z = f - r
  t = jnp.arange(num_points, dtype=p.dtype) / (num_points - 1)
  # direct sums, each accurate relative to itself: the FFT's round-off (~1e-7 of
  # the peak) read as an accuracy of 1.0 where no confidence lies (CIFAR-10,
  # confidence 0.03; relplot's is 0), and zeroing sums below it read 0 at the
  # edges of clusters (relplot's 0.93)
  a = _smoothed_points(f, jnp.stack([z * w, w, w / jnp.sum(w)], axis=1), sigma, sizes, t)
  acc = jnp.clip(a[:, 0] / (a[:, 1] + _DENSITY_EPS), 0.0, 1.0)
  return t, acc, a[:, 2], _smece_at(f, r, w, sigma, sizes)  # sums of non-negative terms


@V.same_arguments
def smooth_reliability(
  probs: ArrayLike,
  labels: ArrayLike,
  bandwidth: float | None = None,
  *,
  num_points: int = 200,
  from_logits: bool = False,
  where: ArrayLike | None = None,
) -> SmoothReliability:
  """Kernel-smoothed top-label reliability curve and confidence density.

  ``accuracy(t) = Σ_i K(t, f_i) y_i / (Σ_i K(t, f_i) + 10^-4)`` and
  ``density(t) = (1/n) Σ_i K(t, f_i)`` (sums over the samples ``where``
  selects, ``n`` their count) with relplot's reflected Gaussian
  kernel at the automatic smooth-ECE bandwidth (relplot's
  ``prepare_rel_diagram`` main line without bootstrap bands; its reflection
  gives predictions at exactly 0 or 1 about half their density, see the
  module docstring). The sums at
  the ``num_points`` points are direct sums over relplot's grid, each
  accurate relative to itself, so the accuracy is relplot's also where the
  density is small: 0 where no confidence lies, and the ratio at the edges
  of clusters (an FFT's float32 round-off, ~1e-7 of the peak, read 1.0 at
  confidence 0.03 on CIFAR-10, and zeroing it read 0 where relplot's is
  0.93). The accuracy is clipped to ``[0, 1]``.

  Args:
    probs: ``(n, C)`` probabilities (logits with ``from_logits=True``).
    labels: ``(n,)`` integer labels.
    bandwidth: kernel width, a finite float ``>= 1e-4`` (default:
      :func:`smooth_ece_bandwidth`).
    num_points: mesh size (static).
    from_logits: treat ``probs`` as logits.
    where: optional ``(n,)`` bool mask; masked-out samples are treated as
      absent (the curve, density, bandwidth and smECE of the selected
      samples, as :func:`smooth_ece` with the same ``where``).

  Returns:
    :class:`SmoothReliability`. Under ``jit`` / ``vmap``, invalid
    probabilities or labels (or a bad traced bandwidth) make every field but
    the mesh NaN, the automatic bandwidth included.

  Raises:
    ValueError: bad probabilities or labels, a bandwidth that is not a
      finite scalar ``>= 1e-4``, or ``num_points`` not an int in ``[2,
      10**6]`` (checked first).

  Example:
    >>> import jax.numpy as jnp
    >>> p = jnp.array([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4]])
    >>> s = smooth_reliability(p, jnp.array([0, 1, 1, 0]), 0.1, num_points=5)
    >>> s.mesh.tolist()
    [0.0, 0.25, 0.5, 0.75, 1.0]

  Reference: Błasiok & Nakkiran (2023), arXiv:2309.12236, §6 (reliability
  diagrams).
  """
  # numpy ints too; 10**9 points asked XLA for 36 GB, 2**40 raised a raw OverflowError
  num_points = V.check_int_option(
    num_points, "num_points", minimum=2, maximum=MAX_NUM_POINTS, hint="a mesh for a diagram"
  )
  d = V.check_predictions(probs, labels, from_logits=from_logits, where=where)
  p, y = d.neutral()  # masked-out rows: valid neutral values, weight 0
  ok = None
  if bandwidth is None:
    _, sig = _auto_core(
      p, y, d.where, mode="top_label", sizes=_sizes(SMOOTH_ECE_MIN_AUTO_BANDWIDTH)
    )
    sigma = sig[0]
    sizes = _sizes(SMOOTH_ECE_MIN_AUTO_BANDWIDTH)
  else:
    s, bound, ok = _bandwidths(bandwidth, None)
    if s.ndim != 0:
      raise ValueError(f"bandwidth must be a scalar here, got shape {tuple(s.shape)}")
    sigma, sizes = s.astype(p.dtype), _sizes(bound)
  t, acc, dens, ce = _reliability_core(p, y, d.where, sigma, num_points=num_points, sizes=sizes)
  # the mesh does not depend on the data; everything else is NaN for bad input
  curves = V.fold((acc, dens, sigma, ce), V.both_ok(ok, d.ok))
  return SmoothReliability(t, *curves)
