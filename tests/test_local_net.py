"""LoCal Nets and K-Cal (Barbera et al. 2025, arXiv:2510.26566, §7, App. D.2):
the strong initialisation on real Fashion-MNIST backbone outputs, fitting on
synthetic data with known class probabilities (LCE down, accuracy kept),
early stopping, determinism, save/load, checkpoints and ValueErrors; float64
references for the loss and the forward pass; the training utilities (PCA,
the epoch loop, the backbones, train_classifier / predict, the splits)."""

import pathlib
import sys
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxcal import metrics, train
from jaxcal._src.recal import base
from jaxcal._src.recal.local_net import (
  HISTORY_COLUMNS,
  KernelCalibrator,
  LocalNet,
  LocalNetModule,
  bernoulli_js_distance,
  fit_kcal,
  fit_local_net,
  js_distance,
  kernel_calibrator,
  load_checkpoint,
  local_net_loss,
)

sys.path.insert(0, str(pathlib.Path(__file__).parent))  # --import-mode=importlib
from conftest import assert_same_under_x64, no_new_programs

OPTS = dict(
  pca_dim=8,
  hidden=32,
  bandwidth=2.0,
  epochs=10,
  batch_size=512,
  learning_rate=1e-2,
  patience=None,
  verbose=False,
)
BACKBONE = (
  pathlib.Path(__file__).resolve().parents[1]
  / "experiments"
  / "results"
  / "fashion_mnist"
  / "backbone_seed0.npz"
)


def _make(seed=0, n=3000, C=3, D=10):
  """Features phi, true P(y|phi) = softmax(0.6 phi W), backbone logits 3x too sharp."""
  rng = np.random.default_rng(seed)
  phi = rng.normal(size=(n, D)).astype(np.float32)
  tl = phi @ rng.normal(size=(D, C)) * 0.6
  pt = np.exp(tl - tl.max(1, keepdims=True))
  pt /= pt.sum(1, keepdims=True)
  y = (pt.cumsum(1) > rng.random((n, 1))).argmax(1)
  return phi, (3.0 * tl).astype(np.float32), y


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
  phi, logits, y = _make()
  cal, te = slice(0, 2000), slice(2000, None)
  ckpt = tmp_path_factory.mktemp("ckpt")
  rc = base.fit(
    "local_net", logits[cal], y[cal], features=phi[cal], seed=0, checkpoint_dir=str(ckpt), **OPTS
  )
  return dict(rc=rc, phi=phi, logits=logits, y=y, cal=cal, te=te, ckpt=ckpt)


def test_registered():
  assert {"local_net", "kcal"} <= set(base.methods())


# ------------------------------------------------------- initialisation


@pytest.fixture(scope="module")
def fmnist():
  if not BACKBONE.is_file():
    pytest.skip("committed Fashion-MNIST backbone outputs not found")
  with np.load(BACKBONE, allow_pickle=False) as z:
    return (
      z["cal_logits"][:2000],
      z["cal_labels"][:2000],
      z["cal_features"][:2000].astype(np.float32),
    )


def test_strong_initialisation_reproduces_the_backbone(fmnist):
  # learning rate 0: the fitted net is the net at initialisation
  z, y, f = fmnist
  init = dict(pca_dim=50, epochs=1, learning_rate=0.0, verbose=False, batch_size=1024)
  rc = base.fit("local_net", z, y, features=f, **init)
  p_nc = np.asarray(jax.nn.softmax(z))
  gap = np.abs(np.asarray(rc(z, features=f)) - p_nc)
  # N(0, 0.01^2) weights on raw 128-d features (norm ~24): the head adds
  # ~0.01 to the logits, so 99.9 % of the 20,000 probabilities move by less
  # than 1e-2 and none by 2e-2
  assert np.quantile(gap, 0.999) < 1e-2 and gap.max() < 2e-2 and gap.mean() < 1e-3
  phi_pca = np.asarray(rc.pca_features(f))
  shift = np.abs(np.asarray(rc.refined_features(z, f)) - phi_pca).max()
  assert shift < 1e-2 * np.abs(phi_pca).max()
  assert rc.params["w_g"].shape == () and rc.params["b_phi"].shape == ()  # C = 10: scalars
  # flax's default initialisation does not start at the backbone
  flax_default = base.fit("local_net", z, y, features=f, init_scale=None, **init)
  assert np.abs(np.asarray(flax_default(z, features=f)) - p_nc).max() > 0.5


def test_residual_vectors_for_many_classes():
  phi, logits, y = _make(n=400, C=12)
  opts = {**OPTS, "epochs": 1}
  rc = base.fit("local_net", logits, y, features=phi, **opts)
  assert rc.residual_vectors and rc.params["w_g"].shape == (12,)
  assert rc.params["w_phi"].shape == (8,) and rc.params["b_g"].shape == (12,)
  scalars = base.fit("local_net", logits, y, features=phi, residual_vectors=False, **opts)
  assert scalars.params["w_g"].shape == ()


# ---------------------------------------------------------------- fitting


def test_lowers_lce_and_keeps_accuracy(setup):
  rc, phi, logits, y, te = (setup[k] for k in ("rc", "phi", "logits", "y", "te"))
  feats = rc.pca_features(phi[te])  # calibration-split PCA, as in the paper
  p_nc = jax.nn.softmax(logits[te])
  p_ln = rc(logits[te], features=phi[te])
  assert p_ln.shape == p_nc.shape
  np.testing.assert_allclose(np.asarray(p_ln).sum(1), 1.0, atol=1e-5)
  nc = metrics.lce(p_nc, y[te], feats, bandwidth=2.0)
  ln = metrics.lce(p_ln, y[te], feats, bandwidth=2.0)
  assert float(ln.lce) < 0.8 * float(nc.lce)
  acc_nc = float(jnp.mean(p_nc.argmax(1) == y[te]))
  acc_ln = float(jnp.mean(p_ln.argmax(1) == y[te]))
  assert abs(acc_ln - acc_nc) <= 0.01


def test_structure_and_history(setup):
  rc = setup["rc"]
  assert rc.feature_dim == 10 and rc.pca_dim == 8 and rc.num_classes == 3
  assert rc.pca_components.shape == (10, 8)
  assert rc.history.shape == (10, len(HISTORY_COLUMNS)) and np.all(np.isfinite(rc.history))
  assert rc.epochs_run == 10 and not rc.stopped_early and rc.monitor == "alignment"
  # the kept epoch is the one with the lowest validation alignment term
  assert rc.best_epoch == 1 + int(np.argmin(np.asarray(rc.history)[:, 5]))
  phi, logits, te = setup["phi"], setup["logits"], setup["te"]
  assert rc.refined_features(logits[te], phi[te]).shape == (1000, 8)
  np.testing.assert_allclose(
    np.asarray(jax.nn.softmax(rc.logits(logits[te], phi[te]))),
    np.asarray(rc(logits[te], features=phi[te])),
    atol=1e-6,
  )


def test_early_stopping_stops_and_restores(setup):
  phi, logits, y, cal = (setup[k] for k in ("phi", "logits", "y", "cal"))
  opts = {**OPTS, "epochs": 40, "patience": 2, "learning_rate": 0.05, "monitor": "loss"}
  rc = base.fit("local_net", logits[cal], y[cal], features=phi[cal], **opts)
  h = np.asarray(rc.history)
  assert rc.stopped_early and rc.epochs_run == rc.best_epoch + 2 < 40
  assert rc.best_epoch == 1 + int(np.argmin(h[:, 4]))
  last = base.fit("local_net", logits[cal], y[cal], features=phi[cal], restore_best=False, **opts)
  assert last.best_epoch == last.epochs_run == rc.epochs_run
  assert not np.array_equal(
    np.asarray(last.params["hidden"]["kernel"]), np.asarray(rc.params["hidden"]["kernel"])
  )


