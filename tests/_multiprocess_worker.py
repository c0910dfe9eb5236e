"""One process of the two-process ``jax.distributed`` test (tests/test_multiprocess.py).

Usage: ``python _multiprocess_worker.py PROCESS_ID PORT DATA.npz OUT.json [bad | mismatch]``.
``DATA.npz`` holds the union data set (``probs``, ``labels``) and ``cut``:
process 0 takes rows ``[:cut]``, process 1 rows ``[cut:]`` (different sizes),
as host-local arrays: the normal multi-host layout. Writes what it computed
to ``OUT.json``.

With ``bad``, ``DATA.npz`` also holds bad versions of the union
(``probs_<case>``, ``labels_<case>``, the bad row in process 1's rows), and
the worker records, per case and entry point, the ``ValueError`` raised
eagerly and the values under ``jax.jit`` (see :func:`bad_inputs`). With
``mismatch``, process 1's input is shaped unlike process 0's, or empty (see
:func:`mismatches`).
"""

import functools
import json
import sys

import jax

jax.config.update("jax_cpu_collectives_implementation", "gloo")


def bad_inputs(pid: int, data, out: dict) -> None:
  """Every entry point on good data and on each bad case; ``out`` gets what happened.

  Global arrays: rows ``[:cut]`` on process 0 and ``[cut:2 cut]`` on
  process 1 (equal shards), sharded over every device. Host-local shards
  (``uc_sweep``, ``evaluate``, streaming): ``[:cut]`` and ``[cut:]``. Every
  call either succeeds or raises on both processes: a call that raised on
  one process only would leave the other waiting in a collective, and the
  test's timeout would end the run.
  """
  import numpy as np
  from jax.sharding import Mesh, NamedSharding
  from jax.sharding import PartitionSpec as P

  import jaxcal
  from jaxcal import metrics, scores, streaming, utility

  cut = int(data["cut"])
  mesh = Mesh(np.array(jax.devices()), ("d",))
  rows, rep = NamedSharding(mesh, P("d")), NamedSharding(mesh, P())
  mets = {
    "conf_ece": lambda a, b: metrics.conf_ece(a, b, 15),
    "classwise_ce": lambda a, b: metrics.classwise_ce(a, b, 15),
    "brier": scores.brier,
  }
  us = utility.sample_linear(jax.random.key(0), 10, data["probs_good"].shape[1])

  def attempt(f):
    try:
      return {"value": np.asarray(f()).tolist()}
    except ValueError as e:
      return {"error": str(e)}

  for case in data["cases"].tolist():
    p, y = data[f"probs_{case}"], data[f"labels_{case}"]
    g = slice(0, cut) if pid == 0 else slice(cut, 2 * cut)
    pg = jax.make_array_from_process_local_data(rows, p[g])
    yg = jax.make_array_from_process_local_data(rows, y[g])
    res = out.setdefault(case, {})
    for name, f in mets.items():
      res[name] = attempt(lambda f=f: f(pg, yg))
      res[name + "_jit"] = attempt(lambda f=f: jax.jit(f, out_shardings=rep)(pg, yg))
    loc = slice(0, cut) if pid == 0 else slice(cut, None)
    pl, yl = p[loc], y[loc]
    res["uc_sweep"] = attempt(lambda: utility.uc_sweep(pl, yl, us, chunk_size=5))
    res["evaluate"] = attempt(
      lambda: jaxcal.evaluate(pl[None], yl[None], ["conf_ece", "brier"], num_bins=15)["conf_ece"]
    )
    # streaming: update is local (each process its batches), so only jitted
    # updates are compared; merged, a poisoned state poisons every process
    state = streaming.Calibration.empty(pl.shape[1], np.array([5, 15]), capacity=pl.shape[0])
    update = jax.jit(lambda s, a, b: s.update(a, b))
    for i in range(0, pl.shape[0], 100):
      state = update(state, pl[i : i + 100], yl[i : i + 100])
    merged = streaming.merge_across_processes(state).compute()
    res["streaming_jit"] = {k: np.asarray(merged[k]).tolist() for k in ("conf_ece", "brier")}


def _kernel(s, w):
  return jax.numpy.exp(-s / w)


def _kernel_of(w):  # closures of one factory, other constants on the two processes
  return lambda s: jax.numpy.exp(-s / w)


