"""Benchmark: LoCal Net training time and blockwise LCE.

* ``local_net_fit``: ``fit("local_net", ...)`` for exactly 30 epochs (no early
  stopping) on 10,000 calibration points (9,000 train / 1,000 validation),
  128-d backbone features, 10 classes, the paper's CIFAR-10 settings (hidden
  64, dropout 0.3, batch 1024, gamma 10). Real Fashion-MNIST backbone outputs
  (seed 0) when cached or committed, else synthetic arrays of the same shapes.
  ``first_call_s`` (the process's first fit, compilation included, after
  clearing JAX's caches) is the figure for the target: under a minute on 2
  CPU cores; then ``--fit-repeat`` timed fits (median).
* ``lce``: ``jaxcal.metrics.lce`` on n anchors (10 classes, 50-d features,
  peaked softmax predictions, so ~90 % of each class's points share one bin)
  for n = 5,000, 20,000 and 50,000. At n = 5,000 it is compared with two
  jitted dense references that materialise the ``n x n`` Gaussian kernel
  (squared distances by the norm trick, ``|a|^2 + |b|^2 - 2 a.b`` with a
  full-precision product, clipped at 0; the anchor included), the blockwise
  code never holding more than one ``block x candidate_block`` tile:

  - ``dense_masked_per_class``: per class (``lax.map``) the kernel masked to
    same-bin pairs, one matrix-vector product and a row sum;
  - ``dense_bin_columns``: one matrix product of the kernel with ``2 C B``
    columns (each class's residuals and ones, split by the 15 bins), each
    anchor reading its own bin's column: no masked ``n x n`` copy at all.

  All three run from the same numpy arrays, timed by
  ``_common.interleaved(..., cold=True)`` (each first call alone after
  clearing JAX's caches, then one untimed call each and ``--repeat`` rounds
  in rotating order); ``speedup_vs_best_dense`` is the faster dense reference's median
  over the blockwise median, written after the values agree
  (``_common.check_agree``, 1e-5). The larger sizes (blockwise alone) get a
  cold first call and ``--large-repeat`` timed calls (default 1: a 50k call
  takes about 20 s on 2 cores).

Writes ``experiments/results/local_net.json``. Usage:
  python experiments/bench/local_net.py [--quick]     # --quick: 3 epochs, LCE at n = 2,000
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
from _common import check_agree, device_info, interleaved, machine_note, write_result

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


GAMMA, BINS, MIN_COUNT = 10.0, 15, 20  # metrics.lce's defaults, as the references use them


def _kernel(phi):
  """The ``n x n`` Gaussian kernel, squared distances by the norm trick (clipped at 0)."""
  sq = jnp.sum(phi * phi, 1)
  d2 = sq[:, None] + sq[None, :] - 2 * jnp.matmul(phi, phi.T, precision=jax.lax.Precision.HIGHEST)
  return jnp.exp(-jnp.maximum(d2, 0.0) / (2 * GAMMA**2))


@jax.jit
def _lce_dense(p, y, phi):
  """Dense reference: per class the ``n x n`` kernel masked to same-bin pairs (the anchor included).

  Returns (LCE, MLCE) with uniform class weights (MLCE = mean of the class maxima).
  """
  k = _kernel(phi)

  def per_class(c):
    s = p[:, c]
    r = s - (y == c)
    b = jnp.clip(jnp.ceil(s * BINS), 1, BINS).astype(jnp.int32)
    same = b[:, None] == b[None, :]
    kk = jnp.where(same, k, 0.0)
    e = jnp.abs(jnp.matmul(kk, r, precision=jax.lax.Precision.HIGHEST) / kk.sum(1))
    keep = jnp.sum(same, 1) > MIN_COUNT
    return jnp.sum(jnp.where(keep, e, 0)) / jnp.maximum(keep.sum(), 1), jnp.max(
      jnp.where(keep, e, 0)
    )

  means, maxes = jax.lax.map(per_class, jnp.arange(p.shape[1]))
  return jnp.mean(means), jnp.mean(maxes)


@jax.jit
def _lce_dense_bin_columns(p, y, phi):
  """Dense reference: one product of the kernel with every (class, bin)'s residual and indicator.

  Column ``(c, b)`` of ``R`` holds ``p[:, c] - [y == c]`` where sample j's
  class-c score falls in bin b (else 0), of ``M`` the indicator alone; anchor
  i of class c reads ``(K @ R)[i, (c, b_ic)] / (K @ M)[i, (c, b_ic)]``, the
  same sums as the masked kernel's. Returns (LCE, MLCE) as :func:`_lce_dense`.
  """
  n, num_classes = p.shape
  k = _kernel(phi)
  b = jnp.clip(jnp.ceil(p * BINS), 1, BINS).astype(jnp.int32) - 1  # (n, C)
  ind = jax.nn.one_hot(b, BINS, dtype=p.dtype)  # (n, C, B)
  r = p - jax.nn.one_hot(y, num_classes, dtype=p.dtype)
  cols = jnp.concatenate([ind * r[:, :, None], ind], 1).reshape(n, 2 * num_classes * BINS)
  s = jnp.matmul(k, cols, precision=jax.lax.Precision.HIGHEST).reshape(n, 2, num_classes, BINS)
  num = jnp.take_along_axis(s[:, 0], b[:, :, None], 2)[..., 0]
  den = jnp.take_along_axis(s[:, 1], b[:, :, None], 2)[..., 0]
  cnt = jnp.take_along_axis(jnp.sum(ind, 0), b.T, 1).T  # (n, C): samples in each anchor's bin
  e = jnp.abs(num / den)
  keep = cnt > MIN_COUNT
  means = jnp.sum(jnp.where(keep, e, 0), 0) / jnp.maximum(keep.sum(0), 1)
  return jnp.mean(means), jnp.mean(jnp.max(jnp.where(keep, e, 0), 0))


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--quick", action="store_true", help="3 epochs; LCE at n = 2,000 only")
  ap.add_argument("--repeat", type=int, default=3, help="interleaved rounds at the compared size")
  ap.add_argument(
    "--large-repeat", type=int, default=1, help="timed calls at the blockwise-only sizes"
  )
  ap.add_argument("--fit-repeat", type=int, default=None, help="timed fits (default 2; quick 1)")
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
  fit_repeat = args.fit_repeat or (1 if args.quick else 2)
  fit_t = interleaved(
    {"fit": (lambda: fit("local_net", logits, labels, features=feats, **opts).params, ())},
    fit_repeat,
    cold=True,
  )["fit"]
  print(
    f"local_net fit, {epochs} epochs on {len(labels)} points: first {fit_t['first_call_s']:.1f}s "
    f"(with compilation), median {fit_t['median_s']:.1f}s of {fit_repeat}",
    flush=True,
  )

  lce_res = {}
  sizes = [2000] if args.quick else [5_000, 20_000, 50_000]
  for n in sizes:
    p, y, phi = _lce_inputs(n)
    if n > 5_000:
      t = interleaved({"blockwise": (metrics.lce, (p, y, phi))}, args.large_repeat, cold=True)
      lce_res[str(n)] = {"blockwise": t["blockwise"]}
      print(
        f"lce n={n}: first {t['blockwise']['first_call_s']:.1f}s, "
        f"median {t['blockwise']['median_s']:.2f}s of {args.large_repeat}",
        flush=True,
      )
      continue
    paths = {
      "blockwise": (metrics.lce, (p, y, phi)),
      "dense_masked_per_class": (_lce_dense, (p, y, phi)),
      "dense_bin_columns": (_lce_dense_bin_columns, (p, y, phi)),
    }
    vals = {k: np.asarray(fn(*a), np.float64) for k, (fn, a) in paths.items()}
    diffs = check_agree(vals, "blockwise", rtol=1e-5, atol=1e-6)
    t = interleaved(paths, args.repeat, cold=True)
    med = {k: v["median_s"] for k, v in t.items()}
    best_dense = min(("dense_masked_per_class", "dense_bin_columns"), key=med.get)
    lce_res[str(n)] = {
      **t,
      "repeat": args.repeat,
      "best_dense": best_dense,
      "speedup_vs_best_dense": med[best_dense] / med["blockwise"],
      "speedup_vs_dense_masked_per_class": med["dense_masked_per_class"] / med["blockwise"],
      "speedup_vs_dense_bin_columns": med["dense_bin_columns"] / med["blockwise"],
      "max_abs_diff_vs_blockwise": {k: diffs[k] for k in paths if k != "blockwise"},
      "dense_kernel_bytes": n * n * 4,
    }
    print(
      f"lce n={n}: blockwise median {med['blockwise']:.3f}s (first {t['blockwise']['first_call_s']:.1f}s); "
      f"dense masked per class {med['dense_masked_per_class']:.3f}s, "
      f"dense bin columns {med['dense_bin_columns']:.3f}s; "
      f"ratio vs the faster dense {lce_res[str(n)]['speedup_vs_best_dense']:.2f}",
      flush=True,
    )
  load_end = [round(x, 2) for x in __import__("os").getloadavg()]
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
      "meets_target": fit_t["first_call_s"] < 60.0,
    },
    "lce": {
      "num_classes": 10,
      "feature_dim": 50,
      "bandwidth": GAMMA,
      "timing": (
        "compared size: interleaved(cold=True) (cold first calls, then `repeat` interleaved "
        "rounds, medians); larger sizes: blockwise alone, a cold first call then "
        "`large_repeat` timed calls"
      ),
      "large_repeat": args.large_repeat,
      "sizes": lce_res,
    },
    "machine_note": machine_note(
      info["load_avg_at_start"],
      info.get("cpu_count"),
      statistic=f"median of {args.repeat} interleaved calls each",
    ),
    "quick": args.quick,
    **info,
    "load_avg_at_end": load_end,
  }
  path = write_result("local_net" if not args.quick else "local_net_quick", result)
  print(f"wrote {path}")


if __name__ == "__main__":
  main()
