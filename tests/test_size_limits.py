"""Absurd sizes are refused up front with a ValueError naming the arguments.

Each size a caller asks for is checked against ``validation.MAX_ENTRIES``
(``check_entries``) before anything is allocated: before these checks the calls
below ran out of memory, raised a raw ``OverflowError`` or numpy's
``MemoryError``, or returned a lazily failing array whose read aborted the
process. Every case here fails before allocating (none holds more than a few MB).
"""

from __future__ import annotations

import importlib.util
import os
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcal import bootstrap, dominance, metrics, plots, utility
from jaxcal._src import dominance as D
from jaxcal._src.plots import _mpl
from jaxcal._src.train import splits
from jaxcal._src.utility.sweep import family

ABOVE = "above 2\\^31 - 1"
needs_mpl = pytest.mark.skipif(
  importlib.util.find_spec("matplotlib") is None, reason="matplotlib is not installed"
)
K = jax.random.PRNGKey(0)


# --------------------------------------------------------------------------
# Utilities: samplers and constructors
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
  "call, match",
  [
    # a lazily failing array: reading it aborted the process (rc 134)
    (lambda: utility.sample_linear(K, 2**31, 5), r"\(m, C\) = \(2147483648, 5\).*smaller m"),
    (lambda: utility.sample_rank(K, 10**12, 5), r"\(m, C\)"),
    (lambda: utility.classwise(1, 10**12), r"c\.shape \+ \(C,\).*num_classes"),
    (lambda: family("cwe", 10**6), r"the cwe family's utilities \(C, C\) = \(1,000,000, 1,0"),
    # its arange(C) came first: 2**40 classes (8 TB of indices) before any check
    (lambda: family("topk", 2**40), r"the topk family's utilities \(C, C\)"),
    (lambda: family("comb", 2**40), r"the comb family's utilities"),
    # out of memory
    (lambda: utility.top_k(1, 10**12), r"k\.shape \+ \(C,\)"),
    (lambda: utility.dcg(1.0, 10**12), r"gamma\.shape \+ \(C,\)"),
    (lambda: utility.sample_aligned_gain(K, 10**10, 5), r"\(m, C, C\)"),
    (lambda: utility.sample_misaligned_gain(K, 10**10, 5), r"\(m, C, C\)"),
    # a raw OverflowError
    (lambda: utility.sample_linear(K, 1, 2**31), r"\(m, C\) = \(1, 2147483648\)"),
    (lambda: utility.sample_decision(K, 1, 5, 10**12), r"\(m, C, K\).*num_actions"),
  ],
)
def test_utility_sizes_above_max_entries_are_refused(call, match):
  with pytest.raises(ValueError, match=match) as e:
    call()
  assert "entries, above 2^31 - 1 = 2,147,483,647" in str(e.value)


def test_sphere_samplers_refuse_faces_beyond_int32():
  """2^30 classes fit the entries bound, but the 2 C faces did not fit int32 (OverflowError)."""
  with pytest.raises(ValueError, match=r"num_classes = 1,073,741,824 .* int32"):
    utility.sample_linear(K, 1, 2**30)
  with pytest.raises(ValueError, match=r"num_classes \* num_actions = .* int32"):
    utility.sample_decision(jax.random.key(0), 1, 2**15, 2**15)


def test_samplers_name_their_float_options():
  with pytest.raises(ValueError, match=r"gain must be a number, got 'a'"):
    utility.sample_misaligned_gain(K, 2, 5, gain="a")  # "could not convert string to float"
  with pytest.raises(ValueError, match=r"max_off_diagonal must be a number"):
    utility.sample_aligned_gain(K, 2, 5, np.array([0.1, 0.2]))  # "only 0-dimensional arrays"
  with pytest.raises(ValueError, match=r"gain must lie in \[0, 1\]"):
    utility.sample_misaligned_gain(K, 2, 5, gain=1.5)
  # valid calls unchanged: a numpy or JAX scalar is its float
  want = utility.sample_aligned_gain(K, 2, 5, 0.25).params
  for v in (np.float64(0.25), np.array(0.25), jnp.float32(0.25)):
    np.testing.assert_array_equal(utility.sample_aligned_gain(K, 2, 5, v).params, want)
  want = utility.sample_misaligned_gain(K, 3, 6, 2, 0.5).params
  np.testing.assert_array_equal(utility.sample_misaligned_gain(K, 3, 6, 2, 0.5).params, want)


