"""The one figure style of jaxcal: lazy matplotlib, fonts, colours, ticks, legends, saving.

Every plot function draws inside :func:`style` (fonts and lines sized for a
paper column, no top/right spines, light grid), names metrics with the
vocabulary of :mod:`jaxcal._src.names` and colours them with
:data:`METRIC_COLORS`, titles itself with :func:`title` (what, model, n),
puts legends outside the data (:func:`legend_outside`), and writes readable
log ticks (:func:`log_ticks`). :func:`savefig` writes PNG beside PDF/SVG.
"""

from __future__ import annotations

import contextlib
import numbers as numbers_
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from jaxcal._src import validation as V

__all__ = [
  "pyplot",
  "style",
  "new_axes",
  "title",
  "legend_outside",
  "log_ticks",
  "savefig",
  "METRIC_COLORS",
  "PALETTE",
  "color_of",
]

#: Colour of each metric family, the same in every figure.
METRIC_COLORS = {
  "ConfECE": "#4C72B0",
  "CWE_bin": "#8172B2",
  "ConfCE": "#DD8452",
  "ConfCE_corr": "#55A868",
  "LinCE_cw": "#C44E52",
  "ECCE": "#937860",
  "smECE": "#DA8BC3",
}

#: Colours of models / methods, in order (matplotlib's tab10, colour-blind safer order).
PALETTE = (
  "#1f77b4",
  "#ff7f0e",
  "#2ca02c",
  "#d62728",
  "#9467bd",
  "#8c564b",
  "#e377c2",
  "#7f7f7f",
  "#bcbd22",
  "#17becf",
)

_RC = {
  "font.size": 9,
  "axes.titlesize": 10,
  "axes.labelsize": 9,
  "legend.fontsize": 8,
  "xtick.labelsize": 8,
  "ytick.labelsize": 8,
  "axes.spines.top": False,
  "axes.spines.right": False,
  "axes.grid": True,
  "grid.alpha": 0.3,
  "grid.linewidth": 0.6,
  "lines.linewidth": 1.5,
  "legend.frameon": False,
  "figure.dpi": 100,
  "pdf.fonttype": 42,
  "ps.fonttype": 42,
  "svg.fonttype": "none",
}


def pyplot():
  """Imports ``matplotlib.pyplot``, selecting the Agg backend on a headless Linux.

  Only when no backend was chosen: one the user chose (``matplotlib.use``,
  ``MPLBACKEND``, a pyplot already imported) is left as it is, and on macOS
  and Windows (no ``DISPLAY`` there) matplotlib picks its own.
  """
  import sys

  import matplotlib

  chosen = getattr(matplotlib.rcParams, "_get_backend_or_none", lambda: "unknown")()
  if (
    chosen is None
    and sys.platform.startswith("linux")
    and "matplotlib.pyplot" not in sys.modules
    and not os.environ.get("DISPLAY")
    and "MPLBACKEND" not in os.environ
  ):
    matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  return plt


@contextlib.contextmanager
def style() -> Iterator[None]:
  """The jaxcal figure style (an ``rc_context``) for everything drawn inside."""
  plt = pyplot()
  with plt.rc_context(_RC):
    yield


def check_ax(ax: Any) -> Any:
  """``ax`` if it is ``None`` or a matplotlib ``Axes``; a TypeError naming it otherwise."""
  if ax is not None:
    from matplotlib.axes import Axes

    if not isinstance(ax, Axes):
      raise TypeError(f"ax must be a matplotlib Axes or None, got {type(ax).__name__}")
  return ax


def check_mapping(value: Any, name: str, what: str) -> None:
  """A non-empty mapping ``what`` (TypeError if not a mapping, ValueError if empty)."""
  if not isinstance(value, Mapping):
    raise TypeError(f"{name} must be a mapping {what}, got {type(value).__name__}")
  if not value:
    raise ValueError(f"{name} must hold at least one {what} entry")


def check_keys(value: Any, known: Any, name: str, of: str, what: str) -> None:
  """``value`` is a mapping ``what`` whose keys are all in ``known`` (else they would be ignored)."""
  if not isinstance(value, Mapping):
    raise TypeError(f"{name} must be a mapping {what}, got {type(value).__name__}")
  extra = [k for k in value if k not in known]
  if extra:
    raise ValueError(f"{name} has entries {extra} that are not {of} {list(known)}")


