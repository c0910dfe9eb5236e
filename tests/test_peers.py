"""Agreement with the peer implementations, on the real CIFAR logits and on random data.

Each test skips (with the reason) when its peer is not installed; the peers
are test-only dependencies (``dev`` extra: relplot, betacal,
uncertainty-calibration; ``peers`` extra: netcal and torchmetrics, which need
torch).

* relplot 1.0.3 ``smECE`` / ``smECE_sigma``: smooth ECE, same estimator.
* netcal 1.4.0 ``MMCE``: same estimator (netcal builds the n x n matrix, so
  its CIFAR check uses the first 3,000 test samples).
* uncertainty-calibration 0.1.4 ``get_calibration_error`` /
  ``lower_bound_scaling_ce``: debiased CE, same estimator on continuous
  predictions.
* torchmetrics 1.9.0 ``multiclass_calibration_error`` (l1 / l2 / max): same
  norms. Documented difference: torchmetrics' bins are ``[k/m, (k+1)/m)``
  plus a bin of its own for a confidence of exactly 1, jaxcal's are
  ``((j-1)/m, j/m]`` (``metrics.bin_ids``); they agree whenever no confidence lies
  exactly on an edge, which the CIFAR checks assert.
* betacal 1.1.0 ``BetaCalibration("abm")``: same model and fitting rule.
  Documented difference: betacal's scikit-learn solver stops at its
  default tolerance, so jaxcal's fit reaches an equal or lower log loss
  (asserted) and the maps agree to the solver's accuracy, not to 1e-5.
"""

import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))  # --import-mode=importlib
from conftest import load_cifar

from jaxcal import metrics, recalibrate

CIFAR = ["cifar10_resnet110", "cifar100_densenet121", "focal_cifar10_wide_resnet"]


def _probs(name, split="test"):
  z, y = load_cifar(name, split)
  return np.asarray(jax.nn.softmax(jnp.asarray(z))), y


def _random(seed, n=3000, c=7):
  rng = np.random.default_rng(seed)
  z = rng.normal(size=(n, c)) * 2.0
  p = np.asarray(jax.nn.softmax(jnp.asarray(z, jnp.float32)))
  y = np.array([rng.choice(c, p=pi / pi.sum()) for pi in np.exp(z / 1.5)])
  return p, y


# --------------------------------------------------------------------- relplot


@pytest.mark.parametrize("name", CIFAR)
def test_smooth_ece_matches_relplot_on_cifar(name):
  relplot = pytest.importorskip("relplot")
  p, y = _probs(name)
  f, c = relplot.multiclass_logits_to_confidences(p, y, probs=True)
  want, width = relplot.smECE(f.astype(np.float64), c, return_width=True)
  assert float(metrics.smooth_ece_bandwidth(p, y)) == width
  assert float(metrics.smooth_ece(p, y)) == pytest.approx(want, abs=1e-6)


def test_smooth_ece_matches_relplot_on_random_data_and_classwise():
  relplot = pytest.importorskip("relplot")
  p, y = _random(0)
  f, c = relplot.multiclass_logits_to_confidences(p, y, probs=True)
  sig = np.array([0.004, 0.03, 0.2, 0.9])  # even and odd grid sizes, long windows
  got = metrics.smooth_ece(p, y, sig)
  want = [relplot.smECE_sigma(f.astype(np.float64), c, s) for s in sig]
  np.testing.assert_allclose(got, want, atol=1e-6)
  per = [relplot.smECE(p[:, k].astype(np.float64), (y == k) * 1.0) for k in range(p.shape[1])]
  got = float(metrics.smooth_ece(p, y, mode="classwise"))
  assert got == pytest.approx(np.mean(per), abs=1e-6)


# ---------------------------------------------------------------------- netcal


def test_mmce_matches_netcal():
  netcal = pytest.importorskip("netcal.metrics")
  for p, y in [_probs("cifar100_densenet121"), _random(1)]:
    p, y = p[:3000], y[:3000]
    want = netcal.MMCE().measure(p.astype(np.float64), y)
    assert float(metrics.mmce(p, y)) == pytest.approx(want, rel=1e-5)


# ------------------------------------------------------ uncertainty-calibration


@pytest.mark.parametrize("name", ["cifar10_resnet110", "cifar100_densenet121"])
def test_debiased_ce_matches_uncertainty_calibration(name):
  cal = pytest.importorskip("calibration")
  p, y = _probs(name)
  for mode in ("top-label", "marginal"):
    want = cal.get_calibration_error(p, y, p=2, debias=True, mode=mode)
    got = float(metrics.debiased_ce(p, y, mode=mode.replace("-", "_")))
    assert got == pytest.approx(want, rel=1e-5), mode


