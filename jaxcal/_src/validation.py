"""Input validation shared by every public entry point.

Two tiers, as in chex/optax, plus an opt-in third:

* **trace-time** checks look only at shapes and dtypes (``(n, C)`` probabilities,
  ``(n,)`` integer labels, a boolean ``where`` mask, ...). They always run,
  also under ``jax.jit`` / ``jax.vmap``.
* **value** checks (finite, in ``[0, 1]``, rows summing to one, labels in
  ``[0, C)``, integral float labels, class weights, an empty mask) are one fused
  jitted reduction per call that returns two scalars (all good? how many
  samples?). With ``check_predictions(..., defer=True)`` and
  :func:`run_checked` (the top-label, class-wise and ECCE errors and the
  scores) the checks run inside the metric's own program and their two
  scalars are read back with one wait; the top-label errors and the scores
  also read a host float matrix on the CPU in place (``borrow=True``)
  instead of copying it. On an eager call the entry point reads those
  scalars and, only
  when something is wrong, runs a second jitted reduction that finds the
  number of bad rows, the first bad index and an example value, and raises a
  ``ValueError`` naming the argument, the problem and the fix. No ``(n,)`` or
  ``(n, C)`` array is ever copied to the host, so the same eager call works on a
  global ``jax.Array`` sharded across devices and processes (only replicated
  scalars come back). Under a transformation a one-pass version (row sums,
  labels, weights, mask: it catches NaN/inf, rows off the simplex, labels out
  of range) is traced into the user's program and its flag folded into the
  result: such input gives NaN, never a plausible number. (It also takes the
  minimum, so a row summing to one with a negative entry gives NaN too; only an
  entry in ``(1 + tol, 1 + C·tol]`` of a row that still sums to one within
  ``tol`` is left to eager calls and checked mode.)
* **checked mode**: :func:`checked` wraps a function (typically a user's jitted
  one) with ``jax.experimental.checkify``; the value checks are then compiled
  in and raise a ``ValueError`` with the same message from compiled code.

Host inputs (numpy arrays, lists) that JAX would narrow when converting them
(int64 labels beyond int32, non-integral float64 labels, integer probability
matrices) are checked with numpy *before* the cast: they already live on the
host, so this is no round trip.

Nothing the caller passed is modified: the helpers only read.
"""

from __future__ import annotations

import contextlib
import fractions
import functools
import inspect
import json
import math
import os
import re
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import checkify

from jaxcal._src.numerics import NARROW_ROW, RowBlocks, by_rows, row_sum_min

__all__ = [
  "SIMPLEX_ATOL",
  "MAX_NUM_BINS",
  "simplex_atol",
  "compute_dtype",
  "real_dtype",
  "host_array",
  "is_concrete",
  "as_float",
  "Checked",
  "check_predictions",
  "on_every_process",
  "resharder",
  "process_shard",
  "check_union_rows",
  "run_checked",
  "neutral",
  "neutral_program",
  "check_where",
  "check_probs",
  "check_logits",
  "check_labels",
  "check_finite",
  "check_values",
  "check_arrays",
  "check_binary",
  "check_features",
  "check_num_bins",
  "check_int",
  "check_binning",
  "check_bins",
  "check_max_bins",
  "BinCounts",
  "bucket",
  "looks_like_probs",
  "probs_or_logits",
  "upcast",
  "fold",
  "trace_check",
  "checked",
  "checking",
  "check_int_option",
  "check_seed",
  "check_entries",
  "check_bin_arrays",
  "MAX_ENTRIES",
  "seed_key",
  "check_float_option",
]

#: Smallest tolerance on ``|sum(p) - 1|`` and on values below 0 / above 1 for rows
#: of a probability matrix (float32 and float64; see :func:`simplex_atol`).
SIMPLEX_ATOL = 1e-3

#: Largest accepted bin count (bin indices and ``i * m`` products are int32).
MAX_NUM_BINS = 2**24

_INT32 = np.iinfo(np.int32)

#: What a host label that int32 cannot hold (non-integral, non-finite or beyond
#: int32) becomes when its check is left to the device (a JAX ``where``, a
#: process's shard); the device check reports it by that description.
_NOT_A_LABEL = int(_INT32.min)
#: How the device check names that value: an int32 label of ``-2**31`` itself
#: reads the same on the device, so the text names both.
_NOT_A_LABEL_TEXT = (
  f"{_NOT_A_LABEL} or a value int32 cannot hold (non-integral, non-finite or beyond int32)"
)


def simplex_atol(dtype: Any) -> float:
  """Tolerance of the simplex checks for probabilities stored in ``dtype``.

  ``max(SIMPLEX_ATOL, 2 * eps(dtype))``: 1e-3 for float32/float64 (and for
  integer or boolean one-hot rows), ``2 * 2**-10 ~ 2.0e-3`` for float16 and
  ``2 * 2**-7 ~ 1.6e-2`` for bfloat16.

  Why ``2 eps`` and no factor of ``C``: storing a probability vector in a
  dtype with unit roundoff ``u = eps / 2`` changes each entry by a relative
  ``|delta_i| <= u``, so the row sum moves by ``sum_i p_i delta_i``, at most
  ``u`` whatever ``C`` (the relative errors are weighted by the ``p_i``, which
  sum to one). A softmax computed in that dtype adds the rounding of its
  normaliser and of the division, each at most ``u`` relative: ``3u = 1.5 eps``
  in all, which ``2 eps`` covers. (Only a normaliser accumulated sequentially
  *in* the low dtype could reach ``(C - 1) u``; JAX, numpy and PyTorch
  accumulate half-precision reductions in float32.) Measured: bfloat16 and
  float16 softmax rows of 2 to 10,000 classes sum to one within ``0.7 eps``.
  For float32 ``2 eps = 2.4e-7`` is far below jaxcal's earlier 1e-3, which is
  kept as the floor: it also accepts float16 softmax outputs stored as float32
  (measured within 8.4e-4), and still rejects every input that is not a
  probability matrix (logits, unnormalised scores, rows summing to 0.999).

  Rows accepted within the tolerance are used as given, not renormalised
  (as every metric reads its input): a value moves by up to the rows'
  deficit, e.g. UC of the top-``C`` utility (``u = v = 1`` on the simplex)
  reads up to the mean of ``|1 - sum_j p_j|``. Divide the rows by their
  sums first where that matters.

  Args:
    dtype: the dtype the probabilities arrive in.

  Returns:
    The absolute tolerance as a Python float.

  Example:
    >>> import jax.numpy as jnp
    >>> simplex_atol(jnp.float32), round(simplex_atol(jnp.bfloat16), 4)
    (0.001, 0.0156)
  """
  dt = jnp.dtype(dtype)
  if not jnp.issubdtype(dt, jnp.floating):
    return SIMPLEX_ATOL
  return max(SIMPLEX_ATOL, 2.0 * float(jnp.finfo(dt).eps))


def compute_dtype(dtype: Any) -> jnp.dtype:
  """The dtype a computation on ``dtype`` inputs runs in: at least float32.

  float16 and bfloat16 are upcast to float32, float64 stays float64 (only
  under x64), integers and booleans become JAX's default float.
  """
  dt = jnp.dtype(dtype)
  if jnp.issubdtype(dt, jnp.floating):  # (no promote_types: it raises under strict promotion)
    return jax.dtypes.canonicalize_dtype(dt if dt.itemsize >= 4 else jnp.float32)
  return jax.dtypes.canonicalize_dtype(jnp.float64)


def is_concrete(*xs: Any) -> bool:
  """True when none of ``xs`` is a JAX tracer (so values can be inspected)."""
  return not any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(xs))


# --------------------------------------------------------------------------
# Checked mode (jax.experimental.checkify)
# --------------------------------------------------------------------------

_STATE: dict[str, Any] = {}
_STATE_LOCK = threading.Lock()
_LOCAL = threading.local()


def _checking_state():
  """The trace-context state that says "emit checkify checks", created on first use.

  It is part of JAX's trace context, so a function traced in checked mode and
  the same function traced unchecked are cached separately (a plain
  thread-local flag would let ``jax.jit`` reuse an unchecked trace). Uses
  JAX's (private) ``bool_state``; without it, falls back to a thread-local.
  Created under a lock: two threads' first checked calls both defining it made
  the second's "already defined" error select the thread-local fallback for
  the whole process (a jit cached unchecked then ran unchecked in checked mode).
  """
  if "state" in _STATE:
    return _STATE["state"]
  with _STATE_LOCK:
    if "state" in _STATE:
      return _STATE["state"]
    try:
      from jax._src import config as jax_config

      _STATE["state"] = jax_config.bool_state(
        "jaxcal_checked_mode",
        False,
        help="Set by jaxcal.checked while it traces: jaxcal emits checkify checks.",
        include_in_trace_context=True,
      )
    except Exception:  # pragma: no cover - other JAX versions
      _STATE["state"] = None
  return _STATE["state"]


def checking() -> bool:
  """True while :func:`checked` traces a function (value checks become checkify checks)."""
  state = _STATE.get("state")
  if state is not None:
    return bool(state.value)
  return bool(getattr(_LOCAL, "on", False))


@contextlib.contextmanager
def _checking_on():
  state = _checking_state()
  if state is not None:
    with state(True):
      yield
  else:  # pragma: no cover - other JAX versions
    prev = getattr(_LOCAL, "on", False)
    _LOCAL.on = True
    try:
      yield
    finally:
      _LOCAL.on = prev


def _first_outside(a: np.ndarray, info: np.iinfo) -> int | None:
  """The flat index of ``a``'s first entry outside ``info``'s range, or ``None`` (one host pass).

  The one range test of the host integer checks: :func:`_host_wide_ints`
  (``checked``'s arguments, against int32) and :func:`exact_on_device` (the
  32-bit type JAX would store ``a`` in).
  """
  if not a.size or (a.min() >= info.min and a.max() <= info.max):
    return None
  return int(np.argmax((a < info.min) | (a > info.max)))


def _host_wide_ints(tree: Any) -> None:
  """Rejects numpy integer arrays that JAX would wrap into int32.

  With ``jax_enable_x64`` JAX keeps 64-bit integers as they are and the
  compiled checks compare them in their own type (a label ``2^32 + 1`` is
  reported as out of range), so nothing is refused here.
  """
  if jax.config.jax_enable_x64:
    return
  for i, leaf in enumerate(jax.tree_util.tree_leaves(tree)):
    if isinstance(leaf, np.ndarray | np.integer) and np.issubdtype(leaf.dtype, np.integer):
      if leaf.dtype.itemsize > 4 or leaf.dtype == np.uint32:
        a = np.asarray(leaf)
        if _first_outside(a, _INT32) is not None:
          raise ValueError(
            f"argument leaf {i} is a {a.dtype} array with values beyond the int32 range "
            f"(found [{a.min()}, {a.max()}]); JAX would wrap them. Check or convert it first."
          )


def checked(fn: Callable) -> Callable:
  """Runs ``fn`` with jaxcal's value checks compiled in; bad input raises ``ValueError``.

  Wrap the outermost function, after ``jax.jit`` / ``jax.vmap`` (as with
  ``chex.chexify``): every jaxcal entry point traced inside it adds its value
  checks (finite, simplex, label range, class weights, empty mask) to the
  compiled program through ``jax.experimental.checkify``, and the call raises
  the first failed check as a ``ValueError`` with the same message an eager
  call gives (less its note, after an ``inf``, on float64 values beyond
  float32's range). Without ``checked``, a jaxcal metric traced under
  ``jit`` returns NaN for non-finite values, rows off the simplex, labels out of range, bad
  weights or an empty mask (its validity flag is folded into the result);
  eager calls always raise.

  Args:
    fn: any function of arrays, e.g. ``jax.jit(my_eval_step)`` or a jaxcal metric (not
      ``jaxcal.evaluate``, which runs eagerly: it cannot be traced).

  Returns:
    A function with ``fn``'s signature and result.

  Raises:
    ValueError: (from the wrapped function) the first failed check; also
      when called on traced values (wrap the outermost function instead).
    TypeError: ``fn`` not callable.

  Example:
    >>> import jax, jax.numpy as jnp
    >>> from jaxcal import metrics
    >>> f = checked(jax.jit(lambda p, y: metrics.conf_ece(p, y)))
    >>> p = jnp.array([[0.9, 0.1], [0.2, 0.7]])  # the second row sums to 0.9
    >>> f(p, jnp.array([0, 1]))
    Traceback (most recent call last):
    ...
    ValueError: rows of probs must sum to 1 (tolerance 0.001); 1 row(s) do not, ...

  Reference: the ``checkify`` transformation, JAX documentation
  ("Debugging: checkify"); ``chex.chexify`` (chex, DeepMind).
  """
  if not callable(fn):  # checked(3) wrapped, and failed only when called
    raise TypeError(f"checked(fn) needs a function, got {type(fn).__name__}")
  checkified = checkify.checkify(fn, errors=checkify.user_checks)

  @functools.wraps(fn)
  def wrapper(*args: Any, **kwargs: Any) -> Any:
    if not is_concrete(args, kwargs):
      if checking():  # nested inside another checked(): its checkify collects ours
        return fn(*args, **kwargs)
      raise ValueError(
        "jaxcal.checked(f) was called on traced values (inside jax.jit / vmap / grad): "
        "wrap the outermost function instead, e.g. jaxcal.checked(jax.jit(f))"
      )
    _host_wide_ints((args, kwargs))
    with _checking_on():
      err, out = checkified(*args, **kwargs)
    msg = err.get()
    if msg is not None:
      raise ValueError(msg.replace(" (`check` failed)", "")) from None
    return out

  return wrapper


def trace_check(ok: jax.Array, message: str, **values: jax.Array) -> None:
  """In checked mode, adds ``checkify.check(ok, message, **values)``; else nothing."""
  if checking():
    checkify.check(ok, message, **values)


def trace_bin_count(m: jax.Array, max_bins: int) -> None:
  """In checked mode, the eager messages of a traced bin count outside ``[1, max_bins]``."""
  trace_check(jnp.all(m >= 1), "num_bins must be >= 1, got {m}", m=m)
  trace_check(jnp.all(m <= max_bins), f"num_bins = {{m}} exceeds max_bins = {max_bins}", m=m)


def fold(out: Any, ok: jax.Array | None, ints: int | None = None) -> Any:
  """``out`` with every floating leaf replaced by NaN where ``ok`` is False (its derivative too).

  ``ok`` is ``None`` after an eager check (nothing to fold) or a traced bool
  scalar (a ``(batch,)`` array under ``vmap``, handled by ``vmap``). With
  ``ints`` (e.g. ``-1`` for counts, which cannot be NaN) integer leaves
  become that value too; otherwise they are kept.
  """
  if ok is None:
    return out

  def one(v):
    v = jnp.asarray(v)
    if not jnp.issubdtype(v.dtype, jnp.inexact):
      if ints is None or not jnp.issubdtype(v.dtype, jnp.integer):
        return v
      return jnp.where(ok, v, jnp.asarray(ints, v.dtype))
    # a product, not a select: under jax.grad (where the eager check cannot run) the
    # derivative is NaN too; a select sent a zero cotangent, an all-zero gradient for
    # invalid input (labels out of range, rows off the simplex) with no error. The factor,
    # 1 or NaN, is sqrt(ok - 1) + 1: no NaN constant, which an eager call's ops made on
    # valid input too, tripping a user's jax_debug_nans
    return v * jax.lax.stop_gradient(jnp.sqrt(jnp.asarray(ok, v.dtype) - 1) + 1)

  return jax.tree_util.tree_map(one, out)


# --------------------------------------------------------------------------
# The fused value checks
# --------------------------------------------------------------------------


class _Arr(NamedTuple):
  """How to check one floating array (static)."""

  kind: str  # "probs" (rows on the simplex) | "unit" (in [lo, hi]) | "finite" | "notnan"
  name: str
  ndim: int
  tol: float  # of the bounds and the row sums
  lo: float = 0.0  # bounds of "unit"
  hi: float = 1.0
  # what "probs" messages suggest (a recalibrator fitted on probabilities has no from_logits)
  fix: str = "Pass logits with from_logits=True"


def _fold_rows(x: jax.Array, a: _Arr) -> jax.Array:
  """``x`` with NaN in its rows that fail ``a``'s check (a per-row :func:`fold`).

  For row-wise maps (a recalibrator's apply) under a transformation: a bad
  row must not turn the good rows into NaN. Probabilities: a row is good
  when it sums to one within ``a.tol`` and every entry lies in
  ``[-a.tol, 1 + a.tol]``; otherwise (``"finite"``) when every entry is
  finite. NaN fails every test.
  """
  acc = compute_dtype(x.dtype)
  if a.kind == "probs":
    s = jnp.sum(x, axis=1, dtype=acc)
    good = _sums_to_one(s, a.tol) & jnp.all((x >= -a.tol) & (x <= 1 + a.tol), axis=1)
  else:
    good = jnp.all(jnp.isfinite(x), axis=1)
  return jnp.where(good[:, None], x, jnp.asarray(jnp.nan, x.dtype))


