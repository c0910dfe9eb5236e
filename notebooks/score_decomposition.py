# ---
# jupyter:
#   jaxcal:
#     data:
#     - cifar_logits
#     requires:
#     - jaxcal.scores.decompose
#     - jaxcal.recalibrate.fit
#     - jaxcal.plots.mcb_dsc_plot
#   jupytext:
#     cell_metadata_filter: -all
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
# # Score decompositions: miscalibration, discrimination, uncertainty
#
# Companion to the score decomposition case study
# (Resin 2025, arXiv:2501.19195, §2-3). A proper
# score splits as `S = MCB - DSC + UNC`: miscalibration (what an in-sample
# isotonic recalibration removes), discrimination (what is left over the
# climatological forecast) and uncertainty. Here: the classwise (CW,
# CORP) decomposition of the Brier score, averaged over classes and x100
# as in the paper, for a CIFAR-10 and a CIFAR-100 model before and after
# several recalibrators fitted on the validation split. About a minute on a
# CPU.

# %%
import time

import jax
import jax.numpy as jnp

T0 = time.time()
from jaxcal import plots, recalibrate, scores
from jaxcal.data import dataset_dir, load_predictions

# The CIFAR logits: $JAXCAL_DATA/cifar_logits, else ../shared/data beside the checkout.
CIFAR = dataset_dir("cifar_logits")

METHODS = {  # name -> (recalibrate.fit method, options); None = uncalibrated
  "uncalibrated": None,
  "TS": ("temperature", {}),
  "HB-CW": ("histogram", {"normalize": False}),
  "HB-N": ("histogram", {"normalize": True}),
  "IR-CW": ("isotonic", {"normalize": False}),
  "IR-N": ("isotonic", {"normalize": True}),
  "SIR-CW": ("smooth_isotonic", {"normalize": False}),
  "SIR-N": ("smooth_isotonic", {"normalize": True}),
}
rows, sizes = {}, {}
for setting in ("cifar10_resnet110", "cifar100_resnet110"):
  val_logits, val_labels = load_predictions(CIFAR / setting, split="val")
  test_logits, test_labels = load_predictions(CIFAR / setting, split="test")
  sizes[setting] = len(test_labels)
  for name, spec in METHODS.items():
    if spec is None:
      p = jax.nn.softmax(jnp.asarray(test_logits), axis=-1)
    else:
      p = recalibrate.fit(spec[0], val_logits, val_labels, **spec[1])(test_logits)
    simplex = not name.endswith("-CW")  # CW recalibrators do not normalise their rows
    rows[(setting, name)] = [
      100 * float(v)
      for v in scores.decompose(
        p, test_labels, score="brier", mode="classwise", require_simplex=simplex
      )
    ]
    if name.startswith("HB"):  # the normalized decomposition, paper App. A
      rows[(setting, name + " (N dec.)")] = [
        100 * float(v)
        for v in scores.decompose(
          p, test_labels, score="brier", mode="normalized", require_simplex=simplex
        )
      ]
print(f"{'setting':20s} {'method':15s} {'Brier':>7s} {'MCB':>7s} {'DSC':>7s} {'UNC':>7s}")
for (setting, name), (s, mcb, dsc, unc) in rows.items():
  print(f"{setting:20s} {name:15s} {s:7.3f} {mcb:7.3f} {dsc:7.3f} {unc:7.3f}")

# %% [markdown]
# All rows use the class-wise (CORP) decomposition of the paper's Table 1;
# the two `(N dec.)` rows use the normalized decomposition (App. A), which
# charges CW-HB's rows that do not sum to one as miscalibration. `UNC`
# depends only on the labels (9 on balanced CIFAR-10, 0.99 on CIFAR-100,
# as in the paper). Histogram binning buys its low MCB with a large loss of
# discrimination (DSC); smoothed isotonic regression keeps DSC. The
# MCB-DSC plane (`plots.mcb_dsc_plot`) shows the trade-off: grey lines join
# forecasts with the same Brier score (labelled `S`), better forecasts lie up
# and to the left.

# %%
for setting in ("cifar10_resnet110", "cifar100_resnet110"):
  pts = {name: rows[(setting, name)][1:3] for name in METHODS}  # (MCB, DSC), class-wise
  unc = rows[(setting, "uncalibrated")][3]
  plots.mcb_dsc_plot(
    pts,
    unc,
    title=f"MCB-DSC, class-wise Brier decomposition ×100 — {setting} (n = {sizes[setting]:,})",
  )

# %%
print(f"notebook ran in {time.time() - T0:.1f} s")
