"""Benchmark: utility calibration errors of thousands of sampled utilities.

ImageNet-scale synthetic predictions (n = 15,000, C = 1,000; over-confident
softmax of Gaussian logits, labels drawn from a tempered softmax) and
M = 1,500 linear plus M = 1,500 rank utilities (``sample_linear`` /
``sample_rank``), measured with ``jaxcal.utility.uc_sweep`` against a
batched numpy sweep in the same run.

The numpy reference (:func:`np_sweep`) is what a user who knows numpy would
write for many utilities at once: per chunk of ``--numpy-chunk`` utilities
(default 64) one float32 matrix product ``V = A @ P.T`` (``P`` the rows of
``p`` sorted descending for rank utilities), the realised utilities
``A[:, y]`` (or ``Θ[:, rank_y]``) by one gather, a row-wise
``np.argsort(V, axis=1)`` (numpy's default kind, *not* stable: UC's prefix
sum is read only at cuts between distinct predicted utilities, so the order
among ties is immaterial), a row-wise float64 ``np.cumsum`` and the max - min
over cuts. Its data-only work (for rank utilities: the sorted rows and the
label ranks) runs inside the timed call, as jaxcal's does inside
``uc_sweep``; its time alone is reported beside (``numpy_rank_precompute``).
By default the reference runs on all M utilities (no extrapolation);
``--numpy-utilities K`` restricts it to the first K, and then jaxcal is timed
on the same K utilities in the same rounds and the ratios are on those K
(the JSON says so in ``ratios_on``).

Contenders, per family, timed by ``_common.interleaved(..., cold=True)``:
the first call of each alone after clearing JAX's caches (``first_call_s``:
tracing and compilation included, no reuse of the other family's or the
other path's programs), then, after one untimed call each, ``--repeat``
rounds of one call each in rotating order; ratios are of medians:

* ``jaxcal``: the public ``uc_sweep(p, y, batch)`` on numpy input
  (validation, host-to-device copy and the data-only precomputation
  included). Its ratio to the numpy reference, ``speedup_vs_numpy_batched``
  (medians), is the headline.
* ``jaxcal_device_resident``: the compiled sweep alone on arrays already on
  the device (no validation, no host-to-device copy); its ratio is
  ``speedup_device_resident_vs_numpy_batched``, beside the headline, not
  instead of it.
* ``numpy_batched``: the reference above, from the same host arrays.

The values are checked before any ratio is written (``_common.check_agree``:
every utility's UC within 4/n of numpy's; the float32 products of XLA and of
numpy's BLAS round differently, and a swap of two nearly tied samples moves
UC by at most 4/n; the JSON also counts utilities differing by more than
1e-6).

Memory at scale: ``M = 100,000`` linear utilities go through the chunked
sweep in a child process (payoffs drawn uniformly in [-1, 1]^C with numpy, so
no sampler temporaries inflate the baseline), whose peak resident memory
(``VmHWM``, reset just before the sweep) is compared with its resident memory
just before the sweep; on GPU the device's
``peak_bytes_in_use`` is reported instead. By default the 100k run uses
``n = 1,500`` (10x fewer samples: a full-scale 100k sweep is several minutes
of 2 shared CPU cores); ``--full-100k`` runs it at n = 15,000. It is one call
(its first, compilation included). XLA's compiled
memory analysis of the full-scale (n = 15,000, C = 1,000, M = 100,000) sweep
is always reported: its temporary buffers are what chunking bounds.

  python experiments/bench/uc_sweep.py            # writes results/uc_sweep.json
  python experiments/bench/uc_sweep.py --scaling-only  # UC core n = 10^5 -> 10^6 only
  python experiments/bench/uc_sweep.py --small    # quick (n=2,000, C=100, M=200), uc_sweep_small.json
"""

from __future__ import annotations

import argparse
import os

import jax
import jax.numpy as jnp
import numpy as np
from _common import (
  check_agree,
  cpu_load,
  device_info,
  interleaved,
  json_child,
  machine_note,
  write_result,
)

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

#: Utilities per matrix product in :func:`np_sweep`. On the 2-core VM
#: (2026-12-01, n = 15,000, C = 1,000, 256 linear utilities) 32-256 were
#: within 20 % of each other (16: 1.7x slower, the product's BLAS call too
#: thin); 64 keeps the chunk's temporaries near 20 MB at n = 15,000.
NUMPY_CHUNK = 64


