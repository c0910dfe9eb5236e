"""jaxcal.scores.decompose and the MCB-DSC plot (SPEC §4, the case study)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcal._src.decomposition import decompose_all, decompose_core
from jaxcal.scores import Decomposition, decompose


def _data(seed, n=200, c=4):
  """Dyadic probabilities k/32 (exact in float32 and float64, many ties)."""
  rng = np.random.default_rng(seed)
  k = np.array([rng.multinomial(32, rng.dirichlet(np.full(c, 0.7))) for _ in range(n)])
  p = k / 32.0
  y = np.array([rng.choice(c, p=np.sqrt(r) / np.sqrt(r).sum()) for r in p])
  return p, y


def pav_fit(x, t):
  """Naive float64 PAV with exact ties pooled (the in-sample fitted values)."""
  xs = np.unique(x)
  blocks = [[np.sum(x == v), np.sum(t[x == v]), [v]] for v in xs]
  i = 0
  while i < len(blocks) - 1:
    a, b = blocks[i], blocks[i + 1]
    if a[1] / a[0] >= b[1] / b[0]:
      blocks[i : i + 2] = [[a[0] + b[0], a[1] + b[1], a[2] + b[2]]]
      i = max(i - 1, 0)
    else:
      i += 1
  value = {v: bs / bw for bw, bs, vs in blocks for v in vs}
  return np.array([value[v] for v in x])


def decompose_reference(p, y, score="brier", mode="classwise"):
  """Loop-based float64 reference (naive PAV per class)."""
  p = np.asarray(p, np.float64)
  n, c = p.shape
  t = np.eye(c)[y]
  fit = np.empty_like(p)
  for r in range(c):
    fit[:, r] = pav_fit(p[:, r], t[:, r])
  if mode == "normalized":
    fit = fit / fit.sum(1, keepdims=True)
  ref = np.tile(t.mean(0), (n, 1))

  def s(q):
    if score == "brier":
      return np.mean(np.sum((q - t) ** 2, 1)) / c
    if mode == "classwise":
      tot = 0.0
      for i in range(n):
        for r in range(c):
          v = q[i, r] if t[i, r] else 1 - q[i, r]
          tot -= np.log(max(v, 1e-12))
      return tot / (n * c)
    return -np.mean([np.log(max(q[i, y[i]], 1e-12)) for i in range(n)])

  sp, sf, sr = s(p), s(fit), s(ref)
  return np.array([sp, sp - sf, sr - sf, sr])


@pytest.mark.parametrize("score", ["brier", "log"])
@pytest.mark.parametrize("mode", ["classwise", "normalized"])
def test_matches_reference_identity_and_signs(score, mode):
  p, y = _data(0)
  with jax.enable_x64(True):
    d = decompose(p, y, score, mode)
  assert isinstance(d, Decomposition)
  got = np.array([float(v) for v in d])
  np.testing.assert_allclose(got, decompose_reference(p, y, score, mode), atol=1e-10)
  assert abs(got[0] - (got[1] - got[2] + got[3])) < 1e-12
  if mode == "classwise":
    assert got[1] >= 0 and got[2] >= 0


def test_float32_matches_float64_and_brier_unc():
  p, y = _data(1)
  d32 = np.array([float(v) for v in decompose(p.astype(np.float32), y)])
  with jax.enable_x64(True):
    d64 = np.array([float(v) for v in decompose(p, y)])
  np.testing.assert_allclose(d32, d64, atol=1e-6)
  freq = np.bincount(y, minlength=p.shape[1]) / len(y)
  assert abs(d64[3] - np.sum(freq * (1 - freq)) / p.shape[1]) < 1e-12


def test_jit_and_vmap_over_data_sets_equal_loop():
  ps, ys = zip(*[_data(s) for s in (2, 3, 4)])
  ps = np.stack(ps).astype(np.float32)
  ys = np.stack(ys)
  loop = np.array([[float(v) for v in decompose(p, y)] for p, y in zip(ps, ys)])
  vm = jax.vmap(lambda p, y: jnp.stack(decompose(p, y)))(ps, ys)
  jt = jax.jit(lambda p, y: jnp.stack(decompose(p, y, mode="classwise")))(ps[0], ys[0])
  np.testing.assert_allclose(np.asarray(vm), loop, rtol=1e-6, atol=1e-7)
  np.testing.assert_allclose(np.asarray(jt), loop[0], rtol=1e-6, atol=1e-7)


def test_perfectly_calibrated_forecast_has_zero_classwise_mcb():
  # four cyclic row patterns x 50 rows, labels in exactly the predicted
  # proportions: every column is already its own isotonic fit
  base = np.array([0.5, 0.3, 0.2, 0.0])
  p = np.concatenate([np.tile(np.roll(base, k), (50, 1)) for k in range(4)])
  y = np.concatenate([(np.repeat([0, 1, 2], [25, 15, 10]) + k) % 4 for k in range(4)])
  with jax.enable_x64(True):
    d = decompose(p, y)
  assert abs(float(d.mcb)) < 1e-15 and float(d.dsc) > 0


@pytest.mark.parametrize("score", ["brier", "log"])
@pytest.mark.parametrize("mode", ["classwise", "normalized"])
def test_core_mask_equals_the_subset(score, mode):
  # the study call pads data sets with masked rows: they must count as absent
  p, y = _data(5)
  keep = np.random.default_rng(5).random(len(y)) < 0.6
  y_garbage = np.where(keep, y, (y + 1) % p.shape[1])  # masked rows: other labels
  with jax.enable_x64(True):
    masked = decompose_core(jnp.asarray(p), jnp.asarray(y_garbage), score, mode, jnp.asarray(keep))
    subset = decompose_core(jnp.asarray(p[keep]), jnp.asarray(y[keep]), score, mode)
  np.testing.assert_allclose([float(v) for v in masked], [float(v) for v in subset], atol=1e-12)
  np.testing.assert_allclose(
    [float(v) for v in subset], decompose_reference(p[keep], y[keep], score, mode), atol=1e-10
  )


def test_decompositions_sharing_one_set_of_fits_equal_the_single_calls():
  # the report (and the study call) compute every mode from one set of isotonic fits
  p, y = _data(7)
  specs = (("brier", "classwise"), ("log", "normalized"), ("brier", "normalized"))
  both = decompose_all(jnp.asarray(p, jnp.float32), jnp.asarray(y), specs)
  for (score, mode), d in zip(specs, both):
    want = decompose(p.astype(np.float32), y, score, mode)
    np.testing.assert_allclose([float(v) for v in d], [float(v) for v in want], rtol=1e-6, atol=0)
    np.testing.assert_allclose(
      [float(v) for v in d], decompose_reference(p, y, score, mode), rtol=1e-4, atol=1e-6
    )


def test_classwise_log_score_clips_probabilities_within_the_tolerance():
  # entries up to 1e-3 outside [0, 1] pass the simplex check; the binary log
  # loss reads them as 0 and 1 (a probability above 1 would give a negative loss)
  p, y = _data(6)
  q = p.copy()
  q[:6] = [1.0005, -0.0005, 0.0, 0.0]
  y = y.copy()
  y[:6] = [0, 0, 0, 1, 2, 3]
  with jax.enable_x64(True):
    got = float(decompose(q, y, "log", "classwise").score)
    # the multiclass log loss -log max(p_y, 1e-12) (clipped below only): three labels
    # of probability 0 or below
    got_n = float(decompose(q, y, "log", "normalized").score)
  want = decompose_reference(np.clip(q, 0.0, 1.0), y, "log", "classwise")[0]
  assert got == pytest.approx(want, abs=1e-12)
  want_n = decompose_reference(q, y, "log", "normalized")[0]
  assert got_n == pytest.approx(want_n, abs=1e-12)


@pytest.mark.parametrize(
  "kwargs, msg",
  [
    (dict(score="spherical"), "score must be"),
    (dict(mode="cw"), "mode must be"),
    (dict(probs=np.array([[0.5, 0.6], [0.5, 0.5]])), "sum to 1"),
    (dict(probs=np.array([[0.5, np.nan], [0.5, 0.5]])), "non-finite"),
    (dict(probs=np.array([[1.5, 0.6], [0.5, 0.5]]), require_simplex=False), r"\[0, 1\]"),
    # -log q_y off the simplex: all-ones rows scored 0 and MCB was -log 3 (review helper)
    (
      dict(probs=np.ones((2, 2)), score="log", mode="normalized", require_simplex=False),
      r"score='log' with mode='normalized' needs rows on the simplex",
    ),
    (dict(labels=np.array([0, 2])), "labels"),
    (dict(probs=np.ones(3) / 3), "shape"),
  ],
)
def test_bad_input(kwargs, msg):
  args = dict(probs=np.array([[0.5, 0.5], [0.2, 0.8]]), labels=np.array([0, 1]))
  args.update(kwargs)
  with pytest.raises(ValueError, match=msg):
    decompose(**args)


def test_class_wise_rows_need_not_sum_to_one():
  p, y = _data(1)
  q = (0.7 * p).astype(np.float32)
  d = decompose(q, y, require_simplex=False)
  assert abs(float(d.score) - (float(d.mcb) - float(d.dsc) + float(d.unc))) < 1e-6
  with pytest.raises(ValueError, match="sum to 1"):
    decompose(q, y)


def test_mcb_dsc_plot_draws_points_and_isolines():
  matplotlib = pytest.importorskip("matplotlib")
  matplotlib.use("Agg")
  from jaxcal._src.plots.decomposition import mcb_dsc_plot

  fig = mcb_dsc_plot(
    {"base": (0.063, 8.282), "CW-HB": (0.009, 7.177), "N-SIR": (0.047, 8.283)},
    unc=9.0,
    title="CIFAR-10",
  )
  ax = fig.axes[0]
  assert len(ax.collections) == 3  # one scatter per point
  assert len(ax.lines) >= 2  # iso-score lines
  x, yv = ax.lines[0].get_data()
  assert np.allclose(np.diff(yv) / np.diff(x), 1.0)  # slope 1: DSC = MCB + UNC - S
  with pytest.raises(
    ValueError, match=r"points must hold at least one label -> \(mcb, dsc\) entry"
  ):
    mcb_dsc_plot({}, unc=1.0)
  import matplotlib.pyplot as plt

  plt.close(fig)


# ---------------------------------------------------------------------------
# The case study's Table 1 / Table 2 on the CIFAR-10 models (fit on val, test on test)

PAPER_MODELS_C10 = [
  "cifar10_resnet50",
  "cifar10_resnet110",
  "cifar10_wide_resnet",
  "focal_cifar10_resnet50",
  "focal_cifar10_resnet110",
  "focal_cifar10_wide_resnet",
  "focal_cifar10_densenet121",
]
# BS, MCB, DSC (x100) and accuracy, as printed (Table 1: classwise, Table 2: normalized).
PAPER_C10 = {
  "classwise": {
    "base": (0.781, 0.063, 8.282, 0.951),
    "CW-HB": (1.832, 0.009, 7.177, 0.890),
    "N-HB": (1.237, 0.070, 7.833, 0.890),
    "CW-IR": (0.779, 0.027, 8.248, 0.950),
    "N-IR": (0.770, 0.047, 8.277, 0.950),
    "CW-SIR": (0.769, 0.051, 8.282, 0.950),
    "N-SIR": (0.764, 0.047, 8.283, 0.950),
  },
  "normalized": {
    "base": (0.781, 0.059, 8.279, 0.951),
    "CW-HB": (1.832, 0.604, 7.772, 0.890),
    "N-HB": (1.237, 0.080, 7.842, 0.890),
    "CW-IR": (0.779, 0.030, 8.251, 0.950),
    "N-IR": (0.770, 0.045, 8.275, 0.950),
    "CW-SIR": (0.769, 0.048, 8.279, 0.950),
    "N-SIR": (0.764, 0.044, 8.280, 0.950),
  },
}


def _r_softmax(z):
  e = np.exp(np.asarray(z, np.float64))
  return e / e.sum(1, keepdims=True)


def _case_study_averages(cifar_dir, methods):
  """Averages over the paper's 7 CIFAR-10 models of (BS, MCB, DSC) x100 and Acc."""
  import jaxcal.recalibrate as R

  for s in PAPER_MODELS_C10:
    if not (cifar_dir / s).is_dir():
      pytest.skip(f"{s} not in the shared data")
  acc = {mode: {m: [] for m in methods} for mode in PAPER_C10}
  with jax.enable_x64(True):
    for s in PAPER_MODELS_C10:
      pt = _r_softmax(np.load(cifar_dir / s / "test_logits.npy"))
      yt = np.load(cifar_dir / s / "test_labels.npy")
      preds = {"base": pt}
      if len(methods) > 1:
        pv = _r_softmax(np.load(cifar_dir / s / "val_logits.npy"))
        yv = np.load(cifar_dir / s / "val_labels.npy")
        for short, method in (("HB", "histogram"), ("IR", "isotonic"), ("SIR", "smooth_isotonic")):
          q = np.asarray(R.fit(method, pv, yv, from_logits=False, normalize=False)(pt))
          preds["CW-" + short] = q
          preds["N-" + short] = q / q.sum(1, keepdims=True)
      for m in methods:
        q = preds[m]
        a = float(np.mean(np.argmax(q, 1) == yt))
        for mode in PAPER_C10:
          d = decompose(q, yt, "brier", mode, require_simplex=not m.startswith("CW"))
          assert abs(float(d.unc) - 0.09) < 1e-15
          assert abs(float(d.score) - float(d.mcb - d.dsc + d.unc)) < 1e-12
          acc[mode][m].append((100 * float(d.score), 100 * float(d.mcb), 100 * float(d.dsc), a))
  return {
    mode: {m: np.round(np.mean(v, axis=0), 3) for m, v in rows.items()}
    for mode, rows in acc.items()
  }


