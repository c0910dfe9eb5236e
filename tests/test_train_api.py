"""``jaxcal.train.predict`` on nnx modules other than the built-in backbones."""

import contextlib
import dataclasses
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from jaxcal import train

sys.path.insert(0, str(pathlib.Path(__file__).parent))  # --import-mode=importlib
from conftest import no_new_programs


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


class _Bias(nnx.Module):
  """One scalar parameter (a model of its own: its own compiled epochs)."""

  def __init__(self):
    self.b = nnx.Param(jnp.zeros(()))


def _to_target(model, batch, weights, key, loss_params):
  """Squared error of the bias to ``x + shift``, ``shift`` a traced loss parameter."""
  (x,) = batch
  den = jnp.maximum(jnp.sum(weights), 1.0)
  loss = jnp.sum(weights * (x + loss_params["shift"] - model.b[...]) ** 2) / den
  return loss, loss[None]


@dataclasses.dataclass(frozen=True)
class _ToTarget:
  """The same loss with ``shift`` a static float (a compiled epoch per value)."""

  shift: float

  def __call__(self, model, batch, weights, key):
    return _to_target(model, batch, weights, key, {"shift": self.shift})


def test_loss_params_are_traced_and_a_four_argument_loss_still_works():
  """``loss_params`` reach ``loss_fn`` as a traced fifth argument: another value
  compiles nothing (a float held by ``loss_fn`` compiles an epoch per value), and
  gives what the loss with that float gives."""
  graphdef, params = nnx.split(_Bias(), nnx.Param)
  tx = optax.sgd(0.1)
  x = jnp.arange(10.0)
  key = jax.random.key(0)
  common = dict(batch_size=4)

  def both(shift):
    traced = train.train_epoch(
      graphdef,
      tx,
      params,
      tx.init(params),
      (x,),
      key,
      loss_fn=_to_target,
      loss_params={"shift": jnp.float32(shift)},
      **common,
    )
    ev = train.evaluate(
      graphdef,
      params,
      (x,),
      loss_fn=_to_target,
      loss_params={"shift": jnp.float32(shift)},
      **common,
    )
    return traced, ev

  both(1.0)
  with no_new_programs():
    (new, _, terms), ev = both(2.5)
  static = train.train_epoch(
    graphdef, tx, params, tx.init(params), (x,), key, loss_fn=_ToTarget(2.5), **common
  )
  np.testing.assert_allclose(np.asarray(new["b"][...]), np.asarray(static[0]["b"][...]), rtol=1e-6)
  np.testing.assert_allclose(np.asarray(terms), np.asarray(static[2]), rtol=1e-6)
  want = train.evaluate(graphdef, params, (x,), loss_fn=_ToTarget(2.5), **common)
  np.testing.assert_allclose(np.asarray(ev), np.asarray(want), rtol=1e-6)
  np.testing.assert_allclose(float(want[0]), float(jnp.mean((x + 2.5) ** 2)), rtol=1e-6)


def test_traced_adam_is_adam_with_one_program_for_every_rate():
  """``traced_adam``: one optimiser object for every learning rate (the rate in
  its state), so another rate compiles nothing; the steps are optax.adam's."""
  from jaxcal._src.train import loop

  graphdef, params = nnx.split(_Bias(), nnx.Param)
  x = jnp.arange(10.0)
  loss_params = {"shift": jnp.float32(0.5)}

  def epochs(tx, state):
    p = params
    for e in range(2):
      p, state, _ = train.train_epoch(
        graphdef,
        tx,
        p,
        state,
        (x,),
        jax.random.key(e),
        loss_fn=_to_target,
        loss_params=loss_params,
        batch_size=4,
      )
    return float(p["b"][...])

  for rate in (1e-2, 0.3):
    tx, state = loop.traced_adam(params, rate)
    assert tx is loop.traced_adam(params, 1.0)[0]
    with no_new_programs() if rate == 0.3 else contextlib.nullcontext():
      got = epochs(tx, state)
    want = epochs(optax.adam(rate), optax.adam(rate).init(params))
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_train_classifier_compiles_nothing_new_for_another_learning_rate():
  """``train_classifier``'s Adam holds the learning rate in its state: a second
  training with another rate compiles nothing (it compiled an epoch per rate,
  and traced the model's output shape on every call)."""
  rng = np.random.default_rng(0)
  images = rng.integers(0, 256, (8, 28, 28), dtype=np.uint8)
  labels = np.arange(8) % 2
  opts = dict(epochs=1, batch_size=4, verbose=False)
  first = train.train_classifier(train.make_model("mlp_s", 2), images, labels, **opts)
  before = train.predict(first.model, images)[0]
  model = train.make_model("mlp_s", 2)
  with no_new_programs():
    again = train.train_classifier(model, images, labels, learning_rate=0.05, **opts)
    after = train.predict(again.model, images)[0]
  assert not np.allclose(before, after)


def test_every_int64_seed_has_its_own_key_with_or_without_x64():
  """Without x64 ``jax.random.key`` keeps a seed's low 32 bits: ``make_model(seed=2**32 + 7)``
  was ``seed=7``'s model, ``-1`` was ``2**32 - 1``'s (found by a review helper). The keys
  are now the x64 ones in both modes, and seeds in [0, 2**32) keep ``jax.random.key``'s."""
  from jaxcal._src import validation as V

  def first_weights(seed):  # every parameter, flat (the first leaf is a zero bias)
    leaves = jax.tree.leaves(nnx.state(train.make_model("mlp_s", seed=seed)))
    return np.concatenate([np.ravel(np.asarray(x)) for x in leaves])

  def data(key):
    return jax.random.key_data(key).tolist()

  for s in (0, 7, 2**32 - 1):  # unchanged
    assert data(V.seed_key(s)) == data(jax.random.key(s))
  w7 = first_weights(7)
  for other in (2**32 + 7, -(2**32) + 7):
    assert not np.array_equal(first_weights(other), w7), other
  assert not np.array_equal(first_weights(-1), first_weights(2**32 - 1))
  seeds = (-1, 2**32 + 7, -(2**63), 2**63 - 1)
  with jax.enable_x64(True):
    under_x64 = [data(jax.random.key(s)) for s in seeds]
    assert [data(V.seed_key(s)) for s in seeds] == under_x64
  assert [data(V.seed_key(s)) for s in seeds] == under_x64  # the same without x64
  assert len({str(k) for k in under_x64}) == len(seeds)
