"""The two experiment scripts end to end in their --quick modes, the
four-predictor closed forms against exact enumeration, and the name of the
peers benchmark's result file for a partial run."""

import importlib.util
import itertools
import json
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def load_script(name):
  spec = importlib.util.spec_from_file_location(f"_exp_{name}", ROOT / "experiments" / f"{name}.py")
  mod = importlib.util.module_from_spec(spec)
  sys.modules[spec.name] = mod  # dataclasses look their module up
  spec.loader.exec_module(mod)
  return mod


@pytest.fixture(scope="module")
def fp():
  return load_script("four_predictors")


def test_four_predictor_closed_forms_equal_exact_enumeration(fp):
  """E[error] over every (x, y) data set of size n, weighted by its probability."""
  sc = fp.Scenario("tiny", k=3, p=0.7, kappa=0.3, note="")
  n, bins = 5, np.array([1, 2, 5])
  eps = sc.eps(n)
  xs = np.array(list(itertools.product(range(sc.k), repeat=n)))  # (k^n, n)
  hits = np.array(list(itertools.product((1, 0), repeat=n)))  # y = x where 1
  X = np.repeat(xs, len(hits), axis=0)
  H = np.tile(hits, (len(xs), 1))
  Y = np.where(H == 1, X, (X + 1) % sc.k)
  w = np.prod(np.where(H == 1, sc.p, 1 - sc.p), axis=1) / sc.k**n  # sums to 1

  def errs(x, y):
    P = fp.predictions(x, sc.k, sc.p, eps, eps)
    return jax.vmap(lambda q: fp.all_errors(q, y, bins))(P)  # (4, 5, M)

  E = np.asarray(jax.jit(jax.vmap(errs))(jnp.asarray(X), jnp.asarray(Y)), np.float64)
  exact = np.einsum("d,dpem->pem", w, E)
  for mi, m in enumerate(bins):
    cf = fp.closed_forms(sc, n, int(m))
    for pi, pred in enumerate(fp.PREDICTORS):
      for ei, met in enumerate(fp.METRICS):
        assert exact[pi, ei, mi] == pytest.approx(cf[pred][met], rel=2e-5, abs=1e-8), (pred, met, m)


def test_four_predictors_quick(fp, tmp_path):
  res = fp.main(["--quick", "--out", str(tmp_path)])
  saved = json.loads((tmp_path / "results.json").read_text())
  assert saved["summary"] == res["summary"]
  assert (tmp_path / "four_predictors.png").stat().st_size > 10_000
  assert "Monte Carlo vs closed form" in (tmp_path / "README.md").read_text()
  s = res["summary"]
  assert s["comparisons"] == 2 * 3 * 4 * 5
  # MC agrees with the closed forms (a 3-SE miss has 0.27 % chance each)
  assert s["beyond_3se"] <= 2 and s["max_abs_z"] < 4.5
  c = res["conclusions"]
  for met in ("conf_ece_fix", "conf_ece_qua", "conf_ce_qua"):  # not truthful
    assert not c["violation"][met]["truth_first_at_every_m"]
  for sc in ("violation", "flip"):
    for met in ("conf_ce_corr_qua", "lin_ce_cw_qua"):  # truthful
      assert c[sc][met]["truth_first_at_every_m"]
      assert not c[sc][met]["f3_beats_f2_at"]
  for met in ("conf_ece_qua", "conf_ce_qua"):
    assert c["flip"][met]["f2_vs_f3_flips_with_m"]


def test_a_quick_run_keeps_the_committed_results(fp, tmp_path, monkeypatch):
  """``--quick`` without ``--out`` writes ``four_predictors_quick/``: it once
  replaced the committed full-run results with the smoke test's."""
  monkeypatch.setattr(fp, "OUT", tmp_path / "four_predictors")
  fp.main(["--quick"])
  assert (tmp_path / "four_predictors_quick" / "results.json").is_file()
  assert not (tmp_path / "four_predictors").exists()


def test_binning_robustness_quick(tmp_path, cifar_dir):
  br = load_script("binning_robustness")
  res = br.main(["--quick", "--out", str(tmp_path)])
  assert [s["name"] for s in res["sets"]] == ["cifar_subset"]
  s = res["sets"][0]
  assert s["num_predictors"] == 4 and s["n_test"] == [1000]
  assert len(s["table"]) == 4 * 6
  rho = np.array([t["spearman"] for t in s["table"]])
  assert np.all(np.abs(rho) <= 1 + 1e-6) and np.all(np.isfinite([t["sd"] for t in s["table"]]))
  # the chain is a chain of the dominance order of the reported losses
  L = np.asarray(s["losses"])
  for a, b in zip(s["chain"][:-1], s["chain"][1:]):
    assert np.all(L[a] <= L[b]) and np.any(L[a] < L[b])
  errs = np.asarray(s["errors"])
  assert errs.shape == (4, 4, 3) and np.all(errs >= 0)
  for kind in ("trend", "dominance", "assumption"):
    assert (tmp_path / f"cifar_subset_{kind}.png").stat().st_size > 10_000
  assert "Table 1" in (tmp_path / "README.md").read_text()


def test_binning_robustness_stops_without_the_traces_it_was_asked_for(tmp_path, monkeypatch):
  """Without the Fashion-MNIST traces a run asking for their sets stops before
  any work and writes nothing: it used to print a line, run CIFAR only and
  exit 0, replacing the committed Table 1 with one lacking the columns that
  are comparable with the paper. Unknown set names stop it too."""
  br = load_script("binning_robustness")
  monkeypatch.setattr(br, "TRACES", tmp_path / "no_traces")
  out = tmp_path / "out"
  with pytest.raises(SystemExit, match="no Fashion-MNIST traces at .*fashion_mnist/traces.py"):
    br.main(["--sets", "fmnist_within", "--out", str(out)])
  # with every set (the default), before the CIFAR sets are loaded and fitted
  monkeypatch.setattr(br, "cifar_sets", lambda *a, **k: pytest.fail("CIFAR sets loaded"))
  with pytest.raises(SystemExit, match="no Fashion-MNIST traces"):
    br.main(["--out", str(out)])
  with pytest.raises(SystemExit, match="unknown --sets cifar_10: choose from cifar12,cifar10"):
    br.main(["--sets", "cifar_10", "--out", str(out)])
  assert not out.exists()
  # a set's resamples follow its name, not its position among the sets run
  assert len({br._set_key(name) for name in br.SETS}) == len(br.SETS)


def test_a_partial_peers_run_keeps_the_full_record():
  """``peers.py --part single`` (or ``measures``) writes a file of its own:
  it once replaced the committed ``peers.json`` with half of it."""
  peers = load_script("bench/peers")
  names = {
    (part, quick): peers.result_name(part, quick)
    for part in ("all", "single", "measures")
    for quick in (False, True)
  }
  assert names[("all", False)] == "peers"
  assert names[("all", True)] == "peers_quick"
  assert len(set(names.values())) == len(names)
