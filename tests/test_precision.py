"""Every matrix product in the metrics and recalibrators asks for full float32.

On GPUs (and TPUs) XLA's default precision for a float32 product is TF32
(bf16 passes on TPU): ~1e-3 relative error, enough to move a kernel-based
LCE by 1 % and to break agreement with the float64 references. CI has no
accelerator to catch it, so this test reads the source: every ``@``,
``jnp.dot``, ``jnp.matmul`` and ``jnp.einsum`` in ``jaxcal/_src`` (network
layers in ``train/`` excepted) must pass ``precision=``, and so must every
flax ``nnx.Linear`` / ``nnx.Conv`` layer there (the LoCal Net's forward pass
is part of a recalibrator: its three layers had none).
"""

import ast
import pathlib

import jaxcal

SRC = pathlib.Path(jaxcal.__file__).parent / "_src"
EXEMPT = {"train/models.py", "train/loop.py"}  # flax layers: TF32 is fine for training
NAMES = {"dot", "matmul", "einsum", "tensordot", "dot_general"}


def _offenders(path: pathlib.Path):
  tree = ast.parse(path.read_text())
  for node in ast.walk(tree):
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
      yield node.lineno, "@"
    elif isinstance(node, ast.Call):
      f = node.func
      name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
      base = getattr(f.value, "id", None) if isinstance(f, ast.Attribute) else None
      has = any(k.arg in ("precision", "preferred_element_type") for k in node.keywords)
      if name in NAMES and base in ("jnp", "lax", "jax") and not has:
        yield node.lineno, name
      elif name in ("Linear", "Conv", "Einsum") and base == "nnx" and not has:
        yield node.lineno, f"nnx.{name}"


def test_matrix_products_request_highest_precision():
  bad = []
  for path in sorted(SRC.rglob("*.py")):
    rel = path.relative_to(SRC).as_posix()
    if rel in EXEMPT:
      continue
    bad += [f"{rel}:{line} ({what})" for line, what in _offenders(path)]
  assert not bad, "matrix products without precision= (TF32 on GPU): " + ", ".join(bad)
