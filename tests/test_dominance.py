"""jaxcal.dominance: dominance order, longest chain, rank correlations, bootstrap."""

import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats

from jaxcal import dominance as D

# --------------------------------------------------------------------------
# slow float64 references
# --------------------------------------------------------------------------


def ref_dominates(f, g):
  f = np.asarray(f, np.float64)
  g = np.asarray(g, np.float64)
  return bool(np.all(f <= g) and np.any(f < g))


def ref_longest_chain_length(L):
  """Longest path (in vertices) of the dominance DAG by memoised DFS."""
  p = len(L)

  @functools.cache
  def from_(i):
    nxt = [from_(j) for j in range(p) if ref_dominates(L[i], L[j])]
    return 1 + max(nxt, default=0)

  return max(from_(i) for i in range(p))


def ref_average_ranks(x):
  x = np.asarray(x, np.float64)
  return np.array([np.sum(x < v) + (np.sum(x == v) + 1) / 2 for v in x])


def random_tables(seed, count, p_max=9, L_max=4, levels=4):
  """Small tables with many ties (integer levels) so every tie rule is hit."""
  rng = np.random.default_rng(seed)
  for _ in range(count):
    p = int(rng.integers(1, p_max + 1))
    L = int(rng.integers(1, L_max + 1))
    yield rng.integers(0, levels, size=(p, L)).astype(np.float64)


# --------------------------------------------------------------------------
# dominance_matrix / dominance_chain
# --------------------------------------------------------------------------


def test_dominance_matrix_matches_loop_reference_jit_and_vmap():
  rng = np.random.default_rng(0)
  tables = rng.integers(0, 3, size=(4, 6, 3)).astype(np.float32)
  ref = np.array(
    [[[ref_dominates(t[i], t[j]) for j in range(6)] for i in range(6)] for t in tables]
  )
  eager = np.stack([np.asarray(D.dominance_matrix(t)) for t in tables])
  np.testing.assert_array_equal(eager, ref)
  np.testing.assert_array_equal(np.asarray(jax.jit(D.dominance_matrix)(tables[0])), ref[0])
  np.testing.assert_array_equal(np.asarray(jax.vmap(D.dominance_matrix)(tables)), ref)
  # a strict partial order: irreflexive and antisymmetric
  assert not np.any(np.diagonal(ref, axis1=1, axis2=2))
  assert not np.any(ref & np.swapaxes(ref, 1, 2))


def test_dominance_matrix_in_row_blocks_equals_the_direct_one(monkeypatch):
  """Past ``_COMPARISONS`` booleans the matrix is built in row blocks; no test reached that
  path (a mutation review: it could come back transposed without a test failing)."""
  from jaxcal._src import dominance as DD

  rng = np.random.default_rng(5)
  table = rng.integers(0, 3, size=(23, 4)).astype(np.float32)
  ref = np.array([[ref_dominates(a, b) for b in table] for a in table])
  np.testing.assert_array_equal(np.asarray(D.dominance_matrix(table)), ref)
  monkeypatch.setattr(DD, "_COMPARISONS", 23 * 4 * 5)  # blocks of 5 rows, the last short
  np.testing.assert_array_equal(np.asarray(D.dominance_matrix(table)), ref)
  assert ref.any() and not np.array_equal(ref, ref.T)  # a transposed result would differ


def test_dominance_chain_is_a_longest_valid_chain():
  for L in random_tables(1, 60):
    chain = D.dominance_chain(L)
    assert chain.dtype == np.int64 and chain.ndim == 1
    assert len(set(chain.tolist())) == len(chain)
    # every earlier element dominates every later one (transitivity)
    for a, b in itertools.combinations(chain, 2):
      assert ref_dominates(L[a], L[b])
    assert len(chain) == ref_longest_chain_length(tuple(map(tuple, L)))


def test_dominance_chain_compares_integers_exactly_as_the_matrix_does():
  # int64 losses above 2**53 were cast to float64 and tied: the chain missed a dominance
  losses = np.array([[2**53 + 1, 5], [2**53, 5]], np.int64)  # row 1 dominates row 0
  assert np.asarray(D.dominance_matrix(losses)).astype(int).tolist() == [[0, 0], [1, 0]]
  assert D.dominance_chain(losses).tolist() == [1, 0]


