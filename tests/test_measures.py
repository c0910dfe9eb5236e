"""Smooth ECE, SKCE, MMCE, debiased CE, KS and the binned-error norms.

Each measure against its slow float64 loop from the paper
(tests/_measures_reference.py), jit == eager, vmap == loop (over data sets,
and over bandwidths / bin counts / kernels where there is one), Monte Carlo
known answers on a calibrated synthetic predictor, edge cases and bad
inputs. Peer implementations are compared in tests/test_peers.py.
"""

import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcal

sys.path.insert(0, str(pathlib.Path(__file__).parent))  # --import-mode=importlib
import _measures_reference as R
import _reference as R0
from conftest import load_cifar

from jaxcal import data, metrics


def _data(seed, n, c, alpha=1.0, noise=0.0):
  """Dirichlet predictions; labels drawn from a distorted version (miscalibrated)."""
  rng = np.random.default_rng(seed)
  p = rng.dirichlet(np.full(c, alpha), n)
  q = p**1.5 / np.sum(p**1.5, axis=1, keepdims=True) if noise else p
  y = np.array([rng.choice(c, p=qi) for qi in q])
  return p.astype(np.float32), y


P_SMALL, Y_SMALL = _data(0, 60, 4, noise=1.0)
P_MID, Y_MID = _data(1, 400, 5, alpha=0.5, noise=1.0)


# ----------------------------------------------------------------- smooth ECE


def test_smooth_ece_matches_the_papers_integral():
  # relplot's grid (1001 points at this bandwidth) against the continuous
  # reflected-kernel integral: the discretisation error is far below 1e-3.
  f, z = R.top_label(P_MID, Y_MID)
  for sigma in (0.05, 0.1):
    want = R.smooth_ece_integral(f, z, sigma)
    got = float(metrics.smooth_ece(P_MID, Y_MID, sigma))
    assert abs(got - want) < 2e-3 * want + 1e-5, (sigma, got, want)


def test_smooth_ece_bandwidth_is_a_fixed_point():
  sigma = float(metrics.smooth_ece_bandwidth(P_MID, Y_MID))
  assert sigma * 1024 == round(sigma * 1024)  # relplot's bisection grid
  above = float(metrics.smooth_ece(P_MID, Y_MID, sigma))
  below = float(metrics.smooth_ece(P_MID, Y_MID, sigma - 1 / 1024))
  assert sigma >= above and sigma - 1 / 1024 < below  # the bracket of sigma = smECE(sigma)
  assert float(metrics.smooth_ece(P_MID, Y_MID)) == pytest.approx(above, rel=1e-6)


def test_smooth_ece_is_below_one_at_every_bandwidth():
  # relplot's search first tests sigma = 1 (1 < smECE(1)); jaxcal skips that
  # evaluation because smECE < 1 always. The extreme case: every prediction
  # certain (c = 1) and wrong, so every residual is 1; also in one class.
  p = np.tile(np.array([[1.0, 0.0, 0.0]], np.float32), (50, 1))
  y = np.ones(50, np.int32)
  for sigma in (1.0, 0.5, 0.05, 0.01):
    for mode in ("top_label", "classwise"):
      assert float(metrics.smooth_ece(p, y, sigma, mode=mode)) < 1.0, (sigma, mode)
  # every midpoint passes (sigma < smECE(sigma) ~ 1), so the search never
  # leaves its upper end: sigma = 1, as relplot returns, with smECE(1) < 1
  assert float(metrics.smooth_ece_bandwidth(p, y)) == 1.0
  assert float(metrics.smooth_ece(p, y)) == pytest.approx(
    float(metrics.smooth_ece(p, y, 1.0)), rel=1e-6
  )


def test_smooth_ece_vmap_over_bandwidths_and_data_sets():
  sig = jnp.array([0.02, 0.05, 0.3])
  arr = metrics.smooth_ece(P_SMALL, Y_SMALL, sig)
  loop = [float(metrics.smooth_ece(P_SMALL, Y_SMALL, float(s))) for s in sig]
  np.testing.assert_allclose(arr, loop, rtol=1e-5)
  traced = jax.vmap(lambda s: metrics.smooth_ece(P_SMALL, Y_SMALL, s, min_bandwidth=0.02))(sig)
  np.testing.assert_allclose(traced, loop, rtol=1e-5)
  # below the static bound, or not finite: NaN, never a wrong number
  bounded = jax.jit(lambda s: metrics.smooth_ece(P_SMALL, Y_SMALL, s, min_bandwidth=0.05))
  for s in (0.02, np.inf, np.nan):
    assert np.isnan(bounded(s)), s
  # the automatic bandwidth (the default call: the bisection under vmap) on two
  # distinct data sets, each against its own eager call; their values and
  # bandwidths differ, so a batch that mixed them up cannot pass
  p2, y2 = _data(2, 60, 4, alpha=0.5, noise=1.0)
  pb, yb = np.stack([P_SMALL, p2]), np.stack([Y_SMALL, y2])
  out = jax.vmap(metrics.smooth_ece)(pb, yb)
  loop = [float(metrics.smooth_ece(a, b)) for a, b in zip(pb, yb)]
  assert abs(loop[0] - loop[1]) > 0.01 * loop[0], loop
  np.testing.assert_allclose(out, loop, rtol=1e-5)
  sig_loop = [float(metrics.smooth_ece_bandwidth(a, b)) for a, b in zip(pb, yb)]
  assert sig_loop[0] != sig_loop[1], sig_loop
  np.testing.assert_array_equal(jax.vmap(metrics.smooth_ece_bandwidth)(pb, yb), sig_loop)
  # the automatic bandwidth of invalid data (traced): NaN, not the search's floor 2/1024
  bad = pb.copy()
  bad[1, 1, 0] = np.nan
  for probs, labels in ((bad, yb), (pb, np.stack([Y_SMALL, np.r_[Y_SMALL[:-1], 7]]))):
    sig = jax.vmap(metrics.smooth_ece_bandwidth)(probs, labels)
    assert sig[0] == sig_loop[0] and np.isnan(sig[1])
  rel = jax.vmap(lambda a, b: metrics.smooth_reliability(a, b).bandwidth)(bad, yb)
  assert rel[0] == sig[0] and np.isnan(rel[1])


def test_smooth_ece_jit_equals_eager_and_classwise():
  eager = float(metrics.smooth_ece(P_SMALL, Y_SMALL, mode="classwise"))
  jitted = float(jax.jit(lambda p, y: metrics.smooth_ece(p, y, mode="classwise"))(P_SMALL, Y_SMALL))
  assert jitted == pytest.approx(eager, rel=1e-6)
  # against the float64 reference of the class-wise form (written from the
  # paper and jaxcal's docstring, with its own bisection): each class's
  # fixed-point bandwidth exactly (each bisection step decides by a margin of
  # at least 5e-4 relative here), and its smECE at it. The reference and
  # jaxcal agree to 2e-7 relative (float32 sums), so 2e-6 leaves 10x room.
  want, want_per, want_sig = R.smooth_ece_classwise(P_SMALL, Y_SMALL)
  sig = metrics.smooth_ece_bandwidth(P_SMALL, Y_SMALL, mode="classwise")
  assert sig.shape == (4,)
  np.testing.assert_array_equal(np.asarray(sig, np.float64) * 1024, want_sig * 1024)
  assert len(set(want_sig)) > 1  # the classes' bandwidths differ
  # one class at a time: class weights e_k give class k's smECE at its own bandwidth
  per = [
    float(metrics.smooth_ece(P_SMALL, Y_SMALL, mode="classwise", class_weights=np.eye(4)[k]))
    for k in range(4)
  ]
  np.testing.assert_allclose(per, want_per, rtol=2e-6)
  assert eager == pytest.approx(want, rel=2e-6)
  assert eager == pytest.approx(np.mean(per), rel=1e-6)  # the default weights are 1/C


