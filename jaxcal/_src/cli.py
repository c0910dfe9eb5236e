"""The ``jaxcal`` command line: ``report``, ``recalibrate``, ``sweep``.

A user error (a bad argument, a missing or unreadable file, invalid
predictions, an output path that cannot be written) prints one line on stderr
and exits with status 2, before any computation where it can be known then.
Anything else is a bug and keeps its traceback.

The rule: :func:`main` turns only a :class:`UserError` into that one line.
The commands raise it for their own checks, and the calls that check the
user's input (loading and validating a predictions file, the report's
settings, a recalibration method, its options and fit) run inside
:func:`_user_input`, which turns jaxcal's validation ``ValueError`` (a
message that names the input) into a ``UserError``. The computations run
outside such blocks, so a ``ValueError`` they raise (from deep inside JAX or
numpy, say) is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from typing import NoReturn

import numpy as np

from jaxcal._src.paths import atomic_file

__all__ = ["main", "build_parser", "enable_compilation_cache"]


class UserError(ValueError):
  """A problem with the command's arguments or files (exit status 2, no traceback)."""


@contextlib.contextmanager
def _user_input(prefix: str = ""):
  """A block that checks the user's input: its ``ValueError`` becomes a :class:`UserError`.

  Put only validation in such a block (jaxcal's checks raise ``ValueError``
  with a message that names the input and the fix); a computation inside one
  would turn its bugs into one-line user errors.

  Args:
    prefix: put before the message (e.g. the file's path when the message
      names only the argument).
  """
  try:
    yield
  except UserError:
    raise
  except ValueError as e:
    raise UserError(f"{prefix}{e}") from None


def enable_compilation_cache() -> str | None:
  """Points JAX's persistent compilation cache at a user cache folder.

  ``$JAXCAL_CACHE_DIR``, else ``$XDG_CACHE_HOME/jaxcal/jax``, else
  ``~/.cache/jaxcal/jax``; left alone when the user configured JAX's own
  (``JAX_COMPILATION_CACHE_DIR``) or the folder cannot be created. A second
  run of a command then reuses the compiled programs of the first: all of
  them, however quick to compile (with a 0.5 s threshold a report stored 10
  of its 50 programs and compiled the other 40 again in every run, 6 s).

  Returns:
    The folder in use, or ``None``.
  """
  import jax

  if os.environ.get("JAX_COMPILATION_CACHE_DIR") or jax.config.jax_compilation_cache_dir:
    return jax.config.jax_compilation_cache_dir or os.environ.get("JAX_COMPILATION_CACHE_DIR")
  base = os.environ.get("JAXCAL_CACHE_DIR") or os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
    "jaxcal",
    "jax",
  )
  try:
    os.makedirs(base, exist_ok=True)
  except OSError:
    return None
  if not os.access(base, os.W_OK):
    return None
  jax.config.update("jax_compilation_cache_dir", base)
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
  return base


# --------------------------------------------------------------------------
# Argument checks (all before any computation)
# --------------------------------------------------------------------------


def _int_at_least(minimum: int, what: str):
  def parse(text: str) -> int:
    try:
      value = int(text)
    except ValueError:
      raise argparse.ArgumentTypeError(f"expected an integer {what}, got {text!r}") from None
    if value < minimum:
      raise argparse.ArgumentTypeError(f"expected an integer {what}, got {value}")
    return value

  return parse


def _figure_formats(text: str) -> tuple[str, ...]:
  """``--figures``: comma-separated formats among png, pdf, svg (checked before any work)."""
  formats = tuple(x for x in text.split(",") if x)
  bad = [f for f in formats if f not in FIGURE_FORMATS]
  if bad:
    raise argparse.ArgumentTypeError(
      f"figure formats must be among {', '.join(FIGURE_FORMATS)}, got {', '.join(map(repr, bad))}"
    )
  return formats


#: What ``--figures`` accepts (what matplotlib writes without extra dependencies).
FIGURE_FORMATS = ("png", "pdf", "svg")

_positive = _int_at_least(1, ">= 1")
_non_negative = _int_at_least(0, ">= 0")


