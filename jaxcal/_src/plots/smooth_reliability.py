"""Smooth reliability diagram (Błasiok & Nakkiran 2023; relplot's diagram)."""

from __future__ import annotations

import numpy as np
from jax.typing import ArrayLike

from jaxcal._src.plots._mpl import new_axes
from jaxcal._src.smooth_ece import smooth_reliability

__all__ = ["smooth_reliability_diagram"]


def smooth_reliability_diagram(
  probs: ArrayLike,
  labels: ArrayLike,
  bandwidth: float | None = None,
  *,
  num_points: int = 200,
  from_logits: bool = False,
  title: str | None = None,
  ax=None,
):
  """Top-label reliability curve smoothed with the smooth-ECE kernel.

  The red curve is the kernel-smoothed accuracy ``E[y | f = t]`` at the
  automatic smooth-ECE bandwidth, drawn thicker where the confidences are
  dense and left out where the density is below 1e-3 of its peak; the grey
  area is the kernel density of the confidences, and the
  smooth ECE is printed in the corner — the layout of relplot's
  ``rel_diagram`` (without its bootstrap band).

  Args:
    probs: ``(n, C)`` probabilities (logits with ``from_logits=True``).
    labels: ``(n,)`` labels.
    bandwidth: kernel width (default: the automatic smooth-ECE bandwidth).
    num_points: points of the curve.
    from_logits: treat ``probs`` as logits.
    title: axes title.
    ax: matplotlib axes to draw into (default: a new figure).

  Returns:
    The matplotlib ``Figure``.

  Reference: Błasiok & Nakkiran (2023), "Smooth ECE: Principled Reliability
  Diagrams via Kernel Smoothing", arXiv:2309.12236, §6.
  """
  s = smooth_reliability(probs, labels, bandwidth, num_points=num_points, from_logits=from_logits)
  t, acc, dens = np.asarray(s.mesh), np.asarray(s.accuracy), np.asarray(s.density)
  fig, ax = new_axes(ax, figsize=(4.6, 4.6))
  from matplotlib.collections import LineCollection

  scale = np.clip(dens / max(float(dens.max()), 1e-12), 0.0, 1.0)  # FFT round-off can dip below 0
  ax.fill_between(t, 0, 0.25 * scale, color="0.6", alpha=0.35, lw=0, label="density of confidences")
  ax.plot([0, 1], [0, 1], ls="--", color="0.3", lw=1, label="perfect calibration")
  pts = np.stack([t, acc], axis=1).reshape(-1, 1, 2)
  segs = np.concatenate([pts[:-1], pts[1:]], axis=1)
  mid = (scale[:-1] + scale[1:]) / 2
  # Where there are (almost) no confidences the smoothed accuracy is a ratio of
  # two vanishing sums: drawn only where the density is at least 1e-3 of its peak.
  keep = (scale[:-1] >= 1e-3) & (scale[1:] >= 1e-3)
  widths = 0.6 + 3.4 * np.sqrt(mid[keep])
  ax.add_collection(
    LineCollection(segs[keep], linewidths=widths, colors="#C44E52", capstyle="round")
  )
  ax.plot([], [], color="#C44E52", lw=2, label="smoothed accuracy")
  ax.set_xlim(0, 1)
  ax.set_ylim(0, 1)
  ax.set_aspect("equal")
  ax.set_xlabel("confidence (max probability)")
  ax.set_ylabel("accuracy")
  ax.text(
    0.04,
    0.93,
    f"smECE = {100 * float(s.smooth_ece):.2f}%  (σ = {float(s.bandwidth):.3f})",
    transform=ax.transAxes,
    fontsize=9,
  )
  ax.legend(loc="lower right", fontsize=8, frameon=False)
  if title:
    ax.set_title(title)
  return fig
