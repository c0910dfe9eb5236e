"""Outcome-independent binning on sorted prefix sums (Lu et al. 2025).

Everything here works on *one* data set and a (possibly traced) bin count
``num_bins`` bounded by a static ``max_bins``; batches come from ``jax.vmap``.

The engine: sort the scores once (stable, ties by index), take prefix sums of
the values to be binned in that order, and find for each bin ``j`` the number
``e_j`` of sorted samples in bins ``<= j``. Because both binning rules are
monotone in the score, bin ``j`` is the contiguous run ``(e_{j-1}, e_j]`` of
the sorted order, so its sum is ``D[e_j] - D[e_{j-1}]``. The sort and the
prefix sums do not depend on ``num_bins``: under ``vmap`` over bin counts
they are computed once and each bin count costs ``O(max_bins log n)``.

Rules (1-based bins ``j = 1..m``):

* ``fixed``: bin of ``s`` is ``clip(ceil(s*m), 1, m)``, the product taken in
  the scores' floating dtype (so the numpy float32 expression
  ``np.ceil(s * np.float32(m))`` gives the same bins).
* ``quantile``: sorted position ``i`` (1-based) is in bin ``ceil(i*m/n)``,
  computed exactly in integers. Ties may be split across bins (Lu et al. 2025).

Two strategies compute the per-bin sums (both exact with respect to the
rules above; tests check them against each other and a loop reference):

* ``"sort"``: stable sort, prefix sums, bin ends by integer math (quantile) or
  a vectorised bisection on the sorted scores (fixed).
* ``"edges"`` (fixed rule only, float32/float64 scores, ``max_bins <=``
  :data:`EDGES_MAX_BINS`): no sort at all. For every ``m <= max_bins`` and
  ``j <= m`` the rule ``ceil(fl(s*m)) <= j`` is the same as ``s <= T(m, j)``
  for one float threshold ``T(m, j)`` (the largest float whose rounded
  product with ``m`` is ``<= j``; within an ulp of ``j/m``). The sorted,
  de-duplicated thresholds of all ``(m, j)`` depend only on ``max_bins`` and
  the dtype, so they are computed once in numpy; each sample is dropped into
  its threshold interval (a power-of-two grid lookup plus at most a few
  comparisons), the values are summed per interval (``segment_sum``) and
  prefix-summed. A bin count then only gathers ``max_bins`` entries of a
  static ``(max_bins + 1, max_bins)`` index table. This is what makes the
  classwise fixed-bin errors cheap: no sort of ``C`` columns of length ``n``.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcal._src.numerics import PRECISION
from jaxcal._src.sorting import float_to_key, key_to_float, stable_argsort

__all__ = [
  "blocked_cumsum",
  "floor_mul_div",
  "bin_ends",
  "bin_ids",
  "BinnedSums",
  "binned_sums",
  "resolve_max_bins",
  "edge_table",
  "EDGES_MAX_BINS",
  "quantile_ends",
  "sorted_residual_prefix",
  "FAST_SORT_MIN_N",
  "binned_residual_sums",
  "fixed_bin_1based",
  "quantile_bin_of_position",
  "masked_last",
  "sample_count",
]


def blocked_cumsum(x: jax.Array, block: int = 128, axis: int = 0) -> jax.Array:
  """Inclusive prefix sum along ``axis``, blocked for float32 accuracy.

  Prefix sums within blocks of ``block`` entries (a matmul with a triangular
  matrix of ones), then the prefix sum of the block totals (recursively)
  added to each block: the rounding error grows like ``block + n/block``
  additions rather than ``n``. Integer inputs use ``jnp.cumsum`` (exact).

  (On CPU, XLA lowers ``jnp.cumsum`` to a full-window ``reduce_window``
  that is slow to compile; the matmul form compiles in a fraction of the
  time and runs as fast.)

  Args:
    x: array.
    block: entries per block (static).
    axis: the axis to sum along (static).

  Returns:
    Array of ``x``'s shape with ``out[..., i, ...] = sum(x[..., :i+1, ...])``.
  """
  if not jnp.issubdtype(x.dtype, jnp.floating):
    return jnp.cumsum(x, axis=axis)
  x = jnp.moveaxis(x, axis, -1)
  out = _mm_cumsum_last(x, block)
  return jnp.moveaxis(out, -1, axis)


def _mm_cumsum_last(x: jax.Array, block: int) -> jax.Array:
  n = x.shape[-1]
  if n <= block:
    tri = jnp.triu(jnp.ones((n, n), x.dtype))
    return jnp.matmul(x, tri, precision=PRECISION)
  nb = -(-n // block)
  xp = jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, nb * block - n)])
  xb = xp.reshape(x.shape[:-1] + (nb, block))
  tri = jnp.triu(jnp.ones((block, block), x.dtype))
  within = jnp.matmul(xb, tri, precision=PRECISION)
  totals = within[..., -1]
  offsets = _mm_cumsum_last(totals, block) - totals
  out = within + offsets[..., None]
  return out.reshape(x.shape[:-1] + (nb * block,))[..., :n]


def floor_mul_div(a: jax.Array, b: jax.Array, c: jax.Array) -> jax.Array:
  """Exact ``floor(a * b / c)`` for non-negative int32 without overflow.

  A float estimate is corrected with the remainder ``a*b - k*c``, computed in
  wrapping int32 arithmetic (exact, because the true remainder is small).
  Valid while the result and ``|estimate error| * c`` fit in int32.
  """
  a = jnp.asarray(a, jnp.int32)
  b = jnp.asarray(b, jnp.int32)
  c = jnp.asarray(c, jnp.int32)
  f = jnp.float32
  k = jnp.floor(a.astype(f) * b.astype(f) / c.astype(f)).astype(jnp.int32)
  for _ in range(2):
    rem = a * b - k * c  # wraps; exact modulo 2**32 and small in truth
    k = k + jnp.floor_divide(rem, c)
  return k


def fixed_bin_1based(s: jax.Array, m: jax.Array) -> jax.Array:
  """``clip(ceil(s*m), 1, m)`` with the product in ``s``'s dtype."""
  b = jnp.ceil(s * m.astype(s.dtype)).astype(jnp.int32)
  return jnp.clip(b, 1, m)


