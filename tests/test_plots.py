"""Every public plot function, rendered on small data: title, axis labels, no overlapping ticks."""

import itertools
import pathlib

import jax
import numpy as np
import pytest

pytest.importorskip("matplotlib")

from jaxcal import bootstrap, metrics, plots, report


@pytest.fixture(autouse=True)
def _close_figures():
  """Closes every figure a test opened (pyplot keeps them, and warns beyond 20)."""
  yield
  pytest.importorskip("matplotlib.pyplot").close("all")


def _overlaps(fig) -> list[tuple[str, str]]:
  """Pairs of visible tick labels of one axis whose tight bounding boxes intersect."""
  fig.canvas.draw()
  renderer = fig.canvas.get_renderer()
  bad = []
  for ax in fig.axes:
    for axis in (ax.xaxis, ax.yaxis):
      boxes = [
        (t.get_text(), t.get_window_extent(renderer))
        for t in axis.get_ticklabels(which="both")
        if t.get_visible() and t.get_text()
      ]
      for (ta, a), (tb, b) in itertools.combinations(boxes, 2):
        if a.overlaps(b) and a.width > 0 and b.width > 0:
          bad.append((ta, tb))
  return bad


def _check(fig, *, title_fragment: str | None = None) -> None:
  titles = [fig._suptitle.get_text() if fig._suptitle else ""] + [a.get_title() for a in fig.axes]
  assert any(titles), "the figure has no title"
  if title_fragment is not None:
    assert any(title_fragment in t for t in titles), titles
  data_axes = [a for a in fig.axes if a.get_label() != "<colorbar>"]
  for ax in data_axes:
    if ax.has_data():
      assert ax.get_xlabel() or ax.get_ylabel(), f"axes {ax.get_title()!r} has no labels"
  assert _overlaps(fig) == []


@pytest.fixture(scope="module")
def toy():
  p = jax.nn.softmax(2.5 * jax.random.normal(jax.random.key(0), (400, 5)))
  y = jax.random.categorical(jax.random.key(1), np.log(np.asarray(p)))
  return np.asarray(p), np.asarray(y)


def test_reliability_diagram_with_consistency_bands(toy):
  p, y = toy
  bands = bootstrap.consistency_bands(jax.random.key(2), p, 10, num_resamples=50, confidence=0.95)
  fig = plots.reliability_diagram(p, y, 10, bands=bands, model="toy")
  _check(fig, title_fragment="toy (n = 400)")
  legend = fig.legends[0] if fig.legends else fig.axes[0].get_legend()
  assert "consistency band (95 %)" in [t.get_text() for t in legend.get_texts()]  # its own level
  # the count panel is log-scaled with more than two ticks
  counts = fig.axes[1]
  assert counts.get_yscale() == "log"
  fig.canvas.draw()
  assert len([t for t in counts.get_yticklabels() if t.get_text()]) >= 3


def test_reliability_diagram_quantile_bins_logits(toy):
  p, y = toy
  fig = plots.reliability_diagram(np.log(p), y, 8, "quantile", from_logits=True, title="custom")
  _check(fig, title_fragment="custom")


def test_bin_robustness_plot_puts_l1_and_squared_errors_in_separate_panels():
  m = np.array([2, 5, 20, 100, 500, 2000])
  curves = {
    "ConfECE(fix)": 0.02 + 0.01 * np.log(m) / 8,
    "ConfCE(qua)": 1e-3 / m + 2e-6,
    "LinCE_cw(qua)": 1e-4 / m + 1e-6,
  }
  bands = {k: (0.8 * v, 1.2 * v) for k, v in curves.items()}
  fig = plots.bin_robustness_plot(
    m, curves, bands=bands, reference={"LinCE_cw(qua)": 1e-6}, model="ResNet-110", n=10_000
  )
  _check(fig, title_fragment="ResNet-110 (n = 10,000)")
  assert [a.get_ylabel() for a in fig.axes] == ["ℓ1 calibration error", "squared calibration error"]
  # legends sit outside the data area of their axes
  fig.canvas.draw()
  renderer = fig.canvas.get_renderer()
  for ax in fig.axes:
    leg = ax.get_legend()
    if leg is not None:
      box, area = leg.get_window_extent(renderer), ax.get_window_extent(renderer)
      assert not box.overlaps(area)


def test_rank_stability_plot():
  r = np.array([[1.0, 0.8, 0.5], [0.8, 1.0, 0.7], [0.5, 0.7, 1.0]])
  fig = plots.rank_stability_plot([5, 100, 2000], {"ConfECE(fix)": r, "LinCE_cw(qua)": r})
  _check(fig)


@pytest.mark.parametrize("log_x", [False, True])
def test_ecdf_plot(log_x):
  rng = np.random.default_rng(0)
  curves = {
    "uncalibrated": rng.lognormal(-4, 1.0, 300),
    "temperature": rng.lognormal(-5, 1.0, 300),
  }
  fig = plots.ecdf_plot(curves, log_x=log_x, model="ResNet-110", n=10_000, family="linear")
  _check(fig, title_fragment="ResNet-110")


def test_mcb_dsc_plot_labels_do_not_overlap():
  pts = {"base": (0.06, 8.28), "CW-HB": (0.01, 7.18), "TS": (0.015, 8.2), "Iso": (0.012, 8.1)}
  fig = plots.mcb_dsc_plot(pts, unc=9.0, model="ResNet-110", n=10_000)
  _check(fig)


def test_interval_plot():
  rows = {"uncalibrated": (0.026, 0.023, 0.030), "temperature": (0.009, 0.007, 0.012)}
  fig = plots.interval_plot(rows, metric="ConfECE(fix;15)", model="ResNet-110", n=10_000)
  _check(fig)
  assert fig.axes[0].get_xlabel() == "ConfECE(fix;15)"


def test_savefig_writes_raster_and_vector(tmp_path):
  fig = plots.ecdf_plot({"a": [0.01, 0.02, 0.04]})
  paths = plots.savefig(fig, tmp_path / "ecdf.png", ("png", "pdf", "svg"))
  assert [p.rsplit(".", 1)[1] for p in paths] == ["png", "pdf", "svg"]
  assert (tmp_path / "ecdf.pdf").read_bytes()[:4] == b"%PDF"
  assert b"<svg" in (tmp_path / "ecdf.svg").read_bytes()[:500]
  with pytest.raises(ValueError, match="formats"):
    plots.savefig(fig, tmp_path / "x", ("jpg",))


def test_the_overlap_check_catches_crowded_tick_labels():
  plt = pytest.importorskip("matplotlib.pyplot")
  fig, ax = plt.subplots(figsize=(1.5, 1.5))
  ax.set_xticks(np.arange(30), [f"label{i}" for i in range(30)])
  assert _overlaps(fig)
  plt.close(fig)


def test_bin_robustness_plot_on_given_axes_with_closed_form_curves():
  """Several one-panel figures in one grid: curves by predictor, dashed closed forms."""
  plt = pytest.importorskip("matplotlib.pyplot")
  m = np.array([1, 2, 5, 10, 20, 50])
  fig, axes = plt.subplots(1, 2, figsize=(8, 3.5), layout="constrained")
  curves = {"f1": 0.5 + 0.1 / m, "f2": 0.4 + 0.3 / m}
  closed = {"f1": 0.5 + 0.1 / m, "f2": np.full(m.size, np.nan)}
  out = plots.bin_robustness_plot(
    m, curves, reference=closed, reference_label="closed form", title="a", ax=axes[0]
  )
  plots.bin_robustness_plot(m, curves, title="b", ax=axes[1], legend=False)
  assert out is fig and [a.get_title() for a in axes] == ["a", "b"]
  assert axes[0].get_legend() is not None and axes[1].get_legend() is None
  dashed = [ln for ln in axes[0].get_lines() if ln.get_linestyle() == "--" and ln.get_xdata().size]
  np.testing.assert_allclose(dashed[0].get_ydata(), closed["f1"])
  assert "closed form" in [t.get_text() for t in axes[0].get_legend().get_texts()]
  _check(fig)
  with pytest.raises(ValueError, match="reference 'f1' has 3 values"):
    plots.bin_robustness_plot(m, curves, reference={"f1": [1, 2, 3]})


