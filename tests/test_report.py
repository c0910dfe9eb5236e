"""The calibration report: JSON schema, rounding, one vocabulary, rank stability."""

import functools
import json
import pathlib
import sys

import jax
import numpy as np
import pytest
from scipy import stats

from jaxcal import bootstrap, data, metrics, report, scores
from jaxcal._src import report as report_src
from jaxcal._src.names import round_floats

sys.path.insert(0, str(pathlib.Path(__file__).parent))  # --import-mode=importlib
import _reference as ref


@pytest.fixture(scope="module")
def small():
  # n and the report settings below are those of tests/test_cli.py's report
  # test, so the two share their compiled programs (the test run's cache)
  x, y = data.default_predictions()
  return np.asarray(x[:1500]), np.asarray(y[:1500])


@pytest.fixture(scope="module")
def rep(small):
  x, y = small
  return report.calibration_report(
    x, y, num_utilities=32, resamples=10, robustness_resamples=50, seed=3, source="toy", path="p"
  )


def test_accuracy_of_a_model_wrong_on_every_sample_is_zero_not_negative(monkeypatch):
  # under jit (outside the tests' -O0 flag) 1 - error was fma(-sum, 1/n, 1) = -5.2e-8
  # at n = 15 with no hit: the report's accuracy is clipped to [0, 1]
  from jaxcal._src import report as R

  x, y = data.default_predictions()
  monkeypatch.setattr(
    R.scores, "classification_error", lambda p, y, where=None: np.float32(1 + 2**-23)
  )
  assert float(R._FUNCTIONS["accuracy"](x[:15], y[:15], None, None)) == 0.0
  monkeypatch.setattr(
    R.scores, "classification_error", lambda p, y, where=None: np.float32(-(2**-23))
  )
  assert float(R._FUNCTIONS["accuracy"](x[:15], y[:15], None, None)) == 1.0


def test_json_schema_settings_and_provenance(rep):
  assert set(rep) >= {"jaxcal", "input", "settings", "seeds", "metrics", "robustness", "utility"}
  assert set(rep) >= {"decomposition", "timing"}
  assert rep["jaxcal"]["jaxcal"] and rep["jaxcal"]["jax"] and rep["jaxcal"]["device"]
  assert rep["input"]["n"] == 1500 and rep["input"]["num_classes"] == 10
  assert rep["input"]["kind"] == "logits" and rep["input"]["path"].endswith("p")
  assert rep["settings"]["resamples"] == 10 and rep["settings"]["interval"] == "percentile"
  assert rep["seeds"]["seed"] == 3
  for lab, entry in rep["metrics"].items():
    name, _, m = report.parse_label(lab)
    assert entry["name"] == name.name and entry["num_bins"] == m
    assert entry["lo"] <= entry["estimate"] + 1e-7 or entry["kind"] == "l1"
    assert entry["lo"] <= entry["hi"]
  json.dumps(rep)  # JSON-able as returned


def test_headline_estimates_are_the_public_metrics(rep, small):
  x, y = small
  p = jax.nn.softmax(x, axis=-1)
  m = rep["metrics"]
  assert m["ConfECE(fix;15)"]["estimate"] == pytest.approx(float(metrics.conf_ece(p, y)), rel=1e-4)
  assert m["LinCE_cw(qua;15)"]["estimate"] == pytest.approx(
    float(metrics.classwise_ce(p, y)), rel=1e-3
  )
  assert m["Brier"]["estimate"] == pytest.approx(float(scores.brier(p, y)), rel=1e-5)
  acc = float(np.mean(np.argmax(x, 1) == y))
  assert m["accuracy"]["estimate"] == pytest.approx(acc, abs=1e-6)


def test_smooth_ece_sits_beside_the_binned_ece_with_its_interval(rep, small):
  """smECE (Błasiok & Nakkiran 2023) is a headline metric: the public value, an interval."""
  x, y = small
  labs = list(rep["metrics"])
  assert labs.index("smECE") == labs.index("ConfECE(qua;15)") + 1
  e = rep["metrics"]["smECE"]
  want = float(metrics.smooth_ece(jax.nn.softmax(x, axis=-1), y))
  assert e["estimate"] == pytest.approx(want, rel=1e-4)
  assert e["name"] == "smECE" and e["function"] == "metrics.smooth_ece"
  assert e["binning"] is None and e["num_bins"] is None and e["kind"] == "l1"
  assert 0 < e["lo"] < e["hi"] and e["lo"] != e["hi"]
  assert "smECE" in report.format_summary(rep) and "| smECE |" in report.format_markdown(rep)
  assert report.format_number(e["estimate"]) in report.format_summary(rep)
  assert report.label("smECE") == "smECE" and report.parse_label("smECE")[0].name == "smECE"


@pytest.mark.parametrize(
  "args, message",
  [
    (("ECCE", "quantile", 15), "ECCE always uses equal-width bins"),
    (("ConfECE", None, 0), "num_bins must be an int >= 1 or None, got 0"),
    (("ConfECE", "fixed", 2.5), "num_bins must be an int >= 1 or None, got 2.5"),
    (("ConfECE", "equal"), "binning must be 'fixed' or 'quantile'"),
  ],
)
def test_label_refuses_what_parse_label_refuses(args, message):
  # label("ECCE", "quantile", 15) gave "ECCE(15)" (fixed bins when parsed back) and
  # label("ConfECE", num_bins=0) "ConfECE(fix;0)"
  with pytest.raises(ValueError, match=message):
    report.label(*args)
  assert report.label("ECCE", "fixed", 15) == "ECCE(15)"
  assert report.parse_label(report.label("ConfECE", "quantile", np.int64(7)))[1:] == ("quantile", 7)


def test_robustness_section_has_bands_and_calibrated_values(rep):
  rob = rep["robustness"]
  bins = rob["num_bins"]
  assert bins[0] == 2 and bins[-1] == 1500 and bins == sorted(set(bins))
  assert rep["settings"]["num_bins"] in bins  # the headline bin count is on the grid
  assert rep["settings"]["consistency_confidence"] == rep["settings"]["confidence"]
  for name, curve in rob["curves"].items():
    report.parse_label(name)
    assert len(curve["estimate"]) == len(bins)
    assert np.all(np.asarray(curve["lo"]) <= np.asarray(curve["hi"]))
  assert set(rob["calibrated_value"]) == {"ConfCE_corr(qua)", "LinCE_cw(qua)"}


def test_written_json_is_rounded_and_figures_exist(rep, small, tmp_path):
  x, y = small
  paths = report.write_report(rep, x, y, str(tmp_path), formats=("png", "svg"))
  text = (tmp_path / "report.json").read_text()
  back = json.loads(text)
  assert back["metrics"].keys() == rep["metrics"].keys()
  # no float32 noise: at most six significant digits anywhere
  floats = [t for t in text.replace(",", " ").replace("]", " ").split() if "." in t]
  for t in floats:
    t = t.strip('"')
    try:
      v = float(t)
    except ValueError:
      continue
    digits = t.lstrip("-").split("e")[0].replace(".", "").lstrip("0")
    assert len(digits) <= 6, (t, v)
  for stem in ("reliability", "smooth_reliability", "bin_robustness", "utility_ecdf"):
    assert (tmp_path / f"{stem}.png").stat().st_size > 5_000
    assert (tmp_path / f"{stem}.svg").exists()
  assert all(str(tmp_path) in p for p in paths.values())


def test_round_floats():
  assert round_floats({"a": np.float32(0.9452)}) == {"a": 0.9452}
  assert round_floats([0.9451999999582767, float("inf"), 3, True]) == [0.9452, None, 3, True]
  assert round_floats(np.array([1.23456789e-7])) == [1.23457e-7]


def test_one_vocabulary_in_summary_markdown_and_json(rep):
  text = report.format_summary(rep)
  md = report.format_markdown(rep)
  for lab in rep["metrics"]:
    assert lab in text and lab in md
  assert "LinCE_cw(qua;15)" in rep["metrics"]
  assert "classwise_ce_quantile" not in text + md + json.dumps(rep)
  # three significant digits: the squared errors are not rounded away
  lin = rep["metrics"]["LinCE_cw(qua;15)"]["estimate"]
  assert report.format_number(lin) in text
  assert "| metric | estimate [interval] |" in md and "\n|---|---|" in md


@pytest.mark.parametrize(
  "value, text",
  [
    (0.9452, "0.945"),
    (8.31e-5, "8.31e-5"),
    (0.0001, "1.00e-4"),
    (1e-3, "0.00100"),  # the lowest positional number
    (999.4, "999"),
    (1234.5, "1.23e3"),  # three digits: scientific from 10^3
    (1e4, "1.00e4"),
    (0.0, "0"),
  ],
)
def test_format_number(value, text):
  assert report.format_number(value) == text


@pytest.mark.parametrize(
  "conf, text", [(0.95, "95%"), (0.9, "90%"), (0.9999, "99.99%"), (0.99999, "99.999%")]
)
def test_interval_text_names_the_confidence(conf, text):
  # three significant digits and stripped zeros read 0.9999 as "1%"
  s = {"resamples": 200, "confidence": conf, "interval": "percentile"}
  got = report_src._interval_text({"settings": s})
  assert got == f"{text} percentile bootstrap intervals over 200 resamples"


def test_label_round_trip_and_bad_names():
  for m in report.METRICS:
    lab = report.label(m.name, num_bins=20 if m.binning else None)
    assert report.parse_label(lab)[0] == m
  assert report.label("ECCE", num_bins=15) == "ECCE(15)"  # equal-width bins only: no rule
  with pytest.raises(ValueError, match="unknown metric name"):
    report.label("ECE_nonsense")
  with pytest.raises(ValueError, match="not a metric label"):
    report.parse_label("ConfECE[fix]")
  # labels label() never writes were accepted with a made-up rule
  with pytest.raises(ValueError, match="Brier has no bins"):
    report.parse_label("Brier(fix;15)")
  with pytest.raises(ValueError, match="ECCE always uses equal-width bins"):
    report.parse_label("ECCE(qua;15)")
  assert report.format_number(np.bool_(True)) == "True"  # not "1.00"


