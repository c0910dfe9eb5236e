"""Sharded runs on 4 and 8 forced CPU devices equal the one-device results.

The device count must be set before JAX starts, so the sharded half runs in a
fresh process (tests/_sharding_worker.py) per device count; this process
computes the references on its one device. Real data: 6 CIFAR-10 models,
300 test samples each (6 models on 4 or 8 devices: the model axis is padded).
"""

import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))  # --import-mode=importlib
from _cpu_devices import ROOT, cpu_devices_env
from _sharding_worker import BAD_FNS, bad_cases
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


@pytest.mark.parametrize(
  "devices", [4, pytest.param(8, marks=pytest.mark.slow)]
)  # 8: CI has 2 cores
def test_sharded_equals_one_device(data, tmp_path, devices):
  z, y, path = data
  got = _run(path, tmp_path / "out.npz", devices)
  assert int(got["devices"]) == devices
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
