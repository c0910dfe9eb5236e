"""LoCal Nets and K-Cal: local recalibration by feature reshaping.

A LoCal Net (Barbera et al. 2025, arXiv:2510.26566, §7 and App. D.2) takes
the backbone features ``phi(x)`` (``(n, D)``), their PCA ``phi_PCA(x)``
(``(n, k)``, k = 50, fitted on the calibration split) and the backbone logits
``g(x)``. A one-hidden-layer MLP (ReLU, dropout) on ``phi(x)`` has two heads,
refined features ``phi~`` (k) and logits ``g~`` (C), combined residually

    phi' = phi~ + w_phi * phi_PCA + b_phi,      g' = g~ + w_g * g + b_g,

with ``w`` initialised to 1 and ``b ~ N(0, 0.01^2)``: scalars, or one per
dimension (the authors' code for C > 10). The hidden layer and both heads
start with ``N(0, 0.01^2)`` weights and zero biases, so that at the start
``phi' ~ phi_PCA`` and ``g' ~ g`` (the paper's "strong initialisation"). The
zero biases are jaxcal's choice: the paper is silent, and the authors' code
keeps PyTorch's ``U(+-1/sqrt(fan_in))`` biases there (``g'`` then starts up
to 0.125 per class from ``g`` at 64 hidden units).
Training minimises over batches

    (1/B) sum_i [ a * d(softmax(g'_i), theta_i) + lambda * CE(y_i, theta_i) ],

where ``theta_i`` is the Nadaraya–Watson estimate of the batch's one-hot
labels at ``phi'_i`` (``j != i``, Gaussian kernel of bandwidth gamma) and
``a`` the alignment weight (1; 0 gives K-Cal's loss). Two alignment terms
``d`` (``alignment=``):

* ``"classwise"`` (default): the authors' code, behind every number of the
  paper: the mean over classes of the Bernoulli Jensen–Shannon distance
  ``sqrt(max(JSD(Bern(theta_c), Bern(p_c)), 1e-4))`` (natural log), both
  inputs and their midpoint clamped to ``[1e-4, 1 - 1e-4]``;
* ``"multiclass"``: the paper's Eq. (9), the multiclass Jensen–Shannon
  distance ``sqrt(KL(P||M)/2 + KL(Q||M)/2)``, ``M = (P + Q)/2``, floored at
  ``1e-12`` under the square root so its gradient stays finite.

The cross-entropy term acts on the kernel estimate ``theta`` (so it shapes
``phi'`` only); ``g'`` learns through the alignment term. Inference uses
``g'`` only: ``rc(logits, features=phi)``.

Training: Adam, batch 1024 (the last partial batch is padded and masked both
in the loss and as kernel neighbours), early stopping on a held-out 10 % of
the calibration split monitoring the validation alignment term (patience 10,
at most 100 epochs, the best epoch's parameters restored), deterministic
given ``seed``. The epoch loop is :func:`jaxcal._src.train.loop.train_epoch`.

K-Cal (``fit("kcal")``, the paper's KC baseline after Lin, Trivedi & Sun
2023) is the same network trained with the alignment weight set to 0 (the
cross-entropy of the kernel estimate alone; early stopping on its validation
value), predicting with the kernel: the Nadaraya–Watson estimate of the
labels of a memory split (the validation split) at the refined features.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import os
import pathlib
import time
import warnings
from typing import Any, ClassVar, NamedTuple

import flax.serialization
import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.typing import ArrayLike

from jaxcal._src import validation as V
from jaxcal._src.local import _nw_core, feature_centre, gaussian_log_kernel
from jaxcal._src.numerics import PRECISION, lift, map_batches
from jaxcal._src.paths import atomic_file, input_file, output_folder
from jaxcal._src.recal.base import (
  Recalibrator,
  check_inputs,
  check_num_classes,
  nan_rows,
  to_logits,
)
from jaxcal._src.train.loop import evaluate, traced_adam, train_epoch
from jaxcal._src.train.pca import PCA, _fit_pca, pca_transform, standardize
from jaxcal._src.train.splits import calibration_fit_val

__all__ = [
  "LocalNet",
  "LocalNetModule",
  "LocalNetLoss",
  "KernelCalibrator",
  "fit_local_net",
  "fit_kcal",
  "kernel_calibrator",
  "local_net_loss",
  "js_distance",
  "bernoulli_js_distance",
  "save_checkpoint",
  "load_checkpoint",
]

ALIGNMENTS = ("classwise", "multiclass")
MONITORS = ("alignment", "ce", "loss")
#: Columns of ``LocalNet.history``.
HISTORY_COLUMNS = (
  "epoch",
  "train_loss",
  "train_alignment",
  "train_ce",
  "val_loss",
  "val_alignment",
  "val_ce",
)


class LocalNetModule(nnx.Module):
  """The two-head residual MLP (flax nnx).

  Args:
    in_dim: backbone feature dimension ``D``.
    pca_dim: dimension ``k`` of ``phi_PCA`` and ``phi'``.
    num_classes: ``C``.
    hidden: hidden units.
    dropout: dropout rate on the hidden layer.
    residual_vectors: per-dimension ``w, b`` (``(k,)`` and ``(C,)``) instead
      of scalars.
    init_scale: standard deviation of the ``N(0, s^2)`` weights of the hidden
      layer and both heads (biases 0); ``None``: flax's defaults.
    rngs: parameter keys.
  """

  def __init__(
    self,
    in_dim: int,
    pca_dim: int,
    num_classes: int,
    hidden: int,
    dropout: float,
    *,
    residual_vectors: bool = False,
    init_scale: float | None = 0.01,
    rngs: nnx.Rngs,
  ):
    init = {} if init_scale is None else {"kernel_init": nnx.initializers.normal(init_scale)}
    self.hidden = nnx.Linear(in_dim, hidden, rngs=rngs, precision=PRECISION, **init)
    self.dropout = nnx.Dropout(dropout)
    self.head_features = nnx.Linear(hidden, pca_dim, rngs=rngs, precision=PRECISION, **init)
    self.head_logits = nnx.Linear(hidden, num_classes, rngs=rngs, precision=PRECISION, **init)
    kf, kg = jax.random.split(rngs.params())
    shape_f, shape_g = ((pca_dim,), (num_classes,)) if residual_vectors else ((), ())
    # float32 under x64 too, as the layers (their default), drawn alike
    self.w_phi = nnx.Param(jnp.ones(shape_f, jnp.float32))
    self.b_phi = nnx.Param(0.01 * jax.random.normal(kf, shape_f, jnp.float32))
    self.w_g = nnx.Param(jnp.ones(shape_g, jnp.float32))
    self.b_g = nnx.Param(0.01 * jax.random.normal(kg, shape_g, jnp.float32))

  def __call__(
    self,
    phi_in: jax.Array,
    phi_pca: jax.Array,
    logits: jax.Array,
    key: jax.Array | None = None,
    *,
    keep_prob: ArrayLike | None = None,
  ) -> tuple[jax.Array, jax.Array]:
    """``(phi', g')`` from the MLP's input features, the PCA features and the logits.

    With a dropout ``key``, the hidden layer's dropout keeps each unit with
    probability ``keep_prob`` (``1 - rate``) and scales the kept ones by
    ``1 / keep_prob``. ``keep_prob=None`` takes the module's rate (a Python
    float: a compiled call per rate); a scalar array is traced instead (one
    compiled call for every rate, the mask and values of the module's
    dropout at that rate, bit for bit; ``keep_prob = 1`` keeps every unit
    unchanged, exactly). Without a key there is no dropout.
    """
    h = jax.nn.relu(self.hidden(phi_in))
    if key is not None and keep_prob is not None:
      h = _dropout(h, key, keep_prob)
    elif key is not None and self.dropout.rate > 0:
      h = self.dropout(h, deterministic=False, rngs=key)
    w_phi, b_phi = (lift(v[...], phi_pca.ndim) for v in (self.w_phi, self.b_phi))
    w_g, b_g = (lift(v[...], logits.ndim) for v in (self.w_g, self.b_g))
    phi_ref = self.head_features(h) + w_phi * phi_pca + b_phi
    g_ref = self.head_logits(h) + w_g * logits + b_g
    return phi_ref, g_ref


def _dropout(h: jax.Array, key: jax.Array, keep_prob: ArrayLike) -> jax.Array:
  """``nnx.Dropout``'s at rate ``1 - keep_prob``, with ``keep_prob`` traced.

  The mask is ``bernoulli(key, keep_prob)`` in ``keep_prob``'s dtype, as
  flax draws it from a Python float ``1 - rate`` (float32, float64 under
  x64), and the kept units are multiplied by ``1 / keep_prob`` rounded to
  ``h``'s dtype: what XLA makes of flax's division by that constant (it
  multiplies by its reciprocal). A rate so gives the mask and values of
  ``nnx.Dropout`` in a compiled epoch, bit for bit. Uniform draws lie in
  ``[0, 1)``, so ``keep_prob = 1`` keeps every unit and multiplies by 1:
  ``h`` exactly.
  """
  keep_prob = jnp.asarray(keep_prob)
  mask = jax.random.bernoulli(key, keep_prob, h.shape)
  scale = 1 / keep_prob.astype(h.dtype)
  return jax.lax.select(mask, h * scale, jnp.zeros_like(h))


@functools.cache
def _abstract_module(in_dim, pca_dim, num_classes, hidden, dropout, residual_vectors):
  return nnx.eval_shape(
    lambda: LocalNetModule(
      in_dim,
      pca_dim,
      num_classes,
      hidden,
      dropout,
      residual_vectors=residual_vectors,
      rngs=nnx.Rngs(0),
    )
  )


def _graphdef(*shape) -> nnx.GraphDef:
  return nnx.split(_abstract_module(*shape), nnx.Param)[0]


# --------------------------------------------------------------------------
# The loss.
# --------------------------------------------------------------------------


def _xlogy_ratio(a, b):
  """``a * log(a / b)`` with ``0 log 0 = 0``."""
  safe_a = jnp.where(a > 0, a, 1.0)
  return jnp.where(a > 0, a * (jnp.log(safe_a) - jnp.log(jnp.maximum(b, 1e-30))), 0.0)


def js_distance(p: jax.Array, q: jax.Array) -> jax.Array:
  """Multiclass Jensen–Shannon distance per row (natural log), ``(..., C) -> (...)``.

  ``d(P, Q) = sqrt(KL(P||M)/2 + KL(Q||M)/2)``, ``M = (P + Q)/2``, with the
  divergence floored at ``1e-12`` under the square root (finite gradient at
  ``P = Q``).

  Args:
    p: ``(..., C)`` probability vectors.
    q: ``(..., C)`` probability vectors.

  Returns:
    ``(...)`` distances in ``[0, sqrt(log 2)]``.

  Example:
    >>> import jax.numpy as jnp
    >>> round(float(js_distance(jnp.array([1.0, 0.0]), jnp.array([0.0, 1.0]))), 4)
    0.8326

  Reference: Barbera et al. (2025), arXiv:2510.26566, §7 Eq. (9); Endres &
  Schindelin (2003), "A new metric for probability distributions".
  """
  m = 0.5 * (p + q)
  jsd = 0.5 * jnp.sum(_xlogy_ratio(p, m), -1) + 0.5 * jnp.sum(_xlogy_ratio(q, m), -1)
  return jnp.sqrt(jnp.maximum(jsd, 1e-12))


def bernoulli_js_distance(p: jax.Array, q: jax.Array, eps: float = 1e-4) -> jax.Array:
  """Mean over classes of the Bernoulli Jensen–Shannon distance, ``(..., C) -> (...)``.

  ``(1/C) sum_c sqrt(max(JSD(Bern(p_c), Bern(q_c)), eps))`` with ``p``, ``q``
  and their midpoint clamped to ``[eps, 1 - eps]`` (natural log): the
  alignment term of the authors' code, behind the paper's reported numbers.

  Args:
    p: ``(..., C)`` probabilities.
    q: ``(..., C)`` probabilities.
    eps: clamp and floor (authors: 1e-4).

  Returns:
    ``(...)`` distances, ``>= sqrt(eps)``.

  Example:
    >>> import jax.numpy as jnp
    >>> round(float(bernoulli_js_distance(jnp.array([0.5, 0.5]), jnp.array([0.5, 0.5]))), 4)
    0.01

  Reference: Barbera et al. (2025), arXiv:2510.26566, §7; their code
  (github.com/Cesbar99/multiclass-local-calibration, ``cal_trainer.py``).
  """
  p = jnp.clip(p, eps, 1 - eps)
  q = jnp.clip(q, eps, 1 - eps)
  m = jnp.clip(0.5 * (p + q), eps, 1 - eps)

  def kl(a, b):
    return a * jnp.log(a / b) + (1 - a) * jnp.log((1 - a) / (1 - b))

  jsd = 0.5 * kl(q, m) + 0.5 * kl(p, m)
  return jnp.mean(jnp.sqrt(jnp.maximum(jsd, eps)), axis=-1)


class LocalNetLoss(NamedTuple):
  """The LoCal Net loss of one batch and its two terms (weighted batch means)."""

  total: jax.Array
  alignment: jax.Array
  ce: jax.Array


def local_net_loss(
  g_ref: jax.Array,
  phi_ref: jax.Array,
  labels: jax.Array,
  weights: jax.Array,
  *,
  bandwidth: ArrayLike,
  lam: ArrayLike = 1.0,
  alignment: str = "classwise",
  alignment_weight: ArrayLike = 1.0,
) -> LocalNetLoss:
  """LoCal Net loss of one (masked) batch.

  ``total = a * mean_i d(softmax(g'_i), theta_i) + lambda * mean_i CE(y_i, theta_i)``
  with ``theta_i`` the Nadaraya–Watson estimate of the batch's one-hot labels
  at ``phi'_i`` (``j != i``, padding rows excluded), ``d`` the alignment
  distance and ``a`` its weight; ``CE(y, theta) = -log max(theta_y, 1e-8)``.
  A batch with one real row has no estimate and contributes 0.

  Args:
    g_ref: ``(B, C)`` refined logits ``g'``.
    phi_ref: ``(B, k)`` refined features ``phi'``.
    labels: ``(B,)`` integer labels.
    weights: ``(B,)`` 1 for real rows, 0 for padding (excluded from the means
      and as kernel neighbours).
    bandwidth: kernel bandwidth gamma (a float or a traced scalar, as are
      ``lam`` and ``alignment_weight``).
    lam: weight lambda of the cross-entropy term.
    alignment: ``"classwise"`` (:func:`bernoulli_js_distance`) or
      ``"multiclass"`` (:func:`js_distance`).
    alignment_weight: weight ``a`` of the alignment term (0: K-Cal's loss).

  Returns:
    :class:`LocalNetLoss` ``(total, alignment, ce)``, scalars.

  Example:
    >>> import jax.numpy as jnp
    >>> g = jnp.zeros((4, 2)); phi = jnp.array([[0.0], [0.1], [5.0], [5.1]])
    >>> out = local_net_loss(g, phi, jnp.array([0, 0, 1, 1]), jnp.ones(4), bandwidth=1.0)
    >>> round(float(out.ce), 4)
    0.0

  Reference: Barbera et al. (2025), arXiv:2510.26566, §7 Eq. (9).
  """
  num_classes = g_ref.shape[-1]
  onehot = jax.nn.one_hot(labels, num_classes, dtype=phi_ref.dtype)
  theta = _nw_core(phi_ref, onehot, bandwidth, include_self=False, mask=weights > 0)
  p = jax.nn.softmax(g_ref, axis=-1)
  align = js_distance(p, theta) if alignment == "multiclass" else bernoulli_js_distance(p, theta)
  ce = -jnp.log(jnp.maximum(jnp.sum(theta * onehot, axis=-1), 1e-8))
  # a row alone in its batch has no neighbour and no estimate (theta = 0): no target, so it
  # is left out (it counted CE = -log 1e-8 = 18.4: a last batch of one row moved the
  # validation CE of 65 rows from 0.70 to 0.98)
  weights = jnp.where(jnp.sum(weights > 0) >= 2, weights, jnp.zeros_like(weights))
  den = jnp.maximum(jnp.sum(weights), 1.0)
  a = jnp.sum(align * weights) / den
  c = jnp.sum(ce * weights) / den
  return LocalNetLoss(alignment_weight * a + lam * c, a, c)


class _LossParams(NamedTuple):
  """The float options of the training loss, traced (the loop's ``loss_params``).

  ``bandwidth``, ``lam`` and ``alignment_weight`` are float32 scalars (the
  network's dtype, into which the Python floats were rounded before), and
  ``keep_prob = 1 - dropout``, computed in float64, in JAX's default float
  dtype (flax's dropout draws its mask in it).
  """

  bandwidth: jax.Array
  lam: jax.Array
  alignment_weight: jax.Array
  keep_prob: jax.Array

  @classmethod
  def of(cls, bandwidth: float, lam: float, alignment_weight: float, dropout: float) -> _LossParams:
    f32 = lambda v: np.float32(float(v))
    keep = np.asarray(1.0 - float(dropout), jax.dtypes.canonicalize_dtype(np.float64))
    return jax.device_put(cls(f32(bandwidth), f32(lam), f32(alignment_weight), keep))


@dataclasses.dataclass(frozen=True)
class _TrainLoss:
  """The loss in the form the training loop takes (hashable: a static argument).

  Only the alignment distance is static; the float options come traced, as
  :class:`_LossParams`, so a fit with other values reuses the compiled epoch.
  """

  alignment: str

  def __call__(self, model, batch, weights, key, loss_params: _LossParams):
    phi_in, phi_pca, logits, y = batch
    phi_ref, g_ref = model(phi_in, phi_pca, logits, key=key, keep_prob=loss_params.keep_prob)
    out = local_net_loss(
      g_ref,
      phi_ref,
      y,
      weights,
      bandwidth=loss_params.bandwidth,
      lam=loss_params.lam,
      alignment=self.alignment,
      alignment_weight=loss_params.alignment_weight,
    )
    return out.total, jnp.stack(out)


# --------------------------------------------------------------------------
# The fitted recalibrators.
# --------------------------------------------------------------------------


@flax.struct.dataclass
class LocalNet(Recalibrator):
  """A fitted LoCal Net (a pytree). ``rc(logits, features=phi) -> probs``.

  Attributes:
    params: nested dict of the MLP's parameters (``hidden``,
      ``head_features``, ``head_logits`` with ``kernel``/``bias``; ``w_phi``,
      ``b_phi``, ``w_g``, ``b_g``, scalars or vectors).
    pca_mean, pca_scale, pca_components: the PCA (fitted on the calibration
      split) mapping ``(n, D)`` features to ``(n, k)``.
    history: ``(epochs_run, 7)`` per-epoch losses, columns
      ``HISTORY_COLUMNS`` (epoch; train loss, alignment, CE; validation loss,
      alignment, CE; the training values are dropout-on batch means).
    feature_dim, pca_dim, num_classes, hidden, dropout, bandwidth,
    residual_vectors, standardize_input: the architecture (static).
    epochs_run: epochs trained; best_epoch: the epoch whose parameters were
      kept; stopped_early: whether early stopping ended training before the
      epoch limit; monitor: the validation quantity early stopping watched.
  """

  method: ClassVar[str] = "local_net"
  params: dict
  pca_mean: jax.Array
  pca_scale: jax.Array
  pca_components: jax.Array
  history: jax.Array | None = None
  feature_dim: int = flax.struct.field(pytree_node=False, default=0)
  pca_dim: int = flax.struct.field(pytree_node=False, default=50)
  num_classes: int = flax.struct.field(pytree_node=False, default=0)
  hidden: int = flax.struct.field(pytree_node=False, default=64)
  dropout: float = flax.struct.field(pytree_node=False, default=0.3)
  bandwidth: float = flax.struct.field(pytree_node=False, default=10.0)
  residual_vectors: bool = flax.struct.field(pytree_node=False, default=False)
  standardize_input: bool = flax.struct.field(pytree_node=False, default=False)
  epochs_run: int = flax.struct.field(pytree_node=False, default=0)
  best_epoch: int = flax.struct.field(pytree_node=False, default=0)
  stopped_early: bool = flax.struct.field(pytree_node=False, default=False)
  monitor: str = flax.struct.field(pytree_node=False, default="alignment")

  @property
  def pca(self) -> PCA:
    return PCA(
      self.pca_mean,
      self.pca_scale,
      self.pca_components,
      jnp.zeros((self.pca_components.shape[1],), self.pca_components.dtype),
    )

  def _shape(self) -> tuple:
    return (
      self.feature_dim,
      self.pca_dim,
      self.num_classes,
      self.hidden,
      self.dropout,
      self.residual_vectors,
    )

  def module(self) -> LocalNetModule:
    """The network as a flax nnx module holding ``params``."""
    graphdef, state = nnx.split(_abstract_module(*self._shape()), nnx.Param)
    nnx.replace_by_pure_dict(state, self.params)
    return nnx.merge(graphdef, state)

  def _forward(self, logits: jax.Array, features: jax.Array) -> tuple[jax.Array, jax.Array]:
    f = features.astype(self.pca_mean.dtype)
    phi_in = standardize(self.pca, f) if self.standardize_input else f
    return self.module()(phi_in, pca_transform(self.pca, f), logits.astype(self.pca_mean.dtype))

  def apply(self, inputs: jax.Array, features: jax.Array | None = None) -> jax.Array:
    """Recalibrated probabilities ``softmax(g')`` for checked inputs (traceable).

    Args:
      inputs: ``(n, C)`` logits (``from_logits``) or probabilities.
      features: ``(n, D)`` backbone features (``D`` the fit's ``feature_dim``).

    Returns:
      ``(n, C)`` probabilities.
    """
    if features is None:
      raise ValueError("a LoCal Net needs the backbone features: rc(logits, features=phi)")
    z = to_logits(inputs, self.from_logits)
    return jax.nn.softmax(self._forward(z, features)[1], axis=-1)

  def _check(self, inputs: ArrayLike, features: ArrayLike | None):
    x = check_inputs(inputs, self.from_logits, rows=True)
    check_num_classes(self, x.shape[1])
    if features is None:
      raise ValueError(
        f"a {type(self).__name__} needs the backbone features: rc(logits, features=phi)"
      )
    f = V.check_features(features, x.shape[0], rows=True)
    if f.shape[1] != self.feature_dim:
      raise ValueError(
        f"features have dimension {f.shape[1]} but the {type(self).__name__} was fitted on "
        f"{self.feature_dim}-dimensional features"
      )
    return x, f

  @V.outside_explicit_context
  def __call__(self, inputs: ArrayLike, features: ArrayLike | None = None) -> jax.Array:
    """Recalibrated ``(n, C)`` probabilities from logits ``(n, C)`` and features ``(n, D)``.

    Bad values raise on an eager call; under ``jax.jit`` the rows of bad
    inputs come back as NaN.

    Args:
      inputs: ``(n, C)`` logits (``from_logits``) or probabilities.
      features: ``(n, D)`` backbone features (``D`` the fit's ``feature_dim``).

    Returns:
      ``(n, C)`` recalibrated probabilities.

    Raises:
      ValueError: bad inputs or features (eager calls), another ``C`` or
        ``D`` than the fit's, or no features.
    """
    x, f = self._check(inputs, features)
    return _rows_of(_apply_compiled(self, x, f), x, f)

  def logits(self, inputs: ArrayLike, features: ArrayLike) -> jax.Array:
    """Refined logits ``g'`` ``(n, C)`` (NaN rows for bad inputs under ``jax.jit``).

    Args:
      inputs: ``(n, C)`` logits (``from_logits``) or probabilities.
      features: ``(n, D)`` backbone features (``D`` the fit's ``feature_dim``).

    Returns:
      ``(n, C)`` refined logits.

    Raises:
      ValueError: as :meth:`__call__`.
    """
    x, f = self._check(inputs, features)
    return _rows_of(_forward_compiled(self, to_logits(x, self.from_logits), f)[1], x, f)

  def refined_features(self, inputs: ArrayLike, features: ArrayLike) -> jax.Array:
    """Refined features ``phi'`` ``(n, pca_dim)`` (where the paper measures LN's LCE).

    Args:
      inputs: ``(n, C)`` logits (``from_logits``) or probabilities.
      features: ``(n, D)`` backbone features (``D`` the fit's ``feature_dim``).

    Returns:
      ``(n, pca_dim)`` refined features.

    Raises:
      ValueError: as :meth:`__call__`.
    """
    x, f = self._check(inputs, features)
    return _rows_of(_forward_compiled(self, to_logits(x, self.from_logits), f)[0], x, f)

  def pca_features(self, features: ArrayLike) -> jax.Array:
    """``phi_PCA`` ``(n, pca_dim)``: the calibration-split PCA of ``features``.

    Args:
      features: ``(n, D)`` backbone features.

    Returns:
      ``(n, pca_dim)`` component scores of the standardised features.

    Raises:
      ValueError: features of another width or not finite.
    """
    f = V.as_float(features, "features")
    if f.ndim != 2 or f.shape[1] != self.feature_dim:
      raise ValueError(f"features must have shape (n, {self.feature_dim}), got {tuple(f.shape)}")
    f = V.check_finite(f, "features")
    return pca_transform(self.pca, f.astype(self.pca_mean.dtype))


@flax.struct.dataclass
class KernelCalibrator(LocalNet):
  """A kernel classifier on a LoCal Net's refined features (a pytree).

  ``rc(logits, features=phi)`` is the Nadaraya–Watson estimate of the memory
  split's labels at ``phi'(x)``:

      theta_c(x) = sum_j w_j(x) 1[y_j = c] / sum_j w_j(x),
      w_j(x) = max(k(phi'(x), phi'_j) / sum_l k(phi'(x), phi'_l), weight_floor),

  over the memory points ``j`` (the floor, 1e-6 in the authors' code, keeps
  the probability of every class the memory holds positive). A class the
  memory does not hold (a small validation split of many classes) counts as
  one pseudo-point of weight ``weight_floor``, so its probability is tiny
  but positive, never 0 (a log loss of ``inf``); :func:`kernel_calibrator`
  warns when it builds such a memory. Fitted by :func:`fit_kcal` (the paper's
  KC) or built from any LoCal Net by :func:`kernel_calibrator` (the paper's
  KO: a LoCal Net predicting with its kernel).

  Attributes (beyond :class:`LocalNet`'s):
    memory_features: ``(m, pca_dim)`` refined features of the memory split.
    memory_labels: ``(m,)`` their labels.
    weight_floor: lower bound of a normalised kernel weight (static).
  """

  method: ClassVar[str] = "kcal"
  memory_features: jax.Array | None = None
  memory_labels: jax.Array | None = None
  weight_floor: float = flax.struct.field(pytree_node=False, default=1e-6)

  def apply(self, inputs: jax.Array, features: jax.Array | None = None) -> jax.Array:
    if features is None:
      raise ValueError("a KernelCalibrator needs the backbone features: rc(logits, features=phi)")
    phi_ref = self._forward(to_logits(inputs, self.from_logits), features)[0]
    out = _kernel_predict(
      phi_ref,
      self.memory_features,
      jax.nn.one_hot(self.memory_labels, self.num_classes, dtype=phi_ref.dtype),
      self.bandwidth,
      self.weight_floor,
    )
    # a memory built under jit from bad labels is NaN (kernel_calibrator): so are the
    # predictions, read from a sum (XLA:CPU's max with the weight floor dropped the NaN
    # and gave the class frequencies)
    return V.fold(out, ~jnp.isnan(jnp.sum(self.memory_features)))


def _kernel_predict(q, mem, onehot, bandwidth, floor, chunk=2048):
  """Floored Nadaraya–Watson class probabilities at queries ``q`` ``(n, k)``.

  A class without memory points gets one pseudo-point of weight ``floor``
  (exactly nothing changes when every class has memory points).
  """
  centre = feature_centre(mem)
  mem = mem - centre
  mem_sq = jnp.sum(mem * mem, axis=1)
  absent = jnp.where(
    jnp.sum(onehot, axis=0, keepdims=True) == 0, jnp.asarray(floor, onehot.dtype), 0
  )

  def one(qi):
    logk = gaussian_log_kernel(qi[None, :] - centre, mem, bandwidth, b_sq=mem_sq)
    w = jnp.maximum(jax.nn.softmax(logk, axis=1), floor)
    num = jnp.matmul(w, onehot, precision=PRECISION) + absent
    return (num / (jnp.sum(w, axis=1, keepdims=True) + jnp.sum(absent)))[0]

  return map_batches(one, q, chunk)


def _rows_of(out: jax.Array, x: jax.Array, f: jax.Array) -> jax.Array:
  """``out`` with NaN rows where ``x`` or ``f`` (checked, NaN under ``jit`` when bad) is not finite.

  Eager inputs were checked (bad values raised), so nothing is added then.
  """
  return out if V.is_concrete(x, f) else nan_rows(out, x, f)


#: The static fields a prediction does not compile on, at fixed values: the
#: float options (the bandwidth and a kernel calibrator's weight floor come
#: traced; the dropout is unused) and the training record (``history`` too,
#: whose length is the epochs run). A sweep's calibrators share their programs.
_UNCOMPILED = dict(
  history=None,
  dropout=0.0,
  bandwidth=1.0,
  epochs_run=0,
  best_epoch=0,
  stopped_early=False,
  monitor="alignment",
)


def _compiled_form(rc: LocalNet) -> tuple[LocalNet, tuple[np.ndarray, np.ndarray]]:
  """``rc`` with the fields of ``_UNCOMPILED`` fixed, and its bandwidth and weight floor."""
  kernel = isinstance(rc, KernelCalibrator)
  floats = (np.float32(rc.bandwidth), np.float32(rc.weight_floor if kernel else 0.0))
  return rc.replace(**_UNCOMPILED, **({"weight_floor": 0.0} if kernel else {})), floats


def _with_floats(rc: LocalNet, floats: tuple) -> LocalNet:
  """``_compiled_form``'s net with its (traced) bandwidth and weight floor back."""
  bandwidth, floor = floats
  kernel = isinstance(rc, KernelCalibrator)
  return rc.replace(bandwidth=bandwidth, **({"weight_floor": floor} if kernel else {}))


def _apply_compiled(rc: LocalNet, x, f):
  """``rc.apply(x, f)``, compiled once for calibrators that differ in float options only."""
  return _jit_apply(*_compiled_form(rc), x, f)


def _forward_compiled(rc: LocalNet, z, f):
  """``rc._forward(z, f)``, compiled once for calibrators that differ in float options only."""
  return _jit_forward(_compiled_form(rc)[0], z, f)


@jax.jit
def _jit_apply(rc: LocalNet, floats, x, f):
  return _with_floats(rc, floats).apply(x, f)


@jax.jit
def _jit_forward(rc: LocalNet, z, f):
  return rc._forward(z, f)


# --------------------------------------------------------------------------
# Checkpoints (flax msgpack serialisation; never pickle).
# --------------------------------------------------------------------------


def save_checkpoint(path: str | os.PathLike, params: dict, meta: dict | None = None) -> None:
  """Writes ``params`` (a nested dict of arrays) and ``meta`` to a msgpack file."""
  blob = flax.serialization.msgpack_serialize(
    {"params": jax.tree_util.tree_map(np.asarray, params), "meta": dict(meta or {})}
  )
  path = pathlib.Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  with atomic_file(path, "wb") as f:
    f.write(blob)


def load_checkpoint(path: str | os.PathLike) -> tuple[dict, dict]:
  """Reads a checkpoint written by :func:`save_checkpoint`: ``(params, meta)``.

  Raises:
    FileNotFoundError: nothing is at ``path``.
    IsADirectoryError: ``path`` is a folder.
    ValueError: ``path`` is a named pipe, a device or a socket (refused
      before it is opened: reading a pipe waits for a writer).
  """
  d = flax.serialization.msgpack_restore(pathlib.Path(input_file(path)).read_bytes())
  return jax.tree_util.tree_map(jnp.asarray, d["params"]), d.get("meta", {})


# --------------------------------------------------------------------------
# Training.
# --------------------------------------------------------------------------


@functools.partial(
  jax.jit,
  static_argnames=(
    "pca_dim",
    "hidden",
    "residual_vectors",
    "flax_init",
    "standardize_input",
  ),
)
def _setup(
  f,
  z,
  y,
  tr,
  va,
  key,
  init_scale,
  *,
  pca_dim,
  hidden,
  residual_vectors,
  flax_init,
  standardize_input,
):
  """PCA, the network's inputs on both splits and the initial parameters, in
  one compiled call (eager setup would compile dozens of tiny kernels).

  ``init_scale`` is traced (ignored with ``flax_init``: flax's initialisers),
  and the dropout rate, which draws no parameter, is not an argument: a fit
  with other values of either reuses the compiled setup.
  """
  f = f.astype(jnp.float32)
  z = z.astype(jnp.float32)
  pca = _fit_pca(f, pca_dim)
  phi_std = standardize(pca, f)
  phi_pca = jnp.matmul(phi_std, pca.components, precision=PRECISION)
  phi_in = phi_std if standardize_input else f
  take = lambda idx: (phi_in[idx], phi_pca[idx], z[idx], y[idx])
  module = LocalNetModule(
    f.shape[1],
    pca_dim,
    z.shape[1],
    hidden,
    0.0,
    residual_vectors=residual_vectors,
    init_scale=None if flax_init else init_scale,
    rngs=nnx.Rngs(params=jax.random.fold_in(key, 0)),
  )
  return pca, take(tr), take(va), nnx.state(module, nnx.Param)


#: The largest batch whose ``(B, B)`` kernel has at most ``2**31 - 1`` entries.
_MAX_BATCH = math.isqrt(V.MAX_ENTRIES)


def _train(
  inputs,
  labels,
  *,
  features,
  from_logits,
  pca_dim,
  hidden,
  dropout,
  bandwidth,
  lam,
  alignment,
  alignment_weight,
  init_scale,
  residual_vectors,
  standardize_input,
  learning_rate,
  batch_size,
  epochs,
  patience,
  monitor,
  restore_best,
  val_fraction,
  validation_data,
  seed,
  verbose,
  checkpoint_dir,
  method,
):
  """Validates, trains; returns ``(LocalNet, memory)`` with ``memory`` the
  held-out split ``(logits, labels, features)`` (the training split when
  there is none)."""
  V.require_eager(
    f"fit({method!r})",
    "a training loop with early stopping on the host",
    inputs,
    labels,
    features,
    validation_data,
    instead="the fitted network's apply is traceable",
  )
  if features is None:
    raise ValueError(
      f"fit({method!r}) needs the backbone features of the calibration split: "
      f"fit({method!r}, logits, labels, features=phi) with phi of shape (n, D)"
    )
  x = check_inputs(inputs, from_logits)
  n, num_classes = x.shape
  y = V.check_labels(labels, n, num_classes)
  f = V.check_features(features, n)
  # the network and its kernel run in float32 whatever the inputs' dtype (x64 too)
  f32 = jnp.float32
  bandwidth = V.check_float_option(bandwidth, "bandwidth", positive=True)
  # the metric's rule: a bandwidth whose square underflows makes every kernel weight 0,
  # and one beyond float32's range is inf there
  V.check_bandwidth(bandwidth, f32, squared=True)
  if alignment not in ALIGNMENTS:
    raise ValueError(f"alignment must be one of {ALIGNMENTS}, got {alignment!r}")
  if monitor not in MONITORS:
    raise ValueError(f"monitor must be one of {MONITORS}, got {monitor!r}")
  for name, v in (("lam", lam), ("alignment_weight", alignment_weight)):
    V.check_float_option(v, name, minimum=0.0, dtype=f32)
  if init_scale is not None:
    V.check_float_option(init_scale, "init_scale", positive=True, dtype=f32)
  # >= 0, not > 0: a rate of 0 keeps the initial network (the strong initialisation)
  learning_rate = V.check_float_option(learning_rate, "learning_rate", minimum=0.0, dtype=f32)
  if V.check_float_option(val_fraction, "val_fraction", minimum=0.0) >= 1:
    raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction!r}")
  for name, v in (("pca_dim", pca_dim), ("hidden", hidden), ("batch_size", batch_size)):
    V.check_int_option(v, name, minimum=1)
  if batch_size < 2:
    # each row's target is the kernel estimate over the *other* rows of its batch: in a
    # batch of one row there is none, local_net_loss weighs the row 0, and every loss and
    # gradient was 0 (a fit that trained nothing, with a history of zeros)
    raise ValueError(
      f"batch_size must be >= 2, got {batch_size}: the kernel estimate of a row is over the "
      "other rows of its batch, so a batch of one row has no target and trains nothing"
    )
  V.check_entries(  # the (B, B) batch kernel: XLA aborts the process beyond int32
    batch_size * batch_size,
    f"with batch_size = {batch_size}, the (B, B) batch kernel",
    f"pass batch_size <= {_MAX_BATCH}",
  )
  # the hidden layer's weights (D, hidden) and activations (batch, hidden): 10**12 units
  # ended in XLA's out-of-memory error (found by a review helper)
  widest = max(f.shape[1], pca_dim, num_classes, batch_size)
  V.check_entries(
    hidden * widest,
    f"with hidden = {hidden}, the hidden layer's arrays (hidden x {widest}: the widest of the "
    "features, pca_dim, the classes and batch_size)",
    f"pass hidden <= {V.MAX_ENTRIES // widest}",
  )
  V.check_int_option(epochs, "epochs", minimum=1)
  seed = V.check_seed(seed, minimum=0)
  if patience is not None:
    V.check_int_option(patience, "patience", minimum=1)
  if V.check_float_option(dropout, "dropout", minimum=0.0) >= 1:
    raise ValueError(f"dropout must be in [0, 1), got {dropout!r}")
  if residual_vectors is not None:
    residual_vectors = V.check_flag(residual_vectors, "residual_vectors")
  standardize_input = V.check_flag(standardize_input, "standardize_input")
  restore_best = V.check_flag(restore_best, "restore_best")
  verbose = V.check_flag(verbose, "verbose")
  if checkpoint_dir is not None:
    checkpoint_dir = output_folder(checkpoint_dir, "checkpoint_dir")  # now, not after an epoch
  if validation_data is not None:
    if not isinstance(validation_data, tuple | list) or len(validation_data) != 3:
      raise ValueError("validation_data must be a tuple (inputs, labels, features)")
    xv = check_inputs(validation_data[0], from_logits, "validation inputs")
    if xv.shape[1] != num_classes:
      raise ValueError(f"validation inputs have {xv.shape[1]} classes, inputs {num_classes}")
    yv = V.check_labels(validation_data[1], xv.shape[0], num_classes, "validation labels")
    fv = V.check_features(validation_data[2], xv.shape[0], "validation features")
    if fv.shape[1] != f.shape[1]:
      raise ValueError(f"validation features have dimension {fv.shape[1]}, features {f.shape[1]}")
    if xv.shape[0] < 2:
      raise ValueError(
        f"validation_data has {xv.shape[0]} row(s); the kernel estimate of a validation row "
        "is over the other rows of its batch: give at least 2"
      )
    tr = np.arange(n)
    va = np.arange(n, n + xv.shape[0])
    x = jnp.concatenate([x, xv.astype(x.dtype)])
    y = jnp.concatenate([y, yv.astype(y.dtype)])
    f = jnp.concatenate([f, fv.astype(f.dtype)])
  else:
    tr, va = calibration_fit_val(n, seed, val_fraction)
  if tr.size < 2 or (validation_data is None and val_fraction > 0 and va.size < 2):
    raise ValueError(f"too few samples ({n}) for a LoCal Net with val_fraction={val_fraction}")
  # The validation loss estimates each row from the other rows of its batch: batches
  # in the caller's row order (e.g. sorted by class) gave another value and another
  # restored epoch. One seeded order, as the authors' shuffled split (the memory keeps
  # the caller's order).
  va_batches = va[np.random.default_rng([seed, 1]).permutation(va.size)]
  if pca_dim > min(f.shape):
    raise ValueError(
      f"pca_dim = {pca_dim} exceeds min(n, D) = {min(f.shape)} of the calibration features; "
      f"pass pca_dim <= {min(f.shape)}"
    )
  if residual_vectors is None:
    residual_vectors = num_classes > 10  # the authors' code
  shape = (int(f.shape[1]), int(pca_dim), int(num_classes), int(hidden), float(dropout))
  shape = shape + (bool(residual_vectors),)
  pca, data_tr, data_va, params = _setup(
    f,
    to_logits(x, from_logits),
    y,
    jnp.asarray(tr),
    jnp.asarray(va_batches),
    V.seed_key(seed),
    np.float32(0.0 if init_scale is None else float(init_scale)),
    pca_dim=int(pca_dim),
    hidden=int(hidden),
    residual_vectors=bool(residual_vectors),
    flax_init=init_scale is None,
    standardize_input=bool(standardize_input),
  )
  memory_idx = va if va.size else tr
  memory = (x[memory_idx], y[memory_idx], f[memory_idx])
  has_val = va.size > 0
  # The float options are traced, so that a fit with other values (a sweep over the
  # bandwidth, say) compiles nothing new: the loss's in loss_params, the learning rate
  # in the optimiser's state, the dropout rate as loss_params.keep_prob (the network
  # is compiled at rate 0: it drops only through keep_prob).
  graphdef = _graphdef(*shape[:4], 0.0, shape[5])
  loss_fn = _TrainLoss(alignment)
  loss_params = _LossParams.of(bandwidth, lam, alignment_weight, dropout)
  k_train = jax.random.fold_in(V.seed_key(seed), 1)
  tx, opt_state = traced_adam(params, learning_rate)
  col = {"loss": 0, "alignment": 1, "ce": 2}[monitor]
  best_params, best_val, best_epoch, stale, stopped = params, np.inf, 0, 0, False
  history = []

  # The loop pads the last batch; when it holds one real row, local_net_loss weighs that
  # row 0 (no neighbour, no estimate), but the loop still divides the epoch's sum by all
  # m rows: the reported means were (m - 1) / m of the mean over the rows with an
  # estimate. The lone row's batch is fixed by m and batch_size alone, not by the order.
  def mean_scale(m: int) -> float:
    return m / (m - 1) if m > batch_size and m % batch_size == 1 else 1.0

  tr_scale, va_scale = mean_scale(tr.size), mean_scale(va.size)
  t0 = time.perf_counter()
  for epoch in range(1, epochs + 1):
    params, opt_state, tr_terms = train_epoch(
      graphdef,
      tx,
      params,
      opt_state,
      data_tr,
      jax.random.fold_in(k_train, epoch),
      loss_fn=loss_fn,
      batch_size=int(batch_size),
      loss_params=loss_params,
      min_rows=2,  # a lone last row has no target: no Adam step on its zero gradient
    )
    tr_terms = np.asarray(jax.device_get(tr_terms), np.float64) * tr_scale  # 3 scalars
    if has_val:
      va_terms = evaluate(
        graphdef,
        params,
        data_va,
        loss_fn=loss_fn,
        batch_size=int(batch_size),
        loss_params=loss_params,
      )
      va_terms = np.asarray(jax.device_get(va_terms), np.float64) * va_scale
    else:
      va_terms = np.full(3, np.nan)
    # the validation terms too: a NaN there compares False with the best value every
    # epoch, so best_epoch stayed 0 and the initial network came back without a word
    if not np.all(np.isfinite(tr_terms)):
      raise FloatingPointError(
        f"LoCal Net loss is not finite at epoch {epoch} (try a larger bandwidth, or a "
        "smaller learning_rate, lam, alignment_weight or init_scale)"
      )
    if has_val and not np.all(np.isfinite(va_terms)):
      raise FloatingPointError(
        f"LoCal Net validation loss is not finite at epoch {epoch} (validation features far "
        "outside the calibration features' range overflow float32; or try a larger bandwidth, "
        "or a smaller learning_rate, lam, alignment_weight or init_scale)"
      )
    history.append((epoch, *tr_terms, *va_terms))
    improved = (not has_val) or va_terms[col] < best_val
    if improved:
      best_params, best_epoch, stale = params, epoch, 0
      best_val = va_terms[col] if has_val else best_val
      if checkpoint_dir is not None:
        save_checkpoint(
          pathlib.Path(checkpoint_dir) / f"{method}_best.msgpack",
          nnx.to_pure_dict(best_params),
          {"epoch": epoch, "val": float(va_terms[col]), "monitor": monitor, "seed": seed},
        )
    else:
      stale += 1
    if verbose:
      bar = "#" * int(20 * epoch / epochs)
      print(
        f"{method} [{bar:<20}] epoch {epoch:3d}/{epochs}  train {tr_terms[0]:.4f}  "
        f"val {monitor} {va_terms[col]:.4f}{' *' if improved else ''}  "
        f"{time.perf_counter() - t0:.1f}s",
        flush=True,
      )
    if patience is not None and has_val and stale >= patience:
      stopped = epoch < epochs
      if verbose:
        print(f"{method}: early stop at epoch {epoch}; best epoch {best_epoch}", flush=True)
      break
  kept = best_params if restore_best else params
  net = LocalNet(
    params=nnx.to_pure_dict(kept),
    pca_mean=pca.mean,
    pca_scale=pca.scale,
    pca_components=pca.components,
    history=jnp.asarray(np.asarray(history, np.float32)),
    feature_dim=shape[0],
    pca_dim=shape[1],
    num_classes=shape[2],
    hidden=shape[3],
    dropout=shape[4],
    bandwidth=float(bandwidth),
    residual_vectors=shape[5],
    standardize_input=bool(standardize_input),
    epochs_run=len(history),
    best_epoch=int(best_epoch if restore_best else len(history)),
    stopped_early=bool(stopped),
    monitor=monitor,
    from_logits=from_logits,
  )
  return net, memory


@V.outside_explicit_context
def fit_local_net(
  inputs: ArrayLike,
  labels: ArrayLike,
  *,
  features: ArrayLike | None = None,
  from_logits: bool = True,
  pca_dim: int = 50,
  hidden: int = 64,
  dropout: float = 0.3,
  bandwidth: float = 10.0,
  lam: float = 1.0,
  alignment: str = "classwise",
  alignment_weight: float = 1.0,
  init_scale: float | None = 0.01,
  residual_vectors: bool | None = None,
  standardize_input: bool = False,
  learning_rate: float = 1e-3,
  batch_size: int = 1024,
  epochs: int = 100,
  patience: int | None = 10,
  monitor: str = "alignment",
  restore_best: bool = True,
  val_fraction: float = 0.1,
  validation_data: tuple | None = None,
  seed: int = 0,
  verbose: bool = True,
  checkpoint_dir: str | os.PathLike | None = None,
) -> LocalNet:
  """Fits a LoCal Net on a calibration split.

  Minimises ``a * d(softmax(g'), theta) + lambda * CE(y, theta)`` over
  batches (see the module docstring for ``phi'``, ``g'``, ``theta`` and the
  alignment distances ``d``). Every default is the value of the paper
  (App. D.2) or, where the paper is silent, of its authors' code, except
  the zero initial biases of the hidden layer and heads (see
  ``init_scale``) and two that follow the authors' code where the paper
  says otherwise: per-dimension residual weights when ``C > 10`` (App. D.2,
  Eq. 51, calls them scalars) and at most 100 epochs with early stopping
  (App. D.2 trains 22, 30 and 60 epochs on CIFAR-10, CIFAR-100 and
  TissueMNIST).

  The float options (``bandwidth``, ``lam``, ``alignment_weight``,
  ``dropout``, ``learning_rate``, ``init_scale``) reach the compiled
  programs as arrays: a second fit that changes only them (a sweep) compiles
  nothing new, and nor do its calibrator's predictions.

  Args:
    inputs: ``(n, C)`` backbone logits (probabilities with ``from_logits=False``;
      their log is used as logits).
    labels: ``(n,)`` integer labels.
    features: ``(n, D)`` backbone features ``phi(x)`` (penultimate layer);
      required.
    from_logits: whether ``inputs`` are logits.
    pca_dim: PCA dimension k of ``phi_PCA`` and ``phi'`` (paper: 50; at most
      ``min(n, D)``). The PCA of standardised features is fitted on all of
      ``features`` (plus the validation features, if given): the whole
      calibration split.
    hidden: hidden units (paper: 64 for CIFAR-10, 128 / 256 elsewhere; the
      authors' published commands use 64 everywhere).
    dropout: dropout rate on the hidden layer (paper: 0.3; 0.5 for CIFAR-100).
    bandwidth: Gaussian kernel bandwidth gamma of the Nadaraya–Watson
      estimate (paper: 10).
    lam: weight lambda of the kernel cross-entropy term (paper: 1).
    alignment: ``"classwise"`` (default: the authors' class-wise Bernoulli JS
      distance, behind the paper's numbers) or ``"multiclass"`` (the
      multiclass JS distance of the paper's Eq. 9).
    alignment_weight: weight of the alignment term (1; 0 trains K-Cal's loss).
    init_scale: standard deviation of the ``N(0, s^2)`` initial weights of
      the hidden layer and both heads, biases 0 (paper: 0.01, so that at the
      start ``phi' ~ phi_PCA`` and ``g' ~ g``; the zero biases are
      jaxcal's choice, the authors' code keeps PyTorch's uniform ones);
      ``None``: flax's defaults.
    residual_vectors: per-dimension ``w_phi, b_phi, w_g, b_g`` instead of
      scalars; ``None`` (default): vectors when ``C > 10``, as the authors'
      code does.
    standardize_input: feed the MLP standardised features instead of the raw
      ``phi(x)`` (the authors feed the raw features).
    learning_rate: Adam step size (paper: 1e-3); a finite number ``>= 0``
      (0 keeps the network at its initialisation).
    batch_size: batch size (paper: 1024), an int ``>= 2``: the kernel
      estimate of a row is over the other rows of its batch. A last batch
      of one row has none; it takes no optimiser step and is left out of
      that epoch's figures.
    epochs: maximum number of epochs (authors: 100).
    patience: stop after this many epochs without a strictly lower monitored
      validation value (authors: 10); ``None``: train all ``epochs``.
    monitor: the validation quantity early stopping watches: ``"alignment"``
      (the alignment term, as the authors), ``"ce"`` (the kernel
      cross-entropy) or ``"loss"`` (the total).
    restore_best: keep the parameters of the best monitored epoch (authors:
      yes) rather than the last.
    val_fraction: held-out share of the calibration split for early stopping
      (paper: 10 %); 0 disables validation (the last epoch is kept).
    validation_data: optional ``(inputs, labels, features)`` held-out split
      for early stopping; then all of ``inputs`` is used for training and
      ``val_fraction`` is ignored.
    seed: seeds the split, the initialisation, the batch order and dropout.
    verbose: print one progress line per epoch.
    checkpoint_dir: if given, the best parameters so far are written there as
      ``local_net_best.msgpack`` (flax serialisation) after every improvement.

  Returns:
    A fitted :class:`LocalNet`; ``rc(logits, features=phi)`` gives
    probabilities; ``rc.epochs_run``, ``rc.best_epoch``, ``rc.stopped_early``
    and ``rc.history`` report the training.

  Raises:
    ValueError: ``features`` missing, bad logits/labels/features (NaN,
      shape), a ``bandwidth`` that is not finite and ``> 0`` or whose
      square underflows (below 1.1e-19 in float32), a ``learning_rate`` that is not a finite
      number ``>= 0``, ``dropout`` / ``val_fraction`` outside ``[0, 1)``,
      ``seed`` not an int ``>= 0``,
      a bool option (``standardize_input``, ``restore_best``, ``verbose``,
      ``residual_vectors``) that is not True/False, unknown ``alignment`` /
      ``monitor``, ``pca_dim > min(n, D)``, a ``batch_size`` below 2 or whose
      ``(B, B)`` batch kernel exceeds ``2**31 - 1`` entries (``> 46340``),
      ``validation_data`` that is not an ``(inputs, labels, features)``
      tuple, a ``checkpoint_dir`` that is a file, cannot be created or is
      not writable, or too few samples.
    TypeError: a ``checkpoint_dir`` that is not a path.
    FloatingPointError: the training or validation loss became non-finite.

  Example:
    >>> import jax, jax.numpy as jnp
    >>> from jaxcal._src.recal.base import fit
    >>> k1, k2 = jax.random.split(jax.random.key(0))
    >>> phi = jax.random.normal(k1, (300, 8))
    >>> y = (phi[:, 0] > 0).astype(jnp.int32)
    >>> logits = jnp.stack([-phi[:, 0], phi[:, 0]], 1) * 3
    >>> rc = fit("local_net", logits, y, features=phi, pca_dim=4, epochs=2, verbose=False)
    >>> rc(logits, features=phi).shape, rc.epochs_run
    ((300, 2), 2)

  Reference: Barbera, Perini, De Toni, Passerini & Pugnana (2025),
  "Multiclass Local Calibration with the Jensen-Shannon Distance",
  arXiv:2510.26566, §7 (Eq. 9), §8.1 and App. D.2.
  """
  options = dict(locals())  # every argument above, by name
  return _train(**options, method="local_net")[0]


def _check_weight_floor(weight_floor: Any) -> None:
  if V.check_float_option(weight_floor, "weight_floor", minimum=0.0) >= 1:
    raise ValueError(f"weight_floor must be in [0, 1), got {weight_floor!r}")


@V.outside_explicit_context
def kernel_calibrator(
  net: LocalNet,
  inputs: ArrayLike,
  labels: ArrayLike,
  features: ArrayLike,
  *,
  weight_floor: float = 1e-6,
) -> KernelCalibrator:
  """A kernel classifier on a fitted LoCal Net's refined features.

  Keeps ``net`` and the refined features ``phi'`` of a memory split
  ``(inputs, labels, features)``; predictions are the floored
  Nadaraya–Watson estimates of the memory labels (see
  :class:`KernelCalibrator`). On a LoCal Net trained with the full loss this
  is the paper's KO baseline.

  Args:
    net: a fitted :class:`LocalNet`.
    inputs: ``(m, C)`` memory logits (probabilities if ``net`` was fitted
      with ``from_logits=False``).
    labels: ``(m,)`` memory labels.
    features: ``(m, D)`` memory backbone features.
    weight_floor: lower bound of each normalised kernel weight (authors: 1e-6).

  Returns:
    A :class:`KernelCalibrator`.

  Raises:
    TypeError: ``net`` is not a :class:`LocalNet` (a
      :class:`KernelCalibrator` is one: its memory is replaced).
    ValueError: bad memory inputs, labels or features, or ``weight_floor``
      not a number in ``[0, 1)``.

  Example:
    >>> import jax, jax.numpy as jnp
    >>> from jaxcal._src.recal.base import fit
    >>> phi = jax.random.normal(jax.random.key(0), (300, 8))
    >>> y = (phi[:, 0] > 0).astype(jnp.int32)
    >>> logits = jnp.stack([-phi[:, 0], phi[:, 0]], 1)
    >>> net = fit("local_net", logits, y, features=phi, pca_dim=4, epochs=1, verbose=False)
    >>> kc = kernel_calibrator(net, logits[:100], y[:100], phi[:100])
    >>> kc(logits, features=phi).shape
    (300, 2)

  Reference: Barbera et al. (2025), arXiv:2510.26566, §8.1 (KO, KC); Lin,
  Trivedi & Sun (2023), "Taking a step back with KCal: multi-class
  kernel-based calibration for deep neural networks", ICLR.
  """
  if not isinstance(net, LocalNet):
    raise TypeError(f"net must be a fitted LocalNet (fit_local_net), got {type(net).__name__}")
  x, f = net._check(inputs, features)
  y, y_ok = V.check_labels_ok(labels, x.shape[0], net.num_classes)
  _check_weight_floor(weight_floor)
  # traced labels out of range: a NaN memory (its predictions NaN), not a plausible one
  phi_ref = V.fold(_forward_compiled(net, to_logits(x, net.from_logits), f)[0], y_ok)
  if V.is_concrete(y):
    with jax.ensure_compile_time_eval():  # labels closed over by a user's jit: read now
      counts = jnp.zeros((net.num_classes,), jnp.int32).at[y].add(1)  # (C,): a small read
      missing = np.flatnonzero(np.asarray(counts) == 0)
    if missing.size:
      shown = ", ".join(map(str, missing[:10].tolist())) + (", ..." if missing.size > 10 else "")
      warnings.warn(
        f"the kernel calibrator's memory ({y.shape[0]} samples) holds no sample of "
        f"{missing.size} of the {net.num_classes} classes ({shown}): they get only the "
        f"floor probability (about {weight_floor:g} / the kernel weights' sum). Give it more "
        "memory (a larger val_fraction, or validation_data holding every class).",
        stacklevel=V.caller_stacklevel(),
      )
  # a KernelCalibrator's own memory is replaced: only the LoCal Net's fields are kept
  fields = {k.name: getattr(net, k.name) for k in dataclasses.fields(LocalNet)}
  return KernelCalibrator(
    **fields,
    memory_features=phi_ref,
    memory_labels=y.astype(jnp.int32),
    weight_floor=float(weight_floor),
  )


@V.outside_explicit_context
def fit_kcal(
  inputs: ArrayLike,
  labels: ArrayLike,
  *,
  features: ArrayLike | None = None,
  alignment_weight: float = 0.0,
  monitor: str = "ce",
  weight_floor: float = 1e-6,
  **local_net_options,
) -> KernelCalibrator:
  """Fits K-Cal as the LoCal Nets paper runs it (its KC baseline).

  The LoCal Net architecture trained with the alignment weight 0 (only the
  cross-entropy of the batch kernel estimate at ``phi'``, which pulls points
  of one class together), early stopping on the validation cross-entropy;
  predictions are the Nadaraya–Watson estimates of the validation split's
  labels at the refined features (:class:`KernelCalibrator`). The authors
  obtain KC by running their LoCal Net code with the alignment weight set to
  0; ``alignment_weight=1`` with ``monitor="alignment"`` trains a LoCal Net
  and predicts with its kernel (their KO).

  Args:
    inputs: ``(n, C)`` backbone logits.
    labels: ``(n,)`` integer labels.
    features: ``(n, D)`` backbone features; required.
    alignment_weight: weight of the alignment term (KC: 0).
    monitor: early-stopping quantity (KC: ``"ce"``).
    weight_floor: lower bound of each normalised kernel weight (authors: 1e-6).
    **local_net_options: any other option of :func:`fit_local_net`
      (``bandwidth``, ``pca_dim``, ``hidden``, ``epochs``, ``patience``,
      ``val_fraction``, ``validation_data``, ``seed``, ...). The memory is
      the validation split (``validation_data`` or the held-out
      ``val_fraction``; the training split when there is none).

  Returns:
    A fitted :class:`KernelCalibrator`.

  Raises:
    ValueError: as :func:`fit_local_net`, and ``weight_floor`` not a number
      in ``[0, 1)`` (checked before training).

  Example:
    >>> import jax, jax.numpy as jnp
    >>> from jaxcal._src.recal.base import fit
    >>> phi = jax.random.normal(jax.random.key(0), (300, 8))
    >>> y = (phi[:, 0] > 0).astype(jnp.int32)
    >>> logits = jnp.stack([-phi[:, 0], phi[:, 0]], 1)
    >>> kc = fit("kcal", logits, y, features=phi, pca_dim=4, epochs=2, verbose=False)
    >>> kc(logits, features=phi).shape, kc.memory_labels.shape
    ((300, 2), (30,))

  Reference: Barbera et al. (2025), arXiv:2510.26566, §8.1; Lin, Trivedi &
  Sun (2023), ICLR.
  """
  options = {
    k: v.default
    for k, v in inspect.signature(fit_local_net).parameters.items()
    if k not in ("inputs", "labels")
  }
  unknown = set(local_net_options) - set(options)
  if unknown:
    raise TypeError(f"fit_kcal() got unexpected keyword argument(s) {sorted(unknown)}")
  options.update(local_net_options)
  _check_weight_floor(weight_floor)  # before training, not after
  options.update(features=features, alignment_weight=alignment_weight, monitor=monitor)
  net, memory = _train(inputs, labels, **options, method="kcal")
  return kernel_calibrator(net, *memory, weight_floor=weight_floor)


# ``recalibrate.fit("kcal", ...)`` checks option names against both functions.
fit_kcal.forwards_options_to = fit_local_net
