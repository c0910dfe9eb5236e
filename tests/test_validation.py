"""The validation layer: one fused device check, no host copies, masks, dtypes, compilations.

The table of bad inputs is in ``test_bad_inputs.py``; this file tests the
layer's properties: inputs untouched, accepted inputs, messages, NaN under
``jit``, no device-to-host transfer of data-sized arrays, sharded inputs,
``where`` masks, literal signatures, and the compilation count of a bin sweep.
"""

import inspect
import os
import pathlib
import subprocess
import sys
import textwrap
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcal

sys.path.insert(0, str(pathlib.Path(__file__).parent))  # --import-mode=importlib
from _cpu_devices import cpu_devices_env
from conftest import no_new_programs

from jaxcal import data, metrics, report, scores, utility
from jaxcal._src import calibration_errors as CE
from jaxcal._src import validation as V
from jaxcal._src.numerics import RowBlocks, by_rows, join_rows
from jaxcal._src.scores import prepare

P = np.array([[0.7, 0.3], [0.2, 0.8], [0.5, 0.5]], np.float32)
Y = np.array([0, 1, 1])


def _data(n=300, c=4, seed=0):
  rng = np.random.default_rng(seed)
  p = rng.dirichlet(np.full(c, 0.7), n).astype(np.float32)
  p /= p.sum(axis=1, keepdims=True)
  return p, rng.integers(0, c, n)


def test_inputs_not_modified():
  p, y = P.copy(), Y.copy()
  w = np.array([0.0, 1.0])  # a zero weight is valid (a negative one or a zero sum is not)
  z = np.log(P + 1e-3)
  z0 = z.copy()
  mask = np.array([True, False, True])
  wide = np.array([0, 1, 1], np.int64)
  half = P.astype(np.float16)
  half0 = half.copy()
  metrics.conf_ece(p, y)
  metrics.classwise_ece(p, y, 2, class_weights=w, where=mask)
  metrics.ecce(p, y, np.array([2, 3]))
  metrics.conf_ce_corr(z, y, 2, from_logits=True)
  metrics.lin_ce(p, np.eye(2)[y], y, 2, where=mask)
  scores.brier(p, y, per_sample=True, where=mask)
  scores.decompose(half, wide)
  metrics.conf_ece(p, wide.astype(np.float64))
  np.testing.assert_array_equal(p, P)
  np.testing.assert_array_equal(y, Y)
  np.testing.assert_array_equal(w, [0.0, 1.0])
  np.testing.assert_array_equal(z, z0)
  np.testing.assert_array_equal(mask, [True, False, True])
  np.testing.assert_array_equal(wide, [0, 1, 1])
  np.testing.assert_array_equal(half, half0)
  assert p.flags.writeable and y.flags.writeable


def test_accepted_inputs():
  e = float(metrics.conf_ece(P, Y, 2))
  assert float(metrics.conf_ece(P, Y.astype(np.float64), 2)) == e  # integral float labels
  assert float(metrics.conf_ece(P, Y.astype(np.int64), 2)) == e  # int64 within range
  assert float(metrics.conf_ece(P, Y.astype(np.uint8), 2)) == e
  assert float(metrics.conf_ece(P, Y.astype(bool), 2)) == e
  assert float(metrics.conf_ece(P, Y, 2.0)) == e  # integral float num_bins
  assert float(metrics.conf_ece(P, Y, np.int64(2))) == e
  assert float(metrics.conf_ece(P, list(Y), 2)) == e  # lists
  onehot = np.eye(2, dtype=np.int32)[Y]
  assert float(metrics.conf_ece(onehot, Y, 2)) == 0.0  # integer probabilities
  assert float(metrics.conf_ece(onehot.astype(bool), Y, 2)) == 0.0
  q = P.copy()
  q[0, 0] += 5e-4  # within the float32 tolerance
  metrics.conf_ece(q, Y)
  q = np.array([[1.0004, -4e-4], [0.2, 0.8], [0.5, 0.5]], np.float32)  # tiny negative: accepted
  metrics.conf_ece(q, Y)
  # masked-out rows are not checked: garbage there is fine
  bad = np.array([[0.7, 0.3], [np.nan, 7.0], [0.5, 0.5]], np.float32)
  mask = np.array([True, False, True])
  np.testing.assert_allclose(
    metrics.conf_ece(bad, np.array([0, 9, 1]), 2, where=mask), metrics.conf_ece(P[mask], Y[mask], 2)
  )


def test_messages_name_the_argument_count_first_index_and_value():
  p = P.copy()
  p[1] = [0.3, 0.3]
  p[2] = [0.45, 0.45]
  with pytest.raises(ValueError) as e:
    scores.brier(p, Y)
  msg = str(e.value)
  assert "rows of probs must sum to 1" in msg and "2 row(s)" in msg and "row 1" in msg
  assert "0.6" in msg and "from_logits=True" in msg
  y = np.array([0, 5, 7])
  with pytest.raises(
    ValueError, match=r"labels must lie in \[0, 2\); 2 entries do not, the first is labels\[1\] = 5"
  ):
    metrics.conf_ce(P, y, 2)
  with pytest.raises(
    ValueError,
    match=r"logits contains non-finite values \(NaN or inf\) in 1 row\(s\); the first is row 2, column 1: inf",
  ):
    scores.log_loss(np.array([[0.0, 1.0], [1.0, 2.0], [0.0, np.inf]]), Y, from_logits=True)


