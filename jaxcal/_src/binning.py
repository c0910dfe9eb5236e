"""Outcome-independent binning and exact per-bin residual sums.

Everything here works on *one* data set (rows of scores along the last axis)
and a (possibly traced) bin count ``num_bins`` bounded by a static
``max_bins``; batches come from ``jax.vmap``. The work that does not depend
on the bin count (a sort, or a histogram over fixed thresholds) is done once,
so under ``vmap`` over bin counts each bin count costs ``O(max_bins)``.

Rules (1-based bins ``j = 1..m``):

* ``fixed``: bin of ``s`` is ``clip(ceil(s*m), 1, m)``, the product taken in
  the scores' floating dtype, float32 for float16 / bfloat16 scores (which
  are upcast first: ``float16(0.7) = 0.70019...`` is in bin 8 of 10, as its
  exact value says), so the numpy float32 expression
  ``np.ceil(s * np.float32(m))`` gives the same bins:
  :func:`fixed_bin_1based`.
* ``quantile``: sorted position ``i`` (1-based, stable sort: ties by index)
  is in bin ``j`` iff ``e_{j-1} < i <= e_j`` with ``e_j = floor(j n / m)``:
  :func:`quantile_ends` and its inverse :func:`quantile_bin_of_position`.
  Ties may be split across bins.

Every binned calibration error is a function of per-bin sums of residuals
``s - b`` (score minus a 0/1 outcome bit): :func:`binned_residual_sums`.
Each bin is a contiguous run of the sorted order, so its sum is a difference
of two prefix sums. For float32 scores (and narrower ones, upcast) the sums
are **exact fixed-point integer sums**: every score ``|s| < 2`` is rounded to
a multiple of ``2**-29`` (an error below ``1e-9`` per sample, none at all for
``|s| >= 2**-6``), split into small int32 limbs, and summed in integers; a bin
sum is converted to float32 once, at the end (within 2 ulp). The result does
not depend on the order of summation: a padded data set, a batch, a sharded
or a streamed one give the same bits, and a float32 error at ``n = 10**6`` is
as accurate as a float64 one down to that resolution: a bin's mean residual
is within ``2**-30`` (9.3e-10) of its float64 value, so an error whose own
size is about 1e-9 (probabilities below 1e-9 on every other class of a very
confident model) is not resolved in float32; compute those in float64. A
score outside ``(-2, 2)`` (or NaN) makes its row's sums NaN (probabilities
never are; validated inputs cannot be). float64 scores (with 64-bit JAX on,
``jax.enable_x64(True)``) are summed in float64.

Two strategies find the bins:

* **sort** (quantile rule; fixed rule with ``max_bins >`` :data:`EDGES_MAX_BINS`):
  each sample becomes one ``uint32`` key ``2 k(s) + b``, with ``k`` an
  order-preserving integer image of the score. Up to
  :data:`FAST_SORT_MIN_N` (2**19) samples the keys go through the stable
  argsort (on CPU one native sort of packed ``uint64`` words). Above, one
  native single-operand sort orders them by score and, inside a tie, 0-bits
  first. That is the stable order except inside a *mixed* tie group (equal
  scores with both bits), where the stable order interleaves the bits by
  sample index, and it matters only where a bin end cuts such a group.
  Those groups are repaired without a second sort of the row
  (:func:`_fix_mixed_ties`): a Bloom filter
  of their values picks out their members (few, in practice), which are
  sorted by (group, index) in a small array and written back. Only when
  more than :func:`_tie_cap` samples need it does the row fall back to the
  stable argsort (one ``lax.cond`` whose predicate, under a ``vmap``
  over data sets, is reduced over the batch: see :func:`_cond_any`). Exact
  prefix sums are kept for every sorted position, or per block of 16 above
  ``2**16`` samples (:func:`_block_size`); a bin end reads one prefix and
  sums at most 15 samples.
* **edges** (fixed rule, ``max_bins <= EDGES_MAX_BINS``): no sort at all.
  For every ``m <= max_bins`` and ``j <= m`` the rule ``ceil(fl(s*m)) <= j``
  is the same as ``s <= T(m, j)`` for one float threshold ``T(m, j)`` (the
  largest float whose rounded product with ``m`` is ``<= j``; within an ulp
  of ``j/m``). The sorted, de-duplicated thresholds of all ``(m, j)`` depend
  only on ``max_bins`` and the dtype, so they are computed once in numpy;
  each sample is dropped into its threshold interval (a power-of-two grid
  lookup plus at most a few comparisons), the integer limbs are summed per
  interval and prefix-summed. A bin count then only gathers ``max_bins``
  entries of a static ``(max_bins + 1, max_bins)`` index table: the classwise
  fixed-bin errors need no sort of ``C`` columns of length ``n``. A caller
  with one bin count, not batched (``single_count``: the public calls with
  one concrete count), skips the table on the CPU: each sample goes straight
  into its bin ``clip(ceil(s*m), 1, m)`` of that count, and the same limbs
  are summed over ``max_bins`` bins instead of the ``K + 1`` intervals (on a
  GPU the table's scatter into more targets is the faster one).

Sample masks: every primitive takes ``where`` (a bool mask over the samples,
or ``None``). A masked-out sample is treated exactly as if it were absent:
``n`` becomes the number of True entries, quantile positions count only them
(masked samples sort after every sample), and sums never read their values.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcal._src import validation as V
from jaxcal._src.numerics import PRECISION, lift, map_batches
from jaxcal._src.sorting import argsort_keys, float_to_key, key_to_float, stable_argsort

__all__ = [
  "blocked_cumsum",
  "floor_mul_div",
  "ceil_mul_div",
  "fixed_bin_1based",
  "quantile_ends",
  "quantile_bin_of_position",
  "bin_ends",
  "bin_ids",
  "sample_count",
  "masked_last",
  "fixed_thresholds",
  "edge_table",
  "EDGES_MAX_BINS",
  "FAST_SORT_MIN_N",
  "BinnedSums",
  "binned_sums",
  "sorted_residual_prefix",
  "binned_residual_sums",
  "midpoint_mass_ends",
]


# --------------------------------------------------------------------------
# Prefix sums and exact integer arithmetic.
# --------------------------------------------------------------------------


def blocked_cumsum(x: jax.Array, block: int = 128, axis: int = 0) -> jax.Array:
  r"""Inclusive prefix sum along ``axis``: blocked matmuls (a scan on GPUs), exact for int32.

  .. math::
    \mathrm{out}_i = \sum_{j \le i} x_j

  On a CPU (and a TPU): prefix sums within blocks of ``block`` entries (a
  matmul with a triangular matrix of ones), then the prefix sum of the block
  totals (recursively) added to each block. For floats the rounding error
  grows like ``block + n/block`` additions rather than ``n``. int32 inputs
  are split into 16-bit halves whose block sums are exact in float32, so the
  result is exact whenever the true prefix sums fit in int32. (XLA:CPU
  lowers ``jnp.cumsum`` to a full-window ``reduce_window`` that is slow to
  compile and, for integers, slow to run; the matmul form compiles in a
  fraction of the time and runs as fast as a plain loop.)

  On a GPU (CUDA, ROCm): ``jax.lax.associative_scan`` (rounding error
  growing like ``log2 n`` additions; integer sums exact modulo ``2**32``).
  The matmul form makes XLA autotune a matrix product at every call site
  when it compiles: for a ``(1500, 15000)`` float32 array on an H100 its
  cold first call took 6.5 s against 0.6 s for the scan, and 0.47 against
  0.37 ms after it (``experiments/results/uc_stages_gpu.json``).

  Args:
    x: float or int32 array.
    block: entries per block (static; the matmul form).
    axis: the axis to sum along (static).

  Returns:
    Array of ``x``'s shape with ``out[..., i, ...] = sum(x[..., :i+1, ...])``
    (int32 for integer and bool inputs).

  Example:
    >>> import jax.numpy as jnp
    >>> blocked_cumsum(jnp.array([3, -1, 2**20, 5], jnp.int32)).tolist()
    [3, 2, 1048578, 1048583]

  Reference: Blelloch (1990), "Prefix sums and their applications", CMU-CS-90-190
  (the scan); Higham (1993), "The accuracy of floating point summation", SIAM J.
  Sci. Comput. 14(4) (the error of blocked and pairwise sums).
  """
  x = jnp.moveaxis(jnp.asarray(x), axis, -1)
  if jnp.issubdtype(x.dtype, jnp.floating):
    matmul = functools.partial(_mm_cumsum_last, block=block)
  elif x.dtype in (jnp.int32, jnp.uint32) or x.dtype == jnp.bool_:
    matmul = functools.partial(_int_cumsum_last, block=16, small=x.dtype == jnp.bool_)
    x = x.astype(jnp.int32)
  else:
    return jnp.moveaxis(jnp.cumsum(x, axis=-1), -1, axis)
  out = jax.lax.platform_dependent(
    x, cpu=matmul, cuda=_scan_cumsum_last, rocm=_scan_cumsum_last, default=matmul
  )
  return jnp.moveaxis(out, -1, axis)


def _scan_cumsum_last(x: jax.Array) -> jax.Array:
  """Inclusive prefix sum along the last axis by a work-efficient parallel scan."""
  if x.shape[-1] < 2:
    return x
  return jax.lax.associative_scan(jnp.add, x, axis=x.ndim - 1)


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


def _int_cumsum_last(x: jax.Array, block: int, small: bool = False) -> jax.Array:
  """Exact int32 prefix sums (modulo 2**32) along the last axis from float32 matmuls.

  Block sums within ``block`` entries are exact in float32 when
  ``|x| * block < 2**24``: with ``small`` the caller guarantees
  ``|x| < 2**24 / block``; otherwise ``x`` is split into 16-bit halves.
  Small blocks cost fewer flops (``block`` per entry, then ``1/block`` of
  that for the block totals, recursively); exactness does not depend on it.
  """
  block = min(block, 128)  # 2**16 * 128 < 2**24: block sums of a half are exact
  n = x.shape[-1]
  nb = -(-n // block)
  size = min(n, block)
  xp = jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, nb * size - n)])
  xp = xp.reshape(x.shape[:-1] + (nb, size))
  tri = jnp.triu(jnp.ones((size, size), jnp.float32))

  def mm(v):
    return jnp.matmul(v.astype(jnp.float32), tri, precision=PRECISION).astype(jnp.int32)

  within = mm(xp) if small else mm(xp & 0xFFFF) + (mm(xp >> 16) << 16)  # wraps: exact mod 2**32
  if nb == 1:
    return within.reshape(x.shape[:-1] + (size,))[..., :n]
  totals = within[..., -1]
  offsets = _int_cumsum_last(totals, block) - totals
  out = within + offsets[..., None]
  return out.reshape(x.shape[:-1] + (nb * size,))[..., :n]


def floor_mul_div(a: jax.Array, b: jax.Array, c: jax.Array) -> jax.Array:
  """Exact ``floor(a * b / c)`` for non-negative int32 without overflow.

  A float estimate is corrected with the remainder ``a*b - k*c``, computed in
  wrapping int32 arithmetic (exact, because the true remainder is small).
  Valid while the result and ``|estimate error| * c`` fit in int32.

  Example:
    >>> floor_mul_div(2**20, 2**11, 3).tolist()
    715827882
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


