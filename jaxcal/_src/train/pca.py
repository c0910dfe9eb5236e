"""PCA of standardised features, in JAX (a pytree, so it can live inside a
fitted recalibrator and be saved with it).

``fit_pca`` standardises each feature with the mean and standard deviation of
the fitting set (constant features get scale 1), takes the thin SVD of the
standardised matrix in the features' dtype, and keeps the top ``k`` right
singular vectors; each component's sign is fixed so that its largest-magnitude
entry is positive, which makes the result deterministic.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from jaxcal._src.numerics import PRECISION

__all__ = ["PCA", "fit_pca", "pca_transform", "standardize"]


class PCA(NamedTuple):
  mean: jax.Array  # (D,)
  scale: jax.Array  # (D,)
  components: jax.Array  # (D, k)
  explained_variance: jax.Array  # (k,) variance of each standardised component


def fit_pca(x: ArrayLike, k: int) -> PCA:
  """Fits PCA with ``min(k, D, n)`` components on the rows of ``x`` ``(n, D)``.

  Example:
    >>> import jax.numpy as jnp
    >>> pca = fit_pca(jnp.array([[0., 0.], [1., 1.], [2., 2.]]), 1)
    >>> pca.components.shape
    (2, 1)
  """
  x = jnp.asarray(x)
  if not jnp.issubdtype(x.dtype, jnp.floating):
    x = x.astype(jnp.float32)
  n, d = x.shape
  k = int(min(k, d, n))
  mean = jnp.mean(x, axis=0)
  std = jnp.std(x, axis=0)
  scale = jnp.where(std > 1e-12, std, 1.0)
  z = (x - mean) / scale
  _, s, vt = jnp.linalg.svd(z, full_matrices=False)
  comps = vt[:k].T  # (D, k)
  idx = jnp.argmax(jnp.abs(comps), axis=0)
  sign = jnp.sign(comps[idx, jnp.arange(k)])
  comps = comps * jnp.where(sign == 0, 1.0, sign)[None, :]
  return PCA(mean, scale, comps, (s[:k] ** 2) / max(n - 1, 1))


def standardize(pca: PCA, x: jax.Array) -> jax.Array:
  return (x - pca.mean) / pca.scale


def pca_transform(pca: PCA, x: jax.Array) -> jax.Array:
  """``((x - mean) / scale) @ components``: ``(n, D) -> (n, k)``."""
  return jnp.matmul(standardize(pca, x), pca.components, precision=PRECISION)
