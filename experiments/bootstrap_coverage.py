"""Coverage of the bootstrap intervals on synthetic data with known truth.

For each metric (the mean Brier score, ConfECE with 15 equal-width bins, the
class-wise ℓ1 CWE_bin with 15 bins) the population value is computed from
the true class probabilities of :func:`jaxcal.data.synthetic` (over-confident
predictions, temperature 0.7) on a large sample (no label noise: the conditional expectations are the true
probabilities), then ``R`` replicate data sets of size ``n`` are drawn and
each gets a 95 % interval by every method of :func:`jaxcal.bootstrap.bootstrap`
(percentile, BCa, basic, normal; the same resamples for all four). The JSON
records the fraction of replicates whose interval covers the truth, the mean
interval width, and the mean position of the resamples relative to the
estimate (``mean(θ*) − θ̂``, the upward shift of binned ℓ1 errors).

Run (one command; writes ``experiments/results/bootstrap_coverage.json``, or into
``--out DIR``; ``--quick`` writes ``bootstrap_coverage_quick.json``, not committed)::

    nice -n 5 python experiments/bootstrap_coverage.py            # R = 200, n in 500, 2000, 10000
    python experiments/bootstrap_coverage.py --quick               # R = 20, n = 500 (a minute)

A coverage estimate from ``R`` replicates has a standard error of about
``sqrt(0.95 · 0.05 / R)`` (1.5 points at ``R = 200``).
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent / "bench"))
from _common import device_info, write_result

from jaxcal import bootstrap, data, metrics, scores

NUM_BINS = 15
C = 10
#: Over-confident predictions (p = softmax(log μ / T)), so the true errors are positive.
TEMPERATURE = 0.7


def _population(num: int, key: jax.Array) -> dict[str, float]:
  """Population values from the true probabilities (no label noise)."""
  d = data.synthetic(key, num, C, temperature=TEMPERATURE)
  p, mu = d.probs, d.true_probs
  brier = jnp.mean(jnp.sum(p * p, 1) - 2 * jnp.sum(p * mu, 1) + 1)
  edges = jnp.linspace(0.0, 1.0, NUM_BINS + 1)

  def l1(score, target):  # sum_b |E[(target - score) 1(score in b)]|
    b = jnp.clip(jnp.searchsorted(edges, score, side="right") - 1, 0, NUM_BINS - 1)
    return jnp.sum(jnp.abs(jax.ops.segment_sum(target - score, b, NUM_BINS))) / score.shape[0]

  top = jnp.argmax(p, 1)
  conf = jnp.max(p, 1)
  conf_ece = l1(conf, jnp.take_along_axis(mu, top[:, None], 1)[:, 0])
  cwe = jnp.mean(jax.vmap(l1, in_axes=(1, 1))(p, mu))
  return {"Brier": float(brier), "ConfECE(fix;15)": float(conf_ece), "CWE_bin(fix;15)": float(cwe)}


STATS = {
  "Brier": scores.brier,
  "ConfECE(fix;15)": lambda p, y: metrics.conf_ece(p, y, num_bins=NUM_BINS),
  "CWE_bin(fix;15)": lambda p, y: metrics.classwise_ece(p, y, num_bins=NUM_BINS),
}


def _coverage(n: int, replicates: int, resamples: int, truth: dict, seed: int) -> dict:
  def stat(p, y):
    return {k: f(p, y) for k, f in STATS.items()}

  out: dict = {}
  hits = {m: {k: [] for k in STATS} for m in bootstrap.METHODS}
  widths = {m: {k: [] for k in STATS} for m in bootstrap.METHODS}
  shift = {k: [] for k in STATS}
  for r in range(replicates):
    key = jax.random.fold_in(jax.random.key(seed), r)
    d = data.synthetic(key, n, C, temperature=TEMPERATURE)
    res = bootstrap.bootstrap(
      jax.random.fold_in(key, 1), stat, d.probs, d.labels, num_resamples=resamples, method="bca"
    )
    for k in STATS:
      est, smp = res.estimate[k], res.samples[k]
      shift[k].append(float(jnp.mean(smp) - est))
      for m in bootstrap.METHODS:
        lo, hi = (res.lo[k], res.hi[k]) if m == "bca" else bootstrap.interval(est, smp, m)
        hits[m][k].append(float(lo) <= truth[k] <= float(hi))
        widths[m][k].append(float(hi - lo))
  for m in bootstrap.METHODS:
    out[m] = {
      k: {"coverage": float(np.mean(hits[m][k])), "mean_width": float(np.mean(widths[m][k]))}
      for k in STATS
    }
  out["resample_shift"] = {k: float(np.mean(v)) for k, v in shift.items()}
  return out


def main(argv: list[str] | None = None) -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--quick", action="store_true", help="R = 20, n = 500, 200 resamples")
  ap.add_argument("--replicates", type=int, default=200)
  ap.add_argument("--resamples", type=int, default=1000)
  ap.add_argument("--sizes", default="500,2000,10000")
  ap.add_argument("--seed", type=int, default=0)
  ap.add_argument(
    "--out",
    default=None,
    help="folder of the JSON (default experiments/results/; the file is"
    " bootstrap_coverage.json, --quick: bootstrap_coverage_quick.json)",
  )
  args = ap.parse_args(argv)
  if args.quick:
    args.replicates, args.resamples, args.sizes = 20, 200, "500"
  t0 = time.perf_counter()
  truth = _population(1_000_000, jax.random.key(12345))
  result = {
    "settings": {
      "num_classes": C,
      "num_bins": NUM_BINS,
      "temperature": TEMPERATURE,
      "replicates": args.replicates,
      "resamples": args.resamples,
      "confidence": 0.95,
      "seed": args.seed,
      "population_samples": 1_000_000,
    },
    "truth": truth,
    "by_n": {},
  }
  for n in (int(s) for s in args.sizes.split(",")):
    result["by_n"][str(n)] = _coverage(n, args.replicates, args.resamples, truth, args.seed)
    print(n, {m: result["by_n"][str(n)][m] for m in bootstrap.METHODS}, flush=True)
  result["seconds"] = time.perf_counter() - t0
  name = "bootstrap_coverage_quick" if args.quick else "bootstrap_coverage"
  print("wrote", write_result(name, {**result, **device_info()}, args.out))


if __name__ == "__main__":
  main()