@pytest.mark.parametrize("c", [1, 2, 3, 17, 32])
def test_row_sum_min_matches_a_float64_reference(c):
  from jaxcal._src.numerics import NARROW_ROW, row_sum_min

  assert NARROW_ROW == 32  # the widest rows it takes: c = 32
  rng = np.random.default_rng(c)
  x = rng.normal(size=(37, c)).astype(np.float32)
  x[5, c // 2] = np.nan
  x[9, 0] = -np.inf
  s, lo = jax.jit(row_sum_min)(x)
  ref64 = x.astype(np.float64)
  np.testing.assert_allclose(s, ref64.sum(1), rtol=1e-5, atol=1e-5)
  np.testing.assert_array_equal(lo, x.min(1))  # NaN where the row holds one
  assert np.isnan(s[5]) and np.isnan(lo[5]) and s[9] == -np.inf
  s16, lo16 = row_sum_min(jnp.asarray(x, jnp.bfloat16), jnp.float32)
  assert s16.dtype == jnp.float32 and lo16.dtype == jnp.bfloat16
  # wider rows are the caller's (the simplex check reduces them otherwise)
  with pytest.raises(ValueError, match="at most 32 entries, got 33"):
    row_sum_min(np.zeros((2, 33), np.float32))


def test_two_sum_is_exact_whichever_argument_is_larger():
  """TwoSum, not Fast2Sum: the streaming merge, kernel_ce and the segment sums add either
  way round (a mutation review: only |a| >= |b| was tested)."""
  from jaxcal._src.numerics import segment_sum_accurate, two_sum

  for a, b in ((1.0, 2.0**-30), (2.0**-30, 1.0), (-3.0, 2.0**25 + 1), (2.0**25 + 1, -3.0)):
    s, e = two_sum(jnp.float32(a), jnp.float32(b))
    assert float(s) + float(e) == np.float64(np.float32(a)) + np.float64(np.float32(b))
  # three chunks (64 blocks of 512 samples each, on the CPU) summing 1.5, 2^25 and -2^25:
  # exact total 1.5, added across chunks by two_sum (2.0 when its error term is dropped)
  v = np.zeros(3 * 64 * 512, np.float32)
  v[0], v[64 * 512], v[2 * 64 * 512] = 1.5, 2.0**25, -(2.0**25)
  ids = np.zeros(v.size, np.int32)
  got = segment_sum_accurate(jnp.asarray(v, jnp.float32), jnp.asarray(ids), 1, block=512)
  assert float(got[0]) == 1.5


@pytest.mark.parametrize("n", [1, 512, 513, 40000])
def test_segment_sum_accurate_matches_a_float64_reference(n):
  from jaxcal._src.numerics import _chunked_segment_sum, segment_sum_accurate

  rng = np.random.default_rng(n)
  v = rng.uniform(0.9, 1.0, (n, 2, 3)).astype(np.float32)
  ids = rng.integers(-1, 6, (n, 2)).astype(np.int32)  # -1 and 5 lie outside 5 segments: dropped
  want = np.zeros((5, 3))
  for i, j in zip(ids.ravel(), v.reshape(-1, 3).astype(np.float64)):
    if 0 <= i < 5:
      want[i] += j
  for block in (512, 64):  # 40000 rows in 64-row blocks: 10 chunks added with TwoSum
    got = segment_sum_accurate(jnp.asarray(v), jnp.asarray(ids), 5, block=block)
    np.testing.assert_allclose(got, want, rtol=2e-6)  # a sum of at most 512 terms
  if n >= 64:  # the accelerators' chunks (up to 1024 blocks per scatter), run here
    got = _chunked_segment_sum(v, ids, num_segments=5, block=64, group=min(n // 64, 1024))
    np.testing.assert_allclose(got, want, rtol=2e-6)
  # one id per sample, under jit and vmap (each data set its own sums)
  f = jax.jit(lambda a, b: segment_sum_accurate(a, b, 5))
  # (a GPU's scatter-add adds in no fixed order: jit and eager agree to the sum's round-off)
  np.testing.assert_allclose(
    f(v[:, 0], ids[:, 0]), segment_sum_accurate(v[:, 0], ids[:, 0], 5), rtol=2e-6
  )
  both = jax.vmap(lambda a: segment_sum_accurate(a, ids[:, 0], 5))(np.stack([v[:, 0], 2 * v[:, 0]]))
  np.testing.assert_allclose(both[1], 2 * both[0], rtol=1e-6)
  # equal terms, where a scatter-add's round-off is biased alike: 10^6 x 0.99 is 0.7 % off
  eq = segment_sum_accurate(jnp.full((10**6,), 0.99, jnp.float32), jnp.zeros(10**6, jnp.int32), 1)
  assert abs(float(eq[0]) - 10**6 * float(np.float32(0.99))) < 1e-5 * 10**6


def _rows_near_the_bounds(c, tol):
  """A valid (n, c) matrix and single-row edits at the simplex check's bounds."""
  p = np.full((40, c), 1.0 / c, np.float32)
  neg, over = p.copy(), p.copy()
  neg[3, :2] = [-tol / 2, 2.0 / c + tol / 2]  # an entry below 0 within tol: valid
  over[7, :3] = [1 + 1.5 * tol, -0.75 * tol, -0.75 * tol]  # sums to 1, an entry > 1 + tol
  over[7, 3:] = 0.0
  low, off, nan, inf = (p.copy() for _ in range(4))
  low[11, :2] = [-2 * tol, 2.0 / c + 2 * tol]  # sums to 1, an entry below -tol
  off[13, 0] += 2 * tol  # a row sum off by 2 tol
  nan[17, c - 1] = np.nan
  inf[19, 0] = np.inf
  return p, {"neg": neg, "over": over, "low": low, "off": off, "nan": nan, "inf": inf}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("tol", [1e-3, 2 * 2**-10, 2 * 2**-7, 2.4e-7])
def test_row_sum_bounds_are_the_subtraction_test(dtype, tol):
  # The simplex check compares row sums with two bounds; they must accept
  # exactly the sums s with |s - 1| <= tol computed in the same dtype: every
  # representable value within 6 ulps of either bound, and far ones.
  lo, hi = V._sum_bounds(tol, dtype)
  assert lo.dtype == dtype and hi.dtype == dtype
  vals = []
  for c in (lo, hi, dtype(1)):
    v = c
    for _ in range(6):
      v = np.nextafter(v, dtype(-np.inf))
    for _ in range(13):
      vals.append(v)
      v = np.nextafter(v, dtype(np.inf))
  s = np.array([*vals, 0.0, 0.5, 2.0, 3.0, np.nan, np.inf, -np.inf], dtype)
  with np.errstate(invalid="ignore"):
    want = np.abs(s - dtype(1)) <= dtype(tol)
  assert want.sum() > 13  # both bounds' neighbourhoods straddle the test
  with jax.enable_x64(dtype == np.float64):
    got = np.asarray(jax.jit(lambda v: V._sums_to_one(v, tol))(jnp.asarray(s)))
  np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("c", [3, 10, 32, 33, 100])
def test_simplex_check_at_its_bounds(c):
  # Both forms of the row check (one tree pass for narrow rows, two reductions
  # for wide ones) accept and refuse the same rows, eagerly, under jit (NaN)
  # and in checked mode; masked-out rows are not checked.
  tol = V.simplex_atol(jnp.float32)
  p, bad = _rows_near_the_bounds(c, tol)
  y = np.arange(40) % c
  f = jax.jit(lambda q, y: scores.brier(q, y))
  assert np.isfinite(float(scores.brier(bad["neg"], y))) and np.isfinite(float(f(bad["neg"], y)))
  messages = {
    "over": r"must lie in \[0, 1\]",
    "low": r"must lie in \[0, 1\]",
    "off": "sum to 1",
    "nan": "non-finite",
    "inf": "non-finite",
  }
  for key, msg in messages.items():
    with pytest.raises(ValueError, match=msg):
      scores.brier(bad[key], y)
    with pytest.raises(ValueError, match=msg):
      jaxcal.checked(f)(bad[key], y)
    # under jit the branch-free test: an entry in (1 + tol, 1 + C tol] of a row
    # summing to one passes there (documented), every other problem gives NaN
    assert np.isnan(float(f(bad[key], y))) == (key != "over"), key
    rows = np.ones(40, bool)
    rows[[7, 11, 13, 17, 19]] = False
    masked = float(scores.brier(bad[key], y, where=rows))
    assert masked == pytest.approx(float(scores.brier(p[rows], y[rows])), rel=1e-6)


@pytest.mark.parametrize("c", [3, 100])
def test_lowest_accepted_entry_is_minus_the_tolerance(c):
  # "values below 0 within tol" includes -tol itself (float32), and nothing below it
  tol = np.float32(V.simplex_atol(jnp.float32))
  p = np.full((40, c), 1.0 / c, np.float32)
  y = np.arange(40) % c
  edge, below = p.copy(), p.copy()
  edge[5, :2] = [-tol, 2.0 / c + tol]
  below[5, :2] = [np.nextafter(-tol, np.float32(-1)), 2.0 / c + tol]
  f = jax.jit(lambda q, y: scores.brier(q, y))
  assert np.isfinite(float(scores.brier(edge, y))) and np.isfinite(float(f(edge, y)))
  assert np.isfinite(float(jaxcal.checked(f)(edge, y)))
  with pytest.raises(ValueError, match=r"must lie in \[0, 1\]"):
    scores.brier(below, y)
  assert np.isnan(float(f(below, y)))


def test_unit_interval_check_accepts_the_tolerance_and_refuses_the_next_float():
  # binary probabilities (and every other [lo, hi] check) accept values within
  # tol of the interval, -tol and 1 + tol included (float32), and nothing beyond
  tol = V.simplex_atol(jnp.float32)
  lo, hi = np.float32(-tol), np.float32(1 + tol)
  y = np.array([0, 1, 0, 1])
  V.check_binary(np.array([0.3, hi, 0.2, lo], np.float32), y)
  for i, v in ((1, np.nextafter(hi, np.float32(2))), (3, np.nextafter(lo, np.float32(-1)))):
    p = np.array([0.3, 0.5, 0.2, 0.4], np.float32)
    p[i] = v
    with pytest.raises(
      ValueError,
      match=rf"p must lie in \[0, 1\] \(tolerance 0.001\); 1 entry\(s\) hold values outside, "
      rf"the first is p\[{i}\]: {float(v):.6g}",
    ):
      V.check_binary(p, y)


def test_finite_logits_whose_row_sum_overflows_are_accepted():
  # the row sum is only the fast test: a finite row summing to inf is checked entry by entry
  z = np.array([[3e38, 3e38], [0.0, 1.0]], np.float32)
  np.testing.assert_array_equal(V.check_logits(z), z)
  with pytest.raises(ValueError, match=r"logits contains non-finite .* row 0, column 1: inf"):
    V.check_logits(np.array([[3e38, np.inf], [0.0, 1.0]], np.float32))


def test_option_checks_accept_their_bounds_and_refuse_the_next_value():
  big = V.MAX_NUM_BINS
  assert V.check_num_bins(big) == big and V.check_num_bins(np.array([1, big])).tolist() == [1, big]
  assert V.check_bins(5, "fixed", big).max_bins == big
  with pytest.raises(ValueError, match=rf"num_bins must be <= {big}, got {big + 1}"):
    V.check_num_bins(big + 1)
  assert V.check_int_option(2, "num_folds", minimum=2, maximum=5) == 2
  assert V.check_int_option(5, "num_folds", minimum=2, maximum=5) == 5
  with pytest.raises(ValueError, match="num_folds must be >= 2, got 1"):
    V.check_int_option(1, "num_folds", minimum=2, maximum=5)
  with pytest.raises(ValueError, match="num_folds must be <= 5, got 6"):
    V.check_int_option(6, "num_folds", minimum=2, maximum=5)
  assert V.check_float_option(0.0, "tol", minimum=0.0) == 0.0
  assert V.check_float_option(1e-300, "tol", positive=True) == 1e-300
  with pytest.raises(ValueError, match="tol must be >= 0.0, got -1e-300"):
    V.check_float_option(-1e-300, "tol", minimum=0.0)
  with pytest.raises(ValueError, match="tol must be > 0, got 0.0"):
    V.check_float_option(0.0, "tol", positive=True)


def test_one_prng_key_is_required():
  assert V.check_key(jax.random.key(0)).shape == ()
  assert V.check_key(jax.random.PRNGKey(0)).shape == (2,)
  keys = jax.random.split(jax.random.key(0), 2)  # a batch of typed keys
  with pytest.raises(
    ValueError, match=r"key must be a JAX PRNG key .*of dtype key<fry> and shape \(2,\)"
  ):
    V.check_key(keys)
  # a raw key of another length than the default implementation's (2,): JAX's TypeError
  for bad in (np.zeros(1, np.uint32), np.zeros(4, np.uint32)):
    with pytest.raises(ValueError, match=rf"key is a raw uint32 key of shape \({bad.size},\), but"):
      V.check_key(bad)


def test_features_need_a_column():
  with pytest.raises(ValueError, match=r"features must have at least one column .*got \(3, 0\)"):
    V.check_features(np.zeros((3, 0), np.float32), 3)


def test_a_float64_value_beyond_float32_is_named_in_the_message():
  # without x64 a finite 1e200 becomes inf on conversion: the message said only "inf"
  phi = np.ones((5, 2))
  phi[3, 1] = 1e200
  msg = r"column 1: inf \(if the input was float64: a value beyond float32's range, about 3.4e38"
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # JAX's truncation warning, numpy's overflow in the cast
    with pytest.raises(ValueError, match=msg):
      V.check_features(phi, 5)
  with pytest.raises(ValueError, match=r"column 0: nan$"):  # no hint for a NaN
    V.check_features(np.array([[np.nan], [1.0]]), 2)


def test_checked_mode_gives_the_eager_message():
  bad = P * 0.5
  with pytest.raises(ValueError) as eager:
    metrics.classwise_ce(bad, Y, 2)
  with pytest.raises(ValueError) as compiled:
    jaxcal.checked(jax.jit(lambda p, y: metrics.classwise_ce(p, y, 2)))(bad, Y)
  assert str(eager.value) == str(compiled.value)


def test_value_checks_give_nan_under_transformations():
  # Traced inputs cannot be inspected: the validity flag is folded into the result.
  bad = P.copy()
  bad[0, 0] = np.nan
  out = jax.jit(lambda p: metrics.conf_ece(p, Y, 2))(bad)
  assert np.isnan(out)
  assert np.isfinite(jax.jit(lambda p: metrics.conf_ece(p, Y, 2))(P))
  with pytest.raises(ValueError, match=r"shape \(n, C\)"):  # shape checks still run
    jax.jit(lambda p: metrics.conf_ece(p, Y))(jnp.zeros(3))
  # prepare (the entry point other metrics share) poisons the probabilities
  p, y = jax.jit(lambda p: prepare(p, Y))(P * 0.5)
  assert np.all(np.isnan(p)) and y.dtype == jnp.int32


def test_prepare_upcasts_and_narrows():
  p, y = prepare(P.astype(np.float16), np.array([0, 1, 1], np.int64))
  assert p.dtype == jnp.float32 and y.dtype == jnp.int32
  p, _ = prepare(jnp.asarray(P, jnp.bfloat16), Y)
  assert p.dtype == jnp.float32
  p, _ = prepare(np.log(P), Y, from_logits=True)
  np.testing.assert_allclose(p, P, rtol=1e-6)
  assert V.simplex_atol(jnp.float32) == 1e-3 and V.simplex_atol(jnp.float64) == 1e-3
  assert V.simplex_atol(jnp.float16) == 2 * 2.0**-10 and V.simplex_atol(jnp.bfloat16) == 2 * 2.0**-7
  assert V.simplex_atol(jnp.int32) == 1e-3


def test_numpy_bfloat16_is_checked_as_bfloat16_like_a_jax_array():
  # numpy (ml_dtypes) bfloat16 is not an np.floating: it was upcast on the host as if
  # an integer, and its rows then checked at float32's 1e-3 instead of bfloat16's 2 eps
  third = np.full((64, 3), 1 / 3).astype(jnp.bfloat16)  # rows sum to 1.00195 in bfloat16
  y = np.arange(64) % 3
  for x in (third, jnp.asarray(third)):
    np.testing.assert_allclose(float(scores.brier(x, y)), 2 / 3, rtol=1e-5)
  with pytest.raises(ValueError, match=r"tolerance 0.001"):  # float32: 1e-3 as before
    scores.brier(third.astype(np.float32), y)
  labels = y.astype(jnp.bfloat16)  # bfloat16 labels: checked as floats, on the host
  np.testing.assert_allclose(float(scores.brier(third, labels)), 2 / 3, rtol=1e-5)
  labels[3] = 1.5
  with pytest.raises(ValueError, match=r"labels must be integers.* labels\[3\] = 1.5"):
    scores.brier(third, labels)


def test_checked_refuses_what_is_not_a_function_when_wrapping():
  with pytest.raises(TypeError, match="checked\\(fn\\) needs a function, got int"):
    jaxcal.checked(3)  # was accepted, and failed only when called


def test_one_rule_for_logits_or_probabilities():
  assert data.looks_like_probs is V.looks_like_probs
  from jaxcal._src import cli, report

  assert "probs_or_logits" in inspect.getsource(report._prepare)
  assert "looks_like_probs(x)" in inspect.getsource(V.probs_or_logits)
  src = inspect.getsource(cli)
  assert "probs_or_logits" in src and "looks_like_probs" not in src and "sum(axis" not in src
  p, _ = _data()
  assert V.looks_like_probs(p) and V.looks_like_probs(jnp.asarray(p))
  assert not V.looks_like_probs(np.log(p)) and not V.looks_like_probs(p * 0.9)
  assert not V.looks_like_probs(p[0]) and not V.looks_like_probs(np.where(p > 0.5, np.nan, p))
  # one NaN entry past 4,096 entries: XLA:CPU's min / max skipped it, so the rows read as
  # probabilities and were refused as such ("every entry lies in [0, 1] ...")
  big = np.tile(p, (5000 // len(p) + 1, 1))
  big[7, 1] = np.nan
  assert not V.probs_or_logits(big)
  with pytest.raises(ValueError, match=r"^predictions contains non-finite"):
    V.probs_or_logits(big, name="predictions") or V.check_logits(big, name="predictions")
  # the rule is exactly "would pass check_probs"
  for x in (p, p * 1.0005, p * 1.002, np.abs(np.log(p))):
    try:
      V.check_probs(x)
      passes = True
    except ValueError:
      passes = False
    assert V.looks_like_probs(x) == passes


def test_probabilities_off_the_simplex_are_not_taken_for_logits():
  # the report and the command line softmaxed probabilities rounded to 4 decimals
  # (rows within 1.4e-3 of 1): ConfECE 0.725 for 0.087 on CIFAR-100, silently
  p, _ = _data()
  assert V.probs_or_logits(p) and not V.probs_or_logits(np.log(p))
  assert not V.probs_or_logits(np.where(p > 0.5, np.nan, p))  # not probability-like
  assert not V.probs_or_logits(np.zeros((3, 4))) and not V.probs_or_logits(p * 0.4)  # logits
  for bad in (p * 1.002, np.round(p, 2)):
    with pytest.raises(
      ValueError,
      match=r"every entry lies in \[0, 1\] as in probabilities, but .* must sum to 1 .* add a constant",
    ):
      V.probs_or_logits(bad)
  with pytest.raises(ValueError, match=r"predictions: every entry lies in \[0, 1\]"):
    report.calibration_report(p * 1.002, np.zeros(len(p), int), num_utilities=0, resamples=0)
  # probabilities with one corrupt row (zeros, or summing to 2) were softmaxed as logits:
  # the report's NLL 1.52 for 0.19, ConfECE 0.72 for 0.025, with no error
  for row in (np.zeros(p.shape[1]), np.full(p.shape[1], 2.0 / p.shape[1])):
    q = p.copy()
    q[3] = row
    with pytest.raises(ValueError, match=r"every entry lies in \[0, 1\] .* first is row 3"):
      V.probs_or_logits(q)
    with pytest.raises(ValueError, match=r"predictions: every entry lies in \[0, 1\]"):
      report.calibration_report(q, np.zeros(len(q), int), num_utilities=0, resamples=0)
  assert not V.probs_or_logits(np.full((5, 4), 0.05))  # no row near one: logits
  # rows summing to one with an entry just outside [0, 1] were read as logits and their
  # softmax reported (ConfECE 0.108 for 0.292; found by a review helper)
  q = p.astype(np.float32).copy()
  q[0, :3] = [1.0015, 0.0, -0.0015]
  q[0, 3:] = 0.0
  with pytest.raises(ValueError, match=r"every row sums to one as in probabilities, but .*Clip"):
    V.probs_or_logits(q)
  with pytest.raises(ValueError, match=r"predictions: every row sums to one"):
    report.calibration_report(q, np.zeros(len(q), int), num_utilities=0, resamples=0)
  assert not V.probs_or_logits(np.log(p) - np.log(p).mean(1, keepdims=True))  # rows sum to 0
  assert not V.probs_or_logits(np.array([[2.0, -1.0], [1.5, -0.5]]))  # logits summing to one
  for fn in (V.looks_like_probs, V.probs_or_logits):  # a Python bool: not under jit
    with pytest.raises(TypeError, match=rf"{fn.__name__} needs a concrete array"):
      jax.jit(fn)(p)


# --------------------------------------------------------------------------
# Masks: a masked-out sample is treated exactly as if it were absent
# --------------------------------------------------------------------------

MASKED = {
  "conf_ece": lambda p, y, **k: metrics.conf_ece(p, y, 7, **k),
  "conf_ece quantile": lambda p, y, **k: metrics.conf_ece(p, y, 7, "quantile", **k),
  "conf_ce": lambda p, y, **k: metrics.conf_ce(p, y, 7, **k),
  "conf_ce_corr": lambda p, y, **k: metrics.conf_ce_corr(p, y, np.array([3, 8]), **k),
  "classwise_ce": lambda p, y, **k: metrics.classwise_ce(p, y, 5, **k),
  "classwise_ece": lambda p, y, **k: metrics.classwise_ece(
    p, y, 6, class_weights=np.array([0.1, 0.2, 0.3, 0.4]), **k
  ),
  "ecce": lambda p, y, **k: metrics.ecce(p, y, 5, **k),
  "binary_ce": lambda p, y, **k: metrics.binary_ce(p[:, 0], (y == 0).astype(int), 4, **k),
  "lin_ce": lambda p, y, **k: metrics.lin_ce(p, np.eye(4)[y], y % 3, 3, **k),
  "lin_ece": lambda p, y, **k: metrics.lin_ece(p, np.eye(4)[y], y % 3, 3, **k),
  "brier": lambda p, y, **k: scores.brier(p, y, **k),
  "log_loss": lambda p, y, **k: scores.log_loss(p, y, **k),
  "spherical": lambda p, y, **k: scores.spherical(p, y, **k),
  "classification_error": lambda p, y, **k: scores.classification_error(p, y, **k),
  "confidence_loss": lambda p, y, **k: scores.confidence_loss(p, y, **k),
  "decompose": lambda p, y, **k: jnp.stack(scores.decompose(p, y, **k)),
  "reliability": lambda p, y, **k: jnp.stack(metrics.reliability_stats(p, y, 5, "quantile", **k)),
}


@pytest.mark.parametrize("name", list(MASKED))
def test_where_equals_the_subset(name):
  p, y = _data(200, 4, seed=1)
  mask = np.random.default_rng(2).random(200) < 0.6
  f = MASKED[name]
  got = f(p, y, where=mask)
  want = f(p[mask], y[mask])
  np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7)
  # jit == eager with a traced mask; an all-True mask == no mask
  np.testing.assert_allclose(jax.jit(lambda w: f(p, y, where=w))(mask), got, rtol=2e-6, atol=1e-7)
  np.testing.assert_allclose(f(p, y, where=np.ones(200, bool)), f(p, y), rtol=2e-6, atol=1e-7)


def test_per_sample_scores_are_zero_where_masked():
  p, y = _data(50, 4)
  mask = np.arange(50) % 3 != 0
  ls = scores.log_loss(p, y, per_sample=True, where=mask)
  np.testing.assert_array_equal(np.asarray(ls)[~mask], 0.0)
  np.testing.assert_allclose(
    np.asarray(ls)[mask], scores.log_loss(p[mask], y[mask], per_sample=True)
  )


# --------------------------------------------------------------------------
# Scale: no host copies, sharded inputs, compilations
# --------------------------------------------------------------------------


def _transfer_sizes(log: str) -> list[int]:
  """Entry counts of the device-to-host transfers in a transfer-guard log."""
  import re

  shapes = re.findall(r"device-to-host transfer: shape=\(([\d, ]*)\)", log)
  return [int(np.prod([int(d) for d in sh.split(",") if d.strip()] or [1])) for sh in shapes]


def test_eager_calls_copy_no_data_sized_array_to_the_host(monkeypatch, capfd):
  # explicit reads (jax.device_get) are spied on every backend; on an
  # accelerator the transfer guard also logs every implicit read (np.asarray
  # of a result), whose sizes are read from the log: on the CPU a read is no
  # transfer, and a guard that disallowed reads would refuse the scalars too
  p, y = _data(4096, 8)
  pd, yd, wd = jax.device_put(p), jax.device_put(y.astype(np.int32)), jax.device_put(y > 2)
  sizes = []
  real = jax.device_get

  def spy(x):
    sizes.extend(int(np.size(leaf)) for leaf in jax.tree_util.tree_leaves(x))
    return real(x)

  monkeypatch.setattr(jax, "device_get", spy)
  calls = [
    lambda: metrics.conf_ece(pd, yd),
    lambda: metrics.classwise_ce(pd, yd, 10, where=wd),
    lambda: metrics.ecce(pd, yd, jnp.arange(2, 6), class_weights=jnp.full(8, 0.125)),
    lambda: scores.brier(pd, yd, where=wd),
    lambda: scores.decompose(pd, yd),
    lambda: utility.uc(pd, yd, utility.top_class()),
  ]
  for call in calls:
    call()  # compile outside the guard (constants may move then)
  accelerator = jax.default_backend() != "cpu"
  capfd.readouterr()
  with jax.transfer_guard_device_to_host("log" if accelerator else "disallow"):
    for call in calls:
      jax.block_until_ready(call())
  assert sizes and max(sizes) <= 4, sizes  # only scalars (and a 4-entry bin array) came back
  if accelerator:
    logged = _transfer_sizes(capfd.readouterr().err)
    assert logged and max(logged) <= 4, logged
  # and an invalid input still raises from scalars only
  sizes.clear()
  with jax.transfer_guard_device_to_host("log" if accelerator else "disallow"):
    with pytest.raises(ValueError, match="sum to 1"):
      metrics.conf_ece(pd * 0.5, yd)
  assert max(sizes) <= 1
  if accelerator:
    logged = _transfer_sizes(capfd.readouterr().err)
    assert logged and max(logged) <= 4, logged


def test_a_failing_eager_check_reads_no_data_sized_array_to_the_host(monkeypatch):
  # The program that locates a problem was lowered under compile-time evaluation:
  # its argmax's (n,) iota became a device array read back into the program (32 MB
  # of HLO at n = 4e6). Every host read of a device array goes through _value.
  array_impl = pytest.importorskip("jax._src.array").ArrayImpl
  real = array_impl._value
  sizes = []

  def value(self):
    sizes.append(self.size)
    return real.fget(self)

  p, y = _data(3001, 8)
  p[50, 7] = np.nan
  pd, yd = jax.device_put(p), jax.device_put(y.astype(np.int32))
  monkeypatch.setattr(array_impl, "_value", property(value))
  for call in (lambda: metrics.skce(pd, yd), lambda: V.check_probs(pd)):
    sizes.clear()
    with pytest.raises(ValueError, match="row 50, column 7: nan"):
      call()
    assert sizes and max(sizes) <= 8, sizes  # flags, counts and the problem's fields


def test_transfer_sizes_are_read_from_the_guard_log():
  # the format seen on an H200 (jax 0.11.2)
  log = (
    "W1128 14:37:34.142546 456 guard_lib.cc:184] device-to-host transfer: shape=(2), dtype=S32\n"
    "W1128 14:37:34.207777 456 guard_lib.cc:184] device-to-host transfer: shape=(), dtype=F32\n"
    "W1128 14:37:34.207777 456 guard_lib.cc:184] device-to-host transfer: shape=(4096,8), ...\n"
  )
  assert _transfer_sizes(log) == [2, 1, 32768]


_SHARDED = textwrap.dedent(
  """
  import jax, jax.numpy as jnp, numpy as np
  from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
  from jaxcal import metrics, scores
  assert len(jax.devices()) == 4
  rng = np.random.default_rng(0)
  p = rng.dirichlet(np.ones(5), 64).astype(np.float32); p /= p.sum(1, keepdims=True)
  y = rng.integers(0, 5, 64).astype(np.int32)
  mesh = Mesh(np.array(jax.devices()), ("data",))
  ps = jax.device_put(p, NamedSharding(mesh, P("data", None)))
  ys = jax.device_put(y, NamedSharding(mesh, P("data")))
  ws = jax.device_put(y != 3, NamedSharding(mesh, P("data")))
  with jax.transfer_guard_device_to_host("disallow"):
    got = [metrics.conf_ece(ps, ys), metrics.classwise_ce(ps, ys, 4, where=ws),
           scores.brier(ps, ys), scores.decompose(ps, ys).mcb]
    try:
      metrics.conf_ece(ps * 0.5, ys)
      raise SystemExit("no error")
    except ValueError as e:
      assert "sum to 1" in str(e)
  want = [metrics.conf_ece(p, y), metrics.classwise_ce(p, y, 4, where=y != 3),
          scores.brier(p, y), scores.decompose(p, y).mcb]
  # mcb is the difference of two sums near 0.9, which the shards add in another
  # order: a few float32 roundings of 0.9 (6e-8 each) absolute
  np.testing.assert_allclose(np.array(got), np.array(want), rtol=1e-6, atol=3e-7)
  print("sharded ok")
  """
)


def test_eager_call_on_an_array_sharded_over_four_devices():
  env = cpu_devices_env(4)
  out = subprocess.run(
    [sys.executable, "-c", _SHARDED], env=env, capture_output=True, text=True, timeout=300
  )
  assert out.returncode == 0 and "sharded ok" in out.stdout, out.stderr[-3000:]


def test_a_bin_sweep_one_call_at_a_time_compiles_once_per_octave():
  from jax._src import monitoring

  p, y = _data(256, 3, seed=4)
  metrics.conf_ce(p, y, 2)  # the validation program, compiled once for these shapes
  compiles = []

  def listen(event, duration, **kwargs):
    if event == "/jax/core/compile/backend_compile_duration":
      compiles.append(duration)

  CE._compiled.cache_clear()
  jax.monitoring.register_event_duration_secs_listener(listen)
  try:
    for m in range(2, 201):
      metrics.conf_ce(p, y, m)  # quantile bins: every count up to n = 256
  finally:
    monitoring.unregister_event_duration_listener(listen)
  # max_bins = 2, 4, 8, ..., 256: 8 programs for 199 bin counts (it was 199)
  assert CE._compiled.cache_info().currsize == 8
  assert len(compiles) <= 8, len(compiles)
  # bucketing changes no value: the same counts with an exact max_bins
  for m in (3, 15, 100, 129):
    np.testing.assert_allclose(
      metrics.conf_ce(p, y, m), metrics.conf_ce(p, y, m, max_bins=m), rtol=1e-6
    )
    np.testing.assert_allclose(
      metrics.classwise_ece(p, y, m), metrics.classwise_ece(p, y, m, max_bins=m), rtol=1e-6
    )


def test_concrete_bins_closed_over_inside_jit_need_no_max_bins():
  p, y = _data(100, 3)
  bins = np.arange(2, 40)
  eager = metrics.classwise_ce(p, y, bins)
  np.testing.assert_allclose(jax.jit(lambda q: metrics.classwise_ce(q, y, bins))(p), eager)
  on_device = jnp.asarray(bins)  # a concrete JAX array closed over: not a tracer
  np.testing.assert_allclose(jax.jit(lambda q: metrics.classwise_ce(q, y, on_device))(p), eager)


# --------------------------------------------------------------------------
# Signatures and docstrings are literal
# --------------------------------------------------------------------------

PUBLIC = [
  scores.brier,
  scores.log_loss,
  scores.spherical,
  scores.classification_error,
  scores.confidence_loss,
  scores.decompose,
  metrics.conf_ece,
  metrics.conf_ce,
  metrics.conf_ce_corr,
  metrics.classwise_ce,
  metrics.classwise_ece,
  metrics.binary_ce,
  metrics.ecce,
  metrics.lin_ce,
  metrics.lin_ece,
  metrics.reliability_stats,
  utility.uc,
  utility.ecdf,
  jaxcal.checked,
]


@pytest.mark.parametrize("fn", PUBLIC, ids=[f.__name__ for f in PUBLIC])
def test_signatures_and_docstrings_are_literal(fn):
  params = inspect.signature(fn).parameters
  assert "args" not in params and "kwargs" not in params
  if fn not in (utility.ecdf, jaxcal.checked, utility.uc):  # uc: where= with isouc's core
    assert "where" in params and params["where"].default is None
  doc = inspect.getdoc(fn)
  assert "{BIN_ARGS}" not in doc and "Args:" in doc and "Returns:" in doc
  assert "SPEC" not in doc and "Reference" in doc and "Example" in doc
  assert inspect.getsource(fn).count(fn.__doc__.splitlines()[0].strip()) == 1  # written out


def test_score_signature_shows_real_parameters():
  assert list(inspect.signature(scores.brier).parameters) == [
    "probs",
    "labels",
    "per_sample",
    "from_logits",
    "where",
  ]


# ---------------------------------------------------------------- host arrays and fused checks


def _at(a: np.ndarray, offset: int) -> np.ndarray:
  """A copy of ``a`` whose buffer starts ``offset`` bytes past a 64-byte boundary."""
  buf = np.empty(a.nbytes + 128, np.uint8)
  start = (-buf.ctypes.data) % 64 + offset
  out = buf[start : start + a.nbytes].view(a.dtype).reshape(a.shape)
  out[...] = a
  return out


def _aligned(a: np.ndarray) -> np.ndarray:
  """A copy of ``a`` whose buffer starts on a 64-byte boundary."""
  return _at(a, 0)


@pytest.mark.parametrize("offset", [0, 16])
def test_device_never_aliases_the_callers_numpy_buffer(offset):
  # XLA:CPU adopts a 64-byte-aligned host buffer (jax.device_put does so
  # even with may_alias=False), and on a GPU device_put reads the buffer after
  # it returns: either way a later write by the caller would show through.
  a = _at(np.ones((64, 3), np.float32), offset)
  x = V._device(a)
  a[...] = 2.0
  assert float(x.sum()) == 64 * 3


def test_device_waits_for_its_copy_of_an_unaligned_array_under_1_mib():
  # device_put copies an unaligned buffer of 100 KiB to 1 MiB after it returns:
  # a write right after the call showed in the device array (up to 48 of 50 runs)
  for _ in range(20):
    a = _at(np.ones(100_000, np.float32), 16)  # 400 KB
    x = V._device(a)
    a[...] = 0.0
    assert float(x.sum()) == 100_000


_CHECKED_RACE = textwrap.dedent(
  """
  import threading, time
  import jax
  from jax._src import config as jax_config
  from jaxcal._src import validation as V

  define = jax_config.bool_state
  def slow(*args, **kwargs):  # widens the window between the test and the definition
    time.sleep(0.2)
    return define(*args, **kwargs)
  jax_config.bool_state = slow
  got = []
  threads = [threading.Thread(target=lambda: got.append(V._checking_state())) for _ in range(4)]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  assert len(got) == 4 and all(s is not None and s is got[0] for s in got), got
  print("one state")
  """
)


def test_checked_mode_state_is_created_once_by_concurrent_first_calls():
  # two threads' first checked calls both defined JAX's config state: the second's
  # "already defined" error selected the thread-local fallback for the whole process,
  # and a jit cached unchecked then ran unchecked in checked mode (0.175 for a ValueError)
  out = subprocess.run(
    [sys.executable, "-c", _CHECKED_RACE], capture_output=True, text=True, timeout=300
  )
  assert out.returncode == 0 and "one state" in out.stdout, out.stderr[-3000:]


@pytest.mark.parametrize("backend", ["cpu", "gpu"])
def test_device_of_a_host_array_closed_over_under_jit(backend, monkeypatch):
  # A jitted caller closing over numpy arrays (jit(lambda p: conf_ece(p, y, 15))
  # with y on the host) hands _device a host array under a trace: device_put
  # then gives a tracer, and the accelerators' wait for the host transfer must
  # not ask a tracer to block (it raised AttributeError on an H200). The
  # backend's name is what picks the branch, so each runs on any machine.
  a = np.arange(12, dtype=np.float32).reshape(4, 3)
  monkeypatch.setattr(jax, "default_backend", lambda: backend)
  got = jax.jit(lambda s: V._device(a) * s)(2.0)
  monkeypatch.undo()
  np.testing.assert_array_equal(np.asarray(got), 2 * a)
  y = np.array([0, 2, 1, 2], np.int32)
  monkeypatch.setattr(jax, "default_backend", lambda: backend)
  lowered = jax.jit(lambda p: V.check_predictions(p, y)).lower(
    jnp.asarray(a / a.sum(1, keepdims=True))
  )
  monkeypatch.undo()
  assert lowered.compile() is not None


def test_device_copies_strided_and_fortran_inputs_into_an_aligned_buffer():
  # the private copy is C-contiguous and 64-byte aligned whatever the caller's
  # layout, keeps the dtype, and holds the caller's values
  from jaxcal._src import validation as V

  base = np.arange(2 * 40 * 6, dtype=np.float32).reshape(80, 6)
  for a in (base[::2], np.asfortranarray(base), base[:, ::3], base.astype(np.float64)[1:]):
    c = V._aligned_copy(a)
    assert c.ctypes.data % 64 == 0 and c.flags.c_contiguous and c.dtype == a.dtype
    np.testing.assert_array_equal(c, a)
    np.testing.assert_array_equal(np.asarray(V._device(a)), a.astype(np.float32))
  assert V._aligned_copy(np.zeros((0, 3), np.float32)).shape == (0, 3)


@pytest.mark.skipif(
  jax.default_backend() != "cpu", reason="staging buffers serve XLA:CPU's adoption of host buffers"
)
def test_staging_buffers_are_reused_only_when_nothing_holds_them(monkeypatch):
  # numpy inputs of 1 MiB or more are staged in a private aligned buffer that
  # device_put adopts; the buffer is handed out again only once the JAX
  # array adopted from it is gone, so a held array never changes.
  import gc
  import time

  from jaxcal._src import validation as V

  monkeypatch.setattr(V, "_staging_pool", [])
  a = np.arange(512 * 1024, dtype=np.float32).reshape(1024, 512)  # 2 MiB
  held = [V._device(a + k) for k in range(4)]  # all held: four distinct buffers
  ptrs = {x.unsafe_buffer_pointer() for x in held}
  assert len(ptrs) == 4
  for k, x in enumerate(held):
    np.testing.assert_array_equal(np.asarray(x), a + k)
  assert len(V._staging_pool) == V.STAGING_BUFFERS  # the pool forgets the oldest

  del held, x
  for _ in range(200):  # XLA:CPU drops its reference to an adopted buffer asynchronously
    gc.collect()  # np.asarray of a JAX array leaves a reference cycle
    if V._pool_refs(len(V._staging_pool) - 1) == V._staging_free_refs:
      break
    time.sleep(0.01)
  pooled = {b.ctypes.data + (-b.ctypes.data) % V._ALIGN for b in V._staging_pool}
  again = V._device(a - 1)
  assert again.unsafe_buffer_pointer() in pooled  # a pooled buffer (still alive), reused
  np.testing.assert_array_equal(np.asarray(again), a - 1)

  # a view of the adopted array (np.asarray) keeps the buffer busy too
  view = np.asarray(again)
  del again
  gc.collect()
  time.sleep(0.05)
  other = [V._device(a * 3) for _ in range(3)]
  np.testing.assert_array_equal(view, a - 1)
  for x in other:
    np.testing.assert_array_equal(np.asarray(x), a * 3)


def test_staging_is_thread_safe_and_large_inputs_are_not_kept(monkeypatch):
  from concurrent.futures import ThreadPoolExecutor

  from jaxcal._src import validation as V

  monkeypatch.setattr(V, "_staging_pool", [])
  a = np.arange(300_000, dtype=np.float32)  # 1.2 MB

  def roundtrip(k):
    x = V._device(a + k)
    return bool(np.array_equal(np.asarray(x), a + k))

  with ThreadPoolExecutor(4) as ex:
    assert all(ex.map(roundtrip, range(40)))
  monkeypatch.setattr(V, "STAGING_MAX_BYTES", 1 << 20)
  monkeypatch.setattr(V, "_staging_pool", [])
  np.testing.assert_array_equal(np.asarray(V._device(a)), a)
  assert V._staging_pool == []  # above the size kept: a fresh buffer, not pooled
  monkeypatch.setattr(V, "STAGING_MAX_BYTES", 256 << 20)
  small = V._aligned_copy(np.ones((100, 10), np.float32))  # under 1 MiB: not pooled either
  assert small.ctypes.data % V._ALIGN == 0 and V._staging_pool == []


def test_deferred_checks_raise_and_leave_the_input_alone():
  # conf_ece dispatches its program before reading its value checks back
  # (check_predictions(defer=True) + run_checked); bad input still raises
  # the same message, and the caller's aligned array is read, never written.
  p = _aligned(np.full((50, 4), 0.25, np.float32))
  y = _aligned(np.arange(50, dtype=np.int32) % 4)
  before = p.copy()
  # top label 0 (ties go to the lowest class), correct for 13 of 50: |0.25 - 0.26|
  assert float(metrics.conf_ece(p, y)) == pytest.approx(0.01, abs=1e-6)
  np.testing.assert_array_equal(p, before)
  bad = p.copy()
  bad[7, 1] = 0.5
  with pytest.raises(ValueError, match="rows of probs must sum to 1.*row 7"):
    metrics.conf_ece(_aligned(bad), y)
  with pytest.raises(ValueError, match=r"labels must lie in \[0, 4\).*labels\[3\] = 9"):
    metrics.classwise_ece(p, _aligned(np.where(np.arange(50) == 3, 9, y).astype(np.int32)))
  with pytest.raises(ValueError, match="rows of probs must sum to 1"):
    scores.brier(_aligned(bad), y)


def test_deferred_checks_count_the_mask_for_quantile_bins():
  p = np.full((50, 4), 0.25, np.float32)
  y = np.arange(50) % 4
  where = np.arange(50) < 5
  with pytest.raises(ValueError, match="num_bins = 6 needs at least.*got n = 5 selected by where"):
    metrics.conf_ce(p, y, 6, where=where)
  assert np.isfinite(float(metrics.conf_ce(p, y, 5, where=where)))


def test_deferred_checks_on_closed_over_numpy_inside_jit():
  # Concrete data closed over in a user's jit is checked like traced data
  # (bad input: NaN) and never adopted in place: its later mutation changes
  # nothing.
  p = _aligned(np.full((50, 4), 0.25, np.float32))
  y = np.arange(50) % 4
  bad = p.copy()
  bad[0] = 0.5
  assert np.isnan(float(jax.jit(lambda: metrics.conf_ece(bad, y))()))
  f = jax.jit(lambda: metrics.conf_ece(p, y))
  want = float(f())
  assert np.isfinite(want)
  p[...] = np.eye(4, dtype=np.float32)[y]  # perfect predictions now
  assert float(f()) == want


# ----------------------------------------------------------------------------
# Borrowed host buffers: the public call reads a large numpy matrix in place
# ----------------------------------------------------------------------------

_BIG = (4099, 100)  # 1.6 MB of float32 (over the 1 MiB floor); 4099 rows: head, body and tail


def _big_probs(seed: int = 0, offset: int = 16) -> tuple[np.ndarray, np.ndarray]:
  rng = np.random.default_rng(seed)
  z = rng.standard_normal(_BIG).astype(np.float32) * 3
  p = np.exp(z - z.max(1, keepdims=True))
  p /= p.sum(1, keepdims=True)
  return _at(p.astype(np.float32), offset), rng.integers(0, _BIG[1], _BIG[0]).astype(np.int32)


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="host buffers are adopted on the CPU")
@pytest.mark.parametrize("offset", [0, 16, 48, 4])
def test_borrowed_rows_read_the_callers_buffer_in_place(offset):
  # numpy's large buffers start 16 bytes past a 64-byte boundary: the block
  # from the first aligned row k is a view of the caller's buffer, which XLA
  # adopts (same address); the other rows (those after the block, then the
  # k before it) are one copied block, so the blocks hold the rows rotated by
  # k (shift). With C = 100 floats an aligned row recurs every 4 rows. At
  # offset 4 no row is aligned (4 + 400 k is never a multiple of 64): the
  # blocks come from an aligned private copy, k = 0. All stay host arrays.
  p, _ = _big_probs(offset=offset)
  blocks = V._borrowed_rows(p)
  assert len(blocks.parts) == 2 and all(isinstance(b, np.ndarray) for b in blocks.parts)
  k = int(blocks.shift)
  assert blocks.shape == p.shape and blocks.dtype == p.dtype
  np.testing.assert_array_equal(np.concatenate(blocks.parts), np.roll(p, -k, axis=0))
  body, rest = blocks.parts
  assert body.ctypes.data % V._ALIGN == 0 and body.shape[0] % V._BORROW_ROWS == 0
  assert jax.device_put(body).unsafe_buffer_pointer() == body.ctypes.data  # adopted, not copied
  assert not np.shares_memory(rest, p)  # the few other rows are a copy
  if offset == 4:
    assert k == 0 and not np.shares_memory(body, p)
  else:
    assert k == {0: 0, 16: 3, 48: 1}[offset]
    assert body.ctypes.data == p.ctypes.data + k * p.strides[0] and body.base is not None


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="host buffers are adopted on the CPU")
def test_borrowed_rows_compile_once_whatever_the_address():
  # The blocks' shapes depend on n and the row size only (the rotation is a
  # program argument): views of one matrix at every alignment share the
  # programs. Cut where each buffer happened to be aligned, eight views of
  # one matrix compiled conf_ece 16 times instead of twice. The values are
  # those of the same rows as a JAX array, per sample in order.
  p, y = _big_probs(offset=16)
  views = [(_at(p, off), y) for off in (0, 16, 32, 48, 4, 8)]  # k = 0, 3, 2, 1; copies
  views += [(_at(np.concatenate([p[:5], p]), 16)[5:], y)]  # a row slice of a larger matrix
  for q, _ in views:
    assert V._borrowed_rows(q).parts[0].shape == V._borrowed_rows(p).parts[0].shape
  expect = {
    "conf_ece": metrics.conf_ece(jnp.asarray(p), jnp.asarray(y), 15),
    "ks_ce": metrics.ks_ce(jnp.asarray(p), jnp.asarray(y)),
    "brier": scores.brier(jnp.asarray(p), jnp.asarray(y), per_sample=True),
  }
  calls = {
    "conf_ece": lambda q, t: metrics.conf_ece(q, t, 15),
    "ks_ce": metrics.ks_ce,
    "brier": lambda q, t: scores.brier(q, t, per_sample=True),
  }
  for f in calls.values():
    f(*views[0])  # compiled for these shapes
  with no_new_programs():
    got = {name: [f(q, t) for q, t in views] for name, f in calls.items()}
  for name, outs in got.items():
    for i, out in enumerate(outs):
      np.testing.assert_allclose(out, expect[name], rtol=1e-6, atol=1e-9, err_msg=f"{name} {i}")


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="host buffers are lent on the CPU")
def test_borrowed_scores_and_their_labels_stay_on_the_host():
  # No device_put: the programs transfer the host blocks and the labels
  # with their arguments (int64 labels become an int32 host copy).
  p, y = _big_probs()
  for labels in (y, y.astype(np.int64)):
    d = V.check_predictions(p, labels, defer=True, borrow=True)
    assert d.borrowed and all(isinstance(b, np.ndarray) for b in d.scores.parts)
    # the labels cut and rotated as the blocks, on the host (the programs read them as they are)
    assert isinstance(d.labels, RowBlocks) and d.labels.shift == d.scores.shift
    assert all(isinstance(b, np.ndarray) and b.dtype == np.int32 for b in d.labels.parts)
    assert [b.shape[0] for b in d.labels.parts] == [b.shape[0] for b in d.scores.parts]
    np.testing.assert_array_equal(np.roll(np.concatenate(d.labels.parts), int(d.labels.shift)), y)
    out, count = V.run_checked(
      d, jax.jit(lambda x, t: by_rows(lambda b: b[:, 0], x)[t]), d.scores, 7
    )
    assert count == _BIG[0] and float(out) == p[7, 0]
  d = V.check_predictions(p, jnp.asarray(y), defer=True, borrow=True)
  assert d.borrowed and isinstance(d.labels, jax.Array)  # device labels stay on the device


@pytest.mark.parametrize(
  "make",
  [
    lambda p: p.astype(np.float16),  # not the compute dtype
    lambda p: np.asfortranarray(p),
    lambda p: p[:, ::2],  # not contiguous
    lambda p: np.ascontiguousarray(p[:1000])[:, ::2],  # small and strided
  ],
  ids=["float16", "fortran", "strided", "small strided"],
)
def test_borrowed_rows_decline_what_they_cannot_read_in_place(make):
  p, _ = _big_probs()
  assert V._borrowed_rows(make(p)) is None


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="host buffers are lent on the CPU")
@pytest.mark.parametrize("offset", [0, 16, 4])
def test_small_matrix_is_lent_whole_as_the_host_array(offset):
  # Under 1 MiB the programs take the caller's array as their argument
  # (their own transfer), aligned or not: no private copy, no device_put.
  p, y = _big_probs(offset=offset)
  small = _at(p[:1000], offset)
  blocks = V._borrowed_rows(small)
  assert isinstance(blocks, RowBlocks) and len(blocks.parts) == 1 and blocks.parts[0] is small
  before = small.copy()
  for fn in (metrics.conf_ece, scores.brier):
    want = _copied(fn, small, y[:1000])
    np.testing.assert_allclose(float(fn(small, y[:1000])), float(want), rtol=2e-6)
  np.testing.assert_array_equal(small, before)
  bad = small.copy()
  bad[7, 3] = np.nan
  with pytest.raises(ValueError, match=r"non-finite.*the first is row 7, column 3"):
    metrics.conf_ece(bad, y[:1000])


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="host buffers are lent on the CPU")
def test_a_host_array_goes_to_the_joint_program_once(monkeypatch):
  # The small host matrix and its labels are both the computation's arguments
  # and the checked inputs: the one program takes each once (each host
  # argument is a copy), and maps it to both uses.
  p, y = _big_probs()
  small, labels = np.ascontiguousarray(p[:1000]), y[:1000].astype(np.int32)
  seen = []
  once = V._with_checks_once
  monkeypatch.setattr(V, "_with_checks_once", lambda *a: seen.append(a[4:]) or once(*a))
  for fn in (metrics.conf_ece, scores.brier):
    want = _copied(fn, small, labels)
    seen.clear()
    np.testing.assert_allclose(float(fn(small, labels)), float(want), rtol=2e-6)
    assert len(seen) == 1
    hosts = [a for a in seen[0] if isinstance(a, np.ndarray) and a.ndim]
    assert len(hosts) == 2 and hosts[0] is small and hosts[1] is labels
  bad = labels.copy()
  bad[5] = 1000  # the checks still see the labels
  with pytest.raises(ValueError, match=r"labels must lie in \[0, 100\).*labels\[5\] = 1000"):
    scores.brier(small, bad)


