"""Proper scores and the confidence loss (Lu et al. 2025).

Each score takes ``(probs, labels)`` for one data set and returns the mean
over samples, or the ``(n,)`` per-sample losses with ``per_sample=True``.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from jaxcal._src import validation as V

__all__ = [
  "prepare",
  "brier",
  "log_loss",
  "spherical",
  "classification_error",
  "confidence_loss",
  "brier_per_sample",
  "log_loss_per_sample",
  "spherical_per_sample",
  "classification_error_per_sample",
  "confidence_loss_per_sample",
  "LOG_CLIP",
]

#: Probabilities are clipped below at this value inside the log score.
LOG_CLIP = 1e-12


def prepare(
  probs: ArrayLike, labels: ArrayLike, from_logits: bool = False, name: str = "probs"
) -> tuple[jax.Array, jax.Array]:
  """Validates ``(probs, labels)`` and returns them as JAX arrays.

  With ``from_logits=True`` the first argument is checked as logits and
  turned into probabilities with a softmax. Value checks run only on
  concrete (non-traced) inputs; see :mod:`jaxcal._src.validation`.
  """
  if from_logits:
    z = V.check_logits(probs, name="logits")
    p = jax.nn.softmax(z, axis=-1)
  else:
    p = V.check_probs(probs, name=name)
  y = V.check_labels(labels, p.shape[0], p.shape[1])
  return p, y


def brier_per_sample(p: jax.Array, y: jax.Array) -> jax.Array:
  onehot = jax.nn.one_hot(y, p.shape[-1], dtype=p.dtype)
  return jnp.sum((p - onehot) ** 2, axis=-1)


def log_loss_per_sample(p: jax.Array, y: jax.Array) -> jax.Array:
  py = jnp.take_along_axis(p, y[:, None], axis=-1)[:, 0]
  return -jnp.log(jnp.maximum(py, LOG_CLIP))


def spherical_per_sample(p: jax.Array, y: jax.Array) -> jax.Array:
  py = jnp.take_along_axis(p, y[:, None], axis=-1)[:, 0]
  return 1.0 - py / jnp.linalg.norm(p, axis=-1)


def classification_error_per_sample(p: jax.Array, y: jax.Array) -> jax.Array:
  return (jnp.argmax(p, axis=-1) != y).astype(p.dtype)


def confidence_loss_per_sample(p: jax.Array, y: jax.Array) -> jax.Array:
  r = jnp.argmax(p, axis=-1)
  c = jnp.max(p, axis=-1)
  z = (r == y).astype(p.dtype)
  return 1.0 - z + (c - z) ** 2


def _public(per_sample_fn, doc: str):
  jitted = jax.jit(per_sample_fn)

  @functools.wraps(per_sample_fn)
  def score(
    probs: ArrayLike, labels: ArrayLike, *, per_sample: bool = False, from_logits: bool = False
  ) -> jax.Array:
    p, y = prepare(probs, labels, from_logits)
    losses = jitted(p, y)
    return losses if per_sample else jnp.mean(losses)

  score.__doc__ = doc
  score.__name__ = per_sample_fn.__name__.replace("_per_sample", "")
  score.__qualname__ = score.__name__
  return score


_ARGS = """
  Args:
    probs: ``(n, C)`` predicted probabilities (logits with ``from_logits=True``).
    labels: ``(n,)`` integer labels in ``[0, C)``.
    per_sample: return the ``(n,)`` losses instead of their mean.
    from_logits: treat ``probs`` as logits and apply a softmax first.

  Returns:
    Scalar mean loss, or ``(n,)`` losses with ``per_sample=True``.

  Raises:
    ValueError: on NaN/inf, wrong shapes, rows off the simplex or labels out
      of range (eager calls).
"""

brier = _public(
  brier_per_sample,
  """Multiclass Brier score (lower is better).

  ``S(p, y) = sum_r (p_r - 1[y = r])^2``, in ``[0, 2]``.
"""
  + _ARGS
  + """
  Example:
    >>> import jax.numpy as jnp
    >>> float(brier(jnp.array([[0.5, 0.5], [1.0, 0.0]]), jnp.array([0, 0])))
    0.25

  Reference: Lu, Wu, Hartline & Hu (2025), arXiv:2510.06388, §2.
""",
)

log_loss = _public(
  log_loss_per_sample,
  """Log loss ``-log p_y`` (``p_y`` clipped below at 1e-12).
"""
  + _ARGS
  + """
  Example:
    >>> import jax.numpy as jnp
    >>> round(float(log_loss(jnp.array([[0.5, 0.5]]), jnp.array([1]))), 6)
    0.693147

  Reference: Lu, Wu, Hartline & Hu (2025), arXiv:2510.06388.
""",
)

spherical = _public(
  spherical_per_sample,
  """Spherical loss ``1 - p_y / ||p||_2``.
"""
  + _ARGS
  + """
  Example:
    >>> import jax.numpy as jnp
    >>> float(spherical(jnp.array([[1.0, 0.0]]), jnp.array([0])))
    0.0

  Reference: Lu, Wu, Hartline & Hu (2025), arXiv:2510.06388.
""",
)

classification_error = _public(
  classification_error_per_sample,
  """Top-1 error ``1[y != argmax p]`` (ties toward the lower index).
"""
  + _ARGS
  + """
  Example:
    >>> import jax.numpy as jnp
    >>> float(classification_error(jnp.array([[0.5, 0.5], [0.2, 0.8]]), jnp.array([1, 1])))
    0.5

  Reference: Lu, Wu, Hartline & Hu (2025), arXiv:2510.06388.
""",
)

confidence_loss = _public(
  confidence_loss_per_sample,
  """Confidence loss ``l_conf(p, y) = 1 - z + (c - z)^2``.

  ``c = max p``, ``z = 1[y = argmax p]``. Proper for the top-label
  confidence; its expectation over a calibrated predictor equals
  ``n E[ConfCE_corr]`` (Lemma D.1).
"""
  + _ARGS
  + """
  Example:
    >>> import jax.numpy as jnp
    >>> float(confidence_loss(jnp.array([[0.75, 0.25]]), jnp.array([0])))
    0.0625

  Reference: Lu, Wu, Hartline & Hu (2025), arXiv:2510.06388, Lemma D.1.
""",
)
