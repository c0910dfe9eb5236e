"""Iterative patching for utility calibration (Hegazy et al. 2025, Algorithm 1).

Each step audits the current predictions ``P`` over the witness class
``W(U) = {p -> ξ ū(p) 1[v_u(p) in I]}`` for ``U = U_comb`` (the ``C``
class-wise and ``C`` top-K utilities), optionally plus fresh samples from
``U_lin`` and ``U_rank``; takes the worst witness, with error
``err = (1/n) Σ_i <p_i - Y_i, w(p_i)>``; stops when ``err <= tol`` or after
``max_steps``; otherwise picks ``η`` by a backtracking Armijo line search on
the Brier score of ``Π_Δ(P - η W)`` and sets ``P <- Π_Δ(P - η W)``.

The fitted recalibrator *is* the sequence of patches ``(u, I, ξ, η)``; it is
replayed on new predictions by :meth:`Patching.apply`. Every witness used
here is a linear utility (``ū = a``) or a rank utility (``ū_j = θ_rank(p,j)``),
so one patch stores ``is_rank``, the vector ``a``/``θ``, the interval
``[lo, hi]``, ``ξ`` and ``η``.
"""

from __future__ import annotations

import functools
import time
from typing import ClassVar

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcal._src import validation as V
from jaxcal._src.recal.base import Recalibrator, recalibrator_class, register, to_probs
from jaxcal._src.recal.linesearch import armijo_stepsize
from jaxcal._src.scores import brier_per_sample
from jaxcal._src.sorting import sort_descending
from jaxcal._src.utility import families as F
from jaxcal._src.utility.sweep import default_chunk_size, sweep_results
from jaxcal._src.utility.uc import uc_from_scores

__all__ = ["Patching", "fit_patching", "project_simplex", "apply_patch"]


def project_simplex(x: jax.Array) -> jax.Array:
  """Euclidean projection of each row onto the probability simplex (exact, sort-based).

  ``Π(x) = max(x - τ, 0)`` with ``τ = (Σ_{r <= ρ} u_r - 1) / ρ``, ``u`` the row
  sorted descending and ``ρ = max{r : u_r - (Σ_{s <= r} u_s - 1)/r > 0}``.

  Args:
    x: ``(n, C)`` rows.

  Returns:
    ``(n, C)`` rows on the simplex.

  Example:
    >>> import jax.numpy as jnp
    >>> project_simplex(jnp.array([[0.5, 0.9, -0.2]])).tolist()
    [[0.3..., 0.7..., 0.0]]

  Reference: Duchi et al. (2008), "Efficient projections onto the l1-ball".
  """
  c = x.shape[-1]
  u = sort_descending(x, axis=-1)
  css = jnp.cumsum(u, axis=-1) - 1.0
  k = jnp.arange(1, c + 1, dtype=x.dtype)
  rho = jnp.sum(u - css / k > 0, axis=-1, keepdims=True)
  tau = jnp.take_along_axis(css, rho - 1, axis=-1) / rho.astype(x.dtype)
  return jnp.maximum(x - tau, 0.0)


# --------------------------------------------------------------------------
# One patch: witness, update, replay
# --------------------------------------------------------------------------


def _witness(p: jax.Array, is_rank: jax.Array, vec: jax.Array) -> tuple[jax.Array, jax.Array]:
  """``(ū(p_i), v(p_i))`` of a linear (``ū = vec``) or rank (``ū_j = vec[rank_j]``) utility."""
  ubar = jax.lax.cond(is_rank, lambda: vec[F.ranks(p)], lambda: jnp.broadcast_to(vec, p.shape))
  return ubar, jnp.sum(p * ubar, axis=1)


def apply_patch(p: jax.Array, patch: dict[str, jax.Array]) -> jax.Array:
  """``Π_Δ(P - η ξ ū(P) 1[v(P) in [lo, hi]])`` (rows outside the interval untouched)."""
  ubar, v = _witness(p, patch["is_rank"], patch["vec"])
  mask = (v >= patch["lo"]) & (v <= patch["hi"])
  moved = project_simplex(p - (patch["eta"] * patch["xi"]) * ubar)
  return jnp.where(mask[:, None], moved, p)


