"""The jaxcal command line, end to end on the embedded default (small settings)."""

import json
import pathlib
import re
import sys

import numpy as np
import pytest

from jaxcal import data, metrics, plots
from jaxcal._src import cli

sys.path.insert(0, str(pathlib.Path(__file__).parent))  # --import-mode=importlib
import _reference as ref


@pytest.fixture(autouse=True)
def _no_persistent_cache(monkeypatch):
  # main() points JAX's persistent cache at ~/.cache; keep the test process's config alone
  monkeypatch.setattr(cli, "enable_compilation_cache", lambda: None)


@pytest.fixture(scope="module")
def small_file(tmp_path_factory):
  x, y = data.default_predictions()
  path = tmp_path_factory.mktemp("preds") / "resnet.npz"
  np.savez(path, logits=np.asarray(x[:1500]), labels=np.asarray(y[:1500]))
  return path


def test_report_text_json_and_figures(small_file, tmp_path, capsys, monkeypatch):
  from jaxcal._src import report

  settings, reports = [], []

  def recording(*args, **kwargs):  # the report of the first call, reused by the second
    settings.append(kwargs)
    if not reports:
      reports.append(compute(*args, **kwargs))
    return json.loads(json.dumps(reports[0]))

  compute = report.calibration_report
  monkeypatch.setattr(report, "calibration_report", recording)
  out = tmp_path / "rep"
  argv = ["report", str(small_file), "--out", str(out), "--utilities", "32", "--resamples", "10"]
  assert cli.main(argv + ["--figures", "png,svg"]) == 0
  text = capsys.readouterr().out
  assert "resnet.npz" in text and "accuracy" in text and "ConfECE(fix;15)" in text
  rep = json.loads((out / "report.json").read_text())
  assert rep["input"]["n"] == 1500 and rep["input"]["num_classes"] == 10
  assert rep["input"]["path"] == str(small_file) and rep["jaxcal"]["jaxcal"]
  assert rep["settings"]["resamples"] == 10 and rep["seeds"]["seed"] == 0
  m = rep["metrics"]["ConfECE(fix;15)"]
  assert m["lo"] <= m["hi"] and m["estimate"] > 0
  dec = rep["decomposition"]["classwise"]
  assert dec["S"] == pytest.approx(dec["MCB"] - dec["DSC"] + dec["UNC"], abs=1e-5)
  assert rep["utility"]["linear"]["num_utilities"] == 32
  for name in ("reliability", "bin_robustness", "utility_ecdf"):
    assert (out / f"{name}.png").stat().st_size > 10_000
    assert (out / f"{name}.svg").exists()
  # --format md prints every section as markdown tables; --figures "" draws none. The
  # output options only change how the report is written: the same computation's report
  # (the same settings) is written again, not computed again (9 s at the suite's -O0)
  argv[argv.index(str(out))] = str(tmp_path / "md")
  assert cli.main(argv + ["--format", "md", "--figures", ""]) == 0
  assert len(settings) == 2 and settings[1] == settings[0]
  assert sorted(p.name for p in (tmp_path / "md").iterdir()) == ["report.json"]
  text = capsys.readouterr().out
  assert "report.json in" in text and "figures" not in text
  for heading in ("| metric |", "Errors across the bin count", "Utility calibration UC", "Brier"):
    assert heading in text
  assert "| classwise |" in text and "| linear | 32 |" in text


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
  assert "before" in text and "after" in text and "ConfECE(fix;15)" in text
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
  # from_logits comes from the files: not fit()'s "got multiple values for keyword argument"
  argv = ["recalibrate", "temperature", str(bad), str(bad), "--out", str(tmp_path / "x.npz")]
  assert cli.main([*argv, "--options", '{"from_logits": false}']) == 2
  assert "--options: from_logits is not an option here" in capsys.readouterr().err


def test_an_array_named_probs_is_never_taken_for_logits(tmp_path, capsys):
  # percentages, or one-vs-rest sigmoid outputs, stored as 'probs' were softmaxed as
  # logits (the guess from the values) and reported with exit 0
  rng = np.random.default_rng(0)
  p = rng.dirichlet(np.ones(4), 50).astype(np.float32)
  y = rng.integers(0, 4, 50)
  for bad, what in ((100 * p, "must lie in \\[0, 1\\]"), (rng.random((50, 4)), "must sum to 1")):
    f = tmp_path / "bad.npz"
    np.savez(f, probs=bad.astype(np.float32), labels=y)
    sweep = ["sweep", str(f), "--m", "5", "--out", str(tmp_path / "s.json")]
    for cmd in (["report", str(f), "--out", str(tmp_path / "r")], sweep):
      assert cli.main(cmd) == 2
      err = capsys.readouterr().err
      assert re.search(what, err) and "an array named probs is read as probabilities" in err
  ok = tmp_path / "ok.npz"
  np.savez(ok, probs=p, labels=y)  # valid probabilities still pass
  assert cli.main(["sweep", str(ok), "--m", "5", "--out", str(tmp_path / "s2.json")]) == 0
  capsys.readouterr()


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


def test_sizes_past_int32_or_memory_are_one_line_errors(tmp_path, capsys):
  """``--resamples 2147483648`` ended in numpy's OverflowError after 58 lines of traceback,
  ``--m 10000000000`` (400 GB of utilities) in XLA's out-of-memory error after 40 (found by a
  review helper); ``jaxcal report fifo.npz`` waited for ever on the named pipe."""
  import os

  default = str(data.DEFAULT_PREDICTIONS)
  report = ["report", default, "--out", str(tmp_path / "r"), "--figures", ""]
  assert cli.main([*report, "--utilities", "0", "--resamples", str(2**31)]) == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and "resamples must be an integer <= 2,147,483,646" in err
  sweep = ["sweep", default, "--m", str(10**10), "--out", str(tmp_path / "s.json")]
  assert cli.main(sweep) == 2  # refused by the sampler's size check, before any allocation
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and err.startswith("jaxcal sweep: error: --m: ") and "2^31" in err
  assert cli.main([*report, "--utilities", str(10**10), "--resamples", "0"]) == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and "num_utilities = 10000000000 utilities of C = 10" in err
  assert not (tmp_path / "s.json").exists()
  fifo = tmp_path / "p.npz"
  os.mkfifo(fifo)
  assert cli.main(["report", str(fifo), "--out", str(tmp_path / "r2"), "--figures", ""]) == 2
  assert "not a regular file (a named pipe)" in capsys.readouterr().err


def test_running_out_of_memory_is_a_one_line_error(tmp_path, capsys, monkeypatch):
  """What no check can foresee (a size within every bound, on a smaller device) ended in
  XLA's 40-line traceback; other errors keep theirs (test_an_internal_error_keeps_...)."""
  import jax

  from jaxcal._src import report

  def exhausted(*args, **kwargs):
    raise jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: Out of memory allocating 400 bytes.")

  monkeypatch.setattr(report, "calibration_report", exhausted)
  assert cli.main(["report", "--out", str(tmp_path / "r"), "--figures", ""]) == 1
  err = capsys.readouterr().err
  assert err.count("\n") == 1, err
  assert err.startswith("jaxcal report: error: out of memory (RESOURCE_EXHAUSTED: Out of")
  assert "fewer utilities" in err


