"""Where the optional real data sets are found (``jaxcal.data.dataset_dir``), and output folders."""

import os
import pathlib

import pytest

from jaxcal._src import fashion_mnist, paths
from jaxcal.data import dataset_dir

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture
def no_env(monkeypatch):
  for var in ("JAXCAL_DATA", "JAXCAL_SHARED", "JAXCAL_FASHION_MNIST"):
    monkeypatch.delenv(var, raising=False)
  return monkeypatch


def test_jaxcal_data_is_the_only_place_when_set(no_env, tmp_path):
  (tmp_path / "cifar_logits").mkdir()
  (tmp_path / "cifar_logits" / "README").touch()
  no_env.setenv("JAXCAL_DATA", str(tmp_path))
  assert dataset_dir("cifar_logits") == tmp_path / "cifar_logits"
  no_env.setenv("JAXCAL_DATA", str(tmp_path / "empty"))
  with pytest.raises(FileNotFoundError, match=r"cifar_logits not found \(looked in .*empty"):
    dataset_dir("cifar_logits")


def test_older_jaxcal_shared_names_the_shared_folder(no_env, tmp_path):
  (tmp_path / "data" / "cifar_logits").mkdir(parents=True)
  (tmp_path / "data" / "cifar_logits" / "README").touch()
  no_env.setenv("JAXCAL_SHARED", str(tmp_path))
  assert dataset_dir("cifar_logits") == tmp_path / "data" / "cifar_logits"
  no_env.setenv("JAXCAL_DATA", str(tmp_path / "elsewhere"))  # JAXCAL_DATA wins
  with pytest.raises(FileNotFoundError, match="elsewhere"):
    dataset_dir("cifar_logits")


def test_an_empty_folder_hides_a_data_set(no_env, tmp_path):
  """README: pointing a variable at an empty folder hides the data set. It
  did not for Fashion-MNIST (the variable names the folder itself): the
  empty folder was returned, and the tests needing the data failed inside the
  loader instead of skipping."""
  (tmp_path / "fmnist").mkdir()
  no_env.setenv("JAXCAL_FASHION_MNIST", str(tmp_path / "fmnist"))
  with pytest.raises(FileNotFoundError, match=r"fashion_mnist not found \(looked in .*fmnist\)"):
    dataset_dir("fashion_mnist")
  (tmp_path / "data" / "cifar_logits").mkdir(parents=True)
  no_env.setenv("JAXCAL_DATA", str(tmp_path / "data"))
  with pytest.raises(FileNotFoundError, match="cifar_logits not found"):
    dataset_dir("cifar_logits")
  (tmp_path / "fmnist" / "t10k-labels-idx1-ubyte.gz").touch()
  assert dataset_dir("fashion_mnist") == tmp_path / "fmnist"


def test_default_is_shared_data_beside_the_checkout(no_env, tmp_path):
  first = paths._candidates("cifar_logits")[0]
  assert first == ROOT.parent / "shared" / "data" / "cifar_logits"
  # a checkout holding the working directory is looked at too (a non-editable install)
  other = tmp_path / "clone"
  (other / "jaxcal").mkdir(parents=True)
  (other / "jaxcal" / "__init__.py").touch()
  (other / "notebooks").mkdir()
  no_env.chdir(other / "notebooks")
  assert tmp_path / "shared" / "data" / "cifar_logits" in paths._candidates("cifar_logits")


def test_only_a_folder_is_a_data_set_and_only_a_package_a_checkout(no_env, tmp_path):
  (tmp_path / "cifar_logits").write_text("not a folder")
  no_env.setenv("JAXCAL_DATA", str(tmp_path))
  with pytest.raises(FileNotFoundError, match="cifar_logits not found"):
    dataset_dir("cifar_logits")
  # a folder named jaxcal without __init__.py (e.g. notebooks/jaxcal/) is no checkout
  (tmp_path / "clone" / "jaxcal").mkdir(parents=True)
  no_env.delenv("JAXCAL_DATA")
  no_env.chdir(tmp_path / "clone")
  assert tmp_path / "shared" / "data" / "cifar_logits" not in paths._candidates("cifar_logits")


def test_missing_data_message_says_how_to_provide_it(no_env, tmp_path):
  no_env.setenv("JAXCAL_FASHION_MNIST", str(tmp_path / "none"))
  with pytest.raises(FileNotFoundError, match="apt-get install dataset-fashion-mnist"):
    dataset_dir("fashion_mnist")
  no_env.setenv("JAXCAL_DATA", str(tmp_path / "none"))
  with pytest.raises(FileNotFoundError, match="set JAXCAL_DATA"):
    dataset_dir("cifar_logits")


def test_fashion_mnist_default_and_override(no_env, tmp_path):
  assert paths._candidates("fashion_mnist") == [pathlib.Path(fashion_mnist.DEFAULT_ROOT)]
  no_env.setenv("JAXCAL_FASHION_MNIST", str(tmp_path))
  (tmp_path / "train-images-idx3-ubyte.gz").touch()
  assert dataset_dir("fashion_mnist") == tmp_path


