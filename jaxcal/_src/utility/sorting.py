"""Exact stable argsort of float32 keys through fast single-operand integer sorts."""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["stable_argsort", "sort_descending"]


def _to_key(x: jax.Array) -> jax.Array:
  """Order-preserving map float32 -> uint32 (``-0.0`` and ``+0.0`` share a key)."""
  bits = jax.lax.bitcast_convert_type(x, jnp.uint32)
  key = jnp.where((bits >> 31) == 1, ~bits, bits | jnp.uint32(0x80000000))
  return jnp.where(x == 0, jnp.uint32(0x80000000), key)


def _from_key(key: jax.Array) -> jax.Array:
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
  return jnp.flip(_from_key(jnp.sort(_to_key(x), axis=axis)), axis=axis)


def stable_argsort(x: jax.Array) -> jax.Array:
  """Stable ascending argsort of a 1-d float32 array (ties by index), fast on CPU.

  XLA:CPU sorts a single unsigned-integer operand with a native comparison,
  but float keys and multi-operand sorts call a compiled comparator per
  comparison (5-10x slower). So the float bits are mapped to order-preserving
  ``uint32`` keys and sorted by an LSD radix scheme: each pass sorts one
  ``uint32`` that packs a digit of the key (high bits) with the element's
  position after the previous pass (low ``ceil(log2 n)`` bits). Packed values
  are distinct, and ties keep the previous order, so the result is exactly
  ``argsort(x, stable=True)``: 2 passes for ``n <= 2^14``, 3 up to ``2^20``.
  Other dtypes fall back to ``jnp.argsort(stable=True)``.

  Example:
    >>> import jax.numpy as jnp
    >>> stable_argsort(jnp.array([0.5, -1.0, 0.5, -0.0, 0.0])).tolist()
    [1, 3, 4, 0, 2]
  """
  n = x.shape[-1]
  if x.dtype != jnp.float32 or x.ndim != 1 or n >= 2 ** 27:
    return jnp.argsort(x, axis=-1, stable=True)
  key = _to_key(x)
  k = max(1, int(n - 1).bit_length())
  d = 32 - k
  idx = jnp.arange(n, dtype=jnp.uint32)
  lowmask = jnp.uint32((1 << k) - 1)
  perm = idx
  for shift in range(0, 32, d):
    digit = (key >> shift) & jnp.uint32((1 << d) - 1) if d < 32 else key
    pos = jnp.sort((digit << k) | idx) & lowmask
    perm = perm[pos]
    key = key[pos]
  return perm.astype(jnp.int32)
