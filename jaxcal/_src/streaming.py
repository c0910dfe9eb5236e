"""Streaming calibration metrics: ``empty``, ``update`` one batch, ``merge``, ``compute``.

A streaming metric is a small frozen dataclass of sufficient statistics, a
pytree in the style of CLU's ``clu.metrics``: ``update`` adds one batch (it
is traceable, so it runs inside a jitted eval step), ``merge`` combines two
states (associative), ``reduce`` merges a stack of states along a leading
axis (what ``jax.lax.all_gather`` or a multi-host gather returns) and
``compute`` gives the numbers. Static configuration (bin counts, classes,
capacity) lives in the dataclass's static fields, so a state crosses
``jax.jit`` boundaries as arrays only.

What streams, and how exactly:

* :class:`FixedBins` -- every binned error with **fixed** (equal-width)
  bins, top-label and class-wise, ℓ1 and squared (ConfECE, ConfCE,
  ConfCE_corr, CWE_bin, LinCE_cw, ECCE) and the reliability statistics, for
  a whole set of bin counts at once. The state is a histogram of residuals
  over the *threshold intervals* of the fixed rule: for every bin count
  ``m`` of the set and ``j < m``, ``clip(ceil(fl(s m)), 1, m) <= j`` holds
  exactly when ``s <= T(m, j)`` for one float threshold (see
  ``jaxcal._src.binning.fixed_thresholds``). The sorted thresholds of all
  ``(m, j)`` cut the line into ``K + 1`` intervals, each inside one bin for
  every ``m`` of the set, so per-interval sums and counts are sufficient for
  all of them and every sample lands in exactly the one-shot rule's bin.
  Memory: ``K + 1`` entries top-label and ``C (K + 1)`` class-wise, with
  ``K = m - 1`` for one bin count and ``K = 12,524`` for all of ``2..200``
  (``K + 1 = 12,525`` entries).
* :class:`Scores` -- proper scores (Brier, log, spherical, confidence
  loss), accuracy, label counts and optionally the confusion matrix.
* :class:`Records` -- the exact path for what needs a global order
  (quantile bins, so the truthful errors at their default binning; UC;
  isotonic decompositions): per-sample records in a buffer of static
  ``capacity``; the one-shot metric runs on them at ``compute``.
  ``kind="top_label"`` keeps the confidence ``c = max p`` and the
  correctness ``z = 1[y = argmax p]`` (one float and one bool per sample:
  every top-label error, quantile or fixed); ``kind="full"`` keeps the
  probability rows and the labels (``C`` floats and one int32 per sample:
  every metric).
* :class:`Calibration` -- the three together, what a training loop logs.

"Exactly" means: counts are int32 and bitwise equal to the one-shot
counts under any batching and any merge order (up to 2^31 - 1 samples per
state, :data:`MAX_COUNT`: an update or merge past it marks the state
overflowed, and ``compute`` raises, or gives NaN under ``jit``); sums are
compensated float pairs (``hi + lo``, Knuth's TwoSum), equal to the one-shot sums up to float
rounding of the sums themselves (the one-shot metric rounds too; both are
within a few ulps of a float64 computation). A float32 batch's fixed-bin
sums are the one-shot integer engine's (scores on a grid of ``2**-29``, any
batch size exact), added to the pairs as exact float32 terms. Records are kept in update
order and ``a.merge(b)`` puts ``b`` after ``a``: merged in data order they
are bitwise the one-shot samples in the one-shot order (the quantile rule
splits ties by position; without tied scores any order gives the same
bins), so the errors computed from them differ from the one-shot values
only by the rounding of the final sums. That holds for probabilities: an
update with ``from_logits=True`` records its batch's softmax, which XLA:CPU
rounds by up to a few ulp differently in batches of fewer than 4,096
entries, enough to move exact ties at 1.0 between quantile bins (see the
README's note on bitwise reproducibility).

Masked samples (``where=False``, e.g. the padding of a last partial batch)
are absent, as in every metric: they add nothing to any sum or count, are
not recorded and are not checked (padding may hold zeros or NaN, and a
batch of padding only adds nothing).

Bad input and empty states, as everywhere in jaxcal: an eager ``update``
validates the batch's selected samples and raises a ``ValueError``. Under
``jax.jit`` / ``jax.vmap`` the values cannot be checked, so every state
counts the batches that failed the traced check (NaN or inf, rows off the
simplex, labels out of range) in ``invalid``, an int32 leaf summed by
``merge`` and ``psum`` like the counts; once it is non-zero every number
``compute`` returns is NaN (integer outputs, the confusion counts and the
reliability counts, are -1), eagerly or traced, however many valid batches
follow: a count-based output (accuracy, label frequencies) would otherwise
silently skip the bad batch. A state that has seen no sample (never
updated, or every sample masked) has no defined metric: an eager
``compute`` raises a ``ValueError`` for every state (:class:`Records` as
:class:`FixedBins` and :class:`Scores`), a traced one returns NaN (no host
round trip inside ``jit``).

Devices and hosts: :class:`FixedBins` and :class:`Scores` are sums of their
leaves, so ``jax.lax.psum(state, axis)`` inside ``shard_map`` merges the
devices' states (the compensation terms are summed as they are: one extra
rounding per summand; a ``psum`` adds the counts without the overflow
check, so a total past 2^31 - 1 is caught only where it wraps to a negative
count; ``jax.lax.all_gather(state, axis).reduce()`` merges them with every
sum checked and the compensation kept). A :class:`Records` state is gathered with
``jax.lax.all_gather(state, axis)`` and then ``.reduce()``-d. Under
``shard_map``'s default ``check_vma=True`` a ``psum``-merged state is the
same on every device (``out_specs=P()``), while what an ``all_gather``
returns is typed as varying over the axis: return it (or its
``compute()``) with ``out_specs=P(axis)``, one copy per device, or pass
``check_vma=False``; a ``lax.scan`` whose carry starts from ``empty(...)``
needs ``jax.lax.pcast(state, axis, to="varying")`` first (JAX's rule for
carries, not jaxcal's). Across
``jax.distributed`` processes, :func:`merge_across_processes` gathers every
process's state and merges them in process order, so every host computes
the union's numbers.
"""

from __future__ import annotations

import dataclasses
import functools
import zlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcal._src import binning as B
from jaxcal._src import calibration_errors as CE
from jaxcal._src import scores as S
from jaxcal._src import validation as V
from jaxcal._src.calibration_errors import ReliabilityStats, _confidence_parts
from jaxcal._src.numerics import carry_like, lift, two_sum

__all__ = [
  "FixedBins",
  "Scores",
  "Records",
  "Calibration",
  "merge_across_processes",
  "interval_thresholds",
]


# --------------------------------------------------------------------------
# Compensated sums and small helpers
# --------------------------------------------------------------------------


def _add(hi: jax.Array, lo: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array]:
  s, e = two_sum(hi, x)
  return s, lo + e


def _add_terms(hi: jax.Array, lo: jax.Array, terms: list[jax.Array]) -> tuple[jax.Array, jax.Array]:
  """``(hi, lo)`` with each of ``terms`` added in turn (:func:`_add`)."""
  for t in terms:
    hi, lo = _add(hi, lo, t)
  return hi, lo


def _add_pairs(a: tuple, b: tuple) -> tuple[jax.Array, jax.Array]:
  s, e = two_sum(a[0], b[0])
  return s, a[1] + b[1] + e


def _interval_residual_sums(
  s, b, labels, where, thr
) -> tuple[list[jax.Array], jax.Array, jax.Array]:
  """``(R, K)`` sums of ``s - b`` per threshold interval, as exact terms; and the counts.

  Returns ``(terms, counts, bits)``: float arrays whose sum is the residual
  sum, the selected samples and their set bits per interval (int32).

  ``s``: ``(n, R)`` float32 scores in ``[0, 1]``; the bits ``b`` ``(n, R)``
  bool, or (``b=None``) ``labels`` ``(n,)`` with row ``r``'s bit ``[labels ==
  r]``; ``where``: ``(n,)`` bool; ``thr``: ``(K - 1,)`` thresholds (interval
  ``k`` holds ``thr[k-1] < s <= thr[k]``). The one-shot metrics' integer
  engine (:func:`~jaxcal._src.binning._edge_prefix`): a float32 scatter-add
  of a large batch drifts (a label-sorted batch of ``4·10^6`` rows gave a
  ConfECE 45 times the one-shot value), these sums do not; and they come as
  a few float32 arrays whose sum is exact (:func:`~jaxcal._src.binning._parts_to_terms`),
  for the state's TwoSum pairs (one rounded float32 per batch still drifted
  when batches of one label cancel each other: 3e-5 relative in batches of
  ``2**20``). float64 scores: one float64 scatter-add (as accurate as the
  state's TwoSum pairs).
  """
  k = thr.shape[0] + 1
  n, rows = s.shape
  wr = jnp.broadcast_to(where[:, None], s.shape)
  if s.dtype == jnp.float32:
    layout = B._layout(n, count=True)
    bucket = lambda ss: jnp.searchsorted(thr, ss, side="left").astype(jnp.int32)
    prefix, _ = B._edge_prefix(s, b, labels, wr, bucket, k, layout)
    per = prefix[:, 1:] - prefix[:, :-1]  # (R, K, columns), exact
    return B._parts_to_terms(per, layout), per[..., -1], per[..., 1 + len(layout.widths)]
  bits = b if b is not None else labels[:, None] == jnp.arange(rows)[None, :]
  bits = bits & wr
  seg = (jnp.searchsorted(thr, s, side="left") + k * jnp.arange(rows)[None, :]).ravel()
  tot = rows * k

  def per_interval(v):
    return jax.ops.segment_sum(v.ravel(), seg, tot).reshape(rows, k)

  sums = per_interval(jnp.where(wr, s - bits.astype(s.dtype), 0.0))
  return [sums], per_interval(wr.astype(jnp.int32)), per_interval(bits.astype(jnp.int32))


