"""Benchmark: jaxcal against the peer libraries on the same data, one call each.

Two parts, each a table of contestants timed in one process, interleaved
(``--repeat`` rounds, each over the contestants in a new seeded random
order). Each contestant's first call is timed alone, cold: JAX's caches are
cleared before every jaxcal contestant's first call (``_common.clear_caches``),
so it compiles its programs itself instead of reusing those of an earlier
metric or contestant; then every contestant is called once more, untimed
(the clearing evicted the earlier contestants' programs). The first-call
(compile) time is reported beside the median and the best of the timed calls.

Every contestant's value is compared with jaxcal's public call before a ratio
is written (``_common.check_agree``; each table's tolerance and the reason
for it are in its ``agreement`` entry): a fast wrong answer is no speed-up.
Where a peer computes another quantity under the same name (netcal's BBQ) or
bins the scores differently and some score lies on a bin edge (torchmetrics'
norms), its value is recorded in ``different_quantity`` with the reason and
not asserted; it is then no reference for ``ratio_vs_fastest``.

1. **Single call** (issue 15): ``conf_ece`` (15 equal-width bins),
   ``classwise_ece`` (15 equal-width bins) and ``brier`` on numpy float32
   input, at n = 100,000, C = 100 (the CIFAR-100 DenseNet-121 test logits
   tiled 10x with N(0, 0.1^2) noise added to the logits) and at n = 10,000,
   C = 10 (CIFAR-10 ResNet-110 test logits). Contestants: jaxcal's public
   call (validation included), jaxcal inside a user ``jit`` on device
   arrays, numpy by hand (the best vectorised code: one ``bincount``; the
   functions of ``single_call.py``), scikit-learn (``calibration_curve`` +
   the bin counts; multiclass ``brier_score_loss``, ``scale_by_half=False``:
   the sum over the classes, as jaxcal's), relplot (``binnedECE``), netcal
   (``ECE``) and torchmetrics (``multiclass_calibration_error``). Class-wise
   peers that only have a binary error are looped over the classes, as a
   user would.
2. **New measures** on the CIFAR test logits (C = 10 and C = 100, n =
   10,000): smooth ECE vs relplot ``smECE``; MMCE vs netcal ``MMCE`` (n =
   5,000: netcal builds the n x n matrix); debiased CE vs
   uncertainty-calibration; RMS / max norms vs torchmetrics; KS vs numpy by
   hand (one unstable ``argsort``); SKCE (no peer: unbiased estimator at n =
   2,000 for C = 100, block estimator, timed alone); and, on CIFAR-10, the
   recalibrators fitted on the ``val`` split: beta vs betacal (a loop over
   classes; the per-class maps compared), ensemble temperature scaling vs
   the authors' scipy procedure (temperature and weights compared), BBQ vs
   netcal's BBQ (a different method under the same name: BIC scores,
   equal-width bins; timed, not compared). Every contestant does the same
   work as the jaxcal call but its validation (the peers' top label and
   softmax inside their timed calls too).

Every timed call follows one untimed call of the same contestant
(``--settle``, default 1): torch's worker threads keep spinning for a few
ms after a call, and on a 2-core machine the next contestant shares the
cores with them (jaxcal's ``conf_ece`` at n = 100,000 took 11.1 ms right
after torchmetrics and 7.8 ms right after numpy; numpy, single-threaded,
8.2 ms either way). A pause instead would time every threaded contestant
waking its parked threads (torchmetrics at n = 10,000, C = 10: 12 ms after a
10 ms pause, 0.6 ms otherwise). At n = 10,000 one untimed call (0.5 ms) does
not outlast the previous contestant's spinning threads, so the untimed calls
go on for at least ``--settle-ms`` (default 5 ms): with one call only,
jaxcal's ``conf_ece`` took 0.74 ms and torchmetrics' 0.54 ms; with 5 ms of
calls, 0.61 and 0.42 ms (2026-11-24, same machine, minutes apart).

The single-call part runs in ``--processes`` fresh processes (default 3),
one after another: XLA:CPU's multi-threaded programs keep one speed for the
whole of a process, and that speed differs from one fresh process to the
next on this VM (jaxcal's public ``conf_ece`` at n = 100,000, C = 100:
6.9-8.9 ms, the medians of 15 calls in each of six fresh processes, while
numpy by hand took 8.1-8.5 ms; 2026-11-28, idle machine), so one process is
one draw. Each contestant's figure is the median of its per-process
medians; the JSON keeps every process's medians and ratios
(``process_medians_s``, ``process_ratios_vs_jaxcal``,
``process_ratios_vs_fastest``).

Ratios are ``reference median / jaxcal public-call median`` (> 1: jaxcal
faster): ``ratio_vs_jaxcal`` for every contestant, and, for every metric and
size, ``ratio_vs_fastest`` against ``fastest_reference``, the fastest
contestant other than jaxcal's own that computes the same quantity in the
same run (numpy by hand included): the figure to quote. Peers that are not
installed are listed as skipped. Install them with ``pip install -e
'.[bench]'`` (CPU torch wheel first on a CPU machine), in a virtual
environment of their own: the test environment stays as CI's.

The machine note reads the 1-minute load at the start of the run; the JSON
records the load at the start and at the end (``load_avg_at_start``,
``load_avg_at_end``) and after each table (``load_after``).

Usage::

  python experiments/bench/peers.py [--repeat 15] [--processes 3] [--quick]

Writes ``experiments/results/peers.json`` (``--quick``: ``peers_quick.json``,
small sizes, for the test suite). A run of one part (``--part single`` or
``--part measures``) writes ``peers_single.json`` or ``peers_measures.json``
instead, so it never replaces the full record with half of it.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import inspect
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

from _common import (
  _block,
  check_agree,
  cold_first_calls,
  cpu_load,
  device_info,
  machine_note,
  write_result,
)
from single_call import np_brier, np_classwise_ece, np_conf_ece  # the one numpy-by-hand reference

os.environ.setdefault("TQDM_DISABLE", "1")  # netcal's progress bars

SHARED = pathlib.Path(__file__).resolve().parents[3] / "shared" / "data" / "cifar_logits"
M = 15
STATISTIC = "median of the timed calls (single-call part: the median of the per-process medians)"


def have(module: str) -> bool:
  return importlib.util.find_spec(module) is not None


def softmax(z):
  z = z - z.max(axis=1, keepdims=True)
  e = np.exp(z)
  return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)


def load(name, split="test"):
  d = SHARED / name
  return np.load(d / f"{split}_logits.npy"), np.load(d / f"{split}_labels.npy")


SETTLE = 1  # untimed calls of a contestant before each timed one (``--settle``) ...
SETTLE_MS = 5.0  # ... and more of them until this many ms have passed (``--settle-ms``)


def interleaved(contestants: dict[str, Callable], repeat: int) -> dict:
  """A cold first call each (timed: first call), then ``repeat`` rounds over all contestants.

  JAX's caches are cleared before each jaxcal contestant's first call, so it
  compiles its own programs (not reusing an earlier metric's or
  contestant's); every contestant is then called once, untimed, since the
  clearing evicted the programs of the contestants before it. Each round
  takes the contestants in a new random order (seeded), so no contestant
  always follows the same one: torchmetrics' worker threads spin on after
  its call (jaxcal's ``conf_ece`` at n = 100,000 took 11.8 ms right after it
  and 7.2 ms right after itself, 2026-11-28), and in a fixed round-robin one
  contestant would take that cost in every round. In each round a
  contestant makes :data:`SETTLE` untimed calls, and more until
  :data:`SETTLE_MS` have passed, before its timed one (see the module
  docstring: the previous contestant's spinning threads must not slow it).
  Each entry keeps the first call's result as ``raw`` (for the value check).
  """
  first = cold_first_calls(
    {k: (fn, ()) for k, fn in contestants.items()}, cold=lambda name: name.startswith("jaxcal")
  )
  out = {k: {"first_s": t, "times_s": [], "raw": raw} for k, (t, raw) in first.items()}
  names = list(contestants)
  order = np.random.default_rng(0)
  for _ in range(repeat):
    for i in order.permutation(len(names)):  # a new order each round: no fixed predecessor
      name = names[i]
      fn = contestants[name]
      t0, calls = time.perf_counter(), 0
      while calls < SETTLE or (time.perf_counter() - t0) * 1e3 < SETTLE_MS:
        _block(fn())
        calls += 1
      t0 = time.perf_counter()
      _block(fn())
      out[name]["times_s"].append(time.perf_counter() - t0)
  for r in out.values():
    r["median_s"] = statistics.median(r["times_s"])
    r["best_s"] = min(r["times_s"])
  return out


def _value(v):
  """A contestant's result as a number or a float64 array (``None`` if it is neither)."""
  try:
    a = np.asarray(v, np.float64)
  except (TypeError, ValueError):
    return None
  return float(a) if a.ndim == 0 else a


def _summary(v):
  """A value for the JSON: the number, a short array as a list, else its shape."""
  if v is None or isinstance(v, float):
    return v
  a = np.asarray(v)
  return a.tolist() if a.size <= 16 else {"shape": list(a.shape)}


@dataclasses.dataclass
class Table:
  """One metric at one size: its contestants and how their values are compared.

  Attributes:
    contestants: name -> thunk; ``"jaxcal"`` (the public call) is the reference
      of the value check and the denominator of every ratio.
    rtol, atol: the tolerance of ``_common.check_agree`` against jaxcal's value.
    tolerance: why that tolerance (recorded).
    value_of: name -> the function mapping its result to the compared value
      (default: the result as a number or an array).
    different: name -> why it computes another quantity: its value is
      recorded, not asserted, and it is no reference for ``ratio_vs_fastest``.
  """

  contestants: dict[str, Callable[[], Any]]
  rtol: float
  atol: float
  tolerance: str
  value_of: dict[str, Callable[[Any], Any]] = dataclasses.field(default_factory=dict)
  different: dict[str, str] = dataclasses.field(default_factory=dict)


def run_table(table: Table, repeat: int) -> dict:
  """Times ``table``'s contestants, asserts their values agree, adds the ratios."""
  res = interleaved(table.contestants, repeat)
  values = {k: table.value_of.get(k, _value)(r.pop("raw")) for k, r in res.items()}
  same = {k: v for k, v in values.items() if k not in table.different}
  diffs = check_agree(same, "jaxcal", rtol=table.rtol, atol=table.atol)
  for k, r in res.items():
    r["value"] = _summary(values[k])
  entry = {
    "results": res,
    "agreement": {
      "reference": "jaxcal",
      "rtol": table.rtol,
      "atol": table.atol,
      "tolerance": table.tolerance,
      "max_abs_diff": diffs,
    },
    "different_quantity": dict(table.different),
  }
  entry.update(ratios(res, table.different))
  return entry


def ratios(res: dict, different: dict) -> dict:
  """``ratio_vs_jaxcal`` for each contestant; the fastest same-quantity reference and its ratio."""
  base = res["jaxcal"]["median_s"]
  for r in res.values():
    r["ratio_vs_jaxcal"] = r["median_s"] / base
  refs = [k for k in res if not k.startswith("jaxcal") and k not in different]
  if not refs:
    return {"fastest_reference": None, "ratio_vs_fastest": None}
  best = min(refs, key=lambda k: res[k]["median_s"])
  return {"fastest_reference": best, "ratio_vs_fastest": res[best]["median_s"] / base}


def on_edge(s, m: int = M) -> int:
  """Scores on an inner bin edge ``k/m`` (within float32 rounding) or exactly 1.

  Peers bin an edge score on the other side (torchmetrics and scikit-learn
  ``[k/m, (k+1)/m)``, jaxcal ``((k-1)/m, k/m]``; torchmetrics gives a score
  of exactly 1 a bin of its own), so such scores may land in different bins.
  """
  t = np.asarray(s, np.float64) * m
  k = np.round(t)
  return int(np.sum((np.abs(t - k) < 1e-5) & (k >= 1) & (k <= m - 1)) + np.sum(t == m))


def binned_tolerance(edge: int, units: int) -> tuple[float, float, str]:
  """The tolerance of an l1 binned error over ``units`` scores of which ``edge`` lie on an edge.

  1e-5 relative and 1e-5 absolute for the peers' float32 sums (torchmetrics'
  ``conf_ece`` differs from jaxcal's exact integer sums by 3e-6 at n =
  10^5, C = 100), plus ``2 edge / units``: a score moved to the neighbouring
  bin moves a residual of at most 1 between two bins' sums, so the sum of
  their absolute values changes by at most 2 and the error by at most
  ``2 / units`` (``units``: n, or n C class-wise).
  """
  atol = 1e-5 + 2.0 * edge / units
  why = (
    f"1e-5 relative + 1e-5 absolute (float32 sums) + 2 x {edge} scores on a bin edge / {units} "
    "(a peer may bin an edge score in the neighbouring bin)"
  )
  return 1e-5, atol, why


# ------------------------------------------------------------ numpy by hand


def np_ks(p, y):
  """KS by hand: the top label by ``argmax`` and a gather, one (unstable) ``argsort``.

  The prefix sums (float64) are read only at the ends of runs of equal
  scores, so the order within a run of ties does not change the value and a
  stable sort is not needed (3x slower at n = 10^4).
  """
  r = p.argmax(axis=1)
  c = p[np.arange(len(y)), r]
  o = np.argsort(c)
  cs, d = c[o], np.cumsum((c - (r == y))[o], dtype=np.float64) / len(y)
  end = np.append(cs[1:] != cs[:-1], True)
  return max(float(np.abs(d[end]).max()), 0.0)


# ------------------------------------------------------------------- peers


def sk_conf_ece(p, y, m=M):
  from sklearn.calibration import calibration_curve

  c = p.max(axis=1)
  z = p.argmax(axis=1) == y
  prob_true, prob_pred = calibration_curve(z, c, n_bins=m, strategy="uniform")
  counts = np.bincount(
    np.clip(np.searchsorted(np.linspace(0, 1, m + 1)[1:-1], c), 0, m - 1), minlength=m
  )
  counts = counts[counts > 0]
  return float(np.sum(counts * np.abs(prob_true - prob_pred)) / len(y))


def sk_classwise_ece(p, y, m=M):
  from sklearn.calibration import calibration_curve

  tot = 0.0
  edges = np.linspace(0, 1, m + 1)[1:-1]
  for k in range(p.shape[1]):
    prob_true, prob_pred = calibration_curve(y == k, p[:, k], n_bins=m, strategy="uniform")
    counts = np.bincount(np.searchsorted(edges, p[:, k]), minlength=m)
    tot += np.sum(counts[counts > 0] * np.abs(prob_true - prob_pred)) / len(y)
  return tot / p.shape[1]


def sk_brier():
  """scikit-learn's multiclass ``brier_score_loss`` as jaxcal's Brier score, or why not.

  Since 1.7 it takes multiclass input; its ``scale_by_half="auto"`` halves
  only binary input, so on C > 2 classes it returns ``mean_i sum_r (p_ir -
  1[y_i = r])^2``, jaxcal's ``scores.brier`` (the 2x of an earlier version of
  this script double-counted). ``scale_by_half=False`` says so explicitly.
  Returns ``(function, None)`` or ``(None, reason)``.
  """
  from sklearn.metrics import brier_score_loss

  if "scale_by_half" not in inspect.signature(brier_score_loss).parameters:
    return None, "scikit-learn < 1.7: no multiclass brier_score_loss"
  return (lambda y, p, labels: brier_score_loss(y, p, labels=labels, scale_by_half=False)), None


def part_single(args, repeat) -> dict:
  import jax

  from jaxcal import metrics, scores

  sizes = [(10_000, 10)] if args.quick else [(100_000, 100), (10_000, 10)]
  out = {}
  for _n, k in sizes:
    if args.quick:
      z, y = load("cifar10_resnet110")
      z, y = z[:2000], y[:2000]
    elif k == 100:
      z0, y0 = load("cifar100_densenet121")
      rng = np.random.default_rng(0)
      z = np.tile(z0, (10, 1)) + rng.normal(scale=0.1, size=(10 * len(y0), 100)).astype(np.float32)
      y = np.tile(y0, 10)
    else:
      z, y = load("cifar10_resnet110")
    p = softmax(z.astype(np.float32))
    y = y.astype(np.int64)
    n = len(y)
    pj, yj = jax.device_put(p), jax.device_put(y.astype(np.int32))
    edge_top, edge_all = on_edge(p.max(axis=1)), on_edge(p)
    tasks = {
      "conf_ece": (
        lambda: metrics.conf_ece(p, y),
        jax.jit(lambda a, b: metrics.conf_ece(a, b)),
        lambda: np_conf_ece(p, y),
        binned_tolerance(edge_top, n),
      ),
      "classwise_ece": (
        lambda: metrics.classwise_ece(p, y),
        jax.jit(lambda a, b: metrics.classwise_ece(a, b)),
        lambda: np_classwise_ece(p, y),
        binned_tolerance(edge_all, n * k),
      ),
      "brier": (
        lambda: scores.brier(p, y),
        jax.jit(lambda a, b: scores.brier(a, b)),
        lambda: np_brier(p, y),
        (1e-5, 0.0, "1e-5 relative (float32 row sums)"),
      ),
    }
    for task, (public, jitted, by_hand, (rtol, atol, why)) in tasks.items():
      c = {
        "jaxcal": public,
        "jaxcal_jit_device": lambda jitted=jitted: jitted(pj, yj),
        "numpy": by_hand,
      }
      skipped = {}
      if not have("sklearn"):
        skipped["sklearn"] = "not installed"
      elif task == "conf_ece":
        c["sklearn"] = lambda: sk_conf_ece(p, y)
      elif task == "classwise_ece":
        c["sklearn"] = lambda: sk_classwise_ece(p, y)
      else:
        brier_loss, reason = sk_brier()
        if brier_loss is None:
          skipped["sklearn"] = reason
        else:
          labels = np.arange(k)
          c["sklearn"] = lambda brier_loss=brier_loss, labels=labels: brier_loss(y, p, labels)
      if task == "conf_ece":
        if have("relplot"):
          import relplot.metrics as rm

          c["relplot"] = lambda: rm.binnedECE(p.max(1), (p.argmax(1) == y) * 1.0, M)
        else:
          skipped["relplot"] = "not installed"
        if have("netcal"):
          from netcal.metrics import ECE

          c["netcal"] = lambda: ECE(bins=M).measure(p, y)
        else:
          skipped["netcal"] = "not installed"
        if have("torchmetrics"):
          import torch
          from torchmetrics.functional.classification import multiclass_calibration_error

          pt, yt = torch.from_numpy(p), torch.from_numpy(y)
          c["torchmetrics"] = lambda: float(
            multiclass_calibration_error(pt, yt, num_classes=k, n_bins=M, norm="l1")
          )
        else:
          skipped["torchmetrics"] = "not installed"
      elif task == "classwise_ece":
        if have("relplot"):
          import relplot.metrics as rm

          c["relplot"] = lambda: sum(rm.binnedECE(p[:, j], (y == j) * 1.0, M) for j in range(k)) / k
        else:
          skipped["relplot"] = "not installed"
      entry = run_table(Table(c, rtol, atol, why), repeat)
      key = f"{task}_n{n}_C{k}"
      out[key] = {
        **entry,
        "n": n,
        "C": k,
        "scores_on_bin_edges": edge_all if task == "classwise_ece" else edge_top,
        "skipped": skipped,
        "load_after": cpu_load(),
      }
      print(_line(key, out[key]), flush=True)
  return out


def part_single_processes(args, repeat: int, processes: int) -> dict:
  """:func:`part_single` in ``processes`` fresh processes, one after another, combined.

  Each process times every contestant as :func:`part_single` does (and
  asserts their values agree); a contestant's ``median_s`` is then the
  median of its per-process medians (``process_medians_s``), and
  ``process_ratios_vs_jaxcal`` / ``process_ratios_vs_fastest`` hold each
  process's ratios. XLA:CPU's multi-threaded programs run at one speed for
  the whole of a process, and that speed differs between fresh processes on
  this VM (see the module docstring): one process is one draw of it.
  """
  runs = []
  with tempfile.TemporaryDirectory() as tmp:
    for i in range(processes):
      out = pathlib.Path(tmp) / f"single_{i}.json"
      cmd = [sys.executable, str(pathlib.Path(__file__).resolve()), "--part", "single"]
      cmd += ["--repeat", str(repeat), "--settle", str(SETTLE), "--settle-ms", str(SETTLE_MS)]
      cmd += ["--single-out", str(out)] + (["--quick"] if args.quick else [])
      print(f"process {i + 1} of {processes}", flush=True)
      subprocess.run(cmd, check=True)
      runs.append(json.loads(out.read_text()))
  combined = {}
  for key, first in runs[0].items():
    res = {}
    for name in first["results"]:
      per = [run[key]["results"][name] for run in runs]  # this contestant in each process
      meds = [r["median_s"] for r in per]
      firsts = [r["first_s"] for r in per]
      res[name] = {
        "median_s": statistics.median(meds),
        "best_s": min(r["best_s"] for r in per),
        "first_s": statistics.median(firsts),
        "process_medians_s": meds,
        "process_first_s": firsts,
        "times_s": [r["times_s"] for r in per],
        "value": per[0]["value"],
      }
    entry = {
      "results": res,
      **ratios(res, first["different_quantity"]),
      "agreement": [run[key]["agreement"] for run in runs],  # asserted in each process
      "different_quantity": first["different_quantity"],
      "n": first["n"],
      "C": first["C"],
      "scores_on_bin_edges": first["scores_on_bin_edges"],
      "skipped": first["skipped"],
      "load_after": [run[key]["load_after"] for run in runs],
    }
    jax_meds = res["jaxcal"]["process_medians_s"]
    for r in res.values():
      r["process_ratios_vs_jaxcal"] = [m / j for m, j in zip(r["process_medians_s"], jax_meds)]
    if entry["fastest_reference"] is not None:
      best = res[entry["fastest_reference"]]["process_medians_s"]
      entry["process_ratios_vs_fastest"] = [m / j for m, j in zip(best, jax_meds)]
    combined[key] = entry
    print(_line(key, entry) + "  per-process ratios " + _ratio_ranges(res), flush=True)
  return combined


def _ratio_ranges(res) -> str:
  parts = []
  for name, r in res.items():
    if name != "jaxcal":
      q = r["process_ratios_vs_jaxcal"]
      parts.append(f"{name} {min(q):.2f}-{max(q):.2f}x")
  return ", ".join(parts)


def _line(key, entry):
  res = entry["results"]
  parts = [f"{k} {1e3 * v['median_s']:.2f} ms" for k, v in res.items()]
  best = entry["fastest_reference"]
  vs = f"; fastest reference {best} {entry['ratio_vs_fastest']:.2f}x" if best else ""
  return (
    f"{key}: "
    + ", ".join(parts)
    + f"  (jaxcal first call {res['jaxcal']['first_s']:.2f} s{vs})"
    + (
      f"; not compared: {', '.join(entry['different_quantity'])}"
      if entry["different_quantity"]
      else ""
    )
  )


def part_measures(args, repeat) -> dict:
  import jax.numpy as jnp

  from jaxcal import metrics, recalibrate

  out = {}
  for name in (
    ["cifar10_resnet110"] if args.quick else ["cifar10_resnet110", "cifar100_densenet121"]
  ):
    z, y = load(name)
    zv, yv = load(name, "val")
    if args.quick:
      z, y, zv, yv = z[:2000], y[:2000], zv[:2000], yv[:2000]
    p = softmax(z.astype(np.float32))
    pv = softmax(zv.astype(np.float32))
    y, yv = y.astype(np.int64), yv.astype(np.int64)
    n, k = p.shape
    edge_top = on_edge(p.max(axis=1))
    tables: dict[str, Table] = {}
    smooth = {"jaxcal": lambda: metrics.smooth_ece(p, y)}
    if have("relplot"):
      import relplot

      smooth["relplot"] = lambda: relplot.smECE(
        p.max(1).astype(np.float64), (p.argmax(1) == y) * 1.0
      )
    tables["smooth_ece"] = Table(smooth, 0.0, 1e-6, "1e-6 absolute (tests/test_peers.py)")
    nm = min(n, 5000)
    mmce = {"jaxcal": lambda: metrics.mmce(p[:nm], y[:nm])}
    if have("netcal"):
      from netcal.metrics import MMCE

      mmce["netcal"] = lambda: MMCE().measure(p[:nm], y[:nm])
    tables[f"mmce_n{nm}"] = Table(mmce, 1e-5, 0.0, "1e-5 relative (tests/test_peers.py)")
    for mode in ("top_label", "marginal"):
      t = {"jaxcal": lambda mode=mode: metrics.debiased_ce(p, y, mode=mode)}
      if have("calibration"):
        import calibration

        t["uncertainty_calibration"] = lambda mode=mode: calibration.get_calibration_error(
          p, y, mode=mode.replace("_", "-")
        )
      tables[f"debiased_ce_{mode}"] = Table(t, 1e-5, 0.0, "1e-5 relative (tests/test_peers.py)")
    for norm in ("l2", "max"):
      t = {"jaxcal": lambda norm=norm: metrics.conf_ece(p, y, norm=norm)}
      different = {}
      if have("torchmetrics"):
        import torch
        from torchmetrics.functional.classification import multiclass_calibration_error

        pt, yt = torch.from_numpy(p), torch.from_numpy(y)
        t["torchmetrics"] = lambda norm=norm: float(
          multiclass_calibration_error(pt, yt, num_classes=k, n_bins=M, norm=norm)
        )
        if edge_top:
          different["torchmetrics"] = (
            f"{edge_top} confidences on a bin edge: torchmetrics bins [k/m, (k+1)/m) "
            "(and 1 alone), jaxcal ((k-1)/m, k/m]"
          )
      tables[f"conf_ece_{norm}"] = Table(
        t, 1e-5, 2e-6, "1e-5 relative + 2e-6 absolute, no confidence on a bin edge", {}, different
      )
    tables["ks_ce"] = Table(
      {"jaxcal": lambda: metrics.ks_ce(p, y), "numpy": lambda: np_ks(p, y)},
      0.0,
      1e-6,
      "1e-6 absolute (float32 scores, prefix sums in float64)",
    )
    ns = n if k <= 10 else min(n, 2000)  # quadratic: n = 2,000 at C = 100
    no_peer = (0.0, 0.0, "no peer: jaxcal alone")
    tables[f"skce_unbiased_n{ns}"] = Table(
      {"jaxcal": lambda: metrics.skce(p[:ns], y[:ns])}, *no_peer
    )
    tables["skce_block"] = Table(
      {"jaxcal": lambda: metrics.skce(p, y, estimator="block")}, *no_peer
    )
    if k <= 10:  # the recalibrator peers loop over classes: C = 10 only
      beta = {"jaxcal": lambda: recalibrate.fit("beta", zv, yv)}
      maps = {"jaxcal": lambda rc: np.asarray(rc.classwise(jnp.asarray(pv)))}
      if have("betacal"):
        from betacal import BetaCalibration

        def betacal_loop():
          q = softmax(zv.astype(np.float32))
          return [BetaCalibration("abm").fit(q[:, j], yv == j) for j in range(k)]

        beta["betacal"] = betacal_loop
        maps["betacal"] = lambda fits: np.stack(
          [f.predict(pv[:, j]) for j, f in enumerate(fits)], axis=1
        )
      tables["fit_beta"] = Table(
        beta,
        0.0,
        2e-2,
        "2e-2 absolute on the per-class maps over the val split: betacal's scikit-learn "
        "solver stops at its default tolerance on saturated CIFAR probabilities "
        "(tests/test_peers.py)",
        maps,
      )
      tables["fit_ensemble_temperature"] = Table(
        {
          "jaxcal": lambda: recalibrate.fit("ensemble_temperature", zv, yv),
          "authors_scipy": lambda: ets_scipy(zv.astype(np.float64), yv),
        },
        2e-3,
        5e-4,
        "temperature and the three weights, 2e-3 relative + 5e-4 absolute: two optimisers "
        "(tests/test_recal_measures.py)",
        {"jaxcal": lambda rc: np.r_[float(rc.temperature), np.asarray(rc.weights, np.float64)]},
      )
      bbq = {"jaxcal": lambda: recalibrate.fit("bbq", zv, yv)}
      different = {}
      if have("netcal"):
        from netcal.binning import BBQ

        bbq["netcal_bbq_bic"] = lambda: BBQ().fit(softmax(zv.astype(np.float32)), yv)
        different["netcal_bbq_bic"] = (
          "a different method under the same name: netcal scores equal-width binnings by "
          "BIC, jaxcal averages the paper's BDeu-scored models; timed, not compared"
        )
      tables["fit_bbq"] = Table(
        bbq,
        0.0,
        0.0,
        "no peer computes the same quantity",
        {"jaxcal": lambda rc: None, "netcal_bbq_bic": lambda fit: None},
        different,
      )
    for key, table in tables.items():
      slow = key.startswith(("fit_", "skce_unbiased"))
      entry = run_table(table, max(2, repeat // 2) if slow else repeat)
      full = f"{key}_{name}"
      rows = nm if key.startswith("mmce") else n  # MMCE runs on its first nm rows
      out[full] = {**entry, "n": int(rows), "C": int(k), "load_after": cpu_load()}
      if key.startswith("conf_ece"):
        out[full]["scores_on_bin_edges"] = edge_top
      print(_line(full, out[full]), flush=True)
  return out


def ets_scipy(z, y):
  """The authors' ETS (Mix-n-Match ``ets_calibrate``, loss 'mse'): L-BFGS-B, then SLSQP.

  Returns ``[T, w_1, w_2, w_3]``.
  """
  import scipy.optimize as so

  k = z.shape[1]
  onehot = np.eye(k)[y]

  def sm(a):
    a = a - a.max(1, keepdims=True)
    e = np.exp(a)
    return e / e.sum(1, keepdims=True)

  t = so.minimize(
    lambda t: np.mean((sm(z / t) - onehot) ** 2),
    1.0,
    method="L-BFGS-B",
    bounds=((0.05, 5.0),),
    tol=1e-12,
  ).x[0]
  p0, p1, p2 = sm(z / t), sm(z), np.full(z.shape, 1.0 / k)
  w = so.minimize(
    lambda w: np.mean((w[0] * p0 + w[1] * p1 + w[2] * p2 - onehot) ** 2),
    (1.0, 0.0, 0.0),
    method="SLSQP",
    constraints={"type": "eq", "fun": lambda w: np.sum(w) - 1},
    bounds=((0, 1),) * 3,
    tol=1e-12,
  ).x
  return np.r_[t, w]


def result_name(part: str, quick: bool) -> str:
  """The result file's name: ``peers`` for both parts, ``peers_<part>`` for one
  (``_quick`` appended for the small sizes), so a partial run keeps the full
  record intact."""
  name = "peers" if part == "all" else f"peers_{part}"
  return f"{name}_quick" if quick else name


def main(argv=None) -> dict:
  global SETTLE, SETTLE_MS
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--repeat", type=int, default=5)
  ap.add_argument("--quick", action="store_true", help="small sizes (the test suite)")
  ap.add_argument("--settle", type=int, default=SETTLE, help="untimed calls before each timed call")
  ap.add_argument(
    "--settle-ms",
    type=float,
    default=SETTLE_MS,
    help="and more untimed calls until this many ms have passed",
  )
  ap.add_argument("--part", choices=["all", "single", "measures"], default="all")
  ap.add_argument(
    "--processes",
    type=int,
    default=3,
    help="fresh processes for the single-call part (medians of their medians; 1 with --quick)",
  )
  ap.add_argument("--single-out", help=argparse.SUPPRESS)  # a child process's single-call part
  args = ap.parse_args(argv)
  repeat = 2 if args.quick else args.repeat
  SETTLE = 0 if args.quick else args.settle
  SETTLE_MS = 0.0 if args.quick else args.settle_ms
  if args.single_out:  # one of part_single_processes' children: the part alone, no result file
    pathlib.Path(args.single_out).write_text(json.dumps(part_single(args, repeat)))
    return {}
  info = device_info()  # load_avg_at_start: before any work
  versions = {}
  for mod in ("sklearn", "relplot", "netcal", "torchmetrics", "torch", "betacal", "calibration"):
    if have(mod):
      m = __import__(mod)
      versions[mod] = getattr(m, "__version__", "installed")
    else:
      versions[mod] = None
  print(f"load at start {info.get('load_avg_at_start')}; peers {versions}", flush=True)
  result = {
    "peers": versions,
    "repeat": repeat,
    "settle_calls": SETTLE,
    "settle_ms": SETTLE_MS,
    "statistic": STATISTIC,
    **info,
  }
  processes = 1 if args.quick else args.processes
  result["processes"] = processes
  if args.part in ("all", "single"):
    if processes == 1:
      result["single_call"] = part_single(args, repeat)
    else:
      result["single_call"] = part_single_processes(args, repeat, processes)
  if args.part in ("all", "measures"):
    result["measures"] = part_measures(args, repeat)
  result["load_avg_at_end"] = cpu_load()
  result["note"] = machine_note(info.get("load_avg_at_start"), info.get("cpu_count"), STATISTIC)
  path = write_result(result_name(args.part, args.quick), result)
  print(f"wrote {path}")
  return result


if __name__ == "__main__":
  main()