def test_smooth_ece_in_fft_buckets_equals_the_full_size():
  # Each bandwidth runs on the smallest static sizes that hold its grid: the
  # value of the full-size computation, on both sides of every boundary.
  from jaxcal._src import smooth_ece as S

  sizes = S._sizes(S.SMOOTH_ECE_MIN_AUTO_BANDWIDTH)
  buckets = S._buckets(sizes)
  assert [b.fft for b in buckets] == [4096, 16384] and buckets[-1] == sizes
  f, z = R.top_label(P_MID, Y_MID)
  f = jnp.asarray(f, jnp.float32)
  r, w = f - jnp.asarray(z, jnp.float32), jnp.ones_like(f)
  # G = 1366 is the small bucket's largest grid (sigma = 0.00733; 1367 at 0.00732)
  sig = np.array([2 / 1024, 0.0037, 0.00732, 0.00733, 0.0099, 0.01, 0.02, 0.5, 1.0])
  got = jax.vmap(lambda s: S._smece_at(f, r, w, s, sizes))(sig)  # batched: the largest bucket
  full_size = jax.jit(S._smece_sized, static_argnums=4)
  bucketed = jax.jit(S._smece_at, static_argnums=4)
  assert [int(S._bucket(jnp.float32(s), buckets)) for s in sig] == [1, 1, 1] + [0] * 6
  for s, g in zip(sig, got):
    i = int(S._bucket(jnp.float32(s), buckets))
    assert i == 0 or 3 * S._grid_points(float(s)) - 2 > buckets[i - 1].fft, s  # the smallest...
    assert 3 * S._grid_points(float(s)) - 2 <= buckets[i].fft, s  # ... that holds it
    full = float(full_size(f, r, w, jnp.float32(s), sizes))
    one = float(bucketed(f, r, w, jnp.float32(s), sizes))
    assert one == pytest.approx(full, rel=2e-6, abs=1e-8), s
    assert float(g) == pytest.approx(full, rel=2e-6, abs=1e-8), s


def test_smooth_ece_vmap_over_data_sets_with_bandwidths_in_different_buckets():
  # Under vmap the bucket is the batch's largest (one branch runs): each data
  # set keeps the value it has alone at its own bandwidth (the automatic one
  # takes the same path; test_smooth_ece_vmap_over_bandwidths_and_data_sets).
  from jaxcal._src import smooth_ece as S

  sets = [_data(s, 500, 3, alpha=a, noise=1.0) for s, a in ((7, 1.0), (8, 0.3), (9, 3.0))]
  pb, yb = np.stack([p for p, _ in sets]), np.stack([y for _, y in sets])
  sig = np.array([0.003, 0.006, 0.3], np.float32)
  buckets = S._buckets(S._sizes(float(sig.min())))
  assert [int(S._bucket(jnp.float32(s), buckets)) for s in sig] == [1, 1, 0]
  loop = [float(metrics.smooth_ece(p, y, float(s))) for (p, y), s in zip(sets, sig)]
  got = jax.vmap(lambda p, y, s: metrics.smooth_ece(p, y, s, min_bandwidth=0.003))(pb, yb, sig)
  np.testing.assert_allclose(got, loop, rtol=2e-6)


def test_smooth_ece_does_not_drift_with_n():
  # The samples' float32 scatter-add onto the grid drifted with n: 1.3e-5
  # relative at 10^6 CIFAR-10 scores, 9.3e-5 at 10^7. Tiling leaves smECE_sigma
  # unchanged, so the float64 reference is the base set's.
  rng = np.random.default_rng(5)
  z = 8.0 * rng.standard_normal((2000, 10))
  p = np.exp(z - z.max(1, keepdims=True))
  p = (p / p.sum(1, keepdims=True)).astype(np.float32)
  y = (rng.random(2000)[:, None] > np.cumsum(p, 1)).sum(1).clip(0, 9)
  f, zz = R.top_label(p, y)
  want = R.smooth_ece_sum(f, zz, 0.05)
  got = float(metrics.smooth_ece(np.tile(p, (500, 1)), np.tile(y, 500), 0.05))
  assert abs(got - want) < 1e-6 * want, (got, want)


@pytest.mark.parametrize("n", [1500])
def test_smooth_ece_of_a_calibrated_predictor_tends_to_zero(n):
  key = jax.random.key(0)
  kp, ky = jax.random.split(key)
  vals = []
  for size in (n, 8 * n):
    p = jax.random.dirichlet(kp, jnp.ones(3), (size,))
    y = jax.random.categorical(ky, jnp.log(p))
    vals.append(float(metrics.smooth_ece(p, y)))
  # noise at the fixed point sigma = smECE_sigma ~ (n sigma)^{-1/2}: smECE ~ n^{-1/3},
  # a factor 2 for 8x the samples
  assert vals[1] < vals[0] / 1.6
  assert vals[1] < 0.015
  over = jax.nn.softmax(2.0 * jnp.log(p))  # the same data, over-confident
  assert float(metrics.smooth_ece(over, y)) > 5 * vals[1]


# ----------------------------------------------------------------------- SKCE


@pytest.mark.parametrize("estimator", ["unbiased", "biased", "block"])
def test_skce_matches_float64_loop(estimator):
  p, y = P_SMALL[:41], Y_SMALL[:41]  # odd n: the block estimator drops a sample
  want = R.skce(p, y, 0.7, estimator)
  got = float(
    metrics.skce(p, y, metrics.LaplacianKernel(0.7), estimator, row_block=16)
  )  # 3 row blocks, padded
  assert got == pytest.approx(want, abs=2e-7, rel=1e-5)


@pytest.mark.parametrize("row_block", [1, 2, 7, None])
def test_skce_does_not_depend_on_the_tile_size(row_block):
  """``row_block`` is memory tiling: the value is the float64 one whatever it is. A plain
  float32 running sum of the ~nb^2/2 tile sums drifted with it (a review helper's
  invariance check: 1e-3 relative at row_block=1 on CIFAR-100, n = 3,000)."""
  z, y = load_cifar("cifar100_densenet121")
  z, y = z[:1000], y[:1000]
  p = np.asarray(jax.nn.softmax(jnp.asarray(z, jnp.float32), axis=-1))
  p64 = p.astype(np.float64)
  e = np.eye(p.shape[1])[y] - p64
  h = np.exp(-np.sqrt(((p64[:, None, :] - p64[None, :, :]) ** 2).sum(-1)) / 0.7) * (e @ e.T)
  n = len(y)
  want = {"unbiased": (h.sum() - np.trace(h)) / (n * (n - 1)), "biased": h.sum() / n**2}
  for est, w in want.items():
    got = float(metrics.skce(p, y, metrics.LaplacianKernel(0.7), est, row_block=row_block))
    assert got == pytest.approx(w, rel=2e-6), est


def test_skce_block_sizes_gaussian_kernel_and_float64():
  p, y = P_SMALL, Y_SMALL
  for b in (3, 7, np.int64(5)):  # numpy ints are ints (np.int64 was refused)
    want = R.skce(p, y, 0.5, "block", block_size=int(b), kernel="gaussian")
    got = float(metrics.skce(p, y, metrics.GaussianKernel(0.5), "block", block_size=b))
    assert got == pytest.approx(want, abs=2e-7, rel=1e-5)
  rb = metrics.skce(p, y, row_block=np.int64(4))
  assert float(rb) == pytest.approx(float(metrics.skce(p, y, row_block=4)), abs=1e-7)
  s = metrics.smooth_reliability(p, y, 0.1, num_points=np.int64(7))
  assert s.mesh.shape == (7,)
  with jax.enable_x64(True):
    p64 = jnp.asarray(P_SMALL, jnp.float64)
    got = float(metrics.skce(p64, Y_SMALL, metrics.LaplacianKernel(0.3)))
  assert got == pytest.approx(R.skce(P_SMALL.astype(np.float64), Y_SMALL, 0.3), rel=1e-12)


def test_skce_of_confident_rows_is_the_inner_product_of_their_residuals():
  # 1[y_i = y_j] - p_j[y_i] - p_i[y_j] + <p_i, p_j> cancelled terms near 1: 0 for 9.1e-13
  c = np.float32(1 - 2**-20)
  p = np.array([[c, 1 - c, 0], [c, 0, 1 - c]], np.float32)
  want = R.skce(p.astype(np.float64), np.array([0, 0]), 1.0, "unbiased")
  assert want > 0
  got = float(metrics.skce(p, np.array([0, 0]), metrics.LaplacianKernel(1.0), "unbiased"))
  assert got == pytest.approx(want, rel=1e-5, abs=0)  # approx's default abs is 1e-12


