"""Benchmark: utility calibration errors of thousands of sampled utilities.

ImageNet-scale synthetic predictions (n = 15,000, C = 1,000; over-confident
softmax of Gaussian logits, labels drawn from a tempered softmax) and
M = 1,500 linear plus M = 1,500 rank utilities (``sample_linear`` /
``sample_rank``), measured with ``jaxcal.utility.uc_sweep`` against a numpy
loop over utilities in the same run.

The numpy reference gets every advantage that does not depend on the
utility: the rows of ``p`` sorted descending and the label ranks (for rank
utilities) are computed once outside the timed loop; per utility it does
``v = P @ a`` (or ``P_sorted @ θ``), ``u = a[y]`` (or ``θ[rank_y]``), a
stable ``np.argsort`` of ``v``, a cumulative sum and the max-min over cuts
between distinct values. It runs on the first ``--numpy-utilities`` of each
family (default 300; the per-utility time is then multiplied by 1,500, which
the JSON states), and its errors are checked against jaxcal's first (equal up
to float32 rounding of the predicted utilities: a swap of two nearly tied
samples moves UC by at most 4/n; the JSON counts utilities differing by more
than 1e-6). The
jaxcal side is timed through the public API (validation and the data-only
precomputation included).

Memory at scale: ``M = 100,000`` linear utilities go through the chunked
sweep in a child process (payoffs drawn uniformly in [-1, 1]^C with numpy, so
no sampler temporaries inflate the baseline), whose peak resident memory
(``VmHWM``, reset just before the sweep) is compared with its resident memory
just before the sweep; on GPU the device's
``peak_bytes_in_use`` is reported instead. By default the 100k run uses
``n = 1,500`` (10x fewer samples: a full-scale 100k sweep is several minutes
of 2 shared CPU cores); ``--full-100k`` runs it at n = 15,000. XLA's compiled
memory analysis of the full-scale (n = 15,000, C = 1,000, M = 100,000) sweep
is always reported: its temporary buffers are what chunking bounds.

  python experiments/bench/uc_sweep.py            # writes results/uc_sweep.json
  python experiments/bench/uc_sweep.py --scaling-only  # UC core n = 10^5 -> 10^6 only
  python experiments/bench/uc_sweep.py --small    # quick (n=2,000, C=100, M=200), uc_sweep_small.json
"""

from __future__ import annotations

import argparse
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
from _common import cpu_load, device_info, json_child, timeit, write_result

from jaxcal import utility as U
from jaxcal._src.utility import sweep as _sweep


def synthetic(n: int, c: int, seed: int = 0):
  rng = np.random.default_rng(seed)
  z = rng.standard_normal((n, c)).astype(np.float32) * 2.5
  z[np.arange(n), rng.integers(0, c, n)] += 6.0  # a confident top class
  p = np.exp(z - z.max(1, keepdims=True))
  p = (p / p.sum(1, keepdims=True)).astype(np.float32)
  pt = np.exp((z - z.max(1, keepdims=True)) / 1.6)  # true law: softer
  pt /= pt.sum(1, keepdims=True)
  y = (rng.random(n)[:, None] > np.cumsum(pt, 1)).sum(1).clip(0, c - 1)
  return p, y


# ------------------------------------------------------------------ numpy


def np_prep(p, y):
  n, c = p.shape
  ps = -np.sort(-p, axis=1)
  py = p[np.arange(n), y][:, None]
  label_rank = ((p > py) | ((p == py) & (np.arange(c)[None, :] < y[:, None]))).sum(1)
  return ps, label_rank


def np_uc(v, u):
  n = v.shape[0]
  o = np.argsort(v)  # S is read only at cuts: the order among ties is immaterial
  vs = v[o]
  s = np.empty(n + 1, np.float64)
  s[0] = 0.0
  np.cumsum((u - v)[o], out=s[1:], dtype=np.float64)
  cut = np.empty(n + 1, bool)
  cut[0] = cut[-1] = True
  np.not_equal(vs[1:], vs[:-1], out=cut[1:-1])
  sc = s[cut]
  return (sc.max() - sc.min()) / n


