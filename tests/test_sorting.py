"""The sorts in jaxcal._src.sorting agree with numpy, on every strategy.

CI has no accelerator, so the GPU/TPU branches of ``platform_dependent`` are
called directly here: every strategy must give the same answer on CPU.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcal import metrics
from jaxcal._src import sorting as S
from jaxcal._src.utility.uc import uc_from_scores


def _scores(rng, shape, dtype=np.float32):
  x = rng.standard_normal(shape).astype(dtype)
  x.reshape(-1)[::5] = np.round(x.reshape(-1)[::5], 1)  # many ties
  x.reshape(-1)[::11] = 0.0
  x.reshape(-1)[::13] = -0.0  # -0.0 ties with +0.0
  return x


def _np_stable(x):
  return np.argsort(np.where(x == 0, 0, x), axis=-1, kind="stable")


@pytest.mark.parametrize("shape", [(2,), (7,), (1000,), (3, 5000), (2, 3, 70_000)])
def test_argsort_strategies_equal_numpy_stable(shape):
  x = _scores(np.random.default_rng(0), shape)
  want = _np_stable(x)
  key = S.float_to_key(jnp.asarray(x))
  want_keys = np.take_along_axis(np.asarray(key), want, axis=-1)
  flat = key.reshape((-1, shape[-1]))
  for name, (skey, perm) in {
    "packed": S._packed_argsort(flat),
    "packed_groups": S._packed_argsort(flat, 2) if flat.shape[0] >= 2 else S._packed_argsort(flat),
    "radix": S._radix_argsort(flat),
    "pair": S._pair_argsort(flat),
    "public": jax.jit(S.argsort_keys)(key),
  }.items():
    np.testing.assert_array_equal(np.asarray(perm).reshape(shape), want, err_msg=name)
    np.testing.assert_array_equal(np.asarray(skey).reshape(shape), want_keys, err_msg=name)
  np.testing.assert_array_equal(np.asarray(jax.jit(S.stable_argsort)(jnp.asarray(x))), want)


@pytest.mark.parametrize("kind", ["probabilities", "wide"])
def test_radix_two_and_three_pass_paths(kind):
  """n > 2^16: 2 passes when the keys span little (scores in [0, 1]), else 3."""
  rng = np.random.default_rng(4)
  x = rng.random((2, 70_000)).astype(np.float32)
  x[:, ::3] = np.round(x[:, ::3], 2)
  if kind == "wide":
    x[0, ::17] = -1e30
    x[1, ::19] = 3e38
  _, perm = jax.jit(S._radix_argsort)(S.float_to_key(jnp.asarray(x)))
  np.testing.assert_array_equal(np.asarray(perm), _np_stable(x))


def test_radix_two_pass_bound_is_exclusive():
  """n = 70,000 (17 index bits, 15-bit digits): two passes hold key spans up to 2^30 - 1."""
  rng = np.random.default_rng(5)
  for span in (2**30 - 1, 2**30):  # the last that two passes hold, the first that they do not
    key = rng.integers(0, span, 70_000, dtype=np.uint32)
    key[[10, 20_000]] = [span, 0]  # min 0 and max span, the max early (it must sort last)
    _, perm = jax.jit(S._radix_argsort)(jnp.asarray(key[None]))
    np.testing.assert_array_equal(
      np.asarray(perm)[0], np.argsort(key, kind="stable"), err_msg=str(span)
    )


def test_vmap_is_one_call_on_the_stacked_rows():
  """Under vmap the public argsort is one call on the stacked rows: no batched choice.

  The only ``cond`` is the backend's (platform_dependent); the CPU branch is
  one packed sort per row group, whatever the keys' span.
  """
  x = jnp.zeros((3, 70_000), jnp.float32)
  one = str(jax.make_jaxpr(S.stable_argsort)(x[0]))
  batched = str(jax.make_jaxpr(jax.vmap(S.stable_argsort))(x))
  assert one.count("cond[") == batched.count("cond[") == 1
  groups = S.cpu_groups(3, 70_000)  # CPU branch: one sort per group; the other: one pair sort
  assert (one.count(" sort["), batched.count(" sort[")) == (2, groups + 1)
  rows = np.random.default_rng(5).random((3, 70_000)).astype(np.float32)
  rows[1] *= -1e30  # one row with a wide span (the radix scheme's 3-pass case)
  rows[2, ::7] = rows[2, 3]  # and one with a large tie group
  got = np.asarray(jax.jit(jax.vmap(S.stable_argsort))(jnp.asarray(rows)))
  np.testing.assert_array_equal(got, _np_stable(rows))


@pytest.mark.parametrize("dtype", [jnp.uint16, jnp.uint32])
def test_packed_argsort_extremes(dtype):
  """Packed words at the ends of the key range, all keys tied, n = 2, and the 32-bit limit."""
  top = int(jnp.iinfo(dtype).max)
  cases = [
    np.full((2, 1000), top),
    np.zeros((1, 1000)),
    np.array([[top, 0], [0, top], [5, 5]]),
    np.random.default_rng(8).choice([0, 1, top - 1, top], (3, 4097)),
  ]
  for keys in cases:
    key = jnp.asarray(keys.astype(np.uint64).astype(dtype))
    skey, perm = jax.jit(S._packed_argsort)(key)
    assert skey.dtype == dtype and perm.dtype == jnp.int32
    want = np.argsort(np.asarray(key), axis=-1, kind="stable")
    np.testing.assert_array_equal(np.asarray(perm), want)
    np.testing.assert_array_equal(np.asarray(skey), np.take_along_axis(np.asarray(key), want, -1))
  with pytest.raises(ValueError, match="at most 32 bits"):
    with jax.enable_x64(True):
      S._packed_argsort(jnp.zeros((1, 4), jnp.uint64))


def test_packed_argsort_leaves_the_global_x64_flag_alone():
  """The uint64 words are traced under a scoped x64 setting; nothing leaks out."""
  assert not jax.config.jax_enable_x64
  jax.jit(S.argsort_keys)(jnp.arange(5, dtype=jnp.uint32)[::-1])
  assert not jax.config.jax_enable_x64
  assert jnp.zeros(2).dtype == jnp.float32 and jnp.arange(2).dtype == jnp.int32


@pytest.mark.parametrize("wide", [False, True])
def test_row_groups_equal_one_group(wide):
  """Groups of rows (one per core) give the one-group result on both pass branches."""
  x = np.abs(_scores(np.random.default_rng(6), (5, 70_000)))
  x /= x.max()  # scores in [0, 1]: the 2-pass branch
  if wide:
    x[2, ::13] = -1e30  # one wide row: every group takes the 3-pass branch
  key = S.float_to_key(jnp.asarray(x))
  one = S._radix_argsort(key)
  np.testing.assert_array_equal(np.asarray(one[1]), _np_stable(x))
  for groups in (2, 3, 5):
    split = S._radix_argsort(key, groups)
    for a, b in zip(one, split):
      np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  assert S.cpu_groups(1, 10**6) == 1 and S.cpu_groups(100, 10) == 1
  assert 1 <= S.cpu_groups(100, 10**5) <= S.MAX_CPU_GROUPS


def test_row_groups_are_independent_sorts(monkeypatch):
  """Groups of rows are separate sort operations, which XLA:CPU may run concurrently."""
  monkeypatch.setattr(S, "cpu_groups", lambda rows, n: 2)
  key = jnp.zeros((4, 70_000), jnp.uint32)
  jaxpr = str(jax.make_jaxpr(lambda k: S._argsort_rows(k, True))(key))
  assert jaxpr.count("cond[") == 1  # the backend choice (platform_dependent) only
  # CPU branch: one packed sort per group; the other backends' branch: one pair sort
  assert jaxpr.count(" sort[") == 2 + 1
  x = np.random.default_rng(9).random((4, 70_000)).astype(np.float32)
  got = jax.jit(lambda k: S._argsort_rows(k, True))(S.float_to_key(jnp.asarray(x)))
  np.testing.assert_array_equal(np.asarray(got[1]), _np_stable(x))


def test_key_roundtrip_and_order_every_width():
  rng = np.random.default_rng(1)
  for dtype in (np.float16, np.float32):
    x = _scores(rng, (4000,), dtype)
    key = S.float_to_key(jnp.asarray(x))
    assert key.dtype.itemsize == x.dtype.itemsize
    np.testing.assert_array_equal(np.asarray(S.key_to_float(key)), np.where(x == 0, 0, x))
    order = np.argsort(x, kind="stable")
    assert np.all(np.diff(np.asarray(key)[order].astype(np.int64)) >= 0)
    perm = np.asarray(S.argsort_keys(key)[1])
    np.testing.assert_array_equal(perm, _np_stable(x))
  with jax.enable_x64(True):
    x = _scores(rng, (4000,), np.float64)
    key = S.float_to_key(jnp.asarray(x))
    assert key.dtype == jnp.uint64
    np.testing.assert_array_equal(np.asarray(S.key_to_float(key)), np.where(x == 0, 0, x))
    np.testing.assert_array_equal(np.asarray(S.argsort_keys(key)[1]), _np_stable(x))
    np.testing.assert_array_equal(np.asarray(S.stable_argsort(jnp.asarray(x))), _np_stable(x))


def test_subnormals_keep_their_order_and_zeros_tie():
  # XLA:CPU flushes subnormals in float compares: x == 0 held for 1e-40, whose key
  # then tied with 0 (quantile bins, isotonic pools and classwise_ce went wrong)
  for dtype, tiny in ((np.float16, 6e-8), (np.float32, 1e-40)):
    x = np.array([tiny, 0.0, -0.0, -tiny, 0.5, 2 * tiny, -0.5, tiny], dtype)
    assert x[0] != 0  # a subnormal of that dtype
    np.testing.assert_array_equal(np.asarray(S.stable_argsort(jnp.asarray(x))), _np_stable(x))
    key = np.asarray(S.float_to_key(jnp.asarray(x)))
    assert key[1] == key[2] and key[0] == key[7] and key[3] < key[1] < key[0] < key[5]
  # one sample at 1e-40 with label 0 below two at 0 with label 1: the float64 value
  p = np.array([[1e-40, 1.0], [0.0, 1.0], [0.0, 1.0], [0.5, 0.5]], np.float32)
  y = np.array([0, 1, 1, 1])
  assert float(metrics.classwise_ce(p, y, 2)) == pytest.approx(0.015625, abs=1e-9)


def test_int_key_order_and_range():
  x = _scores(np.random.default_rng(7), (5000,)) / 4  # |x| < 2
  k = np.asarray(S.float_to_int_key(jnp.asarray(x)))
  assert k.dtype == np.int32 and np.abs(k).max() < 2**30
  assert np.all(np.diff(k[np.argsort(x, kind="stable")].astype(np.int64)) >= 0)
  assert np.all(k[x == 0] == 0)
  np.testing.assert_array_equal(
    np.asarray(S.int_key_to_float(jnp.asarray(k))), np.where(x == 0, 0, x)
  )


@pytest.mark.parametrize("impl", ["gathered", "paired", "packed", "public"])
def test_sort_with_payload_groups(impl):
  rng = np.random.default_rng(2)
  x = _scores(rng, (3, 3000))
  pay = rng.standard_normal(x.shape).astype(np.float32)
  f = {
    "gathered": S._gathered_sort,
    "paired": S._paired_sort,
    "packed": S._packed_sort,
    "public": S.sort_with_payload,
  }[impl]
  xs, ps = map(np.asarray, jax.jit(f)(jnp.asarray(x), jnp.asarray(pay)))
  order = _np_stable(x)
  np.testing.assert_array_equal(xs, np.take_along_axis(np.where(x == 0, 0, x), order, -1))
  # the payload is a permutation within each group of tied x (order there is free)
  for r in range(x.shape[0]):
    for v in np.unique(xs[r]):
      got = np.sort(ps[r][xs[r] == v])
      want = np.sort(pay[r][np.where(x[r] == 0, 0, x[r]) == v])
      np.testing.assert_array_equal(got, want)


def test_gradients_flow_through_the_payload():
  """The integer argsort is outside autodiff; payloads gathered by it are differentiable."""
  x = jnp.array([0.3, 0.1, 0.2])

  def loss(p):
    _, ps = S.sort_with_payload(x, p)
    return jnp.sum(ps * jnp.arange(3.0))

  np.testing.assert_allclose(np.asarray(jax.grad(loss)(jnp.ones(3))), [2.0, 0.0, 1.0])
  grad_x = jax.grad(lambda v: jnp.sum(v[S.stable_argsort(v)] * jnp.arange(3.0)))(x)
  np.testing.assert_allclose(np.asarray(grad_x), [2.0, 0.0, 1.0])


def test_packed_payload_tangents_follow_the_primal_order_among_ties():
  """The packed CPU sort orders tied keys by the payload's bits; its JVP permutes the
  tangent the same way (a tangent equal to the payload comes back equal to the sorted
  payload, ties included), under jit and vmap, and float16 payloads take the same path."""
  rng = np.random.default_rng(5)
  x = jnp.asarray(rng.integers(0, 4, (3, 500)).astype(np.float32) / 4)  # heavy ties
  pay = jnp.asarray(rng.standard_normal((3, 500)).astype(np.float32))
  for dtype in (jnp.float32, jnp.float16):
    p = pay.astype(dtype)

    def f(p):
      return S._packed_sort(x, p)[1]

    out, tangent = jax.jit(lambda p: jax.jvp(f, (p,), (p,)))(p)
    np.testing.assert_array_equal(np.asarray(tangent), np.asarray(out))
    rows = jax.vmap(lambda xr, pr: S._packed_sort(xr, pr)[1])(x, p)
    np.testing.assert_array_equal(np.asarray(rows), np.asarray(out))
    # ties are ordered by the payload's bits, not by position
    xs = np.asarray(S._packed_sort(x, p)[0])
    assert np.all(np.diff(xs, axis=-1) >= 0)
    bits = np.asarray(out).view(np.uint16 if dtype == jnp.float16 else np.uint32)
    tied = xs[:, 1:] == xs[:, :-1]
    assert np.all(bits[:, 1:][tied] >= bits[:, :-1][tied])
  g = jax.grad(lambda p: jnp.sum(S._packed_sort(x, p)[1] * jnp.arange(500.0)[None]))(pay)
  # d loss / d pay_i is the sorted position of pay_i (the payload values are distinct)
  sorted_pay = np.asarray(S._packed_sort(x, pay)[1])
  for r in range(3):
    where = {float(v): i for i, v in enumerate(sorted_pay[r])}
    want = np.array([where[float(v)] for v in np.asarray(pay)[r]], np.float32)
    np.testing.assert_array_equal(np.asarray(g)[r], want)


def test_sort_with_payload_of_mixed_widths():
  """float64 keys with a float32 payload (and the reverse) sort by the whole key: the
  64-bit key cannot share a word with the payload, so the CPU argsorts and gathers."""
  rng = np.random.default_rng(6)
  with jax.enable_x64(True):
    # keys that differ only in their low 32 bits: a truncated key would tie them
    x = 1.0 + np.arange(200)[::-1] * 2.0**-50
    pay = rng.standard_normal(200)
    for xd, pd in ((np.float64, np.float32), (np.float32, np.float64)):
      xs, ps = jax.jit(S.sort_with_payload)(jnp.asarray(x, xd), jnp.asarray(pay, pd))
      order = np.argsort(x.astype(xd), kind="stable")
      np.testing.assert_array_equal(np.asarray(xs), x.astype(xd)[order])
      if xd == np.float64:  # distinct keys: the payload's order is determined
        np.testing.assert_array_equal(np.asarray(ps), pay.astype(pd)[order])


def test_sorts_of_bfloat16_give_bfloat16_values():
  """bfloat16 keys come back as bfloat16 from every sort that maps keys back to floats
  (their 16-bit keys were read as float16: ``[0.25, 1.0, -2.0, 0.5]`` sorted to
  ``[-2.0, 1.625, 1.75, 1.875]``; found by a review helper), eager, under jit and the
  packed sort's derivative."""
  x = np.array([0.25, 1.0, -2.0, 0.5, -0.0, 3.5e-3, 1.0], np.float32)
  xb = jnp.asarray(x, jnp.bfloat16)
  want = np.sort(np.asarray(xb, np.float32))
  np.testing.assert_array_equal(np.asarray(S.sort_descending(xb), np.float32), want[::-1])
  pay = jnp.arange(7.0, dtype=jnp.float32)
  for impl in (
    S.sort_with_payload,
    jax.jit(S.sort_with_payload),
    S._paired_sort,
    S._gathered_sort,
    S._packed_sort,
  ):
    xs, ps = impl(xb, pay)
    assert xs.dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(xs, np.float32), want)
    np.testing.assert_array_equal(np.asarray(xb, np.float32)[np.asarray(ps, int)], want)
  (xs, _), (_, t) = jax.jvp(S._packed_sort, (xb, pay), (jnp.zeros_like(xb), jnp.ones(7)))
  np.testing.assert_array_equal(np.asarray(xs, np.float32), want)
  k = S.float_to_key(xb)  # -0.0 comes back as +0.0, which compares equal
  np.testing.assert_array_equal(
    np.asarray(S.key_to_float(k, jnp.bfloat16), np.float32), np.asarray(xb, np.float32)
  )


