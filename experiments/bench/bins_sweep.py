"""Benchmark: every binned calibration error for 200 bin counts in one call.

On synthetic predictions (default n = 100,000, C = 100) computes

  conf_ece (fixed), conf_ce (quantile), conf_ce_corr (quantile),
  classwise_ce (quantile), classwise_ece (fixed), ecce (fixed)

for the bin counts 2..201, each metric in ONE jaxcal call with
``num_bins=np.arange(2, 202)`` (the public API on numpy input: validation and
host-to-device transfer included), against the best vectorised numpy a user
would write, measured in the same run:

* each score vector (the top-label confidences, or the C class columns
  transposed to contiguous rows) sorted ONCE with one ``np.sort`` of packed
  ``uint64`` keys ``(float32 bits << 32) | index``: the scores are
  non-negative, so the bits order like the values and the index breaks ties,
  which is exactly the order of a stable argsort (the quantile rule's tie
  order), in a fraction of its time;
* float64 prefix sums of the residuals (score minus label indicator) in that
  order;
* the prefix sums read at the bin ends of ALL 200 bin counts at once: the
  ends ``floor(j n / m)`` for quantile bins, and for equal-width bins one
  ``np.searchsorted`` per sorted row of the distinct float64 edges ``j/m``
  (the edge test ``s <= j/m``); differences of those reads are the per-bin
  sums, and ``np.add.reduceat`` sums them per bin count. No Python loop over
  bin counts, nothing re-binned per bin count.

Both sides include their own sorting. Timing (``_common.interleaved``, cold):
per metric the jaxcal call and the numpy reference are each called once
first, timed alone, after clearing JAX's caches (the jaxcal figure is a cold
first call: tracing and compilation included), then ``--repeat`` rounds call
both, alternating which goes first; the figure compared is the MEDIAN of the
timed calls, and the ratio is numpy median / jaxcal median (> 1: jaxcal is
faster). Before any ratio is written the values are checked against each
other (``_common.check_agree``; numpy tests the float64 edge ``s <= j/m``,
jaxcal rounds ``s*m`` in float32, which can move a score lying within an ulp
of an edge, and accumulates in float32).

  python experiments/bench/bins_sweep.py            # full run, writes JSON
  python experiments/bench/bins_sweep.py --small    # quick run (n=5,000, C=10)

Writes ``experiments/results/bins_sweep.json`` (``bins_sweep_small.json``
with ``--small``; the folder is ``$JAXCAL_RESULTS_DIR`` when set).
"""

from __future__ import annotations

import argparse
import sys

import jax
import numpy as np
from _common import (
  check_agree,
  cpu_load,
  device_info,
  interleaved,
  machine_note,
  packed_sort_rows,
  write_result,
)

import jaxcal
from jaxcal import metrics

# --------------------------------------------------------------- numpy side
#
# The best vectorised numpy a user would write for many bin counts (it uses
# nothing of jaxcal): sort each score vector once, take float64 prefix sums
# of the residuals in that order, and read them at the bin ends of every bin
# count at once.


def _prefix(resid: np.ndarray) -> np.ndarray:
  """Float64 prefix sums along the last axis with a leading 0: ``(..., n + 1)``."""
  out = np.zeros(resid.shape[:-1] + (resid.shape[-1] + 1,))
  np.cumsum(resid, axis=-1, out=out[..., 1:])
  return out


