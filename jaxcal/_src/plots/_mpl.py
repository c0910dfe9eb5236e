"""Lazy matplotlib access (Agg when no display), shared by all plot modules."""

from __future__ import annotations


def pyplot():
  """Imports ``matplotlib.pyplot``, selecting the Agg backend when headless."""
  import os

  import matplotlib

  if not os.environ.get("DISPLAY") and "MPLBACKEND" not in os.environ:
    try:
      matplotlib.use("Agg")
    except Exception:  # pragma: no cover - backend already fixed by the user
      pass
  import matplotlib.pyplot as plt

  return plt


def new_axes(ax=None, figsize=(5.0, 4.0)):
  """Returns ``(fig, ax)``: a new figure unless ``ax`` is given."""
  if ax is not None:
    return ax.figure, ax
  plt = pyplot()
  fig, ax = plt.subplots(figsize=figsize, constrained_layout=True)
  return fig, ax
