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
from jaxcal._src import sorting

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
  # as many quantile bins as samples: one sample per bin, in the stable order
  n = scores.shape[0]
  np.testing.assert_array_equal(metrics.bin_ids(scores, n, "quantile"), R.quantile_bins(scores, n))


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


def test_blocked_cumsum_scan_form_accuracy():
  """The GPU form (an associative scan), run here directly: float64 reference, exact ints."""
  rng = np.random.default_rng(4)
  x = rng.normal(size=(3, 1000)).astype(np.float32)
  want = np.cumsum(x.astype(np.float64), axis=1)
  np.testing.assert_allclose(B._scan_cumsum_last(jnp.asarray(x)), want, atol=5e-5)
  ints = rng.integers(-(2**20), 2**20, size=(2, 777)).astype(np.int32)
  got = np.asarray(B._scan_cumsum_last(jnp.asarray(ints)))
  np.testing.assert_array_equal(got, np.cumsum(ints.astype(np.int64), axis=1))
  wrap = jnp.array([2**30, 2**30, 5], jnp.int32)  # exact modulo 2**32, as the matmul form
  assert B._scan_cumsum_last(wrap).tolist() == B.blocked_cumsum(wrap).tolist()
  assert B._scan_cumsum_last(jnp.ones((2, 1))).tolist() == [[1.0], [1.0]]
  assert B._scan_cumsum_last(jnp.ones((2, 0))).shape == (2, 0)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.int32, jnp.bool_])
def test_blocked_cumsum_form_per_platform(dtype):
  """CPU lowers the matmul form, CUDA/ROCm the scan (no matrix product to autotune)."""
  f = jax.jit(lambda v: B.blocked_cumsum(v, axis=1))
  arg = jax.ShapeDtypeStruct((3, 1000), dtype)
  for platform, has_dot in (("cpu", True), ("cuda", False), ("rocm", False), ("tpu", True)):
    text = jax.export.export(f, platforms=[platform])(arg).mlir_module()
    assert ("dot_general" in text) == has_dot, (platform, dtype)


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
  # masked: 30 junk samples (NaN values, scores out of range or NaN) among them
  keep = np.ones(scores.shape[0] + 30, bool)
  keep[rng.choice(keep.shape[0], 30, replace=False)] = False
  sp = rng.choice(np.array([np.nan, 5.0, -3.0, 0.5], np.float32), keep.shape[0])
  sp[keep] = scores
  vp = np.full((keep.shape[0], 2), np.nan, np.float32)
  vp[keep] = v
  sp, vp, wp = jnp.asarray(sp), jnp.asarray(vp), jnp.asarray(keep)
  g = jax.jit(jax.vmap(lambda m: B.binned_sums(sp, vp, m, "fixed", 40, method, where=wp)))
  masked = jax.tree_util.tree_map(np.asarray, g(jnp.asarray(MS)))
  for k, m in enumerate(MS):
    b = R.fixed_bins(scores, int(m))
    want = R.lin_sums(v, np.zeros_like(v), b, int(m))
    for o in (out, masked):
      np.testing.assert_allclose(o.sums[k, :m], want, atol=1e-5)
      assert np.all(np.asarray(o.sums[k, m:]) == 0)
      np.testing.assert_array_equal(o.counts[k, :m], np.bincount(b, minlength=m))
      np.testing.assert_allclose(o.cumsums[k, :m], np.cumsum(want, axis=0), atol=1e-5)


def test_fixed_bin_ends_by_bisection_at_a_power_of_two():
  # The sort strategy's fixed-rule bin ends bisect over the n + 1 possible ends:
  # ceil(log2(n + 1)) steps, one more than log2(n) when n is a power of two. The
  # last step is needed when only the lowest score lies in the bins <= j; a
  # search that has ended must stay put when every score lies in them.
  n = 64
  rng = np.random.default_rng(31)
  s = np.sort(rng.uniform(0.5, 1.0, (3, n)).astype(np.float32), axis=1)
  s[0, 0] = 0.01  # alone in bin 1 for every m < 50
  s[1, 0] = 0.3  # alone in the bins below 1/2
  s[2] = np.linspace(0.1, 0.8, n, dtype=np.float32)  # all in the bins <= 0.8 m
  f = jax.jit(jax.vmap(jax.vmap(lambda row, m: B.bin_ends(row, m, "fixed", 40), (None, 0))))
  got = np.asarray(f(s, np.broadcast_to(MS, (3, 40))))
  for r in range(3):
    for k, m in enumerate(MS):
      counts = np.bincount(R.fixed_bins(s[r], int(m)), minlength=40)
      np.testing.assert_array_equal(got[r, k], np.r_[0, np.cumsum(counts)], err_msg=f"{r} {m}")


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


