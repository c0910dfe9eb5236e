"""LCE / MLCE, the Nadaraya–Watson helper and ECCE against float64 numpy
ports of the local calibration paper's code (Barbera et al. 2025,
arXiv:2510.26566)."""

import functools
import os
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))  # --import-mode=importlib
from conftest import no_new_programs

from jaxcal import metrics
from jaxcal._src.local import _lce_core, _raise_if_nothing_kept, lce, nadaraya_watson

BLOCKS = dict(block_size=32, candidate_block=64)  # several blocks at n = 300


# ------------------------------------------------------------ references
#
# Float64 numpy ports of the authors' code for the paper's tables
# (compute_multiclass_calibration_metrics_w_lce in github.com/Cesbar99/
# multiclass-local-calibration, src/utils/utils.py, uniform bins): edges
# linspace(0, 1, m + 1), bin = bucketize(s, edges, right=True) clamped to
# [1, m], empty bins skipped, LCE only in bins with more than 20 samples,
# anchor included, ECCE divided by the number of non-empty bins, per-class
# results combined with the class frequencies.


def _authors_bins(s, m):
  edges = np.linspace(0.0, 1.0, m + 1)
  return np.clip(np.searchsorted(edges, s, side="right"), 1, m)  # torch.bucketize(right=True)


def authors_metrics(p, y, pca, class_freqs=None, n_bins=15, gamma=10.0, filter_thr=20):
  """``(ecce, lce, mlce, global max)`` as the authors' code computes them, in float64."""
  p = np.asarray(p, np.float64)
  pca = np.asarray(pca, np.float64)
  y = np.asarray(y)
  n, C = p.shape
  freqs = np.full(C, 1.0 / C) if class_freqs is None else np.asarray(class_freqs, np.float64)
  ecces, lces, mlces = [], [], []
  for c in range(C):
    labels_binary = (y == c).astype(np.float64)
    probs_class = p[:, c]
    bin_indices = _authors_bins(probs_class, n_bins)
    bin_accs, bin_confs, bin_weights, errs = [], [], [], []
    for b in range(1, n_bins + 1):
      idx = np.flatnonzero(bin_indices == b)
      if idx.size == 0:
        continue
      bin_accs.append(labels_binary[idx].mean())
      bin_confs.append(probs_class[idx].mean())
      bin_weights.append(idx.size / n)
      if idx.size > filter_thr:
        e_sub = probs_class[idx] - labels_binary[idx]
        d2 = ((pca[idx][:, None, :] - pca[idx][None, :, :]) ** 2).sum(-1)
        k = np.exp(-d2 / (2.0 * gamma**2))
        errs.extend(np.abs(k @ e_sub / k.sum(1)))
    wts = np.asarray(bin_weights)
    cum_pred = np.cumsum(wts * np.asarray(bin_confs))
    cum_true = np.cumsum(wts * np.asarray(bin_accs))
    ecces.append(np.sum(np.abs(cum_pred - cum_true)) / len(bin_accs))
    lces.append(np.mean(errs) if errs else 0.0)
    mlces.append(np.max(errs) if errs else 0.0)
  return (
    float(freqs @ ecces),
    float(freqs @ lces),
    float(freqs @ mlces),
    float(np.max(mlces)),
  )


def ecce_sum_ref(p, y, m=15, w=None):
  """The paper's appendix formula: the per-class sum over non-empty bins, undivided."""
  p = np.asarray(p, np.float64)
  n, C = p.shape
  w = np.full(C, 1.0 / C) if w is None else np.asarray(w, np.float64)
  out = 0.0
  for c in range(C):
    b = _authors_bins(p[:, c], m)
    run = 0.0
    for bb in range(1, m + 1):
      idx = b == bb
      run += np.sum((y[idx] == c) - p[idx, c])
      if idx.any():
        out += w[c] * abs(run) / n
  return out


def lce_ref(p, y, phi, m=15, min_bin_size=20, gamma=10.0, w=None):
  """``(LCE, MLCE)`` from the authors' port (MLCE = sum_c w_c max_i e_ic)."""
  _, err, worst, _ = authors_metrics(p, y, phi, w, m, gamma, min_bin_size)
  return err, worst


def nw_ref(phi, t, gamma, include_self=False):
  phi = np.asarray(phi, np.float64)
  n = len(phi)
  out = np.zeros((n, t.shape[1]))
  for i in range(n):
    num, den = 0.0, 0.0
    for j in range(n):
      if j == i and not include_self:
        continue
      k = np.exp(-np.sum((phi[i] - phi[j]) ** 2) / (2 * gamma**2))
      num = num + k * t[j]
      den += k
    out[i] = num / den
  return out


