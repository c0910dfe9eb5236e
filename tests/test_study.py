"""jaxcal.evaluate against a per-model loop of the one-shot public functions.

Every number of a study must equal the one-shot metric on that model alone
(1e-6, the metric tolerance); models of different sizes share one compiled
program through size buckets and sample masks, and a padded model equals the
unpadded one. Sharded runs (4 and 8 devices) are in tests/test_sharding.py,
two processes in tests/test_multiprocess.py.
"""

import json
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))  # --import-mode=importlib
from conftest import _NEW_PROGRAM_EVENTS, load_cifar, new_programs, no_new_programs

import jaxcal
from jaxcal import metrics, scores, study, utility
from jaxcal._src import study as study_src
from jaxcal._src import validation as V

ATOL = 1e-6
BINS = np.array([2, 5, 15, 40])
BINNED = ["conf_ece", "conf_ce", "conf_ce_corr", "classwise_ce", "classwise_ece", "ecce"]


@pytest.fixture(scope="module")
def logits():
  """Three real CIFAR-10 models, 400 test samples each (logits, labels)."""
  zs, ys = [], []
  for name in ("cifar10_resnet110", "cifar10_densenet121", "focal_cifar10_resnet50"):
    z, y = load_cifar(name)
    zs.append(z[:400])
    ys.append(y[:400])
  return np.stack(zs), np.stack(ys).astype(np.int32)


def _loop(p, y, name, bins):
  if name == "ecce":
    return metrics.ecce(p, y, bins)
  return getattr(metrics, name)(p, y, bins)


def test_stack_equals_per_model_loop(logits):
  z, y = logits
  us = utility.sample_rank(jax.random.key(1), 12, 10)
  res = jaxcal.evaluate(
    z,
    y,
    BINNED + ["conf_ece:quantile", "brier", "log_loss", "decompose", "uc_tce", "uc_comb"],
    num_bins=BINS,
    utilities={"rank": us},
    from_logits=True,
    names=["a", "b", "c"],
  )
  assert res.models == ("a", "b", "c")
  p = np.asarray(jax.nn.softmax(jnp.asarray(z)))
  for i in range(3):
    for name in BINNED:
      np.testing.assert_allclose(
        res[name][i], _loop(p[i], y[i], name, BINS), atol=ATOL, err_msg=name
      )
    np.testing.assert_allclose(
      res["conf_ece:quantile"][i], metrics.conf_ece(p[i], y[i], BINS, "quantile"), atol=ATOL
    )
    np.testing.assert_allclose(res["brier"][i], scores.brier(p[i], y[i]), atol=ATOL)
    np.testing.assert_allclose(res["log_loss"][i], scores.log_loss(p[i], y[i]), rtol=1e-6)
    np.testing.assert_allclose(res["decompose"][i], scores.decompose(p[i], y[i]), atol=ATOL)
    np.testing.assert_allclose(res["uc_tce"][i], utility.uc_class(p[i], y[i], "tce"), atol=ATOL)
    np.testing.assert_allclose(res["uc_comb"][i], utility.uc_class(p[i], y[i], "comb"), atol=ATOL)
    np.testing.assert_allclose(res["uc:rank"][i], utility.uc_sweep(p[i], y[i], us), atol=ATOL)
  assert res["conf_ece"].shape == (3, 4) and res.axes["conf_ece"] == ("model", "num_bins")
  assert res["decompose"].shape == (3, 4) and res.coords["component"] == [
    "score",
    "mcb",
    "dsc",
    "unc",
  ]
  assert res["uc:rank"].shape == (3, 12) and res.axes["uc:rank"] == ("model", "utility")
  assert res["brier"].shape == (3,)


def test_utility_batches_of_different_sizes_keep_their_coordinates(logits):
  """Two batches of 6 and 3 utilities: ``to_table`` raised IndexError (coords of the last only)."""
  z, y = logits
  us = {
    "big": utility.sample_linear(jax.random.key(0), 6, 10),
    "small": utility.sample_rank(jax.random.key(1), 3, 10),
  }
  res = study.evaluate(z[:2, :200], y[:2, :200], ["brier"], utilities=us, from_logits=True)
  assert res.coords["utility"] == list(range(6))
  rows = res.to_table()
  assert len(rows) == 2 + 2 * 6 + 2 * 3
  small = [r for r in rows if r["metric"] == "uc:small"]
  assert [r["utility"] for r in small] == [0, 1, 2] * 2
  assert [r["value"] for r in small] == res["uc:small"].ravel().tolist()


def test_models_of_different_size_and_class_count_share_programs(logits):
  """A list of models: sizes 230/256 share one bucket (256), C = 10 and C = 100 two groups."""
  z, y = logits
  z100, y100 = load_cifar("cifar100_resnet110")
  models = {
    "r110_230": (z[0, :230], y[0, :230]),
    "c100": (z100[:300], y100[:300]),
    "f50_256": (z[2, :256], y[2, :256]),
  }
  xs = {k: v[0] for k, v in models.items()}
  ys = {k: v[1] for k, v in models.items()}
  lin = {"lin": lambda c: utility.sample_linear(jax.random.key(2), 8, c)}
  mets = ["conf_ce_corr", "classwise_ece", "brier", "decompose:normalized", "uc_cwe"]
  res = study.evaluate(xs, ys, mets, num_bins=BINS, utilities=lin, from_logits=True)
  assert res.models == tuple(models)
  progs = res.info["programs"]
  assert len(progs) == 2  # one per class count: the two C = 10 models share a bucket
  assert sorted(p["rows"] for p in progs) == [256, 320]
  for i, (name, (zz, yy)) in enumerate(models.items()):
    p = np.asarray(jax.nn.softmax(jnp.asarray(zz)))
    for mname in ("conf_ce_corr", "classwise_ece"):
      np.testing.assert_allclose(
        res[mname][i], _loop(p, yy, mname, BINS), atol=ATOL, err_msg=f"{name} {mname}"
      )
    np.testing.assert_allclose(res["brier"][i], scores.brier(p, yy), atol=ATOL)
    np.testing.assert_allclose(
      res["decompose:normalized"][i], scores.decompose(p, yy, mode="normalized"), atol=ATOL
    )
    np.testing.assert_allclose(res["uc_cwe"][i], utility.uc_class(p, yy, "cwe"), atol=ATOL)
    us = lin["lin"](p.shape[1])
    np.testing.assert_allclose(res["uc:lin"][i], utility.uc_sweep(p, yy, us), atol=ATOL)


