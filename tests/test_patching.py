"""Patching (Algorithm 1 of the utility paper): monotone Brier, exact replay,
held-out U_comb, gain-matrix witnesses, blocked device loop, progress bar."""

from __future__ import annotations

import io
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))  # --import-mode=importlib
from _cpu_devices import cpu_devices_env
from _reference import uc_sorted
from conftest import no_new_programs

from jaxcal import recalibrate as R
from jaxcal import utility as U
from jaxcal._src.progress import Progress
from jaxcal._src.recal.linesearch import armijo_stepsize
from jaxcal._src.recal.patching import Patching, _fit, project_simplex

FIT = dict(max_steps=8, tol=0.0, num_samples=6, progress=False)


def project_np(x):
  """float64 projection by bisection on τ (all rows at once): Σ max(x - τ, 0) = 1."""
  x = np.asarray(x, np.float64)
  lo, hi = x.min(1) - 1, x.max(1)
  for _ in range(100):
    mid = (lo + hi) / 2
    big = np.maximum(x - mid[:, None], 0).sum(1) > 1
    lo, hi = np.where(big, mid, lo), np.where(big, hi, mid)
  return np.maximum(x - ((lo + hi) / 2)[:, None], 0)


def _synthetic(n=400, c=5, seed=0):
  """Over-confident logits: labels drawn from softmax(z / 2.5)."""
  rng = np.random.default_rng(seed)
  z = (rng.normal(size=(n, c)) * 2.5).astype(np.float32)
  pt = np.exp(z / 2.5)
  pt /= pt.sum(1, keepdims=True)
  y = (rng.random(n)[:, None] > np.cumsum(pt, 1)).sum(1).clip(0, c - 1)
  return z, y


def _replay_np(p, rc):
  """float64 replay of the patches from the paper's update rule, one row at a time."""
  p = np.asarray(p, np.float64).copy()
  for t in range(rc.num_steps):
    kind, vec, mat = int(rc.kind[t]), np.asarray(rc.vec[t]), np.asarray(rc.mat[t], np.float64)
    for i, row in enumerate(p):
      if kind == 0:
        ubar = vec
      elif kind == 1:
        order = np.argsort(-row, kind="stable")
        ubar = np.empty_like(row)
        ubar[order] = vec
      else:
        ubar = -mat[:, np.argmin(row @ mat)]
      v = row @ ubar
      if rc.lo[t] <= v <= rc.hi[t]:
        p[i] = project_np((row - float(rc.eta[t]) * float(rc.xi[t]) * ubar)[None])[0]
  return p


def _ubar_np(p, kind, vec, mat):
  """``(n, C)`` rows ``ū(p_i)`` of a linear (0), rank (1) or decision (2) witness, float64."""
  p = np.asarray(p, np.float64)
  vec, mat = np.asarray(vec, np.float64), np.asarray(mat, np.float64)
  if kind == 0:
    return np.broadcast_to(vec, p.shape)
  if kind == 1:  # ū_j = θ_{rank(p, j)}, rank 0 the largest, ties to the lower index
    order = np.argsort(-p, axis=1, kind="stable")
    ranks = np.empty_like(order)
    np.put_along_axis(ranks, order, np.arange(p.shape[1])[None], axis=1)
    return vec[ranks]
  return -mat.T[np.argmin(p @ mat, axis=1)]


def _ucs(v, u):
  """UC of each column (float64 reference)."""
  return np.array([uc_sorted(a, b) for a, b in zip(v.T, u.T)])


