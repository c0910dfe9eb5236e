"""Beta calibration, BBQ and ensemble temperature scaling.

Each against an independent float64 reference written from its paper
(scipy optimisers, explicit loops over models and bins), plus the
recalibrator contract: ``fit`` by name, save/load (one npz format, any suffix), the
class-count check at apply, probability inputs, bad options. betacal's own
numbers are compared in tests/test_peers.py.
"""

import math
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.optimize as so
from scipy.special import gammaln

from jaxcal import recalibrate

sys.path.insert(0, str(pathlib.Path(__file__).parent))  # --import-mode=importlib
from conftest import load_cifar, softmax64


def _logits(seed, n, c, scale=2.5):
  rng = np.random.default_rng(seed)
  z = rng.normal(size=(n, c)) * scale
  p = np.exp(z / 1.7) / np.exp(z / 1.7).sum(1, keepdims=True)  # truth: softer than softmax(z)
  y = np.array([rng.choice(c, p=pi) for pi in p])
  return z.astype(np.float32), y


Z, Y = _logits(0, 600, 4)


def _softmax64(z):
  z = np.asarray(z, np.float64)
  e = np.exp(z - z.max(1, keepdims=True))
  return e / e.sum(1, keepdims=True)


# ----------------------------------------------------------------------- beta


def _beta_reference(s, t, eps):
  """Kull et al. (2017) §3: logistic regression on (log s, -log(1 - s)), a, b >= 0."""
  s = np.clip(s, eps, 1 - eps)
  x1, x2 = np.log(s), -np.log1p(-s)

  def fit(use_a, use_b):
    def nll(w):
      u = w[0] * x1 * use_a + w[1] * x2 * use_b + w[2]
      return np.mean(np.logaddexp(0, u) - t * u)

    w = so.minimize(nll, np.array([1.0, 1.0, 0.0]), method="BFGS", options={"gtol": 1e-10}).x
    return np.array([w[0] * use_a, w[1] * use_b, w[2]]), nll(w)

  w, v = fit(1, 1)
  if w[0] < 0:
    w, v = fit(0, 1)
  elif w[1] < 0:
    w, v = fit(1, 0)
  return w, v


def test_beta_matches_logistic_regression_reference():
  rc = recalibrate.fit("beta", Z, Y, normalize=False)
  p = np.asarray(jax.nn.softmax(jnp.asarray(Z)))
  eps = float(np.finfo(np.float32).eps)
  for c in range(4):
    w, _ = _beta_reference(p[:, c].astype(np.float64), (Y == c).astype(np.float64), eps)
    got = np.array([float(rc.a[c]), float(rc.b[c]), float(rc.d[c])])
    np.testing.assert_allclose(got, w, atol=2e-3, rtol=2e-3)
  q = np.asarray(rc(Z))
  s = np.clip(p.astype(np.float64), eps, 1 - eps)
  want = 1 / (
    1 + np.exp(-(np.asarray(rc.a) * np.log(s) - np.asarray(rc.b) * np.log1p(-s) + np.asarray(rc.d)))
  )
  np.testing.assert_allclose(q, want, atol=2e-6)
  qn = np.asarray(recalibrate.fit_beta(Z, Y)(Z))
  np.testing.assert_allclose(qn, want / want.sum(1, keepdims=True), atol=2e-6)


def test_beta_refits_with_a_fixed_at_zero():
  # a decreasing relation between score and outcome pushes the free fit to a < 0;
  # the refit with a = 0 is kept even though its b is negative (as in betacal)
  rng = np.random.default_rng(5)
  s = rng.uniform(0.05, 0.95, 500)
  y1 = (rng.uniform(size=500) < 1 - s).astype(int)
  p = np.stack([1 - s, s], axis=1).astype(np.float32)
  rc = recalibrate.fit_beta(p, y1, from_logits=False, normalize=False)
  np.testing.assert_array_equal(np.asarray(rc.a), 0.0)
  w, _ = _beta_reference(s, y1.astype(float), float(np.finfo(np.float32).eps))
  np.testing.assert_allclose([float(rc.a[1]), float(rc.b[1]), float(rc.d[1])], w, atol=2e-3)


