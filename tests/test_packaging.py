"""Packaging and import hygiene: what a user installs, and what an import costs.

* ``import jaxcal.metrics`` (and ``scores``, ``utility``, ``dominance``,
  ``data``) loads no training code, no recalibrators, and none of flax, optax,
  jaxopt or matplotlib; ``fit("temperature")`` loads no flax, jaxopt or
  training code. Measured in a fresh interpreter through ``sys.modules``.
* One version: setuptools reads ``jaxcal.__version__``.
* Dependencies a JAX user can live with: no upper cap on jax, no jaxlib line.
* The wheel ships ``py.typed``, the embedded predictions and their provenance,
  and the LICENSE and NOTICE files.
"""

import json
import os
import pathlib
import shutil
import subprocess
import sys
import tomllib
import zipfile

import pytest

import jaxcal

ROOT = pathlib.Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())

#: Never imported by the metrics side of the library.
HEAVY = ("flax", "optax", "jaxopt", "matplotlib", "jaxcal._src.train", "jaxcal._src.recal")


def loaded_after(code: str) -> set[str]:
  """Top-level modules and jaxcal subpackages in ``sys.modules`` after ``code``."""
  probe = (
    "import json, sys\n"
    f"{code}\n"
    "names = set()\n"
    "for m in list(sys.modules):\n"
    "  parts = m.split('.')\n"
    "  names.add(parts[0])\n"
    "  if parts[0] == 'jaxcal' and len(parts) > 2:\n"
    "    names.add('.'.join(parts[:3]))\n"
    "print(json.dumps(sorted(names)))\n"
  )
  env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
  out = subprocess.run(
    [sys.executable, "-c", probe], env=env, cwd=ROOT, capture_output=True, text=True, check=True
  )
  return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_probe_sees_an_import():
  """The probe is not blind: importing the training module shows flax and train."""
  seen = loaded_after("import jaxcal.train")
  assert {"flax", "jaxcal._src.train"} <= seen


@pytest.mark.parametrize(
  "module",
  [
    "jaxcal",
    "jaxcal.metrics",
    "jaxcal.scores",
    "jaxcal.dominance",
    "jaxcal.data",
    "jaxcal.utility",
  ],
)
def test_metric_modules_import_nothing_heavy(module):
  seen = loaded_after(f"import {module}")
  assert not seen & set(HEAVY), f"import {module} loads {sorted(seen & set(HEAVY))}"


def test_temperature_scaling_imports_no_flax_jaxopt_or_training_code():
  seen = loaded_after(
    "import numpy as np\n"
    "from jaxcal import recalibrate\n"
    "z = np.random.default_rng(0).normal(size=(64, 3)).astype(np.float32)\n"
    "recalibrate.fit('temperature', z, np.arange(64) % 3)"
  )
  bad = seen & {"flax", "jaxopt", "matplotlib", "jaxcal._src.train"}
  assert not bad, f"fit('temperature') loads {sorted(bad)}"


def test_version_has_one_source():
  project = PYPROJECT["project"]
  assert "version" not in project and "version" in project["dynamic"]
  assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "jaxcal.__version__"}
  expand = pytest.importorskip("setuptools.config.expand")
  assert expand.read_attr("jaxcal.__version__", root_dir=ROOT) == jaxcal.__version__
  packaging_version = pytest.importorskip("packaging.version")
  packaging_version.Version(jaxcal.__version__)  # PEP 440


def test_dependencies_do_not_cap_jax():
  requirements = pytest.importorskip("packaging.requirements")
  reqs = {r.name: r for r in map(requirements.Requirement, PYPROJECT["project"]["dependencies"])}
  assert "jaxlib" not in reqs, "jax pins its own jaxlib; a second line only conflicts"
  for newer in ("0.10.2", "0.11.2", "0.12.0", "1.0.0"):
    assert reqs["jax"].specifier.contains(newer), f"jax {newer} excluded by {reqs['jax']}"
  assert not reqs["jax"].specifier.contains("0.10.1")
  for name in ("flax", "optax", "jaxopt"):
    assert not any(s.operator in ("<", "<=", "==", "~=") for s in reqs[name].specifier), reqs[name]
  assert "chex" not in reqs, "chex is a test dependency (chex.variants), not a runtime one"
  assert PYPROJECT["project"]["requires-python"] == ">=3.11"


def test_wheel_ships_types_data_and_notices(tmp_path):
  """Builds the wheel from a copy of the tree (no network: the installed setuptools)."""
  pytest.importorskip("setuptools", minversion="77")
  src = tmp_path / "src"
  src.mkdir()
  for name in ("pyproject.toml", "README.md", "LICENSE", "NOTICE"):
    shutil.copy(ROOT / name, src / name)
  shutil.copytree(ROOT / "jaxcal", src / "jaxcal", ignore=shutil.ignore_patterns("__pycache__"))
  subprocess.run(
    [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index"]
    + ["-q", "-w", str(tmp_path / "dist"), str(src)],
    check=True,
    capture_output=True,
  )
  (wheel,) = (tmp_path / "dist").glob("jaxcal-*.whl")
  names = zipfile.ZipFile(wheel).namelist()
  for member in ("jaxcal/py.typed", "jaxcal/_data/cifar10_resnet110.npz", "jaxcal/_data/README.md"):
    assert member in names
  info = f"jaxcal-{jaxcal.__version__}.dist-info"
  assert {f"{info}/licenses/LICENSE", f"{info}/licenses/NOTICE"} <= set(names)
  metadata = zipfile.ZipFile(wheel).read(f"{info}/METADATA").decode()
  assert f"Version: {jaxcal.__version__}\n" in metadata
  assert "License-Expression: Apache-2.0" in metadata
  assert not any(n.startswith(("tests/", "notebooks/", "experiments/")) for n in names)


def test_license_and_notice():
  assert "Apache License\n                           Version 2.0" in (ROOT / "LICENSE").read_text()
  notice = (ROOT / "NOTICE").read_text()
  assert "cifar10_resnet110.npz" in notice and "MIT" in notice and "non-commercial" in notice
