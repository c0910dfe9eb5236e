"""Where the optional real data sets live on this machine.

jaxcal ships one small set of real predictions (``jaxcal/_data/``). Two larger
data sets are optional and never downloaded: the CIFAR-10/100 logits of 12
models (a folder ``cifar_logits/``, kept in ``shared/data/`` beside a source
checkout) and Fashion-MNIST (the Debian package ``dataset-fashion-mnist``).
Tests, notebooks and experiments all find them through :func:`dataset_dir`,
so one environment variable moves them everywhere at once.
"""

from __future__ import annotations

import os
import pathlib

__all__ = ["DATASETS", "dataset_dir"]

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
  looked at, so pointing it at an empty folder hides the data set.

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
  if name not in DATASETS:
    raise ValueError(f"name must be one of {sorted(DATASETS)}, got {name!r}")
  places = _candidates(name)
  for path in places:
    if path.is_dir():
      return path
  looked = ", ".join(str(p) for p in places)
  raise FileNotFoundError(f"{name} not found (looked in {looked}); {_HOW_TO_GET[name]}")