def test_jax_integers_compare_exactly_in_the_matrix_and_rank_correlations():
  """int32 2**24 + 1 and 2**24 as JAX arrays became one float32: the matrix missed a
  dominance the chain saw, and Spearman / Kendall read false ties (0.95 / 0.91 for 0.8 /
  0.67); numpy integers were exact."""
  big = 2**24
  losses = jnp.array([[big + 1, 5], [big, 5]], jnp.int32)
  for f in (D.dominance_matrix, jax.jit(D.dominance_matrix)):
    assert np.asarray(f(losses)).astype(int).tolist() == [[0, 0], [1, 0]]
  a = jnp.array([big + 1, big, big + 2, big + 3], jnp.int32)
  b = jnp.array([1, 2, 3, 4])
  for method, want in (("spearman", 0.8), ("kendall", 2 / 3)):
    assert float(D.rank_correlation(a, b, method)) == pytest.approx(want, rel=1e-6)
    got = jax.jit(lambda a, b, m=method: D.rank_correlation(a, b, m))(a, b)
    assert float(got) == pytest.approx(want, rel=1e-6)
  # vmap over tables: each its own ranks
  tables = jnp.stack([losses, losses[::-1]])
  assert np.asarray(jax.vmap(D.dominance_matrix)(tables)).astype(int).tolist() == [
    [[0, 0], [1, 0]],
    [[0, 1], [0, 0]],
  ]
  with jax.enable_x64(True):  # int64 above 2**53: ranks in float64
    l64 = jnp.array([[2**53 + 1, 5], [2**53, 5]], jnp.int64)
    assert np.asarray(D.dominance_matrix(l64)).astype(int).tolist() == [[0, 0], [1, 0]]
    r = D.rank_correlation(jnp.array([2**53 + 1, 2**53, 2**53 + 2, 2**53 + 3]), b)
    assert r.dtype == jnp.float64 and float(r) == pytest.approx(0.8, rel=1e-12)


def test_dominance_chain_ties_and_edge_cases():
  # identical rows are incomparable: at most one of them, the smallest index
  L = np.array([[1.0, 1.0], [1.0, 1.0], [0.0, 0.0], [2.0, 2.0]])
  assert D.dominance_chain(L).tolist() == [2, 0, 3]
  # equal in one loss, strictly better in the other: dominates
  assert D.dominance_chain(np.array([[1.0, 2.0], [1.0, 1.0]])).tolist() == [1, 0]
  # single predictor, single loss, a total order, an antichain
  assert D.dominance_chain(np.array([[3.0]])).tolist() == [0]
  assert D.dominance_chain(np.array([[3.0], [1.0], [2.0]])).tolist() == [1, 2, 0]
  assert D.dominance_chain(np.array([[0.0, 1.0], [1.0, 0.0]])).tolist() == [0]
  # the tie rule between two longest chains: smallest end index, then
  # smallest predecessor index
  L = np.array([[1.0, 0.0], [0.0, 1.0], [2.0, 2.0], [2.0, 2.0]])
  assert D.dominance_chain(L).tolist() == [0, 2]
  # jax, integer and float32 inputs give the same answer; input unchanged
  L = np.array([[3, 1], [1, 0], [2, 2]])
  L0 = L.copy()
  assert D.dominance_chain(jnp.asarray(L, jnp.float32)).tolist() == D.dominance_chain(L).tolist()
  np.testing.assert_array_equal(L, L0)


@pytest.mark.parametrize(
  "bad, msg",
  [
    (np.zeros(3), "2-D"),
    (np.zeros((0, 2)), "at least one"),
    (np.zeros((2, 0)), "at least one"),
    (np.array([[0.0, np.nan], [1.0, 1.0]]), "NaN"),
    (np.array([["a", "b"]]), "numeric"),
    (
      np.array([[0.0, -np.inf], [1.0, 1.0]]),
      r"1 infinite \(±inf\) value\(s\); the first is row 0, column 1: -inf",
    ),
    (np.array([[0.0, 1.0], [np.inf, 1.0]]), r"infinite .* row 1, column 0: inf"),
    (np.array([[0.0, 1j], [1.0, 1.0]]), "losses must be real numeric, got dtype complex128"),
  ],
)
def test_dominance_chain_bad_input(bad, msg):
  with pytest.raises(ValueError, match=msg):
    D.dominance_chain(bad)