def _check_steps_np(rc, z, y, *, seed, num_samples, stepsize="err_over_c", steps=None):
  """The first ``steps`` steps of a fit (family U_comb) against float64 numpy from Algorithm 1.

  At step t, from the predictions P_t of the replay: the audited error is the
  largest UC over U_comb and the step's fresh U_lin / U_rank draws (keys
  fold_in(key(seed), t), split in three), and equals (1/n) Σ <p_i - Y_i, w(p_i)>
  of the stored patch w = ξ ū 1[v in [lo, hi]]; η is the backtracking Armijo
  step on Brier(Π(P - η W)) (c1 = 1e-4, halving) from err / C (times a float
  stepsize) or err / mean ||w||² ("quadratic"), slope -2 err; the recorded Brier
  score is that of P_t.
  """
  n, c = z.shape
  onehot = np.eye(c)[y]
  topk = (np.arange(c)[None] < np.arange(1, c + 1)[:, None]).astype(np.float64)  # θ = 1 on top K
  traj = np.asarray(rc.trajectory(z), np.float64)
  brier = lambda q: np.mean(np.sum((q - onehot) ** 2, 1))
  for t in range(rc.num_steps + 1 if steps is None else steps):
    p = traj[t]
    assert float(rc.briers[t]) == pytest.approx(brier(p), rel=1e-5), t
    lin, rnk = np.eye(c), topk  # U_CWE: a = e_k; U_topK
    if num_samples:
      k1, k2, _ = jax.random.split(jax.random.fold_in(jax.random.key(seed), t), 3)
      m = num_samples // 2
      lin = np.concatenate([lin, np.asarray(U.sample_linear(k1, num_samples - m, c).params)])
      rnk = np.concatenate([rnk, np.asarray(U.sample_rank(k2, m, c).params)])
    order = np.argsort(-p, axis=1, kind="stable")  # rank 0 the largest, ties to the lower index
    rank_y = np.argmax(order == y[:, None], 1)  # projected rows hold tied zeros
    ucs = np.concatenate(
      [_ucs(p @ lin.T, lin[:, y].T), _ucs(-np.sort(-p, 1) @ rnk.T, rnk[:, rank_y].T)]
    )
    err = float(rc.errors[t])
    assert err == pytest.approx(ucs.max(), rel=1e-4, abs=1e-6), t
    if t == rc.num_steps:
      break
    ubar = _ubar_np(p, int(rc.kind[t]), rc.vec[t], rc.mat[t])
    v = np.sum(p * ubar, 1)
    w = float(rc.xi[t]) * ubar * ((v >= float(rc.lo[t])) & (v <= float(rc.hi[t])))[:, None]
    assert err == pytest.approx(np.mean(np.sum((p - onehot) * w, 1)), rel=1e-4, abs=1e-6), t
    if stepsize == "quadratic":
      eta = err / np.mean(np.sum(w * w, 1))
    else:
      eta = (1.0 if stepsize == "err_over_c" else stepsize) * err / c
    b0 = brier(p)
    for _ in range(30):
      if brier(project_np(p - eta * w)) <= b0 - 1e-4 * eta * 2 * err:
        break
      eta *= 0.5
    assert float(rc.eta[t]) == pytest.approx(eta, rel=1e-4), t


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
  assert isinstance(rc, Patching) and rc.num_steps == 8 and rc.stop_reason == "max_steps"
  assert int(rc.num_iter) == 8 and rc.num_classes == 5
  b = np.asarray(rc.briers)
  assert b.shape == (9,) and np.all(np.diff(b) < 0)
  replayed = rc(z)
  np.testing.assert_allclose(replayed, p_final, atol=1e-6)
  onehot = np.eye(5)[y]
  assert float(np.mean(np.sum((np.asarray(replayed) - onehot) ** 2, 1))) == pytest.approx(
    b[-1], abs=1e-6
  )
  np.testing.assert_allclose(np.asarray(replayed).sum(1), 1, atol=1e-5)
  run = jax.jit(lambda r, x: r(x))
  np.testing.assert_allclose(run(rc, z), replayed, atol=1e-6)  # a pytree
  bad = z.copy()
  bad[3, 1] = np.nan
  # under jit: the bad row is NaN, never a plausible row; the others keep their values
  got = np.asarray(run(rc, bad))
  assert np.isnan(got[3]).all()
  np.testing.assert_allclose(np.delete(got, 3, 0), np.delete(np.asarray(replayed), 3, 0), atol=1e-6)
  steps = np.asarray(jax.jit(lambda r, x: r.trajectory(x))(rc, bad))
  assert np.isnan(steps[:, 3]).all() and np.isfinite(np.delete(steps, 3, 1)).all()
  assert set(np.unique(np.asarray(rc.xi))) <= {-1.0, 1.0} and np.all(np.asarray(rc.eta) > 0)
  np.testing.assert_allclose(
    _replay_np(jax.nn.softmax(jnp.asarray(z)), rc), np.asarray(replayed), atol=1e-5
  )
  traj = rc.trajectory(z)
  assert traj.shape == (9, 400, 5)
  np.testing.assert_allclose(traj[-1], replayed, atol=1e-6)
  _check_steps_np(rc, z, y, seed=0, num_samples=6)
  # the stopping rule err <= tol at equality: tol = the error audited after patch 3
  # (all earlier ones larger) stops there; tol = the last error stops at max_steps
  # with reason "tol" (both hold: the tolerance is what was asked)
  errs = np.asarray(rc.errors)
  for t in (3, 8):
    assert np.all(errs[:t] > errs[t])
    at = _fit(z, y, **{**FIT, "tol": float(errs[t])})[0]
    assert (at.num_steps, at.stop_reason, bool(at.converged)) == (t, "tol", True)
    np.testing.assert_array_equal(np.asarray(at.eta), np.asarray(rc.eta[:t]))


def test_each_step_audits_the_worst_witness_and_takes_the_armijo_step():
  # a float stepsize scales err / C (40: halved several times); the seed draws
  # the fresh witnesses, an odd number of them (4 linear, 3 rank)
  z, y = _synthetic(seed=6)
  rc = R.fit_patching(z, y, **{**FIT, "num_samples": 7}, seed=5, stepsize=40.0)
  _check_steps_np(rc, z, y, seed=5, num_samples=7, stepsize=40.0)
  assert np.all(np.asarray(rc.eta) < 40.0 * np.asarray(rc.errors[:-1]) / 5 / 3)


