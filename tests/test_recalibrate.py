"""jaxcal.recalibrate: fit / apply / save / load for the parametric and
class-wise recalibrators (temperature, vector, matrix, dirichlet, platt,
histogram, isotonic, smooth_isotonic).

One CIFAR-10 model (Kull et al.'s ResNet-110 logits: fit on ``val``,
evaluate on ``test``) serves every test, fitted once per method.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcal.recalibrate as R
from jaxcal.scores import brier, decompose, log_loss

MINE = (
  "temperature",
  "vector",
  "matrix",
  "dirichlet",
  "platt",
  "histogram",
  "isotonic",
  "smooth_isotonic",
)


@pytest.fixture(scope="module")
def c10(cifar_dir):
  path = cifar_dir / "resnet110_c10_logits.npz"
  if not path.is_file():
    pytest.skip(f"{path} not found")
  with np.load(path, allow_pickle=False) as z:
    return (
      z["val_logits"].astype(np.float32),
      z["val_labels"].astype(np.int32),
      z["test_logits"].astype(np.float32),
      z["test_labels"].astype(np.int32),
    )


@pytest.fixture(scope="module")
def fitted(c10):
  zv, yv, _, _ = c10
  return {m: R.fit(m, zv, yv) for m in MINE}


def test_methods_are_registered():
  assert set(MINE) <= set(R.methods())
  assert set(R.__all__) >= {"fit", "methods", "save", "load", "isotonic_regression", "Recalibrator"}


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
  assert t_ref > 1.5  # this ResNet-110 is overconfident
  rc32 = R.fit("temperature", zv, yv)
  assert abs(float(rc32.temperature) - t_ref) < 1e-4 * t_ref


@pytest.mark.parametrize("method", ["temperature", "vector", "matrix", "dirichlet", "platt"])
def test_parametric_methods_lower_heldout_nll_and_brier(c10, fitted, method):
  _, _, zt, yt = c10
  q = fitted[method](zt)
  assert q.shape == zt.shape
  np.testing.assert_allclose(np.asarray(q.sum(1)), 1.0, atol=1e-5)
  base_nll = float(log_loss(zt, yt, from_logits=True))
  base_bs = float(brier(zt, yt, from_logits=True))
  assert float(log_loss(q, yt)) < base_nll - 0.01
  assert float(brier(q, yt)) < base_bs


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
def test_classwise_maps_match_reference_code(c10, fitted, method, ref):
  zv, yv, zt, yt = c10
  pv = np.asarray(jax.nn.softmax(jnp.asarray(zv), axis=1), np.float64)
  pt = np.asarray(jax.nn.softmax(jnp.asarray(zt), axis=1), np.float64)
  cw = R.fit(method, zv, yv, normalize=False)
  got = np.asarray(cw(zt))
  for c in (0, 3, 9):
    want = ref(pv[:, c], (yv == c).astype(float), pt[:, c])
    np.testing.assert_allclose(got[:, c], want, atol=2e-6, err_msg=f"{method} class {c}")


# ----------------------------------------------------------- pytrees, jit, save / load


@pytest.mark.parametrize("suffix", [".npz", ".msgpack"])
def test_save_load_round_trip_every_method(c10, fitted, tmp_path, suffix):
  _, _, zt, _ = c10
  z = zt[:64]
  for m, rc in fitted.items():
    path = tmp_path / f"{m}{suffix}"
    R.save(rc, path)
    back = R.load(path)
    assert type(back) is type(rc) and back.method == m
    assert back.from_logits == rc.from_logits and back.num_classes == 10
    np.testing.assert_array_equal(np.asarray(back(z)), np.asarray(rc(z)), err_msg=m)


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
  with pytest.raises(ValueError, match="reg"):
    R.fit("dirichlet", zv, yv, reg_lambda=-1.0)
  with pytest.raises(ValueError, match="fitted on C = 10 classes"):
    fitted["temperature"](zt[:, :9])
  with pytest.raises(ValueError, match="non-finite"):
    fitted["platt"](np.full((2, 10), np.inf, np.float32))


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