def test_a_model_of_the_bucket_size_shares_the_buckets_program(logits):
  """A list whose models fill their bucket exactly (n = 256, 320, 1024: sizes users sweep)
  went without a mask and compiled a second study program for the bucket (1.6-7.7 s);
  now every list is masked and the bucket's program is reused."""
  z, y = logits
  jaxcal.evaluate([z[0, :250]], [y[0, :250]], ["conf_ece", "brier"], from_logits=True)
  with new_programs() as events:
    res = jaxcal.evaluate([z[0, :256]], [y[0, :256]], ["conf_ece", "brier"], from_logits=True)
  assert _NEW_PROGRAM_EVENTS[1] not in events
  p = np.asarray(jax.nn.softmax(jnp.asarray(z[0, :256])))
  np.testing.assert_allclose(res["conf_ece"][0], metrics.conf_ece(p, y[0, :256]), atol=ATOL)
  np.testing.assert_allclose(res["brier"][0], scores.brier(p, y[0, :256]), atol=ATOL)


def test_padded_model_equals_unpadded(logits):
  """The same model alone (no padding) and in a bucket with a larger one (padded, masked)."""
  z, y = logits
  mets = ["conf_ece", "conf_ce_corr", "classwise_ce", "ecce", "spherical", "decompose", "uc_topk"]
  alone = jaxcal.evaluate([z[0, :200]], [y[0, :200]], mets, num_bins=BINS, from_logits=True)
  assert alone.info["programs"][0]["rows"] == 224  # bucketed and padded even alone
  exact = jaxcal.evaluate(z[1:2, :224], y[1:2, :224], mets, num_bins=BINS, from_logits=True)
  both = jaxcal.evaluate(
    [z[0, :200], z[1, :224]], [y[0, :200], y[1, :224]], mets, num_bins=BINS, from_logits=True
  )
  # device arrays are padded and stacked on the device: the same numbers
  on_device = jaxcal.evaluate(
    [jnp.asarray(z[0, :200]), jnp.asarray(z[1, :224])],
    [jnp.asarray(y[0, :200]), jnp.asarray(y[1, :224])],
    mets,
    num_bins=BINS,
    from_logits=True,
  )
  for k in mets:
    np.testing.assert_allclose(both[k][0], alone[k][0], atol=ATOL, err_msg=k)
    np.testing.assert_allclose(both[k][1], exact[k][0], atol=ATOL, err_msg=k)
    np.testing.assert_array_equal(on_device[k], both[k], err_msg=k)


def test_probabilities_of_different_size_and_shared_labels(logits):
  """Probability models padded with valid (uniform) masked rows; one label array shared."""
  z, y = logits
  p = np.asarray(jax.nn.softmax(jnp.asarray(z[:2, :20])))
  yy = y[:2, :20]
  res = jaxcal.evaluate([p[0], p[1, :12]], [yy[0], yy[1, :12]], ["brier"])
  assert [g["rows"] for g in res.info["programs"]] == [20]  # model 1: 8 padding rows
  for i, k in ((0, 20), (1, 12)):
    np.testing.assert_allclose(res["brier"][i], scores.brier(p[i, :k], yy[i, :k]), atol=ATOL)
  # labels (n,) for every model: of a list and of a stack (one program, no padding)
  for shared in (
    jaxcal.evaluate([p[0], p[1]], yy[0], ["brier"]),
    jaxcal.evaluate(p, yy[0], ["brier"]),
  ):
    for i in range(2):
      np.testing.assert_allclose(shared["brier"][i], scores.brier(p[i], yy[0]), atol=ATOL)


def test_integer_bool_and_half_predictions_compute_as_the_one_shot_functions():
  """evaluate ran its cores on the caller's dtype: an always-right int32 one-hot
  model had ConfECE 1 (every confidence binned as 0), bool raised a TypeError,
  float16 gave float16 numbers; and int rows of 1/C padding (0) failed the check."""
  y0, y1 = np.arange(64) % 3, np.arange(40) % 3
  onehot = [np.eye(3, dtype=np.int32)[y0], np.eye(3, dtype=np.int32)[y1]]
  names = ["conf_ece", "conf_ce_corr", "brier", "confidence_loss"]
  for ps in (onehot, [a.astype(bool) for a in onehot], [jnp.asarray(a) for a in onehot]):
    res = jaxcal.evaluate(ps, [y0, y1], names, num_bins=5)  # two sizes: padding
    for name in names:
      np.testing.assert_array_equal(res[name], [0.0, 0.0])
  rng = np.random.default_rng(10)
  z = rng.normal(size=(2, 64, 3)) * 2
  p16 = np.asarray(jax.nn.softmax(jnp.asarray(z, jnp.float32))).astype(np.float16)
  y = rng.integers(0, 3, (2, 64))
  for ps in (p16, [p16[0], p16[1, :40]]):
    res = jaxcal.evaluate(ps, [y[0], y[1, : len(ps[1])]], ["brier", "decompose", "conf_ece"])
    assert res["brier"].dtype == np.float32
    for i in range(2):
      k = len(ps[i])
      want = scores.brier(p16[i, :k], y[i, :k])
      np.testing.assert_allclose(res["brier"][i], want, rtol=1e-6)
      np.testing.assert_allclose(
        res["conf_ece"][i], metrics.conf_ece(p16[i, :k], y[i, :k]), atol=ATOL
      )
      dec = scores.decompose(p16[i, :k], y[i, :k])
      np.testing.assert_allclose(res["decompose"][i, 0], dec.score, rtol=1e-6)


def test_float_and_bool_labels_and_a_float64_neighbour_change_nothing(logits):
  """Labels are validated integral, then computed on as int32 (float and bool labels
  failed in the scores' gathers); under x64 a float32 model listed with a float64
  one is computed in float32 as its own call is (binned in float64, the float32
  vote ensemble below read ConfECE(fix;5) 0.0107 for 0.0127)."""
  z, y = logits
  names = ["conf_ece", "classwise_ece", "brier", "log_loss", "decompose"]
  p = np.asarray(jax.nn.softmax(z[0, :300]))
  yy = y[0, :300]
  want = jaxcal.evaluate([p], [yy], names)
  for labels in (yy.astype(np.float32), yy.astype(np.float64)):
    got = jaxcal.evaluate([p, p[:200]], [labels, labels[:200]], names)
    for name in names:
      np.testing.assert_array_equal(got[name][0], want[name][0], err_msg=name)
  yb = (yy == 3).astype(bool)
  p2 = np.stack([p[:, 3], 1 - p[:, 3]], 1)[:, ::-1].copy()  # class 1 = "is 3"
  got = jaxcal.evaluate(p2[None], yb[None], ["brier", "decompose"])
  np.testing.assert_allclose(got["brier"][0], scores.brier(p2, yb.astype(int)), rtol=1e-6)
  # confidence 0.6 (float32) lies on an edge of 5 fixed bins: ceil(5 s)
  # rounds to it in float32, past it (into the bin of the 0.7s) in float64
  rng = np.random.default_rng(3)
  conf = np.where(rng.random(300) < 0.5, 0.6, 0.7).astype(np.float32)
  top = np.where(conf < 0.65, yy, (yy + 1) % 10)  # the 0.6s right, the 0.7s wrong
  edge = np.zeros((300, 10), np.float32)
  edge[np.arange(300), top] = conf
  edge[np.arange(300), (top + 1) % 10] = 1 - conf
  with jax.enable_x64(True):
    alone = np.asarray(metrics.conf_ece(edge, yy, np.array([5, 15])))
    assert alone[0] != np.asarray(metrics.conf_ece(edge.astype(np.float64), yy, 5))
    other = np.asarray(jax.nn.softmax(z[1, :300].astype(np.float64)))
    got = jaxcal.evaluate([edge, other], [yy, yy], ["conf_ece"], num_bins=np.array([5, 15]))
    np.testing.assert_array_equal(got["conf_ece"][0], alone)