def _real(v: Any) -> bool:
  """An element of an object array :func:`numbers` reads: None (NaN) or a real number."""
  if v is None:
    return True
  if isinstance(v, bool | np.bool_ | str | bytes):
    return False
  return isinstance(v, numbers_.Real) or V.real_dtype(np.asarray(v).dtype)


def numbers(value: Any, name: str, *, finite: bool = True) -> np.ndarray:
  """``value`` as a 1-D float64 array; a ValueError naming ``name`` if it is not real numbers,
  has more than one axis longer than 1 (a stack of rows), or (``finite``) holds NaN or inf:
  a figure of such values would mislead."""
  try:
    raw = np.asarray(value)
    # numeric strings ("0.1") and complex values had read as numbers (the imaginary
    # part dropped with only numpy's warning); an object array holding either too.
    # None stays NaN (report.json's null: no interval end), Fraction a number.
    if not (V.real_dtype(raw.dtype) or (raw.dtype.kind == "O" and all(map(_real, raw.flat)))):
      raise TypeError
    a = np.asarray(raw, np.float64)
  except (TypeError, ValueError):
    raise ValueError(f"{name} must be real numbers, got {value!r:.80}") from None
  if sum(d > 1 for d in a.shape) > 1:  # a (k, M) stack is k curves, not one
    raise ValueError(f"{name} must be one row of numbers, got shape {a.shape}")
  a = a.ravel()
  if finite and not np.all(np.isfinite(a)):
    i = int(np.argmin(np.isfinite(a)))
    raise ValueError(f"{name} must be finite, got {a[i]} at index {i}")
  return a


def bands(bands: Any, data: Mapping[str, Any], k: int, of: str, key: str) -> dict:
  """``key -> (lo, hi)`` of keys in ``data`` (``of`` names them), each ``(k,)``, ``lo <= hi``.

  NaN ends are allowed (not drawn). A band that is not a pair, has another
  length, an infinite end or ``lo > hi`` somewhere raises a ``ValueError``
  naming it.
  """
  if bands is None:
    return {}
  check_keys(bands, data, "bands", of, f"{key} -> (lo, hi)")
  out = {}
  for name, b in bands.items():
    # a pair, or one (2, k) array (numpy or JAX)
    if isinstance(b, str) or not (isinstance(b, Sequence) or np.ndim(b) >= 1) or len(b) != 2:
      raise ValueError(f"band {name!r} must be a pair (lo, hi) of {k} values each")
    lo, hi = (numbers(v, f"band {name!r}", finite=False) for v in b)
    if lo.size != k or hi.size != k:
      raise ValueError(f"band {name!r} must have {k} lower and upper values")
    if np.any(np.isinf(lo)) or np.any(np.isinf(hi)):  # drawn to the axes' edge: not an interval
      i = int(np.argmax(np.isinf(lo) | np.isinf(hi)))
      raise ValueError(
        f"band {name!r} has an infinite end at index {i}: [{lo[i]}, {hi[i]}] (NaN: not drawn)"
      )
    if np.any(lo > hi):
      i = int(np.argmax(lo > hi))
      raise ValueError(f"band {name!r} has lo > hi at index {i}: {lo[i]} > {hi[i]}")
    out[name] = (lo, hi)
  return out


def is_style(what: str, value: Any) -> bool:
  """Whether ``value`` is a matplotlib marker (``what = "markers"``) or colour (``"colors"``)."""
  pyplot()  # matplotlib imported (lazily) with its backend set
  if what == "colors":
    from matplotlib.colors import is_color_like

    return bool(is_color_like(value))
  from matplotlib.markers import MarkerStyle

  try:
    MarkerStyle(value)
  except (TypeError, ValueError):
    return False
  return True


def root_figure(ax):
  """The ``Figure`` holding ``ax``, also when ``ax`` lies in a ``SubFigure``.

  ``ax.figure`` is the sub-figure there, which :func:`savefig` (and
  matplotlib's own ``savefig``) cannot save; plots return the root figure.
  """
  from matplotlib.figure import Figure

  fig = ax.figure
  while not isinstance(fig, Figure) and getattr(fig, "figure", fig) is not fig:
    fig = fig.figure
  return fig


def new_axes(ax=None, figsize=(5.0, 4.0)):
  """Returns ``(fig, ax)``: a new constrained-layout figure unless ``ax`` is given."""
  if check_ax(ax) is not None:
    return root_figure(ax), ax
  plt = pyplot()
  fig, ax = plt.subplots(figsize=figsize, layout="constrained")
  return fig, ax