def test_uc_independent_of_order_among_ties():
  """UC read between distinct values: the GPU path's unstable order gives the same result."""
  rng = np.random.default_rng(3)
  v = np.round(rng.random(5000), 2).astype(np.float32)
  u = (rng.random(5000) < v).astype(np.float32)
  ref = uc_from_scores(jnp.asarray(v), jnp.asarray(u))
  vs, rs = S._paired_sort(jnp.asarray(v), jnp.asarray(u - v))
  s = np.concatenate([[0.0], np.cumsum(np.asarray(rs, np.float64))]) / 5000
  vs = np.asarray(vs)
  cut = np.concatenate([[True], vs[1:] != vs[:-1], [True]])
  np.testing.assert_allclose(float(ref.value), s[cut].max() - s[cut].min(), atol=2e-6)


def test_bad_key_shape():
  with pytest.raises(ValueError, match="at least one axis"):
    S.argsort_keys(jnp.uint32(3))


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float16])
def test_sort_with_payload_differentiates_the_sorted_keys(dtype):
  # the sorted x is a permutation of x: its tangent is x's, permuted (it was 0)
  x = jnp.asarray([[0.3, 0.1, 0.2, 0.7]], dtype)
  pay = jnp.asarray([[3.0, 1.0, 2.0, 7.0]], jnp.float32)
  tx = jnp.asarray([[1.0, 2.0, 3.0, 4.0]], dtype)
  tp = jnp.asarray([[10.0, 20.0, 30.0, 40.0]], jnp.float32)
  for fn in (S.sort_with_payload, S._gathered_sort, S._paired_sort):
    (xs, ps), (dxs, dps) = jax.jvp(fn, (x, pay), (tx, tp))
    np.testing.assert_array_equal(np.asarray(dxs, np.float32), [[2.0, 3.0, 1.0, 4.0]])
    np.testing.assert_array_equal(dps, [[20.0, 30.0, 10.0, 40.0]])


def test_sort_descending_carries_its_tangents():
  """The integer-key sort carried no derivative: a rank utility's UC had a zero gradient in
  the probabilities, and the simplex projection's threshold a zero one (a review helper's
  finite-difference check). The tangents follow the values, along either axis."""
  x = jnp.array([[3.0, 1.0, 2.0], [0.0, 5.0, 4.0]])
  jac = np.asarray(jax.jacfwd(lambda a: S.sort_descending(a, axis=0))(x)).reshape(6, 6)
  want = np.zeros((6, 6))
  for out, src in enumerate([0, 4, 5, 3, 1, 2]):  # [[3, 5, 4], [0, 1, 2]]: flat sources
    want[out, src] = 1.0
  np.testing.assert_array_equal(jac, want)
  grad = jax.grad(lambda a: jnp.sum(S.sort_descending(a) * jnp.arange(3.0)[None]))(x)
  np.testing.assert_array_equal(np.asarray(grad), [[0.0, 2.0, 1.0], [2.0, 0.0, 1.0]])
  np.testing.assert_array_equal(np.asarray(S.sort_descending(x, axis=-2)), [[3, 5, 4], [0, 1, 2]])
