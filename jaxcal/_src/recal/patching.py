"""Iterative patching for utility calibration (Algorithm 1 of the utility paper).

Each step audits the current predictions ``P`` over the witness class
``W(U) = {p -> ξ ū(p) 1[v_u(p) in I]}``: ``U`` is ``U_comb`` (the ``C``
class-wise and ``C`` top-K utilities) by default, plus fresh samples from
``U_lin`` and ``U_rank`` (264 per step in the paper), plus any fixed or
freshly sampled witnesses the caller adds (e.g. gain-matrix utilities, the
paper's App. C.2). It takes the worst witness, with error
``err = (1/n) Σ_i <p_i - Y_i, w(p_i)>``; stops when ``err <= tol`` or after
``max_steps``; otherwise picks ``η`` by a backtracking Armijo line search on
the Brier score of ``Π_Δ(P - η W)`` and sets ``P <- Π_Δ(P - η W)``.

The fitted recalibrator *is* the sequence of patches ``(u, I, ξ, η)``,
replayed on new predictions by :meth:`Patching.apply`. A witness utility is
linear (``ū = a``), rank (``ū_j = θ_{rank(p, j)}``) or a decision utility
(``ū(p) = -l[:, a*(p)]``, ``a*(p) = argmin_a (p l)_a``; gain matrices are
``l = -R``), so a patch stores its kind, a vector (``a`` or ``θ``), a matrix
(``l``), the interval ``[lo, hi]``, ``ξ`` and ``η``.

Scale: the audit calls :func:`jaxcal.utility.uc_sweep`, which splits the
utilities over every local device. The steps run on the device in blocks
(one compiled ``while_loop`` per block, the patches written into
preallocated arrays); the host reads three scalars per block, sizes the next
block to about half a second, and draws a progress bar on stderr when the
fit runs longer than two seconds.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcal._src import validation as V
from jaxcal._src.numerics import PRECISION, lift
from jaxcal._src.progress import Progress
from jaxcal._src.recal.base import (
  Recalibrator,
  _with_host_fields_checked,
  check_inputs,
  check_num_classes,
  fold_fields,
  nan_rows,
  normalize_rows,
  pytree_dataclass,
  static_field,
)
from jaxcal._src.recal.linesearch import armijo_stepsize
from jaxcal._src.scores import brier_per_sample
from jaxcal._src.sorting import sort_descending
from jaxcal._src.utility import families as F
from jaxcal._src.utility.sweep import uc_sweep
from jaxcal._src.utility.uc import uc_from_scores

__all__ = ["Patching", "fit_patching", "project_simplex", "apply_patch"]

#: Witness kinds, by the code stored in :attr:`Patching.kind`.
LINEAR, RANK, DECISION = 0, 1, 2
#: Why a fit stopped, by the code of the loop state.
_REASONS = (
  "running",
  "tol",
  "max_steps",
  "no Brier decrease",
  "bad sample_witnesses draw",
  "line search failed",
)
_BAD_DRAW, _SEARCH_FAILED = 4, 5


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
    >>> [[round(v, 4) for v in row] for row in project_simplex(jnp.array([[0.5, 0.9, -0.2]])).tolist()]
    [[0.3, 0.7, 0.0]]

  Reference: Duchi, Shalev-Shwartz, Singer & Chandra (2008), "Efficient
  projections onto the l1-ball for learning in high dimensions", ICML, Fig. 1.
  """
  c = x.shape[-1]
  u = sort_descending(x, axis=-1)
  css = jnp.cumsum(u, axis=-1) - 1.0
  k = lift(jnp.arange(1, c + 1, dtype=x.dtype), x.ndim)
  rho = jnp.sum(u - css / k > 0, axis=-1, keepdims=True)
  tau = jnp.take_along_axis(css, rho - 1, axis=-1) / rho.astype(x.dtype)
  return jnp.maximum(x - tau, 0.0)


# --------------------------------------------------------------------------
# One patch: witness, update, replay
# --------------------------------------------------------------------------