def color_of(name: str, index: int = 0) -> str:
  """The colour of a metric label (by its name) or, for anything else, ``PALETTE[index]``."""
  stem = name.split("(", 1)[0]
  return METRIC_COLORS.get(stem, PALETTE[index % len(PALETTE)])


def check_count(value: Any, name: str = "n") -> int | None:
  """A count for a title (``n`` samples, models): ``None`` or an int ``>= 1``.

  Checked before anything is drawn: ``"abc"`` raised ``int()``'s "invalid
  literal", 1.5 was shown as ``n = 1`` and -3 as ``n = -3``. Integral 0-d
  arrays (a JAX or numpy count) are read as their int.

  Example:
    >>> check_count(1.5)
    Traceback (most recent call last):
    ...
    ValueError: n must be an integer >= 1, got 1.5
  """
  return None if value is None else V.check_int(value, name, minimum=1)


def check_label(value: Any, name: str) -> None:
  """``value`` is a str or None (a figure's name for something), else a TypeError naming ``name``."""
  if value is not None and not isinstance(value, str):
    raise TypeError(f"{name} must be a str or None, got {type(value).__name__} {value!r:.40}")


def title(what: str, model: str | None = None, n: int | None = None) -> str:
  """``what — model (n = 10,000)``; parts that are ``None`` are left out.

  ``model`` must be a string or ``None``: a number there had ended in
  ``str.join``'s "sequence item 0: expected str instance".
  """
  check_label(model, "model")
  parts = [what] if what else []
  tail = model or ""
  if n is not None:
    tail = f"{tail} (n = {int(n):,})" if tail else f"n = {int(n):,}"
  if tail:
    parts.append(tail)
  return " — ".join(parts)


def legend_outside(ax, where: str = "right", ncol: int | None = None, handles=None, labels=None):
  """A legend outside the axes' data area: to the ``"right"`` or ``"below"``."""
  kw: dict[str, Any] = {}
  if handles is not None:
    kw["handles"] = handles
  if labels is not None:
    kw["labels"] = labels
  if where == "right":
    return ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, **kw)
  if where == "below":
    h = handles if handles is not None else ax.get_legend_handles_labels()[0]
    return ax.legend(
      loc="upper center",
      bbox_to_anchor=(0.5, -0.2),
      ncol=ncol or min(3, max(1, len(h))),
      borderaxespad=0.0,
      **kw,
    )
  raise ValueError(f"where must be 'right' or 'below', got {where!r}")


def error_axis(ax, values: list) -> None:
  """A log ``y`` axis for ``values`` spanning more than 3x, all positive (else linear).

  A log axis would leave values <= 0 out unseen; NaN and inf are not drawn.
  """
  allv = np.concatenate(values)
  fin = allv[np.isfinite(allv)]
  if fin.size and fin.min() > 0 and fin.max() / fin.min() > 3:
    lo, hi = fin.min() / 1.3, fin.max() * 1.3
    ax.set_ylim(lo, hi)
    log_ticks(ax, "y", lo, hi)


