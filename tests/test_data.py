"""jaxcal.data: loading without pickle, the embedded default, synthetic truth."""

import io
import struct
import zipfile

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcal import data, metrics, scores
from jaxcal._src.data import _load_split


def test_default_predictions_are_the_shared_cifar_logits(cifar_dir):
  x, y = data.default_predictions("test")
  ref_x = np.load(cifar_dir / "cifar10_resnet110" / "test_logits.npy")
  ref_y = np.load(cifar_dir / "cifar10_resnet110" / "test_labels.npy")
  np.testing.assert_array_equal(x, ref_x)
  np.testing.assert_array_equal(y, ref_y)
  xv, yv = data.default_predictions("val")
  assert xv.shape == (5000, 10) and yv.dtype == np.int32


def test_load_layouts(tmp_path):
  rng = np.random.default_rng(0)
  z = rng.normal(size=(20, 4)).astype(np.float32)
  y = rng.integers(0, 4, 20)
  np.savez(tmp_path / "a.npz", logits=z, labels=y)
  np.savez(tmp_path / "a,b.npz", logits=z, labels=y)  # a comma in an existing file's name
  np.savez(tmp_path / "b.npz", val_logits=z, val_labels=y, test_logits=2 * z, test_labels=y)
  (tmp_path / "dir").mkdir()
  np.save(tmp_path / "dir" / "test_logits.npy", z)
  np.save(tmp_path / "dir" / "test_labels.npy", y)
  np.save(tmp_path / "s.npy", z)
  np.save(tmp_path / "l.npy", y.astype(np.float64))
  np.savez(tmp_path / "y.npz", probs=np.asarray(jax.nn.softmax(z)), y=y)  # labels named y
  (tmp_path / "one").mkdir()  # a folder holding one .npz and no .npy
  np.savez(tmp_path / "one" / "only.npz", test_logits=z, test_labels=y)
  for path, expect in (
    (tmp_path / "a.npz", z),
    (tmp_path / "a,b.npz", z),
    (tmp_path / "b.npz", 2 * z),
    (tmp_path / "dir", z),
    (f"{tmp_path / 's.npy'},{tmp_path / 'l.npy'}", z),
    (tmp_path / "y.npz", jax.nn.softmax(z)),
    (tmp_path / "one", z),
  ):
    xx, yy = data.load_predictions(path)
    np.testing.assert_array_equal(xx, expect)
    np.testing.assert_array_equal(yy, y)
  xx, _ = data.load_predictions(tmp_path / "b.npz", split="val")
  np.testing.assert_array_equal(xx, z)
  # which split was read: a file of one data set gives it for any split, and says so
  assert data.load_split(tmp_path / "b.npz", "val")[2]
  assert not data.load_split(tmp_path / "a.npz", "val")[2]
  # scores of a split never pair with unsplit labels
  np.savez(tmp_path / "mixed.npz", test_logits=z, labels=y)
  with pytest.raises(
    ValueError, match="found 'test_logits' but no labels array \\('test_labels'\\)"
  ):
    data.load_predictions(tmp_path / "mixed.npz")
  p = jax.nn.softmax(z)
  assert data.looks_like_probs(np.asarray(p)) and not data.looks_like_probs(z)
  # boolean scores (hard one-hot predictions) are real numbers: 0.0 and 1.0
  hard = np.eye(4, dtype=bool)[y]
  np.savez(tmp_path / "hard.npz", probs=hard, labels=y)
  xx, yy = data.load_predictions(tmp_path / "hard.npz")
  assert xx.dtype == np.float32
  np.testing.assert_array_equal(xx, hard.astype(np.float32))


def test_a_split_of_a_file_that_also_holds_unsplit_arrays_is_that_split(tmp_path):
  # test_probs with unsplit logits: the loop over score names took "logits" first
  rng = np.random.default_rng(0)
  p = rng.dirichlet(np.ones(3), 5).astype(np.float32)
  path = tmp_path / "mixed.npz"
  np.savez(
    path,
    test_probs=p,
    test_labels=np.arange(5) % 3,
    logits=np.ones((8, 3)),
    labels=np.zeros(8, int),
  )
  x, y, own = data.load_split(str(path), "test")
  assert own and x.shape == (5, 3) and y.tolist() == [0, 1, 2, 0, 1]
  x, _, own = data.load_split(str(path), "val")  # no val_*: the file's one data set
  assert not own and x.shape == (8, 3)


