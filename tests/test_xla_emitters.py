"""The suite's compile flag does not change what jaxcal computes.

The tests compile with XLA:CPU's older fusion emitters
(``--xla_cpu_use_fusion_emitters=false``, see conftest.py), which users do
not get by default. This test computes a set of numbers that exercise each
kind of kernel (top label and fixed bins, quantile bins and their sort,
class-wise bins, the Brier decomposition with isotonic recalibration, the
FFT of smECE, the matrix products of a utility sweep, an L-BFGS fit) on the
embedded real CIFAR-10 ResNet-110 predictions in two child processes, one
with this run's setting and one with the other, and checks that they agree
(on jax 0.10.2 they are bitwise equal; the tolerance leaves room for a
jaxlib that orders a reduction differently).
"""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))  # --import-mode=importlib
from _cpu_devices import ROOT
from conftest import FAST_COMPILE_FLAG, _xla_accepts, with_xla_flag

_VALUES = """
import json
import os
import jax
import numpy as np
from jaxcal import data, metrics, recalibrate, scores, utility

z, y = data.default_predictions("test")
p = np.asarray(jax.nn.softmax(z[:4000], axis=-1))
y = y[:4000]
utilities = utility.sample_linear(jax.random.key(0), 64, 10)
values = {
  "conf_ece fixed": metrics.conf_ece(p, y),
  "conf_ece quantile": metrics.conf_ece(p, y, 15, "quantile"),
  "classwise_ece": metrics.classwise_ece(p, y),
  "classwise_ce quantile": metrics.classwise_ce(p, y),
  "brier": scores.brier(p, y),
  "decompose mcb": scores.decompose(p, y).mcb,
  "smooth_ece": metrics.smooth_ece(p, y),
  "uc_sweep": utility.uc_sweep(p, y, utilities),
  "temperature": recalibrate.fit_temperature(z[:4000], y).temperature,
}
out = {k: np.asarray(v, np.float64).ravel().tolist() for k, v in values.items()}
print(json.dumps(dict(out, xla_flags=os.environ.get("XLA_FLAGS", ""))))
"""


def _values(env: dict[str, str]) -> dict[str, list[float]]:
  run = subprocess.run(
    [sys.executable, "-c", _VALUES], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300
  )
  assert run.returncode == 0, run.stderr[-3000:]
  return json.loads(run.stdout.strip().splitlines()[-1])


def test_both_xla_cpu_fusion_emitters_give_the_same_numbers():
  flags = os.environ.get("XLA_FLAGS", "")
  if FAST_COMPILE_FLAG in flags:
    other = flags.replace(FAST_COMPILE_FLAG, "").strip()
  elif _xla_accepts(FAST_COMPILE_FLAG):
    other = with_xla_flag(FAST_COMPILE_FLAG)
  else:
    pytest.skip(f"this jaxlib does not accept {FAST_COMPILE_FLAG}")
  base = dict(os.environ, JAX_PLATFORMS="cpu")
  here, there = _values(base), _values(dict(base, XLA_FLAGS=other))
  # the two children ran with the two settings
  assert (FAST_COMPILE_FLAG in here.pop("xla_flags")) != (
    FAST_COMPILE_FLAG in there.pop("xla_flags")
  )
  assert set(here) == set(there)
  for name in here:
    a, b = np.asarray(here[name]), np.asarray(there[name])
    assert np.all(np.isfinite(a)) and np.any(a != 0), name
    np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-7, err_msg=name)
