"""Kernel calibration errors: SKCE (Widmann et al. 2019) and MMCE (Kumar et al. 2018).

**SKCE.** For predictions ``p_i`` (rows on the simplex), one-hot labels
``e_{y_i}`` and a matrix-valued kernel ``k(p, p') = κ(p, p') I_C`` (scalar
kernel times the identity, the paper's choice), the squared kernel
calibration error is estimated from

``h_ij = κ(p_i, p_j) <e_{y_i} - p_i, e_{y_j} - p_j>``

* unbiased (U-statistic, quadratic): ``SKCE_uq = (n choose 2)^{-1} Σ_{i<j} h_ij``;
* block (linear for a fixed block size ``B``): the mean over the
  ``floor(n/B)`` disjoint blocks of consecutive samples of the U-statistic
  within each block; ``B = 2`` is the paper's linear estimator
  ``SKCE_ul = floor(n/2)^{-1} Σ_i h_{2i-1, 2i}``;
* biased (V-statistic): ``n^{-2} Σ_{i,j} h_ij``.

The inner product expands to ``1[y_i = y_j] - p_j[y_i] - p_i[y_j] + <p_i, p_j>``.
The quadratic estimators run over blocks of rows and columns
(``lax.fori_loop``), so memory is ``O(block^2 C)`` whatever ``n``: the
``n x n`` matrix is never built. Distances are computed from differences
(not from a Gram matrix), so the Laplacian kernel keeps float32 accuracy
for nearly equal predictions.

**MMCE.** ``MMCE = sqrt(n^{-2} Σ_{i,j} (z_i - c_i)(z_j - c_j) exp(-|c_i - c_j| / w))``
on top-label confidences ``c`` and correctness ``z`` with the Laplacian
kernel of width ``w = 0.4`` — the unweighted estimator as ``netcal``
(1.4.0, ``netcal.metrics.MMCE``) computes it. Because the kernel is
one-dimensional and Laplacian, ``Σ_j r_j exp(-|c_i - c_j|/w)`` splits, on
the sorted confidences, into two first-order linear recurrences (forward and
backward). They are evaluated in blocks of 16 samples: a ``16 x 16`` tile of
kernel values inside each block, and across blocks the same sums over the
block boundaries, recursively (as ``blocked_cumsum`` does), so that each
term goes through about ``log_16 n`` roundings. ``O(n log n)`` time (the
sort) and ``O(n)`` memory instead of netcal's ``n x n`` matrix: the tiles
are fused into their sums, and XLA:CPU reports 17 bytes of temporaries per
sample in float32 (48 in float64) at ``n = 2**20`` to ``2**25``. In
float32 the result is within 1e-6 (relative; 1e-7 typically) of a float64
evaluation for ``n`` up to 4e6.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.custom_derivatives import SymbolicZero
from jax.typing import ArrayLike

from jaxcal._src import validation as V
from jaxcal._src.calibration_errors import _confidence
from jaxcal._src.numerics import PRECISION, carry_like, safe_sqrt, two_sum
from jaxcal._src.sorting import sort_with_payload

__all__ = [
  "LaplacianKernel",
  "GaussianKernel",
  "skce",
  "mmce",
  "SKCE_ESTIMATORS",
]

SKCE_ESTIMATORS = ("unbiased", "block", "biased")


class LaplacianKernel(NamedTuple):
  """The Laplacian kernel on probability vectors, SKCE's default.

  ``κ(p, p') = exp(-||p - p'||_2 / bandwidth)``, called on the squared
  distance ``||p - p'||_2^2``. A pytree: ``bandwidth`` may be an array, so
  ``vmap`` over bandwidths is one compilation.

  Attributes:
    bandwidth: scalar ``> 0`` (default 1), the length scale in the units of
      ``||p - p'||_2`` (at most ``sqrt 2`` between probability vectors).

  Example:
    >>> import jax.numpy as jnp
    >>> round(float(LaplacianKernel(0.5)(jnp.float32(0.25))), 4)  # exp(-0.5 / 0.5)
    0.3679

  Reference: Widmann, Lindsten & Zachariah (2019), "Calibration tests in
  multi-class classification: a unifying framework", NeurIPS,
  arXiv:1910.11385, §6 (the kernel ``exp(-||p - p'|| / ν) I`` of its
  experiments).
  """

  bandwidth: ArrayLike = 1.0

  def __call__(self, sqdist: jax.Array) -> jax.Array:
    """Kernel value from the squared Euclidean distance.

    Args:
      sqdist: squared distances ``||p - q||^2``, any shape.

    Returns:
      Kernel values of the same shape.
    """
    return jnp.exp(-safe_sqrt(sqdist) / self.bandwidth)  # (a zero distance: no NaN gradient)


class GaussianKernel(NamedTuple):
  """The Gaussian (squared-exponential) kernel on probability vectors.

  ``κ(p, p') = exp(-||p - p'||_2^2 / (2 bandwidth^2))``, called on the
  squared distance ``||p - p'||_2^2``. A pytree, like :class:`LaplacianKernel`.

  Attributes:
    bandwidth: scalar ``> 0`` (default 1), the standard deviation of the
      Gaussian in the units of ``||p - p'||_2``.

  Example:
    >>> import jax.numpy as jnp
    >>> round(float(GaussianKernel(0.5)(jnp.float32(0.25))), 4)  # exp(-0.25 / 0.5)
    0.6065

  Reference: Widmann, Lindsten & Zachariah (2019), "Calibration tests in
  multi-class classification: a unifying framework", NeurIPS,
  arXiv:1910.11385 (matrix-valued kernels ``κ(p, p') I`` with a scalar
  kernel ``κ``, of which this is one).
  """

  bandwidth: ArrayLike = 1.0

  def __call__(self, sqdist: jax.Array) -> jax.Array:
    """Kernel value from the squared Euclidean distance.

    Args:
      sqdist: squared distances ``||p - q||^2``, any shape.

    Returns:
      Kernel values of the same shape.
    """
    return jnp.exp(-sqdist / (2.0 * self.bandwidth**2))


def _h_block(pa, ya, pb, yb, kernel):
  """``(a, b)`` matrix of ``h_ij`` between two blocks of samples.

  The inner product of the residuals ``e_y - p`` themselves: expanded as
  ``1[y_i = y_j] - p_j[y_i] - p_i[y_j] + <p_i, p_j>``, terms near 1 cancelled
  (two confident rows of one class: 0 for 9.1e-13).
  """
  diff = pa[:, None, :] - pb[None, :, :]
  kv = kernel(jnp.sum(diff * diff, axis=-1))
  ea = jax.nn.one_hot(ya, pa.shape[1], dtype=pa.dtype) - pa
  eb = jax.nn.one_hot(yb, pb.shape[1], dtype=pb.dtype) - pb
  return kv * jnp.matmul(ea, eb.T, precision=PRECISION)


def _row_block(n: int, num_classes: int) -> int:
  """Rows per block: about 2**21 floats in the ``(b, b, C)`` difference tensor."""
  b = int(math.sqrt(2**21 / max(num_classes, 1)))
  return max(8, min(n, b))


def _quadratic(p, y, kernel, where, *, biased: bool, block: int):
  """Σ_{i≠j} h_ij (or Σ_{i,j}) over tiles of the upper triangle, then normalised."""
  n, c = p.shape
  nb = -(-n // block)
  pad = nb * block - n
  pp = jnp.pad(p, ((0, pad), (0, 0)))
  yy = jnp.pad(y, (0, pad))
  valid = jnp.arange(nb * block) < n
  if where is not None:
    valid = valid & jnp.pad(where, (0, pad))
  pb = pp.reshape(nb, block, c)
  yb = yy.reshape(nb, block)
  vb = valid.reshape(nb, block)
  idx = jnp.arange(block)

  def pair(i, j):
    h = _h_block(pb[i], yb[i], pb[j], yb[j], kernel)
    m = vb[i][:, None] & vb[j][None, :]
    if not biased:
      m = m & ((i != j) | (idx[:, None] != idx[None, :]))
    return jnp.sum(jnp.where(m, h, 0.0))

  # Upper triangle of tile pairs (i <= j), off-diagonal tiles counted twice. The
  # tile sums are added with their rounding errors kept (TwoSum): about nb^2 / 2
  # terms of both signs whose total is small against them, so a plain running sum
  # drifted with the tile size (float32, n = 3,000: 1e-3 relative at row_block=1,
  # 2e-4 at 2; a review helper's invariance check).
  def outer(i, acc):
    def inner(j, acc):
      w = jnp.where(j == i, 1.0, 2.0).astype(p.dtype)
      hi, err = two_sum(acc[0], w * pair(i, j))
      return hi, acc[1] + err

    return jax.lax.fori_loop(i, nb, inner, acc)

  zero = jnp.zeros((), p.dtype)
  hi, lo = jax.lax.fori_loop(0, nb, outer, carry_like((zero, zero), pp))
  total = hi + lo
  m = jnp.sum(valid).astype(p.dtype)
  return total / (m * m if biased else m * (m - 1.0))


def _block_estimator(p, y, kernel, where, *, block_size: int):
  n, c = p.shape
  if where is not None:  # the kept samples, in their order, first
    order = jnp.argsort(~where, stable=True)
    p, y = p[order], y[order]
    full = jnp.sum(where) // block_size
  else:
    full = n // block_size
  nb = n // block_size
  pb = p[: nb * block_size].reshape(nb, block_size, c)
  yb = y[: nb * block_size].reshape(nb, block_size)
  off = ~jnp.eye(block_size, dtype=bool)
  h = jax.vmap(lambda a, b: _h_block(a, b, a, b, kernel))(pb, yb)  # (nb, B, B)
  per = jnp.sum(jnp.where(off, h, 0.0), axis=(1, 2)) / float(block_size * (block_size - 1))
  keep = jnp.arange(nb) < full
  return jnp.sum(jnp.where(keep, per, 0.0)) / jnp.asarray(full, p.dtype)


def _skce_impl(p, y, kernel, where=None, *, estimator, block_size, row_block):
  if estimator == "block":
    return _block_estimator(p, y, kernel, where, block_size=block_size)
  return _quadratic(p, y, kernel, where, biased=estimator == "biased", block=row_block)


_STATIC = ("estimator", "block_size", "row_block")
# Kernels whose leaves are numbers/arrays (the NamedTuples) are traced
# arguments, so a vmap over their bandwidth is one compilation; any other
# callable is a static (hashable) argument.
_skce_dynamic = jax.jit(_skce_impl, static_argnames=_STATIC)
_skce_static = jax.jit(_skce_impl, static_argnames=_STATIC + ("kernel",))


class _ByIdentity:
  """An unhashable kernel (a dataclass, a class with ``__eq__``) as a static jit argument.

  Hashed and compared by identity: each such kernel object compiles once.
  """

  __slots__ = ("fn",)

  def __init__(self, fn: Callable[[jax.Array], jax.Array]):
    self.fn = fn

  def __call__(self, s: jax.Array) -> jax.Array:
    return self.fn(s)

  def __hash__(self) -> int:
    return id(self.fn)

  def __eq__(self, other: object) -> bool:
    return isinstance(other, _ByIdentity) and other.fn is self.fn


def _is_array_pytree(tree) -> bool:
  leaves = jax.tree_util.tree_leaves(tree)
  return bool(leaves) and all(
    isinstance(x, (jax.Array, np.ndarray, float, int, np.number)) for x in leaves
  )


@V.same_arguments
def skce(
  probs: ArrayLike,
  labels: ArrayLike,
  kernel: Callable[[jax.Array], jax.Array] | None = None,
  estimator: str = "unbiased",
  *,
  block_size: int = 2,
  row_block: int | None = None,
  from_logits: bool = False,
  where: ArrayLike | None = None,
) -> jax.Array:
  """Squared kernel calibration error SKCE (unbiased, block or biased estimator).

  ``SKCE_uq = (n choose 2)^{-1} Σ_{i<j} κ(p_i, p_j) <e_{y_i} - p_i, e_{y_j} - p_j>``
  for the matrix-valued kernel ``κ I_C``; see the module docstring for the
  block and biased estimators. The unbiased estimate can be negative; its
  expectation is 0 exactly when the model is calibrated (for a
  characteristic kernel).

  Args:
    probs: ``(n, C)`` probabilities (logits with ``from_logits=True``).
    labels: ``(n,)`` integer labels.
    kernel: scalar kernel ``κ`` as a function of the squared Euclidean
      distance between probability vectors (applied elementwise), e.g.
      :class:`LaplacianKernel` (default, bandwidth 1) or
      :class:`GaussianKernel`. Kernel NamedTuples are pytrees, so ``vmap``
      over their bandwidth works.
    estimator: ``"unbiased"`` (default, quadratic U-statistic), ``"block"``
      (linear time: mean of the U-statistics of disjoint blocks of
      ``block_size`` consecutive samples; samples beyond the last full block
      are dropped) or ``"biased"`` (V-statistic, quadratic).
    block_size: samples per block of the ``"block"`` estimator (``>= 2``;
      2 gives the paper's linear estimator ``SKCE_ul``).
    row_block: rows per tile of the quadratic estimators (default: about
      ``2**21 / C`` difference entries per tile).
    from_logits: treat ``probs`` as logits and apply a softmax first.
    where: optional ``(n,)`` bool mask; masked-out samples are treated as
      absent (``n`` is the number of ``True`` entries).

  Returns:
    Scalar estimate (squared scale; not clipped at 0). Differentiable in
    forward mode (``jax.jvp``); reverse mode (``jax.grad``) works for the
    ``"block"`` estimator only: the quadratic ones loop over tiles with a
    bound that depends on the row (JAX cannot transpose such a loop and
    raises).

  Raises:
    ValueError: bad probabilities or labels, unknown ``estimator``,
      ``block_size`` not an int in ``[2, n]``, ``n < 2``, or a
      :class:`LaplacianKernel` / :class:`GaussianKernel` bandwidth that is not
      a finite scalar ``> 0`` (a bool, a string, ``None``, an array) or lies
      below the smallest supported one (1.2e-38 Laplacian, 1.1e-19 Gaussian
      in float32: below them the kernel underflows). Under ``jit`` / ``vmap``
      such a traced bandwidth gives NaN.
    TypeError: a ``kernel`` that is not callable.

  Example:
    >>> import jax.numpy as jnp
    >>> p = jnp.array([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7]])
    >>> round(float(skce(p, jnp.array([0, 1, 1]))), 4)
    0.024

  Reference: Widmann, Lindsten & Zachariah (2019), "Calibration tests in
  multi-class classification: a unifying framework", NeurIPS,
  arXiv:1910.11385, §3 (Def. 2, Lemma 2: SKCE_b, SKCE_uq, SKCE_ul) and §6
  (Laplacian kernel ``exp(-||p - p'|| / ν) I``).
  """
  if estimator not in SKCE_ESTIMATORS:
    raise ValueError(f"estimator must be one of {SKCE_ESTIMATORS}, got {estimator!r}")
  d = V.check_predictions(probs, labels, from_logits=from_logits, where=where)
  p, y = d.neutral()
  n, c = p.shape
  if isinstance(d.count, int) and d.count < 2:
    raise ValueError(f"skce needs at least 2 samples, got n = {d.count}")
  if n < 2:
    raise ValueError(f"skce needs at least 2 samples, got n = {n}")
  # numpy integers are ints here too (np.int64(4) was refused); bools are not
  block_size, row_block = (
    int(v) if isinstance(v, np.integer) else v for v in (block_size, row_block)
  )
  # the type is checked whatever the estimator (a bad value was silently unused);
  # the selected samples bound the blocks of the block estimator (an eager where
  # selecting fewer than block_size gave 0 / 0 = NaN; a traced count folds into
  # the flag below)
  block = estimator == "block"
  sel = (d.count if isinstance(d.count, int) else n) if block else None
  if (
    isinstance(block_size, bool)
    or not isinstance(block_size, int)
    or block_size < 2
    or (block and block_size > sel)
  ):
    what = " selected by where" if d.where is not None else ""
    bounds = f"in [2, n = {sel}{what}]" if block else ">= 2"
    raise ValueError(f"block_size must be an int {bounds}, got {block_size!r}")
  if row_block is None:
    row_block = _row_block(n, c)
  elif isinstance(row_block, bool) or not isinstance(row_block, int) or row_block < 1:
    raise ValueError(f"row_block must be an int >= 1, got {row_block!r}")
  kern = LaplacianKernel(1.0) if kernel is None else kernel
  if isinstance(kern, type):  # LaplacianKernel, not LaplacianKernel(1.0): a raw TypeError
    raise TypeError(
      f"kernel must be a kernel instance, e.g. {kern.__name__}(1.0), got the class {kern.__name__}"
    )
  if not callable(kern):
    raise TypeError(f"kernel must be callable on squared distances, got {type(kern).__name__}")
  ok = d.ok
  if estimator == "block" and not isinstance(d.count, int):  # traced: no full block is NaN
    ok = V.both_ok(ok, d.count >= block_size)
  if isinstance(kern, LaplacianKernel | GaussianKernel):
    bw, bw_ok = V.check_bandwidth(
      kern.bandwidth,
      p.dtype,
      name=f"{type(kern).__name__}.bandwidth",
      squared=isinstance(kern, GaussianKernel),
    )
    kern, ok = type(kern)(bw), V.both_ok(ok, bw_ok)
  core = _skce_dynamic if _is_array_pytree(kern) else _skce_static
  if core is _skce_static:
    try:
      hash(kern)
    except TypeError:
      kern = _ByIdentity(kern)
  out = core(
    p,
    y,
    kern,
    d.where,
    estimator=estimator,
    block_size=int(block_size) if estimator == "block" else 2,
    row_block=min(int(row_block), n),
  )
  return V.fold(out, ok)


_BLOCK = 16  # samples per block: one k x k tile of kernel values each
_ONE_TILE = 256  # up to this many samples: one tile of them all


def _blocks(c: jax.Array, r: jax.Array) -> tuple[jax.Array, jax.Array]:
  """``(nb, k)`` blocks of ``c`` (padded with its last value) and ``r`` (padded with 0)."""
  n = c.shape[0]
  k = n if n <= _ONE_TILE else _BLOCK
  nb = -(-n // k)
  pad = nb * k - n
  return jnp.pad(c, (0, pad), mode="edge").reshape(nb, k), jnp.pad(r, (0, pad)).reshape(nb, k)


def _tile_sums(cb: jax.Array, rb: jax.Array, a: jax.Array, *, left: bool) -> jax.Array:
  """``Σ_j r_j exp(-a |c_i - c_j|)`` over the ``j`` of each ``i``'s block (``j <= i`` only if ``left``)."""
  e = jnp.exp(-a * jnp.abs(cb[:, :, None] - cb[:, None, :])) * rb[:, None, :]
  if left:  # a product with 0 / 1, not a select: XLA:CPU fuses it into the sum
    k = cb.shape[1]
    e = e * jnp.tril(jnp.ones((1, k, k), cb.dtype))
  return jnp.sum(e, axis=2)


def _left_carry(cb: jax.Array, lend: jax.Array, a: jax.Array) -> jax.Array:
  """What the blocks before each block add to its left sums, from the sums ``lend`` at the block ends."""
  ends = cb[:, -1]
  carry = jnp.concatenate([jnp.zeros((1,), cb.dtype), lend[:-1]])
  # taken at the previous block's last confidence; block 0 (no carry) at its
  # own first one, so that every exponent is <= 0 (no inf * 0 for small widths)
  prev_end = jnp.concatenate([cb[:1, 0], ends[:-1]])
  return carry[:, None] * jnp.exp(-a * (cb - prev_end[:, None]))


def _decay_sums(c: jax.Array, r: jax.Array, a: jax.Array) -> jax.Array:
  """``L_i = Σ_{j <= i} r_j exp(-a (c_i - c_j))`` for ascending ``c``.

  Blocks of ``_BLOCK`` samples: inside a block a masked lower-triangular
  tile of ``exp(-a (c_i - c_j)) <= 1`` (:func:`_tile_sums`). Across blocks,
  the sum at a block's end ``L_end(b) = Σ_{b' <= b} inner_end(b') exp(-a
  (end_b - end_b'))`` is again such a sum, over the block ends: computed by
  this function recursively (as ``blocked_cumsum`` does), so each term goes
  through about ``log_k n`` roundings, not a chain of ``n / k`` rounded decay
  factors. Every exponent is ``<= 0``: no overflow for any bandwidth.
  """
  n = c.shape[0]
  cb, rb = _blocks(c, r)
  lo = _tile_sums(cb, rb, a, left=True)
  if cb.shape[0] > 1:
    lo = lo + _left_carry(cb, _decay_sums(cb[:, -1], lo[:, -1], a), a)
  return lo.reshape(-1)[:n]


def _kernel_sums(c: jax.Array, r: jax.Array, a: jax.Array) -> jax.Array:
  """``s_i = Σ_j r_j exp(-a |c_i - c_j|)`` for ascending ``c``.

  Inside each block, one tile of ``exp(-a |c_i - c_j|)``. Its last row is the
  left sum at the block's end (every ``j <= i``), its first row the right sum
  at the block's start: across blocks, the left sums at the block ends and
  the right sums at the block starts are decay sums over the blocks
  (:func:`_decay_sums`; the right one on the reversed, negated starts),
  computed as one batch of two.
  """
  n = c.shape[0]
  cb, rb = _blocks(c, r)
  s = _tile_sums(cb, rb, a, left=False)
  if cb.shape[0] > 1:
    starts = cb[:, 0]
    xs = jnp.stack([cb[:, -1], -starts[::-1]])
    vs = jnp.stack([s[:, -1], s[::-1, 0]])
    lend, rstart = jax.vmap(_decay_sums, (0, 0, None))(xs, vs, a)
    carry = jnp.concatenate([rstart[::-1][1:], jnp.zeros((1,), cb.dtype)])
    # taken at the next block's first confidence; the last block (no carry) at
    # its own last one: every exponent <= 0
    next_start = jnp.concatenate([starts[1:], cb[-1:, -1]])
    s = s + _left_carry(cb, lend, a) + carry[:, None] * jnp.exp(-a * (next_start[:, None] - cb))
  return s.reshape(-1)[:n]


def _quad_value(c: jax.Array, r: jax.Array, a: jax.Array) -> jax.Array:
  return jnp.sum(r * _kernel_sums(c, r, a))


@jax.custom_jvp
def _quad(c: jax.Array, r: jax.Array, a: jax.Array) -> jax.Array:
  """``Σ_{i,j} r_i r_j exp(-a |c_i - c_j|)`` for ascending ``c``.

  Its derivative is that of the double sum as written, with ``d|x|/dx = 0``
  at ``x = 0`` as :func:`jax.numpy.abs` has it. Differentiating the blocked
  form itself would not give that for tied confidences in different blocks:
  the carries factor ``exp(-a (c_i - c_j))`` through the block boundaries, a
  one-sided derivative.
  """
  return _quad_value(c, r, a)


@functools.partial(_quad.defjvp, symbolic_zeros=True)
def _quad_jvp(primals, tangents):
  c, r, a = primals
  dc, dr, da = tangents
  # d quad / d c_i = -2 a r_i Σ_j sign(c_i - c_j) r_j k(i, j), from the left
  # (j <= i) and right (j >= i) sums with the kernel and with its limit
  # 1[c_i = c_j] (the tied samples: two different confidences, >= 1 / C,
  # differ by far more than 1 / big), as one batch of four
  big = jnp.asarray(1.0 / np.finfo(c.dtype).tiny, c.dtype)
  widths = jnp.stack([a, a, big, big])
  xs = jnp.stack([c, -c[::-1]] * 2)
  vs = jnp.stack([r, r[::-1]] * 2)
  left, right, tie_left, tie_right = jax.vmap(_decay_sums)(xs, vs, widths)
  right, tie_right = right[::-1], tie_right[::-1]
  s = left + right - r  # Σ_j r_j k(i, j)
  signed = (left - tie_left) - (right - tie_right)  # c_j < c_i minus c_j > c_i
  out = jnp.sum(r * s)
  dout = jnp.zeros_like(out)
  if not isinstance(dr, SymbolicZero):
    dout = dout + 2.0 * jnp.sum(s * dr)
  if not isinstance(dc, SymbolicZero):
    dout = dout - 2.0 * a * jnp.sum(r * signed * dc)
  if not isinstance(da, SymbolicZero):
    dout = dout + jax.jvp(lambda b: _quad_value(c, r, b), (a,), (da,))[1]
  return out, dout


@jax.jit
def _mmce_core(p, y, width, where=None):
  c, z = _confidence(p, y)
  resid = z - c
  if where is not None:  # a zero residual drops a sample exactly
    resid = jnp.where(where, resid, 0.0)
  cs, rs = sort_with_payload(c, resid)  # tied confidences: k = 1 either way
  a = 1.0 / width
  n = float(p.shape[0]) if where is None else jnp.sum(where).astype(p.dtype)
  quad = _quad(cs, rs, a) / n / n
  return safe_sqrt(quad)


@V.same_arguments
def mmce(
  probs: ArrayLike,
  labels: ArrayLike,
  bandwidth: ArrayLike = 0.4,
  *,
  from_logits: bool = False,
  where: ArrayLike | None = None,
) -> jax.Array:
  """Maximum mean calibration error MMCE (unweighted, Laplacian kernel on confidences).

  ``MMCE = sqrt((1/n^2) Σ_{i,j} (z_i - c_i)(z_j - c_j) exp(-|c_i - c_j| / w))``
  with ``c_i = max p_i``, ``z_i = 1[y_i = argmax p_i]`` and ``w = 0.4``: the
  estimator of ``netcal.metrics.MMCE`` (its kernel is ``exp(-2.5 |c - c'|)``),
  computed without approximation in ``O(n log n)`` time and ``O(n)`` memory;
  in float32 within 1e-6 (relative) of a float64 evaluation for ``n`` up to
  4e6 (module docstring). Its derivative is that of the double sum
  (``d|x|/dx = 0`` at tied confidences, as ``jax.numpy.abs`` has it).

  Args:
    probs: ``(n, C)`` probabilities (logits with ``from_logits=True``).
    labels: ``(n,)`` integer labels.
    bandwidth: kernel width ``w > 0`` (default 0.4, as in the paper and netcal).
    from_logits: treat ``probs`` as logits.
    where: optional ``(n,)`` bool mask; masked-out samples are treated as
      absent (``n`` is the number of ``True`` entries).

  Returns:
    Scalar MMCE (the square root of the biased V-statistic). As ``w -> 0``
    the kernel tends to ``1[c_i = c_j]``, which every ``w`` down to the
    smallest normal float of the dtype (1.2e-38 in float32) reaches exactly.

  Raises:
    ValueError: bad probabilities or labels, or a ``bandwidth`` that is not a
      finite scalar ``> 0`` (``inf``, a bool, an array) or lies below the
      smallest normal float of the dtype. Under ``jit`` / ``vmap`` such a
      traced bandwidth gives NaN.

  Example:
    >>> import jax.numpy as jnp
    >>> p = jnp.array([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7]])
    >>> round(float(mmce(p, jnp.array([0, 1, 1]))), 4)
    0.1757

  Reference: Kumar, Sarawagi & Jain (2018), "Trainable calibration measures
  for neural networks from kernel mean embeddings", ICML, §3 (Eq. 2,
  Laplacian kernel of width 0.4).
  """
  d = V.check_predictions(probs, labels, from_logits=from_logits, where=where, defer=True)
  w, w_ok = V.check_bandwidth(bandwidth, d.scores.dtype, squared=False)
  f = V.neutral_program(_mmce_core, d.from_logits)
  out, _ = V.run_checked(d, f, d.scores, d.labels, d.where, w)
  return V.fold(out, V.both_ok(d.ok, w_ok))
