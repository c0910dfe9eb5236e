"""A table of bad inputs across every public entry point: each raises, none gives a value.

Every row names the call, the exception type and a fragment of its message.
Rows marked ``jit`` also run through ``jaxcal.checked(jax.jit(...))`` (the
array arguments traced, the others static): the same check then raises from
compiled code with the same message. A regression test for each class of
silent wrong result of issue 11 follows the table (labels wider than int32,
low-precision inputs, degenerate arguments, invalid values under ``jit``).
"""

from __future__ import annotations

import functools
import inspect
import pathlib
import re
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcal
from jaxcal import data, dominance, metrics, scores, streaming, utility

P = np.array([[0.7, 0.3], [0.2, 0.8], [0.5, 0.5], [0.6, 0.4]], np.float32)
Y = np.array([0, 1, 1, 0])
P3 = np.array([[0.6, 0.3, 0.1], [0.2, 0.5, 0.3], [0.1, 0.1, 0.8], [0.3, 0.4, 0.3]], np.float32)
Y3 = np.array([0, 1, 2, 1])
KEY = jax.random.key(0)


def _with(p, i, j, v):
  q = np.array(p, copy=True)
  q[i, j] = v
  return q


NAN_P = _with(P, 1, 0, np.nan)
INF_P = _with(P, 2, 1, np.inf)
WIDE = np.array([0, 2**32 + 1, 1, 0])  # would wrap to 1 in int32
NEG_WIDE = np.array([0, -(2**32) + 2, 1, 0])  # would wrap to 2


class Case(NamedTuple):
  id: str
  fn: Any
  arrays: tuple  # positional array arguments (traced in the jit path)
  static: dict  # keyword arguments kept static
  exc: type
  match: str
  jit: bool = False


