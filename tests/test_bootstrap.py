"""jaxcal.bootstrap: intervals against slow numpy loops, coverage with known truth, bands."""

import math
import pathlib
import sys
import warnings
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats

sys.path.insert(0, str(pathlib.Path(__file__).parent))  # --import-mode=importlib
from conftest import no_new_programs

import jaxcal
from jaxcal import bootstrap as BS
from jaxcal import data, dominance, metrics, scores

# --------------------------------------------------------------------------
# A slow float64 reference, written from Efron & Tibshirani (1993), §13-14.
# --------------------------------------------------------------------------


def ref_acceleration(*jacks):
  """BCa's acceleration from the jackknife values of each data set (Efron & Tibshirani 1993, §14.3).

  ``U_gi = (n_g - 1)(mean_i theta_(gi) - theta_(gi))`` and ``a = sum U^3 / n_g^3 /
  (6 (sum U^2 / n_g^2)^1.5)``; for one data set ``sum d^3 / (6 (sum d^2)^1.5)``.
  """
  num = den = 0.0
  for jack in jacks:
    jack = np.asarray(jack, np.float64)
    g = jack.size
    u = (g - 1) * (jack.mean() - jack)
    num += np.sum(u**3) / g**3
    den += np.sum(u**2) / g**2
  return num / (6 * den**1.5)


def ref_interval(est, samples, method, confidence, accel=None):
  """Percentile / basic / normal / BCa from the resamples, numpy float64, one statistic.

  ``accel``: BCa's acceleration (:func:`ref_acceleration`).
  """
  s = np.sort(np.asarray(samples, np.float64))
  alpha = 1 - confidence
  if method == "normal":
    z = scipy.stats.norm.ppf(1 - alpha / 2)
    sd = np.std(s, ddof=1)
    return est - z * sd, est + z * sd
  q = np.array([alpha / 2, 1 - alpha / 2])
  if method == "bca":
    b = s.size
    p0 = (np.sum(s < est) + 0.5 * np.sum(s == est)) / b
    z0 = scipy.stats.norm.ppf(np.clip(p0, 0.5 / b, 1 - 0.5 / b))
    zq = scipy.stats.norm.ppf(q)
    q = scipy.stats.norm.cdf(z0 + (z0 + zq) / (1 - accel * (z0 + zq)))
  lo, hi = np.quantile(s, q)
  if method == "basic":
    return 2 * est - hi, 2 * est - lo
  return lo, hi


@pytest.fixture(scope="module")
def small_predictions():
  x, y = data.default_predictions()
  return np.asarray(jax.nn.softmax(x[:300])), y[:300]


def test_samples_and_intervals_match_a_numpy_loop_over_the_same_resamples(small_predictions):
  p, y = small_predictions
  key = jax.random.key(3)
  fn = metrics.conf_ece
  idx = np.asarray(BS.resample_indices(key, 300, 60))
  loop = np.array([float(fn(p[i], y[i])) for i in idx])
  est = float(fn(p, y))
  for method in ("percentile", "basic", "normal"):
    r = BS.bootstrap(key, fn, p, y, num_resamples=60, method=method, confidence=0.9)
    np.testing.assert_allclose(np.asarray(r.samples), loop, rtol=2e-5, atol=1e-7)
    assert float(r.estimate) == pytest.approx(est, rel=1e-6)
    assert float(r.sd) == pytest.approx(np.std(loop, ddof=1), rel=1e-4)
    lo, hi = ref_interval(est, loop, method, 0.9)
    assert (float(r.lo), float(r.hi)) == pytest.approx((lo, hi), rel=1e-4), method


def test_bca_matches_a_numpy_jackknife_reference():
  # jackknife_groups >= n: the ordinary leave-one-out jackknife, order-free.
  x = jnp.asarray(np.random.default_rng(0).exponential(size=40), jnp.float32)
  key = jax.random.key(1)
  stat = lambda v: jnp.log(jnp.mean(v))
  r = BS.bootstrap(key, stat, x, num_resamples=300, method="bca", jackknife_groups=40)
  xs = np.asarray(x, np.float64)
  idx = np.asarray(BS.resample_indices(key, 40, 300))
  loop = np.log(xs[idx].mean(1))
  jack = np.array([np.log(np.delete(xs, i).mean()) for i in range(40)])
  lo, hi = ref_interval(np.log(xs.mean()), loop, "bca", 0.95, ref_acceleration(jack))
  assert (float(r.lo), float(r.hi)) == pytest.approx((lo, hi), rel=2e-4)
  # BCa moves a skewed statistic's interval; it is not the percentile interval
  p = BS.bootstrap(key, stat, x, num_resamples=300)
  assert float(p.lo) != pytest.approx(float(r.lo), rel=1e-3)


def test_where_resamples_the_selected_samples_as_a_numpy_loop_does(small_predictions):
  # A scattered mask: resample b draws k = 200 of the selected samples (the
  # unmasked index sets of k samples, mapped to the selected rows' places)
  p, y = small_predictions
  key = jax.random.key(3)
  sel = np.sort(np.random.default_rng(1).choice(300, 200, replace=False))
  mask = np.isin(np.arange(300), sel)
  idx = sel[np.asarray(BS.resample_indices(key, 200, 60))]
  loop = np.array([float(metrics.conf_ece(p[i], y[i])) for i in idx])
  est = float(metrics.conf_ece(p[sel], y[sel]))
  for method in ("percentile", "basic"):
    r = BS.bootstrap(key, metrics.conf_ece, p, y, num_resamples=60, method=method, where=mask)
    np.testing.assert_allclose(np.asarray(r.samples), loop, rtol=2e-5, atol=1e-7)
    assert float(r.estimate) == pytest.approx(est, rel=1e-6)
    lo, hi = ref_interval(est, loop, method, 0.95)
    assert (float(r.lo), float(r.hi)) == pytest.approx((lo, hi), rel=1e-4), method
  assert mask.sum() == 200  # the caller's mask is not modified


def test_where_on_padded_data_reuses_one_program_and_matches_the_unpadded_call(small_predictions):
  # 250 and 290 samples padded to 320 rows: the same resamples as the unpadded
  # calls, one compiled program for both sizes
  p, y = small_predictions
  key = jax.random.key(4)
  stat = lambda a, b, where=None: {
    "q": metrics.conf_ce(a, b, 10, where=where),
    "s": metrics.smooth_ece(a, b, where=where),
  }
  pad_p = np.concatenate([p, np.eye(1, 10, dtype=p.dtype).repeat(20, 0)])
  pad_y = np.concatenate([y, np.zeros(20, y.dtype)])
  for n in (250, 290):
    plain = BS.bootstrap(key, stat, p[:n], y[:n], num_resamples=40)
    run = lambda: BS.bootstrap(key, stat, pad_p, pad_y, num_resamples=40, where=np.arange(320) < n)
    if n == 250:
      padded = run()
    else:  # the program of n = 250
      with no_new_programs():
        padded = run()
    for f in ("estimate", "samples", "lo", "hi"):
      for k in ("q", "s"):
        np.testing.assert_allclose(
          np.asarray(getattr(padded, f)[k]), np.asarray(getattr(plain, f)[k]), rtol=2e-5, atol=1e-7
        )


