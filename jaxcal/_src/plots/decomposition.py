"""MCB-DSC plot of score decompositions (Resin 2025, Fig. 2-3)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from jaxcal._src import validation as V
from jaxcal._src.plots import _mpl

__all__ = ["mcb_dsc_plot"]


def _nice_step(span: float, count: int = 5) -> float:
  raw = span / max(count, 1)
  if raw <= 0:
    return 1.0
  mag = 10 ** np.floor(np.log10(raw))
  for f in (1, 2, 2.5, 5, 10):
    if f * mag >= raw:
      return float(f * mag)
  return float(10 * mag)


#: Relative float32 rounding of a decomposition's MCB that :func:`mcb_dsc_plot` accepts below 0.
_MCB_ROUNDING = 1e-5

#: Most points the legend names (beyond it a legend would not fit beside the axes).
_LEGEND_POINTS = 24


def mcb_dsc_plot(
  points: Mapping[str, Sequence[float]],
  unc: float,
  ax=None,
  *,
  num_isolines: int | None = None,
  title: str | None = None,
  markers: Mapping[str, str] | None = None,
  colors: Mapping[str, str] | None = None,
  model: str | None = None,
  n: int | None = None,
):
  """Discrimination (DSC) against miscalibration (MCB), with iso-score lines.

  Every point is one decomposition ``S = MCB − DSC + UNC``; points on the
  same grey line ``DSC = MCB + UNC − S`` have the same mean score ``S``
  (each line is labelled with its ``S`` where it leaves the plot, unless that
  label would crowd one already placed). Better forecasts lie up and to the
  left. The legend is drawn to the right of the axes, for at most 24 points
  (with more, none is drawn: label the points on the returned axes, or plot
  fewer).

  Args:
    points: label -> ``(mcb, dsc)``.
    unc: the common uncertainty component ``UNC`` (same data set).
    ax: a matplotlib ``Axes`` to draw on (default: a new figure).
    num_isolines: approximate number of iso-score lines (default about 6).
    title: the full title (default: "MCB-DSC plot — model (n = ...)").
    markers: optional label -> matplotlib marker.
    colors: optional label -> colour.
    model: model or data set name for the default title.
    n: number of test samples, for the default title.

  Returns:
    The matplotlib ``Figure``.

  Raises:
    TypeError: ``points``, ``markers`` or ``colors`` not a mapping, ``ax``
      not a matplotlib ``Axes``.
    ValueError: no points, a point that is not a pair of numbers,
      non-finite values, a negative ``unc`` or ``mcb`` (both are
      non-negative by definition; an ``mcb`` within float32 rounding of 0,
      ``>= -1e-5 max(1, unc, |dsc|)``, as a calibrated forecast's
      decomposition can return, is accepted), ``markers`` / ``colors`` keys
      that are not labels of ``points`` or values that are not markers /
      colours, ``num_isolines`` not an int in ``[1, 100]``, or ``n`` not ``None`` or an int ``>= 1``.

  Example:
    >>> fig = mcb_dsc_plot({"base": (0.06, 8.28), "CW-HB": (0.01, 7.18)}, unc=9.0)
    >>> fig.axes[0].get_xlabel()
    'MCB (miscalibration)'

  Reference: Resin (2025), "Calibration in Context: A Case Study with Score
  Decompositions", §3, Figures 2-3; Dimitriadis, Gneiting, Jordan & Vogel
  (2024), "Evaluating probabilistic classifiers: The triptych",
  International Journal of Forecasting 40.
  """
  _mpl.check_mapping(points, "points", "label -> (mcb, dsc)")
  _mpl.check_ax(ax)
  n = _mpl.check_count(n)
  pairs = []
  for name, v in points.items():
    a = _mpl.numbers(v, f"points[{name!r}]", finite=False)
    if a.size != 2:
      raise ValueError(f"points[{name!r}] must be a pair (mcb, dsc), got {a.size} values")
    pairs.append(a)
  mcb, dsc = np.stack(pairs).T
  # a number (a decomposition's jax scalar too), finite; a mean score, so >= 0
  unc = V.check_float_option(unc, "unc", minimum=0.0)
  if not (np.all(np.isfinite(mcb)) and np.all(np.isfinite(dsc))):
    raise ValueError("mcb and dsc must be finite")
  # MCB = S(forecast) - S(recalibrated) >= 0; float32 rounding of a calibrated
  # forecast's decomposition gives -1e-7 (kept), a wrong sign -0.01 (refused)
  tol = _MCB_ROUNDING * max(1.0, unc, float(np.max(np.abs(dsc))))
  if np.any(mcb < -tol):
    i = int(np.argmin(mcb))
    raise ValueError(
      f"points[{list(points)[i]!r}]: mcb must be >= 0 (miscalibration is non-negative), got "
      f"{float(mcb[i])!r}: pass the pair (mcb, dsc) of a decomposition, in that order"
    )
  for what, m in (("markers", markers), ("colors", colors)):
    if m is not None:
      _mpl.check_keys(m, points, what, "labels of points", f"label -> {what[:-1]}")
      for label_, v in m.items():  # before a figure exists: none is left open
        if not _mpl.is_style(what, v):
          raise ValueError(f"{what}[{label_!r}] is not a matplotlib {what[:-1]}: {v!r}")
  if num_isolines is not None:  # an isoline per step: a huge count would loop for ages
    num_isolines = V.check_int_option(num_isolines, "num_isolines", minimum=1, maximum=100)
  pad_x = 0.1 * (np.ptp(mcb) or abs(mcb.max()) or 1.0)
  pad_y = 0.1 * (np.ptp(dsc) or abs(dsc.max()) or 1.0)
  x0, x1 = mcb.min() - pad_x, mcb.max() + pad_x
  y0, y1 = dsc.min() - pad_y, dsc.max() + pad_y
  # score range covered by the plotted window: S = MCB - DSC + UNC
  s_lo, s_hi = x0 - y1 + unc, x1 - y0 + unc
  step = _nice_step(s_hi - s_lo, num_isolines or 6)
  # as many decimals as the step has (0.0025: 4), so each label names its own line
  mag = int(np.floor(np.log10(step) + 1e-9))
  decimals = max(0, -mag + (1 if round(step / 10.0**mag, 6) == 2.5 else 0))
  with _mpl.style():
    fig, ax = _mpl.new_axes(ax, figsize=(5.6, 4.0))
    xs = np.array([x0, x1])
    placed: list[tuple[float, float]] = []
    for s in np.arange(np.ceil(s_lo / step) * step, s_hi + step / 2, step):
      ax.plot(xs, xs + unc - s, color="0.8", lw=1, zorder=0)
      # label the line just inside where it leaves the window (top or right edge)
      xt = y1 - unc + s
      if x0 <= xt <= x1:
        at, fx, fy, ha, va = (xt, y1), (xt - x0) / (x1 - x0), 1.0, "right", "top"
      else:
        yr = x1 + unc - s
        if not y0 <= yr <= y1:
          continue
        at, fx, fy, ha, va = (x1, yr), 1.0, (yr - y0) / (y1 - y0), "right", "bottom"
      if any(abs(fx - a) < 0.08 and abs(fy - b) < 0.08 for a, b in placed):
        continue
      placed.append((fx, fy))
      ax.annotate(
        f"S = {s:.{decimals}f}",
        at,
        xytext=(-2, -2 if va == "top" else 2),
        textcoords="offset points",
        color="0.45",
        fontsize=7,
        ha=ha,
        va=va,
      )
    for i, (label_, (m, d)) in enumerate(zip(points, pairs)):
      kw = {"marker": markers.get(label_, "o") if markers else "o"}
      kw["color"] = (colors or {}).get(label_, _mpl.PALETTE[i % len(_mpl.PALETTE)])
      ax.scatter([float(m)], [float(d)], label=label_, zorder=2, s=28, **kw)
    ax.set_xlim(x0, x1)
    ax.set_ylim(y0, y1)
    ax.set_xlabel("MCB (miscalibration)")
    ax.set_ylabel("DSC (discrimination)")
    ax.set_title(title or _mpl.title("MCB-DSC plot", model, n))
    if len(points) <= _LEGEND_POINTS:
      _mpl.legend_outside(ax, "right")
  return fig
