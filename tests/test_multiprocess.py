"""Two ``jax.distributed`` processes on 127.0.0.1, each with its own shard of the data.

Each process holds a different, differently sized part of the CIFAR-10
ResNet-110 test logits as host-local arrays (the normal multi-host layout)
and runs ``uc_sweep``, the streaming ``merge_across_processes`` (records of
the top label and of whole rows, in buffers of different capacities) and
the study call (one model; and two models of logits with utilities and a
decomposition), and the bare FixedBins, Scores and Records states merged
across processes; both must report the single-process result on the union.
With bad data in process 1's rows only (a NaN row, a row off the simplex,
a label C or -1), every process must raise the single-process ``ValueError``
of the union (naming the union's row), or give NaN under ``jax.jit``; a
process left waiting in a collective would hang until the timeout.
CPU collectives go through gloo; every process runs under a timeout and is
killed if the test fails; the port is taken free from the OS.
"""

import json
import pathlib
import socket
import subprocess
import sys

import jax
import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))  # --import-mode=importlib
from _cpu_devices import ROOT, cpu_devices_env
from conftest import load_cifar

import jaxcal
from jaxcal import metrics, scores, utility

WORKER = pathlib.Path(__file__).parent / "_multiprocess_worker.py"
TIMEOUT_S = 240
CUT = 300  # the union's rows [:CUT] on process 0, the rest on process 1


def _free_port() -> int:
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _run_two(data_path, tmp_path, devices_per_process, *extra):
  env = cpu_devices_env(devices_per_process)
  port = str(_free_port())
  outs = [tmp_path / f"out{i}.json" for i in range(2)]
  procs = [
    subprocess.Popen(
      [sys.executable, str(WORKER), str(i), port, str(data_path), str(outs[i]), *extra],
      env=env,
      cwd=ROOT,
      stdout=subprocess.PIPE,
      stderr=subprocess.STDOUT,
      text=True,
    )
    for i in range(2)
  ]
  logs = []
  try:
    for pr in procs:
      logs.append(pr.communicate(timeout=TIMEOUT_S)[0])
  finally:
    for pr in procs:
      if pr.poll() is None:
        pr.kill()
        pr.wait()
  for pr, log in zip(procs, logs):
    assert pr.returncode == 0, log[-4000:]
  return [json.loads(o.read_text()) for o in outs]


@pytest.fixture(scope="module")
def union(tmp_path_factory):
  z, y = load_cifar("cifar10_resnet110")
  p = np.asarray(jax.nn.softmax(z[:700].astype(np.float32)), np.float32)
  y = y[:700].astype(np.int32)
  path = tmp_path_factory.mktemp("mp") / "data.npz"
  np.savez(path, probs=p, labels=y, cut=np.int32(CUT))  # shards of 300 and 400 rows
  return p, y, path


