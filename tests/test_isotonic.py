"""isotonic_regression / isotonic_fit / isotonic_predict.

References: scikit-learn's IsotonicRegression (float64, ties pooled) and a
naive loop-based float64 PAV below (Barlow et al. 1972: merge adjacent
violators until none is left). Shapes are few and fixed (zero-weight
padding) to keep compilations down.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcal._src import isotonic as I
from jaxcal.recalibrate import IsotonicFit, isotonic_fit, isotonic_predict, isotonic_regression

sklearn_isotonic = pytest.importorskip("sklearn.isotonic")

N = 48  # every small case is padded to this length with zero weights


def pav_reference(x, y, w=None):
  """Naive float64 PAV: pool ties (weighted means), then merge violators in a loop."""
  x = np.asarray(x, np.float64)
  y = np.asarray(y, np.float64)
  w = np.ones_like(y) if w is None else np.asarray(w, np.float64)
  keep = w > 0
  xs = np.unique(x[keep])
  blocks = []  # [sum_w, sum_wy, [values of x]]
  for v in xs:
    m = keep & (x == v)
    blocks.append([w[m].sum(), (w[m] * y[m]).sum(), [v]])
  merged = True
  while merged:
    merged = False
    for i in range(len(blocks) - 1):
      a, b = blocks[i], blocks[i + 1]
      if a[1] / a[0] >= b[1] / b[0]:
        blocks[i] = [a[0] + b[0], a[1] + b[1], a[2] + b[2]]
        del blocks[i + 1]
        merged = True
        break
  value = {}
  for bw, bs, xv in blocks:
    for v in xv:
      value[v] = bs / bw
  knots = np.array(sorted(value))
  vals = np.array([value[k] for k in knots])
  idx = np.clip(np.searchsorted(knots, x, side="left"), 0, len(knots) - 1)
  return vals[idx]  # zero-weight points: the left-continuous step function


def _case(rng, kind, n):
  if kind == 0:  # binary labels, many ties
    return rng.integers(0, 6, n).astype(float), rng.integers(0, 2, n).astype(float)
  if kind == 1:  # continuous
    x = rng.random(n)
    return x, x + rng.normal(size=n)
  if kind == 2:  # few distinct x, continuous y
    return rng.integers(0, 4, n).astype(float), rng.normal(size=n)
  x = np.round(rng.random(n), 1)  # rounded x, y in [0, 1]
  return x, rng.random(n)


def test_matches_sklearn_and_loop_reference_with_ties_and_weights():
  rng = np.random.default_rng(0)
  with jax.enable_x64(True):
    for trial in range(40):
      n = int(rng.integers(1, N + 1))
      x, y = _case(rng, trial % 4, n)
      w = rng.random(n) + 0.1 if trial % 2 else np.ones(n)
      ref = sklearn_isotonic.IsotonicRegression().fit(x, y, sample_weight=w).predict(x)
      np.testing.assert_allclose(pav_reference(x, y, w), ref, atol=1e-12)
      pad = N - n
      xp = np.concatenate([x, rng.random(pad)])
      yp = np.concatenate([y, rng.random(pad)])
      wp = np.concatenate([w, np.zeros(pad)])
      got = np.asarray(isotonic_regression(xp, yp, wp))
      np.testing.assert_allclose(got[:n], ref, atol=1e-6, err_msg=f"trial {trial}")
      # equal x -> equal fitted values
      for v in np.unique(x):
        assert np.ptp(got[:n][x == v]) == 0.0


@pytest.fixture
def patch_iso(monkeypatch):
  """Sets a module constant of the isotonic core and drops JAX's trace caches
  (before and after), so that the patched value is traced, and only here."""

  def set_(name, value):
    monkeypatch.setattr(I, name, value)
    jax.clear_caches()

  yield set_
  jax.clear_caches()


@pytest.mark.parametrize("all_rows", [None, True])
def test_several_chunks_match_sklearn_binary_and_general_paths(patch_iso, all_rows):
  """n > CHUNK: level 1 in several lanes, level 2 across them; 0/1 targets take the
  one-sort path, other targets the argsort path; an outlier forces long merges.
  ``all_rows``: level 2 as on accelerators (every row a lane of one loop)."""
  patch_iso("LEVEL2_ALL_ROWS", all_rows)
  rng = np.random.default_rng(1)
  n = 3 * I.CHUNK + 17
  assert n > I.CHUNK
  x = np.round(rng.random(n), 2)  # ties, some across chunk boundaries
  y_bin = (rng.random(n) < x).astype(float)
  y_out = np.arange(n) * 1e-3
  y_out[np.argmin(x)] = 1e4
  with jax.enable_x64(True):
    fit = jax.jit(jax.vmap(isotonic_regression))
    got = np.asarray(fit(np.stack([x, x, x]), np.stack([y_bin, y_out, y_bin + 0.5])))
  for row, y in zip(got, (y_bin, y_out, y_bin + 0.5)):
    ref = sklearn_isotonic.IsotonicRegression().fit(x, y).predict(x)
    np.testing.assert_allclose(row, ref, atol=1e-9)


@pytest.mark.parametrize("chunk,all_rows", [(1, None), (3, None), (3, True)])
def test_tie_groups_cut_by_chunk_boundaries(patch_iso, chunk, all_rows):
  """Tiny chunks: every tie group and merge crosses lanes; ties are never split.
  ``all_rows``: level 2 as on accelerators (every row a lane of one loop)."""
  patch_iso("CHUNK", chunk)
  patch_iso("LEVEL2_ALL_ROWS", all_rows)
  rng = np.random.default_rng(chunk)
  xs = rng.integers(0, 5, (6, N)).astype(float)
  ys = np.where(np.arange(6)[:, None] % 2 == 0, rng.integers(0, 2, (6, N)), rng.normal(size=(6, N)))
  ws = rng.random((6, N)) * (rng.random((6, N)) > 0.2)
  ws[:, 0] = 1.0
  # A tie group of four x = 0 cut 3 + 1 by a chunk of 3: the lane after the cut
  # starts with the group's last target (1, partial mean 1, group mean 1/4), then
  # x = 1 with target 0.9 (or 1). The partial head must neither absorb x = 1 nor
  # be popped into it: the group and x = 1 are separate blocks of the fit.
  x_cut = np.concatenate([[0.0] * 4, np.arange(1.0, N - 3)])
  y_cut = np.concatenate([[0.0, 0.0, 0.0, 1.0, 0.9], np.arange(2.0, N - 3)])
  xs = np.concatenate([xs, [x_cut, x_cut]])
  ys = np.concatenate([ys, [y_cut, np.minimum(y_cut, 1.0).round()]])
  ws = np.concatenate([ws, np.ones((2, N))])
  with jax.enable_x64(True):
    plain = np.asarray(jax.jit(jax.vmap(isotonic_regression))(xs, ys))
    weighted = np.asarray(jax.jit(jax.vmap(isotonic_regression))(xs, ys, ws))
  for k in range(8):
    np.testing.assert_allclose(plain[k], pav_reference(xs[k], ys[k]), atol=1e-9)
    np.testing.assert_allclose(weighted[k], pav_reference(xs[k], ys[k], ws[k]), atol=1e-9)


def test_increasing_data_needs_no_merge():
  """Already isotonic data: every sample is its own block (the sequential pass is O(n))."""
  x = np.linspace(0, 1, 5 * I.CHUNK).astype(np.float32)
  np.testing.assert_array_equal(np.asarray(isotonic_regression(x, 2 * x)), 2 * x)


def test_float32_binary_agrees_with_float64():
  rng = np.random.default_rng(2)
  x = rng.random(N).astype(np.float32)
  y = (rng.random(N) < x).astype(np.float32)
  got = isotonic_regression(x, y)
  assert got.dtype == jnp.float32
  ref = (
    sklearn_isotonic.IsotonicRegression()
    .fit(x.astype(float), y.astype(float))
    .predict(x.astype(float))
  )
  np.testing.assert_allclose(np.asarray(got), ref, atol=1e-6)
  # keys spanning exactly 2^31 (x from the float32 below -2 to 2) overflow the
  # one-sort packing (key - min) * 2 + y: such 0/1 data must take the argsort path
  x = (4 * rng.random(N) - 2).astype(np.float32)
  x[:2] = [2.0, -np.nextafter(np.float32(2.0), np.float32(0.0))]
  y = (rng.random(N) < (x + 2) / 4).astype(np.float32)
  y[:2] = [1.0, 0.0]
  ref = sklearn_isotonic.IsotonicRegression().fit(x.astype(float), y).predict(x.astype(float))
  np.testing.assert_allclose(np.asarray(isotonic_regression(x, y)), ref, atol=1e-6)


def test_jit_and_vmap_equal_eager_loop():
  rng = np.random.default_rng(3)
  xs = rng.integers(0, 10, (8, N)).astype(np.float32) / 10
  ys = rng.random((8, N)).astype(np.float32)
  ws = (rng.random((8, N)) + 0.5).astype(np.float32)
  # bad members (eager calls raise): NaN in x, a negative weight, all-zero weights
  xs[5, 3], ws[6, 2], ws[7] = np.nan, -1.0, 0.0
  loop = np.stack([np.asarray(isotonic_regression(a, b, c)) for a, b, c in zip(xs, ys, ws[:5])])
  vm = np.asarray(jax.jit(jax.vmap(isotonic_regression))(xs, ys, ws))
  np.testing.assert_array_equal(vm[:5], loop)
  assert np.isnan(vm[5:]).all()  # NaN, never a plausible fit
  xs, ys, ws = xs[:5], ys[:5], ws[:5]
  # nested vmap (data sets x classes) with an unbatched argument
  nested = jax.jit(
    jax.vmap(jax.vmap(isotonic_regression, in_axes=(0, 0, None)), in_axes=(None, 0, None))
  )(xs, np.stack([ys, ys[::-1]]), ws[0])
  assert nested.shape == (2, 5, N)
  # every one of the 10 fits: nested[i, j] fits the targets (ys, ys[::-1])[i][j]
  # at xs[j] (the outer vmap batches the targets but not x)
  targets = np.stack([ys, ys[::-1]])
  for i in range(2):
    for j in range(5):
      np.testing.assert_array_equal(
        np.asarray(nested[i, j]),
        np.asarray(isotonic_regression(xs[j], targets[i, j], ws[0])),
        err_msg=f"nested[{i}, {j}]",
      )
  assert np.abs(np.asarray(nested[1] - nested[0])).max() > 0.01  # the two target sets differ


def test_fit_predict_step_function_left_continuous_and_flat_outside():
  x = jnp.array([0.1, 0.3, 0.3, 0.5, 0.9, 0.7])
  y = jnp.array([0.0, 1.0, 0.0, 1.0, 1.0, 0.5])
  f = isotonic_fit(x, y)
  assert isinstance(f, IsotonicFit)
  np.testing.assert_allclose(np.asarray(f.x), np.sort(np.asarray(x)), rtol=1e-7)
  # pools: {0.1}: 0, {0.3, 0.3}: 0.5, {0.5, 0.7}: 0.75, {0.9}: 1
  np.testing.assert_allclose(np.asarray(f.y), [0, 0.5, 0.5, 0.75, 0.75, 1.0], rtol=1e-6)
  t = jnp.array([-1.0, 0.1, 0.2, 0.3, 0.31, 0.7, 0.8, 2.0])
  np.testing.assert_allclose(
    np.asarray(isotonic_predict(f, t)), [0, 0, 0.5, 0.5, 0.75, 0.75, 1.0, 1.0], rtol=1e-6
  )
  np.testing.assert_allclose(
    np.asarray(isotonic_predict(f, x)), np.asarray(isotonic_regression(x, y)), rtol=1e-6
  )
  pid, start, end = I.pools(f.y)
  assert pid.tolist() == [0, 1, 1, 2, 2, 3]
  assert start[:4].tolist() == [0, 1, 3, 5] and end[:4].tolist() == [0, 2, 4, 5]


def test_zero_weights_do_not_influence_and_follow_the_step_function():
  x = jnp.array([0.1, 0.2, 0.3, 0.4, 0.25])
  y = jnp.array([1.0, 0.0, 1.0, 1.0, 100.0])
  w = jnp.array([1.0, 1.0, 1.0, 1.0, 0.0])
  got = np.asarray(isotonic_regression(x, y, w))
  np.testing.assert_allclose(got, [0.5, 0.5, 1.0, 1.0, 1.0], rtol=1e-6)
  f = isotonic_fit(x, y, w)
  assert np.isinf(np.asarray(f.x)[-1])
  np.testing.assert_allclose(np.asarray(isotonic_predict(f, jnp.array([0.5]))), [1.0])


def test_the_fit_does_not_depend_on_the_scale_of_the_weights():
  # the first pass compares block means through products of sums and weights: at a
  # weight scale of 1e20 (overflow) or 1e-19 (flushed to 0) in float32 it merged
  # blocks that were in order, a plausible wrong fit ([0, 7/6, 7/6, 7/6])
  x, y = jnp.arange(1.0, 5.0), jnp.array([0.0, 1.0, 0.5, 2.0])
  for scale in (1e20, 1e30, 1e-19, 1e-30):
    w = jnp.full((4,), scale, jnp.float32)
    np.testing.assert_allclose(isotonic_regression(x, y, w), [0.0, 0.75, 0.75, 2.0], rtol=1e-6)
  rng = np.random.default_rng(0)
  xs, ys, ws = rng.normal(size=200), rng.random(200), rng.random(200) + 0.1
  want = isotonic_regression(xs, ys, ws)
  np.testing.assert_allclose(isotonic_regression(xs, ys, ws * 1e25), want, rtol=1e-5)
  np.testing.assert_allclose(
    isotonic_fit(xs, ys, ws * 1e-25).y, isotonic_fit(xs, ys, ws).y, rtol=1e-5
  )


def test_small_weights_of_small_targets_are_scaled_up_not_flushed():
  """``w y`` below the smallest normal float32 read as 0: weights 1e-20 of targets 1e-20
  (both normal) fitted to 0, and so did weights ``2^-120`` (7.5e-37) of targets 1e-3."""
  x = np.arange(1.0, 4.0, dtype=np.float32)
  y = np.array([1e-20, 2e-20, 3e-20], np.float32)
  for f in (isotonic_regression, jax.jit(isotonic_regression)):
    np.testing.assert_allclose(f(x, y, np.full(3, 1e-20, np.float32)), y, rtol=1e-6)
  y2, w2 = np.array([1e-3, 0.0, 1e-3], np.float32), np.array([1.0, 2.0, 1.0], np.float32)
  want = np.asarray(isotonic_regression(x, y2, w2))
  np.testing.assert_allclose(want, [1e-3 / 3, 1e-3 / 3, 1e-3], rtol=1e-6)
  np.testing.assert_array_equal(isotonic_regression(x, y2, w2 * np.float32(2.0**-120)), want)
  # tiny targets with a small weight: the targets are scaled up too (a refusal of such
  # products refused valid inputs whose fit they cannot change)
  y3, w3 = np.array([1e-30, 0.0, 2e-30], np.float32), np.array([1.0, 1.0, 1e-10], np.float32)
  for f in (isotonic_regression, jax.jit(isotonic_regression)):
    np.testing.assert_allclose(f(x, y3, w3), pav_reference(x, y3, w3), rtol=1e-6)
  x4 = np.arange(4.0, dtype=np.float32)
  y4, w4 = np.array([1.0, 1e-30, 1.0, 2.0], np.float32), np.array([1, 1e-10, 1, 1], np.float32)
  np.testing.assert_allclose(isotonic_regression(x4, y4, w4), pav_reference(x4, y4, w4), rtol=1e-6)


def test_vmap_over_the_weights_alone_equals_a_loop():
  """With ``x`` and ``y`` unbatched only the weights' flag is traced: ``bool`` of it raised."""
  x, y = jnp.array([0.1, 0.2, 0.3, 0.4]), jnp.array([1.0, 0.0, 1.0, 1.0])
  ws = jnp.array([[1.0, 1.0, 1.0, 1.0], [1.0, 3.0, 1.0, 1.0], [2.0, 0.0, 1.0, 0.5]])
  loop = np.stack([np.asarray(isotonic_regression(x, y, w)) for w in ws])
  np.testing.assert_array_equal(jax.vmap(lambda w: isotonic_regression(x, y, w))(ws), loop)
  fits = jax.vmap(lambda w: isotonic_fit(x, y, w))(ws)
  for i, w in enumerate(ws):
    np.testing.assert_array_equal(fits.y[i], isotonic_fit(x, y, w).y)
  # weights closed over by a jit (concrete, x traced): their checks read the weights'
  # statistics from a tracer (ConcretizationTypeError); now checked, the eager fit
  w0 = ws[1]
  np.testing.assert_array_equal(jax.jit(lambda t: isotonic_regression(t, y, w0))(x), loop[1])
  negative = w0.at[0].set(-1.0)
  with pytest.raises(ValueError, match="weights must be >= 0; found minimum -1"):
    jax.jit(lambda t: isotonic_regression(t, y, negative))(x)