def _witness(
  p: jax.Array, kind: jax.Array, vec: jax.Array, mat: jax.Array
) -> tuple[jax.Array, jax.Array]:
  """``(ū(p_i), v(p_i))``, each row ``ū`` of a linear, rank or decision utility."""
  branches = [
    lambda: jnp.broadcast_to(vec.astype(p.dtype), p.shape),
    lambda: vec.astype(p.dtype)[F.ranks(p)],
  ]
  if mat.shape[-1]:  # decision witnesses present (K > 0 actions)

    def decision():
      act = jnp.argmin(jnp.dot(p, mat.astype(p.dtype), precision=PRECISION), axis=1)
      return -mat.astype(p.dtype).T[act]

    branches.append(decision)
  ubar = jax.lax.switch(jnp.minimum(kind, len(branches) - 1), branches)
  return ubar, jnp.sum(p * ubar, axis=1)


def apply_patch(p: jax.Array, patch: dict[str, jax.Array]) -> jax.Array:
  """``Π_Δ(P - η ξ ū(P) 1[v(P) in [lo, hi]])`` (rows outside the interval untouched).

  Args:
    p: ``(n, C)`` probabilities.
    patch: ``kind``, ``vec`` ``(C,)``, ``mat`` ``(C, K)``, ``lo``, ``hi``,
      ``xi``, ``eta`` of one patch.

  Returns:
    ``(n, C)`` patched probabilities.
  """
  ubar, v = _witness(p, patch["kind"], patch["vec"], patch["mat"])
  mask = (v >= patch["lo"]) & (v <= patch["hi"])
  moved = project_simplex(p - (patch["eta"] * patch["xi"]) * ubar)
  return jnp.where(mask[:, None], moved, p)


_PATCH_FIELDS = ("kind", "vec", "mat", "lo", "hi", "xi", "eta")


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


@pytree_dataclass
class Patching(Recalibrator):
  """A fitted patch sequence, replayed on new predictions.

  Attributes:
    kind: ``(T,)`` int32 witness kind per patch: 0 linear, 1 rank, 2
      decision (gain matrix).
    vec: ``(T, C)`` the payoff ``a`` (linear) or rank valuation ``θ`` (rank);
      zeros for decision patches.
    mat: ``(T, C, K)`` the loss matrix ``l`` of decision patches (``K = 0``
      when no decision witness was audited); zeros otherwise.
    lo, hi: ``(T,)`` the interval ``[lo, hi]`` of predicted utility; the
      worst interval's ends moved halfway to the nearest calibration values
      outside it (the same calibration samples, robust to re-rounding).
    xi: ``(T,)`` ``±1``, the witness sign.
    eta: ``(T,)`` step sizes.
    errors: ``(T + 1,)`` audited witness error before each step and after
      the last one (on the calibration split).
    briers: ``(T + 1,)`` Brier score before each step and after the last.
    num_iter: number of patches ``T``.
    converged: whether the last audited error is ``<= tol``.
    num_classes: ``C`` (static).
    stop_reason: ``"tol"``, ``"max_steps"``, ``"no Brier decrease"`` or ``"line
      search failed"`` (no trial step of the backtracking search met the
      Armijo condition; its step is not applied) (static).
  """

  method = "patching"
  shapes = {
    "kind": ("T",),
    "vec": ("T", "C"),
    "mat": ("T", "C", "K"),
    "lo": ("T",),
    "hi": ("T",),
    "xi": ("T",),
    "eta": ("T",),
    "errors": ("S",),
    "briers": ("S",),
    "num_iter": (),
    "converged": (),
  }
  kind: jax.Array
  vec: jax.Array
  mat: jax.Array
  lo: jax.Array
  hi: jax.Array
  xi: jax.Array
  eta: jax.Array
  errors: jax.Array
  briers: jax.Array
  num_iter: jax.Array
  converged: jax.Array
  num_classes: int = static_field()
  stop_reason: str = static_field(default="max_steps")

  @property
  def num_steps(self) -> int:
    """The number of patches ``T``."""
    return int(self.eta.shape[0])

  def patches(self) -> dict[str, jax.Array]:
    """The patch fields, each with a leading ``(T,)`` axis."""
    return {f: getattr(self, f) for f in _PATCH_FIELDS}

  def _start(self, x: jax.Array) -> jax.Array:
    """The probabilities of ``x`` in the dtype the patches move them in (fit's and input's)."""
    x = x.astype(jnp.result_type(x.dtype, self.eta.dtype))  # the scan's carry keeps one dtype
    return _start_probs(x, self.from_logits)

  def apply(self, inputs: jax.Array) -> jax.Array:
    p = self._start(inputs)
    return jax.lax.scan(_patch_step, p, self.patches())[0]

  def trajectory(self, inputs: ArrayLike) -> jax.Array:
    """Predictions after ``0, 1, ..., T`` patches: ``(T + 1, n, C)``.

    Under ``jax.jit`` the rows of bad inputs are NaN at every step.

    Args:
      inputs: ``(n, C)`` logits (``from_logits``) or probabilities.

    Returns:
      ``(T + 1, n, C)`` probabilities: the start, then after each patch.

    Raises:
      ValueError: bad inputs (eager calls), or inputs with another number of
        classes than the fit's.

    Example:
      >>> import jax.numpy as jnp
      >>> z = 4.0 * jnp.cos(jnp.arange(1200.0).reshape(300, 4))
      >>> rc = fit_patching(z, jnp.arange(300) % 4, max_steps=3, num_samples=0, progress=False)
      >>> rc.trajectory(z).shape
      (4, 300, 4)
    """
    x = check_inputs(inputs, self.from_logits, rows=True)
    check_num_classes(self, x.shape[1])
    rc = _with_host_fields_checked(self)  # as __call__: a hand-built one's fields
    p = rc._start(x)
    _, qs = jax.lax.scan(_patch_trace_step, p, rc.patches())
    out = jnp.concatenate([p[None], qs])
    if V.is_concrete(x):
      return out
    return fold_fields(jax.vmap(nan_rows, in_axes=(0, None))(out, x), rc)