def test_skce_jit_vmap_and_custom_kernel():
  bws = jnp.array([0.3, 1.0, 0.0, -1.0, jnp.inf, 1e-30])  # traced bad bandwidths: NaN
  out = jax.vmap(lambda b: metrics.skce(P_SMALL, Y_SMALL, metrics.LaplacianKernel(b)))(bws)
  loop = [float(metrics.skce(P_SMALL, Y_SMALL, metrics.LaplacianKernel(float(b)))) for b in bws[:2]]
  np.testing.assert_allclose(out[:2], loop, rtol=1e-6, atol=1e-9)
  assert np.all(np.isnan(out[2:5])) and out[5] == 0.0  # 1e-30: the limit 1[p = p'], no ties
  jitted = jax.jit(lambda p, y: metrics.skce(p, y))(P_SMALL, Y_SMALL)
  assert float(jitted) == pytest.approx(loop[1], rel=1e-6)

  def lap(d):
    return jnp.exp(-jnp.sqrt(d) / 0.3)

  assert float(metrics.skce(P_SMALL, Y_SMALL, lap)) == pytest.approx(loop[0], rel=1e-6)
  pb, yb = np.stack([P_SMALL, P_SMALL[::-1]]), np.stack([Y_SMALL, Y_SMALL])
  out = jax.vmap(lambda a, b: metrics.skce(a, b, estimator="block"))(pb, yb)
  np.testing.assert_allclose(
    out, [float(metrics.skce(a, b, estimator="block")) for a, b in zip(pb, yb)], rtol=1e-6
  )


def test_skce_unbiased_is_centred_on_zero_for_a_calibrated_predictor():
  # 400 data sets of n = 60 with labels drawn from the predictions: the mean of
  # the unbiased estimate is 0 within 3 standard errors; the biased one is not.
  reps, n = 400, 60
  kp, ky = jax.random.split(jax.random.key(1))
  p = jax.random.dirichlet(kp, jnp.ones(3), (reps, n))
  y = jax.random.categorical(ky, jnp.log(p))
  both = jax.vmap(
    lambda a, b: jnp.stack([metrics.skce(a, b), metrics.skce(a, b, estimator="biased")])
  )(p, y)
  u, b = np.asarray(both[:, 0], np.float64), np.asarray(both[:, 1], np.float64)
  se = u.std(ddof=1) / np.sqrt(reps)
  assert abs(u.mean()) < 3 * se, (u.mean(), se)
  assert b.mean() > 10 * b.std(ddof=1) / np.sqrt(reps)


def test_skce_is_positive_for_a_miscalibrated_predictor():
  p, y = _data(3, 300, 3, alpha=0.5)  # labels drawn from p: p is calibrated
  over = np.asarray(jax.nn.softmax(3.0 * jnp.log(p)))
  assert float(metrics.skce(over, y)) > 5 * abs(float(metrics.skce(p, y)))


# ----------------------------------------------------------------------- MMCE


def test_mmce_matches_double_loop_with_ties():
  p = P_MID.copy()
  p[:50] = p[50:100]  # exact ties in the confidences
  for w in (0.4, 0.1):
    got = float(metrics.mmce(p, Y_MID, w))
    assert got == pytest.approx(R.mmce(p, Y_MID, w), rel=1e-5)


def _mmce_definition(p, y, width):
  """Kumar et al. (2018), Eq. 2, in float64: all n^2 pairs at once."""
  p = np.asarray(p, np.float64)
  c = p.max(1)
  r = (p.argmax(1) == y) - c
  k = np.exp(-np.abs(c[:, None] - c[None, :]) / width)
  return np.sqrt(max(r @ k @ r / len(c) ** 2, 0.0))


def test_mmce_small_bandwidths_match_all_pairs():
  # 0.001 used to give NaN (the first block's carry term: exp(+big) * 0); 1e-30
  # is the limit kernel 1[c_i = c_j] (ties only), reached exactly
  for w in (0.005, 0.001, 1e-30):
    got = float(metrics.mmce(P_MID, Y_MID, w))
    assert got == pytest.approx(_mmce_definition(P_MID, Y_MID, w), rel=1e-5), w


def test_mmce_jit_vmap():
  pb, yb = np.stack([P_SMALL, P_SMALL[::-1]]), np.stack([Y_SMALL, Y_SMALL])
  out = jax.vmap(metrics.mmce)(pb, yb)
  np.testing.assert_allclose(out, [R.mmce(a, b) for a, b in zip(pb, yb)], rtol=1e-5)
  ws = jnp.array([0.2, 0.4, 0.0, -1.0, jnp.inf, jnp.nan])  # traced bad widths: NaN
  out = jax.jit(jax.vmap(lambda w: metrics.mmce(P_SMALL, Y_SMALL, w)))(ws)
  np.testing.assert_allclose(out[:2], [R.mmce(P_SMALL, Y_SMALL, float(w)) for w in ws[:2]], 1e-5)
  assert np.all(np.isnan(out[2:]))


def _mmce_sorted(p, y, width=0.4):
  """Kumar et al. (2018), Eq. 2, in float64 in O(n log n), for large n.

  On ascending confidences ``exp(-|c_i - c_j| / w)`` splits into
  ``exp(-c_i / w) exp(c_j / w)`` for ``j <= i`` and ``exp(c_i / w) exp(-c_j / w)``
  for ``j > i``: two cumulative sums (no overflow for ``c`` in [0, 1], w = 0.4).
  """
  p = np.asarray(p, np.float64)
  c = p.max(1)
  r = (p.argmax(1) == y) - c
  order = np.argsort(c, kind="stable")
  c, r = c[order], r[order]
  up, down = np.exp(c / width), np.exp(-c / width)
  left = np.cumsum(r * up)  # Σ_{j <= i} r_j exp(c_j / w)
  right = np.cumsum((r * down)[::-1])[::-1] - r * down  # Σ_{j > i} r_j exp(-c_j / w)
  return np.sqrt(max(np.sum(r * (down * left + up * right)) / len(c) ** 2, 0.0))


def test_mmce_float32_stays_accurate_at_a_million_samples():
  # the carry across blocks was a chain of n/64 float32 products exp(-a gap)
  # rounded near 1: relative error growing with n, 7.7e-5 (calibrated) and
  # 2.5e-5 (biased) at n = 2^20, 3e-4 at 1e7; now about 1e-7
  n = 2**20
  rng = np.random.default_rng(0)
  s = rng.beta(5.0, 2.0, n)
  for bias in (0.0, 0.05):
    y = (rng.random(n) < np.clip(s - bias, 0.0, 1.0)).astype(np.int32)
    p = np.stack([1.0 - s, s], axis=1).astype(np.float32)
    got = float(metrics.mmce(p, y))
    assert got == pytest.approx(_mmce_sorted(p, y), rel=1e-6), bias


def test_mmce_temporaries_are_linear_and_small():
  # the (n/64, 64, 64) tiles of kernel values were built whole, twice: 544
  # bytes of temporaries per sample (18 GB at n = 2^25); now 17 (XLA:CPU)
  n = 2**20
  shapes = jax.ShapeDtypeStruct((n, 2), jnp.float32), jax.ShapeDtypeStruct((n,), jnp.int32)
  mem = jax.jit(lambda p, y: metrics.mmce(p, y)).lower(*shapes).compile().memory_analysis()
  if mem is None:
    pytest.skip("no memory analysis on this backend")
  assert mem.temp_size_in_bytes < 64 * n, mem.temp_size_in_bytes / n


# ---------------------------------------------------------------- debiased CE


@pytest.mark.parametrize("mode", ["top_label", "marginal"])
def test_debiased_ce_matches_loop(mode):
  p = P_MID.copy()
  p[:40] = p[40:80]  # ties across a bin cut
  ms = np.array([1, 2, 7, 15, 40])
  got = metrics.debiased_ce(p, Y_MID, ms, mode)
  want = [R.debiased_ce(p, Y_MID, int(m), mode) for m in ms]
  np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-7)
  sq = float(metrics.debiased_ce(p, Y_MID, 15, mode, squared=True))
  if mode == "top_label":
    c, z = R.top_label(p, Y_MID)
    assert sq == pytest.approx(R.debiased_sq(p.max(1), z.astype(np.float32), 15), rel=2e-5)
  jitted = jax.jit(lambda a, b: metrics.debiased_ce(a, b, 15, mode))(p, Y_MID)
  assert float(jitted) == pytest.approx(want[3], rel=2e-5)


