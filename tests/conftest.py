"""Shared fixtures.

The optional real data sets (the CIFAR logits in ../shared/data, Fashion-MNIST)
are found by ``jaxcal.data.dataset_dir``, as in the notebooks and experiments;
a test that needs one takes the fixture ``cifar_dir`` or ``fashion_mnist_dir``
and is skipped, with the reason in pytest's ``-ra`` summary, when it is absent.
"""

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile

# One persistent compilation cache for the whole test run, shared by the xdist
# workers and the processes the tests start (CLI, notebooks, multi-process),
# so a program that several of them compile (the report's bootstrap programs,
# above all) is compiled once. It must be set before JAX is imported; a cache
# the user points JAX at already is used as it is, and one made here is
# removed at the end of the run.
_OWN_CACHE = None  # the folder this process made (only the first pytest process makes one)
if not os.environ.get("JAX_COMPILATION_CACHE_DIR"):
  _OWN_CACHE = tempfile.mkdtemp(prefix="jaxcal-test-jit-")
  os.environ["JAX_COMPILATION_CACHE_DIR"] = _OWN_CACHE
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.2")

# The library never relies on numpy's implicit rank promotion (``v * m`` for
# ``v (C,)`` and ``m (n, C)``: it writes ``numerics.lift(v, 2) * m``), so it
# runs in training code that sets ``jax_numpy_rank_promotion="raise"`` (as
# JAX's own tests do). The tests run so, and so do the processes they start
# (CLI, multi-process workers), which inherit the variable; the notebooks'
# kernels run with JAX's default, for their code is a user's.
os.environ.setdefault("JAX_NUMPY_RANK_PROMOTION", "raise")

# XLA:CPU compiles the tests with two settings that make compilation faster
# and the compiled programs slower, which the tests do not time: its older
# (LLVM IR) fusion emitters and LLVM's lowest optimisation level. The suite is
# almost all compilation: a fresh-clone CI on 2 cores took 716 s of pytest
# with the first against 922-943 s with XLA's defaults, and the second takes a
# further third off (the whole suite on 2 workers: 949 -> 622 s). Large
# arrays run several times slower with it (experiments/bench/xla_emitters.py),
# which the tests barely have. Both compute the numbers of XLA's defaults
# (tests/test_xla_emitters.py). ``JAXCAL_TEST_XLA_DEFAULTS=1`` tests with
# XLA's own defaults. Set in the first pytest process, before JAX starts;
# the xdist workers, notebook kernels (but those of
# tests/test_notebooks.py's XLA_FLAGS_LEFT_OUT) and child processes inherit it
# (tests/_cpu_devices.py adds to it). A flag this jaxlib does not know is
# left out (an unknown flag in XLA_FLAGS aborts the process), and so is the
# optimisation level where JAX may run on an accelerator (it is not a CPU-only
# flag: the GPU tests run as users' programs do).
FAST_COMPILE_FLAGS = ("--xla_cpu_use_fusion_emitters=false", "--xla_backend_optimization_level=0")
CPU_ONLY_FLAGS = ("--xla_backend_optimization_level=0",)


def with_xla_flag(flag: str) -> str:
  """This process's ``XLA_FLAGS`` with ``flag`` added."""
  return f"{os.environ.get('XLA_FLAGS', '')} {flag}".strip()


def _xla_accepts(flag: str) -> bool:
  """Whether this jaxlib knows ``flag`` (an unknown flag in XLA_FLAGS aborts the process)."""
  env = dict(os.environ, XLA_FLAGS=with_xla_flag(flag), JAX_PLATFORMS="cpu")
  code = "import jax.numpy as jnp; jnp.zeros(2).block_until_ready()"
  try:
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=120)
    return run.returncode == 0
  except (OSError, subprocess.SubprocessError):
    return False


def _cpu_only() -> bool:
  """Whether JAX runs on the CPU only: ``JAX_PLATFORMS=cpu``, or no accelerator plugin installed."""
  if os.environ.get("JAX_PLATFORMS", "").replace(" ", "").lower() == "cpu":
    return True
  import importlib.metadata
  import importlib.util

  if importlib.util.find_spec("libtpu") or importlib.util.find_spec("jax_plugins"):
    return False
  return not importlib.metadata.entry_points(group="jax_plugins")


#: JAXCAL_TEST_XLA_DEFAULTS=1: the tests compile with XLA's own defaults.
XLA_DEFAULTS = os.environ.get("JAXCAL_TEST_XLA_DEFAULTS", "").lower() in ("1", "true", "yes")