def test_where_with_bca_matches_the_leave_one_out_reference_of_the_selected():
  # jackknife_groups >= k: the ordinary jackknife of the selected samples, order-free
  x = np.random.default_rng(0).exponential(size=50).astype(np.float32)
  mask = np.arange(50) % 5 != 0  # 40 selected
  key = jax.random.key(1)
  stat = lambda v, where: jnp.log(jnp.mean(v, where=where))
  r = BS.bootstrap(key, stat, x, num_resamples=300, method="bca", jackknife_groups=40, where=mask)
  xs = np.asarray(x[mask], np.float64)
  idx = np.flatnonzero(mask)[np.asarray(BS.resample_indices(key, 40, 300))]
  loop = np.log(np.asarray(x, np.float64)[idx].mean(1))
  jack = np.array([np.log(np.delete(xs, i).mean()) for i in range(40)])
  lo, hi = ref_interval(np.log(xs.mean()), loop, "bca", 0.95, ref_acceleration(jack))
  assert (float(r.lo), float(r.hi)) == pytest.approx((lo, hi), rel=2e-4)


def test_where_under_jit_equals_the_eager_call_and_too_few_selected_give_nan():
  """A traced mask of 45 rows under 60 jackknife groups (of the padded 64): 15 groups
  are empty; their value, the full estimate, moved BCa's acceleration (a skewed
  statistic: the mean's delete-1 values average to it and hid this)."""
  x = jnp.asarray(np.random.default_rng(2).exponential(size=64), jnp.float32)
  key = jax.random.key(5)
  stat = lambda v, where: jnp.log(jnp.var(v, where=where))
  run = lambda m, method: BS.bootstrap(
    key, stat, x, num_resamples=200, method=method, where=m, jackknife_groups=60
  )
  mask = jnp.arange(64) < 45
  for method in ("percentile", "bca"):
    eager = run(mask, method)
    traced = jax.jit(lambda m: run(m, method))(mask)
    batched = jax.vmap(lambda m: run(m, method))(jnp.stack([mask, mask]))
    for f in ("estimate", "lo", "hi"):
      want = float(getattr(eager, f))
      np.testing.assert_allclose(float(getattr(traced, f)), want, rtol=1e-5)
      np.testing.assert_allclose(np.asarray(getattr(batched, f)), [want] * 2, rtol=1e-5)
    one = jax.jit(lambda m: run(m, method))(jnp.arange(64) < 1)
    assert np.isnan(float(one.lo)) and np.isnan(float(one.hi))


@pytest.mark.parametrize(
  "kwargs, match",
  [
    ({"where": np.ones(6, int)}, "where must be a boolean mask of the samples, got dtype int"),
    ({"where": np.ones(5, bool)}, r"where must have shape \(6,\)"),
    ({"where": np.arange(6) < 1}, "at least 2 selected samples, where selects 1 of 6"),
    ({"where": np.ones(6, bool), "groups": (0, 1)}, "one data set; these arrays form 2 groups"),
    ({"where": np.ones(6, bool), "fn": lambda a, b: jnp.mean(a)}, "fn has no where argument"),
  ],
)
def test_bad_where(kwargs, match):
  fn = kwargs.pop("fn", lambda a, b, where: jnp.mean(a, where=where))
  with pytest.raises(ValueError, match=match):
    BS.bootstrap(jax.random.key(0), fn, np.zeros(6), np.zeros(6), num_resamples=5, **kwargs)


def test_intervals_and_sd_do_not_depend_on_the_scale_of_the_statistic():
  # float32 BCa cubed the jackknife deviations unscaled: a statistic of size 1e15
  # overflowed them and one of 1e-12 underflowed them to 0/0, a NaN interval; the
  # normal interval's sd overflowed for samples of size 1e36 and was 0 at 1e-20
  x = jnp.asarray(np.random.default_rng(0).exponential(size=40), jnp.float32)
  key = jax.random.key(1)
  xs = np.asarray(x, np.float64)
  idx = np.asarray(BS.resample_indices(key, 40, 300))
  jack = np.array([np.delete(xs, i).mean() for i in range(40)])
  for scale in (1e-20, 1e-12, 1.0, 1e15, 1e30):
    stat = lambda v, c=scale: jnp.mean(v) * c
    r = BS.bootstrap(key, stat, x, num_resamples=300, method="bca", jackknife_groups=40)
    lo, hi = ref_interval(
      xs.mean() * scale, xs[idx].mean(1) * scale, "bca", 0.95, ref_acceleration(jack * scale)
    )
    assert (float(r.lo), float(r.hi)) == pytest.approx((lo, hi), rel=2e-4)
    assert float(r.sd) == pytest.approx(np.std(xs[idx].mean(1) * scale, ddof=1), rel=1e-4)
  for scale in (1e-20, 1e36):
    samples = (np.float32([1.0, 1.5, 2.0, 0.5]) * np.float32(scale)).astype(np.float32)
    lo, hi = BS.interval(np.float32(scale), samples, "normal")
    want = ref_interval(scale, samples.astype(np.float64), "normal", 0.95)
    assert (float(lo), float(hi)) == pytest.approx(want, rel=1e-5)


def test_bca_of_two_independent_samples_matches_the_multi_sample_acceleration():
  # the jackknife values of each sample with the other kept whole (ref_acceleration)
  rng = np.random.default_rng(2)
  x1 = rng.exponential(size=30).astype(np.float32)
  x2 = rng.exponential(scale=2.0, size=20).astype(np.float32)
  key = jax.random.key(4)

  def stat(a, b):
    return jnp.log(jnp.mean(a)) - jnp.log(jnp.mean(b))

  r = BS.bootstrap(
    key, stat, x1, x2, num_resamples=300, method="bca", groups=[0, 1], jackknife_groups=30
  )
  a64, b64 = x1.astype(np.float64), x2.astype(np.float64)
  f = lambda a, b: np.log(a.mean(-1)) - np.log(b.mean(-1))
  k1, k2 = jax.random.split(key)
  i1 = np.asarray(BS.resample_indices(k1, 30, 300))
  i2 = np.asarray(BS.resample_indices(k2, 20, 300))
  loop = f(a64[i1], b64[i2])
  np.testing.assert_allclose(np.asarray(r.samples), loop, rtol=2e-5)
  accel = ref_acceleration(
    [f(np.delete(a64, i), b64) for i in range(30)],
    [f(a64, np.delete(b64, i)) for i in range(20)],
  )
  assert abs(accel) > 0.01  # skewed enough for the acceleration to move the ends
  lo, hi = ref_interval(f(a64, b64), loop, "bca", 0.95, accel=accel)
  assert (float(r.lo), float(r.hi)) == pytest.approx((lo, hi), rel=2e-4)


