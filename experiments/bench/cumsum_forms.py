"""Benchmark: the prefix-sum form of the metrics that use one, first call and steady time.

``jaxcal._src.binning.blocked_cumsum`` is a matmul with a triangle of ones on
a CPU (and TPU) and ``lax.associative_scan`` on a GPU. This script times,
each in a fresh process (so every first call compiles from nothing), the
public calls whose programs hold such a prefix sum, once with the library's
form and once with the matmul form forced on every backend:

- ``ks_ce`` (top-label KS error), n = 100,000, C = 100;
- ``conf_ece`` with quantile bins (15), n = 100,000, C = 100;
- ``classwise_ce`` with quantile bins (15), n = 100,000, C = 100;
- ``uc_sweep`` of 1,500 linear utilities, n = 15,000, C = 1,000 (its first
  call is mostly the autotuning of its float32 matrix product).

For each: the first call (tracing, compilation, autotuning, one run) and the
best of ``--repeat`` calls after it, on device-resident arrays, and the
largest difference between the two forms' results.

  python experiments/bench/cumsum_forms.py          # cumsum_forms[_gpu].json
  python experiments/bench/cumsum_forms.py --small  # n / 10 (a CPU check)
"""

from __future__ import annotations

import argparse
import os

from _common import cpu_load, device_info, json_child, write_result

_CHILD = r"""
import json, sys, time
import numpy as np, jax, jax.numpy as jnp
sys.path.insert(0, {bench!r})
from uc_sweep import synthetic
from jaxcal import metrics as M, utility as U
from jaxcal._src import binning as B
if {matmul!r}:
  B._scan_cumsum_last = lambda x: B._mm_cumsum_last(x, 128)  # the matmul form everywhere
jax.block_until_ready(jnp.ones((8, 8)) @ jnp.ones((8, 8)))  # the device is up
name, n, c = {name!r}, {n}, {c}
p, y = synthetic(n, c)
p, y = jax.device_put((jnp.asarray(p), jnp.asarray(y, jnp.int32)))
if name == "uc_sweep":
  batch = U.sample_linear(jax.random.PRNGKey(0), 1500, c)
  f = lambda: U.uc_sweep(p, y, batch)
elif name == "ks_ce":
  f = lambda: M.ks_ce(p, y)
else:
  f = lambda: getattr(M, name)(p, y, 15, "quantile")
t0 = time.perf_counter()
out = np.asarray(f(), np.float64)
first = time.perf_counter() - t0
times = []
for _ in range({repeat}):
  t0 = time.perf_counter()
  jax.block_until_ready(f())
  times.append(time.perf_counter() - t0)
print(json.dumps({{"first_call_s": first, "best_s": min(times), "times_s": times,
                   "value": out.reshape(-1).tolist()[:2000]}}))
"""

CALLS = {
  "ks_ce": (100_000, 100),
  "conf_ece": (100_000, 100),
  "classwise_ce": (100_000, 100),
  "uc_sweep": (15_000, 1_000),
}


def child(name, n, c, matmul, repeat):
  code = _CHILD.format(
    bench=os.path.dirname(os.path.abspath(__file__)),
    matmul=matmul,
    name=name,
    n=n,
    c=c,
    repeat=repeat,
  )
  env = dict(os.environ)
  env.pop("JAX_COMPILATION_CACHE_DIR", None)  # every first call compiles
  return json_child(code, env)


def main():
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--small", action="store_true", help="n / 10 (a CPU check)")
  ap.add_argument("--repeat", type=int, default=10)
  args = ap.parse_args()
  info = device_info()
  print(f"cumsum_forms on {info.get('device')} (load {cpu_load()})", flush=True)
  results = {}
  for name, (n, c) in CALLS.items():
    n = n // 10 if args.small else n
    lib = child(name, n, c, False, args.repeat)
    mm = child(name, n, c, True, args.repeat)
    row = {"n": n, "C": c, "library": lib, "matmul_form": mm}
    if "value" in lib and "value" in mm:
      diff = max(abs(a - b) for a, b in zip(lib.pop("value"), mm.pop("value"), strict=True))
      row["max_abs_diff"] = diff
      print(
        f"  {name:13s} first call {lib['first_call_s']:6.2f} s (matmul form "
        f"{mm['first_call_s']:6.2f} s); steady {1e3 * lib['best_s']:7.3f} ms (matmul form "
        f"{1e3 * mm['best_s']:7.3f} ms); max |diff| {diff:.1e}",
        flush=True,
      )
    else:
      print(f"  {name}: {lib.get('error') or mm.get('error')}", flush=True)
    results[name] = row
  out = {
    "benchmark": "cumsum_forms",
    "config": {"small": args.small, "repeat": args.repeat},
    **info,
    "load_avg_at_end": cpu_load(),
    "results": results,
    "notes": (
      "Each call in a fresh process: first_call_s includes tracing, compilation and "
      "autotuning; best_s is the best of `repeat` calls after it on device-resident arrays. "
      "library: blocked_cumsum as shipped (the scan on GPUs, the matmul form elsewhere); "
      "matmul_form: the matmul form forced on every backend."
    ),
  }
  print(f"wrote {write_result('cumsum_forms_small' if args.small else 'cumsum_forms', out)}")


if __name__ == "__main__":
  main()
