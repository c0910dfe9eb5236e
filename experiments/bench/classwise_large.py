"""Benchmark: class-wise LinCE_cw (quantile bins) for 200 bin counts at n = 10**6, C = 100.

The targets of issue 15: ``classwise_ce`` (quantile bins, the default) with
200 bin counts at n = 1,000,000, C = 100 in under 10 s on 2 CPU cores,
temporaries at most 3x the input, and under ``vmap`` over models no slower
per model than a loop. Measured here, in one process:

* ``jaxcal``: one public call ``classwise_ce(p, y, num_bins=np.arange(2, 202))``
  on device arrays (validation included), wall and process CPU time;
* ``numpy``: the best vectorised numpy a user would write (nothing of
  jaxcal): the matrix transposed once to contiguous class rows; per class
  one ``np.sort`` of packed ``uint64`` keys ``(float32 bits << 32) | index``
  (the scores are non-negative, so this is the order of a stable argsort, the
  quantile rule's tie order, in a fraction of its time), float64 prefix sums
  of the residuals ``p - 1[y = r]`` in that order, read at the ends
  ``floor(j n / m)`` of all 200 bin counts at once; the squared bin sums are
  summed over the classes and per bin count by ``np.add.reduceat``. No loop
  over bin counts; the loop over classes keeps the temporaries to a few rows;
* the two are timed by ``_common.interleaved`` (cold): each side's first call
  alone after clearing JAX's caches (jaxcal's: tracing and compilation), then
  ``--repeat`` rounds calling both, alternating which goes first; the figure
  compared is the MEDIAN of the timed calls. Their values are checked to
  agree (``_common.check_agree``) before the ratio is written;
* ``temporaries``: XLA's compiled memory analysis (``temp_size_in_bytes``)
  of the same computation (the core, vmapped over the 200 bin counts),
  against the bytes of the input;
* ``vmap over models``: ``--models`` models of ``n / models`` samples each
  (the same total), ``jax.vmap`` of the public call (with and without
  ``max_bins``) against a Python loop of the same calls, per model,
  interleaved the same way (cold first calls, medians).

The data: over-confident softmax outputs of Gaussian logits with labels drawn
from a tempered version (synthetic: no real data set of that size is
bundled), float32.

  python experiments/bench/classwise_large.py           # writes results/classwise_large.json
  python experiments/bench/classwise_large.py --small   # n = 100,000: classwise_large_small.json

(The folder is ``$JAXCAL_RESULTS_DIR`` when set.)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import jax
import jax.numpy as jnp
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
from jaxcal._src import calibration_errors as CE


def synthetic(n: int, c: int, seed: int = 0):
  """Over-confident softmax outputs (float32) and labels from a tempered version."""
  rng = np.random.default_rng(seed)
  z = rng.standard_normal((n, c)).astype(np.float32) * 3.0
  z[np.arange(n), rng.integers(0, c, n)] += 4.0
  z -= z.max(axis=1, keepdims=True)
  e = np.exp(z)
  p = e / e.sum(axis=1, keepdims=True)
  t = np.exp(z / 1.5)
  t /= t.sum(axis=1, keepdims=True)
  u = rng.random((n, 1), dtype=np.float32)
  y = np.minimum((np.cumsum(t, axis=1) < u).sum(axis=1), c - 1)
  return p.astype(np.float32), y.astype(np.int32)


def numpy_classwise_ce(p: np.ndarray, y: np.ndarray, ms: np.ndarray) -> np.ndarray:
  """Each class sorted once, float64 prefix sums read at every bin count's quantile ends at once."""
  n, c = p.shape
  ms = np.asarray(ms, np.int64)
  starts = np.concatenate([[0], np.cumsum(ms + 1)[:-1]])  # bin count k: ends starts[k]..+m
  ends = np.concatenate([(np.arange(m + 1, dtype=np.int64) * n) // m for m in ms])
  pt = np.ascontiguousarray(p.T)  # (C, n): class rows
  sq = np.zeros(len(ends) - 1)
  prefix = np.zeros(n + 1)
  for r in range(c):
    s_sorted, order = packed_sort_rows(pt[r])
    np.cumsum(s_sorted.astype(np.float64) - (y[order] == r), out=prefix[1:])
    d = np.diff(prefix[ends])  # the bin sums of every bin count
    sq += d * d
  sq[starts[1:] - 1] = 0.0  # the differences across two bin counts
  return np.add.reduceat(sq, starts) / (n * n * c)


def with_cpu(fn, cpu: list[float]):
  """``fn`` recording each call's process CPU time in ``cpu`` (the wall time is ``interleaved``'s)."""

  def wrapped(*args):
    c0 = time.process_time()
    out = jax.block_until_ready(fn(*args))
    cpu.append(time.process_time() - c0)
    return out

  return wrapped


def timed(paths: dict, repeat: int) -> dict:
  """``_common.interleaved(paths, repeat, cold=True)`` plus each path's CPU time per call.

  Adds ``cpu_s`` (the timed calls' process CPU times), ``first_cpu_s`` and
  ``median_cpu_s`` to each path's entry. Each path's calls are its cold first
  call, one untimed call (``interleaved`` compiles it again after the caches
  were cleared for the paths after it) and the timed rounds.
  """
  cpu = {k: [] for k in paths}
  res = interleaved({k: (with_cpu(f, cpu[k]), a) for k, (f, a) in paths.items()}, repeat, cold=True)
  for k, t in res.items():
    t["first_cpu_s"], t["cpu_s"] = cpu[k][0], cpu[k][2:]
    t["median_cpu_s"] = statistics.median(cpu[k][2:])
  return res


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--small", action="store_true", help="n = 100,000 (quick)")
  ap.add_argument("--n", type=int, default=None)
  ap.add_argument("--classes", type=int, default=100)
  ap.add_argument(
    "--repeat", type=int, default=3, help="interleaved rounds: timed calls of each contender"
  )
  ap.add_argument("--models", type=int, default=4)
  ap.add_argument("--skip-numpy", action="store_true")
  args = ap.parse_args(argv)
  n = args.n or (100_000 if args.small else 1_000_000)
  c = args.classes
  ms = np.arange(2, 202)
  info = device_info()
  statistic = f"median of {args.repeat} interleaved timed calls (cold first calls apart)"
  print(
    f"classwise_large: n={n} C={c}, {len(ms)} bin counts, {info.get('device')}, "
    f"load {info['load_avg_at_start']}; {statistic}"
  )
  p, y = synthetic(n, c)
  pd, yd = jax.device_put(p), jax.device_put(y)
  input_bytes = p.nbytes + y.nbytes

  def call(pd, yd):
    return metrics.classwise_ce(pd, yd, ms)

  # Values first: a fast wrong answer must not pass as a speed-up.
  got = np.asarray(call(pd, yd))
  agreement = None
  if not args.skip_numpy:
    want = numpy_classwise_ce(p, y, ms)
    diff = check_agree({"jaxcal": got, "numpy": want}, "numpy", rtol=1e-5)
    agreement = {
      "max_abs_diff": diff["jaxcal"],
      "max_rel_diff": float(np.max(np.abs(got - want) / np.abs(want))),
      "rtol": 1e-5,
    }

  paths = {"jaxcal": (call, (pd, yd))}
  if not args.skip_numpy:
    paths["numpy_packed_sort"] = (numpy_classwise_ce, (p, y, ms))
  res = timed(paths, args.repeat)
  t_jax = res["jaxcal"]
  print(
    f"  jaxcal: cold first call {t_jax['first_call_s']:.1f} s, steady median "
    f"{t_jax['median_s']:.2f} s (best {t_jax['best_s']:.2f} s, cpu {t_jax['median_cpu_s']:.2f} s)",
    flush=True,
  )

  result_np = None
  if not args.skip_numpy:
    t_np = res["numpy_packed_sort"]
    speedup = t_np["median_s"] / t_jax["median_s"]
    result_np = {
      "timing": t_np,
      "numpy_over_jaxcal_median": speedup,
      "max_rel_diff_vs_jaxcal": agreement["max_rel_diff"],
      "agreement": agreement,
    }
    print(
      f"  numpy (packed sort once, all ends at once): median {t_np['median_s']:.2f} s "
      f"(first {t_np['first_call_s']:.2f} s); ratio (numpy / jaxcal time) {speedup:.2f}x; "
      f"max rel diff {agreement['max_rel_diff']:.1e}",
      flush=True,
    )

  # Temporaries: the core for all bin counts, as the public call compiles it.
  w = jnp.full((c,), 1.0 / c, jnp.float32)
  max_bins = 1 << int(ms.max() - 1).bit_length()
  core = jax.jit(
    jax.vmap(
      lambda p, y, m: CE._classwise_core(
        p, y, m, w, binning="quantile", max_bins=max_bins, kind="ce"
      ),
      in_axes=(None, None, 0),
    )
  )
  mem = core.lower(pd, yd, jnp.asarray(ms, jnp.int32)).compile().memory_analysis()
  temp = int(mem.temp_size_in_bytes)
  print(
    f"  temporaries {temp / 2**20:.0f} MiB = {temp / input_bytes:.2f}x the input ({input_bytes / 2**20:.0f} MiB)"
  )

  # vmap over models vs a loop of the same calls.
  k = args.models
  per = n // k
  ps = jnp.stack([jnp.asarray(synthetic(per, c, seed=s)[0]) for s in range(k)])
  ys = jnp.stack([jnp.asarray(synthetic(per, c, seed=s)[1]) for s in range(k)])
  vm = jax.jit(jax.vmap(lambda p, y: metrics.classwise_ce(p, y, ms)))

  def loop(ps, ys):  # models held apart, as a user looping over them holds them
    return [metrics.classwise_ce(p, y, ms) for p, y in zip(ps, ys)]

  ps_apart, ys_apart = list(ps), list(ys)  # sliced before the timing, not in it

  # The same with max_bins given. The public call infers the same bound (256)
  # from the closed-over concrete bins array, so the two vmap rows time one
  # computation: their difference is the timing noise of the run.
  vm_mb = jax.jit(jax.vmap(lambda p, y: metrics.classwise_ce(p, y, ms, max_bins=max_bins)))

  looped = np.stack([np.asarray(a) for a in loop(ps_apart, ys_apart)])
  agree = check_agree(
    {"vmap": vm(ps, ys), "vmap_max_bins": vm_mb(ps, ys), "loop": looped}, "loop", rtol=1e-5
  )
  agree = max(agree.values())
  tv = timed(
    {
      "vmap": (vm, (ps, ys)),
      "vmap_max_bins": (vm_mb, (ps, ys)),
      "loop": (loop, (ps_apart, ys_apart)),
    },
    args.repeat,
  )
  t_vmap, t_vmap_mb, t_loop = tv["vmap"], tv["vmap_max_bins"], tv["loop"]
  print(
    f"  {k} models of n={per}: vmap {t_vmap['median_s'] / k:.2f} s per model, loop "
    f"{t_loop['median_s'] / k:.2f} s per model (ratio {t_vmap['median_s'] / t_loop['median_s']:.2f}); max |diff| {agree:.1e}"
  )
  print(
    f"  vmap with max_bins={max_bins}: {t_vmap_mb['median_s'] / k:.2f} s per model "
    f"(ratio {t_vmap_mb['median_s'] / t_loop['median_s']:.2f}; CPU time ratio "
    f"{t_vmap_mb['median_cpu_s'] / t_loop['median_cpu_s']:.2f})"
  )

  result = {
    "benchmark": "classwise_large",
    "description": "classwise_ce (quantile bins) for 200 bin counts in one public call vs numpy "
    "(classes sorted once by np.sort of packed uint64 keys, float64 prefix sums read at every "
    "bin count's ends at once), interleaved, cold first calls, medians compared; temporaries "
    "from XLA's memory analysis; vmap over models vs a loop",
    **info,
    "jaxcal_version": jaxcal.__version__,
    "jax_compilation_cache_dir": jax.config.jax_compilation_cache_dir,
    "load_avg_at_end": cpu_load(),
    "note": machine_note(info["load_avg_at_start"], statistic=statistic),
    "statistic": statistic,
    "repeat": args.repeat,
    "n": n,
    "num_classes": c,
    "num_bins": [int(ms[0]), int(ms[-1])],
    "targets": {
      "steady_median_s": 10.0,
      "temporaries_over_input": 3.0,
      "vmap_over_loop_per_model": 1.0,
    },
    "jaxcal": t_jax,
    "temporaries_bytes": temp,
    "input_bytes": input_bytes,
    "temporaries_over_input": temp / input_bytes,
    "numpy_packed_sort": result_np,
    "vmap_over_models": {
      "models": k,
      "n_per_model": per,
      "vmap": t_vmap,
      "loop": t_loop,
      "vmap_over_loop_median": t_vmap["median_s"] / t_loop["median_s"],
      "vmap_max_bins": t_vmap_mb,
      "vmap_max_bins_over_loop_median": t_vmap_mb["median_s"] / t_loop["median_s"],
      "vmap_max_bins_over_loop_cpu_median": t_vmap_mb["median_cpu_s"] / t_loop["median_cpu_s"],
      "max_abs_diff": agree,
    },
  }
  path = write_result("classwise_large_small" if args.small else "classwise_large", result)
  print(f"wrote {path}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