def test_the_block_schedule_does_not_change_the_fit(monkeypatch):
  """Blocks of one step and blocks of many give the same patches (keys fold in the step)."""
  import jaxcal._src.recal.patching as P

  z, y = _synthetic(seed=3)
  a = R.fit_patching(z, y, **{**FIT, "max_steps": 5})
  monkeypatch.setattr(P.np, "clip", lambda x, lo, hi: lo)  # every block = one step
  b = R.fit_patching(z, y, **{**FIT, "max_steps": 5})
  for f in ("kind", "vec", "lo", "hi", "xi", "eta", "errors", "briers"):
    np.testing.assert_array_equal(np.asarray(getattr(a, f)), np.asarray(getattr(b, f)), f)


def test_save_load_roundtrip(tmp_path):
  z, y = _synthetic(seed=1)
  rc = R.fit("patching", z, y, max_steps=5, num_samples=6, progress=False)
  assert "patching" in R.methods()
  path = tmp_path / "patch.npz"
  R.save(rc, path)
  back = R.load(path)
  assert isinstance(back, Patching) and back.from_logits and back.stop_reason == rc.stop_reason
  np.testing.assert_array_equal(back(z), rc(z))


def test_applying_a_fit_again_compiles_nothing():
  # The patches' scan ran a new closure on each eager call: 0.5-0.8 s of
  # compiling per call of rc(x), apply or trajectory on test data.
  z, y = _synthetic(seed=1)
  rc = R.fit("patching", z, y, max_steps=5, num_samples=6, progress=False)
  other = z[::-1] * 0.5
  first, steps = rc(z), rc.trajectory(z)
  with no_new_programs():
    again, later = rc(other), rc.trajectory(other)
  np.testing.assert_array_equal(rc(z), first)
  np.testing.assert_allclose(later[-1], again, rtol=1e-6)
  assert steps.shape == later.shape == (rc.num_steps + 1, *z.shape)


def test_tolerance_stops_and_probability_inputs():
  z, y = _synthetic(seed=2)
  p = np.asarray(jax.nn.softmax(z))
  rc = R.fit("patching", p, y, from_logits=False, max_steps=8, tol=1.0, num_samples=6)
  assert rc.num_steps == 0 and rc.errors.shape == (1,)  # err <= 1 at once: no patch
  assert rc.stop_reason == "tol" and bool(rc.converged)
  # each row over its float32 sum (1 within a few roundings): 2 ulps at most
  np.testing.assert_allclose(rc(p), p, atol=3e-7)


def test_probability_rows_come_back_on_the_simplex_whatever_the_patches_reach():
  """A patch projects only its interval's rows onto the simplex: rows of probabilities off
  it within the check's tolerance, or in bfloat16, came back as they were when no patch
  reached them (sums 1.0009 after one patch, 1.002 from bfloat16; found by a review
  helper). The start is each row over its sum, in the fit and in every apply."""
  z, y = _synthetic(seed=2)
  p = np.asarray(jax.nn.softmax(z))
  off = p * np.float32(1.0009)  # passes the simplex check
  for steps in (0, 1):
    rc = R.fit("patching", off, y, from_logits=False, max_steps=steps, progress=False)
    assert rc.num_steps == steps
    for x in (off, jnp.asarray(p, jnp.bfloat16), jnp.asarray(p, jnp.float16)):
      q = np.asarray(rc(x), np.float64)
      np.testing.assert_allclose(q.sum(1), 1.0, atol=3e-7)
    traj = np.asarray(rc.trajectory(off), np.float64)
    np.testing.assert_allclose(traj.sum(-1), 1.0, atol=3e-7)
  # rows already on the simplex move by a few roundings at most
  np.testing.assert_allclose(
    R.fit("patching", p, y, from_logits=False, max_steps=0)(p), p, atol=3e-7
  )


def test_a_jax_probability_array_is_not_consumed_and_x64_fits():
  # the fit donated its state, which held the caller's own float32 buffer: the
  # caller's array was deleted; and under x64 the loop's stop reason changed dtype
  z, y = _synthetic(seed=2)
  p = jax.nn.softmax(jnp.asarray(z, jnp.float32))
  before = np.asarray(p).copy()
  rc = R.fit("patching", p, y, from_logits=False, max_steps=3, num_samples=0, progress=False)
  assert not p.is_deleted()
  np.testing.assert_array_equal(np.asarray(p), before)
  with jax.enable_x64(True):
    rc64 = R.fit("patching", z.astype(np.float64), y, max_steps=3, num_samples=0, progress=False)
    assert rc64.eta.dtype == jnp.float64
    # a float64 fit applies to float32 / float16 inputs too, in float64 (its scan's
    # carry changed dtype: a TypeError)
    want = np.asarray(rc64(z))
    for dt in (np.float32, np.float16):
      zd = z.astype(dt)
      got, steps = rc64(zd), rc64.trajectory(zd)
      assert got.dtype == steps.dtype == jnp.float64
      np.testing.assert_allclose(np.asarray(got), np.asarray(rc64(zd.astype(np.float64))))
      np.testing.assert_allclose(np.asarray(steps[-1]), np.asarray(got))
    np.testing.assert_allclose(np.asarray(rc64(z.astype(np.float32))), want, atol=1e-5)
  assert rc64.num_steps == rc.num_steps == 3
  np.testing.assert_allclose(np.asarray(rc64.errors), np.asarray(rc.errors), rtol=1e-4)


