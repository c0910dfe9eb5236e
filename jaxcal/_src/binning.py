"""Outcome-independent binning on sorted prefix sums (SPEC §1).

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
  computed exactly in integers. Ties may be split across bins (SPEC §1).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

__all__ = [
    "blocked_cumsum",
    "floor_mul_div",
    "bin_ends",
    "bin_ids",
    "BinnedSums",
    "binned_sums",
    "resolve_max_bins",
]


def blocked_cumsum(x: jax.Array, block: int = 512) -> jax.Array:
  """Inclusive prefix sum along axis 0, blocked for float32 accuracy.

  Sums within blocks of ``block`` rows, then adds the prefix sum of block
  totals; the rounding error grows like ``block + n/block`` additions rather
  than ``n``.

  Args:
    x: ``(n, ...)`` array.
    block: rows per block (static).

  Returns:
    ``(n, ...)`` array with ``out[i] = sum(x[:i+1])``.
  """
  n = x.shape[0]
  if n <= block:
    return jnp.cumsum(x, axis=0)
  nb = -(-n // block)
  pad = nb * block - n
  xp = jnp.pad(x, [(0, pad)] + [(0, 0)] * (x.ndim - 1))
  xb = xp.reshape((nb, block) + x.shape[1:])
  within = jnp.cumsum(xb, axis=1)
  totals = within[:, -1]
  offsets = jnp.cumsum(totals, axis=0) - totals
  out = within + offsets[:, None]
  return out.reshape((nb * block,) + x.shape[1:])[:n]


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


def _fixed_bin_1based(s: jax.Array, m: jax.Array) -> jax.Array:
  """``clip(ceil(s*m), 1, m)`` with the product in ``s``'s dtype."""
  b = jnp.ceil(s * m.astype(s.dtype)).astype(jnp.int32)
  return jnp.clip(b, 1, m)


def resolve_max_bins(num_bins, n: int, max_bins: int | None) -> int:
  """The static bound on the bin count used to size per-bin arrays.

  ``max_bins`` if given; else ``num_bins`` when it is a Python int; else the
  largest value of a concrete array; else ``n`` (a traced bin count with no
  bound: every non-empty bin has at least one sample, so ``n`` suffices for
  the quantile rule and for all non-empty fixed bins).
  """
  if max_bins is not None:
    return int(max_bins)
  if isinstance(num_bins, int):
    return num_bins
  if not isinstance(num_bins, jax.core.Tracer):
    return int(jnp.max(jnp.asarray(num_bins)))
  return int(n)


def bin_ends(sorted_scores: jax.Array, num_bins: ArrayLike, binning: str,
             max_bins: int) -> jax.Array:
  """Cumulative bin counts ``e_0 = 0, e_1, ..., e_max_bins`` in the sorted order.

  ``e_j`` is the number of samples whose bin is ``<= j``; bins beyond
  ``num_bins`` are empty (``e_j = n``).

  Args:
    sorted_scores: ``(n,)`` scores sorted ascending.
    num_bins: scalar int (static or traced), ``1 <= num_bins <= max_bins``
      for the fixed rule (larger values are clipped to ``max_bins`` bins).
    binning: ``"fixed"`` or ``"quantile"`` (static).
    max_bins: static bound; the result has ``max_bins + 1`` entries.

  Returns:
    ``(max_bins + 1,)`` int32, non-decreasing, ``e_0 = 0``.
  """
  n = sorted_scores.shape[0]
  m = jnp.asarray(num_bins, jnp.int32)
  j = jnp.arange(1, max_bins + 1, dtype=jnp.int32)
  if binning == "quantile":
    ends = jnp.where(j >= m, n, floor_mul_div(j, jnp.int32(n), jnp.maximum(m, 1)))
  elif binning == "fixed":
    # Vectorised bisection for the first sorted index whose bin exceeds j:
    # exactly consistent with the elementwise rule, in O(max_bins log n).
    lo = jnp.zeros_like(j)
    hi = jnp.full_like(j, n)
    steps = max(1, math.ceil(math.log2(n + 1)))

    def body(_, carry):
      lo, hi = carry
      active = lo < hi
      mid = (lo + hi) // 2
      ok = _fixed_bin_1based(sorted_scores[jnp.clip(mid, 0, n - 1)], m) <= j
      lo = jnp.where(active & ok, mid + 1, lo)
      hi = jnp.where(active & ~ok, mid, hi)
      return lo, hi

    lo, _ = jax.lax.fori_loop(0, steps, body, (lo, hi))
    ends = jnp.where(j >= m, n, lo)
  else:
    raise ValueError(f"binning must be 'fixed' or 'quantile', got {binning!r}")
  return jnp.concatenate([jnp.zeros((1,), jnp.int32), ends.astype(jnp.int32)])