def test_dominance_errors_under_trace_and_nan_matrix():
  with pytest.raises(ValueError, match="concrete"):
    jax.jit(D.dominance_chain)(jnp.zeros((3, 2)))
  with pytest.raises(ValueError, match="NaN"):
    D.dominance_matrix(np.array([[np.nan], [1.0]]))
  with pytest.raises(
    ValueError, match=r"losses contains non-finite values .*row 0, column 1: -inf"
  ):
    D.dominance_matrix(np.array([[0.0, -np.inf], [1.0, 1.0]]))
  with pytest.raises(ValueError, match="losses must be a real numeric array, got dtype complex"):
    D.dominance_matrix(np.array([[0.0, 1j], [1.0, 1.0]]))
  with pytest.raises(ValueError, match="2-D"):
    D.dominance_matrix(np.zeros((2, 2, 2)))
  # traced: a boolean matrix holds no NaN; bad losses give "nothing dominates" (documented)
  got = jax.jit(D.dominance_matrix)(jnp.array([[0.0, -jnp.inf], [1.0, 1.0]]))
  assert got.dtype == jnp.bool_ and not got.any()


# --------------------------------------------------------------------------
# rank_correlation
# --------------------------------------------------------------------------


def _pairs(seed, count):
  rng = np.random.default_rng(seed)
  for i in range(count):
    n = int(rng.choice([2, 5, 17, 31]))  # few shapes: few compilations
    if i % 3 == 0:  # heavy ties in both
      a, b = rng.integers(0, 3, n), rng.integers(0, 4, n)
    elif i % 3 == 1:  # continuous
      a, b = rng.normal(size=n), rng.normal(size=n)
    else:  # correlated with ties in one
      a = rng.normal(size=n)
      b = np.round(a + 0.5 * rng.normal(size=n), 1)
    if np.all(a == a[0]) or np.all(b == b[0]):
      continue
    yield a.astype(np.float64), b.astype(np.float64)


def test_average_ranks_match_scipy_and_reference():
  x = np.array([3.0, 1.0, 3.0, 2.0, 3.0, -np.inf])
  want = scipy.stats.rankdata(x)
  np.testing.assert_allclose(ref_average_ranks(x), want)
  from jaxcal._src.dominance import _average_ranks

  np.testing.assert_allclose(np.asarray(_average_ranks(jnp.asarray(x))), want)


@pytest.mark.parametrize("method", ["spearman", "kendall"])
def test_rank_correlation_matches_scipy(method):
  ref_fn = {"spearman": scipy.stats.spearmanr, "kendall": scipy.stats.kendalltau}[method]
  for a, b in _pairs(2, 45):
    want = ref_fn(a, b)[0]
    got = float(D.rank_correlation(a, b, method))
    assert got == pytest.approx(want, abs=2e-6), (a, b)
  with jax.enable_x64(True):
    a, b = next(_pairs(3, 1))
    got = D.rank_correlation(jnp.asarray(a), jnp.asarray(b), method)
    assert got.dtype == jnp.float64
    assert float(got) == pytest.approx(ref_fn(a, b)[0], abs=1e-12)


def test_host_values_float32_would_round_compare_exactly():
  # float64 / int64 host values went to the device as float32: 0.30000001 tied 0.3, so
  # the matrix missed a dominance the float64 chain found, and close large integers tied
  table = np.array([[0.30000001, 0.2], [0.3, 0.2]])
  assert D.dominance_matrix(table).astype(int).tolist() == [[0, 0], [1, 0]]
  assert D.dominance_chain(table).tolist() == [1, 0]
  assert D.dominance_matrix(table * 1e300).astype(int).tolist() == [[0, 0], [1, 0]]  # finite
  a = [1_700_000_000, 1_700_000_050, 1_700_000_100, 1_700_000_300]
  b = [0.3, 0.2, 0.25, 0.1]
  for method, ref in (("spearman", scipy.stats.spearmanr), ("kendall", scipy.stats.kendalltau)):
    assert float(D.rank_correlation(a, b, method)) == pytest.approx(ref(a, b)[0], abs=1e-6)
  with pytest.raises(ValueError, match="losses contains non-finite .* inf"):  # still named
    D.dominance_matrix(np.array([[np.inf, 0.30000001], [0.3, 0.2]]))