def test_weights_and_targets_of_extreme_relative_size_give_the_float64_fit():
  # the first pass compared block means as cross products of sums and weights, which
  # flush to 0 or overflow: weights [1, 1e-20 x 4] fit [-1, .9, .9, .9, .9]; targets
  # ~1e36 in tie groups merged blocks in order; dividing the weights by their maximum
  # made 1e-30 next to 1e10 subnormal (read as 0: the point was dropped)
  x, y = np.arange(5.0), np.array([-1.0, 0.1, 1.0, 0.5, 2.0])
  for tiny in (1e-10, 1e-19, 1e-20, 1e-22):
    w = np.array([1.0, tiny, tiny, tiny, tiny])
    got = isotonic_regression(x.astype(np.float32), y.astype(np.float32), w.astype(np.float32))
    np.testing.assert_allclose(got, pav_reference(x, y, w), rtol=1e-6)
  x2, y2 = np.array([1.0, 2.0], np.float32), np.array([0.0, 5.0], np.float32)
  for w2 in ([1e10, 1e-30], [1e20, 1e-26], [1e-30, 1e20]):
    got = isotonic_regression(x2, y2, np.array(w2, np.float32))
    np.testing.assert_allclose(got, [0.0, 5.0], rtol=1e-6)
  xs = np.repeat(np.arange(4.0), 20).astype(np.float32)
  yb = np.repeat(np.array([0.0, 1.0, 0.5, 2.0]), 20)
  for scale in (1e30, 1e36):
    got = np.asarray(isotonic_regression(xs, (yb * scale).astype(np.float32))) / np.float32(scale)
    np.testing.assert_allclose(got, pav_reference(xs, yb), rtol=1e-6)
  with jax.enable_x64(True):
    got = isotonic_regression(
      x2.astype(np.float64), y2.astype(np.float64), np.array([1e200, 1e-200])
    )
    np.testing.assert_allclose(got, [0.0, 5.0], rtol=1e-12)
    got = isotonic_regression(xs.astype(np.float64), yb * 1e306) / 1e306
    np.testing.assert_allclose(got, pav_reference(xs, yb), rtol=1e-12)


