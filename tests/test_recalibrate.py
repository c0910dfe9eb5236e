"""jaxcal.recalibrate: the method table, fit / apply / save / load, traceable fits,
solver status, safe defaults and bad input, for the parametric and class-wise
recalibrators (temperature, vector, matrix, dirichlet, platt, histogram,
isotonic, smooth_isotonic).

One real CIFAR-10 ResNet-110 (fit on ``val``, evaluate on ``test``) serves the
quality checks, fitted once per method: the packaged default predictions
(``jaxcal.data.default_predictions``, Gupta & Ramdas's ResNet-110 logits), so
every run, with or without ../shared, checks every recalibrator's quality.
The other CIFAR models are checked by experiments/recalibrator_defaults.py.
"""

import functools
import inspect
import itertools
import json
import os
import re
import subprocess
import sys
import warnings
import zipfile

import jax
import jax.numpy as jnp
import msgpack
import numpy as np
import pytest
from scipy.special import logsumexp

import jaxcal.recalibrate as R
from jaxcal import data
from jaxcal._src.recal.base import METHODS
from jaxcal._src.recal.scaling import logistic_newton
from jaxcal.scores import brier, classification_error, decompose, log_loss

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # --import-mode=importlib
from conftest import FAST_COMPILE_FLAGS, no_new_programs

#: The methods of this file: the scaling and class-wise families of the method table.
MINE = tuple(m for m, row in METHODS.items() if row.module in ("scaling", "binning_methods"))
PARAMETRIC = tuple(m for m in MINE if METHODS[m].module == "scaling")


@pytest.fixture(scope="module")
def c10():
  (zv, yv), (zt, yt) = data.default_predictions("val"), data.default_predictions("test")
  return (
    np.asarray(zv, np.float32),
    np.asarray(yv, np.int32),
    np.asarray(zt, np.float32),
    np.asarray(yt, np.int32),
  )


@pytest.fixture(scope="module")
def fitted(c10):
  zv, yv, _, _ = c10
  return {m: R.fit(m, zv, yv) for m in MINE}


def _synthetic(n=400, c=4, seed=0, scale=2.5):
  """Over-confident logits: labels drawn from softmax(z / scale)."""
  rng = np.random.default_rng(seed)
  z = (rng.normal(size=(n, c)) * scale).astype(np.float32)
  pt = np.exp(z / scale)
  pt /= pt.sum(1, keepdims=True)
  y = (rng.random(n)[:, None] > np.cumsum(pt, 1)).sum(1).clip(0, c - 1).astype(np.int32)
  return z, y


# ----------------------------------------------------------- the method table


def test_method_table_and_typed_fit_functions():
  assert set(MINE) | {"patching", "local_net"} <= set(R.methods())
  assert list(R.methods()) == sorted(R.methods())
  for m in MINE:
    fn = R.fit_function(m)
    assert fn is getattr(R, f"fit_{m}") and fn.__name__ == f"fit_{m}"
    assert "Reference:" in fn.__doc__ and "Example:" in fn.__doc__
  assert R.fit_function("patching").__name__ == "fit_patching"
  assert set(R.__all__) >= {"fit", "methods", "save", "load", "isotonic_regression", "Recalibrator"}
  assert R.fit_patching is R.fit_function("patching")  # lazily imported public names


