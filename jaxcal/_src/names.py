"""One vocabulary: the display name of every metric, and how numbers are written.

The terminal summary, ``report.json``, the markdown tables, the figures and
the API docs all name a metric by the ``name`` below (the papers' notation),
qualified by its binning and bin count as in the truthful-calibration paper's
Table 1: ``ConfECE(fix;15)``, ``LinCE_cw(qua;2000)``. Numbers are written
with three significant digits, in scientific notation below ``1e-3`` and from
``1e3`` (:func:`format_number`); ``report.json`` keeps six significant digits
(:func:`round_floats`), which removes float32 round-off noise such as
``0.9451999999582767`` without losing anything a float32 computation knows.
(The utility errors can still differ in those digits between machines with
another device count: see :func:`~jaxcal.utility.uc_sweep`.)
"""

from __future__ import annotations

import math
import numbers
import re
from typing import Any, NamedTuple

import numpy as np

from jaxcal._src import validation as V

__all__ = [
  "Metric",
  "METRICS",
  "BINNING_ABBREV",
  "metric",
  "label",
  "parse_label",
  "format_number",
  "format_interval",
  "round_floats",
  "KIND_AXIS_LABEL",
]


class Metric(NamedTuple):
  """A metric as the report, the figures and the docs name it.

  Attributes:
    name: display name (the papers' notation), also the key in ``report.json``.
    function: the public function that computes it.
    kind: ``"l1"`` (ℓ1 error, binned or kernel-smoothed), ``"squared"`` (binned squared error),
      ``"cumulative"``, ``"utility"``, ``"score"`` (a proper score or a
      classification loss, lower is better) or ``"accuracy"`` (higher is better).
    truthful: whether the papers prove it a truthful calibration error
      (reporting the true probabilities minimises its expectation). The
      proper scores (NLL, Brier, spherical) are minimised by the true
      probabilities too, but they are scores, not calibration errors: the
      flag is ``False`` for them, as for every error the truthful paper
      does not prove truthful.
    binning: the binning rule it uses by default (``None`` when not binned).
    description: one line for tables.
  """

  name: str
  function: str
  kind: str
  truthful: bool
  binning: str | None
  description: str


#: Every metric the report, the CLI and the figures show, in display order.
METRICS: tuple[Metric, ...] = (
  Metric("accuracy", "1 - scores.classification_error", "accuracy", False, None, "top-1 accuracy"),
  Metric("error_rate", "scores.classification_error", "score", False, None, "top-1 error rate"),
  Metric("NLL", "scores.log_loss", "score", False, None, "negative log-likelihood (log score)"),
  Metric(
    "Brier", "scores.brier", "score", False, None, "multiclass Brier score (sum over classes)"
  ),
  Metric("spherical", "scores.spherical", "score", False, None, "spherical score loss"),
  Metric(
    "conf_loss",
    "scores.confidence_loss",
    "score",
    False,
    None,
    "confidence loss 1 - z + (c - z)^2 (top label)",
  ),
  Metric("ConfECE", "metrics.conf_ece", "l1", False, "fixed", "top-label ℓ1 binned ECE"),
  Metric("CWE_bin", "metrics.classwise_ece", "l1", False, "fixed", "class-wise ℓ1 binned ECE"),
  Metric(
    "smECE",
    "metrics.smooth_ece",
    "l1",
    False,
    None,
    "top-label smooth ECE (kernel-smoothed, automatic bandwidth)",
  ),
  Metric(
    "ConfCE", "metrics.conf_ce", "squared", False, "quantile", "top-label squared binned error"
  ),
  Metric(
    "ConfCE_corr",
    "metrics.conf_ce_corr",
    "squared",
    True,
    "quantile",
    "top-label squared error with the truthful correction",
  ),
  Metric(
    "LinCE_cw",
    "metrics.classwise_ce",
    "squared",
    True,
    "quantile",
    "class-wise squared binned error (truthful)",
  ),
  Metric("ECCE", "metrics.ecce", "cumulative", False, "fixed", "class-wise cumulative error"),
  Metric("UC_TCE", 'utility.uc_class(..., "tce")', "utility", False, None, "UC over U_TCE"),
  Metric("UC_CWE", 'utility.uc_class(..., "cwe")', "utility", False, None, "UC over U_CWE"),
  Metric("UC_topK", 'utility.uc_class(..., "topk")', "utility", False, None, "UC over U_topK"),
  Metric("UC_comb", 'utility.uc_class(..., "comb")', "utility", False, None, "UC over U_comb"),
)

