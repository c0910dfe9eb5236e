"""Checkpoint traces on Fashion-MNIST for the binning-robustness study.

Protocol (after Lu, Wu, Hartline & Hu 2025, arXiv:2510.06388, §5.1 and App. F, scaled
down to run on a 2-core CPU in about ten minutes):

* Data: the official 60,000 training images are the training pool; the
  official 10,000 test images are split deterministically (numpy seed 42) into
  5,000 ``val`` images (for temperature scaling only) and 5,000 ``test``
  images (for every reported number).
* Subsets: one fixed permutation of the training pool (seed 42); a subset of
  fraction f is its first ``round(f * 60000)`` images, so subsets are nested.
* Training: Adam (lr 1e-3), batch 128, softmax cross-entropy, no augmentation,
  inputs scaled to [-0.5, 0.5]. Trace ``t`` of a set uses seed ``t`` for the
  initialisation and batch order. After *every* epoch the checkpoint's logits
  on ``val`` and ``test`` are stored (no temperature scaling is applied here:
  the consumer fits T on ``val`` per checkpoint).
* **within-model** set: architecture ``mlp`` (784-256-10 MLP), 21 traces at
  fractions 2.5 %, 5 %, 10 %, 15 %, ..., 95 %, 100 %, 8 epochs each
  (168 checkpoints). (The paper: MobileNetV3 on CIFAR-100, 40 traces, 100 epochs.)
* **cross-model** set: architectures ``mlp_s`` (784-64-10), ``mlp_2x``
  (784-256-128-10) and ``cnn_xs`` (two stride-2 3x3 convolutions with 8 and 16
  channels, dense 32) at fractions 20 %, 40 %, 60 %, 80 %, 100 %, 5 epochs each
  (75 checkpoints). (The paper: nine architectures, the same five fractions.)

Output format (``experiments/cache/fmnist_traces/``, gitignored; rerun with
``python experiments/fashion_mnist/traces.py``, about 10 minutes on 2 cores):

* ``splits.npz``: ``val_index``, ``test_index`` (int64, indices into the official
  test split), ``val_labels``, ``test_labels`` (int64, (5000,)),
  ``train_order`` (int64, (60000,), the subset permutation).
* ``within/<arch>_f<fraction:.3f>.npz`` and ``cross/<arch>_f<fraction:.3f>.npz``,
  one file per trace, each holding
  ``val_logits`` float32 ``(E, 5000, 10)`` and ``test_logits`` float32
  ``(E, 5000, 10)`` (row ``e`` = the checkpoint after epoch ``e + 1``),
  ``val_labels``/``test_labels`` int64 ``(5000,)`` (copies of splits.npz),
  ``epochs`` int64 ``(E,)`` (1..E), ``train_loss`` float64 ``(E,)``,
  ``train_size`` (int), ``fraction`` (float), ``arch`` (str), ``seed`` (int),
  ``seconds`` (training wall time). All arrays load with
  ``np.load(path, allow_pickle=False)``.
* ``manifest.json``: the settings above, one entry per trace (set, file, arch,
  fraction, train_size, epochs, seed, final test accuracy, seconds), the
  machine and the total time.

Usage:
  python experiments/fashion_mnist/traces.py [--out DIR] [--sets within cross]
      [--quick]   # 3 tiny traces, for a smoke test
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

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from jaxcal.data import load_fashion_mnist
from jaxcal.train import make_model, predict, trace_splits, train_classifier

WITHIN_ARCH = "mlp"
WITHIN_FRACTIONS = [0.025, 0.05] + [round(0.05 * k, 3) for k in range(2, 21)]
WITHIN_EPOCHS = 8
CROSS_ARCHS = ["mlp_s", "mlp_2x", "cnn_xs"]
CROSS_FRACTIONS = [0.2, 0.4, 0.6, 0.8, 1.0]
CROSS_EPOCHS = 5
BATCH_SIZE = 128
LEARNING_RATE = 1e-3


def run_trace(data, splits, arch, fraction, epochs, seed, path):
  order = splits["train_order"]
  k = int(round(fraction * order.size))
  idx = np.sort(order[:k])
  x, y = data["train_images"][idx], data["train_labels"][idx].astype(np.int32)
  xv = data["test_images"][splits["val"]]
  xt = data["test_images"][splits["test"]]
  val_logits, test_logits = [], []

  def on_epoch(e, model, loss):
    val_logits.append(predict(model, xv)[0])
    test_logits.append(predict(model, xt)[0])

  print(f"[trace] {path.parent.name}/{path.name}: {arch}, {k} images, {epochs} epochs", flush=True)
  res = train_classifier(
    make_model(arch, 10, seed),
    x,
    y,
    epochs=epochs,
    batch_size=BATCH_SIZE,
    learning_rate=LEARNING_RATE,
    seed=seed,
    on_epoch=on_epoch,
    verbose=False,
  )
  yv = data["test_labels"][splits["val"]].astype(np.int64)
  yt = data["test_labels"][splits["test"]].astype(np.int64)
  tl = np.stack(test_logits)
  acc = float((tl[-1].argmax(1) == yt).mean())
  tmp = path.with_suffix(".tmp.npz")
  np.savez(
    tmp,
    val_logits=np.stack(val_logits),
    test_logits=tl,
    val_labels=yv,
    test_labels=yt,
    epochs=np.arange(1, epochs + 1, dtype=np.int64),
    train_loss=res.train_loss.astype(np.float64),
    train_size=np.int64(k),
    fraction=np.float64(fraction),
    arch=np.array(arch),
    seed=np.int64(seed),
    seconds=np.float64(res.seconds),
  )
  os.replace(tmp, path)
  print(f"         test acc {acc:.4f} after {epochs} epochs, {res.seconds:.1f}s", flush=True)
  return {
    "file": str(path.relative_to(path.parents[1])),
    "arch": arch,
    "fraction": fraction,
    "train_size": k,
    "epochs": epochs,
    "seed": seed,
    "final_test_accuracy": acc,
    "seconds": round(res.seconds, 2),
  }


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--out", default=str(ROOT / "experiments" / "cache" / "fmnist_traces"))
  ap.add_argument("--sets", nargs="+", default=["within", "cross"], choices=["within", "cross"])
  ap.add_argument("--quick", action="store_true", help="3 tiny traces (smoke test)")
  ap.add_argument("--root", default=None, help="Fashion-MNIST folder")
  args = ap.parse_args(argv)
  out = pathlib.Path(args.out)
  t0 = time.perf_counter()
  data = load_fashion_mnist(args.root)
  sp = trace_splits(data["train_images"].shape[0], data["test_images"].shape[0], seed=42)
  out.mkdir(parents=True, exist_ok=True)
  np.savez(
    out / "splits.npz",
    val_index=sp["val"].astype(np.int64),
    test_index=sp["test"].astype(np.int64),
    val_labels=data["test_labels"][sp["val"]].astype(np.int64),
    test_labels=data["test_labels"][sp["test"]].astype(np.int64),
    train_order=sp["train_order"].astype(np.int64),
  )
  plan = []
  if "within" in args.sets:
    fr = [0.025, 0.05, 0.1] if args.quick else WITHIN_FRACTIONS
    ep = 2 if args.quick else WITHIN_EPOCHS
    plan += [("within", WITHIN_ARCH, f, ep) for f in fr]
  if "cross" in args.sets:
    archs = CROSS_ARCHS[:1] if args.quick else CROSS_ARCHS
    fr = [0.05] if args.quick else CROSS_FRACTIONS
    ep = 2 if args.quick else CROSS_EPOCHS
    plan += [("cross", a, f, ep) for a in archs for f in fr]
  entries = []
  seeds: dict[str, int] = {}
  for set_name, arch, frac, ep in plan:
    (out / set_name).mkdir(exist_ok=True)
    seed = seeds.get(set_name, 0)
    seeds[set_name] = seed + 1
    e = run_trace(data, sp, arch, frac, ep, seed, out / set_name / f"{arch}_f{frac:.3f}.npz")
    entries.append({"set": set_name, **e})
  manifest = {
    "description": "Fashion-MNIST checkpoint traces; format in experiments/fashion_mnist/traces.py",
    "protocol": {
      "val_test_split_seed": 42,
      "n_val": int(sp["val"].size),
      "n_test": int(sp["test"].size),
      "batch_size": BATCH_SIZE,
      "learning_rate": LEARNING_RATE,
      "optimizer": "adam",
      "quick": bool(args.quick),
    },
    "traces": entries,
    "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count(), "device": "cpu"},
    "total_seconds": round(time.perf_counter() - t0, 1),
    "date": time.strftime("%Y-%m-%d"),
  }
  (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
  print(f"wrote {len(entries)} traces to {out} in {manifest['total_seconds']}s")


if __name__ == "__main__":
  main()