def _check_dtype(dtype: Any) -> str:
  """The name of a float32/float64 state dtype (float64 only with 64-bit JAX on)."""
  try:
    name = jnp.dtype(dtype).name
  except TypeError:  # e.g. dtype="foo": numpy's "data type 'foo' not understood"
    raise ValueError(f"dtype must be float32 or float64, got {dtype!r}") from None
  if name not in ("float32", "float64"):
    raise ValueError(f"dtype must be float32 or float64, got {name}")
  if name == "float64" and not jax.config.read("jax_enable_x64"):
    raise ValueError(
      "dtype float64 needs 64-bit JAX: enable it (with jax.enable_x64(True): ...) or use "
      "float32 (the sums are compensated either way)"
    )
  return name


def _prepare(probs, labels, where, from_logits, num_classes, log_loss=False):
  """Validated ``(p, y, where, bad, nll)`` of one batch for a state made for ``num_classes``.

  As the metrics do: eager bad input raises, and masked-out rows are absent
  (not checked; uniform probabilities and label 0, so no NaN of theirs
  reaches a sum; a batch of padding only adds nothing). ``bad``: int32 1
  when the traced check failed, else 0 (always 0 eagerly): counted in
  ``invalid``, it makes every number ``compute`` returns NaN. The batch
  itself is not folded to NaN (a product with it was a copy of the batch, a
  temporary of the input's size in every jitted update). ``nll``: with
  ``from_logits`` and ``log_loss`` (a state that sums the log loss), the
  per-sample log loss computed from the logits
  themselves (:func:`jaxcal._src.scores._log_loss_of_logits`; the log of the
  float32 softmax read 3.58e-7 for 3.84e-7 on a confident model), else None.
  """
  d = V.check_predictions(
    probs, labels, from_logits=from_logits, where=where, empty_where=True, allow_empty=True
  )
  p, y = d.neutral()  # not folded: ``invalid`` makes compute NaN (a fold copied the batch)
  if p.shape[1] != num_classes:
    raise ValueError(
      f"{'logits' if from_logits else 'probs'} has C = {p.shape[1]} classes but the state "
      f"was made for C = {num_classes}; "
      "make the state with the predictions' class count"
    )
  bad = np.int32(0) if d.ok is None else (~d.ok).astype(jnp.int32)
  w = jnp.ones((p.shape[0],), bool) if d.where is None else d.where
  nll = None
  # (masked-out rows, label 0 from neutral, are dropped by the sums' where)
  if from_logits and log_loss:
    nll = V.fold(S._log_loss_of_logits(d.scores.astype(p.dtype), y), d.ok)
  return p, y, w, bad, nll


def _parts(state: Any) -> tuple[Any, ...]:
  """The sum and record states a state is made of (a :class:`Calibration`'s parts)."""
  if isinstance(state, Calibration):
    return tuple(p for p in (state.bins, state.scores, state.records) if p is not None)
  return (state,)


def _same_kind(state: Any, probs: Any) -> Any:
  """``state``, ready for ``probs``; refuses mixing global and host-local batches in a multi-process run.

  A state updated with global arrays holds every process's rows, replicated;
  a host-local batch added to it lands on each process's copy only, and a
  state of host-local rows given a global batch is read as replicated: either
  way each process held other samples, and :func:`merge_across_processes`
  returned a different, wrong number on each (accuracy 0.9486 and 0.9464 for
  0.9475, no error). A host-local state that is the same on every process
  (merged by :func:`merge_across_processes`) takes global batches: its leaves
  are handed over as host values, which a program reads as the same on every
  process (a state's device arrays are committed to one device, which a global
  batch's program refused). A batch of no rows adds nothing. Eager calls only
  (traced leaves are not inspected; the merge checks the copies too).
  """
  if isinstance(probs, jax.core.Tracer) or any(
    isinstance(a, jax.core.Tracer) for a in jax.tree.leaves(state)
  ):
    return state
  state_global, batch_global = V.spans_processes(state), V.spans_processes(probs)
  if state_global and not batch_global and np.shape(probs)[:1] != (0,):
    raise ValueError(
      "this state holds global arrays (every process's rows, from global batches) and the "
      "batch is host-local: it would be added to each process's copy separately. Pass every "
      "batch as a global jax.Array (jax.make_array_from_process_local_data; pad an uneven "
      "last batch and pass where=)"
    )
  if batch_global and not state_global:
    seen = any(int(p.count) != 0 or int(p.invalid) != 0 for p in _parts(state))
    if seen:  # a collective: every process passes the global batch
      _check_copies_agree(
        state,
        "the host-local rows this state has seen before a global batch (merge the state "
        "with merge_across_processes first, so that every process holds the union)",
      )
    return jax.tree.map(lambda a: np.asarray(a) if isinstance(a, jax.Array) else a, state)
  return state


def _check_copies_agree(state: Any, what: str) -> None:
  """Raises on every process when ``state``'s copies differ between processes.

  One :func:`~jaxcal._src.validation.on_every_process` of the leaves'
  :func:`~jaxcal._src.validation.digest`: each replicated global leaf by its
  first local shard, each host-local leaf as it is (leaves split across
  processes, such as global records, are skipped).
  """

  def local(a: Any) -> Any:
    if isinstance(a, jax.Array) and not a.is_fully_addressable:
      # rows split across processes (records): each process holds its own
      return a.addressable_shards[0].data if a.sharding.is_fully_replicated else None
    return a

  views = [v for v in map(local, jax.tree.leaves(state)) if v is not None]
  V.on_every_process(lambda: [V.digest(v) for v in views], same=lambda d: {what: d})


def _num_classes(num_classes: Any) -> int:
  return V.check_int(num_classes, "num_classes", 2)


#: The most samples a :class:`FixedBins` or :class:`Scores` state counts (its int32 counts),
#: and the most slots of a :class:`Records` buffer: ``2**31 - 1``, the library's bound.
MAX_COUNT = V.MAX_ENTRIES


def _add_count(a: jax.Array, b: jax.Array) -> jax.Array:
  """``a + b`` for int32 sample counts, ``-1`` (and ``-1`` ever after) past :data:`MAX_COUNT`.

  The counts are int32 (exact, and the same under x64); a sum past ``2^31 -
  1`` wrapped to a negative count, and ``compute`` returned negative errors
  and scores (two merges of 2^30 samples: Brier -0.18 for 0.18). A state
  whose count is negative has overflowed: ``compute`` raises eagerly and
  gives NaN under ``jit``.
  """
  total = a + b
  return jnp.where((a < 0) | (b < 0) | (total < a), jnp.int32(-1), total)


def _check_capacity(capacity: int, what: str = "") -> int:
  """Refuses a :class:`Records` buffer of more than :data:`MAX_COUNT` slots (int32 positions).

  The positions and counts are int32: a larger buffer wrapped them, and the
  records landed in the wrong slots with no error.
  """
  V.check_entries(
    capacity,
    f"a {what + ' ' if what else ''}Records buffer of capacity {capacity:,}",
    "int32 positions address no more; keep several states and compute each, or use the "
    "streaming sums (FixedBins, Scores), whose size does not grow with the samples",
  )
  return capacity


def _single(count: jax.Array, what: str) -> None:
  """Raises for a concrete batch of states (built under ``jax.vmap``) used outside ``vmap``.

  Their leaves carry the batch axis in front, and reading the count as one
  number raised Python's "only 0-dimensional arrays can be converted".
  """
  if jnp.ndim(count) > 0:
    raise ValueError(
      f"{what} holds a batch of {jnp.shape(count)[0]} states (it was built under jax.vmap): "
      "use it under jax.vmap too, e.g. jax.vmap(lambda s: s.compute())(state), or take one "
      "state with jax.tree.map(lambda a: a[i], state)"
    )


def _checked_state(count: jax.Array, invalid: jax.Array, what: str) -> None:
  """Eager ``compute`` of a concrete state: raises when it has seen no sample, or too many.

  One read of two scalars. A poisoned state (``invalid > 0``) does not
  raise for being empty: its results are NaN, whatever the count. A traced
  state (inside ``jit``) is not read: its results are NaN when empty,
  overflowed or poisoned.
  """
  if not V.is_concrete(count, invalid):  # checked mode raises as an eager compute does
    V.trace_check(count >= 0, f"{what} has seen more than 2^31 - 1 = {MAX_COUNT:,} samples")
    V.trace_check(
      (invalid > 0) | (count != 0),
      f"{what} is empty: it has seen no sample (never updated, or every sample was masked "
      "by where); update it with at least one batch before compute()",
    )
    return
  _single(count, what)
  count, invalid = jax.device_get((count, invalid))
  if int(count) < 0:
    raise ValueError(
      f"{what} has seen more than 2^31 - 1 = {MAX_COUNT:,} samples, more than its int32 "
      "counts hold: keep one state per part of the stream below that and combine the parts' "
      "metrics, weighted by their sample counts"
    )
  if int(invalid) == 0 and int(count) == 0:
    raise ValueError(
      f"{what} is empty: it has seen no sample (never updated, or every sample was masked "
      "by where); update it with at least one batch before compute()"
    )


def _bin_counts(num_bins: Any, name: str = "num_bins") -> tuple[tuple[int, ...], tuple[int, ...]]:
  """Static ``(flat tuple of bin counts, shape)`` from an int or a concrete int array."""
  if isinstance(num_bins, jax.core.Tracer):
    raise ValueError(
      f"{name} of a streaming state must be concrete (a Python int or an array of ints "
      "known when the state is created), not a traced value"
    )
  m = V.check_num_bins(num_bins, name)
  if isinstance(m, int):
    return (m,), ()
  a = np.asarray(num_bins)  # concrete (checked above); not the traced copy made under jit
  if a.size == 0:
    raise ValueError(f"{name} is an empty array; give at least one bin count")
  return tuple(int(v) for v in a.ravel()), tuple(a.shape)


