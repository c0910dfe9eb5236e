"""Numerical conventions shared by every module.

``PRECISION`` is the precision every matrix product in the metrics and
recalibrators requests. On GPUs (and TPUs) XLA's default for a float32
product is TF32 (bf16 passes on TPU), about 1e-3 relative error: enough to
move a kernel-based LCE by 1 % and to break agreement with float64
references. ``tests/test_precision.py`` checks the source for it.

:func:`row_reduce` is how a reduction over classes of a computed ``(n, C)``
quantity is written without an ``(n, C)`` temporary, and :func:`row_sum_min`
how the row sums and row minima of a probability matrix are found in one
pass where the rows are narrow. :func:`two_sum` is Knuth's error-free sum,
and :func:`segment_sum_accurate` a float segment sum over many samples that
does not drift with their number (chunks, added with it). :func:`map_batches` is
``jax.lax.map`` in batches with one compiled body (bootstrap resamples, rank
correlations, kernel predictions). :class:`RowBlocks` and :func:`by_rows` let a
computation that works row by row (a softmax, the top label, a per-sample
score) run on a matrix held as two consecutive blocks of rows (a caller's host
buffer read in place, see ``validation.check_predictions(..., borrow=True)``).
:func:`lift` is how arrays of different ranks are combined: the library
never relies on numpy's implicit rank promotion, so it runs under a user's
``jax_numpy_rank_promotion="raise"`` (``tests/conftest.py`` sets it).
"""

import functools
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
  "PRECISION",
  "ROW_CHUNK",
  "RowBlocks",
  "by_rows",
  "join_rows",
  "lift",
  "map_batches",
  "narrow_row_sums",
  "row_reduce",
  "row_sum_min",
  "safe_sqrt",
  "segment_sum_accurate",
  "two_sum",
]

#: Full float32 products on every backend (no TF32 on GPU, no bf16 passes on TPU).
PRECISION = jax.lax.Precision.HIGHEST

#: Reductions over the last axis of at most this many entries fuse with the
#: elementwise work that feeds them on XLA:CPU; a longer one is rewritten into
#: a tree of reduce-windows whose input is first written out whole (an
#: ``(n, C)`` temporary for a reduction over classes, and a pass over it).
ROW_CHUNK = 32
#: Beyond this many chunks of :data:`ROW_CHUNK` columns :func:`row_reduce` loops
#: over them instead of unrolling them (compile time grew with ``C``).
ROW_LOOP_CHUNKS = 8

#: The widest rows :func:`row_sum_min` takes (beyond it the two library
#: reductions are faster); the simplex check switches on it.
NARROW_ROW = 32


def lift(x: Any, ndim: int) -> jax.Array:
  """``x`` with leading axes of size 1 up to rank ``ndim``: broadcasting without rank promotion.

  ``lift(v, 2) * m`` for ``v (C,)`` and ``m (n, C)`` is ``v[None, :] * m``;
  a scalar stays a scalar (combining one with any array is not a rank
  promotion). Under ``jax_numpy_rank_promotion="raise"`` (a setting of the
  user's) ``v * m`` itself raises.

  Args:
    x: an array (or number) of rank at most ``ndim``.
    ndim: the rank to reach.

  Returns:
    ``x`` reshaped to ``(1, ..., 1, *x.shape)``.

  Example:
    >>> import jax.numpy as jnp
    >>> lift(jnp.arange(3), 3).shape
    (1, 1, 3)
  """
  x = jnp.asarray(x)
  if x.ndim == 0 or x.ndim == ndim:
    return x
  if x.ndim > ndim:
    raise ValueError(f"lift: rank {x.ndim} is above {ndim}")
  return x.reshape((1,) * (ndim - x.ndim) + x.shape)


