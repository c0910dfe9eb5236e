"""Calibration errors against the slow float64 loop references (SPEC §1-2).

Tolerance 1e-6 absolute throughout (issue 2). The references bin float32
scores with the float32 product rule (see tests/_reference.py) and sum in
float64, so the only differences are float32 rounding in jaxcal's sums.

Compilation is the expensive part on CPU: each metric is compiled once per
data-set shape and evaluated for a whole array of bin counts in one call.
"""

import functools
import pathlib
import sys

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl.testing import parameterized

sys.path.insert(0, str(pathlib.Path(__file__).parent))  # --import-mode=importlib
import _measures_reference as MR
import _reference as R
from conftest import no_new_programs

from jaxcal import metrics

ATOL = 1e-6

# (name, binning) for every (p, y) metric; binary_ce is handled separately.
VARIANTS = [
  ("conf_ece", "fixed"),
  ("conf_ece", "quantile"),
  ("conf_ce", "quantile"),
  ("conf_ce", "fixed"),
  ("conf_ce_corr", "quantile"),
  ("conf_ce_corr", "fixed"),
  ("classwise_ce", "quantile"),
  ("classwise_ce", "fixed"),
  ("classwise_ece", "fixed"),
  ("classwise_ece", "quantile"),
  ("ecce", "fixed"),
]


def call(name, binning, p, y, m, **kw):
  f = getattr(metrics, name)
  if name == "ecce":
    return f(p, y, m, **kw)
  return f(p, y, m, binning, **kw)


def ref(name, binning, p, y, m, **kw):
  f = getattr(R, name)
  if name == "ecce":
    return f(p, y, m, **kw)
  return f(p, y, m, binning, **kw)


def _dirichlet(rng, n, c, alpha):
  p = rng.dirichlet(np.full(c, alpha), n).astype(np.float32)
  return p / p.sum(axis=1, keepdims=True, dtype=np.float32)


def make_datasets():
  rng = np.random.default_rng(2024)
  out = {}
  # n = 1: fixed binning only meaningful; quantile only with m = 1.
  out["n1_c2"] = (np.array([[0.3, 0.7]], np.float32), np.array([0]))
  # ties, confidence exactly 1.0, argmax ties (0.5/0.5 -> class 0), exact 0s.
  p = np.array(
    [[0.5, 0.5], [1.0, 0.0], [0.25, 0.75], [0.75, 0.25], [1.0, 0.0], [0.5, 0.5], [0.0, 1.0]],
    np.float32,
  )
  out["n7_c2_ties"] = (p, np.array([0, 1, 1, 0, 0, 1, 1]))
  p = _dirichlet(rng, 60, 3, 0.7)
  p[:20] = np.round(p[:20] * 4) / 4
  p[:20, 0] = 1.0 - p[:20, 1] - p[:20, 2]
  p[:20] = np.clip(p[:20], 0, 1)
  p[:20] /= p[:20].sum(axis=1, keepdims=True)
  p[20:25] = np.eye(3, dtype=np.float32)[[0, 1, 2, 0, 1]]
  out["n60_c3_ties"] = (p.astype(np.float32), rng.integers(0, 3, 60))
  out["n300_c10"] = (_dirichlet(rng, 300, 10, 0.3), rng.integers(0, 10, 300))
  return out


DATA = make_datasets()
MS = np.array([1, 2, 3, 5, 15, 40])


def _ms_for(binning, n):
  return MS[MS <= n] if binning == "quantile" else MS


@pytest.mark.parametrize("data", list(DATA))
@pytest.mark.parametrize("name,binning", VARIANTS)
def test_metric_matches_reference(name, binning, data):
  p, y = DATA[data]
  ms = _ms_for(binning, p.shape[0])
  got = np.asarray(call(name, binning, p, y, ms))
  assert got.shape == ms.shape
  want = np.array([ref(name, binning, p, y, int(m)) for m in ms])
  np.testing.assert_allclose(got, want, rtol=0, atol=ATOL)


@pytest.mark.parametrize("binning", ["quantile", "fixed"])
def test_binary_ce_matches_reference(binning):
  for key in ("n7_c2_ties", "n60_c3_ties"):
    p, y = DATA[key]
    s, yy = p[:, 0], (y == 0).astype(np.int32)
    ms = _ms_for(binning, p.shape[0])
    got = np.asarray(metrics.binary_ce(s, yy, ms, binning))
    want = [R.binary_ce(s, yy, int(m), binning) for m in ms]
    np.testing.assert_allclose(got, want, atol=ATOL)


def test_class_weights_match_reference():
  p, y = DATA["n60_c3_ties"]
  w = np.array([0.2, 0.5, 0.3])
  np.testing.assert_allclose(
    metrics.classwise_ece(p, y, 7, class_weights=w), R.classwise_ece(p, y, 7, "fixed", w), atol=ATOL
  )
  np.testing.assert_allclose(metrics.ecce(p, y, 7, class_weights=w), R.ecce(p, y, 7, w), atol=ATOL)


