"""Utility families as vmappable pytrees (Hegazy, Jordan & Dieuleveut 2025,
*Scalable Utility-Aware Multiclass Calibration*, arXiv:2510.25458, §3-4).

A utility ``u(p, e_j) in [-1, 1]`` is a :class:`Utility`: a static ``kind``
and an array ``params``. A *batch* of utilities is the same pytree with a
leading axis on ``params`` (batches are homogeneous in kind), so ``jax.vmap``
over utilities is ``jax.vmap(f, in_axes=(None, None, 0))``.

Five kinds cover every family of the paper:

=============  ===============  ===============================================
kind           params           ``ū(p)_j = u(p, e_j)``
=============  ===============  ===============================================
``top_class``  ``(0,)``         ``1[j = argmax p]``  (U_TCE)
``linear``     ``a: (C,)``      ``a_j``  (U_lin; U_CWE is ``a = e_c``)
``rank``       ``θ: (C,)``      ``θ_{rank(p, j)}``  (U_rank, U_topK, U_dcg)
``decision``   ``l: (C, K)``    ``-l(j, a*(p))``, ``a* = argmin_a Σ_y p_y l(y, a)``
                                (U_dec,K; gain matrices are ``l = -R``)
``similarity`` ``S: (C, C)``    ``Σ_i p_i S_ij``
=============  ===============  ===============================================

Ranks are 1-based (rank 1 = largest ``p``) with ties broken toward the lowest
class index, as ``argmax`` does, so ``top_class`` equals
``rank`` with ``θ = e_1``. ``argmin``/``argmax`` over actions also break ties
toward the lowest index.

For the sweep, each kind splits into :func:`prepare` (work that depends only
on ``(probs, labels)``: sorted probabilities, label ranks; done once) and
:func:`predicted_realized` (per utility: predicted ``v_u(p_i) = <p_i, ū(p_i)>``
and realised ``u(p_i, y_i)``), which for linear and rank utilities is one
matrix-vector product and one gather.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcal._src import validation as V
from jaxcal._src.numerics import PRECISION, lift
from jaxcal._src.sorting import float_to_key, sort_descending, stable_argsort

__all__ = [
  "Utility",
  "KINDS",
  "top_class",
  "classwise",
  "linear",
  "rank",
  "top_k",
  "dcg",
  "decision",
  "gain_matrix",
  "similarity",
  "sample_linear",
  "sample_rank",
  "sample_decision",
  "sample_aligned_gain",
  "sample_misaligned_gain",
  "check_utility",
  "prepare",
  "predicted_realized",
  "utility_values",
  "ranks",
]

#: Number of trailing (non-batch) axes of ``params`` for each kind.
KINDS = {"top_class": 1, "linear": 1, "rank": 1, "decision": 2, "similarity": 2}


@functools.partial(jax.tree_util.register_dataclass, data_fields=["params"], meta_fields=["kind"])
@dataclasses.dataclass(frozen=True)
class Utility:
  """A utility (or a batch of utilities of one kind), as a pytree.

  Attributes:
    params: the parameter array (see the module table); a batch has extra
      leading axes. Its values are checked where the utility is used
      (:func:`check_utility`).
    kind: static kind name, one of :data:`KINDS`.

  Parameters given as a (nested) list or tuple are read as the array they
  spell, as :meth:`values` and :func:`jaxcal.utility.uc` read them:
  ``batch_shape``, ``len()`` and indexing work on them too.

  Raises:
    ValueError: ``kind`` is not one of :data:`KINDS` (at construction);
      ``batch_shape``, ``len()`` or indexing of list/tuple parameters that
      do not spell an array (ragged, non-numeric).

  Example:
    >>> import jax.numpy as jnp
    >>> Utility(jnp.array([1.0, 0.0]), "linear").batch_shape
    ()
    >>> Utility(jnp.zeros(2), "bogus")
    Traceback (most recent call last):
    ...
    ValueError: unknown utility kind 'bogus'; expected one of [...]
  """

  params: jax.Array
  kind: str = "linear"

  def __post_init__(self) -> None:
    # kind is static metadata (it picks the code path), so a typo is caught
    # here; params may be any pytree leaf (JAX rebuilds the dataclass with
    # tracers or sentinels), so they are checked by :func:`check_utility`.
    if not isinstance(self.kind, str) or self.kind not in KINDS:
      raise ValueError(f"unknown utility kind {self.kind!r}; expected one of {sorted(KINDS)}")

  @property
  def batch_shape(self) -> tuple[int, ...]:
    """Leading axes of ``params`` beyond the kind's own (``()`` for one utility).

    List or tuple parameters are read as the array they spell (on the host):
    ``Utility([[0.1] * 5] * 3).batch_shape`` is ``(3,)`` (it raised
    ``AttributeError``).
    """
    prm = self.params
    shape = tuple(prm.shape if hasattr(prm, "shape") else V.host_array(prm, "utility.params").shape)
    return shape[: max(len(shape) - KINDS[self.kind], 0)]

  def __len__(self) -> int:
    if not self.batch_shape:
      raise TypeError("len() of a single utility; only batches have a length")
    return self.batch_shape[0]

  def __getitem__(self, idx: Any) -> Utility:
    """Indexes a batch: ``batch[i]`` is one utility, ``batch[a:b]`` a sub-batch.

    An integer (or a concrete integer array of any rank: numpy, a JAX
    scalar) outside ``[-len, len)`` raises ``IndexError``: JAX would clamp it
    to the last or first utility, a plausible wrong one. A concrete tuple
    index reaches past the batch axis (``u[1, 4]`` is entry 4 of ``u[1]``)
    and is checked against the whole parameter shape as numpy checks it
    (``u[:, 7]`` of 4 classes picked class 3). A traced index is JAX's to
    clamp.
    """
    if not self.batch_shape:
      raise TypeError("indexing a single utility; only batches can be indexed")
    ints = idx if isinstance(idx, int | np.integer) else None
    skip = slice | bool | tuple | jax.core.Tracer
    if ints is None and not isinstance(idx, skip) and idx is not None:
      a = np.asarray(idx)
      if a.dtype.kind in "iu":  # jnp.int32(7), np.array(7), np.array([[0, 5]]) were clamped
        ints = a
    if ints is not None and np.size(ints):
      n = len(self)
      lo, hi = int(np.min(ints)), int(np.max(ints))
      if lo < -n or hi >= n:
        raise IndexError(
          f"utility index {lo if lo < -n else hi} is out of range for a batch of {n}"
        )
    if isinstance(idx, tuple) and not any(_traced_part(i) for i in idx):
      shape = _shape_of(self.params, "utility.params")
      try:  # numpy's bounds check on a view of no memory (slices stay views)
        np.broadcast_to(np.False_, shape)[
          tuple(np.asarray(i) if isinstance(i, jax.Array) else i for i in idx)
        ]
      except IndexError as e:
        if "out of bounds" in str(e):  # other index errors are JAX's to word (TypeError...)
          raise IndexError(
            f"utility index {idx!r} does not fit the parameters of shape {shape}: {e}"
          ) from None
      except (TypeError, ValueError):
        pass
    prm = self.params
    if _is_sequence(prm):  # as uc() reads them: a float array
      prm = V.as_float(prm, "utility.params")
    return Utility(prm[idx], self.kind)

  def __iter__(self) -> Iterator[Utility]:
    """The utilities of a batch, in order (``len(batch)`` of them)."""
    return (self[i] for i in range(len(self)))

  def values(self, probs: ArrayLike) -> jax.Array:
    """``ū(p_i) = (u(p_i, e_j))_j`` for each row: ``(n, C)`` (single utility).

    ``probs`` and the utility are checked as :func:`jaxcal.utility.uc`
    checks them: a batch of utilities, another ``C`` or values outside
    ``[-1, 1]`` raise a ``ValueError`` (under a transformation bad rows or
    parameters give NaN).

    Args:
      probs: ``(n, C)`` probabilities.

    Returns:
      ``(n, C)`` utilities ``u(p_i, e_j)`` of each row against each outcome.
    """
    p = V.check_probs(probs, rows=True)
    return utility_values(check_utility(self, p.shape[1], batched=False), p)


def _traced_part(i: Any) -> bool:
  """A part of a tuple index that is traced, or a slice with a traced bound."""
  if isinstance(i, slice):
    return any(isinstance(b, jax.core.Tracer) for b in (i.start, i.stop, i.step))
  return isinstance(i, jax.core.Tracer)


def _is_sequence(prm: Any) -> bool:
  """Parameters given as a Python list or tuple (not yet an array)."""
  return isinstance(prm, list | tuple)


def _shape_of(x: Any, name: str) -> tuple[int, ...]:
  """The shape of an argument (an array, a tracer, or what ``np.asarray`` makes of it)."""
  if isinstance(x, jax.Array | jax.core.Tracer | np.ndarray):
    return tuple(x.shape)
  return tuple(V.host_array(x, name).shape)


def _check_size(shape: tuple[int, ...], axes: str, fix: str) -> None:
  """Refuses parameters of ``shape`` above :data:`~jaxcal._src.validation.MAX_ENTRIES`
  entries before they are drawn or built (:func:`~jaxcal._src.validation.check_entries`)."""
  V.check_entries(math.prod(shape), f"the utility parameters {axes} = {tuple(shape)}", fix)


#: Most coordinates the ∞-sphere sampler draws per utility: one of its ``2 dim``
#: faces is an int32 (``2 dim`` above 2^31 - 1 raised a raw ``OverflowError``).
_MAX_SPHERE_DIM = (V.MAX_ENTRIES - 1) // 2


def _check_sphere_dim(dim: int, what: str) -> None:
  if dim > _MAX_SPHERE_DIM:
    raise ValueError(
      f"{what} = {dim:,} is above {_MAX_SPHERE_DIM:,}: the sampler numbers the 2·{what} faces "
      f"of the ∞-sphere in int32; pass fewer classes"
    )


# --------------------------------------------------------------------------
# Constructors
# --------------------------------------------------------------------------


def top_class() -> Utility:
  """The top-class utility ``u(p, e_j) = 1[j = argmax p]`` (U_TCE).

  Its predicted utility is the top confidence ``max p`` and its realised
  utility the top-label hit ``1[y = argmax p]``.

  Returns:
    The single :class:`Utility` of kind ``"top_class"`` (no parameters).

  Example:
    >>> import jax.numpy as jnp
    >>> top_class().values(jnp.array([[0.2, 0.5, 0.3]])).tolist()
    [[0.0, 1.0, 0.0]]

  Reference: Hegazy, Jordan & Dieuleveut (2025), *Scalable Utility-Aware
  Multiclass Calibration*, arXiv:2510.25458, Example 3.4.
  """
  return Utility(jnp.zeros((0,), jnp.float32), "top_class")


def linear(a: ArrayLike) -> Utility:
  """Linear utility ``u(p, e_j) = a_j`` with payoff ``a in [-1, 1]^C`` (U_lin).

  Args:
    a: ``(C,)`` payoff vector, or ``(..., C)`` for a batch.

  Returns:
    A :class:`Utility` of kind ``"linear"`` (a batch when the
    parameters have leading axes).

  Example:
    >>> import jax.numpy as jnp
    >>> linear(jnp.array([1.0, -0.5])).values(jnp.array([[0.3, 0.7]])).tolist()
    [[1.0, -0.5]]

  Reference: Hegazy, Jordan & Dieuleveut (2025), *Scalable Utility-Aware
  Multiclass Calibration*, arXiv:2510.25458, Example 3.5.
  """
  u = Utility(V.as_float(a, "a"), "linear")
  u = _check_params(u)
  return u


def classwise(c: ArrayLike, num_classes: int) -> Utility:
  """Class-wise utility ``u(p, e_j) = 1[j = c]`` (U_CWE), a linear utility ``a = e_c``.

  Args:
    c: class index, or an int array of indices (a batch).
    num_classes: ``C`` (static).

  Returns:
    A :class:`Utility` of kind ``"linear"`` (a batch when the
    parameters have leading axes).

  Raises:
    ValueError: ``num_classes`` not an int ``>= 1``, ``c`` not integral or
      outside ``[0, C)``, or parameters ``c.shape + (C,)`` of more than
      ``2^31 - 1`` entries (refused before they are built).

  Example:
    >>> classwise(1, 3).params.tolist()
    [0.0, 1.0, 0.0]
    >>> classwise([0, 2], 3).params.shape
    (2, 3)

  Reference: Hegazy, Jordan & Dieuleveut (2025), *Scalable Utility-Aware
  Multiclass Calibration*, arXiv:2510.25458, Example 3.4.
  """
  num_classes = V.check_int(num_classes, "num_classes", 1)
  _check_size(
    _shape_of(c, "class index c") + (num_classes,),
    "c.shape + (C,)",
    "pass fewer class indices c or a smaller num_classes",
  )
  c, ok = _int_params(c, "class index c", 0, num_classes - 1)
  return Utility(_fold_int(jax.nn.one_hot(c, num_classes, dtype=jnp.float32), ok), "linear")


def rank(theta: ArrayLike) -> Utility:
  """Rank-based utility ``u(p, e_j) = θ_{rank(p, j)}`` (U_rank).

  ``rank(p, j)`` is 1-based (1 for the largest ``p_j``); tied probabilities
  take consecutive ranks in class order, the lowest class first (as
  ``argmax``). The paper's Example 3.6 writes ``rank(p, j) = Σ_i 1{p_j <=
  p_i}``, which gives tied classes all the worst of their ranks, and allows
  ties "broken arbitrarily/randomly": this is one such rule. It matters only
  on outputs with many ties (normalised isotonic recalibration of CIFAR-100
  ResNet-110: ``U_topK`` 0.05991 here and with random tie-breaks, 0.05977 by
  the formula). So a label tied with another
  class can score otherwise than that class would: on the row ``(1, 0, 0)``
  ``top_k(2, 3)`` gives label 1 the utility 1 and label 2 the utility 0.

  Args:
    theta: ``(C,)`` valuation of ranks 1..C (``theta[0]`` for the top class),
      in ``[-1, 1]``; ``(..., C)`` for a batch.

  Returns:
    A :class:`Utility` of kind ``"rank"`` (a batch when the
    parameters have leading axes).

  Example:
    >>> import jax.numpy as jnp
    >>> rank(jnp.array([1.0, 0.5, 0.0])).values(jnp.array([[0.2, 0.5, 0.3]])).tolist()
    [[0.0, 1.0, 0.5]]

  Reference: Hegazy, Jordan & Dieuleveut (2025), *Scalable Utility-Aware
  Multiclass Calibration*, arXiv:2510.25458, Example 3.6.
  """
  u = Utility(V.as_float(theta, "theta"), "rank")
  u = _check_params(u)
  return u


def top_k(k: ArrayLike, num_classes: int) -> Utility:
  """Top-K utility ``u(p, e_j) = 1[rank(p, j) <= K]`` (U_topK), ``θ_r = 1[r <= K]``.

  Ranks as in :func:`rank` (ties to the lowest class first).

  Args:
    k: ``K`` in ``1..C``, or an int array of them (a batch).
    num_classes: ``C`` (static).

  Returns:
    A :class:`Utility` of kind ``"rank"`` (a batch when the
    parameters have leading axes).

  Raises:
    ValueError: ``num_classes`` not an int ``>= 1``, ``k`` not integral or
      outside ``[1, C]``, or parameters ``k.shape + (C,)`` of more than
      ``2^31 - 1`` entries (refused before they are built).

  Example:
    >>> top_k(2, 4).params.tolist()
    [1.0, 1.0, 0.0, 0.0]

  Reference: Hegazy, Jordan & Dieuleveut (2025), *Scalable Utility-Aware
  Multiclass Calibration*, arXiv:2510.25458, Example 3.6.
  """
  num_classes = V.check_int(num_classes, "num_classes", 1)
  _check_size(
    _shape_of(k, "K") + (num_classes,),
    "k.shape + (C,)",
    "pass fewer K values or a smaller num_classes",
  )
  k, ok = _int_params(k, "K", 1, num_classes)
  r = jnp.arange(1, num_classes + 1)
  return Utility(_fold_int((lift(r, k.ndim + 1) <= k[..., None]).astype(jnp.float32), ok), "rank")


def dcg(gamma: ArrayLike, num_classes: int) -> Utility:
  """Discounted-cumulative-gain utility ``θ_r = (log2(1 + r))^(-γ)`` (U_dcg).

  Ranks as in :func:`rank` (ties to the lowest class first).

  Args:
    gamma: ``γ >= 0``, or an array of them (a batch); the paper's grid is
      ``(0.5, 0.75, 1, 1.25, 1.5, 2)``.
    num_classes: ``C`` (static).

  Returns:
    A :class:`Utility` of kind ``"rank"`` (a batch when the
    parameters have leading axes).

  Raises:
    ValueError: ``num_classes`` not an int ``>= 1``, ``gamma`` negative or
      not finite, or parameters ``gamma.shape + (C,)`` of more than
      ``2^31 - 1`` entries (refused before they are built).

  Example:
    >>> [round(t, 4) for t in dcg(1.0, 3).params.tolist()]
    [1.0, 0.6309, 0.5]

  Reference: Hegazy, Jordan & Dieuleveut (2025), *Scalable Utility-Aware
  Multiclass Calibration*, arXiv:2510.25458, App. C.3 (DCG).
  """
  num_classes = V.check_int(num_classes, "num_classes", 1)
  g = V.check_values(gamma, "gamma", bounds=(0.0, float("inf")), tol=0.0)
  _check_size(
    tuple(g.shape) + (num_classes,),
    "gamma.shape + (C,)",
    "pass fewer gamma values or a smaller num_classes",
  )
  r = jnp.arange(1, num_classes + 1, dtype=g.dtype)
  return Utility(lift(jnp.log2(1.0 + r), g.ndim + 1) ** (-g[..., None]), "rank")


def decision(loss_matrix: ArrayLike) -> Utility:
  """Decision utility of a K-action loss ``l in [-1, 1]^{C×K}`` (U_dec,K).

  ``a*(p) = argmin_a Σ_y p_y l(y, a)`` (ties toward the lowest action) and
  ``u(p, y) = -l(y, a*(p))``.

  Args:
    loss_matrix: ``(C, K)`` losses ``l(y, a)``; ``(..., C, K)`` for a batch.

  Returns:
    A :class:`Utility` of kind ``"decision"`` (a batch when the
    parameters have leading axes).

  Example:
    >>> import jax.numpy as jnp
    >>> l = jnp.array([[0.0, 1.0], [1.0, 0.0]])  # 0-1 loss, 2 actions
    >>> decision(l).values(jnp.array([[0.3, 0.7]])).tolist()
    [[-1.0, -0.0]]

  Reference: Hegazy, Jordan & Dieuleveut (2025), *Scalable Utility-Aware
  Multiclass Calibration*, arXiv:2510.25458, Example 3.7.
  """
  l = V.as_float(loss_matrix, "loss_matrix")
  if l.ndim < 2:
    raise ValueError(f"loss_matrix must have shape (C, K), got shape {tuple(l.shape)}")
  u = Utility(l, "decision")
  u = _check_params(u)
  return u


def gain_matrix(R: ArrayLike) -> Utility:
  """Gain-matrix utility: ``j*(p) = argmax_j Σ_i p_i R_ij``, ``u(p, e_i) = R_{i, j*(p)}``.

  A decision utility with ``C`` actions and loss ``l = -R``.

  Args:
    R: ``(C, C)`` gains in ``[0, 1]`` (``R_ii = 1`` in the paper; any values
      in ``[-1, 1]`` are accepted); ``(..., C, C)`` for a batch.

  Returns:
    A :class:`Utility` of kind ``"decision"`` with loss matrix ``-R`` (a batch
    when ``R`` has leading axes).

  Example:
    >>> import jax.numpy as jnp
    >>> R = jnp.array([[1.0, 0.5], [0.0, 1.0]])
    >>> gain_matrix(R).values(jnp.array([[0.6, 0.4]])).tolist()  # j* = 1
    [[0.5, 1.0]]

  Reference: Hegazy, Jordan & Dieuleveut (2025), *Scalable Utility-Aware
  Multiclass Calibration*, arXiv:2510.25458, App. C.2.
  """
  R = V.as_float(R, "R")
  if R.ndim < 2 or R.shape[-1] != R.shape[-2]:
    raise ValueError(f"R must be square (C, C), got shape {tuple(R.shape)}")
  if R.size:  # named as the caller's R, not as the loss -R of the decision utility
    R = V.check_values(R, "R (gains)", bounds=(-1.0, 1.0), tol=_UTILITY_ATOL)
  return decision(-R)


def similarity(S: ArrayLike) -> Utility:
  """Expected-similarity utility ``u(p, e_j) = Σ_i p_i S_ij`` (U_w2v).

  Args:
    S: ``(C, C)`` similarities in ``[-1, 1]`` (``S_ii = 1`` in the paper);
      ``(..., C, C)`` for a batch.

  Returns:
    A :class:`Utility` of kind ``"similarity"`` (a batch when the
    parameters have leading axes).

  Example:
    >>> import jax.numpy as jnp
    >>> S = jnp.array([[1.0, 0.5], [0.5, 1.0]])
    >>> similarity(S).values(jnp.array([[1.0, 0.0]])).tolist()
    [[1.0, 0.5]]

  Reference: Hegazy, Jordan & Dieuleveut (2025), *Scalable Utility-Aware
  Multiclass Calibration*, arXiv:2510.25458, App. C.3.
  """
  S = V.as_float(S, "S")
  if S.ndim < 2 or S.shape[-1] != S.shape[-2]:
    raise ValueError(f"S must be square (C, C), got shape {tuple(S.shape)}")
  u = Utility(S, "similarity")
  u = _check_params(u)
  return u


# --------------------------------------------------------------------------
# Samplers
# --------------------------------------------------------------------------


@functools.partial(jax.jit, static_argnums=(1, 2))
def _sphere_faces(key: jax.Array, shape: tuple[int, ...], dim: int) -> jax.Array:
  """Uniform on ``{x in R^dim : ||x||_inf = 1}``: a uniform face, uniform on it.

  One program for every sampler of a shape (the rank sampler sorts its draws
  in a program of its own): the threefry draws are most of a sampler's first
  call (1.3-1.4 s each on 2 cores).
  """
  kf, ku = jax.random.split(key)
  # one of the 2·dim faces; int32 (the default int64 under x64 drew other faces)
  r = jax.random.randint(kf, shape, 0, 2 * dim, jnp.int32)
  face, sign = r % dim, jnp.where(r >= dim, 1.0, -1.0)
  x = jax.random.uniform(ku, shape + (dim,), jnp.float32, -1.0, 1.0)
  return jnp.where(jax.nn.one_hot(face, dim, dtype=bool), sign[..., None], x)


_rows_descending = jax.jit(functools.partial(sort_descending, axis=-1))


def _sampler_args(key: Any, m: Any, num_classes: Any) -> tuple[jax.Array, int, int]:
  """Validates a sampler's ``(key, m, num_classes)``: a PRNG key, ``m >= 1``, ``C >= 2``."""
  return V.check_key(key), V.check_int(m, "m", 1), V.check_int(num_classes, "num_classes", 2)