def mismatches(pid: int, data, out: dict) -> None:
  """Process 1 passes input shaped unlike process 0's; ``out`` gets each call's ``ValueError``.

  Shape, class-count and configuration errors of one process's own input
  must raise on every process (the same error), not on that process only
  while the other waits in a collective. A process with no rows is not an
  error (``empty_shard``: the union is the other's rows); no rows on any
  process is (``empty_union``).
  """
  import numpy as np

  import jaxcal
  from jaxcal import streaming, utility

  cut = int(data["cut"])
  rows = slice(0, cut) if pid == 0 else slice(cut, None)
  p, y = data["probs"][rows], data["labels"][rows]
  c = p.shape[1]
  us = utility.sample_linear(jax.random.key(0), 10, c)

  def attempt(f):
    try:
      f()
      return {"value": None}
    except ValueError as e:
      return {"error": str(e)}

  def fewer_classes(q):  # process 1: C - 1 classes, renormalised
    if pid == 0:
      return q
    q = q[:, :-1]
    return q / q.sum(axis=1, keepdims=True)

  def short(v):  # process 1: one label fewer than rows
    return v if pid == 0 else v[:-1]

  cases = {
    "classes": (fewer_classes(p), np.minimum(y, c - 2) if pid else y),
    "labels_length": (p, short(y)),
  }
  for case, (pp, yy) in cases.items():
    out[case] = {
      "uc_sweep": attempt(lambda: utility.uc_sweep(pp, yy, us, chunk_size=5)),
      "evaluate": attempt(lambda: jaxcal.evaluate(pp[None], yy[None], ["conf_ece"], num_bins=15)),
    }
  models = p[None] if pid == 0 else np.stack([p, p])
  out["models"] = {"evaluate": attempt(lambda: jaxcal.evaluate(models, y[None], ["brier"]))}
  # arguments other than the data that differ: a silently mixed result, a hang or an abort
  own = utility.sample_linear(jax.random.key(pid), 10, c)  # drawn per process
  out["arguments"] = {
    "uc_sweep": attempt(lambda: utility.uc_sweep(p, y, own, chunk_size=5)),
    "evaluate_utilities": attempt(
      lambda: jaxcal.evaluate(p[None], y[None], ["brier"], utilities={"lin": own})
    ),
    "evaluate_bins": attempt(
      lambda: jaxcal.evaluate(p[None], y[None], ["conf_ece"], num_bins=15 + 5 * pid)
    ),
    "evaluate_metrics": attempt(
      lambda: jaxcal.evaluate(p[None], y[None], ["conf_ece"] + ["brier"] * pid, num_bins=15)
    ),
  }
  # global arrays (equal shards): an argument that differs mixed the processes' rows
  # binned with their own counts (15 and 16 share a program), or aborted (15 and 20),
  # or hung ("fixed" and "quantile"), or ended in JAX's AssertionError (utilities)
  from jax.sharding import Mesh, NamedSharding
  from jax.sharding import PartitionSpec as P

  from jaxcal import metrics

  rows = NamedSharding(Mesh(np.array(jax.devices()), ("d",)), P("d"))
  half = min(cut, data["probs"].shape[0] - cut) // 4 * 4
  pg = jax.make_array_from_process_local_data(rows, p[:half])
  yg = jax.make_array_from_process_local_data(rows, y[:half])
  out["global"] = {
    "num_bins": attempt(lambda: metrics.conf_ece(pg, yg, 15 + pid)),
    "binning": attempt(lambda: metrics.conf_ece(pg, yg, 15, ("fixed", "quantile")[pid])),
    "same": {"value": float(metrics.classwise_ce(pg, yg, 15))},
    # a default passed on one process and left out on the other is the same call; a
    # partial kernel prints an address of its own on every process (both were refused)
    "default": {"value": float(metrics.conf_ece(pg, yg, *([15] if pid else [])))},
    "partial": {"value": float(metrics.skce(pg, yg, functools.partial(_kernel, w=1.0)))},
    "closure": attempt(lambda: metrics.skce(pg, yg, _kernel_of(1.0 + pid))),
    "uc_sweep": attempt(lambda: utility.uc_sweep(pg, yg, own, chunk_size=5)),
  }
  # more than on_every_process's 4 KB to compare: compared by digests (it raised on
  # the processes whose payload was too long, and the others waited in the all-gather)
  from jaxcal._src import validation as V

  def compare(differ):
    big = {f"value {i}": "x" * 100 + str(pid if i == differ else 0) for i in range(50)}
    return attempt(lambda: V.on_every_process(lambda: None, same=lambda _: big))

  out["big"] = {"equal": compare(-1), "differ": compare(7)}
  out["uc_devices"] = {  # the devices in another order on process 1
    "uc_sweep": attempt(
      lambda: utility.uc_sweep(p, y, us, devices=jax.devices()[:: 1 - 2 * pid], chunk_size=5)
    )
  }
  out["uc_where"] = {  # a mask on process 1 only
    "uc_sweep": attempt(
      lambda: utility.uc_sweep(p, y, us, chunk_size=5, where=None if pid == 0 else y >= 0)
    )
  }
  out["uc_logits"] = {  # logits on process 1 only
    "uc_sweep": attempt(lambda: utility.uc_sweep(p, y, us, from_logits=pid == 1, chunk_size=5))
  }
  devs = np.array(jax.devices()[:: 1 - 2 * pid])
  out["mesh"] = {
    "evaluate": attempt(
      lambda: jaxcal.evaluate(p[None], y[None], ["brier"], mesh=Mesh(devs, ("models",)))
    )
  }
  bins = np.array([5, 15]) if pid == 0 else np.array([5, 20])
  state = streaming.Calibration.empty(c, bins, capacity=p.shape[0] + 7 * pid).update(p, y)
  out["state"] = {"merge": attempt(lambda: streaming.merge_across_processes(state))}
  # capacities alone may differ
  same = streaming.Calibration.empty(c, 15, capacity=p.shape[0] + 7 * pid).update(p, y)
  out["capacity"] = {"merge": attempt(lambda: streaming.merge_across_processes(same))}

  # process 1 holds no rows: the union is process 0's rows; and no process holds any
  def values(f):
    try:
      return {"value": np.asarray(f()).tolist()}
    except ValueError as e:
      return {"error": str(e)}

  for case, keep in (("empty_shard", pid == 0), ("empty_union", False)):
    pe, ye = (p, y) if keep else (p[:0], y[:0])
    out[case] = {
      "uc_sweep": values(lambda: utility.uc_sweep(pe, ye, us, chunk_size=5)),
      "evaluate": values(
        lambda: jaxcal.evaluate(pe[None], ye[None], ["conf_ece", "brier"], num_bins=15)["conf_ece"]
      ),
    }
  # a state updated with the empty shard merges (its update raised on process 1 alone,
  # and process 0 waited in the merge)
  pe, ye = (p, y) if pid == 0 else (p[:0], y[:0])
  state = streaming.Calibration.empty(c, 15, capacity=p.shape[0]).update(pe, ye)
  merged = values(lambda: streaming.merge_across_processes(state).compute()["conf_ece"])
  out["empty_shard"]["streaming"] = merged