def safe_sqrt(x: jax.Array) -> jax.Array:
  """``sqrt(max(x, 0))`` with a zero derivative where ``x <= 0`` (not ``inf``).

  ``d sqrt(x) / dx`` is ``inf`` at 0, and ``inf`` times a zero cotangent is
  NaN: a gradient through a masked or clipped ``sqrt(0)`` (a kernel's zero
  distance, an estimate clipped to 0) was NaN everywhere.

  Example:
    >>> import jax, jax.numpy as jnp
    >>> float(jax.grad(safe_sqrt)(0.0)), float(safe_sqrt(jnp.float32(4.0)))
    (0.0, 2.0)
  """
  x = jnp.asarray(x)
  pos = x > 0
  return jnp.where(pos, jnp.sqrt(jnp.where(pos, x, 1)), 0)


def row_reduce(fn: Callable, x: jax.Array, op: str = "sum") -> jax.Array:
  """``op`` over the last axis of ``fn(x[..., cols], cols)``, in chunks of columns.

  ``fn`` maps a slice of columns of ``x`` and their indices (int32, of the
  slice's rank: ``(1, ..., 1, k)``) to values of the slice's shape; the
  chunks of :data:`ROW_CHUNK` columns are reduced separately and combined,
  so no array of ``x``'s shape is written.

  Args:
    fn: elementwise function of ``(columns (..., k), indices (1, ..., 1, k))``.
    x: ``(..., C)`` array.
    op: ``"sum"``, ``"max"``, ``"min"`` or ``"any"`` (static).

  Returns:
    ``(...,)`` array.

  Example:
    >>> import jax.numpy as jnp
    >>> p = jnp.array([[0.2, 0.8], [0.5, 0.5]])
    >>> [round(v, 4) for v in row_reduce(lambda v, r: v * (r == 1), p).tolist()]
    [0.8, 0.5]
  """
  reduce = {"sum": jnp.sum, "max": jnp.max, "min": jnp.min, "any": jnp.any}[op]
  combine = {"sum": jnp.add, "max": jnp.maximum, "min": jnp.minimum, "any": jnp.logical_or}[op]

  def part(a: Any, width: int) -> jax.Array:
    cols = lift(a + jnp.arange(width, dtype=jnp.int32), x.ndim)
    if isinstance(a, int):
      v = x[..., a : a + width]
    else:
      v = jax.lax.dynamic_slice_in_dim(x, a, width, axis=-1)
    return reduce(fn(v, cols), axis=-1)

  num = x.shape[-1]
  full = num // ROW_CHUNK
  if full > ROW_LOOP_CHUNKS:
    # a loop over the whole chunks: unrolled, conf_ece compiled for 2.5 s at
    # C = 1,000 and 36 s at C = 21,841; the loop for 0.6-0.9 s at any C
    first = part(0, ROW_CHUNK)
    out = jax.lax.fori_loop(
      1, full, lambda k, acc: combine(acc, part(k * ROW_CHUNK, ROW_CHUNK)), first
    )
    return combine(out, part(full * ROW_CHUNK, num % ROW_CHUNK)) if num % ROW_CHUNK else out
  out = None
  for a in range(0, num, ROW_CHUNK):
    p = part(a, min(ROW_CHUNK, num - a))
    out = p if out is None else combine(out, p)
  return out


def _pairwise(values: list[jax.Array], op: Callable) -> jax.Array:
  """``op`` over ``values`` as a balanced tree (``log2`` depth, as a sum should be)."""
  while len(values) > 1:
    values = [
      op(*values[i : i + 2]) if i + 1 < len(values) else values[i] for i in range(0, len(values), 2)
    ]
  return values[0]


def _narrow_columns(x: jax.Array, name: str) -> list[jax.Array]:
  """The column slices ``x[..., r]`` of rows of at most :data:`NARROW_ROW` entries."""
  if x.shape[-1] > NARROW_ROW:
    raise ValueError(f"{name} takes rows of at most {NARROW_ROW} entries, got {x.shape[-1]}")
  return [x[..., r] for r in range(x.shape[-1])]