@pytest.mark.parametrize(
  "devices_per_process", [2, pytest.param(1, marks=pytest.mark.slow)]
)  # two devices per process is the general case; one is its slow twin
def test_two_processes_give_the_union_result(union, tmp_path, devices_per_process):
  p, y, path = union
  results = _run_two(path, tmp_path, devices_per_process)
  us = utility.sample_linear(jax.random.key(0), 10, p.shape[1])
  want_uc = np.asarray(utility.uc_sweep(p, y, us, chunk_size=3, devices=jax.devices()[:1]))
  keep = np.arange(p.shape[0]) % 3 != 0  # the workers' mask of the union's rows
  want_where = utility.uc_sweep(p[keep], y[keep], us, chunk_size=3, devices=jax.devices()[:1])
  logits = np.log(np.maximum(p, 1e-30))
  want_two = jaxcal.evaluate(
    np.stack([logits, 0.5 * logits]),
    np.stack([y, y]),
    ["conf_ece", "classwise_ce", "decompose"],
    num_bins=np.array([5, 15]),
    utilities=us,
    from_logits=True,
  ).to_dict()["values"]
  for r in results:
    assert r["devices"] == 2 * devices_per_process
    # the masked (padded) union: float rounding of 1/n only
    np.testing.assert_allclose(r["uc_sweep"], want_uc, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(r["uc_sweep_where"], want_where, rtol=1e-6, atol=1e-7)
    s = r["streaming"]
    assert r["streaming_merge_again"] == 0
    bins = np.array([5, 15])
    np.testing.assert_allclose(s["conf_ece"], metrics.conf_ece(p, y, bins), atol=1e-6)
    np.testing.assert_allclose(s["classwise_ece"], metrics.classwise_ece(p, y, bins), atol=1e-6)
    np.testing.assert_allclose(s["conf_ce_corr"], metrics.conf_ce_corr(p, y, bins), rtol=1e-6)
    np.testing.assert_allclose(s["brier"], scores.brier(p, y), rtol=1e-6)
    np.testing.assert_allclose(r["classwise_ce"], metrics.classwise_ce(p, y, bins), rtol=1e-5)
    ev = r["evaluate"]["values"]  # one model, its rows spread over the two processes
    np.testing.assert_allclose(ev["conf_ece"][0], metrics.conf_ece(p, y, bins), atol=1e-6)
    np.testing.assert_allclose(ev["conf_ce_corr"][0], metrics.conf_ce_corr(p, y, bins), atol=1e-6)
    np.testing.assert_allclose(ev["brier"][0], scores.brier(p, y), rtol=1e-6)
    # two models of logits with utilities and a decomposition, and the bare states
    for k, v in r["evaluate_two"].items():
      np.testing.assert_allclose(v, want_two[k], rtol=1e-5, atol=1e-6, err_msg=k)
    for k in ("conf_ece", "classwise_ece", "ecce"):
      np.testing.assert_allclose(r["fixed_bins"][k], getattr(metrics, k)(p, y, bins), atol=1e-6)
    fixed_corr = metrics.conf_ce_corr(p, y, bins, binning="fixed")
    np.testing.assert_allclose(r["fixed_bins"]["conf_ce_corr"], fixed_corr, rtol=1e-5)
    np.testing.assert_allclose(r["scores"]["brier"], scores.brier(p, y), rtol=1e-6)
    np.testing.assert_allclose(r["records"]["conf_ce_corr"], metrics.conf_ce_corr(p, y), rtol=1e-5)
    first = np.r_[0:200, 300:500]  # the global rows: 200 of each shard (cut at 300)
    want_brier = float(scores.brier(p[first], y[first]))
    np.testing.assert_allclose(r["global_scores"]["brier"], want_brier, rtol=1e-6)
    want_glob = utility.uc_sweep(p[first], y[first], us, chunk_size=3, devices=jax.devices()[:1])
    np.testing.assert_allclose(r["uc_sweep_jit_global"], want_glob, rtol=1e-6, atol=1e-7)
    assert np.isnan(r["uc_sweep_jit_local"]).all()  # was the two processes' values, mixed
    mixed = r["mixed"]  # global and host-local batches in one state: refused on both processes
    assert "holds global arrays" in mixed["global_then_local"], mixed
    assert "host-local rows this state has seen" in mixed["local_then_global"], mixed
    assert "must be the same on every process" in mixed["local_then_global"], mixed
    assert "a state of global arrays" in mixed["jit_merge"], mixed
    assert "must be the same on every process" in mixed["jit_merge"], mixed
    assert (
      "list or dict of models is not supported, of host-local or global"
      in (r["evaluate_list_global"])
    )
    for msg, name in zip(r["host_read_global"], ("predictions", "losses")):
      assert f"{name} is a jax.Array spanning several processes" in msg, msg
    rows = np.r_[first, 200:220, 500:520]  # the global rows and both processes' local ones
    want_both = float(scores.brier(p[rows], y[rows]))
    np.testing.assert_allclose(r["merged_then_global"], want_both, rtol=1e-6)
  assert results[0]["uc_sweep"] == results[1]["uc_sweep"]  # identical on both hosts
  assert results[0]["global_scores"] == results[1]["global_scores"]


BAD_CASES = ("nan", "off_simplex", "label_c", "label_minus_1")


@pytest.fixture(scope="module")
def bad_union(tmp_path_factory):
  """Synthetic union data (no data set needed) and its bad versions: the bad row is process 1's."""
  rng = np.random.default_rng(0)
  n, c, cut = 700, 10, 300
  z = rng.normal(size=(n, c)) * 2
  p = np.exp(z - z.max(axis=1, keepdims=True))
  p = (p / p.sum(axis=1, keepdims=True)).astype(np.float32)
  y = rng.integers(0, c, n).astype(np.int32)
  row = cut + 50  # the union's row; process 1's row 50
  data = {"good": (p, y)}
  for case in BAD_CASES:
    pb, yb = p.copy(), y.copy()
    if case == "nan":
      pb[row, 3] = np.nan
    elif case == "off_simplex":
      pb[row] *= 1.5
    else:
      yb[row] = c if case == "label_c" else -1
    data[case] = (pb, yb)
  arrays = {f"probs_{k}": v[0] for k, v in data.items()}
  arrays.update({f"labels_{k}": v[1] for k, v in data.items()})
  path = tmp_path_factory.mktemp("mp_bad") / "bad.npz"
  np.savez(path, cut=np.int32(cut), cases=np.array(list(data)), **arrays)
  return data, cut, row, path


def _single(f):
  """``f()`` on one process: ``("value", array)`` or ``("error", message)``."""
  try:
    return "value", np.asarray(f())
  except ValueError as e:
    return "error", str(e)


def test_two_processes_bad_rows_raise_the_same_error(bad_union, tmp_path):
  data, cut, row, path = bad_union
  results = _run_two(path, tmp_path, 2, "bad")
  us = utility.sample_linear(jax.random.key(0), 10, 10)
  dev = jax.devices()[:1]
  mets = {
    "conf_ece": lambda a, b: metrics.conf_ece(a, b, 15),
    "classwise_ce": lambda a, b: metrics.classwise_ce(a, b, 15),
    "brier": scores.brier,
  }
  for case, (p, y) in data.items():
    pg, yg = p[: 2 * cut], y[: 2 * cut]  # the global arrays: equal shards
    want = {k: _single(lambda f=f: f(pg, yg)) for k, f in mets.items()}
    want["uc_sweep"] = _single(lambda: utility.uc_sweep(p, y, us, chunk_size=5, devices=dev))
    want["evaluate"] = _single(
      lambda: jaxcal.evaluate(p[None], y[None], ["conf_ece", "brier"], num_bins=15)["conf_ece"]
    )
    for r in results:
      got = r[case]
      for k, (kind, w) in want.items():
        if case == "good":
          assert kind == "value", (k, w)
          assert "value" in got[k], (case, k, r["process"], got[k])
          np.testing.assert_allclose(got[k]["value"], w, rtol=1e-5, atol=1e-6, err_msg=k)
        else:
          # the single-process message on the union: same words, the union's row
          assert kind == "error" and f"{row}" in w, (case, k, w)
          assert got[k] == {"error": w}, (case, k, r["process"])
      for k in mets:
        v = np.asarray(got[k + "_jit"]["value"], float)
        assert np.isnan(v).all() != (case == "good"), (case, k, r["process"], v)
      for k, v in got["streaming_jit"].items():  # merged: poisoned on every process, or the union's
        assert np.isnan(v).all() != (case == "good"), (case, k, r["process"], v)
    if case == "good":
      s = results[0][case]["streaming_jit"]
      np.testing.assert_allclose(
        s["conf_ece"], metrics.conf_ece(p, y, np.array([5, 15])), atol=1e-6
      )
      np.testing.assert_allclose(s["brier"], scores.brier(p, y), rtol=1e-6)
  assert results[0] == {**results[1], "process": 0}  # identical on both processes


def test_input_shaped_differently_on_one_process_raises_on_every_process(union, tmp_path):
  # process 1 alone passes C - 1 classes, one label too few, two models or a
  # state made with other bin counts: each raised on process 1 only (or not at
  # all) while process 0 waited in the collective; now both raise one error.
  # A process with no rows is no error; no rows on any process is.
  p, y, path = union
  results = _run_two(path, tmp_path, 2, "mismatch")
  want = {
    ("classes", "uc_sweep"): "the class count C of probs must be the same on every process, "
    "got 10 on process 0 and 9 on process 1",
    ("classes", "evaluate"): "the class count C of predictions must be the same on every "
    "process, got 10 on process 0 and 9 on process 1",
    ("labels_length", "uc_sweep"): "on process 1: labels has 399 entries but the predictions "
    "have n = 400 rows",
    ("labels_length", "evaluate"): "on process 1: labels must have shape (1, 400) for "
    "predictions of shape (1, 400, 10)",
    ("models", "evaluate"): "the number of models M must be the same on every process, got 1 "
    "on process 0 and 2 on process 1",
    ("state", "merge"): "the state (made with the same arguments, capacity aside) must be the "
    "same on every process, got a Calibration for C = 10 (layout",
    # other arguments: utilities drawn per process gave a vector mixed from both, other
    # bin counts process 0's number on both, other metric lists a hang
    ("arguments", "uc_sweep"): "utilities (kind, values) must be the same on every process",
    ("arguments", "evaluate_utilities"): "utilities 'lin' (C = 10) must be the same on every",
    ("arguments", "evaluate_bins"): "num_bins must be the same on every process, got (): [15] "
    "on process 0 and (): [20] on process 1",
    ("arguments", "evaluate_metrics"): "metrics must be the same on every process, got "
    "['conf_ece'] on process 0 and ['conf_ece', 'brier'] on process 1",
    # on global arrays (found by a review helper): 15 and 16 bins gave one mixed number
    # without a word, 15 and 20 aborted, "fixed" and "quantile" hung
    ("global", "num_bins"): "conf_ece's num_bins must be the same on every process, got 15 "
    "on process 0 and 16 on process 1",
    ("global", "binning"): "conf_ece's binning must be the same on every process, got fixed "
    "on process 0 and quantile on process 1",
    ("global", "uc_sweep"): "utilities (kind, values) must be the same on every process",
    ("uc_devices", "uc_sweep"): "devices (in order) must be the same on every process",
    ("uc_where", "uc_sweep"): "whether where is given must be the same on every process",
    ("uc_logits", "uc_sweep"): "every process must make the same call (every argument besides "
    "the data the same), but process 0 compares ['the class count C of probs'",
    ("mesh", "evaluate"): "mesh must be the same on every process",
    ("big", "differ"): "every argument besides the data must be the same on every process, "
    "but process 1 differs from process 0 (compared by a digest",
    ("global", "closure"): "skce's kernel must be the same on every process, got ",
  }
  for (case, call), text in want.items():
    got = [r[case][call] for r in results]
    assert got[0] == got[1], (case, call, got)  # the same error on both processes
    assert "error" in got[0] and got[0]["error"].startswith(text), (case, call, got[0])
  for r in results:  # records of different capacities still merge
    assert r["capacity"]["merge"] == {"value": None}, r["capacity"]
    assert r["big"]["equal"] == {"value": None}, r["big"]
  # the same arguments on global arrays: the union's value, on both processes
  half = min(CUT, p.shape[0] - CUT) // 4 * 4
  union = (
    np.concatenate([p[:half], p[CUT : CUT + half]]),
    np.concatenate([y[:half], y[CUT : CUT + half]]),
  )
  for r in results:
    np.testing.assert_allclose(
      r["global"]["same"]["value"], metrics.classwise_ce(*union, 15), rtol=1e-5
    )
    np.testing.assert_allclose(r["global"]["default"]["value"], metrics.conf_ece(*union), rtol=1e-5)
    want = metrics.skce(*union, lambda s: jax.numpy.exp(-s))
    np.testing.assert_allclose(r["global"]["partial"]["value"], want, rtol=1e-4, atol=1e-7)
  # process 1 holds no rows: both give the result of process 0's rows alone
  # (this refused "on process 1: probs is empty" before); no rows anywhere raises
  p0, y0 = p[:CUT], y[:CUT]  # process 0's rows
  us = utility.sample_linear(jax.random.key(0), 10, p.shape[1])
  dev = jax.devices()[:1]
  want_uc = np.asarray(utility.uc_sweep(p0, y0, us, chunk_size=5, devices=dev))
  want_ece = np.asarray(metrics.conf_ece(p0, y0, 15))
  for r in results:
    got = r["empty_shard"]
    assert all("value" in v for v in got.values()), (r["process"], got)
    np.testing.assert_allclose(got["uc_sweep"]["value"], want_uc, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(got["evaluate"]["value"], [want_ece], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(got["streaming"]["value"], want_ece, rtol=1e-6, atol=1e-7)
  for call, name in (("uc_sweep", "probs"), ("evaluate", "predictions")):
    got = [r["empty_union"][call] for r in results]
    assert (
      got[0]
      == got[1]
      == {
        "error": f"{name} is empty on every process (n = 0 samples in the union of 2 processes' rows)"
      }
    ), (call, got)
