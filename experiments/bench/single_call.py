"""Benchmark: one public call, numpy in, validation included, against numpy by hand.

The first number a user times is a single call. For ``conf_ece`` (15 equal-width
bins, the usual ECE), ``classwise_ece`` (15 equal-width bins) and ``brier`` it
times, in one process and on the same data:

* ``jaxcal (numpy in)``: the public call on numpy arrays (conversion to device
  arrays, validation, dispatch and the kernel);
* ``jaxcal (device in)``: the same call on arrays already on the device;
* ``jaxcal in user jit``: the call inside a user's ``jax.jit`` on device
  arrays (what a training or evaluation loop runs; validation is then the
  traced, NaN-folding tier);
* ``numpy by hand``: the best vectorised numpy a user would write: one pass
  for the top label, ``np.bincount`` over the bin ids with the residuals as
  weights (class-wise: one ``bincount`` over all ``n*C`` ids of the
  probabilities and one over the ``n`` label ids), and ``sum(p*p) - 2 p_y + 1``
  for the Brier score. No sort is needed for fixed bins.

Two sizes: n = 100,000, C = 100 (synthetic over-confident softmax outputs: no
real data set that size is bundled) and n = 10,000, C = 10 (the CIFAR-10
ResNet-110 test logits of ``../shared/data``, softmaxed in float32; synthetic
if absent). Every contender is warmed up, then the contenders run in
rotating order for ``--rounds`` rounds (interleaved, so a busy machine slows
them alike) and the median is reported; the first call of each jaxcal
contender after ``jax.clear_caches()`` (tracing and compilation included) is
reported beside it. Every contender's value is asserted to match numpy by
hand's (relative tolerance :data:`RTOL`) before the ratios are written. The
machine note reads the load at the start; the JSON records the load at the
start and at the end. At the small size the ``conf_ece`` call is also split
into its phases (:func:`phases`): Python checks and placement, and its one
program against the same work as three programs.

  python experiments/bench/single_call.py           # writes results/single_call.json
  python experiments/bench/single_call.py --quick   # 5 rounds, single_call_quick.json
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
from _common import check_agree, cpu_load, device_info, machine_note, write_result
from _common import interleaved as timed

import jaxcal
from jaxcal import metrics, scores

M = 15  # bins
#: every contender's value must match numpy by hand's to this relative tolerance
#: (float32 inputs; numpy's bin sums in float64, jaxcal's exact in integers, the
#: Brier rows in float32: observed differences are below 1e-6)
RTOL = 1e-5

# --------------------------------------------------------------- numpy side


def np_conf_ece(p: np.ndarray, y: np.ndarray, m: int = M) -> float:
  r = p.argmax(axis=1)
  c = p[np.arange(p.shape[0]), r]
  bins = np.clip(np.ceil(c * np.float32(m)).astype(np.intp), 1, m)
  sums = np.bincount(bins, weights=c - (r == y), minlength=m + 1)
  return float(np.abs(sums).sum() / p.shape[0])


def np_classwise_ece(p: np.ndarray, y: np.ndarray, m: int = M) -> float:
  n, c = p.shape
  # the bin ids in float32, in place (whole numbers below 2**24: exact), cast once:
  # 20-32 % faster at n = 2,000-100,000 than ceil, cast, then clip and offset in intp
  t = p * np.float32(m)
  np.ceil(t, out=t)
  np.clip(t, 1, m, out=t)
  t += np.arange(c, dtype=t.dtype) * m - 1  # class offset; bins counted from 0
  ids = t.astype(np.intp)
  sums = np.bincount(ids.ravel(), weights=p.ravel(), minlength=m * c)
  sums -= np.bincount(ids[np.arange(n), y], minlength=m * c)  # the one-hot part
  return float(np.abs(sums).sum() / (n * c))


def np_brier(p: np.ndarray, y: np.ndarray) -> float:
  # the row dot products (einsum) and a gather: the fastest form tried that keeps
  # jaxcal's accuracy (n = 10^5, C = 100, one interleaved run on the busy 2-core VM:
  # 3.4 ms; (p * p).sum(1) 13 ms, a one-hot difference 17 ms; one BLAS dot over the
  # whole matrix 3.0 ms, but 7e-5 relative error from its float32 accumulation)
  n = p.shape[0]
  return float(np.mean(np.einsum("ij,ij->i", p, p) - 2.0 * p[np.arange(n), y] + 1.0))


# ------------------------------------------------------------------ data


def synthetic(n: int, c: int, seed: int = 0):
  """Over-confident softmax outputs (float32) and labels from a tempered version."""
  rng = np.random.default_rng(seed)
  z = rng.standard_normal((n, c)) * 3.0
  z[np.arange(n), rng.integers(0, c, n)] += 4.0

  def softmax(a):
    e = np.exp(a - a.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)

  u = rng.random((n, 1))
  y = np.minimum((np.cumsum(softmax(z / 1.5), axis=1) < u).sum(axis=1), c - 1)
  return softmax(z).astype(np.float32), y.astype(np.int32)


def cifar10(n_fallback: int = 10_000):
  d = pathlib.Path(__file__).resolve().parents[2].parent / "shared" / "data" / "cifar_logits"
  d = d / "cifar10_resnet110"
  if not d.is_dir():
    p, y = synthetic(n_fallback, 10, seed=1)
    return p, y, "synthetic (CIFAR-10 logits not found)"
  z = np.load(d / "test_logits.npy").astype(np.float32)
  p = np.asarray(jax.nn.softmax(jnp.asarray(z), axis=-1))
  return p, np.load(d / "test_labels.npy").astype(np.int32), "CIFAR-10 ResNet-110 test logits"


# ------------------------------------------------------------------ timing


def _run(f):
  out = f()
  jax.block_until_ready(out)
  return out


def interleaved(contenders: dict, rounds: int, cold: bool = False) -> dict:
  """Median (and min) wall time of each contender over rounds run in rotating order.

  :func:`_common.interleaved` of the thunks (with ``cold=True`` each first
  call after clearing JAX's caches, ``first_call_ms``), in milliseconds.
  """
  t = timed({k: (f, ()) for k, f in contenders.items()}, rounds, cold=cold)
  return {
    k: {
      "median_ms": 1e3 * v["median_s"],
      "min_ms": 1e3 * v["best_s"],
      "times_ms": [1e3 * x for x in v["times_s"]],
      **({"first_call_ms": 1e3 * v["first_call_s"]} if cold else {}),
    }
    for k, v in t.items()
  }


def bench_metric(name: str, p: np.ndarray, y: np.ndarray, rounds: int) -> dict:
  pd, yd = jax.device_put(p), jax.device_put(y)
  if name == "conf_ece":
    jx, ref = (lambda p, y: metrics.conf_ece(p, y, M)), np_conf_ece
  elif name == "classwise_ece":
    jx, ref = (lambda p, y: metrics.classwise_ece(p, y, M)), np_classwise_ece
  else:
    jx, ref = scores.brier, np_brier
  in_jit = jax.jit(jx)
  contenders = {
    "jaxcal (numpy in)": lambda: jx(p, y),
    "jaxcal (device in)": lambda: jx(pd, yd),
    "jaxcal in user jit": lambda: in_jit(pd, yd),
    "numpy by hand": lambda: ref(p, y),
  }
  timing = interleaved(contenders, rounds, cold=True)
  first = {k: v["first_call_ms"] for k, v in timing.items()}
  values = {k: float(_run(f)) for k, f in contenders.items()}
  want = values["numpy by hand"]
  rel = {k: abs(v - want) / max(abs(want), 1e-30) for k, v in values.items()}
  check_agree(values, "numpy by hand", rtol=RTOL)  # a fast wrong answer is no speed-up
  ratio = timing["numpy by hand"]["median_ms"] / timing["jaxcal (numpy in)"]["median_ms"]
  print(
    f"  {name:14s} jaxcal numpy-in {timing['jaxcal (numpy in)']['median_ms']:8.2f} ms "
    f"(first call {first['jaxcal (numpy in)']:7.1f} ms)  device-in "
    f"{timing['jaxcal (device in)']['median_ms']:8.2f}  in jit {timing['jaxcal in user jit']['median_ms']:8.2f}"
    f"  numpy {timing['numpy by hand']['median_ms']:8.2f} ms   numpy/jaxcal {ratio:5.2f}x",
    flush=True,
  )
  return {
    "timings": timing,
    "values": values,
    "rel_diff_vs_numpy": rel,
    "rtol_asserted": RTOL,
    "numpy_over_jaxcal": ratio,
  }


def phases(p: np.ndarray, y: np.ndarray, rounds: int) -> dict:
  """Where the time of one ``conf_ece`` call goes (medians of ``rounds`` calls each).

  * ``public call``: the whole call on numpy input, read back with ``float``;
  * ``python checks + placement``: ``check_predictions`` on the numpy
    arrays (shape/dtype checks and the labels' narrowing on the host; under
    1 MiB the arrays go to the program as they are);
  * ``python checks only``: the same on device arrays;
  * ``one program``: the call's one jitted program alone (top label,
    binning and value checks; dispatch, the transfer of the host arrays,
    compute and the read-back of its flags), on the arguments the call
    gives it;
  * ``three programs``: the same work staged as the call staged it before
    2026-11-24 and still does above 1 MiB (top label, binning, value
    checks as programs of their own; the labels on the device), dispatched
    back to back and read back once;
  * ``numpy by hand``: the reference.

  What the phases do not add up to is the rest of the Python around them
  (bin-count checks, dispatch bookkeeping).
  """
  from jaxcal._src import calibration_errors as CE
  from jaxcal._src import validation as V

  d = V.check_predictions(p, y, defer=True, borrow=True)
  pend = d.pending
  spec = V._anonymous(pend.spec)
  m = np.asarray(M, np.int32)
  static = {"max_bins": M, "binning": "fixed", "kind": "ece", "norm": "l1", "single_count": True}
  whole = CE._compiled(CE._conf_from_scores, False, 0, False, False, rows=CE._top_label, **static)
  rows = CE._row_stage(CE._top_label, False)
  agg = CE._compiled(CE._conf_from_scores, False, 0, False, True, **static)
  pd, yd = jax.device_put(p), jax.device_put(y)
  labels = jax.device_put(np.asarray(d.labels))

  def one():
    out, flags = V._with_checks(whole, spec, (d.scores, d.labels, None, m), *pend[1:5])
    jax.device_get(flags)
    return float(out)

  def three():
    out = agg(rows(d.scores, labels), None, None, m)
    jax.device_get(V._ok_jit(spec, pend.xs, labels, pend.where, pend.w))
    return float(out)

  contenders = {
    "public call": lambda: float(metrics.conf_ece(p, y, M)),
    "python checks + placement": lambda: V.check_predictions(p, y, defer=True, borrow=True).scores,
    "python checks only": lambda: V.check_predictions(pd, yd, defer=True, borrow=True).scores,
    "one program": one,
    "three programs": three,
    "numpy by hand": lambda: np_conf_ece(p, y),
  }
  timing = interleaved(contenders, rounds)
  out = {k: v["median_ms"] for k, v in timing.items()}
  print("  phases of conf_ece: " + ", ".join(f"{k} {v:.3f} ms" for k, v in out.items()), flush=True)
  return {"median_ms": out, "rounds": rounds}


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument(
    "--rounds", type=int, default=None, help="interleaved rounds (default 21, 5 with --quick)"
  )
  ap.add_argument("--quick", action="store_true")
  args = ap.parse_args(argv)
  rounds = args.rounds or (5 if args.quick else 21)
  info = device_info()
  print(
    f"single_call on {info.get('device')} ({info.get('backend')}), jax {info.get('jax')}, load {info['load_avg_at_start']}"
  )
  p_big, y_big = synthetic(100_000, 100)
  p_small, y_small, small_src = cifar10()
  sizes = {
    "n=100000,C=100": (p_big, y_big, "synthetic over-confident softmax"),
    f"n={p_small.shape[0]},C={p_small.shape[1]}": (p_small, y_small, small_src),
  }
  results = {}
  for key, (p, y, src) in sizes.items():
    print(f" {key} ({src})")
    results[key] = {"data": src}
    for name in ("conf_ece", "classwise_ece", "brier"):
      results[key][name] = bench_metric(name, p, y, rounds)
  results[f"n={p_small.shape[0]},C={p_small.shape[1]}"]["conf_ece_phases"] = phases(
    p_small, y_small, max(rounds, 200)
  )
  result = {
    "benchmark": "single_call",
    "description": "one public call with numpy input (validation included) vs numpy by hand; "
    "medians of interleaved rounds; first call after jax.clear_caches() reported beside",
    **info,
    "jaxcal_version": jaxcal.__version__,
    "load_avg_at_end": cpu_load(),
    "note": machine_note(
      info["load_avg_at_start"], info.get("cpu_count"), statistic="median of the timed calls"
    ),
    "num_bins": M,
    "rounds": rounds,
    "results": results,
  }
  path = write_result("single_call_quick" if args.quick else "single_call", result)
  print(f"wrote {path}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