def narrow_row_sums(x: jax.Array, *fns: Callable) -> tuple[jax.Array, ...]:
  """``sum_r f(x_ir)`` over narrow rows (the last axis) for each ``f``, in one pass over ``x``.

  Pairwise trees over the column slices, which XLA:CPU computes in one loop
  over the rows, as :func:`row_sum_min` does: two sums of squares of
  ``n = 10^5`` rows of 10 took 0.20 against 0.78 ms as library reductions
  (2 CPU cores), of 32 0.47 against 0.65 ms. For rows of at most
  :data:`NARROW_ROW` entries.

  Args:
    x: ``(..., C)`` array, ``C <= NARROW_ROW``.
    *fns: elementwise functions of a column ``(...,)``.

  Returns:
    One ``(...,)`` array per function.

  Raises:
    ValueError: rows wider than :data:`NARROW_ROW`.

  Example:
    >>> import jax.numpy as jnp
    >>> s, q = narrow_row_sums(jnp.array([[1.0, 2.0], [3.0, 4.0]]), lambda c: c, jnp.square)
    >>> s.tolist(), q.tolist()
    ([3.0, 7.0], [5.0, 25.0])
  """
  cols = _narrow_columns(x, "narrow_row_sums")
  return tuple(_pairwise([f(c) for c in cols], jnp.add) for f in fns)


def row_sum_min(x: jax.Array, dtype: Any = None) -> tuple[jax.Array, jax.Array]:
  """Sums and minima of narrow rows (the last axis), in one pass over ``x``.

  ``s_i = sum_r x_ir`` (accumulated in ``dtype``) and ``lo_i = min_r x_ir``,
  NaN wherever the row holds a NaN: both as pairwise trees over the column
  slices, which XLA:CPU computes in one loop over the rows. That beats the
  two library reductions only up to :data:`NARROW_ROW` columns, so wider
  rows are refused (the caller reduces them as it needs: the simplex check
  takes the row sums and one global minimum). Measured on 2 CPU cores (jit,
  float32, the simplex check of ``n`` rows, 2026-11-24):

  ======  ===  ==============  =============
  n       C    two reductions  one tree pass
  ======  ===  ==============  =============
  10^5    10   371 us          140 us
  10^5    32   484 us          407 us
  10^5    48   547 us          606 us
  10^6    10   3.2 ms          1.2 ms
  ======  ===  ==============  =============

  Args:
    x: ``(..., C)`` array, ``C <= NARROW_ROW``.
    dtype: accumulation dtype of the sums (default ``x.dtype``); the minima
      keep ``x``'s dtype.

  Returns:
    ``(s, lo)``, each of shape ``x.shape[:-1]``.

  Raises:
    ValueError: rows wider than :data:`NARROW_ROW`.

  Example:
    >>> import jax.numpy as jnp
    >>> s, lo = row_sum_min(jnp.array([[0.25, 0.75], [1.5, -0.5]]))
    >>> s.tolist(), lo.tolist()
    ([1.0, 1.0], [0.25, -0.5])
  """
  acc = x.dtype if dtype is None else dtype
  cols = _narrow_columns(x, "row_sum_min")
  return _pairwise([c.astype(acc) for c in cols], jnp.add), _pairwise(cols, jnp.minimum)


def carry_like(tree: Any, ref: jax.Array) -> Any:
  """A loop's initial carry ``tree`` with every leaf typed as varying like ``ref``.

  A loop carry must keep its type: inside ``shard_map`` (``check_vma=True``)
  a constant initial carry is device-invariant while the loop body makes it
  vary with the data, and JAX raised its ``TypeError``. A zero of ``ref``'s
  kind (``zeros_like``: a broadcast constant, nothing read at run time) is
  added to each leaf (or-ed into a bool one); the values are unchanged.

  Example:
    >>> import jax.numpy as jnp
    >>> carry_like((jnp.ones(2), jnp.zeros((), jnp.int32)), jnp.arange(3.0))
    (Array([1., 1.], dtype=float32), Array(0, dtype=int32))
  """

  def one(a):
    zero = jnp.zeros_like(ref, shape=(), dtype=a.dtype)
    return a | zero if a.dtype == jnp.bool_ else a + zero

  return jax.tree.map(one, tree)