def test_sorted_residual_prefix_is_the_stable_float_prefix():
  s, b = _tied_rows(4)
  f = jax.jit(lambda s, b: B.sorted_residual_prefix(s, b, -1.0))
  np.testing.assert_allclose(f(s, b), _stable_prefix(s, b, -1.0), atol=2e-5)
  s3 = s * 3  # any scores: the float engine has no range limit
  np.testing.assert_allclose(f(s3, b), _stable_prefix(s3, b, -1.0), atol=1e-4)


def _sorted_keys(s, b, stable, fast, where=None):
  def one(s, b, w):
    return B._sorted_keys(B._residual_keys(s, b, w), jnp.sum(w), stable, fast)

  f = jax.jit(jax.vmap(one))
  w = np.ones(s.shape, bool) if where is None else where
  return np.asarray(f(jnp.asarray(s), jnp.asarray(b), jnp.asarray(w)))


def _reference_keys(s, b, where=None):
  """uint32 keys 2 k(s) + b in the exact stable order (numpy), masked ones last."""
  k = np.asarray(sorting.float_to_key(jnp.asarray(s)), np.uint64)
  kb = ((k - 0x40000000) << 1) | np.asarray(b, np.uint64)
  if where is not None:
    kb = np.where(where, kb, 0xFFFFFFFF)
    s = np.where(where, s, np.inf)
  o = np.argsort(s, axis=-1, kind="stable")
  return np.take_along_axis(kb, o, axis=-1).astype(np.uint32)


@pytest.mark.parametrize("fast", [True, False])
def test_sorted_keys_are_in_the_stable_order(fast):
  # The uint32 key sort with the mixed-tie repair (fast) and the stable
  # radix sort give exactly the stable order: bits inside a tie group in
  # index order. Rows with ties of 0.0 / -0.0, of 1.0, and without ties.
  s, b = _tied_rows(4, rows=4, n=300)
  np.testing.assert_array_equal(_sorted_keys(s, b, True, fast), _reference_keys(s, b))
  sp, bp, keep = _pad(s, b, 37, seed=5)
  got = _sorted_keys(np.nan_to_num(sp), bp, True, fast, where=keep)
  np.testing.assert_array_equal(got[:, :300], _reference_keys(s, b))
  assert (got[:, 300:] == 0xFFFFFFFF).all()


def test_mixed_tie_repair_and_its_fallback():
  # Few mixed groups among many distinct values: repaired in place. Every
  # value tied and mixed (more candidates than the repair takes): the
  # stable fallback runs, for the whole batch under vmap (one cond).
  rng = np.random.default_rng(5)
  n = 5000
  s = rng.random((3, n)).astype(np.float32)
  s[0, ::50] = s[0, 7]  # one big mixed group
  s[1, 1::97] = 0.25
  s[2] = (rng.integers(0, 3, n) / 2).astype(np.float32)  # 3 values, all mixed
  b = rng.random((3, n)) < 0.3
  assert B._tie_cap(n) < n
  np.testing.assert_array_equal(_sorted_keys(s, b, True, True), _reference_keys(s, b))
  np.testing.assert_array_equal(
    _sorted_keys(s[:2], b[:2], True, True), _reference_keys(s[:2], b[:2])
  )


def _ties_across_quantile_ends(n, rows, ms, seed):
  """Distinct scores except for mixed tie groups straddling the quantile ends of `ms`."""
  rng = np.random.default_rng(seed)
  s = np.sort(rng.random((rows, n)).astype(np.float32), axis=1)
  for m in ms:
    for j in range(1, m):
      e = j * n // m
      s[:, e - 2 : e + 3] = s[:, e - 2 : e - 1]  # 5 equal scores around the end
  perm = np.stack([rng.permutation(n) for _ in range(rows)])
  s = np.take_along_axis(s, perm, axis=1)
  b = rng.random((rows, n)) < 0.5
  return s, b


