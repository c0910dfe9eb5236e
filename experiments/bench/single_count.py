"""Benchmark: fixed bins of one bin count, histogrammed straight into that count's bins or through the shared threshold table.

The exact fixed-bin engine (``jaxcal._src.binning.binned_residual_sums``)
has two ways to sum residuals per bin:

* ``direct``: a call with one concrete bin count (``conf_ece(p, y, 15)``)
  puts each score straight into its bin ``clip(ceil(s m), 1, m)`` of that
  count (``single_count``, in use since 2026-11-28);
* ``table``: a bin-count array, or a count traced under ``jit`` / ``vmap``
  (``conf_ece(p, y, m, max_bins=16)`` with ``m`` traced), histograms every
  score into the threshold intervals that all counts up to ``max_bins``
  share, then reads each count's bins from the cumulative sums.

Both give the same integer sums (the returned float can differ in the last
ulp). Each is timed inside a user ``jit`` on device-resident arrays, the two
interleaved call by call, for ``conf_ece``, ``classwise_ece`` and ``ecce`` at
n = 10,000, C = 10 and n = 100,000, C = 100 (15 bins, ``max_bins`` 16). The
ratio is ``table / direct`` (> 1: the direct histogram is faster). On a GPU
the direct path has fewer, so more contended, scatter targets (16 bins per
row instead of the table's intervals): this benchmark is the measurement
that says whether it pays there too.

  python experiments/bench/single_count.py           # writes results/single_count[_gpu].json
  python experiments/bench/single_count.py --small   # n / 10, single_count_small[_gpu].json
"""

from __future__ import annotations

import argparse
import sys

import jax
import jax.numpy as jnp
import numpy as np
from _common import device_info, interleaved, machine_note, write_result
from single_call import synthetic

from jaxcal import metrics

SIZES = ((10_000, 10), (100_000, 100))
METRICS = ("conf_ece", "classwise_ece", "ecce")
NUM_BINS, MAX_BINS = 15, 16


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--small", action="store_true", help="n / 10 (a quick check)")
  ap.add_argument("--repeat", type=int, default=31, help="interleaved timed calls per path")
  args = ap.parse_args(argv)
  info = device_info()
  print(f"single_count on {info.get('device')} ({info.get('backend')}), jax {info.get('jax')}")
  out = {}
  for n, c in SIZES:
    n = n // 10 if args.small else n
    p, y = synthetic(n, c)
    pd, yd = jax.device_put(p), jax.device_put(y)
    m = jnp.int32(NUM_BINS)
    for name in METRICS:
      f = getattr(metrics, name)
      paths = {
        "direct": (jax.jit(lambda a, b, f=f: f(a, b, NUM_BINS)), (pd, yd)),
        "table": (jax.jit(lambda a, b, k, f=f: f(a, b, k, max_bins=MAX_BINS)), (pd, yd, m)),
      }
      row = interleaved(paths, args.repeat)  # first calls (compilation) included
      first = {k: r["first_call_s"] for k, r in row.items()}
      values = {k: float(fn(*a)) for k, (fn, a) in paths.items()}
      if not np.isclose(values["direct"], values["table"], rtol=1e-6, atol=0.0):
        print(f"  {name} n={n} C={c}: the paths differ: {values}", file=sys.stderr)
        return 1
      for k in row:
        row[k]["value"] = values[k]
      ratio = row["table"]["median_s"] / row["direct"]["median_s"]
      out[f"{name}_n{n}_c{c}"] = {
        "n": n,
        "C": c,
        "metric": name,
        "paths": row,
        "table_over_direct": ratio,
      }
      print(
        f"  {name:13s} n={n:>7,} C={c:>3}: direct {1e3 * row['direct']['median_s']:8.3f} ms, "
        f"table {1e3 * row['table']['median_s']:8.3f} ms (medians): x{ratio:.2f}; first calls "
        f"{first['direct']:.2f} / {first['table']:.2f} s",
        flush=True,
      )
  result = {
    "benchmark": "single_count",
    **info,
    "note": machine_note(info["load_avg_at_start"], info.get("cpu_count")),
    "config": {
      "small": args.small,
      "repeat": args.repeat,
      "num_bins": NUM_BINS,
      "max_bins": MAX_BINS,
    },
    "results": out,
  }
  print(f"wrote {write_result('single_count_small' if args.small else 'single_count', result)}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