def test_lce_bandwidth_plot_with_bands_floor_and_flat_kernel_limit():
  g = np.array([1.0, 2.5, 5.0, 10.0, 20.0])
  curves = {"uncalibrated": 0.01 + 0.02 / g, "LoCal Net": 0.007 + 0.03 / g}
  bands = {k: (0.9 * v, 1.1 * v) for k, v in curves.items()}
  fig = plots.lce_bandwidth_plot(
    g,
    curves,
    bands=bands,
    floor=0.003 + 0.027 / g,
    reference={"uncalibrated": 0.0101},
    features="PCA-50",
    model="MLP",
    n=3000,
  )
  _check(fig, title_fragment="on PCA-50 — MLP (n = 3,000)")
  ax = fig.axes[0]
  assert ax.get_xscale() == "log" and ax.get_ylabel() == "local calibration error LCE"
  texts = [t.get_text() for t in ax.get_legend().get_texts()]
  assert texts[:2] == list(curves) and "class-wise ECE" in texts
  with pytest.raises(ValueError, match="floor has 2 values for 5 bandwidths"):
    plots.lce_bandwidth_plot(g, curves, floor=[0.1, 0.2])
  with pytest.raises(ValueError, match="bandwidths must be positive"):
    plots.lce_bandwidth_plot([0.0, 1.0], {"a": [0.1, 0.2]})
  with pytest.raises(ValueError, match="at least one method"):
    plots.lce_bandwidth_plot(g, {})


def test_one_metric_with_two_binnings_is_told_apart_and_whole_ticks_are_plain():
  m = np.array([5, 10, 20, 50, 100])  # under two decades: 1-2-5 tick labels
  fig = plots.bin_robustness_plot(
    m, {"ConfECE(qua)": 0.02 + 2e-4 * m, "ConfECE(fix)": 0.02 + 1e-4 * m}
  )
  (ax,) = fig.axes
  a, b = (ln for ln in ax.get_lines() if ln.get_label().startswith("ConfECE"))
  assert a.get_color() == b.get_color() and a.get_linestyle() != b.get_linestyle()
  fig.canvas.draw()
  labels = [t.get_text() for t in ax.get_xticklabels() + ax.get_yticklabels() if t.get_text()]
  assert "100" in labels and not [t for t in labels if "e2" in t or "e1" in t], labels
  _check(fig)


def test_smooth_reliability_diagram_names_the_model_and_writes_smece_like_the_report(toy):
  p, y = toy
  fig = plots.smooth_reliability_diagram(p, y, model="toy")
  _check(fig, title_fragment="Smooth reliability diagram — toy (n = 400)")
  ax = fig.axes[0]
  want = report.format_number(float(metrics.smooth_ece(p, y)))
  assert f"smECE = {want} " in ax.texts[0].get_text()
  assert ax.get_legend() is not None


def test_smooth_reliability_diagram_draws_the_samples_where_selects(toy):
  p, y = toy
  keep = np.arange(len(y)) % 3 != 0
  fig = plots.smooth_reliability_diagram(p, y, 0.1, where=keep, model="toy")
  _check(fig, title_fragment=f"Smooth reliability diagram — toy (n = {keep.sum()})")
  want = report.format_number(float(metrics.smooth_ece(p[keep], y[keep], 0.1)))
  assert f"smECE = {want} " in fig.axes[0].texts[0].get_text()
  assert want != report.format_number(float(metrics.smooth_ece(p, y, 0.1)))


def test_reliability_diagram_draws_the_samples_where_selects(toy):
  """The bars, counts, ConfECE and bands of the selected rows: the diagram of those rows
  alone; the masked rows (one NaN here) neither checked nor read."""
  p, y = toy
  keep = np.arange(len(y)) % 3 != 0
  bad = p.copy()
  bad[0] = np.nan  # masked out
  fig = plots.reliability_diagram(bad, y, 10, where=keep, bands=True, seed=4, model="toy")
  alone = plots.reliability_diagram(p[keep], y[keep], 10, bands=True, seed=4, model="toy")
  _check(fig, title_fragment=f"Reliability diagram — toy (n = {keep.sum()})")
  for got, want in zip(fig.axes, alone.axes):
    for a, b in zip(got.containers, want.containers):
      np.testing.assert_allclose(_bars(a), _bars(b), rtol=1e-6, atol=1e-7)
  texts = lambda f: [t.get_text() for t in f.legends[0].get_texts()]
  assert texts(fig) == texts(alone)
  # the bands: the same draws as the selected rows' own (a mask of the first rows)
  padded = np.concatenate([p[keep], np.eye(1, 5).repeat(30, 0)]).astype(p.dtype)
  first = np.arange(len(padded)) < keep.sum()
  key = jax.random.key(5)
  mine = bootstrap.consistency_bands(key, padded, 10, num_resamples=60, where=first)
  own = bootstrap.consistency_bands(key, p[keep], 10, num_resamples=60)
  for f in ("confidence", "lo", "hi", "counts"):
    np.testing.assert_allclose(np.asarray(getattr(mine, f)), np.asarray(getattr(own, f)))


def _top_label_probs(conf):
  """``(n, 3)`` probabilities whose top label is class 0 with confidence ``conf``."""
  conf = np.asarray(conf, np.float64)
  rest = (1 - conf) / 2
  return np.stack([conf, rest + 0.01, rest - 0.01], axis=1)


def _bars(container):
  """``(x, width, bottom, height)`` of every bar of a matplotlib ``BarContainer``."""
  return np.array([(b.get_x(), b.get_width(), b.get_y(), b.get_height()) for b in container])


# confidences 0.4-0.95 in four equal-width bins: [0, 0.25) stays empty
_CONF = np.array([0.4, 0.45, 0.6, 0.7, 0.72, 0.8, 0.9, 0.95])
_LABELS = np.array([0, 1, 0, 0, 2, 0, 0, 0])


def test_reliability_diagram_draws_the_bins_it_computes():
  """Accuracy bars, gap bars and the count panel against a numpy binning of the confidences."""
  fig = plots.reliability_diagram(_top_label_probs(_CONF), _LABELS, 4, model="toy")
  ax, hist = fig.axes
  b = np.minimum(np.floor(_CONF * 4), 3).astype(int)
  hit = (_LABELS == 0).astype(np.float64)
  kept = np.unique(b)  # bin 0 is empty and drawn nowhere
  cnt = np.bincount(b, minlength=4)[kept]
  acc = np.bincount(b, hit, 4)[kept] / cnt
  conf = np.bincount(b, _CONF, 4)[kept] / cnt
  np.testing.assert_allclose(
    _bars(ax.containers[0]), np.c_[kept / 4, np.full(3, 0.25), 0 * acc, acc], atol=1e-6
  )
  gap = np.c_[kept / 4, np.full(3, 0.25), np.minimum(acc, conf), np.abs(conf - acc)]
  np.testing.assert_allclose(_bars(ax.containers[1]), gap, atol=1e-6)
  np.testing.assert_allclose(_bars(hist.containers[0])[:, 3], cnt)
  assert ax.get_xlim() == (0.0, 1.0) and ax.get_ylim() == (0.0, 1.0)
  assert hist.get_ylim() == pytest.approx((0.7, 10.0))  # the next power of ten above 1.05 * 3
  assert ax.get_title() == "Reliability diagram — toy (n = 8)"
  ece = np.sum(cnt * np.abs(conf - acc)) / _CONF.size
  texts = [t.get_text() for t in fig.legends[0].get_texts()]
  assert f"ConfECE(fix;4) = {report.format_number(ece)}" in texts
  assert not any("consistency band" in t for t in texts)


def test_reliability_diagram_quantile_bars_span_the_confidences_of_their_bin():
  """Equal-mass bins drawn from the smallest to the largest confidence, at least 0.004 wide."""
  conf = np.array([0.4, 0.5, 0.6, 0.6, 0.8, 0.801, 0.9, 0.95])
  fig = plots.reliability_diagram(_top_label_probs(conf), _LABELS, 4, "quantile")
  bars = _bars(fig.axes[0].containers[0])
  lo, hi = conf[0::2], conf[1::2]
  np.testing.assert_allclose(bars[:, 0], lo, atol=1e-6)
  # the bin of two equal confidences and the one 0.001 wide both get a 0.004 sliver
  np.testing.assert_allclose(bars[:, 1], [0.1, 0.004, 0.004, 0.05], atol=1e-6)
  hit = (_LABELS == 0).astype(np.float64)
  np.testing.assert_allclose(bars[:, 3], (hit[0::2] + hit[1::2]) / 2, atol=1e-6)
  texts = [t.get_text() for t in fig.legends[0].get_texts()]
  acc = (hit[0::2] + hit[1::2]) / 2
  ece = np.mean(np.abs((lo + hi) / 2 - acc))
  assert f"ConfECE(qua;4) = {report.format_number(ece)}" in texts


