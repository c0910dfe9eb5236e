"""The Fashion-MNIST IDX gzip parser, on tiny synthetic files (and the real
files' headers when the Debian package is installed)."""

import gzip
import pathlib

import numpy as np
import pytest

from jaxcal._src import fashion_mnist as F


def _idx(arr: np.ndarray, magic_type: int = 0x08) -> bytes:
  head = bytes([0, 0, magic_type, arr.ndim]) + b"".join(
    int(d).to_bytes(4, "big") for d in arr.shape
  )
  return head + arr.astype(np.uint8).tobytes()


def _write(path: pathlib.Path, payload: bytes, compress: bool = True) -> None:
  if compress:
    with gzip.open(path, "wb") as f:
      f.write(payload)
  else:
    path.write_bytes(payload)


@pytest.fixture
def tiny(tmp_path):
  rng = np.random.default_rng(0)
  data = {
    "train_images": rng.integers(0, 256, (5, 28, 28), dtype=np.uint8),
    "train_labels": np.array([0, 9, 3, 3, 1], np.uint8),
    "test_images": rng.integers(0, 256, (3, 28, 28), dtype=np.uint8),
    "test_labels": np.array([2, 2, 7], np.uint8),
  }
  for (split, kind), name in F.FILES.items():
    _write(tmp_path / (name + ".gz"), _idx(data[f"{split}_{kind}"]))
  return tmp_path, data


def test_roundtrip(tiny):
  root, data = tiny
  out = F.load_fashion_mnist(root)
  assert set(out) == set(data)
  for k in data:
    assert out[k].dtype == np.uint8
    np.testing.assert_array_equal(out[k], data[k])


def test_root_as_bytes_or_pathlike(tiny):
  import os

  root, data = tiny
  for r in (os.fsencode(root), str(root)):
    np.testing.assert_array_equal(F.load_fashion_mnist(r)["test_labels"], data["test_labels"])


@pytest.mark.parametrize(
  "root, message",
  [  # pathlib's bare "expected str, bytes or os.PathLike object, not int"
    (3, r"root must be a folder path \(str or os.PathLike\) or None, got 3 \(int\)"),
    (["/tmp"], r"root must be a folder path .*got \['/tmp'\] \(list\)"),
    (3.5, r"root must be a folder path .*got 3.5 \(float\)"),
  ],
)
def test_bad_root_raises(root, message):
  with pytest.raises(ValueError, match=message):
    F.load_fashion_mnist(root)


def test_env_root_and_uncompressed(tiny, monkeypatch):
  root, data = tiny
  name = F.FILES[("test", "labels")]
  (root / (name + ".gz")).unlink()
  _write(root / name, _idx(data["test_labels"]), compress=False)
  monkeypatch.setenv("JAXCAL_FASHION_MNIST", str(root))
  np.testing.assert_array_equal(F.load_fashion_mnist()["test_labels"], data["test_labels"])


def test_header(tiny):
  root, _ = tiny
  assert F.idx_header(root / "train-images-idx3-ubyte.gz") == (2051, (5, 28, 28))
  assert F.idx_header(root / "t10k-labels-idx1-ubyte.gz") == (2049, (3,))


# Each corruption with (a regex of) its own message. The element-type case is
# reported by the magic-number check, which compares all four bytes first.
CORRUPTIONS = {
  "magic": r"train-labels-idx1-ubyte\.gz: IDX magic number 2051 \(0x00000803\), expected 2049",
  "type": r"train-labels-idx1-ubyte\.gz: IDX magic number 3329 \(0x00000d01\), expected 2049",
  "truncated": r"train-images-idx3-ubyte\.gz: header says shape \(5, 28, 28\) \(3920 bytes of "
  r"data\) but the file holds 3913 bytes",
  "padded": r"train-images-idx3-ubyte\.gz: header says shape \(5, 28, 28\) \(3920 bytes of "
  r"data\) but the file holds 3921 bytes",
  "gzip": r"train-images-idx3-ubyte\.gz: corrupt or truncated gzip file \(",
  "count": r"^train split: 5 images but 4 labels$",
  "label_range": r"train-labels-idx1-ubyte\.gz: labels must lie in \[0, 10\), found 10",
  "header": r"train-images-idx3-ubyte\.gz: too short for an IDX header \(2 bytes\)",
  # found by a review helper: train images of 32 x 32 beside test images of 28 x 28 loaded
  "image_size": r"the train images are \(32, 32\) but the test images \(28, 28\)",
}


