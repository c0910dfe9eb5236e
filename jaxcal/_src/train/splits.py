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


def _size(value: object, name: str) -> int:
  """A split's size: an int in ``[0, 2^31 - 1]``, jaxcal's bound on an array it allocates
  (checked before the permutation: ``10**12`` raised numpy's ``MemoryError``)."""
  n = V.check_int_option(value, name, minimum=0)
  V.check_entries(n, f"the permutation of range({name}) = range({n:,})", f"pass a smaller {name}")
  return n


def _rng(seed: int) -> np.random.Generator:
  """``default_rng(seed)`` for an int ``seed >= 0`` (``None`` would draw fresh entropy)."""
  return np.random.default_rng(V.check_seed(seed, minimum=0))


def local_calibration_splits(n_train: int, seed: int) -> dict[str, np.ndarray]:
  """Splits the official training set 45 % / 10 % / 45 % into train, validation and test.

  A permutation of ``range(n_train)`` from ``numpy.random.default_rng(seed)``:
  its first ``round(0.45 n_train)`` entries are ``train``, the next
  ``round(0.10 n_train)`` ``val`` and the rest ``test``. The official test
  set is the calibration set (split again by :func:`calibration_fit_val`).

  Args:
    n_train: size of the official training set, an int ``>= 0``.
    seed: an int ``>= 0``.

  Returns:
    ``{"train", "val", "test"}``: sorted int64 index arrays that partition
    ``range(n_train)``.

  Raises:
    ValueError: ``n_train`` or ``seed`` not an int ``>= 0``, or ``n_train >
      2^31 - 1`` (refused before the permutation is allocated).

  Example:
    >>> s = local_calibration_splits(20, seed=0)
    >>> [s[k].size for k in ("train", "val", "test")]
    [9, 2, 9]

  Reference: Barbera et al. (2025), "Multiclass Local Calibration with the
  Jensen-Shannon Distance", arXiv:2510.26566, §8.1 ("Experimental Setup":
  45 % of the original training data for training, 10 % for validation,
  45 % as test data, the original test split as calibration data).
  """
  n_train = _size(n_train, "n_train")
  perm = _rng(seed).permutation(n_train)
  a = int(round(0.45 * n_train))
  b = a + int(round(0.10 * n_train))
  return {"train": np.sort(perm[:a]), "val": np.sort(perm[a:b]), "test": np.sort(perm[b:])}


def calibration_fit_val(
  n: int, seed: int, val_fraction: float = 0.1
) -> tuple[np.ndarray, np.ndarray]:
  """Splits the calibration set into a fit part and a validation part (90 % / 10 %).

  A permutation of ``range(n)`` from ``numpy.random.default_rng(seed)``: its
  first ``round(val_fraction n)`` entries are the validation part (early
  stopping of the recalibrators that train), the rest the fit part.

  Args:
    n: size of the calibration set, an int ``>= 0``.
    seed: an int ``>= 0``.
    val_fraction: share of the validation part, in ``[0, 1]``.

  Returns:
    ``(fit, val)``: sorted int64 index arrays that partition ``range(n)``.

  Raises:
    ValueError: ``n`` or ``seed`` not an int ``>= 0``, ``n > 2^31 - 1``
      (refused before the permutation is allocated), or ``val_fraction`` not
      a number in ``[0, 1]``.

  Example:
    >>> fit, val = calibration_fit_val(20, seed=0)
    >>> fit.size, val.size
    (18, 2)

  Reference: Barbera et al. (2025), "Multiclass Local Calibration with the
  Jensen-Shannon Distance", arXiv:2510.26566, §8.1 (90 % of the calibration
  data to learn the calibration technique, 10 % for validation).
  """
  n = _size(n, "n")
  if V.check_float_option(val_fraction, "val_fraction", minimum=0.0) > 1:
    raise ValueError(f"val_fraction must be in [0, 1], got {val_fraction!r}")
  perm = _rng(seed).permutation(n)
  k = int(round(val_fraction * n))
  return np.sort(perm[k:]), np.sort(perm[:k])


def trace_splits(n_train: int, n_test: int, seed: int = 42) -> dict[str, np.ndarray]:
  """Orders the training set for nested subsets and halves the official test set.

  From one ``numpy.random.default_rng(seed)``: a permutation of
  ``range(n_test)`` whose first ``n_test // 2`` entries are ``val``
  (temperature scaling only) and the rest ``test``, then ``train_order``, a
  permutation of ``range(n_train)``; the training subset of size ``k`` is
  ``train_order[:k]``, so smaller subsets are nested in larger ones.

  Args:
    n_train: size of the official training set, an int ``>= 0``.
    n_test: size of the official test set, an int ``>= 0``.
    seed: an int ``>= 0`` (the paper's 42 by default).

  Returns:
    ``{"train_order", "val", "test"}``: ``train_order`` ``(n_train,)`` a
    permutation; ``val`` and ``test`` sorted int64 index arrays that
    partition ``range(n_test)``.

  Raises:
    ValueError: ``n_train``, ``n_test`` or ``seed`` not an int ``>= 0``, or
      ``n_train`` or ``n_test`` above ``2^31 - 1`` (refused before the
      permutations are allocated).

  Example:
    >>> t = trace_splits(6, 5)
    >>> sorted(t["train_order"].tolist()), t["val"].size, t["test"].size
    ([0, 1, 2, 3, 4, 5], 2, 3)

  Reference: Lu, Wu, Hartline & Hu (2025), "Truthful Calibration Errors for
  Multi-Class Prediction", arXiv:2510.06388, App. F (the official training
  split kept for training, the official test split partitioned
  deterministically into validation and test halves with seed 42) and
  §5.1 (traces from random training subsets of different sizes).
  """
  n_train = _size(n_train, "n_train")
  n_test = _size(n_test, "n_test")
  rng = _rng(seed)
  perm = rng.permutation(n_test)
  half = n_test // 2
  return {
    "train_order": rng.permutation(n_train),
    "val": np.sort(perm[:half]),
    "test": np.sort(perm[half:]),
  }