def ceil_mul_div(a: jax.Array, b: jax.Array, c: jax.Array) -> jax.Array:
  """Exact ``ceil(a * b / c)`` for non-negative int32 without overflow (see :func:`floor_mul_div`).

  Example:
    >>> ceil_mul_div(2**20, 2**11, 3).tolist(), ceil_mul_div(6, 2, 3).tolist()
    (715827883, 4)
  """
  a, b, c = (jnp.asarray(v, jnp.int32) for v in (a, b, c))
  q = floor_mul_div(a, b, c)
  return q + (a * b - q * c > 0).astype(jnp.int32)  # the remainder: exact, wrapping


# --------------------------------------------------------------------------
# The two binning rules (their one home).
# --------------------------------------------------------------------------


def fixed_bin_1based(s: jax.Array, m: jax.Array) -> jax.Array:
  """Equal-width bin ``clip(ceil(s*m), 1, m)`` (1-based), the product in ``s``'s dtype.

  The metrics pass float16 / bfloat16 scores upcast to float32, so their
  product is a float32 one.
  """
  m = jnp.asarray(m, jnp.int32)
  b = jnp.ceil(s * m.astype(s.dtype)).astype(jnp.int32)
  return jnp.clip(b, 1, m)


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
  ``j = ceil(i m / n)``; computed exactly with :func:`ceil_mul_div`.
  ``tests/test_binning.py`` checks that the two agree.
  """
  pos = jnp.arange(1, size + 1, dtype=jnp.int32)
  m = jnp.asarray(m, jnp.int32)
  nn = jnp.maximum(n_eff, 1)
  return jnp.where(pos <= n_eff, ceil_mul_div(pos, m, nn) - 1, -1)  # ceil(i m / n), 1-based


# --------------------------------------------------------------------------
# Sample masks.
# --------------------------------------------------------------------------


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
  # a placeholder, not a sample: no derivative (nextafter has no JVP rule, so
  # jax.grad of a masked uc or debiased_ce raised NotImplementedError)
  big = jax.lax.stop_gradient(jnp.max(jnp.where(where, scores, -jnp.inf), axis=-1, keepdims=True))
  dt = scores.dtype
  after = jnp.maximum(jnp.nextafter(big, jnp.asarray(jnp.inf, dt)), jnp.finfo(dt).tiny)
  return jnp.where(where, scores, after)


def _check_where(where: ArrayLike, n: int) -> jax.Array:
  """An ``(..., n)`` bool sample mask, as a JAX array."""
  # a host value is read as numpy first: jnp.asarray("yes") raised JAX's own TypeError
  w = where if isinstance(where, jax.Array | jax.core.Tracer) else V.host_array(where, "where")
  if w.dtype != jnp.bool_:
    raise ValueError(f"where must be a bool array (a sample mask), got dtype {w.dtype}")
  w = jnp.asarray(w)
  if w.ndim < 1 or w.shape[-1] != n:
    raise ValueError(f"where must have shape (n,) = ({n},), got {tuple(w.shape)}")
  return w


# --------------------------------------------------------------------------
# Sort-free fixed bins: the threshold table.
# --------------------------------------------------------------------------

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


def fixed_thresholds(m: np.ndarray, j: np.ndarray, dtype_name: str) -> np.ndarray:
  """The fixed rule's bin thresholds ``T(m, j)`` for given pairs ``(m, j)`` (host numpy).

  ``T(m, j)`` is the largest value ``t`` of the scores' dtype with
  ``fl(t * m) <= j``, so that ``clip(ceil(fl(s * m)), 1, m) <= j`` iff
  ``s <= T(m, j)`` (for ``j < m``). Computed by stepping a few ulps around
  ``j / m`` (the rounded product is monotone in ``t``), checked on the
  candidates. ``O(len(m))``: a streaming state of one large bin count needs
  only its own ``m - 1`` thresholds, not :func:`edge_table`'s ``m^2 / 2``.

  Args:
    m: int64 bin counts, any shape.
    j: int64 bin indices ``1 <= j <= m``, the same shape.
    dtype_name: the scores' dtype, ``"float32"`` or ``"float64"``.

  Returns:
    ``T(m, j)`` in that dtype, the shape of ``m``.

  Example:
    >>> fixed_thresholds(np.array([4, 4]), np.array([1, 2]), "float64").tolist()
    [0.25, 0.5]

  Reference: Lu, Wu, Hartline & Hu (2025), Truthful Calibration Errors for
  Multi-Class Prediction, §3 (fixed, outcome-independent binning).
  """
  dt = np.dtype(dtype_name)
  ft = dt.type
  mf, jf = np.asarray(m).astype(dt), np.asarray(j).astype(dt)
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
  return best


@functools.lru_cache(maxsize=16)
def edge_table(max_bins: int, dtype_name: str) -> EdgeTable:
  """Thresholds ``T(m, j)`` of the fixed rule for all ``1 <= j <= m <= max_bins``.

  ``T(m, j)`` as :func:`fixed_thresholds` computes it, with the index of each
  in the sorted unique thresholds (``O(max_bins^2)`` entries).
  """
  mm = np.concatenate([np.full(m, m, np.int64) for m in range(1, max_bins + 1)])
  jj = np.concatenate([np.arange(1, m + 1, dtype=np.int64) for m in range(1, max_bins + 1)])
  best = fixed_thresholds(mm, jj, dtype_name)
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
  if method not in ("auto", "sort", "edges", "fast"):
    raise ValueError(f"method must be 'auto', 'sort', 'edges' or 'fast', got {method!r}")
  if binning != "fixed":
    if method == "edges":
      raise ValueError("method='edges' applies to fixed binning only")
    return False
  if method in ("sort", "fast"):
    return False
  supported = jnp.dtype(dtype) in (jnp.dtype(jnp.float32), jnp.dtype(jnp.float64))
  if method == "edges":
    if not supported:
      raise ValueError(f"method='edges' needs float32/float64 scores, got {jnp.dtype(dtype)}")
    return True
  return supported and max_bins <= EDGES_MAX_BINS


# --------------------------------------------------------------------------
# Bin ends and bin ids.
# --------------------------------------------------------------------------


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


@V.same_arguments
def bin_ids(
  scores: ArrayLike,
  num_bins: ArrayLike,
  binning: str = "fixed",
  *,
  where: ArrayLike | None = None,
) -> jax.Array:
  """0-based bin index of every sample, in the original order.

  ``fixed``: ``clip(ceil(s*m), 1, m) - 1`` (the product rounded in the
  scores' dtype, float32 for float16 / bfloat16 scores, which are upcast;
  scores outside ``[0, 1]`` go to the first or last bin).
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
    ``(n,)`` int32 in ``[0, m)`` (``-1`` for masked-out samples; under
    ``jit`` / ``vmap`` every id is ``-1`` when a selected score is NaN or
    inf).

  Raises:
    ValueError: scores not a non-empty vector, finite where selected, bad
      ``num_bins`` or ``where``, or unknown ``binning`` (eager calls).

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
  binning = V.check_binning(binning)
  mm = V.check_num_bins(num_bins)
  if jnp.ndim(mm) != 0:
    raise ValueError(f"num_bins must be a scalar for bin_ids, got shape {jnp.shape(mm)}")
  n = s.shape[0]
  w = None if where is None else _check_where(where, n)
  V.check_values(s, "scores", where=w)  # eager: raises for a selected NaN / inf
  if binning == "quantile" and V.is_concrete(mm, w):
    # the selected samples, as every quantile-binned metric counts them (one scalar read)
    # (evaluated now: a mask closed over by a user's jit is concrete, its sum a tracer)
    with jax.ensure_compile_time_eval():
      k = n if w is None else int(jnp.sum(w, dtype=jnp.int32))
    if int(mm) > k:
      raise ValueError(
        f"quantile binning with num_bins = {int(mm)} needs at least that many samples, got "
        f"n = {k}" + (" selected by where" if w is not None else "")
      )
  m = jnp.asarray(mm, jnp.int32)
  if not V.is_concrete(m):  # ids of m < 1 are all -1; checked mode raises as eager calls do
    V.trace_check(m >= 1, "num_bins must be >= 1, got {m}", m=m)
  if binning == "fixed":
    b = fixed_bin_1based(s, m) - 1
    out = b if w is None else jnp.where(w, b, -1)
  else:
    order = jnp.argsort(masked_last(s, w), stable=True)
    ids = quantile_bin_of_position(sample_count(w, n), m, n)
    out = jnp.zeros((n,), jnp.int32).at[order].set(ids)
  if V.is_concrete(s, w):
    return out
  # traced: a selected NaN / inf would get a plausible bin (and shift the quantile
  # positions of the others); integers cannot be NaN, so every id becomes -1 (no bin)
  bad = ~jnp.isfinite(s) if w is None else w & ~jnp.isfinite(s)
  return jnp.where(jnp.any(bad), -1, out)


