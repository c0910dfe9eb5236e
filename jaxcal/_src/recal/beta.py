"""Beta calibration, one-vs-rest and normalised (Kull, Silva Filho & Flach 2017).

For each class ``c`` the binary map

``g_c(s) = sigmoid(a_c log s + b_c (-log(1 - s)) + d_c)``,  ``s = p_c``,

is fitted by maximum likelihood on ``1[y = c]`` (logistic regression on the
two features ``log s`` and ``-log(1 - s)``), the "abm" model. As in the
authors' ``betacal`` package (1.1.0, ``BetaCalibration(parameters="abm")``):
the scores are clipped to ``[eps, 1 - eps]`` (``eps`` the machine epsilon of
their dtype); if the unconstrained fit has ``a < 0`` the model is refitted
with ``a = 0``, else if ``b < 0`` with ``b = 0`` (the paper's constraint
``a, b >= 0`` that keeps ``g_c`` increasing). Like ``betacal``, the refit is
not checked again: when the scores and the outcomes are negatively related
the remaining parameter can still come out negative. ``betacal`` uses scikit-learn's
``LogisticRegression(C=1e11)`` (an L2 penalty ``||w||^2 / (2C)`` on the
summed loss, negligible); here each mean log loss is minimised by
Newton's method (:func:`~jaxcal._src.recal.scaling.logistic_newton`), all
classes and refits as one batch. The rows ``g_c(p_c)`` are then
divided by their sum (``normalize=True``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from jaxcal._src import validation as V
from jaxcal._src.numerics import lift
from jaxcal._src.recal.base import (
  ClasswiseRecalibrator,
  fit_arrays,
  fold_fit,
  pytree_dataclass,
  warn_if_not_converged,
)
from jaxcal._src.recal.scaling import check_solver_options, logistic_newton

__all__ = ["BetaCalibration", "fit_beta"]


def _features(p: jax.Array) -> tuple[jax.Array, jax.Array]:
  eps = jnp.finfo(p.dtype).eps
  s = jnp.clip(p, eps, 1.0 - eps)
  return jnp.log(s), -jnp.log1p(-s)


@pytree_dataclass
class BetaCalibration(ClasswiseRecalibrator):
  """One-vs-rest beta calibration maps ``sigmoid(a log p - b log(1 - p) + d)`` per class.

  Attributes:
    a, b, d: ``(C,)`` parameters.
    num_iter: Newton iterations of the fits in use: the free fit and each
      refit some class takes (the most of them).
    converged: whether those fits converged
      (:func:`~jaxcal._src.recal.scaling.logistic_newton`).
    normalize: divide rows by their sums (static, default True).
    num_classes: ``C`` (static).
  """

  method = "beta"
  shapes = {"a": ("C",), "b": ("C",), "d": ("C",), "num_iter": (), "converged": ()}
  a: jax.Array
  b: jax.Array
  d: jax.Array
  num_iter: jax.Array
  converged: jax.Array

  def classwise(self, p: jax.Array) -> jax.Array:
    la, lb = _features(p)
    dt = p.dtype
    a, b, d = (lift(v.astype(dt), p.ndim) for v in (self.a, self.b, self.d))
    return jax.nn.sigmoid(a * la + b * lb + d)


@jax.jit  # max_iter traced: another limit reuses the program
def _fit_beta(p, onehot, max_iter, tol):
  la, lb = _features(p)
  c = p.shape[1]
  # The free fit and the refits with a = 0 and with b = 0 (a masked feature keeps
  # its weight), one after another: one compilation of C logistic regressions. As
  # one (3, C) batch they held every variant's (C, n) arrays at once (760 MB of
  # temporaries at n = 10^5, C = 100, 19x the input).
  mask_a = jnp.array([1.0, 0.0, 1.0], p.dtype)
  mask_b = jnp.array([1.0, 1.0, 0.0], p.dtype)
  init = jnp.broadcast_to(jnp.array([1.0, 1.0, 0.0], p.dtype), (c, 3))

  def variant(masks):
    features = (la.T * masks[0], lb.T * masks[1], 1.0)  # (C, n)
    res = logistic_newton(features, onehot.T, init, max_iter=max_iter, tol=tol)
    return res.params, res.num_iter, res.converged

  params, iters, conv = jax.lax.map(variant, (mask_a, mask_b))  # (3, C, 3)
  mask_a, mask_b = mask_a[:, None], mask_b[:, None]
  a, b, d = params[..., 0] * mask_a, params[..., 1] * mask_b, params[..., 2]
  use_no_a = a[0] < 0
  use_no_b = ~use_no_a & (b[0] < 0)
  row = jnp.where(use_no_a, 1, jnp.where(use_no_b, 2, 0))
  pick = lambda v: jnp.take_along_axis(v, row[None, :], axis=0)[0]
  # the fits in use: the free one (its signs choose) and each refit some class takes;
  # an unused refit's iterations and convergence are not the result's (it had flagged
  # a converged fit as not converged, with a warning)
  used = jnp.stack([jnp.bool_(True), jnp.any(use_no_a), jnp.any(use_no_b)])
  return pick(a), pick(b), pick(d), jnp.max(jnp.where(used, iters, 0)), jnp.all(conv | ~used)


@V.outside_explicit_context
def fit_beta(
  inputs: ArrayLike,
  labels: ArrayLike,
  *,
  from_logits: bool = True,
  normalize: bool = True,
  max_iter: int = 500,
  tol: float = 1e-6,
) -> BetaCalibration:
  """Beta calibration (the 3-parameter "abm" model), one-vs-rest, then normalised.

  .. math:: q_c = \\sigma(a_c \\log p_c - b_c \\log(1 - p_c) + d_c),\\quad
    \\hat q = q / \\textstyle\\sum_c q_c

  Each ``(a_c, b_c, d_c)`` maximises the binary likelihood of ``1[y = c]``;
  a negative ``a_c`` (else ``b_c``) from the free fit is fixed at 0 and the
  rest refitted, as ``betacal`` does (module docstring).

  Args:
    inputs: ``(n, C)`` logits (probabilities with ``from_logits=False``);
      the maps act on ``p = softmax(logits)``.
    labels: ``(n,)`` integer labels; every class must occur.
    from_logits: whether ``inputs`` are logits.
    normalize: divide rows by their sums (default True); ``False`` keeps the
      C independent binary maps.
    max_iter: Newton iteration limit (default 500).
    tol: gradient-norm tolerance (default 1e-6).

  Returns:
    :class:`BetaCalibration` with ``num_iter`` and ``converged``.

  Raises:
    ValueError: bad inputs or labels, a class without a sample (eager
      calls; under ``jax.jit`` / ``jax.vmap`` the fitted arrays are NaN
      instead), or bad options (``normalize`` not True/False, ``max_iter`` / ``tol``).

  Example:
    >>> import jax, jax.numpy as jnp
    >>> z = 2.0 * jax.random.normal(jax.random.key(0), (400, 3))
    >>> rc = fit_beta(z, jax.random.categorical(jax.random.key(1), z / 2.0))
    >>> bool(jnp.allclose(rc(z).sum(axis=1), 1.0, atol=1e-5))
    True

  Reference: Kull, Silva Filho & Flach (2017), "Beta calibration: a
  well-founded and easily implemented improvement on logistic calibration for
  binary classifiers", AISTATS, §3 (Eq. 4-5, the abm model and its fit by
  logistic regression on ``log s`` and ``-log(1 - s)``).
  """
  normalize = V.check_flag(normalize, "normalize")
  p, onehot, ok = fit_arrays(
    inputs, labels, from_logits=from_logits, method="beta", on="probs", require_all_classes=True
  )
  max_iter, tol = check_solver_options(max_iter, tol, p.dtype)
  a, b, d, k, conv = _fit_beta(p, onehot, max_iter, tol)
  rc = BetaCalibration(
    a=a,
    b=b,
    d=d,
    num_iter=k,
    converged=conv,
    normalize=normalize,
    num_classes=int(p.shape[1]),
    from_logits=from_logits,
  )
  warn_if_not_converged(rc, "beta calibration")
  return fold_fit(rc, ok)