def test_reliability_diagram_quantile_bars_cover_their_mean_confidence_where_bins_crowd():
  """Twenty bins in [0.989, 1] (a confident model): narrower bars, none pushed off its bin."""
  # at a fixed 0.004 width 17 of 20 bars of CIFAR-10 ResNet-110 lay outside their bins,
  # pushed left up to 0.05 (a calibrated bin then looked under-confident)
  conf = np.concatenate([np.linspace(0.3, 0.98, 40), np.linspace(0.989, 0.9999, 360)])
  labels = np.zeros(len(conf), int)
  p = np.stack([conf, 0.6 * (1 - conf), 0.4 * (1 - conf)], axis=1)
  fig = plots.reliability_diagram(p, labels, 20, "quantile")
  bars = _bars(fig.axes[0].containers[0])
  mean = conf.reshape(20, -1).mean(1)
  left, right = bars[:, 0], bars[:, 0] + bars[:, 1]
  assert np.all((left <= mean + 1e-9) & (mean - 1e-9 <= right)), (left, right, mean)
  assert np.all(left[1:] >= right[:-1] - 1e-12) and left[0] >= 0 and right[-1] <= 1


def test_reliability_diagram_quantile_bars_of_tied_bins_stay_near_their_confidence():
  """Most confidences exactly 1.0 (sharpened logits in float32): every width leaves as many
  of those bins' bars off their confidence, and the widest had won, moving them left by up
  to 0.044, so overconfident bins (accuracy 0.98 at confidence 1) stood wholly above the
  diagonal (found by a review helper on CIFAR-10 logits x 3). Now no bar is moved past
  its accuracy: the bars are narrower, still side by side."""
  rng = np.random.default_rng(0)
  conf = np.concatenate([np.ones(800), rng.uniform(0.5, 0.99, 200)])
  labels = np.where(rng.random(1000) < 0.98, 0, 1)  # 2% wrong where the model is sure
  p = np.stack([conf, 0.6 * (1 - conf), 0.4 * (1 - conf)], axis=1).astype(np.float32)
  stats = metrics.reliability_stats(p, labels, 15, "quantile")
  keep = np.asarray(stats.counts) > 0
  mean, acc = np.asarray(stats.confidence)[keep], np.asarray(stats.accuracy)[keep]
  assert np.sum(mean == 1.0) >= 10  # the case: many bins of one value
  bars = _bars(plots.reliability_diagram(p, labels, 15, "quantile").axes[0].containers[0])
  left, right = bars[:, 0], bars[:, 0] + bars[:, 1]
  assert np.any(acc < mean - 0.01)  # overconfident bins, which were drawn above the diagonal
  assert not np.any((acc < mean) & (acc > right)), (acc, right)
  assert not np.any((acc > mean) & (acc < left))
  assert bars[:, 1].min() >= 0.004 / 64 and np.mean(mean - right < 0.02) == 1
  assert np.all(left[1:] >= right[:-1] - 1e-12) and left[0] >= 0 and right[-1] <= 1


def test_plot_numbers_take_none_and_real_objects():
  """None is an interval end not drawn (a loaded report.json's null), a Fraction a number:
  refusing strings and complex values had refused them too (found by a review helper)."""
  import fractions

  ax = plots.interval_plot({"a": (0.01, None, None), "b": (0.02, 0.01, 0.03)}, metric="m").axes[0]
  assert len(ax.collections) == 1  # b's interval alone
  fig = plots.ecdf_plot({"a": [fractions.Fraction(1, 10), np.float32(0.2), jax.numpy.float32(0.3)]})
  np.testing.assert_allclose(fig.axes[0].lines[0].get_xdata()[1:], [0.1, 0.2, 0.3], rtol=1e-6)


def test_log_axes_say_where_they_moved_non_positive_values():
  """On a log axis an eCDF's zeros were drawn at the smallest positive error of any curve,
  and an interval reaching below 0 started at the left edge, neither marked (found by a
  review helper): the legend counts the moved errors, an arrow marks the cut interval."""
  fig = plots.ecdf_plot(
    {"A": np.geomspace(3e-4, 0.1, 30), "B": np.r_[np.zeros(10), np.geomspace(1e-3, 0.1, 30)]},
    log_x=True,
  )
  texts = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
  assert texts == ["A", "B (10 ≤ 0 drawn at 0.0003)"]
  linear = plots.ecdf_plot({"B": np.zeros(5)}, log_x=True)  # no positive error: linear
  assert linear.axes[0].get_xscale() == "linear"
  assert [t.get_text() for t in linear.axes[0].get_legend().get_texts()] == ["B"]
  rows = {"a": (0.01, -0.004, 0.03), "b": (0.01, 0.005, 0.02)}
  ax = plots.interval_plot(rows, metric="x", log_x=True).axes[0]
  (arrow,) = [line for line in ax.lines if line.get_marker() == "<"]
  np.testing.assert_allclose(arrow.get_xydata(), [[ax.get_xlim()[0], 1.0]])  # row "a" (top)
  assert not [
    line for line in plots.interval_plot(rows, metric="x").axes[0].lines if line.get_marker() == "<"
  ]


def test_reliability_diagram_bands_drawn_clipped_on_kept_bins_and_checked():
  """Band segments at the bins' mean confidence, clipped to [0, 1], none for empty bins."""
  p = _top_label_probs(_CONF)
  bands = bootstrap.ConsistencyBands(
    confidence=np.array([0.1, 0.42, 0.67, 0.9]),
    lo=np.array([0.0, -0.2, 0.3, 0.7]),
    hi=np.array([0.2, 0.9, 0.95, 1.3]),
    counts=np.array([0, 2, 3, 3]),
    level=0.8,
  )
  plt = pytest.importorskip("matplotlib.pyplot")
  fig, ax = plt.subplots()
  assert plots.reliability_diagram(p, _LABELS, 4, bands=bands, ax=ax) is fig
  (segs,) = [c for c in ax.collections if c.get_segments()]
  want = [[[0.42, 0.0], [0.42, 0.9]], [[0.67, 0.3], [0.67, 0.95]], [[0.9, 0.7], [0.9, 1.0]]]
  np.testing.assert_allclose(np.array(segs.get_segments()), want)
  texts = [t.get_text() for t in ax.get_legend().get_texts()]
  assert "consistency band (80 %)" in texts and ax.get_xlabel() == "confidence (max probability)"
  plt.close(fig)
  with pytest.raises(
    ValueError, match="bands were computed for 4 bins, the diagram has num_bins = 5"
  ):
    plots.reliability_diagram(p, _LABELS, 5, bands=bands)


def test_reliability_diagram_bands_true_uses_the_seed():
  p = _top_label_probs(_CONF)
  want = bootstrap.consistency_bands(jax.random.key(3), p, 4)
  fig = plots.reliability_diagram(p, _LABELS, 4, bands=True, seed=3)
  (segs,) = [c for c in fig.axes[0].collections if c.get_segments()]
  lo = np.clip(np.asarray(want.lo), 0, 1)[1:]
  hi = np.clip(np.asarray(want.hi), 0, 1)[1:]
  got = np.array(segs.get_segments())
  np.testing.assert_allclose(got[:, :, 1], np.c_[lo, hi], atol=1e-6)


def _fill_ys(poly) -> np.ndarray:
  """The distinct y values of the outline of a ``fill_between`` polygon."""
  return np.unique(np.round(poly.get_paths()[0].vertices[:, 1], 12))


def test_bin_robustness_plot_draws_curves_bands_references_and_limits():
  m = np.array([2.0, 5.0, 20.0])
  a = np.array([0.02, 0.03, 0.05])
  b = np.array([4e-3, 1e-3, 2e-4])
  fig = plots.bin_robustness_plot(
    m,
    {"ConfECE(fix)": a, "LinCE_cw(qua)": b},
    bands={"LinCE_cw(qua)": (0.5 * b, 2 * b)},
    reference={"LinCE_cw(qua)": 1e-4, "ConfECE(fix)": [0.01, 0.02, 0.04]},
  )
  l1, sq = fig.axes
  np.testing.assert_allclose(l1.lines[0].get_xydata(), np.c_[m, a])
  np.testing.assert_allclose(sq.lines[0].get_xydata(), np.c_[m, b])
  assert (l1.lines[0].get_color(), sq.lines[0].get_color()) == ("#4C72B0", "#C44E52")
  np.testing.assert_allclose(l1.lines[1].get_xydata(), np.c_[m, [0.01, 0.02, 0.04]])
  np.testing.assert_allclose(sq.lines[1].get_ydata(), [1e-4, 1e-4])  # the horizontal reference
  np.testing.assert_allclose(_fill_ys(sq.collections[0]), np.unique(np.r_[0.5 * b, 2 * b]))
  # limits: the bin counts exactly; y over every value drawn, 1.3 beyond on a log scale
  assert l1.get_xlim() == pytest.approx((2, 20)) and l1.get_xscale() == "log"
  assert l1.get_ylim() == pytest.approx((0.01 / 1.3, 0.05 * 1.3)) and l1.get_yscale() == "log"
  assert sq.get_ylim() == pytest.approx((1e-4 / 1.3, 8e-3 * 1.3))
  with pytest.raises(ValueError, match="band 'a' must have 3 lower and upper values"):
    plots.bin_robustness_plot(m, {"a": a}, bands={"a": (a, a[:2])})