def _sampler_size(shape: tuple[int, ...], axes: str, sizes: str = "m or num_classes") -> None:
  """Refuses a sampler's parameters ``shape`` above ``2^31 - 1`` entries (before drawing)."""
  _check_size(shape, axes, f"pass a smaller {sizes} (draw many utilities in several batches)")


def _unit_interval(value: Any, name: str) -> float:
  """A number in ``[0, 1]`` (a Python or numpy number, or a 0-d array), named when it is not."""
  v = V.check_float_option(value, name, minimum=0.0)
  if v > 1.0:
    raise ValueError(f"{name} must lie in [0, 1], got {value!r}")
  return v


def _int_params(x: Any, name: str, lo: int, hi: int) -> tuple[jax.Array, jax.Array | None]:
  """Integer utility parameters in ``[lo, hi]`` (a scalar or a batch) and their traced flag.

  Concrete values out of range raise; traced ones give an elementwise
  ``ok`` flag (``None`` when concrete) that the caller folds into the
  parameters (:func:`_fold_int`): NaN, never a plausible utility.
  """
  a = x if isinstance(x, jax.Array | jax.core.Tracer) else V.host_array(x, name)
  if not (jnp.issubdtype(a.dtype, jnp.integer) and a.dtype != jnp.bool_):
    raise ValueError(f"{name} must be an integer (or an integer array), got dtype {a.dtype}")
  if V.is_concrete(a):
    if a.size:
      with jax.ensure_compile_time_eval():  # closed over by a user's jit: read now
        vmin, vmax = (
          jax.device_get((jnp.min(a), jnp.max(a)))
          if isinstance(a, jax.Array)
          else (a.min(), a.max())
        )
      if vmin < lo or vmax > hi:
        raise ValueError(f"{name} must lie in [{lo}, {hi}], got values in [{vmin}, {vmax}]")
    return V._device(a), None
  ok = (a >= lo) & (a <= hi)
  V.trace_check(jnp.all(ok), f"{name} must lie in [{lo}, {hi}]")
  return a, ok