def test_rank_stability_matches_scipy():
  rng = np.random.default_rng(0)
  e = rng.random((7, 4))
  r = np.asarray(report.rank_stability(e))
  for i in range(4):
    for j in range(4):
      want = 1.0 if i == j else stats.spearmanr(e[:, i], e[:, j]).statistic
      assert r[i, j] == pytest.approx(want, abs=1e-5)


def test_a_comparison_needs_two_models(small):
  x, y = small
  with pytest.raises(ValueError, match="two models"):
    report.compare_report({"a": (x[:50], y[:50])})


@pytest.mark.slow  # twin: test_cli's report on a folder of models (same checks, through the CLI)
def test_compare_report_of_tempered_models(small, tmp_path):
  x, y = small
  ms = {f"T={t}": (x[:500] / t, y[:500]) for t in (0.5, 1.0, 2.0)}
  rep = report.compare_report(ms, rank_bins=(5, 20, 100), resamples=8, seed=1)
  assert set(rep["metrics"]) == set(ms)
  (group,) = rep["rank_stability"]
  assert "ConfCE(qua)" in group["errors"]
  assert all("lo" in rep["metrics"][m]["smECE"] for m in ms)  # smECE with intervals per model
  assert "smECE" in report.format_summary(rep) and "smECE" in report.format_markdown(rep)
  report.write_report(rep, out_dir=str(tmp_path), formats=("png",))
  assert any(p.name.startswith("rank_stability") for p in tmp_path.iterdir())
  with pytest.raises(ValueError, match="two models"):
    report.compare_report({"a": ms["T=1.0"]})


def test_bad_settings(small):
  x, y = small
  with pytest.raises(ValueError, match="num_bins"):
    report.calibration_report(x, y, num_bins=10_000, num_utilities=0, resamples=0)
  with pytest.raises(ValueError, match="interval"):
    report.calibration_report(x, y, interval="wald", num_utilities=0, resamples=0)
  # num_utilities and seed went through int(): 2.5 became 2, True became 1, "7" became 7
  for kw, match in [
    ({"num_utilities": 2.5}, r"num_utilities must be an int, got 2.5"),
    ({"num_utilities": -1}, "num_utilities must be >= 0, got -1"),
    ({"seed": 1.5}, r"seed must be an int, got 1.5"),
    ({"seed": "7"}, "seed must be an int, got '7'"),
  ]:
    with pytest.raises(ValueError, match=match):
      report.calibration_report(x, y, **{"num_utilities": 0, "resamples": 0, **kw})


def test_write_report_checks_its_arguments_before_writing(small, tmp_path):
  x, y = small
  x, y = x[:200], y[:200]
  rep = report.calibration_report(
    x, y, num_utilities=0, resamples=0, robustness_resamples=0, num_bins=5
  )
  (tmp_path / "file").write_text("")
  out = tmp_path / "out"
  for args, kw, match in [
    # was a FileExistsError from os.makedirs
    ((rep, x, y, str(tmp_path / "file")), {}, r"out_dir '.*file' is a file, not a folder"),
    # figures of other predictions than the report's were drawn silently
    ((rep, x[:100], y[:100], str(out)), {}, r"scores_in has shape \(100, 10\) but the report"),
    ((rep, x, y, str(out)), {"formats": "png"}, r"formats must be a sequence of names"),
    ((rep, x, y, str(out)), {"formats": ("png", "jpg")}, r"formats must be among .* got 'jpg'"),
    (([1], x, y, str(out)), {}, "rep must be a report dict"),  # was a TypeError on indexing
  ]:
    with pytest.raises(ValueError, match=match):
      report.write_report(*args, **kw)
  assert not out.exists()


def test_rank_stability_and_robustness_bins_refuse_bad_values():
  # a NaN error gave a NaN correlation
  with pytest.raises(ValueError, match="errors contains non-finite values"):
    report.rank_stability(np.array([[1.0, 2.0], [np.nan, 1.0], [3.0, 0.5]]))
  with pytest.raises(ValueError, match="n must be >= 1, got 0"):
    report.robustness_bins(0)  # was [2]
  with pytest.raises(ValueError, match="count must be >= 1, got 0"):
    report.robustness_bins(100, count=0)  # was an empty grid
  for fmt in (report.format_summary, report.format_markdown):  # was a KeyError: 'input'
    with pytest.raises(ValueError, match="rep must be a report dict"):
      fmt({})


def test_an_estimate_outside_its_interval_is_flagged_and_explained():
  from jaxcal._src import report as R

  assert R._with_interval(0.5, (0.6, 0.7))["estimate_outside_interval"]
  assert not R._with_interval(0.65, (0.6, 0.7))["estimate_outside_interval"]
  assert "estimate_outside_interval" not in R._with_interval(np.zeros(3), (np.zeros(3),) * 2)
  entries = {"ConfECE(fix;15)": dict(R._with_interval(0.5, (0.6, 0.7)), truthful=False)}
  rows = R._metric_rows(entries)
  assert rows[0][1].endswith(" †") and R._marked(entries) == [(0.6, 0.7)]


def test_settings_take_num_bins_up_to_n_and_refuse_one_resample():
  from jaxcal._src import report as R

  assert R._check_settings(5, 0, 0.9, "basic", 5) == (5, 0, 0.9)
  assert R._check_settings(1, 2, 0.9, "bca", 5) == (1, 2, 0.9)
  with pytest.raises(ValueError, match="num_bins = 6 quantile bins .* got n = 5"):
    R._check_settings(6, 0, 0.9, "basic", 5)
  with pytest.raises(ValueError, match="resamples must be 0 .* or at least 2, got 1"):
    R._check_settings(5, 1, 0.9, "basic", 5)


def test_an_estimate_on_its_interval_bounds_is_inside():
  from jaxcal._src import report as R

  assert not R._with_interval(0.6, (0.6, 0.7))["estimate_outside_interval"]
  assert not R._with_interval(0.7, (0.6, 0.7))["estimate_outside_interval"]
  assert R._with_interval(0.7001, (0.6, 0.7))["estimate_outside_interval"]
  assert R._with_interval(0.5999, (0.6, 0.7))["estimate_outside_interval"]
  assert R._with_interval(0.3) == {"estimate": 0.3}


def test_calibrated_values_are_lemma_d1():
  """E[ConfCE_corr] = mean(1 - c²)/n and E[LinCE_cw] = mean(1 - ||p||²)/(C n) (Lemma D.1)."""
  from jaxcal._src import report as R

  p = np.array([[0.7, 0.2, 0.1], [0.1, 0.3, 0.6], [0.4, 0.4, 0.2], [0.05, 0.9, 0.05]])
  got = R._calibrated_values(jax.numpy.asarray(p, jax.numpy.float32))
  n, c = p.shape
  conf = np.mean(1 - p.max(1) ** 2) / n
  lin = np.mean(1 - (p**2).sum(1)) / (c * n)
  assert got == {
    "ConfCE_corr(qua)": pytest.approx(conf, rel=1e-6),
    "LinCE_cw(qua)": pytest.approx(lin, rel=1e-6),
  }


def test_robustness_bins_clamp_to_n_and_lo():
  assert report.robustness_bins(1).tolist() == [2]
  assert report.robustness_bins(50, count=4).tolist() == [2, 6, 17, 50]  # 2 * 25^(k/3), rounded
  assert report.robustness_bins(10**6, count=2).tolist() == [2, 2000]


def _one_model_rep():
  """A hand-made one-model report: what the summaries print from it is known exactly."""
  curve = {
    "estimate": [0.01, 0.02, 0.03, 0.04, 0.05],
    "lo": [0.005, 0.015, 0.025, 0.035, 0.06],  # at m = 100 the estimate lies below its band,
    "hi": [0.009, 0.025, 0.035, 0.045, 0.07],  # at m = 2 above it
  }
  return {
    "input": {"source": "toy", "n": 1234, "num_classes": 3, "kind": "logits"},
    "settings": {
      "num_bins": 15,
      "resamples": 10,
      "robustness_resamples": 40,
      "confidence": 0.9,
      "interval": "basic",
    },
    "metrics": {
      "ConfECE(fix;15)": {"estimate": 0.05, "lo": 0.04, "hi": 0.06, "truthful": False},
      "LinCE_cw(qua;15)": {"estimate": 2e-4, "lo": 1e-4, "hi": 3e-4, "truthful": True},
    },
    "robustness": {
      "num_bins": [2, 5, 15, 40, 100],
      "curves": {
        "ConfECE(fix)": curve,
        "LinCE_cw(qua)": {"estimate": [4e-4, 3e-4, 2e-4, 1e-4, 9e-5]},
      },
      "calibrated_value": {"LinCE_cw(qua)": 1.23e-5},
    },
  }


def test_summary_of_one_model_reads_the_right_numbers():
  text = report.format_summary(_one_model_rep())
  lines = text.splitlines()
  assert lines[0] == "jaxcal report — toy"
  assert "n = 1,234 samples, C = 3 classes (logits); 90% basic bootstrap intervals over 10" in text
  assert "    ConfECE(fix;15)    0.0500 [0.0400, 0.0600]     top-label" in text
  assert "    LinCE_cw(qua;15)*  2.00e-4 [1.00e-4, 3.00e-4]  class-wise" in text
  assert "ConfECE(fix)      0.0100 at m = 2 → 0.0500 at m = 100\n" in text + "\n"
  assert (
    "LinCE_cw(qua)     4.00e-4 at m = 2 → 9.00e-5 at m = 100 (calibrated predictor: 1.23e-5)"
    in text
  )
  assert "†" not in text  # no headline estimate outside its interval


