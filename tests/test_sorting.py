"""The backend-specific sorts in jaxcal._src.sorting agree with numpy.

CI has no accelerator, so the GPU/TPU branches of ``platform_dependent`` are
called directly here: every strategy must give the same answer on CPU.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcal._src import sorting as S
from jaxcal._src.utility.uc import uc_from_scores


def _scores(rng, shape):
  x = rng.standard_normal(shape).astype(np.float32)
  x.reshape(-1)[::5] = np.round(x.reshape(-1)[::5], 1)  # many ties
  x.reshape(-1)[::11] = 0.0
  x.reshape(-1)[::13] = -0.0  # -0.0 ties with +0.0
  return x


def _np_stable(x):
  return np.argsort(np.where(x == 0, np.float32(0), x), axis=-1, kind="stable")


@pytest.mark.parametrize("shape", [(2,), (7,), (1000,), (3, 5000), (2, 3, 70_000)])
def test_argsort_strategies_equal_numpy_stable(shape):
  x = _scores(np.random.default_rng(0), shape)
  want = _np_stable(x)
  key = S.float_to_key(jnp.asarray(x))
  np.testing.assert_array_equal(np.asarray(S._radix_argsort(key)), want)
  np.testing.assert_array_equal(np.asarray(S._pair_argsort(key)), want)
  np.testing.assert_array_equal(np.asarray(jax.jit(S.stable_argsort)(jnp.asarray(x))), want)


def test_key_roundtrip_and_order():
  x = _scores(np.random.default_rng(1), (4000,))
  key = S.float_to_key(jnp.asarray(x))
  back = np.asarray(S.key_to_float(key))
  np.testing.assert_array_equal(back, np.where(x == 0, np.float32(0), x))
  order = np.argsort(x, kind="stable")
  assert np.all(np.diff(np.asarray(key)[order].astype(np.int64)) >= 0)


@pytest.mark.parametrize("impl", ["gathered", "paired", "public"])
def test_sort_with_payload_groups(impl):
  rng = np.random.default_rng(2)
  x = _scores(rng, (3, 3000))
  pay = rng.standard_normal(x.shape).astype(np.float32)
  f = {"gathered": S._gathered_sort, "paired": S._paired_sort, "public": S.sort_with_payload}[impl]
  xs, ps = map(np.asarray, jax.jit(f)(jnp.asarray(x), jnp.asarray(pay)))
  order = _np_stable(x)
  np.testing.assert_array_equal(xs, np.take_along_axis(np.where(x == 0, 0, x), order, -1))
  # the payload is a permutation within each group of tied x (order there is free)
  for r in range(x.shape[0]):
    for v in np.unique(xs[r]):
      got = np.sort(ps[r][xs[r] == v])
      want = np.sort(pay[r][np.where(x[r] == 0, 0, x[r]) == v])
      np.testing.assert_array_equal(got, want)


def test_uc_independent_of_order_among_ties():
  """UC read between distinct values: the GPU path's unstable order gives the same result."""
  rng = np.random.default_rng(3)
  v = np.round(rng.random(5000), 2).astype(np.float32)
  u = (rng.random(5000) < v).astype(np.float32)
  ref = uc_from_scores(jnp.asarray(v), jnp.asarray(u))
  vs, rs = S._paired_sort(jnp.asarray(v), jnp.asarray(u - v))
  s = np.concatenate([[0.0], np.cumsum(np.asarray(rs, np.float64))]) / 5000
  vs = np.asarray(vs)
  cut = np.concatenate([[True], vs[1:] != vs[:-1], [True]])
  np.testing.assert_allclose(float(ref.value), s[cut].max() - s[cut].min(), atol=2e-6)


@pytest.mark.parametrize("kind", ["probabilities", "wide"])
def test_radix_two_and_three_pass_paths(kind):
  """n > 2^16: 2 passes when the keys span little (scores in [0, 1]), else 3."""
  rng = np.random.default_rng(4)
  x = rng.random((2, 70_000)).astype(np.float32)
  x[:, ::3] = np.round(x[:, ::3], 2)
  if kind == "wide":
    x[0, ::17] = -1e30
    x[1, ::19] = 3e38
  want = _np_stable(x)
  got = jax.jit(S._radix_argsort)(S.float_to_key(jnp.asarray(x)))
  np.testing.assert_array_equal(np.asarray(got), want)
