"""Isotonic (L2, increasing) regression in pure JAX: PAV without host callbacks.

The pool-adjacent-violators algorithm (PAV) repeatedly merges adjacent
blocks whose means violate monotonicity; any such pair belongs to one block
of the solution, so the order of merges does not matter. Here it runs in
three stages, all with fixed shapes (the output is ``(n,)`` whatever the data):

1. sort ``x`` (on integer keys: the IEEE bit pattern made monotone) and pool
   ties: equal ``x`` form one initial block (Resin 2025, the "secondary"
   approach of scikit-learn; the same as R's ``isoreg`` after ordering ties by
   ``y`` descending);
2. parallel rounds: every adjacent violating pair of blocks merges at once
   (a decreasing run collapses in one round); on real data each round about
   halves the number of blocks and 2-15 rounds reach the solution;
3. a stack-based sequential PAV over the remaining blocks finishes the job
   (it is a formality after converged rounds and guarantees the exact answer,
   in linear time, for adversarial inputs where rounds stall).

Everything is batched over rows: ``jax.vmap`` over classes (or data sets) is
routed by a ``custom_vmap`` rule to one call on the stacked rows, so the data-
dependent ``while_loop`` of stage 3 runs once for all rows instead of being
selected over whole carries. Fitted values are block means computed from
per-block sums, as in PAV.

Float32 inputs give float32 fits (for 0/1 targets with unit weights the block
sums are exact integers); enable x64 (``with jax.enable_x64(True):``) for
agreement with scikit-learn's float64 fit to ~1e-15.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax
from jax.typing import ArrayLike

__all__ = [
  "IsotonicFit",
  "isotonic_regression",
  "isotonic_fit",
  "isotonic_predict",
  "isotonic_fit_sorted",
  "pools",
]


class IsotonicFit(NamedTuple):
  """A fitted isotonic step function (left-continuous, constant outside the data).

  Attributes:
    x: ``(n,)`` training inputs sorted ascending (``+inf`` for zero-weight
      points, which sort last).
    y: ``(n,)`` fitted values at ``x`` (non-decreasing).
  """

  x: jax.Array
  y: jax.Array


# ---------------------------------------------------------------------------
# Sorting on integer keys


def _float_dtype(*xs) -> jnp.dtype:
  dt = jnp.result_type(*[x.dtype for x in xs if x is not None])
  if not jnp.issubdtype(dt, jnp.floating):
    dt = jnp.result_type(float)
  elif jnp.finfo(dt).bits < 32:
    dt = jnp.float32
  return jnp.dtype(dt)


def _int_type(dtype) -> jnp.dtype:
  return jnp.dtype(jnp.int64) if jnp.dtype(dtype).itemsize == 8 else jnp.dtype(jnp.int32)


def _to_key(x: jax.Array) -> jax.Array:
  """Monotone map of finite floats to signed integers (``-0.0`` -> ``+0.0``)."""
  it = _int_type(x.dtype)
  bits = jnp.iinfo(it).bits
  x = jnp.where(x == 0, jnp.zeros_like(x), x)
  b = lax.bitcast_convert_type(x, it)
  return b ^ ((b >> (bits - 1)) & jnp.iinfo(it).max)


def _from_key(k: jax.Array, dtype) -> jax.Array:
  it = k.dtype
  bits = jnp.iinfo(it).bits
  b = k ^ ((k >> (bits - 1)) & jnp.iinfo(it).max)
  return lax.bitcast_convert_type(b, dtype)


# ---------------------------------------------------------------------------
# PAV on a batch of rows


#: Parallel merging rounds run while some pair of blocks violates, at most
#: this many times. Real data (calibration curves, noisy monotone signals)
#: converges in 2-15 rounds, each halving the number of blocks.
MAX_ROUNDS = 40
#: ... and only while some row has more blocks than this (the sequential
#: pass is cheap below it) and the last round removed at least 1/8 of them.
STOP_BLOCKS = 1024


def _segsum(v: jax.Array, seg: jax.Array) -> jax.Array:
  """Row-wise ``segment_sum`` of ``(B, n)`` values into ``(B, n)`` segments."""
  b, n = v.shape
  flat = (seg + jnp.arange(b, dtype=seg.dtype)[:, None] * n).reshape(-1)
  return jax.ops.segment_sum(
    v.reshape(-1), flat, num_segments=b * n, indices_are_sorted=True
  ).reshape(b, n)


def _merge_rounds(bw: jax.Array, bs: jax.Array, bc: jax.Array, nb: jax.Array):
  """Merges every adjacent pair of violating blocks at once, round after round.

  Blocks are compacted at the front of each row (``nb`` valid). A pair of
  adjacent blocks with ``mean_a >= mean_b`` always belongs to one block of
  the solution, so merging all such pairs at once is safe; a decreasing run
  collapses in a single round. The sequential pass finishes whatever is left.
  """
  b, n = bw.shape
  col = jnp.arange(n, dtype=jnp.int32)[None, :]

  def violations(bw, bs, nb):
    mean = bs / jnp.where(bw > 0, bw, 1)
    nxt = jnp.concatenate([mean[:, 1:], mean[:, -1:]], axis=1)
    return (col + 1 < nb[:, None]) & (mean >= nxt)  # block j+1 merges into j

  def cond(c):
    r, _, _, _, nb, viol, prev = c
    cur = jnp.max(nb)
    return (r < MAX_ROUNDS) & jnp.any(viol) & (cur > STOP_BLOCKS) & ((prev - cur) * 8 >= prev)

  def body(c):
    r, bw, bs, bc, nb, viol, _ = c
    prev = jnp.max(nb)
    joins = jnp.concatenate([jnp.zeros((b, 1), bool), viol[:, :-1]], axis=1)
    nid = jnp.cumsum((~joins).astype(jnp.int32), axis=1) - 1
    nb = jnp.take_along_axis(nid, jnp.maximum(nb - 1, 0)[:, None], axis=1)[:, 0] + 1
    bw, bs, bc = _segsum(bw, nid), _segsum(bs, nid), _segsum(bc, nid)
    return r + 1, bw, bs, bc, nb, violations(bw, bs, nb), prev

  init = (jnp.int32(0), bw, bs, bc, nb, violations(bw, bs, nb), jnp.max(nb) * 2)
  _, bw, bs, bc, nb, _, _ = lax.while_loop(cond, body, init)
  return bw, bs, bc, nb


def _sequential_pav(bw: jax.Array, bs: jax.Array, bc: jax.Array, nb: jax.Array):
  """Stack-based PAV over ``nb`` blocks per row (one row per lane, in parallel).

  Args:
    bw, bs: ``(B, n)`` block weights and weighted sums (first ``nb`` valid).
    bc: ``(B, n)`` int32 block sizes (sorted positions per block).
    nb: ``(B,)`` number of valid blocks.

  Returns:
    ``(SW, SS, SC, top)``: the final blocks compacted at the front of each row.
  """
  b, n = bw.shape
  ar = jnp.arange(b)

  def viol_of(top, sw, ss):
    t1 = jnp.maximum(top - 1, 0)
    t2 = jnp.maximum(top - 2, 0)
    ma = ss[ar, t2] / sw[ar, t2]
    mb = ss[ar, t1] / sw[ar, t1]
    return (top >= 2) & (ma >= mb)

  def cond(c):
    i, top, sw, ss, sc = c
    return jnp.any((i < nb) | viol_of(top, sw, ss))

  def body(c):
    i, top, sw, ss, sc = c
    t1 = jnp.maximum(top - 1, 0)
    t2 = jnp.maximum(top - 2, 0)
    aw, as_, ac = sw[ar, t2], ss[ar, t2], sc[ar, t2]
    bw_, bs_, bc_ = sw[ar, t1], ss[ar, t1], sc[ar, t1]
    viol = (top >= 2) & (as_ / aw >= bs_ / bw_)
    push = ~viol & (i < nb)
    ic = jnp.minimum(i, n - 1)
    at = jnp.where(viol, t2, jnp.where(push, top, n))  # n: no write
    sw = sw.at[ar, at].set(jnp.where(viol, aw + bw_, bw[ar, ic]), mode="drop")
    ss = ss.at[ar, at].set(jnp.where(viol, as_ + bs_, bs[ar, ic]), mode="drop")
    sc = sc.at[ar, at].set(jnp.where(viol, ac + bc_, bc[ar, ic]), mode="drop")
    top = top + push.astype(jnp.int32) - viol.astype(jnp.int32)
    return i + push.astype(jnp.int32), top, sw, ss, sc

  zero = jnp.zeros((b,), jnp.int32)
  init = (zero, zero, jnp.ones_like(bw), jnp.zeros_like(bs), jnp.zeros_like(bc))
  _, top, sw, ss, sc = lax.while_loop(cond, body, init)
  return sw, ss, sc, top


class _Core(NamedTuple):
  fitted: jax.Array  # (..., n) fitted values in the original order
  sorted_x: jax.Array  # (..., n) x ascending, +inf for zero weights
  sorted_fit: jax.Array  # (..., n) fitted values in that order


def _core_rows(x: jax.Array, y: jax.Array, w: jax.Array | None) -> _Core:
  """Isotonic fits of the ``B`` rows of ``(B, n)`` arrays (common float dtype)."""
  b, n = x.shape
  dtype = x.dtype
  key = _to_key(x)
  iota = jnp.broadcast_to(jnp.arange(n, dtype=jnp.int32), (b, n))
  if w is not None:
    positive = w > 0
    key = jnp.where(positive, key, jnp.iinfo(key.dtype).max)  # zero weights sort last
  skey, perm = lax.sort((key, iota), dimension=1, num_keys=1, is_stable=False)
  ys = jnp.take_along_axis(y, perm, axis=1)
  if w is not None:
    ws = jnp.take_along_axis(w, perm, axis=1)
    valid = ws > 0
    ws = jnp.where(valid, ws, 0)
  else:
    ws = jnp.ones_like(ys)
    valid = jnp.ones((b, n), bool)
  ss = jnp.where(valid, ws * ys, 0)
  # Blocks: tie groups (pooled), then parallel rounds, then the stack.
  start = jnp.concatenate([jnp.ones((b, 1), bool), skey[:, 1:] != skey[:, :-1]], axis=1)
  bid = jnp.cumsum(start.astype(jnp.int32), axis=1) - 1
  bw = _segsum(ws, bid)
  bs = _segsum(ss, bid)
  bc = _segsum(jnp.ones((b, n), jnp.int32), bid)
  nb = jnp.sum((bw > 0).astype(jnp.int32), axis=1, dtype=jnp.int32)  # zero-weight tail excluded
  bw, bs, bc, nb = _merge_rounds(bw, bs, bc, nb)
  sw, ss_, sc, top = _sequential_pav(bw, bs, bc, nb)
  # Expand the final blocks back to sorted positions.
  col = jnp.arange(n, dtype=jnp.int32)[None, :]
  ends = jnp.cumsum(jnp.where(col < top[:, None], sc, 0), axis=1)
  first = jnp.where(col < top[:, None], ends - sc, n)
  mark = jnp.zeros((b, n), jnp.int32).at[jnp.arange(b)[:, None], first].set(1, mode="drop")
  fid = jnp.cumsum(mark, axis=1) - 1
  val = ss_ / jnp.where(col < top[:, None], sw, 1)
  sorted_fit = jnp.take_along_axis(val, jnp.clip(fid, 0, jnp.maximum(top - 1, 0)[:, None]), axis=1)
  if w is not None:
    last = jnp.take_along_axis(val, jnp.maximum(top - 1, 0)[:, None], axis=1)
    sorted_fit = jnp.where(valid, sorted_fit, last)
    sorted_x = jnp.where(valid, _from_key(skey, dtype), jnp.inf)
  else:
    sorted_x = _from_key(skey, dtype)
  sorted_fit = sorted_fit.astype(dtype)
  fitted = jnp.zeros((b, n), dtype).at[jnp.arange(b)[:, None], perm].set(sorted_fit)
  if w is not None:
    # zero-weight points: the fitted step function at their x
    idx = jax.vmap(lambda a, v: jnp.searchsorted(a, v, side="left"))(sorted_x, x)
    at_x = jnp.take_along_axis(sorted_fit, jnp.clip(idx, 0, n - 1), axis=1)
    fitted = jnp.where(w > 0, fitted, at_x)
  return _Core(fitted, sorted_x, sorted_fit)


def _batched(fn):
  """Routes ``vmap`` of a ``(B, n)``-rows function to one call on the stacked rows.

  The sequential pass is a ``while_loop`` whose trip count depends on the
  data; vmapping it naively would select over whole carries every step.
  """

  @jax.custom_batching.custom_vmap
  def rows(*args):
    return fn(*args)

  @rows.def_vmap
  def rule(axis_size, in_batched, *args):
    full = [
      a if bt else jnp.broadcast_to(a, (axis_size,) + a.shape) for a, bt in zip(args, in_batched)
    ]
    lead = full[0].shape[:2]
    flat = [a.reshape((-1,) + a.shape[2:]) for a in full]
    out = rows(*flat)
    out = jax.tree.map(lambda o: o.reshape(lead + o.shape[1:]), out)
    return out, jax.tree.map(lambda _: True, out)

  return rows


_rows_unweighted = _batched(lambda x, y: _core_rows(x, y, None))
_rows_weighted = _batched(lambda x, y, w: _core_rows(x, y, w))


def _core(x: jax.Array, y: jax.Array, w: jax.Array | None) -> _Core:
  """Isotonic fit of one ``(n,)`` data set; ``vmap`` batches it efficiently."""
  if w is None:
    out = _rows_unweighted(x[None], y[None])
  else:
    out = _rows_weighted(x[None], y[None], w[None])
  return jax.tree.map(lambda o: o[0], out)


def _prepare(x, y, weights, check: bool = True):
  from jaxcal._src import validation as V

  xa = V.as_float(x, "x")
  ya = V.as_float(y, "y")
  wa = None if weights is None else V.as_float(weights, "weights")
  if xa.ndim != 1 or xa.shape[0] == 0:
    raise ValueError(f"x must have shape (n,) with n >= 1, got shape {tuple(xa.shape)}")
  if ya.shape != xa.shape:
    raise ValueError(f"y must have the shape of x {tuple(xa.shape)}, got {tuple(ya.shape)}")
  if wa is not None and wa.shape != xa.shape:
    raise ValueError(f"weights must have the shape of x {tuple(xa.shape)}, got {tuple(wa.shape)}")
  if check:
    V.check_finite(xa, "x")
    V.check_finite(ya, "y")
    if wa is not None:
      V.check_finite(wa, "weights")
      if V.is_concrete(wa):
        import numpy as np

        a = np.asarray(wa)
        if (a < 0).any():
          raise ValueError(f"weights must be >= 0; found minimum {a.min():.4g}")
        if not (a > 0).any():
          raise ValueError("weights must have at least one positive entry")
  dt = _float_dtype(xa, ya, wa)
  return xa.astype(dt), ya.astype(dt), None if wa is None else wa.astype(dt)


def isotonic_regression(x: ArrayLike, y: ArrayLike, weights: ArrayLike | None = None) -> jax.Array:
  """Weighted least-squares increasing fit of ``y`` on ``x`` (PAV solution).

  .. math::
    \\hat y = \\arg\\min_{f \\text{ non-decreasing in } x} \\sum_i w_i (y_i - f(x_i))^2

  Ties in ``x`` are pooled (equal ``x`` get equal fitted values, the
  "secondary" approach of scikit-learn and of R's ``isoreg`` after sorting
  ``y`` descending within ties). Zero-weight points do not influence the fit
  and get the value of the fitted step function at their ``x`` (see
  :func:`isotonic_predict`). Works under ``jax.jit`` and ``jax.vmap`` (e.g.
  over the classes of a ``(C, n)`` array); no host callbacks; the output
  shape never depends on the data.

  Args:
    x: ``(n,)`` finite inputs.
    y: ``(n,)`` finite targets.
    weights: optional ``(n,)`` non-negative weights (at least one positive);
      default all ones.

  Returns:
    ``(n,)`` fitted values in the original order, in the common float dtype
    of the inputs.

  Raises:
    ValueError: wrong shapes, non-finite values, negative or all-zero weights
      (value checks on concrete inputs only).

  Example:
    >>> import jax.numpy as jnp
    >>> isotonic_regression(jnp.array([3., 1., 2., 2.]), jnp.array([0., 1., 1., 0.])).tolist()
    [0.5, 0.5, 0.5, 0.5]
    >>> isotonic_regression(jnp.array([1., 2., 3.]), jnp.array([1., 0., 2.]),
    ...                     weights=jnp.array([1., 3., 1.])).tolist()
    [0.25, 0.25, 2.0]

  Reference: Barlow, Bartholomew, Bremner & Brunk (1972), Thm 1.1 (GCM of the
  cumulative sum diagram); Resin (2025), arXiv:2501.19195, §2.6 (ties pooled).
  """
  xa, ya, wa = _prepare(x, y, weights)
  return _jit_core(xa, ya, wa).fitted


@jax.jit
def _jit_core(x, y, w):
  return _core(x, y, w)


def isotonic_fit_sorted(x: jax.Array, y: jax.Array, weights: jax.Array | None = None) -> _Core:
  """Unvalidated core for internal callers (jit/vmap friendly).

  Returns ``(fitted, sorted_x, sorted_fit)``; see :class:`IsotonicFit`.
  """
  dt = _float_dtype(x, y, weights)
  return _core(x.astype(dt), y.astype(dt), None if weights is None else weights.astype(dt))


def isotonic_fit(x: ArrayLike, y: ArrayLike, weights: ArrayLike | None = None) -> IsotonicFit:
  """Fits the isotonic step function (for :func:`isotonic_predict`).

  Args:
    x: ``(n,)`` finite inputs.
    y: ``(n,)`` finite targets.
    weights: optional ``(n,)`` non-negative weights.

  Returns:
    :class:`IsotonicFit` ``(x_sorted, fitted_sorted)``, both ``(n,)``.

  Example:
    >>> import jax.numpy as jnp
    >>> f = isotonic_fit(jnp.array([0.2, 0.6, 0.4]), jnp.array([0., 1., 1.]))
    >>> f.x.tolist(), f.y.tolist()
    ([0.2..., 0.4..., 0.6...], [0.0, 1.0, 1.0])

  Reference: Resin (2025), arXiv:2501.19195.
  """
  xa, ya, wa = _prepare(x, y, weights)
  core = _jit_core(xa, ya, wa)
  return IsotonicFit(core.sorted_x, core.sorted_fit)


def isotonic_predict(fit: IsotonicFit, x_new: ArrayLike) -> jax.Array:
  """Evaluates a fitted isotonic step function at new points.

  .. math::
    f(t) = \\hat y_{(j)}, \\quad j = \\min\\{i : x_{(i)} \\ge t\\}
    \\text{ (the last fitted value if there is none)}

  i.e. the step function jumps right after the largest input of each pool
  (left-continuous) and is constant outside the training range, as R's
  ``as.stepfun(isoreg(x, y))``.

  Args:
    fit: an :class:`IsotonicFit` with ``(n,)`` arrays.
    x_new: array of any shape.

  Returns:
    Fitted values with the shape of ``x_new``.

  Example:
    >>> import jax.numpy as jnp
    >>> f = isotonic_fit(jnp.array([0.2, 0.4, 0.6]), jnp.array([0., 1., 1.]))
    >>> isotonic_predict(f, jnp.array([0.0, 0.2, 0.3, 0.9])).tolist()
    [0.0, 0.0, 1.0, 1.0]

  Reference: Resin (2025), arXiv:2501.19195 (reference code uses
  R's ``as.stepfun(isoreg)``).
  """
  t = jnp.asarray(x_new, fit.x.dtype)
  n = fit.x.shape[-1]
  idx = jnp.searchsorted(fit.x, t.reshape(-1), side="left")
  return fit.y[jnp.clip(idx, 0, n - 1)].reshape(t.shape)


def pools(sorted_fit: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
  """Pools of an isotonic fit: maximal runs of equal fitted value.

  Args:
    sorted_fit: ``(n,)`` fitted values in sorted order (non-decreasing).

  Returns:
    ``(pool_id, start, end)``: ``(n,)`` pool index per sorted position, and
    ``(n,)`` first/last sorted position of pool ``j`` (padding rows beyond
    the number of pools hold ``n - 1``).
  """
  n = sorted_fit.shape[0]
  new = jnp.concatenate([jnp.ones((1,), bool), sorted_fit[1:] != sorted_fit[:-1]])
  pid = jnp.cumsum(new.astype(jnp.int32)) - 1
  pos = jnp.arange(n, dtype=jnp.int32)
  start = jnp.full((n,), n - 1, jnp.int32).at[jnp.where(new, pid, n)].set(pos, mode="drop")
  is_end = jnp.concatenate([new[1:], jnp.ones((1,), bool)])
  end = jnp.full((n,), n - 1, jnp.int32).at[jnp.where(is_end, pid, n)].set(pos, mode="drop")
  return pid, start, end