def np_prep(p, y):
  """The rank utilities' data-only work: rows sorted descending, each label's rank."""
  n, c = p.shape
  ps = -np.sort(-p, axis=1)
  py = p[np.arange(n), y][:, None]
  label_rank = ((p > py) | ((p == py) & (np.arange(c)[None, :] < y[:, None]))).sum(1)
  return ps, label_rank


def np_uc(v, u):
  """UC of one utility: ``v`` predicted, ``u`` realised (``(n,)`` each)."""
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


def np_uc_rows(v, u):
  """UC of each row of ``(k, n)`` predicted ``v`` / realised ``u``: :func:`np_uc` row-wise."""
  k, n = v.shape
  o = np.argsort(v, axis=1)  # numpy's default (unstable) kind: ties' order is immaterial
  vs = np.take_along_axis(v, o, axis=1)
  s = np.zeros((k, n + 1), np.float64)
  np.cumsum(np.take_along_axis(u - v, o, axis=1), axis=1, out=s[:, 1:], dtype=np.float64)
  # S is read at cuts only (0, n and between distinct values). Position 0 is a cut
  # with S = 0, so zeroing the other positions leaves the max and the min over cuts.
  np.copyto(s[:, 1:-1], 0.0, where=vs[:, 1:] == vs[:, :-1])
  return (s.max(1) - s.min(1)) / n


def np_sweep(kind, p, y, params, chunk=NUMPY_CHUNK):
  """UC of every utility in ``params`` (``(M, C)``): one matrix product per chunk.

  The data-only work (rank utilities: :func:`np_prep`) is done once, inside
  the call; then per chunk of ``chunk`` utilities ``V = A @ X.T`` (``X`` is
  ``p``, or its rows sorted descending), ``U = A[:, y]`` (or
  ``A[:, rank_y]``) and :func:`np_uc_rows`.
  """
  p = np.asarray(p)
  params = np.asarray(params)
  if kind == "linear":
    x, idx = p, np.asarray(y)
  else:
    x, idx = np_prep(p, y)
  xt = x.T
  out = np.empty(len(params), np.float64)
  for i in range(0, len(params), chunk):
    a = params[i : i + chunk]
    out[i : i + len(a)] = np_uc_rows(a @ xt, a[:, idx])
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


#: Timed rounds per contender in :func:`scaling`: with 3, a 10^5 call of
#: ~25 ms on this 2-core VM moved the growth between x7.1 and x14.2 from run
#: to run (2026-11-28).
SCALING_REPEAT = 9