def test_beta_refits_with_b_fixed_at_zero():
  # outcomes from a = 3, b = -0.5 (logit q = 3 log s + 0.5 log(1 - s) + d, rising
  # then falling above s = 6/7): the free fit has a > 0 and b < 0, so the refit with
  # b = 0 is kept (as in betacal); the refit with a = 0 has b > 0 (a rising trend)
  rng = np.random.default_rng(6)
  s = rng.uniform(0.02, 0.98, 2000)
  q = 1 / (1 + np.exp(-(3 * np.log(s) + 0.5 * np.log1p(-s) + 1.0)))
  y1 = (rng.uniform(size=2000) < q).astype(int)
  p = np.stack([1 - s, s], axis=1).astype(np.float32)
  rc = recalibrate.fit_beta(p, y1, from_logits=False, normalize=False)
  eps = float(np.finfo(np.float32).eps)
  w, _ = _beta_reference(s.astype(np.float32).astype(np.float64), y1.astype(float), eps)
  assert w[1] == 0.0 and w[0] > 0  # the reference took the b = 0 refit
  np.testing.assert_allclose([float(rc.a[1]), float(rc.b[1]), float(rc.d[1])], w, atol=2e-3)


# ------------------------------------------------------------------------ ETS


def _ets_reference(z, y, loss):
  """Zhang et al. (2020) Eq. 4 with the authors' procedure: T first, then w by SLSQP."""
  c = z.shape[1]
  onehot = np.eye(c)[y]

  def lossf(q):
    if loss == "mse":
      return np.mean((q - onehot) ** 2)
    return -np.mean(np.sum(onehot * np.log(np.maximum(q, 1e-12)), axis=1))

  # Brent on log T (BFGS's default gradient tolerance stopped 5e-4 short on CIFAR-100)
  t = so.minimize_scalar(
    lambda th: lossf(_softmax64(z / np.exp(th))),
    bounds=(-5.0, 5.0),
    method="bounded",
    options={"xatol": 1e-10},
  ).x
  t = math.exp(t)
  comps = [_softmax64(z / t), _softmax64(z), np.full(z.shape, 1.0 / c)]
  w = so.minimize(
    lambda w: lossf(sum(wi * ci for wi, ci in zip(w, comps))),
    (1.0, 0.0, 0.0),
    method="SLSQP",
    bounds=((0, 1),) * 3,
    constraints={"type": "eq", "fun": lambda w: np.sum(w) - 1},
    options={"ftol": 1e-14, "maxiter": 500},
  ).x
  return t, w


@pytest.mark.parametrize(
  "loss, noise, flip", [("mse", 0.3, 0.0), ("nll", 0.3, 0.0), ("mse", 0.0, 0.0), ("nll", 0.0, 0.03)]
)
def test_ets_matches_the_authors_procedure(loss, noise, flip):
  # labels from softmax(z / 1.7) mixed with uniform noise: interior weights; without the
  # noise the squared error's weights lie on an edge of the simplex (w_3 = 0, w_2 = 0.008);
  # 3 % of the labels moved to the least likely class give the log loss terms below 1e-3
  # (confidently wrong: the log is clamped only at 1e-12)
  rng = np.random.default_rng(1)
  z, y = _logits(1, 800, 5, scale=4.0)
  y = np.where(rng.uniform(size=800) < noise, rng.integers(0, 5, 800), y)
  y = np.where(rng.uniform(size=800) < flip, z.argmin(1), y)
  t_ref, w_ref = _ets_reference(z.astype(np.float64), y, loss)
  assert noise or flip or (w_ref[2] < 1e-6 < 0.005 < w_ref[1])  # on the edge, off its ends
  rc = recalibrate.fit("ensemble_temperature", z, y, loss=loss)
  assert float(rc.temperature) == pytest.approx(t_ref, rel=2e-3)
  np.testing.assert_allclose(np.asarray(rc.weights), w_ref, atol=5e-3 if loss == "nll" else 2e-4)
  assert float(jnp.sum(rc.weights)) == pytest.approx(1.0, abs=1e-6)
  q = np.asarray(rc(z))
  want = sum(
    wi * ci
    for wi, ci in zip(
      np.asarray(rc.weights),
      [_softmax64(z / float(rc.temperature)), _softmax64(z), np.full(z.shape, 0.2)],
    )
  )
  np.testing.assert_allclose(q, want, atol=1e-5)