def _fold_int(params: jax.Array, ok: jax.Array | None) -> jax.Array:
  """``params`` (one utility per entry of ``ok``) with NaN where ``ok`` is False."""
  return params if ok is None else jnp.where(ok[..., None], params, jnp.nan)


def sample_linear(key: jax.Array, m: int, num_classes: int) -> Utility:
  """``m`` linear utilities with ``a`` uniform on the ∞-sphere ``{||a||_inf = 1}``.

  One of the ``2C`` faces ``{a_j = ±1}`` is picked uniformly, then the other
  coordinates are iid ``U(-1, 1)`` (the faces have equal area, so this is the
  uniform law on the sphere).

  Args:
    key: a JAX PRNG key (``jax.random.key(seed)`` or ``jax.random.PRNGKey(seed)``).
    m: number of utilities, a Python int ``>= 1``.
    num_classes: ``C >= 2``.

  Returns:
    A batch of ``m`` linear utilities, ``params`` of shape ``(m, C)``.

  Raises:
    ValueError: not a PRNG key, ``m < 1`` or ``C < 2``, non-integral sizes,
      ``C > 2^30 - 1`` (the faces are numbered in int32), or parameters
      ``(m, C)`` of more than ``2^31 - 1`` entries (refused before they are
      drawn).

  Example:
    >>> import jax
    >>> u = sample_linear(jax.random.PRNGKey(0), 4, 3)
    >>> u.params.shape, float(abs(u.params).max(axis=1).min())
    ((4, 3), 1.0)

  Reference: Hegazy, Jordan & Dieuleveut (2025), *Scalable Utility-Aware
  Multiclass Calibration*, arXiv:2510.25458, §4 (sampling D_U).
  """
  key, m, num_classes = _sampler_args(key, m, num_classes)
  _sampler_size((m, num_classes), "(m, C)")
  _check_sphere_dim(num_classes, "num_classes")
  return Utility(_sphere_faces(key, (m,), num_classes), "linear")


