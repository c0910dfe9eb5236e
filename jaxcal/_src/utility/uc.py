"""The worst-interval utility calibration estimator UC (Hegazy, Jordan & Dieuleveut 2025, Eq. 3.2).

``UC(f, u; S) = sup_I |(1/n) Σ_i (u(p_i, y_i) - v_i) 1[v_i in I]|`` over
intervals ``I`` of predicted utility ``v_i = <p_i, ū(p_i)>``.

Sorting the ``v_i`` turns every interval into a contiguous run of the sorted
order, and its sum into a difference ``S_b - S_a`` of prefix sums
``S_k = (1/n) Σ_{sorted position < k} (u - v)``. An interval cannot split a
group of equal ``v``'s, so only ``S_0 = 0``, ``S_n`` and the positions between
distinct ``v`` values count, and ``UC = max S - min S`` over them: ``O(n log n)``
for the sort, ``O(n)`` after it.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from jaxcal._src import validation as V
from jaxcal._src.binning import blocked_cumsum, masked_last, sample_count
from jaxcal._src.sorting import sort_with_payload
from jaxcal._src.utility import families as F

__all__ = ["UCResult", "uc", "uc_from_scores", "ecdf"]


class UCResult(NamedTuple):
  """Result of :func:`uc`.

  Attributes:
    value: the utility calibration error ``UC >= 0``.
    lo: smallest predicted utility in the worst interval.
    hi: largest predicted utility in the worst interval; the interval is
      ``[lo, hi]`` (closed, it holds whole groups of tied ``v``).
    sign: ``+1`` when realised utility exceeds predicted utility on the
      interval (``Σ_I (u - v) = n · value``), ``-1`` when it falls short,
      ``0`` when ``value = 0`` (then ``[lo, hi]`` is arbitrary) and when it
      is NaN (bad input under a transformation). The patching witness
      direction is ``ξ = -sign``.
  """

  value: jax.Array
  lo: jax.Array
  hi: jax.Array
  sign: jax.Array


def uc_from_scores(v: jax.Array, u: jax.Array, *, where: jax.Array | None = None) -> UCResult:
  """The worst interval for predicted utilities ``v`` and realised utilities ``u``.

  Pure core (no validation) behind :func:`uc` and the sweeps:

  .. math::
    \\mathrm{UC} = \\max_k S_k - \\min_k S_k, \\qquad
    S_k = \\frac{1}{n} \\sum_{\\text{sorted position} < k} (u_i - v_i),

  over ``k = 0``, ``n`` and the positions between distinct sorted ``v``.
  One sort (:func:`~jaxcal._src.sorting.sort_with_payload`) and one prefix
  sum: ``O(n log n)``. ``jax.vmap`` over utilities sorts all of them as one
  batch (the sort's strategy is chosen once for the batch).

  UC is not continuous in ``v``: a change of ``v`` as small as float32
  rounding can move a sample across an end of the worst interval, and UC
  by that sample's ``|u_i - v_i| / n``. Products ``v = <p, ū>`` in float32
  and float64 therefore give the same UC on most utilities and differ by
  up to a sample's weight on a few (3 of 1,500 linear utilities at
  ``n = 15,000``, ``C = 1,000``, by at most ``0.48 / n``,
  ``experiments/bench/uc_precision.py``); compare float32 and float64 UC
  with a tolerance of ``2 / n``.

  Args:
    v: ``(n,)`` predicted utilities.
    u: ``(n,)`` realised utilities.
    where: optional ``(n,)`` bool sample mask. A masked-out sample is
      treated exactly as if it were absent: it contributes nothing, ``n``
      becomes the number of True entries, and its ``v``/``u`` (even NaN)
      are never read. None: all samples.

  Returns:
    :class:`UCResult`; all zeros (``sign = 0``) when no sample is left.

  Example:
    >>> import jax.numpy as jnp
    >>> r = uc_from_scores(jnp.array([0.2, 0.8, 0.5]), jnp.array([1.0, 0.0, 0.5]))
    >>> round(float(r.value), 4), int(r.sign)
    (0.2667, 1)

  Reference: Hegazy, Jordan & Dieuleveut (2025), "Scalable Utility-Aware
  Multiclass Calibration", §3.2, Eq. (3.2) and Lemma 3.3 (the empirical UC
  over intervals of predicted utility).
  """
  n = v.shape[0]
  dt = jnp.promote_types(v.dtype, jnp.float32)
  v = v.astype(dt)
  r = u.astype(dt) - v
  if where is not None:
    where = jnp.asarray(where, bool)
    r = jnp.where(where, r, 0)
    v = masked_last(v, where)  # after every sample: S is flat over them
  kept = sample_count(where, n)
  count = jnp.maximum(kept, 1).astype(dt)
  # S is read only between distinct values, so the order among ties is immaterial
  vs, rs = sort_with_payload(v, r)
  s = jnp.concatenate([jnp.zeros((1,), dt), blocked_cumsum(rs)]) / count  # S_0..S_n
  cut = jnp.concatenate([jnp.ones((1,), bool), vs[1:] != vs[:-1], jnp.ones((1,), bool)])
  at_cuts_hi, at_cuts_lo = jnp.where(cut, s, -jnp.inf), jnp.where(cut, s, jnp.inf)
  # the value by plain reductions: a caller that reads only it (the sweeps)
  # never runs the index reductions below, which XLA then drops
  # NaN from the sum, not the reductions: XLA:CPU's max / min over 4,096 or more
  # entries skip a NaN (a bad input's UC read -inf under jit)
  value = jnp.where(jnp.isnan(s[-1]), jnp.nan, jnp.max(at_cuts_hi) - jnp.min(at_cuts_lo))
  kmax = jnp.argmax(at_cuts_hi)  # first maximum: never past the samples
  kmin = jnp.argmin(at_cuts_lo)
  a = jnp.minimum(kmax, kmin)
  b = jnp.maximum(kmax, kmin)
  lo = vs[jnp.minimum(a, n - 1)]
  hi = vs[jnp.clip(b - 1, a, n - 1)]
  if where is not None:  # no sample left: lo = hi = 0, not masked_last's sentinel
    lo, hi = jnp.where(kept > 0, lo, 0), jnp.where(kept > 0, hi, 0)
  sign = jnp.sign(kmax - kmin).astype(jnp.int32)
  return UCResult(value=value, lo=lo, hi=hi, sign=sign)


@jax.jit
def _uc_jit(p, y, utility, where=None):
  prep = F.prepare(utility.kind, p, y)
  v, u = F.predicted_realized(utility.kind, prep, utility.params)
  return uc_from_scores(v, u, where=where)


@V.same_arguments
def uc(
  probs: ArrayLike,
  labels: ArrayLike,
  utility: F.Utility,
  *,
  from_logits: bool = False,
  where: ArrayLike | None = None,
) -> UCResult:
  """Utility calibration error of one utility, with its worst interval and sign.

  ``UC(f, u; S) = max_{I interval} |(1/n) Σ_i (u(p_i, y_i) - v_u(p_i)) 1[v_u(p_i) in I]|``
  with ``v_u(p) = <p, ū(p)>``. Computed exactly in ``O(n log n)``: sort by
  ``v``, prefix sums ``S_k`` of the residuals over ``n``, and
  ``max S - min S`` over ``S_0 = 0`` and the positions between distinct
  ``v`` values (an interval never splits tied predicted utilities).

  Precision: float32 inputs are computed in float32; the prefix sums are
  blocked (within 1e-5 of a float64 computation at n = 10^6). A predicted
  utility ``v`` carries float32 rounding, so an equivalent but differently
  ordered reduction (e.g. the matrix product of :func:`uc_sweep` against the
  matrix-vector product here) can swap two nearly tied samples and move UC by
  at most ``|r_i - r_j| / n <= 4/n``.

  Args:
    probs: ``(n, C)`` probabilities (logits with ``from_logits=True``).
    labels: ``(n,)`` integer labels.
    utility: a single :class:`~jaxcal.utility.Utility` (for a batch use
      :func:`~jaxcal.utility.uc_sweep`, or ``jax.vmap`` over it).
    from_logits: apply a softmax to ``probs`` first.
    where: optional ``(n,)`` bool mask; masked-out samples are treated as
      absent (``n`` is the number of ``True`` entries).

  Returns:
    :class:`UCResult` ``(value, lo, hi, sign)``: the error, the worst interval
    ``[lo, hi]`` of predicted utility, and the sign of ``Σ_I (u - v)``.

  Raises:
    ValueError: bad probabilities or labels; ``utility`` not a
      :class:`~jaxcal.utility.Utility`, with ``params`` that are not a real
      numeric array (e.g. ``Utility("abc")``), a batch, values outside
      ``[-1, 1]``, or built for a different number of classes (eager calls;
      under ``jit`` invalid values give NaN).

  Example:
    >>> import jax.numpy as jnp
    >>> from jaxcal.utility import uc, top_class
    >>> p = jnp.array([[0.9, 0.1], [0.8, 0.2], [0.6, 0.4], [0.3, 0.7]])
    >>> r = uc(p, jnp.array([0, 1, 1, 1]), top_class())
    >>> round(float(r.value), 4), round(float(r.lo), 4), round(float(r.hi), 4), int(r.sign)
    (0.275, 0.6, 0.8, -1)

  Reference: Hegazy, Jordan & Dieuleveut (2025), *Scalable Utility-Aware
  Multiclass Calibration*, arXiv:2510.25458, eq. (3.2) and Lemma 3.3.
  """
  d = V.check_predictions(probs, labels, from_logits=from_logits, where=where)
  utility = F.check_utility(utility, d.scores.shape[1], batched=False)
  p, y = d.neutral()  # masked-out rows: valid neutral values, weight 0
  r = V.fold(_uc_jit(p, y, utility, d.where), d.ok)
  # a NaN error (bad data or utility under a transformation) has no direction
  return r._replace(sign=jnp.where(jnp.isnan(r.value), 0, r.sign).astype(r.sign.dtype))


def ecdf(errors: ArrayLike) -> tuple[jax.Array, jax.Array]:
  """Empirical CDF of utility calibration errors.

  ``F̂(e) = (1/M) Σ_m 1[E_m <= e]``, as its ``M`` steps: the ``k``-th
  smallest error and ``k / M`` (the points a step plot draws). Tied errors
  are ``M`` steps too: at a value ``e`` held by several errors ``F̂(e)`` is
  the fraction of its last copy (``ecdf([0.1, 0.1, 0.2])`` gives ``1/3`` and
  ``2/3`` at 0.1; ``F̂(0.1) = 2/3``).

  Args:
    errors: ``(M,)`` errors (e.g. from :func:`~jaxcal.utility.uc_sweep`).

  Returns:
    ``(sorted_errors, fractions)``, both ``(M,)``, ``fractions = (1..M)/M``.

  Raises:
    ValueError: ``errors`` not a non-empty 1-d array, or holding NaN/inf
      (eager calls; under ``jit`` the sorted errors are NaN).

  Example:
    >>> import jax.numpy as jnp
    >>> e, f = ecdf(jnp.array([0.3, 0.1, 0.2, 0.4]))
    >>> e.tolist(), f.tolist()
    ([0.1..., 0.2..., 0.3..., 0.4...], [0.25, 0.5, 0.75, 1.0])

  Reference: Hegazy, Jordan & Dieuleveut (2025), *Scalable Utility-Aware
  Multiclass Calibration*, arXiv:2510.25458, §4 (eCDF).
  """
  if jnp.ndim(errors) != 1 or jnp.shape(errors)[0] == 0:
    raise ValueError(f"errors must be a non-empty 1-d array, got shape {jnp.shape(errors)}")
  e = V.check_values(errors, "errors")  # NaN would sort last and skew the fractions
  m = e.shape[0]
  return jnp.sort(e), jnp.arange(1, m + 1, dtype=jnp.result_type(e.dtype, jnp.float32)) / m
