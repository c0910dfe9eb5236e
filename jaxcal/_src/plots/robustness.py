"""Bin-count robustness: one model's errors against the bin count, and model rankings."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from jax.typing import ArrayLike

from jaxcal._src import validation as V
from jaxcal._src.names import KIND_AXIS_LABEL, parse_label
from jaxcal._src.plots import _mpl

__all__ = ["bin_robustness_plot", "rank_stability_plot"]

_KIND_ORDER = ("l1", "squared", "cumulative", "utility", "score", "accuracy", "other")


def _kind(name: str) -> str:
  try:
    return parse_label(name)[0].kind
  except ValueError:
    return "other"


def _bin_counts(num_bins: Any, increasing: bool = True) -> np.ndarray:
  """``num_bins`` as float64 ``(k,)``: at least one, each a positive integer, increasing.

  With ``increasing=False`` any order of distinct counts is taken.
  """
  m = _mpl.numbers(num_bins, "num_bins")
  if m.size == 0 or not np.all((m >= 1) & (m == np.round(m))):
    raise ValueError(f"num_bins must be one or more integers >= 1, got {m.tolist()}")
  if not increasing:
    if np.unique(m).size != m.size:
      raise ValueError(f"num_bins must be distinct, got {m.tolist()}")
  elif np.any(np.diff(m) <= 0):  # a line through unsorted counts zig-zags
    raise ValueError(
      f"num_bins must be increasing (curves are drawn in this order), got {m.tolist()}"
    )
  return m


def bin_robustness_plot(
  num_bins: Sequence[int] | ArrayLike,
  curves: Mapping[str, ArrayLike],
  *,
  bands: Mapping[str, tuple[ArrayLike, ArrayLike]] | None = None,
  reference: Mapping[str, float | ArrayLike] | None = None,
  reference_label: str = "value of a calibrated predictor",
  model: str | None = None,
  n: int | None = None,
  title: str | None = None,
  ax=None,
  legend: bool = True,
):
  """One model's calibration errors against the bin count, ℓ1 and squared errors apart.

  Each curve is drawn in the panel of its kind (the ℓ1 errors ConfECE and
  CWE_bin; the squared errors ConfCE, ConfCE_corr and LinCE_cw; names that
  are not metric labels share an "other" panel), with its bootstrap band
  when given, on logarithmic axes (a linear error axis where a value is
  at most 0, or where the values span at most a factor of 3; a linear bin
  count axis where the counts span less than a factor of 10).

  What to expect. A single model's binned errors are *not* constant in the
  bin count ``m``: for a miscalibrated model the squared errors fall roughly
  like ``1/m`` (the squared bias of ``m`` equal-mass bins is divided among
  them) until they reach the value a calibrated predictor would have
  (``E[ℓ_conf]/n`` for ConfCE_corr, ``E[Brier]/(C·n)`` for LinCE_cw, Lemma
  D.1 of the truthful paper; give it as ``reference``), while the ℓ1 ECE
  picks up more sampling noise as the bins get smaller and rises. What the
  truthful-calibration papers find stable across bin counts is the
  *ranking of models* by a truthful error, shown by
  :func:`rank_stability_plot`.

  Args:
    num_bins: ``(k,)`` bin counts (the x axis).
    curves: label -> ``(k,)`` values, e.g. ``{"ConfECE(fix)": ...,
      "LinCE_cw(qua)": ...}`` (labels of :mod:`jaxcal.report`'s vocabulary).
    bands: label -> ``(lo, hi)``, each ``(k,)``: an interval per bin count
      (e.g. from :func:`jaxcal.bootstrap.bootstrap`).
    reference: label -> a value (a dashed horizontal line in the curve's
      colour, e.g. the calibrated-predictor value of a truthful error) or
      ``(k,)`` values (a dashed curve, e.g. a closed-form expectation).
    reference_label: legend entry of the dashed lines.
    model: model name for the title.
    n: number of test samples, for the title.
    title: the full title (default: "Calibration error against the bin count
      — model (n = ...)").
    ax: a matplotlib ``Axes``: draw every curve there, in one panel, titled
      with ``title`` (to place several such panels in one figure); default:
      a new figure with one panel per kind of error.
    legend: draw the legend below each panel (``False`` to draw one
      yourself, e.g. once for a grid of panels).

  Returns:
    The matplotlib ``Figure`` (one panel per kind of error, or the figure of
    ``ax``).

  Raises:
    TypeError: ``curves``, ``bands`` or ``reference`` not a mapping, ``ax``
      not a matplotlib ``Axes``.
    ValueError: no curves; ``num_bins`` not integers ``>= 1``; a curve that is
      not finite; a curve, band or reference curve whose length differs from
      ``num_bins``; a band with ``lo > hi``, an infinite end or not a pair
      (NaN ends and references are not drawn); an infinite reference; a band
      or reference for a label that is not a curve; ``legend`` not a bool;
      ``n`` not ``None`` or an int ``>= 1``.

  Example:
    >>> import numpy as np
    >>> m = np.array([5, 20, 100, 500])
    >>> fig = bin_robustness_plot(m, {"ConfECE(fix)": 0.02 + 0.01 * np.log(m) / 6,
    ...                               "LinCE_cw(qua)": 1e-3 / m + 1e-5})
    >>> [ax.get_ylabel() for ax in fig.axes]
    ['ℓ1 calibration error', 'squared calibration error']

  Reference: Lu, Wu, Hartline & Hu (2025), "Truthful Calibration Errors for
  Multi-Class Prediction", arXiv:2510.06388, §5 (binning robustness: Fig. 3,
  Table 1) and Lemma D.1; Nixon et al. (2019), "Measuring Calibration in
  Deep Learning", arXiv:1904.01685.
  """
  m = _bin_counts(num_bins)
  _mpl.check_mapping(curves, "curves", "label -> values")
  _mpl.check_ax(ax)
  n = _mpl.check_count(n)
  legend = V.check_flag(legend, "legend")
  data = {}
  for name, vals in curves.items():
    v = _mpl.numbers(vals, f"curve {name!r}")
    if v.shape != m.shape:
      raise ValueError(
        f"curve {name!r} has {v.size} values for {m.size} bin counts; give one value per bin count"
      )
    data[name] = v
  bands = _mpl.bands(bands, data, m.size, "labels of curves", "label")
  if reference is not None:
    _mpl.check_keys(reference, data, "reference", "labels of curves", "label -> values")
  refs = {}
  for name, r in (reference or {}).items():
    r = _mpl.numbers(r, f"reference {name!r}", finite=False)  # NaN: not drawn
    if np.any(np.isinf(r)):
      raise ValueError(f"reference {name!r} must be finite (or NaN: not drawn), got {r.tolist()}")
    if r.size not in (1, m.size):
      raise ValueError(
        f"reference {name!r} has {r.size} values; give one value or one per bin count ({m.size})"
      )
    refs[name] = r
  kinds = sorted({_kind(k) for k in data}, key=_KIND_ORDER.index)
  with _mpl.style():
    plt = _mpl.pyplot()
    one_panel = ax is not None
    if one_panel:
      fig, axes, panels = _mpl.root_figure(ax), [ax], [list(data)]
    else:
      fig, grid = plt.subplots(
        1, len(kinds), figsize=(3.9 * len(kinds) + 0.4, 3.9), squeeze=False, layout="constrained"
      )
      axes = list(grid[0])
      panels = [[k for k in data if _kind(k) == kind] for kind in kinds]
    for ax, names in zip(axes, panels):
      panel_kinds = {_kind(k) for k in names}
      kind = panel_kinds.pop() if len(panel_kinds) == 1 else "other"
      ys, used = [], set()
      for i, name in enumerate(names):
        color = _mpl.color_of(name, i)
        # the same metric with another binning: same colour, another line style
        ax.plot(
          m,
          data[name],
          color=color,
          label=name,
          ls="-." if color in used else "-",
          marker="o" if len(m) == 1 else None,  # one bin count: a point, not an empty panel
        )
        used.add(color)
        ys.append(data[name])
        if name in bands:
          lo, hi = bands[name]
          ax.fill_between(m, lo, hi, color=color, alpha=0.18, lw=0)
          ys += [lo, hi]
        if name in refs:
          r = refs[name]
          if r.size == 1:
            ax.axhline(float(r[0]), color=color, ls="--", lw=1)
          else:
            ax.plot(m, r, color=color, ls="--", lw=1)
          ys.append(r)
      if any(k in refs for k in names):
        ax.plot([], [], ls="--", color="0.4", lw=1, label=reference_label)
      ax.set_xlabel("number of bins m")
      ax.set_ylabel(KIND_AXIS_LABEL.get(kind, "calibration error"))
      if m.min() > 0 and m.max() / m.min() >= 10:
        _mpl.log_ticks(ax, "x", m.min(), m.max())
      if m.max() > m.min():  # (one bin count: matplotlib's own margins around the point)
        ax.set_xlim(m.min(), m.max())
      _mpl.error_axis(ax, ys)
      if legend:
        _mpl.legend_outside(ax, "below", ncol=1)
    text = title or _mpl.title("Calibration error against the bin count", model, n)
    if one_panel:
      axes[0].set_title(text)
    else:
      fig.suptitle(text)
  return fig


def rank_stability_plot(
  num_bins: Sequence[int] | ArrayLike,
  correlations: Mapping[str, ArrayLike],
  *,
  num_models: int | None = None,
  n: int | None = None,
  title: str | None = None,
  method: str = "Spearman",
):
  """How stable each error's ranking of several models is across bin counts.

  One heat map per error: entry ``(i, j)`` is the rank correlation, over the
  models, between the error at ``num_bins[i]`` and at ``num_bins[j]`` (1 =
  the same ordering of the models at both bin counts). This is the quantity
  of the truthful-calibration paper's Table 1 (there at 2000, 20 and 5 bins),
  where the truthful errors keep high correlations between bin counts and
  the non-truthful ConfECE / ConfCE do not.

  Args:
    num_bins: ``(k,)`` distinct bin counts (rows and columns), in any order
      (e.g. the paper's 2000, 20, 5); drawn increasing, the matrices' rows and
      columns permuted to match.
    correlations: label -> ``(k, k)`` correlation matrix (e.g.
      :func:`jaxcal.report.rank_stability`).
    num_models: number of models ranked, for the title.
    n: number of test samples, for the title.
    title: the full title.
    method: name of the rank correlation, for the colour bar.

  Returns:
    The matplotlib ``Figure``.

  Raises:
    TypeError: ``correlations`` not a mapping.
    ValueError: no matrices, ``num_bins`` not distinct integers ``>= 1``, a matrix
      that is not ``(k, k)`` real numbers in ``[-1, 1]`` (NaN allowed), or
      ``num_models`` or ``n`` not ``None`` or an int ``>= 1``.

  Example:
    >>> import numpy as np
    >>> r = np.array([[1.0, 0.9], [0.9, 1.0]])
    >>> fig = rank_stability_plot([5, 2000], {"ConfECE(fix)": r, "LinCE_cw(qua)": r})
    >>> fig.axes[0].get_xlabel()
    'number of bins'

  Reference: Lu, Wu, Hartline & Hu (2025), "Truthful Calibration Errors for
  Multi-Class Prediction", arXiv:2510.06388, §5 and Table 1.
  """
  given = _bin_counts(num_bins, increasing=False)
  order = np.argsort(given)
  m = [int(v) for v in given[order]]
  k = len(m)
  _mpl.check_mapping(correlations, "correlations", "label -> (k, k) matrix")
  num_models = _mpl.check_count(num_models, "num_models")
  n = _mpl.check_count(n)
  mats = {}
  for name, r in correlations.items():
    try:
      a = np.asarray(r, np.float64)
    except (TypeError, ValueError):
      raise ValueError(f"correlations[{name!r}] must be real numbers, got {r!r:.80}") from None
    if a.shape != (k, k):
      raise ValueError(f"correlations[{name!r}] must be ({k}, {k}), got {a.shape}")
    if np.any(np.abs(a) > 1 + 1e-6):  # NaN (a constant error) passes: drawn blank
      raise ValueError(f"correlations[{name!r}] must lie in [-1, 1] (or be NaN), got {a.tolist()}")
    mats[name] = a[np.ix_(order, order)]
  what = f"{method} correlation of model rankings between bin counts"
  sub = f"{num_models} models" if num_models else None
  with _mpl.style():
    plt = _mpl.pyplot()
    cols = min(len(mats), 3)
    rows = -(-len(mats) // cols)
    size = 1.0 + 0.42 * k
    fig, axes = plt.subplots(
      rows,
      cols,
      figsize=(size * cols + 1.0, size * rows + 0.6),
      squeeze=False,
      layout="constrained",
    )
    image: Any = None
    for ax, (name, a) in zip(axes.ravel(), mats.items()):
      image = ax.imshow(a, vmin=-1, vmax=1, cmap="RdBu_r", origin="lower")
      ax.set_xticks(range(k), [str(v) for v in m], rotation=45 if k > 5 else 0)
      ax.set_yticks(range(k), [str(v) for v in m])
      ax.grid(False)
      for i in range(k):
        for j in range(k):
          if np.isfinite(a[i, j]):
            ax.text(
              j,
              i,
              f"{a[i, j]:.2f}",
              ha="center",
              va="center",
              fontsize=6.5 if k > 5 else 8,
              color="white" if abs(a[i, j]) > 0.6 else "black",
            )
      ax.set_title(name)
      ax.set_xlabel("number of bins")
      ax.set_ylabel("number of bins")
    for ax in axes.ravel()[len(mats) :]:
      ax.set_visible(False)
    fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.8, label=method)
    fig.suptitle(title or _mpl.title(what, sub, n))
  return fig