def interval_thresholds(bin_counts: Any, dtype_name: str = "float32") -> np.ndarray:
  """Sorted thresholds ``T(m, j)``, ``j < m``, of the fixed rule for a set of bin counts.

  ``clip(ceil(fl(s m)), 1, m) <= j`` exactly when ``s <= T(m, j)``, so the
  ``K`` thresholds cut the line into ``K + 1`` intervals
  ``(T_{k-1}, T_k]`` on each of which every fixed bin of every ``m`` in
  ``bin_counts`` is constant. ``#{k: T_k < s}`` is the interval of ``s``.

  Args:
    bin_counts: the bin counts, ints ``>= 1`` (a tuple, list, int array or
      one int; any order, repeats allowed).
    dtype_name: the scores' float dtype, ``"float32"`` or ``"float64"``.

  Returns:
    ``(K,)`` sorted unique thresholds in that dtype, a read-only array
    (shared: copy it to change it).

  Raises:
    ValueError: no bin count, a bin count that is not an int ``>= 1``, or
      another dtype (e.g. ``"int8"``).

  Example:
    >>> interval_thresholds((2, 4)).tolist()
    [0.25, 0.5, 0.75]

  Reference: Lu, Wu, Hartline & Hu (2025), Truthful Calibration Errors for
  Multi-Class Prediction, §3 (fixed, outcome-independent binning).
  """
  counts, _ = _bin_counts(bin_counts, "bin_counts")
  if not isinstance(dtype_name, str) or dtype_name not in ("float32", "float64"):
    raise ValueError(f"dtype_name must be 'float32' or 'float64', got {dtype_name!r}")
  return _interval_thresholds(counts, dtype_name)


@functools.lru_cache(maxsize=32)
def _interval_thresholds(bin_counts: tuple[int, ...], dtype_name: str) -> np.ndarray:
  """:func:`interval_thresholds` of validated arguments (cached: read-only, as every caller
  and every state with these counts shares it; ``t *= 100`` rebinned them all)."""
  t = np.unique(np.concatenate([_count_thresholds(m, dtype_name) for m in sorted(set(bin_counts))]))
  t.setflags(write=False)
  return t


def _count_thresholds(m: int, dtype_name: str) -> np.ndarray:
  """``T(m, j)`` for ``j = 1 .. m - 1``: the inner edges of ``m`` fixed bins, ``O(m)``."""
  j = np.arange(1, m, dtype=np.int64)
  return B.fixed_thresholds(np.full(j.shape, m, np.int64), j, dtype_name)


def _interval_bins(thr: jax.Array, m: jax.Array) -> jax.Array:
  """0-based bin under ``m`` bins of each of the ``K + 1`` intervals."""
  mm = m.astype(thr.dtype)
  inner = jnp.clip(jnp.ceil(thr * mm).astype(jnp.int32), 1, m)
  return jnp.concatenate([inner, m[None]]) - 1


@functools.lru_cache(maxsize=32)
def _interval_ends(bin_counts: tuple[int, ...], dtype_name: str) -> np.ndarray:
  """``(len(bin_counts), max_bins + 1)`` int32: intervals in bins ``<= j`` for each count.

  Bins are unions of consecutive intervals (the thresholds are sorted), so
  row ``i`` holds ``e_0 = 0 <= e_1 <= ... `` with bin ``j`` the intervals
  ``[e_{j-1}, e_j)``; ``e_j = K + 1`` for ``j >= m``.
  """
  mb = max(bin_counts)
  sub = _interval_thresholds(bin_counts, dtype_name)
  ends = np.full((len(bin_counts), mb + 1), sub.shape[0] + 1, np.int32)
  ends[:, 0] = 0
  for i, m in enumerate(bin_counts):
    ends[i, 1:m] = np.searchsorted(sub, _count_thresholds(m, dtype_name)) + 1
  return ends


def _per_bin(values: jax.Array, ends: np.ndarray) -> jax.Array:
  """``(num_counts, ..., max_bins)`` per-bin sums of per-interval ``values`` ``(..., K + 1)``.

  Differences of prefix sums over the intervals (integer counts: exact;
  floats: blocked float32-accurate prefix sums, as the one-shot fixed-bin
  errors compute them).
  """
  zero = jnp.zeros(values.shape[:-1] + (1,), values.dtype)
  prefix = jnp.concatenate([zero, B.blocked_cumsum(values, axis=-1)], axis=-1)
  at = jnp.moveaxis(prefix[..., jnp.asarray(ends)], -2, 0)  # (num_counts, ..., max_bins + 1)
  return at[..., 1:] - at[..., :-1]


class _Streaming:
  """What every streaming state shares: ``update`` (validate, then ingest) and ``reduce``."""

  #: whether ``_ingest`` sums the log loss (given logits, it is computed from them)
  _sums_log_loss: bool = False

  @V.outside_explicit_context
  def update(
    self,
    probs: ArrayLike,
    labels: ArrayLike,
    where: ArrayLike | None = None,
    *,
    from_logits: bool = False,
  ) -> Any:
    """Adds one batch (traceable: call it inside ``jax.jit``).

    Args:
      probs: ``(B, C)`` probabilities (logits with ``from_logits=True``).
      labels: ``(B,)`` integer labels.
      where: optional ``(B,)`` bool; ``False`` rows are ignored (as if absent).
      from_logits: apply a softmax first.

    Returns:
      The updated state (validated once, however many parts it has); a
      batch of no rows (``B = 0``, shapes checked) returns the state as it is.

    Raises:
      ValueError: a wrong shape, class count or ``where`` mask; on eager
        calls also bad values (NaN or inf, rows off the simplex, labels out
        of range) in the selected rows. Traced bad values raise nothing:
        the batch is counted in ``invalid`` and ``compute`` gives NaN. In a
        multi-process run, an eager host-local batch for a state holding
        global arrays, or a global batch for a state that has seen
        host-local rows not merged by :func:`merge_across_processes`.
    """
    state = _same_kind(self, probs) if jax.process_count() > 1 else self
    batch = _prepare(probs, labels, where, from_logits, self.num_classes, self._sums_log_loss)
    if batch[0].shape[0] == 0:  # no rows add nothing (a process's empty shard, a last batch)
      return self
    return state._ingest(*batch)

  @V.outside_explicit_context
  def reduce(self) -> Any:
    """Merges states stacked along a leading axis (e.g. after ``all_gather``) into one, in order.

    Bitwise what merging them one by one gives, in one compiled program
    whatever the number of states (a scan of the sums' ``merge``, one
    gather of the records).

    Returns:
      The merged state (:class:`Records`: capacity times the number of states).

    Raises:
      ValueError: the state is not stacked, or the stack holds no state.
    """
    return _reduce_stack(self)


# --------------------------------------------------------------------------
# FixedBins
# --------------------------------------------------------------------------


