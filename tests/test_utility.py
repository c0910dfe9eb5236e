"""Utility calibration (SPEC §6): the UC estimator, the families, the samplers."""

from __future__ import annotations

import functools
import json
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))  # --import-mode=importlib
from _cpu_devices import ROOT, cpu_devices_env
from _reference import uc_sorted
from conftest import assert_same_under_x64

from jaxcal import utility as U
from jaxcal._src.sorting import sort_descending, stable_argsort
from jaxcal._src.utility import families as F
from jaxcal._src.utility import sweep as SW
from jaxcal._src.utility.uc import uc_from_scores

# ---------------------------------------------------------------- references


def uc_brute(v, u):
  """float64 search over every interval [d_i, d_j] of distinct values (and the empty one)."""
  v = np.asarray(v, np.float64)
  r = np.asarray(u, np.float64) - v
  n = len(v)
  d = np.unique(v)
  best = 0.0
  for i in range(len(d)):
    for j in range(i, len(d)):
      s = r[(v >= d[i]) & (v <= d[j])].sum() / n
      best = max(best, abs(s))
  return best


def np_ranks(p):
  """0-based ranks, ties toward the lower index (loops)."""
  n, c = p.shape
  out = np.zeros((n, c), np.int64)
  for i in range(n):
    for j in range(c):
      out[i, j] = sum(p[i, k] > p[i, j] or (p[i, k] == p[i, j] and k < j) for k in range(c))
  return out


def np_values(kind, params, p):
  """Hand-written ū(p) per kind (float64, loops over rows)."""
  p = np.asarray(p, np.float64)
  prm = np.asarray(params, np.float64)
  n, c = p.shape
  out = np.zeros((n, c))
  rk = np_ranks(p)
  for i in range(n):
    if kind == "top_class":
      out[i, int(np.argmax(p[i]))] = 1.0
    elif kind == "linear":
      out[i] = prm
    elif kind == "rank":
      out[i] = [prm[rk[i, j]] for j in range(c)]
    elif kind == "decision":
      a = int(np.argmin(p[i] @ prm))
      out[i] = -prm[:, a]
    elif kind == "similarity":
      out[i] = [sum(p[i, k] * prm[k, j] for k in range(c)) for j in range(c)]
  return out


# ---------------------------------------------------------------- fixtures