def test_tie_repair_at_possible_bin_ends():
  # Mixed tie groups cut by quantile bin ends: with max_bins the repair
  # touches only groups at possible ends (no fallback, no pass over the
  # row); the sums equal the stable-order reference at every bin count.
  n, ms = 6000, (3, 7, 16)
  s, b = _ties_across_quantile_ends(n, 2, ms, seed=3)
  f = jax.jit(
    jax.vmap(
      lambda s, b: B._fix_mixed_ties(
        B._residual_keys(s, b, None), jnp.sort(B._residual_keys(s, b, None)), n, 16
      )[1]
    )
  )
  assert not np.asarray(f(s, b)).any()  # repaired in place: no fallback
  g = jax.jit(
    jax.vmap(lambda m: B.binned_residual_sums(s, b, m, "quantile", 16, method="fast"), (0,))
  )
  out = g(jnp.asarray(ms))
  for k, m in enumerate(ms):
    for r in range(2):
      ref = R.lin_sums(s[r], b[r].astype(float), R.quantile_bins(s[r], m), m)[:, 0]
      np.testing.assert_allclose(out.sums[k, r, :m, 0], ref, rtol=1e-6, atol=1e-6)


def test_exact_sums_outside_the_domain_are_nan():
  s, b = _tied_rows(6, rows=2, n=50)
  s = s.copy()
  s[1, 3] = 2.0  # scores must lie in (-2, 2): that row's sums are NaN, the other row's are not
  for binning, method in [("quantile", "auto"), ("fixed", "edges"), ("fixed", "sort")]:
    out = jax.jit(lambda: B.binned_residual_sums(s, b, 5, binning, 5, method=method))()
    assert np.isnan(out.sums[1]).all() and np.isnan(out.cumsums[1]).all()
    assert np.isfinite(out.sums[0]).all()


SINGLE_MS = (1, 2, 3, 7, 15, 16, 29, 40)


@pytest.mark.parametrize("labels", [False, True])
def test_single_count_histogram_equals_the_threshold_table(scores, labels):
  # One known bin count is histogrammed straight into its own bins; the
  # threshold table serves every count at once. Same exact integer sums:
  # bitwise equal, on scores on and one ulp around every edge j/m, with junk
  # (NaN, inf, out of range) masked out, and a row holding a score outside
  # the domain is NaN on both paths.
  rng = np.random.default_rng(41)
  n = scores.shape[0]
  s = np.stack([scores, rng.permutation(scores), rng.random(n).astype(np.float32)], axis=1)
  s[5, 2] = 2.5  # out of the exact engine's domain: column 2 is NaN on both paths
  s[:6, 1] = [-1.99, -0.5, -0.0, 1.0, 1.5, 1.9999]  # in the domain, outside [0, 1]: end bins
  junk = np.array([np.nan, np.inf, -3.0, 0.5], np.float32)
  keep = rng.random(n) < 0.9
  keep[5] = True
  padded = np.where(keep[:, None], s, rng.choice(junk, s.shape))  # junk where masked out
  y = rng.integers(0, 3, n).astype(np.int32)
  bits = rng.random(s.shape) < 0.4

  def sums(m, single, where, counts):
    kw = dict(labels=jnp.asarray(y)) if labels else {}
    b = None if labels else jnp.asarray(bits)
    return B.binned_residual_sums(
      jnp.asarray(s if where is None else padded),
      b,
      m,
      "fixed",
      40,
      sign=-1.0,
      where=where,
      axis=0,
      counts=counts,
      single_count=single,
      **kw,
    )

  for where in (None, jnp.asarray(keep)[:, None]):
    for counts in (True, False):
      f_one = jax.jit(lambda m: sums(m, True, where, counts))  # traced, unbatched count
      f_table = jax.jit(lambda m: sums(m, False, where, counts))
      for m in SINGLE_MS:
        one, table = f_one(m), f_table(m)
        for a, t in zip(one, table):
          if t is None:
            assert a is None
            continue
          np.testing.assert_array_equal(np.asarray(a), np.asarray(t), err_msg=f"m={m}")
        got = np.asarray(one.sums[..., 0])
        assert np.isnan(got[2]).all() and np.isfinite(got[:2]).all()
        for r in range(2):  # and the loop reference
          sel = np.ones(n, bool) if where is None else keep
          outcome = (y == r) if labels else bits[:, r]
          ref = -R.lin_sums(s[sel, r], outcome[sel].astype(float), R.fixed_bins(s[sel, r], m), m)
          np.testing.assert_allclose(got[r, :m], ref[:, 0], atol=2e-6)
          assert (got[r, m:] == 0).all()
  # a promise broken by a vmap over counts: still the same numbers (one histogram per count)
  ms = jnp.asarray(SINGLE_MS)
  vm = jax.jit(jax.vmap(lambda m: sums(m, True, None, True)))(ms)
  vt = jax.jit(jax.vmap(lambda m: sums(m, False, None, True)))(ms)
  np.testing.assert_array_equal(np.asarray(vm.sums), np.asarray(vt.sums))
  np.testing.assert_array_equal(np.asarray(vm.counts), np.asarray(vt.counts))