def resolve_max_bins(num_bins, n: int, max_bins: int | None) -> int:
  """The static bound on the bin count used to size per-bin arrays.

  ``max_bins`` if given; else ``num_bins`` when it is a Python int; else the
  largest value of a concrete array (1 for an empty one); else ``n`` (a
  traced bin count with no bound). A traced bin count outside
  ``[1, max_bins]`` cannot be binned with arrays of static size: the metrics
  return NaN for it (see ``calibration_errors``).
  """
  if max_bins is not None:
    if (
      isinstance(max_bins, (bool, np.bool_))
      or not isinstance(max_bins, (int, np.integer))
      or max_bins < 1
    ):
      raise ValueError(f"max_bins must be a static Python int >= 1, got {max_bins!r}")
    return int(max_bins)
  if isinstance(num_bins, int):
    return num_bins
  if not isinstance(num_bins, jax.core.Tracer):
    a = np.asarray(num_bins)
    return int(a.max()) if a.size else 1
  return int(n)


#: Largest ``max_bins`` for which the sort-free ``"edges"`` strategy is used
#: (its static tables grow like ``max_bins**2``).
EDGES_MAX_BINS = 512


class EdgeTable(NamedTuple):
  """Static tables of the sort-free fixed-bin strategy (numpy arrays)."""

  thresholds: np.ndarray  # (K,) sorted unique T(m, j), scores' dtype
  index: np.ndarray  # (max_bins + 1, max_bins) int32: row m, column j-1 ->
  # position in the (K + 2,) prefix array of bins <= j
  grid_lo: np.ndarray  # (G,) int32: number of thresholds < c / G
  grid: int  # G, a power of two
  width: int  # max thresholds in one grid cell


