"""Benchmark: where the time of a UC sweep goes, stage by stage, on one device.

The accelerator target of the UC sweep is <= 3 ms per 1,500 linear utilities
at n = 15,000, C = 1,000 (arrays already on the device). This script splits
that program into its stages and times each on ``(M, n) = (1500, 15000)``
arrays, then times whole-sweep forms that differ in one choice each:

- the predicted utilities ``v = A p^T``, an ``(M, C) x (C, n)`` matrix
  product, at ``Precision.HIGHEST`` (the library's, plain float32) and with
  the dot algorithms that reach float32 accuracy on tensor cores
  (``TF32_TF32_F32_X3``, ``BF16_BF16_F32_X6``), beside the single-pass
  ``DEFAULT`` (TF32 on a GPU: not float32-accurate, a floor only); each with
  its largest error against a float64 product;
- the realised utilities ``u = A[:, y]`` (a gather);
- the sort of ``(key(v), u - v)`` pairs along each row, and of the keys alone
  (a floor), of 64-bit ``key << 32 | bits(u - v)`` words along each row (keys
  only), and one sort of 64-bit ``row << 32 | key`` words over all rows;
- the prefix sums: the matmul form of ``blocked_cumsum`` (matmuls with a
  triangle of ones; the library's on CPU), ``jnp.cumsum`` and
  ``lax.associative_scan`` (the library's on GPUs);
- the max-min over cuts between distinct values, also without the column of
  zeros for ``S_0`` (``finish_unpadded``: ``S_0 = 0`` joins as a scalar).

First calls: each stage's first call (tracing, compilation, autotuning and
one run), cold, with a sample count of its own so that nothing compiled
before is reused.

Whole sweeps: the library's compiled sweep (``_local_jit``) at its default
chunk and at bigger chunks, the same at its default chunk with the TF32x3 and
BF16x6 products (its private ``precision`` option), and a stand-alone copy
of its core with one choice changed at a time. Every whole form's UC values are compared with the
library's and with a float64 numpy reference on every utility: the largest
difference, in absolute terms and times n, and how many utilities moved by
more than 1e-7. A float32 product moves a few utilities by one sample's
``|u - v| / n`` (at most 2 / n a sample): UC is discontinuous where two
samples nearly tie at an end of the worst interval (``uc_precision.py``), so
a product is judged by that count against the float32 product's own, not by
whether the first few utilities happen to agree.

  python experiments/bench/uc_stages.py            # full size, uc_stages[_gpu].json
  python experiments/bench/uc_stages.py --small    # n=2,000, C=100, M=200 (a CPU check)
"""

from __future__ import annotations

import argparse
import functools
import time

import jax
import jax.numpy as jnp
import numpy as np
from _common import cpu_load, device_info, timeit, write_result
from uc_sweep import np_uc, synthetic

from jaxcal import utility as U
from jaxcal._src.binning import _mm_cumsum_last, blocked_cumsum
from jaxcal._src.sorting import float_to_key
from jaxcal._src.utility import sweep as _sweep

HIGHEST = jax.lax.Precision.HIGHEST
#: UC differences above this count as a moved value (float64 rounding is ~1e-15).
CHANGED = 1e-7
ALGORITHMS = {
  "highest": HIGHEST,
  "tf32_x3": jax.lax.DotAlgorithmPreset.TF32_TF32_F32_X3,
  "bf16_x6": jax.lax.DotAlgorithmPreset.BF16_BF16_F32_X6,
  "bf16_x3": jax.lax.DotAlgorithmPreset.BF16_BF16_F32_X3,
  "default": jax.lax.Precision.DEFAULT,
}


def gemm(a, p, alg):
  """``(M, C) x (n, C)^T -> (M, n)``."""
  return jax.lax.dot_general(a, p, (((1,), (1,)), ((), ())), precision=ALGORITHMS[alg])