def test_public_calls_histogram_one_count_directly():
  # The public fixed-bin errors promise a single count exactly when the count
  # is one concrete value: the program compiled for the CPU then holds no
  # threshold table (its gather of the table's index row), and an array of
  # counts or a traced count (a vmap over counts) keeps the table. On other
  # backends the table stays (faster there: experiments/bench/single_count.py
  # on an H200), chosen by lax.platform_dependent, whose other branch XLA
  # removes when it compiles (so the compiled text, not the lowered one).
  rng = np.random.default_rng(42)
  p = rng.dirichlet(np.ones(4), 200).astype(np.float32)
  y = rng.integers(0, 4, 200)
  table = B.edge_table(16, "float32")
  direct = jax.default_backend() == "cpu"

  def holds_table(f, *args):
    text = jax.jit(f).lower(*args).compile().as_text()
    return f"f32[{table.thresholds.shape[0] + table.width}]" in text

  for f in (metrics.conf_ece, metrics.classwise_ece, metrics.ecce):
    assert holds_table(lambda p: f(p, y, 15), p) is not direct, f
    assert holds_table(lambda p: f(p, y, np.array([15, 16])), p), f
    assert holds_table(lambda m, p: f(p, y, m, max_bins=16), jnp.int32(15), p), f
    vm = jax.vmap(lambda m: f(p, y, m, max_bins=16))(jnp.array([3, 15]))
    np.testing.assert_allclose(vm, [f(p, y, 3), f(p, y, 15)], rtol=1e-6, err_msg=str(f))


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
      np.testing.assert_allclose(got.cumsums[k, r, :m, 0], np.cumsum(ref), atol=2e-6)  # signed


def test_where_all_true_and_mask_broadcast():
  s, b = _tied_rows(10, rows=2, n=40)
  f = jax.jit(lambda w: B.binned_residual_sums(s, b, 7, "quantile", 8, method="fast", where=w))
  a, c = f(np.ones((2, 40), bool)), f(np.ones(40, bool))  # a (n,) mask broadcasts over rows
  d = jax.jit(lambda: B.binned_residual_sums(s, b, 7, "quantile", 8, method="fast"))()
  for x in (a, c):
    np.testing.assert_array_equal(x.counts, d.counts)
    np.testing.assert_allclose(x.sums, d.sums, atol=1e-7)


def test_where_fast_sort_path_large_n():
  # The uint32 key sort with the tie repair ("fast", what "auto" takes from
  # FAST_SORT_MIN_N = 2**19 samples on); ties and mixed tie groups included, padding
  # in the middle.
  rng = np.random.default_rng(12)
  n = 4196
  s = (rng.integers(0, 400, (2, n)) / 399).astype(np.float32)
  b = rng.random((2, n)) < 0.3
  sp, bp, keep = _pad(s, b, 300, seed=13)
  f = jax.jit(
    jax.vmap(
      lambda m, s, b, w: B.binned_residual_sums(s, b, m, "quantile", 64, method="fast", where=w),
      (0, None, None, None),
    )
  )
  ms = jnp.array([1, 7, 64])
  got = f(ms, sp, bp, keep)
  want = f(ms, s, b, None)
  np.testing.assert_array_equal(got.sums, want.sums)  # exact sums: bitwise equal
  np.testing.assert_array_equal(got.counts, want.counts)
  for k, m in enumerate(np.asarray(ms)):
    for r in range(2):
      ref = R.lin_sums(s[r], b[r].astype(float), R.quantile_bins(s[r], int(m)), int(m))[:, 0]
      np.testing.assert_allclose(got.sums[k, r, :m, 0], ref, rtol=1e-6, atol=1e-6)


