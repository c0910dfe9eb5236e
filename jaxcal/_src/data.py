"""Loading predictions without pickle, the embedded default, synthetic data."""

from __future__ import annotations

import functools
import math
import os
import pathlib
import zipfile
import zlib
from collections.abc import Callable
from typing import Any, BinaryIO, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxcal._src import validation as V
from jaxcal._src.paths import input_file
from jaxcal._src.validation import looks_like_probs

__all__ = [
  "load_predictions",
  "load_split",
  "default_predictions",
  "DEFAULT_PREDICTIONS",
  "synthetic",
  "Synthetic",
  "looks_like_probs",
]

DEFAULT_PREDICTIONS = (
  pathlib.Path(__file__).resolve().parents[1] / "_data" / "cifar10_resnet110.npz"
)

_SCORE_KEYS = ("logits", "probs", "probabilities", "predictions", "scores")


def _npy_private():
  """numpy's module holding the private ``_read_array_header`` (``.npy`` version 3.0).

  ``numpy.lib._format_impl`` under numpy 2, whose ``numpy.lib.format`` re-exports
  only the public names; ``numpy.lib.format`` under numpy 1.x.
  """
  try:
    from numpy.lib import _format_impl

    return _format_impl
  except ImportError:  # numpy 1.x
    return np.lib.format


def _read_npy(f: BinaryIO, size: int, what: str) -> np.ndarray:
  """Reads one ``.npy`` array from an open binary file, checking the header first.

  The header (magic, dtype, shape) is read and checked against the bytes that
  follow before anything is allocated: object (pickled) dtypes, truncated
  files and shapes larger than the file are refused with a ValueError
  naming ``what``.
  """
  fmt = np.lib.format
  try:
    version = fmt.read_magic(f)
    if version == (1, 0):
      shape, fortran, dtype = fmt.read_array_header_1_0(f)
    elif version == (2, 0):
      shape, fortran, dtype = fmt.read_array_header_2_0(f)
    else:  # (3, 0): a utf-8 header, no public reader (numpy 2 keeps it in _format_impl)
      shape, fortran, dtype = _npy_private()._read_array_header(f, version)
  except (ValueError, EOFError, OSError, SyntaxError, TypeError, KeyError) as e:
    raise ValueError(f"{what}: not a valid .npy array (bad or truncated header: {e})") from None
  if dtype.hasobject:
    raise ValueError(f"{what}: holds a pickled object array, which jaxcal never loads")
  if dtype.subdtype is not None or dtype.itemsize == 0:  # frombuffer / reshape would fail
    raise ValueError(
      f"{what}: not a valid .npy array of numbers (its dtype {dtype} is a sub-array or holds "
      "no bytes)"
    )
  if any(d < 0 for d in shape):  # numpy's header reader accepts them
    raise ValueError(f"{what}: not a valid .npy array (negative dimension in shape {shape})")
  count = math.prod(shape)
  nbytes = count * dtype.itemsize
  avail = size - f.tell()
  if nbytes > avail:
    raise ValueError(
      f"{what}: the header claims shape {shape} of {dtype} ({nbytes:,} bytes) but only "
      f"{max(avail, 0):,} bytes follow: the file is truncated or corrupt"
    )
  if nbytes < avail:  # np.save writes the array's bytes and nothing after them
    raise ValueError(
      f"{what}: {avail - nbytes:,} bytes follow its array of shape {shape} ({nbytes:,} "
      "bytes): not one .npy array (two files joined?)"
    )
  buf = f.read(nbytes)
  if len(buf) != nbytes:
    raise ValueError(f"{what}: truncated: {len(buf):,} of {nbytes:,} bytes of data")
  arr = np.frombuffer(buf, dtype=dtype, count=count)
  return arr.reshape(shape, order="F" if fortran else "C")


def _npy_file(path: str) -> np.ndarray:
  with open(input_file(path), "rb") as f:
    return _read_npy(f, os.fstat(f.fileno()).st_size, path)


def _npz_members(zf: zipfile.ZipFile, path: str) -> dict[str, Callable[[], np.ndarray]]:
  """Lazy readers of the arrays of an open ``.npz`` archive, by name."""
  members: dict[str, Callable[[], np.ndarray]] = {}
  for info in zf.infolist():
    if info.filename.endswith(".npy"):

      def read(info: zipfile.ZipInfo = info) -> np.ndarray:
        try:
          with zf.open(info) as f:
            return _read_npy(f, info.file_size, f"{path}[{info.filename[:-4]}]")
        except (zipfile.BadZipFile, EOFError, zlib.error) as e:
          raise ValueError(f"{path}: corrupt member {info.filename!r}: {e}") from None

      name = info.filename[:-4]
      if name in members:  # numpy reads the last copy without a word
        raise ValueError(f"{path}: holds two arrays named {name!r}; which one is meant?")
      members[name] = read
  return members


