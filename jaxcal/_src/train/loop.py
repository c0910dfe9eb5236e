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
import math
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from jaxcal._src import validation as V

__all__ = [
  "TrainResult",
  "traced_adam",
  "train_classifier",
  "train_epoch",
  "evaluate",
  "predict",
  "to_float_images",
]


#: Adam's float options other than the learning rate: Python constants of the
#: compiled update, as in ``optax.adam`` (``inject_hyperparams`` would make
#: them float32 arrays, and ``1 - b1`` would round differently).
_ADAM_CONSTANTS = ("b1", "b2", "eps", "eps_root")


@functools.cache
def _injected_adam() -> optax.GradientTransformation:
  """Adam reading its learning rate from its state (one object, so one static argument)."""
  return optax.inject_hyperparams(optax.adam, static_args=_ADAM_CONSTANTS)(learning_rate=0.0)


@jax.jit
def _injected_adam_init(params, learning_rate):
  state = _injected_adam().init(params)
  rate = state.hyperparams["learning_rate"]
  hyperparams = {**state.hyperparams, "learning_rate": jnp.asarray(learning_rate, rate.dtype)}
  return state._replace(hyperparams=hyperparams)


def traced_adam(
  params: nnx.State, learning_rate: float
) -> tuple[optax.GradientTransformation, optax.OptState]:
  """Adam with the learning rate in its state: ``(tx, tx_state)`` for :func:`train_epoch`.

  ``tx`` is one object for every learning rate (the epoch's static
  argument), and the rate an array of ``tx_state``
  (``optax.inject_hyperparams``; ``b1``, ``b2``, ``eps`` stay Python
  constants): a fit with another learning rate reuses the compiled epoch,
  where ``optax.adam(learning_rate)`` (a static argument, compared by
  identity) compiled one per rate (2-5 s for a small LoCal Net on 2 CPU
  cores). The steps are those of ``optax.adam(learning_rate)``, bit for bit:
  the rate is held in the parameters' dtype, as ``optax.adam`` rounds its
  Python float into their products.

  Args:
    params: the trainable state (``nnx.split``'s), as ``tx.init`` takes it.
    learning_rate: the step size, a finite number ``>= 0`` (not checked).

  Returns:
    ``(tx, tx_state)``: the optimiser and its initial state, holding the rate.

  Example:
    >>> from flax import nnx
    >>> params = nnx.state(nnx.Linear(2, 1, rngs=nnx.Rngs(0)), nnx.Param)
    >>> tx, state = traced_adam(params, 1e-3)
    >>> tx is traced_adam(params, 0.5)[0], float(state.hyperparams["learning_rate"])
    (True, 0.0010000000474974513)
  """
  return _injected_adam(), _injected_adam_init(params, learning_rate)


def to_float_images(x: jax.Array) -> jax.Array:
  """uint8 images in [0, 255] -> float32 in [-0.5, 0.5] (the loop's input scaling).

  Other integer dtypes are accepted when their pixels lie in ``[0, 255]``;
  a pixel outside becomes NaN under a transformation (an eager call raises),
  never a value outside ``[-0.5, 0.5]``.

  ``x / 255 - 0.5``, elementwise.

  Args:
    x: integer images of any shape, pixels in ``[0, 255]``.

  Returns:
    float32 array of ``x``'s shape.

  Raises:
    ValueError: ``x`` is not an integer array (float images, already scaled,
      would be divided by 255 again; a dtype check, traceable), or, eagerly,
      holds pixels outside ``[0, 255]``.

  Example:
    >>> import jax.numpy as jnp
    >>> [round(v, 4) for v in to_float_images(jnp.array([0, 51, 255], jnp.uint8)).tolist()]
    [-0.5, -0.3, 0.5]
  """
  x = _integer_images(x, "x")
  out = x.astype(jnp.float32) / 255.0 - 0.5
  if x.dtype == np.uint8:
    return out
  return jnp.where((x >= 0) & (x <= 255), out, jnp.nan)


