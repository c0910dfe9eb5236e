"""Parametric recalibrators fitted by L-BFGS on the log loss.

* ``"temperature"``: ``softmax(z / T)``, ``T = exp(theta)`` fitted over
  ``theta = log T`` (Guo et al. 2017).
* ``"vector"``: ``softmax(a * z + b)`` with per-class ``a, b`` (Guo et al. 2017),
  the spread of ``a`` and ``b`` penalised like ODIR.
* ``"matrix"``: ``softmax(W z + b)`` with ODIR penalties (Kull et al. 2019's
  MS-ODIR); ``"dirichlet"``: the same on ``log p`` (Dir-ODIR).
* ``"platt"``: one-vs-rest Platt scaling ``sigmoid(a_c s_c + b_c)`` on the
  log-odds ``s_c = log(p_c / (1 - p_c))``, rows then normalised.

``z`` are the logits (``from_logits=True``, the default) or ``log p`` for
probability inputs (``softmax(log p) = p``). Objectives are means over
samples, minimised with ``optax.lbfgs`` (zoom line search) inside one
``lax.while_loop``; the result carries ``num_iter`` and ``converged``
(gradient norm below ``tol``, or the objective no longer decreasing at
working precision: :func:`lbfgs_minimize`), and an eager fit that did not
converge warns. Vector, matrix and Dirichlet scaling start from temperature
scaling's map ``I / T`` (the limit of their strongest penalty) and restart
L-BFGS, re-preconditioned, wherever it stalls: a stall counts as converged
only once a fresh start from it gains nothing (:func:`_solve_linear`).

**Regularisation chosen by cross-validation.** Matrix and Dirichlet scaling
have ``C^2 + C`` parameters and overfit a calibration split of a few thousand
samples when unregularised (on CIFAR-100 an unregularised Dirichlet map fits
the calibration split to 97 % accuracy and loses 9 points on the test split);
vector scaling's ``2C`` overfit mildly when classes have few samples. As in
Kull et al. (2019), the penalty strengths are chosen by ``k``-fold
cross-validation of the held-out log loss: each fold's fit is the same
objective with the held-out samples weighted 0 (a mask, so shapes never
change), and the grid runs from the strongest to the weakest penalty with
warm starts, stopping once a strength's held-out loss is 1 % above the best
(or, after some strength has converged, its fits do not converge within
``cv_max_iter`` iterations); the selected strength is refitted on the whole
split. Every fold fit and the final fit are iterations of one
``lax.while_loop`` around one solver, all in one traceable computation.
L-BFGS runs on Jacobi-preconditioned coordinates, which cuts the iterations
of the strongly penalised fits from thousands to tens.

Every fit here is traceable: ``jax.jit(fit_temperature)`` and
``jax.vmap(fit_temperature)`` (over models, or bootstrap resamples) work; value
checks and the convergence warning then give way to shape checks, the
``converged`` flag and NaN parameters for bad data (non-finite inputs, labels
out of range, a missing class where every class is needed).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax
from jax.typing import ArrayLike

from jaxcal._src import validation as V
from jaxcal._src.numerics import PRECISION, lift
from jaxcal._src.recal.base import (
  Recalibrator,
  all_top_labels,
  finish_rows,
  fit_arrays,
  fold_fit,
  pytree_dataclass,
  static_field,
  to_logits,
  warn_if_not_converged,
)

__all__ = [
  "OptimResult",
  "lbfgs_minimize",
  "logistic_newton",
  "check_solver_options",
  "logit_scale",
  "ODIR_GRID",
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

#: Default grid of ODIR strengths ``lambda`` (= ``mu`` unless ``reg_mu`` is
#: given), strongest first, for the cross-validation of matrix and Dirichlet
#: scaling; in the units of the normalised penalty ``lambda / (C (C - 1))``.
ODIR_GRID = (1e5, 1e4, 1e3, 1e2, 1e1, 1.0, 1e-1)


class OptimResult(NamedTuple):
  """Result of :func:`lbfgs_minimize` and :func:`logistic_newton`.

  Attributes:
    params: the minimiser (same structure as ``init``).
    value: the objective at ``params``.
    num_iter: iterations taken.
    converged: whether the solver's stopping rule held within ``max_iter``
      (the gradient norm below ``tol``; for :func:`logistic_newton` also
      every problem settled at working precision).
  """

  params: Any
  value: jax.Array
  num_iter: jax.Array
  converged: jax.Array


def lbfgs_minimize(
  fun: Callable[[Any], jax.Array],
  init: Any,
  *,
  max_iter: int = 500,
  tol: float = 1e-6,
  ftol: float | None = None,
  min_iter: int = 0,
) -> OptimResult:
  """Minimises a smooth function with ``optax.lbfgs`` in a ``lax.while_loop``.

  Stops when the gradient norm falls below ``tol``, when the objective has
  stopped decreasing at working precision (two consecutive steps each lower
  it by at most ``ftol |f|``, after at least ``min_iter`` iterations), or
  after ``max_iter`` iterations; the first two count as converged.
  Traceable (``jit``; under ``vmap`` the loop runs until every member of the
  batch stops).

  Args:
    fun: scalar objective of a pytree of parameters.
    init: initial parameters.
    max_iter: iteration limit (an int, or a traced integer: a loop bound).
    tol: gradient-norm tolerance.
    ftol: relative decrease below which a step counts as stalled (default
      four times the machine epsilon of the objective's dtype).
    min_iter: iterations before a stall may stop the run (static; a start
      with an empty memory takes short steps, which are no stall).

  Returns:
    :class:`OptimResult` ``(params, value, num_iter, converged)``.

  Example:
    >>> import jax.numpy as jnp
    >>> res = lbfgs_minimize(lambda x: jnp.sum((x - 3.0) ** 2), jnp.zeros(2))
    >>> [round(float(a), 4) for a in res.params], bool(res.converged)
    ([3.0, 3.0], True)

  Reference: Nocedal & Wright (2006), Numerical Optimization, Alg. 7.5
  (L-BFGS); optax.lbfgs.
  """
  opt = optax.lbfgs()
  value_and_grad = optax.value_and_grad_from_state(fun)
  dtype = jax.eval_shape(fun, init).dtype
  ftol = 4 * float(jnp.finfo(dtype).eps) if ftol is None else ftol
  inf = jnp.asarray(jnp.inf, dtype)

  def step(carry):
    params, state, _, stalls = carry
    value, grad = value_and_grad(params, state=state)
    updates, state = opt.update(grad, state, params, value=value, grad=grad, value_fn=fun)
    new = optax.tree.get(state, "value")  # the objective at the new parameters
    stalled = value - new <= ftol * jnp.abs(new)
    return optax.apply_updates(params, updates), state, new, jnp.where(stalled, stalls + 1, 0)

  def done(state, stalls):
    small = optax.tree.norm(optax.tree.get(state, "grad")) < tol
    return small | ((stalls >= 2) & (optax.tree.get(state, "count") >= min_iter))

  def cond(carry):
    _, state, _, stalls = carry
    k = optax.tree.get(state, "count")
    return (k == 0) | ((k < max_iter) & ~done(state, stalls))

  carry = (init, opt.init(init), inf, jnp.zeros((), jnp.int32))
  params, state, value, stalls = lax.while_loop(cond, step, carry)
  return OptimResult(params, value, optax.tree.get(state, "count"), done(state, stalls))


#: Step halvings the line search of :func:`logistic_newton` tries before it
#: leaves a problem where it is for that iteration.
_MAX_HALVINGS = 30
#: Largest damping of :func:`logistic_newton`'s step, relative to the
#: largest diagonal entry of the Hessian.
_DAMPING = 1e-3


def logistic_newton(
  features: Sequence[ArrayLike],
  targets: jax.Array,
  init: jax.Array,
  *,
  max_iter: int = 100,
  tol: float = 1e-6,
) -> OptimResult:
  """Fits a batch of small logistic regressions by Newton's method with backtracking.

  Problem ``b`` (an index of the batch shape) minimises its mean log loss

  ``f_b(w) = (1/n) sum_i softplus(u_ib) - t_ib u_ib``,  ``u_ib = sum_k w_bk x_ibk``.

  Newton runs in standardised coordinates, so that it is affine invariant:
  per problem, each array feature becomes ``x'_j = (x_j - m_j) / d_j``, with
  ``m_j`` its mean and ``d_j`` its RMS deviation over the samples (without
  an intercept ``x'_j = x_j / d_j``, ``d_j`` its RMS). ``init`` is mapped
  there and the weights back, exactly: ``w_j = w'_j / d_j`` and ``w_0 = w'_0
  - sum_j w'_j m_j / (d_j v_0)`` for the intercept ``x_0 = v_0``, the first
  nonzero number among the features, else the first feature constant over
  the samples by its shape (last axis of size 1, or a number under
  ``jax.jit``), where its value is nonzero. A feature whose spread is zero
  (a zero feature) or within the rounding of its mean (``64 eps |m_j|``),
  and a constant one, stays as it is. Features ``c x + e`` then take the
  steps of ``x`` from the corresponding start: the per-class log-odds of
  CIFAR-10 logits times ``1e-3`` are nearly constant, so nearly collinear
  with the intercept, and Platt scaling on them converges in 8 iterations,
  where in the raw coordinates the damping swamped ``H_b``'s small
  eigenvalue and 500 iterations reached a scale of 208 against the
  optimum's 1280, even in float64.

  Each iteration takes the damped Newton step ``(H_b + mu_b I)^{-1} g_b`` of
  every problem, in the standardised features: its ``k x k`` Hessian ``H_b =
  (1/n) sum_i s_ib x_ib x_ib^T`` (``s = q (1 - q)``, ``q = sigmoid(u)``),
  its gradient ``g_b = (1/n) sum_i (q_ib - t_ib) x_ib`` and ``mu_b =
  lambda_b min(||g_b||, 1e-3 max_k H_bkk)``, which bounds the step where
  separable outcomes make ``H_b`` singular and vanishes with the gradient at
  the optimum. ``lambda_b`` starts at 1 and, as in Levenberg-Marquardt, is
  divided by 4 (down to ``2^-10``) after an unshortened step that lowered
  ``f_b`` by at least a quarter of ``g_b . step`` and multiplied by 4 (up to
  1) after a step that had to be shortened or that would settle the problem
  (below), which settles only at full damping: where the loss keeps falling
  along a direction of vanishing curvature (beta calibration's free fit of
  a class seen once) the steps lengthen instead of crawling at about unit
  length, and where two features are nearly collinear the damping no
  longer swamps the small curvature between them (beta calibration of
  CIFAR-10 logits times ``1e-3``: 14 iterations, not 400). The step is
  halved until it satisfies Armijo's condition up to the rounding of ``f_b``
  (``64 eps |f_b|``; a step predicted to gain less is taken whole) or, after
  :data:`_MAX_HALVINGS` halvings, not taken. A feature that is zero for a
  problem leaves its weight at ``init`` (a unit diagonal stands in for the
  zero row of ``H_b``); where the solve fails the step is the gradient.

  A problem has settled, at its optimum to working precision, once its step
  changes no standardised weight beyond the rounding, or no step lowers its
  loss beyond the rounding though more was predicted (where a separable
  problem, whose loss falls as its weights grow, ends in float32); it then
  stays where it is. The loop stops, converged, when the norm of all the
  gradients together is below ``tol`` both in the original weights (the
  gradient of ``sum_b f_b``, as :func:`lbfgs_minimize` would see it) and in
  the standardised ones (so that a feature of tiny scale, whose raw gradient
  is tiny anywhere, is not taken for converged at ``init``), or every
  problem has settled, and otherwise after ``max_iter`` iterations. Newton
  converges in a handful of iterations where a quasi-Newton method on the
  summed loss needs dozens (beta calibration of CIFAR-10: 8 against 53
  L-BFGS iterations). Traceable; the samples are the last axis (the sums
  over them are row reductions, twice as fast on the CPU as over a leading
  axis).

  Args:
    features: ``k`` arrays (or Python numbers) broadcastable to
      ``(*batch, n)``: ``x_bik`` for ``k = 0, 1, ...`` (a number, usually 1,
      for an intercept: an array of ones is a feature like any other, not
      centred on, and a nearly constant feature beside it converges slowly).
    targets: ``t``, broadcastable to ``(*batch, n)``, in ``[0, 1]``.
    init: ``(*batch, k)`` starting weights, in the loss's dtype.
    max_iter: iteration limit (an int, or a traced integer: a loop bound).
    tol: tolerance on the gradient norm (original and standardised).

  Returns:
    :class:`OptimResult` ``(w (*batch, k), sum_b f_b(w), num_iter, converged)``.

  Example:
    >>> import jax, jax.numpy as jnp
    >>> x = jax.random.normal(jax.random.key(0), (1, 2000))
    >>> u = jax.random.uniform(jax.random.key(1), (1, 2000))
    >>> t = (u < jax.nn.sigmoid(2 * x - 1)).astype(x.dtype)  # slope 2, intercept -1
    >>> res = logistic_newton((x, 1.0), t, jnp.zeros((1, 2)))
    >>> bool(res.converged), int(res.num_iter) <= 8, [round(float(v), 1) for v in res.params[0]]
    (True, True, [1.9, -0.9])

  Reference: Nocedal & Wright (2006), Numerical Optimization, §3.1 (Alg. 3.1,
  backtracking) and §3.3 (Newton's method); Hastie, Tibshirani & Friedman
  (2009), The Elements of Statistical Learning, §4.4.1 (Newton's method for
  logistic regression); Li, Fukushima, Qi & Yamashita (2004), Regularized
  Newton methods for convex minimization problems with singular solutions,
  Comput. Optim. Appl. 28 (damping by the gradient norm).
  """
  k = len(features)
  dtype = init.dtype
  batch = init.shape[:-1]
  rank = len(batch) + 1  # (*batch, n): every array brought to it (no rank promotion)
  t = lift(jnp.asarray(targets, dtype), rank)
  xs = [lift(jnp.asarray(x, dtype), rank) for x in features]
  slack = 64 * float(jnp.finfo(dtype).eps)  # relative rounding of a mean of n >= 0 terms

  # Standardised coordinates (static structure, traced values). The intercept:
  # the first nonzero number among the features, else the first feature
  # constant over the samples by its shape (jit turns numbers into arrays);
  # centring uses it where its value is nonzero.
  const = [x.ndim == 0 or x.shape[-1] == 1 for x in xs]
  number = [isinstance(x, (int, float, np.integer, np.floating)) for x in features]
  i0 = next((j for j in range(k) if number[j] and features[j] != 0), None)
  if i0 is None:
    i0 = next((j for j in range(k) if const[j] and not number[j]), None)
  v0 = None if i0 is None else xs[i0] if xs[i0].ndim == 0 else xs[i0][..., 0]
  # each array feature: x' = (x - m) / d with m = a mn, d = a rn, a = max |x|
  # (the moments of x / a can neither overflow nor underflow); a feature
  # whose spread is zero or within the rounding of its mean stays as it is
  # (a, mn, rn = 1, 0, 1): a zero feature keeps its weight at init
  moments = {}
  for j in range(k):
    if const[j]:
      continue
    a = jnp.max(jnp.abs(xs[j]), axis=-1, keepdims=True)
    a = jnp.where((a > 0) & jnp.isfinite(a), a, 1.0)
    xn = xs[j] / a
    mn = jnp.zeros_like(a)
    if v0 is not None:
      mn = jnp.where((v0 != 0)[..., None], jnp.mean(xn, axis=-1, keepdims=True), 0.0)
    rn = jnp.sqrt(jnp.mean(jnp.square(xn - mn), axis=-1, keepdims=True))
    use = rn > slack * jnp.abs(mn)  # false where rn = 0
    a, mn, rn = jnp.where(use, a, 1.0), jnp.where(use, mn, 0.0), jnp.where(use, rn, 1.0)
    xs[j] = jnp.where(use, (xn - mn) / rn, xs[j])
    moments[j] = tuple(jnp.broadcast_to(v[..., 0], batch) for v in (a, mn, rn))
  if v0 is not None:
    v0 = jnp.broadcast_to(v0, batch)
    v0 = jnp.where(v0 != 0, v0, 1.0)  # where it is 0, every mn is 0

  def to_standard(w):
    # w'_j = d_j w_j,  w'_0 = w_0 + sum_j m_j w_j / v0
    out = [w[..., j] for j in range(k)]
    for j, (a, mn, rn) in moments.items():
      out[j] = w[..., j] * a * rn
      if v0 is not None:
        out[i0] = out[i0] + w[..., j] * a * mn / v0
    return jnp.stack(out, axis=-1)

  def from_standard(w):
    # the inverse: w_j = w'_j / d_j,  w_0 = w'_0 - sum_j (m_j / d_j) w'_j / v0
    out = [w[..., j] for j in range(k)]
    for j, (a, mn, rn) in moments.items():
      out[j] = w[..., j] / rn / a
      if v0 is not None:
        out[i0] = out[i0] - w[..., j] / rn * mn / v0
    return jnp.stack(out, axis=-1)

  # the chain rule back through w' = M w: g = M^T g' (to_standard's transpose)
  transpose = jax.linear_transpose(to_standard, init)

  def original_gradient(g):
    return transpose(g)[0]

  def linear(w):
    return sum(w[..., j, None] * xs[j] for j in range(k))

  def losses(u):
    # softplus(u) - t u with max(u, 0) - t u first: exact for t in {0, 1},
    # so the loss rounds relative to its own size and not to |u|'s
    return jnp.mean(jnp.maximum(u, 0) - t * u + jnp.log1p(jnp.exp(-jnp.abs(u))), axis=-1)

  def newton(w, lam):
    u = linear(w)
    q = jax.nn.sigmoid(u)
    r, s = q - t, q * (1 - q)
    g = jnp.stack([jnp.mean(r * xs[j], axis=-1) for j in range(k)], axis=-1)
    h = {(j, l): jnp.mean(s * xs[j] * xs[l], axis=-1) for j in range(k) for l in range(j, k)}
    hess = jnp.stack(
      [jnp.stack([h[min(j, l), max(j, l)] for l in range(k)], axis=-1) for j in range(k)], axis=-2
    )
    diag = jnp.diagonal(hess, axis1=-2, axis2=-1)
    # + mu_b I: a Hessian made singular by (near-)separable outcomes still
    # gives a bounded step, and near the optimum the damping vanishes with
    # the gradient (quadratic convergence kept)
    gnorm = jnp.sqrt(jnp.sum(g * g, axis=-1, keepdims=True))
    damp = lam[..., None] * jnp.minimum(gnorm, _DAMPING * jnp.max(diag, axis=-1, keepdims=True))
    damp = damp + jnp.where(diag > 0, 0.0, 1.0)
    eye = lift(jnp.eye(k, dtype=dtype), rank + 1)
    step = jnp.linalg.solve(hess + damp[..., None] * eye, g[..., None])[..., 0]
    slope = jnp.sum(g * step, axis=-1)
    ok = jnp.all(jnp.isfinite(step), axis=-1) & (slope > 0)
    step = jnp.where(ok[..., None], step, g)
    return losses(u), g, step, jnp.where(ok, slope, jnp.sum(g * g, axis=-1))

  def line_search(w, f0, step, slope, settled):
    def cond(c):
      j, _, accepted, _ = c
      return (j < _MAX_HALVINGS) & ~jnp.all(accepted)

    def body(c):
      j, alpha, accepted, f_at = c
      f = losses(linear(w - alpha[..., None] * step))
      good = ~accepted & (f <= f0 - 1e-4 * alpha * slope + slack * jnp.abs(f0))
      accepted = accepted | good
      return j + 1, jnp.where(accepted, alpha, alpha / 2), accepted, jnp.where(good, f, f_at)

    # a step whose predicted decrease is below the loss's rounding is taken whole
    whole = slope <= slack * jnp.abs(f0)
    start = (jnp.zeros((), jnp.int32), jnp.ones(f0.shape, dtype), whole | settled, f0)
    _, alpha, accepted, f_at = lax.while_loop(cond, body, start)
    # settled: at the working precision's optimum, either the step changes no
    # weight beyond its rounding, or no step lowered the loss by more than
    # the loss's rounding though more was predicted (a separable problem,
    # whose loss falls as its weights grow, ends there in float32); either
    # under a weakened damping only strengthens it (a nearly singular
    # problem's long step can fail, or gain nothing visible, where the fully
    # damped steps still make progress)
    fixed = whole & jnp.all(jnp.abs(step) <= slack * (jnp.abs(w) + 1), axis=-1)
    stalled = ~whole & (~accepted | (f_at > f0 - 1e-4 * alpha * slope))
    return jnp.where(accepted, alpha, 0.0), fixed | stalled, f_at

  def iterate(c):
    w, it, (f0, g, step, slope), settled, lam = c
    alpha, now, f_at = line_search(w, f0, step, slope, settled)
    settled = settled | (now & (lam >= 1))  # and stays where it is
    w = w - jnp.where(settled, 0.0, alpha)[..., None] * step
    good = ~now & (alpha == 1) & (f0 - f_at >= 0.25 * slope)
    lam = jnp.where((alpha < 1) | now, jnp.minimum(4 * lam, 1.0), lam)
    lam = jnp.where(good, jnp.maximum(lam / 4, 2.0**-10), lam)
    return w, it + 1, newton(w, lam), settled, lam

  def norms(g):
    # squared gradient norms in the standardised and in the original weights
    g0 = original_gradient(g)
    return jnp.sum(g * g), jnp.sum(g0 * g0)

  def small(g):
    return jnp.all(jnp.stack(norms(g)) < tol * tol)

  def cond(c):
    _, it, (_, g, _, _), settled, _ = c
    large = jnp.any(jnp.stack(norms(g)) >= tol * tol)  # false for NaN: stop
    return (it < max_iter) & large & ~jnp.all(settled)

  w = to_standard(init)
  lam = jnp.ones(batch, dtype)
  start = (w, jnp.zeros((), jnp.int32), newton(w, lam), jnp.zeros(batch, bool), lam)
  w, it, (f, g, _, _), settled, _ = lax.while_loop(cond, iterate, start)
  return OptimResult(from_standard(w), jnp.sum(f), it, small(g) | jnp.all(settled))


def _nll_per_sample(logits: jax.Array, onehot: jax.Array) -> jax.Array:
  """``(n,)`` log loss of ``softmax(logits)``."""
  return -jnp.sum(onehot * jax.nn.log_softmax(logits, axis=-1), axis=-1)


#: The largest iteration limit: the solvers count iterations in int32.
_MAX_ITER_LIMIT = int(np.iinfo(np.int32).max)


def check_solver_options(max_iter: Any, tol: Any, dtype: Any) -> tuple[int, jax.Array]:
  """Validates the L-BFGS options of a fit: ``(max_iter, tol)`` as an int and a scalar array.

  Raises:
    ValueError: ``max_iter`` is not an int in ``[1, 2^31 - 1]`` or ``tol`` not a finite
      number ``> 0``.
  """
  # an int32 loop counter: a larger limit wrapped to a negative one under x64
  max_iter = V.check_int_option(max_iter, "max_iter", minimum=1, maximum=_MAX_ITER_LIMIT)
  return max_iter, jnp.asarray(V.check_float_option(tol, "tol", positive=True), dtype)


# ---------------------------------------------------------------------------
# Temperature scaling


@pytree_dataclass
class TemperatureScaling(Recalibrator):
  """``softmax(z / T)`` with a fitted temperature ``T > 0``.

  Attributes:
    temperature: scalar ``T``.
    num_iter: L-BFGS iterations.
    converged: whether L-BFGS stopped by its rule (:func:`lbfgs_minimize`:
      gradient norm below ``tol``, or two steps that no longer lowered the
      objective at working precision) within ``max_iter``; False too when
      the split has no optimum (every label the top label of its row: the
      log loss falls as ``T -> 0``).
    num_classes: ``C`` seen at fit time (static).
  """

  method = "temperature"
  shapes = {"temperature": (), "num_iter": (), "converged": ()}
  value_rules = {"temperature": ("positive",)}
  temperature: jax.Array
  num_iter: jax.Array
  converged: jax.Array
  num_classes: int = static_field()

  def apply(self, inputs: jax.Array) -> jax.Array:
    z = to_logits(inputs, self.from_logits)
    return jax.nn.softmax(z / self.temperature.astype(z.dtype), axis=-1)


def logit_scale(z: jax.Array) -> jax.Array:
  """The logits' spread: ``s = mean_ir |z_ir - mean_r z_ir|``; 1 where it is 0 or not finite.

  Temperature fits start at ``T = s``: ``c z`` then starts at ``c s``, and the
  fit of ``c z`` is the fit of ``z`` with ``T`` times ``c``. From ``T = 1``,
  logits of size 1e-5 left the log loss flat to working precision (its
  gradient in ``log T`` 7e-5), two steps that barely lowered it counted as
  converged, and the fit returned ``T = 1.0`` (uniform predictions, test log
  loss 2.30 against 0.196 on CIFAR-10) with ``converged`` True.

  Example:
    >>> import jax.numpy as jnp
    >>> float(logit_scale(jnp.array([[1.0, 3.0], [0.0, 0.0]])))
    0.5
  """
  s = jnp.mean(jnp.abs(z - jnp.mean(z, axis=-1, keepdims=True)))
  return jnp.where(jnp.isfinite(s) & (s > 0), s, jnp.ones((), s.dtype))


@jax.jit  # max_iter traced: another limit reuses the program
def _fit_temperature(z, onehot, max_iter, tol):
  def loss(theta):
    return jnp.mean(_nll_per_sample(z * jnp.exp(-theta), onehot))

  res = lbfgs_minimize(loss, jnp.log(logit_scale(z)), max_iter=max_iter, tol=tol)
  return jnp.exp(res.params), res.num_iter, res.converged


@V.outside_explicit_context
def fit_temperature(
  inputs: ArrayLike,
  labels: ArrayLike,
  *,
  from_logits: bool = True,
  max_iter: int = 200,
  tol: float = 1e-6,
) -> TemperatureScaling:
  """Temperature scaling: ``T = argmin_T NLL(softmax(z / T))``, fitted over ``log T``.

  .. math::
    \\hat T = \\exp \\arg\\min_\\theta \\frac1n \\sum_i
      -\\log \\mathrm{softmax}(z_i e^{-\\theta})_{y_i}

  L-BFGS starts at the logits' spread (:func:`logit_scale`), so the fit is
  scale-equivariant: logits ``c z`` give ``c T``. Traceable:
  ``jax.vmap(fit_temperature)(logits, labels)`` fits a batch of models (or
  bootstrap resamples) in one compiled call. Differentiable in forward mode
  (``jax.jvp`` / ``jax.jacfwd``: ``dT/dz`` matches central differences and the
  implicit-function value); reverse mode (``jax.grad``) raises JAX's error
  for a ``while_loop`` with a dynamic bound.

  Args:
    inputs: ``(n, C)`` logits (probabilities with ``from_logits=False``).
    labels: ``(n,)`` integer labels.
    from_logits: whether ``inputs`` are logits (default True).
    max_iter: L-BFGS iteration limit (default 200).
    tol: gradient-norm tolerance (default 1e-6).

  Returns:
    :class:`TemperatureScaling` with ``num_iter`` and ``converged``.

  Raises:
    ValueError: bad inputs or options (eager calls; under ``jax.jit`` /
      ``jax.vmap`` bad inputs or labels give a NaN temperature and
      ``converged`` False instead).

  Example:
    >>> import jax, jax.numpy as jnp
    >>> z = 3.0 * jax.random.normal(jax.random.key(0), (500, 4))
    >>> y = jax.random.categorical(jax.random.key(1), z / 3.0)
    >>> rc = fit_temperature(z, y)
    >>> 2.0 < float(rc.temperature) < 4.5, bool(rc.converged)
    (True, True)
    >>> batch = jax.vmap(fit_temperature)(jnp.stack([z, 2 * z]), jnp.stack([y, y]))
    >>> batch.temperature.shape
    (2,)

  Reference: Guo, Pleiss, Sun & Weinberger (2017), "On calibration of modern
  neural networks", ICML, arXiv:1706.04599, §4.2.
  """
  z, onehot, ok = fit_arrays(
    inputs, labels, from_logits=from_logits, method="temperature", on="logits"
  )
  max_iter, tol = check_solver_options(max_iter, tol, z.dtype)
  t, k, conv = _fit_temperature(z, onehot, max_iter, tol)
  sep = all_top_labels(z, onehot)  # no minimiser: T -> 0 (it read converged, T = 0.001)
  rc = TemperatureScaling(
    temperature=t,
    num_iter=k,
    converged=conv & ~sep,
    num_classes=int(z.shape[1]),
    from_logits=from_logits,
  )
  warn_if_not_converged(rc, "temperature scaling", no_optimum=sep)
  return fold_fit(rc, ok)


# ---------------------------------------------------------------------------
# Vector, matrix and Dirichlet scaling: softmax(W z + b)


@pytree_dataclass
class LinearScaling(Recalibrator):
  """``softmax(z W^T + b)``; ``z`` = logits, or log-probabilities (``on_log_probs``).

  The fitted object of ``"matrix"``; :class:`VectorScaling` (diagonal ``W``)
  and :class:`DirichletCalibration` (``on_log_probs=True``) subclass it.

  Attributes:
    weight: ``(C, C)``.
    bias: ``(C,)``.
    reg_lambda: the off-diagonal penalty used (chosen by cross-validation
      unless given).
    reg_mu: the intercept penalty used.
    cv_nll: ``(G,)`` pooled held-out log loss of each grid strength, strongest
      first; ``inf`` where the search stopped before it or its fold fits did
      not converge (``(0,)`` when no cross-validation ran).
    num_iter: L-BFGS iterations of the final fit (not those of the
      temperature fit, of at most 200 iterations, that gives its start).
    converged: whether the final fit converged within ``max_iter``
      iterations: the gradient norm below ``tol``, or L-BFGS stalled
      (:func:`lbfgs_minimize`) and a fresh, re-preconditioned start from
      there (of at least 30 iterations before a stall may end it) no
      longer lowered the objective at working precision. False too when
      no strength's cross-validation fits converged (every ``cv_nll``
      ``inf``: the strongest was fitted on no evidence) or the split has no
      optimum (every label the top label of its row: the unpenalised
      diagonal sharpens without bound).
    on_log_probs: apply to ``log softmax(logits)`` instead of the logits (static).
    num_classes: ``C`` (static).
  """

  method = "matrix"
  shapes = {
    "weight": ("C", "C"),
    "bias": ("C",),
    "reg_lambda": (),
    "reg_mu": (),
    "cv_nll": ("G",),
    "num_iter": (),
    "converged": (),
  }
  weight: jax.Array
  bias: jax.Array
  reg_lambda: jax.Array
  reg_mu: jax.Array
  cv_nll: jax.Array
  num_iter: jax.Array
  converged: jax.Array
  num_classes: int = static_field()
  on_log_probs: bool = static_field(default=False)

  def apply(self, inputs: jax.Array) -> jax.Array:
    z = to_logits(inputs, self.from_logits)
    if self.on_log_probs:
      z = jax.nn.log_softmax(z, axis=-1)
    w = self.weight.astype(z.dtype)
    return jax.nn.softmax(
      jnp.matmul(z, w.T, precision=PRECISION) + lift(self.bias.astype(z.dtype), z.ndim), axis=-1
    )


@pytree_dataclass
class VectorScaling(LinearScaling):
  """Vector scaling ``softmax(a * z + b)`` (``weight = diag(a)``)."""

  method = "vector"


@pytree_dataclass
class DirichletCalibration(LinearScaling):
  """Dirichlet calibration ``softmax(W log p + b)`` (``on_log_probs=True``)."""

  method = "dirichlet"


def _linear_logits(z: jax.Array, w: jax.Array, b: jax.Array, diagonal: bool) -> jax.Array:
  """``z W^T + b``, or ``z * a + b`` when ``diagonal`` (``w`` is then the ``(C,)`` scales)."""
  zw = z * lift(w, z.ndim) if diagonal else jnp.matmul(z, w.T, precision=PRECISION)
  return zw + lift(b, z.ndim)


def _solve_linear(z, onehot, weights, lam, mu, init, diagonal, max_iter, tol) -> OptimResult:
  """``argmin`` of the weighted mean log loss + ODIR penalties (traceable).

  L-BFGS runs in coordinates scaled by the square root of the Hessian's
  diagonal at ``init`` (a Jacobi preconditioner; the minimiser is the same):
  log-probability inputs span orders of magnitude, and the unpenalised
  diagonal next to a strongly penalised off-diagonal makes the problem badly
  conditioned, which costs plain L-BFGS thousands of iterations on C = 100.
  Vector scaling's scales are ``a = t + (d - mean(d))``: the common scale
  ``t`` (temperature scaling's, unpenalised) and the deviations ``d``
  (penalised) get their own curvatures. Preconditioning the scales alone put
  the penalty's ``2 lambda / C`` on every scale, also along the common
  direction the penalty leaves free, so at ``lambda = 1e5`` that direction was
  too flat for float32 to move: the fit stalled at ``a = 1``.

  The diagonal is a good scale only near where it was taken. Where L-BFGS
  stalls (:func:`lbfgs_minimize`) with the gradient above ``tol``, it is
  restarted from there with the diagonal taken anew and an empty memory;
  the fit has converged once such a restart (of at least
  :data:`_ROUND_MIN_ITER` iterations before a stall may end it: an empty
  memory's first steps are short) no longer lowers the objective beyond
  ``16 eps |f|`` (at most :data:`_MAX_ROUNDS` rounds, ``max_iter``
  iterations in all). With a single run counted as converged at its first
  stall, Dirichlet scaling (``lambda = 1``) of 600 CIFAR-10 rows stopped
  8e-5 above the float64 optimum of its objective (1.6e-3 under ``vmap``,
  0.70 apart in a test probability); the restarts take both to 1e-7.
  """
  c = z.shape[1]
  off = 1.0 - jnp.eye(c, dtype=z.dtype)
  # ODIR (full W): lambda / (C (C - 1)) on the off-diagonal; vector scaling: lambda / C on
  # the scales' deviations from their mean (the part beyond temperature scaling).
  lam_n = lam / c if diagonal else lam / max(c * (c - 1), 1)
  mu_n = mu / c
  total = jnp.sum(weights)

  def objective(w, b):
    penalised = w - jnp.mean(w) if diagonal else w * off
    val = jnp.sum(weights * _nll_per_sample(_linear_logits(z, w, b, diagonal), onehot)) / total
    return val + lam_n * jnp.sum(penalised**2) + mu_n * jnp.sum(b**2)

  def scales(params):
    # Jacobi preconditioner: d2/dw_kj^2 of the mean log loss is E[p_k (1 - p_k) z_j^2].
    p0 = jax.nn.softmax(_linear_logits(z, *params, diagonal), axis=-1)
    v = weights[:, None] * p0 * (1.0 - p0) / total  # (n, C)
    lw = jnp.sum(v * z * z, axis=0) if diagonal else jnp.matmul(v.T, z * z, precision=PRECISION)
    lb = jnp.sum(v, axis=0)
    # a floor relative to the log loss's largest curvature, not the penalty's: above a
    # strong penalty's 2 lambda_n it stretched the nearly flat directions of the loss,
    # whose steps then lowered it too little to count (a cross-validation fold at
    # lambda = 1e5 stopped 5e-4 above its optimum)
    floor = jnp.maximum(1e-6 * jnp.maximum(jnp.max(lw), jnp.max(lb)), jnp.finfo(z.dtype).tiny)
    hw = lw + 2.0 * lam_n * (1.0 if diagonal else off)
    hb = lb + 2.0 * mu_n
    sw, sb = jnp.sqrt(jnp.maximum(hw, floor)), jnp.sqrt(jnp.maximum(hb, floor))
    if not diagonal:
      return sw, sb, None
    # the common scale's curvature: d2/dt2 of the mean log loss of z (a + t) + b is
    # E[sum_k p_k z_k^2 - (sum_k p_k z_k)^2]; the deviations': the scales' own
    pz = p0 * z
    ht = jnp.sum(weights * (jnp.sum(pz * z, axis=1) - jnp.sum(pz, axis=1) ** 2)) / total
    return sw, sb, jnp.sqrt(jnp.maximum(ht, floor))

  def to_u(params, sc):
    sw, sb, st = sc
    if diagonal:  # u = (t st, d sw, b sb): the common scale and the scales' deviations
      t0 = jnp.mean(params[0])
      return (t0 * st, (params[0] - t0) * sw, params[1] * sb)
    return (params[0] * sw, params[1] * sb)  # u = (W sw, b sb)

  def from_u(u, sc):
    sw, sb, st = sc
    if diagonal:
      d = u[1] / sw
      return u[0] / st + (d - jnp.mean(d)), u[-1] / sb
    return u[0] / sw, u[-1] / sb

  slack = 16 * float(jnp.finfo(z.dtype).eps)  # a restart's gain that counts as none

  def run(carry):
    params, _, used, rounds, _ = carry
    sc = scales(params)
    f0 = objective(*params)
    res = lbfgs_minimize(
      lambda u: objective(*from_u(u, sc)),
      to_u(params, sc),
      max_iter=max_iter - used,
      tol=tol,
      min_iter=_ROUND_MIN_ITER,
    )
    small = optax.tree.norm(jax.grad(lambda u: objective(*from_u(u, sc)))(res.params)) < tol
    # a stall counts as converged once a fresh, re-preconditioned start gains nothing
    settled = small | (res.converged & (f0 - res.value <= slack * jnp.abs(res.value)))
    return from_u(res.params, sc), res.value, used + res.num_iter, rounds + 1, settled

  def cond(carry):
    _, _, used, rounds, settled = carry
    return ~settled & (used < max_iter) & (rounds < _MAX_ROUNDS)

  zero = jnp.zeros((), jnp.int32)
  carry = (init, jnp.asarray(jnp.inf, z.dtype), zero, zero, jnp.zeros((), bool))
  params, value, used, _, settled = lax.while_loop(cond, run, carry)
  return OptimResult(params, value, used, settled)


#: Most L-BFGS runs (the first and its re-preconditioned restarts) of one
#: :func:`_solve_linear` fit.
_MAX_ROUNDS = 20

#: Iterations of each such run before a stall may end it: a restart's first
#: steps (an empty L-BFGS memory) gain little, and two of them stopped it, so a
#: Dirichlet fit 1.9e-6 above its optimum (6x the restart slack) was settled
#: (10 iterations: 5e-7 above; 30: 5e-8, 141 iterations against 83).
_ROUND_MIN_ITER = 30


def _identity(c: int, dtype, diagonal: bool):
  return (jnp.ones((c,), dtype) if diagonal else jnp.eye(c, dtype=dtype), jnp.zeros((c,), dtype))


def _folds(n: int, k: int, key: jax.Array) -> jax.Array:
  """``(k, n)`` 0/1 masks of ``k`` folds of a random permutation (sizes differ by <= 1)."""
  perm = jax.random.permutation(key, n)
  fold = jnp.zeros((n,), jnp.int32).at[perm].set(jnp.arange(n, dtype=jnp.int32) % k)
  return fold[None, :] == jnp.arange(k, dtype=jnp.int32)[:, None]


#: Default iteration limit of each cross-validation fit. Twice what the
#: converging fits need: at 150, CIFAR-100 ResNet-110's Dirichlet folds at
#: lambda = 100 took 137-150 iterations (the restarts' 30-iteration minimum
#: raised them), so whether one fold converged in time, and with it the selected
#: strength (100 or 1000; test NLL 1.046 or 1.082), was decided by rounding.
#: At 300 the 36 default fits of experiments/recalibrator_defaults.py select what
#: they selected before; the Dirichlet fits on CIFAR-100 take 9-11 s against 7-8 s.
_CV_MAX_ITER = 300

#: The strength search (strongest first) stops at a strength whose held-out log
#: loss exceeds the best so far by this factor: the curve is flat at the strong
#: end (where noise decides the order) and rises steeply once the fit overfits.
_CV_STOP_RATIO = 1.01


@functools.partial(jax.jit, static_argnames=("diagonal", "num_folds"))
def _fit_linear(z, onehot, lams, mus, diagonal, max_iter, tol, cv_max_iter, num_folds, key):
  """Cross-validates ``(lams[g], mus[g])`` (when ``G > 1``), then fits on everything.

  ``max_iter`` and ``cv_max_iter`` are traced (each fit's limit is a loop
  value), and so is the folds' random ``key``: another limit or seed reuses
  the compiled program (a static seed compiled for 1.9 s per new seed).

  The grid runs from the strongest penalty down, each fold's fit warm-started
  from the previous strength's, and stops at the first strength whose
  held-out loss is more than 1 % above the best so far (the weaker ones
  overfit more), or whose fold fits do not all converge within
  ``cv_max_iter`` iterations once some stronger strength has converged
  (weaker penalties converge more slowly still); strengths that do not
  converge before the first one that does are passed over. An unconverged
  strength is never selected (its held-out loss is not that of the final,
  converged fit) and is recorded as ``inf``, like the strengths never
  evaluated. If no strength converged, the strongest is used.

  Every fit (each fold at each strength, then the final one) is one
  iteration of a single loop around one :func:`_solve_linear`, its data
  weights, strengths, start and iteration limit chosen per iteration: the
  program holds one copy of the solver. With the folds batched by ``vmap``
  and the final fit apart (two copies, one of them batched), the first
  ``fit("vector")`` of the embedded CIFAR-10 validation split took 8.0 s
  against 3.6 s now, and ``fit("dirichlet")`` 11.4 against 5.6 s; once
  compiled 2.5 against 0.7 s, as the batched loop ran every fold until the
  slowest had stopped (2 CPU cores, 2026-11-30).
  """
  n, c = z.shape
  # start at temperature scaling's map I / T, the strongest penalty's limit: from the
  # identity, logits x 1000 (softmax one-hot, the Jacobi scales at their floor) stalled
  # 6e-2 above the optimum, from I / T they take 10 iterations
  temperature = _fit_temperature(z, onehot, 200, jnp.asarray(1e-6, z.dtype))[0]
  eye, zeros = _identity(c, z.dtype, diagonal)
  init = (eye / temperature, zeros)
  g_total = lams.shape[0]
  k = num_folds if g_total > 1 else 1
  held = _folds(n, k, key).astype(z.dtype) if g_total > 1 else jnp.zeros((1, n), z.dtype)
  ones = jnp.ones((n,), z.dtype)
  inf = jnp.full((g_total,), jnp.inf, z.dtype)
  big = jnp.asarray(jnp.finfo(z.dtype).max, z.dtype)  # the first strength never stops the search
  zero = jnp.zeros((), jnp.int32)

  def body(carry):
    g, f, starts, total, conv, cv, lowest, search, _ = carry
    final = ~search
    # the first (strongest) on ties, 0 if all inf; int32 as g is (argmin is int64 under x64)
    pick = jnp.where(final, jnp.argmin(cv).astype(jnp.int32), g)
    h = held[f]
    start = jax.tree.map(lambda s, i: jnp.where(final, i, s[f]), starts, init)
    res = _solve_linear(
      z,
      onehot,
      jnp.where(final, ones, 1.0 - h),
      lams[pick],
      mus[pick],
      start,
      diagonal,
      jnp.where(final, max_iter, cv_max_iter),
      tol,
    )
    # a cross-validation fit: its held-out loss, its start for the next strength
    held_nll = jnp.sum(h * _nll_per_sample(_linear_logits(z, *res.params, diagonal), onehot))
    starts = jax.tree.map(lambda s, p: s.at[f].set(p), starts, res.params)
    total, conv = total + held_nll, conv & res.converged
    last = f == k - 1
    val = jnp.where(conv, total / n, jnp.inf)
    # also when unconverged (val = inf) once a strength has converged: until then
    # lowest is the largest float, 1.01 * lowest overflows to inf, and inf > inf is False
    stop = last & ((val > _CV_STOP_RATIO * lowest) | (g + 1 >= g_total))
    cv = jnp.where(last, cv.at[g].set(val), cv)
    lowest = jnp.where(last, jnp.minimum(val, lowest), lowest)
    g, f = jnp.where(last, g + 1, g), jnp.where(last, 0, f + 1)
    total, conv = jnp.where(last, 0.0, total).astype(z.dtype), conv | last
    return g, f, starts, total, conv, cv, lowest, search & ~stop, (res, pick, final)

  def cond(carry):
    *_, (_, _, final_done) = carry  # the final fit has run
    return ~final_done

  starts = jax.tree.map(lambda a: jnp.broadcast_to(a, (k,) + a.shape), init)
  first = (_empty_result(init, z.dtype), zero, jnp.zeros((), bool))
  search = jnp.asarray(g_total > 1)
  carry = (zero, zero, starts, jnp.zeros((), z.dtype), jnp.ones((), bool), inf, big, search, first)
  *_, cv, _, _, (res, best, _) = lax.while_loop(cond, body, carry)
  cv_nll = cv if g_total > 1 else jnp.zeros((0,), z.dtype)
  w, b = res.params
  lam, mu = lams[best], mus[best]
  return (jnp.diag(w) if diagonal else w), b, lam, mu, cv_nll, res.num_iter, res.converged


def _empty_result(params, dtype) -> OptimResult:
  """A placeholder :class:`OptimResult` of ``params``' structure (a loop's initial carry)."""
  return OptimResult(params, jnp.zeros((), dtype), jnp.zeros((), jnp.int32), jnp.zeros((), bool))


class _LinearOptions(NamedTuple):
  """The options shared by :func:`fit_vector`, :func:`fit_matrix` and :func:`fit_dirichlet`."""

  from_logits: bool
  reg_lambda: float | None
  reg_mu: float | None
  reg_grid: Sequence[float]
  num_folds: int
  seed: int
  max_iter: int
  tol: float
  cv_max_iter: int


def _fit_linear_public(
  cls: type[LinearScaling],
  inputs: ArrayLike,
  labels: ArrayLike,
  opts: _LinearOptions,
  *,
  diagonal: bool,
  on_log_probs: bool,
) -> LinearScaling:
  """Checks the options, cross-validates and fits ``cls`` (the body of the three fits)."""
  z, onehot, ok = fit_arrays(
    inputs,
    labels,
    from_logits=opts.from_logits,
    method=cls.method,
    on="logits",
    require_all_classes=True,
  )
  max_iter, tol = check_solver_options(opts.max_iter, opts.tol, z.dtype)
  cv_max_iter = V.check_int_option(
    opts.cv_max_iter, "cv_max_iter", minimum=1, maximum=_MAX_ITER_LIMIT
  )
  seed = V.check_seed(opts.seed)
  reg_mu, reg_grid = opts.reg_mu, opts.reg_grid
  if reg_mu is not None:
    reg_mu = V.check_float_option(reg_mu, "reg_mu", minimum=0.0)
  if opts.reg_lambda is not None:
    grid = (V.check_float_option(opts.reg_lambda, "reg_lambda", minimum=0.0),)
  else:
    if isinstance(reg_grid, np.ndarray | jax.Array) and reg_grid.ndim == 1:
      reg_grid = reg_grid.tolist()  # a (G,) array of strengths is a sequence of them
    if isinstance(reg_grid, (str, bytes)) or not isinstance(reg_grid, Sequence) or not reg_grid:
      raise ValueError(f"reg_grid must be a non-empty sequence of numbers >= 0, got {reg_grid!r}")
    grid = tuple(
      sorted((V.check_float_option(g, "reg_grid", minimum=0.0) for g in reg_grid), reverse=True)
    )
  num_folds = opts.num_folds
  if len(grid) > 1:
    n = z.shape[0]
    num_folds = V.check_int_option(  # the default 5 on a small split too: say what helps
      num_folds,
      "num_folds",
      minimum=2,
      maximum=n,
      hint=f"the cross-validation of reg_lambda needs a sample per fold, and there are n = {n} "
      f"samples; pass num_folds=k with 2 <= k <= {n} (the default is 5), or a fixed "
      "reg_lambda= (or a reg_grid of one strength) to skip the cross-validation",
    )
  mus = grid if reg_mu is None else (reg_mu,) * len(grid)
  if on_log_probs:
    z = jax.nn.log_softmax(z, axis=-1)
  w, b, lam, mu, cv_nll, k, conv = _fit_linear(
    z,
    onehot,
    jnp.asarray(grid, z.dtype),
    jnp.asarray(mus, z.dtype),
    diagonal,
    max_iter,
    tol,
    cv_max_iter,
    int(num_folds),
    V.seed_key(seed),  # made here: any int64 seed, the same folds as a static one
  )
  sep = all_top_labels(z, onehot)  # the diagonal's sharpening is not penalised: no minimiser
  # no strength converged in cross-validation: the strongest was fitted on no evidence
  cv_failed = jnp.all(jnp.isinf(cv_nll)) if cv_nll.shape[0] else jnp.zeros((), bool)
  rc = cls(
    weight=w,
    bias=b,
    reg_lambda=lam,
    reg_mu=mu,
    cv_nll=cv_nll,
    num_iter=k,
    converged=conv & ~sep & ~cv_failed,
    on_log_probs=on_log_probs,
    num_classes=int(z.shape[1]),
    from_logits=opts.from_logits,
  )
  if ok is None and V.is_concrete(w, b) and not bool(_all_finite(w, b)):
    zmax = float(jnp.max(jnp.abs(z)))  # read only for the message
    raise ValueError(
      f"{cls.method} scaling diverged: the fit of finite inputs has non-finite parameters "
      f"(the largest |{'log-probability' if on_log_probs else 'logit'}| is {zmax:.3g}, "
      f"too large for {z.dtype.name}); rescale the inputs or compute in float64 "
      "(jax.enable_x64)"
    )
  warn_if_not_converged(rc, f"{cls.method} scaling", no_optimum=sep, cv_failed=cv_failed)
  return fold_fit(rc, ok)


@jax.jit
def _all_finite(w: jax.Array, b: jax.Array) -> jax.Array:
  """Whether the fitted ``w`` and ``b`` (``(C, C)`` or ``(C,)``, and ``(C,)``) are all finite."""
  return jnp.all(jnp.isfinite(w)) & jnp.all(jnp.isfinite(b))


@V.outside_explicit_context
def fit_vector(
  inputs: ArrayLike,
  labels: ArrayLike,
  *,
  from_logits: bool = True,
  reg_lambda: float | None = None,
  reg_mu: float | None = None,
  reg_grid: Sequence[float] = ODIR_GRID,
  num_folds: int = 5,
  seed: int = 0,
  max_iter: int = 1000,
  tol: float = 1e-5,
  cv_max_iter: int = _CV_MAX_ITER,
) -> VectorScaling:
  """Vector scaling: a per-class scale and bias on the logits, regularised by cross-validation.

  .. math:: q = \\mathrm{softmax}(a \\odot z + b), \\quad
    \\min \\frac1n \\sum_i -\\log q_{i, y_i}
      + \\frac{\\lambda}{C} \\sum_c (a_c - \\bar a)^2 + \\frac{\\mu}{C} \\sum_c b_c^2

  The penalty is the ODIR idea (Kull et al. 2019) applied to vector scaling:
  it shrinks what vector scaling adds to temperature scaling (per-class
  scales around their mean ``a_bar``, and intercepts) and leaves the common
  scale free, so the strong limit is temperature scaling. By default
  ``lambda = mu`` is chosen from ``reg_grid`` by ``num_folds``-fold
  cross-validation of the held-out log loss, then refitted on the whole
  split. ``reg_lambda=0, reg_mu=0`` is Guo et al.'s unregularised vector
  scaling, whose ``2C`` free parameters overfit when classes have few
  samples (on a CIFAR-100 Wide-ResNet, 50 per class, it raises the test log
  loss by 0.007 where the cross-validated fit lowers it).

  Args:
    inputs: ``(n, C)`` logits (probabilities with ``from_logits=False``).
    labels: ``(n,)`` integer labels; every class must occur.
    from_logits: whether ``inputs`` are logits (default True).
    reg_lambda: penalty ``lambda`` on the scales' spread; ``None`` (default):
      cross-validated over ``reg_grid``.
    reg_mu: intercept penalty ``mu``; ``None`` (default): equal to ``lambda``.
    reg_grid: candidate strengths (default :data:`ODIR_GRID`,
      ``1e5 ... 1e-1``).
    num_folds: cross-validation folds (default 5).
    seed: seed of the fold assignment (default 0).
    max_iter: L-BFGS iteration limit of the final fit (default 1000).
    tol: gradient-norm tolerance (default 1e-5; the fit also stops, converged,
      once a fresh start no longer lowers the objective at working precision).
    cv_max_iter: iteration limit of each cross-validation fit (default 300;
      a strength whose fold fits do not converge within it is not selected;
      when none converges the strongest is fitted and ``converged`` is
      False).

  Returns:
    :class:`VectorScaling` (``weight`` is ``diag(a)``) with the chosen
    ``reg_lambda``, ``reg_mu`` and the ``cv_nll`` curve.

  Raises:
    ValueError: bad inputs or options (``num_folds``, the default 5
      included, above the sample count ``n`` when ``reg_lambda`` is
      cross-validated), or a class without a sample (eager calls; under
      ``jax.jit`` / ``jax.vmap`` bad data give NaN parameters and
      ``converged`` False instead).

  Example:
    >>> import jax, jax.numpy as jnp
    >>> z = jax.random.normal(jax.random.key(0), (300, 3))
    >>> rc = fit_vector(z, jax.random.categorical(jax.random.key(1), z), reg_grid=(10.0, 0.1))
    >>> rc(z).shape, rc.cv_nll.shape
    ((300, 3), (2,))

  Reference: Guo, Pleiss, Sun & Weinberger (2017), "On calibration of modern
  neural networks", ICML, arXiv:1706.04599, §4.2 (vector scaling); Kull,
  Perello-Nieto, Kängsepp, Silva Filho, Song & Flach (2019), NeurIPS,
  arXiv:1910.12656, §3.2 (ODIR: penalise the parameters beyond the
  simpler map; 5-fold cross-validation).
  """
  opts = _LinearOptions(
    from_logits, reg_lambda, reg_mu, reg_grid, num_folds, seed, max_iter, tol, cv_max_iter
  )
  return _fit_linear_public(VectorScaling, inputs, labels, opts, diagonal=True, on_log_probs=False)


@V.outside_explicit_context
def fit_matrix(
  inputs: ArrayLike,
  labels: ArrayLike,
  *,
  from_logits: bool = True,
  reg_lambda: float | None = None,
  reg_mu: float | None = None,
  reg_grid: Sequence[float] = ODIR_GRID,
  num_folds: int = 5,
  seed: int = 0,
  max_iter: int = 1000,
  tol: float = 1e-5,
  cv_max_iter: int = _CV_MAX_ITER,
) -> LinearScaling:
  """Matrix scaling on the logits with ODIR regularisation chosen by cross-validation.

  .. math:: q = \\mathrm{softmax}(W z + b), \\quad
    \\min \\frac1n \\sum_i -\\log q_{i, y_i}
      + \\frac{\\lambda}{C(C-1)} \\sum_{i \\ne j} W_{ij}^2 + \\frac{\\mu}{C} \\sum_j b_j^2

  By default ``lambda = mu`` is chosen from ``reg_grid`` by ``num_folds``-fold
  cross-validation of the held-out log loss (MS-ODIR of Kull et al. 2019),
  then refitted on the whole split. ``reg_lambda=0, reg_mu=0`` is Guo et
  al.'s unregularised matrix scaling (it overfits for large ``C``).

  Args:
    inputs: ``(n, C)`` logits (probabilities with ``from_logits=False``).
    labels: ``(n,)`` integer labels; every class must occur.
    from_logits: whether ``inputs`` are logits (default True).
    reg_lambda: off-diagonal penalty ``lambda``; ``None`` (default):
      cross-validated over ``reg_grid``.
    reg_mu: intercept penalty ``mu``; ``None`` (default): equal to ``lambda``.
    reg_grid: candidate strengths (default :data:`ODIR_GRID`,
      ``1e5 ... 1e-1``).
    num_folds: cross-validation folds (default 5, as Kull et al.).
    seed: seed of the fold assignment (default 0).
    max_iter: L-BFGS iteration limit of the final fit (default 1000).
    tol: gradient-norm tolerance (default 1e-5; the fit also stops, converged,
      once a fresh start no longer lowers the objective at working precision).
    cv_max_iter: iteration limit of each cross-validation fit (default 300;
      a strength whose fold fits do not converge within it is not selected;
      when none converges the strongest is fitted and ``converged`` is
      False).

  Returns:
    :class:`LinearScaling` with the chosen ``reg_lambda``, ``reg_mu`` and the
    ``cv_nll`` curve.

  Raises:
    ValueError: bad inputs or options (``num_folds``, the default 5
      included, above the sample count ``n`` when ``reg_lambda`` is
      cross-validated), or a class without a sample (eager calls; under
      ``jax.jit`` / ``jax.vmap`` bad data give NaN parameters and
      ``converged`` False instead).

  Example:
    >>> import jax, jax.numpy as jnp
    >>> z = jax.random.normal(jax.random.key(0), (300, 3))
    >>> rc = fit_matrix(z, jax.random.categorical(jax.random.key(1), z), reg_grid=(10.0, 0.1))
    >>> rc.weight.shape, rc.cv_nll.shape
    ((3, 3), (2,))

  Reference: Guo et al. (2017), arXiv:1706.04599, §4.2 (matrix scaling);
  Kull, Perello-Nieto, Kängsepp, Silva Filho, Song & Flach (2019), "Beyond
  temperature scaling: obtaining well-calibrated multiclass probabilities
  with Dirichlet calibration", NeurIPS, arXiv:1910.12656, §3.2 (ODIR) and
  §5 (MS-ODIR; 5-fold cross-validation of the log loss).
  """
  opts = _LinearOptions(
    from_logits, reg_lambda, reg_mu, reg_grid, num_folds, seed, max_iter, tol, cv_max_iter
  )
  return _fit_linear_public(LinearScaling, inputs, labels, opts, diagonal=False, on_log_probs=False)


@V.outside_explicit_context
def fit_dirichlet(
  inputs: ArrayLike,
  labels: ArrayLike,
  *,
  from_logits: bool = True,
  reg_lambda: float | None = None,
  reg_mu: float | None = None,
  reg_grid: Sequence[float] = ODIR_GRID,
  num_folds: int = 5,
  seed: int = 0,
  max_iter: int = 1000,
  tol: float = 1e-5,
  cv_max_iter: int = _CV_MAX_ITER,
) -> DirichletCalibration:
  """Dirichlet calibration with ODIR, its strength chosen by cross-validation.

  .. math:: q = \\mathrm{softmax}(W \\log p + b), \\quad
    \\min \\frac1n \\sum_i -\\log q_{i, y_i}
      + \\frac{\\lambda}{C(C-1)} \\sum_{i \\ne j} W_{ij}^2 + \\frac{\\mu}{C} \\sum_j b_j^2

  By default ``lambda = mu`` is chosen from ``reg_grid`` by ``num_folds``-fold
  cross-validation of the held-out log loss, as Kull et al. (2019) do, then
  refitted on the whole split (``rc.reg_lambda``, ``rc.cv_nll`` record the
  choice). Pass ``reg_lambda`` (and optionally ``reg_mu``) to skip it.

  Args:
    inputs: ``(n, C)`` logits (probabilities with ``from_logits=False``).
    labels: ``(n,)`` integer labels; every class must occur.
    from_logits: whether ``inputs`` are logits (default True).
    reg_lambda: off-diagonal penalty ``lambda``; ``None`` (default):
      cross-validated over ``reg_grid``.
    reg_mu: intercept penalty ``mu``; ``None`` (default): equal to ``lambda``.
    reg_grid: candidate strengths (default :data:`ODIR_GRID`,
      ``1e5 ... 1e-1``).
    num_folds: cross-validation folds (default 5, as Kull et al.).
    seed: seed of the fold assignment (default 0).
    max_iter: L-BFGS iteration limit of the final fit (default 1000).
    tol: gradient-norm tolerance (default 1e-5; the fit also stops, converged,
      once a fresh start no longer lowers the objective at working precision).
    cv_max_iter: iteration limit of each cross-validation fit (default 300;
      a strength whose fold fits do not converge within it is not selected;
      when none converges the strongest is fitted and ``converged`` is
      False).

  Returns:
    :class:`DirichletCalibration` with the chosen ``reg_lambda``, ``reg_mu``
    and the ``cv_nll`` curve.

  Raises:
    ValueError: bad inputs or options (``num_folds``, the default 5
      included, above the sample count ``n`` when ``reg_lambda`` is
      cross-validated), or a class without a sample (eager calls; under
      ``jax.jit`` / ``jax.vmap`` bad data give NaN parameters and
      ``converged`` False instead).

  Example:
    >>> import jax, jax.numpy as jnp
    >>> z = jax.random.normal(jax.random.key(0), (300, 3))
    >>> rc = fit_dirichlet(z, jax.random.categorical(jax.random.key(1), z), reg_grid=(10.0, 0.1))
    >>> bool(jnp.allclose(rc(z).sum(axis=1), 1.0, atol=1e-5))
    True

  Reference: Kull, Perello-Nieto, Kängsepp, Silva Filho, Song & Flach (2019),
  "Beyond temperature scaling: obtaining well-calibrated multiclass
  probabilities with Dirichlet calibration", NeurIPS, arXiv:1910.12656, §3
  (Dirichlet calibration), §3.2 (ODIR) and §5 (5-fold cross-validation).
  """
  opts = _LinearOptions(
    from_logits, reg_lambda, reg_mu, reg_grid, num_folds, seed, max_iter, tol, cv_max_iter
  )
  return _fit_linear_public(
    DirichletCalibration, inputs, labels, opts, diagonal=False, on_log_probs=True
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


@pytree_dataclass
class PlattScaling(Recalibrator):
  """One-vs-rest Platt scaling ``q_c = sigmoid(a_c s_c + b_c)``, rows normalised.

  Attributes:
    scale, bias: ``(C,)``.
    num_iter: Newton iterations.
    converged: whether the fit converged (:func:`logistic_newton`).
    normalize: divide each row by its sum (static, default True).
    num_classes: ``C`` (static).
  """

  method = "platt"
  shapes = {"scale": ("C",), "bias": ("C",), "num_iter": (), "converged": ()}
  scale: jax.Array
  bias: jax.Array
  num_iter: jax.Array
  converged: jax.Array
  num_classes: int = static_field()
  normalize: bool = static_field(default=True)

  def apply(self, inputs: jax.Array) -> jax.Array:
    s = _log_odds(inputs, self.from_logits)
    a, b = (lift(v.astype(s.dtype), s.ndim) for v in (self.scale, self.bias))
    q = jax.nn.sigmoid(s * a + b)
    return finish_rows(q, self.normalize)


@jax.jit  # max_iter traced: another limit reuses the program
def _fit_platt(s, onehot, max_iter, tol):
  init = jnp.broadcast_to(jnp.array([1.0, 0.0], s.dtype), (s.shape[1], 2))
  res = logistic_newton((s.T, 1.0), onehot.T, init, max_iter=max_iter, tol=tol)
  return (res.params[:, 0], res.params[:, 1]), res.num_iter, res.converged


@V.outside_explicit_context
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
  classes as one batch of Newton fits, :func:`logistic_newton`). Using the
  log-odds of ``p = softmax(z)`` rather than the raw logit ``z_c`` makes the
  fit the same for logit and probability inputs.

  Args:
    inputs: ``(n, C)`` logits (probabilities with ``from_logits=False``).
    labels: ``(n,)`` integer labels; every class must occur.
    from_logits: whether ``inputs`` are logits (default True).
    normalize: divide rows by their sums (default True).
    max_iter: Newton iteration limit (default 500).
    tol: gradient-norm tolerance (default 1e-6).

  Returns:
    :class:`PlattScaling`.

  Raises:
    ValueError: bad inputs or options (``normalize`` not True/False), or a
      class without a sample (eager calls; under ``jax.jit`` / ``jax.vmap``
      bad data give NaN parameters instead).

  Example:
    >>> import jax, jax.numpy as jnp
    >>> z = jax.random.normal(jax.random.key(0), (300, 3))
    >>> rc = fit_platt(z, jax.random.categorical(jax.random.key(1), z))
    >>> bool(jnp.allclose(rc(z).sum(axis=1), 1.0, atol=1e-5))
    True

  Reference: Platt (1999), "Probabilistic outputs for support vector
  machines"; Zadrozny & Elkan (2002), "Transforming classifier scores into
  accurate multiclass probability estimates", KDD (one-vs-rest and
  normalisation).
  """
  normalize = V.check_flag(normalize, "normalize")
  z, onehot, ok = fit_arrays(
    inputs, labels, from_logits=from_logits, method="platt", on="logits", require_all_classes=True
  )
  max_iter, tol = check_solver_options(max_iter, tol, z.dtype)
  s = _log_odds(z, True)
  (a, b), k, conv = _fit_platt(s, onehot, max_iter, tol)
  rc = PlattScaling(
    scale=a,
    bias=b,
    num_iter=k,
    converged=conv,
    normalize=normalize,
    num_classes=int(s.shape[1]),
    from_logits=from_logits,
  )
  warn_if_not_converged(rc, "Platt scaling")
  return fold_fit(rc, ok)