def main() -> None:
  pid, port, data_path, out_path = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
  jax.distributed.initialize(
    coordinator_address=f"127.0.0.1:{port}",
    num_processes=2,
    process_id=pid,
    initialization_timeout=60,
  )
  import numpy as np

  import jaxcal
  from jaxcal import streaming, utility

  data = np.load(data_path)
  if sys.argv[5:] in (["bad"], ["mismatch"]):
    out = {"process": pid}
    (bad_inputs if sys.argv[5] == "bad" else mismatches)(pid, data, out)
    with open(out_path, "w") as f:
      json.dump(out, f)
    jax.distributed.shutdown()
    return
  cut = int(data["cut"])
  rows = slice(0, cut) if pid == 0 else slice(cut, None)
  p, y = data["probs"][rows], data["labels"][rows]
  c = p.shape[1]
  out = {"process": pid, "devices": jax.device_count(), "local_devices": jax.local_device_count()}

  us = utility.sample_linear(jax.random.key(0), 10, c)
  out["uc_sweep"] = np.asarray(utility.uc_sweep(p, y, us, chunk_size=3)).tolist()
  # a mask over the union's rows (every third dropped), NaN and bad labels in the dropped rows
  keep = (np.arange(p.shape[0]) + rows.start) % 3 != 0
  pn, yn = np.where(keep[:, None], p, np.nan), np.where(keep, y, -1)
  out["uc_sweep_where"] = np.asarray(
    utility.uc_sweep(pn, yn, us, chunk_size=3, where=keep)
  ).tolist()

  state = streaming.Calibration.empty(c, np.array([5, 15]), capacity=p.shape[0])
  for i in range(0, p.shape[0], 64):
    state = state.update(p[i : i + 64], y[i : i + 64])
  merged = streaming.merge_across_processes(state)
  out["streaming"] = {k: np.asarray(v).tolist() for k, v in merged.compute().items()}
  # merged again (each evaluation of a training loop): no new program (it
  # compiled one identity per leaf on every call, 6-10 of them)
  from jax._src import monitoring

  programs = []

  def listen(event, duration, **kwargs):
    if event.startswith("/jax/core/compile/"):
      programs.append(event)

  jax.monitoring.register_event_duration_secs_listener(listen)
  try:
    streaming.merge_across_processes(state)
  finally:
    monitoring.unregister_event_duration_listener(listen)
  out["streaming_merge_again"] = len(programs)
  # whole rows kept ((capacity, C) buffers, of different capacities on the two processes)
  full = streaming.Calibration.empty(c, np.array([5, 15]), capacity=p.shape[0], records="full")
  full = streaming.merge_across_processes(full.update(p, y))
  out["classwise_ce"] = np.asarray(full.compute()["classwise_ce"]).tolist()

  res = jaxcal.evaluate(
    p[None], y[None], ["conf_ece", "conf_ce_corr", "brier"], num_bins=np.array([5, 15])
  )
  out["evaluate"] = res.to_dict()
  # two models (the second a tempered copy), logits, utilities and a decomposition
  logits = np.log(np.maximum(p, 1e-30))
  two = np.stack([logits, 0.5 * logits])
  res2 = jaxcal.evaluate(
    two,
    np.stack([y, y]),
    ["conf_ece", "classwise_ce", "decompose"],
    num_bins=np.array([5, 15]),
    utilities=us,
    from_logits=True,
  )
  out["evaluate_two"] = res2.to_dict()["values"]
  # the bare states (not inside a Calibration)
  bins = streaming.merge_across_processes(
    streaming.FixedBins.empty(c, np.array([5, 15])).update(p, y)
  )
  out["fixed_bins"] = {k: np.asarray(v).tolist() for k, v in bins.compute().items()}
  sc = streaming.merge_across_processes(streaming.Scores.empty(c).update(p, y))
  out["scores"] = {k: np.asarray(v).tolist() for k, v in sc.compute().items()}
  rec = streaming.merge_across_processes(
    streaming.Records.empty(c, capacity=p.shape[0]).update(p, y)
  )
  out["records"] = {k: np.asarray(v).tolist() for k, v in rec.compute(15).items()}
  # a state updated with global arrays (the first 200 rows of each process) already
  # holds the union: merging it raised JAX's own device_put error
  from jax.sharding import Mesh, NamedSharding
  from jax.sharding import PartitionSpec as P

  mesh = Mesh(np.array(jax.devices()), ("rows",))
  pg = jax.make_array_from_process_local_data(NamedSharding(mesh, P("rows", None)), p[:200])
  yg = jax.make_array_from_process_local_data(NamedSharding(mesh, P("rows")), y[:200])
  glob = streaming.merge_across_processes(streaming.Scores.empty(c).update(pg, yg))
  out["global_scores"] = {k: float(v) for k, v in glob.compute().items() if np.ndim(v) == 0}

  # global and host-local batches in one state: each process's copy held other samples,
  # and the merge returned a different, wrong number on each (no error)
  def error_of(f):
    try:
      f()
    except ValueError as e:
      return str(e)
    return None

  local = (p[200:220], y[200:220])
  out["mixed"] = {
    "global_then_local": error_of(lambda: streaming.Scores.empty(c).update(pg, yg).update(*local)),
    "local_then_global": error_of(
      lambda: streaming.Calibration.empty(c, 15).update(*local).update(pg, yg)
    ),
  }
  step = jax.jit(lambda st, a, b: st.update(a, b))  # inside jit: the merge finds it
  mixed = step(step(streaming.FixedBins.empty(c, 15), pg, yg), *local)
  out["mixed"]["jit_merge"] = error_of(lambda: streaming.merge_across_processes(mixed))
  # host-local rows merged first (the union on every process), then global batches; and a
  # host-local batch of no rows (a process's empty shard) for a global state: both taken
  merged = streaming.merge_across_processes(streaming.Scores.empty(c).update(*local))
  both = merged.update(pg, yg).update(p[:0], y[:0])
  out["merged_then_global"] = float(streaming.merge_across_processes(both).compute()["brier"])
  # a list of global models: the message named global arrays as the way out
  out["evaluate_list_global"] = error_of(lambda: jaxcal.evaluate([pg], [yg], ["brier"]))
  # functions that read their input on the host: a ValueError naming it (was JAX's RuntimeError)
  from jaxcal import dominance, report

  losses = jax.make_array_from_process_local_data(
    NamedSharding(mesh, P("rows", None)), np.arange(12.0).reshape(4, 3) + 12 * pid
  )
  out["host_read_global"] = [
    error_of(lambda: report.calibration_report(pg, yg)),
    error_of(lambda: dominance.dominance_chain(losses)),
  ]
  # uc_sweep under jit: on global arrays the union's; on host-local ones (different on
  # each process, which a tracer cannot tell) NaN, where it gave a vector mixed from both
  swept = jax.jit(lambda a, b: utility.uc_sweep(a, b, us, chunk_size=3))
  out["uc_sweep_jit_global"] = np.asarray(swept(pg, yg)).tolist()
  out["uc_sweep_jit_local"] = np.asarray(swept(p[:200], y[:200])).tolist()
  with open(out_path, "w") as f:
    json.dump(out, f)
  jax.distributed.shutdown()


if __name__ == "__main__":
  main()
