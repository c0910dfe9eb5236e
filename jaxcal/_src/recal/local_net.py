"""LoCal Nets: local recalibration by feature reshaping (Barbera et al. 2025).

A LoCal Net takes the backbone features ``phi(x)`` (``(n, D)``), their PCA
``phi_PCA(x)`` (``(n, k)``, k = 50, fitted on the calibration split) and the
backbone logits ``g(x)``. A one-hidden-layer MLP (ReLU, dropout) on the
standardised ``phi(x)`` has two heads, refined features ``phi~`` (k) and
logits ``g~`` (C), combined residually

    phi' = phi~ + w_phi * phi_PCA + b_phi,      g' = g~ + w_g * g + b_g,

with scalars ``w`` initialised to 1 and ``b ~ N(0, 0.01)``. Training minimises
over batches

    (1/B) sum_i d_JS(softmax(g'_i), theta_i) + lambda * CE(y_i, theta_i),

where ``theta_i`` is the Nadaraya–Watson estimate of the batch's one-hot
labels at ``phi'_i`` (``j != i``, Gaussian kernel of bandwidth gamma). Two
alignment terms (``alignment=``):

* ``"paper"`` (default): the multiclass Jensen–Shannon distance
  ``sqrt(KL(P||M)/2 + KL(Q||M)/2)``, ``M = (P + Q)/2`` (natural log), with the
  argument floored at 1e-12 so the square root has a finite gradient;
* ``"authors"``: the authors' code, the mean over classes of
  ``sqrt(max(JSD(Bern(theta_c), Bern(p_c)), 1e-4))`` with both inputs clamped
  to ``[1e-4, 1 - 1e-4]``.

In both, the cross-entropy term acts on the kernel estimate ``theta`` (so it
shapes ``phi'`` only); ``g'`` learns through the alignment term. Inference
uses ``g'`` only: ``rc(logits, features=phi)``.

Training: Adam, batch 1024 (the last partial batch is padded and masked both
in the loss and as kernel neighbours), early stopping on a held-out 10 % of
the calibration split (the parameters of the epoch with the lowest
validation loss are kept), deterministic given ``seed``.
"""

from __future__ import annotations

import functools
import os
import pathlib
import time
from typing import ClassVar

import flax.serialization
import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.typing import ArrayLike

from jaxcal._src import validation as V
from jaxcal._src.local import nadaraya_watson
from jaxcal._src.numerics import PRECISION
from jaxcal._src.recal.base import Recalibrator, recalibrator_class, register, to_logits
from jaxcal._src.train.loop import _batches
from jaxcal._src.train.pca import PCA, fit_pca, pca_transform, standardize

__all__ = [
  "LocalNet",
  "LocalNetModule",
  "fit_local_net",
  "local_net_loss",
  "save_checkpoint",
  "load_checkpoint",
]

_ALIGNMENTS = ("paper", "authors")


class LocalNetModule(nnx.Module):
  """The two-head residual MLP (flax nnx)."""

  def __init__(
    self,
    in_dim: int,
    pca_dim: int,
    num_classes: int,
    hidden: int,
    dropout: float,
    *,
    rngs: nnx.Rngs,
  ):
    self.hidden = nnx.Linear(in_dim, hidden, rngs=rngs)
    self.dropout = nnx.Dropout(dropout)
    self.head_features = nnx.Linear(hidden, pca_dim, rngs=rngs)
    self.head_logits = nnx.Linear(hidden, num_classes, rngs=rngs)
    key = rngs.params()
    kf, kg = jax.random.split(key)
    self.w_phi = nnx.Param(jnp.ones(()))
    self.b_phi = nnx.Param(0.01 * jax.random.normal(kf, ()))
    self.w_g = nnx.Param(jnp.ones(()))
    self.b_g = nnx.Param(0.01 * jax.random.normal(kg, ()))

  def __call__(
    self, phi_std: jax.Array, phi_pca: jax.Array, logits: jax.Array, key: jax.Array | None = None
  ) -> tuple[jax.Array, jax.Array]:
    """``(phi', g')`` for standardised features, PCA features and logits."""
    h = jax.nn.relu(self.hidden(phi_std))
    if key is not None and self.dropout.rate > 0:
      h = self.dropout(h, deterministic=False, rngs=key)
    phi_ref = self.head_features(h) + self.w_phi[...] * phi_pca + self.b_phi[...]
    g_ref = self.head_logits(h) + self.w_g[...] * logits + self.b_g[...]
    return phi_ref, g_ref


