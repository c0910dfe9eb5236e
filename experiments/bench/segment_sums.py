"""Benchmark: float sums per segment without drift (``segment_sum_accurate``) against one scatter-add.

``jaxcal._src.numerics.segment_sum_accurate`` sums blocks of samples apart
and adds the blocks with TwoSum, so a float32 sum over ``n`` samples has the
error of one block's sum whatever ``n``; ``jax.ops.segment_sum`` (one
scatter-add, what the smoothed ECE's grid, ``reliability_stats`` and LinCE
used before 2026-11-29) drifts: at 10^6 tiled CIFAR-10 samples smECE was
1.3e-5 off float64, a bin's mean confidence 0.3 %, LinCE 2e-4 (4 % at 10^7).
This is the price of that accuracy, each form inside ``jit`` on device
arrays, interleaved call by call (medians), with the first calls
(compilation) and each form's relative error against a float64 sum:

* ``bins``: 15 segments, one per sample (``reliability_stats``' bins);
* ``grid``: 1,001 grid points, two per sample, two columns (the smoothed
  ECE's grid at bandwidths >= 0.01), also under ``vmap`` over 10 class rows
  (``grid_vmap10``, n / 10 samples per row).

  python experiments/bench/segment_sums.py           # writes results/segment_sums[_gpu].json
  python experiments/bench/segment_sums.py --small   # n / 10, segment_sums_small[_gpu].json
"""

from __future__ import annotations

import argparse
import sys

import jax
import numpy as np
from _common import device_info, interleaved, machine_note, write_result

from jaxcal._src.numerics import segment_sum_accurate

N = 1_000_000


def _cases(n: int, rng: np.random.Generator):
  """name -> (values, ids, num_segments, rows): the shapes the metrics sum."""
  conf = rng.uniform(0.9, 1.0, n).astype(np.float32)  # a confident model's top-label scores
  bins = np.clip(np.ceil(conf * 15), 1, 15).astype(np.int32) - 1
  g = rng.integers(0, 1000, n).astype(np.int32)
  grid_ids = np.stack([g, g + 1], axis=1)
  grid_vals = rng.uniform(0, 1, (n, 2, 2)).astype(np.float32)
  rows = 10
  return {
    "bins": (conf[:, None], bins, 15, None),
    "grid": (grid_vals, grid_ids, 1001, None),
    "grid_vmap10": (
      np.stack([grid_vals[: n // rows]] * rows),
      np.stack([grid_ids[: n // rows]] * rows),
      1001,
      rows,
    ),
  }


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--small", action="store_true", help="n / 10 (a quick check)")
  ap.add_argument("--repeat", type=int, default=15, help="interleaved timed calls per form")
  args = ap.parse_args(argv)
  info = device_info()
  n = N // 10 if args.small else N
  print(f"segment_sums on {info.get('device')} ({info.get('backend')}), jax {info.get('jax')}")
  out = {}
  for name, (v, ids, s, rows) in _cases(n, np.random.default_rng(0)).items():
    k = ids.ndim - (1 if rows else 0)
    rest = v.shape[(1 if rows else 0) + k :]

    def plain(a, b, s=s, rest=rest):
      return jax.ops.segment_sum(a.reshape((-1,) + rest), b.reshape(-1), s)

    def accurate(a, b, s=s):
      return segment_sum_accurate(a, b, s)

    forms = {"scatter_add": plain, "accurate": accurate}
    if rows:
      forms = {key: jax.vmap(f) for key, f in forms.items()}
    forms = {key: jax.jit(f) for key, f in forms.items()}
    a, b = jax.device_put(v), jax.device_put(ids)
    v64, ids64 = np.asarray(v, np.float64), np.asarray(ids)
    if rows:
      want = np.stack([_float64_sums(v64[r], ids64[r], s) for r in range(rows)])
    else:
      want = _float64_sums(v64, ids64, s)
    row = interleaved({key: (f, (a, b)) for key, f in forms.items()}, args.repeat)
    error, first = {}, {key: r["first_call_s"] for key, r in row.items()}
    for key, f in forms.items():
      got = np.asarray(f(a, b), np.float64)
      error[key] = float(np.max(np.abs(got - want) / np.maximum(np.abs(want), 1e-30)))
      row[key]["max_rel_error_vs_float64"] = error[key]
    ratio = row["accurate"]["median_s"] / row["scatter_add"]["median_s"]
    out[name] = {"n": n, "segments": s, "rows": rows, "forms": row, "accurate_over_scatter": ratio}
    print(
      f"  {name:12s} n={n:>9,}: scatter-add {1e3 * row['scatter_add']['median_s']:8.3f} ms "
      f"(error {error['scatter_add']:.1e}), accurate {1e3 * row['accurate']['median_s']:8.3f} ms "
      f"(error {error['accurate']:.1e}): x{ratio:.2f}; first calls "
      f"{first['scatter_add']:.2f} / {first['accurate']:.2f} s",
      flush=True,
    )
  result = {
    "benchmark": "segment_sums",
    **info,
    "note": machine_note(info["load_avg_at_start"], info.get("cpu_count")),
    "config": {"small": args.small, "repeat": args.repeat, "n": n},
    "results": out,
  }
  print(f"wrote {write_result('segment_sums_small' if args.small else 'segment_sums', result)}")
  return 0


def _float64_sums(v: np.ndarray, ids: np.ndarray, s: int) -> np.ndarray:
  """The exact-enough reference: float64 sums per segment (``np.add.at``)."""
  rest = v.shape[ids.ndim :]
  out = np.zeros((s,) + rest)
  np.add.at(out, ids.reshape(-1), v.reshape((-1,) + rest))
  return out


if __name__ == "__main__":
  sys.exit(main())