@jax.jit
def _pixel_range(x: jax.Array) -> jax.Array:
  return jnp.stack([jnp.min(x), jnp.max(x)])


def _integer_images(x, name: str):
  """``x`` as an array of integer pixels in ``[0, 255]`` (numpy stays on the host).

  The dtype is checked at trace time; the range of a concrete array that is
  not uint8 by its minimum and maximum (numpy on the host, one jitted
  reduction of two scalars for a JAX array).
  """
  if not isinstance(x, jax.Array | jax.core.Tracer):
    x = V.host_array(x, name)
  if x.dtype == np.bool_ or not jnp.issubdtype(x.dtype, jnp.integer):
    raise ValueError(
      f"{name} must hold integer pixel values in [0, 255] (uint8 images), got dtype {x.dtype}"
    )
  if x.dtype != np.uint8 and x.size and V.is_concrete(x):
    ends = (x.min(), x.max()) if isinstance(x, np.ndarray) else jax.device_get(_pixel_range(x))
    lo, hi = (int(v) for v in ends)
    if lo < 0 or hi > 255:
      raise ValueError(
        f"{name} must hold pixel values in [0, 255] (uint8 images), got values in [{lo}, {hi}]"
      )
  return x


def _image_batch(images):
  """``images`` as a batch ``(n, ...)`` of integer pixel images, ``n >= 1`` (dtype and shape)."""
  images = _integer_images(images, "images")
  if images.ndim < 2 or images.shape[0] == 0:
    raise ValueError(f"images must be (n, H, W) with n >= 1, got shape {tuple(images.shape)}")
  return images


def _check_model(model) -> None:
  if not isinstance(model, nnx.Module):
    raise TypeError(f"model must be a flax nnx.Module, got {type(model).__name__}")


def _check_loop(data, key, loss_fn, batch_size: int, keyed: bool) -> tuple:
  """Entry checks of :func:`train_epoch` / :func:`evaluate` (shapes only: traceable)."""
  if not isinstance(data, tuple) or not data:
    raise TypeError(f"data must be a non-empty tuple of arrays, got {type(data).__name__}")
  ns = [np.shape(a)[0] if np.ndim(a) else None for a in data]
  if ns[0] is None or ns[0] == 0 or any(n != ns[0] for n in ns):
    raise ValueError(
      "data must be a tuple of arrays with the same number n >= 1 of rows, got leading sizes "
      + str([None if n is None else int(n) for n in ns])
    )
  if keyed:
    V.check_key(key)
  if not callable(loss_fn):
    raise TypeError(f"loss_fn must be callable, got {type(loss_fn).__name__}")
  return V.check_int_option(batch_size, "batch_size", minimum=1)


class TrainResult(NamedTuple):
  """What :func:`train_classifier` returns.

  Attributes:
    model: the trained nnx model (a new module; the one passed in is not
      changed).
    train_loss: ``(epochs,)`` float64, the mean training cross-entropy of
      each epoch (over the epoch's mini-batches, so the parameters change
      while it is measured).
    seconds: wall time of the epochs, compilation included.
  """

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


#: ``loss_fn(model, batch, weights, key) -> (loss, terms)``: ``batch`` is a
#: tuple of ``(B, ...)`` arrays, ``weights`` ``(B,)`` is 1 for real rows and 0
#: for padding, ``key`` a dropout key (``None`` when evaluating); ``loss`` is
#: the scalar to minimise (a weighted mean over the batch) and ``terms`` a
#: ``(k,)`` vector of weighted means to report (``terms[0]`` usually the loss).
#: Given ``loss_params`` (a pytree of arrays: the loss's float options), the
#: loop calls ``loss_fn(model, batch, weights, key, loss_params)``.
#: Must be hashable (a module-level function or a frozen dataclass): it is a
#: static argument of the compiled epoch, so a float it holds compiles an
#: epoch per value, where one in ``loss_params`` is traced.
LossFn = Callable[..., tuple[jax.Array, jax.Array]]


