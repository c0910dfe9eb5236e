"""The binning engine (SPEC §1) against loop references, rule by rule.

Fixed bins are ``clip(ceil(s*m), 1, m)`` with the product rounded in the
scores' dtype: the references compute ``np.ceil(s32 * np.float32(m))`` on
float32 scores (``tests/_reference.py``), which agrees with JAX exactly,
also for scores lying on or next to a bin edge ``j/m``.
"""

import math
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))  # --import-mode=importlib
import _reference as R

from jaxcal import metrics
from jaxcal._src import binning as B

MS = np.arange(1, 41)  # bin counts for the vmapped checks (max_bins = 40)


def _edge_scores(max_m=40):
  """float32 scores on and one ulp around every edge j/m, m <= max_m, plus 0 and 1."""
  vals = {0.0, 1.0}
  for m in range(1, max_m + 1):
    for j in range(m + 1):
      e = np.float32(j) / np.float32(m)
      vals.update([e, np.nextafter(e, np.float32(2)), np.nextafter(e, np.float32(-1))])
  s = np.array(sorted(vals), np.float32)
  return s[(s >= 0) & (s <= 1)]


@pytest.fixture(scope="module")
def scores():
  rng = np.random.default_rng(0)
  s = rng.random(200).astype(np.float32)
  s[:40] = np.round(s[:40] * 4) / 4  # ties, incl. exact 0, 0.25, ..., 1.0
  s[40:45] = 1.0
  return s


def test_bin_ids_match_reference(scores):
  for m in (1, 2, 3, 7, 15, 40):
    np.testing.assert_array_equal(metrics.bin_ids(scores, m, "fixed"), R.fixed_bins(scores, m))
    np.testing.assert_array_equal(
      metrics.bin_ids(scores, m, "quantile"), R.quantile_bins(scores, m)
    )


def test_fixed_rule_at_edges_float32():
  # Every edge j/m and its float32 neighbours: JAX's rounded product agrees
  # with numpy's float32 product (the reference), bin for bin.
  s = _edge_scores()
  f = jax.jit(jax.vmap(lambda m: metrics.bin_ids(s, m, "fixed")))
  got = np.asarray(f(jnp.asarray(MS)))
  want = np.stack([R.fixed_bins(s, int(m)) for m in MS])
  np.testing.assert_array_equal(got, want)


def test_confidence_one_lands_in_last_fixed_bin():
  s = np.array([1.0, 0.0, 1.0], np.float32)
  for m in (1, 2, 3, 10, 15, 97, 200):
    assert metrics.bin_ids(s, m, "fixed").tolist() == [m - 1, 0, m - 1]


def test_quantile_ties_by_index():
  # All scores equal: the stable order is the index order, so sample i goes
  # to bin ceil((i+1) m / n) - 1 and ties are split across bins (SPEC §1).
  n, m = 10, 4
  got = metrics.bin_ids(np.full(n, 0.5, np.float32), m, "quantile").tolist()
  assert got == [math.ceil((i + 1) * m / n) - 1 for i in range(n)]
  # Two tie groups; order inside each follows the index.
  s = np.array([0.7, 0.2, 0.7, 0.2, 0.7, 0.2], np.float32)
  assert metrics.bin_ids(s, 3, "quantile").tolist() == [1, 0, 2, 0, 2, 1]
  # Deterministic: same answer again and under jit.
  assert jax.jit(lambda x: metrics.bin_ids(x, 3, "quantile"))(s).tolist() == [1, 0, 2, 0, 2, 1]


