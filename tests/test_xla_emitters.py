"""The suite's compile flags do not change what jaxcal computes.

The tests compile with XLA:CPU's older fusion emitters
(``--xla_cpu_use_fusion_emitters=false``) and LLVM's lowest optimisation
level (``--xla_backend_optimization_level=0``), see conftest.py, which users
do not get by default. This test computes a set of numbers that exercise each
kind of kernel (top label and fixed bins, quantile bins and their sort,
class-wise bins, the Brier decomposition with isotonic recalibration, the
FFT of smECE, the matrix products of a utility sweep, an L-BFGS fit) on the
embedded real CIFAR-10 ResNet-110 predictions in two child processes, one
with this run's settings and one with the other (XLA's defaults when this
run has the test flags, the test flags when it has XLA's defaults), and
checks that they agree (on jax 0.10.2 the emitters alone give bitwise equal
numbers, and the optimisation level moves some by one float32 rounding,
1.2e-7 relative; the tolerance leaves room for a jaxlib that orders a
reduction differently).
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
from conftest import FAST_COMPILE_FLAGS, _xla_accepts

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


def _test_flags(xla_flags: str) -> set[str]:
  """The suite's compile flags among ``xla_flags``."""
  return set(xla_flags.split()) & set(FAST_COMPILE_FLAGS)


def test_the_suites_compile_flags_give_the_numbers_of_xlas_defaults():
  flags = os.environ.get("XLA_FLAGS", "")
  if _test_flags(flags):
    other = " ".join(f for f in flags.split() if f not in FAST_COMPILE_FLAGS)
  else:
    accepted = [f for f in FAST_COMPILE_FLAGS if _xla_accepts(f)]
    if not accepted:
      pytest.skip(f"this jaxlib accepts none of {FAST_COMPILE_FLAGS}")
    other = " ".join([flags, *accepted]).strip()
  base = dict(os.environ, JAX_PLATFORMS="cpu")
  here, there = _values(base), _values(dict(base, XLA_FLAGS=other))
  # one child ran with XLA's defaults, the other with (this jaxlib's) test flags
  ran = sorted(len(_test_flags(d.pop("xla_flags"))) for d in (here, there))
  assert ran[0] == 0 and ran[1] > 0, ran
  assert set(here) == set(there)
  for name in here:
    a, b = np.asarray(here[name]), np.asarray(there[name])
    assert np.all(np.isfinite(a)) and np.any(a != 0), name
    np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-7, err_msg=name)


def test_the_optimisation_level_is_left_out_where_an_accelerator_plugin_is_installed(monkeypatch):
  import importlib.metadata
  import importlib.util

  import conftest

  monkeypatch.delenv("JAX_PLATFORMS", raising=False)
  monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: ["xla_cuda13"])
  assert not conftest._cpu_only()
  monkeypatch.setenv("JAX_PLATFORMS", "cpu")  # the user asked for the CPU: the plugin is unused
  assert conftest._cpu_only()
  monkeypatch.setenv("JAX_PLATFORMS", "")
  monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [])
  assert conftest._cpu_only() == (
    importlib.util.find_spec("libtpu") is None and importlib.util.find_spec("jax_plugins") is None
  )
  assert set(conftest.CPU_ONLY_FLAGS) <= set(conftest.FAST_COMPILE_FLAGS)


def test_the_optimisation_level_follows_the_backend_this_run_uses():
  """On a GPU or TPU the kernels compile as users' programs do; on the CPU alone the suite's flag is set.

  The stand-in plugin of the test above checks the rule; this checks the run
  itself (``experiments/bench/gpu_checks.sh`` runs it on a lent GPU).
  """
  import conftest
  import jax

  flags = os.environ.get("XLA_FLAGS", "").split()
  opt0 = set(conftest.CPU_ONLY_FLAGS)
  if jax.default_backend() != "cpu":
    assert not opt0 & set(flags), (jax.default_backend(), flags)
  elif conftest._cpu_only() and not conftest.XLA_DEFAULTS:
    wanted = [f for f in conftest.CPU_ONLY_FLAGS if _xla_accepts(f)]
    assert set(wanted) <= set(flags), flags
