"""Slow float64 references for the measures of other papers, written from the papers.

Explicit loops over samples, pairs, bins and classes; no code shared with
``jaxcal``. Each function names the equation it follows.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
  "top_label",
  "smooth_ece_integral",
  "smoothed_sums",
  "smooth_ece_sum",
  "smooth_ece_fixed_point",
  "smooth_ece_classwise",
  "smooth_reliability",
  "skce",
  "mmce",
  "debiased_sq",
  "debiased_ce",
  "ks",
  "binned_norm_conf",
  "binned_norm_classwise",
]


def top_label(p, y):
  """(confidence, correctness) with argmax ties toward the lowest index."""
  p = np.asarray(p, np.float64)
  r = np.argmax(p, axis=1)
  return p[np.arange(len(r)), r], (r == np.asarray(y)).astype(np.float64)


def smooth_ece_integral(f, y, sigma, num_t=20001, images=3):
  """Błasiok & Nakkiran (2023), Def. 4.1 with the reflected Gaussian kernel.

  ``∫_0^1 |(1/n) Σ_i K̃(t, f_i)(f_i - y_i)| dt`` with ``K̃(t, f) = Σ_k
  φ(t - f - 2k) + φ(t + f - 2k)`` (reflections at 0 and 1), by the
  trapezoid rule on ``num_t`` points.
  """
  f = np.asarray(f, np.float64)
  r = f - np.asarray(y, np.float64)
  t = np.linspace(0.0, 1.0, num_t)
  acc = np.zeros_like(t)
  for fi, ri in zip(f, r):
    k = np.zeros_like(t)
    for m in range(-images, images + 1):
      for src in (fi + 2 * m, -fi + 2 * m):
        k += np.exp(-((t - src) ** 2) / (2 * sigma**2)) / (math.sqrt(2 * math.pi) * sigma)
    acc += k * ri
  g = np.abs(acc / len(f))
  return float(np.sum((g[1:] + g[:-1]) / 2) * (t[1] - t[0]))


def smoothed_sums(f, v, sigma, t):
  """``A_v(t) = Σ_i K(t, f_i) v_i`` at the points ``t``, discretised as jaxcal documents.

  ``K`` is the Gaussian density ``φ_σ`` reflected at 0 and 1 (Błasiok &
  Nakkiran (2023), §4), computed on the grid that ``jaxcal.metrics``'
  smooth_ece docstring describes (relplot 1.0.3's): ``G = max(2000,
  round(20/σ)) // 2 + 1`` points ``j/(G - 1)``; each sample split linearly
  between its two grid neighbours; the grid extended by reflection at both
  ends without repeating the end points; a direct (not FFT) convolution with
  the ``G`` taps ``φ_σ(j/(G - 1) - 1/2)`` (so the kernel stops at distance
  1/2); then linear interpolation at ``t``. In float64, one sample at a time.

  The end points are not repeated, so a sample within one grid step of 0 or 1
  keeps only part of its reflected mass: class-wise columns with many
  probabilities below 1e-3 differ from Def. 4.1's exact kernel by up to ~30 %
  (CIFAR-10 ResNet-110; a review helper's float64 quadrature), so the test
  against the integral uses P_MID (test_measures.py), which stays off the ends,
  while relplot and jaxcal agree with this to 2e-7.
  """
  f = np.asarray(f, np.float64)
  v = np.broadcast_to(np.asarray(v, np.float64), f.shape)
  t = np.asarray(t, np.float64)
  g = max(2000, round(20.0 / sigma)) // 2 + 1
  vals = np.zeros(g)
  for fi, vi in zip(f, v):
    x = fi * (g - 1)
    b = min(max(math.floor(x), 0), g - 2)
    vals[b] += (1.0 - (x - b)) * vi
    vals[b + 1] += (x - b) * vi
  # position u in [-(g - 1), 2 (g - 1)] holds vals[|u|] below 0, vals[2 (g - 1) - u] above g - 1
  ext = np.concatenate([vals[:0:-1], vals, vals[-2::-1]])
  taps = np.exp(-((np.arange(g) / (g - 1) - 0.5) ** 2) / (2 * sigma**2))
  taps /= math.sqrt(2 * math.pi) * sigma
  # grid point j: sum over taps i of ext at u = j + g//2 - i
  smoothed = np.convolve(ext, taps, "valid")[g // 2 : g // 2 + g]
  i = np.clip(np.floor(t * (g - 1)).astype(int), 0, g - 2)
  res = t * (g - 1) - i
  return smoothed[i] * (1.0 - res) + smoothed[i + 1] * res


def smooth_ece_sum(f, y, sigma):
  """smECE_σ as jaxcal's smooth_ece docstring defines it (relplot's evaluation).

  Def. 4.1's ``∫_0^1 |(1/n) Σ_i K(t, f_i) (f_i - y_i)| dt`` divided by the
  kernel density's integral (1), both as sums over ``ev = max(round(10/σ),
  200)`` points ``t_a = a/(ev - 1)``: ``Σ_a |A_r(t_a)| / Σ_a (A_1(t_a) +
  1e-4)``, with ``A`` of :func:`smoothed_sums` and relplot's density floor 1e-4.
  """
  f = np.asarray(f, np.float64)
  r = f - np.asarray(y, np.float64)
  ev = max(round(10.0 / sigma), 200)
  t = np.arange(ev) / (ev - 1)
  num = np.sum(np.abs(smoothed_sums(f, r, sigma, t)))
  return float(num / np.sum(smoothed_sums(f, 1.0, sigma, t) + 1e-4))


def smooth_ece_fixed_point(f, y, steps=10, eps=1e-3):
  """§5's automatic bandwidth, the fixed point ``σ* = smECE_σ*``, by bisection on ``[0, 1]``.

  As jaxcal documents it (relplot's ``search_param``): ``steps`` halvings
  of ``[lo, hi] = [0, 1]``; a midpoint ``σ`` with ``σ < eps`` or
  ``σ < smECE_σ`` lies below the fixed point (``lo = σ``), else ``hi = σ``;
  the result is ``hi``, a multiple of ``2**-steps``.
  """
  lo, hi = 0.0, 1.0
  for _ in range(steps):
    mid = (lo + hi) / 2
    if mid < eps or mid < smooth_ece_sum(f, y, mid):
      lo = mid
    else:
      hi = mid
  return hi


def smooth_ece_classwise(p, y, weights=None):
  """Class-wise smooth ECE: ``(Σ_c w_c smECE_c, [smECE_c], [σ*_c])``.

  Class ``c``'s binary problem is the column ``p[:, c]`` against
  ``1[y = c]``, each at its own fixed-point bandwidth
  (:func:`smooth_ece_fixed_point`); ``w`` defaults to ``1/C``.
  """
  p = np.asarray(p, np.float64)
  y = np.asarray(y)
  c = p.shape[1]
  w = np.full(c, 1.0 / c) if weights is None else np.asarray(weights, np.float64)
  sig = [smooth_ece_fixed_point(p[:, k], y == k) for k in range(c)]
  val = [smooth_ece_sum(p[:, k], y == k, s) for k, s in zip(range(c), sig)]
  return float(np.dot(w, val)), np.array(val), np.array(sig)


def smooth_reliability(f, y, sigma, num_points=200):
  """The smoothed reliability curve of Błasiok & Nakkiran (2023), §6, on ``num_points`` points.

  ``accuracy(t) = Σ_i K(t, f_i) y_i / (Σ_i K(t, f_i) + 1e-4)`` (relplot's
  density floor) and ``density(t) = (1/n) Σ_i K(t, f_i)``, as
  ``jaxcal.metrics.smooth_reliability`` documents them, at ``t_a = a /
  (num_points - 1)``, with ``K`` of :func:`smoothed_sums`: ``(t, accuracy, density)``.
  """
  f = np.asarray(f, np.float64)
  t = np.arange(num_points) / (num_points - 1)
  a_y = smoothed_sums(f, y, sigma, t)
  a_1 = smoothed_sums(f, 1.0, sigma, t)
  return t, a_y / (a_1 + 1e-4), a_1 / len(f)


def skce(p, y, bandwidth, estimator="unbiased", block_size=2, kernel="laplacian"):
  """Widmann, Lindsten & Zachariah (2019), Lemma 2: SKCE_b, SKCE_uq, block estimators.

  ``h_ij = κ(p_i, p_j) (e_{y_i} - p_i)^T (e_{y_j} - p_j)``, ``κ`` Laplacian
  ``exp(-||p_i - p_j|| / ν)`` or Gaussian ``exp(-||p_i - p_j||^2 / (2 ν^2))``.
  """
  p = np.asarray(p, np.float64)
  n, c = p.shape
  e = np.eye(c)[np.asarray(y)] - p

  def h(i, j):
    d = np.linalg.norm(p[i] - p[j])
    k = (
      math.exp(-d / bandwidth) if kernel == "laplacian" else math.exp(-(d**2) / (2 * bandwidth**2))
    )
    return k * float(e[i] @ e[j])

  if estimator == "biased":
    return sum(h(i, j) for i in range(n) for j in range(n)) / n**2
  if estimator == "unbiased":
    return sum(h(i, j) for i in range(n) for j in range(i + 1, n)) / (n * (n - 1) / 2)
  blocks = []
  for b in range(n // block_size):
    idx = range(b * block_size, (b + 1) * block_size)
    pairs = [(i, j) for i in idx for j in idx if i < j]
    blocks.append(sum(h(i, j) for i, j in pairs) / len(pairs))
  return float(np.mean(blocks))


def mmce(p, y, width=0.4):
  """Kumar, Sarawagi & Jain (2018), Eq. 2 (unweighted, V-statistic): a double loop."""
  c, z = top_label(p, y)
  n = len(c)
  tot = 0.0
  for i in range(n):
    for j in range(n):
      tot += (z[i] - c[i]) * (z[j] - c[j]) * math.exp(-abs(c[i] - c[j]) / width)
  return math.sqrt(max(tot / n**2, 0.0))


def _midpoint_bins(s, m):
  """Bins of Kumar, Liang & Ma (2019), App. D: equal-mass parts, cuts at midpoints."""
  s = np.asarray(s)
  n = len(s)
  m = min(m, n)
  srt = np.sort(s)
  sizes = [n // m + (1 if k < n % m else 0) for k in range(m)]
  cuts, pos = [], 0
  for k in range(m - 1):
    pos += sizes[k]
    cuts.append((srt[pos - 1] + srt[pos]) / s.dtype.type(2))  # in the scores' dtype
  cuts.append(np.inf)
  out = np.empty(n, np.int64)
  for i, v in enumerate(s):
    out[i] = next(k for k, t in enumerate(cuts) if v <= t)
  return out


def debiased_sq(s, b, m):
  """Kumar, Liang & Ma (2019), Def. 5.2: plug-in squared error minus the bin variances."""
  bins = _midpoint_bins(s, m)
  s64, b64 = np.asarray(s, np.float64), np.asarray(b, np.float64)
  n = len(s)
  tot = 0.0
  for k in np.unique(bins):
    sel = bins == k
    nb = int(sel.sum())
    if nb < 2:
      continue
    ybar = b64[sel].mean()
    tot += nb / n * ((s64[sel].mean() - ybar) ** 2 - ybar * (1 - ybar) / (nb - 1))
  return tot


def debiased_ce(p, y, m=15, mode="top_label"):
  """``sqrt(max(SQ, 0))`` (top label) or ``sqrt(mean_c max(SQ_c, 0))`` (marginal)."""
  p = np.asarray(p)
  y = np.asarray(y)
  if mode == "top_label":
    r = np.argmax(p, axis=1)
    c = p[np.arange(len(y)), r]
    return math.sqrt(max(debiased_sq(c, (r == y).astype(p.dtype), m), 0.0))
  sq = [max(debiased_sq(p[:, k], (y == k).astype(p.dtype), m), 0.0) for k in range(p.shape[1])]
  return math.sqrt(float(np.mean(sq)))


def ks(s, b):
  """Gupta et al. (2021), Eq. 6: ``max_t |(1/n) Σ_{s_i <= t} (s_i - b_i)|`` over t = every score."""
  s = np.asarray(s)
  r = np.asarray(s, np.float64) - np.asarray(b, np.float64)
  best = 0.0
  for t in np.unique(s):
    best = max(best, abs(float(r[s <= t].sum())) / len(s))
  return best


def _norm(sums, counts, n, norm):
  if norm == "l1":
    return sum(abs(sb) for sb in sums) / n
  if norm == "l2":
    return math.sqrt(sum(sb**2 / nb for sb, nb in zip(sums, counts) if nb > 0) / n)
  return max([abs(sb) / nb for sb, nb in zip(sums, counts) if nb > 0] + [0.0])


def binned_norm_conf(p, y, bins, m, norm):
  """torchmetrics' top-label l1 / l2 / max on given 0-based bins of the confidence."""
  c, z = top_label(p, y)
  sums = [float((c - z)[bins == k].sum()) for k in range(m)]
  counts = [int((bins == k).sum()) for k in range(m)]
  return _norm(sums, counts, len(c), norm)


def binned_norm_classwise(p, y, bins_per_class, m, norm, weights=None):
  """Weighted mean over classes of each column's binned norm."""
  p = np.asarray(p, np.float64)
  c = p.shape[1]
  w = np.full(c, 1.0 / c) if weights is None else np.asarray(weights, np.float64)
  out = 0.0
  for k in range(c):
    r = p[:, k] - (np.asarray(y) == k)
    bins = bins_per_class[k]
    sums = [float(r[bins == j].sum()) for j in range(m)]
    counts = [int((bins == j).sum()) for j in range(m)]
    out += w[k] * _norm(sums, counts, p.shape[0], norm)
  return out
