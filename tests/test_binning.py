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


# ------------------------------------------------------------ sample masks
#
# A masked-out sample is treated exactly as if it were absent: n becomes the
# number of True entries, quantile positions count only them, fixed bins and
# sums ignore them. Padding holds junk (NaN, inf, out-of-range scores, bits
# set) at random positions, not only at the end, to show it is never read.


def _pad(s, b, extra, seed):
  """(scores, bits, where) with `extra` junk samples inserted at random positions."""
  rng = np.random.default_rng(seed)
  rows, n = s.shape
  n_pad = n + extra
  keep = np.zeros((rows, n_pad), bool)
  for r in range(rows):
    keep[r, np.sort(rng.choice(n_pad, n, replace=False))] = True
  junk = rng.choice(
    np.array([np.nan, np.inf, -np.inf, 5.0, -3.0, 0.5, 1.0, 0.0], np.float32), (rows, n_pad)
  )
  sp = junk.copy()
  sp[keep] = s.ravel()
  bp = rng.random((rows, n_pad)) < 0.5
  bp[keep] = b.ravel()
  return sp, bp, keep


@pytest.mark.parametrize(
  "binning,method",
  [("fixed", "edges"), ("fixed", "sort"), ("quantile", "fast"), ("quantile", "sort")],
)
def test_where_padding_equals_unpadded(binning, method):
  s, b = _tied_rows(8, rows=3, n=50)
  sp, bp, keep = _pad(s, b, 23, seed=9)
  ms = jnp.asarray(np.r_[MS, 60])  # 60 > n: empty quantile bins under a traced m

  def f(s, b, w, m):
    return B.binned_residual_sums(s, b, m, binning, 64, sign=-1.0, method=method, where=w)

  f = jax.jit(jax.vmap(f, in_axes=(None, None, None, 0)))
  want = jax.tree_util.tree_map(np.asarray, f(s, b, None, ms))
  got = jax.tree_util.tree_map(np.asarray, f(sp, bp, keep, ms))
  np.testing.assert_array_equal(got.counts, want.counts)
  np.testing.assert_allclose(got.sums, want.sums, rtol=0, atol=2e-6)
  np.testing.assert_allclose(got.cumsums, want.cumsums, rtol=0, atol=2e-6)
  if binning == "fixed" and method == "edges":  # same sums in the same order: bitwise
    np.testing.assert_array_equal(got.sums, want.sums)
  for k, m in enumerate(np.asarray(ms)):  # and both equal the loop reference
    for r in range(3):
      bins = R.bins(s[r], int(m), binning)
      ref = -R.lin_sums(s[r], b[r].astype(float), bins, int(m))[:, 0]
      np.testing.assert_allclose(got.sums[k, r, :m, 0], ref, atol=2e-6)


def test_where_all_true_and_mask_broadcast():
  s, b = _tied_rows(10, rows=2, n=40)
  f = jax.jit(lambda w: B.binned_residual_sums(s, b, 7, "quantile", 8, method="fast", where=w))
  a, c = f(np.ones((2, 40), bool)), f(np.ones(40, bool))  # a (n,) mask broadcasts over rows
  d = B.binned_residual_sums(s, b, 7, "quantile", 8, method="fast")
  for x in (a, c):
    np.testing.assert_array_equal(x.counts, d.counts)
    np.testing.assert_allclose(x.sums, d.sums, atol=1e-7)


def test_where_fast_sort_path_large_n():
  # n >= FAST_SORT_MIN_N takes the int-key sort under "auto"; ties and
  # mixed tie groups included, padding in the middle of the data.
  rng = np.random.default_rng(12)
  n = B.FAST_SORT_MIN_N + 100
  s = (rng.integers(0, 50, (2, n)) / 49).astype(np.float32)
  b = rng.random((2, n)) < 0.3
  sp, bp, keep = _pad(s, b, 300, seed=13)
  f = jax.jit(lambda s, b, w: B.sorted_residual_prefix(s, b, 1.0, "auto", where=w))
  got = np.asarray(f(sp, bp, keep))
  want = np.asarray(f(s, b, None))
  np.testing.assert_allclose(got[:, : n + 1], want, atol=5e-4)
  np.testing.assert_allclose(got[:, : n + 1], _stable_prefix(s, b, 1.0), atol=5e-4)
  np.testing.assert_array_equal(got[:, n + 1 :], np.repeat(got[:, n : n + 1], 300, axis=1))


def test_bin_ids_where():
  s = np.array([0.3, 0.9, 0.1, 0.3, 0.2, 0.7], np.float32)
  w = np.array([True, False, True, True, False, True])
  for binning in ("fixed", "quantile"):
    got = np.asarray(metrics.bin_ids(s, 2, binning, where=w))
    assert (got[~w] == -1).all()
    np.testing.assert_array_equal(got[w], R.bins(s[w], 2, binning))
  with pytest.raises(ValueError, match="where must be a bool array"):
    metrics.bin_ids(s, 2, where=w.astype(int))
  with pytest.raises(ValueError, match="where must have shape"):
    metrics.bin_ids(s, 2, where=w[:3])


def test_quantile_bin_of_position_inverts_quantile_ends():
  # The two faces of the one quantile rule agree: bin j holds exactly the
  # sorted positions (e_{j-1}, e_j].
  for n in (1, 7, 40, 1000):
    for m in (1, 3, 7, 40, 64):
      ends = np.asarray(B.quantile_ends(n, m, 64))
      ids = np.asarray(B.quantile_bin_of_position(jnp.int32(n), jnp.int32(m), n + 5))
      assert (ids[n:] == -1).all()
      np.testing.assert_array_equal(np.bincount(ids[:n], minlength=64), np.diff(ends))
