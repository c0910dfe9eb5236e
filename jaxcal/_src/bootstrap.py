"""Bootstrap intervals for any statistic, and consistency resampling.

A nonparametric bootstrap over *test samples*: each resample draws ``n`` of
the ``n`` samples with replacement (``resample_indices``), the statistic is
evaluated on every resample by ``jax.lax.map`` over batches of ``jax.vmap``
(one compiled program, which also evaluates the statistic on the full data),
and an interval is read from the resampled values:

* ``"percentile"`` (default): the ``α/2`` and ``1 − α/2`` quantiles of the
  resamples (Efron & Tibshirani 1993, §13.3).
* ``"bca"``: bias-corrected and accelerated percentile interval (Efron 1987;
  Efron & Tibshirani 1993, §14.3). The bias correction ``z0`` is the normal
  quantile of the fraction of resamples below the estimate; the acceleration
  ``a`` comes from a delete-a-group jackknife (the samples of each data set
  are split at random into ``jackknife_groups`` groups of equal size, the
  ``n mod G`` left over are always kept; with ``G = n`` it is the ordinary
  jackknife).
* ``"basic"``: ``2·estimate − (upper, lower quantile)`` (Davison & Hinkley
  1997, §5.2).
* ``"normal"``: ``estimate ± z_{1−α/2}·sd`` (what the truthful-calibration
  papers report as "±1.96 standard deviations").

Which to use. A binned ℓ1 error such as ConfECE is the mean of absolute
values of noisy bin sums: its resamples sit *above* the full-data value (the
estimator is biased upward, more so on a resample, which duplicates
samples), so ``estimate ± 1.96 sd`` is centred on the wrong place and its
lower end is often negative. The percentile interval follows the skewed,
shifted resampling distribution and never leaves the statistic's range; BCa
also corrects for the shift (``z0``) and the skew (``a``) at the price of a
jackknife, but when (nearly) every resample lies above the estimate ``z0``
is capped and the BCa interval collapses onto the smallest resamples. No
bootstrap interval removes the estimator's own bias: an interval describes
the sampling spread of the *estimate*, and where the upward bias of an ℓ1
error exceeds that spread (class-wise ECE with many bins and few samples)
none of the four covers the population value. ``basic`` reflects the shift
and covers more often there. ``experiments/bootstrap_coverage.py`` measures
the coverage of the four intervals on synthetic data with known truth
(``experiments/results/bootstrap_coverage*.json``). Percentile is the
default because it is the interval a reader can check against the
resamples, and it is exact for statistics without bias (the Brier score).

Consistency resampling (Bröcker & Smith 2007) is a different resampling: the
confidences are redrawn with replacement and each label is drawn from the
sample's own predicted distribution, so the result is the spread a
*calibrated* predictor with these confidences would show in a reliability
diagram (:func:`consistency_bands`).

Resample ``b`` of a data set uses the key ``jax.random.split(key, B)[b]``,
so the index sets never exist as a ``(B, n)`` array during the computation
(memory ``O(batch_size · n)``); :func:`resample_indices` materialises the
same index sets for checks.
"""

from __future__ import annotations

import functools
import inspect
import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import ndtr, ndtri
from jax.typing import ArrayLike

from jaxcal._src import validation as V
from jaxcal._src.numerics import map_batches

__all__ = [
  "BootstrapResult",
  "ConsistencyBands",
  "METHODS",
  "bootstrap",
  "consistency_bands",
  "interval",
  "resample_indices",
]

#: Interval methods of :func:`bootstrap`.
METHODS = ("percentile", "bca", "basic", "normal")

#: Most resamples of one call: the resamples and the estimate beside them are
#: numbered in int32 (2^31 resamples raised numpy's OverflowError deep inside).
MAX_RESAMPLES = 2**31 - 2


def _key_words(key: jax.Array) -> int:
  """uint32 words of one key of ``key``'s implementation (threefry 2, rbg 4)."""
  return int(jax.random.key_data(key).shape[-1])


#: Bytes of resampled inputs gathered per batch when ``batch_size`` is automatic.
_BATCH_BYTES = 1 << 27

#: Most resamples vmapped together when ``batch_size`` is automatic, per backend.
#: On XLA:CPU a batch of 8 compiles 1.5-2x faster than 64 and runs no slower
#: (bootstrap of ConfECE, Brier and CWE_bin, 200 resamples, n = 10,000, C = 100
#: on 2 cores: steady 1.55 s at 8 vs 2.05 s at 64, first call 3.9 s vs 5.7 s);
#: accelerators keep 64 resamples in flight.
_MAX_BATCH = {"cpu": 8}