def train_epoch(
  graphdef: nnx.GraphDef,
  tx: optax.GradientTransformation,
  params: nnx.State,
  opt_state: optax.OptState,
  data: tuple[jax.Array, ...],
  key: jax.Array,
  *,
  loss_fn: LossFn,
  batch_size: int,
  loss_params: Any = None,
  min_rows: int = 1,
) -> tuple[nnx.State, optax.OptState, jax.Array]:
  """One pass over ``data`` in shuffled mini-batches, one compiled ``lax.scan``.

  The batch order is a permutation drawn from ``key`` (a second key, split
  from it, seeds the dropout of each batch); the last, partial batch is
  padded and masked (``weights = 0``), so every sample counts once. Each
  batch ``b`` takes one optimiser step on ``loss_fn``'s first output, and the
  epoch reports ``terms = (1/n) sum_b B_b * terms_b`` with ``B_b`` the number
  of real rows of batch ``b``: the per-sample mean of ``loss_fn``'s terms,
  each batch measured with the parameters it started from.

  Args:
    graphdef: the model's graph definition, from ``nnx.split(model, ...)``
      (static: a new one compiles anew).
    tx: the optax optimiser (static; hashable, as optax's are, which
      compare by identity: a new ``optax.adam`` compiles a new epoch, and
      :func:`traced_adam` gives one object for every rate).
    params: the trainable state from the same ``nnx.split``.
    opt_state: ``tx.init(params)``, or the state a previous epoch returned.
    data: a tuple of arrays ``(n, ...)`` with the same number ``n >= 1`` of
      rows (e.g. ``(features, labels)``); batches index all of them alike.
    key: a JAX PRNG key for this epoch (e.g. ``fold_in(key, epoch)``).
    loss_fn: ``loss_fn(model, batch, weights, key) -> (loss, terms)`` (see
      ``LossFn`` in this module): ``loss`` the weighted mean over the batch
      to minimise, ``terms`` a ``(k,)`` vector of weighted means to report.
      Static, so hashable: a module-level function or a frozen dataclass.
    batch_size: rows per mini-batch, an int ``>= 1`` (static).
    loss_params: ``None`` (default), or a pytree of arrays passed to
      ``loss_fn`` as a fifth argument (traced: other values of the same
      shapes and dtypes reuse the compiled epoch).
    min_rows: a batch with fewer real rows takes no optimiser step (the
      parameters and the optimiser state stay as they were; its terms still
      count), an int ``>= 1`` (static, default 1: every batch steps). A loss
      that gives such a batch no target (LoCal Net's kernel estimate over
      the *other* rows of a batch, for a lone last row) has a zero gradient
      there, and Adam would still move the parameters along its momentum.

  Returns:
    ``(params, opt_state, terms)``: the updated state, the optimiser state
    and ``terms`` ``(k,)``, the per-sample means over the epoch of what
    ``loss_fn`` reports.

  Raises:
    TypeError: ``data`` not a non-empty tuple, ``loss_fn`` not callable.
    ValueError: arrays of ``data`` with different (or no) rows, a bad ``key``,
      ``batch_size`` or ``min_rows`` not an int ``>= 1``, ``min_rows`` above
      ``batch_size``.

  Example:
    >>> import jax, jax.numpy as jnp, optax
    >>> from flax import nnx
    >>> def squared_error(model, batch, weights, key):
    ...   x, y = batch
    ...   loss = jnp.sum(weights * (model(x)[:, 0] - y) ** 2) / jnp.sum(weights)
    ...   return loss, loss[None]
    >>> graphdef, params = nnx.split(nnx.Linear(1, 1, rngs=nnx.Rngs(0)), nnx.Param)
    >>> tx = optax.sgd(0.1)
    >>> x = jnp.linspace(-1.0, 1.0, 10)[:, None]
    >>> params, opt_state, terms = train_epoch(
    ...   graphdef, tx, params, tx.init(params), (x, 2 * x[:, 0]), jax.random.key(0),
    ...   loss_fn=squared_error, batch_size=4)
    >>> terms.shape
    (1,)
  """
  batch_size = _check_loop(data, key, loss_fn, batch_size, keyed=True)
  min_rows = V.check_int_option(min_rows, "min_rows", minimum=1)
  if min_rows > batch_size:  # no batch would step: a run that trained nothing, silently
    raise ValueError(
      f"min_rows must be <= batch_size ({batch_size}), got {min_rows}: no batch would take "
      "an optimiser step"
    )
  return _train_epoch(
    graphdef,
    tx,
    params,
    opt_state,
    data,
    key,
    loss_params,
    loss_fn=_with_params(loss_fn, loss_params),
    batch_size=batch_size,
    min_rows=min_rows,
  )