def _seed(text: str) -> int:
  """A ``--seed``: any int64 (``jax.random.key`` overflows beyond, with a traceback)."""
  try:
    value = int(text)
  except ValueError:
    raise argparse.ArgumentTypeError(f"expected an integer seed, got {text!r}") from None
  from jaxcal._src import validation as V

  try:
    return V.check_seed(value)  # the library's range, its message in the parser's words
  except ValueError:
    raise argparse.ArgumentTypeError(f"expected a seed in [-2**63, 2**63), got {value}") from None


def _parent_problem(path: str) -> str | None:
  """Why files cannot be created at ``path`` (a parent that is a file, unwritable), or None.

  The first existing ancestor must be a folder in which something can really
  be created (a try, not ``os.access``, which passes for root and for folders
  that refuse new entries, such as ``/proc``).
  """
  parent = os.path.dirname(os.path.abspath(path))
  while parent and not os.path.exists(parent):
    up = os.path.dirname(parent)
    if up == parent:
      break
    parent = up
  if os.path.exists(parent) and not os.path.isdir(parent):
    return f"{parent} is a file, not a folder"
  try:
    os.rmdir(tempfile.mkdtemp(prefix=".jaxcal-check-", dir=parent))
  except OSError as e:
    return f"the folder {parent} is not writable ({e.strerror or e})"
  return None


def _check_out_dir(path: str, option: str = "--out") -> None:
  if not path:
    raise UserError(f"{option} is empty: give a folder (e.g. {option} .)")
  if os.path.exists(path) and not os.path.isdir(path):
    raise UserError(f"{option} {path}: exists and is a file; the report needs a folder")
  if os.path.isdir(os.path.join(path, "report.json")):  # found only after all the work
    raise UserError(f"{option} {path}: holds a folder named report.json; the report writes a file")
  problem = _parent_problem(os.path.join(path, "x"))  # path itself, or its first existing ancestor
  if problem:
    raise UserError(f"{option} {path}: cannot write there: {problem}")


def _check_out_file(path: str, option: str, force: bool, inputs: tuple = ()) -> None:
  """Refuses an output file that is a folder, exists without ``force``, or is an input.

  ``inputs``: the command's input paths (None for the embedded default): with
  ``--force`` an output named as an input replaced it (a val + test file
  lost its val split).
  """
  if os.path.isdir(path):
    raise UserError(f"{option} {path}: is a folder; give a file name")
  for src in inputs:
    if src and os.path.exists(path) and os.path.exists(src) and os.path.samefile(path, src):
      raise UserError(f"{option} {path}: is an input file of this command; write elsewhere")
    # a file written into an input folder of .npy files made that folder unreadable as an
    # input ("holds .npy files and .npz files") for this command and jaxcal report
    parent = os.path.dirname(os.path.abspath(path))
    if src and os.path.isdir(src) and os.path.isdir(parent) and os.path.samefile(parent, src):
      raise UserError(
        f"{option} {path}: is inside the input folder {src}, which a new file there would "
        "make unreadable as an input; write elsewhere"
      )
  if os.path.exists(path) and not force:
    raise UserError(f"{option} {path}: the file exists; pass --force to overwrite it")
  problem = _parent_problem(path)
  if problem:
    raise UserError(f"{option} {path}: cannot write there: {problem}")


def _parse_options(text: str | None) -> dict:
  if not text:
    return {}
  try:
    options = json.loads(text)
  except json.JSONDecodeError as e:
    raise UserError(
      f"--options is not valid JSON ({e.msg} at character {e.pos}): {text!r}"
    ) from None
  if not isinstance(options, dict):
    raise UserError(
      f"--options must be a JSON object such as '{{\"normalize\": false}}', "
      f"got a {type(options).__name__}: {text!r}"
    )
  return options


#: ``jaxcal.recalibrate.methods()``, spelt out so that ``--help`` needs no JAX
#: import (a test keeps the two equal).
RECALIBRATION_METHODS = (
  "bbq",
  "beta",
  "dirichlet",
  "ensemble_temperature",
  "histogram",
  "isotonic",
  "kcal",
  "local_net",
  "matrix",
  "patching",
  "platt",
  "smooth_isotonic",
  "temperature",
  "vector",
)