def test_debiased_ce_more_bins_than_samples_and_vmap():
  # every bin of one sample: no estimate. An exact 0 had come back for num_bins >= n on
  # distinct scores, also for a model 97 % confident and always wrong (review helper)
  p, y = P_SMALL[:10], Y_SMALL[:10]
  assert len(np.unique(p.max(1))) == 10
  for m in (10, 50, 2**63):
    with pytest.raises(ValueError, match="no bin holds two samples"):
      metrics.debiased_ce(p, y, m)
  assert np.isnan(jax.jit(lambda a, b: metrics.debiased_ce(a, b, 50, "marginal"))(p, y))
  with pytest.raises(ValueError, match="no bin holds two samples"):  # as eager (the reread)
    jaxcal.checked(jax.jit(lambda a, b: metrics.debiased_ce(a, b, 50)))(p, y)
  bad = p.copy()
  bad[0, 0] = np.nan  # bad values are named first
  with pytest.raises(ValueError, match="non-finite"):
    jaxcal.checked(jax.jit(lambda a, b: metrics.debiased_ce(a, b, 50)))(bad, y)
  jaxcal.checked(jax.jit(lambda a, b: metrics.debiased_ce(a, b, 5)))(p, y)  # no error
  tied = np.repeat(p[:5], 2, axis=0)  # discrete: num_bins = n is one bin per distinct value
  assert float(metrics.debiased_ce(tied, y, 10)) == pytest.approx(
    R.debiased_ce(tied, y, 10), rel=1e-5, abs=1e-7
  )
  assert float(metrics.debiased_ce(tied, y, 10)) == pytest.approx(
    float(metrics.debiased_ce(tied, y, 5)), rel=1e-6
  )
  pb, yb = np.stack([P_SMALL, P_SMALL[::-1]]), np.stack([Y_SMALL, Y_SMALL])
  out = jax.vmap(lambda a, b: metrics.debiased_ce(a, b, 5))(pb, yb)
  np.testing.assert_allclose(out, [R.debiased_ce(a, b, 5) for a, b in zip(pb, yb)], rtol=2e-5)


def test_debiased_ce_bins_of_two_samples():
  # n = 10 in m = 5 equal-mass bins: every bin holds exactly two samples, the
  # smallest that gets the variance correction ybar (1 - ybar) / (n_b - 1).
  p, y = P_SMALL[:10], Y_SMALL[:10]
  _, z = R.top_label(p, y)
  assert np.bincount(R._midpoint_bins(p.max(1), 5)).tolist() == [2] * 5
  sq = float(metrics.debiased_ce(p, y, 5, squared=True))
  assert sq == pytest.approx(R.debiased_sq(p.max(1), z.astype(np.float32), 5), rel=1e-5, abs=1e-7)
  assert sq != 0.0
  per_class = [R.debiased_sq(p[:, k], (y == k).astype(np.float32), 5) for k in range(p.shape[1])]
  got = float(metrics.debiased_ce(p, y, 5, "marginal", squared=True))
  assert got == pytest.approx(float(np.mean(per_class)), rel=1e-5, abs=1e-7)


# ------------------------------------------------------------------------ KS


def test_ks_matches_loop_top_label_and_classwise():
  p = P_MID.copy()
  p[:30] = p[30:60]
  c, z = R.top_label(p, Y_MID)
  assert float(metrics.ks_ce(p, Y_MID)) == pytest.approx(R.ks(p.max(1), z), rel=1e-5, abs=1e-7)
  w = np.arange(1.0, 6.0) / 15.0
  want = sum(w[k] * R.ks(p[:, k], Y_MID == k) for k in range(5))
  got = float(metrics.ks_ce(p, Y_MID, "classwise", class_weights=w))
  assert got == pytest.approx(want, rel=1e-5, abs=1e-7)
  pb, yb = np.stack([p, p[::-1]]), np.stack([Y_MID, Y_MID])
  out = jax.jit(jax.vmap(metrics.ks_ce))(pb, yb)
  np.testing.assert_allclose(out, [float(metrics.ks_ce(a, b)) for a, b in zip(pb, yb)], 1e-6)


def test_ks_of_ties_does_not_depend_on_order_inside_them():
  p = np.array([[0.6, 0.4]] * 4 + [[0.2, 0.8]] * 2, np.float32)
  y = np.array([0, 1, 0, 1, 1, 0])
  perm = np.array([1, 0, 3, 2, 5, 4])
  assert float(metrics.ks_ce(p, y)) == pytest.approx(float(metrics.ks_ce(p[perm], y[perm])), 1e-6)


def test_mmce_and_classwise_ks_from_logits_match_the_float64_softmax():
  # from_logits=True is the softmax of the logits (row shifts do not matter) in
  # the programs of MMCE and class-wise KS too, against their float64 loops on
  # numpy's float64 softmax.
  z = np.log(P_SMALL) + np.arange(60, dtype=np.float32)[:, None] / 10
  e = np.exp(z.astype(np.float64) - z.max(axis=1, keepdims=True))
  p = e / e.sum(axis=1, keepdims=True)
  y = Y_SMALL
  tol = {"rel": 1e-5, "abs": 1e-7}
  assert float(metrics.mmce(z, y, from_logits=True)) == pytest.approx(R.mmce(p, y), **tol)
  want = np.mean([R.ks(p[:, k], y == k) for k in range(4)])
  got = float(metrics.ks_ce(z, y, "classwise", from_logits=True))
  assert got == pytest.approx(want, **tol)


# ---------------------------------------------------------------- norms