def test_list_params_have_a_batch_shape():
  """``Utility([[0.1] * 5] * 3).batch_shape`` raised AttributeError; uc() took the list."""
  u = utility.Utility([[0.1] * 5] * 3)
  assert u.batch_shape == (3,) and len(u) == 3
  np.testing.assert_array_equal(u[1].params, np.full(5, 0.1, np.float32))
  assert [v.params.shape for v in u] == [(5,)] * 3
  assert utility.Utility((1.0, 0.0), "linear").batch_shape == ()
  with pytest.raises(TypeError, match="single utility"):
    len(utility.Utility([1.0, 0.0]))
  with pytest.raises(ValueError, match="utility.params must be a numeric array"):
    _ = utility.Utility([[0.1] * 5, [0.1]]).batch_shape  # ragged


def test_valid_utility_sizes_unchanged():
  assert utility.sample_linear(K, 4, 3).params.shape == (4, 3)
  assert utility.classwise([0, 2], 3).params.shape == (2, 3)
  assert utility.top_k(2, 4).params.tolist() == [1.0, 1.0, 0.0, 0.0]
  assert [u.params.shape for u in family("comb", 5)] == [(5, 5), (5, 5)]


# --------------------------------------------------------------------------
# Bootstrap and dominance
# --------------------------------------------------------------------------


def test_resample_indices_sizes():
  k = jax.random.key(0)
  with pytest.raises(ValueError, match=r"int32 indices \(n,\) = \(2,147,483,648,\).*smaller n"):
    bootstrap.resample_indices(k, 2**31, 1)  # a raw OverflowError
  with pytest.raises(
    ValueError, match=r"\(num_resamples, n \+ 2\) = \(1,000,000,000, 102\).*fewer"
  ):
    bootstrap.resample_indices(k, 100, 10**9)  # out of memory
  with pytest.raises(ValueError, match=r"\(num_resamples, n \+ 2\) = \(800,000,000, 3\)"):
    bootstrap.resample_indices(k, 1, 8 * 10**8)  # the keys: 6.4 GB
  with pytest.raises(ValueError, match=r"\(num_resamples, n \+ 4\) = \(500,000,000, 5\)"):
    bootstrap.resample_indices(jax.random.key(0, impl="rbg"), 1, 5 * 10**8)  # 4-word keys
  with pytest.raises(ValueError, match=ABOVE):
    dominance.resample_indices(k, 2**31 - 1, 2)
  assert bootstrap.resample_indices(k, 5, 3).shape == (3, 5)


def test_dominance_matrix_refuses_a_huge_result():
  with pytest.raises(ValueError, match=r"dominance matrix \(p, p\) = \(1,000,000, 1,000,000\)"):
    dominance.dominance_matrix(np.zeros((10**6, 2)))  # out of memory


def test_dominance_matrix_in_row_blocks_is_the_same(monkeypatch):
  """Above the comparison budget the (p, p, L) comparisons run in row blocks: same booleans."""
  rng = np.random.default_rng(0)
  x = (rng.integers(0, 9, (61, 1)) + rng.integers(0, 3, (61, 4))).astype(np.float32)
  want = np.asarray(D.dominance_matrix(x))
  assert want.any()
  monkeypatch.setattr(D, "_COMPARISONS", 100)  # 61 * 61 * 4 > 100: blocks of 1 row
  np.testing.assert_array_equal(D.dominance_matrix(x), want)
  np.testing.assert_array_equal(jax.jit(D.dominance_matrix)(x), want)
  monkeypatch.setattr(D, "_COMPARISONS", 61 * 4 * 7)  # blocks of 7 rows, the last one padded
  np.testing.assert_array_equal(D.dominance_matrix(x), want)


# --------------------------------------------------------------------------
# Local calibration
# --------------------------------------------------------------------------


def test_nadaraya_watson_refuses_a_huge_dense_kernel():
  n = 46_341  # n^2 = 2,147,488,281 > 2^31 - 1
  f = np.zeros((n, 1), np.float32)
  with pytest.raises(ValueError, match=r"kernel \(n, n\) = \(46,341, 46,341\).*lce"):
    metrics.nadaraya_watson(f, f)