def _version() -> str:
  """The running package's version, as the report records it (``jaxcal.__version__``).

  Not the installed distribution's metadata: a source tree on ``PYTHONPATH``
  has none ("unknown" on the H200's image), and beside an older install the
  metadata names that one.
  """
  import jaxcal

  return jaxcal.__version__


def _mkdirs_for(path: str) -> None:
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)


# --------------------------------------------------------------------------
# Commands
# --------------------------------------------------------------------------


def _for_report(x, y, probs) -> tuple:
  """``(scores, labels)`` as the report reads the loader's decision.

  The report tells probabilities from logits by their values; logits (by
  their name) are handed to it shifted by each row's maximum (the softmax and
  the log loss are unchanged): every row then holds a 0 and otherwise negative
  entries, which are never probabilities (logits ``(l, 1 - l)`` on the simplex
  were reported as probabilities).
  """
  if probs:
    return x, y
  return np.asarray(x - np.max(x, axis=1, keepdims=True), np.float32), y


def _load(path: str | None, split: str, shift_logits: bool = False):
  """``(scores, labels, source, probs)`` of a predictions file, checked as the commands read them.

  ``shift_logits``: float64 logits are shifted by each row's maximum before
  the float32 cast (``data._load_split``), for the commands that only read
  their softmax (``report``, ``sweep``), not ``recalibrate``.

  ``probs``: whether the scores are probabilities (else logits), by the
  array's name or, where that says neither, by the values
  (:func:`~jaxcal._src.validation.probs_or_logits`). A file that cannot be
  read, or whose labels or scores are invalid (labels outside ``[0, C)``,
  non-finite logits, probabilities off the simplex), is a :class:`UserError`
  naming the file.
  """
  from jaxcal._src import data
  from jaxcal._src import validation as V

  if path is None:
    with _user_input(f"--split {split}: "):
      x, y = data.default_predictions(split)
    return x, y, f"embedded CIFAR-10 ResNet-110 ({split})", False  # (logits)
  with _user_input():  # data's messages name the file
    x, y, found, kind, others = data._load_split(path, split, shift_logits)
  if kind == "probs":  # named probabilities: checked as such, never taken for logits
    try:
      V.check_probs(x, name=f"{path}: probs")
    except ValueError as e:
      what = str(e).split(" Pass logits")[0]  # the Python API's advice
      raise UserError(
        f"{what} (an array named probs is read as probabilities; save logits as 'logits')"
      ) from None
    probs = True
  elif kind == "logits":  # named logits: logits (rows on the simplex were refused at load)
    with _user_input():
      V.check_logits(x, name=path)
    probs = False
  else:  # the one rule of the report and the metrics, named by the file
    with _user_input():
      probs = V.probs_or_logits(x, name=path)  # (probabilities off the simplex: refused there)
      if not probs:
        V.check_logits(x, name=path)
  name = os.path.basename(os.path.normpath(_scores_path(path)))
  if found:
    return x, y, f"{name} ({split})", probs
  if others:  # a file of logits/labels and val_* arrays holds two data sets, not one
    which = ", ".join(repr(s) for s in others)
    also = f"split{'s' if len(others) > 1 else ''} {which}"
    return x, y, f"{name} (no '{split}' split: its unprefixed arrays; it also holds {also})", probs
  return x, y, f"{name} (no '{split}' split: the file's one data set)", probs


def _same_data(xc, yc, xt, yt) -> bool:
  """Whether the calibration and test data are the same samples."""
  return xc.shape == xt.shape and np.array_equal(yc, yt) and np.array_equal(xc, xt)


def _emit(args, text: str, data: dict) -> None:
  """Prints ``data`` as JSON (``--format json``) or ``text`` (the other formats)."""
  from jaxcal._src.names import round_floats

  if getattr(args, "format", "text") == "json":
    print(json.dumps(round_floats(data), indent=1))
  else:
    print(text)


