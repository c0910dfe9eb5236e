"""The jaxcal command line, end to end on the embedded default (small settings)."""

import json

import numpy as np
import pytest

from jaxcal import data, plots
from jaxcal._src import cli


def test_report_on_embedded_default(tmp_path, capsys):
  out = tmp_path / "rep"
  assert cli.main(["report", "--out", str(out), "--utilities", "64"]) == 0
  text = capsys.readouterr().out
  assert "CIFAR-10 ResNet-110" in text and "accuracy 94.52%" in text
  rep = json.loads((out / "report.json").read_text())
  assert rep["data"] == {
    "source": "embedded CIFAR-10 ResNet-110 (test)",
    "n": 10000,
    "num_classes": 10,
    "input": "logits",
  }
  assert len(rep["robustness"]["num_bins"]) == 199
  assert len(rep["robustness"]["conf_ce_corr_quantile"]) == 199
  dec = rep["decomposition"]["classwise"]
  assert dec["score"] == pytest.approx(dec["mcb"] - dec["dsc"] + dec["unc"], abs=1e-6)
  assert rep["utility"]["ecdf_linear"]["m"] == 64
  for name in ("reliability.png", "bin_robustness.png", "utility_ecdf.png"):
    assert (out / name).stat().st_size > 10_000


def test_recalibrate_and_sweep(tmp_path, capsys):
  out = tmp_path / "ts.npz"
  model = tmp_path / "ts_model.npz"
  default = str(data.DEFAULT_PREDICTIONS)
  assert (
    cli.main(
      [
        "recalibrate",
        "temperature",
        default,
        default,
        "--out",
        str(out),
        "--save-model",
        str(model),
      ]
    )
    == 0
  )
  text = capsys.readouterr().out
  assert "before:" in text and "after:" in text
  z = np.load(out)
  assert z["probs"].shape == (10000, 10)
  np.testing.assert_allclose(z["probs"].sum(1), 1, atol=1e-5)
  sweep = tmp_path / "sweep.json"
  assert cli.main(["sweep", default, "--family", "rank", "--m", "32", "--out", str(sweep)]) == 0
  errs = json.loads(sweep.read_text())["errors"]
  assert len(errs) == 32 and min(errs) >= 0


def test_cli_reports_bad_input_without_traceback(tmp_path, capsys):
  bad = tmp_path / "bad.npz"
  np.savez(bad, logits=np.full((4, 3), np.nan, np.float32), labels=np.zeros(4, int))
  assert cli.main(["report", str(bad), "--out", str(tmp_path / "r")]) == 2
  assert "non-finite" in capsys.readouterr().err
  assert (
    cli.main(["recalibrate", "nope", str(bad), str(bad), "--out", str(tmp_path / "x.npz")]) == 2
  )
  assert "unknown recalibration method" in capsys.readouterr().err


def test_plots_render(tmp_path):
  x, y = data.default_predictions()
  fig = plots.reliability_diagram(x[:500], y[:500], 10, "quantile", from_logits=True, title="t")
  fig.savefig(tmp_path / "r.png")
  fig = plots.bin_robustness_plot([2, 3, 4], {"a": [1e-3, 2e-3, 3e-3]})
  fig.savefig(tmp_path / "b.png")
  assert (tmp_path / "r.png").stat().st_size > 5_000