def test_targets_near_the_largest_float_fit_finite_values_not_inf():
  # unweighted block sums of y overflowed: ten float32 targets near 3e38 (five 3e38
  # before five 2e38) fitted to inf everywhere, finite input and a silently wrong fit
  x = np.arange(10.0)
  y = np.repeat([3e38, 2e38], 5)
  want = pav_reference(x, y)  # float64: 2.5e38 everywhere
  x32, y32 = x.astype(np.float32), y.astype(np.float32)
  for w in (None, np.ones(10, np.float32)):
    got = np.asarray(isotonic_regression(x32, y32, w))
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_allclose(
      np.asarray(jax.jit(isotonic_regression)(x32, y32, w)), want, rtol=1e-6
    )
    np.testing.assert_allclose(np.asarray(isotonic_fit(x32, y32, w).y), want, rtol=1e-6)
  rows = np.asarray(jax.vmap(isotonic_regression)(np.stack([x32, x32]), np.stack([y32, -y32])))
  np.testing.assert_allclose(rows, [want, pav_reference(x, -y)], rtol=1e-6)
  # the scaling (2^-6 here) would flush a small nonzero target: refused, NaN when traced
  tiny = y32.copy()
  tiny[-1] = 1e-37
  with pytest.raises(ValueError, match="y spans too wide a range for float32"):
    isotonic_regression(x32, tiny)
  assert np.isnan(np.asarray(jax.jit(isotonic_regression)(x32, tiny))).all()
  # targets that need no scaling are untouched: the unscaled fit, bit for bit
  small = np.array([1e-37, 0.0, 2e-37, 5e-38], np.float32)
  np.testing.assert_array_equal(
    np.asarray(isotonic_regression(np.arange(4.0, dtype=np.float32), small)),
    np.repeat([(small[0] + small[1]) / 2, (small[2] + small[3]) / 2], 2),
  )