def cumsum(x, how):
  if how == "blocked":  # the matmul form on every backend
    return _mm_cumsum_last(x, 128)
  if how == "library":  # the matmul form on CPU, the scan on GPUs
    return blocked_cumsum(x, axis=1)
  if how == "jnp":
    return jnp.cumsum(x, axis=1)
  return jax.lax.associative_scan(jnp.add, x, axis=1)


def finish(ks, rs, how, n):
  """UC from sorted keys and residuals of each row: max - min of S over the cuts."""
  s = jnp.concatenate([jnp.zeros((ks.shape[0], 1), rs.dtype), cumsum(rs, how)], axis=1) / n
  edge = jnp.ones((ks.shape[0], 1), bool)
  cut = jnp.concatenate([edge, ks[:, 1:] != ks[:, :-1], edge], axis=1)
  return jnp.max(jnp.where(cut, s, -jnp.inf), axis=1) - jnp.min(jnp.where(cut, s, jnp.inf), axis=1)


def finish_unpadded(ks, rs, how, n):
  """:func:`finish` without the column of zeros: ``S_0 = 0`` joins the max and min as a scalar."""
  cs = cumsum(rs, how)  # n S_1 .. n S_n
  last = jnp.ones((ks.shape[0], 1), bool)
  valid = jnp.concatenate([ks[:, 1:] != ks[:, :-1], last], axis=1)  # S after sample i counts
  hi = jnp.maximum(jnp.max(jnp.where(valid, cs, -jnp.inf), axis=1), 0)
  lo = jnp.minimum(jnp.min(jnp.where(valid, cs, jnp.inf), axis=1), 0)
  return (hi - lo) / n


def core(p, y, a, alg, how):
  """UC values of the utilities in ``a`` (``(k, C)``): the library's core, one choice open.

  ``how``: the prefix sum's form, with ``_unpadded`` appended for
  :func:`finish_unpadded`.
  """
  v = gemm(a, p, alg)
  r = a[:, y] - v
  ks, rs = jax.lax.sort((float_to_key(v), r), dimension=1, num_keys=1, is_stable=False)
  if how.endswith("_unpadded"):
    return finish_unpadded(ks, rs, how.removesuffix("_unpadded"), p.shape[0])
  return finish(ks, rs, how, p.shape[0])