def _data(n=60, c=5, seed=0, ties=True):
  rng = np.random.default_rng(seed)
  logits = rng.normal(size=(n, c)) * 2
  if ties:  # repeated rows and equal entries: ties in v and in ranks
    logits = np.round(logits)
    logits[n // 2 :] = logits[: n - n // 2]
  p = np.exp(logits - logits.max(1, keepdims=True))
  p = (p / p.sum(1, keepdims=True)).astype(np.float32)
  y = rng.integers(0, c, n)
  return p, y


NAMES = [
  "top_class",
  "classwise",
  "linear",
  "rank",
  "top_k",
  "dcg",
  "decision",
  "gain",
  "similarity",
]


@functools.cache
def _utilities(c=5, seed=0):
  key = jax.random.PRNGKey(seed)
  k1, k2, k3 = jax.random.split(key, 3)
  # not symmetric (the paper's cosine similarities are): it pins u(p, e_j) = Σ_i p_i S_ij
  S = np.array(jax.random.uniform(k3, (c, c), minval=-1, maxval=1))
  np.fill_diagonal(S, 1.0)
  return {
    "top_class": U.top_class(),
    "classwise": U.classwise(2, c),
    "linear": U.sample_linear(k1, 23, c)[0],
    "rank": U.sample_rank(k2, 23, c)[0],
    "top_k": U.top_k(2, c),
    "dcg": U.dcg(1.25, c),
    "decision": U.sample_decision(k3, 23, c, 3)[0],
    "gain": U.sample_misaligned_gain(k1, 1, c, num_groups=2)[0],
    "similarity": U.similarity(S),
  }


# ---------------------------------------------------------------- sorting helpers


@pytest.mark.parametrize("n", [1, 2, 3, 127, 128, 129, 5000])
def test_stable_argsort_matches_numpy(n):
  rng = np.random.default_rng(n)
  grid = np.array([-1, -0.5, -0.0, 0.0, 1e-30, -1e-30, 0.25, 1], np.float32)
  for x in (rng.choice(grid, n), rng.normal(size=n).astype(np.float32)):
    np.testing.assert_array_equal(
      np.asarray(stable_argsort(jnp.asarray(x))), np.argsort(x, kind="stable")
    )
  x = rng.normal(size=(4, 9)).astype(np.float32)
  x[:, ::3] = 0.0
  np.testing.assert_array_equal(
    np.asarray(sort_descending(jnp.asarray(x), axis=1)), -np.sort(-x, axis=1)
  )


# ---------------------------------------------------------------- the UC core


@pytest.mark.parametrize("seed", range(6))
def test_uc_core_equals_bruteforce_with_ties(seed):
  rng = np.random.default_rng(seed)
  n = [1, 2, 7, 20, 33, 40][seed]
  v = rng.choice(np.linspace(-1, 1, 9), n).astype(np.float32)  # many ties
  u = rng.choice([-1.0, 0.0, 0.5, 1.0], n).astype(np.float32)
  res = jax.jit(uc_from_scores)(jnp.asarray(v), jnp.asarray(u))
  assert float(res.value) == pytest.approx(uc_brute(v, u), abs=1e-6)
  inside = (v >= float(res.lo)) & (v <= float(res.hi))
  signed = (u[inside].astype(np.float64) - v[inside]).sum() / n
  if float(res.value) > 0:
    assert int(res.sign) in (-1, 1)
    assert signed == pytest.approx(int(res.sign) * float(res.value), abs=1e-6)
    assert float(res.lo) in v and float(res.hi) in v and float(res.lo) <= float(res.hi)
  else:
    assert int(res.sign) == 0


def test_uc_core_vmap_over_utilities_adds_no_branch():
  """Under vmap over utilities the UC core stays one sort of the stacked rows:
  no data-dependent choice there becomes a select that runs every branch for
  every utility (the backends' choices, of the payload sort and of the prefix
  sum's form, are the only conds; the CPU's payload sort packs the payload
  into its words and holds no argsort)."""
  v = jnp.zeros((4, 70_000), jnp.float32)
  one = str(jax.make_jaxpr(uc_from_scores)(v[0], v[0], where=v[0] > 0))
  batched = str(jax.make_jaxpr(jax.vmap(uc_from_scores))(v, v, where=v > 0))
  assert one.count("cond[") == batched.count("cond[") == 2
  assert one.count("platform_index") == batched.count("platform_index") == 2
  rng = np.random.default_rng(12)
  vs = rng.uniform(-1, 1, (3, 70_000)).astype(np.float32)
  vs[1] = np.round(vs[1], 2)  # many ties
  us = np.where(rng.random(vs.shape) < (vs + 1) / 2, 1.0, -1.0).astype(np.float32)
  got = jax.jit(jax.vmap(uc_from_scores))(jnp.asarray(vs), jnp.asarray(us))
  for i in range(3):
    assert float(got.value[i]) == pytest.approx(uc_sorted(vs[i], us[i]), abs=2e-5)


def test_uc_core_where_padded_equals_unpadded():
  """Masked-out samples are absent: padding (even NaN) changes nothing, n = count."""
  rng = np.random.default_rng(11)
  n, pad = 37, 27
  v = rng.choice(np.linspace(-1, 1, 9), n).astype(np.float32)
  u = rng.choice([-1.0, 0.0, 0.5, 1.0], n).astype(np.float32)
  want = uc_brute(v, u)
  junk_v = rng.choice([np.nan, 5.0, -5.0, 0.0], pad).astype(np.float32)
  junk_u = rng.choice([np.nan, 9.0, -9.0], pad).astype(np.float32)
  perm = rng.permutation(n + pad)  # padding interleaved with the samples
  vp = np.concatenate([v, junk_v])[perm]
  up = np.concatenate([u, junk_u])[perm]
  wp = np.concatenate([np.ones(n, bool), np.zeros(pad, bool)])[perm]
  core = jax.jit(uc_from_scores)
  plain = core(jnp.asarray(v), jnp.asarray(u))
  padded = core(jnp.asarray(vp), jnp.asarray(up), where=jnp.asarray(wp))
  assert float(padded.value) == pytest.approx(want, abs=1e-6)
  for a, b in zip(plain, padded):
    assert float(a) == pytest.approx(float(b), abs=1e-6)
  # all-True mask == no mask; all-False mask == zero error
  full = core(jnp.asarray(v), jnp.asarray(u), where=jnp.ones(n, bool))
  assert float(full.value) == pytest.approx(float(plain.value), abs=1e-7)
  empty = core(jnp.asarray(vp), jnp.asarray(up), where=jnp.zeros(n + pad, bool))
  assert float(empty.value) == 0.0 and int(empty.sign) == 0
  # vmap over masks == loop (models of different n padded to one size)
  masks = np.stack([wp, np.roll(wp, 5), np.ones(n + pad, bool)])
  clean_v, clean_u = np.nan_to_num(vp, nan=0.3), np.nan_to_num(up, nan=0.5)
  vu = np.where(masks, clean_v, np.nan), np.where(masks, clean_u, np.nan)
  batched = jax.vmap(core)(jnp.asarray(vu[0]), jnp.asarray(vu[1]), where=jnp.asarray(masks))
  for i in range(3):
    keep = masks[i]
    assert float(batched.value[i]) == pytest.approx(
      uc_brute(vu[0][i][keep], vu[1][i][keep]), abs=1e-6
    )


def test_uc_core_keeps_float64_under_x64():
  """float64 utilities are sorted and summed in float64: two predicted utilities
  1e-12 apart (one float32 value) stay two tie groups, so the interval {0.5}
  alone gives UC = 0.5 / n (the float32 tie would give ~0)."""
  from jaxcal._src.utility.sweep import masked_uc

  v = np.array([0.5, 0.5 + 1e-12, 0.25, 0.75, 0.3])
  u = np.array([1.0, 0.0, 0.25, 0.75, 0.0])
  keep = np.array([True, True, True, True, False])
  want = uc_brute(v[keep], u[keep])
  assert want == pytest.approx(0.5 / 4, abs=1e-9)
  with jax.enable_x64(True):
    f = jax.jit(lambda v, u, w: (uc_from_scores(v, u, where=w), masked_uc(v, u, w)))
    got = f(jnp.asarray(v), jnp.asarray(u), jnp.asarray(keep))
  for res in got:
    assert res.value.dtype == jnp.float64
    assert float(res.value) == pytest.approx(want, abs=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_uc_each_family_equals_bruteforce(name):
  p, y = _data()
  u = _utilities()[name]
  ubar = np_values(u.kind, u.params, p)
  v = (p.astype(np.float64) * ubar).sum(1)
  real = ubar[np.arange(len(y)), y]
  res = U.uc(p, y, u)
  assert float(res.value) == pytest.approx(uc_brute(v, real), abs=2e-6)
  inside = (v >= float(res.lo) - 1e-6) & (v <= float(res.hi) + 1e-6)
  signed = (real - v)[inside].sum() / len(y)
  assert signed == pytest.approx(int(res.sign) * float(res.value), abs=2e-6)


@pytest.mark.parametrize("name", NAMES)
def test_family_values_match_numpy(name):
  # _data() adds rows with equal entries, so that decisions tie (the gain utility's
  # expected gains): argmin picks the lowest action in the values, as in v and u
  p, y = (np.concatenate(a) for a in zip(_data(n=12, seed=3), _data()))
  u = _utilities()[name]
  ubar = np_values(u.kind, u.params, p)
  np.testing.assert_allclose(np.asarray(u.values(p)), ubar, atol=1e-6)
  v, real = F.predicted_realized(
    u.kind, F.prepare(u.kind, jnp.asarray(p), jnp.asarray(y)), u.params
  )
  np.testing.assert_allclose(np.asarray(v), (p * ubar).sum(1), atol=1e-6)
  np.testing.assert_allclose(np.asarray(real), ubar[np.arange(len(y)), y], atol=1e-6)


def test_constructor_parameters():
  np.testing.assert_allclose(U.top_k(3, 5).params, [1, 1, 1, 0, 0])
  np.testing.assert_allclose(U.dcg(2.0, 4).params, np.log2(1 + np.arange(1, 5)) ** -2.0, rtol=1e-6)
  assert U.dcg(jnp.array([0.5, 0.75, 1, 1.25, 1.5, 2]), 7).params.shape == (6, 7)
  np.testing.assert_allclose(U.gain_matrix(np.eye(3)).params, -np.eye(3))
  # top-class == rank with θ = e_1, class-wise == linear e_c
  p, y = _data(seed=5)
  np.testing.assert_allclose(
    U.uc(p, y, U.top_class()).value, U.uc(p, y, U.rank(np.eye(5)[0])).value, atol=1e-7
  )
  np.testing.assert_allclose(
    U.uc(p, y, U.classwise(1, 5)).value, U.uc(p, y, U.linear(np.eye(5)[1])).value, atol=1e-7
  )


def test_uc_float32_close_to_float64_at_one_million():
  n, c = 10**6, 4
  rng = np.random.default_rng(0)
  p = rng.dirichlet(np.full(c, 0.7), size=n).astype(np.float32)
  y = (rng.random(n)[:, None] > np.cumsum(p, 1)).sum(1).clip(0, c - 1)  # calibrated labels
  p = p.copy()
  p[:, 0] *= np.float32(0.97)
  p[:, 1] = 1 - p[:, 0] - p[:, 2] - p[:, 3]
  p = np.clip(p, 0, 1)
  a = np.array([1.0, -0.3, 0.6, -1.0], np.float32)
  got = float(U.uc(p, y, U.linear(a)).value)
  v = p.astype(np.float64) @ a.astype(np.float64)
  want = uc_sorted(v, a.astype(np.float64)[y])
  assert got == pytest.approx(want, abs=1e-5)


def _uc_interval64(v, u):
  """float64 UC and the ends ``[lo, hi]`` of its worst interval (sort, prefix sums, cuts)."""
  n = len(v)
  o = np.argsort(v, kind="stable")
  vs = v[o]
  s = np.concatenate([[0.0], np.cumsum((u - v)[o])]) / n
  k = np.flatnonzero(np.concatenate([[True], vs[1:] != vs[:-1], [True]]))
  kmax, kmin = k[np.argmax(s[k])], k[np.argmin(s[k])]
  a, b = min(kmax, kmin), max(kmax, kmin)
  return s[kmax] - s[kmin], vs[min(a, n - 1)], vs[max(min(b - 1, n - 1), a)]


def test_uc_moves_only_by_the_samples_that_cross_an_end_of_the_worst_interval():
  """UC is not continuous in v, and the float32 core moves only as the definition allows.

  For v' = v + dv the same interval holds the same samples except those
  within |dv_i| of one of its ends, so |UC(v') - UC(v)| <= max |dv| +
  (1/n) sum over samples within |dv_i| of an end of either worst interval
  of (|r_i| + |dv_i|) (Hegazy, Jordan & Dieuleveut 2025, Eq. 3.2). float32
  predicted utilities 1e-5 off float64 must stay within that bound of the
  float64 value on every utility, and some utilities must actually jump by
  a sample's weight (the discontinuity is real, so a float32 UC is compared
  with float64 at a tolerance of 2 / n, not at float32 resolution).
  """
  rng = np.random.default_rng(7)
  m, n = 200, 3000
  v64 = rng.uniform(-1, 1, (m, n))
  u64 = np.where(rng.random((m, n)) < (v64 + 1) / 2, 1.0, -1.0)  # calibrated outcomes in {-1, 1}
  v32 = (v64 + 1e-5 * rng.standard_normal((m, n))).astype(np.float32)
  res = jax.jit(jax.vmap(uc_from_scores))(jnp.asarray(v32), jnp.asarray(u64, jnp.float32))
  got, lo, hi = (np.asarray(x, np.float64) for x in (res.value, res.lo, res.hi))
  jumps = 0
  for j in range(m):
    want, lo64, hi64 = _uc_interval64(v64[j], u64[j])
    dv = np.abs(v32[j].astype(np.float64) - v64[j])
    near = np.zeros(n, bool)
    for end in (lo[j], hi[j], lo64, hi64):
      near |= np.abs(v64[j] - end) <= 2 * dv + 1e-9
    r = np.abs(u64[j] - v64[j])
    bound = dv.max() + (r[near] + dv[near]).sum() / n
    assert abs(got[j] - want) <= bound + 1e-6, (j, got[j], want, bound)
    jumps += abs(got[j] - want) > 0.1 / n
  assert jumps >= 3, jumps  # samples did cross ends: the bound was exercised, not idle


def test_jit_and_vmap():
  p, y = _data(seed=1)
  batch = U.sample_rank(jax.random.PRNGKey(4), 23, 5)[:5]
  eager = U.uc(p, y, batch[0])
  jitted = jax.jit(U.uc)(p, y, batch[0])
  for a, b in zip(eager, jitted):
    np.testing.assert_allclose(a, b, atol=1e-7)
  vm = jax.vmap(U.uc, in_axes=(None, None, 0))(p, y, batch)
  loop = [U.uc(p, y, batch[i]) for i in range(5)]
  for field in range(4):
    np.testing.assert_allclose(vm[field], np.array([r[field] for r in loop]), atol=1e-6)
  # vmap over data sets
  p2, y2 = _data(seed=2)
  vd = jax.vmap(U.uc, in_axes=(0, 0, None))(np.stack([p, p2]), np.stack([y, y2]), U.top_class())
  np.testing.assert_allclose(
    vd.value, [U.uc(p, y, U.top_class()).value, U.uc(p2, y2, U.top_class()).value], atol=1e-7
  )


def test_traced_class_index_and_k_out_of_range_give_nan_utilities():
  """Under jit an out-of-range c / K is NaN (eager raises), never a plausible utility."""
  from jaxcal import checked

  k = jnp.array([0, 2, 5, 6])
  got = np.asarray(jax.jit(lambda k: U.top_k(k, 5).params)(k))
  assert np.isnan(got[[0, 3]]).all()
  np.testing.assert_array_equal(got[1:3], U.top_k(k[1:3], 5).params)
  got = np.asarray(jax.jit(lambda c: U.classwise(c, 3).params)(jnp.array([-1, 2, 3])))
  assert np.isnan(got[[0, 2]]).all()
  np.testing.assert_array_equal(got[1], [0.0, 0.0, 1.0])
  p, y = _data(c=5)
  assert np.isnan(float(jax.jit(lambda k: U.uc(p, y, U.top_k(k, 5)).value)(7)))
  with pytest.raises(ValueError, match=r"K must lie in \[1, 5\]"):
    checked(jax.jit(lambda k: U.top_k(k, 5).params))(jnp.array(6))
  # a device K closed over by a jit is concrete: checked now (its range was read from a
  # tracer: TracerBoolConversionError), the eager utility
  two, nine = jnp.array(2), jnp.array(9)
  np.testing.assert_array_equal(jax.jit(lambda: U.top_k(two, 5).params)(), U.top_k(2, 5).params)
  with pytest.raises(ValueError, match=r"K must lie in \[1, 5\], got values in \[9, 9\]"):
    jax.jit(lambda: U.top_k(nine, 5).params)()


@pytest.mark.parametrize("n", [60, 4400])
def test_traced_bad_input_gives_nan_for_the_bad_utility_or_data_set_only(n):
  """jit / vmap on bad values: NaN where a loop gives NaN, and no direction (sign 0).

  Also past 4,096 samples, where XLA:CPU's max / min skip a NaN: a bad
  utility's error read -inf there (the sum of its residuals decides).
  """
  from jaxcal import checked

  p, y = _data(n=n, seed=3, c=5)
  good = np.asarray(U.sample_linear(jax.random.key(1), 3, 5).params)
  bad = good.copy()
  bad[1, 2] = 3.0  # outside [-1, 1]
  sweep = np.asarray(jax.jit(lambda a: U.uc_sweep(p, y, U.linear(a)))(bad))
  loop = [float(jax.jit(lambda a: U.uc(p, y, U.linear(a)).value)(b)) for b in bad]
  assert np.isnan(sweep[1]) and np.isnan(loop[1])  # the whole sweep was NaN
  np.testing.assert_allclose(sweep[[0, 2]], np.asarray(loop)[[0, 2]], rtol=1e-6)
  with pytest.raises(ValueError, match=r"must be finite and in \[-1, 1\]"):
    checked(jax.jit(lambda a: U.uc_sweep(p, y, U.Utility(a, "linear"))))(bad)
  # bad labels: a NaN error had sign +-1, which patching reads as the witness direction
  for label in (5, -1):
    yb = y.copy()
    yb[0] = label
    r = jax.jit(lambda yy: U.uc(p, yy, U.top_class()))(yb)
    assert np.isnan(float(r.value)) and int(r.sign) == 0
  r = jax.jit(lambda a: U.uc(p, y, U.linear(a)))(bad[1])
  assert np.isnan(float(r.value)) and int(r.sign) == 0


def test_subnormal_probabilities_rank_as_the_sorts_rank_them():
  """The label's rank compares integer keys: XLA:CPU's float compares flush subnormals.

  A numpy softmax keeps entries like 1e-40 that jaxcal's own flushes to 0; the
  label's rank then counted 1e-40 as tied with 0 while the sorted predicted
  utility kept it apart, and a rank utility's UC read 1.0 for 0.25.
  """
  p = np.array(
    [[1.0, 0.0, 1e-40], [1.0, 0.0, 1e-40], [1.0, 1e-40, 0.0], [1.0, 1e-40, 0.0]], np.float32
  )
  y = np.array([2, 2, 1, 1])  # the label holds the second largest entry in every row
  theta = np.array([1.0, 0.5, -1.0], np.float32)
  u = U.Utility(theta, "rank")
  ubar = np.asarray(u.values(p))  # (n, C): the label's entry is the realised utility
  np.testing.assert_array_equal(ubar[np.arange(4), y], [0.5] * 4)
  # realised = predicted utility of the sorted row, 1 + 0.5 * 1e-40 - 1 * 0 ~ 1: residual -0.5
  for got in (U.uc(p, y, u).value, U.uc_sweep(p, y, U.Utility(theta[None], "rank"))[0]):
    np.testing.assert_allclose(float(got), 0.5, atol=1e-6)


def test_uc_from_scores_of_no_sample_is_all_zeros():
  from jaxcal._src.utility.uc import uc_from_scores

  r = uc_from_scores(jnp.array([0.2, 0.8]), jnp.array([1.0, 0.0]), where=jnp.zeros(2, bool))
  assert [float(r.value), float(r.lo), float(r.hi), int(r.sign)] == [0.0, 0.0, 0.0, 0]


def test_integer_parameters_are_taken_as_floats_from_any_array():
  p, y = _data(seed=3, c=3)
  want = float(U.uc(p, y, U.Utility([1.0, 0.0, 0.0], "linear")).value)
  for prm in ([1, 0, 0], np.array([1, 0, 0]), jnp.array([1, 0, 0]), np.array([True, False, False])):
    assert float(U.uc(p, y, U.Utility(prm, "linear")).value) == want, type(prm)


def test_uc_bounds_binned_tce():
  """m · UC(U_TCE) >= TCE_bin with any m bins (paper App. B.2)."""
  from jaxcal.metrics import conf_ece

  p, y = _data(n=300, c=4, seed=7, ties=False)
  ucv = float(U.uc_class(p, y, "tce"))
  m = np.array([1, 5, 15])
  assert np.all(np.asarray(conf_ece(p, y, m, binning="quantile")) <= m * ucv + 1e-6)


# ---------------------------------------------------------------- samplers


def test_sample_linear_law():
  c, m = 4, 40_000
  a = np.asarray(U.sample_linear(jax.random.PRNGKey(0), m, c).params)
  assert a.shape == (m, c) and np.abs(a).max() <= 1
  face = np.argmax(np.abs(a), axis=1)
  sign = a[np.arange(m), face] > 0
  assert np.all(np.abs(a[np.arange(m), face]) == 1)
  counts = np.bincount(face * 2 + sign, minlength=2 * c)
  expected = m / (2 * c)
  chi2 = ((counts - expected) ** 2 / expected).sum()
  assert chi2 < 30, counts  # 7 dof: P(chi2 > 30) ~ 1e-4
  # marginal on the face: the other coordinates are iid U(-1, 1)
  rest = a[np.arange(c)[None, :] != face[:, None]]
  from scipy import stats

  assert stats.kstest(rest, "uniform", args=(-1, 2)).pvalue > 1e-3
  assert abs(rest.mean()) < 0.01 and abs(rest.var() - 1 / 3) < 0.01


def test_sample_rank_and_decision():
  th = np.asarray(U.sample_rank(jax.random.PRNGKey(1), 3000, 6).params)
  assert np.all(np.diff(th, axis=1) <= 0) and np.all(np.abs(th).max(1) == 1)
  l = np.asarray(U.sample_decision(jax.random.PRNGKey(2), 3000, 3, 2).params)
  assert l.shape == (3000, 3, 2) and np.all(np.abs(l.reshape(3000, -1)).max(1) == 1)
  faces = np.argmax(np.abs(l.reshape(3000, -1)), 1)
  assert np.bincount(faces, minlength=6).min() > 3000 / 6 * 0.8
  from scipy import stats

  R = -np.asarray(U.sample_aligned_gain(jax.random.PRNGKey(3), 200, 4).params)
  off = R[:, ~np.eye(4, dtype=bool)]
  assert np.all(np.diagonal(R, axis1=1, axis2=2) == 1) and off.min() >= 0 and off.max() <= 0.1
  assert stats.kstest(off.ravel(), "uniform", args=(0, 0.1)).pvalue > 1e-3  # iid U(0, 0.1)
  partitions = set()
  for seed in (4, 5, 6):
    R = -np.asarray(U.sample_misaligned_gain(jax.random.PRNGKey(seed), 600, 6, num_groups=3).params)
    pairs = []
    for r in R:
      ingroup = (r > 0) & ~np.eye(6, dtype=bool)
      assert set(np.unique(r[ingroup])) <= {np.float32(0.2)} and ingroup.sum() == 2  # one pair
      pairs.append(np.argwhere(np.triu(ingroup))[0])
    groups, counts = np.unique(pairs, axis=0, return_counts=True)
    # one partition per key (3 disjoint pairs), each specialist drawn with probability 1/3
    assert len(groups) == 3 and sorted(groups.ravel()) == list(range(6))
    assert ((counts - 200) ** 2 / 200).sum() < 13.8, counts  # 2 dof: P(chi2 > 13.8) ~ 1e-3
    partitions.add(tuple(map(tuple, groups)))
  assert len(partitions) > 1  # the partition is drawn from the key (a random permutation)
  # the default: min(10, C) groups (10 refused every C < 10); 10 of 10 classes on CIFAR-100
  key = jax.random.PRNGKey(7)
  for c, groups in ((3, 3), (10, 10), (100, 10)):
    R = -np.asarray(U.sample_misaligned_gain(key, 50, c).params)
    np.testing.assert_array_equal(
      R, -np.asarray(U.sample_misaligned_gain(key, 50, c, groups).params)
    )


# ---------------------------------------------------------------- sweeps and families


class _Accelerator:
  """A stand-in device: a platform name and the memory it reports."""

  def __init__(self, stats, platform="gpu"):
    self.platform, self._stats = platform, stats

  def memory_stats(self):
    if isinstance(self._stats, Exception):
      raise self._stats
    return self._stats


def test_chunk_bytes_per_device():
  cpu = jax.devices("cpu")[0]
  assert SW.chunk_bytes(cpu) == SW.CHUNK_BYTES == 2**28
  assert SW.chunk_bytes() == SW.chunk_bytes(jax.devices()[0])
  # an accelerator: an eighth of its memory, between 256 MiB and 4 GiB
  assert SW.chunk_bytes(_Accelerator({"bytes_limit": 80 * 2**30})) == 2**32
  assert SW.chunk_bytes(_Accelerator({"bytes_limit": 16 * 2**30})) == 2**31
  assert SW.chunk_bytes(_Accelerator({"bytes_limit": 2**30})) == 2**28
  # no memory reported, or no statistics at all: the CPU budget
  for stats in ({}, None, {"bytes_limit": 0}, RuntimeError("unimplemented")):
    assert SW.chunk_bytes(_Accelerator(stats)) == 2**28, stats
  # the chunk follows the budget: 12 words of 4 bytes per utility and sample
  gpu = _Accelerator({"bytes_limit": 80 * 2**30})
  assert SW.default_chunk_size("linear", 15_000, 1_000, device=cpu) == 2**28 // (48 * 15_000)
  assert SW.default_chunk_size("linear", 15_000, 1_000, device=gpu) == 2**32 // (48 * 15_000)
  assert SW.default_chunk_size("decision", 100, 10, (10, 3), device=gpu) == 2**32 // (60 * 100)


def test_uc_sweep_chunk_budget_of_its_first_device(monkeypatch):
  asked = []
  real = SW.chunk_bytes
  monkeypatch.setattr(SW, "chunk_bytes", lambda device=None: asked.append(device) or real(device))
  p, y = _data(40, 4, seed=3)
  dev = jax.devices()[-1]
  U.uc_sweep(p, y, U.sample_linear(jax.random.PRNGKey(0), 5, 4), devices=[dev])
  assert asked == [dev]


def test_uc_sweep_chunked_equals_unchunked_and_uc():
  p, y = _data(n=80, c=5, seed=8)
  lin = U.sample_linear(jax.random.PRNGKey(5), 23, 5)
  full = U.uc_sweep(p, y, lin)
  for chunk in (1, 7):  # 7: 4 chunks of 6, the last shifted back to end at 23 (one recomputed)
    np.testing.assert_allclose(U.uc_sweep(p, y, lin, chunk_size=chunk), full, atol=1e-7)
  for batch in (
    lin,
    U.sample_rank(jax.random.PRNGKey(6), 23, 5),
    U.sample_decision(jax.random.PRNGKey(7), 23, 5, 3),
  ):
    loop = [float(U.uc(p, y, batch[i]).value) for i in range(23)]
    np.testing.assert_allclose(U.uc_sweep(p, y, batch), loop, atol=2e-6)


def test_uc_class_families():
  p, y = _data(n=70, c=4, seed=9)
  tce = float(U.uc_class(p, y, "tce"))
  assert tce == pytest.approx(float(U.uc(p, y, U.top_class()).value), abs=1e-7)
  cwe = max(float(U.uc(p, y, U.classwise(c, 4)).value) for c in range(4))
  topk = max(float(U.uc(p, y, U.top_k(k, 4)).value) for k in range(1, 5))
  assert float(U.uc_class(p, y, "cwe")) == pytest.approx(cwe, abs=1e-6)
  assert float(U.uc_class(p, y, "topk")) == pytest.approx(topk, abs=1e-6)
  assert float(U.uc_class(p, y, "comb")) == pytest.approx(max(cwe, topk), abs=1e-6)
  assert topk >= tce - 1e-7  # K = 1 is the top-class utility
  p2, y2 = _data(n=70, c=4, seed=10)
  vm = jax.vmap(lambda a, b: U.uc_class(a, b, "comb"))(np.stack([p, p2]), np.stack([y, y2]))
  np.testing.assert_allclose(vm, [U.uc_class(p, y, "comb"), U.uc_class(p2, y2, "comb")], atol=1e-7)
  assert [u.params.shape for u in U.family("comb", 4)] == [(4, 4), (4, 4)]


_SHARDED_SCRIPT = r"""
import json, jax, numpy as np
from jaxcal import utility as U
rng = np.random.default_rng(0)
p = rng.dirichlet(np.ones(6), size=90).astype(np.float32); y = rng.integers(0, 6, 90)
out = {"devices": jax.device_count()}
for name, batch in (("linear", U.sample_linear(jax.random.PRNGKey(0), 10, 6)),
                    ("rank", U.sample_rank(jax.random.PRNGKey(1), 13, 6))):
  sharded = U.uc_sweep(p, y, batch, chunk_size=2)
  single = U.uc_sweep(p, y, batch, chunk_size=2, devices=jax.devices()[:1])
  out[name] = [np.asarray(sharded).tolist(), np.asarray(single).tolist()]
print(json.dumps(out))
"""


def test_uc_sweep_sharded_equals_single_device():
  env = cpu_devices_env(4)
  res = subprocess.run(
    [sys.executable, "-c", _SHARDED_SCRIPT],
    env=env,
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert res.returncode == 0, res.stderr[-3000:]
  out = json.loads(res.stdout.strip().splitlines()[-1])
  assert out["devices"] == 4
  for name in ("linear", "rank"):
    sharded, single = out[name]
    assert len(sharded) == len(single) == {"linear": 10, "rank": 13}[name]
    # per-device chunks change the matrix-product blocking: float32 rounding only
    np.testing.assert_allclose(sharded, single, rtol=1e-6, atol=1e-7)


def test_ecdf_and_plot():
  e, f = U.ecdf(jnp.array([0.2, 0.0, 0.1, 0.1]))
  np.testing.assert_allclose(e, [0.0, 0.1, 0.1, 0.2])
  np.testing.assert_allclose(f, [0.25, 0.5, 0.75, 1.0])
  import matplotlib

  matplotlib.use("Agg")
  from jaxcal._src.plots.ecdf import ecdf_plot

  fig = ecdf_plot({"a": np.array([0.01, 0.02, 0.03]), "b": jnp.array([0.0, 0.05])}, log_x=True)
  ax = fig.axes[0]
  # b's 0 is drawn at a's smallest error, 0.01: its legend entry says so
  assert [t.get_text() for t in ax.get_legend().get_texts()] == ["a", "b (1 ≤ 0 drawn at 0.01)"]
  assert ax.get_xscale() == "log"
  import matplotlib.pyplot as plt

  plt.close(fig)


# ---------------------------------------------------------------- bad input


def test_utility_values_within_1e6_of_the_bounds_are_accepted():
  """Values in [-1, 1] up to rounding (tolerance 1e-6): 1 + 5e-7 passes, 1 + 2e-6 does not."""
  a = np.array([1 + 5e-7, -1 - 5e-7, 0.0], np.float32)
  assert a[0] > 1 and a[1] < -1
  np.testing.assert_array_equal(U.linear(a).params, a)
  np.testing.assert_array_equal(U.rank(a[::-1]).params, a[::-1])
  for bad in ([1 + 2e-6, 0.0, 0.0], [0.0, -1 - 2e-6, 0.0]):
    with pytest.raises(ValueError, match=r"\[-1, 1\]"):
      U.linear(np.array(bad, np.float32))


def test_bad_inputs_raise():
  p, y = _data(n=10, c=5)
  with pytest.raises(ValueError, match=r"\[-1, 1\]"):
    U.uc(p, y, U.Utility(jnp.array([2.0, 0, 0, 0, 0]), "linear"))
  with pytest.raises(ValueError, match=r"\[-1, 1\]"):
    U.linear(jnp.array([1.5, 0.0]))
  with pytest.raises(ValueError, match="C = 3"):
    U.uc(p, y, U.linear(jnp.zeros(3)))
  with pytest.raises(ValueError, match="C = 4"):
    U.uc_sweep(p, y, U.decision(np.zeros((2, 4, 2))))
  with pytest.raises(ValueError, match="single utility"):
    U.uc(p, y, U.sample_linear(jax.random.PRNGKey(0), 23, 5))
  with pytest.raises(ValueError, match="batch"):
    U.uc_sweep(p, y, U.linear(jnp.zeros(5)))
  with pytest.raises(ValueError, match="chunk_size"):
    U.uc_sweep(p, y, U.sample_linear(jax.random.PRNGKey(0), 23, 5), chunk_size=0)
  with pytest.raises(ValueError, match="Utility"):
    U.uc(p, y, jnp.zeros(5))
  with pytest.raises(ValueError, match="unknown utility kind 'nonsense'"):
    U.uc(p, y, U.Utility(jnp.zeros(5), "nonsense"))
  with pytest.raises(ValueError, match="unknown utility kind 'bogus'"):
    U.Utility(jnp.zeros(5), kind="bogus")  # at construction
  with pytest.raises(
    ValueError, match=r"utility.params must be a real numeric array, got dtype <U3"
  ):
    U.uc(p, y, U.Utility("abc"))
  with pytest.raises(ValueError, match="devices is empty"):
    U.uc_sweep(p, y, U.sample_linear(jax.random.PRNGKey(0), 3, 5), devices=[])
  with pytest.raises(ValueError, match="devices must hold jax.Device objects, got str"):
    U.uc_sweep(p, y, U.sample_linear(jax.random.PRNGKey(0), 3, 5), devices=["cpu"])
  with pytest.raises(ValueError, match=r"key must be a JAX PRNG key .*got int"):
    U.sample_linear(0, 3, 5)
  with pytest.raises(ValueError, match="NaN"):
    U.uc(p, y, U.Utility(jnp.array([np.nan, 0, 0, 0, 0]), "rank"))
  with pytest.raises(ValueError, match="family"):
    U.uc_class(p, y, "ece")
  with pytest.raises(ValueError, match="class index"):
    U.classwise(5, 5)
  with pytest.raises(ValueError, match="K must"):
    U.top_k(0, 5)
  with pytest.raises(ValueError, match="square"):
    U.similarity(jnp.zeros((3, 4)))
  with pytest.raises(ValueError, match="labels"):
    U.uc(p, np.full(10, 7), U.top_class())
  with pytest.raises(ValueError, match="sum to 1"):
    U.uc(p * 0.5, y, U.top_class())
  with pytest.raises(ValueError, match="non-empty"):
    U.ecdf(jnp.zeros((0,)))
  # found by a review helper: gamma = inf passed the bounds (0, inf) (the top-1 weights)
  with pytest.raises(ValueError, match=r"gamma contains non-finite values .* gamma\[1\]: inf"):
    U.dcg([1.0, np.inf], 5)
  # parameters of a top_class utility were ignored without a word
  with pytest.raises(
    ValueError, match=r"a top_class utility takes no parameters .*got shape \(7,\)"
  ):
    U.uc(p, y, U.Utility(jnp.ones(7), "top_class"))


def test_values_checks_like_uc():
  """``Utility.values`` checked nothing: a rank utility of C = 2 on C = 3 rows clamped its
  index, a batch gave (1, n, C), parameters outside [-1, 1] were used, 1-d rows IndexError."""
  p3 = jnp.array([[0.2, 0.5, 0.3]])
  with pytest.raises(ValueError, match="rank utility is defined for C = 2 .* C = 3"):
    U.rank(jnp.array([1.0, 0.5])).values(p3)
  with pytest.raises(ValueError, match="single utility"):
    U.sample_rank(jax.random.key(0), 3, 3).values(p3)
  with pytest.raises(ValueError, match=r"\[-1, 1\]"):
    U.Utility(jnp.array([5.0, 0.0, 0.0]), "linear").values(p3)
  with pytest.raises(ValueError, match=r"must have shape \(n, C\)"):
    U.top_class().values(jnp.array([0.2, 0.8]))
  with pytest.raises(ValueError, match="sum to 1"):
    U.top_class().values(p3 * 0.5)
  # the kind's own shape is named before the batch axes it decides (both said "must be a
  # batch with one leading axis, got batch shape ()")
  p, y = _data(n=10, c=2)
  with pytest.raises(ValueError, match=r"similarity matrix must be square, got shape \(3, 2\)"):
    U.uc_sweep(p, y, U.Utility(jnp.ones((3, 2)) / 2, "similarity"))
  with pytest.raises(
    ValueError, match=r"decision parameters need at least 2 axes, got shape \(2,\)"
  ):
    U.uc_sweep(p, y, U.Utility(jnp.zeros(2), "decision"))
  # traced: the bad parameters give NaN, good ones the eager values
  f = jax.jit(lambda a, p: U.Utility(a, "linear").values(p))
  assert np.isnan(np.asarray(f(jnp.array([5.0, 0.0, 0.0]), p3))).all()
  np.testing.assert_array_equal(f(jnp.array([1.0, 0.0, -1.0]), p3), [[1.0, 0.0, -1.0]])


def test_uc_and_uc_class_take_where():
  """``where=`` (README: every metric takes it): the subset's error; masked rows (NaN, label
  out of range) are never read; jit == eager; a mask selecting nothing raises."""
  rng = np.random.default_rng(0)
  p = rng.dirichlet(np.ones(4), 200).astype(np.float32)
  y = rng.integers(0, 4, 200)
  w = rng.random(200) < 0.6
  pn, yn = p.copy(), y.copy()
  pn[~w], yn[~w] = np.nan, 9
  for fam in SW.FAMILIES:
    want = float(U.uc_class(p[w], y[w], fam))
    assert float(U.uc_class(pn, yn, fam, where=w)) == pytest.approx(want, rel=1e-6, abs=1e-7)
    jitted = jax.jit(lambda a, b, m, fam=fam: U.uc_class(a, b, fam, where=m))
    assert float(jitted(pn, yn, w)) == pytest.approx(want, rel=1e-6, abs=1e-7)
  u = U.top_class()
  want = U.uc(p[w], y[w], u)
  for got in (U.uc(pn, yn, u, where=w), jax.jit(lambda a, b, m: U.uc(a, b, u, where=m))(pn, yn, w)):
    np.testing.assert_allclose([float(v) for v in got], [float(v) for v in want], rtol=1e-6)
  with pytest.raises(ValueError, match="where selects no samples"):
    U.uc_class(p, y, "tce", where=np.zeros(200, bool))
  with pytest.raises(ValueError, match="where selects no samples"):
    U.uc(p, y, u, where=np.zeros(200, bool))


def test_uc_sweep_takes_where():
  """``uc_sweep(where=)``: the subset's errors for both kinds of utility, eager, under jit
  and under vmap over masks; masked rows (NaN, label out of range) are never read; the
  caller's arrays are untouched; a bad mask is refused by name (it took no mask before)."""
  rng = np.random.default_rng(1)
  n, c = 300, 5
  p = rng.dirichlet(np.ones(c), n).astype(np.float32)
  y = rng.integers(0, c, n)
  w = rng.random(n) < 0.6
  pn, yn = p.copy(), y.copy()
  pn[~w], yn[~w] = np.nan, 9
  before = pn.copy(), yn.copy(), w.copy()
  for us in (U.sample_linear(jax.random.key(0), 7, c), U.sample_rank(jax.random.key(1), 7, c)):
    want = np.asarray(U.uc_sweep(p[w], y[w], us))
    np.testing.assert_allclose(U.uc_sweep(pn, yn, us, where=w), want, rtol=1e-6, atol=1e-7)
    jitted = jax.jit(lambda a, b, m, us=us: U.uc_sweep(a, b, us, chunk_size=3, where=m))
    np.testing.assert_allclose(jitted(pn, yn, w), want, rtol=1e-6, atol=1e-7)
    masks = np.stack([w, ~w])
    looped = [U.uc_sweep(p[m], y[m], us) for m in masks]
    batched = jax.vmap(lambda m, us=us: U.uc_sweep(p, y, us, where=m))(masks)
    np.testing.assert_allclose(batched, np.stack(looped), rtol=1e-6, atol=1e-7)
    # the rows uc takes with the same mask
    one = U.uc(pn, yn, jax.tree.map(lambda a: a[0], us), where=w).value
    assert float(one) == pytest.approx(float(want[0]), rel=1e-5, abs=4 / w.sum())
  for a, b in zip((pn, yn, w), before, strict=True):
    np.testing.assert_array_equal(a, b)
  us = U.sample_linear(jax.random.key(0), 3, c)
  with pytest.raises(ValueError, match="where selects no samples"):
    U.uc_sweep(p, y, us, where=np.zeros(n, bool))
  with pytest.raises(ValueError, match=r"where must have shape \(300,\)"):
    U.uc_sweep(p, y, us, where=w[:10])
  with pytest.raises(ValueError, match="where must be a boolean mask"):
    U.uc_sweep(p, y, us, where=w.astype(int))


def test_sweep_checksum_sees_float64_data_and_row_order():
  """The multi-process jit check compares this sum over the mesh: its float64 form kept only
  the low 32 bits (0 for short mantissas: two processes' different data agreed, and the
  swept vector mixed them), and a plain sum could not see rows in another order."""
  from jaxcal._src.utility.sweep import _checksum

  with jax.enable_x64(True):
    a, b = jnp.array([[0.5, 0.25, 0.25]]), jnp.array([[0.125, 0.375, 0.5]])
    assert int(_checksum(a)) != int(_checksum(b))
    assert int(_checksum(jnp.array([1, 2], jnp.int64))) != int(_checksum(jnp.array([2, 1])))
  rows = jnp.array([[0.1, 0.9], [0.7, 0.3]], jnp.float32)
  assert int(_checksum(rows)) != int(_checksum(rows[::-1]))
  assert int(_checksum(rows)) == int(jax.jit(_checksum)(rows))


def test_sampled_utilities_and_synthetic_data_are_the_same_draws_under_x64():
  # the face of a linear utility and a misaligned gain's group were drawn with
  # randint in the default int64 under x64: other utilities for the same seed
  # (first row [-1.0, -0.958, 0.163, -0.276] for [-0.985, -0.958, 0.163, 1.0]),
  # so uc_sweep and `jaxcal sweep --seed` changed by up to 4x per utility
  from jaxcal import data

  key = jax.random.key(3)

  def draws():
    syn = data.synthetic(key, 50, 4)
    return [
      U.sample_linear(key, 6, 4).params,
      U.sample_misaligned_gain(key, 6, 8, num_groups=3).params,
      U.sample_rank(key, 6, 5).params,
      syn.probs,
      syn.labels,
    ]

  assert_same_under_x64(draws)


def test_a_utility_batch_refuses_an_index_out_of_range_and_iterates_once():
  # JAX clamps indices: batch[10] of 8 was batch[7], and `for u in batch` never
  # ended (it stops at the first IndexError)
  batch = U.sample_linear(jax.random.key(3), 8, 4)
  for i in (8, 10, -9):
    with pytest.raises(IndexError, match=rf"utility index {i} is out of range for a batch of 8"):
      batch[i]
  # an index held in an array was clamped all the same (found by a review helper)
  for idx in (jnp.int32(8), np.array(10), np.array([1, 9]), jnp.array([-9, 0])):
    with pytest.raises(IndexError, match=r"utility index -?\d+ is out of range for a batch of 8"):
      batch[idx]
  np.testing.assert_array_equal(batch[jnp.int32(7)].params, batch[7].params)
  np.testing.assert_array_equal(batch[np.array([0, 7])].params, batch.params[np.array([0, 7])])
  items = list(batch)
  assert len(items) == 8
  np.testing.assert_array_equal(items[-1].params, batch[-1].params)
  # a tuple reaches past the batch axis: u[1, 3] is entry 3 of utility 1, not an index 3
  # of a batch (the range check took its parts for batch indices)
  pair = U.sample_linear(jax.random.key(4), 2, 5)
  np.testing.assert_array_equal(pair[1, 4].params, pair.params[1, 4])
  # found by a review helper: a 2-D index array and a tuple's later parts were clamped
  # (batch[np.array([[0, 9]])][0, 1] was utility 7; batch[:, 7] of 4 classes, class 3)
  with pytest.raises(IndexError, match=r"utility index 9 is out of range for a batch of 8"):
    batch[np.array([[0, 9]])]
  for idx in ((slice(None), 7), (0, -5), (jnp.int32(1), 4), (slice(None), np.array([0, 4]))):
    with pytest.raises(IndexError, match=r"does not fit the parameters of shape \(8, 4\)"):
      batch[idx]
  np.testing.assert_array_equal(batch[np.array([[0, 7]])].params, batch.params[np.array([[0, 7]])])
  np.testing.assert_array_equal(batch[:, 3].params, batch.params[:, 3])
  np.testing.assert_array_equal(batch[jnp.int32(2), -4].params, batch.params[2, 0])
  # other index errors stay JAX's own (a reread found numpy's wording there)
  with pytest.raises(TypeError, match="Indexer must have integer or boolean type"):
    batch[(0.5,)]
  with pytest.raises(IndexError, match="Slice entries must be static integers"):
    jax.jit(lambda i: batch[:, i:].params)(1)


def test_rank_utilities_have_the_gradient_of_their_value():
  """``v_u(p) = Σ_r θ_r p_(r)`` with the ranks held: the gradient was exactly zero for every
  rank utility (top_k, dcg, rank, sample_rank) while top_class() of the same value had
  one (the sorted probabilities came from an integer-key sort); float64, central
  differences along a direction within the simplex."""
  p = jnp.array(
    [[0.6, 0.3, 0.1], [0.2, 0.5, 0.3], [0.1, 0.2, 0.7], [0.45, 0.35, 0.2], [0.25, 0.47, 0.28]]
  )
  y = jnp.array([1, 1, 2, 0, 2])
  v = np.random.default_rng(0).standard_normal(p.shape)
  v = v - v.mean(1, keepdims=True)
  with jax.enable_x64(True):
    p, v = jnp.asarray(p, jnp.float64), jnp.asarray(v, jnp.float64)
    cases = {
      "top_k(1)": lambda q: U.uc(q, y, U.top_k(1, 3)).value,
      "top_k(2)": lambda q: U.uc(q, y, U.top_k(2, 3)).value,
      "dcg": lambda q: U.uc(q, y, U.dcg(1.0, 3)).value,
      "uc_class topk": lambda q: U.uc_class(q, y, "topk"),
      "uc_sweep rank": lambda q: jnp.sum(U.uc_sweep(q, y, U.sample_rank(jax.random.key(0), 4, 3))),
    }
    for name, f in cases.items():
      got = float(jnp.sum(jax.grad(f)(p) * v))
      fd = float((f(p + 1e-7 * v) - f(p - 1e-7 * v)) / 2e-7)
      assert abs(fd) > 1e-3, name  # the value moves along v
      assert got == pytest.approx(fd, rel=1e-6), name