def test_load_refuses_probabilities_named_logits(tmp_path):
  """Softmax outputs saved as ``logits`` were softmaxed again: the CLI report's NLL 1.52
  and Brier 0.675 for 0.190 and 0.0838, no error (found by a review helper); float64
  ones were shifted by their row maximum first, which hid what they were."""
  x, y = data.default_predictions()
  p = np.asarray(jax.nn.softmax(jnp.asarray(x[:200]), axis=-1))
  for dtype in (np.float32, np.float64):
    for name in ("logits", "test_logits"):
      path = tmp_path / f"{name}_{np.dtype(dtype).name}.npz"
      np.savez(path, **{name: p.astype(dtype), name.replace("logits", "labels"): y[:200]})
      for shift in (False, True):
        with pytest.raises(ValueError, match=r"scores named 'logits' are probabilities"):
          _load_split(str(path), "test", shift_logits=shift)
      with pytest.raises(ValueError, match=r"save them as 'probs'"):
        data.load_predictions(path)
  # float64 probabilities whose last column is 1 - the rest hold -2e-16 entries: they had
  # skipped a [0, 1] pre-check of float64 files (found by the session's reread)
  rng = np.random.default_rng(0)
  q = rng.dirichlet([0.5] * 3, 1000)
  q[:500, 2] = 0.0
  q /= q.sum(1, keepdims=True)
  q[:, -1] = 1.0 - q[:, :-1].sum(1)
  assert q.min() < 0
  np.savez(tmp_path / "neg64.npz", logits=q, labels=np.arange(1000) % 3)
  with pytest.raises(ValueError, match=r"scores named 'logits' are probabilities"):
    _load_split(str(tmp_path / "neg64.npz"), "test", shift_logits=True)
  np.savez(tmp_path / "shifted.npz", logits=p + 1.0, labels=y[:200])  # the way out it names
  assert data.load_predictions(tmp_path / "shifted.npz")[0].shape == (200, 10)
  np.savez(tmp_path / "probs.npz", probs=p, labels=y[:200])
  assert _load_split(str(tmp_path / "probs.npz"), "test")[3] == "probs"


def test_load_refuses_what_it_would_have_to_guess_or_distort(tmp_path):
  z = np.arange(12.0).reshape(6, 2)
  y = np.array([0, 1, 0, 1, 0, 1])
  np.savez(tmp_path / "both.npz", logits=z, probs=z, labels=y)
  with pytest.raises(ValueError, match=r"several score arrays \['logits', 'probs'\]"):
    data.load_predictions(tmp_path / "both.npz")
  wide = y.astype(np.uint64)
  wide[3] = 2**63  # would wrap to a negative int64
  np.savez(tmp_path / "u64.npz", logits=z, labels=wide)
  with pytest.raises(ValueError, match=r"labels\[3\] = 9223372036854775808"):
    data.load_predictions(tmp_path / "u64.npz")
  big = z.copy()
  big[4, 1] = 1e300  # inf after the float32 cast
  np.savez(tmp_path / "big.npz", scores=big, labels=y)
  with pytest.raises(ValueError, match=r"scores\[4, 1\] = 1e\+300 exceeds the float32 range"):
    data.load_predictions(tmp_path / "big.npz")
  big[4, 1] = -1e300  # -inf after the cast
  np.savez(tmp_path / "big.npz", scores=big, labels=y)
  with pytest.raises(ValueError, match=r"scores\[4, 1\] = -1e\+300 exceeds the float32 range"):
    data.load_predictions(tmp_path / "big.npz")
  # for report and sweep, logits are shifted by their row's maximum first: only a row
  # wider than float32 is refused
  np.savez(tmp_path / "big.npz", logits=big, labels=y)
  with pytest.raises(ValueError, match=r"logits row 4 spans -1e\+300 to 8, wider than the float32"):
    _load_split(tmp_path / "big.npz", "test", shift_logits=True)
  big[4, 1] = -np.inf  # not finite, shifted or not (it read "spans -inf to 8, wider than")
  np.savez(tmp_path / "big.npz", logits=big, labels=y)
  for shift in (False, True):
    with pytest.raises(ValueError, match=r"scores\[4, 1\] = -inf is not finite"):
      _load_split(tmp_path / "big.npz", "test", shift_logits=shift)
  # NaN survives the float32 cast as inf does in float32 files: left to the value checks
  # (a masked-out row may hold it)
  big[4, 1] = np.nan
  np.savez(tmp_path / "big.npz", logits=big, labels=y)
  assert np.isnan(data.load_predictions(tmp_path / "big.npz")[0][4, 1])
  far = z - 1e10  # rows far from 0 (float32 steps of 1024 there): shifted, exact
  np.savez(tmp_path / "far.npz", logits=far, labels=y)
  shifted = _load_split(tmp_path / "far.npz", "test", shift_logits=True)[0]
  np.testing.assert_array_equal(shifted, [[-1.0, 0.0]] * 6)
  # the public loaders give the file's values (vector scaling is not shift-invariant)
  np.testing.assert_array_equal(
    data.load_predictions(tmp_path / "far.npz")[0], far.astype(np.float32)
  )
  with pytest.raises(ValueError, match="path must be a file or folder path, got None"):
    data.load_predictions(None)


