# ---
# jupyter:
#   jaxcal:
#     requires:
#     - jaxcal.report.calibration_report
#     - jaxcal.bootstrap.bootstrap
#     - jaxcal.plots.interval_plot
#     - jaxcal.recalibrate.fit
#   jupytext:
#     cell_metadata_filter: -all
#     formats: ipynb,py:percent
#     notebook_metadata_filter: kernelspec,jaxcal,-jupytext.text_representation.jupytext_version
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Start here: calibration of your own model
#
# This notebook uses only the public API of jaxcal on one set of
# predictions: load them, read the calibration report with bootstrap
# intervals, compare recalibrators fitted on a calibration split, and draw
# the figures a paper needs. It runs on the predictions embedded in jaxcal
# (a CIFAR-10 ResNet-110); point `PATH` at your own file to use yours.
#
# **Your predictions.** A `.npz` file with `logits` (or `probs`) and
# `labels`, optionally one pair per split (`val_logits`, `test_logits`, ...),
# or a folder of `.npy` files; see `jaxcal.data.load_predictions`. The
# calibration split (`val`) fits recalibrators, the evaluation split
# (`test`) measures them. The same file works on the command line:
# `python -m jaxcal report PATH`.

# %%
import time

import jax
import numpy as np

from jaxcal import bootstrap, data, metrics, plots, recalibrate, report, scores

T0 = time.time()
PATH = data.DEFAULT_PREDICTIONS  # your own file or folder here
x_val, y_val = data.load_predictions(PATH, "val")
x_test, y_test = data.load_predictions(PATH, "test")
print(f"calibration split: {x_val.shape}, evaluation split: {x_test.shape}")

# %% [markdown]
# ## 1. The report
#
# `report.calibration_report` computes the headline metrics with 95 %
# percentile bootstrap intervals (one compiled call over the resamples),
# each error against the bin count, utility calibration over sampled
# utilities and the Brier decomposition. Names are the papers' (with binning
# and bin count, e.g. `ConfECE(fix;15)`), the same in the JSON, the
# terminal and the figures; `*` marks the truthful errors.

# %%
rep = report.calibration_report(
  x_test,
  y_test,
  num_utilities=100,
  resamples=100,
  robustness_resamples=10,
  source="ResNet-110 (CIFAR-10 test)",
)
print(report.format_summary(rep))

# %% [markdown]
# **Reading the bin-count figure.** One model's errors change with the bin
# count `m`: the ℓ1 errors (left) grow with `m` (more bins, fewer samples per
# bin, more noise), the squared errors (right) fall as finer bins average
# less of the miscalibration, toward the value a calibrated predictor with
# these probabilities would have (dashed: Lemma D.1 of the truthful paper).
# The papers' robustness claim is about the *ranking of models* staying the
# same across `m`; `report.compare_report` (or `jaxcal report` on a folder
# of models) measures it.

# %%
rob = rep["robustness"]
fig = plots.bin_robustness_plot(
  rob["num_bins"],
  {k: v["estimate"] for k, v in rob["curves"].items()},
  bands={k: (v["lo"], v["hi"]) for k, v in rob["curves"].items()},
  reference=rob["calibrated_value"],
  model="ResNet-110",
  n=rep["input"]["n"],
)


# %% [markdown]
# ## 2. Reliability diagram with consistency bands
#
# The bars are the accuracy in each confidence bin. The vertical bands show
# where a *calibrated* predictor with these confidences would put them 90 %
# of the time (labels redrawn from the predicted probabilities; Bröcker &
# Smith 2007): a bar outside its band is miscalibration, not noise.

# %%
probs_test = jax.nn.softmax(x_test, axis=-1)
bands = bootstrap.consistency_bands(jax.random.key(0), probs_test, 15, num_resamples=300)
fig = plots.reliability_diagram(probs_test, y_test, 15, bands=bands, model="ResNet-110")
fig  # noqa: B018


# %% [markdown]
# ## 3. Compare recalibrators, with intervals
#
# Each method is fitted on the calibration split and evaluated on the test
# split. `bootstrap.bootstrap` resamples the test samples once for all
# methods (a paired bootstrap: the methods' probabilities are stacked and
# share the index sets), so the intervals are comparable.

# %%
methods = ["temperature", "vector", "histogram", "isotonic"]
calibrated = {"uncalibrated": probs_test}
for name in methods:
  rc = recalibrate.fit(name, x_val, y_val)
  calibrated[name] = rc(x_test)
stacked = np.stack([np.asarray(p) for p in calibrated.values()])  # (methods, n, C)


def headline(p, y):
  per_method = lambda q: {
    "ConfECE(fix;15)": metrics.conf_ece(q, y),
    "LinCE_cw(qua;15)": metrics.classwise_ce(q, y),
    "NLL": scores.log_loss(q, y),
  }
  return jax.vmap(per_method)(p)


res = bootstrap.bootstrap(
  jax.random.key(1), headline, stacked, y_test, num_resamples=200, sample_axis=(1, 0)
)
for metric in res.estimate:
  print(metric)
  for i, name in enumerate(calibrated):
    est, lo, hi = (float(a[metric][i]) for a in (res.estimate, res.lo, res.hi))
    print(f"  {name:14s} {report.format_interval(est, lo, hi)}")

# %%
metric = "ConfECE(fix;15)"
rows = {
  name: (float(res.estimate[metric][i]), float(res.lo[metric][i]), float(res.hi[metric][i]))
  for i, name in enumerate(calibrated)
}
fig = plots.interval_plot(rows, metric=metric, model="ResNet-110", n=len(y_test))
fig  # noqa: B018


# %% [markdown]
# Note how the measures disagree: histogram binning has the smallest
# ConfECE but the largest truthful LinCE_cw and NLL. ConfECE is not
# truthful; it rewards the coarse, piecewise-constant probabilities of
# histogram binning (Lu, Wu, Hartline & Hu 2025, arXiv:2510.06388, §3).
#
# **Which interval.** The percentile interval (the default) is read off the
# resamples. For ℓ1 errors such as ConfECE the resamples sit *above* the
# estimate (the estimator is biased upward, more so on a resample), so the
# symmetric `estimate ± 1.96 sd` (`method="normal"`, what the truthful
# papers report) is misplaced; an interval describes the spread of the
# estimate, not its bias. See `jaxcal.bootstrap` and
# `experiments/bootstrap_coverage.py`.
#
# ## 4. Figures for a paper
#
# Every figure of `jaxcal.plots` shares one style and names its model and
# `n`; `plots.savefig(fig, "name", ("png", "pdf"))` writes a raster and a
# vector version side by side. `report.write_report(rep, x, y, folder)`
# writes `report.json` and all figures of the report.

# %%
print(f"notebook ran in {time.time() - T0:.1f} s")
