r"""The four-predictor example of making_and_evaluating_calibrated_forecasts (§4, App. D).

Monte Carlo expected errors of ConfECE, ConfCE, ConfCE_corr and LinCE_cw for
four predictors, several sample sizes n and bin counts m, against exact closed
forms, and the ranking flips the paper describes.

Run:  python experiments/four_predictors.py            (full: 9 min wall / 2.8 min CPU on the
                                                        shared, loaded 2-core machine)
      python experiments/four_predictors.py --quick    (n = 200, 100 replicates, 3 bin counts:
                                                        ~10 s CPU; a smoke test)
Writes experiments/results/four_predictors/{results.json, README.md, four_predictors.png}
(``--quick``: four_predictors_quick/; ``--out DIR`` to write elsewhere).

Setup
-----
The paper's text extraction lost its symbols, so the constants are the
project's instantiation of the setup as described there and in App. D:
``k >= 3`` classes, ``x ~ Uniform{0..k-1}``, and given ``x`` the label is
``y = x`` with probability ``p`` (``1/2 < p < 1``) and ``y = x+1 (mod k)``
otherwise ("two active coordinates"). The four predictors:

1. informative, calibrated (the truth): ``f1(x) = p e_x + (1-p) e_{x+1}``;
2. informative, biased:  ``f2(x) = (p+eps) e_x + (1-p-eps) e_{x+1}``;
3. uniform, calibrated:  ``f3(x) = (1/k, ..., 1/k)`` (argmax tie -> class 0);
4. uniform, biased:      ``f4(x) = (1/k+delta) e_0 + (1/k - delta/(k-1)) sum_{r>0} e_r``.

Errors (jaxcal.metrics; Lu, Wu, Hartline & Hu 2025, arXiv:2510.06388, §2-3:
Definition 2.1, Definition 3.2, Theorem 3.1): ConfECE with fixed and with
quantile bins, ConfCE(qua), ConfCE_corr(qua), LinCE_cw(qua). The bias sizes scale like the
sampling error, ``eps = delta = kappa / sqrt(n)``: the paper's regime "eps of
the order of the sampling error".

Closed forms (exact for every finite n and m)
---------------------------------------------
Quantile bins of m over n samples have sizes ``n_j = floor(jn/m) - floor((j-1)n/m)``;
write ``Q(m) = sum_j n_j^2 / n^2`` (``= 1/m`` when m divides n).

*Confidence errors.* Every predictor has a constant confidence ``c`` and its
top label is correct with a constant probability ``q``, and since the samples
are iid the indicators ``z_i`` are iid Bernoulli(q) (unconditionally on x):
f1: ``c = q = p``; f2: ``c = p+eps, q = p``; f3: ``c = q = 1/k``;
f4: ``c = 1/k + delta, q = 1/k`` (the top label is class 0, ``P(y=0) = 1/k``).
Constant scores are split by the stable quantile rule into index blocks of
sizes ``n_j`` (fixed bins keep them in one bin), so the bin sums
``S_j = sum_{i in B_j} z_i ~ Bin(n_j, q)`` are independent and

* ``E ConfECE(qua;m) = (1/n) sum_j E|n_j c - Bin(n_j, q)|``
  (a finite binomial sum; ``~ sqrt(2 m q(1-q) / (pi n))`` for ``c = q``,
  ``~ |c - q|`` when ``|c - q| >> sqrt(m/n)``);
* ``E ConfECE(fix;m) = (1/n) E|n c - Bin(n, q)|`` for every m;
* ``E ConfCE(qua;m) = (1/n^2) sum_j E(n_j c - S_j)^2 = (c-q)^2 Q(m) + q(1-q)/n``;
* ``E ConfCE_corr(qua;m) = E ConfCE(qua;m) + (1-q)/n`` (the correction
  ``(1/n)(1 - mean z)`` has mean ``(1-q)/n``). For the calibrated f1, f3 this
  is ``(1-q^2)/n = E[l_conf]/n`` (Lemma D.1).

*Classwise LinCE_cw.* Conditional on ``x`` (which fixes reports and bins),
Thm 3.1 gives for class r
``E = (1/n^2) sum_B (sum_{i in B} (u_i^r - mu_i^r))^2 + (1/n^2) sum_i mu_i^r (1 - mu_i^r)``,
with ``mu_i = f1(x_i)`` the truth. The variance term summed over classes is
``2p(1-p)`` for every sample, so it contributes ``V = 2p(1-p)/(kn)`` to every
predictor.

* f1: no bias, ``E LinCE_cw = 2p(1-p)/(kn) = E[Brier(f1)]/(kn)`` (Lemma D.1).
* f3: reports are constant, bins are index blocks, and the residuals
  ``d_i = 1/k - mu_i^r`` are iid with mean 0 and variance
  ``(p^2 + (1-p)^2)/k - 1/k^2``, so the bias term is that variance over n and
  ``E LinCE_cw = (1/k)(1 - 1/k)/n``, the calibrated-uniform Brier/(kn).
* f4: as f3 plus the constant offsets ``b_0 = delta``,
  ``b_r = -delta/(k-1)``: ``E LinCE_cw = delta^2/(k-1) Q(m) + (1/k)(1-1/k)/n``.
* f2: the bias is ``+eps`` on the ``N_a`` samples with ``x_i = r`` (report
  ``p+eps``), ``-eps`` on the ``N_b`` samples with ``x_i = r-1`` (report
  ``1-p-eps``) and 0 on the rest (report 0). Sorted ascending the reports are
  ``N_0`` zeros, then the ``N_b`` lows, then the ``N_a`` highs, so bin ``j``
  (sorted positions ``(e_{j-1}, e_j]``, ``e_j = floor(jn/m)``) has bias sum
  ``eps (h_j - l_j)`` with ``h_j``/``l_j`` its overlaps with the high/low
  position ranges, and
  ``E LinCE_cw = V + (eps^2/n^2) E_{(N_a, N_b, N_0) ~ Mult(n; 1/k, 1/k, 1-2/k)} sum_j (h_j - l_j)^2``,
  identical for every class by symmetry; evaluated as an exact sum over the
  multinomial (terms below 1e-30 dropped). For ``m >= k`` and large n it is
  ``~ V + 2 eps^2/(k m)``; for ``m = 1`` the +eps and -eps cancel
  (``V + 2 eps^2/(kn)``).

Monte Carlo
-----------
For each (scenario, n) one jitted call draws R replicate data sets and
evaluates all five errors of the four predictors at all bin counts at once:
``jax.lax.map`` (vmap in chunks) over replicates, ``jax.vmap`` over the
stacked predictors, ``num_bins`` as an int array. Agreement: ``z = (MC mean -
closed form) / SE`` with ``SE = sd / sqrt(R)``; the script reports how many
``|z| > 3`` (about 0.27 % of the comparisons are expected by chance) and the
largest ``|z|``.

Scenarios and what they show (the paper's conclusions 1-4)
-----------------------------------------------------------
* ``violation`` (k = 10, p = 0.7): the non-truthful ConfECE and ConfCE rank
  the uninformative f3 (and the biased uninformative f4) above the truth f1,
  at every m; ConfCE_corr and LinCE_cw rank f1 first and f2 above f3, f4
  at every m.
* ``flip`` (k = 4, p = 0.9): here the non-truthful errors do rank f1 above
  f3, but the order of the informative-biased f2 and the uninformative f3
  flips with m (f2 worse at m = 1, better at larger m); the truthful errors
  keep f2 above f3 for every m.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from scipy import special, stats

from jaxcal import metrics

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent / "bench"))
from _common import device_info  # versions, device, load, date

PREDICTORS = (
  "informative_calibrated",
  "informative_biased",
  "uniform_calibrated",
  "uniform_biased",
)
SHORT = {
  "informative_calibrated": "f1 inf-cal",
  "informative_biased": "f2 inf-bias",
  "uniform_calibrated": "f3 uni-cal",
  "uniform_biased": "f4 uni-bias",
}
METRICS = ("conf_ece_fix", "conf_ece_qua", "conf_ce_qua", "conf_ce_corr_qua", "lin_ce_cw_qua")
LABELS = {
  "conf_ece_fix": "ConfECE(fix)",
  "conf_ece_qua": "ConfECE(qua)",
  "conf_ce_qua": "ConfCE(qua)",
  "conf_ce_corr_qua": "ConfCE_corr(qua)",
  "lin_ce_cw_qua": "LinCE_cw(qua)",
}
TRUTHFUL = {"conf_ce_corr_qua", "lin_ce_cw_qua"}
OUT = pathlib.Path(__file__).resolve().parent / "results" / "four_predictors"


@dataclasses.dataclass(frozen=True)
class Scenario:
  name: str
  k: int
  p: float
  kappa: float  # eps = delta = kappa / sqrt(n)
  note: str

  def eps(self, n: int) -> float:
    return self.kappa / np.sqrt(n)


SCENARIOS = (
  Scenario(
    "violation",
    k=10,
    p=0.7,
    kappa=0.5,
    note="non-truthful errors prefer the uninformative predictors to the truth",
  ),
  Scenario(
    "flip", k=4, p=0.9, kappa=0.5, note="non-truthful errors flip f2 vs f3 as the bin count grows"
  ),
)


# --------------------------------------------------------------------------
# Data and predictors (JAX, one replicate; batched by lax.map / vmap)
# --------------------------------------------------------------------------


def sample(key, n: int, k: int, p: float):
  kx, ky = jax.random.split(key)
  x = jax.random.randint(kx, (n,), 0, k)
  y = jnp.where(jax.random.uniform(ky, (n,)) < p, x, (x + 1) % k)
  return x, y


def predictions(x, k: int, p: float, eps: float, delta: float) -> jax.Array:
  """(4, n, k) probabilities of f1..f4 for the features x."""
  n = x.shape[0]
  ex = jax.nn.one_hot(x, k)
  ex1 = jax.nn.one_hot((x + 1) % k, k)
  f1 = p * ex + (1 - p) * ex1
  f2 = (p + eps) * ex + (1 - p - eps) * ex1
  f3 = jnp.full((n, k), 1.0 / k)
  row4 = jnp.full((k,), 1.0 / k - delta / (k - 1)).at[0].set(1.0 / k + delta)
  f4 = jnp.broadcast_to(row4, (n, k))
  return jnp.stack([f1, f2, f3, f4])


def all_errors(probs, labels, bins: np.ndarray) -> jax.Array:
  """(5, M) errors of one predictor on one data set, every bin count at once."""
  return jnp.stack(
    [
      metrics.conf_ece(probs, labels, num_bins=bins, binning="fixed"),
      metrics.conf_ece(probs, labels, num_bins=bins, binning="quantile"),
      metrics.conf_ce(probs, labels, num_bins=bins, binning="quantile"),
      metrics.conf_ce_corr(probs, labels, num_bins=bins, binning="quantile"),
      metrics.classwise_ce(probs, labels, num_bins=bins, binning="quantile"),
    ]
  )


def monte_carlo(key, sc: Scenario, n: int, bins: np.ndarray, reps: int, batch: int):
  """(mean, se), each (4, 5, M), over ``reps`` replicate data sets."""
  eps = sc.eps(n)

  def one(k_):
    x, y = sample(k_, n, sc.k, sc.p)
    probs = predictions(x, sc.k, sc.p, eps, eps)
    return jax.vmap(lambda q: all_errors(q, y, bins))(probs)

  keys = jax.random.split(key, reps)
  out = jax.jit(lambda ks: jax.lax.map(one, ks, batch_size=batch))(keys)
  out = np.asarray(out, np.float64)
  return out.mean(0), out.std(0, ddof=1) / np.sqrt(reps)


# --------------------------------------------------------------------------
# Closed forms (numpy/scipy, float64)
# --------------------------------------------------------------------------


def bin_ends(n: int, m: int) -> np.ndarray:
  return (np.arange(m + 1) * n) // m


def bin_sizes(n: int, m: int) -> np.ndarray:
  return np.diff(bin_ends(n, m))


def mean_abs_dev(size: int, c: float, q: float) -> float:
  """E|size*c - Bin(size, q)|."""
  s = np.arange(size + 1)
  return float(np.sum(stats.binom.pmf(s, size, q) * np.abs(size * c - s)))


def confidence_closed(n: int, m: int, c: float, q: float) -> dict:
  sizes = bin_sizes(n, m)
  uniq, cnt = np.unique(sizes[sizes > 0], return_counts=True)
  qm = float(np.sum(sizes.astype(np.float64) ** 2)) / n**2
  ce = (c - q) ** 2 * qm + q * (1 - q) / n
  return {
    "conf_ece_fix": mean_abs_dev(n, c, q) / n,
    "conf_ece_qua": sum(int(t) * mean_abs_dev(int(s), c, q) for s, t in zip(uniq, cnt)) / n,
    "conf_ce_qua": ce,
    "conf_ce_corr_qua": ce + (1 - q) / n,
  }


def biased_classwise_bias(n: int, m: int, k: int, eps: float) -> float:
  """(eps^2/n^2) E sum_j (h_j - l_j)^2 over (N_a, N_b) ~ Mult(n; 1/k, 1/k, 1-2/k)."""
  if k < 3:
    raise ValueError("the closed form assumes k >= 3")
  sd = np.sqrt(n / k)
  lo, hi = max(0, int(n / k - 12 * sd - 5)), min(n, int(n / k + 12 * sd + 5))
  na = np.arange(lo, hi + 1)[:, None]
  nb = np.arange(lo, hi + 1)[None, :]
  n0 = n - na - nb
  ok = n0 >= 0
  n0c = np.where(ok, n0, 0)
  logp = (
    special.gammaln(n + 1)
    - special.gammaln(na + 1)
    - special.gammaln(nb + 1)
    - special.gammaln(n0c + 1)
    + (na + nb) * np.log(1 / k)
    + n0c * np.log1p(-2 / k)
  )
  w = np.where(ok, np.exp(logp), 0.0)
  w = np.where(w > 1e-30, w, 0.0)
  e = bin_ends(n, m)
  s, t = e[:-1][:, None, None], e[1:][:, None, None]  # bin j: positions (s, t]

  def overlap(a, b):  # |(s, t] ∩ (a, b]|
    return np.clip(np.minimum(t, b) - np.maximum(s, a), 0, None)

  low = overlap(n0c, n0c + nb)
  high = overlap(n0c + nb, n)
  sq = np.sum((high - low).astype(np.float64) ** 2, axis=0)
  return float(eps**2 / n**2 * np.sum(w * sq) / np.sum(w))


def closed_forms(sc: Scenario, n: int, m: int) -> dict:
  """{predictor: {metric: expected value}} for one scenario, n and m."""
  k, p = sc.k, sc.p
  eps = delta = sc.eps(n)
  qm = float(np.sum(bin_sizes(n, m).astype(np.float64) ** 2)) / n**2
  var_cw = 2 * p * (1 - p) / (k * n)
  unif_cw = (1 / k) * (1 - 1 / k) / n
  out = {
    "informative_calibrated": confidence_closed(n, m, p, p),
    "informative_biased": confidence_closed(n, m, p + eps, p),
    "uniform_calibrated": confidence_closed(n, m, 1 / k, 1 / k),
    "uniform_biased": confidence_closed(n, m, 1 / k + delta, 1 / k),
  }
  out["informative_calibrated"]["lin_ce_cw_qua"] = var_cw
  out["informative_biased"]["lin_ce_cw_qua"] = var_cw + biased_classwise_bias(n, m, k, eps)
  out["uniform_calibrated"]["lin_ce_cw_qua"] = unif_cw
  out["uniform_biased"]["lin_ce_cw_qua"] = delta**2 / (k - 1) * qm + unif_cw
  return out


# --------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------


def ranking(values: dict) -> list[str]:
  """Predictors from lowest (best) to highest expected error."""
  return sorted(values, key=lambda name: values[name])


def run(quick: bool, out_dir: pathlib.Path, seed: int = 0) -> dict:
  t0 = time.time()
  ns = (200,) if quick else (100, 1000, 5000)
  bins = np.array([1, 5, 20] if quick else [1, 2, 5, 10, 20, 50])
  reps = 100 if quick else 2000
  batch = 100  # quick: one vmapped chunk of all 100 replicates
  key = jax.random.PRNGKey(seed)
  rows, flips = [], []
  for si, sc in enumerate(SCENARIOS):
    for ni, n in enumerate(ns):
      mean, se = monte_carlo(jax.random.fold_in(key, 100 * si + ni), sc, n, bins, reps, batch)
      for mi, m in enumerate(bins):
        cf = closed_forms(sc, n, int(m))
        for pi, pred in enumerate(PREDICTORS):
          for ei, met in enumerate(METRICS):
            c, mu, s = cf[pred][met], mean[pi, ei, mi], se[pi, ei, mi]
            rows.append(
              dict(
                scenario=sc.name,
                n=n,
                num_bins=int(m),
                predictor=pred,
                metric=met,
                closed_form=c,
                mc_mean=float(mu),
                mc_se=float(s),
                z=float((mu - c) / s) if s > 0 else 0.0,
              )
            )
        for met in METRICS:
          order = ranking({pred: cf[pred][met] for pred in PREDICTORS})
          flips.append(
            dict(
              scenario=sc.name,
              n=n,
              num_bins=int(m),
              metric=met,
              order=order,
              truth_first=order[0] == "informative_calibrated",
              f2_beats_f3=order.index("informative_biased") < order.index("uniform_calibrated"),
            )
          )
  zs = np.array([r["z"] for r in rows])
  summary = dict(
    comparisons=len(rows),
    beyond_3se=int(np.sum(np.abs(zs) > 3)),
    expected_beyond_3se_by_chance=round(0.0027 * len(rows), 2),
    max_abs_z=float(np.max(np.abs(zs))),
    mean_z=float(np.mean(zs)),
    sd_z=float(np.std(zs)),
  )
  conclusions = derive_conclusions(flips)
  result = dict(
    experiment="four_predictors",
    quick=quick,
    seed=seed,
    config=dict(
      ns=list(ns),
      num_bins=bins.tolist(),
      replicates=reps,
      scenarios=[dataclasses.asdict(s) for s in SCENARIOS],
      eps_rule="eps = delta = kappa / sqrt(n)",
    ),
    summary=summary,
    conclusions=conclusions,
    rows=rows,
    rankings=flips,
    runtime_s=round(time.time() - t0, 1),
    **device_info(),  # date, device, platform, versions, load
  )
  out_dir.mkdir(parents=True, exist_ok=True)
  (out_dir / "results.json").write_text(json.dumps(result, indent=1))
  (out_dir / "README.md").write_text(markdown(result))
  figure(result, out_dir / "four_predictors.png")
  return result


def derive_conclusions(flips: list[dict]) -> dict:
  """Per scenario and metric: is the truth first at every m, does f2 vs f3 flip."""
  out = {}
  for r in flips:
    d = out.setdefault(r["scenario"], {}).setdefault(
      r["metric"], dict(truth_first_at_every_m=True, f2_beats_f3_at=[], f3_beats_f2_at=[])
    )
    d["truth_first_at_every_m"] &= r["truth_first"]
    (d["f2_beats_f3_at"] if r["f2_beats_f3"] else d["f3_beats_f2_at"]).append(
      [r["n"], r["num_bins"]]
    )
  for sc in out.values():
    for d in sc.values():
      d["f2_vs_f3_flips_with_m"] = bool(d["f2_beats_f3_at"] and d["f3_beats_f2_at"])
  return out


def markdown(res: dict) -> str:
  s = res["summary"]
  cfg = res["config"]
  lines = [
    "# Four-predictor example (making_and_evaluating_calibrated_forecasts §4, App. D)",
    "",
    f"Produced by `python experiments/four_predictors.py{' --quick' if res['quick'] else ''}` "
    f"in {res['runtime_s']} s on {res['device']} ({res['platform']}), {res['date']}, "
    f"jax {res['jax']}. Setup, closed forms and their derivations: the script's "
    "docstring.",
    "",
    f"Monte Carlo: {cfg['replicates']} replicate data sets per (scenario, n); n in "
    f"{cfg['ns']}; bins m in {cfg['num_bins']}; eps = delta = 0.5/sqrt(n).",
    "",
    "## Monte Carlo vs closed form",
    "",
    f"{s['comparisons']} comparisons; |z| > 3 in {s['beyond_3se']} "
    f"(about {s['expected_beyond_3se_by_chance']} expected by chance at the 0.27 % level); "
    f"max |z| = {s['max_abs_z']:.2f}; z mean {s['mean_z']:+.3f}, sd {s['sd_z']:.3f} "
    "(ideal 0 and 1).",
    "",
  ]
  for sc in res["config"]["scenarios"]:
    name = sc["name"]
    n_show = 1000 if 1000 in cfg["ns"] else cfg["ns"][0]
    lines += [
      f"## Scenario `{name}`: k = {sc['k']}, p = {sc['p']} ({sc['note']})",
      "",
      f"Expected error x n at n = {n_show} (closed form; MC mean ± SE in results.json).",
      "",
    ]
    header = (
      "| metric | m | " + " | ".join(SHORT[p] for p in PREDICTORS) + " | order (best first) |"
    )
    lines += [header, "|" + "---|" * (3 + len(PREDICTORS))]
    for met in METRICS:
      for m in cfg["num_bins"]:
        vals = {
          r["predictor"]: r
          for r in res["rows"]
          if r["scenario"] == name
          and r["n"] == n_show
          and r["num_bins"] == m
          and r["metric"] == met
        }
        order = ranking({p: vals[p]["closed_form"] for p in PREDICTORS})
        cells = [f"{vals[p]['closed_form'] * n_show:.3f}" for p in PREDICTORS]
        lines.append(
          f"| {LABELS[met]} | {m} | "
          + " | ".join(cells)
          + " | "
          + " < ".join(SHORT[o].split()[0] for o in order)
          + " |"
        )
    lines += ["", "Conclusions over all n and m:", ""]
    for met in METRICS:
      d = res["conclusions"][name][met]
      lines.append(
        f"- {LABELS[met]}{' (truthful)' if met in TRUTHFUL else ''}: truth f1 first at every "
        f"(n, m): {d['truth_first_at_every_m']}; f2 vs f3 flips with m: "
        f"{d['f2_vs_f3_flips_with_m']} (f3 better than f2 at (n, m) = "
        f"{d['f3_beats_f2_at'] or 'none'})."
      )
    lines.append("")
  lines += ["![four predictors](four_predictors.png)", ""]
  return "\n".join(lines)


def figure(res: dict, path: pathlib.Path) -> None:
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  cfg = res["config"]
  n_show = 1000 if 1000 in cfg["ns"] else cfg["ns"][0]
  scen = [s["name"] for s in cfg["scenarios"]]
  fig, axes = plt.subplots(
    len(scen),
    len(METRICS),
    figsize=(3.2 * len(METRICS), 3.0 * len(scen)),
    constrained_layout=True,
    squeeze=False,
  )
  colors = dict(zip(PREDICTORS, ("C0", "C1", "C2", "C3")))
  for i, name in enumerate(scen):
    for j, met in enumerate(METRICS):
      ax = axes[i, j]
      for pred in PREDICTORS:
        rs = sorted(
          (
            r
            for r in res["rows"]
            if r["scenario"] == name
            and r["n"] == n_show
            and r["metric"] == met
            and r["predictor"] == pred
          ),
          key=lambda r: r["num_bins"],
        )
        m = [r["num_bins"] for r in rs]
        ax.plot(
          m, [r["closed_form"] * n_show for r in rs], "-", color=colors[pred], label=SHORT[pred]
        )
        ax.errorbar(
          m,
          [r["mc_mean"] * n_show for r in rs],
          yerr=[1.96 * r["mc_se"] * n_show for r in rs],
          fmt="o",
          ms=3,
          color=colors[pred],
        )
      ax.set_xscale("log")
      ax.set_title(f"{name}: {LABELS[met]}{' *' if met in TRUTHFUL else ''}", fontsize=9)
      ax.set_xlabel("bins m")
      if j == 0:
        ax.set_ylabel(f"n x E[error], n = {n_show}")
  axes[0, 0].legend(fontsize=7)
  fig.suptitle(
    "Four predictors: closed form (lines) vs Monte Carlo ±1.96 SE (dots); * = truthful", fontsize=10
  )
  fig.savefig(path, dpi=110)
  plt.close(fig)


def main(argv=None) -> dict:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--quick", action="store_true", help="tiny grid (seconds)")
  ap.add_argument("--out", type=pathlib.Path, default=None)
  ap.add_argument("--seed", type=int, default=0)
  args = ap.parse_args(argv)
  name = "four_predictors_quick" if args.quick else "four_predictors"
  out = args.out if args.out else OUT.parent / name
  res = run(args.quick, out, args.seed)
  s = res["summary"]
  print(
    f"{s['comparisons']} comparisons, |z|>3: {s['beyond_3se']} "
    f"(~{s['expected_beyond_3se_by_chance']} by chance), max|z| {s['max_abs_z']:.2f}; "
    f"{res['runtime_s']} s -> {out}"
  )
  return res


if __name__ == "__main__":
  main()
