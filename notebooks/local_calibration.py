# ---
# jupyter:
#   jaxcal:
#     data:
#     - fashion_mnist
#     requires:
#     - jaxcal.metrics.lce
#     - jaxcal.recalibrate.fit
#     - jaxcal.data.load_fashion_mnist
#     - jaxcal.plots.lce_bandwidth_plot
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
# # Local calibration and LoCal Nets
#
# Companion to *Multiclass Local Calibration with the Jensen-Shannon
# Distance* (Barbera, Perini, De Toni, Passerini & Pugnana 2025,
# arXiv:2510.26566). Calibration on average can hide miscalibration in
# regions of feature space. jaxcal computes the paper's three numbers as its
# authors' code does (which is what the paper's tables report):
#
# * **LCE** (`metrics.lce`): for each class `c`, `p[:, c]` is cut into 15
#   equal-width bins (bins with 20 or fewer samples skipped); every anchor
#   `i` gets `e_ic = |sum_j w_ij (p_jc - 1[y_j = c])|`, a Nadaraya-Watson
#   average over the anchor's bin with Gaussian weights
#   `w_ij ∝ exp(-|phi_i - phi_j|^2 / (2 gamma^2))` in feature space;
#   `LCE = sum_c pi_c mean_i e_ic`.
# * **MLCE** (`lce(...).mlce`): `sum_c pi_c max_i e_ic`, the class-prior
#   weighted mean of each class's *worst* anchor. (`mlce="global"` gives the
#   single largest `e_ic` over all classes instead: a different, much
#   noisier statistic.)
# * **ECCE** (`metrics.ecce`): class-wise cumulative error, each class's
#   sum over bins of `|cumulative residual| / n` divided by its number of
#   non-empty bins, so it stays below the class-wise ECE.
#   (`reduction="sum"` gives the undivided sum of the paper's appendix
#   formula, up to 15x larger.)
#
# A LoCal Net (`recalibrate.fit("local_net", ...)`) recalibrates the logits
# using the features; every default is the paper's (strong initialisation,
# the class-wise Bernoulli JS alignment term, early stopping on the
# validation JS term with patience 10, best weights restored).
#
# Here: a small MLP trained for a few seconds on Fashion-MNIST (pure
# JAX + optax), its penultimate activations as features `phi(x)`, and the
# numbers before and after temperature scaling, Dirichlet calibration and a
# LoCal Net. The paper's 5-seed experiment is
# `experiments/local_calibration.py`; this notebook is one seed of a
# smaller setting, to show the library. About two minutes on a CPU.

# %%
import time

import jax
import jax.numpy as jnp
import numpy as np

T0 = time.time()
import optax

from jaxcal import metrics, plots, recalibrate
from jaxcal.data import load_fashion_mnist

data = load_fashion_mnist()
x_all = data["train_images"].reshape(-1, 784).astype(np.float32) / 255.0 - 0.5
y_all = data["train_labels"].astype(np.int32)
x_train, y_train = jnp.asarray(x_all[:20000]), jnp.asarray(y_all[:20000])  # training
x_cal, y_cal = x_all[50000:55000], y_all[50000:55000]  # calibration split
x_test = data["test_images"].reshape(-1, 784).astype(np.float32)[:3000] / 255.0 - 0.5
y_test = data["test_labels"].astype(np.int32)[:3000]


# %%
def init(key, sizes=(784, 128, 10)):
  ks = jax.random.split(key, len(sizes) - 1)
  return [
    (jax.random.normal(k, (a, b)) * np.sqrt(2 / a), jnp.zeros(b))
    for k, a, b in zip(ks, sizes[:-1], sizes[1:])
  ]


def features(params, x):
  (w, b), _ = params
  return jax.nn.relu(x @ w + b)


def logits(params, x):
  return features(params, x) @ params[1][0] + params[1][1]


def loss(params, x, y):
  return optax.softmax_cross_entropy_with_integer_labels(logits(params, x), y).mean()


opt = optax.adam(1e-3)