@functools.lru_cache(maxsize=16)
def edge_table(max_bins: int, dtype_name: str) -> EdgeTable:
  """Thresholds ``T(m, j)`` of the fixed rule for all ``1 <= j <= m <= max_bins``.

  ``T(m, j)`` is the largest value ``t`` of the scores' dtype with
  ``fl(t * m) <= j``, so that ``clip(ceil(fl(s*m)), 1, m) <= j`` iff
  ``s <= T(m, j)`` (for ``j < m``). Computed by stepping a few ulps around
  ``j/m`` (the rounded product is monotone in ``t``), checked exhaustively
  on the candidates.
  """
  dt = np.dtype(dtype_name)
  ft = dt.type
  mm = np.concatenate([np.full(m, m, np.int64) for m in range(1, max_bins + 1)])
  jj = np.concatenate([np.arange(1, m + 1, dtype=np.int64) for m in range(1, max_bins + 1)])
  mf, jf = mm.astype(dt), jj.astype(dt)
  cand = jf / mf
  for _ in range(3):
    cand = np.nextafter(cand, ft(-np.inf))
  best = np.full(cand.shape, np.nan, dt)
  ok_first = ok = None
  for k in range(7):
    ok = (cand * mf) <= jf  # rounded in dt, exactly as the JAX rule
    if k == 0:
      ok_first = ok
    best = np.where(ok, cand, best)
    cand = np.nextafter(cand, ft(np.inf))
  if not (ok_first.all() and not ok.any()):  # pragma: no cover - arithmetic guard
    raise AssertionError("fixed-bin thresholds not bracketed")
  thr = np.unique(best)
  k_count = thr.shape[0]
  # prefix array layout: P[0] = 0, P[k + 1] = sum over samples with s <= thr[k],
  # P[K + 1] = total. Bin ends j >= m use the total.
  pos = np.searchsorted(thr, best) + 1
  index = np.full((max_bins + 1, max_bins), k_count + 1, np.int32)
  sel = jj < mm
  index[mm[sel], jj[sel] - 1] = pos[sel]
  grid = 1 << max(4, int(np.ceil(np.log2(4 * k_count))))
  lo = np.searchsorted(
    thr.astype(np.float64), np.arange(grid + 1, dtype=np.float64) / grid, side="left"
  )
  counts = np.diff(lo)
  counts[-1] = k_count - lo[grid - 1]  # last cell also holds thresholds >= 1
  return EdgeTable(thr, index, lo[:grid].astype(np.int32), grid, max(1, int(counts.max())))


def _edge_bucket(s: jax.Array, table: EdgeTable) -> jax.Array:
  """``#{thresholds < s}`` for every score: grid cell, then <= width comparisons."""
  thr = jnp.asarray(
    np.concatenate([table.thresholds, np.full(table.width, np.inf, table.thresholds.dtype)])
  )
  # s * G is exact (power of two); cells are [c/G, (c+1)/G), the last one open.
  cell = jnp.clip(jnp.floor(s * table.grid), 0, table.grid - 1).astype(jnp.int32)
  base = jnp.asarray(table.grid_lo)[cell]
  idx = base
  for w in range(table.width):
    idx = idx + (thr[base + w] < s).astype(jnp.int32)
  return idx


def _use_edges(binning: str, max_bins: int, dtype, method: str) -> bool:
  if method == "sort" or binning != "fixed":
    if method == "edges" and binning != "fixed":
      raise ValueError("method='edges' applies to fixed binning only")
    return False
  supported = jnp.dtype(dtype) in (jnp.dtype(jnp.float32), jnp.dtype(jnp.float64))
  if method == "edges":
    if not supported:
      raise ValueError(f"method='edges' needs float32/float64 scores, got {jnp.dtype(dtype)}")
    return True
  if method != "auto":
    raise ValueError(f"method must be 'auto', 'sort' or 'edges', got {method!r}")
  return supported and max_bins <= EDGES_MAX_BINS


def sample_count(where: jax.Array | None, n: int) -> jax.Array:
  """Number of samples: ``n``, or the count of True entries of ``where`` (last axis)."""
  if where is None:
    return jnp.int32(n)
  return jnp.sum(where, axis=-1, dtype=jnp.int32)


def masked_last(scores: jax.Array, where: jax.Array | None) -> jax.Array:
  """``scores`` with masked-out entries above every sample (last axis).

  They get ``max(nextafter(max over samples), tiny)``: strictly above every
  sample's score, also when XLA flushes subnormals to zero, so a stable sort
  puts them after all samples (in index order) without moving any sample.
  """
  if where is None:
    return scores
  big = jnp.max(jnp.where(where, scores, -jnp.inf), axis=-1, keepdims=True)
  dt = scores.dtype
  after = jnp.maximum(jnp.nextafter(big, jnp.asarray(jnp.inf, dt)), jnp.finfo(dt).tiny)
  return jnp.where(where, scores, after)


