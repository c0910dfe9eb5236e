"""Generates the five paper notebooks (one per paper in ../shared/papers).

Run from the repository root:  python notebooks/_build.py
The notebooks are written without outputs; tests/test_notebooks.py executes
them top to bottom. Each notebook records in its metadata (``jaxcal.requires``)
the public names it needs, so the test can skip it cleanly while an API is
still missing. Edit the notebooks here, not in the .ipynb files.
"""

from __future__ import annotations

import pathlib
import textwrap

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = pathlib.Path(__file__).resolve().parent

SETUP = """\
import os, pathlib, time
import numpy as np
import jax, jax.numpy as jnp
import matplotlib.pyplot as plt

T0 = time.time()
ROOT = pathlib.Path.cwd().resolve()
ROOT = ROOT.parent if ROOT.name == "notebooks" else ROOT
SHARED = pathlib.Path(os.environ.get("JAXCAL_SHARED", ROOT.parent / "shared"))
CIFAR = SHARED / "data" / "cifar_logits"
"""

DONE = 'print(f"notebook ran in {time.time() - T0:.1f} s")'


def md(s: str):
  return new_markdown_cell(textwrap.dedent(s).strip())


def code(*parts: str):
  """A code cell from parts, each dedented on its own (SETUP has no indent)."""
  return new_code_cell("\n".join(textwrap.dedent(p).strip() for p in parts))


# ---------------------------------------------------------------------------
# 1. truthful_multiclass_calibration_errors
# ---------------------------------------------------------------------------