def two_sum(a: jax.Array, b: jax.Array) -> tuple[jax.Array, jax.Array]:
  """``s = fl(a + b)`` and its exact rounding error ``e``: ``a + b = s + e`` (Knuth's TwoSum).

  Example:
    >>> import jax.numpy as jnp
    >>> s, e = two_sum(jnp.float32(1.0), jnp.float32(2.0**-30))
    >>> float(s), float(e) == 2.0**-30
    (1.0, True)
  """
  s = a + b
  bb = s - a
  return s, (a - (s - bb)) + (b - bb)


#: Fewest and most samples per partial sum of :func:`segment_sum_accurate`.
SEGMENT_BLOCK = (512, 8192)

#: Most blocks one scatter of :func:`segment_sum_accurate` sums apart.
SEGMENT_GROUP = {"cpu": 64, "default": 1024}

#: Most entries (partial sums x segments x trailing size) one scatter writes,
#: on the CPU and on accelerators. On the CPU 32 KB of float32: a wider target
#: leaves the cache, and the scatter slows 3-5x. On a GPU each chunk is a few
#: kernel launches, so a chunk holds up to 8 MB of partial sums (not yet
#: timed on a GPU).
SEGMENT_ENTRIES = {"cpu": 1 << 13, "default": 1 << 21}