def test_bin_count_bands_name_their_own_resamples(rep, small, tmp_path, monkeypatch):
  """The bin-count bands come from ``robustness_resamples``: the table and the figure
  said nothing of them, under a header naming the headline's ``resamples`` (10 here,
  or "no intervals" with ``resamples=0``, above bands drawn from 50; found by a review
  helper)."""
  md = report.format_markdown(rep)
  assert "95% percentile bootstrap intervals over 10 resamples." in md  # the headline's
  assert "bin count m; 95% percentile bootstrap intervals over 50 resamples:" in md
  titles = []
  from jaxcal import plots

  draw = plots.bin_robustness_plot
  monkeypatch.setattr(
    plots, "bin_robustness_plot", lambda *a, **kw: titles.append(kw["title"]) or draw(*a, **kw)
  )
  report.write_report(rep, out_dir=str(tmp_path), formats=("png",))
  assert titles == [
    "Calibration error against the bin count (95% percentile bootstrap intervals over 50 "
    "resamples) — toy (n = 1,500)"
  ]
  hand = _one_model_rep()
  hand["settings"]["robustness_resamples"] = 0  # no bands: nothing said of them
  assert "Errors across the bin count m:" in report.format_markdown(hand)


def test_summaries_name_the_figure_files_that_were_written():
  # they named bin_robustness.png (and utility_ecdf.png) whatever write_report had written
  rep = _one_model_rep()
  rep["utility"] = {
    "linear": {"num_utilities": 8, "quantiles": {"0.5": 0.1, "0.9": 0.2, "1.0": 0.3}}
  }
  written = {"bin_robustness": "out/bin_robustness.svg", "utility_ecdf": "out/utility_ecdf.svg"}
  text = report.format_summary(rep, figures=written)
  assert "  bin count (bin_robustness.svg): one model's errors" in text and ".png" not in text
  md = report.format_markdown(rep, figures=written)
  assert "Errors across the bin count m (bin_robustness.svg); 90% basic bootstrap" in md
  assert "Utility calibration UC over sampled utilities (utility_ecdf.svg):" in md
  for fmt in (report.format_summary, report.format_markdown):  # nothing written: none named
    assert "bin_robustness" not in fmt(rep) and "utility_ecdf" not in fmt(rep, figures={})


def test_markdown_of_one_model_has_the_first_middle_and_last_bin_count():
  from jaxcal._src.report import OUTSIDE_NOTE

  md = report.format_markdown(_one_model_rep())
  assert "| error | m = 2 | m = 15 | m = 100 | calibrated predictor |" in md
  assert (
    "| ConfECE(fix) | 0.0100 [0.00500, 0.00900] † | 0.0300 [0.0250, 0.0350] | 0.0500 [0.0600, 0.0700] † | — |"
    in md
  )
  assert "| LinCE_cw(qua) | 4.00e-4 | 2.00e-4 | 9.00e-5 | 1.23e-5 |" in md
  assert "| LinCE_cw(qua;15)* | 2.00e-4 [1.00e-4, 3.00e-4] |" in md
  assert md.count(OUTSIDE_NOTE) == 1  # the robustness table's † is explained once
  assert md.startswith("toy: n = 1,234, C = 3; 90% basic bootstrap intervals over 10 resamples.")
  rep = _one_model_rep()
  curve = rep["robustness"]["curves"]["ConfECE(fix)"]
  curve["lo"][-1], curve["hi"][0] = 0.05, 0.01  # on their bounds: inside
  assert "†" not in report.format_markdown(rep)
  rep["settings"]["resamples"] = 0
  assert "no intervals (resamples = 0)" in report.format_markdown(rep)
  rep = _one_model_rep()  # a headline estimate outside as well: the note comes once
  rep["metrics"]["ConfECE(fix;15)"]["estimate_outside_interval"] = True
  assert report.format_markdown(rep).count(OUTSIDE_NOTE) == 1


def _compare_rep(bins=(5, 10, 20, 50)):
  """A hand-made report of three models: the rank-correlation cells are known exactly."""
  from jaxcal._src import report as R

  m = 15
  labs = [report.label(nm, b, m if b else None) for nm, b in R.HEADLINE]
  bins = list(bins)
  corr = (np.arange(16).reshape(4, 4) / 100).tolist()  # [i][j] = (4 i + j) / 100
  models = ["a", "bb", "c"]
  metrics_ = {
    name: {lab: {"estimate": 0.1 * (k + 1) + 0.001 * i} for i, lab in enumerate(labs)}
    for k, name in enumerate(models)
  }
  return {
    "settings": {"num_bins": m, "resamples": 0, "confidence": 0.95, "interval": "percentile"},
    "models": [{"name": x} for x in models],
    "metrics": metrics_,
    "rank_stability": [
      {
        "n": 600,
        "num_classes": 10,
        "models": models,
        "paired": True,
        "num_bins": bins,
        "errors": {"ConfCE(qua)": {"between_bins": {"estimate": corr}}},
      }
    ],
  }


def test_comparison_summary_and_markdown_read_the_right_cells():
  rep = _compare_rep()
  text = report.format_summary(rep)
  assert "ranking of 3 models (n = 600, C = 10) kept between 5 and 50 bins" in text
  # resamples = 0 (no interval drawn) said "(paired bootstrap)" all the same
  assert "Spearman (estimates, no intervals):" in text and "bootstrap" not in text
  resampled = {**rep, "settings": {**rep["settings"], "resamples": 10}}
  assert "Spearman (paired bootstrap):" in report.format_summary(resampled)
  assert text.endswith("\n    ConfCE(qua)       0.030")  # between 5 and 50 bins: [0][3]
  head = text.splitlines()[1].split()
  assert head == ["accuracy", "ConfECE(fix;15)", "smECE", "LinCE_cw(qua;15)"]
  assert text.splitlines()[3].split() == ["bb", "0.200", "0.204", "0.206", "0.210"]
  md = report.format_markdown(rep)
  # the fewest, 20 and the most bins pairwise (the paper's Table 1 pairs); the first six
  # pairs had all been from 5 bins with the default counts, never 5 or 20 against 2000
  # (found by a review helper)
  assert "| error | 5 vs 20 bins | 5 vs 50 bins | 20 vs 50 bins |" in md
  assert "| ConfCE(qua) | 0.020 | 0.030 | 0.11 |" in md
  assert report_src._table_pairs(report.RANK_BINS) == [(5, 20), (5, 2000), (20, 2000)]
  assert report_src._table_pairs([2000, 20, 5]) == [(5, 20), (5, 2000), (20, 2000)]
  assert "| c | 0.300 | 0.301 |" in md
  rep["rank_stability"] = []
  assert "no group of >= 3 models" in report.format_summary(rep)
  # bin counts given out of order: the summary reads the fewest against the most bins,
  # not the first against the last (found by a review helper)
  text = report.format_summary(_compare_rep(bins=(50, 5, 20, 10)))
  assert "kept between 5 and 50 bins" in text
  assert text.endswith("\n    ConfCE(qua)       0.040")  # [1][0]: 5 (index 1) vs 50 (index 0)
  # an estimate outside its interval is marked and explained, as in the markdown
  lab = text.splitlines()[1].split()[1]
  rep["metrics"]["bb"][lab].update(lo=0.3, hi=0.4, estimate_outside_interval=True)
  text = report.format_summary(rep)
  assert "† the estimate lies outside its bootstrap interval" in text
  assert [line.count("†") for line in text.splitlines()[2:5]] == [0, 1, 0]


def test_find_models(tmp_path):
  from jaxcal._src.report import find_models

  z = dict(logits=np.zeros((2, 2)), labels=np.zeros(2, int))
  assert find_models(str(tmp_path / "a.npz")) is None  # not a folder
  np.savez(tmp_path / "a.npz", **z)
  assert find_models(str(tmp_path)) is None  # one .npz: one data set
  np.savez(tmp_path / "b.npz", **z)
  (tmp_path / ".hidden").mkdir()
  got = find_models(str(tmp_path))
  assert got == {"a": str(tmp_path / "a.npz"), "b": str(tmp_path / "b.npz")}
  (tmp_path / "m").mkdir()
  assert find_models(str(tmp_path))["m"] == str(tmp_path / "m")
  np.save(tmp_path / "logits.npy", z["logits"])  # .npy files: the folder is one data set
  assert find_models(str(tmp_path)) is None
  only = tmp_path / "only_dirs"
  (only / "x").mkdir(parents=True)
  assert find_models(str(only)) == {"x": str(only / "x")}


def test_find_models_keeps_every_model_and_skips_report_outputs(tmp_path):
  """A sub-folder ``m`` and a file ``m.npz`` are two models (``m`` and ``m.npz``; the file
  replaced the folder, silently); a sub-folder holding a ``report.json`` and no predictions is
  a report's output (a second ``jaxcal report .`` read ``jaxcal-report/`` as a model and
  stopped); a folder named like an ``.npz`` file is a sub-folder (found by a review helper)."""
  from jaxcal._src.report import find_models

  z = dict(logits=np.zeros((2, 2)), labels=np.zeros(2, int))
  (tmp_path / "m").mkdir()
  np.savez(tmp_path / "m.npz", **z)
  np.savez(tmp_path / "k.npz", **z)
  (tmp_path / "jaxcal-report" / "figures").mkdir(parents=True)
  (tmp_path / "jaxcal-report" / "report.json").write_text("{}")
  (tmp_path / "d.npz").mkdir()
  got = find_models(str(tmp_path))
  assert got == {
    "d.npz": str(tmp_path / "d.npz"),
    "m": str(tmp_path / "m"),
    "k": str(tmp_path / "k.npz"),
    "m.npz": str(tmp_path / "m.npz"),
  }
  np.save(tmp_path / "jaxcal-report" / "logits.npy", z["logits"])  # predictions: a model
  assert "jaxcal-report" in find_models(str(tmp_path))