def test_log_loss_from_logits_is_the_one_shot_functions(logits):
  """From logits the log loss is computed from them: the log of the float32 softmax
  read 1.0729e-6 for a near-perfect model's 1.0128e-6."""
  z, y = logits
  zz = np.zeros((2, 300, 10), np.float32)
  zz[0, np.arange(300), y[0, :300]] = 16.0  # every label 16 above the rest
  zz[1] = z[1, :300]
  got = jaxcal.evaluate(zz, y[:2, :300], ["log_loss"], from_logits=True)["log_loss"]
  for i in range(2):
    want = scores.log_loss(zz[i], y[i, :300], from_logits=True)
    np.testing.assert_allclose(got[i], want, rtol=1e-6)


def test_models_of_different_dtypes_are_each_checked_at_their_own_tolerance():
  """A bfloat16 softmax (rows off by up to 5e-3, within bfloat16's 1.6e-2) listed with a
  float32 model of the same C was stacked as float32 and refused at float32's 1e-3."""
  rng = np.random.default_rng(7)
  n, c = 200, 10
  z = rng.normal(size=(n, c)).astype(np.float32) * 3
  pb = jax.nn.softmax(jnp.asarray(z, jnp.bfloat16), axis=-1)
  assert float(jnp.max(jnp.abs(pb.astype(jnp.float32).sum(1) - 1))) > 2e-3
  pf = np.asarray(jax.nn.softmax(z))
  y = rng.integers(0, c, n)
  onehot = np.eye(c, dtype=np.int32)[y[:120]]  # int32 with bfloat16: no bfloat16 stack
  names = ["conf_ece", "classwise_ece", "brier"]
  cases = (
    [pb, pf],  # one stack
    [pf[:150], pb],  # two sizes (padding), the float32 model first
    [np.asarray(pb), pf, onehot],  # host arrays (numpy cannot promote int32 with bfloat16)
  )
  for ps in cases:
    ys = [y[: len(p)] for p in ps]
    res = jaxcal.evaluate(ps, ys, names, num_bins=np.array([5, 15]))
    for i, (p, yi) in enumerate(zip(ps, ys)):
      for name in names[:2]:
        want = getattr(metrics, name)(p, yi, np.array([5, 15]))
        np.testing.assert_allclose(res[name][i], want, atol=ATOL, err_msg=f"{name} {i}")
      np.testing.assert_allclose(res["brier"][i], scores.brier(p, yi), rtol=1e-6)
  # each model still at its own tolerance: float32 rows 2e-3 off are refused next to
  # bfloat16 (not accepted at its 1.6e-2), and the first bad model in order is named
  off = pf * np.float32(1.002)
  for ps, bad in (([pb, off], 1), ([off, pb * 1.05], 0), ([pb, off, pb * 1.05], 1)):
    with pytest.raises(ValueError, match=f"model 'model_{bad}': rows of probs must sum to 1"):
      jaxcal.evaluate(ps, [y] * len(ps), ["brier"])
  with pytest.raises(ValueError, match=r"model 'model_1': probs .*\(tolerance 0\.0156"):
    jaxcal.evaluate([pf, pb * 1.05], [y, y], ["brier"])


def test_one_bin_count_is_recorded_and_summary_checks_it(logits):
  # summary(num_bins=20) of a study of 15 bins printed the 15-bin values, unlabelled
  z, y = logits
  res = jaxcal.evaluate(
    z[:2, :50], y[:2, :50], ["conf_ece", "brier"], num_bins=15, from_logits=True
  )
  assert res.info["num_bins"] == 15 and json.loads(res.to_json())["info"]["num_bins"] == 15
  head = res.summary().splitlines()[0]
  assert "conf_ece@15" in head and "brier@" not in head and res.summary(15) == res.summary()
  with pytest.raises(ValueError, match=r"num_bins = 20 was not evaluated; bin counts: \[15\]"):
    res.summary(20)


def test_new_bins_array_of_same_length_reuses_the_program(logits):
  """Bin arrays are arguments; the static bound is a power of two (9 and 12 -> 16)."""
  z, y = logits
  p = np.asarray(jax.nn.softmax(jnp.asarray(z[:2, :128])))
  yy = y[:2, :128]
  jaxcal.evaluate(p, yy, ["conf_ece", "classwise_ce"], num_bins=np.array([3, 9]))
  with new_programs() as events:
    res = jaxcal.evaluate(p, yy, ["conf_ece", "classwise_ce"], num_bins=np.array([4, 12]))
  assert _NEW_PROGRAM_EVENTS[1] not in events  # no compile (the bounds' check may trace)
  np.testing.assert_allclose(res["conf_ece"][1], metrics.conf_ece(p[1], yy[1], [4, 12]), atol=ATOL)
  # a power of two is its own bound (16, not 32: 9 ... 16 share one program)
  assert [V.bucket(m) for m in (1, 2, 3, 15, 16, 17)] == [1, 2, 4, 16, 16, 32]


def test_the_same_metrics_in_another_order_share_the_program(logits):
  # the program's key kept the caller's order: a reordered list compiled it again (1.4-1.8 s)
  z, y = logits
  p = np.asarray(jax.nn.softmax(jnp.asarray(z[:2, :128])))
  names = ["brier", "conf_ece", "classwise_ce"]
  first = jaxcal.evaluate(p, y[:2, :128], names, num_bins=15)
  with no_new_programs():
    again = jaxcal.evaluate(p, y[:2, :128], names[::-1], num_bins=15)
  assert list(again.values) == names[::-1]
  for k in names:
    np.testing.assert_array_equal(again.values[k], first.values[k])


