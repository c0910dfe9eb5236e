"""Sharded runs on 4 and 8 forced CPU devices equal the one-device results.

The device count must be set before JAX starts, so the sharded half runs in a
fresh process (tests/_sharding_worker.py) per device count; this process
computes the references on its one device. Real data: 6 CIFAR-10 models,
300 test samples each (6 models on 4 or 8 devices: the model axis is padded).
The worker runs once per device count (the module fixture ``got``); one test
checks the study call, ``uc_sweep``, streaming and bad input, the other every
remaining public function of ``(n, C)`` data on the first 296 samples sharded
over the devices (``_sharding_worker.cases``).
"""

import itertools
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))  # --import-mode=importlib
from _cpu_devices import ROOT, cpu_devices_env
from _sharding_worker import (
  BAD_FNS,
  EAGER,
  LEFT_OUT,
  N_SHARDED,
  bad_cases,
  called,
  cases,
  explicit_cases,
)
from conftest import load_cifar

from jaxcal import metrics, scores, utility

WORKER = pathlib.Path(__file__).parent / "_sharding_worker.py"
BINS = np.array([2, 5, 15, 40])
ATOL = 1e-6
MODELS = (
  "cifar10_resnet110",
  "cifar10_densenet121",
  "cifar10_resnet50",
  "cifar10_wide_resnet",
  "focal_cifar10_resnet110",
  "focal_cifar10_densenet121",
)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
  zs, ys = zip(*(load_cifar(m) for m in MODELS))
  z = np.stack([a[:300] for a in zs]).astype(np.float32)
  y = np.stack([a[:300] for a in ys]).astype(np.int32)
  path = tmp_path_factory.mktemp("sharding") / "data.npz"
  np.savez(path, logits=z, labels=y)
  return z, y, path


def _run(path, out, devices):
  env = cpu_devices_env(devices)
  res = subprocess.run(
    [sys.executable, str(WORKER), str(path), str(out)],
    env=env,
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=400,
  )
  assert res.returncode == 0, res.stderr[-4000:]
  return dict(np.load(out))


@pytest.fixture(
  scope="module", params=[4, pytest.param(8, marks=pytest.mark.slow)]
)  # 8: CI has 2 cores
def got(request, data, tmp_path_factory):
  """The worker's results on ``request.param`` devices (one run per device count)."""
  out = tmp_path_factory.mktemp(f"sharding{request.param}") / "out.npz"
  res = _run(data[2], out, request.param)
  assert int(res["devices"]) == request.param
  return res


