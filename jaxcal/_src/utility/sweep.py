"""Many utilities in one compiled call: chunked, and sharded over devices (Hegazy et al. 2025).

:func:`uc_sweep` evaluates ``UC(f, u_m; S)`` for a batch of ``M`` utilities of
one kind. What depends only on the data (the rows of ``p`` sorted for rank
utilities, the label ranks, the top-class confidences) is computed once; the
per-utility work is one matrix-vector product (a matrix product per chunk),
one gather, one sort and one prefix sum.

Memory: the utilities are processed in chunks of ``chunk_size`` (``vmap``
inside a ``fori_loop``), so the working set is ``O(chunk_size · n)`` for any
``M``. Devices: with several local devices the utility axis is split over a
one-axis ``Mesh`` (``M`` padded to a multiple of the device count) with
``jax.shard_map``; every device runs the chunked loop on its slice and the
``(M,)`` errors are all-gathered, so the result is replicated (and readable
on every host of a ``jax.distributed`` run).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from jax.typing import ArrayLike

from jaxcal._src.scores import prepare as _prepare_data
from jaxcal._src.utility import families as F
from jaxcal._src.utility.uc import UCResult, uc_from_scores

__all__ = ["uc_sweep", "sweep_results", "uc_class", "family", "FAMILIES", "default_chunk_size"]

#: Working-set budget of one chunk, in bytes (per device).
CHUNK_BYTES = 1 << 28

FAMILIES = ("tce", "cwe", "topk", "comb")


def default_chunk_size(
  kind: str, n: int, num_classes: int, params_shape: tuple[int, ...] = ()
) -> int:
  """Utilities per chunk so that one chunk needs about :data:`CHUNK_BYTES`.

  Per utility and sample the sweep holds ~12 four-byte words (predicted and
  realised utility, sort keys and positions, prefix sums); decision and
  similarity utilities also hold an ``(n, K)`` / ``(n, C)`` product.
  """
  words = 12
  if kind == "decision":
    words += params_shape[-1] if params_shape else num_classes
  elif kind == "similarity":
    words += num_classes
  return max(1, CHUNK_BYTES // (4 * words * max(n, 1)))


def _balanced_chunk(m: int, chunk: int) -> int:
  """The size of ``ceil(m / chunk)`` near-equal chunks covering ``m`` (``<= chunk``)."""
  num = max(1, math.ceil(m / max(chunk, 1)))
  return math.ceil(m / num)


def _pad_rows(x: jax.Array, total: int) -> jax.Array:
  """Pads the leading axis to ``total`` rows by repeating row 0 (a valid utility)."""
  m = x.shape[0]
  if total == m:
    return x
  return jnp.concatenate([x, jnp.broadcast_to(x[:1], (total - m,) + x.shape[1:])], axis=0)


def sweep_results(
  kind: str, p: jax.Array, y: jax.Array, params: jax.Array, chunk_size: int
) -> UCResult:
  """Full :class:`UCResult` for every utility in ``params`` (one device, no validation).

  ``params`` is ``(M, ...)``; the data-only work is done once, then the
  utilities run in ``ceil(M / chunk_size)`` equal chunks (a ``vmap`` each)
  inside a ``fori_loop``. The last chunk is shifted back to end at ``M``
  (it recomputes a few utilities of the previous one) instead of padding,
  so ``params`` is never copied. Traceable (jit/vmap).
  """
  prep = F.prepare(kind, p, y)
  batched = jax.vmap(lambda prm: uc_from_scores(*F.predicted_realized(kind, prep, prm)))
  m = params.shape[0]
  chunk = _balanced_chunk(m, min(chunk_size, m))
  num = math.ceil(m / chunk)
  if num == 1:
    return batched(params)
  shapes = jax.eval_shape(batched, params[:chunk])
  init = jax.tree.map(lambda s: jnp.zeros((m,) + s.shape[1:], s.dtype), shapes)

  def body(i, out):
    start = jnp.minimum(i * chunk, m - chunk)
    res = batched(jax.lax.dynamic_slice_in_dim(params, start, chunk))
    return jax.tree.map(lambda o, r: jax.lax.dynamic_update_slice_in_dim(o, r, start, 0), out, res)

  return jax.lax.fori_loop(0, num, body, init)


def _local_values(kind, p, y, params, chunk_size):
  return sweep_results(kind, p, y, params, chunk_size).value


_local_jit = jax.jit(_local_values, static_argnums=(0, 4))


def _sharded_values(
  kind: str, p: jax.Array, y: jax.Array, params: jax.Array, chunk_size: int, mesh: Mesh
) -> jax.Array:
  def body(p, y, prm):
    vals = _local_values(kind, p, y, prm, chunk_size)
    return jax.lax.all_gather(vals, "u", tiled=True)

  f = jax.shard_map(body, mesh=mesh, in_specs=(P(), P(), P("u")), out_specs=P(), check_vma=False)
  return f(p, y, params)


_sharded_jit = jax.jit(_sharded_values, static_argnums=(0, 4, 5))


def _global(x: jax.Array, sharding: NamedSharding) -> jax.Array:
  """A concrete array placed with ``sharding`` (works across hosts too)."""
  if isinstance(x, jax.core.Tracer):
    return x
  host = np.asarray(jax.device_get(x))
  return jax.make_array_from_callback(host.shape, sharding, lambda idx: host[idx])


def uc_sweep(
  probs: ArrayLike,
  labels: ArrayLike,
  utilities: F.Utility,
  chunk_size: int | None = None,
  *,
  from_logits: bool = False,
  devices: Sequence[jax.Device] | None = None,
) -> jax.Array:
  """Utility calibration errors of a batch of utilities, in one compiled call.

  ``E_m = UC(f, u_m; S)`` for ``m = 1..M`` (see :func:`~jaxcal.utility.uc`).

  Args:
    probs: ``(n, C)`` probabilities (logits with ``from_logits=True``).
    labels: ``(n,)`` integer labels.
    utilities: a batch of ``M`` utilities of one kind (``params`` with one
      leading axis), e.g. ``sample_linear(key, 1500, C)``.
    chunk_size: utilities evaluated together (memory ``O(chunk_size · n)``
      per device); default: about 256 MiB of working set per chunk.
    from_logits: apply a softmax to ``probs`` first.
    devices: devices to shard the utility axis over (default: all of
      ``jax.devices()``; a single device runs without a mesh).

  Returns:
    ``(M,)`` errors.

  Raises:
    ValueError: bad probabilities/labels, utility values outside ``[-1, 1]``,
      mismatched ``C``, a single utility instead of a batch, or
      ``chunk_size < 1``.

  Example:
    >>> import jax.numpy as jnp
    >>> from jaxcal.utility import uc_sweep, classwise
    >>> p = jnp.array([[0.9, 0.1], [0.8, 0.2], [0.6, 0.4], [0.3, 0.7]])
    >>> e = uc_sweep(p, jnp.array([0, 1, 1, 1]), classwise(jnp.arange(2), 2))
    >>> [round(x, 4) for x in e.tolist()]
    [0.425, 0.425]

  Reference: Hegazy, Jordan & Dieuleveut (2025), arXiv:2510.25458, §4 (eCDF over sampled
  utilities, M = 1500 in §5).
  """
  p, y = _prepare_data(probs, labels, from_logits)
  F.check_utility(utilities, p.shape[1], batched=True, name="utilities")
  m = utilities.batch_shape[0]
  if m == 0:
    raise ValueError("utilities is an empty batch (M = 0)")
  if chunk_size is None:
    chunk_size = default_chunk_size(
      utilities.kind, p.shape[0], p.shape[1], tuple(utilities.params.shape)
    )
  if (
    isinstance(chunk_size, bool) or not isinstance(chunk_size, (int, np.integer)) or chunk_size < 1
  ):
    raise ValueError(f"chunk_size must be a positive int, got {chunk_size!r}")
  devs = list(jax.devices() if devices is None else devices)
  d = len(devs)
  per_dev = math.ceil(m / d)
  chunk_size = _balanced_chunk(per_dev, min(int(chunk_size), per_dev))  # one compile per shape
  if d <= 1:
    return _local_jit(utilities.kind, p, y, utilities.params, chunk_size)
  params = _pad_rows(utilities.params, per_dev * d)
  mesh = Mesh(np.array(devs), ("u",))
  rep = NamedSharding(mesh, P())
  out = _sharded_jit(
    utilities.kind,
    _global(p, rep),
    _global(y, rep),
    _global(params, NamedSharding(mesh, P("u"))),
    chunk_size,
    mesh,
  )
  return out[:m]


def family(name: str, num_classes: int) -> tuple[F.Utility, ...]:
  """The finite utility families as batches: ``"tce"``, ``"cwe"``, ``"topk"``, ``"comb"``.

  ``tce`` is the single top-class utility (returned as a batch of one),
  ``cwe`` the ``C`` class-wise utilities ``e_c``, ``topk`` the ``C`` top-K
  utilities, ``comb = cwe ∪ topk`` (two batches).

  Example:
    >>> [u.params.shape for u in family("comb", 5)]
    [(5, 5), (5, 5)]
  """
  if name == "tce":
    return (F.Utility(F.top_class().params[None], "top_class"),)
  if name == "cwe":
    return (F.classwise(jnp.arange(num_classes), num_classes),)
  if name == "topk":
    return (F.top_k(jnp.arange(1, num_classes + 1), num_classes),)
  if name == "comb":
    return family("cwe", num_classes) + family("topk", num_classes)
  raise ValueError(f"family must be one of {FAMILIES}, got {name!r}")


def _uc_class_core(p, y, name, chunk_size):
  vals = [
    jnp.max(_local_values(u.kind, p, y, u.params, chunk_size)) for u in family(name, p.shape[1])
  ]
  return jnp.max(jnp.stack(vals))


_uc_class_jit = jax.jit(_uc_class_core, static_argnums=(2, 3))


def uc_class(
  probs: ArrayLike, labels: ArrayLike, family: str, *, from_logits: bool = False
) -> jax.Array:
  """Worst utility calibration error over a finite family (measured exactly).

  ``UC(f, U) = max_{u in U} UC(f, u; S)`` for ``U_TCE`` (``"tce"``, the
  top-class utility), ``U_CWE`` (``"cwe"``, the ``C`` utilities ``e_c``),
  ``U_topK`` (``"topk"``, ``K = 1..C``) or ``U_comb = U_CWE ∪ U_topK``
  (``"comb"``).

  Args:
    probs: ``(n, C)`` probabilities (logits with ``from_logits=True``).
    labels: ``(n,)`` integer labels.
    family: ``"tce"``, ``"cwe"``, ``"topk"`` or ``"comb"``.
    from_logits: apply a softmax to ``probs`` first.

  Returns:
    Scalar error.

  Raises:
    ValueError: bad inputs or an unknown family.

  Example:
    >>> import jax.numpy as jnp
    >>> from jaxcal.utility import uc_class
    >>> p = jnp.array([[0.9, 0.1], [0.8, 0.2], [0.6, 0.4], [0.3, 0.7]])
    >>> round(float(uc_class(p, jnp.array([0, 1, 1, 1]), "tce")), 4)
    0.275

  Reference: Hegazy, Jordan & Dieuleveut (2025), arXiv:2510.25458, Examples 3.4 and 3.6,
  §5 (U_comb).
  """
  if family not in FAMILIES:
    raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")
  p, y = _prepare_data(probs, labels, from_logits)
  chunk = default_chunk_size("linear", p.shape[0], p.shape[1])
  return _uc_class_jit(p, y, family, chunk)
