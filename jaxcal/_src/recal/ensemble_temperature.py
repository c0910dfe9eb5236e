"""Ensemble temperature scaling, ETS (Zhang, Kailkhura & Han 2020).

``q = w_1 softmax(z / T) + w_2 softmax(z) + w_3 (1/C)``, ``w`` on the
probability simplex. As in the authors' code (``ets_calibrate`` of the
Mix-n-Match repository), ``T`` is fitted first on its own and the weights
second, both by the same loss, by default the mean squared error
``mean((q - onehot)^2)`` over all ``n x C`` entries (``loss="mse"``;
``loss="nll"`` uses the log loss instead).

* ``T = exp(theta)`` by L-BFGS over ``theta`` (the authors bound ``T`` to
  ``[0.05, 5]`` with L-BFGS-B; here it is unbounded), started at ``T = 1`` or
  at temperature scaling's ``T``, whichever has the lower loss.
* For ``loss="mse"`` the weight problem is a 3-variable convex quadratic
  program on the simplex, solved exactly: the KKT system of each of its 7
  faces (vertices, edges, interior) is solved and the best feasible point
  kept. For ``loss="nll"`` the weights are ``softmax(omega)``, fitted by
  L-BFGS (the boundary of the simplex is approached, never reached exactly;
  the authors use SLSQP).
"""

from __future__ import annotations

import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcal._src import validation as V
from jaxcal._src.numerics import PRECISION, segment_sum_accurate
from jaxcal._src.recal.base import (
  Recalibrator,
  all_top_labels,
  fit_arrays,
  fold_fit,
  pytree_dataclass,
  static_field,
  to_logits,
  warn_if_not_converged,
)
from jaxcal._src.recal.scaling import _fit_temperature, check_solver_options, lbfgs_minimize

__all__ = ["EnsembleTemperatureScaling", "fit_ensemble_temperature"]

_LOSSES = ("mse", "nll")
_FACES = [s for k in (1, 2, 3) for s in itertools.combinations(range(3), k)]


def _components(z: jax.Array, temperature: jax.Array) -> jax.Array:
  """``(3, n, C)``: ``softmax(z/T)``, ``softmax(z)``, uniform."""
  c = z.shape[-1]
  return jnp.stack(
    [
      jax.nn.softmax(z / temperature, axis=-1),
      jax.nn.softmax(z, axis=-1),
      jnp.full(z.shape, 1.0 / c, z.dtype),
    ]
  )


@pytree_dataclass
class EnsembleTemperatureScaling(Recalibrator):
  """``w_1 softmax(z / T) + w_2 softmax(z) + w_3 / C``.

  Attributes:
    temperature: scalar ``T``.
    weights: ``(3,)`` simplex weights ``w``.
    num_iter: L-BFGS iterations (of the temperature fit, plus those of the
      weights' fit for ``loss="nll"``; not those of the log-loss temperature
      fit, of at most 200 iterations, that may give its starting point).
    converged: whether every L-BFGS fit stopped by its rule (gradient norm
      below ``tol``, or no decrease at working precision) within its limit;
      False too when the split has no optimum (every label the top label
      of its row: the temperature falls towards 0).
    num_classes: ``C`` (static).
  """

  method = "ensemble_temperature"
  shapes = {"temperature": (), "weights": (3,), "num_iter": (), "converged": ()}
  value_rules = {"temperature": ("positive",), "weights": ("simplex",)}
  temperature: jax.Array
  weights: jax.Array
  num_iter: jax.Array
  converged: jax.Array
  num_classes: int = static_field()

  def apply(self, inputs: jax.Array) -> jax.Array:
    z = to_logits(inputs, self.from_logits)
    comp = _components(z, self.temperature.astype(z.dtype))
    return jnp.tensordot(self.weights.astype(z.dtype), comp, axes=1, precision=PRECISION)


def _loss_of(q: jax.Array, onehot: jax.Array, loss: str) -> jax.Array:
  if loss == "mse":
    return jnp.mean((q - onehot) ** 2)
  return -jnp.mean(jnp.sum(onehot * jnp.log(jnp.maximum(q, 1e-12)), axis=-1))