# --------------------------------------------------------------------------
# Generic float engine: any values, any float dtype.
# --------------------------------------------------------------------------


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
  """Float sums of arbitrary ``values`` over the bins of ``scores``.

  The generic engine (float sums in the values' dtype); residual sums of
  float32 scores use the exact integer engine of
  :func:`binned_residual_sums` instead. Everything that does not depend on
  ``num_bins`` (sort or edge histogram, prefix sums) is computed once under
  ``vmap`` over bin counts.

  Args:
    scores: ``(n,)`` binning scores.
    values: ``(n, d)`` values to sum per bin.
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
    cprefix = jnp.concatenate([jnp.zeros((1,), jnp.int32), blocked_cumsum(cnt)])
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


def sorted_residual_prefix(
  scores: jax.Array, bits: jax.Array, sign: float = 1.0, where: jax.Array | None = None
) -> jax.Array:
  """Float prefix sums of ``sign * (s - b)`` in the stable sorted order of ``s``.

  Rows along the last axis (any leading batch shape), any float dtype and
  any scores. Masked-out samples (``where``) are placed after every sample
  with a zero residual: the first ``n_eff + 1`` entries of a row are those
  of the row without them, and the rest repeat the total. This is the float
  engine of the quantile rule (used for float64 scores); float32 residual
  sums go through the exact engine of :func:`binned_residual_sums`.

  Returns:
    ``(..., n + 1)`` with a leading 0.
  """
  scores, bits = jnp.asarray(scores), jnp.asarray(bits)
  order = stable_argsort(masked_last(scores, where))
  resid = sign * (scores - bits.astype(scores.dtype))
  if where is not None:
    resid = jnp.where(where, resid, 0.0)
  resid = jnp.take_along_axis(resid, order, axis=-1)
  prefix = blocked_cumsum(resid, axis=-1)
  return jnp.concatenate([jnp.zeros(prefix.shape[:-1] + (1,), prefix.dtype), prefix], axis=-1)


def _float_residual_sums(s, b, m, binning, max_bins, sign, method, where):
  """BinnedSums of one row in floating point (float64 scores)."""
  n = s.shape[0]
  if binning == "quantile":
    prefix = sorted_residual_prefix(s, b, sign, where)
    ends = quantile_ends(sample_count(where, n), m, max_bins)
    at_ends = prefix[ends]
    counts = ends[1:] - ends[:-1]
    sums = jnp.where(counts > 0, at_ends[1:] - at_ends[:-1], 0.0)
    return BinnedSums(sums=sums[:, None], counts=counts, cumsums=at_ends[1:, None])
  v = (sign * (s - b.astype(s.dtype)))[:, None]
  return binned_sums(s, v, m, "fixed", max_bins, "sort" if method == "fast" else method, where)


# --------------------------------------------------------------------------
# Exact integer engine: per-bin residual sums of float32 scores.
# --------------------------------------------------------------------------
#
# A score |s| < 2 is represented by the integer q = round(s * 2**29) in
# (-2**30, 2**30) (exact for |s| >= 2**-6; otherwise within 2**-30). q is cut
# into "limbs": low limbs of at most `w` bits (non-negative) and a signed top
# limb q >> top, with `w` and `top` chosen from n so that every limb summed
# over all n samples fits in int32 (n < 2**30: MAX_EXACT_SAMPLES, _layout).
# A sample's contribution is the int32 vector [top limb, low limbs..., bit
# (, 1)], and every sum of contributions is exact. A bin (or prefix) has
# residual sum
#   sum(s) - sum(b) = ((T - B 2**(29 - top)) 2**top + sum_k L_k 2**off_k) 2**-29
# after the low limbs L are normalised (carries moved up into the top T, and
# the bits taken off it: _normalised_limbs).

_FRAC_BITS = 29
_KEY_BASE = 0x40000000  # float_to_key of -2.0 (exclusive) .. 2.0: keys in [BASE, 3 BASE)
_SENTINEL = 0xFFFFFFFF  # key of a masked-out sample: after every sample


def _block_size(n: int) -> int:
  """Sorted positions per block of exact prefix sums (static).

  A bin end reads one block prefix and adds at most ``block - 1`` samples.
  Up to ``2**16`` samples every position keeps its prefix (a bin end is one
  gather); above, blocks of 16 keep the prefix arrays small and cheap to build.
  """
  return 1 if n <= 1 << 16 else 16


class _Layout(NamedTuple):
  """How a sample's fixed-point score is cut into int32 limbs (static)."""

  widths: tuple[int, ...]  # low limbs, low to high (offsets 0, w0, w0 + w1, ...)
  top: int  # bit offset of the signed top limb q >> top
  bit: bool = True  # a column for the outcome bit
  count: bool = False  # a trailing column of ones (sample counts)

  @property
  def columns(self) -> int:
    return 1 + len(self.widths) + self.bit + self.count


#: Most samples per row of the exact integer engine (float32 scores): its
#: limbs of a sum over ``n >= 2**30`` samples would not fit in int32
#: (:func:`_layout`).
MAX_EXACT_SAMPLES = 2**30 - 1