def test_report_of_one_sample(small):
  """One sample: the bin-count grid stops at n (it fell back to 2 bins and raised about
  ``num_bins = 2``, a count never asked for); the robustness bootstrap's option is named when
  it needs two samples (found by a review helper)."""
  p, y = small
  rep = report.calibration_report(
    p[:1], y[:1], num_bins=1, resamples=0, robustness_resamples=0, num_utilities=0
  )
  assert rep["robustness"]["num_bins"] == [1]
  with pytest.raises(ValueError, match="robustness_resamples = 50: bootstrap intervals need"):
    report.calibration_report(p[:1], y[:1], num_bins=1, resamples=0, num_utilities=0)
  with pytest.raises(ValueError, match="^resamples = 20: bootstrap intervals need at least 2"):
    report.calibration_report(p[:1], y[:1], num_bins=1, resamples=20, num_utilities=0)
  two = report.calibration_report(
    p[:2],
    y[:2],
    num_bins=1,
    resamples=20,
    robustness_resamples=20,
    interval="bca",
    num_utilities=0,
  )
  assert two["robustness"]["num_bins"] == [1]


def test_a_report_of_bfloat16_probabilities_is_the_metrics_of_them(small):
  """A bfloat16 model's probabilities, which every metric takes (at bfloat16's tolerance):
  the report cast them up and checked them again at float32's, so its headline numbers
  were NaN without a word and its UC sweep raised, telling the caller to pass bfloat16
  (found by a review helper). Its numbers are now the metrics' on the same array."""
  import jax.numpy as jnp

  x, y = small
  p = jax.nn.softmax(jnp.asarray(x[:400], jnp.bfloat16), axis=-1)
  assert float(jnp.abs(p.astype(jnp.float32).sum(1) - 1).max()) > 1e-3  # off at float32's
  rep = report.calibration_report(
    p, y[:400], resamples=0, robustness_resamples=0, num_utilities=3, seed=1
  )
  m = rep["metrics"]
  assert m["ConfECE(fix;15)"]["estimate"] == pytest.approx(float(metrics.conf_ece(p, y[:400])))
  assert m["Brier"]["estimate"] == pytest.approx(float(scores.brier(p, y[:400])), rel=1e-6)
  assert m["NLL"]["estimate"] == pytest.approx(float(scores.log_loss(p, y[:400])), rel=1e-6)
  assert all(np.isfinite(e["estimate"]) for e in m.values())
  # the decomposition and the calibrated values in float32, as scores.decompose computes
  # them (they were computed in bfloat16: UNC 0.0898438 for 0.0899300; a reread found it)
  want = scores.decompose(p, y[:400])
  got = rep["decomposition"]["classwise"]
  for k, v in zip(("S", "MCB", "DSC", "UNC"), want, strict=True):
    assert got[k] == pytest.approx(float(v), rel=1e-5), k
  p64 = np.asarray(p.astype(jnp.float32), np.float64)
  conf = np.mean(1 - p64.max(1) ** 2) / 400
  assert rep["robustness"]["calibrated_value"]["ConfCE_corr(qua)"] == pytest.approx(conf, rel=1e-5)
  # beside a float32 model on the same labels (one float32 stack): a clear refusal, not NaN
  q = jax.nn.softmax(jnp.asarray(x[:400]) * 0.8, axis=-1)
  with pytest.raises(ValueError, match=r"'a' \(bfloat16\), 'b' \(float32\) share their labels"):
    report.compare_report({"a": (p, y[:400]), "b": (q, y[:400])}, resamples=0)


def test_compare_report_ranks_models_by_their_errors(monkeypatch):
  """Spearman between bin counts and with the error rate, per group of (n, C) (scipy, float64)."""
  from jaxcal._src import report as R

  full = R._Headline  # accuracy as the one headline metric, two ranked errors: small compiles
  monkeypatch.setattr(R, "_Headline", lambda m: full(m, (("accuracy", None),)))
  monkeypatch.setattr(R, "RANK_ERRORS", (("ConfECE", "fixed"), ("ConfCE_corr", "quantile")))
  rng = np.random.default_rng(1)
  y = rng.integers(0, 3, 40)
  onehot = np.eye(3)[y]
  models = {f"m{k}": (rng.normal(size=(40, 3)) + s * onehot, y) for k, s in enumerate((0, 1, 2, 4))}
  z = rng.normal(size=(30, 3))
  y2 = rng.integers(0, 3, 30)
  models.update(u=(z, y2), v=(2 * z, y2))  # a group of two (n = 30): headline only
  rep = R.compare_report(models, num_bins=5, rank_bins=(2, 5, 40, 41), resamples=0)
  assert [(x["name"], x["n"], x["group"]) for x in rep["models"]] == [
    *((f"m{k}", 40, 0) for k in range(4)),
    ("u", 30, 1),
    ("v", 30, 1),
  ]
  for name, (x, yy) in models.items():
    acc = np.mean(np.argmax(x, 1) == yy)
    assert rep["metrics"][name]["accuracy"]["estimate"] == pytest.approx(acc, abs=1e-6)
  (block,) = rep["rank_stability"]
  assert block["models"] == ["m0", "m1", "m2", "m3"] and block["n"] == 40
  assert block["num_bins"] == [2, 5, 40] and block["paired"]
  probs = {
    k: np.asarray(jax.nn.softmax(jax.numpy.asarray(models[k][0], jax.numpy.float32)))
    for k in block["models"]
  }
  err_rate = [1 - np.mean(np.argmax(probs[k], 1) == y) for k in block["models"]]
  for lab, fn in (("ConfECE(fix)", ref.conf_ece), ("ConfCE_corr(qua)", ref.conf_ce_corr)):
    e = np.array([[fn(probs[k], y, m) for m in (2, 5, 40)] for k in block["models"]])
    got = block["errors"][lab]
    np.testing.assert_allclose(
      got["between_bins"]["estimate"], stats.spearmanr(e).statistic, atol=1e-5
    )
    want = [stats.spearmanr(err_rate, e[:, j]).statistic for j in range(3)]
    np.testing.assert_allclose(got["with_error_rate"]["estimate"], want, atol=1e-5)


def test_rankings_of_identical_models_say_why_they_are_nan(monkeypatch):
  """Three models with the same predictions: every correlation is NaN (no order), and the
  text and markdown say why instead of printing bare ``nan [nan, nan]``."""
  from jaxcal._src import report as R

  full = R._Headline
  monkeypatch.setattr(R, "_Headline", lambda m: full(m, (("accuracy", None),)))
  monkeypatch.setattr(R, "HEADLINE", (("accuracy", None),))  # what the formats show
  monkeypatch.setattr(R, "RANK_ERRORS", (("ConfECE", "fixed"),))
  rng = np.random.default_rng(1)
  y = rng.integers(0, 3, 40)
  x = rng.normal(size=(40, 3))
  rep = R.compare_report({k: (x, y) for k in "abc"}, num_bins=5, rank_bins=(2, 5), resamples=0)
  (block,) = rep["rank_stability"]
  assert np.isnan(block["errors"]["ConfECE(fix)"]["between_bins"]["estimate"][0][1])
  assert R.UNRANKED_NOTE in R.format_summary(rep)
  assert R.UNRANKED_NOTE + "." in R.format_markdown(rep)
  models = {k: (x + s * np.eye(3)[y], y) for k, s in zip("abc", (0.0, 1.0, 3.0))}
  ranked = R.compare_report(models, num_bins=5, rank_bins=(2, 5), resamples=0)
  assert not np.isnan(
    ranked["rank_stability"][0]["errors"]["ConfECE(fix)"]["between_bins"]["estimate"][0][1]
  )
  assert R.UNRANKED_NOTE not in R.format_summary(ranked) + R.format_markdown(ranked)


def test_nll_of_logits_is_the_log_loss_of_the_logits(monkeypatch):
  """The report's NLL of logits came from their float32 softmax: 1.0729e-6 for a
  near-perfect model's 1.0128e-6 (every label 16 above the other logits)."""
  from jaxcal._src import report as R

  full = R._Headline  # NLL as the one headline metric: a small compile
  monkeypatch.setattr(R, "_Headline", lambda m: full(m, (("NLL", None),)))
  monkeypatch.setattr(R, "RANK_ERRORS", (("ConfECE", "fixed"),))
  y = np.arange(300) % 10
  z = np.zeros((300, 10), np.float32)
  z[np.arange(300), y] = 16.0
  want = float(scores.log_loss(z, y, from_logits=True))
  assert want == pytest.approx(9 * np.exp(-16.0), rel=1e-5)
  probs, yy, _, nll = R._prepare(z, y)
  data = R._padded_data(probs, yy, nll)
  head = R._finished(R._headline_section(jax.random.key(0), data, 5, 0, 0.9, "percentile"))
  assert head["NLL"]["estimate"] == pytest.approx(want, rel=1e-5)
  models = {"a": (z, y), "b": (z * 0.5, y), "c": (np.asarray(jax.nn.softmax(z)), y)}
  for rs in (0, 4):
    rep = R.compare_report(models, num_bins=5, rank_bins=(2, 5), resamples=rs)
    got = rep["metrics"]["a"]["NLL"]["estimate"]
    assert got == pytest.approx(want, rel=1e-5), rs
    want_b = float(scores.log_loss(z * 0.5, y, from_logits=True))
    assert rep["metrics"]["b"]["NLL"]["estimate"] == pytest.approx(want_b, rel=1e-5)