def test_gain_matrix_witnesses_are_audited_and_replayed():
  """The aligned / misaligned gain-matrix classes of App. C.2 as patching witnesses."""
  z, y = _synthetic(n=300, c=6, seed=4)
  key = jax.random.key(0)
  mis = U.sample_misaligned_gain(key, 4, 6, num_groups=2)
  rc = R.fit_patching(
    z,
    y,
    family=None,
    num_samples=0,
    witnesses=mis,
    sample_witnesses=lambda k: U.sample_aligned_gain(k, 8, 6),
    max_steps=6,
    tol=0.0,
    progress=False,
  )
  assert rc.mat.shape == (rc.num_steps, 6, 6) and np.all(np.asarray(rc.kind) == 2)
  assert np.all(np.diff(np.asarray(rc.briers)) < 0)
  np.testing.assert_allclose(
    _replay_np(jax.nn.softmax(jnp.asarray(z)), rc), np.asarray(rc(z)), atol=1e-5
  )
  # the first audited error is the worst UC over the fixed class and the step's fresh draw
  p = jax.nn.softmax(jnp.asarray(z))
  fixed = float(jnp.max(U.uc_sweep(p, y, mis)))
  assert float(rc.errors[0]) >= fixed - 1e-6
  before = float(jnp.max(U.uc_sweep(p, y, mis)))
  after = float(jnp.max(U.uc_sweep(rc(z), y, mis)))
  assert after < before


def test_mixed_witness_kinds_replay():
  z, y = _synthetic(n=300, c=5, seed=5)
  rc = R.fit_patching(
    z,
    y,
    num_samples=4,
    witnesses=[U.sample_aligned_gain(jax.random.key(1), 3, 5), U.top_k(jnp.array([2]), 5)],
    max_steps=10,
    tol=0.0,
    progress=False,
  )
  np.testing.assert_allclose(
    _replay_np(jax.nn.softmax(jnp.asarray(z)), rc), np.asarray(rc(z)), atol=1e-5
  )


def test_top_class_witness_is_the_rank_valuation_on_the_top_label():
  # U_TCE's one utility 1[j = argmax p]: a rank patch with theta = e_0, whose
  # audited error is the UC of (max p, 1[y = argmax p]) (float64 reference)
  z, y = _synthetic(n=120, c=4, seed=3)
  rc = R.fit_patching(z, y, family="tce", num_samples=0, max_steps=1, tol=0.0, progress=False)
  assert int(rc.kind[0]) == 1
  np.testing.assert_array_equal(np.asarray(rc.vec[0]), [1.0, 0.0, 0.0, 0.0])
  p = np.asarray(jax.nn.softmax(jnp.asarray(z)), np.float64)
  want = uc_sorted(p.max(1), (p.argmax(1) == y).astype(np.float64))
  assert float(rc.errors[0]) == pytest.approx(want, rel=1e-4)