def truthful_errors():
  return [
    md("""
      # Truthful calibration errors for multiclass prediction

      Companion to *Truthful Calibration Errors for Multi-Class Prediction*
      (`../shared/papers/truthful_multiclass_calibration_errors.txt`, SPEC §2-3).
      A calibration error is **truthful** if reporting the true class
      probabilities minimises its expected value. The squared binned errors
      `LinCE` / `LinCE_cw` (any outcome-independent binning) and the corrected
      confidence error `ConfCE_corr` are truthful; the usual `ConfECE` and the
      uncorrected `ConfCE` are not.

      This notebook: (1) the counterexample C.1 by Monte Carlo; (2) the truth
      against distorted and uninformative reports on synthetic data with known
      truth; (3) the four errors on 8 temperature-scaled CIFAR-10 models at
      2000/200/20/5 bins; (4) the maximum dominance set and rank correlations
      with bootstrap intervals; (5) Lemma D.1: a calibrated predictor's truthful
      error equals its proper loss over n. Runs in about a minute on a CPU.
      """),
    code(
      SETUP,
      """
      from jaxcal import dominance, metrics, recalibrate, scores
      from jaxcal.data import load_predictions, synthetic

      FAMILIES = {  # the four errors of the paper's Table 1, with their binning
          "ConfECE(fix)": (metrics.conf_ece, "fixed"),
          "ConfCE(qua)": (metrics.conf_ce, "quantile"),
          "ConfCE_corr(qua)": (metrics.conf_ce_corr, "quantile"),
          "LinCE_cw(qua)": (metrics.classwise_ce, "quantile"),
      }
      """,
    ),
    md("""
      ## 1. Example C.1: confidence aggregation is not truthful

      `C = 3`, every sample has true distribution `p* = (1/3, 1/2, 1/6)`
      (class 1 most likely, class 0 at `1/C`). The truthful report has
      `E[ConfCE] = 1/(4n)`; always reporting the uniform distribution (argmax
      tie -> class 0) has `(1/n)(1/C)(1-1/C) = 2/(9n)`, which is smaller. With
      the correction the truth wins: `3/(4n)` against `(1 - 1/C^2)/n = 8/(9n)`.
      `jax.vmap` runs 1000 replicate data sets in one call.
      """),
    code("""
      C, n, R = 3, 200, 1000
      p_star = jnp.array([1 / C, 1 / 2, 1 / 2 - 1 / C])
      reports = {"truthful": jnp.broadcast_to(p_star, (n, C)), "uniform": jnp.full((n, C), 1 / C)}

      def one_replicate(key):
        y = jax.random.categorical(key, jnp.log(p_star), shape=(n,))
        return jnp.stack([jnp.stack([metrics.conf_ce(P, y), metrics.conf_ce_corr(P, y)])
                          for P in reports.values()])

      E = np.asarray(jax.vmap(one_replicate)(jax.random.split(jax.random.PRNGKey(0), R))) * n
      theory = np.array([[1 / 4, 3 / 4], [(1 / C) * (1 - 1 / C), 1 - 1 / C**2]])
      for i, name in enumerate(reports):
        for j, err in enumerate(["ConfCE", "ConfCE_corr"]):
          mean, se = E[:, i, j].mean(), E[:, i, j].std() / np.sqrt(R)
          print(f"{name:9s} {err:12s} n·E = {mean:.4f} ± {se:.4f}   closed form {theory[i, j]:.4f}")
      """),
    md("""
      ## 2. Truthfulness on synthetic data with known truth

      `jaxcal.data.synthetic` draws true probabilities `mu_i` and labels
      `y_i ~ mu_i`. We compare four reports of the same data: the truth
      `mu_i`, two temperature distortions `softmax(log(mu_i) / T)`
      (over-confident `T = 0.7`, under-confident `T = 1.4`), and the constant
      uniform report `1/C`, which is calibrated (the classes are exchangeable)
      but uninformative. Each error is averaged over 100 replicate data sets
      (`n = 500`, `C = 10`) at 5, 20 and 100 bins. A truthful error must rank
      the truth first at every bin count; the non-truthful ConfECE and ConfCE
      prefer the uninformative uniform report (its sampling noise is smaller,
      Example 1.1 and C.1 of the paper).
      """),
    code("""
      n, C, R = 500, 10, 100
      bins = np.array([5, 20, 100])
      REPORTS = ["truth", "T = 0.7", "T = 1.4", "uniform"]

      def errors_of_reports(key):
        d = synthetic(key, n, C)
        logmu = jnp.log(d.true_probs)
        reports = jnp.stack([d.true_probs, jax.nn.softmax(logmu / 0.7, axis=-1),
                             jax.nn.softmax(logmu / 1.4, axis=-1), jnp.full((n, C), 1.0 / C)])
        return jax.vmap(lambda p: jnp.stack(
            [f(p, d.labels, num_bins=bins, binning=b) for f, b in FAMILIES.values()]))(reports)

      E = np.asarray(jax.vmap(errors_of_reports)(jax.random.split(jax.random.PRNGKey(1), R)))
      mean, se = E.mean(0) * n, E.std(0) / np.sqrt(R) * n   # (report, family, bins)
      for f, name in enumerate(FAMILIES):
        print(f"{name}  (n·E[error] ± SE; * = smallest)")
        for j, m in enumerate(bins):
          best = mean[:, f, j].argmin()
          print(f"   m = {m:3d}: " + "  ".join(
              f"{r} {mean[i, f, j]:8.3f}±{se[i, f, j]:.3f}{'*' if i == best else ' '}" for i, r in enumerate(REPORTS)))
      """),
    md("""
      ## 3. Real predictors: 8 CIFAR-10 models, temperature-scaled

      Following the paper's protocol (SPEC §3), each model is temperature-scaled
      on its validation split and evaluated on the 10,000 test samples. One
      jitted call computes all four errors of all 8 models at all bin counts:
      `jax.vmap` over the stacked models and `num_bins` as an array.
      """),
    code("""
      settings = [f"{pre}cifar10_{arch}" for pre in ("", "focal_")
                  for arch in ("resnet50", "resnet110", "wide_resnet", "densenet121")]
      probs, labels = [], []
      for s in settings:
        val_logits, val_labels = load_predictions(CIFAR / s, split="val")
        test_logits, test_labels = load_predictions(CIFAR / s, split="test")
        ts = recalibrate.fit("temperature", val_logits, val_labels)
        probs.append(np.asarray(ts(test_logits)))
        labels.append(test_labels)
      probs, labels = np.stack(probs), np.stack(labels)  # (8, 10000, 10), (8, 10000)

      bins = np.array([2000, 200, 20, 5])
      all_errors = jax.jit(jax.vmap(
          lambda p, y: jnp.stack([f(p, y, num_bins=bins, binning=b) for f, b in FAMILIES.values()])))
      E = np.asarray(all_errors(probs, labels))  # (models, families, bins)
      LOSS_NAMES = ["brier", "log_loss", "spherical", "classification_error", "confidence_loss"]
      losses = np.asarray(jax.vmap(lambda p, y: jnp.stack(
          [getattr(scores, name)(p, y) for name in LOSS_NAMES]))(probs, labels))  # (models, 5)

      print(f"{'model':28s} {'error':>6s} " + " ".join(f"{f[:11]:>11s}(m={m})" for f in FAMILIES for m in bins[[0, 3]]))
      for i, s in enumerate(settings):
        print(f"{s:28s} {losses[i, 3]:6.4f} " + " ".join(f"{E[i, f, j]:17.2e}" for f in range(4) for j in (0, 3)))
      """),
    md("""
      How stable is each error's ranking of the models across bin counts?
      Spearman correlations (`jaxcal.dominance.rank_correlation`, scipy's tie
      handling) between bin counts, and with classification error. With only 8
      models these are noisy; `experiments/binning_robustness.py` runs the
      full Table 1 with bootstrap intervals.
      """),
    code("""
      for f, name in enumerate(FAMILIES):
        between = [float(dominance.rank_correlation(E[:, f, a], E[:, f, b]))
                   for a in range(len(bins)) for b in range(a + 1, len(bins))]
        with_err = [float(dominance.rank_correlation(losses[:, 3], E[:, f, j])) for j in range(len(bins))]
        print(f"{name:17s} between bin counts: mean {np.mean(between):+.2f} (min {np.min(between):+.2f});"
              f"  with classification error at m={bins.tolist()}: {np.round(with_err, 2)}")
      """),
    md("""
      ## 4. Maximum dominance set

      Model `f` dominates `g` when all five proper losses (Brier, log,
      spherical, classification error, confidence loss) are no larger. The
      longest chain of this partial order is the *maximum dominance set*; a
      truthful error should increase along it. The ± values are `1.96 sd` from
      a bootstrap over test samples (`jaxcal.dominance.bootstrap` vmaps the
      statistic over resampled index sets).
      """),
    code("""
      chain = dominance.dominance_chain(losses)
      print("chain (best first):", [settings[i] for i in chain])

      PAIR = ["ConfECE(fix)", "LinCE_cw(qua)"]   # a non-truthful and a truthful error

      def chain_correlations(p, y):
        e = jax.vmap(lambda q, t: jnp.stack(
            [FAMILIES[k][0](q, t, num_bins=20, binning=FAMILIES[k][1]) for k in PAIR]))(p[chain], y[chain])
        pos = jnp.arange(len(chain), dtype=e.dtype)
        return jax.vmap(lambda col: dominance.rank_correlation(pos, col))(e.T)

      if len(chain) >= 3:
        r = dominance.bootstrap(jax.random.PRNGKey(2), chain_correlations, probs, labels,
                                num_resamples=20, sample_axis=1)
        for f, name in enumerate(PAIR):
          print(f"Spearman(chain position, {name} at m=20) = {float(r.estimate[f]):+.2f} ± {float(1.96 * r.sd[f]):.2f}")
      """),
    md("""
      ## 5. Lemma D.1: calibrated predictors

      For a (classwise / confidence) calibrated predictor and any binning,
      `E[LinCE_cw] = E[Brier]/(C n)` and `E[ConfCE_corr] = E[l_conf]/n`. After
      temperature scaling the models are nearly calibrated, so their truthful
      errors sit close to the dotted line at every bin count (the paper's
      assumption check, Fig. 4).
      """),
    code(
      """
      n_test, C = probs.shape[1], probs.shape[2]
      pred = {"LinCE_cw(qua)": losses[:, 0] / (C * n_test), "ConfCE_corr(qua)": losses[:, 4] / n_test}
      fig, axes = plt.subplots(1, 2, figsize=(9, 3.6), constrained_layout=True)
      for ax, name in zip(axes, pred):
        f = list(FAMILIES).index(name)
        for j, m in enumerate(bins):
          ax.scatter(pred[name], E[:, f, j], s=12, label=f"m = {m}")
        lim = [pred[name].min() * 0.9, pred[name].max() * 1.1]
        ax.plot(lim, lim, "k:", label="calibrated")
        ax.set_xlabel("proper loss / n"); ax.set_ylabel(name); ax.legend(fontsize=7)
      plt.show()
      """
      + DONE
    ),
  ], ["jaxcal.recalibrate.fit", "jaxcal.dominance.bootstrap", "jaxcal.data.synthetic"]


