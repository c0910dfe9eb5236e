"""Benchmark: every binned calibration error for 200 bin counts in one call.

On synthetic predictions (default n = 100,000, C = 100) computes

  conf_ece (fixed), conf_ce (quantile), conf_ce_corr (quantile),
  classwise_ce (quantile), classwise_ece (fixed), ecce (fixed)

for the bin counts 2..201, each metric in ONE jaxcal call with
``num_bins=np.arange(2, 202)``, against a vectorised numpy reference that
loops over the bin counts, both measured in the same run. The numpy
reference is given every advantage that does not depend on the bin count:
the scores are sorted once (``np.argsort`` per score vector, i.e. C columns
for the classwise errors) and the residuals are gathered in sorted order once;
only the per-bin-count work is looped (bin ids of all n·C sorted scores, then
``np.bincount`` for fixed bins or ``np.add.reduceat`` over the contiguous
equal-mass runs). Both sides include their own sorting and the jaxcal side
also its input validation (it is timed through the public API).

jaxcal timings are the best of ``--repeat`` calls after the first call (whose
time, including tracing and compilation, is reported as ``first_s``) and a
warm-up call; numpy timings are the best of ``--np-repeat`` calls (default 1:
the loop takes minutes). The jaxcal results are checked against the numpy
ones (max |diff| is reported).

  python experiments/bench/bins_sweep.py            # full run, writes JSON
  python experiments/bench/bins_sweep.py --small    # quick run (n=5,000, C=10)

Writes ``experiments/results/bins_sweep.json`` (``bins_sweep_small.json``
with ``--small``).
"""

from __future__ import annotations

import argparse
import sys
import time

import jax
import numpy as np
from _common import cpu_load, device_info, machine_note, timeit, write_result

import jaxcal
from jaxcal import metrics

# --------------------------------------------------------------- numpy side


def _fixed_ids(s_sorted: np.ndarray, m: int) -> np.ndarray:
  # same rule and float dtype as jaxcal: clip(ceil(s*m), 1, m), 0-based
  return np.clip(np.ceil(s_sorted * s_sorted.dtype.type(m)), 1, m).astype(np.int64) - 1


def _quantile_starts(n: int, m: int) -> np.ndarray:
  # sorted position i (1-based) is in bin ceil(i*m/n); bin j (0-based) starts
  # at 0-based position floor(j*n/m). Requires m <= n (no empty bins).
  return (np.arange(m, dtype=np.int64) * n) // m


def _conf_prep(p, y):
  r = np.argmax(p, axis=1)
  c = p[np.arange(p.shape[0]), r]
  z = (r == y).astype(np.float64)
  order = np.argsort(c, kind="stable")
  return c[order], (c.astype(np.float64) - z)[order], z


def np_conf(p, y, ms, binning, kind):
  n = p.shape[0]
  c_s, r_s, z = _conf_prep(p, y)
  out = np.empty(len(ms))
  for k, m in enumerate(ms):
    if binning == "fixed":
      sums = np.bincount(_fixed_ids(c_s, m), weights=r_s, minlength=m)
    else:
      sums = np.add.reduceat(r_s, _quantile_starts(n, m))
    if kind == "ece":
      out[k] = np.abs(sums).sum() / n
    else:
      out[k] = (sums**2).sum() / n**2
      if kind == "ce_corr":
        out[k] += (1.0 - z.mean()) / n
  return out


def _cw_prep(p, y, sign=1.0):
  n, num_classes = p.shape
  order = np.argsort(p, axis=0, kind="stable")  # once per column
  p_s = np.take_along_axis(p, order, axis=0)  # (n, C)
  onehot_s = y[order] == np.arange(num_classes)[None, :]  # (n, C)
  resid_s = sign * (p_s.astype(np.float64) - onehot_s)
  return p_s, resid_s


