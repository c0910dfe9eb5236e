"""Bad inputs: one ValueError per kind, naming the problem; inputs untouched."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcal import metrics, scores

P = np.array([[0.7, 0.3], [0.2, 0.8], [0.5, 0.5]], np.float32)
Y = np.array([0, 1, 1])


def _with(p, i, j, v):
  q = p.copy()
  q[i, j] = v
  return q


BAD = [
  # (description, thunk, message regex)
  ("nan", lambda: metrics.conf_ece(_with(P, 0, 0, np.nan), Y), r"non-finite.*NaN"),
  ("inf", lambda: metrics.classwise_ce(_with(P, 1, 1, np.inf), Y, 2), r"non-finite.*inf"),
  ("rank 1", lambda: metrics.conf_ece(P[0], Y), r"shape \(n, C\)"),
  ("rank 3", lambda: scores.brier(P[None], Y), r"shape \(n, C\)"),
  ("one class", lambda: metrics.ecce(np.ones((3, 1)), Y), r"at least 2 classes"),
  ("no samples", lambda: metrics.conf_ce(np.zeros((0, 2)), np.zeros(0, int)), r"empty"),
  ("off simplex", lambda: metrics.conf_ece(P * 0.5, Y), r"sum to 1"),
  ("negative", lambda: metrics.conf_ece(np.array([[1.2, -0.2]] * 3), Y), r"\[0, 1\]"),
  ("label range", lambda: metrics.conf_ece(P, np.array([0, 2, 1])), r"labels must lie in \[0, 2\)"),
  ("label negative", lambda: scores.log_loss(P, np.array([0, -1, 1])), r"labels must lie"),
  (
    "label float",
    lambda: metrics.conf_ece(P, np.array([0.0, 0.5, 1.0])),
    r"labels must be integers",
  ),
  ("label length", lambda: metrics.conf_ece(P, np.array([0, 1])), r"labels has 2 entries"),
  ("num_bins 0", lambda: metrics.conf_ece(P, Y, 0), r"num_bins must be >= 1"),
  ("num_bins array 0", lambda: metrics.conf_ce(P, Y, np.array([0, 2])), r"num_bins must be >= 1"),
  ("num_bins non-integer", lambda: metrics.conf_ece(P, Y, 2.5), r"num_bins must be integer"),
  ("num_bins string", lambda: metrics.conf_ece(P, Y, "15"), r"num_bins must be an integer"),
  ("num_bins bool", lambda: metrics.conf_ece(P, Y, True), r"num_bins must be an integer"),
  ("unknown binning", lambda: metrics.conf_ece(P, Y, 2, "equal"), r"binning must be one of"),
  ("quantile m > n", lambda: metrics.classwise_ce(P, Y, 4), r"quantile binning with num_bins = 4"),
  ("max_bins too small", lambda: metrics.conf_ece(P, Y, 15, max_bins=10), r"exceeds max_bins"),
  ("max_bins invalid", lambda: metrics.conf_ece(P, Y, 5, max_bins=0), r"max_bins must be"),
  ("lin_ce shapes", lambda: metrics.lin_ce(P, P[:, :1], np.array([0, 0, 1]), 2), r"same shape"),
  (
    "bin_ids range",
    lambda: metrics.lin_ece(P, P, np.array([0, 0, 2]), 2),
    r"bin_ids must lie in \[0, 2\)",
  ),
  (
    "class_weights shape",
    lambda: metrics.classwise_ece(P, Y, class_weights=np.ones(3)),
    r"class_weights must have shape \(2,\)",
  ),
  (
    "class_weights negative",
    lambda: metrics.ecce(P, Y, class_weights=-np.ones(2)),
    r"non-negative",
  ),
  (
    "binary outcome",
    lambda: metrics.binary_ce(P[:, 0], np.array([0, 1, 2]), 2),
    r"y must lie in \[0, 2\)",
  ),
  (
    "logits nan",
    lambda: scores.brier(_with(P, 0, 0, np.nan), Y, from_logits=True),
    r"logits contains",
  ),
  (
    "bin_ids scores",
    lambda: metrics.bin_ids(np.zeros((2, 2)), 2),
    r"scores must have shape \(n,\)",
  ),
  (
    "bin_ids quantile m > n",
    lambda: metrics.bin_ids(np.zeros(2), 3, "quantile"),
    r"needs at least",
  ),
  ("not numeric", lambda: metrics.conf_ece("abc", Y), r"numeric"),
]


@pytest.mark.parametrize("what,thunk,match", BAD, ids=[b[0] for b in BAD])
def test_bad_input_raises_value_error(what, thunk, match):
  with pytest.raises(ValueError, match=match):
    thunk()


def test_inputs_not_modified():
  p = P.copy()
  y = Y.copy()
  w = np.array([0.25, 0.75])
  z = np.log(P + 1e-3)
  z0 = z.copy()
  metrics.conf_ece(p, y)
  metrics.classwise_ece(p, y, 2, class_weights=w)
  metrics.ecce(p, y, np.array([2, 3]))
  metrics.conf_ce_corr(z, y, 2, from_logits=True)
  metrics.lin_ce(p, np.eye(2)[y], y, 2)
  scores.brier(p, y, per_sample=True)
  np.testing.assert_array_equal(p, P)
  np.testing.assert_array_equal(y, Y)
  np.testing.assert_array_equal(w, [0.25, 0.75])
  np.testing.assert_array_equal(z, z0)
  assert p.flags.writeable and y.flags.writeable


def test_accepted_inputs():
  # integral float labels, bool one-hot rows, int probabilities, integral float num_bins
  e = float(metrics.conf_ece(P, Y, 2))
  assert float(metrics.conf_ece(P, Y.astype(np.float64), 2)) == e
  assert float(metrics.conf_ece(P, Y, 2.0)) == e
  onehot = np.eye(2, dtype=np.int32)[Y]
  assert float(metrics.conf_ece(onehot, Y, 2)) == 0.0
  # values within the simplex tolerance pass
  q = P.copy()
  q[0, 0] += 5e-4
  metrics.conf_ece(q, Y)


def test_value_checks_skipped_under_transformations():
  # Traced inputs cannot be inspected: no error, and no Python branching on values.
  bad = _with(P, 0, 0, np.nan)
  out = jax.jit(lambda p: metrics.conf_ece(p, Y, 2))(bad)
  assert np.isnan(out) or np.isfinite(out)
  with pytest.raises(ValueError, match=r"shape \(n, C\)"):  # shape checks still run
    jax.jit(lambda p: metrics.conf_ece(p, Y))(jnp.zeros(3))