def log_ticks(ax, axis: str = "y", lo: float | None = None, hi: float | None = None) -> None:
  """Readable logarithmic ticks on ``axis`` (``"x"`` or ``"y"``).

  Spanning at least two decades: labelled powers of ten (``10^-3``) and
  unlabelled minor ticks (every other decade labelled beyond eight decades).
  From 0.7 to two decades: labels at 1-2-5 steps (``0.02``, ``0.05``,
  ``0.1``). Narrower: evenly spaced round values (steps of 1, 2, 2.5 or 5
  times a power of ten), so a narrow log axis always shows at least two
  labels. Every label is its tick's value, with as many significant digits
  as that takes (``12.5``, not ``12``). ``lo``/``hi`` default to the current
  limits.
  """
  from matplotlib import ticker

  a = ax.xaxis if axis == "x" else ax.yaxis
  (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
  if lo is None or hi is None:
    lo, hi = ax.get_xlim() if axis == "x" else ax.get_ylim()
  lo, hi = float(lo), float(hi)
  if not (lo > 0 and hi > lo):
    return
  decades = np.log10(hi) - np.log10(lo)
  if decades >= 2:
    a.set_major_locator(ticker.LogLocator(base=10, numticks=12))
    a.set_major_formatter(ticker.LogFormatterSciNotation(base=10))
    # 2..9 times each power of ten (subs 0.2..0.9 had put them a decade low: none
    # above the last power of ten shown, a spurious decade below the first)
    a.set_minor_locator(ticker.LogLocator(base=10, subs=np.arange(2.0, 10.0), numticks=12))
    a.set_minor_formatter(ticker.NullFormatter())
    if decades > 8:  # label every other decade
      a.set_major_locator(
        ticker.LogLocator(base=10, numticks=max(3, int(decades // 2) + 2), subs=(1.0,))
      )
    return
  if decades > 0.7:  # at least two of 1-2-5 lie in any 0.7 decades
    a.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0), numticks=15))
  else:  # LogLocator would fall back to linear steps its labels cannot name
    a.set_major_locator(ticker.MaxNLocator(nbins=4, steps=[1, 2, 2.5, 5, 10]))
  a.set_major_formatter(ticker.FuncFormatter(lambda v, _: _short(v)))
  a.set_minor_formatter(ticker.NullFormatter())


#: Mantissas of the minor ticks :func:`label_minor_ticks` labels (2e-3, 5e-3, ...).
_MINOR_LABELS = (2.0, 5.0)


def label_minor_ticks(ax: Any, lo: float, hi: float) -> None:
  """Labels the minor ticks at 2 and 5 times a power of ten of a :func:`log_ticks` ``x`` axis
  when fewer than three major ticks lie in ``[lo, hi]`` (two decades had showed two labels
  only).

  The labels are written as the major ones are (``2×10^-3`` beside ``10^-3``, or the
  value itself on a narrower axis).
  """
  from matplotlib import ticker

  axis = ax.xaxis
  major = np.asarray(axis.get_major_locator().tick_values(lo, hi))
  if np.sum((major >= lo * (1 - 1e-9)) & (major <= hi * (1 + 1e-9))) >= 3:
    return
  sci = isinstance(axis.get_major_formatter(), ticker.LogFormatterSciNotation)

  def text(v: float, pos: Any = None) -> str:
    if not v > 0:
      return ""
    exponent = int(np.floor(np.log10(v) + 1e-9))
    mantissa = v / 10.0**exponent
    if not any(abs(mantissa - m) < 1e-6 for m in _MINOR_LABELS):
      return ""
    if sci:
      return rf"$\mathdefault{{{mantissa:g}\times10^{{{exponent}}}}}$"
    return _short(v)

  axis.set_minor_formatter(ticker.FuncFormatter(text))


def tick_label(v: float) -> str:
  """A linear-axis tick label: at most three significant digits, no trailing zeros.

  Example:
    >>> [tick_label(v) for v in (0.0, 0.01, 0.0125, 0.00025)]
    ['0', '0.01', '0.0125', '0.00025']
  """
  return "0" if v == 0 else f"{v:.3g}"


def _short(v: float) -> str:
  """A log-axis tick label: the value itself, in the fewest significant digits (2 to 6).

  Example:
    >>> [_short(v) for v in (100.0, 12.5, 0.000275, 0.05)]
    ['100', '12.5', '2.75e-4', '0.050']
  """
  from jaxcal._src.names import format_number

  if 1 <= v < 1e4 and v == round(v):  # whole tick values: "100", not "1.0e2"; "2", not "2.0"
    return f"{int(round(v))}"
  if not v > 0:
    return ""
  for digits in range(2, 7):
    text = format_number(v, digits)
    if abs(float(text) - v) <= 1e-9 * v:
      return text
  return text


#: The resolutions :func:`savefig` writes PNGs at (matplotlib fails below 4; a
#: 5-inch figure at 2400 dpi is 12,000 pixels wide).
DPI_RANGE = (10, 2400)
_DPI_HINT = f"a PNG resolution in [{DPI_RANGE[0]}, {DPI_RANGE[1]}] dots per inch"


def savefig(
  fig, path: str | os.PathLike, formats: Sequence[str] = ("png", "pdf"), dpi: int = 150
) -> list[str]:
  """Writes ``fig`` once per format: ``path`` with each suffix (PNG raster, PDF/SVG vector).

  Saving the same figure twice writes the same bytes: the SVG and PDF files
  carry no date (matplotlib's default is the time of the save) and the SVG's
  ids are hashed with a fixed salt (``svg.hashsalt``, random by default).

  Args:
    fig: a matplotlib ``Figure``.
    path: file name; a ``.png``, ``.pdf`` or ``.svg`` suffix is replaced by each
      format's, any other is kept (``run.v2`` is written as ``run.v2.png``).
    formats: any of ``"png"``, ``"pdf"``, ``"svg"`` (default PNG and PDF).
    dpi: resolution of raster formats, an int in ``[10, 2400]`` (checked for
      every format): below 10 matplotlib failed to lay out the tight box
      (1 to 3 crashed), above 2400 a figure of a few inches grows to
      gigapixels (``10**6`` raised ``MemoryError``).

  Returns:
    The paths written, in the order of ``formats``.

  Raises:
    TypeError: ``fig`` is not a matplotlib ``Figure``; ``path`` is not a
      ``str`` or an ``os.PathLike`` of one (bytes included).
    ValueError: an unknown format, ``formats`` empty or a bare string,
      ``dpi`` not an int in ``[10, 2400]``, or a ``path`` without a file name
      (``""`` wrote a hidden ``./.png``, ``"dir/"`` wrote ``dir/.png``).
    OSError: a file cannot be written; each file is written whole or not at
      all (an existing file is kept), files of the earlier formats stay.

  Example:
    >>> import tempfile, os
    >>> from jaxcal.plots import ecdf_plot, savefig
    >>> fig = ecdf_plot({"a": [0.01, 0.02, 0.04]})
    >>> d = tempfile.mkdtemp()
    >>> [os.path.basename(p) for p in savefig(fig, os.path.join(d, "ecdf"), ("png", "svg"))]
    ['ecdf.png', 'ecdf.svg']
  """
  allowed = ("png", "pdf", "svg")
  from matplotlib.figure import Figure

  if not isinstance(fig, Figure):
    raise TypeError(f"fig must be a matplotlib Figure, got {type(fig).__name__}")
  if isinstance(formats, str) or not isinstance(formats, Sequence):
    raise ValueError(f"formats must be a sequence of names such as ('png', 'pdf'), got {formats!r}")
  if not formats:
    raise ValueError("formats is empty: nothing would be written")
  dpi = V.check_int_option(dpi, "dpi", minimum=1, maximum=DPI_RANGE[1], hint=_DPI_HINT)
  if dpi < DPI_RANGE[0]:
    raise ValueError(f"dpi must be >= {DPI_RANGE[0]}, got {dpi}: {_DPI_HINT}")
  stem = os.fspath(path) if isinstance(path, str | os.PathLike) else None
  if not isinstance(stem, str):
    raise TypeError(
      f"path must be a str or an os.PathLike (pathlib.Path) of one, got {type(path).__name__}"
    )
  root, ext = os.path.splitext(stem)
  if ext.lower().lstrip(".") in allowed:
    stem = root
  name = os.path.basename(stem)
  if name in ("", ".", "..") or stem.endswith(("/", os.sep)):
    raise ValueError(
      f"path must name a file, got {os.fspath(path)!r}: pass a file name such as "
      "'figures/ecdf' (each format's suffix is added)"
    )
  out = []
  for fmt in formats:
    if fmt not in allowed:
      raise ValueError(f"formats must be among {allowed}, got {fmt!r}")
  from jaxcal._src.paths import atomic_file

  plt = pyplot()
  # byte-identical files from identical figures: no date (SVG "Date", PDF "CreationDate";
  # matplotlib writes the time of the save) and a fixed salt of the SVG ids (a random
  # uuid4 by default)
  with plt.rc_context({**_RC, "svg.hashsalt": "jaxcal"}):
    for fmt in formats:
      p = f"{stem}.{fmt}"
      # whole or not at all: an error mid-write left a truncated file (and, over an
      # existing one, lost it); the temporary file is removed, the old file kept
      with atomic_file(p, "wb") as f:
        fig.savefig(
          f,
          dpi=dpi if fmt == "png" else None,
          bbox_inches="tight",
          format=fmt,
          metadata=_FIXED_METADATA.get(fmt),
        )
      out.append(p)
  return out


#: What :func:`savefig` passes as ``metadata`` per format: the keys matplotlib fills with
#: the time of the save, removed (``None``), so two saves of one figure are the same bytes.
_FIXED_METADATA = {"svg": {"Date": None}, "pdf": {"CreationDate": None}}