def test_bin_robustness_plot_scales_only_wide_ranges_logarithmically():
  """Log x from a tenfold range of bin counts, log y beyond a threefold range of values."""
  fig = plots.bin_robustness_plot([2, 19], {"a": [0.1, 0.3]})
  ax = fig.axes[0]
  assert (ax.get_xscale(), ax.get_yscale()) == ("linear", "linear")
  fig = plots.bin_robustness_plot([2, 20], {"a": [0.1, 0.31]})
  ax = fig.axes[0]
  assert (ax.get_xscale(), ax.get_yscale()) == ("log", "log")


def test_plots_keep_a_linear_error_axis_where_a_value_is_not_positive():
  """A log axis drops values <= 0 (a bias-corrected curve crossing 0, an LCE of 0) unseen."""
  fig = plots.bin_robustness_plot([2, 20], {"a": [0.026, 0.0036], "b": [0.0, -0.0015]})
  ax = fig.axes[0]
  assert ax.get_yscale() == "linear" and ax.get_ylim()[0] < -0.0015
  fig = plots.lce_bandwidth_plot([1.0, 10.0], {"a": [0.05, 0.01]}, floor=[0.0, 0.006])
  assert fig.axes[0].get_yscale() == "linear"
  fig = plots.lce_bandwidth_plot([1.0, 10.0], {"a": [0.05, 0.01]}, floor=[0.004, 0.006])
  assert fig.axes[0].get_yscale() == "log"


def test_reliability_diagram_quantile_bins_of_one_value_stay_visible_and_apart():
  """Bins of one value at 1.0 were drawn beyond the axis, bins of one tie on top of each other."""
  # 4 equal-mass bins: 0.4-0.6, then three bins holding only confidence 1.0
  conf = np.array([0.4, 0.6, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0])
  p = np.stack([conf, (1 - conf) / 2, (1 - conf) / 2], axis=1)
  fig = plots.reliability_diagram(p, _LABELS, 4, "quantile")
  bars = _bars(fig.axes[0].containers[0])
  left, right = bars[:, 0], bars[:, 0] + bars[:, 1]
  assert np.all(left >= 0) and np.all(right <= 1 + 1e-12)
  assert np.all(left[1:] >= right[:-1] - 1e-12)  # none overlaps the next
  np.testing.assert_allclose(bars[1:, 1], 0.004)
  np.testing.assert_allclose(bars[0, :2], [0.4, 0.2])  # the first bin keeps its range
  counts = _bars(fig.axes[1].containers[0])
  np.testing.assert_allclose(counts[:, 0], left)
  np.testing.assert_allclose(counts[:, 3], [2, 2, 2, 2])
  # five bins of one tied value 0.7 are drawn side by side from 0.7
  p = np.tile(np.float32([0.7, 0.3]), (500, 1))
  y = (np.random.default_rng(1).random(500) > 0.7).astype(int)
  bars = _bars(plots.reliability_diagram(p, y, 5, "quantile").axes[0].containers[0])
  np.testing.assert_allclose(bars[:, 0], 0.7 + 0.004 * np.arange(5), atol=1e-6)


def test_bin_robustness_plot_one_panel_of_mixed_kinds_is_labelled_generically():
  plt = pytest.importorskip("matplotlib.pyplot")
  fig, (a, b) = plt.subplots(1, 2)
  m = [2, 5]
  plots.bin_robustness_plot(m, {"ConfECE(fix)": [0.1, 0.2], "LinCE_cw(qua)": [0.1, 0.2]}, ax=a)
  plots.bin_robustness_plot(m, {"LinCE_cw(qua)": [0.1, 0.2], "ConfCE(fix)": [0.1, 0.2]}, ax=b)
  assert (a.get_ylabel(), b.get_ylabel()) == ("calibration error", "squared calibration error")
  plt.close(fig)


def test_rank_stability_plot_places_each_correlation_at_its_pair_of_bin_counts():
  r = np.array([[1.0, 0.3, -0.7], [0.5, 1.0, 0.1], [0.2, -0.4, 1.0]])  # not symmetric
  mats = {f"e{i}": r for i in range(4)}
  fig = plots.rank_stability_plot([5, 20, 100], mats, num_models=7, n=50)
  axes = [a for a in fig.axes if a.get_label() != "<colorbar>"]
  assert [a.get_visible() for a in axes] == [True] * 4 + [False] * 2
  ax = axes[0]
  (im,) = ax.images
  np.testing.assert_array_equal(im.get_array(), r)
  assert im.get_clim() == (-1, 1) and im.origin == "lower"
  got = {(t.get_position(), t.get_text(), t.get_color()) for t in ax.texts}
  want = {
    ((j, i), f"{r[i, j]:.2f}", "white" if abs(r[i, j]) > 0.6 else "black")
    for i in range(3)
    for j in range(3)
  }
  assert got == want
  assert [t.get_text() for t in ax.get_xticklabels()] == ["5", "20", "100"]
  assert fig._suptitle.get_text().endswith("— 7 models (n = 50)")
  with pytest.raises(ValueError, match=r"correlations\['a'\] must be \(3, 3\), got \(3, 4\)"):
    plots.rank_stability_plot([5, 20, 100], {"a": np.ones((3, 4))})


def test_rank_stability_plot_takes_bin_counts_in_any_order():
  """The paper's order (2000, 20, 5) is drawn increasing, each entry at its pair (refused before)."""
  r = np.array([[1.0, 0.3, -0.7], [0.5, 1.0, 0.1], [0.2, -0.4, 1.0]])  # rows/columns 2000, 20, 5
  fig = plots.rank_stability_plot([2000, 20, 5], {"e": r})
  (im,) = fig.axes[0].images
  np.testing.assert_array_equal(im.get_array(), r[::-1, ::-1])  # rows/columns 5, 20, 2000
  assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["5", "20", "2000"]


def test_plots_on_an_axes_in_a_subfigure_return_the_figure_savefig_takes(tmp_path, toy):
  """``ax.figure`` is the ``SubFigure`` there; it was returned, and ``savefig`` refused it."""
  plt = pytest.importorskip("matplotlib.pyplot")
  from matplotlib.figure import Figure

  p, y = toy
  fig = plt.figure()
  left, right = fig.subfigures(1, 2)
  a, b, c = left.subplots(), right.subplots(2, 1)[0], right.axes[1]
  got = [
    plots.reliability_diagram(p, y, 5, ax=a),
    plots.ecdf_plot({"a": [0.1, 0.2]}, ax=b),
    plots.bin_robustness_plot([5, 10], {"ConfECE(fix)": [0.1, 0.2]}, ax=c),
  ]
  assert all(type(g) is Figure and g is fig for g in got)
  assert [pathlib.Path(f).name for f in plots.savefig(got[0], tmp_path / "s", ("png",))] == [
    "s.png"
  ]


def test_bands_may_be_one_jax_array_like_one_numpy_array():
  """A ``(2, k)`` JAX array was refused as "not a pair (lo, hi)"; the numpy one was drawn."""
  lo_hi = np.array([[0.05, 0.01], [0.2, 0.1]])
  figs = [
    plots.bin_robustness_plot([5, 10], {"ConfECE(fix)": [0.1, 0.05]}, bands={"ConfECE(fix)": b})
    for b in (lo_hi, jax.numpy.asarray(lo_hi))
  ]
  polys = [f.axes[0].collections[0].get_paths()[0].vertices for f in figs]
  np.testing.assert_allclose(polys[0], polys[1])