def _cmd_report(args) -> int:
  from jaxcal._src import report

  _check_out_dir(args.out)
  models = None
  if len(args.predictions) > 1:
    models = dict(zip(_unique_names(args.predictions), args.predictions))
  elif len(args.predictions) == 1:
    try:
      models = report.find_models(args.predictions[0])
    except OSError as e:  # a folder that cannot be listed
      raise UserError(
        f"{args.predictions[0]}: the folder is not readable ({(e.strerror or str(e)).lower()})"
      ) from None
  options = dict(
    num_bins=args.bins,
    resamples=args.resamples,
    confidence=args.confidence,
    interval=args.interval,
    seed=args.seed,
  )
  if models:
    if len(models) < 2:  # a folder of one model folder
      raise UserError(
        f"{args.predictions[0]}: holds one model ({', '.join(models)}); a comparison needs at "
        "least two: give that model's own path to report it"
      )
    if args.band_resamples is not None:  # compare_report draws no bin-count bands
      raise UserError(
        "--band-resamples: a comparison of several models draws no bands across bin counts "
        "(it ranks the models at each bin count); report each model on its own, or drop "
        "--band-resamples"
      )
    if args.utilities:  # compare_report samples no utilities: the option would be ignored
      raise UserError(
        "--utilities: a comparison of several models samples no utilities (only one model's "
        "report has UC eCDFs); report each model on its own, or drop --utilities"
      )
    loaded, sources = {}, {}
    for name, path in models.items():
      x, y, sources[name], probs = _load(path, args.split, shift_logits=True)
      loaded[name] = _for_report(x, y, probs)
    with _user_input():  # compare_report's own checks, before its computation
      report._check_settings(
        args.bins,
        args.resamples,
        args.confidence,
        args.interval,
        min(x.shape[0] for x, _ in loaded.values()),
      )
      report._groups(
        {name: x.shape for name, (x, _) in loaded.items()},
        report.RANK_BINS,
        args.interval,
        args.resamples,
      )
    rep = report.compare_report(loaded, paths=models, sources=sources, **options)
    paths = report.write_report(rep, out_dir=args.out, formats=args.figures)
  else:
    path = args.predictions[0] if args.predictions else None
    x, y, source, probs = _load(path, args.split, shift_logits=True)
    x, y = _for_report(x, y, probs)
    utilities = 1500 if args.utilities is None else args.utilities
    bands = args.band_resamples
    if bands is None:  # "--resamples 0: none": no bands either, unless asked for
      bands = 0 if args.resamples == 0 else report.ROBUSTNESS_RESAMPLES
    with _user_input():  # calibration_report's own checks, before its computation
      report._check_settings(args.bins, args.resamples, args.confidence, args.interval, len(y))
    with _user_input():
      report._check_settings(
        args.bins, bands, args.confidence, args.interval, len(y), "--band-resamples"
      )
    with _user_input("--utilities: "):
      report._check_utilities(utilities, x.shape[1])
    rep = report.calibration_report(
      x,
      y,
      num_utilities=utilities,
      source=source,
      path=path,
      **options,
      robustness_resamples=bands,
    )
    paths = report.write_report(rep, x, y, args.out, formats=args.figures)
  fmt = report.format_markdown if args.format == "md" else report.format_summary
  text = fmt(rep, figures=paths)  # names the figure files written, in their format
  if args.format == "json":  # the report itself: report.json as written (timing to 3
    with open(paths["json"], encoding="utf-8") as f:  # digits, the files), not the dict
      written = json.load(f)
  else:
    written = {}
  _emit(args, text, written)
  if args.format != "json":
    figures = ", ".join(sorted(k for k in paths if k != "json"))
    drawn = f" and the figures {figures} ({', '.join(args.figures)})" if figures else ""
    print(f"  wrote {os.path.relpath(paths['json'])}{drawn} in {os.path.relpath(args.out)}")
  return 0


def _scores_path(path: str) -> str:
  """The file that names a data set: ``path``, or a ``scores.npy,labels.npy`` pair's scores file.

  A pair was named after its labels file (``test_labels.npy``), the same for
  every model whose labels are shared.
  """
  from jaxcal._src.data import _pair

  pair = _pair(path)
  return path if pair is None else pair[0]


def _name(path: str, depth: int = 1) -> str:
  """A model's name: the path's last ``depth`` parts, ``.npz`` dropped (a pair's scores file)."""
  base = "/".join(os.path.normpath(_scores_path(path)).split(os.sep)[-depth:])
  return base[: -len(".npz")] if base.endswith(".npz") else base


