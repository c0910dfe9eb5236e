"""The recalibrator and utility-paper experiment scripts end to end, in their
--quick modes on small subsets (the real CIFAR logits of ../shared; skipped
without them)."""

import importlib.util
import json
import pathlib
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def load_script(name):
  spec = importlib.util.spec_from_file_location(f"_exp_{name}", ROOT / "experiments" / f"{name}.py")
  mod = importlib.util.module_from_spec(spec)
  sys.modules[spec.name] = mod
  spec.loader.exec_module(mod)
  return mod


def test_recalibrator_defaults_quick(tmp_path, cifar_dir):
  mod = load_script("recalibrator_defaults")
  res = mod.main(["--quick", "--out", str(tmp_path)])
  saved = json.loads((tmp_path / "results.json").read_text())
  assert saved["fits_checked"] == res["fits_checked"] == 1  # dirichlet (temperature unchecked)
  assert saved["fits_unsafe"] == []
  row = saved["results"]["cifar10_resnet110"]["methods"]
  assert set(row) == {"temperature", "dirichlet", "isotonic"}
  assert min(abs(row["dirichlet"]["reg_lambda"] / g - 1) for g in mod.recalibrate.ODIR_GRID) < 1e-6
  assert "| cifar10_resnet110 | 10 |" in (tmp_path / "table.md").read_text()
  # --update re-runs one method and merges it, keeping the others and logging the re-run
  before = saved["results"]["cifar10_resnet110"]["methods"]["isotonic"]
  mod.main(["--quick", "--update", "--methods", "temperature", "--out", str(tmp_path)])
  merged = json.loads((tmp_path / "results.json").read_text())
  assert merged["results"]["cifar10_resnet110"]["methods"]["isotonic"] == before
  assert list(merged["results"]["cifar10_resnet110"]["methods"]) == list(row)
  assert [u["methods"] for u in merged["meta"]["updates"]] == [["temperature"]]
  assert merged["fits_checked"] == 1 and sorted(p.name for p in tmp_path.iterdir()) == [
    "results.json",
    "table.md",
  ]
  assert "Re-run and merged: temperature" in (tmp_path / "table.md").read_text()


@pytest.mark.slow  # fast twin: test_utility_table_row_and_tables
def test_utility_table_quick(tmp_path, cifar_dir):
  mod = load_script("utility_table")
  res = mod.main(
    ["--quick", "--splits", "1", "--patch-steps", "2", "--ecdf-m", "20", "--out", str(tmp_path)]
  )
  r = res["results"]["cifar10_resnet110"]
  assert set(r["metrics"]) == set(mod.METHODS)
  for vals in r["metrics"].values():
    assert set(vals) == {k for k, _, _ in mod.COLUMNS}
    assert vals["u_comb"][0] == max(vals["u_cwe"][0], vals["u_topk"][0])
  assert r["fit_info"]["Patching"][0]["num_iter"] <= 2
  table = (tmp_path / "table.md").read_text()
  assert "U_dcg (×10³)" in table and "IR (global)" in table and "Table 3" in table
  assert (tmp_path / "ecdf_cifar10_resnet110.png").stat().st_size > 10_000


@pytest.mark.slow  # fast twin: test_gain_classes_and_figures (patching: test_patching.py)
def test_utility_gain_patching_quick(tmp_path, cifar_dir):
  mod = load_script("utility_gain_patching")
  res = mod.main(
    ["--quick", "--steps", "2", "--witnesses", "8", "--eval", "8", "--out", str(tmp_path)]
  )
  r = res["cifar100_resnet110"]
  for fam in ("aligned", "misaligned"):
    f = r["families"][fam]
    errs = np.asarray(f["test_errors_per_iteration"])
    assert errs.shape == (f["num_patches"] + 1, 8)
    assert np.all(np.diff(f["calibration_brier"]) < 0)
    assert set(f["baselines"]) == set(mod.BASELINES)
  for fig in ("fig2", "fig3"):
    assert (tmp_path / f"{fig}_cifar100_resnet110.png").stat().st_size > 10_000


# Fast twins of the two long end-to-end runs above (marked slow): the metrics
# of a table row, and the tables / figures built from a run's results.


def _probs(n=300, c=6, seed=0):
  rng = np.random.default_rng(seed)
  z = rng.normal(size=(n, c)) * 2
  p = np.exp(z) / np.exp(z).sum(1, keepdims=True)
  y = (rng.random(n)[:, None] > np.cumsum(p, 1)).sum(1).clip(0, c - 1)
  return p.astype(np.float32), y


