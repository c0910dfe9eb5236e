"""Are the recalibrators' defaults safe? Every method, default options, every CIFAR model.

For each of the 12 CIFAR settings in ../shared/data/cifar_logits (CIFAR-10
and CIFAR-100 DenseNet-121, ResNet-110, ResNet-50, Wide-ResNet, and the
focal-loss CIFAR-10 models), every recalibrator of ``jaxcal.recalibrate``
except patching and LoCal Nets is fitted with its default options on the
``val`` split (5,000 samples) and evaluated on ``test`` (10,000): accuracy,
log loss (NLL), Brier score, the fit's wall time, and for matrix/Dirichlet the
ODIR strength chosen by cross-validation.

The check (issue 13): a default fit of the methods whose regularisation the
library chooses by cross-validation (vector, matrix, Dirichlet) must not raise
the test NLL above the uncalibrated model's nor lose more than one accuracy
point. Temperature scaling (nothing to choose), Platt scaling (one-vs-rest,
then normalised: not an NLL fit of the multiclass map) and the class-wise maps
(histogram, isotonic, smoothed isotonic) and the cited baselines (beta
calibration, BBQ, ensemble temperature scaling) are reported beside them with
the same flags; the step functions can put probability 0 on the true class
(infinite NLL), and histogram binning is known to cost accuracy (the
score-decomposition case study).

Only public API, except the list of methods: the scaling and class-wise rows of
the library's method table (``jaxcal._src.recal.base.METHODS``), in its order.
Writes experiments/results/recalibrator_defaults/
(``--quick``: recalibrator_defaults_quick/): results.json (every number,
machine load, versions, dates) and table.md.

  python experiments/recalibrator_defaults.py          # 12 models x 11 methods
  python experiments/recalibrator_defaults.py --quick  # 1 model, 3 methods, 1,500 samples
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import time

import jax
import numpy as np

from jaxcal import recalibrate, scores
from jaxcal._src.recal.base import METHODS as TABLE
from jaxcal.data import dataset_dir

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments" / "bench"))
from _common import device_info  # versions, device, load, date

SETTINGS = [
  f"{prefix}{arch}"
  for prefix in ("cifar10_", "focal_cifar10_", "cifar100_")
  for arch in ("densenet121", "resnet110", "resnet50", "wide_resnet")
]
#: The scaling and class-wise methods and the cited baselines (beta, BBQ,
#: ensemble temperature scaling), in the order of the library's method table.
METHODS = tuple(
  m
  for m, row in TABLE.items()
  if row.module in ("scaling", "binning_methods", "beta", "bbq", "ensemble_temperature")
)
#: The methods the check applies to: those whose default regularisation is
#: chosen by the library (cross-validation). Temperature scaling has nothing
#: to choose (one parameter); Platt scaling fits each class one-vs-rest and then
#: normalises the rows, which is not an NLL fit of the multiclass map. Both
#: are reported with the same flags, not checked; so are beta calibration and
#: BBQ (one-vs-rest maps of the probabilities, normalised, like Platt) and
#: ensemble temperature scaling (a temperature and three mixture weights
#: fitted by the authors' mean squared error, nothing chosen by
#: cross-validation).
CHECKED = ("vector", "matrix", "dirichlet")


def load(setting: str, split: str, limit: int | None):
  d = dataset_dir("cifar_logits") / setting
  z = np.load(d / f"{split}_logits.npy").astype(np.float32)
  y = np.load(d / f"{split}_labels.npy").astype(np.int32)
  return (z[:limit], y[:limit]) if limit else (z, y)


def evaluate(p, y) -> dict[str, float]:
  return {
    "accuracy": 1.0 - float(scores.classification_error(p, y)),
    "nll": float(scores.log_loss(p, y)),
    "brier": float(scores.brier(p, y)),
  }


def run(settings, methods, limit, out_dir: pathlib.Path) -> dict:
  out_dir.mkdir(parents=True, exist_ok=True)
  t_start = time.perf_counter()
  rows = {}
  for setting in settings:
    zv, yv = load(setting, "val", limit)
    zt, yt = load(setting, "test", limit)
    base = evaluate(jax.nn.softmax(zt), yt)
    row = {"C": int(zv.shape[1]), "uncalibrated": base, "methods": {}}
    for m in methods:
      t0 = time.perf_counter()
      rc = recalibrate.fit(m, zv, yv)
      q = jax.block_until_ready(rc(zt))
      r = evaluate(q, yt)
      r["fit_and_apply_s"] = time.perf_counter() - t0
      r["load_avg"] = list(os.getloadavg())
      if hasattr(rc, "reg_lambda"):
        r["reg_lambda"] = float(rc.reg_lambda)
        r["cv_nll"] = [float(v) for v in np.asarray(rc.cv_nll)]
      if hasattr(rc, "converged"):
        r["converged"] = bool(rc.converged)
        r["num_iter"] = int(rc.num_iter)
      r["nll_not_above_uncalibrated"] = r["nll"] <= base["nll"]
      r["accuracy_drop_at_most_1pt"] = r["accuracy"] >= base["accuracy"] - 0.01
      r["safe"] = bool(r["nll_not_above_uncalibrated"] and r["accuracy_drop_at_most_1pt"])
      row["methods"][m] = r
      print(
        f"{setting:26s} {m:16s} acc {100 * r['accuracy']:6.2f} ({100 * base['accuracy']:.2f})  "
        f"NLL {r['nll']:.4f} ({base['nll']:.4f})  {r['fit_and_apply_s']:6.1f}s"
        + (f"  lambda {r['reg_lambda']:g}" if "reg_lambda" in r else ""),
        flush=True,
      )
    rows[setting] = row
  result = {
    "meta": {
      **device_info(),
      "load_avg_at_end": list(os.getloadavg()),
      "runtime_s": time.perf_counter() - t_start,
      "samples_per_split": limit,
    },
    "results": rows,
  }
  return finish(result, out_dir)


def update(settings, methods, limit, out_dir: pathlib.Path) -> dict:
  """Re-runs ``settings`` x ``methods`` and merges them into ``out_dir/results.json``.

  The merged file keeps the original run's metadata and lists every partial
  re-run (models, methods, runtime, load, date) under ``meta["updates"]``.
  """
  old = json.loads((out_dir / "results.json").read_text())
  if old["meta"]["samples_per_split"] != limit:
    raise ValueError(
      f"--update: results.json was made with samples_per_split="
      f"{old['meta']['samples_per_split']}, this run uses {limit}; re-run without --update."
    )
  with_new = run(settings, methods, limit, out_dir / "_update")
  for s, row in with_new["results"].items():
    old["results"][s]["methods"].update(row["methods"])
  meta = with_new["meta"]
  old["meta"].setdefault("updates", []).append(
    {
      "models": list(settings),
      "methods": list(methods),
      "date": meta["date"],
      "runtime_s": meta["runtime_s"],
      "load_avg_at_end": meta["load_avg_at_end"],
    }
  )
  for f in ("results.json", "table.md"):
    (out_dir / "_update" / f).unlink()
  (out_dir / "_update").rmdir()
  return finish(old, out_dir)


def finish(result: dict, out_dir: pathlib.Path) -> dict:
  """Adds the check's summary to ``result``; writes results.json and table.md."""
  rows = result["results"]
  for stale in ("scaling_fits_checked", "scaling_fits_unsafe"):  # an earlier summary's keys
    result.pop(stale, None)
  checked = [(s, m) for s in rows for m in rows[s]["methods"] if m in CHECKED]
  result["criterion"] = (
    f"{', '.join(CHECKED)}: test NLL <= uncalibrated and accuracy >= uncalibrated - 1 pt"
  )
  result["fits_checked"] = len(checked)
  result["fits_unsafe"] = [f"{s}/{m}" for s, m in checked if not rows[s]["methods"][m]["safe"]]
  result["other_fits_raising_nll_or_losing_accuracy"] = [
    f"{s}/{m}"
    for s in rows
    for m, r in rows[s]["methods"].items()
    if m not in CHECKED and not r["safe"]
  ]
  (out_dir / "results.json").write_text(json.dumps(result, indent=1) + "\n")
  write_table(result, out_dir)
  return result


