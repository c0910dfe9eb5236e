"""Proper scores and the confidence loss against loop references (float64, from the papers)."""

import pathlib
import sys

import jax
import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))  # --import-mode=importlib
import _reference as R

from jaxcal import scores

NAMES = ["brier", "log_loss", "spherical", "classification_error", "confidence_loss"]


def _data():
  rng = np.random.default_rng(5)
  p = rng.dirichlet(np.full(4, 0.5), 80).astype(np.float32)
  p = p / p.sum(axis=1, keepdims=True)
  p[0] = [0.5, 0.5, 0.0, 0.0]  # argmax tie -> class 0
  p[1] = [0.0, 1.0, 0.0, 0.0]  # p_y = 0 below: log clipped at 1e-12
  y = rng.integers(0, 4, 80)
  y[0], y[1] = 1, 0
  return p, y


P, Y = _data()


@pytest.mark.parametrize("name", NAMES)
def test_score_matches_reference(name):
  f = getattr(scores, name)
  want = getattr(R, name)(P, Y)
  np.testing.assert_allclose(f(P, Y, per_sample=True), want, rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(f(P, Y), want.mean(), rtol=1e-6, atol=1e-6)
  # jit == eager; from_logits == softmax first
  np.testing.assert_allclose(jax.jit(f)(P, Y), f(P, Y), atol=1e-7)
  z = np.log(np.maximum(P, 1e-30)) + 1.5
  np.testing.assert_allclose(
    f(z, Y, from_logits=True), f(np.asarray(jax.nn.softmax(z)), Y), atol=1e-6
  )


def _other_data_sets(k=3):
  """k data sets of P's shape, each with its own probabilities and labels."""
  rng = np.random.default_rng(17)
  ps = rng.dirichlet(np.full(4, 0.7), (k, 80)).astype(np.float32)
  return ps / ps.sum(axis=-1, keepdims=True), rng.integers(0, 4, (k, 80))


@pytest.mark.parametrize("name", NAMES)
def test_vmap_over_distinct_data_sets_equals_the_loop(name):
  # P and three other data sets (different probabilities and labels, not
  # permutations of one set): each member of the batch equals its own eager
  # call and the float64 reference, so a batch that gave any member another
  # one's value would fail (the scores of the four sets all differ).
  f = getattr(scores, name)
  others, labels = _other_data_sets()
  ps, ys = np.concatenate([P[None], others]), np.concatenate([Y[None], labels])
  loop = np.array([float(f(p, y)) for p, y in zip(ps, ys)])
  assert len(np.unique(loop)) == len(loop), loop
  np.testing.assert_allclose(jax.vmap(f)(ps, ys), loop, rtol=1e-6, atol=1e-7)
  want = [getattr(R, name)(p, y).mean() for p, y in zip(ps, ys)]
  np.testing.assert_allclose(loop, want, rtol=1e-6, atol=1e-6)
  # per sample, and from logits
  per = jax.vmap(lambda p, y: f(p, y, per_sample=True))(ps, ys)
  np.testing.assert_allclose(per, [f(p, y, per_sample=True) for p, y in zip(ps, ys)], atol=1e-7)
  zs = np.log(np.maximum(ps, 1e-30)) + 0.5
  got = jax.vmap(lambda z, y: f(z, y, from_logits=True))(zs, ys)
  np.testing.assert_allclose(got, [f(z, y, from_logits=True) for z, y in zip(zs, ys)], atol=1e-7)


def test_score_edge_values():
  assert float(scores.log_loss(P[1:2], Y[1:2])) == pytest.approx(-np.log(1e-12), rel=1e-6)
  assert float(scores.classification_error(P[:1], np.array([0]))) == 0.0  # tie -> class 0
  assert float(scores.classification_error(P[:1], np.array([1]))) == 1.0
  onehot = np.eye(3, dtype=np.float32)
  y = np.arange(3)
  for name in NAMES:  # a perfect one-hot predictor has zero loss
    assert float(getattr(scores, name)(onehot, y)) == pytest.approx(0.0, abs=1e-6)


def test_confidence_loss_is_mean_of_parts():
  r, c = R.confidence(P)
  z = (r == Y).astype(np.float64)
  want = np.mean(1 - z + (c.astype(np.float64) - z) ** 2)
  np.testing.assert_allclose(scores.confidence_loss(P, Y), want, atol=1e-6)


@pytest.mark.parametrize("name", NAMES)
def test_float32_means_match_float64_at_large_n(name):
  rng = np.random.default_rng(11)
  n = 200_000
  p = rng.dirichlet(np.full(10, 0.3), n)
  y = rng.integers(0, 10, n)
  p32 = (p / p.sum(1, keepdims=True)).astype(np.float32)
  want = getattr(R, name)(p32.astype(np.float64), y).mean()
  got = float(getattr(scores, name)(p32, y))
  assert abs(got - want) <= 1e-5 * abs(want) + 1e-9, (got, want)


@pytest.mark.parametrize("name", NAMES)
def test_mean_is_the_mean_of_the_per_sample_losses(name):
  # The mean agrees with the per-sample losses it summarises, for probabilities
  # and logits, on a small matrix and on a host matrix of over 1 MiB whose
  # unaligned rows are read as separate blocks.
  f = getattr(scores, name)
  rng = np.random.default_rng(3)
  big = rng.dirichlet(np.full(100, 0.2), 3_000).astype(np.float32)
  big /= big.sum(1, keepdims=True)
  buf = np.empty(big.nbytes + 128, np.uint8)  # rows starting 16 bytes past a 64-byte boundary
  off = (-buf.ctypes.data) % 64 + 16
  view = buf[off : off + big.nbytes].view(np.float32).reshape(big.shape)
  view[...] = big
  big = view
  assert big.ctypes.data % 64 == 16 and big.nbytes > 1 << 20
  y_big = rng.integers(0, 100, 3_000)
  for p, y in [(P, Y), (big, y_big)]:
    for z, logits in [(p, False), (np.log(np.maximum(p, 1e-30)) + 0.5, True)]:
      per = np.asarray(f(z, y, from_logits=logits, per_sample=True), np.float64)
      np.testing.assert_allclose(f(z, y, from_logits=logits), per.mean(), rtol=2e-6, atol=1e-7)
  want = getattr(R, name)(big.astype(np.float64), y_big).mean()
  np.testing.assert_allclose(f(big, y_big), want, rtol=1e-5)


def test_per_sample_where_and_from_logits_together():
  z = np.log(np.maximum(P, 1e-30)) + 0.5
  mask = np.arange(80) % 4 != 1
  for name in NAMES:
    f = getattr(scores, name)
    per = np.asarray(f(z, Y, from_logits=True, per_sample=True, where=mask))
    full = np.asarray(f(z, Y, from_logits=True, per_sample=True))
    np.testing.assert_allclose(per[mask], full[mask], rtol=1e-6)
    assert np.all(per[~mask] == 0)
    np.testing.assert_allclose(
      f(z, Y, from_logits=True, where=mask), full[mask].mean(), rtol=1e-5, atol=1e-7
    )


@pytest.mark.parametrize("name", ["brier", "spherical", "log_loss"])
def test_confident_rows_keep_their_relative_precision(name):
  """A confident row's loss is far below float32's 1e-7 of terms near 1: ``sum p^2 - 2 p_y + 1``
  gave 0 for a CIFAR-10 row whose Brier score is 2.5e-8 (5,165 of 10,000 rows off by > 1e-3),
  ``1 - p_y / ||p||`` up to 15x the spherical loss, and the log of the softmax of logits
  2.4e-8 for a log loss of 5.2e-8. Each per-sample loss is checked relative to itself."""
  from jaxcal import data

  x, y = data.default_predictions("test")
  x = np.asarray(x, np.float32)
  p = np.asarray(jax.nn.softmax(x), np.float32)  # the float32 rows are the input
  f = getattr(scores, name)
  want = getattr(R, name)(p, y)
  got = np.asarray(f(p, y, per_sample=True), np.float64)
  assert name == "log_loss" or np.mean(want < 1e-4) > 0.25  # many rows are confident
  np.testing.assert_allclose(got, want, rtol=2e-5 if name == "spherical" else 1e-6, atol=0)
  # a near-perfect model: every row's other classes share 1e-4 (true Brier 1.2e-8)
  near = np.full((50, 4), 1e-4 / 3, np.float32)
  near[:, 0] = 1 - 1e-4
  yy = np.zeros(50, int)
  assert float(f(near, yy)) == pytest.approx(getattr(R, name)(near, yy).mean(), rel=1e-5)
  if name == "log_loss":  # from logits: a logit gap of 20 (loss 5.2e-8 per sample)
    z = np.zeros((50, 4), np.float32)
    z[:, 0] = 20.0
    want = np.log1p(3 * np.exp(-20.0))
    np.testing.assert_allclose(f(z, yy, from_logits=True, per_sample=True), want, rtol=1e-6)


@pytest.mark.parametrize("name", ["brier", "spherical"])
def test_rows_with_two_entries_above_half_within_tolerance(name):
  """A row summing to one within the tolerance, entries down to ``-tol``, can hold two entries
  above 1/2; the accurate form assumed the label's was the only one and took the other's
  complement: ``[-0.0008, 0.5004, 0.5004]`` gave a Brier score of 0.4992 for 0.5, and at
  C = 100 two entries of 0.549 (98 of -0.001) 0.41 for 0.50, the spherical loss 0.227 for
  0.293 (found by a review helper). Checked per sample against float64, eager and under jit,
  beside confident rows and random rows near that edge."""
  rng = np.random.default_rng(0)
  rows = []
  for c in (3, 10, 100):
    for top in (0.5004, 0.549, 0.5 + 1e-6):
      r = np.zeros(c)
      r[0] = r[1] = top
      r[2:] = (1.0 - 2 * top) / (c - 2)  # negative, each within the tolerance
      if r[2] >= -1e-3:
        rows.append((r, 1))
        rows.append((r, 0))
        rows.append((r, c - 1))
  confident = np.full(3, 1e-5)
  confident[0] = 1 - 2e-5
  x = rng.dirichlet(np.full(10, 0.05), size=200)
  f = getattr(scores, name)
  for r, label in rows + [(confident, 0)] + [(x[i], int(rng.integers(10))) for i in range(200)]:
    p = np.asarray(r, np.float32)[None]
    y = np.array([label])
    want = getattr(R, name)(p, y)
    np.testing.assert_allclose(f(p, y, per_sample=True), want, rtol=2e-5, atol=0)
    np.testing.assert_allclose(jax.jit(f)(p, y), want[0], rtol=2e-5, atol=0)
