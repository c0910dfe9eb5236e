"""Benchmark: jaxcal's pure-JAX isotonic regression against scikit-learn.

Class-wise isotonic fits of ``n`` binary outcomes on ``n`` scores for ``C``
classes (the work inside ``jaxcal.scores.decompose`` and the class-wise
recalibrators): ``jax.jit(jax.vmap(isotonic_regression))`` on a ``(C, n)``
array against a Python loop of ``sklearn.isotonic.IsotonicRegression`` over
the same classes, timed in the same run. Default ``n = 10^5``, ``C = 100``.

Scores are ``softmax`` outputs of random logits rounded to 4 decimals (so
ties occur, as with real classifiers' float32 outputs), outcomes drawn from
a miscalibrated curve. Also reports the largest difference between the two
fits (jaxcal float32 and float64 against sklearn float64).

Usage::

  python experiments/bench/isotonic.py [--n 100000] [--classes 100] [--repeat 3]

Writes ``experiments/results/isotonic.json``.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

from _common import device_info, timeit, write_result


def make_data(n: int, c: int, seed: int = 0):
  rng = np.random.default_rng(seed)
  z = rng.normal(size=(n, c)) * 2.5
  p = np.exp(z - z.max(1, keepdims=True))
  p = np.round(p / p.sum(1, keepdims=True), 4).T  # (C, n), with ties
  y = (rng.random((c, n)) < p**1.3).astype(np.float64)  # overconfident scores
  return p, y


def main(argv=None) -> dict:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--n", type=int, default=100_000)
  ap.add_argument("--classes", type=int, default=100)
  ap.add_argument("--repeat", type=int, default=3)
  ap.add_argument("--sklearn-repeat", type=int, default=2)
  ap.add_argument("--name", default="isotonic")
  args = ap.parse_args(argv)

  import jax
  from sklearn.isotonic import IsotonicRegression

  from jaxcal.recalibrate import isotonic_regression

  info = device_info()
  x64, y64 = make_data(args.n, args.classes)
  x32, y32 = x64.astype(np.float32), y64.astype(np.float32)
  print(f"n = {args.n}, C = {args.classes}; load {info.get('load_avg_at_start')}", flush=True)

  fit = jax.jit(jax.vmap(isotonic_regression))
  xj, yj = jax.device_put(x32), jax.device_put(y32)
  t_jax = timeit(lambda: fit(xj, yj), repeat=args.repeat)
  print(
    f"jaxcal float32: best {t_jax['best_s']:.3f} s (first call {t_jax['first_s']:.2f} s)",
    flush=True,
  )
  out32 = np.asarray(fit(xj, yj))

  def sk():
    return np.stack(
      [IsotonicRegression().fit_transform(x64[k], y64[k]) for k in range(args.classes)]
    )

  t_sk = timeit(sk, repeat=args.sklearn_repeat, warmup=1)
  ref = sk()
  print(f"sklearn float64 loop: best {t_sk['best_s']:.3f} s", flush=True)

  with jax.enable_x64(True):
    fit64 = jax.jit(jax.vmap(isotonic_regression))
    x64j, y64j = jax.device_put(x64), jax.device_put(y64)
    t_jax64 = timeit(lambda: fit64(x64j, y64j), repeat=args.repeat)
    out64 = np.asarray(fit64(x64j, y64j))
  print(f"jaxcal float64: best {t_jax64['best_s']:.3f} s", flush=True)

  # sklearn pools scores closer than float64 resolution (~1e-15) as ties;
  # jaxcal pools exact ties only. Rounded scores make both identical here.
  err32 = float(np.abs(out32 - ref).max())
  err64 = float(np.abs(out64 - ref).max())
  result = {
    "benchmark": "isotonic_regression, class-wise, jit(vmap) over classes vs sklearn loop",
    "n": args.n,
    "classes": args.classes,
    "timings": {"jaxcal_float32": t_jax, "jaxcal_float64": t_jax64, "sklearn_float64_loop": t_sk},
    "speedup_vs_sklearn": {
      "float32": t_sk["best_s"] / t_jax["best_s"],
      "float64": t_sk["best_s"] / t_jax64["best_s"],
    },
    "max_abs_diff_vs_sklearn": {"float32": err32, "float64": err64},
    "load_avg_at_end": list(np.round(np.array(__import__("os").getloadavg()), 2)),
    **info,
  }
  path = write_result(args.name, result)
  print(
    f"speed-up vs sklearn: float32 {result['speedup_vs_sklearn']['float32']:.2f}x, "
    f"float64 {result['speedup_vs_sklearn']['float64']:.2f}x; "
    f"max |diff| float32 {err32:.2e}, float64 {err64:.2e}; wrote {path}"
  )
  return result


if __name__ == "__main__":
  t0 = time.perf_counter()
  main()
  print(f"total {time.perf_counter() - t0:.1f} s")