def _fold_matrix(x: jax.Array, ok: jax.Array | None, a: _Arr, rows: bool) -> jax.Array:
  """A checked ``(n, k)`` matrix, NaN-folded when traced and bad: whole, or with ``rows`` by row."""
  if ok is not None and rows:
    return _fold_rows(x, a)
  return fold(x, ok)


class _Spec(NamedTuple):
  """Static description of one validation call (hashable: a jit static argument)."""

  xs: tuple[_Arr, ...] = ()
  y_kind: str | None = None  # "int" | "float" | None: labels to check
  y_name: str = "labels"
  num_classes: int | None = None  # labels lie in [0, num_classes)
  has_where: bool = False
  w_name: str | None = None  # weights: finite, non-negative, positive sum
  empty_where: bool = False  # a where that selects no sample is allowed
  padding: bool = False  # where marks padding: rows are numbered among the selected ones


class _Problem(NamedTuple):
  """One kind of bad input, as device scalars."""

  count: jax.Array  # int32: bad rows (or entries)
  first: jax.Array  # int32: the first bad row
  col: jax.Array  # int32: a bad column in that row (0 for 1-d inputs)
  value: jax.Array  # the bad value (or the row sum)


def _rows(x: jax.Array) -> tuple[int, ...]:
  return tuple(range(1, x.ndim))


def _ignore(good: jax.Array, where: jax.Array | None) -> jax.Array:
  """``good`` with masked-out samples counted as good."""
  return good if where is None else good | ~where


def _select(bad: jax.Array, where: jax.Array | None) -> jax.Array:
  """``bad`` restricted to the selected samples."""
  return bad if where is None else bad & where


def _masked(x: jax.Array, where: jax.Array | None, fill: float) -> jax.Array:
  if where is None:
    return x
  return jnp.where(where.reshape(where.shape + (1,) * (x.ndim - 1)), x, jnp.asarray(fill, x.dtype))


def _entry_problem(entry_bad: jax.Array, x: jax.Array, where) -> _Problem:
  """Bad rows of ``x`` (any bad entry); the example is the first bad entry of the first."""
  rows = _select(jnp.any(entry_bad, axis=_rows(x)) if x.ndim > 1 else entry_bad, where)
  count = jnp.sum(rows, dtype=jnp.int32)
  first = jnp.argmax(rows).astype(jnp.int32)  # 0 when nothing is bad
  if x.ndim == 1:
    return _Problem(count, first, jnp.zeros((), jnp.int32), x[first])
  col = jnp.argmax(entry_bad[first].reshape(-1)).astype(jnp.int32)
  return _Problem(count, first, col, x[first].reshape(-1)[col])


def _row_problem(bad: jax.Array, values: jax.Array) -> _Problem:
  count = jnp.sum(bad, dtype=jnp.int32)
  first = jnp.argmax(bad).astype(jnp.int32)
  return _Problem(count, first, jnp.zeros((), jnp.int32), values[first])


@functools.lru_cache(maxsize=64)
def _sum_bounds(tol: float, dtype: Any) -> tuple[np.generic, np.generic]:
  """The ``dtype`` interval ``[lo, hi]`` of row sums ``s`` with ``|s - 1| <= tol``.

  ``(s >= lo) & (s <= hi)`` is exactly ``abs(s - 1) <= tol`` computed in
  ``dtype`` (``s - 1`` is exact for ``s`` in ``[1/2, 2]``, Sterbenz, and
  ``tol < 1/2``): ``lo`` is the least ``dtype`` value at or above
  ``1 - tol`` and ``hi`` the greatest at or below ``1 + tol`` (``tol``
  rounded to ``dtype`` as the subtraction form rounds it). XLA:CPU fuses
  ``s - 1`` into the row-sum reduction, which slows it; two compares stay
  out of it (the check alone, jitted at ``n = 10^5``, ``C = 100``: 0.73
  against 0.82 ms).

  Returns:
    ``(lo, hi)`` as ``dtype`` scalars; NaN fails both compares.
  """
  dt = np.dtype(dtype)
  t = fractions.Fraction(float(dt.type(tol)))

  def bound(v: fractions.Fraction, up: bool) -> np.generic:
    c = dt.type(float(v))  # a neighbour of v on dtype's grid
    if (fractions.Fraction(float(c)) < v) if up else (fractions.Fraction(float(c)) > v):
      c = np.nextafter(c, dt.type(np.inf if up else -np.inf))
    return c

  return bound(1 - t, True), bound(1 + t, False)


def _sums_to_one(s: jax.Array, tol: float) -> jax.Array:
  """``|s - 1| <= tol`` elementwise, as two compares (:func:`_sum_bounds`); False for NaN."""
  lo, hi = _sum_bounds(float(tol), s.dtype)
  return (s >= lo) & (s <= hi)


def _label_bad(spec: _Spec, y: jax.Array) -> jax.Array:
  bad = np.zeros(y.shape, bool)  # numpy: no program of its own under compile-time eval
  if spec.num_classes is not None:
    bad = (y < 0) | (y >= spec.num_classes)
  if spec.y_kind == "float":
    bad = bad | ~jnp.isfinite(y) | (y != jnp.round(y))
  return bad


def _row_sums(x: jax.Array) -> jax.Array:
  """Row sums of an ``(n, C)`` probability matrix, in the order every check adds them.

  Narrow rows as :func:`~jaxcal._src.numerics.row_sum_min`'s pairwise tree,
  wider ones by one library reduction. The fast check and the search for
  the offending row must add in one order: a row summing to ``1 + 9.9998e-4``
  in float64 came out above the tolerance as the tree adds and below it as
  ``jnp.sum`` adds one row, so an eager call found no problem to report
  (an ``AssertionError``) and :func:`checked` returned NaN without raising.
  """
  acc = compute_dtype(x.dtype)
  if x.shape[-1] <= NARROW_ROW:
    return row_sum_min(x, acc)[0]
  return jnp.sum(x, axis=-1, dtype=acc)


def _array_ok(a: _Arr, x: jax.Array, where, complete: bool = True) -> jax.Array:
  """Validity of one array, cheapest sufficient conditions first.

  Probabilities: rows summing to one within ``tol`` and no entry below
  ``-tol`` imply every entry lies in ``[-tol, 1 + C·tol]``, and with no
  negative entry in ``[0, 1 + tol]``; so a valid input costs the row sums
  and the minimum, and the exact upper bound (``lax.cond``) runs only when
  an entry is negative. Rows of at most :data:`~jaxcal._src.numerics.NARROW_ROW`
  entries are summed and minimised in one pass
  (:func:`~jaxcal._src.numerics.row_sum_min`) and judged by one code per row;
  wider rows by the row sums and one global minimum, faster there than row
  minima (``n = 10^5``, ``C = 100``: 1.4 against 1.6 ms). With
  ``complete=False`` (the NaN folded into a result under ``jit``) the row
  sums and the minimum are checked, without the branch: non-finite values,
  rows off the simplex and entries below ``-tol`` (so every entry is at
  most ``1 + C·tol``); an entry in ``(1 + tol, 1 + C·tol]`` whose row still
  sums to one within ``tol`` is caught only eagerly and in checked mode.
  """
  acc = compute_dtype(x.dtype)
  if a.kind == "probs":  # (n, C): check_predictions and check_probs take matrices only
    if x.shape[-1] <= NARROW_ROW:
      s, lo = row_sum_min(x, acc)  # s is _row_sums(x)
      # per row: 2 off the simplex, below -tol or not finite (NaN fails both
      # tests), 1 a negative entry within tol, 0 fine; one reduction for all
      good = _sums_to_one(s, a.tol) & (lo >= -a.tol)
      code = jnp.where(good, (lo < 0).astype(jnp.int8), jnp.int8(2))
      if where is not None:
        code = jnp.where(where, code, jnp.int8(0))
      worst = jnp.max(code)
      ok, negative = worst < 2, worst == 1
    else:
      s = _row_sums(x)
      lo = jnp.min(_masked(x, where, 1)).astype(acc)
      ok = jnp.all(_ignore(_sums_to_one(s, a.tol), where)) & (lo >= -a.tol)  # False for NaN/inf
      negative = lo < 0
    if not complete:
      return ok
    # (each branch's output derived from the data: a constant would be
    # device-invariant inside shard_map, and the cond refuses unlike branches)
    return ok & jax.lax.cond(
      negative,
      lambda neg: jnp.max(_masked(x, where, 1)).astype(acc) <= 1 + a.tol,
      lambda neg: ~neg,
      negative,
    )
  if a.kind == "unit":
    # Elementwise compares (False for NaN; +-inf lie outside) and one boolean
    # all, not a min and a max: across devices XLA:CPU's min/max all-reduce
    # drops NaN, so a NaN in a sharded array would pass (a boolean all keeps it).
    # unselected entries read as a finite value inside the bounds (-inf would fail isfinite)
    fill = a.lo if math.isfinite(a.lo) else a.hi if math.isfinite(a.hi) else 0.0
    xm = _masked(x, where, fill).astype(acc)
    inside = (xm >= a.lo - a.tol) & (xm <= a.hi + a.tol)
    if not (math.isfinite(a.lo) and math.isfinite(a.hi)):  # an open end lets inf through
      inside = inside & jnp.isfinite(xm)  # (dcg(gamma=inf) passed bounds (0, inf))
    return jnp.all(inside)
  if not jnp.issubdtype(x.dtype, jnp.floating):
    return jnp.bool_(True)
  # A non-finite (NaN) entry makes its row sum non-finite (NaN); a finite row
  # can only overflow (inf - inf), and then the exact test (rarely run) clears it.
  good = jnp.isfinite if a.kind == "finite" else (lambda v: ~jnp.isnan(v))
  s = jnp.sum(x, axis=_rows(x), dtype=acc) if x.ndim > 1 else x
  fine = jnp.all(_ignore(good(s), where))
  return jax.lax.cond(  # (the true branch returns ``fine``, not a constant: see above)
    fine,
    lambda f: f,
    lambda f: jnp.all(_ignore(jnp.all(good(x), axis=_rows(x)), where)),
    fine,
  )


def _ok(spec: _Spec, xs, y, where, w, complete: bool = True) -> tuple[jax.Array, jax.Array]:
  """``(all good?, number of selected samples)`` in one fused program (see :func:`_array_ok`)."""
  ok = np.bool_(True)  # numpy constants: no tiny programs
  for a, x in zip(spec.xs, xs):
    ok = ok & _array_ok(a, x, where, complete)
  if spec.y_kind is not None:
    ok = ok & jnp.all(_ignore(~_label_bad(spec, y), where))
  if spec.w_name is not None:
    ok = ok & jnp.all(jnp.isfinite(w)) & jnp.all(w >= 0) & (jnp.sum(w) > 0)
  if where is None:
    return ok, np.int32(0)  # unused: the count is the static n
  count = jnp.sum(where, dtype=jnp.int32)
  return (ok if spec.empty_where else ok & (count > 0)), count


def _checks(spec: _Spec) -> list[tuple[str, Callable]]:
  """(message template, problem function) for every kind of bad input of ``spec``.

  Templates are ``str.format`` strings over ``count``, ``first``, ``col`` and
  ``value`` (the fields of :class:`_Problem`); the same template serves the
  eager error and the checkify check. Problem functions take
  ``(xs, y, where, w)``.
  """
  out: list[tuple[str, Callable]] = []
  for i, a in enumerate(spec.xs):
    n, row = a.name, ("row" if a.ndim > 1 else "entry")
    at = "row {first}, column {col}" if a.ndim > 1 else f"{n}[{{first}}]"

    if a.kind == "notnan":

      def nan(xs, y, where, w, i=i):
        return _entry_problem(jnp.isnan(xs[i]), xs[i], where)

      out.append((f"{n} contains NaN in {{count}} {row}(s); the first is {at}", nan))
      continue

    def nonfinite(xs, y, where, w, i=i):
      return _entry_problem(~jnp.isfinite(xs[i]), xs[i], where)

    # a metric's logits: -inf may mask a class out (a recalibrator's inputs get no hint:
    # from probabilities, temperature scaling gives such a class mass again)
    nonfinite.masked_hint = a.kind == "finite" and a.ndim > 1 and n == "logits"
    out.append(
      (
        f"{n} contains non-finite values (NaN or inf) in {{count}} {row}(s); "
        f"the first is {at}: {{value}}",
        nonfinite,
      )
    )
    if a.kind in ("probs", "unit"):

      def outside(xs, y, where, w, i=i, lo=a.lo - a.tol, hi=a.hi + a.tol):
        return _entry_problem((xs[i] < lo) | (xs[i] > hi), xs[i], where)

      hint = f" {a.fix}." if a.kind == "probs" else ""
      out.append(
        (
          f"{n} must lie in [{a.lo:g}, {a.hi:g}] (tolerance {a.tol:g}); {{count}} {row}(s) "
          f"hold values outside, the first is {at}: {{value:.6g}}.{hint}",
          outside,
        )
      )
    if a.kind == "probs":

      def row_sums(xs, y, where, w, i=i, tol=a.tol):
        s = _row_sums(xs[i])  # as _array_ok sums them: the same verdict at the bound
        return _row_problem(_select(~_sums_to_one(s, tol), where) & jnp.isfinite(s), s)

      out.append(
        (
          f"rows of {n} must sum to 1 (tolerance {a.tol:g}); {{count}} row(s) do not, the "
          f"first is row {{first}}, which sums to {{value:.6g}}. {a.fix} or normalise the rows."
          + (
            " (If these are bfloat16 probabilities cast up, off by up to 4e-3 per row, pass "
            "them as bfloat16: its tolerance is 1.6e-2.)"
            if a.tol < 1.5e-3  # float32 and float64 (float16's is 1.95e-3)
            else ""
          ),
          row_sums,
        )
      )
  if spec.y_kind is not None:
    yn = spec.y_name
    if spec.y_kind == "float":

      def nonint(xs, y, where, w):
        return _row_problem(_select(~jnp.isfinite(y) | (y != jnp.round(y)), where), y)

      out.append(
        (
          f"{yn} must be integers; {{count}} entries are not, the first is "
          f"{yn}[{{first}}] = {{value}}",
          nonint,
        )
      )
    if spec.num_classes is not None:
      c = spec.num_classes

      def label_range(xs, y, where, w):
        return _row_problem(_select((y < 0) | (y >= c), where), y)

      label_range.sentinel = True  # its value may be _NOT_A_LABEL: named in words

      out.append(
        (
          f"{yn} must lie in [0, {c}); {{count}} entries do not, the first is "
          f"{yn}[{{first}}] = {{value}}",
          label_range,
        )
      )
  if spec.has_where and not spec.empty_where:

    def empty(xs, y, where, w):
      return _Problem(
        (~jnp.any(where)).astype(jnp.int32),
        jnp.zeros((), jnp.int32),
        jnp.zeros((), jnp.int32),
        jnp.zeros((), jnp.int32),
      )

    out.append(("where selects no samples: at least one entry must be True", empty))
  if spec.w_name is not None:
    wn = spec.w_name

    def w_nonfinite(xs, y, where, w):
      return _row_problem(~jnp.isfinite(w), w)

    def w_negative(xs, y, where, w):
      return _row_problem(w < 0, w)

    def w_zero(xs, y, where, w):
      total = jnp.sum(w)
      return _Problem(
        (~(total > 0)).astype(jnp.int32), jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32), total
      )

    out += [
      (
        f"{wn} contains non-finite values in {{count}} entries; the first is "
        f"{wn}[{{first}}] = {{value}}",
        w_nonfinite,
      ),
      (
        f"{wn} must be non-negative; {{count}} entries are negative, the first is "
        f"{wn}[{{first}}] = {{value:.6g}}",
        w_negative,
      ),
      (
        f"{wn} sums to {{value:.6g}}: at least one weight must be positive "
        "(all-zero weights would score every predictor 0)",
        w_zero,
      ),
    ]
  return out


def _ok_pair(spec, xs, y, where, w) -> jax.Array:
  """:func:`_ok`'s ``(ok, count)`` as one int32 pair ``[ok, count]`` (one read back)."""
  ok, count = _ok(spec, xs, y, where, w)
  return jnp.stack([jnp.asarray(ok, jnp.int32), jnp.asarray(count, jnp.int32)])


@functools.partial(jax.jit, static_argnums=0)
def _ok_jit(spec, xs, y, where, w):
  return _ok_pair(spec, xs, y, where, w)


def _problems(spec, xs, y, where, w) -> list[_Problem]:
  out = [fn(xs, y, where, w) for _, fn in _checks(spec)]
  if spec.padding and where is not None:
    # rows assembled from every process's shard, each padded at its end: the
    # union's row number of padded row i is the number of real rows before it
    before = lambda i: jnp.sum(where & (jnp.arange(where.shape[0]) < i), dtype=jnp.int32)
    out = [pr._replace(first=before(pr.first)) for pr in out]
  return out


