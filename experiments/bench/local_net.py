"""Benchmark: LoCal Net training time and blockwise LCE.

* ``local_net_fit``: ``fit("local_net", ...)`` for exactly 30 epochs (no early
  stopping) on 10,000 calibration points (9,000 train / 1,000 validation),
  128-d backbone features, 10 classes, the paper's CIFAR-10 settings (hidden
  64, dropout 0.3, batch 1024, gamma 10). Real Fashion-MNIST backbone outputs
  (seed 0) when cached or committed, else synthetic arrays of the same shapes.
  ``first_s`` includes compilation; target: under a minute on 2 CPU cores.
* ``lce``: ``jaxcal.metrics.lce`` on n anchors (10 classes, 50-d features,
  peaked softmax predictions, so ~90 % of each class's points share one bin)
  for n = 5,000, 20,000 and 50,000; at n = 5,000 it is compared with a dense
  reference that materialises the per-class ``n x n`` masked kernel (the
  blockwise code never holds more than one ``block x candidate_block`` tile).

Writes ``experiments/results/local_net.json``. Usage:
  python experiments/bench/local_net.py [--quick]
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

import jax
import jax.numpy as jnp
from _common import device_info, timeit, write_result

from jaxcal import metrics
from jaxcal.recalibrate import fit


def _calibration_data(n=10_000, seed=0):
  for p in (
    ROOT / "experiments" / "cache" / "fashion_mnist" / "backbone_seed0.npz",
    ROOT / "experiments" / "results" / "fashion_mnist" / "backbone_seed0.npz",
  ):
    if p.is_file():
      with np.load(p, allow_pickle=False) as z:
        return (
          z["cal_logits"][:n],
          z["cal_labels"][:n],
          z["cal_features"][:n].astype(np.float32),
          f"fashion-mnist backbone seed 0 ({p.name})",
        )
  rng = np.random.default_rng(seed)
  feats = np.maximum(rng.normal(size=(n, 128)), 0).astype(np.float32)
  logits = (feats @ rng.normal(size=(128, 10)) * 0.3).astype(np.float32)
  labels = (
    np.exp(logits).cumsum(1) / np.exp(logits).sum(1, keepdims=True) > rng.random((n, 1))
  ).argmax(1)
  return logits, labels, feats, "synthetic"


def _lce_inputs(n, seed=0, C=10, D=50):
  rng = np.random.default_rng(seed)
  z = rng.normal(size=(n, C)) * 4
  p = np.exp(z - z.max(1, keepdims=True))
  p = (p / p.sum(1, keepdims=True)).astype(np.float32)
  y = rng.integers(0, C, n)
  phi = (rng.normal(size=(n, D)) * 3).astype(np.float32)
  return p, y, phi


@jax.jit
def _lce_dense(p, y, phi):
  """Reference: per class the full n x n masked kernel (gamma 10, 15 bins, > 20 kept).

  Squared distances by broadcasting (no norm trick), the anchor included."""
  n, C = p.shape
  d2 = jnp.sum((phi[:, None, :] - phi[None, :, :]) ** 2, -1)
  k = jnp.exp(-d2 / 200.0)

  def per_class(c):
    s = p[:, c]
    r = s - (y == c)
    b = jnp.clip(jnp.ceil(s * 15), 1, 15).astype(jnp.int32)
    same = b[:, None] == b[None, :]
    kk = jnp.where(same, k, 0.0)
    e = jnp.abs(jnp.matmul(kk, r, precision=jax.lax.Precision.HIGHEST) / kk.sum(1))
    cnt = jnp.sum(same, 1)
    keep = cnt > 20
    return jnp.sum(jnp.where(keep, e, 0)) / jnp.maximum(keep.sum(), 1), jnp.max(
      jnp.where(keep, e, 0)
    )

  means, maxes = jax.lax.map(per_class, jnp.arange(C))
  return jnp.mean(means), jnp.mean(maxes)  # uniform class weights: MLCE = mean of class maxima


def main(argv=None):
  ap = argparse.ArgumentParser()
  ap.add_argument("--quick", action="store_true")
  args = ap.parse_args(argv)
  info = device_info()
  logits, labels, feats, source = _calibration_data()
  epochs = 3 if args.quick else 30
  opts = dict(
    pca_dim=50,
    hidden=64,
    dropout=0.3,
    bandwidth=10.0,
    lam=1.0,
    batch_size=1024,
    epochs=epochs,
    patience=None,
    val_fraction=0.1,
    seed=0,
    verbose=False,
  )
  fit_t = timeit(
    lambda: fit("local_net", logits, labels, features=feats, **opts).params,
    repeat=1 if args.quick else 2,
  )
  print(
    f"local_net fit, {epochs} epochs on {len(labels)} points: first {fit_t['first_s']:.1f}s "
    f"(with compilation), best {fit_t['best_s']:.1f}s",
    flush=True,
  )

  lce_res = {}
  sizes = [2000] if args.quick else [5_000, 20_000, 50_000]
  for n in sizes:
    p, y, phi = _lce_inputs(n)
    t = timeit(lambda: metrics.lce(p, y, phi), repeat=1)
    lce_res[str(n)] = {"blockwise": t}
    print(f"lce n={n}: first {t['first_s']:.1f}s, best {t['best_s']:.2f}s", flush=True)
    if n <= 5_000:
      ref = timeit(lambda: _lce_dense(p, y, phi), repeat=1)
      got, want = metrics.lce(p, y, phi), _lce_dense(p, y, phi)
      lce_res[str(n)].update(
        dense_reference=ref,
        speedup_vs_dense=ref["best_s"] / t["best_s"],
        max_abs_diff=float(max(abs(got[0] - want[0]), abs(got[1] - want[1]))),
        dense_kernel_bytes=n * n * 4,
      )
      print(
        f"  dense reference {ref['best_s']:.2f}s, ratio {ref['best_s'] / t['best_s']:.2f}",
        flush=True,
      )
  result = {
    "benchmark": "local_net",
    "local_net_fit": {
      "n_points": int(len(labels)),
      "feature_dim": int(feats.shape[1]),
      "num_classes": int(logits.shape[1]),
      "epochs": epochs,
      "data": source,
      "options": {k: v for k, v in opts.items() if k != "verbose"},
      "timing": fit_t,
      "target_s": 60.0,
      "meets_target": fit_t["first_s"] < 60.0,
    },
    "lce": {"num_classes": 10, "feature_dim": 50, "bandwidth": 10.0, "sizes": lce_res},
    "quick": args.quick,
    **info,
  }
  path = write_result("local_net" if not args.quick else "local_net_quick", result)
  print(f"wrote {path}")


if __name__ == "__main__":
  main()