def test_unreadable_file_is_a_user_error(tmp_path, capsys, monkeypatch):
  import zipfile

  np.savez(tmp_path / "p.npz", logits=np.zeros((2, 2), np.float32), labels=np.zeros(2, int))

  def denied(*args, **kwargs):
    raise PermissionError(13, "Permission denied", str(tmp_path / "p.npz"))

  monkeypatch.setattr(zipfile, "ZipFile", denied)
  assert cli.main(["sweep", str(tmp_path / "p.npz"), "--out", str(tmp_path / "s.json")]) == 2
  assert "not readable (permission denied)" in capsys.readouterr().err


def test_an_unreadable_folder_of_models_is_a_user_error(tmp_path, capsys, monkeypatch):
  import os

  def denied(path):
    raise PermissionError(13, "Permission denied", str(path))

  monkeypatch.setattr(os, "listdir", denied)
  assert cli.main(["report", str(tmp_path), "--out", str(tmp_path / "r")]) == 2
  err = capsys.readouterr().err
  assert f"{tmp_path}: the folder is not readable (permission denied)" in err
  assert "Traceback" not in err


def test_cli_enables_the_persistent_compilation_cache(tmp_path):
  import os
  import subprocess
  import sys

  code = (
    "import jax; from jaxcal._src import cli; d = cli.enable_compilation_cache(); "
    "print(d); print(jax.config.jax_compilation_cache_dir); "
    "print(jax.config.jax_persistent_cache_min_compile_time_secs)"
  )
  env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path))
  env.pop("JAX_COMPILATION_CACHE_DIR", None)
  env.pop("JAXCAL_CACHE_DIR", None)
  out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
  want = str(tmp_path / "jaxcal" / "jax")
  # every program is kept, however quick to compile (a 0.5 s threshold kept 10 of the
  # report's 50 programs: the other 40 compiled again in every run)
  assert out.returncode == 0 and out.stdout.split() == [want, want, "0.0"], out.stderr
  env["JAX_COMPILATION_CACHE_DIR"] = str(tmp_path / "mine")  # the user's own setting wins
  out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
  assert out.stdout.split()[0] == str(tmp_path / "mine")
  env.pop("JAX_COMPILATION_CACHE_DIR")  # jaxcal's own setting wins over XDG_CACHE_HOME
  env["JAXCAL_CACHE_DIR"] = str(tmp_path / "own")
  out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
  assert out.stdout.split()[:2] == [str(tmp_path / "own")] * 2, out.stderr


def test_plots_render(tmp_path):
  x, y = data.default_predictions()
  fig = plots.reliability_diagram(x[:500], y[:500], 10, "quantile", from_logits=True, title="t")
  fig.savefig(tmp_path / "r.png")
  fig = plots.bin_robustness_plot([2, 3, 4], {"a": [1e-3, 2e-3, 3e-3]})
  fig.savefig(tmp_path / "b.png")
  assert (tmp_path / "r.png").stat().st_size > 5_000


def test_report_on_a_folder_of_models_compares_rankings(tmp_path, capsys):
  x, y = data.default_predictions()
  folder = tmp_path / "models"
  folder.mkdir()
  for t in (0.5, 1.0, 2.0):
    np.savez(folder / f"T{t}.npz", logits=np.asarray(x[:600]) / t, labels=np.asarray(y[:600]))
  out = tmp_path / "cmp"
  argv = ["report", str(folder), "--out", str(out), "--resamples", "5", "--figures", "png"]
  assert cli.main(argv + ["--format", "md"]) == 0
  text = capsys.readouterr().out
  assert "| model |" in text and "T0.5" in text and "smECE" in text
  rep = json.loads((out / "report.json").read_text())
  assert set(rep["metrics"]) == {"T0.5", "T1.0", "T2.0"}
  assert all("lo" in rep["metrics"][m]["smECE"] for m in rep["metrics"])  # intervals per model
  (group,) = rep["rank_stability"]
  assert "ConfCE(qua)" in group["errors"]
  assert (out / "rank_stability_C10_n600.png").exists()
  # the split read is recorded of every model, as the one-model report's source is
  # (--split val had been indistinguishable from test in report.json; found by a review)
  one = "(no 'test' split: the file's one data set)"
  assert [m["source"] for m in rep["models"]] == [f"T{t}.npz {one}" for t in (0.5, 1.0, 2.0)]


def test_sweep_markdown_and_json(capsys, tmp_path):
  default = str(data.DEFAULT_PREDICTIONS)
  out = str(tmp_path / "s.npz")
  assert cli.main(["sweep", default, "--m", "8", "--out", out, "--format", "md"]) == 0
  assert "| quantile | UC |" in capsys.readouterr().out
  assert cli.main(["sweep", default, "--m", "8", "--out", out, "--format", "json", "--force"]) == 0
  assert json.loads(capsys.readouterr().out)["m"] == 8


def test_sweep_text_states_quantiles_not_fractions(capsys, tmp_path):
  """With 3 utilities the interpolated 90% quantile lies above 2 of them: the text said
  "90% of utilities have UC <= q", which held for 67% (found by a review helper)."""
  default = str(data.DEFAULT_PREDICTIONS)
  argv = ["sweep", default, "--m", "3", "--out", str(tmp_path / "s.json")]
  assert cli.main(argv + ["--format", "json"]) == 0
  q = json.loads(capsys.readouterr().out)["quantiles"]
  errs = np.asarray(json.loads((tmp_path / "s.json").read_text())["errors"])
  assert np.mean(errs <= q["90%"]) < 0.9  # the case: not a fraction of the utilities
  assert cli.main(argv + ["--force"]) == 0
  text = capsys.readouterr().out
  assert "of utilities have UC" not in text and "  90% quantile of UC: " in text
  help_text = cli.build_parser()._subparsers._group_actions[0].choices["sweep"].format_help()
  assert "jax.enable_x64" in " ".join(help_text.split())  # the key of a seed beyond 2**32


def test_report_band_resamples(small_file, tmp_path, capsys):
  """The bin-count bands had 50 resamples whatever the command line said (only
  ``--resamples 0`` turned them off): ``--band-resamples`` sets them, and the Markdown
  names them (found by a review helper)."""
  argv = ["report", str(small_file), "--out", str(tmp_path / "r"), "--utilities", "0"]
  argv += ["--figures", "", "--format", "md", "--resamples", "0"]

  def bands(*extra):
    assert cli.main(argv + list(extra)) == 0
    text = capsys.readouterr().out
    rep = json.loads((tmp_path / "r" / "report.json").read_text())
    return rep["settings"]["robustness_resamples"], text

  n, text = bands()
  assert n == 0 and "Errors across the bin count m:" in text  # --resamples 0: none
  n, text = bands("--band-resamples", "12")
  assert n == 12 and "bin count m; 95% percentile bootstrap intervals over 12 resamples:" in text
  assert "no intervals (resamples = 0)." in text  # the headline's own
  assert cli.main(argv + ["--band-resamples", "1"]) == 2
  assert "--band-resamples must be 0 (no intervals) or at least 2, got 1" in capsys.readouterr().err
  other = tmp_path / "other.npz"
  other.write_bytes(small_file.read_bytes())
  two = ["report", str(small_file), str(other), "--band-resamples", "5"]
  assert cli.main(two + ["--out", str(tmp_path / "c")]) == 2
  assert "a comparison of several models draws no bands" in capsys.readouterr().err


