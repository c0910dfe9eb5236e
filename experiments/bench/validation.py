"""Benchmark: the cost of input validation in an eager metric call, and of NaN under jit.

An eager ``metrics.conf_ece`` at ``n = 10^6``, ``C = 100`` (the CIFAR-100
ResNet-110 test softmax outputs tiled 100 times; synthetic Dirichlet rows if
the shared data are absent; ``--classes 10`` tiles the CIFAR-10 ones, whose
narrow rows the check reads in one pass), with numpy inputs and with inputs already on the
device. The call is split into its parts, each timed on its own in the same
run: host-to-device transfer (numpy inputs only; the library's own copy,
``validation._device``), validation
(``validation.check_predictions``: the fused device check and the two
scalars it returns) and computation (the compiled metric core alone). The
target is validation <= 25 % of the eager call. The check's program alone
is timed beside the two-reduction form (row sums, then a global minimum)
that rows of at most ``NARROW_ROW`` entries replaced by one pass. Since the eager call runs
its checks inside the metric's program, ``validation_in_call`` also gives
what they add to it: the eager call on device input less the core alone.

References measured in the same run: the numpy checks a user would write
(finite, in ``[0, 1]``, row sums, label range) on the numpy input, and the
previous jaxcal validation layer (``git show fbbbbc7:jaxcal/_src/validation.py``,
host copies included) when git is available.

Under ``jax.jit`` a metric folds its validity flag into the result (NaN for
invalid input); its cost is the jitted public function against the jitted
core alone, on device inputs, for ``conf_ece``, ``classwise_ece`` and
``brier``.

Usage::

  python experiments/bench/validation.py [--n 1000000] [--classes 100] [--repeat 5]
  python experiments/bench/validation.py --classes 10 --name validation_c10

Writes ``experiments/results/validation.json`` (``--name``: that name).
"""

from __future__ import annotations

import argparse
import importlib.util
import pathlib
import subprocess
import sys
import tempfile

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from _common import cpu_load, device_info, machine_note, timeit, write_result

PREVIOUS = "fbbbbc7"  # the commit before the fused validation layer