def test_subnormal_or_too_widely_spread_weights_are_refused_not_dropped():
  # XLA:CPU reads a subnormal weight as 0: its point was silently left out of the fit
  x, y = jnp.array([1.0, 2.0]), jnp.array([0.0, 5.0])
  w = np.array([1.0, 1e-44], np.float32)
  with pytest.raises(ValueError, match=r"weights has 1 positive entry below 1.18e-38 \(subnormal"):
    isotonic_regression(x, y, w)
  with pytest.raises(ValueError, match="2 positive entries below"):
    isotonic_fit(x, y, np.full(2, 1e-40, np.float32))
  # scaled down to keep the sums finite (y ~ 1e30), the smallest weight would become 0
  with pytest.raises(ValueError, match="weights span too wide a range for float32"):
    isotonic_regression(x, jnp.array([0.0, 1e30]), np.array([1e30, 1e-30], np.float32))
  for bad in (w, np.array([1e30, 1e-30], np.float32)):
    yy = y if bad is w else jnp.array([0.0, 1e30])
    assert np.isnan(np.asarray(jax.jit(isotonic_regression)(x, yy, bad))).all()


def test_single_point_and_constant_x():
  assert isotonic_regression(jnp.array([3.0]), jnp.array([2.0])).tolist() == [2.0]
  np.testing.assert_allclose(
    np.asarray(isotonic_regression(jnp.ones(4), jnp.array([0.0, 1.0, 1.0, 2.0]))), [1.0] * 4
  )