def test_outputs_inside_an_input_folder_are_refused(tmp_path, capsys):
  """``--out m1/recal.npz`` beside m1's .npy files made m1 unreadable as an input ("holds
  .npy files and .npz files") for recalibrate and report (found by a review helper)."""
  x, y = data.default_predictions()
  m1 = tmp_path / "m1"
  m1.mkdir()
  for split, rows in (("val", slice(0, 600)), ("test", slice(600, 1200))):
    np.save(m1 / f"{split}_logits.npy", np.asarray(x[rows]))
    np.save(m1 / f"{split}_labels.npy", np.asarray(y[rows]))
  argv = ["recalibrate", "temperature", str(m1), str(m1), "--out"]
  assert cli.main(argv + [str(m1 / "recal.npz")]) == 2
  assert "is inside the input folder" in capsys.readouterr().err
  assert sorted(p.name for p in m1.iterdir()) == [
    "test_labels.npy",
    "test_logits.npy",
    "val_labels.npy",
    "val_logits.npy",
  ]
  assert cli.main(argv + [str(tmp_path / "recal.npz")]) == 0  # beside it: fine
  capsys.readouterr()
  sweep = ["sweep", str(m1), "--m", "4", "--out", str(m1 / "s.json")]
  assert cli.main(sweep) == 2 and "is inside the input folder" in capsys.readouterr().err


def test_recalibrate_refuses_to_fit_and_score_on_the_same_samples(small_file, tmp_path, capsys):
  out = str(tmp_path / "x.npz")
  assert (
    cli.main(["recalibrate", "temperature", str(small_file), str(small_file), "--out", out]) == 2
  )
  err = capsys.readouterr().err
  assert "are the same 1,500 samples" in err and "no 'val' split" in err
  assert not (tmp_path / "x.npz").exists()


def test_a_missing_split_is_named_not_claimed(small_file, tmp_path, capsys):
  out = tmp_path / "rep"
  argv = ["report", str(small_file), "--out", str(out), "--utilities", "0", "--resamples", "0"]
  # --format json prints the same report (rounded) as report.json, and nothing else
  assert cli.main(argv + ["--split", "val", "--figures", "png", "--format", "json"]) == 0
  printed = json.loads(capsys.readouterr().out)
  rep = json.loads((out / "report.json").read_text())
  assert printed["metrics"].keys() == rep["metrics"].keys()
  assert printed["input"]["source"] == "resnet.npz (no 'val' split: the file's one data set)"


def test_version_and_the_method_list_of_the_help(capsys, monkeypatch):
  import importlib.metadata

  from jaxcal import __version__, recalibrate

  assert cli.RECALIBRATION_METHODS == recalibrate.methods()
  with pytest.raises(SystemExit) as e:
    cli.main(["--version"])
  assert e.value.code == 0 and capsys.readouterr().out.strip() == f"jaxcal {__version__}"

  # the running package's version, also from a source tree with no installed
  # metadata (PYTHONPATH on a bare machine) or beside another install's
  def no_metadata(name):
    raise importlib.metadata.PackageNotFoundError(name)

  monkeypatch.setattr(importlib.metadata, "version", no_metadata)
  with pytest.raises(SystemExit) as e:
    cli.main(["--version"])
  assert e.value.code == 0 and capsys.readouterr().out.strip() == f"jaxcal {__version__}"


def test_integer_options_take_their_minimum():
  import argparse

  assert cli._positive("1") == 1 and cli._non_negative("0") == 0
  with pytest.raises(argparse.ArgumentTypeError, match="expected an integer >= 1, got 0"):
    cli._positive("0")
  with pytest.raises(argparse.ArgumentTypeError, match="expected an integer >= 0, got 'x'"):
    cli._non_negative("x")


def test_a_seed_beyond_int64_is_a_parser_error_not_a_traceback(capsys):
  assert cli._seed("-5") == -5 and cli._seed(str(2**63 - 1)) == 2**63 - 1
  for command in (["sweep", "x.npz", "--out", "o.npz"], ["report"]):
    with pytest.raises(SystemExit) as e:  # jax.random.key raised OverflowError
      cli.main([*command, "--seed", str(2**64)])
    assert e.value.code == 2
    assert "argument --seed: expected a seed in [-2**63, 2**63)" in capsys.readouterr().err
  with pytest.raises(SystemExit):
    cli.main(["sweep", "x.npz", "--out", "o.npz", "--seed", "1.5"])
  assert "expected an integer seed, got '1.5'" in capsys.readouterr().err


def test_a_parser_error_is_one_line_that_points_at_the_help(capsys):
  with pytest.raises(SystemExit) as e:
    cli.main(["report", "--bins", "0"])
  assert e.value.code == 2
  err = capsys.readouterr().err
  assert err == (
    "jaxcal report: error: argument --bins: expected an integer >= 1, got 0 "
    "(see jaxcal report --help)\n"
  )


def test_models_of_one_file_name_in_several_folders_keep_their_folders(tmp_path, capsys):
  # runA/preds.npz and runB/preds.npz were both "preds": one model silently dropped
  assert cli._unique_names(["runA/preds.npz", "runB/preds.npz", "c.npz"]) == [
    "runA/preds",
    "runB/preds",
    "c",
  ]
  assert cli._unique_names(["x/a/p.npz", "y/a/p.npz"]) == ["x/a/p", "y/a/p"]
  with pytest.raises(cli.UserError, match=r"given twice: \['./a.npz', 'a.npz'\]"):
    cli._unique_names(["a.npz", "b.npz", "./a.npz"])