def test_float64_logits_far_from_0_keep_their_precision_in_report_and_sweep(tmp_path):
  # jaxcal report / sweep cast float64 sequence log-likelihoods near -1e5 to float32
  # before shifting them by their row's maximum: steps of 2^-7, the log loss off in the
  # 5th digit; shifted in float64 first, the float32 logits give the float64 softmax
  # to float32 rounding
  rng = np.random.default_rng(0)
  z = rng.normal(size=(500, 5)) * 0.01 - 1e5
  y = rng.integers(0, 5, 500)
  np.savez(tmp_path / "seq.npz", logits=z, labels=y)
  x = _load_split(tmp_path / "seq.npz", "test", shift_logits=True)[0]  # report, sweep
  p64 = np.exp(z - z.max(1, keepdims=True))
  p64 /= p64.sum(1, keepdims=True)
  want = -np.mean(np.log(p64[np.arange(500), y]))
  assert float(scores.log_loss(x, y, from_logits=True)) == pytest.approx(want, rel=1e-6)
  np.savez(tmp_path / "p.npz", probs=p64, labels=y)  # probabilities are never shifted
  np.testing.assert_array_equal(
    _load_split(tmp_path / "p.npz", "test", shift_logits=True)[0], p64.astype(np.float32)
  )


def test_load_rejects_pickle_and_bad_files(tmp_path):
  obj = np.empty(3, dtype=object)
  np.savez(tmp_path / "pickled.npz", logits=obj, labels=np.arange(3))
  with pytest.raises(ValueError, match="pickled"):
    data.load_predictions(tmp_path / "pickled.npz")
  np.savez(tmp_path / "nolabels.npz", logits=np.zeros((3, 2)))
  with pytest.raises(ValueError, match="no labels"):
    data.load_predictions(tmp_path / "nolabels.npz")
  np.savez(tmp_path / "other.npz", foo=np.zeros((3, 2)))
  with pytest.raises(ValueError, match="no predictions found"):
    data.load_predictions(tmp_path / "other.npz")
  np.savez(tmp_path / "mismatch.npz", logits=np.zeros((3, 2)), labels=np.zeros(4, int))
  with pytest.raises(ValueError, match="labels must have shape"):
    data.load_predictions(tmp_path / "mismatch.npz")
  np.savez(tmp_path / "fl.npz", logits=np.zeros((2, 2)), labels=np.array([0.5, 1.0]))
  with pytest.raises(ValueError, match="integers"):
    data.load_predictions(tmp_path / "fl.npz")
  with pytest.raises(ValueError, match="not found"):
    data.load_predictions(tmp_path / "missing.npz")
  with pytest.raises(ValueError, match="holds no labels"):
    np.save(tmp_path / "only.npy", np.zeros((2, 2)))
    data.load_predictions(tmp_path / "only.npy")
  # numpy counts timedelta64 as an integer type: refused as labels (they were loaded and
  # scored), in the loader and in every metric; sub-array and empty dtypes name the file
  # (numpy's bare "cannot reshape" / "itemsize cannot be zero"; found by a review helper)
  td = np.arange(3).astype("timedelta64[s]")
  np.savez(tmp_path / "td.npz", logits=np.zeros((3, 2)), labels=td)
  with pytest.raises(ValueError, match="td.npz: labels must be integers, got dtype timedelta"):
    data.load_predictions(tmp_path / "td.npz")
  np.savez(tmp_path / "tds.npz", logits=np.zeros((3, 2)).astype(td.dtype), labels=np.arange(3))
  with pytest.raises(ValueError, match="tds.npz: scores must be real numbers, got dtype timed"):
    data.load_predictions(tmp_path / "tds.npz")
  with pytest.raises(ValueError, match="labels must be a real numeric array, got dtype timed"):
    scores.brier(np.full((3, 2), 0.5, np.float32), td)
  labels = io.BytesIO()
  np.save(labels, np.arange(6) % 3)
  for name, descr, shape, raw in (
    ("sub", "('<f4', (3,))", "(6,)", bytes(72)),  # numpy reads it as (6, 3)
    ("v0", "'|V0'", "(6, 3)", b""),
  ):
    head = f"{{'descr': {descr}, 'fortran_order': False, 'shape': {shape}, }}".encode()
    head += b" " * (64 - (10 + len(head) + 1) % 64) + b"\n"
    with zipfile.ZipFile(tmp_path / f"{name}.npz", "w") as z:
      z.writestr("logits.npy", b"\x93NUMPY\x01\x00" + struct.pack("<H", len(head)) + head + raw)
      z.writestr("labels.npy", labels.getvalue())
    with pytest.raises(ValueError, match=rf"{name}\.npz\[logits\]: not a valid \.npy array of"):
      data.load_predictions(tmp_path / f"{name}.npz")