def _copied(fn, p, y, **kw):
  """``fn`` on a private device copy (no borrowing) of the same values."""
  return fn(jnp.asarray(np.array(p)), jnp.asarray(y), **kw)


_BORROWING = {
  "conf_ece": (metrics.conf_ece, {}),
  "conf_ece quantile l2": (metrics.conf_ece, {"binning": "quantile", "norm": "l2"}),
  "conf_ce 5 bin counts": (metrics.conf_ce, {"num_bins": np.array([2, 5, 15, 40, 100])}),
  "conf_ce_corr": (metrics.conf_ce_corr, {"binning": "quantile"}),
  "brier": (scores.brier, {}),
  "brier per sample": (scores.brier, {"per_sample": True}),
  "log_loss": (scores.log_loss, {}),
  "ks_ce": (metrics.ks_ce, {}),
  "smooth_ece": (metrics.smooth_ece, {}),
  "smooth_ece 3 bandwidths": (metrics.smooth_ece, {"bandwidth": np.array([0.02, 0.1, 0.3])}),
}


@pytest.mark.parametrize("offset", [0, 16, 4])
@pytest.mark.parametrize("name", list(_BORROWING))
def test_borrowed_input_gives_the_value_of_a_copy(name, offset, monkeypatch):
  fn, kw = _BORROWING[name]
  p, y = _big_probs(offset=offset)
  before = p.copy()
  lent = []
  borrow = V._borrowed_rows
  monkeypatch.setattr(V, "_borrowed_rows", lambda a: lent.append(borrow(a)) or lent[-1])
  got = fn(p, y, **kw)
  on_cpu = jax.default_backend() == "cpu"
  # lent on the CPU: at offset 4 (no aligned row) from a private aligned copy
  assert [b is not None for b in lent] == [on_cpu]
  np.testing.assert_allclose(np.asarray(got), np.asarray(_copied(fn, p, y, **kw)), rtol=2e-6)
  np.testing.assert_array_equal(p, before)  # read, never written