@functools.partial(
  jax.tree_util.register_dataclass,
  data_fields=[
    "count",
    "invalid",
    "correct",
    "conf_hi",
    "conf_lo",
    "conf_n",
    "conf_z",
    "cw_hi",
    "cw_lo",
    "cw_n",
  ],
  meta_fields=["bin_counts", "bins_shape", "num_classes", "dtype_name"],
)
@dataclasses.dataclass(frozen=True)
class FixedBins(_Streaming):
  """Sufficient statistics of every fixed-bin error, for a set of bin counts.

  Top-label residuals ``c - z`` (``c = max p``, ``z = 1[y = argmax p]``) and
  class-wise residuals ``p_r - 1[y = r]`` summed per threshold interval of
  the fixed rule (see :func:`interval_thresholds`); per-bin sums for any
  bin count of the set are sums of whole intervals. :meth:`compute` gives,
  for each bin count ``m`` (``S_b`` a bin's residual sum, ``n`` samples):

  * ``conf_ece = (1/n) sum_b |S_b|`` and ``conf_ce = (1/n^2) sum_b S_b^2``
    (top label), ``conf_ce_corr = conf_ce + (1/n)(1 - (1/n) sum_i z_i)``;
  * ``classwise_ece = sum_r w_r (1/n) sum_b |S_rb|``,
    ``classwise_ce = (1/C) sum_r (1/n^2) sum_b S_rb^2`` (LinCE_cw);
  * ``ecce = sum_r w_r (1/K_r) (1/n) sum_{b non-empty} |sum_{b' <= b} S_rb'|``
    with ``K_r`` class ``r``'s number of non-empty bins (the one-shot
    ``ecce``'s default ``reduction="mean"``);

  each equal to the one-shot function with ``binning="fixed"``. LinCE is
  truthful for every outcome-independent binning, fixed bins included, so
  ``conf_ce_corr`` and ``classwise_ce`` here are truthful errors that
  stream exactly.

  Attributes:
    count: ``()`` int32, samples seen.
    invalid: ``()`` int32, batches that failed the traced value check
      (see the module notes: ``compute`` is then NaN).
    correct: ``()`` int32, samples with ``z = 1``.
    conf_hi, conf_lo: ``(K + 1,)`` compensated top-label residual sums.
    conf_n, conf_z: ``(K + 1,)`` int32 sample and ``z = 1`` counts per interval.
    cw_hi, cw_lo: ``(C, K + 1)`` compensated class-wise residual sums
      (``None`` with ``classwise=False``).
    cw_n: ``(C, K + 1)`` int32 counts per class and interval.
    bin_counts, bins_shape, num_classes, dtype_name: static configuration.

  Example:
    >>> import jax, jax.numpy as jnp
    >>> p = jnp.array([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7]])
    >>> y = jnp.array([0, 1, 1])
    >>> state = FixedBins.empty(2, num_bins=2)
    >>> state = jax.jit(FixedBins.update)(state, p[:2], y[:2])
    >>> state = state.update(p[2:], y[2:])
    >>> round(float(state.compute()["conf_ece"]), 4)
    0.1333

  Reference: Lu, Wu, Hartline & Hu (2025), Truthful Calibration Errors for
  Multi-Class Prediction, §3 (LinCE, Thm 3.1: truthful for every
  outcome-independent binning) and §3.2 (confidence errors); Naeini, Cooper
  & Hauskrecht (2015) (ECE); Arrieta-Ibarra et al. (2022) (ECCE).
  """

  count: jax.Array
  invalid: jax.Array
  correct: jax.Array
  conf_hi: jax.Array
  conf_lo: jax.Array
  conf_n: jax.Array
  conf_z: jax.Array
  cw_hi: jax.Array | None
  cw_lo: jax.Array | None
  cw_n: jax.Array | None
  bin_counts: tuple[int, ...]
  bins_shape: tuple[int, ...]
  num_classes: int
  dtype_name: str

  @classmethod
  def empty(
    cls,
    num_classes: int,
    num_bins: ArrayLike = 15,
    *,
    classwise: bool = True,
    dtype: Any = jnp.float32,
  ) -> FixedBins:
    """An empty state.

    Args:
      num_classes: ``C`` (static).
      num_bins: a bin count, or an int array of them (results have its shape).
      classwise: also keep the class-wise statistics (``C`` times the memory).
      dtype: float dtype of the scores and sums (``float32`` or ``float64``);
        probabilities are cast to it.

    Returns:
      A :class:`FixedBins` with zero counts.

    Raises:
      ValueError: ``num_classes`` not an int ``>= 2``, bad or traced bin
        counts, ``classwise`` not a bool, or a dtype other than float32 /
        float64 (float64 needs 64-bit JAX).
    """
    counts, shape = _bin_counts(num_bins)
    num_classes = _num_classes(num_classes)
    classwise = V.check_flag(classwise, "classwise")
    name = _check_dtype(dtype)
    k = _interval_thresholds(counts, name).shape[0] + 1
    dt = jnp.dtype(dtype)
    zf = jnp.zeros((k,), dt)
    zi = jnp.zeros((k,), jnp.int32)
    cwf = jnp.zeros((int(num_classes), k), dt) if classwise else None
    cwi = jnp.zeros((int(num_classes), k), jnp.int32) if classwise else None
    return cls(
      jnp.int32(0), jnp.int32(0), jnp.int32(0), zf, zf, zi, zi, cwf, cwf, cwi,
      counts, shape, int(num_classes), name,
    )  # fmt: skip

  @property
  def num_bins(self) -> int | np.ndarray:
    """The bin counts as given to :meth:`empty` (an int, or an int array)."""
    if not self.bins_shape and len(self.bin_counts) == 1:
      return self.bin_counts[0]
    return np.asarray(self.bin_counts, np.int32).reshape(self.bins_shape)

  @property
  def thresholds(self) -> np.ndarray:
    """The ``(K,)`` interval thresholds (static, numpy, read-only)."""
    return _interval_thresholds(self.bin_counts, self.dtype_name)

  @jax.jit
  def _ingest(
    self, p: jax.Array, y: jax.Array, w: jax.Array, bad: jax.Array, nll: jax.Array | None = None
  ) -> FixedBins:
    p = p.astype(self.dtype_name)
    thr = jnp.asarray(self.thresholds)
    r, c = _confidence_parts(p)
    z = (r == y) & w
    # the batch's interval sums exactly (not a float32 scatter), with the counts
    terms, n_in, z_in = _interval_residual_sums(c[:, None], z[:, None], None, w, thr)
    conf_hi, conf_lo = _add_terms(self.conf_hi, self.conf_lo, [t[0] for t in terms])
    conf_n, conf_z = self.conf_n + n_in[0], self.conf_z + z_in[0]
    cw = (self.cw_hi, self.cw_lo, self.cw_n)
    if self.cw_hi is not None:
      terms, cnt, _ = _interval_residual_sums(p, None, y, w, thr)
      hi, lo = _add_terms(self.cw_hi, self.cw_lo, terms)
      cw = (hi, lo, self.cw_n + cnt)
    return dataclasses.replace(
      self,
      count=_add_count(self.count, jnp.sum(w, dtype=jnp.int32)),
      invalid=self.invalid + bad,
      correct=self.correct + jnp.sum(z, dtype=jnp.int32),
      conf_hi=conf_hi,
      conf_lo=conf_lo,
      conf_n=conf_n,
      conf_z=conf_z,
      cw_hi=cw[0],
      cw_lo=cw[1],
      cw_n=cw[2],
    )

  @V.outside_explicit_context
  def merge(self, other: FixedBins) -> FixedBins:
    """The state of both data sets (associative and commutative; counts exact).

    Args:
      other: a :class:`FixedBins` of the same class count, bin counts, dtype
        and parts kept.

    Returns:
      The :class:`FixedBins` of the union of both states' samples.

    Raises:
      ValueError: ``other`` differs in configuration.
    """
    return _merge_sums(self, other, (("conf_hi", "conf_lo"), ("cw_hi", "cw_lo")))

  @V.outside_explicit_context
  def compute(self, class_weights: ArrayLike | None = None) -> dict[str, jax.Array]:
    """Every fixed-bin error, each shaped like the state's ``num_bins``.

    Args:
      class_weights: ``(C,)`` weights of ``classwise_ece`` and ``ecce``
        (default ``1/C``).

    Returns:
      dict with ``conf_ece``, ``conf_ce``, ``conf_ce_corr`` and, with
      class-wise statistics, ``classwise_ece``, ``classwise_ce``, ``ecce``.
      All NaN when a batch updated under ``jit`` was invalid, and, inside
      ``jit``, when no sample was seen.

    Raises:
      ValueError: eagerly, a state that has seen no sample; bad
        ``class_weights``.
    """
    w = CE._class_weights(class_weights, self.num_classes, self.conf_hi.dtype)
    _checked_state(self.count, self.invalid, "FixedBins")
    return _fixed_compute(self, w)

  def _compute(self, w: jax.Array) -> dict[str, jax.Array]:
    ends = _interval_ends(self.bin_counts, self.dtype_name)
    n = self.count.astype(self.conf_hi.dtype)
    shape = self.bins_shape
    sums = _per_bin(self.conf_hi, ends) + _per_bin(self.conf_lo, ends)  # (M, max_bins)
    ece = jnp.sum(jnp.abs(sums), axis=-1) / n
    ce = jnp.sum(sums**2, axis=-1) / n / n
    out = {
      "conf_ece": ece.reshape(shape),
      "conf_ce": ce.reshape(shape),
      "conf_ce_corr": (ce + (self.count - self.correct).astype(n.dtype) / n / n).reshape(shape),
    }
    if self.cw_hi is not None:
      cs = _per_bin(self.cw_hi, ends) + _per_bin(self.cw_lo, ends)  # (M, C, max_bins)
      cn = _per_bin(self.cw_n, ends)
      per_class = jnp.sum(jnp.abs(cs), axis=-1) / n  # (M, C)
      out["classwise_ece"] = jnp.sum(per_class * lift(w, 2), axis=-1).reshape(shape)
      out["classwise_ce"] = (jnp.sum(cs**2, axis=-1).mean(axis=-1) / n / n).reshape(shape)
      cum = jnp.cumsum(-cs, axis=-1)
      per = jnp.sum(jnp.where(cn > 0, jnp.abs(cum), 0.0), axis=-1) / n
      nonempty = jnp.maximum(jnp.sum(cn > 0, axis=-1), 1).astype(per.dtype)  # K_c
      out["ecce"] = jnp.sum(per / nonempty * lift(w, 2), axis=-1).reshape(shape)
    ok = (self.invalid == 0) & (self.count >= 0)
    return {k: V.fold(v, ok) for k, v in out.items()}

  @V.outside_explicit_context
  def reliability(self, num_bins: int) -> ReliabilityStats:
    """Per-bin counts, mean confidence and accuracy of the top label for one bin count.

    Args:
      num_bins: one of the state's bin counts.

    Returns:
      :class:`~jaxcal.metrics.ReliabilityStats` of ``(num_bins,)`` arrays, as
      ``metrics.reliability_stats(probs, labels, num_bins, "fixed")``; when
      a batch updated under ``jit`` was invalid, or the state has seen more
      than 2^31 - 1 samples, NaN confidences and accuracies and counts of -1.

    Raises:
      ValueError: ``num_bins`` is not an int, or not one of the state's bin
        counts.
    """
    _single(self.count, "FixedBins")
    # one count, an int: np.array([15]) raised numpy's "only 0-dimensional arrays can be
    # converted", and True was taken for 1 bin (found by a review helper)
    m = V.check_num_bins(num_bins)  # the metrics' rule: 15, np.int64(15), 15.0, np.array(15)
    if np.ndim(m) != 0 or not V.is_concrete(m):
      raise ValueError(f"num_bins must be one concrete bin count, got {num_bins!r}")
    num_bins = int(m)
    if num_bins not in self.bin_counts:
      raise ValueError(
        f"num_bins = {num_bins!r} is not one of the state's bin counts {sorted(set(self.bin_counts))}"
      )
    return _fixed_reliability(self, num_bins)

  def _reliability(self, num_bins: int) -> ReliabilityStats:
    thr = jnp.asarray(self.thresholds)
    b = _interval_bins(thr, jnp.int32(num_bins))
    cnt = jax.ops.segment_sum(self.conf_n, b, num_bins)
    hits = jax.ops.segment_sum(self.conf_z, b, num_bins)
    resid = jax.ops.segment_sum(self.conf_hi, b, num_bins) + jax.ops.segment_sum(
      self.conf_lo, b, num_bins
    )
    dt = self.conf_hi.dtype
    safe = jnp.maximum(cnt, 1).astype(dt)
    acc = jnp.where(cnt > 0, hits.astype(dt) / safe, 0.0)
    conf = jnp.where(cnt > 0, (resid + hits.astype(dt)) / safe, 0.0)
    ok = (self.invalid == 0) & (self.count >= 0)
    conf, acc = V.fold((conf, acc), ok)
    edges = jnp.arange(num_bins + 1, dtype=dt) / num_bins
    return ReliabilityStats(jnp.where(ok, cnt, -1), conf, acc, edges[:-1], edges[1:])