def _unique_names(paths: list[str]) -> list[str]:
  """One model name per path: the file name, with as many parent folders as tell them apart.

  ``runA/preds.npz`` and ``runB/preds.npz`` are ``runA/preds`` and ``runB/preds``
  (one ``preds`` would silently drop a model); a path given twice is an error.
  """
  full = [os.path.normpath(os.path.abspath(p)) for p in paths]
  twice = sorted({p for p, f in zip(paths, full) if full.count(f) > 1})
  if twice:
    raise UserError(f"the same predictions were given twice: {twice}")
  depth = [1] * len(full)
  while True:
    names = [_name(f, d) for f, d in zip(full, depth)]
    clash = [i for i, n in enumerate(names) if names.count(n) > 1]
    if not clash:
      return names
    for i in clash:  # distinct paths differ somewhere: this ends
      depth[i] = min(depth[i] + 1, len(full[i].split(os.sep)))


def _recal_rows(before, after, y) -> dict:
  """label -> {"before", "after"} for the recalibration summary."""
  from jaxcal._src import report

  head = report._Headline(15, report.RECALIBRATION_METRICS)
  b, a = head(before, y), head(after, y)
  return {k: {"before": float(b[k]), "after": float(a[k])} for k in head.labels()}


def _cmd_recalibrate(args) -> int:
  import jax

  from jaxcal import recalibrate
  from jaxcal._src.recal.base import _lookup

  with _user_input():
    _lookup(args.method)  # an unknown method is named before any file is read
  options = _parse_options(args.options)
  if "from_logits" in options:  # else fit() "got multiple values for keyword argument"
    raise UserError(
      "--options: from_logits is not an option here: the command reads it from the files "
      "(logits, or probabilities whose rows sum to one)"
    )
  if not args.out.endswith(".npz"):
    raise UserError(f"--out {args.out}: use a .npz file name")
  ins = (args.cal_file, args.test_file)
  _check_out_file(args.out, "--out", args.force, ins)
  if args.save_model:
    if not args.save_model.endswith((".npz", ".msgpack")):
      raise UserError(f"--save-model {args.save_model}: use a .npz or .msgpack file name")
    _check_out_file(args.save_model, "--save-model", args.force, ins)
    if os.path.abspath(args.save_model) == os.path.abspath(args.out):
      raise UserError(
        f"--out and --save-model are the same file ({args.out}): the model would replace the "
        "recalibrated probabilities; give two file names"
      )
  xc, yc, cal_source, cal_probs = _load(args.cal_file, args.cal_split)
  xt, yt, test_source, test_probs = _load(args.test_file, args.test_split)
  if _same_data(xc, yc, xt, yt):
    raise UserError(
      f"the calibration data ({cal_source}) and the test data ({test_source}) are the same "
      f"{len(yc):,} samples: a recalibrator scored on the samples it was fitted on looks "
      "better than it is; give a file with val_* and test_* arrays, or two different files"
    )
  if cal_probs != test_probs:
    kinds = {True: "probabilities", False: "logits"}
    raise UserError(
      f"the calibration file holds {kinds[cal_probs]} but the test file holds "
      f"{kinds[test_probs]}; give both as logits or both as probabilities"
    )
  if xc.shape[1] != xt.shape[1]:
    raise UserError(
      f"the calibration file has C = {xc.shape[1]} classes but the test file has C = {xt.shape[1]}"
    )
  from_logits = not cal_probs  # (both files' scores were checked by _load, named)
  t0 = time.perf_counter()
  try:
    # fit checks the option names and values and the calibration data (classes present,
    # enough samples for its folds) as it goes: its ValueErrors are about the user's choices
    with _user_input():
      rc = recalibrate.fit(args.method, xc, yc, from_logits=from_logits, **options)
  except TypeError as e:  # Python's own message for a keyword the method does not take
    if "keyword argument" not in str(e):
      raise
    raise UserError(f"--options: {e}") from None
  fit_s = time.perf_counter() - t0
  before = jax.nn.softmax(xt, axis=-1) if from_logits else xt
  after = np.asarray(rc(xt))
  from jaxcal._src.report import format_comparison

  head = (
    f"{args.method}: fitted on {len(yc):,} samples of {cal_source} in {fit_s:.3g} s; "
    f"tested on {len(yt):,} samples of {test_source}"
  )
  if options.get("normalize", True) is False:
    # the class-wise maps' own outputs (CW-HB, CW-IR): rows need not sum to one, so
    # there is no before/after table of probability metrics, and the file says
    # "classwise_scores": a name the predictions loader refuses (as "scores" they were
    # read back as logits, softmaxed and reported with exit 0)
    rows, kind = None, "classwise_scores"
    note = (
      "normalize=false: the outputs are per-class scores whose rows need not sum to 1; "
      "no before/after table of probability metrics"
    )
    table = "  " + note
  else:
    rows, kind, note = _recal_rows(before, after, yt), "probs", None
    table = format_comparison(rows, ("before", "after"), markdown=args.format == "md")
  out = args.out
  _mkdirs_for(out)
  with atomic_file(out, "wb") as f:
    np.savez(f, **{kind: after.astype(np.float32)}, labels=np.asarray(yt))
  if args.save_model:
    _mkdirs_for(args.save_model)
    recalibrate.save(rc, args.save_model)
  text = head + "\n" + table
  data = {
    "method": args.method,
    "options": options,
    "calibration_file": os.path.abspath(args.cal_file),
    "calibration_data": cal_source,
    "test_file": os.path.abspath(args.test_file),
    "test_data": test_source,
    "fit_s": fit_s,
    "n_calibration": len(yc),
    "n_test": len(yt),
    "metrics": rows,
    "metrics_note": note,  # why "metrics" is null (None when it is not)
    "out": os.path.abspath(out),
    "out_array": kind,  # the array of the scores in "out": probs or classwise_scores
    "save_model": os.path.abspath(args.save_model) if args.save_model else None,
  }
  _emit(args, text, data)
  if args.format != "json":
    what = "probabilities" if kind == "probs" else "scores"
    print(f"  wrote recalibrated test {what} to {out}")
    if args.save_model:
      print(f"  wrote the fitted recalibrator to {args.save_model}")
  return 0