def test_bin_ids_where():
  s = np.array([0.3, 0.9, 0.1, 0.3, 0.2, 0.7], np.float32)
  w = np.array([True, False, True, True, False, True])
  for binning in ("fixed", "quantile"):
    got = np.asarray(metrics.bin_ids(s, 2, binning, where=w))
    assert (got[~w] == -1).all()
    np.testing.assert_array_equal(got[w], R.bins(s[w], 2, binning))
  # every kept score 0 (a class never predicted): the masked samples must still
  # sort after all of them; just above 0 is a subnormal, equal to 0 in the sort
  z = np.zeros_like(s)
  got = np.asarray(metrics.bin_ids(z, 2, "quantile", where=w))
  np.testing.assert_array_equal(got[w], R.quantile_bins(z[w], 2))
  # a device mask closed over by a user's jit (scores traced): its count was read
  # from a tracer (ConcretizationTypeError); now the same bins and the same refusal
  wd = jnp.asarray(w)
  for binning in ("fixed", "quantile"):
    np.testing.assert_array_equal(
      jax.jit(lambda a: metrics.bin_ids(a, 2, binning, where=wd))(s),
      metrics.bin_ids(s, 2, binning, where=w),
    )
  with pytest.raises(ValueError, match="num_bins = 5 needs at least.*got n = 4 selected by where"):
    jax.jit(lambda a: metrics.bin_ids(a, 5, "quantile", where=wd))(s)
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


def test_domain_tests_agree():
  # The key test (sort path) and the score test (fixed-bin histograms)
  # draw the same line: -2 < s < largest float32 below 2.
  s = np.array(
    [
      -2.0,
      np.nextafter(np.float32(-2), np.float32(0)),
      -0.0,
      0.0,
      1e-40,
      1.0,
      np.nextafter(np.float32(2), np.float32(0)),
      np.nextafter(np.nextafter(np.float32(2), np.float32(0)), np.float32(0)),
      2.0,
      np.inf,
      -np.inf,
      np.nan,
    ],
    np.float32,
  )
  by_key = np.asarray(B._in_domain(sorting.float_to_key(jnp.asarray(s))))
  by_score = np.asarray(B._in_domain_score(jnp.asarray(s)))
  np.testing.assert_array_equal(by_key, by_score)
  assert by_key.tolist() == [
    False,
    True,
    True,
    True,
    True,
    True,
    False,
    True,
    False,
    False,
    False,
    False,
  ]


def test_blocked_prefix_sums_above_2_16_samples():
  # Above 2**16 samples the exact prefix sums are kept per block of 16
  # sorted positions and a bin end adds the rest of its block: every offset
  # inside a block is read by some bin count here. Quantile by the fast sort
  # with the tie repair and by the stable argsort ("auto" below
  # FAST_SORT_MIN_N), fixed bins by sort; ties included.
  rng = np.random.default_rng(30)
  n = (1 << 16) + 37
  s = rng.random(n).astype(np.float32)
  s[:5000] = np.round(s[:5000] * 64) / 64
  b = rng.random(n) < s
  assert B._block_size(n) == 16
  ms = np.array([1, 3, 16, 17, 29, 31])
  assert n < B.FAST_SORT_MIN_N  # "auto" is the stable argsort here
  for binning, method in (("quantile", "fast"), ("quantile", "auto"), ("fixed", "sort")):
    f = jax.jit(jax.vmap(lambda m: B.binned_residual_sums(s, b, m, binning, 32, method=method)))
    out = f(jnp.asarray(ms))
    for k, m in enumerate(ms):
      bins = R.bins(s, int(m), binning)
      ref = R.lin_sums(s, b.astype(float), bins, int(m))[:, 0]
      np.testing.assert_allclose(
        out.sums[k, :m, 0], ref, rtol=1e-6, atol=2e-5, err_msg=f"{binning} {method} {m}"
      )
      np.testing.assert_array_equal(out.counts[k, :m], np.bincount(bins, minlength=m))