class _Rescuer:
  """Opens each named pipe for writing, then closes it, should a reader ever wait on one.

  A reader that opens the pipe then sees an empty file and fails: the test fails rather
  than hang for ever, as ``jaxcal report pipe.npz`` did.
  """

  def __init__(self, *fifos):
    import threading

    self.fifos, self.stop, self.rescued = fifos, threading.Event(), []
    self.thread = threading.Thread(target=self.run, daemon=True)

  def run(self):
    import os

    while not self.stop.wait(0.05):
      for f in self.fifos:
        try:  # ENXIO while no reader has the pipe open
          os.close(os.open(f, os.O_WRONLY | os.O_NONBLOCK))
          self.rescued.append(f)
        except OSError:
          pass

  def __enter__(self):
    self.thread.start()
    return self

  def __exit__(self, *exc):
    self.stop.set()
    self.thread.join()


def test_load_refuses_named_pipes_and_devices_before_opening_them(tmp_path):
  """``open`` of a named pipe waits for a writer (``jaxcal report fifo.npz`` hung; found by a
  review helper), and ``/dev/zero`` never ends: every reader of a file refuses them first."""
  import os

  from jaxcal import recalibrate
  from jaxcal._src.recal.local_net import load_checkpoint

  np.save(tmp_path / "y.npy", np.arange(4) % 2)
  fifos = [tmp_path / n for n in ("p.npz", "x.npy", "model.npz", "model.msgpack", "ck.msgpack")]
  for f in fifos:
    os.mkfifo(f)
  y = tmp_path / "y.npy"
  calls = {
    "p.npz": lambda: data.load_predictions(fifos[0]),
    "x.npy": lambda: data.load_predictions(f"{fifos[1]},{y}"),
    "labels": lambda: data.load_predictions(f"{y},{fifos[1]}"),
    "model.npz": lambda: recalibrate.load(fifos[2]),
    "model.msgpack": lambda: recalibrate.load(fifos[3]),
    "ck.msgpack": lambda: load_checkpoint(fifos[4]),
  }
  with _Rescuer(*fifos) as r:
    for call in calls.values():
      with pytest.raises(ValueError, match=r"not a regular file \(a named pipe\); jaxcal reads"):
        call()
  assert not r.rescued, r.rescued  # no reader ever waited on a pipe
  if os.path.exists("/dev/zero"):
    with pytest.raises(ValueError, match=r"/dev/zero: not a regular file \(a character dev"):
      data.load_predictions(f"/dev/zero,{y}")
  # a folder of .npy files and an .npz: the .npy files were read without a word
  both = tmp_path / "both"
  both.mkdir()
  np.save(both / "test_logits.npy", np.zeros((4, 2), np.float32))
  np.save(both / "test_labels.npy", np.arange(4) % 2)
  assert data.load_predictions(both)[0].shape == (4, 2)
  np.savez(both / "other.npz", logits=np.ones((3, 2), np.float32), labels=np.arange(3) % 2)
  with pytest.raises(ValueError, match=r"both: folder holds \.npy files and \.npz files \(oth"):
    data.load_predictions(both)
  with pytest.raises(ValueError, match="not found"):  # as before: missing stays missing
    data.load_predictions(f"{tmp_path / 'none.npy'},{y}")


def _npz_bytes(tmp_path):
  np.savez(tmp_path / "good.npz", logits=np.zeros((4, 3), np.float32), labels=np.arange(4) % 3)
  return (tmp_path / "good.npz").read_bytes()


def test_load_refuses_joined_files_duplicate_members_and_a_bad_split(tmp_path):
  """Found by a review helper: each was read without a word (numpy reads the first
  array of two joined .npy files and the last of two members of one name)."""
  one = io.BytesIO()
  np.save(one, np.full((4, 3), 1 / 3, np.float32))
  (tmp_path / "joined.npy").write_bytes(one.getvalue() * 2)
  np.save(tmp_path / "labels.npy", np.arange(4) % 3)
  with pytest.raises(
    ValueError, match=r"joined\.npy: 176 bytes follow its array of shape \(4, 3\)"
  ):
    data.load_split(f"{tmp_path / 'joined.npy'},{tmp_path / 'labels.npy'}")
  lab = io.BytesIO()
  np.save(lab, np.arange(4) % 3)
  with zipfile.ZipFile(tmp_path / "dup.npz", "w") as zf, pytest.warns(UserWarning):
    zf.writestr("logits.npy", one.getvalue())
    zf.writestr("labels.npy", lab.getvalue())
    zf.writestr("labels.npy", lab.getvalue())  # zipfile warns of the duplicate name
  with pytest.raises(ValueError, match=r"dup\.npz: holds two arrays named 'labels'"):
    data.load_split(tmp_path / "dup.npz")
  np.savez(tmp_path / "ok.npz", logits=np.zeros((4, 3)), labels=np.arange(4) % 3)
  for split in (None, 3, ""):  # None looked for 'None_logits'; 3 returned the data
    with pytest.raises(ValueError, match=r"split must be a split's name such as 'test'"):
      data.load_split(tmp_path / "ok.npz", split)