@pytest.mark.parametrize(
  "args, msg",
  [
    ((jnp.ones((2, 3)), jnp.ones((2, 3))), "shape"),
    ((jnp.ones(3), jnp.ones(4)), "shape of x"),
    ((jnp.array([0.0, jnp.nan]), jnp.ones(2)), "non-finite"),
    ((jnp.ones(2), jnp.array([0.0, jnp.inf])), "non-finite"),
    ((jnp.ones(2), jnp.ones(2), jnp.array([1.0, -1.0])), ">= 0"),
    ((jnp.ones(2), jnp.ones(2), jnp.zeros(2)), "positive"),
    ((jnp.ones(2), jnp.ones(2), jnp.ones(3)), "weights"),
    ((jnp.zeros(0), jnp.zeros(0)), "n >= 1"),
  ],
)
def test_bad_input(args, msg):
  with pytest.raises(ValueError, match=msg):
    isotonic_regression(*args)


_FIT = (np.array([0.2, 0.4, 0.6], np.float32), np.array([0.0, 1.0, 1.0], np.float32))


@pytest.mark.parametrize(
  "fit, x_new, msg",
  [
    (IsotonicFit(*_FIT), [0.3, np.nan], r"x_new contains non-finite values.*x_new\[1\]: nan"),
    (IsotonicFit(*_FIT), [np.inf], "x_new contains non-finite values"),
    (IsotonicFit(*_FIT), ["a"], "x_new must be a real numeric array"),
    (_FIT, [0.3], "fit must be an IsotonicFit .*got tuple"),
    (IsotonicFit(_FIT[0], _FIT[1][:2]), [0.3], r"fit must hold two \(n,\) arrays"),
    # a fit built by hand was read as if sorted: [0.5, 1.0] here, the step function
    # of the sorted points gives [1.0, 0.0] (found by a review helper)
    (
      IsotonicFit(np.float32([0.6, 0.2, 0.4]), np.float32([1.0, 0.0, 0.5])),
      [0.5, 0.1],
      r"fit.x must be non-decreasing, got fit.x\[1\] = 0.2 < fit.x\[0\] = 0.6; .*isotonic_fit",
    ),
    (
      IsotonicFit(_FIT[0], np.float32([1.0, 0.0, 0.5])),
      [0.3],
      r"fit.y must be non-decreasing, got fit.y\[1\] = 0.0 < fit.y\[0\] = 1.0",
    ),
    (IsotonicFit(np.float32([np.nan, 0.4, 0.6]), _FIT[1]), [0.3], "fit.x contains NaN or -inf"),
    (IsotonicFit(np.float32([-np.inf, 0.4, 0.6]), _FIT[1]), [0.3], "fit.x contains NaN or -inf"),
    (IsotonicFit(_FIT[0], np.float32([0.0, 1.0, np.inf])), [0.3], "fit.y contains non-finite"),
  ],
)
def test_predict_bad_input(fit, x_new, msg):
  with pytest.raises(ValueError, match=msg):
    isotonic_predict(fit, np.asarray(x_new))


def test_predict_under_jit_gives_nan_for_non_finite_queries():
  """A NaN query used to return the last fitted value."""
  f = IsotonicFit(*(jnp.asarray(a) for a in _FIT))
  got = jax.jit(isotonic_predict)(f, jnp.array([np.nan, 0.3, -np.inf]))
  np.testing.assert_array_equal(np.asarray(got), [np.nan, 1.0, np.nan])


def test_predict_reads_a_hand_built_or_zero_weight_fit_and_refuses_a_bad_one_under_jit():
  """A sorted fit built by hand and a fit whose zero-weight points sort last as +inf are
  read; an unsorted or decreasing one predicts NaN under jit (as isotonic_fit's traced bad
  fit) and raises the eager message in checked mode (it gave wrong steps silently)."""
  from jaxcal._src.validation import checked

  q = jnp.array([0.5, 0.1])
  good = IsotonicFit(jnp.array([0.2, 0.4, 0.6]), jnp.array([0.0, 0.5, 1.0]))
  assert isotonic_predict(good, q).tolist() == [1.0, 0.0]
  zw = isotonic_fit(
    jnp.array([0.1, 0.4, 0.2, 0.3]), jnp.array([0.0, 1, 1, 0]), jnp.array([1, 0, 1, 1.0])
  )
  assert np.isinf(np.asarray(zw.x)[-1])  # the zero-weight point
  np.testing.assert_array_equal(
    np.asarray(isotonic_predict(zw, jnp.array([0.35, 0.5]))), [0.5, 0.5]
  )
  bad = IsotonicFit(jnp.array([0.6, 0.2, 0.4]), jnp.array([1.0, 0.0, 0.5]))
  got = jax.jit(isotonic_predict)(bad, q)
  assert np.isnan(np.asarray(got)).all()
  stacked = IsotonicFit(*(jnp.stack([a, b]) for a, b in zip(bad, good)))
  got = jax.vmap(isotonic_predict, in_axes=(0, None))(stacked, q)
  np.testing.assert_array_equal(np.asarray(got), [[np.nan, np.nan], [1.0, 0.0]])
  with pytest.raises(ValueError, match=r"fit.x must be non-decreasing, got fit.x\[1\] = 0.2"):
    checked(jax.jit(isotonic_predict))(bad, q)
  with pytest.raises(ValueError, match="fit.x must be non-decreasing"):  # closed over in a jit
    jax.jit(lambda t: isotonic_predict(bad, t))(q)
  assert np.asarray(bad.x).tolist() == np.float32([0.6, 0.2, 0.4]).tolist()  # not modified