def _simplex_qp(a: jax.Array, b: jax.Array) -> jax.Array:
  """``argmin_{w in simplex} w^T A w - 2 b^T w`` (3 variables) over the 7 faces."""
  best_w = jnp.array([1.0, 0.0, 0.0], a.dtype)
  best_f = jnp.inf
  for face in _FACES:
    k = len(face)
    idx = np.array(face)
    kkt = jnp.zeros((k + 1, k + 1), a.dtype)
    kkt = kkt.at[:k, :k].set(2.0 * a[idx][:, idx]).at[:k, k].set(1.0).at[k, :k].set(1.0)
    rhs = jnp.concatenate([2.0 * b[idx], jnp.ones((1,), a.dtype)])
    sol = jnp.linalg.solve(kkt, rhs)
    w = jnp.zeros((3,), a.dtype).at[idx].set(sol[:k])
    f = jnp.dot(w, jnp.dot(a, w, precision=PRECISION) - 2.0 * b, precision=PRECISION)
    ok = jnp.all(jnp.isfinite(w)) & jnp.all(w >= 0) & jnp.isfinite(f)
    take = ok & (f < best_f)
    best_w = jnp.where(take, w, best_w)
    best_f = jnp.where(take, f, best_f)
  return best_w


def _mse_normal_equations(z: jax.Array, t: jax.Array, onehot: jax.Array) -> tuple:
  """``(A, b)`` of the weights' squared error: ``A_kl = sum c_k c_l``, ``b_k = sum c_k y``.

  Per-sample row sums of the two softmaxes' products (the uniform
  component's are ``sum c_k / C`` and ``1 / C``), then one accurate sum over
  the samples (:func:`~jaxcal._src.numerics.segment_sum_accurate`): one
  float32 product over all ``n C`` entries (XLA:CPU, in this program) put
  ``A_33 = n / C`` at 49.74 for 50 on CIFAR-100's 5,000 rows, and the
  ill-conditioned problem gave the weights ``[0.998, 0.002, 0]`` for
  float64's ``[0.962, 0.036, 0.002]``. No ``(3, n, C)`` stack: about 3x the
  logits in temporaries, against 10x.
  """
  c = z.shape[-1]
  s1, s2 = jax.nn.softmax(z / t, axis=-1), jax.nn.softmax(z, axis=-1)
  r1, r2 = jnp.sum(s1, axis=-1) / c, jnp.sum(s2, axis=-1) / c
  u = jnp.full_like(r1, 1.0 / c)
  rows = jnp.stack(
    [
      jnp.sum(s1 * s1, axis=-1),
      jnp.sum(s1 * s2, axis=-1),
      r1,
      jnp.sum(s2 * s2, axis=-1),
      r2,
      u,
      jnp.sum(s1 * onehot, axis=-1),
      jnp.sum(s2 * onehot, axis=-1),
      u,
    ],
    axis=-1,
  )  # (n, 9)
  v = segment_sum_accurate(rows, jnp.zeros(rows.shape[:1], jnp.int32), 1)[0]
  return v[np.array([0, 1, 2, 1, 3, 4, 2, 4, 5])].reshape(3, 3), v[6:]