def test_load_refuses_broken_files_naming_them(tmp_path):
  import numpy.lib.format as fmt

  raw = _npz_bytes(tmp_path)
  (tmp_path / "empty.npz").write_bytes(b"")
  (tmp_path / "trunc.npz").write_bytes(raw[: len(raw) // 2])
  (tmp_path / "junk.npz").write_bytes(b"PK\x03\x04 not really a zip")
  crc = bytearray(raw)  # a valid archive whose logits member fails its CRC-32
  with zipfile.ZipFile(tmp_path / "good.npz") as zf:
    info = zf.getinfo("logits.npy")
  name_len, extra_len = struct.unpack("<HH", raw[info.header_offset + 26 : info.header_offset + 30])
  crc[info.header_offset + 30 + name_len + extra_len + info.compress_size - 1] ^= 0xFF
  (tmp_path / "crc.npz").write_bytes(bytes(crc))
  # a deflated member that ends 8 bytes short of its .npy header's (4, 3) float32
  # data, while the archive's directory claims the full size (its CRC-32 holds):
  # the read comes back short
  head = io.BytesIO()
  fmt.write_array_header_1_0(head, {"descr": "<f4", "fortran_order": False, "shape": (4, 3)})
  labels = io.BytesIO()
  np.save(labels, np.arange(4) % 3)
  with zipfile.ZipFile(tmp_path / "short.npz", "w", zipfile.ZIP_DEFLATED) as zf:
    zf.writestr("logits.npy", head.getvalue() + bytes(40))
    zf.writestr("labels.npy", labels.getvalue())
  short = bytearray((tmp_path / "short.npz").read_bytes())
  c = short.index(b"PK\x01\x02")  # central directory entry of logits.npy
  assert short[c + 46 : c + 56] == b"logits.npy"
  short[c + 24 : c + 28] = struct.pack("<I", struct.unpack("<I", short[c + 24 : c + 28])[0] + 8)
  (tmp_path / "short.npz").write_bytes(bytes(short))
  np.savez_compressed(tmp_path / "zlib.npz", logits=np.zeros((4, 3)), labels=np.arange(4) % 3)
  zraw = bytearray((tmp_path / "zlib.npz").read_bytes())
  with zipfile.ZipFile(tmp_path / "zlib.npz") as zf:
    info = zf.getinfo("logits.npy")
  name_len, extra_len = struct.unpack(
    "<HH", zraw[info.header_offset + 26 : info.header_offset + 30]
  )
  zraw[info.header_offset + 30 + name_len + extra_len] = 0xFF  # deflate block type 3: reserved
  (tmp_path / "zlib.npz").write_bytes(bytes(zraw))
  np.save(tmp_path / "s.npy", np.zeros((4, 3), np.float32))
  np.save(tmp_path / "l.npy", np.arange(4) % 3)
  with open(tmp_path / "absurd.npy", "wb") as f:  # a header claiming 10^12 rows
    fmt.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False, "shape": (10**12, 3)})
    f.write(b"\0" * 48)
  with open(tmp_path / "neg.npy", "wb") as f:  # numpy reads the header; the data is 48 bytes
    fmt.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False, "shape": (4, -3)})
    f.write(b"\0" * 48)
  npy = (tmp_path / "s.npy").read_bytes()
  (tmp_path / "cut.npy").write_bytes(npy[: len(npy) - 8])
  (tmp_path / "cut1.npy").write_bytes(npy[: len(npy) - 1])  # one byte short
  (tmp_path / "two").mkdir()  # no .npy and two .npz: which one is not guessed
  np.savez(tmp_path / "two" / "a.npz", logits=np.zeros((4, 3)), labels=np.arange(4) % 3)
  np.savez(tmp_path / "two" / "b.npz", logits=np.ones((4, 3)), labels=np.arange(4) % 3)
  with zipfile.ZipFile(tmp_path / "dat.npz", "w") as zf:  # only .npy members are arrays
    zf.writestr("logits.dat", npy)
    zf.writestr("labels.npy", (tmp_path / "l.npy").read_bytes())
  (tmp_path / "header.npy").write_bytes(npy[:60])
  (tmp_path / "zero.npy").write_bytes(b"")
  np.savez(tmp_path / "strings.npz", logits=np.array([["a", "b"]] * 4), labels=np.arange(4))
  np.savez(tmp_path / "complex.npz", logits=np.ones((4, 2), np.complex64), labels=np.arange(4) % 2)
  np.savez(tmp_path / "wide.npz", logits=np.zeros((3, 2)), labels=np.array([0, 2**32 + 1, 1]))
  np.savez(tmp_path / "fl.npz", logits=np.zeros((3, 2)), labels=np.array([0, 1 + 1e-9, 1]))
  np.savez(tmp_path / "onecol.npz", logits=np.zeros((3, 1)), labels=np.zeros(3, int))
  np.savez(tmp_path / "cube.npz", logits=np.zeros((3, 2, 2)), labels=np.zeros(3, int))
  # narrow labels out of range: checked here, before the int32 cast (uint8 holds C = 2)
  np.savez(tmp_path / "u8.npz", logits=np.zeros((3, 2)), labels=np.array([0, 2, 1], np.uint8))
  np.savez(tmp_path / "i8.npz", logits=np.zeros((3, 2)), labels=np.array([0, 1, -1], np.int8))
  np.savez(tmp_path / "i16.npz", logits=np.zeros((3, 2)), labels=np.array([0, 2, 1], np.int16))
  np.savez(tmp_path / "norows.npz", logits=np.zeros((0, 3)), labels=np.zeros(0, int))
  np.savez(tmp_path / "eqc.npz", logits=np.zeros((3, 2)), labels=np.array([0, 2, 1]))
  np.savez(tmp_path / "neg.npz", logits=np.zeros((3, 2)), labels=np.array([0, 1, -1]))
  np.savez(tmp_path / "strlab.npz", logits=np.zeros((2, 2)), labels=np.array(["0", "1"]))
  # labels and y: 'labels' was taken and 'y' ignored (found by a reviewer)
  np.savez(tmp_path / "ly.npz", logits=np.zeros((3, 2)), labels=np.arange(3) % 2, y=np.zeros(3))
  (tmp_path / "lydir").mkdir()
  for stem, arr in (("logits", np.zeros((3, 2))), ("labels", np.arange(3) % 2), ("y", np.ones(3))):
    np.save(tmp_path / "lydir" / f"{stem}.npy", arr)
  # float64 inf was said to exceed "the float32 range ... rescale the scores"
  for name, value in (("inf64", np.inf), ("ninf64", -np.inf)):
    bad = np.zeros((3, 2))
    bad[1, 0] = value
    np.savez(tmp_path / f"{name}.npz", logits=bad, labels=np.arange(3) % 2)
  s, l = str(tmp_path / "s.npy"), str(tmp_path / "l.npy")
  cases = [
    ("empty.npz", r"empty.npz: not a valid .npz file"),
    ("trunc.npz", r"trunc.npz: not a valid .npz file"),
    ("junk.npz", r"junk.npz: not a valid .npz file"),
    ("crc.npz", r"crc.npz: corrupt member 'logits.npy': Bad CRC-32"),
    ("zlib.npz", r"zlib.npz: corrupt member 'logits.npy': Error -3 .*invalid block type"),
    (f"{tmp_path / 'two'},{l}", r"two: is a folder, expected a file"),
    ("short.npz", r"short.npz\[logits\]: truncated: 40 of 48 bytes of data"),
    (f"{s},{tmp_path / 'absurd.npy'}", r"absurd.npy: the header claims shape \(1000000000000, 3\)"),
    (f"{tmp_path / 'cut.npy'},{l}", r"cut.npy: the header claims .* only 40 bytes follow"),
    (f"{tmp_path / 'cut1.npy'},{l}", r"cut1.npy: the header claims .* only 47 bytes follow"),
    ("two", r"two: folder holds no .npy files and 2 .npz files"),
    ("dat.npz", r"dat.npz: no predictions found; .* found \['labels'\]"),
    (f"{tmp_path / 'header.npy'},{l}", r"header.npy: not a valid .npy array"),
    (f"{tmp_path / 'neg.npy'},{l}", r"neg.npy: not a valid .npy array \(negative dimension"),
    (f"{tmp_path / 'zero.npy'},{l}", r"zero.npy: not a valid .npy array"),
    (f"{s},{tmp_path / 'gone.npy'}", r"predictions not found: .*gone.npy"),
    ("strings.npz", r"strings.npz: scores must be real numbers"),
    ("complex.npz", r"complex.npz: scores must be real numbers"),
    ("wide.npz", r"wide.npz: labels must lie in \[0, 2\).*4294967297"),
    ("fl.npz", r"fl.npz: labels must be integers"),
    ("onecol.npz", r"C >= 2"),
    ("cube.npz", r"cube.npz: scores must be \(n, C\) .*got shape \(3, 2, 2\)"),
    ("u8.npz", r"u8.npz: labels must lie in \[0, 2\), got labels\[1\] = 2$"),
    ("i8.npz", r"i8.npz: labels must lie in \[0, 2\); 1 entries do not, .* labels\[2\] = -1$"),
    ("i16.npz", r"i16.npz: labels must lie in \[0, 2\); 1 entries do not, .* labels\[1\] = 2$"),
    ("norows.npz", r"norows.npz: scores must be \(n, C\) with n >= 1 .*got shape \(0, 3\)"),
    ("eqc.npz", r"eqc.npz: labels must lie in \[0, 2\); 1 entries do not, .* labels\[1\] = 2$"),
    ("neg.npz", r"neg.npz: labels must lie in \[0, 2\); 1 entries do not, .* labels\[2\] = -1$"),
    ("strlab.npz", r"strlab.npz: labels must be integers, got dtype <U1"),
    ("ly.npz", r"ly.npz: holds several label arrays \['labels', 'y'\]; keep one"),
    ("lydir", r"lydir: holds several label arrays \['labels', 'y'\]; keep one"),
    ("inf64.npz", r"inf64.npz: scores\[1, 0\] = inf is not finite; the metrics need finite"),
    ("ninf64.npz", r"ninf64.npz: scores\[1, 0\] = -inf is not finite; the metrics need"),
    ("notes.txt", r"predictions not found"),
  ]
  for name, match in cases:
    path = name if "," in name else tmp_path / name
    with pytest.raises(ValueError, match=match):
      data.load_predictions(path)