@pytest.mark.parametrize("binning", ["fixed", "quantile"])
def test_reliability_stats_match_reference(binning):
  p, y = DATA["n300_c10"]
  got = metrics.reliability_stats(p, y, 12, binning)
  want = R.reliability_stats(p, y, 12, binning)
  np.testing.assert_array_equal(got.counts, want[0])
  for g, w in zip(got[1:], want[1:]):
    np.testing.assert_allclose(g, w, atol=ATOL)
  # ConfECE from the per-bin statistics
  n = p.shape[0]
  ece = np.sum(want[0] / n * np.abs(want[1] - want[2]))
  np.testing.assert_allclose(metrics.conf_ece(p, y, 12, binning), ece, atol=ATOL)


def test_lin_ce_lin_ece_match_reference():
  p, y = DATA["n60_c3_ties"]
  onehot = np.eye(3)[y]
  bins = np.random.default_rng(0).integers(0, 5, 60)
  np.testing.assert_allclose(
    metrics.lin_ce(p, onehot, bins, 5), R.lin_ce(p, onehot, bins, 5), atol=ATOL
  )
  np.testing.assert_allclose(
    metrics.lin_ece(p, onehot, bins, 5), R.lin_ece(p, onehot, bins, 5), atol=ATOL
  )
  # 1-d reports; jit; vmap over data sets
  np.testing.assert_allclose(
    metrics.lin_ce(p[:, 0], onehot[:, 0], bins, 5),
    R.lin_ce(p[:, 0], onehot[:, 0], bins, 5),
    atol=ATOL,
  )
  f = jax.jit(metrics.lin_ce, static_argnums=3)
  np.testing.assert_allclose(f(p, onehot, bins, 5), metrics.lin_ce(p, onehot, bins, 5), atol=1e-7)
  stack = np.stack([p, p[::-1], p[:, ::-1]])
  v = jax.vmap(lambda u: metrics.lin_ece(u, onehot, bins, 5))(stack)
  np.testing.assert_allclose(v, [R.lin_ece(u, onehot, bins, 5) for u in stack], atol=ATOL)


def test_lin_ce_called_again_compiles_nothing():
  # Op by op, the accurate segment sum's loop (n above one block) compiled
  # again on every eager call: 0.15 s each for a 1 ms computation.
  rng = np.random.default_rng(3)
  u = rng.dirichlet(np.ones(4), 10_000).astype(np.float32)
  s = np.eye(4, dtype=np.float32)[rng.integers(0, 4, 10_000)]
  bins = rng.integers(0, 15, 10_000)
  first = (metrics.lin_ce(u, s, bins, 15), metrics.lin_ece(u, s, bins, 15))
  with no_new_programs():
    again = (metrics.lin_ce(u[::-1], s, bins, 15), metrics.lin_ece(u[::-1], s, bins, 15))
  np.testing.assert_allclose(
    first, [R.lin_ce(u, s, bins, 15), R.lin_ece(u, s, bins, 15)], atol=ATOL
  )
  np.testing.assert_allclose(
    again, [R.lin_ce(u[::-1], s, bins, 15), R.lin_ece(u[::-1], s, bins, 15)], atol=ATOL
  )


@pytest.mark.parametrize("norm", ["l1", "l2", "max"])
def test_lin_ece_norms_match_reference(norm):
  p, y = DATA["n60_c3_ties"]
  onehot = np.eye(3)[y]
  bins = np.random.default_rng(1).integers(0, 7, 60)  # some bins empty or nearly so
  bins[bins == 6] = 5
  got = metrics.lin_ece(p, onehot, bins, 7, norm=norm)
  np.testing.assert_allclose(got, R.lin_ece(p, onehot, bins, 7, norm), atol=ATOL)
  # one column of a top-label report: the norms of conf_ece on the same bins
  c, z = p.max(axis=1), (p.argmax(axis=1) == y).astype(np.float64)
  fixed = np.clip(np.ceil(c * 7).astype(int), 1, 7) - 1
  np.testing.assert_allclose(
    metrics.lin_ece(c, z, fixed, 7, norm=norm),
    metrics.conf_ece(p, y, 7, norm=norm),
    atol=1e-6,
  )
  # where: a masked-out sample is absent from its bin's count n_B too (the RMS
  # and max norms divide by n_B), not only from the sums and from n
  keep = np.arange(60) % 4 != 1
  np.testing.assert_allclose(
    metrics.lin_ece(p, onehot, bins, 7, norm=norm, where=keep),
    R.lin_ece(p[keep], onehot[keep], bins[keep], 7, norm),
    atol=ATOL,
  )
  with pytest.raises(ValueError, match="norm must be one of"):
    metrics.lin_ece(p, onehot, bins, 7, norm="l3")


def _confident(n, c, seed):
  """A confident float32 predictor (most top-label scores above 0.95) and labels drawn from it."""
  rng = np.random.default_rng(seed)
  z = 8.0 * rng.standard_normal((n, c))
  p = np.exp(z - z.max(1, keepdims=True))
  p /= p.sum(1, keepdims=True)
  y = (rng.random(n)[:, None] > np.cumsum(p, 1)).sum(1).clip(0, c - 1)
  return p.astype(np.float32), y


