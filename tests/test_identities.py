"""SPEC §2 identities, by Monte Carlo with known true class probabilities.

Each test draws R replicate label vectors y ~ mu (one vmapped call over the
replicates), and compares the Monte Carlo mean of an error with its exact
expectation. Tolerance: 4 standard errors of the mean (two-sided
P(fail) ~ 6e-5 per check for a correct implementation); the seeds are fixed,
so the tests are deterministic.
"""

import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).parent))  # --import-mode=importlib
import _reference as REF

from jaxcal import metrics, scores

R = 4000  # replicates
N = 50  # samples per data set


def _sample_labels(key, mu, reps):
  """(reps, n) labels with y_i ~ Categorical(mu_i)."""
  return jax.random.categorical(key, jnp.log(jnp.asarray(mu)), axis=-1, shape=(reps, mu.shape[0]))


def _check_mean(samples, expected, k=4.0):
  samples = np.asarray(samples, np.float64)
  mean = samples.mean()
  se = samples.std(ddof=1) / np.sqrt(samples.size)
  assert abs(mean - expected) <= k * se + 1e-12, (mean, expected, se)
  return mean, se


def test_bias_variance_decomposition_lin_ce():
  # Thm 3.1: E[LinCE] = (1/n^2) sum_B ||sum_{i in B}(u_i - mu_i)||^2
  #                    + (1/n^2) sum_i E||phi(y_i) - mu_i||^2,
  # with E||e_y - mu||^2 = 1 - ||mu||^2, for any outcome-independent partition.
  rng = np.random.default_rng(0)
  c = 3
  mu = rng.dirichlet(np.ones(c), N)
  bins = np.asarray(metrics.bin_ids(mu[:, 0].astype(np.float32), 5, "quantile"))
  noise_term = np.sum(1.0 - np.sum(mu**2, axis=1)) / N**2
  y = _sample_labels(jax.random.PRNGKey(0), mu, R)
  onehot = jax.nn.one_hot(y, c)
  tempered = mu**2 / np.sum(mu**2, axis=1, keepdims=True)  # a miscalibrated report
  means = {}
  for name, u in [("truthful", mu), ("tempered", tempered)]:
    bias = sum(np.sum(np.sum(u[bins == b] - mu[bins == b], axis=0) ** 2) for b in range(5)) / N**2
    vals = jax.vmap(lambda s: metrics.lin_ce(u.astype(np.float32), s, bins, 5))(onehot)
    means[name], _ = _check_mean(vals, bias + noise_term)
  assert means["truthful"] < means["tempered"]  # truthfulness: the truth scores best


def test_lin_ce_vmap_over_distinct_data_sets_equals_the_loop():
  # vmap over data sets with their own reports, signals and bins (the mean
  # of the Monte Carlo test above cannot see a batch that permutes them):
  # each member equals its own eager call and the float64 reference
  rng = np.random.default_rng(3)
  k, c = 4, 3
  u = rng.dirichlet(np.ones(c), (k, N)).astype(np.float32)
  s = jax.nn.one_hot(rng.integers(0, c, (k, N)), c).astype(np.float32)
  b = rng.integers(0, 5, (k, N))
  got = np.asarray(jax.vmap(lambda a, bb, cc: metrics.lin_ce(a, bb, cc, 5))(u, s, b))
  loop = np.array([float(metrics.lin_ce(u[i], s[i], b[i], 5)) for i in range(k)])
  assert len(np.unique(loop)) == k, loop
  np.testing.assert_allclose(got, loop, rtol=1e-6, atol=1e-8)
  want = [REF.lin_ce(u[i], np.asarray(s[i]), b[i], 5) for i in range(k)]
  np.testing.assert_allclose(loop, want, rtol=1e-5, atol=1e-8)
  # with one bin assignment shared by the batch (in_axes None), as in the test above
  got = np.asarray(jax.vmap(lambda a, bb: metrics.lin_ce(a, bb, b[0], 5))(u, s))
  want = [REF.lin_ce(u[i], np.asarray(s[i]), b[0], 5) for i in range(k)]
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-8)


def test_calibrated_predictor_identities():
  # Lemma D.1, predictor calibrated (y ~ p): E[LinCE_cw] = E[Brier]/(C n),
  # E[ConfCE_corr] = E[l_conf]/n, whatever the (quantile) bins.
  rng = np.random.default_rng(1)
  c = 4
  p = rng.dirichlet(np.full(c, 0.8), N).astype(np.float32)
  p = p / p.sum(axis=1, keepdims=True)
  y = _sample_labels(jax.random.PRNGKey(1), p.astype(np.float64), R)
  p64 = p.astype(np.float64)
  e_brier = np.mean(1.0 - np.sum(p64**2, axis=1))  # E[mean Brier]
  conf = p64.max(axis=1)
  e_lconf = np.mean(1.0 - conf + conf * (1.0 - conf))  # E[mean l_conf]
  cw = jax.vmap(lambda yy: metrics.classwise_ce(p, yy, 5))(y)
  _check_mean(cw, e_brier / (c * N))
  corr = jax.vmap(lambda yy: metrics.conf_ce_corr(p, yy, 5))(y)
  _check_mean(corr, e_lconf / N)
  # the same identities with the sample scores on each replicate
  br = jax.vmap(lambda yy: scores.brier(p, yy))(y)
  lc = jax.vmap(lambda yy: scores.confidence_loss(p, yy))(y)
  _check_mean(np.asarray(cw) - np.asarray(br) / (c * N), 0.0)
  _check_mean(np.asarray(corr) - np.asarray(lc) / N, 0.0)


def test_example_c1_correction_makes_confce_truthful():
  # Example C.1: p* = 1/2 e_s + 1/C e_0 + (1/2 - 1/C) e_t on every sample.
  c, s, t = 4, 1, 2
  pstar = np.zeros(c)
  pstar[s], pstar[0], pstar[t] = 0.5, 1.0 / c, 0.5 - 1.0 / c
  truth = np.tile(pstar, (N, 1)).astype(np.float32)
  uniform = np.full((N, c), 1.0 / c, np.float32)  # argmax tie -> class 0
  y = _sample_labels(jax.random.PRNGKey(2), np.tile(pstar, (N, 1)), R)
  res = {}
  for name, rep in [("truth", truth), ("uniform", uniform)]:
    for f in ("conf_ce", "conf_ce_corr"):
      res[name, f] = np.asarray(jax.vmap(lambda yy: getattr(metrics, f)(rep, yy, 5))(y))
  expected = {
    ("truth", "conf_ce"): 1 / (4 * N),
    ("uniform", "conf_ce"): (1 / N) * (1 / c) * (1 - 1 / c),
    ("truth", "conf_ce_corr"): 3 / (4 * N),
    ("uniform", "conf_ce_corr"): (1 / N) * (1 - 1 / c**2),
  }
  for key, e in expected.items():
    _check_mean(res[key], e)
  # Uncorrected: the truthful report loses (significantly); corrected: it wins.
  d_unc = res["truth", "conf_ce"] - res["uniform", "conf_ce"]
  d_cor = res["truth", "conf_ce_corr"] - res["uniform", "conf_ce_corr"]
  se = lambda d: d.std(ddof=1) / np.sqrt(d.size)
  assert d_unc.mean() > 4 * se(d_unc)
  assert d_cor.mean() < -4 * se(d_cor)
  # the same holds with fixed bins (all samples share one confidence)
  unc_fix = jax.vmap(lambda yy: metrics.conf_ce(truth, yy, 5, "fixed"))(y)
  _check_mean(unc_fix, 1 / (4 * N))