@jax.jit
def _fixed_compute(state: FixedBins, w: jax.Array) -> dict[str, jax.Array]:
  return state._compute(w)


@functools.partial(jax.jit, static_argnums=1)
def _fixed_reliability(state: FixedBins, num_bins: int) -> ReliabilityStats:
  return state._reliability(num_bins)


def _float_dtypes(state: Any) -> list:
  """The dtypes of a state's float leaves: its sums or records.

  Counts are left out: under x64 an update may widen an int32 count to int64.
  """
  return [x.dtype for x in jax.tree.leaves(state) if jnp.issubdtype(x.dtype, jnp.floating)]


def _difference(a: Any, b: Any) -> str:
  """What differs between two states' configurations, in words (for :func:`_check_same`)."""
  if type(a) is not type(b):
    return "another kind of state"
  names = lambda s: "/".join(sorted({jnp.dtype(d).name for d in _float_dtypes(s)}))
  if names(a) != names(b):
    return f"dtype {names(a)} against {names(b)}"
  for f in dataclasses.fields(a):
    va, vb = getattr(a, f.name), getattr(b, f.name)
    if (va is None) != (vb is None):
      return f"{f.name} kept by one state only"
    if isinstance(va, jax.Array | np.ndarray) or dataclasses.is_dataclass(va) or va == vb:
      continue
    return f"{f.name} {va} against {vb}"
  return "the parts kept differ"


def _check_same(a: Any, b: Any, *, structure: bool = True) -> None:
  """Refuses to merge states of another type, float dtype or (``structure``) configuration."""
  if (
    type(a) is not type(b)
    or (structure and jax.tree.structure(a) != jax.tree.structure(b))
    or _float_dtypes(a) != _float_dtypes(b)
  ):
    raise ValueError(
      f"cannot merge a {type(a).__name__} with a {type(b).__name__} of a different "
      f"configuration ({_difference(a, b)}; bin counts, classes, dtype and parts kept must match)"
    )
  shapes = lambda s: [jnp.shape(x) for x in jax.tree.leaves(s)]
  if structure and shapes(a) != shapes(b):
    # a batch of states (built under vmap) and a single one broadcast: the single
    # state's samples joined every model's
    raise ValueError(
      f"cannot merge {type(a).__name__} states of different shapes (a batch of states built "
      "under jax.vmap with a single state?): merge two batches or two single states"
    )


def _merge_sums(a: Any, b: Any, pairs: tuple[tuple[str, str], ...]) -> Any:
  """Leaf-wise sums of two states; the ``(hi, lo)`` pairs are added with TwoSum."""
  _check_same(a, b)
  fixes = {}
  for hi, lo in pairs:
    if getattr(a, hi) is not None:
      pair_a, pair_b = (getattr(a, hi), getattr(a, lo)), (getattr(b, hi), getattr(b, lo))
      fixes[hi], fixes[lo] = _add_pairs(pair_a, pair_b)
  fixes["count"] = _add_count(a.count, b.count)
  return dataclasses.replace(jax.tree.map(jnp.add, a, b), **fixes)


def _reduce_stack(stacked: Any) -> Any:
  """Merges states stacked along a leading axis, in order: what merging them one by one gives.

  The result is bitwise the sequential ``s_0.merge(s_1).merge(s_2)...``,
  but its program does not grow with the number of states ``k``: the sum
  states (:class:`FixedBins`, :class:`Scores`, the sums of a
  :class:`Calibration`) are merged by one ``jax.lax.scan`` whose step is
  their own ``merge`` (the same TwoSum pairs and count rule, in the same
  order), and :class:`Records` by one gather (:func:`_reduce_records`).
  Unrolled, ``k = 128`` states compiled for 8 s (``FixedBins``) and ``k``
  growing merges of records took 15 s eagerly. A stack of one state is
  that state.

  Args:
    stacked: a state whose leaves have a leading axis of ``k >= 1`` states.

  Returns:
    The merged state (:class:`Records`: capacity ``k`` times the stacked one).

  Raises:
    ValueError: the state is not stacked, the stack holds no state, or a
      merge of two of its states would raise (e.g. a stack of batches of
      :class:`Records` built under ``jax.vmap``, used outside ``vmap``).
  """
  leaves = jax.tree.leaves(stacked)
  if not leaves or leaves[0].ndim == 0:
    raise ValueError("reduce() expects states stacked along a leading axis (e.g. after all_gather)")
  k = leaves[0].shape[0]
  if k == 0:
    raise ValueError(
      "reduce() needs a stack of at least one state, got 0 (leading axis of size 0); "
      f"start from {type(stacked).__name__}.empty(...) when there is nothing to merge"
    )
  if k == 1:
    return jax.tree.map(lambda x: x[0], stacked)
  return _reduce_many(stacked)


@jax.jit
def _reduce_many(stacked: Any) -> Any:
  """:func:`_reduce_stack` of ``k >= 2`` states: one program for any ``k``, cached per shape."""
  recs = _records_of(stacked)
  if recs is stacked:
    return _reduce_records(stacked)
  sums = stacked if recs is None else dataclasses.replace(stacked, records=None)
  first = jax.tree.map(lambda x: x[0], sums)
  rest = jax.tree.map(lambda x: x[1:], sums)
  # the state's own merge as the step (its checks run once, on the traced state)
  out, _ = jax.lax.scan(lambda acc, s: (acc.merge(s), None), first, rest)
  return out if recs is None else dataclasses.replace(out, records=_reduce_records(recs))


def _reduce_records(stacked: Records) -> Records:
  """``k`` stacked :class:`Records` merged in order with one gather, as ``merge`` one by one.

  The sequential merge puts state ``j``'s whole buffer (its ``capacity``
  slots, records and padding) at ``start_j = clip(n_0 + ... + n_{j-1}, 0,
  j capacity)`` of a buffer of ``k capacity`` slots (``n`` the counts), a
  later state over an earlier one, zeros where none lands: the states'
  records packed in order when none overflowed (``n_j <= capacity``), a
  gap after one that did (the result is overflowed then: NaN or a raise).
  Here each slot's last writer is found by one scatter-max of the state
  indices and the slots are gathered from the stack: the same buffer,
  padding included, with the same count (the sum, ``-1`` past
  :data:`MAX_COUNT`), ``overflow`` (any, or a count past it) and
  ``invalid`` (the sum).

  Args:
    stacked: :class:`Records` whose leaves have a leading axis of ``k`` states.

  Returns:
    The merged :class:`Records`, capacity ``k * stacked.capacity``.

  Raises:
    ValueError: the stacked states are batches built under ``jax.vmap``
      (as :meth:`Records.merge`).
  """
  first = jax.tree.map(lambda x: x[0], stacked)
  first._check_merge(first)  # the stack's states share kind, classes and dtype: once is enough
  cap = stacked.capacity
  k = stacked.count.shape[0]
  total = _check_capacity(k * cap, "merged")
  counts = stacked.count
  ends = jax.lax.scan(  # -1 past MAX_COUNT, as merge's sums
    # (the carry typed like the counts: inside shard_map they vary over devices)
    lambda acc, c: (_add_count(acc, c),) * 2,
    carry_like(jnp.zeros((), counts.dtype), counts),
    counts,
  )[1]
  before = jnp.concatenate([jnp.zeros((1,), counts.dtype), ends[:-1]])
  start = jnp.clip(before, 0, jnp.arange(k, dtype=counts.dtype) * cap)  # (k,)
  slots = (start[:, None] + jnp.arange(cap, dtype=counts.dtype)[None, :]).ravel()
  writer = jnp.repeat(jnp.arange(k, dtype=jnp.int32), cap)
  owner = jnp.full((total,), -1, jnp.int32).at[slots].max(writer)  # last writer of each slot
  src_state = jnp.maximum(owner, 0)
  src = src_state * cap + (jnp.arange(total, dtype=counts.dtype) - start[src_state])
  filled = owner >= 0

  def gather(a):
    if a is None:
      return None
    flat = a.reshape((total,) + a.shape[2:])
    mask = filled.reshape((total,) + (1,) * (a.ndim - 2))
    return jnp.where(mask, flat[src], jnp.zeros((), a.dtype))

  return dataclasses.replace(
    stacked,
    count=ends[-1],
    overflow=jnp.any(stacked.overflow) | (ends[-1] < 0),
    invalid=jnp.sum(stacked.invalid, dtype=stacked.invalid.dtype),
    conf=gather(stacked.conf),
    hit=gather(stacked.hit),
    probs=gather(stacked.probs),
    labels=gather(stacked.labels),
    capacity=total,
  )


# --------------------------------------------------------------------------
# Scores
# --------------------------------------------------------------------------

_SCORE_NAMES = ("brier", "log_loss", "spherical", "confidence_loss")
_PER_SAMPLE = (
  S.brier_per_sample,
  S.log_loss_per_sample,
  S.spherical_per_sample,
  S.confidence_loss_per_sample,
)