@pytest.mark.parametrize("name", ["conf_ece", "brier per sample"])
def test_borrowed_scores_with_device_labels_give_the_value_of_a_copy(name):
  """Host scores read in place hold their rows rotated (shift k = 3 at offset 16); labels
  already on the device are rotated to match inside the programs (by_rows), the same way."""
  fn, kw = _BORROWING[name]
  p, y = _big_probs(offset=16)
  got = fn(p, jnp.asarray(y), **kw)
  np.testing.assert_allclose(np.asarray(got), np.asarray(_copied(fn, p, y, **kw)), rtol=2e-6)


def test_borrowed_logits_give_the_value_of_a_copy():
  p, y = _big_probs()
  z = _at(np.log(p) + 1.5, 16)  # logits whose softmax is p
  for fn in (metrics.conf_ece, scores.brier):
    got = fn(z, y, from_logits=True)
    want = _copied(fn, z, y, from_logits=True)
    np.testing.assert_allclose(float(got), float(want), rtol=2e-6)
    np.testing.assert_allclose(float(got), float(fn(p, y)), rtol=1e-4)


@pytest.mark.parametrize("row", [0, 2, 3, 1000, 4095, 4098])
def test_borrowed_bad_row_is_named_by_its_row_in_the_whole_matrix(row):
  # The blocks are checked separately; a problem is located on the whole
  # matrix, so the message gives the caller's row, not the block's.
  p, y = _big_probs()
  p[row, 1] += 0.5
  with pytest.raises(ValueError, match=rf"rows of probs must sum to 1.*the first is row {row},"):
    metrics.conf_ece(p, y)
  with pytest.raises(ValueError, match=rf"rows of probs must sum to 1.*the first is row {row},"):
    scores.brier(p, y)
  p[row, 1] = np.nan
  with pytest.raises(ValueError, match=rf"non-finite.*the first is row {row}, column 1"):
    metrics.conf_ce(p, y)


