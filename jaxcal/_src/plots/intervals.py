"""Estimates with intervals, one row per model or method (a forest plot)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from jaxcal._src import validation as V
from jaxcal._src.plots import _mpl

__all__ = ["interval_plot"]


def interval_plot(
  rows: Mapping[str, Sequence[float]],
  *,
  metric: str,
  log_x: bool = False,
  reference: float | None = None,
  model: str | None = None,
  n: int | None = None,
  title: str | None = None,
  ax=None,
):
  """Estimates with their intervals, one row per model or method.

  Each row is drawn as a point at the estimate with a horizontal bar from
  the lower to the upper end of its interval (e.g. a bootstrap interval from
  :func:`jaxcal.bootstrap.bootstrap`), top to bottom in the order given.
  Overlapping intervals of different methods evaluated on the *same* test
  samples do not mean the difference is insignificant: bootstrap the
  difference instead (a paired bootstrap).

  Args:
    rows: name -> ``(estimate, lo, hi)`` (or ``(estimate,)`` for no interval).
    metric: the metric's label, for the x axis (e.g. ``"ConfECE(fix;15)"``).
    log_x: logarithmic x axis (for errors spanning decades).
    reference: an x value drawn as a dashed vertical line (e.g. 0).
    model: model or data set name for the title.
    n: number of test samples, for the title.
    title: the full title (default: the metric, model and n).
    ax: matplotlib axes to draw into (default: a new figure).

  Returns:
    The matplotlib ``Figure``.

  Raises:
    TypeError: ``rows`` not a mapping, ``ax`` not a matplotlib ``Axes``.
    ValueError: no rows, a row that is not 1 or 3 numbers, an estimate that
      is not finite, an interval with ``lo > hi`` or an infinite end (NaN
      ends draw no interval), ``reference`` not a finite number, ``log_x``
      not a bool, with ``log_x`` an estimate or a ``reference`` ``<= 0``
      (drawn nowhere; an interval reaching 0 runs off the left edge, marked
      there by an arrow), or
      ``n`` not ``None`` or an int ``>= 1``.

  Example:
    >>> fig = interval_plot({"uncalibrated": (0.026, 0.023, 0.030),
    ...                      "temperature": (0.009, 0.007, 0.012)}, metric="ConfECE(fix;15)")
    >>> fig.axes[0].get_xlabel()
    'ConfECE(fix;15)'

  Reference: Efron & Tibshirani (1993), *An Introduction to the Bootstrap*,
  §13-14 (bootstrap intervals).
  """
  _mpl.check_mapping(rows, "rows", "name -> (estimate, lo, hi)")
  _mpl.check_ax(ax)
  _mpl.check_label(metric, "metric")  # the x label and title (3 ended in str.join's error)
  n = _mpl.check_count(n)
  log_x = V.check_flag(log_x, "log_x")
  if reference is not None:
    reference = V.check_float_option(reference, "reference")
    if log_x and reference <= 0:  # drawn nowhere on a log axis, without a word
      raise ValueError(f"log_x needs a positive reference, got {reference}; use log_x=False")
  names = list(rows)
  vals = []
  for name in names:
    r = _mpl.numbers(rows[name], f"rows[{name!r}]", finite=False)
    if r.size == 1:
      r = np.array([r[0], np.nan, np.nan])
    if r.size != 3:
      raise ValueError(
        f"rows[{name!r}] must be (estimate, lo, hi) or (estimate,), got {r.size} values"
      )
    if not np.isfinite(r[0]):  # no point would be drawn
      raise ValueError(f"rows[{name!r}]: the estimate must be finite, got {r[0]}")
    if np.any(np.isinf(r[1:])) or r[1] > r[2]:  # NaN: no interval
      raise ValueError(
        f"rows[{name!r}]: the interval must have finite lo <= hi (or NaN: none), got "
        f"[{r[1]}, {r[2]}]"
      )
    if log_x and r[0] <= 0:  # its point is drawn nowhere (a lower end of 0 runs off the edge)
      raise ValueError(
        f"rows[{name!r}]: log_x needs a positive estimate, got {r[0]}; use log_x=False"
      )
    vals.append(r)
  v = np.stack(vals)
  y = np.arange(len(names))[::-1]
  with _mpl.style():
    fig, ax = _mpl.new_axes(ax, figsize=(5.0, 0.9 + 0.32 * len(names)))
    has = np.isfinite(v[:, 1]) & np.isfinite(v[:, 2])
    for i in range(len(names)):
      color = _mpl.PALETTE[i % len(_mpl.PALETTE)]
      if has[i]:
        ax.hlines(y[i], v[i, 1], v[i, 2], color=color, lw=2)
      ax.plot(v[i, 0], y[i], "o", color=color, ms=5)
    if reference is not None:
      ax.axvline(float(reference), color="0.4", ls="--", lw=1)
    ax.set_yticks(y, names)
    ax.set_ylim(-0.6, len(names) - 0.4)
    ax.grid(axis="y", visible=False)
    ax.set_xlabel(metric)
    if log_x:
      finite = v[np.isfinite(v) & (v > 0)]
      if reference is not None:  # in view (the limits came from the rows alone)
        finite = np.append(finite, reference)
      if finite.size:
        lo, hi = finite.min() / 1.2, finite.max() * 1.2
        ax.set_xlim(lo, hi)
        _mpl.log_ticks(ax, "x", lo, hi)
        # an interval reaching 0 or below runs off the left edge: an arrow there says so
        # (it had started at the edge unmarked, as if it ended there)
        for i in np.flatnonzero(has & (v[:, 1] <= 0)):
          color = _mpl.PALETTE[i % len(_mpl.PALETTE)]
          ax.plot(lo, y[i], "<", color=color, ms=6, clip_on=False)
    else:  # at most five short labels: long decimals such as 0.0125 ran into each other
      from matplotlib import ticker

      ax.xaxis.set_major_locator(ticker.MaxNLocator(nbins=4, steps=[1, 2, 2.5, 5, 10]))
      ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda x, _: _mpl.tick_label(x)))
    ax.set_title(title or _mpl.title(metric, model, n))
  return fig