#: Score-array names that say what the scores are (the others leave it to the values).
_PROBS_STEMS = ("probs", "probabilities")


def _splits_in(keys: Any) -> list[str]:
  """The splits ``s`` among array names: ``s_<scores>`` beside ``s_labels`` (sorted)."""
  return sorted(
    {
      k[: -len(stem) - 1]
      for k in keys
      for stem in _SCORE_KEYS
      if k.endswith(f"_{stem}")
      and len(k) > len(stem) + 1
      and f"{k[: -len(stem) - 1]}_labels" in keys
    }
  )


def _pick(
  mapping: dict[str, Callable[[], np.ndarray]], split: str, path: str
) -> tuple[np.ndarray, np.ndarray, bool, str, list[str]]:
  """``(scores, labels, whether they are the split's own arrays, the scores' name stem,
  the splits the arrays hold)``.

  ``{split}_<scores>`` with ``{split}_labels`` first; else the unsplit
  ``<scores>`` with ``labels``/``y`` (a file of one data set). The scores and
  the labels always come from the same kind of name, never one of each. Two
  score arrays of one kind, or both ``labels`` and ``y`` for the scores read,
  are refused: which one is meant is not guessed.
  """
  keys = list(mapping.keys())
  for prefix in (f"{split}_", ""):
    found = [prefix + stem for stem in _SCORE_KEYS if prefix + stem in keys]
    if len(found) > 1:
      raise ValueError(
        f"{path}: holds several score arrays {found}; keep one (jaxcal would not guess which)"
      )
  for prefix, label_keys, own in (
    (f"{split}_", (f"{split}_labels",), True),  # every split name before any unsplit one
    ("", ("labels", "y"), False),
  ):
    for stem in _SCORE_KEYS:
      k = prefix + stem
      if k in keys:
        found = [lk for lk in label_keys if lk in keys]
        if len(found) > 1:  # 'labels' was taken and 'y' ignored without a word
          raise ValueError(
            f"{path}: holds several label arrays {found}; keep one (jaxcal would not guess which)"
          )
        if found:
          return mapping[k](), mapping[found[0]](), own, stem, _splits_in(keys)
        want = " or ".join(repr(x) for x in label_keys)
        raise ValueError(f"{path}: found {k!r} but no labels array ({want})")
  raise ValueError(
    f"{path}: no predictions found; expected arrays named e.g. '{split}_logits' and "
    f"'{split}_labels', or 'logits'/'probs' and 'labels'; found {sorted(keys)}"
  )


def _pair(p: str) -> tuple[str, str] | None:
  """``(scores, labels)`` paths of a ``"scores.npy,labels.npy"`` pair, or ``None`` for one path."""
  if "," in p and not os.path.exists(p):
    a, b = p.split(",", 1)
    return a, b
  return None


def _load_raw(p: str, split: str) -> tuple[np.ndarray, np.ndarray, bool, str, list[str]]:
  pair = _pair(p)
  if pair is not None:
    return _npy_file(pair[0]), _npy_file(pair[1]), False, "scores", []
  if os.path.isdir(p):
    names = sorted(os.listdir(p))
    files = {f[:-4]: os.path.join(p, f) for f in names if f.endswith(".npy")}
    npz = [f for f in names if f.endswith(".npz")]
    if files and npz:  # the .npy files were taken without a word (found by a review helper)
      raise ValueError(
        f"{p}: folder holds .npy files and .npz files ({', '.join(npz[:3])}); jaxcal would "
        "not guess which to read: pass the .npz file's path, or keep the .npy files alone"
      )
    if files:
      return _pick({k: functools.partial(_npy_file, v) for k, v in files.items()}, split, p)
    if len(npz) == 1:
      return _load_raw(os.path.join(p, npz[0]), split)
    raise ValueError(f"{p}: folder holds no .npy files and {len(npz)} .npz files")
  if p.endswith(".npz"):
    try:
      zf = zipfile.ZipFile(input_file(p))
    except (zipfile.BadZipFile, EOFError) as e:
      raise ValueError(
        f"{p}: not a valid .npz file (a zip archive of .npy arrays; empty or truncated?): {e}"
      ) from None
    with zf:
      return _pick(_npz_members(zf, p), split, p)
  if p.endswith(".npy"):
    if not os.path.exists(p):
      raise FileNotFoundError(2, "No such file", p)
    raise ValueError(
      f"{p}: a single .npy holds no labels; pass 'scores.npy,labels.npy' or a folder"
    )
  if not os.path.exists(p):
    raise FileNotFoundError(2, "No such file", p)
  raise ValueError(f"{p}: not a .npz file, a folder, or 'scores.npy,labels.npy'")