def test_borrowed_bad_labels_and_logits_raise():
  p, y = _big_probs()
  bad = y.copy()
  bad[4097] = 100
  with pytest.raises(ValueError, match=r"labels must lie in \[0, 100\).*labels\[4097\] = 100"):
    metrics.conf_ece(p, bad)
  z = _at(np.log(p), 16)
  z[5, 7] = np.inf
  with pytest.raises(ValueError, match="logits contains non-finite.*row 5, column 7"):
    scores.brier(z, y, from_logits=True)


def test_by_rows_on_blocks_equals_the_whole():
  from jaxcal._src.scores import brier_per_sample

  rng = np.random.default_rng(3)
  x = jnp.asarray(rng.dirichlet(np.ones(6), 11).astype(np.float32))
  y = jnp.asarray(rng.integers(0, 6, 11).astype(np.int32))
  x = x.at[4, :].set(1 / 6)  # a row of ties: the top label goes to class 0
  for cuts in [(3, 8), (1,), (10,)]:
    parts = tuple(jnp.split(x, cuts))
    blocks = RowBlocks(parts)
    assert blocks.shape == x.shape and blocks.ndim == 2
    for fn in (CE._top_label, brier_per_sample):
      for got, want in zip(jax.tree.leaves(by_rows(fn, blocks, y)), jax.tree.leaves(fn(x, y))):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    sm = by_rows(jax.nn.softmax, blocks, join=False)
    assert isinstance(sm, RowBlocks) and len(sm.parts) == len(parts)
    np.testing.assert_allclose(np.concatenate(sm.parts), jax.nn.softmax(x), rtol=1e-6)
    np.testing.assert_array_equal(
      join_rows(by_rows(lambda b: b[:, 0], blocks, join=False)), x[:, 0]
    )
  assert by_rows(brier_per_sample, x, y) is not None  # a plain array: the plain call
  # Checked.probs() of blocked logits: the softmax of each block, still blocks
  z = jnp.log(x)
  d = V.Checked(RowBlocks(tuple(jnp.split(z, (3, 8)))), y, None, None, None, 11, True)
  p = d.probs()
  assert isinstance(p, RowBlocks) and len(p.parts) == 3
  np.testing.assert_allclose(np.concatenate(p.parts), x, rtol=1e-6)
  assert d._replace(from_logits=False).probs() is d.scores


