"""Benchmark: jaxcal against the peer libraries on the same data, one call each.

Two parts, each a table of contestants timed in one process, interleaved
(``--repeat`` rounds, each over the contestants in a new seeded random
order) after one warm-up call each; the warm-up (first-call, i.e. compile)
time is reported beside the median and the best of the timed calls. Every
contestant's value is recorded too, so the table shows they computed the
same number.

1. **Single call** (issue 15): ``conf_ece`` (15 equal-width bins),
   ``classwise_ece`` (15 equal-width bins) and ``brier`` on numpy float32
   input, at n = 100,000, C = 100 (the CIFAR-100 DenseNet-121 test logits
   tiled 10x with N(0, 0.1^2) noise added to the logits) and at n = 10,000,
   C = 10 (CIFAR-10 ResNet-110 test logits). Contestants: jaxcal's public
   call (validation included), jaxcal inside a user ``jit`` on device
   arrays, numpy by hand (the best vectorised code: one ``bincount``),
   scikit-learn (``calibration_curve`` + the bin counts; multiclass
   ``brier_score_loss``), relplot (``binnedECE``), netcal (``ECE``) and
   torchmetrics (``multiclass_calibration_error``). Class-wise peers that
   only have a binary error are looped over the classes, as a user would.
2. **New measures** on the CIFAR test logits (C = 10 and C = 100, n =
   10,000): smooth ECE vs relplot ``smECE``; MMCE vs netcal ``MMCE`` (n =
   5,000: netcal builds the n x n matrix); debiased CE vs
   uncertainty-calibration; RMS / max norms vs torchmetrics; KS vs numpy by
   hand; SKCE (no peer: unbiased estimator at n = 2,000 for C = 100, block
   estimator, timed alone); and, on CIFAR-10, the recalibrators fitted on
   the ``val`` split: beta vs betacal (a loop over classes), ensemble
   temperature scaling vs the authors' scipy procedure, BBQ vs netcal's BBQ
   (a different method under the same name: BIC scores, equal-width bins).

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
(``process_medians_s``, ``process_ratios_vs_jaxcal``).

Ratios are ``peer median / jaxcal public-call median`` (> 1: jaxcal faster).
Peers that are not installed are listed as skipped. Install them with
``pip install -e '.[bench]'`` (CPU torch wheel first on a CPU machine).

Usage::

  python experiments/bench/peers.py [--repeat 15] [--processes 3] [--quick]

Writes ``experiments/results/peers.json`` (``--quick``: ``peers_quick.json``,
small sizes, for the test suite). A run of one part (``--part single`` or
``--part measures``) writes ``peers_single.json`` or ``peers_measures.json``
instead, so it never replaces the full record with half of it.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

from _common import _block, cpu_load, device_info, machine_note, write_result
from single_call import np_brier, np_classwise_ece, np_conf_ece  # the one numpy-by-hand reference

os.environ.setdefault("TQDM_DISABLE", "1")  # netcal's progress bars

SHARED = pathlib.Path(__file__).resolve().parents[3] / "shared" / "data" / "cifar_logits"
M = 15


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
  """Warm-up call each (timed: first call), then ``repeat`` rounds over all contestants.

  Each round takes the contestants in a new random order (seeded), so no
  contestant always follows the same one: torchmetrics' worker threads spin
  on after its call (jaxcal's ``conf_ece`` at n = 100,000 took 11.8 ms right
  after it and 7.2 ms right after itself, 2026-11-28), and in a fixed
  round-robin one contestant would take that cost in every round. In each
  round a contestant makes :data:`SETTLE` untimed calls, and more until
  :data:`SETTLE_MS` have passed, before its timed one (see the module
  docstring: the previous contestant's spinning threads must not slow it).
  """
  out = {}
  for name, fn in contestants.items():
    t0 = time.perf_counter()
    val = _block(fn())
    out[name] = {"first_s": time.perf_counter() - t0, "times_s": [], "value": _value(val)}
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
  try:
    a = np.asarray(v, np.float64)
    return float(a) if a.ndim == 0 else None
  except (TypeError, ValueError):
    return None


# ------------------------------------------------------------ numpy by hand


def np_ks(p, y):
  c = p.max(axis=1)
  z = p.argmax(axis=1) == y
  o = np.argsort(c, kind="stable")
  cs, d = c[o], np.cumsum((c - z)[o]) / len(y)
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
    pj, yj = jax.device_put(p), jax.device_put(y.astype(np.int32))
    tasks = {
      "conf_ece": (
        lambda: metrics.conf_ece(p, y),
        jax.jit(lambda a, b: metrics.conf_ece(a, b)),
        lambda: np_conf_ece(p, y),
      ),
      "classwise_ece": (
        lambda: metrics.classwise_ece(p, y),
        jax.jit(lambda a, b: metrics.classwise_ece(a, b)),
        lambda: np_classwise_ece(p, y),
      ),
      "brier": (
        lambda: scores.brier(p, y),
        jax.jit(lambda a, b: scores.brier(a, b)),
        lambda: np_brier(p, y),
      ),
    }
    for task, (public, jitted, by_hand) in tasks.items():
      c = {
        "jaxcal": public,
        "jaxcal_jit_device": lambda jitted=jitted: jitted(pj, yj),
        "numpy": by_hand,
      }
      skipped = {}
      if have("sklearn"):
        if task == "conf_ece":
          c["sklearn"] = lambda: sk_conf_ece(p, y)
        elif task == "classwise_ece":
          c["sklearn"] = lambda: sk_classwise_ece(p, y)
        else:
          from sklearn.metrics import brier_score_loss

          labels = np.arange(k)
          c["sklearn"] = lambda: 2.0 * brier_score_loss(y, p, labels=labels)
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
      elif task == "classwise_ece" and have("relplot"):
        import relplot.metrics as rm

        c["relplot"] = lambda: sum(rm.binnedECE(p[:, j], (y == j) * 1.0, M) for j in range(k)) / k
      res = interleaved(c, repeat)
      base = res["jaxcal"]["median_s"]
      for r in res.values():
        r["ratio_vs_jaxcal"] = r["median_s"] / base
      key = f"{task}_n{len(y)}_C{k}"
      out[key] = {"results": res, "skipped": skipped, "load_after": cpu_load()}
      print(_line(key, res), flush=True)
  return out


def part_single_processes(args, repeat: int, processes: int) -> dict:
  """:func:`part_single` in ``processes`` fresh processes, one after another, combined.

  Each process times every contestant as :func:`part_single` does; a
  contestant's ``median_s`` is then the median of its per-process medians
  (``process_medians_s``), and ``process_ratios_vs_jaxcal`` holds each
  process's ratio. XLA:CPU's multi-threaded programs run at one speed for
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
    base = res["jaxcal"]["median_s"]
    jax_meds = res["jaxcal"]["process_medians_s"]
    for r in res.values():
      r["ratio_vs_jaxcal"] = r["median_s"] / base
      r["process_ratios_vs_jaxcal"] = [m / j for m, j in zip(r["process_medians_s"], jax_meds)]
    combined[key] = {
      "results": res,
      "skipped": first["skipped"],
      "load_after": [run[key]["load_after"] for run in runs],
    }
    print(_line(key, res) + "  per-process ratios " + _ratio_ranges(res), flush=True)
  return combined


def _ratio_ranges(res) -> str:
  parts = []
  for name, r in res.items():
    if name != "jaxcal":
      q = r["process_ratios_vs_jaxcal"]
      parts.append(f"{name} {min(q):.2f}-{max(q):.2f}x")
  return ", ".join(parts)


def _line(key, res):
  parts = [f"{k} {1e3 * v['median_s']:.2f} ms" for k, v in res.items()]
  return f"{key}: " + ", ".join(parts) + f"  (jaxcal first call {res['jaxcal']['first_s']:.2f} s)"


def part_measures(args, repeat) -> dict:
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
    k = p.shape[1]
    f, correct = p.max(1), (p.argmax(1) == y) * 1.0
    tables: dict[str, dict[str, Callable]] = {}
    tables["smooth_ece"] = {"jaxcal": lambda: metrics.smooth_ece(p, y)}
    if have("relplot"):
      import relplot

      f64 = f.astype(np.float64)
      tables["smooth_ece"]["relplot"] = lambda: relplot.smECE(f64, correct)
    nm = min(len(y), 5000)
    tables["mmce_n5000"] = {"jaxcal": lambda: metrics.mmce(p[:nm], y[:nm])}
    if have("netcal"):
      from netcal.metrics import MMCE

      tables["mmce_n5000"]["netcal"] = lambda: MMCE().measure(p[:nm], y[:nm])
    for mode in ("top_label", "marginal"):
      t = {"jaxcal": lambda mode=mode: metrics.debiased_ce(p, y, mode=mode)}
      if have("calibration"):
        import calibration

        t["uncertainty_calibration"] = lambda mode=mode: calibration.get_calibration_error(
          p, y, mode=mode.replace("_", "-")
        )
      tables[f"debiased_ce_{mode}"] = t
    for norm in ("l2", "max"):
      t = {"jaxcal": lambda norm=norm: metrics.conf_ece(p, y, norm=norm)}
      if have("torchmetrics"):
        import torch
        from torchmetrics.functional.classification import multiclass_calibration_error

        pt, yt = torch.from_numpy(p), torch.from_numpy(y)
        t["torchmetrics"] = lambda norm=norm: float(
          multiclass_calibration_error(pt, yt, num_classes=k, n_bins=M, norm=norm)
        )
      tables[f"conf_ece_{norm}"] = t
    tables["ks_ce"] = {"jaxcal": lambda: metrics.ks_ce(p, y), "numpy": lambda: np_ks(p, y)}
    ns = len(y) if k <= 10 else min(len(y), 2000)  # quadratic: n = 2,000 at C = 100
    tables[f"skce_unbiased_n{ns}"] = {"jaxcal": lambda: metrics.skce(p[:ns], y[:ns])}
    tables["skce_block"] = {"jaxcal": lambda: metrics.skce(p, y, estimator="block")}
    if k > 10:  # the recalibrator peers loop over classes: C = 10 only
      _run_tables(tables, name, len(y), k, repeat, out)
      continue
    tables["fit_beta"] = {"jaxcal": lambda: recalibrate.fit("beta", zv, yv).a}
    if have("betacal"):
      from betacal import BetaCalibration

      def betacal_loop():
        return [BetaCalibration("abm").fit(pv[:, j], yv == j) for j in range(k)]

      tables["fit_beta"]["betacal"] = betacal_loop
    tables["fit_ensemble_temperature"] = {
      "jaxcal": lambda: recalibrate.fit("ensemble_temperature", zv, yv).weights,
      "authors_scipy": lambda: ets_scipy(zv.astype(np.float64), yv),
    }
    tables["fit_bbq"] = {"jaxcal": lambda: recalibrate.fit("bbq", zv, yv).values}
    if have("netcal"):
      from netcal.binning import BBQ

      tables["fit_bbq"]["netcal_bbq_bic"] = lambda: BBQ().fit(pv, yv)
    _run_tables(tables, name, len(y), k, repeat, out)
  return out


def _run_tables(tables, name, n, k, repeat, out):
  for key, c in tables.items():
    slow = key.startswith(("fit_", "skce_unbiased"))
    res = interleaved(c, max(2, repeat // 2) if slow else repeat)
    base = res["jaxcal"]["median_s"]
    for r in res.values():
      r["ratio_vs_jaxcal"] = r["median_s"] / base
    full = f"{key}_{name}"
    out[full] = {"results": res, "n": int(n), "C": int(k), "load_after": cpu_load()}
    print(_line(full, res), flush=True)


def ets_scipy(z, y):
  """The authors' ETS (Mix-n-Match ``ets_calibrate``, loss 'mse'): L-BFGS-B, then SLSQP."""
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
  return so.minimize(
    lambda w: np.mean((w[0] * p0 + w[1] * p1 + w[2] * p2 - onehot) ** 2),
    (1.0, 0.0, 0.0),
    method="SLSQP",
    constraints={"type": "eq", "fun": lambda w: np.sum(w) - 1},
    bounds=((0, 1),) * 3,
    tol=1e-12,
  ).x


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
  info = device_info()
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
  result["note"] = machine_note(result["load_avg_at_end"], info.get("cpu_count"))
  path = write_result(result_name(args.part, args.quick), result)
  print(f"wrote {path}")
  return result


if __name__ == "__main__":
  main()
