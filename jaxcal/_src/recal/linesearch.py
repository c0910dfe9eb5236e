"""Backtracking Armijo line search: the project's only use of jaxopt.

Imported only by patching, which ``jaxcal.recalibrate`` loads on first use,
so ``import jaxcal.recalibrate`` does not import jaxopt.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

with warnings.catch_warnings():  # "JAXopt is no longer maintained": pinned, used only here
  warnings.simplefilter("ignore", DeprecationWarning)
  import jaxopt

__all__ = ["armijo_stepsize"]


def armijo_stepsize(
  fun: Callable[[Any], jax.Array],
  params: Any,
  direction: Any,
  *,
  value: jax.Array,
  grad: Any,
  init_stepsize: jax.Array,
  c1: float = 1e-4,
  decrease_factor: float = 0.5,
  maxiter: int = 30,
) -> tuple[jax.Array, jax.Array]:
  """Largest ``η = init · decrease_factor^k`` with ``fun(x + η d) <= fun(x) + c1 η <g, d>``.

  Wraps ``jaxopt.BacktrackingLineSearch(condition="armijo")``. The gradient
  ``g`` at ``params`` is passed in (it need not be the gradient of ``fun``
  itself: patching passes the Brier gradient and lets ``fun`` project onto
  the simplex), so no automatic differentiation happens. Traceable.

  Args:
    fun: objective of the parameters.
    params: current point ``x`` (a pytree).
    direction: descent direction ``d`` (same structure).
    value: ``fun(params)``.
    grad: gradient ``g`` at ``params`` used in the slope ``<g, d>``.
    init_stepsize: first trial step.
    c1: Armijo constant.
    decrease_factor: step shrink factor per rejected trial.
    maxiter: trials before giving up.

  Returns:
    ``(stepsize, failed)``: the accepted step (the last trial when
    ``failed``), and whether no trial satisfied the condition.

  Example:
    >>> import jax.numpy as jnp
    >>> f = lambda x: jnp.sum(x ** 2)
    >>> x = jnp.array([1.0])
    >>> eta, failed = armijo_stepsize(f, x, -2 * x, value=f(x), grad=2 * x, init_stepsize=4.0)
    >>> float(eta), bool(failed)
    (0.5, False)

  Reference: Nocedal & Wright (2006), Numerical Optimization, Alg. 3.1
  (backtracking, sufficient-decrease condition (3.4)); Blondel et al. (2022),
  "Efficient and modular implicit differentiation", NeurIPS,
  arXiv:2105.15183 (jaxopt).
  """

  def value_and_grad(x):  # the slope uses `grad` at the start; later gradients are unused
    return fun(x), jax.tree.map(jnp.zeros_like, x)

  ls = jaxopt.BacktrackingLineSearch(
    fun=fun,
    value_and_grad=value_and_grad,
    condition="armijo",
    c1=c1,
    decrease_factor=decrease_factor,
    maxiter=maxiter,
    max_stepsize=jnp.inf,
    jit=True,
    unroll=False,
  )
  step, state = ls.run(
    jnp.asarray(init_stepsize), params, value=value, grad=grad, descent_direction=direction
  )
  return step, state.failed
