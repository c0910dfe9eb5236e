"""jaxcal.data: loading without pickle, the embedded default, synthetic truth."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcal import data, metrics, scores


def test_default_predictions_are_the_shared_cifar_logits(cifar_dir):
  x, y = data.default_predictions("test")
  ref_x = np.load(cifar_dir / "cifar10_resnet110" / "test_logits.npy")
  ref_y = np.load(cifar_dir / "cifar10_resnet110" / "test_labels.npy")
  np.testing.assert_array_equal(x, ref_x)
  np.testing.assert_array_equal(y, ref_y)
  xv, yv = data.default_predictions("val")
  assert xv.shape == (5000, 10) and yv.dtype == np.int32


def test_load_layouts(tmp_path):
  rng = np.random.default_rng(0)
  z = rng.normal(size=(20, 4)).astype(np.float32)
  y = rng.integers(0, 4, 20)
  np.savez(tmp_path / "a.npz", logits=z, labels=y)
  np.savez(tmp_path / "b.npz", val_logits=z, val_labels=y, test_logits=2 * z, test_labels=y)
  (tmp_path / "dir").mkdir()
  np.save(tmp_path / "dir" / "test_logits.npy", z)
  np.save(tmp_path / "dir" / "test_labels.npy", y)
  np.save(tmp_path / "s.npy", z)
  np.save(tmp_path / "l.npy", y.astype(np.float64))
  for path, expect in (
    (tmp_path / "a.npz", z),
    (tmp_path / "b.npz", 2 * z),
    (tmp_path / "dir", z),
    (f"{tmp_path / 's.npy'},{tmp_path / 'l.npy'}", z),
  ):
    xx, yy = data.load_predictions(path)
    np.testing.assert_array_equal(xx, expect)
    np.testing.assert_array_equal(yy, y)
  xx, _ = data.load_predictions(tmp_path / "b.npz", split="val")
  np.testing.assert_array_equal(xx, z)
  p = jax.nn.softmax(z)
  assert data.looks_like_probs(np.asarray(p)) and not data.looks_like_probs(z)


def test_load_rejects_pickle_and_bad_files(tmp_path):
  obj = np.empty(3, dtype=object)
  np.savez(tmp_path / "pickled.npz", logits=obj, labels=np.arange(3))
  with pytest.raises(ValueError, match="pickled"):
    data.load_predictions(tmp_path / "pickled.npz")
  np.savez(tmp_path / "nolabels.npz", logits=np.zeros((3, 2)))
  with pytest.raises(ValueError, match="no labels"):
    data.load_predictions(tmp_path / "nolabels.npz")
  np.savez(tmp_path / "other.npz", foo=np.zeros((3, 2)))
  with pytest.raises(ValueError, match="no predictions found"):
    data.load_predictions(tmp_path / "other.npz")
  np.savez(tmp_path / "mismatch.npz", logits=np.zeros((3, 2)), labels=np.zeros(4, int))
  with pytest.raises(ValueError, match="labels must have shape"):
    data.load_predictions(tmp_path / "mismatch.npz")
  np.savez(tmp_path / "fl.npz", logits=np.zeros((2, 2)), labels=np.array([0.5, 1.0]))
  with pytest.raises(ValueError, match="integers"):
    data.load_predictions(tmp_path / "fl.npz")
  with pytest.raises(ValueError, match="not found"):
    data.load_predictions(tmp_path / "missing.npz")
  with pytest.raises(ValueError, match="holds no labels"):
    np.save(tmp_path / "only.npy", np.zeros((2, 2)))
    data.load_predictions(tmp_path / "only.npy")


def test_synthetic_is_calibrated_at_temperature_one():
  d = data.synthetic(jax.random.key(1), 40_000, 5)
  np.testing.assert_allclose(d.probs, d.true_probs, atol=1e-6)
  # Calibrated: E[Brier] of the true probabilities equals the expected Brier
  # computed from the truth itself, sum_r mu_r (1 - mu_r), up to MC error.
  brier = scores.brier(d.probs, d.labels, per_sample=True)
  expected = jnp.sum(d.true_probs * (1 - d.true_probs), axis=1)
  se = float(jnp.std(brier - expected)) / np.sqrt(brier.shape[0])
  assert abs(float(jnp.mean(brier - expected))) < 4 * se
  # An over-confident copy has a larger truthful error than the truth.
  hot = data.synthetic(jax.random.key(1), 40_000, 5, temperature=0.5)
  np.testing.assert_array_equal(hot.labels, d.labels)
  assert metrics.classwise_ce(hot.probs, hot.labels) > metrics.classwise_ce(d.probs, d.labels)


def test_synthetic_bad_arguments():
  with pytest.raises(ValueError):
    data.synthetic(jax.random.key(0), 0, 3)
  with pytest.raises(ValueError):
    data.synthetic(jax.random.key(0), 10, 1)
  with pytest.raises(ValueError):
    data.synthetic(jax.random.key(0), 10, 3, temperature=0.0)