_BY_NAME = {m.name: m for m in METRICS}

#: Binning rule -> the abbreviation of the papers' tables.
BINNING_ABBREV = {"fixed": "fix", "quantile": "qua"}
_ABBREV_BINNING = {v: k for k, v in BINNING_ABBREV.items()}

#: Axis label of a figure panel holding metrics of one ``kind``.
KIND_AXIS_LABEL = {
  "l1": "ℓ1 calibration error",
  "squared": "squared calibration error",
  "cumulative": "cumulative calibration error",
  "utility": "utility calibration error",
  "score": "loss",
  "accuracy": "accuracy",
}


def metric(name: str) -> Metric:
  """The :class:`Metric` of a display name (``"ConfECE"``) or label (``"ConfECE(fix;15)"``).

  Raises ``ValueError`` for a name that is not a ``str`` or names no metric.
  """
  if not isinstance(name, str):  # None raised a raw AttributeError from .split
    raise ValueError(
      f"name must be a metric name (a str) such as 'ConfECE', got {name!r} ({type(name).__name__})"
    )
  stem = name.split("(", 1)[0]
  if stem not in _BY_NAME:
    raise ValueError(f"unknown metric name {name!r}; known names: {', '.join(_BY_NAME)}")
  return _BY_NAME[stem]


def label(name: str, binning: str | None = None, num_bins: int | None = None) -> str:
  """The display label of a metric: ``ConfECE(fix;15)``, ``LinCE_cw(qua)``, ``Brier``.

  Args:
    name: a name of :data:`METRICS`.
    binning: ``"fixed"`` / ``"quantile"`` (binned metrics; default: the
      metric's own rule).
    num_bins: bin count (omitted from the label when ``None``).

  Returns:
    The label, as the truthful-calibration paper's Table 1 writes it.

  Raises:
    ValueError: ``name`` not a ``str`` or an unknown name, an unknown
      binning (not ``"fixed"``, ``"quantile"`` or ``None``), a bin count not
      an int ``>= 1``, or quantile bins for ECCE (a label :func:`parse_label`
      refuses). A metric without bins ignores ``binning`` and ``num_bins``.

  Example:
    >>> label("ConfECE", num_bins=15), label("LinCE_cw"), label("Brier")
    ('ConfECE(fix;15)', 'LinCE_cw(qua)', 'Brier')

  Reference: Lu, Wu, Hartline & Hu (2025), "Truthful Calibration Errors for
  Multi-Class Prediction", arXiv:2510.06388, §5.1 and Table 1 (the notation
  ``Cal(qua;m)`` / ``Cal(fix;m)``).
  """
  m = metric(name)
  if num_bins is not None and (
    isinstance(num_bins, bool) or not isinstance(num_bins, numbers.Integral) or num_bins < 1
  ):
    raise ValueError(f"num_bins must be an int >= 1 or None, got {num_bins!r}")
  if m.binning is None:
    return m.name
  rule = m.binning if binning is None else binning
  if not isinstance(rule, str) or rule not in BINNING_ABBREV:  # (a list raised a TypeError)
    raise ValueError(f"binning must be 'fixed' or 'quantile', got {rule!r}")
  if m.name == "ECCE" and rule == "quantile":
    raise ValueError("ECCE always uses equal-width bins; pass binning='fixed' or None")
  if m.name == "ECCE":  # always equal-width bins: the count is the only qualifier
    return m.name if num_bins is None else f"ECCE({num_bins})"
  inner = BINNING_ABBREV[rule] if num_bins is None else f"{BINNING_ABBREV[rule]};{num_bins}"
  return f"{m.name}({inner})"


#: A whole label (matched with ``fullmatch``: ``$`` also matched before a final
#: newline, so ``"ConfECE(fix;15)\n"`` parsed).
_LABEL = re.compile(r"(?P<name>[A-Za-z_]+)(?:\((?P<inner>[^()]*)\))?")
#: What a label's parentheses hold: a rule, a rule and a bin count, or a count alone.
#: ASCII digits only: ``\d`` also matched other scripts' digits (``"١٥"`` read as 15).
_BINS = re.compile(r"(?:(?P<rule>fix|qua)(?:;(?P<m>[0-9]+))?|(?P<count>[0-9]+))")


