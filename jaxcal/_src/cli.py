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


def _cmd_report(args) -> int:
  from jaxcal._src import report

  x, y, source = _load(args.predictions, args.split)
  rep = report.calibration_report(
    x, y, num_bins=args.bins, num_utilities=args.utilities, seed=args.seed, source=source
  )
  paths = report.write_report(rep, x, y, args.out)
  print(report.format_summary(rep))
  print(f"  wrote {', '.join(sorted(os.path.relpath(p) for p in paths.values()))}")
  return 0


def _metrics_line(probs, y) -> str:
  from jaxcal import metrics, scores

  return (
    f"acc {100 * (1 - float(scores.classification_error(probs, y))):.2f}%  "
    f"NLL {float(scores.log_loss(probs, y)):.4f}  Brier {float(scores.brier(probs, y)):.4f}  "
    f"ConfECE {100 * float(metrics.conf_ece(probs, y)):.3f}  "
    f"LinCE_cw {100 * float(metrics.classwise_ce(probs, y)):.5f}"
  )


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
  print(f"{args.method}: fitted on {len(yc):,} samples in {fit_s:.2f} s")
  print(f"  before: {_metrics_line(before, yt)}")
  print(f"  after:  {_metrics_line(after, yt)}")
  out = args.out
  os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
  np.savez(out, probs=after.astype(np.float32), labels=np.asarray(yt))
  print(f"  wrote recalibrated test probabilities to {out}")
  if args.save_model:
    recalibrate.save(rc, args.save_model)
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
  print(f"UC over {args.m:,} {args.family} utilities on {source}: {dt:.2f} s")
  for q in (0.5, 0.9, 1.0):
    print(f"  {int(100 * q):3d}% of utilities have UC <= {np.quantile(errs, q):.5f}")
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
  print(f"  wrote {out}")
  return 0


def build_parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(
    prog="jaxcal", description="Calibration of multiclass classifiers in JAX."
  )
  sub = p.add_subparsers(dest="command", required=True)

  r = sub.add_parser("report", help="full calibration report of a predictions file")
  r.add_argument(
    "predictions",
    nargs="?",
    default=None,
    help=".npz file, folder of .npy files, or 'scores.npy,labels.npy' "
    "(default: the embedded CIFAR-10 ResNet-110 test logits)",
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
  r.add_argument("--seed", type=int, default=0)
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
  c.set_defaults(func=_cmd_recalibrate)

  s = sub.add_parser("sweep", help="utility-calibration errors over sampled utilities")
  s.add_argument("predictions", nargs="?", default=None)
  s.add_argument("--family", choices=("linear", "rank"), default="linear")
  s.add_argument("--m", type=int, default=1500, help="number of utilities (1500)")
  s.add_argument("--chunk-size", type=int, default=None)
  s.add_argument("--seed", type=int, default=0)
  s.add_argument("--split", default="test")
  s.add_argument("--out", required=True, help="output .npz (errors, eCDF) or .json")
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