def test_floor_mul_div_exact():
  rng = np.random.default_rng(1)
  a = rng.integers(0, 2**20, 500)
  b = rng.integers(0, 2**11, 500)
  c = rng.integers(1, 2**21, 500)
  got = np.asarray(B.floor_mul_div(a, b, c))
  want = np.array([int(x) * int(y) // int(z) for x, y, z in zip(a, b, c)])
  np.testing.assert_array_equal(got, want)


def test_quantile_ends():
  for n in (1, 5, 17, 300):
    for m in (1, 2, 3, min(n, 40)):
      e = np.asarray(B.quantile_ends(n, m, 40))
      want = [j * n // m if j < m else n for j in range(41)]
      assert e.tolist() == want


def test_blocked_cumsum_accuracy():
  rng = np.random.default_rng(2)
  x = rng.normal(size=(3, 1000)).astype(np.float32)
  want = np.cumsum(x.astype(np.float64), axis=1)
  np.testing.assert_allclose(B.blocked_cumsum(jnp.asarray(x), axis=1), want, atol=2e-4)
  np.testing.assert_allclose(B.blocked_cumsum(jnp.asarray(x.T)), want.T, atol=2e-4)
  ints = np.arange(10)
  assert B.blocked_cumsum(jnp.asarray(ints)).tolist() == np.cumsum(ints).tolist()


def test_edge_thresholds_characterise_fixed_rule():
  # s <= T(m, j)  <=>  ceil(fl(s*m)) <= j, on all edges and neighbours.
  table = B.edge_table(40, "float32")
  s = _edge_scores()
  thr = table.thresholds
  for m in (1, 2, 3, 7, 10, 29, 40):
    b = R.fixed_bins(s, m) + 1
    for j in range(1, m):
      t = thr[table.index[m, j - 1] - 1]
      np.testing.assert_array_equal(s <= t, b <= j)
    assert (table.index[m, m - 1 :] == thr.shape[0] + 1).all()


@pytest.mark.parametrize("method", ["edges", "sort"])
def test_binned_sums_fixed_methods(scores, method):
  rng = np.random.default_rng(3)
  v = rng.normal(size=(scores.shape[0], 2)).astype(np.float32)
  f = jax.jit(
    jax.vmap(lambda m: B.binned_sums(jnp.asarray(scores), jnp.asarray(v), m, "fixed", 40, method))
  )
  out = jax.tree_util.tree_map(np.asarray, f(jnp.asarray(MS)))  # numpy: no per-slice dispatch
  for k, m in enumerate(MS):
    b = R.fixed_bins(scores, int(m))
    want = R.lin_sums(v, np.zeros_like(v), b, int(m))
    np.testing.assert_allclose(out.sums[k, :m], want, atol=1e-5)
    assert np.all(np.asarray(out.sums[k, m:]) == 0)
    np.testing.assert_array_equal(out.counts[k, :m], np.bincount(b, minlength=m))
    np.testing.assert_allclose(out.cumsums[k, :m], np.cumsum(want, axis=0), atol=1e-5)


def _stable_prefix(s, b, sign):
  o = np.argsort(s, axis=-1, kind="stable")
  r = np.take_along_axis(sign * (s.astype(np.float64) - b), o, axis=-1)
  return np.concatenate([np.zeros(r.shape[:-1] + (1,)), np.cumsum(r, axis=-1)], axis=-1)


def _tied_rows(seed, rows=4, n=60):
  rng = np.random.default_rng(seed)
  s = (rng.integers(0, 5, (rows, n)) / 4).astype(np.float32)  # few values: mixed ties
  s[0] = rng.random(n)  # one row without ties
  s[1, ::4] = -0.0  # -0.0 ties with +0.0
  b = rng.random((rows, n)) < 0.4
  return s, b


@pytest.mark.parametrize("method", ["fast", "sort", "auto"])
def test_sorted_residual_prefix_stable_order(method):
  s, b = _tied_rows(4)
  f = jax.jit(lambda s, b: B.sorted_residual_prefix(s, b, -1.0, method))
  np.testing.assert_allclose(f(s, b), _stable_prefix(s, b, -1.0), atol=2e-5)


def test_sorted_residual_prefix_fallbacks():
  # More rows with mixed tie groups than the row repair takes (a quarter),
  # or scores outside (-2, 2): the fast int-key path falls back to the
  # stable sort for every row, still exact.
  rng = np.random.default_rng(5)
  s = (rng.integers(0, 3, (4, 40)) / 2).astype(np.float32)  # every row mixed
  b = rng.random((4, 40)) < 0.5
  f = jax.jit(lambda s, b: B.sorted_residual_prefix(s, b, 1.0, "fast"))
  np.testing.assert_allclose(f(s, b), _stable_prefix(s, b, 1.0), atol=2e-5)
  s2 = s * 3
  np.testing.assert_allclose(f(s2, b), _stable_prefix(s2, b, 1.0), atol=1e-4)


def test_binned_residual_sums_quantile_matches_reference():
  s, b = _tied_rows(6, rows=3, n=50)
  f = jax.jit(
    jax.vmap(
      lambda m: B.binned_residual_sums(
        jnp.asarray(s), jnp.asarray(b), m, "quantile", 40, method="fast"
      )
    )
  )
  out = jax.tree_util.tree_map(np.asarray, f(jnp.asarray(MS)))
  for k, m in enumerate(MS):
    for r in range(3):
      bins = R.quantile_bins(s[r], int(m))
      want = R.lin_sums(s[r], b[r].astype(float), bins, int(m))[:, 0]
      np.testing.assert_allclose(out.sums[k, r, :m, 0], want, atol=1e-5)
      np.testing.assert_array_equal(out.counts[k, r, :m], np.bincount(bins, minlength=m))
