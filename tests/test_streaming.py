"""Streaming states against the one-shot metrics and the float64 loop references.

"Exact" (see jaxcal/_src/streaming.py): counts bitwise equal under every
batching and merge order; sums equal to float rounding (1e-6 absolute on the
errors, the project's metric tolerance); records hold exactly the one-shot
samples (bitwise) when merged in data order, so the quantile errors agree
with the one-shot ones to the rounding of their final sums.

Compilations are the cost on CPU: every update below runs at one batch shape
(uneven batches are padded to it with ``where``), jitted once.
"""

import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.extend.core import ClosedJaxpr, Jaxpr

sys.path.insert(0, str(pathlib.Path(__file__).parent))  # --import-mode=importlib
import _reference as R
from conftest import load_cifar, no_new_programs

from jaxcal import metrics, scores, streaming
from jaxcal._src import binning as B

ATOL = 1e-6
BATCH = 768
BINS = np.array([1, 2, 3, 7, 15, 40, 100])


@pytest.fixture(scope="module")
def cifar100():
  z, y = load_cifar("cifar100_resnet110")
  p = np.asarray(jax.nn.softmax(jnp.asarray(z[:3000])))
  return p, np.asarray(y[:3000])


def _splits(n, seed):
  """Uneven contiguous batches (sizes 1..BATCH) covering range(n)."""
  rng = np.random.default_rng(seed)
  cuts, i = [], 0
  while i < n:
    j = min(n, i + int(rng.integers(1, BATCH + 1)))
    cuts.append((i, j))
    i = j
  return cuts


def _padded(p, y, i, j):
  """Rows i:j padded to BATCH rows (garbage rows masked out by where)."""
  k = j - i
  pp = np.full((BATCH, p.shape[1]), np.nan, np.float32)  # NaN: must be ignored exactly
  pp[:k] = p[i:j]
  pp[k:, 0] = 0.0  # and off the simplex, with out-of-range labels: masked rows are absent
  yy = np.full((BATCH,), 99, np.int32)
  yy[:k] = y[i:j]
  return pp, yy, np.arange(BATCH) < k


_update = jax.jit(lambda s, p, y, w: s.update(p, y, w))


def _stream(state, p, y, seed):
  """One state per batch of an uneven split (the states, in data order)."""
  out = []
  for i, j in _splits(p.shape[0], seed):
    out.append(_update(state, *_padded(p, y, i, j)))
  return out


def _tree_merge(states):
  while len(states) > 1:
    nxt = [a.merge(b) for a, b in zip(states[::2], states[1::2])]
    states = nxt + ([states[-1]] if len(states) % 2 else [])
  return states[0]


def _seq_merge(states):
  out = states[0]
  for s in states[1:]:
    out = out.merge(s)
  return out


def _oneshot_fixed(p, y, bins):
  return {
    "conf_ece": metrics.conf_ece(p, y, bins, "fixed"),
    "conf_ce": metrics.conf_ce(p, y, bins, "fixed"),
    "conf_ce_corr": metrics.conf_ce_corr(p, y, bins, "fixed"),
    "classwise_ece": metrics.classwise_ece(p, y, bins, "fixed"),
    "classwise_ce": metrics.classwise_ce(p, y, bins, "fixed"),
    "ecce": metrics.ecce(p, y, bins),
  }


def test_fixed_bins_equal_oneshot_under_batchings_and_merge_orders(cifar100):
  p, y = cifar100
  empty = streaming.FixedBins.empty(100, BINS)
  want = _oneshot_fixed(p, y, BINS)
  variants = []
  for seed in (0, 1):
    states = _stream(empty, p, y, seed)
    variants.append(_seq_merge(states))
    variants.append(_tree_merge(states[::-1]))  # reversed order, tree shaped
  first = variants[0]
  for st in variants:
    assert int(st.count) == p.shape[0]
    for a, b in zip(jax.tree.leaves(first), jax.tree.leaves(st)):
      if jnp.issubdtype(a.dtype, jnp.integer):
        np.testing.assert_array_equal(a, b)  # counts: bitwise, any batching and order
    got = st.compute()
    for k, v in want.items():
      assert got[k].shape == BINS.shape
      np.testing.assert_allclose(got[k], v, rtol=0, atol=ATOL, err_msg=k)


def test_fixed_bins_match_float64_reference():
  rng = np.random.default_rng(3)
  p = rng.dirichlet(np.full(4, 0.5), 200).astype(np.float32)
  p[:40] = np.round(p[:40] * 4) / 4  # scores on bin edges
  p /= p.sum(axis=1, keepdims=True)
  y = rng.integers(0, 4, 200)
  st = streaming.FixedBins.empty(4, BINS).update(p[:77], y[:77]).update(p[77:], y[77:])
  got = st.compute()
  for name in ("conf_ece", "conf_ce", "conf_ce_corr", "classwise_ece", "classwise_ce"):
    want = [getattr(R, name)(p, y, int(m), "fixed") for m in BINS]
    np.testing.assert_allclose(got[name], want, rtol=0, atol=ATOL, err_msg=name)
  np.testing.assert_allclose(got["ecce"], [R.ecce(p, y, int(m)) for m in BINS], atol=ATOL)
  # results are shaped like num_bins, a 2-D array too (shapes only: nothing compiled)
  grid = streaming.FixedBins.empty(4, BINS.reshape(7, 1))
  assert grid.num_bins.shape == (7, 1)
  assert all(v.shape == (7, 1) for v in jax.eval_shape(lambda s: s.compute(), grid).values())
  w = np.array([0.1, 0.2, 0.3, 0.4])
  np.testing.assert_allclose(
    st.compute(class_weights=w)["classwise_ece"],
    [R.classwise_ece(p, y, int(m), "fixed", w) for m in BINS],
    atol=ATOL,
  )
  # reliability statistics: counts bitwise, means to float rounding
  counts, conf, acc, lower, upper = R.reliability_stats(p, y, 15)
  rel = st.reliability(15)
  np.testing.assert_array_equal(rel.counts, counts)
  np.testing.assert_array_equal(rel.counts, metrics.reliability_stats(p, y, 15).counts)
  for g, v in zip(rel[1:], (conf, acc, lower, upper)):
    np.testing.assert_allclose(g, v, atol=ATOL)