def test_float_bin_sums_do_not_drift_with_n():
  # A float32 scatter-add of 10^6 samples drifted (its round-off is biased once
  # a bin's sum is many times its terms): on CIFAR-10 tiled to 10^6, a bin's
  # mean confidence was 0.3 % off and LinCE 2e-4 (4 % at 10^7). Tiling leaves
  # both unchanged, so the float64 reference is the base set's.
  p, y = _confident(2000, 10, seed=3)
  k = 500
  pt, yt = np.tile(p, (k, 1)), np.tile(y, k)
  got, want = metrics.reliability_stats(pt, yt, 15), R.reliability_stats(p, y, 15)
  np.testing.assert_array_equal(got.counts, k * want[0])
  np.testing.assert_allclose(got[1], want[1], rtol=2e-6)
  np.testing.assert_allclose(got[2], want[2], rtol=2e-6)
  c = p.max(1)
  b = R.bins(c, 15, "fixed")
  hit = (p.argmax(1) == y).astype(np.float32)
  ct, ht, bt = np.tile(c, k), np.tile(hit, k), np.tile(b, k)
  np.testing.assert_allclose(metrics.lin_ce(ct, ht, bt, 15), R.lin_ce(c, hit, b, 15), rtol=1e-5)


def test_lin_ce_generalises_classwise_and_confidence():
  # LinCE with per-class bins == classwise_ce; with d = 1 confidence residuals == conf_ce.
  p, y = DATA["n300_c10"]
  per_class = [
    metrics.lin_ce(
      p[:, r], (y == r).astype(np.float32), metrics.bin_ids(p[:, r], 15, "quantile"), 15
    )
    for r in range(10)
  ]
  np.testing.assert_allclose(np.mean(per_class), metrics.classwise_ce(p, y, 15), atol=ATOL)
  r_, c = R.confidence(p)
  b = metrics.bin_ids(c, 15, "quantile")
  np.testing.assert_allclose(
    metrics.lin_ce(c, (r_ == y).astype(np.float32), b, 15), metrics.conf_ce(p, y, 15), atol=ATOL
  )


# --------------------------------------------------------------- transforms

# jit / vmap: one variant per code path (confidence / classwise / binary x
# fixed (edges) / quantile, cumulative) keeps the compile count down.
CORE = [
  ("conf_ece", "fixed"),
  ("conf_ce_corr", "quantile"),
  ("classwise_ce", "quantile"),
  ("classwise_ece", "fixed"),
  ("ecce", "fixed"),
]


class TestJitAndEager(chex.TestCase):
  """``chex.variants`` runs each body twice: under ``jax.jit`` and eagerly."""

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.parameters(*CORE)
  def test_equals_the_float64_reference_and_the_eager_call(self, name, binning):
    p, y = DATA["n300_c10"]
    got = self.variant(lambda p, y: call(name, binning, p, y, 15))(p, y)
    np.testing.assert_allclose(got, ref(name, binning, p, y, 15), atol=ATOL)
    np.testing.assert_allclose(got, call(name, binning, p, y, 15), rtol=0, atol=1e-7)

  @chex.variants(with_jit=True, without_jit=True)
  def test_binary_ce_shares_the_engine(self):
    p, y = DATA["n300_c10"]
    s, yy = p[:, 0], (y == 0).astype(np.int32)
    got = self.variant(metrics.binary_ce)(s, yy)
    np.testing.assert_allclose(got, metrics.binary_ce(s, yy), rtol=0, atol=1e-7)
    assert np.isfinite(got) and got >= 0


@pytest.mark.parametrize("name,binning", CORE)
def test_vmap_over_datasets_equals_loop(name, binning):
  rng = np.random.default_rng(7)
  ps = np.stack([_dirichlet(rng, 60, 3, 0.7) for _ in range(3)])
  ys = rng.integers(0, 3, (3, 60))
  ms = np.array([4, 15])
  got = jax.vmap(lambda p, y: call(name, binning, p, y, ms))(ps, ys)
  assert got.shape == (3, 2)
  want = np.stack([call(name, binning, ps[k], ys[k], ms) for k in range(3)])
  np.testing.assert_allclose(got, want, atol=ATOL)
  np.testing.assert_allclose(
    want[:, 1], [ref(name, binning, ps[k], ys[k], 15) for k in range(3)], atol=ATOL
  )


@pytest.mark.parametrize("binning", ["quantile", "fixed"])
def test_binary_ce_vmap_over_distinct_datasets_equals_loop(binning):
  # three data sets with their own scores and outcomes, and an array of bin
  # counts: each member equals its own eager call and the float64 reference
  rng = np.random.default_rng(8)
  s = rng.random((3, 60)).astype(np.float32)
  y = (rng.random((3, 60)) < s ** np.array([[0.5], [1.0], [2.0]])).astype(np.int32)
  ms = np.array([4, 15])
  got = np.asarray(jax.vmap(lambda a, b: metrics.binary_ce(a, b, ms, binning))(s, y))
  assert got.shape == (3, 2)
  want = np.stack([np.asarray(metrics.binary_ce(s[k], y[k], ms, binning)) for k in range(3)])
  assert len(np.unique(want[:, 1])) == 3, want
  np.testing.assert_allclose(got, want, atol=ATOL)
  ref_ = [[R.binary_ce(s[k], y[k], int(m), binning) for m in ms] for k in range(3)]
  np.testing.assert_allclose(want, ref_, atol=ATOL)