@functools.partial(jax.jit, static_argnames=("alg", "how", "chunk"))
def whole(p, y, a, alg="highest", how="blocked", chunk=None):
  m = a.shape[0]
  chunk = chunk or m
  if chunk >= m:
    return core(p, y, a, alg, how)
  assert m % chunk == 0, (m, chunk)
  out = jax.lax.map(lambda b: core(p, y, b, alg, how), a.reshape(m // chunk, chunk, -1))
  return out.reshape(m)


def global_sort(key, r):
  """One sort of ``row << 32 | key`` words (uint64) over all rows, ``r`` carried."""
  with jax.enable_x64(True):
    row = jax.lax.broadcasted_iota(jnp.uint64, key.shape, 0)
    words = (row << jnp.uint64(32)) | key.astype(jnp.uint64)
    w, rr = jax.lax.sort((words.reshape(-1), r.reshape(-1)), num_keys=1, is_stable=False)
    ks = (w & jnp.uint64(0xFFFFFFFF)).astype(jnp.uint32)
  return ks.reshape(key.shape), rr.reshape(key.shape)


def float64_diffs(vals: np.ndarray, ref: np.ndarray, n: int) -> dict:
  """How far UC values are from float64: the largest difference and how many utilities moved.

  UC is discontinuous in the predicted utilities: a product error far below
  float32 resolution can move one sample across an end of the worst interval
  and UC by that sample's ``|u - v| / n`` (``uc_precision.py``). So the
  count of utilities that moved by more than :data:`CHANGED`, against the
  float32 product's own count, is the fair comparison of two products, and
  the largest difference in units of ``1 / n`` says whether a move was one
  sample's (below 2) or something else.
  """
  d = np.abs(vals - ref)
  return {
    "max_abs_diff_vs_float64": float(d.max()),
    "max_abs_diff_vs_float64_times_n": float(d.max() * n),
    "utilities_changed": int((d > CHANGED).sum()),
  }


def first_calls(p, y, a, m):
  """Seconds of the first call (tracing, compilation and one run) of each stage, cold.

  Each program gets a sample count of its own (``n + 1``, ``n + 2``, ...),
  so no compiled program or autotuned matrix product of another is reused;
  the device is initialised beforehand by a small unrelated program.
  """
  jax.block_until_ready(jnp.ones((8, 8)) @ jnp.ones((8, 8)))
  n, c = p.shape
  out = {}

  def cold(name, fn, *args):
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*args))
    out[name] = time.perf_counter() - t0

  rows = lambda k: np.concatenate([p, p[:k]])  # n + k samples
  labels = lambda k: np.concatenate([y, y[:k]]).astype(np.int32)
  values = lambda k: jnp.asarray(np.resize(p[:, 0], (m, n + k)))  # (M, n + k)
  a_d = jnp.asarray(a)
  cold("gemm_highest", jax.jit(lambda q: gemm(a_d, q, "highest")), jnp.asarray(rows(1)))
  f32 = jax.lax.DotAlgorithmPreset.F32_F32_F32
  try:
    dot = jax.jit(lambda q: jax.lax.dot_general(a_d, q, (((1,), (1,)), ((), ())), precision=f32))
    cold("gemm_preset_f32", dot, jnp.asarray(rows(2)))
  except Exception as e:
    out["gemm_preset_f32_error"] = f"{type(e).__name__}: {str(e)[:200]}"
  for k, (name, how) in enumerate(
    (("matmul_form", "blocked"), ("scan", "scan"), ("library", "library")), 3
  ):
    cold(f"cumsum_{name}", jax.jit(functools.partial(cumsum, how=how)), values(k))
  chunk = _sweep._balanced_chunk(m, min(_sweep.default_chunk_size("linear", n + 6, c), m))
  sweep = lambda q, yy: _sweep._local_jit("linear", q, yy, a_d, chunk)
  cold("library_sweep_compiled", sweep, jnp.asarray(rows(6)), jnp.asarray(labels(6)))
  batch = U.sample_linear(jax.random.PRNGKey(0), m, c)
  cold("public_uc_sweep", lambda q, yy: U.uc_sweep(q, yy, batch), rows(7), labels(7))
  return out


def packed_row_sort(key, r):
  """Per-row sort of ``key << 32 | bits(r)`` words (uint64, keys only): ``r`` rides in the low half."""
  with jax.enable_x64(True):
    bits = jax.lax.bitcast_convert_type(r, jnp.uint32).astype(jnp.uint64)
    w = jnp.sort((key.astype(jnp.uint64) << jnp.uint64(32)) | bits, axis=1)
    ks = (w >> jnp.uint64(32)).astype(jnp.uint32)
    rs = jax.lax.bitcast_convert_type((w & jnp.uint64(0xFFFFFFFF)).astype(jnp.uint32), r.dtype)
  return ks, rs


