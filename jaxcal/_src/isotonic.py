"""Isotonic (L2, increasing) regression in pure JAX, on a parallel convex hull.

The weighted least-squares increasing fit of ``y`` on ``x`` is the left
derivative of the greatest convex minorant (GCM) of the cumulative sum
diagram ``P_0 = (0, 0), P_k = (W_k, S_k)`` with ``W_k`` / ``S_k`` the
cumulative weights / weighted targets of the first ``k`` *distinct* ``x``
values in increasing order (Barlow et al. 1972, Thm 1.1). Pooling the
pool-adjacent-violators algorithm (PAV) does sequentially is exactly what the
lower convex hull of those points does at once.

Here the hull is built bottom-up in ``ceil(log2(n + 1))`` rounds: round ``L``
merges the hulls of adjacent blocks of ``2^L`` diagram points, finding each
bridge by a nested binary search (the tangent from a vertex of the left hull
to the right hull, then the vertex of the left hull where that tangent is
also a supporting line), and rewrites the merged hulls with one gather. All
blocks of a round are merged at once, so the work is ``O(n log n)``, the
depth ``O(log^3 n)`` small steps, there are no host callbacks and the output
shape is ``(n,)`` whatever the data. The fitted values are block means
computed from per-block sums (not from differences of the cumulative sums),
so they are as accurate as PAV's.

Ties in ``x`` are pooled before the fit (SPEC §4): equal ``x`` always get
equal fitted values. The sort runs on integer keys (the IEEE bit pattern of
``x`` made monotone), which XLA sorts several times faster than floats.

Float32 caveat: the hull's orientation tests use the cumulative sums, exact
for 0/1 targets with unit or integer weights below 2^24, otherwise accurate to
about ``eps * n * max|y|``; pooling decisions between blocks whose means agree
to that accuracy can differ from float64 PAV by as much. Enable x64 (for
example ``with jax.enable_x64(True):``) for agreement with
scikit-learn to ``1e-12``.
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
# Lower convex hull of the cumulative sum diagram


def _orient(ax, ay, bx, by, cx, cy):
  """Cross product ``(b - a) x (c - a)``; ``>= 0`` iff ``c`` is on/above line ``ab`` (``ax < bx``)."""
  return (bx - ax) * (cy - ay) - (by - ay) * (cx - ax)


def _lower_hull(px: jax.Array, py: jax.Array, num_points: jax.Array) -> jax.Array:
  """Vertex mask of the lower convex hull of ``num_points`` points, ``x`` increasing.

  Args:
    px, py: ``(m,)`` coordinates, ``px`` strictly increasing on the first
      ``num_points`` entries (the rest are ignored).
    num_points: traced int, ``1 <= num_points <= m``.

  Returns:
    ``(m,)`` bool, True at hull vertices (always the first and the last point;
    collinear middle points are not vertices).
  """
  m = px.shape[0]
  levels = max(1, (m - 1).bit_length())
  size = 1 << levels
  pad = size - m
  px = jnp.pad(px, (0, pad), mode="edge")
  py = jnp.pad(py, (0, pad), mode="edge")
  verts = jnp.arange(size, dtype=jnp.int32)
  cnt = (jnp.arange(size) < num_points).astype(jnp.int32)

  for level in range(levels):
    s = 1 << level
    rows = size // (2 * s)
    vr = verts.reshape(rows, 2 * s)
    ca, cb = cnt[0::2], cnt[1::2]
    steps = level + 1  # binary search over at most s = 2^level vertices

    def coords(col, vr=vr):
      v = jnp.take_along_axis(vr, col[:, None], axis=1)[:, 0]
      return px[v], py[v]

    def tangent(ax, ay, vr=vr, cb=cb, s=s, steps=steps):
      # First j with B_{j+1} on/above the line a -> B_j: the tangent point.
      last = jnp.maximum(cb - 1, 0)

      def body(_, lohi):
        lo, hi = lohi
        mid = (lo + hi) // 2
        bx, by = coords(s + mid, vr)
        nx, ny = coords(s + jnp.minimum(mid + 1, last), vr)
        ok = (mid >= last) | (_orient(ax, ay, bx, by, nx, ny) >= 0)
        return jnp.where(ok, lo, mid + 1), jnp.where(ok, mid, hi)

      lo, _ = lax.fori_loop(0, steps, body, (jnp.zeros_like(last), last))
      return lo

    def bridge_body(_, lohi, vr=vr, ca=ca, s=s):
      # First i whose successor A_{i+1} is on/above the tangent line from A_i.
      lo, hi = lohi
      last = jnp.maximum(ca - 1, 0)
      mid = (lo + hi) // 2
      ax, ay = coords(mid, vr)
      j = tangent(ax, ay)
      bx, by = coords(s + j, vr)
      nx, ny = coords(jnp.minimum(mid + 1, last), vr)
      ok = (mid >= last) | (_orient(ax, ay, bx, by, nx, ny) >= 0)
      return jnp.where(ok, lo, mid + 1), jnp.where(ok, mid, hi)

    last_a = jnp.maximum(ca - 1, 0)
    i_star, _ = lax.fori_loop(0, steps, bridge_body, (jnp.zeros_like(last_a), last_a))
    ax, ay = coords(i_star)
    j_star = tangent(ax, ay)
    has_b = cb > 0
    i_star = jnp.where(has_b, i_star, last_a)
    j_star = jnp.where(has_b, j_star, 0)
    cnt = jnp.where(has_b, i_star + 1 + cb - j_star, ca)
    off = jnp.arange(2 * s, dtype=jnp.int32)[None, :]
    src = jnp.where(off <= i_star[:, None], off, s + j_star[:, None] + off - i_star[:, None] - 1)
    src = jnp.clip(src, 0, 2 * s - 1)
    verts = jnp.take_along_axis(vr, src, axis=1).reshape(size)

  keep = jnp.arange(size) < cnt[0]
  mask = jnp.zeros((size,), bool).at[jnp.where(keep, verts, size)].set(True, mode="drop")
  return mask[:m]


# ---------------------------------------------------------------------------
# The fit


class _Core(NamedTuple):
  fitted: jax.Array      # (n,) fitted values in the original order
  sorted_x: jax.Array    # (n,) x ascending, +inf for zero weights
  sorted_fit: jax.Array  # (n,) fitted values in that order


def _core(x: jax.Array, y: jax.Array, w: jax.Array | None) -> _Core:
  """Isotonic fit of one data set (``(n,)`` arrays, common float dtype)."""
  n = x.shape[0]
  dtype = x.dtype
  key = _to_key(x)
  if w is not None:
    positive = w > 0
    key = jnp.where(positive, key, jnp.iinfo(key.dtype).max)  # zero weights sort last
    wy = jnp.where(positive, w * y, 0)
    ww = jnp.where(positive, w, 0)
  else:
    positive = None
    wy, ww = y, jnp.ones_like(y)
  skey = jnp.sort(key)
  # Group of each element = index of its distinct value.
  first = jnp.concatenate([jnp.ones((1,), bool), skey[1:] != skey[:-1]])
  gid_sorted = jnp.cumsum(first.astype(jnp.int32)) - 1
  start = jnp.searchsorted(skey, key, side="left", method="scan_unrolled").astype(jnp.int32)
  g = gid_sorted[start]
  gw = jax.ops.segment_sum(ww, g, num_segments=n)
  gs = jax.ops.segment_sum(wy, g, num_segments=n)
  if positive is None:
    num_groups = gid_sorted[-1] + 1
    sorted_x = _from_key(skey, dtype)
  else:
    num_pos = jnp.sum(positive.astype(jnp.int32))
    # groups of positive-weight values come first; the zero-weight group (if any) last
    num_groups = jnp.where(num_pos > 0, gid_sorted[jnp.maximum(num_pos - 1, 0)] + 1, 0)
    sorted_x = jnp.where(jnp.arange(n) < num_pos, _from_key(skey, dtype), jnp.inf)
  # Cumulative sum diagram P_0..P_num_groups and its lower convex hull.
  px = jnp.concatenate([jnp.zeros((1,), dtype), jnp.cumsum(gw)])
  py = jnp.concatenate([jnp.zeros((1,), dtype), jnp.cumsum(gs)])
  vertex = _lower_hull(px, py, num_groups + 1)
  ev = vertex[1:].astype(jnp.int32)           # vertex flags of P_1..P_n
  edge = jnp.cumsum(ev) - ev                  # hull edge of group g: vertices among P_1..P_g
  ew = jax.ops.segment_sum(gw, edge, num_segments=n)
  es = jax.ops.segment_sum(gs, edge, num_segments=n)
  has = ew > 0
  val = jnp.where(has, es / jnp.where(has, ew, 1), 0)
  if positive is not None:
    # Edges holding only zero weight (none for real groups; kept for safety).
    nxt = lax.cummin(jnp.where(has, val, jnp.inf), reverse=True)
    prv = lax.cummax(jnp.where(has, val, -jnp.inf))
    val = jnp.where(has, val, jnp.where(jnp.isfinite(nxt), nxt, prv))
  gfit = val[edge]                             # (n,) per group
  sorted_fit = gfit[gid_sorted]
  if positive is not None:
    last_val = gfit[jnp.maximum(num_groups - 1, 0)]
    sorted_fit = jnp.where(jnp.arange(n) < num_pos, sorted_fit, last_val)
    # zero-weight points: value of the fitted step function at their x
    idx = jnp.searchsorted(sorted_x, x, side="left", method="scan_unrolled")
    fitted = jnp.where(positive, gfit[g], sorted_fit[jnp.clip(idx, 0, n - 1)])
  else:
    fitted = gfit[g]
  return _Core(fitted.astype(dtype), sorted_x, sorted_fit.astype(dtype))


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
  cumulative sum diagram); score_decompositions_case_study §2.6 and
  SPEC §4 (ties pooled).
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

  Reference: SPEC §4.
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

  Reference: SPEC §4; score_decompositions_case_study (reference code uses
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
