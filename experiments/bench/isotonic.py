"""Benchmark: jaxcal's pure-JAX isotonic regression against scikit-learn.

Class-wise isotonic fits of ``n`` binary outcomes on ``n`` scores for ``C``
classes (the work inside ``jaxcal.scores.decompose`` and the class-wise
recalibrators): ``jax.jit(jax.vmap(isotonic_regression))`` on a ``(C, n)``
array against the fastest correct scikit-learn code a user would write for
the same fits, timed in the same run. Default ``n = 10^5``, ``C = 100``.

The reference (:func:`sklearn_fits`) sorts every class's scores once
(``np.argsort(x, axis=1)``, numpy's default, unstable, kind: tied scores are
pooled, so their order is immaterial), pools exact ties into their mean
outcome with ``np.bincount`` (weights: the tie counts), runs scikit-learn's
public pool-adjacent-violators function ``sklearn.isotonic.isotonic_regression``
on the pooled means and scatters the fit back to the samples. Its output is
that of ``IsotonicRegression().fit_transform`` (identical in float64 here),
without the estimator's second pass (``fit`` makes the scores unique, then
``transform`` interpolates at every training score again). dtypes: scores
sorted and fits returned in the input's dtype; the pooled means, weights and
PAVA in float64 (``np.bincount``'s). It runs on the float32 data (the ratio
for jaxcal float32) and on the float64 data (the ratio for jaxcal float64).

Contenders, all from the same numpy host arrays and returning numpy arrays
(fits copied back to the host), except where named:

* ``jaxcal_float32``: ``np.asarray(fit(x32, y32))``;
* ``jaxcal_float32_device_resident``: ``fit(xj, yj)`` on arrays already on
  the device, result left there (the accelerator figure, beside the headline);
* ``jaxcal_float64``: the same program under ``jax.enable_x64``;
* ``sklearn_float32`` / ``sklearn_float64``: the reference above.

All are timed by ``_common.interleaved(..., cold=True)``: each first call
alone after clearing JAX's caches (``first_call_s``: tracing and
compilation included), then, after one untimed call each, ``--repeat``
rounds of one call each in rotating order; the ratios
(``speedup_vs_sklearn_isotonic_regression``) are of medians. Every fit is
checked against ``sklearn_float64`` before a ratio is written (float32 within
1e-6, float64 within 1e-12).

Scores are ``softmax`` outputs of random logits rounded to 4 decimals (so
ties occur, as with real classifiers' float32 outputs), outcomes drawn from
a miscalibrated curve.

Usage::

  python experiments/bench/isotonic.py [--n 100000] [--classes 100] [--repeat 3]
  python experiments/bench/isotonic.py --small     # n = 2,000, C = 10: isotonic_small.json

Writes ``experiments/results/isotonic.json`` (``--name`` changes the name).
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

from _common import check_agree, device_info, interleaved, machine_note, write_result


def make_data(n: int, c: int, seed: int = 0):
  rng = np.random.default_rng(seed)
  z = rng.normal(size=(n, c)) * 2.5
  p = np.exp(z - z.max(1, keepdims=True))
  p = np.round(p / p.sum(1, keepdims=True), 4).T  # (C, n), with ties
  y = (rng.random((c, n)) < p**1.3).astype(np.float64)  # overconfident scores
  return p, y


def sklearn_fits(x: np.ndarray, y: np.ndarray) -> np.ndarray:
  """Increasing isotonic fit of each row of ``y`` on the same row of ``x`` (``(C, n)``).

  Sort once, pool exact ties (``np.bincount``), ``sklearn.isotonic.isotonic_regression``
  on the pooled means weighted by the tie counts, scatter back: the values of
  ``IsotonicRegression().fit_transform(x[k], y[k])``.
  """
  from sklearn.isotonic import isotonic_regression

  order = np.argsort(x, axis=1)  # default kind: ties are pooled, their order is immaterial
  xs = np.take_along_axis(x, order, axis=1)
  ys = np.take_along_axis(y, order, axis=1)
  new = np.ones(x.shape, bool)
  np.not_equal(xs[:, 1:], xs[:, :-1], out=new[:, 1:])
  group = np.cumsum(new, axis=1) - 1  # each sorted sample's tie group
  out = np.empty_like(y)
  for k in range(x.shape[0]):
    g = group[k]
    cnt = np.bincount(g)
    fit = isotonic_regression(np.bincount(g, ys[k]) / cnt, sample_weight=cnt)
    out[k, order[k]] = fit[g]
  return out


def main(argv=None) -> dict:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--n", type=int, default=None, help="samples per class (default 100,000)")
  ap.add_argument("--classes", type=int, default=None, help="classes (default 100)")
  ap.add_argument("--repeat", type=int, default=3, help="interleaved timed rounds (medians)")
  ap.add_argument(
    "--sklearn-repeat",
    type=int,
    default=None,
    help="ignored (kept for old command lines): every contender gets --repeat rounds",
  )
  ap.add_argument("--small", action="store_true", help="n = 2,000, C = 10 (isotonic_small.json)")
  ap.add_argument("--name", default=None, help="result name (default isotonic[_small])")
  args = ap.parse_args(argv)
  n = args.n or (2_000 if args.small else 100_000)
  classes = args.classes or (10 if args.small else 100)
  name = args.name or ("isotonic_small" if args.small else "isotonic")
  if args.sklearn_repeat is not None:
    print("--sklearn-repeat is ignored: every contender gets --repeat interleaved rounds")

  import jax

  from jaxcal.recalibrate import isotonic_regression

  info = device_info()
  x64, y64 = make_data(n, classes)
  x32, y32 = x64.astype(np.float32), y64.astype(np.float32)
  print(f"n = {n}, C = {classes}; load {info.get('load_avg_at_start')}", flush=True)

  fit = jax.jit(jax.vmap(isotonic_regression))
  fit64 = jax.jit(jax.vmap(isotonic_regression))
  xj, yj = jax.device_put(x32), jax.device_put(y32)

  def jax32():
    return np.asarray(fit(x32, y32))

  def jax32_dev():
    return fit(xj, yj)

  def jax64():
    with jax.enable_x64(True):
      return np.asarray(fit64(x64, y64))

  paths = {
    "jaxcal_float32": (jax32, ()),
    "jaxcal_float32_device_resident": (jax32_dev, ()),
    "jaxcal_float64": (jax64, ()),
    "sklearn_float32": (sklearn_fits, (x32, y32)),
    "sklearn_float64": (sklearn_fits, (x64, y64)),
  }

  # values first: a fast wrong answer must not pass as a speed-up. sklearn pools
  # scores closer than float64 resolution as ties (IsotonicRegression) or none
  # (isotonic_regression on pooled means); jaxcal pools exact ties only. Rounded
  # scores make them identical here.
  vals = {k: np.asarray(fn(*a)) for k, (fn, a) in paths.items()}
  diff32 = check_agree(
    {
      k: vals[k]
      for k in (
        "sklearn_float64",
        "jaxcal_float32",
        "jaxcal_float32_device_resident",
        "sklearn_float32",
      )
    },
    "sklearn_float64",
    rtol=0,
    atol=1e-6,
  )
  diff64 = check_agree(
    {k: vals[k] for k in ("sklearn_float64", "jaxcal_float64")}, "sklearn_float64", 0, 1e-12
  )
  del vals

  t = interleaved(paths, args.repeat, cold=True)
  for k, v in t.items():
    print(
      f"{k:32s} median {v['median_s']:.3f} s, best {v['best_s']:.3f} s, "
      f"first call {v['first_call_s']:.2f} s",
      flush=True,
    )
  med = {k: v["median_s"] for k, v in t.items()}
  speedup = {
    "float32": med["sklearn_float32"] / med["jaxcal_float32"],
    "float64": med["sklearn_float64"] / med["jaxcal_float64"],
    "float32_device_resident": med["sklearn_float32"] / med["jaxcal_float32_device_resident"],
  }
  import sklearn

  load_end = list(np.round(np.array(__import__("os").getloadavg()), 2))
  result = {
    "benchmark": "isotonic_regression, class-wise, jit(vmap) over classes vs scikit-learn",
    "n": n,
    "classes": classes,
    "repeat": args.repeat,
    "reference": (
      "sklearn_fits: np.argsort(x, axis=1) once, exact ties pooled with np.bincount, "
      f"sklearn.isotonic.isotonic_regression (scikit-learn {sklearn.__version__}) on the "
      "pooled means weighted by the tie counts, scattered back; one Python loop over classes"
    ),
    "dtypes": {
      "jaxcal_float32": "float32 in, float32 computation and out",
      "jaxcal_float32_device_resident": "float32, on the device",
      "jaxcal_float64": "float64 in, computation and out (jax.enable_x64)",
      "sklearn_float32": "float32 scores and outcomes sorted in float32; pooled means, weights "
      "and PAVA float64 (np.bincount's); fits returned as float32",
      "sklearn_float64": "float64 throughout",
    },
    "timing": (
      "_common.interleaved(cold=True): each first call alone after clearing JAX's caches, "
      "then one untimed call each and `repeat` rounds of one call each in rotating order; "
      "ratios of medians"
    ),
    "timings": t,
    "speedup_vs_sklearn_isotonic_regression": speedup,
    "headline": "speedup_vs_sklearn_isotonic_regression.float32 (host numpy in and out)",
    "max_abs_diff_vs_sklearn_float64": {
      "float32": diff32["jaxcal_float32"],
      "float32_device_resident": diff32["jaxcal_float32_device_resident"],
      "sklearn_float32": diff32["sklearn_float32"],
      "float64": diff64["jaxcal_float64"],
    },
    "machine_note": machine_note(
      info["load_avg_at_start"],
      info.get("cpu_count"),
      statistic=f"median of {args.repeat} interleaved calls each",
    ),
    "load_avg_at_end": load_end,
    **info,
  }
  path = write_result(name, result)
  print(
    f"speed-up vs scikit-learn (medians): float32 {speedup['float32']:.2f}x "
    f"(device-resident {speedup['float32_device_resident']:.2f}x), "
    f"float64 {speedup['float64']:.2f}x; max |diff| float32 {diff32['jaxcal_float32']:.2e}, "
    f"float64 {diff64['jaxcal_float64']:.2e}; wrote {path}"
  )
  return result


if __name__ == "__main__":
  t0 = time.perf_counter()
  main()
  print(f"total {time.perf_counter() - t0:.1f} s")