def test_a_path_that_cannot_be_read_is_not_called_a_corrupt_gzip_file(tmp_path):
  # a folder (or an unreadable file) was reported as "corrupt or truncated gzip file"
  for fn in (F.read_idx, F.idx_header):
    with pytest.raises(ValueError, match=r": cannot be read \(Is a directory\)"):
      fn(tmp_path)
  with pytest.raises(FileNotFoundError):
    F.read_idx(tmp_path / "missing")


@pytest.mark.parametrize("corruption, message", list(CORRUPTIONS.items()), ids=list(CORRUPTIONS))
def test_corrupt_files_raise(tiny, corruption, message):
  root, data = tiny
  lab = root / "train-labels-idx1-ubyte.gz"
  img = root / "train-images-idx3-ubyte.gz"
  if corruption == "magic":  # labels file carrying the images magic
    _write(lab, _idx(data["train_images"]))
  elif corruption == "type":  # element type 0x0D (float) instead of 0x08
    _write(lab, _idx(data["train_labels"], magic_type=0x0D))
  elif corruption == "truncated":
    _write(img, _idx(data["train_images"])[:-7])
  elif corruption == "padded":
    _write(img, _idx(data["train_images"]) + b"\x00")
  elif corruption == "gzip":  # a cut gzip stream
    raw = gzip.compress(_idx(data["train_images"]))
    img.write_bytes(raw[: len(raw) // 2])
  elif corruption == "count":  # 4 labels for 5 images
    _write(lab, _idx(data["train_labels"][:4]))
  elif corruption == "label_range":
    _write(lab, _idx(np.array([0, 1, 10, 3, 3], np.uint8)))
  elif corruption == "header":
    _write(img, b"\x00\x00")
  elif corruption == "image_size":
    _write(img, _idx(np.zeros((5, 32, 32), np.uint8)))
  with pytest.raises(ValueError, match=message):
    F.load_fashion_mnist(root)


def test_bad_header_raises(tiny):
  root, _ = tiny
  p = root / "bad.gz"
  _write(p, b"\x01\x02\x08\x01")
  with pytest.raises(ValueError, match="magic"):
    F.idx_header(p)
  with pytest.raises(ValueError, match="magic"):
    F.read_idx(p)


def test_header_size_beyond_int64_is_named(tmp_path):
  """A header whose shape holds 2^64 bytes says so (an int64 product wrapped to 0: "0 bytes
  of data", or numpy's bare reshape error without the path; found by a review helper)."""
  for name, payload in (("zero.gz", b""), ("sixteen.gz", bytes(16))):
    p = tmp_path / name
    head = bytes([0, 0, 0x08, 3]) + b"".join(d.to_bytes(4, "big") for d in (2**22, 2**21, 2**21))
    _write(p, head + payload)
    with pytest.raises(ValueError, match=f"{name}: header says .* \\(18446744073709551616 bytes"):
      F.read_idx(p)


def test_missing_file(tmp_path):
  with pytest.raises(FileNotFoundError):
    F.load_fashion_mnist(tmp_path)


def test_real_files_headers():
  root = pathlib.Path(F.DEFAULT_ROOT)
  if not (root / "train-images-idx3-ubyte.gz").is_file():
    pytest.skip(f"Fashion-MNIST not installed at {root}")
  expect = {
    ("train", "images"): (2051, (60000, 28, 28)),
    ("train", "labels"): (2049, (60000,)),
    ("test", "images"): (2051, (10000, 28, 28)),
    ("test", "labels"): (2049, (10000,)),
  }
  for key, name in F.FILES.items():
    assert F.idx_header(root / (name + ".gz")) == expect[key]


def test_public_export():
  import jaxcal.data

  assert jaxcal.data.load_fashion_mnist is F.load_fashion_mnist


def test_loaded_arrays_are_writable_copies(tiny):
  """``read_idx`` returns arrays of their own (not read-only views of the file's
  bytes): in-place preprocessing (``images[mask] = 0``) works."""
  root, data = tiny
  out = F.load_fashion_mnist(root)
  for k in data:
    assert out[k].flags.writeable and out[k].flags.owndata
  out["train_images"][0] = 0
  assert not out["train_images"][0].any()