def _start_probs(x: jax.Array, from_logits: bool) -> jax.Array:
  """The probabilities the patches start from: ``softmax(x)``, or rows of ``x`` over their sums.

  A patch projects only the rows in its interval onto the simplex, so rows of
  probabilities that sum to one within the check's tolerance (or in
  bfloat16) came back as they were when no patch reached them (sums of
  1.0009 after a fit of one patch; every other method returns rows on the
  simplex). Divided by their sums first (:func:`normalize_rows`), as
  temperature scaling's softmax of ``log p`` does.
  """
  return jax.nn.softmax(x, axis=-1) if from_logits else normalize_rows(x)


def _patch_step(q: jax.Array, patch: dict[str, jax.Array]) -> tuple[jax.Array, None]:
  """One patch of :meth:`Patching.apply`'s scan (a module function: an eager scan
  of a new closure on each call compiled again, 0.5-0.8 s a call)."""
  return apply_patch(q, patch), None


def _patch_trace_step(q: jax.Array, patch: dict[str, jax.Array]) -> tuple[jax.Array, jax.Array]:
  """One patch of :meth:`Patching.trajectory`'s scan, keeping the predictions after it."""
  q = apply_patch(q, patch)
  return q, q


# --------------------------------------------------------------------------
# Fitting
# --------------------------------------------------------------------------


class _Witnesses(NamedTuple):
  """Candidate witness utilities of one audit, grouped by kind."""

  linear: jax.Array  # (L, C)
  rank: jax.Array  # (R, C)
  decision: jax.Array  # (D, C, K)


def _group(utilities: Sequence[F.Utility], c: int, dtype) -> _Witnesses:
  """Concatenates utilities of the supported kinds into one :class:`_Witnesses`."""
  lin, rnk, dec = [jnp.zeros((0, c), dtype)], [jnp.zeros((0, c), dtype)], []
  for u in utilities:
    prm = u.params.astype(dtype)
    if u.kind == "linear":
      lin.append(prm)
    elif u.kind == "rank":
      rnk.append(prm)
    elif u.kind == "top_class":
      rnk.append(jnp.broadcast_to(jax.nn.one_hot(0, c, dtype=dtype), (prm.shape[0], c)))
    elif u.kind == "decision":
      dec.append(prm)
    else:
      raise ValueError(
        f"patching witnesses must be linear, rank, top_class or decision (gain-matrix) "
        f"utilities; got kind {u.kind!r}"
      )
  if dec and len({d.shape[-1] for d in dec}) > 1:
    raise ValueError(
      "decision witnesses must all have the same number of actions K, got "
      f"{sorted({int(d.shape[-1]) for d in dec})}"
    )
  decision = jnp.concatenate(dec) if dec else jnp.zeros((0, c, 0), dtype)
  return _Witnesses(jnp.concatenate(lin), jnp.concatenate(rnk), decision)