def _abstract_module(in_dim, pca_dim, num_classes, hidden, dropout):
  return nnx.eval_shape(
    lambda: LocalNetModule(in_dim, pca_dim, num_classes, hidden, dropout, rngs=nnx.Rngs(0))
  )


def _module_from_params(params: dict, in_dim, pca_dim, num_classes, hidden, dropout):
  graphdef, state = nnx.split(_abstract_module(in_dim, pca_dim, num_classes, hidden, dropout))
  nnx.replace_by_pure_dict(state, params)
  return nnx.merge(graphdef, state)


# --------------------------------------------------------------------------
# The loss.
# --------------------------------------------------------------------------


def _xlogy_ratio(a, b):
  """``a * log(a / b)`` with ``0 log 0 = 0``."""
  safe_a = jnp.where(a > 0, a, 1.0)
  return jnp.where(a > 0, a * (jnp.log(safe_a) - jnp.log(jnp.maximum(b, 1e-30))), 0.0)


def js_distance(p: jax.Array, q: jax.Array) -> jax.Array:
  """Multiclass Jensen–Shannon distance per row (natural log), ``(n,)``."""
  m = 0.5 * (p + q)
  jsd = 0.5 * jnp.sum(_xlogy_ratio(p, m), -1) + 0.5 * jnp.sum(_xlogy_ratio(q, m), -1)
  return jnp.sqrt(jnp.maximum(jsd, 1e-12))


def js_distance_authors(p: jax.Array, q: jax.Array, eps: float = 1e-4) -> jax.Array:
  """Authors' variant: mean over classes of the Bernoulli JS distance, ``(n,)``."""
  p = jnp.clip(p, eps, 1 - eps)
  q = jnp.clip(q, eps, 1 - eps)
  m = 0.5 * (p + q)

  def kl(a, b):
    return a * jnp.log(a / b) + (1 - a) * jnp.log((1 - a) / (1 - b))

  jsd = 0.5 * kl(q, m) + 0.5 * kl(p, m)
  return jnp.mean(jnp.sqrt(jnp.maximum(jsd, eps)), axis=-1)


def local_net_loss(
  g_ref: jax.Array,
  phi_ref: jax.Array,
  labels: jax.Array,
  weights: jax.Array,
  *,
  bandwidth: float,
  lam: float,
  alignment: str,
) -> jax.Array:
  """LoCal Net loss on one (masked) batch.

  Args:
    g_ref: ``(B, C)`` refined logits ``g'``.
    phi_ref: ``(B, k)`` refined features ``phi'``.
    labels: ``(B,)`` integer labels.
    weights: ``(B,)`` 1 for real rows, 0 for padding (excluded from the mean
      and as kernel neighbours).
    bandwidth: kernel bandwidth gamma.
    lam: weight lambda of the cross-entropy term.
    alignment: ``"paper"`` or ``"authors"`` (see the module docstring).

  Returns:
    Scalar loss.
  """
  num_classes = g_ref.shape[-1]
  onehot = jax.nn.one_hot(labels, num_classes, dtype=phi_ref.dtype)
  theta = nadaraya_watson(phi_ref, onehot, bandwidth, include_self=False, mask=weights > 0)
  p = jax.nn.softmax(g_ref, axis=-1)
  align = js_distance(p, theta) if alignment == "paper" else js_distance_authors(p, theta)
  theta_y = jnp.sum(theta * onehot, axis=-1)
  ce = -jnp.log(jnp.maximum(theta_y, 1e-12))
  per = align + lam * ce
  return jnp.sum(per * weights) / jnp.maximum(jnp.sum(weights), 1.0)


# --------------------------------------------------------------------------
# The fitted recalibrator.
# --------------------------------------------------------------------------