@functools.cache
def _layout(n: int, bit: bool = True, count: bool = False) -> _Layout:
  """The limb layout for sums over up to ``n`` samples (static).

  Every float32 caller of the engine gets its layout here, so this is where
  a row of more than :data:`MAX_EXACT_SAMPLES` samples is refused, with a
  ``ValueError`` at trace time.

  Exactness (``nb = bitlen(n) <= 30``, ``q`` in ``(-2**30, 2**30)``): low
  limbs of ``w = min(15, 31 - nb) >= 1`` bits sum over at most ``n < 2**nb``
  samples to at most ``n (2**w - 1)``, and with the carry from the limb below
  (less than ``n``) to less than ``n 2**w < 2**31``. The top limb starts at
  ``top >= nb`` (``top = min(max(29, nb), low w)`` with ``low w >= nb``), so
  its sum is at most ``n 2**(30 - top) < 2**30`` in size. Up to ``top = 29``
  the bits ``B 2**(29 - top) < 2**29`` come off the top in int32. At ``nb =
  30`` (``2**29 <= n < 2**30``) the top limb is ``q >> 30`` (``top = 30``,
  30 one-bit low limbs): a unit of the top is 2, and the residual sum in
  ``(-3n, 2n)`` would not fit in int32 in units of 1 (with ``top = 29``,
  ``n`` scores near -2 with bits 1 wrapped past ``-2**31``); the bits come
  off as ``B >> 1`` from the top and ``B & 1`` from the one-bit limb at
  offset 29, leaving a top in ``[-1.5 n - 1, n)``.

  As few limbs as that allows: 1 low limb below ``n = 2**15``, 2 below
  ``2**20``, 3 below ``2**23``, 30 from ``2**29``.
  """
  if n > MAX_EXACT_SAMPLES:
    raise ValueError(
      f"the binned errors' exact float32 engine sums at most 2**30 - 1 = {MAX_EXACT_SAMPLES:,} "
      f"samples per row (in int32 limbs), got {n:,}: split the samples into batches of at "
      "most that size and combine them with jaxcal.streaming.FixedBins (every fixed-bin "
      "error, exactly), or pass float64 scores with 64-bit JAX on (jax.enable_x64(True))"
    )
  nb = max(int(n), 1).bit_length()
  w = min(15, 31 - nb)
  low = max(1, -(-nb // w))
  top = min(max(_FRAC_BITS, nb), low * w)
  widths = [w] * (low - 1) + [top - w * (low - 1)]
  return _Layout(tuple(widths), top, bit, count)


def _fixed_point(s: jax.Array) -> jax.Array:
  """``q + 2**30`` with ``q = round(s * 2**29)`` (int32, in ``[0, 2**31)`` for ``|s| < 2``)."""
  return jnp.round(s * (2.0**_FRAC_BITS)).astype(jnp.int32) + (1 << 30)


#: The word of a sample that contributes nothing (score 0, bit 0).
_ZERO_WORD = 1 << 30


def _words(s: jax.Array, bit: jax.Array, valid: jax.Array | None = None) -> jax.Array:
  """Packed uint32 words ``(q + 2**30) | bit << 31`` (:data:`_ZERO_WORD` where not ``valid``)."""
  w = _fixed_point(s).astype(jnp.uint32) | (bit.astype(jnp.uint32) << 31)
  return w if valid is None else jnp.where(valid, w, jnp.uint32(_ZERO_WORD))


@functools.cache
def _part_vectors(layout: _Layout) -> tuple[np.ndarray, ...]:
  """Shifts, masks and offsets that turn a word into its parts (one vector op)."""
  # top limb of q = (q + 2**30) >> top, less 2**(30 - top) (an exact multiple)
  shifts, masks, add = [layout.top], [(1 << (31 - layout.top)) - 1], [-(1 << (30 - layout.top))]
  off = 0
  for w in layout.widths:  # low limbs of q + 2**30 equal those of q (2**30 is above them)
    shifts.append(off)
    masks.append((1 << w) - 1)
    add.append(0)
    off += w
  if layout.bit:
    shifts.append(31)
    masks.append(1)
    add.append(0)
  if layout.count:
    shifts.append(0)
    masks.append(0)
    add.append(1)
  return np.array(shifts, np.uint32), np.array(masks, np.uint32), np.array(add, np.int32)


def _parts(words: jax.Array, layout: _Layout) -> jax.Array:
  """``(..., layout.columns)`` int32 contributions of packed words (:func:`_words`).

  Built as one broadcast elementwise op over the last axis (stacking the
  columns is 2.6x slower on CPU).
  """
  shifts, masks, add = (lift(a, words.ndim + 1) for a in _part_vectors(layout))
  return ((words[..., None] >> shifts) & masks).astype(jnp.int32) + add


def _normalised_limbs(parts: jax.Array, layout: _Layout) -> tuple[jax.Array, list[jax.Array]]:
  """``(top, low limbs)`` of summed parts: carries propagated, the bits taken off the top.

  ``sum(s) - sum(b) = top 2**(layout.top - 29) + sum_k low_k 2**(off_k - 29)``
  exactly, each ``low_k`` in ``[0, 2**widths[k])``.
  """
  top = parts[..., 0]
  low = [parts[..., 1 + k] for k in range(len(layout.widths))]
  for k, w in enumerate(layout.widths):
    carry = low[k] >> w
    low[k] = low[k] & ((1 << w) - 1)
    if k + 1 < len(low):
      low[k + 1] = low[k + 1] + carry
    else:
      top = top + carry
  if layout.bit:
    bits = parts[..., 1 + len(layout.widths)]
    if layout.top <= _FRAC_BITS:
      top = top - (bits << (_FRAC_BITS - layout.top))
    else:  # top = 30 (n >= 2**29, see _layout): B 2**29 = (B >> 1) 2**30 + (B & 1) 2**29
      rest = low[-1] - (bits & 1)  # the one-bit limb at offset 29, less B & 1: in {-1, 0, 1}
      low[-1] = rest & 1
      top = top - (bits >> 1) + (rest >> 1)  # in [-1.5 n - 1, n): fits in int32
  return top, low


def _parts_to_terms(parts: jax.Array, layout: _Layout) -> list[jax.Array]:
  """``sum(s) - sum(b)`` of summed parts as float32 terms, each exact, summing to it exactly.

  For a compensated (TwoSum) accumulator that keeps more than float32: the
  top limb split into its high and low 15 bits, then the low limbs (each
  below ``2**15``), largest first.
  """
  top, low = _normalised_limbs(parts, layout)
  scale = 2.0 ** (layout.top - _FRAC_BITS)
  top_hi = (top >> 15) << 15
  terms = [
    top_hi.astype(jnp.float32) * np.float32(scale),
    (top - top_hi).astype(jnp.float32) * np.float32(scale),
  ]
  off = 0
  for k, w in enumerate(layout.widths):
    terms.append(low[k].astype(jnp.float32) * np.float32(2.0 ** (off - _FRAC_BITS)))
    off += w
  return terms[:2] + terms[2:][::-1]


def _parts_to_residual(parts: jax.Array, layout: _Layout) -> jax.Array:
  """``sum(s) - sum(b)`` (float32) of a set of samples from its summed parts.

  The low limbs are normalised (carries into the next limb, then the top),
  the bits are subtracted from the top in integers, and the result is
  rounded to float32 once (within 2 ulp of the exact sum).
  """
  top, low = _normalised_limbs(parts, layout)
  out = top.astype(jnp.float32) * np.float32(2.0 ** (layout.top - _FRAC_BITS))
  frac = jnp.zeros(top.shape, jnp.float32)
  off = 0
  for k, w in enumerate(layout.widths):
    frac = frac + low[k].astype(jnp.float32) * np.float32(2.0 ** (off - _FRAC_BITS))
    off += w
  return out + frac


def _in_domain(k: jax.Array) -> jax.Array:
  """Whether a score's key (:func:`float_to_key`) is in the exact engine's domain.

  Scores ``-2 < s < 1.9999999`` (the largest float32 below 2 is left out: its
  key would collide with the masked-sample sentinel); NaN and infinities are
  outside. :func:`_in_domain_score` is the same test on the score.
  """
  return (k >= jnp.uint32(_KEY_BASE)) & (k < jnp.uint32(3 * _KEY_BASE - 1))


_DOMAIN_TOP = np.float32(np.nextafter(np.float32(2.0), np.float32(0.0)))  # 1.9999999


def _in_domain_score(s: jax.Array) -> jax.Array:
  """:func:`_in_domain` of ``float_to_key(s)``, from the float32 score (two compares)."""
  return (s > -2.0) & (s < _DOMAIN_TOP)


def _residual_keys(s: jax.Array, b: jax.Array, where: jax.Array | None) -> jax.Array:
  """uint32 keys ``2 k(s) + b`` (order of ``s``, then bit), elementwise.

  Masked-out samples, and samples outside :func:`_in_domain`, get the
  sentinel ``2**32 - 1``, above every valid key: they sort last, and a row
  holds an invalid sample iff it has more sentinels than masked samples.
  """
  k = float_to_key(s)
  kb = ((k - jnp.uint32(_KEY_BASE)) << 1) | b.astype(jnp.uint32)
  ok = _in_domain(k)
  if where is not None:
    ok = ok & where
  return jnp.where(ok, kb, jnp.uint32(_SENTINEL))


def _decode_score(kb: jax.Array) -> jax.Array:
  return key_to_float((kb >> 1) + jnp.uint32(_KEY_BASE))


def _cond_any(pred: jax.Array, true_fn: Callable, false_fn: Callable, *ops):
  """``lax.cond(pred, true_fn, false_fn, *ops)``; under ``vmap`` one cond on ``any(pred)``.

  A ``lax.cond`` with a batched predicate becomes a ``select`` that runs both
  branches for every batch member. Both branches here are exact (the true
  branch is an exact fallback), so running the true branch for the whole
  batch when any member needs it is correct, and much cheaper in the usual
  case where none does. Nested ``vmap`` s are reduced level by level.
  """

  @jax.custom_batching.custom_vmap
  def run(pred, *ops):
    return jax.lax.cond(pred, true_fn, false_fn, *ops)

  @run.def_vmap
  def _rule(axis_size, in_batched, pred, *ops):
    p_batched, *o_batched = in_batched
    p = jnp.any(pred) if p_batched else pred
    in_axes = tuple(0 if bb else None for bb in o_batched)
    tf = jax.vmap(true_fn, in_axes=in_axes, axis_size=axis_size)
    ff = jax.vmap(false_fn, in_axes=in_axes, axis_size=axis_size)
    out = _cond_any(p, tf, ff, *ops)
    return out, jax.tree_util.tree_map(lambda _: True, out)

  return run(pred, *ops)


def _tie_cap(n: int) -> int:
  """Static number of tied samples repaired without a full stable sort (a power of 2)."""
  bits = max(1, int(n - 1).bit_length())
  return 1 << max(1, min(12, bits))


def _bloom_bits(n: int) -> int:
  """log2 of each Bloom filter's size for rows of ``n`` samples."""
  return max(10, min(20, int(n).bit_length() - 2))


def _hashes(h: jax.Array, size: int) -> tuple[jax.Array, jax.Array]:
  """Two multiplicative hashes of uint32 values into ``[0, size)`` (a power of 2)."""
  shift = 32 - (size.bit_length() - 1)
  h1 = (h * jnp.uint32(0x9E3779B1)) >> shift
  h2 = ((h ^ (h >> 15)) * jnp.uint32(0x85EBCA77) + jnp.uint32(0x165667B1)) >> shift
  return h1.astype(jnp.int32), h2.astype(jnp.int32)


#: Samples per block when picking out the (rare) rows of a mask, and the most
#: blocks holding any of them that are gathered (:func:`_gather_rare`).
_RARE_BLOCK = 128
_RARE_BLOCKS = 128


def _first_true(flags: jax.Array, k: int) -> tuple[jax.Array, jax.Array]:
  """Indices of the first ``k`` True entries of a short ``(L,)`` mask (``L`` pads), and their count."""
  size = flags.shape[0]
  rank = blocked_cumsum(flags)
  slot = jnp.where(flags & (rank <= k), rank - 1, k)
  idx = jnp.full((k,), size, jnp.int32).at[slot].set(jnp.arange(size, dtype=jnp.int32), mode="drop")
  return idx, rank[-1]


def _gather_rare(mask: jax.Array, *arrays: jax.Array):
  """The blocks of ``_RARE_BLOCK`` entries that hold a True entry of ``mask``, in order.

  A rare mask is compacted at the cost of one blocked reduction over ``n``
  (instead of a prefix sum and a scatter over ``n``): the flagged blocks (at
  most ``_RARE_BLOCKS``) are gathered whole, flattened, with ``mask`` and
  every array in ``arrays``. Returns ``(mask, arrays, overflow)`` where
  ``overflow`` tells that more blocks held a True entry than were gathered.
  """
  n = mask.shape[0]
  nb = -(-n // _RARE_BLOCK)
  k = min(nb, max(_RARE_BLOCKS, nb // 16))

  def blocks(a):
    return jnp.pad(a, (0, nb * _RARE_BLOCK - n)).reshape(nb, _RARE_BLOCK)

  mb = blocks(mask)
  idx, count = _first_true(jnp.any(mb, axis=1), k)
  take = jnp.minimum(idx, nb - 1)
  got = mb[take] & (idx < nb)[:, None]
  return got.reshape(-1), [blocks(a)[take].reshape(-1) for a in arrays], count > k


def _possible_quantile_ends(n_eff: jax.Array, max_bins: int) -> tuple[jax.Array, jax.Array]:
  """Every inner quantile bin end ``floor(j n / m)``, ``1 <= j < m <= max_bins``, and validity."""
  j = jnp.arange(1, max_bins, dtype=jnp.int32)[:, None]
  m = jnp.arange(2, max_bins + 1, dtype=jnp.int32)[None, :]
  e = floor_mul_div(j, n_eff, m)
  valid = (j < m) & (e >= 1) & (e < n_eff)
  return e.reshape(-1), valid.reshape(-1)


def _fix_mixed_ties(kb, skb, n_eff, max_bins: int | None):
  """Stable order inside the tie groups of one row that matter, without a second full sort.

  ``kb``: ``(n,)`` keys in index order; ``skb``: the same, sorted. Within a
  tie group ``skb`` puts the 0-bits first; the stable order interleaves the
  bits by index. That matters only for a group holding both bits ("mixed")
  and cut by a bin end: a prefix sum read inside it. With ``max_bins`` (and
  ``max_bins**2 <= 4 n``) the groups repaired are those cut by one of the
  possible quantile bin ends ``floor(j n / m)``, ``m <= max_bins`` (a few
  per row, read by gathers at those ends); otherwise every mixed group (one
  pass over the row). Their values go into two Bloom filters; every sample
  whose value passes both is a candidate (all members of those groups are,
  and a few others). Up to :func:`_tie_cap` candidates, picked out by
  :func:`_gather_rare` in index order, are sorted by (value, index) in small
  ``uint32`` sorts and their keys written back at ``group start + rank``:
  the stable order of every candidate group. Returns the repaired sorted
  keys and whether the candidates overflowed (then the caller falls back to
  a full stable sort).
  """
  n = kb.shape[0]
  cap = _tie_cap(n)
  kbits = cap.bit_length() - 1
  hs = skb >> 1
  if max_bins is not None and max_bins * max_bins <= 4 * n:
    e, valid = _possible_quantile_ends(n_eff, max_bins)
    e = jnp.clip(e, 1, n - 1)
    vals = hs[e]
    cut = valid & (vals == hs[e - 1])
  else:
    prev = skb[:-1]
    vals = hs[1:]
    pos = jnp.arange(1, n, dtype=jnp.int32)
    cut = ((prev >> 1) == vals) & ((prev & 1) != (skb[1:] & 1)) & (pos < n_eff)
  size = 1 << _bloom_bits(n)
  t1, t2 = _hashes(vals, size)
  bloom1 = jnp.zeros((size,), bool).at[jnp.where(cut, t1, size)].set(True, mode="drop")
  bloom2 = jnp.zeros((size,), bool).at[jnp.where(cut, t2, size)].set(True, mode="drop")
  h1, h2 = _hashes(kb >> 1, size)
  cand = bloom1[h1] & bloom2[h2] & (kb != jnp.uint32(_SENTINEL))
  cand, (c_kb,), overflow = _gather_rare(cand, kb)
  rank = blocked_cumsum(cand)  # 1-based compact index, in index order
  total = rank[-1]
  slot = jnp.where(cand & (rank <= cap), rank - 1, cap)
  ck = jnp.full((cap,), _SENTINEL, jnp.uint32).at[slot].set(c_kb, mode="drop")
  iota = jnp.arange(cap, dtype=jnp.int32)
  valid = iota < jnp.minimum(total, cap)
  # group id: first position of the value among the sorted candidates (< cap)
  cv = ck >> 1
  gid = jnp.searchsorted(jnp.sort(cv), cv, side="left").astype(jnp.uint32)
  packed = jnp.where(valid, (gid << kbits) | iota.astype(jnp.uint32), jnp.uint32(_SENTINEL))
  packed = jnp.sort(packed)  # by value, then index
  c = (packed & jnp.uint32(cap - 1)).astype(jnp.int32)
  key = ck[c]
  g = (packed >> kbits).astype(jnp.int32)
  first = jnp.concatenate([jnp.ones((1,), bool), g[1:] != g[:-1]])
  first_idx = jax.lax.cummax(jnp.where(first, iota, 0))
  start = jnp.searchsorted(skb, key & jnp.uint32(0xFFFFFFFE), side="left").astype(jnp.int32)
  dest = jnp.where(valid, start + iota - first_idx, n)
  skb = skb.at[dest].set(key, mode="drop")
  return skb, overflow | (total > cap)


def _stable_keys(kb: jax.Array, skb: jax.Array) -> jax.Array:
  """Keys in the exact stable order (the fallback: a full stable argsort).

  ``kb >> 1`` is the score's key less :data:`_KEY_BASE` (the sentinel's,
  ``2**31 - 1``, above every valid one), in the order of the scores: it is
  sorted as it is, without decoding the scores and encoding them again.
  """
  del skb
  return jnp.take_along_axis(kb, argsort_keys(kb >> 1)[1], axis=-1)


def _keep_keys(kb: jax.Array, skb: jax.Array) -> jax.Array:
  del kb
  return skb


#: ``method="auto"`` sorts ``uint32`` keys once and repairs mixed ties from
#: this many samples on; below it the stable argsort (on CPU one sort of
#: packed ``uint64`` words) is as fast or faster and compiles in about 60 %
#: of the time. Measured on 2 CPU cores (2026-11-24, alternating processes),
#: ``classwise_ce`` with C = 100 and 200 quantile bin counts: at n = 10^5
#: 0.69-0.72 s stable against 0.67-0.74 s fast (first calls 1.3-1.5 against
#: 2.3 s), at 2.5·10^5 1.0-1.2 against 1.4 s, at 5·10^5 1.8-2.6 against
#: 2.7-2.8 s, but at 7.5·10^5 5.0-5.3 against 4.05 s and at 10^6 6.7
#: against 5.5 s; one row (``conf_ece``, C = 10) at n = 10^6 0.070 against
#: 0.115 s. Until then (with the radix passes of ``uint32`` sorts) the cut
#: was 2**16.
FAST_SORT_MIN_N = 1 << 19


def _sorted_keys(kb: jax.Array, n_eff, stable: bool, fast: bool, max_bins: int | None = None):
  """Keys of one row (:func:`_residual_keys`) in sorted order.

  ``stable``: in the stable order (ties by index), or, with ``max_bins``,
  in an order whose prefix sums equal the stable ones at every possible
  quantile bin end of up to ``max_bins`` bins. ``fast``: one ``uint32`` sort
  and :func:`_fix_mixed_ties` instead of the stable argsort. The keys
  are the only input: the caller's float array is read once, by
  :func:`_residual_keys`.
  """
  n = kb.shape[0]
  if stable and not fast:
    return _stable_keys(kb, None)
  skb = jnp.sort(kb)
  if stable and n >= 2:
    skb, overflow = _fix_mixed_ties(kb, skb, n_eff, max_bins)
    skb = _cond_any(overflow, _stable_keys, _keep_keys, kb, skb)
  return skb


def _block_prefix(skb: jax.Array, n_eff: jax.Array, layout: _Layout) -> tuple[jax.Array, jax.Array]:
  """Sorted samples as words ``(nb, block)`` and exact block prefix sums ``(nb + 1, columns)``.

  A word packs a sample's fixed-point score and bit, ``q | b << 31``
  (:data:`_ZERO_WORD` at or beyond ``n_eff``), so a bin end decodes it with
  shifts; ``block`` is :func:`_block_size`.
  """
  n = skb.shape[0]
  block = _block_size(n)
  nb = -(-n // block)
  skb = jnp.pad(skb, (0, nb * block - n)).reshape(nb, block)
  valid = (jnp.arange(nb * block) < n_eff).reshape(nb, block)
  words = _words(_decode_score(skb), skb & 1, valid)
  sums = jnp.sum(_parts(words, layout), axis=1)  # |.| < 16 * 2**15 each
  prefix = jnp.moveaxis(_int_cumsum_last(sums.T, 16, small=True), -1, 0)  # exact
  return words, jnp.concatenate([jnp.zeros((1, sums.shape[1]), jnp.int32), prefix])


def _prefix_at(words: jax.Array, blocks: jax.Array, ends: jax.Array, layout: _Layout) -> jax.Array:
  """Exact summed parts of the first ``e`` sorted samples, for every ``e`` in ``ends``."""
  nb, block = words.shape
  if block == 1:
    return blocks[ends]
  eb = ends // block
  off = ends - eb * block
  seg = words[jnp.minimum(eb, nb - 1)]  # (E, block)
  take = jnp.arange(block)[None, :] < off[:, None]
  seg = jnp.where(take, seg, jnp.uint32(_ZERO_WORD))
  return blocks[eb] + jnp.sum(_parts(seg, layout), axis=1)


def _sums_at_ends(at: jax.Array, ends: jax.Array, ok: jax.Array, sign: float, layout: _Layout):
  """BinnedSums of one row from the exact parts ``at`` of the prefixes at the bin ends.

  ``ends``: the cumulative sample counts at the bin ends, or ``None`` when
  they are not known (then ``counts`` is ``None``); an empty bin's exact sum
  is 0 either way.
  """
  counts = None if ends is None else ends[1:] - ends[:-1]
  nan = jnp.float32(jnp.nan)
  sums = jnp.where(ok, sign * _parts_to_residual(at[1:] - at[:-1], layout), nan)
  cums = jnp.where(ok, sign * _parts_to_residual(at[1:], layout), nan)
  return BinnedSums(sums=sums[:, None], counts=counts, cumsums=cums[:, None])


def _sorted_row_sums(s, b, m, binning, max_bins, sign, method, where) -> BinnedSums:
  """BinnedSums of ``sign * (s - b)`` for one row of float32 scores (sort strategy), exactly."""
  n = s.shape[0]
  layout = _layout(n)
  kb = _residual_keys(s, b, where)
  n_eff = sample_count(where, n)
  stable = binning == "quantile"
  fast = method == "fast" or (method == "auto" and n >= FAST_SORT_MIN_N)
  skb = _sorted_keys(kb, n_eff, stable, fast, max_bins)
  ok = (n_eff == 0) | (skb[jnp.maximum(n_eff - 1, 0)] != jnp.uint32(_SENTINEL))
  words, blocks = _block_prefix(skb, n_eff, layout)
  if binning == "quantile":
    ends = quantile_ends(n_eff, m, max_bins)
  else:
    ends = bin_ends(_decode_score(skb), m, "fixed", max_bins, n_eff)
  return _sums_at_ends(_prefix_at(words, blocks, ends, layout), ends, ok, sign, layout)


#: Samples (times rows) per step of the fixed-bin histogram loop: bounds its
#: temporaries (the per-sample integer parts) to a few tens of MB.
EDGE_CHUNK_ELEMENTS = 1 << 20


def _edge_prefix(s, b, labels, where, bucket: Callable, k1: int, layout: _Layout):
  """Exact prefix statistics over ``k1`` intervals of the scores, for every row at once.

  ``bucket`` maps a chunk of scores to their intervals (int32 in ``[0, k1)``:
  the threshold intervals of :func:`_edge_bucket`, or the bins of one bin
  count). ``s``, ``b``, ``where``: ``(n, R)`` (samples first, in whatever
  memory layout the caller has: no transposition). Instead of ``b``
  (``None``), ``labels`` ``(n,)`` says that row ``r``'s bits are ``[labels
  == r]``: the bits are then counted by a second histogram over the ``n``
  labelled entries, not carried by all ``n R`` of them. The samples are
  processed in chunks of ``EDGE_CHUNK_ELEMENTS / R`` (a ``fori_loop`` adding
  exact integer histograms, one ``segment_sum`` per chunk). Returns
  ``(prefix (R, k1 + 1, layout.columns), ok (R,))``: ``prefix[r, k]`` holds
  the summed parts of the samples of row ``r`` in intervals ``< k``; ``ok``
  is False for a row holding a sample outside the domain.
  """
  n, rows = s.shape
  size = max(1, min(n, EDGE_CHUNK_ELEMENTS // max(rows, 1)))
  steps = -(-n // size)
  row_id = jnp.arange(rows, dtype=jnp.int32)[None, :] * k1
  main = layout._replace(bit=layout.bit and labels is None)
  bit_col = 1 + len(layout.widths)

  def histogram(start, first_new):
    ss = jax.lax.dynamic_slice_in_dim(s, start, size, 0)
    new = (start + jnp.arange(size, dtype=jnp.int32))[:, None] >= first_new
    if where is not None:
      new = new & jax.lax.dynamic_slice_in_dim(where, start, size, 0)
    inside = _in_domain_score(ss)
    ids = jnp.where(new & inside, row_id + bucket(ss), rows * k1)  # else dropped
    bb = jnp.zeros((), bool) if b is None else jax.lax.dynamic_slice_in_dim(b, start, size, 0)
    upd = _parts(_words(ss, bb), main).reshape(size * rows, -1)
    hist = jax.ops.segment_sum(upd, ids.reshape(-1), num_segments=rows * k1)
    if labels is not None and layout.bit:  # one labelled entry per sample
      ll = jax.lax.dynamic_slice_in_dim(labels, start, size, 0)[:, None]
      hit = jnp.take_along_axis(ids, jnp.clip(ll, 0, rows - 1), axis=1)[:, 0]
      hit = jnp.where((ll[:, 0] >= 0) & (ll[:, 0] < rows), hit, rows * k1)
      ones = jax.ops.segment_sum(jnp.ones((size,), jnp.int32), hit, num_segments=rows * k1)
      hist = jnp.concatenate([hist[:, :bit_col], ones[:, None], hist[:, bit_col:]], axis=1)
    return hist, jnp.sum(new & ~inside, axis=0, dtype=jnp.int32)

  if steps == 1:
    stats, bad = histogram(0, 0)
  else:

    def body(i, acc):
      start = jnp.minimum(i * size, n - size)  # the last chunk overlaps: count only new samples
      h, nb = histogram(start, i * size)
      return acc[0] + h, acc[1] + nb

    zeros = (jnp.zeros((rows * k1, layout.columns), jnp.int32), jnp.zeros(rows, jnp.int32))
    stats, bad = jax.lax.fori_loop(0, steps, body, zeros)
  per = stats.reshape(rows, k1, -1)
  zero = jnp.zeros((rows, 1, per.shape[-1]), jnp.int32)
  return jnp.concatenate([zero, blocked_cumsum(per, axis=1)], axis=1), bad == 0


def _edge_row_sums(
  prefix, ok, m, table: EdgeTable | None, max_bins, sign, layout: _Layout
) -> BinnedSums:
  """BinnedSums of one row from its :func:`_edge_prefix` statistics.

  Over the ``table``'s threshold intervals the prefix is read at the ends of
  ``m``'s bins; with ``table=None`` it is over ``m``'s own bins already.
  """
  at = prefix
  if table is not None:
    rows = jnp.asarray(table.index)[jnp.clip(m, 1, max_bins)]
    at = prefix[jnp.concatenate([jnp.zeros((1,), jnp.int32), rows])]  # (max_bins + 1, ...)
  return _sums_at_ends(at, at[:, -1] if layout.count else None, ok, sign, layout)


#: Rows processed together (one ``lax.map`` step) by the sort strategy hold
#: about this many samples: bounds the temporaries of class-wise errors
#: (n = 10^5, C = 100, 200 quantile bin counts: 449 MiB of temporaries with
#: 2**23, 123 MiB = 3.2x the input with 2**20, and 20 % less CPU time).
ROW_CHUNK_ELEMENTS = 1 << 20


def binned_residual_sums(
  scores: jax.Array,
  bits: jax.Array | None,
  num_bins: ArrayLike,
  binning: str,
  max_bins: int,
  sign: float = 1.0,
  method: str = "auto",
  where: jax.Array | None = None,
  axis: int = -1,
  counts: bool = True,
  labels: jax.Array | None = None,
  single_count: bool = False,
) -> BinnedSums:
  """Per-bin sums of ``sign * (s - b)`` for 0/1 ``bits``, row-wise and exact.

  Every binned calibration error is of this form (confidence: ``c - z``;
  classwise: ``p_r - 1[y = r]``; binary: ``p - y``). Float32 (or narrower)
  scores use the exact integer engine (module docstring): the sums are the
  float32 rounding of the exact sums of the scores rounded to ``2**-29``,
  whatever the order; a row with a score outside ``(-2, 2)`` (or NaN) gives
  NaN. float64 scores are summed in float64.

  ``sum_{i in B_j} (s_i - b_i)`` for every bin ``B_j`` of the row's scores,
  ``j = 1..max_bins`` (bins beyond ``num_bins`` are empty).

  Args:
    scores: scores with the samples along ``axis`` (``n`` of them); every
      other index is a row binned on its own (e.g. ``(n, C)`` with
      ``axis=0``: one row per class, without transposing).
    bits: 0/1 outcomes (bool or int), broadcastable to ``scores``; or
      ``None`` with ``labels``.
    num_bins: scalar bin count (static int or traced), ``1 <= num_bins <=
      max_bins`` (other values give meaningless rows; callers mask them).
    binning: ``"fixed"`` or ``"quantile"`` (static).
    max_bins: static bound on ``num_bins``.
    sign: ``+1`` for ``s - b``, ``-1`` for ``b - s`` (static).
    method: ``"auto"`` (default), ``"sort"`` (stable sort / bisection
      everywhere), ``"edges"`` (fixed only) or ``"fast"`` (quantile:
      ``uint32`` key sort with the mixed-tie repair at any ``n``).
    where: optional bool sample mask broadcastable to ``scores``' shape;
      masked-out samples are treated exactly as if absent (quantile bins are
      equal-mass over the remaining ``n_eff`` samples of each row).
    axis: the sample axis (static; default the last).
    counts: also count the samples per bin (static). The fixed-bin histogram
      then carries one more column; without it ``counts`` may be ``None``.
    labels: instead of ``bits``, for ``(n, C)`` scores with ``axis=0``: an
      ``(n,)`` int array with ``bits[i, r] = [labels[i] == r]`` (one-hot
      outcomes, the class-wise errors); fixed bins then count the bits from
      the ``n`` labelled entries only.
    single_count: the caller's promise (static) that ``num_bins`` is one
      bin count, not batched under a ``vmap`` over bin counts. On the CPU,
      fixed bins (``method="auto"``, the edges strategy) are then
      histogrammed straight into that count's ``max_bins`` bins instead of
      into the threshold intervals that every count shares (the public
      ``classwise_ece`` at ``n = 10^4``, ``C = 10``: 0.38-0.51 against
      0.52-0.71 ms, ``n = 10^5``, ``C = 100``: 37-48 against 47-59 ms); the
      sums are the same integers. Under a ``vmap`` over bin counts it stays
      correct but builds one histogram per count. Other backends keep the
      table: on an H200 its scatter into more targets was faster for all
      three fixed-bin errors (``classwise_ece`` at ``n = 10^5``, ``C =
      100``: 0.79 against 1.18 ms; ``experiments/bench/single_count.py``).

  Returns:
    :class:`BinnedSums` whose leading shape ``lead`` is ``scores``' shape
    without ``axis``: ``sums`` and ``cumsums`` ``lead + (max_bins, 1)``,
    ``counts`` ``lead + (max_bins,)``. The fixed-bin histograms loop over
    chunks of samples (:data:`EDGE_CHUNK_ELEMENTS`), the sorts over chunks
    of rows (:data:`ROW_CHUNK_ELEMENTS`); the scores' rows-last copies and
    the per-count sums remain (XLA:CPU, float32, class rows: 2.2-2.3 times
    the input at ``n = 10^6``, ``C = 100``, one count or 200; under ``vmap``
    over ``K`` counts the sums take ``K * C * max_bins`` entries whatever
    ``n``: 7-14 GB for ``K = 200``, ``C = 10^4`` in ``classwise_ece`` and
    ``ecce``; pass the counts in batches there).

  Raises:
    ValueError: float32 (or narrower) rows of more than
      :data:`MAX_EXACT_SAMPLES` (``2**30 - 1``) samples, at trace time: the
      exact engine's int32 limbs would not hold their sums (stream them in
      batches with :class:`jaxcal.streaming.FixedBins`, or use float64).

  Reference: Lu, Wu, Hartline and Hu (2025), "Truthful Calibration Errors
  for Multi-Class Prediction", arXiv:2510.06388, §2 (binning rules) and §3
  (every binned error is a function of these per-bin residual sums).

  Example:
    >>> import jax.numpy as jnp
    >>> s = jnp.array([0.1, 0.4, 0.35, 0.8])
    >>> out = binned_residual_sums(s, jnp.array([0, 1, 0, 1]), 2, "quantile", 2)
    >>> [round(float(v), 4) for v in out.sums[:, 0]], out.counts.tolist()
    ([0.45, -0.8], [2, 2])
  """
  scores = jnp.asarray(scores)
  if binning not in ("fixed", "quantile"):
    raise ValueError(f"binning must be 'fixed' or 'quantile', got {binning!r}")
  edges = _use_edges(binning, max_bins, scores.dtype, method)  # also validates method
  if jnp.dtype(scores.dtype).itemsize < 4:
    scores = scores.astype(jnp.float32)  # never sum in float16 / bfloat16
  axis = axis % scores.ndim
  if labels is not None:
    if scores.ndim != 2 or axis != 0:
      raise ValueError("labels= needs (n, C) scores with axis=0 (one row per class)")
    labels = jnp.asarray(labels)
  if where is not None:
    where = jnp.broadcast_to(where, scores.shape)
  statics = (binning, int(max_bins), float(sign), method, axis, bool(counts), single_count, edges)
  if scores.dtype == jnp.float64:
    return _residual_sums(statics, scores, bits, num_bins, where, labels)
  return _exact_residual_sums(statics, scores, bits, num_bins, where, labels)


def _residual_sums(statics, scores, bits, num_bins, where, labels) -> BinnedSums:
  """:func:`binned_residual_sums` after its checks (``statics``: its static arguments)."""
  binning, max_bins, sign, method, axis, counts, single_count, edges = statics
  m = jnp.asarray(num_bins, jnp.int32)
  lead = scores.shape[:axis] + scores.shape[axis + 1 :]
  rows, n = math.prod(lead), scores.shape[axis]

  def unflatten(out):
    return jax.tree_util.tree_map(lambda a: a.reshape(lead + a.shape[1:]), out)

  if edges and scores.dtype == jnp.float32:
    layout = _layout(n, count=counts)

    def samples_first(a):
      return None if a is None else jnp.moveaxis(a, axis, 0).reshape(n, rows)

    b = None if labels is not None else samples_first(jnp.broadcast_to(bits, scores.shape))

    def edge_sums(direct: bool):
      def run(s, bb, lab, w):
        if direct:  # this count's own bins, no table
          table, k1 = None, max_bins
          bucket = lambda ss: jnp.minimum(fixed_bin_1based(ss, m), max_bins) - 1
        else:
          table = edge_table(int(max_bins), "float32")
          k1 = table.thresholds.shape[0] + 1  # intervals 0..K
          bucket = lambda ss: _edge_bucket(ss, table)
        prefix, ok = _edge_prefix(s, bb, lab, w, bucket, k1, layout)
        row = functools.partial(
          _edge_row_sums, table=table, max_bins=max_bins, sign=sign, layout=layout
        )
        return jax.vmap(lambda pr, o: row(pr, o, m))(prefix, ok)

      return run

    args = (samples_first(scores), b, labels, samples_first(where))
    if single_count and method == "auto":  # direct on the CPU only (see single_count)
      out = jax.lax.platform_dependent(*args, cpu=edge_sums(True), default=edge_sums(False))
    else:
      out = edge_sums(False)(*args)
    return unflatten(out)

  if labels is not None:
    bits = labels[:, None] == jnp.arange(rows)[None, :]
  bits = jnp.broadcast_to(jnp.asarray(bits), scores.shape)

  def rows_last(a):
    return None if a is None else jnp.moveaxis(a, axis, -1).reshape(rows, n)

  if scores.dtype == jnp.float64:
    fn = functools.partial(_float_residual_sums, binning=binning, max_bins=max_bins)

    def one(s, b, w):
      return fn(s, b, m, sign=sign, method=method, where=w)
  else:

    def one(s, b, w):
      return _sorted_row_sums(s, b, m, binning, max_bins, sign, method, w)

  s2, b2, w2 = rows_last(scores), rows_last(bits), rows_last(where)
  if where is None:
    f, xs = (lambda x: one(x[0], x[1], None)), (s2, b2)
  else:
    f, xs = (lambda x: one(*x)), (s2, b2, w2)
  if not lead:
    return f(tuple(x[0] for x in xs))
  chunk = max(1, min(rows, ROW_CHUNK_ELEMENTS // max(n, 1)))
  out = jax.vmap(f)(xs) if chunk >= rows else map_batches(f, xs, chunk)
  return unflatten(out)


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _exact_residual_sums(statics, scores, bits, num_bins, where, labels) -> BinnedSums:
  """The exact integer engine (float32 scores), with the float sums' derivative.

  Its sums are integers of fixed-point scores, which carry no derivative: the
  gradient of every binned error in float32 was exactly 0 (``conf_ece`` of
  logits: 0 for a finite difference of -0.016). The tangent is the generic
  float engine's (:func:`binned_sums`) over the same bins: ``sign * sum_{i in
  B_j} ds_i``, the bins piecewise constant in the scores.
  """
  return _residual_sums(statics, scores, bits, num_bins, where, labels)


@_exact_residual_sums.defjvp
def _exact_residual_sums_jvp(statics, primals, tangents):
  scores, bits, num_bins, where, labels = primals
  t_scores = tangents[0]
  out = _exact_residual_sums(statics, *primals)
  binning, max_bins, sign, _, axis, _, _, _ = statics
  n = scores.shape[axis]
  lead = scores.shape[:axis] + scores.shape[axis + 1 :]

  def rows_last(a):
    return jnp.moveaxis(a, axis, -1).reshape(-1, n)

  m = jnp.asarray(num_bins, jnp.int32)
  method = "sort" if binning == "quantile" else "auto"

  def one(s, t, w):
    r = binned_sums(s, sign * t[:, None], m, binning, max_bins, method=method, where=w)
    return r.sums, r.cumsums

  w2 = None if where is None else rows_last(where)
  sums, cums = jax.vmap(one, in_axes=(0, 0, None if w2 is None else 0))(
    rows_last(scores), rows_last(t_scores.astype(scores.dtype)), w2
  )
  unflat = lambda a: a.reshape(lead + a.shape[1:]).astype(out.sums.dtype)
  t_counts = None if out.counts is None else np.zeros(out.counts.shape, jax.dtypes.float0)
  return out, BinnedSums(sums=unflat(sums), counts=t_counts, cumsums=unflat(cums))


def midpoint_mass_ends(
  sorted_scores: jax.Array, num_bins: ArrayLike, max_bins: int, count: ArrayLike | None = None
) -> jax.Array:
  """Cumulative bin counts of equal-mass bins cut at midpoints between sorted values.

  The rule of Kumar, Liang & Ma (2019) (``calibration.get_equal_bins`` in
  their ``uncertainty-calibration`` package): with ``m' = min(m, n)``, the
  sorted scores are split into ``m'`` consecutive parts as
  ``numpy.array_split`` does (the first ``n mod m'`` parts one longer); bin
  ``j`` ends at the midpoint ``t_j`` between the last score of part ``j``
  and the first of part ``j + 1`` (rounded in the scores' dtype), and a
  score ``s`` belongs to the first bin with ``s <= t_j``. Unlike the
  ``quantile`` rule above (ties split by index), tied scores always share a bin.

  Args:
    sorted_scores: ``(n,)`` scores sorted ascending.
    num_bins: scalar bin count ``m >= 1`` (static or traced), ``<= max_bins``.
    max_bins: static bound; the result has ``max_bins + 1`` entries.
    count: number ``n`` of real samples (may be traced), which must come
      first in ``sorted_scores`` (masked-out samples sorted last, e.g. by
      :func:`masked_last`); default: all of them.

  Returns:
    ``(max_bins + 1,)`` int32, non-decreasing, ``e_0 = 0``, ``e_j = n`` for
    ``j >= m'``.
  """
  n = sorted_scores.shape[0] if count is None else jnp.asarray(count, jnp.int32)
  m = jnp.minimum(jnp.asarray(num_bins, jnp.int32), n)
  m = jnp.maximum(m, 1)
  q, rem = n // m, n % m
  j = jnp.arange(1, max_bins, dtype=jnp.int32)
  start = j * q + jnp.minimum(j, rem)  # first index of part j + 1 (0-based parts)
  hi = jnp.clip(start, 0, n - 1)
  cut = (sorted_scores[jnp.clip(hi - 1, 0, n - 1)] + sorted_scores[hi]) / 2
  ends = jnp.searchsorted(sorted_scores, cut, side="right").astype(jnp.int32)
  ends = jnp.where(j < m, ends, n)
  return jnp.concatenate([jnp.zeros((1,), jnp.int32), ends, jnp.full((1,), n, jnp.int32)])