def parse_label(text: str) -> tuple[Metric, str | None, int | None]:
  """``(metric, binning, num_bins)`` of a label written by :func:`label`.

  Args:
    text: a label such as ``"ConfECE(fix;15)"``, ``"LinCE_cw(qua)"`` or
      ``"Brier"``.

  Returns:
    ``(metric, binning, num_bins)``: the :class:`Metric`, its binning rule
    (``"fixed"`` / ``"quantile"``; the metric's own rule when the label
    names none, ``None`` for a metric without bins) and the bin count
    (``None`` when the label gives none).

  Raises:
    ValueError: ``text`` is not a label of that form (parentheses holding
      neither a rule nor a bin count, such as ``"ConfECE()"``,
      ``"ConfECE(;15)"`` or ``"ConfECE(fix;)"``; anything after the label,
      even a newline; a bin count in other than the ASCII digits 0-9),
      names no metric, gives bins to a metric without them, quantile bins
      to ECCE, or a bin count outside ``[1, 2**24]``.

  Example:
    >>> m, rule, bins = parse_label("ConfCE_corr(qua;2000)")
    >>> m.name, rule, bins
    ('ConfCE_corr', 'quantile', 2000)

  Reference: Lu, Wu, Hartline & Hu (2025), "Truthful Calibration Errors for
  Multi-Class Prediction", arXiv:2510.06388, §5.1 (the notation
  ``Cal(qua;m)`` / ``Cal(fix;m)`` for ``m`` quantile or fixed bins).
  """
  match = _LABEL.fullmatch(text) if isinstance(text, str) else None
  if not match:
    raise ValueError(f"{text!r} is not a metric label such as 'ConfECE(fix;15)'")
  m = metric(match["name"])
  bins = _BINS.fullmatch(match["inner"]) if match["inner"] is not None else None
  if match["inner"] is not None and not bins:
    raise ValueError(
      f"{text!r} is not a metric label: the parentheses must hold 'fix' or 'qua', "
      f"optionally followed by ';' and a bin count (digits 0-9), e.g. 'ConfECE(fix;15)'"
    )
  rule_abbrev = bins["rule"] if bins else None
  count = (bins["m"] or bins["count"]) if bins else None
  if m.binning is None and bins:
    raise ValueError(f"{text!r}: {m.name} has no bins; its label is {m.name!r}")
  if m.name == "ECCE" and rule_abbrev == "qua":
    raise ValueError(f"{text!r}: ECCE always uses equal-width bins; write e.g. 'ECCE(15)'")
  # (a count of 5,000 digits raised Python's bare int-conversion limit)
  if count is not None and (len(count) > 9 or not 1 <= int(count) <= V.MAX_NUM_BINS):
    shown = count if len(count) <= 12 else f"{count[:6]}... ({len(count)} digits)"
    raise ValueError(f"{text[:40]!r}: the bin count must be an int in [1, 2**24], got {shown}")
  rule = _ABBREV_BINNING.get(rule_abbrev or "", m.binning if m.binning else None)
  return m, rule, int(count) if count is not None else None


#: Most significant digits :func:`format_number` writes: 17 write any float64 exactly
#: (``repr`` needs at most 17); float32 needs 9.
MAX_DIGITS = 17