def test_deterministic_given_seed(setup):
  phi, logits, y, cal = (setup[k] for k in ("phi", "logits", "y", "cal"))
  again = base.fit("local_net", logits[cal], y[cal], features=phi[cal], seed=0, **OPTS)
  for a, b in zip(jax.tree_util.tree_leaves(setup["rc"]), jax.tree_util.tree_leaves(again)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  other = base.fit(
    "local_net", logits[cal], y[cal], features=phi[cal], seed=1, **{**OPTS, "epochs": 1}
  )
  assert not np.array_equal(
    np.asarray(other.params["hidden"]["kernel"]), np.asarray(again.params["hidden"]["kernel"])
  )


@pytest.mark.parametrize("ext", ["npz", "msgpack"])
def test_save_load_roundtrip(setup, tmp_path, ext):
  rc, phi, logits, y, te = (setup[k] for k in ("rc", "phi", "logits", "y", "te"))
  ko = kernel_calibrator(rc, logits[:200], y[:200], phi[:200])
  for obj, cls in ((rc, LocalNet), (ko, KernelCalibrator)):
    path = tmp_path / f"{cls.method}.{ext}"
    base.save(obj, str(path))
    back = base.load(str(path))
    assert type(back) is cls
    assert (back.feature_dim, back.pca_dim, back.best_epoch, back.stopped_early) == (
      obj.feature_dim,
      obj.pca_dim,
      obj.best_epoch,
      obj.stopped_early,
    )
    np.testing.assert_array_equal(
      np.asarray(back(logits[te], features=phi[te])), np.asarray(obj(logits[te], features=phi[te]))
    )


def test_pytree_jit(setup):
  rc, phi, logits, te = (setup[k] for k in ("rc", "phi", "logits", "te"))
  run = jax.jit(lambda r, z, f: (r.apply(z, f), r(z, features=f)))
  out, called = run(rc, logits[te], phi[te])
  eager = np.asarray(rc(logits[te], features=phi[te]))
  np.testing.assert_allclose(np.asarray(out), eager, atol=1e-6)
  np.testing.assert_allclose(np.asarray(called), eager, atol=1e-6)
  # under jit bad features or logits give NaN rows, never plausible probabilities,
  # and the other rows keep their values (one bad row used to make all NaN)
  bad = phi[te].copy()
  bad[3, 0] = np.nan
  zbad = np.array(logits[te])
  zbad[7, 1] = np.inf
  for z, f, row in ((logits[te], bad, 3), (zbad, phi[te], 7)):
    got = np.asarray(run(rc, z, f)[1])
    assert np.isnan(got[row]).all()
    np.testing.assert_allclose(
      np.delete(got, row, axis=0), np.delete(eager, row, axis=0), atol=1e-6
    )


def test_checkpoint_holds_best_params(setup):
  params, meta = load_checkpoint(setup["ckpt"] / "local_net_best.msgpack")
  assert meta["epoch"] == setup["rc"].best_epoch and meta["monitor"] == "alignment"
  for a, b in zip(jax.tree_util.tree_leaves(params), jax.tree_util.tree_leaves(setup["rc"].params)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_apply_value_errors(setup):
  rc, phi, logits, te = (setup[k] for k in ("rc", "phi", "logits", "te"))
  with pytest.raises(ValueError, match="dimension"):
    rc(logits[te], features=phi[te, :9])  # feature dim mismatch
  with pytest.raises(ValueError, match="features"):
    rc(logits[te])  # features missing
  with pytest.raises(
    ValueError, match=r"features has 500 rows but the predictions have n = 1000 rows"
  ):
    rc(logits[te], features=phi[2000:2500])  # row mismatch
  bad = phi[te].copy()
  bad[0, 0] = np.nan
  with pytest.raises(ValueError, match="NaN"):
    rc(logits[te], features=bad)
  with pytest.raises(ValueError, match="classes"):
    rc(logits[te, :2], features=phi[te])
  with pytest.raises(ValueError, match=r"features must have shape \(n, 10\), got \(1000, 9\)"):
    rc.pca_features(phi[te, :9])


@pytest.mark.parametrize(
  "bad,match",
  [
    ("no_features", "needs the backbone features"),
    ("nan", "NaN"),
    ("bandwidth0", "bandwidth"),
    ("bandwidth_neg", "bandwidth"),
    ("bandwidth_tiny", r"bandwidth = 1e-20 is below the smallest supported bandwidth 1.08e-19"),
    ("alignment", "alignment must be one of"),
    ("monitor", "monitor must be one of"),
    ("rows", "rows"),
    ("val_fraction", "val_fraction"),
    ("labels", "label"),
    ("pca_dim", "pca_dim = 11 exceeds"),
    ("lam", "lam must be"),
    ("patience", "patience must be"),
    ("from_logits", "from_logits must be True or False"),
    ("bandwidth_str", "bandwidth must be a number"),
    ("learning_rate_neg", "learning_rate must be >= 0"),
    ("learning_rate_nan", "learning_rate must be a finite number, got nan"),
    ("dropout_str", "dropout must be a number"),
    ("verbose", "verbose must be True or False, got 'no'"),
    ("residual_vectors", "residual_vectors must be True or False"),
    ("seed", "seed must be an int, got 2.5"),
    ("epochs", "epochs must be >= 1, got 0"),
    ("batch_size", "batch_size must be >= 1, got 0"),
    # every batch held one real row, weighed 0: all losses and gradients were 0 and the
    # fit silently trained nothing (found by a review helper)
    ("batch_size_one", r"batch_size must be >= 2, got 1: the kernel estimate of a row is over"),
    ("hidden", "hidden must be >= 1, got 0"),
    # XLA's out-of-memory error before (found by a review helper)
    ("hidden_huge", r"with hidden = 1000000000000, the hidden layer's .* pass hidden <= "),
    ("seed_huge", r"seed must be <= 9223372036854775807, got 9223372036854775808: jax"),
    ("alignment_weight", "alignment_weight must be >= 0"),
    ("init_scale", "init_scale must be > 0"),
    ("dropout", r"dropout must be in \[0, 1\), got 1.0"),
    # float32 overflow: a non-finite loss at epoch 1 (a FloatingPointError telling the
    # user to lower the option), or an overflow warning and an infinite bandwidth
    ("huge_learning_rate", r"learning_rate = 1e\+39 is beyond float32's range \(3.4e\+38\)"),
    ("huge_lam", r"lam = 1e\+39 is beyond float32's range"),
    ("huge_alignment_weight", r"alignment_weight = 1e\+39 is beyond float32's range"),
    ("huge_init_scale", r"init_scale = 1e\+39 is beyond float32's range"),
    ("huge_bandwidth", r"bandwidth = 1e\+39 is beyond float32's range"),
  ],
)
def test_fit_value_errors(bad, match):
  phi, logits, y = _make(n=200)
  kw = dict(features=phi, verbose=False, epochs=1)
  if bad == "no_features":
    del kw["features"]
  elif bad == "nan":
    phi = phi.copy()
    phi[5, 5] = np.nan
    kw["features"] = phi
  elif bad == "bandwidth0":
    kw["bandwidth"] = 0.0
  elif bad == "bandwidth_neg":
    kw["bandwidth"] = -3.0
  elif bad == "bandwidth_tiny":  # its square underflows: every prediction was NaN
    kw["bandwidth"] = 1e-20
  elif bad == "alignment":
    kw["alignment"] = "paper"
  elif bad == "monitor":
    kw["monitor"] = "val_total"
  elif bad == "rows":
    kw["features"] = phi[:150]
  elif bad == "val_fraction":
    kw["val_fraction"] = 1.0
  elif bad == "labels":
    y = y + 5
  elif bad == "pca_dim":
    kw["pca_dim"] = 11
  elif bad == "lam":
    kw["lam"] = -1.0
  elif bad == "patience":
    kw["patience"] = 0
  elif bad == "from_logits":
    kw["from_logits"] = "yes"
  elif bad == "bandwidth_str":
    kw["bandwidth"] = "10"
  elif bad == "learning_rate_neg":
    kw["learning_rate"] = -1.0  # gradient ascent
  elif bad == "learning_rate_nan":
    kw["learning_rate"] = float("nan")  # used to fail with "try a larger bandwidth"
  elif bad == "dropout_str":
    kw["dropout"] = "0.3"
  elif bad == "verbose":
    kw["verbose"] = "no"
  elif bad == "residual_vectors":
    kw["residual_vectors"] = 1
  elif bad == "seed":
    kw["seed"] = 2.5
  elif bad in ("epochs", "batch_size", "hidden"):
    kw[bad] = 0
  elif bad == "batch_size_one":
    kw["batch_size"] = 1
  elif bad == "hidden_huge":
    kw["hidden"] = 10**12
  elif bad == "seed_huge":
    kw["seed"] = 2**63
  elif bad == "alignment_weight":
    kw[bad] = -0.5
  elif bad == "init_scale":
    kw[bad] = 0.0
  elif bad == "dropout":
    kw[bad] = 1.0
  elif bad.startswith("huge_"):
    kw[bad[len("huge_") :]] = 1e39
  for method in ("local_net", "kcal"):
    with pytest.raises(ValueError, match=match):
      base.fit(method, logits, y, **kw)
  if bad == "bandwidth_tiny":  # float64 features under x64: the network still runs in float32
    with jax.enable_x64(True), pytest.raises(ValueError, match=match):
      base.fit("kcal", logits.astype(np.float64), y, **{**kw, "features": phi.astype(np.float64)})


# ---------------------------------------------------------------- K-Cal


def test_kcal_predicts_with_the_kernel(setup):
  phi, logits, y, cal, te = (setup[k] for k in ("phi", "logits", "y", "cal", "te"))
  kc = base.fit("kcal", logits[cal], y[cal], features=phi[cal], seed=0, **OPTS)
  assert isinstance(kc, KernelCalibrator) and kc.monitor == "ce"
  # the kept epoch is the one with the lowest validation cross-entropy
  assert kc.best_epoch == 1 + int(np.argmin(np.asarray(kc.history)[:, 6]))
  assert kc.memory_labels.shape == (200,)  # the 10 % validation split
  p = np.asarray(kc(logits[te], features=phi[te]))
  np.testing.assert_allclose(p.sum(1), 1.0, atol=1e-5)
  assert p.min() > 0  # the weight floor keeps every class possible
  # a kernel estimate: the memory-weighted labels at phi'(x), recomputed here
  q = np.asarray(kc.refined_features(logits[te], phi[te]), np.float64)
  mem = np.asarray(kc.memory_features, np.float64)
  d2 = ((q[:, None] - mem[None]) ** 2).sum(-1)
  w = np.exp(-(d2 - d2.min(1, keepdims=True)) / (2 * kc.bandwidth**2))
  w = np.maximum(w / w.sum(1, keepdims=True), kc.weight_floor)
  want = w @ np.eye(3)[np.asarray(kc.memory_labels)] / w.sum(1, keepdims=True)
  np.testing.assert_allclose(p, want, atol=1e-4)
  acc = float(np.mean(p.argmax(1) == y[te]))
  assert acc > float(np.mean(np.asarray(logits[te]).argmax(1) == y[te])) - 0.05


def test_kcal_trains_without_the_alignment_term(setup):
  phi, logits, y, cal = (setup[k] for k in ("phi", "logits", "y", "cal"))
  kc = base.fit("kcal", logits[cal], y[cal], features=phi[cal], **{**OPTS, "epochs": 2})
  h = np.asarray(kc.history)
  np.testing.assert_allclose(h[:, 1], h[:, 3], rtol=1e-5)  # total = CE when a = 0
  with pytest.raises(ValueError, match="unknown option 'epoch'; did you mean 'epochs'"):
    base.fit("kcal", logits[cal], y[cal], features=phi[cal], epoch=3)
  with pytest.raises(TypeError, match="unexpected keyword"):
    fit_kcal(logits[cal], y[cal], features=phi[cal], epoch=3)


# ------------------------------------------------------------------ loss


def test_js_distances():
  p = jax.nn.softmax(jax.random.normal(jax.random.key(0), (6, 4)))
  q = jax.nn.softmax(jax.random.normal(jax.random.key(1), (6, 4)))
  d = js_distance(p, q)
  np.testing.assert_allclose(np.asarray(d), np.asarray(js_distance(q, p)), rtol=1e-6)
  assert np.all(np.asarray(js_distance(p, p)) < 1e-5)
  # the floor under the square root keeps the gradient finite at P = Q
  assert np.all(np.isfinite(np.asarray(jax.grad(lambda a: js_distance(a, q).sum())(q))))
  assert np.all((np.asarray(d) > 0) & (np.asarray(d) <= np.sqrt(np.log(2)) + 1e-6))
  onehot = jax.nn.one_hot(jnp.array([0, 1]), 4)
  np.testing.assert_allclose(
    np.asarray(js_distance(onehot, onehot[::-1])), np.sqrt(np.log(2)), rtol=1e-6
  )
  # the authors' variant: floor sqrt(1e-4) = 0.01 for equal inputs
  np.testing.assert_allclose(np.asarray(bernoulli_js_distance(p, p)), 0.01, rtol=1e-5)
  assert np.all(np.asarray(bernoulli_js_distance(p, q)) > 0.01)
  # against a float64 port of the authors' compute_multiclass_kl_divergence
  pp, qq = (np.clip(np.asarray(a, np.float64), 1e-4, 1 - 1e-4) for a in (p, q))
  m = np.clip(0.5 * (pp + qq), 1e-4, 1 - 1e-4)
  kl = lambda a: a * np.log(a / m) + (1 - a) * np.log((1 - a) / (1 - m))
  want = np.sqrt(np.maximum(0.5 * (kl(pp) + kl(qq)), 1e-4)).mean(1)
  np.testing.assert_allclose(np.asarray(bernoulli_js_distance(p, q)), want, rtol=1e-5)


@pytest.mark.parametrize("alignment", ["classwise", "multiclass"])
def test_loss_finite_with_gradient(alignment):
  k1, k2 = jax.random.split(jax.random.key(0))
  g = jax.random.normal(k1, (16, 3)) * 5
  phi = jax.random.normal(k2, (16, 4)) * 30  # most kernels underflow
  y = jnp.arange(16) % 3
  w = (jnp.arange(16) < 13).astype(jnp.float32)  # 3 padding rows
  f = lambda g, phi: local_net_loss(g, phi, y, w, bandwidth=1.0, alignment=alignment).total
  val, grads = jax.jit(jax.value_and_grad(f, argnums=(0, 1)))(g, phi)
  assert np.isfinite(float(val))
  assert all(np.all(np.isfinite(np.asarray(x))) for x in grads)
  assert float(jnp.abs(grads[0][13:]).max()) == 0.0  # padding rows do not count
  out = local_net_loss(g, phi, y, w, bandwidth=1.0, lam=2.0, alignment_weight=0.5)
  np.testing.assert_allclose(float(out.total), 0.5 * out.alignment + 2.0 * out.ce, rtol=1e-6)


def test_explicit_validation_data(setup):
  phi, logits, y = setup["phi"], setup["logits"], setup["y"]
  tr, va = slice(0, 1800), slice(1800, 2000)  # same shapes as the fixture: no recompilation
  rc = base.fit(
    "local_net",
    logits[tr],
    y[tr],
    features=phi[tr],
    validation_data=(logits[va], y[va], phi[va]),
    seed=0,
    **{**OPTS, "epochs": 2},
  )
  assert rc.history.shape == (2, len(HISTORY_COLUMNS)) and rc.feature_dim == 10
  with pytest.raises(ValueError, match="dimension"):
    base.fit(
      "local_net",
      logits[tr],
      y[tr],
      features=phi[tr],
      validation_data=(logits[va], y[va], phi[va, :5]),
      **OPTS,
    )
  # one validation row has no other row to estimate it from: with val_fraction=0 it
  # was accepted (a constant validation CE of 18.4), else refused naming val_fraction
  for vf in (0.1, 0.0):
    with pytest.raises(ValueError, match=r"validation_data has 1 row\(s\)"):
      base.fit(
        "local_net",
        logits[tr],
        y[tr],
        features=phi[tr],
        validation_data=(logits[1800:1801], y[1800:1801], phi[1800:1801]),
        val_fraction=vf,
        **OPTS,
      )


def test_the_validation_monitor_does_not_follow_the_callers_row_order():
  # The validation loss estimates each row from the other rows of its batch; batches
  # taken in the caller's order (sorted by class: one class per batch) made it read
  # 0.15 where shuffled rows read 1.0, and another epoch was restored.
  phi, logits, y = _make(seed=3, n=1500)
  va = np.arange(900, 1500)
  sorted_va = va[np.argsort(y[va], kind="stable")]
  ce = []
  for rows in (va, sorted_va):
    rc = base.fit(
      "local_net",
      logits[:900],
      y[:900],
      features=phi[:900],
      validation_data=(logits[rows], y[rows], phi[rows]),
      seed=0,
      **{**OPTS, "epochs": 2, "batch_size": 128},
    )
    ce.append(rc.history[:, HISTORY_COLUMNS.index("val_ce")])
  np.testing.assert_allclose(ce[1], ce[0], rtol=0.1)


# ------------------------------------------------------------------- PCA


def test_fit_pca_against_numpy_and_bad_inputs():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(200, 6)) @ rng.normal(size=(6, 6))
  pca = train.fit_pca(x.astype(np.float32), 3)
  z = (x - x.mean(0)) / x.std(0)
  _, s, vt = np.linalg.svd(z, full_matrices=False)
  got = np.asarray(pca.components)
  np.testing.assert_allclose(np.abs(got), np.abs(vt[:3].T), atol=1e-4)
  np.testing.assert_allclose(np.asarray(pca.explained_variance), s[:3] ** 2 / 199, rtol=1e-4)
  bad = x.copy()
  bad[3, 2] = np.nan
  with pytest.raises(ValueError, match="NaN"):
    train.fit_pca(bad, 3)
  from jaxcal._src.train.pca import _fit_pca

  traced = jax.jit(_fit_pca, static_argnums=1)(bad.astype(np.float32), 3)
  assert np.isnan(np.asarray(traced.scale)[2])  # was 1.0 beside NaN mean and components
  with pytest.raises(ValueError, match="pass 1 <= k <= min"):
    train.fit_pca(x, 0)
  with pytest.raises(ValueError, match=r"min\(n, D\) = 6"):
    train.fit_pca(x, 7)
  with pytest.raises(ValueError, match="integer"):
    train.fit_pca(x, 2.5)
  with pytest.raises(ValueError, match="shape"):
    train.fit_pca(x[:, 0], 1)


def test_pca_signs_constant_features_and_transform():
  rng = np.random.default_rng(1)
  x = rng.normal(size=(120, 5)) @ rng.normal(size=(5, 5)) + 3.0
  x[:, 4] = 7.0  # a constant feature: scale 1, not a division by 0
  pca = train.fit_pca(x.astype(np.float32), 5)
  np.testing.assert_allclose(np.asarray(pca.mean), x.mean(0), rtol=1e-5)
  np.testing.assert_allclose(np.asarray(pca.scale), [*x[:, :4].std(0), 1.0], rtol=1e-5)
  comps = np.asarray(pca.components)
  # every component's largest-magnitude entry is positive (deterministic signs)
  assert np.all(comps[np.abs(comps).argmax(0), np.arange(5)] > 0)
  z = (x - x.mean(0)) / np.asarray(pca.scale, np.float64)
  np.testing.assert_allclose(np.asarray(train.standardize(pca, x)), z, atol=1e-4)
  np.testing.assert_allclose(np.asarray(train.pca_transform(pca, x)), z @ comps, atol=1e-4)
  # the constant feature adds no variance: four components carry it all
  np.testing.assert_allclose(float(pca.explained_variance[4]), 0.0, atol=1e-5)
  np.testing.assert_allclose(float(pca.explained_variance.sum()), 4 * 120 / 119, rtol=1e-5)
  with pytest.raises(ValueError, match="k must be an integer"):
    train.fit_pca(x, True)


# ---------------------------------------------- float64 references (numpy)


def _loss_ref(g, phi, y, w, bandwidth, lam=1.0, alignment="classwise", a=1.0):
  """The LoCal Net loss from its definition: leave-one-out Nadaraya–Watson
  label estimate theta over the real rows, alignment d(softmax(g), theta),
  CE -log max(theta_y, 1e-8), weighted means."""
  g, phi, w = (np.asarray(v, np.float64) for v in (g, phi, w))
  n, num_classes = g.shape
  onehot = np.eye(num_classes)[np.asarray(y)]
  d2 = ((phi[:, None] - phi[None]) ** 2).sum(-1)
  ok = (w[None, :] > 0) & ~np.eye(n, dtype=bool)
  logk = np.where(ok, -d2 / (2 * bandwidth**2), -np.inf)
  k = np.exp(logk - logk.max(1, keepdims=True))
  theta = k @ onehot / k.sum(1, keepdims=True)
  p = np.exp(g - g.max(1, keepdims=True))
  p /= p.sum(1, keepdims=True)
  if alignment == "classwise":
    pp, qq = np.clip(p, 1e-4, 1 - 1e-4), np.clip(theta, 1e-4, 1 - 1e-4)
    m = np.clip(0.5 * (pp + qq), 1e-4, 1 - 1e-4)
    kl = lambda u: u * np.log(u / m) + (1 - u) * np.log((1 - u) / (1 - m))
    align = np.sqrt(np.maximum(0.5 * (kl(pp) + kl(qq)), 1e-4)).mean(1)
  else:
    m = 0.5 * (p + theta)
    kl = lambda u: np.where(u > 0, u * np.log(np.where(u > 0, u, 1.0) / m), 0.0).sum(1)
    align = np.sqrt(np.maximum(0.5 * (kl(p) + kl(theta)), 1e-12))
  ce = -np.log(np.maximum(theta[np.arange(n), np.asarray(y)], 1e-8))
  al, c = (align * w).sum() / w.sum(), (ce * w).sum() / w.sum()
  return np.array([a * al + lam * c, al, c])


def _forward_ref(rc, z, f):
  """``(phi', g')`` of a fitted LoCal Net from its parameters (float64)."""
  prm = jax.tree_util.tree_map(lambda v: np.asarray(v, np.float64), rc.params)
  f = np.asarray(f, np.float64)
  std = (f - np.asarray(rc.pca_mean, np.float64)) / np.asarray(rc.pca_scale, np.float64)
  phi_pca = std @ np.asarray(rc.pca_components, np.float64)
  dense = lambda layer, h: h @ prm[layer]["kernel"] + prm[layer]["bias"]
  h = np.maximum(dense("hidden", std if rc.standardize_input else f), 0.0)
  phi_ref = dense("head_features", h) + prm["w_phi"] * phi_pca + prm["b_phi"]
  g_ref = dense("head_logits", h) + prm["w_g"] * np.asarray(z, np.float64) + prm["b_g"]
  return phi_ref, g_ref


@pytest.mark.parametrize("alignment", ["classwise", "multiclass"])
def test_loss_against_float64_reference(alignment):
  rng = np.random.default_rng(3)
  phi = rng.normal(size=(14, 2))
  phi[10], phi[11] = (20.0, 20.0), (20.1, 20.0)  # row 10's only neighbour has another class
  phi[12:] = phi[:2] + 0.01  # padding rows next to real ones
  y = np.array([0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 0, 1, 2, 2])
  w = np.r_[np.ones(12), 0.0, 0.0]
  g = rng.normal(size=(14, 3)) * 2
  args = (g.astype(np.float32), phi.astype(np.float32), y, w.astype(np.float32))
  out = local_net_loss(*args, bandwidth=0.5, lam=2.0, alignment=alignment, alignment_weight=0.5)
  want = _loss_ref(g, phi, y, w, 0.5, lam=2.0, alignment=alignment, a=0.5)
  np.testing.assert_allclose(np.asarray(out), want, rtol=1e-5)
  assert want[2] > -np.log(1e-8) / 12  # row 10's CE is the floor's


def test_forward_against_float64_reference(setup):
  rc, phi, logits, te = (setup[k] for k in ("rc", "phi", "logits", "te"))
  phi_ref, g_ref = _forward_ref(rc, logits[te], phi[te])
  np.testing.assert_allclose(
    np.asarray(rc.refined_features(logits[te], phi[te])), phi_ref, atol=1e-4
  )
  np.testing.assert_allclose(np.asarray(rc.logits(logits[te], phi[te])), g_ref, atol=1e-4)
  p = np.exp(g_ref - g_ref.max(1, keepdims=True))
  np.testing.assert_allclose(
    np.asarray(rc(logits[te], features=phi[te])), p / p.sum(1, keepdims=True), atol=1e-5
  )


def test_module_initialisation_and_dropout():
  net = LocalNetModule(20, 400, 500, 100, 0.5, residual_vectors=True, rngs=nnx.Rngs(0))
  prm = jax.tree_util.tree_map(np.asarray, nnx.to_pure_dict(nnx.state(net, nnx.Param)))
  for layer in ("hidden", "head_features", "head_logits"):  # N(0, 0.01^2) weights, zero biases
    assert abs(prm[layer]["kernel"].std() - 0.01) < 1e-3 and not prm[layer]["bias"].any()
  assert prm["w_phi"].shape == prm["b_phi"].shape == (400,) and prm["b_g"].shape == (500,)
  assert np.all(prm["w_phi"] == 1.0) and np.all(prm["w_g"] == 1.0)
  for b in (prm["b_phi"], prm["b_g"]):  # N(0, 0.01^2)
    assert abs(b.std() - 0.01) < 1.5e-3 and abs(b.mean()) < 2e-3
  x, zf, zg = (
    jax.random.normal(jax.random.key(1), (4, 20)),
    jnp.zeros((4, 400)),
    jnp.zeros((4, 500)),
  )
  run = nnx.jit(lambda m, k: m(x, zf, zg, key=k))
  np.testing.assert_array_equal(np.asarray(run(net, None)[1]), np.asarray(net(x, zf, zg)[1]))
  assert not np.allclose(np.asarray(run(net, jax.random.key(2))[1]), np.asarray(net(x, zf, zg)[1]))
  flax_default = LocalNetModule(20, 4, 5, 300, 0.0, init_scale=None, rngs=nnx.Rngs(0))
  assert np.asarray(flax_default.hidden.kernel[...]).std() > 0.1  # lecun normal: 1/sqrt(20)


def test_patience_counts_ties_and_history_is_the_validation_loss():
  # learning rate 0: every epoch has the same validation values, and a tie
  # is no improvement (strictly lower), so the first epoch stays the best
  phi, logits, y = _make(n=300)
  phi = 5 * phi + 2  # standardised and raw inputs differ
  opts = {**OPTS, "learning_rate": 0.0, "patience": 2, "standardize_input": True, "init_scale": 0.3}
  rc = base.fit("local_net", logits, y, features=phi, **{**opts, "epochs": 4})
  assert (rc.epochs_run, rc.best_epoch, rc.stopped_early) == (3, 1, True)
  last = base.fit("local_net", logits, y, features=phi, **{**opts, "epochs": 3})
  assert (last.epochs_run, last.best_epoch, last.stopped_early) == (3, 1, False)
  # the validation columns are the loss of the fitted net on the held-out 10 %
  va = train.calibration_fit_val(300, 0)[1]
  phi_ref, g_ref = _forward_ref(rc, logits[va], phi[va])
  np.testing.assert_allclose(
    np.asarray(rc.history)[:, 4:],
    np.tile(_loss_ref(g_ref, phi_ref, y[va], np.ones(30), 2.0), (3, 1)),
    rtol=1e-4,
  )


def test_no_validation_split_and_explicit_memory():
  phi, logits, y = _make(n=300)
  opts = {**OPTS, "epochs": 2, "patience": 1}
  # val_fraction 0: no early stopping, the last epoch kept, the memory is the whole split;
  # pca_dim may be min(n, D)
  kc = fit_kcal(logits, y, features=phi, val_fraction=0.0, **{**opts, "pca_dim": 10})
  assert np.isnan(np.asarray(kc.history)[:, 4:]).all()
  assert (kc.epochs_run, kc.best_epoch, kc.stopped_early) == (2, 2, False)
  np.testing.assert_array_equal(np.asarray(kc.memory_labels), y)
  # validation_data: the validation split is the memory
  kc = fit_kcal(
    logits[:250],
    y[:250],
    features=phi[:250],
    validation_data=(logits[250:], y[250:], phi[250:]),
    **opts,
  )
  np.testing.assert_array_equal(np.asarray(kc.memory_labels), y[250:])
  np.testing.assert_allclose(
    np.asarray(kc.memory_features), _forward_ref(kc, logits[250:], phi[250:])[0], atol=1e-4
  )
  with pytest.raises(ValueError, match=r"weight_floor must be in \[0, 1\), got 1.0"):
    kernel_calibrator(kc, logits[:5], y[:5], phi[:5], weight_floor=1.0)
  with pytest.raises(ValueError, match=r"too few samples \(10\)"):
    base.fit("local_net", logits[:10], y[:10], features=phi[:10], **opts)


def test_bad_options_raise_before_training(tmp_path, monkeypatch):
  """Options refused up front with a ValueError naming them: each used to train an epoch and
  then fail (a FileExistsError from a file checkpoint_dir, weight_floor of fit_kcal), fail
  deep inside (len() of an int validation_data) or abort the process (a huge batch_size)."""
  phi, logits, y = _make(n=200)
  kw = dict(features=phi, verbose=False, epochs=1, pca_dim=4)
  (tmp_path / "file").write_text("")
  epochs = []
  monkeypatch.setattr(
    "jaxcal._src.recal.local_net.train_epoch", lambda *a, **k: epochs.append(1) or 1 / 0
  )
  for opts, match in [
    ({"checkpoint_dir": tmp_path / "file"}, r"checkpoint_dir '.*file' is a file, not a folder"),
    ({"validation_data": 3}, r"validation_data must be a tuple \(inputs, labels, features\)"),
    (
      {"batch_size": 46341},
      r"batch_size = 46341, the \(B, B\) batch kernel would hold 2,147,488,281 entries.*"
      r"pass batch_size <= 46340",
    ),
  ]:
    for method in ("local_net", "kcal"):
      with pytest.raises(ValueError, match=match):
        base.fit(method, logits, y, **kw, **opts)
  for method in ("local_net", "kcal"):  # a TypeError, as for every other path argument
    with pytest.raises(TypeError, match="checkpoint_dir must be a folder path, got int"):
      base.fit(method, logits, y, **kw, checkpoint_dir=3)
  with pytest.raises(ValueError, match=r"weight_floor must be in \[0, 1\), got 2"):
    fit_kcal(logits, y, weight_floor=2, **kw)
  assert not epochs


def test_kernel_calibrator_takes_a_local_net_or_a_kernel_calibrator():
  phi, logits, y = _make(n=200)
  net = base.fit("local_net", logits, y, features=phi, verbose=False, epochs=1, pca_dim=4)
  kc = kernel_calibrator(net, logits[:50], y[:50], phi[:50])
  # a KernelCalibrator's memory is replaced (was "got multiple values for 'memory_features'")
  kc2 = kernel_calibrator(kc, logits[50:80], y[50:80], phi[50:80])
  ref = kernel_calibrator(net, logits[50:80], y[50:80], phi[50:80])
  assert kc2.memory_labels.shape == (30,)
  np.testing.assert_array_equal(
    np.asarray(kc2(logits, features=phi)), np.asarray(ref(logits, features=phi))
  )
  # any other recalibrator is named (was an AttributeError: no '_check')
  with pytest.raises(TypeError, match="net must be a fitted LocalNet .*got TemperatureScaling"):
    kernel_calibrator(base.fit("temperature", logits, y), logits[:50], y[:50], phi[:50])
  # under jit a memory label out of range makes the predictions NaN (they were the
  # memory's class frequencies: the traced check's flag was dropped)
  bad = np.array(y[:50]).copy()
  bad[3] = 7
  kcb = jax.jit(lambda yy: kernel_calibrator(net, logits[:50], yy, phi[:50]))(bad)
  assert np.isnan(np.asarray(kcb(logits, features=phi))).all()
  good = jax.jit(lambda yy: kernel_calibrator(net, logits[:50], yy, phi[:50]))(y[:50])
  np.testing.assert_allclose(
    np.asarray(good(logits, features=phi)), np.asarray(kc(logits, features=phi)), rtol=1e-6
  )


# ------------------------------------------------- training utilities


class _Shift(nnx.Module):
  def __init__(self):
    self.b = nnx.Param(jnp.zeros(()))


def _mean_terms(model, batch, weights, key):
  """Squared error to a shift; reports the batch means of x, x^2 and whether a key came."""
  (x,) = batch
  den = jnp.maximum(jnp.sum(weights), 1.0)
  loss = jnp.sum(weights * (x - model.b[...]) ** 2) / den
  had_key = jnp.float32(key is not None)
  return loss, jnp.stack([jnp.sum(weights * x) / den, jnp.sum(weights * x * x) / den, had_key])


def test_train_epoch_and_evaluate_count_every_sample_once():
  import optax

  graphdef, params = nnx.split(_Shift(), nnx.Param)
  x = jnp.arange(1.0, 11.0)  # 10 samples in batches of 4: the last one padded
  want = [5.5, 38.5]  # mean of x and of x^2
  tx = optax.sgd(0.1)
  new, _, terms = train.train_epoch(
    graphdef,
    tx,
    params,
    tx.init(params),
    (x,),
    jax.random.key(0),
    loss_fn=_mean_terms,
    batch_size=4,
  )
  np.testing.assert_allclose(np.asarray(terms), [*want, 1.0], rtol=1e-6)
  assert float(new["b"][...]) > 0  # three steps towards the data
  ev = train.evaluate(graphdef, params, (x,), loss_fn=_mean_terms, batch_size=4)
  np.testing.assert_allclose(np.asarray(ev), [*want, 0.0], rtol=1e-6)  # no key: no dropout


def _paired_terms(model, batch, weights, key):
  """:func:`_mean_terms` on rows that have a partner: a batch of one real row weighs it 0
  (as LoCal Net's loss, whose target is an estimate over the *other* rows)."""
  weights = jnp.where(jnp.sum(weights > 0) >= 2, weights, 0.0)
  return _mean_terms(model, batch, weights, key)


def test_a_batch_below_min_rows_takes_no_optimiser_step():
  """5 rows in batches of 4: the last batch holds one row, whose loss has a zero gradient.
  With momentum the optimiser still moved the parameters on it (a step on no data, as
  LoCal Net's Adam did for a lone last row); ``min_rows=2`` leaves the parameters and
  the optimiser state as the full batch left them."""
  import optax

  graphdef, params = nnx.split(_Shift(), nnx.Param)
  x = jnp.arange(1.0, 6.0)
  tx = optax.sgd(0.1, momentum=0.9)
  key = jax.random.key(0)
  run = lambda **kw: train.train_epoch(
    graphdef, tx, params, tx.init(params), (x,), key, loss_fn=_paired_terms, batch_size=4, **kw
  )
  stepped, _, _ = run()
  kept, state, terms = run(min_rows=2)
  # the full batch's four rows (the epoch's permutation): one SGD step from b = 0
  first = np.asarray(x)[np.asarray(jax.random.permutation(jax.random.split(key)[0], 5))[:4]]
  grad = -2.0 * np.mean(first)
  np.testing.assert_allclose(float(kept["b"][...]), -0.1 * grad, rtol=1e-6)
  np.testing.assert_allclose(float(stepped["b"][...]), -0.1 * grad * 1.9, rtol=1e-6)
  np.testing.assert_allclose(float(jax.tree.leaves(state)[0]), grad, rtol=1e-6)  # momentum
  np.testing.assert_allclose(float(terms[0]), np.mean(first) * 4 / 5, rtol=1e-6)  # still counted
  # a batch of exactly min_rows rows steps (5 rows in batches of 3: the last holds 2)
  run3 = lambda **kw: train.train_epoch(
    graphdef, tx, params, tx.init(params), (x,), key, loss_fn=_paired_terms, batch_size=3, **kw
  )
  np.testing.assert_array_equal(float(run3(min_rows=2)[0]["b"][...]), float(run3()[0]["b"][...]))
  assert float(run3(min_rows=3)[0]["b"][...]) != float(run3()[0]["b"][...])
  with pytest.raises(ValueError, match="min_rows must be >= 1, got 0"):
    run(min_rows=0)
  with pytest.raises(ValueError, match=r"min_rows must be <= batch_size \(4\), got 5"):
    run(min_rows=5)  # no batch would step: it trained nothing, without a word


def test_models_and_to_float_images():
  np.testing.assert_allclose(
    np.asarray(train.to_float_images(jnp.array([0, 51, 255], jnp.uint8))),
    [-0.5, -0.3, 0.5],
    atol=1e-7,
  )
  mlp = train.make_model("mlp_s", num_classes=3, seed=0)
  prm = jax.tree_util.tree_map(
    lambda v: np.asarray(v, np.float64), nnx.to_pure_dict(nnx.state(mlp, nnx.Param))
  )
  x = np.asarray(jax.random.normal(jax.random.key(0), (5, 28, 28)))
  h = np.maximum(x.reshape(5, -1) @ prm["layers"][0]["kernel"] + prm["layers"][0]["bias"], 0.0)
  # the architecture, checked in float32 arithmetic: a GPU's default matrix
  # product rounds its inputs to TF32 (8e-4 off on an H200), as training may
  with jax.default_matmul_precision("highest"):
    feats, logits = np.asarray(mlp.features(x)), np.asarray(mlp(x))
  np.testing.assert_allclose(feats, h, atol=1e-4)
  np.testing.assert_allclose(logits, h @ prm["head"]["kernel"] + prm["head"]["bias"], atol=1e-4)
  cnn = train.make_model("cnn", num_classes=3)  # dropout 0.2, applied only with a key
  assert cnn.feature_dim == 128 and cnn.dropout.rate == 0.2
  np.testing.assert_array_equal(
    np.asarray(cnn(x)), np.asarray(cnn.logits_from_features(cnn.features(x)))
  )
  assert not np.allclose(np.asarray(cnn(x, key=jax.random.key(1))), np.asarray(cnn(x)))
  np.testing.assert_array_equal(np.asarray(cnn(x[..., None])), np.asarray(cnn(x)))  # (n, 28, 28, 1)
  # odd sides round up: 28 -> 14 -> 7 -> 4
  odd = train.CNN(28, (2, 2, 2), 4, 3, rngs=nnx.Rngs(0))
  assert odd(x).shape == (5, 3)
  with pytest.raises(ValueError, match="unknown architecture 'resnet'; available: mlp_s"):
    train.make_model("resnet")


def test_cnn_s_is_the_committed_backbone(fmnist):
  assert train.make_model("cnn_s").feature_dim == fmnist[2].shape[1] == 128
  assert fmnist[0].shape[1] == 10


def test_train_classifier_and_predict():
  rng = np.random.default_rng(0)
  images = rng.integers(0, 256, (40, 28, 28), dtype=np.uint8)
  labels = (images.reshape(40, -1).mean(1) > 127.5).astype(np.int32)
  seen = []
  model = train.make_model("mlp_s", num_classes=2)
  logits, feats = train.predict(model, images, batch_size=16, with_features=True)
  assert logits.shape == (40, 2) and feats.shape == (40, 64)
  direct = np.asarray(model(train.to_float_images(jnp.asarray(images))), np.float64)
  np.testing.assert_allclose(logits, direct, atol=1e-4)
  np.testing.assert_allclose(
    feats, np.asarray(model.features(train.to_float_images(jnp.asarray(images)))), atol=1e-4
  )
  # learning rate 0: each epoch's loss is the untrained model's mean cross-entropy
  ce = -(direct[np.arange(40), labels] - np.log(np.exp(direct).sum(1)))
  out = train.train_classifier(
    model,
    images,
    labels,
    epochs=2,
    batch_size=16,
    learning_rate=0.0,
    verbose=False,
    on_epoch=lambda e, m, loss: seen.append((e, loss)),
  )
  np.testing.assert_allclose(out.train_loss, [ce.mean()] * 2, rtol=1e-5)
  assert [e for e, _ in seen] == [1, 2] and np.allclose([v for _, v in seen], out.train_loss)
  # a second fit with the same settings reuses the compiled epoch (a new optax.adam per
  # call, compared by identity, compiled it again: 5 s a call for the small CNN)
  from jaxcal._src.train import loop

  compiled = loop._train_epoch._cache_size()
  train.train_classifier(model, images, labels, epochs=1, batch_size=16, learning_rate=0.0)
  assert loop._train_epoch._cache_size() == compiled
  fit = train.train_classifier(
    model, images, labels, epochs=3, batch_size=16, learning_rate=1e-2, verbose=False
  )
  assert fit.train_loss[-1] < fit.train_loss[0]
  assert not np.allclose(train.predict(fit.model, images)[0], logits)

  class _WithBatchNorm(nnx.Module):
    def __init__(self):
      self.norm = nnx.BatchNorm(4, rngs=nnx.Rngs(0))

  with pytest.raises(ValueError, match="only state is nnx.Param"):
    train.train_classifier(_WithBatchNorm(), images, labels, epochs=1, verbose=False)


def test_splits():
  s = train.local_calibration_splits(1000, seed=3)
  assert [s[k].size for k in ("train", "val", "test")] == [450, 100, 450]  # 45 / 10 / 45 %
  allidx = np.concatenate([s["train"], s["val"], s["test"]])
  np.testing.assert_array_equal(np.sort(allidx), np.arange(1000))
  assert all(np.all(np.diff(v) > 0) for v in s.values())
  assert not np.array_equal(s["train"], train.local_calibration_splits(1000, seed=4)["train"])
  fit, val = train.calibration_fit_val(1000, seed=3)
  assert (fit.size, val.size) == (900, 100)
  np.testing.assert_array_equal(np.sort(np.r_[fit, val]), np.arange(1000))
  assert np.all(np.diff(fit) > 0) and np.all(np.diff(val) > 0)
  assert train.calibration_fit_val(1000, seed=3, val_fraction=0.25)[1].size == 250
  assert [a.size for a in train.calibration_fit_val(27, 0)] == [24, 3]  # round(2.7), not int
  t = train.trace_splits(50, 11, seed=1)
  np.testing.assert_array_equal(np.sort(t["train_order"]), np.arange(50))
  assert not np.array_equal(t["train_order"], np.arange(50))
  assert (t["val"].size, t["test"].size) == (5, 6)
  np.testing.assert_array_equal(np.sort(np.r_[t["val"], t["test"]]), np.arange(11))
  assert np.all(np.diff(t["val"]) > 0) and np.all(np.diff(t["test"]) > 0)


def test_probabilities_as_inputs(setup):
  # from_logits=False takes log-probabilities: a per-row shift of the logits,
  # which the scalar w_g carries to g' and the softmax removes
  phi, logits, y, cal, te = (setup[k] for k in ("phi", "logits", "y", "cal", "te"))
  probs = np.asarray(jax.nn.softmax(logits))
  rc = base.fit(
    "local_net", probs[cal], y[cal], features=phi[cal], from_logits=False, seed=0, **OPTS
  )
  np.testing.assert_allclose(
    np.asarray(rc(probs[te], features=phi[te])),
    np.asarray(setup["rc"](logits[te], features=phi[te])),
    atol=1e-2,  # equal in exact arithmetic; Adam amplifies rounding over 10 epochs (1.7e-3)
  )


def test_training_utilities_refuse_bad_input():
  """Each case used to give a silent wrong result or a raw flax/JAX/numpy error."""
  import optax

  rng = np.random.default_rng(0)
  images = rng.integers(0, 256, (12, 28, 28), dtype=np.uint8)
  labels = np.arange(12) % 2
  model = train.make_model("mlp_s", num_classes=2)
  fit = lambda **kw: train.train_classifier(
    model, *kw.pop("data", (images, labels)), **{"epochs": 1, "verbose": False, **kw}
  )
  for kw, msg in [
    (dict(epochs=-1), "epochs must be >= 0"),  # trained nothing
    (dict(epochs=1.5), "epochs must be an int"),
    (dict(batch_size=0), "batch_size must be >= 1"),  # ZeroDivisionError
    (dict(batch_size=True), "batch_size must be an int"),  # batches of one
    (dict(learning_rate=float("nan")), "learning_rate must be a finite number"),
    (dict(learning_rate=-1.0), "learning_rate must be >= 0"),
    (dict(seed=2.5), "seed must be an int"),
    (dict(verbose="no"), "verbose must be True or False"),
    (dict(data=(images, labels[:8])), "labels has 8 entries but images has n = 12"),  # clamped
    (dict(data=(images, labels * 5)), r"labels must lie in \[0, 2\)"),  # NaN loss
    (dict(data=(images, labels + 0.5)), "labels must be integers"),  # truncated
    (dict(data=(images / 255.0, labels)), "images must hold integer pixel values"),  # /255 twice
    (dict(data=(images[:0], labels[:0])), "n >= 1"),
    (dict(data=(images[:, :10, :10], labels)), r"does not take images of shape \(10, 10\)"),
    # found by a review helper: XLA's out-of-memory error; a NaN model without a word
    (dict(batch_size=10**9), r"batch_size = 1000000000, a batch of 784 pixels .* above 2\^31"),
    (dict(learning_rate=1e300), r"learning_rate = 1e\+300 is beyond float32's range"),
    (dict(seed=2**63), "seed must be <= 9223372036854775807"),
  ]:
    with pytest.raises(ValueError, match=msg):
      fit(**kw)
  with pytest.raises(FloatingPointError, match="loss is not finite at epoch 2 .*smaller learning"):
    fit(learning_rate=1e30, epochs=3)  # diverges: the model came back NaN, no error
  with pytest.raises(TypeError, match="on_epoch must be callable"):
    fit(on_epoch=5)  # raised after the first epoch
  with pytest.raises(TypeError, match="model must be a flax nnx.Module"):
    train.train_classifier(object(), images, labels, epochs=1)
  with pytest.raises(ValueError, match="batch_size must be >= 1"):
    train.predict(model, images, batch_size=0)
  with pytest.raises(ValueError, match="with_features must be True or False"):
    train.predict(model, images, with_features="no")  # truthy: features came back
  with pytest.raises(ValueError, match="n >= 1"):
    train.predict(model, images[:0])
  with pytest.raises(ValueError, match="integer pixel values"):
    train.to_float_images(jnp.array([0.5, 1.0]))
  # int pixels beyond 255 (or negative) gave values outside [-0.5, 0.5] silently
  for bad in (np.array([0, 256], np.int32), jnp.array([-1, 3], jnp.int16)):
    with pytest.raises(
      ValueError, match=r"pixel values in \[0, 255\].*got values in \[-?\d+, \d+\]"
    ):
      train.to_float_images(bad)
    out = np.asarray(jax.jit(train.to_float_images)(jnp.asarray(bad)))
    assert np.isnan(out).sum() == 1 and np.all(np.abs(out[~np.isnan(out)]) <= 0.5)
  with pytest.raises(ValueError, match=r"images must hold pixel values in \[0, 255\]"):
    train.predict(model, images.astype(np.int32) + 200)
  ok = np.asarray(train.to_float_images(np.array([0, 255], np.int64)))
  np.testing.assert_allclose(ok, [-0.5, 0.5])
  # the compiled epoch: rows of data must agree (the gather clamped the shorter array)
  graphdef, params = nnx.split(_Shift(), nnx.Param)
  x = jnp.arange(1.0, 11.0)
  tx = optax.sgd(0.1)
  with pytest.raises(ValueError, match=r"same number n >= 1 of rows, got leading sizes \[10, 5\]"):
    train.train_epoch(
      graphdef,
      tx,
      params,
      tx.init(params),
      (x, x[:5]),
      jax.random.key(0),
      loss_fn=_mean_terms,
      batch_size=4,
    )
  with pytest.raises(ValueError, match="key must be a JAX PRNG key"):
    train.train_epoch(
      graphdef, tx, params, tx.init(params), (x,), 0, loss_fn=_mean_terms, batch_size=4
    )
  with pytest.raises(ValueError, match="batch_size must be >= 1"):
    train.evaluate(graphdef, params, (x,), loss_fn=_mean_terms, batch_size=0)
  # models, PCA, splits
  with pytest.raises(ValueError, match="num_classes must be >= 2"):
    train.make_model("mlp_s", num_classes=0)  # ZeroDivisionError in flax
  with pytest.raises(ValueError, match="seed must be an int"):
    train.make_model("mlp_s", seed=2.5)
  with pytest.raises(TypeError, match="arch must be an architecture name"):
    train.make_model(["mlp"])
  f = rng.normal(size=(20, 4))
  pca = train.fit_pca(f, 2)
  with pytest.raises(ValueError, match=r"x must have shape \(n, 4\)"):
    train.pca_transform(pca, f[:, :1])  # broadcast to a plausible (n, 2)
  with pytest.raises(TypeError, match="pca must be a PCA"):
    train.standardize(tuple(pca)[:2], f)
  with pytest.raises(ValueError, match="n_train must be >= 0"):
    train.local_calibration_splits(-1, seed=0)  # empty splits
  with pytest.raises(ValueError, match="n_train must be an int"):
    train.trace_splits(np.array([5, 7, 9]), 10)  # permuted the array
  with pytest.raises(ValueError, match="seed must be an int"):
    train.calibration_fit_val(10, None)  # fresh entropy, not reproducible
  with pytest.raises(ValueError, match="val_fraction must be >= 0"):
    train.calibration_fit_val(10, 0, val_fraction=-0.5)
  with pytest.raises(ValueError, match=r"val_fraction must be in \[0, 1\]"):
    train.calibration_fit_val(10, 0, val_fraction=1.5)


def test_kernel_calibrator_keeps_a_class_missing_from_its_memory_positive():
  """A class the memory split lacks gets a tiny positive probability, with a warning (it was
  exactly 0: a test log loss of inf); with every class present nothing changes."""
  from jaxcal._src.recal.local_net import _kernel_predict

  rng = np.random.default_rng(0)
  q, mem = rng.normal(size=(5, 3)), rng.normal(size=(8, 3))
  onehot = np.eye(3)[np.array([0, 1, 0, 1, 0, 1, 0, 1])]  # class 2 absent
  got = np.asarray(
    _kernel_predict(jnp.asarray(q), jnp.asarray(mem), jnp.asarray(onehot), 1.0, 1e-6)
  )
  assert np.all(got[:, 2] > 0) and np.all(got[:, 2] < 1e-5)
  np.testing.assert_allclose(got.sum(1), 1.0, rtol=1e-6)
  full = np.eye(3)[np.array([0, 1, 2, 1, 0, 1, 0, 1])]
  w = np.exp(-((q[:, None] - mem[None]) ** 2).sum(-1) / 2)
  w = np.maximum(w / w.sum(1, keepdims=True), 1e-6)
  np.testing.assert_allclose(
    np.asarray(_kernel_predict(jnp.asarray(q), jnp.asarray(mem), jnp.asarray(full), 1.0, 1e-6)),
    w @ full / w.sum(1, keepdims=True),
    rtol=1e-5,
  )
  phi = jax.random.normal(jax.random.key(0), (300, 8))
  y = jnp.where(phi[:, 0] > 0, 1, 0).at[:3].set(2)  # class 2: three samples, none in memory
  logits = jnp.stack([-phi[:, 0], phi[:, 0], jnp.zeros(300)], 1)
  net = base.fit("local_net", logits, y, features=phi, pca_dim=4, epochs=1, verbose=False)
  with pytest.warns(UserWarning, match=r"holds no sample of 1 of the 3 classes \(2\)"):
    kc = kernel_calibrator(net, logits[100:], y[100:], phi[100:])
  assert float(jnp.min(kc(logits, features=phi))) > 0
  # device labels closed over by a user's jit (the logits traced): the same warning and
  # memory (the count was read from a staged-out scatter: TracerArrayConversionError)
  mem_y = y[100:]
  with pytest.warns(UserWarning, match=r"holds no sample of 1 of the 3 classes \(2\)"):
    traced = jax.jit(lambda z: kernel_calibrator(net, z, mem_y, phi[100:]).memory_features)(
      logits[100:]
    )
  np.testing.assert_allclose(np.asarray(traced), np.asarray(kc.memory_features), atol=1e-6)


def test_a_batch_of_one_row_adds_no_fake_loss():
  """A last batch holding one real row has no kernel neighbour (theta = 0): it counted a CE
  of -log 1e-8 = 18.4, so 65 validation rows in batches of 64 read a CE of 0.98 against 0.70
  in one batch of 65, with the network fixed (found by a review helper). Now the row is left
  out and the figures agree to about one row in 65."""
  from jaxcal.recalibrate import fit

  rng = np.random.default_rng(0)
  phi = rng.normal(size=(650, 6)).astype(np.float32)
  y = (phi[:, 0] > 0).astype(np.int32)
  z = np.stack([-phi[:, 0], phi[:, 0]], 1).astype(np.float32)
  hist = {}
  for bs in (64, 65):
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      r = fit(
        "local_net",
        z,
        y,
        features=phi,
        pca_dim=4,
        epochs=1,
        verbose=False,
        batch_size=bs,
        learning_rate=0.0,
      )
    hist[bs] = np.asarray(r.history)[0]
  assert abs(hist[64][6] - hist[65][6]) < 0.02  # validation CE: 0.98 against 0.70 before
  assert abs(hist[64][5] - hist[65][5]) < 0.01  # validation alignment


def test_a_last_batch_of_one_row_does_not_dilute_the_reported_means():
  """With ``m = B + 1`` validation rows the last batch holds one row, which has no kernel
  estimate and is weighed 0; the loop still divided by all ``m`` rows, so the history read
  ``B / (B + 1)`` of the mean over the rows with an estimate (found by a review helper).
  Now it is that mean: the loss of the first batch, recomputed from the kept network."""
  from jaxcal.recalibrate import fit

  rng = np.random.default_rng(0)
  phi = rng.normal(size=(300, 6)).astype(np.float32)
  y = (phi[:, 0] > 0).astype(np.int32)
  z = np.stack([-phi[:, 0], phi[:, 0]], 1).astype(np.float32)
  B = 32
  zv, yv, fv = z[: B + 1], y[: B + 1], phi[: B + 1]
  opts = dict(features=phi, pca_dim=4, epochs=1, verbose=False, batch_size=B, bandwidth=2.0)
  opts = {**opts, "learning_rate": 0.0, "dropout": 0.0, "validation_data": (zv, yv, fv)}
  rc = fit("local_net", z, y, **opts)
  first = np.random.default_rng([0, 1]).permutation(B + 1)[:B]  # _train's validation order
  want = local_net_loss(
    rc.logits(zv, fv)[first],
    rc.refined_features(zv, fv)[first],
    yv[first],
    np.ones(B, np.float32),
    bandwidth=2.0,
  )
  np.testing.assert_allclose(np.asarray(rc.history)[0, 4:], np.asarray(want), rtol=1e-5)


def test_local_net_takes_no_step_on_a_lone_last_row(monkeypatch):
  """m = B + 1 training rows: the last batch holds one row, with no kernel estimate and a
  zero gradient; Adam stepped on it along its momentum. Each epoch now runs with
  ``min_rows=2`` (whose effect test_a_batch_below_min_rows_takes_no_optimiser_step
  checks)."""
  from jaxcal._src.recal import local_net as LN
  from jaxcal.recalibrate import fit

  phi, logits, y = _make(n=33)
  seen = []
  epoch = LN.train_epoch

  def spy(*a, **kw):
    seen.append(kw.get("min_rows"))
    return epoch(*a, **kw)

  monkeypatch.setattr(LN, "train_epoch", spy)
  opts = dict(features=phi, pca_dim=4, epochs=2, verbose=False, batch_size=32, val_fraction=0.0)
  fit("local_net", logits, y, **opts)
  assert seen == [2, 2]


def test_a_non_finite_validation_loss_raises():
  """Validation features 1e30 times the calibration ones overflow the float32 kernel: the
  validation loss was NaN, never below the best value, so the fit silently kept the initial
  network with best_epoch 0 (found by a review helper). Now a FloatingPointError, as for
  the training loss."""
  from jaxcal.recalibrate import fit

  phi, logits, y = _make(n=300)
  val = (logits[:50], y[:50], phi[:50] * np.float32(1e30))
  opts = dict(features=phi, pca_dim=4, epochs=1, verbose=False, validation_data=val)
  with pytest.raises(
    FloatingPointError, match="LoCal Net validation loss is not finite at epoch 1"
  ):
    fit("local_net", logits, y, **opts)


@pytest.mark.parametrize("residual_vectors", [False, True])
def test_the_network_is_float32_and_drawn_alike_under_x64(residual_vectors):
  # the residual scalars/vectors took the default dtype: float64 under x64, so a
  # fit on float32 data returned float64 probabilities, 1.1e-3 off the x64-free fit
  from flax import nnx

  def params():
    m = LocalNetModule(10, 4, 3, 8, 0.0, residual_vectors=residual_vectors, rngs=nnx.Rngs(0))
    return jax.tree.leaves(nnx.state(m, nnx.Param))

  assert all(b.dtype == jnp.float32 for b in assert_same_under_x64(params))


def test_patience_counts_consecutive_epochs_without_improvement(monkeypatch):
  """An improvement resets the patience count: early stopping waits ``patience``
  epochs without a lower validation value *in a row*, not in all (scripted curve)."""
  from jaxcal._src.recal import local_net as ln

  curve = iter([5.0, 4.0, 4.5, 3.0, 3.5, 3.6, 1.0, 1.0, 1.0, 1.0])
  monkeypatch.setattr(ln, "evaluate", lambda *a, **k: jnp.full(3, next(curve), jnp.float32))
  phi, logits, y = _make(n=300)
  opts = {**OPTS, "learning_rate": 0.0, "patience": 2, "standardize_input": True, "init_scale": 0.3}
  opts = {**opts, "epochs": 10, "monitor": "loss"}  # the shapes of the test above: compiled once
  rc = base.fit("local_net", logits, y, features=phi, **opts)
  # best at epochs 2 and 4; epochs 5 and 6 are the two without improvement after it
  assert (rc.epochs_run, rc.best_epoch, rc.stopped_early) == (6, 4, True)
  np.testing.assert_allclose(np.asarray(rc.history)[:, 4], [5.0, 4.0, 4.5, 3.0, 3.5, 3.6])


def test_trace_splits_follow_their_seed_as_documented():
  """``trace_splits``: one ``default_rng(seed)`` draws the test-set halves first,
  then the training order (the seed is used, the draw order is the documented one)."""
  for seed in (0, 7):
    t = train.trace_splits(50, 11, seed=seed)
    rng = np.random.default_rng(seed)
    perm = rng.permutation(11)
    np.testing.assert_array_equal(t["val"], np.sort(perm[:5]))
    np.testing.assert_array_equal(t["test"], np.sort(perm[5:]))
    np.testing.assert_array_equal(t["train_order"], rng.permutation(50))
  assert not np.array_equal(
    train.trace_splits(50, 11, seed=0)["val"], train.trace_splits(50, 11)["val"]
  )


def test_train_classifier_is_train_epoch_with_a_per_epoch_key():
  """``train_classifier`` = Adam epochs of ``train_epoch`` keyed by
  ``fold_in(key(seed), epoch)``: a new batch order each epoch, and the seed used."""
  import optax

  from jaxcal._src.train import loop

  rng = np.random.default_rng(1)
  images = rng.integers(0, 256, (24, 28, 28), dtype=np.uint8)
  labels = (images.reshape(24, -1).mean(1) > 127.5).astype(np.int32)
  model = train.make_model("mlp_s", num_classes=2, seed=0)
  fit = train.train_classifier(
    model, images, labels, epochs=2, batch_size=8, learning_rate=1e-2, seed=5, verbose=False
  )
  graphdef, params = nnx.split(model, nnx.Param)
  tx = optax.adam(1e-2)
  state = tx.init(params)
  data = (jnp.asarray(images), jnp.asarray(labels))
  for e in (1, 2):
    key = jax.random.fold_in(jax.random.key(5), e)
    params, state, _ = train.train_epoch(
      graphdef, tx, params, state, data, key, loss_fn=loop._classifier_loss, batch_size=8
    )
  got = jax.tree.leaves(nnx.state(fit.model, nnx.Param))
  for a, b in zip(got, jax.tree.leaves(params), strict=True):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


def _key_draws(model, batch, weights, key):
  """Reports a uniform draw of the batch's key and its square (for distinct keys)."""
  u = jax.random.uniform(key)
  return jnp.float32(0.0) * model.b[...], jnp.stack([u, u * u])


def test_train_epoch_gives_each_batch_its_own_dropout_key():
  """Each mini-batch of an epoch gets its own dropout key: draws that all came
  from one key would have mean(u^2) == mean(u)^2."""
  import optax

  graphdef, params = nnx.split(_Shift(), nnx.Param)
  tx = optax.sgd(0.1)
  x = jnp.arange(40.0)  # 10 full batches of 4
  _, _, (m1, m2) = train.train_epoch(
    graphdef, tx, params, tx.init(params), (x,), jax.random.key(0), loss_fn=_key_draws, batch_size=4
  )
  assert float(m2) - float(m1) ** 2 > 1e-3


def test_the_held_out_split_is_drawn_from_the_seed():
  """The held-out 10 % (early stopping, K-Cal's memory) is
  ``calibration_fit_val(n, seed)``'s validation part: the seed is not ignored."""
  phi, logits, y = _make(n=300)
  for seed in (0, 3):
    kc = fit_kcal(logits, y, features=phi, seed=seed, **{**OPTS, "epochs": 1})
    va = train.calibration_fit_val(300, seed)[1]
    np.testing.assert_array_equal(np.asarray(kc.memory_labels), y[va])
    np.testing.assert_allclose(
      np.asarray(kc.memory_features), _forward_ref(kc, logits[va], phi[va])[0], atol=1e-4
    )


def test_a_fit_with_other_float_options_compiles_nothing_new():
  """A sweep over the float options (same shapes) compiles one fit: the
  bandwidth, lambda, alignment weight and dropout rate reach the compiled
  epoch as traced loss parameters, the learning rate in Adam's state, and a
  prediction compiles without them. Each new value compiled the epoch, the
  validation loss (and the prediction) again before: 2.5-4.5 s a value."""
  phi, logits, y = _make(n=300)
  opts = {**OPTS, "epochs": 1}  # the shapes of test_the_held_out_split_is_drawn_from_the_seed
  other = dict(
    bandwidth=3.0, lam=0.5, learning_rate=3e-3, dropout=0.5, alignment_weight=0.7, init_scale=0.02
  )
  for fit in (fit_local_net, fit_kcal):
    first = fit(logits, y, features=phi, **opts)
    p_first = np.asarray(first(logits, features=phi))
    with no_new_programs():
      second = fit(logits, y, features=phi, **{**opts, **other})
      p_second = np.asarray(second(logits, features=phi))
    assert second.bandwidth == 3.0 and second.dropout == 0.5
    assert not np.allclose(p_first, p_second)  # the options were used
  # a new value of each alone, against the fit above
  for name, value in other.items():
    with no_new_programs():
      fit_kcal(logits, y, features=phi, **{**opts, **other, name: value / 2})


def test_traced_dropout_is_flax_dropout_and_rate_0_is_none():
  """The training epoch's dropout (``keep_prob`` traced, the module compiled at
  rate 0) drops what ``nnx.Dropout`` drops at that rate, keep_prob = 1 changes
  nothing (values and gradients, exactly), and no key means no dropout."""
  flax_rate = LocalNetModule(10, 4, 3, 64, 0.3, rngs=nnx.Rngs(0))
  graphdef, params = nnx.split(LocalNetModule(10, 4, 3, 64, 0.0, rngs=nnx.Rngs(0)), nnx.Param)
  x, zf, zg = (jax.random.normal(jax.random.key(i), (32, d)) for i, d in ((1, 10), (2, 4), (3, 3)))

  @jax.jit
  def run(params, key, keep_prob):
    return nnx.merge(graphdef, params)(x, zf, zg, key=key, keep_prob=keep_prob)

  def loss(params, key, keep_prob):
    phi_ref, g_ref = nnx.merge(graphdef, params)(x, zf, zg, key=key, keep_prob=keep_prob)
    return jnp.sum(phi_ref**2) + jnp.sum(jnp.sin(g_ref))

  plain = run(params, None, None)
  k1, k2 = jax.random.key(7), jax.random.key(8)
  # keep_prob = 1 (rate 0): exactly no dropout, gradient included
  for a, b in zip(run(params, k1, jnp.float32(1.0)), plain, strict=True):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  grad = jax.jit(jax.grad(loss))
  for a, b in zip(
    jax.tree.leaves(grad(params, k1, jnp.float32(1.0))),
    jax.tree.leaves(grad(params, None, None)),
    strict=True,
  ):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  # rate 0.5: it drops (two keys differ), and without a key it does not
  half = jnp.float32(0.5)
  assert not np.allclose(np.asarray(run(params, k1, half)[1]), np.asarray(run(params, k2, half)[1]))
  np.testing.assert_array_equal(np.asarray(run(params, None, half)[1]), np.asarray(plain[1]))
  # rate 0.3: flax's dropout (the module's static rate) with the same key
  want = nnx.jit(lambda m, k: m(x, zf, zg, key=k))(flax_rate, k1)
  got = run(params, k1, jnp.float32(0.7))
  for a, b in zip(got, want, strict=True):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)
  # one program for every rate: (no key, no rate), (no key, a rate), (a key, a rate)
  assert run._cache_size() == 3