def load_predictions(path: str | os.PathLike, split: str = "test") -> tuple[np.ndarray, np.ndarray]:
  """Loads ``(logits_or_probs, labels)`` from ``.npz``/``.npy`` files. Never unpickles.

  Accepted layouts:

  * an ``.npz`` file with ``{split}_logits`` / ``{split}_labels`` (the CIFAR
    files here), or ``logits`` | ``probs`` and ``labels``;
  * a folder holding ``{split}_logits.npy`` and ``{split}_labels.npy`` (or
    ``logits.npy`` | ``probs.npy`` and ``labels.npy``), or one ``.npz`` (not
    both: a folder of ``.npy`` files and an ``.npz`` is refused);
  * a pair ``"scores.npy,labels.npy"`` (comma-separated paths).

  Every ``.npy`` header is checked before any allocation (no object arrays,
  no shape larger than the file), and labels are checked on the host before
  they are narrowed to int32 (integral, in ``[0, C)``). Whether the scores are
  logits or probabilities is left to the caller: :func:`looks_like_probs` is
  the rule ``jaxcal report`` uses.

  Args:
    path: file or folder.
    split: which split to read when the file holds several (``"test"``).

  Returns:
    ``(scores (n, C) float32, labels (n,) int32)`` as numpy arrays.

  Raises:
    ValueError: naming the file and the problem: missing or unreadable
      file, a named pipe or device (refused before it is opened: reading a
      pipe waits for a writer), not an ``.npz``/``.npy`` (empty, truncated, corrupt), missing
      arrays, object (pickled) arrays, a header claiming more data than the
      file holds, non-numeric scores, scores not ``(n, C)``, float64 scores
      that are infinite or beyond float32's range, two score arrays or two
      label arrays (``labels`` and ``y``) to choose from, labels of the
      wrong shape, non-integral or outside ``[0, C)``, an array named
      ``logits`` that holds probabilities (rows on the simplex: a softmax
      of them would be a wrong prediction). (NaN scores, and inf
      in float32 files, are left to the metrics' value checks.)

  Example:
    >>> x, y = load_predictions(DEFAULT_PREDICTIONS)
    >>> x.shape, y.shape
    ((10000, 10), (10000,))
  """
  return load_split(path, split)[:2]


def load_split(path: str | os.PathLike, split: str = "test") -> tuple[np.ndarray, np.ndarray, bool]:
  """:func:`load_predictions`, and whether ``split`` was found.

  Args:
    path: an ``.npz`` file, a folder, or a pair ``"scores.npy,labels.npy"``
      (the layouts of :func:`load_predictions`).
    split: which split to read when the file holds several (``"test"``):
      the arrays ``{split}_logits`` (or ``{split}_probs``, ...) and
      ``{split}_labels``.

  Returns:
    ``(scores, labels, found)``: ``scores`` ``(n, C)`` float32 and
    ``labels`` ``(n,)`` int32 numpy arrays, as :func:`load_predictions`
    returns them; ``found`` is False when the file holds one unsplit data
    set (``logits``/``probs`` and ``labels``, or a ``"scores.npy,labels.npy"``
    pair) and so gave it for any ``split`` (the command line says so, and
    refuses to fit and test a recalibrator on the same samples).

  Raises:
    ValueError: as :func:`load_predictions` (a missing or unreadable file,
      no such arrays, bad scores or labels), naming the file.

  Example:
    >>> scores, labels, found = load_split(DEFAULT_PREDICTIONS, split="val")
    >>> scores.shape, labels.shape, found
    ((5000, 10), (5000,), True)
  """
  return _load_split(path, split)[:3]