_FUSED = {
  "conf_ece logits, 3 bin counts": (
    metrics.conf_ece,
    {"num_bins": np.array([1, 7, 15]), "from_logits": True},
  ),
  "conf_ce_corr quantile where": (metrics.conf_ce_corr, {"where": np.arange(300) % 3 > 0}),
  "classwise_ece weighted": (metrics.classwise_ece, {"class_weights": np.arange(1.0, 6.0)}),
  "ecce": (metrics.ecce, {}),
  "brier per sample": (scores.brier, {"per_sample": True}),
  "ks_ce class-wise weighted where": (
    metrics.ks_ce,
    {"mode": "classwise", "class_weights": np.arange(1.0, 6.0), "where": np.arange(300) % 4 != 1},
  ),
  "mmce logits": (metrics.mmce, {"from_logits": True}),
  "smooth_ece class-wise where": (
    metrics.smooth_ece,
    {"mode": "classwise", "where": np.arange(300) % 5 != 3},
  ),
  "smooth_ece two bandwidths": (metrics.smooth_ece, {"bandwidth": np.array([0.05, 0.2])}),
  "ks_ce logits": (metrics.ks_ce, {"from_logits": True}),
  "ks_ce where": (metrics.ks_ce, {"where": np.arange(300) % 4 != 1}),
  "debiased_ce marginal where": (
    metrics.debiased_ce,
    {"mode": "marginal", "where": np.arange(300) % 3 > 0},
  ),
}