def test_grouped_jackknife_uses_equal_groups_and_keeps_the_remainder():
  # 11 samples, 3 groups: consecutive blocks of 3 of the random permutation
  # (jax.random.permutation of fold_in(key, 1)), the last 11 mod 3 = 2 always
  # kept: 3 jackknife values, each the statistic on 8 samples.
  x = jnp.asarray(np.random.default_rng(5).exponential(size=11), jnp.float32)
  key = jax.random.key(6)
  stat = lambda v: jnp.log(jnp.mean(v))
  r = BS.bootstrap(key, stat, x, num_resamples=300, method="bca", jackknife_groups=3)
  xs = np.asarray(x, np.float64)
  perm = np.asarray(jax.random.permutation(jax.random.fold_in(key, 1), 11))
  jack = [np.log(np.delete(xs, perm[3 * k : 3 * k + 3]).mean()) for k in range(3)]
  loop = np.log(xs[np.asarray(BS.resample_indices(key, 11, 300))].mean(1))
  lo, hi = ref_interval(np.log(xs.mean()), loop, "bca", 0.95, ref_acceleration(jack))
  assert (float(r.lo), float(r.hi)) == pytest.approx((lo, hi), rel=2e-4)
  # the grouping matters: leave-one-out or the remainder in the last group move the ends
  loo = [np.log(np.delete(xs, i).mean()) for i in range(11)]
  last = jack[:2] + [np.log(np.delete(xs, perm[6:]).mean())]
  for other in (loo, last):
    ends = ref_interval(np.log(xs.mean()), loop, "bca", 0.95, ref_acceleration(other))
    assert ends != pytest.approx((lo, hi), rel=1e-3)


def test_interval_function():
  lo, hi = BS.interval(2.0, jnp.arange(101.0), "percentile", 0.9)
  assert (float(lo), float(hi)) == (5.0, 95.0)
  # 1 - α/2 rounds to 1 in float32: the largest resample, not a read past the end
  lo, hi = BS.interval(2.0, jnp.arange(101.0), "percentile", 1 - 1e-9)
  assert float(hi) == 100.0 and float(lo) == pytest.approx(0.0, abs=1e-6)
  lo, hi = BS.interval(jnp.zeros(2), jnp.ones((10, 2)), "normal")
  assert lo.shape == (2,)
  # float16 resamples are computed in float32 (ndtri has no float16 kernel)
  s16 = np.array([0.1, 0.5, 0.9], np.float16)
  got = BS.interval(0.5, s16, "bca", acceleration=0.1)
  want = BS.interval(0.5, s16.astype(np.float32), "bca", acceleration=0.1)
  assert got[0].dtype == jnp.float32 and (float(got[0]), float(got[1])) == tuple(map(float, want))
  # BCa's z0 counts the resamples tied with the estimate as half below it (15 of 40
  # here, as for a discrete statistic): against the float64 reference
  s = np.concatenate([np.random.default_rng(1).normal(size=25), np.full(15, 0.3)])
  s = s.astype(np.float32)
  got = BS.interval(0.3, s, "bca", 0.9, acceleration=0.05)
  want = ref_interval(np.float32(0.3), s, "bca", 0.9, accel=0.05)
  assert (float(got[0]), float(got[1])) == pytest.approx(want, rel=1e-5)


_NAN3 = np.array([1.0, np.nan, 2.0])


@pytest.mark.parametrize(
  "args, kwargs, msg",
  [
    ((0.0, jnp.ones(5), "student"), {}, "method must be one of"),
    ((0.0, jnp.ones(5)), {"confidence": 95}, "confidence must lie in"),
    ((0.0, jnp.ones(5)), {"confidence": "0.9"}, r"confidence must be a number, got '0.9' \(str\)"),
    ((0.0, jnp.ones(5)), {"confidence": True}, r"confidence must be a number, got True \(bool\)"),
    ((jnp.zeros(3), jnp.ones((5, 2))), {}, "samples must have shape"),
    ((1.0, _NAN3), {}, r"samples contains non-finite values .* samples\[1\]: nan"),
    ((1.0, np.array([1.0, np.inf, 2.0]), "normal"), {}, r"samples contains non-finite"),
    ((1.0, np.zeros(0)), {}, r"at least 2 resampled values .* got B = 0"),
    ((1.0, np.ones(1)), {}, r"at least 2 resampled values .* got B = 1"),
    ((np.nan, np.array([1.0, 2.0, 3.0]), "bca"), {}, r"estimate contains non-finite"),
    ((1.0, np.array([1.0, 2.0]), "bca"), {"acceleration": np.inf}, "acceleration contains"),
    ((1.0, np.array(["a", "b"])), {}, "samples must be a real numeric array"),
    (
      (np.zeros(2), np.ones((5, 2)), "bca"),
      {"acceleration": np.zeros(3)},
      r"acceleration must be a scalar or have the estimate's shape \(2,\), got \(3,\)",
    ),
  ],
)
def test_interval_bad_input(args, kwargs, msg):
  with pytest.raises(ValueError, match=msg):
    BS.interval(*args, **kwargs)


def test_interval_of_bad_traced_values_is_nan():
  f = jax.jit(BS.interval, static_argnums=2)
  assert np.isnan(f(1.0, jnp.asarray(_NAN3), "percentile")).all()  # not (1.05, nan)
  assert np.isnan(f(jnp.nan, jnp.array([1.0, 2.0, 3.0]), "bca")).all()  # not (1.0001, 2.02)
  # an infinite acceleration, which in the formula alone gives finite ends (adjustment 0)
  assert np.isnan(f(1.5, jnp.array([1.0, 2.0, 3.0]), "bca", acceleration=jnp.inf)).all()


def test_bca_caps_the_bias_correction_when_every_resample_is_above():
  lo, hi = BS.interval(0.0, jnp.linspace(1.0, 2.0, 50), "bca")
  assert np.isfinite(float(lo)) and 1.0 <= float(lo) <= float(hi) <= 2.0
  # z0 = Φ⁻¹(1 / (2B)), the cap of the definition (float64 reference)
  want = ref_interval(0.0, np.linspace(1.0, 2.0, 50), "bca", 0.95, accel=0.0)
  assert (float(lo), float(hi)) == pytest.approx(want, rel=1e-5)


def test_bca_never_swaps_its_ends_and_high_confidence_stays_finite():
  # 1 - a (z0 + z) <= 0 sent the upper end to the smallest resample: (-0.640, -1.0)
  s = jnp.linspace(-1.0, 1.0, 101)
  for a in (0.6, -0.6):
    lo, hi = (float(v) for v in BS.interval(0.0, s, "bca", 0.95, acceleration=a))
    assert -1.0 <= lo <= hi <= 1.0
    assert (hi == 1.0) if a > 0 else (lo == -1.0)  # the level's limit: the extreme resample
  # 1 - alpha / 2 rounded to 1 in float32: (-inf, inf) and (lo, nan) at 1 - 1e-8
  r = np.random.default_rng(0).normal(size=2000).astype(np.float32)
  lo, hi = (float(v) for v in BS.interval(0.0, r, "normal", 1 - 1e-8))
  z = -scipy.stats.norm.ppf(0.5e-8)
  assert hi == pytest.approx(z * r.std(ddof=1), rel=1e-4) and lo == pytest.approx(-hi)
  lo, hi = (float(v) for v in BS.interval(0.0, r, "bca", 1 - 1e-8))
  assert r.min() <= lo <= hi <= r.max() and np.isfinite([lo, hi]).all()
  with pytest.warns(DeprecationWarning):  # the old z= form names z, not a confidence
    with pytest.raises(ValueError, match=r"z must be a finite number > 0 .* got 9"):
      dominance.bootstrap(jax.random.key(0), jnp.mean, r, num_resamples=10, z=9)


