"""Exact stable sorts of float32 keys, fast on every backend.

XLA:CPU sorts a single unsigned-integer operand with a native comparison,
but float keys and multi-operand (payload) sorts call a compiled comparator
per comparison, 5-10x slower. On CPU the stable argsort is therefore built
from single-operand ``uint32`` sorts (an LSD radix scheme, below). GPUs and
TPUs sort key/payload pairs natively (radix sorts on GPU), so there the plain
``(uint32 key, index)`` sort is used. ``jax.lax.platform_dependent`` picks
the implementation when the computation is lowered, so one traced function
serves every backend; both give exactly ``argsort(x, stable=True)``.
``experiments/bench/sort_strategies.py`` measures the choices.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["stable_argsort", "sort_descending", "float_to_key", "key_to_float", "sort_with_payload"]


def float_to_key(x: jax.Array) -> jax.Array:
  """Order-preserving map float32 -> uint32 (``-0.0`` and ``+0.0`` share a key).

  Example:
    >>> import jax.numpy as jnp
    >>> k = float_to_key(jnp.array([-1.0, -0.0, 0.0, 0.5]))
    >>> bool(k[0] < k[1]), bool(k[1] == k[2]), bool(k[2] < k[3])
    (True, True, True)
  """
  bits = jax.lax.bitcast_convert_type(x, jnp.uint32)
  key = jnp.where((bits >> 31) == 1, ~bits, bits | jnp.uint32(0x80000000))
  return jnp.where(x == 0, jnp.uint32(0x80000000), key)


def key_to_float(key: jax.Array) -> jax.Array:
  """Inverse of :func:`float_to_key` (``-0.0`` comes back as ``+0.0``)."""
  bits = jnp.where((key >> 31) == 1, key & jnp.uint32(0x7FFFFFFF), ~key)
  return jax.lax.bitcast_convert_type(bits, jnp.float32)


def sort_descending(x: jax.Array, axis: int = -1) -> jax.Array:
  """``-sort(-x)`` along ``axis`` through one native ``uint32`` sort (float32).

  Example:
    >>> import jax.numpy as jnp
    >>> sort_descending(jnp.array([[0.2, 0.5, 0.3]])).tolist()
    [[0.5, 0.3, 0.2]]
  """
  if x.dtype != jnp.float32:
    return -jnp.sort(-x, axis=axis)
  return jnp.flip(key_to_float(jnp.sort(float_to_key(x), axis=axis)), axis=axis)


def _radix_passes(key: jax.Array, k: int, d: int, passes: int) -> jax.Array:
  n = key.shape[-1]
  idx = jnp.broadcast_to(jnp.arange(n, dtype=jnp.uint32), key.shape)
  lowmask = jnp.uint32((1 << k) - 1)
  perm = idx
  for shift in range(0, passes * d, d):
    digit = (key >> shift) & jnp.uint32((1 << d) - 1)
    pos = (jnp.sort((digit << k) | idx, axis=-1) & lowmask).astype(jnp.int32)
    perm = jnp.take_along_axis(perm, pos, axis=-1)
    key = jnp.take_along_axis(key, pos, axis=-1)
  return perm.astype(jnp.int32)


def _radix_argsort(key: jax.Array) -> jax.Array:
  """Stable argsort of ``uint32`` keys along the last axis from 1-operand sorts.

  Each pass sorts one ``uint32`` that packs a digit of the key (high bits)
  with the element's position after the previous pass (low
  ``k = ceil(log2 n)`` bits). Packed values are distinct and ties keep the
  previous order, so the result is the stable order: 2 passes of ``32 - k``
  bit digits for ``n <= 2^16``; up to ``2^21``, 3 passes, or 2 when the keys
  (less their minimum) span fewer than ``2^(2(32 - k))`` values, as scores in
  ``[0, 2)`` do (checked on the data: one ``lax.cond``).
  """
  n = key.shape[-1]
  k = max(1, int(n - 1).bit_length())
  d = 32 - k
  passes = -(-32 // d)
  if passes <= 2:
    return _radix_passes(key, k, d, passes)
  lo = jnp.min(key)
  span_ok = (jnp.max(key) - lo) < jnp.uint32(min(2 ** (2 * d), 2**32 - 1))
  return jax.lax.cond(
    span_ok, lambda: _radix_passes(key - lo, k, d, 2), lambda: _radix_passes(key, k, d, passes)
  )


def _pair_argsort(key: jax.Array) -> jax.Array:
  """Stable argsort of ``uint32`` keys: one sort of ``(key, index)`` pairs."""
  n = key.shape[-1]
  iota = jnp.broadcast_to(jnp.arange(n, dtype=jnp.int32), key.shape)
  _, order = jax.lax.sort((key, iota), dimension=key.ndim - 1, num_keys=1, is_stable=True)
  return order


def stable_argsort(x: jax.Array) -> jax.Array:
  """Stable ascending argsort along the last axis (ties by index), exact.

  Equal to ``jnp.argsort(x, axis=-1, stable=True)`` for float32 ``x`` with
  ``-0.0 == +0.0`` (no NaN: callers validate), on any backend: LSD radix
  passes of ``uint32`` sorts on CPU, one ``(key, index)`` pair sort
  elsewhere. Other dtypes, and ``n >= 2^27``, use ``jnp.argsort``.

  Args:
    x: ``(..., n)`` scores.

  Returns:
    ``(..., n)`` int32 permutation of each row.

  Example:
    >>> import jax.numpy as jnp
    >>> stable_argsort(jnp.array([0.5, -1.0, 0.5, -0.0, 0.0])).tolist()
    [1, 3, 4, 0, 2]
  """
  n = x.shape[-1]
  if x.dtype != jnp.float32 or x.ndim == 0 or n >= 2**27 or n < 2:
    return jnp.argsort(x, axis=-1, stable=True).astype(jnp.int32)
  key = float_to_key(x)
  return jax.lax.platform_dependent(key, cpu=_radix_argsort, default=_pair_argsort)


def _gathered_sort(x: jax.Array, payload: jax.Array) -> tuple[jax.Array, jax.Array]:
  key = float_to_key(x)
  order = _radix_argsort(key)
  return (
    key_to_float(jnp.take_along_axis(key, order, axis=-1)),
    jnp.take_along_axis(payload, order, axis=-1),
  )


def _paired_sort(x: jax.Array, payload: jax.Array) -> tuple[jax.Array, jax.Array]:
  key, out = jax.lax.sort(
    (float_to_key(x), payload), dimension=x.ndim - 1, num_keys=1, is_stable=False
  )
  return key_to_float(key), out


def sort_with_payload(x: jax.Array, payload: jax.Array) -> tuple[jax.Array, jax.Array]:
  """``x`` sorted ascending along the last axis, and ``payload`` in that order.

  For callers whose result does not depend on the order among tied ``x``
  (e.g. prefix sums read only between distinct values). CPU: the stable
  radix argsort and two gathers; elsewhere one unstable sort of the
  ``(uint32 key, payload)`` pair (no index array, no gathers). ``-0.0``
  comes back as ``+0.0``.

  Example:
    >>> import jax.numpy as jnp
    >>> xs, ps = sort_with_payload(jnp.array([0.3, 0.1, 0.2]), jnp.array([3.0, 1.0, 2.0]))
    >>> xs.tolist(), ps.tolist()
    ([0.10000000149011612, 0.20000000298023224, 0.30000001192092896], [1.0, 2.0, 3.0])
  """
  if x.dtype != jnp.float32 or x.shape[-1] < 2:
    order = jnp.argsort(x, axis=-1, stable=True)
    return (jnp.take_along_axis(x, order, axis=-1), jnp.take_along_axis(payload, order, axis=-1))

  return jax.lax.platform_dependent(x, payload, cpu=_gathered_sort, default=_paired_sort)