@pytest.mark.parametrize("name", list(_FUSED))
def test_small_eager_call_runs_its_checks_in_the_metric_program(name, monkeypatch):
  # Under SMALL_BYTES the eager call is one program (row stage, metric and
  # value checks) on the caller's host arrays; above it (SMALL_BYTES = 0
  # here) the row stage is a program of its own on device copies. Same
  # values, same errors, the caller's arrays untouched, the result computed
  # before the call returns.
  fn, kw = _FUSED[name]
  rng = np.random.default_rng(5)
  z = (rng.standard_normal((300, 5)) * 2).astype(np.float32)
  p = (np.exp(z) / np.exp(z).sum(1, keepdims=True)).astype(np.float32)
  x = z if kw.get("from_logits") else p
  y = rng.integers(0, 5, 300)  # int64: narrowed on the host
  before = x.copy()
  d = V.check_predictions(x, y, defer=True, borrow=True)
  assert V.small(d) and isinstance(d.labels, np.ndarray)
  got = fn(x, y, **kw)
  assert got.is_ready()
  np.testing.assert_array_equal(x, before)
  monkeypatch.setattr(V, "SMALL_BYTES", 0)
  assert not V.small(V.check_predictions(x, y, defer=True))
  np.testing.assert_allclose(np.asarray(got), np.asarray(fn(x, y, **kw)), rtol=1e-6, atol=1e-9)
  np.testing.assert_allclose(
    np.asarray(got), np.asarray(jax.jit(lambda a, b: fn(a, b, **kw))(x, y)), rtol=2e-6
  )
  bad = x.copy()
  bad[11, 2] = np.nan
  msg = r"non-finite.*the first is row 11, column 2"
  for size in (0, 1 << 20):  # staged, then one program
    monkeypatch.setattr(V, "SMALL_BYTES", size)
    with pytest.raises(ValueError, match=msg):
      fn(bad, y, **kw)
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 5\).*labels\[4\] = 7"):
      fn(x, np.where(np.arange(300) == 4, 7, y), **kw)


@pytest.mark.parametrize("name", list(_FUSED))
def test_eager_calls_never_run_the_check_as_a_program_of_its_own(name, monkeypatch):
  # An eager call hands its pending checks to run_checked, which runs them in
  # the metric's program; the separate check program (_ok_jit) would cost a
  # dispatch and a wait of its own. Bad input still raises the eager message.
  fn, kw = _FUSED[name]
  p, y = _data(300, 5, seed=6)
  x = np.log(p) if kw.get("from_logits") else p
  want = np.asarray(fn(x, y, **kw))

  def separate(*args):
    raise AssertionError("the value checks ran as a program of their own")

  monkeypatch.setattr(V, "_ok_jit", separate)
  np.testing.assert_array_equal(np.asarray(fn(x, y, **kw)), want)
  bad = x.copy()
  bad[7, 1] = np.nan
  with pytest.raises(ValueError, match=r"non-finite.*the first is row 7, column 1"):
    fn(bad, y, **kw)


def test_run_checked_waits_for_a_computation_on_borrowed_scores():
  # Without the wait a slow program would still be running (and reading the
  # caller's buffer) when run_checked returns.
  x = jnp.ones((512, 512), jnp.float32)
  slow = jax.jit(lambda a: jax.lax.fori_loop(0, 40, lambda i, b: jnp.tanh(b @ a), a))
  slow(x).block_until_ready()  # compiled
  blocks = RowBlocks((x,))  # scores in blocks: a borrowed host buffer
  d = V.Checked(blocks, jnp.zeros(512, jnp.int32), None, None, None, 512, False)
  assert d.borrowed
  out, count = V.run_checked(d, slow, x)
  assert out.is_ready() and count == 512
  lent = d._replace(scores=x)
  out, _ = V.run_checked(lent, slow, x)
  assert not out.is_ready()  # the check can fail: a plain call returns at once


def test_non_integral_labels_get_one_message_on_the_host_and_on_the_device():
  # numpy float labels are checked on the host before the cast, JAX ones on the
  # device and in checked mode: the same words (the host said "are not valid")
  p, y = _data(40, 4, seed=2)
  yf = y.astype(np.float32)
  yf[23] = 1.5
  want = "labels must be integers; 1 entries are not, the first is labels[23] = 1.5"
  for labels in (yf, yf.astype(np.float64), jnp.asarray(yf)):
    with pytest.raises(ValueError) as e:
      metrics.conf_ece(p, labels)
    assert str(e.value) == want
  with pytest.raises(ValueError) as e:
    jaxcal.checked(jax.jit(metrics.conf_ece))(p, jnp.asarray(yf))
  assert str(e.value) == want


_NOT_HELD = (
  "the first is labels[23] = -2147483648 or a value int32 cannot hold "
  "(non-integral, non-finite or beyond int32)"
)


def test_host_labels_left_to_the_device_check_are_reported_by_their_value():
  # with a JAX where the host cannot tell selected rows, so it leaves bad numpy
  # labels to the device check: an int32-held value is reported as it is (it
  # was "= -1"), one int32 cannot hold by what it is; masked-out rows pass
  p, y = _data(40, 4, seed=3)
  mask = np.ones(40, bool)
  mask[5] = False
  cases = [
    (np.int64, 12, "labels must lie in [0, 4); 1 entries do not, the first is labels[23] = 12"),
    (np.float64, 12.0, "labels must lie in [0, 4); 1 entries do not, the first is labels[23] = 12"),
    (np.int64, 2**40, _NOT_HELD),
    (np.float64, 1.5, _NOT_HELD),
    (np.float32, np.nan, _NOT_HELD),
    # an int32 label of -2**31 is the sentinel's value itself: named among the two
    (np.int32, -(2**31), _NOT_HELD),
  ]
  for dtype, value, want in cases:
    yy = y.astype(dtype)
    yy[23] = value
    yy[5] = value  # masked out: never reported
    with pytest.raises(ValueError) as e:
      metrics.conf_ece(p, yy, where=jnp.asarray(mask))
    assert want in str(e.value), (dtype, value, str(e.value))
    ok = yy.copy()
    ok[23] = y[23]
    assert np.isfinite(metrics.conf_ece(p, ok, where=jnp.asarray(mask)))
  # a process's shard keeps what int32 holds too; JAX float labels as well
  for labels in (y.astype(np.int64), jnp.asarray(y, jnp.float32)):
    bad = labels.at[23].set(7) if isinstance(labels, jax.Array) else labels.copy()
    if not isinstance(labels, jax.Array):
      bad[23] = 7
    assert int(V.process_shard(p, bad)[1][23]) == 7
  for value in (1.5, 2.0**31, np.inf):  # 2**31 would wrap to -2**31 in the cast
    half = jnp.asarray(y, jnp.float32).at[23].set(value)
    assert int(V.process_shard(p, half)[1][23]) == V._NOT_A_LABEL, value
    host = y.astype(np.float32)  # the same rule on the host, without a cast of 2**31
    host[23] = value
    with warnings.catch_warnings():
      warnings.simplefilter("error")
      assert int(V.process_shard(p, host)[1][23]) == V._NOT_A_LABEL, value