def test_result_conversions(logits):
  z, y = logits
  res = jaxcal.evaluate(
    z[:2, :100], y[:2, :100], ["conf_ece", "brier", "decompose"], num_bins=[5, 15], from_logits=True
  )
  rows = res.to_table()
  assert len(rows) == 2 * 2 + 2 + 2 * 4
  assert rows[0] == {
    "model": "model_0",
    "metric": "conf_ece",
    "num_bins": 5,
    "value": pytest.approx(float(res["conf_ece"][0, 0])),
  }
  assert {r["component"] for r in rows if r["metric"] == "decompose"} == {
    "score",
    "mcb",
    "dsc",
    "unc",
  }
  d = json.loads(res.to_json())
  assert d["models"] == ["model_0", "model_1"]
  np.testing.assert_allclose(d["values"]["conf_ece"], res["conf_ece"])
  text = res.summary(15)
  assert "conf_ece@15" in text and "model_1" in text and "decompose mcb (Brier/C)" in text
  scalar = jaxcal.evaluate(z[:1, :100], y[:1, :100], ["conf_ece"], num_bins=15, from_logits=True)
  assert scalar["conf_ece"].shape == (1,) and scalar.axes["conf_ece"] == ("model",)
  # a 0-d array is one bin count too: no axis, the count in info (as evaluate's docstring says)
  zero_d = jaxcal.evaluate(
    z[:1, :100], y[:1, :100], ["conf_ece"], num_bins=np.array(15), from_logits=True
  )
  assert zero_d["conf_ece"].shape == (1,) and zero_d.axes["conf_ece"] == ("model",)
  assert zero_d.info["num_bins"] == 15 and "num_bins" not in zero_d.coords
  np.testing.assert_array_equal(zero_d["conf_ece"], scalar["conf_ece"])
  # a 2-D array of bin counts (the same program: two bin counts)
  kw = {"num_bins": np.array([[5], [15]]), "from_logits": True}
  grid = jaxcal.evaluate(z[:2, :100], y[:2, :100], ["conf_ece", "brier", "decompose"], **kw)
  assert grid.axes["conf_ece"] == ("model", "num_bins_0", "num_bins_1")
  np.testing.assert_array_equal(grid["conf_ece"], res["conf_ece"][:, :, None])
  assert grid.coords["num_bins"] == [5, 15] and grid.axes["brier"] == ("model",)
  assert grid.coords["num_bins_0"] == [0, 1] and grid.coords["num_bins_1"] == [0]
  rows = [r for r in grid.to_table() if r["metric"] == "conf_ece" and r["model"] == "model_1"]
  assert [(r["num_bins_0"], r["num_bins_1"], r["num_bins"]) for r in rows] == [
    (0, 0, 5),
    (1, 0, 15),
  ]
  assert [r["value"] for r in rows] == pytest.approx(res["conf_ece"][1].tolist())
  head, _, first, second = grid.summary(15).splitlines()  # the bin count 15's column
  assert head.split(" | ")[1] == "conf_ece@15"
  for line, v in zip((first, second), res["conf_ece"][:, 1]):
    assert line.split(" | ")[1] == f"{v:.6g}"


def test_summary_columns():
  """The summary's numbers: a bin count's column, UC's median and maximum, MCB and DSC."""
  res = study.StudyResult(
    models=("a", "b"),
    values={
      "conf_ece": np.array([[0.1, 0.2], [0.3, 0.4]]),
      "uc:lin": np.array([[0.1, 0.5, 0.2], [0.3, 0.3, 0.9]]),
      "decompose:log": np.array([[0.9, 0.25, 0.125, 0.775], [1.0, 0.5, 0.0625, 0.5625]]),
    },
    axes={
      "conf_ece": ("model", "num_bins"),
      "uc:lin": ("model", "utility"),
      "decompose:log": ("model", "component"),
    },
    coords={"num_bins": [5, 15], "utility": [0, 1, 2], "component": list(study_src._COMPONENTS)},
    info={},
  )
  for num_bins, j in ((None, 0), (5, 0), (15, 1)):
    lines = [line.strip("|").split("|") for line in res.summary(num_bins).splitlines()]
    head = [c.strip() for c in lines[0]]
    assert head == [
      "model",
      f"conf_ece@{(5, 15)[j]}",
      "uc:lin median",
      "uc:lin max",
      "decompose:log mcb",
      "decompose:log dsc",
    ]
    got = {r[0].strip(): [float(v) for v in r[1:]] for r in lines[2:]}
    assert got == {
      "a": [(0.1, 0.2)[j], 0.2, 0.5, 0.25, 0.125],
      "b": [(0.3, 0.4)[j], 0.3, 0.9, 0.5, 0.0625],
    }


def _two_bin_counts():
  return study.StudyResult(
    models=("a",),
    values={"conf_ece": np.array([[0.1, 0.2]])},
    axes={"conf_ece": ("model", "num_bins")},
    coords={"num_bins": [5, 10]},
    info={},
  )


@pytest.mark.parametrize(
  "call, exc, msg",
  [
    # an int was a file descriptor: to_json(1) wrote to stdout and closed it
    (lambda r: r.to_json(1), TypeError, r"path must be a str or os.PathLike .*got 1 \(int\)"),
    (lambda r: r.to_json(True), TypeError, r"path must be a str .*got True \(bool\)"),
    (lambda r: r.to_json(b"out.json"), TypeError, r"path must be a str .*\(bytes\)"),
    # '10' read "num_bins = 10 was not evaluated; bin counts: [5, 10]"
    (lambda r: r.summary("10"), ValueError, r"num_bins must be an integer >= 1 .*got '10'"),
    (lambda r: r.summary(True), ValueError, r"num_bins must be an integer >= 1, got True"),
    (lambda r: r.summary(np.array([5, 10])), ValueError, r"num_bins must be one bin count"),
    (lambda r: r.summary(7), ValueError, r"num_bins = 7 was not evaluated; bin counts: \[5, 10\]"),
    # JAX's raw ConcretizationTypeError
    (
      lambda r: jax.jit(lambda m: jnp.float32(len(r.summary(m))))(10),
      ValueError,
      r"num_bins of a summary must be a concrete bin count \(a Python int\), not a traced",
    ),
  ],
)
def test_study_result_bad_input(call, exc, msg, monkeypatch):
  def never(path, *args, **kwargs):  # (without the fix, to_json(1) would close this stdout)
    raise AssertionError(f"opened {path!r}")

  monkeypatch.setattr(study_src, "open", never, raising=False)
  with pytest.raises(exc, match=msg):
    call(_two_bin_counts())


def test_study_result_paths_and_bin_counts_that_work(tmp_path):
  res = _two_bin_counts()
  for path in (str(tmp_path / "a.json"), tmp_path / "b.json"):
    text = res.to_json(path)
    assert pathlib.Path(path).read_text() == text + "\n" and json.loads(text) == res.to_dict()
  assert (
    res.summary(10) == res.summary(np.int64(10)) == res.summary(10.0) == res.summary(np.array(10))
  )
  assert "conf_ece@10" in res.summary(10)