_PATCH_FIELDS = ("is_rank", "vec", "lo", "hi", "xi", "eta")


def _cut_points(v: jax.Array, lo: jax.Array, hi: jax.Array) -> tuple[jax.Array, jax.Array]:
  """The interval's ends moved to the midpoints towards the neighbouring values.

  ``[lo, hi]`` holds whole groups of tied ``v`` (the worst interval's
  smallest and largest value). Replaying the patch re-computes ``v``, and on
  GPUs a fused ``sum(p * ū)`` may round differently from the fit's, so a
  threshold *at* a sample's value would flip that sample in or out. Storing
  the midpoints to the nearest values outside (``lo - 1`` / ``hi + 1`` when
  there are none) selects exactly the same training samples with the widest
  margin; on new data the interval extends to those midpoints, like a
  decision-tree split.
  """
  below = jnp.max(jnp.where(v < lo, v, -jnp.inf))
  above = jnp.min(jnp.where(v > hi, v, jnp.inf))
  mid_lo = 0.5 * (below + lo)
  mid_hi = 0.5 * (above + hi)
  lo_cut = jnp.where(jnp.isfinite(below), jnp.where(mid_lo > below, mid_lo, lo), lo - 1.0)
  hi_cut = jnp.where(jnp.isfinite(above), jnp.where(mid_hi < above, mid_hi, hi), hi + 1.0)
  return lo_cut.astype(v.dtype), hi_cut.astype(v.dtype)


@recalibrator_class
@flax.struct.dataclass
class Patching(Recalibrator):
  """A fitted patch sequence, replayed on new predictions.

  Attributes:
    is_rank: ``(T,)`` bool, rank (``True``) or linear witness utility.
    vec: ``(T, C)`` the payoff ``a`` or rank valuation ``θ``.
    lo, hi: ``(T,)`` the interval ``[lo, hi]`` of predicted utility; the
      worst interval's ends moved halfway to the nearest calibration values
      outside it (the same calibration samples, robust to re-rounding).
    xi: ``(T,)`` ``±1``, the witness sign.
    eta: ``(T,)`` step sizes.
    errors: ``(T + 1,)`` audited witness error before each step and after
      the last one (on the calibration split).
    briers: ``(T + 1,)`` Brier score before each step and after the last.
  """

  method: ClassVar[str] = "patching"
  is_rank: jax.Array
  vec: jax.Array
  lo: jax.Array
  hi: jax.Array
  xi: jax.Array
  eta: jax.Array
  errors: jax.Array
  briers: jax.Array

  @property
  def num_steps(self) -> int:
    return int(self.eta.shape[0])

  def apply(self, inputs: jax.Array) -> jax.Array:
    p = to_probs(inputs, self.from_logits)
    patches = {f: getattr(self, f) for f in _PATCH_FIELDS}
    return jax.lax.scan(lambda q, pt: (apply_patch(q, pt), None), p, patches)[0]


# --------------------------------------------------------------------------
# Fitting
# --------------------------------------------------------------------------


def _brier(p: jax.Array, y: jax.Array) -> jax.Array:
  return jnp.mean(brier_per_sample(p, y))


