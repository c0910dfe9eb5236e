"""Isotonic (L2, increasing) regression in pure JAX: exact PAV without host callbacks.

The pool-adjacent-violators algorithm (PAV) merges adjacent blocks whose
means violate monotonicity; any such pair belongs to one block of the
solution, so the order of the merges does not matter (Barlow et al. 1972),
and neither does stopping early at one level as long as a later level keeps
merging. Here it runs in fixed shapes (the output is ``(n,)`` whatever the
data) and in four steps, every one batched over rows:

1. **Sort** by ``x`` through integer keys (:func:`~jaxcal._src.sorting.float_to_key`).
   Ties in ``x`` form one initial block (the "secondary" approach of
   scikit-learn, the same as R's ``isoreg`` after ordering ties by ``y``
   descending). When the targets are 0/1 with unit weights (class
   indicators: every class-wise use in jaxcal) and the keys span fewer than
   ``2^(w-1)`` values, one single-operand sort of ``(key - min) * 2 + y``
   gives the sorted ``x`` and ``y`` together; otherwise the stable argsort of
   the keys (:func:`~jaxcal._src.sorting.argsort_keys`, one packed sort on CPU)
   and gathers. The choice is one ``lax.cond`` over all rows.
2. **Level 1**: the sorted rows are cut into chunks of :data:`CHUNK`
   positions, and a stack-based PAV runs in every chunk at once (one lane
   per chunk, a ``lax.scan`` over the chunk's positions). A pushed block is
   written at the row of the step that pushes it, with a pointer to the
   block below it, so every write is a contiguous row and every step does at
   most one merge with the block below (further merges are left to level 2).
   A tie group cut by a chunk boundary is never merged on a partial mean.
3. **Level 2**: the level-1 blocks of each row are gathered in order, and a
   sequential stack PAV runs over them, on CPU one row at a time
   (``lax.map``: on one row XLA:CPU runs such a loop at tens of nanoseconds
   per step), elsewhere all rows at once (:data:`LEVEL2_ALL_ROWS`).
   Typical calibration data leave a few hundred level-1 blocks per 100,000
   samples; data that need no merge at all (already increasing) leave one
   block per sample, and this pass then takes ``O(n)`` fast steps.
4. **Lookup**: the fitted value of a sample is the mean of the first final
   block whose last key is ``>= key(x)``: a binary search over the final
   blocks (a few dozen on calibration data), no inverse permutation.

``jax.vmap`` over classes (or data sets) is routed by a ``custom_vmap`` rule
to one call on the stacked rows (:func:`~jaxcal._src.sorting.rowwise_vmap`),
so the data-dependent loops run once for all rows. The sorts of step 1 split
the rows into one group per CPU core
(:func:`~jaxcal._src.sorting.cpu_groups`), which XLA:CPU runs concurrently;
the PAV loops do not (XLA:CPU ran loops of separate groups one after another,
so they run once over all rows). Block sums are accumulated in order in the input
dtype, as PAV does: float32 inputs give float32 fits (for 0/1 targets with
unit weights the sums are exact integers up to blocks of ``2**24`` samples;
a larger block's mean was within 5.4e-8 of scikit-learn's); enable x64 (``with
jax.enable_x64(True):``) for agreement with scikit-learn's float64 fit to
~1e-15. Derivatives in both modes (``jax.jvp``, ``jax.grad``, ``jax.jacfwd``) come
from :func:`_core_jvp`: each pool's value is its weighted mean, the pools held.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax
from jax.typing import ArrayLike

from jaxcal._src import validation as V
from jaxcal._src.numerics import carry_like, map_columns
from jaxcal._src.sorting import (
  argsort_keys,
  float_to_key,
  key_to_float,
  rowwise_vmap,
  sort_rows,
)

__all__ = [
  "IsotonicFit",
  "isotonic_regression",
  "isotonic_fit",
  "isotonic_predict",
  "isotonic_fit_sorted",
  "isotonic_fit_columns",
  "predict_unchecked",
  "pools",
]


class IsotonicFit(NamedTuple):
  """A fitted isotonic step function (left-continuous, constant outside the data).

  Attributes:
    x: ``(n,)`` training inputs sorted ascending (``+inf`` for zero-weight
      points, which sort last).
    y: ``(n,)`` fitted values at ``x`` (non-decreasing).
  """

  x: jax.Array
  y: jax.Array


def _given_float(v: Any) -> bool:
  """Whether a caller's input came with a floating dtype (an array of floats)."""
  dt = getattr(v, "dtype", None)
  return dt is not None and jnp.issubdtype(dt, jnp.floating)


def _float_dtype(*xs) -> jnp.dtype:
  dt = jnp.result_type(*[x.dtype for x in xs if x is not None])
  if not jnp.issubdtype(dt, jnp.floating):
    dt = jnp.result_type(float)
  elif jnp.finfo(dt).bits < 32:
    dt = jnp.float32
  return jnp.dtype(dt)


# ---------------------------------------------------------------------------
# Step 1: sorted keys and targets

#: Bits of the per-position code read by the PAV levels.
_JOIN, _NEXT_JOINS = 1, 2


def _sorted_binary(key, y):
  """One sort of ``(key - min) * 2 + y``: sorted keys and 0/1 targets together."""
  lo = jnp.min(key)
  one = key.dtype.type(1)
  packed = sort_rows(((key - lo) << one) | (y > 0).astype(key.dtype))
  return (packed >> one) + lo, (packed & one).astype(y.dtype)


def _sorted_general(key, y):
  skey, perm = argsort_keys(key)
  return skey, jnp.take_along_axis(y, perm, axis=-1)


def _sorted_data(key, y, w):
  """``(sorted keys, sorted y, sorted w or None)`` of ``(rows, n)`` arrays.

  The sorts run as one group of rows per CPU core, the only part of the fit
  that XLA:CPU runs concurrently (the groups hold no loop or ``cond`` of
  their own: the choice of sort is made once, around them).
  """
  if w is not None:
    skey, perm = argsort_keys(key)
    take = lambda a: jnp.take_along_axis(a, perm, axis=-1)
    return skey, take(y), take(w)
  skey, ys = _sorted_unweighted(key, y)
  return skey, ys, None


def _sorted_unweighted(key, y):
  """Sorted keys and targets; 0/1 targets packed with their keys into one sort."""
  half = key.dtype.type(1 << (8 * key.dtype.itemsize - 1))
  binary = jnp.all((y == 0) | (y == 1)) & ((jnp.max(key) - jnp.min(key)) < half)
  return lax.cond(binary, _sorted_binary, _sorted_general, key, y)


