"""Fashion-MNIST from its IDX gzip files (no network, no pickle).

The IDX format (LeCun et al.): a 4-byte magic number ``0x00 0x00 T D`` with
``T`` the element type (``0x08`` = unsigned byte) and ``D`` the number of
dimensions, then ``D`` big-endian uint32 sizes, then the data in C order.
Fashion-MNIST uses magic 2051 (``0x00000803``) for images ``(n, 28, 28)`` and
2049 (``0x00000801``) for labels ``(n,)``; the Debian package
``dataset-fashion-mnist`` installs them under
``/usr/share/datasets/fashion-mnist/``.
"""

from __future__ import annotations

import gzip
import math
import os
import pathlib
import zlib

import numpy as np

from jaxcal._src.paths import FASHION_MNIST_DEFAULT, dataset_dir

__all__ = ["DEFAULT_ROOT", "FILES", "idx_header", "read_idx", "load_fashion_mnist"]

#: Where the Debian package ``dataset-fashion-mnist`` puts the files; the
#: environment variable ``JAXCAL_FASHION_MNIST`` overrides it (see
#: ``jaxcal.data.dataset_dir``).
DEFAULT_ROOT = str(FASHION_MNIST_DEFAULT)

#: (split, kind) -> file name, the names used by the original release.
FILES = {
  ("train", "images"): "train-images-idx3-ubyte",
  ("train", "labels"): "train-labels-idx1-ubyte",
  ("test", "images"): "t10k-images-idx3-ubyte",
  ("test", "labels"): "t10k-labels-idx1-ubyte",
}

_IMAGE_MAGIC = 2051
_LABEL_MAGIC = 2049
_NUM_CLASSES = 10


def _read_bytes(path: pathlib.Path) -> bytes:
  try:
    if path.suffix == ".gz":
      with gzip.open(path, "rb") as f:
        return f.read()
    return path.read_bytes()
  except (gzip.BadGzipFile, EOFError, zlib.error) as e:
    raise ValueError(f"{path}: corrupt or truncated gzip file ({e})") from None
  except FileNotFoundError:
    raise
  except OSError as e:  # a folder, no permission, an I/O error: not the file's content
    raise ValueError(f"{path}: cannot be read ({e.strerror or e})") from None


def idx_header(path: str | os.PathLike) -> tuple[int, tuple[int, ...]]:
  """``(magic, shape)`` of an IDX file (``.gz`` or raw), reading only its header.

  Raises:
    ValueError: a header that is not IDX, a corrupt gzip stream, or a path
      that cannot be read (a folder, no permission).
    FileNotFoundError: no such file.
  """
  path = pathlib.Path(path)
  try:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
      head = f.read(4)
      if len(head) < 4 or head[:2] != b"\x00\x00" or head[3] == 0:
        raise ValueError(f"{path}: bad IDX magic number {head.hex()}")
      dims = f.read(4 * head[3])
  except (EOFError, zlib.error, gzip.BadGzipFile) as e:
    raise ValueError(f"{path}: corrupt or truncated gzip file ({e})") from None
  except FileNotFoundError:
    raise
  except OSError as e:  # a folder, no permission, an I/O error (as read_idx says)
    raise ValueError(f"{path}: cannot be read ({e.strerror or e})") from None
  if len(dims) < 4 * head[3]:
    raise ValueError(f"{path}: truncated IDX header")
  shape = tuple(int.from_bytes(dims[4 * k : 4 * k + 4], "big") for k in range(head[3]))
  return int.from_bytes(head, "big"), shape


def read_idx(path: str | os.PathLike, expected_magic: int | None = None) -> np.ndarray:
  """Reads one IDX file (``.gz`` or raw) of unsigned bytes.

  Args:
    path: the file.
    expected_magic: if given, the magic number the file must carry
      (2051 images, 2049 labels).

  Returns:
    A read-only-safe ``uint8`` array of the shape in the header.

  Raises:
    ValueError: bad magic number, unsupported element type, or a data size
      that does not match the header (truncated or padded file), a
      corrupt gzip stream, or a path that cannot be read (a folder, no
      permission).
    FileNotFoundError: the file does not exist.

  Example:
    >>> import gzip, os, tempfile, numpy as np
    >>> d = tempfile.mkdtemp(); p = os.path.join(d, "l.gz")
    >>> with gzip.open(p, "wb") as f:
    ...   _ = f.write(bytes([0, 0, 8, 1, 0, 0, 0, 3, 4, 1, 9]))
    >>> read_idx(p, 2049).tolist()
    [4, 1, 9]
  """
  path = pathlib.Path(path)
  raw = _read_bytes(path)
  if len(raw) < 4:
    raise ValueError(f"{path}: too short for an IDX header ({len(raw)} bytes)")
  magic = int.from_bytes(raw[:4], "big")
  zero, dtype_code, ndim = int.from_bytes(raw[:2], "big"), raw[2], raw[3]
  if zero != 0 or ndim == 0:
    raise ValueError(f"{path}: bad IDX magic number {magic:#010x}")
  if expected_magic is not None and magic != expected_magic:
    raise ValueError(
      f"{path}: IDX magic number {magic} ({magic:#010x}), expected "
      f"{expected_magic} ({expected_magic:#010x})"
    )
  if dtype_code != 0x08:
    raise ValueError(f"{path}: IDX element type {dtype_code:#04x} is not unsigned byte (0x08)")
  header = 4 + 4 * ndim
  if len(raw) < header:
    raise ValueError(f"{path}: truncated IDX header")
  shape = tuple(int.from_bytes(raw[4 + 4 * k : 8 + 4 * k], "big") for k in range(ndim))
  size = math.prod(shape)  # Python ints: an int64 product wrapped (2^64 bytes read as 0)
  if len(raw) - header != size:
    raise ValueError(
      f"{path}: header says shape {shape} ({size} bytes of data) but the "
      f"file holds {len(raw) - header} bytes"
    )
  return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(shape).copy()