def test_rows_at_the_tolerance_get_one_verdict_in_every_mode():
  """The fast check and the search for the offending row add a row in one order (a row of
  ``1 + 9.9998e-4`` in float64 came out above the tolerance as the narrow rows' tree adds and
  below it as ``jnp.sum`` adds one row: eager calls raised ``AssertionError: a value check
  failed but no problem was found``, ``checked`` returned NaN without raising, and a row
  of ``1 + 1.0000e-3`` passed eagerly but failed in ``checked``; found by a review helper).
  Rows scaled to just around ``1 + tol`` at C = 5, 32 (the tree) and 33, 100 (one
  reduction): eager, ``checked`` and ``checked(jit)`` accept or refuse each alike."""
  a = np.array([[0.05124577507, 0.12705641985, 0.72900533676, 0.07401771843, 0.01967473142]])
  a = a.astype(np.float32)
  with pytest.raises(ValueError, match=r"row 0, which sums to 1\.001\. "):
    scores.brier(a, np.array([0]))
  rng = np.random.default_rng(0)
  for c in (5, 32, 33, 100):
    for n in (1, 3):
      for _ in range(8):
        p = rng.dirichlet(np.ones(c), n)
        p[n - 1] *= 1 + 1e-3 + rng.uniform(-3e-7, 3e-7)
        p, y = p.astype(np.float32), rng.integers(0, c, n)
        verdicts = []
        for f in (
          scores.brier,
          jaxcal.checked(scores.brier),
          jaxcal.checked(jax.jit(scores.brier)),
        ):
          try:
            verdicts.append(np.isfinite(float(f(p, y))))
          except ValueError as e:
            assert "must sum to 1" in str(e)
            verdicts.append("refused")
        assert len(set(verdicts)) == 1 and verdicts[0] in (True, "refused"), (c, n, verdicts)


def test_public_calls_run_under_strict_dtype_promotion():
  # a user's jax.numpy_dtype_promotion("strict") raised TypePromotionError from
  # inside the library: int32 + bool (lce, nadaraya_watson with a mask), float32
  # - int32 (bootstrap quantiles), bool * float32 (patching), float * int32 (the
  # training loop), and promote_types(float64, float32) for any Python float option
  from jaxcal import bootstrap, recalibrate
  from jaxcal.train import train_classifier  # noqa: F401  (imported: the loop's module)

  rng = np.random.default_rng(0)
  p = jax.nn.softmax(jnp.asarray(rng.normal(size=(300, 4)), jnp.float32))
  y = jnp.asarray(rng.integers(0, 4, 300), jnp.int32)
  f = jnp.asarray(rng.normal(size=(300, 3)), jnp.float32)
  mask = jnp.arange(300) % 3 > 0
  calls = {
    "smooth_ece": lambda: metrics.smooth_ece(p, y, bandwidth=0.05),
    "dcg": lambda: utility.dcg(0.5, 4).params,
    "linear": lambda: utility.linear([1.0, 0.0, 0.0, 0.0]).params,
    "lce": lambda: metrics.lce(p, y, f, min_bin_size=5),
    "nadaraya_watson": lambda: metrics.nadaraya_watson(f, p, 2.0, mask=mask),
    "interval": lambda: bootstrap.interval(
      jnp.float32(0.5), jnp.linspace(0, 1, 101, dtype=jnp.float32)
    ),
    "bootstrap": lambda: (
      bootstrap.bootstrap(
        jax.random.key(0), jnp.mean, jnp.arange(100.0, dtype=jnp.float32), num_resamples=8
      ).lo
    ),
    "fit_patching": lambda: recalibrate.fit_patching(
      jnp.log(p), y, max_steps=2, progress=False
    ).apply(jnp.log(p)),
  }
  want = {k: np.asarray(c()) for k, c in calls.items()}
  for k, c in calls.items():
    with jax.numpy_dtype_promotion("strict"):
      got = np.asarray(c())
    np.testing.assert_array_equal(got, want[k], err_msg=k)


def test_masked_out_entries_of_unit_interval_inputs_are_not_checked():
  """Values checked to lie in [0, 1] (binary probabilities, check_values with bounds) are
  checked where selected only: 1.5 or NaN in a masked-out entry is ignored, as in a
  masked-out row of a probability matrix, not refused (or an internal error)."""
  p = np.array([0.2, 1.5, 0.7, np.nan, 0.4, 0.9])
  y = np.array([0, 1, 1, 0, 1, 1])
  mask = np.array([True, False, True, False, True, True])
  np.testing.assert_allclose(
    metrics.binary_ce(p, y, 2, where=mask), metrics.binary_ce(p[mask], y[mask], 2), atol=1e-7
  )
  x = V.check_values(
    np.array([0.5, 7.0, np.nan]), "x", bounds=(0.0, 1.0), where=jnp.array([True, False, False])
  )
  np.testing.assert_array_equal(np.isnan(x), [False, False, True])  # returned as given


def test_padded_union_rows_are_numbered_among_the_real_rows():
  """check_predictions(..., padding=True) (every process's shard assembled, each padded at its
  end) names a bad row by its row in the union: the number of real rows before it."""
  p = np.array([[0.7, 0.3], [0.5, 0.5], [0.2, 0.8], [0.6, 0.6], [0.5, 0.5]], np.float32)
  y = np.array([0, 0, 1, 1, 0])
  mask = np.array([True, False, True, True, False])  # rows 1 and 4: padding
  with pytest.raises(
    ValueError, match=r"1 row\(s\) do not, the first is row 2, which sums to 1\.2"
  ):
    V.check_predictions(p, y, where=mask, padding=True)
  labels = jnp.array([0, 0, 5, 1])  # assembled across processes: device labels
  with pytest.raises(
    ValueError, match=r"must lie in \[0, 2\); 1 entries do not, .* labels\[1\] = 5"
  ):
    V.check_predictions(P[[0, 1, 2, 1]], labels, where=mask[1:], padding=True)


def test_row_wise_fold_poisons_a_row_outside_the_unit_interval_that_sums_to_one():
  """check_probs(rows=True) (a recalibrator's apply under jit) makes NaN exactly the rows that
  fail the check: a row summing to one with entries 1.2 and -0.2 is bad, its neighbours kept."""
  x = np.array([[1.2, -0.2], [0.3, 0.7], [0.5, 0.6], [-4e-4, 1.0004]], np.float32)
  out = np.asarray(jax.jit(lambda p: V.check_probs(p, rows=True))(x))
  np.testing.assert_array_equal(np.isnan(out).all(axis=1), [True, False, True, False])
  np.testing.assert_array_equal(out[[1, 3]], x[[1, 3]])  # within the tolerance: kept as given


def test_host_integer_checks_accept_the_int32_range_ends():
  """int64 values JAX stores as int32 are refused outside [-2**31, 2**31 - 1] and accepted at
  both ends (the ends themselves are int32 values, not wrapped)."""
  ends = np.array([-(2**31), 2**31 - 1], np.int64)
  np.testing.assert_array_equal(V.exact_on_device(ends, "x"), ends)
  for bad in (-(2**31) - 1, 2**31):
    with pytest.raises(ValueError, match=r"x holds int64 values that int32 cannot hold"):
      V.exact_on_device(np.array([0, bad], np.int64), "x")


def test_non_finite_float_labels_are_refused_without_a_class_count():
  """check_labels(..., num_classes=None) has no range to catch inf: the integrality check
  must refuse it (inf == round(inf))."""
  with pytest.raises(
    ValueError, match=r"labels must be integers; 1 entries are not.*labels\[1\] = inf"
  ):
    V.check_labels(jnp.array([0.0, jnp.inf, 1.0]), 3, None)
  np.testing.assert_array_equal(V.check_labels(jnp.array([0.0, 7.0]), 2, None), [0, 7])


def _kernel(s, w):
  return jnp.exp(-s / w)


def test_argument_text_is_the_same_in_every_process_for_equal_arguments():
  """What ``same_arguments`` compares across processes: a ``repr`` address (a partial
  kernel's) and a set constant's order (string hashing) differ between processes and
  made equal kernels differ; closures with other constants compared equal (found by a
  review helper)."""
  import functools

  from jaxcal._src.validation import _argument_text

  def of(w):
    return lambda s: jnp.exp(-s / w)

  assert _argument_text(of(1.0)) == _argument_text(of(1.0))
  assert _argument_text(of(1.0)) != _argument_text(of(2.0))
  part = functools.partial(_kernel, w=1.0)
  assert "0x" not in _argument_text(part)
  assert _argument_text(part) != _argument_text(functools.partial(_kernel, w=2.0))
  assert _argument_text(np.arange(3.0)) != _argument_text(np.arange(3.0) + 1)
  code = textwrap.dedent(
    """
    import functools
    from jaxcal._src.validation import _argument_text
    def k(s, w):
      return s in {"alpha", "beta", "gamma", "delta"}
    print(_argument_text(functools.partial(k, w=1.0)), _argument_text(lambda s: s in {"a", "b", "c"}))
    """
  )
  seen = {
    subprocess.run(
      [sys.executable, "-c", code],
      env={**os.environ, "PYTHONHASHSEED": str(seed), "JAX_PLATFORMS": "cpu"},
      capture_output=True,
      text=True,
      check=True,
    ).stdout
    for seed in (1, 2, 3)
  }
  assert len(seen) == 1, seen


def test_row_sum_message_names_bfloat16_cast_up():
  """bfloat16 softmax rows cast to float32 sum to one within 3e-3, outside float32's 1e-3:
  the refusal says to pass them as bfloat16 (which accepts them)."""
  z = np.random.default_rng(0).normal(size=(2000, 10)) * 3
  p16 = jax.nn.softmax(jnp.asarray(z, jnp.float32)).astype(jnp.bfloat16)
  y = np.zeros(2000, np.int32)
  assert np.isfinite(float(scores.brier(p16, y)))  # accepted as bfloat16
  with pytest.raises(ValueError, match=r"must sum to 1 .*pass them as bfloat16"):
    scores.brier(np.asarray(p16.astype(jnp.float32)), y)


def test_invalid_input_under_grad_gives_nan_gradients():
  """Under jax.grad the eager check cannot run; fold made the value NaN with a select, whose
  derivative sent a zero cotangent: an all-zero gradient for a label out of range or rows off
  the simplex, no error (a grad-review finding). Valid input keeps its finite gradient."""
  from jaxcal import metrics

  z = jax.random.normal(jax.random.key(0), (8, 3))
  bad = jnp.array([0, 1, 2, 3, 0, 1, 2, 0])  # label 3 with C = 3
  good = jnp.array([0, 1, 2, 2, 0, 1, 2, 0])
  for f in (
    lambda t, y: scores.brier(t, y, from_logits=True),
    lambda t, y: metrics.conf_ece(t, y, from_logits=True),
    lambda t, y: scores.log_loss(jax.nn.softmax(t) * 1.5, y),  # rows off the simplex
  ):
    # (the bad row itself is read through a select: 0 there, NaN everywhere else)
    assert np.isnan(np.asarray(jax.grad(f)(z, bad))).sum() >= 7 * 3
  g = jax.grad(lambda t: scores.brier(t, good, from_logits=True))(z)
  assert np.isfinite(np.asarray(g)).all() and np.abs(np.asarray(g)).max() > 0
