"""Shared helpers for the benchmarks in ``experiments/bench/``.

Usage from a benchmark script (run it as ``python experiments/bench/NAME.py``;
this folder is then first on ``sys.path``, so ``import _common`` works)::

    from _common import timeit, device_info, write_result

    t = timeit(lambda: f(x), repeat=5)          # warm-up call + 5 timed calls
    write_result("my_bench", {"timings": {"jax": t}, **device_info()})

``timeit`` blocks on every JAX array in the result (``jax.block_until_ready``
over the whole pytree), so asynchronous dispatch is not mistaken for speed.
The first (warm-up) call is timed separately: it includes tracing and
compilation.
"""

from __future__ import annotations

import datetime
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = [
  "RESULTS_DIR",
  "timeit",
  "device_info",
  "write_result",
  "cpu_load",
  "machine_note",
  "json_child",
  "interleaved",
]

#: experiments/results/ beside this folder.
RESULTS_DIR = pathlib.Path(__file__).resolve().parents[1] / "results"


def _block(x: Any) -> Any:
  try:
    import jax
  except ImportError:  # pure numpy benchmark
    return x
  return jax.block_until_ready(x)


def timeit(fn: Callable[[], Any], repeat: int = 5, warmup: int = 1) -> dict:
  """Times ``fn()`` (no arguments), blocking until its result is ready.

  Args:
    fn: a thunk; its return value (any pytree of arrays) is waited for.
    repeat: number of timed calls after the warm-up.
    warmup: untimed-for-the-statistics calls first (compilation, caches);
      the first one's time is reported as ``first_s``.

  Returns:
    dict with ``best_s`` (minimum, the figure to compare), ``median_s``,
    ``mean_s``, ``times_s`` (every timed call), ``first_s`` (the first
    warm-up call, i.e. including compilation; ``None`` if ``warmup == 0``)
    and ``repeat``.
  """
  first = None
  for k in range(warmup):
    t0 = time.perf_counter()
    _block(fn())
    if k == 0:
      first = time.perf_counter() - t0
  times = []
  for _ in range(max(1, repeat)):
    t0 = time.perf_counter()
    _block(fn())
    times.append(time.perf_counter() - t0)
  return {
    "best_s": min(times),
    "median_s": statistics.median(times),
    "mean_s": statistics.fmean(times),
    "times_s": times,
    "first_s": first,
    "repeat": len(times),
  }


def interleaved(paths: dict[str, tuple[Callable, tuple]], repeat: int) -> dict[str, dict]:
  """Times each ``fn(*args)`` of ``paths`` call by call in turn, blocking on every result.

  Each path's first call (tracing and compilation) is timed alone first; then
  ``repeat`` rounds call every path once each, so the paths share the
  machine's state. Returns ``name -> {"median_s", "best_s", "first_call_s",
  "times_s"}``.
  """

  def once(fn, args) -> float:
    t0 = time.perf_counter()
    _block(fn(*args))
    return time.perf_counter() - t0

  first = {k: once(fn, a) for k, (fn, a) in paths.items()}
  times: dict[str, list[float]] = {k: [] for k in paths}
  for _ in range(max(1, repeat)):
    for k, (fn, a) in paths.items():
      times[k].append(once(fn, a))
  return {
    k: {
      "median_s": statistics.median(t),
      "best_s": min(t),
      "first_call_s": first[k],
      "times_s": t,
    }
    for k, t in times.items()
  }


def json_child(code: str, env: dict[str, str] | None = None, timeout: float = 600) -> dict:
  """Runs ``python -c code`` in a fresh process and reads the JSON of its last output line.

  Args:
    code: a Python program that prints one JSON object last.
    env: the child's environment (default: this process's).
    timeout: seconds before the child is stopped (``subprocess.TimeoutExpired``).

  Returns:
    The parsed object, or ``{"error": <the end of its stderr>}`` when the
    child failed.
  """
  res = subprocess.run(
    [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=env
  )
  if res.returncode != 0:
    return {"error": res.stderr[-2000:]}
  return json.loads(res.stdout.strip().splitlines()[-1])


def cpu_load() -> list[float] | None:
  """1/5/15-minute load averages (other users of a shared machine), if known."""
  try:
    return [round(x, 2) for x in os.getloadavg()]
  except (AttributeError, OSError):
    return None


def machine_note(load: list[float] | None, cpu_count: int | None = None) -> str:
  """One line on how busy the machine was (the 1-minute load vs its cores)."""
  if load is None:
    return "load unknown"
  cores = cpu_count or os.cpu_count() or 1
  if load[0] < 0.5 * cores:
    return f"quiet machine (1-minute load {load[0]} on {cores} cores); both sides measured in the same run"
  return (
    f"machine shared with other jobs during the measurement (1-minute load {load[0]} on "
    f"{cores} cores); both sides measured in the same run, best of the timed calls"
  )


def device_info() -> dict:
  """Where the benchmark ran: JAX backend and devices, versions, CPU, date."""
  info: dict[str, Any] = {
    "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    "host": platform.node(),
    "platform": platform.platform(),
    "processor": platform.processor() or platform.machine(),
    "cpu_count": os.cpu_count(),
    "load_avg_at_start": cpu_load(),
    "python": platform.python_version(),
    "numpy": np.__version__,
  }
  try:
    import jax

    devs = jax.devices()
    info.update(
      {
        "jax": jax.__version__,
        "backend": jax.default_backend(),
        "device": devs[0].device_kind if devs else None,
        "num_devices": len(devs),
        "devices": [str(d) for d in devs],
      }
    )
  except ImportError:
    pass
  return info


def _jsonable(x: Any) -> Any:
  if isinstance(x, dict):
    return {str(k): _jsonable(v) for k, v in x.items()}
  if isinstance(x, (list, tuple)):
    return [_jsonable(v) for v in x]
  if isinstance(x, (np.generic,)):
    return x.item()
  if hasattr(x, "tolist") and hasattr(x, "shape"):  # numpy / jax arrays
    return np.asarray(x).tolist()
  return x


def write_result(
  name: str, result: dict, results_dir: str | os.PathLike | None = None
) -> pathlib.Path:
  """Writes ``result`` as pretty JSON to ``experiments/results/<name>.json``.

  Numpy/JAX scalars and arrays are converted to plain lists/numbers. A run
  on an accelerator (``result["backend"]`` not ``"cpu"``, as
  :func:`device_info` records it) writes ``<name>_<backend>.json`` instead,
  so GPU figures sit beside the CPU ones. The folder is ``results_dir``, else
  the environment variable ``JAXCAL_RESULTS_DIR``, else
  ``experiments/results/``.

  Returns:
    The path written.
  """
  if results_dir is None:
    results_dir = os.environ.get("JAXCAL_RESULTS_DIR") or RESULTS_DIR
  out_dir = pathlib.Path(results_dir)
  out_dir.mkdir(parents=True, exist_ok=True)
  backend = result.get("backend")
  if backend not in (None, "cpu"):
    name = f"{name}_{backend}"
  path = out_dir / f"{name}.json"
  path.write_text(json.dumps(_jsonable(result), indent=2, sort_keys=False) + "\n")
  return path
