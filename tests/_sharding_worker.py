"""The sharded half of tests/test_sharding.py, run in a fresh process with N forced CPU devices.

Usage: ``XLA_FLAGS=--xla_force_host_platform_device_count=N python _sharding_worker.py DATA.npz
OUT.npz``. ``DATA.npz`` holds ``logits`` ``(M, n, C)`` and ``labels`` ``(M, n)``; everything
computed here on the N devices is written to ``OUT.npz`` for the parent to compare with
one-device results.
"""

import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import jaxcal
from jaxcal import metrics, scores, streaming, utility

BINS = np.array([2, 5, 15, 40])
METRICS = ["conf_ece", "conf_ce_corr", "classwise_ce", "classwise_ece", "ecce", "brier", "uc_tce"]


def main() -> None:
  data = np.load(sys.argv[1])
  z, y = data["logits"], data["labels"]
  m, n, c = z.shape
  p = np.asarray(jax.nn.softmax(jnp.asarray(z)))
  out = {"devices": np.int32(jax.device_count())}
  lin = utility.sample_linear(jax.random.key(0), 11, c)

  # the study call on the default (models, utilities) mesh, and on a 1-D models mesh
  res = jaxcal.evaluate(z, y, METRICS, num_bins=BINS, utilities={"lin": lin}, from_logits=True)
  out["mesh"] = np.array([res.info["mesh"]["models"], res.info["mesh"]["utilities"]])
  for k in METRICS + ["uc:lin"]:
    out["evaluate/" + k] = res[k]
  mesh1 = Mesh(np.array(jax.devices()), ("models",))
  res1 = jaxcal.evaluate(
    z, y, ["conf_ece", "classwise_ce"], num_bins=BINS, mesh=mesh1, from_logits=True
  )
  out["evaluate1d/conf_ece"] = res1["conf_ece"]

  # uc_sweep: eager (utilities sharded), under jit with closed-over utilities
  out["uc_sweep"] = np.asarray(utility.uc_sweep(p[0], y[0], lin, chunk_size=2))
  f = jax.jit(lambda pp, yy: utility.uc_sweep(pp, yy, lin, chunk_size=2))
  out["uc_sweep_jit"] = np.asarray(f(p[0], y[0]))

  # vmap over a models-sharded stack: no collective, results stay sharded over models
  mesh = Mesh(np.array(jax.devices()), ("models",))
  rows = NamedSharding(mesh, P("models"))
  take = np.arange(jax.device_count()) % m  # one model per device
  pd, yd = jax.device_put(p[take], rows), jax.device_put(y[take], rows)
  g = jax.jit(jax.vmap(lambda pp, yy: utility.uc_sweep(pp, yy, lin, chunk_size=2)))
  hlo = g.lower(pd, yd).compile().as_text()
  out["vmap_collectives"] = np.array(
    [op in hlo for op in ("all-gather", "all-reduce", "all-to-all", "collective-permute")]
  )
  vm = g(pd, yd)
  out["vmap_sharded"] = np.array(vm.sharding.spec == P("models"))
  out["uc_sweep_vmap"] = np.asarray(vm)

  # streaming: one state per device (its rows), merged by psum / all_gather + reduce
  d = jax.device_count()
  rows_per = n // d
  pdev = jax.device_put(p[0, : rows_per * d], NamedSharding(mesh, P("models")))
  ydev = jax.device_put(y[0, : rows_per * d], NamedSharding(mesh, P("models")))
  empty_bins = streaming.FixedBins.empty(c, BINS)
  empty_recs = streaming.Records.empty(rows_per, c)

  def per_device(pp, yy):
    s = jax.lax.psum(empty_bins.update(pp, yy), "models")
    r = jax.lax.all_gather(empty_recs.update(pp, yy), "models")
    return s, r

  s, r = jax.shard_map(
    per_device,
    mesh=mesh,
    in_specs=(P("models"), P("models")),
    out_specs=(P(), P()),
    check_vma=False,
  )(pdev, ydev)
  fixed = s.compute()
  for k in ("conf_ece", "classwise_ece", "ecce", "conf_ce_corr"):
    out["stream/" + k] = np.asarray(fixed[k])
  out["stream/records_conf_ce_corr"] = np.asarray(r.reduce().compute(BINS)["conf_ce_corr"])
  out["stream/n"] = np.int32(rows_per * d)

  # bad input sharded over the samples: the eager check raises the one-device message,
  # with the global row (one in the third shard); the inputs and their sharding unchanged
  row = 2 * rows_per + 3
  p0, y0 = p[0, : rows_per * d], y[0, : rows_per * d]
  out["bad/row"] = np.int32(row)
  for name, (pb, yb) in bad_cases(p0, y0, row).items():
    for fname, f in BAD_FNS[pb.ndim].items():
      ps = jax.device_put(pb, NamedSharding(mesh, P("models", *[None] * (pb.ndim - 1))))
      ys = jax.device_put(yb, NamedSharding(mesh, P("models")))
      before = (ps.sharding, ys.sharding)
      try:
        f(ps, ys)
        msg = "no error"
      except ValueError as e:
        msg = str(e)
      out[f"bad/{name}/{fname}"] = np.array(msg)
      same = (ps.sharding, ys.sharding) == before
      same &= np.array_equal(np.asarray(ps), pb, equal_nan=True)
      out[f"bad/{name}/{fname}/unchanged"] = np.array(same and np.array_equal(np.asarray(ys), yb))
  np.savez(sys.argv[2], **out)


#: Eager entry points checked on bad sample-sharded input (``binary_ce`` on column 1
#: of the probabilities: the ``[0, 1]`` check of one-dimensional scores).
BAD_FNS = {
  2: {
    "conf_ece": lambda p, y: metrics.conf_ece(p, y, 5),
    "classwise_ce": lambda p, y: metrics.classwise_ce(p, y, 5),
    "brier": scores.brier,
  },
  1: {"binary_ce": lambda p, y: metrics.binary_ce(p, y, 5)},
}


def bad_cases(p: np.ndarray, y: np.ndarray, row: int) -> dict:
  """``{name: (probs, labels)}``, each bad at ``row`` only (shared with test_sharding.py)."""
  c = p.shape[1]
  out = {}
  nan = p.copy()
  nan[row] = np.nan
  out["nan_row"] = (nan, y)
  off = p.copy()
  off[row] *= 0.5
  out["off_simplex"] = (off, y)
  for lab in (c, -1):
    yy = y.copy()
    yy[row] = lab
    out[f"label_{lab}"] = (p, yy)
  q, yq = np.ascontiguousarray(p[:, 1]), (y == 1).astype(np.int32)
  for name, value in (("binary_nan", np.nan), ("binary_gt1", 1.5)):
    qq = q.copy()
    qq[row] = value
    out[name] = (qq, yq)
  return out


if __name__ == "__main__":
  main()