C = Case
CASES = [
  # ---- probabilities: values
  C("conf_ece nan", metrics.conf_ece, (NAN_P, Y), {}, ValueError, r"non-finite.*row 1", True),
  C("conf_ce inf", metrics.conf_ce, (INF_P, Y), {"num_bins": 2}, ValueError, r"non-finite", True),
  C("conf_ece rows 0.9", metrics.conf_ece, (P * 0.9, Y), {}, ValueError, r"sum to 1.*0\.9", True),
  C("classwise_ce off simplex", metrics.classwise_ce, (P * 0.5, Y), {"num_bins": 2}, ValueError, r"4 row\(s\)", True),
  C("conf_ce_corr negative", metrics.conf_ce_corr, (np.array([[1.2, -0.2]] * 4, np.float32), Y), {"num_bins": 2}, ValueError, r"must lie in \[0, 1\].*1\.2", True),
  C("classwise_ece > 1", metrics.classwise_ece, (_with(P, 0, 0, 1.01), Y), {}, ValueError, r"\[0, 1\]|sum to 1", True),
  C("ecce logits as probs", metrics.ecce, (np.log(P), Y), {}, ValueError, r"from_logits=True", True),
  C("brier nan", scores.brier, (NAN_P, Y), {}, ValueError, r"non-finite", True),
  C("log_loss nan", scores.log_loss, (NAN_P, Y), {}, ValueError, r"non-finite", True),
  C("spherical off simplex", scores.spherical, (P * 0.8, Y), {}, ValueError, r"sum to 1", True),
  C("classification_error nan", scores.classification_error, (NAN_P, Y), {}, ValueError, r"non-finite", True),
  C("confidence_loss rows", scores.confidence_loss, (P * 0.9, Y), {}, ValueError, r"sum to 1", True),
  C("logits nan", scores.brier, (NAN_P, Y), {"from_logits": True}, ValueError, r"logits contains non-finite", True),
  C("logits inf", metrics.conf_ece, (INF_P, Y), {"from_logits": True}, ValueError, r"logits contains", True),
  C("logits masked", metrics.conf_ece, (_with(P, 2, 1, -np.inf), Y), {"from_logits": True}, ValueError, r"-inf as the logit of a masked-out class: pass probabilities instead"),
  C("decompose nan", scores.decompose, (NAN_P, Y), {}, ValueError, r"non-finite", True),
  C("decompose rows", scores.decompose, (P * 0.5, Y), {}, ValueError, r"sum to 1", True),
  C("decompose unit > 1", scores.decompose, (P * 2, Y), {"require_simplex": False}, ValueError, r"\[0, 1\]", True),
  C("uc rows", utility.uc, (P * 0.5, Y, utility.top_class()), {}, ValueError, r"sum to 1", True),
  C("uc_class nan", utility.uc_class, (NAN_P, Y), {"family": "tce"}, ValueError, r"non-finite", True),
  C("uc_sweep rows", utility.uc_sweep, (P * 0.5, Y, utility.sample_linear(KEY, 3, 2)), {}, ValueError, r"sum to 1"),
  C("reliability_stats nan", metrics.reliability_stats, (NAN_P, Y), {}, ValueError, r"non-finite", True),
  C("binary_ce p > 1", metrics.binary_ce, (np.array([0.2, 1.5, 0.3]), np.array([0, 1, 0])), {"num_bins": 2}, ValueError, r"p must lie in \[0, 1\].*1\.5", True),
  C("binary_ce p nan", metrics.binary_ce, (np.array([0.2, np.nan, 0.3]), np.array([0, 1, 0])), {"num_bins": 2}, ValueError, r"p contains non-finite", True),
  C("smooth_ece_bandwidth nan", metrics.smooth_ece_bandwidth, (NAN_P, Y), {}, ValueError, r"probs contains non-finite values \(NaN or inf\) in 1 row\(s\); the first is row 1, column 0: nan", True),
  C("smooth_ece_bandwidth p > 1", metrics.smooth_ece_bandwidth, (P * 2, Y), {}, ValueError, r"probs must lie in \[0, 1\].*row 0, column 0: 1\.4"),
  C("smooth_ece_bandwidth rows 0.9", metrics.smooth_ece_bandwidth, (P * 0.9, Y), {"mode": "classwise"}, ValueError, r"rows of probs must sum to 1"),
  C("smooth_ece_bandwidth logits nan", metrics.smooth_ece_bandwidth, (NAN_P, Y), {"from_logits": True}, ValueError, r"logits contains non-finite"),
  C("smooth_reliability nan", metrics.smooth_reliability, (NAN_P, Y), {}, ValueError, r"probs contains non-finite.*row 1"),
  C("smooth_reliability rows 0.9", metrics.smooth_reliability, (P * 0.9, Y), {}, ValueError, r"rows of probs must sum to 1"),
  # ---- probabilities: shapes and types
  C("rank 1", metrics.conf_ece, (P[0], Y), {}, ValueError, r"shape \(n, C\)"),
  C("rank 3", scores.brier, (P[None], Y), {}, ValueError, r"shape \(n, C\)"),
  C("one class", metrics.ecce, (np.ones((4, 1)), Y), {}, ValueError, r"at least 2 classes"),
  C("no samples", metrics.conf_ce, (np.zeros((0, 2)), np.zeros(0, int)), {}, ValueError, r"empty"),
  C("strings", metrics.conf_ece, ("abc", Y), {}, ValueError, r"numeric"),
  C("complex", scores.brier, (P.astype(np.complex64), Y), {}, ValueError, r"real numeric"),
  C("object array", scores.brier, (np.array([[0.5, 0.5]] * 4, object), Y), {}, ValueError, r"got dtype object \(an object array: jaxcal does not unpickle; a pandas frame .*to_numpy"),
  C("ragged", scores.log_loss, ([[0.5, 0.5], [1.0]], [0, 1]), {}, ValueError, r"numeric array"),
  # ---- labels
  C("label out of range", metrics.conf_ece, (P, np.array([0, 2, 1, 0])), {}, ValueError, r"labels must lie in \[0, 2\).*labels\[1\] = 2", True),
  C("label negative", scores.log_loss, (P, np.array([0, -1, 1, 0])), {}, ValueError, r"labels must lie.*-1", True),
  C("label float", metrics.conf_ece, (P, np.array([0.0, 0.5, 1.0, 0.0])), {}, ValueError, r"labels must be integers"),
  C("label float32 traced", metrics.conf_ece, (P, np.array([0.0, 0.5, 1.0, 0.0], np.float32)), {}, ValueError, r"labels must be integers", True),
  C("label float32 on device", metrics.conf_ece, (P, jnp.array([0.0, 0.5, 1.0, 0.0])), {}, ValueError, r"labels must be integers; 1 entries are not, the first is labels\[1\] = 0.5"),
  C("label nan", scores.brier, (P, np.array([0.0, np.nan, 1.0, 0.0])), {}, ValueError, r"labels must be integers"),
  C("label length", metrics.conf_ece, (P, np.array([0, 1])), {}, ValueError, r"labels has 2 entries"),
  C("one-hot labels", metrics.classwise_ce, (P, np.eye(2)[Y]), {}, ValueError, r"one-hot labels\? pass labels.argmax"),
  C("label column", scores.brier, (P, Y[:, None]), {}, ValueError, r"labels.ravel\(\)"),
  C("label strings", scores.brier, (P, np.array(["a", "b", "a", "b"])), {}, ValueError, r"labels must be a real numeric"),
  C("label int64 wide", metrics.classwise_ce, (P, WIDE), {"num_bins": 2}, ValueError, r"labels must lie in \[0, 2\).*4294967297"),
  C("label int64 wide negative", scores.brier, (P, NEG_WIDE), {}, ValueError, r"labels must lie in \[0, 2\).*-4294967294"),
  C("label int64 wide, device where", scores.brier, (P, WIDE), {"where": jnp.ones(4, bool)}, ValueError, r"labels must lie in \[0, 2\); 1 entries do not, the first is labels\[1\]"),
  C("label uint64 wide", scores.log_loss, (P, WIDE.astype(np.uint64)), {}, ValueError, r"labels must lie"),
  C("label float64 almost integral", scores.brier, (P, np.array([0, 1 + 1e-9, 1, 0])), {}, ValueError, r"labels must be integers"),
  C("smooth_ece_bandwidth label 5", metrics.smooth_ece_bandwidth, (P, np.array([0, 5, 1, 0])), {}, ValueError, r"labels must lie in \[0, 2\); 1 entries do not, the first is labels\[1\] = 5"),
  C("smooth_ece_bandwidth label length", metrics.smooth_ece_bandwidth, (P, Y[:2]), {}, ValueError, r"labels has 2 entries but the predictions have n = 4 rows"),
  C("smooth_ece_bandwidth label float", metrics.smooth_ece_bandwidth, (P, np.array([0.0, 0.5, 1.0, 0.0])), {"mode": "classwise"}, ValueError, r"labels must be integers"),
  C("smooth_reliability label -1", metrics.smooth_reliability, (P, np.array([0, -1, 1, 0])), {}, ValueError, r"labels must lie in \[0, 2\).*labels\[1\] = -1"),
  C("binary outcome 2", metrics.binary_ce, (P[:, 0], np.array([0, 1, 2, 0])), {"num_bins": 2}, ValueError, r"y must lie in \[0, 2\)", True),
  C("decompose label wide", scores.decompose, (P, WIDE), {}, ValueError, r"labels must lie"),
  C("uc label wide", utility.uc, (P, WIDE, utility.top_class()), {}, ValueError, r"labels must lie"),
  # ---- where masks
  C("where not bool", metrics.conf_ece, (P, Y), {"where": np.array([1, 0, 1, 1])}, ValueError, r"where must be a boolean mask"),
  C("where shape", scores.brier, (P, Y), {"where": np.array([True, False])}, ValueError, r"where must have shape \(4,\)"),
  C("where empty", lambda p, y, w: metrics.classwise_ce(p, y, 1, where=w), (P, Y, np.zeros(4, bool)), {}, ValueError, r"where selects no samples", True),
  C("where empty scores", scores.brier, (P, Y), {"where": np.zeros(4, bool)}, ValueError, r"where selects no samples"),
  C("quantile bins > selected", metrics.conf_ce, (P, Y), {"num_bins": 3, "where": np.array([True, True, False, False])}, ValueError, r"n = 2 selected by where"),
  # ---- bin counts and binning
  C("num_bins 0", metrics.conf_ece, (P, Y), {"num_bins": 0}, ValueError, r"num_bins must be >= 1"),
  C("num_bins array 0", metrics.conf_ce, (P, Y), {"num_bins": np.array([0, 2])}, ValueError, r"num_bins must be >= 1"),
  C("num_bins 2.5", metrics.conf_ece, (P, Y), {"num_bins": 2.5}, ValueError, r"num_bins must be finite and integer-valued, got 2.5$"),
  C("num_bins string", metrics.conf_ece, (P, Y), {"num_bins": "15"}, ValueError, r"num_bins must be an integer"),
  C("num_bins bool", metrics.conf_ece, (P, Y), {"num_bins": True}, ValueError, r"num_bins must be an integer"),
  C("num_bins None", metrics.classwise_ece, (P, Y), {"num_bins": None}, ValueError, r"num_bins must be an integer"),
  C("num_bins huge", metrics.conf_ece, (P, Y), {"num_bins": 2**25}, ValueError, r"num_bins must be <="),
  C("num_bins array huge", metrics.conf_ce, (P, Y), {"num_bins": np.array([2, 2**24 + 1])}, ValueError, r"num_bins must be <= 16777216, got maximum 1\.67772e\+07"),
  C("num_bins inf", metrics.conf_ece, (P, Y), {"num_bins": float("inf")}, ValueError, r"num_bins must be finite and integer-valued, got inf$"),
  C("num_bins array 2.5", metrics.conf_ece, (P, Y), {"num_bins": np.array([5.0, 2.5, np.nan])}, ValueError, r"num_bins must be finite and integer-valued, got entries 2.5, nan$"),
  C("from_logits string", metrics.conf_ece, (P, Y), {"from_logits": "no"}, ValueError, r"from_logits must be True or False, got 'no'"),
  C("from_logits int", scores.brier, (P, Y), {"from_logits": 1}, ValueError, r"from_logits must be True or False, got 1"),
  C("per_sample string", scores.brier, (P, Y), {"per_sample": "no"}, ValueError, r"per_sample must be True or False, got 'no'"),
  C("per_sample int", scores.log_loss, (P, Y), {"per_sample": 0}, ValueError, r"per_sample must be True or False, got 0"),
  C("bin_ids quantile above the selected n", metrics.bin_ids, (np.array([0.3, 0.1, 0.3, 0.2, 0.9, 0.7]), 4, "quantile"), {"where": np.array([1, 1, 1, 0, 0, 0], bool)}, ValueError, r"num_bins = 4 needs at least that many samples, got n = 3 selected by where"),
  C("squared string", metrics.debiased_ce, (P, Y), {"num_bins": 2, "squared": "no"}, ValueError, r"squared must be True or False, got 'no'"),
  C("debiased count above n and max_bins", metrics.debiased_ce, (P, Y), {"num_bins": 100, "max_bins": 2}, ValueError, r"num_bins = 100 \(as 4: counts above n = 4 act as n\) exceeds max_bins = 2"),
  C("require_simplex None", scores.decompose, (P, Y), {"require_simplex": None}, ValueError, r"require_simplex must be True or False, got None"),
  C("binning unknown", metrics.conf_ece, (P, Y), {"binning": "equal"}, ValueError, r"binning must be one of"),
  C("binning None", metrics.classwise_ce, (P, Y), {"binning": None}, ValueError, r"binning must be one of"),
  C("quantile m > n", metrics.classwise_ce, (P, Y), {"num_bins": 5}, ValueError, r"quantile binning with num_bins = 5"),
  C("max_bins too small", metrics.conf_ece, (P, Y), {"num_bins": 15, "max_bins": 10}, ValueError, r"exceeds max_bins"),
  C("max_bins 0", metrics.conf_ece, (P, Y), {"num_bins": 5, "max_bins": 0}, ValueError, r"max_bins must be"),
  C("max_bins huge", metrics.conf_ece, (P, Y), {"num_bins": 5, "max_bins": 2**24 + 1}, ValueError, r"max_bins must be a static Python int in \[1, 16777216\], got 16777217"),
  C("max_bins float", metrics.conf_ece, (P, Y), {"max_bins": 16.0}, ValueError, r"max_bins must be"),
  C("lce max_bins huge", metrics.lce, (P, Y, P), {"num_bins": 2, "max_bins": 2**31}, ValueError, r"max_bins must be a static Python int in \[1, 16777216\], got 2147483648"),
  C("labels bool, C > 2", metrics.conf_ece, (np.full((4, 3), 1 / 3, np.float32), np.array([True, False, True, True])), {}, ValueError, r"labels are booleans but the predictions have C = 3 classes: pass integer class indices"),
  C("labels bool, C > 2, jit", jax.jit(scores.brier), (np.full((4, 3), 1 / 3, np.float32), np.array([True, False, True, True])), {}, ValueError, r"labels are booleans but the predictions have C = 3"),
  C("reliability bins array", metrics.reliability_stats, (P, Y), {"num_bins": np.array([2, 3])}, ValueError, r"Python or numpy integer \(not an array\)"),
  C("reliability bins jax scalar", metrics.reliability_stats, (P, Y), {"num_bins": jnp.int32(2)}, ValueError, r"Python or numpy integer \(not an array\) for reliability_stats, got"),
  # ---- class weights
  C("class_weights shape", metrics.classwise_ece, (P, Y), {"class_weights": np.ones(3)}, ValueError, r"class_weights must have shape \(2,\)"),
  C("class_weights negative", metrics.ecce, (P, Y), {"class_weights": np.array([1.0, -1.0])}, ValueError, r"non-negative.*-1", True),
  C("class_weights all zero", metrics.classwise_ece, (P, Y), {"class_weights": np.zeros(2)}, ValueError, r"at least one weight must be positive", True),
  C("smooth_ece top-label class_weights", metrics.smooth_ece, (P, Y), {"class_weights": np.ones(2) / 2}, ValueError, r"class_weights applies to mode='classwise' only"),
  C("ks_ce top-label class_weights", metrics.ks_ce, (P, Y), {"class_weights": np.ones(2) / 2}, ValueError, r"class_weights applies to mode='classwise' only"),
  C("class_weights nan", metrics.ecce, (P, Y), {"class_weights": np.array([np.nan, 1.0])}, ValueError, r"class_weights contains non-finite", True),
  # ---- generic vector forms
  C("lin_ce shapes", metrics.lin_ce, (P, P[:, :1], np.array([0, 0, 1, 1])), {"num_bins": 2}, ValueError, r"same shape"),
  C("lin_ce 3-d", metrics.lin_ce, (P[..., None], P[..., None], np.array([0, 0, 1, 1])), {"num_bins": 2}, ValueError, r"shape \(n,\) or \(n, d\); got \(4, 2, 1\)"),
  C("lin_ce bin_ids length", metrics.lin_ce, (P, P, np.array([0, 0, 1])), {"num_bins": 2}, ValueError, r"bin_ids has 3 entries but reports and signals have n = 4 rows"),
  C("lin_ece bin_ids range", metrics.lin_ece, (P, P, np.array([0, 0, 2, 1])), {"num_bins": 2}, ValueError, r"bin_ids must lie in \[0, 2\)", True),
  C("lin_ce reports nan", metrics.lin_ce, (NAN_P, P, np.array([0, 0, 1, 1])), {"num_bins": 2}, ValueError, r"reports contains non-finite", True),
  C("lin_ce signals inf", metrics.lin_ce, (P, INF_P, np.array([0, 0, 1, 1])), {"num_bins": 2}, ValueError, r"signals contains non-finite", True),
  C("lin_ce num_bins traced-ish", metrics.lin_ce, (P, P, Y), {"num_bins": 2.0}, ValueError, r"static int"),
  C("lin_ce num_bins huge", metrics.lin_ce, (P, P, Y), {"num_bins": 2**31}, ValueError, r"num_bins must be <= 16777216, got 2147483648"),
  C("lin_ece num_bins huge", metrics.lin_ece, (P, P, Y), {"num_bins": 2**24 + 1}, ValueError, r"num_bins must be <= 16777216"),
  C("smooth_ece_bandwidth mode", metrics.smooth_ece_bandwidth, (P, Y), {"mode": "x"}, ValueError, r"mode must be one of \('top_label', 'classwise'\), got 'x'"),
  C("smooth_ece_bandwidth rank 1", metrics.smooth_ece_bandwidth, (P[0], Y), {}, ValueError, r"probs must have shape \(n, C\), got shape \(2,\)"),
  C("smooth_ece_bandwidth from_logits", metrics.smooth_ece_bandwidth, (P, Y), {"from_logits": "no"}, ValueError, r"from_logits must be True or False, got 'no'"),
  C("bin_ids scores", metrics.bin_ids, (np.zeros((2, 2)), 2), {}, ValueError, r"scores must have shape \(n,\)"),
  # ---- utilities
  C("sample_linear m=0", utility.sample_linear, (KEY, 0, 3), {}, ValueError, r"m must be an integer >= 1"),
  C("sample_rank m float", utility.sample_rank, (KEY, 2.5, 3), {}, ValueError, r"m must be an integer"),
  C("sample_linear C=1", utility.sample_linear, (KEY, 4, 1), {}, ValueError, r"num_classes must be an integer >= 2"),
  C("sample_decision 0 actions", utility.sample_decision, (KEY, 4, 3, 0), {}, ValueError, r"num_actions must be an integer >= 1"),
  C("sampler int key", utility.sample_linear, (0, 4, 3), {}, ValueError, r"key must be a JAX PRNG key"),
  # a raw key of another length passed the check: JAX's own TypeError (found by a review helper)
  C("sampler raw key (4,)", utility.sample_linear, (np.zeros(4, np.uint32), 4, 3), {}, ValueError, r"key is a raw uint32 key of shape \(4,\), but the default PRNG implementation's keys have shape \(2,\)"),
  C("bootstrap raw key (3,)", jaxcal.bootstrap.bootstrap, (np.zeros(3, np.uint32), jnp.mean, np.arange(5.0)), {}, ValueError, r"key is a raw uint32 key of shape \(3,\)"),
  C("utility params > 1", utility.linear, (np.array([1.5, 0.0]),), {}, ValueError, r"must lie in \[-1, 1\]"),
  C("gain matrix > 1", utility.gain_matrix, (np.array([[1.0, 2.0], [0.0, 1.0]]),), {}, ValueError, r"R \(gains\) must lie in \[-1, 1\].* column 1: 2\."),
  C("utility params nan", utility.rank, (np.array([np.nan, 0.0]),), {}, ValueError, r"non-finite"),
  C("classwise index", utility.classwise, (5, 5), {}, ValueError, r"class index c must lie"),
  C("top_k 0", utility.top_k, (0, 5), {}, ValueError, r"K must lie in \[1, 5\]"),
  C("dcg negative", utility.dcg, (-1.0, 4), {}, ValueError, r"gamma must lie in \[0, inf\]"),
  C("uc wrong C", utility.uc, (P3, Y3, utility.linear(np.zeros(2))), {}, ValueError, r"defined for C = 2"),
  C("uc bad utility values", utility.uc, (P, Y, utility.Utility(jnp.array([2.0, 0.0]), "linear")), {}, ValueError, r"\[-1, 1\]", True),
  C("uc not a utility", utility.uc, (P, Y, np.zeros(2)), {}, ValueError, r"jaxcal.utility.Utility"),
  C("uc_class family", utility.uc_class, (P, Y), {"family": "ece"}, ValueError, r"family must be one of"),
  C("family unknown", utility.family, ("ece", 3), {}, ValueError, r"family must be one of \('tce', 'cwe', 'topk', 'comb'\), got 'ece'"),
  C("family topk C=0", utility.family, ("topk", 0), {}, ValueError, r"num_classes must be >= 2, got 0"),
  C("family tce C=1", utility.family, ("tce", 1), {}, ValueError, r"num_classes must be >= 2, got 1"),
  C("family cwe C float", utility.family, ("cwe", 2.5), {}, ValueError, r"num_classes must be an int, got 2.5"),
  C("decision nan", utility.decision, (np.array([[0.0, np.nan], [1.0, 0.0]]),), {}, ValueError, r"utility parameters \(decision\) contains non-finite values"),
  C("decision 1-d", utility.decision, (np.zeros(3),), {}, ValueError, r"loss_matrix must have shape \(C, K\), got shape \(3,\)"),
  C("decision > 1", utility.decision, (np.full((2, 2), 2.0),), {}, ValueError, r"\(decision\) must lie in \[-1, 1\]"),
  C("sample_aligned_gain m=0", utility.sample_aligned_gain, (KEY, 0, 3), {}, ValueError, r"m must be an integer >= 1, got 0"),
  C("sample_aligned_gain off-diagonal", utility.sample_aligned_gain, (KEY, 2, 3), {"max_off_diagonal": 2.0}, ValueError, r"max_off_diagonal must lie in \[0, 1\], got 2\.0"),
  C("sample_misaligned_gain C=1", utility.sample_misaligned_gain, (KEY, 3, 1), {}, ValueError, r"num_classes must be an integer >= 2, got 1"),
  C("sample_misaligned_gain groups", utility.sample_misaligned_gain, (KEY, 3, 3), {"num_groups": 0}, ValueError, r"num_groups must be an integer >= 1, got 0"),
  C("sample_misaligned_gain int key", utility.sample_misaligned_gain, (0, 3, 3), {}, ValueError, r"key must be a JAX PRNG key"),
  C("ecdf nan", utility.ecdf, (np.array([0.1, np.nan, 0.3]),), {}, ValueError, r"errors contains non-finite.*errors\[1\]", True),
  C("ecdf empty", utility.ecdf, (np.zeros(0),), {}, ValueError, r"non-empty"),
  C("ecdf 2-d", utility.ecdf, (np.zeros((2, 2)),), {}, ValueError, r"non-empty 1-d"),
  # ---- dominance
  C("dominance_matrix nan", dominance.dominance_matrix, (np.array([[0.1, np.nan], [0.2, 0.3]]),), {}, ValueError, r"losses contains NaN"),
  C("dominance_matrix 1-d", dominance.dominance_matrix, (np.zeros(3),), {}, ValueError, r"2-D"),
  C("dominance_chain ragged", dominance.dominance_chain, ([[0.1, 0.2], [0.3]],), {}, ValueError, r"losses must be a 2-D .* table: .*inhomogeneous"),
  C("dominance_matrix ragged", dominance.dominance_matrix, ([[0.1, 0.2], [0.3]],), {}, ValueError, r"losses must be a 2-D .* table: .*inhomogeneous"),
  C("dominance_chain nan", dominance.dominance_chain, (np.array([[0.1, np.nan], [0.2, 0.3]]),), {}, ValueError, r"NaN"),
  C("rank_correlation constant", dominance.rank_correlation, (np.ones(4), np.arange(4.0)), {}, ValueError, r"a is constant"),
  C("rank_correlation nan", dominance.rank_correlation, (np.arange(4.0), np.array([1, np.nan, 2, 3])), {}, ValueError, r"b contains NaN"),
  C("rank_correlation method", dominance.rank_correlation, (np.arange(4.0), np.arange(4.0)), {"method": "pearson"}, ValueError, r"spearman"),
  C("resample n float", dominance.resample_indices, (KEY, 2.5, 3), {}, ValueError, r"n must be an integer"),
  C("bootstrap 1 resample", jaxcal.bootstrap.bootstrap, (KEY, jnp.mean, np.arange(5.0)), {"num_resamples": 1}, ValueError, r"num_resamples must be an integer >= 2"),
  # int32 numbering: 2**31 resamples raised numpy's OverflowError deep inside
  C("bootstrap 2^31 resamples", jaxcal.bootstrap.bootstrap, (KEY, jnp.mean, np.arange(5.0)), {"num_resamples": 2**31}, ValueError, r"num_resamples must be an integer <= 2,147,483,646, got 2,147,483,648"),
  C("resample_indices 2^31", dominance.resample_indices, (KEY, 5, 2**31), {}, ValueError, r"num_resamples must be an integer <= 2,147,483,646"),
  C("consistency_bands 2^31", jaxcal.bootstrap.consistency_bands, (KEY, np.full((4, 2), 0.5), 2), {"num_resamples": 2**31}, ValueError, r"num_resamples must be an integer <= 2,147,483,646"),
  # ---- data
  C("default_predictions split", data.default_predictions, ("x",), {}, ValueError, r'split must be "test" or "val" for the embedded predictions, got \'x\''),
  C("load_split missing", data.load_split, ("/nonexistent/p.npz", "test"), {}, ValueError, r"predictions not found: /nonexistent/p\.npz"),
  C("synthetic n=0", data.synthetic, (KEY, 0, 3), {}, ValueError, r"n >= 1"),
  C("synthetic n huge", data.synthetic, (KEY, 2**40, 3), {}, ValueError, r"the probabilities \(n, num_classes\) = \(1099511627776, 3\) would hold 3,298,534,883,328 entries, above 2\^31 - 1"),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_raises_eagerly(case):
  with pytest.raises(case.exc, match=case.match):
    case.fn(*case.arrays, **case.static)


JIT_CASES = [c for c in CASES if c.jit]


@pytest.mark.parametrize("case", JIT_CASES, ids=[c.id for c in JIT_CASES])
def test_bad_input_raises_in_checked_jit(case):
  f = jaxcal.checked(jax.jit(functools.partial(case.fn, **case.static)))
  with pytest.raises(case.exc, match=case.match):
    f(*case.arrays)


# The modules whose public functions this table covers, and the public
# functions (``module.name``) it leaves to a table in another test file (the
# file named; the test below checks that the file calls the function inside a
# ``pytest.raises(..., match=...)``). jaxcal.streaming and jaxcal.recalibrate
# are not in this table: their bad inputs are tested with their states and
# fits (tests/test_streaming.py::test_bad_inputs, tests/test_recalibrate.py,
# test_isotonic.py, test_patching.py, test_local_net.py); plots, report,
# study and train are not computations on user arrays of this kind.
TABLE_MODULES = {
  "metrics": metrics,
  "scores": scores,
  "utility": utility,
  "dominance": dominance,
  "bootstrap": jaxcal.bootstrap,
  "data": data,
}
TABLES_ELSEWHERE = {
  "metrics.skce": "test_measures.py",  # test_bad_inputs: estimators, block sizes, kernels
  "metrics.mmce": "test_measures.py",  # test_bad_inputs: bandwidths
  "metrics.nadaraya_watson": "test_local.py",  # test_nadaraya_watson_value_errors
  "utility.similarity": "test_utility.py",  # test_bad_inputs_raise: a non-square S
  "dominance.bootstrap": "test_bootstrap.py",  # groups, z, resample counts
  "bootstrap.interval": "test_bootstrap.py",  # methods, confidence, shapes
  "data.dataset_dir": "test_paths.py",  # missing and misconfigured data folders
  "data.load_fashion_mnist": "test_fashion_mnist.py",  # test_corrupt_files_raise
  "data.load_predictions": "test_data.py",  # bad files and arrays, one message each
}
# Public functions with no input to refuse.
NOTHING_TO_REFUSE = {
  "utility.top_class": "takes no arguments",
  "data.looks_like_probs": "a predicate: False for anything that is not probabilities",
}


def _public_functions():
  """``{"module.name": function}`` for every function in TABLE_MODULES' ``__all__``.

  Classes (result containers, kernels, utilities) and constants are left out:
  their bad inputs reach the functions that take them.
  """
  out = {}
  for mod_name, mod in TABLE_MODULES.items():
    for name in mod.__all__:
      obj = getattr(mod, name)
      if inspect.isfunction(obj):
        out[f"{mod_name}.{name}"] = obj
  return out


def test_table_is_large_and_covers_every_entry_point():
  assert len(CASES) >= 60 and len(JIT_CASES) >= 25
  covered = {c.fn for c in CASES}
  public = _public_functions()
  assert len(public) >= 60  # __all__ was read (61 public functions today)
  missing = sorted(
    name
    for name, fn in public.items()
    if fn not in covered and name not in TABLES_ELSEWHERE and name not in NOTHING_TO_REFUSE
  )
  assert not missing, f"public functions without a bad-input row: {missing}"
  # the exclusions are current: public, not in this table, and tested in the file named
  here = pathlib.Path(__file__).parent
  for name, file in TABLES_ELSEWHERE.items():
    assert name in public and public[name] not in covered, name
    text = (here / file).read_text()
    short = name.split(".")[1]
    assert re.search(rf"\b{short}\(", text) and re.search(r"pytest\.raises\(.*match=", text), (
      name,
      file,
    )
  for name in NOTHING_TO_REFUSE:
    assert name in public and public[name] not in covered, name


def test_ecdf_under_jit_equals_eager_and_is_nan_for_bad_errors():
  # utility.ecdf compiled: the eager steps on valid errors (ties included);
  # NaN sorted errors, never plausible steps, for NaN or inf (its docstring)
  e = np.array([0.3, 0.1, 0.2, 0.1, 0.4, 0.05], np.float32)
  f = jax.jit(utility.ecdf)
  eager, jitted = utility.ecdf(e), f(e)
  np.testing.assert_array_equal(eager[0], np.sort(e))
  np.testing.assert_allclose(eager[1], np.arange(1, 7) / 6, rtol=1e-7)
  for a, b in zip(jitted, eager):
    np.testing.assert_array_equal(a, b)
  for bad in (np.nan, np.inf):
    sorted_errors, fractions = f(np.where(np.arange(6) == 2, np.float32(bad), e))
    assert np.isnan(np.asarray(sorted_errors)).all(), bad
    np.testing.assert_array_equal(fractions, eager[1])


def test_checked_outside_jit_and_on_tracers():
  bad = P * 0.5
  with pytest.raises(ValueError, match="sum to 1"):
    jaxcal.checked(metrics.conf_ece)(bad, Y)  # an eager function: traced by checkify
  np.testing.assert_allclose(jaxcal.checked(metrics.conf_ece)(P, Y), metrics.conf_ece(P, Y))
  with pytest.raises(ValueError, match="outermost function"):
    jax.jit(lambda p: jaxcal.checked(metrics.conf_ece)(p, Y))(P)
  # wide numpy integers are refused before checkify narrows them to int32
  with pytest.raises(ValueError, match="beyond the int32 range"):
    jaxcal.checked(metrics.conf_ece)(P, WIDE)
  below = np.array([0, -(2**32) + 1, 1, 0])  # below int32: would wrap to the valid label 1
  with pytest.raises(ValueError, match=r"argument leaf 1 .*beyond the int32 range.*-4294967295"):
    jaxcal.checked(metrics.conf_ece)(P, labels=below)  # keyword arguments are checked too
  # with x64 JAX keeps them: the compiled label check names the value (it was refused as
  # "beyond the int32 range; JAX would wrap them", which JAX would not)
  with jax.enable_x64(True):
    for wide, value in ((WIDE, 2**32 + 1), (below, -(2**32) + 1)):
      with pytest.raises(ValueError, match=rf"labels must lie in \[0, 2\).* = {value}\b"):
        jaxcal.checked(metrics.conf_ece)(P, wide)
  # nested: an inner checked() traced inside an outer one adds its checks to the outer's
  nested = jaxcal.checked(jax.jit(lambda p: jaxcal.checked(metrics.conf_ece)(p, Y)))
  with pytest.raises(ValueError, match="rows of probs must sum to 1"):
    nested(bad)
  np.testing.assert_allclose(nested(P), metrics.conf_ece(P, Y), rtol=1e-6)


def test_checked_mode_does_not_leak_into_unchecked_traces():
  # The same jitted function traced checked and unchecked: the unchecked one
  # must return NaN (not raise), the checked one must raise, in either order.
  f = jax.jit(lambda p: metrics.conf_ece(p, Y))
  assert np.isnan(f(P * 0.5))
  with pytest.raises(ValueError, match="sum to 1"):
    jaxcal.checked(f)(P * 0.5)
  assert np.isnan(f(P * 0.5))
  assert np.isfinite(f(P))


# --------------------------------------------------------------------------
# Regression tests, one per class of silent wrong result (issue 11)
# --------------------------------------------------------------------------

LABEL_ENTRY_POINTS = [
  ("conf_ece", lambda p, y: metrics.conf_ece(p, y, 2)),
  ("conf_ce", lambda p, y: metrics.conf_ce(p, y, 2)),
  ("conf_ce_corr", lambda p, y: metrics.conf_ce_corr(p, y, 2)),
  ("classwise_ce", lambda p, y: metrics.classwise_ce(p, y, 2)),
  ("classwise_ece", lambda p, y: metrics.classwise_ece(p, y, 2)),
  ("ecce", lambda p, y: metrics.ecce(p, y, 2)),
  ("reliability_stats", lambda p, y: metrics.reliability_stats(p, y, 2)),
  ("brier", scores.brier),
  ("log_loss", scores.log_loss),
  ("spherical", scores.spherical),
  ("classification_error", scores.classification_error),
  ("confidence_loss", scores.confidence_loss),
  ("decompose", scores.decompose),
  ("uc", lambda p, y: utility.uc(p, y, utility.top_class())),
  ("uc_class", lambda p, y: utility.uc_class(p, y, "cwe")),
  ("uc_sweep", lambda p, y: utility.uc_sweep(p, y, utility.sample_linear(KEY, 2, 2))),
  ("binary_ce", lambda p, y: metrics.binary_ce(p[:, 0], y, 2)),
  ("lin_ce", lambda p, y: metrics.lin_ce(p, p, y, 2)),
]


@pytest.mark.parametrize(
  "labels",
  [
    WIDE,
    NEG_WIDE,
    WIDE.astype(np.uint64),
    np.array([0.0, 2.0**32 + 1, 1.0, 0.0]),
    # little-endian bytes read as big-endian: 0, 2**56, 2**56, 0 (the range check
    # read them byte-swapped, as 0, 1, 1, 0, and the cast wrapped them to 0)
    np.frombuffer(Y.astype("<i8").tobytes(), ">i8"),
  ],
  ids=["int64", "int64-negative", "uint64", "float64", "int64-big-endian"],
)
@pytest.mark.parametrize("name,fn", LABEL_ENTRY_POINTS, ids=[n for n, _ in LABEL_ENTRY_POINTS])
def test_labels_wider_than_int32_are_checked_before_the_cast(name, fn, labels):
  with pytest.raises(ValueError, match=r"(labels|y|bin_ids) must lie in \[0, 2\)"):
    fn(P, labels)


@pytest.mark.parametrize("name,fn", LABEL_ENTRY_POINTS, ids=[n for n, _ in LABEL_ENTRY_POINTS])
def test_big_endian_inputs_give_the_native_result(name, fn):
  # JAX refuses non-native byte orders: probabilities raised "not a valid dtype
  # for JAX type promotion", int32 labels a TypeError naming no argument
  want = fn(P, Y)
  for p, y in [(P.astype(">f4"), Y.astype(">i4")), (P.astype(">f8"), Y.astype(">u2"))]:
    got = fn(p, y)
    assert jax.tree.all(jax.tree.map(lambda a, b: np.array_equal(a, b, equal_nan=True), got, want))


def _masked(a, i):
  m = np.zeros(a.shape, bool)
  m.flat[i] = True
  return np.ma.masked_array(a, mask=m)


MASKED_CASES = [
  ("conf_ece probs", lambda: metrics.conf_ece(_masked(P, 6), Y), "probs", 1),
  ("brier labels", lambda: scores.brier(P, _masked(Y, 3)), "labels", 1),
  ("brier where", lambda: scores.brier(P, Y, where=_masked(np.ones(4, bool), 3)), "where", 1),
  ("uc labels", lambda: utility.uc(P, _masked(Y, 0), utility.top_class()), "labels", 1),
  ("lce features", lambda: metrics.lce(P, Y, _masked(P, 0), min_bin_size=1), "features", 1),
  ("dominance_matrix", lambda: dominance.dominance_matrix(_masked(P.astype(np.float64), 1)), "losses", 1),
  ("dominance_chain", lambda: dominance.dominance_chain(_masked(P, 1)), "losses", 1),
  ("rank_correlation", lambda: dominance.rank_correlation(_masked(np.arange(4.0), 2), np.arange(4.0)), "a", 1),
  ("evaluate", lambda: jaxcal.evaluate(_masked(P, 0), Y, ["brier"]), "predictions", 1),
  ("fit_temperature", lambda: jaxcal.recalibrate.fit_temperature(_masked(P, 0), Y), "inputs", 1),
]  # fmt: skip


@pytest.mark.parametrize("case", MASKED_CASES, ids=[c[0] for c in MASKED_CASES])
def test_masked_arrays_are_refused_not_read_as_their_data(case):
  # np.asarray of a masked array is its data, masked entries included: brier of
  # 4 rows whose last is masked was the 4-row value (0.45 for 3 rows' 0.49)
  _, call, name, k = case
  entries = "entry" if k == 1 else "entries"
  with pytest.raises(
    ValueError, match=rf"{name} is a numpy masked array with {k} masked {entries}"
  ):
    call()


def test_a_masked_array_without_masked_entries_is_its_data():
  assert scores.brier(np.ma.masked_array(P), np.ma.masked_array(Y)) == scores.brier(P, Y)


def test_load_predictions_checks_wide_labels_before_the_cast(tmp_path):
  np.savez(tmp_path / "wide.npz", logits=np.zeros((4, 2), np.float32), labels=WIDE)
  with pytest.raises(ValueError, match=r"wide.npz: labels must lie in \[0, 2\).*4294967297"):
    data.load_predictions(tmp_path / "wide.npz")


@pytest.mark.parametrize("dtype", [jnp.float16, jnp.bfloat16])
def test_low_precision_inputs_compute_in_float32(dtype):
  # rows of dyadic probabilities: exact in float16 and bfloat16, so the result
  # must equal float32's (it lost ~5 % when computed in float16)
  rng = np.random.default_rng(0)
  rows = np.array(
    [[0.5, 0.25, 0.125, 0.125], [0.75, 0.125, 0.0625, 0.0625], [0.375, 0.375, 0.25, 0.0]],
    np.float32,
  )
  p32 = rng.permuted(rows[rng.integers(0, 3, 400)], axis=1)
  low = jnp.asarray(p32, dtype)
  y = rng.integers(0, 4, 400)
  for f in (metrics.conf_ce, metrics.classwise_ce, metrics.conf_ece):
    np.testing.assert_allclose(f(low, y, 10), f(p32, y, 10), rtol=1e-6, atol=1e-9)
  # num_bins = 70000 used to overflow to inf in float16 products
  np.testing.assert_allclose(
    metrics.conf_ece(low, y, 70000), metrics.conf_ece(p32, y, 70000), rtol=1e-6
  )
  assert metrics.conf_ece(low, y).dtype == jnp.float32
  assert scores.brier(low, y).dtype == jnp.float32


def test_simplex_tolerance_is_dtype_aware():
  z = jax.random.normal(jax.random.key(3), (2000, 100)) * 3
  bf = jax.nn.softmax(z.astype(jnp.bfloat16), axis=-1)  # a valid bfloat16 softmax
  y = np.zeros(2000, int)
  assert np.isfinite(float(metrics.conf_ece(bf, y)))
  assert jaxcal.data.looks_like_probs(bf)
  # the same row sums stored as float32 are beyond float32's tolerance
  rows = np.asarray(bf.astype(jnp.float32))
  worst = np.abs(rows.sum(1) - 1).max()
  assert worst > 1e-3
  with pytest.raises(ValueError, match="sum to 1"):
    metrics.conf_ece(rows, y)
  # bfloat16 keeps rejecting what is not a probability
  with pytest.raises(ValueError, match="sum to 1"):
    metrics.conf_ece((bf * 0.9).astype(jnp.bfloat16), y)


def test_degenerate_arguments_are_refused():
  with pytest.raises(ValueError, match="at least one weight must be positive"):
    metrics.ecce(P, Y, class_weights=np.zeros(2))
  with pytest.raises(ValueError, match="non-negative"):
    metrics.classwise_ece(P, Y, class_weights=np.array([2.0, -1.0]))
  with pytest.raises(ValueError, match="m must be an integer >= 1"):
    utility.sample_decision(KEY, 0, 3, 2)
  with pytest.raises(ValueError, match="non-finite"):
    utility.ecdf(np.array([np.nan]))
  with pytest.raises(ValueError, match="binning must be one of"):
    metrics.conf_ce_corr(P, Y, binning=None)
  with pytest.raises(ValueError, match="binning must be one of"):
    metrics.bin_ids(P[:, 0], 2, None)


def test_kernel_features_near_the_float_range_are_scaled_not_nan():
  # |phi| >= 1e19 in float32: |a|^2 + |b|^2 - 2 a.b overflowed (inf - inf) and
  # lce returned NaN on finite input; the kernel depends on ||a - b|| / gamma only
  rng = np.random.default_rng(0)
  p = rng.dirichlet(np.ones(3), 40).astype(np.float32)
  y = rng.integers(0, 3, 40)
  phi = rng.normal(size=(40, 2)).astype(np.float32)
  want = metrics.lce(p, y, phi, 2, min_bin_size=2, bandwidth=1.0)
  for s in (1e20, 1e30, 1e38):
    got = metrics.lce(p, y, phi * np.float32(s), 2, min_bin_size=2, bandwidth=s)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5)
  # the default bandwidth 10 is then far below the spread: the gamma -> 0 limit, finite
  tiny = metrics.lce(p, y, phi * np.float32(1e30), 2, min_bin_size=2)
  assert np.all(np.isfinite(np.asarray(tiny)))
  # the public Nadaraya-Watson estimator shares the kernel: the same scaling (it
  # gave a wrong finite row and NaN rows at 1e19)
  t = np.eye(3, dtype=np.float32)[y]
  want = metrics.nadaraya_watson(phi, t, 1.0)
  for s in (1e19, 1e30, 1e38):
    got = metrics.nadaraya_watson(phi * np.float32(s), t, s)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-6)