def test_a_large_label_sorted_batch_matches_float64():
  # one update of 2**20 rows stored by label: a float32 scatter-add of the batch's
  # residuals drifted (its bins' sums run to 10^5 before they cancel); the batch's
  # interval sums now come from the one-shot integer engine, as exact float32 terms
  rng = np.random.default_rng(2)
  n, m = 1 << 20, 15
  c = np.float32(0.7) + (rng.random(n).astype(np.float32) - np.float32(0.5)) * np.float32(0.02)
  y = np.where(rng.random(n) < c, 0, 1)
  order = np.argsort(y, kind="stable")
  p, y = np.stack([c, 1 - c], 1)[order], y[order]
  conf = p.max(1)
  b = np.clip(np.ceil(conf * np.float32(m)).astype(int), 1, m) - 1
  want = np.abs(np.bincount(b, weights=conf.astype(np.float64) - (y == 0), minlength=m)).sum() / n
  cw = sum(  # classwise ECE, 1/C weights, from the float64 per-class bin sums
    np.abs(
      np.bincount(
        np.clip(np.ceil(p[:, r] * np.float32(m)).astype(int), 1, m) - 1,
        weights=p[:, r].astype(np.float64) - (y == r),
        minlength=m,
      )
    ).sum()
    / n
    / 2
    for r in range(2)
  )
  one = streaming.FixedBins.empty(2, m, classwise=True).update(p, y).compute()
  halves = streaming.FixedBins.empty(2, m, classwise=True)
  for part in (slice(0, n // 2), slice(n // 2, n)):  # one label per batch: they cancel
    halves = halves.update(p[part], y[part])
  for st in (one, halves.compute()):
    np.testing.assert_allclose(float(st["conf_ece"]), want, rtol=1e-5)
    np.testing.assert_allclose(float(st["classwise_ece"]), cw, rtol=1e-5)


def test_scalar_num_bins_and_float64():
  rng = np.random.default_rng(4)
  p = rng.dirichlet(np.ones(3), 50)
  y = rng.integers(0, 3, 50)
  with jax.enable_x64(True):
    st = streaming.FixedBins.empty(3, 15, dtype=jnp.float64).update(p, y)
    out = st.compute()
    assert out["conf_ece"].shape == () and out["conf_ece"].dtype == jnp.float64
    np.testing.assert_allclose(out["conf_ece"], R.conf_ece(p, y, 15, "fixed"), rtol=1e-12)
    # scores exactly on bin edges (0.25, 0.5, 0.75: edges of 4, 8 and 16 bins) in the
    # float64 state, as test_fixed_bins_match_float64_reference checks the float32 one
    # (a mutation review: the float64 branch's edge rule could flip without a test failing)
    q = np.round(rng.dirichlet(np.ones(3), 60) * 4) / 4
    q[q.sum(axis=1) != 1] = [0.5, 0.25, 0.25]
    z = rng.integers(0, 3, 60)
    got = streaming.FixedBins.empty(3, BINS, dtype=jnp.float64).update(q, z).compute()
    for name in ("conf_ece", "conf_ce_corr", "classwise_ece", "classwise_ce"):
      want = [getattr(R, name)(q, z, int(m), "fixed") for m in BINS]
      np.testing.assert_allclose(got[name], want, rtol=1e-12, atol=1e-15, err_msg=name)


def test_scores_equal_oneshot(cifar100):
  p, y = cifar100
  st = _seq_merge(_stream(streaming.Scores.empty(100, confusion=True), p, y, 5))
  got = st.compute()
  for name in ("brier", "log_loss", "spherical", "confidence_loss", "classification_error"):
    np.testing.assert_allclose(got[name], getattr(scores, name)(p, y), rtol=1e-6, err_msg=name)
    np.testing.assert_allclose(got[name], getattr(R, name)(p, y).mean(), rtol=1e-6, err_msg=name)
  conf = np.zeros((100, 100), np.int64)
  np.add.at(conf, (y, np.argmax(p, axis=1)), 1)
  np.testing.assert_array_equal(got["confusion"], conf)
  np.testing.assert_array_equal(st.label_counts, np.bincount(y, minlength=100))
  np.testing.assert_allclose(got["label_frequencies"], np.bincount(y, minlength=100) / len(y))
  np.testing.assert_allclose(got["accuracy"], np.mean(np.argmax(p, axis=1) == y), rtol=1e-6)
  assert int(st.correct) == int(np.sum(np.argmax(p, axis=1) == y))


def test_log_loss_of_logits_is_computed_from_the_logits():
  # from_logits took the log of the float32 softmax: 3.58e-7 for 3.84e-7 (-6.9 %) on a
  # confident model, while scores.log_loss and evaluate read the logits themselves
  rng = np.random.default_rng(0)
  n, c = 2000, 10
  y = rng.integers(0, c, n)
  z = rng.normal(size=(n, c)).astype(np.float32)
  z[np.arange(n), y] += 18.0
  z64 = z.astype(np.float64)
  want = np.mean(np.log(np.exp(z64 - z64[np.arange(n), y][:, None]).sum(1)))
  keep = rng.random(n) < 0.7
  want_kept = np.mean(np.log(np.exp(z64 - z64[np.arange(n), y][:, None]).sum(1))[keep])
  upd = jax.jit(lambda st, x, t, w: st.update(x, t, w, from_logits=True))
  for make in (lambda: streaming.Scores.empty(c), lambda: streaming.Calibration.empty(c)):
    st = make()
    for part in np.array_split(np.arange(n), 3):
      st = st.update(z[part], y[part], from_logits=True)
    got = st.compute()["log_loss"]
    np.testing.assert_allclose(got, want, rtol=1e-5)
    np.testing.assert_allclose(got, scores.log_loss(z, y, from_logits=True), rtol=1e-5)
    zm = np.where(keep[:, None], z, np.nan)  # masked-out rows are never read
    st = upd(make(), zm, y, keep)
    np.testing.assert_allclose(st.compute()["log_loss"], want_kept, rtol=1e-5)


@pytest.mark.parametrize("kind", ["top_label", "full"])
def test_records_equal_oneshot(cifar100, kind):
  p, y = cifar100
  p, y = p[:1000, :10] / p[:1000, :10].sum(axis=1, keepdims=True), y[:1000] % 10
  p[:100] = np.round(p[:100] * 8) / 8  # ties across batches
  p[:100] /= p[:100].sum(axis=1, keepdims=True)
  states = _stream(streaming.Records.empty(10, capacity=BATCH, kind=kind), p, y, 7)
  st = _seq_merge(states)
  assert st.capacity == BATCH * len(states) and int(st.count) == 1000
  assert _tree_merge(states).capacity == st.capacity
  bins = np.array([1, 5, 15, 40])
  got = st.compute(bins)
  for name in ("conf_ece", "conf_ce", "conf_ce_corr"):
    want = getattr(metrics, name)(p, y, bins, "quantile")
    # same samples, same algorithm; the records run their own compiled (masked)
    # program, whose final sums XLA may round differently (a few ulps)
    np.testing.assert_allclose(got[name], want, rtol=1e-6, atol=0, err_msg=name)
    # tree-shaped merges in data order give the same records: bitwise
    np.testing.assert_array_equal(_tree_merge(states).compute(bins)[name], got[name])
  if kind == "full":
    np.testing.assert_allclose(got["classwise_ce"], metrics.classwise_ce(p, y, bins), rtol=1e-6)
    pp, yy = st.data()
    np.testing.assert_array_equal(pp, p)
    np.testing.assert_array_equal(yy, y)
  else:
    c, z = st.data()
    np.testing.assert_array_equal(c, p.max(axis=1))
    np.testing.assert_array_equal(z, p.argmax(axis=1) == y)
  np.testing.assert_allclose(
    got["conf_ce_corr"], [R.conf_ce_corr(p, y, int(m)) for m in bins], atol=ATOL
  )
  # one program per octave of the largest count (each count compiled its own)
  st.compute(np.array([5, 9]))
  with no_new_programs():
    octave = [st.compute(np.array([5, m])) for m in range(10, 17)]
  for m, out in zip(range(10, 17), octave, strict=True):
    want = metrics.conf_ce(p, y, m, "quantile")
    np.testing.assert_allclose(out["conf_ce"][1], want, rtol=1e-6, err_msg=str(m))


def test_calibration_collection_and_reduce(cifar100):
  p, y = cifar100[0][:2000], cifar100[1][:2000]
  empty = streaming.Calibration.empty(100, 15, capacity=BATCH)
  states = _stream(empty, p, y, 9)
  stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *states)  # what all_gather returns
  st = stacked.reduce()
  out = st.compute()
  np.testing.assert_allclose(out["conf_ece"], metrics.conf_ece(p, y), atol=ATOL)
  np.testing.assert_allclose(out["ecce"], metrics.ecce(p, y), atol=ATOL)
  np.testing.assert_allclose(
    out["classwise_ce_fixed"], metrics.classwise_ce(p, y, 15, "fixed"), atol=ATOL
  )
  np.testing.assert_allclose(out["conf_ce_corr"], metrics.conf_ce_corr(p, y), rtol=1e-6)
  np.testing.assert_allclose(out["conf_ce"], R.conf_ce(p, y, 15), atol=ATOL)
  for k in ("conf_ce", "conf_ce_corr"):  # the fixed-bin ones under their own names
    want = getattr(R, k)(p, y, 15, "fixed")
    np.testing.assert_allclose(out[k + "_fixed"], want, atol=ATOL, err_msg=k)
  np.testing.assert_allclose(out["accuracy"], 1 - scores.classification_error(p, y), atol=ATOL)
  assert "classwise_ce" not in out  # top-label records only
  assert all(v.shape == () for k, v in out.items() if k != "label_frequencies")  # num_bins=15
  # reduce merges in stack order: the records are the samples in data order (bitwise)
  np.testing.assert_array_equal(st.records.data()[0], p.max(axis=1))


def test_update_jit_equals_eager():
  rng = np.random.default_rng(1)
  p = rng.dirichlet(np.ones(5), 64).astype(np.float32)
  y = rng.integers(0, 5, 64)
  w = rng.random(64) < 0.7
  empty = streaming.Calibration.empty(5, np.array([3, 10]), capacity=64, records="full")
  eager = empty.update(p, y, w)
  jitted = jax.jit(lambda s: s.update(p, y, w))(empty)
  for a, b in zip(jax.tree.leaves(eager), jax.tree.leaves(jitted)):
    if jnp.issubdtype(a.dtype, jnp.floating):  # XLA may fuse the sums differently
      np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    else:
      np.testing.assert_array_equal(a, b)
  # masked rows are absent: same state as the selected rows alone
  sel = empty.update(p[w], y[w])
  np.testing.assert_array_equal(sel.bins.cw_n, eager.bins.cw_n)
  np.testing.assert_allclose(sel.compute()["conf_ece"], eager.compute()["conf_ece"], atol=1e-7)
  np.testing.assert_array_equal(sel.records.data()[0], eager.records.data()[0])
  # records compute inside jit too (masked buffer); an overflowed buffer gives NaN there
  in_jit = jax.jit(lambda s: s.records.compute(np.array([3, 10])))(eager)
  for k, v in eager.records.compute(np.array([3, 10])).items():
    np.testing.assert_allclose(in_jit[k], v, rtol=1e-6, err_msg=k)
  over = streaming.Records.empty(5, capacity=10).update(p, y)
  assert np.isnan(jax.jit(lambda s: s.compute(3)["conf_ece"])(over))


def test_fixed_bins_update_vmap_over_distinct_batches_equals_the_loop():
  # a batch of three streams: three different batches (own predictions, labels
  # and masks) into one empty state, then a second batch each into the batched
  # states. Every member equals its own eager updates (counts bitwise) and the
  # float64 reference on its kept rows.
  rng = np.random.default_rng(6)
  ps = np.stack([rng.dirichlet(np.full(4, a), (2, 40)) for a in (0.3, 1.0, 3.0)])
  ps = (ps / ps.sum(-1, keepdims=True)).astype(np.float32)  # (stream, step, n, C)
  ys = rng.integers(0, 4, (3, 2, 40))
  ws = rng.random((3, 2, 40)) < 0.8
  bins = np.array([3, 10])
  empty = streaming.FixedBins.empty(4, bins)
  first = jax.vmap(lambda p, y, w: empty.update(p, y, w))(ps[:, 0], ys[:, 0], ws[:, 0])
  both = jax.vmap(lambda s, p, y, w: s.update(p, y, w))(first, ps[:, 1], ys[:, 1], ws[:, 1])
  values = []
  for k in range(3):
    eager = empty.update(ps[k, 0], ys[k, 0], ws[k, 0]).update(ps[k, 1], ys[k, 1], ws[k, 1])
    member = jax.tree.map(lambda a: a[k], both)
    for a, b in zip(jax.tree.leaves(eager), jax.tree.leaves(member)):
      if jnp.issubdtype(a.dtype, jnp.floating):  # batched sums may fuse differently
        np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-7)
      else:
        np.testing.assert_array_equal(b, a)
    got = member.compute()
    keep = ws[k].ravel()
    p, y = ps[k].reshape(80, 4)[keep], ys[k].ravel()[keep]
    for name in ("conf_ece", "classwise_ce"):
      want = [getattr(R, name)(p, y, int(m), "fixed") for m in bins]
      np.testing.assert_allclose(got[name], want, rtol=0, atol=ATOL, err_msg=(k, name))
    values.append(float(got["conf_ece"][1]))
  assert len(set(values)) == 3, values  # the streams' errors differ