def test_sharded_equals_one_device(data, got):
  z, y, path = data
  devices = int(got["devices"])
  assert int(np.prod(got["mesh"])) == devices and got["mesh"][1] > 1  # 2-D mesh with utilities
  p = np.asarray(jax.nn.softmax(jnp.asarray(z)))
  lin = utility.sample_linear(jax.random.key(0), 11, z.shape[-1])
  for i in range(z.shape[0]):
    for k in ("conf_ece", "conf_ce_corr", "classwise_ce", "classwise_ece"):
      want = getattr(metrics, k)(p[i], y[i], BINS)
      np.testing.assert_allclose(got["evaluate/" + k][i], want, atol=ATOL, err_msg=k)
    np.testing.assert_allclose(got["evaluate/ecce"][i], metrics.ecce(p[i], y[i], BINS), atol=ATOL)
    np.testing.assert_allclose(got["evaluate/brier"][i], scores.brier(p[i], y[i]), atol=ATOL)
    np.testing.assert_allclose(
      got["evaluate/uc_tce"][i], utility.uc_class(p[i], y[i], "tce"), atol=ATOL
    )
    one = utility.uc_sweep(p[i], y[i], lin, chunk_size=2, devices=jax.devices()[:1])
    np.testing.assert_allclose(got["evaluate/uc:lin"][i], one, atol=ATOL)
    for j in range(i, devices, z.shape[0]):  # the vmapped stack holds model j % M at j
      np.testing.assert_allclose(got["uc_sweep_vmap"][j], one, atol=ATOL)
    np.testing.assert_allclose(
      got["evaluate1d/conf_ece"][i], metrics.conf_ece(p[i], y[i], BINS), atol=ATOL
    )
  one = utility.uc_sweep(p[0], y[0], lin, chunk_size=2, devices=jax.devices()[:1])
  np.testing.assert_allclose(got["uc_sweep"], one, atol=ATOL)
  np.testing.assert_allclose(got["uc_sweep_jit"], one, atol=ATOL)
  keep = np.arange(p.shape[1]) % 3 != 0  # the worker's mask
  sub = utility.uc_sweep(p[0, keep], y[0, keep], lin, chunk_size=2, devices=jax.devices()[:1])
  np.testing.assert_allclose(got["uc_sweep_where"], sub, atol=ATOL)
  np.testing.assert_allclose(got["uc_sweep_where_jit"], sub, atol=ATOL)
  k = (300 // devices) * devices  # the rows the worker sharded
  np.testing.assert_allclose(
    got["uc_sweep_rows"], utility.uc_sweep(p[0, :k], y[0, :k], lin), atol=ATOL
  )
  # inside the caller's jax.set_mesh (two Explicit axes): eager, jit, row-sharded inputs
  k2 = int(got["set_mesh/rows"])
  part = utility.uc_sweep(p[0, :k2], y[0, :k2], lin, chunk_size=2, devices=jax.devices()[:1])
  for i, want in enumerate((one, one, part, part)):
    np.testing.assert_allclose(got[f"set_mesh/{i}"], want, atol=ATOL)
  np.testing.assert_allclose(got["set_mesh/next_op"], np.sort(one), atol=ATOL)
  p2, y2 = p[0, :k2], y[0, :k2]
  want = np.array([float(v) for v in explicit_cases(p2, y2)])
  for where_, how in itertools.product(("outside", "inside"), ("", "/jit")):
    np.testing.assert_allclose(
      got[f"explicit/{where_}{how}"], want[: -1 if how else None], rtol=1e-5, atol=ATOL
    )
    np.testing.assert_allclose(got[f"explicit/{where_}{how}/next_op"], want[0], atol=ATOL)
  np.testing.assert_allclose(got["explicit/grad"], jax.grad(metrics.conf_ece)(p2, y2), atol=ATOL)
  np.testing.assert_allclose(
    got["explicit/closed_bins"], metrics.conf_ece(p2, y2, [5, 15]), rtol=1e-5, atol=ATOL
  )
  assert not got["rows_host_copies"].any()  # gathered on the devices, never via the host
  # vmap over models-sharded data: no collective at all, output sharded over models
  assert not got["vmap_collectives"].any()
  assert bool(got["vmap_sharded"])
  # streaming: psum of per-device FixedBins and all_gather of Records = one-shot
  k = int(got["stream/n"])
  p0, y0 = p[0, :k], y[0, :k]
  for name in ("conf_ece", "classwise_ece", "conf_ce_corr"):
    want = getattr(metrics, name)(p0, y0, BINS, "fixed")
    np.testing.assert_allclose(got["stream/" + name], want, atol=ATOL, err_msg=name)
  np.testing.assert_allclose(got["stream/ecce"], metrics.ecce(p0, y0, BINS), atol=ATOL)
  np.testing.assert_allclose(
    got["stream/records_conf_ce_corr"], metrics.conf_ce_corr(p0, y0, BINS), rtol=1e-6
  )
  # the same from logits under shard_map's default check_vma=True (it raised JAX's
  # TypeError: a constant cond branch in the value check, a constant scan carry in
  # Records.reduce), and each device's own rows' metrics and scores
  z0 = z[0, :k]
  vma = {name: got["stream_vma/" + name] for name in ("bins_conf_ece", "scores_brier")}
  want = metrics.conf_ece(z0, y0, BINS, "fixed", from_logits=True)
  np.testing.assert_allclose(vma["bins_conf_ece"], want, atol=ATOL)
  np.testing.assert_allclose(vma["scores_brier"], scores.brier(z0, y0, from_logits=True), rtol=1e-6)
  recs = got["stream_vma/records_conf_ce_corr"]
  assert recs.shape == (devices, BINS.size)  # one copy per device (out_specs=P(axis))
  want_recs = metrics.conf_ce_corr(z0, y0, BINS, from_logits=True)
  np.testing.assert_allclose(recs, np.broadcast_to(want_recs, recs.shape), rtol=1e-6)
  for i, (zi, yi) in enumerate(zip(np.split(z0, devices), np.split(y0, devices), strict=True)):
    own = [
      metrics.conf_ece(zi, yi, 15, from_logits=True),
      metrics.classwise_ce(zi, yi, 5, from_logits=True),
      scores.brier(zi, yi, from_logits=True),
      metrics.skce(zi, yi, from_logits=True),
      metrics.smooth_ece(zi, yi, from_logits=True),
      scores.decompose(jax.nn.softmax(zi, axis=-1), yi).mcb,
    ]
    np.testing.assert_allclose(got["stream_vma/own"][i], own, rtol=1e-6, atol=ATOL)
  # bad input sharded over the samples: the one-device message, naming the global row
  # (a NaN in [0, 1]-checked scores was missed: XLA:CPU's min/max all-reduce drops NaN)
  row = int(got["bad/row"])
  assert row >= 2 * (k // devices)  # in the third shard
  for name, (pb, yb) in bad_cases(p[0, :k], y[0, :k], row).items():
    for fname, f in BAD_FNS[pb.ndim].items():
      with pytest.raises(ValueError) as one:
        f(pb, yb)
      assert str(got[f"bad/{name}/{fname}"]) == str(one.value), (name, fname)
      assert f"{row}" in str(one.value)
      assert bool(got[f"bad/{name}/{fname}/unchanged"]), (name, fname)


# float32 tolerance of a sum whose order depends on the layout (each device sums its
# shard, then the partial sums are added): n = 296 terms (C = 10 per row) of magnitude
# <= 1, reassociated, move a result by a few ulp (measured on 4 and 8 devices: at most
# 3.5e-7 relative, nadaraya_watson; 2 ulp of reliability_stats' bin means near 1).
# rtol = 1e-6 is 8 ulp. The atol is for results that cancel to near 0: skce's
# U-statistic of pair terms up to 1e-2 comes to 6e-6 and moves by 2.2e-11 (3.8e-6
# relative); 1e-9 is 45x that, and below 1e-5 of every other result here (>= 1.7e-4).
F32 = {"rtol": 1e-6, "atol": 1e-9}
#: Cases whose floats are exact integer per-bin sums (README "Bitwise reproducibility":
#: the same bits on any layout for one call form), and ecdf (a sort and ``k / M``: no
#: arithmetic on the data): bitwise. Integer outputs (bin ids, bin counts) are bitwise
#: in every case.
BITWISE = {"conf_ce", "binary_ce", "ecdf"}
#: Cases that differ from the one-device value by more than rounding (library bugs,
#: reported): ``{name: reason}``, each an xfail(strict=True).
KNOWN_BAD: dict[str, str] = {}


@pytest.fixture(scope="module")
def one_device(data):
  """``{name: [leaf (M, ...)]}``: the worker's ``jit(vmap(fn))`` of each case on one device.

  And ``{"eager/" + name: ...}``: the eager calls of ``EAGER``, one model at a time.
  """
  z, y, _ = data
  k = N_SHARDED
  pd = jax.nn.softmax(jnp.asarray(z))[:, :k]  # as the worker: the softmax of all 300
  zd, yd = jnp.asarray(z[:, :k]), jnp.asarray(y[:, :k])
  out = {}
  fns = cases(z.shape[-1])
  for name, fn in fns.items():
    out[name] = [np.asarray(v) for v in jax.tree.leaves(jax.jit(jax.vmap(fn))(pd, yd, zd))]
  for name in EAGER:
    rows = [jax.tree.leaves(fns[name](pd[i], yd[i], zd[i])) for i in range(len(z))]
    out["eager/" + name] = [np.stack([np.asarray(v) for v in col]) for col in zip(*rows)]
  return out


def _check(name, got, want, msg):
  """The leaves ``got == want``: bitwise, or within the case's float32 tolerance."""
  assert len(got) == len(want), msg
  if name == "smooth_reliability":
    # (mesh, accuracy, density, bandwidth, smooth_ece). The FFT smoothing's round-off is
    # absolute, at the scale of the density's peak, and the accuracy is a ratio of two
    # smoothed sums, round-off over round-off where the density vanishes (its docstring):
    # accuracy * density and density within 1e-6 of the peak (measured: 7e-8, 1 ulp).
    mesh, acc, dens, bw, ece = got
    atol = 1e-6 * np.max(want[2], axis=-1, keepdims=True)
    np.testing.assert_array_equal(mesh, want[0], err_msg=msg)
    assert np.all(np.abs(dens - want[2]) <= atol), msg
    assert np.all(np.abs(acc * want[2] - want[1] * want[2]) <= atol), msg
    got, want = [bw, ece], [want[3], want[4]]
  for g, w in zip(got, want, strict=True):
    assert g.shape == w.shape and g.dtype == w.dtype, (msg, g.shape, w.shape, g.dtype, w.dtype)
    if name in BITWISE or not np.issubdtype(w.dtype, np.floating):
      np.testing.assert_array_equal(g, w, err_msg=msg)
    else:
      np.testing.assert_allclose(g, w, **F32, err_msg=msg)


@pytest.mark.parametrize(
  "name",
  [
    pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=KNOWN_BAD[n]))
    if n in KNOWN_BAD
    else n
    for n in cases(10)
  ],
)
def test_sample_sharded_equals_one_device(got, one_device, name):
  """A public function on samples sharded over every device = its one-device value.

  ``jit(vmap(fn))`` over the 6 models, samples sharded over a 1-D mesh of every device,
  against the same call on one device; for ``EAGER``, the eager call too.
  """
  for key in [name, "eager/" + name] if name in EAGER else [name]:
    want = one_device[key]
    prefix = key if key.startswith("eager/") else "samples/" + key
    n = len(want)
    assert f"{prefix}/{n}" not in got
    _check(name, [got[f"{prefix}/{j}"] for j in range(n)], want, key)


def test_every_public_function_is_compared():
  """A new public metric or score needs a case in the worker (or a reason in LEFT_OUT)."""
  public = {
    name
    for mod in (metrics, scores)
    for name in mod.__all__
    if callable(getattr(mod, name)) and not isinstance(getattr(mod, name), type)
  }
  covered = called() & public  # (uc and ecdf are utility's)
  assert not covered & set(LEFT_OUT)
  assert covered | set(LEFT_OUT) == public