def segment_sum_accurate(
  values: jax.Array, segment_ids: jax.Array, num_segments: int, block: int | None = None
) -> jax.Array:
  """``jax.ops.segment_sum`` over the leading axis, accurate whatever the number of samples.

  ``out[k] = sum_{i : ids_i = k} values_i``. A float scatter-add adds the
  terms one at a time, and once a segment's total is many times its terms
  each rounding is a larger share of them and biased alike: at 10^6 float32
  samples LinCE was 4 % off (10^7 samples), a bin's mean confidence 0.3 %
  and the smoothed ECE 1.3e-5 (CIFAR-10 tiled). Here each ``block`` of
  samples has partial sums of its own (a few blocks per scatter, into
  segments offset per block, as many as keep its target within
  :data:`SEGMENT_ENTRIES` for the backend), and the blocks' sums are added with
  :func:`two_sum` into a ``(hi, lo)`` pair: the error is that of a sum of
  ``block`` terms, whatever ``n``. The block is at least twice the segments
  per sample (512 to 8192 samples), so that the additions cost at most about
  the scatter's. Up to ``block`` samples it is one ``segment_sum``.

  Args:
    values: ``(n, *rest)`` values, or ``(n, j, *rest)`` with ``segment_ids``
      ``(n, j)`` (``j`` entries per sample, e.g. the two grid points a
      sample is split between).
    segment_ids: ``(n,)`` or ``(n, j)`` int32 segments; ids outside
      ``[0, num_segments)`` are dropped.
    num_segments: number of segments (static).
    block: samples per partial sum (static; default: the power of two
      within :data:`SEGMENT_BLOCK` nearest above ``2 num_segments / j``).

  Returns:
    ``(num_segments, *rest)`` sums in ``values``' dtype.

  Example:
    >>> import jax.numpy as jnp
    >>> v = 0.5 * jnp.linspace(0.9, 1.0, 10**6, dtype=jnp.float32)  # sums to 474999.99
    >>> ids = jnp.zeros((10**6,), jnp.int32)
    >>> round(float(jax.ops.segment_sum(v, ids, 1)[0])), round(float(segment_sum_accurate(v, ids, 1)[0]))
    (475751, 475000)
  """
  n = values.shape[0]
  k = segment_ids.ndim  # leading axes of values that index samples
  rest = values.shape[k:]
  width = num_segments * max(1, math.prod(rest))
  if block is None:
    per_sample = max(1, math.prod(segment_ids.shape[1:]))
    low, high = SEGMENT_BLOCK
    block = min(high, max(low, 1 << max(0, -(-2 * num_segments // per_sample) - 1).bit_length()))
  if n <= block:
    return jax.ops.segment_sum(values.reshape((-1,) + rest), segment_ids.reshape(-1), num_segments)
  chunked = {
    platform: functools.partial(
      _chunked_segment_sum,
      num_segments=num_segments,
      block=block,
      group=max(1, min(n // block, SEGMENT_GROUP[platform], entries // width)),
    )
    for platform, entries in SEGMENT_ENTRIES.items()
  }
  return jax.lax.platform_dependent(values, segment_ids, **chunked)


def _chunked_segment_sum(values, segment_ids, *, num_segments: int, block: int, group: int):
  """:func:`segment_sum_accurate` in chunks of ``group`` blocks of ``block`` samples."""
  n = values.shape[0]
  k = segment_ids.ndim
  rest = values.shape[k:]
  chunk = group * block
  steps = -(-n // chunk)
  # block j of a chunk sums into segments j * num_segments + id (one scatter)
  offset = (jnp.arange(chunk, dtype=jnp.int32) // block * num_segments).reshape(
    (chunk,) + (1,) * (k - 1)
  )

  def chunk_sum(i):
    start = jnp.minimum(i * chunk, n - chunk)  # the last chunk overlaps: drop its old samples
    old = (start + jnp.arange(chunk, dtype=jnp.int32) < i * chunk).reshape(offset.shape)
    ids = jax.lax.dynamic_slice_in_dim(segment_ids, start, chunk, 0)
    ids = jnp.where(old | (ids < 0) | (ids >= num_segments), group * num_segments, ids + offset)
    v = jax.lax.dynamic_slice_in_dim(values, start, chunk, 0)
    part = jax.ops.segment_sum(v.reshape((-1,) + rest), ids.reshape(-1), group * num_segments)
    return jnp.sum(part.reshape((group, num_segments) + rest), axis=0)

  def body(i, acc):
    hi, e = two_sum(acc[0], chunk_sum(i))
    return hi, acc[1] + e

  zero = jnp.zeros((num_segments,) + rest, values.dtype)
  hi, lo = jax.lax.fori_loop(0, steps, body, (zero, zero))
  return hi + lo


#: Columns (classes) :func:`map_columns` handles at once.
COLUMN_BATCH = 8


def map_columns(fn: Callable, *xs: jax.Array, batch_size: int = COLUMN_BATCH) -> Any:
  """``fn`` of every column of the ``(n, C)`` arrays ``xs``, ``batch_size`` columns at a time.

  Results are stacked along a new leading axis of size ``C``. A ``vmap``
  within a batch and a loop across, with one compiled body
  (:func:`map_batches`): a ``vmap`` over all the classes of a class-wise fit
  holds every class's sort indices and temporaries at once (the isotonic
  fits of ``decompose`` 653 against 174 MB at ``n = 10^5``, ``C = 100``, and
  0.50 against 0.39 s on 2 CPU cores, compiled in 1.6 s; a GPU, where a
  wider ``vmap`` may be faster, is not measured).

  Args:
    fn: ``fn(*columns) -> pytree`` on ``(n,)`` columns.
    *xs: ``(n, C)`` arrays.
    batch_size: columns per ``vmap`` (static).

  Returns:
    ``fn``'s pytree with a leading ``(C,)`` axis.

  Example:
    >>> import jax.numpy as jnp
    >>> map_columns(lambda a, b: jnp.dot(a, b), jnp.ones((3, 2)), jnp.eye(3, 2)).tolist()
    [1.0, 1.0]
  """
  return map_rows(fn, *(x.T for x in xs), batch_size=batch_size)


def map_rows(fn: Callable, *xs: jax.Array, batch_size: int = COLUMN_BATCH) -> Any:
  """:func:`map_columns` for arrays whose leading axis indexes the classes (rows).

  Example:
    >>> import jax.numpy as jnp
    >>> map_rows(jnp.sum, jnp.ones((3, 2))).tolist()
    [2.0, 2.0, 2.0]
  """
  return map_batches(lambda r: fn(*r), tuple(xs), batch_size)


def map_batches(f: Callable, xs: Any, batch_size: int) -> Any:
  """``jax.lax.map(f, xs, batch_size=batch_size)`` with one compiled body.

  ``lax.map`` traces and compiles ``f`` a second time for the last
  ``len % batch_size`` elements. Here the ``L`` elements are split into
  ``k = ceil(L / batch_size)`` batches of equal size ``ceil(L / k)`` (at most
  ``batch_size``), and the leading axis is padded to ``k`` batches with
  copies of its first elements, whose results are dropped: one compilation,
  the same values, and fewer than ``k`` padded elements. Results of zero size
  (and no elements at all) are allowed.

  Args:
    f: function of one element of ``xs`` (a pytree slice along axis 0).
    xs: pytree of arrays with a common leading axis of length ``L``.
    batch_size: most elements evaluated together by ``jax.vmap`` (static).

  Returns:
    ``f`` stacked over the ``L`` elements, as ``jax.lax.map`` returns it.

  Example:
    >>> import jax.numpy as jnp
    >>> map_batches(lambda v: v * 2, jnp.arange(5.0), 2).tolist()
    [0.0, 2.0, 4.0, 6.0, 8.0]
  """
  size = jax.tree.leaves(xs)[0].shape[0]
  if size == 0:
    return jax.lax.map(f, xs)
  num_batches = -(-size // max(int(batch_size), 1))
  batch = -(-size // num_batches)
  pad = num_batches * batch - size
  if pad:
    fill = np.arange(pad) % size
    xs = jax.tree.map(lambda a: jnp.concatenate([a, a[fill]]), xs)
  # lax.map(f, xs, batch_size=batch) itself, but for the results' reshape, by
  # -1 there: a result of zero size (an empty statistic, a fit without
  # thresholds) left it undetermined (ZeroDivisionError)
  xs = jax.tree.map(lambda a: a.reshape((num_batches, batch) + a.shape[1:]), xs)
  out = jax.lax.map(jax.vmap(f), xs)
  out = jax.tree.map(lambda a: a.reshape((num_batches * batch,) + a.shape[2:]), out)
  return jax.tree.map(lambda a: a[:size], out) if pad else out


class RowBlocks(NamedTuple):
  """The rows of one ``(n, ...)`` array held as consecutive blocks.

  Concatenating the blocks would copy the whole array; a computation that
  works row by row runs on each block instead (:func:`by_rows`). A pytree (a
  jit argument like any tuple of arrays).

  The blocks may hold the rows rotated: with ``shift = k`` their
  concatenation is rows ``k, ..., n - 1, 0, ..., k - 1`` of the array
  (``jnp.roll(array, -k, axis=0)``). ``k`` is an argument of the programs,
  not part of their shapes, so blocks cut where a host buffer happens to be
  aligned share one program for every address (see
  ``validation._borrowed_rows``).

  Attributes:
    parts: the blocks in order, ``(n_i, ...)`` each with ``n_i >= 1`` and
      ``sum n_i = n``: JAX arrays, or host (numpy) arrays that each jitted
      program taking them transfers with its arguments.
    shift: ``None`` (the rows in order) or an int32 scalar ``k`` in
      ``[0, n)``, the array's row that the first block starts with.
  """

  parts: tuple[jax.Array | np.ndarray, ...]
  shift: jax.Array | np.ndarray | None = None

  @property
  def shape(self) -> tuple[int, ...]:
    """The shape of the whole array, ``(n, ...)``."""
    return (sum(b.shape[0] for b in self.parts), *self.parts[0].shape[1:])

  @property
  def dtype(self) -> Any:
    """The (common) dtype of the blocks."""
    return self.parts[0].dtype

  @property
  def ndim(self) -> int:
    """The number of dimensions of the whole array."""
    return self.parts[0].ndim


def by_rows(fn: Callable, x: Any, *row_args: Any, join: bool = True) -> Any:
  """``fn(x, *row_args)`` for a function that acts on each row separately.

  For an array it is the plain call. For :class:`RowBlocks` ``fn`` runs on
  each block with the matching rows of ``row_args`` (arrays with the same
  leading axis, or ``None``): ``join=True`` concatenates the results (a
  pytree of arrays with the rows along axis 0: cheap for per-row reductions),
  ``join=False`` keeps them as :class:`RowBlocks` (for an ``(n, C)`` result,
  which a concatenation would copy).

  Args:
    fn: ``fn(rows (k, ...), *args (k, ...)) -> pytree of (k, ...)`` arrays, the
      value of each row depending on that row only.
    x: ``(n, ...)`` array, or :class:`RowBlocks`.
    *row_args: ``(n, ...)`` arrays (or ``None``) cut like ``x``, or
      :class:`RowBlocks` cut (and rotated) like ``x`` already.
    join: concatenate the blocks' results (else return :class:`RowBlocks`).

  Returns:
    ``fn(x, *row_args)``.

  Example:
    >>> import jax.numpy as jnp
    >>> x = RowBlocks((jnp.array([[0.2, 0.8]]), jnp.array([[0.6, 0.4], [0.5, 0.5]])))
    >>> by_rows(lambda p, y: p[jnp.arange(p.shape[0]), y], x, jnp.array([1, 0, 1])).tolist()
    [0.800000011920929, 0.6000000238418579, 0.5]
  """
  if not isinstance(x, RowBlocks):
    return fn(x, *row_args)
  if x.shift is not None:  # the arguments' rows in the blocks' (rotated) order
    row_args = tuple(
      a if a is None or isinstance(a, RowBlocks) else jnp.roll(a, -x.shift, axis=0)
      for a in row_args
    )
  outs, start = [], 0
  for i, b in enumerate(x.parts):
    stop = start + b.shape[0]
    # an argument cut like x already (RowBlocks): its own blocks, not a slice
    cut = [
      a if a is None else a.parts[i] if isinstance(a, RowBlocks) else a[start:stop]
      for a in row_args
    ]
    outs.append(fn(b, *cut))
    start = stop
  out = RowBlocks(tuple(outs), x.shift)
  return join_rows(out) if join else out


def join_rows(x: Any) -> Any:
  """The whole of :class:`RowBlocks` whose blocks are pytrees of arrays (anything else as it is).

  Concatenates each leaf's blocks along axis 0 (and undoes a rotation,
  ``shift``): meant for per-row results (``(n,)``), not for the ``(n, C)``
  blocks themselves.

  Args:
    x: :class:`RowBlocks` of pytrees of ``(n_i, ...)`` arrays, or any pytree.

  Returns:
    The pytree of ``(n, ...)`` arrays.

  Example:
    >>> import jax.numpy as jnp
    >>> join_rows(RowBlocks((jnp.array([1, 2]), jnp.array([3])))).tolist()
    [1, 2, 3]
    >>> join_rows(RowBlocks((jnp.array([2, 3]), jnp.array([1])), shift=1)).tolist()
    [1, 2, 3]
  """
  if not isinstance(x, RowBlocks):
    return x
  if x.shift is None:
    return jax.tree.map(lambda *bs: jnp.concatenate(bs), *x.parts)
  return jax.tree.map(lambda *bs: jnp.roll(jnp.concatenate(bs), x.shift, axis=0), *x.parts)