def test_rank_stability_checks_its_input_and_takes_kendall():
  e = np.array([[1.0, 3.0, 2.0], [2.0, 1.0, 3.0], [3.0, 2.0, 2.5], [4.0, 0.5, 1.0]])
  r = np.asarray(report.rank_stability(e, method="kendall"))
  assert r[0, 1] == pytest.approx(stats.kendalltau(e[:, 0], e[:, 1]).statistic, abs=1e-6)
  assert r[1, 2] == pytest.approx(stats.kendalltau(e[:, 1], e[:, 2]).statistic, abs=1e-6)
  with pytest.raises(ValueError, match="at least 3 models, got 2"):
    report.rank_stability(e[:2])
  with pytest.raises(ValueError, match=r"\(num_models, num_bin_counts\), got shape \(4,\)"):
    report.rank_stability(e[:, 0])
  with pytest.raises(ValueError, match="'spearman' or 'kendall', got 'pearson'"):
    report.rank_stability(e, method="pearson")
  # traced NaN: the whole matrix NaN (NaN's rank was finite: [[1, -0.6], [-0.6, 1]])
  bad = e.copy()
  bad[1, 1] = np.nan
  assert np.isnan(np.asarray(jax.jit(report.rank_stability)(bad))).all()
  assert np.isnan(np.asarray(jax.vmap(report.rank_stability)(bad[None]))).all()
  with pytest.raises(ValueError, match="errors contains non-finite values"):
    report.rank_stability(bad)
  # an error equal for every model orders nothing: NaN in its row and column
  flat = e.copy()
  flat[:, 2] = 0.5
  r = np.asarray(report.rank_stability(flat))
  assert np.isnan(r[2]).all() and np.isnan(r[:, 2]).all() and r[0, 0] == r[1, 1] == 1


def test_the_report_dispatches_every_section_before_it_reads_one_back(small, rep, monkeypatch):
  """Read back section by section, each section's programs compiled only once the previous
  section's had run (XLA:CPU runs dispatched programs one after another, so a read waits for
  all of them): the first call was every compile plus every run. Now the bootstraps, the
  utility sweeps and the decomposition are all dispatched before the first number is read,
  and the numbers are those of the sections computed one by one (the ``rep`` fixture's
  settings: its programs are compiled already)."""
  from jaxcal import utility
  from jaxcal._src import decomposition
  from jaxcal._src import report as R

  events = []

  def recording(name, fn):
    def wrapped(*args, **kwargs):
      events.append(name)
      return fn(*args, **kwargs)

    return wrapped

  monkeypatch.setattr(R, "bootstrap", recording("bootstrap", R.bootstrap))
  monkeypatch.setattr(R, "_plain", recording("read", R._plain))
  monkeypatch.setattr(utility, "uc_sweep", recording("uc_sweep", utility.uc_sweep))
  monkeypatch.setattr(
    decomposition, "decompose_all", recording("decompose", decomposition.decompose_all)
  )
  x, y = small
  settings = dict(num_utilities=32, resamples=10, robustness_resamples=50, seed=3)
  got = R.calibration_report(x, y, **settings)
  first_read = events.index("read")
  assert sorted(events[:first_read]) == ["bootstrap", "bootstrap", "decompose"] + ["uc_sweep"] * 2
  for section in ("metrics", "robustness", "utility", "decomposition"):
    assert got[section] == rep[section], section
  assert list(got) == list(rep)  # the sections in the report's order
  assert list(got["timing"]) == [
    "metrics_s",
    "robustness_s",
    "utility_s",
    "decomposition_s",
    "total_s",
  ]
  # each section started and read back on its own gives the same numbers
  probs, yy, _, nll = R._prepare(x, y)
  data = R._padded_data(probs, yy, nll)
  n = len(y)
  k_head, k_rob, _ = R._keys(3)
  assert (
    R._finished(R._headline_section(k_head, data, 15, 10, 0.95, "percentile")) == rep["metrics"]
  )
  assert (
    R._finished(R._robustness_section(k_rob, data, n, 15, 50, 0.95, "percentile"))
    == rep["robustness"]
  )
  assert R._finished(R._utility_section(data, 32, 3)) == rep["utility"]
  assert R._finished(R._decomposition_section(data)) == rep["decomposition"]


def test_reports_of_sizes_in_one_size_bucket_share_their_programs(small):
  """n = 1400 and 1450 pad to one bucket (1536 rows, masked): the second report
  compiles its input checks, the padding and the bin-count grid's curves (the
  grid follows n below 2000), not the bootstrap, the UC sweeps or the
  decompositions again (36 programs before the buckets)."""
  from jaxcal._src.bootstrap import _resampled
  from jaxcal._src.decomposition import decompose_all

  x, y = small
  settings = dict(num_utilities=8, resamples=4, robustness_resamples=0, seed=1)
  first = report.calibration_report(x[:1400], y[:1400], **settings)
  cached = lambda: [f._cache_size() for f in (_resampled, decompose_all)]
  before = cached()
  second = report.calibration_report(x[:1450], y[:1450], **settings)
  assert cached() == before
  # without resamples the statistics run as compiled programs of their own, which a fresh
  # jax.jit per call compiled again every time (the same n included); the curves of both
  # grids (below n = 2000 the grid follows n) were compiled by the reports above
  from jaxcal._src.report import _statistic

  plain = dict(num_utilities=0, resamples=0, robustness_resamples=0)
  report.calibration_report(x[:1400], y[:1400], **plain)
  programs = _statistic._cache_size()
  report.calibration_report(x[:1400], y[:1400], **plain)
  report.calibration_report(x[:1450], y[:1450], **plain)
  assert _statistic._cache_size() == programs
  assert second["input"]["n"] == 1450 and first["input"]["n"] == 1400
  p = jax.nn.softmax(x[:1450], axis=-1)
  assert second["metrics"]["ConfCE(qua;15)"]["estimate"] == pytest.approx(
    float(metrics.conf_ce(p, y[:1450])), rel=1e-5
  )
  assert second["metrics"]["NLL"]["estimate"] == pytest.approx(
    float(scores.log_loss(x[:1450], y[:1450], from_logits=True)), rel=1e-5
  )


def test_comparisons_of_sizes_in_one_size_bucket_share_their_programs(small):
  """Three paired models at n = 1400, then 1450 (one bucket of 1536 rows, masked): the
  second comparison compiles its input checks and padding, not the paired bootstrap
  again; its numbers are the public metrics' on the unpadded rows."""
  from jaxcal._src.bootstrap import _resampled

  x, y = small
  models = lambda n: {f"t{t}": (x[:n] / t, y[:n]) for t in (1.0, 1.5, 2.0)}
  settings = dict(num_bins=10, rank_bins=(5, 10), resamples=4)
  report.compare_report(models(1400), **settings)
  before = _resampled._cache_size()
  rep = report.compare_report(models(1450), **settings)
  assert _resampled._cache_size() == before  # the paired bootstrap's program, reused
  p = jax.nn.softmax(x[:1450] / 1.5, axis=-1)
  got = rep["metrics"]["t1.5"]
  assert got["ConfCE(qua;10)"]["estimate"] == pytest.approx(
    float(metrics.conf_ce(p, y[:1450], 10)), rel=1e-5
  )
  assert got["Brier"]["estimate"] == pytest.approx(float(scores.brier(p, y[:1450])), rel=1e-5)
  assert [m["n"] for m in rep["models"]] == [1450] * 3


def test_the_reports_keys_are_all_different():
  """Bootstrap, bin-count bands, consistency bands and the two utility families:
  five keys. The utilities' were split(key(seed))[i], equal to the bootstrap's and
  the bands' (split(k, 2)[i] == split(k, 3)[i] with partitionable threefry)."""
  from jaxcal import utility
  from jaxcal._src import report as R

  samplers = {"linear": utility.sample_linear, "rank": utility.sample_rank}
  for seed in (0, 7):
    keys = R._keys(seed)
    for fam in R.UTILITY_FAMILIES:
      drawn = jax.tree.leaves(R._sampled_utilities(seed, fam, 4, 3))
      for k in keys:  # the report's draws are not those of another section's key
        other = jax.tree.leaves(samplers[fam](k, 4, 3))
        assert not all(np.array_equal(a, b) for a, b in zip(drawn, other)), (seed, fam)
    util = jax.random.split(R._keys(seed, 4)[3])
    every = [tuple(jax.random.key_data(k).tolist()) for k in (*keys, *util)]
    assert len(set(every)) == 5, seed