# ---------------------------------------------------------------------------
# 2. making_and_evaluating_calibrated_forecasts
# ---------------------------------------------------------------------------


def calibrated_forecasts():
  return [
    md("""
      # Making and evaluating calibrated forecasts: the four predictors

      Companion to *Making and Evaluating Calibrated Forecasts*
      (`../shared/papers/making_and_evaluating_calibrated_forecasts.txt`, §4 and
      App. D). Classwise aggregation of a truthful binary error gives a
      truthful multiclass error (`LinCE_cw`); confidence aggregation does not.
      The paper's four predictors make the consequences concrete:

      * `x ~ Uniform{0..k-1}`, `y = x` with probability `p`, else `x+1 mod k`;
      * **f1** informative, calibrated (the truth) `p e_x + (1-p) e_{x+1}`;
      * **f2** informative, biased: `p+eps` and `1-p-eps`;
      * **f3** uniform, calibrated: `1/k` everywhere;
      * **f4** uniform, biased: `1/k + delta` on class 0, the rest lowered.

      With `eps = delta = 0.5/sqrt(n)` (the order of the sampling error) we
      estimate each error by Monte Carlo (`jax.vmap` over 100 replicate data
      sets, `num_bins` as an array) and compare with closed
      forms. `experiments/four_predictors.py` has the derivations, exact
      closed forms for every case, more n, 2000 replicates and a second
      flip scenario (k = 4, p = 0.9). Runs in under a minute.
      """),
    code(
      SETUP,
      '''
      from jaxcal import metrics
      from jaxcal.data import default_predictions

      NAMES = ["f1 inf-cal", "f2 inf-bias", "f3 uni-cal", "f4 uni-bias"]
      BINS = np.array([1, 2, 5, 10, 20, 50])
      FAMILIES = {
          "ConfECE(qua)": (metrics.conf_ece, "quantile"),
          "ConfCE(qua)": (metrics.conf_ce, "quantile"),
          "ConfCE_corr(qua)": (metrics.conf_ce_corr, "quantile"),
          "LinCE_cw(qua)": (metrics.classwise_ce, "quantile"),
      }

      def four_predictors(x, k, p, eps, delta):
        ex, ex1 = jax.nn.one_hot(x, k), jax.nn.one_hot((x + 1) % k, k)
        f4_row = jnp.full((k,), 1 / k - delta / (k - 1)).at[0].set(1 / k + delta)
        return jnp.stack([p * ex + (1 - p) * ex1, (p + eps) * ex + (1 - p - eps) * ex1,
                          jnp.full(ex.shape, 1 / k), jnp.broadcast_to(f4_row, ex.shape)])

      import functools

      @functools.partial(jax.jit, static_argnames=("n", "k", "reps"))
      def monte_carlo(key, p, *, n, k, reps=100):
        """Mean and SE of every error, (predictor, family, bins), over replicate data sets.
        p is traced, so scenarios with the same (n, k) share one compilation."""
        eps = 0.5 / np.sqrt(n)
        def one(key):
          kx, ky = jax.random.split(key)
          x = jax.random.randint(kx, (n,), 0, k)
          y = jnp.where(jax.random.uniform(ky, (n,)) < p, x, (x + 1) % k)
          P = four_predictors(x, k, p, eps, eps)
          return jax.vmap(lambda q: jnp.stack(
              [f(q, y, num_bins=BINS, binning=b) for f, b in FAMILIES.values()]))(P)
        out = jax.vmap(one)(jax.random.split(key, reps))
        return out.mean(0), out.std(0) / np.sqrt(reps)
      ''',
    ),
    md("""
      Closed forms with `m` dividing `n` (each predictor's confidence is
      constant, so quantile bins are index blocks of `n/m`; `q` is the
      probability that the top label is right, `c` the reported confidence):
      `E[ConfCE] = (c-q)^2/m + q(1-q)/n`, `E[ConfCE_corr] = E[ConfCE] + (1-q)/n`,
      `E[LinCE_cw]` = `2p(1-p)/(kn)` (f1), `(k-1)/(k^2 n)` (f3),
      `delta^2/((k-1)m) + (k-1)/(k^2 n)` (f4); f2's is an exact multinomial sum
      (in the script), plotted from Monte Carlo only.
      """),
    code("""
      def closed(n, k, p, m):
        eps = 0.5 / np.sqrt(n)
        cq = [(p, p), (p + eps, p), (1 / k, 1 / k), (1 / k + eps, 1 / k)]
        ce = np.array([(c - q) ** 2 / m + q * (1 - q) / n for c, q in cq])
        corr = ce + np.array([(1 - q) / n for _, q in cq])
        unif = (k - 1) / (k**2 * n)
        cw = np.array([2 * p * (1 - p) / (k * n), np.nan, unif, eps**2 / ((k - 1) * m) + unif])
        return {"ConfCE(qua)": ce, "ConfCE_corr(qua)": corr, "LinCE_cw(qua)": cw}

      n, bins = 1000, BINS
      scenarios = {"violation (k=10, p=0.7)": (10, 0.7), "flip (k=10, p=0.95)": (10, 0.95)}
      results = {name: [np.asarray(a) for a in monte_carlo(jax.random.PRNGKey(i), p, n=n, k=k)]
                 for i, (name, (k, p)) in enumerate(scenarios.items())}

      fig, axes = plt.subplots(2, 4, figsize=(16, 6.5), constrained_layout=True)
      for i, (name, (k, p)) in enumerate(scenarios.items()):
        mean, se = results[name]
        cf = [closed(n, k, p, int(m)) for m in bins]
        for f, fam in enumerate(FAMILIES):
          ax = axes[i, f]
          for j, label in enumerate(NAMES):
            ax.errorbar(bins, n * mean[j, f], yerr=1.96 * n * se[j, f], fmt="o", ms=3, color=f"C{j}", label=label)
            if fam in cf[0]:
              ax.plot(bins, [n * c[fam][j] for c in cf], "-", color=f"C{j}", lw=1)
          ax.set_xscale("log"); ax.set_title(f"{name}: {fam}", fontsize=9); ax.set_xlabel("bins m")
        axes[i, 0].set_ylabel("n · E[error]")
      axes[0, 0].legend(fontsize=7)
      plt.show()
      """),
    md("""
      **What the plot shows** (the paper's conclusions 1-4):

      * *violation*: ConfECE and ConfCE rank the uninformative f3 (and even
        the biased f4) above the truth f1 at every bin count; the truthful
        ConfCE_corr and LinCE_cw rank f1 first and the informative f2 above f3;
      * *flip*: the non-truthful errors order f2 and f3 differently at `m = 1`
        and at large `m`; the truthful ones keep f2 ahead for every `m`.
      """),
    code("""
      for name in scenarios:
        mean, _ = results[name]
        print(name)
        for f, fam in enumerate(FAMILIES):
          orders = [" < ".join(NAMES[j].split()[0] for j in np.argsort(mean[:, f, b])) for b in (0, len(bins) - 1)]
          print(f"  {fam:17s} m={bins[0]}: {orders[0]:22s} m={bins[-1]}: {orders[1]}")
      """),
    md("""
      ## On real predictions: bin-count dependence

      The embedded CIFAR-10 ResNet-110 test predictions (`jaxcal.data.
      default_predictions`, uncalibrated softmax). For the squared errors the
      sampling part `(1/n^2) sum_i Var` does not depend on the bins at all
      (Thm 3.1), only the bias part does; ConfECE's sampling part grows like
      `sqrt(m/n)`, so it is dominated by the bin count at large `m`.
      """),
    code(
      """
      logits, labels = default_predictions("test")
      probs = jax.nn.softmax(jnp.asarray(logits), axis=-1)
      ms = np.array([5, 10, 20, 50, 100, 200, 500, 1000, 2000])
      vals = {name: np.asarray(f(probs, labels, num_bins=ms, binning=b)) for name, (f, b) in FAMILIES.items()}
      vals["ConfECE(fix)"] = np.asarray(metrics.conf_ece(probs, labels, num_bins=ms, binning="fixed"))
      fig, ax = plt.subplots(figsize=(6, 3.8), constrained_layout=True)
      for name, v in vals.items():
        ax.plot(ms, v / v[0], "o-", ms=3, label=name)
      ax.set_xscale("log"); ax.set_xlabel("bins m"); ax.set_ylabel("error / error at m = 5"); ax.legend(fontsize=8)
      plt.show()
      """
      + DONE
    ),
  ], ["jaxcal.data.default_predictions"]