def _as_batches(utilities: Any, c: int, name: str) -> tuple[F.Utility, ...]:
  """Validates a Utility batch (or a sequence of batches) against ``C``."""
  if utilities is None:
    return ()
  if isinstance(utilities, F.Utility):
    batches = (utilities,)
  elif isinstance(utilities, list | tuple):
    batches = tuple(utilities)
  else:
    raise ValueError(
      f"{name} must be a jaxcal.utility.Utility batch or a list of them, got "
      f"{type(utilities).__name__}"
    )
  for u in batches:
    F.check_utility(u, c, batched=True, name=name)
  return batches


def _family_batches(family: str | None, c: int) -> tuple[F.Utility, ...]:
  if family is None:
    return ()
  from jaxcal._src.utility.sweep import family as family_batches

  return family_batches(family, c)


class _State(NamedTuple):
  p: jax.Array  # (n, C) current predictions
  t: jax.Array  # patches applied
  done: jax.Array  # bool
  reason: jax.Array  # index into _REASONS
  patches: dict[str, jax.Array]  # each (slots, ...), slots a power of two (grown by the host)
  errors: jax.Array  # (slots + 1,)
  briers: jax.Array  # (slots + 1,)


def _brier(p: jax.Array, y: jax.Array) -> jax.Array:
  return jnp.mean(brier_per_sample(p, y))


def _brier_change(q: jax.Array, p: jax.Array, onehot: jax.Array) -> jax.Array:
  """``Brier(q) - Brier(p)`` as ``mean_i Σ_r (q - p)(q + p - 2 Y)``: accurate for tiny steps.

  The difference of the two means is float32 rounding once the true change
  falls below it (``err²/C`` at ``err ~ 1e-3``, C = 100): every trial of the
  line search then failed, and a smaller step only made it worse.
  """
  return jnp.mean(jnp.sum((q - p) * (q + p - 2.0 * onehot), axis=1))


def _audit(p, y, cands: _Witnesses, chunk: int):
  """The worst witness over ``cands``: ``(kind, vec, mat)``."""
  c = p.shape[1]
  vals, kinds = [], []
  for code, params, name in (
    (LINEAR, cands.linear, "linear"),
    (RANK, cands.rank, "rank"),
    (DECISION, cands.decision, "decision"),
  ):
    if params.shape[0]:
      vals.append(uc_sweep(p, y, F.Utility(params, name), min(chunk, params.shape[0])))
      kinds.append(jnp.full((params.shape[0],), code, jnp.int32))
  vals, kinds = jnp.concatenate(vals), jnp.concatenate(kinds)
  best = jnp.argmax(vals)
  kind = kinds[best]
  nl, nr = cands.linear.shape[0], cands.rank.shape[0]
  dt = cands.linear.dtype
  vecs = jnp.concatenate([cands.linear, cands.rank, jnp.zeros((cands.decision.shape[0], c), dt)])
  k = cands.decision.shape[-1]
  mats = jnp.concatenate([jnp.zeros((nl + nr, c, k), dt), cands.decision])
  return kind, vecs[best].astype(p.dtype), mats[best].astype(p.dtype)


