"""Benchmark: every binned calibration error for 200 bin counts in one call.

On synthetic predictions (default n = 100,000, C = 100) computes

  conf_ece (fixed), conf_ce (quantile), conf_ce_corr (quantile),
  classwise_ce (quantile), classwise_ece (fixed), ecce (fixed)

for the bin counts 2..201, each metric in ONE jaxcal call with
``num_bins=np.arange(2, 202)``, against the best vectorised numpy a user would
write, both measured in the same run: each score vector sorted once (C columns
for the class-wise errors), float64 prefix sums of the residuals in that
order, and per bin count the prefix sums read at the bin ends
(``floor(j n / m)`` for quantile bins, ``np.searchsorted`` of the edges
``j/m`` for equal-width bins). Nothing is re-binned per bin count. Both sides
include their own sorting; the jaxcal side also its input validation (it is
timed through the public API).

Both sides are timed the same way: one warm-up call (whose time, for jaxcal
including tracing and compilation, is reported as ``first_s``), then the best
and median of ``--repeat`` (jaxcal) and ``--np-repeat`` (numpy, default 3)
timed calls. The results are checked against each other (max |diff|; numpy
tests the float64 edge ``s <= j/m``, jaxcal rounds ``s*m`` in float32, which
moves a score within an ulp of an edge).

  python experiments/bench/bins_sweep.py            # full run, writes JSON
  python experiments/bench/bins_sweep.py --small    # quick run (n=5,000, C=10)

Writes ``experiments/results/bins_sweep.json`` (``bins_sweep_small.json``
with ``--small``).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
from _common import cpu_load, device_info, machine_note, timeit, write_result

import jaxcal
from jaxcal import metrics

# --------------------------------------------------------------- numpy side
#
# The best vectorised numpy a user would write for many bin counts: sort each
# score vector once, take float64 prefix sums of the residuals in that order,
# and per bin count read the prefix sums at the bin ends: ``floor(j n / m)``
# for quantile bins, ``np.searchsorted`` of the edges ``j/m`` in the sorted
# scores for equal-width bins (the float64 edge test ``s <= j/m``; jaxcal
# rounds ``s*m`` in float32, which moves a score lying within an ulp of an
# edge: the reported max |diff| shows the effect). Nothing is re-binned per
# bin count.


def _sorted_prefix(scores: np.ndarray, resid: np.ndarray):
  """Scores sorted along axis 0 (stable) and the float64 prefix sums of the residuals."""
  order = np.argsort(scores, axis=0, kind="stable")
  s_sorted = np.take_along_axis(scores, order, axis=0)
  r_sorted = np.take_along_axis(resid.astype(np.float64), order, axis=0)
  zero = np.zeros((1,) + r_sorted.shape[1:])
  return s_sorted, np.concatenate([zero, np.cumsum(r_sorted, axis=0)])


def _ends(s_sorted: np.ndarray, m: int, binning: str) -> np.ndarray:
  """(m + 1,) cumulative counts at the bin ends of one sorted score vector."""
  n = s_sorted.shape[0]
  if binning == "quantile":
    return (np.arange(m + 1, dtype=np.int64) * n) // m
  ends = np.searchsorted(s_sorted, np.arange(m + 1) / m, side="right")
  ends[0], ends[-1] = 0, n  # scores <= 0 are in the first bin, >= 1 in the last
  return ends


def _conf_prep(p, y):
  r = np.argmax(p, axis=1)
  c = p[np.arange(p.shape[0]), r]
  z = (r == y).astype(np.float64)
  s_sorted, prefix = _sorted_prefix(c, c - z)
  return s_sorted, prefix, z


def np_conf(p, y, ms, binning, kind):
  n = p.shape[0]
  s_sorted, prefix, z = _conf_prep(p, y)
  out = np.empty(len(ms))
  for k, m in enumerate(ms):
    sums = np.diff(prefix[_ends(s_sorted, m, binning)])
    if kind == "ece":
      out[k] = np.abs(sums).sum() / n
    else:
      out[k] = (sums**2).sum() / n**2
      if kind == "ce_corr":
        out[k] += (1.0 - z.mean()) / n
  return out


def _cw_prep(p, y, sign=1.0):
  onehot = y[:, None] == np.arange(p.shape[1])[None, :]
  return _sorted_prefix(p, sign * (p.astype(np.float64) - onehot))


def _cw_sums(s_sorted, prefix, m, binning):
  """(m, C) per-bin sums, and (m + 1, C) cumulative sums at the ends."""
  num_classes = s_sorted.shape[1]
  cols = np.arange(num_classes)
  if binning == "quantile":
    ends = np.repeat(_ends(s_sorted[:, 0], m, binning)[:, None], num_classes, axis=1)
  else:
    ends = np.stack([_ends(s_sorted[:, r], m, binning) for r in range(num_classes)], axis=1)
  at = prefix[ends, cols[None, :]]
  return np.diff(at, axis=0), at, np.diff(ends, axis=0)


def np_classwise(p, y, ms, binning, kind):
  n, num_classes = p.shape
  s_sorted, prefix = _cw_prep(p, y)
  out = np.empty(len(ms))
  for k, m in enumerate(ms):
    sums, _, _ = _cw_sums(s_sorted, prefix, m, binning)
    if kind == "ece":
      out[k] = np.abs(sums).sum() / (n * num_classes)
    else:
      out[k] = (sums**2).sum() / (n**2 * num_classes)
  return out


def np_ecce(p, y, ms):
  n, num_classes = p.shape
  s_sorted, prefix = _cw_prep(p, y, sign=-1.0)
  out = np.empty(len(ms))
  for k, m in enumerate(ms):
    _, at, counts = _cw_sums(s_sorted, prefix, m, "fixed")
    per = np.where(counts > 0, np.abs(at[1:]), 0.0).sum(axis=0) / n  # (C,)
    nonempty = np.maximum((counts > 0).sum(axis=0), 1)  # K_c: the paper's mean over bins
    out[k] = (per / nonempty).mean()
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
  ap.add_argument("--np-repeat", type=int, default=None, help="timed numpy calls (default 3)")
  ap.add_argument("--only", default=None, help="comma-separated metric names")
  args = ap.parse_args(argv)

  n = args.n or (5_000 if args.small else 100_000)
  num_classes = args.classes or (10 if args.small else 100)
  repeat = args.repeat or (3 if args.small else 5)
  np_repeat = args.np_repeat or 3
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
    tj = timeit(lambda: jx(p, y, ms), repeat=repeat, warmup=1)  # first call = compile + run
    tn = timeit(lambda: ref(p, y, ms), repeat=np_repeat, warmup=1)  # timed the same way
    got, want = np.asarray(jx(p, y, ms)), ref(p, y, ms)
    max_abs_diff[name] = float(np.max(np.abs(got - want)))
    scale = float(np.max(np.abs(want)))
    if not max_abs_diff[name] <= 1e-5 + 1e-4 * scale:
      print(
        f"  {name}: jaxcal and numpy disagree (max |diff| {max_abs_diff[name]:.3g})",
        file=sys.stderr,
      )
      return 1
    timings[name] = {"jaxcal": tj, "numpy_sorted_prefix": tn}
    ratios[name] = tn["best_s"] / tj["best_s"]
    print(
      f"  {name:24s} jaxcal {tj['best_s'] * 1e3:9.1f} ms (first call {tj['first_s']:.2f} s)   "
      f"numpy {tn['best_s'] * 1e3:9.1f} ms (first {tn['first_s'] * 1e3:.0f} ms)   "
      f"ratio {ratios[name]:7.1f}x   max|diff| {max_abs_diff[name]:.1e}",
      flush=True,
    )

  tot_j = sum(t["jaxcal"]["best_s"] for t in timings.values())
  tot_n = sum(t["numpy_sorted_prefix"]["best_s"] for t in timings.values())
  tot_first = sum(t["jaxcal"]["first_s"] for t in timings.values())
  print(
    f"  {'total':24s} jaxcal {tot_j * 1e3:9.1f} ms (first calls {tot_first:.1f} s)   "
    f"numpy {tot_n * 1e3:9.1f} ms   ratio {tot_n / tot_j:7.1f}x"
  )

  result = {
    "benchmark": "bins_sweep",
    "description": "all binned calibration errors for bin counts 2..201 in one jaxcal call each, "
    "vs the best vectorised numpy (scores sorted once, float64 prefix sums read at the bin "
    "ends per bin count); both warmed up and timed the same way, first calls reported",
    **info,
    "jaxcal_version": jaxcal.__version__,
    "load_avg_at_end": cpu_load(),
    "note": machine_note(info["load_avg_at_start"]),
    "n": n,
    "num_classes": num_classes,
    "num_bins": [int(ms[0]), int(ms[-1])],
    "num_bin_counts": len(ms),
    "dtype": "float32 (jaxcal), float64 accumulation (numpy)",
    "repeat": {"jaxcal": repeat, "numpy_sorted_prefix": np_repeat},
    "timings": timings,
    "ratios": ratios,
    "total": {
      "jaxcal_s": tot_j,
      "jaxcal_first_calls_s": tot_first,
      "numpy_sorted_prefix_s": tot_n,
      "ratio": tot_n / tot_j,
    },
    "min_ratio": min(ratios.values()) if ratios else None,
    "max_abs_diff_vs_numpy": max_abs_diff,
  }
  path = write_result("bins_sweep_small" if args.small else "bins_sweep", result)
  print(f"wrote {path}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