# ---------------------------------------------------------------------------
# Step 2: level 1, a stack PAV in every chunk of CHUNK sorted positions

#: Sorted positions per level-1 lane. Larger chunks leave fewer blocks to the
#: sequential level 2 but take more scan steps
#: (``experiments/bench/isotonic.py`` measures it).
CHUNK = 256


def _level1(s, w, code, length, head_open):
  """Stack PAV in every lane (column) of ``(L, lanes)`` sorted data.

  Each step reads one position of every lane, merges the current block
  with the block below it at most once, then absorbs or pushes the
  position; further merges are left to level 2 (any merge of adjacent
  violators is a PAV step, so stopping early is exact). The two blocks
  under the current one are kept in registers and re-read after the step's
  row write, so XLA updates the memory in place. Block means are compared
  as quotients, as in level 2: cross products of sums and weights flush to 0
  or overflow where the weights (or targets) differ by ~1e19 or more, and
  then merged blocks that were in order.

  Args:
    s: ``(L, lanes)`` weighted targets ``w * y``; position ``t`` of lane ``j``.
    w: ``(L, lanes)`` weights, or None for unit weights.
    code: ``(L, lanes)`` int8: bit 0 set when the position ties with the one
      before it, bit 1 when the next position ties with it.
    length: ``(lanes,)`` valid positions per lane (the rest is ignored).
    head_open: ``(lanes,)`` the lane starts inside a tie group.

  Returns:
    ``(mw, ms, mp, count)``: ``(L + 1, lanes)`` arrays where row ``t < L``
    holds the block pushed at step ``t`` (it ends at position ``t``), row
    ``L`` the last block (it ends at ``length``), and ``mp`` is the row of
    the block before it (``-1`` for the first); the ``count[j]`` blocks
    reachable from row ``L`` through ``mp`` partition lane ``j``'s positions.
  """
  size, lanes = s.shape
  dt = s.dtype
  lane = jnp.arange(lanes, dtype=jnp.int32)

  def step(carry, t):
    cw, cs, bw, bs, brow, bprev, nbw, nbs, depth, mw, ms, mp = carry
    es = s[t]
    ew = jnp.ones_like(es) if w is None else w[t]
    c = code[t]
    inb = t < length
    has = t > 0
    joins = ((c & _JOIN) != 0) & inb & has  # continues the current block's tie group
    next_joins = (c & _NEXT_JOINS) != 0  # its tie group continues after it
    # the current block is complete unless t continues its tie group (a lane whose
    # last tie group runs on into the next lane is full: no step lies past its end)
    complete = has & ~joins
    frozen = (depth == 1) & head_open  # the block below is a partial tie group
    pop = complete & (depth >= 1) & ~frozen & (bs / bw >= cs / cw)
    cw, cs = jnp.where(pop, cw + bw, cw), jnp.where(pop, cs + bs, cs)
    bw, bs, brow = jnp.where(pop, nbw, bw), jnp.where(pop, nbs, bs), jnp.where(pop, bprev, brow)
    depth = depth - pop.astype(jnp.int32)
    partial = (depth == 0) & head_open  # the current block is a partial tie group
    absorb = joins | (inb & has & ~next_joins & ~partial & (cs / cw >= es / ew))
    push = inb & ~absorb
    real = push & has
    mw = lax.dynamic_update_index_in_dim(mw, cw, t, 0)
    ms = lax.dynamic_update_index_in_dim(ms, cs, t, 0)
    mp = lax.dynamic_update_index_in_dim(mp, brow, t, 0)
    bw, bs, brow = jnp.where(real, cw, bw), jnp.where(real, cs, bs), jnp.where(real, t, brow)
    depth = depth + real.astype(jnp.int32)
    cw = jnp.where(absorb, cw + ew, jnp.where(push, ew, cw))
    cs = jnp.where(absorb, cs + es, jnp.where(push, es, cs))
    bprev = mp[jnp.maximum(brow, 0), lane]
    at = jnp.maximum(bprev, 0)
    return (cw, cs, bw, bs, brow, bprev, mw[at, lane], ms[at, lane], depth, mw, ms, mp), None

  z = jnp.zeros((lanes,), dt)
  m1 = jnp.full((lanes,), -1, jnp.int32)
  mem = (
    jnp.zeros((size + 1, lanes), dt),
    jnp.zeros((size + 1, lanes), dt),
    jnp.full((size + 1, lanes), -1, jnp.int32),
  )
  init = carry_like((z, z, z, z, m1, m1, z, z, jnp.zeros((lanes,), jnp.int32)) + mem, s)
  carry, _ = lax.scan(step, init, jnp.arange(size, dtype=jnp.int32))
  cw, cs, _, _, brow, _, _, _, depth, mw, ms, mp = carry
  count = jnp.where(length > 0, depth + 1, 0)
  return mw.at[size].set(cw), ms.at[size].set(cs), mp.at[size].set(brow), count


# ---------------------------------------------------------------------------
# Step 3: level 2, one sequential PAV per row over its level-1 blocks