def test_load_reads_compressed_fortran_and_folder_layouts(tmp_path):
  rng = np.random.default_rng(1)
  z = np.asfortranarray(rng.normal(size=(6, 3)).astype(np.float32))
  y = np.array([0, 1, 2, 0, 1, 2], np.int64)
  np.savez_compressed(tmp_path / "c.npz", test_logits=z, test_labels=y)
  x, yy = data.load_predictions(tmp_path / "c.npz")
  np.testing.assert_array_equal(x, z)
  np.testing.assert_array_equal(yy, y)
  assert yy.dtype == np.int32 and x.dtype == np.float32 and x.flags.writeable


def _npy_bytes(z, version):
  """An ``.npy`` file of ``z`` with a header of format ``version``, written by hand."""
  header = repr({"descr": z.dtype.str, "fortran_order": False, "shape": z.shape}).encode()
  size = "<H" if version == (1, 0) else "<I"  # 2.0 and 3.0: a 4-byte header length
  header += b" " * (-(8 + struct.calcsize(size) + len(header) + 1) % 64) + b"\n"
  return b"\x93NUMPY" + bytes(version) + struct.pack(size, len(header)) + header + z.tobytes()


def test_load_reads_every_npy_header_version(tmp_path):
  # 1.0 (np.save's usual), 2.0 (headers over 64 KiB) and 3.0 (utf-8 headers)
  z = np.arange(6, dtype=np.float32).reshape(3, 2)
  np.save(tmp_path / "l.npy", np.array([0, 1, 1]))
  for version in ((1, 0), (2, 0), (3, 0)):
    (tmp_path / "s.npy").write_bytes(_npy_bytes(z, version))
    np.testing.assert_array_equal(np.load(tmp_path / "s.npy"), z)  # numpy reads it
    x, _ = data.load_predictions(f"{tmp_path / 's.npy'},{tmp_path / 'l.npy'}")
    np.testing.assert_array_equal(x, z)


