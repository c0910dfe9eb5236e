"""Local calibration: LCE against the kernel bandwidth (Barbera et al. 2025)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from jax.typing import ArrayLike

from jaxcal._src import validation as V
from jaxcal._src.plots import _mpl

__all__ = ["lce_bandwidth_plot"]


def lce_bandwidth_plot(
  bandwidths: Sequence[float] | ArrayLike,
  curves: Mapping[str, ArrayLike],
  *,
  bands: Mapping[str, tuple[ArrayLike, ArrayLike]] | None = None,
  floor: ArrayLike | None = None,
  floor_label: str = "calibrated predictor (labels drawn from its p)",
  reference: Mapping[str, float] | None = None,
  reference_label: str = "class-wise ECE",
  features: str | None = None,
  model: str | None = None,
  n: int | None = None,
  title: str | None = None,
  ax=None,
):
  """Local calibration error LCE against the kernel bandwidth ``γ``, one curve per method.

  ``LCE_γ = Σ_c π_c mean_i |Σ_{j∈b(i)} w_ij(γ) (p_jc − 1[y_j = c])|`` with
  Gaussian weights ``w_ij ∝ exp(−‖φ_i − φ_j‖² / (2γ²))`` inside each
  probability bin (:func:`jaxcal.metrics.lce`). The bandwidth sets how local
  "local" is: as ``γ`` grows the kernel flattens over a bin and LCE levels
  off at a value close to, but not equal to, the class-wise binned ECE (give
  it as ``reference``, a dotted line; LCE skips bins of ``<= min_bin_size``
  samples and averages over the anchors it keeps); as
  ``γ`` shrinks each anchor sees only its nearest neighbours and LCE rises
  toward per-sample noise. The ``floor`` curve (dashed, black) is the LCE of
  a predictor calibrated by construction on the same points and features —
  what sampling noise alone gives at each ``γ`` — so a method is locally
  miscalibrated at a bandwidth only where it lies clearly above it.

  Args:
    bandwidths: ``(k,)`` kernel bandwidths ``γ`` (the x axis, logarithmic).
    curves: method -> ``(k,)`` LCE values.
    bands: method -> ``(lo, hi)``, each ``(k,)`` (e.g. ± one sd over seeds,
      or a bootstrap interval), drawn shaded.
    floor: ``(k,)`` LCE of a calibrated predictor (optional).
    floor_label: legend entry of ``floor``.
    reference: method -> a value drawn as a dotted line in its colour (e.g.
      its class-wise ECE, which LCE approaches as the kernel flattens).
    reference_label: legend entry of the dotted lines.
    features: name of the feature space ``φ`` (for the title).
    model: model or data set name, for the title.
    n: number of anchors, for the title.
    title: the full title (default: "LCE against the kernel bandwidth γ —
      model (n = ...)", with the features).
    ax: a matplotlib ``Axes`` to draw on (default: a new figure).

  Returns:
    The matplotlib ``Figure``.

  Raises:
    TypeError: ``curves``, ``bands`` or ``reference`` not a mapping, ``ax``
      not a matplotlib ``Axes``.
    ValueError: no curves, ``bandwidths`` not a 1-D sequence of numbers (a
      string, a scalar, a 2-D array), a bandwidth that is not positive,
      bandwidths not increasing, a curve given as a string, a curve, band
      or floor whose length differs from ``bandwidths``, a curve or floor
      that is not finite, a band with an infinite end or ``lo > hi`` (NaN
      ends are not drawn), a band or reference for a method that is not a
      curve, a reference that is not a finite number, or ``n`` not ``None`` or an int ``>= 1``.

  Example:
    >>> import numpy as np
    >>> g = np.array([1.0, 2.5, 5.0, 10.0, 20.0])
    >>> fig = lce_bandwidth_plot(g, {"uncalibrated": 0.01 + 0.02 / g, "LN": 0.007 + 0.03 / g},
    ...                          floor=0.003 + 0.027 / g, features="PCA-50")
    >>> fig.axes[0].get_xlabel()
    'kernel bandwidth γ'

  Reference: Barbera, Perini, De Toni, Passerini & Pugnana (2025),
  "Multiclass Local Calibration with the Jensen-Shannon Distance",
  arXiv:2510.26566, §3 (LCE, MLCE), §4 Eq. (2) (the Nadaraya–Watson
  estimate) and App. D.3 (γ = 10 on PCA-50 features).
  """
  # a string was read as one number ('12': one bandwidth 12) and a (1, k) array was
  # flattened: neither is the (k,) row of bandwidths the x axis needs
  if isinstance(bandwidths, str | bytes):
    raise ValueError(f"bandwidths must be a 1-D sequence (k,) of numbers, got {bandwidths!r:.80}")
  g = _mpl.numbers(bandwidths, "bandwidths", finite=False)  # ragged: its own message
  if np.ndim(bandwidths) != 1:
    raise ValueError(
      f"bandwidths must be a 1-D sequence (k,) of numbers, got shape {np.shape(bandwidths)}"
    )
  _mpl.check_mapping(curves, "curves", "method -> (k,) LCE values")
  _mpl.check_ax(ax)
  n = _mpl.check_count(n)
  if g.size == 0 or not np.all(np.isfinite(g) & (g > 0)):
    raise ValueError("bandwidths must be positive and finite (the kernel widths γ)")
  if np.any(np.diff(g) <= 0):  # a line through unsorted bandwidths zig-zags
    raise ValueError(
      f"bandwidths must be increasing (curves are drawn in this order), got {g.tolist()}"
    )
  if reference is not None:
    _mpl.check_keys(reference, curves, "reference", "methods of curves", "method -> values")
  if reference:
    reference = {k: V.check_float_option(v, f"reference[{k!r}]") for k, v in reference.items()}

  def _vals(what: str, v) -> np.ndarray:
    if isinstance(v, str | bytes):  # '0.1' was read as the number 0.1
      raise ValueError(f"{what} must be numbers, got the string {v!r:.80}")
    a = _mpl.numbers(v, what)
    if a.shape != g.shape:
      raise ValueError(
        f"{what} has {a.size} values for {g.size} bandwidths; give one value per bandwidth"
      )
    return a

  data = {name: _vals(f"curve {name!r}", v) for name, v in curves.items()}
  bands = _mpl.bands(bands, curves, g.size, "methods of curves", "method")
  fl = None if floor is None else _vals("floor", floor)
  what = "LCE against the kernel bandwidth γ" + (f" on {features}" if features else "")
  with _mpl.style():
    fig, ax = _mpl.new_axes(ax, figsize=(6.4, 4.6))
    ys = []
    for i, (name, v) in enumerate(data.items()):
      color = _mpl.PALETTE[i % len(_mpl.PALETTE)]
      ax.plot(g, v, "o-", ms=3, color=color, label=name)
      ys.append(v)
      if name in bands:
        lo, hi = bands[name]
        ax.fill_between(g, lo, hi, color=color, alpha=0.18, lw=0)
        ys += [lo, hi]
      if reference and name in reference:
        ax.axhline(float(reference[name]), color=color, ls=":", lw=1)
        ys.append(np.array([float(reference[name])]))
    if reference and any(k in reference for k in data):
      ax.plot([], [], ls=":", color="0.4", lw=1, label=reference_label)
    if fl is not None:
      ax.plot(g, fl, ls="--", color="black", lw=1, label=floor_label)
      ys.append(fl)
    ax.set_xlabel("kernel bandwidth γ")
    ax.set_ylabel("local calibration error LCE")
    if g.max() > g.min():  # compared, not divided: 1e300 / 1e-300 overflowed (a RuntimeWarning)
      # a margin of 10 % each side, short of inf next to the largest float
      lo, hi = g.min() / 1.1, min(g.max(), np.finfo(np.float64).max / 1.1) * 1.1
      # limits first: they turn autoscaling off, whose 5 % margin in log space went past
      # the largest float across 600 decades (an overflow warning from matplotlib)
      ax.set_xlim(lo, hi)
      _mpl.log_ticks(ax, "x", lo, hi)
    _mpl.error_axis(ax, ys)
    _mpl.legend_outside(ax, "below", ncol=2)
    ax.set_title(title or _mpl.title(what, model, n))
  return fig