def test_a_traced_flag_says_to_mark_it_static():
  # jit(FixedBins.update)(..., from_logits=True) traced the flag: "got JitTracer(bool[])"
  state = streaming.FixedBins.empty(2, 3)
  with pytest.raises(ValueError, match=r"from_logits must be a Python True or False, not a traced"):
    jax.jit(streaming.FixedBins.update)(state, P, Y, from_logits=True)
  with pytest.raises(ValueError, match=r"static_argnames=\('from_logits',\)"):
    jax.jit(lambda f: metrics.conf_ece(P, Y, from_logits=f))(True)


def test_traced_bin_counts_need_max_bins():
  # a traced bin count used to size per-bin arrays at n, silently (9.7 s for 199 counts)
  with pytest.raises(ValueError, match="max_bins"):
    jax.vmap(lambda m: metrics.classwise_ce(P, Y, m))(jnp.arange(1, 4))
  with pytest.raises(ValueError, match="max_bins"):
    jax.jit(lambda m: metrics.conf_ece(P, Y, m))(jnp.array(3))


BAD_UNDER_JIT = {
  "nan": (NAN_P, Y),
  "label": (P, np.array([0, 2, 1, 0])),
  "rows 0.9": (P * 0.9, Y),
  "negative label": (P, np.array([0, -1, 1, 0])),
  # rows still summing to one, with an entry outside [0, 1]: the traced minimum catches it
  "negative entry": (np.array([[1.1, -0.1], *P[1:]], np.float32), Y),
}
_line = lambda n: np.linspace(0.0, 1.0, n, dtype=np.float32)[:, None]  # (n, 1) features
JIT_METRICS = {
  "conf_ece": lambda p, y: metrics.conf_ece(p, y, 2),
  "conf_ce": lambda p, y: metrics.conf_ce(p, y, 2),
  "conf_ce_corr": lambda p, y: metrics.conf_ce_corr(p, y, np.array([1, 2])),
  "classwise_ce": lambda p, y: metrics.classwise_ce(p, y, 2),
  "classwise_ece": lambda p, y: metrics.classwise_ece(p, y, 2),
  "ecce": lambda p, y: metrics.ecce(p, y, 2),
  "brier": scores.brier,
  "log_loss": scores.log_loss,
  "spherical": scores.spherical,
  "classification_error": scores.classification_error,
  "confidence_loss": scores.confidence_loss,
  "brier per sample": functools.partial(scores.brier, per_sample=True),
  "decompose": scores.decompose,
  "uc": lambda p, y: utility.uc(p, y, utility.top_class()).value,
  "uc_class": lambda p, y: utility.uc_class(p, y, "tce"),
  "uc_class comb": lambda p, y: utility.uc_class(p, y, "comb"),
  "uc_sweep": lambda p, y: utility.uc_sweep(p, y, utility.sample_linear(KEY, 3, 2)),
  "uc_sweep rank": lambda p, y: utility.uc_sweep(p, y, utility.sample_rank(KEY, 3, 2)),
  "lce": lambda p, y: metrics.lce(p, y, _line(len(y)), 2, min_bin_size=0),
  "lce global": lambda p, y: metrics.lce(p, y, _line(len(y)), 2, min_bin_size=0, mlce="global"),
  "reliability": lambda p, y: metrics.reliability_stats(p, y, 2).accuracy,
}
#: XLA:CPU's max / min over 4,096 or more entries skip a NaN (jaxlib 0.10.2; openxla/xla
#: issue 21461): rows of ``BAD_UNDER_JIT`` repeated past that, so that a result left to
#: NaN inputs reaching it through a max (UC read -inf, MLCE 0) fails here.
LARGE = 1100  # 4 x 1100 = 4,400 rows