def test_debiased_ce_matches_uncertainty_calibration_random_bin_counts():
  cal = pytest.importorskip("calibration")
  p, y = _random(2, n=1000)
  ms = np.array([3, 15, 60])
  got = metrics.debiased_ce(p, y, ms, "marginal")
  want = [cal.lower_bound_scaling_ce(p, y, num_bins=int(m), mode="marginal") for m in ms]
  np.testing.assert_allclose(got, want, rtol=1e-5)


# ------------------------------------------------------------------ torchmetrics


def _tm(p, y, norm, m=15):
  torch = pytest.importorskip("torch")
  fc = pytest.importorskip("torchmetrics.functional.classification")
  return float(
    fc.multiclass_calibration_error(
      torch.from_numpy(np.array(p)),
      torch.from_numpy(np.array(y)),
      num_classes=p.shape[1],
      n_bins=m,
      norm=norm,
    )
  )


@pytest.mark.parametrize("norm", ["l1", "l2", "max"])
def test_norms_match_torchmetrics(norm):
  pytest.importorskip("torchmetrics")
  for p, y in [_probs("cifar10_resnet110"), _probs("cifar100_densenet121"), _random(3)]:
    c = p.max(1)
    edges = np.arange(16, dtype=np.float32) / np.float32(15)
    assert not np.isin(c, edges).any()  # no confidence on a bin edge: same bins
    assert float(metrics.conf_ece(p, y, 15, norm=norm)) == pytest.approx(_tm(p, y, norm), abs=2e-6)


def test_norms_differ_from_torchmetrics_only_at_bin_edges():
  pytest.importorskip("torchmetrics")
  # confidences exactly 1/2 and 1: torchmetrics puts 0.5 in [0.5, 1) and 1.0 in
  # a bin of its own; jaxcal puts 0.5 in (0, 0.5] and 1.0 in (0.5, 1].
  p = np.array([[0.5, 0.5], [1.0, 0.0], [0.7, 0.3], [0.2, 0.8]], np.float32)
  y = np.array([1, 1, 0, 1])
  ours = float(metrics.conf_ece(p, y, 2))
  theirs = _tm(p, y, "l1", m=2)
  # jaxcal: bins {0.5} -> |0.5 - 0| ; {1.0, 0.7, 0.8} -> |(1-0)+(0.7-1)+(0.8-1)| = 0.5
  assert ours == pytest.approx((0.5 + 0.5) / 4, abs=1e-7)
  # torchmetrics: [0.5,1): {0.5, 0.7, 0.8} -> |0.5 - 0.3 - 0.2| = 0 ; {1.0} -> 1
  assert theirs == pytest.approx(1.0 / 4, abs=1e-7)


# ----------------------------------------------------------------------- betacal


def test_beta_matches_betacal():
  betacal = pytest.importorskip("betacal")
  eps = float(np.finfo(np.float32).eps)

  def nll(a, b, d, s, t):
    s = np.clip(s.astype(np.float64), eps, 1 - eps)
    u = a * np.log(s) - b * np.log1p(-s) + d
    return float(np.mean(np.logaddexp(0, u) - t * u))

  cases = [("cifar", *load_cifar("cifar10_resnet110", "val")), ("random", *_random(4))]
  for kind, x, y in cases:
    if kind == "cifar":
      rc = recalibrate.fit_beta(x, y, normalize=False)
      p = np.asarray(jax.nn.softmax(jnp.asarray(x)))
      tol = 2e-2  # saturated CIFAR probabilities: betacal's solver stops early
    else:
      rc = recalibrate.fit_beta(x, y, from_logits=False, normalize=False)
      p = x
      tol = 2e-3
    q = np.asarray(rc(x))
    for c in range(p.shape[1]):
      t = (y == c).astype(int)
      ref = betacal.BetaCalibration(parameters="abm")
      ref.fit(p[:, c], t)
      a, b, _ = ref.calibrator_.map_
      d = ref.calibrator_.lr_.intercept_[0]
      ours = nll(float(rc.a[c]), float(rc.b[c]), float(rc.d[c]), p[:, c], t)
      assert ours <= nll(a, b, d, p[:, c], t) + 1e-7, (kind, c)
      np.testing.assert_allclose(q[:, c], ref.predict(p[:, c]), atol=tol)
