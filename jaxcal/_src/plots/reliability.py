"""Reliability diagrams and bin-count robustness curves."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from jax.typing import ArrayLike

from jaxcal._src.calibration_errors import conf_ece, reliability_stats
from jaxcal._src.plots._mpl import new_axes

__all__ = ["reliability_diagram", "bin_robustness_plot"]


def reliability_diagram(
  probs: ArrayLike,
  labels: ArrayLike,
  num_bins: int = 15,
  binning: str = "fixed",
  *,
  from_logits: bool = False,
  title: str | None = None,
  ax=None,
):
  """Top-label reliability diagram with a sample-count histogram.

  Bars show the accuracy of each confidence bin against the diagonal of
  perfect calibration; the gap to the bin's mean confidence is shaded, and
  ConfECE at ``num_bins`` is printed in the corner. Quantile bins are drawn
  between the smallest and largest confidence they hold.

  Args:
    probs: ``(n, C)`` probabilities (logits with ``from_logits=True``).
    labels: ``(n,)`` labels.
    num_bins: number of bins (static int).
    binning: ``"fixed"`` or ``"quantile"``.
    from_logits: treat ``probs`` as logits.
    title: axes title.
    ax: matplotlib axes to draw into (default: a new figure).

  Returns:
    The matplotlib ``Figure``.

  Reference: SPEC §2 (ConfECE); Guo et al. (2017) reliability diagrams.
  """
  s = reliability_stats(probs, labels, num_bins, binning, from_logits=from_logits)
  cnt = np.asarray(s.counts)
  conf, acc = np.asarray(s.confidence), np.asarray(s.accuracy)
  lo, hi = np.asarray(s.lower), np.asarray(s.upper)
  keep = cnt > 0
  ece = float(conf_ece(probs, labels, num_bins, binning, from_logits=from_logits))
  hist_ax = None
  if ax is None:
    from jaxcal._src.plots._mpl import pyplot

    fig, (ax, hist_ax) = pyplot().subplots(
      2,
      1,
      figsize=(4.6, 5.4),
      sharex=True,
      constrained_layout=True,
      gridspec_kw={"height_ratios": [3.2, 1]},
    )
  else:
    fig = ax.figure
  width = np.where(hi > lo, hi - lo, 1.0 / num_bins)
  ax.bar(
    lo[keep],
    acc[keep],
    width=width[keep],
    align="edge",
    color="#4C72B0",
    edgecolor="white",
    linewidth=0.6,
    label="accuracy",
  )
  gap_lo = np.minimum(acc, conf)[keep]
  ax.bar(
    lo[keep],
    np.abs(conf - acc)[keep],
    bottom=gap_lo,
    width=width[keep],
    align="edge",
    color="#DD8452",
    alpha=0.55,
    edgecolor="#DD8452",
    linewidth=0.6,
    label="gap to confidence",
  )
  ax.plot([0, 1], [0, 1], ls="--", color="0.3", lw=1, label="perfect calibration")
  if hist_ax is not None:
    hist_ax.bar(
      lo[keep],
      cnt[keep] / cnt.sum(),
      width=width[keep],
      align="edge",
      color="0.45",
      edgecolor="white",
      linewidth=0.6,
    )
    hist_ax.set_yscale("log")
    hist_ax.set_ylabel("fraction")
    hist_ax.set_xlabel("confidence (max probability)")
  else:
    ax.set_xlabel("confidence (max probability)")
  ax.set_xlim(0, 1)
  ax.set_ylim(0, 1)
  ax.set_ylabel("accuracy")
  ax.text(
    0.04,
    0.93,
    f"ConfECE ({binning}, {num_bins} bins) = {100 * ece:.2f}%",
    transform=ax.transAxes,
    fontsize=9,
  )
  from matplotlib.lines import Line2D
  from matplotlib.patches import Patch

  ax.legend(
    handles=[
      Patch(color="#4C72B0", label="accuracy"),
      Patch(color="#DD8452", alpha=0.55, label="gap to confidence"),
      Line2D([0], [0], ls="--", color="0.3", lw=1, label="perfect calibration"),
    ],
    loc="upper left",
    bbox_to_anchor=(0.0, 0.92),
    fontsize=8,
    frameon=False,
  )
  ax.set_xlim(0, 1)
  if title:
    ax.set_title(title)
  return fig


def bin_robustness_plot(
  num_bins: Sequence[int],
  curves: Mapping[str, ArrayLike],
  *,
  logy: bool = True,
  title: str | None = None,
  ax=None,
):
  """Calibration errors as a function of the bin count, one line per error.

  Truthful errors (ConfCE_corr, LinCE_cw) stay flat across bin counts while
  ConfECE grows with them (truthful_multiclass_calibration_errors §5).

  Args:
    num_bins: ``(k,)`` bin counts on the x axis.
    curves: name -> ``(k,)`` error values.
    logy: logarithmic y axis (errors differ by orders of magnitude).
    title: axes title.
    ax: axes to draw into.

  Returns:
    The matplotlib ``Figure``.
  """
  fig, ax = new_axes(ax, figsize=(6.0, 4.0))
  m = np.asarray(num_bins)
  for name, vals in curves.items():
    ax.plot(m, np.asarray(vals), lw=1.4, label=name)
  ax.set_xlabel("number of bins")
  ax.set_ylabel("calibration error")
  if logy:
    ax.set_yscale("log")
  ax.grid(alpha=0.3)
  ax.legend(fontsize=8, frameon=False, ncol=2)
  if title:
    ax.set_title(title)
  return fig