def np_classwise(p, y, ms, binning, kind):
  n, num_classes = p.shape
  p_s, resid_s = _cw_prep(p, y)
  offs = np.arange(num_classes, dtype=np.int64)[None, :]
  out = np.empty(len(ms))
  for k, m in enumerate(ms):
    if binning == "fixed":
      ids = _fixed_ids(p_s, m) + m * offs  # (n, C)
      sums = np.bincount(ids.ravel(), weights=resid_s.ravel(), minlength=m * num_classes)
    else:
      sums = np.add.reduceat(resid_s, _quantile_starts(n, m), axis=0)
    if kind == "ece":
      out[k] = np.abs(sums).sum() / (n * num_classes)
    else:
      out[k] = (sums**2).sum() / (n**2 * num_classes)
  return out


def np_ecce(p, y, ms):
  n, num_classes = p.shape
  p_s, resid_s = _cw_prep(p, y, sign=-1.0)
  offs = np.arange(num_classes, dtype=np.int64)[None, :]
  out = np.empty(len(ms))
  for k, m in enumerate(ms):
    ids = (_fixed_ids(p_s, m) + m * offs).ravel()
    sums = np.bincount(ids, weights=resid_s.ravel(), minlength=m * num_classes)
    counts = np.bincount(ids, minlength=m * num_classes)
    cum = np.cumsum(sums.reshape(num_classes, m), axis=1)
    out[k] = np.where(counts.reshape(num_classes, m) > 0, np.abs(cum), 0.0).sum() / (
      n * num_classes
    )
  return out


# ------------------------------------------------------------------ driver

METRICS = [
  # name, jaxcal call, numpy reference
  (
    "conf_ece_fixed",
    lambda p, y, ms: metrics.conf_ece(p, y, ms, "fixed"),
    lambda p, y, ms: np_conf(p, y, ms, "fixed", "ece"),
  ),
  (
    "conf_ce_quantile",
    lambda p, y, ms: metrics.conf_ce(p, y, ms, "quantile"),
    lambda p, y, ms: np_conf(p, y, ms, "quantile", "ce"),
  ),
  (
    "conf_ce_corr_quantile",
    lambda p, y, ms: metrics.conf_ce_corr(p, y, ms, "quantile"),
    lambda p, y, ms: np_conf(p, y, ms, "quantile", "ce_corr"),
  ),
  (
    "classwise_ce_quantile",
    lambda p, y, ms: metrics.classwise_ce(p, y, ms, "quantile"),
    lambda p, y, ms: np_classwise(p, y, ms, "quantile", "ce"),
  ),
  (
    "classwise_ece_fixed",
    lambda p, y, ms: metrics.classwise_ece(p, y, ms, "fixed"),
    lambda p, y, ms: np_classwise(p, y, ms, "fixed", "ece"),
  ),
  ("ecce_fixed", lambda p, y, ms: metrics.ecce(p, y, ms), lambda p, y, ms: np_ecce(p, y, ms)),
]