def test_ecdf_plot_steps_through_the_sorted_errors():
  e = np.array([0.3, 0.0, 0.1, 0.2])
  fig = plots.ecdf_plot({"a": e, "b": [0.05, 0.4]}, model="m", n=10)
  ax = fig.axes[0]
  a, b = ax.lines
  assert a.get_drawstyle() == "steps-post"
  np.testing.assert_allclose(a.get_xydata(), np.c_[[0, 0, 0.1, 0.2, 0.3], [0, 0.25, 0.5, 0.75, 1]])
  np.testing.assert_allclose(b.get_xydata(), np.c_[[0.05, 0.05, 0.4], [0, 0.5, 1]])
  assert ax.get_title() == "eCDF of UC — m (n = 10)"  # sizes differ: no count in the title
  # log axis: the zero is drawn at the smallest positive error of all curves
  fig = plots.ecdf_plot({"a": e, "b": [0.05, 0.4]}, log_x=True)
  ax = fig.axes[0]
  np.testing.assert_allclose(ax.lines[0].get_xdata(), [0.05, 0.05, 0.1, 0.2, 0.3])
  assert ax.get_xlim() == pytest.approx((0.05 / 1.2, 0.4 * 1.2))
  fig = plots.ecdf_plot({"a": e, "b": e}, family="linear")
  assert fig.axes[0].get_title() == "eCDF of UC over 4 linear utilities"
  with pytest.raises(ValueError, match="curve 'b' has no errors"):
    plots.ecdf_plot({"a": e, "b": []})


def test_interval_plot_draws_rows_top_down_with_their_intervals():
  rows = {"a": (0.02, 0.01, 0.04), "b": (0.5,), "c": (0.2, 0.1, 0.3)}
  fig = plots.interval_plot(rows, metric="x", reference=0.05, model="m", n=3)
  ax = fig.axes[0]
  pts = np.array([ln.get_xydata()[0] for ln in ax.lines if ln.get_marker() == "o"])
  np.testing.assert_allclose(pts, [[0.02, 2], [0.5, 1], [0.2, 0]])
  segs = [np.asarray(s) for c in ax.collections for s in c.get_segments()]
  np.testing.assert_allclose(segs, [[[0.01, 2], [0.04, 2]], [[0.1, 0], [0.3, 0]]])
  (ref,) = [ln for ln in ax.lines if ln.get_linestyle() == "--"]
  np.testing.assert_allclose(ref.get_xdata(), [0.05, 0.05])
  assert {t.get_text(): t.get_position()[1] for t in ax.get_yticklabels()} == {
    "a": 2,
    "b": 1,
    "c": 0,
  }
  assert ax.get_ylim() == pytest.approx((-0.6, 2.6)) and ax.get_title() == "x — m (n = 3)"
  fig = plots.interval_plot({"a": (0.02, 0.0, 0.04), "b": (0.5,)}, metric="x", log_x=True)
  assert fig.axes[0].get_xlim() == pytest.approx((0.02 / 1.2, 0.5 * 1.2))  # the 0 is left out
  with pytest.raises(ValueError, match=r"rows\['z'\]: log_x needs a positive estimate, got 0.0"):
    plots.interval_plot({"z": (0.0, 0.0, 0.01), "b": (0.5,)}, metric="x", log_x=True)
  with pytest.raises(ValueError, match=r"rows\['a'\] must be .* got 2 values"):
    plots.interval_plot({"a": (0.1, 0.2)}, metric="x")


def test_mcb_dsc_plot_isolines_carry_their_score_and_cover_the_window():
  from jaxcal._src.plots.decomposition import _nice_step

  assert [_nice_step(1.0, 5), _nice_step(1.2, 5), _nice_step(0.0)] == [0.2, 0.25, 1.0]
  pts = {"a": (0.06, 8.28), "b": (0.01, 7.18)}
  fig = plots.mcb_dsc_plot(pts, unc=9.0, markers={"b": "s"})
  ax = fig.axes[0]
  x0, x1, y0, y1 = 0.005, 0.065, 7.07, 8.39  # 10 % of the spread beyond the points
  assert ax.get_xlim() == pytest.approx((x0, x1)) and ax.get_ylim() == pytest.approx((y0, y1))
  # S = MCB - DSC + UNC spans [0.615, 1.995] in the window: lines every 0.25 from 0.75
  s = np.array([x0 - ln.get_ydata()[0] + 9.0 for ln in ax.lines])
  np.testing.assert_allclose(s, np.arange(3, 9) * 0.25)
  for ln, si in zip(ax.lines, s):
    np.testing.assert_allclose(ln.get_xydata(), [[x0, x0 + 9.0 - si], [x1, x1 + 9.0 - si]])
  labels = {t.get_text(): t.xy for t in ax.texts}
  assert set(labels) <= {f"S = {v:.2f}" for v in s} and len(labels) >= 3  # the step's decimals
  for text, (x, y) in labels.items():
    assert x - y + 9.0 == pytest.approx(float(text[4:]))  # on its own line
    assert y == pytest.approx(y1) or x == pytest.approx(x1)  # where it leaves the window
  offsets = [c.get_offsets()[0] for c in ax.collections]
  np.testing.assert_allclose(offsets, [[0.06, 8.28], [0.01, 7.18]])
  assert ax.get_legend() is not None
  paths = [c.get_paths()[0].vertices for c in ax.collections]
  assert len(paths[0]) != len(paths[1])  # "o" and "s" markers
  with pytest.raises(ValueError, match="unc must be a finite number, got nan"):
    plots.mcb_dsc_plot(pts, unc=np.nan)
  # lines 0.005 apart at S ~ 1.1 (CIFAR-100 log scores): 3 significant digits
  # labelled 1.095 and 1.105 "S = 1.09" and "S = 1.1"; each label names its line
  ax = plots.mcb_dsc_plot({"a": (0.19921, 3.70537), "b": (0.21, 3.7)}, unc=4.60517).axes[0]
  texts = [t.get_text() for t in ax.texts]
  assert len(texts) >= 3 and len(set(texts)) == len(texts)
  for t in ax.texts:
    x, y = t.xy
    assert float(t.get_text()[4:]) == pytest.approx(x - y + 4.60517, abs=1e-9)


def test_lce_bandwidth_plot_draws_curves_reference_floor_and_limits():
  g = np.array([1.0, 10.0])
  v = np.array([0.01, 0.05])
  fig = plots.lce_bandwidth_plot(
    g,
    {"a": v},
    bands={"a": (0.5 * v, 1.2 * v)},
    floor=[0.004, 0.006],
    reference={"a": 0.02},
  )
  ax = fig.axes[0]
  np.testing.assert_allclose(ax.lines[0].get_xydata(), np.c_[g, v])
  (ref,) = [ln for ln in ax.lines if ln.get_linestyle() == ":" and np.size(ln.get_xdata())]
  np.testing.assert_allclose(ref.get_ydata(), [0.02, 0.02])
  (fl,) = [ln for ln in ax.lines if ln.get_linestyle() == "--"]
  np.testing.assert_allclose(fl.get_xydata(), np.c_[g, [0.004, 0.006]])
  np.testing.assert_allclose(_fill_ys(ax.collections[0]), np.unique(np.r_[0.5 * v, 1.2 * v]))
  assert ax.get_xlim() == pytest.approx((1 / 1.1, 11.0))
  assert ax.get_ylim() == pytest.approx((0.004 / 1.3, 0.06 * 1.3)) and ax.get_yscale() == "log"


def test_smooth_reliability_diagram_draws_the_smoothed_curve_it_computes(toy):
  p, y = toy
  s = metrics.smooth_reliability(p, y, 0.1, num_points=50)
  fig = plots.smooth_reliability_diagram(p, y, 0.1, num_points=50)
  ax = fig.axes[0]
  t, acc, dens = (np.asarray(a, np.float64) for a in (s.mesh, s.accuracy, s.density))
  scale = np.clip(dens / dens.max(), 0, 1)
  keep = (scale[:-1] >= 1e-3) & (scale[1:] >= 1e-3)
  assert 0 < keep.sum() < keep.size  # some segments are left out
  (curve,) = [c for c in ax.collections if type(c).__name__ == "LineCollection"]
  segs = np.stack([np.c_[t[:-1], acc[:-1]], np.c_[t[1:], acc[1:]]], axis=1)[keep]
  np.testing.assert_allclose(np.array(curve.get_segments()), segs, atol=1e-6)
  mid = (scale[:-1] + scale[1:])[keep] / 2
  np.testing.assert_allclose(curve.get_linewidths(), 0.6 + 3.4 * np.sqrt(mid), rtol=1e-5)
  (area,) = [c for c in ax.collections if c is not curve]
  assert _fill_ys(area).max() == pytest.approx(0.25)
  text = ax.texts[0].get_text()
  assert (
    text
    == f"smECE = {report.format_number(float(s.smooth_ece))}  (σ = {report.format_number(0.1)})"
  )


