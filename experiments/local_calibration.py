"""Q1-Q3 of the LoCal Nets paper on Fashion-MNIST (local_calibration_jensen_shannon §8).

For each seed (default 0-4) the backbone of
``experiments/fashion_mnist/train_backbone.py`` (its own split and network per
seed) gives logits and 128-d penultimate features for the calibration split
(the official test set, 10,000 images) and the test split (27,000 images of
the official training set). The calibration split is divided 90 % / 10 %
(numpy seed = the seed); every recalibrator is fitted on the 90 %, the LoCal
Net uses the 10 % for early stopping. Then, on the test split:

* Q1 local calibration: LCE and MLCE (``jaxcal.metrics.lce``: 15 equal-width
  bins per class, bins with <= 20 samples skipped, Gaussian kernel with
  bandwidth gamma = 10, anchor included) on the PCA-50 of the standardised
  backbone features, the PCA fitted on the calibration split -- the *same*
  features for every method;
* Q2 global calibration: class-wise ECE and ECCE (15 equal-width bins, class
  weights = training-label priors);
* Q3: accuracy and NLL.

Methods: NC (uncalibrated), TS (temperature), IR (isotonic, one-vs-rest,
normalised), PS (Platt), DC (Dirichlet, ODIR) through
``jaxcal.recalibrate.fit`` -- methods that are not registered are skipped and
listed in the results -- and LN (``fit("local_net", ...)``: hidden 64,
dropout 0.3, lambda 1, gamma 10, Adam 1e-3, batch 1024, at most 60 epochs,
early stopping with patience 5: the paper's CIFAR-10 settings).

Outputs (``experiments/results/local_calibration/``): ``results.json`` (every
seed x method x metric, the mean and sample sd (ddof = 1), settings, timings,
machine), ``results.md`` (the table, mean +- sd) and ``figure.png`` (boxplots
of the six metrics over seeds, as the paper's Figures 2-3).

Usage:
  python experiments/fashion_mnist/train_backbone.py --seeds 0 1 2 3 4   # ~4 min/seed on 2 CPU cores
  python experiments/local_calibration.py [--seeds 0 1 2 3 4] [--quick]
Backbones missing from ``experiments/cache/fashion_mnist/`` (and from the
committed compact copy ``experiments/results/fashion_mnist/``) are trained
first. ``--quick``: one seed, 3,000 test points, LN 3 epochs (a smoke test).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "experiments" / "fashion_mnist"))

import jax
import jax.numpy as jnp
from train_backbone import load_backbone

import jaxcal
from jaxcal import metrics, scores
from jaxcal.train import calibration_fit_val, fit_pca, pca_transform

OUT = ROOT / "experiments" / "results" / "local_calibration"
METHODS = ["NC", "TS", "IR", "PS", "DC", "LN"]
REGISTRY = {
  "TS": ("temperature", {}),
  "IR": ("isotonic", {"normalize": True}),
  "PS": ("platt", {}),
  "DC": ("dirichlet", {}),
}
METRICS = ["LCE", "MLCE", "ECCE", "ECE", "ACC", "NLL"]
LOWER_IS_BETTER = {"LCE": True, "MLCE": True, "ECCE": True, "ECE": True, "ACC": False, "NLL": True}
LN_OPTS = dict(
  pca_dim=50,
  hidden=64,
  dropout=0.3,
  lam=1.0,
  learning_rate=1e-3,
  batch_size=1024,
  epochs=60,
  patience=5,
  alignment="paper",
)


def _fit_fn():
  return jaxcal.recalibrate.fit, jaxcal.recalibrate.methods


def evaluate(p, y, z, prior, bandwidth, extra_bandwidths=()):
  p = jnp.asarray(p, jnp.float32)
  loc = metrics.lce(p, y, z, num_bins=15, min_bin_size=20, bandwidth=bandwidth)
  extra = {}
  for g in extra_bandwidths:
    e = metrics.lce(p, y, z, num_bins=15, min_bin_size=20, bandwidth=g)
    extra[f"LCE@{g:g}"], extra[f"MLCE@{g:g}"] = float(e.lce), float(e.mlce)
  return {
    **extra,
    "LCE": float(loc.lce),
    "MLCE": float(loc.mlce),
    "ECCE": float(metrics.ecce(p, y, 15, class_weights=prior)),
    "ECE": float(metrics.classwise_ece(p, y, 15, "fixed", class_weights=prior)),
    "ACC": 1.0 - float(scores.classification_error(p, y)),
    "NLL": float(scores.log_loss(p, y)),
  }


def run_seed(seed, methods, bandwidth, quick=False, verbose=True, extra_bandwidths=()):
  fit, available = _fit_fn()
  registered = set(available())
  d = load_backbone(seed)
  n_cal = d["cal_labels"].shape[0]
  fi, va = calibration_fit_val(n_cal, seed)
  test = slice(None) if not quick else slice(0, 3000)
  zt, ft, yt = d["test_logits"][test], d["test_features"][test], d["test_labels"][test]
  counts = d["train_class_counts"].astype(np.float64)
  prior = counts / counts.sum()
  pca = fit_pca(jnp.asarray(d["cal_features"]), 50)  # metric features: calibration-split PCA
  feats = np.asarray(pca_transform(pca, jnp.asarray(ft)))
  out, info, skipped = {}, {}, []
  for m in methods:
    t0 = time.perf_counter()
    if m == "NC":
      p = jax.nn.softmax(jnp.asarray(zt), axis=-1)
    elif m == "LN":
      opts = dict(LN_OPTS, bandwidth=bandwidth, seed=seed, verbose=verbose)
      if quick:
        opts["epochs"] = 3
      rc = fit(
        "local_net",
        d["cal_logits"][fi],
        d["cal_labels"][fi],
        features=d["cal_features"][fi],
        validation_data=(d["cal_logits"][va], d["cal_labels"][va], d["cal_features"][va]),
        **opts,
      )
      p = rc(zt, features=ft)
      info["LN"] = {
        "best_epoch": int(rc.best_epoch),
        "epochs_run": int(rc.history.shape[0]),
        "w_g": float(rc.params["w_g"]),
        "w_phi": float(rc.params["w_phi"]),
      }
    else:
      name, opts = REGISTRY[m]
      if name not in registered:
        skipped.append(m)
        continue
      try:
        rc = fit(name, d["cal_logits"][fi], d["cal_labels"][fi], **opts)
      except TypeError:  # an implementation without that option
        rc = fit(name, d["cal_logits"][fi], d["cal_labels"][fi])
      p = rc(zt)
    p = jax.block_until_ready(p)
    fit_s = time.perf_counter() - t0
    out[m] = evaluate(p, yt, feats, prior, bandwidth, extra_bandwidths)
    out[m]["fit_seconds"] = round(fit_s, 2)
    if verbose:
      print(
        f"[seed {seed}] {m}: "
        + "  ".join(f"{k} {v:.4f}" for k, v in out[m].items() if k != "fit_seconds")
        + f"  ({fit_s:.1f}s fit, {time.perf_counter() - t0 - fit_s:.1f}s metrics)",
        flush=True,
      )
  return out, info, skipped


def summarize(per_seed):
  methods = [m for m in METHODS if all(m in r for r in per_seed.values())]
  summ = {}
  for m in methods:
    summ[m] = {}
    keys = [k for k in next(iter(per_seed.values()))[m] if k != "fit_seconds"]
    for k in keys:
      v = np.array([per_seed[s][m][k] for s in per_seed])
      summ[m][k] = {"mean": float(v.mean()), "sd": float(v.std(ddof=1)) if v.size > 1 else 0.0}
  return summ


def markdown(summ, meta):
  methods = list(summ)
  cols = METRICS + [k for k in next(iter(summ.values())) if k not in METRICS]
  lower = lambda k: LOWER_IS_BETTER.get(k, True)
  lines = [
    f"# LoCal Nets on Fashion-MNIST (Q1-Q3), {meta['num_seeds']} seeds, mean ± sd",
    "",
    f"Test split: {meta['n_test']} images; gamma = {meta['bandwidth']}; "
    "LCE/MLCE on the calibration-split PCA-50 of the backbone features (same for all "
    "methods); ECE/ECCE class-wise, 15 bins, prior weights. Bold: best; "
    "_italic_: second.",
    "",
    "| Method | " + " | ".join(f"{k} {'↓' if lower(k) else '↑'}" for k in cols) + " |",
    "|---" * (len(cols) + 1) + "|",
  ]
  ranks = {}
  for k in cols:
    order = sorted(methods, key=lambda m: summ[m][k]["mean"] * (1 if lower(k) else -1))
    ranks[k] = {m: i for i, m in enumerate(order)}
  for m in methods:
    cells = []
    for k in cols:
      digits = 3 if k in ("ACC", "NLL") else 4
      c = f"{summ[m][k]['mean']:.{digits}f} ± {summ[m][k]['sd']:.{digits}f}"
      if ranks[k][m] == 0:
        c = f"**{c}**"
      elif ranks[k][m] == 1:
        c = f"_{c}_"
      cells.append(c)
    lines.append(f"| {m} | " + " | ".join(cells) + " |")
  if meta.get("extra_bandwidths"):
    lines += [
      "",
      "LCE@g / MLCE@g: the same metrics at kernel bandwidth g (the LoCal Net is "
      f"still trained at gamma = {meta['bandwidth']}).",
    ]
  if "NC" in summ and "LN" in summ:
    nc, ln = summ["NC"], summ["LN"]
    lines += [
      "",
      "Checks computed from these numbers:",
      "",
      f"- LN vs NC: LCE {nc['LCE']['mean']:.4f} -> {ln['LCE']['mean']:.4f} "
      f"({100 * (ln['LCE']['mean'] / nc['LCE']['mean'] - 1):+.0f} %), accuracy "
      f"{100 * (ln['ACC']['mean'] - nc['ACC']['mean']):+.2f} points, NLL "
      f"{nc['NLL']['mean']:.3f} -> {ln['NLL']['mean']:.3f}.",
      "- LCE / class-wise ECE per method: "
      + ", ".join(f"{m} {summ[m]['LCE']['mean'] / summ[m]['ECE']['mean']:.2f}" for m in methods)
      + f" (a ratio near 1 means the kernel at gamma = {meta['bandwidth']:g} is nearly "
      "flat within a bin on these features, so LCE measures little beyond the binned error).",
    ]
    if meta.get("ln_epochs"):
      lines += [
        f"- LN epochs run per seed: {meta['ln_epochs']} (cap {LN_OPTS['epochs']}, early "
        f"stopping patience {LN_OPTS['patience']})."
      ]
  if meta.get("skipped"):
    lines += ["", f"Not run (not registered in jaxcal.recalibrate): {', '.join(meta['skipped'])}."]
  return "\n".join(lines) + "\n"


def figure(per_seed, summ, path):
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  methods = list(summ)
  fig, axes = plt.subplots(2, 3, figsize=(13, 7))
  titles = {
    "LCE": "Q1: LCE",
    "MLCE": "Q1: MLCE",
    "ECE": "Q2: class-wise ECE",
    "ECCE": "Q2: ECCE",
    "ACC": "Q3: accuracy",
    "NLL": "Q3: NLL",
  }
  for ax, k in zip(axes.ravel(), ["LCE", "MLCE", "ECE", "ECCE", "ACC", "NLL"]):
    data = [[per_seed[s][m][k] for s in per_seed] for m in methods]
    ax.boxplot(data, tick_labels=methods)
    ax.set_title(
      titles[k] + (" (lower is better)" if LOWER_IS_BETTER[k] else " (higher is better)"),
      fontsize=10,
    )
    ax.grid(alpha=0.3)
  fig.suptitle(f"Fashion-MNIST, {len(per_seed)} seeds (test split)")
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
  ap.add_argument("--methods", nargs="+", default=METHODS, choices=METHODS)
  ap.add_argument("--bandwidth", type=float, default=10.0)
  ap.add_argument(
    "--extra-bandwidths",
    type=float,
    nargs="*",
    default=[],
    help="also report LCE/MLCE at these bandwidths (LN still trained at --bandwidth)",
  )
  ap.add_argument("--out", default=str(OUT))
  ap.add_argument("--quick", action="store_true")
  args = ap.parse_args(argv)
  if args.quick:
    args.seeds = args.seeds[:1]
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  t0 = time.perf_counter()
  per_seed, infos, skipped = {}, {}, set()
  for s in args.seeds:
    r, info, sk = run_seed(
      s, args.methods, args.bandwidth, quick=args.quick, extra_bandwidths=args.extra_bandwidths
    )
    per_seed[s], infos[s] = r, info
    skipped |= set(sk)
  summ = summarize(per_seed)
  ln_epochs = [infos[s]["LN"]["epochs_run"] for s in infos if infos[s].get("LN")]
  n_test = 3000 if args.quick else int(load_backbone(args.seeds[0])["test_labels"].shape[0])
  meta = {
    "num_seeds": len(args.seeds),
    "seeds": args.seeds,
    "bandwidth": args.bandwidth,
    "extra_bandwidths": args.extra_bandwidths,
    "ln_epochs": ln_epochs,
    "n_test": n_test,
    "skipped": sorted(skipped),
    "quick": args.quick,
  }
  result = {
    "description": "LoCal Nets paper Q1-Q3 on Fashion-MNIST; see experiments/local_calibration.py",
    "settings": {
      **meta,
      "ln_options": LN_OPTS,
      "lce": {
        "num_bins": 15,
        "min_bin_size": 20,
        "features": "PCA-50 of standardised backbone features, fitted on the calibration split",
      },
      "ece_ecce": {"num_bins": 15, "binning": "fixed", "class_weights": "training priors"},
      "sd": "sample standard deviation over seeds (ddof=1)",
    },
    "summary": summ,
    "per_seed": {str(s): per_seed[s] for s in per_seed},
    "local_net": {str(s): infos[s].get("LN") for s in infos},
    "machine": {
      "platform": platform.platform(),
      "cpu_count": os.cpu_count(),
      "jax_backend": jax.default_backend(),
      "jax": jax.__version__,
      "device": jax.devices()[0].device_kind,
      "load_avg": list(os.getloadavg()),
    },
    "total_seconds": round(time.perf_counter() - t0, 1),
    "date": time.strftime("%Y-%m-%d"),
  }
  (out / "results.json").write_text(json.dumps(result, indent=1) + "\n")
  (out / "results.md").write_text(markdown(summ, meta))
  figure(per_seed, summ, out / "figure.png")
  print(markdown(summ, meta))
  print(f"wrote {out} in {result['total_seconds']}s")


if __name__ == "__main__":
  main()