def np_loop(kind, p, y, prep, params):
  ps, label_rank = prep
  out = np.empty(len(params))
  for i, a in enumerate(params):
    if kind == "linear":
      out[i] = np_uc(p @ a, a[y])
    else:
      out[i] = np_uc(ps @ a, a[label_rank])
  return out


# ------------------------------------------------------------------ memory child

_CHILD = r"""
import json, sys, time
import numpy as np, jax
sys.path.insert(0, {bench!r})
from uc_sweep import synthetic
from jaxcal import utility as U
def rss(field):
  for line in open('/proc/self/status'):
    if line.startswith(field):
      return int(line.split()[1]) * 1024
p, y = synthetic({n}, {c})
a = np.random.default_rng(7).random(({m}, {c}), dtype=np.float32)   # numpy: no JAX temporaries
a *= 2
a -= 1
batch = U.linear(a)
open('/proc/self/clear_refs', 'w').write('5')   # reset the peak (VmHWM) to the current RSS
before = rss('VmRSS:')
t0 = time.perf_counter()
e = np.asarray(U.uc_sweep(p, y, batch))
dt = time.perf_counter() - t0
dev = jax.devices()[0]
stats = dev.memory_stats() if hasattr(dev, 'memory_stats') else None
print(json.dumps({{"seconds": dt, "rss_before_bytes": before, "peak_rss_bytes": rss('VmHWM:'),
                  "device_peak_bytes_in_use": (stats or {{}}).get('peak_bytes_in_use'),
                  "mean_error": float(e.mean()), "m": int(e.shape[0])}}))
"""


def memory_run(n, c, m):
  code = _CHILD.format(bench=os.path.dirname(os.path.abspath(__file__)), n=n, c=c, m=m)
  # no preallocation: the parent already holds device memory, and the child's
  # peak_bytes_in_use should be what the sweep needs
  env = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE="false")
  out = json_child(code, env, timeout=3600)
  if "error" in out:
    return out
  out["rss_growth_bytes"] = out["peak_rss_bytes"] - out["rss_before_bytes"]
  out.update({"n": n, "C": c, "chunk_size": _sweep.default_chunk_size("linear", n, c)})
  return out


def compiled_memory(n, c, m):
  p = jax.ShapeDtypeStruct((n, c), jnp.float32)
  y = jax.ShapeDtypeStruct((n,), jnp.int32)
  prm = jax.ShapeDtypeStruct((m, c), jnp.float32)
  chunk = _sweep.default_chunk_size("linear", n, c)
  ma = _sweep._local_jit.lower("linear", p, y, prm, chunk).compile().memory_analysis()
  if ma is None:
    return None
  keys = (
    "temp_size_in_bytes",
    "argument_size_in_bytes",
    "output_size_in_bytes",
    "generated_code_size_in_bytes",
  )
  out = {k: int(getattr(ma, k)) for k in keys if hasattr(ma, k)}
  out.update({"n": n, "C": c, "M": m, "chunk_size": chunk})
  return out


def _uc_value_radix(v, u):
  """UC of ``(m, n)`` stacked utilities through the previous CPU sort (the measured baseline).

  Until 2026-11-24 the CPU stable argsort was 2 or 3 LSD radix passes of
  ``uint32`` sorts (one ``lax.cond`` on the keys' span, once for the batch);
  it is now one sort of packed ``uint64`` words. This is the old path, on
  the same stacked rows and row groups.
  """
  from jaxcal._src import sorting as S

  skey, perm = S._radix_argsort(S.float_to_key(v), S.cpu_groups(*v.shape))
  rs = jnp.take_along_axis(u - v, perm, axis=-1)
  zero = jnp.zeros(v.shape[:-1] + (1,), v.dtype)
  s = jnp.concatenate([zero, jnp.cumsum(rs, axis=-1)], axis=-1) / v.shape[-1]
  true = jnp.ones(v.shape[:-1] + (1,), bool)
  cut = jnp.concatenate([true, skey[:, 1:] != skey[:, :-1], true], axis=-1)
  return jnp.max(jnp.where(cut, s, -jnp.inf), -1) - jnp.min(jnp.where(cut, s, jnp.inf), -1)