def _lce_data(n=120):
  k1, k2, k3 = jax.random.split(jax.random.key(0), 3)
  p = jax.nn.softmax(jax.random.normal(k1, (n, 3)))
  return p, jax.random.categorical(k2, jnp.log(p)), jax.random.normal(k3, (n, 4))


@pytest.mark.parametrize(
  "kw, match",
  [
    (dict(block_size=10**6, candidate_block=10**6), r"kernel block .* = \(1,000,000, 1,000,000\)"),
    (dict(block_size=2**40, candidate_block=2**40), r"kernel block"),  # raw OverflowError
    (dict(block_size=1, candidate_block=2**30), r"padded features \(n_pad, D\)"),
  ],
)
def test_lce_refuses_absurd_blocks(kw, match):
  p, y, f = _lce_data()
  with pytest.raises(ValueError, match=match + r".*block_size / candidate_block"):
    metrics.lce(p, y, f, 5, 10, 1.0, **kw)


def test_lce_blocks_larger_than_n_still_work():
  p, y, f = _lce_data()
  r = metrics.lce(p, y, f, 5, 10, 1.0, block_size=512, candidate_block=2048)
  assert np.isfinite(float(r.lce))


# --------------------------------------------------------------------------
# Splits
# --------------------------------------------------------------------------


def test_splits_refuse_sizes_above_max_entries():
  with pytest.raises(ValueError, match=r"range\(n\) = range\(1,000,000,000,000\).*smaller n"):
    splits.calibration_fit_val(10**12, 0)  # numpy's MemoryError
  with pytest.raises(ValueError, match=r"range\(n_train\).*smaller n_train"):
    splits.local_calibration_splits(10**12, 0)
  with pytest.raises(ValueError, match=r"range\(n_test\).*smaller n_test"):
    splits.trace_splits(5, 2**31, 0)
  with pytest.raises(ValueError, match=r"range\(n_train\)"):
    splits.trace_splits(2**31, 5, 0)
  fit, val = splits.calibration_fit_val(20, seed=0)
  assert (fit.size, val.size) == (18, 2)


# --------------------------------------------------------------------------
# Plots
# --------------------------------------------------------------------------


@pytest.fixture
def fig():
  import matplotlib.pyplot as plt

  f = plots.ecdf_plot({"a": [0.01, 0.02, 0.04]})
  yield f
  plt.close(f)


@needs_mpl
def test_smooth_reliability_diagram_bounds_num_points():
  p = jax.nn.softmax(jax.random.normal(jax.random.key(0), (50, 3)))
  y = jnp.zeros(50, jnp.int32)
  with pytest.raises(ValueError, match=r"num_points must be <= 1000000, got 1000000000"):
    plots.smooth_reliability_diagram(p, y, num_points=10**9)  # out of memory
  with pytest.raises(ValueError, match=r"num_points must be <= 1000000"):
    plots.smooth_reliability_diagram(p, y, num_points=2**63)  # OverflowError
  with pytest.raises(ValueError, match=r"num_points must be >= 2"):
    plots.smooth_reliability_diagram(p, y, num_points=1)


@needs_mpl
@pytest.mark.parametrize("dpi", [1, 3, 9, 2401, 10**6, 10**9])
def test_savefig_bounds_dpi(fig, tmp_path, dpi):
  with pytest.raises(ValueError, match=r"dpi must be (>= 10|<= 2400), got .*\[10, 2400\]"):
    plots.savefig(fig, tmp_path / "f", ("png",), dpi=dpi)
  assert not list(tmp_path.iterdir())


@needs_mpl
def test_savefig_dpi_range_ends_write(fig, tmp_path):
  assert [pathlib.Path(p).name for p in plots.savefig(fig, tmp_path / "lo", ("png",), dpi=10)] == [
    "lo.png"
  ]