def test_log_ticks_pick_powers_of_ten_from_two_decades_and_1_2_5_steps_below():
  plt = pytest.importorskip("matplotlib.pyplot")
  from matplotlib import ticker

  from jaxcal._src.plots import _mpl

  fig, ax = plt.subplots()
  _mpl.log_ticks(ax, "y", 1.0, 100.0)  # exactly two decades
  assert isinstance(ax.yaxis.get_major_formatter(), ticker.LogFormatterSciNotation)
  assert ax.yaxis.get_major_locator().numticks == 12
  _mpl.log_ticks(ax, "y", 1.0, 10**8.5)  # beyond eight decades: every other one labelled
  assert ax.yaxis.get_major_locator().numticks == 6
  _mpl.log_ticks(ax, "x", 1.0, 4.0)  # 0.6 decades: evenly spaced round values
  ticks = ax.xaxis.get_major_locator().tick_values(1.0, 4.0)
  inside = ticks[(ticks >= 1.0) & (ticks <= 4.0)]
  assert len(inside) >= 2 and np.allclose(np.diff(ticks), ticks[1] - ticks[0])
  fmt = ax.xaxis.get_major_formatter()
  assert [fmt(v, 0) for v in (1.0, 3.0, 0.2, 2.5, 3.25e-4)] == [
    "1",
    "3",
    report.format_number(0.2, 2),
    "2.5",
    "3.25e-4",
  ]
  _mpl.log_ticks(ax, "x", 1.0, 6.0)  # 0.78 decades: 1-2-5 steps
  assert 1.5 not in set(np.round(ax.xaxis.get_major_locator().tick_values(1.0, 6.0), 9))
  plt.close(fig)


def test_savefig_writes_png_at_the_given_dpi(tmp_path):
  fig = plots.ecdf_plot({"a": [0.01, 0.02, 0.04]})

  def width(dpi):
    (path,) = plots.savefig(fig, tmp_path / f"w{dpi}", ("png",), dpi=dpi)
    return int.from_bytes(open(path, "rb").read()[16:20], "big")  # the IHDR width

  assert width(200) / width(50) == pytest.approx(4, rel=0.05)


def test_reliability_diagram_count_axis_ends_at_the_power_of_ten_above_the_fullest_bin():
  """Ten samples in one bin: 1.05 * 10 passes 10, so the axis runs to 100."""
  fig = plots.reliability_diagram(_top_label_probs(np.full(10, 0.9)), np.zeros(10, int), 4)
  assert fig.axes[1].get_ylim() == pytest.approx((0.7, 100.0))
  np.testing.assert_allclose(_bars(fig.axes[1].containers[0]), [[0.75, 0.25, 0, 10]])


def test_interval_plot_draws_no_bar_for_a_half_open_interval():
  fig = plots.interval_plot({"a": (0.3, np.nan, 0.4), "b": (0.2, 0.1, 0.3)}, metric="x")
  segs = [np.asarray(s) for c in fig.axes[0].collections for s in c.get_segments()]
  np.testing.assert_allclose(segs, [[[0.1, 0], [0.3, 0]]])


def test_interval_plot_keeps_a_log_axis_reference_in_view():
  # the log axis's limits came from the rows alone: a reference of 0.05 was off the axes
  rows = {"a": (0.02, 0.01, 0.03), "b": (0.015, 0.012, 0.018)}
  lo, hi = plots.interval_plot(rows, metric="x", log_x=True, reference=0.05).axes[0].get_xlim()
  assert lo < 0.01 and hi > 0.05
  with pytest.raises(ValueError, match="log_x needs a positive reference, got 0.0"):
    plots.interval_plot(rows, metric="x", log_x=True, reference=0.0)  # drawn nowhere


def test_mcb_dsc_plot_labels_each_isoline_where_it_leaves_the_window():
  """Lines leaving through the top are labelled there, the others at the right edge."""
  fig = plots.mcb_dsc_plot({"a": (0.2, 0.5), "b": (0.6, 0.9)}, unc=1.0)
  ax = fig.axes[0]
  # window [0.16, 0.64] x [0.46, 0.94], S in [0.22, 1.18]: lines every 0.2 from 0.4 to 1.2
  want = {"S = 0.4": (0.34, 0.94), "S = 0.6": (0.54, 0.94), "S = 0.8": (0.64, 0.84)}
  want["S = 1.0"] = (0.64, 0.64)  # S = 1.2 leaves below the window: no label
  got = {t.get_text(): t.xy for t in ax.texts}
  assert set(got) == set(want)
  for k, xy in want.items():
    np.testing.assert_allclose(got[k], xy, atol=1e-12)


def test_plots_skip_what_is_not_finite():
  """No text for a NaN correlation, no band segment with a NaN end."""
  r = np.array([[1.0, np.nan], [0.4, 1.0]])
  fig = plots.rank_stability_plot([5, 20], {"a": r})
  assert sorted(t.get_text() for t in fig.axes[0].texts) == ["0.40", "1.00", "1.00"]
  bands = bootstrap.ConsistencyBands(
    np.array([0.1, 0.42, 0.67, 0.9]),
    np.array([0.0, 0.3, 0.3, 0.7]),
    np.array([0.2, 0.9, np.nan, 1.0]),
    np.array([0, 2, 3, 3]),
  )
  fig = plots.reliability_diagram(_top_label_probs(_CONF), _LABELS, 4, bands=bands)
  (segs,) = [c for c in fig.axes[0].collections if c.get_segments()]
  np.testing.assert_allclose(np.array(segs.get_segments())[:, 0, 0], [0.42, 0.9])
  # a log axis with no positive error is left linear, its limits in order
  ax = plots.ecdf_plot({"a": [0.0, 0.0]}, log_x=True).axes[0]
  assert ax.get_xscale() == "linear" and ax.get_xlim()[0] < ax.get_xlim()[1]
  # one distinct positive error was drawn on a linear axis too: now a log one around it
  ax = plots.ecdf_plot({"a": [0.02, 0.02], "b": [0.0, 0.02]}, log_x=True).axes[0]
  assert ax.get_xscale() == "log" and ax.get_xlim() == pytest.approx((0.02 / 3, 0.06))


_P = np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.3, 0.3, 0.4], [0.5, 0.25, 0.25]])
_Y = np.array([0, 1, 2, 1])
_M = [5, 20, 100]
_C = {"a": [0.1, 0.2, 0.3]}