def _layout(ms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Where each bin count's ``m + 1`` ends start and stop in the concatenated ends.

  Bin count ``k`` occupies ``[starts[k], lasts[k]]`` (``lasts = starts + m``);
  of the differences of consecutive ends, ``starts[k] .. lasts[k] - 1`` are
  its ``m`` bins and ``lasts[k]`` straddles two bin counts (dropped).
  """
  ms = np.asarray(ms, np.int64)
  starts = np.concatenate([[0], np.cumsum(ms + 1)[:-1]])
  return starts, starts + ms


def _ends(s_sorted: np.ndarray, ms: np.ndarray, binning: str) -> np.ndarray:
  """Cumulative counts at the ends of every bin of every bin count.

  ``(E,)`` for quantile bins (the same for every row: ``floor(j n / m)``),
  ``(..., E)`` for equal-width bins (per sorted row: the number of scores
  ``<= j/m``, the first end 0 and the last n), ``E = sum(m + 1)``.
  """
  n = s_sorted.shape[-1]
  if binning == "quantile":
    return np.concatenate([(np.arange(m + 1, dtype=np.int64) * n) // m for m in ms])
  edges = np.concatenate([np.arange(m + 1) / m for m in ms])  # float64
  distinct, where = np.unique(edges, return_inverse=True)  # sorted keys search faster
  rows = s_sorted.reshape(-1, n).astype(np.float64)
  ends = np.stack([np.searchsorted(r, distinct, side="right") for r in rows])[:, where]
  starts, lasts = _layout(ms)
  ends[:, starts], ends[:, lasts] = 0, n  # scores <= 0 in the first bin, >= 1 in the last
  return ends.reshape(s_sorted.shape[:-1] + edges.shape)


def _per_bin_count(d: np.ndarray, ms: np.ndarray) -> np.ndarray:
  """Sums over each bin count's bins of ``d`` (differences of the concatenated ends)."""
  starts, lasts = _layout(ms)
  d[..., lasts[:-1]] = 0.0  # the differences across two bin counts
  return np.add.reduceat(d, starts, axis=-1)


def np_conf(p, y, ms, binning, kind):
  n = p.shape[0]
  top = np.argmax(p, axis=1)
  c = p[np.arange(n), top]
  z = top == y
  s_sorted, order = packed_sort_rows(c)
  prefix = _prefix(s_sorted.astype(np.float64) - z[order])
  sums = np.diff(prefix[_ends(s_sorted, ms, binning)])  # every bin of every count
  if kind == "ece":
    return _per_bin_count(np.abs(sums), ms) / n
  out = _per_bin_count(sums * sums, ms) / n**2
  if kind == "ce_corr":
    out += (1.0 - z.mean()) / n
  return out


def _cw_prep(p, y, sign=1.0):
  """Class columns as sorted rows, and the (C, n + 1) prefix sums of their residuals."""
  num_classes = p.shape[1]
  s_sorted, order = packed_sort_rows(np.ascontiguousarray(p.T))  # (C, n)
  labelled = y[order] == np.arange(num_classes)[:, None]
  resid = s_sorted.astype(np.float64) - labelled
  if sign < 0:
    np.negative(resid, out=resid)
  return s_sorted, _prefix(resid)


def _cw_at(s_sorted, prefix, ms, binning):
  """(C, E) prefix sums at every bin end, and the ends."""
  ends = _ends(s_sorted, ms, binning)
  if binning == "quantile":
    return prefix[:, ends], ends
  return np.take_along_axis(prefix, ends, axis=1), ends


def np_classwise(p, y, ms, binning, kind):
  n, num_classes = p.shape
  s_sorted, prefix = _cw_prep(p, y)
  at, _ = _cw_at(s_sorted, prefix, ms, binning)
  sums = np.diff(at, axis=1)
  if kind == "ece":
    return _per_bin_count(np.abs(sums).sum(axis=0), ms) / (n * num_classes)
  return _per_bin_count((sums * sums).sum(axis=0), ms) / (n**2 * num_classes)


def np_ecce(p, y, ms):
  n, num_classes = p.shape
  s_sorted, prefix = _cw_prep(p, y, sign=-1.0)
  at, ends = _cw_at(s_sorted, prefix, ms, "fixed")
  nonempty = np.diff(ends, axis=1) > 0  # (C, E - 1): bin ends at index + 1
  per = _per_bin_count(np.where(nonempty, np.abs(at[:, 1:]), 0.0), ms) / n  # (C, len(ms))
  counts = _per_bin_count(nonempty.astype(np.float64), ms)  # K_c: the paper's mean over bins
  return (per / np.maximum(counts, 1.0)).mean(axis=0)


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
    "--repeat",
    type=int,
    default=None,
    help="interleaved rounds: timed calls of each side (default 5, 3 with --small)",
  )
  ap.add_argument("--only", default=None, help="comma-separated metric names")
  args = ap.parse_args(argv)

  n = args.n or (5_000 if args.small else 100_000)
  num_classes = args.classes or (10 if args.small else 100)
  repeat = args.repeat or (3 if args.small else 5)
  ms = np.arange(2, 202)
  p, y = synthetic(n, num_classes)
  info = device_info()
  print(
    f"bins_sweep: n={n} C={num_classes} bin counts {ms[0]}..{ms[-1]} ({len(ms)}) on "
    f"{info.get('device')} ({info.get('backend')}), jax {info.get('jax')}, "
    f"load {info['load_avg_at_start']}; medians of {repeat} interleaved calls"
  )

  chosen = METRICS if args.only is None else [t for t in METRICS if t[0] in args.only.split(",")]
  # Values first, for every metric: a fast wrong answer must not pass as a
  # speed-up. Quantile bins agree to float32 accumulation (about 3e-7
  # relative at full size); equal-width bins also differ where jaxcal's
  # float32 ``s*m`` moves a score lying within an ulp of an edge into the
  # next bin (up to 6e-5 relative at full size).
  max_abs_diff, tolerance = {}, {}
  for name, jx, ref in chosen:
    got, want = np.asarray(jx(p, y, ms)), ref(p, y, ms)
    rtol = 1e-5 if "quantile" in name else 2e-4
    atol = 1e-6 * float(np.max(np.abs(want)))
    tolerance[name] = {"rtol": rtol, "atol": atol}
    try:
      max_abs_diff[name] = check_agree({"jaxcal": got, "numpy": want}, "numpy", rtol, atol)[
        "jaxcal"
      ]
    except AssertionError as e:
      print(f"  {name}: jaxcal and numpy disagree\n{e}", file=sys.stderr)
      return 1

  timings, ratios = {}, {}
  for name, jx, ref in chosen:
    res = interleaved(
      {"jaxcal": (jx, (p, y, ms)), "numpy_packed_sort": (ref, (p, y, ms))}, repeat, cold=True
    )
    timings[name] = res
    tj, tn = res["jaxcal"], res["numpy_packed_sort"]
    ratios[name] = tn["median_s"] / tj["median_s"]
    print(
      f"  {name:24s} jaxcal {tj['median_s'] * 1e3:9.1f} ms (cold first call "
      f"{tj['first_call_s']:.2f} s)   numpy {tn['median_s'] * 1e3:9.1f} ms (first "
      f"{tn['first_call_s'] * 1e3:.0f} ms)   ratio {ratios[name]:6.2f}x   "
      f"max|diff| {max_abs_diff[name]:.1e}",
      flush=True,
    )

  tot_j = sum(t["jaxcal"]["median_s"] for t in timings.values())
  tot_n = sum(t["numpy_packed_sort"]["median_s"] for t in timings.values())
  tot_first = sum(t["jaxcal"]["first_call_s"] for t in timings.values())
  tot_first_n = sum(t["numpy_packed_sort"]["first_call_s"] for t in timings.values())
  print(
    f"  {'total':24s} jaxcal {tot_j * 1e3:9.1f} ms (cold first calls {tot_first:.1f} s)   "
    f"numpy {tot_n * 1e3:9.1f} ms   ratio {tot_n / tot_j:6.2f}x"
  )

  statistic = f"median of {repeat} interleaved timed calls (cold first calls apart)"
  result = {
    "benchmark": "bins_sweep",
    "description": "all binned calibration errors for bin counts 2..201 in one jaxcal call "
    "each, vs the best vectorised numpy (each score vector sorted once by one np.sort of "
    "packed uint64 keys, float64 prefix sums read at the ends of every bin count at once); "
    "interleaved call by call, cold first calls reported, medians compared",
    **info,
    "jaxcal_version": jaxcal.__version__,
    "jax_compilation_cache_dir": jax.config.jax_compilation_cache_dir,
    "load_avg_at_end": cpu_load(),
    "note": machine_note(info["load_avg_at_start"], statistic=statistic),
    "n": n,
    "num_classes": num_classes,
    "num_bins": [int(ms[0]), int(ms[-1])],
    "num_bin_counts": len(ms),
    "dtype": "float32 (jaxcal), float64 accumulation (numpy)",
    "statistic": statistic,
    "repeat": repeat,
    "timings": timings,
    "ratios_median": ratios,
    "total": {
      "jaxcal_median_s": tot_j,
      "jaxcal_first_calls_cold_s": tot_first,
      "numpy_packed_sort_median_s": tot_n,
      "numpy_packed_sort_first_calls_s": tot_first_n,
      "ratio_median": tot_n / tot_j,
    },
    "min_ratio_median": min(ratios.values()) if ratios else None,
    "max_abs_diff_vs_numpy": max_abs_diff,
    "agreement_tolerance": tolerance,
  }
  path = write_result("bins_sweep_small" if args.small else "bins_sweep", result)
  print(f"wrote {path}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