def test_calibration_report_hands_each_section_its_settings(monkeypatch):
  """Which key, bin count and resample count each section gets (the sections are recorders)."""
  import os

  from jaxcal._src import report as R

  calls = {}

  def record(name):
    def fn(*args):
      calls[name] = args
      return name

    return fn

  for s in (
    "_headline_section",
    "_robustness_section",
    "_utility_section",
    "_decomposition_section",
  ):
    monkeypatch.setattr(R, s, record(s))
  p, y = np.array([[0.7, 0.3], [0.2, 0.8], [0.5, 0.5]]), np.array([0, 1, 1])
  settings = dict(num_bins=2, resamples=5, confidence=0.8, interval="bca", seed=7)
  rep = R.calibration_report(
    p, y, num_utilities=4, robustness_resamples=0, source="s", path="rel/x.npz", **settings
  )
  keys = jax.random.key_data(jax.random.split(jax.random.key(7), 3))
  k, data, *rest = calls["_headline_section"]
  # the data in its size bucket (3 samples: a bucket of their own), all selected
  np.testing.assert_allclose(data.probs, p, rtol=1e-6)
  np.testing.assert_allclose(data.nll, -np.log(p[[0, 1, 2], [0, 1, 1]]), rtol=1e-6)
  assert data.y.tolist() == [0, 1, 1] and data.where.tolist() == [True] * 3
  assert rest == [2, 5, 0.8, "bca"]
  assert np.array_equal(jax.random.key_data(k), keys[0])
  k, same, *rest = calls["_robustness_section"]
  assert same is data and rest == [3, 2, 0, 0.8, "bca"]
  assert np.array_equal(jax.random.key_data(k), keys[1])
  assert calls["_utility_section"][0] is data and calls["_utility_section"][1:] == (4, 7)
  assert rep["input"] == {
    "source": "s",
    "path": os.path.abspath("rel/x.npz"),
    "n": 3,
    "num_classes": 2,
    "kind": "probabilities",
  }
  assert rep["settings"] == dict(
    num_bins=2,  # BCa: 3 bins would not fit the jackknife's 2 samples
    num_utilities=4,
    resamples=5,
    robustness_resamples=0,
    confidence=0.8,
    interval="bca",
    consistency_resamples=1000,
    consistency_confidence=0.8,
  )
  assert rep["metrics"] == "_headline_section" and rep["utility"] == "_utility_section"
  assert rep["robustness"] == "_robustness_section"
  assert rep["decomposition"] == "_decomposition_section"
  assert R.calibration_report(np.log(p), y, **settings)["input"]["kind"] == "logits"
  with pytest.raises(ValueError, match="at least 2, got 1"):
    R.calibration_report(p, y, robustness_resamples=1, num_bins=3)


def test_utility_section_sorts_the_errors_of_each_family():
  from jaxcal import utility
  from jaxcal._src import report as R

  rng = np.random.default_rng(2)
  p = jax.numpy.asarray(rng.dirichlet(np.ones(3), 20), jax.numpy.float32)
  y = jax.numpy.asarray(rng.integers(0, 3, 20))
  data = R._padded_data(p, y, jax.numpy.zeros(20))  # 20 rows: a bucket of 20
  assert R._finished(R._utility_section(data, 0, 1)) == {}
  got = R._finished(R._utility_section(data, 5, 1))
  k_lin, k_rank = jax.random.split(jax.random.split(jax.random.key(1), 4)[3])
  for fam, us in (
    ("linear", utility.sample_linear(k_lin, 5, 3)),
    ("rank", utility.sample_rank(k_rank, 5, 3)),
  ):
    want = np.sort(np.asarray(utility.uc_sweep(p, y, us), np.float64))
    np.testing.assert_allclose(got[fam]["errors"], want, rtol=1e-6)
    assert got[fam]["num_utilities"] == 5
    q = got[fam]["quantiles"]
    assert list(q) == ["0.1", "0.25", "0.5", "0.75", "0.9", "1.0"]
    assert q["0.5"] == pytest.approx(want[2]) and q["1.0"] == pytest.approx(want[-1])
    assert q["0.1"] == pytest.approx(want[0] + 0.4 * (want[1] - want[0]))  # linear interpolation


def test_comparison_table_as_markdown_and_the_json_rounding():
  from jaxcal._src import report as R

  rows = {
    "NLL": {"before": 0.2041, "after": 0.1712},
    "ConfECE(fix;15)": {"before": 0.05, "after": 2e-4},
  }
  assert R.format_comparison(rows, ("before", "after"), markdown=True).splitlines() == [
    "| metric | before | after |",
    "|---|---|---|",
    "| NLL | 0.204 | 0.171 |",
    "| ConfECE(fix;15) | 0.0500 | 2.00e-4 |",
  ]
  rep = {"timing": {"total_s": 12.3456}, "x": [0.123456789, np.float32(0.1)]}
  assert R._json_ready(rep) == {"timing": {"total_s": 12.3}, "x": [0.123457, 0.1]}
  assert rep["timing"]["total_s"] == 12.3456  # the report itself keeps its numbers


def test_statistics_are_equal_only_with_the_same_settings():
  """Compiled programs are cached by these objects: a different bin count must not match."""
  from jaxcal._src import report as R

  h = R._Headline(15)
  assert h == R._Headline(15) and hash(h) == hash(R._Headline(15))
  assert h != R._Headline(10) and h != R._Headline(15, R.RECALIBRATION_METRICS)
  c = R._Curves([2, 5])
  assert c == R._Curves((2, 5)) and hash(c) == hash(R._Curves((2, 5)))
  assert c != R._Curves([2, 6]) and c != R._Curves([2, 5], R.RANK_ERRORS)
  s = R._Compare(15, (5, 20), True)
  assert s == R._Compare(15, (5, 20), True) and hash(s) == hash(R._Compare(15, [5, 20], True))
  assert s != R._Compare(10, (5, 20), True) and s != R._Compare(15, (5, 21), True)
  assert s != R._Compare(15, (5, 20), False)
  assert R._HeadOnly(s) == R._HeadOnly(R._Compare(15, (5, 20), True))
  assert R._HeadOnly(s) != R._HeadOnly(R._Compare(15, (5, 20), False))


def test_compare_report_checks_every_model_before_computing():
  good = (np.zeros((40, 3)), np.arange(40) % 3)
  small = (np.zeros((30, 3)), np.arange(30) % 3)
  with pytest.raises(ValueError, match="num_bins = 35 quantile bins need .* got n = 30"):
    report.compare_report({"a": good, "b": small}, num_bins=35)
  bad = (np.zeros((30, 3)), np.arange(30) % 4)
  with pytest.raises(ValueError, match=r"^model 'bad': labels must lie in \[0, 3\)"):
    report.compare_report({"a": good, "bad": bad}, num_bins=5)


def test_compare_report_refuses_bad_options():
  """Each raised before computing anything; they used to crash (AttributeError, a raw JAX
  TypeError), truncate (rank bin 2.5 -> 2, True -> 1 bin, seed True -> 1) or be ignored."""
  y = np.arange(40) % 3
  ms = {f"m{k}": (np.eye(3)[y] * s + np.ones((40, 3)), y) for k, s in enumerate((1, 2, 3))}
  for kw, msg in [
    (dict(rank_bins=(2.5, 20)), "rank_bins entries must be an int"),
    (dict(rank_bins=(True, 20)), "rank_bins entries must be an int"),
    (dict(rank_bins=(0, 5)), "rank_bins entries must be >= 1"),
    (dict(rank_bins=(5, 5, 20)), "rank_bins must be distinct"),
    (dict(rank_bins=(5,)), "at least two bin counts"),  # a 1 x 1 matrix of ones
    (dict(rank_bins=(5, 100)), r"fewer than two bin counts <= n = 40"),  # ranking of nothing
    (dict(seed=2.5), "seed must be an int"),
    (dict(seed=True), "seed must be an int"),
    (dict(confidence="0.9"), "confidence must be a number"),
    (dict(paths={"m0": "a.npz", "typo": "b.npz"}), r"paths names no model \['typo'\]"),
    (dict(sources={"typo": "b.npz (val)"}), r"sources names no model \['typo'\]"),
  ]:
    with pytest.raises(ValueError, match=msg):
      report.compare_report(ms, resamples=0, **kw)
  for models, kw, msg in [
    (list(ms.values()), {}, "models must be a dict"),
    ({1: ms["m0"], 2: ms["m1"]}, {}, "model names must be strings"),  # format_summary crashed
    (ms, dict(rank_bins=5), "rank_bins must be a sequence"),
    (ms, dict(rank_bins="520"), "rank_bins must be a sequence"),
    (ms, dict(paths="m0"), "paths must be a dict"),
    (ms, dict(paths={"m0": 3}), r"paths\['m0'\] must be a path"),
    (ms, dict(sources=["m0"]), "sources must be a dict"),
    (ms, dict(sources={"m0": 3}), r"sources\['m0'\] must be a str"),
  ]:
    with pytest.raises(TypeError, match=msg):
      report.compare_report(models, resamples=0, **kw)
  with pytest.raises(ValueError, match=r"model 'b': expected a pair \(scores, labels\)"):
    report.compare_report({"a": ms["m0"], "b": ms["m1"][0]}, resamples=0)


def test_format_comparison_refuses_bad_tables():
  from jaxcal._src import report as R

  rows = {"NLL": {"before": 0.2041, "after": 0.1712}}
  with pytest.raises(TypeError, match="columns must be a sequence"):
    R.format_comparison(rows, "before")  # iterated letters: KeyError 'b'
  with pytest.raises(ValueError, match="row 'NLL' has no column 'x'"):
    R.format_comparison(rows, ("before", "x"))
  for v in ("x", None, True, 1 + 2j, np.array([1.0, 2.0])):
    with pytest.raises(ValueError, match=r"rows\['NLL'\]\['a'\] must be a real number"):
      R.format_comparison({"NLL": {"a": v}}, ("a",))
  with pytest.raises(ValueError, match="markdown must be True or False"):
    R.format_comparison(rows, ("before",), markdown="no")  # truthy: markdown came out
  with pytest.raises(TypeError, match="rows must be a dict"):
    R.format_comparison([("NLL", {"a": 1.0})], ("a",))
  assert R.format_comparison({1: {2: 0.5}}, (2,)).splitlines() == ["  metric  2", "  1       0.500"]