def test_load_fashion_mnist_uses_the_same_lookup(no_env, tmp_path):
  no_env.setenv("JAXCAL_FASHION_MNIST", str(tmp_path / "hidden"))
  with pytest.raises(FileNotFoundError, match="fashion_mnist not found"):
    fashion_mnist.load_fashion_mnist()


def test_unknown_name():
  with pytest.raises(ValueError, match=r"name must be one of \['cifar_logits', 'fashion_mnist'\]"):
    dataset_dir("mnist")
  for bad in (["cifar_logits"], None, b"cifar_logits"):  # a list: "unhashable type: 'list'"
    with pytest.raises(ValueError, match=r"name must be one of .*, got "):
      dataset_dir(bad)


def test_output_folder_creates_parents_and_refuses_what_it_cannot_write(tmp_path, monkeypatch):
  made = paths.output_folder(tmp_path / "a" / "b", "out_dir")
  assert made == tmp_path / "a" / "b" and made.is_dir()
  assert paths.output_folder(str(made), "out_dir") == made  # an existing folder is fine
  assert not paths.output_folder(tmp_path / "later", "out_dir", create=False).exists()
  (tmp_path / "file").write_text("")
  cases = [
    (3, {}, TypeError, "out_dir must be a folder path, got int"),
    (b"bytes", {}, TypeError, "out_dir must be a folder path, got bytes"),
    (tmp_path / "file", {}, ValueError, r"out_dir '.*file' is a file, not a folder"),
    (tmp_path / "file", {"create": False}, ValueError, "is a file, not a folder"),
    (tmp_path / "file" / "sub", {}, ValueError, r"out_dir '.*sub' cannot be created"),
  ]
  for folder, kw, exc, match in cases:
    with pytest.raises(exc, match=match):
      paths.output_folder(folder, "out_dir", **kw)
  # a folder without write permission (simulated: root may write anywhere)
  monkeypatch.setattr(paths.os, "access", lambda path, mode: False)
  with pytest.raises(ValueError, match=r"out_dir '.*b' is not writable"):
    paths.output_folder(made, "out_dir")


def test_atomic_file_replaces_whole_or_leaves_the_old_file(tmp_path):
  # the command line wrote its outputs in place: a full disk left a truncated .npz and,
  # with --force, the previous output was already gone
  import numpy as np

  from jaxcal._src.paths import atomic_file

  p = tmp_path / "out.npz"
  p.write_bytes(b"old")
  with pytest.raises(RuntimeError), atomic_file(p, "wb") as f:
    f.write(b"half of the new")
    raise RuntimeError("disk full")
  assert p.read_bytes() == b"old" and sorted(x.name for x in tmp_path.iterdir()) == ["out.npz"]
  with atomic_file(p, "wb") as f:
    np.savez(f, a=np.arange(3))
  assert np.load(p)["a"].tolist() == [0, 1, 2]
  umask = os.umask(0)
  os.umask(umask)
  assert p.stat().st_mode & 0o777 == 0o666 & ~umask  # as open() makes it, not mkstemp's 0600
  assert sorted(x.name for x in tmp_path.iterdir()) == ["out.npz"]


def test_atomic_file_keeps_modes_links_and_long_names(tmp_path):
  """As ``open(path, "w")`` would (found by a review helper): an existing private file stays
  0600 (it became 0644), a symbolic link is written through and stays a link (it was replaced
  by a plain file), a 244-character name is written (the temporary name went past the limit),
  and modes that cannot replace atomically are refused ("x" overwrote, "a" dropped the old)."""
  from jaxcal._src.paths import atomic_file

  private = tmp_path / "private.npz"
  private.write_bytes(b"old")
  private.chmod(0o600)
  with atomic_file(private, "wb") as f:
    f.write(b"new")
  assert private.read_bytes() == b"new" and private.stat().st_mode & 0o777 == 0o600
  target, link = tmp_path / "target.txt", tmp_path / "link.txt"
  target.write_text("T")
  link.symlink_to(target)
  with atomic_file(link) as f:
    f.write("new")
  assert link.is_symlink() and target.read_text() == "new"
  long = tmp_path / ("r" * 240 + ".npz")
  with atomic_file(long, "wb") as f:
    f.write(b"x")
  assert long.read_bytes() == b"x"
  for mode in ("x", "a", "r"):
    with pytest.raises(ValueError, match=f"mode 'w' or 'wb', got '{mode}'"):
      with atomic_file(tmp_path / "m.txt", mode):
        pass
  assert sorted(x.name for x in tmp_path.iterdir() if x.name.startswith(".")) == []


def test_atomic_file_gives_a_new_file_the_mode_open_would(tmp_path):
  """A new file gets ``0666`` less the umask, as ``open`` gives it (not the private
  0600 of the temporary file it is written to)."""
  from jaxcal._src.paths import atomic_file

  old = os.umask(0o022)
  try:
    with atomic_file(tmp_path / "new.txt") as f:
      f.write("x")
    os.umask(0o007)
    with atomic_file(tmp_path / "group.npz", "wb") as f:
      f.write(b"x")
  finally:
    os.umask(old)
  assert (tmp_path / "new.txt").stat().st_mode & 0o777 == 0o644
  assert (tmp_path / "group.npz").stat().st_mode & 0o777 == 0o660
