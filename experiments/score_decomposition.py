"""Table 1 (class-wise) and Table 2 (normalised) of the score decomposition case study.

Resin, "Calibration in Context: A Case Study with Score Decompositions"
(../shared/papers/score_decompositions_case_study.txt): Brier score
decompositions (x100) and accuracy of seven CIFAR models per data set, for
the base predictions and six class-wise recalibrators (CW-/N- histogram
binning, isotonic regression, smoothed isotonic regression), fitted on the
``val`` split and evaluated on ``test``.

Protocol (as the paper's R code, github.com/resinj/calibration_AISTATS26):
probabilities ``exp(z) / sum exp(z)`` in float64, HB with 15 equal-mass bins
by average rank, IR/SIR as in jaxcal.recalibrate, the decomposition's isotonic
fit in-sample on ``test``; the whole run in float64 (``jax.enable_x64``).

The paper's seven models per data set are ResNet-50, ResNet-110 and
WideResNet trained with the Brier score (``cifar10_*``) and the same three
plus DenseNet-121 trained with focal loss (``focal_cifar10_*``). The shared
data has all seven for CIFAR-10 but only ``cifar100_{resnet50,resnet110,
wide_resnet,densenet121}`` for CIFAR-100 (no focal-loss CIFAR-100 models), so
only the CIFAR-10 averages are comparable with the paper; the script reports
per-model rows for all 12 settings and averages over (a) the paper's model
set where available and (b) all available settings.

Usage::

  python experiments/score_decomposition.py [--data DIR/cifar_logits]
      [--out experiments/results/score_decomposition]

Writes ``table.md``, ``results.json``, ``mcb_dsc_classwise.png`` and
``mcb_dsc_normalized.png``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import pathlib
import platform
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import jax

from jaxcal.data import dataset_dir

METHODS = ["base", "CW-HB", "N-HB", "CW-IR", "N-IR", "CW-SIR", "N-SIR"]
FITS = {"HB": "histogram", "IR": "isotonic", "SIR": "smooth_isotonic"}
PAPER_MODELS = {
  "CIFAR-10": [
    "cifar10_resnet50",
    "cifar10_resnet110",
    "cifar10_wide_resnet",
    "focal_cifar10_resnet50",
    "focal_cifar10_resnet110",
    "focal_cifar10_wide_resnet",
    "focal_cifar10_densenet121",
  ],
  "CIFAR-100": [
    "cifar100_resnet50",
    "cifar100_resnet110",
    "cifar100_wide_resnet",
    "focal_cifar100_resnet50",
    "focal_cifar100_resnet110",
    "focal_cifar100_wide_resnet",
    "focal_cifar100_densenet121",
  ],
}
ALL_SETTINGS = {
  "CIFAR-10": [
    "cifar10_resnet50",
    "cifar10_resnet110",
    "cifar10_wide_resnet",
    "cifar10_densenet121",
    "focal_cifar10_resnet50",
    "focal_cifar10_resnet110",
    "focal_cifar10_wide_resnet",
    "focal_cifar10_densenet121",
  ],
  "CIFAR-100": [
    "cifar100_resnet50",
    "cifar100_resnet110",
    "cifar100_wide_resnet",
    "cifar100_densenet121",
  ],
}
# Printed in the paper (Table 1 = classwise, Table 2 = normalized): BS, MCB, DSC, UNC (x100), Acc.
PAPER = {
  "classwise": {
    "CIFAR-10": {
      "base": (0.781, 0.063, 8.282, 9, 0.951),
      "CW-HB": (1.832, 0.009, 7.177, 9, 0.890),
      "N-HB": (1.237, 0.070, 7.833, 9, 0.890),
      "CW-IR": (0.779, 0.027, 8.248, 9, 0.950),
      "N-IR": (0.770, 0.047, 8.277, 9, 0.950),
      "CW-SIR": (0.769, 0.051, 8.282, 9, 0.950),
      "N-SIR": (0.764, 0.047, 8.283, 9, 0.950),
    },
    "CIFAR-100": {
      "base": (0.327, 0.039, 0.702, 0.99, 0.775),
      "CW-HB": (0.865, 0.003, 0.128, 0.99, 0.483),
      "N-HB": (0.532, 0.036, 0.494, 0.99, 0.483),
      "CW-IR": (0.333, 0.021, 0.677, 0.99, 0.770),
      "N-IR": (0.324, 0.034, 0.699, 0.99, 0.770),
      "CW-SIR": (0.323, 0.035, 0.702, 0.99, 0.773),
      "N-SIR": (0.320, 0.033, 0.703, 0.99, 0.773),
    },
  },
  "normalized": {
    "CIFAR-10": {
      "base": (0.781, 0.059, 8.279, 9, 0.951),
      "CW-HB": (1.832, 0.604, 7.772, 9, 0.890),
      "N-HB": (1.237, 0.080, 7.842, 9, 0.890),
      "CW-IR": (0.779, 0.030, 8.251, 9, 0.950),
      "N-IR": (0.770, 0.045, 8.275, 9, 0.950),
      "CW-SIR": (0.769, 0.048, 8.279, 9, 0.950),
      "N-SIR": (0.764, 0.044, 8.280, 9, 0.950),
    },
    "CIFAR-100": {
      "base": (0.327, 0.032, 0.696, 0.99, 0.775),
      "CW-HB": (0.865, 0.331, 0.457, 0.99, 0.483),
      "N-HB": (0.532, 0.038, 0.497, 0.99, 0.483),
      "CW-IR": (0.333, 0.024, 0.680, 0.99, 0.770),
      "N-IR": (0.324, 0.029, 0.694, 0.99, 0.770),
      "CW-SIR": (0.323, 0.029, 0.696, 0.99, 0.773),
      "N-SIR": (0.320, 0.028, 0.699, 0.99, 0.773),
    },
  },
}
COLS = ["BS", "MCB", "DSC", "UNC", "Acc"]
MODES = ["classwise", "normalized"]


def r_softmax(z: np.ndarray) -> np.ndarray:
  """``exp(z) / rowSums(exp(z))`` in float64, as the paper's R code."""
  e = np.exp(np.asarray(z, np.float64))
  return e / e.sum(axis=1, keepdims=True)