def test_ets_squared_error_weights_on_cifar100_match_float64():
  # CIFAR-100 DenseNet-121's 5,000 calibration rows: the weights' quadratic problem is
  # ill-conditioned (softmax(z / T) and softmax(z) nearly equal), and its matrix as one
  # float32 product over all n C entries had a[2, 2] = 49.74 for n / C = 50: the fit gave
  # [0.998, 0.002, 0] for the reference's [0.962, 0.036, 0.002]
  z, y = load_cifar("cifar100_densenet121", "val")
  t_ref, w_ref = _ets_reference(z.astype(np.float64), y, "mse")
  rc = recalibrate.fit("ensemble_temperature", z, y)
  assert float(rc.temperature) == pytest.approx(t_ref, rel=1e-4)
  assert 0.01 < w_ref[1] and 0.001 < w_ref[2]  # interior of the simplex
  np.testing.assert_allclose(np.asarray(rc.weights), w_ref, atol=5e-4)


def test_ets_temperature_of_logits_whose_softmax_is_one_hot():
  """Logits x 1e4: softmax(z) is one-hot in float32, so the squared error is flat at T = 1,
  where the fit stayed (0.156 against 0.103 at the optimum T ~ 1e4); it starts at temperature
  scaling's T where that has the lower loss. The reference is a grid over log T in float64."""
  z, y = _logits(3, 300, 5, scale=2.0)
  z = z * np.float32(1e4)
  onehot = np.eye(5)[y]
  temps = np.exp(np.linspace(0.0, 12.0, 2401))
  mse = np.array([np.mean((_softmax64(z / t) - onehot) ** 2) for t in temps])
  rc = recalibrate.fit("ensemble_temperature", z, y)
  assert bool(rc.converged)
  got = np.mean((_softmax64(z / float(rc.temperature)) - onehot) ** 2)
  assert got <= mse.min() + 1e-6 < mse[0] - 0.01
  assert float(rc.temperature) == pytest.approx(temps[np.argmin(mse)], rel=0.02)


@pytest.mark.parametrize("method", ["ensemble_temperature", "beta", "bbq"])
def test_probability_inputs_equal_logit_inputs(method):
  p = np.asarray(jax.nn.softmax(jnp.asarray(Z)))
  a = recalibrate.fit(method, Z, Y)
  b = recalibrate.fit(method, p, Y, from_logits=False)
  np.testing.assert_allclose(np.asarray(a(Z)), np.asarray(b(p)), atol=2e-4)


# ------------------------------------------------------------------------ BBQ


