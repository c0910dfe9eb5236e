"""Q1-Q3 of the LoCal Nets paper on Fashion-MNIST (Barbera et al. 2025,
arXiv:2510.26566, §8), and why Q1 does or does not reproduce.

For each seed (default 0-4) the backbone of
``experiments/fashion_mnist/train_backbone.py`` (its own split and network per
seed) gives logits and 128-d penultimate features for the calibration split
(the official test set, 10,000 images) and the test split (27,000 images of
the official training set). The calibration split is divided 90 % / 10 %
(numpy seed = the seed, ``jaxcal.train.calibration_fit_val``); every
recalibrator is fitted on the 90 %; LN and KC use the 10 % for early stopping
and KC / KO as the kernel's memory. Then, on the test split:

* Q1 local calibration: LCE and MLCE (``jaxcal.metrics.lce``: 15 equal-width
  bins per class, bins with <= 20 samples skipped, Gaussian kernel gamma = 10,
  anchor included, MLCE = prior-weighted mean of the per-class maxima) on the
  PCA-50 of the standardised backbone features (PCA fitted on the calibration
  split) -- the same features for every method ("LCE", "MLCE") -- and, for
  the methods that learn features (LN, KO, KC), also on their own refined
  features phi' ("LCE_own", "MLCE_own"), which is what the authors' code
  reports for them;
* Q2 global calibration: class-wise ECE and ECCE (15 equal-width bins, class
  weights = training-label priors, ECCE a mean over non-empty bins);
* Q3: accuracy and NLL.

Methods: NC (uncalibrated), TS (temperature), IR (isotonic, one-vs-rest,
normalised), PS (Platt), DC (Dirichlet, ODIR) through
``jaxcal.recalibrate.fit``; LN (``fit("local_net")`` with its defaults, the
paper's CIFAR-10 settings and the authors' training: hidden 64, dropout 0.3,
lambda 1, gamma 10, Adam 1e-3, batch 1024, N(0, 0.01) init, class-wise
Bernoulli JS alignment, early stopping on the validation alignment term with
patience 10 within 100 epochs, best weights restored); KC (``fit("kcal")``:
the same network trained on the kernel cross-entropy alone, early stopping on
its validation value, predicting with the kernel estimate of the validation
split's labels); KO (the trained LN predicting with that kernel,
``kernel_calibrator``).

Why Q1 might not reproduce -- evidence collected in the same run, decided
before looking at the results:

* LCE vs bandwidth: LCE / MLCE of every method at gamma in ``SWEEP`` on a
  fixed subsample of ``SWEEP_N`` test points (same points for all methods),
  on the backbone PCA features and on phi';
* how informative the kernel is at each gamma: the median pairwise distance
  of the features and the mean effective sample size of the LCE weights
  relative to the bin size, ``ESS_i / |b| = (sum_j k_ij)^2 / (|b| sum_j k_ij^2)``
  (1: the kernel is flat within the bin and LCE measures the bin's ECE; small:
  local), on ``ESS_N`` test points, bins of the uncalibrated predictions;
* the LCE of a perfectly calibrated predictor at each gamma (the "floor"):
  DC's probabilities with labels drawn from them, on the backbone PCA
  features, and LN's with labels drawn from them, on LN's phi' (same
  subsample): what LCE reports when only sampling noise is left;
* a second arm where the kernel is informative: LN, KO and KC retrained with
  ``GAMMA_INFO = 10 * sqrt(128 / 2048) = 2.5`` and every method evaluated at
  that gamma. The rule keeps the kernel width relative to the scale of the
  standardised features that the paper's gamma = 10 had on 2048-d ResNet-50
  features (a standardised feature space of dimension D has total variance
  D); it is fixed here, not tuned.

Outputs (``experiments/results/local_calibration/``; ``--quick``: local_calibration_quick/,
``--out DIR`` to write elsewhere): ``results.json`` (every
seed x method x metric, the means and sample sd (ddof = 1), the sweep, the
diagnostics, LN/KC training statistics, settings, timings, machine and load),
``results.md`` (the tables), ``figure.png`` (boxplots of the six metrics over
seeds, as the paper's Figures 2-3) and ``figure_bandwidth.png`` (LCE vs gamma
and the kernel's effective sample size vs gamma).

Usage:
  python experiments/fashion_mnist/train_backbone.py --seeds 0 1 2 3 4   # ~3 min/seed on 2 CPU cores
  python experiments/local_calibration.py [--seeds 0 1 2 3 4] [--quick]
Backbones missing from ``experiments/cache/fashion_mnist/`` (and from the
committed compact copy ``experiments/results/fashion_mnist/``) are trained
first. ``--quick``: one seed, 3,000 test points, LN/KC 3 epochs (a smoke test).
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
from jaxcal.recalibrate import kernel_calibrator
from jaxcal.train import calibration_fit_val, fit_pca, pca_transform

OUT = ROOT / "experiments" / "results" / "local_calibration"
METHODS = ["NC", "TS", "IR", "PS", "DC", "KC", "KO", "LN"]
LEARNED = ("KC", "KO", "LN")  # methods with their own refined features phi'
REGISTRY = {
  "TS": ("temperature", {}),
  "IR": ("isotonic", {"normalize": True}),
  "PS": ("platt", {}),
  "DC": ("dirichlet", {}),
}
METRICS = ["LCE", "MLCE", "ECCE", "ECE", "ACC", "NLL"]
LOWER_IS_BETTER = {"ACC": False}
GAMMA = 10.0
GAMMA_INFO = 10.0 * np.sqrt(128 / 2048)  # 2.5: see the module docstring
SWEEP = [1.0, 2.5, 5.0, 10.0, 20.0]
SWEEP_N = 9000
ESS_N = 3000
LCE_OPTS = dict(num_bins=15, min_bin_size=20)


def _lce(p, y, feats, gamma, prior):
  """``(LCE, MLCE)`` weighted by the training-label priors, as ECE/ECCE are."""
  r = metrics.lce(p, y, feats, bandwidth=gamma, class_weights=prior, **LCE_OPTS)
  return float(r.lce), float(r.mlce)


def global_metrics(p, y, prior):
  return {
    "ECCE": float(metrics.ecce(p, y, 15, class_weights=prior)),
    "ECE": float(metrics.classwise_ece(p, y, 15, "fixed", class_weights=prior)),
    "ACC": 1.0 - float(scores.classification_error(p, y)),
    "NLL": float(scores.log_loss(p, y)),
  }


def ess_fraction(p, y, feats, gamma, prior, min_bin_size=20):
  """Prior-weighted mean over classes of the mean ``ESS_i / |b|`` of the LCE
  weights (anchor included) over anchors in kept bins."""
  p = np.asarray(p)
  f = jnp.asarray(feats, jnp.float32)
  out = []
  for c in range(p.shape[1]):
    b = np.asarray(metrics.bin_ids(p[:, c], 15))
    fr = []
    for bb in np.unique(b):
      idx = np.flatnonzero(b == bb)
      if idx.size <= min_bin_size:
        continue
      fb = f[idx] - jnp.mean(f[idx], 0)
      sq = jnp.sum(fb * fb, 1)
      d2 = jnp.maximum(sq[:, None] + sq[None, :] - 2 * fb @ fb.T, 0.0)
      k = jnp.exp(-d2 / (2 * gamma**2))
      ess = jnp.sum(k, 1) ** 2 / jnp.sum(k * k, 1)
      fr.append(np.asarray(ess) / idx.size)
    out.append(np.mean(np.concatenate(fr)) if fr else np.nan)
  out = np.asarray(out)
  ok = np.isfinite(out)
  return float(np.sum(prior[ok] * out[ok]) / np.sum(prior[ok]))


def median_distance(feats, seed=0, pairs=5000):
  rng = np.random.default_rng(seed)
  i, j = rng.integers(0, len(feats), (2, pairs))
  return float(np.sqrt(np.median(np.sum((feats[i] - feats[j]) ** 2, 1))))


def fit_learned(d, fi, va, seed, gamma, quick, verbose):
  """LN, KC and KO fitted at bandwidth ``gamma``; ``(fitted dict, info dict)``."""
  fit = jaxcal.recalibrate.fit
  cal = (d["cal_logits"][fi], d["cal_labels"][fi])
  val = (d["cal_logits"][va], d["cal_labels"][va], d["cal_features"][va])
  opts = dict(bandwidth=gamma, seed=seed, verbose=verbose, validation_data=val)
  if quick:
    opts["epochs"] = 3
  out, info, secs = {}, {}, {}
  t0 = time.perf_counter()
  out["LN"] = fit("local_net", *cal, features=d["cal_features"][fi], **opts)
  secs["LN"] = time.perf_counter() - t0
  t0 = time.perf_counter()
  out["KC"] = fit("kcal", *cal, features=d["cal_features"][fi], **opts)
  secs["KC"] = time.perf_counter() - t0
  t0 = time.perf_counter()
  out["KO"] = kernel_calibrator(out["LN"], *val)
  secs["KO"] = time.perf_counter() - t0 + secs["LN"]
  for m in ("LN", "KC"):
    rc = out[m]
    info[m] = {
      "epochs_run": int(rc.epochs_run),
      "best_epoch": int(rc.best_epoch),
      "stopped_early": bool(rc.stopped_early),
      "monitor": rc.monitor,
      "w_g_mean": float(jnp.mean(rc.params["w_g"])),
      "w_phi_mean": float(jnp.mean(rc.params["w_phi"])),
      "final_val": [float(v) for v in np.asarray(rc.history)[rc.best_epoch - 1, 4:]],
    }
  return out, info, secs


def run_seed(seed, methods, quick=False, verbose=True, arm2=True):
  fit = jaxcal.recalibrate.fit
  d = load_backbone(seed)
  n_cal = d["cal_labels"].shape[0]
  fi, va = calibration_fit_val(n_cal, seed)
  test = slice(None) if not quick else slice(0, 3000)
  zt, ft, yt = d["test_logits"][test], d["test_features"][test], d["test_labels"][test]
  counts = d["train_class_counts"].astype(np.float64)
  prior = counts / counts.sum()
  pca = fit_pca(jnp.asarray(d["cal_features"]), 50)  # metric features: calibration-split PCA
  feats = np.asarray(pca_transform(pca, jnp.asarray(ft)))
  rng = np.random.default_rng(1000 + seed)
  sub = np.sort(rng.permutation(len(yt))[: min(SWEEP_N, len(yt))])
  ess_sub = np.sort(rng.permutation(len(yt))[: min(ESS_N, len(yt))])

  probs, own, info, fit_s = {}, {}, {}, {}
  learned = {}
  if set(methods) & set(LEARNED):
    learned, info, fit_s = fit_learned(d, fi, va, seed, GAMMA, quick, verbose)
  for m in methods:
    t0 = time.perf_counter()
    if m == "NC":
      p = jax.nn.softmax(jnp.asarray(zt), axis=-1)
    elif m in LEARNED:
      p = learned[m](zt, features=ft)
      own[m] = np.asarray(learned[m].refined_features(zt, ft))
    else:
      name, opts = REGISTRY[m]
      rc = fit(name, d["cal_logits"][fi], d["cal_labels"][fi], **opts)
      p = rc(zt)
    probs[m] = np.asarray(jax.block_until_ready(p))
    fit_s.setdefault(m, time.perf_counter() - t0)

  res, sweep = {}, {}
  for m in methods:
    t0 = time.perf_counter()
    p = probs[m]
    r = dict(zip(("LCE", "MLCE"), _lce(p, yt, feats, GAMMA, prior)))
    if m in own:
      r["LCE_own"], r["MLCE_own"] = _lce(p, yt, own[m], GAMMA, prior)
    r.update(global_metrics(p, yt, prior))
    r["fit_seconds"] = round(fit_s[m], 2)
    sweep[m] = {"pca": {}, "own": {}}
    for g in SWEEP:
      sweep[m]["pca"][str(g)] = _lce(p[sub], yt[sub], feats[sub], g, prior)
      if m in own:
        sweep[m]["own"][str(g)] = _lce(p[sub], yt[sub], own[m][sub], g, prior)
    r["metric_seconds"] = round(time.perf_counter() - t0, 2)
    res[m] = r
    if verbose:
      print(
        f"[seed {seed}] {m}: "
        + "  ".join(f"{k} {v:.4f}" for k, v in r.items() if not k.endswith("seconds"))
        + f"  ({r['fit_seconds']:.1f}s fit, {r['metric_seconds']:.1f}s metrics)",
        flush=True,
      )

  floor = {}
  rng_f = np.random.default_rng(2000 + seed)
  for name, m, space in (("pca", "DC", feats), ("ln_own", "LN", own.get("LN"))):
    if m in probs and space is not None:
      pm = probs[m][sub].astype(np.float64)
      y_star = (np.cumsum(pm / pm.sum(1, keepdims=True), 1) > rng_f.random((len(sub), 1))).argmax(1)
      floor[name] = {str(g): _lce(probs[m][sub], y_star, space[sub], g, prior) for g in SWEEP}
  sweep["floor"] = floor

  diag = {"median_distance_pca": median_distance(feats, seed), "ess_fraction_pca": {}}
  p_nc = probs.get("NC", probs[methods[0]])
  for g in SWEEP:
    diag["ess_fraction_pca"][str(g)] = ess_fraction(
      p_nc[ess_sub], yt[ess_sub], feats[ess_sub], g, prior
    )
  if "LN" in own:
    diag["median_distance_ln_own"] = median_distance(own["LN"], seed)
    diag["ess_fraction_ln_own"] = {
      str(g): ess_fraction(p_nc[ess_sub], yt[ess_sub], own["LN"][ess_sub], g, prior) for g in SWEEP
    }

  res2, info2 = {}, {}
  if arm2 and set(methods) & set(LEARNED):
    learned2, info2, fit2 = fit_learned(d, fi, va, seed, GAMMA_INFO, quick, verbose)
    for m in methods:
      if m in LEARNED:
        p = np.asarray(learned2[m](zt, features=ft))
        phi2 = np.asarray(learned2[m].refined_features(zt, ft))
        r = dict(zip(("LCE", "MLCE"), _lce(p, yt, feats, GAMMA_INFO, prior)))
        r["LCE_own"], r["MLCE_own"] = _lce(p, yt, phi2, GAMMA_INFO, prior)
        r.update(global_metrics(p, yt, prior))
        r["fit_seconds"] = round(fit2[m], 2)
      else:
        r = dict(zip(("LCE", "MLCE"), _lce(probs[m], yt, feats, GAMMA_INFO, prior)))
        r.update({k: res[m][k] for k in ("ECCE", "ECE", "ACC", "NLL")})
      res2[m] = r
      if verbose:
        print(
          f"[seed {seed}, gamma {GAMMA_INFO:g}] {m}: "
          + "  ".join(f"{k} {v:.4f}" for k, v in r.items() if k != "fit_seconds"),
          flush=True,
        )
  return res, res2, sweep, diag, info, info2


def _mean_sd(values):
  v = np.asarray(values, np.float64)
  return {"mean": float(v.mean()), "sd": float(v.std(ddof=1)) if v.size > 1 else 0.0}


def summarize(per_seed):
  seeds = list(per_seed)
  methods = [m for m in METHODS if all(m in per_seed[s] for s in seeds)]
  summ = {}
  for m in methods:
    keys = [k for k in per_seed[seeds[0]][m] if not k.endswith("seconds")]
    summ[m] = {k: _mean_sd([per_seed[s][m][k] for s in seeds]) for k in keys}
  return summ


def summarize_sweep(sweeps):
  seeds = list(sweeps)
  out = {}
  for m in sweeps[seeds[0]]:
    if m == "floor":
      out[m] = {
        space: {
          g: {
            "LCE": _mean_sd([sweeps[s][m][space][g][0] for s in seeds]),
            "MLCE": _mean_sd([sweeps[s][m][space][g][1] for s in seeds]),
          }
          for g in sweeps[seeds[0]][m][space]
        }
        for space in sweeps[seeds[0]][m]
      }
      continue
    out[m] = {}
    for space in ("pca", "own"):
      gs = sweeps[seeds[0]][m][space]
      if gs:
        out[m][space] = {
          g: {
            "LCE": _mean_sd([sweeps[s][m][space][g][0] for s in seeds]),
            "MLCE": _mean_sd([sweeps[s][m][space][g][1] for s in seeds]),
          }
          for g in gs
        }
  return out


def _table(summ, cols, title_rows=()):
  methods = list(summ)
  lower = lambda k: LOWER_IS_BETTER.get(k.split("_")[0], True)
  lines = list(title_rows) + [
    "| Method | " + " | ".join(f"{k} {'↓' if lower(k) else '↑'}" for k in cols) + " |",
    "|---" * (len(cols) + 1) + "|",
  ]
  ranks = {}
  for k in cols:
    have = [m for m in methods if k in summ[m]]
    order = sorted(have, key=lambda m: summ[m][k]["mean"] * (1 if lower(k) else -1))
    ranks[k] = {m: i for i, m in enumerate(order)}
  for m in methods:
    cells = []
    for k in cols:
      if k not in summ[m]:
        cells.append("–")
        continue
      digits = 3 if k in ("ACC", "NLL") else 4
      c = f"{summ[m][k]['mean']:.{digits}f} ± {summ[m][k]['sd']:.{digits}f}"
      if ranks[k][m] == 0:
        c = f"**{c}**"
      elif ranks[k][m] == 1:
        c = f"_{c}_"
      cells.append(c)
    lines.append(f"| {m} | " + " | ".join(cells) + " |")
  return lines


def markdown(summ, summ2, sweep, diags, meta):
  n_seeds = meta["num_seeds"]
  cols = METRICS + [k for k in ("LCE_own", "MLCE_own") if any(k in summ[m] for m in summ)]
  lines = _table(
    summ,
    cols,
    [
      f"# LoCal Nets on Fashion-MNIST (Q1-Q3), {n_seeds} seeds, mean ± sd",
      "",
      f"Test split: {meta['n_test']} images; gamma = {GAMMA:g}. LCE/MLCE: on the "
      "calibration-split PCA-50 of the backbone features, the same for every method; "
      "LCE_own/MLCE_own: on the method's own refined features phi' (what the authors' "
      "code reports for LN, KO and KC). MLCE = prior-weighted mean of the per-class "
      "maxima. ECE/ECCE class-wise, 15 bins, prior weights, ECCE a mean over non-empty "
      "bins. Bold: best; _italic_: second.",
      "",
    ],
  )
  lines += [""]
  for name in ("LN", "KC"):
    eps = [
      meta["training"][s][name]["epochs_run"]
      for s in meta["training"]
      if name in meta["training"][s]
    ]
    best = [
      meta["training"][s][name]["best_epoch"]
      for s in meta["training"]
      if name in meta["training"][s]
    ]
    stop = [
      meta["training"][s][name]["stopped_early"]
      for s in meta["training"]
      if name in meta["training"][s]
    ]
    if eps:
      lines.append(
        f"- {name} training per seed: epochs run {eps}, best epoch {best}, early stop {stop} "
        "(at most 100 epochs, patience 10)."
      )
  if summ2:
    cols2 = ["LCE", "MLCE", "LCE_own", "MLCE_own", "ECCE", "ECE", "ACC", "NLL"]
    lines += [""] + _table(
      summ2,
      cols2,
      [
        f"## Second arm: gamma = {GAMMA_INFO:g} (LN, KO, KC trained and every LCE/MLCE "
        "evaluated at it)",
        "",
        "ECCE/ECE/ACC/NLL of the baselines are those of the first table.",
        "",
      ],
    )
  lines += [
    "",
    f"## LCE vs bandwidth (mean ± sd over seeds; {meta['sweep_n']} test points; LN, KO, "
    f"KC trained at gamma = {GAMMA:g})",
    "",
    "| Method | features | " + " | ".join(f"gamma {g:g}" for g in SWEEP) + " |",
    "|---|---|" + "---|" * len(SWEEP),
  ]
  for m in sweep:
    if m == "floor":
      continue
    for space in ("pca", "own"):
      if space in sweep[m]:
        row = [
          f"{sweep[m][space][str(g)]['LCE']['mean']:.4f} ± {sweep[m][space][str(g)]['LCE']['sd']:.4f}"
          for g in SWEEP
        ]
        lines.append(f"| {m} | {'PCA' if space == 'pca' else 'phi′'} | " + " | ".join(row) + " |")
  for space, label in (
    ("pca", "DC's p, labels drawn from it | PCA"),
    ("ln_own", "LN's p, labels drawn from it | phi′"),
  ):
    if space in sweep.get("floor", {}):
      f = sweep["floor"][space]
      row = [f"{f[str(g)]['LCE']['mean']:.4f} ± {f[str(g)]['LCE']['sd']:.4f}" for g in SWEEP]
      lines.append(f"| calibrated floor: {label} | " + " | ".join(row) + " |")
  lines += [
    "",
    "Calibrated floor: the LCE of a predictor that is perfectly calibrated by construction "
    "(labels resampled from its own probabilities), on the same points and features: "
    "what sampling noise alone gives at each gamma.",
  ]
  seeds = list(diags)
  ess = {g: _mean_sd([diags[s]["ess_fraction_pca"][str(g)] for s in seeds]) for g in SWEEP}
  lines += [
    "",
    "## How informative the kernel is",
    "",
    f"Median pairwise distance of the backbone PCA-50 test features: "
    f"{np.mean([diags[s]['median_distance_pca'] for s in seeds]):.2f}"
    + (
      f"; of LN's phi': {np.mean([diags[s]['median_distance_ln_own'] for s in seeds]):.2f}"
      if "median_distance_ln_own" in diags[seeds[0]]
      else ""
    )
    + f". Mean ESS_i / |bin| of the LCE weights ({meta['ess_n']} test points, bins of NC; "
    "1 = flat kernel, LCE = binned ECE):",
    "",
    "| features | " + " | ".join(f"gamma {g:g}" for g in SWEEP) + " |",
    "|---|" + "---|" * len(SWEEP),
    "| PCA | " + " | ".join(f"{ess[g]['mean']:.3f}" for g in SWEEP) + " |",
  ]
  if "ess_fraction_ln_own" in diags[seeds[0]]:
    ess2 = {g: _mean_sd([diags[s]["ess_fraction_ln_own"][str(g)] for s in seeds]) for g in SWEEP}
    lines.append("| LN phi′ | " + " | ".join(f"{ess2[g]['mean']:.3f}" for g in SWEEP) + " |")
  return "\n".join(lines) + "\n"


def figure(per_seed, summ, path):
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  methods = list(summ)
  fig, axes = plt.subplots(2, 3, figsize=(14, 7))
  titles = {
    "LCE": "Q1: LCE (backbone PCA)",
    "MLCE": "Q1: MLCE (backbone PCA)",
    "ECE": "Q2: class-wise ECE",
    "ECCE": "Q2: ECCE",
    "ACC": "Q3: accuracy",
    "NLL": "Q3: NLL",
  }
  for ax, k in zip(axes.ravel(), ["LCE", "MLCE", "ECE", "ECCE", "ACC", "NLL"]):
    data = [[per_seed[s][m][k] for s in per_seed] for m in methods]
    ax.boxplot(data, tick_labels=methods)
    if k in ("LCE", "MLCE"):  # the authors' convention for learned features: phi'
      xs = [i + 1 for i, m in enumerate(methods) if f"{k}_own" in per_seed[next(iter(per_seed))][m]]
      ys = [
        np.mean([per_seed[s][m][f"{k}_own"] for s in per_seed])
        for m in methods
        if f"{k}_own" in per_seed[next(iter(per_seed))][m]
      ]
      ax.plot(xs, ys, "r^", label="on own phi′ (mean)")
      ax.legend(fontsize=8)
    better = "higher" if k == "ACC" else "lower"
    ax.set_title(f"{titles[k]} ({better} is better)", fontsize=10)
    ax.grid(alpha=0.3)
  fig.suptitle(f"Fashion-MNIST, {len(per_seed)} seeds (test split), gamma = {GAMMA:g}")
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def figure_bandwidth(sweep, diags, path):
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.5))
  for space, lab in (("pca", "calibrated floor (PCA)"), ("ln_own", "calibrated floor (LN phi′)")):
    if space in sweep.get("floor", {}):
      ys = [sweep["floor"][space][str(g)]["LCE"]["mean"] for g in SWEEP]
      a1.plot(SWEEP, ys, ":", color="k" if space == "pca" else "grey", lw=2, label=lab)
  for m in sweep:
    if m == "floor":
      continue
    for space, ls in (("pca", "-"), ("own", "--")):
      if space in sweep[m]:
        ys = [sweep[m][space][str(g)]["LCE"]["mean"] for g in SWEEP]
        a1.plot(
          SWEEP, ys, ls, marker="o", ms=3, label=f"{m} ({'PCA' if space == 'pca' else 'phi′'})"
        )
  a1.set_xscale("log")
  a1.set_yscale("log")
  a1.set_xlabel("bandwidth gamma")
  a1.set_ylabel("LCE (mean over seeds)")
  a1.set_title("LCE vs bandwidth (LN/KO/KC trained at gamma = 10)")
  a1.legend(fontsize=7, ncol=2)
  a1.grid(alpha=0.3)
  seeds = list(diags)
  for key, lab in (("ess_fraction_pca", "backbone PCA"), ("ess_fraction_ln_own", "LN phi′")):
    if key in diags[seeds[0]]:
      ys = [np.mean([diags[s][key][str(g)] for s in seeds]) for g in SWEEP]
      a2.plot(SWEEP, ys, marker="o", label=lab)
  a2.set_xscale("log")
  a2.set_ylim(0, 1.05)
  a2.set_xlabel("bandwidth gamma")
  a2.set_ylabel("mean ESS / bin size")
  a2.set_title("How local the LCE kernel is (1 = flat within the bin)")
  a2.legend()
  a2.grid(alpha=0.3)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
  ap.add_argument("--methods", nargs="+", default=METHODS, choices=METHODS)
  ap.add_argument("--no-arm2", action="store_true", help=f"skip the gamma = {GAMMA_INFO:g} arm")
  ap.add_argument("--out", default=None)
  ap.add_argument("--quick", action="store_true")
  args = ap.parse_args(argv)
  if args.quick:
    args.seeds = args.seeds[:1]
  methods = [m for m in METHODS if m in args.methods]
  name = "local_calibration_quick" if args.quick else "local_calibration"
  out = pathlib.Path(args.out) if args.out else OUT.parent / name
  out.mkdir(parents=True, exist_ok=True)
  load_start = list(os.getloadavg())
  t0 = time.perf_counter()
  per_seed, per_seed2, sweeps, diags, training, training2 = {}, {}, {}, {}, {}, {}
  for s in args.seeds:
    r, r2, sw, dg, info, info2 = run_seed(s, methods, quick=args.quick, arm2=not args.no_arm2)
    per_seed[s], per_seed2[s], sweeps[s], diags[s] = r, r2, sw, dg
    training[s], training2[s] = info, info2
  summ = summarize(per_seed)
  summ2 = summarize(per_seed2) if all(per_seed2.values()) else {}
  sweep = summarize_sweep(sweeps)
  n_test = 3000 if args.quick else int(load_backbone(args.seeds[0])["test_labels"].shape[0])
  meta = {
    "num_seeds": len(args.seeds),
    "seeds": args.seeds,
    "n_test": n_test,
    "sweep_n": min(SWEEP_N, n_test),
    "ess_n": min(ESS_N, n_test),
    "training": {str(s): training[s] for s in training},
    "quick": args.quick,
  }
  result = {
    "description": "LoCal Nets paper Q1-Q3 on Fashion-MNIST; see experiments/local_calibration.py",
    "settings": {
      **{k: v for k, v in meta.items() if k != "training"},
      "methods": methods,
      "gamma": GAMMA,
      "gamma_informative": GAMMA_INFO,
      "sweep_gammas": SWEEP,
      "local_net": "fit('local_net') defaults (paper / authors' code); KC: fit('kcal') defaults",
      "lce": {
        **LCE_OPTS,
        "mlce": "prior-weighted mean of per-class maxima",
        "features": "PCA-50 of standardised backbone features, fitted on the calibration "
        "split; LCE_own: the method's refined features phi'",
      },
      "ece_ecce": {
        "num_bins": 15,
        "binning": "fixed",
        "class_weights": "training priors",
        "ecce": "mean over non-empty bins",
      },
      "sd": "sample standard deviation over seeds (ddof=1)",
    },
    "summary": summ,
    "summary_gamma_informative": summ2,
    "sweep": sweep,
    "per_seed": {str(s): per_seed[s] for s in per_seed},
    "per_seed_gamma_informative": {str(s): per_seed2[s] for s in per_seed2},
    "per_seed_sweep": {str(s): sweeps[s] for s in sweeps},
    "diagnostics": {str(s): diags[s] for s in diags},
    "training": {str(s): training[s] for s in training},
    "training_gamma_informative": {str(s): training2[s] for s in training2},
    "machine": {
      "platform": platform.platform(),
      "cpu_count": os.cpu_count(),
      "jax_backend": jax.default_backend(),
      "jax": jax.__version__,
      "device": jax.devices()[0].device_kind,
      "load_avg_start": load_start,
      "load_avg_end": list(os.getloadavg()),
    },
    "total_seconds": round(time.perf_counter() - t0, 1),
    "date": time.strftime("%Y-%m-%d"),
  }
  (out / "results.json").write_text(json.dumps(result, indent=1) + "\n")
  md = markdown(summ, summ2, sweep, diags, meta)
  (out / "results.md").write_text(md)
  figure(per_seed, summ, out / "figure.png")
  figure_bandwidth(sweep, diags, out / "figure_bandwidth.png")
  print(md)
  print(f"wrote {out} in {result['total_seconds']}s")
  return result


if __name__ == "__main__":
  main()