@pytest.mark.parametrize("binning", ["quantile", "fixed"])
def test_rows_in_chunks_equal_rows_in_one_batch(binning, monkeypatch):
  # Rows beyond ROW_CHUNK_ELEMENTS samples go through map_batches: 7 rows in
  # chunks of 3 are 3 batches, the last padded with copies of the first rows.
  rng = np.random.default_rng(5)
  s = jnp.asarray(rng.random((7, 50)).astype(np.float32))
  b = jnp.asarray(rng.random((7, 50)) < np.asarray(s))
  want = jax.jit(lambda: B.binned_residual_sums(s, b, 5, binning, 8, method="sort"))()
  monkeypatch.setattr(B, "ROW_CHUNK_ELEMENTS", 150)  # 3 rows of 50 samples per chunk
  # a new function, traced anew: the chunk size is read at trace time
  got = jax.jit(lambda: B.binned_residual_sums(s, b, 5, binning, 8, method="sort"))()
  for g, w in zip(got, want):
    assert g.shape == w.shape
    np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


def test_bin_ids_of_a_bad_score_under_jit_are_all_minus_one():
  """Under jit a selected NaN / inf score makes every id -1 (integers cannot be NaN; NaN
  used to land in bin 0 and inf in the last, shifting the others' quantile positions); a
  NaN in a masked-out row is not read, eagerly too (it raised)."""
  from jaxcal.metrics import bin_ids

  s = np.array([0.1, 0.5, np.nan, 0.9], np.float32)
  w = np.array([True, True, False, True])
  for binning in ("fixed", "quantile"):
    want = np.asarray(bin_ids(s[w], 2, binning))
    got = np.asarray(bin_ids(s, 2, binning, where=w))
    np.testing.assert_array_equal(got[w], want)
    assert got[2] == -1
    jitted = jax.jit(lambda a, m, b=binning: bin_ids(a, 2, b, where=m))
    np.testing.assert_array_equal(np.asarray(jitted(s, w)), got)
    for bad in (np.nan, np.inf):
      t = s.copy()
      t[2] = bad
      out = np.asarray(jax.jit(lambda a, b=binning: bin_ids(a, 2, b))(t))
      np.testing.assert_array_equal(out, -1)
      with pytest.raises(ValueError, match=r"non-finite values .* scores\[2\]"):
        bin_ids(t, 2, binning)


def test_exact_engine_refuses_rows_of_2_30_samples_with_a_clear_message():
  """F4: a row of n >= 2**30 samples gave Python's 'negative shift count' at trace time
  (a limb of width -1); now every float32 binned error (one-shot and FixedBins.update)
  raises a ValueError naming the limit and the way out, and n = 2**30 - 1 still traces.
  Abstract inputs (jax.eval_shape): nothing is allocated."""
  from jaxcal import streaming

  def errors(n):
    p = jax.ShapeDtypeStruct((n, 2), jnp.float32)
    y = jax.ShapeDtypeStruct((n,), jnp.int32)
    state = streaming.FixedBins.empty(2, num_bins=15)
    fns = {
      "conf_ece fixed": lambda p, y: metrics.conf_ece(p, y),
      "conf_ece quantile": lambda p, y: metrics.conf_ece(p, y, binning="quantile"),
      "classwise_ece": lambda p, y: metrics.classwise_ece(p, y),
      "FixedBins.update": lambda p, y: state.update(p, y).conf_hi,
    }
    return fns, (p, y)

  fns, args = errors(2**30)
  for fn in fns.values():
    with pytest.raises(ValueError, match=r"at most 2\*\*30 - 1 = 1,073,741,823 samples per row"):
      jax.eval_shape(fn, *args)
  with pytest.raises(ValueError, match=r"jaxcal\.streaming\.FixedBins"):
    B._layout(2**30)
  fns, args = errors(B.MAX_EXACT_SAMPLES)
  for name in ("conf_ece fixed", "conf_ece quantile"):
    assert jax.eval_shape(fns[name], *args).shape == (), name