@pytest.mark.parametrize("norm", ["l1", "l2", "max"])
@pytest.mark.parametrize("binning", ["fixed", "quantile"])
def test_binned_norms_match_loop(norm, binning):
  p, y = P_MID, Y_MID
  ms = np.array([1, 4, 15, 30])
  got = metrics.conf_ece(p, y, ms, binning, norm=norm)
  c = p.max(1)
  want = [R.binned_norm_conf(p, y, R0.bins(c, int(m), binning), int(m), norm) for m in ms]
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
  w = np.linspace(0.1, 0.3, 5)
  got = metrics.classwise_ece(p, y, ms, binning, w, norm=norm)
  want = [
    R.binned_norm_classwise(
      p, y, [R0.bins(p[:, k], int(m), binning) for k in range(5)], int(m), norm, w
    )
    for m in ms
  ]
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
  "call, exc, fragment",
  [
    (lambda: metrics.smooth_ece(P_SMALL, Y_SMALL, -0.1), ValueError, "bandwidth"),
    (lambda: metrics.smooth_ece(P_SMALL, Y_SMALL, np.nan), ValueError, "positive and finite"),
    (lambda: metrics.smooth_ece(P_SMALL, Y_SMALL, mode="top"), ValueError, "mode"),
    (lambda: metrics.smooth_ece(P_SMALL, Y_SMALL + 10), ValueError, "labels"),
    (lambda: metrics.smooth_ece(P_SMALL * 2, Y_SMALL), ValueError, "probs"),
    (
      lambda: metrics.smooth_ece(P_SMALL, Y_SMALL, 0.01, min_bandwidth=0.1),
      ValueError,
      "min_bandwidth",
    ),
    (lambda: metrics.skce(P_SMALL, Y_SMALL, estimator="fast"), ValueError, "estimator"),
    (lambda: metrics.skce(P_SMALL, Y_SMALL, estimator="block", block_size=1), ValueError, "block"),
    (
      lambda: metrics.skce(
        P_SMALL, Y_SMALL, estimator="block", block_size=4, where=np.arange(len(Y_SMALL)) < 3
      ),
      ValueError,
      r"block_size must be an int in \[2, n = 3 selected by where\]",
    ),
    (lambda: metrics.skce(P_SMALL[:1], Y_SMALL[:1]), ValueError, "at least 2"),
    (lambda: metrics.smooth_ece(P_SMALL, Y_SMALL, True), ValueError, "got True"),
    (lambda: metrics.smooth_ece(P_SMALL, Y_SMALL, "a"), ValueError, "bandwidth must be None or"),
    (lambda: metrics.smooth_ece(P_SMALL, Y_SMALL, 1e-30), ValueError, "smallest supported"),
    (lambda: metrics.smooth_ece(P_SMALL, Y_SMALL, 5e-5), ValueError, "exceed 100,001 points"),
    (
      lambda: metrics.smooth_ece(P_SMALL, Y_SMALL, min_bandwidth=np.nan),
      ValueError,
      "min_bandwidth must be a finite number",
    ),
    (
      lambda: metrics.smooth_ece(P_SMALL, Y_SMALL, min_bandwidth=-1.0),
      ValueError,
      "min_bandwidth must be > 0",
    ),
    (
      lambda: metrics.smooth_ece(P_SMALL, Y_SMALL, 0.1, min_bandwidth=1e-5),
      ValueError,
      "min_bandwidth = 1e-05 is below the smallest supported",
    ),
    (lambda: metrics.smooth_reliability(P_SMALL, Y_SMALL, True), ValueError, "got True"),
    (lambda: metrics.smooth_reliability(P_SMALL, Y_SMALL, 1e-7), ValueError, "smallest"),
    (lambda: metrics.skce(P_SMALL, Y_SMALL, kernel="rbf"), TypeError, "kernel"),
    (
      lambda: metrics.skce(P_SMALL, Y_SMALL, kernel=metrics.LaplacianKernel),  # the class
      TypeError,
      r"kernel must be a kernel instance, e.g. LaplacianKernel\(1.0\), got the class",
    ),
    (  # checked whatever the estimator: it was silently unused
      lambda: metrics.skce(P_SMALL, Y_SMALL, block_size=0),
      ValueError,
      r"block_size must be an int >= 2, got 0",
    ),
    (
      lambda: metrics.smooth_reliability(P_SMALL, Y_SMALL, 0.1, num_points=10**9),
      ValueError,
      r"num_points must be <= 1,?000,?000.*got 1,?000,?000,?000",
    ),
    (
      lambda: metrics.smooth_reliability(P_SMALL, Y_SMALL, 0.1, num_points=2**40),
      ValueError,
      r"num_points must be <= 1,?000,?000",
    ),
    (
      lambda: metrics.skce(P_SMALL, Y_SMALL, metrics.LaplacianKernel(0.0)),
      ValueError,
      r"LaplacianKernel.bandwidth must be > 0, got 0.0",
    ),
    (
      lambda: metrics.skce(P_SMALL, Y_SMALL, metrics.GaussianKernel(-1.0)),
      ValueError,
      r"GaussianKernel.bandwidth must be > 0",
    ),
    (
      lambda: metrics.skce(P_SMALL, Y_SMALL, metrics.LaplacianKernel(np.inf)),
      ValueError,
      "LaplacianKernel.bandwidth must be a finite number",
    ),
    (
      lambda: metrics.skce(P_SMALL, Y_SMALL, metrics.GaussianKernel(np.nan)),
      ValueError,
      "GaussianKernel.bandwidth must be a finite number",
    ),
    (
      lambda: metrics.skce(P_SMALL, Y_SMALL, metrics.LaplacianKernel(True)),
      ValueError,
      "LaplacianKernel.bandwidth must be a finite number > 0, got True",
    ),
    (
      lambda: metrics.skce(P_SMALL, Y_SMALL, metrics.GaussianKernel("a")),
      ValueError,
      "GaussianKernel.bandwidth must be a finite number > 0, got 'a'",
    ),
    (
      lambda: metrics.skce(P_SMALL, Y_SMALL, metrics.GaussianKernel(None)),
      ValueError,
      "GaussianKernel.bandwidth must be a finite number > 0, got None",
    ),
    (
      lambda: metrics.skce(P_SMALL, Y_SMALL, metrics.GaussianKernel(np.ones((2, 2)))),
      ValueError,
      r"GaussianKernel.bandwidth must be a scalar, got shape \(2, 2\)",
    ),
    (
      lambda: metrics.skce(P_SMALL, Y_SMALL, metrics.GaussianKernel(1e-30)),
      ValueError,
      "below the smallest supported bandwidth 1.08e-19",
    ),
    (lambda: metrics.mmce(P_SMALL, Y_SMALL, 0.0), ValueError, "bandwidth must be > 0"),
    (lambda: metrics.mmce(P_SMALL, Y_SMALL, np.inf), ValueError, "bandwidth must be a finite"),
    (lambda: metrics.mmce(P_SMALL, Y_SMALL, True), ValueError, "got True"),
    (lambda: metrics.mmce(P_SMALL, Y_SMALL, 1e-40), ValueError, "smallest supported bandwidth"),
    # inf in float32: a numpy overflow warning and an infinite bandwidth before
    (lambda: metrics.mmce(P_SMALL, Y_SMALL, 1e39), ValueError, r"1e\+39 is beyond float32's"),
    (
      lambda: metrics.skce(P_SMALL, Y_SMALL, metrics.GaussianKernel(1e39)),
      ValueError,
      r"GaussianKernel.bandwidth = 1e\+39 is beyond float32's range",
    ),
    (lambda: metrics.mmce(P_SMALL, Y_SMALL, np.ones(2)), ValueError, "must be a scalar"),
    (lambda: metrics.debiased_ce(P_SMALL, Y_SMALL, 0), ValueError, "num_bins"),
    (lambda: metrics.debiased_ce(P_SMALL, Y_SMALL, mode="top"), ValueError, "mode"),
    (lambda: metrics.ks_ce(P_SMALL, Y_SMALL, "marginal"), ValueError, "mode"),
    (lambda: metrics.conf_ece(P_SMALL, Y_SMALL, norm="l3"), ValueError, "norm"),
    (lambda: metrics.classwise_ece(P_SMALL, Y_SMALL, norm="rms"), ValueError, "norm"),
    (lambda: metrics.smooth_reliability(P_SMALL, Y_SMALL, num_points=1), ValueError, "num_points"),
  ],
)
def test_bad_inputs(call, exc, fragment):
  with pytest.raises(exc, match=fragment):
    call()


def test_inputs_not_modified_and_single_class_edge_cases():
  p, y = P_SMALL.copy(), Y_SMALL.copy()
  for f in (metrics.smooth_ece, metrics.skce, metrics.mmce, metrics.debiased_ce, metrics.ks_ce):
    f(p, y)
  np.testing.assert_array_equal(p, P_SMALL)
  np.testing.assert_array_equal(y, Y_SMALL)
  # a perfectly sharp, always-right predictor has no calibration error
  # (the shape of P_SMALL: the compilations above are reused)
  sharp = np.eye(4, dtype=np.float32)[np.arange(60) % 4]
  lab = np.arange(60) % 4
  for f in (metrics.smooth_ece, metrics.mmce, metrics.debiased_ce, metrics.ks_ce):
    assert float(f(sharp, lab)) == pytest.approx(0.0, abs=1e-6), f.__name__
  assert float(metrics.skce(sharp, lab)) == pytest.approx(0.0, abs=1e-7)


def test_smooth_reliability_curve():
  s = metrics.smooth_reliability(P_MID, Y_MID)
  assert s.mesh.shape == s.accuracy.shape == s.density.shape == (200,)
  assert float(s.smooth_ece) == pytest.approx(float(metrics.smooth_ece(P_MID, Y_MID)), rel=1e-6)
  # the curves against the float64 reference (the docstring's formulas on
  # the documented grid), at the automatic bandwidth (the reference's own
  # bisection finds the same one) and at a given one: direct sums, so both
  # are close everywhere, also where the density is small (the FFT's
  # round-off, ~1e-7 of the peak, allowed only a product accuracy x density
  # there). Measured: density within 1.4e-5 relative, accuracy within 2.3e-6.
  f, z = R.top_label(P_MID, Y_MID)
  assert float(s.bandwidth) == R.smooth_ece_fixed_point(f, z)
  for got in (s, metrics.smooth_reliability(P_MID, Y_MID, 0.05)):
    sig = float(got.bandwidth)
    t, acc, dens = R.smooth_reliability(f, z, sig)
    np.testing.assert_allclose(got.mesh, t, rtol=0, atol=1e-7)
    assert dens.min() < 0.01 * dens.max(), sig  # the sparse ends are compared too
    np.testing.assert_allclose(got.density, dens, rtol=5e-5, atol=1e-30)
    np.testing.assert_allclose(got.accuracy, acc, rtol=0, atol=1e-5)
    assert float(got.smooth_ece) == pytest.approx(R.smooth_ece_sum(f, z, sig), rel=2e-6)
    # the density integrates to 1 over [0, 1] (reflected kernel): 0.999998 by the trapezoid rule
    area = float(jnp.sum((got.density[1:] + got.density[:-1]) / 2) / 199)
    assert area == pytest.approx(1.0, abs=1e-4)
    assert float(jnp.min(got.accuracy)) >= 0.0 and float(jnp.max(got.accuracy)) <= 1.0