def test_user_errors_come_before_the_computation(small_file, tmp_path, capsys, monkeypatch):
  from jaxcal import recalibrate
  from jaxcal._src import report

  real_report = report.calibration_report
  monkeypatch.setattr(report, "calibration_report", lambda *a, **k: pytest.fail("computed"))
  monkeypatch.setattr(recalibrate, "fit", lambda *a, **k: pytest.fail("fitted"))
  # a figure format only write_report knew (after 40-70 s of computation)
  with pytest.raises(SystemExit) as e:  # a parser error
    cli.main(["report", str(small_file), "--out", str(tmp_path / "r"), "--figures", "png,jpg"])
  assert e.value.code == 2
  assert "figure formats must be among png, pdf, svg, got 'jpg'" in capsys.readouterr().err
  # a folder where nothing can be created (os.access passes for root, and for /proc)
  real = cli.tempfile.mkdtemp
  monkeypatch.setattr(
    cli.tempfile,
    "mkdtemp",
    lambda **k: (_ for _ in ()).throw(PermissionError(13, "Permission denied")),
  )
  assert cli.main(["report", str(small_file), "--out", str(tmp_path / "r2")]) == 2
  assert "cannot write there" in capsys.readouterr().err
  monkeypatch.setattr(cli.tempfile, "mkdtemp", real)
  # NaN in the test file: named, before the fit
  x, y = data.default_predictions()
  z = np.asarray(x[:40]).copy()
  z[3, 2] = np.nan
  bad = tmp_path / "bad.npz"
  np.savez(bad, logits=z, labels=np.asarray(y[:40]))
  cal = tmp_path / "cal.npz"
  np.savez(cal, logits=np.asarray(x[40:80]), labels=np.asarray(y[40:80]))
  argv = ["recalibrate", "temperature", str(cal), str(bad), "--out", str(tmp_path / "o.npz")]
  assert cli.main(argv) == 2
  assert f"{bad} contains non-finite values" in capsys.readouterr().err
  # the model file would have replaced the recalibrated probabilities
  argv = ["recalibrate", "temperature", str(cal), str(small_file), "--out", str(tmp_path / "o.npz")]
  assert cli.main(argv + ["--save-model", str(tmp_path / "o.npz")]) == 2
  assert "--out and --save-model are the same file" in capsys.readouterr().err
  # probabilities rounded to 2 decimals: refused, not softmaxed as logits (the report's
  # check is the first step of calibration_report; undo() would also drop the autouse
  # fixture's patch of the persistent compilation cache)
  monkeypatch.setattr(report, "calibration_report", real_report)
  p = np.exp(np.asarray(x[:200], np.float64))
  p = np.round(p / p.sum(1, keepdims=True), 2)
  np.savez(tmp_path / "round.npz", probs=p, labels=np.asarray(y[:200]))
  for cmd in (["report"], ["sweep"]):
    out = ["--out", str(tmp_path / ("s.json" if cmd == ["sweep"] else "r3"))]
    assert cli.main(cmd + [str(tmp_path / "round.npz")] + out) == 2
    err = capsys.readouterr().err  # named probs: checked as probabilities at load
    assert "probs must sum to 1" in err and "an array named probs is read as" in err


def test_names_options_and_same_data():
  assert cli._name("/a/b/model_1.npz") == "model_1" and cli._name("/a/run.3/") == "run.3"
  # a pair is named by its scores file, not by the labels file models share
  assert cli._name("scores.npy,labels.npy") == "scores.npy"
  assert cli._name("/d/runA/test_logits.npy,/d/runA/test_labels.npy", 2) == "runA/test_logits.npy"
  pairs = [f"/d/run{k}/test_logits.npy,/d/run{k}/test_labels.npy" for k in "AB"]
  assert cli._unique_names(pairs) == ["runA/test_logits.npy", "runB/test_logits.npy"]
  assert cli._parse_options("") == {} and cli._parse_options('{"a": [1]}') == {"a": [1]}
  x, y = np.arange(6.0).reshape(3, 2), np.array([0, 1, 0])
  assert cli._same_data(x, y, x.copy(), y.copy())
  assert not cli._same_data(x, y, x + 1, y)  # same labels, other scores
  assert not cli._same_data(x, y, x, np.array([0, 1, 1]))
  assert not cli._same_data(x, y, x[:2], y[:2])


def test_recalibrate_refuses_files_with_different_class_counts(tmp_path, capsys, monkeypatch):
  from jaxcal import recalibrate

  monkeypatch.setattr(recalibrate, "fit", lambda *a, **k: pytest.fail("fitted"))
  np.savez(tmp_path / "c.npz", logits=np.zeros((6, 3), np.float32), labels=np.arange(6) % 3)
  np.savez(tmp_path / "t.npz", logits=np.zeros((6, 4), np.float32), labels=np.arange(6) % 4)
  argv = ["recalibrate", "temperature", str(tmp_path / "c.npz"), str(tmp_path / "t.npz")]
  assert cli.main(argv + ["--out", str(tmp_path / "o.npz")]) == 2
  err = capsys.readouterr().err
  assert "calibration file has C = 3 classes but the test file has C = 4" in err
  assert not (tmp_path / "o.npz").exists()


def test_report_passes_every_setting_and_names_the_models(tmp_path, capsys, monkeypatch):
  """What ``jaxcal report`` hands to the report functions (they are replaced by recorders)."""
  from jaxcal._src import report

  calls = []

  def record(kind):
    def fn(*args, **kwargs):
      calls.append((kind, args, kwargs))
      return {"kind": kind}

    return fn

  monkeypatch.setattr(report, "calibration_report", record("one"))
  monkeypatch.setattr(report, "compare_report", record("many"))
  monkeypatch.setattr(report, "write_report", lambda rep, *a, **k: {"json": "r/report.json"})
  monkeypatch.setattr(report, "format_summary", lambda rep, **k: f"summary of {rep['kind']}")
  monkeypatch.setattr(report, "format_markdown", lambda rep, **k: f"markdown of {rep['kind']}")
  for k in range(2):  # n = 8 >= --bins 7 (the command checks the settings before the report)
    np.savez(tmp_path / f"m{k}.npz", logits=np.full((8, 2), k, np.float32), labels=np.ones(8, int))
  out = str(tmp_path / "r")
  settings = ["--bins", "7", "--resamples", "3", "--confidence", "0.8", "--interval", "basic"]
  settings += ["--seed", "5", "--utilities", "9", "--out", out]
  assert cli.main(["report", str(tmp_path / "m1.npz"), *settings]) == 0
  (kind, (x, y), kw), *_ = calls
  # named logits arrive shifted by each row's maximum (never read as probabilities)
  assert kind == "one" and np.all(np.asarray(x) == 0) and y.tolist() == [1] * 8
  assert kw == dict(
    num_utilities=9,
    source="m1.npz (no 'test' split: the file's one data set)",
    path=str(tmp_path / "m1.npz"),
    num_bins=7,
    resamples=3,
    confidence=0.8,
    interval="basic",
    seed=5,
    robustness_resamples=50,  # --band-resamples' default
  )
  assert capsys.readouterr().out.startswith("summary of one\n")
  calls.clear()  # "--resamples 0: none" bootstrapped the bin-count bands all the same
  settings[settings.index("3")] = "0"
  assert cli.main(["report", str(tmp_path / "m1.npz"), *settings]) == 0
  assert calls[0][2]["resamples"] == calls[0][2]["robustness_resamples"] == 0
  capsys.readouterr()
  calls.clear()
  files = [str(tmp_path / f"m{k}.npz") for k in range(2)]
  settings = settings[: settings.index("--utilities")] + settings[settings.index("9") + 1 :]
  assert cli.main(["report", *files, *settings, "--format", "md"]) == 0
  (kind, (models,), kw), *_ = calls
  assert kind == "many" and list(models) == ["m0", "m1"] and models["m1"][0][0, 0] == 0
  assert kw["paths"] == {"m0": files[0], "m1": files[1]} and kw["num_bins"] == 7
  assert capsys.readouterr().out.startswith("markdown of many\n")