def test_load_permission_denied_is_a_value_error(tmp_path, monkeypatch):
  import builtins

  np.save(tmp_path / "s.npy", np.zeros((2, 2), np.float32))
  np.save(tmp_path / "l.npy", np.zeros(2, int))
  real_open = builtins.open

  def denied(path, *args, **kwargs):
    if str(path).endswith("s.npy"):
      raise PermissionError(13, "Permission denied", str(path))
    return real_open(path, *args, **kwargs)

  monkeypatch.setattr(builtins, "open", denied)
  with pytest.raises(ValueError, match=r"s.npy: not readable \(permission denied\)"):
    data.load_predictions(f"{tmp_path / 's.npy'},{tmp_path / 'l.npy'}")


def test_synthetic_is_calibrated_at_temperature_one():
  d = data.synthetic(jax.random.key(1), 40_000, 5)
  np.testing.assert_allclose(d.probs, d.true_probs, atol=1e-6)
  # Calibrated: E[Brier] of the true probabilities equals the expected Brier
  # computed from the truth itself, sum_r mu_r (1 - mu_r), up to MC error.
  brier = scores.brier(d.probs, d.labels, per_sample=True)
  expected = jnp.sum(d.true_probs * (1 - d.true_probs), axis=1)
  se = float(jnp.std(brier - expected)) / np.sqrt(brier.shape[0])
  assert abs(float(jnp.mean(brier - expected))) < 4 * se
  # An over-confident copy has a larger truthful error than the truth.
  hot = data.synthetic(jax.random.key(1), 40_000, 5, temperature=0.5)
  np.testing.assert_array_equal(hot.labels, d.labels)
  assert metrics.classwise_ce(hot.probs, hot.labels) > metrics.classwise_ce(d.probs, d.labels)