# ---------------------------------------------------------------------------
# 3. utility_aware_multiclass_calibration
# ---------------------------------------------------------------------------


def utility_calibration():
  return [
    md("""
      # Utility calibration

      Companion to *Utility-aware multiclass calibration*
      (`../shared/papers/utility_aware_multiclass_calibration.txt`, SPEC §6).
      For a utility `u(p, y)` the predicted utility is `v(p) = <p, u(p, .)>`;
      `UC(f, u)` is the largest average gap between realised and predicted
      utility over intervals of `v`. Binned calibration errors are special
      cases (top-class and class-wise utilities); sampling thousands of linear
      or rank utilities and plotting the eCDF of their errors shows how
      calibrated the predictions are for many downstream decisions at once.

      Predictions: the embedded CIFAR-10 ResNet-110 logits; recalibrators are
      fitted on the validation split and evaluated on the test split. About a
      minute on a CPU.
      """),
    code(
      SETUP,
      """
      from jaxcal import recalibrate, utility
      from jaxcal.data import default_predictions

      val_logits, val_labels = default_predictions("val")
      test_logits, test_labels = default_predictions("test")
      C = test_logits.shape[1]
      preds = {"uncalibrated": jax.nn.softmax(jnp.asarray(test_logits), axis=-1)}
      preds["temperature"] = recalibrate.fit("temperature", val_logits, val_labels)(test_logits)
      """,
    ),
    md("""
      ## One utility: the top class

      `top_class()` has `v = max p`, so `UC` is the worst interval version of the
      top-label calibration error; `uc` also returns the worst interval and the
      sign of the gap (what patching needs).
      """),
    code("""
      for name, p in preds.items():
        r = utility.uc(p, test_labels, utility.top_class())
        print(f"{name:13s} UC = {float(r.value):.4f} on v in [{float(r.lo):.3f}, {float(r.hi):.3f}], sign {int(r.sign):+d}")
      """),
    md("""
      ## Patching (Algorithm 1)

      Patching repeatedly finds the worst (utility, interval, sign) witness over
      `U_comb` plus fresh linear and rank utilities and moves the predictions
      against it. A few steps here to keep the notebook fast.
      """),
    code("""
      patch = recalibrate.fit("patching", val_logits, val_labels, max_steps=15)
      preds["patching (15 steps)"] = patch(test_logits)
      print(f"{'':22s}" + "".join(f"{fam:>9s}" for fam in ("tce", "cwe", "topk", "comb")))
      for name, p in preds.items():
        print(f"{name:22s}" + "".join(f"{float(utility.uc_class(p, test_labels, fam)):9.4f}"
                                      for fam in ("tce", "cwe", "topk", "comb")))
      """),
    md("""
      ## eCDF over sampled utilities

      `uc_sweep` measures a whole batch of utilities in one compiled call;
      `ecdf` gives the curve `F(e) = fraction of utilities with error <= e`
      (left is better).
      """),
    code(
      """
      families = {"linear": utility.sample_linear(jax.random.PRNGKey(0), 300, C),
                  "rank": utility.sample_rank(jax.random.PRNGKey(1), 300, C)}
      fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), constrained_layout=True)
      for ax, (fam, U) in zip(axes, families.items()):
        for name, p in preds.items():
          e, F = utility.ecdf(utility.uc_sweep(p, test_labels, U))
          ax.plot(np.asarray(e), np.asarray(F), label=name)
        ax.set_xlabel("utility calibration error"); ax.set_ylabel("fraction of utilities"); ax.set_title(f"U_{fam}")
        ax.set_xscale("log")
      axes[0].legend(fontsize=8)
      plt.show()
      """
      + DONE
    ),
  ], ["jaxcal.utility.uc_sweep", "jaxcal.recalibrate.fit"]


