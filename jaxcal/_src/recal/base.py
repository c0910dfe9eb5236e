"""The recalibrator contract: a registry of ``fit`` functions, pytree results,
and pickle-free save/load.

A fitted recalibrator is a ``flax.struct.dataclass`` (a pytree: arrays are
leaves, configuration is static) that subclasses :class:`Recalibrator` and
implements ``apply(self, inputs) -> probs`` for ``(n, C)`` inputs. Inputs are
logits by default (``from_logits=True`` at fit time); a recalibrator fitted
on probabilities (``from_logits=False``) is applied to probabilities. Methods
that work on probabilities internally take ``softmax(logits)``; methods that
work on logits internally take ``log(probs)`` (``softmax(log p) = p``).

Registering a method::

    @register("temperature")
    def fit_temperature(inputs, labels, *, from_logits=True, **options) -> TemperatureScaling:
      ...

``save``/``load`` write ``.npz`` (arrays + a JSON header) or msgpack (flax
serialization) and never unpickle.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, ClassVar

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

__all__ = [
  "Recalibrator",
  "register",
  "fit",
  "methods",
  "save",
  "load",
  "to_probs",
  "to_logits",
  "recalibrator_class",
  "prepare_fit",
]

_FITTERS: dict[str, Callable[..., Recalibrator]] = {}
_CLASSES: dict[str, type] = {}


@flax.struct.dataclass
class Recalibrator:
  """Base class of fitted recalibrators (pytrees). Subclasses set ``method``."""

  method: ClassVar[str] = ""
  from_logits: bool = flax.struct.field(pytree_node=False, default=True, kw_only=True)

  def apply(self, inputs: jax.Array) -> jax.Array:  # pragma: no cover - abstract
    raise NotImplementedError

  def __call__(self, inputs: ArrayLike) -> jax.Array:
    """Recalibrated ``(n, C)`` probabilities for ``(n, C)`` inputs.

    Validates the inputs (logits: finite; probabilities: on the simplex) and,
    when the fitted object has a positive ``num_classes`` attribute, that
    ``C`` matches it.
    """
    from jaxcal._src import validation as V

    x = V.check_logits(inputs, "inputs") if self.from_logits else V.check_probs(inputs, "inputs")
    expected = getattr(self, "num_classes", None)
    if isinstance(expected, int) and expected > 0 and x.shape[1] != expected:
      raise ValueError(
        f"{type(self).__name__} was fitted on C = {expected} classes but the "
        f"inputs have C = {x.shape[1]} columns"
      )
    return self.apply(x)


def register(name: str) -> Callable:
  """Decorator registering ``fit_fn(inputs, labels, **options)`` under ``name``.

  The fitted object's class is recorded from the return annotation-free
  first call; classes are also registered via :func:`recalibrator_class`.
  """

  def deco(fn):
    if name in _FITTERS:
      raise ValueError(f"recalibration method {name!r} registered twice")
    _FITTERS[name] = fn
    return fn

  return deco


def recalibrator_class(cls: type) -> type:
  """Class decorator: makes ``load`` able to rebuild ``cls`` by its ``method``."""
  _CLASSES[cls.method] = cls
  return cls


def _ensure_loaded() -> None:
  # Importing the implementation modules registers their methods.
  import importlib

  for mod in (
    "scaling",
    "binning_methods",
    "patching",
    "local_net",
    "beta",
    "bbq",
    "ensemble_temperature",
  ):
    try:
      importlib.import_module(f"jaxcal._src.recal.{mod}")
    except ModuleNotFoundError as e:  # a method family not built yet
      if e.name != f"jaxcal._src.recal.{mod}":
        raise


def methods() -> tuple[str, ...]:
  """Names of all registered recalibration methods."""
  _ensure_loaded()
  return tuple(sorted(_FITTERS))


def fit(method: str, inputs: ArrayLike, labels: ArrayLike, **options: Any) -> Recalibrator:
  """Fits a recalibrator by name on a calibration split.

  Args:
    method: one of :func:`methods` (``"temperature"``, ``"vector"``,
      ``"matrix"``, ``"dirichlet"``, ``"platt"``, ``"histogram"``,
      ``"isotonic"``, ``"smooth_isotonic"``, ``"patching"``, ``"local_net"``,
      ``"beta"``, ``"bbq"``, ``"ensemble_temperature"``).
    inputs: ``(n, C)`` logits (default) or probabilities with
      ``from_logits=False``.
    labels: ``(n,)`` integer labels.
    **options: method options (see each method's fit function).

  Returns:
    A fitted :class:`Recalibrator`; ``rc(inputs)`` gives probabilities.

  Raises:
    ValueError: unknown method, or bad inputs.
  """
  _ensure_loaded()
  if method not in _FITTERS:
    raise ValueError(
      f"unknown recalibration method {method!r}; available: {', '.join(sorted(_FITTERS))}"
    )
  return _FITTERS[method](inputs, labels, **options)


def prepare_fit(
  inputs: ArrayLike,
  labels: ArrayLike,
  *,
  from_logits: bool,
  method: str,
  require_all_classes: bool = False,
) -> tuple[jax.Array, jax.Array]:
  """Validates a calibration split for ``fit``; returns ``(inputs, labels)`` as arrays.

  Args:
    inputs: ``(n, C)`` logits (``from_logits=True``: finite) or probabilities
      (rows on the simplex).
    labels: ``(n,)`` integers in ``[0, C)``.
    from_logits: how to check ``inputs``.
    method: the method name, for error messages.
    require_all_classes: raise when some class has no sample (methods with
      per-class parameters that diverge without one).

  Raises:
    ValueError: naming the problem (non-finite logits, rows off the simplex,
      labels out of range, classes missing from the calibration split).
  """
  from jaxcal._src import validation as V

  x = V.check_logits(inputs, "inputs") if from_logits else V.check_probs(inputs, "inputs")
  n, c = x.shape
  y = V.check_labels(labels, n, c)
  if require_all_classes and V.is_concrete(y):
    counts = np.bincount(np.asarray(y), minlength=c)
    missing = np.flatnonzero(counts == 0)
    if missing.size:
      shown = ", ".join(str(int(k)) for k in missing[:10]) + (" ..." if missing.size > 10 else "")
      raise ValueError(
        f"recalibration method {method!r} needs every class in the calibration labels; "
        f"{missing.size} of C = {c} classes have no sample (classes {shown})"
      )
  return x, y


def to_probs(x: jax.Array, from_logits: bool) -> jax.Array:
  """``softmax(x)`` for logits, ``x`` itself for probabilities."""
  return jax.nn.softmax(x, axis=-1) if from_logits else x


def to_logits(x: jax.Array, from_logits: bool, eps: float = 1e-12) -> jax.Array:
  """``x`` itself for logits, ``log(max(x, eps))`` for probabilities (``softmax`` of it is ``x``)."""
  return x if from_logits else jnp.log(jnp.maximum(x, eps))


def _fields(rc: Recalibrator) -> dict[str, Any]:
  import dataclasses

  return {f.name: getattr(rc, f.name) for f in dataclasses.fields(rc)}


def save(rc: Recalibrator, path: str) -> None:
  """Saves a fitted recalibrator to ``.npz`` or ``.msgpack`` (no pickle).

  Array fields are stored as arrays; static fields (ints, floats, strings,
  bools, tuples thereof) in a JSON header. Nested pytrees of arrays are
  flattened with ``/``-joined keys.
  """
  path = str(path)
  arrays: dict[str, np.ndarray] = {}
  static: dict[str, Any] = {}

  def put(prefix: str, value: Any) -> None:
    if isinstance(value, (jax.Array, np.ndarray)):
      arrays[prefix] = np.asarray(value)
    elif isinstance(value, dict):
      static[prefix + "/__dict__"] = sorted(value)
      for k, v in value.items():
        put(f"{prefix}/{k}", v)
    elif isinstance(value, (list, tuple)) and any(
      isinstance(v, (jax.Array, np.ndarray, dict)) for v in value
    ):
      static[prefix + "/__seq__"] = len(value)
      for i, v in enumerate(value):
        put(f"{prefix}/{i}", v)
    else:
      static[prefix] = value

  for k, v in _fields(rc).items():
    put(k, v)
  header = json.dumps({"method": rc.method, "static": static, "format": 1})
  if path.endswith(".msgpack"):
    import msgpack

    payload = {
      "header": header,
      "arrays": {
        k: {"dtype": str(a.dtype), "shape": list(a.shape), "data": a.tobytes()}
        for k, a in arrays.items()
      },
    }
    with open(path, "wb") as f:
      f.write(msgpack.packb(payload, use_bin_type=True))
  else:
    np.savez(path, __header__=np.array(header), **{f"a:{k}": a for k, a in arrays.items()})


def load(path: str) -> Recalibrator:
  """Loads a recalibrator written by :func:`save` (never unpickles)."""
  _ensure_loaded()
  path = str(path)
  if path.endswith(".msgpack"):
    import msgpack

    with open(path, "rb") as f:
      payload = msgpack.unpackb(f.read(), raw=False)
    header = json.loads(payload["header"])
    arrays = {
      k: np.frombuffer(v["data"], dtype=v["dtype"]).reshape(v["shape"]).copy()
      for k, v in payload["arrays"].items()
    }
  else:
    with np.load(path, allow_pickle=False) as z:
      header = json.loads(str(z["__header__"]))
      arrays = {k[2:]: z[k] for k in z.files if k.startswith("a:")}
  method = header["method"]
  if method not in _CLASSES:
    raise ValueError(f"{path}: unknown recalibrator method {method!r}")
  static = header["static"]

  def get(prefix: str) -> Any:
    if prefix in arrays:
      return jnp.asarray(arrays[prefix])
    if prefix + "/__dict__" in static:
      return {k: get(f"{prefix}/{k}") for k in static[prefix + "/__dict__"]}
    if prefix + "/__seq__" in static:
      return tuple(get(f"{prefix}/{i}") for i in range(static[prefix + "/__seq__"]))
    v = static[prefix]
    return tuple(v) if isinstance(v, list) else v

  import dataclasses

  cls = _CLASSES[method]
  return cls(**{f.name: get(f.name) for f in dataclasses.fields(cls)})