def test_smooth_reliability_reads_no_round_off_where_no_confidence_lies():
  """CIFAR-10 test set: 20 of the 200 points at confidence <= 0.14 (no sample there) read
  accuracy 1.0, a ratio of the FFT's float32 round-off; the float64 formula (relplot's)
  gives ~0 there. Zeroing sums below the round-off left 2.5e-3; direct sums, 2e-7."""
  x, y = data.default_predictions("test")
  p = np.asarray(jax.nn.softmax(jnp.asarray(x)))
  s = metrics.smooth_reliability(p, y)
  f, z = R.top_label(p, y)
  _, acc, _ = R.smooth_reliability(f, z, float(s.bandwidth))
  np.testing.assert_allclose(np.asarray(s.accuracy), acc, rtol=0, atol=1e-5)


def test_smooth_reliability_between_two_clusters_is_relplots_ratio_not_zero():
  """Calibrated confidences in two clusters (0.65, 0.95): between and beside them the
  smoothed sums lie below the FFT's round-off of the peak, and zeroing them read accuracy
  0 at 36 of 400 points where the float64 formula (relplot's) gives up to 0.93."""
  rng = np.random.default_rng(19)
  n = 10_000
  c = rng.choice([0.65, 0.95], n) + 0.01 * rng.standard_normal(n)
  c = np.clip(c, 0.5, 0.999)
  y = (rng.random(n) >= c).astype(np.int32)  # label 0 (the top class) with probability c
  p = np.stack([c, 1.0 - c], axis=1).astype(np.float32)
  f, z = R.top_label(p, y)
  s = metrics.smooth_reliability(p, y, 0.02, num_points=400)
  _, acc, dens = R.smooth_reliability(f, z, 0.02, 400)
  gap = (dens < 1e-6 * dens.max()) & (acc > 0.1)  # far below the round-off, well defined
  assert gap.sum() >= 10
  np.testing.assert_allclose(np.asarray(s.accuracy), acc, rtol=0, atol=1e-5)


def test_smooth_ece_bandwidth_and_smooth_reliability_jit_equal_eager():
  # one compiled program for the three calls (on P_MID, whose eager programs
  # test_smooth_reliability_curve has compiled)
  def calls(p, y):
    return (
      metrics.smooth_ece_bandwidth(p, y),
      metrics.smooth_reliability(p, y),
      metrics.smooth_reliability(p, y, 0.05),
    )

  jitted = jax.jit(calls)(P_MID, Y_MID)
  eager = calls(P_MID, Y_MID)
  assert float(jitted[0]) == float(eager[0])  # a multiple of 1/1024: exact
  for got, want in zip(jitted[1:], eager[1:]):
    for name in ("mesh", "bandwidth", "smooth_ece"):
      np.testing.assert_allclose(getattr(got, name), getattr(want, name), rtol=1e-6, err_msg=name)
    # the density's FFT round-off (2e-7 with a peak of 3) differs between the programs
    np.testing.assert_allclose(got.density, want.density, rtol=1e-6, atol=1e-6)
    # the accuracy where there is density (elsewhere: a ratio of float32
    # round-off, which the two programs round differently; at 2 % of the
    # peak density that round-off is 3e-6)
    dense = np.asarray(want.density) >= 0.02 * float(jnp.max(want.density))
    assert dense.sum() > 100
    np.testing.assert_allclose(
      np.asarray(got.accuracy)[dense], np.asarray(want.accuracy)[dense], rtol=1e-5, atol=1e-5
    )


def test_smooth_reliability_diagram_draws():
  from jaxcal import plots

  fig = plots.smooth_reliability_diagram(P_MID, Y_MID, title="t")
  ax = fig.axes[0]
  assert ax.get_title() == "t" and "smECE" in ax.texts[0].get_text()
  fig2 = plots.smooth_reliability_diagram(P_MID, Y_MID, 0.1, ax=ax)
  assert fig2 is fig
  import matplotlib.pyplot as plt

  plt.close("all")


def test_cores_treat_masked_samples_as_absent():
  # the `where` contract: a masked-out sample is exactly as if it were absent
  from jaxcal._src import debiased as D
  from jaxcal._src import kernel_ce as KC
  from jaxcal._src import ks as K
  from jaxcal._src import smooth_ece as S

  p, y = jnp.asarray(P_SMALL), jnp.asarray(Y_SMALL)
  keep = np.ones(60, bool)
  keep[[3, 10, 11, 40, 59]] = False
  w = jnp.asarray(keep)
  pk, yk = p[keep], y[keep]
  sizes = S._sizes(S.SMOOTH_ECE_MIN_AUTO_BANDWIDTH)
  a = S._auto_core(p, y, w, mode="top_label", sizes=sizes)
  b = S._auto_core(pk, yk, mode="top_label", sizes=sizes)
  np.testing.assert_allclose(a[0], b[0], rtol=1e-5)
  np.testing.assert_array_equal(a[1], b[1])
  sig = jnp.array([0.05, 0.2])
  np.testing.assert_allclose(
    S._fixed_core(p, y, sig, w, mode="classwise", sizes=S._sizes(0.05)),
    S._fixed_core(pk, yk, sig, mode="classwise", sizes=S._sizes(0.05)),
    rtol=1e-5,
  )
  cw = jnp.full((4,), 0.25)
  for mode in ("top_label", "classwise"):
    assert float(K._ks_core(p, y, cw, w, mode=mode)) == pytest.approx(
      float(K._ks_core(pk, yk, cw, mode=mode)), rel=1e-6
    )
  assert float(KC._mmce_core(p, y, 0.4, w)) == pytest.approx(
    float(KC._mmce_core(pk, yk, 0.4)), rel=1e-5
  )
  for est, kw in (("unbiased", {}), ("block", {"block_size": 3})):
    kw = {"estimator": est, "block_size": kw.get("block_size", 2), "row_block": 16}
    a = KC._skce_dynamic(p, y, metrics.LaplacianKernel(0.5), w, **kw)
    b = KC._skce_dynamic(pk, yk, metrics.LaplacianKernel(0.5), **kw)
    assert float(a) == pytest.approx(float(b), rel=1e-5, abs=1e-8), est
  for mode in ("top_label", "marginal"):
    f = jax.jit(
      lambda a, b, m, ww: D._debiased_core(a, b, m, ww, max_bins=8, mode=mode, squared=True)
    )
    for m in (3, 8):
      assert float(f(p, y, m, w)) == pytest.approx(float(f(pk, yk, m, None)), rel=1e-5, abs=1e-8)


@pytest.mark.parametrize(
  "name, kw",
  [
    ("smooth_ece", {}),
    ("smooth_ece", {"bandwidth": 0.1, "mode": "classwise"}),
    ("skce", {}),
    ("skce", {"estimator": "block", "block_size": 3}),
    ("mmce", {}),
    ("debiased_ce", {"num_bins": 4}),
    ("ks_ce", {"mode": "classwise"}),
  ],
)
def test_public_where_equals_the_subset_and_ignores_masked_garbage(name, kw):
  # the public `where=`: a padded data set whose padding is masked (and holds
  # values that would be refused: NaN rows, out-of-range labels) gives the
  # subset's number, eagerly and under jit; an invalid kept row is refused
  # eagerly and gives NaN under jit.
  fn = getattr(metrics, name)
  keep = np.ones(60, bool)
  keep[[3, 10, 11, 40, 59]] = False
  p = P_SMALL.copy()
  y = Y_SMALL.copy()
  p[~keep] = np.nan
  y[~keep] = 99
  want = float(fn(P_SMALL[keep], Y_SMALL[keep], **kw))
  got = float(fn(p, y, where=keep, **kw))
  assert got == pytest.approx(want, rel=1e-5, abs=1e-8)
  jitted = jax.jit(lambda a, b, w: fn(a, b, where=w, **kw))
  assert float(jitted(p, y, keep)) == pytest.approx(want, rel=1e-5, abs=1e-8)
  bad = keep.copy()
  bad[3] = True  # a NaN row selected
  with pytest.raises(ValueError, match=r"labels\[3\] = 99|probs"):
    fn(p, y, where=bad, **kw)
  assert np.isnan(float(jitted(p, y, bad)))