def test_utility_table_row_and_tables(tmp_path):
  import jax.numpy as jnp

  mod = load_script("utility_table")
  p, y = _probs()
  dcg = mod.utility.dcg(jnp.asarray(mod.DCG_GAMMAS), 6)
  row = mod.evaluate(p, y, dcg)
  assert set(row) == {k for k, _, _ in mod.COLUMNS}
  assert row["u_comb"] == max(row["u_cwe"], row["u_topk"])
  per_gamma = [float(mod.utility.uc(p, y, mod.utility.dcg(g, 6)).value) for g in mod.DCG_GAMMAS]
  assert row["u_dcg"] == pytest.approx(max(per_gamma), abs=1e-6)
  fake = {
    "model": "ResNet-110 (CIFAR10)",
    "splits": 2,
    "n_cal": 7,
    "n_test": 3,
    "runtime_s": 60.0,
    "load_avg_at_end": [1.0, 1.0, 1.0],
    "patch_steps": 30,
    "metrics": {m: {k: [v, v] for k, v in row.items()} for m in mod.METHODS},
    "fit_and_apply_seconds": {m: [1.0, 2.0] for m in mod.METHODS},
    "fit_info": {m: [{"reg_lambda": 1.0}, {"reg_lambda": 10.0}] for m in mod.METHODS},
  }
  (tmp_path / "cifar10_resnet110.json").write_text(json.dumps(fake))
  out = mod.write_tables(tmp_path)
  table = (tmp_path / "table.md").read_text()
  assert "| Patching | " in table and "U_dcg (×10³)" in table and "| 1.5 |" in table
  assert "Dirichlet lambda chosen per split: [1.0, 10.0]" in table
  assert out["paper"]["cifar10"]["ResNet-56 (Table 3)"]["Patching"][-1] == 6.0
  # README: every printed number beside ours, with the difference
  readme = (tmp_path / "README.md").read_text()
  acc = row["accuracy"] * 100
  assert f"| Uncalibrated | 93.9 / {acc:.2f} ({acc - 93.9:+.2f}) |" in readme
  assert "ResNet-56 (Table 3) ↔ ours: ResNet-110 (CIFAR10)" in readme
  assert "Not run here (no `cifar10_densenet121.json`" in readme
  assert "rank agreement (Spearman)" in readme and "IR (global), listed by the paper" in readme
  (tmp_path / "notes.md").write_text("## Findings\n\nhand-written")
  mod.write_tables(tmp_path)
  assert (tmp_path / "README.md").read_text().endswith("hand-written\n")


def test_utility_table_ranks():
  mod = load_script("utility_table")
  assert mod._ranks([3.0, 1.0, 2.0, 1.0]).tolist() == [4.0, 1.5, 3.0, 1.5]


def test_gain_classes_and_figures(tmp_path):
  import jax

  mod = load_script("utility_gain_patching")
  u = mod.misaligned(jax.random.key(0), 16, 8, num_groups=2)
  gains = -np.asarray(u.params)  # (16, 8, 8) gain matrices
  assert np.all(np.diagonal(gains, axis1=1, axis2=2) == 1)
  assert set(np.unique(gains.astype(np.float64)).round(6)) <= {0.0, 0.2, 1.0}
  a = -np.asarray(mod.aligned(jax.random.key(1), 4, 8).params)
  off = a[:, ~np.eye(8, dtype=bool)]
  assert off.min() >= 0 and off.max() <= 0.1
  errs = np.abs(np.random.default_rng(0).normal(size=(4, 8))) / 10
  fam = {
    "test_per_iteration": [mod.summary(e) for e in errs],
    "test_errors_per_iteration": errs.tolist(),
    "baselines": {b: mod.summary(errs[0]) for b in mod.BASELINES},
    "baseline_errors": {b: errs[0].tolist() for b in mod.BASELINES},
  }
  mod.plot(
    {"setting": "s", "eval_utilities": 8, "families": {"aligned": fam, "misaligned": fam}},
    tmp_path,
  )
  assert (tmp_path / "fig2_s.png").stat().st_size > 10_000
  assert (tmp_path / "fig3_s.png").stat().st_size > 10_000
  fam.update(num_patches=3, fit_s=12.0, stop_reason="max_steps")
  meta = {"device": "cpu", "cpu_count": 2, "date": "2026-11-23T12:00:00"}
  mod.write_readme(
    {
      "setting": "s",
      "n_cal": 7,
      "n_test": 3,
      "C": 8,
      "steps": 3,
      "witnesses_per_step": 8,
      "eval_utilities": 8,
      "runtime_s": 60.0,
      "load_avg_at_end": [1.0, 1.0, 1.0],
      "meta": meta,
      "families": {"aligned": fam},
    },
    tmp_path,
  )
  readme = (tmp_path / "README_s.md").read_text()
  worst = errs[3].max() * 1e3
  assert f"| aligned | patching, iteration 3 | {worst:.2f} |" in readme
  assert "| aligned | Dirichlet |" in readme and "3 patches in 12 s" in readme
