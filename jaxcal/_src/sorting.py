"""Exact sorts of floating-point scores, fast on every backend.

One family of order-preserving integer keys serves every sort in jaxcal:
:func:`float_to_key` maps float16/32/64 to uint16/32/64 with the same order
(``-0.0`` and ``+0.0`` share a key), :func:`float_to_int_key` gives the int32
variant whose small magnitudes leave room to pack a bit beside the key.

XLA:CPU sorts a single integer operand with a native comparison
(``std::sort`` with ``std::less``), but float keys and multi-operand (payload)
sorts call a compiled comparator per comparison, several times slower. On CPU
the stable argsort of keys of up to 32 bits is therefore one native sort of
``uint64`` words that pack each key with its index (:func:`argsort_keys`),
and a sort that carries a 16/32-bit float payload packs the payload's bits
instead of the index (:func:`sort_with_payload`: no permutation, no gather);
64-bit keys (float64 scores) take two LSD radix passes of such sorts. GPUs
and TPUs sort key/payload pairs natively, so there the plain
``(key, index)`` pair sort is used. ``jax.lax.platform_dependent`` picks the
implementation when the computation is lowered, so one traced function
serves every backend; all give exactly ``argsort(x, stable=True)``.

XLA:CPU sorts the rows of one sort operation one after another on one
thread, but runs independent operations concurrently; large batches of rows
are therefore split into one group per core (:func:`cpu_groups`).

The sorts here carry a ``custom_vmap`` rule (:func:`rowwise_vmap`): a
``vmap`` becomes one call on the stacked rows, split into those groups, and
any data-dependent choice (the radix scheme's 2 or 3 passes for 32-bit keys,
kept for ``experiments/bench/sort_strategies.py``, which measures the
choices) is made once for all rows instead of becoming a select that runs
every branch.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
  "float_to_key",
  "key_to_float",
  "float_to_int_key",
  "int_key_to_float",
  "argsort_keys",
  "stable_argsort",
  "sort_descending",
  "sort_rows",
  "sort_with_payload",
  "rowwise_vmap",
  "cpu_groups",
  "in_groups",
]

_UINT = {2: jnp.uint16, 4: jnp.uint32, 8: jnp.uint64}
_FLOAT = {2: jnp.float16, 4: jnp.float32, 8: jnp.float64}


# ---------------------------------------------------------------------------
# Keys


def float_to_key(x: jax.Array) -> jax.Array:
  """Order-preserving map of floats to unsigned integers of the same width.

  .. math::
    \\mathrm{key}(x) = \\begin{cases} \\lnot\\,\\mathrm{bits}(x) & x < 0 \\\\
    \\mathrm{bits}(x) \\lor 2^{w-1} & x \\ge 0 \\end{cases}

  so ``x < y`` iff ``key(x) < key(y)`` for non-NaN ``x, y``, with ``-0.0``
  and ``+0.0`` mapped to the same key ``2^{w-1}``.

  Args:
    x: float16, float32 or float64 array of any shape (no NaN).

  Returns:
    uint16 / uint32 / uint64 keys, the shape of ``x``.

  Example:
    >>> import jax.numpy as jnp
    >>> k = float_to_key(jnp.array([-1.0, -0.0, 0.0, 0.5]))
    >>> bool(k[0] < k[1]), bool(k[1] == k[2]), bool(k[2] < k[3])
    (True, True, True)

  Reference: Herf (2001), "Radix Tricks" (the IEEE 754 sign flip for
  integer sorting of floats); IEEE 754-2019 §3.4 (binary interchange format).
  """
  ut = _UINT[x.dtype.itemsize]
  top = ut(1 << (8 * x.dtype.itemsize - 1))
  bits = jax.lax.bitcast_convert_type(x, ut)
  key = jnp.where((bits & top) != 0, ~bits, bits | top)
  # +-0.0 share one key; tested on the bits (XLA:CPU flushes subnormals to zero in
  # float compares: x == 0 held for 1e-40, which then tied with 0)
  return jnp.where((bits & ~top) == 0, top, key)


def key_to_float(key: jax.Array, dtype: Any = None) -> jax.Array:
  """Inverse of :func:`float_to_key` (``-0.0`` comes back as ``+0.0``).

  Args:
    key: uint16 / uint32 / uint64 keys.
    dtype: the keys' float type (default float16 / float32 / float64 by width;
      pass bfloat16 for bfloat16's keys, which float16 would misread).

  Returns:
    The floats of that type.

  Example:
    >>> import jax.numpy as jnp
    >>> key_to_float(float_to_key(jnp.array([-2.5, -0.0, 3.0]))).tolist()
    [-2.5, 0.0, 3.0]
  """
  ut = key.dtype.type
  top = ut(1 << (8 * key.dtype.itemsize - 1))
  bits = jnp.where((key & top) != 0, key & ~top, ~key)
  return jax.lax.bitcast_convert_type(bits, _FLOAT[key.dtype.itemsize] if dtype is None else dtype)


def float_to_int_key(x: jax.Array) -> jax.Array:
  """float32 -> int32 with the same order: :func:`float_to_key` re-centred at 0.

  ``-0.0`` and ``+0.0`` map to 0, and ``|x| < 2`` maps into ``|k| < 2^30``,
  which leaves room for a packed bit (``2k + b`` fits int32).

  Args:
    x: float32 array (no NaN).

  Returns:
    int32 keys, the shape of ``x``.

  Example:
    >>> import jax.numpy as jnp
    >>> k = float_to_int_key(jnp.array([-1.5, -0.0, 0.0, 1.5]))
    >>> int(k[1]), int(k[2]), bool(k[0] < k[1] < k[3]), bool(abs(k[3]) < 2**30)
    (0, 0, True, True)
  """
  return jax.lax.bitcast_convert_type(float_to_key(x) ^ jnp.uint32(0x80000000), jnp.int32)


def int_key_to_float(k: jax.Array) -> jax.Array:
  """Inverse of :func:`float_to_int_key`.

  Example:
    >>> import jax.numpy as jnp
    >>> int_key_to_float(float_to_int_key(jnp.array([-1.5, 0.25]))).tolist()
    [-1.5, 0.25]
  """
  return key_to_float(jax.lax.bitcast_convert_type(k, jnp.uint32) ^ jnp.uint32(0x80000000))


# ---------------------------------------------------------------------------
# Batching: vmap as one call on stacked rows; rows split over CPU cores


def rowwise_vmap(fn: Callable) -> Callable:
  """Makes ``jax.vmap(fn)`` one call of ``fn`` on the stacked rows.

  ``fn`` must work on arrays with any number of leading (row) axes and act
  on each row independently (e.g. a sort along the last axis). Its
  data-dependent choices (a ``lax.cond`` on a reduction over all rows, a
  ``while_loop``) then stay choices under ``vmap`` instead of becoming
  selects that run every branch for every row. Unbatched arguments are
  broadcast; an empty batch gives empty outputs without calling ``fn``.
  Callers pass integer or ``stop_gradient`` inputs: a ``custom_vmap``
  function has no reverse-mode derivative.

  Args:
    fn: function of positional arrays with common leading axes.

  Returns:
    ``fn`` with the batching rule attached.

  Example:
    >>> import jax, jax.numpy as jnp
    >>> f = rowwise_vmap(lambda a: jnp.sort(a, axis=-1))
    >>> jax.vmap(f)(jnp.array([[3, 1, 2], [0, 2, 1]])).tolist()
    [[1, 2, 3], [0, 1, 2]]
  """

  @jax.custom_batching.custom_vmap
  def rows(*args):
    return fn(*args)

  @rows.def_vmap
  def rule(axis_size, in_batched, *args):
    if not any(in_batched):
      # Only JAX's forward derivative of this rule asks for it (``jacfwd``,
      # ``vmap`` of ``jvp`` with the primals or the tangents unbatched): the
      # rows do not vary along the axis. Calling ``rows`` again here would
      # re-enter that derivative without end.
      out = fn(*args)
      return out, jax.tree.map(lambda _: False, out)
    if axis_size == 0:  # no rows to run ``fn`` on: empty outputs of one row's shapes
      one = [
        jax.ShapeDtypeStruct(a.shape[1:] if bt else a.shape, a.dtype)
        for a, bt in zip(args, in_batched)
      ]
      out = jax.tree.map(lambda o: jnp.zeros((0,) + o.shape, o.dtype), jax.eval_shape(rows, *one))
      return out, jax.tree.map(lambda _: True, out)
    full = [
      a if bt else jnp.broadcast_to(a, (axis_size,) + a.shape) for a, bt in zip(args, in_batched)
    ]
    out = rows(*full)
    return out, jax.tree.map(lambda _: True, out)

  return rows


#: The CPU backend gets one group of rows per core, at most this many.
MAX_CPU_GROUPS = 8
#: ... and only when the rows hold at least this many elements in all.
MIN_GROUP_ELEMENTS = 1 << 18


def cpu_groups(rows: int, n: int) -> int:
  """Number of row groups to sort as independent operations on this CPU.

  XLA:CPU sorts the rows of one sort operation sequentially on one thread
  but runs independent operations concurrently, so a batch of ``rows`` rows
  of length ``n`` is split into one group per available core (at most
  :data:`MAX_CPU_GROUPS`), when it is large enough to be worth it.

  Example:
    >>> cpu_groups(1, 10**6), cpu_groups(100, 10)
    (1, 1)
  """
  if rows < 2 or rows * n < MIN_GROUP_ELEMENTS:
    return 1
  try:
    cores = len(os.sched_getaffinity(0))
  except (AttributeError, OSError):
    cores = os.cpu_count() or 1
  return max(1, min(rows, cores, MAX_CPU_GROUPS))


def in_groups(fn: Callable, groups: int, *arrays: jax.Array):
  """``fn`` on ``groups`` near-equal slices of the leading axis, concatenated.

  Each slice is an independent computation (XLA:CPU may run them
  concurrently); ``fn`` must act on rows independently.
  """
  rows = arrays[0].shape[0]
  if groups <= 1:
    return fn(*arrays)
  bounds = [rows * g // groups for g in range(groups + 1)]
  outs = [fn(*(a[lo:hi] for a in arrays)) for lo, hi in zip(bounds[:-1], bounds[1:])]
  return jax.tree.map(lambda *o: jnp.concatenate(o, axis=0), *outs)


# ---------------------------------------------------------------------------
# Stable argsort of integer keys


def _radix_passes(key: jax.Array, k: int, d: int, passes: int) -> tuple[jax.Array, jax.Array]:
  """LSD radix passes over ``(rows, n)`` keys: ``(sorted keys, permutation)``."""
  ut = key.dtype.type
  idx = jax.lax.broadcasted_iota(key.dtype, key.shape, key.ndim - 1)
  lowmask = ut((1 << k) - 1)
  perm = None
  for p in range(passes):
    digit = (key >> ut(p * d)) & ut((1 << d) - 1)
    packed = jax.lax.sort((digit << ut(k)) | idx, dimension=key.ndim - 1, is_stable=False)
    pos = (packed & lowmask).astype(jnp.int32)
    perm = pos if perm is None else jnp.take_along_axis(perm, pos, axis=-1)
    key = jnp.take_along_axis(key, pos, axis=-1)
  return key, perm


def _radix_argsort(key: jax.Array, groups: int = 1) -> tuple[jax.Array, jax.Array]:
  """Stable argsort of ``(rows, n)`` unsigned keys by LSD radix passes of native sorts.

  The CPU path for 64-bit keys (two passes); :func:`_packed_argsort`, one
  sort, replaced it for 32-bit keys, where it stays as a measured
  alternative (``experiments/bench/sort_strategies.py``). Each pass sorts
  one unsigned integer that packs a ``d``-bit digit of the key (high bits)
  with the element's position after the previous pass (low
  ``k = ceil(log2 n)`` bits). Packed values are distinct and ties keep the
  previous order, so the result is the stable order: ``ceil(w / d)`` passes
  for ``w``-bit keys, or 2 when all keys less their minimum span fewer than
  ``2^(2d)`` values (scores in ``[0, 2)`` do, up to ``n = 2^17``): one
  ``lax.cond`` on a reduction over every row. The rows are sorted in
  ``groups`` independent groups (:func:`in_groups`) inside each branch: XLA:CPU
  ran groups that each held a ``lax.cond`` one after another, so the choice
  is made once, outside them (1.8x on 2 cores for 8 rows of 10^5 or 10^6).
  """
  n = key.shape[-1]
  w = 8 * key.dtype.itemsize
  k = max(1, int(n - 1).bit_length())
  d = w - k
  passes = -(-w // d)

  def run(key, passes):
    return in_groups(lambda kk: _radix_passes(kk, k, d, passes), groups, key)

  if passes <= 2:
    return run(key, passes)
  lo = jnp.min(key)
  span_ok = (jnp.max(key) - lo) < key.dtype.type(min(2 ** (2 * d), 2**w - 1))

  def two(key):
    skey, perm = run(key - lo, 2)
    return skey + lo, perm

  return jax.lax.cond(span_ok, two, lambda key: run(key, passes), key)


def _pair_argsort(key: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Stable argsort of unsigned keys: one sort of ``(key, index)`` pairs."""
  iota = jax.lax.broadcasted_iota(jnp.int32, key.shape, key.ndim - 1)
  return jax.lax.sort((key, iota), dimension=key.ndim - 1, num_keys=1, is_stable=True)