@pytest.mark.parametrize("binning", ["fixed", "quantile"])
def test_reliability_stats_vmap_over_distinct_datasets_equals_loop(binning):
  # every field of every member against its own eager call and the reference
  rng = np.random.default_rng(9)
  ps = np.stack([_dirichlet(rng, 60, 3, a) for a in (0.3, 0.7, 2.0)])
  ys = rng.integers(0, 3, (3, 60))
  got = jax.vmap(lambda p, y: metrics.reliability_stats(p, y, 6, binning))(ps, ys)
  assert got.counts.shape == (3, 6)
  for k in range(3):
    eager = metrics.reliability_stats(ps[k], ys[k], 6, binning)
    want = R.reliability_stats(ps[k], ys[k], 6, binning)
    np.testing.assert_array_equal(got.counts[k], eager.counts)
    np.testing.assert_array_equal(eager.counts, want[0])
    for name, g, e, w in zip(eager._fields[1:], got[1:], eager[1:], want[1:]):
      np.testing.assert_allclose(g[k], e, rtol=1e-6, atol=1e-7, err_msg=name)
      np.testing.assert_allclose(e, w, atol=ATOL, err_msg=name)
  assert np.abs(np.asarray(got.confidence[0] - got.confidence[2])).max() > 0.05  # they differ


SWEEP = [
  ("conf_ece", "fixed"),
  ("conf_ce", "quantile"),
  ("conf_ce_corr", "quantile"),
  ("classwise_ce", "quantile"),
  ("classwise_ece", "fixed"),
  ("ecce", "fixed"),
]


@pytest.mark.parametrize("name,binning", SWEEP)
def test_num_bins_array_equals_loop_over_ints(name, binning):
  # One compiled call for 2..200 == a loop over Python ints (sharing
  # max_bins=200 so the loop compiles once) == traced under a user's vmap.
  # (batched and unbatched programs may fuse sums differently: 1e-6.)
  p, y = DATA["n300_c10"]
  ms = np.arange(2, 201)
  arr = np.asarray(call(name, binning, p, y, ms))
  loop_ms = ms[::3]
  loop = np.array([float(call(name, binning, p, y, int(m), max_bins=200)) for m in loop_ms])
  np.testing.assert_allclose(arr[::3], loop, rtol=0, atol=ATOL)
  traced = jax.vmap(lambda m: call(name, binning, p, y, m, max_bins=200))(jnp.asarray(ms))
  np.testing.assert_allclose(traced, arr, rtol=0, atol=ATOL)
  for m in (2, 57, 200):  # spot checks against the reference
    np.testing.assert_allclose(arr[m - 2], ref(name, binning, p, y, m), atol=ATOL)


def test_num_bins_shapes_and_traced_out_of_range():
  p, y = DATA["n60_c3_ties"]
  m2 = np.array([[2, 3], [4, 5]])
  out = metrics.conf_ece(p, y, m2)
  assert out.shape == (2, 2)
  np.testing.assert_allclose(out[1, 0], metrics.conf_ece(p, y, 4), atol=1e-7)
  assert metrics.classwise_ce(p, y, np.zeros((0,), int)).shape == (0,)
  # traced bin counts outside [1, max_bins] cannot be binned: NaN, not garbage
  got = np.asarray(
    jax.vmap(lambda m: metrics.classwise_ece(p, y, m, max_bins=10))(jnp.array([0, 3, 10, 11]))
  )
  assert np.isnan(got[0]) and np.isnan(got[3])
  np.testing.assert_allclose(
    got[1:3], [R.classwise_ece(p, y, 3), R.classwise_ece(p, y, 10)], atol=ATOL
  )
  # traced quantile bin count > n is well defined (empty bins, SPEC §1)
  q = jax.vmap(lambda m: metrics.conf_ce(p[:5], y[:5], m, max_bins=8))(jnp.arange(1, 9))
  want = [R.conf_ce(p[:5], y[:5], m) for m in range(1, 9)]
  np.testing.assert_allclose(q, want, atol=ATOL)


def test_fixed_sort_path_equals_edges_path():
  # max_bins above binning.EDGES_MAX_BINS uses the sort + bisection path.
  p, y = DATA["n300_c10"]
  ms = np.array([3, 15, 200])
  a = metrics.classwise_ece(p, y, ms)
  b = jax.vmap(lambda m: metrics.classwise_ece(p, y, m, max_bins=600))(jnp.asarray(ms))
  np.testing.assert_allclose(a, b, atol=1e-7)


def test_from_logits():
  rng = np.random.default_rng(3)
  z = rng.normal(size=(60, 3)).astype(np.float32) * 3
  p = np.asarray(jax.nn.softmax(z))
  y = rng.integers(0, 3, 60)
  for name, binning in [("conf_ece", "fixed"), ("classwise_ce", "quantile"), ("ecce", "fixed")]:
    np.testing.assert_allclose(
      call(name, binning, z, y, 15, from_logits=True), call(name, binning, p, y, 15), atol=1e-7
    )


# ---------------------------------------------------------------- precision