def write_table(result: dict, out_dir: pathlib.Path) -> None:
  rows = result["results"]
  methods = list(next(iter(rows.values()))["methods"])
  meta = result["meta"]
  lines = [
    "# Default recalibrators on every CIFAR model: test NLL / accuracy (%)",
    "",
    "Each cell: test NLL / accuracy after a default `jaxcal.recalibrate.fit(method, val)`; "
    f"**bold** where a checked method ({', '.join(CHECKED)}) raises the NLL or loses more than "
    "1 accuracy point; *italic* where another method does. "
    "Class-wise maps can put probability 0 on the true class (NLL = inf). "
    "Generated by `experiments/recalibrator_defaults.py`.",
    f"Fits checked: {result['fits_checked']}, unsafe: {len(result['fits_unsafe'])}"
    + (f" {result['fits_unsafe']}" if result["fits_unsafe"] else "")
    + ". "
    f"Total runtime {meta['runtime_s'] / 60:.1f} min on {meta['processor']} "
    f"({meta['backend']}, {meta['cpu_count']} cores shared with other jobs, 1-minute load at the "
    f"end {meta['load_avg_at_end'][0]:.1f}), jax {meta['jax']}, {meta['date'][:10]}.",
    *(
      f"Re-run and merged: {', '.join(u['methods'])} on {len(u['models'])} models, "
      f"{u['runtime_s'] / 60:.1f} min, 1-minute load at the end {u['load_avg_at_end'][0]:.1f}, "
      f"{u['date'][:16]}."
      for u in meta.get("updates", [])
    ),
    "",
    "| model | C | uncalibrated | " + " | ".join(methods) + " |",
    "|---|---|---" + "|---" * len(methods) + "|",
  ]
  for s, row in rows.items():
    b = row["uncalibrated"]
    cells = []
    for m in methods:
      r = row["methods"][m]
      cell = f"{r['nll']:.3f} / {100 * r['accuracy']:.2f}"
      if not r["safe"]:
        cell = f"**{cell}**" if m in CHECKED else f"*{cell}*"
      cells.append(cell)
    lines.append(
      f"| {s} | {row['C']} | {b['nll']:.3f} / {100 * b['accuracy']:.2f} | "
      + " | ".join(cells)
      + " |"
    )
  lines += [
    "",
    "Cross-validated ODIR strength (lambda = mu) and fit time (s):",
    "",
    "| model | " + " | ".join(methods) + " |",
    "|---" + "|---" * len(methods) + "|",
  ]
  for s, row in rows.items():
    cells = []
    for m in methods:
      r = row["methods"][m]
      lam = f"λ={r['reg_lambda']:g}, " if "reg_lambda" in r and m in ("matrix", "dirichlet") else ""
      cells.append(f"{lam}{r['fit_and_apply_s']:.1f}")
    lines.append(f"| {s} | " + " | ".join(cells) + " |")
  (out_dir / "table.md").write_text("\n".join(lines) + "\n")


def main(argv=None) -> dict:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--quick", action="store_true", help="1 model, 3 methods, 1,500 samples")
  ap.add_argument("--models", nargs="*", default=None, choices=SETTINGS)
  ap.add_argument("--methods", nargs="*", default=None, choices=METHODS)
  ap.add_argument("--out", default=None)
  ap.add_argument(
    "--table-only", action="store_true", help="rebuild the summary and table.md from results.json"
  )
  ap.add_argument(
    "--update",
    action="store_true",
    help="re-run only --models x --methods and merge them into the existing results.json",
  )
  args = ap.parse_args(argv)
  settings = args.models or (["cifar10_resnet110"] if args.quick else SETTINGS)
  methods = args.methods or (("temperature", "dirichlet", "isotonic") if args.quick else METHODS)
  name = "recalibrator_defaults_quick" if args.quick else "recalibrator_defaults"
  out = pathlib.Path(args.out) if args.out else ROOT / "experiments" / "results" / name
  if args.table_only:
    return finish(json.loads((out / "results.json").read_text()), out)
  if args.update:
    return update(settings, methods, 1500 if args.quick else None, out)
  return run(settings, methods, 1500 if args.quick else None, out)


if __name__ == "__main__":
  main()
