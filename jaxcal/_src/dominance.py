"""Dominance between predictors, rank correlations and the bootstrap (Lu et al. 2025).

The truthful-calibration papers compare predictors by a family of proper
losses: ``f`` *dominates* ``g`` when every loss of ``f`` is ``<=`` that of
``g`` and at least one is strictly smaller. The *maximum dominance set* is the
longest chain of that partial order; a calibration error "preserves
dominance" when the order it induces on the chain agrees with the chain order,
measured by a rank correlation (Spearman, Kendall). Binning robustness is
reported as rank correlations across predictors with a ``±1.96 sd`` interval
from a bootstrap over test samples.

* :func:`dominance_matrix`, :func:`dominance_chain` -- the partial order and
  its longest chain (longest path in the DAG). ``dominance_chain`` is numpy
  (its output length depends on the values), ``dominance_matrix`` is JAX.
* :func:`rank_correlation` -- Spearman (Pearson of average ranks) and Kendall
  tau-b, with tie handling identical to ``scipy.stats.spearmanr`` /
  ``scipy.stats.kendalltau``; jit- and vmap-able.
* :func:`bootstrap` -- deprecated, see :mod:`jaxcal.bootstrap` (percentile,
  BCa, basic and normal intervals); ``resample_indices`` and
  ``BootstrapResult`` are re-exported from there.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcal._src import validation as V
from jaxcal._src.bootstrap import BootstrapResult, _normal_confidence, resample_indices
from jaxcal._src.bootstrap import bootstrap as _bootstrap
from jaxcal._src.numerics import map_batches

__all__ = [
  "dominance_matrix",
  "dominance_chain",
  "rank_correlation",
  "resample_indices",
  "bootstrap",
  "BootstrapResult",
]


# --------------------------------------------------------------------------
# Dominance partial order and its longest chain.
# --------------------------------------------------------------------------


def _check_loss_table(losses: Any, name: str = "losses") -> None:
  try:
    shape = np.shape(losses)
  except ValueError as e:  # a ragged list: numpy's message does not name the argument
    raise ValueError(f"{name} must be a 2-D (num_predictors, num_losses) table: {e}") from None
  if len(shape) != 2:
    raise ValueError(
      f"{name} must be a 2-D (num_predictors, num_losses) table, got shape {tuple(shape)}"
    )
  if shape[0] < 1 or shape[1] < 1:
    raise ValueError(
      f"{name} must have at least one predictor and one loss, got shape {tuple(shape)}"
    )


def _exact_order(x: Any, name: str) -> Any:
  """A host array whose values the compute dtype would round, as order-preserving ranks.

  ``float64``, ``int64`` or ``int32`` values on the host become float32 on the
  device without x64 (``0.30000001`` and ``0.3`` tie; so do ``1,700,000,000``
  and ``1,700,000,050``). Where only the order of the values matters (the
  dominance relation, rank correlations), their dense ranks among the finite
  values replace them, exactly (up to ``2**24`` distinct values); NaN and
  ±inf stay as they are, for the value checks and their messages. JAX arrays
  and values the compute dtype holds exactly are returned as they are, JAX
  integers it would round as their ranks (:func:`_integer_ranks`).
  """
  if isinstance(x, jax.Array | jax.core.Tracer):
    # 2**24 + 1 and 2**24 as int32 became one float32 (a dominance was missed)
    return _integer_ranks(x) if jnp.issubdtype(x.dtype, jnp.integer) else x
  if isinstance(x, np.ma.MaskedArray):
    x = V.host_array(x, name)  # masked entries refused; its data otherwise
  try:
    a = V.host_array(x, name)  # native byte order
  except ValueError:  # ragged and the like: named by the caller's checks
    return x
  if a.dtype == np.bool_ or not (np.issubdtype(a.dtype, np.number) and np.isrealobj(a)):
    return x  # rejected (or exact) downstream
  dt = V.compute_dtype(a.dtype)
  with np.errstate(invalid="ignore", over="ignore"):
    if np.array_equal(a.astype(dt).astype(a.dtype), a, equal_nan=True):
      return a
  finite = np.isfinite(a)
  values, rank = np.unique(a[finite], return_inverse=True)
  if values.size > 2**24:  # pragma: no cover - float32 ranks would round too
    return x
  out = np.where(np.isnan(a), np.nan, np.where(a > 0, np.inf, -np.inf)).astype(np.float32)
  out[finite] = rank.reshape(-1)
  return out


def _integer_ranks(x: jax.Array) -> jax.Array:
  """JAX integers the compute dtype would round, as order-preserving ranks (on the device).

  ``rank = #{entries < x}`` over the whole array (ties share it), in the
  compute dtype (float32, or float64 under x64), which holds every rank of a
  table of at most ``2**24`` entries. Integers the compute dtype holds (int16;
  int32 under x64) are returned as they are. Works on tracers.
  """
  dt = V.compute_dtype(x.dtype)
  exact = jnp.finfo(dt).nmant + 1  # the dtype holds every integer below 2**exact
  bits = np.iinfo(x.dtype).bits - (1 if jnp.issubdtype(x.dtype, jnp.signedinteger) else 0)
  if bits <= exact or x.size > 2**exact:
    return x
  flat = x.reshape(-1)
  rank = jnp.searchsorted(jnp.sort(flat), flat, side="left")
  return rank.reshape(x.shape).astype(dt)


def dominance_matrix(losses: ArrayLike) -> jax.Array:
  """Pairwise dominance relation of a loss table.

  ``D[f, g] = all_l (L[f, l] <= L[g, l])  and  any_l (L[f, l] < L[g, l])``:
  row ``f`` dominates row ``g`` when no loss of ``f`` is larger and at least
  one is strictly smaller. The relation is a strict partial order
  (irreflexive, antisymmetric, transitive); two rows with identical losses do
  not dominate each other. Comparisons are exact on the given values: round
  the table first to treat near-equal losses as equal. The paper's current
  text (§5.2) forms "the induced dominance partial order" of the proper
  losses without a rule for ties; its first arXiv version stated the rule
  two ways (Definition 2.9: every loss lower or equal; footnote 5 of §5.3:
  every loss smaller). This one lies between them, and differs from either
  only where losses tie (equal classification errors on a finite test set).

  Args:
    losses: ``(p, L)`` table, one row per predictor and one column per loss
      (lower is better), e.g. mean Brier, log, spherical, classification error.

  Returns:
    ``(p, p)`` boolean array; works under ``jax.jit`` / ``jax.vmap``. A
    boolean matrix cannot hold NaN: under a transformation (traced losses,
    which cannot be checked) a table with a NaN or ±inf entry gives the
    all-``False`` matrix (NaN compares false), i.e. "no predictor dominates
    another", so check the losses before tracing (or wrap the call in
    :func:`jaxcal.checked`, which raises).

  Memory: the ``(p, p)`` result, and the ``(p, p, L)`` comparisons behind it
  in row blocks of at most ``2^26`` entries (6,000 predictors with 100
  losses held 3.6 GB of them at once); the values are the same.

  Raises:
    ValueError: the table is not 2-D or is empty, is not real-valued
      (complex, strings), holds NaN or ±inf (eager calls), or a ``(p, p)``
      result of more than ``2^31 - 1`` entries (``p > 46,340``; refused
      before anything is allocated: ``p = 10^6`` ran out of memory).

  Example:
    >>> import jax.numpy as jnp
    >>> dominance_matrix(jnp.array([[0.1, 0.2], [0.3, 0.2], [0.0, 0.9]])).astype(int).tolist()
    [[0, 1, 0], [0, 0, 0], [0, 0, 0]]

  Reference: Lu, Wu, Hartline & Hu (2025), arXiv:2510.06388, §4 (Blackwell
  dominance, Theorem 4.1) and §5.2 (the dominance partial order induced by
  the proper losses); v1, Definition 2.9 and §5.3 (footnote 5).
  """
  _check_loss_table(losses)
  p, num_losses = np.shape(losses)
  V.check_entries(
    p * p,
    f"the dominance matrix (p, p) = ({p:,}, {p:,})",
    "compare fewer predictors at once (dominance_chain needs only O(p L) memory)",
  )
  # NaN first (its own message), then ±inf; both fused reductions of a small
  # table. Traced bad values come back as NaN: every comparison is False.
  losses = _exact_order(losses, "losses")
  x = V.check_values(V.check_values(losses, "losses", allow_inf=True), "losses")
  if p * p * num_losses <= _COMPARISONS:
    return _dominates(x, x)
  rows = max(1, _COMPARISONS // (p * num_losses))  # the same booleans, row block by row block
  return _dominance_blocks(x, rows)


@functools.partial(jax.jit, static_argnames="rows")
def _dominance_blocks(x: jax.Array, rows: int) -> jax.Array:
  """:func:`_dominates` of ``x`` against itself, ``rows`` rows at a time (compiled once per shape).

  An eager scan of a new closure on each call compiled again (0.13 s a call at
  ``p = 1,000``, ``L = 100``; 0.04 s compiled).
  """
  return map_batches(lambda row: _dominates(row[None], x)[0], x, rows)


#: Most ``(rows, p, L)`` comparisons :func:`dominance_matrix` holds at once.
_COMPARISONS = 2**26


def _dominates(a: jax.Array, x: jax.Array) -> jax.Array:
  """``D[f, g]`` for the rows ``f`` of ``a`` against every row ``g`` of ``x``."""
  le = jnp.all(a[:, None, :] <= x[None, :, :], axis=-1)
  lt = jnp.any(a[:, None, :] < x[None, :, :], axis=-1)
  return le & lt


def dominance_chain(losses: ArrayLike) -> np.ndarray:
  """Longest chain of the dominance partial order (the maximum dominance set).

  ``f`` dominates ``g`` when ``L[f, l] <= L[g, l]`` for every loss ``l`` and
  ``L[f, l] < L[g, l]`` for at least one (see :func:`dominance_matrix`).
  The chain ``i_1, ..., i_K`` satisfies ``i_1`` dominates ``i_2`` dominates
  ... ``i_K`` and has the largest ``K``: the longest path in the DAG of the
  relation. It is found by dynamic programming over a lexicographic sort of
  the rows, which is a topological order (if ``f`` dominates ``g``, ``f``
  precedes ``g`` lexicographically); cost ``O(p^2 L)`` time, ``O(p L)``
  memory.

  Ties: rows with identical losses are incomparable, so a chain holds at most
  one of them. Among several longest chains the one returned is
  deterministic: it ends at the smallest index whose longest chain is
  maximal, and each predecessor is the smallest index among the dominators
  with a longest chain one shorter. Comparisons are exact; round the table
  first to treat near-equal losses as equal.

  Args:
    losses: ``(p, L)`` table, one row per predictor, one column per loss
      (lower is better). Must be concrete (not traced): the chain length
      depends on the values.

  Returns:
    ``(K,)`` int64 numpy array of row indices, from the dominating (best)
    predictor to the most dominated (worst); ``K >= 1``.

  Raises:
    ValueError: the table is not 2-D, is empty, is not real-valued (complex,
      strings), holds NaN or ±inf, or is traced.

  Example:
    >>> import numpy as np
    >>> L = np.array([[0.3, 0.5],   # 0
    ...               [0.1, 0.2],   # 1: dominates 0, 2 and 3
    ...               [0.2, 0.4],   # 2: dominates 0
    ...               [0.0, 0.9]])  # 3: incomparable with 1 and 2
    >>> dominance_chain(L).tolist()
    [1, 2, 0]

  Reference: Lu, Wu, Hartline & Hu (2025), arXiv:2510.06388, §5.2 ("maximum
  dominance set, namely the largest subset that admits a total order");
  v1, §5.3 (footnote 5: "the longest path" of the dominance partial order).
  """
  if not V.is_concrete(losses):
    raise ValueError(
      "dominance_chain needs concrete losses: its output length depends "
      "on the values, so call it outside jax.jit / jax.vmap"
    )
  _check_loss_table(losses)
  x = V.host_array(losses, "losses")
  if not (
    np.issubdtype(x.dtype, np.integer)
    or jnp.issubdtype(x.dtype, jnp.floating)
    or x.dtype == np.bool_
  ):
    raise ValueError(f"losses must be real numeric, got dtype {x.dtype}")
  if x.dtype == np.bool_ or jnp.issubdtype(x.dtype, jnp.floating):
    x = x.astype(np.float64)  # integers are compared as they are (int64 above 2**53 exactly)
  for bad, what in ((np.isnan(x), "NaN"), (np.isinf(x), "infinite (±inf)")):
    if bad.any():
      i, j = np.argwhere(bad)[0]
      raise ValueError(
        f"losses contains {int(bad.sum())} {what} value(s); the first is row {i}, "
        f"column {j}: {x[i, j]}"
      )
  p = x.shape[0]
  # Lexicographic order of the rows (first column most significant), ties by
  # index: every dominator of g sorts strictly before g.
  order = np.lexsort(tuple(x[:, l] for l in reversed(range(x.shape[1]))))
  longest = np.zeros(p, np.int64)  # longest chain ending at each row
  parent = np.full(p, -1, np.int64)
  done = np.zeros(p, bool)
  for g in order:
    dom = done & np.all(x <= x[g], axis=1) & np.any(x < x[g], axis=1)
    if dom.any():
      best = longest[dom].max()
      parent[g] = np.flatnonzero(dom & (longest == best))[0]
      longest[g] = best + 1
    else:
      longest[g] = 1
    done[g] = True
  end = int(np.flatnonzero(longest == longest.max())[0])
  chain = [end]
  while parent[chain[-1]] >= 0:
    chain.append(int(parent[chain[-1]]))
  return np.asarray(chain[::-1], np.int64)


# --------------------------------------------------------------------------
# Rank correlations (scipy-compatible ties).
# --------------------------------------------------------------------------


def _average_ranks(x: jax.Array) -> jax.Array:
  """1-based ranks, ties get the average of their positions (scipy 'average')."""
  s = jnp.sort(x)
  lo = jnp.searchsorted(s, x, side="left")
  hi = jnp.searchsorted(s, x, side="right")
  return (lo + hi + 1).astype(x.dtype) / 2


def _spearman(a: jax.Array, b: jax.Array) -> jax.Array:
  ra = _average_ranks(a)
  rb = _average_ranks(b)
  ra = ra - jnp.mean(ra)
  rb = rb - jnp.mean(rb)
  return jnp.sum(ra * rb) / jnp.sqrt(jnp.sum(ra * ra) * jnp.sum(rb * rb))


def _kendall(a: jax.Array, b: jax.Array) -> jax.Array:
  """Kendall tau-b: ``sum s_a s_b / sqrt(sum |s_a| * sum |s_b|)`` over pairs.

  ``s_a = sign(a_i - a_j)``. Each row's pair counts are int32 (at most ``p``,
  exact), summed over the rows in the scores' float dtype: an int32 sum of
  all ``p^2`` pairs overflowed above 46,340 samples (tau 1.135 at 50,000).
  Rows are processed in blocks, so memory is ``O(p * block)``.
  """

  def row(ab):
    ai, bi = ab
    sa = (ai > a).astype(jnp.int32) - (ai < a).astype(jnp.int32)
    sb = (bi > b).astype(jnp.int32) - (bi < b).astype(jnp.int32)
    return jnp.stack([jnp.sum(sa * sb), jnp.sum(jnp.abs(sa)), jnp.sum(jnp.abs(sb))])

  t = jnp.sum(map_batches(row, (a, b), 256).astype(a.dtype), axis=0)
  return t[0] / jnp.sqrt(t[1] * t[2])


@functools.partial(jax.jit, static_argnames="method")
def _rank_corr_core(a: jax.Array, b: jax.Array, method: str) -> jax.Array:
  dtype = jnp.result_type(a.dtype, b.dtype)
  a = a.astype(dtype)
  b = b.astype(dtype)
  return _spearman(a, b) if method == "spearman" else _kendall(a, b)


@V.outside_explicit_context
def rank_correlation(a: ArrayLike, b: ArrayLike, method: str = "spearman") -> jax.Array:
  """Rank correlation between two score vectors, with scipy's tie handling.

  * ``"spearman"``: Pearson correlation of the average ranks (tied values get
    the mean of their positions) -- ``scipy.stats.spearmanr``.
  * ``"kendall"``: Kendall's tau-b,
    ``tau_b = (P - Q) / sqrt((n0 - n1)(n0 - n2))`` with ``P``/``Q`` the
    concordant/discordant pairs, ``n0 = p(p-1)/2`` and ``n1``/``n2`` the
    pairs tied in ``a``/``b`` -- ``scipy.stats.kendalltau`` (default
    ``variant="b"``). ``O(p^2)`` time, ``O(p)`` memory.

  Args:
    a: ``(p,)`` values (e.g. the position of each predictor in a dominance
      chain, or a loss); integers, booleans and ±inf are fine.
    b: ``(p,)`` values (e.g. a calibration error of the same predictors).
    method: ``"spearman"`` or ``"kendall"`` (static).

  Returns:
    Scalar in ``[-1, 1]``. Works under ``jax.jit`` / ``jax.vmap``; there a
    constant input gives NaN (as scipy does), since values cannot be checked.

  Raises:
    ValueError: unknown method, inputs not 1-D, lengths differ, fewer than 2
      values, NaN, or a constant input (eager calls).

  Example:
    >>> import jax.numpy as jnp
    >>> round(float(rank_correlation(jnp.array([1, 2, 3, 4]), jnp.array([1.0, 3.0, 2.0, 4.0]))), 4)
    0.8
    >>> round(float(rank_correlation(jnp.array([1, 2, 3, 4]), jnp.array([1.0, 3.0, 2.0, 4.0]),
    ...                              method="kendall")), 4)
    0.6667

  Reference: Lu, Wu, Hartline & Hu (2025), arXiv:2510.06388, §5.2 and Table 1.
  """
  if method not in ("spearman", "kendall"):
    raise ValueError(f"method must be 'spearman' or 'kendall', got {method!r}")
  xa = V.as_float(_exact_order(a, "a"), "a")  # rank statistics: only the order matters
  xb = V.as_float(_exact_order(b, "b"), "b")
  for name, x in (("a", xa), ("b", xb)):
    if x.ndim != 1:
      raise ValueError(f"{name} must be 1-D, got shape {tuple(x.shape)}")
  if xa.shape[0] != xb.shape[0]:
    raise ValueError(f"a and b must have the same length, got {xa.shape[0]} and {xb.shape[0]}")
  if xa.shape[0] < 2:
    raise ValueError(f"a rank correlation needs at least 2 values, got {xa.shape[0]}")
  xa = V.check_values(xa, "a", allow_inf=True)
  xb = V.check_values(xb, "b", allow_inf=True)
  if V.is_concrete(xa, xb):
    with jax.ensure_compile_time_eval():  # arrays closed over by a user's jit: read now
      const = jax.device_get(_constant(xa, xb))  # two bools, one device pass
    for name, c in zip(("a", "b"), const):
      if c:
        raise ValueError(f"{name} is constant: the rank correlation is undefined")
  else:  # NaN (as scipy); checked mode raises as an eager call does
    for name, c in zip(("a", "b"), _constant(xa, xb)):
      V.trace_check(~c, f"{name} is constant: the rank correlation is undefined")
  return _rank_corr_core(xa, xb, method)


@jax.jit
def _constant(a: jax.Array, b: jax.Array) -> tuple[jax.Array, jax.Array]:
  return jnp.all(a == a[0]), jnp.all(b == b[0])


# --------------------------------------------------------------------------
# Bootstrap over samples: moved to jaxcal.bootstrap.
# --------------------------------------------------------------------------


def bootstrap(
  key: jax.Array,
  fn: Callable[..., Any],
  *arrays: ArrayLike,
  num_resamples: int = 200,
  sample_axis: int | Sequence[int] = 0,
  groups: Sequence[int] | None = None,
  z: float = 1.96,
  batch_size: int | None = 8,
) -> BootstrapResult:
  """Deprecated: use :func:`jaxcal.bootstrap.bootstrap` (percentile, BCa, basic or normal).

  Kept for old code: the interval is ``estimate ± z·sd`` (the new function's
  ``method="normal"`` with ``confidence = erf(z/√2)``), with the old
  defaults (200 resamples, batches of 8). Resample ``b`` now uses the key
  ``jax.random.split(key, num_resamples)[b]`` (see
  :func:`jaxcal.bootstrap.resample_indices`), so the samples differ from
  jaxcal 0.1.0's for the same key. Emits a ``DeprecationWarning``.

  Args:
    key: a ``jax.random`` key.
    fn: ``fn(*arrays) -> pytree of arrays``, traceable.
    *arrays: data; each is indexed along its ``sample_axis``.
    num_resamples: ``B >= 2``.
    sample_axis: the sample axis of every array (an int, or one per array).
    groups: one integer per array; arrays of a group share the index sets.
    z: interval half-width in standard deviations.
    batch_size: resamples evaluated together (``None``: automatic).

  Returns:
    :class:`jaxcal.bootstrap.BootstrapResult` ``(estimate, sd, lo, hi, samples)``.

  Example:
    >>> import warnings, jax, jax.numpy as jnp
    >>> with warnings.catch_warnings():
    ...   warnings.simplefilter("ignore", DeprecationWarning)
    ...   r = bootstrap(jax.random.key(0), jnp.mean, jnp.arange(100.0), num_resamples=50)
    >>> bool(jnp.allclose(r.hi - r.estimate, 1.96 * r.sd))
    True

  Reference: Lu, Wu, Hartline & Hu (2025), "Truthful Calibration Errors for
  Multi-Class Prediction", arXiv:2510.06388, Table 1 ("±1.96 standard
  deviations").
  """
  warnings.warn(
    "jaxcal.dominance.bootstrap is deprecated; use jaxcal.bootstrap.bootstrap "
    "(method='normal' gives the same estimate ± z·sd interval, confidence=erf(z/√2))",
    DeprecationWarning,
    stacklevel=V.caller_stacklevel(),
  )
  return _bootstrap(
    key,
    fn,
    *arrays,
    num_resamples=num_resamples,
    method="normal",
    confidence=_normal_confidence(z),
    sample_axis=sample_axis,
    groups=groups,
    batch_size=batch_size,
  )