def test_float32_large_n_against_float64_reference():
  # n = 200k float32 scores: jaxcal sums in float32 (blocked prefix sums, so
  # a bin sum is off by O(eps * |prefix|)), the reference in float64 on the
  # same float32 scores. Each bin contributes at most ~eps * max|prefix|/n
  # (ECE) or its square-scale analogue, so 2e-6 absolute over 15-100 bins is
  # a comfortable bound; measured differences are ~1e-7.
  rng = np.random.default_rng(11)
  n = 200_000
  p = _dirichlet(rng, n, 3, 0.5)
  cdf = np.cumsum(p.astype(np.float64), axis=1)
  y = np.minimum((rng.random((n, 1)) * cdf[:, -1:] > cdf).sum(axis=1), 2)  # y ~ p
  for name, binning in [
    ("conf_ce_corr", "quantile"),
    ("classwise_ce", "quantile"),
    ("ecce", "fixed"),
  ]:
    got = np.asarray(call(name, binning, p, y, np.array([15, 100])))
    want = [ref(name, binning, p, y, m) for m in (15, 100)]
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-6, err_msg=name)


def test_float32_one_million_samples_within_1e5_relative_of_float64():
  # Issue 11's target: at n = 10**6 every binned error is within 1e-5
  # relative of a float64 reference on the same float32 scores. The fixed-bin
  # class-wise paths (classwise_ece, ecce) were 1.5e-4 and 4.7e-4 off when
  # they summed residuals in float32; the exact fixed-point residual sums
  # leave one float32 rounding per bin. Labels drawn from p (a calibrated
  # forecast: small errors, the hardest case for a relative bound).
  rng = np.random.default_rng(12)
  n = 1_000_000
  p = _dirichlet(rng, n, 3, 0.5)
  cdf = np.cumsum(p.astype(np.float64), axis=1)
  y = np.minimum((rng.random((n, 1)) * cdf[:, -1:] > cdf).sum(axis=1), 2)
  for name, binning in [
    ("classwise_ece", "fixed"),
    ("ecce", "fixed"),
    ("classwise_ce", "quantile"),
    ("conf_ece", "fixed"),
    ("conf_ce", "quantile"),
  ]:
    got = float(call(name, binning, p, y, 15))
    want = ref(name, binning, p, y, 15)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=0, err_msg=name)


def test_float32_bin_residual_sums_beyond_2_16():
  # The exact engine cuts each fixed-point score into int32 limbs sized by n; a
  # bin sum of residuals is read back from them in int32. n = 10^5 samples
  # (2^16 < n < 2^17) of a badly over-confident forecast (scores in [0.6, 1),
  # 5 % positive outcomes): one bin's residual sum is 7.5e4 > 2^16, which needs
  # two limbs below the top one at this n.
  rng = np.random.default_rng(13)
  n = 100_000
  s = rng.uniform(0.6, 1.0, n).astype(np.float32)
  y = (rng.random(n) < 0.05).astype(np.int32)
  got = np.asarray(metrics.binary_ce(s, y, np.array([1, 15]), "fixed"))
  want = [R.binary_ce(s, y, m, "fixed") for m in (1, 15)]
  np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)


def test_float64_inputs_under_x64_are_exact():
  p, y = DATA["n60_c3_ties"]
  p64 = p.astype(np.float64)
  p64 /= p64.sum(axis=1, keepdims=True)
  with jax.enable_x64(True):
    for name, binning in [
      ("conf_ece", "fixed"),
      ("conf_ce", "quantile"),
      ("classwise_ce", "quantile"),
      ("ecce", "fixed"),
    ]:
      got = call(name, binning, p64, y, np.array([3, 15]))
      assert got.dtype == np.float64
      want = [ref(name, binning, p64, y, m) for m in (3, 15)]
      np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    # the float64 quantile engine with a mask: equal-mass bins over the kept samples
    keep = np.arange(60) % 5 != 2
    got = metrics.classwise_ce(p64, y, np.array([3, 15]), where=keep)
    want = [R.classwise_ce(p64[keep], y[keep], m) for m in (3, 15)]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    # and the float64 fixed-bin engine: masked samples out of the sums and of n_B
    got = metrics.classwise_ece(p64, y, np.array([3, 15]), norm="l2", where=keep)
    pk, yk = p64[keep], y[keep]
    want = [
      MR.binned_norm_classwise(pk, yk, [R.fixed_bins(pk[:, k], m) for k in range(3)], m, "l2")
      for m in (3, 15)
    ]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


# ---------------------------------------------------------------- real data


@functools.cache
def _cifar_probs(setting):
  from conftest import load_cifar

  logits, labels = load_cifar(setting, "test")
  # softmax once, in float32, and fed to both jaxcal and the reference
  return np.asarray(jax.nn.softmax(jnp.asarray(logits, jnp.float32), axis=-1)), labels


@pytest.mark.parametrize("setting", ["cifar10_resnet110", "cifar100_resnet110"])
def test_real_cifar_logits_match_reference(cifar_dir, setting):
  p, y = _cifar_probs(setting)
  for name, binning in SWEEP:  # every metric with its default binning
    got = np.asarray(call(name, binning, p, y, np.array([15, 50])))
    want = [ref(name, binning, p, y, m) for m in (15, 50)]
    # relative too: the squared errors are ~1e-6 on CIFAR-100, below ATOL alone
    np.testing.assert_allclose(
      got, want, rtol=2e-5, atol=1e-9, err_msg=f"{setting} {name} {binning}"
    )


# ------------------------------------------------------------ sample masks

# The metric cores take `where`: an (n,) bool mask; a masked-out sample is
# treated exactly as if absent. Models of different n padded to one size
# (junk in the padding, at random positions) under one vmap give each
# model's unpadded value.

