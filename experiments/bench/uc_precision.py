"""Experiment: how UC moves when the predicted utilities move by float32 rounding.

UC is a discontinuous function of the predicted utilities ``v``: when two
samples' ``v`` nearly tie at an end of the worst interval, a perturbation
``dv`` smaller than their gap's rounding can move one of them across that
end, and UC moves by that sample's residual ``|u_i - v_i| / n`` (up to
``2 / n``), however accurate the product otherwise is. So "UC within 1e-8 of
float64" is not a property of a float32 product at all: it holds or fails
per utility, by chance.

This script measures that on the UC sweep's benchmark size (n = 15,000,
C = 1,000, 1,500 linear utilities; ``uc_sweep.synthetic``). Against a float64
numpy reference (product and UC) it computes UC from predicted utilities that
differ from float64 by:

- the backend's float32 product at ``Precision.HIGHEST`` (the library's);
- the dot-algorithm presets the backend offers (``TF32_TF32_F32_X3`` on GPUs,
  ``BF16_BF16_F32_X6``);
- numpy emulations of TF32x3 (operands split into two 10-bit-mantissa parts,
  three products) and BF16x6 (three 7-bit parts, six products), accumulated
  in float32, so the accelerators' algorithms can be judged on any machine;
- Gaussian noise of standard deviation 1e-7, 4e-7 and 1.3e-6 (the size of
  the products' errors);

and also runs the library's whole compiled sweep. For each: the largest
``|v - v64|``, the number of the 1,500 utilities whose UC differs from
float64 by more than 1e-7, and the largest difference. For every product
variant it checks each utility against the bound

.. math::
  |UC' - UC| \\le \\max_i |dv_i| + \\frac1n \\sum_{i \\in F} (|r_i| + |dv_i|),

where ``F`` holds the samples within ``|dv_i|`` of an end of either worst
interval (the only ones that can change sides): a UC difference that broke
it would be a bug, not rounding.

  python experiments/bench/uc_precision.py          # uc_precision.json (~1 min on 2 cores)
  python experiments/bench/uc_precision.py --small  # n=2,000, C=100, M=200
  python experiments/bench/uc_precision.py --backend-only  # the accelerator's products only
"""

from __future__ import annotations

import argparse
import time

import jax
import numpy as np
from _common import cpu_load, device_info, write_result
from uc_sweep import synthetic

from jaxcal import utility as U
from jaxcal._src.utility import sweep as _sweep

PRESETS = {
  "highest": jax.lax.Precision.HIGHEST,
  "tf32_x3": jax.lax.DotAlgorithmPreset.TF32_TF32_F32_X3,
  "bf16_x6": jax.lax.DotAlgorithmPreset.BF16_BF16_F32_X6,
}
#: UC differences above this count as a changed value (float64 rounding is ~1e-15).
CHANGED = 1e-7


def np_uc_interval(v: np.ndarray, u: np.ndarray) -> tuple[float, float, float]:
  """UC and its worst interval ``[lo, hi]`` in float64: sort, prefix sums, max - min over cuts.

  Written from Hegazy, Jordan & Dieuleveut (2025), Eq. (3.2): the
  intervals of ``v`` are the runs of the sorted order that do not split a tie.
  """
  n = v.shape[0]
  o = np.argsort(v, kind="stable")
  vs = v[o]
  s = np.concatenate([[0.0], np.cumsum((u - v)[o])]) / n
  cut = np.concatenate([[True], vs[1:] != vs[:-1], [True]])
  idx = np.flatnonzero(cut)
  kmax, kmin = idx[np.argmax(s[idx])], idx[np.argmin(s[idx])]
  a, b = min(kmax, kmin), max(kmax, kmin)
  lo, hi = vs[min(a, n - 1)], vs[max(min(b - 1, n - 1), a)]
  return float(s[kmax] - s[kmin]), float(lo), float(hi)


def round_mantissa(x: np.ndarray, bits: int) -> np.ndarray:
  """``x`` (float32) rounded to ``bits`` explicit mantissa bits, to nearest (ties away)."""
  drop = 23 - bits
  w = x.astype(np.float32).view(np.uint32)
  w = (w + np.uint32(1 << (drop - 1))) & np.uint32((0xFFFFFFFF << drop) & 0xFFFFFFFF)
  return w.view(np.float32)


def split(x: np.ndarray, bits: int, parts: int) -> list[np.ndarray]:
  """``x = x_1 + ... + x_parts (+ rest)``, each part with ``bits`` mantissa bits."""
  out, rest = [], x.astype(np.float32)
  for _ in range(parts):
    part = round_mantissa(rest, bits)
    out.append(part)
    rest = (rest - part).astype(np.float32)
  return out


def emulated(p: np.ndarray, a: np.ndarray, kind: str) -> np.ndarray:
  """``p @ a.T`` as TF32x3 or BF16x6 compute it: split operands, float32 partial products."""
  if kind == "tf32_x3":
    (p1, p2), (a1, a2) = split(p, 10, 2), split(a, 10, 2)
    terms = [(p1, a1), (p1, a2), (p2, a1)]
  else:
    (p1, p2, p3), (a1, a2, a3) = split(p, 7, 3), split(a, 7, 3)
    terms = [(p1, a1), (p1, a2), (p2, a1), (p1, a3), (p3, a1), (p2, a2)]
  acc = np.zeros((p.shape[0], a.shape[0]), np.float32)
  for x, w in reversed(terms):  # smallest terms first, as the algorithms accumulate
    acc += (x @ w.T).astype(np.float32)
  return acc