def test_pytree_statistic_stacked_models_and_a_rank_correlation():
  rng = np.random.default_rng(8)
  n, c, models = 200, 4, 3
  probs = rng.dirichlet(np.ones(c), size=(models, n)).astype(np.float32)
  labels = rng.integers(0, c, n)
  bins = np.array([2, 5])

  def stat(p, y):
    ce = jax.vmap(lambda q: metrics.conf_ce(q, y, num_bins=bins))(p)  # (models, 2)
    return {"ce": ce, "rho": dominance.rank_correlation(ce[:, 0], ce[:, 1])}

  key = jax.random.key(1)
  r = BS.bootstrap(key, stat, probs, labels, num_resamples=6, sample_axis=(1, 0), batch_size=4)
  assert r.samples["ce"].shape == (6, models, 2) and r.lo["ce"].shape == (models, 2)
  assert r.samples["rho"].shape == (6,) and r.hi["rho"].shape == ()
  idx = np.asarray(BS.resample_indices(key, n, 6))
  for b in (0, 5):
    want = [
      [float(metrics.conf_ce(probs[i][idx[b]], labels[idx[b]], num_bins=m)) for m in (2, 5)]
      for i in range(models)
    ]
    np.testing.assert_allclose(np.asarray(r.samples["ce"][b]), want, rtol=1e-5, atol=1e-8)


def test_groups_resample_data_sets_independently_and_batching_changes_nothing():
  key = jax.random.key(3)
  a, b, c = jnp.arange(6.0), jnp.arange(4.0) * 10, jnp.arange(6.0) * 100
  fn = lambda x, y, z: jnp.stack([x.mean(), y.mean(), z.mean()])
  r = BS.bootstrap(key, fn, a, b, c, num_resamples=5, groups=(7, 3, 7), batch_size=2)
  k7, k3 = jax.random.split(key, 2)  # groups in order of first appearance
  i7 = np.asarray(BS.resample_indices(k7, 6, 5))
  i3 = np.asarray(BS.resample_indices(k3, 4, 5))
  want = np.stack(
    [np.asarray(a)[i7].mean(1), np.asarray(b)[i3].mean(1), np.asarray(c)[i7].mean(1)], axis=1
  )
  np.testing.assert_allclose(np.asarray(r.samples), want, rtol=1e-6)
  r5 = BS.bootstrap(key, fn, a, b, c, num_resamples=5, groups=(7, 3, 7), batch_size=5)
  np.testing.assert_array_equal(np.asarray(r5.samples), np.asarray(r.samples))


def test_the_estimate_is_the_eager_statistic_and_the_program_is_reused(small_predictions):
  p, y = small_predictions
  fn = metrics.classwise_ce
  r1 = BS.bootstrap(jax.random.key(0), fn, p, y, num_resamples=8)
  assert float(r1.estimate) == pytest.approx(float(fn(p, y)), rel=1e-5)
  from jaxcal._src import bootstrap as impl

  size = impl._resampled._cache_size()
  BS.bootstrap(jax.random.key(1), fn, p, y, num_resamples=8)
  assert impl._resampled._cache_size() == size  # same fn and shapes: no new compilation
  # another confidence level is an argument, not a new program (each level compiled
  # the summary and interval programs again); the ends are those of interval()
  for method in ("percentile", "bca"):
    BS.bootstrap(jax.random.key(1), fn, p, y, num_resamples=8, method=method)
    BS.interval(r1.estimate, r1.samples, method)
    with no_new_programs():
      got = [
        BS.bootstrap(jax.random.key(1), fn, p, y, num_resamples=8, method=method, confidence=c)
        for c in (0.5, 0.8, 0.9, 0.99)
      ]
      ends = [BS.interval(r1.estimate, r1.samples, method, c) for c in (0.5, 0.9)]
    lo = [float(r.lo) for r in got]
    assert lo == sorted(lo, reverse=True) and len(set(lo)) > 1, lo  # wider with the level
  np.testing.assert_array_equal(ends[0][0], BS.interval(r1.estimate, r1.samples, "bca", 0.5)[0])