def _DATA(s):
  return s.records.data()


@pytest.mark.parametrize(
  "call",
  [
    lambda s: s.compute(),
    lambda s: s.bins.compute(),
    lambda s: s.bins.reliability(3),
    lambda s: s.scores.compute(),
    lambda s: s.records.compute(3),
    _DATA,
    lambda s: s.records.merge(s.records),
  ],
  ids=["calibration", "fixed_bins", "reliability", "scores", "records", "data", "merge"],
)
def test_a_batch_of_states_used_outside_vmap_says_so(call):
  # states built under jax.vmap carry the batch axis in front of every leaf:
  # used eagerly, they raised Python's "only 0-dimensional arrays can be
  # converted" (compute), a broadcasting error (reliability) or a
  # dynamic_update_slice error (Records.merge). Under vmap they work.
  rng = np.random.default_rng(7)
  ps = rng.dirichlet(np.ones(4), (2, 30)).astype(np.float32)
  ys = rng.integers(0, 4, (2, 30))
  empty = streaming.Calibration.empty(4, num_bins=3, capacity=30)
  both = jax.vmap(lambda p, y: empty.update(p, y))(ps, ys)
  with pytest.raises(
    ValueError, match=r"holds a batch of 2 states \(it was built under jax.vmap\)"
  ):
    call(both)
  if call is not _DATA:  # data() is eager only
    jax.vmap(call)(both)