def _bbq_reference(s, t, x_new, prior=2.0, factor=10.0):
  """Naeini et al. (2015) §3, as documented in jaxcal/_src/recal/bbq.py, by loops."""
  n = len(s)
  order = np.argsort(s, kind="stable")
  ss, ts = s[order], t[order]
  root = n ** (1 / 3)
  lo, hi = max(1, math.floor(root / factor)), min(n, math.ceil(root * factor))
  logls, preds = [], []
  for m in range(lo, hi + 1):
    pos = np.arange(1, n + 1)
    bins = -(-pos * m // n)  # 1-based equal-mass bins
    cuts = []
    for j in range(1, m):
      last = np.max(np.nonzero(bins == j)[0])
      cuts.append((ss[last] + ss[last + 1]) / 2)
    edges = [0.0] + cuts + [1.0]
    a0 = prior / m
    ll, theta = 0.0, []
    for j in range(1, m + 1):
      sel = bins == j
      nb, mb = sel.sum(), ts[sel].sum()
      pb = min(max((edges[j - 1] + edges[j]) / 2, np.finfo(s.dtype).eps), 1 - np.finfo(s.dtype).eps)
      al, be = a0 * pb, a0 * (1 - pb)
      ll += gammaln(a0) - gammaln(nb + a0) + gammaln(mb + al) - gammaln(al)
      ll += gammaln(nb - mb + be) - gammaln(be)
      theta.append((mb + al) / (nb + a0))
    idx = np.array([sum(1 for c in cuts if c < x) for x in x_new])
    logls.append(ll)
    preds.append(np.array(theta)[idx])
  w = np.exp(np.array(logls) - max(logls))
  w /= w.sum()
  return np.sum(w[:, None] * np.array(preds), axis=0)


def test_bbq_matches_loop_reference():
  z, y = _logits(2, 300, 3)
  p = np.asarray(jax.nn.softmax(jnp.asarray(z)))
  rc = recalibrate.fit("bbq", z, y, normalize=False)
  z2, _ = _logits(3, 50, 3)
  p2 = np.asarray(jax.nn.softmax(jnp.asarray(z2)))
  x_new = np.concatenate([p2, p[:20]])  # includes scores equal to cut neighbours
  q = np.asarray(rc(np.log(x_new)))
  for c in range(3):
    want = _bbq_reference(p[:, c], (y == c).astype(np.float64), x_new[:, c])
    np.testing.assert_allclose(q[:, c], want, atol=2e-5)
  # other options: N' = 5, bin counts in [2, 21] (K = 3)
  rc = recalibrate.fit("bbq", z, y, normalize=False, prior_strength=5.0, range_factor=3.0)
  q = np.asarray(rc(np.log(x_new)))
  cuts = sum(b - 1 for b in range(2, 22))  # the inner cuts of every model
  assert (np.isfinite(np.asarray(rc.thresholds)).sum(1) == cuts).all()
  for c in range(3):
    want = _bbq_reference(p[:, c], (y == c).astype(np.float64), x_new[:, c], 5.0, 3.0)
    np.testing.assert_allclose(q[:, c], want, atol=2e-5)
  # tied scores (multiples of 1/11): tie groups straddle the bins' ends (split by
  # index), cuts fall on the tied values, and a score equal to a cut takes the value left of it
  rng = np.random.default_rng(5)
  k = rng.multinomial(8, [0.5, 0.3, 0.2], size=300) + 1
  y = np.array([rng.choice(3, p=row / 11) for row in k])
  p = (k / 11).astype(np.float32)
  rc = recalibrate.fit("bbq", p, y, from_logits=False, normalize=False)
  x_new = p[:80]  # every score is a tied value, many of them equal to a cut
  q = np.asarray(rc(x_new))
  for c in range(3):
    assert np.isin(np.asarray(rc.thresholds[c]), p[:, c]).sum() > 10  # cuts on tied scores
    want = _bbq_reference(p[:, c], (y == c).astype(np.float64), x_new[:, c])
    np.testing.assert_allclose(q[:, c], want, atol=2e-5)


def test_log_beta_matches_scipy_in_float32():
  from scipy.special import betaln

  from jaxcal._src.recal.bbq import _log_beta

  v = np.array([1e-9, 1e-3, 0.3, 1.0, 2.5, 7.9, 8.0, 8.1, 20.0, 100.0, 2500.0, 5000.0, 1e5])
  x, y = (a.astype(np.float32) for a in np.meshgrid(v, v))
  got = np.asarray(_log_beta(jnp.asarray(x), jnp.asarray(y)), np.float64)
  want = betaln(x.astype(np.float64), y.astype(np.float64))
  np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)  # log-gammas: 0.18 off
  with jax.enable_x64(True):  # float64: the series' third term matters (a mutation review)
    got64 = np.asarray(_log_beta(jnp.asarray(x, jnp.float64), jnp.asarray(y, jnp.float64)))
  want64 = betaln(x.astype(np.float64), y.astype(np.float64))
  np.testing.assert_allclose(got64, want64, rtol=0, atol=5e-9)  # (unmutated: 6e-10)


def test_ets_weights_stay_on_the_simplex_where_the_free_optimum_leaves_it():
  """The three-weight QP's optimum over the simplex, where the unconstrained one has a
  weight of -5e-4: never a negative mixture weight (a mutation review found the check
  of the faces' solutions untested)."""
  from jaxcal._src.recal.ensemble_temperature import _simplex_qp

  b = jnp.array([0.6, 0.4005, -0.0005], jnp.float32)
  w = np.asarray(_simplex_qp(jnp.eye(3, dtype=jnp.float32), b), np.float64)
  assert w.min() >= 0 and abs(w.sum() - 1) < 1e-6
  # the float64 optimum on the face w3 = 0: project (0.6, 0.4005) onto w1 + w2 = 1
  np.testing.assert_allclose(w, [0.59975, 0.40025, 0.0], atol=1e-6)


def test_bbq_in_float32_at_large_n_matches_the_float64_reference():
  # CIFAR-10 ResNet-110's 5,000 calibration rows, one class (models of 1..171
  # bins): the log marginal likelihoods as six log-gammas of counts near N
  # each kept ~4e-3 in float32, and the fitted probabilities moved by up to
  # 7.6e-5 (5.2e-5 for class 3) from the float64 loop reference
  z, y = load_cifar("cifar10_resnet110", "val")
  zt, _ = load_cifar("cifar10_resnet110", "test")
  p, pt = softmax64(z).astype(np.float32), softmax64(zt[:500]).astype(np.float32)
  rc = recalibrate.fit("bbq", p, y, from_logits=False, normalize=False)
  q = np.asarray(rc(pt), np.float64)
  for c in (0, 3):
    want = _bbq_reference(p[:, c], (y == c).astype(np.float64), pt[:, c])
    np.testing.assert_allclose(q[:, c], want, rtol=0, atol=5e-6, err_msg=c)