@pytest.mark.parametrize(
  "args, kwargs, exc, msg",
  [
    ((), {}, ValueError, "at least one data array"),
    ((np.zeros(5), np.zeros(4)), {}, ValueError, "same number of samples"),
    ((np.zeros(5), np.zeros(4)), {"groups": (0,)}, ValueError, "groups has"),
    # float labels were truncated: 0.2 and 0.9 made one paired group
    (
      (np.zeros(5), np.zeros(5)),
      {"groups": (0.2, 0.9)},
      ValueError,
      r"each entry of groups must be an int, got 0.2 \(float\)",
    ),
    ((np.zeros(5), np.zeros(5)), {"groups": ("a", "b")}, ValueError, "each entry of groups"),
    # an int raised Python's "'int' object is not iterable"; a string was split into letters
    (
      (np.zeros(5),),
      {"groups": 5},
      ValueError,
      r"groups must be a sequence of one int per array \(e.g. \(0, 0, 1\)\) or None, got 5 \(int\)",
    ),
    ((np.zeros(5), np.zeros(5)), {"groups": "01"}, ValueError, "groups must be a sequence"),
    ((np.zeros(5),), {"groups": np.array(0)}, ValueError, "groups must be a sequence"),
    ((np.zeros((5, 2)),), {"sample_axis": True}, ValueError, "sample_axis must be an int or"),
    ((np.zeros((5, 2)),), {"sample_axis": 1.0}, ValueError, "sample_axis must be an int or"),
    ((np.zeros((5, 2)),), {"sample_axis": (True,)}, ValueError, "sample_axis True out of range"),
    ((np.zeros(5),), {"num_resamples": 1}, ValueError, "num_resamples must be an integer >= 2"),
    ((np.zeros(5),), {"num_resamples": 2.5}, ValueError, "num_resamples must be an integer"),
    ((np.zeros(5),), {"sample_axis": 1}, ValueError, "out of range"),
    ((np.zeros(5), np.zeros(5)), {"sample_axis": (0,)}, ValueError, "entries"),
    ((np.zeros(5),), {"method": "t"}, ValueError, "method must be one of"),
    ((np.zeros(5),), {"confidence": 1.0}, ValueError, "confidence must lie in"),
    # float() let the string through (calibration_report refused it)
    ((np.zeros(5),), {"confidence": "0.9"}, ValueError, r"confidence must be a number, got '0.9'"),
    ((np.zeros(5),), {"confidence": True}, ValueError, r"confidence must be a number, got True"),
    # refused before anything is drawn: 10**9 resamples of 20 samples were killed by the OS
    # at 21 GB after 69 s
    (
      (np.zeros(20),),
      {"num_resamples": 10**9},
      ValueError,
      r"the resample indices and keys \(num_resamples, n \+ 4\) = \(1,000,000,000, 24\) would "
      r"hold 24,000,000,000 entries, above 2\^31 - 1 = 2,147,483,647: pass fewer resamples "
      r"\(at most 89,478,485 for n = 20\)",
    ),
    # the keys alone (two words a resample, split and copied) needed about 20 GB
    (
      (np.zeros(2),),
      {"num_resamples": 10**9},
      ValueError,
      r"\(num_resamples, n \+ 4\) = \(1,000,000,000, 6\) would hold 6,000,000,000 entries",
    ),
    # an rbg key has four words: its keys take twice the room (found by a reread)
    (
      (np.zeros(2),),
      {"num_resamples": 3 * 10**8, "key": "rbg"},
      ValueError,
      r"\(num_resamples, n \+ 8\) = \(300,000,000, 10\)",
    ),
    (
      (np.zeros(20), np.zeros(30)),
      {"num_resamples": 5 * 10**7, "groups": (0, 1)},
      ValueError,
      r"\(num_resamples, n \+ 8\) = \(50,000,000, 58\) \(n: the samples of the 2 groups "
      r"together\) would hold",
    ),
    (
      (np.zeros((10, 100)),),
      {"num_resamples": 3 * 10**6, "batch_size": 3 * 10**6},
      ValueError,
      r"one batch of data array 0 resampled \(batch_size, \*shape\) = \(3,000,000, 10, 100\) "
      r"would hold 3,000,000,000 entries.*pass a smaller batch_size",
    ),
    ((np.zeros(5),), {"batch_size": 0}, ValueError, "batch_size must be an integer >= 1"),
    # one group: a single jackknife value, no spread, acceleration 0 by default
    (
      (np.zeros(5),),
      {"jackknife_groups": 1},
      ValueError,
      "jackknife_groups must be an integer >= 2",
    ),
    ((np.zeros(5),), {"jackknife_groups": 2.5}, ValueError, "jackknife_groups must be an integer"),
    ((np.array([3.0]),), {}, ValueError, "needs at least 2 samples per data array, got n = 1"),
    ((np.zeros(4), np.zeros(1)), {"groups": (0, 1)}, ValueError, "needs at least 2 samples"),
    # not JAX's "Error interpreting argument to stage as a JAX value"
    (
      (np.zeros(4), np.zeros(4, object)),
      {},
      ValueError,
      "data array 1 must be a real numeric array, got dtype object",
    ),
    ((np.array(["a", "b"]),), {}, ValueError, "data array 0 must be a real numeric array"),
    ((np.ones(3, complex),), {}, ValueError, "data array 0 must be a real numeric array"),
    (([[1.0, 2.0], [3.0]],), {}, ValueError, "data array 0 must be a numeric array, got list"),
  ],
)
def test_bad_input(args, kwargs, exc, msg):
  impl = kwargs.pop("key", None)  # a key implementation other than the default
  key = jax.random.key(0) if impl is None else jax.random.key(0, impl=impl)
  with pytest.raises(exc, match=msg):
    BS.bootstrap(key, jnp.mean, *args, **kwargs)


def test_integers_that_int32_cannot_hold_are_refused_not_wrapped():
  # without x64 jnp.asarray wrapped int64 to int32: a label 2**32 + 1 became 1 and
  # the bootstrap of conf_ece gave the error of another data set, no NaN, no error
  rng = np.random.default_rng(0)
  p = rng.dirichlet(np.ones(4), 50).astype(np.float32)
  y = rng.integers(0, 4, 50)
  bad = y.copy()
  bad[3] = 2**32 + 1
  with pytest.raises(
    ValueError, match=r"array 1 holds int64 values that int32 cannot hold \(entry 3 = 4294967297\)"
  ):
    BS.bootstrap(jax.random.key(0), metrics.conf_ece, p, bad, num_resamples=4)
  big = np.array([[1, 2**32]], np.uint64)
  with pytest.raises(
    ValueError, match=r"array 0 holds uint64 values .* \(entry \(0, 1\) = 4294967296\)"
  ):
    BS.bootstrap(jax.random.key(0), jnp.sum, big, num_resamples=4, sample_axis=1)
  # int64 data that int32 holds are used as they are
  r = BS.bootstrap(jax.random.key(0), metrics.conf_ece, p, y.astype(np.int64), num_resamples=4)
  assert float(r.estimate) == float(metrics.conf_ece(p, y))
  with jax.enable_x64(True):  # x64 keeps int64: nothing to refuse
    r = BS.bootstrap(jax.random.key(0), jnp.max, np.array([2**40, 1]), num_resamples=4)
    assert int(r.estimate) == 2**40


def test_the_statistic_output_is_checked_before_it_runs():
  x = np.arange(20.0)
  # a complex statistic raised "ldexp not supported for input types" from the interval
  with pytest.raises(
    ValueError,
    match=r"the statistic must return real numbers .*: fn's output\['b'\] has dtype complex64",
  ):
    BS.bootstrap(
      jax.random.key(0), lambda v: {"a": v.mean(), "b": v.mean() * 1j}, x, num_resamples=4
    )
  # (num_resamples + 1, *shape) values refused before fn runs (jax.eval_shape allocates nothing)
  with pytest.raises(
    ValueError,
    match=r"the resampled values of fn's output \(num_resamples \+ 1, \*shape\) = "
    r"\(10,001, 1000000\) would hold 10,001,000,000 entries.*at most 2,146\)",
  ):
    BS.bootstrap(jax.random.key(0), lambda v: jnp.zeros(10**6) + v.mean(), x, num_resamples=10**4)


def test_checked_mode_describes_the_callers_data_not_a_resample():
  # under jaxcal.checked the message counted the bad rows of a resample (rows repeat there)
  p = np.asarray(jax.nn.softmax(jax.random.normal(jax.random.key(3), (51, 3)))) * 2
  y = np.zeros(51, np.int32)
  with pytest.raises(ValueError) as eager:
    scores.brier(p, y)
  f = jaxcal.checked(
    lambda q: BS.bootstrap(jax.random.key(0), scores.brier, q, y, num_resamples=20).lo
  )
  with pytest.raises(ValueError) as inside:
    f(p)
  assert str(inside.value) == str(eager.value)
  # valid data: checked mode returns the unchecked numbers
  q = p / 2
  want = BS.bootstrap(jax.random.key(0), scores.brier, q, y, num_resamples=20).lo
  np.testing.assert_array_equal(f(q), want)


def test_fn_must_be_callable_and_inputs_are_not_modified():
  with pytest.raises(TypeError, match="fn must be callable"):
    BS.bootstrap(jax.random.key(0), 3, np.zeros(3))
  x = np.arange(5.0)
  keep = x.copy()
  BS.bootstrap(jax.random.key(0), jnp.mean, x, num_resamples=4)
  np.testing.assert_array_equal(x, keep)
  # a statistic that is NaN (here from NaN data) gets NaN ends, not a finite
  # lower end read from the finite resamples (same program as above)
  x[1] = np.nan
  r = BS.bootstrap(jax.random.key(0), jnp.mean, x, num_resamples=4)
  assert np.isnan(float(r.lo)) and np.isnan(float(r.hi))


