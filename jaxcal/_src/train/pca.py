"""PCA of standardised features, in JAX (a pytree, so it can live inside a
fitted recalibrator and be saved with it).

``fit_pca`` standardises each feature with the mean and standard deviation of
the fitting set (constant features get scale 1) and keeps the top ``k``
eigenvectors of the standardised features' ``D x D`` covariance (one matrix
product and a symmetric eigendecomposition: for the usual ``n >> D`` several
times cheaper than the SVD of the ``n x D`` matrix, the same subspace); each
component's sign is fixed so that its largest-magnitude entry is positive,
which makes the result deterministic.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcal._src import validation as V
from jaxcal._src.numerics import PRECISION, lift

__all__ = ["PCA", "fit_pca", "pca_transform", "standardize"]


class PCA(NamedTuple):
  """A fitted PCA of standardised features (a pytree).

  Attributes:
    mean: ``(D,)`` feature means of the fitted rows.
    scale: ``(D,)`` feature standard deviations (the standardisation).
    components: ``(D, k)`` orthonormal principal directions, by variance.
    explained_variance: ``(k,)`` variance of each standardised component.
  """

  mean: jax.Array
  scale: jax.Array
  components: jax.Array
  explained_variance: jax.Array


def fit_pca(x: ArrayLike, k: int) -> PCA:
  """Fits a PCA with ``k`` components to the standardised rows of ``x``.

  Each feature is standardised with the mean and standard deviation of ``x``
  (constant features get scale 1); the components are the top ``k``
  eigenvectors of the standardised features' covariance ``Z^T Z / (n - 1)``
  (the right singular vectors of ``Z``, which scikit-learn's ``PCA`` finds by
  SVD), each with its largest-magnitude entry made positive (deterministic
  signs). The LoCal Nets paper reduces backbone features by PCA to ``k =
  50``, fitted on the calibration split (App. D.2). The authors' code
  standardises too (scikit-learn's ``StandardScaler`` before ``PCA``), but
  refits the scaler on every split, so their test features are scaled by
  the test split's own statistics; jaxcal scales every split by the
  calibration split's (a unit that fires on a handful of samples still
  gets a whole component).

  Args:
    x: ``(n, D)`` finite features.
    k: number of components, ``1 <= k <= min(n, D)``.

  Returns:
    :class:`PCA` ``(mean (D,), scale (D,), components (D, k),
    explained_variance (k,))``.

  Raises:
    ValueError: ``x`` not a finite ``(n, D)`` array, or ``k`` not an integer in
      ``[1, min(n, D)]``.

  Example:
    >>> import jax.numpy as jnp
    >>> pca = fit_pca(jnp.array([[0., 0.], [1., 1.], [2., 2.]]), 1)
    >>> pca.components.shape
    (2, 1)

  Reference: Barbera et al. (2025), "Multiclass Local Calibration with the
  Jensen-Shannon Distance", arXiv:2510.26566, App. D.2.
  """
  x = V.as_float(x, "x")
  if x.ndim != 2:
    raise ValueError(f"x must have shape (n, D), got shape {tuple(x.shape)}")
  x = V.check_finite(x, "x")
  n, d = x.shape
  if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)):
    raise ValueError(f"k must be an integer number of components, got {k!r}")
  if not 1 <= k <= min(n, d):
    raise ValueError(
      f"k = {k} components requested from {n} samples of dimension {d}; "
      f"pass 1 <= k <= min(n, D) = {min(n, d)}"
    )
  return _fit_pca(x, int(k))


def _fit_pca(x: jax.Array, k: int) -> PCA:
  """:func:`fit_pca` without validation (traceable; ``k`` static)."""
  n = x.shape[0]
  # An exactly constant feature gets its own value as mean and scale 1: the
  # rounded mean (7.0000005 for a column of 7.0 in float32) would leave a
  # std of one rounding error and a standardised column of -1s.
  const = jnp.all(x == x[:1], axis=0)
  mean = jnp.where(const, x[0], jnp.mean(x, axis=0))
  std = jnp.std(x, axis=0)
  scale = jnp.where(~const & ~(std <= 1e-12), std, 1.0)  # NaN stays NaN (traced bad input)
  z = (x - mean[None]) / scale[None]
  cov = jnp.matmul(z.T, z, precision=PRECISION) / max(n - 1, 1)  # (D, D)
  evals, evecs = jnp.linalg.eigh(cov)  # ascending
  comps = evecs[:, ::-1][:, :k]  # (D, k), by decreasing variance
  idx = jnp.argmax(jnp.abs(comps), axis=0)
  sign = jnp.sign(comps[idx, jnp.arange(k)])
  comps = comps * jnp.where(sign == 0, 1.0, sign)[None, :]
  return PCA(mean, scale, comps, jnp.maximum(evals[::-1][:k], 0.0))


def _check_input(pca: PCA, x: ArrayLike) -> jax.Array:
  """``x`` as a real ``(n, D)`` (or ``(D,)``) array of ``pca``'s ``D`` (trace-time checks only).

  A ``(n, 1)`` input would broadcast against the ``(D,)`` statistics and give a
  plausible ``(n, D)`` result; a string array raised deep inside JAX.
  """
  if not isinstance(pca, PCA):
    raise TypeError(f"pca must be a PCA from fit_pca, got {type(pca).__name__}")
  if not isinstance(x, jax.Array | jax.core.Tracer):
    x = V.host_array(x, "x")
  if not (jnp.issubdtype(x.dtype, jnp.floating) or jnp.issubdtype(x.dtype, jnp.integer)):
    raise ValueError(f"x must be a real numeric array, got dtype {x.dtype}")
  d = pca.mean.shape[0]
  if x.ndim not in (1, 2) or x.shape[-1] != d:
    raise ValueError(f"x must have shape (n, {d}) (the PCA's D = {d}), got shape {tuple(x.shape)}")
  return x


def standardize(pca: PCA, x: jax.Array) -> jax.Array:
  """Standardises features with the mean and scale of the PCA's fitting set.

  ``z = (x - mean) / scale``, per feature: the input of the PCA's
  projection, zero mean and unit standard deviation on the fitting set
  (constant features keep scale 1). Traceable.

  Args:
    pca: a :class:`PCA` from :func:`fit_pca`.
    x: ``(n, D)`` (or ``(D,)``) real features with the PCA's ``D``.

  Returns:
    ``z`` of ``x``'s shape.

  Raises:
    TypeError: ``pca`` is not a :class:`PCA`.
    ValueError: ``x`` not a real array with the PCA's ``D`` columns.

  Example:
    >>> import jax.numpy as jnp
    >>> x = jnp.array([[0.0, 5.0], [2.0, 5.0]])
    >>> standardize(fit_pca(x, 1), x).tolist()
    [[-1.0, 0.0], [1.0, 0.0]]

  Reference: Barbera et al. (2025), "Multiclass Local Calibration with the
  Jensen-Shannon Distance", arXiv:2510.26566, App. D.2 (the PCA-reduced
  features of the LoCal Nets; scaled by the calibration split's statistics,
  where the authors' code refits its scaler on every split).
  """
  x = _check_input(pca, x)
  return (x - lift(pca.mean, x.ndim)) / lift(pca.scale, x.ndim)


def pca_transform(pca: PCA, x: jax.Array) -> jax.Array:
  """Projects features onto the fitted principal components.

  ``phi_PCA(x) = ((x - mean) / scale) @ components``: the standardised
  features (:func:`standardize`) in the basis of the top ``k`` components,
  ``(n, D) -> (n, k)``. Traceable.

  Args:
    pca: a :class:`PCA` from :func:`fit_pca`.
    x: ``(n, D)`` (or ``(D,)``) real features with the PCA's ``D``.

  Returns:
    ``(n, k)`` (or ``(k,)``) component scores.

  Raises:
    TypeError: ``pca`` is not a :class:`PCA`.
    ValueError: ``x`` not a real array with the PCA's ``D`` columns.

  Example:
    >>> import jax.numpy as jnp
    >>> x = jnp.array([[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]])
    >>> [round(v, 4) for v in pca_transform(fit_pca(x, 1), x)[:, 0].tolist()]
    [-1.7321, 0.0, 1.7321]

  Reference: Barbera et al. (2025), "Multiclass Local Calibration with the
  Jensen-Shannon Distance", arXiv:2510.26566, App. D.2 (``phi_PCA``, ``k =
  50``, the reduced features a LoCal Net refines).
  """
  return jnp.matmul(standardize(pca, x), pca.components, precision=PRECISION)