# ---------------------------------------------------------------------------
# 4. score_decompositions_case_study
# ---------------------------------------------------------------------------


def score_decomposition():
  return [
    md("""
      # Score decompositions: miscalibration, discrimination, uncertainty

      Companion to the score decomposition case study
      (`../shared/papers/score_decompositions_case_study.txt`, SPEC §4). A proper
      score splits as `S = MCB - DSC + UNC`: miscalibration (what an in-sample
      isotonic recalibration removes), discrimination (what is left over the
      climatological forecast) and uncertainty. Here: the classwise (CW,
      CORP) decomposition of the Brier score, averaged over classes and x100
      as in the paper, for a CIFAR-10 and a CIFAR-100 model before and after
      several recalibrators fitted on the validation split. About a minute on a
      CPU.
      """),
    code(
      SETUP,
      """
      from jaxcal import recalibrate, scores
      from jaxcal.data import load_predictions

      METHODS = {  # name -> (recalibrate.fit method, options); None = uncalibrated
          "uncalibrated": None,
          "TS": ("temperature", {}),
          "HB-CW": ("histogram", {"normalize": False}), "HB-N": ("histogram", {"normalize": True}),
          "IR-CW": ("isotonic", {"normalize": False}), "IR-N": ("isotonic", {"normalize": True}),
          "SIR-CW": ("smooth_isotonic", {"normalize": False}), "SIR-N": ("smooth_isotonic", {"normalize": True}),
      }
      rows = {}
      for setting in ("cifar10_resnet110", "cifar100_resnet110"):
        val_logits, val_labels = load_predictions(CIFAR / setting, split="val")
        test_logits, test_labels = load_predictions(CIFAR / setting, split="test")
        for name, spec in METHODS.items():
          if spec is None:
            p = jax.nn.softmax(jnp.asarray(test_logits), axis=-1)
          else:
            p = recalibrate.fit(spec[0], val_logits, val_labels, **spec[1])(test_logits)
          simplex = not name.endswith("-CW")   # CW recalibrators do not normalise their rows
          rows[(setting, name)] = [100 * float(v) for v in scores.decompose(
              p, test_labels, score="brier", mode="classwise", require_simplex=simplex)]
          if name.startswith("HB"):   # the normalized decomposition, paper App. A
            rows[(setting, name + " (N dec.)")] = [100 * float(v) for v in scores.decompose(
                p, test_labels, score="brier", mode="normalized", require_simplex=simplex)]
      print(f"{'setting':20s} {'method':15s} {'Brier':>7s} {'MCB':>7s} {'DSC':>7s} {'UNC':>7s}")
      for (setting, name), (s, mcb, dsc, unc) in rows.items():
        print(f"{setting:20s} {name:15s} {s:7.3f} {mcb:7.3f} {dsc:7.3f} {unc:7.3f}")
      """,
    ),
    md("""
      All rows use the class-wise (CORP) decomposition of the paper's Table 1;
      the two `(N dec.)` rows use the normalized decomposition (App. A), which
      charges CW-HB's rows that do not sum to one as miscalibration. `UNC`
      depends only on the labels (9 on balanced CIFAR-10, 0.99 on CIFAR-100,
      as in the paper). Histogram binning buys its low MCB with a large loss of
      discrimination (DSC); smoothed isotonic regression keeps DSC. The
      MCB-DSC plane shows the trade-off; dotted lines have equal Brier score.
      """),
    code(
      """
      fig, axes = plt.subplots(1, 2, figsize=(10, 4), constrained_layout=True)
      for ax, setting in zip(axes, ("cifar10_resnet110", "cifar100_resnet110")):
        pts = {name: rows[(setting, name)] for name in METHODS}  # class-wise decompositions
        for name, (s, mcb, dsc, unc) in pts.items():
          ax.scatter(mcb, dsc, s=20); ax.annotate(name, (mcb, dsc), fontsize=7)
        mcbs = np.array([v[1] for v in pts.values()]); dscs = np.array([v[2] for v in pts.values()])
        unc = list(pts.values())[0][3]
        xs = np.linspace(0, mcbs.max() * 1.2, 10)
        for s in np.linspace(min(v[0] for v in pts.values()), max(v[0] for v in pts.values()), 4):
          ax.plot(xs, xs + unc - s, "k:", lw=0.6)
        ax.set_xlim(0, mcbs.max() * 1.2); ax.set_ylim(dscs.min() * 0.98, dscs.max() * 1.02)
        ax.set_xlabel("MCB (x100)"); ax.set_ylabel("DSC (x100)"); ax.set_title(setting)
      plt.show()
      """
      + DONE
    ),
  ], ["jaxcal.scores.decompose", "jaxcal.recalibrate.fit"]


