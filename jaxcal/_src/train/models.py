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
    """Logits of a batch: ``head(dropout(features(x)))``.

    Args:
      x: ``(b, ...)`` inputs (as :meth:`features` takes them).
      key: a PRNG key for dropout while training; ``None`` (evaluation): no
        dropout.

    Returns:
      ``(b, C)`` logits.
    """
    return self.logits_from_features(self.features(x), key)

  def logits_from_features(self, h: jax.Array, key: jax.Array | None = None) -> jax.Array:
    """Logits from backbone features: ``head(dropout(h))``.

    Args:
      h: ``(b, feature_dim)`` features from :meth:`features`.
      key: a PRNG key for dropout while training; ``None``: no dropout.

    Returns:
      ``(b, C)`` logits.
    """
    if key is not None and self.dropout.rate > 0:
      h = self.dropout(h, deterministic=False, rngs=key)
    return self.head(h)


class MLP(_Backbone):
  """A multilayer perceptron classifier on flattened inputs.

  ``input -> [Dense -> ReLU] * len(hidden) -> Dropout -> Dense(C)``; the
  features are the last hidden layer's activations.

  Args:
    in_dim: number of inputs after flattening (784 for 28x28 images).
    hidden: widths of the hidden layers; the last (``in_dim`` when there is
      none) is the feature dimension ``D`` (``model.feature_dim``).
    num_classes: ``C``.
    dropout: rate of the dropout before the head, applied only when a key
      is passed (``model(x, key=k)``).
    rngs: ``nnx.Rngs`` for the parameter initialisation.

  Calling ``model(x, key=None)`` maps ``(b, ...)`` float inputs to ``(b, C)``
  logits; ``model.features(x)`` gives the ``(b, D)`` features and
  ``model.logits_from_features(h, key=None)`` the logits from them.

  Example:
    >>> import jax.numpy as jnp
    >>> from flax import nnx
    >>> model = MLP(16, (8,), 3, rngs=nnx.Rngs(0))
    >>> model(jnp.zeros((2, 4, 4))).shape, model.features(jnp.zeros((2, 4, 4))).shape
    ((2, 3), (2, 8))
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
    """The last hidden layer's activations (the LoCal Net's backbone features).

    Args:
      x: ``(b, ...)`` inputs, flattened per row.

    Returns:
      ``(b, feature_dim)`` features.
    """
    h = _flat(x)
    for layer in self.layers:
      h = jax.nn.relu(layer(h))
    return h


class CNN(_Backbone):
  """A small convolutional classifier for square single-channel images.

  ``[Conv 3x3, stride 2 -> ReLU] * len(channels) -> Dense(hidden) -> ReLU
  -> Dropout -> Dense(C)``; the features are the ``hidden``-d activations
  before the dropout (the backbone features ``phi(x)`` that a LoCal Net
  takes). The convolutions use ``"SAME"`` padding, so each halves the side
  (rounding up).

  Strided convolutions instead of conv + max-pool: on CPU the backward pass
  of ``reduce_window`` max-pooling costs several times the convolutions.

  Args:
    image_size: side ``H = W`` of the input images.
    channels: output channels of each convolution, in order.
    hidden: width of the dense layer, the feature dimension ``D``
      (``model.feature_dim``).
    num_classes: ``C``.
    dropout: rate of the dropout before the head, applied only when a key
      is passed (``model(x, key=k)``).
    rngs: ``nnx.Rngs`` for the parameter initialisation.

  Calling ``model(x, key=None)`` maps float images ``(b, H, W)`` or
  ``(b, H, W, 1)`` to ``(b, C)`` logits; ``model.features(x)`` gives the
  ``(b, D)`` features and ``model.logits_from_features(h, key=None)`` the
  logits from them.

  Example:
    >>> import jax.numpy as jnp
    >>> from flax import nnx
    >>> model = CNN(8, (4,), 16, 3, rngs=nnx.Rngs(0))
    >>> model(jnp.zeros((2, 8, 8))).shape, model.features(jnp.zeros((2, 8, 8))).shape
    ((2, 3), (2, 16))

  Reference: Barbera et al. (2025), "Multiclass Local Calibration with the
  Jensen-Shannon Distance", arXiv:2510.26566, §7 (the features ``phi(x)``)
  and App. D.1 (their backbones, ResNets, likewise end in dropout and a
  linear head).
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
    self.image_size = image_size

  def features(self, x: jax.Array) -> jax.Array:
    """The dense layer's activations after the convolutions (the backbone features).

    Args:
      x: ``(b, S, S)`` or ``(b, S, S, 1)`` images, ``S`` the model's ``image_size``.

    Returns:
      ``(b, feature_dim)`` features.

    Raises:
      ValueError: images of another shape.
    """
    h = x[..., None] if x.ndim == 3 else x
    side = self.image_size
    if h.ndim != 4 or h.shape[1:] != (side, side, 1):
      # (25 x 25 images gave the flattened width of 28 x 28 ones: plausible logits)
      raise ValueError(
        f"this CNN takes (b, {side}, {side}) or (b, {side}, {side}, 1) images, "
        f"got shape {tuple(x.shape)}"
      )
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

  The architectures (``ARCHITECTURES``) take 28x28 images: ``"mlp_s"``
  (hidden 64), ``"mlp"`` (256), ``"mlp_2x"`` (256, 128), ``"cnn_xs"``
  (channels 8, 16; hidden 32), ``"cnn_s"`` (8, 16; 128) and ``"cnn"``
  (16, 32; 128; dropout 0.2).

  Args:
    arch: a name in ``ARCHITECTURES``.
    num_classes: ``C``, an int ``>= 2``.
    seed: seed of the parameter initialisation (``nnx.Rngs(params=seed)``),
      an int; the same seed gives the same parameters.

  Returns:
    The untrained nnx model (an :class:`MLP` or :class:`CNN`), mapping
    ``(b, 28, 28)`` float images to ``(b, C)`` logits.

  Raises:
    TypeError: ``arch`` is not a string.
    ValueError: an unknown ``arch``, ``num_classes`` not an int ``>= 2`` or
      ``seed`` not an int.

  Example:
    >>> model = make_model("mlp_s", seed=0)
    >>> type(model).__name__, model.feature_dim
    ('MLP', 64)
  """
  if not isinstance(arch, str):
    raise TypeError(f"arch must be an architecture name (str), got {type(arch).__name__}")
  num_classes = V.check_int_option(num_classes, "num_classes", minimum=2)
  seed = V.check_seed(seed)
  if arch not in ARCHITECTURES:
    raise ValueError(f"unknown architecture {arch!r}; available: {', '.join(ARCHITECTURES)}")
  return ARCHITECTURES[arch](num_classes, nnx.Rngs(params=V.seed_key(seed)))