def _data(seed=0, n=300, C=4, D=5, scale=4.0):
  """Random predictions with ties: 40 % of the rows are multiples of 1/8
  (exact 0 and 1 among them), 20 % of the rows (scores and features) repeat
  other rows, and the peaked softmax of the rest leaves some bins empty."""
  rng = np.random.default_rng(seed)
  z = rng.normal(size=(n, C)) * scale
  p = np.exp(z - z.max(1, keepdims=True))
  p /= p.sum(1, keepdims=True)
  g = 2 * n // 5
  p[:g] = rng.multinomial(8, p[:g]) / 8.0
  phi = rng.normal(size=(n, D)) * 2 + 3
  dup = rng.choice(n, size=n // 5, replace=False)
  src = rng.integers(0, n, dup.size)
  p[dup], phi[dup] = p[src], phi[src]
  y = np.array([rng.choice(C, p=q) for q in p])
  return p, y, phi


@pytest.fixture(scope="module")
def data():
  return _data()


# ------------------------------------------------------------------ LCE


def test_data_has_ties_and_empty_bins(data):
  p, _, phi = data
  assert len(np.unique(p[:, 0])) < 0.6 * len(p) and len(np.unique(phi[:, 0])) < 0.9 * len(p)
  assert np.any(p == 1.0) and np.any(p == 0.0)
  occupied = [len(np.unique(_authors_bins(p[:, c], 15))) for c in range(p.shape[1])]
  assert min(occupied) < 15  # some bins are empty


@pytest.mark.parametrize("m,min_bin_size,gamma", [(15, 20, 2.0), (15, 0, 10.0), (5, 40, 0.7)])
def test_lce_ecce_match_the_authors_code(data, m, min_bin_size, gamma):
  p, y, phi = data
  prior = np.array([0.1, 0.2, 0.3, 0.4])
  want = authors_metrics(p, y, phi, prior, m, gamma, min_bin_size)
  with jax.enable_x64(True):
    loc = lce(p, y, phi, m, min_bin_size, gamma, prior, **BLOCKS)
    glob = lce(p, y, phi, m, min_bin_size, gamma, prior, mlce="global", **BLOCKS)
    got = [float(metrics.ecce(p, y, m, prior)), float(loc.lce), float(loc.mlce), float(glob.mlce)]
  np.testing.assert_allclose(got, want, rtol=1e-5)
  assert 0 < got[1] <= got[2] <= got[3]
  np.testing.assert_allclose(float(glob.lce), got[1], rtol=1e-12)


def test_public_name_and_where_mask_drops_samples(data):
  p, y, phi = data
  p, phi = p.astype(np.float32), phi.astype(np.float32)
  keep = np.arange(len(y)) % 3 != 0
  core = functools.partial(_lce_core, max_bins=15, block_size=32, candidate_block=64)
  args = (np.full(4, 0.25, np.float32), 20, np.float32(2.0))
  masked = jax.jit(lambda *a: core(*a, where=keep)[:2])(p, y, 15, phi, *args)
  # absent rows hold garbage: they must not matter
  p_bad, phi_bad = p.copy(), phi.copy()
  phi_bad[~keep] = 1e6
  p_bad[~keep] = np.eye(4, dtype=np.float32)[0]
  masked_bad = jax.jit(lambda *a: core(*a, where=keep)[:2])(p_bad, y, 15, phi_bad, *args)
  subset = metrics.lce(p[keep], y[keep], phi[keep], bandwidth=2.0, **BLOCKS)
  np.testing.assert_allclose(np.asarray(masked), np.asarray(subset), rtol=1e-5)
  np.testing.assert_allclose(np.asarray(masked_bad), np.asarray(subset), rtol=1e-5)
  with pytest.raises(ValueError, match="mlce must be one of"):
    metrics.lce(p, y, phi, mlce="max")


def test_public_where_mask_is_the_subset_and_never_reads_masked_rows(data):
  # metrics.lce took no where= (a TypeError), though every other metric does
  p, y, phi = data
  p, phi = p.astype(np.float32), phi.astype(np.float32)
  keep = np.arange(len(y)) % 3 != 0
  kw = dict(bandwidth=2.0, **BLOCKS)
  subset = metrics.lce(p[keep], y[keep], phi[keep], np.array([5, 15]), **kw)
  got = metrics.lce(p, y, phi, np.array([5, 15]), where=keep, **kw)
  np.testing.assert_allclose(np.asarray(got), np.asarray(subset), rtol=1e-6)
  # masked-out rows are neither checked nor read: NaN scores and features, a bad label
  p_bad, phi_bad, y_bad = p.copy(), phi.copy(), y.copy()
  p_bad[~keep], phi_bad[~keep], y_bad[~keep] = np.nan, np.inf, 99
  want = metrics.lce(p[keep], y[keep], phi[keep], **kw)
  eager = metrics.lce(p_bad, y_bad, phi_bad, where=keep, **kw)
  jitted = jax.jit(lambda *a: metrics.lce(*a[:3], where=a[3], **kw))(p_bad, y_bad, phi_bad, keep)
  for out in (eager, jitted):
    np.testing.assert_allclose(np.asarray(out), np.asarray(want), rtol=1e-6)
  # a selected bad row still raises, naming it; too few selected samples name the mask
  phi_sel = phi.copy()
  phi_sel[1] = np.nan
  with pytest.raises(ValueError, match="features contains non-finite .* row 1"):
    metrics.lce(p, y, phi_sel, where=keep, **kw)
  with pytest.raises(ValueError, match=r"n = 200 samples selected by where"):
    metrics.lce(p, y, phi, where=keep, min_bin_size=150, **kw)


def test_exact_copies_of_an_anchor_keep_full_weight_at_small_bandwidths():
  # |a|^2 + |b|^2 - 2 a.b leaves rounding noise between bit-identical rows; at a
  # bandwidth near the resolution limit that noise took the copies' weight (LCE
  # up to 3.4 % off the authors' float64 value at gamma = 1e-4, 0.5 % in 50-d
  # at gamma = 0.01). Distances below the form's resolution are now 0.
  rng = np.random.default_rng(11)
  for d, reps, gammas in ((3, 4, (1e-4, 3e-3, 1.0)), (50, 2, (0.01, 0.1))):
    n0 = 240 // reps
    p = rng.dirichlet(np.ones(3), size=240).astype(np.float32)  # copies differ in p and y
    y = rng.integers(0, 3, 240)
    phi = (rng.normal(size=(n0, d)) * 5).repeat(reps, axis=0).astype(np.float32)
    for g in gammas:
      got = lce(p, y, phi, num_bins=5, min_bin_size=10, bandwidth=g, **BLOCKS)
      want = lce_ref(p, y, phi, 5, 10, g)
      np.testing.assert_allclose(
        [float(got.lce), float(got.mlce)], want, rtol=2e-5, err_msg=f"{d}, {g}"
      )


def test_tight_clusters_far_from_the_mean_keep_their_distances():
  # Snapping every distance below the form's resolution bound (not only between
  # rows of bit-identical norms) zeroed all pairs inside two 50-d clusters at
  # +-1000 e_1: LCE 0.0225 at every bandwidth against 0.0270 in float64 at gamma = 1
  rng = np.random.default_rng(0)
  n, d = 400, 50
  side = rng.integers(0, 2, n)
  phi = np.zeros((n, d))
  phi[:, 0] = np.where(side, 1000.0, -1000.0)
  phi = (phi + 0.15 * rng.standard_normal((n, d))).astype(np.float32)
  y = (rng.random(n) < 1 / (1 + np.exp(-3 * phi[:, 1]))).astype(int)
  p = np.full((n, 2), 0.5, np.float32)
  for g, rtol in ((1.0, 0.06), (2.0, 0.02)):
    got = lce(p, y, phi, num_bins=5, min_bin_size=10, bandwidth=g, **BLOCKS)
    want = lce_ref(p, y, phi, 5, 10, g)
    np.testing.assert_allclose(float(got.lce), want[0], rtol=rtol, err_msg=str(g))


def test_one_outlying_feature_row_leaves_the_other_distances_exact():
  # the features were centred on their mean, which one row at 1e10 moved by 3e7: every
  # other distance became rounding noise (LCE 8 %, MLCE 18 % off float64; 2 % at 1e6).
  # Centred on the median, the inliers' distances are those of the data without it
  rng = np.random.default_rng(2)
  p = rng.dirichlet(np.ones(3), 300).astype(np.float32)
  p /= p.sum(1, keepdims=True)
  y = rng.integers(0, 3, 300)
  base = rng.normal(size=(300, 4))
  for far in (1e6, 1e10, 1e15):
    phi = np.vstack([base[:-1], [[far, 0.0, 0.0, 0.0]]]).astype(np.float32)
    got = lce(p, y, phi, num_bins=5, min_bin_size=10, bandwidth=1.0, **BLOCKS)
    want = lce_ref(p, y, phi, 5, 10, 1.0)
    np.testing.assert_allclose([float(got.lce), float(got.mlce)], want, rtol=1e-4, err_msg=far)
    t = np.eye(3)[y[:40]]
    nw = nadaraya_watson(phi[-40:], t.astype(np.float32), 1.0)
    with np.errstate(invalid="ignore"):  # the outlier's own row: every kernel 0, 0/0
      want = nw_ref(phi[-40:].astype(np.float64), t, 1.0)
    np.testing.assert_allclose(np.asarray(nw)[:-1], want[:-1], atol=1e-5, err_msg=far)


def test_bin_of_exactly_min_bin_size_is_skipped():
  # 2 classes; p[:, 0] puts exactly 20 samples in the bin (0.6, 2/3] and 30 in (1/15*14, 1]
  rng = np.random.default_rng(1)
  s = np.concatenate([np.full(20, 0.65), np.full(30, 0.97)])
  p = np.stack([s, 1 - s], 1)
  y = rng.integers(0, 2, 50)
  phi = rng.normal(size=(50, 3))
  with jax.enable_x64(True):
    for mbs in (19, 20, 29):
      got = lce(p, y, phi, num_bins=15, min_bin_size=mbs, bandwidth=1.0, **BLOCKS)
      want = lce_ref(p, y, phi, 15, mbs, 1.0)
      np.testing.assert_allclose([float(got.lce), float(got.mlce)], want, atol=1e-6)
    # min_bin_size = 30: every bin has <= 30 samples, nothing is kept: LCE is
    # undefined (not 0, "perfectly calibrated"): an error, NaN under jit
    with pytest.raises(ValueError, match=r"num_bins = 15, no bin .* min_bin_size = 30"):
      lce(p, y, phi, num_bins=15, min_bin_size=30, bandwidth=1.0, **BLOCKS)
    # (traced: NaN, see test_jit_vmap_and_num_bins_array)


def test_float32_and_block_sizes(data):
  p, y, phi = data
  want = lce_ref(p, y, phi, 15, 20, 2.0)
  for blocks in (BLOCKS, {}):
    got = lce(p.astype(np.float32), y, phi.astype(np.float32), bandwidth=2.0, **blocks)
    np.testing.assert_allclose([float(got.lce), float(got.mlce)], want, rtol=1e-5)
  # features far from the origin: the distances are taken on centred features
  got = lce(p.astype(np.float32), y, (phi + 300).astype(np.float32), bandwidth=2.0, **BLOCKS)
  np.testing.assert_allclose([float(got.lce), float(got.mlce)], want, rtol=1e-4)


@pytest.mark.parametrize("mlce", ["weighted", "global"])
def test_bad_features_or_probabilities_under_jit_give_nan_at_large_n(mlce):
  """LCE and MLCE are NaN, folded with the checks' flags.

  Past 4,096 entries XLA:CPU's max skips a NaN: left to the NaN inputs
  reaching it, MLCE read 0 under jit (a perfectly calibrated model).
  """
  p, y, phi = _data(n=4400)
  f = jax.jit(lambda a, b, c: lce(a, b, c, bandwidth=2.0, mlce=mlce))
  assert np.isfinite(np.asarray(f(p, y, phi))).all()
  phi_bad = phi.copy()
  phi_bad[3, 1] = np.nan
  p_bad = p.copy()
  p_bad[5] = np.nan
  for args in ((p, y, phi_bad), (p_bad, y, phi)):
    assert np.isnan(np.asarray(f(*args))).all()
  # bad class weights: MLCE "global" reads none of them, but the call is refused eagerly
  g = jax.jit(lambda w: lce(p, y, phi, bandwidth=2.0, mlce=mlce, class_weights=w))
  assert np.isnan(np.asarray(g(np.array([np.nan, 0.5, 0.25, 0.25], np.float32)))).all()


def test_jit_vmap_and_num_bins_array(data):
  p, y, phi = (a.astype(np.float32) if a.dtype == np.float64 else a for a in data)
  p2, y2, phi2 = (a.astype(np.float32) if a.dtype == np.float64 else a for a in _data(seed=5))
  eager = lce(p, y, phi, bandwidth=2.0, **BLOCKS)
  f = jax.jit(lambda a, b, c, g, k: lce(a, b, c, min_bin_size=k, bandwidth=g, **BLOCKS))
  jitted = f(p, y, phi, 2.0, 20)
  np.testing.assert_allclose(np.asarray(jitted), np.asarray(eager), rtol=1e-6, atol=1e-7)
  # traced bad values give NaN: a bandwidth that is not finite and >= 1.1e-19,
  # min_bin_size < 0, no kept anchor at all (n = 300: no bin holds more than 300)
  for g, k in ((-1.0, 20), (np.inf, 20), (np.nan, 20), (1e-30, 20), (2.0, -1), (2.0, 300)):
    out = f(p, y, phi, g, k)
    assert np.isnan(float(out.lce)) and np.isnan(float(out.mlce)), (g, k)
  # a traced float min_bin_size would be truncated to a plausible count (2.5 -> 2,
  # -0.5 and NaN -> 0): refused at trace time, its dtype is static
  for k in (2.5, -0.5, np.nan):
    with pytest.raises(ValueError, match="min_bin_size must be an integer scalar when traced"):
      f(p, y, phi, 2.0, np.float32(k))
  batched = jax.vmap(lambda a, b, c: lce(a, b, c, bandwidth=2.0, **BLOCKS))(
    np.stack([p, p2]), np.stack([y, y2]), np.stack([phi, phi2])
  )
  second = lce(p2, y2, phi2, bandwidth=2.0, **BLOCKS)
  np.testing.assert_allclose(np.asarray(batched.lce), [eager.lce, second.lce], rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(
    np.asarray(batched.mlce), [eager.mlce, second.mlce], rtol=1e-5, atol=1e-7
  )
  arr = lce(p, y, phi, num_bins=np.array([5, 15]), bandwidth=2.0, **BLOCKS)
  assert arr.lce.shape == (2,)
  for k, m in enumerate((5, 15)):
    want = lce_ref(p, y, phi, m, 20, 2.0)
    np.testing.assert_allclose([float(arr.lce[k]), float(arr.mlce[k])], want, atol=2e-5)
  # traced bin counts: those outside [1, max_bins] give NaN, the others their value
  traced = jax.jit(lambda m: lce(p, y, phi, num_bins=m, max_bins=15, bandwidth=2.0, **BLOCKS))
  out = traced(np.array([0, 5, 16], np.int32))
  assert np.isnan(np.asarray(out)[:, [0, 2]]).all()
  want = lce_ref(p, y, phi, 5, 20, 2.0)
  np.testing.assert_allclose([float(out.lce[1]), float(out.mlce[1])], want, atol=2e-5)


def test_bin_counts_of_one_octave_share_a_program_and_a_traced_count_needs_max_bins(data):
  # The per-bin arrays were sized at the exact count: each of 9 ... 16
  # compiled its own program (0.55-1.0 s each); now the bound is the count
  # rounded up to a power of two, as for every binned metric. The values are
  # those with the exact bound.
  p, y, phi = data
  first = lce(p, y, phi, num_bins=9, bandwidth=2.0, **BLOCKS)
  with no_new_programs():
    got = [lce(p, y, phi, num_bins=m, bandwidth=2.0, **BLOCKS) for m in range(10, 17)]
  for m, out in zip(range(9, 17), [first, *got], strict=True):
    exact = lce(p, y, phi, num_bins=m, max_bins=m, bandwidth=2.0, **BLOCKS)
    np.testing.assert_allclose(np.asarray(out), np.asarray(exact), rtol=1e-6, err_msg=str(m))
  # (at 16 the data's multiples of 1/8 lie on edges, which the authors bin apart)
  np.testing.assert_allclose(
    [float(got[-2].lce), float(got[-2].mlce)], lce_ref(p, y, phi, 15, 20, 2.0), atol=2e-5
  )
  # a traced count without a bound sized its arrays at n, silently slow: refused as elsewhere
  with pytest.raises(ValueError, match="num_bins is traced .* pass a static bound"):
    jax.jit(lambda m: lce(p, y, phi, num_bins=m, bandwidth=2.0, **BLOCKS))(15)


def test_calibrated_far_apart_clusters_have_small_lce():
  # Points in tight, far-apart clusters with labels at their cluster's true
  # frequency and predictions equal to it: LCE is sampling noise only.
  rng = np.random.default_rng(3)
  n, C = 2000, 3
  centers = rng.normal(size=(4, 6)) * 100
  g = rng.integers(0, 4, n)
  phi = centers[g] + rng.normal(size=(n, 6)) * 0.1
  q = rng.dirichlet(np.ones(C), size=4)
  p = q[g]
  y = np.array([rng.choice(C, p=qq) for qq in p])
  err, worst = lce(p.astype(np.float32), y, phi.astype(np.float32), bandwidth=1.0)
  biased = np.roll(p, 1, axis=1)
  err_b, _ = lce(biased.astype(np.float32), y, phi.astype(np.float32), bandwidth=1.0)
  assert float(err) < 0.05 < float(err_b)


@pytest.mark.parametrize(
  "bad, fragment",
  [
    ("nan_features", "features contains non-finite"),
    ("inf_features", "features contains non-finite"),
    ("zero_columns", r"at least one column .* got \(300, 0\)"),
    ("bandwidth0", "bandwidth must be > 0"),
    ("bandwidth_neg", "bandwidth must be > 0"),
    ("bandwidth_nan", "bandwidth must be a finite number"),
    ("bandwidth_inf", "bandwidth must be a finite number"),
    ("bandwidth_bool", "bandwidth must be a finite number > 0, got True"),
    ("bandwidth_str", "bandwidth must be a finite number > 0, got 'a'"),
    ("bandwidth_array", r"bandwidth must be a scalar, got shape \(2,\)"),
    ("bandwidth_tiny", r"bandwidth = 1e-30 is below the smallest supported bandwidth 1.08e-19"),
    # inf in float32: a numpy overflow warning and a flat kernel before
    ("bandwidth_huge", r"bandwidth = 1e\+39 is beyond float32's range"),
    ("rows", "features has 299 rows"),
    ("features_1d", r"features must have shape \(n, D\)"),
    ("min_bin_size", "min_bin_size must be an integer >= 0"),
    ("min_bin_size_str", "min_bin_size must be an integer >= 0"),
    ("min_bin_size_inf", "min_bin_size must be an integer >= 0, got inf"),  # OverflowError before
    ("min_bin_size_complex", "min_bin_size must be an integer >= 0"),
    ("min_bin_size_2**31", "no bin of any class holds more than min_bin_size = 2147483648"),
    ("nothing_kept", "no bin of any class holds more than min_bin_size = 300 .* Lower"),
    ("blocks", "must be a multiple of block_size"),
    ("probs", r"probs must lie in \[0, 1\]"),
  ],
)
def test_lce_value_errors(data, bad, fragment):
  p, y, phi = data
  kw = dict(bandwidth=2.0)
  if bad == "nan_features":
    phi = phi.copy()
    phi[3, 1] = np.nan
  elif bad == "inf_features":
    phi = phi.copy()
    phi[0, 0] = np.inf
  elif bad == "zero_columns":
    phi = phi[:, :0]
  elif bad.startswith("bandwidth"):
    values = {"0": 0.0, "_neg": -1.0, "_nan": float("nan"), "_inf": float("inf")}
    values.update(_bool=True, _str="a", _array=np.ones(2), _tiny=1e-30, _huge=1e39)
    kw["bandwidth"] = values[bad[len("bandwidth") :]]
  elif bad == "rows":
    phi = phi[:-1]
  elif bad == "features_1d":
    phi = phi[:, 0]
  elif bad == "min_bin_size":
    kw["min_bin_size"] = -1
  elif bad == "min_bin_size_str":
    kw["min_bin_size"] = "20"
  elif bad.startswith("min_bin_size_"):
    kw["min_bin_size"] = {"inf": float("inf"), "complex": 3 + 0j, "2**31": 2**31}[bad[13:]]
  elif bad == "nothing_kept":  # n = 300: no bin can hold more than 300 samples
    kw["min_bin_size"] = 300
  elif bad == "blocks":
    kw.update(block_size=48, candidate_block=64)
  elif bad == "probs":
    p = p * 2
  with pytest.raises(ValueError, match=fragment):
    lce(p, y, phi, **kw)


def test_class_weights_are_used_as_given_as_documented(data):
  """The class weights are priors summing to 1, used as given as in every class-weighted
  metric of jaxcal: ``np.ones(C)`` gives ``C`` times the LCE and the default MLCE, and the
  global MLCE does not read them (the docstring did not say so; a review helper asked)."""
  p, y, phi = data
  C = p.shape[1]
  one = lce(p, y, phi, bandwidth=2.0)
  ones = lce(p, y, phi, bandwidth=2.0, class_weights=np.ones(C))
  np.testing.assert_allclose(np.asarray(ones), C * np.asarray(one), rtol=1e-5)
  g1 = lce(p, y, phi, bandwidth=2.0, mlce="global")
  g2 = lce(p, y, phi, bandwidth=2.0, mlce="global", class_weights=np.ones(C))
  assert float(g1.mlce) == float(g2.mlce)


def test_lce_small_bandwidth_limit_and_empty_num_bins(data):
  # gamma -> 0: each anchor keeps only itself, e_ic = |p_ic - 1[y = c]|. Its
  # own distance is float32 rounding noise (~1e-6 here), which used to make
  # every kernel of the anchor underflow and its error 0.
  p, y, _ = data
  phi = np.random.default_rng(7).normal(size=(300, 5)).astype(np.float32)  # no duplicates
  got = lce(p.astype(np.float32), y, phi, bandwidth=1e-6, **BLOCKS)
  want = lce_ref(p, y, phi, 15, 20, 1e-6)
  np.testing.assert_allclose([float(got.lce), float(got.mlce)], want, rtol=1e-5)
  # an empty array of bin counts: empty results, as every binned metric
  empty = lce(p, y, phi, np.array([], int), bandwidth=2.0)
  assert empty.lce.shape == empty.mlce.shape == (0,)
  # the message names the bin counts that keep nothing
  with pytest.raises(ValueError, match=r"num_bins in \[15\], no bin .* min_bin_size = 30 "):
    _raise_if_nothing_kept(np.array([4, 0]), np.array([2, 15]), 30, 50)


def test_inputs_not_modified(data):
  p, y, phi = data
  copies = [a.copy() for a in (p, y, phi)]
  lce(p, y, phi, bandwidth=2.0, **BLOCKS)
  for a, b in zip((p, y, phi), copies):
    np.testing.assert_array_equal(a, b)


# ---------------------------------------------------------------- ECCE


def test_ecce_float32_default_and_sum(data):
  p, y, _ = data
  w = np.array([0.4, 0.3, 0.2, 0.1])
  mean = authors_metrics(p, y, np.zeros((len(p), 1)), w, 7)[0]
  np.testing.assert_allclose(float(metrics.ecce(p.astype(np.float32), y, 7, w)), mean, rtol=1e-5)
  total = float(metrics.ecce(p.astype(np.float32), y, 7, w, reduction="sum"))
  np.testing.assert_allclose(total, ecce_sum_ref(p, y, 7, w), rtol=1e-5)
  assert mean < total <= 7 * mean * (1 + 1e-5)  # the sum is 1 to num_bins times the mean
  # below the class-wise ECE, as every ECCE of the paper is
  assert mean < float(metrics.classwise_ece(p, y, 7, class_weights=w))


def test_ecce_jit_vmap_and_bad_reduction(data):
  p, y, _ = data
  p = p.astype(np.float32)
  # three distinct data sets (other seeds: other predictions and labels), for the vmap
  sets = [(p, y)] + [_data(seed)[:2] for seed in (1, 2)]
  pb = np.stack([a.astype(np.float32) for a, _ in sets])
  yb = np.stack([b for _, b in sets])
  for red in ("mean", "sum"):
    eager = metrics.ecce(p, y, reduction=red)
    jitted = jax.jit(lambda a, b, r=red: metrics.ecce(a, b, reduction=r))(p, y)
    np.testing.assert_allclose(float(jitted), float(eager), rtol=1e-6)
    # vmap over the data sets == a loop of eager calls == the authors' formula
    batched = jax.vmap(lambda a, b, r=red: metrics.ecce(a, b, reduction=r))(pb, yb)
    loop = [float(metrics.ecce(a, b, reduction=red)) for a, b in zip(pb, yb)]
    assert len(set(loop)) == 3, loop
    np.testing.assert_allclose(np.asarray(batched), loop, rtol=1e-5)
    if red == "sum":
      want = [ecce_sum_ref(a, b) for a, b in zip(pb, yb)]
    else:
      want = [authors_metrics(a, b, np.zeros((len(a), 1)))[0] for a, b in zip(pb, yb)]
    np.testing.assert_allclose(loop, want, rtol=1e-5)
    arr = metrics.ecce(p, y, np.array([5, 15]), reduction=red)
    np.testing.assert_allclose(
      np.asarray(arr), [float(metrics.ecce(p, y, k, reduction=red)) for k in (5, 15)], rtol=1e-6
    )
  with pytest.raises(ValueError, match="reduction must be 'mean' or 'sum'"):
    metrics.ecce(p, y, reduction="max")


# ------------------------------------------------------ Nadaraya–Watson


def test_nadaraya_watson_matches_reference():
  rng = np.random.default_rng(2)
  phi = rng.normal(size=(40, 3)) * 2
  t = np.eye(3)[rng.integers(0, 3, 40)]
  with jax.enable_x64(True):
    for include_self in (False, True):
      got = nadaraya_watson(phi, t, 1.5, include_self=include_self)
      np.testing.assert_allclose(np.asarray(got), nw_ref(phi, t, 1.5, include_self), atol=1e-10)
    mask = np.arange(40) < 30  # rows >= 30 are padding: not neighbours
    got = nadaraya_watson(phi, t, 1.5, mask=mask)
    want = np.stack(
      [
        nw_ref(np.vstack([phi[i : i + 1], phi[:30]]), np.vstack([t[i : i + 1], t[:30]]), 1.5)[0]
        if i >= 30
        else nw_ref(phi[:30], t[:30], 1.5)[i]
        for i in range(40)
      ]
    )
    np.testing.assert_allclose(np.asarray(got), want, atol=1e-10)
    # a mask of one point: the others' estimate is its target, its own row (no
    # admissible neighbour) is 0
    one = nadaraya_watson(phi, t, 1.5, mask=np.arange(40) == 5)
    np.testing.assert_array_equal(np.asarray(one), np.where(np.arange(40)[:, None] == 5, 0.0, t[5]))
    # masked-out targets are never read (NaN there is fine)
    t_pad = t.copy()
    t_pad[35] = np.nan
    np.testing.assert_array_equal(np.asarray(nadaraya_watson(phi, t_pad, 1.5, mask=mask)), got)
    # a device mask closed over by a jit (features traced): checked now (its emptiness
    # test read a tracer: TracerBoolConversionError), the eager estimate
    dev = jnp.asarray(mask)
    traced = jax.jit(lambda f: nadaraya_watson(f, t, 1.5, mask=dev))(phi)
    np.testing.assert_allclose(np.asarray(traced), np.asarray(got), atol=1e-12)
    empty = jnp.zeros(40, bool)
    with pytest.raises(ValueError, match="mask selects no neighbours"):
      jax.jit(lambda f: nadaraya_watson(f, t, 1.5, mask=empty))(phi)
  # float32 features far from the origin (|phi|^2 ~ 3e5, whose rounding alone is ~0.03):
  # the distances are taken on centred features
  far = nadaraya_watson((phi + 300).astype(np.float32), t.astype(np.float32), 1.5)
  np.testing.assert_allclose(np.asarray(far), nw_ref(phi, t, 1.5), atol=1e-4)


def test_nadaraya_watson_vmap_over_distinct_data_sets_equals_the_loop():
  # three data sets (own features and targets) with a bandwidth each: every
  # member of the batch equals its own eager call (float32, n = 40, D = 3: the
  # program of the float32 call above) and the float64 loop
  rng = np.random.default_rng(4)
  phi = rng.normal(size=(3, 40, 3)) * 2
  t = np.eye(3)[rng.integers(0, 3, (3, 40))]
  bw = np.array([1.5, 0.7, 3.0])
  f32 = np.float32
  got = jax.vmap(nadaraya_watson)(phi.astype(f32), t.astype(f32), bw.astype(f32))
  assert got.shape == (3, 40, 3)
  for k in range(3):
    eager = np.asarray(nadaraya_watson(phi[k].astype(f32), t[k].astype(f32), float(bw[k])))
    np.testing.assert_allclose(np.asarray(got[k]), eager, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(eager, nw_ref(phi[k], t[k], bw[k]), atol=1e-5)
  assert np.abs(np.asarray(got[0] - got[1])).max() > 0.1  # the data sets' estimates differ


def test_nadaraya_watson_isolated_points_and_gradient():
  # kernels underflow in float32 (distances ~ 1e3 * gamma): weights stay exact
  phi = jnp.array([[0.0], [1.0], [1e4]], jnp.float32)
  t = jnp.array([[1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
  jitted = jax.jit(lambda f, b, m: nadaraya_watson(f, t, b, mask=m))
  out = jitted(phi, 1.0, np.ones(3, bool))
  assert np.all(np.isfinite(np.asarray(out)))
  np.testing.assert_allclose(np.asarray(out), [[0, 1], [1, 0], [0, 1]], atol=1e-6)
  # traced bad values give NaN: the bandwidth, an all-False mask
  for b, m in ((-1.0, True), (np.inf, True), (1e-30, True), (1.0, False)):
    assert np.all(np.isnan(np.asarray(jitted(phi, b, np.full(3, m))))), (b, m)
  g = jax.jit(jax.grad(lambda f: jnp.sum(nadaraya_watson(f, t, 1.0) ** 2)))(phi)
  assert np.all(np.isfinite(np.asarray(g)))


PHI3, T3 = np.arange(6.0).reshape(3, 2), np.eye(3)[[0, 1, 1]]


@pytest.mark.parametrize(
  "kw, fragment",
  [
    (dict(bandwidth=0.0), "bandwidth must be > 0"),
    (dict(bandwidth=True), "bandwidth must be a finite number > 0, got True"),
    (dict(bandwidth=1e-30), "below the smallest supported bandwidth"),
    (dict(targets=np.ones((4, 2))), r"the same number of rows n; got \(3, 2\) and \(4, 2\)"),
    # read "must share n" for 1-D targets of the same n (found by a review helper)
    (
      dict(targets=T3[:, 0]),
      r"targets must be 2-D \(n, d\), got shape \(3,\); .*targets\[:, None\]",
    ),
    (dict(targets=T3[None]), r"targets must be 2-D \(n, d\), got shape \(1, 3, 3\)$"),
    (dict(features=PHI3[:, 0]), r"features must be 2-D \(n, D\), got shape \(3,\)$"),
    (dict(features=np.full((3, 2), np.nan)), "features contains non-finite"),
    (dict(features=np.ones((3, 0))), r"D >= 1"),
    (dict(targets=np.where(np.eye(3, dtype=bool), np.nan, T3)), "targets contains non-finite"),
    (dict(mask=np.zeros(3, bool)), "mask selects no neighbours"),
    (dict(mask=np.ones(3, int)), "mask must be a boolean mask"),
    (dict(mask=np.ones(3)), "mask must be a boolean mask"),
    (dict(mask=np.ones(2, bool)), r"mask must have shape \(3,\)"),
    (dict(features=PHI3[:1], targets=T3[:1]), "single point has no neighbour"),
    # "no" was read as True, None as False: the other estimator (found by a review helper)
    (dict(include_self="no"), "include_self must be True or False, got 'no'"),
    (dict(include_self=None), "include_self must be True or False, got None"),
  ],
)
def test_nadaraya_watson_value_errors(kw, fragment):
  args = dict(features=PHI3, targets=T3, bandwidth=1.0) | kw
  with pytest.raises(ValueError, match=fragment):
    nadaraya_watson(**args)


def test_lce_in_checked_mode_raises_what_an_eager_call_raises(data):
  """A traced bin count above max_bins or a min_bin_size that keeps nothing gave NaN in
  checked mode, where ecce (and an eager lce) raise."""
  import jaxcal

  p, y, phi = data
  f = jaxcal.checked(jax.jit(lambda m, k: lce(p, y, phi, m, k, 2.0, max_bins=8)))
  with pytest.raises(ValueError, match=r"num_bins = 9 exceeds max_bins = 8"):
    f(9, 5)
  with pytest.raises(ValueError, match="no bin of any class holds more than min_bin_size = 300"):
    f(5, 300)
  got = f(5, 5)
  np.testing.assert_allclose(got, lce(p, y, phi, 5, 5, 2.0), rtol=1e-6)


def test_min_bin_size_beyond_int32_keeps_nothing_under_x64_jit(data):
  """int64 2**32 + 5 was cast to int32 5 inside jit: the LCE of min_bin_size = 5, silently."""
  p, y, phi = data
  with jax.enable_x64(True):
    f = jax.jit(lambda k: lce(p, y, phi, 5, k, 2.0))
    assert np.isnan(np.asarray(f(np.int64(2**32 + 5)))).all()
    assert np.isnan(np.asarray(f(np.int64(-(2**32) + 5)))).all()  # wrapped to 5 as well
    np.testing.assert_allclose(f(np.int64(5)), lce(p, y, phi, 5, 5, 2.0), rtol=1e-12)


@pytest.mark.parametrize("scale", [1e-18, 3e-19, 1.2e-19])
def test_tiny_float32_features_give_the_scale_free_lce(data, scale):
  """Features and bandwidth scaled together: the squared distances underflowed while the
  bandwidth's square did not (LCE 6 % off at 1.2e-19); they are scaled up first."""
  p, y, phi = data
  p32, phi32 = np.asarray(p, np.float32), np.asarray(phi, np.float32)
  want = lce(p32, y, phi32, 5, 10, 2.0)
  got = lce(p32, y, (phi32 * np.float32(scale)).astype(np.float32), 5, 10, 2.0 * scale)
  np.testing.assert_allclose(got, want, rtol=1e-5)
  nw = nadaraya_watson(phi32[:50] * np.float32(scale), p32[:50], 2.0 * scale)
  np.testing.assert_allclose(nw, nadaraya_watson(phi32[:50], p32[:50], 2.0), rtol=1e-5, atol=1e-7)


def test_lce_in_checked_mode_names_the_bad_label_every_call():
  """``jaxcal.checked(jit(lce))`` reports the bad label as an eager call does, on every call
  (from the second call on it named an internal array "scores": lce ran the public bin_ids
  check on its own already-checked probabilities). In a fresh process: the wrong message
  depended on what the process had compiled before."""
  import subprocess
  import sys

  code = """
import jax, jax.numpy as jnp, jaxcal
from jaxcal import metrics as M
p = jax.nn.softmax(jax.random.normal(jax.random.key(0), (12, 3)) * 1.5)
y = jnp.array([0, 1, 2, 0, 1, 2, 0, 1, 2, 1, 0, 2]).at[2].set(3)
f = jax.random.normal(jax.random.key(1), (12, 2))
for _ in range(3):
  try:
    jaxcal.checked(jax.jit(lambda a, b: M.lce(a, b, f, 2, 1, 1.0)))(p, y)
  except ValueError as e:
    print(str(e).splitlines()[0])
"""
  env = {**os.environ, "JAX_PLATFORMS": "cpu"}
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
  assert out.returncode == 0, out.stderr[-2000:]
  want = "labels must lie in [0, 3); 1 entries do not, the first is labels[2] = 3"
  assert out.stdout.splitlines() == [want] * 3, out.stdout


def test_a_class_without_kept_bins_keeps_its_weight():
  """Guards the documented rule that a class with no bin of more than
  ``min_bin_size`` samples counts as ``LCE_c = MLCE_c = 0`` with its weight
  ``1/C`` kept (not renormalised over the other classes), as in the authors' code.

  Class 2's scores spread over 9 bins of at most 7 samples (none kept at
  ``min_bin_size = 10``); classes 0 and 1 have bins of 13-14. No score lies on
  a bin edge (where jaxcal and the authors' code bin differently).
  """
  rng = np.random.default_rng(0)
  n = 60
  s2 = 0.6 * (np.arange(n) + 0.5) / n + 1e-3 * rng.random(n)
  p = np.stack([(1 - s2) / 2, (1 - s2) / 2, s2], 1)
  y = rng.integers(0, 3, n)
  phi = rng.normal(size=(n, 2))
  assert np.bincount(np.clip(np.ceil(s2 * 15), 1, 15).astype(int)).max() <= 10
  with jax.enable_x64(True):
    got = lce(p, y, phi, num_bins=15, min_bin_size=10, bandwidth=1.0, **BLOCKS)
  want = lce_ref(p, y, phi, 15, 10, 1.0)
  np.testing.assert_allclose([float(got.lce), float(got.mlce)], want, rtol=1e-12)


def test_nadaraya_watson_does_not_trip_debug_infs_on_valid_input():
  """The eager call ran op by op and its masked kernels' ``-inf`` fill raised
  ``FloatingPointError`` under ``jax_debug_infs`` (found by a review): a user hunting their own
  infs was sent into jaxcal. One program now; same values."""
  rng = np.random.default_rng(0)
  f = jnp.asarray(rng.normal(size=(50, 3)), jnp.float32)
  t = jnp.asarray(rng.uniform(size=(50, 2)), jnp.float32)
  ref = np.asarray(nadaraya_watson(f, t))
  with jax.debug_infs(True), jax.debug_nans(True):
    got = nadaraya_watson(f, t, mask=np.arange(50) % 4 != 0)
    np.testing.assert_array_equal(np.asarray(nadaraya_watson(f, t)), ref)
    np.testing.assert_array_equal(np.asarray(jax.vmap(nadaraya_watson)(f[None], t[None]))[0], ref)
  assert np.all(np.isfinite(np.asarray(got)))