#: Timed calls (best of) per contender in :func:`scaling`: with 3, a 10^5 call
#: of ~25 ms on this 2-core VM moved the growth between x7.1 and x14.2 from
#: run to run (2026-11-28).
SCALING_REPEAT = 9


def scaling(ns=(100_000, 1_000_000), m: int = 8, repeat: int = SCALING_REPEAT) -> dict:
  """Per-utility cost of the UC core (sort + prefix sum) from n = 10^5 to 10^6.

  ``m`` utilities at once through ``jax.jit(jax.vmap(uc_from_scores))`` on
  ``(m, n)`` float32 predicted/realised utilities (``v`` uniform in [-1, 1]
  as linear utilities give, ``u = ±1``), against the same core on the
  previous CPU sort (radix passes, :func:`_uc_value_radix`), and against the
  numpy per-utility reference (argsort, cumulative sum, max - min over cuts)
  on one utility, warmed up and timed the same way.

  Two floors of the hardware are timed beside them: one XLA sort of the
  ``m`` rows of ``uint32`` keys alone (no payload, no permutation: the
  cheapest sort any sort-based UC can do in XLA:CPU) and numpy's
  ``np.sort`` of one row. Their growth from 10^5 to 10^6 is what the
  memory hierarchy gives a sort on this machine (10^5 float32 keys fit
  a core's L2 cache, 10^6 do not); ``n log n`` alone would be 12x.
  """
  from jaxcal._src.sorting import float_to_key, sort_rows
  from jaxcal._src.utility.uc import uc_from_scores

  core = jax.jit(jax.vmap(lambda v, u: uc_from_scores(v, u).value))
  radix = jax.jit(_uc_value_radix)
  keys_only = jax.jit(lambda v: sort_rows(float_to_key(v)))
  out = {"M": m, "dtype": "float32", "per_n": {}}
  for n in ns:
    rng = np.random.default_rng(n)
    v = rng.uniform(-1, 1, (m, n)).astype(np.float32)
    u = np.where(rng.random((m, n)) < (v + 1) / 2, 1.0, -1.0).astype(np.float32)
    vd, ud = jax.device_put(v), jax.device_put(u)
    got = np.asarray(core(vd, ud))
    got_radix = np.asarray(radix(vd, ud))
    ref = np.array([np_uc(v[i].astype(np.float64), u[i].astype(np.float64)) for i in range(m)])
    t_core = timeit(lambda: core(vd, ud), repeat=repeat)
    t_sel = timeit(lambda: radix(vd, ud), repeat=repeat)
    t_np = timeit(lambda: np_uc(v[0], u[0]), repeat=repeat)
    t_keys = timeit(lambda: keys_only(vd), repeat=repeat)
    t_npsort = timeit(lambda: np.sort(v[0]), repeat=repeat)
    row = {
      "jax_vmap": t_core,
      "jax_previous_radix_sort": t_sel,
      "numpy_one_utility": t_np,
      "jax_per_utility_ms": 1e3 * t_core["best_s"] / m,
      "previous_radix_per_utility_ms": 1e3 * t_sel["best_s"] / m,
      "numpy_per_utility_ms": 1e3 * t_np["best_s"],
      "xla_key_sort_only": t_keys,
      "numpy_sort_only": t_npsort,
      "xla_key_sort_per_row_ms": 1e3 * t_keys["best_s"] / m,
      "numpy_sort_per_row_ms": 1e3 * t_npsort["best_s"],
      "max_abs_diff_vs_numpy_float64": float(np.abs(got - ref).max()),
      "max_abs_diff_previous_radix_vs_numpy_float64": float(np.abs(got_radix - ref).max()),
    }
    out["per_n"][str(n)] = row
    print(
      f"  UC core n={n}: {row['jax_per_utility_ms']:.2f} ms/utility "
      f"(previous radix sort {row['previous_radix_per_utility_ms']:.2f}, numpy {row['numpy_per_utility_ms']:.2f}; "
      f"first call {t_core['first_s']:.2f}s)",
      flush=True,
    )
  lo, hi = (out["per_n"][str(n)] for n in (ns[0], ns[-1]))
  out["growth_per_utility"] = hi["jax_per_utility_ms"] / lo["jax_per_utility_ms"]
  out["growth_previous_radix"] = (
    hi["previous_radix_per_utility_ms"] / lo["previous_radix_per_utility_ms"]
  )
  out["growth_numpy"] = hi["numpy_per_utility_ms"] / lo["numpy_per_utility_ms"]
  out["growth_xla_key_sort_only"] = hi["xla_key_sort_per_row_ms"] / lo["xla_key_sort_per_row_ms"]
  out["growth_numpy_sort_only"] = hi["numpy_sort_per_row_ms"] / lo["numpy_sort_per_row_ms"]
  out["target_growth"] = "<= 12 (n log n from 10^5 to 10^6)"
  out["load_avg_at_end"] = cpu_load()
  print(
    f"  per-utility growth 10^5 -> 10^6: jaxcal x{out['growth_per_utility']:.1f}, "
    f"previous radix sort x{out['growth_previous_radix']:.1f}, numpy x{out['growth_numpy']:.1f}; "
    f"floors: XLA key sort x{out['growth_xla_key_sort_only']:.1f}, "
    f"np.sort x{out['growth_numpy_sort_only']:.1f}",
    flush=True,
  )
  return out