def test_exact_engine_sums_of_2_29_to_2_30_samples_fit_in_int32(monkeypatch):
  """F4: from 2**29 samples the top limb was q >> 29, and a residual sum below -2**31
  (n near 2**30 scores near -2 with bits 1) wrapped around in int32: a wrong sum, silently.
  n equal samples are summed as n times one sample's parts (no allocation)."""
  from fractions import Fraction

  def exact(s, b):  # sum over samples of round(s 2**29) 2**-29 - b
    q = np.round(np.asarray(s, np.float64) * 2.0**29).astype(np.int64)
    return sum(Fraction(int(v), 2**29) for v in q) - int(np.sum(b))

  cases = [(-1.9, 1), (np.float32(-1.9999999), 1), (np.float32(1.9999999), 0), (0.7, 1), (0.3, 0)]
  for n in (2**29, 715_827_883, B.MAX_EXACT_SAMPLES):
    layout = B._layout(n)
    for s, b in cases:
      one = np.asarray(B._parts(B._words(jnp.float32([s]), jnp.array([bool(b)])), layout))[0]
      total = one.astype(np.int64) * n
      assert np.all(np.abs(total) < 2**31)  # the summed parts themselves fit
      parts = jnp.asarray(total.astype(np.int32))
      want = n * exact([np.float32(s)], [b])
      assert sum(Fraction(float(t)) for t in B._parts_to_terms(parts, layout)) == want, (n, s)
      got = float(B._parts_to_residual(parts, layout))
      ulp = abs(float(np.spacing(np.float32(float(want)))))
      assert abs(Fraction(got) - want) <= 2 * ulp, (n, s)  # within 2 ulp, as documented

  # the layout of the largest rows, on random samples in (-2, 2): exact sums
  rng = np.random.default_rng(60)
  big = B._layout(B.MAX_EXACT_SAMPLES)
  s = rng.uniform(-1.9999, 1.9999, 300).astype(np.float32)
  b = rng.random(300) < 0.5
  parts = jnp.sum(B._parts(B._words(jnp.asarray(s), jnp.asarray(b)), big), axis=0)
  assert sum(Fraction(float(t)) for t in B._parts_to_terms(parts, big)) == exact(s, b)

  # ... and through the engine (edges, sort, FixedBins' exact terms): the default layout's sums
  from jaxcal._src import streaming as S

  p = jnp.asarray(rng.dirichlet(np.ones(3), 500).astype(np.float32))
  y = jnp.asarray(rng.integers(0, 3, 500))
  thr = jnp.asarray(S.interval_thresholds(7))
  s, b, ones = jnp.asarray(s), jnp.asarray(b), jnp.ones(500, bool)

  def run():  # fresh functions: traced anew, with whatever _layout is now
    out = [
      jax.jit(lambda bn=bn, mt=mt: B.binned_residual_sums(s, b, 7, bn, 8, method=mt))()
      for bn, mt in (("fixed", "edges"), ("fixed", "sort"), ("quantile", "sort"))
    ]
    terms, counts, _ = jax.jit(lambda: S._interval_residual_sums(p, None, y, ones, thr))()
    sums = [sum(Fraction(float(t)) for t in ts) for ts in zip(*(np.ravel(t) for t in terms))]
    return out, sums, np.asarray(counts)

  want = run()
  original = B._layout
  calls = []

  def largest(n, bit=True, count=False):
    calls.append(n)
    return original(B.MAX_EXACT_SAMPLES, bit, count)

  monkeypatch.setattr(B, "_layout", largest)
  got = run()
  assert calls.count(300) == 3 and 500 in calls  # every path traced anew with it
  for g, w in zip(got[0], want[0]):
    np.testing.assert_array_equal(np.asarray(g.counts), np.asarray(w.counts))
    np.testing.assert_allclose(np.asarray(g.sums), np.asarray(w.sums), rtol=1e-6, atol=1e-7)
  assert got[1] == want[1]  # the streaming terms sum exactly to the same
  np.testing.assert_array_equal(got[2], want[2])


def test_tie_repair_at_the_first_sorted_position():
  """A mixed tie group holding the two smallest scores, cut after the first sorted sample: the
  quantile end ``floor(j n / m) = 1`` (here ``n = 8``, ``m = 5``, ``j = 1``) is a possible bin
  end like any other, and the uint32 key sort's bit-0-first order inside the group must be
  repaired to the stable (index) order there too (``max_bins**2 <= 4 n``: only the groups at
  possible bin ends are repaired). Guards the lower end of those ends (``e >= 1``)."""
  s = np.array([0.1, 0.1, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8], np.float32)
  b = np.array([1, 0, 0, 1, 0, 1, 1, 0])  # index order inside the tie: bit 1 first
  m = 5
  out = jax.jit(lambda: B.binned_residual_sums(s, b, m, "quantile", m, method="fast"))()
  ref = R.lin_sums(s, b.astype(float), R.quantile_bins(s, m), m)[:, 0]
  np.testing.assert_allclose(out.sums[:, 0], ref, rtol=1e-6, atol=1e-7)
  assert float(out.sums[0, 0]) == pytest.approx(0.1 - 1.0)  # index 0, not the 0-bit of index 1