def bin_ids(scores: ArrayLike, num_bins: ArrayLike, binning: str = "fixed") -> jax.Array:
  """0-based bin index of every sample, in the original order (SPEC §1).

  Args:
    scores: ``(n,)`` scalar scores (in ``[0, 1]`` for the fixed rule).
    num_bins: bin count ``m`` (int, static or traced).
    binning: ``"fixed"`` (equal width on [0, 1]) or ``"quantile"`` (equal mass).

  Returns:
    ``(n,)`` int32 in ``[0, m)``.

  Example:
    >>> import jax.numpy as jnp
    >>> bin_ids(jnp.array([0.0, 0.1, 0.5, 1.0]), 2, "fixed").tolist()
    [0, 0, 0, 1]
    >>> bin_ids(jnp.array([0.3, 0.1, 0.3, 0.2]), 2, "quantile").tolist()
    [1, 0, 1, 0]
  """
  s = jnp.asarray(scores)
  m = jnp.asarray(num_bins, jnp.int32)
  if binning == "fixed":
    return _fixed_bin_1based(s, m) - 1
  if binning == "quantile":
    n = s.shape[0]
    order = jnp.argsort(s, stable=True)
    pos = jnp.arange(1, n + 1, dtype=jnp.int32)
    # ceil(i*m/n) = floor((i*m - 1)/n) + 1, exact for i*m >= 1
    q = floor_mul_div(pos, m, jnp.int32(n))
    rem_pos = pos * m - q * n  # exact small remainder
    b = q + (rem_pos > 0).astype(jnp.int32)  # 1-based
    return jnp.zeros((n,), jnp.int32).at[order].set(b - 1)
  raise ValueError(f"binning must be 'fixed' or 'quantile', got {binning!r}")


class BinnedSums(NamedTuple):
  """Per-bin statistics, one row per bin ``1..max_bins`` (empty rows are 0)."""
  sums: jax.Array      # (max_bins, d) per-bin sums of the values
  counts: jax.Array    # (max_bins,) number of samples per bin
  cumsums: jax.Array   # (max_bins, d) sums over bins <= j (for cumulative errors)


def binned_sums(scores: jax.Array, values: jax.Array, num_bins: ArrayLike,
                binning: str, max_bins: int) -> BinnedSums:
  """Sums of ``values`` over the bins of ``scores``.

  Args:
    scores: ``(n,)`` binning scores.
    values: ``(n, d)`` values to sum per bin (e.g. residuals ``u - phi(y)``).
    num_bins: scalar bin count, static int or traced, ``<= max_bins``.
    binning: ``"fixed"`` or ``"quantile"`` (static).
    max_bins: static bound on ``num_bins``.

  Returns:
    :class:`BinnedSums` with ``max_bins`` rows; rows of empty bins and of bins
    beyond ``num_bins`` are zero (``cumsums`` rows repeat the running total).
  """
  order = jnp.argsort(scores, stable=True)
  s_sorted = scores[order]
  v_sorted = values[order]
  prefix = blocked_cumsum(v_sorted)
  prefix = jnp.concatenate([jnp.zeros((1,) + prefix.shape[1:], prefix.dtype), prefix])
  ends = bin_ends(s_sorted, num_bins, binning, max_bins)
  at_ends = prefix[ends]                      # (max_bins + 1, d)
  sums = at_ends[1:] - at_ends[:-1]
  counts = ends[1:] - ends[:-1]
  sums = jnp.where((counts > 0)[:, None], sums, 0.0)
  return BinnedSums(sums=sums, counts=counts, cumsums=at_ends[1:])