def quantile_ends(n: ArrayLike, num_bins: ArrayLike, max_bins: int) -> jax.Array:
  """Cumulative counts ``e_j = floor(j n / m)`` of the quantile rule, ``j = 0..max_bins``.

  The one home of the quantile rule: sorted position ``i`` (1-based) lies in
  bin ``j`` iff ``e_{j-1} < i <= e_j``, i.e. ``(j-1) n/m < i <= j n/m``.
  Bins beyond ``m`` are empty (``e_j = n`` for ``j >= m``). Exact integer
  arithmetic (:func:`floor_mul_div`), so a traced sample count works.

  Args:
    n: number of samples: a Python int, or an int array (traced or not) of
      any shape ``lead`` (e.g. one count per row of masked data).
    num_bins: scalar bin count ``m >= 1`` (static or traced).
    max_bins: static bound on ``m``.

  Returns:
    ``lead + (max_bins + 1,)`` int32, ``e_0 = 0``, non-decreasing.

  Example:
    >>> quantile_ends(10, 4, 5).tolist()
    [0, 2, 5, 7, 10, 10]
  """
  n = jnp.asarray(n, jnp.int32)[..., None]
  m = jnp.asarray(num_bins, jnp.int32)
  j = jnp.arange(1, max_bins + 1, dtype=jnp.int32)
  ends = jnp.where(j >= m, n, floor_mul_div(j, n, jnp.maximum(m, 1)))
  zero = jnp.zeros(ends.shape[:-1] + (1,), jnp.int32)
  return jnp.concatenate([zero, ends.astype(jnp.int32)], axis=-1)


def quantile_bin_of_position(n_eff: jax.Array, m: jax.Array, size: int) -> jax.Array:
  """0-based quantile bin of sorted positions ``0..size-1`` (``-1`` at or beyond ``n_eff``).

  The inverse of :func:`quantile_ends` (the same rule, seen from a
  position): 1-based position ``i`` lies in the smallest bin ``j`` with
  ``e_j = floor(j n / m) >= i``, i.e. ``j n / m >= i``, i.e.
  ``j = ceil(i m / n)``; computed exactly with :func:`floor_mul_div`.
  ``tests/test_binning.py`` checks that the two agree.
  """
  pos = jnp.arange(1, size + 1, dtype=jnp.int32)
  nn = jnp.maximum(n_eff, 1)
  q = floor_mul_div(pos, m, nn)  # floor(i m / n)
  guess = q + (pos * m - q * nn > 0).astype(jnp.int32)  # ceil(i m / n), 1-based
  return jnp.where(pos <= n_eff, guess - 1, -1)


def bin_ends(
  sorted_scores: jax.Array,
  num_bins: ArrayLike,
  binning: str,
  max_bins: int,
  n_eff: ArrayLike | None = None,
) -> jax.Array:
  """Cumulative bin counts ``e_0 = 0, e_1, ..., e_max_bins`` in the sorted order.

  ``e_j`` is the number of samples whose bin is ``<= j``; bins beyond
  ``num_bins`` are empty (``e_j = n_eff``).

  Args:
    sorted_scores: ``(n,)`` scores sorted ascending; only the first ``n_eff``
      entries are samples (the rest, masked-out padding, is never read).
    num_bins: scalar int (static or traced), ``1 <= num_bins <= max_bins``
      for the fixed rule (larger values are clipped to ``max_bins`` bins).
    binning: ``"fixed"`` or ``"quantile"`` (static).
    max_bins: static bound; the result has ``max_bins + 1`` entries.
    n_eff: scalar number of samples (static or traced; default ``n``).

  Returns:
    ``(max_bins + 1,)`` int32, non-decreasing, ``e_0 = 0``.
  """
  n = sorted_scores.shape[0]
  n_eff = jnp.asarray(n if n_eff is None else n_eff, jnp.int32)
  m = jnp.asarray(num_bins, jnp.int32)
  if binning == "quantile":
    return quantile_ends(n_eff, m, max_bins)
  if binning != "fixed":
    raise ValueError(f"binning must be 'fixed' or 'quantile', got {binning!r}")
  # Vectorised bisection for the first sorted index whose bin exceeds j:
  # exactly consistent with the elementwise rule, in O(max_bins log n).
  j = jnp.arange(1, max_bins + 1, dtype=jnp.int32)
  lo = jnp.zeros_like(j)
  hi = jnp.broadcast_to(n_eff, j.shape)
  steps = max(1, math.ceil(math.log2(n + 1)))

  def body(_, carry):
    lo, hi = carry
    active = lo < hi
    mid = (lo + hi) // 2
    ok = fixed_bin_1based(sorted_scores[jnp.clip(mid, 0, n - 1)], m) <= j
    lo = jnp.where(active & ok, mid + 1, lo)
    hi = jnp.where(active & ~ok, mid, hi)
    return lo, hi

  lo, _ = jax.lax.fori_loop(0, steps, body, (lo, hi))
  ends = jnp.where(j >= m, n_eff, lo)
  return jnp.concatenate([jnp.zeros((1,), jnp.int32), ends.astype(jnp.int32)])