def _load_split(
  path: Any, split: str, shift_logits: bool = False
) -> tuple[np.ndarray, np.ndarray, bool, str | None, list[str]]:
  """:func:`load_split`, what the scores' array name says they are, and the splits held.

  The fourth item is ``"probs"`` for an array named ``probs`` /
  ``probabilities``, ``"logits"`` for ``logits``, ``None`` for a name that
  says neither (``predictions``, ``scores``, a pair of ``.npy`` files). The
  fifth names the splits ``s`` the file holds (``s_<scores>`` beside
  ``s_labels``; none for a pair of ``.npy`` files).
  With ``shift_logits``, float64 scores named ``logits`` are shifted by each
  row's maximum before the float32 cast (for uses that only read their
  softmax: rows of sequence log-likelihoods near ``-1e5`` kept float32 steps
  of 2^-7, the log loss off in the 5th digit, ConfECE by 0.1 %). Not for a
  recalibrator's fit: vector and matrix scaling are not shift-invariant.
  """
  if not isinstance(path, str | bytes | os.PathLike):
    raise ValueError(f"path must be a file or folder path, got {path!r}")
  if not isinstance(split, str) or not split:  # None looked for 'None_logits'
    raise ValueError(f"split must be a split's name such as 'test' or 'val', got {split!r}")
  p = os.fsdecode(os.fspath(path))
  try:
    scores, labels, found, stem, splits = _load_raw(p, split)
  except FileNotFoundError as e:
    raise ValueError(f"predictions not found: {e.filename or p}") from None
  except IsADirectoryError as e:
    raise ValueError(f"{e.filename or p}: is a folder, expected a file") from None
  except PermissionError as e:
    raise ValueError(f"{e.filename or p}: not readable (permission denied)") from None
  except OSError as e:
    raise ValueError(f"{getattr(e, 'filename', None) or p}: cannot be read: {e}") from None
  if not (V.real_dtype(scores.dtype) or scores.dtype == np.bool_):
    raise ValueError(f"{p}: scores must be real numbers, got dtype {scores.dtype}")
  if scores.ndim != 2 or scores.shape[0] == 0 or scores.shape[1] < 2:
    raise ValueError(f"{p}: scores must be (n, C) with n >= 1 and C >= 2, got shape {scores.shape}")
  if labels.shape != (scores.shape[0],):
    raise ValueError(f"{p}: labels must have shape ({scores.shape[0]},), got {labels.shape}")
  if labels.dtype == np.bool_ and scores.shape[1] == 2:  # as every metric takes them
    labels = labels.astype(np.int64)
  if not V.real_dtype(labels.dtype):
    hint = (
      f" (booleans are classes 0 and 1 of two; the scores have C = {scores.shape[1]})"
      if labels.dtype == np.bool_
      else ""
    )
    raise ValueError(f"{p}: labels must be integers, got dtype {labels.dtype}{hint}")
  # integral and in [0, C), checked before the narrowing cast (2**32 + 1 must not become 1)
  if labels.dtype.kind == "u" and labels.size and labels.max() >= scores.shape[1]:
    i = int(np.argmax(labels >= scores.shape[1]))  # unsigned: named before any signed cast
    raise ValueError(
      f"{p}: labels must lie in [0, {scores.shape[1]}), got labels[{i}] = {labels[i]}"
    )
  wide = labels if labels.dtype.kind == "f" else labels.astype(np.int64)
  try:
    labels = V._host_labels(wide, scores.shape[1], "labels", None)
  except ValueError as e:
    raise ValueError(f"{p}: {e}") from None
  kind = "probs" if stem in _PROBS_STEMS else "logits" if stem == "logits" else None
  # before the shift hides it; float64 read on the device only where the float32 cast is
  # safe (within [-1, 2]: a 1 - sum(rest) column's -2e-16 had skipped a [0, 1] pre-check)
  if (
    kind == "logits"
    and (scores.dtype.itemsize <= 4 or (np.min(scores) >= -1 and np.max(scores) <= 2))
    and V.looks_like_probs(scores)
  ):
    raise ValueError(
      f"{p}: the scores named 'logits' are probabilities (every entry in [0, 1] and every "
      "row summing to one, within the simplex tolerance), and a softmax of probabilities is "
      "a wrong prediction; save them as 'probs' (or, if they really are logits, add a "
      "constant: the softmax is unchanged)"
    )
  if scores.dtype.kind == "f" and scores.dtype.itemsize > 4:
    inf = np.isinf(scores)  # not "beyond the float32 range": inf stays inf, as in float32 files
    if inf.any():
      i = tuple(int(v) for v in np.unravel_index(int(np.argmax(inf)), scores.shape))
      raise ValueError(
        f"{p}: scores{list(i)} = {scores[i]:g} is not finite; the metrics need finite scores "
        "(for a class that cannot occur, save probabilities with a 0 rather than a -inf logit)"
      )
    out = scores
    if kind == "logits" and shift_logits:  # the softmax is the same
      with np.errstate(invalid="ignore"):  # a NaN row stays NaN: refused by the value checks
        out = scores - np.max(scores, axis=1, keepdims=True)
    big = np.abs(out) > np.finfo(np.float32).max  # float64 beyond float32: inf after the cast
    if big.any():
      i = tuple(int(v) for v in np.unravel_index(int(np.argmax(big)), scores.shape))
      if out is scores:
        what = f"scores{list(i)} = {scores[i]:g} exceeds the float32 range"
      else:
        row = scores[i[0]]
        what = (
          f"logits row {i[0]} spans {np.min(row):g} to {np.max(row):g}, wider than the "
          "float32 range even after subtracting its maximum"
        )
      raise ValueError(f"{p}: {what} (jaxcal computes in float32); rescale the scores")
    scores = out
  return scores.astype(np.float32), np.asarray(labels, np.int32), found, kind, splits