def scaling(ns=(100_000, 1_000_000), m: int = 8, repeat: int = SCALING_REPEAT) -> dict:
  """Per-utility cost of the UC core (sort + prefix sum) from n = 10^5 to 10^6.

  ``m`` utilities at once through ``jax.jit(jax.vmap(uc_from_scores))`` on
  ``(m, n)`` float32 predicted/realised utilities (``v`` uniform in [-1, 1]
  as linear utilities give, ``u = ±1``), against the same core on the
  previous CPU sort (radix passes, :func:`_uc_value_radix`), and against
  numpy's per-utility core (:func:`np_uc`: argsort, cumulative sum, max -
  min over cuts) on one utility.

  Two floors of the hardware are timed beside them: one XLA sort of the
  ``m`` rows of ``uint32`` keys alone (no payload, no permutation: the
  cheapest sort any sort-based UC can do in XLA:CPU) and numpy's
  ``np.sort`` of one row. Their growth from 10^5 to 10^6 is what the
  memory hierarchy gives a sort on this machine (10^5 float32 keys fit
  a core's L2 cache, 10^6 do not); ``n log n`` alone would be 12x.

  All five are timed by ``interleaved(..., cold=True)``: each first call
  alone after clearing JAX's caches, then ``repeat`` rounds in rotating
  order. The per-utility figures and growths are given from the
  medians (``*_median_ms``, ``growth_*_median``) and, as before, from the
  best call (``*_ms``, ``growth_*``).
  """
  from jaxcal._src.sorting import float_to_key, sort_rows
  from jaxcal._src.utility.uc import uc_from_scores

  core = jax.jit(jax.vmap(lambda v, u: uc_from_scores(v, u).value))
  radix = jax.jit(_uc_value_radix)
  keys_only = jax.jit(lambda v: sort_rows(float_to_key(v)))
  out = {
    "M": m,
    "dtype": "float32",
    "timing": f"interleaved(cold=True): cold first calls, then {repeat} interleaved rounds",
    "per_n": {},
  }
  for n in ns:
    rng = np.random.default_rng(n)
    v = rng.uniform(-1, 1, (m, n)).astype(np.float32)
    u = np.where(rng.random((m, n)) < (v + 1) / 2, 1.0, -1.0).astype(np.float32)
    vd, ud = jax.device_put(v), jax.device_put(u)
    got = np.asarray(core(vd, ud))
    got_radix = np.asarray(radix(vd, ud))
    ref = np.array([np_uc(v[i].astype(np.float64), u[i].astype(np.float64)) for i in range(m)])
    # float32 sums against float64 ones: observed 3e-10 to 2e-9 (2026-11-30)
    diffs = check_agree(
      {"jax": got, "previous_radix": got_radix, "numpy_float64": ref},
      "numpy_float64",
      rtol=0,
      atol=1e-6,
    )
    v0, u0 = v[0], u[0]
    t = interleaved(
      {
        "jax_vmap": (core, (vd, ud)),
        "jax_previous_radix_sort": (radix, (vd, ud)),
        "numpy_one_utility": (np_uc, (v0, u0)),
        "xla_key_sort_only": (keys_only, (vd,)),
        "numpy_sort_only": (np.sort, (v0,)),
      },
      repeat,
      cold=True,
    )
    t_core, t_sel, t_np = t["jax_vmap"], t["jax_previous_radix_sort"], t["numpy_one_utility"]
    t_keys, t_npsort = t["xla_key_sort_only"], t["numpy_sort_only"]
    row = {
      **t,
      "jax_per_utility_ms": 1e3 * t_core["best_s"] / m,
      "previous_radix_per_utility_ms": 1e3 * t_sel["best_s"] / m,
      "numpy_per_utility_ms": 1e3 * t_np["best_s"],
      "xla_key_sort_per_row_ms": 1e3 * t_keys["best_s"] / m,
      "numpy_sort_per_row_ms": 1e3 * t_npsort["best_s"],
      "jax_per_utility_median_ms": 1e3 * t_core["median_s"] / m,
      "previous_radix_per_utility_median_ms": 1e3 * t_sel["median_s"] / m,
      "numpy_per_utility_median_ms": 1e3 * t_np["median_s"],
      "xla_key_sort_per_row_median_ms": 1e3 * t_keys["median_s"] / m,
      "numpy_sort_per_row_median_ms": 1e3 * t_npsort["median_s"],
      "max_abs_diff_vs_numpy_float64": diffs["jax"],
      "max_abs_diff_previous_radix_vs_numpy_float64": diffs["previous_radix"],
    }
    out["per_n"][str(n)] = row
    print(
      f"  UC core n={n}: {row['jax_per_utility_median_ms']:.2f} ms/utility (median; "
      f"previous radix sort {row['previous_radix_per_utility_median_ms']:.2f}, "
      f"numpy {row['numpy_per_utility_median_ms']:.2f}; first call {t_core['first_call_s']:.2f}s)",
      flush=True,
    )
  lo, hi = (out["per_n"][str(n)] for n in (ns[0], ns[-1]))
  for key, name in (
    ("jax_per_utility", "growth_per_utility"),
    ("previous_radix_per_utility", "growth_previous_radix"),
    ("numpy_per_utility", "growth_numpy"),
    ("xla_key_sort_per_row", "growth_xla_key_sort_only"),
    ("numpy_sort_per_row", "growth_numpy_sort_only"),
  ):
    out[name] = hi[f"{key}_ms"] / lo[f"{key}_ms"]
    out[f"{name}_median"] = hi[f"{key}_median_ms"] / lo[f"{key}_median_ms"]
  out["target_growth"] = "<= 12 (n log n from 10^5 to 10^6)"
  out["load_avg_at_end"] = cpu_load()
  print(
    f"  per-utility growth 10^5 -> 10^6 (medians): jaxcal x{out['growth_per_utility_median']:.1f}, "
    f"previous radix sort x{out['growth_previous_radix_median']:.1f}, "
    f"numpy x{out['growth_numpy_median']:.1f}; "
    f"floors: XLA key sort x{out['growth_xla_key_sort_only_median']:.1f}, "
    f"np.sort x{out['growth_numpy_sort_only_median']:.1f}",
    flush=True,
  )
  return out