def test_sweep_writes_into_a_new_folder_what_it_prints(tmp_path, capsys):
  import jax

  from jaxcal import utility

  rng = np.random.default_rng(0)
  x, y = rng.normal(size=(30, 3)).astype(np.float32), rng.integers(0, 3, 30)
  np.savez(tmp_path / "p.npz", logits=x, labels=y)
  out = tmp_path / "new" / "sub" / "s.npz"
  argv = ["sweep", str(tmp_path / "p.npz"), "--m", "5", "--seed", "3", "--family", "rank"]
  assert cli.main(argv + ["--out", str(out), "--format", "json"]) == 0
  printed = json.loads(capsys.readouterr().out)
  us = utility.sample_rank(jax.random.split(jax.random.split(jax.random.key(3), 4)[3])[1], 5, 3)
  want = np.asarray(utility.uc_sweep(x, y, us, from_logits=True), np.float64)
  z = np.load(out)
  np.testing.assert_allclose(z["errors"], want, rtol=1e-6)
  np.testing.assert_allclose(z["sorted_errors"], np.sort(want), rtol=1e-6)
  np.testing.assert_allclose(z["fractions"], np.arange(1, 6) / 5)
  assert printed["family"] == "rank" and printed["m"] == 5 and printed["seed"] == 3
  assert list(printed["quantiles"]) == ["10%", "50%", "90%", "100%"]
  assert printed["quantiles"]["50%"] == pytest.approx(np.median(want), rel=1e-5)
  assert printed["quantiles"]["100%"] == pytest.approx(want.max(), rel=1e-5)


def test_save_model_needs_a_model_file_name(tmp_path, capsys):
  default = str(data.DEFAULT_PREDICTIONS)
  argv = ["recalibrate", "temperature", default, default, "--out", str(tmp_path / "o.npz")]
  assert cli.main(argv + ["--save-model", str(tmp_path / "m.txt")]) == 2
  err = capsys.readouterr().err
  assert f"--save-model {tmp_path / 'm.txt'}: use a .npz or .msgpack file name" in err


def _split_file(path, n_val: int, n_test: int) -> dict:
  """An .npz of 3-class val/test logits and labels at ``path``; returns its arrays."""
  rng = np.random.default_rng(4)
  splits = {}
  for split, n in (("val", n_val), ("test", n_test)):
    y = rng.integers(0, 3, n)
    splits[f"{split}_logits"] = (3 * rng.normal(size=(n, 3)) + 2 * np.eye(3)[y]).astype(np.float32)
    splits[f"{split}_labels"] = y
  np.savez(path, **splits)
  return splits


def test_recalibrate_scores_the_test_split_before_and_after(tmp_path, capsys):
  from scipy.special import softmax

  splits = _split_file(tmp_path / "s.npz", 60, 40)
  out = tmp_path / "o.npz"
  f = str(tmp_path / "s.npz")
  assert cli.main(["recalibrate", "temperature", f, f, "--out", str(out), "--format", "json"]) == 0
  rep = json.loads(capsys.readouterr().out)
  assert rep["n_calibration"] == 60 and rep["n_test"] == 40
  assert rep["calibration_data"] == "s.npz (val)" and rep["test_data"] == "s.npz (test)"
  z = np.load(out)
  yt = splits["test_labels"]
  assert z["labels"].tolist() == yt.tolist()
  before = softmax(splits["test_logits"].astype(np.float64), axis=1)
  after = z["probs"].astype(np.float64)
  assert not np.allclose(before, after, atol=1e-3)  # the temperature moved the probabilities
  m = rep["metrics"]
  for p, when in ((before, "before"), (after, "after")):
    assert m["NLL"][when] == pytest.approx(np.mean(ref.log_loss(p, yt)), rel=1e-4)
    assert m["ConfECE(fix;15)"][when] == pytest.approx(ref.conf_ece(p, yt, 15), rel=1e-3, abs=1e-6)
    assert m["accuracy"][when] == pytest.approx(np.mean(p.argmax(1) == yt), abs=1e-6)


def test_parser_defaults():
  p = cli.build_parser()
  r = vars(p.parse_args(["report"]))
  del r["func"]
  assert r == dict(
    command="report",
    predictions=[],
    out="jaxcal-report",
    split="test",
    bins=15,
    utilities=None,  # 1500 for one model; None: not given (refused when comparing models)
    resamples=200,
    band_resamples=None,  # 50, or 0 with --resamples 0
    confidence=0.95,
    interval="percentile",
    figures=("png", "pdf"),
    seed=0,
    format="text",
  )
  assert p.parse_args(["report", "--figures", ""]).figures == ()
  assert p.parse_args(["report", "--figures", "svg,,png"]).figures == ("svg", "png")
  c = p.parse_args(["recalibrate", "temperature", "a", "b", "--out", "o.npz"])
  assert (c.cal_split, c.test_split, c.options, c.save_model, c.force) == (
    "val",
    "test",
    None,
    None,
    False,
  )
  s = p.parse_args(["sweep", "--out", "s.json"])
  assert (s.predictions, s.family, s.m, s.chunk_size, s.seed, s.split, s.force) == (
    None,
    "linear",
    1500,
    None,
    0,
    "test",
    False,
  )


def test_an_output_path_deep_under_a_file_is_refused(tmp_path):
  blocker = tmp_path / "file"
  blocker.write_text("x")
  assert (
    cli._parent_problem(str(blocker / "a" / "b" / "c.json")) == f"{blocker} is a file, not a folder"
  )
  assert cli._parent_problem(str(tmp_path / "a" / "b" / "c.json")) is None
  with pytest.raises(cli.UserError, match=r"--out .*/a/b: cannot write there: .* is a file"):
    cli._check_out_dir(str(blocker / "a" / "b"))
  cli._check_out_dir(str(tmp_path / "new" / "deeper"))  # folders that can be made


def test_unnormalised_class_wise_outputs_are_written_as_scores(tmp_path, capsys):
  # the --help's own example, normalize=false (CW-HB), fitted, then failed in the
  # before/after table of probability metrics (exit 2, nothing written)
  f, out = str(tmp_path / "s.npz"), tmp_path / "o.npz"
  _split_file(f, 200, 100)
  argv = ["recalibrate", "histogram", f, f, "--out", str(out), "--options", '{"normalize": false}']
  assert cli.main(argv) == 0
  assert "no before/after table" in capsys.readouterr().out
  z = np.load(out)
  assert sorted(z.keys()) == ["classwise_scores", "labels"]
  assert not np.allclose(z["classwise_scores"].sum(1), 1)
  # saved as "scores" they were read back as logits (rows summing to up to 5), softmaxed
  # and reported with exit 0; this name is refused
  assert cli.main(["report", str(out), "--out", str(tmp_path / "r"), "--resamples", "0"]) == 2
  assert "classwise_scores" in capsys.readouterr().err