def format_number(x: Any, digits: int = 3) -> str:
  """A number with ``digits`` significant digits; scientific below 1e-3 and from ``10^digits``.

  Positional from ``1e-3`` up to what ``digits`` digits can write (below
  ``1e3`` for three digits, after rounding), and below ``1e4`` at most.
  Integers (Python or numpy) are written in full with thousands separators.

  Args:
    x: a real number (Python or numpy scalar, or a 0-d array); a bool is
      written as ``True`` / ``False``.
    digits: significant digits, an int from 1 to 17 (default 3): 17
      write any float64 exactly, more would only write the noise of its
      binary expansion.

  Returns:
    The formatted number: an integer in full, anything else with ``digits``
    significant digits; ``"nan"``, ``"inf"``, ``"-inf"`` and ``"0"`` for
    those values.

  Raises:
    ValueError: ``digits`` not an int from 1 to 17, or ``x`` not a
      real number (``None``, a string, bytes, a complex number, a list, an
      array that is not 0-d).

  Example:
    >>> [format_number(v) for v in (0.945199, 0.02564, 8.312e-05, 0.5, 12.0, 123456.0, 10000)]
    ['0.945', '0.0256', '8.31e-5', '0.500', '12.0', '1.23e5', '10,000']
  """
  # digits=10**9 built a 1 GB string of float64 noise
  digits = V.check_int_option(
    digits,
    "digits",
    minimum=1,
    maximum=MAX_DIGITS,
    hint="17 significant digits write any float64 exactly",
  )
  kind = getattr(getattr(x, "dtype", None), "kind", "")
  if isinstance(x, (str, bytes, complex)) or (kind and kind in "USc"):  # text or complex
    raise ValueError(
      f"x must be a real number, got {x!r} ({type(x).__name__}); pass a float (for text, float(x))"
    )
  try:
    ndim = np.ndim(x)
  except ValueError:  # a ragged nested list
    ndim = None
  if ndim != 0:  # [1.0] and np.array([1.0]) raised float()'s TypeError
    what = (
      f"ragged {type(x).__name__}" if ndim is None else f"{type(x).__name__} of shape {np.shape(x)}"
    )
    raise ValueError(f"x must be a real number, got {what}; format each entry on its own")
  if isinstance(x, bool) or kind == "b":
    return str(bool(x))  # numpy bools too (not "1.00")
  if isinstance(x, int) or (kind and kind in "iu"):
    try:
      return f"{int(x):,}"
    except ValueError:  # 10**5000: Python's bare "Exceeds the limit ... for integer string"
      digits_of_x = int(int(x).bit_length() * math.log10(2)) + 1
      raise ValueError(
        f"x must be a real number Python can write: an int of about {digits_of_x:,} digits "
        "is beyond its limit for writing integers (sys.set_int_max_str_digits)"
      ) from None
  try:
    v = float(x)
  except (TypeError, ValueError, OverflowError):
    raise ValueError(f"x must be a real number, got {x!r} ({type(x).__name__})") from None
  if math.isnan(v):
    return "nan"
  if math.isinf(v):
    return "inf" if v > 0 else "-inf"
  if v == 0.0:
    return "0"
  a = abs(v)
  if 1e-3 <= a < 1e4:
    text = f"{v:#.{digits}g}"
    if "e" not in text:
      return text.rstrip(".")
  mant, exp = f"{v:.{digits - 1}e}".split("e")
  return f"{mant}e{int(exp)}"


def format_interval(estimate: Any, lo: Any = None, hi: Any = None, digits: int = 3) -> str:
  """``estimate [lo, hi]`` with :func:`format_number` (just the estimate without bounds).

  Args:
    estimate: the point estimate, a real number.
    lo: the interval's lower end, or ``None``.
    hi: the interval's upper end, or ``None``.
    digits: significant digits of each number (default 3).

  Returns:
    ``"estimate [lo, hi]"``, or the estimate alone when either end is ``None``.

  Example:
    >>> format_interval(0.02564, 0.02304, 0.02986)
    '0.0256 [0.0230, 0.0299]'
  """
  text = format_number(estimate, digits)
  if lo is None or hi is None:
    return text
  return f"{text} [{format_number(lo, digits)}, {format_number(hi, digits)}]"


def round_floats(obj: Any, digits: int = 6) -> Any:
  """Rounds every float in a nested dict/list to ``digits`` significant digits.

  Numpy scalars and arrays become Python numbers and lists; NaN and inf
  become ``None`` (JSON has neither).

  Example:
    >>> round_floats({"acc": 0.9451999999582767, "bins": [2, 3], "x": float("nan")})
    {'acc': 0.9452, 'bins': [2, 3], 'x': None}
  """
  if isinstance(obj, dict):
    return {k: round_floats(v, digits) for k, v in obj.items()}
  if isinstance(obj, list | tuple):
    return [round_floats(v, digits) for v in obj]
  if hasattr(obj, "tolist") and not isinstance(obj, str):
    return round_floats(obj.tolist(), digits)
  if isinstance(obj, bool) or obj is None or isinstance(obj, int | str):
    return obj
  if isinstance(obj, float):
    if not math.isfinite(obj):
      return None
    if obj == 0.0:
      return 0.0
    return float(f"{obj:.{digits - 1}e}")
  return obj
