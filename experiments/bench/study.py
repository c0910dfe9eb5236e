"""Benchmark: a whole calibration study in one call against a per-model loop.

The 12 CIFAR models of ``../shared/data/cifar_logits`` (test split; eight
CIFAR-10 and four CIFAR-100 models, n = 10,000 each) × every binned error
(``conf_ece``, ``conf_ce``, ``conf_ce_corr``, ``classwise_ce``,
``classwise_ece``, ``ecce``, each at its default binning) × 200 bin counts
(2..201) × 1,500 linear + 1,500 rank utilities:

* **study**: one ``jaxcal.evaluate(...)`` call (logits in, softmax inside);
* **loop**: what a user writes today: for each model, each error's public
  function with the 200 bin counts as one array, then ``utility.uc_sweep`` for
  each utility family (``from_logits=True`` throughout).

Both sides get the same pre-sampled utilities, and each side runs in its own
fresh process (so that neither inherits the other's compiled programs, and
each has its own peak memory) with ``N`` forced CPU devices, N in 1, 4, 8.
Measured per process: the first call (tracing + compilation + run), the
number of XLA compilations and their total time during it (JAX's
``/jax/core/compile/*`` duration events: backend compile plus lowering; the
count of XLA compilations includes the tiny copy programs that
``jnp.asarray`` of a numpy array compiles once per shape, so the programs
taking at least 0.1 s to compile are counted apart), the
steady state (best of ``--repeat`` further calls), and the peak resident
memory above the resident memory after loading the data (``VmHWM`` reset
before the first call). Two data layouts:

* ``same_n``: every model on its n = 10,000 test samples;
* ``different_n``: model ``i`` on its first ``10,000 - 250 i`` samples (the
  issue's setting: the loop compiles for every model, the study shares a
  program per size bucket).

Nothing here runs on a GPU (none was lent to this work).

  python experiments/bench/study.py            # writes results/study.json
  python experiments/bench/study.py --quick    # small smoke run, results/study_quick.json
  python experiments/bench/study.py --n 2000 --utilities 300 --name study_small  # smaller data
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
METRICS = ["conf_ece", "conf_ce", "conf_ce_corr", "classwise_ce", "classwise_ece", "ecce"]
MODELS = (
  "cifar10_densenet121",
  "cifar10_resnet110",
  "cifar10_resnet50",
  "cifar10_wide_resnet",
  "focal_cifar10_densenet121",
  "focal_cifar10_resnet110",
  "focal_cifar10_resnet50",
  "focal_cifar10_wide_resnet",
  "cifar100_densenet121",
  "cifar100_resnet110",
  "cifar100_resnet50",
  "cifar100_wide_resnet",
)


def _rss(field: str) -> int:
  for line in open("/proc/self/status"):
    if line.startswith(field):
      return int(line.split()[1]) * 1024
  return -1


def worker(args) -> dict:
  """One side, one device count, one layout: runs in a fresh process."""
  import jax
  import numpy as np

  import jaxcal
  from jaxcal import metrics, utility
  from jaxcal.data import dataset_dir

  root = dataset_dir("cifar_logits")
  zs, ys, names = [], [], []
  for i, name in enumerate(MODELS[: args.models]):
    z = np.load(root / name / "test_logits.npy")
    y = np.load(root / name / "test_labels.npy").astype(np.int32)
    n = args.n - (args.step * i if args.layout == "different_n" else 0)
    zs.append(z[:n])
    ys.append(y[:n])
    names.append(name)
  bins = np.arange(2, 2 + args.bins, dtype=np.int32)
  us = {}
  for c in sorted({z.shape[1] for z in zs}):
    us[c] = {
      "linear": utility.sample_linear(jax.random.key(0), args.utilities, c),
      "rank": utility.sample_rank(jax.random.key(1), args.utilities, c),
    }
  jax.block_until_ready(us)

  compiles: list[tuple[str, float]] = []
  jax.monitoring.register_event_duration_secs_listener(
    lambda ev, dur, **_: compiles.append((ev, dur)) if ev.startswith("/jax/core/compile/") else None
  )

  if args.side == "study":

    def run():
      res = jaxcal.evaluate(
        dict(zip(names, zs)),
        dict(zip(names, ys)),
        METRICS,
        num_bins=bins,
        utilities={"linear": lambda c: us[c]["linear"], "rank": lambda c: us[c]["rank"]},
        from_logits=True,
      )
      return res.values

  else:

    def run():
      out = {}
      for name, z, y in zip(names, zs, ys):
        for m in METRICS:
          out[(name, m)] = getattr(metrics, m)(z, y, bins, from_logits=True)
        for fam in ("linear", "rank"):
          out[(name, fam)] = utility.uc_sweep(z, y, us[z.shape[1]][fam], from_logits=True)
      return jax.block_until_ready(out)

  base = _rss("VmRSS:")
  with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # VmHWM := current RSS
  t0 = time.perf_counter()
  first_out = run()
  first = time.perf_counter() - t0
  backend = [d for ev, d in compiles if ev.endswith("backend_compile_duration")]
  n_backend = len(backend)
  compile_s = sum(d for ev, _d in compiles for d in [_d] if not ev.endswith("jaxpr_trace_duration"))
  peak = _rss("VmHWM:")
  times = []
  for _ in range(args.repeat):
    t0 = time.perf_counter()
    run()
    times.append(time.perf_counter() - t0)
  summary = {}
  if args.side == "study":
    for k, v in first_out.items():
      summary[k] = float(np.mean(v))
  else:
    for k in METRICS + ["linear", "rank"]:
      summary["uc:" + k if k in ("linear", "rank") else k] = float(
        np.mean([np.mean(np.asarray(first_out[(nm, k)])) for nm in names])
      )
  return {
    "side": args.side,
    "layout": args.layout,
    "devices": jax.device_count(),
    "n": [int(z.shape[0]) for z in zs],
    "first_call_s": first,
    "compilations": n_backend,
    "major_compilations": sum(1 for d in backend if d >= 0.1),
    "backend_compile_s_sorted": sorted((round(d, 3) for d in backend), reverse=True)[:40],
    "compile_s": compile_s,
    "trace_s": sum(d for ev, d in compiles if ev.endswith("jaxpr_trace_duration")),
    "lowering_s": sum(d for ev, d in compiles if ev.endswith("jaxpr_to_mlir_module_duration")),
    "backend_compile_s": sum(backend),
    "steady_s": min(times) if times else None,
    "steady_times_s": times,
    "rss_after_load_bytes": base,
    "peak_rss_above_load_bytes": peak - base,
    "mean_values": summary,
    "load_avg": list(os.getloadavg()),
  }


def _spawn(side, layout, devices, args) -> dict:
  env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
  if devices != "gpu":  # forced host devices; "gpu": the default backend as it is
    env.update(JAX_PLATFORMS="cpu", XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}")
  cmd = [sys.executable, str(HERE / "study.py"), "--worker", "--side", side, "--layout", layout]
  for k in ("models", "n", "step", "bins", "utilities", "repeat"):
    cmd += [f"--{k}", str(getattr(args, k))]
  res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
  if res.returncode != 0:
    raise RuntimeError(f"{side}/{layout}/{devices} failed:\n{res.stderr[-3000:]}")
  return json.loads(res.stdout.strip().splitlines()[-1])


def main(argv=None) -> dict:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
  p.add_argument("--side", choices=("study", "loop"), default="study")
  p.add_argument("--layout", choices=("same_n", "different_n"), default="same_n")
  p.add_argument("--models", type=int, default=12)
  p.add_argument("--n", type=int, default=10000)
  p.add_argument("--step", type=int, default=250, help="n decrement per model (different_n)")
  p.add_argument("--bins", type=int, default=200)
  p.add_argument("--utilities", type=int, default=1500, help="per family")
  p.add_argument("--repeat", type=int, default=2)
  p.add_argument(
    "--devices", default="1,4,8", help="forced CPU device counts, and/or 'gpu' (default backend)"
  )
  p.add_argument("--layouts", default="same_n,different_n")
  p.add_argument("--timeout", type=int, default=3600)
  p.add_argument("--quick", action="store_true", help="12 models, n=600, 20 bins, 50 utilities")
  p.add_argument("--name", default=None, help="result file name (default study / study_quick)")
  args = p.parse_args(argv)
  if args.worker:
    print(json.dumps(worker(args)))
    return {}
  sys.path.insert(0, str(HERE))
  from _common import device_info, machine_note, write_result

  if args.quick:
    args.models, args.n, args.step, args.bins, args.utilities, args.repeat = 12, 600, 20, 20, 50, 1
  # read before the runs: the load of the machine, not that of the benchmark's own workers
  info = device_info()
  runs = []
  for layout in args.layouts.split(","):
    for d in (x if x == "gpu" else int(x) for x in args.devices.split(",")):
      pair = {}
      for side in ("loop", "study"):
        t0 = time.perf_counter()
        r = _spawn(side, layout, d, args)
        r["process_wall_s"] = time.perf_counter() - t0
        pair[side] = r
        print(
          f"{layout:12s} {d} device(s) {side:5s}: first call {r['first_call_s']:7.2f} s "
          f"({r['compilations']} compilations, {r['major_compilations']} of them >= 0.1 s; "
          f"{r['compile_s']:.2f} s compiling), steady "
          f"{r['steady_s'] or float('nan'):7.2f} s, peak +{r['peak_rss_above_load_bytes'] / 2**20:.0f} MiB",
          flush=True,
        )
      s, lo = pair["study"], pair["loop"]
      agree = max(
        abs(s["mean_values"][k] - lo["mean_values"][k])
        for k in s["mean_values"]
        if k in lo["mean_values"]
      )
      runs.append(
        {
          "layout": layout,
          "devices": d,
          "loop": lo,
          "study": s,
          "compile_time_ratio_loop_over_study": lo["compile_s"] / max(s["compile_s"], 1e-9),
          "first_call_ratio_loop_over_study": lo["first_call_s"] / s["first_call_s"],
          "steady_ratio_loop_over_study": (lo["steady_s"] or 0) / (s["steady_s"] or 1e-9),
          "max_abs_diff_of_mean_values": agree,
        }
      )
  out = {
    "benchmark": "study",
    "setup": {
      "models": list(MODELS[: args.models]),
      "n": args.n,
      "step": args.step,
      "bins": f"2..{1 + args.bins}",
      "metrics": METRICS,
      "utilities_per_family": args.utilities,
      "repeat": args.repeat,
      "devices": args.devices,
    },
    "runs": runs,
    "machine_note": machine_note(info.get("load_avg_at_start"))
    + "; each worker's own 1-minute load is in its 'load_avg' (forced devices add threads)",
    "load_avg_at_end": list(os.getloadavg()),
    **info,
  }
  path = write_result(args.name or ("study_quick" if args.quick else "study"), out)
  print(f"wrote {path}")
  return out


if __name__ == "__main__":
  main()