def test_bbq_of_an_overconfident_model_stays_in_the_unit_interval(tmp_path):
  # CIFAR-10 ResNet-110 logits x 10: the running sum of the averaged steps' jumps
  # cancelled to -7e-11, so 6,913 test probabilities were negative (NaN log loss)
  # and the saved fit was refused on loading ("values must be in [0, 1]")
  z, y = load_cifar("cifar10_resnet110", "val")
  zt, _ = load_cifar("cifar10_resnet110", "test")
  rc = recalibrate.fit("bbq", 10 * z, y)
  values = np.asarray(rc.values)
  assert values.min() >= 0.0 and values.max() <= 1.0
  q = np.asarray(rc(10 * zt[:2000]))
  assert q.min() >= 0.0 and np.allclose(q.sum(1), 1.0, atol=1e-5)
  recalibrate.save(rc, tmp_path / "bbq.npz")
  back = recalibrate.load(tmp_path / "bbq.npz")
  np.testing.assert_array_equal(np.asarray(back(10 * zt[:2000])), q)


def test_bbq_bin_range():
  # [max(1, floor(n^(1/3) / K)), min(n, ceil(K n^(1/3)))], K = 10 by default
  from jaxcal._src.recal.bbq import bbq_bin_range

  assert bbq_bin_range(300) == (1, 67)  # 300^(1/3) = 6.69
  assert bbq_bin_range(20000) == (2, 272)  # 27.14
  assert bbq_bin_range(8) == (1, 8)  # ceil(10 * 2) = 20 > n
  assert bbq_bin_range(20000, 3.0) == (9, 82)
  # perfect cubes, whose float cube roots fall just below or above the integer:
  # 1000 ** (1/3) = 9.999..., 27000 ** (1/3) = 30.000...04
  assert bbq_bin_range(1000, 2.0) == (5, 20)
  assert bbq_bin_range(27000) == (3, 300)
  assert bbq_bin_range(64, 2.0) == (2, 8)
  # a large K: the float guess K n^(1/3) was stepped down to n one by one (1e25 never
  # returned; found by a review helper); now any K whose range passes n is cut at once
  # (the range reaches n = 300 from K^3 > n^2, K > 44.8; at K = 40, 268^3 >= 40^3 * 300)
  for k, want in ((1e25, (1, 300)), (1e300, (1, 300)), (44.9, (1, 300)), (40.0, (1, 268))):
    assert bbq_bin_range(300, k) == want, k
  assert bbq_bin_range(1, 1e25) == (1, 1)


def test_bbq_refuses_a_prior_so_strong_that_its_fit_overflows():
  """prior_strength = 1e37 passed the check (finite, > 0) and the fit was NaN everywhere,
  with no error (found by a review helper); 1e36 still fits."""
  from jaxcal import recalibrate

  rng = np.random.default_rng(0)
  z = rng.normal(size=(300, 4)).astype(np.float32)
  y = rng.integers(0, 4, 300)
  ok = recalibrate.fit("bbq", z, y, prior_strength=1e36)
  assert np.all(np.isfinite(np.asarray(ok(z))))
  with pytest.raises(ValueError, match=r"prior_strength = 1e\+37 is too large for float32"):
    recalibrate.fit("bbq", z, y, prior_strength=1e37)


def test_bbq_calibrates_an_overconfident_model():
  from jaxcal import metrics

  z, y = _logits(4, 3000, 4, scale=3.0)
  before = float(metrics.classwise_ece(z, y, from_logits=True))
  rc = recalibrate.fit("bbq", z[:2000], y[:2000])
  after = float(metrics.classwise_ece(rc(z[2000:]), y[2000:]))
  assert after < 0.6 * before


# ----------------------------------------------------------------- contract