def test_import_temperature_fit_and_utility_load_no_flax_jaxopt_or_training_code():
  code = (
    "import sys, numpy as np\n"
    "import jaxcal.recalibrate as R\n"
    "z = np.random.default_rng(0).normal(size=(200, 4)).astype('float32')\n"
    "rc = R.fit('temperature', 3 * z, z.argmax(1) % 2, max_iter=20)\n"
    "rc(z).block_until_ready()\n"
    "import jaxcal.utility  # Utility is a plain pytree dataclass, not flax.struct\n"
    "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('flax', 'jaxopt')\n"
    "             or m.startswith('jaxcal._src.train'))\n"
    "print(bad)\n"
  )
  env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
  out = subprocess.run(
    [sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, env=env
  )
  assert out.returncode == 0, out.stderr
  assert out.stdout.strip().splitlines()[-1] == "[]"


def test_misspelt_and_missing_options_are_named():
  z, y = _synthetic(n=60)
  with pytest.raises(ValueError, match=r"unknown option 'max_iters'; did you mean 'max_iter'\?"):
    R.fit("temperature", z, y, max_iters=10)
  with pytest.raises(ValueError, match=r"unknown option 'normalise'.*'normalize'.*Valid options"):
    R.fit("isotonic", z, y, normalise=False)
  with pytest.raises(ValueError, match=r"fit_dirichlet"):
    R.fit("dirichlet", z, y, lam=1.0)
  with pytest.raises(
    ValueError, match=r"fit\('local_net'\) needs the backbone features.*features="
  ):
    R.fit("local_net", z, y)
  with pytest.raises(ValueError, match=r"unknown recalibration method 'temprature' \(did you mean"):
    R.fit("temprature", z, y)


def test_options_passed_on_through_kwargs_are_checked_against_the_target():
  """A fit function taking ``**options`` for another (e.g. ``fit_kcal`` -> ``fit_local_net``)
  names it in ``forwards_options_to``; the option check then knows both sets of names."""
  from jaxcal._src.recal.base import _check_options

  def fit_inner(inputs, labels, *, depth: int = 2, width: int = 8): ...

  def fit_outer(inputs, labels, *, floor: float = 0.0, **inner_options): ...

  _check_options("outer", fit_outer, {"width": 3, "whatever": 1})  # open-ended: any name
  fit_outer.forwards_options_to = fit_inner
  _check_options("outer", fit_outer, {"floor": 1.0, "width": 3})
  with pytest.raises(
    ValueError, match=r"unknown option 'widht'; did you mean 'width'.*floor, depth"
  ):
    _check_options("outer", fit_outer, {"widht": 3})


@pytest.mark.parametrize(
  "method, options, match",
  [
    ("histogram", {"num_bins": 2.7}, "num_bins must be an int"),
    ("histogram", {"num_bins": 0}, "num_bins must be >= 1"),
    ("histogram", {"num_bins": 61}, "num_bins must be <= 60"),
    ("temperature", {"max_iter": 10.5}, "max_iter must be an int"),
    # the solvers count in int32: under x64 2^31 wrapped to a negative limit (0 iterations)
    ("vector", {"max_iter": 2**31}, "max_iter must be <= 2147483647, got 2147483648"),
    ("dirichlet", {"cv_max_iter": 2**31}, "cv_max_iter must be <= 2147483647"),
    # jax.random.key's int64: Python's OverflowError from inside JAX (found by a review helper)
    ("vector", {"seed": 2**63}, "seed must be <= 9223372036854775807, got 9223372036854775808"),
    ("matrix", {"seed": -(2**63) - 1}, "seed must be >= -9223372036854775808"),
    ("temperature", {"tol": float("nan")}, "tol must be a finite number"),
    ("platt", {"tol": -1.0}, "tol must be > 0"),
    ("dirichlet", {"reg_lambda": -1.0}, "reg_lambda must be >= 0"),
    ("matrix", {"reg_grid": ()}, "reg_grid must be a non-empty sequence"),
    ("matrix", {"num_folds": 1}, "num_folds must be >= 2"),
    ("vector", {"reg_mu": "big"}, "reg_mu must be a number"),
    ("temperature", {"from_logits": "yes"}, "from_logits must be True or False"),
    ("isotonic", {"normalize": "no"}, "normalize must be True or False, got 'no'"),
    ("isotonic", {"shared": 1}, "shared must be True or False, got 1"),
    ("histogram", {"normalize": None}, "normalize must be True or False"),
    ("smooth_isotonic", {"normalize": "no"}, "normalize must be True or False"),
    ("platt", {"normalize": "false"}, "normalize must be True or False"),
  ],
)
def test_bad_option_values(method, options, match):
  z, y = _synthetic(n=60)
  with pytest.raises(ValueError, match=match):
    R.fit(method, z, y, **options)


# ----------------------------------------------------------- quality on real predictions


def test_temperature_matches_scipy_lbfgs(c10):
  scipy_optimize = pytest.importorskip("scipy.optimize")
  zv, yv, _, _ = c10
  z = zv.astype(np.float64)

  def nll(theta):
    s = z * np.exp(-theta[0])
    s = s - s.max(1, keepdims=True)
    lse = np.log(np.exp(s).sum(1))
    return float(np.mean(lse - s[np.arange(len(yv)), yv]))

  res = scipy_optimize.minimize(
    nll, np.zeros(1), method="L-BFGS-B", options=dict(gtol=1e-10, ftol=1e-15)
  )
  t_ref = float(np.exp(res.x[0]))
  with jax.enable_x64(True):
    rc = R.fit("temperature", z, yv, tol=1e-10)
  assert abs(float(rc.temperature) - t_ref) < 1e-6 * t_ref
  assert t_ref > 1.1  # this ResNet-110 is overconfident
  rc32 = R.fit("temperature", zv, yv)
  assert abs(float(rc32.temperature) - t_ref) < 1e-4 * t_ref
  assert bool(rc32.converged) and 0 < int(rc32.num_iter) < 200
  u = z / float(rc32.temperature)  # the map: softmax(z / T)
  want = np.exp(u - logsumexp(u, axis=1, keepdims=True))
  np.testing.assert_allclose(np.asarray(rc32(zv)), want, atol=1e-6)


def _logistic_reference(x, t, use):
  """Float64 BFGS fit of ``mean softplus(u) - t u``, ``u = sum_k w_k x_k``, over the used ``k``."""
  scipy_optimize = pytest.importorskip("scipy.optimize")
  cols = np.stack([np.broadcast_to(v, t.shape) for v in x], axis=1)[:, use]

  def nll(w):
    u = cols @ w
    return float(np.mean(np.logaddexp(0, u) - t * u))

  def grad(w):
    return cols.T @ (1 / (1 + np.exp(-(cols @ w))) - t) / len(t)

  res = scipy_optimize.minimize(
    nll, np.zeros(cols.shape[1]), jac=grad, method="BFGS", options={"gtol": 1e-12}
  )
  return res.x


def test_logistic_newton_matches_a_float64_reference():
  # A (2, 3) batch: problem (1, c) has no first feature (a zero feature keeps
  # its weight at init), the others a slope, a second feature and an intercept.
  rng = np.random.default_rng(3)
  n = 3000
  x1 = rng.normal(size=(3, n)) * np.array([[1.0], [3.0], [0.3]])
  x2 = np.abs(rng.normal(size=(3, n)))
  w_true = np.array([[1.5, -0.7, 0.2], [-2.0, 0.5, 1.0], [4.0, 0.1, -1.0]])
  t = (
    rng.random((3, n))
    < 1 / (1 + np.exp(-(w_true[:, :1] * x1 + w_true[:, 1:2] * x2 + w_true[:, 2:])))
  ).astype(float)
  mask = np.array([[1.0], [0.0]])[:, :, None]  # (2, 1, 1)
  feats = (x1[None] * mask, np.broadcast_to(x2, (2, 3, n)), 1.0)
  init = np.full((2, 3, 3), 0.25)
  fit = jax.jit(logistic_newton, static_argnames="max_iter")
  res = fit(
    tuple(jnp.asarray(v, jnp.float32) for v in feats[:2]) + (1.0,),
    jnp.asarray(t, jnp.float32),
    jnp.asarray(init, jnp.float32),
  )
  assert bool(res.converged) and 1 <= int(res.num_iter) <= 10
  w = np.asarray(res.params)
  np.testing.assert_array_equal(w[1, :, 0], 0.25)  # the masked weight never moved
  for c in range(3):
    ref_full = _logistic_reference((x1[c], x2[c], 1.0), t[c], [0, 1, 2])
    ref_masked = _logistic_reference((x1[c], x2[c], 1.0), t[c], [1, 2])
    np.testing.assert_allclose(w[0, c], ref_full, atol=2e-4, rtol=2e-4)
    np.testing.assert_allclose(w[1, c, 1:], ref_masked, atol=2e-4, rtol=2e-4)
  with jax.enable_x64(True):
    res64 = fit(feats, t, init, tol=1e-12)
  assert res64.params.dtype == jnp.float64 and bool(res64.converged)
  np.testing.assert_allclose(
    np.asarray(res64.params)[0, 0],
    _logistic_reference((x1[0], x2[0], 1.0), t[0], [0, 1, 2]),
    rtol=1e-7,
  )


def test_logistic_newton_on_separable_data_and_at_its_iteration_limit():
  # Separable outcomes have no minimiser: the weights grow, stay finite, the
  # loss falls; one iteration is not convergence.
  x = jnp.linspace(-2.0, 2.0, 200)[None]
  t = (x > 0).astype(jnp.float32)
  fit = jax.jit(logistic_newton, static_argnames="max_iter")
  res = fit((x, 1.0), t, jnp.zeros((1, 2)), max_iter=40)
  assert bool(jnp.all(jnp.isfinite(res.params))) and float(res.params[0, 0]) > 5.0
  assert float(res.value) < 0.05 * np.log(2.0)
  one = fit((x, 1.0), t, jnp.zeros((1, 2)), max_iter=1)
  assert int(one.num_iter) == 1 and not bool(one.converged)


@pytest.mark.parametrize("method", ["platt", "beta"])
def test_newton_fits_converge_on_a_rare_class_and_on_separable_outcomes(method):
  # A class seen once (beta's free fit diverges: it is separable) and saturated
  # one-hot logits (every class separable, the Hessian singular at the
  # optimum's approach): the fits settle at working precision, converged,
  # finite and silent.
  rng = np.random.default_rng(0)
  z = (rng.normal(size=(2000, 5)) * 2).astype(np.float32)
  y = rng.integers(0, 4, 2000)
  y[7] = 4
  z2 = np.eye(5, dtype=np.float32)[rng.integers(0, 5, 2000)] * 30
  for zz, yy in ((z, y), (z2, z2.argmax(1))):
    with warnings.catch_warnings():
      warnings.simplefilter("error")
      rc = R.fit(method, zz, yy)
    assert bool(rc.converged) and int(rc.num_iter) < 500  # before the default limit
    q = np.asarray(rc(zz))
    assert np.isfinite(q).all()
  assert (q.argmax(1) == z2.argmax(1)).all()


def test_platt_matches_logistic_regression_reference(c10):
  # Each class: a float64 logistic regression of 1[y = c] on the log-odds of softmax(z).
  zv, yv, _, _ = c10
  rc = R.fit("platt", zv, yv, normalize=False)
  assert bool(rc.converged)
  z = zv.astype(np.float64)
  logp = z - z.max(1, keepdims=True)
  logp = logp - np.log(np.exp(logp).sum(1, keepdims=True))
  s = logp - np.log(-np.expm1(logp))
  for c in range(zv.shape[1]):
    ref = _logistic_reference((s[:, c], 1.0), (yv == c).astype(float), [0, 1])
    np.testing.assert_allclose([float(rc.scale[c]), float(rc.bias[c])], ref, atol=2e-3, rtol=2e-3)
  # the map: sigmoid(a_c s_c + b_c), unnormalised here
  want = 1 / (1 + np.exp(-(s * np.asarray(rc.scale, np.float64) + np.asarray(rc.bias))))
  np.testing.assert_allclose(np.asarray(rc(zv)), want, atol=1e-5)


@pytest.mark.parametrize("method", PARAMETRIC + ("isotonic", "smooth_isotonic"))
def test_default_fit_is_safe(c10, fitted, method):
  """A default fit never raises the test log loss (parametric maps) or the Brier score
  (isotonic maps, whose steps can give 0 to the true class) above the uncalibrated
  model's, nor loses more than one accuracy point. (Histogram binning does lose
  accuracy, as the case study shows: see the test below.)"""
  _, _, zt, yt = c10
  q = fitted[method](zt)
  assert q.shape == zt.shape
  np.testing.assert_allclose(np.asarray(q.sum(1)), 1.0, atol=1e-5)
  acc0 = 1 - float(classification_error(zt, yt, from_logits=True))
  assert 1 - float(classification_error(q, yt)) >= acc0 - 0.01
  if method in PARAMETRIC:
    # every scaling map lowers this model's test log loss (0.204) by 0.008 to 0.02
    assert float(log_loss(q, yt)) < float(log_loss(zt, yt, from_logits=True)) - 0.005
    assert bool(fitted[method].converged), method
  assert float(brier(q, yt)) < float(brier(zt, yt, from_logits=True))


def _odir_objective(z, y, lam, mu, diagonal, weights=None):
  """Float64 value and gradient of Kull et al. (2019)'s ODIR objective at ``x = (W.ravel(), b)``
  (``(a, b)`` when ``diagonal``): the (weighted) mean log loss of ``softmax(z W^T + b)`` +
  ``lam / (C (C - 1)) sum_{i != j} W_ij^2 + mu / C sum b^2``; ``diagonal``: vector scaling
  ``softmax(a z + b)`` with ``lam / C sum (a_c - mean a)^2``."""
  z = np.asarray(z, np.float64)
  n, c = z.shape
  onehot = np.eye(c)[y]
  wts = np.ones(n) if weights is None else np.asarray(weights, np.float64)
  lam_n, mu_n = (lam / c if diagonal else lam / (c * (c - 1))), mu / c
  off = 1.0 - np.eye(c)

  def fun(x):
    w, b = (x[:c] if diagonal else x[: c * c].reshape(c, c)), x[-c:]
    u = (z * w if diagonal else z @ w.T) + b
    u = u - u.max(1, keepdims=True)
    lse = np.log(np.exp(u).sum(1))
    g = wts[:, None] * (np.exp(u - lse[:, None]) - onehot) / wts.sum()
    f = np.sum(wts * (lse - np.sum(onehot * u, 1))) / wts.sum() + mu_n * np.sum(b**2)
    if diagonal:
      f += lam_n * np.sum((w - w.mean()) ** 2)
      gw = np.sum(g * z, 0) + 2 * lam_n * (w - w.mean())
    else:
      f += lam_n * np.sum((w * off) ** 2)
      gw = (g.T @ z + 2 * lam_n * w * off).ravel()
    return f, np.concatenate([gw, g.sum(0) + 2 * mu_n * b])

  return fun


def _odir_reference(z, y, lam, mu, diagonal, weights=None):
  """``(W, b)`` minimising :func:`_odir_objective` (float64 L-BFGS-B from the identity)."""
  scipy_optimize = pytest.importorskip("scipy.optimize")
  c = np.shape(z)[1]
  fun = _odir_objective(z, y, lam, mu, diagonal, weights)
  x0 = np.concatenate([np.ones(c) if diagonal else np.eye(c).ravel(), np.zeros(c)])
  opts = dict(gtol=1e-8, ftol=1e-15, maxiter=20000, maxcor=30)
  x = scipy_optimize.minimize(fun, x0, jac=True, method="L-BFGS-B", options=opts).x
  return (np.diag(x[:c]) if diagonal else x[: c * c].reshape(c, c)), x[-c:]


def test_linear_fits_reach_the_float64_optimum_where_l_bfgs_stalls(c10):
  """Matrix scaling of logits x 1000 (a one-hot softmax at the identity) stalled at 1.0157
  against the optimum 0.9573, and Dirichlet scaling of 600 rows 8e-5 above it (1.6e-3 inside
  ``vmap``), each saying converged: the fits start at temperature scaling's ``I / T`` and
  restart L-BFGS, re-preconditioned, where it stalls."""

  def gap(rc, z, y, lam, kind):
    x = z - logsumexp(z, axis=1, keepdims=True) if kind == "dirichlet" else z
    fun = _odir_objective(x, y, lam, lam, diagonal=False)
    w, b = _odir_reference(x, y, lam, lam, diagonal=False)
    at = np.concatenate([np.asarray(rc.weight, np.float64).ravel(), np.asarray(rc.bias)])
    best = fun(np.concatenate([w.ravel(), b]))[0]
    return (fun(at)[0] - best) / best  # relative to the optimum's objective

  z, y = _synthetic(n=300, c=5, seed=0)
  z = z * np.float32(1000)
  rc = R.fit("matrix", z, y, reg_lambda=1.0)
  assert bool(rc.converged)
  assert gap(rc, z.astype(np.float64), y, 1.0, "matrix") < 1e-6  # (it was 6e-2)
  zv, yv, zt, _ = c10
  zv, yv = zv[:600], yv[:600]
  slack = 16 * float(np.finfo(np.float32).eps)  # a restart's gain that counts as none
  for lam in (1.0, 0.1):
    eager = R.fit("dirichlet", zv, yv, reg_lambda=lam)
    fit = jax.jit(jax.vmap(lambda a, b, lam=lam: R.fit_dirichlet(a, b, reg_lambda=lam)))
    member = jax.tree.map(lambda leaf: leaf[0], fit(np.stack([zv, 0.8 * zv]), np.stack([yv, yv])))
    for rc in (eager, member):
      # converged means within the restart slack: a restart stopped by the two short
      # steps of its empty memory settled lambda = 0.1 at 5e-7 (5x the slack)
      assert bool(rc.converged)
      assert gap(rc, zv.astype(np.float64), yv, lam, "dirichlet") < slack
    # vmap == loop up to the flat directions' freedom (it was 0.70 in a probability, then
    # 5e-3 at lambda = 0.1)
    np.testing.assert_allclose(np.asarray(member(zt)), np.asarray(eager(zt)), atol=3e-3)


def test_cross_validated_odir(c10, fitted):
  for m in ("vector", "matrix", "dirichlet"):
    rc = fitted[m]
    assert rc.cv_nll.shape == (len(R.ODIR_GRID),)
    cv = np.asarray(rc.cv_nll)
    best = int(np.argmin(cv))
    assert float(rc.reg_lambda) == pytest.approx(sorted(R.ODIR_GRID, reverse=True)[best], rel=1e-6)
    assert float(rc.reg_mu) == float(rc.reg_lambda)
    done = cv[np.isfinite(cv)]  # strongest first; the search stops once it is 1 % worse
    assert np.all(done[:-1] <= 1.01 * np.minimum.accumulate(done)[:-1])
  zv, yv, _, _ = c10
  fixed = R.fit("dirichlet", zv, yv, reg_lambda=float(fitted["dirichlet"].reg_lambda))
  assert fixed.cv_nll.shape == (0,)
  # the same fit in two compiled programs: their roundings differ, and the map moves by
  # ~5e-5 along directions where the objective changes by < 1e-7 (1e-3 from the optimum's)
  np.testing.assert_allclose(fixed.weight, fitted["dirichlet"].weight, atol=2e-4)
  # given strengths: the ODIR objective's minimiser, with lambda / (C (C - 1)) on the
  # off-diagonal and mu / C on the intercepts (Dirichlet: on log p), and vector scaling's
  # lambda / C on the scales' spread around their mean
  z64 = zv.astype(np.float64)
  logp = z64 - logsumexp(z64, axis=1, keepdims=True)
  for m, lam, mu, x in (("dirichlet", 1.0, 0.25, logp), ("vector", 2.0, 0.5, zv)):
    rc = R.fit(m, zv, yv, reg_lambda=lam, reg_mu=mu)
    assert float(rc.reg_mu) == mu and float(rc.reg_lambda) == lam
    w, b = _odir_reference(x, yv, lam, mu, diagonal=m == "vector")
    np.testing.assert_allclose(np.asarray(rc.weight), w, atol=2e-3, err_msg=m)
    np.testing.assert_allclose(np.asarray(rc.bias), b, atol=2e-3, err_msg=m)
  # the fitted maps apply softmax(W x + b), x the logits (matrix) or log p (Dirichlet)
  zt = c10[2].astype(np.float64)
  for m, x in (("matrix", zt), ("dirichlet", zt - logsumexp(zt, axis=1, keepdims=True))):
    u = x @ np.asarray(fitted[m].weight, np.float64).T + np.asarray(fitted[m].bias)
    want = np.exp(u - logsumexp(u, axis=1, keepdims=True))
    np.testing.assert_allclose(np.asarray(fitted[m](c10[2])), want, atol=2e-5, err_msg=m)
  guo = R.fit("vector", zv, yv, reg_lambda=0.0, reg_mu=0.0)  # Guo et al.'s, unregularised
  a = np.diag(np.asarray(guo.weight))
  assert np.std(a) > np.std(np.diag(np.asarray(fitted["vector"].weight)))


def test_cv_folds_partition_the_samples():
  from jaxcal._src.recal.scaling import _folds

  f = np.asarray(_folds(103, 5, jax.random.key(0)))
  assert f.shape == (5, 103) and np.all(f.sum(0) == 1)
  assert sorted(f.sum(1)) == [20, 20, 21, 21, 21]


@pytest.mark.parametrize("method", ["temperature", "platt", "beta", "ensemble_temperature"])
def test_another_max_iter_reuses_the_compiled_fit(method):
  """The iteration limit is a loop bound, traced: a fit with another limit compiled the
  whole fit again (L-BFGS or Newton); the same limit gives the same fit."""
  z, y = _synthetic(n=60, c=3)
  first = R.fit(method, z, y, max_iter=200)
  with no_new_programs():
    with pytest.warns(RuntimeWarning, match="did not converge"):
      other = R.fit(method, z, y, max_iter=2)
    again = R.fit(method, z, y, max_iter=200)
  assert int(other.num_iter) <= 2 < int(first.num_iter)
  for a, b in zip(jax.tree.leaves(again), jax.tree.leaves(first)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_another_cv_seed_reuses_the_compiled_fit():
  """The folds' seed is traced: a hyperparameter search over seeds compiled the whole
  cross-validated fit again for each (1.9 s per seed); the new seed's folds differ."""
  z, y = _synthetic(n=40, c=3)
  opts = dict(reg_grid=(8.0, 0.5), num_folds=2)
  first = R.fit("vector", z, y, seed=0, **opts)
  with no_new_programs():
    other = R.fit("vector", z, y, seed=1, **opts)
    again = R.fit("vector", z, y, seed=0, **opts)
  assert not np.array_equal(np.asarray(other.cv_nll), np.asarray(first.cv_nll))
  np.testing.assert_array_equal(np.asarray(again.cv_nll), np.asarray(first.cv_nll))
  np.testing.assert_array_equal(np.asarray(again.weight), np.asarray(first.weight))


def _cv_reference(z, y, grid, diagonal, num_folds=5, seed=0):
  """Kull et al. (2019)'s k-fold choice of the ODIR strength (lambda = mu), as jaxcal documents
  it: folds of the seeded permutation, the pooled held-out log loss / n per strength from
  the strongest down, the search stopped at the first strength 1 % above the best so far
  (later ones inf); returns that curve and the selected strength."""
  z = np.asarray(z, np.float64)
  n = len(y)
  perm = np.asarray(jax.random.permutation(jax.random.key(seed), n))
  fold = np.empty(n, int)
  fold[perm] = np.arange(n) % num_folds
  grid = sorted(grid, reverse=True)
  curve = np.full(len(grid), np.inf)
  for g, lam in enumerate(grid):
    total = 0.0
    for k in range(num_folds):
      held = fold == k
      w, b = _odir_reference(z, y, lam, lam, diagonal, weights=~held)
      u = z @ w.T + b
      logq = u - logsumexp(u, axis=1, keepdims=True)
      total -= logq[held, y[held]].sum()
    curve[g] = total / n
    if curve[g] > 1.01 * curve[:g].min(initial=np.inf):
      break
  return curve, grid[int(np.argmin(curve))]


def test_dirichlet_cv_curve_of_a_small_split_matches_the_float64_procedure(c10):
  """600 rows, the strongest strengths: one fold's fit at lambda = 1e5 stopped 5e-4 above its
  optimum, saying converged (the Jacobi floor, set by the penalty's curvature, stretched a
  nearly flat direction of the loss), and its held-out loss 0.2389 led the curve (0.1868)."""
  zv, yv, _, _ = c10
  zv, yv = zv[:600], yv[:600]
  grid = (1e5, 1e4)
  rc = R.fit("dirichlet", zv, yv, reg_grid=grid)
  z64 = zv.astype(np.float64)
  curve, lam = _cv_reference(z64 - logsumexp(z64, axis=1, keepdims=True), yv, grid, False)
  np.testing.assert_allclose(np.asarray(rc.cv_nll), curve, rtol=2e-5)
  assert float(rc.reg_lambda) == lam


def test_cv_picks_strong_regularisation_when_the_map_would_overfit():
  """Few samples per parameter: unregularised matrix scaling overfits, CV avoids it. The
  held-out curve rises slowly past its minimum (lambda = 100): the search stops at the first
  strength 1 % above the best so far (lambda = 3, though each step rises by less than 1 %),
  as the float64 reference of the procedure does; the grid is given unordered."""
  z, y = _synthetic(n=240, c=5, seed=3)
  grid = (1.0, 1e2, 6.0, 1e3, 2.0, 1e1, 3.0)
  rc = R.fit("matrix", z, y, reg_grid=grid)
  curve, lam = _cv_reference(z, y, grid, diagonal=False)
  assert lam == 1e2 and np.isinf(curve[-2:]).all() and np.isfinite(curve[:-2]).all()
  np.testing.assert_allclose(np.asarray(rc.cv_nll), curve, rtol=2e-5)
  assert float(rc.reg_lambda) == float(rc.reg_mu) == lam
  w, b = _odir_reference(z, y, lam, lam, diagonal=False)
  np.testing.assert_allclose(np.asarray(rc.weight), w, atol=2e-3)
  np.testing.assert_allclose(np.asarray(rc.bias), b, atol=2e-3)
  zt, yt = _synthetic(n=2000, c=5, seed=4)
  free = R.fit("matrix", z, y, reg_lambda=0.0, reg_mu=0.0, max_iter=300)
  assert float(log_loss(rc(zt), yt)) < float(log_loss(free(zt), yt))


def test_classwise_methods_do_what_the_case_study_says(c10, fitted):
  """IR and SIR (normalised) lower the held-out Brier score; HB (unnormalised)
  lowers class-wise miscalibration but costs discrimination and accuracy."""
  zv, yv, zt, yt = c10
  p = jax.nn.softmax(jnp.asarray(zt), axis=1)
  base = decompose(p, yt)
  for m in ("isotonic", "smooth_isotonic"):
    q = fitted[m](zt)
    np.testing.assert_allclose(np.asarray(q.sum(1)), 1.0, atol=1e-5)
    assert float(brier(q, yt)) < float(brier(p, yt))
  cw_hb = R.fit("histogram", zv, yv, normalize=False)(zt)
  d = decompose(cw_hb, yt, require_simplex=False)
  assert float(d.mcb) < float(base.mcb) and float(d.dsc) < float(base.dsc)
  # normalisation only rescales rows
  n_hb = fitted["histogram"](zt)
  np.testing.assert_allclose(
    np.asarray(n_hb), np.asarray(cw_hb / cw_hb.sum(1, keepdims=True)), rtol=1e-5
  )


# ----------------------------------------------------------- numpy references of the case study's R code


def _hb_reference(p, t, x_new, m=15):
  """cw_hb(..., equal_mass=TRUE) of github.com/resinj/calibration_AISTATS26 for one class."""
  from scipy.stats import rankdata

  n = len(p)
  b = np.maximum(np.ceil((rankdata(p) - 1) / n * m), 1).astype(int)
  groups = np.unique(b)
  freq = np.array([t[b == g].mean() for g in groups])
  mins = np.array([p[b == g].min() for g in groups])
  knots = np.r_[0.0, mins[1:]]
  vals = np.r_[0.0, freq]
  return vals[np.searchsorted(knots, x_new, side="right")]  # right-continuous stepfun


def _isoreg(p, t):
  order = np.lexsort((-t, p))
  xs, ys = p[order], t[order].astype(float)
  # PAV (R's isoreg: greatest convex minorant of the cumulative sums)
  blocks = []
  for v in ys:
    blocks.append([1.0, v])
    while len(blocks) > 1 and blocks[-2][1] / blocks[-2][0] > blocks[-1][1] / blocks[-1][0]:
      w, s = blocks.pop()
      blocks[-1][0] += w
      blocks[-1][1] += s
  yf = np.concatenate([np.full(int(w), s / w) for w, s in blocks])
  return xs, yf


def _ir_reference(p, t, x_new):
  xs, yf = _isoreg(p, t)  # as.stepfun(isoreg): left-continuous, flat outside
  return yf[np.clip(np.searchsorted(xs, x_new, side="left"), 0, len(xs) - 1)]


def _sir_reference(p, t, x_new):
  xs, yf = _isoreg(p, t)
  n = len(xs)
  u = np.unique(yf)
  lbin = np.array([np.flatnonzero(yf == v)[0] for v in u]) + 1
  rbin = np.r_[lbin[1:] - 1, n]
  med = (rbin + lbin) // 2
  return np.interp(x_new, np.r_[0.0, xs[med - 1], 1.0], np.r_[0.0, yf[med - 1], 1.0])


@pytest.mark.parametrize(
  "method, ref",
  [("histogram", _hb_reference), ("isotonic", _ir_reference), ("smooth_isotonic", _sir_reference)],
)
def test_classwise_maps_match_reference_code(c10, method, ref):
  zv, yv, zt, yt = c10
  pv = np.asarray(jax.nn.softmax(jnp.asarray(zv), axis=1), np.float64)
  pt = np.asarray(jax.nn.softmax(jnp.asarray(zt), axis=1), np.float64)
  cw = R.fit(method, zv, yv, normalize=False)
  got = np.asarray(cw(zt))
  for c in (0, 3, 9):
    want = ref(pv[:, c], (yv == c).astype(float), pt[:, c])
    np.testing.assert_allclose(got[:, c], want, atol=2e-6, err_msg=f"{method} class {c}")


def test_histogram_bins_of_a_tie_pair_match_reference_code():
  # n = 10, m = 3: a tie pair at sorted positions 3 and 4 has average rank
  # 4.5, so its bin is ceil(3.5 * 3 / 10) = 2 (of 1..3): the rounding that
  # jaxcal's integer form (a m + 2n - 1) // 2n must get right for odd a m
  s = np.array([0.05, 0.1, 0.2, 0.3, 0.3, 0.5, 0.6, 0.7, 0.8, 0.9])
  p = np.stack([1 - s, s], axis=1)
  y = np.array([0, 1, 0, 1, 0, 1, 1, 0, 1, 1])
  grid = np.linspace(0.0, 1.0, 41)
  got = np.asarray(
    R.fit("histogram", p, y, num_bins=3, from_logits=False, normalize=False)(
      np.stack([1 - grid, grid], axis=1)
    )
  )
  for c, x in ((0, 1 - grid), (1, grid)):
    want = _hb_reference(p[:, c], (y == c).astype(float), x, m=3)
    np.testing.assert_allclose(got[:, c], want, atol=1e-6, err_msg=f"class {c}")


def test_classwise_maps_of_empty_bins_and_a_top_pool_below_one_match_reference_code():
  grid = np.linspace(0.0, 1.0, 41)
  x = np.stack([1 - grid, grid], axis=1)
  y = np.array([0, 1, 0, 0, 1, 0, 0, 1, 1, 0])
  # n = 10, m = 5: seven tied scores have average rank 6 (bin 3) between two scores in bin
  # 1 and one in bin 5, so bins 2 and 4 are empty and take the next bin's threshold
  s = np.array([0.1, 0.15] + [0.3] * 7 + [0.7])
  hb = R.fit(
    "histogram", np.stack([1 - s, s], 1), y, num_bins=5, from_logits=False, normalize=False
  )
  want = _hb_reference(s, (y == 1).astype(float), grid, m=5)
  np.testing.assert_allclose(np.asarray(hb(x))[:, 1], want, atol=1e-6)
  # nine tied scores of average rank 5 leave bin 1 empty: scores below them get the
  # frequency of the lowest non-empty bin (the R step function's value from 0), not 0
  s = np.array([0.2] * 9 + [0.7])
  hb = R.fit(
    "histogram", np.stack([1 - s, s], 1), y, num_bins=5, from_logits=False, normalize=False
  )
  want = _hb_reference(s, (y == 1).astype(float), grid, m=5)
  assert want[0] == 4 / 9
  np.testing.assert_allclose(np.asarray(hb(x))[:, 1], want, atol=1e-6)
  # the top PAV pool (0.5, 0.6, 0.7) has the value 2/3 < 1: SIR rises from its median 0.6
  # towards (1, 1)
  s = np.array([0.2] * 7 + [0.5, 0.6, 0.7])
  sir = R.fit("smooth_isotonic", np.stack([1 - s, s], 1), y, from_logits=False, normalize=False)
  want = _sir_reference(s, (y == 1).astype(float), grid)
  np.testing.assert_allclose(np.asarray(sir(x))[:, 1], want, atol=1e-6)


def test_smooth_isotonic_keeps_a_pool_value_at_a_median_of_exactly_one_or_zero():
  # PAV pools {0.2} -> 0 and {0.4, 1, 1, 1} -> 0.75, whose lower median is 1: the anchor
  # (1, 1) sent a score of exactly 1 to 1 while 0.9999 got 0.7499 (IR: 0.75 at both)
  s = np.array([0.2, 0.4, 1.0, 1.0, 1.0], np.float32)
  y = np.array([0, 1, 1, 1, 0])
  sir = R.fit("smooth_isotonic", np.stack([1 - s, s], 1), y, from_logits=False, normalize=False)
  q = np.asarray(sir(np.array([[1e-4, 0.9999], [0.0, 1.0]], np.float32)))
  np.testing.assert_allclose(q[:, 1], [0.75 * (0.9999 - 0.2) / 0.8, 0.75], rtol=1e-6)
  # the same at the bottom for class 0 (scores 1 - s: the pool {0, 0, 0} has median 0)
  np.testing.assert_allclose(q[1, 0], 0.25, rtol=1e-6)


def test_histogram_bins_beyond_int32_products_are_exact():
  # the bin ceil(a m / 2n) of rank a overflowed int32 once 2 n m > 2**31: 234 of
  # n = m = 33,000 samples went to bin 1 (its frequency 0.50108 for 0.5)
  n = m = 33_000
  s = ((np.arange(n) + 0.5) / n).astype(np.float32)  # distinct, sorted
  y = np.arange(n) % 2
  rc = R.fit(
    "histogram", np.stack([1 - s, s], 1), y, from_logits=False, normalize=False, num_bins=m
  )
  b = np.maximum(-(-np.arange(n, dtype=np.int64) * m // n), 1)  # 1-based bin of rank r - 1
  freq = np.bincount(b, weights=y, minlength=m + 1) / np.maximum(np.bincount(b, minlength=m + 1), 1)
  np.testing.assert_array_equal(
    np.asarray(rc(np.stack([1 - s, s], 1)))[:, 1], freq[b].astype(np.float32)
  )


def _big_tie_column():
  """``n = 2**24 + 2**16 + 8`` scores: 8 distinct, then a tie group at 1; labels 90 % ones."""
  n = 2**24 + 2**16 + 8
  s = np.ones(n, np.float32)
  s[:8] = np.arange(1, 9, dtype=np.float32) / 10
  return s, (np.arange(n) % 10 != 0).astype(np.float32)


def test_histogram_counts_a_bin_of_more_than_2_to_the_24_samples_exactly():
  # the per-bin counts were float32 scatter-adds, which stop at 2**24: a tie group of
  # saturated scores (softmax exactly 1) past 2**24 samples got the frequency
  # 0.90352 for 0.9 (the hits over a count stuck at 2**24). One column through the
  # jitted per-class core (_fit_hb: fit_histogram without validation), in a process
  # with XLA's default optimisation (the suite's fast-compile flags run these
  # 2**24-element sorts and searches about 3 times slower): 1.2 GB peak, about 5 s.
  code = inspect.getsource(_big_tie_column) + (
    "import json, numpy as np, jax.numpy as jnp\n"
    "from jaxcal._src.recal.binning_methods import _fit_hb\n"
    "s, t = _big_tie_column()\n"
    "th, vals = _fit_hb(jnp.asarray(s)[:, None], jnp.asarray(t)[:, None], 2)\n"
    "print(json.dumps([np.asarray(th).tolist(), np.asarray(vals).tolist()]))\n"
  )
  env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
  env["XLA_FLAGS"] = " ".join(
    f for f in env.get("XLA_FLAGS", "").split() if f not in FAST_COMPILE_FLAGS
  )
  out = subprocess.run(
    [sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, env=env
  )
  assert out.returncode == 0, out.stderr
  th, vals = json.loads(out.stdout.strip().splitlines()[-1])
  # independent float64 reference of the bin rule max(ceil((r - 1) m / n), 1)
  s, t = _big_tie_column()
  n, m = len(s), 2
  u, size = np.unique(s, return_counts=True)
  a = 2 * (np.cumsum(size) - size) + size - 1  # 2 (average rank - 1) of each distinct score
  b = (np.maximum(-(-a * m // (2 * n)), 1) - 1)[np.searchsorted(u, s)]
  cnt = np.bincount(b, minlength=m)
  assert cnt.max() > 2**24
  want = np.bincount(b, weights=t, minlength=m) / cnt
  np.testing.assert_allclose(vals[0], want, rtol=2e-7)
  assert th == [[1.0]]


def test_histogram_with_one_bin_is_the_class_frequency(tmp_path):
  # num_bins=1 (allowed by the docstring's [1, n]) raised ZeroDivisionError: the
  # (C, 0) thresholds could not go through map_columns
  z, y = _synthetic(n=50, c=3)
  freq = np.bincount(y, minlength=3) / len(y)
  for normalize in (False, True):
    rc = R.fit_histogram(z, y, num_bins=1, normalize=normalize)
    assert rc.thresholds.shape == (3, 0)
    np.testing.assert_allclose(np.asarray(rc.values)[:, 0], freq, rtol=1e-6)
    # every input maps to the class frequencies (they sum to one: normalising keeps them)
    q = np.asarray(rc(_synthetic(n=7, c=3, seed=1)[0]))
    np.testing.assert_allclose(q, np.broadcast_to(freq, (7, 3)), rtol=1e-6)
  path = tmp_path / "hb1.npz"
  R.save(rc, path)
  np.testing.assert_array_equal(np.asarray(R.load(path).values), np.asarray(rc.values))
  traced = jax.jit(lambda z, y: R.fit_histogram(z, y, num_bins=1).values)(z, y)
  np.testing.assert_allclose(np.asarray(traced)[:, 0], freq, rtol=1e-6)


def test_global_isotonic_is_one_map_on_all_pairs(c10):
  """shared=True: one PAV fit on the n·C pairs (p_i[c], 1[y_i = c]) (IRM)."""
  zv, yv, zt, _ = c10
  zv, yv, zt = zv[:1500], yv[:1500], zt[:200]
  pv = np.asarray(jax.nn.softmax(jnp.asarray(zv), axis=1), np.float64)
  pt = np.asarray(jax.nn.softmax(jnp.asarray(zt), axis=1), np.float64)
  rc = R.fit("isotonic", zv, yv, shared=True, normalize=False)
  assert rc.x.shape == (1, pv.size)
  want = _ir_reference(pv.ravel(), np.eye(10)[yv].ravel(), pt.ravel()).reshape(pt.shape)
  np.testing.assert_allclose(np.asarray(rc(zt)), want, atol=2e-6)
  q = R.fit("isotonic", zv, yv, shared=True)(zt)
  np.testing.assert_allclose(np.asarray(q), want / want.sum(1, keepdims=True), atol=1e-5)


# ----------------------------------------------------------- traceable fits


@pytest.mark.parametrize("method", MINE)
def test_eager_apply_is_the_apply_under_jit_bit_for_bit(c10, fitted, method):
  """``rc(x)`` ran op by op eagerly: the unfused softmax rounded otherwise than under
  ``jit`` and landed on the other side of a step of the map (isotonic 0.037, histogram
  0.007 apart at n = 10^4; found by a recompilation review). It is one compiled program."""
  _, _, zt, _ = c10
  rc = fitted[method]
  np.testing.assert_array_equal(rc(zt), jax.jit(lambda z: rc(z))(zt))


TRACEABLE = {
  "temperature": {},
  "vector": {"reg_grid": (10.0, 0.1), "num_folds": 2},
  "matrix": {"reg_grid": (10.0, 0.1), "num_folds": 2},
  "dirichlet": {"reg_grid": (10.0, 0.1), "num_folds": 2},
  "platt": {},
  "histogram": {"num_bins": 5},
  "isotonic": {},
  "smooth_isotonic": {},
}


@pytest.mark.parametrize(
  "method",
  # matrix shares its traced core (_fit_linear) with dirichlet: slow twin
  [pytest.param(m, marks=pytest.mark.slow) if m == "matrix" else m for m in TRACEABLE],
)
def test_jit_of_vmapped_fit_equals_a_loop_of_eager_fits(method):
  """One compiled call fits three data sets; each equals its own eager fit. Two
  more members hold bad data (a NaN logit, a label out of range): their fitted
  arrays are NaN and they predict NaN, never plausible parameters."""
  opts = TRACEABLE[method]
  fn = R.fit_function(method)
  zs, ys = zip(*(_synthetic(n=150, c=4, seed=s) for s in range(3)))
  z, y = np.stack(zs + zs[:2]), np.stack(ys + ys[:2])
  z[3, 7, 1] = np.nan
  y[4, 9] = 4  # C = 4
  batched = jax.jit(jax.vmap(lambda a, b: fn(a, b, **opts)))(z, y)
  for i in (3, 4):
    bad = jax.tree.map(lambda leaf: leaf[i], batched)
    for leaf in jax.tree.leaves(bad):
      if jnp.issubdtype(leaf.dtype, jnp.floating):
        assert np.isnan(np.asarray(leaf)).all(), (method, i)
    assert not bool(getattr(bad, "converged", False))
    assert np.isnan(np.asarray(bad(z[0]))).all()
  assert type(batched) is type(fn(z[0], y[0], **opts))
  for i in range(3):
    eager = fn(z[i], y[i], **opts)
    one = jax.tree.map(lambda leaf: leaf[i], batched)
    # iterative fits agree to the solver's tolerance; compare what they predict
    np.testing.assert_allclose(np.asarray(one(z[i])), np.asarray(eager(z[i])), atol=2e-4)
    if hasattr(eager, "reg_lambda"):
      assert float(one.reg_lambda) == float(eager.reg_lambda)
    if not hasattr(eager, "converged"):  # closed-form fits: identical arrays
      for a, b in zip(jax.tree.leaves(eager), jax.tree.leaves(one)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("method", ["histogram", "isotonic", "vector", "platt", "beta"])
def test_fit_under_jit_with_the_labels_closed_over(method):
  """Concrete labels closed over by a user's jit (the logits traced): the
  missing-class check ran on the host and read a tracer (TracerArrayConversionError);
  it is checked at trace time, and the fit equals the eager one."""
  z, y = _synthetic(n=150, c=4, seed=1)
  opts = TRACEABLE.get(method, {})
  eager = R.fit(method, z, y, **opts)
  labels = jnp.asarray(y)  # a device array made outside the jit: concrete inside it
  rc = jax.jit(lambda a: R.fit(method, a, labels, **opts))(z)
  np.testing.assert_allclose(np.asarray(rc(z)), np.asarray(eager(z)), atol=2e-4)
  missing = jnp.asarray(np.where(y == 3, 0, y))  # class 3 absent: refused at trace time
  with pytest.raises(ValueError, match="needs every class.*1 of C = 4 classes"):
    jax.jit(lambda a: R.fit(method, a, missing, **opts))(z)


def test_temperature_for_bootstrap_resamples_in_one_call(c10):
  zv, yv, _, _ = c10
  zv, yv = jnp.asarray(zv[:2000]), jnp.asarray(yv[:2000])
  idx = jax.random.randint(jax.random.key(0), (8, 2000), 0, 2000)
  boot = jax.jit(jax.vmap(lambda i: R.fit_temperature(zv[i], yv[i]).temperature))(idx)
  loop = [float(R.fit_temperature(zv[i], yv[i]).temperature) for i in idx]
  np.testing.assert_allclose(np.asarray(boot), loop, rtol=1e-4)
  assert np.std(loop) > 0


def test_not_converged_warns_eagerly_and_flags_under_jit():
  z, y = _synthetic()
  with pytest.warns(RuntimeWarning, match="did not converge in 2 iterations"):
    rc = R.fit("platt", z, y, max_iter=2)
  assert not bool(rc.converged) and int(rc.num_iter) == 2
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    flag = jax.jit(lambda a, b: R.fit_temperature(a, b, max_iter=1).converged)(z, y)
  assert not bool(flag)
  ok = R.fit("temperature", z, y)
  assert bool(ok.converged) and int(ok.num_iter) >= 1


# ----------------------------------------------------------- pytrees, jit, save / load


def test_save_load_round_trip_every_method(c10, fitted, tmp_path):
  _, _, zt, _ = c10
  z = zt[:64]
  for (m, rc), ext in itertools.product(fitted.items(), ("rc", "msgpack")):
    path = tmp_path / f"{m}.{ext}"  # .msgpack: MessagePack; any other suffix: .npz
    R.save(rc, path)
    assert zipfile.is_zipfile(path) == (ext != "msgpack")
    if ext == "msgpack":
      doc = msgpack.unpackb(path.read_bytes())
      assert json.loads(doc["header"])["method"] == m
    back = R.load(path)
    assert type(back) is type(rc) and back.method == m
    assert back.from_logits == rc.from_logits and back.num_classes == 10
    for a, b in zip(jax.tree.leaves(rc), jax.tree.leaves(back)):
      np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=m)
    np.testing.assert_array_equal(np.asarray(back(z)), np.asarray(rc(z)), err_msg=m)


def test_load_reads_an_npz_archive_saved_under_a_msgpack_name(fitted, tmp_path):
  path = tmp_path / "old.msgpack"  # jaxcal 0.1.0 wrote .npz whatever the suffix
  R.save(fitted["temperature"], tmp_path / "old.npz")
  path.write_bytes((tmp_path / "old.npz").read_bytes())
  assert float(R.load(path).temperature) == float(fitted["temperature"].temperature)


def _msgpack_variant(good, dst, edit):
  doc = msgpack.unpackb(good.read_bytes())
  edit(doc)
  dst.write_bytes(msgpack.packb(doc, use_bin_type=True))


def test_load_rejects_bad_msgpack_files_with_the_problem(fitted, tmp_path):
  good = tmp_path / "ts.msgpack"
  R.save(fitted["temperature"], good)
  key = "temperature"

  def entry(**kw):
    return lambda d: d["arrays"][key].update(kw)

  cases = {
    "short": (entry(data=b"\0" * 3), "claims shape () (4 bytes), holds 3"),
    "object": (entry(dtype="|O"), "the header says"),
    "nodtype": (entry(dtype=None), "bad dtype"),
    "negshape": (entry(shape=[-1]), "bad shape [-1]"),
    "noheader": (lambda d: d.pop("header"), "no jaxcal header"),
    "noarray": (lambda d: d["arrays"].pop(key), "lacks it"),
  }
  for name, (edit, msg) in cases.items():
    dst = tmp_path / f"{name}.msgpack"
    _msgpack_variant(good, dst, edit)
    with pytest.raises(ValueError, match=re.escape(msg)):
      R.load(dst)
  cut = tmp_path / "cut.msgpack"
  cut.write_bytes(good.read_bytes()[:20])
  with pytest.raises(ValueError, match="not a MessagePack document, or truncated"):
    R.load(cut)


def _header(path):
  with np.load(path, allow_pickle=False) as f:
    return json.loads(str(f["__header__"]))


def _rewrite(src, dst, header=None, arrays=None, drop=()):
  with np.load(src, allow_pickle=False) as f:
    items = {k: f[k] for k in f.files if k not in drop}
  if header is not None:
    items["__header__"] = np.array(json.dumps(header))
  items.update(arrays or {})
  with open(dst, "wb") as fh:
    np.savez(fh, **items)


def test_load_rejects_bad_files_with_the_file_and_the_problem(fitted, tmp_path):
  good = tmp_path / "ts.npz"
  R.save(fitted["temperature"], good)
  raw = good.read_bytes()
  cases = {}
  (tmp_path / "empty.npz").write_bytes(b"")
  cases["empty.npz"] = "the file is empty"
  (tmp_path / "cut.npz").write_bytes(raw[: len(raw) // 2])
  cases["cut.npz"] = "not an .npz"
  (tmp_path / "junk.msgpack").write_bytes(b"\x2a")  # msgpack of a bare int
  cases["junk.msgpack"] = "no jaxcal header"
  with open(tmp_path / "plain.npz", "wb") as fh:
    np.savez(fh, x=np.zeros(3))
  cases["plain.npz"] = "no jaxcal header"
  h = _header(good)
  _rewrite(good, tmp_path / "other.npz", header=dict(h, method="dirichlet"))
  cases["other.npz"] = "needs the array 'weight'"
  _rewrite(good, tmp_path / "nomethod.npz", header=dict(h, method="nope"))
  cases["nomethod.npz"] = "unknown recalibration method 'nope'"
  _rewrite(good, tmp_path / "badjson.npz", arrays={"__header__": np.array("{not json")})
  cases["badjson.npz"] = "the header is not JSON"
  _rewrite(good, tmp_path / "c0.npz", header={**h, "static": {**h["static"], "num_classes": 0}})
  cases["c0.npz"] = "num_classes is 0"
  _rewrite(good, tmp_path / "shape.npz", arrays={"a:temperature": np.ones(3, np.float32)})
  cases["shape.npz"] = "the header says"
  h2 = json.loads(json.dumps(h))
  h2["arrays"]["temperature"]["shape"] = [3]
  _rewrite(
    good, tmp_path / "shape2.npz", header=h2, arrays={"a:temperature": np.ones(3, np.float32)}
  )
  cases["shape2.npz"] = r"array 'temperature' has shape \(3,\), expected 0 axes"
  _rewrite(good, tmp_path / "missing.npz", drop=("a:num_iter",))
  cases["missing.npz"] = "archive lacks it"
  for name, match in cases.items():
    with pytest.raises(ValueError, match=match) as e:
      R.load(tmp_path / name)
    assert name in str(e.value)
  with pytest.raises(ValueError, match="no such file"):
    R.load(tmp_path / "absent.npz")
  with pytest.raises(ValueError, match="a folder, not a file"):
    R.load(tmp_path)


def test_load_rejects_forged_headers_dtypes_and_shapes(tmp_path):
  """Files that differ from a good one in one header entry or one array's dtype."""
  good = tmp_path / "ts.npz"
  R.save(R.fit_temperature(*_synthetic(n=100)), good)
  h = _header(good)
  t = {"a:temperature": np.ones((), np.float32)}
  pad = json.dumps(h) + " " * (1 << 20)  # valid JSON, over the 1 MiB header limit
  platt = {**h, "method": "platt", "arrays": {**h["arrays"]}}
  platt["arrays"]["scale"] = {"dtype": "<f4", "shape": [4]}
  platt["arrays"]["bias"] = {"dtype": "<f4", "shape": [3]}
  words = {**h, "arrays": {**h["arrays"], "temperature": {"dtype": "<U3", "shape": []}}}
  cases = {
    "f8": ({"arrays": {"a:temperature": np.ones((), np.float64)}}, r"is <f8\[\], the header says"),
    "version": ({"header": {**h, "version": 1}}, "format version 1; this jaxcal reads 2"),
    "format": ({"header": {**h, "format": "other"}}, "not a jaxcal recalibrator header"),
    "cbool": (
      {"header": {**h, "static": {**h["static"], "num_classes": True}}},
      "num_classes is True, not a positive int",
    ),
    "big": ({"arrays": {"__header__": np.array(pad)}}, "the header claims 4,"),
    "str": (
      {"header": words, "arrays": {"a:temperature": np.array("abc")}},
      "array 'temperature' has unsupported dtype <U3",
    ),
    "platt": (
      {
        "header": platt,
        "arrays": {**t, "a:scale": np.ones(4, np.float32), "a:bias": np.ones(3, np.float32)},
      },
      r"array 'bias' has shape \(3,\), expected \(4,\)",
    ),
  }
  for name, (kw, match) in cases.items():
    _rewrite(good, tmp_path / f"{name}.npz", **kw)
    with pytest.raises(ValueError, match=match):
      R.load(tmp_path / f"{name}.npz")


def test_load_rejects_values_that_no_fit_writes(fitted, tmp_path):
  """A file whose arrays have the right dtype and shape but impossible values.

  A temperature of -1 loaded and predicted ``softmax(-z)`` (valid-looking
  rows, the top class never the input's), ensemble weights of ``[1, 1, 1]``
  rows that sum to 3, and reversed isotonic knots shifted predictions by 0.67.
  """
  cases = {
    "temperature": (
      "temperature",
      np.float32(-1.0),
      r"temperature must be finite and > 0 \(found -1\)",
    ),
    "ensemble_temperature": (
      "weights",
      np.ones(3, np.float32),
      "weights must be >= 0 and summing to 1",
    ),
    "isotonic": ("x", lambda a: a[:, ::-1].copy(), "x must be non-decreasing along its last axis"),
    "histogram": ("values", lambda a: a + 1.0, r"values must be in \[0, 1\] \(found 1\."),
  }
  fits = {m: fitted[m] if m in fitted else R.fit(m, *_synthetic(n=200)) for m in cases}
  for method, (field, value, match) in cases.items():
    good = tmp_path / f"{method}.npz"
    R.save(fits[method], good)
    with np.load(good, allow_pickle=False) as f:
      old = f[f"a:{field}"]
    new = value(old) if callable(value) else np.asarray(value, old.dtype)
    for path in (tmp_path / f"bad_{method}.npz", tmp_path / f"bad_{method}.msgpack"):
      if path.suffix == ".npz":
        _rewrite(good, path, arrays={f"a:{field}": new})
      else:
        R.save(fits[method], path)
        doc = msgpack.unpackb(path.read_bytes())
        doc["arrays"][field]["data"] = new.tobytes()
        path.write_bytes(msgpack.packb(doc, use_bin_type=True))
      with pytest.raises(ValueError, match=f"{path.name}.*its {match}"):
        R.load(path)
  # a float field stored as another dtype that the header also claims: bool True as 1.0
  good = tmp_path / "temperature.npz"
  h = _header(good)
  h["arrays"]["temperature"]["dtype"] = "|b1"
  _rewrite(good, tmp_path / "tb.npz", header=h, arrays={"a:temperature": np.array(True)})
  with pytest.raises(ValueError, match="its temperature is bool, not floating point"):
    R.load(tmp_path / "tb.npz")


def test_load_rejects_static_flags_that_are_not_booleans(tmp_path):
  """A forged ``normalize="no"`` would otherwise load and act as True."""
  good = tmp_path / "hb.npz"
  R.save(R.fit_histogram(*_synthetic(n=100)), good)
  h = _header(good)
  for field, value in [("normalize", "no"), ("from_logits", 1), ("normalize", None)]:
    _rewrite(good, tmp_path / "bad.npz", header={**h, "static": {**h["static"], field: value}})
    with pytest.raises(ValueError, match=f"bad.npz.*the header's {field} is {value!r}, not true"):
      R.load(tmp_path / "bad.npz")


def test_load_reads_no_data_before_checking_sizes(fitted, tmp_path):
  """A .npy header claiming 10^12 rows is refused from its header alone."""
  good = tmp_path / "hb.npz"
  R.save(fitted["histogram"], good)
  forged = tmp_path / "forged.npz"
  with zipfile.ZipFile(good) as zin, zipfile.ZipFile(forged, "w") as zout:
    for info in zin.infolist():
      body = zin.read(info)
      if info.filename == "a:values.npy":
        head = np.lib.format.header_data_from_array_1_0(np.zeros((1, 1), np.float32))
        head["shape"] = (10**12, 15)
        import io

        buf = io.BytesIO()
        np.lib.format.write_array_header_1_0(buf, head)
        body = buf.getvalue() + body[-64:]
      zout.writestr(info.filename, body)
  with pytest.raises(ValueError, match=r"claims shape \(1000000000000, 15\)"):
    R.load(forged)
  deflated = tmp_path / "deflated.npz"
  with zipfile.ZipFile(good) as zin, zipfile.ZipFile(deflated, "w", zipfile.ZIP_DEFLATED) as zout:
    for info in zin.infolist():
      zout.writestr(info.filename, zin.read(info))
  with pytest.raises(ValueError, match="is compressed"):
    R.load(deflated)


def test_save_refuses_a_vmapped_batch(tmp_path):
  zs, ys = zip(*(_synthetic(n=100, seed=s) for s in range(2)))
  batch = jax.vmap(R.fit_temperature)(np.stack(zs), np.stack(ys))
  with pytest.raises(ValueError, match="saved one at a time"):
    R.save(batch, tmp_path / "b.npz")


def test_fitted_objects_are_pytrees_usable_under_jit(c10, fitted):
  _, _, zt, _ = c10
  z = jnp.asarray(zt[:64])
  for m, rc in fitted.items():
    leaves = jax.tree.leaves(rc)
    assert leaves and all(isinstance(x, jax.Array) for x in leaves), m
  apply = jax.jit(lambda r, x: r.apply(x))
  # smooth isotonic maps have steep segments (slopes in the hundreds between close
  # pool medians): on a GPU the fused (jit) softmax can differ from the eager one by
  # an ulp, which such a slope turns into ~1e-5. On CPU the results are identical.
  for m, atol in (("dirichlet", 1e-6), ("histogram", 1e-6), ("smooth_isotonic", 5e-5)):
    np.testing.assert_allclose(
      np.asarray(apply(fitted[m], z)), np.asarray(fitted[m](z)), rtol=1e-5, atol=atol, err_msg=m
    )


def test_bad_rows_give_nan_rows_under_jit(c10, fitted):
  """Under jit, bad inputs give NaN rows, never plausible probabilities (eager calls raise).

  ``rc(x)`` checks its input row by row (a bad row becomes NaN, the others keep
  their values: one NaN logit used to make every row NaN); ``rc.apply`` on a row
  holding NaN returns NaN in that row only: the step and clipped maps (isotonic,
  histogram, smooth isotonic) and ``normalize_rows`` (Platt) used to turn it into
  a grid value or the uniform row.
  """
  _, _, zt, _ = c10
  z = zt[:64].copy()
  bad = z.copy()
  bad[5, 2] = np.nan
  run = jax.jit(
    lambda rcs, x: ({m: r(x) for m, r in rcs.items()}, {m: r.apply(x) for m, r in rcs.items()})
  )
  good, _ = run(fitted, z)
  called, applied = run(fitted, bad)
  for m in fitted:
    np.testing.assert_allclose(np.asarray(good[m]).sum(1), 1.0, atol=1e-5, err_msg=m)
    c = np.asarray(called[m])
    assert np.isnan(c[5]).all(), m
    np.testing.assert_array_equal(
      np.delete(c, 5, axis=0), np.delete(np.asarray(good[m]), 5, axis=0)
    )
    a = np.asarray(applied[m])
    assert np.isnan(a[5]).all() and np.isfinite(np.delete(a, 5, axis=0)).all(), m
  with pytest.raises(ValueError, match="NaN"):
    fitted["isotonic"](bad)


def test_probability_inputs(c10):
  zv, yv, zt, _ = c10
  pv = jax.nn.softmax(jnp.asarray(zv), axis=1)
  pt = jax.nn.softmax(jnp.asarray(zt[:100]), axis=1)
  for m in ("temperature", "isotonic"):
    a = R.fit(m, zv, yv)(zt[:100])
    b = R.fit(m, pv, yv, from_logits=False)(pt)
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-4, err_msg=m)


# ----------------------------------------------------------- bad input


def test_bad_input(c10, fitted):
  zv, yv, zt, _ = c10
  with pytest.raises(ValueError, match="unknown recalibration method 'nope'"):
    R.fit("nope", zv, yv)
  bad = zv.copy()
  bad[3, 2] = np.inf
  with pytest.raises(ValueError, match="non-finite"):
    R.fit("temperature", bad, yv)
  bad[3, 2] = np.nan
  with pytest.raises(ValueError, match="NaN"):
    R.fit("isotonic", bad, yv)
  with pytest.raises(ValueError, match="sum to 1"):
    R.fit("histogram", 0.5 * np.asarray(jax.nn.softmax(zv)), yv, from_logits=False)
  with pytest.raises(ValueError, match=r"labels must lie in \[0, 10\)"):
    R.fit("vector", zv, np.where(yv == 0, 10, yv))
  with pytest.raises(ValueError, match="non-finite"):
    fitted["platt"](np.full((2, 10), np.inf, np.float32))
  assert np.isfinite(zv).all()  # nothing the caller passed was modified


@pytest.mark.parametrize("method", MINE)
def test_fitted_on_ten_classes_applied_to_eight_raises(fitted, method):
  z8 = np.zeros((5, 8), np.float32)
  with pytest.raises(ValueError, match=r"fitted on C = 10 classes but the inputs have C = 8"):
    fitted[method](z8)


@pytest.mark.parametrize(
  "method", ["vector", "matrix", "dirichlet", "platt", "histogram", "isotonic", "smooth_isotonic"]
)
def test_missing_class_in_calibration_split_is_named(method):
  z = np.random.default_rng(0).normal(size=(40, 4)).astype(np.float32)
  y = np.array([0, 1, 3] * 13 + [0])  # class 2 never occurs
  with pytest.raises(ValueError, match=rf"'{method}' needs every class.*classes 2\)"):
    R.fit(method, z, y)


def test_temperature_does_not_need_every_class():
  z = np.random.default_rng(0).normal(size=(40, 4)).astype(np.float32)
  rc = R.fit("temperature", z, np.array([0, 1, 3] * 13 + [0]))
  assert float(rc.temperature) > 0


def test_public_train_module_reexports_private_one():
  import jaxcal
  from jaxcal import train
  from jaxcal._src import train as private

  assert "train" in dir(jaxcal)
  assert sorted(train.__all__) == sorted(private.__all__)
  for name in train.__all__:
    assert getattr(train, name) is getattr(private, name)


# ----------------------------------------------------------- the contract's helpers


def test_a_linear_fit_that_diverges_on_finite_logits_raises_instead_of_returning_nan():
  # one calibration row with a logit of 1e20 made vector, matrix and Dirichlet
  # scaling fit NaN parameters (every prediction NaN) behind only a convergence warning
  rng = np.random.default_rng(6)
  z = (rng.normal(size=(60, 3)) * 3).astype(np.float32)
  y = rng.integers(0, 3, 60)
  z[0] = [1e20, 0.0, 0.0]
  for method, what in (("vector", "logit"), ("matrix", "logit"), ("dirichlet", "log-probability")):
    with warnings.catch_warnings():
      warnings.simplefilter("ignore", RuntimeWarning)
      with pytest.raises(ValueError, match=rf"{method} scaling diverged: .* \|{what}\| is 1e\+20"):
        R.fit(method, z, y)
  z[0] = [3.0, 0.0, 0.0]  # the same data with an ordinary row: a finite fit, no error
  rc = R.fit("vector", z, y)
  assert np.isfinite(np.asarray(rc.weight)).all() and np.isfinite(np.asarray(rc(z))).all()


def test_prepare_fit_names_at_most_ten_missing_classes():
  from jaxcal._src.recal.base import prepare_fit

  for c, shown in (
    (11, "1, 2, 3, 4, 5, 6, 7, 8, 9, 10)"),
    (12, "1, 2, 3, 4, 5, 6, 7, 8, 9, 10 ...)"),
  ):
    z, y = np.zeros((4, c), np.float32), np.zeros(4, np.int32)
    with pytest.raises(ValueError, match=re.escape(f"{c - 1} of C = {c} classes have no sample")):
      prepare_fit(z, y, from_logits=True, method="vector", require_all_classes=True)
    with pytest.raises(ValueError, match=re.escape(f"(classes {shown}") + "$"):
      prepare_fit(z, y, from_logits=True, method="vector", require_all_classes=True)


def test_prepare_fit_under_jit_flags_bad_data_and_fits_zeros_instead():
  """Traced: the flag is False for a missing class, a NaN logit or a label out of range
  (each alone), and the arrays of a bad data set come back as zeros with label 0."""
  from jaxcal._src.recal.base import prepare_fit

  run = jax.jit(
    lambda z, y: prepare_fit(z, y, from_logits=True, method="vector", require_all_classes=True)
  )
  z = np.arange(12, dtype=np.float32).reshape(4, 3) - 5.0
  y = np.array([0, 1, 2, 1], np.int32)
  x, yy, ok = run(z, y)
  assert bool(ok)
  np.testing.assert_array_equal(np.asarray(x), z)
  np.testing.assert_array_equal(np.asarray(yy), y)
  nan = z.copy()
  nan[1, 2] = np.nan
  for zb, yb in ((z, np.array([0, 1, 0, 1])), (nan, y), (z, np.array([0, 1, 2, 3]))):
    x, yy, ok = run(zb, yb.astype(np.int32))
    assert not bool(ok)
    np.testing.assert_array_equal(np.asarray(x), 0.0)
    np.testing.assert_array_equal(np.asarray(yy), 0)
  # without require_all_classes a missing class is no problem
  ok = jax.jit(lambda z, y: prepare_fit(z, y, from_logits=True, method="temperature")[2])
  assert bool(ok(z, np.array([0, 1, 0, 1], np.int32)))


def test_fold_fit_makes_floating_fields_nan_and_converged_false():
  from jaxcal._src.recal.base import fold_fit

  rc = R.TemperatureScaling(
    temperature=jnp.asarray(1.5),
    num_iter=jnp.asarray(7, jnp.int32),
    converged=jnp.asarray(True),
    num_classes=3,
  )
  assert fold_fit(rc, None) is rc
  good = fold_fit(rc, jnp.asarray(True))
  assert float(good.temperature) == 1.5 and bool(good.converged) and int(good.num_iter) == 7
  bad = fold_fit(rc, jnp.asarray(False))
  assert np.isnan(float(bad.temperature)) and not bool(bad.converged)
  assert int(bad.num_iter) == 7 and bad.num_classes == 3
  assert np.isnan(np.asarray(bad(np.zeros((2, 3), np.float32)))).all()


def test_hand_built_recalibrators_take_host_values_and_refuse_bad_ones():
  """A recalibrator built by hand from Python numbers, lists or numpy arrays applies like
  one built from JAX arrays (a Python float temperature raised AttributeError), eagerly and
  closed over by jit; values a file could not load are refused by field name (a numpy
  temperature of -1 predicted softmax(-z), valid-looking rows)."""
  z = np.random.default_rng(0).normal(size=(6, 3)).astype(np.float32)
  want = np.asarray(jax.nn.softmax(z / 1.5))
  for t in (1.5, np.float32(1.5), np.array(1.5), jnp.asarray(1.5)):
    rc = R.TemperatureScaling(temperature=t, num_iter=0, converged=True, num_classes=3)
    np.testing.assert_allclose(np.asarray(rc(z)), want, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(jax.jit(lambda x: rc(x))(z)), want, rtol=1e-6)
    assert type(rc.temperature) is type(t)  # the caller's object is not modified
  platt = R.PlattScaling(
    scale=[2.0] * 3, bias=np.zeros(3), num_iter=0, converged=True, num_classes=3, from_logits=False
  )
  logit = np.log(want) - np.log1p(-want)
  q = jax.nn.sigmoid(2 * logit)
  np.testing.assert_allclose(
    np.asarray(platt(want)), np.asarray(q / q.sum(-1, keepdims=True)), rtol=1e-5
  )
  temp = functools.partial(R.TemperatureScaling, num_iter=0, converged=True, num_classes=3)
  bad = (
    (temp(temperature=-1.0), ValueError, r"TemperatureScaling.temperature must be finite and > 0"),
    (temp(temperature=float("nan")), ValueError, r"TemperatureScaling.temperature holds NaN"),
    (temp(temperature=[1.5]), ValueError, r"field 'temperature' has shape \(1,\), expected"),
    (temp(temperature="1.5"), TypeError, r"temperature must be an array of numbers, got str"),
    (temp(temperature=[1, [2]]), TypeError, r"temperature must be an array of numbers"),
    (
      R.PlattScaling(
        scale=np.ones(4),
        bias=np.zeros(4),
        num_iter=0,
        converged=True,
        num_classes=3,
        from_logits=False,
      ),
      ValueError,
      r"field 'scale' has shape \(4,\), expected \(3,\)",
    ),
  )
  for rc, exc, msg in bad:
    with pytest.raises(exc, match=msg):
      rc(z if not isinstance(rc, R.PlattScaling) else want)


_NAN_FIT_CLOSED_OVER = """
import json
import jax, numpy as np
import jaxcal.recalibrate as R
rng = np.random.default_rng(0)
z = (rng.normal(size=(200, 3))).astype(np.float32)
y = rng.integers(0, 3, 200)
zb = z.copy()
zb[3, 1] = np.nan
out = {}
for method in ("temperature", "vector", "platt"):
  rc = jax.jit(lambda a, b, m=method: R.fit(m, a, b))(zb, y)
  got = [np.asarray(jax.jit(lambda a, rc=rc: rc(a))(x)) for x in (z[:4], z)]
  good = R.fit(method, z, y)
  diff = np.abs(np.asarray(jax.jit(lambda a, rc=good: rc(a))(z[:4])) - np.asarray(good(z[:4])))
  out[method] = [bool(np.isnan(g).all()) for g in got] + [float(diff.max())]
print(json.dumps(out))
"""


def test_a_nan_fit_closed_over_by_jit_gives_nan_rows():
  """A fit folded to NaN under jit (bad calibration data), then closed over by another jit:
  XLA:CPU folded the NaN constant through the softmax into rows like [1, 0, -0] (vector
  scaling: negative entries, platt: 1/3 each), where eager calls and a fit passed as an
  argument gave NaN. Run with XLA's default flags (the suite's lower optimisation level
  does not fold it)."""
  flags = " ".join(
    f for f in os.environ.get("XLA_FLAGS", "").split() if f not in FAST_COMPILE_FLAGS
  )
  run = subprocess.run(
    [sys.executable, "-c", _NAN_FIT_CLOSED_OVER],
    env=dict(os.environ, XLA_FLAGS=flags),
    capture_output=True,
    text=True,
    timeout=600,
  )
  assert run.returncode == 0, run.stderr[-3000:]
  out = json.loads(run.stdout.strip().splitlines()[-1])
  for method, (small, large, diff) in out.items():
    assert small and large, (method, out)
    assert diff < 1e-6, (method, diff)


def test_nan_rows_and_normalize_rows():
  from jaxcal._src.recal.base import nan_rows, normalize_rows

  q = jnp.ones((3, 2))
  a = jnp.array([[0.0, 1.0], [np.inf, 0.0], [0.0, 0.0]])  # inf is not finite either
  b = jnp.array([[0.0], [0.0], [-np.inf]])  # every input counts
  np.testing.assert_array_equal(
    np.asarray(nan_rows(q, a, b)), [[1.0, 1.0], [np.nan, np.nan], [np.nan, np.nan]]
  )
  for dtype in (jnp.float32, jnp.bfloat16):
    out = normalize_rows(jnp.array([[0.0, 0.0, 0.0], [1.0, 0.0, 3.0]], dtype))
    assert out.dtype == dtype
    np.testing.assert_allclose(np.asarray(out, np.float64), [[1 / 3] * 3, [0.25, 0.0, 0.75]], 3e-3)


def test_to_logits_floors_probabilities_at_eps():
  from jaxcal._src.recal.base import to_logits

  p = jnp.array([[0.0, 0.25, 0.75]])
  np.testing.assert_allclose(np.asarray(to_logits(p, False)), np.log([[1e-12, 0.25, 0.75]]))
  np.testing.assert_allclose(
    np.asarray(to_logits(p, False, eps=1e-3)), np.log([[1e-3, 0.25, 0.75]])
  )
  assert to_logits(p, True) is p
  np.testing.assert_allclose(np.asarray(jax.nn.softmax(to_logits(p, False))), p, atol=1e-7)


def test_a_recalibrator_call_gives_nan_rows_under_jit_whatever_its_apply_does():
  """``rc(x)``: under jit a bad input row never comes back as plausible probabilities, even
  from a map that ignores its input; eagerly it raises; ``C`` must be the fit's."""
  from jaxcal._src.recal.base import Recalibrator, pytree_dataclass, static_field

  @pytree_dataclass
  class Uniform(Recalibrator):
    num_classes: int = static_field()

    def apply(self, inputs):
      return jnp.full(inputs.shape, 1.0 / inputs.shape[1], inputs.dtype)

  rc = Uniform(num_classes=3)
  z = np.zeros((2, 3), np.float32)
  z[1, 0] = np.nan
  out = np.asarray(jax.jit(lambda x: rc(x))(z))
  assert np.isnan(out[1]).all() and np.allclose(out[0], 1 / 3)
  # probabilities: a row off the simplex (or with an entry above 1) is a bad row
  # (the last row: a negative entry in a row summing to one, every entry at most 1; a
  # mutation review found the lower bound untested, the third row's 1.5 failing first)
  p = np.array([[0.2, 0.3, 0.5], [0.2, 0.3, 0.6], [1.5, -0.2, -0.3], [0.6, 0.5, -0.1]], np.float32)
  out = np.asarray(jax.jit(lambda x: Uniform(num_classes=3, from_logits=False)(x))(p))
  assert np.allclose(out[0], 1 / 3) and np.isnan(out[1:]).all()
  np.testing.assert_allclose(np.asarray(jax.jit(lambda x: rc(x))(np.zeros((2, 3)))), 1 / 3)
  with pytest.raises(ValueError, match="NaN"):
    rc(z)
  with pytest.raises(ValueError, match=r"fitted on C = 3 classes but the inputs have C = 4"):
    rc(np.zeros((2, 4), np.float32))


def test_no_converged_strength_selects_the_strongest(monkeypatch):
  """When no strength's fold fits all converge (every held-out loss is recorded as inf),
  the final fit uses the strongest strength of the grid (given unordered here). A stand-in
  solver keeps this cheap (the real one takes seconds to compile): one fold's fits converge,
  the other's and the final fit do not."""
  from jaxcal._src.recal import scaling

  def never(z, onehot, weights, lam, mu, init, diagonal, max_iter, tol):
    # in the CV, one fold's fits converge, the other's do not (max_iter is traced)
    conv = jnp.where(max_iter == 77, weights[0] > 0, False)
    return scaling.OptimResult(init, jnp.zeros((), z.dtype), jnp.ones((), jnp.int32), conv)

  body = scaling._fit_linear.__wrapped__
  fit_linear = jax.jit(  # a function of its own: its trace is never the real fit's
    functools.wraps(body)(lambda *a, **k: body(*a, **k)),
    static_argnames=("diagonal", "num_folds"),  # as the real fit
  )
  monkeypatch.setattr(scaling, "_solve_linear", never)
  monkeypatch.setattr(scaling, "_fit_linear", fit_linear)
  z, y = _synthetic(n=40, c=3)
  with pytest.warns(RuntimeWarning, match="no regularisation strength's cross-validation fits"):
    rc = R.fit("vector", z, y, reg_grid=(0.5, 8.0, 2.0), num_folds=2, cv_max_iter=77)
  np.testing.assert_array_equal(np.asarray(rc.cv_nll), np.inf)
  assert float(rc.reg_lambda) == float(rc.reg_mu) == 8.0


def _rezip(src, dst, members):
  """``src`` with some members' bytes replaced (``members``: name -> bytes, or (bytes, compress))."""
  with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
    for info in zin.infolist():
      body = members.get(info.filename, zin.read(info))
      body, compress = body if isinstance(body, tuple) else (body, zipfile.ZIP_STORED)
      zout.writestr(info.filename, body, compress_type=compress)


def _npy(a, version=None, fortran=False):
  import io

  buf = io.BytesIO()
  np.lib.format.write_array(buf, np.asfortranarray(a) if fortran else a, version=version)
  return buf.getvalue()


def test_load_checks_each_npy_member_header(tmp_path):
  """``.npy`` members in format 2.0 load; 3.0, Fortran order, more or less data than the
  header claims, a compressed or oversized header member are refused, naming the member."""
  good = tmp_path / "hb.npz"
  R.save(R.fit_histogram(*_synthetic(n=60, c=3), num_bins=4), good)
  with np.load(good) as f:
    values, header = f["a:values"], f["__header__"]
  v2 = tmp_path / "v2.npz"
  _rezip(good, v2, {"a:values.npy": _npy(values, (2, 0)), "__header__.npy": _npy(header, (2, 0))})
  np.testing.assert_array_equal(np.asarray(R.load(v2).values), values)
  raw = _npy(values)
  cases = {
    "v3": ({"a:values.npy": _npy(values, (3, 0))}, "'a:values.npy' is not a valid .npy array"),
    "fortran": ({"a:values.npy": _npy(values, fortran=True)}, "unsupported layout"),
    "more": ({"a:values.npy": raw + b"\0" * 8}, f"holds {values.nbytes + 8:,} bytes of data"),
    "less": ({"a:values.npy": raw[:-4]}, f"holds {values.nbytes - 4:,} bytes of data"),
    "hzip": ({"__header__.npy": (_npy(header), zipfile.ZIP_DEFLATED)}, "is compressed"),
    "hbig": (
      {"__header__.npy": _npy(header).replace(b"'shape': ()", b"'shape': (10000000000,)")},
      r"'__header__.npy' claims shape \(10000000000,\)",
    ),
  }
  for name, (members, match) in cases.items():
    _rezip(good, tmp_path / f"{name}.npz", members)
    with pytest.raises(ValueError, match=match) as e:
      R.load(tmp_path / f"{name}.npz")
    assert f"{name}.npz: not a loadable jaxcal recalibrator file" in str(e.value), name
  # a stored member whose directory entry claims more bytes than it stores
  blob = bytearray(good.read_bytes())
  entry = blob.rindex(b"PK\x01\x02", 0, blob.rindex(b"a:values.npy"))
  size = int.from_bytes(blob[entry + 24 : entry + 28], "little")
  blob[entry + 24 : entry + 28] = (size + 4096).to_bytes(4, "little")
  (tmp_path / "sizes.npz").write_bytes(bytes(blob))
  with pytest.raises(ValueError, match="'a:values.npy' is compressed"):
    R.load(tmp_path / "sizes.npz")


def test_load_rejects_headers_without_their_tables_and_static_fields(tmp_path):
  good = tmp_path / "ts.npz"
  R.save(R.fit_temperature(*_synthetic(n=100)), good)
  h = _header(good)
  static = dict(h["static"])
  del static["from_logits"]
  cases = {
    "nostatic": ({k: v for k, v in h.items() if k != "static"}, "lacks its 'static' or 'arrays'"),
    "noarrays": ({**h, "arrays": ["temperature"]}, "lacks its 'static' or 'arrays'"),
    "listmethod": ({**h, "method": ["temperature"]}, r"unknown recalibration method \['temp"),
    "entry": (
      {**h, "arrays": {**h["arrays"], "temperature": "<f4"}},
      "array 'temperature' is <f4\\[\\], the header says <f4",
    ),
    "nofield": ({**h, "static": static}, "needs the field 'from_logits', which is missing"),
  }
  for name, (header, match) in cases.items():
    _rewrite(good, tmp_path / f"{name}.npz", header=header)
    with pytest.raises(ValueError, match=match):
      R.load(tmp_path / f"{name}.npz")


def test_load_rejects_msgpack_arrays_of_the_wrong_size_or_shape(tmp_path):
  good = tmp_path / "ts.msgpack"
  R.save(R.fit_temperature(*_synthetic(n=100)), good)

  def forge(d):  # a consistent entry and header of shape (3,) for a scalar
    d["arrays"]["temperature"].update(shape=[3], data=b"\0" * 12)
    h = json.loads(d["header"])
    h["arrays"]["temperature"]["shape"] = [3]
    d["header"] = json.dumps(h)

  cases = {
    "long": (lambda d: d["arrays"]["temperature"].update(data=b"\0" * 8), "(4 bytes), holds 8"),
    "noarrays": (lambda d: d.update(arrays=[1]), "the file lacks its 'arrays' map"),
    "shape": (forge, "array 'temperature' has shape (3,), expected 0 axes"),
  }
  for name, (edit, msg) in cases.items():
    dst = tmp_path / f"{name}.msgpack"
    _msgpack_variant(good, dst, edit)
    with pytest.raises(ValueError, match=re.escape(msg)):
      R.load(dst)


def test_save_refuses_what_it_cannot_write(tmp_path):
  """Not a recalibrator, traced arrays, a static field that is not JSON data, and arrays
  whose shapes differ from the method's (``C`` is ``num_classes``, fixed sizes are fixed)."""
  from jaxcal._src.recal.ensemble_temperature import EnsembleTemperatureScaling

  path = tmp_path / "x.npz"
  t, k, ok = jnp.asarray(1.5), jnp.asarray(3, jnp.int32), jnp.asarray(True)
  with pytest.raises(ValueError, match="save needs a fitted jaxcal recalibrator, got dict"):
    R.save({"temperature": t}, path)
  with pytest.raises(ValueError, match=r"holding traced arrays \(field 'temperature'\)"):
    jax.jit(
      lambda x: R.save(
        R.TemperatureScaling(temperature=x, num_iter=k, converged=ok, num_classes=3), path
      )
    )(t)
  odd = R.TemperatureScaling(temperature=t, num_iter=k, converged=ok, num_classes=3, from_logits=1j)
  with pytest.raises(ValueError, match="a static field is not JSON data"):
    R.save(odd, path)
  c3 = jnp.ones(3)
  cases = (
    (R.PlattScaling(scale=c3, bias=c3, num_iter=k, converged=ok, num_classes=4), "'scale'", "(4,)"),
    (
      EnsembleTemperatureScaling(
        temperature=t, weights=jnp.ones(4) / 4, num_iter=k, converged=ok, num_classes=3
      ),
      "'weights'",
      "(3,)",
    ),
  )
  for rc, name, want in cases:
    with pytest.raises(
      ValueError, match=re.escape(f"array {name} has shape") + r".*" + re.escape(want)
    ):
      R.save(rc, path)
  assert not path.exists()


@pytest.mark.parametrize(
  ("converges", "want_finite", "want_lambda"),
  [
    # the strongest does not converge: passed over, the search goes on to weaker ones
    (lambda lam: lam < 8.0, [False, True, True, True], 2.0),
    # a weaker strength does not converge after one did: the search stops there
    (lambda lam: (lam > 1.0) | (lam < 0.2), [True, True, False, False], 8.0),
  ],
)
def test_cv_search_on_unconverged_strengths(monkeypatch, converges, want_finite, want_lambda):
  """An unconverged strength is never selected; before any strength has converged it does
  not stop the search, after one has it does. A stand-in solver (held-out losses all equal,
  convergence by strength) keeps this cheap."""
  from jaxcal._src.recal import scaling

  def solver(z, onehot, weights, lam, mu, init, diagonal, max_iter, tol):
    conv = jnp.where(max_iter == 77, converges(lam), True)  # max_iter is traced
    return scaling.OptimResult(init, jnp.zeros((), z.dtype), jnp.ones((), jnp.int32), conv)

  body = scaling._fit_linear.__wrapped__
  fit_linear = jax.jit(  # a function of its own: no other case's trace, nor the real fit's
    functools.wraps(body)(lambda *a, **k: body(*a, **k)),
    static_argnames=("diagonal", "num_folds"),  # as the real fit
  )
  monkeypatch.setattr(scaling, "_solve_linear", solver)
  monkeypatch.setattr(scaling, "_fit_linear", fit_linear)
  z, y = _synthetic(n=40, c=3)
  rc = R.fit("vector", z, y, reg_grid=(0.5, 8.0, 0.1, 2.0), num_folds=2, cv_max_iter=77)
  assert np.isfinite(np.asarray(rc.cv_nll)).tolist() == want_finite
  assert float(rc.reg_lambda) == want_lambda


def test_strong_vector_scaling_is_temperature_scaling(c10):
  """At ``lambda = mu = 1e5`` (the first strength of the default grid) the penalty pins the
  scales' spread and the bias, and the common scale is temperature scaling's ``1 / T``.

  The fit used to stall at ``a = 1`` (the identity, reported converged) on 9 of the 12
  CIFAR models: the preconditioner put the penalty's curvature on the common scale too.
  Checked against the documented objective in float64."""
  zv, yv, _, _ = c10
  rc = R.fit_vector(zv, yv, reg_lambda=1e5)
  a, b = np.diag(np.asarray(rc.weight, np.float64)), np.asarray(rc.bias, np.float64)
  inv_t = 1.0 / float(R.fit_temperature(zv, yv).temperature)
  assert abs(inv_t - 1.0) > 0.05  # the identity would fail below
  np.testing.assert_allclose(a, inv_t, rtol=2e-4)
  np.testing.assert_allclose(b, 0.0, atol=1e-4)
  z64, c = zv.astype(np.float64), zv.shape[1]

  def objective(a, b):
    lg = z64 * a + b
    nll = np.mean(logsumexp(lg, axis=1) - lg[np.arange(len(yv)), yv])
    return nll + 1e5 / c * np.sum((a - a.mean()) ** 2) + 1e5 / c * np.sum(b**2)

  assert objective(a, b) <= objective(np.full(c, inv_t), np.zeros(c)) + 1e-7
  assert bool(rc.converged)


@pytest.mark.parametrize("c", [1e-6, 1e-5, 1e-3, 1e3])
def test_temperature_fits_are_scale_equivariant(c10, c):
  """Logits ``c z`` give the temperature ``c T`` (temperature scaling and the ensemble's
  temperature): the fits start at the logits' spread. From ``T = 1``, at ``c = 1e-5`` the
  log loss was flat to working precision there and the fit stopped at ``T = 1.0``, reported
  converged (uniform predictions; found by a review helper)."""
  zv, yv, zt, yt = c10
  zc, zct = zv * np.float32(c), zt * np.float32(c)
  want = float(R.fit_temperature(zv, yv).temperature)
  rc = R.fit_temperature(zc, yv)
  assert bool(rc.converged)
  np.testing.assert_allclose(float(rc.temperature) / c, want, rtol=1e-5)
  np.testing.assert_allclose(rc(zct), R.fit_temperature(zv, yv)(zt), atol=2e-5)
  ets = R.fit_ensemble_temperature(zc, yv)
  assert bool(ets.converged)
  np.testing.assert_allclose(
    float(ets.temperature) / c, float(R.fit_ensemble_temperature(zv, yv).temperature), rtol=1e-5
  )


def test_reg_grid_array_and_a_big_endian_file(tmp_path):
  """``reg_grid`` as a (G,) array is the same grid as a list (it was refused as "not a
  sequence of numbers"); a saved file whose arrays are big-endian (as ``save`` allows, from
  another host) loads (it raised a JAX TypeError naming no file)."""
  z = 3.0 * np.cos(np.arange(800.0)).reshape(200, 4).astype(np.float32)
  y = np.arange(200) % 4
  a = R.fit_vector(z, y, reg_grid=np.array([10.0, 0.1]))
  b = R.fit_vector(z, y, reg_grid=[10.0, 0.1])
  np.testing.assert_array_equal(np.asarray(a.cv_nll), np.asarray(b.cv_nll))
  np.testing.assert_array_equal(np.asarray(a.weight), np.asarray(b.weight))
  with pytest.raises(ValueError, match="reg_grid must be a non-empty sequence"):
    R.fit_vector(z, y, reg_grid=np.zeros((0,)))
  rc = R.fit("matrix", z, y, reg_lambda=1.0)
  path = tmp_path / "m.msgpack"
  R.save(rc, path)
  doc = msgpack.unpackb(path.read_bytes(), raw=False)
  header = json.loads(doc["header"])
  for k, e in doc["arrays"].items():
    arr = np.frombuffer(e["data"], np.dtype(e["dtype"])).reshape(e["shape"])
    big = arr.astype(arr.dtype.newbyteorder(">"))
    e["dtype"] = header["arrays"][k]["dtype"] = big.dtype.str
    e["data"] = big.tobytes()
  doc["header"] = json.dumps(header)
  other = tmp_path / "m_big.msgpack"
  other.write_bytes(msgpack.packb(doc, use_bin_type=True))
  back = R.load(other)
  np.testing.assert_array_equal(np.asarray(back.weight), np.asarray(rc.weight))
  np.testing.assert_array_equal(np.asarray(back(z)), np.asarray(rc(z)))


def test_cross_validated_fit_in_checked_jit():
  """``jaxcal.checked(jit(fit_vector))``: the cross-validation's folds are iterations of one
  loop (they were a ``vmap``, and checkify refuses a batched ``while_loop``), so the checked
  fit runs, equals the eager fit, and raises the eager call's message on a NaN logit."""
  import jaxcal

  z, y = _synthetic(n=200, c=3)
  f = jaxcal.checked(jax.jit(lambda z, y: R.fit_vector(z, y, reg_grid=(10.0, 0.1)).weight))
  eager = R.fit_vector(z, y, reg_grid=(10.0, 0.1)).weight
  np.testing.assert_allclose(np.asarray(f(z, y)), np.asarray(eager), rtol=1e-5, atol=1e-6)
  bad = z.copy()
  bad[7, 1] = np.nan
  with pytest.raises(ValueError, match=r"non-finite values .* the first is row 7, column 1"):
    f(bad, y)


@pytest.mark.parametrize("kwargs", [{"reg_lambda": 1.0}, {"reg_grid": (10.0, 0.1), "num_folds": 2}])
def test_linear_fits_in_float64(kwargs):
  """With ``jax.enable_x64`` the linear fits run in float64 (the divergence error advises it)
  and agree with the float32 fit; the one-loop cross-validation raised a TypeError there
  (its strength index became int64 in the loop's carry)."""
  z, y = _synthetic(n=200, c=3)
  f32 = R.fit_dirichlet(z, y, **kwargs)
  with jax.enable_x64(True):
    f64 = R.fit_dirichlet(z.astype(np.float64), y, **kwargs)
    assert f64.weight.dtype == np.float64
    assert float(f64.reg_lambda) == pytest.approx(float(f32.reg_lambda), rel=1e-6)
    np.testing.assert_allclose(np.asarray(f64.weight), np.asarray(f32.weight), atol=2e-3)
    np.testing.assert_allclose(np.asarray(f64.bias), np.asarray(f32.bias), atol=2e-3)


def test_another_iteration_limit_reuses_the_compiled_linear_fit():
  """``max_iter`` and ``cv_max_iter`` are loop values of the one-loop fit, not static: a
  second limit compiles nothing (each value compiled its own program before), and the limit
  still binds (one iteration leaves the final fit unconverged)."""
  from jaxcal._src.recal import scaling

  z, y = _synthetic(n=200, c=3)
  R.fit_vector(z, y, reg_grid=(10.0, 0.1), num_folds=2, max_iter=300, cv_max_iter=100)
  size = scaling._fit_linear._cache_size()
  with pytest.warns(RuntimeWarning, match="did not converge in 1 iterations"):
    short = R.fit_vector(z, y, reg_grid=(10.0, 0.1), num_folds=2, max_iter=1, cv_max_iter=7)
  assert scaling._fit_linear._cache_size() == size
  assert int(short.num_iter) <= 1 and not bool(short.converged)


def _newton_reference(x, t):
  """Float64 undamped Newton (with step halving) for ``mean softplus(u) - t u``,
  ``u = w_0 x + w_1``: affine invariant, so a nearly constant ``x`` does not slow it."""
  cols = np.stack([x, np.ones_like(x)], axis=1)
  w = np.zeros(2)

  def loss(w):
    u = cols @ w
    return np.mean(np.logaddexp(0, u) - t * u)

  for _ in range(100):
    q = 1 / (1 + np.exp(-(cols @ w)))
    g = cols.T @ (q - t) / len(t)
    if np.abs(g).max() < 1e-15:
      break
    step = np.linalg.solve((cols * (q * (1 - q))[:, None]).T @ cols / len(t), g)
    alpha = 1.0
    while loss(w - alpha * step) > loss(w) and alpha > 1e-12:
      alpha /= 2
    w = w - alpha * step
  return w


def test_platt_and_beta_converge_on_logits_of_small_scale(c10):
  """Logits ``1e-3 z``: the per-class log-odds are nearly constant, so nearly collinear
  with the intercept. The damped Newton fit crawled (500 iterations, unconverged, even in
  float64: scale 208 where the optimum is 1280, test log loss 1.18); in standardised
  coordinates Platt and beta scaling converge in a handful of iterations, Platt's map equal
  to a float64 Newton reference (found by a review helper)."""
  zv, yv, zt, yt = c10
  c = np.float32(1e-3)

  def nll(q):
    return float(-np.mean(np.log(np.asarray(q, np.float64)[np.arange(len(yt)), yt])))

  z = zv.astype(np.float64) * 1e-3
  logp = z - z.max(1, keepdims=True)
  logp = logp - np.log(np.exp(logp).sum(1, keepdims=True))
  s = logp - np.log(-np.expm1(logp))
  ref = np.array([_newton_reference(s[:, k], (yv == k).astype(float)) for k in range(10)])
  assert 1000 < ref[0, 0] < 1600  # the scale the damped fit was far from
  ref_map = R.PlattScaling(
    scale=jnp.asarray(ref[:, 0]),
    bias=jnp.asarray(ref[:, 1]),
    num_iter=jnp.asarray(0),
    converged=jnp.asarray(True),
    num_classes=10,
  )
  with jax.enable_x64(True):
    ref_nll = nll(ref_map(zt.astype(np.float64) * 1e-3))
  # about the unscaled fit's (0.193), far below the crawled fit's 1.18
  assert abs(ref_nll - nll(R.fit_platt(zv, yv)(zt))) < 0.01

  with warnings.catch_warnings():
    warnings.simplefilter("error")  # silent: no "did not converge" warning
    platt = R.fit_platt(zv * c, yv)
    beta = R.fit_beta(zv * c, yv)
  assert bool(platt.converged) and int(platt.num_iter) <= 12
  np.testing.assert_allclose(np.asarray(platt.scale), ref[:, 0], rtol=1e-4)
  np.testing.assert_allclose(np.asarray(platt.bias), ref[:, 1], rtol=1e-4)
  assert abs(nll(platt(zt * c)) - ref_nll) < 1e-5
  assert bool(beta.converged) and int(beta.num_iter) <= 30
  assert abs(nll(beta(zt * c)) - ref_nll) < 1e-4  # beta's model contains Platt's

  with jax.enable_x64(True):
    z64 = zv.astype(np.float64) * 1e-3
    platt64 = R.fit_platt(z64, yv, tol=1e-10)
    beta64 = R.fit_beta(z64, yv)
    assert bool(platt64.converged) and int(platt64.num_iter) <= 12
    np.testing.assert_allclose(np.asarray(platt64.scale), ref[:, 0], rtol=1e-8)
    np.testing.assert_allclose(np.asarray(platt64.bias), ref[:, 1], rtol=1e-8)
    assert bool(beta64.converged) and int(beta64.num_iter) <= 30
    assert abs(nll(beta64(zt.astype(np.float64) * 1e-3)) - ref_nll) < 1e-4


def test_beta_reports_the_fits_it_uses(c10):
  """``converged`` and ``num_iter`` describe the free fit and the refits some class takes.

  On the default data every class keeps its free fit (5 Newton iterations); the unused
  refit with ``a = 0`` needs 8. With ``max_iter=5`` the fit in use had converged, yet
  the result read ``converged=False`` and warned, and ``num_iter`` read 8 (found by a
  review helper).
  """
  zv, yv, _, _ = c10
  s = np.clip(np.asarray(jax.nn.softmax(zv, axis=-1)), np.finfo(np.float32).eps, 1 - 1e-7)
  onehot = jnp.asarray(np.eye(zv.shape[1], dtype=np.float32)[yv].T)
  init = jnp.broadcast_to(jnp.array([1.0, 1.0, 0.0], jnp.float32), (zv.shape[1], 3))

  def newton_iterations(mask_a, mask_b):
    features = (jnp.asarray(np.log(s).T) * mask_a, jnp.asarray(-np.log1p(-s).T) * mask_b, 1.0)
    return int(logistic_newton(features, onehot, init, max_iter=500, tol=1e-6).num_iter)

  free, refit = newton_iterations(1.0, 1.0), newton_iterations(0.0, 1.0)
  assert refit > free  # the case: an unused refit that outlasts the free fit
  full = R.fit_beta(zv, yv)
  assert bool(jnp.all(full.a >= 0)) and bool(jnp.all(full.b >= 0))  # no class refits
  assert int(full.num_iter) == free
  with warnings.catch_warnings():
    warnings.simplefilter("error")  # no "did not converge" warning
    limited = R.fit_beta(zv, yv, max_iter=free)
  assert bool(limited.converged) and int(limited.num_iter) == free
  for got, want in ((limited.a, full.a), (limited.b, full.b), (limited.d, full.d)):
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
  with pytest.warns(RuntimeWarning, match="did not converge"):
    short = R.fit_beta(zv, yv, max_iter=free - 1)
  assert not bool(short.converged)


# (scale c, offset e) of the feature c x + e in each problem of one batch
_AFFINE = [(1.0, 0.0), (1e-8, 0.0), (1e-3, 0.0), (1e3, 0.0), (1e30, 0.0), (1.0, 1e3), (1e-3, 5.0)]


@pytest.mark.parametrize("intercept", [True, False])
def test_logistic_newton_takes_the_fit_of_any_scale_and_offset(intercept):
  """A batch of problems whose feature is ``c x + e``, ``c`` from 1e-8 to 1e30 (float32):
  each fit is the fit on ``x`` mapped back (``w c``, and ``w_0 + w e``), converged in a
  handful of iterations, under ``jit`` (the intercept a traced number) and ``vmap``. Before,
  the raw gradient of a tiny feature (1e-8) or the overflowing Hessian of a huge one (1e30)
  stopped the fit at ``init`` reported converged, and ``x + 1e3`` and ``1e-3 x`` crawled
  unconverged (100 iterations)."""
  rng = np.random.default_rng(0)
  x = rng.normal(size=4000)
  affine = _AFFINE if intercept else [(c, 0.0) for c, e in _AFFINE if e == 0]
  u_true = 2 * x - 1 if intercept else 2 * x
  t = (rng.random(4000) < 1 / (1 + np.exp(-u_true))).astype(np.float32)
  feats = np.stack([c * x + e for c, e in affine]).astype(np.float32)  # (P, n)
  ones = (1.0,) if intercept else ()
  k = 1 + len(ones)
  fit = jax.jit(logistic_newton, static_argnames="max_iter")
  res = fit((jnp.asarray(feats),) + ones, jnp.asarray(t), jnp.zeros((len(affine), k)))
  assert bool(res.converged) and int(res.num_iter) <= 10
  w = np.asarray(res.params, np.float64)
  ref = w[0]  # c = 1, e = 0
  for (c, e), wp in zip(affine, w):
    np.testing.assert_allclose(wp[0] * c, ref[0], rtol=1e-4, err_msg=f"c={c}, e={e}")
    if intercept:
      np.testing.assert_allclose(wp[1] + wp[0] * e, ref[1], atol=2e-3, err_msg=f"c={c}, e={e}")
  if intercept:
    np.testing.assert_allclose(ref, _newton_reference(x, t.astype(np.float64)), rtol=1e-4)
  one = jax.vmap(lambda f: logistic_newton((f,) + ones, jnp.asarray(t), jnp.zeros(k)))
  np.testing.assert_allclose(np.asarray(jax.jit(one)(jnp.asarray(feats)).params), w, rtol=1e-5)


def test_logistic_newton_settles_only_at_full_damping():
  """With the intercept given as an array of ones (not centred on), a feature ``1e-3 x + 5``
  leaves the float32 problem nearly singular: the weakened damping's long steps gained
  nothing visible and the fit stopped at a loss of 0.512, reported converged, where the
  optimum is 0.4657 (found by a review helper). A problem settles only at full damping; the
  fit reaches the optimum's loss or says it has not converged."""
  rng = np.random.default_rng(1)
  x = rng.normal(size=500)
  t = jnp.asarray(rng.random(500) < 1 / (1 + np.exp(-(2 * x - 0.5))), jnp.float32)
  xx = jnp.asarray(1e-3 * x + 5.0, jnp.float32)
  best = logistic_newton((xx, 1.0), t, jnp.zeros(2), max_iter=500)
  assert bool(best.converged) and float(best.value) == pytest.approx(0.465709, abs=1e-5)
  ones = logistic_newton((xx, jnp.ones(500)), t, jnp.zeros(2), max_iter=500)
  assert not bool(ones.converged) or float(ones.value) <= float(best.value) + 1e-5


def test_load_reports_a_damaged_member_header_as_a_bad_file(fitted, tmp_path):
  # opening a member reads its local zip header: damage there raised
  # zipfile.BadZipFile ("File name in directory ... and header ... differ")
  path = tmp_path / "ts.npz"
  R.save(fitted["temperature"], path)
  raw = bytearray(path.read_bytes())
  i = raw.find(b"a:num_iter.npy")  # the member's local header comes first
  raw[i + 1] = ord("8")
  path.write_bytes(bytes(raw))
  with pytest.raises(ValueError, match=r"ts\.npz: not a loadable jaxcal recalibrator file"):
    R.load(path)


def test_applying_a_probability_fit_to_logits_says_to_pass_probabilities():
  # the apply has no from_logits argument: the message told to pass one
  z, y = _synthetic(n=60, c=3)
  p = np.asarray(jax.nn.softmax(jnp.asarray(z)))
  rc = R.fit_histogram(p, y, from_logits=False)
  with pytest.raises(ValueError, match="fitted on probabilities: apply it to probabilities") as e:
    rc(z)
  assert "from_logits" not in str(e.value)
  with pytest.raises(ValueError, match=r"Pass logits with from_logits=True"):
    R.fit_histogram(z, y, from_logits=False)  # a fit still says so


@pytest.mark.parametrize("name", ["fit_isotonic", "fit_smooth_isotonic", "decompose"])
def test_vmap_empty_batch_isotonic(name):
  # rowwise_vmap's rule ran the isotonic fit on zero rows (jnp.max over nothing)
  if name == "decompose":
    fn = lambda x, y: decompose(x, y).mcb
  else:
    fn = lambda x, y: jax.tree.leaves(getattr(R, name)(x, y))
  x1 = jnp.asarray(np.random.default_rng(0).standard_normal((5, 3)), jnp.float32)
  y1 = jnp.array([0, 1, 2, 0, 1])
  if name == "decompose":
    x1 = jax.nn.softmax(x1)
  one = fn(x1, y1)
  empty = jax.jit(jax.vmap(fn))(jnp.zeros((0, 5, 3)), jnp.zeros((0, 5), int))
  batched = jax.vmap(fn)(x1[None], y1[None])
  for e, b, o in zip(jax.tree.leaves(empty), jax.tree.leaves(batched), jax.tree.leaves(one)):
    assert e.shape == (0,) + o.shape
    np.testing.assert_allclose(b[0], o, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize(
  "method, n, match",
  [
    (
      "vector",
      4,
      r"num_folds must be <= 4, got 5: .*n = 4 samples; pass num_folds=k .*reg_lambda=",
    ),
    ("matrix", 4, r"num_folds must be <= 4, got 5: .*pass num_folds=k .*reg_lambda="),
    ("dirichlet", 4, r"num_folds must be <= 4, got 5: .*pass num_folds=k .*reg_lambda="),
    ("histogram", 3, r"num_bins must be <= 3, got 15: .*n = 3 samples; pass num_bins=m "),
  ],
)
def test_defaults_too_big_for_small_n_say_what_to_pass(method, n, match):
  # the defaults (5 folds, 15 bins) failed on a small split without naming the fix
  z = jnp.asarray(np.random.default_rng(0).standard_normal((n, 3)), jnp.float32)
  y = jnp.arange(n) % 3
  with pytest.raises(ValueError, match=match):
    R.fit(method, z, y)


def test_bbq_fits_one_sample():
  """One sample leaves every class's bin range empty (no thresholds): the fit's
  ``map_batches`` raised ``ZeroDivisionError`` from ``lax.map``'s reshape. BBQ takes
  classes without samples, so it takes one sample too: every model is the prior-smoothed
  single bin, and the recalibrated row is a distribution."""
  z = np.random.default_rng(0).normal(size=(1, 3)).astype(np.float32)
  rc = R.fit_bbq(z, np.array([2]))
  q = np.asarray(rc(z))
  assert q.shape == (1, 3) and np.all(np.isfinite(q)) and q.sum() == pytest.approx(1.0)
  assert q[0, 2] > q[0, 0] and q[0, 2] > q[0, 1]  # the one label seen gains mass


# ------------------------------------------- fits that look fine and are not (review)


@pytest.mark.parametrize(
  "method", ["temperature", "ensemble_temperature", "vector", "matrix", "dirichlet"]
)
def test_a_split_without_an_optimum_is_not_reported_converged(c10, method):
  """Every calibration label the top label of its row (the model's predictions passed as
  labels): the log loss falls as the map sharpens. Temperature scaling read converged with
  T = 0.001 and test NLL 37 (0.20 raw), no warning; now converged is False, eagerly with a
  warning that says why, and per member under vmap."""
  zv, yv, _, _ = c10
  with pytest.warns(RuntimeWarning, match="has no optimum on this split: every calibration") as got:
    rc = R.fit(method, zv, zv.argmax(1))
  assert not bool(rc.converged)
  # it points at this line (the caller's), not at jaxcal's fit() or its wrappers
  assert {w.filename for w in got} == {__file__}
  with warnings.catch_warnings():
    warnings.simplefilter("error")  # the true labels: no warning, converged
    assert bool(R.fit(method, zv, yv).converged)
  if method == "temperature":
    both = jax.vmap(R.fit_temperature)(np.stack([zv, zv]), np.stack([yv, zv.argmax(1)]))
    np.testing.assert_array_equal(both.converged, [True, False])


def test_cross_validation_without_a_converged_strength_is_not_reported_converged(c10):
  """No strength's fold fits converged (every cv_nll inf): the strongest was fitted on no
  evidence while converged read True and nothing was said; now False, with the reason."""
  zv, yv, _, _ = c10
  with pytest.warns(RuntimeWarning, match="no regularisation strength's cross-validation"):
    rc = R.fit("matrix", zv, yv, cv_max_iter=1)
  assert np.isinf(np.asarray(rc.cv_nll)).all() and not bool(rc.converged)
  assert bool(R.fit("matrix", zv, yv, reg_lambda=1e5).converged)  # no cross-validation


def test_probabilities_given_as_logits_are_refused(c10):
  """A map fitted on logits applied to a softmax's output (or fitted on one) returned
  plausible rows: temperature scaling gave test NLL 1.63 for 0.196 on CIFAR-10."""
  zv, yv, zt, _ = c10
  rc = R.fit_temperature(zv, yv)
  probs = np.asarray(jax.nn.softmax(zt[:50]))
  with pytest.raises(
    ValueError,
    match=r"inputs are given as logits but are probabilities.*"
    r"this recalibrator was fitted on logits: apply it to logits",
  ):
    rc(probs)
  with pytest.raises(ValueError, match=r"given as logits but are probabilities.*from_logits=False"):
    R.fit("temperature", np.asarray(jax.nn.softmax(zv)), yv)
  np.testing.assert_allclose(rc(np.log(probs)), rc(zt[:50]), rtol=1e-5, atol=1e-6)
  assert np.isfinite(np.asarray(jax.jit(lambda a: rc(a))(probs))).all()  # traced: unknown
  assert rc(np.array([[2.0, -1.0] + [0.0] * 8], np.float32)).shape == (1, 10)  # real logits
  # one or two rows are not judged (real C = 2 logits (0.25, 0.75) lie on the simplex)
  assert rc(probs[:2]).shape == (2, 10)
  # bfloat16 softmax rows sum to one within 2e-3: judged with bfloat16's tolerance
  with pytest.raises(ValueError, match="given as logits but are probabilities"):
    rc(jnp.asarray(probs, jnp.bfloat16))


def test_smooth_isotonic_differentiates_in_both_modes():
  """Its knots are pool medians of the scores: ``jax.grad`` stopped at the isotonic fit's
  sorts, and ``jax.jacfwd`` did not finish; both match central differences."""
  rng = np.random.default_rng(2)
  with jax.enable_x64(True):
    z = jnp.asarray(rng.normal(size=(60, 3)))
    y = jnp.asarray(np.arange(60) % 3)

    def f(v):
      return R.fit_smooth_isotonic(v, y)(v[:5])[:, 0].sum()

    g = np.asarray(jax.grad(f)(z))
    jf = np.asarray(jax.jacfwd(f)(z))
    np.testing.assert_allclose(g, jf, atol=1e-12)
    i, r = np.unravel_index(np.abs(g).argmax(), g.shape)
    e = np.zeros((60, 3))
    e[i, r] = 1e-6
    assert abs(g[i, r]) > 1e-3
    np.testing.assert_allclose(g[i, r], (f(z + e) - f(z - e)) / 2e-6, rtol=1e-6)


def test_hand_built_fields_are_copied_before_the_call_returns():
  """A hand-built recalibrator's numpy field went to the device by ``jnp.asarray``, whose
  copy of an unaligned host array of 128 KiB or more reads it after returning: the caller's
  next write showed in the applied map (a memory-sharing review: 6 of 200 applies of a
  ``LinearScaling`` of C = 500, 0.026 off). The fields are now copied and waited for."""
  from jaxcal._src import validation as V
  from jaxcal._src.recal import base

  c = 512
  rng = np.random.default_rng(0)
  w0 = (np.eye(c) + 0.01 * rng.normal(size=(c, c))).astype(np.float32)
  raw = np.empty(w0.nbytes + 128, np.uint8)
  start = (-raw.ctypes.data) % 64 + 16  # 16 bytes past a 64-byte boundary
  placed, device = [], V._device

  def spy(a):
    placed.append(a.shape)
    return device(a)

  for i in range(30):
    w = np.frombuffer(raw[start : start + w0.nbytes], np.float32).reshape(c, c)
    w[...] = w0
    rc = R.LinearScaling(
      from_logits=True,
      weight=w,
      bias=np.zeros(c, np.float32),
      reg_lambda=0.0,
      reg_mu=0.0,
      cv_nll=np.zeros(1, np.float32),
      num_iter=0,
      converged=True,
      num_classes=c,
    )
    if i == 0:  # the race is rare in this loop (3 of 30 before): the copy is asserted too
      with pytest.MonkeyPatch.context() as mp:
        mp.setattr(base.V, "_device", spy)
        got = base._with_host_fields_checked(rc).weight
      assert (c, c) in placed, placed
    else:
      got = base._with_host_fields_checked(rc).weight
    w[...] = 0.0  # the caller reuses its array
    np.testing.assert_array_equal(np.asarray(got), w0)