@pytest.mark.parametrize(
  "call",
  [
    lambda k: BS.resample_indices(k, 5, 3),
    lambda k: BS.bootstrap(k, jnp.mean, np.zeros(3)),
    lambda k: BS.consistency_bands(k, np.full((4, 2), 0.5)),
  ],
  ids=["resample_indices", "bootstrap", "consistency_bands"],
)
def test_an_int_seed_is_not_a_key(call):
  with pytest.raises(ValueError, match=r"key must be a JAX PRNG key .*got int"):
    call(0)


def test_resample_indices_range_and_bad_input():
  idx = np.asarray(BS.resample_indices(jax.random.key(2), 7, 100))
  assert idx.shape == (100, 7) and idx.min() == 0 and idx.max() == 6
  with pytest.raises(ValueError, match="n must be an integer >= 1"):
    BS.resample_indices(jax.random.key(0), 0, 3)
  with pytest.raises(ValueError, match="num_resamples"):
    BS.resample_indices(jax.random.key(0), 3, 0)


def test_deprecated_dominance_bootstrap_warns_and_gives_estimate_pm_z_sd():
  x = jnp.asarray(np.random.default_rng(6).exponential(size=100), jnp.float32)
  with pytest.warns(DeprecationWarning, match="jaxcal.bootstrap.bootstrap"):
    old = dominance.bootstrap(jax.random.key(0), jnp.mean, x, num_resamples=50, z=2.0)
  new = BS.bootstrap(
    jax.random.key(0),
    jnp.mean,
    x,
    num_resamples=50,
    method="normal",
    confidence=math.erf(2 / 2**0.5),
  )
  np.testing.assert_allclose(np.asarray(old.samples), np.asarray(new.samples), rtol=1e-6)
  assert float(old.hi - old.estimate) == pytest.approx(2.0 * float(old.sd), rel=1e-5)
  assert dominance.resample_indices is BS.resample_indices


# --------------------------------------------------------------------------
# Coverage on synthetic data with known truth (Monte Carlo).
# --------------------------------------------------------------------------


def test_percentile_coverage_of_the_mean_brier_score_with_known_truth():
  """95 % percentile intervals of the mean Brier score cover the true expectation.

  The truth: E[Brier] = E[sum_r p_r^2 - 2 p.mu + 1] over the generative model
  of ``data.synthetic`` (the true probabilities ``mu`` are known), estimated
  without label noise on 200,000 samples (its own sd is ~1e-4, negligible
  against the interval widths ~0.03). 120 replicate data sets of n = 400,
  each with 300 resamples: the coverage count is Binomial(120, ~0.95), so
  [0.86, 1] is more than 4 sd wide below 0.95.
  """
  big = data.synthetic(jax.random.key(123), 200_000, 5)
  p, mu = big.probs, big.true_probs
  truth = float(jnp.mean(jnp.sum(p * p, 1) - 2 * jnp.sum(p * mu, 1) + 1))

  def interval_of(key):
    d = data.synthetic(key, 400, 5)
    r = BS.bootstrap(jax.random.fold_in(key, 1), scores.brier, d.probs, d.labels, num_resamples=300)
    return r.lo, r.hi

  keys = jax.random.split(jax.random.key(7), 120)
  lo, hi = jax.jit(jax.vmap(interval_of))(keys)  # the bootstrap itself vmaps over data sets
  covered = np.mean((np.asarray(lo) <= truth) & (truth <= np.asarray(hi)))
  assert 0.86 <= covered <= 1.0, covered


def test_normal_interval_of_conf_ece_is_misplaced_where_percentile_is_not():
  """On a calibrated predictor, ConfECE's resamples sit above the estimate.

  Labels drawn from the predictions themselves (calibrated by construction):
  the resampled ConfECE values are mostly larger than the full-data value,
  so the symmetric normal interval reaches below every resample, while the
  percentile interval stays within them.
  """
  d = data.synthetic(jax.random.key(5), 2000, 10)
  y = jax.random.categorical(jax.random.key(6), jnp.log(d.probs))
  r = BS.bootstrap(jax.random.key(0), metrics.conf_ece, d.probs, y, num_resamples=200)
  samples = np.asarray(r.samples)
  assert np.mean(samples > float(r.estimate)) > 0.75
  lo_n, _ = BS.interval(r.estimate, r.samples, "normal")
  assert float(lo_n) < samples.min() <= float(r.lo)


# --------------------------------------------------------------------------
# Consistency bands (Bröcker & Smith 2007).
# --------------------------------------------------------------------------


def _reliability(p, y, m):
  s = metrics.reliability_stats(p, y, m)
  return np.asarray(s.accuracy), np.asarray(s.counts)


def test_consistency_bands_hold_a_calibrated_predictor_and_reject_a_sharpened_one():
  d = data.synthetic(jax.random.key(11), 3000, 5)
  p = d.probs
  b = BS.consistency_bands(jax.random.key(0), p, 10, num_resamples=300, confidence=0.9)
  np.testing.assert_allclose(  # (one ulp apart on a GPU, whose scatter-adds keep no order)
    np.asarray(b.confidence),
    np.asarray(metrics.reliability_stats(p, d.labels, 10).confidence),
    rtol=1e-6,
  )
  inside = []
  for r in range(8):  # calibrated: labels drawn from p itself
    y = jax.random.categorical(jax.random.key(100 + r), jnp.log(p))
    acc, cnt = _reliability(p, y, 10)
    ok = (cnt >= 20) & np.isfinite(np.asarray(b.lo))
    inside.append(((acc >= np.asarray(b.lo)) & (acc <= np.asarray(b.hi)))[ok])
  frac = np.mean(np.concatenate(inside))
  assert frac >= 0.75, frac  # nominal 0.9
  sharp = jax.nn.softmax(3 * jnp.log(p), axis=-1)  # over-confident
  bs = BS.consistency_bands(jax.random.key(1), sharp, 10, num_resamples=300)
  acc, cnt = _reliability(sharp, d.labels, 10)
  ok = (cnt >= 20) & np.isfinite(np.asarray(bs.lo))
  outside = ~((acc >= np.asarray(bs.lo)) & (acc <= np.asarray(bs.hi)))
  assert np.mean(outside[ok]) > 0.5


def test_consistency_bands_draw_the_same_labels_for_float64_probabilities():
  # the bundled CIFAR-10 logits' softmax, as float32 and as float64 (x64 on): the same key
  # gives the same bands (float64 Gumbel noise drew other labels: 2.5e-2 apart)
  x, _ = data.default_predictions()
  p = np.asarray(jax.nn.softmax(jnp.asarray(x[:2000]), axis=-1))
  key = jax.random.key(3)
  b32 = BS.consistency_bands(key, p, 10, num_resamples=200)
  with jax.enable_x64(True):
    b64 = BS.consistency_bands(key, p.astype(np.float64), 10, num_resamples=200)
    assert b64.lo.dtype == np.float64
    for a, b in ((b32.lo, b64.lo), (b32.hi, b64.hi), (b32.confidence, b64.confidence)):
      np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b), rtol=0, atol=1e-6)