@jax.jit
def epoch(params, state, key):
  perm = jax.random.permutation(key, len(x_train))[: (len(x_train) // 250) * 250].reshape(-1, 250)

  def step(carry, idx):
    params, state = carry
    g = jax.grad(loss)(params, x_train[idx], y_train[idx])
    updates, state = opt.update(g, state, params)
    return (optax.apply_updates(params, updates), state), None

  (params, state), _ = jax.lax.scan(step, (params, state), perm)
  return params, state


params = init(jax.random.PRNGKey(0))
state = opt.init(params)
for e in range(8):  # a few epochs: about 85 % test accuracy
  params, state = epoch(params, state, jax.random.PRNGKey(e))
z_cal, z_test = logits(params, x_cal), logits(params, x_test)
phi_cal, phi_test = features(params, x_cal), features(params, x_test)
print("test accuracy:", float((z_test.argmax(1) == y_test).mean()))

# %% [markdown]
# Features for the metric: PCA to 50 dimensions of the standardised
# penultimate activations, fitted on the calibration split (App. D.3 of the
# paper), the same for every method. A LoCal Net also has its own refined
# features `phi'` (`refined_features`), where the authors' code measures
# its LCE; we report both.

# %%
mu, sd = phi_cal.mean(0), phi_cal.std(0) + 1e-6
_, _, vt = np.linalg.svd(np.asarray((phi_cal - mu) / sd), full_matrices=False)
proj = lambda phi: np.asarray((phi - mu) / sd) @ vt[:50].T
feat_test = proj(phi_test)

preds = {"uncalibrated": jax.nn.softmax(z_test, axis=-1)}
preds["temperature"] = recalibrate.fit("temperature", z_cal, y_cal)(z_test)
preds["Dirichlet"] = recalibrate.fit("dirichlet", z_cal, y_cal)(z_test)
ln = recalibrate.fit("local_net", z_cal, y_cal, features=phi_cal, verbose=False)
preds["LoCal Net"] = ln(z_test, features=phi_test)
ln_own = np.asarray(ln.refined_features(z_test, phi_test))
print(
  f"LoCal Net: {ln.epochs_run} epochs, best epoch {ln.best_epoch}, "
  f"stopped early: {ln.stopped_early}"
)

table = {}
for name, p in preds.items():
  loc = metrics.lce(p, y_test, feat_test, num_bins=15, min_bin_size=20, bandwidth=10.0)
  table[name] = {
    "LCE": float(loc.lce),
    "MLCE": float(loc.mlce),
    "ECCE": float(metrics.ecce(p, y_test)),
    "CW-ECE": float(metrics.classwise_ece(p, y_test)),
    "ConfECE": float(metrics.conf_ece(p, y_test)),
    "accuracy": float((p.argmax(-1) == y_test).mean()),
    "mean conf.": float(p.max(-1).mean()),
  }
own = metrics.lce(preds["LoCal Net"], y_test, ln_own, bandwidth=10.0)
table["LoCal Net"] |= {"LCE on phi'": float(own.lce), "MLCE on phi'": float(own.mlce)}
cols = ["LCE", "MLCE", "ECCE", "CW-ECE", "ConfECE", "accuracy", "mean conf."]
cols += ["LCE on phi'", "MLCE on phi'"]
print(f"{'':14s}" + "".join(f"{c:>13s}" for c in cols))
for name, row in table.items():
  print(f"{name:14s}" + "".join(f"{row[c]:13.4f}" if c in row else f"{'-':>13s}" for c in cols))
best = min(table, key=lambda k: table[k]["LCE"])
print(f"lowest LCE on the PCA features (gamma = 10): {best}")

# %% [markdown]
# Reading the table (one seed; the numbers are those printed above).
#
# * ECCE is below the class-wise ECE for every method, as in the paper's
#   tables: it is a mean over bins, not a sum.
# * At `gamma = 10` on these PCA features the kernel is nearly flat within a
#   bin (the sweep below: LCE barely changes from `gamma = 10` to `20`), so
#   LCE ranks the methods as the class-wise ECE does. Dirichlet calibration
#   has the lowest LCE.
# * The LoCal Net, at the paper's defaults, does not lower LCE here: its LCE
#   is above the uncalibrated model's, and it is underconfident (mean
#   confidence about 5 points below its accuracy, hence its large ConfECE),
#   although it has the lowest MLCE and a higher accuracy than the backbone. Its
#   validation JS term was still falling at epoch 100 (no early stop), with
#   4,500 training points from a small 8-epoch MLP. Its LCE on its own
#   features `phi'` is not comparable with the others: LCE depends on the
#   features it is measured on.
#
# The paper's Q1 claim, that LoCal Nets have the lowest LCE, is *not* what
# jaxcal's full 5-seed run finds on the PCA features either
# (`experiments/results/local_calibration`: Dirichlet 0.0030 vs LoCal Net
# 0.0073); on each method's own refined features, as the authors' code
# measures it, the LoCal Net is lowest (0.0097, against 0.0099 for K-Cal).
#
# ## How local is "local": LCE against the bandwidth
#
# A large bandwidth averages over a whole bin and LCE levels off at a value
# close to, but not equal to, the class-wise binned ECE (dotted lines; LCE
# skips bins of 20 or fewer samples and averages over the anchors it keeps);
# a small one looks at a few neighbours and grows towards per-sample noise.
# The dashed line is the LCE of a predictor calibrated by construction (the
# temperature-scaled probabilities, with labels drawn from them): sampling
# noise alone. A method is locally miscalibrated at a bandwidth only where
# it lies clearly above that floor. In this run every method is within 20 %
# of the floor at `gamma <= 2.5`, where sampling noise dominates; from
# `gamma = 5` on, the uncalibrated model and the LoCal Net lie clearly above
# it and Dirichlet calibration below it.

# %%
gammas = np.array([1.0, 2.5, 5.0, 10.0, 20.0])
sweep = {
  name: [float(metrics.lce(preds[name], y_test, feat_test, bandwidth=g).lce) for g in gammas]
  for name in ("uncalibrated", "Dirichlet", "LoCal Net")
}
p_ts = preds["temperature"]
y_star = jax.random.categorical(jax.random.PRNGKey(7), jnp.log(p_ts))  # labels drawn from p_ts
floor = [float(metrics.lce(p_ts, y_star, feat_test, bandwidth=g).lce) for g in gammas]
fig = plots.lce_bandwidth_plot(
  gammas,
  sweep,
  floor=floor,
  reference={name: table[name]["CW-ECE"] for name in sweep},
  features="PCA-50 of phi(x)",
  model="Fashion-MNIST MLP",
  n=len(y_test),
)

# %%
for name, v in sweep.items():
  print(f"{name:14s} " + "  ".join(f"g={g:g}: {x:.4f}" for g, x in zip(gammas, v)))
print("calibrated     " + "  ".join(f"g={g:g}: {x:.4f}" for g, x in zip(gammas, floor)))
print(f"notebook ran in {time.time() - T0:.1f} s")