def default_predictions(split: str = "test") -> tuple[np.ndarray, np.ndarray]:
  """The embedded real predictions: CIFAR-10 ResNet-110 logits and labels.

  Args:
    split: ``"test"`` (10,000 samples, evaluation) or ``"val"`` (5,000,
      calibration).

  Returns:
    ``(logits (n, 10) float32, labels (n,) int32)``; provenance and license
    in ``jaxcal/_data/README.md``.

  Raises:
    ValueError: ``split`` neither ``"test"`` nor ``"val"``.

  Example:
    >>> logits, labels = default_predictions()
    >>> logits.shape, logits.dtype, labels.dtype
    ((10000, 10), dtype('float32'), dtype('int32'))
    >>> float((logits.argmax(axis=1) == labels).mean())  # the ResNet-110's accuracy
    0.9452

  Reference: Gupta & Ramdas (2022), "Top-label calibration and
  multiclass-to-binary reductions", ICLR, arXiv:2107.08353 (the logits
  published with the paper's code).
  """
  if split not in ("test", "val"):
    raise ValueError(f'split must be "test" or "val" for the embedded predictions, got {split!r}')
  return load_predictions(DEFAULT_PREDICTIONS, split=split)


class Synthetic(NamedTuple):
  """Synthetic predictions with the true class probabilities known.

  Attributes:
    probs: ``(n, C)`` the model's predictions.
    labels: ``(n,)`` labels drawn from ``true_probs``.
    true_probs: ``(n, C)`` ``P(Y | x)``, the truthful report.
  """

  probs: jax.Array
  labels: jax.Array
  true_probs: jax.Array