@needs_mpl
def test_savefig_refuses_a_path_without_a_file_name(fig, tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  for path in ("", "dir/", str(tmp_path) + os.sep, ".", "..", "sub/."):
    with pytest.raises(ValueError, match="path must name a file"):
      plots.savefig(fig, path, ("png",))
  with pytest.raises(TypeError, match="path must be a str or an os.PathLike .* got bytes"):
    plots.savefig(fig, b"f", ("png",))
  with pytest.raises(TypeError, match="got int"):
    plots.savefig(fig, 3, ("png",))
  assert not list(tmp_path.iterdir())  # no hidden ./.png


@needs_mpl
@pytest.mark.parametrize("n", ["abc", 1.5, -3, 0, True])
def test_plot_title_counts_are_checked(n):
  with pytest.raises(ValueError, match=r"n must be an integer >= 1"):
    plots.ecdf_plot({"a": [0.1]}, n=n)
  with pytest.raises(ValueError, match=r"n must be an integer >= 1"):
    plots.interval_plot({"a": (0.1, 0.05, 0.2)}, metric="ConfECE", n=n)
  with pytest.raises(ValueError, match=r"n must be an integer >= 1"):
    plots.lce_bandwidth_plot([1.0, 2.0], {"a": [0.1, 0.05]}, n=n)
  with pytest.raises(ValueError, match=r"n must be an integer >= 1"):
    plots.bin_robustness_plot([5, 20], {"ConfECE(fix)": [0.1, 0.05]}, n=n)
  with pytest.raises(ValueError, match=r"n must be an integer >= 1"):
    plots.rank_stability_plot([5, 20], {"e": np.eye(2)}, n=n)
  with pytest.raises(ValueError, match=r"n must be an integer >= 1"):
    plots.mcb_dsc_plot({"a": (0.01, 0.2)}, unc=1.0, n=n)
  with pytest.raises(ValueError, match=r"num_models must be an integer >= 1"):
    plots.rank_stability_plot([5, 20], {"e": np.eye(2)}, num_models=n)


@needs_mpl
def test_plot_title_counts_valid():
  import matplotlib.pyplot as plt

  for n, shown in ((np.int64(500), "n = 500"), (jnp.int32(7), "n = 7"), (10_000, "n = 10,000")):
    f = plots.ecdf_plot({"a": [0.1]}, n=n)
    assert shown in f.axes[0].get_title()
    plt.close(f)
  assert _mpl.check_count(None) is None


@needs_mpl
def test_mcb_dsc_plot_refuses_negative_components():
  import matplotlib.pyplot as plt

  with pytest.raises(ValueError, match=r"unc must be >= 0"):
    plots.mcb_dsc_plot({"a": (0.01, 0.2)}, unc=-1.0)
  with pytest.raises(ValueError, match=r"points\['b'\]: mcb must be >= 0 .* got -0.01"):
    plots.mcb_dsc_plot({"a": (0.01, 0.2), "b": (-0.01, 0.3)}, unc=1.0)
  # float32 rounding of a calibrated forecast's MCB (decompose returns -1e-7) is drawn
  plt.close(plots.mcb_dsc_plot({"a": (-1e-7, 0.2)}, unc=1.0))


def test_many_bin_counts_at_once_are_refused_before_their_per_bin_arrays():
  """``num_bins = np.arange(1, 100_000)`` sized per-bin arrays of 99,999 counts x 131,072 bins
  and ran out of memory (262 GB) in ``evaluate`` and in the metrics; 20,000 counts still run."""
  import jaxcal

  rng = np.random.default_rng(0)
  p = rng.dirichlet(np.ones(5), 100).astype(np.float32)
  y = rng.integers(0, 5, 100)
  many = np.arange(1, 100_000)
  msg = r"per-bin arrays of 99,999 bin counts x max_bins = 131,072 bins would hold 13,107,068,928"
  with pytest.raises(ValueError, match=msg):
    metrics.conf_ece(p, y, many)
  with pytest.raises(ValueError, match=msg):
    jaxcal.evaluate([p], [y], ["conf_ece"], num_bins=many)
  with pytest.raises(ValueError, match=r"per-bin arrays of 200 bin counts x max_bins = 16,777,"):
    metrics.conf_ece(p, y, np.arange(1, 201), max_bins=2**24)  # each within bounds, not both
  ok = np.arange(1, 9)  # the bound is the product: a few counts stay well within it
  np.testing.assert_allclose(
    np.asarray(jaxcal.evaluate([p], [y], ["conf_ece"], num_bins=ok)["conf_ece"][0]),
    np.asarray(metrics.conf_ece(p, y, ok)),
    rtol=1e-6,
  )