def main():
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--small", action="store_true", help="n=2,000, C=100, M=200 (a CPU check)")
  ap.add_argument("--repeat", type=int, default=10)
  ap.add_argument(
    "--check", type=int, default=None, help="utilities checked against float64 (default: all)"
  )
  args = ap.parse_args()
  n, c, m = (2000, 100, 200) if args.small else (15000, 1000, 1500)
  args.check = m if args.check is None else min(args.check, m)
  info = device_info()
  print(f"uc_stages: n={n}, C={c}, M={m} on {info.get('device')} (load {cpu_load()})", flush=True)
  p, y = synthetic(n, c)
  a = U.sample_linear(jax.random.PRNGKey(0), m, c).params
  p_d, y_d, a_d = jax.device_put((jnp.asarray(p), jnp.asarray(y, jnp.int32), a))
  a_np = np.asarray(a, np.float64)
  v64 = np.asarray(p, np.float64) @ a_np[: args.check].T  # (n, check)
  ref = np.array([np_uc(v64[:, i], a_np[i][y]) for i in range(args.check)])
  t = lambda f, *xs: timeit(lambda: f(*xs), repeat=args.repeat)
  stages, errors = {}, {}
  first = first_calls(p, y, a, m)
  for name, sec in first.items():
    print(f"  first call {name:28s} {sec:7.2f} s", flush=True)

  for alg in ALGORITHMS:
    f = jax.jit(functools.partial(gemm, alg=alg))
    try:
      stages[f"gemm_{alg}"] = t(f, a_d, p_d)
      v = np.asarray(f(a_d[: args.check], p_d), np.float64)
      errors[f"gemm_{alg}_max_abs_err"] = float(np.abs(v - v64.T).max())
    except Exception as e:  # an algorithm the backend does not offer
      stages[f"gemm_{alg}"] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
    print(f"  gemm {alg:8s} {stages[f'gemm_{alg}']}", flush=True)

  v = jax.jit(functools.partial(gemm, alg="highest"))(a_d, p_d)
  stages["gather_u"] = t(jax.jit(lambda a, y: a[:, y]), a_d, y_d)
  r = jax.jit(lambda a, y, v: a[:, y] - v)(a_d, y_d, v)
  key = jax.jit(float_to_key)(v)
  pair = jax.jit(lambda k, r: jax.lax.sort((k, r), dimension=1, num_keys=1, is_stable=False))
  stages["sort_pairs"] = t(pair, key, r)
  stages["sort_keys_only"] = t(jax.jit(lambda k: jnp.sort(k, axis=1)), key)
  try:
    stages["sort_global_uint64"] = t(jax.jit(global_sort), key, r)
  except Exception as e:
    stages["sort_global_uint64"] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
  try:
    stages["sort_packed_uint64_rows"] = t(jax.jit(packed_row_sort), key, r)
  except Exception as e:
    stages["sort_packed_uint64_rows"] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
  ks, rs = pair(key, r)
  for how in ("blocked", "jnp", "scan"):
    stages[f"cumsum_{how}"] = t(jax.jit(functools.partial(cumsum, how=how)), rs)
    stages[f"finish_{how}"] = t(jax.jit(functools.partial(finish, how=how, n=n)), ks, rs)
    unpadded = jax.jit(functools.partial(finish_unpadded, how=how, n=n))
    stages[f"finish_unpadded_{how}"] = t(unpadded, ks, rs)
    same = jax.jit(functools.partial(finish, how=how, n=n))(ks, rs)
    stages[f"finish_unpadded_{how}"]["max_abs_diff_vs_finish"] = float(
      jnp.max(jnp.abs(unpadded(ks, rs) - same))
    )
  for name, s in stages.items():
    if "best_s" in s:
      print(f"  {name:22s} {1e3 * s['best_s']:8.3f} ms", flush=True)

  lib_vals = None
  sweeps = {}
  default_chunk = _sweep._balanced_chunk(m, min(_sweep.default_chunk_size("linear", n, c), m))
  cpu_chunk = _sweep._balanced_chunk(m, min(_sweep.CHUNK_BYTES // (48 * n), m))
  for chunk in sorted({cpu_chunk, default_chunk, m // 2, m}):
    f = functools.partial(_sweep._local_jit, "linear", p_d, y_d, a_d, chunk)
    sweeps[f"library_chunk{chunk}"] = t(f)
    if lib_vals is None:
      lib_vals = np.asarray(f(), np.float64)

  def sweep_form(name, f):
    """Times the whole sweep ``f`` and compares its values with the library's and float64."""
    try:
      sweeps[name] = t(f)
      vals = np.asarray(f(), np.float64)
      sweeps[name]["max_abs_diff_vs_library"] = float(np.abs(vals - lib_vals).max())
      sweeps[name].update(float64_diffs(vals[: args.check], ref, n))
    except Exception as e:  # a product algorithm the backend does not offer
      sweeps[name] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}

  for alg in ("tf32_x3", "bf16_x6"):  # the library's own sweep with another product
    prec = ALGORITHMS[alg]
    f = functools.partial(_sweep._local_jit, "linear", p_d, y_d, a_d, default_chunk, precision=prec)
    sweep_form(f"library_{alg}_chunk{default_chunk}", f)
  forms = [("highest", "blocked", None), ("highest", "blocked", cpu_chunk)]
  forms += [
    (alg, how, None) for alg in ("tf32_x3", "bf16_x6", "highest") for how in ("jnp", "scan")
  ]
  forms += [
    ("tf32_x3", "blocked", None),
    ("bf16_x6", "blocked", None),
    ("default", "blocked", None),
  ]
  forms += [
    (alg, f"{how}_unpadded", None) for alg in ("tf32_x3", "highest") for how in ("scan", "blocked")
  ]
  for alg, how, chunk in forms:
    f = functools.partial(whole, p_d, y_d, a_d, alg=alg, how=how, chunk=chunk)
    sweep_form(f"core_{alg}_{how}_chunk{chunk or m}", f)
  lib_diffs = float64_diffs(lib_vals[: args.check], ref, n)
  lib_err = lib_diffs["max_abs_diff_vs_float64"]
  for name, s in sweeps.items():
    if "best_s" in s:
      print(
        f"  {name:34s} {1e3 * s['best_s']:8.3f} ms (first {s['first_s']:.2f} s) "
        f"diff lib {s.get('max_abs_diff_vs_library', 0):.2e} f64 "
        f"{s.get('max_abs_diff_vs_float64', lib_err):.2e} "
        f"({s.get('utilities_changed', lib_diffs['utilities_changed'])} of {args.check} "
        f"changed by more than {CHANGED:g})",
        flush=True,
      )
    else:
      print(f"  {name}: {s}", flush=True)

  out = {
    "benchmark": "uc_stages",
    "config": {"n": n, "C": c, "M": m, "repeat": args.repeat, "checked_utilities": args.check},
    **info,
    "load_avg_at_end": cpu_load(),
    "default_chunk": default_chunk,
    "cpu_budget_chunk": cpu_chunk,
    "first_call_s": first,
    "stages": stages,
    "gemm_errors_vs_float64": errors,
    "library_max_abs_diff_vs_float64": lib_err,
    "library_vs_float64": lib_diffs,
    "sweeps": sweeps,
    "notes": (
      "Each stage jitted alone on (M, n) device arrays; best of `repeat` calls after a "
      "warm-up (first_s includes compilation). library_chunkK: the library's compiled sweep "
      "(_local_jit) with K utilities per chunk; library_ALG_chunkK: the same with the product "
      "algorithm ALG. core_ALG_CUMSUM_chunkK: a stand-alone copy "
      "of the library's UC core with the matrix-product algorithm and prefix sum named, K "
      "utilities per lax.map step. Errors: largest absolute difference over "
      "checked_utilities (all M by default) against float64 numpy (np_uc of uc_sweep.py), "
      "also times n, with utilities_changed the number that moved by more than 1e-7 (one "
      "sample crossing an end of the worst interval moves UC by its |u - v| / n; see "
      "uc_precision.py), or over all M against the library. DEFAULT precision is a floor, "
      "not float32-accurate."
    ),
  }
  print(f"wrote {write_result('uc_stages_small' if args.small else 'uc_stages', out)}")


if __name__ == "__main__":
  t0 = time.perf_counter()
  main()
  print(f"uc_stages done in {time.perf_counter() - t0:.0f} s")