class _WithoutParams(NamedTuple):
  """A four-argument ``loss_fn`` called with ``loss_params`` (``None``) last; hashable as it is."""

  loss_fn: LossFn

  def __call__(self, model, batch, weights, key, loss_params):
    return self.loss_fn(model, batch, weights, key)


def _with_params(loss_fn: LossFn, loss_params: Any) -> LossFn:
  """``loss_fn`` as the compiled loops call it, with ``loss_params`` as a fifth argument."""
  return _WithoutParams(loss_fn) if loss_params is None else loss_fn


@functools.partial(jax.jit, static_argnames=("graphdef", "tx", "loss_fn", "batch_size", "min_rows"))
def _train_epoch(
  graphdef, tx, params, opt_state, data, key, loss_params, *, loss_fn, batch_size, min_rows
):
  n = data[0].shape[0]
  k_perm, k_drop = jax.random.split(key)
  idx, w = _batches(k_perm, n, batch_size)

  def step(carry, inp):
    p, s = carry
    ib, wb, t = inp
    batch = tuple(a[ib] for a in data)
    kb = jax.random.fold_in(k_drop, t)
    (_, terms), g = jax.value_and_grad(
      lambda q: loss_fn(nnx.merge(graphdef, q), batch, wb, kb, loss_params), has_aux=True
    )(p)
    upd, s_new = tx.update(g, s, p)
    p_new = optax.apply_updates(p, upd)
    if min_rows > 1:  # too few rows: no step (static: every batch steps by default)
      step_ok = jnp.sum(wb > 0) >= min_rows
      keep = lambda new, old: jax.tree.map(lambda a, b: jnp.where(step_ok, a, b), new, old)
      p_new, s_new = keep(p_new, p), keep(s_new, s)
    return (p_new, s_new), terms * jnp.sum(wb).astype(terms.dtype)

  (params, opt_state), terms = jax.lax.scan(
    step, (params, opt_state), (idx, w, jnp.arange(idx.shape[0]))
  )
  return params, opt_state, jnp.sum(terms, axis=0) / n


