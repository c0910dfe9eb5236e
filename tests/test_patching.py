"""Patching (SPEC §6, Algorithm 1): monotone Brier, exact replay, held-out U_comb."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcal import utility as U
from jaxcal._src.recal import base
from jaxcal._src.recal.linesearch import armijo_stepsize
from jaxcal._src.recal.patching import Patching, _fit, project_simplex

FIT = dict(
  from_logits=True,
  max_steps=8,
  tol=0.0,
  num_samples=6,
  stepsize="err_over_c",
  seed=0,
  chunk_size=None,
  verbose=False,
  print_every=10,
)


def project_np(x):
  """float64 projection by bisection on τ: Σ max(x - τ, 0) = 1."""
  out = np.zeros_like(x, dtype=np.float64)
  for i, row in enumerate(np.asarray(x, np.float64)):
    lo, hi = row.min() - 1, row.max()
    for _ in range(200):
      mid = (lo + hi) / 2
      lo, hi = (mid, hi) if np.maximum(row - mid, 0).sum() > 1 else (lo, mid)
    out[i] = np.maximum(row - (lo + hi) / 2, 0)
  return out


def _synthetic(n=400, c=5, seed=0):
  """Over-confident logits: labels drawn from softmax(z / 2.5)."""
  rng = np.random.default_rng(seed)
  z = (rng.normal(size=(n, c)) * 2.5).astype(np.float32)
  pt = np.exp(z / 2.5)
  pt /= pt.sum(1, keepdims=True)
  y = (rng.random(n)[:, None] > np.cumsum(pt, 1)).sum(1).clip(0, c - 1)
  return z, y


def test_project_simplex_matches_bisection():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(50, 7)).astype(np.float32)
  x[:5] = np.abs(x[:5]) / np.abs(x[:5]).sum(1, keepdims=True)  # already on the simplex
  x[5:10, :3] = 0.4  # ties
  got = np.asarray(project_simplex(jnp.asarray(x)))
  np.testing.assert_allclose(got, project_np(x), atol=2e-6)
  np.testing.assert_allclose(got.sum(1), 1, atol=1e-6)
  assert got.min() >= 0


def test_armijo_condition_holds():
  f = lambda x: jnp.sum((x - 1.0) ** 4)
  x = jnp.array([3.0, -1.0])
  g = 4 * (x - 1.0) ** 3
  eta, failed = armijo_stepsize(f, x, -g, value=f(x), grad=g, init_stepsize=1.0)
  assert not bool(failed)
  assert float(f(x - eta * g)) <= float(f(x) - 1e-4 * eta * jnp.dot(g, g)) + 1e-6
  assert float(f(x - eta / 0.5 * g)) > float(
    f(x) - 1e-4 * eta / 0.5 * jnp.dot(g, g)
  )  # largest such step


def test_brier_never_increases_and_replay_reproduces():
  z, y = _synthetic()
  rc, p_final = _fit(z, y, **FIT)
  assert isinstance(rc, Patching) and rc.num_steps == 8
  b = np.asarray(rc.briers)
  assert b.shape == (9,) and np.all(np.diff(b) < 0)
  replayed = rc(z)
  np.testing.assert_allclose(replayed, p_final, atol=1e-6)
  onehot = np.eye(5)[y]
  assert float(np.mean(np.sum((np.asarray(replayed) - onehot) ** 2, 1))) == pytest.approx(
    b[-1], abs=1e-6
  )
  np.testing.assert_allclose(np.asarray(replayed).sum(1), 1, atol=1e-5)
  np.testing.assert_allclose(jax.jit(lambda r, x: r(x))(rc, z), replayed, atol=1e-6)  # a pytree
  assert set(np.unique(np.asarray(rc.xi))) <= {-1.0, 1.0} and np.all(np.asarray(rc.eta) > 0)


def test_save_load_roundtrip(tmp_path):
  z, y = _synthetic(seed=1)
  rc = base.fit("patching", z, y, max_steps=3, num_samples=6)  # shapes/options shared: one compile
  assert "patching" in base.methods()
  for ext in (".npz", ".msgpack"):
    path = str(tmp_path / f"patch{ext}")
    base.save(rc, path)
    back = base.load(path)
    assert isinstance(back, Patching) and back.from_logits
    np.testing.assert_array_equal(back(z), rc(z))


def test_tolerance_stops_and_probability_inputs():
  z, y = _synthetic(seed=2)
  p = np.asarray(jax.nn.softmax(z))
  rc = base.fit("patching", p, y, from_logits=False, max_steps=50, tol=1.0, num_samples=6)
  assert rc.num_steps == 0 and rc.errors.shape == (1,)  # err <= 1 at once: no patch
  np.testing.assert_allclose(rc(p), p, atol=1e-7)


def test_held_out_u_comb_improves_on_cifar100(cifar_dir):
  d = cifar_dir / "cifar100_resnet110"
  zv, yv, zt, yt = (
    np.load(d / f)
    for f in ("val_logits.npy", "val_labels.npy", "test_logits.npy", "test_labels.npy")
  )
  zv, yv, zt, yt = zv[:2500], yv[:2500], zt[:2500], yt[:2500]
  rc = base.fit("patching", zv, yv, max_steps=12, num_samples=0, stepsize="quadratic")
  assert np.all(np.diff(np.asarray(rc.briers)) < 0)
  before = float(U.uc_class(zt, yt, "comb", from_logits=True))
  after = float(U.uc_class(rc(zt), yt, "comb"))
  assert after < before, (before, after)


def test_bad_options_raise():
  z, y = _synthetic(n=50)
  with pytest.raises(ValueError, match="stepsize"):
    base.fit("patching", z, y, stepsize="huge")
  with pytest.raises(ValueError, match="stepsize"):
    base.fit("patching", z, y, stepsize=-1.0)
  with pytest.raises(ValueError, match="max_steps"):
    base.fit("patching", z, y, max_steps=-1)
  with pytest.raises(ValueError, match="num_samples"):
    base.fit("patching", z, y, num_samples=2.5)
  with pytest.raises(ValueError, match="tol"):
    base.fit("patching", z, y, tol=float("nan"))
  with pytest.raises(ValueError, match="labels"):
    base.fit("patching", z, np.full(50, 9))
  bad = z.copy()
  bad[0, 0] = np.inf
  with pytest.raises(ValueError, match="inf"):
    base.fit("patching", bad, y)


def test_cut_points_select_the_same_samples_with_a_margin():
  from jaxcal._src.recal.patching import _cut_points

  rng = np.random.default_rng(5)
  v = np.round(rng.uniform(-1, 1, 400), 2).astype(np.float32)  # tied values
  vals = np.unique(v)
  for a, b in [(3, 40), (0, 10), (50, len(vals) - 1), (0, len(vals) - 1), (7, 7)]:
    lo, hi = vals[a], vals[b]
    lc, hc = map(float, _cut_points(jnp.asarray(v), jnp.float32(lo), jnp.float32(hi)))
    np.testing.assert_array_equal((v >= lc) & (v <= hc), (v >= lo) & (v <= hi))
    assert lc <= lo and hc >= hi
    if a > 0:
      assert vals[a - 1] < lc < lo  # strictly between
    if b < len(vals) - 1:
      assert hi < hc < vals[b + 1]