def _cmd_sweep(args) -> int:
  from jaxcal import utility
  from jaxcal._src.report import _sampled_utilities

  if not args.out.endswith((".json", ".npz")):
    raise UserError(f"--out {args.out}: use a .json or .npz file name")
  _check_out_file(args.out, "--out", args.force, (args.predictions,))
  x, y, source, probs = _load(args.predictions, args.split, shift_logits=True)
  from_logits = not probs
  with _user_input("--m: "):  # the sampler's size check (its sampling is the same call)
    us = _sampled_utilities(args.seed, args.family, args.m, x.shape[1])  # jaxcal report's
  t0 = time.perf_counter()
  errs = np.asarray(utility.uc_sweep(x, y, us, chunk_size=args.chunk_size, from_logits=from_logits))
  dt = time.perf_counter() - t0
  e, frac = (np.asarray(a) for a in utility.ecdf(errs))
  from jaxcal._src.names import format_number

  # in float64, as the report's quantiles (numpy's linear interpolation)
  qs = {
    f"{int(100 * q)}%": float(np.quantile(errs.astype(np.float64), q)) for q in (0.1, 0.5, 0.9, 1.0)
  }
  if args.format == "md":
    text = "\n".join(
      [f"UC over {args.m:,} {args.family} utilities on {source}", "", "| quantile | UC |"]
      + ["|---|---|"]
      + [f"| {k} | {format_number(v)} |" for k, v in qs.items()]
    )
  else:
    text = f"UC over {args.m:,} {args.family} utilities on {source}: {format_number(dt)} s\n" + (
      # quantiles, not fractions: "90% of utilities have UC <= q" was false for
      # --m 3 (2 of 3 are, as numpy interpolates between the two largest)
      "\n".join(f"  {k:>4s} quantile of UC: {format_number(v)}" for k, v in qs.items())
    )
  out = args.out
  _mkdirs_for(out)
  if out.endswith(".json"):
    with atomic_file(out) as f:
      json.dump(
        {
          "family": args.family,
          "m": args.m,
          "seed": args.seed,
          "source": source,
          "errors": errs.tolist(),
        },
        f,
      )
  else:
    with atomic_file(out, "wb") as f:
      np.savez(f, errors=errs, sorted_errors=e, fractions=frac)
  _emit(  # after the file: a reader that closes stdout early (`| head -1`) keeps it
    args,
    text,
    {"family": args.family, "m": args.m, "seed": args.seed, "source": source, "quantiles": qs},
  )
  if args.format != "json":
    print(f"  wrote {out}")
  return 0