def compare(v: np.ndarray, v64: np.ndarray, u64: np.ndarray, ref: list) -> dict:
  """UC from ``v`` (``(n, M)``) against the float64 reference, with the bound per utility."""
  n, m = v.shape
  v = v.astype(np.float64)
  diffs, bound_ok, worst_ratio = np.empty(m), 0, 0.0
  for j in range(m):
    val, lo, hi = np_uc_interval(v[:, j], u64[:, j])
    val64, lo64, hi64 = ref[j]
    dv = np.abs(v[:, j] - v64[:, j])
    r = np.abs(u64[:, j] - v64[:, j])
    near = np.zeros(n, bool)
    for end in (lo, hi, lo64, hi64):
      near |= np.abs(v64[:, j] - end) <= 2 * dv + 1e-15
    bound = dv.max() + (r[near] + dv[near]).sum() / n
    diffs[j] = abs(val - val64)
    bound_ok += diffs[j] <= bound + 1e-12
    if diffs[j] > CHANGED:
      worst_ratio = max(worst_ratio, diffs[j] / bound)
  changed = diffs > CHANGED
  return {
    "max_abs_dv": float(np.abs(v - v64).max()),
    "utilities_changed": int(changed.sum()),
    "max_abs_duc": float(diffs.max()),
    "max_abs_duc_first_50": float(diffs[:50].max()),
    "changed_sizes_times_n": sorted(round(float(d) * n, 4) for d in diffs[changed]),
    "within_bound": int(bound_ok),
    "largest_changed_over_bound": worst_ratio,
  }


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--small", action="store_true", help="n=2,000, C=100, M=200")
  ap.add_argument(
    "--backend-only",
    action="store_true",
    help="only the backend's products and the library (the accelerator step of gpu_checks.sh)",
  )
  args = ap.parse_args()
  n, c, m = (2000, 100, 200) if args.small else (15000, 1000, 1500)
  info = device_info()
  print(f"uc_precision: n={n}, C={c}, M={m} on {info.get('device')} (load {cpu_load()})")
  t0 = time.perf_counter()
  p, y = synthetic(n, c)
  a = np.asarray(U.sample_linear(jax.random.PRNGKey(0), m, c).params)
  p64, a64 = p.astype(np.float64), a.astype(np.float64)
  v64 = p64 @ a64.T  # (n, M)
  u64 = a64[:, y].T
  ref = [np_uc_interval(v64[:, j], u64[:, j]) for j in range(m)]
  uc64 = np.array([r[0] for r in ref])

  variants: dict[str, dict] = {}
  for name, prec in PRESETS.items():
    f = jax.jit(lambda p, a, prec=prec: jax.lax.dot(p, a.T, precision=prec))
    try:
      v = np.asarray(f(p, a))
    except Exception as e:  # a preset this backend does not offer
      variants[f"backend_{name}"] = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
      continue
    variants[f"backend_{name}"] = compare(v, v64, u64, ref)
  if not args.backend_only:
    for kind in ("tf32_x3", "bf16_x6"):
      variants[f"emulated_{kind}"] = compare(emulated(p, a, kind), v64, u64, ref)
    rng = np.random.default_rng(1)
    for sd in (1e-7, 4e-7, 1.3e-6):
      noisy = v64 + sd * rng.standard_normal(v64.shape)
      variants[f"noise_{sd:g}"] = compare(noisy, v64, u64, ref)
  lib = np.asarray(_sweep._local_jit("linear", p, y.astype(np.int32), a, m), np.float64)
  d = np.abs(lib - uc64)
  variants["library_sweep"] = {
    "utilities_changed": int((d > CHANGED).sum()),
    "max_abs_duc": float(d.max()),
    "max_abs_duc_first_50": float(d[:50].max()),
    "changed_sizes_times_n": sorted(round(float(x) * n, 4) for x in d[d > CHANGED]),
  }
  for name, r in variants.items():
    if "error" in r:
      print(f"  {name:20s} {r['error']}")
      continue
    print(
      f"  {name:20s} max|dv| {r.get('max_abs_dv', float('nan')):.2e}  "
      f"changed {r['utilities_changed']:4d}/{m}  max|dUC| {r['max_abs_duc']:.2e} "
      f"(first 50: {r['max_abs_duc_first_50']:.2e})  "
      + (f"within bound {r['within_bound']}/{m}" if "within_bound" in r else "")
    )
  out = {
    "benchmark": "uc_precision",
    "config": {"n": n, "C": c, "M": m, "changed_above": CHANGED},
    **info,
    "load_avg_at_end": cpu_load(),
    "uc_float64": {
      "min": float(uc64.min()),
      "median": float(np.median(uc64)),
      "max": float(uc64.max()),
    },
    "variants": variants,
    "seconds": time.perf_counter() - t0,
    "notes": (
      "UC from predicted utilities computed several ways, against float64 (product and UC). "
      "utilities_changed: UC differs from float64 by more than changed_above; "
      "changed_sizes_times_n: those differences times n (one sample's residual "
      "|u - v| <= 2 each when one sample changed sides); within_bound: utilities whose "
      "difference is within max|dv| + (1/n) sum over samples near an end of either worst "
      "interval of (|r| + |dv|). backend_*: the backend's product, the rest in float64; "
      "emulated_*: numpy float32 emulations of the tensor-core algorithms; "
      "library_sweep: jaxcal's compiled sweep on this backend."
    ),
  }
  print(f"wrote {write_result('uc_precision_small' if args.small else 'uc_precision', out)}")


if __name__ == "__main__":
  main()
