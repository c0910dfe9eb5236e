"""The ``jaxcal`` command line: ``report``, ``recalibrate``, ``sweep``."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

__all__ = ["main"]


def _load(path: str | None, split: str):
  from jaxcal._src import data

  if path is None:
    x, y = data.default_predictions(split)
    return x, y, f"embedded CIFAR-10 ResNet-110 ({split})"
  x, y = data.load_predictions(path, split=split)
  return x, y, f"{os.path.basename(os.path.normpath(path))} ({split})"


def _emit(args, text: str, data: dict) -> None:
  """Prints ``data`` as JSON (``--format json``) or ``text`` (the other formats)."""
  from jaxcal._src.names import round_floats

  if getattr(args, "format", "text") == "json":
    print(json.dumps(round_floats(data), indent=1))
  else:
    print(text)


def _cmd_report(args) -> int:
  from jaxcal._src import report

  models = None
  if len(args.predictions) > 1:
    models = {_name(p): p for p in args.predictions}
  elif len(args.predictions) == 1:
    models = report.find_models(args.predictions[0])
  options = dict(
    num_bins=args.bins,
    resamples=args.resamples,
    confidence=args.confidence,
    interval=args.interval,
    seed=args.seed,
  )
  if models:
    loaded = {name: _load(path, args.split)[:2] for name, path in models.items()}
    rep = report.compare_report(loaded, paths=models, **options)
    paths = report.write_report(rep, out_dir=args.out, formats=args.figures)
  else:
    path = args.predictions[0] if args.predictions else None
    x, y, source = _load(path, args.split)
    rep = report.calibration_report(
      x, y, num_utilities=args.utilities, source=source, path=path, **options
    )
    paths = report.write_report(rep, x, y, args.out, formats=args.figures)
  text = report.format_markdown(rep) if args.format == "md" else report.format_summary(rep)
  _emit(args, text, {k: v for k, v in rep.items()})
  if args.format != "json":
    figures = ", ".join(sorted(k for k in paths if k != "json"))
    print(
      f"  wrote {os.path.relpath(paths['json'])} and the figures {figures} "
      f"({', '.join(args.figures)}) in {os.path.relpath(args.out)}"
    )
  return 0


def _name(path: str) -> str:
  base = os.path.basename(os.path.normpath(path))
  return base[: -len(".npz")] if base.endswith(".npz") else base


def _recal_rows(before, after, y) -> dict:
  """label -> {"before", "after"} for the recalibration summary."""
  from jaxcal._src import report

  head = report._Headline(15, report.RECALIBRATION_METRICS)
  b, a = head(before, y), head(after, y)
  return {k: {"before": float(b[k]), "after": float(a[k])} for k in head.labels()}


def _cmd_recalibrate(args) -> int:
  import jax

  from jaxcal import recalibrate
  from jaxcal._src.data import looks_like_probs

  xc, yc, _ = _load(args.cal_file, args.cal_split)
  xt, yt, _ = _load(args.test_file, args.test_split)
  from_logits = not looks_like_probs(xc)
  options = json.loads(args.options) if args.options else {}
  t0 = time.perf_counter()
  rc = recalibrate.fit(args.method, xc, yc, from_logits=from_logits, **options)
  fit_s = time.perf_counter() - t0
  before = jax.nn.softmax(xt, axis=-1) if from_logits else xt
  after = np.asarray(rc(xt))
  from jaxcal._src.report import format_comparison

  rows = _recal_rows(before, after, yt)
  head = f"{args.method}: fitted on {len(yc):,} samples in {fit_s:.3g} s; test n = {len(yt):,}"
  out = args.out
  os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
  np.savez(out, probs=after.astype(np.float32), labels=np.asarray(yt))
  if args.save_model:
    recalibrate.save(rc, args.save_model)
  text = head + "\n" + format_comparison(rows, ("before", "after"), markdown=args.format == "md")
  data = {
    "method": args.method,
    "options": options,
    "calibration_file": os.path.abspath(args.cal_file),
    "test_file": os.path.abspath(args.test_file),
    "fit_s": fit_s,
    "n_calibration": len(yc),
    "n_test": len(yt),
    "metrics": rows,
    "out": os.path.abspath(out),
  }
  _emit(args, text, data)
  if args.format != "json":
    print(f"  wrote recalibrated test probabilities to {out}")
    if args.save_model:
      print(f"  wrote the fitted recalibrator to {args.save_model}")
  return 0


def _cmd_sweep(args) -> int:
  import jax

  from jaxcal import utility
  from jaxcal._src.data import looks_like_probs

  x, y, source = _load(args.predictions, args.split)
  probs = x if looks_like_probs(x) else np.asarray(jax.nn.softmax(x, axis=-1))
  key = jax.random.key(args.seed)
  sampler = {"linear": utility.sample_linear, "rank": utility.sample_rank}[args.family]
  us = sampler(key, args.m, probs.shape[1])
  t0 = time.perf_counter()
  errs = np.asarray(utility.uc_sweep(probs, y, us, chunk_size=args.chunk_size))
  dt = time.perf_counter() - t0
  e, frac = (np.asarray(a) for a in utility.ecdf(errs))
  from jaxcal._src.names import format_number

  qs = {f"{int(100 * q)}%": float(np.quantile(errs, q)) for q in (0.1, 0.5, 0.9, 1.0)}
  if args.format == "md":
    text = "\n".join(
      [f"UC over {args.m:,} {args.family} utilities on {source}", "", "| quantile | UC |"]
      + ["|---|---|"]
      + [f"| {k} | {format_number(v)} |" for k, v in qs.items()]
    )
  else:
    text = f"UC over {args.m:,} {args.family} utilities on {source}: {format_number(dt)} s\n" + (
      "\n".join(f"  {k:>4s} of utilities have UC <= {format_number(v)}" for k, v in qs.items())
    )
  _emit(
    args,
    text,
    {"family": args.family, "m": args.m, "seed": args.seed, "source": source, "quantiles": qs},
  )
  out = args.out
  os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
  if out.endswith(".json"):
    with open(out, "w") as f:
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
    np.savez(out, errors=errs, sorted_errors=e, fractions=frac)
  if args.format != "json":
    print(f"  wrote {out}")
  return 0


def _format_arg(parser) -> None:
  parser.add_argument(
    "--format",
    choices=("text", "md", "json"),
    default="text",
    help="what is printed: a text summary, markdown tables, or JSON (text)",
  )


def build_parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(
    prog="jaxcal", description="Calibration of multiclass classifiers in JAX."
  )
  sub = p.add_subparsers(dest="command", required=True)

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
  r.add_argument("--bins", type=int, default=15, help="bin count of the headline errors (15)")
  r.add_argument(
    "--utilities",
    type=int,
    default=1500,
    help="utilities sampled per family for the eCDFs (1500; 0 skips)",
  )
  r.add_argument(
    "--resamples", type=int, default=200, help="bootstrap resamples of the intervals (200; 0: none)"
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
    type=lambda t: tuple(x for x in t.split(",") if x),
    default=("png", "pdf"),
    help="figure formats, comma-separated (png,pdf; also svg)",
  )
  r.add_argument("--seed", type=int, default=0, help="the one seed of every random draw (0)")
  _format_arg(r)
  r.set_defaults(func=_cmd_report)

  c = sub.add_parser("recalibrate", help="fit a recalibrator on one file, apply it to another")
  c.add_argument(
    "method",
    help="temperature, vector, matrix, dirichlet, platt, histogram, "
    "isotonic, smooth_isotonic, patching",
  )
  c.add_argument("cal_file")
  c.add_argument("test_file")
  c.add_argument("--out", required=True, help="output .npz with recalibrated test probs and labels")
  c.add_argument("--cal-split", default="val")
  c.add_argument("--test-split", default="test")
  c.add_argument(
    "--options", default=None, help="method options as JSON, e.g. '{\"normalize\": false}'"
  )
  c.add_argument(
    "--save-model", default=None, help="also save the fitted recalibrator (.npz/.msgpack)"
  )
  _format_arg(c)
  c.set_defaults(func=_cmd_recalibrate)

  s = sub.add_parser("sweep", help="utility-calibration errors over sampled utilities")
  s.add_argument("predictions", nargs="?", default=None)
  s.add_argument("--family", choices=("linear", "rank"), default="linear")
  s.add_argument("--m", type=int, default=1500, help="number of utilities (1500)")
  s.add_argument("--chunk-size", type=int, default=None)
  s.add_argument("--seed", type=int, default=0)
  s.add_argument("--split", default="test")
  s.add_argument("--out", required=True, help="output .npz (errors, eCDF) or .json")
  _format_arg(s)
  s.set_defaults(func=_cmd_sweep)
  return p


def main(argv: list[str] | None = None) -> int:
  args = build_parser().parse_args(argv)
  try:
    return args.func(args)
  except ValueError as e:
    print(f"jaxcal {args.command}: error: {e}", file=sys.stderr)
    return 2


if __name__ == "__main__":  # pragma: no cover
  sys.exit(main())
