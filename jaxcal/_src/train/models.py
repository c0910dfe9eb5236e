"""Small flax nnx classifiers for Fashion-MNIST-sized images.

Every model maps ``(n, 28, 28)`` (or ``(n, 28, 28, 1)``) float images to
``(n, C)`` logits; ``model.features(x)`` returns the penultimate activations
(the ``phi(x)`` of the LoCal Nets paper). Dropout is applied only when a PRNG
key is passed (``model(x, key=k)``), so the training loop stays purely
functional (``nnx.split``/``nnx.merge``) and evaluation is deterministic.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
from flax import nnx

from jaxcal._src import validation as V

__all__ = ["MLP", "CNN", "ARCHITECTURES", "make_model"]


def _flat(x: jax.Array) -> jax.Array:
  return x.reshape(x.shape[0], -1)


class _Backbone(nnx.Module):
  """Shared head of the backbones: ``features(x)`` -> dropout -> ``head``."""

  def __call__(self, x: jax.Array, key: jax.Array | None = None) -> jax.Array:
    return self.logits_from_features(self.features(x), key)

  def logits_from_features(self, h: jax.Array, key: jax.Array | None = None) -> jax.Array:
    if key is not None and self.dropout.rate > 0:
      h = self.dropout(h, deterministic=False, rngs=key)
    return self.head(h)


class MLP(_Backbone):
  """``input -> [Dense -> ReLU] * len(hidden) -> Dropout -> Dense(C)``.

  The features are the last hidden layer's activations.
  """

  def __init__(
    self,
    in_dim: int,
    hidden: tuple[int, ...],
    num_classes: int,
    *,
    dropout: float = 0.0,
    rngs: nnx.Rngs,
  ):
    dims = (in_dim,) + tuple(hidden)
    self.layers = nnx.List([nnx.Linear(a, b, rngs=rngs) for a, b in zip(dims[:-1], dims[1:])])
    self.dropout = nnx.Dropout(dropout)
    self.head = nnx.Linear(dims[-1], num_classes, rngs=rngs)
    self.feature_dim = dims[-1]

  def features(self, x: jax.Array) -> jax.Array:
    h = _flat(x)
    for layer in self.layers:
      h = jax.nn.relu(layer(h))
    return h


class CNN(_Backbone):
  """``[Conv3x3 stride 2 -> ReLU] * len(channels) -> Dense(hidden) -> ReLU
  -> Dropout -> Dense(C)``; the features are the ``hidden``-d activations.

  Strided convolutions instead of conv + max-pool: on CPU the backward pass
  of ``reduce_window`` max-pooling costs several times the convolutions.
  """

  def __init__(
    self,
    image_size: int,
    channels: tuple[int, ...],
    hidden: int,
    num_classes: int,
    *,
    dropout: float = 0.0,
    rngs: nnx.Rngs,
  ):
    chans = (1,) + tuple(channels)
    self.convs = nnx.List(
      [
        nnx.Conv(a, b, kernel_size=(3, 3), strides=(2, 2), padding="SAME", rngs=rngs)
        for a, b in zip(chans[:-1], chans[1:])
      ]
    )
    side = image_size
    for _ in channels:
      side = -(-side // 2)
    self.dense = nnx.Linear(side * side * chans[-1], hidden, rngs=rngs)
    self.dropout = nnx.Dropout(dropout)
    self.head = nnx.Linear(hidden, num_classes, rngs=rngs)
    self.feature_dim = hidden

  def features(self, x: jax.Array) -> jax.Array:
    h = x[..., None] if x.ndim == 3 else x
    for conv in self.convs:
      h = jax.nn.relu(conv(h))
    return jax.nn.relu(self.dense(_flat(h)))


#: name -> constructor ``(num_classes, rngs) -> model`` for 28x28 images.
ARCHITECTURES: dict[str, Callable[..., nnx.Module]] = {
  # tiny/small MLPs (fast on CPU; used for checkpoint traces)
  "mlp_s": lambda num_classes, rngs: MLP(784, (64,), num_classes, rngs=rngs),
  "mlp": lambda num_classes, rngs: MLP(784, (256,), num_classes, rngs=rngs),
  "mlp_2x": lambda num_classes, rngs: MLP(784, (256, 128), num_classes, rngs=rngs),
  # small CNNs
  "cnn_xs": lambda num_classes, rngs: CNN(28, (8, 16), 32, num_classes, rngs=rngs),
  "cnn_s": lambda num_classes, rngs: CNN(28, (8, 16), 128, num_classes, rngs=rngs),
  "cnn": lambda num_classes, rngs: CNN(28, (16, 32), 128, num_classes, dropout=0.2, rngs=rngs),
}


def make_model(arch: str, num_classes: int = 10, seed: int = 0) -> nnx.Module:
  """Builds a registered architecture with parameters initialised from ``seed``.

  Raises:
    TypeError: ``arch`` is not a string.
    ValueError: an unknown ``arch``, ``num_classes`` not an int ``>= 2`` or
      ``seed`` not an int.
  """
  if not isinstance(arch, str):
    raise TypeError(f"arch must be an architecture name (str), got {type(arch).__name__}")
  num_classes = V.check_int_option(num_classes, "num_classes", minimum=2)
  seed = V.check_int_option(seed, "seed")
  if arch not in ARCHITECTURES:
    raise ValueError(f"unknown architecture {arch!r}; available: {', '.join(ARCHITECTURES)}")
  return ARCHITECTURES[arch](num_classes, nnx.Rngs(params=seed))
