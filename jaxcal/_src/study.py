"""One compiled call for a whole calibration study: models × metrics × bin counts × utilities.

:func:`evaluate` takes the predictions of many models (a stack, a list or a
dict; probabilities or logits; any ``n``; models are grouped by their class
count ``C``), a set of metric names, bin counts as an array and batches of
utilities, and returns a :class:`StudyResult` of named arrays
(model × metric × bin count / utility / component).

How it compiles. Within a class-count group, the models' sample counts are
rounded up to a *size bucket* (a ladder ``2^k · {1, 1.25, 1.5, 1.75}``), and
models share the bucket of a larger one while the group's padded rows stay
within :data:`MAX_PADDING` times its real rows (usually: one size per class
count); models of one size are padded to it, stacked, and run by one
compiled program, the padding rows masked out with the metric cores'
``where=`` (a masked sample is exactly absent: quantile positions, ``n`` and
every sum count only real samples). Inside the program every binned error
comes from at most two binning engines (fixed and quantile), each run once
over the ``C`` class-wise rows and the top-label row, under one ``vmap`` over
the bin counts. The bin counts and utility parameters are arguments of that
program, not constants: a new array of the same length whose largest
count rounds up to the same power of two (the static ``max_bins``) reuses
it, and the utility values are checked inside it. The data are validated once per stack
(one fused reduction); so a study compiles two programs per (``C``, size,
model-count bucket), and a second call with the same shapes compiles
nothing. A list or dict of ``M`` models of one dtype is padded to
``size_bucket(M)`` models (copies of the first, results dropped), so a
growing list of checkpoints compiles ``O(log M)`` times (models of several
dtypes are validated each at its own tolerance, and compile per ``M``). A stack ``(M, n, C)`` is run as it
is, without the padding copy, so it compiles for its own ``M`` and ``n``:
stacks of other sizes compile again, where a list of the same models shares
the buckets. The program's key orders the metrics by name and holds the
utility batches by position, so the same metrics asked in another order,
or renamed utility batches, share it.

How it shards. The program runs under ``jax.shard_map`` on a
``Mesh(("models", "utilities"))`` (default: every device; the ``"models"``
axis as large as the smallest group allows, the rest on ``"utilities"``).
Each device holds only its models' data: no all-gather of per-model data
(except in one case: a stack already sharded over its rows is resharded to
the ``"models"`` axis, and with a ``"utilities"`` axis of size > 1 XLA
gathers the whole stack on every device for that step, 16 MB per device
for a 16 MB stack on a 2 x 2 mesh against 7 MB on a 4-way models mesh;
pass host arrays, a models-sharded stack or a ``("models",)`` mesh).
UC over sampled utilities is split over both axes (models × utilities);
the other metrics split the models over all devices (each device of a row
takes its share of the row's models; the row's results are gathered, a few
numbers per model). The results are replicated, so every host can read
them.

Hosts. In a ``jax.distributed`` run, a stack of host-local arrays is this
process's rows (samples) of every model: the rows of all processes are
assembled in process order (padded and masked where the shards differ in
size), and every process gets the union's result. Global ``jax.Array``
inputs are used as they are. Models go in one stack there: a list or dict of
models is refused, of host-local or global arrays.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from jax.typing import ArrayLike

from jaxcal._src import binning as B
from jaxcal._src import calibration_errors as CE
from jaxcal._src import scores as S
from jaxcal._src import validation as V
from jaxcal._src.decomposition import decompose_many
from jaxcal._src.utility import families as F
from jaxcal._src.utility import sweep as SW

__all__ = [
  "evaluate",
  "StudyResult",
  "METRICS",
  "DEFAULT_METRICS",
  "size_bucket",
  "binned_errors",
]

# name -> (family, kind, default binning)
_BINNED = {
  "conf_ece": ("conf", "ece", "fixed"),
  "conf_ce": ("conf", "ce", "quantile"),
  "conf_ce_corr": ("conf", "ce_corr", "quantile"),
  "classwise_ce": ("classwise", "ce", "quantile"),
  "classwise_ece": ("classwise", "ece", "fixed"),
  "ecce": ("ecce", None, "fixed"),
}
_SCORES = {
  "brier": S.brier_per_sample,
  "log_loss": S.log_loss_per_sample,
  "spherical": S.spherical_per_sample,
  "classification_error": S.classification_error_per_sample,
  "confidence_loss": S.confidence_loss_per_sample,
}
_DECOMPOSITIONS = {
  "decompose": ("brier", "classwise"),
  "decompose:normalized": ("brier", "normalized"),
  "decompose:log": ("log", "classwise"),
  "decompose:log:normalized": ("log", "normalized"),
}
_UC_CLASS = {"uc_tce": "tce", "uc_cwe": "cwe", "uc_topk": "topk", "uc_comb": "comb"}

#: Every metric name :func:`evaluate` accepts (binned errors also as
#: ``"name:fixed"`` / ``"name:quantile"``; UC over sampled utilities comes
#: from the ``utilities`` argument as ``"uc:<name>"``).
METRICS = tuple(_BINNED) + tuple(_SCORES) + tuple(_DECOMPOSITIONS) + tuple(_UC_CLASS)

#: What :func:`evaluate` computes when ``metrics=None``.
DEFAULT_METRICS = (
  "conf_ece",
  "conf_ce_corr",
  "classwise_ce",
  "classwise_ece",
  "brier",
  "log_loss",
  "classification_error",
)

_COMPONENTS = ("score", "mcb", "dsc", "unc")


def size_bucket(n: int) -> int:
  """The padded sample count of ``n``: the smallest ``2^k · {1, 1.25, 1.5, 1.75}`` ``>= n``.

  ``n <= 8`` is its own bucket; above, ``b(n) = min{f 2^k >= n : f in {1,
  1.25, 1.5, 1.75}, k = floor(log2 n)}`` (or ``2^(k+1)``), so padding adds
  less than 25 % and a sweep of sizes compiles ``O(log n)`` programs.

  Args:
    n: a sample count, a Python or NumPy int ``>= 1``.

  Returns:
    The bucket, a Python int ``>= n``.

  Raises:
    ValueError: ``n`` is not an integer ``>= 1`` (``0``, negative, ``2.5``,
      a bool, a string or a traced value).

  Example:
    >>> [size_bucket(n) for n in (5, 9, 10000, 10240, 10241)]
    [5, 10, 10240, 10240, 12288]

  Reference: the module notes, "How it compiles" (size buckets, masked padding).
  """
  n = V.check_int(n, "n")
  if n <= 8:
    return n
  k = int(math.floor(math.log2(n)))
  for f in (1.0, 1.25, 1.5, 1.75, 2.0):
    b = int(f * 2**k)
    if b >= n:
      return b
  return 2 ** (k + 1)  # pragma: no cover


# --------------------------------------------------------------------------
# Result
# --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class StudyResult:
  """Named results of :func:`evaluate`.

  Attributes:
    models: model names, in the order given.
    values: metric name -> numpy array whose first axis is the models.
    axes: metric name -> axis names, e.g. ``("model", "num_bins")``,
      ``("model", "utility")``, ``("model", "component")``, ``("model",)``.
    coords: axis name -> coordinates (``num_bins``: the bin counts, in
      row-major order; ``component``: ``score, mcb, dsc, unc``; ``utility``:
      ``0..M-1``, positions up to the largest batch's ``M``: a batch of fewer
      utilities takes the first). An array of bin counts of two or more dimensions names its
      axes ``num_bins_0, num_bins_1, ...``, whose coordinates are positions.
    info: how the call ran (groups, buckets, mesh, compiled programs) and,
      for a study of one bin count (no ``num_bins`` axis), that count
      (``info["num_bins"]``).
  """

  models: tuple[str, ...]
  values: dict[str, np.ndarray]
  axes: dict[str, tuple[str, ...]]
  coords: dict[str, list]
  info: dict[str, Any]

  def __getitem__(self, metric: str) -> np.ndarray:
    return self.values[metric]

  def __contains__(self, metric: str) -> bool:
    return metric in self.values

  def __iter__(self) -> Iterator[str]:
    """The metric names (as a dict's keys: ``r[name]`` is that metric's values)."""
    return iter(self.values)

  @property
  def metrics(self) -> tuple[str, ...]:
    """The metric names, in the order computed."""
    return tuple(self.values)

  def to_dict(self) -> dict[str, Any]:
    """Plain nested lists and numbers (``json.dumps``-able)."""
    return {
      "models": list(self.models),
      "values": {k: np.asarray(v).tolist() for k, v in self.values.items()},
      "axes": {k: list(v) for k, v in self.axes.items()},
      "coords": {k: [_plain(x) for x in v] for k, v in self.coords.items()},
      "info": _plain(self.info),
    }

  def to_json(self, path: str | os.PathLike | None = None) -> str:
    """JSON text of :meth:`to_dict`; also written to ``path`` (``str`` or ``os.PathLike``) when given.

    Args:
      path: a file to write the text to (with a newline), or None.

    Returns:
      The JSON text (one-space indents).

    Raises:
      TypeError: ``path`` is not a path (``open`` took an int as a file
        descriptor: ``to_json(1)`` wrote to stdout and closed it).
    """
    if path is not None and not isinstance(path, str | os.PathLike):
      raise TypeError(
        f"path must be a str or os.PathLike file path, or None; got {path!r} "
        f"({type(path).__name__})"
      )
    text = json.dumps(self.to_dict(), indent=1)
    if path is not None:
      with open(path, "w") as f:
        f.write(text + "\n")
    return text

  def to_table(self) -> list[dict[str, Any]]:
    """Long ("tidy") rows ``{"model", "metric", <axis>: coordinate, "value"}``.

    One row per number; ``pandas.DataFrame(result.to_table())`` gives a
    data frame.
    """
    rows = []
    for metric, arr in self.values.items():
      axes = self.axes[metric]
      a = np.asarray(arr)
      many = len(axes) > 2 and axes[1].startswith("num_bins_")  # an array of bin counts of ndim > 1
      for idx in np.ndindex(a.shape):
        row: dict[str, Any] = {"model": self.models[idx[0]], "metric": metric}
        for ax, i in zip(axes[1:], idx[1:]):
          row[ax] = _plain(self.coords[ax][i])
        if many:  # the bin count at those positions
          row["num_bins"] = _plain(
            self.coords["num_bins"][np.ravel_multi_index(idx[1:], a.shape[1:])]
          )
        row["value"] = float(a[idx])
        rows.append(row)
    return rows

  def summary(self, num_bins: int | None = None) -> str:
    """A Markdown table: one row per model, one column per scalar summary.

    Binned errors at ``num_bins`` (default: the first bin count, in the
    row-major order of an array of bin counts of two or more dimensions), UC
    over sampled utilities as its median and maximum, decompositions as
    their MCB and DSC (a Brier decomposition's terms are of the multiclass
    Brier score divided by ``C``, and their columns say so).

    Args:
      num_bins: the bin count of the binned errors' column (default: the
        first evaluated).

    Returns:
      The Markdown table.

    Raises:
      ValueError: ``num_bins`` is not one bin count (a string ``'10'``, ``True``,
        an array, a traced value), or is a bin count the study did not evaluate.
    """
    cols: list[tuple[str, np.ndarray]] = []
    bins = self.coords.get("num_bins")
    one = self.info.get("num_bins")  # a study of one bin count (no axis)
    j = 0
    if isinstance(num_bins, jax.core.Tracer):  # int() of it raised JAX's ConcretizationTypeError
      raise ValueError(
        "num_bins of a summary must be a concrete bin count (a Python int), not a traced value"
      )
    if num_bins is not None:  # '10' read "num_bins = 10 was not evaluated", True as 1
      m = V.check_num_bins(num_bins)  # evaluate's rule: an int, or an integral float (15.0)
      if np.ndim(m) != 0:
        raise ValueError(f"num_bins must be one bin count, got {num_bins!r}")
      num_bins = int(m)
    if num_bins is not None and (bins is not None or one is not None):
      if num_bins not in (bins if bins is not None else [one]):
        raise ValueError(
          f"num_bins = {num_bins!r} was not evaluated; bin counts: {bins if bins else [one]}"
        )
      if bins is not None:
        j = bins.index(num_bins)
    for metric, arr in self.values.items():
      axes = self.axes[metric]
      a = np.asarray(arr, np.float64)
      if len(axes) == 1:
        binned = one is not None and _parse_metrics([metric])[0].family == "binned"
        cols.append((f"{metric}@{one}" if binned else metric, a))
      elif axes[1].startswith("num_bins"):
        cols.append((f"{metric}@{bins[j]}", a.reshape(a.shape[0], -1)[:, j]))
      elif axes[1] == "utility":
        cols.append((f"{metric} median", np.median(a, axis=1)))
        cols.append((f"{metric} max", np.max(a, axis=1)))
      else:  # a Brier decomposition is of the multiclass Brier / C (a log one of the log loss)
        scale = " (Brier/C)" if _DECOMPOSITIONS.get(metric, ("log",))[0] == "brier" else ""
        cols.append((f"{metric} mcb{scale}", a[:, 1]))
        cols.append((f"{metric} dsc{scale}", a[:, 2]))
    head = "| model | " + " | ".join(c for c, _ in cols) + " |"
    sep = "|---" * (len(cols) + 1) + "|"
    lines = [head, sep]
    for i, name in enumerate(self.models):
      lines.append(f"| {name} | " + " | ".join(f"{v[i]:.6g}" for _, v in cols) + " |")
    return "\n".join(lines)

  def __str__(self) -> str:
    return self.summary()


def _plain(x: Any) -> Any:
  if isinstance(x, dict):
    return {str(k): _plain(v) for k, v in x.items()}
  if isinstance(x, (list, tuple)):
    return [_plain(v) for v in x]
  if isinstance(x, np.generic):
    return x.item()
  if isinstance(x, np.ndarray):
    return x.tolist()
  return x


# --------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Metric:
  name: str  # result key
  family: str  # "binned", "score", "decompose", "uc_class", "uc"
  spec: tuple  # family-specific static data


def _parse_metrics(metrics: Sequence[str] | None) -> list[_Metric]:
  if metrics is None:
    metrics = DEFAULT_METRICS
  if isinstance(metrics, str):
    metrics = (metrics,)
  out, seen = [], set()
  for name in metrics:
    if not isinstance(name, str):
      raise ValueError(f"metric names must be strings, got {name!r}")
    if name in seen:
      continue
    seen.add(name)
    base, _, binning = name.partition(":")
    if base in _BINNED and (binning in ("", "fixed", "quantile")):
      fam, kind, default = _BINNED[base]
      if fam == "ecce" and binning == "quantile":
        raise ValueError("ecce uses fixed bins only; ask for 'ecce'")
      out.append(_Metric(name, "binned", (fam, kind, binning or default)))
    elif name in _SCORES:
      out.append(_Metric(name, "score", (name,)))
    elif name in _DECOMPOSITIONS:
      out.append(_Metric(name, "decompose", _DECOMPOSITIONS[name]))
    elif name in _UC_CLASS:
      out.append(_Metric(name, "uc_class", (_UC_CLASS[name],)))
    else:
      raise ValueError(
        f"unknown metric {name!r}; known: {', '.join(METRICS)} (binned errors also as "
        "'name:fixed' or 'name:quantile'; UC over sampled utilities through utilities=)"
      )
  return out


def _models(predictions: Any, labels: Any, names: Sequence[str] | None):
  """``[(name, x, y)]`` from a stack, a sequence or a mapping of predictions."""
  if isinstance(predictions, Mapping):
    keys = list(predictions)
    xs = [predictions[k] for k in keys]
    if isinstance(labels, Mapping):
      missing = [k for k in keys if k not in labels]
      if missing:
        raise ValueError(f"labels has no entry for the models {missing}")
      ys = [labels[k] for k in keys]
    else:
      ys = [labels] * len(xs)
    own = [str(k) for k in keys]
    if names is not None and list(names) != own:  # matched by position: relabelled the models
      raise ValueError(
        f"names {list(names)!r}: a dict of predictions is named by its keys {own!r}, and its "
        "labels are matched by key; drop names (or rename the keys)"
      )
    names = own
  elif isinstance(predictions, (list, tuple)):
    xs = list(predictions)
    if isinstance(labels, (list, tuple)):
      ys = list(labels)
    else:
      ys = [labels] * len(xs)
  else:
    x = (
      predictions
      if isinstance(predictions, jax.Array)
      else V.host_array(predictions, "predictions")
    )
    if x.ndim == 2:
      x = x[None]
    if x.ndim != 3:
      raise ValueError(
        f"predictions must be a stack (M, n, C), one (n, C) array, or a list/dict of (n, C) "
        f"arrays; got shape {tuple(x.shape)}"
      )
    if x.shape[0] == 0:
      raise ValueError(
        f"predictions is empty: a stack of M = 0 models (shape {tuple(x.shape)}); give at "
        "least one model"
      )
    y = labels if isinstance(labels, jax.Array) else V.host_array(labels, "labels")
    if y.ndim == 1:
      y = y[None]
    if y.ndim != 2 or y.shape[0] not in (1, x.shape[0]):
      raise ValueError(
        f"labels must be (n,) (shared by every model) or (M, n) = ({x.shape[0]}, n); got shape "
        f"{tuple(y.shape)}"
      )
    return [(None, x, y)]  # one stack, kept whole
  if len(ys) != len(xs):
    raise ValueError(f"got {len(xs)} predictions but {len(ys)} label arrays")
  if not xs:
    raise ValueError("predictions is empty: give at least one model")
  names = [f"model_{i}" for i in range(len(xs))] if names is None else list(names)
  bad = [nm for nm in names if not isinstance(nm, str)]
  if bad:  # a None name was taken for the mark of one stack: a misleading labels error
    raise ValueError(f"names must be strings, one per model; got {bad[0]!r}")
  if len(names) != len(xs):
    raise ValueError(
      f"names must be unique and one per model: {len(names)} names for {len(xs)} models"
    )
  return list(zip(names, xs, ys))


def _arrays_of(*args: Any) -> list[Any]:
  """The arrays of ``evaluate``'s predictions and labels (a dict's values, a list's items).

  Not ``jax.tree.leaves``: it sorts a dict's keys, and keys of mixed types
  (``{0: p, "b": q}``) raised JAX's "Comparator raised exception while
  sorting pytree dictionary keys".
  """
  out: list[Any] = []
  for a in args:
    if isinstance(a, Mapping):
      out.extend(a.values())
    elif isinstance(a, list | tuple):
      out.extend(a)
    else:
      out.append(a)
  return out


def _utility_batches(utilities: Any) -> dict[str, Any]:
  if utilities is None:
    return {}
  if isinstance(utilities, F.Utility):
    return {utilities.kind: utilities}
  if isinstance(utilities, Mapping):
    out: dict[str, Any] = {}
    for k, v in utilities.items():
      if str(k) in out:  # {1: A, "1": B} kept B alone (found by a review helper)
        raise ValueError(f"utilities has two batches named {str(k)!r}; give each its own name")
      out[str(k)] = v
    return out
  if isinstance(utilities, (list, tuple)):
    out = {}
    for u in utilities:
      if not isinstance(u, F.Utility):
        raise ValueError(f"utilities entries must be Utility batches, got {type(u).__name__}")
      key = u.kind
      i = 1
      while key in out:
        key, i = f"{u.kind}_{i}", i + 1
      out[key] = u
    return out
  raise ValueError(
    "utilities must be a Utility batch, a list of them, or a dict name -> Utility batch "
    f"(or name -> function of the class count returning one); got {type(utilities).__name__}"
  )


def _checked_params(u: F.Utility, num_classes: int, name: str) -> jax.Array:
  """``u``'s parameters through :func:`~jaxcal._src.utility.families.check_utility`.

  Concrete parameters: the shape and value checks (a bad value raises).
  Traced ones (inside the study program): bad values come back as NaN.
  """
  return F.check_utility(u, num_classes, batched=True, name=name).params


def _utilities_for(batches: dict[str, Any], num_classes: int) -> dict[str, F.Utility]:
  """The utility batches for ``C`` classes, shape-checked only.

  The value checks (finite, in ``[-1, 1]``) run inside the study program
  (:func:`_program`), which reports a flag; :func:`evaluate` re-checks
  eagerly (and raises) only when the flag is down, so a call compiles no
  validation program per utility batch.
  """
  out = {}
  for name, u in batches.items():
    v = u(num_classes) if callable(u) and not isinstance(u, F.Utility) else u
    label = f"utilities[{name!r}]"
    if not isinstance(v, F.Utility):
      F.check_utility(v, num_classes, batched=True, name=label)  # raises: not a Utility
    jax.eval_shape(
      lambda prm, kind=v.kind, label=label: _checked_params(
        F.Utility(prm, kind), num_classes, label
      ),
      v.params,
    )
    out[name] = v
    if out[name].batch_shape[0] == 0:
      raise ValueError(f"utilities[{name!r}] is an empty batch")
  return out


def _default_mesh(num_devices: int, group_sizes: list[int], util_sizes: list[int]) -> Mesh:
  """All devices as ``(models, utilities)``, shaped to balance the UC work.

  Without utilities every device is on ``models``. With them, the shape
  minimises the per-device UC work ``sum_groups ceil(M_g / dm) *
  sum_batches ceil(U_b / du)`` (padding included), ties to the larger ``dm``.
  """
  devs = np.array(jax.devices()[:num_devices])
  if not util_sizes:
    return Mesh(devs.reshape(-1, 1), ("models", "utilities"))

  def cost(dm: int) -> int:
    du = num_devices // dm
    return sum(-(-g // dm) for g in group_sizes) * sum(-(-u // du) for u in util_sizes)

  options = [d for d in range(1, num_devices + 1) if num_devices % d == 0]
  dm = min(options, key=lambda d: (cost(d), -d))
  return Mesh(devs.reshape(dm, num_devices // dm), ("models", "utilities"))


def _mesh_sizes(mesh: Mesh) -> tuple[int, int]:
  if not isinstance(mesh, Mesh):
    raise ValueError(
      "mesh must be a jax.sharding.Mesh with a 'models' axis (and optionally 'utilities'), "
      f"or None for every device; got {type(mesh).__name__} {mesh!r}"
    )
  names = mesh.axis_names
  if "models" not in names:
    raise ValueError(f"mesh must have a 'models' axis (and optionally 'utilities'); got {names}")
  extra = [a for a in names if a not in ("models", "utilities")]
  if extra:
    raise ValueError(f"mesh axes must be 'models' and 'utilities'; got extra axes {extra}")
  du = mesh.shape["utilities"] if "utilities" in names else 1
  return mesh.shape["models"], du


# --------------------------------------------------------------------------
# The compiled program of one (C, bucket) stack
# --------------------------------------------------------------------------


def _binned_all(p, y, w, bins, specs, max_bins, weights):
  """Binned errors ``specs`` of one model at every bin count, sharing the per-bin sums.

  The errors are functions of the per-bin residual sums of two kinds of
  binary rows: the top-label row (confidence ``c = max p`` against ``z =
  [argmax p = y]``) and the ``C`` class-wise rows (``p_r`` against ``[y =
  r]``), each on fixed or quantile bins. Each (rows, binning) pair needed
  is summed once (:func:`~jaxcal._src.binning.binned_residual_sums`, exact
  integer engine), under one ``vmap`` over the bin counts (what does not
  depend on the bin count, the sort or the edge histogram, is computed once),
  and every requested error is a reduction of those sums. When both kinds of
  rows use one binning, they go through one engine call as ``C + 1`` rows
  (``[p, c]`` against ``[onehot(y), z]``): the compiled program holds at
  most two engines (fixed and quantile), whatever the metrics. ECCE's cumulative
  sums are taken with ``sign=+1``: the engine is exact, so ``|S|`` equals
  ``|-S|`` bit for bit.

  Args:
    p: ``(n, C)`` probabilities.
    y: ``(n,)`` labels.
    w: ``(n,)`` bool sample mask or ``None``.
    bins: ``(K,)`` int32 bin counts in ``[1, max_bins]``.
    specs: ``{name: (family, kind, binning)}`` (family ``conf``,
      ``classwise`` or ``ecce``).
    max_bins: static bound.
    weights: ``(C,)`` class weights.

  Returns:
    dict name -> ``(K,)``.
  """
  need: dict[tuple[str, str], bool] = {}  # (rows, binning) -> counts needed
  for fam, _, binning in specs.values():
    key = ("conf" if fam == "conf" else "classwise", binning)
    need[key] = need.get(key, False) or fam == "ecce"
  n = CE._count(w, p.shape[0], p.dtype)
  if any(rows == "conf" for rows, _ in need):
    c = jnp.max(p, axis=-1)
    z = CE._correct(p, y, c)

  num_classes = p.shape[-1]
  both = {b for r, b in need if r == "conf" and ("classwise", b) in need}
  if both:  # the C class-wise rows and the top-label row, binned by one engine call
    rows_s = jnp.concatenate([p, c[:, None]], axis=1)
    rows_b = jnp.concatenate([y[:, None] == jnp.arange(num_classes)[None, :], z[:, None]], axis=1)
    rows_w = None if w is None else w[:, None]

  def at(m):
    sums = {}
    for binning in both:
      counts = need["conf", binning] or need["classwise", binning]
      bs = B.binned_residual_sums(
        rows_s, rows_b, m, binning, max_bins, where=rows_w, axis=0, counts=counts
      )
      sums["classwise", binning] = jax.tree.map(lambda a: a[:num_classes], bs)
      sums["conf", binning] = jax.tree.map(lambda a: a[num_classes], bs)
    for (rows, binning), counts in need.items():
      if binning in both:
        continue
      if rows == "conf":
        bs = B.binned_residual_sums(c, z, m, binning, max_bins, where=w, counts=counts)
      else:
        bs = CE._per_class_sums(p, y, m, binning=binning, max_bins=max_bins, where=w, counts=counts)
      sums[rows, binning] = bs
    out = {}
    for name, (fam, kind, binning) in specs.items():
      if fam == "conf":
        out[name] = CE._conf_from_sums(sums["conf", binning], z, n, kind=kind, where=w)
      elif fam == "classwise":
        out[name] = CE._classwise_from_sums(sums["classwise", binning], n, weights, kind=kind)
      else:  # ecce (reduction "mean")
        out[name] = CE._ecce_from_sums(sums["classwise", "fixed"], n, weights)
    return out

  return jax.vmap(at)(bins)


def binned_errors(
  p: jax.Array,
  y: jax.Array,
  where: jax.Array | None,
  bins: jax.Array,
  names: Sequence[str],
  binning: str | None,
  max_bins: int,
) -> dict[str, jax.Array]:
  """Binned errors ``names`` of one data set at every bin count of ``bins`` (traceable).

  Args:
    p: ``(n, C)`` probabilities.
    y: ``(n,)`` labels.
    where: ``(n,)`` bool sample mask or ``None``.
    bins: ``(K,)`` int32 bin counts, each in ``[1, max_bins]``.
    names: metric names of :data:`METRICS`'s binned errors.
    binning: ``"fixed"``/``"quantile"`` for all, or ``None`` for each one's default.
    max_bins: static bound.

  Returns:
    dict name -> ``(K,)``.
  """
  weights = CE._class_weights(None, p.shape[-1], p.dtype)
  specs = {}
  for name in names:
    fam, kind, default = _BINNED[name]
    specs[name] = (fam, kind, binning or default)
  return _binned_all(p, y, where, bins, specs, max_bins, weights)


def _scalar_metrics(p, y, w, bins, metrics, max_bins, logits=None):
  """Every metric without a utility axis, for one model: dict name -> array.

  ``logits``: the model's logits when ``p`` is their softmax; the log loss is
  then computed from them, as ``scores.log_loss(..., from_logits=True)`` does
  (the log of the float32 softmax is 6 % off a near-perfect model's 1e-6).
  """
  c = p.shape[-1]
  weights = CE._class_weights(None, c, p.dtype)
  specs = {mt.name: mt.spec for mt in metrics if mt.family == "binned"}
  out = _binned_all(p, y, w, bins, specs, max_bins, weights) if specs else {}
  # every decomposition of the data set from one set of isotonic fits
  dec_specs = tuple(dict.fromkeys(mt.spec for mt in metrics if mt.family == "decompose"))
  decs = dict(zip(dec_specs, decompose_many(p, y, dec_specs, w))) if dec_specs else {}
  for mt in metrics:
    if mt.family == "score":
      if logits is not None and mt.name == "log_loss":
        losses = S._log_loss_of_logits(logits, y)
      else:
        losses = _SCORES[mt.name](p, y)
      if w is None:
        out[mt.name] = jnp.mean(losses)
      else:
        out[mt.name] = jnp.sum(jnp.where(w, losses, 0.0)) / jnp.sum(w).astype(p.dtype)
    elif mt.family == "decompose":
      out[mt.name] = jnp.stack(decs[mt.spec])
    elif mt.family == "uc_class":
      chunk = SW.default_chunk_size("linear", p.shape[0], c)
      out[mt.name] = SW.uc_class_core(p, y, mt.spec[0], chunk, w)
  return out


#: Key of the program's flag "every utility passed the value checks".
_UTILITIES_OK = "__utilities_ok"


@functools.cache
def _program(
  metrics: tuple[_Metric, ...],
  max_bins: int,
  kinds: tuple[tuple[str, str, int, int], ...],  # (position, kind, m, chunk)
  mesh: Mesh,
  masked: bool,
  from_logits: bool,
):
  """Jitted ``f(x, y, where, bins, *params) -> dict`` for a padded model stack.

  Every model's results come back, the padding models' too (the caller reads
  the real ones): the number of real models is not part of the program.
  """
  dm, du = _mesh_sizes(mesh)
  has_u = "utilities" in mesh.axis_names
  scalar = list(metrics)

  def probs(x):
    return jax.nn.softmax(x, axis=-1) if from_logits else x

  def block(x, y, w, bins, *params):
    # x: (Mb, n, C) this row's models; params: (U_loc, ...) this column's utilities
    mb = x.shape[0]
    sub = mb // du
    j = jax.lax.axis_index("utilities") if (has_u and du > 1) else 0
    xs = jax.lax.dynamic_slice_in_dim(x, j * sub, sub) if du > 1 else x
    ys = jax.lax.dynamic_slice_in_dim(y, j * sub, sub) if du > 1 else y
    ws = None
    if masked:
      ws = jax.lax.dynamic_slice_in_dim(w, j * sub, sub) if du > 1 else w

    def one(args):
      xi, yi, wi = args
      logits = xi if from_logits else None
      return _scalar_metrics(probs(xi), yi, wi, bins, scalar, max_bins, logits)

    res = jax.lax.map(one, (xs, ys, ws))
    if du > 1:
      res = jax.lax.all_gather(res, "utilities", axis=0, tiled=True)
    if kinds:
      res = dict(res)
      c = x.shape[-1]
      checked = [
        _checked_params(F.Utility(prm, kind), c, f"utilities[{name!r}]")
        for (name, kind, _, _), prm in zip(kinds, params)
      ]
      # this device's utilities all passed the value checks (bad ones are NaN now)
      res[_UTILITIES_OK] = jnp.all(jnp.stack([jnp.all(jnp.isfinite(u)) for u in checked]))[None]

      def one_uc(args):
        xi, yi, wi = args
        pi = probs(xi)
        return tuple(
          SW.sweep_results(kind, pi, yi, prm, chunk, wi).value
          for (_, kind, _, chunk), prm in zip(kinds, checked)
        )

      ucs = jax.lax.map(one_uc, (x, y, w if masked else None))
      for (name, _, _, _), v in zip(kinds, ucs):
        res["uc:" + name] = v
    return res

  rows = P("models")
  out_specs = {mt.name: rows for mt in scalar}
  for name, _, _, _ in kinds:
    out_specs["uc:" + name] = P("models", "utilities") if has_u else rows
  if kinds:
    out_specs[_UTILITIES_OK] = P(("models", "utilities")) if has_u else rows
  in_specs = (rows, rows, rows if masked else P(), P()) + tuple(
    (P("utilities") if has_u else P()) for _ in kinds
  )
  sharded = jax.shard_map(block, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False)

  def run(x, y, w, bins, *params):
    out = sharded(x, y, w, bins, *params)
    ok = jnp.all(out.pop(_UTILITIES_OK)) if kinds else jnp.bool_(True)
    out[_UTILITIES_OK] = ok
    for name, _, m, _ in kinds:
      out["uc:" + name] = out["uc:" + name][:, :m]
    return out

  return jax.jit(run, out_shardings=NamedSharding(mesh, P()))


# --------------------------------------------------------------------------
# evaluate
# --------------------------------------------------------------------------


def _check(x2, y1, from_logits: bool, where=None) -> None:
  """Predictions and labels of one ``(n, C)`` data set, in one fused device pass.

  ``where``: the real rows of every process's shard assembled (rows named as
  the union's).
  """
  V.check_predictions(x2, y1, from_logits=from_logits, where=where, padding=where is not None)


def _validate_stack(
  x, y, sizes: list[int], names: list[str], from_logits: bool, where=None, parts=None
) -> None:
  """One validation of a padded ``(M, n, C)`` stack (its 2-D view) through the validation layer.

  One compiled reduction per stack shape (the padding rows are valid by
  construction in any dtype: probabilities ``(1, 0, ..., 0)`` or zero
  logits, label 0; or, with
  ``where``, the ``(M, n)`` mask of the rows of a stack assembled across
  processes, not checked). ``parts``: models of different dtypes
  (:attr:`_Stack.parts`, without ``where``): one reduction per dtype, each
  at that dtype's tolerance. On failure, the models are checked one by one
  (each in its own dtype) to name the first bad one.
  """
  parts = parts or [(list(range(len(sizes))), x, y)]
  try:
    flat = None if where is None else where.reshape((-1,))
    for _, x_d, y_d in parts:
      _check(x_d.reshape((-1, x_d.shape[-1])), y_d.reshape((-1,)), from_logits, flat)
  except ValueError as e:
    own = {i: (x_d, y_d, r) for at, x_d, y_d in parts for r, i in enumerate(at)}
    for i, (k, name) in enumerate(zip(sizes, names)):
      x_d, y_d, r = own[i]
      try:
        if where is None:
          _check(x_d[r, :k], y_d[r, :k], from_logits)
        else:
          _check(x_d[r], y_d[r], from_logits, where[i])
      except ValueError as e_model:
        raise ValueError(f"model {name!r}: {e_model}") from None
    raise ValueError(f"models {names}: {e}") from None


def _xp(*arrays):
  return np if all(isinstance(a, np.ndarray) for a in arrays) else jnp


def _across_devices(x) -> bool:
  """A device array split over several devices (not one device's, not replicated)."""
  return (
    isinstance(x, jax.Array)
    and len(x.sharding.device_set) > 1
    and not x.sharding.is_fully_replicated
  )


@dataclasses.dataclass
class _Stack:
  """Models of one class count padded to one row count: ``x (M, n, C)``, ``y (M, n)``."""

  index: list[int]  # positions in the model order
  x: Any
  y: Any
  where: Any  # (M, n) bool (always for a list of models), or None for a caller's stack
  sizes: list[int]  # real rows per model
  # models of different dtypes: per dtype, (positions in this stack, x, y) of its
  # models stacked in that dtype, validated at its tolerance (x is then in at
  # least float32); None when the models share one dtype (x is in it)
  parts: list[tuple[list[int], Any, Any]] | None = None


def _labels_array(y, n: int, name: str):
  ya = y if isinstance(y, jax.Array) else V.host_array(y, f"labels of model {name!r}")
  if ya.shape != (n,):
    raise ValueError(f"model {name!r}: labels must have shape ({n},), got {tuple(ya.shape)}")
  return ya


#: Models of one class count share one padded size while the group's padded
#: rows stay within this factor of its real rows (at most half padding).
MAX_PADDING = 2.0


def _shared_buckets(sizes: Sequence[int]) -> list[int]:
  """The padded size of each model of one class count: as few distinct sizes as padding allows.

  Largest first: a model joins the current group (padded to the group's
  bucket, :func:`size_bucket` of its largest model) while the group's padded
  rows stay within :data:`MAX_PADDING` times its real rows; otherwise it
  opens a group of its own. Each distinct size is one compiled program.
  """
  out = [0] * len(sizes)
  nb, count, real = 0, 0, 0
  for i in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
    k = int(sizes[i])
    if count and (count + 1) * nb <= MAX_PADDING * (real + k):
      count, real = count + 1, real + k
    else:
      nb, count, real = size_bucket(k), 1, k
    out[i] = nb
  return out


def _list_stacks(entries, from_logits: bool) -> dict[int, list[_Stack]]:
  """Groups models by ``C``, then by shared padded size; pads and stacks each group."""
  models: dict[int, list] = {}
  for i, (name, x, y) in enumerate(entries):
    xa = x if isinstance(x, jax.Array) else V.host_array(x, f"predictions of model {name!r}")
    if xa.ndim != 2 or xa.shape[0] == 0:
      raise ValueError(f"model {name!r}: predictions must be (n, C) with n >= 1, got {xa.shape}")
    ya = _labels_array(y, xa.shape[0], name)
    # grouped by compute dtype too: a float32 model stacked with a float64 one
    # (under x64) was binned in float64, its ConfECE 16 % off its own call's
    key = (int(xa.shape[1]), np.dtype(V.compute_dtype(xa.dtype)).name)
    models.setdefault(key, []).append((i, xa, ya))
  by_c: dict[tuple[int, str], dict[int, list]] = {}
  for key, mem in models.items():
    for entry, nb in zip(mem, _shared_buckets([xa.shape[0] for _, xa, _ in mem])):
      by_c.setdefault(key, {}).setdefault(nb, []).append(entry)
  out: dict[int, list[_Stack]] = {}
  for (c, _), buckets in by_c.items():
    for nb, mem in sorted(buckets.items()):
      xs = tuple(xa for _, xa, _ in mem)
      ys = tuple(ya for _, _, ya in mem)
      host = _xp(*xs, *ys) is np
      # the dtypes the padded models have: a device stack holds a numpy model in
      # JAX's dtype (float64 as float32 without x64)
      dtypes = [xa.dtype if host else jax.dtypes.canonicalize_dtype(xa.dtype) for xa in xs]
      parts_at = None
      if len(set(dtypes)) > 1:
        parts_at = tuple(
          tuple(j for j, d in enumerate(dtypes) if d == dt) for dt in dict.fromkeys(dtypes)
        )
      if host:  # numpy pads on the host, for free
        x, y, part_xy = _pad_stack(xs, ys, nb, from_logits, parts_at, xp=np)
      else:  # one compiled program for the group, whatever its models' lengths
        per_model = any(_across_devices(a) for a in (*xs, *ys)) or (
          sum(int(xa.shape[0]) for xa in xs) >= np.iinfo(np.int32).max  # no int32 row index
        )
        x, y, part_xy = _pad_stack_device(xs, ys, nb, from_logits, parts_at, per_model)
      parts = None
      if parts_at is not None:
        parts = [(list(at), px, py) for at, (px, py) in zip(parts_at, part_xy)]
      sizes = [int(xa.shape[0]) for xa in xs]
      # a mask even when no model is padded (n the bucket's size): one program per bucket
      w = np.arange(nb)[None, :] < np.asarray(sizes)[:, None]
      out.setdefault(c, []).append(_Stack([i for i, _, _ in mem], x, y, w, sizes, parts))
  return out


def _padded(arrays, pad, nb: int, xp, per_model: bool = False):
  """``arrays`` (``(n_i, ...)``, ``n_i <= nb``) each filled up to ``nb`` rows with ``pad``, stacked: ``(M, nb, ...)``.

  In the dtype a concatenation of ``arrays`` and ``pad`` has; the rows are
  copied, bit for bit. A device program's size does not grow with the
  number of distinct ``n_i`` (a concatenation per model, stacked, compiled
  for 5-6 s at 128 models): one concatenation and one gather whose index
  comes from the static sizes (model ``j``'s row ``r`` is its own row while
  ``r < n_j``, else the ``pad`` row at the end; 0.1 s at 128 models).
  ``per_model``: for arrays split over devices (the partitioner gathers a
  gather's operand to every device) or of ``2^31`` rows and more (beyond an
  int32 index): each array is zero-padded by itself and its padding rows set
  to ``pad``, which the partitioner runs with collective permutes, the rows
  sharded as the models are (a larger program: 3.4 s at 128 models on 4 devices).
  """
  sizes = np.array([a.shape[0] for a in arrays], np.int64)
  if per_model:
    dt = xp.result_type(*arrays, pad)
    zero = [
      xp.pad(a.astype(dt), ((0, nb - a.shape[0]),) + ((0, 0),) * (a.ndim - 1)) for a in arrays
    ]
    tail = (1,) * (pad.ndim - 1)
    padding = (np.arange(nb)[None, :] >= sizes[:, None]).reshape(sizes.shape + (nb,) + tail)
    return xp.where(padding, pad[None], xp.stack(zero))  # all of rank 1 + pad.ndim
  starts = np.cumsum(sizes) - sizes
  flat = xp.concatenate([*arrays, pad])
  r = xp.arange(nb)[None, :]
  return flat[xp.where(r < sizes[:, None], starts[:, None] + r, int(sizes.sum()))]


def _pad_stack(xs, ys, nb: int, from_logits: bool, parts_at, per_model: bool = False, xp=jnp):
  """Models ``(n_i, C)`` and labels ``(n_i,)`` padded to ``nb`` rows and stacked: ``x (M, nb, C)``, ``y (M, nb)``.

  The padding rows are valid in any dtype (an int or bfloat16 row of 1/C is
  not): zero logits, or the probabilities ``(1, 0, ..., 0)``; label 0 (on
  the device an ``int`` 0, which promotes the labels as the stack always
  has). ``parts_at``: ``None`` when the models share one dtype (``x`` is in
  it); otherwise the positions of each dtype's models, which are also
  stacked in their own dtype (``parts``, one ``(x_d, y_d)`` per entry, for
  the validation at that dtype's tolerance), while ``x`` holds each model in
  its compute dtype, at least float32 (a stack promotes its models to one
  dtype: bfloat16 with float32 gives float32, whose simplex tolerance is
  not theirs; int32 with bfloat16 would give bfloat16).

  With ``xp = np`` on the host; device arrays through
  :func:`_pad_stack_device`, one compiled program per group (eager ``jnp``
  padding compiled three to four programs per distinct model length: 128
  models of 128 lengths took 24 s). ``per_model``: see :func:`_padded`.
  """
  c = xs[0].shape[1]

  def rows(group, upcast=False):
    models = [V.upcast(a) for a in group] if upcast else list(group)
    dt = models[0].dtype
    row = xp.zeros((1, c), dt) if from_logits else xp.eye(1, c, dtype=dt)
    return _padded(models, row, nb, xp, per_model)

  def labels(group):
    zero = xp.zeros((1,), dtype=group[0].dtype if xp is np else int)
    return _padded(group, zero, nb, xp, per_model)

  if parts_at is None:
    return rows(xs), labels(ys), ()
  parts = tuple((rows([xs[j] for j in at]), labels([ys[j] for j in at])) for at in parts_at)
  return rows(xs, upcast=True), labels(ys), parts


#: :func:`_pad_stack` of device arrays as one program, keyed by the models'
#: shapes and dtypes; a global array spanning processes is padded by a
#: global computation, where its rows live.
_pad_stack_device = jax.jit(_pad_stack, static_argnums=(2, 3, 4, 5))


def _pad_models(st: _Stack, total: int) -> _Stack:
  """Repeats model 0 up to ``total`` models (their results are dropped)."""
  k = st.x.shape[0]
  if k == total:
    return st

  def pad(a):
    if a is None:
      return None
    xp = _xp(a)
    return xp.concatenate([a, xp.broadcast_to(a[:1], (total - k,) + a.shape[1:])])

  return _Stack(st.index, pad(st.x), pad(st.y), pad(st.where), st.sizes)


def _put(a, sharding: NamedSharding):
  """On ``sharding``: numpy by blocks (each device gets its own), device arrays device-to-device."""
  if V.spans_processes(a):
    return a
  if isinstance(a, np.ndarray):
    return jax.make_array_from_callback(a.shape, sharding, lambda idx: a[idx])
  return SW.placed(a, sharding)


def _uc_chunk(kind: str, n: int, c: int, local: int, chunk_size: int | None) -> int:
  chunk = chunk_size or SW.default_chunk_size(kind, n, c)
  return SW._balanced_chunk(local, min(int(chunk), local))


def evaluate(
  predictions: Any,
  labels: Any,
  metrics: Sequence[str] | None = None,
  *,
  num_bins: ArrayLike = 15,
  utilities: Any = None,
  from_logits: bool = False,
  names: Sequence[str] | None = None,
  mesh: Mesh | None = None,
  chunk_size: int | None = None,
) -> StudyResult:
  """Every metric of every model, for every bin count and utility, in one compiled call per class count.

  For each model ``f`` (predictions ``p_i``, labels ``y_i``, ``n`` samples) and
  each requested metric: the binned errors (``conf_ece``, ``conf_ce``,
  ``conf_ce_corr``, ``classwise_ce``, ``classwise_ece``, ``ecce``; each at
  every bin count of ``num_bins``, with its default binning or
  ``"name:fixed"`` / ``"name:quantile"``), the mean proper scores
  (``brier``, ``log_loss``, ``spherical``, ``classification_error``,
  ``confidence_loss``), the score decompositions ``S = MCB - DSC + UNC``
  (``decompose``, ``decompose:normalized``, ``decompose:log``,
  ``decompose:log:normalized``), the worst UC over a finite family
  (``uc_tce``, ``uc_cwe``, ``uc_topk``, ``uc_comb``); and for each batch of
  ``utilities`` ``U`` the errors ``UC(f, u; S)``, ``u in U``, always
  computed and stored under the result key ``"uc:<name>"`` (not a name to
  list in ``metrics``).
  Each number equals the matching one-shot function of :mod:`jaxcal.metrics`,
  :mod:`jaxcal.scores` or :mod:`jaxcal.utility` on that model alone, up to
  float32 rounding; for a UC that rounding can move ties: two samples whose
  float32 predicted utilities round equal in one program (but not in the
  other) are one group of the UC rule, so the worst interval can differ by
  about one sample's residual over n (CIFAR-100, n = 2,000, rank
  utilities: 1.7e-4 relative, the padded program nearer float64). With
  ``from_logits=True`` the softmax of a padded model can differ by an ulp
  from the one-shot call's (XLA:CPU rounds arrays of fewer than 4,096
  entries differently), which moves exact ties at 1.0 between quantile
  bins: ``conf_ce_corr`` with 4 bins of 240 temperature-scaled CIFAR-10 rows
  padded to 448 differed by 1.9 %; pass probabilities for bitwise equality.

  Args:
    predictions: a stack ``(M, n, C)``, one ``(n, C)`` array, a list of
      ``(n_i, C_i)`` arrays, or a dict name -> ``(n_i, C_i)`` array;
      probabilities, or logits with ``from_logits=True``. Models with
      different ``C`` are evaluated in separate groups; in a list or dict,
      different ``n`` are padded to shared size buckets and masked (a stack
      runs unpadded: one program per ``n``).
    labels: ``(M, n)`` or ``(n,)`` (shared) for a stack; a list (or one
      ``(n,)`` array shared by all) for a list; a dict or one array for a dict.
    metrics: metric names (default :data:`DEFAULT_METRICS`); see above.
    num_bins: a bin count or an int array of them. The binned errors get
      one axis per dimension of the array: a 1-D array of ``K`` counts adds
      a ``num_bins`` axis of length ``K``; an array of ``d >= 2`` dimensions
      adds ``d`` axes ``num_bins_0, ..., num_bins_{d-1}`` of its shape
      (coordinates: positions; ``coords["num_bins"]`` holds the counts in
      row-major order); an int or a 0-d array adds none (the count is in
      ``info["num_bins"]``).
    utilities: a Utility batch, a list of them, or a dict name -> batch; a
      dict value may also be a function ``C -> batch`` (e.g.
      ``lambda c: utility.sample_linear(key, 1500, c)``) for studies with
      several class counts.
    from_logits: ``predictions`` are logits (a softmax is applied inside
      the compiled call).
    names: model names (default: the dict keys, or ``model_0``, ...); a
      dict is named by its keys (other ``names`` are refused).
    mesh: a ``jax.sharding.Mesh`` with axes ``("models", "utilities")`` or
      ``("models",)``; default: every device, see the module notes.
    chunk_size: utilities evaluated together per device in UC sweeps
      (default: :func:`jaxcal._src.utility.sweep.chunk_bytes` of working set
      per chunk: 256 MiB on a CPU, up to 4 GiB on an accelerator). It and
      the mesh can move a UC by up to ``4/n`` where samples are nearly tied
      (see :func:`jaxcal.utility.uc_sweep`); the other metrics do not move.

  Returns:
    :class:`StudyResult`: ``values[metric]`` is ``(M,)`` (scores, UC
    families), ``(M,) + num_bins.shape`` (binned errors: ``(M,)`` for one
    bin count, ``(M, K)`` for a 1-D array of ``K``), ``(M, 4)``
    (decompositions: score, mcb, dsc, unc) or ``(M, U)`` (UC over ``U``
    utilities); ``to_table()``, ``to_dict()``, ``to_json()``, ``summary()``.

  Raises:
    ValueError: bad predictions or labels (naming the model), an unknown
      metric, bad bin counts (or a quantile bin count above a model's ``n``),
      utilities whose ``C`` does not match, ``from_logits`` other than
      ``True``/``False``, or a ``mesh`` that is not a
      ``jax.sharding.Mesh`` with a ``models`` axis.

  Example:
    >>> import jax, jax.numpy as jnp
    >>> from jaxcal import metrics
    >>> p = jax.nn.softmax(jax.random.normal(jax.random.key(0), (3, 50, 4)))
    >>> y = jax.random.randint(jax.random.key(1), (3, 50), 0, 4)
    >>> res = evaluate(p, y, ["conf_ece", "brier"], num_bins=jnp.array([5, 15]))
    >>> res["conf_ece"].shape, res.axes["conf_ece"]
    ((3, 2), ('model', 'num_bins'))
    >>> bool(abs(res["conf_ece"][1, 0] - metrics.conf_ece(p[1], y[1], 5)) < 1e-6)
    True

  Reference: Lu, Wu, Hartline & Hu (2025), Truthful Calibration Errors for
  Multi-Class Prediction, §3 and §5 (binned errors over many bin counts);
  Hegazy, Jordan & Dieuleveut (2025), Scalable Utility-Aware Multiclass
  Calibration, §4-5 (UC over sampled utilities); Resin (2025), Calibration in
  Context: A Case Study with Score Decompositions, §2.4 (decompositions).
  """
  # (concrete arrays closed over by a user's jit too: they failed deep inside with JAX's error)
  traced = not V.is_concrete(*_arrays_of(predictions, labels)) or not V._trace_clean()
  if not traced and not jax.sharding.get_abstract_mesh().empty:
    # inside a caller's jax.set_mesh: JAX refused the study's programs, sharded on a mesh
    # of their own, in that context; they run outside it (the results are host arrays)
    with jax.set_mesh(None):
      return evaluate(
        predictions,
        labels,
        metrics,
        num_bins=num_bins,
        utilities=utilities,
        from_logits=from_logits,
        names=names,
        mesh=mesh,
        chunk_size=chunk_size,
      )
  mets = _parse_metrics(metrics)
  if traced or V.checking():  # checked mode traces the programs evaluate reads back
    raise ValueError(
      "evaluate runs eagerly (it picks programs and meshes from the data's shapes and "
      "sizes) and cannot be traced under jax.jit / vmap / checked: call it outside, or use "
      "the metrics of jaxcal.metrics inside"
    )
  from_logits = V.check_flag(from_logits, "from_logits")
  if isinstance(names, str | bytes):  # list("ab") would name two models "a" and "b"
    raise ValueError(f"names must be a sequence of model names (e.g. a list), got {names!r}")
  if mesh is not None:
    _mesh_sizes(mesh)  # a bad mesh fails before any data is read
  m = V.check_num_bins(num_bins)  # concrete: a traced one means a trace, refused above
  bins_shape = () if isinstance(m, int) else tuple(np.shape(m))
  bins_np = np.atleast_1d(np.asarray(m, np.int32)).reshape(-1)
  if bins_np.size == 0:
    raise ValueError("num_bins is an empty array; give at least one bin count")
  max_bins = V.bucket(int(bins_np.max()))  # new bin arrays of this bound reuse the program
  V.check_bin_arrays(bins_np.size, max_bins)  # before any data is read
  if chunk_size is not None and (
    isinstance(chunk_size, bool) or not isinstance(chunk_size, (int, np.integer)) or chunk_size < 1
  ):
    raise ValueError(f"chunk_size must be a positive int, got {chunk_size!r}")
  ubatches = _utility_batches(utilities)
  multi = jax.process_count() > 1

  def one_stack():
    """``(entries, x, y)``: the models, and the one stack's arrays (or ``None``)."""
    entries = _models(predictions, labels, names)
    if entries[0][0] is None:  # one stack (M, n, C), kept whole
      _, x, y = entries[0]
      if y.shape[0] == 1 and x.shape[0] > 1:
        y = _xp(y).broadcast_to(y, (x.shape[0],) + y.shape[1:])
      if y.shape != x.shape[:2]:
        raise ValueError(f"labels must have shape {x.shape[:2]} for predictions of shape {x.shape}")
      return entries, x, y
    if multi:
      raise ValueError(
        "in a multi-process run a list or dict of models is not supported, of host-local or "
        "global arrays: pass one stack (M, n_local, C) of this process's rows, or one global "
        "jax.Array stack (M, n, C) or (n, C)"
      )
    return entries, None, None

  # a shape error on one process of a multi-process run raises on every process
  entries, x, y = V.on_every_process(
    one_stack,
    same=lambda out: {
      "the number of models M": out[1].shape[0],
      "the class count C of predictions": out[1].shape[2],
      "the dtype of predictions": jax.dtypes.canonicalize_dtype(out[1].dtype),
      # every argument too: a difference mixed the processes' results or hung a collective
      "metrics": V.digest([mt.name for mt in mets]),
      "num_bins": V.digest(f"{bins_shape}: {bins_np.tolist()}"),
      "from_logits": from_logits,
      "names": V.digest(None if names is None else [str(s) for s in names]),
      "the utility batches": V.digest(list(ubatches)),
      "chunk_size": chunk_size,
      # another device order stalled 30 s in Gloo's setup, then failed on both
      "mesh": V.digest(
        None
        if mesh is None
        else (dict(mesh.shape), [dev.id for dev in np.asarray(mesh.devices).flat])
      ),
    },
  )
  if x is not None:
    num_models = x.shape[0]
    model_names = [f"model_{i}" for i in range(num_models)] if names is None else list(names)
    groups = {
      int(x.shape[2]): [_Stack(list(range(num_models)), x, y, None, [x.shape[1]] * num_models)]
    }
  else:
    num_models = len(entries)
    model_names = [str(e[0]) for e in entries]
    groups = _list_stacks(entries, from_logits)
  model_names = [str(s) for s in model_names]
  if len(set(model_names)) != num_models or len(model_names) != num_models:
    raise ValueError(f"model names must be unique and one per model, got {model_names}")

  us_by_c = {c: _utilities_for(ubatches, c) for c in groups}  # each function called once per C
  if multi and ubatches:  # the utilities themselves (drawn per process, they differed silently)
    V.on_every_process(
      lambda: None,
      same=lambda _: {
        f"utilities {name!r} (C = {c})": f"{u[name].kind} " + V.digest(u[name].params)
        for c, u in us_by_c.items()
        for name in ubatches
      },
    )
  for name in ubatches:
    sizes_u = {c: us[name].batch_shape[0] for c, us in us_by_c.items()}
    if len(set(sizes_u.values())) > 1:
      raise ValueError(
        f"utilities[{name!r}] must have the same number of utilities for every class count "
        f"(one 'utility' axis in the result); got {sizes_u}"
      )
  if mesh is None:
    sizes = [len(st.index) for sts in groups.values() for st in sts]
    usizes = [u.batch_shape[0] for u in next(iter(us_by_c.values())).values()]
    mesh = _default_mesh(len(jax.devices()), sizes, usizes)
  dm, du = _mesh_sizes(mesh)
  ndev = dm * du
  has_u = "utilities" in mesh.axis_names
  rows = NamedSharding(mesh, P("models"))
  util_sharding = NamedSharding(mesh, P("utilities" if has_u else None))
  quantile = any(mt.family == "binned" and mt.spec[2] == "quantile" for mt in mets)

  values: dict[str, dict[int, np.ndarray]] = {}
  info: dict[str, Any] = {"mesh": dict(mesh.shape), "programs": []}
  # 1. every stack validated (and sized) before any program runs: a bad model
  # fails fast, and the programs below need no host round trip between them
  calls = []
  for c, stacks in groups.items():
    us = us_by_c[c]
    for st in stacks:
      names_here = [model_names[i] for i in st.index]
      if multi and not V.spans_processes(st.x):
        # this process's rows, checked once assembled into the union: every
        # process runs the one check and raises the same error, naming the
        # union's row (a check of the shard alone would raise on its process
        # only while the others wait in the assembly), and every process
        # judges the bins by the union's sample counts
        st = _assemble_processes(mesh, st)
        _validate_stack(st.x, st.y, st.sizes, names_here, from_logits, st.where)
      else:  # models of different dtypes: each at its own dtype's tolerance (parts)
        if x is None and st.parts is None:
          # a list's models are copied into the stack anyway: padded (copies of model
          # 0, validated with it, results dropped) to a size bucket first, so a
          # growing list of checkpoints compiles O(log M) programs, not two per M
          # (12-15 s each on 2 cores); a caller's stack runs as it is
          st = _pad_models(st, size_bucket(len(st.index)))
        _validate_stack(st.x, st.y, st.sizes, names_here, from_logits, parts=st.parts)
        st.parts = None  # the models in their own dtypes: not kept once validated
      # validated in the caller's dtype (its tolerance), computed as the one-shot
      # functions compute: in at least float32 (an int32 one-hot matrix binned
      # every confidence as 0)
      # labels checked integral and in range: int32, as the one-shot functions take
      # them (float or bool labels failed in the scores' gathers)
      y32 = st.y if st.y.dtype == np.int32 else st.y.astype(np.int32)
      st = dataclasses.replace(st, x=V.upcast(st.x), y=y32)
      if quantile and int(bins_np.max()) > min(st.sizes):
        small = [nm for nm, k in zip(names_here, st.sizes) if k < int(bins_np.max())]
        raise ValueError(
          f"too few samples for the bins: quantile binning with num_bins = {int(bins_np.max())} "
          f"needs at least that many samples per model; models {small} have fewer"
        )
      st = _pad_models(st, math.ceil(st.x.shape[0] / ndev) * ndev)
      n_rows = int(st.x.shape[1])
      # utilities by position, not by name: renaming a batch reuses the program (a
      # renamed one compiled the study again, 12 s for 8 models x 200 bins x 300 utilities)
      kinds = tuple(
        (
          str(i),
          u.kind,
          u.batch_shape[0],
          _uc_chunk(u.kind, n_rows, c, -(-u.batch_shape[0] // du), chunk_size),
        )
        for i, u in enumerate(us.values())
      )
      params = [
        _put(np.asarray(SW._pad_rows(u.params, -(-u.batch_shape[0] // du) * du)), util_sharding)
        for u in us.values()
      ]
      masked = st.where is not None
      # metrics in a canonical order: the same set in another order shares the program
      canon = tuple(sorted(mets, key=lambda mt: mt.name))
      prog = _program(canon, max_bins, kinds, mesh, masked, bool(from_logits))
      w = _put(st.where, rows) if masked else np.zeros((), bool)
      bins_d = _put(bins_np, NamedSharding(mesh, P()))
      args = (_put(st.x, rows), _put(st.y, rows), w, bins_d, *params)
      calls.append((c, st, prog, args))
      info["programs"].append(
        {
          "num_classes": c,
          "models": names_here,
          "rows": n_rows,
          "padded_models": int(st.x.shape[0]),
        }
      )
  # 2. every program dispatched before any result is read: JAX runs a program
  # asynchronously, so the next one's tracing and compilation overlap its run
  outs = [prog(*args) for *_, prog, args in calls]
  # 3. results to the host
  for (c, st, _, _), out in zip(calls, outs):
    out = jax.device_get(out)
    if not out.pop(_UTILITIES_OK):  # the eager checks name the bad batch and value
      for name, u in us_by_c[c].items():
        _checked_params(u, c, f"utilities[{name!r}]")
      raise ValueError("utilities: a parameter is not finite or lies outside [-1, 1]")
    ucs = {"uc:" + name: out.pop(f"uc:{i}") for i, name in enumerate(us_by_c[c])}
    out.update(ucs)  # the program's keys are positions
    for k, v in out.items():
      per = values.setdefault(k, {})
      for j, i in enumerate(st.index):
        per[i] = np.asarray(v[j])

  result, axes = {}, {}
  coords: dict[str, list] = {}
  if bins_shape:
    coords["num_bins"] = bins_np.tolist()
  else:  # one bin count: no axis, but recorded (to_dict, to_json, summary's columns)
    info["num_bins"] = int(bins_np[0])
  for mt in mets:
    arr = np.stack([values[mt.name][i] for i in range(num_models)])
    if mt.family == "binned":
      arr = arr.reshape((num_models,) + bins_shape)
      axes[mt.name] = ("model",) + (("num_bins",) if len(bins_shape) == 1 else ())
      if len(bins_shape) > 1:
        axes[mt.name] = ("model",) + tuple(f"num_bins_{d}" for d in range(len(bins_shape)))
        for d, size in enumerate(bins_shape):
          coords[f"num_bins_{d}"] = list(range(size))
    elif mt.family == "decompose":
      axes[mt.name] = ("model", "component")
      coords["component"] = list(_COMPONENTS)
    else:
      axes[mt.name] = ("model",)
    result[mt.name] = arr
  for name in ubatches:
    key = "uc:" + name
    arr = np.stack([values[key][i] for i in range(num_models)])
    result[key] = arr
    axes[key] = ("model", "utility")
    # positions: batches of different sizes share the axis, each its first entries
    coords["utility"] = list(range(max(arr.shape[1], len(coords.get("utility", ())))))
  return StudyResult(tuple(model_names), result, axes, coords, info)


def _assemble_processes(mesh: Mesh, st: _Stack) -> _Stack:
  """This process's rows of every model -> global ``(M, N, C)`` arrays of the union (masked).

  The values are not checked here (:func:`_validate_stack` checks the union);
  the labels are narrowed on the host first without raising
  (:func:`~jaxcal._src.validation.process_shard`). ``sizes`` become the
  union's row counts.
  """
  if st.where is not None:  # pragma: no cover - stacks from lists are refused in multi-process runs
    raise ValueError("padded stacks cannot be assembled across processes")
  m, n, c = st.x.shape
  x2, y1 = V.process_shard(st.x.reshape((m * n, c)), st.y.reshape((m * n,)))
  (x, y), w, sizes = SW.process_shards(
    mesh,
    ("models", "utilities") if "utilities" in mesh.axis_names else "models",
    x2.reshape((m, n, c)),
    y1.reshape((m, n)),
    row_axis=1,
  )
  V.check_union_rows(sizes, "predictions")
  return _Stack(st.index, x, y, w, [int(np.sum(sizes))] * len(st.index))
