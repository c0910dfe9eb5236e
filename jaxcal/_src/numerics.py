"""Numerical conventions shared by every module.

``PRECISION`` is the precision every matrix product in the metrics and
recalibrators requests. On GPUs (and TPUs) XLA's default for a float32
product is TF32 (bf16 passes on TPU), about 1e-3 relative error: enough to
move a kernel-based LCE by 1 % and to break agreement with float64
references. ``tests/test_precision.py`` checks the source for it.

:func:`row_reduce` is how a reduction over classes of a computed ``(n, C)``
quantity is written without an ``(n, C)`` temporary.
"""

from collections.abc import Callable

import jax
import jax.numpy as jnp

__all__ = ["PRECISION", "ROW_CHUNK", "row_reduce"]

#: Full float32 products on every backend (no TF32 on GPU, no bf16 passes on TPU).
PRECISION = jax.lax.Precision.HIGHEST

#: Reductions over the last axis of at most this many entries fuse with the
#: elementwise work that feeds them on XLA:CPU; a longer one is rewritten into
#: a tree of reduce-windows whose input is first written out whole (an
#: ``(n, C)`` temporary for a reduction over classes, and a pass over it).
ROW_CHUNK = 32


def row_reduce(fn: Callable, x: jax.Array, op: str = "sum") -> jax.Array:
  """``op`` over the last axis of ``fn(x[..., cols], cols)``, in chunks of columns.

  ``fn`` maps a slice of columns of ``x`` and their indices (``(k,)`` int32)
  to values of the slice's shape; the chunks of :data:`ROW_CHUNK` columns are
  reduced separately and combined, so no array of ``x``'s shape is written.

  Args:
    fn: elementwise function of ``(columns (..., k), indices (k,))``.
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
  out = None
  num = x.shape[-1]
  for a in range(0, num, ROW_CHUNK):
    cols = jnp.arange(a, min(a + ROW_CHUNK, num), dtype=jnp.int32)
    part = reduce(fn(x[..., a : a + ROW_CHUNK], cols), axis=-1)
    out = part if out is None else combine(out, part)
  return out