def test_psum_of_states_is_a_merge():
  """Sum states merge by adding leaves: what psum does across devices."""
  rng = np.random.default_rng(2)
  p = rng.dirichlet(np.ones(3), 40).astype(np.float32)
  y = rng.integers(0, 3, 40)
  a = streaming.FixedBins.empty(3, 5).update(p[:25], y[:25])
  b = streaming.FixedBins.empty(3, 5).update(p[25:], y[25:])
  summed = jax.tree.map(lambda u, v: u + v, a, b)
  np.testing.assert_allclose(summed.compute()["classwise_ce"], a.merge(b).compute()["classwise_ce"])
  np.testing.assert_array_equal(summed.cw_n, a.merge(b).cw_n)


def test_update_and_merge_keep_the_rounding_error_of_the_sums():
  """``hi + lo`` is the exact sum of the summands (TwoSum), by ``update`` and by ``merge``.

  One sample of large losses (log loss 27.63: p_y = 0 clipped at 1e-12) and one of losses
  below half an ulp of those in float32 (6e-8: p_y = 1 - 2^-24); a float32 sum drops the
  small ones, the compensated pair keeps them. Class-wise: residuals 1 and 2^-26 in one bin
  (a float32 step of 1 is 2^-23; the batch sums are exact on the one-shot engine's grid of
  2^-29, so a residual below that grid would be rounded away as the one-shot metric does).
  """
  cases = (
    (streaming.Scores.empty(2), ("hi", "lo"), [[1.0, 0.0]], [1], [[1 - 2**-24, 2**-24]], [0]),
    (streaming.FixedBins.empty(2, 1), ("cw_hi", "cw_lo"), [[0.0, 1.0]], [0], [[1.0, 2**-26]], [0]),
  )
  for empty, (hi, lo), p_big, y_big, p_small, y_small in cases:
    big = (np.array(p_big, np.float32), np.array(y_big))
    small = (np.array(p_small, np.float32), np.array(y_small))
    a, b = empty.update(*big), empty.update(*small)
    exact = np.float64(getattr(a, hi)) + np.float64(getattr(b, hi))  # one summand each
    assert (np.float64(getattr(a, hi) + getattr(b, hi)) != exact).any()  # float32 drops some
    for st in (a.merge(b), b.merge(a), a.update(*small)):
      np.testing.assert_array_equal(
        np.float64(getattr(st, hi)) + np.float64(getattr(st, lo)), exact
      )


def test_interval_thresholds_reproduce_the_fixed_rule():
  thr = streaming.interval_thresholds((3, 7, 10))
  s = np.concatenate([np.linspace(0, 1, 2001, dtype=np.float32), thr, np.nextafter(thr, 2)])
  k = np.searchsorted(thr, s, side="left")
  for m in (3, 7, 10):
    b = R.fixed_bins(s, m)
    for kk in np.unique(k):  # one bin per interval
      assert len(np.unique(b[k == kk])) == 1


def test_interval_thresholds_of_large_counts_need_no_table_of_all_counts():
  # the state of m bins built edge_table(m) (every T(m', j), m' <= m): 20-40 s and
  # 2.5 GB at m = 6000; each count's m - 1 thresholds are computed directly now
  for m, dt in ((200, "float32"), (97, "float64")):
    table = B.edge_table(m, dt)
    want = table.thresholds[np.asarray(table.index[m, : m - 1], np.int64) - 1]
    np.testing.assert_array_equal(streaming.interval_thresholds((m,), dt), want)
  m = 50_000
  thr = streaming.interval_thresholds((m,))
  assert thr.shape == (m - 1,) and thr.dtype == np.float32
  j = np.arange(1, m, dtype=np.float32)
  # T(m, j) is the last float32 with fl(t m) <= j: the rule's bin changes right after it
  assert np.all(thr * np.float32(m) <= j)
  assert np.all(np.nextafter(thr, np.float32(2)) * np.float32(m) > j)
  state = streaming.FixedBins.empty(3, m, classwise=False)
  assert state.conf_n.shape == (m,)  # K + 1 intervals


def test_empty_state_raises_eagerly_and_gives_nan_under_jit():
  p, y = np.full((4, 3), 1 / 3, np.float32), np.zeros(4, np.int32)
  masked = streaming.Scores.empty(3).update(p, y, np.zeros(4, bool))  # every sample masked
  for st, what in (
    (streaming.FixedBins.empty(3, 5), "FixedBins is empty"),
    (masked, "Scores is empty"),
    (streaming.Records.empty(3, capacity=4), "Records is empty"),
  ):
    with pytest.raises(ValueError, match=what):
      st.compute()
  # no host read inside jit: NaN (the fixed-bin program is the eager one's)
  assert np.isnan(jax.jit(lambda s: s.compute()["conf_ece"])(streaming.FixedBins.empty(3, 5)))
  assert np.isnan(jax.jit(lambda s: s.compute()["accuracy"])(masked))
  # records: empty gives NaN under jit, one sample is a data set like any other
  records = jax.jit(lambda s: s.compute(1))
  assert all(np.isnan(v) for v in records(streaming.Records.empty(3, capacity=4)).values())
  one = records(streaming.Records.empty(3, capacity=4).update(p[:1], y[:1]))
  assert float(one["conf_ece"]) == pytest.approx(float(metrics.conf_ece(p[:1], y[:1], 1)))
  assert float(one["conf_ce_corr"]) == pytest.approx(float(metrics.conf_ce_corr(p[:1], y[:1], 1)))
  # eagerly too, with the buffer exactly full and as many quantile bins as records
  full = streaming.Records.empty(3, capacity=1).update(p[:1], y[:1])
  assert not bool(full.overflow)
  eager = full.compute(1)
  for k in ("conf_ece", "conf_ce_corr"):
    assert float(eager[k]) == pytest.approx(float(one[k])), k


def test_a_batch_of_no_rows_adds_nothing():
  """``update`` with ``B = 0`` rows (a process's empty shard, an empty last batch) returns the
  state as it is, eagerly and under ``jit``, with or without a mask and from logits; its
  shapes are still checked. It raised "probs is empty", on that process only."""
  p, y = np.full((4, 3), 1 / 3, np.float32), np.array([0, 1, 2, 0])
  step = jax.jit(lambda s, a, b: s.update(a, b))
  for st in (
    streaming.Calibration.empty(3, np.array([5, 15]), capacity=8),
    streaming.FixedBins.empty(3, 5),
    streaming.Scores.empty(3),
    streaming.Records.empty(3, capacity=8),
  ):
    full = st.update(p, y)
    for before, got in (
      (full, full.update(p[:0], y[:0])),
      (full, step(full, p[:0], y[:0])),
      (full, full.update(p[:0], y[:0], np.zeros(0, bool), from_logits=True)),
      (st, st.update(p[:0], y[:0])),  # an empty state stays empty
    ):
      assert jax.tree.structure(got) == jax.tree.structure(before)
      for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(before)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  for a, b, match in (
    (np.zeros((0, 4), np.float32), y[:0], "C = 4 classes but the state was made for C = 3"),
    (p[:0], y[:1], "labels has 1 entries but the predictions have n = 0 rows"),
    (p[0], y[:1], r"probs must have shape \(n, C\), got shape \(3,\)"),
  ):
    with pytest.raises(ValueError, match=match):
      streaming.Scores.empty(3).update(a, b)
  # logits of another class count are named as logits (they were called probs)
  with pytest.raises(
    ValueError, match=r"^logits has C = 4 classes but the state was made for C = 3"
  ):
    streaming.FixedBins.empty(3).update(np.zeros((2, 4), np.float32), y[:2], from_logits=True)