def _row_blocks(mw, ms, mp, count, rows, chunks, length, head_open):
  """The level-1 blocks of each row, left to right, in ``(rows, n)`` arrays.

  Walks every lane's list from its last block (all lanes at once, as many
  steps as the longest list) and writes block ``k`` of row ``r`` at column
  ``k``. Returns ``(w, s, end, joins, nblocks)``: weights, sums, end
  positions (exclusive), whether a block continues the tie group of the
  block before it (a lane that starts inside a tie group), blocks per row.
  """
  size = mw.shape[0] - 1
  lanes = mw.shape[1]
  n = size * chunks
  lane = jnp.arange(lanes, dtype=jnp.int32)
  per_row = count.reshape(rows, chunks)
  nblocks = jnp.sum(per_row, axis=1, dtype=jnp.int32)
  first = (jnp.cumsum(per_row, axis=1, dtype=jnp.int32) - per_row).reshape(-1)
  base = (lane // chunks) * n + first + count - 1  # flat column of the lane's last block
  chunk_start = (lane % chunks) * size

  def walk(st):
    ptr, d, w, s_, e, j = st
    live = ptr >= 0
    at = jnp.maximum(ptr, 0)
    prev = mp[at, lane]
    dest = jnp.where(live, base - d, rows * n)
    w = w.at[dest].set(mw[at, lane], mode="drop")
    s_ = s_.at[dest].set(ms[at, lane], mode="drop")
    e = e.at[dest].set(chunk_start + jnp.where(at == size, length, at), mode="drop")
    j = j.at[dest].set((prev < 0) & head_open, mode="drop")
    return jnp.where(live, prev, -1), d + 1, w, s_, e, j

  start = (
    jnp.where(count > 0, jnp.int32(size), jnp.int32(-1)),  # int32, as the walk's pointers
    jnp.int32(0),
    jnp.zeros((rows * n,), mw.dtype),
    jnp.zeros((rows * n,), mw.dtype),
    jnp.zeros((rows * n,), jnp.int32),
    jnp.zeros((rows * n,), bool),
  )
  start = carry_like(start, mw)
  _, _, w, s_, e, j = lax.while_loop(lambda st: jnp.any(st[0] >= 0), walk, start)
  shape = (rows, n)
  return w.reshape(shape), s_.reshape(shape), e.reshape(shape), j.reshape(shape), nblocks


def _level2_row(bw, bs, be, bj, nb):
  """Stack PAV over ``nb`` blocks of one row, given as ``(1, m)`` arrays.

  ``bj`` marks blocks that must join the block before them (a tie group cut
  by a chunk boundary); a violation is checked only between complete
  blocks. Returns ``(top, sw, ss, se)``: the ``top`` final blocks' weights,
  sums and end positions at the front of ``(1, m)`` arrays.

  One row at a time: XLA:CPU then runs this loop at tens of nanoseconds per
  step (with one row per lane it costs microseconds per step). The means
  are compared as quotients: written as cross products, XLA fuses the reads
  into several consumers and copies the stack at every step.
  """
  b, m = bw.shape
  lane = jnp.arange(b)

  def violates(top, sw, ss):
    t1, t2 = jnp.maximum(top - 1, 0), jnp.maximum(top - 2, 0)
    return (top >= 2) & (ss[lane, t2] / sw[lane, t2] >= ss[lane, t1] / sw[lane, t1])

  def cond(c):
    i, top, sw, ss, _ = c
    return jnp.any((i < nb) | violates(top, sw, ss))

  def body(c):
    i, top, sw, ss, se = c
    t1, t2 = jnp.maximum(top - 1, 0), jnp.maximum(top - 2, 0)
    aw, as_ = sw[lane, t2], ss[lane, t2]
    cw, cs, ce = sw[lane, t1], ss[lane, t1], se[lane, t1]
    ic = jnp.minimum(i, m - 1)
    ew, es = bw[lane, ic], bs[lane, ic]
    joins = (i < nb) & bj[lane, ic] & (top >= 1)
    viol = (top >= 2) & ~joins & (as_ / aw >= cs / cw)
    push = ~viol & ~joins & (i < nb)
    at = jnp.where(viol, t2, jnp.where(joins, t1, jnp.where(push, top, m)))
    sw = sw.at[lane, at].set(jnp.where(viol, aw + cw, jnp.where(joins, cw + ew, ew)), mode="drop")
    ss = ss.at[lane, at].set(jnp.where(viol, as_ + cs, jnp.where(joins, cs + es, es)), mode="drop")
    se = se.at[lane, at].set(jnp.where(viol, ce, be[lane, ic]), mode="drop")
    top = top + push.astype(jnp.int32) - viol.astype(jnp.int32)
    return i + (push | joins).astype(jnp.int32), top, sw, ss, se

  zero = jnp.zeros((b,), jnp.int32)
  init = carry_like((zero, zero, jnp.ones_like(bw), jnp.zeros_like(bs), jnp.zeros_like(be)), bw)
  _, top, sw, ss, se = lax.while_loop(cond, body, init)
  return top, sw, ss, se


#: Level 2 with every row as one lane of a single loop (True), or one row after
#: another (False); None: one row at a time on CPU, where a one-row loop step
#: costs tens of nanoseconds, and all rows at once elsewhere, where every loop
#: step is a kernel launch and rows one after another would multiply them.
LEVEL2_ALL_ROWS: bool | None = None


def _level2(mw, ms, mp, count, rows, chunks, length, head_open):
  """Final blocks of every row: ``(values, ends, count)``, ``(rows, n)`` and ``(rows,)``."""
  blocks = _row_blocks(mw, ms, mp, count, rows, chunks, length, head_open)

  def one(args):
    top, sw, ss, se = _level2_row(*(a[None] for a in args))
    return top[0], sw[0], ss[0], se[0]

  def by_row(*a):
    return lax.map(one, a)

  if LEVEL2_ALL_ROWS is None:
    top, sw, ss, se = lax.platform_dependent(*blocks, cpu=by_row, default=_level2_row)
  else:
    top, sw, ss, se = (_level2_row if LEVEL2_ALL_ROWS else by_row)(*blocks)
  return ss / sw, se, top


# ---------------------------------------------------------------------------
# Step 4: lookup


def _count_below(bounds: jax.Array, count: jax.Array, q: jax.Array) -> jax.Array:
  """Per row, how many of the first ``count`` (sorted) ``bounds`` are ``< q``.

  Binary lifting over ``ceil(log2(max count + 1))`` steps (a ``while_loop``:
  a few steps for the few final blocks of calibration data).
  """
  top = jnp.max(count)
  step0 = jnp.where(top > 0, jnp.left_shift(1, 31 - lax.clz(jnp.maximum(top, 1))), 0)
  last = bounds.shape[-1] - 1

  def body(st):
    pos, step = st
    cand = pos + step
    probe = jnp.take_along_axis(bounds, jnp.clip(cand - 1, 0, last), axis=-1)
    return jnp.where((cand <= count[:, None]) & (probe < q), cand, pos), step // 2

  init = carry_like((jnp.zeros(q.shape, jnp.int32), step0), q)
  pos, _ = lax.while_loop(lambda st: st[1] > 0, body, init)
  return pos


class _Core(NamedTuple):
  fitted: jax.Array  # (..., n) fitted values in the original order
  sorted_x: jax.Array  # (..., n) x ascending, +inf for zero weights
  sorted_fit: jax.Array  # (..., n) fitted values in that order


def _fit_rows(x: jax.Array, y: jax.Array, w: jax.Array | None) -> _Core:
  """Isotonic fits of the rows of ``(rows, n)`` arrays (common float dtype)."""
  rows, n = x.shape
  key = float_to_key(x)
  if w is not None:
    key = jnp.where(w > 0, key, jnp.array(jnp.iinfo(key.dtype).max, key.dtype))  # zero weights last
  skey, ys, ws = _sorted_data(key, y, w)
  if ws is None:
    nvalid = jnp.full((rows,), n, jnp.int32)
  else:
    valid = ws > 0
    nvalid = jnp.sum(valid, axis=1, dtype=jnp.int32)
    ws = jnp.where(valid, ws, 0)
    ys = jnp.where(valid, ys, 0)
  ss = ys if ws is None else ws * ys

  # level 1 over (CHUNK, lanes) slot-major chunks
  size = min(CHUNK, n)
  chunks = -(-n // size)
  pad = chunks * size - n
  joins = jnp.concatenate([jnp.zeros((rows, 1), bool), skey[:, 1:] == skey[:, :-1]], axis=1)
  next_joins = jnp.concatenate([joins[:, 1:], jnp.zeros((rows, 1), bool)], axis=1)
  code = joins.astype(jnp.int8) * _JOIN + next_joins.astype(jnp.int8) * _NEXT_JOINS

  def lanes_of(a):
    return jnp.pad(a, ((0, 0), (0, pad))).reshape(rows * chunks, size).T

  code_t = lanes_of(code)
  start = jnp.arange(chunks, dtype=jnp.int32) * size
  length = jnp.clip(nvalid[:, None] - start[None, :], 0, size).reshape(-1)
  head_open = (code_t[0] & _JOIN) != 0
  mw, ms, mp, nblocks = _level1(
    lanes_of(ss), None if ws is None else lanes_of(ws), code_t, length, head_open
  )
  values, ends, count = _level2(mw, ms, mp, nblocks, rows, chunks, length, head_open)

  # lookup: first final block whose last key is >= the sample's key
  bounds = jnp.take_along_axis(skey, jnp.clip(ends - 1, 0, n - 1), axis=1)
  last = jnp.maximum(count - 1, 0)[:, None]

  def value_at(keys):
    return jnp.take_along_axis(values, jnp.minimum(_count_below(bounds, count, keys), last), axis=1)

  sorted_x = key_to_float(skey).astype(x.dtype)
  if ws is not None:
    sorted_x = jnp.where(jnp.arange(n)[None, :] < nvalid[:, None], sorted_x, jnp.inf)
  return _Core(value_at(float_to_key(x)), sorted_x, value_at(skey))


#: Most entries (rows times padded samples) of one :func:`_fit_rows` call: level
#: 2 addresses the blocks of all its rows by flat int32 positions
#: (:func:`_row_blocks`, ``rows * n`` the dropped one).
MAX_FLAT_POSITIONS = 2**31 - 1


def _padded_length(n: int) -> int:
  """Positions per row of level 1 and 2: ``n`` rounded up to whole chunks."""
  size = max(min(CHUNK, n), 1)
  return -(-n // size) * size


def _fit_batched(x, y, w=None):
  """:func:`_fit_rows` over any leading axes (its sorts split the rows per CPU core).

  The rows go to :func:`_fit_rows` in as few equal groups as keep each
  group's rows times padded samples within :data:`MAX_FLAT_POSITIONS` (8
  classes of ``2**28`` samples: two groups of 4); a single row beyond it
  (more than ``2**31 - 256`` samples) is refused at trace time.
  """
  lead, n = x.shape[:-1], x.shape[-1]
  padded = _padded_length(n)
  if padded > MAX_FLAT_POSITIONS:
    most = MAX_FLAT_POSITIONS // CHUNK * CHUNK
    raise ValueError(
      f"an isotonic fit takes at most {most:,} samples per data set (int32 positions), got "
      f"{n:,}: fit a subsample, or merge equal x into one point each (weight: their total "
      "weight, y: their weighted mean), which gives the same fit"
    )
  flat = [a.reshape((-1, n)) if a is not None else None for a in (x, y, w)]
  rows = flat[0].shape[0]
  groups = -(-rows // max(MAX_FLAT_POSITIONS // padded, 1))
  if groups <= 1:
    out = _fit_rows(*flat)
  else:
    size = -(-rows // groups)
    parts = [
      _fit_rows(*(a[i : i + size] if a is not None else None for a in flat))
      for i in range(0, rows, size)
    ]
    out = jax.tree.map(lambda *o: jnp.concatenate(o), *parts)
  return jax.tree.map(lambda o: o.reshape(lead + (n,)), out)


_rows_unweighted = rowwise_vmap(lambda x, y: _fit_batched(x, y))
_rows_weighted = rowwise_vmap(_fit_batched)


def _core(x: jax.Array, y: jax.Array, w: jax.Array | None) -> _Core:
  """Isotonic fit of one ``(n,)`` data set; ``vmap`` batches it efficiently.

  Differentiable in both modes by :func:`_core_jvp` (the fit's own sorts and
  scans are not transposable, and the packed sort of 0/1 targets drops their
  tangents).
  """
  if w is None:
    return _core_unweighted(x, y)
  return _core_weighted(x, y, w)


@jax.custom_jvp
def _core_unweighted(x, y):
  return _rows_unweighted(x, y)


@jax.custom_jvp
def _core_weighted(x, y, w):
  return _rows_weighted(x, y, w)


def _core_jvp(primals, tangents):
  """Derivative of the fit with its pools held: each pool's value is its weighted mean.

  .. math::
    \\dot{\\hat y}_B = \\frac{\\sum_{i \\in B} w_i \\dot y_i + \\dot w_i (y_i - \\hat y_B)}
      {\\sum_{i \\in B} w_i}, \\qquad \\dot{\\hat y} = 0 \\text{ in } x

  (pools: maximal runs of equal fitted value, :func:`pools`), and the sorted
  inputs carry ``x``'s tangents permuted. Linear in the tangents through a
  gather and segment sums, so ``jax.grad`` transposes it. At a kink it is
  the Jacobian with the final pools held (a limit of Jacobians at nearby
  points, not necessarily a one-sided derivative): adjacent PAV blocks of
  equal value count as one pool, and a zero weight's own tangent is
  dropped. Second derivatives hold where the fit is called directly or
  under ``vmap``; under the class loops of the recalibrators' fits and
  :func:`~jaxcal.scores.decompose` (``lax.map``) JAX gives 0.
  """
  x, y, *w = primals
  tx, ty, *tw = tangents
  # the differentiable fit again: a second derivative (jax.hessian) goes through this rule
  # too (the raw fit's key sort and packed 0/1 sort drop tangents: it read 0)
  out = _core_weighted(x, y, w[0]) if w else _core_unweighted(x, y)
  key = float_to_key(x)
  if w:
    key = jnp.where(w[0] > 0, key, jnp.array(jnp.iinfo(key.dtype).max, key.dtype))
  _, perm = argsort_keys(key)  # the fit's sort: stable, zero weights last
  pid = pools(out.sorted_fit)[0]
  n = x.shape[0]

  def take(a):
    return jnp.take(a, perm)

  ys, dy = take(y), take(ty)
  if w:
    ws, dw = take(w[0]), take(tw[0])
    # products, not selects: a NaN cotangent (invalid weights, folded) stays NaN
    num = ws * dy + dw * jnp.where(ws > 0, ys - out.sorted_fit, 0)
    den = jax.ops.segment_sum(ws, pid, n)
  else:
    num = dy
    den = jax.ops.segment_sum(jnp.ones_like(ys), pid, n)
  per_pool = jax.ops.segment_sum(num, pid, n) / jnp.where(den > 0, den, 1)
  first = jnp.searchsorted(out.sorted_fit, out.fitted, side="left")
  dx = take(tx)
  if w:
    dx = dx * (ws > 0)  # beyond the positive weights sorted_x is inf
  return out, _Core(per_pool[pid[first]], dx, per_pool[pid])


_core_unweighted.defjvp(_core_jvp)
_core_weighted.defjvp(_core_jvp)


@jax.jit
def _weight_stats(w: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
  """``(min(w), any(w > 0), positive subnormal entries)`` in one fused reduction.

  Subnormal entries are found from their bits: XLA:CPU reads them as 0 in
  arithmetic and comparisons, so such a weight would silently drop its point.
  """
  bits = lax.bitcast_convert_type(w, jnp.dtype(f"int{w.dtype.itemsize * 8}"))
  normal = lax.bitcast_convert_type(
    jnp.asarray(jnp.finfo(w.dtype).smallest_normal, w.dtype), bits.dtype
  )
  subnormal = jnp.sum((bits > 0) & (bits < normal), dtype=jnp.int32)
  return jnp.min(w), jnp.any(w > 0), subnormal


def _prepare(x, y, weights):
  """Validated ``(x, y 2^-k, weights or None, k, ok)`` in their common float dtype.

  Shapes always; values (finite; weights non-negative with a positive
  entry) in one fused reduction that raises on concrete inputs. Under a
  transformation ``ok`` is the traced validity flag to fold into the result
  (``None`` after an eager check).
  """
  from jaxcal._src import validation as V

  xa = V.as_float(x, "x")
  ya = V.as_float(y, "y")
  wa = None if weights is None else V.as_float(weights, "weights")
  if xa.ndim != 1 or xa.shape[0] == 0:
    raise ValueError(
      f"x must have shape (n,) with n >= 1, got shape {tuple(xa.shape)}; for several data sets "
      "use jax.vmap(isotonic_regression)"
    )
  if ya.shape != xa.shape:
    raise ValueError(f"y must have the shape of x {tuple(xa.shape)}, got {tuple(ya.shape)}")
  if wa is not None and wa.shape != xa.shape:
    raise ValueError(f"weights must have the shape of x {tuple(xa.shape)}, got {tuple(wa.shape)}")
  arrays = {"x": xa, "y": ya} if wa is None else {"x": xa, "y": ya, "weights": wa}
  _, _, _, ok, _ = V.check_arrays(arrays)  # finite: raises eagerly, a traced flag otherwise
  if wa is not None:
    if V.is_concrete(wa):
      with jax.ensure_compile_time_eval():  # weights closed over by a user's jit: read now
        low, positive, subnormal = jax.device_get(_weight_stats(wa))
      if float(low) < 0:
        raise ValueError(f"weights must be >= 0; found minimum {float(low):.4g}")
      if int(subnormal):
        tiny = jnp.finfo(wa.dtype).smallest_normal
        raise ValueError(
          f"weights has {int(subnormal)} positive entr{'y' if int(subnormal) == 1 else 'ies'} "
          f"below {tiny:.3g} (subnormal "
          f"{wa.dtype.name}), which XLA reads as 0: scale the weights up (the fit does not "
          "depend on their scale) or compute in float64"
        )
      if not bool(positive):
        raise ValueError("weights must have at least one positive entry (all are 0)")
    else:  # checked mode raises the eager messages
      low, positive, subnormal = _weight_stats(wa)
      V.trace_check(low >= 0, "weights must be >= 0; found minimum {low}", low=low)
      V.trace_check(positive, "weights must have at least one positive entry (all are 0)")
      V.trace_check(
        subnormal == 0,
        "weights has {k} positive entries below the smallest normal number (subnormal), which "
        "XLA reads as 0: scale the weights up (the fit does not depend on their scale)",
        k=subnormal,
      )
      good = (low >= 0) & positive & (subnormal == 0)
      ok = good if ok is None else ok & good
  # integer or bool targets (labels) do not widen float32 scores to JAX's default float
  # (float64 under x64); integer scores and weights do (int64 timestamps need float64)
  dt = _float_dtype(xa, ya if _given_float(y) else None, wa)
  xa = xa.astype(dt)
  ya, wa, k, lost_y, lost_w = _scaled(ya.astype(dt), None if wa is None else wa.astype(dt))
  if V.is_concrete(lost_y, lost_w):  # under vmap over the weights alone only lost_w is traced
    if bool(lost_y):
      raise ValueError(
        f"y spans too wide a range for {dt.name}: scaled down by 2^k so that the block sums "
        "of y stay finite, its smallest nonzero entries become 0 (or subnormal); rescale y "
        "or compute in float64 (jax.enable_x64)"
      )
    if bool(lost_w):
      raise ValueError(
        f"weights span too wide a range for {dt.name}: scaled so that the sums of "
        "weights x y stay finite, their smallest positive entries become 0 (or "
        "subnormal); rescale y or compute in float64 (jax.enable_x64)"
      )
  else:
    V.trace_check(
      ~lost_y, f"y spans too wide a range for {dt.name}: rescale y or compute in float64"
    )
    V.trace_check(
      ~lost_w, f"weights span too wide a range for {dt.name}: rescale y or compute in float64"
    )
    good = ~(lost_y | lost_w)
    ok = good if ok is None else ok & good
  return xa, ya, wa, k, ok


@jax.jit
def _scaled(y: jax.Array, w: jax.Array | None):
  """``(y 2^-k, w 2^j, k, lost_y, lost_w)``: the targets and weights scaled by powers of two
  so that the block sums of the fit stay finite.

  ``k >= 0`` is the smallest with ``n max |y| 2^-k`` below a quarter of the
  dtype's largest value (``k = 0``, no change, for any ``|y|`` from 1/2 to
  ~1e30 in float32); targets whose largest is below 1/2 are scaled up to a
  largest in ``[1/2, 1)`` (``k < 0``, at most ``2^100``), and the fitted
  values are scaled back by ``2^k``: the fit is equivariant to ``y``'s
  scale, and powers of two scale exactly, so the fit is bit-identical where
  nothing overflows or underflows. (Without it, ten float32 targets near
  3e38 fitted to ``inf``, and weights 1e-20 of targets 1e-20 fitted to 0:
  their products fell below the smallest normal number.) The weights are
  then scaled as in :func:`_scaled_weights` (``w`` None: unit weights, ``j =
  0``).
  ``lost_y``: a nonzero target fell below the smallest normal number in the
  scaling (XLA:CPU reads it as 0); ``lost_w``: likewise a positive weight.
  """
  big = jnp.finfo(y.dtype).max
  limit = big / (4.0 * y.shape[0])
  top = jnp.frexp(jnp.max(jnp.abs(y)))[1]  # max |y| 2^-top in [1/2, 1) (0 for y = 0)
  k = jnp.maximum(top - jnp.frexp(limit)[1] + 1, 0)
  k = jnp.where(top < 0, jnp.maximum(top, -100), k)
  scaled = y * _pow2(-k, y.dtype)  # 2^-k in [2^-(log2(n) + 4), 2^100]: normal, exact product
  tiny = jnp.finfo(y.dtype).smallest_normal
  lost_y = jnp.any((jnp.abs(y) >= tiny) & ~(jnp.abs(scaled) >= tiny))
  if w is None:
    return scaled, None, k, lost_y, jnp.zeros((), bool)
  w, lost_w = _scaled_weights(w, scaled)
  return scaled, w, k, lost_y, lost_w


def _scaled_weights(w: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
  """``(w * 2^k, lost)``: the weights scaled by a power of two to a largest weight in
  ``[1/2, 1)``, or lower where ``n max w max(1, |y|)`` would pass a quarter of
  the dtype's largest value.

  The fit is invariant to the weights' scale and a power of two scales
  exactly, so the fit is unchanged. Weights large enough to overflow the
  block sums are scaled down; small ones are scaled up, as their products
  with ``y`` (itself scaled to a largest in ``[1/2, 1)``) fell below the
  smallest normal number, which XLA:CPU reads as 0 (weights ``1e-20`` of
  targets ``1e-20`` fitted to 0). A product of entries far below both
  largest ones can still fall below it: it then counts as 0 in its block's
  sum, below ``1e-38`` of the largest ``w |y|`` (float32). (Dividing by the
  maximum made a positive weight ``1e-30`` next to ``1e10`` subnormal.)
  ``lost``: a positive weight became 0 (or subnormal) in the scaling.
  """
  big = jnp.finfo(w.dtype).max
  limit = big / (4.0 * w.shape[0]) / jnp.maximum(jnp.max(jnp.abs(y)), 1.0)
  top = jnp.frexp(jnp.max(w))[1]
  k = jnp.minimum(jnp.frexp(limit)[1] - 1 - top, jnp.maximum(-top, 0))
  scaled = jnp.ldexp(w, k)
  return scaled, jnp.any((w > 0) & ~(scaled > 0))


def _pow2(k: jax.Array, dtype: jnp.dtype) -> jax.Array:
  """``2^k`` as a scalar of ``dtype`` (a product with it is exact where the result is normal)."""
  return jnp.ldexp(jnp.ones((), dtype), k)


@jax.jit
def _jit_fitted(x, y, w, k):
  fitted = _core(x, y, w).fitted
  return fitted * _pow2(k, fitted.dtype)


@jax.jit
def _jit_step(x, y, w, k):
  core = _core(x, y, w)
  return IsotonicFit(core.sorted_x, core.sorted_fit * _pow2(k, core.sorted_fit.dtype))


@V.outside_explicit_context
def isotonic_regression(x: ArrayLike, y: ArrayLike, weights: ArrayLike | None = None) -> jax.Array:
  """Weighted least-squares increasing fit of ``y`` on ``x`` (PAV solution).

  .. math::
    \\hat y = \\arg\\min_{f \\text{ non-decreasing in } x} \\sum_i w_i (y_i - f(x_i))^2

  Ties in ``x`` are pooled (equal ``x`` get equal fitted values, the
  "secondary" approach of scikit-learn and of R's ``isoreg`` after sorting
  ``y`` descending within ties). Zero-weight points do not influence the fit
  and get the value of the fitted step function at their ``x`` (see
  :func:`isotonic_predict`). Works under ``jax.jit`` and ``jax.vmap`` (e.g.
  over the classes of a ``(C, n)`` array, which runs as one batched call);
  no host callbacks; the output shape never depends on the data. Exact:
  the same fit as a sequential PAV in the input dtype. Under a
  transformation, bad values (NaN or inf, negative or all-zero weights) make
  the whole output NaN instead of raising.

  Args:
    x: ``(n,)`` finite inputs, in the compute dtype: without x64, float64 or
      integer values that float32 cannot tell apart (int64 timestamps near
      ``1.7e9``, say) become ties and are pooled; rank or centre them first.
    y: ``(n,)`` finite targets.
    weights: optional ``(n,)`` non-negative weights (at least one positive);
      default all ones.

  Returns:
    ``(n,)`` fitted values in the original order, in the common float dtype
    of the inputs.

  Raises:
    ValueError: wrong shapes, non-finite values, negative or all-zero weights,
      positive weights below the dtype's smallest normal number (XLA reads them
      as 0), or weights spanning so wide a range that keeping the sums of
      ``weights * y`` finite would round the smallest weight to 0 (targets
      and weights are scaled by powers of two to largest entries near 1
      first), or targets so large
      (``n max |y|`` near the dtype's largest value) that scaling them to keep
      the block sums finite would flush the smallest nonzero ones (values: on
      concrete inputs; traced ones give NaN).

  Example:
    >>> import jax.numpy as jnp
    >>> isotonic_regression(jnp.array([3., 1., 2., 2.]), jnp.array([0., 1., 1., 0.])).tolist()
    [0.5, 0.5, 0.5, 0.5]
    >>> isotonic_regression(jnp.array([1., 2., 3.]), jnp.array([1., 0., 2.]),
    ...                     weights=jnp.array([1., 3., 1.])).tolist()
    [0.25, 0.25, 2.0]

  Reference: Barlow, Bartholomew, Bremner & Brunk (1972), *Statistical
  Inference under Order Restrictions*, Thm 1.1 (the fit is the slope of the
  greatest convex minorant of the cumulative sum diagram; pool adjacent
  violators); Resin (2025), *Calibration in Context: A Case Study with Score
  Decompositions*, §2.2 (class-wise isotonic recalibration, pooled ties).
  """
  from jaxcal._src import validation as V

  xa, ya, wa, k, ok = _prepare(x, y, weights)
  return V.fold(_jit_fitted(xa, ya, wa, k), ok)


def isotonic_fit_sorted(x: jax.Array, y: jax.Array, weights: jax.Array | None = None) -> _Core:
  """Isotonic fit without validation, for internal callers (jit and vmap friendly).

  Same fit as :func:`isotonic_regression`; under ``jit`` only the fields a
  caller uses are computed.

  Args:
    x: ``(n,)`` finite inputs.
    y: ``(n,)`` finite targets.
    weights: optional ``(n,)`` non-negative weights.

  Returns:
    ``(fitted, sorted_x, sorted_fit)``: ``(n,)`` fitted values in the
    original order, and the step function as in :class:`IsotonicFit`.

  Example:
    >>> import jax.numpy as jnp
    >>> isotonic_fit_sorted(jnp.array([0.3, 0.1]), jnp.array([0.0, 1.0])).fitted.tolist()
    [0.5, 0.5]

  Reference: Barlow, Bartholomew, Bremner & Brunk (1972), *Statistical
  Inference under Order Restrictions*, Thm 1.1.
  """
  dt = _float_dtype(x, y, weights)
  return _core(x.astype(dt), y.astype(dt), None if weights is None else weights.astype(dt))


def isotonic_fit_columns(x: jax.Array, y: jax.Array, weights: jax.Array | None = None) -> _Core:
  """:func:`isotonic_fit_sorted` of every column of ``x`` on the same column of ``y``.

  A few columns at a time (:func:`~jaxcal._src.numerics.map_columns`): one
  ``vmap`` over all ``C`` columns held several ``(C, n, 2)`` index arrays.

  Args:
    x: ``(n, C)`` finite inputs.
    y: ``(n, C)`` finite targets.
    weights: optional ``(n,)`` non-negative weights shared by the columns.

  Returns:
    The fits with a leading class axis: ``(C, n)`` fields.

  Example:
    >>> import jax.numpy as jnp
    >>> x = jnp.array([[0.3, 0.7], [0.1, 0.9]])
    >>> isotonic_fit_columns(x, jnp.array([[0.0, 0.0], [1.0, 1.0]])).fitted.tolist()
    [[0.5, 0.5], [0.0, 1.0]]
  """
  return map_columns(lambda a, b: isotonic_fit_sorted(a, b, weights), x, y)


@V.outside_explicit_context
def isotonic_fit(x: ArrayLike, y: ArrayLike, weights: ArrayLike | None = None) -> IsotonicFit:
  """Fits the isotonic step function (for :func:`isotonic_predict`).

  Args:
    x: ``(n,)`` finite inputs.
    y: ``(n,)`` finite targets.
    weights: optional ``(n,)`` non-negative weights.

  Returns:
    :class:`IsotonicFit` ``(x_sorted, fitted_sorted)``, both ``(n,)`` (both
    NaN for bad values under a transformation).

  Raises:
    ValueError: as :func:`isotonic_regression`.

  Example:
    >>> import jax.numpy as jnp
    >>> f = isotonic_fit(jnp.array([0.2, 0.6, 0.4]), jnp.array([0., 1., 1.]))
    >>> f.x.tolist(), f.y.tolist()
    ([0.2..., 0.4..., 0.6...], [0.0, 1.0, 1.0])

  Reference: Barlow, Bartholomew, Bremner & Brunk (1972), *Statistical
  Inference under Order Restrictions*, Thm 1.1; Resin (2025), *Calibration
  in Context: A Case Study with Score Decompositions*, §2.2.
  """
  from jaxcal._src import validation as V

  xa, ya, wa, k, ok = _prepare(x, y, weights)
  return V.fold(_jit_step(xa, ya, wa, k), ok)


def predict_unchecked(fit: IsotonicFit, t: jax.Array) -> jax.Array:
  """:func:`isotonic_predict` without validation, for internal callers (jit and vmap friendly).

  Args:
    fit: an :class:`IsotonicFit` with ``(n,)`` arrays.
    t: queries of any shape, in ``fit.x``'s dtype.

  Returns:
    Fitted values with the shape of ``t``; NaN where ``t`` is not finite.

  Example:
    >>> import jax.numpy as jnp
    >>> f = IsotonicFit(jnp.array([0.2, 0.4]), jnp.array([0.0, 1.0]))
    >>> predict_unchecked(f, jnp.array([0.3, jnp.nan])).tolist()
    [1.0, nan]

  Reference: Resin (2025), *Calibration in Context: A Case Study with Score
  Decompositions*, §2.2.
  """
  n = fit.x.shape[-1]
  idx = jnp.searchsorted(fit.x, t.reshape(-1), side="left")
  out = fit.y[jnp.clip(idx, 0, n - 1)].reshape(t.shape)
  return jnp.where(jnp.isfinite(t), out, jnp.asarray(jnp.nan, out.dtype))


@jax.jit
def _fit_stats(x: jax.Array, y: jax.Array) -> tuple[jax.Array, ...]:
  """Whether ``(x, y)`` is a step function :func:`isotonic_predict` can read, in one
  fused reduction: ``(ok, x_bad, y_bad, (i, a[i], a[i + 1]) for a = x, y)``.

  ``x_bad``: ``x`` holds NaN or ``-inf`` (``+inf`` marks the zero-weight
  points of a fit, which sort last); ``y_bad``: ``y`` a non-finite value;
  ``i``: the first position with ``a[i + 1] < a[i]``, or -1.
  """

  def first_drop(a):
    if a.shape[0] < 2:  # one step: nothing can decrease (argmax of no pairs raised)
      return jnp.int32(-1), a[0], a[0]
    drop = a[1:] < a[:-1]
    i = jnp.where(jnp.any(drop), jnp.argmax(drop), -1).astype(jnp.int32)
    return i, a[jnp.maximum(i, 0)], a[jnp.minimum(i + 1, a.shape[0] - 1)]

  x_bad = jnp.any(jnp.isnan(x) | (x == -jnp.inf))
  y_bad = jnp.any(~jnp.isfinite(y))
  x_drop, y_drop = first_drop(x), first_drop(y)
  ok = ~x_bad & ~y_bad & (x_drop[0] < 0) & (y_drop[0] < 0)
  return ok, x_bad, y_bad, x_drop, y_drop


#: Why an :class:`IsotonicFit` built by hand is refused (the tail of the messages).
_FIT_HINT = (
  "an IsotonicFit holds the inputs sorted ascending and non-decreasing fitted values: build "
  "it with isotonic_fit(x, y)"
)


def _fit_checks(stats) -> list[tuple[Any, str, dict]]:
  """``(ok, message template, values)`` of each rule of a fit, from :func:`_fit_stats`
  (eager calls format the first failed one; checked mode passes them to checkify)."""
  _, x_bad, y_bad, (xi, xlo, xhi), (yi, ylo, yhi) = stats
  drop = "{name} must be non-decreasing, got {name}[{j}] = {hi} < {name}[{i}] = {lo}; "
  return [
    (~x_bad, f"fit.x contains NaN or -inf; {_FIT_HINT}", {}),
    (~y_bad, f"fit.y contains non-finite values (NaN or inf); {_FIT_HINT}", {}),
    (xi < 0, drop.replace("{name}", "fit.x") + _FIT_HINT, dict(i=xi, j=xi + 1, lo=xlo, hi=xhi)),
    (yi < 0, drop.replace("{name}", "fit.y") + _FIT_HINT, dict(i=yi, j=yi + 1, lo=ylo, hi=yhi)),
  ]


def _check_fit(fx: jax.Array, fy: jax.Array) -> jax.Array | None:
  """Checks a fit: raises on a concrete one, else returns the traced flag.

  A concrete fit is checked now, also one closed over inside a user's jit
  (compile-time evaluation keeps the check from being staged out); its few
  scalars come back, and the first failed rule raises. A traced one gives
  its flag (the caller folds it: NaN out), and in checked mode one check
  per rule.
  """
  from jaxcal._src import validation as V

  if V.is_concrete(fx, fy):
    with jax.ensure_compile_time_eval():
      stats = jax.device_get(_fit_stats(fx, fy))
    for ok, template, values in _fit_checks(stats):
      if not ok:
        raise ValueError(template.format(**{k: str(v) for k, v in values.items()}))
    return None
  stats = _fit_stats(fx, fy)
  for ok, template, values in _fit_checks(stats):
    V.trace_check(ok, template, **values)
  return stats[0]


@V.outside_explicit_context
def isotonic_predict(fit: IsotonicFit, x_new: ArrayLike) -> jax.Array:
  """Evaluates a fitted isotonic step function at new points.

  .. math::
    f(t) = \\hat y_{(j)}, \\quad j = \\min\\{i : x_{(i)} \\ge t\\}
    \\text{ (the last fitted value if there is none)}

  i.e. the step function jumps right after the largest input of each pool
  (left-continuous) and is constant outside the training range, as R's
  ``as.stepfun(isoreg(x, y))``.

  Args:
    fit: an :class:`IsotonicFit` with ``(n,)`` arrays (from :func:`isotonic_fit`):
      ``fit.x`` non-decreasing without NaN or ``-inf`` (a fit's zero-weight
      points sort last as ``+inf``), ``fit.y`` finite and non-decreasing.
    x_new: finite queries, an array of any shape.

  Returns:
    Fitted values with the shape of ``x_new``. Under a transformation a
    non-finite query gives NaN, and a fit that breaks the rules above gives
    NaN everywhere (eager calls raise; so does checked mode).

  Raises:
    ValueError: ``fit`` is not an :class:`IsotonicFit` of two ``(n,)``
      arrays (a plain ``(x, y)`` tuple included), ``fit.x`` or ``fit.y``
      decreases somewhere or holds bad values (on a concrete fit), or
      ``x_new`` holds NaN or inf (on concrete queries).

  Example:
    >>> import jax.numpy as jnp
    >>> f = isotonic_fit(jnp.array([0.2, 0.4, 0.6]), jnp.array([0., 1., 1.]))
    >>> isotonic_predict(f, jnp.array([0.0, 0.2, 0.3, 0.9])).tolist()
    [0.0, 0.0, 1.0, 1.0]

  Reference: Resin (2025), *Calibration in Context: A Case Study with Score
  Decompositions*, §2.2 (its reference code evaluates R's
  ``as.stepfun(isoreg(x, y))``).
  """
  from jaxcal._src import validation as V

  if not isinstance(fit, IsotonicFit):
    raise ValueError(
      f"fit must be an IsotonicFit (the result of isotonic_fit), got {type(fit).__name__}; "
      "build one with isotonic_fit(x, y), or IsotonicFit(x_sorted, y_fitted) with both "
      "non-decreasing"
    )
  fx, fy = V.as_float(fit.x, "fit.x"), V.as_float(fit.y, "fit.y")
  if fx.ndim != 1 or fx.shape[0] == 0 or fy.shape != fx.shape:
    raise ValueError(
      "fit must hold two (n,) arrays with n >= 1, got fit.x of shape "
      f"{tuple(fx.shape)} and fit.y of shape {tuple(fy.shape)}"
    )
  # A fit built by hand, IsotonicFit(x, y) with x unsorted, was read as if sorted: the
  # binary search returned values of the wrong steps, silently.
  # (traced: a bad fit predicts NaN everywhere, as isotonic_fit's traced bad fit is NaN)
  fit_ok = _check_fit(fx, fy)
  t = V.as_float(x_new, "x_new")
  if V.is_concrete(t):
    V.check_values(t, "x_new")  # raises on NaN / inf (one fused reduction)
  else:  # NaN rows stay NaN; checked mode raises as an eager call does
    V.trace_check(jnp.all(jnp.isfinite(t)), "x_new contains non-finite values (NaN or inf)")
  return V.fold(predict_unchecked(IsotonicFit(fx, fy), t.astype(fx.dtype)), fit_ok)


def pools(sorted_fit: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
  """Pools of an isotonic fit: maximal runs of equal fitted value.

  Args:
    sorted_fit: ``(n,)`` fitted values in sorted order (non-decreasing).

  Returns:
    ``(pool_id, start, end)``: ``(n,)`` pool index per sorted position, and
    ``(n,)`` first/last sorted position of pool ``j`` (padding rows beyond
    the number of pools hold ``n - 1``).

  Example:
    >>> import jax.numpy as jnp
    >>> pid, start, end = pools(jnp.array([0.0, 0.5, 0.5, 1.0]))
    >>> pid.tolist(), start[:3].tolist(), end[:3].tolist()
    ([0, 1, 1, 2], [0, 1, 3], [0, 2, 3])

  Reference: Resin (2025), *Calibration in Context: A Case Study with Score
  Decompositions*, App. B (the pools ``B_1, ..., B_m`` of the PAV fit).
  """
  n = sorted_fit.shape[0]
  new = jnp.concatenate([jnp.ones((1,), bool), sorted_fit[1:] != sorted_fit[:-1]])
  pid = jnp.cumsum(new.astype(jnp.int32)) - 1
  pos = jnp.arange(n, dtype=jnp.int32)
  start = jnp.full((n,), n - 1, jnp.int32).at[jnp.where(new, pid, n)].set(pos, mode="drop")
  is_end = jnp.concatenate([new[1:], jnp.ones((1,), bool)])
  end = jnp.full((n,), n - 1, jnp.int32).at[jnp.where(is_end, pid, n)].set(pos, mode="drop")
  return pid, start, end