def sample_rank(key: jax.Array, m: int, num_classes: int) -> Utility:
  """``m`` rank utilities: ``θ`` sampled as for :func:`sample_linear`, sorted descending.

  Ranks as in :func:`rank` (ties to the lowest class first).

  Args:
    key: a JAX PRNG key.
    m: number of utilities, a Python int ``>= 1``.
    num_classes: ``C >= 2``.

  Returns:
    A batch of ``m`` rank utilities, ``params`` of shape ``(m, C)``.

  Raises:
    ValueError: not a PRNG key, ``m < 1`` or ``C < 2``, non-integral sizes,
      ``C > 2^30 - 1`` (the faces are numbered in int32), or parameters
      ``(m, C)`` of more than ``2^31 - 1`` entries (refused before they are
      drawn).

  Example:
    >>> import jax, jax.numpy as jnp
    >>> th = sample_rank(jax.random.PRNGKey(0), 5, 4).params
    >>> bool(jnp.all(th[:, :-1] >= th[:, 1:]))
    True

  Reference: Hegazy, Jordan & Dieuleveut (2025), *Scalable Utility-Aware
  Multiclass Calibration*, arXiv:2510.25458, §4.
  """
  key, m, num_classes = _sampler_args(key, m, num_classes)
  _sampler_size((m, num_classes), "(m, C)")
  _check_sphere_dim(num_classes, "num_classes")
  return Utility(_rows_descending(_sphere_faces(key, (m,), num_classes)), "rank")