def test_fit_matches_regression_and_sorted_fit_is_the_step_function():
  rng = np.random.default_rng(8)
  x = np.round(rng.random(N), 1).astype(np.float32)
  y = (rng.random(N) < x).astype(np.float32)
  w = (rng.random(N) > 0.25).astype(np.float32)
  for weights in (None, w):
    f = isotonic_fit(x, y, weights)
    fitted = np.asarray(isotonic_regression(x, y, weights))
    np.testing.assert_array_equal(np.asarray(isotonic_predict(f, x)), fitted)
    assert np.all(np.diff(np.asarray(f.y)) >= 0)
    core = jax.jit(I.isotonic_fit_sorted)(jnp.asarray(x), jnp.asarray(y), weights)
    np.testing.assert_array_equal(np.asarray(core.fitted), fitted)
    np.testing.assert_array_equal(np.asarray(core.sorted_fit), np.asarray(f.y))


def test_binary_one_sort_path_equals_argsort_path():
  """0/1 targets with unit weights (one packed sort) and the same data through the
  weighted path (stable argsort and gathers) give identical fits."""
  rng = np.random.default_rng(9)
  x = np.round(rng.random((5, N)), 1).astype(np.float32)
  y = (rng.random((5, N)) < x).astype(np.float32)
  fast = np.asarray(jax.jit(jax.vmap(isotonic_regression))(x, y))
  slow = np.asarray(jax.jit(jax.vmap(isotonic_regression))(x, y, np.ones_like(y)))
  np.testing.assert_array_equal(fast, slow)
  for k in range(5):
    np.testing.assert_allclose(fast[k], pav_reference(x[k], y[k]), atol=1e-6)


def test_float32_close_to_float64_at_large_n():
  rng = np.random.default_rng(10)
  n = 200_000
  x = rng.random(n).astype(np.float32)
  y = (rng.random(n) < x**2).astype(np.float32)
  got = np.asarray(isotonic_regression(x, y))
  ref = pav_reference_fast(x.astype(np.float64), y.astype(np.float64))
  np.testing.assert_allclose(got, ref, atol=1e-6)


def pav_reference_fast(x, y):
  """Stack PAV in float64 (sklearn's algorithm), for large n."""
  return sklearn_isotonic.IsotonicRegression().fit(x, y).predict(x)


@pytest.mark.parametrize("targets", ["binary", "general", "weighted"])
def test_row_groups_of_the_sorts_equal_one_group(monkeypatch, targets):
  """The per-core row groups of the sort step (CPU) give the one-group fit, bit for bit."""
  from jaxcal._src import sorting as S

  rng = np.random.default_rng(11)
  x = np.round(rng.random((5, 70_000)), 3).astype(np.float32)  # ties, 2-pass keys
  y = (rng.random(x.shape) < x).astype(np.float32)
  if targets != "binary":
    y = y + rng.random(x.shape).astype(np.float32)
  w = rng.random(x.shape).astype(np.float32) if targets == "weighted" else None
  args = [jnp.asarray(a) for a in (x, y, w) if a is not None]

  def fit(groups):
    monkeypatch.setattr(S, "cpu_groups", lambda rows, n: groups)
    return jax.jit(lambda *a: I._fit_batched(*a))(*args)  # a fresh trace per group count

  one = fit(1)
  for got in (fit(2), fit(3)):
    for a, b in zip(jax.tree.leaves(one), jax.tree.leaves(got)):
      np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  want = pav_reference(
    x[0].astype(np.float64), y[0].astype(np.float64), None if w is None else w[0]
  )
  np.testing.assert_allclose(np.asarray(one.fitted[0]), want, atol=1e-5)


def test_fits_of_many_rows_past_2_31_positions_trace():
  """F5: level 2 indexes the blocks of all rows of one call by flat int32 positions, and
  8 classes of 2**28 samples (map_columns' batch, decompose's class-wise fits) raised an
  OverflowError at trace time; the rows now go in groups below 2**31 positions. A single
  row past the limit gets a clear ValueError. Abstract inputs: nothing is allocated."""
  n = 2**28
  cols = jax.ShapeDtypeStruct((n, 8), jnp.float32)
  out = jax.eval_shape(lambda a, b: I.isotonic_fit_columns(a, b).fitted, cols, cols)
  assert out.shape == (8, n)
  out = jax.eval_shape(lambda a, b: I.isotonic_fit_columns(a, b, a[:, 0]).fitted, cols, cols)
  assert out.shape == (8, n)
  rows = jax.ShapeDtypeStruct((8, n), jnp.float32)
  assert jax.eval_shape(jax.vmap(isotonic_regression), rows, rows).shape == (8, n)

  most = 2**31 - 256  # whole chunks of 256 positions within 2**31 - 1
  one = jax.ShapeDtypeStruct((most,), jnp.float32)
  assert jax.eval_shape(isotonic_regression, one, one).shape == (most,)
  one = jax.ShapeDtypeStruct((most + 1,), jnp.float32)
  with pytest.raises(ValueError, match=r"at most 2,147,483,392 samples per data set"):
    jax.eval_shape(isotonic_regression, one, one)