def test_evaluate_refuses_to_be_traced(logits):
  """Under jit it raised ConcretizationTypeError, under checked TracerBoolConversionError."""
  z, y = logits
  f = jax.jit(lambda a, b: study.evaluate(a, b, ["brier"], from_logits=True))
  with pytest.raises(ValueError, match="evaluate runs eagerly .* cannot be traced"):
    f(z[:, :50], y[:, :50])
  with pytest.raises(ValueError, match="evaluate runs eagerly"):
    jaxcal.checked(lambda a, b: study.evaluate(a, b, ["brier"], from_logits=True))(z, y)
  # inside a caller's jax.set_mesh too (its re-call outside the context ran first: JAX's
  # "set_mesh can only be used outside of jax.jit"); eagerly there it runs
  with jax.set_mesh(jax.make_mesh((1,), ("data",))):
    with pytest.raises(ValueError, match="evaluate runs eagerly .* cannot be traced"):
      f(z[:, :50], y[:, :50])
    got = study.evaluate(z[:, :50], y[:, :50], ["brier"], from_logits=True)["brier"]
  want = study.evaluate(z[:, :50], y[:, :50], ["brier"], from_logits=True)["brier"]
  np.testing.assert_array_equal(got, want)


def test_bad_inputs(logits):
  z, y = logits
  with pytest.raises(ValueError, match=r"predictions is empty: a stack of M = 0 models"):
    jaxcal.evaluate(z[:0], y[:1], ["brier"], from_logits=True)
  x, yy = z[:2, :50], y[:2, :50]
  with pytest.raises(ValueError, match="unknown metric 'ece'"):
    jaxcal.evaluate(x, yy, ["ece"], from_logits=True)
  with pytest.raises(ValueError, match="ecce uses fixed bins only"):
    jaxcal.evaluate(x, yy, ["ecce:quantile"], from_logits=True)
  with pytest.raises(ValueError, match="num_bins must be >= 1"):
    jaxcal.evaluate(x, yy, ["conf_ece"], num_bins=[0, 3], from_logits=True)
  with pytest.raises(ValueError, match="quantile binning with num_bins = 60.*model_0"):
    jaxcal.evaluate(x, yy, ["conf_ce_corr"], num_bins=[5, 60], from_logits=True)
  # the message names the models with fewer samples than bins, and only those
  with pytest.raises(ValueError, match="quantile binning") as err:
    jaxcal.evaluate(
      [x[0], x[1][:40]], [yy[0], yy[1][:40]], ["conf_ce_corr"], num_bins=[5, 50], from_logits=True
    )
  assert "['model_1']" in str(err.value), str(err.value)
  # as many bins as samples is allowed (one sample per bin)
  at_n = jaxcal.evaluate(x, yy, ["conf_ce_corr"], num_bins=[5, 50], from_logits=True)
  for i in range(2):
    want = metrics.conf_ce_corr(x[i], yy[i], np.array([5, 50]), from_logits=True)
    np.testing.assert_allclose(at_n["conf_ce_corr"][i], want, rtol=1e-5)
  with pytest.raises(ValueError, match=r"model 'model_0': probs must lie in \[0, 1\]"):
    jaxcal.evaluate(x, yy, ["brier"])  # logits passed as probabilities
  bad = np.array(x)
  bad[1, 3, 2] = np.nan
  with pytest.raises(ValueError, match=r"model 'b': logits contains non-finite values.* in 1 row"):
    jaxcal.evaluate(bad, yy, ["brier"], names=["a", "b"], from_logits=True)
  with pytest.raises(ValueError, match=r"labels must have shape \(2, 50\)"):
    jaxcal.evaluate(x, yy[:, :40], ["brier"], from_logits=True)
  with pytest.raises(ValueError, match="model 'model_0': labels must lie in"):
    jaxcal.evaluate(x, yy + 10, ["brier"], from_logits=True)
  with pytest.raises(ValueError, match="C = 5 classes but the predictions have C = 10"):
    jaxcal.evaluate(
      x, yy, ["brier"], utilities=utility.sample_linear(jax.random.key(0), 3, 5), from_logits=True
    )
  with pytest.raises(ValueError, match="'models' axis"):
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("data",))
    jaxcal.evaluate(x, yy, ["brier"], mesh=mesh, from_logits=True)
  with pytest.raises(ValueError, match="mesh must be a jax.sharding.Mesh .*got str 'x'"):
    jaxcal.evaluate(x, yy, ["brier"], mesh="x", from_logits=True)
  with pytest.raises(ValueError, match="from_logits must be True or False, got 'yes'"):
    jaxcal.evaluate(x, yy, ["brier"], from_logits="yes")
  with pytest.raises(ValueError, match="unique and one per model"):
    jaxcal.evaluate(x, yy, ["brier"], names=["a"], from_logits=True)
  with pytest.raises(ValueError, match=r"unique and one per model, got \['a', 'a'\]"):
    jaxcal.evaluate(x, yy, ["brier"], names=["a", "a"], from_logits=True)
  with pytest.raises(ValueError, match="names must be a sequence of model names .*got 'ab'"):
    jaxcal.evaluate(x[:2], yy[:2], ["brier"], names="ab", from_logits=True)
  lin = {"lin": lambda c: utility.Utility(np.zeros((3 if c == 10 else 4, c), np.float32), "linear")}
  with pytest.raises(ValueError, match=r"utilities\['lin'\] must have the same number .* 5: 4"):
    jaxcal.evaluate(  # C = 10 and C = 5
      [x[0], x[0, :, :5]], [yy[0], yy[0] % 5], ["brier"], utilities=lin, from_logits=True
    )
  none = utility.Utility(np.zeros((0, 10), np.float32), "linear")
  # a bad model of the second class-count group is named (not the first model's name)
  with pytest.raises(ValueError, match="model 'model_1': labels must lie in"):
    jaxcal.evaluate([x[0], x[0, :, :5]], [yy[0], yy[0] % 5 + 5], ["brier"], from_logits=True)
  with pytest.raises(ValueError, match=r"model 'b': labels must have shape \(50,\), got \(40,\)"):
    jaxcal.evaluate({"a": x[0], "b": x[1]}, {"a": yy[0], "b": yy[1, :40]}, ["brier"])
  with pytest.raises(ValueError, match=r"utilities\['lin'\] is an empty batch"):
    jaxcal.evaluate(x, yy, ["brier"], utilities={"lin": none}, from_logits=True)
  with pytest.raises(ValueError, match="model 'a': predictions must be"):
    jaxcal.evaluate({"a": x[0, :, 0]}, {"a": yy[0]}, ["brier"], from_logits=True)
  with pytest.raises(ValueError, match="labels has no entry for the models"):
    jaxcal.evaluate({"a": x[0]}, {"b": yy[0]}, ["brier"], from_logits=True)
  # under a jit whatever is traced (here the bin counts; the data closed over): evaluate
  # runs eagerly, and says so
  with pytest.raises(ValueError, match="evaluate runs eagerly"):
    jax.jit(lambda m: jaxcal.evaluate(x, yy, ["brier"], num_bins=m, from_logits=True))(
      jnp.array([3, 4])
    )
  # found by a review helper: {1: A, "1": B} kept B alone; a None name was taken for the
  # mark of one stack (a labels error); mixed key types raised JAX's key-sorting error
  a, b = (utility.sample_linear(jax.random.key(k), 3, 10) for k in (0, 1))
  with pytest.raises(ValueError, match="utilities has two batches named '1'; give each its own"):
    jaxcal.evaluate(x, yy, ["brier"], utilities={1: a, "1": b}, from_logits=True)
  with pytest.raises(ValueError, match="names must be strings, one per model; got None"):
    jaxcal.evaluate([x[0], x[1]], [yy[0], yy[1]], ["brier"], names=[None, "b"], from_logits=True)
  # names given with a dict replaced its keys by position while the labels stayed matched
  # by key: model "a"'s Brier was reported as "b"'s (found by a review helper)
  two = {"a": x[0], "b": x[1]}
  with pytest.raises(ValueError, match=r"a dict of predictions is named by its keys \['a', 'b'\]"):
    jaxcal.evaluate(two, {"a": yy[0], "b": yy[1]}, ["brier"], names=["b", "a"], from_logits=True)
  same = jaxcal.evaluate(two, yy[0], ["brier"], names=("a", "b"), from_logits=True)
  assert list(same.models) == ["a", "b"]
  mixed = jaxcal.evaluate({0: x[0], "b": x[1]}, yy[0], ["brier"], from_logits=True)
  assert list(mixed.models) == ["0", "b"]
  want = [scores.brier(x[i], yy[0], from_logits=True) for i in range(2)]
  np.testing.assert_allclose(mixed["brier"], want, rtol=1e-6)
  with pytest.raises(ValueError, match=r"model names must be unique .*got \['1', '1'\]"):
    jaxcal.evaluate({1: x[0], "1": x[1]}, yy[0], ["brier"], from_logits=True)
  np.testing.assert_array_equal(x, z[:2, :50])  # inputs untouched