def load(data: pathlib.Path, setting: str):
  d = data / setting
  return (
    r_softmax(np.load(d / "val_logits.npy")),
    np.load(d / "val_labels.npy").astype(np.int64),
    r_softmax(np.load(d / "test_logits.npy")),
    np.load(d / "test_labels.npy").astype(np.int64),
  )


def evaluate_setting(data: pathlib.Path, setting: str) -> dict:
  """All methods x both decompositions for one setting (float64)."""
  import jax.numpy as jnp

  import jaxcal.recalibrate as R
  from jaxcal.scores import decompose

  pv, yv, pt, yt = load(data, setting)
  preds = {"base": pt}
  for short, method in FITS.items():
    cw = R.fit(method, pv, yv, from_logits=False, normalize=False)
    q = np.asarray(cw(jnp.asarray(pt)))
    preds[f"CW-{short}"] = q
    s = q.sum(axis=1, keepdims=True)
    preds[f"N-{short}"] = np.where(s > 0, q / np.where(s > 0, s, 1), 1.0 / q.shape[1])
  out = {}
  for name in METHODS:
    q = preds[name]
    acc = float(np.mean(np.argmax(q, axis=1) == yt))
    row = {}
    for mode in MODES:
      d = decompose(q, yt, "brier", mode, require_simplex=not name.startswith("CW-"))
      vals = [100 * float(v) for v in d]
      row[mode] = dict(zip(COLS, vals[:1] + vals[1:3] + vals[3:4] + [acc]))
    out[name] = row
  return out


def average(results: dict, settings: list[str]) -> dict:
  avg = {}
  for mode in MODES:
    avg[mode] = {
      m: {c: float(np.mean([results[s][m][mode][c] for s in settings])) for c in COLS}
      for m in METHODS
    }
  return avg


def fmt_table(rows: dict, paper: dict | None = None) -> str:
  head = "| Method | BS | MCB | DSC | UNC | Acc |" + (
    " paper BS | MCB | DSC | UNC | Acc | max abs diff |" if paper else ""
  )
  sep = "|" + "---|" * (6 + (6 if paper else 0))
  lines = [head, sep]
  for m in METHODS:
    r = rows[m]
    cells = [
      f"{r['BS']:.3f}",
      f"{r['MCB']:.3f}",
      f"{r['DSC']:.3f}",
      f"{r['UNC']:.3f}",
      f"{r['Acc']:.3f}",
    ]
    line = f"| {m} | " + " | ".join(cells) + " |"
    if paper:
      p = paper[m]
      diff = max(abs(round(r[c], 3) - p[i]) for i, c in enumerate(COLS) if c != "UNC")
      line += (
        " "
        + " | ".join(f"{v:.3f}" if isinstance(v, float) else str(v) for v in p)
        + f" | {diff:.3f} |"
      )
    lines.append(line)
  return "\n".join(lines)


def agreement(avg: dict, group: str) -> dict:
  """Largest |ours rounded to 3 decimals - paper| per decomposition (UNC printed rounded)."""
  out = {}
  for mode in MODES:
    worst = 0.0
    exact = 0
    total = 0
    for m in METHODS:
      for i, c in enumerate(COLS):
        if c == "UNC":
          continue
        ours = round(avg[mode][m][c], 3)
        paper = PAPER[mode][group][m][i]
        worst = max(worst, abs(ours - paper))
        exact += int(abs(ours - paper) < 5e-4)
        total += 1
    out[mode] = {"max_abs_diff": worst, "matching_to_3_decimals": exact, "compared": total}
  return out


