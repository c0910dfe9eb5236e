"""The full calibration report behind ``jaxcal report``.

One function, :func:`calibration_report`, computes every number (a plain
JSON-able dict); :func:`write_report` adds the figures and the JSON file;
:func:`format_summary` renders the short terminal summary. Everything goes
through the public API.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxcal import metrics, scores
from jaxcal._src import validation as V
from jaxcal._src.data import looks_like_probs

__all__ = ["calibration_report", "write_report", "format_summary", "ROBUSTNESS_BINS"]

#: Bin counts of the robustness curve (issue 2: 2..200).
ROBUSTNESS_BINS = np.arange(2, 201)

# (key, label, function, binning) of the binned errors in the report.
_ERRORS = (
  ("conf_ece", "ConfECE", metrics.conf_ece),
  ("conf_ce", "ConfCE", metrics.conf_ce),
  ("conf_ce_corr", "ConfCE_corr", metrics.conf_ce_corr),
  ("classwise_ce", "LinCE_cw", metrics.classwise_ce),
  ("classwise_ece", "CWE_bin", metrics.classwise_ece),
)


def _f(x) -> float:
  return float(np.asarray(x))


def calibration_report(
  scores_in: Any,
  labels: Any,
  *,
  num_bins: int = 15,
  num_utilities: int = 1500,
  seed: int = 0,
  source: str = "",
) -> dict:
  """Computes the report's numbers for one set of predictions.

  Args:
    scores_in: ``(n, C)`` logits or probabilities (rows on the simplex are
      taken as probabilities, anything else as logits).
    labels: ``(n,)`` integer labels.
    num_bins: bin count of the headline errors (15).
    num_utilities: utilities sampled per family for the eCDFs (0 skips).
    seed: PRNG seed of the utility samples.
    source: a description of where the predictions came from.

  Returns:
    A JSON-able dict with sections ``data``, ``scores``, ``errors``,
    ``robustness``, ``utility``, ``decomposition`` and ``timing``.
  """
  t0 = time.perf_counter()
  x = np.asarray(scores_in)
  is_probs = looks_like_probs(x)
  if is_probs:
    probs = V.check_probs(x)
  else:
    probs = jax.nn.softmax(V.check_logits(x), axis=-1)
  y = V.check_labels(labels, probs.shape[0], probs.shape[1])
  n, c = probs.shape
  rep: dict[str, Any] = {
    "data": {
      "source": source,
      "n": int(n),
      "num_classes": int(c),
      "input": "probabilities" if is_probs else "logits",
    },
  }
  rep["scores"] = {
    "accuracy": 1.0 - _f(scores.classification_error(probs, y)),
    "brier": _f(scores.brier(probs, y)),
    "log_loss": _f(scores.log_loss(probs, y)),
    "spherical": _f(scores.spherical(probs, y)),
    "classification_error": _f(scores.classification_error(probs, y)),
    "confidence_loss": _f(scores.confidence_loss(probs, y)),
  }
  errors: dict[str, Any] = {"num_bins": num_bins}
  for key, _, fn in _ERRORS:
    for binning in ("fixed", "quantile"):
      errors[f"{key}_{binning}"] = _f(fn(probs, y, num_bins, binning))
  errors["ecce"] = _f(metrics.ecce(probs, y, num_bins))
  errors["smooth_ece"] = _f(metrics.smooth_ece(probs, y))
  errors["smooth_ece_bandwidth"] = _f(metrics.smooth_ece_bandwidth(probs, y))
  rep["errors"] = errors
  t1 = time.perf_counter()

  # Bin-count robustness: one compiled call per error and binning rule.
  bins = ROBUSTNESS_BINS[ROBUSTNESS_BINS <= n]
  rob: dict[str, Any] = {"num_bins": bins.tolist()}
  for key, _, fn in _ERRORS:
    for binning in ("fixed", "quantile"):
      vals = np.asarray(fn(probs, y, jnp.asarray(bins), binning))
      rob[f"{key}_{binning}"] = vals.tolist()
  rob["spread"] = {
    k: float(np.max(v) / max(np.min(v), 1e-300))
    for k, v in rob.items()
    if k not in ("num_bins", "spread")
  }
  rep["robustness"] = rob
  t2 = time.perf_counter()

  rep["utility"] = _utility_section(probs, y, num_utilities, seed)
  t3 = time.perf_counter()
  rep["decomposition"] = _decomposition_section(probs, y)
  t4 = time.perf_counter()
  rep["timing"] = {
    "errors_s": t1 - t0,
    "robustness_s": t2 - t1,
    "utility_s": t3 - t2,
    "decomposition_s": t4 - t3,
    "total_s": t4 - t0,
    "device": str(jax.devices()[0].device_kind),
  }
  return rep


def _utility_section(probs, y, num_utilities: int, seed: int) -> dict:
  from jaxcal import utility

  out: dict[str, Any] = {}
  for fam in ("tce", "cwe", "topk", "comb"):
    out[f"uc_{fam}"] = _f(utility.uc_class(probs, y, fam))
  if num_utilities > 0:
    key_lin, key_rank = jax.random.split(jax.random.key(seed))
    c = probs.shape[1]
    for name, us in (
      ("linear", utility.sample_linear(key_lin, num_utilities, c)),
      ("rank", utility.sample_rank(key_rank, num_utilities, c)),
    ):
      errs = np.asarray(utility.uc_sweep(probs, y, us))
      out[f"ecdf_{name}"] = {
        "m": int(num_utilities),
        "quantiles": {
          str(q): float(np.quantile(errs, q)) for q in (0.1, 0.25, 0.5, 0.75, 0.9, 1.0)
        },
        "errors": np.sort(errs).tolist(),
      }
  return out


def _decomposition_section(probs, y) -> dict:
  out = {}
  for mode in ("classwise", "normalized"):
    d = scores.decompose(probs, y, score="brier", mode=mode)
    out[mode] = {k: _f(getattr(d, k)) for k in ("score", "mcb", "dsc", "unc")}
  return out


def write_report(rep: dict, probs_or_logits: Any, labels: Any, out_dir: str) -> dict[str, str]:
  """Writes ``report.json`` and the figures to ``out_dir``; returns their paths."""
  from jaxcal import plots

  os.makedirs(out_dir, exist_ok=True)
  x = np.asarray(probs_or_logits)
  from_logits = rep["data"]["input"] == "logits"
  paths = {}
  title = rep["data"].get("source") or None
  fig = plots.reliability_diagram(
    x, labels, rep["errors"]["num_bins"], "fixed", from_logits=from_logits, title=title
  )
  paths["reliability"] = os.path.join(out_dir, "reliability.png")
  fig.savefig(paths["reliability"], dpi=130)
  rob = rep["robustness"]
  curves = {
    f"{label} ({b[:3]})": rob[f"{key}_{b}"]
    for key, label, _ in _ERRORS
    for b in ("fixed", "quantile")
    if (key, b)
    in {
      ("conf_ece", "fixed"),
      ("conf_ce", "quantile"),
      ("conf_ce_corr", "quantile"),
      ("classwise_ce", "quantile"),
      ("classwise_ece", "fixed"),
    }
  }
  fig = plots.bin_robustness_plot(rob["num_bins"], curves, title="bin-count robustness")
  paths["bin_robustness"] = os.path.join(out_dir, "bin_robustness.png")
  fig.savefig(paths["bin_robustness"], dpi=130)
  ecdfs = {
    k[len("ecdf_") :]: v["errors"]
    for k, v in rep.get("utility", {}).items()
    if k.startswith("ecdf_")
  }
  if ecdfs:
    fig = plots.ecdf_plot(ecdfs, log_x=True)
    paths["utility_ecdf"] = os.path.join(out_dir, "utility_ecdf.png")
    fig.savefig(paths["utility_ecdf"], dpi=130)
  try:
    import matplotlib.pyplot as plt

    plt.close("all")
  except Exception:  # pragma: no cover
    pass
  paths["json"] = os.path.join(out_dir, "report.json")
  with open(paths["json"], "w") as f:
    json.dump(rep, f, indent=1)
  return paths


def format_summary(rep: dict) -> str:
  """A short human-readable summary of a report dict."""
  d, s, e = rep["data"], rep["scores"], rep["errors"]
  m = e["num_bins"]
  lines = [
    f"jaxcal report — {d.get('source') or 'predictions'}",
    f"  n = {d['n']:,} samples, C = {d['num_classes']} classes ({d['input']})",
    f"  accuracy {100 * s['accuracy']:.2f}%   Brier {s['brier']:.4f}   "
    f"NLL {s['log_loss']:.4f}   spherical {s['spherical']:.4f}",
    f"  binned errors at {m} bins (×100; truthful ones marked *):",
    f"    ConfECE  fixed {100 * e['conf_ece_fixed']:.3f}   quantile {100 * e['conf_ece_quantile']:.3f}"
    f"   smooth ECE {100 * e['smooth_ece']:.3f} (σ = {e['smooth_ece_bandwidth']:.3f})",
    f"    ConfCE   quantile {100 * e['conf_ce_quantile']:.4f}   "
    f"ConfCE_corr* quantile {100 * e['conf_ce_corr_quantile']:.4f}",
    f"    LinCE_cw* quantile {100 * e['classwise_ce_quantile']:.5f}   "
    f"CWE_bin fixed {100 * e['classwise_ece_fixed']:.3f}   ECCE {100 * e['ecce']:.3f}",
  ]
  rob = rep["robustness"]
  sp = rob["spread"]
  lines.append(
    f"  bin-count robustness over {rob['num_bins'][0]}..{rob['num_bins'][-1]} bins (max/min): "
    f"ConfECE(fix) {sp['conf_ece_fixed']:.1f}x, ConfCE(qua) {sp['conf_ce_quantile']:.1f}x, "
    f"ConfCE_corr(qua) {sp['conf_ce_corr_quantile']:.2f}x, LinCE_cw(qua) {sp['classwise_ce_quantile']:.2f}x"
  )
  u = rep.get("utility") or {}
  if u:
    lines.append(
      f"  utility calibration: U_TCE {u['uc_tce']:.4f}  U_CWE {u['uc_cwe']:.4f}  "
      f"U_topK {u['uc_topk']:.4f}  U_comb {u['uc_comb']:.4f}"
    )
    for fam in ("linear", "rank"):
      if f"ecdf_{fam}" in u:
        q = u[f"ecdf_{fam}"]["quantiles"]
        lines.append(
          f"    {fam:6s} utilities (M={u[f'ecdf_{fam}']['m']}): median UC {q['0.5']:.4f}, "
          f"90% {q['0.9']:.4f}, worst {q['1.0']:.4f}"
        )
  dec = rep.get("decomposition") or {}
  for mode, v in dec.items():
    lines.append(
      f"  Brier/C decomposition ({mode}, ×100): score {100 * v['score']:.3f} = "
      f"MCB {100 * v['mcb']:.3f} − DSC {100 * v['dsc']:.3f} + UNC {100 * v['unc']:.3f}"
    )
  t = rep.get("timing", {})
  if t:
    lines.append(f"  computed in {t['total_s']:.1f} s on {t['device']}")
  return "\n".join(lines)