_problems_jit = jax.jit(_problems, static_argnums=0)


@functools.lru_cache(maxsize=1024)
def _anonymous(spec: _Spec) -> _Spec:
  """``spec`` without argument names: the compiled checks do not depend on them,
  so one program serves ``labels`` and ``y``, ``probs`` and ``inputs``, ..."""
  return spec._replace(
    xs=tuple(a._replace(name="") for a in spec.xs),
    y_name="",
    w_name=None if spec.w_name is None else "",
  )


def _validate(spec: _Spec, xs=(), y=None, where=None, w=None) -> tuple[jax.Array | None, Any]:
  """Runs the value checks: raises on concrete inputs, returns the traced flag otherwise.

  Returns:
    ``(ok, count)``: on concrete inputs ``(None, int)`` (bad input raised);
    on traced inputs the traced flag (and in checked mode one checkify check
    per kind of bad input). ``count`` is the number of selected samples: the
    static ``n`` without a mask, else an int (eager) or a traced int32.
  """
  xs = tuple(xs)
  n = (xs[0] if xs else y).shape[0] if (xs or y is not None) else 0
  if is_concrete(xs, y, where, w):
    # Concrete inputs (also ones closed over inside a user's jit) are checked
    # now: compile-time evaluation keeps the check from being staged out.
    with jax.ensure_compile_time_eval():
      flags = _ok_jit(_anonymous(spec), xs, y, where, w)
    count = _read_checks(flags, lambda: (spec, xs, y, where, w))
    return None, (n if where is None else count)
  # Under a transformation the flag is folded into the result (NaN): the
  # branch-free test (row sums and the minimum); checked mode adds every check.
  ok, count = _ok(spec, xs, y, where, w, complete=checking())
  if checking():
    for (template, _), pr in zip(_checks(spec), _problems(spec, xs, y, where, w)):
      checkify.check(pr.count == 0, template, **pr._asdict())
  return ok, (n if where is None else count)


def _read_checks(flags, inputs: Callable[[], tuple]) -> int:
  """Reads :func:`_ok_pair`'s ``[ok, count]`` back: the count of selected samples.

  On a failed check, raises the first problem of ``inputs()`` (``(spec, xs,
  y, where, w)``, built only then) as a ``ValueError``.
  """
  ok, count = np.asarray(flags).tolist()
  if not ok:
    _raise_first_problem(*inputs())
  return int(count)


def _raise_first_problem(spec: _Spec, xs, y, where, w) -> None:
  """Finds what is wrong with inputs whose check failed and raises its ``ValueError``.

  Compiled ahead of time: never staged into a user's trace that closes over
  the inputs, and not lowered under compile-time evaluation (which made the
  ``(n,)`` iota of its ``argmax`` a constant read to the host and written
  into the program: 32 MB of HLO at ``n = 4 10^6``).
  """
  args = (xs, y, where, w)
  if jax.config.jax_disable_jit:  # (debugging) there is no ahead-of-time path: run it as it is
    problems = jax.device_get(_problems(_anonymous(spec), *args))
  else:
    problems = jax.device_get(_problems_jit.lower(_anonymous(spec), *args).compile()(*args))
  for (template, fn), pr in zip(_checks(spec), problems):
    if int(pr.count):
      fields = {k: v.item() for k, v in pr._asdict().items()}
      if getattr(fn, "sentinel", False) and fields["value"] == _NOT_A_LABEL:
        fields["value"] = _NOT_A_LABEL_TEXT
      msg = template.format(**fields)
      value = fields["value"]
      if getattr(fn, "masked_hint", False) and value == -math.inf:
        msg += (
          " (-inf as the logit of a masked-out class: pass probabilities instead, e.g."
          " jax.nn.softmax(logits), in which that class is 0)"
        )
      elif isinstance(value, float) and math.isinf(value) and not jax.config.jax_enable_x64:
        msg += (  # (eager calls only: checked mode's messages are fixed templates)
          " (if the input was float64: a value beyond float32's range, about 3.4e38, becomes"
          " inf too, as JAX computes in float32 without jax_enable_x64)"
        )
      raise ValueError(msg)
  raise AssertionError(
    f"a value check failed but no problem was found ({spec})"
  )  # pragma: no cover


class _Pending(NamedTuple):
  """Value checks deferred to the first computation on the inputs (see :func:`run_checked`).

  ``locate``: ``(spec, host matrix)`` to find the first problem in (on a
  copy) when the checks fail and ``xs`` are blocks of that matrix, whose
  row numbers would be the block's; ``None``: ``(spec, xs)`` themselves.
  """

  spec: _Spec
  xs: tuple
  y: Any
  where: Any
  w: Any
  locate: Any = None


#: Below this many bytes of scores an eager call is one program: the caller
#: folds its stages into the function it passes to :func:`run_checked` (see
#: :func:`small`) and the host arrays go to that program as they are. At
#: ``n = 10^4``, ``C = 10``: ``conf_ece`` 0.54 against 0.82 ms as separate
#: programs; at ``n = 10^5``, ``C = 100`` the top label's own program fuses
#: better (7.9 against 8.4 ms) and a host matrix passed whole to a program
#: is copied slowly (``classwise_ece`` 68 against 48 ms).
SMALL_BYTES = 1 << 20


def _nbytes(xs: tuple) -> int:
  return sum(a.nbytes for a in xs)


def small(d: Checked) -> bool:
  """Whether ``d`` is an eager call's data (checks pending) under :data:`SMALL_BYTES` of scores.

  The caller should then compute in one program what it would otherwise
  stage into several (e.g. the top label and the binning).
  """
  return d.pending is not None and _nbytes(d.pending.xs) < SMALL_BYTES


@functools.partial(jax.jit, static_argnums=(0, 1, 2, 3))
def _with_checks_once(fn, spec, tree, index, *leaves):
  args, xs, y, where, w = jax.tree.unflatten(tree, [leaves[i] for i in index])
  return fn(*args), _ok_pair(spec, xs, y, where, w)


def _with_checks(fn, spec, args, xs, y, where, w):
  """``fn(*args)`` and the value checks' ``[ok, count]`` (:func:`_ok_pair`) as one program.

  An array that is both an argument of ``fn`` and a checked input (the same
  object: a host matrix handed to the program as it is, its labels) goes to
  the program once: a host array is copied in by every argument that holds
  it (``brier`` at ``n = 10^4``, ``C = 10``: one copy each of the 400 KB
  matrix and its 40 KB of labels saved, 0.23 against 0.26-0.28 ms).
  """
  leaves, tree = jax.tree.flatten((args, xs, y, where, w))
  unique: list[Any] = []
  slot: dict[int, int] = {}  # id of a leaf -> its place in unique
  for leaf in leaves:
    if id(leaf) not in slot:
      slot[id(leaf)] = len(unique)
      unique.append(leaf)
  index = tuple(slot[id(leaf)] for leaf in leaves)
  return _with_checks_once(fn, spec, tree, index, *unique)


def run_checked(d: Checked, fn: Callable, *args: Any) -> tuple[Any, Any]:
  """``fn(*args)`` and the number of selected samples, ``d``'s pending value checks included.

  For a :class:`Checked` from ``check_predictions(..., defer=True)`` on an
  eager call, ``fn`` and the value checks run as one program (one dispatch;
  the checks' reductions fuse with ``fn``'s: ``brier`` at ``n = 10^5``,
  ``C = 100`` 4.2 against 4.6 ms as two programs) and the checks' two
  scalars are read with one wait, which is also the wait for ``fn``'s
  result: nothing returns while a program still reads the caller's host
  buffer (:attr:`Checked.borrowed`, or a small host matrix handed to the
  program as it is). If the input was bad the result is dropped and the
  usual ``ValueError`` raised (``fn`` must be safe to run on bad values: it
  only computes). Otherwise it is ``fn(*args)``.

  Args:
    d: the validated (or pending) data set.
    fn: a jitted function of arrays (hashable: the joint program is cached on it).
    *args: ``fn``'s arguments.

  Returns:
    ``(fn(*args), count)``, ``count`` as in :attr:`Checked.count`.
  """
  pend, count = d.pending, d.count
  if pend is None:
    out = fn(*args)
    if d.borrowed:  # the program reads the caller's buffer: done before we return
      jax.block_until_ready(out)
    return out, count

  def inputs():
    if pend.locate is None:
      return pend.spec, pend.xs, pend.y, pend.where, pend.w
    spec, host = pend.locate  # blocks: the rows are numbered on a copy of the whole matrix
    return spec, (_device(host),), pend.y, pend.where, pend.w

  out, flags = _with_checks(fn, _anonymous(pend.spec), args, pend.xs, pend.y, pend.where, pend.w)
  selected = _read_checks(flags, inputs)  # waits for the one program, on either outcome
  if pend.where is not None:
    count = selected
  return out, count


# --------------------------------------------------------------------------
# Trace-time checks and host conversion
# --------------------------------------------------------------------------


def real_dtype(dt: Any) -> bool:
  """Whether ``dt`` holds real numbers: an integer or floating type, not timedelta64.

  numpy counts ``timedelta64`` as a signed integer type, so an integer test
  alone took timedelta labels (and scores) as numbers.

  Example:
    >>> real_dtype(np.int64), real_dtype(jnp.bfloat16), real_dtype(np.dtype("m8[s]"))
    (True, True, False)
  """
  numeric = jnp.issubdtype(dt, jnp.integer) or jnp.issubdtype(dt, jnp.floating)
  return bool(numeric) and np.dtype(dt).kind != "m"


def host_array(x: Any, name: str) -> np.ndarray:
  """``np.asarray(x)`` of a caller's host input, in native byte order, never a masked array's mask lost.

  ``np.asarray`` of a numpy masked array returns its data, masked entries
  included: they would be used as if valid. A masked array with a masked
  entry is refused (one without is its data). Big-endian (non-native) arrays
  are converted to native order: JAX refuses them, and a native-order view of
  their bytes read ``'>i8'`` labels ``k * 2**56`` as ``k``. ``np.longdouble``
  arrays become float64 (JAX has no wider float; jaxcal computes in float32,
  or float64 under x64).

  Raises:
    ValueError: ``x`` is a masked array with masked entries, not an array
      (ragged lists and the like), or a ``jax.Array`` spanning processes.

  Example:
    >>> host_array(np.arange(3, dtype=">i8"), "labels").dtype.isnative
    True
  """
  if isinstance(x, np.ma.MaskedArray):
    masked = int(np.ma.count_masked(x))
    if masked:
      raise ValueError(
        f"{name} is a numpy masked array with {masked} masked entr"
        f"{'y' if masked == 1 else 'ies'}: jaxcal does not read masks (their hidden values would "
        "count as data); leave those samples out, select them with where= (a boolean mask of "
        "the samples), or fill the entries with .filled(value)"
      )
    x = x.data
  if isinstance(x, jax.Array) and not isinstance(x, jax.core.Tracer) and not x.is_fully_addressable:
    raise ValueError(  # (JAX's RuntimeError named no argument)
      f"{name} is a jax.Array spanning several processes, and this is read on the host: "
      "gather it on every process first (jax.experimental.multihost_utils.process_allgather("
      "x, tiled=True)), or use a function that takes global arrays (the metrics, scores, "
      "uc_sweep, evaluate, the streaming states)"
    )
  try:
    a = np.asarray(x)
  except (TypeError, ValueError) as e:  # ragged lists and the like
    raise ValueError(f"{name} must be a numeric array, got {type(x).__name__}: {e}") from None
  if not a.dtype.isnative:
    a = a.astype(a.dtype.newbyteorder("="))
  if a.dtype.kind == "f" and a.dtype.itemsize > 8:  # np.longdouble: JAX has no such dtype
    a = a.astype(np.float64)  # (JAX's own TypeError named an internal function)
  return a


def auto_typed(a: jax.Array) -> jax.Array:
  """``a`` on the same devices and layout, its mesh's Explicit axes made Auto.

  jaxcal's programs leave sharding to XLA (Auto axes). An array sharded over
  an Explicit axis (``jax.make_mesh``'s default) types every operation on it,
  and the rows' sorts, scatters and reshapes were refused (``conf_ece`` of
  row-sharded logits: "Resource axis: data ... is not found in mesh: ()").
  Other arrays (and tracers, and arrays inside a caller's ``jax.set_mesh``,
  where :func:`outside_explicit_context` leaves it first) are returned as
  they are.

  Args:
    a: a JAX array.

  Returns:
    ``a``, or its copy on the Auto-typed twin of its mesh.

  Example:
    >>> import jax, jax.numpy as jnp
    >>> auto_typed(jnp.arange(3)).tolist()
    [0, 1, 2]
  """
  if not _explicit_array(a):  # tracers, other arrays and shardings: as they are
    return a
  if not jax.sharding.get_abstract_mesh().empty:  # typed by a caller's set_mesh: kept
    return a
  s = a.sharding
  mesh = s.mesh
  auto = jax.sharding.Mesh(
    mesh.devices, mesh.axis_names, axis_types=(jax.sharding.AxisType.Auto,) * len(mesh.axis_names)
  )
  return jax.device_put(a, jax.sharding.NamedSharding(auto, s.spec))


def _array(x: Any, name: str) -> jax.Array | np.ndarray:
  """A JAX array stays as it is (Explicit mesh axes made Auto, :func:`auto_typed`); anything
  else becomes a numeric numpy array (:func:`host_array`)."""
  if isinstance(x, jax.Array | jax.core.Tracer):
    arr = auto_typed(x)
  else:
    arr = host_array(x, name)
  dt = arr.dtype
  if dt == np.bool_ or real_dtype(dt):
    return arr
  raise ValueError(
    f"{name} must be a real numeric array, got dtype {dt}"
    + (
      " (an object array: jaxcal does not unpickle; a pandas frame of nullable Float32 /"
      " Int64 columns reads as one, pass frame.to_numpy('float32'))"
      if dt == np.object_
      else ""
    )
  )


def require_eager(what: str, why: str, *xs: Any, instead: str = "") -> None:
  """Raises the clear error of an eager-only call made under a transformation.

  Under ``jax.jit`` / ``jax.vmap`` (or ``jaxcal.checked``) the call's arrays
  are tracers, or concrete arrays closed over by the traced function: those
  went on and failed deep inside with JAX's ``ConcretizationTypeError`` or
  ``TracerArrayConversionError``. Both give this message.

  Args:
    what: the call, e.g. ``"fit_patching"``.
    why: why it runs eagerly.
    *xs: its array arguments (pytrees).
    instead: what to use under a transformation, if anything.

  Raises:
    ValueError: ``xs`` hold a tracer, or a transformation is tracing.

  Example:
    >>> require_eager("f", "a host loop", np.zeros(2))  # eager: nothing
  """
  if not is_concrete(*xs) or not _trace_clean():
    raise ValueError(
      f"{what} runs eagerly ({why}): call it outside jax.jit / jax.vmap"
      + (f"; {instead}" if instead else "")
    )


def _trace_clean() -> bool:
  """True when no JAX transformation is tracing (an eager call)."""
  try:
    from jax._src import core as jax_core

    return bool(jax_core.trace_state_clean())
  except Exception:  # pragma: no cover - other JAX versions
    return False


_ALIGN = 64  # XLA:CPU adopts a host buffer with this alignment instead of copying it
_OWN_COPY = 1 << 20  # bytes from which our aligned copy beats device_put's own (unaligned) one
#: Staging buffers kept for reuse (the most recent ones) ...
STAGING_BUFFERS = 2
#: ... and the largest one kept, in bytes (larger inputs get a fresh buffer each time).
STAGING_MAX_BYTES = 256 << 20

_staging_pool: list[np.ndarray] = []
_staging_lock = threading.Lock()
_staging_free_refs: int | None = None  # sys.getrefcount of a pooled buffer nobody holds


def _pool_refs(i: int) -> int:
  return sys.getrefcount(_staging_pool[i])


def _staging(nbytes: int) -> np.ndarray:
  """A ``uint8`` host buffer of at least ``nbytes + _ALIGN`` bytes.

  Writing a fresh buffer costs the kernel's page zeroing on top of the copy
  (4.4 ms instead of 2.4 ms for 40 MB here), so the last
  :data:`STAGING_BUFFERS` buffers of 1 MiB to :data:`STAGING_MAX_BYTES` are
  kept and handed out again (to requests of half their size or more), but only
  while nothing else refers to them: a JAX array adopted from one (and any
  numpy view of it) holds a reference, so a buffer still read by a
  computation or held by a fitted recalibrator is never reused. The free
  reference count is measured on a new buffer (no assumption on the
  interpreter's counting).
  """
  global _staging_free_refs
  need = nbytes + _ALIGN
  if not _OWN_COPY <= need <= STAGING_MAX_BYTES:  # small ones would churn the pool
    return np.empty(need, np.uint8)
  with _staging_lock:
    for i in range(len(_staging_pool)):
      size = _staging_pool[i].nbytes
      if need <= size <= 2 * need and _pool_refs(i) == _staging_free_refs:
        buf = _staging_pool.pop(i)
        _staging_pool.append(buf)  # most recently used last
        return buf
    _staging_pool.append(np.empty(need, np.uint8))
    _staging_free_refs = _pool_refs(len(_staging_pool) - 1)
    del _staging_pool[:-STAGING_BUFFERS]  # forget the oldest (their holders keep them alive)
    return _staging_pool[-1]


