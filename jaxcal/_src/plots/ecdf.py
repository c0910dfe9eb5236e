"""eCDF of utility calibration errors, one curve per method."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from jaxcal._src import validation as V
from jaxcal._src.plots import _mpl

__all__ = ["ecdf_plot"]


def ecdf_plot(
  curves: Mapping[str, Any],
  log_x: bool = False,
  ax: Any = None,
  xlabel: str = "utility calibration error UC",
  title: str | None = None,
  *,
  model: str | None = None,
  n: int | None = None,
  family: str | None = None,
) -> Any:
  """Step plot of ``F̂(e) = (1/M) Σ_m 1[E_m <= e]`` for each method; left is better.

  ``E_m`` is the utility calibration error of the ``m``-th sampled utility;
  a curve to the left means smaller errors for more utilities. The legend is
  drawn to the right of the axes, outside the curves.

  Args:
    curves: ``{label: errors}``, each ``(M,)`` errors (e.g. from
      :func:`jaxcal.utility.uc_sweep`); the curves are drawn in dict order.
    log_x: logarithmic error axis (non-positive errors are drawn at the
      smallest positive error, and the curve's legend entry says how many;
      with none the axis stays linear). The axis label then ends in
      " (log scale)", and where fewer than three major ticks show, the minor
      ticks at 2 and 5 times a power of ten are labelled too.
    ax: a matplotlib ``Axes`` to draw on (default: a new figure).
    xlabel: x-axis label (" (log scale)" is added on a logarithmic axis,
      unless it already says "log").
    title: the full title (default: "eCDF of UC over M utilities — model (n = ...)").
    model: model or data set name for the default title.
    n: number of test samples, for the default title.
    family: the utility family sampled (e.g. ``"linear"``), for the default title.

  Returns:
    The matplotlib ``Figure``.

  Raises:
    TypeError: ``curves`` not a mapping, ``ax`` not a matplotlib ``Axes``.
    ValueError: no curves, a curve with no errors or with errors that are
      not finite numbers, ``log_x`` not a bool, or ``n`` not ``None`` or an int ``>= 1``.

  Example:
    >>> import numpy as np
    >>> fig = ecdf_plot({"uncalibrated": np.array([0.02, 0.05, 0.04])})
    >>> fig.axes[0].get_ylabel()
    'fraction of utilities'

  Reference: Hegazy, Jordan & Dieuleveut (2025), "Scalable Utility-Aware
  Multiclass Calibration", arXiv:2510.25458, §4-5 and Figure 1 (eCDFs over
  1500 sampled utilities).
  """
  _mpl.check_mapping(curves, "curves", "label -> errors")
  _mpl.check_ax(ax)
  n = _mpl.check_count(n)
  log_x = V.check_flag(log_x, "log_x")
  arrays = {}
  for label_, errors in curves.items():
    e = np.sort(_mpl.numbers(errors, f"curve {label_!r}"))
    if e.size == 0:
      raise ValueError(f"curve {label_!r} has no errors")
    arrays[label_] = e
  positive = [e[e > 0] for e in arrays.values() if np.any(e > 0)]
  floor = min((p.min() for p in positive), default=1e-12)
  big = max(e.max() for e in arrays.values())
  sizes = {e.size for e in arrays.values()}
  with _mpl.style():
    fig, ax = _mpl.new_axes(ax, figsize=(5.6, 3.6))
    for i, (label_, e) in enumerate(arrays.items()):
      text = str(label_)
      if log_x and positive:  # (with no positive error the axis stays linear)
        # moved to the smallest positive error of any curve: the legend says how many
        # (they had looked like errors of that size)
        moved = int(np.sum(e <= 0))
        if moved:
          text += f" ({moved:,} ≤ 0 drawn at {_mpl.tick_label(floor)})"
        e = np.maximum(e, floor)
      frac = np.arange(1, e.size + 1) / e.size
      ax.step(
        np.concatenate([[e[0]], e]),
        np.concatenate([[0.0], frac]),
        where="post",
        label=text,
        color=_mpl.PALETTE[i % len(_mpl.PALETTE)],
      )
    if log_x and positive:  # (one distinct value: a decade around it)
      lo, hi = (floor / 1.2, big * 1.2) if big > floor else (floor / 3.0, floor * 3.0)
      ax.set_xlim(lo, hi)
      _mpl.log_ticks(ax, "x", lo, hi)
      _mpl.label_minor_ticks(ax, lo, hi)
      if "log" not in xlabel.lower():  # the scale was not said: 1e-3 to 1e-2 read as linear
        xlabel += " (log scale)"
    ax.set_xlabel(xlabel)
    ax.set_ylabel("fraction of utilities")
    ax.set_ylim(0, 1.02)
    if title is None:
      what = "eCDF of UC"
      if len(sizes) == 1:
        what += f" over {sizes.pop():,}" + (f" {family}" if family else "") + " utilities"
      title = _mpl.title(what, model, n)
    ax.set_title(title)
    _mpl.legend_outside(ax, "right")
  return fig