@pytest.mark.parametrize("size", [1, LARGE], ids=["n=4", "n=4400"])
@pytest.mark.parametrize("name", list(JIT_METRICS))
def test_invalid_values_under_jit_give_nan_not_a_number(name, size):
  f = jax.jit(JIT_METRICS[name])
  tile = lambda a: np.tile(a, (size,) + (1,) * (a.ndim - 1))
  for bad, (p, y) in BAD_UNDER_JIT.items():
    out = jax.tree_util.tree_leaves(f(tile(p), tile(y)))
    assert all(np.all(np.isnan(np.asarray(o))) for o in out), (name, bad, out)
  good = jax.tree_util.tree_leaves(f(tile(P), tile(Y)))
  assert all(np.all(np.isfinite(np.asarray(o))) for o in good), name


def test_invalid_values_under_vmap_poison_only_their_data_set():
  ps = np.stack([P, P * 0.5, P])
  ys = np.stack([Y, Y, np.array([0, 3, 1, 0])])
  out = np.asarray(jax.vmap(lambda p, y: metrics.classwise_ce(p, y, 2))(ps, ys))
  assert np.isfinite(out[0]) and np.isnan(out[1]) and np.isnan(out[2])
  np.testing.assert_allclose(out[0], metrics.classwise_ce(P, Y, 2), rtol=1e-6)


