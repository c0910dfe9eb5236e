"""The calibration report: every number, figure and table of ``jaxcal report``, as functions.

:func:`calibration_report` (one model) and :func:`compare_report` (several
models, with the rank correlation of their ordering between bin counts)
return plain JSON-able dicts; :func:`write_report` writes ``report.json``
and the figures (PNG and PDF); :func:`format_summary`,
:func:`format_markdown` and :func:`format_comparison` render them.

One vocabulary. The terminal, ``report.json``, the markdown tables, the
figures and these docs name each metric the same way, qualified by binning
and bin count as in the truthful-calibration paper's Table 1
(``ConfECE(fix;15)``, ``LinCE_cw(qua;2000)``; :func:`label`,
:func:`parse_label`). The names (:data:`METRICS`):

===========  ===============================  ==========  ========  ========
name         function                         kind        truthful  binning
===========  ===============================  ==========  ========  ========
accuracy     1 - scores.classification_error  accuracy    no        -
error_rate   scores.classification_error      score       no        -
NLL          scores.log_loss                  score       no        -
Brier        scores.brier                     score       no        -
spherical    scores.spherical                 score       no        -
conf_loss    scores.confidence_loss           score       no        -
ConfECE      metrics.conf_ece                 l1          no        fixed
smECE        metrics.smooth_ece               l1          no        -
CWE_bin      metrics.classwise_ece            l1          no        fixed
ConfCE       metrics.conf_ce                  squared     no        quantile
ConfCE_corr  metrics.conf_ce_corr             squared     yes       quantile
LinCE_cw     metrics.classwise_ce             squared     yes       quantile
ECCE         metrics.ecce                     cumulative  no        fixed
UC_TCE       utility.uc_class(..., "tce")     utility     no        -
UC_CWE       utility.uc_class(..., "cwe")     utility     no        -
UC_topK      utility.uc_class(..., "topk")    utility     no        -
UC_comb      utility.uc_class(..., "comb")    utility     no        -
===========  ===============================  ==========  ========  ========

Numbers are written with three significant digits, in scientific notation
below 1e-3 and from 1e3 (what three digits cannot write; integers in full,
:func:`format_number`); ``report.json`` keeps six
significant digits, which drops float32 round-off noise (not all of it in
the utility errors, whose near ties move with the device count: see
:func:`jaxcal.utility.uc_sweep`).
"""

from jaxcal._src.names import (
  METRICS,
  Metric,
  format_interval,
  format_number,
  label,
  parse_label,
)
from jaxcal._src.report import (
  HEADLINE,
  RANK_BINS,
  ROBUSTNESS_CURVES,
  calibration_report,
  compare_report,
  find_models,
  format_comparison,
  format_markdown,
  format_summary,
  rank_stability,
  robustness_bins,
  write_report,
)

__all__ = [
  "HEADLINE",
  "METRICS",
  "RANK_BINS",
  "ROBUSTNESS_CURVES",
  "Metric",
  "calibration_report",
  "compare_report",
  "find_models",
  "format_comparison",
  "format_interval",
  "format_markdown",
  "format_number",
  "format_summary",
  "label",
  "parse_label",
  "rank_stability",
  "robustness_bins",
  "write_report",
]