def synthetic(
  key: jax.Array,
  n: int,
  num_classes: int,
  *,
  concentration: float = 1.0,
  scale: float = 2.0,
  temperature: float = 1.0,
) -> Synthetic:
  """Data with known true class probabilities.

  True probabilities ``mu_i = softmax(scale * g_i / sqrt(concentration))`` with
  Gaussian ``g_i``; labels ``y_i ~ Categorical(mu_i)``; predictions
  ``p_i = softmax(log(mu_i) / temperature)`` — calibrated for
  ``temperature = 1``, over-confident for ``< 1``, under-confident for ``> 1``.

  Args:
    key: a JAX PRNG key (``jax.random.key(seed)`` or ``jax.random.PRNGKey(seed)``).
    n: number of samples, a Python int ``>= 1`` (static).
    num_classes: C, a Python int ``>= 2`` (static).
    concentration: larger values give less peaked true probabilities; a
      finite number ``> 0``.
    scale: spread of the true logits; a finite number (0 gives uniform
      true probabilities).
    temperature: miscalibration of the predictions; a finite number ``> 0``.

  Returns:
    :class:`Synthetic` ``(probs, labels, true_probs)``.

  Raises:
    ValueError: ``key`` is not a PRNG key (e.g. an int seed); ``n`` or
      ``num_classes`` not an int (a bool, ``2.5``) or too small;
      ``concentration``, ``scale`` or ``temperature`` not a finite number
      (NaN, inf, a string), or ``concentration``/``temperature <= 0``; on an
      eager call, also parameters that overflow float32 (``scale = 1e39``,
      ``concentration = 1e-39``, ``temperature = 1e-38``: NaN probabilities),
      the message giving the usable range (under ``jax.jit`` with a traced
      ``key`` such draws are NaN).

  Example:
    >>> import jax
    >>> d = synthetic(jax.random.key(0), 5, 3)
    >>> d.probs.shape, d.labels.shape
    ((5, 3), (5,))

  Reference: the tempered predictions are temperature scaling run backwards,
  Guo, Pleiss, Sun & Weinberger (2017), "On Calibration of Modern Neural
  Networks", ICML, §4.2 (``softmax(z / T)``).
  """
  key = V.check_key(key)
  n = V.check_int_option(n, "n")
  num_classes = V.check_int_option(num_classes, "num_classes")
  if n < 1 or num_classes < 2:
    raise ValueError(f"need n >= 1 and num_classes >= 2, got n={n}, num_classes={num_classes}")
  V.check_entries(  # XLA aborts the process on such an allocation
    n * num_classes,
    f"the probabilities (n, num_classes) = ({n}, {num_classes})",
    "generate fewer samples",
  )
  temperature = V.check_float_option(temperature, "temperature", positive=True)
  concentration = V.check_float_option(concentration, "concentration", positive=True)
  scale = V.check_float_option(scale, "scale")
  # not float32 numbers (their cast overflows or flushes): refused before any draw, under
  # jit too; values that overflow only in some draws are checked on the outputs below
  big, tiny = float(np.finfo(np.float32).max), float(np.finfo(np.float32).tiny)
  if abs(scale) > big or concentration < tiny:  # (Python floats: no float32 cast here)
    _check_synthetic(1, num_classes, scale, concentration, temperature)
  if temperature < tiny:
    _check_synthetic(2, num_classes, scale, concentration, temperature)
  kg, ky = jax.random.split(key)
  g = jax.random.normal(kg, (n, num_classes), jnp.float32)  # the same draw under x64
  logits = scale * g / jnp.sqrt(concentration)
  mu = jax.nn.softmax(logits, axis=-1)
  y = jax.random.categorical(ky, logits, axis=-1).astype(jnp.int32)
  p = jax.nn.softmax(jax.nn.log_softmax(logits, axis=-1) / temperature, axis=-1)
  if V.is_concrete(mu, p):  # eager: one scalar comes back (under jit: NaN, as the metrics)
    _check_synthetic(int(_nonfinite(mu, p)), num_classes, scale, concentration, temperature)
  return Synthetic(p, y, mu)


#: The largest ``|g|`` of a float32 ``jax.random.normal`` draw (``sqrt(2) erfinv(1 - 2^-24)``).
_NORMAL_MAX = 5.42


@jax.jit
def _nonfinite(mu: jax.Array, p: jax.Array) -> jax.Array:
  """0 when ``mu`` and ``p`` are finite, 1 when ``mu`` is not, else 2 (one fused reduction)."""
  return jnp.where(jnp.all(jnp.isfinite(mu)), jnp.where(jnp.all(jnp.isfinite(p)), 0, 2), 1)


def _check_synthetic(
  code: int, num_classes: int, scale: float, concentration: float, temperature: float
) -> None:
  """Raises when :func:`synthetic`'s parameters overflowed float32 (``code`` of :func:`_nonfinite`).

  ``scale = 1e39`` (inf in float32), ``concentration = 1e-39`` (a subnormal,
  flushed to 0) or ``temperature = 1e-38`` passed the "finite, > 0" checks
  and gave all-NaN probabilities and labels drawn from NaN.
  """
  f32 = np.finfo(np.float32)
  tiny = float(f32.tiny)
  if code == 1:
    bound = float(f32.max) / (2 * _NORMAL_MAX)
    raise ValueError(
      f"scale = {scale:g} and concentration = {concentration:g} overflow float32: the true "
      "logits scale * g / sqrt(concentration) (g standard normal, |g| up to "
      f"{_NORMAL_MAX}) are not finite and the probabilities NaN; keep |scale| <= {bound:.1e} "
      f"and |scale| / sqrt(concentration) <= {bound:.1e}, with concentration >= {tiny:.3g} "
      "(float32's smallest normal number)"
    )
  if code == 2:
    bound = max(tiny, 2 * math.log(num_classes) / float(f32.max))
    raise ValueError(
      f"temperature = {temperature:g} overflows float32: log(probabilities) / temperature "
      f"is not finite and the predictions NaN; use temperature >= {bound:.3g} "
      f"(for num_classes = {num_classes}: 2 log(num_classes) / {float(f32.max):.3g}, and at "
      f"least {tiny:.3g}, float32's smallest normal number)"
    )