def _packed_argsort(key: jax.Array, groups: int = 1) -> tuple[jax.Array, jax.Array]:
  """Stable argsort of ``(rows, n)`` keys of at most 32 bits: one native ``uint64`` sort.

  Each word is ``key << 32 | index``. The words are distinct, so sorting
  them (unstably, natively) orders the keys with ties by index, the stable
  order; the sorted keys are their high halves and the permutation their
  low halves. On XLA:CPU one such sort costs about 1.35 native ``uint32``
  sorts of the keys alone and replaces the 2-3 radix passes of
  :func:`_radix_argsort` (1.5-3x faster from ``n = 10^4``; 57 against
  150-170 ms for one row of ``10^6``). The words exist only inside this
  function, traced under ``jax.enable_x64(True)`` (a scoped setting, not the
  global flag); inputs and outputs are 32-bit.
  """
  n = key.shape[-1]
  if key.dtype.itemsize > 4 or n > 2**31:
    raise ValueError(
      f"packed argsort takes keys of at most 32 bits and n <= 2**31, got {key.dtype}, n = {n}"
    )

  def one(k):
    return _sort_words(k, jax.lax.broadcasted_iota(jnp.int32, k.shape, k.ndim - 1))

  return in_groups(one, groups, key)


def _sort_words(high: jax.Array, low: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Rows of ``uint64`` words ``high << 32 | low`` sorted natively, split back into halves.

  ``high``: unsigned keys of at most 32 bits; ``low``: 32-bit values (an
  index, a payload's bits), taken as unsigned. The words exist only inside
  this function, traced under ``jax.enable_x64(True)`` (a scoped setting,
  not the global flag); the halves come back in the dtypes they came in.
  """
  with jax.enable_x64(True):
    words = jax.lax.sort(_words(high, low), dimension=high.ndim - 1, is_stable=False)
    return _halves(words, high.dtype, low.dtype)


def _words(high: jax.Array, low: jax.Array) -> jax.Array:
  """``high << 32 | bits(low)`` as ``uint64`` (call under ``jax.enable_x64(True)``)."""
  lo_u = jax.lax.bitcast_convert_type(low, _UINT[low.dtype.itemsize])
  return (high.astype(jnp.uint64) << jnp.uint64(32)) | lo_u.astype(jnp.uint64)


def _halves(words: jax.Array, high_dtype: Any, low_dtype: Any) -> tuple[jax.Array, jax.Array]:
  """Inverse of :func:`_words` (call under ``jax.enable_x64(True)``)."""
  high = (words >> jnp.uint64(32)).astype(high_dtype)
  low = (words & jnp.uint64(0xFFFFFFFF)).astype(_UINT[np.dtype(low_dtype).itemsize])
  return high, jax.lax.bitcast_convert_type(low, low_dtype)


def _argsort_rows(key: jax.Array, split: bool) -> tuple[jax.Array, jax.Array]:
  lead, n = key.shape[:-1], key.shape[-1]
  k2 = key.reshape((-1, n))
  groups = cpu_groups(k2.shape[0], n) if split else 1
  if k2.dtype.itemsize <= 4:
    cpu = lambda k: _packed_argsort(k, groups)
  else:  # 64-bit keys: two radix passes (32-bit digits beside up to 32 index bits)
    cpu = lambda k: _radix_argsort(k, groups)
  out = jax.lax.platform_dependent(k2, cpu=cpu, default=_pair_argsort)
  return jax.tree.map(lambda a: a.reshape(lead + (n,)), out)


_argsort_split = rowwise_vmap(lambda key: _argsort_rows(key, True))
_argsort_whole = rowwise_vmap(lambda key: _argsort_rows(key, False))


def argsort_keys(key: jax.Array, *, split: bool = True) -> tuple[jax.Array, jax.Array]:
  """Stable ascending sort of unsigned integer keys along the last axis, with the permutation.

  ``perm`` is ``argsort(key, stable=True)`` and ``sorted_key = key[perm]``,
  row by row: on CPU by one native sort of ``uint64`` words packing key and
  index (keys of up to 32 bits) or two LSD radix passes of such sorts
  (64-bit keys), elsewhere by one ``(key, index)`` pair sort. ``jax.vmap``
  of it is one call on the stacked rows.

  Args:
    key: ``(..., n)`` uint16 / uint32 / uint64 keys (e.g. :func:`float_to_key`).
    split: on CPU, sort large batches as one group of rows per core
      (:func:`cpu_groups`); callers that already split pass False.

  Returns:
    ``(sorted_key, perm)``: ``(..., n)`` keys ascending and the int32
    permutation of each row.

  Example:
    >>> import jax.numpy as jnp
    >>> s, p = argsort_keys(jnp.array([5, 2, 5, 1], jnp.uint32))
    >>> s.tolist(), p.tolist()
    ([1, 2, 5, 5], [3, 1, 0, 2])

  Reference: Knuth (1998), The Art of Computer Programming, Vol. 3, §5.2.5
  (least-significant-digit radix sorting).
  """
  if key.ndim == 0:
    raise ValueError("key must have at least one axis (the one to sort along)")
  if key.shape[-1] < 2:
    return key, jnp.zeros(key.shape, jnp.int32)
  fn = _argsort_split if split else _argsort_whole
  return fn(key)


def stable_argsort(x: jax.Array) -> jax.Array:
  """Stable ascending argsort along the last axis (ties by index), exact.

  Equal to ``jnp.argsort(x, axis=-1, stable=True)`` for float inputs with
  ``-0.0 == +0.0`` (no NaN: callers validate), on any backend, through
  :func:`argsort_keys` of :func:`float_to_key`. Other dtypes use
  ``jnp.argsort``.

  Args:
    x: ``(..., n)`` scores.

  Returns:
    ``(..., n)`` int32 permutation of each row.

  Example:
    >>> import jax.numpy as jnp
    >>> stable_argsort(jnp.array([0.5, -1.0, 0.5, -0.0, 0.0])).tolist()
    [1, 3, 4, 0, 2]
  """
  if x.ndim == 0 or x.dtype.itemsize not in _UINT or not jnp.issubdtype(x.dtype, jnp.floating):
    return jnp.argsort(x, axis=-1, stable=True).astype(jnp.int32)
  return argsort_keys(float_to_key(jax.lax.stop_gradient(x)))[1]


def sort_rows(x: jax.Array) -> jax.Array:
  """``jnp.sort`` of the rows of an ``(rows, n)`` array; on CPU one group of rows per core.

  The groups (:func:`cpu_groups`, :func:`in_groups`) are independent sorts,
  which XLA:CPU runs concurrently.

  Example:
    >>> import jax.numpy as jnp
    >>> sort_rows(jnp.array([[3, 1, 2], [0, 2, 1]], jnp.uint32)).tolist()
    [[1, 2, 3], [0, 1, 2]]
  """
  groups = cpu_groups(x.shape[0], x.shape[-1])
  return jax.lax.platform_dependent(
    x,
    cpu=lambda a: in_groups(lambda b: jnp.sort(b, axis=-1), groups, a),
    default=lambda a: jnp.sort(a, axis=-1),
  )


def sort_descending(x: jax.Array, axis: int = -1) -> jax.Array:
  """``-sort(-x)`` along ``axis`` through one native integer-key sort.

  Example:
    >>> import jax.numpy as jnp
    >>> sort_descending(jnp.array([[0.25, 0.5, 0.375]])).tolist()
    [[0.5, 0.375, 0.25]]
  """
  if x.dtype.itemsize not in _UINT or not jnp.issubdtype(x.dtype, jnp.floating):
    return -jnp.sort(-x, axis=axis)
  return _descending(x, axis % x.ndim)


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def _descending(x: jax.Array, axis: int) -> jax.Array:
  """:func:`sort_descending`'s integer-key sort; its tangents are permuted as the values.

  The integer keys carry no derivative: without this rule a rank utility's
  predicted utility ``Σ_r θ_r p_(r)`` (and the simplex projection's threshold)
  had a zero gradient in ``p`` (a review helper's finite-difference check).
  """
  return jnp.flip(key_to_float(jnp.sort(float_to_key(x), axis=axis), x.dtype), axis=axis)


@_descending.defjvp
def _descending_jvp(axis, primals, tangents):
  """One sort of the keys with their positions: the values and the tangents' order."""
  (x,), (t,) = primals, tangents
  xm = jnp.moveaxis(x, axis, -1)
  iota = jax.lax.broadcasted_iota(jnp.int32, xm.shape, xm.ndim - 1)
  key, perm = jax.lax.sort((float_to_key(xm), iota), dimension=xm.ndim - 1, num_keys=1)
  out = jnp.flip(key_to_float(key, x.dtype), axis=-1)
  (tm,) = _permuted_tangents(jnp.flip(perm, axis=-1), jnp.moveaxis(t, axis, -1))
  return jnp.moveaxis(out, -1, axis), jnp.moveaxis(tm, -1, axis)


def _permuted_tangents(perm: jax.Array, *tangents: jax.Array) -> tuple[jax.Array, ...]:
  """The tangents of a sort's outputs: its inputs' tangents in the sort's order (``perm``).

  The sorted ``x`` is a permutation of ``x``, so its derivative is the
  permuted tangent (zero would drop every term that uses the sorted values,
  as MMCE's kernel does). An integer payload's tangent (``float0``) stays as it is.
  """
  return tuple(
    t if t.dtype == jax.dtypes.float0 else jnp.take_along_axis(t, perm, axis=-1) for t in tangents
  )


@jax.custom_jvp
def _paired_sort(x: jax.Array, payload: jax.Array) -> tuple[jax.Array, jax.Array]:
  key, out = jax.lax.sort(
    (float_to_key(x), payload), dimension=x.ndim - 1, num_keys=1, is_stable=False
  )
  return key_to_float(key, x.dtype), out


@_paired_sort.defjvp
def _paired_sort_jvp(primals, tangents):
  """Both tangents in the order of one sort that also carries the positions."""
  x, payload = primals
  iota = jax.lax.broadcasted_iota(jnp.int32, x.shape, x.ndim - 1)
  key, out, perm = jax.lax.sort(
    (float_to_key(x), payload, iota), dimension=x.ndim - 1, num_keys=1, is_stable=False
  )
  return (key_to_float(key, x.dtype), out), _permuted_tangents(perm, *tangents)


def _gathered(x: jax.Array, payload: jax.Array) -> tuple[tuple[jax.Array, jax.Array], jax.Array]:
  """``((sorted x, payload in that order), the permutation)``: the packed argsort and a gather."""
  skey, perm = argsort_keys(float_to_key(x))
  return (key_to_float(skey, x.dtype), jnp.take_along_axis(payload, perm, axis=-1)), perm


@jax.custom_jvp
def _gathered_sort(x: jax.Array, payload: jax.Array) -> tuple[jax.Array, jax.Array]:
  return _gathered(x, payload)[0]


@_gathered_sort.defjvp
def _gathered_sort_jvp(primals, tangents):
  primal, perm = _gathered(*primals)
  return primal, _permuted_tangents(perm, *tangents)


def _packed_pairs_rows(key: jax.Array, payload: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Rows of ``(key, payload)`` sorted by the words ``key << 32 | payload bits``: one native sort."""
  lead, n = key.shape[:-1], key.shape[-1]
  k2, p2 = key.reshape((-1, n)), payload.reshape((-1, n))
  out = in_groups(_sort_words, cpu_groups(k2.shape[0], n), k2, p2)
  return jax.tree.map(lambda a: a.reshape(lead + (n,)), out)


_packed_pairs = rowwise_vmap(_packed_pairs_rows)


@jax.custom_jvp
def _packed_sort(x: jax.Array, payload: jax.Array) -> tuple[jax.Array, jax.Array]:
  """CPU :func:`sort_with_payload` of keys and payloads of at most 32 bits: no index, no gather.

  One native sort of ``uint64`` words ``key << 32 | payload bits``: ties of
  ``x`` come out ordered by the payload's bits (any order among ties is
  allowed), and the sorted payload is read back from the low halves, so the
  permutation is never formed and the payload never gathered (the UC core
  at ``n = 10^6``: 35.7-38.2 against 39.4-41.4 ms per utility, 2026-11-28,
  2 cores: the random gather of a 4 MB row misses the caches). Payload
  derivatives (:func:`_packed_sort_jvp`) follow the same order.
  """
  skey, spayload = _packed_pairs(float_to_key(x), payload)
  return key_to_float(skey, x.dtype), spayload


@_packed_sort.defjvp
def _packed_sort_jvp(primals, tangents):
  """Both tangents permuted as the primal (:func:`_permuted_tangents`).

  When differentiating, one stable sort of the same words with their
  positions gives both the primal (the sorted words, as :func:`_packed_sort`
  has them) and the permutation of the tangents, so tangents of tied keys
  follow the primal's order.
  """
  x, payload = primals
  key = float_to_key(jax.lax.stop_gradient(x))
  with jax.enable_x64(True):
    words = _words(key, jax.lax.stop_gradient(payload))
    iota = jax.lax.broadcasted_iota(jnp.int32, words.shape, words.ndim - 1)
    words, perm = jax.lax.sort((words, iota), dimension=words.ndim - 1, num_keys=1, is_stable=True)
    skey, spayload = _halves(words, key.dtype, payload.dtype)
  xs = key_to_float(skey, x.dtype)
  return (xs, spayload), _permuted_tangents(perm, *tangents)


def _cpu_payload_sort(x: jax.Array, payload: jax.Array) -> tuple[jax.Array, jax.Array]:
  """The CPU branch: packed words for 16/32-bit keys and float payloads, else argsort and gather."""
  small = x.dtype.itemsize <= 4 and payload.dtype.itemsize in (2, 4)
  if small and jnp.issubdtype(payload.dtype, jnp.floating):
    return _packed_sort(x, payload)
  return _gathered_sort(x, payload)


def sort_with_payload(x: jax.Array, payload: jax.Array) -> tuple[jax.Array, jax.Array]:
  """``x`` sorted ascending along the last axis, and ``payload`` in that order.

  For callers whose result does not depend on the order among tied ``x``
  (e.g. prefix sums read only between distinct values). CPU: one native
  sort of ``uint64`` words that pack the key with a 16/32-bit float
  payload's bits (:func:`_packed_sort`: no index array, no gather; other
  payloads: the packed argsort and a gather); elsewhere one unstable sort of
  the ``(key, payload)`` pair. ``-0.0`` comes back as ``+0.0``. Derivatives
  flow to both: each output's tangent is its input's, permuted alike (the
  sorted ``x`` had a zero derivative: MMCE's gradient dropped its kernel's).

  Args:
    x: ``(..., n)`` float scores.
    payload: ``(..., n)`` values carried along.

  Returns:
    ``(sorted x, payload in that order)``.

  Example:
    >>> import jax.numpy as jnp
    >>> xs, ps = sort_with_payload(jnp.array([0.3, 0.1, 0.2]), jnp.array([3.0, 1.0, 2.0]))
    >>> xs.tolist(), ps.tolist()
    ([0.10000000149011612, 0.20000000298023224, 0.30000001192092896], [1.0, 2.0, 3.0])
  """
  if x.shape[-1] < 2 or x.dtype.itemsize not in _UINT or not jnp.issubdtype(x.dtype, jnp.floating):
    order = jnp.argsort(x, axis=-1, stable=True)
    return (jnp.take_along_axis(x, order, axis=-1), jnp.take_along_axis(payload, order, axis=-1))
  return jax.lax.platform_dependent(x, payload, cpu=_cpu_payload_sort, default=_paired_sort)