# --------------------------------------------------------------------------
# Parser
# --------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
  """``argparse`` with one-line errors (no usage block) and exit status 2."""

  def error(self, message: str) -> NoReturn:
    self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _format_arg(parser) -> None:
  parser.add_argument(
    "--format",
    choices=("text", "md", "json"),
    default="text",
    help="what is printed: a text summary, markdown tables, or JSON (text)",
  )


def build_parser() -> argparse.ArgumentParser:
  """The ``jaxcal`` argument parser (``report``, ``recalibrate``, ``sweep``)."""
  p = _Parser(prog="jaxcal", description="Calibration of multiclass classifiers in JAX.")
  p.add_argument("--version", action="version", version=f"jaxcal {_version()}")
  sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

  r = sub.add_parser("report", help="full calibration report of a predictions file")
  r.add_argument(
    "predictions",
    nargs="*",
    default=[],
    help=".npz file, folder of .npy files, or 'scores.npy,labels.npy' "
    "(default: the embedded CIFAR-10 ResNet-110 test logits); several of them, or a folder "
    "of model folders / .npz files, compare the models (rankings across bin counts)",
  )
  r.add_argument("--out", default="jaxcal-report", help="output folder (default: ./jaxcal-report)")
  r.add_argument("--split", default="test", help="split to read from multi-split files (test)")
  r.add_argument("--bins", type=_positive, default=15, help="bin count of the headline errors (15)")
  r.add_argument(
    "--utilities",
    type=_non_negative,
    default=None,  # 1500 (None tells an explicit value apart: refused when comparing models)
    help="utilities sampled per family for the eCDFs of one model's report (1500; 0 skips; "
    "not with several models)",
  )
  r.add_argument(
    "--resamples",
    type=_non_negative,
    default=200,
    help="bootstrap resamples of the intervals (200; 0: none)",
  )
  r.add_argument(
    "--band-resamples",
    type=_non_negative,
    default=None,  # 50, or 0 with --resamples 0 (None tells an explicit value apart)
    help="bootstrap resamples of the bands across bin counts of one model's report (50, "
    "or 0 with --resamples 0; 0: none; not with several models)",
  )
  r.add_argument("--confidence", type=float, default=0.95, help="coverage of the intervals (0.95)")
  r.add_argument(
    "--interval",
    choices=("percentile", "bca", "basic", "normal"),
    default="percentile",
    help="bootstrap interval (percentile)",
  )
  r.add_argument(
    "--figures",
    type=_figure_formats,
    default=("png", "pdf"),
    help='figure formats, comma-separated (png,pdf; also svg; "" for none)',
  )
  r.add_argument(
    "--seed",
    type=_seed,
    default=0,
    help="the one seed of every random draw (0); the utilities are jaxcal sweep's of this seed",
  )
  _format_arg(r)
  r.set_defaults(func=_cmd_report)

  c = sub.add_parser("recalibrate", help="fit a recalibrator on one file, apply it to another")
  c.add_argument(
    "method",
    help="one of " + ", ".join(RECALIBRATION_METHODS) + " (local_net and kcal also need "
    "features, so only from Python)",
  )
  c.add_argument("cal_file", help="predictions to fit on (.npz, folder or 'scores.npy,labels.npy')")
  c.add_argument("test_file", help="predictions to recalibrate and score (same forms)")
  c.add_argument(
    "--out",
    required=True,
    help="output .npz with the recalibrated test probs (classwise_scores with "
    "normalize=false) and labels",
  )
  c.add_argument(
    "--cal-split", default="val", help="split of CAL_FILE to fit on, in multi-split files (val)"
  )
  c.add_argument(
    "--test-split", default="test", help="split of TEST_FILE to score, in multi-split files (test)"
  )
  c.add_argument(
    "--options", default=None, help="method options as JSON, e.g. '{\"normalize\": false}'"
  )
  c.add_argument(
    "--save-model", default=None, help="also save the fitted recalibrator (.npz/.msgpack)"
  )
  c.add_argument("--force", action="store_true", help="overwrite existing output files")
  _format_arg(c)
  c.set_defaults(func=_cmd_recalibrate)

  s = sub.add_parser("sweep", help="utility-calibration errors over sampled utilities")
  s.add_argument(
    "predictions",
    nargs="?",
    default=None,
    help=".npz file, folder of .npy files, or 'scores.npy,labels.npy' (default: the embedded "
    "CIFAR-10 ResNet-110 test logits)",
  )
  s.add_argument(
    "--family", choices=("linear", "rank"), default="linear", help="utility family (linear)"
  )
  s.add_argument("--m", type=_positive, default=1500, help="number of utilities (1500)")
  s.add_argument(
    "--chunk-size",
    type=_positive,
    default=None,
    help="utilities per compiled chunk (default: sized to the memory)",
  )
  s.add_argument(
    "--seed",
    type=_seed,
    default=0,
    help="seed of the sampled utilities (0): the key of family linear/rank is "
    "jax.random.split(jax.random.split(jax.random.key(seed), 4)[3])[0/1], the key made under "
    "jax.enable_x64 "
    "(all 64 bits of the seed), as in jaxcal report, so --m M --seed S "
    "gives the UC of jaxcal report --utilities M --seed S",
  )
  s.add_argument("--split", default="test", help="split to read from multi-split files (test)")
  s.add_argument("--out", required=True, help="output .npz (errors, eCDF) or .json")
  s.add_argument("--force", action="store_true", help="overwrite an existing output file")
  _format_arg(s)
  s.set_defaults(func=_cmd_sweep)
  return p