def test_synthetic_follows_its_law():
  # Same key, same Gaussian g: true logits scale * g / sqrt(concentration) and
  # predictions softmax(log mu / temperature). Centred log-probabilities (float64)
  # of the defaults (scale 2) are 2 g_c; with scale 3, concentration 4 they are
  # 1.5 g_c, and the predictions at temperature 0.5 twice that.
  def centred(q):
    lq = np.log(np.asarray(q, np.float64))
    return lq - lq.mean(axis=1, keepdims=True)

  key = jax.random.key(7)
  base = data.synthetic(key, 64, 4)
  d = data.synthetic(key, 64, 4, scale=3.0, concentration=4.0, temperature=0.5)
  g = centred(base.true_probs) / 2.0
  np.testing.assert_allclose(centred(d.true_probs), 1.5 * g, rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(centred(d.probs), 3.0 * g, rtol=1e-4, atol=1e-5)
  flat = data.synthetic(key, 64, 4, scale=0.0)
  np.testing.assert_allclose(flat.true_probs, 0.25, rtol=1e-6)


@pytest.mark.parametrize(
  "args, kwargs, msg",
  [
    ((0, 3), {}, r"need n >= 1 and num_classes >= 2, got n=0"),
    ((10, 1), {}, r"need n >= 1 and num_classes >= 2, got n=10, num_classes=1"),
    ((True, 3), {}, r"n must be an int, got True"),
    ((2.5, 3), {}, r"n must be an int, got 2.5"),
    ((10, 3.0), {}, r"num_classes must be an int, got 3.0"),
    ((10, 3), {"temperature": 0.0}, r"temperature must be > 0"),
    ((10, 3), {"temperature": float("nan")}, r"temperature must be a finite number, got nan"),
    ((10, 3), {"concentration": float("nan")}, r"concentration must be a finite number"),
    ((10, 3), {"concentration": -1.0}, r"concentration must be > 0"),
    ((10, 3), {"scale": float("nan")}, r"scale must be a finite number, got nan"),
    ((10, 3), {"scale": float("inf")}, r"scale must be a finite number, got inf"),
    ((10, 3), {"scale": "2"}, r"scale must be a number, got '2'"),
    # finite, > 0, yet NaN in float32: all-NaN probabilities, labels drawn from NaN
    (
      (4, 3),
      {"scale": 1e39},
      r"scale = 1e\+39 and concentration = 1 overflow float32: .* keep \|scale\| <= 3.1e\+37 "
      r"and \|scale\| / sqrt\(concentration\) <= 3.1e\+37, with concentration >= 1.18e-38",
    ),
    ((4, 3), {"concentration": 1e-39}, r"scale = 2 and concentration = 1e-39 overflow float32"),
    ((4, 3), {"scale": 0.0, "concentration": 1e-40}, r"scale = 0 and concentration = 1e-40"),
    ((4, 3), {"temperature": 1e-38}, r"temperature = 1e-38 overflows .* >= 1.18e-38 \(for num"),
  ],
)
def test_synthetic_bad_arguments(args, kwargs, msg):
  with pytest.raises(ValueError, match=msg):
    data.synthetic(jax.random.key(0), *args, **kwargs)


def test_synthetic_usable_range_is_finite():
  # the bounds the overflow messages give hold however many draws (|g| <= 5.42)
  tiny = float(np.finfo(np.float32).tiny)
  for kwargs in (
    {"scale": -3.1e37},
    {"scale": 3.1e37 * np.sqrt(tiny), "concentration": tiny, "temperature": tiny},
  ):
    d = data.synthetic(jax.random.key(0), 4096, 3, **kwargs)
    assert bool(jnp.isfinite(d.probs).all() & jnp.isfinite(d.true_probs).all()), kwargs
  # a large scale overflows only in some draws: refused when it does
  with pytest.raises(ValueError, match=r"scale = 1e\+38 and concentration = 1 overflow"):
    data.synthetic(jax.random.key(0), 4096, 3, scale=1e38)
  # under jit (a traced key) an overflow in some draws cannot be raised: NaN there, never
  # a plausible number; a parameter that is no float32 number is refused before any draw
  out = jax.jit(lambda k: data.synthetic(k, 4096, 3, scale=1e38))(jax.random.key(0))
  assert bool(jnp.isnan(out.probs).any())
  with pytest.raises(ValueError, match=r"scale = 1e\+39 and concentration = 1 overflow"):
    jax.jit(lambda k: data.synthetic(k, 4, 3, scale=1e39))(jax.random.key(0))


def test_synthetic_needs_a_prng_key():
  with pytest.raises(ValueError, match=r"key must be a JAX PRNG key .*got int"):
    data.synthetic(0, 5, 3)


def test_load_takes_bool_labels_of_two_classes_as_the_metrics_do(tmp_path):
  """Every metric takes bool labels for C = 2; the loader refused them (a review finding)."""
  z = np.array([[0.0, 1.0], [2.0, 0.0], [0.5, 0.2]], np.float32)
  y = np.array([True, False, True])
  np.savez(tmp_path / "b.npz", logits=z, labels=y)
  xx, yy = data.load_predictions(tmp_path / "b.npz")
  np.testing.assert_array_equal(yy, [1, 0, 1])
  assert float(scores.brier(xx, yy, from_logits=True)) == pytest.approx(
    float(scores.brier(z, y, from_logits=True)), rel=1e-7
  )
  np.savez(tmp_path / "b3.npz", logits=np.zeros((3, 3)), labels=y)
  with pytest.raises(ValueError, match=r"b3.npz: labels must be integers, got dtype bool \("):
    data.load_predictions(tmp_path / "b3.npz")