@pytest.mark.parametrize("n", [0, -5, 2.5, True, "8", None])
def test_size_bucket_bad_input(n):
  with pytest.raises(ValueError, match="n must be an integer >= 1"):
    study.size_bucket(n)


def test_size_bucket():
  assert study.size_bucket(np.int64(9)) == 10
  assert study.size_bucket(10000) == 10240
  assert study.size_bucket(10241) == 12288
  assert all(study.size_bucket(n) >= n for n in range(1, 3000))
  assert max(study.size_bucket(n) / n for n in range(9, 100000, 37)) <= 1.25


def test_one_call_compiles_two_programs_per_class_count(logits):
  """Per class count: the fused validation pass and the study program; a repeat compiles nothing.

  Shapes no other test uses (n = 77 -> bucket 80, 3 models), so nothing is cached yet.
  """
  import logging

  z, y = logits
  z100, y100 = load_cifar("cifar100_resnet110")
  xs = {"a": z[0, :77], "b": z[1, :71], "c": z[2, :75], "d": z100[:77]}
  ys = {"a": y[0, :77], "b": y[1, :71], "c": y[2, :75], "d": y100[:77]}
  us = {
    "lin": lambda c: utility.sample_linear(jax.random.key(3), 6, c),
    "rank": lambda c: utility.sample_rank(jax.random.key(4), 6, c),
  }
  jax.block_until_ready([us[k](c) for k in us for c in (10, 100)])  # the samplers' own programs
  mets = BINNED[::-1] + ["brier", "uc_tce"]  # ecce before classwise_ece: one engine, counts

  class Grab(logging.Handler):
    def __init__(self):
      super().__init__(logging.DEBUG)
      self.names = []

    def emit(self, record):
      msg = record.getMessage()
      if msg.startswith("Compiling "):
        self.names.append(msg.split()[1].split("(")[-1].rstrip(")"))

  grab = Grab()
  loggers = [logging.getLogger(n) for n in ("jax._src.interpreters.pxla", "jax._src.dispatch")]
  for lg in loggers:
    lg.addHandler(grab)
  try:
    with jax.log_compiles(True):
      first = jaxcal.evaluate(xs, ys, mets, num_bins=BINS, utilities=us, from_logits=True)
      names_first = list(grab.names)
      jaxcal.evaluate(xs, ys, mets, num_bins=BINS, utilities=us, from_logits=True)
      # renamed batches (digits, in the other order): names are not in the program
      renamed = {"1": us["lin"], "0": us["rank"]}
      again = jaxcal.evaluate(xs, ys, mets, num_bins=BINS, utilities=renamed, from_logits=True)
      names_again = list(grab.names)
      # a growing list of checkpoints: 9, then 10 models share a model-count bucket
      k = z.shape[0]
      grow = [(z[i % k, i : i + 77], y[i % k, i : i + 77]) for i in range(10)]
      nine = jaxcal.evaluate(
        [g[0] for g in grow[:9]], [g[1] for g in grow[:9]], ["brier"], from_logits=True
      )
      names_nine = list(grab.names)
      ten = jaxcal.evaluate([g[0] for g in grow], [g[1] for g in grow], ["brier"], from_logits=True)
  finally:
    for lg in loggers:
      lg.removeHandler(grab)
  assert len(first.info["programs"]) == 2
  major = [n for n in names_first if n not in ("convert_element_type", "broadcast_in_dim")]
  assert sorted(major) == ["_ok_jit", "_ok_jit", "run", "run"], names_first
  assert names_again == names_first  # the second and third calls compiled nothing
  assert "run" in names_nine[len(names_again) :]
  assert [n for n in grab.names[len(names_nine) :] if n in ("run", "_ok_jit")] == []
  want = [float(scores.brier(jax.nn.softmax(jnp.asarray(a)), b)) for a, b in grow]
  np.testing.assert_allclose(nine["brier"], want[:9], rtol=1e-6)
  np.testing.assert_allclose(ten["brier"], want, rtol=1e-6)
  np.testing.assert_array_equal(again["uc:1"], first["uc:lin"])
  np.testing.assert_array_equal(again["uc:0"], first["uc:rank"])
  p100 = jax.nn.softmax(jnp.asarray(z100[:77]))
  np.testing.assert_allclose(first["ecce"][3], metrics.ecce(p100, y100[:77], BINS), atol=ATOL)
  np.testing.assert_allclose(
    first["uc:rank"][3],
    utility.uc_sweep(z100[:77], y100[:77], us["rank"](100), from_logits=True),
    atol=ATOL,
  )