def _out_of_memory(e: BaseException) -> bool:
  """Whether ``e`` is XLA's failure to allocate (``RESOURCE_EXHAUSTED``), or Python's.

  A size within jaxcal's limits that the machine cannot hold ended in a
  40-line ``JaxRuntimeError`` traceback; it is a one-line error instead (sizes
  beyond the limits, such as ``--m 10000000000`` utilities, are refused before).
  """
  if isinstance(e, MemoryError):
    return True
  import jax

  return isinstance(e, jax.errors.JaxRuntimeError) and (
    "RESOURCE_EXHAUSTED" in str(e) or "Out of memory" in str(e)
  )


def main(argv: list[str] | None = None) -> int:
  """Runs the command line; returns the exit status (2 for a user error).

  A reader of stdout that stops early (``jaxcal sweep ... | head -1``) ends the
  command with status 1 and nothing on stderr, as the Python docs recommend
  (https://docs.python.org/3/library/signal.html#note-on-sigpipe), rather than a
  ``BrokenPipeError`` traceback; the output files are written before the summary.
  """
  try:
    try:
      args = build_parser().parse_args(argv)
    except SystemExit:  # --help, --version (and parser errors, on stderr)
      sys.stdout.flush()  # here, not at exit: a closed pipe is then caught below
      raise
    try:
      enable_compilation_cache()
      status = args.func(args)
      sys.stdout.flush()
      return status
    except UserError as e:  # bad arguments, files or predictions: one line, no traceback
      print(f"jaxcal {args.command}: error: {e}", file=sys.stderr)
      return 2
    except Exception as e:
      if not _out_of_memory(e):
        raise
      first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
      print(
        f"jaxcal {args.command}: error: out of memory ({first}); ask for less at once "
        "(fewer utilities, resamples or bin counts, a smaller --chunk-size) or use a "
        "device with more memory",
        file=sys.stderr,
      )
      return 1
  except BrokenPipeError:
    # Python flushes stdout again at exit: point it at devnull, or that flush fails too
    with contextlib.suppress(OSError, ValueError, AttributeError):  # (no fd under capture)
      os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 1


if __name__ == "__main__":  # pragma: no cover
  sys.exit(main())