def _family(kind, p, y, batch, m_np, repeat, chunk_np=NUMPY_CHUNK) -> dict:
  """Times one family: public sweep, device-resident sweep, batched numpy (see the module doc)."""
  n, c = p.shape
  m = len(batch)
  params = np.asarray(batch.params)
  sub = m_np < m
  # values first: a fast wrong answer must not pass as a speed-up
  got = np.asarray(U.uc_sweep(p, y, batch))
  ref = np_sweep(kind, p, y, params[:m_np], chunk_np)
  # float32 predicted utilities from XLA's product and numpy's BLAS round differently;
  # two nearly tied samples can swap, which moves UC by at most |r_i - r_j| / n <= 4 / n.
  diffs = check_agree({"jaxcal": got[:m_np], "numpy_batched": ref}, "numpy_batched", 0, 4.0 / n)
  diff = np.abs(got[:m_np] - ref)

  p_d, y_d, prm_d = jax.device_put((jnp.asarray(p), jnp.asarray(y, jnp.int32), batch.params))
  chunk = _sweep._balanced_chunk(m, min(_sweep.default_chunk_size(kind, n, c), m))
  paths = {
    "jaxcal": (lambda: U.uc_sweep(p, y, batch), ()),
    "jaxcal_device_resident": (lambda: _sweep._local_jit(kind, p_d, y_d, prm_d, chunk), ()),
    "numpy_batched": (lambda: np_sweep(kind, p, y, params[:m_np], chunk_np), ()),
  }
  if sub:  # jaxcal on the same utilities as numpy, in the same rounds
    b_sub, prm_sub = batch[:m_np], prm_d[:m_np]
    chunk_sub = _sweep._balanced_chunk(m_np, min(_sweep.default_chunk_size(kind, n, c), m_np))
    paths["jaxcal_subset"] = (lambda: U.uc_sweep(p, y, b_sub), ())
    paths["jaxcal_device_resident_subset"] = (
      lambda: _sweep._local_jit(kind, p_d, y_d, prm_sub, chunk_sub),
      (),
    )
  if kind == "rank":
    paths["numpy_rank_precompute"] = (lambda: np_prep(p, y), ())
  t = interleaved(paths, repeat, cold=True)
  pub = t["jaxcal_subset" if sub else "jaxcal"]
  dev = t["jaxcal_device_resident_subset" if sub else "jaxcal_device_resident"]
  t_np = t["numpy_batched"]
  res = {
    "jax_first_call_s": t["jaxcal"]["first_call_s"],
    "jax": t["jaxcal"],
    "jax_device_resident": t["jaxcal_device_resident"],
    "numpy_batched": t_np,
    "numpy_utilities_timed": m_np,
    "numpy_chunk": chunk_np,
    "ratios_on": (
      f"the first {m_np} of {m} utilities (jaxcal_subset, jaxcal_device_resident_subset)"
      if sub
      else f"all {m} utilities"
    ),
    "chunk_size": chunk,
    "per_utility_median_ms": {
      "jaxcal": 1e3 * t["jaxcal"]["median_s"] / m,
      "jaxcal_device_resident": 1e3 * t["jaxcal_device_resident"]["median_s"] / m,
      "numpy_batched": 1e3 * t_np["median_s"] / m_np,
    },
    "speedup_vs_numpy_batched": t_np["median_s"] / pub["median_s"],
    "speedup_device_resident_vs_numpy_batched": t_np["median_s"] / dev["median_s"],
    "speedup_vs_numpy_batched_best": t_np["best_s"] / pub["best_s"],
    "max_abs_diff_vs_numpy": diffs["jaxcal"],
    "utilities_differing_by_more_than_1e-6": int((diff > 1e-6).sum()),
    "mean_error": float(got.mean()),
  }
  for k in ("jaxcal_subset", "jaxcal_device_resident_subset", "numpy_rank_precompute"):
    if k in t:
      res[k] = t[k]
  print(
    f"  {kind:6s}: jaxcal {pub['median_s']:.3f}s (first call {t['jaxcal']['first_call_s']:.2f}s) | "
    f"numpy batched {t_np['median_s']:.3f}s for {m_np} (first call {t_np['first_call_s']:.2f}s) | "
    f"x{res['speedup_vs_numpy_batched']:.2f} | device-resident {1e3 * dev['median_s']:.2f} ms "
    f"(x{res['speedup_device_resident_vs_numpy_batched']:.2f}); medians of {repeat}",
    flush=True,
  )
  return res