@recalibrator_class
@flax.struct.dataclass
class LocalNet(Recalibrator):
  """A fitted LoCal Net (a pytree). ``rc(logits, features=phi) -> probs``.

  Attributes:
    params: nested dict of the MLP's parameters (``hidden``,
      ``head_features``, ``head_logits`` with ``kernel``/``bias``; scalars
      ``w_phi``, ``b_phi``, ``w_g``, ``b_g``).
    pca_mean, pca_scale, pca_components: the PCA (fitted on the calibration
      split) mapping ``(n, D)`` features to ``(n, k)``; ``pca_mean`` /
      ``pca_scale`` also standardise the MLP's input.
    feature_dim, pca_dim, num_classes, hidden, dropout, bandwidth: static.
    best_epoch: the epoch whose parameters were kept (static).
    history: ``(epochs_run, 3)`` array of ``(epoch, train loss, val loss)``.
  """

  method: ClassVar[str] = "local_net"
  params: dict
  pca_mean: jax.Array
  pca_scale: jax.Array
  pca_components: jax.Array
  feature_dim: int = flax.struct.field(pytree_node=False, default=0)
  pca_dim: int = flax.struct.field(pytree_node=False, default=50)
  num_classes: int = flax.struct.field(pytree_node=False, default=0)
  hidden: int = flax.struct.field(pytree_node=False, default=64)
  dropout: float = flax.struct.field(pytree_node=False, default=0.3)
  bandwidth: float = flax.struct.field(pytree_node=False, default=10.0)
  best_epoch: int = flax.struct.field(pytree_node=False, default=0)
  history: jax.Array | None = None

  @property
  def pca(self) -> PCA:
    return PCA(
      self.pca_mean,
      self.pca_scale,
      self.pca_components,
      jnp.zeros((self.pca_components.shape[1],), self.pca_components.dtype),
    )

  def module(self) -> LocalNetModule:
    return _module_from_params(
      self.params, self.feature_dim, self.pca_dim, self.num_classes, self.hidden, self.dropout
    )

  def _forward(self, logits: jax.Array, features: jax.Array) -> tuple[jax.Array, jax.Array]:
    f = features.astype(self.pca_mean.dtype)
    return self.module()(
      standardize(self.pca, f), pca_transform(self.pca, f), logits.astype(self.pca_mean.dtype)
    )

  def apply(self, inputs: jax.Array, features: jax.Array | None = None) -> jax.Array:
    if features is None:
      raise ValueError("a LoCal Net needs the backbone features: rc(logits, features=phi)")
    z = to_logits(inputs, self.from_logits)
    return jax.nn.softmax(self._forward(z, features)[1], axis=-1)

  def _check(self, inputs: ArrayLike, features: ArrayLike | None):
    x = V.check_logits(inputs, "inputs") if self.from_logits else V.check_probs(inputs, "inputs")
    if x.shape[1] != self.num_classes:
      raise ValueError(
        f"inputs have {x.shape[1]} classes but the LoCal Net was fitted with {self.num_classes}"
      )
    if features is None:
      raise ValueError("a LoCal Net needs the backbone features: rc(logits, features=phi)")
    f = V.check_features(features, x.shape[0])
    if f.shape[1] != self.feature_dim:
      raise ValueError(
        f"features have dimension {f.shape[1]} but the LoCal Net was fitted on "
        f"{self.feature_dim}-dimensional features"
      )
    return x, f

  def __call__(self, inputs: ArrayLike, features: ArrayLike | None = None) -> jax.Array:
    """Recalibrated ``(n, C)`` probabilities from logits ``(n, C)`` and features ``(n, D)``."""
    x, f = self._check(inputs, features)
    return _jit_apply(self, x, f)

  def logits(self, inputs: ArrayLike, features: ArrayLike) -> jax.Array:
    """Refined logits ``g'`` ``(n, C)``."""
    x, f = self._check(inputs, features)
    return _jit_forward(self, to_logits(x, self.from_logits), f)[1]

  def refined_features(self, inputs: ArrayLike, features: ArrayLike) -> jax.Array:
    """Refined features ``phi'`` ``(n, pca_dim)``."""
    x, f = self._check(inputs, features)
    return _jit_forward(self, to_logits(x, self.from_logits), f)[0]

  def pca_features(self, features: ArrayLike) -> jax.Array:
    """``phi_PCA`` ``(n, pca_dim)``: the calibration-split PCA of ``features``."""
    f = V.as_float(features, "features")
    if f.ndim != 2 or f.shape[1] != self.feature_dim:
      raise ValueError(f"features must have shape (n, {self.feature_dim}), got {tuple(f.shape)}")
    V.check_finite(f, "features")
    return pca_transform(self.pca, f.astype(self.pca_mean.dtype))


@jax.jit
def _jit_apply(rc: LocalNet, x, f):
  return rc.apply(x, f)


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
  tmp = path.with_suffix(path.suffix + ".tmp")
  tmp.write_bytes(blob)
  os.replace(tmp, path)