if not XLA_DEFAULTS and "PYTEST_XDIST_WORKER" not in os.environ:
  _CPU_ONLY = _cpu_only()
  _wanted = [
    f
    for f in FAST_COMPILE_FLAGS
    if (_CPU_ONLY or f not in CPU_ONLY_FLAGS)
    and f.split("=")[0] not in os.environ.get("XLA_FLAGS", "")
  ]
  # one probe process for all of them (0.75 s each); one per flag only if that fails
  if _wanted and not _xla_accepts(" ".join(_wanted)):
    _wanted = [f for f in _wanted if _xla_accepts(f)]
  for _flag in _wanted:
    os.environ["XLA_FLAGS"] = with_xla_flag(_flag)

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from jaxcal.data import dataset_dir  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
  """Drops JAX's compiled programs after each test module.

  Each XLA:CPU executable holds about three memory maps, and an xdist worker
  compiles thousands of programs. Kept for the whole run, they neared the
  kernel's limit of maps per process (``vm.max_map_count``, 65,530 by
  default), where XLA segfaulted in a compilation or a cache write. Cleared
  after each module, a worker peaked at about 24,000 maps in CI.
  """
  yield
  jax.clear_caches()


def pytest_unconfigure(config):
  """Removes the run's compilation cache (in the process that made it)."""
  if _OWN_CACHE:
    shutil.rmtree(_OWN_CACHE, ignore_errors=True)


def _dataset_or_skip(name):
  try:
    return dataset_dir(name)
  except FileNotFoundError as e:
    pytest.skip(str(e))


@pytest.fixture(scope="session")
def cifar_dir():
  """``.../cifar_logits`` (one folder per setting), or skip."""
  return _dataset_or_skip("cifar_logits")


@pytest.fixture(scope="session")
def fashion_mnist_dir():
  """The folder of the Fashion-MNIST IDX files, or skip."""
  return _dataset_or_skip("fashion_mnist")


def load_cifar(setting: str, split: str = "test"):
  """(logits float32, labels int64) of one CIFAR setting, or skip."""
  d = _dataset_or_skip("cifar_logits") / setting
  if not d.is_dir():
    pytest.skip(f"CIFAR setting {setting} not found at {d}")
  return np.load(d / f"{split}_logits.npy"), np.load(d / f"{split}_labels.npy")


def softmax64(z):
  z = np.asarray(z, np.float64)
  z = z - z.max(axis=1, keepdims=True)
  e = np.exp(z)
  return e / e.sum(axis=1, keepdims=True)


def assert_same_under_x64(make):
  """``make()`` gives the same arrays (dtypes and values) with and without x64; returns x64's."""
  plain = make()
  with jax.enable_x64(True):
    wide = make()
  for a, b in zip(plain, wide, strict=True):
    assert a.dtype == b.dtype, (a.dtype, b.dtype)
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  return wide


#: The events of a jit cache miss: a trace (also when the persistent cache then
#: serves the compiled program) and a backend compile.
_NEW_PROGRAM_EVENTS = (
  "/jax/core/compile/jaxpr_trace_duration",
  "/jax/core/compile/backend_compile_duration",
)


@contextlib.contextmanager
def new_programs():
  """Records the ``with`` block's traces and compiles: yields the list of their events.

  Each entry is one of ``_NEW_PROGRAM_EVENTS`` (a jit cache miss traces; a
  program that the persistent compilation cache does not serve compiles too).
  The listener is removed when the block ends.
  """
  from jax._src import monitoring

  events = []

  def listen(event, duration, **kwargs):
    if event in _NEW_PROGRAM_EVENTS:
      events.append(event)

  jax.monitoring.register_event_duration_secs_listener(listen)
  try:
    yield events
  finally:
    monitoring.unregister_event_duration_listener(listen)


@contextlib.contextmanager
def no_new_programs():
  """Asserts that the ``with`` block traces and compiles nothing (every jit cache hits).

  Counts traces as well as compiles, so a program that the persistent
  compilation cache would serve still counts as new.
  """
  with new_programs() as events:
    yield events
  assert not events, f"{len(events)} traces or compiles: {sorted(set(events))}"


def pytest_collection_modifyitems(config, items):
  """Under CI (CI=true) skip tests marked slow; each has a fast twin."""
  if os.environ.get("CI", "").lower() not in ("1", "true", "yes"):
    return
  skip = pytest.mark.skip(reason="slow: skipped under CI=true (a faster test covers it)")
  for item in items:
    if "slow" in item.keywords:
      item.add_marker(skip)