def test_skce_takes_an_unhashable_callable_kernel():
  """A dataclass kernel (``__eq__`` without ``__hash__``) is a kernel like any callable
  (it used to crash inside ``jit``'s static-argument hashing)."""
  import dataclasses

  @dataclasses.dataclass
  class Gauss:
    bandwidth: float = 0.3

    def __call__(self, s):
      return jnp.exp(-s / (2 * self.bandwidth**2))

  p = np.array([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7], [0.55, 0.45]], np.float32)
  y = np.array([0, 1, 1, 0])
  want = float(metrics.skce(p, y, metrics.GaussianKernel(0.3)))
  k = Gauss(0.3)
  assert float(metrics.skce(p, y, k)) == pytest.approx(want, rel=1e-6)
  assert float(metrics.skce(p, y, k)) == pytest.approx(want, rel=1e-6)  # cached program
  assert float(metrics.skce(p, y, Gauss(0.5))) != pytest.approx(want, rel=1e-3)  # not confused


def test_debiased_ce_bin_counts_above_n_act_as_n():
  """Any count above n gives the value at n (the docstring's rule), without per-bin arrays of
  that size: 2**24 + 1 used to raise, 10**7 allocated 400 MB for 100 samples."""
  rng = np.random.default_rng(0)
  p = np.repeat(rng.dirichlet(np.ones(3), 50).astype(np.float32), 2, axis=0)  # tied pairs:
  y = rng.integers(0, 3, 100)  # at n bins each bin holds two samples (distinct: no estimate)
  for mode in ("top_label", "marginal"):
    at_n = float(metrics.debiased_ce(p, y, 100, mode, squared=True))
    assert np.isfinite(at_n) and at_n != 0.0
    for m in (101, 10**7, 2**24 + 1, 2**40):
      assert float(metrics.debiased_ce(p, y, m, mode, squared=True)) == at_n, (mode, m)
    got = np.asarray(metrics.debiased_ce(p, y, np.array([5, 10**8]), mode, squared=True))
    np.testing.assert_allclose(  # one compiled call for both counts: float32 rounding
      got, [float(metrics.debiased_ce(p, y, 5, mode, squared=True)), at_n], rtol=1e-6
    )
  with pytest.raises(ValueError, match="num_bins must be >= 1, got 0"):
    metrics.debiased_ce(p, y, 0)
  # a concrete 0-d count (15.0, np.array(15), a jax scalar) was refused as "traced", and
  # one above max_bins gave NaN eagerly
  want = float(metrics.debiased_ce(p, y, 15))
  for m in (15.0, np.float32(15), np.array(15), jnp.array(15)):
    assert float(metrics.debiased_ce(p, y, m)) == want, m
  with pytest.raises(ValueError, match="num_bins = 40 exceeds max_bins = 16"):
    metrics.debiased_ce(p, y, np.array(40), max_bins=16)
  # bin counts in a small integer dtype: clamping them to n = 300 cast n to that dtype
  # (OverflowError: "Python integer 300 out of bounds for uint8")
  p3, y3 = np.tile(p, (3, 1)), np.tile(y, 3)
  want = np.asarray(metrics.debiased_ce(p3, y3, np.array([15, 200], np.int64)))
  for dt in (np.uint8, np.int8, np.int16):
    m = np.array([15, 100 if dt is np.int8 else 200], dt)
    expect = want if dt is not np.int8 else np.asarray(metrics.debiased_ce(p3, y3, [15, 100]))
    for arg in (m, jnp.asarray(m)):
      np.testing.assert_array_equal(np.asarray(metrics.debiased_ce(p3, y3, arg)), expect)
  assert float(metrics.debiased_ce(p3, y3, np.uint64(2**64 - 1))) == float(
    metrics.debiased_ce(p3, y3, 300)
  )
  big = np.array([2**64 - 1, 15], np.uint64)  # above int64: still clamped to n, not wrapped
  np.testing.assert_array_equal(
    np.asarray(metrics.debiased_ce(p3, y3, big)),
    np.asarray(metrics.debiased_ce(p3, y3, [300, 15])),
  )


def test_smooth_ece_bandwidth_takes_where():
  """``where=`` as in smooth_ece: the subset's bandwidth; masked rows (NaN) are never read."""
  rng = np.random.default_rng(0)
  p = rng.dirichlet(np.ones(4), 300).astype(np.float32)
  y = rng.integers(0, 4, 300)
  w = rng.random(300) < 0.6
  pn = p.copy()
  pn[~w] = np.nan
  for mode in ("top_label", "classwise"):
    want = np.asarray(metrics.smooth_ece_bandwidth(p[w], y[w], mode=mode))
    got = metrics.smooth_ece_bandwidth(pn, y, mode=mode, where=w)
    np.testing.assert_array_equal(np.asarray(got), want)
    jitted = jax.jit(lambda a, b, m: metrics.smooth_ece_bandwidth(a, b, mode=mode, where=m))
    np.testing.assert_array_equal(np.asarray(jitted(pn, y, w)), want)
  with pytest.raises(ValueError, match="where selects no samples"):
    metrics.smooth_ece_bandwidth(p, y, where=np.zeros(300, bool))


def test_smooth_reliability_takes_where():
  """``where=`` as in smooth_ece: the subset's curve, density, bandwidth and smECE, eagerly,
  under jit and under vmap over masks; masked rows (NaN, label 99) are never read."""
  rng = np.random.default_rng(1)
  p = rng.dirichlet(np.ones(4) / 2, 400).astype(np.float32)
  y = rng.integers(0, 4, 400)
  w = rng.random(400) < 0.6
  pn, yn = p.copy(), y.copy()
  pn[~w], yn[~w] = np.nan, 99
  for bw in (None, 0.05):
    want = metrics.smooth_reliability(p[w], y[w], bw, num_points=40)
    got = metrics.smooth_reliability(pn, yn, bw, num_points=40, where=w)
    jitted = jax.jit(lambda a, b, m: metrics.smooth_reliability(a, b, bw, num_points=40, where=m))
    for g in (got, jitted(pn, yn, w)):
      for name, u, v in zip(want._fields, g, want):
        np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=2e-5, atol=1e-7, err_msg=name)
    assert float(got.smooth_ece) == pytest.approx(
      float(metrics.smooth_ece(p[w], y[w], bw)), rel=1e-5
    )
  masks = np.stack([w, ~w])
  both = jax.vmap(lambda m: metrics.smooth_reliability(p, y, 0.05, num_points=40, where=m))(masks)
  for i, m in enumerate(masks):
    one = metrics.smooth_reliability(p[m], y[m], 0.05, num_points=40)
    np.testing.assert_allclose(np.asarray(both.accuracy[i]), np.asarray(one.accuracy), atol=1e-6)
    np.testing.assert_allclose(np.asarray(both.density[i]), np.asarray(one.density), rtol=1e-5)
  with pytest.raises(ValueError, match="where selects no samples"):
    metrics.smooth_reliability(p, y, where=np.zeros(400, bool))
  with pytest.raises(ValueError, match=r"labels\[\d+\] = 99"):
    metrics.smooth_reliability(pn, yn, 0.05, where=np.ones(400, bool))


# ---------------------------------------------------------------- gradients


def _mmce_direct(q, y, width=0.4):
  """MMCE from its double sum (Kumar, Sarawagi & Jain 2018, Eq. 2), differentiable as written."""
  c = jnp.max(q, axis=1)
  r = (jnp.argmax(q, axis=1) == y).astype(q.dtype) - c
  k = jnp.exp(-jnp.abs(c[:, None] - c[None, :]) / width)
  return jnp.sqrt(r @ k @ r) / q.shape[0]