from jaxcal._src import calibration_errors as CE  # noqa: E402

CORES = [
  ("conf_ece", "fixed", lambda p, y, m, **k: CE._conf_core(p, y, m, kind="ece", **k)),
  ("conf_ece", "quantile", lambda p, y, m, **k: CE._conf_core(p, y, m, kind="ece", **k)),
  ("conf_ce", "quantile", lambda p, y, m, **k: CE._conf_core(p, y, m, kind="ce", **k)),
  ("conf_ce_corr", "quantile", lambda p, y, m, **k: CE._conf_core(p, y, m, kind="ce_corr", **k)),
  ("conf_ce_corr", "fixed", lambda p, y, m, **k: CE._conf_core(p, y, m, kind="ce_corr", **k)),
  (
    "classwise_ce",
    "quantile",
    lambda p, y, m, **k: CE._classwise_core(
      p, y, m, jnp.full(p.shape[1], 1 / p.shape[1]), kind="ce", **k
    ),
  ),
  (
    "classwise_ece",
    "fixed",
    lambda p, y, m, **k: CE._classwise_core(
      p, y, m, jnp.full(p.shape[1], 1 / p.shape[1]), kind="ece", **k
    ),
  ),
  (
    "ecce",
    "fixed",
    lambda p, y, m, **k: CE._ecce_core(p, y, m, jnp.full(p.shape[1], 1 / p.shape[1]), **k),
  ),
]