def evaluate(
  graphdef: nnx.GraphDef,
  params: nnx.State,
  data: tuple[jax.Array, ...],
  *,
  loss_fn: LossFn,
  batch_size: int,
  loss_params: Any = None,
) -> jax.Array:
  """Mean of ``loss_fn``'s reported terms over ``data``, without training.

  ``data`` is read in fixed consecutive batches (no shuffling) and
  ``loss_fn`` gets ``key=None`` (no dropout), so the result is deterministic:
  ``terms = (1/n) sum_b B_b * terms_b`` with ``B_b`` the number of real rows
  of batch ``b`` (the last, partial batch is padded and masked). For a loss
  of each row alone the batch size bounds the memory, not the result; a loss
  that couples the rows of a batch (the LoCal Net's kernel estimate over the
  batch's other rows) depends on which rows share a batch, so its caller
  orders ``data`` (a seeded permutation, not the file's order).

  Args:
    graphdef: the model's graph definition, from ``nnx.split`` (static).
    params: the model's state from the same ``nnx.split``.
    data: a tuple of arrays ``(n, ...)`` with the same number ``n >= 1`` of
      rows.
    loss_fn: as for :func:`train_epoch`; it is called with ``key=None``.
    batch_size: rows per batch, an int ``>= 1`` (static).
    loss_params: as for :func:`train_epoch` (traced).

  Returns:
    ``(k,)`` the per-sample means over ``data`` of what ``loss_fn`` reports.

  Raises:
    TypeError: ``data`` not a non-empty tuple, ``loss_fn`` not callable.
    ValueError: arrays of ``data`` with different (or no) rows,
      ``batch_size`` not an int ``>= 1``.

  Example:
    >>> import jax.numpy as jnp
    >>> from flax import nnx
    >>> def squared_error(model, batch, weights, key):
    ...   x, y = batch
    ...   loss = jnp.sum(weights * (model(x)[:, 0] - y) ** 2) / jnp.sum(weights)
    ...   return loss, loss[None]
    >>> model = nnx.Linear(1, 1, rngs=nnx.Rngs(0))
    >>> graphdef, params = nnx.split(model, nnx.Param)
    >>> x = jnp.linspace(-1.0, 1.0, 10)[:, None]
    >>> terms = evaluate(graphdef, params, (x, 2 * x[:, 0]), loss_fn=squared_error, batch_size=4)
    >>> mse = jnp.mean((model(x)[:, 0] - 2 * x[:, 0]) ** 2)
    >>> bool(jnp.allclose(terms[0], mse))
    True
  """
  batch_size = _check_loop(data, None, loss_fn, batch_size, keyed=False)
  return _evaluate(
    graphdef,
    params,
    data,
    loss_params,
    loss_fn=_with_params(loss_fn, loss_params),
    batch_size=batch_size,
  )