def test_reliability_counts_of_invalid_values_under_jit_are_minus_one():
  """Counts cannot be NaN: under jit, bad input makes every bin count -1 (fold's ints=-1),
  never a plausible count, and every float of the result NaN."""
  f = jax.jit(lambda p, y: metrics.reliability_stats(p, y, 2))
  for bad, (p, y) in BAD_UNDER_JIT.items():
    r = f(p, y)
    np.testing.assert_array_equal(r.counts, [-1, -1], err_msg=bad)
    assert np.all(np.isnan(np.asarray(r.confidence))), bad
  np.testing.assert_array_equal(f(P, Y).counts, metrics.reliability_stats(P, Y, 2).counts)


# --------------------------------------------------------------------------
# The command line: one line on stderr, exit status 2, no traceback
# --------------------------------------------------------------------------

DEFAULT = str(data.DEFAULT_PREDICTIONS)

CLI_CASES = [
  ("m negative", ["sweep", DEFAULT, "--m", "-5", "--out", "{tmp}/s.json"], r"--m: expected an integer >= 1, got -5"),
  ("m not a number", ["sweep", DEFAULT, "--m", "many", "--out", "{tmp}/s.json"], r"--m: expected an integer"),
  ("chunk size 0", ["sweep", DEFAULT, "--chunk-size", "0", "--out", "{tmp}/s.json"], r"--chunk-size"),
  ("bins 0", ["report", DEFAULT, "--bins", "0", "--out", "{tmp}/r"], r"--bins: expected an integer >= 1"),
  ("utilities negative", ["report", "--utilities", "-1", "--out", "{tmp}/r"], r"--utilities"),
  ("unknown family", ["sweep", DEFAULT, "--family", "cubic", "--out", "{tmp}/s.json"], r"invalid choice"),
  ("no command", [], r"required: command"),
  ("missing file", ["report", "{tmp}/missing.npz", "--out", "{tmp}/r"], r"predictions not found"),
  ("empty file", ["report", "{tmp}/empty.npz", "--out", "{tmp}/r"], r"not a valid .npz file"),
  ("truncated file", ["sweep", "{tmp}/trunc.npz", "--out", "{tmp}/s.json"], r"not a valid .npz file"),
  ("wide labels", ["report", "{tmp}/wide.npz", "--out", "{tmp}/r"], r"labels must lie in \[0, 2\)"),
  ("nan logits", ["report", "{tmp}/nan.npz", "--out", "{tmp}/r"], r"non-finite"),
  ("no labels", ["sweep", "{tmp}/nolabels.npz", "--out", "{tmp}/s.json"], r"no labels"),
  ("unknown split", ["report", DEFAULT, "--split", "train", "--out", "{tmp}/r"], r"no predictions found"),
  ("report out is a file", ["report", "--out", "{tmp}/empty.npz"], r"exists and is a file"),
  ("report out under a file", ["report", "--out", "{tmp}/empty.npz/r"], r"is a file, not a folder"),
  ("sweep out under a file", ["sweep", DEFAULT, "--out", "{tmp}/empty.npz/s.json"], r"is a file, not a folder"),
  ("sweep out exists", ["sweep", DEFAULT, "--out", "{tmp}/exists.json"], r"exists; pass --force"),
  ("sweep out extension", ["sweep", DEFAULT, "--out", "{tmp}/s.txt"], r"use a .json or .npz"),
  ("sweep out is a folder", ["sweep", DEFAULT, "--out", "{tmp}/dir.json"], r"is a folder"),
  ("sweep out is its input", ["sweep", "{tmp}/good.npz", "--out", "{tmp}/good.npz", "--force"], r"is an input file of this command"),
  ("recal out is its input", ["recalibrate", "temperature", "{tmp}/good.npz", "{tmp}/good.npz", "--out", "{tmp}/good.npz", "--force"], r"is an input file of this command"),
  ("report json is a folder", ["report", "--out", "{tmp}/jsondir"], r"holds a folder named report.json"),
  ("recal out exists", ["recalibrate", "temperature", DEFAULT, DEFAULT, "--out", "{tmp}/exists.npz"], r"exists; pass --force"),
  ("recal out extension", ["recalibrate", "temperature", DEFAULT, DEFAULT, "--out", "{tmp}/o.csv"], r"use a .npz"),
  ("recal model under a file", ["recalibrate", "temperature", DEFAULT, DEFAULT, "--out", "{tmp}/o.npz", "--save-model", "{tmp}/empty.npz/m.npz"], r"--save-model.*is a file"),
  ("recal options not JSON", ["recalibrate", "temperature", DEFAULT, DEFAULT, "--out", "{tmp}/o.npz", "--options", "{normalize: false}"], r"--options is not valid JSON"),
  ("recal options a list", ["recalibrate", "temperature", DEFAULT, DEFAULT, "--out", "{tmp}/o.npz", "--options", "[1, 2]"], r"--options must be a JSON object"),
  ("recal unknown option", ["recalibrate", "temperature", DEFAULT, DEFAULT, "--out", "{tmp}/o.npz", "--options", '{"max_iters": 3}'], r"max_iters"),
  ("recal unknown method", ["recalibrate", "nope", DEFAULT, DEFAULT, "--out", "{tmp}/o.npz"], r"unknown recalibration method"),
  ("recal logits vs probs", ["recalibrate", "temperature", DEFAULT, "{tmp}/probs.npz", "--out", "{tmp}/o.npz", "--test-split", "test"], r"calibration file holds logits but the test file holds probabilities"),
]  # fmt: skip