def _aligned_copy(a: np.ndarray) -> np.ndarray:
  """A C-contiguous copy of ``a`` whose buffer starts on an ``_ALIGN`` boundary."""
  buf = _staging(a.nbytes)
  off = (-buf.ctypes.data) % _ALIGN
  out = buf[off : off + a.nbytes].view(a.dtype).reshape(a.shape)
  np.copyto(out, a)
  return out


def _device(x: Any) -> jax.Array:
  """A JAX array of ``x`` that shares no memory with the caller's host array.

  Host arrays go to the default device with one ``jax.device_put`` (faster
  than ``jnp.asarray`` for large arrays). On the CPU, ``device_put`` adopts a
  64-byte-aligned numpy buffer instead of copying it, even with
  ``may_alias=False`` (jax 0.10), and copies any other buffer with a slow
  unaligned copy (about twice numpy's). So a host array is first copied into
  a private 64-byte-aligned staging buffer (:func:`_staging`: reused across
  calls once nothing refers to it), which ``device_put`` then adopts: one
  fast copy, and the caller's later writes never show through a result
  still being computed or a fitted recalibrator holding the array (an
  unaligned array under 1 MiB is left to ``device_put``'s copy, cheaper
  there). That copy, like an accelerator's transfer, reads the host buffer
  asynchronously, after ``device_put`` returns (a write right after the call
  showed in the device array: on the CPU for unaligned arrays of 100 KiB to
  1 MiB, on an H200 with jax 0.11.2), so the call waits for it to finish. A
  JAX array is returned as it is. Under a trace (a jitted caller closing over
  a host array) ``device_put`` gives a tracer of a constant the compiler
  keeps a copy of, and nothing is waited for.
  """
  if isinstance(x, jax.Array | jax.core.Tracer):
    return x
  a = np.asarray(x)
  if jax.default_backend() == "cpu" and (a.nbytes >= _OWN_COPY or a.ctypes.data % _ALIGN == 0):
    return jax.device_put(_aligned_copy(a))  # our own buffer, adopted
  out = jax.device_put(a)
  if isinstance(out, jax.core.Tracer):
    return out
  return out.block_until_ready()  # the caller may write to ``a`` next


#: A borrowed block's row count is a multiple of this (XLA:CPU's row reductions
#: of C = 100 floats ran at half speed on 99,997 rows: 4.1 against 2.2 ms).
_BORROW_ROWS = 8