@pytest.mark.parametrize(
  "call,error,match",
  [
    # a bad ax was an AttributeError ('str' object has no attribute 'figure')
    (lambda: plots.reliability_diagram(_P, _Y, 4, ax="a"), TypeError, "ax must be a matplotlib"),
    (lambda: plots.smooth_reliability_diagram(_P, _Y, ax=3), TypeError, "ax must be a matplotlib"),
    (lambda: plots.ecdf_plot({"a": [0.1]}, ax="a"), TypeError, "ax must be a matplotlib Axes"),
    (lambda: plots.bin_robustness_plot(_M, _C, ax="a"), TypeError, "ax must be a matplotlib"),
    # bands that are neither a bool nor ConsistencyBands were silently not drawn
    (lambda: plots.reliability_diagram(_P, _Y, 4, bands="yes"), TypeError, "bands must be True"),
    (lambda: plots.reliability_diagram(_P, _Y, 4, bands=True, seed=1.5), ValueError, "seed must"),
    # NaN / inf values were drawn as gaps or dropped points, or counted in an eCDF
    (lambda: plots.ecdf_plot({"a": [0.1, np.nan]}), ValueError, r"curve 'a' must be finite"),
    (lambda: plots.bin_robustness_plot(_M, {"a": [0, np.inf, 1]}), ValueError, "must be finite"),
    (lambda: plots.lce_bandwidth_plot([1, 2], {"a": [0.1, np.nan]}), ValueError, "finite"),
    # bandwidths '12' were read as the one bandwidth 12, [[1, 2]] flattened (found by a
    # review helper); a curve '0.1' as the number 0.1
    (
      lambda: plots.lce_bandwidth_plot("12", {"a": [0.1, 0.2]}),
      ValueError,
      r"bandwidths must be a 1-D sequence \(k,\) of numbers, got '12'",
    ),
    (
      lambda: plots.lce_bandwidth_plot([[1, 2]], {"a": [0.1, 0.2]}),
      ValueError,
      r"bandwidths must be a 1-D sequence \(k,\) of numbers, got shape \(1, 2\)",
    ),
    (
      lambda: plots.lce_bandwidth_plot(10.0, {"a": [0.1]}),
      ValueError,
      r"bandwidths must be a 1-D sequence \(k,\) of numbers, got shape \(\)",
    ),
    (
      lambda: plots.lce_bandwidth_plot([1.0], {"a": "0.1"}),
      ValueError,
      "curve 'a' must be numbers, got the string '0.1'",
    ),
    (
      lambda: plots.interval_plot({"a": (np.nan, 0.1, 0.2)}, metric="x"),
      ValueError,
      r"rows\['a'\]: the estimate must be finite",
    ),
    (
      lambda: plots.interval_plot({"a": (0.1, 0.3, 0.2)}, metric="x"),
      ValueError,
      r"rows\['a'\]: the interval must have finite lo <= hi",
    ),
    # bands / references for labels that are not curves were silently ignored
    (
      lambda: plots.bin_robustness_plot(_M, _C, bands={"b": ([0] * 3, [1] * 3)}),
      ValueError,
      r"bands has entries \['b'\] that are not labels of curves",
    ),
    (
      lambda: plots.bin_robustness_plot(_M, _C, reference={"b": 0.1}),
      ValueError,
      r"reference has entries \['b'\]",
    ),
    (
      lambda: plots.lce_bandwidth_plot([1, 2], {"a": [1, 2]}, reference={"b": 0.1}),
      ValueError,
      r"reference has entries \['b'\]",
    ),
    (
      lambda: plots.bin_robustness_plot(_M, _C, bands={"a": ([1] * 3, [0] * 3)}),
      ValueError,
      "band 'a' has lo > hi at index 0",
    ),
    # infinite band ends were drawn to the axes' edge, an infinite reference not at all
    # (its legend entry was)
    (
      lambda: plots.lce_bandwidth_plot([1, 2], {"a": [1, 2]}, bands={"a": ([0, 1], [2, np.inf])}),
      ValueError,
      r"band 'a' has an infinite end at index 1: \[1.0, inf\]",
    ),
    (
      lambda: plots.bin_robustness_plot(_M, _C, bands={"a": ([-np.inf] * 3, [1] * 3)}),
      ValueError,
      "band 'a' has an infinite end at index 0",
    ),
    (
      lambda: plots.bin_robustness_plot(_M, _C, reference={"a": np.inf}),
      ValueError,
      r"reference 'a' must be finite \(or NaN: not drawn\), got \[inf\]",
    ),
    # bin counts: numpy's "zero-size array", matplotlib's "Axis limits cannot be NaN",
    # 5.5 silently drawn as 5, correlations outside [-1, 1] drawn clipped
    (lambda: plots.bin_robustness_plot([], {"a": []}), ValueError, "num_bins must be one or more"),
    (lambda: plots.bin_robustness_plot([np.nan, 2, 5], _C), ValueError, "num_bins must be finite"),
    (
      lambda: plots.rank_stability_plot([5.5, 20], {"a": np.eye(2)}),
      ValueError,
      r"num_bins must be one or more integers >= 1, got \[5.5, 20.0\]",
    ),
    (
      lambda: plots.rank_stability_plot([5, 20], {"a": 3 * np.eye(2)}),
      ValueError,
      r"correlations\['a'\] must lie in \[-1, 1\]",
    ),
    (lambda: plots.ecdf_plot([0.1, 0.2]), TypeError, "curves must be a mapping"),
    # numeric strings and complex values read as numbers (the imaginary part dropped
    # with numpy's warning); a number as the metric or model ended in str.join's
    # "sequence item 0: expected str instance" (found by a review helper)
    (
      lambda: plots.interval_plot({"a": "0.1"}, metric="x"),
      ValueError,
      r"rows\['a'\] must be real numbers, got '0.1'",
    ),
    (
      lambda: plots.bin_robustness_plot(["5", "10"], {"a": [1, 2]}),
      ValueError,
      r"num_bins must be real numbers, got \['5', '10'\]",
    ),
    (
      lambda: plots.ecdf_plot({"a": np.array(["0.1", 0.2], dtype=object)}),
      ValueError,
      "curve 'a' must be real numbers",
    ),
    (
      lambda: plots.ecdf_plot({"a": [0.1 + 1j, 0.2]}),
      ValueError,
      r"curve 'a' must be real numbers, got \[\(0.1\+1j\), 0.2\]",
    ),
    (
      lambda: plots.interval_plot({"a": (0.1, 0.05, 0.2)}, metric=3),
      TypeError,
      "metric must be a str or None, got int 3",
    ),
    (
      lambda: plots.ecdf_plot({"a": [0.1, 0.2]}, model=5),
      TypeError,
      "model must be a str or None, got int 5",
    ),
    # MCB-DSC: an IndexError / a numpy ufunc TypeError / a loop over 10**7 isolines
    (lambda: plots.mcb_dsc_plot({"a": (0.1,)}, 0.5), ValueError, r"points\['a'\] must be a pair"),
    (lambda: plots.mcb_dsc_plot({"a": (0.1, 0.2)}, "x"), ValueError, "unc must be a number"),
    (
      lambda: plots.mcb_dsc_plot({"a": (0.1, 0.2)}, 0.5, num_isolines=10**7),
      ValueError,
      "num_isolines must be <= 100",
    ),
  ],
)
def test_bad_plot_inputs_raise(call, error, match):
  with pytest.raises(error, match=match):
    call()


def test_lce_bandwidth_plot_spans_600_decades_without_overflow(tmp_path):
  """Bandwidths 1e-300 and 1e300: ``g.max() / g.min()`` overflowed (a RuntimeWarning), and
  matplotlib's 5 % autoscale margin in log space overflowed too (found by a review helper).
  Now the two are compared and the limits set before the log scale."""
  import warnings

  with warnings.catch_warnings():
    # the overflow's warning only: matplotlib before 3.10.9 warns of pyparsing 3.3's names
    warnings.simplefilter("error", RuntimeWarning)
    fig = plots.lce_bandwidth_plot([1e-300, 1e300], {"a": [0.1, 0.2]})
    fig.savefig(tmp_path / "f.png")
  lo, hi = fig.axes[0].get_xlim()
  assert fig.axes[0].get_xscale() == "log"
  np.testing.assert_allclose([lo, hi], [1e-300 / 1.1, 1e300 * 1.1])


def test_savefig_bad_arguments_raise(tmp_path):
  fig = plots.ecdf_plot({"a": [0.1]})
  with pytest.raises(ValueError, match=r"formats must be a sequence of names .* got 'png'"):
    plots.savefig(fig, tmp_path / "f", "png")  # was "got 'p'"
  with pytest.raises(ValueError, match="formats is empty"):
    plots.savefig(fig, tmp_path / "f", ())  # wrote nothing, silently
  with pytest.raises(ValueError, match="dpi must be >= 1, got 0"):
    plots.savefig(fig, tmp_path / "f", ("png",), dpi=0)
  with pytest.raises(TypeError, match="fig must be a matplotlib Figure, got NoneType"):
    plots.savefig(None, tmp_path / "f")
  assert not list(tmp_path.iterdir())


def test_plot_options_take_the_library_s_own_scalars():
  """``unc`` and ``reference`` accept 0-d numpy / JAX numbers (a decomposition's, a metric's)."""
  import jax.numpy as jnp

  from jaxcal import scores

  d = scores.decompose(jnp.array([[0.8, 0.2], [0.6, 0.4], [0.3, 0.7], [0.1, 0.9]]), [0, 1, 0, 1])
  fig = plots.mcb_dsc_plot({"m": (d.mcb, d.dsc)}, d.unc)
  np.testing.assert_allclose(fig.axes[0].collections[0].get_offsets()[0], [d.mcb, d.dsc])
  fig = plots.interval_plot(
    {"m": (0.02, 0.01, 0.03)}, metric="ConfECE", reference=jnp.float32(0.025)
  )
  assert any(np.allclose(ln.get_xdata(), 0.025) for ln in fig.axes[0].lines)
  fig = plots.lce_bandwidth_plot([1.0, 10.0], {"m": [0.02, 0.01]}, reference={"m": np.array(0.03)})
  assert any(np.allclose(ln.get_ydata(), 0.03) for ln in fig.axes[0].lines)
  with pytest.raises(ValueError, match="unc must be a number"):
    plots.mcb_dsc_plot({"m": (0.1, 0.2)}, jnp.ones(2))