def sample_decision(key: jax.Array, m: int, num_classes: int, num_actions: int) -> Utility:
  """``m`` decision utilities, the ``C×K`` loss uniform on the ∞-sphere of ``R^{C·K}``.

  The paper defines the decision-utility class (Example 3.7) but gives no law
  to sample it; the uniform law on the ∞-sphere (a uniform face, the other
  coordinates ``U(-1, 1)``), the one :func:`sample_linear` draws, is jaxcal's
  choice.

  Args:
    key: a JAX PRNG key.
    m: number of utilities, a Python int ``>= 1``.
    num_classes: ``C >= 2``.
    num_actions: ``K >= 1``.

  Returns:
    A batch of ``m`` decision utilities, ``params`` of shape ``(m, C, K)``.

  Raises:
    ValueError: not a PRNG key, ``m < 1``, ``C < 2`` or ``K < 1``,
      ``C K > 2^30 - 1`` (the faces are numbered in int32), or parameters
      ``(m, C, K)`` of more than ``2^31 - 1`` entries (refused before they
      are drawn).

  Example:
    >>> import jax
    >>> sample_decision(jax.random.PRNGKey(0), 3, 4, 2).params.shape
    (3, 4, 2)

  Reference: Hegazy, Jordan & Dieuleveut (2025), *Scalable Utility-Aware
  Multiclass Calibration*, arXiv:2510.25458, Example 3.7.
  """
  key, m, num_classes = _sampler_args(key, m, num_classes)
  num_actions = V.check_int(num_actions, "num_actions", 1)
  _sampler_size((m, num_classes, num_actions), "(m, C, K)", "m, num_classes or num_actions")
  _check_sphere_dim(num_classes * num_actions, "num_classes * num_actions")
  flat = _sphere_faces(key, (m,), num_classes * num_actions)
  return Utility(flat.reshape(m, num_classes, num_actions), "decision")


