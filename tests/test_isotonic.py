"""isotonic_regression / isotonic_fit / isotonic_predict (SPEC §4).

References: scikit-learn's IsotonicRegression (float64, ties pooled) and a
naive loop-based float64 PAV below. Shapes are few and fixed (zero-weight
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


def test_unweighted_large_uses_parallel_rounds_and_matches_sklearn():
  # n > STOP_BLOCKS so the parallel rounds run before the sequential pass;
  # also an adversarial outlier, where rounds stall and the stack finishes.
  rng = np.random.default_rng(1)
  n = 4096
  assert n > I.STOP_BLOCKS
  x = rng.random(n)
  y_bin = (rng.random(n) < x).astype(float)
  y_out = np.arange(n) * 1e-3
  y_out[np.argmin(x)] = 1e4
  with jax.enable_x64(True):
    fit = jax.jit(jax.vmap(isotonic_regression))
    got = np.asarray(fit(np.stack([x, x]), np.stack([y_bin, y_out])))
  for row, y in zip(got, (y_bin, y_out)):
    ref = sklearn_isotonic.IsotonicRegression().fit(x, y).predict(x)
    np.testing.assert_allclose(row, ref, atol=1e-9)


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


def test_jit_and_vmap_equal_eager_loop():
  rng = np.random.default_rng(3)
  xs = rng.integers(0, 10, (5, N)).astype(np.float32) / 10
  ys = rng.random((5, N)).astype(np.float32)
  ws = (rng.random((5, N)) + 0.5).astype(np.float32)
  loop = np.stack([np.asarray(isotonic_regression(a, b, c)) for a, b, c in zip(xs, ys, ws)])
  vm = np.asarray(jax.jit(jax.vmap(isotonic_regression))(xs, ys, ws))
  np.testing.assert_array_equal(vm, loop)
  # nested vmap (data sets x classes) with an unbatched argument
  nested = jax.jit(
    jax.vmap(jax.vmap(isotonic_regression, in_axes=(0, 0, None)), in_axes=(None, 0, None))
  )(xs, np.stack([ys, ys[::-1]]), ws[0])
  assert nested.shape == (2, 5, N)
  np.testing.assert_array_equal(
    np.asarray(nested[0, 1]), np.asarray(isotonic_regression(xs[1], ys[1], ws[0]))
  )


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
