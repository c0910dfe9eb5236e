"""Every public plot function, rendered on small data: title, axis labels, no overlapping ticks."""

import itertools

import jax
import numpy as np
import pytest

pytest.importorskip("matplotlib")

from jaxcal import bootstrap, metrics, plots, report


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