def _borrowed_rows(a: np.ndarray) -> RowBlocks | None:
  """A host matrix on the CPU as blocks that the programs read in place.

  XLA:CPU adopts a 64-byte-aligned host buffer without copying it, and
  numpy's large buffers start 16 bytes past such a boundary; but from the
  first row ``k`` that starts on a boundary, ``a[k:]`` is aligned (``k`` is
  below the period ``P = 64 / gcd(row bytes, 64)``). So the block of rows
  ``k`` to ``k + M`` (a view of ``a``) is adopted by each jitted program
  that takes it as an argument, and the other ``n - M`` rows, after it and
  before it, are copied into a second block (a few KB): the copy of the
  whole matrix (3 ms of a 10 ms single call for 40 MB) is saved. ``M``, the
  largest multiple of :data:`_BORROW_ROWS` that fits whatever ``k`` is,
  depends on ``n`` and the row size only, and the blocks hold the rows
  rotated by ``k`` (:class:`~jaxcal._src.numerics.RowBlocks` ``shift``, an
  argument of the programs): one program serves every address. (Cut at
  ``k``, the block shapes keyed the programs: eight views of one ``(10^5,
  10)`` matrix compiled ``conf_ece`` 16 times instead of twice.) A buffer
  with no aligned row (its address not a multiple of ``gcd(row bytes,
  64)``) is copied into an aligned private buffer and lent with ``k = 0``,
  the same blocks. The blocks stay host arrays, transferred by the programs
  with their other arguments: a ``jax.device_put`` of each costs more (the
  first one after a program waits for XLA's workers: 0.23 against 0.04 ms;
  ``brier`` at ``n = 10^5``, ``C = 100`` 2.0 against 2.4 ms in all). The
  blocks alias ``a``: whoever computes on them must wait for the result
  before returning to the caller (:func:`run_checked` does), and must not
  keep them.

  A matrix under 1 MiB is lent whole, as the host array itself (for
  ``conf_ece`` at ``n = 10^4``, ``C = 10``: 0.62 against 0.71 ms with the
  private copy and ``jax.device_put``).

  Returns:
    :class:`~jaxcal._src.numerics.RowBlocks` of one or two host arrays;
    ``None`` where this does not apply (another backend, a non-float,
    non-contiguous or non-compute-dtype array, or too few rows for the
    copied block to be small) and the caller makes its usual private copy.
  """
  if (
    a.ndim != 2
    or not a.flags.c_contiguous
    or not jnp.issubdtype(a.dtype, jnp.floating)
    or compute_dtype(a.dtype) != a.dtype
    or jax.default_backend() != "cpu"
  ):
    return None
  if a.nbytes < _OWN_COPY:
    return RowBlocks((a,))  # (n >= 1: _matrix rejects an empty one)
  n, stride = a.shape[0], a.strides[0]
  step = math.gcd(stride, _ALIGN)  # aligned rows recur every _ALIGN // step rows
  body = (n - (_ALIGN // step - 1)) // _BORROW_ROWS * _BORROW_ROWS  # M, whatever k is
  if body <= 0 or (n - body) * 16 > n:  # the copied block would not be small
    return None
  src = a if a.ctypes.data % step == 0 else _aligned_copy(a)  # (no aligned row: our own)
  k = next(k for k in range(_ALIGN // step) if (src.ctypes.data + k * stride) % _ALIGN == 0)
  return _rotated_blocks(src, k, body)


def _rotated_blocks(a: np.ndarray, k: int, body: int) -> RowBlocks:
  """Host rows ``a`` as the blocks ``a[k : k + body]`` and a copy of the rest (after, then before).

  The layout of :func:`_borrowed_rows`, which also cuts the host labels of
  borrowed scores (:func:`_rows_like`).
  """
  rest = np.concatenate((a[k + body :], a[:k]))
  return RowBlocks((a[k : k + body],) + ((rest,) if rest.shape[0] else ()), np.int32(k))


def _rows_like(y: np.ndarray, blocks: RowBlocks) -> RowBlocks:
  """Host rows ``y`` (``(n, ...)``) cut and rotated as :func:`_borrowed_rows` cut ``blocks``.

  The programs then read the blocks' labels as they are: rotating them in
  the program (``jnp.roll``) cost 0.13 ms of a 2.5 ms top-label stage at
  ``n = 10^5``.
  """
  return _rotated_blocks(y, int(blocks.shift), blocks.parts[0].shape[0])


def exact_on_device(a: Any, name: str) -> Any:
  """A numpy integer array JAX would narrow (int64, uint64 without x64), checked to survive it.

  Without ``jax_enable_x64``, ``jnp.asarray`` casts int64 to int32 and uint64
  to uint32 by wrapping: ``2**32 + 1`` became 1, a plausible value
  (``bootstrap`` of labels gave the error of a different data set). One host
  pass over the caller's numpy array (no device transfer); anything else is
  returned as it is.

  Args:
    a: an array (numpy arrays are checked).
    name: the argument's name in the error message.

  Returns:
    ``a``, unchanged.

  Raises:
    ValueError: an entry outside the range of the 32-bit type JAX would
      store it in.

  Example:
    >>> import numpy as np
    >>> exact_on_device(np.array([1, 2], np.int64), "x").tolist()
    [1, 2]
  """
  if (
    not isinstance(a, np.ndarray)
    or a.dtype.kind not in "iu"
    or a.dtype.itemsize <= 4
    or not a.size
    or jax.config.jax_enable_x64
  ):
    return a
  info = np.iinfo(np.int32 if a.dtype.kind == "i" else np.uint32)
  bad = _first_outside(a, info)
  if bad is not None:
    at = tuple(int(i) for i in np.unravel_index(bad, a.shape))
    raise ValueError(
      f"{name} holds {a.dtype.name} values that {info.dtype.name} cannot hold (entry "
      f"{at[0] if len(at) == 1 else at} = {a.flat[bad]}), and without jax_enable_x64 JAX "
      f"stores it as {info.dtype.name}, wrapping them to other values; enable x64 "
      "(jax.config.update('jax_enable_x64', True)) or map the values into that range"
    )
  return a


def as_float(x: Any, name: str = "input") -> jax.Array:
  """Converts to a floating JAX array of at least float32 (never in place).

  Integer/bool inputs become JAX's default float (numpy ones converted on the
  host, so int64 values are not wrapped first); float16/bfloat16 become
  float32; float64 stays float64 only when x64 is enabled (JAX's rule).
  """
  arr = _array(x, name)
  dt = compute_dtype(arr.dtype)
  if isinstance(arr, np.ndarray):
    host = arr if jnp.issubdtype(arr.dtype, jnp.floating) else arr.astype(dt)
    return _to_dtype(_device(host), dt)
  return _to_dtype(arr, dt)


def _to_dtype(x: jax.Array, dt: Any) -> jax.Array:
  return x if x.dtype == dt else x.astype(dt)


def _host_float(arr: Any, name: str) -> Any:
  """Numpy integer/bool matrices become floats on the host (no int32 wrap)."""
  if isinstance(arr, np.ndarray) and not jnp.issubdtype(arr.dtype, jnp.floating):
    return arr.astype(compute_dtype(arr.dtype))
  return arr


def _matrix(
  x: Any, name: str, *, min_classes: int = 2, what: str = "C", allow_empty: bool = False
) -> Any:
  arr = _host_float(_array(x, name), name)
  if arr.ndim != 2:
    hint = ""
    if arr.ndim == 1:
      hint = " (a single row? use x[None])"
    raise ValueError(f"{name} must have shape (n, {what}), got shape {tuple(arr.shape)}{hint}")
  n, c = arr.shape
  if n == 0 and not allow_empty:
    raise ValueError(f"{name} is empty (n = 0 samples)")
  if c < min_classes:
    raise ValueError(f"{name} must have at least {min_classes} classes (columns), got {what} = {c}")
  return arr


def check_where(where: Any, n: int, name: str = "where") -> jax.Array | None:
  """Validates an optional ``(n,)`` boolean sample mask (trace-time checks only).

  Returns:
    ``None`` for ``None``, else the mask as a JAX bool array.
  """
  if where is None:
    return None
  w = _array(where, name)
  if w.dtype != np.bool_:
    raise ValueError(
      f"{name} must be a boolean mask of the samples, got dtype {w.dtype}; "
      f"pass e.g. {name}=weights > 0"
    )
  if tuple(w.shape) != (n,):
    raise ValueError(f"{name} must have shape ({n},) (one entry per sample), got {tuple(w.shape)}")
  return _device(w)


def _host_labels(
  a: np.ndarray, num_classes: int | None, name: str, where: Any, defer: bool = False
) -> np.ndarray:
  """Checks numpy labels that JAX would narrow (int64, uint32/64, floats) before the cast.

  Float labels must be integral, and all must lie in ``[0, num_classes)`` (or
  fit int32 when ``num_classes`` is None): values such as ``2**32 + 1`` would
  otherwise wrap to a valid-looking label. Values of samples masked out by a
  numpy ``where`` are not checked; with a JAX ``where`` (which stays on the
  device) a bad value is left to the device check, which reports it if
  selected: as it is when int32 holds it, else as :data:`_NOT_A_LABEL`.
  Valid int32 / narrower labels are returned unchanged (checked on device).
  With ``defer`` nothing raises: every bad value is left to the device check
  (of an array assembled across processes) in the same way.
  """
  if where is not None and not isinstance(where, jax.Array | jax.core.Tracer):
    where = np.asarray(where, bool)
  floating = jnp.issubdtype(a.dtype, jnp.floating)
  if not floating and not (a.dtype.itemsize > 4 or a.dtype == np.uint32):
    return a
  lo, hi = (0, num_classes - 1) if num_classes is not None else (_INT32.min, _INT32.max)
  if not floating and a.size:
    if num_classes is not None:
      # one pass, no temporary: negative integers viewed as unsigned are >= 2**63
      unsigned = a.view(np.dtype(f"u{a.dtype.itemsize}"))
      in_range = int(unsigned.max()) < num_classes
    else:
      in_range = lo <= a.min() and a.max() <= hi
    if in_range:
      return a.astype(np.int32)
  elif not floating:
    return a.astype(np.int32)
  nonint = (~np.isfinite(a) | (a != np.round(a))) if floating else np.zeros(a.shape, bool)
  with np.errstate(invalid="ignore"):
    bad = nonint | (a < lo) | (a > hi)
  if not defer and (where is None or isinstance(where, np.ndarray)):
    sel = bad if where is None else bad & where
    if sel.any():
      first = int(np.argmax(sel))
      if nonint[first]:
        what = f"must be integers; {int(sel.sum())} entries are not"
      elif num_classes is not None:
        what = f"must lie in [0, {num_classes}); {int(sel.sum())} entries do not"
      else:
        what = f"must fit in int32; {int(sel.sum())} entries do not"
      raise ValueError(f"{name} {what}, the first is {name}[{first}] = {a[first].item()!r}")
    return np.where(bad, 0, a).astype(np.int32)  # masked-out samples: any valid label
  # selected or not is known on the device only: a value int32 holds stays (the
  # device check reports it), any other becomes _NOT_A_LABEL
  with np.errstate(invalid="ignore"):
    held = _int32_holds(a, np)
  return np.where(bad & ~held, _NOT_A_LABEL, a).astype(np.int32)


def _int32_holds(a: Any, xp: Any) -> Any:
  """Where int32 holds ``a``'s value exactly (integral, finite, in range); ``xp``: np or jnp.

  Float bounds are the exact ``[-2**31, 2**31)``: ``2**31 - 1`` itself rounds to
  ``2**31`` in float32.
  """
  if xp.issubdtype(a.dtype, xp.floating):
    return xp.isfinite(a) & (a == xp.round(a)) & (a >= -(2.0**31)) & (a < 2.0**31)
  return (a >= _INT32.min) & (a <= _INT32.max)


def _labels(
  labels: Any,
  n: int,
  num_classes: int | None,
  name: str,
  where: Any,
  defer: bool = False,
  rows_of: str = "the predictions",
  classes: bool = True,
) -> tuple:
  """Trace-time label checks and host narrowing checks; returns (array, kind).

  ``rows_of`` names what has the ``n`` rows, in the length message;
  ``classes`` False for integer ids that are not class labels (bin ids:
  booleans are then ids 0 and 1 whatever ``num_classes``).
  """
  y = _array(labels, name)
  if y.ndim != 1:
    hint = ""
    if y.ndim == 2 and num_classes is not None and y.shape == (n, num_classes):
      hint = f" (one-hot labels? pass {name}.argmax(axis=1))"
    elif y.ndim == 2 and y.shape[-1] == 1:
      hint = f" (pass {name}.ravel())"
    raise ValueError(f"{name} must have shape (n,), got shape {tuple(y.shape)}{hint}")
  if y.shape[0] != n:
    raise ValueError(f"{name} has {y.shape[0]} entries but {rows_of} have n = {n} rows")
  if isinstance(y, np.ndarray):
    y = _host_labels(y, num_classes, name, where, defer)
  if y.dtype == np.bool_:
    if classes and num_classes is not None and num_classes > 2:  # labels > 4 for C = 10
      raise ValueError(
        f"{name} are booleans but the predictions have C = {num_classes} classes: pass "
        "integer class indices (booleans read as classes 0 and 1)"
      )
    return y.astype(np.int32) if isinstance(y, np.ndarray) else y.astype(jnp.int32), "int"
  return y, ("float" if jnp.issubdtype(y.dtype, jnp.floating) else "int")


def _to_int32(y: Any) -> jax.Array:
  y = _device(y)
  return y if y.dtype == jnp.int32 else y.astype(jnp.int32)


# --------------------------------------------------------------------------
# Entry points
# --------------------------------------------------------------------------


class Checked(NamedTuple):
  """Validated inputs of one data set.

  Attributes:
    scores: ``(n, C)`` probabilities or logits (as given), in the compute
      dtype (at least float32); ``(n,)`` for :func:`check_binary`.
    labels: ``(n,)`` int32 labels (a host array when the scores are host
      arrays too, small or borrowed eager input whose checks are pending:
      the programs take it with their arguments).
    where: ``(n,)`` bool sample mask, or ``None`` (all samples).
    weights: ``(C,)`` class weights in the compute dtype, or ``None``.
    ok: ``None`` after an eager check (bad input raised); a traced bool
      scalar under a transformation (fold it into the result with :func:`fold`).
    count: number of selected samples: a Python int after an eager check, a
      traced int32 otherwise.
    from_logits: whether ``scores`` are logits.
    pending: value checks not run yet (``check_predictions(..., defer=True)``):
      :func:`run_checked` runs them after dispatching the first computation.

  Scores that are :class:`~jaxcal._src.numerics.RowBlocks` read the
  caller's host buffer in place (``check_predictions(..., borrow=True)``):
  see :attr:`borrowed`.
  """

  scores: jax.Array | RowBlocks
  labels: jax.Array
  where: jax.Array | None
  weights: jax.Array | None
  ok: jax.Array | None
  count: Any
  from_logits: bool
  pending: Any = None

  @property
  def borrowed(self) -> bool:
    """Whether ``scores`` read the caller's host buffer (:func:`run_checked` waits for its result)."""
    return isinstance(self.scores, RowBlocks)

  def probs(self) -> jax.Array | RowBlocks:
    """The probabilities (a softmax of the logits with ``from_logits=True``), blocks as blocks."""
    if not self.from_logits:
      return self.scores
    return by_rows(lambda b: jax.nn.softmax(b, axis=-1), self.scores, join=False)

  def neutral(self) -> tuple[jax.Array, jax.Array]:
    """``(probs, labels)`` with masked-out rows replaced by uniform rows and label 0.

    For cores that weight masked samples by zero but would still carry a NaN
    or an out-of-range label from them through their arithmetic (``0 * nan``
    is NaN): unchecked values in masked rows cannot reach the result. (The
    same as :func:`neutral` on whole scores; blocks stay blocks.)
    """
    return neutral(self.probs(), self.labels, self.where)


def neutral(
  x: jax.Array, y: jax.Array, where: jax.Array | None, from_logits: bool = False
) -> tuple[jax.Array, jax.Array]:
  """``(probs, labels)`` of ``(n, C)`` scores, masked-out rows uniform and their labels 0.

  The pure form of :meth:`Checked.neutral`, for use inside a program
  (:func:`neutral_program`): ``p = softmax(x)`` with ``from_logits``, else
  ``x``; where ``where`` is False, ``p_i = 1/C`` and ``y_i = 0``.
  """
  p = jax.nn.softmax(x, axis=-1) if from_logits else x
  if where is None:
    return p, y
  return _masked(p, where, 1.0 / p.shape[-1]), jnp.where(where, y, 0)


@functools.cache
def neutral_program(core: Callable, from_logits: bool, **static: Any) -> Callable:
  """Jitted ``core(p, y, *rest, where=where, **static)`` on :func:`neutral` probabilities.

  The compiled function takes ``(scores, labels, where, *rest)``, as a
  :class:`Checked` holds them, so that an eager call hands it to
  :func:`run_checked` and its value checks, the softmax, the masking and
  ``core`` run as one program (``ks_ce`` at ``n = 10^4``, ``C = 10``: 1.13
  against 1.32 ms as a check program and a metric program). One compiled
  function per ``(core, from_logits, static)``: ``core`` and the static
  values must be hashable.
  """

  def run(x, y, where, *rest):
    p, labels = neutral(x, y, where, from_logits)
    return core(p, labels, *rest, where=where, **static)

  return jax.jit(run)


def upcast(x: Any) -> Any:
  """``x`` in the dtype computations on it run in (:func:`compute_dtype`: at least float32).

  A numpy array stays on the host (integers converted there, so int64 values
  are not wrapped); an array already in that dtype is returned as it is.
  """
  return _to_dtype(x, compute_dtype(x.dtype))


def check_predictions(
  scores: Any,
  labels: Any,
  *,
  from_logits: bool = False,
  where: Any = None,
  class_weights: Any = None,
  simplex: bool = True,
  name: str | None = None,
  labels_name: str = "labels",
  weights_name: str = "class_weights",
  defer: bool = False,
  borrow: bool = False,
  empty_where: bool = False,
  allow_empty: bool = False,
  padding: bool = False,
) -> Checked:
  """Validates one data set ``(scores, labels)`` with one fused device reduction.

  Trace-time: ``scores`` is ``(n, C)`` numeric with ``n >= 1`` and ``C >= 2``;
  ``labels`` is ``(n,)`` integer (or integral float); ``where`` an ``(n,)`` bool
  mask; ``class_weights`` ``(C,)``. Values (one jitted pass): probabilities
  finite, in ``[0, 1]`` and rows summing to one within :func:`simplex_atol`
  (``simplex=False``: only finite and in ``[0, 1]``), logits finite, labels in
  ``[0, C)``, weights finite and non-negative with a positive sum, and at least
  one selected sample. Masked-out samples are not checked.

  Args:
    scores: ``(n, C)`` probabilities, or logits with ``from_logits=True``.
    labels: ``(n,)`` labels.
    from_logits: check ``scores`` as logits (finite only).
    where: optional ``(n,)`` bool mask of the samples to use.
    class_weights: optional ``(C,)`` weights.
    simplex: require rows summing to one (probabilities only).
    name: the argument's name in messages (``"probs"`` or ``"logits"``).
    labels_name: the labels' name in messages.
    weights_name: the weights' name in messages.
    defer: on an eager call, leave the value checks pending: the caller
      must pass the result to :func:`run_checked`, which reads them back
      after dispatching its computation. Under a transformation it has no
      effect.
    borrow: with ``defer`` and without ``where``, let the scores read a
      host float matrix on the CPU in place instead of copying it
      (:func:`_borrowed_rows`): they may come as
      :class:`~jaxcal._src.numerics.RowBlocks` of host arrays, which each
      jitted program transfers with its arguments (an aligned block is
      adopted, not copied), for computations written with
      :func:`~jaxcal._src.numerics.by_rows`; host labels then stay on the
      host too. :func:`run_checked` waits for the computation, and the
      caller keeps nothing.
    empty_where: accept a ``where`` that selects no sample (a streaming
      batch of padding only adds nothing); by default it raises.
    allow_empty: accept ``n = 0`` rows (a streaming batch of no rows adds
      nothing); by default it raises.
    padding: ``where`` marks padding rows (every process's shard assembled
      into one global array by
      :func:`jaxcal._src.utility.sweep.process_shards`, each
      padded at its end): messages number the rows among the selected ones,
      i.e. as rows of the union in process order.

  Returns:
    :class:`Checked`.

  Raises:
    ValueError: naming the argument, the problem (count of bad rows, the first
      one and its value) and the fix. Value problems raise on eager calls;
      under a transformation :attr:`Checked.ok` carries them.
  """
  from_logits = check_flag(from_logits, "from_logits")
  name = name or ("logits" if from_logits else "probs")
  x = _matrix(scores, name, allow_empty=allow_empty)
  n, c = x.shape
  wh = check_where(where, n)
  y, y_kind = _labels(labels, n, c, labels_name, where)
  w = None
  if class_weights is not None:
    w = as_float(class_weights, weights_name)
    if tuple(w.shape) != (c,):
      raise ValueError(f"{weights_name} must have shape ({c},), got {tuple(w.shape)}")
  if n == 0:  # allow_empty: shapes checked, no value to check, nothing to borrow or stage
    return Checked(upcast(_device(x)), _to_int32(y), wh, w, None, 0, from_logits)
  defer = defer and _trace_clean() and is_concrete(x, y, wh, w)
  lent = None
  if borrow and defer and wh is None and isinstance(x, np.ndarray):
    lent = _borrowed_rows(x)
  # A small host matrix whose checks will run in the computation's program
  # (:func:`small`) goes to that one program as it is, with its labels: a
  # device_put each would cost more than the program's own transfer. Host
  # labels go with borrowed blocks the same way.
  small_host = (
    defer
    and isinstance(x, np.ndarray)
    and x.nbytes < SMALL_BYTES
    and compute_dtype(x.dtype) == x.dtype
  )
  if small_host and lent is None:
    lent = x
  keep = lent is not None and isinstance(y, np.ndarray)
  host, x, y = x, (_device(x) if lent is None else lent), (y if keep else _device(y))
  kind = "finite" if from_logits else ("probs" if simplex else "unit")
  spec = _Spec(
    xs=(_Arr(kind, name, 2, simplex_atol(x.dtype)),),
    y_kind=y_kind,
    y_name=labels_name,
    num_classes=c,
    has_where=wh is not None,
    w_name=None if w is None else weights_name,
    empty_where=empty_where,
    padding=padding,
  )
  labels = y.astype(np.int32, copy=False) if keep else _to_int32(y)
  if keep and isinstance(x, RowBlocks) and x.shift is not None:
    labels = _rows_like(labels, x)  # host labels cut as the blocks: no rotation in the programs
  if isinstance(x, RowBlocks):  # each block checked; a problem is located on a whole copy
    blocks = spec._replace(xs=spec.xs * len(x.parts))
    pending = _Pending(blocks, x.parts, y, None, w, locate=(spec, host))
    return Checked(x, labels, None, w, None, n, from_logits, pending)
  if defer:
    pending = _Pending(spec, (x,), y, wh, w)
    return Checked(upcast(x), labels, wh, w, None, n, from_logits, pending)
  ok, count = _validate(spec, (x,), y, wh, w)
  return Checked(upcast(x), _to_int32(y), wh, w, ok, count, from_logits)


def process_shard(
  scores: Any, labels: Any, *, name: str = "probs", labels_name: str = "labels"
) -> tuple[Any, Any]:
  """One process's ``(n, C)`` scores and ``(n,)`` labels, ready to be assembled across processes.

  The trace-time checks (shapes, dtypes) only, and the host narrowing of the
  labels without raising: a value that JAX would narrow wrongly becomes
  ``_NOT_A_LABEL``, one that int32 holds stays, for the global check to report.
  The values are checked on the assembled global array
  (``check_predictions(..., where=mask, padding=True)``): one check on every
  process, which raises the same ``ValueError`` on all of them, naming the
  union's row (a check of the shard alone would raise on its process only,
  naming the shard's row, while the others wait in the next collective).
  The shape checks, the class count and the dtype are shared the same way
  (:func:`on_every_process`). A process may hold no rows (``n = 0``); the
  union may not (:func:`check_union_rows`).

  Returns:
    ``(scores, labels)``: host arrays stay host arrays; labels are int32.
  """

  def local():
    x = _matrix(scores, name, allow_empty=True)
    y, _ = _labels(labels, x.shape[0], x.shape[1], labels_name, None, defer=True)
    if isinstance(y, np.ndarray):  # narrowed on the host already (see _host_labels)
      return x, y.astype(np.int32, copy=False)
    if jnp.issubdtype(y.dtype, jnp.floating):  # a cast would truncate 1.5 to 1: _NOT_A_LABEL
      y = jnp.where(_int32_holds(y, jnp), y, _NOT_A_LABEL)
    return x, y.astype(jnp.int32)

  return on_every_process(
    local,
    same=lambda out: {
      f"the class count C of {name}": out[0].shape[1],
      f"the dtype of {name}": jax.dtypes.canonicalize_dtype(out[0].dtype),
    },
  )


def check_union_rows(sizes: Any, name: str = "probs") -> None:
  """Raises on every process when no process holds a row of ``name``.

  Args:
    sizes: ``(num_processes,)`` row counts, the same on every process (an
      all-gather's result), so every process raises or none does.
    name: the argument's name in the message.

  Raises:
    ValueError: the union of the processes' rows is empty.

  Example:
    >>> check_union_rows([0, 3])
  """
  if int(np.sum(sizes)) == 0:
    raise ValueError(
      f"{name} is empty on every process (n = 0 samples in the union of "
      f"{len(np.atleast_1d(sizes))} processes' rows)"
    )


#: Bytes each process sends in :func:`on_every_process` (its error message, or
#: the quantities that must agree); a longer message is shortened.
_AGREE_BYTES = 4096


def spans_processes(tree: Any) -> bool:
  """Whether a leaf of ``tree`` is a concrete ``jax.Array`` spanning several processes."""
  return any(
    isinstance(a, jax.Array) and not isinstance(a, jax.core.Tracer) and not a.is_fully_addressable
    for a in jax.tree.leaves(tree)
  )


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _code_text(code: Any) -> str:
  """A function's bytecode and constants as text, the same in every process: nested code
  by its own text, a frozenset (``x in {"a", "b"}``) sorted (its order follows the
  process's string hashing)."""
  consts = []
  for c in code.co_consts:
    if inspect.iscode(c):
      consts.append(_code_text(c))
    elif isinstance(c, frozenset):
      consts.append(str(sorted(map(repr, c))))
    else:
      consts.append(_ADDRESS.sub("", repr(c)))
  return f"{code.co_code.hex()} {code.co_names} {consts}"


def _argument_text(value: Any, depth: int = 0) -> str:
  """:func:`digest` of one argument, the same on every process for equal arguments.

  Arrays (also inside pytrees) by shape, dtype and bytes; a function by its
  name, code, defaults and the values it closes over (two closures of one
  factory with other constants differ), a ``functools.partial`` by its parts;
  memory addresses are left out of any ``repr`` (``<function k at 0x7f..>``
  differs on every process). Other objects are compared by their ``repr``:
  a callable instance's attributes only as far as its ``repr`` shows them.
  """
  if depth > 4:  # (a function closing over itself)
    return "..."
  if isinstance(value, functools.partial):
    parts = [value.func, value.args, sorted(value.keywords.items())]
    return digest("partial " + " ".join(_argument_text(v, depth + 1) for v in parts))
  if inspect.isfunction(value):
    try:
      cells = [c.cell_contents for c in value.__closure__ or ()]
    except ValueError:  # an empty cell
      cells = ["<empty>"]
    held = [value.__defaults__, value.__kwdefaults__, *cells]
    return digest(
      f"{value.__module__}.{value.__qualname__} {_sha(_code_text(value.__code__))} "
      + " ".join(_argument_text(v, depth + 1) for v in held)
    )
  leaves, tree = jax.tree.flatten(value)
  if any(isinstance(a, np.ndarray | jax.Array) for a in leaves):
    return digest(f"{_ADDRESS.sub('', str(tree))}: {[digest(a) for a in leaves]}")
  return digest(_ADDRESS.sub("", str(value)))


def context_mesh() -> Any:
  """The mesh of a caller's ``jax.set_mesh``: concrete eagerly, abstract under ``jit``.

  Returns:
    a ``jax.sharding.Mesh``, a ``jax.sharding.AbstractMesh`` (inside ``jit``
    only the abstract mesh is known), or None outside any ``set_mesh``.

  Example:
    >>> context_mesh() is None
    True
  """
  abstract = jax.sharding.get_abstract_mesh()
  if abstract.empty:
    return None
  try:
    return jax.sharding.get_mesh()
  except ValueError:  # under jit
    return abstract


def same_arguments(fn: Callable) -> Callable:
  """``fn``, which first checks that its arguments agree across processes when its data span them.

  A public metric called on a global ``jax.Array`` that spans processes runs
  one program on every process; an argument that differs between them mixed
  the processes' results without a word (``num_bins`` 15 on one process and
  16 on the other share a compiled program, each process binning its rows
  with its own count) or ended in a collective's abort or a hang (15 against
  20 bins, ``"fixed"`` against ``"quantile"``). With such data, the call
  first compares every argument across the processes, defaults included
  (:func:`on_every_process`: one small all-gather; functions and other
  objects as :func:`_argument_text` names them) and raises the same
  ``ValueError`` on every process, naming the argument. With one process,
  or no argument spanning processes, or under tracing, it is ``fn``. An
  eager call inside a caller's ``jax.set_mesh`` with Explicit axes runs
  outside that context and replicates its array results on the mesh.

  Args:
    fn: a public function of data sets.

  Returns:
    The wrapped function, with ``fn``'s signature and docstring.

  Example:
    >>> same_arguments(lambda x, m=15: m)(1.0)
    15
  """
  sig = inspect.signature(fn)

  @functools.wraps(fn)
  def wrapper(*args: Any, **kwargs: Any) -> Any:
    if jax.process_count() > 1 and spans_processes((args, kwargs)):
      try:
        bound = sig.bind(*args, **kwargs)
      except TypeError:  # fn's own error, from fn
        return fn(*args, **kwargs)
      bound.apply_defaults()  # a default passed on one process and left out on another
      arguments = bound.arguments
      name = getattr(fn, "__name__", "the function")
      on_every_process(
        lambda: None,
        same=lambda _: {f"{name}'s {k}": _argument_text(v) for k, v in arguments.items()},
      )
    return fn(*args, **kwargs)

  return outside_explicit_context(wrapper)


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # .../jaxcal/


def caller_stacklevel() -> int:
  """The ``warnings.warn`` ``stacklevel`` naming the first frame outside jaxcal.

  Called by the function that warns: the warning then points at the user's
  line, however many of jaxcal's own frames (``fit`` calling ``fit_*``, the
  public wrappers) lie between.

  Returns:
    ``stacklevel`` for ``warnings.warn`` in the calling function.

  Example:
    >>> caller_stacklevel() >= 1
    True
  """
  frame, level = sys._getframe(1), 1
  while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
    frame, level = frame.f_back, level + 1
  return level


def _explicit_axes(mesh: Any) -> tuple[str, ...]:
  """The names of ``mesh``'s Explicit axes (none for None or an empty mesh)."""
  if mesh is None or mesh.empty:
    return ()
  return tuple(
    a for a, t in zip(mesh.axis_names, mesh.axis_types) if t == jax.sharding.AxisType.Explicit
  )


def _explicit_array(a: Any) -> bool:
  """Whether ``a`` is a concrete JAX array sharded on a mesh with an Explicit axis."""
  s = (
    getattr(a, "sharding", None)
    if isinstance(a, jax.Array) and not isinstance(a, jax.core.Tracer)
    else None
  )
  return isinstance(s, jax.sharding.NamedSharding) and bool(_explicit_axes(s.mesh))


def _sharded_explicit(a: Any) -> bool:
  """Whether ``a`` is a concrete JAX array split over an Explicit axis (not replicated)."""
  return _explicit_array(a) and any(x is not None for x in a.sharding.spec)


def _traced_explicit_mesh(values: Sequence[Any]) -> Any:
  """The abstract mesh with Explicit axes that a traced call runs under, else None.

  Inside ``jit`` (or ``grad``, ``vmap``) it is the caller's ``set_mesh``;
  without one, JAX types a tracer of an Explicit-sharded array with its
  mesh and leaves the context empty.
  """
  abstract = jax.sharding.get_abstract_mesh()
  if not abstract.empty:
    return abstract if _explicit_axes(abstract) else None
  for v in values:
    s = (
      getattr(getattr(v, "aval", None), "sharding", None)
      if isinstance(v, jax.core.Tracer)
      else None
    )
    if isinstance(s, jax.sharding.NamedSharding) and _explicit_axes(s.mesh):
      return s.mesh
  return None


def _under_auto_axes(fn: Callable, mesh: Any, args: tuple, kwargs: dict) -> Any:
  """``fn(*args, **kwargs)`` traced with ``mesh``'s Explicit axes made Auto
  (``jax.sharding.auto_axes``), its results replicated on them.

  Only the tracers and Explicit-typed arrays among the arguments' leaves
  pass through ``auto_axes``; the rest (bin counts, names, callables, numpy
  and other concrete arrays) stay as they are, so a static argument stays
  static.
  """
  leaves, tree = jax.tree.flatten((args, kwargs))
  # tracers, and concrete arrays typed by the Explicit mesh; other concrete arrays stay
  # closed over (a bin-count array made a tracer here was refused as traced)
  at = [i for i, a in enumerate(leaves) if isinstance(a, jax.core.Tracer) or _sharded_explicit(a)]

  def inner(*arrays: jax.Array) -> Any:
    full = list(leaves)
    for i, a in zip(at, arrays, strict=True):
      full[i] = a
    a, k = jax.tree.unflatten(tree, full)
    return fn(*a, **k)

  with jax.sharding.use_abstract_mesh(mesh):
    run = jax.sharding.auto_axes(
      inner, axes=_explicit_axes(mesh), out_sharding=jax.sharding.PartitionSpec()
    )
    return run(*[leaves[i] for i in at])


#: Arguments not searched for a state's or a fit's fields.
_FLAT = (np.ndarray, jax.Array, np.generic, int, float, str, type(None), list, tuple)
# (lists and tuples are host data or bin counts: flattening a list of 10^6 numbers took
# 0.5 s a call)


def outside_explicit_context(fn: Callable) -> Callable:
  """``fn``, run with the Explicit mesh axes of its caller made Auto.

  jaxcal's programs leave sharding to XLA (Auto axes). Where the caller
  types arrays with an Explicit axis (``jax.make_mesh``'s default), every
  operation is typed with it, and the rows' sorts, scatters and pads were
  refused ("Arguments to sort must be unsharded over the sorting
  dimension", "Resource axis: data ... is not found in mesh: ()").

  * Eagerly inside a caller's ``jax.set_mesh`` with Explicit axes, ``fn``
    runs outside that context.
  * Traced (under ``jit``, ``grad``, ``vmap``) inside such a context, or on
    tracers of arrays sharded over an Explicit axis, ``fn`` runs under
    ``jax.sharding.auto_axes`` with those axes made Auto.

  Either way its array results are replicated on that mesh, so the caller's
  next operation there takes them (a per-sample output too: a full copy on
  every device). Elsewhere it is ``fn``.

  Args:
    fn: a public function of data sets.

  Returns:
    The wrapped function, with ``fn``'s signature and docstring.

  Example:
    >>> outside_explicit_context(lambda x: x + 1)(1)
    2
  """

  @functools.wraps(fn)
  def wrapper(*args: Any, **kwargs: Any) -> Any:
    values = (*args, *kwargs.values())
    nested = not all(isinstance(v, _FLAT) for v in values)
    if nested:  # a state's or a fit's fields too
      values = jax.tree.leaves(values)
    mesh = context_mesh()
    if isinstance(mesh, jax.sharding.AbstractMesh) or any(
      isinstance(v, jax.core.Tracer) for v in values
    ):  # traced
      mesh = _traced_explicit_mesh(values)
      return fn(*args, **kwargs) if mesh is None else _under_auto_axes(fn, mesh, args, kwargs)
    context = mesh if mesh is not None and _explicit_axes(mesh) else None
    # (an Explicit-typed array argument is made Auto where it is read, by _array)
    if context is None and not (nested and any(_explicit_array(v) for v in values)):
      return fn(*args, **kwargs)
    with jax.set_mesh(None) if context is not None else contextlib.nullcontext():
      # a fit's or a state's fields made Auto too (they came back replicated on an Explicit mesh)
      args, kwargs = jax.tree.map(
        lambda a: auto_typed(a) if isinstance(a, jax.Array) else a, (args, kwargs)
      )
      out = fn(*args, **kwargs)
    if context is None:
      return out
    on = jax.sharding.NamedSharding(context, jax.sharding.PartitionSpec())
    return jax.tree.map(lambda o: jax.device_put(o, on) if isinstance(o, jax.Array) else o, out)

  return wrapper


def _sha(text: str) -> str:
  """``sha256 <16 hex digits>`` of ``text``."""
  import hashlib

  return "sha256 " + hashlib.sha256(text.encode()).hexdigest()[:16]


def digest(value: Any) -> str:
  """A short text naming ``value`` for :func:`on_every_process`'s ``same``: ``str(value)``
  up to 120 characters, else a SHA-256 prefix of it (arrays by shape, dtype and bytes).

  Arrays that span processes are global, the same everywhere by construction:
  they are named by shape and dtype only.

  Example:
    >>> digest([5, 15]), digest(np.arange(3.0)).startswith("float64(3,):")
    ('[5, 15]', True)
  """
  import hashlib

  if isinstance(value, np.ndarray | jax.Array):
    head = f"{jnp.dtype(value.dtype).name}{tuple(value.shape)}"
    if isinstance(value, jax.Array) and not value.is_fully_addressable:
      return head + ": global"
    raw = np.ascontiguousarray(np.asarray(value)).tobytes()
    return head + ": " + hashlib.sha256(raw).hexdigest()[:16]
  text = str(value)
  return text if len(text) <= 120 else _sha(text)


@functools.cache
def resharder(sharding: Any) -> Callable:
  """The jitted identity whose outputs have ``sharding``: reshards a pytree device to device.

  XLA moves the data (an all-gather to a replicated sharding), never the
  host; one program per sharding and input layout (a new ``jax.jit`` of a
  lambda on each call compiled again each time: 6-10 programs, 0.25-0.45 s,
  per ``merge_across_processes`` of a streaming state).

  Args:
    sharding: the outputs' ``jax.sharding.Sharding`` (hashable).

  Returns:
    ``f(tree) -> tree`` with every leaf placed on ``sharding``.
  """
  return jax.jit(lambda tree: tree, out_shardings=sharding)


def on_every_process(fn: Callable[[], Any], *, same: Callable[[Any], dict] | None = None) -> Any:
  """``fn()`` on this process; in a multi-process run an error on any process raises on all.

  A check of a process's own shard (shapes, dtypes) that raises on that
  process only leaves the others waiting in the next collective until its
  timeout. Here every process runs ``fn`` and then takes part in one small
  all-gather (a few kilobytes per process): when ``fn`` raised a
  ``ValueError`` or ``TypeError`` anywhere, every process raises the same
  error, that of the lowest such process, prefixed with its index (chained
  to the local error where there is one). ``same(out)`` names what must
  agree across processes, ``{description: value}`` (the class count, the
  dtype): a difference raises the same ``ValueError`` on every process,
  naming both values and processes (values are compared by ``str``; when
  they do not fit in the all-gather, by a digest of them all, and the error
  names no value). Another set of descriptions on some process (another
  call) raises too. With one process this is ``fn()``.

  Args:
    fn: the local preparation; its ``ValueError`` / ``TypeError`` are shared.
    same: optional function of ``fn``'s result to ``{description: value}``;
      values are compared by ``str``.

  Returns:
    ``fn()``.

  Raises:
    ValueError, TypeError: as ``fn`` raised on some process, or a value of
      ``same`` differs between processes.

  Example:
    >>> on_every_process(lambda: 3, same=lambda k: {"the class count": k})
    3
  """
  if jax.process_count() == 1:
    return fn()
  from jax.experimental import multihost_utils

  err: Exception | None = None
  try:
    out = fn()
  except (ValueError, TypeError) as e:
    out, err = None, e
  if err is not None:
    kind = "TypeError" if isinstance(err, TypeError) else "ValueError"
    text = str(err)
    raw = json.dumps({"error": [kind, text]}).encode()
    while len(raw) > _AGREE_BYTES:  # shortened until it fits, escapes included
      text = text[: len(text) // 2] + " ..."
      raw = json.dumps({"error": [kind, text]}).encode()
  else:
    values = {} if same is None else {k: str(v) for k, v in same(out).items()}
    # every process sends its values' digest too; one whose values do not fit sends
    # only that, and then the digests are compared (raising here, on this process
    # alone, had left the others waiting in the all-gather; digesting only where a
    # payload was long had told an equal value apart from itself)
    whole = _sha(json.dumps(values))
    raw = json.dumps({"same": values, "whole": whole}).encode()
    if len(raw) > _AGREE_BYTES:
      raw = json.dumps({"same": None, "whole": whole}).encode()
  buf = np.zeros(_AGREE_BYTES, np.uint8)
  buf[: len(raw)] = np.frombuffer(raw, np.uint8)
  rows = np.asarray(multihost_utils.process_allgather(buf)).reshape(-1, _AGREE_BYTES)
  got = [json.loads(bytes(r).rstrip(b"\0").decode()) for r in rows]
  for k, g in enumerate(got):
    if "error" in g:
      cls = TypeError if g["error"][0] == "TypeError" else ValueError
      raise cls(f"on process {k}: {g['error'][1]}") from err
  if any(g["same"] is None for g in got):  # too long to send whole somewhere
    for k, g in enumerate(got[1:], 1):
      if g["whole"] != got[0]["whole"]:
        raise ValueError(
          "every argument besides the data must be the same on every process, but process "
          f"{k} differs from process 0 (compared by a digest: the values are too long to send)"
        )
    return out
  for k, g in enumerate(got[1:], 1):
    if list(g["same"]) != list(got[0]["same"]):  # (uc_sweep's from_logits: "C of logits"
      # against "C of probs" had read as a class count of None on process 1)
      raise ValueError(
        "every process must make the same call (every argument besides the data the same), "
        f"but process 0 compares {list(got[0]['same'])} and process {k} {list(g['same'])}"
      )
  for name, v0 in got[0]["same"].items():
    for k, g in enumerate(got[1:], 1):
      vk = g["same"].get(name)
      if vk != v0:
        raise ValueError(
          f"{name} must be the same on every process, got {v0} on process 0 and {vk} on process {k}"
        )
  return out


def check_binary(
  p: Any, y: Any, *, where: Any = None, p_name: str = "p", y_name: str = "y"
) -> Checked:
  """Validates a binary data set: ``(n,)`` probabilities in ``[0, 1]``, outcomes in ``{0, 1}``.

  Same checks and return value as :func:`check_predictions` (one fused pass).
  """
  x = _host_float(_array(p, p_name), p_name)
  if x.ndim != 1 or x.shape[0] == 0:
    raise ValueError(f"{p_name} must have shape (n,) with n >= 1, got shape {tuple(x.shape)}")
  n = x.shape[0]
  wh = check_where(where, n)
  yy, y_kind = _labels(y, n, 2, y_name, where)
  x, yy = _device(x), _device(yy)
  spec = _Spec(
    xs=(_Arr("unit", p_name, 1, simplex_atol(x.dtype)),),
    y_kind=y_kind,
    y_name=y_name,
    num_classes=2,
    has_where=wh is not None,
  )
  ok, count = _validate(spec, (x,), yy, wh, None)
  return Checked(upcast(x), _to_int32(yy), wh, None, ok, count, False)


def check_arrays(
  arrays: dict[str, Any],
  *,
  kind: str = "finite",
  labels: tuple[str, Any, int] | None = None,
  where: Any = None,
) -> tuple[tuple[jax.Array, ...], jax.Array | None, jax.Array | None, jax.Array | None, Any]:
  """Validates several same-length float arrays (and optional integer ids) in one pass.

  Args:
    arrays: ``{name: array}``, each with ``n`` rows, checked as ``kind``
      (``"finite"`` or ``"unit"``).
    labels: optional ``(name, ids, num_classes)``: ``(n,)`` integer ids in
      ``[0, num_classes)`` (e.g. bin ids).
    where: optional ``(n,)`` bool mask.

  Returns:
    ``(arrays in the compute dtype, int32 ids or None, where, ok, count)``
    as in :class:`Checked`.
  """
  names = list(arrays)
  xs = [as_float(arrays[k], k) for k in names]
  n = xs[0].shape[0] if xs and xs[0].ndim else None
  for k, x in zip(names, xs):
    if x.ndim == 0 or x.shape[0] != n:
      raise ValueError(f"{k} must have {n} rows like {names[0]}, got shape {tuple(x.shape)}")
  wh = check_where(where, n)
  y, y_kind, y_name, c = None, None, "labels", None
  if labels is not None:
    y_name, ids, c = labels
    y, y_kind = _labels(ids, n, c, y_name, where, rows_of=" and ".join(names), classes=False)
    y = _device(y)
  spec = _Spec(
    xs=tuple(_Arr(kind, k, x.ndim, SIMPLEX_ATOL) for k, x in zip(names, xs)),
    y_kind=y_kind,
    y_name=y_name,
    num_classes=c,
    has_where=wh is not None,
  )
  ok, count = _validate(spec, xs, y, wh, None)
  return tuple(xs), (None if y is None else _to_int32(y)), wh, ok, count


def check_probs(
  probs: Any,
  name: str = "probs",
  atol: float | None = None,
  min_classes: int = 2,
  *,
  rows: bool = False,
  fix: str | None = None,
) -> jax.Array:
  """Validates an ``(n, C)`` probability matrix; returns it in the compute dtype.

  Shapes always; values (finite, in ``[0, 1]``, rows summing to one within
  ``atol``, default :func:`simplex_atol` of the dtype) on concrete inputs, in
  one fused reduction. Traced inputs with bad values come back as NaN: the
  whole matrix, or with ``rows`` (for row-wise maps) only the bad rows.
  ``fix``: what the messages suggest instead of passing logits with
  ``from_logits=True``.

  Raises:
    ValueError: naming the problem, the count of bad rows and the first one.
  """
  x = _device(_matrix(probs, name, min_classes=min_classes))
  tol = simplex_atol(x.dtype) if atol is None else float(atol)
  a = _Arr("probs", name, 2, tol)
  if fix is not None:
    a = a._replace(fix=fix)
  ok, _ = _validate(_Spec(xs=(a,)), (x,))
  return _fold_matrix(upcast(x), ok, a, rows)


def check_logits(logits: Any, name: str = "logits", *, rows: bool = False) -> jax.Array:
  """Validates an ``(n, C)`` logit matrix (finite, ``n >= 1``, ``C >= 2``).

  Traced inputs with bad values come back as NaN: the whole matrix, or with
  ``rows`` (for row-wise maps) only the bad rows.
  """
  x = _device(_matrix(logits, name))
  a = _Arr("finite", name, 2, 0.0)
  ok, _ = _validate(_Spec(xs=(a,)), (x,))
  return _fold_matrix(upcast(x), ok, a, rows)


def check_labels(labels: Any, n: int, num_classes: int | None, name: str = "labels") -> jax.Array:
  """Validates ``(n,)`` labels in ``[0, num_classes)``; returns them as int32.

  Float labels must be integral; numpy integers wider than int32 are checked
  before the cast. Values are checked on concrete inputs (one fused pass).
  """
  return check_labels_ok(labels, n, num_classes, name)[0]


def check_labels_ok(
  labels: Any, n: int, num_classes: int | None, name: str = "labels"
) -> tuple[jax.Array, jax.Array | None]:
  """:func:`check_labels` and the traced check's flag (None after an eager check).

  For callers that must fold their result with it: traced labels out of
  range are not NaN-able, and an int32 label of 7 with ``C = 2`` would
  otherwise reach the result as a plausible number.
  """
  y, kind = _labels(labels, n, num_classes, name, None)
  y = _device(y)
  ok, _ = _validate(_Spec(y_kind=kind, y_name=name, num_classes=num_classes), (), y)
  return _to_int32(y), ok


def check_values(
  x: Any,
  name: str,
  *,
  bounds: tuple[float, float] | None = None,
  allow_inf: bool = False,
  tol: float | None = None,
  where: jax.Array | None = None,
) -> jax.Array:
  """Checks that a concrete array is finite (and within ``bounds`` if given).

  One fused reduction; returns the array in the compute dtype (traced inputs
  with bad values come back as NaN). ``allow_inf=True`` only rejects NaN.
  ``tol`` (default :func:`simplex_atol` of the dtype) widens the bounds.
  ``where`` (a validated ``(n,)`` bool mask of a 1-d ``x``) checks only the
  selected entries.
  """
  arr = as_float(x, name)
  if arr.size == 0:
    return arr
  flat = arr.reshape(1) if arr.ndim == 0 else arr
  t = simplex_atol(_array(x, name).dtype) if tol is None else float(tol)
  if bounds is not None:
    a = _Arr("unit", name, flat.ndim, t, float(bounds[0]), float(bounds[1]))
  else:
    a = _Arr("notnan" if allow_inf else "finite", name, flat.ndim, t)
  spec = _Spec(xs=(a,), has_where=where is not None, empty_where=True)
  ok, _ = _validate(spec, (flat,), None, where)
  return fold(arr, ok)


def check_finite(x: Any, name: str) -> jax.Array:
  """Raises if a concrete ``x`` holds NaN or ±inf (one fused reduction, no copy).

  Returns ``x`` in the compute dtype; a traced ``x`` holding NaN or ±inf comes
  back all NaN (use the result: the check cannot raise under ``jit``).
  """
  return check_values(x, name)


def check_features(
  features: Any,
  n: int,
  name: str = "features",
  where: jax.Array | None = None,
  *,
  rows: bool = False,
) -> jax.Array:
  """Validates an ``(n, D)`` feature matrix: ``D >= 1`` columns, finite values.

  With ``where`` (a validated ``(n,)`` bool mask, :func:`check_where`) only
  the selected rows are checked. Traced features with bad values come back
  as NaN: the whole matrix, or with ``rows`` (for row-wise maps, without
  ``where``) only the bad rows.
  """
  return check_features_ok(features, n, name, where, rows=rows)[0]


def check_features_ok(
  features: Any,
  n: int,
  name: str = "features",
  where: jax.Array | None = None,
  *,
  rows: bool = False,
) -> tuple[jax.Array, jax.Array | None]:
  """:func:`check_features` and the traced check's flag (None after an eager check).

  For callers that fold their result with it rather than rely on the NaN
  reaching it (a max over 4,096 or more entries skips a NaN on XLA:CPU).
  """
  f = as_float(features, name)
  if f.ndim != 2:
    raise ValueError(f"{name} must have shape (n, D), got shape {tuple(f.shape)}")
  if f.shape[0] != n:
    raise ValueError(f"{name} has {f.shape[0]} rows but the predictions have n = {n} rows")
  if f.shape[1] == 0:
    raise ValueError(
      f"{name} must have at least one column (shape (n, D) with D >= 1), got {tuple(f.shape)}"
    )
  a = _Arr("finite", name, 2, 0.0)
  spec = _Spec(xs=(a,), has_where=where is not None, empty_where=True)
  ok, _ = _validate(spec, (f,), None, where)
  return _fold_matrix(f, ok, a, rows and where is None), ok


def probs_or_logits(x: Any, name: str = "predictions") -> bool:
  """Whether ``(n, C)`` scores are probabilities (True) or logits (False), refusing to guess.

  The rule of :func:`looks_like_probs`, with three cases taken out. Scores
  whose every entry is finite and in ``[0, 1]`` and not all rows of which
  sum to one within the simplex tolerance are neither safely probabilities
  (the metrics reject them) nor safely logits (a softmax of probabilities is
  a silently wrong prediction), and they raise when every row sums to within
  0.5 of one (probabilities rounded to a few decimals, say) or some row sums
  to one within the tolerance (probabilities with a corrupt row: one row of
  zeros turned every row's softmax into the report's prediction, ConfECE
  0.72 for 0.025). Scores whose every row sums to one within the tolerance
  with an entry just outside ``[0, 1]`` (within ``[-0.05, 1.05]``: a
  ``-0.0015``) raise too: they had been read as logits. Logits of all
  zeros, or with every row summing far from one (``0.4 p``), stay logits.
  One more fused reduction, only when the scores are not probabilities.

  Args:
    x: ``(n, C)`` scores (numpy or JAX, concrete).
    name: what the scores are called in the message.

  Returns:
    ``True`` for probabilities, ``False`` for logits.

  Raises:
    ValueError: entries all in ``[0, 1]`` with rows not summing to one (the
      message names the first such row and the two ways out); or, for a
      wrong shape, the shape error.
    TypeError: ``x`` traced (under ``jax.jit`` or ``vmap``).

  Example:
    >>> import numpy as np
    >>> probs_or_logits(np.array([[0.2, 0.8]])), probs_or_logits(np.array([[2.0, -1.0]]))
    (True, False)
    >>> probs_or_logits(np.array([[0.2, 0.7]]))
    Traceback (most recent call last):
    ...
    ValueError: predictions: every entry lies in [0, 1] as in probabilities, but rows of ...
  """
  _host_decision(x, "probs_or_logits")
  if looks_like_probs(x):
    return True
  arr = _device(_matrix(x, name, min_classes=1))
  lo, hi, sum_lo, sum_hi, near = np.asarray(_ranges(arr)).tolist()
  tol = simplex_atol(arr.dtype)
  unit = lo >= 0.0 and hi <= 1.0  # NaN: False
  # every row summing to one, entries near [0, 1]: probabilities with an entry just outside
  # (-0.0015) had been read as logits, and their softmax reported (found by a review
  # helper); logits such as (2, -1) sum to one too, and stay logits
  ones = sum_lo >= 1.0 - tol and sum_hi <= 1.0 + tol and lo >= -0.05 and hi <= 1.05
  if not (ones or (unit and ((sum_lo >= 0.5 and sum_hi <= 1.5) or near <= tol))):
    return False
  try:
    check_probs(arr, name=name)
  except ValueError as e:
    found = str(e).split(" Pass logits with")[0]  # that advice is for the metrics' keyword
    seen = "every entry lies in [0, 1]" if unit else "every row sums to one"
    fix = (
      "Normalise the rows (p / p.sum(axis=1, keepdims=True))"
      if unit
      else "Clip the entries to [0, 1] and normalise the rows"
    )
    raise ValueError(
      f"{name}: {seen} as in probabilities, but {found} {fix}; if they are logits, add a "
      "constant to them (softmax is unchanged) so that they are not read as probabilities."
    ) from None
  return True  # pragma: no cover - looks_like_probs said no


@jax.jit
def _ranges(x: jax.Array) -> jax.Array:
  """``[min, max]`` of the ``(n, C)`` entries and of the row sums; all NaN if a sum is.

  The NaN comes from the sums, not the min / max: XLA:CPU's over 4,096 or more
  entries skip a NaN (a NaN entry of otherwise valid probabilities was then
  read as probabilities and refused with a message that contradicted itself).
  """
  s = jnp.sum(x, axis=1, dtype=jnp.float32)
  near = jnp.min(jnp.abs(s - 1.0))  # the row sum closest to one
  r = jnp.stack([jnp.min(x), jnp.max(x), jnp.min(s), jnp.max(s), near]).astype(jnp.float32)
  return jnp.where(jnp.isnan(jnp.sum(s)), jnp.nan, r)


def _host_decision(x: Any, fn: str) -> None:
  """Refuses a traced ``x``: ``fn`` returns a Python bool read from its values."""
  if not is_concrete(x):
    raise TypeError(
      f"{fn} needs a concrete array, not a traced one: it reads the values back to "
      "decide, in Python, what the scores are; call it outside jax.jit / vmap and pass "
      "from_logits to the metrics inside"
    )


def looks_like_probs(x: Any) -> bool:
  """The one rule for "logits or probabilities": True when ``x`` would pass as probabilities.

  An ``(n, C)`` array whose rows are finite, in ``[0, 1]`` and sum to one
  within :func:`simplex_atol` of its dtype is taken as probabilities;
  anything else as logits (which are then checked as logits). One fused
  device reduction; only a bool comes back.

  Args:
    x: ``(n, C)`` scores (numpy or JAX, concrete).

  Returns:
    ``True`` for probabilities, ``False`` otherwise (also for a wrong shape).

  Raises:
    TypeError: ``x`` traced (under ``jax.jit`` or ``vmap``): the answer is a
      Python bool read from the values.

  Example:
    >>> import numpy as np
    >>> looks_like_probs(np.array([[0.2, 0.8]])), looks_like_probs(np.array([[2.0, -1.0]]))
    (True, False)
  """
  _host_decision(x, "looks_like_probs")
  try:
    arr = _device(_matrix(x, "scores", min_classes=1))
  except ValueError:
    return False
  spec = _Spec(xs=(_Arr("probs", "scores", 2, simplex_atol(arr.dtype)),))
  ok, _ = np.asarray(_ok_jit(_anonymous(spec), (arr,), None, None, None)).tolist()
  return bool(ok)


# --------------------------------------------------------------------------
# Static arguments
# --------------------------------------------------------------------------


def check_num_bins(
  num_bins: Any, name: str = "num_bins", at_most: int | None = None
) -> jax.Array | int:
  """Validates a bin count: a positive int, or an integer array of them.

  Returns a Python int when given one, an int32 numpy array for a concrete
  array (numpy or JAX: read with one explicit ``device_get``; bin counts are
  small), and a traced int32 array otherwise. Integral floats (``15.0``) are
  accepted on concrete inputs; booleans, strings, ``None`` and non-integral
  values are not. With ``at_most`` (for rules where counts above it act as
  it), concrete counts are clamped to it before the ``MAX_NUM_BINS`` bound.
  """
  if isinstance(num_bins, bool | np.bool_):
    raise ValueError(f"{name} must be an integer >= 1, got {num_bins!r}")
  if isinstance(num_bins, int | np.integer):
    if int(num_bins) < 1:
      raise ValueError(f"{name} must be >= 1, got {int(num_bins)}")
    if at_most is not None:
      num_bins = min(int(num_bins), at_most)
    if int(num_bins) > MAX_NUM_BINS:
      raise ValueError(f"{name} must be <= {MAX_NUM_BINS}, got {int(num_bins)}")
    return int(num_bins)
  if num_bins is None or isinstance(num_bins, str | bytes):
    raise ValueError(f"{name} must be an integer >= 1 or an integer array, got {num_bins!r}")
  try:
    m = num_bins if isinstance(num_bins, jax.Array | jax.core.Tracer) else np.asarray(num_bins)
  except (TypeError, ValueError) as e:
    raise ValueError(f"{name} must be an integer or an integer array: {e}") from None
  if m.dtype == np.bool_ or not (
    jnp.issubdtype(m.dtype, jnp.integer) or jnp.issubdtype(m.dtype, jnp.floating)
  ):
    raise ValueError(f"{name} must be integer-valued, got dtype {m.dtype}")
  if is_concrete(m):
    a = np.asarray(jax.device_get(m))
    if jnp.issubdtype(a.dtype, jnp.floating) and not np.all(np.isfinite(a) & (a == np.round(a))):
      flat = a.ravel()
      bad = flat[~(np.isfinite(flat) & (flat == np.round(flat)))][:3]  # inf == round(inf)
      # a number as it was passed (2.5 read "got [2.5]"); an array's first bad entries
      got = f"{bad[0]:g}" if a.ndim == 0 else f"entries {', '.join(f'{v:g}' for v in bad)}"
      raise ValueError(f"{name} must be finite and integer-valued, got {got}")
    if a.size and a.min() < 1:
      raise ValueError(f"{name} must be >= 1, got minimum {a.min():g}")
    if at_most is not None:
      # compared, not np.minimum: that casts at_most to a's dtype (uint8 holds no n = 300)
      small = a.astype(np.int64) if jnp.issubdtype(a.dtype, jnp.integer) else a
      a = np.asarray(np.where(a > at_most, at_most, small))
    if a.size and a.max() > MAX_NUM_BINS:
      raise ValueError(f"{name} must be <= {MAX_NUM_BINS}, got maximum {a.max():g}")
    return a.astype(np.int32)
  if not jnp.issubdtype(m.dtype, jnp.integer):
    raise ValueError(f"{name} must have an integer dtype when traced, got {m.dtype}")
  return m.astype(jnp.int32)


def smallest_bandwidth(dtype, *, squared: bool) -> float:
  """The smallest kernel bandwidth computed in ``dtype`` without underflow.

  ``w`` itself must be a normal float (``jnp.finfo(dtype).tiny``, 1.2e-38 in
  float32: XLA flushes subnormals to 0) for kernels of ``d / w`` (Laplacian,
  MMCE); ``w**2`` must be one (``sqrt(tiny)``, 1.1e-19 in float32, 1.5e-154
  in float64) for kernels of ``d / w**2`` (Gaussian). Above it every kernel
  value is exact, down to the limit ``1[d = 0]``.
  """
  tiny = float(jnp.finfo(compute_dtype(dtype)).tiny)
  return math.sqrt(tiny) if squared else tiny


def check_bandwidth(
  bandwidth: Any, dtype: Any, *, name: str = "bandwidth", squared: bool
) -> tuple[jax.Array, jax.Array | None]:
  """A validated scalar kernel bandwidth in ``dtype``, and its traced validity flag.

  (Kernels of the kernel and local calibration errors; the smooth ECE has its
  own grid-size bound.)

  A concrete bandwidth (a Python or NumPy number, a 0-d array) must be a
  finite number ``> 0`` (not a bool), at least :func:`smallest_bandwidth`
  and (a Python or NumPy number) within ``dtype``'s range; otherwise
  ``ValueError`` naming ``name``. A traced one comes back with the
  flag ``isfinite(w) & (w >= smallest)`` to fold into the result (NaN), and
  ``None`` as the flag when it was checked here.
  """
  lo = smallest_bandwidth(dtype, squared=squared)
  if (
    bandwidth is None
    or isinstance(bandwidth, (bool, np.bool_, str, bytes))
    or getattr(bandwidth, "dtype", None) == np.bool_
  ):
    raise ValueError(f"{name} must be a finite number > 0, got {bandwidth!r}")
  if isinstance(bandwidth, (int, float, np.integer, np.floating)):
    v = check_float_option(bandwidth, name, positive=True, dtype=dtype)
    w = jnp.asarray(v, dtype)
  else:
    w = as_float(bandwidth, name)
    if w.ndim != 0:
      raise ValueError(f"{name} must be a scalar, got shape {tuple(w.shape)}")
    w = w.astype(dtype)
    if not is_concrete(w):  # checked mode raises the eager messages
      trace_check(jnp.isfinite(w), f"{name} must be a finite number, got {{w}}", w=w)
      trace_check(~jnp.isfinite(w) | (w > 0), f"{name} must be > 0, got {{w}}", w=w)
      trace_check(
        ~(w > 0) | (w >= lo),
        f"{name} = {{w}} is below the smallest supported bandwidth {lo:.3g} in "
        f"{jnp.dtype(dtype).name}; pass a larger {name}",
        w=w,
      )
      return w, jnp.isfinite(w) & (w >= lo)
    v = float(jax.device_get(w))  # a scalar
    if not (math.isfinite(v) and v > 0):
      raise ValueError(f"{name} must be a finite number > 0, got {v!r}")
  if v < lo:
    what = "its square underflows" if squared else "it is not a normal float"
    raise ValueError(
      f"{name} = {v:.3g} is below the smallest supported bandwidth {lo:.3g} "
      f"in {jnp.dtype(dtype).name} ({what}); pass a larger {name}"
    )
  return w, None


def both_ok(a: jax.Array | None, b: jax.Array | None) -> jax.Array | None:
  """The conjunction of two validity flags (``None``: checked eagerly, true)."""
  if a is None:
    return b
  return a if b is None else a & b


def check_flag(value: Any, name: str) -> bool:
  """A boolean option as a Python bool: ``True``/``False`` (or numpy bools) only.

  A string such as ``"no"`` is truthy: accepting it would silently flip the
  option, so anything but a bool raises.

  Example:
    >>> check_flag(False, "from_logits")
    False
    >>> check_flag("no", "from_logits")
    Traceback (most recent call last):
    ...
    ValueError: from_logits must be True or False, got 'no'
  """
  if isinstance(value, jax.core.Tracer):  # e.g. a flag passed through jax.jit positionally
    raise ValueError(
      f"{name} must be a Python True or False, not a traced value: under jax.jit mark it "
      f"static (static_argnames=({name!r},)) or close over it"
    )
  if not isinstance(value, bool | np.bool_):
    raise ValueError(f"{name} must be True or False, got {value!r}")
  return bool(value)


def check_unused(value: Any, name: str, reason: str) -> None:
  """Raises when an option that does not apply to the call was given (``value`` not ``None``).

  An option that a mode ignores would otherwise be silently dropped: the
  caller would read a number computed without it.

  Example:
    >>> check_unused(None, "class_weights", "applies to mode='classwise' only")
    >>> check_unused([1.0, 2.0], "class_weights", "applies to mode='classwise' only")
    Traceback (most recent call last):
    ...
    ValueError: class_weights applies to mode='classwise' only
  """
  if value is not None:
    raise ValueError(f"{name} {reason}")


@functools.cache
def _raw_key_shape(impl: str) -> tuple[int, ...]:
  """The shape of a raw key (``jax.random.PRNGKey``) of the PRNG implementation ``impl``.

  ``impl`` (``jax_default_prng_impl``) only keys the cache: the shape is read
  from an abstract key of the current default, nothing is computed.
  """
  del impl
  return tuple(jax.eval_shape(lambda: jax.random.key_data(jax.random.key(0))).shape)


def check_key(key: Any, name: str = "key") -> jax.Array:
  """Validates one JAX PRNG key (trace-time: dtype and shape only, no value is read).

  Accepts a typed key (``jax.random.key(seed)``, shape ``()``) or a raw
  1-d ``uint32`` key of the default implementation's shape
  (``jax.random.PRNGKey(seed)``: ``(2,)``, ``(4,)`` for ``rbg``), concrete or
  traced. An int seed, a batch
  of typed keys or any other array is rejected (JAX would raise a raw
  ``TypeError`` deep inside ``jax.random``).

  Args:
    key: the key.
    name: the argument's name in messages.

  Returns:
    ``key`` unchanged.

  Raises:
    ValueError: ``key`` is not a single PRNG key.

  Example:
    >>> import jax
    >>> check_key(jax.random.key(0)).shape
    ()
    >>> check_key(0)
    Traceback (most recent call last):
    ...
    ValueError: key must be a JAX PRNG key (jax.random.key(seed) or ...), got int
  """
  k = key if isinstance(key, jax.Array | jax.core.Tracer | np.ndarray) else None
  raw = k is not None and k.dtype == jnp.uint32 and k.ndim == 1
  want = _raw_key_shape(str(jax.config.jax_default_prng_impl))
  if raw and tuple(k.shape) != want:  # JAX's raw TypeError "expected key_data.shape to end with"
    raise ValueError(
      f"{name} is a raw uint32 key of shape {tuple(k.shape)}, but the default PRNG "
      f"implementation's keys have shape {want}: pass jax.random.key(seed), or "
      f"jax.random.PRNGKey(seed) made with the same implementation"
    )
  ok = k is not None and ((jnp.issubdtype(k.dtype, jax.dtypes.prng_key) and k.ndim == 0) or raw)
  if not ok:
    raise ValueError(
      f"{name} must be a JAX PRNG key (jax.random.key(seed) or jax.random.PRNGKey(seed)), "
      f"got {type(key).__name__}"
      + (f" of dtype {key.dtype} and shape {tuple(key.shape)}" if hasattr(key, "dtype") else "")
    )
  return key


def check_int(value: Any, name: str, minimum: int = 1, maximum: int | None = None) -> int:
  """A static integer argument ``>= minimum`` (and ``<= maximum``) as a Python int.

  Accepts Python and numpy integers (and integral 0-d arrays); rejects
  booleans, floats such as ``2.7`` (never silently truncated), strings and
  traced values.
  """
  if isinstance(value, bool | np.bool_) or isinstance(value, str | bytes) or value is None:
    raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
  if isinstance(value, jax.core.Tracer):
    raise ValueError(f"{name} must be a static Python int, got a traced value")
  if not isinstance(value, int | np.integer):
    a = np.asarray(value)
    if a.ndim != 0 or not np.issubdtype(a.dtype, np.integer):
      raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    value = a.item()
  if int(value) < minimum:
    raise ValueError(f"{name} must be an integer >= {minimum}, got {int(value)}")
  if maximum is not None and int(value) > maximum:
    raise ValueError(f"{name} must be an integer <= {maximum:,}, got {int(value):,}")
  return int(value)


_BINNINGS = ("fixed", "quantile")


def check_binning(binning: Any) -> str:
  """Validates the binning rule name: ``"fixed"`` or ``"quantile"``."""
  if not isinstance(binning, str) or binning not in _BINNINGS:
    raise ValueError(f"binning must be one of {_BINNINGS}, got {binning!r}")
  return binning


def bucket(k: int) -> int:
  """The smallest power of two ``>= k`` (and ``>= 1``)."""
  return 1 << max(0, int(k) - 1).bit_length()


class BinCounts(NamedTuple):
  """A validated bin-count argument (see :func:`check_bins`)."""

  m: Any  # Python int, int32 numpy array (concrete) or traced int32 array
  largest: int | None  # the largest concrete bin count (None when traced)
  max_bins: int  # static size of the per-bin arrays
  binning: str | None


def check_max_bins(max_bins: Any) -> None:
  """Raises unless ``max_bins`` is ``None`` or a static int in ``[1, MAX_NUM_BINS]``.

  Example:
    >>> check_max_bins(2**25)
    Traceback (most recent call last):
    ...
    ValueError: max_bins must be a static Python int in [1, 16777216], got 33554432
  """
  if max_bins is not None and (
    isinstance(max_bins, bool | np.bool_)
    or not isinstance(max_bins, int | np.integer)
    or max_bins < 1
    or max_bins > MAX_NUM_BINS
  ):
    raise ValueError(
      f"max_bins must be a static Python int in [1, {MAX_NUM_BINS}], got {max_bins!r}"
    )


def check_bins(num_bins: Any, binning: str, max_bins: Any, at_most: int | None = None) -> BinCounts:
  """Validates ``num_bins`` / ``binning`` / ``max_bins`` and picks the static bound.

  The bound that sizes the per-bin arrays (one compilation per value) is
  ``max_bins`` when given; otherwise the bin count, or the largest entry of
  a concrete array of them, rounded up to a power of two: a sweep of
  ``num_bins = 2..200`` one call at a time compiles 8 programs, not 199 (the
  true count is traced, so bins beyond it stay empty). A concrete array
  (numpy or JAX) is read on the host even when closed over inside a user's
  ``jit``; a *traced* bin count needs ``max_bins`` (it used to size the
  arrays at ``n``: 9.7 s instead of 0.04 s for 199 class-wise bin counts).
  The one home of this rule: every binned metric calls it.

  Args:
    num_bins: a Python int, an integer array (numpy or JAX), or a traced int.
    binning: ``"fixed"`` or ``"quantile"``.
    max_bins: ``None`` or a static Python int ``>= 1``.
    at_most: concrete counts above it act as it (:func:`check_num_bins`).

  Returns:
    :class:`BinCounts` ``(m, largest, max_bins, binning)``.

  Raises:
    ValueError: a bad bin count, binning or ``max_bins``, a count above
      ``max_bins``, a traced count without ``max_bins``, or per-bin arrays
      (the number of counts times the bound) above ``2^31 - 1`` entries.

  Example:
    >>> check_bins(15, "fixed", None).max_bins, check_bins([3, 70], "quantile", None).max_bins
    (16, 128)
  """
  binning = check_binning(binning)
  m = check_num_bins(num_bins, at_most=at_most)
  check_max_bins(max_bins)
  if isinstance(m, int):
    largest = m
  elif isinstance(m, np.ndarray):
    largest = int(m.max()) if m.size else 0
  else:
    if max_bins is None:
      raise ValueError(
        "num_bins is traced (an argument of a jitted or vmapped function), so the size of "
        "the per-bin arrays cannot be read from it: pass a static bound, e.g. max_bins=256, "
        "or close over a concrete array of bin counts instead"
      )
    largest = None
  bound = int(max_bins) if max_bins is not None else bucket(largest)
  if largest is not None and largest > bound:
    shown = str(largest)
    if at_most is not None:  # name the count the caller gave (n = 60 for 100 read "60")
      given = check_num_bins(num_bins)
      given = given if isinstance(given, int) else int(np.max(given))
      if given != largest:
        shown = f"{given} (as {largest}: counts above n = {at_most} act as n)"
    raise ValueError(f"num_bins = {shown} exceeds max_bins = {bound}")
  check_bin_arrays(1 if isinstance(m, int) else int(np.size(m)), bound)  # (static shapes)
  return BinCounts(m, largest, bound, binning)


def check_bin_arrays(count: int, bound: int) -> None:
  """Refuses per-bin arrays of ``count`` bin counts x ``bound`` bins above :data:`MAX_ENTRIES`.

  ``num_bins = np.arange(1, 100_000)`` sized them 99,999 x 131,072 and ran
  out of memory (262 GB); the metrics (:func:`check_bins`) and
  ``jaxcal.evaluate`` check the same product.
  """
  check_entries(
    count * bound,
    f"the per-bin arrays of {count:,} bin counts x max_bins = {bound:,} bins",
    "pass fewer bin counts at once (over several calls), or smaller ones",
  )


def check_int_option(
  value: Any,
  name: str,
  *,
  minimum: int | None = None,
  maximum: int | None = None,
  hint: str | None = None,
) -> int:
  """Validates an integer option (a Python or NumPy int, not a bool or a float).

  ``hint`` follows the message of a value above ``maximum`` after a colon:
  why that bound holds and which argument helps (a default that a small data
  set cannot take, say).

  Example:
    >>> check_int_option(15, "num_bins", minimum=1)
    15
    >>> check_int_option(2.7, "num_bins", minimum=1)
    Traceback (most recent call last):
    ...
    ValueError: num_bins must be an int, got 2.7 (float)
    >>> check_int_option(15, "num_bins", minimum=1, maximum=8, hint="n = 8 samples")
    Traceback (most recent call last):
    ...
    ValueError: num_bins must be <= 8, got 15: n = 8 samples
  """
  if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
    raise ValueError(f"{name} must be an int, got {value!r} ({type(value).__name__})")
  v = int(value)
  if minimum is not None and v < minimum:
    raise ValueError(f"{name} must be >= {minimum}, got {v}")
  if maximum is not None and v > maximum:
    tail = "" if hint is None else f": {hint}"
    raise ValueError(f"{name} must be <= {maximum}, got {v}{tail}")
  return v


#: Most entries jaxcal lets one array it allocates hold: int32 positions (XLA:CPU
#: aborts the process on some programs beyond, e.g. a ``(B, B)`` kernel), and far
#: past any device's memory in float32 (8 GB).
MAX_ENTRIES = 2**31 - 1


def check_entries(entries: int, what: str, fix: str) -> None:
  """Refuses an array of more than :data:`MAX_ENTRIES` entries before it is allocated.

  A size the caller asked for (``sample_linear(key, 2**31, 5)``, a ``(n, n)``
  kernel of 300,000 points) ended in XLA's out-of-memory error, a raw
  ``OverflowError``, or an aborted process when the failed buffer was read.

  Args:
    entries: the array's number of entries (a Python int).
    what: the array, for the message (``"the utilities (m, C)"``).
    fix: what to pass instead, for the message.

  Raises:
    ValueError: ``entries > MAX_ENTRIES``.

  Example:
    >>> check_entries(2**31, "the utilities (m, C) = (2**31, 1)", "fewer utilities")
    Traceback (most recent call last):
    ...
    ValueError: the utilities (m, C) = (2**31, 1) would hold 2,147,483,648 entries, above 2^31 - 1 = 2,147,483,647: fewer utilities
  """
  if int(entries) > MAX_ENTRIES:
    raise ValueError(
      f"{what} would hold {int(entries):,} entries, above 2^31 - 1 = {MAX_ENTRIES:,}: {fix}"
    )


#: Seeds ``jax.random.key`` takes: int64 (2**63 raised Python's "int too large to
#: convert to C long" from inside JAX).
SEED_RANGE = (-(2**63), 2**63 - 1)


def check_seed(value: Any, name: str = "seed", *, minimum: int = SEED_RANGE[0]) -> int:
  """Validates a seed: an int in ``[minimum, 2**63 - 1]`` (``jax.random.key``'s int64).

  ``minimum=0`` where numpy's generator takes the seed too (it refuses
  negative ones).

  Example:
    >>> check_seed(7)
    7
    >>> check_seed(2**63)
    Traceback (most recent call last):
    ...
    ValueError: seed must be <= 9223372036854775807, got 9223372036854775808: jax.random.key takes a 64-bit seed
  """
  return check_int_option(
    value, name, minimum=minimum, maximum=SEED_RANGE[1], hint="jax.random.key takes a 64-bit seed"
  )


def seed_key(seed: Any, name: str = "seed", *, minimum: int = SEED_RANGE[0]) -> jax.Array:
  """The PRNG key of a seed (checked by :func:`check_seed`), from all 64 bits of it.

  ``jax.random.key(seed)`` without ``jax_enable_x64`` keeps the seed's low
  32 bits: seeds 7 and ``2**32 + 7`` gave one key, and so did -1 and
  ``2**32 - 1`` (two "different" seeds, one run, no error). Here every
  int64 seed has its own key, the one ``jax.random.key`` makes under x64,
  whatever the setting; for ``0 <= seed < 2**32`` that is ``jax.random.key(seed)``.
  Call it eagerly (a seed is a Python int).

  Example:
    >>> import jax
    >>> jax.random.key_data(seed_key(2**32 + 7)).tolist(), jax.random.key_data(seed_key(7)).tolist()
    ([1, 7], [0, 7])
    >>> jax.random.key_data(jax.random.key(7)).tolist()
    [0, 7]
  """
  seed = check_seed(seed, name, minimum=minimum)
  if 0 <= seed < 2**32 or jax.config.jax_enable_x64:
    return jax.random.key(seed)
  with jax.enable_x64(True):  # scoped to the key's making: no global flag
    return jax.random.key(seed)


def check_float_option(
  value: Any,
  name: str,
  *,
  minimum: float | None = None,
  positive: bool = False,
  dtype: Any = None,
) -> float:
  """Validates a finite real option (``positive``: ``> 0``; ``minimum``: ``>=``).

  With ``dtype`` (a floating type the option is computed in) a magnitude
  beyond that type's range is refused too: ``1e39`` is ``inf`` in float32,
  which the computation would carry on with (a learning rate or loss weight
  of ``inf``: a non-finite loss epochs later; a bandwidth of ``inf``: a
  numpy overflow warning and a flat kernel).

  Example:
    >>> check_float_option(1e-6, "tol", minimum=0.0)
    1e-06
    >>> check_float_option(float("nan"), "tol", minimum=0.0)
    Traceback (most recent call last):
    ...
    ValueError: tol must be a finite number, got nan

  A concrete 0-d numpy or JAX real array (a metric's value) is read as its
  number; a traced one raises (an option must be static).
  """
  if (
    isinstance(value, np.ndarray | jax.Array)
    and not isinstance(value, jax.core.Tracer)
    and value.ndim == 0
    and (jnp.issubdtype(value.dtype, jnp.integer) or jnp.issubdtype(value.dtype, jnp.floating))
  ):
    value = value.item()
  if isinstance(value, jax.core.Tracer):
    raise ValueError(
      f"{name} must be a static number, got a traced value (an argument of a jitted or "
      "vmapped function); pass it as a Python number"
    )
  if isinstance(value, (bool, np.bool_)) or not isinstance(
    value, (int, float, np.integer, np.floating)
  ):
    raise ValueError(f"{name} must be a number, got {value!r} ({type(value).__name__})")
  v = float(value)
  if not np.isfinite(v):
    raise ValueError(f"{name} must be a finite number, got {v}")
  if positive and v <= 0:
    raise ValueError(f"{name} must be > 0, got {v}")
  if minimum is not None and v < minimum:
    raise ValueError(f"{name} must be >= {minimum}, got {v}")
  if dtype is not None and abs(v) > float(jnp.finfo(dtype).max):
    raise ValueError(
      f"{name} = {v:g} is beyond {jnp.dtype(dtype).name}'s range "
      f"({float(jnp.finfo(dtype).max):.2g}), where the computation runs"
    )
  return v