def test_named_logits_are_never_read_as_probabilities(tmp_path, capsys):
  # logits (l, 1 - l) lie on the simplex: an array named logits was reported as probabilities.
  # Then softmax outputs saved as logits were softmaxed again, silently (NLL 1.52 for 0.190;
  # found by a review helper): rows on the simplex named logits are refused, naming both
  # ways out, and logits shifted by a constant (the same softmax) are reported as logits.
  rng = np.random.default_rng(0)
  lo = rng.uniform(0.2, 0.8, 600).astype(np.float32)
  z = np.stack([lo, 1 - lo], 1)
  y = (rng.random(600) < 0.5).astype(np.int64)
  np.savez(tmp_path / "b.npz", logits=z, labels=y)
  out = tmp_path / "r"
  argv = ["report", str(tmp_path / "b.npz"), "--out", str(out), "--resamples", "0"]
  assert cli.main(argv + ["--utilities", "4", "--figures", ""]) == 2
  err = capsys.readouterr().err
  assert "named 'logits' are probabilities" in err and "add a constant" in err
  assert not out.exists()
  np.savez(tmp_path / "b.npz", logits=z + 1, labels=y)
  assert cli.main(argv + ["--utilities", "4", "--figures", ""]) == 0
  rep = json.loads((out / "report.json").read_text())
  assert rep["input"]["kind"] == "logits"
  want = float(metrics.conf_ece(z, y, from_logits=True))
  assert rep["metrics"]["ConfECE(fix;15)"]["estimate"] == pytest.approx(want, rel=1e-5)


def test_an_empty_output_path_is_refused_before_any_work(tmp_path, capsys, monkeypatch):
  monkeypatch.chdir(tmp_path)  # it wrote ./report.json, printed the report, then exited 2
  assert cli.main(["report", "--out", ""]) == 2
  assert "--out is empty" in capsys.readouterr().err and not list(tmp_path.iterdir())


def test_an_internal_value_error_keeps_its_traceback(small_file, tmp_path, capsys, monkeypatch):
  # main() turned every ValueError into one line and exit 2: a ValueError from deep inside
  # JAX or numpy (a bug, not a message about the input) lost its traceback
  from jaxcal import utility
  from jaxcal._src import report

  def deep(*args, **kwargs):
    raise ValueError("operands could not be broadcast together with shapes (3,) (4,)")

  monkeypatch.setattr(utility, "uc_sweep", deep)
  with pytest.raises(ValueError, match="could not be broadcast"):
    cli.main(["sweep", str(small_file), "--m", "4", "--out", str(tmp_path / "s.json")])
  monkeypatch.setattr(report, "_headline_section", deep)  # the first step of calibration_report
  with pytest.raises(ValueError, match="could not be broadcast"):
    cli.main(["report", str(small_file), "--out", str(tmp_path / "r"), "--figures", ""])
  assert capsys.readouterr().err == ""


def test_user_input_errors_stay_one_line(small_file, tmp_path, capsys, monkeypatch):
  """Input the commands check before computing: settings, splits, model folders, fit options."""
  from jaxcal._src import report

  monkeypatch.setattr(report, "calibration_report", lambda *a, **k: pytest.fail("computed"))
  monkeypatch.setattr(report, "compare_report", lambda *a, **k: pytest.fail("compared"))
  out = ["--out", str(tmp_path / "r")]
  x, y = data.default_predictions()
  (tmp_path / "one" / "m").mkdir(parents=True)  # a folder of one model folder
  np.savez(tmp_path / "one" / "m" / "p.npz", logits=np.asarray(x[:20]), labels=np.asarray(y[:20]))
  tiny = tmp_path / "tiny"  # three models of 6 samples: fewer than two rank bin counts <= n
  tiny.mkdir()
  for k in range(3):
    np.savez(tiny / f"t{k}.npz", logits=np.asarray(x[:6]) * (k + 1), labels=np.asarray(y[:6]))
  for argv, want in (
    (["report", str(small_file), "--confidence", "1.5"], "confidence must lie in (0, 1)"),
    (["report", str(small_file), "--bins", "2000"], "num_bins = 2000 quantile bins need"),
    (["report", "--split", "nope"], "--split nope: "),
    (["report", str(tmp_path / "one")], "holds one model (m); a comparison needs at least two"),
    (["report", str(tiny), "--bins", "5"], "leave fewer than two bin counts <= n = 6"),
  ):
    assert cli.main(argv + out) == 2, argv
    err = capsys.readouterr().err
    assert err.startswith("jaxcal report: error: ") and want in err and err.count("\n") == 1, err
  f = str(tmp_path / "s.npz")
  _split_file(f, 60, 40)
  argv = ["recalibrate", "histogram", f, f, "--out", str(tmp_path / "o.npz")]
  assert cli.main(argv + ["--options", '{"num_bins": 0}']) == 2  # checked by the fit itself
  assert capsys.readouterr().err == "jaxcal recalibrate: error: num_bins must be >= 1, got 0\n"


def test_sweep_reproduces_the_reports_utilities(small_file, tmp_path, capsys):
  # report drew family f with jax.random.split(key(seed))[f], sweep with key(seed) itself: the
  # same --seed gave other utilities, so a sweep could not reproduce the report's UC
  argv = ["report", str(small_file), "--out", str(tmp_path / "r"), "--utilities", "40"]
  argv += ["--resamples", "0", "--figures", "", "--seed", "7", "--format", "json"]
  assert cli.main(argv) == 0
  uc = json.loads(capsys.readouterr().out)["utility"]
  for family in ("linear", "rank"):
    out = tmp_path / f"{family}.json"
    argv = ["sweep", str(small_file), "--family", family, "--m", "40", "--seed", "7"]
    assert cli.main(argv + ["--out", str(out), "--format", "json"]) == 0
    printed = json.loads(capsys.readouterr().out)["quantiles"]
    want = uc[family]["quantiles"]
    for q, key in (("10%", "0.1"), ("50%", "0.5"), ("90%", "0.9"), ("100%", "1.0")):
      assert printed[q] == pytest.approx(want[key], rel=1e-5), (family, q)
    errs = np.sort(json.loads(out.read_text())["errors"])
    np.testing.assert_allclose(errs, uc[family]["errors"], rtol=1e-5)


def test_summaries_name_the_figure_files_written(small_file, tmp_path, capsys):
  # the summary and the markdown named bin_robustness.png and utility_ecdf.png whatever
  # --figures wrote (svg here: no .png exists)
  out = tmp_path / "rep"
  argv = ["report", str(small_file), "--out", str(out), "--utilities", "8", "--resamples", "0"]
  assert cli.main(argv + ["--figures", "svg", "--format", "md"]) == 0
  text = capsys.readouterr().out
  assert not list(out.glob("*.png")) and (out / "bin_robustness.svg").exists()
  assert "Errors across the bin count m (bin_robustness.svg):" in text
  assert "Utility calibration UC over sampled utilities (utility_ecdf.svg):" in text
  assert ".png" not in text
  assert cli.main(argv + ["--figures", "", "--out", str(tmp_path / "none")]) == 0
  text = capsys.readouterr().out  # no figure: none named
  assert "  bin count: one model's errors change with m" in text and "bin_robustness" not in text


