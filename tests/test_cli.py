"""The jaxcal command line, end to end on the embedded default (small settings)."""

import json

import numpy as np
import pytest

from jaxcal import data, plots
from jaxcal._src import cli


@pytest.fixture(autouse=True)
def _no_persistent_cache(monkeypatch):
  # main() points JAX's persistent cache at ~/.cache; keep the test process's config alone
  monkeypatch.setattr(cli, "enable_compilation_cache", lambda: None)


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


def test_output_paths_are_checked_before_any_computation(tmp_path, capsys, monkeypatch):
  from jaxcal._src import data as data_module
  from jaxcal._src import report

  def forbidden(*args, **kwargs):
    raise AssertionError("computed before checking --out")

  monkeypatch.setattr(report, "calibration_report", forbidden)
  monkeypatch.setattr(data_module, "load_predictions", forbidden)
  monkeypatch.setattr(data_module, "default_predictions", forbidden)
  blocker = tmp_path / "file"
  blocker.write_text("x")
  default = str(data.DEFAULT_PREDICTIONS)
  for argv in (
    ["report", "--out", str(blocker)],
    ["report", default, "--out", str(blocker / "sub")],
    ["sweep", default, "--out", str(blocker / "s.json")],
    ["recalibrate", "temperature", default, default, "--out", str(blocker / "o.npz")],
    ["recalibrate", "temperature", default, default, "--out", str(blocker)],
  ):
    assert cli.main(argv) == 2, argv
    assert "--out" in capsys.readouterr().err


def test_an_internal_error_keeps_its_traceback(monkeypatch, tmp_path):
  from jaxcal._src import report

  def bug(*args, **kwargs):
    raise RuntimeError("a bug in jaxcal")

  monkeypatch.setattr(report, "calibration_report", bug)
  with pytest.raises(RuntimeError, match="a bug in jaxcal"):
    cli.main(["report", "--out", str(tmp_path / "r")])


def test_unreadable_file_is_a_user_error(tmp_path, capsys, monkeypatch):
  import zipfile

  np.savez(tmp_path / "p.npz", logits=np.zeros((2, 2), np.float32), labels=np.zeros(2, int))

  def denied(*args, **kwargs):
    raise PermissionError(13, "Permission denied", str(tmp_path / "p.npz"))

  monkeypatch.setattr(zipfile, "ZipFile", denied)
  assert cli.main(["sweep", str(tmp_path / "p.npz"), "--out", str(tmp_path / "s.json")]) == 2
  assert "not readable (permission denied)" in capsys.readouterr().err


def test_cli_enables_the_persistent_compilation_cache(tmp_path):
  import os
  import subprocess
  import sys

  code = (
    "import jax; from jaxcal._src import cli; d = cli.enable_compilation_cache(); "
    "print(d); print(jax.config.jax_compilation_cache_dir)"
  )
  env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path))
  env.pop("JAX_COMPILATION_CACHE_DIR", None)
  env.pop("JAXCAL_CACHE_DIR", None)
  out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
  want = str(tmp_path / "jaxcal" / "jax")
  assert out.returncode == 0 and out.stdout.split() == [want, want], out.stderr
  env["JAX_COMPILATION_CACHE_DIR"] = str(tmp_path / "mine")  # the user's own setting wins
  out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
  assert out.stdout.split()[0] == str(tmp_path / "mine")


def test_plots_render(tmp_path):
  x, y = data.default_predictions()
  fig = plots.reliability_diagram(x[:500], y[:500], 10, "quantile", from_logits=True, title="t")
  fig.savefig(tmp_path / "r.png")
  fig = plots.bin_robustness_plot([2, 3, 4], {"a": [1e-3, 2e-3, 3e-3]})
  fig.savefig(tmp_path / "b.png")
  assert (tmp_path / "r.png").stat().st_size > 5_000