def test_bad_utility_values_raise_after_the_fused_check(logits):
  """Utility values are checked inside the study program; a bad one raises the eager message."""
  z, y = logits
  u = utility.sample_linear(jax.random.key(0), 5, 10)
  bad = utility.Utility(u.params.at[3, 1].set(2.0), "linear")
  with pytest.raises(ValueError, match=r"utilities\['lin'\] parameters \(linear\) must lie in"):
    jaxcal.evaluate(z[:2, :60], y[:2, :60], ["brier"], utilities={"lin": bad}, from_logits=True)
  nan = utility.Utility(u.params.at[0, 0].set(jnp.nan), "linear")
  with pytest.raises(ValueError, match=r"utilities\['lin'\]"):
    jaxcal.evaluate(z[:2, :60], y[:2, :60], ["brier"], utilities={"lin": nan}, from_logits=True)


def test_utility_list_names_repeated_kinds():
  u, r = utility.Utility(np.zeros((3, 4)), "linear"), utility.Utility(np.zeros((3, 4)), "rank")
  assert list(study_src._utility_batches([u, r, u, u])) == [
    "linear",
    "rank",
    "linear_1",
    "linear_2",
  ]


def _utility_mix(c):
  """Named batches: three linear ones (two sizes), two rank, and the top-class one."""
  k = jax.random.key
  return {
    "lin_a": utility.sample_linear(k(20), 12, c),
    "rank_a": utility.sample_rank(k(21), 9, c),
    "lin_b": utility.sample_linear(k(22), 12, c),
    "tce": utility.Utility(utility.top_class().params[None], "top_class"),
    "lin_c": utility.sample_linear(k(23), 7, c),
    "rank_b": utility.sample_rank(k(24), 12, c),
  }


@pytest.mark.parametrize("chunk_size", [None, 5])
def test_named_utility_batches_equal_a_study_of_each_batch_bit_for_bit(logits, chunk_size):
  """Several named batches (two kinds, several sizes) in one study: each one's errors are
  bit for bit its own study's, whatever the other batches.

  ``chunk_size=5``: every batch is cut into chunks (12 -> 3 of 4, 9 -> 2 of 5, 7 -> 2 of 4);
  padded models are masked.
  """
  z, y = logits
  xs = [z[0, :150], z[1, :139], z[2, :121]]
  ys = [y[0, :150], y[1, :139], y[2, :121]]
  us = _utility_mix(10)
  both = jaxcal.evaluate(xs, ys, ["brier"], utilities=us, from_logits=True, chunk_size=chunk_size)
  assert list(both.values) == ["brier"] + [f"uc:{name}" for name in us]
  for name, u in us.items():
    alone = jaxcal.evaluate(
      xs, ys, ["brier"], utilities={name: u}, from_logits=True, chunk_size=chunk_size
    )
    np.testing.assert_array_equal(both[f"uc:{name}"], alone[f"uc:{name}"], err_msg=name)
    assert both[f"uc:{name}"].shape == (3, u.batch_shape[0])
  np.testing.assert_array_equal(both["brier"], alone["brier"])


def test_shared_buckets_pad_a_class_count_group_to_one_size_while_padding_is_bounded():
  sizes = [600 - 20 * i for i in range(8)]  # 600 .. 460: size buckets 640 and 512
  assert set(study_src._shared_buckets(sizes)) == {640}  # one program, 16 % padding
  assert study_src._shared_buckets([100, 10000]) == [112, 10240]  # 100 -> 10240 would double
  assert study_src._shared_buckets([300, 1000, 990, 310, 7]) == [1024] * 5  # 5120 rows for 2607
  assert study_src._shared_buckets([300, 1000, 310, 290]) == [1024, 1024, 1024, 320]
  # at the bound: 2 x 1024 padded rows for 1024 real ones (MAX_PADDING = 2) still share
  assert study_src._shared_buckets([1000, 24]) == [1024, 1024]
  assert study_src._shared_buckets([1000, 23]) == [1024, 24]
  for sizes in ([5, 9, 17, 33, 65, 129], [1000] * 4 + [600] * 3, list(range(50, 900, 50))):
    nb = study_src._shared_buckets(sizes)
    assert all(b >= k for b, k in zip(nb, sizes))
    for b in set(nb):
      real = sum(k for k, g in zip(sizes, nb) if g == b)
      assert nb.count(b) * b <= study_src.MAX_PADDING * real


def test_a_study_result_iterates_over_its_metrics():
  # it had __getitem__ by name but no __iter__: list(result) raised KeyError: 0
  p = jax.nn.softmax(jax.random.normal(jax.random.key(0), (50, 3)))
  y = jnp.arange(50) % 3
  r = jaxcal.evaluate(p, y, ["brier", "conf_ece"])
  assert list(r) == list(r.metrics) == ["brier", "conf_ece"]


def _probs(n, c, seed):
  rng = np.random.default_rng(seed)
  return rng.dirichlet(np.ones(c), n).astype(np.float32), rng.integers(0, c, n).astype(np.int32)


def test_a_model_one_row_short_of_its_bucket_has_its_padding_row_masked():
  """9 rows padded to the bucket of 10: the one padding row (probabilities (1, 0, 0), label 0,
  a confident right answer) must be masked out like any larger padding, not scored."""
  p, y = _probs(9, 3, seed=3)
  res = jaxcal.evaluate([p], [y], ["brier", "conf_ece"], num_bins=3)
  assert res.info["programs"][0]["rows"] == 10
  np.testing.assert_allclose(res["brier"][0], scores.brier(p, y), atol=ATOL)
  np.testing.assert_allclose(res["conf_ece"][0], metrics.conf_ece(p, y, 3), atol=ATOL)


def test_a_bad_last_real_row_of_a_padded_model_is_named_with_that_model():
  """Models padded to one bucket (12 and 9 rows -> 12): a NaN in model 'b''s last real row is
  reported as that model's, with its own row number (the per-model recheck reads every real
  row, not one fewer)."""
  pa, ya = _probs(12, 3, seed=4)
  pb, yb = _probs(9, 3, seed=5)
  pb[8, 1] = np.nan
  with pytest.raises(
    ValueError,
    match=r"^model 'b': probs contains non-finite values .* the first is row 8, column 1",
  ):
    jaxcal.evaluate({"a": pa, "b": pb}, {"a": ya, "b": yb}, ["brier"])


