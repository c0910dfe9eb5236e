"""The sharded half of tests/test_sharding.py, run in a fresh process with N forced CPU devices.

Usage: ``XLA_FLAGS=--xla_force_host_platform_device_count=N python _sharding_worker.py DATA.npz
OUT.npz``. ``DATA.npz`` holds ``logits`` ``(M, n, C)`` and ``labels`` ``(M, n)``; everything
computed here on the N devices is written to ``OUT.npz`` for the parent to compare with
one-device results.
"""

import sys
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import jaxcal
from jaxcal import bootstrap, dominance, metrics, recalibrate, scores, streaming, utility

BINS = np.array([2, 5, 15, 40])
#: Samples of the sample-sharded comparisons: the first 296 of the 300, a multiple of 4 and 8.
N_SHARDED = 296
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
  # with a mask: the selected rows' errors (eager and under jit), on the 4-way utility mesh
  keep = np.arange(n) % 3 != 0
  out["uc_sweep_where"] = np.asarray(utility.uc_sweep(p[0], y[0], lin, chunk_size=2, where=keep))
  fw = jax.jit(lambda pp, yy, ww: utility.uc_sweep(pp, yy, lin, chunk_size=2, where=ww))
  out["uc_sweep_where_jit"] = np.asarray(fw(p[0], y[0], keep))

  # inside a caller's jax.set_mesh (Explicit axes, two of them): the utilities go over its
  # axes (a mesh of the sweep's own was refused by JAX, eagerly and under jit, and its
  # output broke the caller's next operation); plain and row-sharded inputs
  dev = jax.device_count()
  user = jax.make_mesh((2, dev // 2), ("data", "model"), axis_types=(AxisType.Explicit,) * 2)
  with jax.set_mesh(user):
    rows2 = (n // dev) * dev
    ps = jax.device_put(p[0, :rows2], NamedSharding(user, P("data")))
    ys = jax.device_put(y[0, :rows2], NamedSharding(user, P("data")))
    runs = (
      utility.uc_sweep(p[0], y[0], lin, chunk_size=2),
      jax.jit(lambda pp, yy: utility.uc_sweep(pp, yy, lin, chunk_size=2))(p[0], y[0]),
      utility.uc_sweep(ps, ys, lin, chunk_size=2),
      jax.jit(lambda pp, yy: utility.uc_sweep(pp, yy, lin, chunk_size=2))(ps, ys),
    )
    out["set_mesh/next_op"] = np.asarray(utility.ecdf(runs[0] - 0.0)[0])
  for i, r in enumerate(runs):
    out[f"set_mesh/{i}"] = np.asarray(r)
  out["set_mesh/rows"] = np.int32(rows2)
  # rows sharded over an Explicit axis (jax.make_mesh's default), outside and inside the
  # caller's jax.set_mesh: the rows' sorts, scatters and reshapes were refused
  # (ShardingTypeError, or "Resource axis: data ... is not found in mesh: ()")
  expl = jax.make_mesh((dev,), ("data",), axis_types=(AxisType.Explicit,))
  pe = jax.device_put(p[0, :rows2], NamedSharding(expl, P("data")))
  ye = jax.device_put(y[0, :rows2], NamedSharding(expl, P("data")))
  # eagerly and under jit (where JAX types every tracer with the Explicit axis: the
  # sorts, scatters and pads were refused), and jax.grad inside the context
  jitted = jax.jit(lambda a, b: explicit_cases(a, b, eager=False))
  for where_, ctx in (("outside", None), ("inside", expl)):
    with jax.set_mesh(ctx):
      for how, run in (("", explicit_cases), ("/jit", jitted)):
        res = run(pe, ye)
        out[f"explicit/{where_}{how}/next_op"] = np.asarray(res[0] + 0.0)  # the caller's next op
        out[f"explicit/{where_}{how}"] = np.array([float(r) for r in res])
  with jax.set_mesh(expl):
    out["explicit/grad"] = np.asarray(jax.grad(metrics.conf_ece)(pe, ye))
    # a concrete bin-count array closed over stays concrete (it was made a tracer: refused)
    counts = jnp.array([5, 15])
    out["explicit/closed_bins"] = np.asarray(
      jax.jit(lambda a, b: metrics.conf_ece(a, b, num_bins=counts))(pe, ye)
    )

  # row-sharded device arrays are gathered on the devices, not read back to the host
  # (jax.device_put of a row-sharded array to a replicated sharding went through the host)
  rows_per = n // jax.device_count()
  k = rows_per * jax.device_count()
  by_row = NamedSharding(Mesh(np.array(jax.devices()), ("r",)), P("r"))
  pr, yr = jax.device_put(p[0, :k], by_row), jax.device_put(y[0, :k], by_row)
  out["uc_sweep_rows"] = np.asarray(utility.uc_sweep(pr, yr, lin, chunk_size=2))
  zr = jax.device_put(z[:, :k], NamedSharding(by_row.mesh, P(None, "r")))
  yr2 = jax.device_put(y[:, :k], NamedSharding(by_row.mesh, P(None, "r")))
  jaxcal.evaluate(zr, yr2, ["brier"], utilities={"lin": lin}, from_logits=True)
  out["rows_host_copies"] = np.array([a._npy_value is not None for a in (pr, yr, zr, yr2)])

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
  empty_recs = streaming.Records.empty(c, capacity=rows_per)

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
  # the same from logits under shard_map's default check_vma=True (the value check's
  # cond had a constant branch, and Records.reduce a constant scan carry: both raised
  # JAX's TypeError there); a scan over batches from a pcast empty state; the metrics
  # and scores of each device's rows
  zdev = jax.device_put(z[0, : rows_per * d], NamedSharding(mesh, P("models")))
  empty_scores = streaming.Scores.empty(c)

  def per_device_logits(zz, yy):
    start = jax.lax.pcast(empty_bins, "models", to="varying")
    half = zz.shape[0] // 2
    batches = (zz[: 2 * half].reshape(2, half, c), yy[: 2 * half].reshape(2, half))
    bins = jax.lax.scan(lambda st, b: (st.update(*b, from_logits=True), None), start, batches)[0]
    rest = zz[2 * half :], yy[2 * half :]
    bins = bins.update(*rest, from_logits=True)
    sc = jax.lax.psum(empty_scores.update(zz, yy, from_logits=True), "models")
    recs = jax.lax.all_gather(empty_recs.update(zz, yy, from_logits=True), "models").reduce()
    own = (
      metrics.conf_ece(zz, yy, 15, from_logits=True),
      metrics.classwise_ce(zz, yy, 5, from_logits=True),
      scores.brier(zz, yy, from_logits=True),
      metrics.skce(zz, yy, from_logits=True),  # (a constant loop carry raised there too)
      metrics.smooth_ece(zz, yy, from_logits=True),
      scores.decompose(jax.nn.softmax(zz, axis=-1), yy).mcb,  # (PAV loops: constant carries)
    )
    return (
      jax.lax.psum(bins, "models").compute()["conf_ece"],
      sc.compute()["brier"],
      recs.compute(BINS)["conf_ce_corr"][None],
      jnp.stack(own)[None],
    )

  vma = jax.shard_map(
    per_device_logits,
    mesh=mesh,
    in_specs=(P("models"), P("models")),
    out_specs=(P(), P(), P("models"), P("models")),
  )(zdev, ydev)
  for k, v in zip(("bins_conf_ece", "scores_brier", "records_conf_ce_corr", "own"), vma):
    out["stream_vma/" + k] = np.asarray(v)

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

  out.update(sample_sharded(z, y, p))
  np.savez(sys.argv[2], **out)


def explicit_cases(p: Any, y: Any, *, eager: bool = True) -> tuple:
  """The calls run on rows sharded over an Explicit axis (and their one-device references).

  Metrics, a recalibrator's fit then apply, a streaming state's update, merge and
  compute, an isotonic regression, a bootstrap and a rank correlation; ``eager=False`` leaves out
  ``evaluate``, which runs eagerly only.
  """
  c = p.shape[1]
  q = recalibrate.fit_histogram(p, y, from_logits=False)(p)
  state = streaming.Calibration.empty(c, capacity=p.shape[0]).update(p, y)
  state = state.merge(streaming.Calibration.empty(c, capacity=p.shape[0]).update(p[::-1], y[::-1]))
  boot = bootstrap.bootstrap(jax.random.key(1), metrics.conf_ece, p, y, num_resamples=8)
  return (
    metrics.conf_ece(p, y),
    metrics.classwise_ece(p, y),
    metrics.conf_ce(p, y),
    metrics.smooth_ece(p, y),
    scores.decompose(p, y).mcb,
    utility.uc(p, y, utility.top_class()).value,
    jnp.sum(q * jnp.arange(1.0, c + 1)[None, :]),
    recalibrate.fit_temperature(jnp.log(p), y).temperature,
    state.compute()["conf_ece"],
    state.compute()["conf_ce"],
    jnp.sum(recalibrate.isotonic_regression(p[:, 0], y == 0) * jnp.arange(p.shape[0])),
    boot.hi - boot.lo,
    dominance.rank_correlation(p[:, 0], p[:, 1]),
  ) + (
    (jnp.asarray(jaxcal.evaluate(p[None], y[None], ["conf_ece"])["conf_ece"][0]),) if eager else ()
  )


def sample_sharded(z: np.ndarray, y: np.ndarray, p: np.ndarray) -> dict[str, np.ndarray]:
  """Every :func:`cases` function on the first ``N_SHARDED`` samples of each model.

  ``samples/NAME/LEAF`` ``(M, ...)``: ``jit(vmap(fn))`` over the ``M`` models, the
  ``(M, n, C)`` / ``(M, n)`` inputs sharded over the samples (a 1-D mesh of every
  device), one compilation per function; ``eager/NAME/LEAF`` for :data:`EAGER`: the
  eager call on each model's ``(n, C)`` / ``(n,)`` rows, still sharded over the samples.
  """
  mesh = Mesh(np.array(jax.devices()), ("data",))
  stack = tuple(
    jax.device_put(a[:, :N_SHARDED], NamedSharding(mesh, P(None, "data"))) for a in (p, y, z)
  )
  out = {}
  fns = cases(z.shape[-1])
  for name, fn in fns.items():
    for j, leaf in enumerate(jax.tree.leaves(jax.jit(jax.vmap(fn))(*stack))):
      out[f"samples/{name}/{j}"] = np.asarray(leaf)
  for name in EAGER:  # the eager call, one model at a time, on (n, C) / (n,) shards
    rows = []
    for i in range(len(z)):
      args = [jax.device_put(a[i, :N_SHARDED], NamedSharding(mesh, P("data"))) for a in (p, y, z)]
      rows.append(jax.tree.leaves(fns[name](*args)))
    for j, col in enumerate(zip(*rows, strict=True)):
      out[f"eager/{name}/{j}"] = np.stack([np.asarray(v) for v in col])
  return out


#: Cases also called eagerly on each model's sample-sharded rows (the promise of the
#: same bits on any layout is per call form).
EAGER = ("conf_ce", "binary_ce")


#: The public functions not in :func:`cases`, and where they are compared instead.
LEFT_OUT = {
  **dict.fromkeys(
    ["conf_ece", "conf_ce_corr", "classwise_ce", "classwise_ece", "ecce", "brier"],
    "main(): evaluate over models-sharded data (and, but brier, streaming over samples)",
  ),
  "decompose": "isotonic fits, the slowest compile here (1-2 s a process); "
  "test_multiprocess.py runs it (in evaluate) over samples split between processes",
}


def cases(c: int) -> dict[str, Callable]:
  """``{name: fn(probs, labels, logits)}``: the public functions of one ``(n, C)`` data set.

  Shared with test_sharding.py, which calls each on one device. Every public function
  of ``jaxcal.metrics`` and ``jaxcal.scores`` (:data:`LEFT_OUT` says where the others
  are compared), and ``utility.uc`` / ``utility.ecdf`` (``uc_sweep`` and ``uc_class``
  are in ``main()``). A key names the functions its case calls: ``name``,
  ``name:variant`` or ``a+b+c`` (:func:`called`).

  ``smooth_ece`` appears with the automatic bandwidth / top label and with fixed
  bandwidths / class-wise; ``smooth_ece_bandwidth`` and ``smooth_reliability`` with the
  top label (class-wise, the bandwidth is one search per class: 2 s more per process
  here), ``smooth_reliability`` at a fixed bandwidth (its automatic one is
  ``smooth_ece_bandwidth``); ``skce`` with its unbiased and block estimators; ``bin_ids``
  (quantile: a sort over the sharded samples) feeds ``lin_ce`` / ``lin_ece``.
  """
  top = utility.top_class()

  def onehot(y):
    return jax.nn.one_hot(y, c, dtype=jnp.float32)

  def lin(p, y, z):
    ids = metrics.bin_ids(jnp.max(p, axis=1), 15, "quantile")
    return ids, metrics.lin_ce(p, onehot(y), ids, 15), metrics.lin_ece(p, onehot(y), ids, 15)

  def binary(p, y, z):
    return metrics.binary_ce(p[:, 1], (y == 1).astype(jnp.int32), BINS)

  return {
    "conf_ce": lambda p, y, z: metrics.conf_ce(p, y, BINS),
    "binary_ce": binary,
    "bin_ids+lin_ce+lin_ece": lin,
    "reliability_stats": lambda p, y, z: metrics.reliability_stats(p, y, 15, "quantile"),
    "smooth_ece": lambda p, y, z: metrics.smooth_ece(p, y),
    "smooth_ece:classwise": lambda p, y, z: metrics.smooth_ece(
      p, y, np.array([0.02, 0.1]), mode="classwise"
    ),
    "smooth_ece_bandwidth": lambda p, y, z: metrics.smooth_ece_bandwidth(p, y),
    "smooth_reliability": lambda p, y, z: metrics.smooth_reliability(p, y, 0.05, num_points=50),
    "ks_ce": lambda p, y, z: metrics.ks_ce(p, y),
    "debiased_ce": lambda p, y, z: metrics.debiased_ce(p, y, BINS),
    "skce": lambda p, y, z: metrics.skce(p, y),
    "skce:block": lambda p, y, z: metrics.skce(p, y, estimator="block"),
    "mmce": lambda p, y, z: metrics.mmce(p, y),
    "lce": lambda p, y, z: metrics.lce(p, y, z),
    "nadaraya_watson": lambda p, y, z: metrics.nadaraya_watson(z, onehot(y)),
    "log_loss": lambda p, y, z: scores.log_loss(p, y),
    "spherical": lambda p, y, z: scores.spherical(p, y),
    "classification_error": lambda p, y, z: scores.classification_error(p, y),
    "confidence_loss": lambda p, y, z: scores.confidence_loss(p, y),
    "uc": lambda p, y, z: utility.uc(p, y, top),
    "ecdf": lambda p, y, z: utility.ecdf(p[:, 1]),
  }


def called(c: int = 3) -> set[str]:
  """The names of the functions :func:`cases` calls, read from its keys."""
  return {f for key in cases(c) for f in key.split(":")[0].split("+")}


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