def _step(p, y, key, fixed: _Witnesses, scale, cfg):
  """One audit and (if it is kept) one patch.

  Returns ``(err, patch, p_new, brier, ok, failed, lowers)``: ``brier``
  the score of ``p`` (the history), ``failed`` the line search found no
  Armijo step, ``lowers`` the patch lowers the Brier score
  (:func:`_brier_change` below 0).

  ``ok``: the draw of ``sample_witnesses`` (if any) is finite and in ``[-1, 1]``.
  """
  n, c = p.shape
  cands = fixed
  ok = jnp.bool_(True)
  if cfg["num_samples"]:
    k1, k2, key = jax.random.split(key, 3)
    s = cfg["num_samples"]
    cands = cands._replace(
      linear=jnp.concatenate([cands.linear, F.sample_linear(k1, s - s // 2, c).params]),
      rank=jnp.concatenate([cands.rank, F.sample_rank(k2, s // 2, c).params])
      if s // 2  # num_samples = 1: one linear utility and no rank one
      else cands.rank,
    )
  if cfg["sampler"] is not None:
    fresh = _group(_as_tuple(cfg["sampler"](key)), c, p.dtype)
    for a in fresh:  # every draw, not only the one checked before the fit
      ok = ok & F.params_in_range(a)
    cands = _Witnesses(
      *(jnp.concatenate([a, b.astype(a.dtype)]) if b.shape[0] else a for a, b in zip(cands, fresh))
    )
  kind, vec, mat = _audit(p, y, cands, cfg["chunk"])
  # The chosen witness, measured with the same formula the replay uses.
  ubar, v = _witness(p, kind, vec, mat)
  res = uc_from_scores(v, jnp.take_along_axis(ubar, y[:, None], axis=1)[:, 0])
  err = res.value
  xi = -res.sign.astype(p.dtype)
  lo, hi = _cut_points(v, res.lo, res.hi)
  w = xi * ubar * ((v >= lo) & (v <= hi)).astype(p.dtype)[:, None]
  # Step size: backtracking Armijo on Brier(Π(P - ηW)), slope <∇Brier, -W> = -2 err.
  # The search runs on the change of the Brier score from P (0 at P), not on the score
  # itself, whose float32 rounding hid changes below ~1e-7.
  onehot = jax.nn.one_hot(y, c, dtype=p.dtype)
  grad = 2.0 * (p - onehot) / n
  fun = lambda x: _brier_change(project_simplex(x), p, onehot)
  sq = jnp.mean(jnp.sum(w * w, axis=1))
  init = scale.astype(p.dtype) * err / (jnp.maximum(sq, 1e-12) if cfg["quadratic"] else c)
  zero = jnp.zeros((), p.dtype)
  eta, failed = armijo_stepsize(fun, p, -w, value=zero, grad=grad, init_stepsize=init)
  patch = {
    "kind": kind,
    "vec": vec,
    "mat": mat,
    "lo": lo,
    "hi": hi,
    "xi": xi,
    "eta": eta.astype(p.dtype),
  }
  p_new = apply_patch(p, patch)
  lowers = _brier_change(p_new, p, onehot) < 0
  return err, patch, p_new, _brier(p, y), ok, failed, lowers


def _as_tuple(u: Any) -> tuple[F.Utility, ...]:
  return (u,) if isinstance(u, F.Utility) else tuple(u)


@functools.partial(jax.jit, static_argnames=("cfg",), donate_argnames=("state",))
def _run_block(
  state: _State, y, base_key, fixed: _Witnesses, budget, max_steps, tol, scale, cfg
) -> _State:
  """Up to ``budget`` audits (and patches) on the device, stopping when done."""
  slots = state.patches["eta"].shape[0]

  def body(carry):
    s, i = carry
    key = jax.random.fold_in(base_key, s.t)
    err, patch, p_new, b0, ok, failed, lowers = _step(s.p, y, key, fixed, scale, cfg)
    stop_tol = err <= tol
    stop_max = s.t >= max_steps
    stop_brier = ~lowers  # the change itself: a difference of two scores read float32 rounding
    # a failed search's last trial is not an Armijo step, whatever it does to the Brier score
    reason = jnp.where(
      stop_tol,
      1,
      jnp.where(stop_max, 2, jnp.where(failed, _SEARCH_FAILED, jnp.where(stop_brier, 3, 0))),
    )
    reason = jnp.where(ok, reason, _BAD_DRAW)
    reason = reason.astype(s.reason.dtype)  # int64 under x64: the loop carries int32
    keep = reason == 0
    slot = jnp.minimum(s.t, slots - 1)
    patches = {
      f: jnp.where(keep, a.at[slot].set(patch[f].astype(a.dtype)), a) for f, a in s.patches.items()
    }
    new = _State(
      p=jnp.where(keep, p_new, s.p),
      t=s.t + keep.astype(s.t.dtype),
      done=~keep,
      reason=reason,
      patches=patches,
      errors=s.errors.at[s.t].set(err.astype(s.errors.dtype)),
      briers=s.briers.at[s.t].set(b0.astype(s.briers.dtype)),
    )
    return new, i + 1

  def cond(carry):
    s, i = carry
    return ~s.done & (i < budget)

  return jax.lax.while_loop(cond, body, (state, jnp.zeros((), jnp.int32)))[0]


#: Patch slots allocated before the first block (then doubled as needed).
_FIRST_SLOTS = 64


def _grown(state: _State, slots: int) -> _State:
  """``state`` with its patch storage padded (zeros) to ``slots`` patches."""

  def pad(a: jax.Array, rows: int) -> jax.Array:
    return jnp.concatenate([a, jnp.zeros((rows - a.shape[0], *a.shape[1:]), a.dtype)])

  return state._replace(
    patches={f: pad(a, slots) for f, a in state.patches.items()},
    errors=pad(state.errors, slots + 1),
    briers=pad(state.briers, slots + 1),
  )


@jax.jit
def _progress_scalars(state: _State):
  """``(t, done, last audited error)``: the one host read per block."""
  last = jnp.where(state.done, state.t, jnp.maximum(state.t - 1, 0))
  return state.t, state.done, state.errors[last]


@V.outside_explicit_context
def fit_patching(
  inputs: ArrayLike,
  labels: ArrayLike,
  *,
  from_logits: bool = True,
  max_steps: int = 100,
  tol: float = 1e-3,
  family: str | None = "comb",
  num_samples: int = 264,
  witnesses: F.Utility | Sequence[F.Utility] | None = None,
  sample_witnesses: Callable[[jax.Array], F.Utility | Sequence[F.Utility]] | None = None,
  stepsize: str | float = "err_over_c",
  seed: int = 0,
  chunk_size: int | None = None,
  progress: bool = True,
) -> Patching:
  """Fits the patching recalibrator of Algorithm 1 on a calibration split.

  ``P <- Π_Δ(P - η_t w_t(P))`` with ``w_t = ξ ū(P) 1[v_u(P) in I]`` the worst
  witness over the audited utilities, until
  ``err_t = (1/n) Σ <p_i - Y_i, w_t(p_i)> <= tol`` or ``max_steps`` patches.
  ``η_t``: backtracking Armijo search (jaxopt) on the Brier score of
  ``Π_Δ(P - ηW)`` starting at ``err/C`` (Prop. A.1's step, for which the
  Brier score provably drops by ``err²/C``). A step that would not lower the
  Brier score ends the fit, so the Brier score never increases, and so does
  a search in which no trial step meets the Armijo condition (``stop_reason``
  ``"line search failed"``).

  The audited utilities at each step: the finite ``family`` (``U_comb`` by
  default), ``num_samples`` fresh ``U_lin``/``U_rank`` samples, the fixed
  ``witnesses`` and the output of ``sample_witnesses(key)`` (fresh each
  step). Witnesses may be linear, rank, top-class or decision utilities, so
  the gain-matrix classes of the paper's App. C.2 can be patched against:
  ``sample_witnesses=lambda k: utility.sample_aligned_gain(k, 512, C)``.

  Args:
    inputs: ``(n, C)`` logits (or probabilities with ``from_logits=False``).
    labels: ``(n,)`` integer labels.
    from_logits: whether ``inputs`` are logits (default True).
    max_steps: ``T``, the most patches (default 100).
    tol: ``ε``, stop once the worst witness error is at most this
      (default 1e-3).
    family: the finite utility family audited at every step: ``"comb"``
      (default, ``U_CWE ∪ U_topK``), ``"cwe"``, ``"topk"``, ``"tce"``, or
      ``None``.
    num_samples: fresh utilities added at each step (half ``U_lin``, half
      ``U_rank``; default 264, the paper's); 0 adds none.
    witnesses: extra utilities audited at every step: a
      :class:`~jaxcal.utility.Utility` batch or a sequence of batches
      (linear, rank, top_class or decision kinds; default none).
    sample_witnesses: ``key -> Utility`` batch(es) drawn afresh at every step
      (traceable; default none). One draw is made and checked as
      ``witnesses`` are before the fit starts, and every draw of the fit is
      checked for values (finite, in ``[-1, 1]``) on the device.
    stepsize: initial line-search step: ``"err_over_c"`` (default, ``err/C``),
      ``"quadratic"`` (``err / mean ||w||²``, the minimiser of the Brier
      upper bound without projection), or a float multiplying ``err/C``.
      Backtracking tries at most 30 steps (the first and 29 halvings); when
      no trial meets the Armijo condition the fit stops there
      (``stop_reason`` ``"line search failed"``; pass a smaller
      ``stepsize``).
    seed: PRNG seed of the fresh samples (default 0).
    chunk_size: utilities per chunk in the audit (default: automatic).
    progress: draw a progress bar on stderr when the fit runs longer than
      two seconds (default True).

  Returns:
    A :class:`Patching` recalibrator; ``rc(inputs)`` replays the patches.

  Raises:
    ValueError: bad inputs or options, ``witnesses`` or a draw of
      ``sample_witnesses`` that is not a Utility batch (or a list of them)
      for ``C`` classes with parameters in ``[-1, 1]`` (a bad draw during
      the fit raises when the fit stops there), or a call under
      ``jax.jit`` / ``jax.vmap`` (the fit is a host loop).

  Example:
    >>> import jax.numpy as jnp
    >>> z = 4.0 * jnp.cos(jnp.arange(1200.0).reshape(300, 4))   # over-confident logits
    >>> y = jnp.arange(300) % 4
    >>> rc = fit_patching(z, y, max_steps=5, num_samples=0, progress=False)
    >>> rc.num_steps, bool(jnp.all(jnp.diff(rc.briers) < 0)), rc.stop_reason
    (5, True, 'max_steps')

  Reference: Hegazy, Jordan & Dieuleveut (2025), "Scalable utility-aware
  multiclass calibration", App. A (Algorithm 1, Prop. A.1), App. C.1
  (implementation) and App. C.2 (gain-matrix utilities).
  """
  return _fit(
    inputs,
    labels,
    from_logits=from_logits,
    max_steps=max_steps,
    tol=tol,
    family=family,
    num_samples=num_samples,
    witnesses=witnesses,
    sample_witnesses=sample_witnesses,
    stepsize=stepsize,
    seed=seed,
    chunk_size=chunk_size,
    progress=progress,
  )[0]


class _Config(dict):
  """Static loop configuration (hashable, for ``jax.jit`` static arguments)."""

  def __hash__(self):
    return hash(tuple(sorted(self.items(), key=lambda kv: kv[0])))


def _fit(
  inputs,
  labels,
  *,
  from_logits=True,
  max_steps=100,
  tol=1e-3,
  family="comb",
  num_samples=264,
  witnesses=None,
  sample_witnesses=None,
  stepsize="err_over_c",
  seed=0,
  chunk_size=None,
  progress=True,
) -> tuple[Patching, jax.Array]:
  """:func:`fit_patching`, also returning the final calibration predictions."""
  V.require_eager(
    "fit_patching",
    "a host loop over blocks of patches",
    inputs,
    labels,
    instead="the fitted Patching's apply is traceable",
  )
  progress = V.check_flag(progress, "progress")
  x = check_inputs(inputs, from_logits)
  n, c = x.shape
  p = _start_probs(x.astype(jnp.promote_types(x.dtype, jnp.float32)), from_logits)
  y = V.check_labels(labels, n, c)
  # counted in int32 on the device (2**31 raised numpy's OverflowError from inside JAX)
  max_steps = V.check_int_option(max_steps, "max_steps", minimum=0, maximum=2**31 - 1)
  num_samples = V.check_int_option(num_samples, "num_samples", minimum=0, maximum=2**31 - 1)
  seed = V.check_seed(seed)
  tol = V.check_float_option(tol, "tol", minimum=0.0)
  if isinstance(stepsize, str):
    if stepsize not in ("err_over_c", "quadratic"):
      raise ValueError(
        f"stepsize must be 'err_over_c', 'quadratic' or a positive float, got {stepsize!r}"
      )
    quadratic, scale = stepsize == "quadratic", 1.0
  else:
    try:
      scale = V.check_float_option(stepsize, "stepsize", positive=True)
    except ValueError:
      raise ValueError(
        f"stepsize must be 'err_over_c', 'quadratic' or a positive float, got {stepsize!r}"
      ) from None
    quadratic = False
  if family is not None and family not in ("tce", "cwe", "topk", "comb"):
    raise ValueError(f"family must be 'tce', 'cwe', 'topk', 'comb' or None, got {family!r}")
  if sample_witnesses is not None and not callable(sample_witnesses):
    raise ValueError(
      f"sample_witnesses must be a function key -> Utility, got {sample_witnesses!r}"
    )
  fixed = _group(_family_batches(family, c) + _as_batches(witnesses, c, "witnesses"), c, p.dtype)
  k_actions = fixed.decision.shape[-1]
  if sample_witnesses is not None:
    # one eager draw, checked as the fixed witnesses are (kind, shape, C, values in [-1, 1])
    drawn = _as_batches(sample_witnesses(V.seed_key(seed)), c, "sample_witnesses(key)")
    probe = jax.eval_shape(lambda: _group(drawn, c, p.dtype))
    if (
      probe.decision.shape[0] and fixed.decision.shape[0] and probe.decision.shape[-1] != k_actions
    ):
      raise ValueError("sampled and fixed decision witnesses must have the same number of actions")
    if probe.decision.shape[0] and not fixed.decision.shape[0]:
      k_actions = probe.decision.shape[-1]
      fixed = fixed._replace(decision=jnp.zeros((0, c, k_actions), p.dtype))
    total = sum(a.shape[0] for a in probe)
  else:
    total = 0
  total += num_samples + sum(a.shape[0] for a in fixed)
  if total == 0:
    raise ValueError(
      "patching has no witness to audit: give a family, num_samples > 0, witnesses or "
      "sample_witnesses"
    )
  if chunk_size is None:
    from jaxcal._src.utility.sweep import default_chunk_size

    chunk_size = default_chunk_size("decision" if k_actions else "linear", n, c, (c, k_actions))
  chunk = V.check_int_option(chunk_size, "chunk_size", minimum=1)
  cfg = _Config(
    num_samples=num_samples,
    sampler=sample_witnesses,
    chunk=chunk,
    quadratic=quadratic,
  )
  # Patch storage grows with the patches taken (doubling, a power of two: few
  # compilations), up to the power of two >= max_steps; not sized to max_steps
  # up front (a large max_steps with gain-matrix witnesses held GBs unused).
  cap = 1 << max(max_steps - 1, 0).bit_length()
  slots = min(cap, _FIRST_SLOTS)
  state = _State(
    p=jnp.copy(p),  # _run_block donates its state: never the caller's own buffer
    t=jnp.zeros((), jnp.int32),
    done=jnp.zeros((), bool),
    reason=jnp.zeros((), jnp.int32),
    patches={
      "kind": jnp.zeros((slots,), jnp.int32),
      "vec": jnp.zeros((slots, c), p.dtype),
      "mat": jnp.zeros((slots, c, k_actions), p.dtype),
      **{f: jnp.zeros((slots,), p.dtype) for f in ("lo", "hi", "xi", "eta")},
    },
    errors=jnp.zeros((slots + 1,), p.dtype),
    briers=jnp.zeros((slots + 1,), p.dtype),
  )
  base_key = V.seed_key(seed)
  tol_arr = jnp.asarray(tol, p.dtype)
  bar = Progress(max_steps, "patching", enabled=progress)
  budget, done, t = 1, False, 0
  while not done:
    if slots < min(t + budget, cap):
      slots = min(cap, 1 << (t + budget - 1).bit_length())
      state = _grown(state, slots)
    t0 = time.perf_counter()
    state = _run_block(
      state,
      y,
      base_key,
      fixed,
      jnp.asarray(budget, jnp.int32),
      jnp.asarray(max_steps, jnp.int32),
      tol_arr,
      jnp.asarray(scale, p.dtype),
      cfg,
    )
    t_dev, done_dev, err_dev = jax.device_get(_progress_scalars(state))
    t, done = int(t_dev), bool(done_dev)
    bar.update(t, f"err {float(err_dev):.5f}")
    elapsed = time.perf_counter() - t0
    budget = int(np.clip(budget * 0.5 / max(elapsed, 1e-3), 1, 256))
  reason = _REASONS[int(state.reason)]
  if int(state.reason) == _BAD_DRAW:
    bar.close("stopped: a bad draw", done=t)  # the line ends before the error
    raise ValueError(
      f"sample_witnesses drew utilities that are not finite or lie outside [-1, 1] at "
      f"step {t} of the fit: every draw must be a valid Utility batch"
    )
  errors, briers = state.errors[: t + 1], state.briers[: t + 1]
  bar.close(
    f"{reason}: err {float(errors[-1]):.5f}, Brier {float(briers[0]):.5f} -> "
    f"{float(briers[-1]):.5f}",
    done=t,
  )
  patches = {f: a[:t] for f, a in state.patches.items()}
  rc = Patching(
    **patches,
    errors=errors,
    briers=briers,
    num_iter=jnp.asarray(t, jnp.int32),
    converged=errors[-1] <= tol_arr,
    num_classes=c,
    stop_reason=reason,
    from_logits=from_logits,
  )
  return rc, state.p