def main():
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument(
    "--small", action="store_true", help="quick run: n=2,000, C=100, M=200 per family"
  )
  ap.add_argument(
    "--numpy-utilities",
    type=int,
    default=None,
    help="utilities per family for the numpy reference (default: all M); with fewer, "
    "jaxcal is also timed on the same ones and the ratios are on those",
  )
  ap.add_argument(
    "--numpy-chunk",
    type=int,
    default=NUMPY_CHUNK,
    help=f"utilities per matrix product in the numpy reference (default {NUMPY_CHUNK})",
  )
  ap.add_argument("--full-100k", action="store_true", help="run the 100k sweep at full n = 15,000")
  ap.add_argument("--repeat", type=int, default=3, help="interleaved timed rounds (medians)")
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
  m_np = m if args.numpy_utilities is None else max(1, min(m, args.numpy_utilities))
  info = device_info()
  print(
    f"uc_sweep benchmark: n={n}, C={c}, M={m} per family on {info.get('device')} "
    f"(load {cpu_load()})",
    flush=True,
  )
  p, y = synthetic(n, c)
  key_l, key_r = jax.random.split(jax.random.PRNGKey(0))
  fams = {"linear": U.sample_linear(key_l, m, c), "rank": U.sample_rank(key_r, m, c)}
  results = {
    kind: _family(kind, p, y, batch, m_np, args.repeat, args.numpy_chunk)
    for kind, batch in fams.items()
  }
  load_mid = cpu_load()

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
    "config": {
      "n": n,
      "C": c,
      "M_per_family": m,
      "numpy_utilities": m_np,
      "numpy_chunk": args.numpy_chunk,
      "small": args.small,
      "repeat": args.repeat,
    },
    **info,
    "load_avg_after_families": load_mid,
    "load_avg_at_end": cpu_load(),
    "headline": {
      "ratio": "speedup_vs_numpy_batched",
      "meaning": "numpy_batched median / jaxcal (public uc_sweep on numpy input) median",
      "values": {k: r["speedup_vs_numpy_batched"] for k, r in results.items()},
      "device_resident_beside": {
        k: r["speedup_device_resident_vs_numpy_batched"] for k, r in results.items()
      },
    },
    "machine_note": machine_note(
      load_mid,
      info.get("cpu_count"),
      statistic=f"median of {args.repeat} interleaved timed calls each",
    ),
    "results": results,
    "chunked_100k": mem,
    "compiled_memory_100k_full_scale": cm,
    "uc_core_scaling": scale,
    "notes": (
      "numpy_batched: np_sweep, one float32 matrix product per chunk of numpy_chunk utilities, "
      "row-wise unstable argsort, float64 cumsum, max - min over cuts; its data-only work "
      "(rank: sorted rows, label ranks) inside the timed call, as jaxcal's is. "
      "jax: the public uc_sweep on numpy input (validation, host-to-device copy and "
      "precomputation included); jax_device_resident: the jitted sweep alone on arrays "
      "already on the device. All timed by _common.interleaved(cold=True): each path's "
      "first call alone after clearing JAX's caches, then one untimed call each and "
      "`repeat` rounds in rotating order; "
      "ratios from medians (speedup_vs_numpy_batched_best "
      "from the best calls); each first_call_s is the path's first call after clearing "
      "JAX's caches (tracing and compilation included); jax_first_call_s is the public "
      "call's. Values checked (check_agree, atol 4/n) before the ratios. chunked_100k is "
      "one call in a child process (compilation included). See the load averages for how "
      "busy the CPU was."
    ),
  }
  path = write_result("uc_sweep_small" if args.small else "uc_sweep", out)
  print(f"wrote {path}")


if __name__ == "__main__":
  main()
