"""The environment of a child Python process with ``n`` forced CPU devices.

``--xla_force_host_platform_device_count`` must be set before JAX starts, so
tests of several devices run their sharded half in a fresh process.
"""

import os
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def cpu_devices_env(n: int) -> dict[str, str]:
  """``os.environ`` plus ``n`` CPU devices and this checkout first on ``PYTHONPATH``.

  The device count is added to the ``XLA_FLAGS`` already set (the tests'
  compile flag, see conftest.py), not put in their place.
  """
  flags = os.environ.get("XLA_FLAGS", "")
  return dict(
    os.environ,
    JAX_PLATFORMS="cpu",
    XLA_FLAGS=f"{flags} --xla_force_host_platform_device_count={n}".strip(),
    PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
  )