def test_compare_mode_without_resamples_and_with_utilities(tmp_path, capsys, monkeypatch):
  from jaxcal._src import report

  x, y = data.default_predictions()
  folder = tmp_path / "models"
  folder.mkdir()
  for t in (0.5, 1.0, 2.0):
    np.savez(folder / f"T{t}.npz", logits=np.asarray(x[:300]) / t, labels=np.asarray(y[:300]))
  argv = ["report", str(folder), "--out", str(tmp_path / "cmp"), "--figures", ""]
  assert cli.main(argv + ["--resamples", "0"]) == 0
  text = capsys.readouterr().out  # it said "Spearman (paired bootstrap)" with no resample drawn
  assert "no intervals (resamples = 0)" in text and "Spearman (estimates, no intervals)" in text
  assert "bootstrap" not in text
  # compare_report samples no utilities: --utilities was silently ignored
  monkeypatch.setattr(report, "compare_report", lambda *a, **k: pytest.fail("compared"))
  assert cli.main(argv + ["--utilities", "50"]) == 2
  err = capsys.readouterr().err
  assert err.startswith("jaxcal report: error: --utilities: a comparison of several models")
  assert err.count("\n") == 1


def test_invalid_values_of_a_predictions_file_name_the_file(tmp_path, capsys, monkeypatch):
  # NaN logits in an .npz said "predictions contains non-finite values" (report) or "logits
  # contains ..." (sweep): which of the user's files was not said
  from jaxcal import utility
  from jaxcal._src import report

  monkeypatch.setattr(report, "calibration_report", lambda *a, **k: pytest.fail("computed"))
  monkeypatch.setattr(utility, "uc_sweep", lambda *a, **k: pytest.fail("swept"))
  rng = np.random.default_rng(1)
  z, y = rng.normal(size=(30, 4)).astype(np.float32), np.arange(30) % 4
  nan = tmp_path / "nan_logits.npz"
  z_nan = z.copy()
  z_nan[2, 1] = np.nan
  np.savez(nan, logits=z_nan, labels=y)
  label = tmp_path / "label_eq_C.npz"
  np.savez(label, logits=z, labels=np.where(np.arange(30) == 5, 4, y))  # a label == C
  for path, want in ((nan, "contains non-finite values"), (label, "labels must lie in [0, 4)")):
    for cmd in (
      ["report", str(path), "--out", str(tmp_path / "r")],
      ["sweep", str(path), "--m", "4", "--out", str(tmp_path / "s.json")],
    ):
      assert cli.main(cmd) == 2, cmd
      err = capsys.readouterr().err
      assert f"error: {path}" in err and want in err and err.count("\n") == 1, err


def test_recalibrate_json_says_why_metrics_are_absent_and_names_the_saved_model(tmp_path, capsys):
  # normalize=false printed "metrics": null with no reason, and the JSON did not name the
  # --save-model file it had written
  f, out, model = str(tmp_path / "s.npz"), tmp_path / "o.npz", tmp_path / "m.npz"
  _split_file(f, 200, 100)
  argv = ["recalibrate", "histogram", f, f, "--out", str(out), "--format", "json"]
  opts = ["--options", '{"normalize": false}', "--save-model", str(model)]
  assert cli.main(argv + opts) == 0
  rep = json.loads(capsys.readouterr().out)
  assert rep["metrics"] is None and "normalize=false" in rep["metrics_note"]
  assert "no before/after table" in rep["metrics_note"]
  assert rep["out_array"] == "classwise_scores" and "classwise_scores" in np.load(out)
  assert rep["save_model"] == str(model.resolve()) and model.stat().st_size > 0
  # with probabilities: metrics, no note; no --save-model: null
  assert cli.main(argv + ["--force"]) == 0
  rep = json.loads(capsys.readouterr().out)
  assert set(rep["metrics"]) >= {"NLL", "accuracy"} and rep["metrics_note"] is None
  assert rep["out_array"] == "probs" and rep["save_model"] is None


def _closed_stdout(argv, env_extra, tmp_path):
  """``python -m jaxcal ARGV`` whose stdout reader closes at once: (status, stderr)."""
  import os
  import subprocess

  env = dict(os.environ, JAXCAL_CACHE_DIR=str(tmp_path / "cache"))
  env.pop("PYTHONUNBUFFERED", None)  # stdout to a pipe is then block-buffered
  env.update(env_extra)
  proc = subprocess.Popen(
    [sys.executable, "-m", "jaxcal", *argv],
    stdout=subprocess.PIPE,
    stderr=subprocess.PIPE,
    env=env,
    text=True,
  )
  proc.stdout.close()  # `| head -1` gone before anything was written
  _, err = proc.communicate(timeout=300)
  return proc.returncode, err


def test_a_closed_stdout_pipe_is_no_traceback(tmp_path):
  # `jaxcal sweep ... | head -1`: a BrokenPipeError traceback (a print mid-command, stdout
  # unbuffered) or "Exception ignored ... BrokenPipeError" and status 120 (at exit's flush)
  out = tmp_path / "s.json"
  argv = ["sweep", str(data.DEFAULT_PREDICTIONS), "--m", "8", "--out", str(out)]
  for buffering in ({"PYTHONUNBUFFERED": "1"}, {}):
    status, err = _closed_stdout(argv + ["--force"], buffering, tmp_path)
    assert status == 1 and "Traceback" not in err and "BrokenPipe" not in err, err
    assert len(json.loads(out.read_text())["errors"]) == 8  # written before the summary
    out.unlink()
  status, err = _closed_stdout(["--version"], {}, tmp_path)  # flushed at exit, after argparse
  assert status == 1 and "BrokenPipe" not in err, err


def test_savefig_writes_each_file_whole_or_not_at_all(tmp_path, monkeypatch):
  # an error mid-write (a full disk) left a truncated figure, or a truncated copy over
  # the previous one; report figures are written by savefig
  import os

  fig = plots.ecdf_plot({"a": [0.01, 0.02, 0.04]})
  (path,) = plots.savefig(fig, tmp_path / "ok", ("png",))
  umask = os.umask(0)
  os.umask(umask)
  assert os.stat(path).st_mode & 0o777 == 0o666 & ~umask  # as open() gives, not mkstemp's 0600
  assert open(path, "rb").read(4) == b"\x89PNG"

  def half_then_fail(target, **kwargs):
    if isinstance(target, str | os.PathLike):  # (a path: how savefig called it)
      with open(target, "wb") as f:
        f.write(b"\x89PNG half a figure")
    else:
      target.write(b"\x89PNG half a figure")
    raise OSError(28, "No space left on device")

  monkeypatch.setattr(fig, "savefig", half_then_fail)
  folder = tmp_path / "new"
  folder.mkdir()
  with pytest.raises(OSError, match="No space left"):
    plots.savefig(fig, folder / "f", ("png",))
  assert list(folder.iterdir()) == []  # no truncated file, no temporary file
  (folder / "g.pdf").write_bytes(b"%PDF the previous figure")
  with pytest.raises(OSError, match="No space left"):
    plots.savefig(fig, folder / "g", ("pdf",))
  assert [p.name for p in folder.iterdir()] == ["g.pdf"]
  assert (folder / "g.pdf").read_bytes() == b"%PDF the previous figure"


