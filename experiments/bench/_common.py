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
  "clear_caches",
  "cold_first_calls",
  "check_agree",
  "packed_sort_rows",
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
    dict with ``best_s`` (minimum), ``median_s`` (the figure the benchmarks
    compare since 2026-12-01; see :func:`interleaved` for two contenders),
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


def clear_caches() -> None:
  """Clears JAX's compilation caches (nothing without JAX): the next call compiles cold."""
  try:
    import jax
  except ImportError:
    return
  jax.clear_caches()


def cold_first_calls(
  paths: dict[str, tuple[Callable, tuple]], cold: Callable[[str], bool] = lambda name: True
) -> dict[str, tuple[float, Any]]:
  """Each ``fn(*args)``'s first call, timed alone after :func:`clear_caches`, and its result.

  The caches are cleared before the paths ``cold(name)`` selects (so none
  reuses a program an earlier path or benchmark compiled); clearing them
  evicts the programs of the paths before it, so every path is then called
  once more, untimed, before any timed round.

  Returns:
    ``name -> (seconds, result)`` of each first call.
  """
  out = {}
  for k, (fn, a) in paths.items():
    if cold(k):
      clear_caches()
    t0 = time.perf_counter()
    res = _block(fn(*a))
    out[k] = (time.perf_counter() - t0, res)
  for fn, a in paths.values():  # compile again what the clearing evicted
    _block(fn(*a))
  return out


def interleaved(
  paths: dict[str, tuple[Callable, tuple]], repeat: int, *, cold: bool = False
) -> dict[str, dict]:
  """Times each ``fn(*args)`` of ``paths`` call by call in turn, blocking on every result.

  Each path's first call (tracing and compilation) is timed alone first, cold
  with ``cold=True`` (:func:`cold_first_calls`); then ``repeat`` rounds call
  every path once each, starting one path later each round, so the paths
  share the machine's state and none always runs first. Returns ``name ->
  {"median_s", "best_s", "first_call_s", "times_s"}``.
  """

  def once(fn, args) -> float:
    t0 = time.perf_counter()
    _block(fn(*args))
    return time.perf_counter() - t0

  if cold:
    first = {k: t for k, (t, _) in cold_first_calls(paths).items()}
  else:
    first = {k: once(fn, a) for k, (fn, a) in paths.items()}
  times: dict[str, list[float]] = {k: [] for k in paths}
  names = list(paths)
  for r in range(max(1, repeat)):
    for k in names[r % len(names) :] + names[: r % len(names)]:
      fn, a = paths[k]
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


def machine_note(
  load: list[float] | None,
  cpu_count: int | None = None,
  statistic: str = "median of the timed calls",
) -> str:
  """One line on how busy the machine was (the 1-minute load vs its cores).

  ``statistic`` names the figure the benchmark compares (its median, or its
  best, of the timed calls).
  """
  if load is None:
    return "load unknown"
  cores = cpu_count or os.cpu_count() or 1
  if load[0] < 0.5 * cores:
    return (
      f"quiet machine (1-minute load {load[0]} on {cores} cores); both sides measured in "
      f"the same run, {statistic}"
    )
  return (
    f"machine shared with other jobs during the measurement (1-minute load {load[0]} on "
    f"{cores} cores); both sides measured in the same run, {statistic}"
  )


def check_agree(values: dict[str, Any], reference: str, rtol: float, atol: float = 0.0) -> dict:
  """Asserts every contender's value matches ``values[reference]``; returns the differences.

  A fast wrong answer must not pass as a speed-up: each benchmark compares
  the values its contenders computed before it writes a ratio.

  Args:
    values: contender -> its value (a number or an array); ``None`` is skipped.
    reference: the contender the others are compared with.
    rtol, atol: the tolerance, as in ``numpy.testing.assert_allclose``.

  Returns:
    contender -> largest absolute difference from the reference.

  Raises:
    AssertionError: naming the contender whose value differs.
  """
  want = np.asarray(values[reference], np.float64)
  out = {}
  for k, v in values.items():
    if v is None:
      continue
    got = np.asarray(v, np.float64)
    np.testing.assert_allclose(
      got, want, rtol=rtol, atol=atol, err_msg=f"{k} differs from {reference}"
    )
    out[k] = float(np.max(np.abs(got - want))) if got.size else 0.0
  return out


def packed_sort_rows(scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Each row of non-negative float32 ``scores`` (``(..., n)``, contiguous) sorted, with its order.

  The numpy references' sort: one ``np.sort`` of ``(bits << 32) | index``
  keys, 10x faster than a stable argsort for the same order (ties by
  index). Non-negative float32 bit patterns order like their values
  (``-0.0`` would not: softmax outputs are never ``-0.0``); the index needs
  ``n < 2**32``.

  Returns:
    ``(sorted scores, order)``: float32 and ``intp``, shaped like ``scores``.
  """
  n = scores.shape[-1]
  keys = scores.view(np.uint32).astype(np.uint64) << np.uint64(32)
  keys |= np.arange(n, dtype=np.uint64)
  keys.sort(axis=-1)
  order = (keys & np.uint64(0xFFFFFFFF)).astype(np.intp)
  return (keys >> np.uint64(32)).astype(np.uint32).view(np.float32), order


def _git_commit() -> str | None:
  """The repository's commit (``+dirty``: uncommitted changes outside ``experiments/results``)."""
  root = pathlib.Path(__file__).resolve().parents[2]
  try:
    head = subprocess.run(
      ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
    )
    if head.returncode != 0:
      return None
    dirty = subprocess.run(  # the results a benchmark run writes do not count
      [
        "git",
        "-C",
        str(root),
        "status",
        "--porcelain",
        "--untracked-files=no",
        "--",
        ".",
        ":(exclude)experiments/results",
      ],
      capture_output=True,
      text=True,
      timeout=10,
    )
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
  except (OSError, subprocess.SubprocessError):
    return None


def _versions(*names: str) -> dict[str, str | None]:
  """Installed versions of the named distributions (``None`` where absent)."""
  from importlib import metadata

  out: dict[str, str | None] = {}
  for n in names:
    try:
      out[n] = metadata.version(n)
    except metadata.PackageNotFoundError:
      out[n] = None
  return out


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
    "git_commit": _git_commit(),
    "versions": _versions(
      "jaxcal",
      "jax",
      "jaxlib",
      "numpy",
      "scipy",
      "scikit-learn",
      "torch",
      "torchmetrics",
      "netcal",
      "relplot",
    ),
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
    if devs and devs[0].platform == "gpu":  # the CUDA runtime and driver of the run
      try:
        info["gpu_platform_version"] = devs[0].client.platform_version
      except AttributeError:
        pass
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

  The 1-minute load at the end (``load_avg_at_end``) is added when the
  result lacks it.

  Returns:
    The path written.
  """
  if "load_avg_at_end" not in result:
    result = {**result, "load_avg_at_end": cpu_load()}
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