@functools.partial(jax.jit, static_argnames=("loss",))
def _fit_ets(z, onehot, *, loss, max_iter, tol):
  def temperature_loss(th):
    return _loss_of(jax.nn.softmax(z * jnp.exp(-th), axis=-1), onehot, loss)

  # start at T = 1 or at the log-loss temperature, whichever has the lower loss: where
  # softmax(z) is one-hot in float32 (logits ~1e4) the loss is flat at T = 1 and the fit
  # stayed there (mean squared error 0.156 against 0.103 at the optimum T = 1.1e4)
  nll_theta = jnp.log(_fit_temperature(z, onehot, 200, jnp.asarray(1e-6, z.dtype))[0])
  zero = jnp.zeros((), z.dtype)
  start = jnp.where(temperature_loss(nll_theta) < temperature_loss(zero), nll_theta, zero)
  res = lbfgs_minimize(
    temperature_loss,
    start,
    max_iter=max_iter,
    tol=tol,
    ftol=0.0,  # stop on the gradient only, as the authors' scipy fit does
  )
  t = jnp.exp(res.params)
  num_iter, converged = res.num_iter, res.converged
  if loss == "mse":
    w = _simplex_qp(*_mse_normal_equations(z, t, onehot))  # exact: no iterations
  else:
    comp3 = _components(z, t)  # (3, n, C)

    def wloss(omega):
      q = jnp.tensordot(jax.nn.softmax(omega), comp3, axes=1, precision=PRECISION)
      return _loss_of(q, onehot, "nll")

    wres = lbfgs_minimize(
      wloss, jnp.array([4.0, 0.0, 0.0], z.dtype), max_iter=max_iter, tol=tol, ftol=0.0
    )
    w = jax.nn.softmax(wres.params)
    num_iter, converged = num_iter + wres.num_iter, converged & wres.converged
  return t, w, num_iter, converged


@V.outside_explicit_context
def fit_ensemble_temperature(
  inputs: ArrayLike,
  labels: ArrayLike,
  *,
  from_logits: bool = True,
  loss: str = "mse",
  max_iter: int = 200,
  tol: float = 1e-7,
) -> EnsembleTemperatureScaling:
  """Ensemble temperature scaling: a simplex mixture of TS, the raw softmax and uniform.

  .. math:: q = w_1\\, \\mathrm{softmax}(z / T) + w_2\\, \\mathrm{softmax}(z)
    + w_3 / C, \\quad w \\in \\Delta^2

  ``T`` minimises the loss of ``softmax(z / T)``; then ``w`` minimises the
  loss of ``q`` with ``T`` fixed (module docstring).

  Args:
    inputs: ``(n, C)`` logits (probabilities with ``from_logits=False``,
      whose logs are used as logits).
    labels: ``(n,)`` integer labels.
    from_logits: whether ``inputs`` are logits.
    loss: ``"mse"`` (default, the authors' code: mean squared error over
      all entries) or ``"nll"`` (log loss).
    max_iter: L-BFGS iteration limit of each fit (default 200).
    tol: gradient-norm tolerance (default 1e-7).

  Returns:
    :class:`EnsembleTemperatureScaling` with ``num_iter`` and ``converged``.

  Raises:
    ValueError: bad inputs or labels (eager calls; under ``jax.jit`` /
      ``jax.vmap`` the fitted arrays are NaN and ``converged`` False
      instead), or bad options (``loss``, ``max_iter``, ``tol``).

  Example:
    >>> import jax, jax.numpy as jnp
    >>> z = 3.0 * jax.random.normal(jax.random.key(0), (500, 4))
    >>> rc = fit_ensemble_temperature(z, jax.random.categorical(jax.random.key(1), z / 3.0))
    >>> float(jnp.sum(rc.weights))
    1.0

  Reference: Zhang, Kailkhura & Han (2020), "Mix-n-Match: Ensemble and
  Compositional Methods for Uncertainty Calibration in Deep Learning", ICML,
  arXiv:2003.07329, §3.1 (Eq. 4, ETS).
  """
  if not isinstance(loss, str) or loss not in _LOSSES:
    raise ValueError(f"loss must be one of {_LOSSES}, got {loss!r}")
  z, onehot, ok = fit_arrays(
    inputs, labels, from_logits=from_logits, method="ensemble_temperature", on="logits"
  )
  max_iter, tol = check_solver_options(max_iter, tol, z.dtype)
  t, w, k, conv = _fit_ets(z, onehot, loss=loss, max_iter=max_iter, tol=tol)
  sep = all_top_labels(z, onehot)  # its temperature part has no minimiser: T -> 0
  rc = EnsembleTemperatureScaling(
    temperature=t,
    weights=w,
    num_iter=k,
    converged=conv & ~sep,
    num_classes=int(z.shape[1]),
    from_logits=from_logits,
  )
  warn_if_not_converged(rc, "ensemble temperature scaling", no_optimum=sep)
  return fold_fit(rc, ok)