def test_more_samples_than_int32_counts_hold_raise_eagerly_and_give_nan_under_jit():
  # the int32 sample count wrapped past 2^31 - 1: two merges of 2^30 samples gave a
  # count of -2^31 and Brier -0.18 (for 0.18), ConfECE -0.30 (for 0.30), no error
  import dataclasses

  from jaxcal._src.streaming import MAX_COUNT

  p, y = np.array([[0.3, 0.7]], np.float32), np.array([1])
  s = streaming.Scores.empty(2).update(p, y)
  f = streaming.FixedBins.empty(2, num_bins=15).update(p, y)
  for _ in range(30):  # 2^30 copies of the sample, by the public merge
    s, f = s.merge(s), f.merge(f)
  assert int(s.count) == 2**30
  assert float(s.compute()["brier"]) == pytest.approx(0.18, rel=1e-6)
  assert float(f.compute()["conf_ece"]) == pytest.approx(0.3, rel=1e-6)
  full = lambda st: dataclasses.replace(st, count=jnp.int32(MAX_COUNT))
  too_many = {
    "merge": (s.merge(s), f.merge(f)),  # 2^31
    "update": (full(s).update(p, y), full(f).update(p, y)),  # 2^31 - 1 + 1
    "sticky": (s.merge(s).merge(s), f.merge(f).update(p, y)),  # no wrap back to >= 0
  }
  for how, (s2, f2) in too_many.items():
    assert int(s2.count) < 0 and int(f2.count) < 0, how
    for st in (s2, f2):
      with pytest.raises(ValueError, match=r"more than 2\^31 - 1 = 2,147,483,647 samples"):
        st.compute()
    assert np.isnan(jax.jit(lambda st: st.compute()["brier"])(s2)), how
    assert np.isnan(jax.jit(lambda st: st.compute()["conf_ece"])(f2)), how
    rel = f2.reliability(15)
    assert np.all(np.asarray(rel.counts) == -1) and np.all(np.isnan(np.asarray(rel.accuracy)))
  # a merge that ends exactly at the limit is still exact
  top = full(s).merge(streaming.Scores.empty(2))
  assert int(top.count) == MAX_COUNT and np.isfinite(float(top.compute()["brier"]))


def test_invalid_batches_under_jit_poison_every_output():
  """A batch that fails the traced check is counted; every output is NaN (counts -1)."""
  p, y = np.full((4, 3), 1 / 3, np.float32), np.zeros(4, np.int32)
  nanp = p.copy()
  nanp[1, 0] = np.nan
  update = jax.jit(streaming.Calibration.update)
  empty = streaming.Calibration.empty(3, 5, confusion=True)
  good = update(empty, p, y)
  assert int(good.scores.invalid) == int(good.bins.invalid) == 0
  # NaN probabilities; a label out of range (it was silently dropped from the counts)
  for pp, yy in ((nanp, y), (p, np.array([0, 0, 0, 5]))):
    st = update(empty, pp, yy)
    assert int(st.scores.invalid) == int(st.bins.invalid) == 1
    # a valid batch after it, merged or updated into the same state, does not clear it
    for later in (st.merge(good), update(st, p, y)):
      assert int(later.scores.invalid) == int(later.bins.invalid) == 1
      out = later.compute()
      assert out["confusion"].dtype == jnp.int32 and (out["confusion"] == -1).all()
      del out["confusion"]
      for k, v in out.items():
        assert np.isnan(v).all(), k
    assert (st.bins.reliability(5).counts == -1).all()
  rec = jax.jit(streaming.Records.update)(streaming.Records.empty(3, capacity=8), nanp, y)
  for r in (rec, rec.update(p, y)):
    with pytest.raises(ValueError, match="Records holds 1 batch"):
      r.data()
    assert all(np.isnan(v) for v in r.compute(1).values())  # compute: NaN, eagerly too
  # a bad row that is masked out is absent, as in every metric: not checked, not poisoning
  sel = np.array([True, False, True, True])
  upd = jax.jit(streaming.Calibration.update)
  for st in (upd(empty, nanp, y, sel), empty.update(nanp, y, sel)):  # traced, eager (no raise)
    assert int(st.scores.invalid) == int(st.bins.invalid) == 0
    assert int(st.scores.count) == 3
    ref = empty.update(p[sel], y[sel])
    for k, v in ref.compute().items():
      np.testing.assert_allclose(st.compute()[k], v, rtol=1e-6, err_msg=k)
  # ... and a batch of padding only adds nothing: the state is still empty
  masked = jax.jit(streaming.Scores.update)(streaming.Scores.empty(3), nanp, y, np.zeros(4, bool))
  assert int(masked.count) == 0 and int(masked.invalid) == 0
  assert np.isnan(jax.jit(lambda s: s.compute()["accuracy"])(masked))
  with pytest.raises(ValueError, match="Scores is empty"):
    streaming.Scores.empty(3).update(nanp, y, np.zeros(4, bool)).compute()
  # the same bad row selected poisons the state (traced) or raises (eager)
  assert int(upd(empty, nanp, y, ~sel).scores.invalid) == 1
  with pytest.raises(ValueError, match=r"non-finite.*row 1"):
    empty.update(nanp, y, ~sel)