def test_sweep_reads_the_split_it_is_given(tmp_path, capsys):
  """``jaxcal sweep --split val`` sweeps the val_* arrays of a multi-split
  file (not its test split) and names that split as the source."""
  import jax

  from jaxcal import utility

  splits = _split_file(tmp_path / "s.npz", 30, 20)
  out = tmp_path / "s_out.npz"
  argv = ["sweep", str(tmp_path / "s.npz"), "--split", "val", "--m", "5", "--seed", "3"]
  assert cli.main(argv + ["--family", "rank", "--out", str(out), "--format", "json"]) == 0
  printed = json.loads(capsys.readouterr().out)
  assert printed["source"] == "s.npz (val)"
  us = utility.sample_rank(jax.random.split(jax.random.split(jax.random.key(3), 4)[3])[1], 5, 3)
  x, y = splits["val_logits"], splits["val_labels"]
  want = np.asarray(utility.uc_sweep(x, y, us, from_logits=True), np.float64)
  np.testing.assert_allclose(np.load(out)["errors"], want, rtol=1e-6)


def test_report_on_several_models_reads_the_split_it_is_given(tmp_path, capsys, monkeypatch):
  """``jaxcal report A B --split val`` compares the models' val_* arrays, not
  their test split (``compare_report`` replaced by a recorder)."""
  from jaxcal._src import report

  calls = []
  monkeypatch.setattr(report, "compare_report", lambda *a, **k: calls.append((a, k)) or {})
  monkeypatch.setattr(report, "write_report", lambda rep, *a, **k: {"json": "r/report.json"})
  monkeypatch.setattr(report, "format_summary", lambda rep, **k: "summary")
  files = [str(tmp_path / f"m{k}.npz") for k in range(2)]
  splits = [_split_file(f, 30, 20) for f in files]
  argv = ["report", *files, "--split", "val", "--bins", "7", "--resamples", "0"]
  assert cli.main(argv + ["--out", str(tmp_path / "r")]) == 0
  ((models,), kw), *_ = calls
  assert kw["sources"] == {"m0": "m0.npz (val)", "m1": "m1.npz (val)"}  # recorded in models
  for name, s in zip(["m0", "m1"], splits, strict=True):
    x, y = models[name]
    assert np.asarray(x).shape == (30, 3) and np.asarray(y).tolist() == s["val_labels"].tolist()


def test_a_report_into_an_earlier_reports_folder_keeps_only_its_own_figures(
  tmp_path, capsys, monkeypatch
):
  """A second report into one folder left the first one's figures of other names and
  formats beside its report.json (reliability.pdf of one model beside a comparison of
  two, written as PNG; found by a review helper); --format json printed the timing
  unrounded (15.0479 for the written 15.0)."""
  from jaxcal._src import report

  x, y = data.default_predictions()
  files = [tmp_path / "a.npz", tmp_path / "b.npz"]
  for t, f in zip((1.0, 2.0), files):
    np.savez(f, logits=np.asarray(x[:300]) / t, labels=np.asarray(y[:300]))
  compare = report.compare_report

  def timed(*args, **kwargs):  # a timing with more than three digits
    rep = compare(*args, **kwargs)
    rep["timing"]["total_s"] = 15.0479
    return rep

  monkeypatch.setattr(report, "compare_report", timed)
  out = tmp_path / "rep"
  one = ["report", str(files[0]), "--out", str(out), "--resamples", "0", "--utilities", "0"]
  assert cli.main(one + ["--figures", "png,pdf"]) == 0
  stems = ("reliability", "smooth_reliability", "bin_robustness")
  written = json.loads((out / "report.json").read_text())["files"]
  assert written == [f"{s}.{f}" for s in stems for f in ("png", "pdf")] + ["report.json"]
  (out / "notes.pdf").write_bytes(b"%PDF")  # not the report's: kept
  two = ["report", *map(str, files), "--out", str(out), "--resamples", "0", "--figures", "png"]
  capsys.readouterr()
  assert cli.main(two + ["--format", "json"]) == 0
  printed = json.loads(capsys.readouterr().out)
  rep = json.loads((out / "report.json").read_text())
  assert printed == rep and rep["timing"] == {"total_s": 15.0}  # what was written
  assert rep["files"] == ["intervals_ConfECE.png", "intervals_ConfCE_corr.png"] + [
    "intervals_LinCE_cw.png",
    "report.json",
  ]
  assert sorted(p.name for p in out.iterdir()) == sorted(rep["files"] + ["notes.pdf"])
  for _ in range(2):  # the first report again, twice: its files and nothing else
    assert cli.main(one + ["--figures", "png,pdf"]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(written + ["notes.pdf"])


def test_the_source_of_a_missing_split_says_which_arrays_were_read(tmp_path):
  """A file of logits/labels and val_* arrays read for --split test was "the file's one
  data set" although it holds two (found by a review helper)."""
  x = np.eye(3, dtype=np.float32)[[0, 1, 2, 0]] * 2.0
  y = np.array([0, 1, 2, 0])
  both = tmp_path / "both.npz"
  np.savez(both, logits=x, labels=y, val_logits=x, val_labels=y)
  assert cli._load(str(both), "test")[2] == (
    "both.npz (no 'test' split: its unprefixed arrays; it also holds split 'val')"
  )
  assert cli._load(str(both), "val")[2] == "both.npz (val)"
  folder = tmp_path / "npy"  # a folder of .npy files: the same names
  folder.mkdir()
  for name, a in dict(probs=x / 2, labels=y, val_scores=x, val_labels=y, tr_logits=x).items():
    np.save(folder / f"{name}.npy", a)  # (tr_logits without tr_labels: no split)
  np.save(folder / "train_logits.npy", x)
  np.save(folder / "train_labels.npy", y)
  assert cli._load(str(folder), "test")[2].endswith("it also holds splits 'train', 'val')")
  one = tmp_path / "one.npz"
  np.savez(one, logits=x, labels=y)
  assert cli._load(str(one), "test")[2] == "one.npz (no 'test' split: the file's one data set)"
  np.save(tmp_path / "s.npy", x)
  np.save(tmp_path / "l.npy", y)
  pair = f"{tmp_path / 's.npy'},{tmp_path / 'l.npy'}"
  assert cli._load(pair, "val")[2] == "s.npy (no 'val' split: the file's one data set)"


def test_the_readme_names_every_method_of_the_recalibrate_help():
  """`kcal` (K-Cal) is listed by jaxcal recalibrate --help but the README named neither it
  nor fit_kcal (found by a review helper)."""
  readme = (pathlib.Path(__file__).parents[1] / "README.md").read_text()
  missing = [m for m in cli.RECALIBRATION_METHODS if not re.search(rf"[`.]fit_{m}`", readme)]
  assert missing == []
  assert '`fit("kcal"' in readme
