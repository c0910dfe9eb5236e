"""A functional optax training loop for flax nnx classifiers (CPU friendly).

The model is split once into its graph definition and parameter state
(``nnx.split``); one epoch is a single jitted ``lax.scan`` over mini-batches,
so Python overhead is one call per epoch. Batches are drawn from a
per-epoch permutation (``jax.random.fold_in(key, epoch)``); the last, partial
batch is padded and masked, so every sample is seen once per epoch and the
result is a deterministic function of the seed.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

__all__ = ["TrainResult", "train_classifier", "predict", "to_float_images"]


def to_float_images(x: jax.Array) -> jax.Array:
  """uint8 images in [0, 255] -> float32 in [-0.5, 0.5] (the loop's input scaling)."""
  return x.astype(jnp.float32) / 255.0 - 0.5


class TrainResult(NamedTuple):
  model: nnx.Module
  train_loss: np.ndarray  # (epochs,) mean training cross-entropy per epoch
  seconds: float  # wall time of the epochs (compilation included)


def _batches(key: jax.Array, n: int, batch_size: int) -> tuple[jax.Array, jax.Array]:
  nb = -(-n // batch_size)
  perm = jax.random.permutation(key, n)
  pad = nb * batch_size - n
  idx = jnp.concatenate([perm, jnp.zeros((pad,), perm.dtype)]).reshape(nb, batch_size)
  w = jnp.concatenate([jnp.ones((n,)), jnp.zeros((pad,))]).reshape(nb, batch_size)
  return idx, w


@functools.partial(jax.jit, static_argnames=("graphdef", "tx", "batch_size"))
def _epoch(graphdef, tx, params, opt_state, x, y, key, *, batch_size):
  n = x.shape[0]
  k_perm, k_drop = jax.random.split(key)
  idx, w = _batches(k_perm, n, batch_size)

  def loss_fn(p, xb, yb, wb, kb):
    model = nnx.merge(graphdef, p)
    logits = model(to_float_images(xb), key=kb)
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, yb)
    return jnp.sum(ce * wb) / jnp.maximum(jnp.sum(wb), 1.0)

  def step(carry, inp):
    p, s = carry
    ib, wb, t = inp
    loss, g = jax.value_and_grad(loss_fn)(p, x[ib], y[ib], wb, jax.random.fold_in(k_drop, t))
    upd, s = tx.update(g, s, p)
    return (optax.apply_updates(p, upd), s), loss * jnp.sum(wb)

  (params, opt_state), losses = jax.lax.scan(
    step, (params, opt_state), (idx, w, jnp.arange(idx.shape[0]))
  )
  return params, opt_state, jnp.sum(losses) / n


def train_classifier(
  model: nnx.Module,
  images: np.ndarray,
  labels: np.ndarray,
  *,
  epochs: int,
  batch_size: int = 128,
  learning_rate: float = 1e-3,
  seed: int = 0,
  on_epoch: Callable[[int, nnx.Module, float], None] | None = None,
  verbose: bool = True,
) -> TrainResult:
  """Trains ``model`` with Adam on softmax cross-entropy.

  Args:
    model: an nnx classifier (``model(x, key=None) -> logits``).
    images: ``(n, 28, 28)`` uint8 images.
    labels: ``(n,)`` integer labels.
    epochs: number of passes.
    batch_size: mini-batch size.
    learning_rate: Adam step size.
    seed: batch order and dropout seed.
    on_epoch: called after every epoch with ``(epoch (1-based), model, mean
      train loss)`` -- e.g. to save a checkpoint's logits.
    verbose: print one progress line per epoch.

  Returns:
    :class:`TrainResult` (the trained model, per-epoch losses, seconds).
  """
  graphdef, params = nnx.split(model, nnx.Param)
  if nnx.state(model).flat_state() and len(nnx.state(model).flat_state()) != len(
    params.flat_state()
  ):
    raise ValueError("train_classifier supports models whose only state is nnx.Param")
  tx = optax.adam(learning_rate)
  opt_state = tx.init(params)
  x = jnp.asarray(images)
  y = jnp.asarray(labels, jnp.int32)
  key = jax.random.key(seed)
  losses = []
  t0 = time.perf_counter()
  for e in range(1, epochs + 1):
    params, opt_state, loss = _epoch(
      graphdef, tx, params, opt_state, x, y, jax.random.fold_in(key, e), batch_size=batch_size
    )
    loss = float(loss)
    losses.append(loss)
    model = nnx.merge(graphdef, params)
    if verbose:
      print(
        f"  epoch {e:3d}/{epochs}  train loss {loss:.4f}  ({time.perf_counter() - t0:.1f}s)",
        flush=True,
      )
    if on_epoch is not None:
      on_epoch(e, model, loss)
  return TrainResult(nnx.merge(graphdef, params), np.asarray(losses), time.perf_counter() - t0)


@functools.partial(jax.jit, static_argnames=("graphdef", "with_features"))
def _predict_block(graphdef, params, xb, *, with_features):
  model = nnx.merge(graphdef, params)
  h = model.features(to_float_images(xb))
  logits = model.logits_from_features(h)
  return (logits, h) if with_features else (logits, None)


def predict(
  model: nnx.Module, images: np.ndarray, *, batch_size: int = 2048, with_features: bool = False
) -> tuple[np.ndarray, np.ndarray | None]:
  """Logits ``(n, C)`` (and penultimate features ``(n, D)``) in float32, batched."""
  graphdef, params = nnx.split(model, nnx.Param)
  n = images.shape[0]
  outs_l, outs_h = [], []
  for s in range(0, n, batch_size):
    xb = images[s : s + batch_size]
    pad = batch_size - xb.shape[0] if n > batch_size else 0
    if pad:
      xb = np.concatenate([xb, np.zeros((pad,) + xb.shape[1:], xb.dtype)])
    lo, h = _predict_block(graphdef, params, jnp.asarray(xb), with_features=with_features)
    keep = xb.shape[0] - pad
    outs_l.append(np.asarray(lo[:keep], np.float32))
    if with_features:
      outs_h.append(np.asarray(h[:keep], np.float32))
  logits = np.concatenate(outs_l)
  return logits, (np.concatenate(outs_h) if with_features else None)