def bin_ids(
  scores: ArrayLike,
  num_bins: ArrayLike,
  binning: str = "fixed",
  *,
  where: ArrayLike | None = None,
) -> jax.Array:
  """0-based bin index of every sample, in the original order.

  ``fixed``: ``clip(ceil(s*m), 1, m) - 1`` (the product rounded in the
  scores' dtype; scores outside ``[0, 1]`` go to the first or last bin).
  ``quantile``: stable sort (ties by index), sorted position ``i`` (1-based)
  goes to ``ceil(i*m/n) - 1``.

  Args:
    scores: ``(n,)`` scalar scores.
    num_bins: scalar bin count ``m >= 1`` (int, static or traced); for the
      quantile rule at most ``n`` (checked on concrete inputs).
    binning: ``"fixed"`` (equal width on [0, 1]) or ``"quantile"`` (equal mass).
    where: optional ``(n,)`` bool mask of the samples to bin (default: all).
      Masked-out samples are treated as absent (quantile positions count
      only the others) and get bin ``-1``.

  Returns:
    ``(n,)`` int32 in ``[0, m)`` (``-1`` for masked-out samples).

  Raises:
    ValueError: scores not a non-empty finite vector, bad ``num_bins`` or
      unknown ``binning`` (eager calls).

  Example:
    >>> import jax.numpy as jnp
    >>> bin_ids(jnp.array([0.0, 0.1, 0.5, 1.0]), 2, "fixed").tolist()
    [0, 0, 0, 1]
    >>> bin_ids(jnp.array([0.3, 0.1, 0.3, 0.2]), 2, "quantile").tolist()
    [1, 0, 1, 0]

  Reference: Lu, Wu, Hartline and Hu, "Truthful Calibration Errors for
  Multi-Class Prediction", §2 (Binning): fixed bins ``((j-1)/m, j/m]`` with
  0 in the first, quantile bins ``(j-1)n/m < i <= jn/m`` on the sorted reports.
  """
  from jaxcal._src import validation as V  # local: validation imports nothing from here

  s = V.as_float(scores, "scores")
  if s.ndim != 1 or s.shape[0] == 0:
    raise ValueError(f"scores must have shape (n,) with n >= 1, got shape {tuple(s.shape)}")
  V.check_finite(s, "scores")
  binning = V.check_binning(binning)
  mm = V.check_num_bins(num_bins)
  if jnp.ndim(mm) != 0:
    raise ValueError(f"num_bins must be a scalar for bin_ids, got shape {jnp.shape(mm)}")
  n = s.shape[0]
  w = None if where is None else _check_where(where, n)
  if binning == "quantile" and V.is_concrete(mm) and int(mm) > n:
    raise ValueError(
      f"quantile binning with num_bins = {int(mm)} needs at least that many samples, got n = {n}"
    )
  m = jnp.asarray(mm, jnp.int32)
  if binning == "fixed":
    b = fixed_bin_1based(s, m) - 1
    return b if w is None else jnp.where(w, b, -1)
  order = jnp.argsort(masked_last(s, w), stable=True)
  ids = quantile_bin_of_position(sample_count(w, n), m, n)
  return jnp.zeros((n,), jnp.int32).at[order].set(ids)


def _check_where(where: ArrayLike, n: int) -> jax.Array:
  """An ``(..., n)`` bool sample mask, as a JAX array."""
  w = jnp.asarray(where)
  if w.dtype != jnp.bool_:
    raise ValueError(f"where must be a bool array (a sample mask), got dtype {w.dtype}")
  if w.ndim < 1 or w.shape[-1] != n:
    raise ValueError(f"where must have shape (n,) = ({n},), got {tuple(w.shape)}")
  return w


class BinnedSums(NamedTuple):
  """Per-bin statistics, one row per bin ``1..max_bins`` (empty rows are 0)."""

  sums: jax.Array  # (max_bins, d) per-bin sums of the values
  counts: jax.Array  # (max_bins,) number of samples per bin
  cumsums: jax.Array  # (max_bins, d) sums over bins <= j (for cumulative errors)