def test_fresh_samples_split_into_linear_and_rank_utilities():
  # num_samples = s draws s - s // 2 linear and s // 2 rank utilities from the
  # first two keys of split(fold_in(key(seed), t), 3); the error is the largest UC
  # (float64). s = 1: one linear utility and no rank one; 3: two and one (a swapped
  # split gives one and two; s = 2, one and one, would cost a third compile for nothing).
  z, y = _synthetic(n=120, c=4, seed=3)
  p = np.asarray(jax.nn.softmax(jnp.asarray(z)), np.float64)
  order = np.argsort(-p, axis=1, kind="stable")
  rank_y = np.argmax(order == y[:, None], 1)
  for s in (1, 3):
    rc = R.fit_patching(
      z, y, family=None, num_samples=s, max_steps=1, tol=0.0, seed=1, progress=False
    )
    k1, k2, _ = jax.random.split(jax.random.fold_in(jax.random.key(1), 0), 3)
    lin = np.asarray(U.sample_linear(k1, s - s // 2, 4).params, np.float64)
    ucs = [uc_sorted(p @ a, a[y]) for a in lin]
    if s // 2:
      rnk = np.asarray(U.sample_rank(k2, s // 2, 4).params, np.float64)
      ucs += [uc_sorted(-np.sort(-p, 1) @ t, t[rank_y]) for t in rnk]
    assert float(rc.errors[0]) == pytest.approx(max(ucs), rel=1e-4), s
    if s == 1:
      assert int(rc.kind[0]) == 0
      np.testing.assert_allclose(np.asarray(rc.vec[0]), lin[0], rtol=1e-6)


def test_held_out_u_comb_improves_on_cifar100(cifar_dir):
  d = cifar_dir / "cifar100_resnet110"
  zv, yv, zt, yt = (
    np.load(d / f)
    for f in ("val_logits.npy", "val_labels.npy", "test_logits.npy", "test_labels.npy")
  )
  zv, yv, zt, yt = zv[:2500], yv[:2500], zt[:2500], yt[:2500]
  rc = R.fit("patching", zv, yv, max_steps=12, num_samples=0, stepsize="quadratic")
  assert np.all(np.diff(np.asarray(rc.briers)) < 0)
  _check_steps_np(rc, zv, yv, seed=0, num_samples=0, stepsize="quadratic", steps=2)
  before = float(U.uc_class(zt, yt, "comb", from_logits=True))
  after = float(U.uc_class(rc(zt), yt, "comb"))
  assert after < before, (before, after)


def test_progress_bar_appears_only_for_long_fits():
  out = io.StringIO()
  bar = Progress(10, "patching", delay=0.0, min_interval=0.0, stream=out)
  bar.update(3, "err 0.01")
  bar.close("tol", done=3)
  lines = out.getvalue().split("\r")
  assert "patching" in lines[1] and "3/10" in lines[1] and out.getvalue().endswith("\n")
  quiet = io.StringIO()
  bar = Progress(10, "patching", delay=60.0, stream=quiet)
  bar.update(3)
  bar.close()
  assert quiet.getvalue() == ""
  off = io.StringIO()
  bar = Progress(10, "patching", enabled=False, delay=0.0, stream=off)
  bar.update(3)
  bar.close()
  assert off.getvalue() == ""


def test_bad_options_raise():
  z, y = _synthetic(n=50)
  for kw, match in [
    ({"stepsize": "huge"}, "stepsize"),
    ({"stepsize": -1.0}, "stepsize"),
    ({"max_steps": -1}, "max_steps must be >= 0"),
    ({"num_samples": 2.5}, "num_samples must be an int"),
    ({"tol": float("nan")}, "tol must be a finite number"),
    ({"family": "lin"}, "family must be"),
    ({"family": None, "num_samples": 0}, "no witness"),
    ({"witnesses": U.similarity(jnp.eye(5)[None])}, "similarity"),
    ({"witnesses": U.sample_linear(jax.random.key(0), 3, 4)}, "C = 4 classes"),
    ({"sample_witnesses": 3}, "sample_witnesses must be a function"),
    ({"witnesses": 3}, "witnesses must be a jaxcal.utility.Utility batch or a list of them"),
    # a draw of sample_witnesses is checked as the fixed witnesses are (it was a JAX
    # concatenate TypeError, or out-of-range parameters silently patched against)
    ({"sample_witnesses": lambda k: 3}, r"sample_witnesses\(key\) must be a .*Utility"),
    (
      {"sample_witnesses": lambda k: U.sample_linear(k, 3, 4)},
      r"sample_witnesses\(key\): linear utility is defined for C = 4 classes",
    ),
    (
      {"sample_witnesses": lambda k: U.linear(jnp.ones(5) / 5)},
      r"sample_witnesses\(key\) must be a batch with one leading axis",
    ),
    (
      {"sample_witnesses": lambda k: U.linear(3 * jnp.ones((2, 5)))},
      r"must lie in \[-1, 1\]",
    ),
    (
      {"witnesses": [U.Utility(jnp.zeros((1, 5, k)), "decision") for k in (2, 3)]},
      r"decision witnesses must all have the same number of actions K, got \[2, 3\]",
    ),
    ({"max_step": 3}, "did you mean 'max_steps'"),
    # counted in int32: numpy's OverflowError from inside JAX (found by a review helper)
    ({"max_steps": 2**31}, "max_steps must be <= 2147483647, got 2147483648"),
    ({"num_samples": 10**12}, "num_samples must be <= 2147483647"),
    ({"seed": 2**63}, "seed must be <= 9223372036854775807"),
    ({"progress": "no"}, "progress must be True or False, got 'no'"),
  ]:
    with pytest.raises(ValueError, match=match):
      R.fit("patching", z, y, **kw)
  with pytest.raises(ValueError, match="labels"):
    R.fit("patching", z, np.full(50, 9))
  bad = z.copy()
  bad[0, 0] = np.inf
  with pytest.raises(ValueError, match="inf"):
    R.fit("patching", bad, y)


def test_every_draw_of_sample_witnesses_is_checked():
  # only one draw (with a key the fit never uses) was checked: a later draw with
  # parameters outside [-1, 1] was patched against silently, and one that U.linear
  # turned into NaN under the trace ended the fit as "no Brier decrease"
  z, y = _synthetic(n=120)

  def sampler(k):  # valid on most keys, scaled out of range on about a third of them
    scale = jnp.where(jax.random.uniform(k) < 0.35, 5.0, 0.5)
    return U.Utility(scale * jax.random.uniform(jax.random.fold_in(k, 1), (3, 5)), "linear")

  assert float(jax.random.uniform(jax.random.key(0))) >= 0.35  # the probe draw is valid
  with pytest.raises(
    ValueError, match=r"sample_witnesses drew utilities .* at step \d+ of the fit"
  ):
    R.fit_patching(
      z,
      y,
      max_steps=30,
      tol=0.0,
      family=None,
      num_samples=0,
      sample_witnesses=sampler,
      progress=False,
    )


def test_patch_storage_grows_with_the_patches_taken(monkeypatch):
  import jaxcal._src.recal.patching as P

  z, y = _synthetic(seed=4)
  seen = []
  run = P._run_block
  monkeypatch.setattr(
    P,
    "_run_block",
    lambda state, *a, **k: seen.append(state.patches["vec"].shape[0]) or run(state, *a, **k),
  )
  # a large max_steps that tol ends at once: storage for 64 patches, not 2**20
  rc = R.fit_patching(z, y, **{**FIT, "max_steps": 10**6, "tol": 10.0})
  assert rc.num_steps == 0 and rc.stop_reason == "tol" and max(seen) == 64
  # 150 one-step blocks: the storage doubles 64 -> 128 -> 256, same fit as unpadded
  seen.clear()
  monkeypatch.setattr(P.np, "clip", lambda x, lo, hi: lo)
  a = R.fit_patching(z, y, **{**FIT, "max_steps": 150})
  assert seen[0] == 64 and max(seen) == 256 and a.num_steps == 150
  monkeypatch.setattr(P, "_FIRST_SLOTS", 256)
  b = R.fit_patching(z, y, **{**FIT, "max_steps": 150})
  for f in ("kind", "vec", "lo", "hi", "xi", "eta", "errors", "briers"):
    np.testing.assert_array_equal(np.asarray(getattr(a, f)), np.asarray(getattr(b, f)), f)


def test_fitting_under_a_transformation_says_it_runs_eagerly():
  z, y = _synthetic(n=50)
  for wrap in (jax.jit, jax.vmap):
    zz = z if wrap is jax.jit else z[None]
    with pytest.raises(ValueError, match="fit_patching runs eagerly"):
      wrap(lambda a: R.fit_patching(a, y, **FIT).vec)(zz)


def test_fitted_on_ten_classes_applied_to_eight_raises():
  z, y = _synthetic(n=100, c=10)
  rc = R.fit_patching(z, y, max_steps=1, num_samples=0, progress=False)
  with pytest.raises(ValueError, match=r"fitted on C = 10 classes but the inputs have C = 8"):
    rc(np.zeros((3, 8), np.float32))
  # trajectory too (it was a JAX broadcasting error)
  with pytest.raises(ValueError, match=r"fitted on C = 10 classes but the inputs have C = 8"):
    rc.trajectory(np.zeros((3, 8), np.float32))


def test_replay_patches_the_rows_at_either_end_of_the_interval():
  # the interval [lo, hi] is closed: a row whose predicted utility v = <p, a>
  # equals lo or hi exactly is patched, rows outside are untouched (float64
  # reference: project_np of p - eta xi a)
  a = np.array([1.0, 0.0, 0.0], np.float32)
  p = np.array(
    [[0.25, 0.5, 0.25], [0.5, 0.25, 0.25], [0.625, 0.25, 0.125], [0.75, 0.125, 0.125]]
    + [[0.875, 0.0625, 0.0625]],
    np.float32,
  )  # v = 0.25, 0.5 (= lo), 0.625, 0.75 (= hi), 0.875: all exact in float32
  f32 = lambda *x: jnp.asarray(np.array(x, np.float32))
  rc = Patching(
    kind=jnp.zeros((1,), jnp.int32),
    vec=jnp.asarray(a[None]),
    mat=jnp.zeros((1, 3, 0), jnp.float32),
    lo=f32(0.5),
    hi=f32(0.75),
    xi=f32(1.0),
    eta=f32(0.5),
    errors=f32(0.1, 0.0),
    briers=f32(0.5, 0.4),
    num_iter=jnp.asarray(1),
    converged=jnp.asarray(True),
    num_classes=3,
    from_logits=False,
  )
  inside = np.array([False, True, True, True, False])
  want = np.where(inside[:, None], project_np(p - 0.5 * a), p)
  np.testing.assert_allclose(np.asarray(rc(p)), want, atol=1e-6)
  np.testing.assert_allclose(np.asarray(rc.trajectory(p)[1]), want, atol=1e-6)


def test_a_cut_point_with_no_float_below_it_keeps_the_sample_at_lo():
  # v = 0.5 - ulp, 0.5, 0.75, 0.9 (a = e_0, the one witness): the worst interval
  # is [0.5, 0.75] (sum of <p - Y, a> = 0.5 + 0.75); no float32 lies between 0.5 - ulp
  # and 0.5, so the stored cut is 0.5 itself and the sample at 0.5 is in the patch:
  # the quadratic step err / mean ||w||^2 counts it (float64 reference)
  v = np.array([np.nextafter(np.float32(0.5), np.float32(0)), 0.5, 0.75, 0.9], np.float32)
  p = np.stack([v, 1 - v], 1)
  y = np.array([0, 1, 1, 0])
  a = np.array([1.0, 0.0])
  rc = R.fit_patching(
    p,
    y,
    from_logits=False,
    family=None,
    num_samples=0,
    witnesses=U.Utility(jnp.asarray(a[None], jnp.float32), "linear"),
    max_steps=1,
    tol=0.0,
    stepsize="quadratic",
    progress=False,
  )
  assert (float(rc.lo[0]), float(rc.hi[0])) == (0.5, np.float32(0.825))
  err = (0.5 + 0.75) / 4
  assert float(rc.errors[0]) == pytest.approx(err, rel=1e-6) and float(rc.xi[0]) == 1.0
  w = a * ((v >= 0.5) & (v <= 0.825))[:, None]
  eta = err / np.mean(np.sum(w * w, 1))
  onehot, p64 = np.eye(2)[y], p.astype(np.float64)
  brier = lambda q: np.mean(np.sum((q - onehot) ** 2, 1))
  while brier(project_np(p64 - eta * w)) > brier(p64) - 1e-4 * eta * 2 * err:
    eta *= 0.5
  assert float(rc.eta[0]) == pytest.approx(eta, rel=1e-5)


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
    # halfway to the nearest values outside; lo - 1 / hi + 1 when there are none
    assert lc == (np.float32(0.5) * (vals[a - 1] + lo) if a > 0 else lo - 1)
    assert hc == (np.float32(0.5) * (vals[b + 1] + hi) if b < len(vals) - 1 else hi + 1)
    if a > 0:
      assert vals[a - 1] < lc < lo  # strictly between
    if b < len(vals) - 1:
      assert hi < hc < vals[b + 1]
  # neighbours one float32 apart: the midpoint rounds (ties to even) onto one of
  # them; the cut is then the interval's own end, never the value outside it
  h = np.float32(0.5)
  down, up = np.nextafter(h, np.float32(0)), np.nextafter(h, np.float32(1))
  v = np.array([0.25, down, h, up, 0.75], np.float32)
  for lo, hi, want in [(up, 0.75, (up, 1.75)), (0.25, down, (-0.75, down))]:
    assert np.float32(0.5) * (h + (up if hi == 0.75 else down)) == h  # rounds onto 0.5
    lc, hc = _cut_points(jnp.asarray(v), jnp.float32(lo), jnp.float32(hi))
    assert (float(lc), float(hc)) == tuple(map(float, want))
    np.testing.assert_array_equal((v >= lc) & (v <= hc), (v >= lo) & (v <= hi))


def test_audit_shards_over_every_local_device_with_the_same_fit(tmp_path):
  """With two (forced) CPU devices the audit's uc_sweep splits the witnesses over both;
  the patches are the same as on one device."""
  import subprocess

  code = (
    "import sys, numpy as np, jax\n"
    "from jaxcal import recalibrate as R, utility as U\n"
    "assert jax.local_device_count() == 2\n"
    "rng = np.random.default_rng(0)\n"
    "z = (rng.normal(size=(300, 5)) * 2.5).astype(np.float32)\n"
    "y = rng.integers(0, 5, 300)\n"
    "rc = R.fit_patching(z, y, max_steps=4, num_samples=6, tol=0.0, progress=False,\n"
    "                    sample_witnesses=lambda k: U.sample_aligned_gain(k, 4, 5))\n"
    "np.save(sys.argv[1], np.asarray(rc(z)))\n"
  )
  env = cpu_devices_env(2)
  out = tmp_path / "two.npy"
  run = subprocess.run(
    [sys.executable, "-W", "ignore", "-c", code, str(out)], capture_output=True, text=True, env=env
  )
  assert run.returncode == 0, run.stderr
  rng = np.random.default_rng(0)
  z = (rng.normal(size=(300, 5)) * 2.5).astype(np.float32)
  y = rng.integers(0, 5, 300)
  rc = R.fit_patching(
    z,
    y,
    max_steps=4,
    num_samples=6,
    tol=0.0,
    progress=False,
    sample_witnesses=lambda k: U.sample_aligned_gain(k, 4, 5),
  )
  np.testing.assert_allclose(np.load(out), np.asarray(rc(z)), atol=1e-6)


def test_progress_bar_ends_once_and_counts_zero():
  """``Progress(0)`` shows 0/0 (it showed 1/1), a second ``close`` prints nothing (it drew
  the line again), and as a context manager the line ends when the block raises (found by a
  review helper)."""
  import io

  from jaxcal._src.progress import Progress

  out = io.StringIO()
  bar = Progress(0, "z", delay=0.0, min_interval=0.0, stream=out)
  bar.close()
  bar.close()
  assert out.getvalue().count("\n") == 1 and "0/0" in out.getvalue()
  out = io.StringIO()
  with pytest.raises(RuntimeError), Progress(3, "fit", delay=0.0, stream=out) as bar:
    bar.update(1)
    raise RuntimeError("bad draw")
  assert out.getvalue().endswith("\n") and out.getvalue().count("\n") == 1


def test_the_armijo_slope_is_twice_the_audited_error():
  """Guards the line search's slope ``<∇Brier, -W> = -2 err`` (not ``-err``).

  The first trial step is placed between the sufficient-decrease boundary of
  the slope ``2 err`` and that of ``err`` (``c1 η err`` apart in Brier
  score), both found in float64 by bisection on ``Brier(Π(P - ηW))`` of the
  stored patch: the fit must reject it and halve it once.
  """
  z, y = _synthetic(n=200, c=3, seed=2)
  base = dict(max_steps=1, tol=0.0, num_samples=0, progress=False)
  rc = _fit(z, y, **base, stepsize=1.0)[0]
  p = np.asarray(rc.trajectory(z), np.float64)[0]
  onehot = np.eye(3)[y]
  err = float(rc.errors[0])
  ubar = _ubar_np(p, int(rc.kind[0]), rc.vec[0], rc.mat[0])
  v = np.sum(p * ubar, 1)
  w = float(rc.xi[0]) * ubar * ((v >= float(rc.lo[0])) & (v <= float(rc.hi[0])))[:, None]
  b0 = np.mean(np.sum((p - onehot) ** 2, 1))

  def accepted(eta, slope):
    return np.mean(np.sum((project_np(p - eta * w) - onehot) ** 2, 1)) <= b0 - 1e-4 * eta * slope

  def boundary(slope):  # the largest accepted step, by bisection
    lo, hi = 1e-6, 1.0
    assert accepted(lo, slope) and not accepted(hi, slope)
    for _ in range(80):
      mid = (lo + hi) / 2
      lo, hi = (mid, hi) if accepted(mid, slope) else (lo, mid)
    return lo

  right, loose = boundary(2 * err), boundary(err)
  assert loose - right > 1e-5 * right  # a window wide against float32 rounding
  init = (right + loose) / 2
  rc = _fit(z, y, **base, stepsize=init * 3 / err)[0]
  assert float(rc.eta[0]) == pytest.approx(init / 2, rel=1e-6)


def test_a_step_below_the_float32_resolution_of_the_brier_score_is_measured():
  """The line search and the "no Brier decrease" rule compared two float32 Brier scores,
  whose difference is rounding once the change falls below ~1e-7: with ``stepsize=1e-6``
  the fit stopped after one step ("no Brier decrease"; with 1e-5 on CIFAR-10 logits the
  search failed at once), though each step lowers the score. Both now measure the change
  itself (found by a review helper); it matches a float64 difference."""
  z, y = _synthetic()
  rc = R.fit_patching(z, y, max_steps=4, tol=0.0, num_samples=0, stepsize=1e-6, progress=False)
  assert (rc.num_steps, rc.stop_reason) == (4, "max_steps")
  assert np.all(np.diff(np.asarray(rc.briers)) <= 0)
  from jaxcal._src.recal.patching import _brier_change

  p = jax.nn.softmax(jnp.asarray(z))
  q = np.asarray(rc(z))
  onehot = np.eye(z.shape[1])[y]
  p64, q64 = np.asarray(p, np.float64), q.astype(np.float64)
  want = np.mean(np.sum((q64 - onehot) ** 2 - (p64 - onehot) ** 2, axis=1))
  got = float(_brier_change(jnp.asarray(q), p, jnp.asarray(onehot, jnp.float32)))
  assert want < 0 and got == pytest.approx(want, rel=1e-3)


def test_a_failed_line_search_stops_the_fit_and_says_so():
  """No trial of the backtracking search meets the Armijo condition (a huge initial
  step): the fit stopped as "no Brier decrease", blaming the score, and a last trial
  that happened to lower the Brier score would have been kept without meeting it."""
  z, y = _synthetic()
  rc = R.fit_patching(z, y, max_steps=3, tol=0.0, num_samples=0, stepsize=1e12, progress=False)
  assert (rc.num_steps, rc.stop_reason, bool(rc.converged)) == (0, "line search failed", False)
  np.testing.assert_allclose(np.asarray(rc(z)), np.asarray(jax.nn.softmax(jnp.asarray(z))), atol=0)
  # a step the search can reach from its start makes progress
  assert (
    R.fit_patching(
      z, y, max_steps=3, tol=0.0, num_samples=0, stepsize=1e3, progress=False
    ).num_steps
    > 0
  )


def test_gradients_through_a_fitted_patching_map():
  """The simplex projection's threshold carried no derivative (its sort's keys are
  integers): the projection's Jacobian read diag(active), and the log loss's gradient in a
  patch's step sizes had the wrong sign (+1.37 against -3.87 by central differences)."""
  import dataclasses

  from jaxcal._src.recal.patching import project_simplex
  from jaxcal.scores import log_loss

  with jax.enable_x64(True):
    z = jnp.array([0.59, 0.3, 0.1])
    e0 = jnp.array([1.0, 0.0, 0.0])
    tangent = jax.jvp(lambda t: project_simplex((z - t * e0)[None])[0], (0.0,), (1.0,))[1]
    np.testing.assert_allclose(np.asarray(tangent), [-2 / 3, 1 / 3, 1 / 3], rtol=1e-12)
    x = 4 * jnp.cos(jnp.arange(2400.0).reshape(600, 4))
    y = jnp.arange(600) % 4
    rc = R.fit_patching(x, y, max_steps=3, num_samples=0, progress=False)
    xt = 4 * jnp.sin(jnp.arange(800.0).reshape(200, 4))
    f = lambda eta: log_loss(dataclasses.replace(rc, eta=eta)(xt), jnp.arange(200) % 4)
    d = jnp.ones_like(rc.eta)
    got = float(jnp.sum(jax.grad(f)(rc.eta) * d))
    fd = float((f(rc.eta + 1e-6 * d) - f(rc.eta - 1e-6 * d)) / 2e-6)
    assert got == pytest.approx(fd, rel=1e-6)
