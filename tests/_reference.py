"""Slow, loop-based float64 numpy references for the metrics (SPEC §1-3).

Deliberately naive: explicit Python loops over bins and classes, a boolean
mask per bin, sums accumulated in float64. Only the
*bin assignment* follows the dtype of the scores the implementation sees:

* fixed bins use ``clip(ceil(s * m), 1, m)`` with the product rounded in the
  scores' own floating dtype (``np.float32(s) * np.float32(m)`` for float32
  scores), because that is what the JAX code computes. In exact arithmetic a
  float32 score lying just above ``j/m`` can round onto the edge; doing the
  product in float64 would then disagree by one bin for that sample. Pass
  float32 scores to get the float32 rule, float64 scores for the float64 rule.
* quantile bins: stable sort (ties by index); 1-based sorted position ``i``
  goes to bin ``ceil(i*m/n)``, computed in exact Python integers.

Everything else (residuals, bin sums, squares, absolute values, means) is
float64.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
  "fixed_bins",
  "quantile_bins",
  "bins",
  "confidence",
  "lin_sums",
  "lin_ce",
  "lin_ece",
  "conf_ece",
  "conf_ce",
  "conf_ce_corr",
  "classwise_ce",
  "classwise_ece",
  "binary_ce",
  "ecce",
  "reliability_stats",
  "brier",
  "log_loss",
  "spherical",
  "classification_error",
  "confidence_loss",
]


# ----------------------------------------------------------------- binning


def fixed_bins(s, m: int) -> np.ndarray:
  """0-based equal-width bin of every score, product in the scores' dtype."""
  s = np.asarray(s)
  ftype = s.dtype.type if np.issubdtype(s.dtype, np.floating) else np.float64
  prod = s * ftype(m)  # numpy rounds this in the scores' dtype
  return np.clip(np.ceil(prod).astype(np.int64), 1, m) - 1