def _padded_models(sizes, n_pad, c, seed):
  """Stacked (models, n_pad, C) probabilities, labels and masks; the real models."""
  rng = np.random.default_rng(seed)
  ps, ys, ws, real = [], [], [], []
  for n in sizes:
    p = _dirichlet(rng, n, c, 0.5)
    p[: n // 4] = np.round(p[: n // 4] * 4) / 4  # ties (rows need not sum to 1 here)
    y = rng.integers(0, c, n)
    keep = np.zeros(n_pad, bool)
    keep[np.sort(rng.choice(n_pad, n, replace=False))] = True
    pp = rng.choice(np.array([np.nan, 2.0, -1.0, 0.5], np.float32), (n_pad, c))
    pp[keep] = p
    yp = rng.integers(-5, 50, n_pad)  # out-of-range labels in the padding
    yp[keep] = y
    ps.append(pp), ys.append(yp), ws.append(keep), real.append((p, y))
  return np.stack(ps), np.stack(ys), np.stack(ws), real


@pytest.mark.parametrize("name,binning,core", CORES, ids=[f"{a}-{b}" for a, b, _ in CORES])
def test_where_padded_models_equal_unpadded(name, binning, core):
  sizes = [37, 60, 5]
  ps, ys, ws, real = _padded_models(sizes, 64, 3, seed=len(name) + len(binning))
  ms = jnp.array([1, 3, 15, 40])

  def one(p, y, w, m):
    return core(p, y, m, binning=binning, max_bins=40, where=w)

  f = jax.jit(jax.vmap(jax.vmap(one, in_axes=(None, None, None, 0)), in_axes=(0, 0, 0, None)))
  got = np.asarray(f(ps, ys, ws, ms))
  for k, (p, y) in enumerate(real):
    mk = ms if binning == "fixed" else ms[ms <= sizes[k]]
    want = [ref(name, binning, p, y, int(m)) for m in mk]
    np.testing.assert_allclose(got[k, : len(mk)], want, rtol=0, atol=ATOL, err_msg=f"model {k}")
    unpadded = np.asarray(jax.jit(jax.vmap(lambda m: one(p, y, None, m)))(ms))
    np.testing.assert_allclose(got[k], unpadded, rtol=1e-6, atol=1e-7, err_msg=f"model {k}")


def test_where_binary_core_and_all_masked():
  rng = np.random.default_rng(21)
  s = rng.random(30).astype(np.float32)
  s[:10] = 0.5
  yy = (rng.random(30) < s).astype(np.int32)
  sp = np.concatenate([s[:12], np.full(9, np.nan, np.float32), s[12:]])
  yp = np.concatenate([yy[:12], np.full(9, 1), yy[12:]])
  w = np.concatenate([np.ones(12, bool), np.zeros(9, bool), np.ones(18, bool)])
  for binning in ("quantile", "fixed"):
    f = jax.jit(lambda s, y, w: CE._binary_core(s, y, 7, binning=binning, max_bins=7, where=w))
    np.testing.assert_allclose(f(sp, yp, w), R.binary_ce(s, yy, 7, binning), atol=ATOL)
  # no sample at all: 0/0 is NaN, never a number
  p, y = DATA["n60_c3_ties"]
  out = CE._conf_core(p, y, 5, binning="fixed", max_bins=5, kind="ece", where=np.zeros(60, bool))
  assert np.isnan(out)


@pytest.mark.parametrize("binning", ["fixed", "quantile"])
def test_where_reliability_core(binning):
  p, y = DATA["n300_c10"]
  rng = np.random.default_rng(22)
  keep = np.zeros(340, bool)
  keep[np.sort(rng.choice(340, 300, replace=False))] = True
  pp = np.full((340, 10), np.nan, np.float32)
  pp[keep] = p
  yp = np.zeros(340, np.int32)
  yp[keep] = y
  got = CE._reliability_core(pp, yp, 12, binning, where=keep)
  want = CE._reliability_core(p, y, 12, binning)
  for g, w in zip(got, want):
    g, w = np.asarray(g), np.asarray(w)
    assert not np.isnan(g).any()  # the NaN rows masked out never reach a bin
    if np.issubdtype(w.dtype, np.integer):
      np.testing.assert_array_equal(g, w)  # counts are exact everywhere
    else:
      # bit-equal on CPU; a GPU's scatter-add accumulates in a different order
      np.testing.assert_allclose(g, w, rtol=2e-6, atol=1e-7)
  # a traced mask may keep fewer samples than there are quantile bins: the empty
  # bins' rows are 0, their score range included (not segment_min's +inf)
  few = keep & (np.cumsum(keep) <= 5)
  got = CE._reliability_core(pp, yp, 12, binning, where=few)  # the same program
  want = R.reliability_stats(p[:5], y[:5], 12, binning)
  np.testing.assert_array_equal(got.counts, want[0])
  for g, w in zip(got[1:], want[1:]):
    np.testing.assert_allclose(g, w, atol=ATOL)


@pytest.mark.parametrize("c", [10, 16, 17, 33, 100])
def test_top_label_without_n_by_c_temporary(c):
  # The top label (ties toward the lowest index, as jnp.argmax) and the
  # correctness bit are reduced over column chunks (jnp.argmax itself up to
  # ARGMAX_MAX_CLASSES = 16 classes): same values as argmax, and XLA
  # allocates no temporary of the input's size (the plain
  # min(where(p == max, iota, C)) writes an int32 (n, C) one).
  from jaxcal._src import calibration_errors as CE

  assert CE.ARGMAX_MAX_CLASSES == 16
  rng = np.random.default_rng(5)
  n = 4096  # C = 100: 4 column chunks, the last one partial; C = 33: the last one a column
  p = np.round(rng.random((n, c)) * 8).astype(np.float32) / 8  # many ties at the max
  y = rng.integers(-1, c + 1, n)  # out-of-range labels are never correct
  pd, yd = jnp.asarray(p), jnp.asarray(y, jnp.int32)
  r, conf = CE._confidence_parts(pd)
  conf2, z = CE._confidence(pd, yd)
  np.testing.assert_array_equal(np.asarray(r), np.argmax(p, axis=1))
  np.testing.assert_array_equal(np.asarray(conf), p.max(axis=1))
  np.testing.assert_array_equal(np.asarray(conf2), p.max(axis=1))
  np.testing.assert_array_equal(np.asarray(z), np.argmax(p, axis=1) == y)
  for f in (lambda p, y: CE._confidence_parts(p), CE._confidence):
    temp = jax.jit(f).lower(pd, yd).compile().memory_analysis().temp_size_in_bytes
    assert temp < p.nbytes // 4, temp


def test_counts_of_bad_input_under_jit_are_minus_one():
  """``reliability_stats`` and ``consistency_bands`` under jit with a NaN row: the floats are
  NaN and the counts -1 (they came back as plausible counts, ``[1, 1, 7, 3]``); vmap keeps
  the good member's counts."""
  from jaxcal import bootstrap

  rng = np.random.default_rng(0)
  p = rng.dirichlet(np.ones(3), 12).astype(np.float32)
  y = rng.integers(0, 3, 12)
  bad = p.copy()
  bad[4] = np.nan
  stats = jax.jit(lambda a, b: metrics.reliability_stats(a, b, 4))
  s = stats(bad, y)
  assert np.all(np.asarray(s.counts) == -1) and np.all(np.isnan(np.asarray(s.accuracy)))
  good = metrics.reliability_stats(p, y, 4)
  both = jax.vmap(lambda a, b: metrics.reliability_stats(a, b, 4))(
    np.stack([p, bad]), np.stack([y, y])
  )
  np.testing.assert_array_equal(np.asarray(both.counts[0]), np.asarray(good.counts))
  assert np.all(np.asarray(both.counts[1]) == -1)
  bands = jax.jit(lambda a: bootstrap.consistency_bands(jax.random.key(0), a, 4, num_resamples=8))
  out = bands(bad)
  assert np.all(np.asarray(out.counts) == -1) and np.all(np.isnan(np.asarray(out.lo)))
  np.testing.assert_array_equal(np.asarray(bands(p).counts), np.asarray(good.counts))


@pytest.mark.parametrize("binning", ["fixed", "quantile"])
def test_binned_errors_differentiate_in_float32_as_in_float64(binning):
  # the float32 sums are exact integers of fixed-point scores, which carried no
  # derivative: every binned error's gradient was exactly 0 in float32 (conf_ece
  # of logits: 0 for a finite difference of -0.016); float64 sums are plain floats
  rng = np.random.default_rng(0)
  x = rng.normal(size=(64, 4)) * 2
  y = rng.integers(0, 4, 64)
  names = ["conf_ece", "conf_ce", "classwise_ece", "classwise_ce", "ecce"]
  for name in names:
    fn = getattr(metrics, name)

    def f(z, fn=fn, name=name):
      kw = {} if name == "ecce" else {"binning": binning}  # ecce: its own fixed bins
      return fn(z, y, 5, from_logits=True, **kw)

    got = jax.grad(f)(jnp.asarray(x, jnp.float32))
    with jax.enable_x64(True):
      want = jax.grad(f)(jnp.asarray(x, jnp.float64))
    assert np.any(np.asarray(want) != 0), name
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-6, err_msg=name)


