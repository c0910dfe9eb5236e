"""Index splits for the two experimental protocols run on Fashion-MNIST.

* :func:`local_calibration_splits` -- the LoCal Nets paper's protocol
  (Barbera et al. 2025, arXiv:2510.26566, §8.1, as for CIFAR): the official training
  set is split 45 % train / 10 % validation / 45 % test, the official test set
  is the calibration set, itself split 90 % (fit) / 10 % (validation, early
  stopping) by the recalibrators.
* :func:`trace_splits` -- the truthful-calibration paper's protocol
  (Lu, Wu, Hartline & Hu 2025, arXiv:2510.06388, App. F): the official training set is
  used for training (subsets of it), the official test set is partitioned
  deterministically into halves: validation (temperature scaling only) and test.

All splits are permutations drawn with ``numpy.random.default_rng(seed)``, so
they are identical on every machine.
"""

from __future__ import annotations

import numpy as np

from jaxcal._src import validation as V

__all__ = ["local_calibration_splits", "trace_splits", "calibration_fit_val"]


def _rng(seed: int) -> np.random.Generator:
  """``default_rng(seed)`` for an int ``seed >= 0`` (``None`` would draw fresh entropy)."""
  return np.random.default_rng(V.check_int_option(seed, "seed", minimum=0))


def local_calibration_splits(n_train: int, seed: int) -> dict[str, np.ndarray]:
  """Indices into the official training set: ``train`` (45 %), ``val`` (10 %), ``test`` (45 %)."""
  n_train = V.check_int_option(n_train, "n_train", minimum=0)
  perm = _rng(seed).permutation(n_train)
  a = int(round(0.45 * n_train))
  b = a + int(round(0.10 * n_train))
  return {"train": np.sort(perm[:a]), "val": np.sort(perm[a:b]), "test": np.sort(perm[b:])}


def calibration_fit_val(
  n: int, seed: int, val_fraction: float = 0.1
) -> tuple[np.ndarray, np.ndarray]:
  """The recalibrators' internal 90 % / 10 % split of the calibration set."""
  n = V.check_int_option(n, "n", minimum=0)
  if V.check_float_option(val_fraction, "val_fraction", minimum=0.0) > 1:
    raise ValueError(f"val_fraction must be in [0, 1], got {val_fraction!r}")
  perm = _rng(seed).permutation(n)
  k = int(round(val_fraction * n))
  return np.sort(perm[k:]), np.sort(perm[:k])


def trace_splits(n_train: int, n_test: int, seed: int = 42) -> dict[str, np.ndarray]:
  """``train_order``: a permutation of the training set (subset of size k = its
  first k entries, so subsets are nested); ``val``/``test``: halves of the
  official test set."""
  n_train = V.check_int_option(n_train, "n_train", minimum=0)
  n_test = V.check_int_option(n_test, "n_test", minimum=0)
  rng = _rng(seed)
  perm = rng.permutation(n_test)
  half = n_test // 2
  return {
    "train_order": rng.permutation(n_train),
    "val": np.sort(perm[:half]),
    "test": np.sort(perm[half:]),
  }