def _auto_batch(per_resample_bytes: int, num_resamples: int) -> int:
  """Resamples per ``jax.lax.map`` batch when the caller gives none."""
  cap = _MAX_BATCH.get(jax.default_backend(), 64)
  return int(max(1, min(cap, num_resamples, _BATCH_BYTES // max(per_resample_bytes, 1))))


class BootstrapResult(NamedTuple):
  """Bootstrap summary; every field has the pytree structure of the statistic.

  Attributes:
    estimate: the statistic on the full data.
    sd: standard deviation of the resampled values (``ddof = 1``).
    lo: lower end of the interval.
    hi: upper end of the interval.
    samples: ``(num_resamples, ...)`` the statistic on each resample.
  """

  estimate: Any
  sd: Any
  lo: Any
  hi: Any
  samples: Any


def _check_confidence(confidence: Any) -> float:
  """``confidence`` as a float in ``(0, 1)``.

  A number only, as ``calibration_report`` takes it (``check_float_option``):
  ``float()`` let the string ``"0.9"`` through, and ``True`` read as 1.
  """
  c = V.check_float_option(confidence, "confidence")
  if not 0.0 < c < 1.0:
    raise ValueError(f"confidence must lie in (0, 1), e.g. 0.95; got {confidence!r}")
  return c


def _indices(key: jax.Array, n: int) -> jax.Array:
  return jax.random.randint(key, (n,), 0, n, dtype=jnp.int32)


def resample_indices(key: jax.Array, n: int, num_resamples: int) -> jax.Array:
  """Index sets of a nonparametric bootstrap: ``n`` draws with replacement.

  Resample ``b`` is ``randint(jax.random.split(key, num_resamples)[b], (n,),
  0, n)``: exactly the index sets :func:`bootstrap` uses for one data set
  (it generates them one batch at a time instead of storing them).

  Args:
    key: a ``jax.random`` key.
    n: number of samples (static).
    num_resamples: number of resamples ``B`` (static).

  Returns:
    ``(B, n)`` int32 indices, uniform on ``[0, n)``.

  Raises:
    ValueError: ``key`` is not a PRNG key (e.g. an int seed), ``n < 1`` or
      ``num_resamples < 1``, ``n > 2^31 - 1`` (the indices are int32; 2^31
      raised a raw ``OverflowError``), or index and key arrays ``(B, n)``
      and ``(B, w)`` (``w`` words per key: 2 for threefry) of more than
      ``2^31 - 1`` entries together (refused
      before they are allocated: they ran out of memory); :func:`bootstrap`
      draws the index sets one batch at a time instead.

  Example:
    >>> import jax
    >>> resample_indices(jax.random.key(0), 5, 3).shape
    (3, 5)

  Reference: Efron & Tibshirani (1993), *An Introduction to the Bootstrap*,
  §6.2 (Algorithm 6.1).
  """
  key = V.check_key(key)
  n = V.check_int(n, "n")
  num_resamples = V.check_int(num_resamples, "num_resamples", 1, MAX_RESAMPLES)
  V.check_entries(n, f"one resample's int32 indices (n,) = ({n:,},)", "pass a smaller n")
  _check_work(  # the (B, n) indices are returned whole, beside the (B, w) keys
    num_resamples,
    (n,),
    _key_words(key),
    "pass fewer resamples, or draw them in batches (jaxcal.bootstrap.bootstrap never stores "
    "the indices all)",
  )
  return jax.vmap(lambda k: _indices(k, n))(jax.random.split(key, num_resamples))


# --------------------------------------------------------------------------
# Intervals from resampled values.
# --------------------------------------------------------------------------


def _quantile(sorted_samples: jax.Array, q: jax.Array) -> jax.Array:
  """Per-element quantile (numpy's ``linear`` rule) of samples sorted on axis 0."""
  num = sorted_samples.shape[0]
  h = jnp.clip(q, 0.0, 1.0) * (num - 1)
  lo = jnp.floor(h).astype(jnp.int32)
  hi = jnp.minimum(lo + 1, num - 1)
  frac = (h - lo.astype(h.dtype)).astype(sorted_samples.dtype)
  a = jnp.take_along_axis(sorted_samples, lo[None], axis=0)[0]
  b = jnp.take_along_axis(sorted_samples, hi[None], axis=0)[0]
  return a + frac * (b - a)


def _unit_exponent(*xs: jax.Array) -> jax.Array:
  """Per element over axis 0 of all ``xs``: ``e`` with ``2^(e-1) <= max |x| < 2^e``, shape ``(1, ...)``.

  ``ldexp(x, -e)`` then brings the values to order 1 exactly (a power of two);
  ``e = 0`` where every value is 0.
  """
  peak = [jnp.max(jnp.abs(x), axis=0, keepdims=True) for x in xs]
  return jnp.frexp(functools.reduce(jnp.maximum, peak))[1]


def _std(s: jax.Array) -> jax.Array:
  """``std(s, axis=0, ddof=1)``, scale-free: the samples are brought to order 1 by a power of two.

  Unscaled, the mean's sum overflowed for samples of size 1e36 in float32 (a
  constant 1e36 sample had ``sd = nan``, its normal interval NaN), and the
  squares of samples of size 1e-20 underflowed (``sd = 0``).
  """
  e = _unit_exponent(s)
  return jnp.ldexp(jnp.std(jnp.ldexp(s, -e), axis=0, ddof=1, keepdims=True), e)[0]


def _acceleration(*jacks: jax.Array) -> jax.Array:
  """BCa acceleration from the ``(G_g, ...)`` delete-a-group jackknife values of each data set.

  With ``U_gk = (G_g − 1)(mean_k θ_(gk) − θ_(gk))`` for group ``k`` of data
  set ``g``: ``a = Σ_g Σ_k U³/G_g³ / (6 (Σ_g Σ_k U²/G_g²)^{3/2})``, which is
  the one-sample ``Σ d³ / (6 (Σ d²)^{3/2})`` when there is one data set. ``a``
  does not change when every ``θ`` is scaled by one factor, so the values and
  then the deviations are brought to order 1 by powers of two (exact) before
  the cubes: unscaled, a statistic of size 1e15 overflowed them and one of
  1e-12 underflowed them to 0/0, a NaN interval in float32.
  """
  e = _unit_exponent(*jacks)
  units = [jnp.ldexp(v, -e) for v in jacks]
  devs = [(v.shape[0] - 1) / v.shape[0] * (jnp.mean(v, axis=0, keepdims=True) - v) for v in units]
  f = _unit_exponent(*devs)
  devs = [jnp.ldexp(d, -f) for d in devs]
  num = sum(jnp.sum(d**3, axis=0) for d in devs)
  den = sum(jnp.sum(d**2, axis=0) for d in devs)  # >= 1/4 unless every deviation is 0
  return jnp.where(den > 0, num / (6.0 * jnp.where(den > 0, den, 1.0) ** 1.5), 0.0)


def _levels(confidence: float) -> np.ndarray:
  """``(α/2, 1 - α/2, z_{1-α/2})`` of a confidence ``1 - α``, in double precision on the host.

  ``z_{1-α/2}`` as ``-z_{α/2}``: ``1 - α/2`` rounds to 1 in float32 beyond
  confidence ``1 - 6e-8``. An argument of the programs, not a static value
  (each confidence level compiled its own interval program, 0.1-0.9 s).
  """
  alpha = 1.0 - float(confidence)
  return np.array([alpha / 2, 1.0 - alpha / 2, -statistics.NormalDist().inv_cdf(alpha / 2)])


def _interval(
  est: jax.Array, s: jax.Array, method: str, levels: ArrayLike, a: jax.Array | None
) -> tuple[jax.Array, jax.Array]:
  """:func:`interval` without checks: NaN ends for every element with a non-finite input.

  ``est`` (shape ``S``) and ``s`` (``(B, *S)``, ``B >= 1``) are float arrays
  of one dtype (at least float32); ``levels`` is :func:`_levels` of the
  confidence; ``a`` is ``None`` or broadcasts to ``S``. An element whose
  estimate, resampled values (or acceleration) are not all finite gets NaN
  at both ends, never a plausible number: sorting would put NaN last and
  read a finite lower quantile from the others.
  """
  ok = jnp.isfinite(est) & jnp.all(jnp.isfinite(s), axis=0)
  if a is not None:
    ok = ok & jnp.isfinite(a)
  levels = jnp.asarray(levels).astype(s.dtype)
  z = levels[2]
  if method == "normal":
    sd = _std(s)
    lo, hi = est - z * sd, est + z * sd
  else:
    srt = jnp.sort(s, axis=0)
    q_lo = jnp.full(est.shape, levels[0], s.dtype)
    q_hi = jnp.full(est.shape, levels[1], s.dtype)
    if method == "bca":
      num = s.shape[0]
      below = jnp.mean((s < est[None]).astype(s.dtype), axis=0) + 0.5 * jnp.mean(
        (s == est[None]).astype(s.dtype), axis=0
      )
      z0 = ndtri(jnp.clip(below, 0.5 / num, 1.0 - 0.5 / num))
      acc = jnp.zeros_like(est) if a is None else a

      def adjusted(zq):
        # Efron & Tibshirani (1993) eq. 14.10; as 1 - a (z0 + zq) falls to 0 the level
        # tends to 1 (or 0, for z0 + zq < 0): beyond, the formula would swap the ends
        w = z0 + zq
        den = 1.0 - acc * w
        safe = jnp.where(den > 0, den, 1.0)
        return jnp.where(den > 0, ndtr(z0 + w / safe), (w > 0).astype(s.dtype))

      q_lo, q_hi = adjusted(-z), adjusted(z)
    lo, hi = _quantile(srt, q_lo), _quantile(srt, q_hi)
    if method == "basic":
      lo, hi = 2 * est - hi, 2 * est - lo
  nan = jnp.asarray(jnp.nan, s.dtype)
  return jnp.where(ok, lo, nan), jnp.where(ok, hi, nan)


@functools.partial(jax.jit, static_argnames="method")
def _interval_jit(est, s, a, levels, *, method: str):
  """:func:`_interval` as one compiled program (op by op it dispatches tens)."""
  return _interval(est, s, method, levels, a)


def _float_pair(estimate: Any, samples: Any) -> tuple[jax.Array, jax.Array]:
  """``(estimate, samples)`` as JAX floats of one dtype, at least float32 (float16 upcast)."""
  s = jnp.asarray(samples)
  s = s.astype(V.compute_dtype(s.dtype))
  return jnp.asarray(estimate).astype(s.dtype), s


def interval(
  estimate: ArrayLike,
  samples: ArrayLike,
  method: str = "percentile",
  confidence: float = 0.95,
  *,
  acceleration: ArrayLike | None = None,
) -> tuple[jax.Array, jax.Array]:
  """A bootstrap interval from the full-data estimate and the resampled values.

  With ``α = 1 − confidence``, ``q_s`` the ``s``-quantile of ``samples`` and
  ``θ̂`` the estimate: percentile ``[q_{α/2}, q_{1−α/2}]``; basic
  ``[2θ̂ − q_{1−α/2}, 2θ̂ − q_{α/2}]``; normal ``θ̂ ± z_{1−α/2}·sd``; BCa
  ``[q_{α_1}, q_{α_2}]`` with ``α_i = Φ(z0 + (z0 + z_i)/(1 − a(z0 + z_i)))``,
  ``z0 = Φ⁻¹(#{θ* < θ̂}/B + #{θ* = θ̂}/(2B))`` (capped to the quantiles
  ``1/(2B)`` and ``1 − 1/(2B)``, so an estimate outside every resample gives
  the extreme resample rather than NaN) and ``a`` the acceleration.

  Args:
    estimate: the statistic on the full data, shape ``S``; finite.
    samples: ``(B, *S)`` resampled values, ``B >= 2``; finite. Integer and
      half-precision values are computed in float32 (float64 stays).
    method: ``"percentile"``, ``"bca"``, ``"basic"`` or ``"normal"``.
    confidence: nominal coverage in ``(0, 1)``.
    acceleration: shape ``S`` (or scalar) finite acceleration ``a`` for BCa
      (default 0: the bias-corrected percentile interval).

  Returns:
    ``(lo, hi)``, each of shape ``S``, in the samples' compute dtype. Under
    ``jax.jit`` / ``jax.vmap`` (traced values, which cannot be checked)
    non-finite inputs give NaN ends instead of an error.

  Raises:
    ValueError: an unknown method, a confidence that is not a number in
      ``(0, 1)`` (a string or a bool included), samples
      whose trailing shape differs from the estimate's, fewer than 2
      resampled values (``B < 2``: an empty or one-point "interval"), or a
      NaN or infinite estimate, sample or acceleration (eager calls).

  Example:
    >>> import jax.numpy as jnp
    >>> lo, hi = interval(2.0, jnp.arange(101.0), "percentile", 0.9)
    >>> float(lo), float(hi)
    (5.0, 95.0)

  Reference: Efron & Tibshirani (1993), *An Introduction to the Bootstrap*,
  §12.3 (basic/normal), §13.3 (percentile), §14.3 (BCa, eq. 14.9-14.15).
  """
  if method not in METHODS:
    raise ValueError(f"method must be one of {METHODS}, got {method!r}")
  confidence = _check_confidence(confidence)
  s = V.as_float(samples, "samples")
  est = V.as_float(estimate, "estimate").astype(s.dtype)
  if s.ndim < 1 or s.shape[1:] != est.shape:
    raise ValueError(
      f"samples must have shape (B, *estimate.shape) = (B, {', '.join(map(str, est.shape))}), "
      f"got {tuple(s.shape)}"
    )
  if s.shape[0] < 2:
    raise ValueError(
      f"samples needs at least 2 resampled values along its first axis (B >= 2), got "
      f"B = {s.shape[0]}: an interval from {'no' if s.shape[0] == 0 else 'one'} resample "
      "would be degenerate"
    )
  # one fused reduction each; traced inputs with bad values come back as NaN
  est = V.check_values(est, "estimate")
  s = V.check_values(s, "samples")
  a = None
  if method == "bca" and acceleration is not None:
    a = V.check_values(V.as_float(acceleration, "acceleration").astype(s.dtype), "acceleration")
    try:
      fits = jnp.broadcast_shapes(a.shape, est.shape) == est.shape
    except ValueError:
      fits = False
    if not fits:
      raise ValueError(
        f"acceleration must be a scalar or have the estimate's shape {est.shape}, got {a.shape}"
      )
  return _interval_jit(est, s, a, _levels(confidence), method=method)


# --------------------------------------------------------------------------
# The bootstrap.
# --------------------------------------------------------------------------


def _gather(arrays, axes, slot, idx):
  # in range by construction: "clip" adds no fill mask and select (a second copy of each
  # resampled batch; 1334 against 687 MB at B = 1000, batch 16, n = 10^5, C = 100)
  return [jnp.take(a, idx[s], axis=ax, mode="clip") for a, ax, s in zip(arrays, axes, slot)]


class _Selection(NamedTuple):
  """The selected rows of a sample mask, for draws among them (:func:`_selection`)."""

  chosen: jax.Array  # (n,) int32: the selected rows' places first, in order
  count: jax.Array  # int32: how many are selected
  first: jax.Array  # (n,) bool: the first ``count`` places (a resample's mask)


def _selection(mask: jax.Array) -> _Selection:
  """:class:`_Selection` of an ``(n,)`` bool mask."""
  count = jnp.sum(mask, dtype=jnp.int32)
  chosen = jnp.argsort(~mask, stable=True).astype(jnp.int32)
  return _Selection(chosen, count, jnp.arange(mask.shape[0], dtype=jnp.int32) < count)


def _masked_indices(key: jax.Array, sel: _Selection) -> jax.Array:
  """``(n,)`` resample indices: ``count`` draws among the selected rows in the first places.

  Draw ``j`` picks the ``(randint j)``-th selected row; the places from
  ``count`` on hold draws too, masked by ``sel.first``. Partitionable
  threefry draws element by element: a mask of the first ``k`` rows gives
  :func:`_indices` of ``k`` rows in the first ``k`` places, exactly.
  """
  n = sel.chosen.shape[0]
  return sel.chosen[jax.random.randint(key, (n,), 0, jnp.maximum(sel.count, 1), jnp.int32)]


def _fill_empty(v: jax.Array, filled: jax.Array) -> jax.Array:
  """``(G, ...)`` jackknife values with the rows where ``filled`` is False set to the others' mean."""
  keep = filled.reshape(filled.shape + (1,) * (v.ndim - 1))
  mean = jnp.sum(jnp.where(keep, v, 0), axis=0, keepdims=True) / jnp.maximum(jnp.sum(filled), 1)
  return jnp.where(keep, v, mean)


def _masked_groups(key: jax.Array, mask: jax.Array, count: jax.Array, groups: int) -> jax.Array:
  """``(n,)`` jackknife group of each selected row (``groups`` for none, -1 unselected).

  The ``count`` selected rows in a random order (uniform 32-bit keys, the
  unselected rows' set to the largest so that they sort last), cut into
  ``groups`` runs of ``count // groups`` rows; the remainder rows stay in
  every evaluation, as without a mask.
  """
  n = mask.shape[0]
  bits = jax.random.bits(key, (n,), jnp.uint32)
  order = jnp.argsort(jnp.where(mask, bits, jnp.uint32(jnp.iinfo(jnp.uint32).max)), stable=True)
  rank = jnp.zeros((n,), jnp.int32).at[order].set(jnp.arange(n, dtype=jnp.int32))
  size = jnp.maximum(count // groups, 1)
  group = jnp.where(rank < size * groups, rank // size, groups)
  return jnp.where(mask, group, -1)


@functools.partial(
  jax.jit,
  static_argnames=("fn", "axes", "slot", "sizes", "num_resamples", "batch_size", "jackknife"),
)
def _resampled(
  keys, perms, arrays, mask, *, fn, axes, slot, sizes, num_resamples, batch_size, jackknife
):
  """(estimate, samples, jackknife values or None): one compiled program.

  The estimate rides along as element 0 of the resamples (the identity
  indices), so ``fn`` is compiled once, batched, and not a second time for
  the full data: the report's first call compiled its metrics twice.

  With a sample ``mask`` (one group): ``fn(*arrays, where=...)``; a resample
  draws its ``count`` indices among the selected rows into the first
  ``count`` of its ``n`` places (the rest masked). Partitionable threefry
  draws element by element, so a mask selecting the first ``count`` rows
  gives the index sets of the unmasked ``count`` rows exactly.
  """
  if mask is not None:
    sel = _selection(mask)

  def one(args):
    ks, full = args
    if mask is None:
      idx = [
        jnp.where(full, jnp.arange(n, dtype=jnp.int32), _indices(k, n)) for k, n in zip(ks, sizes)
      ]
      return fn(*_gather(arrays, axes, slot, idx))
    draw = _masked_indices(ks[0], sel)
    idx = [jnp.where(full, jnp.arange(sizes[0], dtype=jnp.int32), draw)]
    return fn(*_gather(arrays, axes, slot, idx), where=jnp.where(full, mask, sel.first))

  if V.checking():
    # jaxcal.checked reports the first failed check: fn on the caller's data, traced
    # first, so a bad input is described by its own rows (not by a resample's, where
    # rows repeat); its values are unused (the estimate below is element 0)
    fn(*arrays) if mask is None else fn(*arrays, where=mask)
  per_resample = [jax.random.split(k, num_resamples) for k in keys]
  per_resample = [jnp.concatenate([r[:1], r]) for r in per_resample]
  full = jnp.arange(num_resamples + 1) == 0
  both = map_batches(one, (per_resample, full), batch_size)
  estimate = jax.tree.map(lambda a: a[0], both)
  samples = jax.tree.map(lambda a: a[1:], both)
  jack = None
  if jackknife and mask is not None:
    # Delete-a-group jackknife of the selected rows: each group masked out in turn
    num = jackknife[0]
    groups = _masked_groups(jax.random.fold_in(keys[0], 1), mask, sel.count, num)
    values = map_batches(
      lambda k: fn(*arrays, where=mask & (groups != k)), jnp.arange(num), batch_size
    )
    # a traced mask selecting fewer rows than groups leaves groups empty (their value the
    # full estimate, which moved the acceleration): they get the other groups' mean, a
    # deviation of 0 (the one-sample acceleration does not depend on the group count)
    filled = jnp.arange(num) < jnp.minimum(sel.count, num)
    jack = [jax.tree.map(lambda v: _fill_empty(v, filled), values)]
  elif jackknife:
    # Delete-a-group jackknife of each data set in turn (the others full).
    parts = []
    for g, (perm, n) in enumerate(zip(perms, sizes)):
      num_groups = jackknife[g]
      size = n // num_groups
      keep = jnp.arange(n - size)

      def drop(k, perm=perm, size=size, keep=keep, g=g):
        idx = [jnp.arange(m, dtype=jnp.int32) for m in sizes]
        idx[g] = perm[keep + (keep >= k * size) * size]
        return fn(*_gather(arrays, axes, slot, idx))

      parts.append(map_batches(drop, jnp.arange(num_groups), batch_size))
    jack = parts
  return estimate, samples, jack


def _check_work(
  num_resamples: int, sizes: tuple[int, ...], words: int, fix: str | None = None
) -> None:
  """Refuses ``num_resamples × (n + words)`` index and key words beyond ``2^31 - 1`` up front.

  The index sets are drawn a batch at a time, but the keys, the loop and the
  time grow with the total: ``num_resamples = 10**9`` on ``n = 20`` was killed
  by the OS at 21 GB after 69 s (any value up to ``MAX_RESAMPLES`` passed).
  The keys are stored whole: ``w`` uint32 words per resample and group (2
  for the default threefry keys, :func:`_key_words`), split and then copied
  once (``words = 2 w g``), so ``10**9`` resamples of ``n = 2`` samples
  passed a bound on the indices alone and needed about 20 GB. (The batching
  pads the last batch of keys too: the bound is the arrays' size, not the
  allocator's peak.) ``fix``: the message's advice (default: the most
  resamples that fit).
  """
  n, k = sum(sizes), words
  whose = "" if len(sizes) == 1 else f" (n: the samples of the {len(sizes)} groups together)"
  V.check_entries(
    num_resamples * (n + k),
    f"the resample indices and keys (num_resamples, n + {k}) = ({num_resamples:,}, {n + k:,})"
    + whose,
    fix or f"pass fewer resamples (at most {V.MAX_ENTRIES // (n + k):,} for n = {n:,})",
  )


def _check_statistic(samples: Any, num_resamples: int) -> None:
  """Checks the ``(num_resamples, ...)`` resampled values' shapes and dtypes (from ``eval_shape``).

  Every leaf must be real (boolean, integer or floating: a complex one raised
  ``ldexp not supported`` from the interval), and its ``(num_resamples + 1,
  *shape)`` resampled values (the estimate rides along) must fit
  :data:`~jaxcal._src.validation.MAX_ENTRIES`.
  """
  for path, leaf in jax.tree_util.tree_flatten_with_path(samples)[0]:
    where = f"fn's output{jax.tree_util.keystr(path)}"
    dt = jnp.dtype(leaf.dtype)
    if not (dt == jnp.bool_ or V.real_dtype(dt)):
      raise ValueError(
        f"the statistic must return real numbers (floating, integer or boolean arrays): "
        f"{where} has dtype {dt}; return the parts to bootstrap as real arrays "
        "(e.g. jnp.real and jnp.imag of a complex value)"
      )
    size = math.prod(leaf.shape[1:])
    V.check_entries(
      (num_resamples + 1) * size,
      f"the resampled values of {where} (num_resamples + 1, *shape) = "
      f"({num_resamples + 1:,}{''.join(f', {d}' for d in leaf.shape[1:])})",
      f"pass fewer resamples (at most {V.MAX_ENTRIES // max(size, 1) - 1:,}) or a smaller statistic",
    )


@V.outside_explicit_context
def bootstrap(
  key: jax.Array,
  fn: Callable[..., Any],
  *arrays: ArrayLike,
  num_resamples: int = 1000,
  method: str = "percentile",
  confidence: float = 0.95,
  sample_axis: int | Sequence[int] = 0,
  groups: Sequence[int] | None = None,
  batch_size: int | None = None,
  jackknife_groups: int = 100,
  where: ArrayLike | None = None,
) -> BootstrapResult:
  """Bootstrap interval of any statistic over resampled test samples.

  Draws ``B = num_resamples`` index sets of ``n`` samples with replacement
  (one set shared by all ``arrays`` of a group: stacked predictors evaluated
  on the same test samples are resampled together, a paired bootstrap;
  arrays of different data sets go in different ``groups`` and are resampled
  independently), evaluates ``fn`` on the full data and on every resample in
  one compiled call (``jax.lax.map`` over batches of ``batch_size`` vmapped
  resamples), and returns the estimate, the interval of ``method`` at level
  ``confidence``, the standard deviation and the resampled values.

  ``fn`` is traced, never run eagerly, so it must be traceable (any jaxcal
  metric, a ``jax.vmap`` of one over stacked predictors, a dict of several,
  a rank correlation between them) and its inputs are not value-checked:
  check them first (for example by calling the metric once on the full
  data). The compiled program is cached per ``fn`` object and shapes: pass
  the same function (not a fresh ``lambda``) to reuse it across calls.

  Interval choice (see the module notes and
  ``experiments/bootstrap_coverage.py``): percentile is the default because
  a binned ℓ1 error's resamples sit above its estimate and
  ``estimate ± z·sd`` is misplaced there; ``"bca"`` adds a bias and skew
  correction (costs ``jackknife_groups`` more evaluations per data set);
  ``"normal"`` reproduces the papers' ``±1.96 sd``.

  Args:
    key: a ``jax.random`` key.
    fn: ``fn(*arrays) -> pytree of arrays``, traceable.
    *arrays: the data; each is resampled along its ``sample_axis``.
    num_resamples: ``B >= 2`` (1000 by default; use 2000 or more for BCa).
    method: ``"percentile"`` (default), ``"bca"``, ``"basic"`` or ``"normal"``.
    confidence: nominal coverage of the interval, in ``(0, 1)``.
    sample_axis: the sample axis of every array (an int for all, or one per
      array), e.g. ``(1, 0)`` for ``(P, n, C)`` stacked probabilities and
      ``(n,)`` labels.
    groups: one integer per array (default: all in one group). Arrays of a
      group share the index sets and must have the same sample count. Group
      ``g`` (in order of first appearance) uses the key
      ``jax.random.split(key, G)[g]``, or ``key`` itself when ``G = 1``.
    batch_size: resamples evaluated together by ``jax.vmap`` (default: as
      many as fit in about 128 MiB of gathered inputs, at most 8 on CPU and
      64 on accelerators).
    jackknife_groups: groups of the delete-a-group jackknife for BCa's
      acceleration (at most ``n``; ``n`` gives the ordinary jackknife).
      With BCa, ``fn`` is also evaluated on ``n - n // G`` samples (one
      group of ``n // G`` left out, ``G = min(jackknife_groups, n)``): a
      statistic that needs ``m`` samples (``m`` quantile bins) needs
      ``m <= n - n // G``, and its error then names that smaller ``n``.
      With ``where``, ``n`` is the selected count ``k`` (under ``jit``, where
      ``k`` is traced, ``G = min(jackknife_groups, n)`` of the padded ``n``,
      and groups left empty when ``k < G`` do not count).
    where: optional ``(n,)`` bool mask of the samples (one group only): the
      data set is the ``k`` selected samples, and ``fn`` is called as
      ``fn(*arrays, where=mask)`` (every jaxcal metric takes ``where``). A
      resample draws ``k`` samples among the selected into its first ``k``
      places and masks the rest, so the arrays keep their shape: data
      padded to a fixed size (a size bucket) reuses one compiled program.
      Masking the last rows gives the same index sets as the unpadded
      data (partitionable threefry draws element by element; the BCa
      jackknife's groups are drawn differently). Needs ``k >= 2`` (eager;
      under ``jit`` fewer give NaN ends).

  Returns:
    :class:`BootstrapResult` ``(estimate, sd, lo, hi, samples)``. ``lo`` and
    ``hi`` are NaN for every element of the statistic whose estimate or
    resampled values (or BCa acceleration) are not all finite, for example
    NaN in the data or a rank correlation of a constant resample: a finite
    end read from the finite resamples only would be a plausible wrong
    number.

  Raises:
    ValueError: ``key`` is not a PRNG key, no arrays, a bad ``sample_axis``
      or ``groups``, arrays of one group with different sample counts, a
      data set with fewer than 2 samples (every resample of one sample is
      that sample: sd 0 and a zero-width interval), ``num_resamples < 2``,
      ``batch_size < 1``, ``jackknife_groups < 2``, an unknown ``method``
      or a ``confidence`` that is not a number in ``(0, 1)`` (a string
      ``"0.9"`` or a bool included); ``num_resamples × (n + 2 w G)`` resample
      index and key words (``n`` summed over the ``G`` groups, ``w`` words
      per key: 2 for threefry, split and then copied),
      ``(num_resamples + 1) × size`` values
      of a statistic's output, or ``batch_size × size`` entries of one
      gathered batch of a data array beyond ``2^31 - 1`` (refused before
      anything is drawn); a ``where`` that is not a bool ``(n,)`` array,
      selects fewer than 2 samples (eager), masks several groups, or meets
      a ``fn`` without a ``where`` argument; a statistic with a complex (or
      other non-real) output; and any error ``fn`` raises while it is traced
      (with BCa on the jackknife's ``n - n // G`` samples too).

  Example:
    >>> import jax, jax.numpy as jnp
    >>> x = jnp.arange(100.0)
    >>> r = bootstrap(jax.random.key(0), jnp.mean, x, num_resamples=200)
    >>> float(r.estimate), bool(r.lo < 49.5 < r.hi), r.samples.shape
    (49.5, True, (200,))
    >>> def mean(x, where):
    ...   return jnp.sum(jnp.where(where, x, 0.0)) / jnp.sum(where)
    >>> padded = jnp.concatenate([x, jnp.zeros(28)])  # 100 samples in a bucket of 128
    >>> m = bootstrap(jax.random.key(0), mean, padded, num_resamples=200,
    ...               where=jnp.arange(128) < 100)
    >>> bool(jnp.allclose(m.samples, r.samples))  # the same resamples
    True

  Reference: Efron & Tibshirani (1993), *An Introduction to the Bootstrap*,
  §6 (the bootstrap), §13-14 (percentile and BCa intervals); Lu, Wu,
  Hartline & Hu (2025), "Truthful Calibration Errors for Multi-Class
  Prediction", arXiv:2510.06388, Table 1 (intervals over test samples).
  """
  if not arrays:
    raise ValueError("bootstrap needs at least one data array after fn")
  if not callable(fn):
    raise TypeError(f"fn must be callable, got {type(fn).__name__}")
  key = V.check_key(key)
  num_resamples = V.check_int(num_resamples, "num_resamples", 2, MAX_RESAMPLES)
  if method not in METHODS:
    raise ValueError(f"method must be one of {METHODS}, got {method!r}")
  confidence = _check_confidence(confidence)
  jackknife_groups = V.check_int(jackknife_groups, "jackknife_groups", 2)
  arrs = [
    V._device(V.exact_on_device(V._array(a, name), name))  # a private copy, waited for
    for i, a in enumerate(arrays)
    for name in (f"bootstrap data array {i}",)
  ]
  if isinstance(sample_axis, bool | np.bool_) or not isinstance(
    sample_axis, int | np.integer | Sequence
  ):
    raise ValueError(
      f"sample_axis must be an int or a sequence of one int per array, got {sample_axis!r}"
    )
  one_axis = isinstance(sample_axis, int | np.integer)
  axes = [sample_axis] * len(arrs) if one_axis else list(sample_axis)
  if len(axes) != len(arrs):
    raise ValueError(f"sample_axis has {len(axes)} entries for {len(arrs)} arrays")
  if groups is not None and (
    isinstance(groups, str | bytes)
    or not isinstance(groups, Iterable)
    or (isinstance(groups, np.ndarray | jax.Array) and groups.ndim != 1)
  ):  # an int raised Python's "'int' object is not iterable"
    raise ValueError(
      f"groups must be a sequence of one int per array (e.g. (0, 0, 1)) or None, got "
      f"{groups!r} ({type(groups).__name__})"
    )
  # integers only: float labels were truncated (0.2 and 0.9 made one paired group)
  grp = (
    [0] * len(arrs)
    if groups is None
    else [V.check_int_option(g, "each entry of groups") for g in groups]
  )
  if len(grp) != len(arrs):
    raise ValueError(f"groups has {len(grp)} entries for {len(arrs)} arrays")
  names = list(dict.fromkeys(grp))  # groups in order of first appearance
  ns: dict[int, int] = {}
  axes_norm = []
  for i, (a, ax, g) in enumerate(zip(arrs, axes, grp)):
    if isinstance(ax, bool) or not isinstance(ax, int | np.integer) or not -a.ndim <= ax < a.ndim:
      raise ValueError(f"sample_axis {ax!r} out of range for array {i} of shape {tuple(a.shape)}")
    ax = int(ax) % a.ndim
    axes_norm.append(ax)
    if ns.setdefault(g, a.shape[ax]) != a.shape[ax]:
      raise ValueError(
        f"all arrays of a group must have the same number of samples, got "
        f"{ns[g]} and {a.shape[ax]} in group {g}"
      )
  sizes = tuple(ns[g] for g in names)
  mask, count = _sample_mask(where, fn, sizes, len(names))
  if min(sizes) < 2:
    raise ValueError(
      f"bootstrap needs at least 2 samples per data array, got n = {min(sizes)} along the "
      "sample axis: every resample of one sample is that sample (sd 0, a zero-width interval)"
    )
  _check_work(num_resamples, sizes, 2 * _key_words(key) * len(sizes))
  if batch_size is None:
    batch_size = _auto_batch(sum(a.size * a.dtype.itemsize for a in arrs), num_resamples)
  else:
    batch_size = min(V.check_int(batch_size, "batch_size"), num_resamples)
    # (one resample of an array is the size of the array itself: nothing to bound at 1)
    for i, a in enumerate(arrs if batch_size > 1 else ()):
      V.check_entries(
        batch_size * a.size,
        f"one batch of data array {i} resampled (batch_size, *shape) = "
        f"({batch_size:,}, {', '.join(map(str, a.shape))})",
        "pass a smaller batch_size (by default a batch gathers about 128 MiB)",
      )
  keys = [key] if len(names) == 1 else list(jax.random.split(key, len(names)))
  jackknife = None
  perms: list[jax.Array] = []
  if method == "bca" and mask is not None:  # groups of the selected rows (_masked_groups)
    jackknife = (min(jackknife_groups, sizes[0] if count is None else count),)
  elif method == "bca":
    jackknife = tuple(min(jackknife_groups, n) for n in sizes)
    perms = [
      jax.random.permutation(jax.random.fold_in(k, 1), n).astype(jnp.int32)
      for k, n in zip(keys, sizes)
    ]
  static = dict(
    fn=fn,
    axes=tuple(axes_norm),
    slot=tuple(names.index(g) for g in grp),
    sizes=sizes,
    num_resamples=num_resamples,
    batch_size=batch_size,
    jackknife=jackknife,
  )
  # the output's shapes and dtypes first, allocating nothing (the trace is the call's own:
  # jit caches it)
  _check_statistic(_resampled.eval_shape(keys, perms, arrs, mask, **static)[1], num_resamples)
  estimate, samples, jack = _resampled(keys, perms, arrs, mask, **static)
  sd, lo, hi = _summary(estimate, samples, jack, _levels(confidence), method=method)
  if mask is not None and count is None:  # traced mask: fewer than 2 selected give NaN ends
    enough = jnp.sum(mask, dtype=jnp.int32) >= 2
    lo, hi = (jax.tree.map(lambda a: V.fold(a, enough), t) for t in (lo, hi))
  return BootstrapResult(estimate=estimate, sd=sd, lo=lo, hi=hi, samples=samples)


def _sample_mask(
  where: Any, fn: Callable, sizes: tuple[int, ...], num_groups: int
) -> tuple[jax.Array | None, int | None]:
  """:func:`bootstrap`'s checked ``(mask, k)``: ``k`` the selected count (None when traced).

  Raises:
    ValueError: a mask with several groups, of the wrong dtype or shape, or
      selecting fewer than 2 samples; ``fn`` without a ``where`` argument.
  """
  if where is None:
    return None, None
  if num_groups != 1:
    raise ValueError(
      f"where masks the samples of one data set; these arrays form {num_groups} groups "
      "(pass a mask per data set by masking inside fn, or one group)"
    )
  try:
    params = inspect.signature(fn).parameters
  except (TypeError, ValueError):  # no signature to read (a builtin): the trace will say
    params = None
  if (
    params is not None
    and "where" not in params
    and not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
  ):
    raise ValueError(
      "with where=, the statistic is called as fn(*arrays, where=mask), but fn has no "
      "where argument (every jaxcal metric has one; add it to your function)"
    )
  mask = V.check_where(where, sizes[0])
  if not V.is_concrete(mask):
    return mask, None
  with jax.ensure_compile_time_eval():  # a mask closed over by a user's jit: read now
    k = int(jnp.sum(mask, dtype=jnp.int32))
  if k < 2:
    raise ValueError(
      f"bootstrap needs at least 2 selected samples, where selects {k} of {sizes[0]}: every "
      "resample of one sample is that sample (sd 0, a zero-width interval)"
    )
  return mask, k


@functools.partial(jax.jit, static_argnames="method")
def _summary(estimate, samples, jack, levels, *, method: str):
  """``(sd, lo, hi)`` trees of :func:`bootstrap`: one compiled program for every leaf.

  Run op by op, the interval of each leaf dispatched (and compiled) tens of
  small programs: 8 of the command line report's 27 seconds.
  """
  tree = jax.tree_util
  sd = tree.tree_map(_std, samples)

  def ends(e, s, a=None):
    e, s = _float_pair(e, s)
    return _interval(e, s, method, levels, None if a is None else a.astype(s.dtype))

  if jack is None:
    bounds = tree.tree_map(ends, estimate, samples)
  else:
    # the acceleration of each leaf, over every independently resampled data set
    bounds = tree.tree_map(ends, estimate, samples, tree.tree_map(_acceleration, *jack))
  treedef = tree.tree_structure(estimate)
  pairs = treedef.flatten_up_to(bounds)
  lo = tree.tree_unflatten(treedef, [p[0] for p in pairs])
  hi = tree.tree_unflatten(treedef, [p[1] for p in pairs])
  return sd, lo, hi


# --------------------------------------------------------------------------
# Consistency resampling for reliability diagrams.
# --------------------------------------------------------------------------


class ConsistencyBands(NamedTuple):
  """Per-bin consistency band of a top-label reliability diagram.

  Attributes:
    confidence: ``(num_bins,)`` mean confidence of each bin on the data.
    lo: ``(num_bins,)`` lower end of the accuracy a calibrated predictor
      would show in the bin: ``confidence`` plus the lower quantile of the
      resampled accuracy minus confidence.
    hi: ``(num_bins,)`` upper end.
    counts: ``(num_bins,)`` samples per bin on the data (bands of empty bins
      are meaningless and set to NaN).
    level: the bands' nominal coverage (the ``confidence`` argument of
      :func:`consistency_bands`; a scalar), for labels.
  """

  confidence: jax.Array
  lo: jax.Array
  hi: jax.Array
  counts: jax.Array
  level: jax.Array | float = 0.9


@functools.partial(jax.jit, static_argnames=("num_bins", "binning", "num_resamples", "batch_size"))
def _consistency(key, probs, num_bins, binning, num_resamples, batch_size, level, where=None):
  from jaxcal._src.calibration_errors import _confidence, _reliability_of_top

  n = probs.shape[0]
  c, _ = _confidence(probs, jnp.zeros((n,), jnp.int32))
  base = _reliability_of_top(c, jnp.zeros_like(c), num_bins, binning, where)
  sel = None if where is None else _selection(where)
  # The top-label diagram reads only whether y* ~ Categorical(p_i) is the top label, a
  # Bernoulli(max p_i) draw: O(n) per resample (a categorical draw made (n, C) Gumbel
  # noise and gathers, 16x the input at n = 10^5, C = 100), from float32 confidences
  # whatever the input's dtype (the same key, the same draws).
  c32 = c.astype(jnp.float32)

  def one(k):
    k_idx, k_lab = jax.random.split(k)
    idx = _indices(k_idx, n) if sel is None else _masked_indices(k_idx, sel)
    z = jax.random.uniform(k_lab, (n,), jnp.float32) < c32[idx]
    s = _reliability_of_top(
      c[idx], z.astype(c.dtype), num_bins, binning, None if sel is None else sel.first
    )
    return jnp.where(s.counts > 0, s.accuracy - s.confidence, jnp.nan)

  gaps = map_batches(one, jax.random.split(key, num_resamples), batch_size)
  lo = jnp.nanquantile(gaps, (1.0 - level) / 2, axis=0)
  hi = jnp.nanquantile(gaps, (1.0 + level) / 2, axis=0)
  ok = base.counts > 0
  lo = jnp.where(ok, base.confidence + lo, jnp.nan)
  hi = jnp.where(ok, base.confidence + hi, jnp.nan)
  return ConsistencyBands(base.confidence, lo, hi, base.counts, level)


@V.outside_explicit_context
def consistency_bands(
  key: jax.Array,
  probs: ArrayLike,
  num_bins: int = 15,
  binning: str = "fixed",
  *,
  num_resamples: int = 1000,
  confidence: float = 0.9,
  from_logits: bool = False,
  where: ArrayLike | None = None,
) -> ConsistencyBands:
  """Consistency bands of a top-label reliability diagram (Bröcker & Smith 2007).

  Under the hypothesis that the predictor is calibrated, the label of sample
  ``i`` is a draw from ``p_i``. Each of ``B`` resamples draws ``n`` rows of
  ``probs`` with replacement and a label ``y* ~ Categorical(p_i)`` for each
  (drawn as what the diagram reads of it: whether it is the top label,
  Bernoulli with probability ``max p_i``), bins the resampled confidences and
  records each bin's accuracy minus mean confidence. The band of bin ``b`` is
  its mean confidence on the data plus the ``(1 ± confidence)/2`` quantiles of
  that gap: an accuracy outside the band is unlikely for a calibrated
  predictor (a test of calibration bin by bin, not a confidence interval for
  the accuracy). The labels are not used.

  Args:
    key: a ``jax.random`` key.
    probs: ``(n, C)`` probabilities (logits with ``from_logits=True``).
    num_bins: static bin count.
    binning: ``"fixed"`` or ``"quantile"``.
    num_resamples: number of consistency resamples ``B >= 2``.
    confidence: probability mass inside the band, in ``(0, 1)`` (0.9: the
      5 %-95 % range of Bröcker & Smith).
    from_logits: treat ``probs`` as logits.
    where: optional ``(n,)`` bool mask of the samples (the others neither
      checked nor read): the bands of the ``k`` selected rows, each resample
      drawing ``k`` of them (as :func:`bootstrap` with ``where``: a mask of
      the first ``k`` rows gives the bands of those rows, exactly).

  Returns:
    :class:`ConsistencyBands` of ``(num_bins,)`` arrays.

  Raises:
    ValueError: ``key`` is not a PRNG key; invalid probabilities, bin count,
      binning, resample count or confidence (a string or a bool included);
      ``num_resamples × num_bins`` resampled gaps or ``num_resamples × (n + 2 w)``
      resample indices and key words (``w`` words per key: 2 for threefry)
      beyond ``2^31 - 1`` (refused before anything is drawn); a ``where`` that
      is not a bool ``(n,)`` array or selects no sample, or selects fewer
      samples than quantile bins (eager calls).

  Example:
    >>> import jax, jax.numpy as jnp
    >>> p = jax.nn.softmax(jax.random.normal(jax.random.key(0), (500, 4)) * 2)
    >>> b = consistency_bands(jax.random.key(1), p, 5, num_resamples=100)
    >>> bool(jnp.all((b.lo <= b.confidence) | (b.counts == 0)))
    True

  Reference: Bröcker & Smith (2007), "Increasing the Reliability of
  Reliability Diagrams", Weather and Forecasting 22(3), §4 (consistency
  resampling); Dimitriadis, Gneiting & Jordan (2021), "Stable reliability
  diagrams for probabilistic classifiers", PNAS 118(8), §3 (consistency bands).
  """
  key = V.check_key(key)
  logits = V.check_flag(from_logits, "from_logits")
  w, selected = None, None
  if where is not None:  # the selected rows checked (labels: not used)
    n = np.shape(probs)[0] if np.ndim(probs) == 2 else 0
    d = V.check_predictions(probs, np.zeros(n, np.int32), from_logits=logits, where=where)
    p, w, ok, selected = V.fold(d.probs(), d.ok), d.where, d.ok, d.count
  elif logits:
    p = jax.nn.softmax(V.check_logits(probs, name="logits"), axis=-1)
  else:
    p = V.check_probs(probs)
  m = V.check_num_bins(num_bins)
  if not isinstance(m, int):
    raise ValueError(
      "num_bins must be a Python or numpy integer (not an array) for consistency_bands, "
      f"got {num_bins!r}"
    )
  binning = V.check_binning(binning)
  k = p.shape[0] if w is None else selected
  if binning == "quantile" and isinstance(k, int) and m > k:
    raise ValueError(
      f"quantile binning with num_bins = {m} needs at least that many samples, got n = {k}"
      + ("" if w is None else " selected by where")
    )
  num_resamples = V.check_int(num_resamples, "num_resamples", 2, MAX_RESAMPLES)
  # before anything is drawn: 2**24 bins asked XLA for 134 GB (raw RESOURCE_EXHAUSTED)
  V.check_entries(
    num_resamples * m,
    f"the resampled gaps per bin (num_resamples, num_bins) = ({num_resamples:,}, {m:,})",
    f"pass fewer resamples (at most {V.MAX_ENTRIES // m:,} for {m:,} bins) or fewer bins",
  )
  _check_work(num_resamples, (p.shape[0],), 2 * _key_words(key))
  level = _check_confidence(confidence)
  batch = _auto_batch(4 * p.shape[0] * p.dtype.itemsize, num_resamples)  # O(n) each
  out = _consistency(key, p, m, binning, num_resamples, batch, level, w)
  if V.is_concrete(p, w):
    return out
  # traced: bad input made p NaN; every float of the result NaN (the confidence read 0.0
  # in some bins) and the counts (integers) -1
  ok = jnp.all(jnp.isfinite(p)) if w is None else ok
  conf, lo, hi, counts = V.fold((out.confidence, out.lo, out.hi, out.counts), ok, ints=-1)
  return out._replace(confidence=conf, lo=lo, hi=hi, counts=counts)  # level: a setting, kept


def _normal_confidence(z: float) -> float:
  """Coverage of ``± z`` standard deviations of a normal distribution (``z`` checked, named)."""
  try:
    zf = float(z)
  except (TypeError, ValueError):
    raise ValueError(f"z must be a number > 0, got {z!r}") from None
  c = math.erf(zf / math.sqrt(2.0)) if math.isfinite(zf) else math.nan
  if not 0.0 < c < 1.0:  # z <= 0, not finite, or beyond ~8.2 (the coverage rounds to 1)
    raise ValueError(
      f"z must be a finite number > 0 and at most about 8.2 (beyond, the coverage rounds to 1), got {z!r}"
    )
  return c