@pytest.mark.parametrize("method", ["beta", "bbq", "ensemble_temperature"])
def test_contract_save_load_and_class_check(method, tmp_path):
  rc = recalibrate.fit(method, Z, Y)
  q = np.asarray(rc(Z))
  np.testing.assert_allclose(q.sum(1), 1.0, atol=1e-5)
  for ext in ("npz", "msgpack"):
    path = str(tmp_path / f"rc.{ext}")
    recalibrate.save(rc, path)
    back = recalibrate.load(path)
    assert type(back) is type(rc)
    np.testing.assert_array_equal(np.asarray(back(Z)), q)
  with pytest.raises(ValueError, match="fitted on C = 4"):
    rc(Z[:, :3])
  jitted = jax.jit(lambda r, x: r.apply(x))(rc, jnp.asarray(Z))
  np.testing.assert_allclose(np.asarray(jitted), q, atol=1e-6)
  z0 = Z.copy()
  recalibrate.fit(method, z0, Y)
  np.testing.assert_array_equal(z0, Z)


@pytest.mark.parametrize(
  "call, fragment",
  [
    (lambda: recalibrate.fit("ensemble_temperature", Z, Y, loss="l1"), "loss"),
    (lambda: recalibrate.fit("bbq", Z, Y, prior_strength=0.0), "prior_strength"),
    (lambda: recalibrate.fit("bbq", Z, Y, range_factor=0.5), "range_factor"),
    (lambda: recalibrate.fit("beta", Z, np.zeros(600, int)), "every class"),
    (lambda: recalibrate.fit("beta", Z, Y[:10]), "labels"),
    (lambda: recalibrate.fit("bbq", Z * np.nan, Y), "non-finite"),
  ],
)
def test_bad_options(call, fragment):
  with pytest.raises(ValueError, match=fragment):
    call()


@pytest.mark.parametrize(
  "method, options, match",
  [
    ("beta", {"max_iter": 10.5}, "max_iter must be an int"),
    ("beta", {"tol": float("nan")}, "tol must be a finite number"),
    ("ensemble_temperature", {"max_iter": 0}, "max_iter must be >= 1"),
    ("ensemble_temperature", {"tol": -1.0}, "tol must be > 0"),
    ("ensemble_temperature", {"loss": ["mse"]}, "loss must be one of"),
    ("bbq", {"prior_strength": "big"}, "prior_strength must be a number"),
    ("bbq", {"range_factor": float("inf")}, "range_factor must be a finite number"),
    ("beta", {"from_logits": "yes"}, "from_logits must be True or False"),
    ("beta", {"normalize": "no"}, "normalize must be True or False, got 'no'"),
    ("bbq", {"normalize": 0}, "normalize must be True or False, got 0"),
  ],
)
def test_bad_option_values_are_named_like_the_other_fits(method, options, match):
  with pytest.raises(ValueError, match=match):
    recalibrate.fit(method, Z[:60], Y[:60], **options)


@pytest.mark.parametrize("method", ["beta", "ensemble_temperature"])
def test_solver_status_is_reported_and_an_unconverged_fit_warns(method):
  rc = recalibrate.fit(method, Z, Y)
  assert bool(rc.converged) and 1 <= int(rc.num_iter) < 200
  with pytest.warns(RuntimeWarning, match="did not converge in 1 iterations"):
    short = recalibrate.fit(method, Z, Y, max_iter=1)
  assert not bool(short.converged)


@pytest.mark.parametrize("method", ["beta", "bbq", "ensemble_temperature"])
def test_jit_of_vmapped_fit_equals_a_loop_of_eager_fits(method):
  """One compiled call fits three data sets; each equals its own eager fit. Two
  more members hold bad data (a NaN logit, a label out of range): NaN arrays."""
  fn = recalibrate.fit_function(method)
  zs, ys = zip(*(_logits(s, 150, 3) for s in range(3)))
  z, y = np.stack(zs + zs[:2]), np.stack(ys + ys[:2])
  z[3, 7, 1] = np.nan
  y[4, 9] = 3  # C = 3
  batched = jax.jit(jax.vmap(fn))(z, y)
  for i in (3, 4):
    bad = jax.tree.map(lambda leaf: leaf[i], batched)
    floats = [a for a in jax.tree.leaves(bad) if jnp.issubdtype(a.dtype, jnp.floating)]
    assert floats and all(np.isnan(np.asarray(a)).all() for a in floats), (method, i)
    assert np.isnan(np.asarray(bad(z[0]))).all()
  assert type(batched) is type(fn(z[0], y[0]))
  for i in range(3):
    eager = fn(z[i], y[i])
    one = jax.tree.map(lambda leaf: leaf[i], batched)
    np.testing.assert_allclose(np.asarray(one(z[i])), np.asarray(eager(z[i])), atol=2e-4)