@functools.partial(
  jax.tree_util.register_dataclass,
  data_fields=["count", "invalid", "correct", "hi", "lo", "label_counts", "confusion"],
  meta_fields=["num_classes"],
)
@dataclasses.dataclass(frozen=True)
class Scores(_Streaming):
  """Sums of proper scores, correct predictions, label counts and confusion counts.

  :meth:`compute` gives the means ``(1/n) sum_i S(p_i, y_i)`` of the Brier
  score ``sum_r (p_r - 1[y = r])^2``, the log loss ``-log p_y`` (``p_y``
  clipped at 1e-12), the spherical loss ``1 - p_y / ||p||_2`` and the
  confidence loss ``1 - z + (c - z)^2``, with the classification error and
  accuracy (from integer counts), the label frequencies and the confusion
  matrix ``N[y, argmax p]``.

  Attributes:
    count: ``()`` int32 samples seen.
    invalid: ``()`` int32, batches that failed the traced value check
      (see the module notes: ``compute`` is then NaN).
    correct: ``()`` int32 samples with ``argmax p = y``.
    hi, lo: ``(4,)`` compensated sums of the four losses.
    label_counts: ``(C,)`` int32.
    confusion: ``(C, C)`` int32 (``None`` unless asked for).
    num_classes: static ``C``.

  Example:
    >>> import jax.numpy as jnp
    >>> s = Scores.empty(2).update(jnp.array([[0.5, 0.5], [1.0, 0.0]]), jnp.array([0, 0]))
    >>> float(s.compute()["brier"])
    0.25

  Reference: Lu, Wu, Hartline & Hu (2025), Truthful Calibration Errors for
  Multi-Class Prediction, §2 (proper scores) and Lemma D.1 (confidence loss).
  """

  count: jax.Array
  invalid: jax.Array
  correct: jax.Array
  hi: jax.Array
  lo: jax.Array
  label_counts: jax.Array
  confusion: jax.Array | None
  num_classes: int
  _sums_log_loss = True  # (a class constant, not a field)

  @classmethod
  def empty(cls, num_classes: int, *, confusion: bool = False, dtype: Any = jnp.float32) -> Scores:
    """An empty state (``confusion=True`` also keeps the ``(C, C)`` confusion counts).

    Args:
      num_classes: ``C``, the number of classes (``>= 2``).
      confusion: also keep the ``(C, C)`` int32 confusion counts.
      dtype: float dtype of the sums (``float32`` or ``float64``).

    Returns:
      A :class:`Scores` state that has seen no samples.

    Raises:
      ValueError: ``num_classes`` not an int ``>= 2``, ``confusion`` not a
        bool, or a dtype other than float32 / float64.
    """
    c = _num_classes(num_classes)
    confusion = V.check_flag(confusion, "confusion")
    z = jnp.zeros((len(_SCORE_NAMES),), _check_dtype(dtype))
    conf = jnp.zeros((c, c), jnp.int32) if confusion else None
    zero = jnp.int32(0)
    return cls(zero, zero, zero, z, z, jnp.zeros((c,), jnp.int32), conf, c)

  @jax.jit
  def _ingest(
    self, p: jax.Array, y: jax.Array, w: jax.Array, bad: jax.Array, nll: jax.Array | None = None
  ) -> Scores:
    p = p.astype(self.hi.dtype)
    losses = [f(p, y) for f in _PER_SAMPLE]
    if nll is not None:  # from the logits (accurate near 0), not from their softmax
      losses[_SCORE_NAMES.index("log_loss")] = nll.astype(p.dtype)
    losses = jnp.stack(losses, axis=0)  # (4, B)
    batch = jnp.sum(jnp.where(w[None, :], losses, 0.0), axis=1)
    hi, lo = _add(self.hi, self.lo, batch)
    r, _ = _confidence_parts(p)
    hit = (r == y) & w
    c = self.num_classes
    wi = w.astype(jnp.int32)
    labels_n = self.label_counts + jax.ops.segment_sum(wi, y, c)
    confusion = self.confusion
    if confusion is not None:
      confusion = confusion + jax.ops.segment_sum(wi, y * c + r, c * c).reshape(c, c)
    return dataclasses.replace(
      self,
      count=_add_count(self.count, jnp.sum(wi, dtype=jnp.int32)),
      invalid=self.invalid + bad,
      correct=self.correct + jnp.sum(hit, dtype=jnp.int32),
      hi=hi,
      lo=lo,
      label_counts=labels_n,
      confusion=confusion,
    )

  @V.outside_explicit_context
  def merge(self, other: Scores) -> Scores:
    """The state of both data sets (associative and commutative).

    Args:
      other: a :class:`Scores` of the same class count, dtype and parts kept.

    Returns:
      The :class:`Scores` of the union of both states' samples.

    Raises:
      ValueError: ``other`` is not a :class:`Scores` of the same class
        count, dtype and parts kept (as :meth:`FixedBins.merge`).
    """
    return _merge_sums(self, other, (("hi", "lo"),))

  @V.outside_explicit_context
  def compute(self) -> dict[str, jax.Array]:
    """Means of the scores, accuracy, classification error, label frequencies (and confusion).

    Returns:
      dict with ``brier``, ``log_loss``, ``spherical``, ``confidence_loss``,
      ``accuracy``, ``classification_error``, ``label_frequencies`` ``(C,)``
      and, when kept, the int32 ``confusion`` counts ``(C, C)``. When a
      batch updated under ``jit`` was invalid every float is NaN and the
      confusion counts are -1; inside ``jit``, an empty state gives NaN.

    Raises:
      ValueError: eagerly, a state that has seen no sample.
    """
    _checked_state(self.count, self.invalid, "Scores")
    n = self.count.astype(self.hi.dtype)
    means = (self.hi + self.lo) / n
    out = {name: means[i] for i, name in enumerate(_SCORE_NAMES)}
    acc = self.correct.astype(n.dtype) / n
    out["accuracy"] = acc
    out["classification_error"] = 1.0 - acc
    out["label_frequencies"] = self.label_counts.astype(n.dtype) / n
    ok = (self.invalid == 0) & (self.count >= 0)
    out = {k: V.fold(v, ok) for k, v in out.items()}
    if self.confusion is not None:
      out["confusion"] = jnp.where(ok, self.confusion, -1)  # int counts: no NaN
    return out


# --------------------------------------------------------------------------
# Records: the exact path for metrics that need a global order
# --------------------------------------------------------------------------

_KINDS = ("top_label", "full")