def test_rank_correlation_jit_vmap_and_constant_under_trace():
  rng = np.random.default_rng(4)
  A = rng.integers(0, 5, size=(5, 12)).astype(np.float32)
  B = (A + rng.normal(size=(5, 12))).astype(np.float32)
  for method in ("spearman", "kendall"):
    loop = np.array([float(D.rank_correlation(a, b, method)) for a, b in zip(A, B)])
    f = functools.partial(D.rank_correlation, method=method)
    np.testing.assert_allclose(np.asarray(jax.vmap(f)(A, B)), loop, atol=1e-6)
    np.testing.assert_allclose(float(jax.jit(f)(A[0], B[0])), loop[0], atol=1e-6)
  # traced constant input cannot be checked: NaN, as scipy returns
  assert np.isnan(float(jax.jit(D.rank_correlation)(jnp.ones(4), jnp.arange(4.0))))
  # device arrays closed over by a jit are concrete: checked (their constant test read a
  # tracer, TracerBoolConversionError), and the value is the eager one
  a, b = jnp.asarray(A[0]), jnp.asarray(B[0])
  want = float(D.rank_correlation(a, b))
  assert float(jax.jit(lambda: D.rank_correlation(a, b))()) == pytest.approx(want, abs=1e-6)
  flat = jnp.ones(12)
  with pytest.raises(ValueError, match="a is constant"):
    jax.jit(lambda: D.rank_correlation(flat, b))()
  # perfect (anti-)monotone relations
  x = jnp.arange(10.0)
  assert float(D.rank_correlation(x, x**3)) == pytest.approx(1.0)
  assert float(D.rank_correlation(x, -x, "kendall")) == pytest.approx(-1.0)


@pytest.mark.parametrize(
  "a, b, method, msg",
  [
    ([1.0, 1.0, 1.0], [1.0, 2.0, 3.0], "spearman", "constant"),
    ([1.0, 2.0, 3.0], [5.0, 5.0, 5.0], "kendall", "constant"),
    ([1.0, 2.0, 3.0], [1.0, 2.0], "spearman", "same length"),
    ([1.0, np.nan, 3.0], [1.0, 2.0, 3.0], "spearman", "NaN"),
    ([1.0, 2.0], [1.0, 2.0], "pearson", "method"),
    ([[1.0, 2.0]], [[1.0, 2.0]], "spearman", "1-D"),
    ([1.0], [2.0], "spearman", "at least 2"),
  ],
)
def test_rank_correlation_bad_input(a, b, method, msg):
  with pytest.raises(ValueError, match=msg):
    D.rank_correlation(np.asarray(a), np.asarray(b), method)


def test_public_module_exports():
  assert sorted(D.__all__) == sorted(
    [
      "BootstrapResult",
      "bootstrap",
      "dominance_chain",
      "dominance_matrix",
      "rank_correlation",
      "resample_indices",
    ]
  )
  for name in D.__all__:
    assert getattr(D, name).__doc__


@pytest.mark.slow  # 2.2e9 pair comparisons: 24 s with the tests' unoptimised XLA:CPU code
def test_kendall_beyond_an_int32_count_of_pairs():
  """47,000 samples hold 2.2e9 ordered pairs: the int32 sum of the pair counts overflowed
  above 46,340 (tau 1.135 where scipy gives 0.815)."""
  rng = np.random.default_rng(0)
  a = rng.normal(size=47_000).astype(np.float32)
  b = (a + 0.5 * rng.normal(size=a.size)).astype(np.float32)
  want = scipy.stats.kendalltau(a, b).statistic
  assert float(D.rank_correlation(a, b, "kendall")) == pytest.approx(want, abs=1e-5)
