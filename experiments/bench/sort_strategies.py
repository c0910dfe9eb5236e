"""Benchmark: which exact stable argsort to use on this backend.

``jaxcal._src.sorting.stable_argsort`` must equal
``jnp.argsort(x, stable=True)``. It picks, per backend, between

* ``packed``: one single-operand sort of ``uint64`` words ``key << 32 | index``
  (CPU, since 2026-11-24),
* ``radix``: LSD radix passes of single-operand ``uint32`` sorts (CPU before;
  still the CPU path of 64-bit keys),
* ``pair``: one sort of ``(uint32 key, index)`` pairs (GPU/TPU),

(``jaxcal_stable_argsort`` adds, on CPU, one group of rows per core),

against the reference ``jnp.argsort(x, axis=-1, stable=True)`` on float32,
for the shapes jaxcal sorts: a chunk of utilities (1,500 rows of n = 15,000,
the UC sweep), class columns (100 rows of n = 100,000, classwise quantile
binning) and one long vector (n = 10^6). Each variant is checked equal to the
reference; the ratios are reference time / variant time (> 1: faster). Each
variant's first call (tracing and compilation included) is reported as
``first_call_s`` beside its steady times.

  python experiments/bench/sort_strategies.py          # writes results/sort_strategies[_gpu].json
  python experiments/bench/sort_strategies.py --small  # shapes / 10, sort_strategies_small[_gpu].json
"""

from __future__ import annotations

import argparse
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from _common import device_info, machine_note, timeit, write_result

from jaxcal._src import sorting as S

SHAPES = {
  "uc_chunk": (1500, 15_000),
  "class_columns": (100, 100_000),
  "long_vector": (1, 1_000_000),
}


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--small", action="store_true", help="every shape's length / 10 (a quick check)")
  ap.add_argument("--repeat", type=int, default=5, help="timed calls per variant (default 5)")
  args = ap.parse_args(argv)
  shapes = {k: (r, n // 10 if args.small else n) for k, (r, n) in SHAPES.items()}
  info = device_info()
  variants = {
    "reference_jnp_argsort_stable": jax.jit(lambda x: jnp.argsort(x, axis=-1, stable=True)),
    "packed_uint64_words": jax.jit(lambda x: S._packed_argsort(S.float_to_key(x))[1]),
    "radix_uint32_passes": jax.jit(lambda x: S._radix_argsort(S.float_to_key(x))[1]),
    "pair_uint32_index": jax.jit(lambda x: S._pair_argsort(S.float_to_key(x))[1]),
    "jaxcal_stable_argsort": jax.jit(S.stable_argsort),
  }
  print(
    f"sort_strategies on {info.get('device')} ({info.get('backend')}), jax {info.get('jax')}",
    flush=True,
  )
  rng = np.random.default_rng(0)
  out = {}
  for name, shape in shapes.items():
    x = rng.random(shape, dtype=np.float32)
    x[:, ::7] = np.round(x[:, ::7], 3)  # ties, as in real scores
    xd = jax.device_put(x)
    ref = None  # the reference's result: it runs first
    row = {}
    for vname, f in variants.items():
      t0 = time.perf_counter()
      got = jax.block_until_ready(f(xd))  # the first call: tracing and compilation included
      first = time.perf_counter() - t0
      got = np.asarray(got)
      ref = got if ref is None else ref
      if not np.array_equal(got, ref):
        print(f"  {name}: {vname} differs from the stable reference", file=sys.stderr)
        return 1
      row[vname] = timeit(lambda: f(xd), repeat=args.repeat) | {"first_call_s": first}
    base = row["reference_jnp_argsort_stable"]["best_s"]
    out[name] = {
      "shape": shape,
      "timings": row,
      "speedup_vs_reference": {k: base / v["best_s"] for k, v in row.items()},
    }
    print(
      f"  {name:14s} {shape}: "
      + "  ".join(
        f"{k.split('_')[0]} {1e3 * v['best_s']:.2f} ms (first {v['first_call_s']:.2f} s)"
        for k, v in row.items()
      ),
      flush=True,
    )
  result = {
    "benchmark": "sort_strategies",
    **info,
    "note": machine_note(info["load_avg_at_start"]),
    "config": {"small": args.small, "repeat": args.repeat},
    "results": out,
  }
  print(
    f"wrote {write_result('sort_strategies_small' if args.small else 'sort_strategies', result)}"
  )
  return 0


if __name__ == "__main__":
  sys.exit(main())
