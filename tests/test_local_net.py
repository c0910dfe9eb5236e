"""LoCal Nets (SPEC §5): fit on small synthetic data, LCE down, accuracy
kept, deterministic, save/load, checkpoints and ValueErrors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcal import metrics
from jaxcal._src.recal import base
from jaxcal._src.recal.local_net import (
  LocalNet,
  js_distance,
  js_distance_authors,
  load_checkpoint,
  local_net_loss,
)

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
  assert "local_net" in base.methods()


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
  assert rc.history.shape == (10, 3) and np.all(np.isfinite(np.asarray(rc.history)))
  assert 1 <= rc.best_epoch <= 10
  phi, logits, te = setup["phi"], setup["logits"], setup["te"]
  assert rc.refined_features(logits[te], phi[te]).shape == (1000, 8)
  np.testing.assert_allclose(
    np.asarray(jax.nn.softmax(rc.logits(logits[te], phi[te]))),
    np.asarray(rc(logits[te], features=phi[te])),
    atol=1e-6,
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
  rc, phi, logits, te = (setup[k] for k in ("rc", "phi", "logits", "te"))
  path = tmp_path / f"ln.{ext}"
  base.save(rc, str(path))
  back = base.load(str(path))
  assert isinstance(back, LocalNet)
  assert (back.feature_dim, back.pca_dim, back.hidden, back.best_epoch) == (
    rc.feature_dim,
    rc.pca_dim,
    rc.hidden,
    rc.best_epoch,
  )
  np.testing.assert_array_equal(
    np.asarray(back(logits[te], features=phi[te])), np.asarray(rc(logits[te], features=phi[te]))
  )


def test_pytree_jit(setup):
  rc, phi, logits, te = (setup[k] for k in ("rc", "phi", "logits", "te"))
  out = jax.jit(lambda r, z, f: r.apply(z, f))(rc, logits[te], phi[te])
  np.testing.assert_allclose(
    np.asarray(out), np.asarray(rc(logits[te], features=phi[te])), atol=1e-6
  )


def test_checkpoint_holds_best_params(setup):
  params, meta = load_checkpoint(setup["ckpt"] / "local_net_best.msgpack")
  assert meta["epoch"] == setup["rc"].best_epoch
  for a, b in zip(jax.tree_util.tree_leaves(params), jax.tree_util.tree_leaves(setup["rc"].params)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_apply_value_errors(setup):
  rc, phi, logits, te = (setup[k] for k in ("rc", "phi", "logits", "te"))
  with pytest.raises(ValueError, match="dimension"):
    rc(logits[te], features=phi[te, :9])  # feature dim mismatch
  with pytest.raises(ValueError, match="features"):
    rc(logits[te])  # features missing
  with pytest.raises(ValueError):
    rc(logits[te], features=phi[2000:2500])  # row mismatch
  bad = phi[te].copy()
  bad[0, 0] = np.nan
  with pytest.raises(ValueError, match="NaN"):
    rc(logits[te], features=bad)
  with pytest.raises(ValueError, match="classes"):
    rc(logits[te, :2], features=phi[te])


@pytest.mark.parametrize(
  "bad", ["nan", "bandwidth0", "bandwidth_neg", "alignment", "rows", "val_fraction", "labels"]
)
def test_fit_value_errors(bad):
  phi, logits, y = _make(n=200)
  kw = dict(features=phi, verbose=False, epochs=1)
  if bad == "nan":
    phi = phi.copy()
    phi[5, 5] = np.nan
    kw["features"] = phi
  elif bad == "bandwidth0":
    kw["bandwidth"] = 0.0
  elif bad == "bandwidth_neg":
    kw["bandwidth"] = -3.0
  elif bad == "alignment":
    kw["alignment"] = "kl"
  elif bad == "rows":
    kw["features"] = phi[:150]
  elif bad == "val_fraction":
    kw["val_fraction"] = 1.0
  elif bad == "labels":
    y = y + 5
  with pytest.raises(ValueError):
    base.fit("local_net", logits, y, **kw)


def test_js_distances():
  p = jax.nn.softmax(jax.random.normal(jax.random.key(0), (6, 4)))
  q = jax.nn.softmax(jax.random.normal(jax.random.key(1), (6, 4)))
  d = js_distance(p, q)
  np.testing.assert_allclose(np.asarray(d), np.asarray(js_distance(q, p)), rtol=1e-6)
  assert np.all(np.asarray(js_distance(p, p)) < 1e-5)
  assert np.all((np.asarray(d) > 0) & (np.asarray(d) <= np.sqrt(np.log(2)) + 1e-6))
  onehot = jax.nn.one_hot(jnp.array([0, 1]), 4)
  np.testing.assert_allclose(
    np.asarray(js_distance(onehot, onehot[::-1])), np.sqrt(np.log(2)), rtol=1e-6
  )
  # the authors' variant: floor sqrt(1e-4) = 0.01 for equal inputs
  np.testing.assert_allclose(np.asarray(js_distance_authors(p, p)), 0.01, rtol=1e-5)
  assert np.all(np.asarray(js_distance_authors(p, q)) > 0.01)


@pytest.mark.parametrize("alignment", ["paper", "authors"])
def test_loss_finite_with_gradient(alignment):
  k1, k2 = jax.random.split(jax.random.key(0))
  g = jax.random.normal(k1, (16, 3)) * 5
  phi = jax.random.normal(k2, (16, 4)) * 30  # most kernels underflow
  y = jnp.arange(16) % 3
  w = (jnp.arange(16) < 13).astype(jnp.float32)  # 3 padding rows
  f = lambda g, phi: local_net_loss(g, phi, y, w, bandwidth=1.0, lam=1.0, alignment=alignment)
  val, grads = jax.jit(jax.value_and_grad(f, argnums=(0, 1)))(g, phi)
  assert np.isfinite(float(val))
  assert all(np.all(np.isfinite(np.asarray(x))) for x in grads)
  assert float(jnp.abs(grads[0][13:]).max()) == 0.0  # padding rows do not count


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
  assert rc.history.shape == (2, 3) and rc.feature_dim == 10
  with pytest.raises(ValueError, match="dimension"):
    base.fit(
      "local_net",
      logits[tr],
      y[tr],
      features=phi[tr],
      validation_data=(logits[va], y[va], phi[va, :5]),
      **OPTS,
    )