def load_checkpoint(path: str | os.PathLike) -> tuple[dict, dict]:
  """Reads a checkpoint written by :func:`save_checkpoint`: ``(params, meta)``."""
  d = flax.serialization.msgpack_restore(pathlib.Path(path).read_bytes())
  return jax.tree_util.tree_map(jnp.asarray, d["params"]), d.get("meta", {})


# --------------------------------------------------------------------------
# Training.
# --------------------------------------------------------------------------


@functools.partial(
  jax.jit, static_argnames=("graphdef", "tx", "batch_size", "bandwidth", "lam", "alignment")
)
def _train_epoch(
  graphdef, tx, params, opt_state, data, key, *, batch_size, bandwidth, lam, alignment
):
  phi_std, phi_pca, logits, y = data
  n = y.shape[0]
  k_perm, k_drop = jax.random.split(key)
  idx, w = _batches(k_perm, n, batch_size)

  def loss_fn(p, ib, wb, kb):
    model = nnx.merge(graphdef, p)
    phi_ref, g_ref = model(phi_std[ib], phi_pca[ib], logits[ib], key=kb)
    return local_net_loss(
      g_ref, phi_ref, y[ib], wb, bandwidth=bandwidth, lam=lam, alignment=alignment
    )

  def step(carry, inp):
    p, s = carry
    ib, wb, t = inp
    loss, g = jax.value_and_grad(loss_fn)(p, ib, wb, jax.random.fold_in(k_drop, t))
    upd, s = tx.update(g, s, p)
    return (optax.apply_updates(p, upd), s), loss * jnp.sum(wb)

  (params, opt_state), losses = jax.lax.scan(
    step, (params, opt_state), (idx, w, jnp.arange(idx.shape[0]))
  )
  return params, opt_state, jnp.sum(losses) / n