@functools.partial(
  jax.tree_util.register_dataclass,
  data_fields=["count", "overflow", "invalid", "conf", "hit", "probs", "labels"],
  meta_fields=["kind", "capacity", "num_classes"],
)
@dataclasses.dataclass(frozen=True)
class Records(_Streaming):
  """Per-sample records in a buffer of static capacity: the exact path for sorted metrics.

  ``kind="top_label"`` keeps ``c_i = max p_i`` and ``z_i = 1[y_i = argmax p_i]``
  (a float and a bool per sample); ``kind="full"`` keeps ``p_i`` and ``y_i``.
  Records are compacted in update order (masked samples are skipped). More
  samples than ``capacity`` set ``overflow`` and :meth:`compute` raises
  rather than return a number computed on part of the data.

  Attributes:
    count: ``()`` int32 samples recorded (or offered, when overflowing; ``-1``
      past :data:`MAX_COUNT`).
    overflow: ``()`` bool, more samples than ``capacity`` were offered.
    invalid: ``()`` int32, batches that failed the traced value check
      (see the module notes: ``compute`` is then NaN).
    conf, hit: ``(capacity,)`` confidence and correctness (``top_label``).
    probs, labels: ``(capacity, C)`` and ``(capacity,)`` (``full``).
    kind, capacity, num_classes: static configuration.

  Example:
    >>> import jax.numpy as jnp
    >>> from jaxcal import metrics
    >>> p = jnp.array([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7]])
    >>> y = jnp.array([0, 1, 1])
    >>> r = Records.empty(2, capacity=4).update(p[:1], y[:1]).update(p[1:], y[1:])
    >>> bool(r.compute(num_bins=1)["conf_ce_corr"] == metrics.conf_ce_corr(p, y, 1))
    True

  Reference: Lu, Wu, Hartline & Hu (2025), Truthful Calibration Errors for
  Multi-Class Prediction, §3.2 (ConfCE_corr with quantile bins).
  """

  count: jax.Array
  overflow: jax.Array
  invalid: jax.Array
  conf: jax.Array | None
  hit: jax.Array | None
  probs: jax.Array | None
  labels: jax.Array | None
  kind: str
  capacity: int
  num_classes: int

  @classmethod
  def empty(
    cls, num_classes: int, *, capacity: int, kind: str = "top_label", dtype: Any = jnp.float32
  ) -> Records:
    """An empty buffer for ``capacity`` samples of ``kind`` ``"top_label"`` or ``"full"``.

    ``num_classes`` comes first, as in the other states' ``empty``; the
    rest are keywords, so the order ``empty(capacity, num_classes)`` of
    earlier versions is an error, not a swapped buffer.

    Args:
      num_classes: ``C``, the number of classes (``>= 2``).
      capacity: samples to keep; more offered set ``overflow``.
      kind: ``"top_label"`` keeps ``(capacity,)`` confidences and
        correctness; ``"full"`` keeps ``(capacity, C)`` probabilities and
        ``(capacity,)`` labels.
      dtype: float32 (default) or float64.

    Returns:
      A :class:`Records` with ``count`` 0.

    Example:
      >>> r = Records.empty(10, capacity=1024)
      >>> r.conf.shape, int(r.count)
      ((1024,), 0)

    Raises:
      ValueError: an unknown ``kind``, ``capacity`` not an int ``>= 1`` (a
        bool such as ``True`` is not a capacity) or above :data:`MAX_COUNT`,
        ``num_classes`` not an int ``>= 2``, or a dtype other than float32 /
        float64.
    """
    if kind not in _KINDS:
      raise ValueError(f"kind must be one of {_KINDS}, got {kind!r}")
    cap = _check_capacity(V.check_int(capacity, "capacity (samples to keep)"))
    c = _num_classes(num_classes)
    dtype = _check_dtype(dtype)
    top = kind == "top_label"
    return cls(
      count=jnp.int32(0),
      overflow=jnp.bool_(False),
      invalid=jnp.int32(0),
      conf=jnp.zeros((cap,), dtype) if top else None,
      hit=jnp.zeros((cap,), bool) if top else None,
      probs=None if top else jnp.zeros((cap, c), dtype),
      labels=None if top else jnp.zeros((cap,), jnp.int32),
      kind=kind,
      capacity=cap,
      num_classes=c,
    )

  @jax.jit
  def _ingest(
    self, p: jax.Array, y: jax.Array, w: jax.Array, bad: jax.Array, nll: jax.Array | None = None
  ) -> Records:
    pos = self.count + jnp.cumsum(w.astype(jnp.int32)) - 1
    # out of range (also a wrapped position, or a count past MAX_COUNT): dropped
    idx = jnp.where(w & (pos >= 0) & (pos < self.capacity), pos, self.capacity)
    new_count = _add_count(self.count, jnp.sum(w, dtype=jnp.int32))
    fields: dict[str, Any] = {
      "count": new_count,
      "overflow": self.overflow | (new_count > self.capacity) | (new_count < 0),
      "invalid": self.invalid + bad,
    }
    if self.kind == "top_label":
      r, c = _confidence_parts(p)
      fields["conf"] = self.conf.at[idx].set(c.astype(self.conf.dtype), mode="drop")
      fields["hit"] = self.hit.at[idx].set(r == y, mode="drop")
    else:
      fields["probs"] = self.probs.at[idx].set(p.astype(self.probs.dtype), mode="drop")
      fields["labels"] = self.labels.at[idx].set(y.astype(jnp.int32), mode="drop")
    return dataclasses.replace(self, **fields)

  @V.outside_explicit_context
  def merge(self, other: Records) -> Records:
    """Both buffers' records, ``other``'s after ``self``'s (capacity: the sum).

    Args:
      other: :class:`Records` of the same kind, class count and dtype.

    Returns:
      :class:`Records` holding ``self``'s records, then ``other``'s.

    Raises:
      ValueError: ``other`` is not :class:`Records` of the same kind, class
        count and dtype (the capacities may differ), or the two capacities
        add up to more than :data:`MAX_COUNT`.
    """
    self._check_merge(other)
    cap = _check_capacity(self.capacity + other.capacity, "merged")
    start = jnp.minimum(self.count, self.capacity)

    def cat(a, b):
      if a is None:
        return None
      buf = jnp.concatenate([a, jnp.zeros_like(b)], axis=0)
      return jax.lax.dynamic_update_slice_in_dim(buf, b, start, axis=0)

    count = _add_count(self.count, other.count)
    return Records(
      count=count,
      overflow=self.overflow | other.overflow | (count < 0),
      invalid=self.invalid + other.invalid,
      conf=cat(self.conf, other.conf),
      hit=cat(self.hit, other.hit),
      probs=cat(self.probs, other.probs),
      labels=cat(self.labels, other.labels),
      kind=self.kind,
      capacity=cap,
      num_classes=self.num_classes,
    )

  def _check_merge(self, other: Any) -> None:
    """Raises unless ``other`` merges into ``self`` (:meth:`merge`'s checks, static only)."""
    if type(other) is not Records or (self.kind, self.num_classes) != (
      other.kind,
      other.num_classes,
    ):
      raise ValueError("cannot merge Records of different kinds or class counts")
    _single(self.count, "Records")
    _check_same(self, other, structure=False)  # the capacities may differ, the dtype not

  def _grown(self, capacity: int) -> Records:
    """The same records in a buffer of ``capacity >= self.capacity`` samples."""
    extra = capacity - self.capacity

    def grow(a):
      return None if a is None else jnp.concatenate([a, jnp.zeros((extra,) + a.shape[1:], a.dtype)])

    return dataclasses.replace(
      self,
      conf=grow(self.conf),
      hit=grow(self.hit),
      probs=grow(self.probs),
      labels=grow(self.labels),
      capacity=capacity,
    )

  def _checked_count(self, poisoned_ok: bool = False) -> int | None:
    """Eager checks (one read of three scalars): the record count.

    Raises on an overflowed or empty buffer, and on a batch that failed the
    traced value check, unless ``poisoned_ok`` (then ``None``: the results
    are NaN anyway).
    """
    _single(self.count, "Records")
    count, overflow, invalid = jax.device_get((self.count, self.overflow, self.invalid))
    if int(invalid) > 0:
      if poisoned_ok:
        return None
      raise ValueError(
        f"Records holds {int(invalid)} batch(es) that failed the value check when updated "
        "under jax.jit / vmap (NaN or inf, rows off the simplex, or labels out of range): "
        "its records are not the data's"
      )
    if bool(overflow):
      if int(count) < 0:
        where = f"more than 2^31 - 1 = {MAX_COUNT:,} samples were offered to it"
      elif int(count) > self.capacity:
        where = f"{int(count)} samples were offered to a buffer of capacity {self.capacity}"
      else:  # a merged part overflowed before the merge added the other's capacity
        where = (
          f"a state merged into it was offered more samples than its own capacity, and "
          f"dropped them ({int(count)} samples offered in all, merged capacity "
          f"{self.capacity})"
        )
      raise ValueError(
        f"Records overflowed: {where}; make each state with a capacity of at least the "
        "number of samples it is updated with"
      )
    if int(count) == 0:
      raise ValueError("Records is empty: update it with at least one batch first")
    return int(count)

  def data(self) -> tuple[jax.Array, jax.Array]:
    """The recorded samples as arrays, for any one-shot metric (eager only).

    Returns:
      ``(probs, labels)`` for ``kind="full"``; ``(conf, hit)`` for
      ``kind="top_label"``. Shapes ``(count, ...)``.

    Raises:
      ValueError: the state is empty, overflowed, or holds a batch that
        failed the value check under ``jit``.
    """
    n = self._checked_count()
    if self.kind == "full":
      return self.probs[:n], self.labels[:n]
    return self.conf[:n], self.hit[:n]

  @V.outside_explicit_context
  def compute(self, num_bins: ArrayLike = 15, binning: str = "quantile") -> dict[str, jax.Array]:
    """Binned errors of the recorded samples, as the one-shot functions compute them.

    One compiled program per capacity (the buffer is masked beyond
    ``count``), so it also runs inside ``jax.jit``; there an overflowed
    or empty buffer gives NaN, eagerly it raises. A batch that failed the
    value check under ``jit`` makes every result NaN (eagerly too).

    Args:
      num_bins: a bin count, or a concrete int array of them.
      binning: ``"quantile"`` (default) or ``"fixed"``.

    Returns:
      dict with ``conf_ece``, ``conf_ce``, ``conf_ce_corr`` (and, for
      ``kind="full"``, ``classwise_ce``, ``classwise_ece``), each equal to
      the one-shot function of :mod:`jaxcal.metrics` with this ``binning``
      on the recorded samples, shaped like ``num_bins``.

    Raises:
      ValueError: bad ``num_bins`` or ``binning``; eagerly, an empty or
        overflowed buffer, or quantile bins more than the records.
    """
    binning = V.check_binning(binning)
    counts, shape = _bin_counts(num_bins)
    # all three scalars concrete (under a bare vmap the count may be while `invalid` is not)
    concrete = V.is_concrete(self.count, self.overflow, self.invalid)
    n = self._checked_count(poisoned_ok=True) if concrete else None
    if not concrete:  # checked mode raises as an eager compute does (poisoned: NaN)
      clean = self.invalid == 0
      V.trace_check(
        ~clean | ~self.overflow,
        "Records overflowed: make each state with a capacity of at least the number of "
        "samples it is updated with",
      )
      V.trace_check(
        ~clean | (self.count != 0),
        "Records is empty: update it with at least one batch before compute()",
      )
    if n is not None:
      if binning == "quantile" and max(counts) > n:
        raise ValueError(
          f"too few samples for the bins: quantile binning with num_bins = {max(counts)} "
          f"needs at least that many samples, got {n} records"
        )
    bins = jnp.asarray(counts, jnp.int32)
    # the bound rounded up to a power of two: counts 9 to 16 share a program
    out = _records_compute(self, bins, binning, V.bucket(max(counts)))
    return {k: v.reshape(shape) for k, v in out.items()}


@functools.partial(jax.jit, static_argnums=(2, 3))
def _records_compute(state: Records, bins: jax.Array, binning: str, max_bins: int):
  from jaxcal._src.study import binned_errors  # the study's per-model core, one home

  w = jnp.arange(state.capacity) < jnp.minimum(state.count, state.capacity)
  if state.kind == "full":
    names = ("conf_ece", "conf_ce", "conf_ce_corr", "classwise_ce", "classwise_ece")
    out = binned_errors(state.probs, state.labels, w, bins, names, binning, max_bins)
  else:

    def one(kind):
      def f(m):
        return CE._conf_from_scores(
          state.conf, state.hit, m, binning=binning, max_bins=max_bins, kind=kind, where=w
        )

      return jax.vmap(f)(bins)

    out = {"conf_ece": one("ece"), "conf_ce": one("ce"), "conf_ce_corr": one("ce_corr")}
  bad = state.overflow | (state.invalid > 0) | (state.count == 0)
  return {k: jnp.where(bad, jnp.nan, v) for k, v in out.items()}


# --------------------------------------------------------------------------
# Calibration: the three together
# --------------------------------------------------------------------------


