"""Trains the Fashion-MNIST backbone of the local-calibration experiment and
saves its logits and penultimate features for the calibration and test splits.

Split protocol (Barbera et al. 2025, arXiv:2510.26566, §8.1, as for CIFAR there):
the official 60,000 training images are split (numpy seed = ``--seed``) into
45 % train (27,000), 10 % validation (6,000) and 45 % test (27,000); the
official 10,000 test images are the calibration set (the recalibrators split
it again 90 % / 10 %). Every seed gives a different split and a different
network, as in the paper's five repetitions.

Backbone: ``cnn_s`` of :mod:`jaxcal.train` -- two stride-2 3x3
convolutions (8, 16 channels), a 128-unit dense layer (the penultimate
features ``phi(x)``), a linear head, no batch norm -- trained with Adam
(lr 1e-3, batch 128) for a fixed ``--epochs`` (default 25) and the last
epoch kept, as the paper fine-tunes its backbones for a fixed number of
epochs (App. D.1); the validation split only records the NLL per epoch
(``--select-best`` keeps the epoch with the lowest validation NLL instead).
At 25 epochs the network is overconfident like the paper's backbones
(seed 0: validation NLL 0.35 against 0.29 after temperature scaling,
T = 1.8, accuracy 0.90); the best-NLL epoch of a 6-epoch run is already
calibrated (class-wise ECE 0.005) and leaves nothing to recalibrate.
About 4 minutes per seed on 2 busy CPU cores. Deterministic given the seed.

Outputs:

* ``experiments/cache/fashion_mnist/backbone_seed<S>.npz`` (gitignored):
  ``cal_logits`` (10000, 10) float32, ``cal_features`` (10000, 128) float32,
  ``cal_labels`` (10000,) int64, ``test_logits`` (27000, 10) float32,
  ``test_features`` (27000, 128) float32, ``test_labels`` (27000,) int64,
  ``test_index`` (indices into the official training set),
  ``train_class_counts`` (10,) int64 (for the class priors pi),
  ``val_nll``/``val_accuracy`` per epoch, ``best_epoch`` (the epoch kept),
  ``seed``, ``seconds``, ``arch``.
* with ``--compact``: ``experiments/results/fashion_mnist/backbone_seed<S>.npz``,
  the same keys with features stored as float16 (compressed), small enough to
  commit; the experiment reads the cache first, then this copy.

Usage:
  python experiments/fashion_mnist/train_backbone.py --seeds 0 1 2 3 4 [--epochs 25] [--compact]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from jaxcal.data import load_fashion_mnist
from jaxcal.train import local_calibration_splits, make_model, predict, train_classifier

ARCH = "cnn_s"
EPOCHS = 25
CACHE = ROOT / "experiments" / "cache" / "fashion_mnist"
COMPACT = ROOT / "experiments" / "results" / "fashion_mnist"


def _nll(logits: np.ndarray, y: np.ndarray) -> float:
  z = logits.astype(np.float64)
  z = z - z.max(1, keepdims=True)
  lse = np.log(np.exp(z).sum(1))
  return float(np.mean(lse - z[np.arange(len(y)), y]))


def cache_path(seed: int) -> pathlib.Path:
  return CACHE / f"backbone_seed{seed}.npz"


def compact_path(seed: int) -> pathlib.Path:
  return COMPACT / f"backbone_seed{seed}.npz"


def train_one(
  data: dict, seed: int, epochs: int = EPOCHS, verbose: bool = True, select_best: bool = False
) -> dict:
  sp = local_calibration_splits(data["train_images"].shape[0], seed)
  xtr, ytr = data["train_images"][sp["train"]], data["train_labels"][sp["train"]].astype(np.int32)
  xva, yva = data["train_images"][sp["val"]], data["train_labels"][sp["val"]].astype(np.int64)
  from flax import nnx

  best = {"nll": np.inf, "epoch": 0, "state": None}
  val_nll, val_acc = [], []

  def on_epoch(e, model, loss):
    lo, _ = predict(model, xva)
    nll = _nll(lo, yva)
    val_nll.append(nll)
    val_acc.append(float((lo.argmax(1) == yva).mean()))
    if verbose:
      print(f"    val nll {nll:.4f}  acc {val_acc[-1]:.4f}", flush=True)
    if nll < best["nll"] or not select_best:
      best.update(nll=nll, epoch=e, state=nnx.state(model, nnx.Param))

  print(f"[backbone seed {seed}] {ARCH} on {len(ytr)} images, {epochs} epochs", flush=True)
  model = make_model(ARCH, 10, seed)
  res = train_classifier(
    model,
    xtr,
    ytr,
    epochs=epochs,
    batch_size=128,
    learning_rate=1e-3,
    seed=seed,
    on_epoch=on_epoch,
    verbose=verbose,
  )
  model = res.model
  nnx.update(model, best["state"])
  cal_logits, cal_feat = predict(model, data["test_images"], with_features=True)
  te_logits, te_feat = predict(model, data["train_images"][sp["test"]], with_features=True)
  out = {
    "cal_logits": cal_logits,
    "cal_features": cal_feat,
    "cal_labels": data["test_labels"].astype(np.int64),
    "test_logits": te_logits,
    "test_features": te_feat,
    "test_labels": data["train_labels"][sp["test"]].astype(np.int64),
    "test_index": sp["test"].astype(np.int64),
    "train_class_counts": np.bincount(ytr, minlength=10).astype(np.int64),
    "val_nll": np.asarray(val_nll),
    "val_accuracy": np.asarray(val_acc),
    "best_epoch": np.int64(best["epoch"]),
    "seed": np.int64(seed),
    "seconds": np.float64(res.seconds),
    "arch": np.array(ARCH),
  }
  acc = float((te_logits.argmax(1) == out["test_labels"]).mean())
  print(
    f"[backbone seed {seed}] kept epoch {best['epoch']}, test accuracy {acc:.4f}, "
    f"{res.seconds:.1f}s",
    flush=True,
  )
  return out


def save(out: dict, seed: int, compact: bool) -> None:
  CACHE.mkdir(parents=True, exist_ok=True)
  tmp = cache_path(seed).with_suffix(".tmp.npz")
  np.savez(tmp, **out)
  os.replace(tmp, cache_path(seed))
  if compact:
    COMPACT.mkdir(parents=True, exist_ok=True)
    small = dict(out)
    small["cal_features"] = out["cal_features"].astype(np.float16)
    small["test_features"] = out["test_features"].astype(np.float16)
    np.savez_compressed(compact_path(seed), **small)


def load_backbone(seed: int, epochs: int = EPOCHS, train_if_missing: bool = True) -> dict:
  """The cached outputs of seed ``seed`` (cache, else compact copy, else train)."""
  for p in (cache_path(seed), compact_path(seed)):
    if p.is_file():
      with np.load(p, allow_pickle=False) as z:
        d = {k: z[k] for k in z.files}
      d["cal_features"] = d["cal_features"].astype(np.float32)
      d["test_features"] = d["test_features"].astype(np.float32)
      return d
  if not train_if_missing:
    raise FileNotFoundError(f"no backbone outputs for seed {seed}: run {__file__} --seeds {seed}")
  out = train_one(load_fashion_mnist(), seed, epochs)
  save(out, seed, compact=False)
  return out


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--seeds", type=int, nargs="+", default=[0])
  ap.add_argument("--epochs", type=int, default=EPOCHS)
  ap.add_argument(
    "--select-best",
    action="store_true",
    help="keep the epoch with the lowest validation NLL (default: the last)",
  )
  ap.add_argument("--compact", action="store_true", help="also write the committed compact copy")
  ap.add_argument("--root", default=None, help="Fashion-MNIST folder")
  args = ap.parse_args(argv)
  data = load_fashion_mnist(args.root)
  for s in args.seeds:
    t = time.perf_counter()
    save(train_one(data, s, args.epochs, select_best=args.select_best), s, args.compact)
    print(f"[backbone seed {s}] saved {cache_path(s)} ({time.perf_counter() - t:.1f}s)", flush=True)


if __name__ == "__main__":
  main()