def main():
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument(
    "--small", action="store_true", help="quick run: n=2,000, C=100, M=200 per family"
  )
  ap.add_argument(
    "--numpy-utilities",
    type=int,
    default=300,
    help="utilities per family in the numpy loop (its time is scaled to M)",
  )
  ap.add_argument("--full-100k", action="store_true", help="run the 100k sweep at full n = 15,000")
  ap.add_argument("--repeat", type=int, default=3)
  ap.add_argument(
    "--scaling-only",
    action="store_true",
    help="only the n = 10^5 -> 10^6 per-utility scaling of the UC core (uc_sweep_scaling.json)",
  )
  args = ap.parse_args()
  if args.scaling_only:
    info = device_info()
    print(f"UC core scaling on {info.get('device')} (load {cpu_load()})", flush=True)
    res = scaling(repeat=max(args.repeat, SCALING_REPEAT))
    print(f"wrote {write_result('uc_sweep_scaling', {**info, 'scaling': res})}")
    return

  n, c, m = (2000, 100, 200) if args.small else (15000, 1000, 1500)
  m_np = min(m, args.numpy_utilities)
  info = device_info()
  print(
    f"uc_sweep benchmark: n={n}, C={c}, M={m} per family on {info.get('device')} "
    f"(load {cpu_load()})",
    flush=True,
  )
  p, y = synthetic(n, c)
  key_l, key_r = jax.random.split(jax.random.PRNGKey(0))
  fams = {"linear": U.sample_linear(key_l, m, c), "rank": U.sample_rank(key_r, m, c)}
  t0 = time.perf_counter()
  prep = np_prep(p, y)
  np_prep_s = time.perf_counter() - t0

  results = {}
  for kind, batch in fams.items():
    params = np.asarray(batch.params)
    t0 = time.perf_counter()  # the first call compiles: the figure a user waits for once
    got = np.asarray(U.uc_sweep(p, y, batch))
    first_call_s = time.perf_counter() - t0
    ref = np_loop(kind, p, y, prep, params[:m_np])
    diff = np.abs(got[:m_np] - ref)
    err = float(diff.max())
    # float32 predicted utilities from a matrix product (jaxcal) and a matrix-vector
    # product (numpy) round differently; two nearly tied samples can swap, which moves
    # UC by at most |r_i - r_j| / n <= 4 / n. Anything larger would be a bug.
    assert err <= 4.0 / n, (kind, err)
    t_jax = timeit(lambda: U.uc_sweep(p, y, batch), repeat=args.repeat)
    # the compiled sweep alone, on arrays already on the device (no validation,
    # no host-to-device copy of the 60 MB of probabilities): the accelerator figure
    p_d, y_d, prm_d = jax.device_put((jnp.asarray(p), jnp.asarray(y, jnp.int32), batch.params))
    chunk = _sweep._balanced_chunk(m, min(_sweep.default_chunk_size(kind, n, c), m))
    t_dev = timeit(
      lambda: _sweep._local_jit(kind, p_d, y_d, prm_d, chunk), repeat=max(args.repeat, 5)
    )
    t_np = timeit(lambda: np_loop(kind, p, y, prep, params[:m_np]), repeat=1, warmup=1)
    np_total = t_np["best_s"] * m / m_np
    results[kind] = {
      "jax_first_call_s": first_call_s,
      "jax": t_jax,
      "numpy_loop": t_np,
      "numpy_utilities_timed": m_np,
      "numpy_loop_extrapolated_s": np_total,
      "numpy_per_utility_ms": 1e3 * t_np["best_s"] / m_np,
      "jax_per_utility_ms": 1e3 * t_jax["best_s"] / m,
      "chunk_size": chunk,
      "jax_device_resident": t_dev,
      "jax_device_resident_ms_per_M": 1e3 * t_dev["best_s"],
      "speedup_device_resident_vs_numpy_loop": np_total / t_dev["best_s"],
      "speedup_vs_numpy_loop": np_total / t_jax["best_s"],
      "max_abs_diff_vs_numpy": err,
      "utilities_differing_by_more_than_1e-6": int((diff > 1e-6).sum()),
      "mean_error": float(got.mean()),
    }
    print(
      f"  {kind:6s}: jaxcal {t_jax['best_s']:.3f}s for {m} (first call {first_call_s:.2f}s) | "
      f"numpy loop {1e3 * t_np['best_s'] / m_np:.2f} ms/utility -> {np_total:.2f}s for {m} | "
      f"x{np_total / t_jax['best_s']:.1f} | compiled sweep on device-resident data "
      f"{1e3 * t_dev['best_s']:.2f} ms (x{np_total / t_dev['best_s']:.0f})",
      flush=True,
    )

  big_m = 5000 if args.small else 100_000
  big_n = n if (args.small or args.full_100k) else 1500
  print(f"  chunked sweep: M={big_m}, n={big_n}, C={c} (child process) ...", flush=True)
  mem = memory_run(big_n, c, big_m)
  if "seconds" in mem:
    print(
      f"    {mem['seconds']:.1f}s, peak RSS {mem['peak_rss_bytes'] / 2**20:.0f} MiB "
      f"(+{mem['rss_growth_bytes'] / 2**20:.0f} MiB during the sweep), chunk {mem['chunk_size']}",
      flush=True,
    )
  cm = compiled_memory(n, c, 100_000)
  if cm:
    print(
      f"    compiled n={n} M=100,000 sweep: temp {cm.get('temp_size_in_bytes', 0) / 2**20:.0f} MiB, "
      f"arguments {cm.get('argument_size_in_bytes', 0) / 2**20:.0f} MiB",
      flush=True,
    )

  print("  UC core scaling, n = 10^5 -> 10^6 ...", flush=True)
  scale = None if args.small else scaling(repeat=max(args.repeat, SCALING_REPEAT))

  out = {
    "benchmark": "uc_sweep",
    "config": {"n": n, "C": c, "M_per_family": m, "small": args.small, "repeat": args.repeat},
    **info,
    "load_avg_at_end": cpu_load(),
    "numpy_precompute_s": np_prep_s,
    "results": results,
    "chunked_100k": mem,
    "compiled_memory_100k_full_scale": cm,
    "uc_core_scaling": scale,
    "notes": (
      "numpy loop timed on numpy_utilities_timed utilities per family and scaled to M; "
      "jaxcal timed through the public uc_sweep (validation + precomputation included); "
      "best of `repeat` calls after a warm-up; jax_first_call_s is the process's first call "
      "(tracing and compilation included; the jax entry's first_s is its warm-up, already "
      "compiled). "
      "jax_device_resident: the jitted sweep alone on arrays already on the device. "
      "See load averages for how busy the CPU was."
    ),
  }
  path = write_result("uc_sweep_small" if args.small else "uc_sweep", out)
  print(f"wrote {path}")


if __name__ == "__main__":
  main()
