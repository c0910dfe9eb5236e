"""MCB-DSC plot of score decompositions (score_decompositions_case_study, Fig. 2-3)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

__all__ = ["mcb_dsc_plot"]


def _nice_step(span: float) -> float:
  raw = span / 6.0
  if raw <= 0:
    return 1.0
  mag = 10 ** np.floor(np.log10(raw))
  for f in (1, 2, 2.5, 5, 10):
    if f * mag >= raw:
      return float(f * mag)
  return float(10 * mag)


def mcb_dsc_plot(
  points: Mapping[str, Sequence[float]],
  unc: float,
  ax=None,
  *,
  num_isolines: int | None = None,
  title: str | None = None,
  markers: Mapping[str, str] | None = None,
  colors: Mapping[str, str] | None = None,
):
  """Discrimination (DSC) against miscalibration (MCB), with iso-score lines.

  Every point is one decomposition ``S = MCB - DSC + UNC``; points on the
  same grey line ``DSC = MCB + UNC - S`` have the same mean score ``S``
  (lines are labelled with ``S``). Better forecasts lie up and to the left.

  Args:
    points: label -> ``(mcb, dsc)``.
    unc: the common uncertainty component ``UNC`` (same data set).
    ax: a matplotlib ``Axes`` to draw on (default: a new figure).
    num_isolines: approximate number of iso-score lines (default about 6).
    title: optional axes title.
    markers: optional label -> matplotlib marker.
    colors: optional label -> colour.

  Returns:
    The matplotlib ``Figure``.

  Example:
    >>> fig = mcb_dsc_plot({"base": (0.06, 8.28), "CW-HB": (0.01, 7.18)}, unc=9.0)
    >>> len(fig.axes)
    1

  Reference: score_decompositions_case_study, §3, Fig. 2; Dimitriadis et
  al. (2024).
  """
  if ax is None:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
  else:
    fig = ax.figure
  if not points:
    raise ValueError("points must contain at least one (mcb, dsc) pair")
  mcb = np.array([float(v[0]) for v in points.values()])
  dsc = np.array([float(v[1]) for v in points.values()])
  if not (np.all(np.isfinite(mcb)) and np.all(np.isfinite(dsc)) and np.isfinite(unc)):
    raise ValueError("mcb, dsc and unc must be finite")
  pad_x = 0.08 * (np.ptp(mcb) or abs(mcb.max()) or 1.0)
  pad_y = 0.08 * (np.ptp(dsc) or abs(dsc.max()) or 1.0)
  x0, x1 = mcb.min() - pad_x, mcb.max() + pad_x
  y0, y1 = dsc.min() - pad_y, dsc.max() + pad_y
  # score range covered by the plotted window: S = MCB - DSC + UNC
  s_lo, s_hi = x0 - y1 + unc, x1 - y0 + unc
  step = _nice_step(s_hi - s_lo) if num_isolines is None else (s_hi - s_lo) / max(num_isolines, 1)
  xs = np.array([x0, x1])
  for s in np.arange(np.ceil(s_lo / step) * step, s_hi + step / 2, step):
    ax.plot(xs, xs + unc - s, color="lightgray", lw=1, zorder=0)
    # label where the line leaves the window on the right or the top
    xl = min(x1, y1 - unc + s)
    yl = xl + unc - s
    if y0 <= yl <= y1:
      ax.annotate(f"{s:.3g}", (xl, yl), color="gray", fontsize=7, ha="right", va="bottom")
  for label, (m, d) in points.items():
    kw = {"marker": markers.get(label, "o") if markers else "o"}
    if colors and label in colors:
      kw["color"] = colors[label]
    ax.scatter([float(m)], [float(d)], label=label, zorder=2, **kw)
  ax.set_xlim(x0, x1)
  ax.set_ylim(y0, y1)
  ax.set_xlabel("MCB (miscalibration)")
  ax.set_ylabel("DSC (discrimination)")
  if title:
    ax.set_title(title)
  if len(points) <= 20:
    ax.legend(fontsize=7, loc="best")
  return fig