def binned_sums(
  scores: jax.Array,
  values: jax.Array,
  num_bins: ArrayLike,
  binning: str,
  max_bins: int,
  method: str = "auto",
  where: jax.Array | None = None,
) -> BinnedSums:
  """Sums of ``values`` over the bins of ``scores``.

  Everything that does not depend on ``num_bins`` (sort or edge histogram,
  prefix sums) is independent of it, so under ``vmap`` over bin counts it is
  computed once and each bin count costs ``O(max_bins)`` gathers
  (``O(max_bins log n)`` for the fixed rule with ``method="sort"``).

  Args:
    scores: ``(n,)`` binning scores.
    values: ``(n, d)`` values to sum per bin (e.g. residuals ``u - phi(y)``).
    num_bins: scalar bin count, static int or traced, ``1 <= num_bins <=
      max_bins`` (other values give meaningless rows; callers mask them).
    binning: ``"fixed"`` or ``"quantile"`` (static).
    max_bins: static bound on ``num_bins``.
    method: ``"auto"`` (default: ``"edges"`` for the fixed rule when
      possible, else ``"sort"``), ``"sort"`` or ``"edges"`` (static).
    where: optional ``(n,)`` bool sample mask; masked-out samples are treated
      exactly as if absent (their values are never added, also if NaN).

  Returns:
    :class:`BinnedSums` with ``max_bins`` rows; rows of empty bins and of bins
    beyond ``num_bins`` are zero (``cumsums`` rows repeat the running total).
  """
  m = jnp.asarray(num_bins, jnp.int32)
  if where is not None:
    values = jnp.where(where[:, None], values, 0)
  if _use_edges(binning, max_bins, scores.dtype, method):
    table = edge_table(int(max_bins), jnp.dtype(scores.dtype).name)
    k_count = table.thresholds.shape[0]
    bucket = _edge_bucket(scores, table)
    if where is not None:
      bucket = jnp.where(where, bucket, k_count + 1)  # out of range: dropped
    per = jax.ops.segment_sum(values, bucket, num_segments=k_count + 1)
    cnt = jax.ops.segment_sum(jnp.ones_like(bucket), bucket, num_segments=k_count + 1)
    zero = jnp.zeros((1,) + per.shape[1:], per.dtype)
    prefix = jnp.concatenate([zero, blocked_cumsum(per)])  # (K + 2, d)
    if scores.shape[0] < 2**24:  # counts exact in float32: cheaper to compile than cumsum
      ccum = jnp.round(blocked_cumsum(cnt.astype(jnp.float32))).astype(jnp.int32)
    else:
      ccum = jnp.cumsum(cnt)
    cprefix = jnp.concatenate([jnp.zeros((1,), jnp.int32), ccum])
    rows = jnp.asarray(table.index)[jnp.clip(m, 1, max_bins)]  # (max_bins,)
    rows = jnp.concatenate([jnp.zeros((1,), jnp.int32), rows])
    at_ends = prefix[rows]
    ends = cprefix[rows]
  else:
    n = scores.shape[0]
    s_sorted, order = jax.lax.sort(
      (masked_last(scores, where), jnp.arange(n, dtype=jnp.int32)), num_keys=1, is_stable=True
    )
    v_sorted = values[order]
    prefix = blocked_cumsum(v_sorted)
    prefix = jnp.concatenate([jnp.zeros((1,) + prefix.shape[1:], prefix.dtype), prefix])
    ends = bin_ends(s_sorted, m, binning, max_bins, sample_count(where, n))
    at_ends = prefix[ends]  # (max_bins + 1, d)
  sums = at_ends[1:] - at_ends[:-1]
  counts = ends[1:] - ends[:-1]
  sums = jnp.where((counts > 0)[:, None], sums, 0.0)
  return BinnedSums(sums=sums, counts=counts, cumsums=at_ends[1:])


def _sortable_int(s: jax.Array) -> jax.Array:
  """float32 -> int32 with the same order (``-0.0`` and ``+0.0`` share ``0``).

  :func:`~jaxcal._src.sorting.float_to_key` with the top bit flipped, so
  scores in ``(-2, 2)`` map into ``|k| < 2**30`` and ``2k + b`` fits int32.
  """
  return jax.lax.bitcast_convert_type(float_to_key(s) ^ jnp.uint32(0x80000000), jnp.int32)


