# ---
# jupyter:
#   jaxcal:
#     data:
#     - fashion_mnist
#     - cifar_logits
#     requires:
#     - jaxcal.streaming.Calibration
#     - jaxcal.study.evaluate
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
# # Calibration at scale: streaming during training, a whole study in one call
#
# Two things a study at scale needs that a single metric call does not give:
#
# 1. **Calibration while training.** A streaming state (`jaxcal.streaming`)
#    accumulates the sufficient statistics of the binned errors batch by batch
#    inside the jitted eval step and gives, every epoch, the numbers of
#    the one-shot metrics on the whole test set (to float32 rounding): ECE, the truthful errors
#    (ConfCE_corr with its default quantile bins, from compact per-sample
#    records; LinCE_cw with fixed bins, from fixed-size statistics), proper
#    scores and accuracy. Averaging per-batch ECEs instead is biased.
# 2. **Many models at once.** `jaxcal.evaluate` computes every metric of the
#    12 CIFAR models of `../shared/data/cifar_logits`, for every bin count
#    and thousands of utilities, in one compiled program per class count.
#
# About a minute on 2 CPU cores.

# %%
import time

import jax
import jax.numpy as jnp
import numpy as np

T0 = time.time()
import jaxcal
from jaxcal import metrics, streaming, train, utility
from jaxcal.data import dataset_dir, load_fashion_mnist

# %% [markdown]
# ## 1. A small classifier on Fashion-MNIST, calibration logged every epoch
#
# The eval step is one jitted function: logits of a batch of test images,
# then `state.update(logits, labels, where=mask, from_logits=True)`. The last
# batch is padded to the batch size and its padding masked with `where`, so
# every batch has one shape (one compilation) and the padding counts for
# nothing. `capacity=10_000` keeps the confidence and the correctness of each
# test sample (two numbers a sample) for the quantile-binned truthful error.

# %%
data = load_fashion_mnist()
x_train, y_train = data["train_images"][:20000], data["train_labels"][:20000].astype(np.int32)
x_test, y_test = data["test_images"], data["test_labels"].astype(np.int32)
BATCH = 768
n_test = x_test.shape[0]
n_batches = -(-n_test // BATCH)
pad = n_batches * BATCH - n_test
xb_all = np.concatenate([x_test, np.zeros((pad, 28, 28), x_test.dtype)]).reshape(
  n_batches, BATCH, 28, 28
)
yb_all = np.concatenate([y_test, np.zeros(pad, np.int32)]).reshape(n_batches, BATCH)
mask_all = (np.arange(n_batches * BATCH) < n_test).reshape(n_batches, BATCH)

empty = streaming.Calibration.empty(10, num_bins=15, capacity=n_test)


@jax.jit
def eval_step(model, state, xb, yb, mask):
  logits = model(train.to_float_images(xb))
  return state.update(logits, yb, where=mask, from_logits=True)


@jax.jit
def batch_ece(model, xb, yb):
  """What one is tempted to average over batches: the ECE of one batch alone."""
  p = jax.nn.softmax(model(train.to_float_images(xb)))
  return metrics.conf_ece(p, yb)


history = []


def log_epoch(epoch, model, loss):
  state = empty
  for xb, yb, mb in zip(xb_all, yb_all, mask_all):
    state = eval_step(model, state, xb, yb, mb)
  out = state.compute()
  naive = np.mean([float(batch_ece(model, xb, yb)) for xb, yb in zip(xb_all[:-1], yb_all[:-1])])
  history.append(
    {
      "epoch": epoch,
      **{
        k: float(out[k])
        for k in ("conf_ece", "conf_ce_corr", "classwise_ce_fixed", "accuracy", "brier")
      },
      "mean_batch_ece": naive,
    }
  )
  print(
    f"epoch {epoch}: loss {loss:.3f}  acc {float(out['accuracy']):.4f}  "
    f"ConfECE {float(out['conf_ece']):.4f} (mean of per-batch ECEs {naive:.4f})  "
    f"ConfCE_corr {float(out['conf_ce_corr']):.3e}  LinCE_cw(fixed) {float(out['classwise_ce_fixed']):.3e}"
  )
  return state


model = train.make_model("mlp_s", num_classes=10, seed=0)
result = train.train_classifier(
  model, x_train, y_train, epochs=3, batch_size=256, on_epoch=log_epoch, verbose=False
)

# %% [markdown]
# The streaming numbers are the one-shot numbers on all 10,000 test images, to
# float32 rounding (the state loses nothing: integer counts, compensated sums, records in data
# order), checked here for the final model. The mean of per-batch ECEs is
# larger: with 768 samples a batch, the noise in each bin's average adds to
# every per-batch ECE and does not average out.

# %%
logits_test = train.predict(result.model, x_test)[0]
p_test = jax.nn.softmax(jnp.asarray(logits_test))
last = history[-1]
print(
  f"ConfECE      streaming {last['conf_ece']:.6f}  one-shot {float(metrics.conf_ece(p_test, y_test)):.6f}"
)
print(
  f"ConfCE_corr  streaming {last['conf_ce_corr']:.6e}  one-shot {float(metrics.conf_ce_corr(p_test, y_test)):.6e}"
)
print(
  f"LinCE_cw     streaming {last['classwise_ce_fixed']:.6e}  one-shot "
  f"{float(metrics.classwise_ce(p_test, y_test, 15, 'fixed')):.6e}"
)
print(f"mean of per-batch ECEs {last['mean_batch_ece']:.6f}")

# %% [markdown]
# ## 2. Twelve CIFAR models in one call
#
# Eight CIFAR-10 and four CIFAR-100 models (test logits, n = 10,000 each),
# the truthful and the usual binned errors at 50 bin counts, proper scores,
# and 300 sampled linear utilities per class count. One compiled program per
# class count; the result is a set of named arrays.

# %%
root = dataset_dir("cifar_logits")
names = sorted(p.name for p in root.iterdir() if (p / "test_logits.npy").is_file())
logits = {m: np.load(root / m / "test_logits.npy") for m in names}
labels = {m: np.load(root / m / "test_labels.npy") for m in names}
bins = np.arange(2, 52)
t0 = time.time()
res = jaxcal.evaluate(
  logits,
  labels,
  ["conf_ece", "conf_ce_corr", "classwise_ce", "classification_error", "brier"],
  num_bins=bins,
  utilities={"linear": lambda c: utility.sample_linear(jax.random.key(0), 300, c)},
  from_logits=True,
)
print(f"{len(names)} models in {time.time() - t0:.1f} s; programs: {len(res.info['programs'])}")
print(res.summary(15))

# %% [markdown]
# Each array is model × bin count (or × utility), so questions across models
# and bin counts are array operations. For instance, how much the ranking of
# the 12 models by a top-label error changes between 5 and 50 bins (Spearman
# correlation across models; the binning-robustness study of the truthful
# errors paper, `experiments/binning_robustness.py`, does this properly, with
# bootstrap intervals):

# %%
from jaxcal.dominance import rank_correlation

j5, j50 = list(bins).index(5), list(bins).index(50)
for k in ("conf_ece", "conf_ce_corr"):
  rho = float(rank_correlation(res[k][:, j5], res[k][:, j50]))
  print(f"{k:13s} Spearman(5 bins, 50 bins) = {rho:+.3f}")
rows = res.to_table()
print(len(rows), "rows in the long table; the first:", rows[0])
print(f"notebook: {time.time() - T0:.0f} s")
