"""The calibration report: JSON schema, rounding, one vocabulary, rank stability."""

import json

import jax
import numpy as np
import pytest
from scipy import stats

from jaxcal import data, metrics, report, scores
from jaxcal._src.names import round_floats


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


def test_label_round_trip_and_bad_names():
  for m in report.METRICS:
    lab = report.label(m.name, num_bins=20 if m.binning else None)
    assert report.parse_label(lab)[0] == m
  assert report.label("ECCE", num_bins=15) == "ECCE(15)"  # equal-width bins only: no rule
  with pytest.raises(ValueError, match="unknown metric name"):
    report.label("ECE_nonsense")
  with pytest.raises(ValueError, match="not a metric label"):
    report.parse_label("ConfECE[fix]")


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


def test_an_estimate_outside_its_interval_is_flagged_and_explained():
  from jaxcal._src import report as R

  assert R._with_interval(0.5, (0.6, 0.7))["estimate_outside_interval"]
  assert not R._with_interval(0.65, (0.6, 0.7))["estimate_outside_interval"]
  assert "estimate_outside_interval" not in R._with_interval(np.zeros(3), (np.zeros(3),) * 2)
  entries = {"ConfECE(fix;15)": dict(R._with_interval(0.5, (0.6, 0.7)), truthful=False)}
  rows = R._metric_rows(entries)
  assert rows[0][1].endswith(" †") and R._any_outside(entries)