def sample_aligned_gain(
  key: jax.Array, m: int, num_classes: int, max_off_diagonal: float = 0.1
) -> Utility:
  """``m`` aligned gain-matrix utilities: ``R_ii = 1``, off-diagonals iid ``U(0, 0.1)``.

  Args:
    key: a JAX PRNG key.
    m: number of utilities, a Python int ``>= 1``.
    num_classes: ``C >= 2``.
    max_off_diagonal: upper end of the uniform law of the off-diagonal gains
      ``R_ij``, in ``[0, 1]``; 0.1 (the paper's value) by default.

  Returns:
    A batch of ``m`` gain-matrix utilities (kind ``"decision"``, see
    :func:`gain_matrix`), ``params`` ``-R`` of shape ``(m, C, C)``.

  Raises:
    ValueError: not a PRNG key, ``m < 1`` or ``C < 2``, ``max_off_diagonal``
      not a number in ``[0, 1]`` (an array of several, a string), or
      parameters ``(m, C, C)`` of more than ``2^31 - 1`` entries (refused
      before they are drawn).

  Example:
    >>> import jax
    >>> u = sample_aligned_gain(jax.random.PRNGKey(0), 2, 3)
    >>> (-u.params[0]).diagonal().tolist()
    [1.0, 1.0, 1.0]

  Reference: Hegazy, Jordan & Dieuleveut (2025), *Scalable Utility-Aware
  Multiclass Calibration*, arXiv:2510.25458, App. C.2 (aligned class).
  """
  key, m, num_classes = _sampler_args(key, m, num_classes)
  max_off_diagonal = _unit_interval(max_off_diagonal, "max_off_diagonal")
  _sampler_size((m, num_classes, num_classes), "(m, C, C)")
  return gain_matrix(_aligned(key, m, num_classes, max_off_diagonal))


@functools.partial(jax.jit, static_argnums=(1, 2))
def _aligned(key, m, num_classes, max_off_diagonal):
  off = jax.random.uniform(key, (m, num_classes, num_classes), jnp.float32, 0.0, max_off_diagonal)
  return jnp.where(jnp.eye(num_classes, dtype=bool), 1.0, off)


def sample_misaligned_gain(
  key: jax.Array, m: int, num_classes: int, num_groups: int | None = None, gain: float = 0.2
) -> Utility:
  """``m`` misaligned (specialist) gain-matrix utilities.

  The labels are split into ``num_groups`` disjoint groups of near-equal size
  (a random permutation of the classes cut into consecutive runs, drawn once
  from ``key``). Each utility is a specialist of one group ``K`` drawn
  uniformly: ``R_ii = 1``, ``R_ij = gain`` (0.2) for ``i != j`` both in ``K``,
  and 0 elsewhere. The paper's App. C.2 sets ``R_ij = 0.2`` "for all ``j`` in
  ``K_m`` with ``i != j``", which read literally lets the true class ``i``
  lie outside the group; jaxcal takes the specialist reading, both classes in
  the group (on CIFAR-100 ResNet-110 the ten specialists' UC is
  0.0777-0.0780 here, 0.0753-0.0767 under the literal reading).

  Args:
    key: a JAX PRNG key.
    m: number of utilities, a Python int ``>= 1``.
    num_classes: ``C >= 2``.
    num_groups: number of label groups, an int in ``[1, C]``; by default
      ``min(10, C)`` (10 groups of 10 classes on CIFAR-100).
    gain: the off-diagonal gain within a group, in ``[0, 1]``; 0.2 by default.

  Returns:
    A batch of ``m`` gain-matrix utilities (kind ``"decision"``, see
    :func:`gain_matrix`), ``params`` ``-R`` of shape ``(m, C, C)``.

  Raises:
    ValueError: not a PRNG key, ``m < 1`` or ``C < 2``, ``num_groups`` outside
      ``[1, C]``, ``gain`` not a number in ``[0, 1]`` (a string, an array of
      several), or parameters ``(m, C, C)`` of more than ``2^31 - 1`` entries
      (refused before they are drawn).

  Example:
    >>> import jax
    >>> u = sample_misaligned_gain(jax.random.PRNGKey(0), 3, 6, num_groups=2)
    >>> sorted(set((-u.params[0]).ravel().tolist()))
    [0.0, 0.2..., 1.0]

  Reference: Hegazy, Jordan & Dieuleveut (2025), *Scalable Utility-Aware
  Multiclass Calibration*, arXiv:2510.25458, App. C.2 (misaligned class).
  """
  key, m, num_classes = _sampler_args(key, m, num_classes)
  if num_groups is None:  # (10 refused every C < 10)
    num_groups = min(10, num_classes)
  num_groups = V.check_int(num_groups, "num_groups", 1)
  if num_groups > num_classes:
    raise ValueError(f"num_groups must lie in [1, {num_classes}], got {num_groups}")
  gain = _unit_interval(gain, "gain")
  _sampler_size((m, num_classes, num_classes), "(m, C, C)")
  return gain_matrix(_misaligned(key, m, num_classes, num_groups, gain))


