"""Many utilities in one compiled call: chunked, sharded over devices and hosts.

Hegazy, Jordan & Dieuleveut (2025), *Scalable Utility-Aware Multiclass
Calibration*, §4: the eCDF of ``UC`` over thousands of sampled utilities.

:func:`uc_sweep` evaluates ``UC(f, u_m; S)`` for a batch of ``M`` utilities of
one kind. What depends only on the data (the rows of ``p`` sorted for rank
utilities, the label ranks, the top-class confidences) is computed once; the
per-utility work is one matrix-vector product (a matrix product per chunk),
one gather, one sort and one prefix sum.

Memory: the utilities are processed in chunks of ``chunk_size`` (``vmap``
inside a ``fori_loop``), so the working set is ``O(chunk_size · n)`` for any
``M``.

Placement. With several devices the utility axis is split over a one-axis
``Mesh`` (``M`` padded to a multiple of the device count) by
``jax.shard_map``; the data is replicated on the mesh (an all-gather inside
the compiled call when it arrives sharded) and the ``(M,)`` errors are
all-gathered, so the result is replicated and readable on every host.
Nothing is copied through the host: arrays already on a device move
device-to-device (``jax.device_put``), and a global ``jax.Array`` spanning
several processes is used as it is; a device array sharded over the mesh's
devices is gathered on them (:func:`placed`).

Hosts. In a ``jax.distributed`` run each process may pass *its own shard*
of one global data set as host-local arrays (numpy, or a ``jax.Array`` on
its local devices): the shards are assembled into one global array in
process order (``jax.make_array_from_process_local_data``; shards of
different sizes are padded and masked), and every process gets the UC of
the union. A global array spanning processes is the union already. Under
``jit`` an argument cannot be told host-local from global: pass global
arrays there (host-local ones that differ between processes give NaN, where
they gave a vector mixed from the processes' rows).

Transformations. Under a user's ``jax.jit`` the same sharded computation is
traced (closed-over utilities are constants of it). Under ``jax.vmap`` (over
models, say) a ``custom_vmap`` rule runs the plain, unsharded computation
vmapped, so a models-sharded input stays sharded over models: no device
receives another model's data.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from jax.typing import ArrayLike

from jaxcal._src import validation as V
from jaxcal._src.numerics import PRECISION
from jaxcal._src.utility import families as F
from jaxcal._src.utility.uc import UCResult, uc_from_scores

__all__ = [
  "uc_sweep",
  "sweep_results",
  "uc_class",
  "family",
  "FAMILIES",
  "default_chunk_size",
  "chunk_bytes",
  "masked_uc",
  "process_shards",
  "uc_class_core",
]

#: Working-set budget of one chunk on a CPU, in bytes (per device).
CHUNK_BYTES = 1 << 28
#: The most one chunk may hold on an accelerator, in bytes (per device); at
#: most an eighth of the device's memory.
ACCELERATOR_CHUNK_BYTES = 1 << 32

FAMILIES = ("tce", "cwe", "topk", "comb")


def chunk_bytes(device: jax.Device | None = None) -> int:
  """Working-set budget of one chunk of a sweep on ``device``, in bytes.

  On a CPU :data:`CHUNK_BYTES` (256 MiB: a chunk that stays near the caches
  and leaves the host's memory alone). On an accelerator an eighth of the
  memory the device reports (``memory_stats()["bytes_limit"]``), between
  :data:`CHUNK_BYTES` and :data:`ACCELERATOR_CHUNK_BYTES` (4 GiB): there
  every chunk is a round of kernel launches over the whole data set, and one
  chunk of 1,500 utilities at ``n = 15,000`` (1.1 GB) ran the sweep in
  3.48 ms on an H100 against 4.25 ms as five chunks of 300
  (``experiments/results/uc_stages_gpu.json``). A device that reports no
  memory gets :data:`CHUNK_BYTES`.

  Args:
    device: the device that runs the chunks (default: ``jax.devices()[0]``).

  Returns:
    The budget in bytes.

  Example:
    >>> import jax
    >>> chunk_bytes(jax.devices("cpu")[0]) == CHUNK_BYTES
    True
  """
  device = jax.devices()[0] if device is None else device
  if device.platform == "cpu":
    return CHUNK_BYTES
  try:
    limit = (device.memory_stats() or {}).get("bytes_limit")
  except Exception:  # a backend without memory statistics
    limit = None
  if not limit:
    return CHUNK_BYTES
  return int(max(CHUNK_BYTES, min(ACCELERATOR_CHUNK_BYTES, limit // 8)))


def default_chunk_size(
  kind: str,
  n: int,
  num_classes: int,
  params_shape: tuple[int, ...] = (),
  device: jax.Device | None = None,
) -> int:
  """Utilities per chunk so that one chunk needs about :func:`chunk_bytes` of ``device``.

  Per utility and sample the sweep holds ~12 four-byte words (predicted and
  realised utility, sort keys and positions, prefix sums); decision and
  similarity utilities also hold an ``(n, K)`` / ``(n, C)`` product.

  Args:
    kind: the utilities' kind (``"linear"``, ``"decision"``, ...).
    n: samples.
    num_classes: classes ``C``.
    params_shape: the batch's ``params`` shape (decision utilities: ``K``
      actions in its last axis).
    device: the device that runs the chunks (default: ``jax.devices()[0]``).

  Returns:
    Utilities per chunk, at least 1.

  Example:
    >>> import jax
    >>> default_chunk_size("linear", 15_000, 1_000, device=jax.devices("cpu")[0])
    372
  """
  words = 12
  if kind == "decision":
    words += params_shape[-1] if params_shape else num_classes
  elif kind == "similarity":
    words += num_classes
  return max(1, chunk_bytes(device) // (4 * words * max(n, 1)))


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


def masked_uc(v: jax.Array, u: jax.Array, where: jax.Array | None = None) -> UCResult:
  """UC of predicted ``v`` and realised ``u`` utilities over the samples with ``where``.

  A masked-out sample is treated as absent: it gets ``v = u =`` the largest
  finite float (a zero residual sorted after every real sample, in one tie
  group, so it adds no cut position) and ``n`` counts only the real samples.

  Args:
    v: ``(n,)`` predicted utilities.
    u: ``(n,)`` realised utilities.
    where: ``(n,)`` bool or ``None`` (all samples).

  Returns:
    :class:`~jaxcal.utility.UCResult` of the selected samples.

  Example:
    >>> import jax.numpy as jnp
    >>> v, u = jnp.array([0.9, 0.8, 0.6, 0.3, 0.5]), jnp.array([1.0, 0.0, 0.0, 0.0, 1.0])
    >>> a = masked_uc(v, u, jnp.array([True, True, True, True, False])).value
    >>> bool(jnp.allclose(a, masked_uc(v[:4], u[:4]).value))
    True

  Reference: Hegazy, Jordan & Dieuleveut (2025), Scalable Utility-Aware
  Multiclass Calibration, eq. (3.2) (UC over intervals of predicted utility).
  """
  if where is None:
    return uc_from_scores(v, u)
  dt = jnp.promote_types(v.dtype, jnp.float32)
  big = jnp.finfo(dt).max
  res = uc_from_scores(jnp.where(where, v.astype(dt), big), jnp.where(where, u.astype(dt), big))
  n_real = jnp.sum(where).astype(dt)
  return res._replace(value=res.value * (v.shape[0] / n_real))


def sweep_results(
  kind: str,
  p: jax.Array,
  y: jax.Array,
  params: jax.Array,
  chunk_size: int,
  where: jax.Array | None = None,
  precision: Any = PRECISION,
) -> UCResult:
  """Full :class:`UCResult` for every utility in ``params`` (one device, no validation).

  ``params`` is ``(M, ...)``; the data-only work is done once, then the
  utilities run in ``ceil(M / chunk_size)`` equal chunks (a ``vmap`` each)
  inside a ``fori_loop``. The last chunk is shifted back to end at ``M``
  (it recomputes a few utilities of the previous one) instead of padding,
  so ``params`` is never copied. ``where`` (``(n,)`` bool) selects samples;
  ``precision`` is the products' (static, see
  :func:`~jaxcal._src.utility.families.predicted_realized`). Traceable
  (jit/vmap).
  """
  prep = F.prepare(kind, p, y)

  def one(prm):
    return masked_uc(*F.predicted_realized(kind, prep, prm, precision), where)

  batched = jax.vmap(one)
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


def _local_values(kind, p, y, params, chunk_size, where=None, precision=PRECISION):
  return sweep_results(kind, p, y, params, chunk_size, where, precision).value


_local_jit = jax.jit(_local_values, static_argnums=(0, 4), static_argnames=("precision",))


@functools.cache
def _sweep_fn(kind: str, chunk_size: int, mesh: Mesh | None, m: int, masked: bool):
  """``f(p, y, params[, where]) -> (m,)``, sharded over ``mesh`` except under ``vmap``.

  ``params`` may hold more than ``m`` rows (they are cut to ``m``).
  """

  def local(p, y, prm, *w):
    return _local_values(kind, p, y, prm[:m], chunk_size, *w)

  if mesh is None:
    return local
  d = mesh.size
  axes = tuple(mesh.axis_names)  # ("u",), or every axis of a caller's jax.set_mesh

  several = jax.process_count() > 1

  def body(p, y, prm, *w):
    out = jax.lax.all_gather(_local_values(kind, p, y, prm, chunk_size, *w), axes, tiled=True)
    if several:  # host-local arrays of different processes under jit: NaN, not a mixed vector
      sums = jnp.stack([_checksum(a) for a in (p, y, *w)])
      same = jnp.all(jax.lax.pmin(sums, axes) == jax.lax.pmax(sums, axes))
      out = jnp.where(same, out, jnp.nan)
    return out

  specs = (P(), P(), P(axes)) + ((P(),) if masked else ())
  sharded = jax.shard_map(body, mesh=mesh, in_specs=specs, out_specs=P(), check_vma=False)

  # a caller's mesh with Explicit axes types every array's sharding: moved to the specs
  explicit = jax.sharding.AxisType.Explicit in tuple(mesh.axis_types)

  @jax.custom_batching.custom_vmap
  def f(p, y, prm, *w):
    args = (p, y, _pad_rows(prm[:m], math.ceil(m / d) * d), *w)
    if explicit:
      args = tuple(jax.reshard(a, s) for a, s in zip(args, specs))
    return sharded(*args)[:m]

  @f.def_vmap
  def _rule(axis_size, in_batched, p, y, prm, *w):
    axes = tuple(0 if b else None for b in in_batched)
    return jax.vmap(local, in_axes=axes)(p, y, prm, *w), True

  return f


def _checksum(a: jax.Array) -> jax.Array:
  """A wrapping ``uint32`` sum of ``a``'s bits, each 32-bit word times an odd multiplier of
  its position: replicated copies agree, other data (or the same rows in
  another order) almost never. 64-bit entries count as their two words (the
  low word alone missed float64 data with short mantissas).

  The sweep's data is replicated over the mesh. Under ``jit`` in a
  multi-process run, host-local arrays enter as if they were the same on
  every process; where they are not, each process's devices held its own rows
  and the utilities scored on them were gathered into one silently mixed
  vector. Comparing this sum over the mesh turns that into NaN.
  """
  bits = a.astype(jnp.int32) if a.dtype == jnp.bool_ else a
  if bits.dtype.itemsize == 8:  # (..., 2) words
    bits = jax.lax.bitcast_convert_type(bits, jnp.uint32)
  elif jnp.issubdtype(bits.dtype, jnp.floating):
    bits = jax.lax.bitcast_convert_type(bits, {2: jnp.uint16, 4: jnp.uint32}[bits.dtype.itemsize])
  words = bits.astype(jnp.uint32).reshape(-1)
  weight = jnp.arange(words.shape[0], dtype=jnp.uint32) * jnp.uint32(0x9E3779B1) | jnp.uint32(1)
  return jnp.sum(words * weight, dtype=jnp.uint32)


@functools.cache
def _sweep_jit(kind: str, chunk_size: int, mesh: Mesh | None, m: int, masked: bool):
  return jax.jit(_sweep_fn(kind, chunk_size, mesh, m, masked))


def process_shards(
  mesh: Mesh, axis: str | tuple[str, ...] | None, *arrays: ArrayLike, row_axis: int = 0
) -> tuple[tuple[jax.Array, ...], jax.Array]:
  """Assembles each process's host-local arrays into global arrays, in process order.

  Every process passes its own rows along ``row_axis`` (the other axes the
  same on all processes). The row counts are exchanged (one small
  collective), each process's rows are padded to the largest count (and to
  a multiple of its devices on ``axis``) with copies of its first row, and
  the global arrays are built with
  ``jax.make_array_from_process_local_data``, the rows sharded over
  ``axis``. Also returns the global mask of real rows, shaped like the
  arrays' axes up to ``row_axis``, and every process's row count. A process
  with no rows pads with zeros (masked: absent, never read as data).

  Args:
    mesh: a mesh over every process's devices.
    axis: mesh axis (or axes) to shard the rows over.
    *arrays: host-local arrays with the same number of rows.
    row_axis: the axis of the rows (samples).

  Returns:
    ``(global arrays, where, sizes)``: ``sizes`` the ``(num_processes,)``
    row counts, in process order (host ints).
  """
  from jax.experimental import multihost_utils

  n = int(np.shape(arrays[0])[row_axis])
  sizes = np.asarray(multihost_utils.process_allgather(np.int32(n))).reshape(-1)
  names = (axis,) if isinstance(axis, str) else tuple(axis or ())
  local_devs = sum(d.process_index == jax.process_index() for d in mesh.devices.flat)
  split = math.prod(mesh.shape[a] for a in names) * local_devs // mesh.devices.size
  rows = -(-int(sizes.max()) // max(split, 1)) * max(split, 1)
  spec = P(*([None] * row_axis + [axis]))
  sharding = NamedSharding(mesh, spec)
  out = []
  for a in arrays:
    a = V._device(a)  # a private copy: the caller may write to its buffer next
    if n:
      first = jax.lax.slice_in_dim(a, 0, 1, axis=row_axis)
    else:
      first = jnp.zeros(a.shape[:row_axis] + (1,) + a.shape[row_axis + 1 :], a.dtype)
    shape = list(a.shape)
    shape[row_axis] = rows - n
    pad = jnp.broadcast_to(first, tuple(shape))
    local = jnp.concatenate([a, pad], axis=row_axis)
    out.append(jax.make_array_from_process_local_data(sharding, local))
  lead = np.shape(arrays[0])[:row_axis]
  mask = np.broadcast_to(np.arange(rows) < n, tuple(lead) + (rows,))
  where = jax.make_array_from_process_local_data(sharding, np.ascontiguousarray(mask))
  return tuple(out), where, sizes


def placed(x: Any, sharding: NamedSharding) -> Any:
  """``x`` on ``sharding``'s devices, device-to-device; global arrays as they are.

  An array already sharded over those devices is resharded by an identity
  program with ``out_shardings`` (XLA gathers it on the devices):
  ``jax.device_put`` of a row-sharded array to a replicated sharding read the
  whole array back to the host and sent it to every device. Host arrays are
  sent with ``jax.device_put``.
  """
  if isinstance(x, jax.core.Tracer) or V.spans_processes(x):
    return x
  if isinstance(x, jax.Array) and len(x.sharding.device_set) > 1:
    if x.sharding.is_equivalent_to(sharding, x.ndim):
      return x
    if x.sharding.device_set == sharding.device_set:
      return V.resharder(sharding)(x)
  return jax.device_put(x, sharding)


def _check_devices(devices: Any) -> list[jax.Device]:
  """``devices`` as a non-empty list of ``jax.Device`` (``ValueError`` otherwise)."""
  if isinstance(devices, str | bytes | jax.Device):
    raise ValueError(f"devices must be a sequence of jax.Device, got {type(devices).__name__}")
  try:
    devs = list(devices)
  except TypeError:
    raise ValueError(
      f"devices must be a sequence of jax.Device, got {type(devices).__name__}"
    ) from None
  if not devs:
    raise ValueError("devices is empty: give at least one device, or devices=None for all")
  bad = [d for d in devs if not isinstance(d, jax.Device)]
  if bad:
    raise ValueError(f"devices must hold jax.Device objects, got {type(bad[0]).__name__}")
  if len(set(devs)) != len(devs):
    raise ValueError("devices holds the same device more than once")
  return devs


@V.outside_explicit_context
def uc_sweep(
  probs: ArrayLike,
  labels: ArrayLike,
  utilities: F.Utility,
  chunk_size: int | None = None,
  *,
  from_logits: bool = False,
  devices: Sequence[jax.Device] | None = None,
  where: ArrayLike | None = None,
) -> jax.Array:
  """Utility calibration errors of a batch of utilities, in one compiled call.

  ``E_m = UC(f, u_m; S)`` for ``m = 1..M`` (see :func:`~jaxcal.utility.uc`).

  Args:
    probs: ``(n, C)`` probabilities (logits with ``from_logits=True``). In a
      ``jax.distributed`` run: a global array, or this process's rows of
      the data set (host-local; the result is then the union's, in process
      order, on every process; under ``jit`` global arrays only: host-local
      ones that differ give NaN).
    labels: ``(n,)`` integer labels, laid out like ``probs``.
    utilities: a batch of ``M`` utilities of one kind (``params`` with one
      leading axis), e.g. ``sample_linear(key, 1500, C)``; the same on every
      process.
    chunk_size: utilities evaluated together (memory ``O(chunk_size · n)``
      per device); default: about :func:`chunk_bytes` of working set per
      chunk (256 MiB on a CPU, up to 4 GiB on an accelerator).
    from_logits: apply a softmax to ``probs`` first.
    devices: devices to shard the utility axis over (default: all of
      ``jax.devices()``, every process's; a single device runs without a
      mesh). Inside a caller's ``jax.set_mesh``: under ``jit``, and eagerly
      with Auto axes, every axis of that mesh (a mesh mixing Explicit and
      Auto axes: unsharded under ``jit``); eagerly with Explicit axes the
      call leaves the context (the default above). The output is
      replicated on the caller's mesh.
    where: optional ``(n,)`` bool mask, laid out like ``labels`` (host-local
      rows: this process's mask); masked-out samples are treated as absent
      (``n`` is the number of ``True`` entries, their values are not
      checked and cannot reach the result), so a padded last batch or
      uneven shards give the selected samples' errors.

  Returns:
    ``(M,)`` errors, replicated over the devices. ``chunk_size`` and
    ``devices`` change how XLA computes the predicted utilities ``p @ u``
    (one batch or a loop of chunks), so their last bit, and with it UC where
    two samples are nearly tied, can move by up to ``4/n`` (as between
    :func:`~jaxcal.utility.uc` and this function): on CIFAR-10 at ``n =
    10^4``, 1 against 4 devices moved 826 of 1,500 linear utilities by up
    to 1e-4 relative (1e-6 absolute) and rank ones by up to 2.6e-4; float64
    sided with either layout as often.

  Raises:
    ValueError: bad probabilities/labels, utility values outside ``[-1, 1]``,
      mismatched ``C``, a single utility instead of a batch,
      ``chunk_size < 1``, ``devices`` that are empty, repeat a device or
      hold something other than ``jax.Device`` objects, ``devices`` that
      leave out some of another process's devices in a multi-process run, or
      a ``where`` that is not an ``(n,)`` bool mask, selects no sample, or
      is given on some processes only.

  Example:
    >>> import jax.numpy as jnp
    >>> from jaxcal.utility import uc_sweep, classwise
    >>> p = jnp.array([[0.9, 0.1], [0.8, 0.2], [0.6, 0.4], [0.3, 0.7]])
    >>> e = uc_sweep(p, jnp.array([0, 1, 1, 1]), classwise(jnp.arange(2), 2))
    >>> [round(x, 4) for x in e.tolist()]
    [0.425, 0.425]

  Reference: Hegazy, Jordan & Dieuleveut (2025), Scalable Utility-Aware
  Multiclass Calibration, §4 (eCDF over sampled utilities, M = 1500 in §5)
  and eq. (3.2).
  """
  # In a multi-process run, this process's rows are checked once assembled
  # into the union (below): every process runs the one check and raises the
  # same error, naming the union's row; a check of the shard alone would
  # raise on its process only while the others wait in the assembly.
  shard = (
    jax.process_count() > 1
    and V.is_concrete(probs, labels, where)
    and not V.spans_processes((probs, labels, where))
  )
  name = "logits" if from_logits else "probs"
  ok = None  # the traced check's flag: the result is folded with it, not left to NaN inputs
  mask = None  # the checked sample mask, when ``where`` is given
  if shard:  # a shape, class-count or dtype error on one process raises on every process
    p, y = V.process_shard(probs, labels, name=name)
    mask = V.on_every_process(lambda: None if where is None else V.check_where(where, p.shape[0]))
    if mask is not None:  # masked-out rows made neutral and valid before the union's check,
      # which then numbers every row of the union (masked ones too) as it stands
      p = V._masked(V.upcast(p), mask, 0.0 if from_logits else 1.0 / p.shape[1])
      y = jnp.where(mask, y, 0)
  else:
    d = V.check_predictions(probs, labels, from_logits=from_logits, where=where, name=name)
    # masked-out rows: valid neutral values (their NaN cannot reach the sums)
    p, y = d.neutral() if d.where is not None else (d.probs(), d.labels)
    ok, mask = d.ok, d.where
  utilities = F.check_utility(utilities, p.shape[1], batched=True, name="utilities")
  m = utilities.batch_shape[0]
  if m == 0:
    raise ValueError("utilities is an empty batch (M = 0)")
  if chunk_size is not None and (
    isinstance(chunk_size, bool) or not isinstance(chunk_size, (int, np.integer)) or chunk_size < 1
  ):
    raise ValueError(f"chunk_size must be a positive int, got {chunk_size!r}")
  traced = isinstance(p, jax.core.Tracer) or isinstance(y, jax.core.Tracer)
  # inside a caller's jax.set_mesh, arrays and programs carry its mesh: a sweep sharded over
  # a mesh of its own ("u") was refused by JAX there, eagerly and under jit
  mesh = V.context_mesh() if devices is None else None
  if mesh is not None:  # the utilities go over every axis of the caller's mesh
    d = mesh.size
    devs = list(mesh.devices.flat) if isinstance(mesh, Mesh) else jax.devices()[:1]
    types = set(mesh.axis_types)
    if len(types) > 1:  # Explicit and Auto axes: reshard takes Explicit ones only; unsharded
      d, devs = 1, devs[:1]
    mesh = mesh if d > 1 else None
  else:
    devs = list(jax.devices() if devices is None else _check_devices(devices))
    d = len(devs)
    mesh = Mesh(np.array(devs), ("u",)) if d > 1 else None
  args: tuple = (p, y)
  if jax.process_count() > 1 and not traced:
    if {dev.process_index for dev in devs} != set(range(jax.process_count())):
      raise ValueError(
        "devices must include devices of every process in a multi-process run (got devices "
        f"of processes {sorted({dev.process_index for dev in devs})}); leave devices=None"
      )
    # every argument besides the data must agree, on global arrays too: utilities 8
    # against 12 aborted in a collective, other values mixed; the devices in another
    # order (the mesh) hung, and on global arrays other utilities ended in JAX's
    # AssertionError from device_put
    V.on_every_process(
      lambda: None,
      same=lambda _: {
        "utilities (kind, values)": f"{utilities.kind} " + V.digest(utilities.params),
        "chunk_size": chunk_size,
        "from_logits": bool(from_logits),
        "devices (in order)": V.digest([dev.id for dev in devs]),
        "whether where is given": where is not None,
      },
    )
    if shard:
      own = () if mask is None else (mask,)
      # this process's rows of the union (and of the caller's mask), padded
      (p, y, *own), real, sizes = process_shards(mesh, mesh.axis_names, p, y, *own)
      V.check_union_rows(sizes, name)
      chk = V.check_predictions(p, y, from_logits=from_logits, where=real, padding=True, name=name)
      p, y = chk.probs(), chk.labels
      mask = real & own[0] if own else real  # the caller's mask within the real rows
      if own and not bool(jnp.any(mask)):  # one replicated scalar, the same on every process
        raise ValueError("where selects no samples: at least one entry must be True")
  if mask is not None:
    args = (p, y, mask)
  if chunk_size is None:
    chunk_size = default_chunk_size(
      utilities.kind, p.shape[0], p.shape[1], tuple(utilities.params.shape), devs[0]
    )
  per_dev = math.ceil(m / d)
  chunk = _balanced_chunk(per_dev, min(int(chunk_size), per_dev))  # one compile per shape
  masked = len(args) == 3
  if traced:
    out = _sweep_fn(utilities.kind, chunk, mesh, m, masked)(*args[:2], utilities.params, *args[2:])
    return V.fold(out, ok)
  if mesh is not None:
    rep = NamedSharding(mesh, P())
    args = tuple(placed(a, rep) for a in args)
  params = utilities.params if mesh is None else placed(utilities.params, NamedSharding(mesh, P()))
  return _sweep_jit(utilities.kind, chunk, mesh, m, masked)(*args[:2], params, *args[2:])


def family(name: str, num_classes: int) -> tuple[F.Utility, ...]:
  """The finite utility families as batches: ``"tce"``, ``"cwe"``, ``"topk"``, ``"comb"``.

  ``tce`` is the single top-class utility (returned as a batch of one),
  ``cwe`` the ``C`` class-wise utilities ``e_c``, ``topk`` the ``C`` top-K
  utilities, ``comb = cwe ∪ topk`` (two batches).

  Args:
    name: ``"tce"``, ``"cwe"``, ``"topk"`` or ``"comb"``.
    num_classes: ``C >= 2``.

  Returns:
    A tuple of utility batches (one, or two for ``"comb"``).

  Raises:
    ValueError: an unknown ``name``, ``num_classes`` not an int ``>= 2``, or
      (except ``"tce"``) ``C x C`` parameters of more than ``2^31 - 1`` entries.

  Example:
    >>> [u.params.shape for u in family("comb", 5)]
    [(5, 5), (5, 5)]

  Reference: Hegazy, Jordan & Dieuleveut (2025), Scalable Utility-Aware
  Multiclass Calibration, Examples 3.4 and 3.6, §5.
  """
  _check_family(name)
  num_classes = V.check_int_option(num_classes, "num_classes", minimum=2)
  if name != "tce":  # C utilities of C entries, refused before the arange that numbers them
    V.check_entries(
      num_classes * num_classes,
      f"the {name} family's utilities (C, C) = ({num_classes:,}, {num_classes:,})",
      "pass fewer classes",
    )
  if name == "tce":
    return (F.Utility(F.top_class().params[None], "top_class"),)
  if name == "cwe":
    return (F.classwise(jnp.arange(num_classes), num_classes),)
  if name == "topk":
    return (F.top_k(jnp.arange(1, num_classes + 1), num_classes),)
  return family("cwe", num_classes) + family("topk", num_classes)  # "comb"


def _check_family(name: Any) -> None:
  """Raises unless ``name`` is one of :data:`FAMILIES`."""
  if name not in FAMILIES:
    raise ValueError(f"family must be one of {FAMILIES}, got {name!r}")


def uc_class_core(
  p: jax.Array, y: jax.Array, name: str, chunk_size: int, where: jax.Array | None = None
) -> jax.Array:
  """Unvalidated, traceable core of :func:`uc_class`; ``where`` selects samples."""
  vals = [
    jnp.max(_local_values(u.kind, p, y, u.params, chunk_size, where))
    for u in family(name, p.shape[1])
  ]
  return jnp.max(jnp.stack(vals))


_uc_class_jit = jax.jit(uc_class_core, static_argnums=(2, 3))


@V.same_arguments
def uc_class(
  probs: ArrayLike,
  labels: ArrayLike,
  family: str,
  *,
  from_logits: bool = False,
  where: ArrayLike | None = None,
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
    where: optional ``(n,)`` bool mask; masked-out samples are treated as
      absent (``n`` is the number of ``True`` entries).

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

  Reference: Hegazy, Jordan & Dieuleveut (2025), Scalable Utility-Aware
  Multiclass Calibration, Examples 3.4 and 3.6 (U_TCE, U_CWE, U_topK) and §5
  (U_comb).
  """
  _check_family(family)
  d = V.check_predictions(probs, labels, from_logits=from_logits, where=where)
  if where is None:
    p, y = d.probs(), d.labels
    chunk = default_chunk_size("linear", p.shape[0], p.shape[1])
    return V.fold(_uc_class_jit(p, y, family, chunk), d.ok)
  p, y = d.neutral()  # masked-out rows: valid neutral values, weight 0
  chunk = default_chunk_size("linear", p.shape[0], p.shape[1])
  return V.fold(_uc_class_jit(p, y, family, chunk, d.where), d.ok)