def make_data(n: int, c: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, str]:
  """Probabilities and labels: tiled real CIFAR-100 (C = 100) or CIFAR-10 (C = 10) outputs."""
  d = ROOT.parent / "shared" / "data" / "cifar_logits" / f"cifar{c}_resnet110"
  if c in (10, 100) and (d / "test_logits.npy").exists():
    z = np.load(d / "test_logits.npy").astype(np.float64)
    y = np.load(d / "test_labels.npy")
    e = np.exp(z - z.max(1, keepdims=True))
    p = (e / e.sum(1, keepdims=True)).astype(np.float32)
    reps = -(-n // p.shape[0])
    return np.tile(p, (reps, 1))[:n], np.tile(y, reps)[:n], f"CIFAR-{c} ResNet-110 test, tiled"
  rng = np.random.default_rng(seed)
  p = rng.dirichlet(np.full(c, 0.1), n).astype(np.float32)
  p /= p.sum(1, keepdims=True)
  return p, rng.integers(0, c, n), "synthetic Dirichlet(0.1)"


def numpy_checks(p: np.ndarray, y: np.ndarray, c: int) -> bool:
  """The checks a careful user writes in numpy (the reference)."""
  return bool(
    np.isfinite(p).all()
    and p.min() >= -1e-3
    and p.max() <= 1 + 1e-3
    and np.abs(p.sum(1) - 1).max() <= 1e-3
    and y.min() >= 0
    and y.max() < c
  )


def previous_layer():
  """The validation module of commit PREVIOUS, imported from git (or None)."""
  try:
    src = subprocess.run(
      ["git", "show", f"{PREVIOUS}:jaxcal/_src/validation.py"],
      cwd=ROOT,
      capture_output=True,
      text=True,
      check=True,
    ).stdout
  except (OSError, subprocess.CalledProcessError):
    return None
  path = pathlib.Path(tempfile.mkdtemp()) / "previous_validation.py"
  path.write_text(src)
  spec = importlib.util.spec_from_file_location("previous_validation", path)
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod


def main(argv=None) -> dict:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--n", type=int, default=1_000_000)
  ap.add_argument("--classes", type=int, default=100)
  ap.add_argument("--repeat", type=int, default=5)
  ap.add_argument("--name", default="validation")
  args = ap.parse_args(argv)

  import jax
  import jax.numpy as jnp

  from jaxcal import metrics, scores
  from jaxcal._src import calibration_errors as CE
  from jaxcal._src import validation as V
  from jaxcal._src.scores import _scorer, brier_per_sample

  info = device_info()
  p, y, source = make_data(args.n, args.classes)
  c = args.classes
  pd = jax.device_put(p)
  yd = jax.device_put(y.astype(np.int32))
  jax.block_until_ready((pd, yd))
  r = args.repeat

  t = {}
  # ---- the eager call and its parts
  t["eager_numpy"] = timeit(lambda: metrics.conf_ece(p, y), r)
  t["eager_device"] = timeit(lambda: metrics.conf_ece(pd, yd), r)
  # the library's own host-to-device path (a private aligned copy on the CPU)
  t["transfer"] = timeit(lambda: (V._device(p), V._device(y.astype(np.int32))), r)
  t["validation_device"] = timeit(lambda: V.check_predictions(pd, yd).scores, r)
  t["validation_numpy"] = timeit(lambda: V.check_predictions(p, y).scores, r)
  fixed15 = {"max_bins": 16, "binning": "fixed", "kind": "ece", "single_count": True}
  core = CE._compiled(CE._conf_core, False, 0, False, False, **fixed15)
  m = jnp.int32(15)
  t["compute"] = timeit(lambda: core(pd, yd, None, m), r)
  # ---- the simplex check's program alone, and the two-reduction form (row
  # sums, then a global minimum) that rows of at most NARROW_ROW entries
  # replaced by one pass (numerics.row_sum_min)
  tol = V.simplex_atol(pd.dtype)
  spec = V._Spec(xs=(V._Arr("probs", "", 2, tol),))
  t["check_program"] = timeit(lambda: V._ok_jit(spec, (pd,), None, None, None), r)
  two = jax.jit(lambda x: jnp.all(jnp.abs(jnp.sum(x, -1) - 1) <= tol) & (jnp.min(x) >= -tol))
  t["check_two_reductions"] = timeit(lambda: two(pd), r)
  # ---- references
  t["numpy_checks_reference"] = timeit(lambda: numpy_checks(p, y, c), r)
  prev = previous_layer()
  if prev is not None:

    def previous():
      q = prev.check_probs(pd)
      return q, prev.check_labels(yd, q.shape[0], q.shape[1])

    t["previous_validation_device"] = timeit(previous, r)

  # ---- NaN propagation under jit: the public function vs the core alone
  jit_cost = {}
  w = jnp.full((c,), 1.0 / c, jnp.float32)
  cw_core = CE._compiled(CE._classwise_core, False, 1, False, False, **fixed15)
  pairs = {
    "conf_ece": (jax.jit(lambda a, b: metrics.conf_ece(a, b)), lambda: core(pd, yd, None, m)),
    "classwise_ece": (
      jax.jit(lambda a, b: metrics.classwise_ece(a, b)),
      lambda: cw_core(pd, yd, None, m, w),
    ),
    "brier": (
      jax.jit(lambda a, b: scores.brier(a, b)),
      lambda: _scorer(brier_per_sample, False, False)(pd, yd, None),
    ),
  }
  for name, (public, bare) in pairs.items():
    a = timeit(lambda: public(pd, yd), r)
    b = timeit(bare, r)
    jit_cost[name] = {
      "jit_public_s": a["best_s"],
      "jit_core_s": b["best_s"],
      "overhead": a["best_s"] / b["best_s"] - 1.0,
      "first_call_public_s": a["first_s"],
      "first_call_core_s": b["first_s"],
    }

  best = {k: v["best_s"] for k, v in t.items()}
  split_device = {
    "validation": best["validation_device"] / best["eager_device"],
    "computation": best["compute"] / best["eager_device"],
    # what the checks add to the call itself, where they run inside its program
    "validation_in_call": max(best["eager_device"] - best["compute"], 0.0) / best["eager_device"],
  }
  split_numpy = {
    "transfer": best["transfer"] / best["eager_numpy"],
    "validation": max(best["validation_numpy"] - best["transfer"], 0.0) / best["eager_numpy"],
    "computation": best["compute"] / best["eager_numpy"],
  }
  load = cpu_load()
  result = {
    "what": "eager conf_ece at n x C: validation vs computation; NaN folding under jit",
    "n": args.n,
    "num_classes": c,
    "data": source,
    "timings": t,
    "best_s": best,
    "split_device_input": split_device,
    "split_numpy_input": split_numpy,
    "target": "validation <= 25 % of the eager call",
    "meets_target_device": split_device["validation"] <= 0.25,
    "meets_target_numpy": split_numpy["validation"] <= 0.25,
    "validation_vs_numpy_checks": best["numpy_checks_reference"] / best["validation_numpy"],
    "validation_vs_previous_layer": (
      best["previous_validation_device"] / best["validation_device"]
      if "previous_validation_device" in best
      else None
    ),
    "jit_nan_fold_cost": jit_cost,
    "check_program_vs_two_reductions": best["check_two_reductions"] / best["check_program"],
    "load_avg_at_end": load,
    "machine": machine_note(load),
    **info,
  }
  path = write_result(args.name, result)
  print(f"n = {args.n:,}, C = {c} ({source}); {machine_note(load)}")
  print(
    f"eager conf_ece: device input {best['eager_device']:.3f} s "
    f"(validation alone {100 * split_device['validation']:.0f} %, in the call "
    f"{100 * split_device['validation_in_call']:.0f} %, "
    f"computation {100 * split_device['computation']:.0f} %); numpy input "
    f"{best['eager_numpy']:.3f} s (transfer {100 * split_numpy['transfer']:.0f} %, validation "
    f"{100 * split_numpy['validation']:.0f} %, computation {100 * split_numpy['computation']:.0f} %)"
  )
  print(
    f"validation {best['validation_device']:.3f} s vs numpy checks "
    f"{best['numpy_checks_reference']:.3f} s"
    + (
      f" vs the previous layer {best['previous_validation_device']:.3f} s"
      if "previous_validation_device" in best
      else ""
    )
  )
  print(
    f"the check's program {1e3 * best['check_program']:.2f} ms vs row sums and a global "
    f"minimum {1e3 * best['check_two_reductions']:.2f} ms"
  )
  for name, v in jit_cost.items():
    print(
      f"under jit, {name}: public {v['jit_public_s']:.4f} s vs core {v['jit_core_s']:.4f} s "
      f"({100 * v['overhead']:+.1f} %)"
    )
  print(f"wrote {path}")
  return result


if __name__ == "__main__":
  main()