def _find(root: pathlib.Path, name: str) -> pathlib.Path:
  for cand in (root / (name + ".gz"), root / name):
    if cand.is_file():
      return cand
  raise FileNotFoundError(
    f"Fashion-MNIST file {name}(.gz) not found in {root} "
    "(install the Debian package dataset-fashion-mnist or pass root=)"
  )


def load_fashion_mnist(root: str | os.PathLike | None = None) -> dict[str, np.ndarray]:
  """Loads Fashion-MNIST from its four IDX (gzip) files.

  Args:
    root: folder holding ``train-images-idx3-ubyte.gz``,
      ``train-labels-idx1-ubyte.gz``, ``t10k-images-idx3-ubyte.gz`` and
      ``t10k-labels-idx1-ubyte.gz`` (uncompressed files are accepted too).
      Default: ``$JAXCAL_FASHION_MNIST`` or ``/usr/share/datasets/fashion-mnist``.

  Returns:
    ``{"train_images": (60000, 28, 28) uint8, "train_labels": (60000,) uint8,
    "test_images": (10000, 28, 28) uint8, "test_labels": (10000,) uint8}``
    (sizes as stored in the files).

  Raises:
    FileNotFoundError: a file is missing.
    ValueError: ``root`` not a path (or ``None``); a corrupt file: wrong
      magic number, size not matching the header, images not 3-d,
      image/label counts that differ, or labels outside ``0..9``.

  Example:
    >>> data = load_fashion_mnist()  # doctest: +SKIP
    >>> data["train_images"].shape, data["test_labels"].shape  # doctest: +SKIP
    ((60000, 28, 28), (10000,))

  Reference: Xiao, Rasul & Vollgraf (2017), Fashion-MNIST; the file format of
  LeCun et al.'s MNIST (IDX).
  """
  if root is None:
    root = dataset_dir("fashion_mnist")
  elif isinstance(root, str | bytes | os.PathLike):
    root = pathlib.Path(os.fsdecode(root))
  else:  # pathlib's bare "expected str, bytes or os.PathLike object, not int"
    raise ValueError(
      f"root must be a folder path (str or os.PathLike) or None, got {root!r} "
      f"({type(root).__name__})"
    )
  out: dict[str, np.ndarray] = {}
  for split in ("train", "test"):
    ipath = _find(root, FILES[(split, "images")])
    lpath = _find(root, FILES[(split, "labels")])
    images = read_idx(ipath, _IMAGE_MAGIC)
    labels = read_idx(lpath, _LABEL_MAGIC)
    if images.ndim != 3:
      raise ValueError(f"{ipath}: images must be 3-d (n, rows, cols), got shape {images.shape}")
    if labels.ndim != 1:
      raise ValueError(f"{lpath}: labels must be 1-d, got shape {labels.shape}")
    if images.shape[0] != labels.shape[0]:
      raise ValueError(f"{split} split: {images.shape[0]} images but {labels.shape[0]} labels")
    if labels.size and int(labels.max()) >= _NUM_CLASSES:
      raise ValueError(
        f"{lpath}: labels must lie in [0, {_NUM_CLASSES}), found {int(labels.max())}"
      )
    out[f"{split}_images"] = images
    out[f"{split}_labels"] = labels
  # a model trained on one image size cannot read the other: one set is not Fashion-MNIST's
  if out["train_images"].shape[1:] != out["test_images"].shape[1:]:
    raise ValueError(
      f"the train images are {out['train_images'].shape[1:]} but the test images "
      f"{out['test_images'].shape[1:]}: the files are not one data set"
    )
  return out
