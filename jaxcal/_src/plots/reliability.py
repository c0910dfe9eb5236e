"""Top-label reliability diagram with consistency bands and a sample-count panel."""

from __future__ import annotations

import numpy as np
from jax.typing import ArrayLike

from jaxcal._src import validation as V
from jaxcal._src.bootstrap import ConsistencyBands, consistency_bands
from jaxcal._src.calibration_errors import conf_ece, reliability_stats
from jaxcal._src.names import format_number, label
from jaxcal._src.plots import _mpl

__all__ = ["reliability_diagram"]

_BAR = "#4C72B0"
_GAP = "#DD8452"
_BAND = "0.35"


#: Narrowest bar of a quantile bin (as a share of the confidence axis).
_MIN_WIDTH = 0.004


def _quantile_bars(
  lo: np.ndarray, hi: np.ndarray, keep: np.ndarray, conf: np.ndarray, acc: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
  """Left ends and widths of the non-empty quantile bins' bars: in ``[0, 1]``, none overlapping.

  A bar spans its bin's confidences ``[lo, hi]`` where that is at least a
  minimum width and clear of its neighbours. A bin of one value (every
  confidence 1.0 in float32, or a tie split across bins) would be invisible,
  or hidden under the next: each bar starts where the one before it ends and
  is at least that wide, then each ends where the one after it starts (and
  at 1), shortened or, below that width, moved left. The minimum width is
  :data:`_MIN_WIDTH`, halved (down to 1/64 of it) while that moves a bar off
  its bin's mean confidence ``conf``: at 0.004, twenty bins of a confident
  CIFAR-10 model crowded into ``[0.989, 1]`` were pushed left, 17 bars
  outside their bins (up to 0.05 off). Exact ties can leave some bars off
  at every width. Before the count of bars off, no bar may be moved past its
  accuracy ``acc`` (an overconfident bin whose bar lies wholly where the
  diagonal is below its accuracy reads as underconfident, and the reverse):
  where 13 bins of sharpened CIFAR-10 logits held only confidence 1.0, the
  widest bars reached down to 0.948 and showed bins of accuracy 0.988 above
  the diagonal.
  """
  idx = np.flatnonzero(keep)
  base = min(_MIN_WIDTH, 1.0 / max(len(idx), 1))
  best = None
  for w in base / 2.0 ** np.arange(7):
    left, right = lo.astype(np.float64).copy(), hi.astype(np.float64).copy()
    end = 0.0
    for b in idx:  # no bar starts before the previous one ends
      left[b] = max(left[b], end)
      right[b] = max(right[b], left[b] + w)
      end = right[b]
    start = 1.0
    for b in idx[::-1]:  # nor ends after the next one starts
      right[b] = min(right[b], start)
      left[b] = min(left[b], right[b] - w)
      start = left[b]
    tol = 1e-9
    c, a = conf[idx], acc[idx]
    off = int(np.sum((left[idx] > c + tol) | (right[idx] < c - tol)))
    flipped = int(np.sum(((a < c - tol) & (right[idx] < a)) | ((a > c + tol) & (left[idx] > a))))
    score = (flipped, off)  # the widest of the best (visible bars)
    if best is None or score < best[0]:
      best = (score, left, right - left)
    if off == 0:
      break
  return best[1], best[2]


def reliability_diagram(
  probs: ArrayLike,
  labels: ArrayLike,
  num_bins: int = 15,
  binning: str = "fixed",
  *,
  from_logits: bool = False,
  where: ArrayLike | None = None,
  bands: bool | ConsistencyBands = False,
  seed: int = 0,
  model: str | None = None,
  title: str | None = None,
  ax=None,
):
  """Top-label reliability diagram: accuracy against confidence per bin, with counts.

  Bars show the accuracy of each confidence bin; the shaded part is the gap
  to the bin's mean confidence, and ``ConfECE = Σ_b (n_b/n) |conf_b − acc_b|``
  is given in the legend. With ``bands`` each bin gets a *consistency band*
  (grey bar on the diagonal at the bin's mean confidence): the 5 %-95 % range
  of the accuracy a calibrated predictor with these confidences would show
  (labels redrawn from the predicted probabilities, Bröcker & Smith 2007;
  :func:`jaxcal.bootstrap.consistency_bands`). An accuracy outside its band
  is evidence of miscalibration in that bin; inside it, the gap is within
  sampling noise. The lower panel counts the samples per bin (log scale).
  Quantile bins are drawn between the smallest and largest confidence they
  hold, at least 0.004 wide (less where bins crowd, so that each bar still
  covers its bin's mean confidence) and not overlapping, inside ``[0, 1]``:
  a bin of one value (all confidences 1.0, or a tie split across bins) is
  drawn beside its neighbours, which are shortened or moved just enough
  (the consistency bands stay at the bins' mean confidences).

  Args:
    probs: ``(n, C)`` probabilities (logits with ``from_logits=True``).
    labels: ``(n,)`` integer labels.
    num_bins: number of bins (a static int).
    binning: ``"fixed"`` (equal width) or ``"quantile"`` (equal mass).
    from_logits: treat ``probs`` as logits.
    where: optional ``(n,)`` bool mask: the diagram (and its bands) of the
      selected samples, the others neither checked nor read (data padded
      to a size bucket draws with one compiled program per bucket).
    bands: ``True`` to compute consistency bands (1000 resamples, 90 %), or
      a :class:`jaxcal.bootstrap.ConsistencyBands` computed beforehand
      (same ``num_bins`` and ``binning``).
    seed: PRNG seed of the bands when ``bands=True``.
    model: model name for the title (with ``n``).
    title: the full title (default: "Reliability diagram — model (n = ...)").
    ax: matplotlib axes to draw the diagram into, without the count panel
      (default: a new figure with both panels).

  Returns:
    The matplotlib ``Figure``.

  Raises:
    TypeError: ``ax`` not a matplotlib ``Axes``, ``bands`` neither a bool
      nor a :class:`~jaxcal.bootstrap.ConsistencyBands`.
    ValueError: invalid predictions, bin count or binning (from the metrics),
      bands computed for another bin count, or a ``seed`` that is not an int
      (with ``bands=True``).

  Example:
    >>> import jax
    >>> p = jax.nn.softmax(2 * jax.random.normal(jax.random.key(0), (400, 5)))
    >>> y = jax.random.categorical(jax.random.key(1), jax.numpy.log(p))
    >>> fig = reliability_diagram(p, y, 10, model="toy")
    >>> fig.axes[0].get_title()
    'Reliability diagram — toy (n = 400)'

  Reference: DeGroot & Fienberg (1983), "The Comparison and Evaluation of
  Forecasters"; Guo, Pleiss, Sun & Weinberger (2017), "On Calibration of
  Modern Neural Networks", arXiv:1706.04599, §2 (reliability diagrams,
  ECE); Bröcker & Smith (2007), "Increasing the Reliability of Reliability
  Diagrams", Weather and Forecasting 22(3), §4 (consistency bars).
  """
  _mpl.check_ax(ax)
  if not isinstance(bands, ConsistencyBands):
    try:
      V.check_flag(bands, "bands")
    except ValueError:
      raise TypeError(
        f"bands must be True, False or a ConsistencyBands, got {type(bands).__name__}"
      ) from None
  s = reliability_stats(probs, labels, num_bins, binning, from_logits=from_logits, where=where)
  ece = float(conf_ece(probs, labels, num_bins, binning, from_logits=from_logits, where=where))
  if bands is True:
    bands = consistency_bands(
      V.seed_key(seed), probs, num_bins, binning, from_logits=from_logits, where=where
    )
  if isinstance(bands, ConsistencyBands) and np.shape(bands.lo) != (num_bins,):
    raise ValueError(
      f"bands were computed for {np.shape(bands.lo)[0]} bins, the diagram has num_bins = "
      f"{num_bins}; compute them with the same num_bins and binning"
    )
  cnt = np.asarray(s.counts)
  if isinstance(bands, ConsistencyBands) and not np.array_equal(np.asarray(bands.counts), cnt):
    raise ValueError(
      "bands were computed on other data or with another binning: their samples per bin "
      f"{np.asarray(bands.counts).tolist()} differ from the diagram's {cnt.tolist()}; compute "
      "them from the same probabilities, num_bins and binning"
    )
  conf, acc = np.asarray(s.confidence), np.asarray(s.accuracy)
  lo, hi = np.asarray(s.lower), np.asarray(s.upper)
  n = int(cnt.sum())
  keep = cnt > 0
  width = hi - lo  # fixed bins: 1 / num_bins; quantile bins: their range of confidences
  if binning == "quantile":
    lo, width = _quantile_bars(lo, hi, keep, conf, acc)
  with _mpl.style():
    hist_ax = None
    if ax is None:
      plt = _mpl.pyplot()
      fig, (ax, hist_ax) = plt.subplots(
        2,
        1,
        figsize=(4.4, 5.6),
        sharex=True,
        layout="constrained",
        gridspec_kw={"height_ratios": [3.2, 1]},
      )
    else:
      fig = _mpl.root_figure(ax)
    ax.bar(
      lo[keep], acc[keep], width=width[keep], align="edge", color=_BAR, edgecolor="white", lw=0.6
    )
    ax.bar(
      lo[keep],
      np.abs(conf - acc)[keep],
      bottom=np.minimum(acc, conf)[keep],
      width=width[keep],
      align="edge",
      color=_GAP,
      alpha=0.55,
      edgecolor=_GAP,
      lw=0.6,
    )
    ax.plot([0, 1], [0, 1], ls="--", color="0.3", lw=1)
    band_label = None
    if isinstance(bands, ConsistencyBands):
      bc = np.asarray(bands.confidence)
      blo = np.clip(np.asarray(bands.lo), 0.0, 1.0)
      bhi = np.clip(np.asarray(bands.hi), 0.0, 1.0)
      ok = np.isfinite(blo) & np.isfinite(bhi) & keep
      ax.vlines(bc[ok], blo[ok], bhi[ok], color=_BAND, lw=2.2, zorder=3)
      ax.plot(bc[ok], bc[ok], "o", ms=2.5, color=_BAND, zorder=4)
      pct = f"{100 * float(bands.level):.3g}"
      band_label = f"consistency band ({pct} %)"
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_ylabel("accuracy")
    ax.set_title(title or _mpl.title("Reliability diagram", model, n))
    from matplotlib.colors import to_rgb
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    over = tuple(0.55 * g + 0.45 for g in to_rgb(_GAP))  # the gap over the white background
    under = tuple(0.55 * g + 0.45 * b for g, b in zip(to_rgb(_GAP), to_rgb(_BAR)))  # over a bar
    handles = [
      Patch(color=_BAR, label="accuracy"),
      Patch(color=over, label="gap: confidence above accuracy"),
      Patch(color=under, label="gap: accuracy above confidence"),
      Line2D([0], [0], ls="--", color="0.3", lw=1, label="perfect calibration"),
    ]
    if band_label:
      handles.append(Line2D([0], [0], color=_BAND, lw=2.2, label=band_label))
    handles.append(
      Line2D(
        [],
        [],
        ls="none",
        label=f"{label('ConfECE', binning, num_bins)} = {format_number(ece)}",
      )
    )
    if hist_ax is not None:
      hist_ax.bar(
        lo[keep],
        cnt[keep],
        width=width[keep],
        align="edge",
        color="0.45",
        edgecolor="white",
        lw=0.6,
      )
      top = max(float(cnt.max()), 1.0)
      hist_ax.set_ylim(0.7, 10 ** np.ceil(np.log10(top * 1.05)))
      _mpl.log_ticks(hist_ax, "y", 0.7, 10 ** np.ceil(np.log10(top * 1.05)))
      hist_ax.set_ylabel("samples")
      hist_ax.set_xlabel("confidence (max probability)")
      fig.legend(handles=handles, loc="outside lower center", ncol=2)
    else:
      ax.set_xlabel("confidence (max probability)")
      _mpl.legend_outside(ax, "right", handles=handles)
  return fig
