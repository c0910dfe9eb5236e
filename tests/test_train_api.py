"""``jaxcal.train.predict`` on nnx modules other than the built-in backbones."""

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxcal import train


class _Flat(nnx.Module):
  """A linear classifier on flattened images: no ``features`` method."""

  def __init__(self):
    self.linear = nnx.Linear(784, 3, rngs=nnx.Rngs(0))

  def __call__(self, x):
    return self.linear(x.reshape(x.shape[0], -1))


class _Normed(nnx.Module):
  """State beyond nnx.Param (batch statistics), used in evaluation mode."""

  def __init__(self):
    self.linear = nnx.Linear(784, 3, rngs=nnx.Rngs(0))
    self.norm = nnx.BatchNorm(3, rngs=nnx.Rngs(0))

  def __call__(self, x):
    return self.norm(self.linear(x.reshape(x.shape[0], -1)))


@pytest.fixture(scope="module")
def images():
  return np.random.default_rng(0).integers(0, 256, (5, 28, 28), dtype=np.uint8)


def test_predict_takes_a_module_without_features(images):
  model = _Flat()
  logits, feats = train.predict(model, images, batch_size=2)  # two full batches and a padded one
  assert feats is None and logits.shape == (5, 3) and logits.dtype == np.float32
  direct = np.asarray(model(train.to_float_images(jnp.asarray(images))))
  np.testing.assert_allclose(logits, direct, atol=1e-5)
  # flattened images work with a bare nnx.Linear (the audit's case, given inputs it takes)
  linear = nnx.Linear(784, 4, rngs=nnx.Rngs(1))
  flat = images.reshape(5, 784)
  np.testing.assert_allclose(
    train.predict(linear, flat)[0],
    np.asarray(linear(train.to_float_images(jnp.asarray(flat)))),
    atol=1e-5,
  )


def test_predict_names_what_the_model_lacks(images):
  with pytest.raises(TypeError, match=r"with_features=True needs .*features\(x\).*_Flat has no"):
    train.predict(_Flat(), images, with_features=True)
  with pytest.raises(ValueError, match=r"does not take images of shape \(28, 28\)"):
    train.predict(nnx.Linear(784, 10, rngs=nnx.Rngs(0)), images)  # was an AttributeError


def test_predict_uses_the_whole_model_state(images):
  model = _Normed()
  model.eval()  # running averages: mean 0, variance 1 at initialisation
  logits, _ = train.predict(model, images)
  np.testing.assert_allclose(
    logits, np.asarray(model(train.to_float_images(jnp.asarray(images)))), atol=1e-5
  )


def test_predict_with_features_matches_the_logits(images):
  model = train.make_model("mlp_s", num_classes=3)
  plain, _ = train.predict(model, images)
  logits, feats = train.predict(model, images, with_features=True)
  assert feats.shape == (5, model.feature_dim)
  np.testing.assert_allclose(logits, plain, atol=1e-5)


@pytest.mark.parametrize("shape", [(3, 25, 25), (3, 27, 28), (3, 28, 25), (3, 28, 28, 3)])
def test_the_cnn_refuses_images_of_another_size(shape):
  # 25 x 25 images give the flattened width of 28 x 28 ones after the strided
  # convolutions: the CNN returned plausible logits for them
  model = train.make_model("cnn_s", num_classes=3)
  with pytest.raises(ValueError, match=r"this CNN takes \(b, 28, 28\) or \(b, 28, 28, 1\) images"):
    model(jnp.zeros(shape))
  with pytest.raises(ValueError, match=r"does not take images of shape|this CNN takes"):
    train.predict(model, np.zeros(shape, np.uint8))
  assert model(jnp.zeros((3, 28, 28))).shape == model(jnp.zeros((3, 28, 28, 1))).shape == (3, 3)


class _Odd(nnx.Module):
  """A classifier used by one test only (its own compiled batches)."""

  def __init__(self):
    self.linear = nnx.Linear(784, 7, rngs=nnx.Rngs(2))

  def __call__(self, x):
    return self.linear(x.reshape(x.shape[0], -1))


def test_predict_compiles_one_batch_shape_and_pads_the_last(images):
  """``predict`` pads the last, partial batch to ``batch_size``: one compiled
  program for all batches (an unpadded last batch compiled a second one)."""
  from jaxcal._src.train import loop

  model = _Odd()
  before = loop._predict_block._cache_size()
  logits, _ = train.predict(model, images, batch_size=2)  # batches of 2, 2 and 1 (padded)
  assert loop._predict_block._cache_size() == before + 1
  direct = np.asarray(model(train.to_float_images(jnp.asarray(images))))
  np.testing.assert_allclose(logits, direct, atol=1e-5)


def test_a_shorter_progress_line_blanks_the_rest_of_the_longer_one():
  """The progress bar of long fits redraws in place (``\\r``): a line shorter
  than the one before is padded with spaces, so no stale text is left behind."""
  import io

  from jaxcal._src.progress import Progress

  out = io.StringIO()
  bar = Progress(10, "fit", delay=0.0, min_interval=0.0, stream=out)
  bar.update(1, "a long postfix that the next line does not have")
  bar.update(2)
  first, second = out.getvalue().split("\r")[1:3]
  assert len(second) == len(first) and "postfix" not in second
  assert second.rstrip().startswith("fit") and second[len(second.rstrip()) :].strip() == ""