def test_bad_inputs():
  p = np.full((4, 3), 1 / 3, np.float32)
  y = np.zeros(4, np.int32)
  st = streaming.FixedBins.empty(3, 5)
  with pytest.raises(ValueError, match="C = 3 classes"):
    streaming.FixedBins.empty(4, 5).update(p, y)
  with pytest.raises(ValueError, match=r"where must have shape \(4,\)"):
    st.update(p, y, np.ones(3, bool))
  with pytest.raises(ValueError, match="where must be a boolean"):
    st.update(p, y, np.ones(4))
  with pytest.raises(ValueError, match="cannot merge"):
    st.merge(streaming.FixedBins.empty(3, 6))
  with pytest.raises(ValueError, match="cannot merge"):
    st.merge(streaming.Scores.empty(3))
  with pytest.raises(ValueError, match="num_bins must be >= 1"):
    streaming.FixedBins.empty(3, 0)
  with pytest.raises(ValueError, match="num_classes"):
    streaming.Scores.empty(1)
  with pytest.raises(ValueError, match="capacity"):
    streaming.Records.empty(3, capacity=0)
  with pytest.raises(
    ValueError, match=r"capacity \(samples to keep\) must be an integer >= 1, got True"
  ):
    streaming.Records.empty(3, capacity=True)
  with pytest.raises(TypeError, match="positional argument"):
    streaming.Records.empty(4, 3)  # the old (capacity, num_classes) order: an error, not a swap
  with pytest.raises(ValueError, match="num_classes must be an integer >= 2, got True"):
    streaming.Scores.empty(True)
  with pytest.raises(ValueError, match="classwise must be True or False"):
    streaming.FixedBins.empty(3, 5, classwise="no")
  with pytest.raises(ValueError, match="dtype_name must be 'float32' or 'float64', got 'int8'"):
    streaming.interval_thresholds((4,), "int8")
  with pytest.raises(ValueError, match="bin_counts must be >= 1"):
    streaming.interval_thresholds((0, 3))
  for a, b in ((None, 100), (100, None)):  # records kept by one state only: either order
    with pytest.raises(ValueError, match="keeps records .* with one that does not"):
      streaming.Calibration.empty(3, 4, capacity=a).merge(
        streaming.Calibration.empty(3, 4, capacity=b)
      )
  with pytest.raises(ValueError, match="kind"):
    streaming.Records.empty(3, capacity=4, kind="topk")
  with pytest.raises(ValueError, match="float64 needs 64-bit JAX"):
    streaming.FixedBins.empty(3, 5, dtype=jnp.float64)
  for cls in (streaming.FixedBins, streaming.Scores):  # not numpy's TypeError
    with pytest.raises(ValueError, match="dtype must be float32 or float64, got 'foo'"):
      cls.empty(3, dtype="foo")
  with pytest.raises(ValueError, match="records must be one of .*, got 'ful'"):
    streaming.Calibration.empty(3, 5, records="ful")  # no capacity: still never ignored
  with pytest.raises(ValueError, match="not one of the state's bin counts"):
    st.reliability(7)
  # numpy's "only 0-dimensional arrays can be converted"; True was 1 bin (a review helper)
  with pytest.raises(ValueError, match=r"num_bins must be one concrete bin count, got array"):
    streaming.FixedBins.empty(3, 5).reliability(np.array([5]))
  with pytest.raises(ValueError, match="num_bins must be an integer >= 1, got True"):
    streaming.FixedBins.empty(3, 1).reliability(True)
  with pytest.raises(ValueError, match="rows of probs must sum to 1"):
    st.update(p * 2, y)
  with pytest.raises(ValueError, match="concrete"):
    jax.jit(lambda m: streaming.FixedBins.empty(3, m))(jnp.arange(2, 4))
  over = streaming.Records.empty(3, capacity=3).update(p, y)
  with pytest.raises(ValueError, match="overflowed.*capacity of at least"):
    over.compute()
  # merged with an overflowed buffer, in either order, is overflowed: the count (5) fits the
  # merged capacity (6), but one sample was dropped
  fits = streaming.Records.empty(3, capacity=3).update(p[:1], y[:1])
  for merged in (fits.merge(over), over.merge(fits)):
    assert int(merged.count) == 5 and merged.capacity == 6
    # the message names the part (it read "5 samples were offered to a buffer of capacity 6")
    with pytest.raises(ValueError, match=r"a state merged into it was offered more .* \(5 samp"):
      merged.compute(1)
  for other in (
    streaming.Records.empty(4, capacity=3),
    streaming.Records.empty(3, capacity=3, kind="full"),
  ):
    with pytest.raises(ValueError, match="cannot merge Records of different kinds or class"):
      fits.merge(other)
  np.testing.assert_array_equal(p, np.full((4, 3), 1 / 3, np.float32))  # inputs untouched


def test_merge_refuses_states_of_another_dtype_in_either_order():
  """FixedBins refused a float64 state; Scores and Records promoted to float64, or
  (Records, float64 first) raised lax's TypeError."""
  p = np.array([[0.7, 0.3], [0.2, 0.8]])
  y = np.array([0, 0])
  with jax.enable_x64(True):
    makers = (
      lambda dt: streaming.FixedBins.empty(2, 5, dtype=dt),
      lambda dt: streaming.Scores.empty(2, dtype=dt),
      lambda dt: streaming.Records.empty(2, capacity=4, dtype=dt),
      lambda dt: streaming.Records.empty(2, capacity=4, kind="full", dtype=dt),
      lambda dt: streaming.Calibration.empty(2, 5, capacity=4, dtype=dt),
    )
    for make in makers:
      f32, f64 = make(jnp.float32).update(p, y), make(jnp.float64).update(p, y)
      for a, b in ((f32, f64), (f64, f32)):
        # the message names the state the caller made and what differs (it named a
        # Calibration's FixedBins part, and not the dtypes; found by a review helper)
        what = type(a).__name__ if type(a) is streaming.Calibration else ""
        with pytest.raises(
          ValueError, match=f"cannot merge .*{what}.* of a different configuration"
        ):
          a.merge(b)
      with pytest.raises(ValueError, match="dtype float32 against float64;"):
        f32.merge(f64)
      # the same dtype merges, empty or not
      for dt, st in ((jnp.float32, f32), (jnp.float64, f64)):
        merged = make(dt).merge(st).merge(st)
        count = merged.scores.count if isinstance(merged, streaming.Calibration) else merged.count
        assert int(count) == 4
  # class-wise sums kept by one state only (it said "dtype float32 against float32")
  with pytest.raises(ValueError, match="cw_hi kept by one state only;"):
    streaming.Calibration.empty(4).merge(streaming.Calibration.empty(4, classwise=False))


def test_update_keeps_every_leafs_dtype_under_x64():
  # under x64 Scores.update widened its int32 count to int64: a lax.scan / fori_loop of
  # update failed on its carry type, and merge_across_processes refused the state of a
  # process without rows (an empty state's int32 count against the others' int64)
  rng = np.random.default_rng(5)
  p = rng.dirichlet(np.ones(4), 400).astype(np.float32)
  y = rng.integers(0, 4, 400)
  with jax.enable_x64(True):
    for dt in (jnp.float32, jnp.float64):
      for st in (
        streaming.FixedBins.empty(4, dtype=dt),
        streaming.Scores.empty(4, confusion=True, dtype=dt),
        streaming.Calibration.empty(4, capacity=400, dtype=dt),
      ):
        after = st.update(p[:100], y[:100])
        before = [a.dtype for a in jax.tree.leaves(st)]
        assert [a.dtype for a in jax.tree.leaves(after)] == before, type(st).__name__
        out, _ = jax.lax.scan(
          lambda s, b: (s.update(b[0], b[1]), None), st, (p.reshape(4, 100, 4), y.reshape(4, 100))
        )
        assert (
          int(jax.tree.leaves(out.count if hasattr(out, "count") else out.scores.count)[0]) == 400
        )


def test_merge_across_processes_refuses_what_is_not_a_state():
  """One process returns the state as it is, but a wrong argument raises there too (it came
  back unchanged, and failed only in a multi-process run)."""
  s = streaming.Scores.empty(2).update(jnp.array([[0.5, 0.5]]), jnp.array([0]))
  assert streaming.merge_across_processes(s) is s
  for bad in (None, {"count": 1}, jnp.zeros(3)):
    with pytest.raises(TypeError, match="merge_across_processes takes a FixedBins, Scores"):
      streaming.merge_across_processes(bad)


def test_records_and_calibration_compute_under_a_bare_vmap():
  """``jax.vmap`` of update + compute (no outer jit, no where) equals the loop; it raised a
  ConcretizationTypeError (the count was concrete, the invalid-batch count traced)."""
  rng = np.random.default_rng(0)
  p = rng.dirichlet(np.ones(3), (2, 12)).astype(np.float32)
  y = rng.integers(0, 3, (2, 12)).astype(np.int32)

  def rec(pi, yi):
    return streaming.Records.empty(3, capacity=16).update(pi, yi).compute(3)["conf_ece"]

  def cal(pi, yi):
    return streaming.Calibration.empty(3, 3, capacity=16).update(pi, yi).compute()["conf_ce"]

  for fn in (rec, cal):
    got = np.asarray(jax.vmap(fn)(p, y))
    np.testing.assert_allclose(got, [float(fn(p[i], y[i])) for i in range(2)], rtol=1e-6)
    assert got[0] != got[1]  # distinct data sets


