"""Smooth reliability diagram (Błasiok & Nakkiran 2023; relplot's diagram)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcal._src.names import format_number
from jaxcal._src.plots import _mpl
from jaxcal._src.smooth_ece import smooth_reliability

__all__ = ["smooth_reliability_diagram"]


def smooth_reliability_diagram(
  probs: ArrayLike,
  labels: ArrayLike,
  bandwidth: float | None = None,
  *,
  num_points: int = 200,
  from_logits: bool = False,
  where: ArrayLike | None = None,
  title: str | None = None,
  model: str | None = None,
  ax=None,
):
  """Top-label reliability curve smoothed with the smooth-ECE kernel.

  The red curve is the kernel-smoothed accuracy ``E[y | f = t]`` at the
  automatic smooth-ECE bandwidth, drawn thicker where the confidences are
  dense and left out where the density is below 1e-3 of its peak; the grey
  area is the kernel density of the confidences, and the smooth ECE
  (``smECE``, :func:`jaxcal.metrics.smooth_ece`) is printed in the corner
  with three significant digits, as ``jaxcal report`` prints it — the layout
  of relplot's ``rel_diagram`` (without its bootstrap band).

  Args:
    probs: ``(n, C)`` probabilities (logits with ``from_logits=True``).
    labels: ``(n,)`` labels.
    bandwidth: kernel width (default: the automatic smooth-ECE bandwidth).
    num_points: points of the curve, an int in ``[2, 10**6]`` (a plot grid:
      the default 200 is smooth at any print size).
    from_logits: treat ``probs`` as logits.
    where: optional ``(n,)`` bool mask of the samples drawn (as
      :func:`jaxcal.metrics.smooth_reliability`; the title's ``n`` counts them).
    title: the full title (default: "Smooth reliability diagram — model
      (n = ...)").
    model: model name for the default title.
    ax: matplotlib axes to draw into (default: a new figure).

  Returns:
    The matplotlib ``Figure``.

  Raises:
    TypeError: ``ax`` not a matplotlib ``Axes``.
    ValueError: bad probabilities, labels or bandwidth (as
      :func:`jaxcal.metrics.smooth_reliability` raises), or ``num_points`` not
      an int in ``[2, 10**6]`` (checked before anything is computed).

  Example:
    >>> import jax
    >>> p = jax.nn.softmax(2 * jax.random.normal(jax.random.key(0), (500, 4)))
    >>> y = jax.random.categorical(jax.random.key(1), jax.numpy.log(p))
    >>> fig = smooth_reliability_diagram(p, y, model="toy")
    >>> fig.axes[0].get_title()
    'Smooth reliability diagram — toy (n = 500)'

  Reference: Błasiok & Nakkiran (2023), "Smooth ECE: Principled Reliability
  Diagrams via Kernel Smoothing", arXiv:2309.12236, §6.
  """
  _mpl.check_ax(ax)  # before the computation (num_points: the metric checks it first)
  s = smooth_reliability(
    probs, labels, bandwidth, num_points=num_points, from_logits=from_logits, where=where
  )
  # the count on device: a global mask spanning processes is not read on the host
  n = int(np.shape(labels)[0]) if where is None else int(jnp.count_nonzero(jnp.asarray(where)))
  text = title or _mpl.title("Smooth reliability diagram", model, n)
  with _mpl.style():
    return _draw(s, text, ax)


def _draw(s, title: str, ax):
  t, acc, dens = np.asarray(s.mesh), np.asarray(s.accuracy), np.asarray(s.density)
  fig, ax = _mpl.new_axes(ax, figsize=(4.6, 5.0))
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
    f"smECE = {format_number(float(s.smooth_ece))}  (σ = {format_number(float(s.bandwidth))})",
    transform=ax.transAxes,
    fontsize=9,
  )
  _mpl.legend_outside(ax, "below", ncol=2)
  ax.set_title(title)
  return fig