def test_narrow_log_axes_label_each_tick_with_its_value():
  """Every visible tick label of a narrow log axis reads as its position, and there are two."""

  def labelled(fig, axis="x"):
    ax = fig.axes[0]
    fig.canvas.draw()
    lo, hi = ax.get_xlim() if axis == "x" else ax.get_ylim()
    ticks = (ax.xaxis if axis == "x" else ax.yaxis).get_majorticklabels()
    return [
      (t.get_position()[0 if axis == "x" else 1], t.get_text())
      for t in ticks
      if t.get_text() and lo <= t.get_position()[0 if axis == "x" else 1] <= hi
    ]

  figs = [
    plots.lce_bandwidth_plot(g, {"m": [0.010, 0.011]})
    for g in ([12.5, 13.8], [10.0, 12.0], [2.1, 2.6], [1.0, 30.0])
  ]
  figs.append(
    plots.interval_plot(
      {"a": (2.9e-4, 2.8e-4, 3.5e-4), "b": (3.0e-4, 2.9e-4, 3.2e-4)},
      metric="ConfCE_corr(qua;15)",
      log_x=True,
    )
  )
  for fig in figs:
    ticks = labelled(fig)
    assert len(ticks) >= 2, ticks
    for at, text in ticks:
      assert float(text) == pytest.approx(at, rel=1e-9), ticks


def test_bad_plot_arguments_raise_before_drawing(toy):
  plt = pytest.importorskip("matplotlib.pyplot")
  p, y = toy
  pts = {"a": (0.01, 0.08), "b": (0.02, 0.07)}
  cases = [
    (
      lambda: plots.mcb_dsc_plot(pts, 0.1, markers=["o", "s"]),
      TypeError,
      "markers must be a mapping",
    ),
    (
      lambda: plots.mcb_dsc_plot(pts, 0.1, colors={"c": "red"}),
      ValueError,
      r"colors has entries \['c'\]",
    ),
    (  # a bad marker or colour value left its figure open
      lambda: plots.mcb_dsc_plot(pts, 0.1, markers={"a": "notamarker"}),
      ValueError,
      r"markers\['a'\] is not a matplotlib marker: 'notamarker'",
    ),
    (
      lambda: plots.mcb_dsc_plot(pts, 0.1, colors={"b": "notacolor"}),
      ValueError,
      r"colors\['b'\] is not a matplotlib color: 'notacolor'",
    ),
    (  # drawn as a zig-zag line before
      lambda: plots.lce_bandwidth_plot([10.0, 1.0, 5.0], {"m": [0.01, 0.03, 0.02]}),
      ValueError,
      r"bandwidths must be increasing .* got \[10.0, 1.0, 5.0\]",
    ),
    (
      lambda: plots.rank_stability_plot([5, 20, 5], {"a": np.eye(3)}),
      ValueError,
      r"num_bins must be distinct, got \[5.0, 20.0, 5.0\]",
    ),
    (
      lambda: plots.ecdf_plot({"A": np.full((2, 30), 0.1)}),
      ValueError,
      r"curve 'A' must be one row of numbers, got shape \(2, 30\)",
    ),
    (
      lambda: plots.bin_robustness_plot([10, 2, 5], {"ConfECE": [0.3, 0.1, 0.2]}),
      ValueError,
      r"num_bins must be increasing .* got \[10.0, 2.0, 5.0\]",
    ),
    (
      lambda: plots.lce_bandwidth_plot(
        [1.0, 10.0], {"m": [0.02, 0.01]}, bands={"m": ([0.03, 0.0], [0.01, 0.02])}
      ),
      ValueError,
      "band 'm' has lo > hi at index 0",
    ),
    (
      lambda: plots.lce_bandwidth_plot(
        [1.0, 10.0], {"m": [0.02, 0.01]}, bands={"m": [0.01, 0.02, 0.03]}
      ),
      ValueError,
      "band 'm' must be a pair",
    ),
    (
      lambda: plots.reliability_diagram(
        p,
        y,
        10,
        "quantile",
        bands=bootstrap.consistency_bands(jax.random.key(0), p, 10, "fixed", num_resamples=20),
      ),
      ValueError,
      "bands were computed on other data or with another binning",
    ),
  ]
  for call, kind, match in cases:
    before = plt.get_fignums()
    with pytest.raises(kind, match=match):
      call()
    assert plt.get_fignums() == before, match  # no figure left open by a refused call


def test_a_plot_keeps_the_backend_the_user_chose(tmp_path):
  """``matplotlib.use("svg")`` stays after a jaxcal plot (it used to switch to Agg without DISPLAY)."""
  import os
  import subprocess
  import sys

  code = (
    "import matplotlib; matplotlib.use('svg'); import matplotlib.pyplot as plt\n"
    "from jaxcal import plots; plots.ecdf_plot({'a': [0.1, 0.2]})\n"
    "print(matplotlib.get_backend())\n"
  )
  env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "MPLBACKEND")}
  env["JAX_PLATFORMS"] = "cpu"
  out = subprocess.run(
    [sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=tmp_path
  )
  assert out.returncode == 0, out.stderr
  assert out.stdout.strip().lower() == "svg"


def test_savefig_writes_the_same_bytes_for_the_same_figure(tmp_path, monkeypatch):
  """SVG and PDF carried the time of the save (SOURCE_DATE_EPOCH stands in for the clock
  here) and SVG ids a random salt: two saves of one figure, or two runs of a report,
  differed (found by a review helper)."""
  rows = {"a": (0.01, 0.005, 0.03), "b": (0.02, 0.01, 0.04)}  # (clip paths: hashed SVG ids)
  fig = plots.interval_plot(rows, metric="ConfECE(fix;15)", model="m", n=100)
  written = []
  for i, epoch in enumerate(("0", "1000000000", "1000000000")):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", epoch)
    if i == 2:  # a second run: the same figure drawn again, every format
      fig = plots.interval_plot(rows, metric="ConfECE(fix;15)", model="m", n=100)
    written.append(plots.savefig(fig, tmp_path / f"f{i}", ("svg", "pdf", "png")[: 2 + (i > 0)]))
  for other in written[1:]:
    for first, second in zip(written[0], other):
      assert pathlib.Path(first).read_bytes() == pathlib.Path(second).read_bytes(), second
  svg = pathlib.Path(written[0][0]).read_bytes()
  assert b"<dc:date>" not in svg and b"CreationDate" not in pathlib.Path(written[0][1]).read_bytes()
  monkeypatch.delenv("SOURCE_DATE_EPOCH")  # no date either without it
  fig = plots.interval_plot(rows, metric="ConfECE(fix;15)", model="m", n=100)
  (path,) = plots.savefig(fig, tmp_path / "f3", ("svg",))
  assert pathlib.Path(path).read_bytes() == svg


def test_ecdf_plot_says_its_axis_is_logarithmic_and_labels_two_decades_densely():
  """The log x axis was labelled as a linear one, and across two to three decades only
  its two powers of ten were labelled (found by a review helper); the minor ticks of the
  top decade were missing (placed a decade low)."""
  e = np.geomspace(1.5e-4, 2.5e-2, 50)
  fig = plots.ecdf_plot({"linear utilities": e, "rank utilities": 0.9 * e}, log_x=True, n=10)
  ax = fig.axes[0]
  assert ax.get_xlabel() == "utility calibration error UC (log scale)"
  _check(fig)
  lo, hi = ax.get_xlim()
  shown = {
    which: [
      (t.get_position()[0], t.get_text())
      for t in getattr(ax.xaxis, f"get_{which}ticklabels")()
      if t.get_text() and lo <= t.get_position()[0] <= hi
    ]
    for which in ("major", "minor")
  }
  assert [at for at, _ in shown["major"]] == pytest.approx([1e-3, 1e-2])
  assert [at for at, _ in shown["minor"]] == pytest.approx([2e-4, 5e-4, 2e-3, 5e-3, 2e-2])
  assert shown["minor"][2][1] == r"$\mathdefault{2\times10^{-3}}$"
  ticks = ax.xaxis.get_minorticklocs()
  # the top decade's, and none beyond a decade under the view (matplotlib before 3.11
  # lists the ticks of one decade past each limit, not drawn)
  assert np.any(np.isclose(ticks, 0.03)) and not np.any(ticks < lo / 10)
  # three labelled powers of ten: no minor labels; a linear axis says nothing of a scale
  ax = plots.ecdf_plot({"a": np.geomspace(1e-3, 0.2, 20)}, log_x=True).axes[0]
  ax.figure.canvas.draw()
  assert not [t for t in ax.xaxis.get_minorticklabels() if t.get_text()]
  assert plots.ecdf_plot({"a": e}).axes[0].get_xlabel() == "utility calibration error UC"
  ax = plots.ecdf_plot({"a": e}, log_x=True, xlabel="UC (log axis)").axes[0]
  assert ax.get_xlabel() == "UC (log axis)"
