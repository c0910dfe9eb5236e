"""LCE / MLCE, the Nadaraya–Watson helper and ECCE against slow float64
numpy references (SPEC §5)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcal import metrics
from jaxcal._src.local import lce, nadaraya_watson

BLOCKS = dict(block_size=32, candidate_block=64)  # several blocks at n = 300


# ------------------------------------------------------------ references


def _fixed_bins(s, m):
  return np.clip(np.ceil(s * m), 1, m).astype(int) - 1


def lce_ref(p, y, phi, m=15, min_bin_size=20, gamma=10.0, w=None):
  """Loops over classes, bins and anchors; direct distances; float64."""
  p = np.asarray(p, np.float64)
  phi = np.asarray(phi, np.float64)
  y = np.asarray(y)
  n, C = p.shape
  w = np.full(C, 1.0 / C) if w is None else np.asarray(w, np.float64)
  total, worst = 0.0, 0.0
  for c in range(C):
    s = p[:, c]
    b = _fixed_bins(s, m)
    errs = []
    for bb in range(m):
      members = [j for j in range(n) if b[j] == bb]
      if len(members) <= min_bin_size:  # authors: <= min_bin_size skipped
        continue
      for i in members:
        num = den = 0.0
        for j in members:
          k = np.exp(-np.sum((phi[i] - phi[j]) ** 2) / (2 * gamma**2))
          num += k * (s[j] - (y[j] == c))
          den += k
        errs.append(abs(num / den))
    if errs:
      total += w[c] * np.mean(errs)
      worst = max(worst, max(errs))
  return total, worst


def ecce_ref(p, y, m=15, w=None):
  p = np.asarray(p, np.float64)
  n, C = p.shape
  w = np.full(C, 1.0 / C) if w is None else np.asarray(w, np.float64)
  out = 0.0
  for c in range(C):
    b = _fixed_bins(p[:, c], m)
    run = 0.0
    for bb in range(m):
      idx = b == bb
      run += np.sum((y[idx] == c) - p[idx, c])
      if idx.any():
        out += w[c] * abs(run) / n
  return out


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


def _data(seed=0, n=300, C=4, D=5, scale=2.0):
  rng = np.random.default_rng(seed)
  z = rng.normal(size=(n, C)) * scale
  p = np.exp(z - z.max(1, keepdims=True))
  p /= p.sum(1, keepdims=True)
  y = np.array([rng.choice(C, p=q) for q in p])
  phi = rng.normal(size=(n, D)) * 2 + 3
  return p, y, phi


@pytest.fixture(scope="module")
def data():
  return _data()


# ------------------------------------------------------------------ LCE


@pytest.mark.parametrize("m,min_bin_size,gamma", [(15, 20, 2.0), (15, 0, 10.0), (5, 40, 0.7)])
def test_lce_matches_reference(data, m, min_bin_size, gamma):
  p, y, phi = data
  with jax.enable_x64(True):
    got = lce(p, y, phi, num_bins=m, min_bin_size=min_bin_size, bandwidth=gamma, **BLOCKS)
    want = lce_ref(p, y, phi, m, min_bin_size, gamma)
    got = np.array([float(got.lce), float(got.mlce)])
  np.testing.assert_allclose(got, want, atol=1e-6)
  assert 0 < got[0] <= got[1]


def test_lce_class_weights_and_public_name(data):
  p, y, phi = data
  w = np.array([0.1, 0.2, 0.3, 0.4])
  with jax.enable_x64(True):
    got = metrics.lce(p, y, phi, 15, 20, 2.0, w, **BLOCKS)
    want = lce_ref(p, y, phi, 15, 20, 2.0, w)
  np.testing.assert_allclose([float(got.lce), float(got.mlce)], want, atol=1e-6)


def test_bin_of_exactly_min_bin_size_is_skipped():
  # 2 classes; p[:, 0] puts exactly 20 samples in the bin (0.6, 2/3] and 30 in (1/15*14, 1]
  rng = np.random.default_rng(1)
  s = np.concatenate([np.full(20, 0.65), np.full(30, 0.97)])
  p = np.stack([s, 1 - s], 1)
  y = rng.integers(0, 2, 50)
  phi = rng.normal(size=(50, 3))
  with jax.enable_x64(True):
    for mbs in (19, 20, 29, 30):
      got = lce(p, y, phi, num_bins=15, min_bin_size=mbs, bandwidth=1.0, **BLOCKS)
      want = lce_ref(p, y, phi, 15, mbs, 1.0)
      np.testing.assert_allclose([float(got.lce), float(got.mlce)], want, atol=1e-6)
    # min_bin_size = 30: every bin has <= 30 samples, nothing is kept
    assert float(got.lce) == 0.0 and float(got.mlce) == 0.0


def test_float32_and_block_sizes(data):
  p, y, phi = data
  want = lce_ref(p, y, phi, 15, 20, 2.0)
  for blocks in (BLOCKS, {}):
    got = lce(p.astype(np.float32), y, phi.astype(np.float32), bandwidth=2.0, **blocks)
    np.testing.assert_allclose([float(got.lce), float(got.mlce)], want, atol=2e-5)


def test_jit_vmap_and_num_bins_array(data):
  p, y, phi = (a.astype(np.float32) if a.dtype == np.float64 else a for a in data)
  p2, y2, phi2 = (a.astype(np.float32) if a.dtype == np.float64 else a for a in _data(seed=5))
  eager = lce(p, y, phi, bandwidth=2.0, **BLOCKS)
  jitted = jax.jit(lambda a, b, c: lce(a, b, c, bandwidth=2.0, **BLOCKS))(p, y, phi)
  np.testing.assert_allclose(np.asarray(jitted), np.asarray(eager), rtol=1e-6, atol=1e-7)
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
  "bad",
  [
    "nan_features",
    "inf_features",
    "bandwidth0",
    "bandwidth_neg",
    "bandwidth_nan",
    "rows",
    "features_1d",
    "min_bin_size",
    "blocks",
    "probs",
  ],
)
def test_lce_value_errors(data, bad):
  p, y, phi = data
  kw = dict(bandwidth=2.0)
  if bad == "nan_features":
    phi = phi.copy()
    phi[3, 1] = np.nan
  elif bad == "inf_features":
    phi = phi.copy()
    phi[0, 0] = np.inf
  elif bad == "bandwidth0":
    kw["bandwidth"] = 0.0
  elif bad == "bandwidth_neg":
    kw["bandwidth"] = -1.0
  elif bad == "bandwidth_nan":
    kw["bandwidth"] = float("nan")
  elif bad == "rows":
    phi = phi[:-1]
  elif bad == "features_1d":
    phi = phi[:, 0]
  elif bad == "min_bin_size":
    kw["min_bin_size"] = -1
  elif bad == "blocks":
    kw.update(block_size=48, candidate_block=64)
  elif bad == "probs":
    p = p * 2
  with pytest.raises(ValueError):
    lce(p, y, phi, **kw)


def test_inputs_not_modified(data):
  p, y, phi = data
  copies = [a.copy() for a in (p, y, phi)]
  lce(p, y, phi, bandwidth=2.0, **BLOCKS)
  for a, b in zip((p, y, phi), copies):
    np.testing.assert_array_equal(a, b)


# ---------------------------------------------------------------- ECCE


def test_ecce_matches_reference(data):
  p, y, _ = data
  w = np.array([0.4, 0.3, 0.2, 0.1])
  with jax.enable_x64(True):
    np.testing.assert_allclose(float(metrics.ecce(p, y)), ecce_ref(p, y), atol=1e-6)
    np.testing.assert_allclose(float(metrics.ecce(p, y, 7, w)), ecce_ref(p, y, 7, w), atol=1e-6)


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


def test_nadaraya_watson_isolated_points_and_gradient():
  # kernels underflow in float32 (distances ~ 1e3 * gamma): weights stay exact
  phi = jnp.array([[0.0], [1.0], [1e4]], jnp.float32)
  t = jnp.array([[1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
  out = jax.jit(lambda f: nadaraya_watson(f, t, 1.0))(phi)
  assert np.all(np.isfinite(np.asarray(out)))
  np.testing.assert_allclose(np.asarray(out), [[0, 1], [1, 0], [0, 1]], atol=1e-6)
  g = jax.jit(jax.grad(lambda f: jnp.sum(nadaraya_watson(f, t, 1.0) ** 2)))(phi)
  assert np.all(np.isfinite(np.asarray(g)))


def test_nadaraya_watson_value_errors():
  with pytest.raises(ValueError):
    nadaraya_watson(np.ones((3, 2)), np.ones((3, 2)), 0.0)
  with pytest.raises(ValueError):
    nadaraya_watson(np.ones((3, 2)), np.ones((4, 2)), 1.0)
  with pytest.raises(ValueError):
    nadaraya_watson(np.full((3, 2), np.nan), np.ones((3, 2)), 1.0)