def test_bca_intervals_on_few_samples_keep_the_grids_within_the_jackknife(monkeypatch):
  # the bin-count grid reached n quantile bins, but BCa's delete-a-group jackknife
  # evaluates on n - n/100 samples: "too few samples for the bins" after the headline
  # (compare_report's rank grid is cut by the same report._binnable). The grid is read
  # where the bootstrap would get it (a real BCa run of the section: 23 s in CI).
  from jaxcal._src import report as R

  grids = []

  def estimate(key, stat, probs, y, resamples, confidence, interval, *rows, where):
    grids.append((np.asarray(stat.bins).tolist(), interval))
    raise StopIteration

  monkeypatch.setattr(R, "_estimate_and_interval", estimate)
  x, y = data.default_predictions("test")
  # the jackknife leaves out n // 100 samples (it computed ceil(n / 100): 148 for n = 150,
  # refusing 149 bins the bootstrap itself computes)
  for n, interval, top in ((150, "bca", 149), (150, "percentile", 150), (1000, "bca", 990)):
    with pytest.raises(StopIteration):
      padded = R._padded_data(
        jax.numpy.asarray(x[:n]), jax.numpy.asarray(y[:n]), jax.numpy.zeros(n)
      )
      R._robustness_section(jax.random.key(0), padded, n, 15, 2, 0.9, interval)
    assert max(grids[-1][0]) == top
  assert R._binnable(150, "bca", 2) == 149 and R._binnable(50, "bca", 2) == 49
  assert R._binnable(199, "bca", 2) == 198 and R._binnable(150, "bca", 0) == 150
  with pytest.raises(ValueError, match=r"BCa's jackknife evaluations, .*: 149 of n = 150"):
    report.calibration_report(x[:150], y[:150], num_bins=150, interval="bca", resamples=2)
  stat = functools.partial(metrics.conf_ece, num_bins=149, binning="quantile", from_logits=True)
  r = bootstrap.bootstrap(jax.random.key(0), stat, x[:150], y[:150], num_resamples=4, method="bca")
  assert np.isfinite(float(r.lo)), "the bootstrap computes what the report allows"


def test_bca_comparison_reports_the_models_sample_count(monkeypatch):
  """The rank block's n was the jackknife's sample count (148 of 150); its bin grid is cut at
  what the jackknife holds (149). The bootstrap is replaced by the plain estimate."""
  from jaxcal._src import report as R
  from jaxcal._src.bootstrap import BootstrapResult

  full = R._Headline
  monkeypatch.setattr(R, "_Headline", lambda m: full(m, (("accuracy", None),)))
  monkeypatch.setattr(R, "RANK_ERRORS", (("ConfECE", "quantile"),))

  def plain(key, fn, *arrays, method, **kwargs):
    assert method == "bca"
    est = jax.jit(fn)(*arrays)
    return BootstrapResult(est, est, est, est, None)

  monkeypatch.setattr(R, "bootstrap", plain)
  rng = np.random.default_rng(2)
  y = rng.integers(0, 3, 150)
  models = {f"m{k}": (rng.normal(size=(150, 3)) + k * np.eye(3)[y], y) for k in range(3)}
  rep = R.compare_report(models, num_bins=5, rank_bins=(2, 149, 150), resamples=2, interval="bca")
  (block,) = rep["rank_stability"]
  assert block["n"] == 150 and block["num_bins"] == [2, 149]


@pytest.mark.parametrize(
  "text, message",
  [
    ("ConfECE(fix;0)", r"the bin count must be an int in \[1, 2\*\*24\], got 0"),
    ("ECCE(0)", r"the bin count must be an int in \[1, 2\*\*24\], got 0"),
    # above any metric's bins; 5,000 digits raised Python's bare int-conversion limit
    ("ConfECE(qua;16777217)", r"the bin count must be an int in \[1, 2\*\*24\], got 16777217"),
    ("ECCE(" + "9" * 5000 + ")", r"got 999999\.\.\. \(5000 digits\)"),
    ("ConfECE()", r"not a metric label: the parentheses must hold 'fix' or 'qua'"),
    ("ConfECE(;15)", r"not a metric label: the parentheses must hold 'fix' or 'qua'"),
    ("ConfECE(fix;)", r"not a metric label: the parentheses must hold 'fix' or 'qua'"),
    # "$" matched before a final newline, and "\d" other scripts' digits (read as 15)
    ("ConfECE(fix;15)\n", r"is not a metric label such as 'ConfECE\(fix;15\)'"),
    ("Brier\n", r"is not a metric label such as"),
    ("ConfECE(fix;\u0661\u0665)", r"not a metric label: .* a bin count \(digits 0-9\)"),
    ("ECCE(\u0661\u0665)", r"not a metric label: .* a bin count \(digits 0-9\)"),
  ],
)
def test_parse_label_refuses_what_label_never_writes(text, message):
  # these parsed (num_bins 0, or an empty / half qualifier) though label() never writes them
  with pytest.raises(ValueError, match=message):
    report.parse_label(text)
  for m in report.METRICS:  # every label label() writes still parses back
    for rule in (None, "fixed", "quantile") if m.binning else (None,):
      for bins in (None, 1, 15) if m.binning else (None,):
        if m.name == "ECCE" and rule == "quantile":
          continue
        got = report.parse_label(report.label(m.name, rule, bins))
        assert got[0] == m and got[2] == bins and (rule is None or got[1] == rule)


def test_format_number_refuses_bad_digits_and_non_real_x():
  # digits=0 wrote one digit and "0.5" was formatted as a number
  for digits in (0, -1, True, 2.0):
    with pytest.raises(ValueError, match="digits must be (an int|>= 1), got"):
      report.format_number(0.5, digits)
  for x in ("0.5", b"0.5", 1 + 2j, np.array("0.5")):
    with pytest.raises(ValueError, match="x must be a real number"):
      report.format_number(x)
  assert report.format_number(0.5, 1) == "0.5" and report.format_number(np.float32(0.25)) == "0.250"
  assert (
    report.format_number(np.array(0.5)) == "0.500" and report.format_number(float("nan")) == "nan"
  )
  assert report.format_number(12345) == "12,345" and report.format_number(np.int64(7)) == "7"


def test_format_number_names_an_int_too_long_to_write():
  # 10**5000 raised Python's bare "Exceeds the limit (4300 digits) for integer string"
  with pytest.raises(ValueError, match=r"x must be a real number Python can write: .* 5,001"):
    report.format_number(10**5000)
  assert report.format_number(10**20) == "100,000,000,000,000,000,000"


def test_format_number_refuses_none_sequences_and_absurd_digits():
  # None, [1.0] and np.array([1.0]) raised float()'s TypeError (the docstring promises a
  # ValueError); digits=10**9 built a 1 GB string of float64 noise
  for x, match in [
    (None, r"x must be a real number, got None \(NoneType\)"),
    ([1.0], r"x must be a real number, got list of shape \(1,\)"),
    (np.array([1.0]), r"x must be a real number, got ndarray of shape \(1,\)"),
    (np.array([1, 2]), r"x must be a real number, got ndarray of shape \(2,\)"),
    ([[1.0], [1.0, 2.0]], r"x must be a real number, got ragged list"),
  ]:
    with pytest.raises(ValueError, match=match):
      report.format_number(x)
  with pytest.raises(ValueError, match=r"digits must be <= 17, got 1000000000: 17 significant"):
    report.format_number(0.5, digits=10**9)
  with pytest.raises(ValueError, match=r"digits must be <= 17, got 18"):
    report.format_interval(0.5, 0.4, 0.6, digits=18)
  assert report.format_number(0.1, 17) == "0.10000000000000001"  # float64's round trip
  assert report.format_number(np.array([0.5])[0]) == "0.500"


def test_label_refuses_a_name_that_is_not_a_string():
  # label(None) raised a raw AttributeError from None.split
  for call in (report.label, report_src.metric):
    with pytest.raises(ValueError, match=r"name must be a metric name \(a str\) .* got None"):
      call(None)
  with pytest.raises(ValueError, match=r"name must be a metric name .* got b'ConfECE' \(bytes\)"):
    report.label(b"ConfECE")
  with pytest.raises(ValueError, match=r"binning must be 'fixed' or 'quantile', got \['fixed'\]"):
    report.label("ConfECE", ["fixed"])  # was a TypeError (unhashable list)
  assert report.label("ConfECE", None, 15) == "ConfECE(fix;15)"


def test_robustness_bins_refuse_counts_and_bin_counts_beyond_their_bounds():
  # count=3 * 10**9 allocated 22 GB of points (the process was killed) for ~2000 bin counts;
  # hi=2**63 - 1 wrapped to a negative bin count in the int64 cast
  for kw, match in [
    ({"count": 3 * 10**9}, r"count must be <= 1048576, got 3000000000: each point is a bin"),
    ({"count": 2**20 + 1}, r"count must be <= 1048576, got 1048577"),
    ({"hi": 2**63 - 1}, r"hi must be <= 16777216, got 9223372036854775807"),
    ({"hi": 2**24 + 1}, r"hi must be <= 16777216, got 16777217"),
  ]:
    with pytest.raises(ValueError, match=match):
      report.robustness_bins(10**30, **kw)
  np.testing.assert_array_equal(report.robustness_bins(10**6, count=2**20), np.arange(2, 2001))
  assert report.robustness_bins(2**30, hi=2**24, count=2)[-1] == 2**24


def test_formatters_and_writer_name_the_report_keys_they_lack(tmp_path):
  # {"settings": {}, "metrics": {}} passed the check, then raised a raw KeyError: 'input'
  bare = {"settings": {}, "metrics": {}}
  for fmt in (report.format_summary, report.format_markdown):
    with pytest.raises(ValueError, match=r"missing: \['input'\]\['n'\], \['input'\]\['num"):
      fmt(bare)
  out = tmp_path / "out"
  with pytest.raises(
    ValueError, match=r"missing: \['input'\]\['n'\], \['robustness'\]\['num_bins'\]"
  ):
    report.write_report(bare, out_dir=str(out), formats=("png",))
  rep = _one_model_rep()
  rep["timing"] = {"total_s": 1.0}  # the summary names the device and version too
  with pytest.raises(
    ValueError, match=r"missing: \['jaxcal'\]\['device'\], .*\(format_summary reads"
  ):
    report.format_summary(rep)
  del rep["input"]["kind"], rep["timing"]
  with pytest.raises(ValueError, match=r"missing: \['input'\]\['kind'\] \(format_markdown"):
    report.format_markdown(rep)
  comp = _compare_rep()
  del comp["rank_stability"][0]["n"], comp["metrics"]["bb"]["smECE"]
  with pytest.raises(
    ValueError, match=r"\['metrics'\]\['bb'\]\['smECE'\]\['estimate'\], .*\['n'\]"
  ):
    report.format_summary(comp)
  with pytest.raises(ValueError, match=r"missing: \['rank_stability'\]\[0\]\['n'\] \(write_report"):
    report.write_report(comp, out_dir=str(out), formats=("png",))
  assert not out.exists()
  with pytest.raises(ValueError, match="rep must be a report dict .* got list"):
    report.format_summary([])
  paths = report.write_report(bare, out_dir=str(out), formats=())  # report.json alone: as before
  assert sorted(paths) == ["json"]


