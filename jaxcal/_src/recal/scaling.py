"""Parametric recalibrators fitted by L-BFGS on the log loss (Guo et al. 2017 and successors).

* ``"temperature"``: ``softmax(z / T)``, ``T = exp(theta)`` fitted over
  ``theta = log T`` (Guo et al. 2017).
* ``"vector"``: ``softmax(a * z + b)`` with per-class ``a, b``.
* ``"matrix"``: ``softmax(W z + b)``; optional ODIR penalties.
* ``"dirichlet"``: ``softmax(W log p + b)`` with ODIR (off-diagonal and
  intercept regularisation) as in Kull et al. (2019).
* ``"platt"``: one-vs-rest Platt scaling ``sigmoid(a_c s_c + b_c)`` on the
  log-odds ``s_c = log(p_c / (1 - p_c))``, rows then normalised.

``z`` are the logits (``from_logits=True``, the default) or ``log p`` for
probability inputs (``softmax(log p) = p``, so every method starts from the
identity map). All objectives are means over samples and are minimised with
``optax.lbfgs`` (zoom line search) inside one ``lax.while_loop``; the fit is
jitted.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import optax
from jax import lax
from jax.typing import ArrayLike

from jaxcal._src.numerics import PRECISION
from jaxcal._src.recal.base import (
  Recalibrator,
  prepare_fit,
  recalibrator_class,
  register,
  to_logits,
)

__all__ = [
  "lbfgs_minimize",
  "TemperatureScaling",
  "LinearScaling",
  "VectorScaling",
  "DirichletCalibration",
  "PlattScaling",
  "fit_temperature",
  "fit_vector",
  "fit_matrix",
  "fit_dirichlet",
  "fit_platt",
]


def lbfgs_minimize(
  fun: Callable[[Any], jax.Array], init: Any, *, max_iter: int = 500, tol: float = 1e-6
) -> tuple[Any, jax.Array, jax.Array]:
  """Minimises a smooth function with ``optax.lbfgs`` in a ``lax.while_loop``.

  Stops when the gradient norm falls below ``tol`` or after ``max_iter``
  iterations.

  Args:
    fun: scalar objective of a pytree of parameters.
    init: initial parameters.
    max_iter: iteration limit (static).
    tol: gradient-norm tolerance.

  Returns:
    ``(params, value, num_iter)``.

  Example:
    >>> import jax.numpy as jnp
    >>> p, v, k = lbfgs_minimize(lambda x: jnp.sum((x - 3.0) ** 2), jnp.zeros(2))
    >>> [round(float(a), 4) for a in p]
    [3.0, 3.0]

  Reference: Nocedal & Wright (2006), Alg. 7.5; optax.lbfgs.
  """
  opt = optax.lbfgs()
  value_and_grad = optax.value_and_grad_from_state(fun)

  def step(carry):
    params, state = carry
    value, grad = value_and_grad(params, state=state)
    updates, state = opt.update(grad, state, params, value=value, grad=grad, value_fn=fun)
    return optax.apply_updates(params, updates), state

  def cond(carry):
    _, state = carry
    k = optax.tree.get(state, "count")
    g = optax.tree.get(state, "grad")
    return (k == 0) | ((k < max_iter) & (optax.tree.norm(g) >= tol))

  params, state = lax.while_loop(cond, step, (init, opt.init(init)))
  return params, optax.tree.get(state, "value"), optax.tree.get(state, "count")


def _nll(logits: jax.Array, onehot: jax.Array) -> jax.Array:
  """Mean multiclass log loss of ``softmax(logits)``."""
  return -jnp.mean(jnp.sum(onehot * jax.nn.log_softmax(logits, axis=-1), axis=-1))


# ---------------------------------------------------------------------------
# Temperature scaling


@recalibrator_class
@flax.struct.dataclass
class TemperatureScaling(Recalibrator):
  """``softmax(z / T)`` with a fitted temperature ``T > 0``.

  Attributes:
    temperature: scalar ``T``.
    num_classes: ``C`` seen at fit time (static).
  """

  method = "temperature"
  temperature: jax.Array = None
  num_classes: int = flax.struct.field(pytree_node=False, default=0)

  def apply(self, inputs: jax.Array) -> jax.Array:
    z = to_logits(inputs, self.from_logits)
    return jax.nn.softmax(z / self.temperature.astype(z.dtype), axis=-1)


@functools.partial(jax.jit, static_argnames=("max_iter",))
def _fit_temperature(z, onehot, max_iter, tol):
  def loss(theta):
    return _nll(z * jnp.exp(-theta), onehot)

  theta, _, _ = lbfgs_minimize(loss, jnp.zeros((), z.dtype), max_iter=max_iter, tol=tol)
  return jnp.exp(theta)


@register("temperature")
def fit_temperature(
  inputs: ArrayLike,
  labels: ArrayLike,
  *,
  from_logits: bool = True,
  max_iter: int = 200,
  tol: float = 1e-6,
) -> TemperatureScaling:
  """Temperature scaling: ``T = argmin_T NLL(softmax(z / T))`` over ``log T``.

  .. math::
    \\hat T = \\exp \\arg\\min_\\theta \\frac1n \\sum_i
      -\\log \\mathrm{softmax}(z_i e^{-\\theta})_{y_i}

  Args:
    inputs: ``(n, C)`` logits (probabilities with ``from_logits=False``).
    labels: ``(n,)`` integer labels.
    from_logits: whether ``inputs`` are logits.
    max_iter: L-BFGS iteration limit.
    tol: gradient-norm tolerance.

  Returns:
    :class:`TemperatureScaling`.

  Example:
    >>> import jax, jax.numpy as jnp
    >>> z = 3.0 * jax.random.normal(jax.random.key(0), (500, 4))
    >>> y = jax.random.categorical(jax.random.key(1), z / 3.0)
    >>> rc = fit_temperature(z, y)
    >>> 2.0 < float(rc.temperature) < 4.5
    True

  Reference: Guo et al. (2017), §4.2; Lu et al. 2025 (L-BFGS over ``log T``).
  """
  x, y = prepare_fit(inputs, labels, from_logits=from_logits, method="temperature")
  z = to_logits(x, from_logits)
  onehot = jax.nn.one_hot(y, z.shape[1], dtype=z.dtype)
  t = _fit_temperature(z, onehot, int(max_iter), jnp.asarray(tol, z.dtype))
  return TemperatureScaling(temperature=t, num_classes=int(z.shape[1]), from_logits=from_logits)


# ---------------------------------------------------------------------------
# Vector, matrix and Dirichlet scaling: softmax(W z + b)


@recalibrator_class
@flax.struct.dataclass
class LinearScaling(Recalibrator):
  """``softmax(z W^T + b)``; ``z`` = logits, or log-probabilities (``on_log_probs``).

  Used by ``"matrix"`` (and, with ``on_log_probs=True``, by ``"dirichlet"``);
  vector scaling stores a diagonal ``W``.

  Attributes:
    weight: ``(C, C)``.
    bias: ``(C,)``.
    on_log_probs: apply to ``log softmax(logits)`` instead of the logits (static).
    num_classes: ``C`` (static).
  """

  method = "matrix"
  weight: jax.Array = None
  bias: jax.Array = None
  on_log_probs: bool = flax.struct.field(pytree_node=False, default=False)
  num_classes: int = flax.struct.field(pytree_node=False, default=0)

  def apply(self, inputs: jax.Array) -> jax.Array:
    z = to_logits(inputs, self.from_logits)
    if self.on_log_probs:
      z = jax.nn.log_softmax(z, axis=-1)
    w = self.weight.astype(z.dtype)
    return jax.nn.softmax(
      jnp.matmul(z, w.T, precision=PRECISION) + self.bias.astype(z.dtype), axis=-1
    )


@recalibrator_class
@flax.struct.dataclass
class VectorScaling(LinearScaling):
  """Vector scaling ``softmax(a * z + b)`` (``weight = diag(a)``)."""

  method = "vector"


@recalibrator_class
@flax.struct.dataclass
class DirichletCalibration(LinearScaling):
  """Dirichlet calibration ``softmax(W log p + b)`` (``on_log_probs=True``)."""

  method = "dirichlet"


@functools.partial(jax.jit, static_argnames=("diagonal", "max_iter"))
def _fit_linear(z, onehot, lam, mu, diagonal, max_iter, tol):
  c = z.shape[1]
  off = 1.0 - jnp.eye(c, dtype=z.dtype)
  lam_n = lam / max(c * (c - 1), 1)
  mu_n = mu / c

  def unpack(params):
    w, b = params
    return (jnp.diag(w) if diagonal else w), b

  def loss(params):
    w, b = unpack(params)
    val = _nll(jnp.matmul(z, w.T, precision=PRECISION) + b, onehot)
    if not diagonal:
      val = val + lam_n * jnp.sum((w * off) ** 2)
    return val + mu_n * jnp.sum(b**2)

  init = (
    jnp.ones((c,), z.dtype) if diagonal else jnp.eye(c, dtype=z.dtype),
    jnp.zeros((c,), z.dtype),
  )
  params, _, _ = lbfgs_minimize(loss, init, max_iter=max_iter, tol=tol)
  return unpack(params)


def _fit_linear_public(
  cls, method, inputs, labels, from_logits, on_log_probs, lam, mu, diagonal, max_iter, tol
):
  x, y = prepare_fit(
    inputs, labels, from_logits=from_logits, method=method, require_all_classes=True
  )
  if lam < 0 or mu < 0:
    raise ValueError(f"regularisation strengths must be >= 0, got reg_lambda={lam}, reg_mu={mu}")
  z = to_logits(x, from_logits)
  if on_log_probs:
    z = jax.nn.log_softmax(z, axis=-1)
  onehot = jax.nn.one_hot(y, z.shape[1], dtype=z.dtype)
  w, b = _fit_linear(
    z,
    onehot,
    jnp.asarray(lam, z.dtype),
    jnp.asarray(mu, z.dtype),
    diagonal,
    int(max_iter),
    jnp.asarray(tol, z.dtype),
  )
  return cls(
    weight=w,
    bias=b,
    on_log_probs=on_log_probs,
    num_classes=int(z.shape[1]),
    from_logits=from_logits,
  )


@register("vector")
def fit_vector(
  inputs: ArrayLike,
  labels: ArrayLike,
  *,
  from_logits: bool = True,
  reg_mu: float = 0.0,
  max_iter: int = 500,
  tol: float = 1e-6,
) -> VectorScaling:
  """Vector scaling: per-class scale and bias on the logits.

  .. math:: q = \\mathrm{softmax}(a \\odot z + b), \\quad
    (a, b) = \\arg\\min \\mathrm{NLL} + \\frac{\\mu}{C}\\|b\\|^2

  Args:
    inputs: ``(n, C)`` logits (probabilities with ``from_logits=False``).
    labels: ``(n,)`` integer labels; every class must occur.
    from_logits: whether ``inputs`` are logits.
    reg_mu: intercept penalty ``mu`` (default 0).
    max_iter: L-BFGS iteration limit.
    tol: gradient-norm tolerance.

  Returns:
    :class:`VectorScaling` (``weight`` is ``diag(a)``).

  Example:
    >>> import jax, jax.numpy as jnp
    >>> z = jax.random.normal(jax.random.key(0), (300, 3))
    >>> rc = fit_vector(z, jnp.argmax(z, axis=1))
    >>> rc(z).shape
    (300, 3)

  Reference: Guo et al. (2017), §4.2.
  """
  return _fit_linear_public(
    VectorScaling,
    "vector",
    inputs,
    labels,
    from_logits,
    False,
    0.0,
    float(reg_mu),
    True,
    max_iter,
    tol,
  )


@register("matrix")
def fit_matrix(
  inputs: ArrayLike,
  labels: ArrayLike,
  *,
  from_logits: bool = True,
  reg_lambda: float = 0.0,
  reg_mu: float = 0.0,
  max_iter: int = 500,
  tol: float = 1e-6,
) -> LinearScaling:
  """Matrix scaling on the logits, optionally with ODIR penalties.

  .. math:: q = \\mathrm{softmax}(W z + b), \\quad
    \\min \\mathrm{NLL} + \\frac{\\lambda}{C(C-1)} \\sum_{i \\ne j} W_{ij}^2
      + \\frac{\\mu}{C} \\sum_j b_j^2

  Args:
    inputs: ``(n, C)`` logits (probabilities with ``from_logits=False``).
    labels: ``(n,)`` integer labels; every class must occur.
    from_logits: whether ``inputs`` are logits.
    reg_lambda: off-diagonal penalty ``lambda`` (default 0: plain matrix scaling).
    reg_mu: intercept penalty ``mu`` (default 0).
    max_iter: L-BFGS iteration limit.
    tol: gradient-norm tolerance.

  Returns:
    :class:`LinearScaling`.

  Example:
    >>> import jax, jax.numpy as jnp
    >>> z = jax.random.normal(jax.random.key(0), (300, 3))
    >>> fit_matrix(z, jnp.argmax(z, axis=1)).weight.shape
    (3, 3)

  Reference: Guo et al. (2017), §4.2; Kull et al. (2019), §3 (ODIR).
  """
  return _fit_linear_public(
    LinearScaling,
    "matrix",
    inputs,
    labels,
    from_logits,
    False,
    float(reg_lambda),
    float(reg_mu),
    False,
    max_iter,
    tol,
  )


@register("dirichlet")
def fit_dirichlet(
  inputs: ArrayLike,
  labels: ArrayLike,
  *,
  from_logits: bool = True,
  reg_lambda: float = 1e-2,
  reg_mu: float = 1e-2,
  max_iter: int = 500,
  tol: float = 1e-6,
) -> DirichletCalibration:
  """Dirichlet calibration with ODIR: matrix scaling on the log-probabilities.

  .. math:: q = \\mathrm{softmax}(W \\log p + b), \\quad
    \\min \\mathrm{NLL} + \\frac{\\lambda}{C(C-1)} \\sum_{i \\ne j} W_{ij}^2
      + \\frac{\\mu}{C} \\sum_j b_j^2

  The paper selects ``lambda, mu`` by cross-validation on a grid; the
  defaults here are fixed small values (pass your own for a grid search).

  Args:
    inputs: ``(n, C)`` logits (probabilities with ``from_logits=False``).
    labels: ``(n,)`` integer labels; every class must occur.
    from_logits: whether ``inputs`` are logits.
    reg_lambda: off-diagonal penalty ``lambda``.
    reg_mu: intercept penalty ``mu``.
    max_iter: L-BFGS iteration limit.
    tol: gradient-norm tolerance.

  Returns:
    :class:`DirichletCalibration`.

  Example:
    >>> import jax, jax.numpy as jnp
    >>> z = jax.random.normal(jax.random.key(0), (300, 3))
    >>> rc = fit_dirichlet(z, jnp.argmax(z, axis=1))
    >>> bool(jnp.allclose(rc(z).sum(axis=1), 1.0, atol=1e-5))
    True

  Reference: Kull et al. (2019), "Beyond temperature scaling", §3, Eq. (5) (ODIR).
  """
  return _fit_linear_public(
    DirichletCalibration,
    "dirichlet",
    inputs,
    labels,
    from_logits,
    True,
    float(reg_lambda),
    float(reg_mu),
    False,
    max_iter,
    tol,
  )


# ---------------------------------------------------------------------------
# Platt scaling, one-vs-rest


def _log_odds(inputs: jax.Array, from_logits: bool) -> jax.Array:
  """``log(p / (1 - p))`` per class, computed from log-probabilities."""
  z = to_logits(inputs, from_logits)
  logp = jax.nn.log_softmax(z, axis=-1)
  tiny = jnp.finfo(z.dtype).eps
  logp = jnp.clip(logp, jnp.log(tiny) * 4, jnp.log1p(-tiny))
  return logp - jnp.log(-jnp.expm1(logp))


@recalibrator_class
@flax.struct.dataclass
class PlattScaling(Recalibrator):
  """One-vs-rest Platt scaling ``q_c = sigmoid(a_c s_c + b_c)``, rows normalised.

  Attributes:
    scale, bias: ``(C,)``.
    normalize: divide each row by its sum (static, default True).
    num_classes: ``C`` (static).
  """

  method = "platt"
  scale: jax.Array = None
  bias: jax.Array = None
  normalize: bool = flax.struct.field(pytree_node=False, default=True)
  num_classes: int = flax.struct.field(pytree_node=False, default=0)

  def apply(self, inputs: jax.Array) -> jax.Array:
    s = _log_odds(inputs, self.from_logits)
    q = jax.nn.sigmoid(s * self.scale.astype(s.dtype) + self.bias.astype(s.dtype))
    return q / jnp.sum(q, axis=-1, keepdims=True) if self.normalize else q


@functools.partial(jax.jit, static_argnames=("max_iter",))
def _fit_platt(s, onehot, max_iter, tol):
  c = s.shape[1]

  def loss(params):
    a, b = params
    u = s * a + b
    return jnp.sum(jnp.mean(jax.nn.softplus(u) - onehot * u, axis=0))

  init = (jnp.ones((c,), s.dtype), jnp.zeros((c,), s.dtype))
  params, _, _ = lbfgs_minimize(loss, init, max_iter=max_iter, tol=tol)
  return params


@register("platt")
def fit_platt(
  inputs: ArrayLike,
  labels: ArrayLike,
  *,
  from_logits: bool = True,
  normalize: bool = True,
  max_iter: int = 500,
  tol: float = 1e-6,
) -> PlattScaling:
  """One-vs-rest Platt scaling on the per-class log-odds, then normalised.

  .. math:: q_c = \\sigma(a_c s_c + b_c), \\quad s_c = \\log\\frac{p_c}{1 - p_c}, \\quad
    \\hat q = q / \\textstyle\\sum_c q_c

  Each ``(a_c, b_c)`` minimises the binary log loss of ``1[y = c]`` (all
  classes in one L-BFGS run of the separable sum). Using the log-odds of
  ``p = softmax(z)`` rather than the raw logit ``z_c`` makes the fit the same
  for logit and probability inputs.

  Args:
    inputs: ``(n, C)`` logits (probabilities with ``from_logits=False``).
    labels: ``(n,)`` integer labels; every class must occur.
    from_logits: whether ``inputs`` are logits.
    normalize: divide rows by their sums (default True).
    max_iter: L-BFGS iteration limit.
    tol: gradient-norm tolerance.

  Returns:
    :class:`PlattScaling`.

  Example:
    >>> import jax, jax.numpy as jnp
    >>> z = jax.random.normal(jax.random.key(0), (300, 3))
    >>> rc = fit_platt(z, jnp.argmax(z, axis=1))
    >>> bool(jnp.allclose(rc(z).sum(axis=1), 1.0, atol=1e-5))
    True

  Reference: Platt (1999); Zadrozny & Elkan (2002) (one-vs-rest + normalisation).
  """
  x, y = prepare_fit(
    inputs, labels, from_logits=from_logits, method="platt", require_all_classes=True
  )
  s = _log_odds(x, from_logits)
  onehot = jax.nn.one_hot(y, s.shape[1], dtype=s.dtype)
  a, b = _fit_platt(s, onehot, int(max_iter), jnp.asarray(tol, s.dtype))
  return PlattScaling(
    scale=a, bias=b, normalize=bool(normalize), num_classes=int(s.shape[1]), from_logits=from_logits
  )