def _from_sortable_int(k: jax.Array) -> jax.Array:
  return key_to_float(jax.lax.bitcast_convert_type(k, jnp.uint32) ^ jnp.uint32(0x80000000))


def _stable_sorted_residuals(scores, bits, sign, where):
  """``sign * (s - b)`` in the stable order of ``s``; masked-out samples last, as 0."""
  order = stable_argsort(masked_last(scores, where))
  resid = sign * (scores - bits.astype(scores.dtype))
  if where is not None:
    resid = jnp.where(where, resid, 0.0)
  return jnp.take_along_axis(resid, order, axis=-1)


#: ``method="auto"`` uses the fast int-key sort from this many samples on;
#: below it the stable payload sort is cheap and compiles faster.
FAST_SORT_MIN_N = 4096


def _repair_rows(scores, bits, where, mixed, resid, sign):
  """Re-sorts (stably, with a payload) only the rows that hold a mixed tie group.

  Up to ``max(1, rows // 4)`` such rows (static) are gathered, sorted exactly
  and scattered back. Returns the residuals and whether all such rows fitted.
  """
  rows = scores.shape[0]
  cap = max(1, rows // 4)
  row_mixed = jnp.any(mixed, axis=1)
  count = jnp.sum(row_mixed)
  iota = jnp.arange(rows, dtype=jnp.int32)
  neg, _ = jax.lax.top_k(jnp.where(row_mixed, -iota, -rows), cap)  # first `cap` such rows
  valid = jnp.arange(cap) < count
  ridx = jnp.clip(-neg, 0, rows - 1)
  w = None if where is None else where[ridx]
  exact = _stable_sorted_residuals(scores[ridx], bits[ridx], sign, w)
  out = resid.at[jnp.where(valid, ridx, rows)].set(exact, mode="drop")
  return out, count <= cap


def sorted_residual_prefix(
  scores: jax.Array,
  bits: jax.Array,
  sign: float = 1.0,
  method: str = "auto",
  where: jax.Array | None = None,
) -> jax.Array:
  """Prefix sums of ``sign * (s - b)`` in the stable sorted order of ``s``.

  Rows along the last axis (any leading batch shape). ``bits`` are 0/1.
  With a sample mask ``where`` (same shape), masked-out samples are placed
  after every sample with a zero residual: the first ``n_eff + 1`` entries
  of a row are those of the row without them, and the rest repeat the total.

  The stable sort by score (ties by index) is what the quantile rule
  needs, but on CPU a stable sort that carries a payload is several times
  slower than sorting one int32 array. With ``method="fast"`` (or
  ``"auto"`` and ``n >= FAST_SORT_MIN_N``) and float32 scores, each score is mapped to an order-preserving int32 ``k`` (``|k| <
  2**30`` for ``|s| < 2``) and ``2k + b`` is sorted alone: score order,
  and within equal scores the 0-bits first. That differs from the stable
  order only inside a tie group holding both bits ("mixed"); rows that hold
  one (up to a quarter of the rows) are re-sorted stably with a payload
  (:func:`_repair_rows`). With more such rows, or a score outside
  ``(-2, 2)``, one ``lax.cond`` falls back to the stable payload sort for
  all rows; ``method="sort"`` (and ``"auto"`` for small ``n``) always uses
  it. The predicates do not depend on the bin count, so under ``vmap`` over
  bin counts the conds stay conds (under a user's ``vmap`` over data sets
  they become selects: still exact, just slower).

  Returns:
    ``(..., n + 1)`` with a leading 0.
  """
  if method not in ("auto", "fast", "sort"):
    raise ValueError(f"method must be 'auto', 'fast' or 'sort', got {method!r}")
  scores, bits = jnp.asarray(scores), jnp.asarray(bits)
  lead, n = scores.shape[:-1], scores.shape[-1]
  s2 = scores.reshape((-1, n))
  b2 = bits.reshape((-1, n))
  w2 = None if where is None else jnp.broadcast_to(where, scores.shape).reshape((-1, n))
  use_fast = method == "fast" or (method == "auto" and n >= FAST_SORT_MIN_N)
  if use_fast and scores.dtype == jnp.float32 and n >= 2:
    key = _sortable_int(s2) * 2 + b2.astype(jnp.int32)
    if w2 is not None:  # masked-out samples sort after all others
      key = jnp.where(w2, key, jnp.iinfo(jnp.int32).max)
    key = jax.lax.sort(key, dimension=1, is_stable=False)
    hi = key >> 1
    mixed = (hi[:, 1:] == hi[:, :-1]) & (key[:, 1:] != key[:, :-1])
    fast = sign * (_from_sortable_int(hi) - (key & 1).astype(jnp.float32))
    if w2 is not None:
      fast = jnp.where(jnp.arange(n) < sample_count(w2, n)[:, None], fast, 0.0)
    fast, fits = jax.lax.cond(
      jnp.any(mixed),
      lambda r: _repair_rows(s2, b2, w2, mixed, r, sign),
      lambda r: (r, jnp.bool_(True)),
      fast,
    )
    in_range = jnp.abs(s2) < 2.0
    if w2 is not None:
      in_range = in_range | ~w2
    ok = jnp.all(in_range) & fits
    resid = jax.lax.cond(ok, lambda: fast, lambda: _stable_sorted_residuals(s2, b2, sign, w2))
  else:
    resid = _stable_sorted_residuals(s2, b2, sign, w2)
  prefix = blocked_cumsum(resid, axis=1)
  prefix = jnp.concatenate([jnp.zeros((prefix.shape[0], 1), prefix.dtype), prefix], axis=1)
  return prefix.reshape(lead + (n + 1,))


def binned_residual_sums(
  scores: jax.Array,
  bits: jax.Array,
  num_bins: ArrayLike,
  binning: str,
  max_bins: int,
  sign: float = 1.0,
  method: str = "auto",
  where: jax.Array | None = None,
) -> BinnedSums:
  """:func:`binned_sums` of ``sign * (s - b)`` for 0/1 ``bits``, row-wise.

  Every binned calibration error is of this form (confidence: ``c - z``;
  classwise: ``p_r - 1[y = r]``; binary: ``p - y``). ``scores``/``bits``
  are ``(..., n)``; results have ``(..., max_bins)`` rows. Fixed binning
  uses :func:`binned_sums` per row (sort-free when possible); quantile
  binning uses :func:`sorted_residual_prefix` and integer bin ends.
  ``method``: ``"auto"``, ``"sort"`` (stable sort / bisection everywhere),
  ``"edges"`` (fixed only) or ``"fast"`` (quantile int-key sort at any n).
  ``where``: optional bool sample mask broadcastable to ``scores``' shape;
  masked-out samples are treated exactly as if absent (quantile bins are
  equal-mass over the remaining ``n_eff`` samples of each row).
  """
  scores, bits = jnp.asarray(scores), jnp.asarray(bits)
  lead = scores.shape[:-1]
  n = scores.shape[-1]
  if where is not None:
    where = jnp.broadcast_to(where, scores.shape)
  if binning == "quantile":
    prefix = sorted_residual_prefix(
      scores, bits, sign, method if method in ("fast", "sort") else "auto", where=where
    )
    ends = quantile_ends(
      sample_count(where, n), num_bins, max_bins
    )  # (max_bins + 1,) or lead + that
    if where is None:
      at_ends = prefix[..., ends]  # (..., max_bins + 1)
    else:
      at_ends = jnp.take_along_axis(prefix, ends, axis=-1)
    counts = jnp.broadcast_to(ends[..., 1:] - ends[..., :-1], lead + (max_bins,))
    sums = jnp.where(counts > 0, at_ends[..., 1:] - at_ends[..., :-1], 0.0)
    return BinnedSums(sums=sums[..., None], counts=counts, cumsums=at_ends[..., 1:, None])
  if binning != "fixed":
    raise ValueError(f"binning must be 'fixed' or 'quantile', got {binning!r}")
  s2 = scores.reshape((-1, n))
  v2 = (sign * (scores - bits.astype(scores.dtype))).reshape((-1, n, 1))
  fixed_method = "auto" if method == "fast" else method
  if where is None:
    out = jax.vmap(lambda s, v: binned_sums(s, v, num_bins, "fixed", max_bins, fixed_method))(
      s2, v2
    )
  else:
    out = jax.vmap(
      lambda s, v, w: binned_sums(s, v, num_bins, "fixed", max_bins, fixed_method, where=w)
    )(s2, v2, where.reshape((-1, n)))
  return jax.tree_util.tree_map(lambda a: a.reshape(lead + a.shape[1:]), out)
