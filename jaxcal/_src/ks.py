"""Kolmogorov–Smirnov calibration error (Gupta et al. 2021).

For binary scores ``s_i`` with outcomes ``b_i``, sort by score and compare
the two cumulative curves ``h(t) = (1/n) Σ_{s_i <= t} s_i`` and
``h̃(t) = (1/n) Σ_{s_i <= t} b_i``:

``KS = max_t |h(t) - h̃(t)| = max_k |(1/n) Σ_{i <= k} (s_(i) - b_(i))|``

The maximum runs over ``k = 0`` and the ends of groups of equal scores (the
curves are functions of ``t``, so a group of tied scores enters as a whole
and the order inside it does not matter). Top label: ``s = max p``,
``b = 1[argmax p = y]``; class-wise: every column ``p[:, c]`` against
``1[y = c]``, averaged with class weights.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from jaxcal._src import binning as B
from jaxcal._src import validation as V
from jaxcal._src.calibration_errors import (
  _binary_rows,
  _run_top_label,
  _top_label,
  _weights_or_uniform,
)
from jaxcal._src.sorting import sort_with_payload

__all__ = ["ks_ce"]

_MODES = ("top_label", "classwise")


def _ks_rows(scores: jax.Array, resid: jax.Array, where=None) -> jax.Array:
  """KS of each row of ``(rows, n)`` scores and residuals ``s - b``.

  ``where`` (``(n,)`` bool): masked-out samples get residual 0 and are not
  counted in ``n``; a position they add only repeats the previous partial sum.
  """
  if where is None:
    n = float(scores.shape[-1])
  else:
    resid = jnp.where(where, resid, 0.0)
    n = jnp.sum(where).astype(resid.dtype)
  ss, rs = sort_with_payload(scores, resid)  # read only at tie-group ends
  d = B.blocked_cumsum(rs, axis=1) / n
  group_end = jnp.concatenate([ss[:, 1:] != ss[:, :-1], jnp.ones((ss.shape[0], 1), bool)], axis=1)
  return jnp.max(jnp.where(group_end, jnp.abs(d), 0.0), axis=1)


def _ks_top_label(c, z, where=None):
  """Top-label KS from the confidences ``c`` and correctness ``z`` (bool), ``(n,)`` each."""
  return _ks_rows(c[None], (c - z.astype(c.dtype))[None], where)[0]


@functools.partial(jax.jit, static_argnames=("mode",))
def _ks_core(p, y, w, where=None, *, mode):
  if mode == "top_label":
    return _ks_top_label(*_top_label(p, y), where)
  s, b = _binary_rows(p, y, mode)
  return jnp.sum(w * _ks_rows(s, s - b, where))


@V.same_arguments
def ks_ce(
  probs: ArrayLike,
  labels: ArrayLike,
  mode: str = "top_label",
  *,
  class_weights: ArrayLike | None = None,
  from_logits: bool = False,
  where: ArrayLike | None = None,
) -> jax.Array:
  """Kolmogorov–Smirnov calibration error, top-label or class-wise.

  ``KS = max_k |(1/n) Σ_{i <= k} (s_(i) - b_(i))|`` over the scores sorted
  ascending, evaluated between distinct scores (module docstring).

  Args:
    probs: ``(n, C)`` probabilities (logits with ``from_logits=True``).
    labels: ``(n,)`` integer labels.
    mode: ``"top_label"`` (default: confidence against correctness) or
      ``"classwise"`` (each class column against ``1[y = c]``, averaged with
      ``class_weights``).
    class_weights: ``(C,)`` weights of the class-wise sum (default ``1/C``), used as
      given (not normalised); ``mode="classwise"`` only (with the top label
      they raise).
    from_logits: treat ``probs`` as logits.
    where: optional ``(n,)`` bool mask; masked-out samples are treated as
      absent (``n`` is the number of ``True`` entries).

  Returns:
    Scalar in ``[0, 1]`` (class-wise: in ``[0, sum_c w_c]``, weights used as given).

  Raises:
    ValueError: bad probabilities or labels, an unknown ``mode``, or
      ``class_weights`` with ``mode="top_label"``.

  Example:
    >>> import jax.numpy as jnp
    >>> p = jnp.array([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7]])
    >>> round(float(ks_ce(p, jnp.array([0, 1, 1]))), 4)
    0.1667

  Reference: Gupta, Rahimi, Ajanthan, Mensink, Sminchisescu & Hartley (2021),
  "Calibration of Neural Networks using Splines", ICLR, arXiv:2006.12800,
  §3 (Eq. 4-6, KS error of the top-r predictions).
  """
  if mode not in _MODES:
    raise ValueError(f"mode must be one of {_MODES}, got {mode!r}")
  top = mode == "top_label"
  if top:
    V.check_unused(
      class_weights,
      "class_weights",
      "applies to mode='classwise' only (the top-label error has no classes to weigh)",
    )
  d = V.check_predictions(
    probs,
    labels,
    from_logits=from_logits,
    where=where,
    class_weights=class_weights,
    defer=True,
    borrow=top,
  )
  if top:  # a host matrix is read in place, its top label a program of its own
    return _run_top_label(_ks_top_label, d)
  f = V.neutral_program(_ks_core, d.from_logits, mode=mode)
  out, _ = V.run_checked(d, f, d.scores, d.labels, d.where, _weights_or_uniform(d))
  return V.fold(out, d.ok)
