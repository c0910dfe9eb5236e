"""Loading predictions without pickle, the embedded default, synthetic data."""

from __future__ import annotations

import os
import pathlib
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
  "load_predictions",
  "default_predictions",
  "DEFAULT_PREDICTIONS",
  "synthetic",
  "Synthetic",
  "looks_like_probs",
]

DEFAULT_PREDICTIONS = (
  pathlib.Path(__file__).resolve().parents[1] / "_data" / "cifar10_resnet110.npz"
)

_SCORE_KEYS = ("logits", "probs", "probabilities", "predictions", "scores")


def looks_like_probs(x: np.ndarray, atol: float = 1e-3) -> bool:
  """True when every row is non-negative and sums to one within ``atol``."""
  x = np.asarray(x)
  return bool(x.ndim == 2 and np.all(x >= -atol) and np.all(np.abs(x.sum(axis=1) - 1) <= atol))


def _pick(mapping, split: str, path) -> tuple[np.ndarray, np.ndarray]:
  keys = list(mapping.keys())
  for stem in _SCORE_KEYS:
    for k in (f"{split}_{stem}", stem):
      if k in keys:
        for lk in (f"{split}_labels", "labels", "y"):
          if lk in keys:
            return mapping[k], mapping[lk]
        raise ValueError(f"{path}: found {k!r} but no labels array ('{split}_labels' or 'labels')")
  raise ValueError(
    f"{path}: no predictions found; expected arrays named e.g. '{split}_logits' and "
    f"'{split}_labels', or 'logits'/'probs' and 'labels'; found {sorted(keys)}"
  )


def load_predictions(path: str | os.PathLike, split: str = "test") -> tuple[np.ndarray, np.ndarray]:
  """Loads ``(logits_or_probs, labels)`` from ``.npz``/``.npy`` files. Never unpickles.

  Accepted layouts:

  * an ``.npz`` file with ``{split}_logits`` / ``{split}_labels`` (the CIFAR
    files here), or ``logits`` | ``probs`` and ``labels``;
  * a folder holding ``{split}_logits.npy`` and ``{split}_labels.npy`` (or
    ``logits.npy`` | ``probs.npy`` and ``labels.npy``), or one ``.npz``;
  * a pair ``"scores.npy,labels.npy"`` (comma-separated paths).

  Whether the scores are logits or probabilities is left to the caller
  (:func:`looks_like_probs` tells); ``jaxcal report`` decides that way.

  Args:
    path: file or folder.
    split: which split to read when the file holds several (``"test"``).

  Returns:
    ``(scores (n, C) float32, labels (n,) int32)`` as numpy arrays.

  Raises:
    ValueError: missing arrays, object (pickled) arrays, shape mismatch.

  Example:
    >>> x, y = load_predictions(DEFAULT_PREDICTIONS)
    >>> x.shape, y.shape
    ((10000, 10), (10000,))
  """
  p = str(path)
  try:
    if "," in p and not os.path.exists(p):
      a, b = p.split(",", 1)
      scores, labels = np.load(a, allow_pickle=False), np.load(b, allow_pickle=False)
    elif os.path.isdir(p):
      files = {f[:-4]: os.path.join(p, f) for f in os.listdir(p) if f.endswith(".npy")}
      npz = sorted(f for f in os.listdir(p) if f.endswith(".npz"))
      if files:
        scores, labels = _pick({k: _LazyNpy(v) for k, v in files.items()}, split, p)
        scores, labels = np.asarray(scores.load()), np.asarray(labels.load())
      elif len(npz) == 1:
        return load_predictions(os.path.join(p, npz[0]), split)
      else:
        raise ValueError(f"{p}: folder holds no .npy files and {len(npz)} .npz files")
    elif p.endswith(".npz"):
      with np.load(p, allow_pickle=False) as z:
        scores, labels = _pick(z, split, p)
        scores, labels = np.asarray(scores), np.asarray(labels)
    elif p.endswith(".npy"):
      raise ValueError(
        f"{p}: a single .npy holds no labels; pass 'scores.npy,labels.npy' or a folder"
      )
    else:
      raise ValueError(f"{p}: not a .npz file, a folder, or 'scores.npy,labels.npy'")
  except FileNotFoundError as e:
    raise ValueError(f"predictions not found: {e.filename or p}") from None
  except ValueError as e:
    if "allow_pickle" in str(e) or "Object arrays" in str(e):
      raise ValueError(f"{p}: holds pickled object arrays, which jaxcal never loads") from None
    raise
  scores = np.asarray(scores)
  labels = np.asarray(labels)
  if scores.ndim != 2:
    raise ValueError(f"{p}: scores must be (n, C), got shape {scores.shape}")
  if labels.shape != (scores.shape[0],):
    raise ValueError(f"{p}: labels must have shape ({scores.shape[0]},), got {labels.shape}")
  if not np.issubdtype(labels.dtype, np.integer):
    if np.issubdtype(labels.dtype, np.floating) and np.all(labels == np.round(labels)):
      labels = labels.astype(np.int64)
    else:
      raise ValueError(f"{p}: labels must be integers, got dtype {labels.dtype}")
  return scores.astype(np.float32), labels.astype(np.int32)