def test_fixed_bin_histogram_in_sample_chunks_counts_each_sample_once():
  """The fixed-bin histogram loops over chunks of ``EDGE_CHUNK_ELEMENTS / C`` samples; the
  last chunk is shifted back to end at ``n`` and overlaps the one before, and only its new
  samples may count. Guards that overlap: n = 2**17 + 3 with C = 8 is two chunks of 2**17,
  the second one new in its last 3 samples only."""
  from jaxcal._src import binning as B

  c = 8
  n = B.EDGE_CHUNK_ELEMENTS // c + 3
  rng = np.random.default_rng(4)
  p = rng.dirichlet(np.ones(c), n).astype(np.float32)
  y = rng.integers(0, c, n)
  got = float(metrics.classwise_ece(p, y, 15, binning="fixed"))
  assert got == pytest.approx(R.classwise_ece(p, y, 15, "fixed"), rel=1e-5, abs=1e-7)


def test_where_on_the_fixed_bin_sort_path_equals_the_subset():
  """float64 scores with ``max_bins`` above ``EDGES_MAX_BINS``: the fixed bin ends come from
  a bisection over the sorted scores (``binning.bin_ends``), masked-out samples sorted last.
  Guards its upper end: sought among all ``n`` samples instead of the ``n_eff`` selected,
  the masked samples' placeholder scores fall into bins and their counts move the l2 / max
  norms."""
  from jaxcal._src import binning as B

  rng = np.random.default_rng(6)
  p = rng.dirichlet(np.ones(3), 40)
  y = rng.integers(0, 3, 40)
  w = rng.random(40) < 0.6
  big = B.EDGES_MAX_BINS + 1
  bins = R.fixed_bins(p[w].max(axis=1), 10)
  with jax.enable_x64(True):
    for norm in ("l2", "max"):
      got = float(metrics.conf_ece(p, y, 10, norm=norm, where=w, max_bins=big))
      want = MR.binned_norm_conf(p[w], y[w], bins, 10, norm)
      assert got == pytest.approx(want, rel=1e-9, abs=1e-12), norm


@pytest.mark.parametrize("num_classes", [9 * 32 + 20, 67 * 32])
def test_row_reduce_loops_over_many_chunks(num_classes):
  """Beyond ``ROW_LOOP_CHUNKS`` chunks of columns ``row_reduce`` is one loop, not an
  unrolled chain of slices whose compile time grew with C (``conf_ece`` at C = 10,000
  compiled for 21.7 s, at C = 21,841 for 36 s): the program's size does not depend on
  C, and every op reads every column (with and without a partial last chunk)."""
  from jaxcal._src import numerics as N

  rng = np.random.default_rng(num_classes)
  x = rng.normal(size=(5, num_classes)).astype(np.float32)
  x[:, -1] = 9.0  # the maximum in the last column (the tail, or the loop's last chunk)
  x[0, 7] = 9.0  # a tie: the lowest column wins
  cols = np.arange(num_classes)
  out = N.row_reduce(lambda v, i: jnp.where(v == 9.0, i, num_classes), jnp.asarray(x), "min")
  np.testing.assert_array_equal(out, [7] + [num_classes - 1] * 4)
  np.testing.assert_allclose(N.row_reduce(lambda v, i: v * i, x), (x * cols).sum(1), rtol=1e-5)
  np.testing.assert_array_equal(N.row_reduce(lambda v, i: v, x, "max"), x.max(1))
  np.testing.assert_array_equal(N.row_reduce(lambda v, i: v, x, "min"), x.min(1))
  any_last = N.row_reduce(lambda v, i: (v == 9.0) & (i == num_classes - 1), x, "any")
  np.testing.assert_array_equal(any_last, [True] * 5)

  def size(c):
    jaxpr = jax.make_jaxpr(lambda v: N.row_reduce(lambda u, i: u * i, v))(jnp.zeros((3, c)))
    return len(jaxpr.jaxpr.eqns)

  assert size(num_classes) == size(num_classes + 32 * 40)  # a loop, not 40 more slices
  # the public top label at such C: ties to the lowest class, against numpy
  p = rng.dirichlet(np.ones(num_classes), 50).astype(np.float32)
  p[:5, :2] = p[:5].max(1, keepdims=True)  # argmax ties at columns 0 and 1
  p /= p.sum(1, keepdims=True)
  y = rng.integers(0, 2, 50)
  got = float(metrics.conf_ece(p, y, 4, binning="fixed"))
  assert got == pytest.approx(R.conf_ece(p, y, 4, "fixed"), rel=1e-5, abs=1e-7)


def test_lin_ce_refuses_reports_without_columns():
  """Reports of shape ``(n, 0)`` raised ``ZeroDivisionError: integer modulo by zero``
  from a reshape inside the segment sum; they are refused by name, as ``lce`` refuses
  features without columns."""
  e = np.zeros((3, 0), np.float32)
  for fn in (metrics.lin_ce, metrics.lin_ece):
    with pytest.raises(ValueError, match=r"reports must have at least one column .* got \(3, 0\)"):
      fn(e, e, np.array([0, 0, 1]), 2)