def test_write_report_refuses_half_a_pair_and_predictions_of_a_comparison(tmp_path):
  # write_report(rep, x, None) left the reliability diagrams out, and a comparison report
  # ignored x and y, silently
  x, y = np.full((1234, 3), 1 / 3), np.zeros(1234, int)
  out = tmp_path / "out"
  for args, match in [
    ((_one_model_rep(), x, None), r"scores_in was given without labels: the reliability"),
    ((_one_model_rep(), None, y), r"labels was given without scores_in: the reliability"),
    ((_compare_rep(), x, y), r"scores_in and labels: a comparison report .* pass neither"),
    ((_compare_rep(), None, y), r"labels: a comparison report .* pass neither"),
  ]:
    with pytest.raises(ValueError, match=match):
      report.write_report(*args, str(out), formats=("png",))
  assert not out.exists()


def test_find_models_refuses_a_path_that_is_not_a_string(tmp_path):
  # None raised os.stat's TypeError, bytes str.endswith's
  for path in (None, b"/tmp", 3):
    with pytest.raises(TypeError, match=r"path must be a file or folder path \(a str or os.Pa"):
      report.find_models(path)
  z = dict(logits=np.zeros((2, 2)), labels=np.zeros(2, int))
  np.savez(tmp_path / "a.npz", **z)
  np.savez(tmp_path / "b.npz", **z)
  assert report.find_models(tmp_path) == report.find_models(str(tmp_path))
  assert report.find_models(tmp_path)["a"] == str(tmp_path / "a.npz")


def test_a_report_removes_only_the_figures_an_earlier_report_listed(tmp_path):
  """An earlier report's figures of other names or formats stayed beside a new report.json
  and contradicted it (found by a review helper): report.json lists the files written, and
  the next write removes those it listed and does not rewrite; nothing else."""
  import os

  out = tmp_path / "rep"
  out.mkdir()
  (tmp_path / "outside.png").write_bytes(b"x")
  (out / "sub.png").mkdir()
  for name in ("old.png", "old.pdf", "notes.pdf", "data.npz", "listed.txt", ".hidden.png"):
    (out / name).write_bytes(b"x")
  os.symlink(tmp_path / "outside.png", out / "link.png")
  listed = ["old.png", "old.pdf", "../outside.png", str(tmp_path / "outside.png"), "sub.png"]
  listed += ["link.png", "data.npz", "listed.txt", ".hidden.png", "gone.svg", 3, None]
  ours = {"jaxcal": {"jaxcal": "0"}, "settings": {}}  # a jaxcal report's keys
  (out / "report.json").write_text(json.dumps({**ours, "files": listed}))
  bare = {"settings": {"num_bins": 15}, "metrics": {"accuracy": {"estimate": 0.9}}}
  report.write_report({**bare, "files": ["stale"]}, out_dir=str(out), formats=())
  assert json.loads((out / "report.json").read_text())["files"] == ["report.json"]
  left = sorted(p.name for p in out.iterdir())  # old.png and old.pdf removed
  kept = [".hidden.png", "data.npz", "link.png", "listed.txt", "notes.pdf", "report.json"]
  assert left == [*kept, "sub.png"] and (out / "sub.png").is_dir()  # (a folder: kept)
  assert (tmp_path / "outside.png").exists() and (out / "link.png").is_symlink()
  # a report of other formats into the folder of another: only the new one's figures stay
  out = tmp_path / "again"
  one = {**_one_model_rep(), **ours}  # (a report of calibration_report has both keys)
  report.write_report(one, out_dir=str(out), formats=("png", "pdf"))
  files = ["bin_robustness.png", "bin_robustness.pdf", "report.json"]
  assert json.loads((out / "report.json").read_text())["files"] == files
  report.write_report(one, out_dir=str(out), formats=("svg", "png"))
  files = ["bin_robustness.svg", "bin_robustness.png", "report.json"]
  assert json.loads((out / "report.json").read_text())["files"] == files
  assert sorted(p.name for p in out.iterdir()) == sorted(files)
  # an earlier report.json that is no report of this jaxcal's: nothing removed
  # (another tool's report.json with a "files" list named a user's figure: the reread)
  other = ('{"files": ["old.png"]}', '{"jaxcal": "1.0", "settings": {}, "files": ["old.png"]}')
  for text in ("not json", '["old.png"]', '{"files": "old.png"}', '{"metrics": {}}', *other):
    (out / "old.png").write_bytes(b"x")
    (out / "report.json").write_text(text)
    report.write_report(bare, out_dir=str(out), formats=())
    assert (out / "old.png").exists()


def test_comparison_tables_name_their_group_and_mark_correlations_outside_their_interval():
  """Two groups' ranking tables had the same title, and a correlation outside its own
  interval had no † (the models' table marks its estimates; found by a review helper)."""
  from jaxcal._src.report import OUTSIDE_NOTE, RANK_OUTSIDE_NOTE

  rep = _compare_rep()
  other = json.loads(json.dumps(rep["rank_stability"][0]))
  other.update(n=10_000, num_classes=100, models=["d", "e", "f"])
  rep["rank_stability"].append(other)
  md = report.format_markdown(rep)
  assert "Spearman correlation of the ranking of 3 models (n = 600, C = 10: a, bb, c):" in md
  assert "of 3 models (n = 10,000, C = 100: d, e, f):" in md
  assert "†" not in md
  corr = np.arange(16).reshape(4, 4) / 100  # [i][j] = (4 i + j) / 100
  bb = rep["rank_stability"][1]["errors"]["ConfCE(qua)"]["between_bins"]
  bb["lo"], bb["hi"] = (corr - 0.005).tolist(), (corr + 0.005).tolist()
  bb["lo"][0][3] = 0.04  # 5 vs 50 bins: 0.03 lies below [0.04, 0.035]
  rep["settings"]["resamples"] = 10
  md = report.format_markdown(rep)
  assert "| ConfCE(qua) | 0.020 [0.015, 0.025] | 0.030 [0.040, 0.035] † | 0.11 [0.10, 0.12] |" in md
  assert md.count(RANK_OUTSIDE_NOTE) == 1 and OUTSIDE_NOTE not in md
  assert md.index("(n = 10,000") < md.index(RANK_OUTSIDE_NOTE)  # below its table
  text = report.format_summary(rep)  # the summary reads 5 vs 50 bins: marked there too
  assert "    ConfCE(qua)       0.030 [0.040, 0.035] †" in text
  assert text.count(RANK_OUTSIDE_NOTE) == 1
  bb2 = rep["rank_stability"][0]["errors"]["ConfCE(qua)"]["between_bins"]
  bb2["lo"], bb2["hi"] = bb["lo"], bb["hi"]  # both groups marked: the note comes once
  assert report.format_markdown(rep).count(RANK_OUTSIDE_NOTE) == 1
  assert report.format_summary(rep).count(RANK_OUTSIDE_NOTE) == 1


def test_a_collapsed_bca_interval_is_not_explained_as_a_shifted_spread():
  """With --interval bca, [1.61e-6, 1.61e-6] was footnoted as "the spread of the estimate,
  shifted"; a collapsed BCa interval is named as such (found by a review helper)."""
  from jaxcal._src.report import COLLAPSED_NOTE, OUTSIDE_NOTE

  rep = _one_model_rep()
  rep["settings"]["interval"] = "bca"
  lab = "LinCE_cw(qua;15)"
  rep["metrics"][lab].update(lo=1.6101e-6, hi=1.6102e-6, estimate_outside_interval=True)
  rep["robustness"]["curves"]["ConfECE(fix)"]["lo"][0] = 0.009  # [0.009, 0.009] at m = 2
  for text in (report.format_summary(rep), report.format_markdown(rep)):
    assert text.count(COLLAPSED_NOTE) == 1 and "--interval percentile" in text
  # the robustness table's † at m = 100 is a shifted spread: both notes, each once
  md = report.format_markdown(rep)
  assert md.count(OUTSIDE_NOTE) == 1 and md.index(COLLAPSED_NOTE) < md.index(OUTSIDE_NOTE)
  assert OUTSIDE_NOTE not in report.format_summary(rep)
  rep["settings"]["interval"] = "percentile"  # not a BCa interval: no such note
  for text in (report.format_summary(rep), report.format_markdown(rep)):
    assert COLLAPSED_NOTE not in text and OUTSIDE_NOTE in text
  comp = _compare_rep()  # the comparison's tables too
  comp["settings"].update(resamples=10, interval="bca")
  comp["metrics"]["bb"]["smECE"].update(lo=0.3, hi=0.3, estimate_outside_interval=True)
  bb = comp["rank_stability"][0]["errors"]["ConfCE(qua)"]["between_bins"]
  bb["lo"] = bb["hi"] = [[0.5] * 4] * 4
  for text in (report.format_summary(comp), report.format_markdown(comp)):
    assert text.count(COLLAPSED_NOTE) == 1 and OUTSIDE_NOTE not in text