@functools.partial(jax.jit, static_argnums=(1, 2, 3))
def _misaligned(key, m, num_classes, num_groups, gain):
  kp, kg = jax.random.split(key)
  perm = jax.random.permutation(kp, num_classes)
  group_of = (
    jnp.zeros(num_classes, jnp.int32)
    .at[perm]
    .set((jnp.arange(num_classes, dtype=jnp.int32) * num_groups) // num_classes)
  )
  chosen = jax.random.randint(kg, (m,), 0, num_groups, jnp.int32)
  member = group_of[None, :] == chosen[:, None]  # (m, C)
  both = member[:, :, None] & member[:, None, :]
  R = jnp.where(both, jnp.float32(gain), jnp.float32(0.0))  # float32 under x64 too
  return jnp.where(jnp.eye(num_classes, dtype=bool), jnp.float32(1.0), R)


# --------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------

_UTILITY_ATOL = 1e-6


def params_in_range(prm: jax.Array, axis: Any = None) -> jax.Array:
  """Whether utility parameters are finite and in ``[-1, 1]`` (within 1e-6), reduced over ``axis``.

  The traced form of the value check (kept dimensions, for a per-utility NaN).
  """
  bound = 1.0 + _UTILITY_ATOL
  return jnp.all(jnp.isfinite(prm) & (jnp.abs(prm) <= bound), axis=axis, keepdims=axis is not None)


def _check_shape(u: Utility, num_classes: int | None, name: str) -> None:
  """The kind's own axes of ``u.params``: their number, a square similarity, ``C``."""
  if u.kind not in KINDS:
    raise ValueError(f"{name}: unknown utility kind {u.kind!r}; expected one of {sorted(KINDS)}")
  ndim = KINDS[u.kind]
  prm = u.params
  if prm.ndim < ndim:
    raise ValueError(
      f"{name}: {u.kind} parameters need at least {ndim} axes, got shape {tuple(prm.shape)}"
    )
  if not jnp.issubdtype(prm.dtype, jnp.floating):
    raise ValueError(f"{name}: parameters must be floating point, got dtype {prm.dtype}")
  if u.kind == "top_class" and prm.shape[-1] != 0:  # they were ignored without a word
    raise ValueError(
      f"{name}: a top_class utility takes no parameters (top_class() builds it: params of "
      f"shape (..., 0)), got shape {tuple(prm.shape)}"
    )
  if u.kind != "top_class":
    c = prm.shape[-2] if u.kind == "decision" else prm.shape[-1]
    if u.kind == "similarity" and prm.shape[-1] != prm.shape[-2]:
      raise ValueError(
        f"{name}: similarity matrix must be square, got shape {tuple(prm.shape[-2:])}"
      )
    if u.kind == "decision" and prm.shape[-1] < 1:
      raise ValueError(f"{name}: a decision utility needs at least one action")
    if num_classes is not None and c != num_classes:
      raise ValueError(
        f"{name}: {u.kind} utility is defined for C = {c} classes but the predictions "
        f"have C = {num_classes}"
      )


def _check_params(u: Utility, num_classes: int | None = None, name: str = "utility") -> Utility:
  _check_shape(u, num_classes, name)
  ndim = KINDS[u.kind]
  prm = u.params
  if prm.size == 0:
    return u
  what = f"{name} parameters ({u.kind})"
  if prm.ndim > ndim and not V.is_concrete(prm):
    # a traced batch: NaN for each bad utility only, as a loop over them would give
    good = params_in_range(prm, axis=tuple(range(prm.ndim - ndim, prm.ndim)))
    V.trace_check(jnp.all(good), f"{what} must be finite and in [-1, 1]")
    return Utility(jnp.where(good, prm, jnp.asarray(jnp.nan, prm.dtype)), u.kind)
  # one fused device reduction (finite, in [-1, 1]); traced bad values become NaN
  checked = V.check_values(prm, what, bounds=(-1.0, 1.0), tol=_UTILITY_ATOL)
  return Utility(checked, u.kind)


def check_utility(
  utility: Any, num_classes: int, *, batched: bool | None = None, name: str = "utility"
) -> Utility:
  """Validates a :class:`Utility` against ``C`` classes.

  Shape checks always; value checks (finite, in ``[-1, 1]``) in one fused
  device reduction: they raise on concrete parameters and turn traced bad
  ones into NaN (checked mode: a checkify error).

  Args:
    utility: the utility or batch.
    num_classes: ``C`` of the predictions.
    batched: ``True`` requires exactly one batch axis, ``False`` none,
      ``None`` either.
    name: the argument's name in messages.

  Returns:
    The utility, to be used in place of the argument (``params`` given as
    a list or a numpy array come back as a JAX array).

  Raises:
    ValueError: naming the problem: not a :class:`Utility`, ``params`` that
      are not a real numeric array (e.g. ``Utility("abc")``), an unknown
      kind, the wrong batch axes or ``C``, or values that are not finite or
      lie outside ``[-1, 1]``.

  Example:
    >>> import jax.numpy as jnp
    >>> check_utility(linear(jnp.array([1.0, -0.5])), 2).kind
    'linear'
    >>> check_utility(Utility("abc"), 2)
    Traceback (most recent call last):
    ...
    ValueError: utility.params must be a real numeric array, got dtype <U3

  Reference: Hegazy, Jordan & Dieuleveut (2025), *Scalable Utility-Aware
  Multiclass Calibration*, arXiv:2510.25458, §3 (utilities with values in
  ``[-1, 1]``).
  """
  if not isinstance(utility, Utility):
    raise ValueError(
      f"{name} must be a jaxcal.utility.Utility (e.g. linear(a)), got {type(utility).__name__}"
    )
  if utility.kind not in KINDS:
    raise ValueError(
      f"{name}: unknown utility kind {utility.kind!r}; expected one of {sorted(KINDS)}"
    )
  prm = utility.params
  if not isinstance(prm, jax.Array | jax.core.Tracer | np.ndarray) or not jnp.issubdtype(
    prm.dtype, jnp.floating
  ):
    # e.g. Utility("abc"), a list or an integer array: convert (a string or
    # object array raises here)
    utility = Utility(V.as_float(prm, f"{name}.params"), utility.kind)
  _check_shape(utility, num_classes, name)  # before the batch axes, which it decides
  nb = len(utility.batch_shape)
  if batched is True and nb != 1:
    raise ValueError(
      f"{name} must be a batch with one leading axis, got batch shape {utility.batch_shape}"
    )
  if batched is False and nb != 0:
    raise ValueError(
      f"{name} must be a single utility, got a batch of shape {utility.batch_shape} "
      "(use uc_sweep for batches, or jax.vmap)"
    )
  return _check_params(utility, num_classes, name)


# --------------------------------------------------------------------------
# Evaluation: one utility on one data set
# --------------------------------------------------------------------------


def ranks(probs: jax.Array) -> jax.Array:
  """0-based rank of every class in each row (0 = largest; ties toward lower index)."""
  order = jax.vmap(lambda r: stable_argsort(-r))(probs)
  n, c = probs.shape
  return (
    jnp.zeros((n, c), jnp.int32)
    .at[jnp.arange(n)[:, None], order]
    .set(jnp.arange(c, dtype=jnp.int32)[None, :])
  )


def _label_rank(p: jax.Array, y: jax.Array) -> jax.Array:
  """0-based rank of the label: ``#{j: p_j > p_y} + #{j < y: p_j = p_y}``.

  Compared as order-preserving integer keys, as :func:`ranks` and the sorts
  order them: XLA:CPU's float compares flush subnormals to zero (``1e-40 >
  0`` was False), so a numpy softmax's subnormal entries tied with 0 here and
  not in the sorted predicted utilities (top-K UC of CIFAR-100 logits x 20
  read 0.0652 against 0.0513).
  """
  k = float_to_key(p)
  ky = jnp.take_along_axis(k, y[:, None], axis=1)
  j = jnp.arange(p.shape[1])[None, :]
  before = (k > ky) | ((k == ky) & (j < y[:, None]))
  return jnp.sum(before, axis=1).astype(jnp.int32)


def prepare(kind: str, p: jax.Array, y: jax.Array) -> dict[str, jax.Array]:
  """Everything that depends on the data only, computed once per sweep."""
  if kind == "top_class":
    top = jnp.argmax(p, axis=1)
    return {"conf": jnp.max(p, axis=1), "hit": (top == y).astype(p.dtype)}
  if kind == "rank":
    return {"sorted": sort_descending(p, axis=1), "label_rank": _label_rank(p, y)}
  return {"p": p, "y": y}


def predicted_realized(
  kind: str, prep: dict[str, jax.Array], params: jax.Array, precision: Any = PRECISION
) -> tuple[jax.Array, jax.Array]:
  """``(v_u(p_i), u(p_i, y_i))``, each ``(n,)``, for one utility of ``kind``.

  ``precision``: the products' ``precision=`` (static; default full float32,
  :data:`~jaxcal._src.numerics.PRECISION`). ``experiments/bench/uc_stages.py``
  passes a dot-algorithm preset (``TF32_TF32_F32_X3``) to time the sweep with
  it on a GPU.
  """
  if kind == "top_class":
    return prep["conf"], prep["hit"]
  if kind == "linear":
    return jnp.dot(prep["p"], params, precision=precision), params[prep["y"]]
  if kind == "rank":
    return jnp.dot(prep["sorted"], params, precision=precision), params[prep["label_rank"]]
  p, y = prep["p"], prep["y"]
  if kind == "decision":
    expected_loss = jnp.dot(p, params, precision=precision)  # (n, K)
    act = jnp.argmin(expected_loss, axis=1)
    return -jnp.min(expected_loss, axis=1), -params[y, act]
  if kind == "similarity":
    q = jnp.dot(p, params, precision=precision)  # (n, C)
    return jnp.sum(p * q, axis=1), jnp.take_along_axis(q, y[:, None], axis=1)[:, 0]
  raise ValueError(f"unknown utility kind {kind!r}")


def utility_values(u: Utility, p: jax.Array) -> jax.Array:
  """``ū(p_i)`` for a single utility: ``(n, C)``."""
  prm = u.params
  if u.kind == "top_class":
    return jax.nn.one_hot(jnp.argmax(p, axis=1), p.shape[1], dtype=p.dtype)
  if u.kind == "linear":
    return jnp.broadcast_to(prm.astype(p.dtype), p.shape)
  if u.kind == "rank":
    return prm.astype(p.dtype)[ranks(p)]
  if u.kind == "decision":
    act = jnp.argmin(jnp.dot(p, prm, precision=PRECISION), axis=1)
    return -prm.T[act].astype(p.dtype)
  if u.kind == "similarity":
    return jnp.dot(p, prm, precision=PRECISION)
  raise ValueError(f"unknown utility kind {u.kind!r}")