def figures(results: dict, settings: dict, out: pathlib.Path) -> list[str]:
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  from matplotlib.lines import Line2D

  from jaxcal.plots import mcb_dsc_plot

  markers = {
    "base": "*",
    "CW-HB": "s",
    "N-HB": "D",
    "CW-IR": "^",
    "N-IR": ">",
    "CW-SIR": "v",
    "N-SIR": "<",
  }
  files = []
  for mode in MODES:
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, (group, sets) in zip(axes, settings.items()):
      pts, mk, col = {}, {}, {}
      cmap = plt.get_cmap("tab10")
      for k, s in enumerate(sets):
        for m in METHODS:
          r = results[s][m][mode]
          label = f"{s}:{m}"
          pts[label] = (r["MCB"], r["DSC"])
          mk[label] = markers[m]
          col[label] = cmap(k % 10)
      unc = results[sets[0]]["base"][mode]["UNC"]
      mcb_dsc_plot(
        pts, unc, ax=ax, markers=mk, colors=col, title=f"{group}, {mode} Brier decomposition (x100)"
      )
      # compact legend: models by colour, methods by marker
      handles = [
        Line2D([], [], color=cmap(k % 10), marker="o", ls="", label=s) for k, s in enumerate(sets)
      ]
      handles += [Line2D([], [], color="k", marker=markers[m], ls="", label=m) for m in METHODS]
      ax.legend(handles=handles, fontsize=6, loc="best", ncol=2)
    fig.tight_layout()
    path = out / f"mcb_dsc_{mode}.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    files.append(path.name)
  return files


def main(argv=None) -> dict:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument(
    "--data", default=None, help="the cifar_logits folder (default: jaxcal.data.dataset_dir)"
  )
  ap.add_argument("--out", default=str(ROOT / "experiments" / "results" / "score_decomposition"))
  args = ap.parse_args(argv)
  data = pathlib.Path(args.data) if args.data else dataset_dir("cifar_logits")
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  t0 = time.perf_counter()
  results = {}
  with jax.enable_x64(True):
    for _group, sets in ALL_SETTINGS.items():
      for s in sets:
        if not (data / s).is_dir():
          print(f"skip {s}: not found", flush=True)
          continue
        t = time.perf_counter()
        results[s] = evaluate_setting(data, s)
        print(f"{s}: {time.perf_counter() - t:.1f}s", flush=True)
  avail = {g: [s for s in sets if s in results] for g, sets in ALL_SETTINGS.items()}
  paper_avail = {g: [s for s in sets if s in results] for g, sets in PAPER_MODELS.items()}
  summary = {
    "date": datetime.datetime.now().isoformat(timespec="seconds"),
    "device": f"{jax.devices()[0].device_kind} ({platform.processor() or platform.machine()})",
    "jax": jax.__version__,
    "seconds": None,
    "per_setting": results,
    "averages": {},
    "agreement_with_paper": {},
  }
  md = [
    "# Score decompositions of CIFAR models (case study Table 1 and Table 2)",
    "",
    "Brier components x100 (multiclass Brier / C), accuracy as a fraction. Recalibrators "
    "fitted on `val`, everything evaluated on `test`, float64. Generated by "
    "`experiments/score_decomposition.py`.",
    "",
  ]
  for group in ALL_SETTINGS:
    full = len(paper_avail[group]) == len(PAPER_MODELS[group])
    n_paper = len(PAPER_MODELS[group])
    paper_label = (
      f"the paper's {n_paper} models"
      if full
      else f"the paper's models available here ({len(paper_avail[group])} of {n_paper})"
    )
    for label, sets in (
      (paper_label, paper_avail[group]),
      (f"all {len(avail[group])} available settings", avail[group]),
    ):
      if not sets:
        continue
      avg = average(results, sets)
      key = f"{group} / {label}"
      summary["averages"][key] = {"settings": sets, **avg}
      comparable = full and sets == paper_avail[group]
      if comparable:
        summary["agreement_with_paper"][group] = agreement(avg, group)
      for mode in MODES:
        md.append(f"## {group}, {mode} decomposition, average over {label}")
        md.append("")
        if sets == paper_avail[group] and not full:
          md.append(
            f"Only {len(sets)} of the paper's {len(PAPER_MODELS[group])} models are in the "
            f"shared data ({', '.join(sets)}); the paper's average is not comparable."
          )
          md.append("")
        md.append(fmt_table(avg[mode], PAPER[mode][group] if comparable else None))
        md.append("")
  md.append("## Per setting")
  md.append("")
  for s, res in results.items():
    for mode in MODES:
      md.append(f"### {s}, {mode}")
      md.append("")
      md.append(fmt_table({m: res[m][mode] for m in METHODS}))
      md.append("")
  summary["figures"] = figures(results, avail, out)
  summary["seconds"] = round(time.perf_counter() - t0, 1)
  if summary["agreement_with_paper"]:
    md.insert(
      4,
      "Agreement with the paper's printed averages (ours rounded to 3 decimals): "
      + json.dumps(summary["agreement_with_paper"]),
    )
    md.insert(5, "")
  (out / "table.md").write_text("\n".join(md) + "\n")
  (out / "results.json").write_text(json.dumps(summary, indent=1))
  print(json.dumps(summary["agreement_with_paper"], indent=1))
  print(f"wrote {out} in {summary['seconds']} s")
  return summary


if __name__ == "__main__":
  main()
