"""Where the optional real data sets live on this machine, and output folders.

jaxcal ships one small set of real predictions (``jaxcal/_data/``). Two larger
data sets are optional and never downloaded: the CIFAR-10/100 logits of 12
models (a folder ``cifar_logits/``, kept in ``shared/data/`` beside a source
checkout) and Fashion-MNIST (the Debian package ``dataset-fashion-mnist``).
Tests, notebooks and experiments all find them through :func:`dataset_dir`,
so one environment variable moves them everywhere at once.

:func:`output_folder` is the one check of a folder that jaxcal writes into (a
report's figures, LoCal Net checkpoints); :func:`atomic_file` writes a file
whole or not at all; :func:`input_file` is the check of a file jaxcal reads
(predictions, a saved recalibrator, a checkpoint) before it is opened.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pathlib
import stat
import tempfile
from collections.abc import Iterator
from typing import IO, Any

__all__ = ["DATASETS", "atomic_file", "dataset_dir", "output_folder", "input_file"]

#: The optional data sets :func:`dataset_dir` knows, with the environment
#: variable that overrides its location.
DATASETS = {
  "cifar_logits": "JAXCAL_DATA",
  "fashion_mnist": "JAXCAL_FASHION_MNIST",
}

#: Where the Debian package ``dataset-fashion-mnist`` installs the IDX files.
FASHION_MNIST_DEFAULT = pathlib.Path("/usr/share/datasets/fashion-mnist")

_HOW_TO_GET = {
  "cifar_logits": (
    "put the shared data folder (it holds cifar_logits/) at ../shared/data beside the "
    "checkout, or set JAXCAL_DATA to that folder"
  ),
  "fashion_mnist": (
    "install it with `apt-get install dataset-fashion-mnist`, or set JAXCAL_FASHION_MNIST "
    "to a folder holding its four IDX files"
  ),
}


def _checkouts() -> list[pathlib.Path]:
  """Source checkouts of jaxcal: the one imported, then any holding the cwd."""
  found = [pathlib.Path(__file__).resolve().parents[2]]
  cwd = pathlib.Path.cwd().resolve()
  for d in (cwd, *cwd.parents):
    if (d / "jaxcal" / "__init__.py").is_file() and d not in found:
      found.append(d)
      break
  return found


def _candidates(name: str) -> list[pathlib.Path]:
  """Places to look for data set ``name``, in order; an environment variable,
  when set, is the only place."""
  if name == "fashion_mnist":
    env = os.environ.get("JAXCAL_FASHION_MNIST")
    return [pathlib.Path(env)] if env else [FASHION_MNIST_DEFAULT]
  env = os.environ.get("JAXCAL_DATA")
  if env:
    return [pathlib.Path(env) / "cifar_logits"]
  shared = os.environ.get("JAXCAL_SHARED")  # older name: the shared/ folder itself
  if shared:
    return [pathlib.Path(shared) / "data" / "cifar_logits"]
  return [root.parent / "shared" / "data" / "cifar_logits" for root in _checkouts()]


def dataset_dir(name: str) -> pathlib.Path:
  """The folder of an optional real data set on this machine.

  The CIFAR logits (``"cifar_logits"``) are looked up in ``$JAXCAL_DATA/cifar_logits``
  when ``JAXCAL_DATA`` is set (``$JAXCAL_SHARED/data/cifar_logits`` for the
  older variable naming the ``shared/`` folder), otherwise in
  ``../shared/data/cifar_logits`` beside the source checkout of the imported
  jaxcal, then beside the checkout that holds the current directory.
  Fashion-MNIST (``"fashion_mnist"``) is looked up in ``$JAXCAL_FASHION_MNIST``
  when set, otherwise in ``/usr/share/datasets/fashion-mnist`` (the Debian
  package ``dataset-fashion-mnist``). A variable that is set is the only place
  looked at, and an empty folder does not count, so pointing the variable at
  an empty folder hides the data set.

  Args:
    name: ``"cifar_logits"`` or ``"fashion_mnist"``.

  Returns:
    The existing folder.

  Raises:
    ValueError: an unknown ``name``.
    FileNotFoundError: the data set is not on this machine; the message lists
      the places looked at and how to provide it.

  Example:
    >>> import os
    >>> from unittest import mock
    >>> from jaxcal.data import dataset_dir
    >>> with mock.patch.dict(os.environ, {"JAXCAL_FASHION_MNIST": "/nonexistent"}):
    ...   dataset_dir("fashion_mnist")
    Traceback (most recent call last):
      ...
    FileNotFoundError: fashion_mnist not found (looked in /nonexistent); install it ...
  """
  if not isinstance(name, str) or name not in DATASETS:  # a list raised "unhashable type"
    raise ValueError(f"name must be one of {sorted(DATASETS)}, got {name!r}")
  places = _candidates(name)
  for path in places:
    if _holds_files(path):
      return path
  looked = ", ".join(str(p) for p in places)
  raise FileNotFoundError(f"{name} not found (looked in {looked}); {_HOW_TO_GET[name]}")


def _holds_files(path: pathlib.Path) -> bool:
  """Whether ``path`` is a folder with something in it (an empty folder hides a data set)."""
  try:
    return path.is_dir() and any(path.iterdir())
  except OSError:  # unreadable: not a data set jaxcal can use
    return False


def output_folder(folder: Any, name: str, *, create: bool = True) -> pathlib.Path:
  """``folder`` as a folder jaxcal can write into, created with its parents.

  Checked before anything is written, so a bad folder fails at once rather
  than after the work (a report's computation, an epoch of training).

  Args:
    folder: a ``str`` or ``os.PathLike`` path.
    name: the argument's name, for the messages.
    create: create the folder now; ``False`` checks only what can be checked
      without creating it (the type, and not a file).

  Returns:
    The folder as a ``pathlib.Path``.

  Raises:
    TypeError: ``folder`` is not a path.
    ValueError: it is a file, cannot be created, or is not writable.

  Example:
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...   output_folder(os.path.join(d, "a", "b"), "out_dir").is_dir()
    True
  """
  if not isinstance(folder, str | os.PathLike):
    raise TypeError(f"{name} must be a folder path, got {type(folder).__name__}")
  path = pathlib.Path(folder)
  if path.exists() and not path.is_dir():
    raise ValueError(f"{name} {str(path)!r} is a file, not a folder")
  if not create:
    return path
  try:
    path.mkdir(parents=True, exist_ok=True)
  except OSError as e:
    raise ValueError(f"{name} {str(path)!r} cannot be created: {e.strerror or e}") from None
  if not os.access(path, os.W_OK | os.X_OK):
    raise ValueError(f"{name} {str(path)!r} is not writable")
  return path


def input_file(path: str | os.PathLike) -> str:
  """``path`` as a string, once it names a regular file jaxcal can open without waiting.

  Opening a named pipe (FIFO) blocks until something writes into it, and a
  device such as ``/dev/zero`` never ends: both are refused before they are
  opened. A missing path or a folder raises as ``open`` would.

  Args:
    path: a ``str`` or ``os.PathLike`` path.

  Returns:
    ``os.fspath(path)``.

  Raises:
    FileNotFoundError: nothing is at ``path``.
    IsADirectoryError: ``path`` is a folder.
    ValueError: ``path`` is a named pipe, a device or a socket.

  Example:
    >>> input_file("/dev/null")
    Traceback (most recent call last):
    ...
    ValueError: /dev/null: not a regular file (a character device); jaxcal reads files only
  """
  p = os.fspath(path)
  mode = os.stat(p).st_mode  # FileNotFoundError as open's; stat never blocks on a pipe
  if stat.S_ISREG(mode):
    return p
  if stat.S_ISDIR(mode):
    raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), p)
  kinds = (
    (stat.S_ISFIFO, "a named pipe"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
  )
  kind = next((k for test, k in kinds if test(mode)), "not a file")
  raise ValueError(f"{p}: not a regular file ({kind}); jaxcal reads files only")


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike, mode: str = "w") -> Iterator[IO[Any]]:
  """An open file whose contents replace ``path`` only once written whole.

  Written to a temporary file in the same folder, then moved over ``path``
  (``os.replace``, atomic on one file system). On any error the temporary
  file is removed and ``path`` is left as it was: a full disk truncated the
  output in place, and with ``--force`` the previous output was already gone.

  The output gets the permissions ``open`` would give it: an existing
  file's own mode (a private 0600 file became 0644), else ``0666`` less the
  umask. A symbolic link is written through to its target, which stays a
  link; the temporary name is short whatever the target's (a 244-character
  name, which ``open`` takes, went past the name limit with a suffix).

  Args:
    path: the file to write.
    mode: ``"w"`` (text) or ``"wb"`` (binary, e.g. for ``np.savez``).

  Raises:
    ValueError: another ``mode`` (``"x"`` and ``"a"`` cannot be atomic
      replacements).

  Example:
    >>> import os, tempfile
    >>> p = os.path.join(tempfile.mkdtemp(), "a.txt")
    >>> with atomic_file(p) as f:
    ...   _ = f.write("done")
    >>> open(p).read()
    'done'
  """
  if mode not in ("w", "wb"):
    raise ValueError(f"atomic_file writes with mode 'w' or 'wb', got {mode!r}")
  path = os.path.realpath(os.fspath(path))  # through symbolic links to the file they name
  fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".jaxcal-", suffix=".tmp")
  try:
    with os.fdopen(fd, mode) as f:
      yield f
    try:  # an existing file keeps its mode; mkstemp's file is private (0600)
      perms = stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
      umask = os.umask(0)  # read (and restore) it
      os.umask(umask)
      perms = 0o666 & ~umask
    os.chmod(tmp, perms)
    os.replace(tmp, path)
  except BaseException:
    with contextlib.suppress(OSError):
      os.unlink(tmp)
    raise