def synthetic(n: int, num_classes: int, seed: int = 0):
  """Overconfident softmax predictions with labels drawn from a tempered version."""
  rng = np.random.default_rng(seed)
  logits = rng.normal(size=(n, num_classes)) * 3.0
  logits[np.arange(n), rng.integers(0, num_classes, n)] += 4.0

  def softmax(z):
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)

  true = softmax(logits / 1.5)
  u = rng.random((n, 1))
  y = np.minimum((np.cumsum(true, axis=1) < u).sum(axis=1), num_classes - 1)
  return softmax(logits).astype(np.float32), y.astype(np.int32)


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--small", action="store_true", help="quick run: n=5,000, C=10")
  ap.add_argument("--n", type=int, default=None)
  ap.add_argument("--classes", type=int, default=None)
  ap.add_argument(
    "--repeat", type=int, default=None, help="timed jaxcal calls (default 5, 3 with --small)"
  )
  ap.add_argument("--np-repeat", type=int, default=None, help="timed numpy calls (default 1)")
  ap.add_argument("--only", default=None, help="comma-separated metric names")
  args = ap.parse_args(argv)

  n = args.n or (5_000 if args.small else 100_000)
  num_classes = args.classes or (10 if args.small else 100)
  repeat = args.repeat or (3 if args.small else 5)
  np_repeat = args.np_repeat or 1
  ms = np.arange(2, 202)
  p, y = synthetic(n, num_classes)
  info = device_info()
  print(
    f"bins_sweep: n={n} C={num_classes} bin counts {ms[0]}..{ms[-1]} ({len(ms)}) on "
    f"{info.get('device')} ({info.get('backend')}), jax {info.get('jax')}, load {info['load_avg_at_start']}"
  )

  chosen = METRICS if args.only is None else [t for t in METRICS if t[0] in args.only.split(",")]
  timings, ratios, max_abs_diff = {}, {}, {}
  for name, jx, ref in chosen:
    t0 = time.perf_counter()
    got = np.asarray(jax.block_until_ready(jx(p, y, ms)))  # first call: trace + compile + run
    first = time.perf_counter() - t0
    tn = {"best_s": float("inf"), "times_s": []}
    for _ in range(np_repeat):  # numpy: its timed result is the check
      t0 = time.perf_counter()
      want = ref(p, y, ms)
      dt = time.perf_counter() - t0
      tn["times_s"].append(dt)
      tn["best_s"] = min(tn["best_s"], dt)
    max_abs_diff[name] = float(np.max(np.abs(got - want)))
    scale = float(np.max(np.abs(want)))
    if not max_abs_diff[name] <= 1e-5 + 1e-4 * scale:
      print(
        f"  {name}: jaxcal and numpy disagree (max |diff| {max_abs_diff[name]:.3g})",
        file=sys.stderr,
      )
      return 1
    tj = timeit(lambda: jx(p, y, ms), repeat=repeat, warmup=1)
    tj["first_s"] = first
    timings[name] = {"jaxcal": tj, "numpy_loop": tn}
    ratios[name] = tn["best_s"] / tj["best_s"]
    print(
      f"  {name:24s} jaxcal {tj['best_s'] * 1e3:9.1f} ms (first call {first:.2f} s)   "
      f"numpy loop {tn['best_s']:8.2f} s   ratio {ratios[name]:7.1f}x   max|diff| {max_abs_diff[name]:.1e}",
      flush=True,
    )

  tot_j = sum(t["jaxcal"]["best_s"] for t in timings.values())
  tot_n = sum(t["numpy_loop"]["best_s"] for t in timings.values())
  print(
    f"  {'total':24s} jaxcal {tot_j * 1e3:9.1f} ms   numpy loop {tot_n:8.2f} s   ratio {tot_n / tot_j:7.1f}x"
  )

  result = {
    "benchmark": "bins_sweep",
    "description": "all binned calibration errors for bin counts 2..201 in one jaxcal call each, "
    "vs a vectorised numpy loop over the bin counts (scores sorted once)",
    **info,
    "jaxcal_version": jaxcal.__version__,
    "load_avg_at_end": cpu_load(),
    "note": machine_note(info["load_avg_at_start"]),
    "n": n,
    "num_classes": num_classes,
    "num_bins": [int(ms[0]), int(ms[-1])],
    "num_bin_counts": len(ms),
    "dtype": "float32 (jaxcal), float64 accumulation (numpy)",
    "repeat": {"jaxcal": repeat, "numpy_loop": np_repeat},
    "target_ratio": 20.0,
    "timings": timings,
    "ratios": ratios,
    "total": {"jaxcal_s": tot_j, "numpy_loop_s": tot_n, "ratio": tot_n / tot_j},
    "min_ratio": min(ratios.values()) if ratios else None,
    "max_abs_diff_vs_numpy": max_abs_diff,
  }
  path = write_result("bins_sweep_small" if args.small else "bins_sweep", result)
  print(f"wrote {path}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