@functools.partial(jax.jit, static_argnames=("graphdef", "loss_fn", "batch_size"))
def _evaluate(graphdef, params, data, loss_params, *, loss_fn, batch_size):
  n = data[0].shape[0]
  nb = -(-n // batch_size)
  pad = nb * batch_size - n
  idx = jnp.concatenate([jnp.arange(n), jnp.zeros((pad,), jnp.int32)]).reshape(nb, batch_size)
  w = jnp.concatenate([jnp.ones((n,)), jnp.zeros((pad,))]).reshape(nb, batch_size)
  model = nnx.merge(graphdef, params)

  def one(ib, wb):
    return loss_fn(model, tuple(a[ib] for a in data), wb, None, loss_params)[1] * jnp.sum(wb)

  return jnp.sum(jax.lax.map(lambda a: one(*a), (idx, w)), axis=0) / n


def _classifier_loss(model, batch, weights, key):
  """Softmax cross-entropy of an image classifier (weighted batch mean)."""
  images, labels = batch
  logits = model(to_float_images(images), key=key)
  ce = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
  loss = jnp.sum(ce * weights) / jnp.maximum(jnp.sum(weights), 1.0)
  return loss, loss[None]


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

  Raises:
    TypeError: ``model`` not an nnx module, ``on_epoch`` not callable.
    ValueError: images not integer pixels of a shape the model takes, labels
      not ``(n,)`` integers in ``[0, C)``, an empty training set, or a bad
      option (``epochs`` an int ``>= 0``, ``batch_size`` ``>= 1`` whose
      batch holds at most 2^31 - 1 pixels, ``learning_rate`` a number ``>= 0``
      finite in float32, ``seed`` an int, ``verbose`` a bool).
    FloatingPointError: the training loss became non-finite (the model
      diverged: a smaller ``learning_rate``).

  Example:
    >>> import numpy as np
    >>> from jaxcal.train import make_model
    >>> rng = np.random.default_rng(0)
    >>> images = rng.integers(0, 256, (8, 28, 28), dtype=np.uint8)
    >>> labels = np.arange(8) % 2
    >>> result = train_classifier(make_model("mlp_s"), images, labels,
    ...                           epochs=1, batch_size=4, verbose=False)
    >>> result.train_loss.shape
    (1,)

  Reference: the setup (Adam on the categorical cross-entropy, dropout
  before the linear head) follows Barbera et al. (2025), "Multiclass Local
  Calibration with the Jensen-Shannon Distance", arXiv:2510.26566, App. D.1;
  per-epoch checkpoints (``on_epoch``) give the predictor traces of Lu, Wu,
  Hartline & Hu (2025), "Truthful Calibration Errors for Multi-Class
  Prediction", arXiv:2510.06388, §5.1 and App. F.
  """
  _check_model(model)
  epochs = V.check_int_option(epochs, "epochs", minimum=0)
  batch_size = V.check_int_option(batch_size, "batch_size", minimum=1)
  # the optimiser's float32: 1e300 is inf
  learning_rate = V.check_float_option(
    learning_rate, "learning_rate", minimum=0.0, dtype=jnp.float32
  )
  seed = V.check_seed(seed)
  verbose = V.check_flag(verbose, "verbose")
  if on_epoch is not None and not callable(on_epoch):
    raise TypeError(f"on_epoch must be callable or None, got {type(on_epoch).__name__}")
  images = _image_batch(images)
  per_sample = math.prod(images.shape[1:])
  V.check_entries(  # the padded batch: XLA's out-of-memory error before
    batch_size * per_sample,
    f"with batch_size = {batch_size}, a batch of {per_sample} pixels per image",
    f"pass batch_size <= {V.MAX_ENTRIES // per_sample} (n = {images.shape[0]} is one batch)",
  )
  # checked before nnx.split, which raises flax's own "non-exhaustive filters" error
  leaves = lambda state: len(jax.tree_util.tree_leaves(state))
  if leaves(nnx.state(model)) != leaves(nnx.state(model, nnx.Param)):
    raise ValueError("train_classifier supports models whose only state is nnx.Param")
  graphdef, params = nnx.split(model, nnx.Param)
  num_classes = _num_classes(graphdef, params, images)
  if np.ndim(labels) == 1 and np.shape(labels)[0] != images.shape[0]:
    raise ValueError(
      f"labels has {np.shape(labels)[0]} entries but images has n = {images.shape[0]} rows"
    )
  y = V.check_labels(labels, images.shape[0], num_classes)
  tx, opt_state = traced_adam(params, learning_rate)  # one compiled epoch for every rate
  x = jnp.asarray(images)
  key = V.seed_key(seed)
  losses = []
  t0 = time.perf_counter()
  for e in range(1, epochs + 1):
    params, opt_state, terms = train_epoch(
      graphdef,
      tx,
      params,
      opt_state,
      (x, y),
      jax.random.fold_in(key, e),
      loss_fn=_classifier_loss,
      batch_size=batch_size,
    )
    loss = float(terms[0])
    if not math.isfinite(loss):  # a NaN model was returned without a word
      raise FloatingPointError(
        f"train_classifier: the training loss is not finite at epoch {e} (try a smaller "
        f"learning_rate than {learning_rate:g})"
      )
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


@functools.partial(jax.jit, static_argnames="graphdef")
def _logits_of(graphdef, params, xb):
  return nnx.merge(graphdef, params)(to_float_images(xb))


def _num_classes(graphdef, params, images) -> int:
  """The model's class count ``C``, from its output shape on one image (no computation).

  Traced once per model and image shape (a new function per call traced anew each time).
  """
  try:
    out = _logits_of.eval_shape(
      graphdef, params, jax.ShapeDtypeStruct((1,) + tuple(images.shape[1:]), images.dtype)
    )
  except (TypeError, ValueError) as e:
    raise ValueError(
      f"the model does not take images of shape {tuple(images.shape[1:])}: {e}"
    ) from None
  if len(out.shape) != 2:
    raise ValueError(f"the model must return (n, C) logits, got shape {tuple(out.shape)}")
  return int(out.shape[1])


@functools.partial(jax.jit, static_argnames=("graphdef", "with_features"))
def _predict_block(graphdef, state, xb, *, with_features):
  model = nnx.merge(graphdef, state)
  x = to_float_images(xb)
  if not with_features:
    return model(x), None
  h = model.features(x)
  return model.logits_from_features(h), h


def _check_feature_methods(model) -> None:
  """Raises unless ``model`` has ``features`` and ``logits_from_features`` (as MLP and CNN do)."""
  missing = [
    m for m in ("features", "logits_from_features") if not callable(getattr(model, m, None))
  ]
  if missing:
    raise TypeError(
      f"with_features=True needs a model with the methods features(x) -> (n, D) and "
      f"logits_from_features(h) -> (n, C) (as jaxcal.train.MLP and CNN have); "
      f"{type(model).__name__} has no {' or '.join(missing)}. Pass with_features=False "
      "for the logits model(x) alone."
    )


def predict(
  model: nnx.Module, images: np.ndarray, *, batch_size: int = 2048, with_features: bool = False
) -> tuple[np.ndarray, np.ndarray | None]:
  """Logits (and penultimate features) of a classifier on uint8 images, in batches.

  The images are scaled by :func:`to_float_images` (``x / 255 - 0.5``) and
  the model runs without a dropout key: the logits are ``model(x)``; with
  ``with_features=True`` they are ``logits_from_features(h)`` with
  ``h = features(x)`` (the same function for :class:`MLP` and :class:`CNN`),
  and ``h`` comes back too. Batches of ``batch_size`` images are compiled
  once (the last is padded), and the results are gathered on the host as
  float32 numpy arrays.

  Any flax nnx module that maps float images ``(b, ...)`` to ``(b, C)``
  logits works; its whole state is used as it is (call ``model.eval()``
  first if it has batch-norm layers in training mode).

  Args:
    model: an nnx classifier, ``model(x) -> (b, C)`` logits; with
      ``with_features=True`` it must also have ``features(x) -> (b, D)`` and
      ``logits_from_features(h) -> (b, C)``, as :class:`MLP` and
      :class:`CNN` do.
    images: ``(n, ...)`` integer images with pixels in ``[0, 255]`` (e.g.
      ``(n, 28, 28)`` uint8), ``n >= 1``.
    batch_size: images per compiled batch, an int ``>= 1``.
    with_features: also return the penultimate features.

  Returns:
    ``(logits, features)``: ``logits`` ``(n, C)`` float32 and ``features``
    ``(n, D)`` float32, or ``None`` without ``with_features``.

  Raises:
    TypeError: ``model`` not an nnx module, or ``with_features=True`` and it
      lacks ``features`` / ``logits_from_features``.
    ValueError: ``images`` not integer pixels, empty, or of a shape the model
      does not take; the model's output not ``(b, C)``; ``batch_size`` not an
      int ``>= 1`` or ``with_features`` not a bool.

  Example:
    >>> import numpy as np
    >>> from jaxcal.train import make_model
    >>> images = np.zeros((3, 28, 28), np.uint8)
    >>> logits, feats = predict(make_model("mlp_s"), images, with_features=True)
    >>> logits.shape, feats.shape, logits.dtype
    ((3, 10), (3, 64), dtype('float32'))
  """
  _check_model(model)
  batch_size = V.check_int_option(batch_size, "batch_size", minimum=1)
  with_features = V.check_flag(with_features, "with_features")
  if with_features:
    _check_feature_methods(model)
  images = _image_batch(images)
  graphdef, state = nnx.split(model)
  _num_classes(graphdef, state, images)  # the image shape and (b, C) logits, before any work
  n = images.shape[0]
  outs_l, outs_h = [], []
  for s in range(0, n, batch_size):
    xb = images[s : s + batch_size]
    pad = batch_size - xb.shape[0] if n > batch_size else 0
    if pad:
      xb = np.concatenate([xb, np.zeros((pad,) + xb.shape[1:], xb.dtype)])
    lo, h = _predict_block(graphdef, state, jnp.asarray(xb), with_features=with_features)
    keep = xb.shape[0] - pad
    outs_l.append(np.asarray(lo[:keep], np.float32))
    if with_features:
      outs_h.append(np.asarray(h[:keep], np.float32))
  logits = np.concatenate(outs_l)
  return logits, (np.concatenate(outs_h) if with_features else None)