def test_reproduces_case_study_base_rows_on_cifar10(cifar_dir):
  """The decomposition protocol alone: the 'base' rows of Tables 1 and 2 (7 models)."""
  got = _case_study_averages(cifar_dir, ("base",))
  for mode in PAPER_C10:
    np.testing.assert_allclose(got[mode]["base"], PAPER_C10[mode]["base"], atol=1e-9, err_msg=mode)


@pytest.mark.slow
def test_reproduces_case_study_tables_on_cifar10(cifar_dir):
  """All 7 methods x 2 decompositions, averaged over the paper's 7 CIFAR-10
  models, equal the printed Tables 1 and 2 at the printed precision (3
  decimals); UNC is exactly 9. (Fast coverage: the base rows above and the
  HB/IR/SIR maps against the paper's R code in test_recalibrate.py.)"""
  got = _case_study_averages(cifar_dir, tuple(PAPER_C10["classwise"]))
  for mode in PAPER_C10:
    for m, want in PAPER_C10[mode].items():
      np.testing.assert_allclose(got[mode][m], want, atol=1e-9, err_msg=f"{mode} {m}")


def test_jacfwd_of_decompose_matches_directional_derivatives():
  """``jax.jacfwd`` through the class-wise isotonic fits did not finish (the sorts' batching
  rule re-entered itself); it gives the directional derivatives ``jax.jvp`` gives."""
  rng = np.random.default_rng(5)
  with jax.enable_x64(True):
    z = jnp.asarray(rng.normal(size=(30, 3)))
    y = jnp.asarray(rng.integers(0, 3, 30))

    def mcb(v):
      return decompose(jax.nn.softmax(v), y).mcb

    jac = jax.jacfwd(mcb)(z)
    basis = np.eye(90).reshape(90, 30, 3)
    want = [jax.jvp(mcb, (z,), (jnp.asarray(e),))[1] for e in basis[::7]]
    np.testing.assert_allclose(np.asarray(jac).reshape(90)[::7], np.asarray(want), atol=1e-12)
    assert np.abs(np.asarray(jac)).max() > 0


def test_reverse_mode_matches_central_differences():
  """``jax.grad`` of a component stopped at the isotonic fits' sorts (no transpose)."""
  rng = np.random.default_rng(8)
  with jax.enable_x64(True):
    z = jnp.asarray(rng.normal(size=(40, 4)))
    y = jnp.asarray(rng.integers(0, 4, 40))
    for mode in ("classwise", "normalized"):

      def mcb(v, mode=mode):
        return decompose(jax.nn.softmax(v), y, mode=mode).mcb

      g = np.asarray(jax.grad(mcb)(z))
      for i, r in ((3, 2), (21, 0)):
        e = np.zeros((40, 4))
        e[i, r] = 1e-6
        np.testing.assert_allclose(g[i, r], (mcb(z + e) - mcb(z - e)) / 2e-6, rtol=1e-5)