@functools.partial(
  jax.tree_util.register_dataclass,
  data_fields=["bins", "scores", "records"],
  meta_fields=[],
)
@dataclasses.dataclass(frozen=True)
class Calibration(_Streaming):
  """Fixed-bin errors, scores and (optionally) exact records: what a training loop logs.

  :meth:`compute` returns one flat dict: ``conf_ece``, ``classwise_ece``,
  ``ecce`` (fixed bins, their default) and the truthful errors with fixed
  bins as ``conf_ce_corr_fixed``, ``classwise_ce_fixed`` (and
  ``conf_ce_fixed``) from :class:`FixedBins`; the scores and accuracy from
  :class:`Scores`; and, when records are kept, ``conf_ce``,
  ``conf_ce_corr`` (and ``classwise_ce`` with ``records="full"``) with
  their default quantile bins, exactly as the one-shot functions.

  Attributes:
    bins: the :class:`FixedBins` state (fixed-bin errors, ``num_bins`` bin
      counts, class-wise statistics unless ``classwise=False``).
    scores: the :class:`Scores` state (proper scores, accuracy, label counts;
      the ``(C, C)`` confusion counts with ``confusion=True``).
    records: the :class:`Records` state of ``capacity`` samples for the
      quantile-bin errors, or ``None`` (made without ``capacity``).

  Example:
    >>> import jax, jax.numpy as jnp
    >>> p = jnp.array([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7]])
    >>> y = jnp.array([0, 1, 1])
    >>> s = Calibration.empty(2, num_bins=2, capacity=3)
    >>> s = jax.jit(Calibration.update)(s, p, y)
    >>> out = s.compute()
    >>> round(float(out["conf_ece"]), 4), round(float(out["accuracy"]), 4)
    (0.1333, 0.6667)

  Reference: Lu, Wu, Hartline & Hu (2025), Truthful Calibration Errors for
  Multi-Class Prediction, §3.
  """

  bins: FixedBins
  scores: Scores
  records: Records | None
  _sums_log_loss = True  # (a class constant, not a field)

  @classmethod
  def empty(
    cls,
    num_classes: int,
    num_bins: int = 15,
    *,
    capacity: int | None = None,
    records: str = "top_label",
    classwise: bool = True,
    confusion: bool = False,
    dtype: Any = jnp.float32,
  ) -> Calibration:
    """An empty state.

    Args:
      num_classes: ``C``.
      num_bins: bin count(s) of every error (int or int array).
      capacity: keep up to this many per-sample records for the quantile
        errors (``None``: no records, fixed-bin errors and scores only).
      records: ``"top_label"`` (2 numbers per sample) or ``"full"``.
      classwise: keep the class-wise fixed-bin statistics.
      confusion: keep the confusion matrix.
      dtype: float dtype of the sums.

    Returns:
      A :class:`Calibration` that has seen no samples.

    Raises:
      ValueError: as :meth:`FixedBins.empty`, :meth:`Scores.empty` and
        :meth:`Records.empty` (e.g. ``capacity=True``).
    """
    if records not in _KINDS:  # also without records (capacity=None): a typo is never ignored
      raise ValueError(f"records must be one of {_KINDS}, got {records!r}")
    bins = FixedBins.empty(num_classes, num_bins, classwise=classwise, dtype=dtype)
    recs = None
    if capacity is not None:
      recs = Records.empty(num_classes, capacity=capacity, kind=records, dtype=dtype)
    return cls(bins, Scores.empty(num_classes, confusion=confusion, dtype=dtype), recs)

  @property
  def num_classes(self) -> int:
    """``C``."""
    return self.bins.num_classes

  def _ingest(
    self, p: jax.Array, y: jax.Array, w: jax.Array, bad: jax.Array, nll: jax.Array | None = None
  ) -> Calibration:
    recs = None if self.records is None else self.records._ingest(p, y, w, bad)
    return dataclasses.replace(
      self,
      bins=self.bins._ingest(p, y, w, bad),
      scores=self.scores._ingest(p, y, w, bad, nll),
      records=recs,
    )

  @V.outside_explicit_context
  def merge(self, other: Calibration) -> Calibration:
    """Merges every part (records: ``other``'s after ``self``'s).

    Args:
      other: a :class:`Calibration` of the same configuration.

    Returns:
      The :class:`Calibration` of both states' samples.

    Raises:
      ValueError: ``other`` is not a :class:`Calibration`, or differs in
        configuration: bin counts, classes, dtype, parts kept, or records
        kept by one state only (their union would miss the other state's
        samples), in either order.
    """
    if type(other) is not Calibration:
      raise ValueError(f"cannot merge a Calibration with a {type(other).__name__}")
    if (self.records is None) != (other.records is None):
      raise ValueError(
        "cannot merge a Calibration that keeps records (capacity=...) with one that does "
        "not (capacity=None): the merged records would miss the other state's samples; "
        "make both states with a capacity, or both without"
      )
    try:
      recs = None if self.records is None else self.records.merge(other.records)
      bins, sc = self.bins.merge(other.bins), self.scores.merge(other.scores)
    except ValueError as e:  # named the part only (FixedBins), not the state the caller made
      raise ValueError(f"cannot merge these Calibration states: {e}") from None
    return dataclasses.replace(self, bins=bins, scores=sc, records=recs)

  @V.outside_explicit_context
  def compute(self) -> dict[str, jax.Array]:
    """One flat dict of every number this state can give (see the class docstring).

    Every number is NaN (the confusion counts -1) when a batch updated under
    ``jit`` was invalid (see the module notes).

    Raises:
      ValueError: eagerly, a state that has seen no sample, overflowed
        records, or fewer records than the largest bin count (the quantile
        errors need at least one sample per bin, as the one-shot functions
        do; :meth:`FixedBins.compute` of ``state.bins`` still gives the
        fixed-bin ones).
    """
    _single(self.bins.count, "Calibration")
    fixed = self.bins.compute()
    out = {k: fixed[k] for k in ("conf_ece", "classwise_ece", "ecce") if k in fixed}
    for k in ("conf_ce", "conf_ce_corr", "classwise_ce"):
      if k in fixed:
        out[k + "_fixed"] = fixed[k]
    out.update(self.scores.compute())
    if self.records is not None:
      q = self.records.compute(self.bins.num_bins, "quantile")
      for k in ("conf_ce", "conf_ce_corr", "classwise_ce"):
        if k in q:
          out[k] = q[k]
    return out


def merge_across_processes(state: Any) -> Any:
  """The union of every ``jax.distributed`` process's state, on every process.

  Each process passes its own state (same configuration on all); the states
  are gathered device to device (an XLA all-gather over one device per
  process, nothing through the host) and merged in process order, so
  :class:`Records` hold process 0's samples first. With one process, or a
  state updated with global arrays (rows on every process, as
  ``jax.make_array_from_process_local_data`` makes them: it holds every
  process's samples already), the state is returned unchanged, once its
  copies are checked to agree across processes (a digest each). Make every
  batch of such a state global: an eager ``update`` refuses a host-local batch
  for it, and a state mixed inside ``jit`` is refused here. A host-local
  state merged here (the same on every process) may go on with global
  batches.

  Bad input: update the states inside ``jax.jit`` (the eval step), so a bad
  batch on any process poisons its state and the merged state is NaN on
  every process. An eager ``update`` raises on the process that saw the bad
  batch only; the other processes then wait here for it (until the
  collective's timeout), as in any collective that one process leaves.
  States made differently (another class count, bin counts, records kind or
  dtype; the records' capacity may differ) raise the same ``ValueError`` on
  every process, before anything is gathered.

  Args:
    state: a :class:`FixedBins`, :class:`Scores`, :class:`Records` or
      :class:`Calibration` holding this process's samples.

  Returns:
    The merged state, identical on every process.

  Raises:
    TypeError: not a streaming state.
    ValueError: states made differently on some process, or a state of
      global arrays whose copies differ between processes.

  Example:
    >>> import jax.numpy as jnp
    >>> s = Scores.empty(2).update(jnp.array([[0.5, 0.5]]), jnp.array([0]))
    >>> int(merge_across_processes(s).count)
    1
  """
  if not isinstance(state, _Streaming):  # on one process too: a wrong call is found at once
    raise TypeError(
      "merge_across_processes takes a FixedBins, Scores, Records or Calibration state, "
      f"got {type(state).__name__}"
    )
  if jax.process_count() == 1:
    return state
  if V.spans_processes(state):  # updated with global arrays (rows on every process): the union
    _check_copies_agree(
      state,
      "a state of global arrays (host-local batches added to it, e.g. inside jit, make "
      "each process's copy differ: pass every batch as a global jax.Array)",
    )
    return state
  from jax.experimental import multihost_utils

  # states made differently on one process (another class count, bin counts,
  # records kind or dtype) raise on every process, not in the gather below
  V.on_every_process(
    lambda: _layout(state),
    same=lambda lay: {"the state (made with the same arguments, capacity aside)": lay},
  )
  recs = _records_of(state)
  if recs is not None:  # buffers of one size on every process, for the gather
    caps = multihost_utils.process_allgather(np.int32(recs.capacity))
    grown = recs._grown(int(np.max(caps)))
    state = grown if isinstance(state, Records) else dataclasses.replace(state, records=grown)
  return _reduce_stack(_stack_processes(state))


def _records_of(state: Any) -> Records | None:
  """The :class:`Records` a state holds: itself, its ``records`` leaf, or ``None``."""
  return state if isinstance(state, Records) else getattr(state, "records", None)


def _layout(state: Any) -> str:
  """The state's type, class count and a checksum of its layout, records' capacity aside.

  Equal on every process that made its state with the same arguments (the
  capacity of the records may differ: the merge grows them to one size).
  """
  recs = _records_of(state)
  rest = None if recs is state else state
  if recs is not None:
    rest = None if rest is None else dataclasses.replace(rest, records=None)
    recs = dataclasses.replace(recs, capacity=0)  # its leaves: the capacity is their first axis
  leaves = [(np.shape(x), str(x.dtype)) for x in jax.tree.leaves(rest)]
  rec_leaves = [(np.shape(x)[1:], str(x.dtype)) for x in jax.tree.leaves(recs)]
  full = f"{jax.tree.structure(rest)} {leaves} {jax.tree.structure(recs)} {rec_leaves}"
  return (
    f"a {type(state).__name__} for C = {state.num_classes} (layout {zlib.crc32(full.encode()):08x})"
  )


def _stack_processes(tree: Any) -> Any:
  """Every process's ``tree`` stacked along a new leading axis, on this process's device.

  Device to device: each leaf becomes one slice of a global array over one
  device per process, a compiled identity replicates it (XLA's all-gather),
  and this process keeps its local replica. Nothing goes through the host.
  """
  from jax.sharding import Mesh, NamedSharding
  from jax.sharding import PartitionSpec as P

  first = {}
  for d in jax.devices():
    first.setdefault(d.process_index, d)
  mesh = Mesh(np.array([first[i] for i in sorted(first)]), ("processes",))
  rows = NamedSharding(mesh, P("processes"))
  local = first[jax.process_index()]

  def slice_of(leaf):
    x = jax.device_put(jnp.asarray(leaf)[None], local)
    return jax.make_array_from_process_local_data(rows, x)

  replicated = V.resharder(NamedSharding(mesh, P()))(jax.tree.map(slice_of, tree))
  return jax.tree.map(lambda rep: rep.addressable_data(0), replicated)