@pytest.fixture
def cli_files(tmp_path, monkeypatch):
  from jaxcal._src import cli

  monkeypatch.setattr(cli, "enable_compilation_cache", lambda: None)
  (tmp_path / "empty.npz").write_bytes(b"")
  np.savez(tmp_path / "good.npz", logits=np.zeros((4, 2), np.float32), labels=Y)
  raw = (tmp_path / "good.npz").read_bytes()
  (tmp_path / "trunc.npz").write_bytes(raw[: len(raw) // 2])
  np.savez(tmp_path / "wide.npz", logits=np.zeros((4, 2), np.float32), labels=WIDE)
  np.savez(tmp_path / "nan.npz", logits=NAN_P, labels=Y)
  np.savez(tmp_path / "nolabels.npz", logits=P)
  x, y = data.default_predictions("test")
  np.savez(tmp_path / "probs.npz", probs=np.asarray(jax.nn.softmax(x[:50])), labels=y[:50])
  (tmp_path / "exists.json").write_text("{}")
  (tmp_path / "exists.npz").write_bytes(raw)
  (tmp_path / "dir.json").mkdir()
  (tmp_path / "jsondir" / "report.json").mkdir(parents=True)
  return tmp_path


@pytest.mark.parametrize("argv,match", [c[1:] for c in CLI_CASES], ids=[c[0] for c in CLI_CASES])
def test_cli_user_error_is_one_line_and_exit_2(cli_files, capsys, argv, match):
  import re

  from jaxcal._src import cli

  args = [a.replace("{tmp}", str(cli_files)) for a in argv]
  try:
    status = cli.main(args)
  except SystemExit as e:  # argparse errors
    status = e.code
  assert status == 2
  err = capsys.readouterr().err.strip()
  assert len(err.splitlines()) == 1 and "Traceback" not in err, err
  assert re.search(match, err), err


def _traced_cases():
  """Traced arguments whose eager call raises: (name, fn of the traced args, args, message)."""
  from jaxcal._src.binning import bin_ids
  from jaxcal._src.isotonic import isotonic_fit, isotonic_predict, isotonic_regression
  from jaxcal._src.local import nadaraya_watson

  rng = np.random.default_rng(0)
  p = rng.dirichlet(np.ones(3), 40).astype(np.float32)
  y = rng.integers(0, 3, 40).astype(np.int32)
  f = np.linspace(0.0, 1.0, 40, dtype=np.float32)[:, None]
  x = np.linspace(0.0, 1.0, 40, dtype=np.float32)
  fit = isotonic_fit(x, (x > 0.5).astype(np.float32))
  state = streaming.FixedBins.empty(3, 15)
  return [
    (
      "mmce bandwidth 0",
      lambda b: metrics.mmce(p, y, b),
      (np.float32(0.0),),
      "bandwidth must be > 0",
    ),
    (
      "lce bandwidth nan",
      lambda b: metrics.lce(p, y, f, 3, 2, b),
      (np.float32(np.nan),),
      "bandwidth must be a finite number",
    ),
    (
      "smooth_ece bandwidth -1",
      lambda b: metrics.smooth_ece(p, y, b),
      (np.float32(-1.0),),
      "bandwidth must be positive and finite",
    ),
    (
      "nadaraya_watson empty mask",
      lambda m: nadaraya_watson(f, p, 1.0, mask=m),
      (np.zeros(40, bool),),
      "mask selects no neighbours",
    ),
    (
      "isotonic negative weight",
      lambda w: isotonic_regression(x, x, w),
      (np.where(x > 0.5, 1.0, -1.0).astype(np.float32),),
      "weights must be >= 0",
    ),
    (
      "isotonic zero weights",
      lambda w: isotonic_regression(x, x, w),
      (np.zeros(40, np.float32),),
      "at least one positive entry",
    ),
    (
      "isotonic_predict NaN",
      lambda t: isotonic_predict(fit, t),
      (np.array([0.1, np.nan], np.float32),),
      "x_new contains non-finite",
    ),
    (
      "FixedBins empty compute",
      lambda w: state.update(p, y, where=w).compute()["conf_ece"],
      (np.zeros(40, bool),),
      "FixedBins is empty",
    ),
    (
      "bin_ids num_bins 0",
      lambda m: bin_ids(x, m, "fixed"),
      (np.int32(0),),
      r"num_bins must be >= 1, got 0",
    ),
    (
      "rank_correlation constant",
      lambda a: dominance.rank_correlation(a, x[:5]),
      (np.ones(5, np.float32),),
      "a is constant",
    ),
    (
      "conf_ece num_bins above max_bins",
      lambda m: metrics.conf_ece(p, y, m, max_bins=8),
      (np.int32(9),),
      "num_bins = 9 exceeds max_bins = 8",
    ),
    (
      "lce keeps nothing",
      lambda k: metrics.lce(p, y, f, 3, k, 1.0),
      (np.int32(40),),
      "no bin of any class holds more than min_bin_size = 40 of the n = 40",
    ),
  ]


@pytest.mark.parametrize("name", [c[0] for c in _traced_cases()])
def test_checked_mode_raises_where_eager_raises_for_traced_arguments(name):
  """These gave NaN in ``jaxcal.checked(jax.jit(f))``, where an eager call raises (and plain
  ``jit`` still gives NaN, or -1 ids): checked mode promises the eager error."""
  _, fn, args, msg = next(c for c in _traced_cases() if c[0] == name)
  with pytest.raises(ValueError, match=msg):
    fn(*args)  # eager
  out = jax.jit(fn)(*args)
  leaves = [np.asarray(v) for v in jax.tree.leaves(out)]
  assert all(np.isnan(v).any() if v.dtype.kind == "f" else (v == -1).all() for v in leaves), name
  with pytest.raises(ValueError, match=msg):
    jaxcal.checked(jax.jit(fn))(*args)


@pytest.mark.parametrize("name", ["conf_ce", "classwise_ce", "binary_ce", "conf_ce_corr"])
def test_checked_mode_raises_for_quantile_bins_above_a_traced_selection(name):
  """Quantile bins outnumbering the samples a traced ``where`` selects: an eager call
  raises, but ``checked(jit)`` and ``vmap`` returned the value at n bins with no error
  (found by a review helper); plain ``jit`` keeps the documented value at n bins."""
  rng = np.random.default_rng(0)
  p = rng.dirichlet(np.ones(3), 60).astype(np.float32)
  y = rng.integers(0, 3, 60)
  w = np.arange(60) < 5  # 5 samples for 15 bins
  if name == "binary_ce":  # (n,) scores of one event
    p, y = p[:, 0], (y == 0).astype(np.int32)
  fn = functools.partial(getattr(metrics, name), num_bins=15)
  msg = r"quantile binning with num_bins = 15 needs at least that many samples, got n = 5 sel"
  with pytest.raises(ValueError, match=msg):
    fn(p, y, where=w)
  assert np.isfinite(jax.jit(lambda m: fn(p, y, where=m))(w))
  with pytest.raises(ValueError, match=msg):
    jaxcal.checked(jax.jit(lambda m: fn(p, y, where=m)))(w)
  masks = np.stack([np.ones(60, bool), w])
  with pytest.raises(ValueError, match=r"num_bins = 15 needs at least that many samples"):
    jaxcal.checked(jax.vmap(lambda m: fn(p, y, where=m)))(masks)
  jaxcal.checked(jax.vmap(lambda m: fn(p, y, where=m)))(masks[:1])  # enough samples: no error


@pytest.mark.parametrize("method", ["vector", "platt", "histogram", "dirichlet"])
def test_checked_mode_raises_for_a_class_without_a_sample_in_a_fit(method):
  # The traced fit folded a missing class into NaN parameters; checked mode
  # returned them without raising, where an eager fit raises.
  z = np.random.default_rng(0).normal(size=(40, 3)).astype(np.float32)
  y = np.arange(40) % 2  # class 2 has no sample
  msg = rf"recalibration method '{method}' needs every class in the calibration labels"
  with pytest.raises(ValueError, match=msg):
    jaxcal.recalibrate.fit(method, z, y)
  fit = jax.jit(lambda t: jaxcal.recalibrate.fit(method, z, t))
  assert all(np.isnan(np.asarray(v)).all() for v in jax.tree.leaves(fit(y)) if v.dtype.kind == "f")
  with pytest.raises(ValueError, match=msg + "; 1 of C = 3 classes have no sample"):
    jaxcal.checked(fit)(y)
  jaxcal.checked(fit)(np.arange(40) % 3)  # every class: no error


@pytest.mark.parametrize(
  "call",
  [
    lambda: metrics.conf_ece(P * 0.9, Y),
    lambda: scores.brier(NAN_P, Y),
    lambda: utility.uc(P, np.array([0, 1, 2, 0]), utility.top_class()),
  ],
  ids=["row sums", "nan", "label range"],
)
def test_bad_input_under_disable_jit_gives_the_message(call):
  # the search for the first problem ran ahead-of-time compiled, which
  # jax.disable_jit refuses: "Disable jit is not supported in the AOT path"
  want = None
  try:
    call()
  except ValueError as e:
    want = str(e)
  assert want is not None
  with jax.disable_jit(), pytest.raises(ValueError) as got:
    call()
  assert str(got.value) == want


def test_longdouble_inputs_are_read_as_float64_and_string_masks_refused():
  """``np.longdouble`` arrays raised JAX's TypeError naming an internal function (or "Dtype
  float128 is not a valid JAX array type"); ``bin_ids(where="yes")`` raised JAX's TypeError
  where every other ``where`` names the mask (found by a review helper)."""
  rng = np.random.default_rng(0)
  p = rng.dirichlet(np.ones(3), 50)
  y = rng.integers(0, 3, 50)
  wide = p.astype(np.longdouble)
  for fn in (
    scores.brier,
    metrics.conf_ece,
    lambda a, b: utility.uc(a, b, utility.top_class()).value,
  ):
    assert float(fn(wide, y)) == float(fn(p, y))
  got = jaxcal.recalibrate.fit_temperature(np.log(wide), y)
  assert float(got.temperature) == float(
    jaxcal.recalibrate.fit_temperature(np.log(p), y).temperature
  )
  with pytest.raises(
    ValueError, match=r"where must be a bool array \(a sample mask\), got dtype <U3"
  ):
    metrics.bin_ids(p[:, 0], 2, where="yes")


def test_boolean_bin_ids_stay_bins_zero_and_one():
  """The refusal of boolean class labels with C > 2 first caught ``lin_ce``/``lin_ece``'s
  boolean bin ids too (a reread found it): they are bins 0 and 1 whatever num_bins."""
  u, s = jnp.array([0.1, 0.9, 0.4, 0.6]), jnp.array([0.0, 1.0, 1.0, 0.0])
  b = jnp.array([True, False, True, False])
  for fn in (metrics.lin_ece, metrics.lin_ce):
    assert float(fn(u, s, b, 5)) == pytest.approx(float(fn(u, s, b.astype(jnp.int32), 5)))


_PHI = np.asarray(jax.random.normal(jax.random.key(0), (60, 4)))
_Y = (_PHI[:, 0] > 0).astype(np.int32)
_Z = np.stack([-_PHI[:, 0], _PHI[:, 0]], 1).astype(np.float32)


def _eager_only_calls():
  from jaxcal import recalibrate, report

  net = dict(features=_PHI, pca_dim=2, epochs=1, verbose=False)
  return {
    "fit_patching": (
      "fit_patching runs eagerly",
      lambda z, y: recalibrate.fit_patching(z, y, max_steps=2, progress=False).num_steps,
    ),
    "evaluate": ("evaluate runs eagerly", lambda z, y: jaxcal.evaluate(z, y, from_logits=True)),
    "calibration_report": (
      "calibration_report runs eagerly",
      lambda z, y: report.calibration_report(z, y, resamples=0, num_utilities=0),
    ),
    "compare_report": (
      "compare_report runs eagerly",
      lambda z, y: report.compare_report({"a": (z, y), "b": (z, y)}, resamples=0),
    ),
    "local_net": (
      r"fit\('local_net'\) runs eagerly",
      lambda z, y: recalibrate.fit("local_net", z, y, **net).num_classes,
    ),
    "kcal": (
      r"fit\('kcal'\) runs eagerly",
      lambda z, y: recalibrate.fit("kcal", z, y, **net).num_classes,
    ),
  }


@pytest.mark.parametrize("name", list(_eager_only_calls()))
def test_eager_only_calls_name_themselves_under_jit_traced_or_closed_over(name):
  """An eager-only call under jit says so, whether its arrays are traced or device arrays
  closed over by the traced function: those went on and failed deep inside with JAX's
  ConcretizationTypeError / TracerArrayConversionError (found by a review helper)."""
  match, call = _eager_only_calls()[name]
  z, y = jnp.asarray(_Z), jnp.asarray(_Y)
  with pytest.raises(ValueError, match=match):
    jax.jit(lambda a: call(a, y))(z)
  with pytest.raises(ValueError, match=match):
    jax.jit(lambda: call(z, y))()