def quantile_bins(s, m: int) -> np.ndarray:
  """0-based equal-mass bin: sorted position i (1-based) -> ceil(i*m/n)."""
  s = np.asarray(s)
  n = s.shape[0]
  order = np.argsort(s, kind="stable")
  pos = np.arange(1, n + 1, dtype=np.int64)
  out = np.empty(n, np.int64)
  out[order] = -(-pos * m // n) - 1  # exact integer ceil
  return out


def bins(s, m: int, binning: str) -> np.ndarray:
  if binning == "fixed":
    return fixed_bins(s, m)
  if binning == "quantile":
    return quantile_bins(s, m)
  raise ValueError(binning)


def confidence(p):
  """Top label (ties -> lowest index) and its probability (scores' dtype)."""
  p = np.asarray(p)
  r = np.argmax(p, axis=1)  # first maximum = lowest index
  return r, p[np.arange(p.shape[0]), r]


# ------------------------------------------------------- generic sums


def lin_sums(u, phi, b, m: int) -> np.ndarray:
  """Per-bin sums of u - phi in float64, shape (m, d); empty bins are 0."""
  u = np.asarray(u, np.float64)
  phi = np.asarray(phi, np.float64)
  if u.ndim == 1:
    u, phi = u[:, None], phi[:, None]
  b = np.asarray(b)
  sums = np.zeros((m, u.shape[1]))
  for j in range(m):
    sums[j] = (u[b == j] - phi[b == j]).sum(axis=0)
  return sums


def lin_ce(u, phi, b, m: int) -> float:
  n = np.asarray(u).shape[0]
  sums = lin_sums(u, phi, b, m)
  return float(sum(float(np.sum(sums[j] ** 2)) for j in range(m)) / n**2)


def lin_ece(u, phi, b, m: int, norm: str = "l1") -> float:
  """Binned error of vector reports: per bin the ℓ1 norm of the mean gap vector,
  then (torchmetrics' names) the bin-mass-weighted mean ("l1"), RMS ("l2") or
  the maximum over non-empty bins ("max")."""
  n = np.asarray(u).shape[0]
  sums = lin_sums(u, phi, b, m)
  b = np.asarray(b)
  gaps, mass = [], []
  for j in range(m):
    nb = int(np.sum(b == j))
    if nb:
      gaps.append(float(np.sum(np.abs(sums[j]))) / nb)
      mass.append(nb / n)
  gaps, mass = np.array(gaps), np.array(mass)
  if norm == "l1":
    return float(np.sum(mass * gaps))
  if norm == "l2":
    return float(np.sqrt(np.sum(mass * gaps**2)))
  return float(np.max(gaps))


def _bin_residual_sums(scores, resid, m, binning):
  """(m,) float64 per-bin sums of resid over bins of scores; loops over bins."""
  b = bins(scores, m, binning)
  resid = np.asarray(resid, np.float64)
  return np.array([resid[b == j].sum() for j in range(m)]), b


# --------------------------------------------------- confidence errors


def _conf_resid(p, y):
  r, c = confidence(p)
  z = (r == np.asarray(y)).astype(np.float64)
  return c, np.asarray(c, np.float64) - z, z


def conf_ece(p, y, m, binning="fixed") -> float:
  c, res, _ = _conf_resid(p, y)
  sums, _ = _bin_residual_sums(c, res, m, binning)
  return float(np.sum(np.abs(sums)) / len(res))


def conf_ce(p, y, m, binning="quantile") -> float:
  c, res, _ = _conf_resid(p, y)
  sums, _ = _bin_residual_sums(c, res, m, binning)
  return float(np.sum(sums**2) / len(res) ** 2)


def conf_ce_corr(p, y, m, binning="quantile") -> float:
  _, _, z = _conf_resid(p, y)
  n = len(z)
  return conf_ce(p, y, m, binning) + (1.0 - z.mean()) / n


# ----------------------------------------------------- classwise errors


def _class_sums(p, y, m, binning):
  p = np.asarray(p)
  y = np.asarray(y)
  n, num_classes = p.shape
  out = np.zeros((num_classes, m))
  for r in range(num_classes):
    resid = p[:, r].astype(np.float64) - (y == r)
    out[r], _ = _bin_residual_sums(p[:, r], resid, m, binning)
  return out


def classwise_ce(p, y, m, binning="quantile") -> float:
  s = _class_sums(p, y, m, binning)
  n, num_classes = np.asarray(p).shape
  return float(sum(np.sum(s[r] ** 2) / n**2 for r in range(num_classes)) / num_classes)


def classwise_ece(p, y, m, binning="fixed", class_weights=None) -> float:
  s = _class_sums(p, y, m, binning)
  n, num_classes = np.asarray(p).shape
  w = (
    np.full(num_classes, 1.0 / num_classes)
    if class_weights is None
    else np.asarray(class_weights, np.float64)
  )
  return float(sum(w[r] * np.sum(np.abs(s[r])) / n for r in range(num_classes)))


def binary_ce(p, y, m, binning="quantile") -> float:
  p = np.asarray(p)
  resid = p.astype(np.float64) - np.asarray(y, np.float64)
  sums, _ = _bin_residual_sums(p, resid, m, binning)
  return float(np.sum(sums**2) / len(p) ** 2)


def ecce(p, y, m, class_weights=None, reduction="mean") -> float:
  """sum_c w_c (1/K_c) sum_{non-empty b} (1/n)|sum_{b'<=b} sum_{j in b'} (1[y=c]-p_c)|,
  K_c the number of non-empty bins of class c (reduction="sum": without 1/K_c)."""
  p = np.asarray(p)
  y = np.asarray(y)
  n, num_classes = p.shape
  w = (
    np.full(num_classes, 1.0 / num_classes)
    if class_weights is None
    else np.asarray(class_weights, np.float64)
  )
  total = 0.0
  for r in range(num_classes):
    b = fixed_bins(p[:, r], m)
    resid = (y == r).astype(np.float64) - p[:, r].astype(np.float64)
    running, acc, nonempty = 0.0, 0.0, 0
    for j in range(m):
      mask = b == j
      running += resid[mask].sum()
      if mask.any():
        acc += abs(running)
        nonempty += 1
    if reduction == "mean":
      acc /= max(nonempty, 1)
    total += w[r] * acc / n
  return float(total)


def reliability_stats(p, y, m, binning="fixed"):
  """(counts, mean confidence, accuracy, lower, upper) per bin, 0 for empty."""
  r, c = confidence(p)
  z = (r == np.asarray(y)).astype(np.float64)
  b = bins(c, m, binning)
  counts = np.zeros(m, np.int64)
  conf = np.zeros(m)
  acc = np.zeros(m)
  lower = np.zeros(m)
  upper = np.zeros(m)
  for j in range(m):
    mask = b == j
    counts[j] = mask.sum()
    if counts[j]:
      conf[j] = np.asarray(c, np.float64)[mask].mean()
      acc[j] = z[mask].mean()
      if binning == "quantile":
        lower[j], upper[j] = c[mask].min(), c[mask].max()
    if binning == "fixed":
      lower[j], upper[j] = j / m, (j + 1) / m
  return counts, conf, acc, lower, upper


# ---------------------------------------------------------- scores


def brier(p, y) -> np.ndarray:
  p = np.asarray(p, np.float64)
  n, num_classes = p.shape
  out = np.zeros(n)
  for r in range(num_classes):
    out += (p[:, r] - (np.asarray(y) == r)) ** 2
  return out


def log_loss(p, y) -> np.ndarray:
  p = np.asarray(p, np.float64)
  return np.array([-math.log(max(p[i, y[i]], 1e-12)) for i in range(p.shape[0])])


def spherical(p, y) -> np.ndarray:
  p = np.asarray(p, np.float64)
  return np.array(
    [1.0 - p[i, y[i]] / math.sqrt(float(np.sum(p[i] ** 2))) for i in range(p.shape[0])]
  )


def classification_error(p, y) -> np.ndarray:
  r, _ = confidence(p)
  return (r != np.asarray(y)).astype(np.float64)


def confidence_loss(p, y) -> np.ndarray:
  r, c = confidence(p)
  z = (r == np.asarray(y)).astype(np.float64)
  return 1.0 - z + (np.asarray(c, np.float64) - z) ** 2


def uc_sorted(v, u) -> float:
  """Empirical utility calibration of one column of predicted utilities ``v`` against
  realised ones ``u`` (Hegazy, Jordan & Dieuleveut 2025, Lemma 3.3): ``max S - min S`` of the
  prefix sums ``S`` of ``(u - v) / n`` over ``v`` sorted, read between distinct values;
  float64, O(n log n)."""
  v = np.asarray(v, np.float64)
  r = np.asarray(u, np.float64) - v
  o = np.argsort(v, kind="stable")
  vs = v[o]
  s = np.concatenate([[0.0], np.cumsum(r[o])]) / len(v)
  cut = np.concatenate([[True], vs[1:] != vs[:-1], [True]])
  return s[cut].max() - s[cut].min()