def test_a_batch_of_states_does_not_merge_with_a_single_state():
  # the leaves broadcast: the single state's samples joined every model's state
  rng = np.random.default_rng(0)
  p = jax.nn.softmax(jnp.asarray(rng.normal(size=(3, 20, 4)), jnp.float32))
  y = jnp.asarray(rng.integers(0, 4, (3, 20)))
  batch = jax.vmap(lambda a, b: streaming.Scores.empty(4).update(a, b))(p, y)
  one = streaming.Scores.empty(4).update(p[0], y[0])
  with pytest.raises(ValueError, match=r"cannot merge Scores states of different shapes"):
    batch.merge(one)
  np.testing.assert_array_equal(batch.merge(batch).count, [40, 40, 40])


def test_float64_fixed_bins_match_the_reference_in_every_output():
  """Guards the float64 state's own path (one float64 scatter-add per class and
  interval, not the float32 integer engine): the class-wise errors, ECCE and the
  reliability statistics too, which a swapped class row or a flipped residual
  sign (invisible to ``conf_ece``) would change."""
  rng = np.random.default_rng(6)
  p = rng.dirichlet(np.full(4, 0.5), 120)
  y = rng.integers(0, 4, 120)
  bins = np.array([1, 7, 15])
  with jax.enable_x64(True):
    st = streaming.FixedBins.empty(4, bins, dtype=jnp.float64)
    st = st.update(p[:50], y[:50]).update(p[50:], y[50:])
    got = st.compute()
    rel = st.reliability(15)
    assert got["classwise_ece"].dtype == jnp.float64 and rel.confidence.dtype == jnp.float64
  for name in ("conf_ece", "conf_ce", "conf_ce_corr", "classwise_ece", "classwise_ce"):
    want = [getattr(R, name)(p, y, int(m), "fixed") for m in bins]
    np.testing.assert_allclose(got[name], want, rtol=1e-12, atol=1e-15, err_msg=name)
  np.testing.assert_allclose(got["ecce"], [R.ecce(p, y, int(m)) for m in bins], rtol=1e-12)
  counts, conf, acc, _, _ = R.reliability_stats(p, y, 15)
  np.testing.assert_array_equal(rel.counts, counts)
  np.testing.assert_allclose(rel.confidence, conf, rtol=1e-12)
  np.testing.assert_allclose(rel.accuracy, acc, rtol=1e-12)


@pytest.mark.parametrize(
  "make",
  [
    lambda: streaming.FixedBins.empty(3, 3),
    lambda: streaming.Scores.empty(3),
    lambda: streaming.Records.empty(3, capacity=4),
    lambda: streaming.Calibration.empty(3, 3),
  ],
  ids=["FixedBins", "Scores", "Records", "Calibration"],
)
def test_reduce_empty_stack_raises(make):
  # a stack of 0 states took x[0] (IndexError)
  st = make()
  with pytest.raises(ValueError, match="at least one state, got 0"):
    jax.tree.map(lambda a: a[None][:0], st).reduce()
  one = jax.tree.map(lambda a: a[None], st).reduce()
  assert jax.tree.all(jax.tree.map(lambda a, b: bool(np.array_equal(a, b)), one, st))


def _stack(states):
  """States stacked along a new leading axis (what ``all_gather`` returns)."""
  return jax.tree.map(lambda *xs: jnp.stack(xs), *states)


def _assert_bitwise_equal(got, want):
  """Same type, configuration and leaves, bit for bit (NaN, -0.0 and padding included)."""
  assert type(got) is type(want) and jax.tree.structure(got) == jax.tree.structure(want)
  for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
    a, b = np.asarray(a), np.asarray(b)
    assert (a.dtype, a.shape) == (b.dtype, b.shape)
    assert a.tobytes() == b.tobytes(), (a, b)


_PART = {
  "Calibration": lambda s: s,
  "FixedBins": lambda s: s.bins,
  "Scores": lambda s: s.scores,
  "Records": lambda s: s.records,
}


def _uneven_states(dtype, kind, seed):
  """Six Calibration states (capacity 6): uneven counts, an empty one, an overflowing
  one (10 samples) and one poisoned by a NaN batch under jit (its count still grows)."""
  rng = np.random.default_rng(seed)
  empty = streaming.Calibration.empty(
    3, np.array([3, 7]), capacity=6, records=kind, confusion=True, dtype=dtype
  )
  update = jax.jit(streaming.Calibration.update)
  states = []
  for n, poisoned in ((4, False), (0, False), (10, False), (6, True), (1, False), (3, False)):
    st = empty
    for part in (min(n, 5), n - min(n, 5)):  # two batches of 5 rows, masked to n samples
      p = rng.dirichlet(np.ones(3), 5).astype(dtype)
      if poisoned and st is empty:  # its first batch only
        p[0, 0] = np.nan
      st = update(st, p, rng.integers(0, 3, 5), np.arange(5) < part)
    states.append(st)
  return states


@pytest.mark.parametrize("name", list(_PART))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_reduce_equals_the_sequential_merge_bitwise(name, dtype):
  """``reduce`` of k stacked states is the in-order merge one by one, leaf for leaf.

  TwoSum pairs, counts, the poisoned state's ``invalid``, the records of an
  overflowing state (the sequential merge leaves a gap after it) and the
  records' padding beyond the count included; stacks of k = 1, 2, 5 states.
  """
  kinds = (
    ("top_label", "full") if name == "Records" else ("top_label" if dtype == "float32" else "full",)
  )
  with jax.enable_x64(dtype == "float64"):
    for kind in kinds:
      states = [_PART[name](s) for s in _uneven_states(dtype, kind, len(kind))]
      for k, first in ((1, 0), (2, 0), (5, 0), (5, 1)):  # overflowing: 3rd, poisoned: 4th
        part = states[first : first + k]
        want = part[0]
        for s in part[1:]:
          want = want.merge(s)
        got = _stack(part).reduce()
        _assert_bitwise_equal(got, want)
      if name == "FixedBins":  # the compensation terms are exercised
        assert np.any(np.asarray(got.cw_lo) != 0)
      if name == "Calibration":
        assert int(got.bins.invalid) == int(got.scores.invalid) == int(got.records.invalid) == 1
        assert bool(got.records.overflow) and int(got.records.count) == 20


def test_reduce_of_records_in_order_fills_the_buffer_in_order():
  """Without overflow the merged buffer is each state's records in order, then zeros."""
  rng = np.random.default_rng(3)
  p = rng.dirichlet(np.ones(3), 12).astype(np.float32)
  y = rng.integers(0, 3, 12)
  empty = streaming.Records.empty(3, capacity=5, kind="full")
  cuts = [0, 4, 4, 9, 12]  # counts 4, 0, 5, 3
  states = [empty.update(p[i:j], y[i:j]) for i, j in zip(cuts[:-1], cuts[1:], strict=True)]
  st = _stack(states).reduce()
  assert st.capacity == 20 and int(st.count) == 12 and not bool(st.overflow)
  np.testing.assert_array_equal(st.probs[:12], p)
  np.testing.assert_array_equal(st.labels[:12], y)
  assert not np.any(st.probs[12:]) and not np.any(st.labels[12:])
  np.testing.assert_allclose(st.compute(3)["conf_ce"], metrics.conf_ce(p, y, 3), rtol=1e-6)