class _LazyNpy:
  def __init__(self, path):
    self.path = path

  def load(self):
    return np.load(self.path, allow_pickle=False)


def default_predictions(split: str = "test") -> tuple[np.ndarray, np.ndarray]:
  """The embedded real predictions: CIFAR-10 ResNet-110 logits and labels.

  Args:
    split: ``"test"`` (10,000 samples, evaluation) or ``"val"`` (5,000,
      calibration).

  Returns:
    ``(logits (n, 10) float32, labels (n,) int32)``; provenance and license
    in ``jaxcal/_data/README.md``.
  """
  return load_predictions(DEFAULT_PREDICTIONS, split=split)


class Synthetic(NamedTuple):
  """Synthetic predictions with the true class probabilities known."""

  probs: jax.Array  # (n, C) the model's predictions
  labels: jax.Array  # (n,) labels drawn from true_probs
  true_probs: jax.Array  # (n, C) P(Y | x), the truthful report


def synthetic(
  key: jax.Array,
  n: int,
  num_classes: int,
  *,
  concentration: float = 1.0,
  scale: float = 2.0,
  temperature: float = 1.0,
) -> Synthetic:
  """Data with known true class probabilities.

  True probabilities ``mu_i = softmax(scale * g_i / sqrt(concentration))`` with
  Gaussian ``g_i``; labels ``y_i ~ Categorical(mu_i)``; predictions
  ``p_i = softmax(log(mu_i) / temperature)`` — calibrated for
  ``temperature = 1``, over-confident for ``< 1``, under-confident for ``> 1``.

  Args:
    key: PRNG key.
    n: number of samples (static).
    num_classes: C (static).
    concentration: larger values give less peaked true probabilities.
    scale: spread of the true logits.
    temperature: miscalibration of the predictions.

  Returns:
    :class:`Synthetic` ``(probs, labels, true_probs)``.

  Example:
    >>> import jax
    >>> d = synthetic(jax.random.key(0), 5, 3)
    >>> d.probs.shape, d.labels.shape
    ((5, 3), (5,))
  """
  if n < 1 or num_classes < 2:
    raise ValueError(f"need n >= 1 and num_classes >= 2, got n={n}, num_classes={num_classes}")
  if temperature <= 0 or concentration <= 0:
    raise ValueError("temperature and concentration must be > 0")
  kg, ky = jax.random.split(key)
  g = jax.random.normal(kg, (n, num_classes))
  logits = scale * g / jnp.sqrt(concentration)
  mu = jax.nn.softmax(logits, axis=-1)
  y = jax.random.categorical(ky, logits, axis=-1).astype(jnp.int32)
  p = jax.nn.softmax(jax.nn.log_softmax(logits, axis=-1) / temperature, axis=-1)
  return Synthetic(p, y, mu)