def test_rows_in_groups_of_flat_positions_equal_one_group(monkeypatch):
  """The row groups that keep level 2's flat positions in int32 give the one-call fits,
  bit for bit (weighted: the weights are split with the rows)."""
  rng = np.random.default_rng(61)
  x = np.round(rng.random((7, 300)), 2).astype(np.float32)  # ties
  y = (rng.random(x.shape) < x).astype(np.float32)
  w = rng.random(x.shape).astype(np.float32)
  args = [jnp.asarray(a) for a in (x, y, w)]
  one = jax.jit(lambda *a: I._fit_batched(*a))(*args)
  monkeypatch.setattr(I, "MAX_FLAT_POSITIONS", 2 * 512)  # 2 rows of 512 padded positions
  got = jax.jit(lambda *a: I._fit_batched(*a))(*args)  # a new function: traced anew
  for a, b in zip(jax.tree.leaves(one), jax.tree.leaves(got)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_vmap_empty_batch():
  # rowwise_vmap's rule ran the fit on zero rows (jnp.max over nothing)
  x = jnp.zeros((0, 3))
  assert jax.jit(jax.vmap(isotonic_regression))(x, x).shape == (0, 3)
  fit = jax.jit(jax.vmap(isotonic_fit))(x, x)
  assert fit.x.shape == (0, 3) and fit.y.shape == (0, 3)
  x1, y1 = jnp.array([0.3, 0.1, 0.2]), jnp.array([1.0, 0.0, 0.5])
  np.testing.assert_array_equal(
    jax.vmap(isotonic_regression)(x1[None], y1[None])[0], isotonic_regression(x1, y1)
  )
  np.testing.assert_array_equal(
    jax.vmap(isotonic_fit)(x1[None], y1[None]).y[0], isotonic_fit(x1, y1).y
  )


def test_predict_from_a_one_point_fit():
  """A fit of one sample is one step everywhere: the fit check of a hand-built fit
  took the argmax of no pairs and raised (found by a reread)."""
  fit = isotonic_fit(jnp.array([0.5]), jnp.array([1.0]))
  np.testing.assert_array_equal(np.asarray(isotonic_predict(fit, jnp.array([0.1, 0.9]))), [1, 1])
  one = IsotonicFit(jnp.array([0.5]), jnp.array([0.3]))
  got = jax.jit(isotonic_predict)(one, jnp.array([0.2]))
  np.testing.assert_allclose(np.asarray(got), [0.3])
  stacked = IsotonicFit(jnp.array([[0.5], [0.1]]), jnp.array([[0.3], [0.7]]))
  got = jax.vmap(isotonic_predict, in_axes=(0, None))(stacked, jnp.array([0.2]))
  np.testing.assert_allclose(np.asarray(got), [[0.3], [0.7]])


def test_integer_or_bool_targets_keep_the_scores_float_dtype_under_x64():
  """float32 scores with 0/1 integer or bool targets fit in float32 under x64 too (as every
  metric and fit_isotonic do); bool targets widened the fit to float64 (JAX's default float)."""
  x = np.linspace(0, 1, 50, dtype=np.float32)
  y = np.arange(50) % 3 == 0
  with jax.enable_x64(True):
    want = np.asarray(isotonic_regression(x, y.astype(np.float32)))
    for t in (y, y.astype(np.int32), jnp.asarray(y)):
      got = isotonic_regression(x, t)
      assert got.dtype == jnp.float32, t.dtype
      np.testing.assert_array_equal(np.asarray(got), want)
    assert isotonic_regression(x.astype(np.float64), y).dtype == jnp.float64
    # integer scores still fit in the default float: int64 timestamps stay distinct
    t = 1_700_000_000 + 3 * np.arange(50)
    got = isotonic_regression(t, y.astype(np.float32))
    assert got.dtype == jnp.float64
    np.testing.assert_allclose(np.asarray(got), want, atol=1e-7)


def test_forward_derivative_in_binary_targets_is_not_lost():
  """0/1 targets take a packed sort that rebuilt them from bits: the fit's derivative in them
  was 0 (a grad-review finding); it is the weighted path's (the pooled block's mean moves by
  1/4 when one of its four targets does)."""
  with jax.enable_x64(True):
    x = jnp.array([0.0, 1.0, 2.0, 3.0])
    y = jnp.array([1.0, 0.0, 1.0, 0.0])
    t = jnp.array([1.0, 0.0, 0.0, 0.0])
    got = jax.jvp(lambda v: isotonic_regression(x, v), (y,), (t,))[1]
    np.testing.assert_allclose(np.asarray(got), [0.25] * 4, atol=1e-12)
    rng = np.random.default_rng(0)
    xs = jnp.asarray(rng.random(300))
    ys = jnp.asarray((rng.random(300) < xs).astype(float))
    ts = jnp.asarray(rng.normal(size=300))
    plain = jax.jit(lambda v: jax.jvp(lambda u: isotonic_regression(xs, u), (v,), (ts,))[1])
    weighted = jax.jvp(lambda u: isotonic_regression(xs, u, jnp.ones(300)), (ys,), (ts,))[1]
    np.testing.assert_allclose(np.asarray(plain(ys)), np.asarray(weighted), atol=1e-12)
    np.testing.assert_array_equal(  # the values: still the fast path's
      np.asarray(isotonic_regression(xs, ys)),
      np.asarray(isotonic_regression(xs, ys, jnp.ones(300))),
    )


def _pav_blocks(y: np.ndarray) -> list[list[int]]:
  """Pool-adjacent-violators on y (already in x order, distinct x): the pools' index lists."""
  pools: list[list[int]] = []
  means: list[float] = []
  for i, v in enumerate(y):
    pools.append([i])
    means.append(float(v))
    while len(means) > 1 and means[-2] > means[-1]:
      b, mb = pools.pop(), means.pop()
      a, ma = pools.pop(), means.pop()
      pools.append(a + b)
      means.append((ma * len(a) + mb * len(b)) / (len(a) + len(b)))
  return pools


def test_jacfwd_through_the_fit_is_the_pool_averaging_matrix():
  """``jax.jacfwd`` (``vmap`` of ``jvp`` with unbatched primals) re-entered the row batching
  rule without end and exhausted memory; the Jacobian in the targets averages each pool."""
  rng = np.random.default_rng(3)
  x = rng.permutation(40).astype(np.float64)
  y = (rng.random(40) < x / 40).astype(np.float64) + 0.1 * rng.random(40)
  order = np.argsort(x)
  want = np.zeros((40, 40))
  for pool in _pav_blocks(y[order]):
    idx = order[pool]
    want[np.ix_(idx, idx)] = 1.0 / len(idx)
  with jax.enable_x64(True):
    for w in (None, jnp.ones(40)):
      jac = jax.jacfwd(lambda v, w=w: isotonic_regression(x, v, w))(jnp.asarray(y))
      np.testing.assert_allclose(np.asarray(jac), want, atol=1e-12)
    # a batch of tangents at one point (the same call as jacfwd's), and under jit
    ts = jnp.asarray(rng.normal(size=(3, 40)))
    got = jax.jit(
      jax.vmap(lambda t: jax.jvp(lambda v: isotonic_regression(x, v), (jnp.asarray(y),), (t,))[1])
    )(ts)
    np.testing.assert_allclose(np.asarray(got), np.asarray(ts) @ want.T, atol=1e-12)


def test_reverse_mode_matches_central_differences():
  """``jax.grad`` stopped at the sorts' ``custom_vmap`` (no transpose); the fit's derivative
  holds the pools, so it matches central differences in the targets and the weights."""
  rng = np.random.default_rng(11)
  with jax.enable_x64(True):
    x = jnp.asarray(rng.random(60))
    y = jnp.asarray(rng.random(60) + x)
    w = jnp.asarray(rng.random(60) + 0.1)
    c = jnp.asarray(rng.normal(size=60))

    def f(v, b):
      return jnp.sum(c * isotonic_regression(x, v, b) ** 2)

    g = jax.jit(jax.grad(f, argnums=(0, 1)))(y, w)
    gu = jax.grad(lambda v: jnp.sum(c * isotonic_regression(x, v) ** 2))(y)
    for i in (0, 17, 59):
      e = np.zeros(60)
      e[i] = 1e-6
      fd_y = (f(y + e, w) - f(y - e, w)) / 2e-6
      fd_w = (f(y, w + e) - f(y, w - e)) / 2e-6
      fd_u = (f(y + e, None) - f(y - e, None)) / 2e-6
      np.testing.assert_allclose([g[0][i], g[1][i], gu[i]], [fd_y, fd_w, fd_u], rtol=1e-6)
    # the fit is piecewise constant in x, and the step function's knots move with x
    gx = jax.grad(lambda u: jnp.sum(c * isotonic_regression(u, y)))(x)
    np.testing.assert_array_equal(np.asarray(gx), 0.0)
    knots = jax.grad(lambda u: jnp.sum(c * isotonic_fit(u, y).x))(x)
    np.testing.assert_allclose(np.asarray(knots), np.asarray(c)[np.argsort(np.argsort(x))])


def test_second_derivatives_and_invalid_weights():
  """From a reread: the derivative rule computed its fit with the raw PAV (whose key sort and
  packed 0/1 sort drop tangents), so ``jax.hessian`` read 0; and a select in it turned the
  NaN cotangent of all-zero weights into a zero gradient in the weights."""
  rng = np.random.default_rng(0)
  with jax.enable_x64(True):
    x = jnp.asarray(rng.random(8))
    y = jnp.asarray(rng.random(8))
    knots = jax.hessian(lambda u: jnp.sum(isotonic_fit(u, y).x ** 2))(x)
    np.testing.assert_allclose(np.diag(np.asarray(knots)), 2.0)
    x15 = jnp.asarray(rng.random(15))
    yb = jnp.asarray((rng.random(15) < 0.5).astype(float))
    jac = np.asarray(jax.jacfwd(lambda v: isotonic_regression(x15, v))(yb))
    assert np.abs(jac).max() > 0
    for second in (jax.hessian, lambda g: jax.jacrev(jax.jacrev(g))):
      hess = second(lambda v: jnp.sum(isotonic_regression(x15, v) ** 2))(yb)
      np.testing.assert_allclose(np.asarray(hess), 2 * jac.T @ jac, atol=1e-12)

    def f(v, b):
      return jnp.sum(isotonic_regression(jnp.arange(5.0), v, b) ** 2)

    for w in (jnp.zeros(5), jnp.array([1.0, -1.0, 1.0, 1.0, 1.0])):
      g = jax.jit(jax.grad(f, argnums=(0, 1)))(jnp.asarray(rng.random(5)), w)
      assert np.all(np.isnan(np.asarray(g[0]))) and np.all(np.isnan(np.asarray(g[1])))
