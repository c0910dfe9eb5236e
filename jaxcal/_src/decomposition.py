"""Score decompositions ``S = MCB - DSC + UNC`` with isotonic (CORP) recalibration
(Resin 2025, *Calibration in Context: A Case Study with Score Decompositions*,
§2.4-2.6 and App. A).

For predictions ``p_i`` with labels ``y_i``, recalibrated estimates
``phat_i`` of ``P(Y | p_i)`` and the empirical class frequencies ``phat_0``:

  ``S = (1/n) sum_i S(p_i, y_i)``,
  ``MCB = S - (1/n) sum_i S(phat_i, y_i)``,
  ``DSC = (1/n) sum_i [S(phat_0, y_i) - S(phat_i, y_i)]``,
  ``UNC = (1/n) sum_i S(phat_0, y_i)``.

``phat_i[r]`` is the in-sample isotonic (PAV, ties pooled) fit of
``1[y = r]`` on ``p[:, r]``; ``mode="normalized"`` divides each row of fits
by its sum. This module imports no recalibrator.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from jaxcal._src import isotonic as iso
from jaxcal._src import validation as V
from jaxcal._src.scores import LOG_CLIP

__all__ = [
  "Decomposition",
  "decompose",
  "decompose_core",
  "decompose_many",
  "decompose_all",
  "classwise_fits",
]

_SCORES = ("brier", "log")
_MODES = ("classwise", "normalized")


class Decomposition(NamedTuple):
  """``score = mcb - dsc + unc`` (all scalars, means over samples).

  Attributes:
    score: mean score of the predictions.
    mcb: miscalibration ``score - score(recalibrated)``.
    dsc: discrimination ``score(class frequencies) - score(recalibrated)``.
    unc: uncertainty ``score(class frequencies)``.
  """

  score: jax.Array
  mcb: jax.Array
  dsc: jax.Array
  unc: jax.Array


def classwise_fits(
  probs: jax.Array, onehot: jax.Array, where: jax.Array | None = None
) -> jax.Array:
  """In-sample isotonic fit of every column of ``onehot`` on the same column of ``probs``.

  Args:
    probs: ``(n, C)`` class scores.
    onehot: ``(n, C)`` 0/1 outcomes.
    where: optional ``(n,)`` bool sample mask: masked-out samples get zero
      weight (they do not move the fit; their fitted value is the fitted
      step function at their score).

  Returns:
    ``(n, C)`` fitted values (ties in a column get equal values).
  """
  w = None if where is None else where.astype(probs.dtype)
  return iso.isotonic_fit_columns(probs, onehot, w).fitted.T


def _mean(x: jax.Array, where: jax.Array | None) -> jax.Array:
  if where is None:
    return jnp.mean(x)
  return jnp.sum(jnp.where(where, x, 0.0)) / jnp.sum(where).astype(x.dtype)


def _mean_score(
  q: jax.Array, onehot: jax.Array, score: str, classwise: bool, where: jax.Array | None = None
) -> jax.Array:
  c = q.shape[-1]
  if score == "brier":
    return _mean(jnp.sum((q - onehot) ** 2, axis=-1), where) / c
  if classwise:  # mean over classes of the binary log loss of each column
    q = jnp.clip(q, 0.0, 1.0)
    ll = -(
      onehot * jnp.log(jnp.maximum(q, LOG_CLIP))
      + (1 - onehot) * jnp.log(jnp.maximum(1 - q, LOG_CLIP))
    )
    return _mean(jnp.sum(ll, axis=-1), where) / c
  qy = jnp.sum(q * onehot, axis=-1)
  return _mean(-jnp.log(jnp.maximum(qy, LOG_CLIP)), where)


def decompose_core(
  p: jax.Array, y: jax.Array, score: str, mode: str, where: jax.Array | None = None
) -> Decomposition:
  """Unvalidated, traceable core of :func:`decompose`; ``where`` selects samples."""
  return decompose_many(p, y, ((score, mode),), where)[0]


def decompose_many(
  p: jax.Array,
  y: jax.Array,
  specs: tuple[tuple[str, str], ...],
  where: jax.Array | None = None,
) -> tuple[Decomposition, ...]:
  """Unvalidated decompositions ``(score, mode)`` of one data set from one set of fits.

  The fits (``C`` isotonic regressions) are the costly part and the same for
  every score and mode: the report and the study call share them.

  Args:
    p: ``(n, C)`` checked probabilities.
    y: ``(n,)`` checked integer labels.
    specs: static ``((score, mode), ...)`` as for :func:`decompose`.
    where: optional ``(n,)`` bool mask of the samples to use.

  Returns:
    One :class:`Decomposition` per entry of ``specs``, each equal to
    :func:`decompose` with that score and mode.
  """
  onehot = jax.nn.one_hot(y, p.shape[-1], dtype=p.dtype)
  fit = classwise_fits(p, onehot, where)
  return tuple(_from_fits(p, onehot, fit, score, mode, where) for score, mode in specs)


def _from_fits(
  p: jax.Array,
  onehot: jax.Array,
  fit: jax.Array,
  score: str,
  mode: str,
  where: jax.Array | None = None,
) -> Decomposition:
  """One decomposition given ``fit = classwise_fits(p, onehot, where)``."""
  if mode == "normalized":
    s = jnp.sum(fit, axis=-1, keepdims=True)
    fit = fit / jnp.where(s > 0, s, 1)
  classwise = mode == "classwise"
  if where is None:
    freq = jnp.mean(onehot, axis=0)
  else:
    freq = jnp.sum(jnp.where(where[:, None], onehot, 0.0), axis=0) / jnp.sum(where).astype(p.dtype)
  ref = jnp.broadcast_to(freq, p.shape)
  s_pred = _mean_score(p, onehot, score, classwise, where)
  s_fit = _mean_score(fit, onehot, score, classwise, where)
  s_ref = _mean_score(ref, onehot, score, classwise, where)
  return Decomposition(score=s_pred, mcb=s_pred - s_fit, dsc=s_ref - s_fit, unc=s_ref)


_decompose = jax.jit(decompose_core, static_argnames=("score", "mode"))


#: :func:`decompose_many` of the whole data set as one compiled program (the report's).
decompose_all = jax.jit(decompose_many, static_argnames=("specs",))


@V.same_arguments
def decompose(
  probs: ArrayLike,
  labels: ArrayLike,
  score: str = "brier",
  mode: str = "classwise",
  *,
  require_simplex: bool = True,
  where: ArrayLike | None = None,
) -> Decomposition:
  """Decomposes a proper score into miscalibration, discrimination and uncertainty.

  .. math::
    \\bar S = \\mathrm{MCB} - \\mathrm{DSC} + \\mathrm{UNC}, \\quad
    \\mathrm{MCB} = \\bar S - \\bar S(\\hat p), \\;
    \\mathrm{DSC} = \\bar S(\\hat p_0) - \\bar S(\\hat p), \\;
    \\mathrm{UNC} = \\bar S(\\hat p_0)

  with ``phat`` the in-sample isotonic fits of the class indicators on the
  class probabilities (PAV per class, ties pooled) and ``phat_0`` the class
  frequencies. ``mode="classwise"`` (CW) uses the fits as they are: for the
  Brier score this is the CORP decomposition of each binary summand, with
  ``MCB >= 0`` and ``DSC >= 0`` (up to float32 rounding: a constant
  forecast's DSC can read ``-2e-8``); ``mode="normalized"`` (N) divides
  each row of fits by its sum (the stronger, multiclass notion of
  calibration).

  Scores (means over samples):

  * ``"brier"``: multiclass Brier score divided by ``C`` (the case study's
    convention: UNC = 0.09 on balanced CIFAR-10);
  * ``"log"``: with ``mode="classwise"`` the class-averaged *binary* log loss
    ``-(1/C) sum_r [1[y=r] log q_r + 1[y!=r] log(1 - q_r)]`` (PAV is the
    optimal increasing fit for it too, so CW components stay non-negative);
    with ``mode="normalized"`` the multiclass log loss ``-log q_y``.
    Probabilities are clipped below at 1e-12.

  Args:
    probs: ``(n, C)`` predicted probabilities.
    labels: ``(n,)`` integer labels in ``[0, C)``.
    score: ``"brier"`` or ``"log"``.
    mode: ``"classwise"`` or ``"normalized"``.
    require_simplex: check that rows sum to one; pass ``False`` for
      class-wise predictions in ``[0, 1]`` that need not (e.g. CW-HB output;
      refused with ``score="log", mode="normalized"``, whose ``-log q_y`` is
      proper on the simplex only).
    where: optional ``(n,)`` bool mask; masked-out samples are left out of
      the fits and the means (as if absent).

  Returns:
    :class:`Decomposition` ``(score, mcb, dsc, unc)`` of scalars,
    ``score == mcb - dsc + unc`` up to rounding.

  Raises:
    ValueError: unknown ``score``/``mode``, the normalized log score
      without ``require_simplex``, bad shapes, NaN, values outside ``[0,
      1]``, rows off the simplex (with ``require_simplex``), labels out of
      range, an empty mask (eager calls; NaN under ``jit``).

  Example:
    >>> import jax.numpy as jnp
    >>> p = jnp.array([[0.8, 0.2], [0.6, 0.4], [0.3, 0.7], [0.1, 0.9]])
    >>> d = decompose(p, jnp.array([0, 1, 0, 1]))
    >>> [round(float(v), 4) for v in d]
    [0.225, 0.1, 0.125, 0.25]

  Reference: Resin (2025), *Calibration in Context: A Case Study with Score
  Decompositions*, §2.4-2.6, Eq. (4) and App. A; Dimitriadis, Gneiting &
  Jordan (2021), *Stable reliability diagrams for probabilistic classifiers*,
  PNAS 118(8) (CORP).
  """
  if score not in _SCORES:
    raise ValueError(f"score must be one of {_SCORES}, got {score!r}")
  if mode not in _MODES:
    raise ValueError(f"mode must be one of {_MODES}, got {mode!r}")
  simplex = V.check_flag(require_simplex, "require_simplex")
  if score == "log" and mode == "normalized" and not simplex:
    # -log q_y is proper on the simplex only: all-ones rows scored 0 (perfect) and MCB
    # came out negative (-log 3), with no error (found by a review helper)
    raise ValueError(
      "score='log' with mode='normalized' needs rows on the simplex (the multiclass log "
      "loss -log q_y is a proper score only there); keep require_simplex=True, or use "
      "mode='classwise' (binary log losses) or score='brier' for class-wise outputs"
    )
  d = V.check_predictions(probs, labels, where=where, simplex=simplex)
  return V.fold(_decompose(d.scores, d.labels, score=score, mode=mode, where=d.where), d.ok)
