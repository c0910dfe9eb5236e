"""Numerical conventions shared by every module.

``PRECISION`` is the precision every matrix product in the metrics and
recalibrators requests. On GPUs (and TPUs) XLA's default for a float32
product is TF32 (bf16 passes on TPU), about 1e-3 relative error: enough to
move a kernel-based LCE by 1 % and to break agreement with float64
references. ``tests/test_precision.py`` checks the source for it.

:func:`row_reduce` is how a reduction over classes of a computed ``(n, C)``
quantity is written without an ``(n, C)`` temporary. :func:`map_batches` is
``jax.lax.map`` in batches with one compiled body (bootstrap resamples, rank
correlations, kernel predictions).
"""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["PRECISION", "ROW_CHUNK", "map_batches", "row_reduce"]

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


def map_batches(f: Callable, xs: Any, batch_size: int) -> Any:
  """``jax.lax.map(f, xs, batch_size=batch_size)`` with one compiled body.

  ``lax.map`` traces and compiles ``f`` a second time for the last
  ``len % batch_size`` elements. Here the ``L`` elements are split into
  ``k = ceil(L / batch_size)`` batches of equal size ``ceil(L / k)`` (at most
  ``batch_size``), and the leading axis is padded to ``k`` batches with
  copies of its first elements, whose results are dropped: one compilation,
  the same values, and fewer than ``k`` padded elements.

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
  num_batches = -(-size // max(int(batch_size), 1))
  batch = -(-size // num_batches)
  pad = num_batches * batch - size
  if pad:
    fill = np.arange(pad) % size
    xs = jax.tree.map(lambda a: jnp.concatenate([a, a[fill]]), xs)
  out = jax.lax.map(f, xs, batch_size=batch)
  return jax.tree.map(lambda a: a[:size], out) if pad else out