def test_a_label_gives_no_bins_to_a_metric_without_them():
  """parse_label refuses a bin count alone (no rule) on an unbinned metric, as it refuses
  'Brier(fix;15)': 'Brier(15)' is not a label that label() writes."""
  from jaxcal import report

  for text in ("Brier(15)", "smECE(15)", "NLL(qua)"):
    with pytest.raises(ValueError, match=r"has no bins; its label is"):
      report.parse_label(text)
  assert report.parse_label("ECCE(15)")[1:] == ("fixed", 15)


def _mixed_models(sizes, c, seed):
  """Models of ``sizes`` rows and ``C = c`` in four dtypes (float32, bfloat16, an int32
  one-hot, float16, then again), labels int32, float32 or uint8: numpy arrays."""
  rng = np.random.default_rng(seed)
  xs, ys = [], []
  for i, n in enumerate(sizes):
    y = rng.integers(0, c, n)
    e = np.exp(rng.normal(size=(n, c)) * 2)
    p = (e / e.sum(1, keepdims=True)).astype(np.float32)
    kind = i % 4
    if kind == 1:
      p = np.asarray(jnp.asarray(p, jnp.bfloat16))
    elif kind == 2:
      p = np.eye(c, dtype=np.int32)[y]
    elif kind == 3:
      p = p.astype(np.float16)
    xs.append(p)
    ys.append(y.astype((np.int32, np.float32, np.uint8)[i % 3]))
  return xs, ys


def test_device_models_of_many_lengths_are_the_numpy_lists_stacks_and_numbers():
  """Device arrays of distinct lengths are padded and stacked on the device by one program
  (the numpy list on the host): the same stacks (padding rows zero logits or (1, 0, ..., 0),
  label 0, masked), the same numbers bit for bit, in one dtype and in four (each dtype's
  models also stacked in their own dtype, for their own tolerance), and each model's own
  metrics; the formulation for models split over devices gives the same stacks."""
  c, sizes = 6, [150, 131, 97, 142, 120, 149, 88, 101]  # buckets 160 (all eight share it)
  mixed_x, mixed_y = _mixed_models(sizes, c, seed=11)
  rng = np.random.default_rng(12)
  logit_x = [(rng.normal(size=(n, c)) * 2).astype(np.float32) for n in sizes]
  names = ["conf_ece", "brier"]
  for xs, ys, from_logits in ((logit_x, mixed_y, True), (mixed_x, mixed_y, False)):
    dev_x, dev_y = [jnp.asarray(a) for a in xs], [jnp.asarray(a) for a in ys]
    (host,) = study_src._list_stacks(list(zip("abcdefgh", xs, ys)), from_logits)[c]
    (dev,) = study_src._list_stacks(list(zip("abcdefgh", dev_x, dev_y)), from_logits)[c]
    assert isinstance(dev.x, jax.Array) and isinstance(host.x, np.ndarray)
    assert dev.x.dtype == host.x.dtype == np.float32 and dev.x.shape == (8, 160, c)
    np.testing.assert_array_equal(np.asarray(dev.x), host.x)
    np.testing.assert_array_equal(np.asarray(dev.y), host.y)  # (the dtypes: jnp's and numpy's)
    np.testing.assert_array_equal(dev.where, host.where)
    pad_row = np.zeros(c) if from_logits else np.eye(1, c)[0]
    for j, k in enumerate(sizes):
      assert dev.where[j].sum() == k and dev.where[j, :k].all()
      np.testing.assert_array_equal(host.x[j, k:], np.broadcast_to(pad_row, (160 - k, c)))
      np.testing.assert_array_equal(host.y[j, k:], 0)
    if from_logits:
      assert dev.parts is None and host.parts is None
    else:
      assert [at for at, *_ in dev.parts] == [[0, 4], [1, 5], [2, 6], [3, 7]]
      for (at, px, py), (at_h, px_h, py_h) in zip(dev.parts, host.parts, strict=True):
        assert at == at_h and px.dtype == px_h.dtype == xs[at[0]].dtype
        np.testing.assert_array_equal(np.asarray(px).astype(np.float32), px_h.astype(np.float32))
        np.testing.assert_array_equal(np.asarray(py), py_h)
    # the per-model formulation (models split over devices) builds the same arrays
    parts_at = None if dev.parts is None else tuple(tuple(at) for at, *_ in dev.parts)
    for per_model in (False, True):
      x, y, parts = study_src._pad_stack_device(
        tuple(dev_x), tuple(dev_y), 160, from_logits, parts_at, per_model
      )
      want = [dev.x, dev.y] + [a for _, px, py in dev.parts or () for a in (px, py)]
      for a, b in zip(jax.tree.leaves((x, y, parts)), want, strict=True):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    if from_logits:  # (evaluated from device logits: test_padded_model_equals_unpadded)
      continue
    on_device = jaxcal.evaluate(dev_x, dev_y, names, num_bins=5)
    on_host = jaxcal.evaluate(xs, ys, names, num_bins=5)
    assert [p["rows"] for p in on_device.info["programs"]] == [160]
    for name in names:
      np.testing.assert_array_equal(on_device[name], on_host[name], err_msg=name)
    for i in (0, 1):  # a float32 and a bfloat16 model against their own one-shot metrics
      np.testing.assert_allclose(
        on_device["conf_ece"][i], metrics.conf_ece(xs[i], ys[i], 5), atol=ATOL, err_msg=str(i)
      )


def test_device_models_of_distinct_lengths_are_stacked_by_a_constant_number_of_programs():
  """Padding and stacking device arrays traces and compiles one program per group, whatever
  the number of distinct model lengths: eager padding compiled three to four programs per
  length (the review's figure: an evaluate of 128 device-array models of 128 lengths took
  24.4 s, the same models as numpy arrays 3.2 s)."""
  c = 7  # lengths and C no other test uses: nothing is cached yet

  def stacking_programs(sizes, from_logits):
    rng = np.random.default_rng(len(sizes))
    xs = [jnp.asarray(rng.normal(size=(n, c)), jnp.float32) for n in sizes]
    ys = [jnp.asarray(rng.integers(0, c, n), jnp.int32) for n in sizes]
    jax.block_until_ready((xs, ys))
    with new_programs() as events:
      (st,) = study_src._list_stacks(list(zip(map(str, sizes), xs, ys)), from_logits)[c]
      jax.block_until_ready((st.x, st.y))
    assert st.x.shape == (len(sizes), 224, c)  # one bucket
    return events

  for sizes, from_logits in (([201, 197, 183], True), ([211 - 2 * i for i in range(12)], False)):
    events = stacking_programs(sizes, from_logits)
    # one trace, and one compile (none where a persistent cache holds the program)
    assert events.count(_NEW_PROGRAM_EVENTS[0]) == 1, (len(sizes), events)
    assert events.count(_NEW_PROGRAM_EVENTS[1]) <= 1, (len(sizes), events)