@pytest.mark.parametrize("x64", [False, True], ids=["float32", "float64"])
def test_mmce_gradient_is_the_double_sums(x64):
  # the sorted confidences had a zero derivative (sort_with_payload dropped it),
  # so MMCE's gradient lost its kernel's terms: [0.448, 0.0158] for [0.716, -0.252]
  rng = np.random.default_rng(1)
  x = rng.normal(size=(64, 4)) * 2
  y = rng.integers(0, 4, 64)
  with jax.enable_x64(x64):
    dt = jnp.float64 if x64 else jnp.float32
    z = jnp.asarray(x, dt)
    got = jax.grad(lambda v: metrics.mmce(v, y, from_logits=True))(z)
    want = jax.grad(lambda v: _mmce_direct(jax.nn.softmax(v, axis=1), y))(z)
    np.testing.assert_allclose(got, want, rtol=1e-4 if x64 else 2e-2, atol=1e-9 if x64 else 2e-5)


def test_mmce_gradient_at_tied_confidences_is_the_double_sums():
  # tied confidences in different blocks got a one-sided derivative through the
  # carries (and half of one inside a block): 1.8 % (w = 0.4) and 5.9 % (w = 0.05)
  # off the double sum's gradient here
  rng = np.random.default_rng(2)
  x = rng.normal(size=(600, 3)) * 2
  x[300:450] = x[:150]  # every confidence of the first 150 twice
  y = rng.integers(0, 3, 600)
  with jax.enable_x64(True):
    z = jnp.asarray(x)
    for w in (0.4, 0.05):
      got = jax.grad(lambda v, b: metrics.mmce(v, y, b, from_logits=True), (0, 1))(z, w)
      want = jax.grad(lambda v, b: _mmce_direct(jax.nn.softmax(v, axis=1), y, b), (0, 1))(z, w)
      np.testing.assert_allclose(got[0], want[0], rtol=1e-9, atol=1e-14)
      assert float(got[1]) == pytest.approx(float(want[1]), rel=1e-9)


def test_gradients_are_finite_at_a_zero_square_root():
  # d sqrt / dx is inf at 0 and inf * 0 is NaN: the block SKCE's Laplacian kernel
  # at its zero diagonal, and debiased_ce's estimate clipped to 0, gave all-NaN
  # gradients; log_loss of logits 100 above the label's overflowed exp to inf
  from jaxcal import scores

  p = jnp.array([[0.7, 0.2, 0.1], [0.2, 0.5, 0.3], [0.1, 0.1, 0.8], [0.3, 0.3, 0.4]])
  y = jnp.array([0, 1, 2, 0])
  g = jax.grad(lambda q: metrics.skce(q, y, estimator="block"))(p)
  assert np.all(np.isfinite(g)) and np.any(g != 0)
  u, yu = jnp.full((48, 4), 0.25), jnp.arange(48) % 4
  assert float(metrics.debiased_ce(u, yu)) == 0.0
  np.testing.assert_array_equal(jax.grad(lambda q: metrics.debiased_ce(q, yu))(u), 0.0)
  x = np.zeros((4, 3), np.float32)
  x[:, 1] = 100.0
  g = jax.grad(lambda v: scores.log_loss(v, np.zeros(4, np.int32), from_logits=True))(x)
  np.testing.assert_array_equal(g, 0.0)  # the loss is clipped there: flat


def test_masked_metrics_differentiate_and_give_masked_rows_no_gradient():
  # masked_last's nextafter had no JVP rule: jax.grad of debiased_ce or uc with a
  # where mask raised NotImplementedError ("Differentiation rule for 'nextafter'")
  from jaxcal import utility

  rng = np.random.default_rng(0)
  p = jax.nn.softmax(jnp.asarray(rng.normal(size=(60, 3)), jnp.float32))
  y = jnp.asarray(rng.integers(0, 3, 60))
  w = jnp.arange(60) % 4 > 0

  def uc(q):
    return utility.uc(q, y, utility.top_class(), where=w).value

  for fn in (lambda q: metrics.debiased_ce(q, y, where=w), uc):
    g = np.asarray(jax.grad(fn)(p))
    assert np.all(np.isfinite(g)) and np.any(g[np.asarray(w)] != 0)
    np.testing.assert_array_equal(g[~np.asarray(w)], 0.0)


def test_ks_reads_the_partial_sums_only_between_tied_scores():
  """KS is read at the ends of tie groups only (Gupta et al. 2021, Eq. 6: the curves are
  functions of the score). Guards the group-end mask: read at every sorted position, a
  partial sum inside a tie group (its order arbitrary) leaks into the maximum."""
  # one tie group whose residuals cancel: 3 correct at c = 0.6 (-0.4 each), 2 wrong (+0.6)
  p = np.array([[0.6, 0.4]] * 5, np.float32)
  y = np.array([0, 1, 0, 1, 0])
  assert float(metrics.ks_ce(p, y)) == pytest.approx(0.0, abs=1e-7)
  assert float(metrics.ks_ce(p, y, "classwise")) == pytest.approx(0.0, abs=1e-7)
  # scores on a coarse grid (every score tied), against the loop over distinct scores
  rng = np.random.default_rng(3)
  for _ in range(3):
    q = rng.integers(1, 4, (24, 3)).astype(np.float32)
    q /= q.sum(axis=1, keepdims=True)
    yq = rng.integers(0, 3, 24)
    _, z = R.top_label(q, yq)
    assert float(metrics.ks_ce(q, yq)) == pytest.approx(R.ks(q.max(1), z), abs=1e-6)
    want = np.mean([R.ks(q[:, k], yq == k) for k in range(3)])
    assert float(metrics.ks_ce(q, yq, "classwise")) == pytest.approx(want, abs=1e-6)


def test_smooth_reliability_reflects_a_confidence_below_one_grid_step_once():
  """Confidences below one grid step (1/(G - 1) = 1e-3 at sigma = 0.05) put mass on grid
  point 0, the point the reflection at 0 must not repeat (relplot's extension, reference
  ``smoothed_sums``). Top-label confidences are >= 1/C, so this needs C > 1000 classes:
  rows spread over 1001 classes against rows with one class far above the others."""
  c = 1001
  p = np.full((6, c), 1.0 / c, np.float64)
  p[3:, 0] = 0.7
  p[3:, 1:] = 0.3 / (c - 1)
  p = p.astype(np.float32)
  y = np.array([0, 5, 9, 0, 0, 4])
  f, z = R.top_label(p, y)
  assert f.min() < 1e-3  # on the first grid step
  got = metrics.smooth_reliability(p, y, 0.05)
  _, acc, dens = R.smooth_reliability(f, z, 0.05)
  np.testing.assert_allclose(got.density, dens, rtol=5e-5, atol=1e-30)
  np.testing.assert_allclose(got.accuracy, acc, rtol=0, atol=1e-5)


def test_smooth_ece_bandwidth_of_a_perfectly_calibrated_set_stops_at_the_search_floor():
  """Residuals that cancel at every confidence make smECE 0 at every bandwidth: every
  midpoint is above the fixed point, down to 1/1024, which counts as below it because it is
  under relplot's eps = 1e-3 (search_param). Guards that eps: without it the search
  returns 1/1024 instead of relplot's 2/1024."""
  p = np.array([[0.5, 0.5]] * 4 + [[0.8, 0.2]] * 10, np.float32)
  y = np.array([0, 1, 0, 1] + [0] * 8 + [1] * 2)  # accuracy 1/2 at 0.5, 8/10 at 0.8
  # smECE is 0 at every bandwidth (R.smooth_ece_fixed_point gives 2/1024 too)
  assert float(metrics.smooth_ece(p, y, 0.05)) == pytest.approx(0.0, abs=1e-7)
  assert float(metrics.smooth_ece_bandwidth(p, y)) == 2 / 1024


@pytest.mark.parametrize(
  "fn",
  [
    metrics.smooth_ece,
    metrics.smooth_ece_bandwidth,
    lambda p, y: metrics.smooth_ece(p, y, mode="classwise"),
  ],
  ids=["smooth_ece", "smooth_ece_bandwidth", "classwise"],
)
def test_smooth_ece_vmap_empty_batch(fn):
  # the shared-bucket rule reduced over the batch with no identity for size 0
  p = jnp.full((0, 5, 3), 1 / 3)
  y = jnp.zeros((0, 5), int)
  assert jax.jit(jax.vmap(fn))(p, y).shape == (0,)
  p1, y1 = jnp.asarray(_data(0, 5, 3)[0], jnp.float32), jnp.array([0, 1, 2, 0, 1])
  np.testing.assert_allclose(jax.vmap(fn)(p1[None], y1[None])[0], fn(p1, y1), rtol=1e-6)