@pytest.mark.parametrize("binning", ["fixed", "quantile"])
def test_consistency_bands_of_the_samples_where_selects(binning):
  """A scattered mask: the bands of the selected rows, against a numpy loop over the
  same draws (Bernoulli(max p) top labels of resampled selected rows); masked rows are
  not checked; eager == jit; bad masks named."""
  rng = np.random.default_rng(3)
  p = rng.dirichlet(np.ones(4) * 0.7, 90).astype(np.float32)
  keep = rng.random(90) < 0.7
  p[np.flatnonzero(~keep)[0]] = np.nan
  k, m, b = int(keep.sum()), 6, 40
  key = jax.random.key(7)
  got = BS.consistency_bands(key, p, m, binning, num_resamples=b, confidence=0.8, where=keep)
  sel = np.flatnonzero(keep)
  c = p[sel].max(1).astype(np.float64)

  def bins(conf):
    if binning == "fixed":
      return np.minimum(np.floor(conf * m), m - 1).astype(int)
    order = np.argsort(conf, kind="stable")
    ids = np.empty(len(conf), int)
    ids[order] = np.ceil((np.arange(len(conf)) + 1) * m / len(conf)).astype(int) - 1
    return ids

  b0 = bins(c)
  cnt = np.bincount(b0, minlength=m)
  conf = np.bincount(b0, c, m) / np.maximum(cnt, 1)
  gaps = []
  for kk in jax.random.split(key, b):
    k_idx, k_lab = jax.random.split(kk)
    idx = np.asarray(jax.random.randint(k_idx, (90,), 0, k))[:k]
    u = np.asarray(jax.random.uniform(k_lab, (90,), jnp.float32))[:k]
    ci = c[idx]
    z = (u < p[sel].max(1)[idx]).astype(np.float64)
    bi = bins(ci)
    n_b = np.bincount(bi, minlength=m)
    with np.errstate(invalid="ignore"):
      gaps.append((np.bincount(bi, z, m) - np.bincount(bi, ci, m)) / n_b)
  gaps = np.array(gaps)
  with warnings.catch_warnings():  # a bin no resample fills: NaN, compared nowhere
    warnings.simplefilter("ignore", RuntimeWarning)
    lo = conf + np.nanquantile(gaps, 0.1, axis=0)
    hi = conf + np.nanquantile(gaps, 0.9, axis=0)
  ok = cnt > 0
  np.testing.assert_array_equal(np.asarray(got.counts), cnt)
  np.testing.assert_allclose(np.asarray(got.confidence)[ok], conf[ok], rtol=1e-5)
  np.testing.assert_allclose(np.asarray(got.lo)[ok], lo[ok], rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(np.asarray(got.hi)[ok], hi[ok], rtol=1e-4, atol=1e-6)
  traced = jax.jit(
    lambda w: BS.consistency_bands(key, p, m, binning, num_resamples=b, confidence=0.8, where=w)
  )(keep)
  np.testing.assert_allclose(np.asarray(traced.hi), np.asarray(got.hi), rtol=1e-6)
  with pytest.raises(ValueError, match="where selects no samples"):
    BS.consistency_bands(key, p, m, binning, num_resamples=b, where=np.zeros(90, bool))
  with pytest.raises(ValueError, match=r"where must have shape \(90,\)"):
    BS.consistency_bands(key, p, m, binning, num_resamples=b, where=keep[:5])
  with pytest.raises(ValueError, match="non-finite"):
    BS.consistency_bands(key, p, m, binning, num_resamples=b, where=np.ones(90, bool))


def test_consistency_bands_quantile_logits_and_bad_input():
  x, _ = data.default_predictions()
  b = BS.consistency_bands(
    jax.random.key(0), x[:500], 5, "quantile", num_resamples=20, from_logits=True
  )
  assert b.lo.shape == (5,) and int(jnp.sum(b.counts)) == 500
  with pytest.raises(ValueError, match="num_bins must be a Python or numpy integer"):
    BS.consistency_bands(jax.random.key(0), x[:50], jnp.array([3, 4]), from_logits=True)
  with pytest.raises(ValueError, match="needs at least that many samples"):
    BS.consistency_bands(jax.random.key(0), x[:5], 10, "quantile", from_logits=True)
  # as many bins as samples is allowed: one sample per bin
  b5 = BS.consistency_bands(
    jax.random.key(0), x[:5], 5, "quantile", num_resamples=2, from_logits=True
  )
  np.testing.assert_array_equal(np.asarray(b5.counts), np.ones(5))
  with pytest.raises(ValueError, match="rows of probs must sum to 1"):
    BS.consistency_bands(jax.random.key(0), np.ones((4, 3)), 2)
  # under jit bad probabilities give NaN bands and confidences (the confidence read 0)
  p = np.array(jax.nn.softmax(x[:500]))
  p[7] = np.nan
  tb = jax.jit(lambda q: BS.consistency_bands(jax.random.key(0), q, 5, num_resamples=4))(p)
  for a in (tb.confidence, tb.lo, tb.hi):
    assert np.isnan(np.asarray(a)).all()
  assert (np.asarray(tb.counts) == -1).all() and float(tb.level) == pytest.approx(0.9)
  with pytest.raises(ValueError, match="confidence"):
    BS.consistency_bands(jax.random.key(0), x[:50], 3, confidence=0, from_logits=True)
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    b90 = BS.consistency_bands(jax.random.key(0), x[:50], 3, num_resamples=2, from_logits=True)
  # two resampled gaps g1 <= g2 per bin: the band is confidence + the (1 ± level) / 2
  # quantiles, g1 + (1 ± level) / 2 (g2 - g1), so its width is level (g2 - g1) and its
  # centre does not depend on the level (same key, same gaps)
  b50 = BS.consistency_bands(
    jax.random.key(0), x[:50], 3, num_resamples=2, confidence=0.5, from_logits=True
  )
  w90, w50 = np.asarray(b90.hi - b90.lo), np.asarray(b50.hi - b50.lo)
  ok = w50 > 1e-3
  assert ok.any()
  np.testing.assert_allclose(w90[ok], 1.8 * w50[ok], rtol=1e-4)
  np.testing.assert_allclose(np.asarray(b90.hi + b90.lo), np.asarray(b50.hi + b50.lo), rtol=1e-5)


def test_consistency_bands_refuse_sizes_before_anything_is_drawn():
  p = np.asarray(jax.nn.softmax(jax.random.normal(jax.random.key(0), (200, 4))))
  keep = p.copy()
  # 2**24 bins: XLA was asked for 134 GB (a raw RESOURCE_EXHAUSTED)
  with pytest.raises(
    ValueError,
    match=r"the resampled gaps per bin \(num_resamples, num_bins\) = \(1,000, 16,777,216\) "
    r"would hold 16,777,216,000 entries, above 2\^31 - 1 = 2,147,483,647: pass fewer "
    r"resamples \(at most 127 for 16,777,216 bins\) or fewer bins",
  ):
    BS.consistency_bands(jax.random.key(0), p, 2**24)
  # 10**9 resamples of 5 bins: 40 GB
  with pytest.raises(ValueError, match=r"\(num_resamples, num_bins\) = \(1,000,000,000, 5\)"):
    BS.consistency_bands(jax.random.key(0), p, 5, num_resamples=10**9)
  with pytest.raises(
    ValueError,
    match=r"the resample indices and keys \(num_resamples, n \+ 4\) = \(20,000,000, 204\)",
  ):
    BS.consistency_bands(jax.random.key(0), p, 5, num_resamples=2 * 10**7)
  with pytest.raises(ValueError, match=r"confidence must be a number, got '0.9' \(str\)"):
    BS.consistency_bands(jax.random.key(0), p, 5, confidence="0.9")
  np.testing.assert_array_equal(p, keep)


def test_public_names():
  assert sorted(BS.__all__) == sorted(
    [
      "METHODS",
      "BootstrapResult",
      "ConsistencyBands",
      "bootstrap",
      "consistency_bands",
      "interval",
      "resample_indices",
    ]
  )
  for name in BS.__all__:
    assert getattr(BS, name).__doc__ or name == "METHODS"


def test_map_batches_traces_the_body_once_and_equals_lax_map():
  # the shared lax.map in batches (bootstrap, rank correlations, kernel
  # predictions): a partial last batch is padded, not traced a second time
  from jaxcal._src.numerics import map_batches

  traces = []

  def f(x):
    traces.append(1)
    return {"s": jnp.sum(x[0]) * x[1], "m": x[0] * 2.0}

  xs = (jnp.arange(21.0).reshape(7, 3), jnp.arange(7.0) - 3.0)
  out = jax.jit(lambda xs: map_batches(f, xs, 3))(xs)
  assert len(traces) == 1
  want = jax.lax.map(f, xs, batch_size=3)
  assert len(traces) > 2  # lax.map traces the full batches and the remainder apart
  for k in want:
    np.testing.assert_array_equal(out[k], want[k])
  assert out["s"].shape == (7,) and out["m"].shape == (7, 3)
  # batches are evened out: 300 elements at most 256 at a time run as 2 x 150
  # (nothing padded), 10 at most 256 at a time as 1 x 10, 7 at most 3 at a
  # time as 3 x 3 (2 padded)
  for size, batch, num_batches, padded in (
    (300, 256, 2, False),
    (10, 256, 1, False),
    (7, 3, 3, True),
  ):
    jaxpr = jax.make_jaxpr(lambda v, b=batch: map_batches(lambda e: e * 2, v, b))(
      jnp.arange(float(size))
    )
    prims = [e.primitive.name for e in jaxpr.jaxpr.eqns]
    (scan,) = [e for e in jaxpr.jaxpr.eqns if e.primitive.name == "scan"]
    assert scan.params["length"] == num_batches, (size, scan.params["length"])
    assert ("concatenate" in prims) == padded, (size, prims)


def test_bootstrap_does_not_read_the_callers_buffer_after_it_returns():
  # jnp.asarray copies an unaligned host array of 100 KiB or more after it
  # returns: a data-loader refilling its buffer changed the estimate (0.0 for 1.0
  # in 13-15 of 20 runs)
  for _ in range(10):
    x = np.zeros(200_001, np.float32)[1:]  # 800 KB, not 64-byte aligned
    x[:] = 1.0
    r = BS.bootstrap(jax.random.key(0), jnp.mean, x, num_resamples=20)
    x[:] = 0.0
    assert (float(r.estimate), float(r.lo), float(r.hi)) == (1.0, 1.0, 1.0)


def test_consistency_bands_resample_rows_and_take_the_central_quantiles():
  """Guards the row resampling and the ``(1 ± confidence)/2`` levels of the bands.

  Four rows: one of confidence 0.6 (bin 3 of 4), three of confidence 1 (bin
  4, always right). A resample holds ``K ~ Binomial(4, 1/4)`` copies of the
  first row, so bin 3's gap is ``S/K - 0.6`` with ``S ~ Binomial(K, 0.6)``
  given ``K >= 1`` (resamples with an empty bin are left out). Its exact law,
  by enumeration, puts the 0.35 quantile (``confidence = 0.3``) at -0.1 with
  wide margins (cdf 0.32 below it, 0.47 at it), so the band's lower end is
  0.6 - 0.1 = 0.5. Without the row resampling the gap is ``z - 0.6`` (lower
  end 0.0); a lower level of 0.175 (``(1 - confidence)/4``) gives 0.0 too.
  """
  c, n = Fraction(3, 5), 4
  law = {}
  for k in range(1, n + 1):
    pk = math.comb(n, k) * Fraction(1, 4) ** k * Fraction(3, 4) ** (n - k)
    for s in range(k + 1):
      g = Fraction(s, k) - c
      law[g] = law.get(g, 0) + pk * math.comb(k, s) * c**s * (1 - c) ** (k - s)
  total = sum(law.values())
  gaps = sorted(law)
  cdf = np.cumsum([float(law[g] / total) for g in gaps])
  lo_gap = float(gaps[int(np.searchsorted(cdf, 0.35))])
  at = gaps.index(Fraction(-1, 10))
  assert lo_gap == -0.1 and cdf[at - 1] < 0.33 and cdf[at] > 0.45  # the margins
  hi_gap = float(gaps[int(np.searchsorted(cdf, 0.65))])
  p = np.array([[0.6, 0.4], [1.0, 0.0], [1.0, 0.0], [1.0, 0.0]], np.float32)
  b = BS.consistency_bands(jax.random.key(5), p, 4, num_resamples=2000, confidence=0.3)
  np.testing.assert_array_equal(np.asarray(b.counts), [0, 0, 1, 3])
  np.testing.assert_allclose(np.asarray(b.lo)[2:], [0.6 + lo_gap, 1.0], atol=1e-6)
  np.testing.assert_allclose(np.asarray(b.hi)[2:], [0.6 + hi_gap, 1.0], atol=1e-6)
  assert np.all(np.isnan(np.asarray(b.lo)[:2]))


def test_statistics_of_zero_size_and_empty_batches():
  """A statistic of zero size (a vmapped metric over no models) and a fit with no
  thresholds go through ``map_batches`` like any other: their results' reshape was by
  -1, which a zero size leaves undetermined (``ZeroDivisionError: integer modulo by
  zero`` from inside JAX)."""
  from jaxcal._src.numerics import map_batches

  r = BS.bootstrap(jax.random.key(0), lambda a: a[:0], jnp.arange(5.0), num_resamples=4)
  assert r.estimate.shape == r.lo.shape == r.hi.shape == r.sd.shape == (0,)
  assert r.samples.shape == (4, 0)
  p = jax.nn.softmax(jax.random.normal(jax.random.key(0), (6, 3)))
  y = jnp.array([0, 1, 2, 0, 1, 2])
  stat = jax.vmap(lambda q, t: metrics.conf_ece(q, t, 3), in_axes=(0, None))
  r = BS.bootstrap(jax.random.key(0), stat, p[None][:0], y, num_resamples=4, sample_axis=(1, 0))
  assert r.estimate.shape == (0,) and r.samples.shape == (4, 0)
  a, b = map_batches(lambda v: (v * 2, jnp.zeros((0,))), jnp.arange(5.0), 2)
  np.testing.assert_array_equal(a, [0.0, 2.0, 4.0, 6.0, 8.0])
  assert b.shape == (5, 0)
  assert map_batches(lambda v: v * 2, jnp.zeros((0, 3)), 2).shape == (0, 3)
