"""Benchmark: XLA:CPU's compile-time settings, compile time against run time.

XLA:CPU compiles each fusion with its MLIR-based fusion emitters by default;
``XLA_FLAGS=--xla_cpu_use_fusion_emitters=false`` selects the older LLVM IR
emitters, and ``--xla_backend_optimization_level=0`` has LLVM compile
without optimisation. jaxcal's test suite sets both (tests/conftest.py),
because it is almost all compilation; jaxcal itself leaves XLA's defaults
alone. This benchmark measures the trade-off a user would face for three
settings (XLA's defaults, the older emitters, the older emitters at
optimisation level 0, what the tests use), each in fresh child processes
with no persistent compilation cache, in rotating order over ``--rounds``
rounds:

* the embedded-default report (``report.calibration_report`` on the bundled
  CIFAR-10 ResNet-110 test logits with its defaults, what ``jaxcal report``
  computes): first call (tracing and compilation included) and second call;
* ``conf_ece``, ``classwise_ece`` (15 equal-width bins) and ``brier`` on
  n = 100,000, C = 100 synthetic over-confident softmax outputs with numpy
  input: first call, and the median of ``--repeat`` steady calls.

The settings' values are compared (they must agree). The steady-state
reference of each metric is the same call under XLA's defaults; the report's
first call is the compile-time reference.

  python experiments/bench/xla_emitters.py            # writes results/xla_emitters.json
  python experiments/bench/xla_emitters.py --rounds 1 --name xla_emitters_quick
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _common import cpu_load, device_info, machine_note, write_result

FLAG = "--xla_cpu_use_fusion_emitters=false"
OPT0 = "--xla_backend_optimization_level=0"
SETTINGS = {"default": "", "llvm_ir_emitters": FLAG, "llvm_ir_emitters_opt0": f"{FLAG} {OPT0}"}
METRICS = ("conf_ece", "classwise_ece", "brier")


def child(repeat: int) -> dict:
  """The measurements of one process (run with ``--child``)."""
  import jax
  import numpy as np
  from single_call import synthetic

  from jaxcal import data, metrics, report, scores

  out: dict = {"xla_flags": os.environ.get("XLA_FLAGS", "")}
  x, y = data.default_predictions("test")
  t = time.perf_counter()
  rep = report.calibration_report(x, y, source="default")
  out["report_first_s"] = time.perf_counter() - t
  t = time.perf_counter()
  report.calibration_report(x, y, source="default")
  out["report_second_s"] = time.perf_counter() - t
  out["report_conf_ece"] = float(rep["metrics"]["ConfECE(fix;15)"]["estimate"])

  p, lab = synthetic(100_000, 100)
  fns = {
    "conf_ece": metrics.conf_ece,
    "classwise_ece": metrics.classwise_ece,
    "brier": scores.brier,
  }
  for name in METRICS:
    fn = fns[name]
    t = time.perf_counter()
    value = float(fn(p, lab))
    first = time.perf_counter() - t
    times = []
    for _ in range(repeat):
      t = time.perf_counter()
      jax.block_until_ready(fn(p, lab))
      times.append(time.perf_counter() - t)
    out[name] = {"first_s": first, "median_ms": 1e3 * float(np.median(times)), "value": value}
  return out


def run_child(flags: str, repeat: int) -> dict:
  env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=flags)
  env.pop("JAX_COMPILATION_CACHE_DIR", None)  # every first call compiles
  cmd = [sys.executable, __file__, "--child", "--repeat", str(repeat)]
  res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, check=False)
  if res.returncode != 0:
    raise RuntimeError(f"child with XLA_FLAGS={flags!r} failed:\n{res.stderr[-3000:]}")
  return json.loads(res.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--rounds", type=int, default=3)
  ap.add_argument("--repeat", type=int, default=15)
  ap.add_argument("--name", default="xla_emitters")
  ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
  args = ap.parse_args(argv)
  if args.child:
    print(json.dumps(child(args.repeat)))
    return 0

  load0 = cpu_load()
  runs: dict[str, list[dict]] = {k: [] for k in SETTINGS}
  for r in range(args.rounds):
    order = list(SETTINGS)[r % len(SETTINGS) :] + list(SETTINGS)[: r % len(SETTINGS)]
    for name in order:
      runs[name].append(run_child(SETTINGS[name], args.repeat))
      last = runs[name][-1]
      print(
        f"round {r} {name:21s} report first {last['report_first_s']:.1f} s, "
        f"second {last['report_second_s']:.2f} s; "
        + ", ".join(f"{m} {last[m]['median_ms']:.2f} ms" for m in METRICS),
        flush=True,
      )

  def med(name, get):
    return statistics.median(get(run) for run in runs[name])

  summary: dict = {}
  for name in SETTINGS:
    summary[name] = {
      "report_first_s": med(name, lambda r: r["report_first_s"]),
      "report_second_s": med(name, lambda r: r["report_second_s"]),
      **{
        m: {
          "first_s": med(name, lambda r, m=m: r[m]["first_s"]),
          "median_ms": med(name, lambda r, m=m: r[m]["median_ms"]),
        }
        for m in METRICS
      },
    }
  d = summary["default"]
  ratios: dict = {}
  for name in list(SETTINGS)[1:]:
    o = summary[name]
    ratios[f"report_first_call_default_over_{name}"] = d["report_first_s"] / o["report_first_s"]
    ratios[f"report_second_call_{name}_over_default"] = o["report_second_s"] / d["report_second_s"]
    for m in METRICS:
      ratios[f"{m}_steady_{name}_over_default"] = o[m]["median_ms"] / d[m]["median_ms"]
  values = {
    name: {m: [r[m]["value"] for r in runs[name]] for m in METRICS}
    | {"report_conf_ece": [r["report_conf_ece"] for r in runs[name]]}
    for name in SETTINGS
  }
  agree = all(
    abs(a - b) <= 1e-5 * abs(b)
    for name in list(SETTINGS)[1:]
    for m in values["default"]
    for a, b in zip(values["default"][m], values[name][m])
  )
  load1 = cpu_load()
  result = {
    "benchmark": "xla_emitters",
    "description": __doc__.split("\n")[0],
    **device_info(),
    "load_avg_at_start": load0,
    "load_avg_at_end": load1,
    "note": machine_note(load0),
    "settings": SETTINGS,
    "rounds": args.rounds,
    "repeat": args.repeat,
    "summary_medians": summary,
    "ratios": ratios,
    "values_agree_rel_1e-5": agree,
    "runs": runs,
  }
  path = write_result(args.name, result)
  print(json.dumps(ratios, indent=1))
  print(f"values agree: {agree}; wrote {path}")
  return 0 if agree else 1


if __name__ == "__main__":
  sys.exit(main())
