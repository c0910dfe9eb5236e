"""eCDF of utility calibration errors, one curve per method (SPEC §6)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["ecdf_plot"]


def ecdf_plot(
  curves: Mapping[str, Any],
  log_x: bool = False,
  ax: Any = None,
  xlabel: str = "utility calibration error",
  title: str | None = None,
) -> Any:
  """Step plot of ``F̂(e) = (1/M) Σ_m 1[E_m <= e]`` for each method; left is better.

  Args:
    curves: ``{label: errors}``, each ``(M,)`` errors (e.g. from
      :func:`jaxcal.utility.uc_sweep`); the curves are drawn in dict order.
    log_x: logarithmic error axis (non-positive errors are drawn at the
      smallest positive error).
    ax: a matplotlib ``Axes`` to draw on (default: a new figure).
    xlabel: x-axis label.
    title: optional axes title.

  Returns:
    The matplotlib ``Figure``.

  Example:
    >>> import numpy as np
    >>> fig = ecdf_plot({"uncalibrated": np.array([0.02, 0.05, 0.04])})
    >>> fig.axes[0].get_ylabel()
    'fraction of utilities'

  Reference: utility_aware_multiclass_calibration §4-5, Figure 1.
  """
  from jaxcal._src.plots._mpl import new_axes  # lazy matplotlib, Agg when headless

  fig, ax = new_axes(ax, figsize=(5.0, 3.6))
  positive = [np.asarray(e, np.float64) for e in curves.values()]
  floor = min((e[e > 0].min() for e in positive if np.any(e > 0)), default=1e-12)
  for label, errors in curves.items():
    e = np.sort(np.asarray(errors, np.float64).ravel())
    if e.size == 0:
      raise ValueError(f"curve {label!r} has no errors")
    if log_x:
      e = np.maximum(e, floor)
    frac = np.arange(1, e.size + 1) / e.size
    ax.step(
      np.concatenate([[e[0]], e]), np.concatenate([[0.0], frac]), where="post", label=str(label)
    )
  if log_x:
    ax.set_xscale("log")
  ax.set_xlabel(xlabel)
  ax.set_ylabel("fraction of utilities")
  ax.set_ylim(0, 1.02)
  ax.grid(alpha=0.3)
  if title:
    ax.set_title(title)
  ax.legend(fontsize="small")
  return fig
