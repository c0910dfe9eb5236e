"""One process of the two-process ``jax.distributed`` test (tests/test_multiprocess.py).

Usage: ``python _multiprocess_worker.py PROCESS_ID PORT DATA.npz OUT.json``.
``DATA.npz`` holds the union data set (``probs``, ``labels``) and ``cut``:
process 0 takes rows ``[:cut]``, process 1 rows ``[cut:]`` (different sizes),
as host-local arrays: the normal multi-host layout. Writes what it computed
to ``OUT.json``.
"""

import json
import sys

import jax

jax.config.update("jax_cpu_collectives_implementation", "gloo")


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
  cut = int(data["cut"])
  rows = slice(0, cut) if pid == 0 else slice(cut, None)
  p, y = data["probs"][rows], data["labels"][rows]
  c = p.shape[1]
  out = {"process": pid, "devices": jax.device_count(), "local_devices": jax.local_device_count()}

  us = utility.sample_linear(jax.random.key(0), 10, c)
  out["uc_sweep"] = np.asarray(utility.uc_sweep(p, y, us, chunk_size=3)).tolist()

  state = streaming.Calibration.empty(c, np.array([5, 15]), capacity=p.shape[0])
  for i in range(0, p.shape[0], 64):
    state = state.update(p[i : i + 64], y[i : i + 64])
  merged = streaming.merge_across_processes(state)
  out["streaming"] = {k: np.asarray(v).tolist() for k, v in merged.compute().items()}
  # whole rows kept ((capacity, C) buffers, of different capacities on the two processes)
  full = streaming.Calibration.empty(c, np.array([5, 15]), capacity=p.shape[0], records="full")
  full = streaming.merge_across_processes(full.update(p, y))
  out["classwise_ce"] = np.asarray(full.compute()["classwise_ce"]).tolist()

  res = jaxcal.evaluate(
    p[None], y[None], ["conf_ece", "conf_ce_corr", "brier"], num_bins=np.array([5, 15])
  )
  out["evaluate"] = res.to_dict()
  with open(out_path, "w") as f:
    json.dump(out, f)
  jax.distributed.shutdown()


if __name__ == "__main__":
  main()
