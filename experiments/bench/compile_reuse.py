"""Benchmark: what a sweep pays for each new option value, and for many states or models.

A user who sweeps a fit's option (a seed, an iteration limit, a LoCal Net's
bandwidth or learning rate), merges many streaming states, or evaluates many
checkpoints of different lengths pays XLA compilation on top of the work:
this benchmark times the first call and the call with one option changed,
each case in its own fresh Python process (no compiled program inherited, no
persistent compilation cache), and counts the traces and XLA compilations
during each (JAX's ``/jax/core/compile/*`` events). Real data throughout: the
CIFAR-10 ResNet-110 logits of ``../shared/data/cifar_logits`` (``val``
split for the fits, ``test`` for the metrics) and, for ``evaluate``, all 12
CIFAR models' test logits.

Cases (``first`` then ``second``; ``reference``, where there is one, is what
a user would write instead, in the same process after ``first``):

* ``dirichlet_seed``: ``fit("dirichlet", ..., reg_grid=(1e3, 1e1), num_folds=3)``
  on 2,000 samples with ``seed=0``, then ``seed=1`` (other folds);
* ``temperature_max_iter``: ``fit("temperature")`` with ``max_iter=200``, then 100;
* ``local_net_bandwidth`` / ``local_net_learning_rate`` / ``kcal_bandwidth``:
  ``fit("local_net" | "kcal")`` on 2,000 samples (the logits as the backbone
  features, PCA to 8 dimensions, 2 epochs, no early stopping), then the same fit with another bandwidth
  (10 -> 5) or learning rate (1e-3 -> 3e-3), and its predictions;
* ``reduce_fixed_bins_128`` / ``reduce_calibration_128``: 128 streaming states
  (``FixedBins`` with 15 bins; ``Calibration`` keeping 128 top-label records
  per state), one per slice of the 10,000 test samples, stacked and merged by
  ``reduce()`` (``first``, under ``jax.jit`` for ``FixedBins``) against the
  user's loop ``s_0.merge(s_1).merge(...)`` (``reference``, jitted the same);
* ``evaluate_device_list_128``: ``jaxcal.evaluate`` of 128 models (the 12
  CIFAR models' test logits cut to 128 distinct lengths 9,000-9,889) held as
  device arrays, ``conf_ece`` and ``brier``; ``reference``: the same models as
  a numpy list in a process of its own (``evaluate_numpy_list_128``);
* ``report_new_n``: ``calibration_report`` of the ResNet-110 test logits at
  n = 10,000, then at n = 9,001 (one size bucket, 10,240 rows); ``reference``:
  the n = 9,001 report again (every program compiled: the floor);
* ``compare_new_n``: ``compare_report`` of three CIFAR-10 models (ResNet-110,
  DenseNet-121, Wide ResNet; 50 resamples) at n = 10,000, then at 9,001;
  ``reference`` as above.

Writes ``experiments/results/compile_reuse.json``. Usage:
  python experiments/bench/compile_reuse.py            # every case
  python experiments/bench/compile_reuse.py --case dirichlet_seed
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

CASES = (
  "dirichlet_seed",
  "temperature_max_iter",
  "local_net_bandwidth",
  "local_net_learning_rate",
  "kcal_bandwidth",
  "reduce_fixed_bins_128",
  "reduce_calibration_128",
  "evaluate_device_list_128",
  "evaluate_numpy_list_128",
  "report_new_n",
  "compare_new_n",
)
MODEL = "cifar10_resnet110"


def _counted(fn):
  """``(seconds, traces, compiles, result)`` of ``fn()``, blocking on its result."""
  import jax

  events = []

  def listen(event, duration, **kwargs):
    if event.startswith("/jax/core/compile/"):
      events.append(event)

  from jax._src import monitoring

  jax.monitoring.register_event_duration_secs_listener(listen)
  try:
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn())
    dt = time.perf_counter() - t0
  finally:
    monitoring.unregister_event_duration_listener(listen)
  traces = sum(e.endswith("jaxpr_trace_duration") for e in events)
  compiles = sum(e.endswith("backend_compile_duration") for e in events)
  return dt, traces, compiles, out


def _entry(measured) -> dict:
  dt, traces, compiles, _ = measured
  return {"seconds": round(dt, 4), "traces": traces, "compiles": compiles}


def _load(split: str, name: str = MODEL):
  import numpy as np

  from jaxcal.data import dataset_dir

  root = dataset_dir("cifar_logits") / name
  z = np.load(root / f"{split}_logits.npy").astype(np.float32)
  y = np.load(root / f"{split}_labels.npy").astype(np.int32)
  return z, y


def worker(case: str) -> dict:
  """One case in this (fresh) process."""
  import warnings

  import jax
  import jax.numpy as jnp
  import numpy as np

  from jaxcal import streaming
  from jaxcal.recalibrate import fit

  warnings.simplefilter("ignore", RuntimeWarning)  # a 2-epoch LoCal Net says it stopped early
  out: dict = {"case": case}
  if case in ("dirichlet_seed", "temperature_max_iter"):
    z, y = _load("val")
    z, y = z[:2000], y[:2000]
    if case == "dirichlet_seed":
      opts = dict(reg_grid=(1e3, 1e1), num_folds=3)
      run = lambda seed: fit("dirichlet", z, y, seed=seed, **opts).weight
      out["first"] = _entry(_counted(lambda: run(0)))
      out["second"] = _entry(_counted(lambda: run(1)))
    else:
      run = lambda k: fit("temperature", z, y, max_iter=k).temperature
      out["first"] = _entry(_counted(lambda: run(200)))
      out["second"] = _entry(_counted(lambda: run(100)))
  elif case in ("local_net_bandwidth", "local_net_learning_rate", "kcal_bandwidth"):
    z, y = _load("val")
    z, y = z[:2000], y[:2000]
    method = "kcal" if case.startswith("kcal") else "local_net"
    base = dict(features=z, pca_dim=8, epochs=2, patience=None, verbose=False, seed=0)
    changed = dict(learning_rate=3e-3) if case.endswith("learning_rate") else dict(bandwidth=5.0)

    def run(**kw):
      rc = fit(method, z, y, **{**base, **kw})
      return rc(z, z)  # the features: the logits, as the fit took them

    out["first"] = _entry(_counted(lambda: run()))
    out["second"] = _entry(_counted(lambda: run(**changed)))
  elif case.startswith("reduce_"):
    z, y = _load("test")
    p = jax.nn.softmax(jnp.asarray(z), axis=1)
    yj = jnp.asarray(y)
    k = 128
    edges = np.linspace(0, p.shape[0], k + 1).astype(int)
    if case == "reduce_fixed_bins_128":
      make = lambda: streaming.FixedBins.empty(10, num_bins=15)
    else:
      make = lambda: streaming.Calibration.empty(10, num_bins=15, capacity=128)
    states = [make().update(p[a:b], yj[a:b]) for a, b in zip(edges[:-1], edges[1:])]
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *states)

    def loop(s):
      acc = jax.tree.map(lambda x: x[0], s)
      for i in range(1, k):
        acc = acc.merge(jax.tree.map(lambda x, i=i: x[i], s))
      return acc

    jit = case == "reduce_fixed_bins_128"  # Calibration's reduce: eager, as a user calls it
    reduce_fn = jax.jit(lambda s: s.reduce()) if jit else (lambda s: s.reduce())
    loop_fn = jax.jit(loop) if jit else loop
    first = _counted(lambda: reduce_fn(stacked).compute())
    out["first"] = _entry(first)
    out["second"] = _entry(_counted(lambda: reduce_fn(stacked).compute()))
    ref = _counted(lambda: loop_fn(stacked).compute())
    out["reference"] = _entry(ref)
    same = jax.tree.map(lambda a, b: bool(jnp.array_equal(a, b, equal_nan=True)), first[3], ref[3])
    out["bitwise_equal_to_reference"] = all(jax.tree.leaves(same))
  else:
    raise ValueError(case)
  return out


def worker_report(case: str) -> dict:
  """A report (or a comparison of three models) at n = 10,000, then at 9,001, then again."""
  from jaxcal import report

  names = (MODEL, "cifar10_densenet121", "cifar10_wide_resnet")
  data = {nm: _load("test", nm) for nm in (names if case == "compare_new_n" else names[:1])}

  def run(n):
    if case == "report_new_n":
      z, y = data[MODEL]
      return report.calibration_report(z[:n], y[:n])["metrics"]["Brier"]["estimate"]
    models = {nm: (z[:n], y[:n]) for nm, (z, y) in data.items()}
    return report.compare_report(models, resamples=50)["metrics"][MODEL]["Brier"]["estimate"]

  out = {"case": case}
  out["first"] = _entry(_counted(lambda: run(10_000)))
  out["second"] = _entry(_counted(lambda: run(9_001)))
  out["reference"] = _entry(_counted(lambda: run(9_001)))
  return out


def worker_evaluate(case: str) -> dict:
  """``evaluate`` of 128 models of distinct lengths, as device arrays or as numpy arrays."""
  import jax
  from study import MODELS as names  # the 12 CIFAR models, as the study benchmark's

  import jaxcal

  data = [_load("test", nm) for nm in names]
  device = case == "evaluate_device_list_128"
  zs, ys = {}, {}
  for i in range(128):
    z, y = data[i % len(data)]
    n = 9000 + 7 * i  # 128 distinct lengths
    key = f"{names[i % len(names)]}@{n}"
    zs[key] = jax.device_put(z[:n]) if device else z[:n]
    ys[key] = jax.device_put(y[:n]) if device else y[:n]
  jax.block_until_ready((zs, ys))

  def run():
    return jaxcal.evaluate(zs, ys, ["conf_ece", "brier"], from_logits=True).values

  out = {"case": case}
  out["first"] = _entry(_counted(run))
  out["second"] = _entry(_counted(run))
  return out


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--case", choices=CASES, action="append", help="run only these cases")
  ap.add_argument("--worker", choices=CASES, help=argparse.SUPPRESS)
  ap.add_argument("--name", default="compile_reuse", help="results file name")
  args = ap.parse_args()
  if args.worker:
    if args.worker.startswith("evaluate_"):
      res = worker_evaluate(args.worker)
    elif args.worker.endswith("_new_n"):
      res = worker_report(args.worker)
    else:
      res = worker(args.worker)
    print(json.dumps(res))
    return
  from _common import device_info, machine_note, write_result

  env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
  env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
  results = {}
  for case in args.case or CASES:
    proc = subprocess.run(
      [sys.executable, __file__, "--worker", case],
      capture_output=True,
      text=True,
      env=env,
      timeout=900,
    )
    if proc.returncode != 0:
      results[case] = {"error": proc.stderr[-2000:]}
    else:
      results[case] = json.loads(proc.stdout.strip().splitlines()[-1])
    r = results[case]
    line = f"{case:28s}"
    for part in ("first", "second", "reference"):
      if part in r:
        e = r[part]
        line += f"  {part} {e['seconds']:7.2f} s ({e['traces']} traces, {e['compiles']} compiles)"
    print(line if "error" not in r else f"{case}: error\n{r['error']}", flush=True)
  info = device_info()
  info["machine_note"] = machine_note(info.get("load_avg_at_start"))
  path = write_result(args.name, {"cases": results, **info})
  print(f"wrote {path}")


if __name__ == "__main__":
  main()
