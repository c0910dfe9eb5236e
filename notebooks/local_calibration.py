# ---
# jupyter:
#   jaxcal:
#     data:
#     - fashion_mnist
#     requires:
#     - jaxcal.metrics.lce
#     - jaxcal.recalibrate.fit
#     - jaxcal.data.load_fashion_mnist
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
# Companion to *local calibration via Jensen-Shannon* (Barbera, Perini,
# De Toni, Passerini & Pugnana 2025, arXiv:2510.26566). Calibration on average
# can hide miscalibration in regions of feature space. The local
# calibration error LCE averages, for each anchor, the kernel-weighted
# residual of its neighbours in the same probability bin (Nadaraya-Watson
# in feature space); MLCE is the worst anchor. A LoCal Net recalibrates
# using the features.
#
# Here: a small MLP trained for a few seconds on Fashion-MNIST (pure
# JAX + optax), its penultimate activations as features `phi(x)` (PCA to
# 50 dims of the standardised features, fitted on the calibration split),
# and LCE / MLCE, ECCE and class-wise ECE before and after temperature
# scaling and a LoCal Net. Test anchors are subsampled to keep it to about
# a minute on a CPU.

# %%
import time

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

T0 = time.time()
import optax

from jaxcal import metrics, recalibrate
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
# penultimate activations, fitted on the calibration split (§7 of the paper).

# %%
mu, sd = phi_cal.mean(0), phi_cal.std(0) + 1e-6
_, _, vt = np.linalg.svd(np.asarray((phi_cal - mu) / sd), full_matrices=False)
proj = lambda phi: np.asarray((phi - mu) / sd) @ vt[:50].T
feat_test = proj(phi_test)

preds = {"uncalibrated": jax.nn.softmax(z_test, axis=-1)}
preds["temperature"] = recalibrate.fit("temperature", z_cal, y_cal)(z_test)
ln = recalibrate.fit("local_net", z_cal, y_cal, features=phi_cal, epochs=30, verbose=False)
preds["LoCal Net"] = ln(z_test, features=phi_test)

print(f"{'':14s} {'LCE':>8s} {'MLCE':>8s} {'ECCE':>8s} {'CW-ECE':>8s} {'ConfECE':>8s}")
for name, p in preds.items():
  loc = metrics.lce(p, y_test, feat_test, num_bins=15, min_bin_size=20, bandwidth=10.0)
  print(
    f"{name:14s} {float(loc.lce):8.4f} {float(loc.mlce):8.4f} {float(metrics.ecce(p, y_test)):8.4f} "
    f"{float(metrics.classwise_ece(p, y_test)):8.4f} {float(metrics.conf_ece(p, y_test)):8.4f}"
  )

# %% [markdown]
# The kernel bandwidth sets how local "local" is: a large bandwidth averages
# over a whole bin and LCE approaches the class-wise binned error; a small
# one looks at a few neighbours and grows towards the per-sample noise.

# %%
gammas = [1.0, 3.0, 10.0, 30.0]
fig, ax = plt.subplots(figsize=(5.5, 3.6), constrained_layout=True)
for name in ("uncalibrated", "LoCal Net"):
  p = preds[name]
  ax.plot(
    gammas,
    [float(metrics.lce(p, y_test, feat_test, bandwidth=g).lce) for g in gammas],
    "o-",
    label=name,
  )
ax.set_xscale("log")
ax.set_xlabel("bandwidth gamma")
ax.set_ylabel("LCE")
ax.legend()
plt.show()
print(f"notebook ran in {time.time() - T0:.1f} s")