@functools.partial(jax.jit, static_argnames=("num_samples", "chunk", "quadratic"))
def _step(p, y, key, step_scale, *, num_samples, chunk, quadratic):
  n, c = p.shape
  # Audit: the worst witness over U_comb (+ fresh linear/rank samples).
  lin = jnp.eye(c, dtype=p.dtype)
  rnk = F.top_k(jnp.arange(1, c + 1), c).params.astype(p.dtype)
  if num_samples:
    k1, k2 = jax.random.split(key)
    lin = jnp.concatenate([lin, F.sample_linear(k1, num_samples - num_samples // 2, c).params])
    rnk = jnp.concatenate([rnk, F.sample_rank(k2, num_samples // 2, c).params])
  vals = jnp.concatenate(
    [sweep_results("linear", p, y, lin, chunk).value, sweep_results("rank", p, y, rnk, chunk).value]
  )
  best = jnp.argmax(vals)
  is_rank = best >= lin.shape[0]
  vec = jnp.concatenate([lin, rnk])[best]
  # The chosen witness, measured with the same formula the replay uses.
  ubar, v = _witness(p, is_rank, vec)
  res = uc_from_scores(v, jnp.take_along_axis(ubar, y[:, None], axis=1)[:, 0])
  err = res.value
  xi = -res.sign.astype(p.dtype)
  lo, hi = _cut_points(v, res.lo, res.hi)
  mask = (v >= lo) & (v <= hi)
  w = xi * ubar * mask[:, None]
  # Step size: backtracking Armijo on Brier(Π(P - ηW)), slope <∇Brier, -W> = -2 err.
  b0 = _brier(p, y)
  grad = 2.0 * (p - jax.nn.one_hot(y, c, dtype=p.dtype)) / n
  fun = lambda x: _brier(project_simplex(x), y)
  sq = jnp.mean(jnp.sum(w * w, axis=1))
  init = step_scale * err / jnp.where(quadratic, jnp.maximum(sq, 1e-12), c)
  eta, _ = armijo_stepsize(fun, p, -w, value=b0, grad=grad, init_stepsize=init)
  patch = {"is_rank": is_rank, "vec": vec, "lo": lo, "hi": hi, "xi": xi, "eta": eta.astype(p.dtype)}
  p_new = apply_patch(p, patch)
  return err, patch, p_new, b0, _brier(p_new, y)


@register("patching")
def fit_patching(
  inputs: ArrayLike,
  labels: ArrayLike,
  *,
  from_logits: bool = True,
  max_steps: int = 100,
  tol: float = 1e-3,
  num_samples: int = 264,
  stepsize: str | float = "err_over_c",
  seed: int = 0,
  chunk_size: int | None = None,
  verbose: bool = False,
  print_every: int = 10,
) -> Patching:
  """Fits the patching recalibrator of Algorithm 1 on a calibration split.

  ``P <- Π_Δ(P - η_t w_t(P))`` with ``w_t = ξ ū(P) 1[v_u(P) in I]`` the worst
  witness over ``U_comb`` (+ ``num_samples`` fresh ``U_lin``/``U_rank``
  utilities per step), until ``err_t = (1/n) Σ <p_i - Y_i, w_t(p_i)> <= tol``
  or ``max_steps`` patches. ``η_t``: backtracking Armijo search (jaxopt) on
  the Brier score of ``Π_Δ(P - ηW)`` starting at ``err/C`` (Prop. A.1's step,
  for which the Brier score provably drops by ``err²/C``). A step that would
  not lower the Brier score ends the fit, so the Brier score never increases.

  Args:
    inputs: ``(n, C)`` logits (or probabilities with ``from_logits=False``).
    labels: ``(n,)`` integer labels.
    from_logits: whether ``inputs`` are logits.
    max_steps: ``T``, the most patches.
    tol: ``ε``, stop once the worst witness error is at most this.
    num_samples: fresh utilities added to ``U_comb`` at each step (half
      linear, half rank; the paper uses 264); 0 audits ``U_comb`` only.
    stepsize: initial line-search step: ``"err_over_c"`` (``err/C``, Hegazy et al. 2025, App. A),
      ``"quadratic"`` (``err / mean ||w||²``, the minimiser of the Brier
      upper bound without projection), or a float multiplying ``err/C``.
    seed: PRNG seed of the fresh samples.
    chunk_size: utilities per chunk in the audit (default: automatic).
    verbose: print progress every ``print_every`` steps.
    print_every: progress period.

  Returns:
    A :class:`Patching` recalibrator; ``rc(inputs)`` replays the patches.

  Raises:
    ValueError: bad inputs or options.

  Example:
    >>> import jax.numpy as jnp
    >>> from jaxcal._src.recal.base import fit  # public: jaxcal.recalibrate.fit
    >>> z = 4.0 * jnp.cos(jnp.arange(1200.0).reshape(300, 4))   # over-confident logits
    >>> y = jnp.arange(300) % 4
    >>> rc = fit("patching", z, y, max_steps=5, num_samples=0)
    >>> rc.num_steps, bool(jnp.all(jnp.diff(rc.briers) < 0))
    (5, True)

  Reference: Hegazy, Jordan & Dieuleveut (2025), arXiv:2510.25458, App. A (Algorithm 1,
  Prop. A.1) and App. C.1.
  """
  return _fit(
    inputs,
    labels,
    from_logits=from_logits,
    max_steps=max_steps,
    tol=tol,
    num_samples=num_samples,
    stepsize=stepsize,
    seed=seed,
    chunk_size=chunk_size,
    verbose=verbose,
    print_every=print_every,
  )[0]


def _fit(
  inputs,
  labels,
  *,
  from_logits,
  max_steps,
  tol,
  num_samples,
  stepsize,
  seed,
  chunk_size,
  verbose,
  print_every,
) -> tuple[Patching, jax.Array]:
  """:func:`fit_patching`, also returning the final calibration predictions."""
  if from_logits:
    p = jax.nn.softmax(V.check_logits(inputs, "inputs"), axis=-1)
  else:
    p = V.check_probs(inputs, "inputs")
  n, c = p.shape
  p = p.astype(jnp.promote_types(p.dtype, jnp.float32))
  y = V.check_labels(labels, n, c)
  for name, val, lo in (
    ("max_steps", max_steps, 0),
    ("num_samples", num_samples, 0),
    ("print_every", print_every, 1),
  ):
    if isinstance(val, bool) or not isinstance(val, (int, np.integer)) or val < lo:
      raise ValueError(f"{name} must be an int >= {lo}, got {val!r}")
  if not np.isfinite(tol) or tol < 0:
    raise ValueError(f"tol must be a finite number >= 0, got {tol!r}")
  if isinstance(stepsize, str):
    if stepsize not in ("err_over_c", "quadratic"):
      raise ValueError(
        f"stepsize must be 'err_over_c', 'quadratic' or a positive float, got {stepsize!r}"
      )
    quadratic, scale = stepsize == "quadratic", 1.0
  else:
    if not np.isfinite(stepsize) or stepsize <= 0:
      raise ValueError(
        f"stepsize must be 'err_over_c', 'quadratic' or a positive float, got {stepsize!r}"
      )
    quadratic, scale = False, float(stepsize)
  chunk = chunk_size or default_chunk_size("linear", n, c)
  step = functools.partial(
    _step, num_samples=int(num_samples), chunk=int(chunk), quadratic=quadratic
  )

  key = jax.random.PRNGKey(seed)
  patches, errors, briers = [], [], []
  t0 = time.perf_counter()
  reason = "max_steps"
  for t in range(max_steps + 1):
    key, sub = jax.random.split(key)
    err, patch, p_new, b0, b1 = step(p, y, sub, jnp.asarray(scale, p.dtype))
    err, b0, b1 = float(err), float(b0), float(b1)
    errors.append(err)
    briers.append(b0)
    if err <= tol:
      reason = "tol"
      break
    if t == max_steps:
      break
    if not b1 < b0:
      reason = "no Brier decrease"
      break
    patches.append(patch)
    p = p_new
    if verbose and (t + 1) % print_every == 0:
      print(
        f"patching {t + 1:4d}/{max_steps}: err {err:.5f}  Brier {b1:.5f}  "
        f"eta {float(patch['eta']):.3g}  ({time.perf_counter() - t0:.1f}s)",
        flush=True,
      )
  if verbose:
    print(
      f"patching done: {len(patches)} patches ({reason}), err {errors[-1]:.5f}, "
      f"Brier {briers[0]:.5f} -> {briers[-1]:.5f} ({time.perf_counter() - t0:.1f}s)",
      flush=True,
    )

  return _stack(patches, errors, briers, c, p.dtype, from_logits), p


def _stack(patches, errors, briers, c, dtype, from_logits) -> Patching:
  if patches:
    stacked = {f: jnp.stack([pt[f] for pt in patches]) for f in _PATCH_FIELDS}
  else:
    stacked = {
      "is_rank": jnp.zeros((0,), bool),
      "vec": jnp.zeros((0, c), dtype),
      **{f: jnp.zeros((0,), dtype) for f in ("lo", "hi", "xi", "eta")},
    }
  return Patching(
    **stacked,
    errors=jnp.asarray(errors, dtype),
    briers=jnp.asarray(briers, dtype),
    from_logits=from_logits,
  )
