"""Input validation shared by every public entry point.

Two tiers, as in chex/optax:

* **trace-time** checks (``check_*_shapes``) look only at shapes and dtypes and
  therefore also run under ``jax.jit``/``jax.vmap``;
* **value** checks (``check_probs``, ``check_labels``, ...) look at the numbers
  (NaN, simplex, label range). They run only when the argument is concrete
  (eager call); under a transformation they are skipped silently, because
  branching on traced values is impossible.

Every failure is a ``ValueError`` whose message names the argument and the
problem. Nothing the user passed is modified: the helpers only read.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

#: Absolute tolerance on ``|sum(p) - 1|`` and on values below 0 / above 1 for
#: rows of a probability matrix. Float32 softmax rows over 1,000 classes sum
#: to 1 within ~1e-6, so 1e-3 only rejects inputs that are not probabilities.
SIMPLEX_ATOL = 1e-3

__all__ = [
  "SIMPLEX_ATOL",
  "is_concrete",
  "check_probs",
  "check_logits",
  "check_labels",
  "check_num_bins",
  "MAX_NUM_BINS",
  "check_binning",
  "check_features",
  "check_finite",
  "as_float",
  "check_int_option",
  "check_float_option",
]


def is_concrete(*xs: Any) -> bool:
  """True when none of ``xs`` is a JAX tracer (so values can be inspected)."""
  return not any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(xs))


def as_float(x: Any, name: str = "input") -> jax.Array:
  """Converts to a floating JAX array without copying user memory in place.

  Integer/bool inputs become the default float dtype; float16/bfloat16 are
  kept; float64 stays float64 only when x64 is enabled (JAX's rule).
  """
  try:
    arr = jnp.asarray(x)
  except TypeError as e:  # e.g. strings, ragged lists
    raise ValueError(f"{name} must be a numeric array, got {type(x).__name__}: {e}") from None
  if not jnp.issubdtype(arr.dtype, jnp.floating):
    if not (jnp.issubdtype(arr.dtype, jnp.integer) or arr.dtype == jnp.bool_):
      raise ValueError(f"{name} must be numeric, got dtype {arr.dtype}")
    arr = arr.astype(jnp.result_type(float))
  return arr


def _np(x: Any) -> np.ndarray:
  return np.asarray(jax.device_get(x))


def check_finite(x: Any, name: str) -> None:
  """Raises if a concrete ``x`` holds NaN or ±inf."""
  if not is_concrete(x):
    return
  a = _np(x)
  if a.size and not np.all(np.isfinite(a)):
    bad = int(np.size(a) - np.count_nonzero(np.isfinite(a)))
    kind = "NaN" if np.isnan(a).any() else "inf"
    raise ValueError(f"{name} contains {bad} non-finite value(s) ({kind})")


def check_probs(
  probs: Any, name: str = "probs", atol: float = SIMPLEX_ATOL, min_classes: int = 2
) -> jax.Array:
  """Validates an ``(n, C)`` matrix of probabilities and returns it as a float array.

  Shape checks always run; value checks (finite, in ``[0, 1]``, rows summing to
  one within ``atol``) only for concrete inputs.

  Raises:
    ValueError: naming the problem.
  """
  p = as_float(probs, name)
  if p.ndim != 2:
    raise ValueError(f"{name} must have shape (n, C), got shape {tuple(p.shape)}")
  n, c = p.shape
  if n == 0:
    raise ValueError(f"{name} is empty (n = 0 samples)")
  if c < min_classes:
    raise ValueError(f"{name} must have at least {min_classes} classes (columns), got C = {c}")
  if is_concrete(p):
    nonfinite, lo, hi, err, worst = (float(v) for v in jax.device_get(_probs_stats(p)))
    if nonfinite:
      check_finite(p, name)  # names NaN or inf
    if lo < -atol or hi > 1 + atol:
      raise ValueError(
        f"{name} must lie in [0, 1]; found values in [{lo:.4g}, {hi:.4g}]"
        " (pass logits with from_logits=True)"
      )
    if err > atol:
      a = _np(p)
      rows = np.abs(a.sum(axis=1, dtype=np.float64) - 1.0)
      raise ValueError(
        f"rows of {name} must sum to 1 (tolerance {atol:g}); row {int(worst)} sums to "
        f"{a[int(worst)].sum(dtype=np.float64):.6g} ({int((rows > atol).sum())} bad rows). "
        "Pass logits with from_logits=True or normalise the rows."
      )
  return p


@jax.jit
def _probs_stats(p: jax.Array):
  """One fused pass: #non-finite, min, max, max |row sum - 1| and its row."""
  acc = jnp.promote_types(p.dtype, jnp.float32)
  nonfinite = jnp.sum(~jnp.isfinite(p))
  err = jnp.abs(jnp.sum(p.astype(acc), axis=1) - 1.0)
  return nonfinite, jnp.min(p), jnp.max(p), jnp.max(err), jnp.argmax(err)


def check_logits(logits: Any, name: str = "logits") -> jax.Array:
  """Validates an ``(n, C)`` logit matrix (finite, C >= 2)."""
  z = as_float(logits, name)
  if z.ndim != 2:
    raise ValueError(f"{name} must have shape (n, C), got shape {tuple(z.shape)}")
  if z.shape[0] == 0:
    raise ValueError(f"{name} is empty (n = 0 samples)")
  if z.shape[1] < 2:
    raise ValueError(f"{name} must have at least 2 classes (columns), got C = {z.shape[1]}")
  check_finite(z, name)
  return z


def check_labels(labels: Any, n: int, num_classes: int | None, name: str = "labels") -> jax.Array:
  """Validates integer labels of shape ``(n,)`` in ``[0, num_classes)``.

  Float labels are accepted only if every value is integral (checked eagerly);
  they are converted to int32.
  """
  try:
    y = jnp.asarray(labels)
  except (TypeError, OverflowError, ValueError) as e:
    raise ValueError(f"{name} must be an integer array in int32 range: {e}") from None
  if y.ndim != 1:
    raise ValueError(f"{name} must have shape (n,), got shape {tuple(y.shape)}")
  if y.shape[0] != n:
    raise ValueError(f"{name} has {y.shape[0]} entries but the predictions have n = {n} rows")
  if y.dtype == jnp.bool_:
    y = y.astype(jnp.int32)
  if jnp.issubdtype(y.dtype, jnp.floating):
    if is_concrete(y):
      a = _np(y)
      if not np.all(np.isfinite(a)) or not np.all(a == np.round(a)):
        raise ValueError(
          f"{name} must be integers; got non-integer values such as {a[a != np.round(a)][:3]}"
        )
    else:
      raise ValueError(f"{name} must have an integer dtype, got {y.dtype}")
    y = y.astype(jnp.int32)
  elif not jnp.issubdtype(y.dtype, jnp.integer):
    raise ValueError(f"{name} must have an integer dtype, got {y.dtype}")
  if is_concrete(y) and num_classes is not None and y.size:
    a = _np(y)
    lo, hi = int(a.min()), int(a.max())
    if lo < 0 or hi >= num_classes:
      raise ValueError(f"{name} must lie in [0, {num_classes}); found values in [{lo}, {hi}]")
  return y


#: Largest accepted bin count (bin indices and ``i * m`` products are int32).
MAX_NUM_BINS = 2**24


def check_num_bins(num_bins: Any, name: str = "num_bins") -> jax.Array | int:
  """Validates a bin count: a positive int, or an integer array of them.

  Returns a Python int when given one (static path) and an int32 array
  otherwise (traced path). Integral floats (``15.0``) are accepted on
  concrete inputs; booleans, strings, ``None`` and non-integral values are not.
  """
  if isinstance(num_bins, (bool, np.bool_)):
    raise ValueError(f"{name} must be an integer >= 1, got {num_bins!r}")
  if isinstance(num_bins, (int, np.integer)):
    if int(num_bins) < 1:
      raise ValueError(f"{name} must be >= 1, got {int(num_bins)}")
    if int(num_bins) > MAX_NUM_BINS:
      raise ValueError(f"{name} must be <= {MAX_NUM_BINS}, got {int(num_bins)}")
    return int(num_bins)
  if num_bins is None or isinstance(num_bins, (str, bytes)):
    raise ValueError(f"{name} must be an integer >= 1 or an integer array, got {num_bins!r}")
  try:
    m = num_bins if isinstance(num_bins, jax.Array) else np.asarray(num_bins)
  except (TypeError, ValueError) as e:
    raise ValueError(f"{name} must be an integer or an integer array: {e}") from None
  if m.dtype == np.bool_ or not (
    jnp.issubdtype(m.dtype, jnp.integer) or jnp.issubdtype(m.dtype, jnp.floating)
  ):
    raise ValueError(f"{name} must be integer-valued, got dtype {m.dtype}")
  if is_concrete(m):
    a = _np(m)
    if jnp.issubdtype(a.dtype, jnp.floating) and not np.all(np.isfinite(a) & (a == np.round(a))):
      raise ValueError(
        f"{name} must be integer-valued, got {a.ravel()[~(a.ravel() == np.round(a.ravel()))][:3]}"
      )
    if a.size and a.min() < 1:
      raise ValueError(f"{name} must be >= 1, got minimum {a.min():g}")
    if a.size and a.max() > MAX_NUM_BINS:
      raise ValueError(f"{name} must be <= {MAX_NUM_BINS}, got maximum {a.max():g}")
    return jnp.asarray(a.astype(np.int32))
  if not jnp.issubdtype(m.dtype, jnp.integer):
    raise ValueError(f"{name} must have an integer dtype when traced, got {m.dtype}")
  return m.astype(jnp.int32)


_BINNINGS = ("fixed", "quantile")


def check_binning(binning: str) -> str:
  if binning not in _BINNINGS:
    raise ValueError(f"binning must be one of {_BINNINGS}, got {binning!r}")
  return binning


def check_features(features: Any, n: int, name: str = "features") -> jax.Array:
  """Validates an ``(n, D)`` feature matrix (finite)."""
  f = as_float(features, name)
  if f.ndim != 2:
    raise ValueError(f"{name} must have shape (n, D), got shape {tuple(f.shape)}")
  if f.shape[0] != n:
    raise ValueError(f"{name} has {f.shape[0]} rows but the predictions have n = {n} rows")
  check_finite(f, name)
  return f


# ---------------------------------------------------------------------------
# Options (Python scalars configuring a fit or a metric)


def check_int_option(
  value: Any, name: str, *, minimum: int | None = None, maximum: int | None = None
) -> int:
  """Validates an integer option (a Python or NumPy int, not a bool or a float).

  Example:
    >>> check_int_option(15, "num_bins", minimum=1)
    15
    >>> check_int_option(2.7, "num_bins", minimum=1)
    Traceback (most recent call last):
    ...
    ValueError: num_bins must be an int, got 2.7 (float)
  """
  if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
    raise ValueError(f"{name} must be an int, got {value!r} ({type(value).__name__})")
  v = int(value)
  if minimum is not None and v < minimum:
    raise ValueError(f"{name} must be >= {minimum}, got {v}")
  if maximum is not None and v > maximum:
    raise ValueError(f"{name} must be <= {maximum}, got {v}")
  return v


def check_float_option(
  value: Any, name: str, *, minimum: float | None = None, positive: bool = False
) -> float:
  """Validates a finite real option (``positive``: ``> 0``; ``minimum``: ``>=``).

  Example:
    >>> check_float_option(1e-6, "tol", minimum=0.0)
    1e-06
    >>> check_float_option(float("nan"), "tol", minimum=0.0)
    Traceback (most recent call last):
    ...
    ValueError: tol must be a finite number, got nan
  """
  if isinstance(value, (bool, np.bool_)) or not isinstance(
    value, (int, float, np.integer, np.floating)
  ):
    raise ValueError(f"{name} must be a number, got {value!r} ({type(value).__name__})")
  v = float(value)
  if not np.isfinite(v):
    raise ValueError(f"{name} must be a finite number, got {v}")
  if positive and v <= 0:
    raise ValueError(f"{name} must be > 0, got {v}")
  if minimum is not None and v < minimum:
    raise ValueError(f"{name} must be >= {minimum}, got {v}")
  return v