# ---------------------------------------------------------------------------
# 5. local_calibration_jensen_shannon
# ---------------------------------------------------------------------------


def local_calibration():
  return [
    md("""
      # Local calibration and LoCal Nets

      Companion to *local calibration via Jensen-Shannon* (`../shared/papers/
      local_calibration_jensen_shannon.txt`, SPEC §5). Calibration on average
      can hide miscalibration in regions of feature space. The local
      calibration error LCE averages, for each anchor, the kernel-weighted
      residual of its neighbours in the same probability bin (Nadaraya-Watson
      in feature space); MLCE is the worst anchor. A LoCal Net recalibrates
      using the features.

      Here: a small MLP trained for a few seconds on Fashion-MNIST (pure
      JAX + optax), its penultimate activations as features `phi(x)` (PCA to
      50 dims of the standardised features, fitted on the calibration split),
      and LCE / MLCE, ECCE and class-wise ECE before and after temperature
      scaling and a LoCal Net. Test anchors are subsampled to keep it to about
      a minute on a CPU.
      """),
    code(
      SETUP,
      """
      import optax
      from jaxcal import metrics, recalibrate
      from jaxcal.data import load_fashion_mnist

      data = load_fashion_mnist()
      x_all = data["train_images"].reshape(-1, 784).astype(np.float32) / 255.0 - 0.5
      y_all = data["train_labels"].astype(np.int32)
      x_train, y_train = jnp.asarray(x_all[:20000]), jnp.asarray(y_all[:20000])  # training
      x_cal, y_cal = x_all[50000:55000], y_all[50000:55000]     # calibration split
      x_test = data["test_images"].reshape(-1, 784).astype(np.float32)[:3000] / 255.0 - 0.5
      y_test = data["test_labels"].astype(np.int32)[:3000]
      """,
    ),
    code("""
      def init(key, sizes=(784, 128, 10)):
        ks = jax.random.split(key, len(sizes) - 1)
        return [(jax.random.normal(k, (a, b)) * np.sqrt(2 / a), jnp.zeros(b)) for k, a, b in zip(ks, sizes[:-1], sizes[1:])]

      def features(params, x):
        (w, b), _ = params
        return jax.nn.relu(x @ w + b)

      def logits(params, x):
        return features(params, x) @ params[1][0] + params[1][1]

      def loss(params, x, y):
        return optax.softmax_cross_entropy_with_integer_labels(logits(params, x), y).mean()

      opt = optax.adam(1e-3)

      @jax.jit
      def epoch(params, state, key):
        perm = jax.random.permutation(key, len(x_train))[: (len(x_train) // 250) * 250].reshape(-1, 250)
        def step(carry, idx):
          params, state = carry
          g = jax.grad(loss)(params, x_train[idx], y_train[idx])
          updates, state = opt.update(g, state, params)
          return (optax.apply_updates(params, updates), state), None
        (params, state), _ = jax.lax.scan(step, (params, state), perm)
        return params, state

      params = init(jax.random.PRNGKey(0))
      state = opt.init(params)
      for e in range(8):  # a few epochs: about 85 % test accuracy
        params, state = epoch(params, state, jax.random.PRNGKey(e))
      z_cal, z_test = logits(params, x_cal), logits(params, x_test)
      phi_cal, phi_test = features(params, x_cal), features(params, x_test)
      print("test accuracy:", float((z_test.argmax(1) == y_test).mean()))
      """),
    md("""
      Features for the metric: PCA to 50 dimensions of the standardised
      penultimate activations, fitted on the calibration split (SPEC §5).
      """),
    code("""
      mu, sd = phi_cal.mean(0), phi_cal.std(0) + 1e-6
      _, _, vt = np.linalg.svd(np.asarray((phi_cal - mu) / sd), full_matrices=False)
      proj = lambda phi: np.asarray((phi - mu) / sd) @ vt[:50].T
      feat_test = proj(phi_test)

      preds = {"uncalibrated": jax.nn.softmax(z_test, axis=-1)}
      preds["temperature"] = recalibrate.fit("temperature", z_cal, y_cal)(z_test)
      ln = recalibrate.fit("local_net", z_cal, y_cal, features=phi_cal, epochs=30, verbose=False)
      preds["LoCal Net"] = ln(z_test, features=phi_test)

      print(f"{'':14s} {'LCE':>8s} {'MLCE':>8s} {'ECCE':>8s} {'CW-ECE':>8s} {'ConfECE':>8s}")
      for name, p in preds.items():
        loc = metrics.lce(p, y_test, feat_test, num_bins=15, min_bin_size=20, bandwidth=10.0)
        print(f"{name:14s} {float(loc.lce):8.4f} {float(loc.mlce):8.4f} {float(metrics.ecce(p, y_test)):8.4f} "
              f"{float(metrics.classwise_ece(p, y_test)):8.4f} {float(metrics.conf_ece(p, y_test)):8.4f}")
      """),
    md("""
      The kernel bandwidth sets how local "local" is: a large bandwidth averages
      over a whole bin and LCE approaches the class-wise binned error; a small
      one looks at a few neighbours and grows towards the per-sample noise.
      """),
    code(
      """
      gammas = [1.0, 3.0, 10.0, 30.0]
      fig, ax = plt.subplots(figsize=(5.5, 3.6), constrained_layout=True)
      for name in ("uncalibrated", "LoCal Net"):
        p = preds[name]
        ax.plot(gammas, [float(metrics.lce(p, y_test, feat_test, bandwidth=g).lce) for g in gammas], "o-", label=name)
      ax.set_xscale("log"); ax.set_xlabel("bandwidth gamma"); ax.set_ylabel("LCE"); ax.legend()
      plt.show()
      """
      + DONE
    ),
  ], ["jaxcal.metrics.lce", "jaxcal.recalibrate.fit", "jaxcal.data.load_fashion_mnist"]


NOTEBOOKS = {
  "truthful_errors": truthful_errors,
  "calibrated_forecasts": calibrated_forecasts,
  "utility_calibration": utility_calibration,
  "score_decomposition": score_decomposition,
  "local_calibration": local_calibration,
}


def build(name: str) -> nbformat.NotebookNode:
  cells, requires = NOTEBOOKS[name]()
  nb = new_notebook(cells=cells)
  nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
  nb.metadata["language_info"] = {"name": "python"}
  nb.metadata["jaxcal"] = {"requires": requires, "generated_by": "notebooks/_build.py"}
  return nb


def main() -> None:
  for name in NOTEBOOKS:
    path = HERE / f"{name}.ipynb"
    nbformat.write(build(name), path)
    print("wrote", path)


if __name__ == "__main__":
  main()