def test_records_refuse_more_slots_than_int32_positions_and_count_past_the_limit_as_overflow():
  """Records positions and counts are int32. A buffer above 2^31 - 1 slots wrapped them (a
  merge of two 2^30-sample buffers: count -2^31 and no overflow, so ``data()`` sliced
  ``[:-2^31]``); it is refused before any allocation, by ``empty``, ``merge`` and
  ``reduce`` (checked on shapes only). A count past the limit is -1 and overflowed, as the
  sum states' counts are, and the message says so (it read "-2147483647 samples")."""
  import dataclasses

  from jaxcal._src.streaming import MAX_COUNT

  with pytest.raises(
    ValueError,
    match=r"a Records buffer of capacity 2,147,483,648 would hold 2,147,483,648 entries, above 2\^31",
  ):
    streaming.Records.empty(3, capacity=MAX_COUNT + 1)
  half = jax.eval_shape(
    lambda: streaming.Records.empty(3, capacity=2**30)
  )  # shapes: nothing allocated
  assert half.capacity == 2**30
  with pytest.raises(
    ValueError,
    match=r"a merged Records buffer of capacity 2,147,483,648 would hold 2,147,483,648 entries, ab",
  ):
    jax.eval_shape(lambda a, b: a.merge(b), half, half)
  stacked = jax.tree.map(lambda a: jax.ShapeDtypeStruct((2, *a.shape), a.dtype), half)
  with pytest.raises(
    ValueError,
    match=r"a merged Records buffer of capacity 2,147,483,648 would hold 2,147,483,648 entries, ab",
  ):
    jax.eval_shape(lambda s: s.reduce(), stacked)
  ok = jax.eval_shape(
    lambda a, b: a.merge(b),
    half,
    jax.eval_shape(lambda: streaming.Records.empty(3, capacity=2**30 - 1)),
  )
  assert ok.capacity == MAX_COUNT

  p = np.full((4, 3), 1 / 3, np.float32)
  y = np.zeros(4, np.int32)
  over = streaming.Records.empty(3, capacity=3).update(p, y)  # overflowed: 4 samples offered
  assert bool(over.overflow) and int(over.count) == 4
  near = dataclasses.replace(over, count=jnp.int32(MAX_COUNT - 1))  # 2^31 - 2 offered
  past = {
    "update": near.update(p[:2], y[:2]),
    "merge": near.merge(over),
    "reduce": _stack([near, over]).reduce(),
  }
  for how, st in past.items():
    assert int(st.count) == -1 and bool(st.overflow), how
    with pytest.raises(ValueError, match=r"more than 2\^31 - 1 = 2,147,483,647 samples were"):
      st.compute(1)
    assert np.isnan(jax.jit(lambda r: r.compute(1)["conf_ce"])(st)), how
    assert int(st.update(p, y).count) == -1, how  # sticky, as for the sum states
  _assert_bitwise_equal(past["reduce"], past["merge"])
  exact = dataclasses.replace(  # a merge that ends exactly at the limit keeps its count
    streaming.Records.empty(3, capacity=3).update(p[:1], y[:1]), count=jnp.int32(MAX_COUNT - 4)
  )
  assert int(exact.merge(over).count) == MAX_COUNT


def _num_eqns(jaxpr):
  """Equations of a jaxpr, those of its sub-jaxprs (jit, scan bodies) included."""
  n = 0
  for eqn in jaxpr.eqns:
    n += 1
    for param in eqn.params.values():
      for sub in param if isinstance(param, (tuple, list)) else (param,):
        if isinstance(sub, ClosedJaxpr):
          n += _num_eqns(sub.jaxpr)
        elif isinstance(sub, Jaxpr):
          n += _num_eqns(sub)
  return n


@pytest.mark.parametrize("records", [None, "top_label", "full"])
def test_reduce_program_does_not_grow_with_the_stack(records):
  # one merge per state, unrolled: 54 equations each for FixedBins (k = 128
  # compiled for 8 s), and records merged into growing buffers (15 s eagerly)
  cap = None if records is None else 8
  st = streaming.Calibration.empty(3, 5, capacity=cap, records=records or "top_label")

  def size(k):
    stacked = jax.tree.map(lambda a: jnp.broadcast_to(a, (k,) + a.shape), st)
    return _num_eqns(jax.make_jaxpr(lambda s: s.reduce())(stacked).jaxpr)

  assert size(64) <= size(2) + 4


@pytest.mark.parametrize("kind", ["scores", "records", "fixed_bins"])
def test_jitted_update_does_not_copy_the_batch(kind):
  """The traced fold of the batch to NaN was a product with the whole ``(B, C)`` batch: a
  temporary of the input's size in every jitted update (1.05x for ``Scores``); ``invalid``
  already makes ``compute`` NaN. A bad batch still does, and a good one is unchanged."""
  n, c = 20_000, 100
  state = {
    "scores": streaming.Scores.empty(c),
    "records": streaming.Records.empty(c, kind="top_label", capacity=n),
    "fixed_bins": streaming.FixedBins.empty(c, classwise=False),
  }[kind]
  spec = (jax.ShapeDtypeStruct((n, c), jnp.float32), jax.ShapeDtypeStruct((n,), jnp.int32))
  update = jax.jit(lambda s, p, y: s.update(p, y))
  temp = update.lower(state, *spec).compile().memory_analysis().temp_size_in_bytes
  assert temp < 0.3 * n * c * 4, temp / (n * c * 4)
  p, y = load_cifar("cifar100_densenet121", "test")
  p, y = np.asarray(jax.nn.softmax(p[:500])), y[:500]
  good = update(state, p, y).compute()
  eager = state.update(p, y).compute()
  for k in ("brier", "conf_ece") if kind != "records" else ("conf_ece",):
    if k in good:
      np.testing.assert_array_equal(np.asarray(good[k]), np.asarray(eager[k]))
  bad = p.copy()
  bad[3, 0] = np.nan
  out = update(update(state, bad, y), p, y).compute()
  assert all(np.all(np.isnan(np.asarray(v))) for v in out.values() if v.dtype.kind == "f")


def test_interval_thresholds_are_read_only():
  """The cached thresholds were handed out writable: ``t *= 100`` (a percent axis) rebinned
  every later state with these counts (``classwise_ece`` 0.0045 for 0.1115; a memory-sharing
  review). They are read-only now, and the states keep their values."""
  t = streaming.interval_thresholds(15)
  state = streaming.FixedBins.empty(10, 15)
  for arr in (t, state.thresholds):
    with pytest.raises(ValueError, match="read-only"):
      arr *= 100
  np.testing.assert_array_equal(t, streaming.interval_thresholds((15,)))
  assert t.max() < 1.0 and t.min() > 0.0