@functools.partial(
  jax.jit, static_argnames=("graphdef", "batch_size", "bandwidth", "lam", "alignment")
)
def _eval_loss(graphdef, params, data, *, batch_size, bandwidth, lam, alignment):
  """Loss on a fixed split, in fixed consecutive batches (deterministic, no dropout)."""
  phi_std, phi_pca, logits, y = data
  n = y.shape[0]
  nb = -(-n // batch_size)
  pad = nb * batch_size - n
  idx = jnp.concatenate([jnp.arange(n), jnp.zeros((pad,), jnp.int32)]).reshape(nb, batch_size)
  w = jnp.concatenate([jnp.ones((n,)), jnp.zeros((pad,))]).reshape(nb, batch_size)
  model = nnx.merge(graphdef, params)

  def one(ib, wb):
    phi_ref, g_ref = model(phi_std[ib], phi_pca[ib], logits[ib])
    return local_net_loss(
      g_ref, phi_ref, y[ib], wb, bandwidth=bandwidth, lam=lam, alignment=alignment
    ) * jnp.sum(wb)

  return jnp.sum(jax.lax.map(lambda a: one(*a), (idx, w))) / n


@functools.partial(jax.jit, static_argnames=("pca_dim", "hidden", "dropout"))
def _setup_jit(f, z, y, tr, va, key, *, pca_dim, hidden, dropout):
  """PCA, standardised/PCA features of both splits and the initial parameters,
  in one compiled call (eager setup would compile dozens of tiny kernels)."""
  f = f.astype(jnp.float32)
  z = z.astype(jnp.float32)
  pca = fit_pca(f, pca_dim)
  phi_std = standardize(pca, f)
  phi_pca = jnp.matmul(phi_std, pca.components, precision=PRECISION)
  take = lambda idx: (phi_std[idx], phi_pca[idx], z[idx], y[idx])
  module = LocalNetModule(
    f.shape[1],
    pca.components.shape[1],
    z.shape[1],
    hidden,
    dropout,
    rngs=nnx.Rngs(params=jax.random.fold_in(key, 0)),
  )
  return pca, take(tr), take(va), nnx.state(module, nnx.Param)


def _setup(f, z, y, tr, va, key, *, pca_dim, hidden, dropout):
  k = int(min(pca_dim, f.shape[0], f.shape[1]))
  graphdef, _ = nnx.split(_abstract_module(f.shape[1], k, z.shape[1], hidden, dropout), nnx.Param)
  return _setup_jit(f, z, y, tr, va, key, pca_dim=pca_dim, hidden=hidden, dropout=dropout), graphdef


def _split(n: int, val_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
  perm = np.random.default_rng(seed).permutation(n)
  k = int(round(val_fraction * n)) if val_fraction > 0 else 0
  return np.sort(perm[k:]), np.sort(perm[:k])


@register("local_net")
def fit_local_net(
  inputs: ArrayLike,
  labels: ArrayLike,
  *,
  features: ArrayLike,
  from_logits: bool = True,
  pca_dim: int = 50,
  hidden: int = 64,
  dropout: float = 0.3,
  bandwidth: float = 10.0,
  lam: float = 1.0,
  alignment: str = "paper",
  learning_rate: float = 1e-3,
  batch_size: int = 1024,
  epochs: int = 30,
  patience: int | None = 10,
  val_fraction: float = 0.1,
  validation_data: tuple | None = None,
  seed: int = 0,
  verbose: bool = True,
  checkpoint_dir: str | os.PathLike | None = None,
) -> LocalNet:
  """Fits a LoCal Net on a calibration split (Barbera et al. 2025).

  Args:
    inputs: ``(n, C)`` backbone logits (probabilities with ``from_logits=False``;
      their log is used as logits).
    labels: ``(n,)`` integer labels.
    features: ``(n, D)`` backbone features ``phi(x)`` (penultimate layer).
    from_logits: whether ``inputs`` are logits.
    pca_dim: PCA dimension k of ``phi_PCA`` and ``phi'`` (paper: 50; capped at
      ``min(D, n)``). The PCA (of standardised features) is fitted on all of
      ``features`` (plus the validation features, if given), i.e. on the
      whole calibration split.
    hidden: hidden units (paper: 64 / 128 / 256).
    dropout: dropout rate on the hidden layer (paper: 0.3 / 0.5).
    bandwidth: Gaussian kernel bandwidth gamma of the Nadaraya–Watson estimate
      (paper: 10).
    lam: weight lambda of the kernel cross-entropy term (paper: 1).
    alignment: ``"paper"`` (multiclass JS distance) or ``"authors"``
      (mean class-wise Bernoulli JS distance of the authors' code).
    learning_rate: Adam step size (paper: 1e-3).
    batch_size: batch size (paper: 1024); the kernel estimate uses the batch.
    epochs: maximum number of epochs (paper: 22-60).
    patience: stop after this many epochs without a lower validation loss
      (``None``: train all epochs); the best epoch's parameters are kept.
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
    A fitted :class:`LocalNet`; ``rc(logits, features=phi)`` gives probabilities.

  Raises:
    ValueError: bad logits/labels/features (NaN, shape), ``bandwidth <= 0``,
      unknown ``alignment``, or too few samples.

  Example:
    >>> import jax, jax.numpy as jnp
    >>> from jaxcal._src.recal.base import fit
    >>> k1, k2 = jax.random.split(jax.random.key(0))
    >>> phi = jax.random.normal(k1, (300, 8))
    >>> y = (phi[:, 0] > 0).astype(jnp.int32)
    >>> logits = jnp.stack([-phi[:, 0], phi[:, 0]], 1) * 3
    >>> rc = fit("local_net", logits, y, features=phi, pca_dim=4, epochs=2, verbose=False)
    >>> rc(logits, features=phi).shape
    (300, 2)

  Reference: Barbera, Perini, De Toni, Passerini & Pugnana (2025), arXiv:2510.26566, §7 (Eq. 9)
  and App. D.2.
  """
  x = V.check_logits(inputs, "inputs") if from_logits else V.check_probs(inputs, "inputs")
  n, num_classes = x.shape
  y = V.check_labels(labels, n, num_classes)
  f = V.check_features(features, n)
  try:
    bandwidth = float(bandwidth)
  except (TypeError, ValueError):
    raise ValueError(f"bandwidth must be a finite number > 0, got {bandwidth!r}") from None
  if not (np.isfinite(bandwidth) and bandwidth > 0):
    raise ValueError(f"bandwidth must be a finite number > 0, got {bandwidth!r}")
  if alignment not in _ALIGNMENTS:
    raise ValueError(f"alignment must be one of {_ALIGNMENTS}, got {alignment!r}")
  if not 0 <= val_fraction < 1:
    raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction!r}")
  for name, v in (
    ("pca_dim", pca_dim),
    ("hidden", hidden),
    ("batch_size", batch_size),
    ("epochs", epochs),
  ):
    if not isinstance(v, (int, np.integer)) or v < 1:
      raise ValueError(f"{name} must be a positive int, got {v!r}")
  if not 0 <= dropout < 1:
    raise ValueError(f"dropout must be in [0, 1), got {dropout!r}")
  if validation_data is not None:
    if len(validation_data) != 3:
      raise ValueError("validation_data must be (inputs, labels, features)")
    xv = (
      V.check_logits(validation_data[0], "validation inputs")
      if from_logits
      else V.check_probs(validation_data[0], "validation inputs")
    )
    if xv.shape[1] != num_classes:
      raise ValueError(f"validation inputs have {xv.shape[1]} classes, inputs {num_classes}")
    yv = V.check_labels(validation_data[1], xv.shape[0], num_classes, "validation labels")
    fv = V.check_features(validation_data[2], xv.shape[0], "validation features")
    if fv.shape[1] != f.shape[1]:
      raise ValueError(f"validation features have dimension {fv.shape[1]}, features {f.shape[1]}")
    tr = np.arange(n)
    va = np.arange(n, n + xv.shape[0])
    x = jnp.concatenate([x, xv.astype(x.dtype)])
    y = jnp.concatenate([y, yv.astype(y.dtype)])
    f_all = jnp.concatenate([f, fv.astype(f.dtype)])
  else:
    tr, va = _split(n, val_fraction, seed)
    f_all = f
  if tr.size < 2 or (val_fraction > 0 and va.size < 2):
    raise ValueError(f"too few samples ({n}) for a LoCal Net with val_fraction={val_fraction}")

  (pca, data_tr, data_va, params), graphdef = _setup(
    f_all,
    to_logits(x, from_logits),
    y,
    jnp.asarray(tr),
    jnp.asarray(va),
    jax.random.key(seed),
    pca_dim=int(pca_dim),
    hidden=int(hidden),
    dropout=float(dropout),
  )
  k = int(pca.components.shape[1])
  if not va.size:
    data_va = None
  k_train = jax.random.fold_in(jax.random.key(seed), 1)
  tx = optax.adam(learning_rate)
  opt_state = jax.jit(tx.init)(params)
  static = dict(
    batch_size=int(batch_size), bandwidth=float(bandwidth), lam=float(lam), alignment=alignment
  )
  best_params, best_val, best_epoch, stale = params, np.inf, 0, 0
  history = []
  t0 = time.perf_counter()
  for epoch in range(1, epochs + 1):
    params, opt_state, tr_loss = _train_epoch(
      graphdef, tx, params, opt_state, data_tr, jax.random.fold_in(k_train, epoch), **static
    )
    tr_loss = float(tr_loss)
    if data_va is not None:
      va_loss = float(_eval_loss(graphdef, params, data_va, **static))
    else:
      va_loss = tr_loss
    if not np.isfinite(tr_loss):
      raise FloatingPointError(
        f"LoCal Net loss is not finite at epoch {epoch} (try a larger bandwidth)"
      )
    history.append((epoch, tr_loss, va_loss))
    improved = va_loss < best_val or data_va is None
    if improved:
      best_params, best_val, best_epoch, stale = params, va_loss, epoch, 0
      if checkpoint_dir is not None:
        save_checkpoint(
          pathlib.Path(checkpoint_dir) / "local_net_best.msgpack",
          nnx.to_pure_dict(best_params),
          {"epoch": epoch, "val_loss": va_loss, "seed": seed},
        )
    else:
      stale += 1
    if verbose:
      bar = "#" * int(20 * epoch / epochs)
      print(
        f"local_net [{bar:<20}] epoch {epoch:3d}/{epochs}  train {tr_loss:.4f}  "
        f"val {va_loss:.4f}{' *' if improved else ''}  {time.perf_counter() - t0:.1f}s",
        flush=True,
      )
    if patience is not None and data_va is not None and stale >= patience:
      if verbose:
        print(f"local_net: early stop at epoch {epoch}; best epoch {best_epoch}", flush=True)
      break

  return LocalNet(
    params=nnx.to_pure_dict(best_params),
    pca_mean=pca.mean,
    pca_scale=pca.scale,
    pca_components=pca.components,
    feature_dim=int(f.shape[1]),
    pca_dim=k,
    num_classes=int(num_classes),
    hidden=int(hidden),
    dropout=float(dropout),
    bandwidth=float(bandwidth),
    best_epoch=int(best_epoch),
    history=jnp.asarray(np.asarray(history, np.float32)),
    from_logits=from_logits,
  )
