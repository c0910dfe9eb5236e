"""The paper notebooks in notebooks/: paired text sources, and a top-to-bottom run.

Each notebook is a pair: ``notebooks/<name>.py`` (jupytext percent format,
the source to edit, formatted and linted by ruff) and ``notebooks/<name>.ipynb``
(what Jupyter opens; it may carry outputs). After editing a source, run
``jupytext --sync notebooks/<name>.py`` (the pairing is configured in
pyproject.toml); it rewrites the cells of the ``.ipynb`` and keeps the ids and
outputs of unchanged cells, so an unchanged notebook does not change.

``test_notebook_runs`` (marker ``notebook``) executes each notebook in a
``python3`` Jupyter kernel; jupyter_client starts a kernel spec whose command
is ``python`` with ``sys.executable``, so running pytest with any environment
that has jaxcal and ipykernel runs the notebooks in that same environment. If
your ``python3`` kernel spec points elsewhere, install one for this
environment: ``python -m ipykernel install --user --name python3``.

A notebook whose public API (listed in its metadata ``jaxcal.requires``) is
not importable yet is skipped with the missing name, and so is a notebook
whose optional data sets (``jaxcal.data``: ``cifar_logits``, ``fashion_mnist``)
``jaxcal.data.dataset_dir`` does not find on this machine. Deselect with
``-m "not notebook"``.
"""

import importlib
import os
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))  # --import-mode=importlib
from conftest import FAST_COMPILE_FLAGS

ROOT = pathlib.Path(__file__).resolve().parents[1]
NB_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NB_DIR.glob("*.ipynb"))
SOURCES = sorted(NB_DIR.glob("*.py"))
#: one notebook per paper; others (a "start here" notebook) may be added.
PAPER_NOTEBOOKS = {
  "truthful_errors",
  "calibrated_forecasts",
  "utility_calibration",
  "score_decomposition",
  "local_calibration",
}
#: optional data set (``jaxcal.data.dataset_dir`` name) -> the conftest fixture that skips without it
DATA_FIXTURES = {"cifar_logits": "cifar_dir", "fashion_mnist": "fashion_mnist_dir"}
#: seconds per cell; each notebook runs in ~1 minute on 2 CPU cores.
CELL_TIMEOUT = 240
#: Notebooks whose time goes partly to running large arrays, not only to
#: compiling: their kernel leaves out some of the suite's fast-compile flags
#: (tests/conftest.py), which run such programs several times slower. Fresh
#: processes on 2 cores, 2026-11-29: local_calibration (trains and evaluates
#: on Fashion-MNIST) 58 s with XLA's defaults, 60 s without the LLVM level
#: only (183 s against 39 s with both flags on an earlier day); start_here
#: (its bootstrap of four recalibrators' errors runs 24 s at -O0, 7.5 s
#: optimised) 60-55 s without the LLVM level against 69-73 s with both flags
#: and 62 s with neither; the five others were 1.0-1.8x faster with both.
XLA_FLAGS_LEFT_OUT = {
  "local_calibration": FAST_COMPILE_FLAGS,
  "start_here": ("--xla_backend_optimization_level=0",),
}


def kernel_env(name: str) -> dict[str, str] | None:
  """The notebook kernel's environment: this one, less some fast-compile flags for some.

  The notebooks' own code is a user's, written for JAX's default rank promotion
  (``x @ w + b``): the kernel runs with it, not with the tests' ``"raise"``.
  """
  drop = XLA_FLAGS_LEFT_OUT.get(name, ())
  flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if f not in drop]
  return dict(os.environ, XLA_FLAGS=" ".join(flags), JAX_NUMPY_RANK_PROMOTION="allow")


def missing_api(requires):
  """The first dotted public name in ``requires`` that cannot be imported."""
  for dotted in requires:
    module, _, attr = dotted.rpartition(".")
    try:
      mod = importlib.import_module(module)
    except ImportError:
      return dotted
    if not hasattr(mod, attr):
      return dotted
  return None


def cell_mismatch(notebook, source):
  """A description of the first cell where two notebooks differ, or None.

  Cells are compared by type and text; outputs, execution counts, ids and
  cell metadata are ignored (the ``.ipynb`` may store outputs).
  """
  a = [(c.cell_type, c.source) for c in notebook.cells]
  b = [(c.cell_type, c.source) for c in source.cells]
  for i, (x, y) in enumerate(zip(a, b)):
    if x != y:
      return f"cell {i} differs:\n--- .ipynb ({x[0]})\n{x[1]}\n--- .py ({y[0]})\n{y[1]}"
  if len(a) != len(b):
    return f"the .ipynb has {len(a)} cells, the .py source {len(b)}"
  return None


def test_every_notebook_is_paired_with_a_text_source():
  ipynb, py = {p.stem for p in NOTEBOOKS}, {p.stem for p in SOURCES}
  assert ipynb == py, f"unpaired: {sorted(ipynb ^ py)} (run jupytext --sync on them)"
  assert PAPER_NOTEBOOKS <= ipynb, f"missing: {sorted(PAPER_NOTEBOOKS - ipynb)}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_matches_its_source(path):
  jupytext = pytest.importorskip("jupytext")
  nbformat = pytest.importorskip("nbformat")
  source = path.with_suffix(".py")
  nb, src = jupytext.read(path), jupytext.read(source)
  hint = f"edit {source.name}, then run: jupytext --sync notebooks/{source.name}"
  mismatch = cell_mismatch(nb, src)
  assert mismatch is None, f"{path.name} is out of date with {source.name}: {mismatch}\n{hint}"
  assert nb.metadata.get("jaxcal") == src.metadata.get("jaxcal"), hint
  # Regenerating changes nothing: the source written back from the notebook is
  # the file byte for byte, and the .ipynb is canonical nbformat JSON.
  assert jupytext.writes(nb, fmt="py:percent") == source.read_text(), hint
  assert nbformat.writes(nbformat.read(path, as_version=4)) + "\n" == path.read_text(), hint


def test_cell_mismatch_sees_an_edit_and_a_missing_cell():
  nbformat = pytest.importorskip("nbformat")
  v4 = nbformat.v4
  a = v4.new_notebook(cells=[v4.new_markdown_cell("# t"), v4.new_code_cell("x = 1")])
  same = v4.new_notebook(cells=[v4.new_markdown_cell("# t"), v4.new_code_cell("x = 1")])
  same.cells[1].outputs = [v4.new_output("stream", text="1")]
  edited = v4.new_notebook(cells=[v4.new_markdown_cell("# t"), v4.new_code_cell("x = 2")])
  shorter = v4.new_notebook(cells=[v4.new_markdown_cell("# t")])
  assert cell_mismatch(a, same) is None
  assert "cell 1 differs" in cell_mismatch(a, edited)
  assert "2 cells" in cell_mismatch(a, shorter)


@pytest.mark.notebook
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path, request):
  nbformat = pytest.importorskip("nbformat")
  nbclient = pytest.importorskip("nbclient")
  nb = nbformat.read(path, as_version=4)
  miss = missing_api(nb.metadata.get("jaxcal", {}).get("requires", []))
  if miss:
    pytest.skip(f"{path.name} needs {miss}, which does not exist yet")
  for name in nb.metadata.get("jaxcal", {}).get("data", []):
    request.getfixturevalue(DATA_FIXTURES[name])  # skips when the data set is absent
  client = nbclient.NotebookClient(
    nb, timeout=CELL_TIMEOUT, kernel_name="python3", resources={"metadata": {"path": str(NB_DIR)}}
  )
  env = kernel_env(path.stem)
  client.execute(**({} if env is None else {"env": env}))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_declares_the_data_it_reads(path):
  """A notebook that reads an optional data set lists it, so the run skips."""
  nbformat = pytest.importorskip("nbformat")
  nb = nbformat.read(path, as_version=4)
  declared = set(nb.metadata.get("jaxcal", {}).get("data", []))
  code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
  used = {"cifar_logits"} if 'dataset_dir("cifar_logits")' in code else set()
  used |= {"fashion_mnist"} if "load_fashion_mnist()" in code else set()
  assert used <= declared, f"{path.name}: add {sorted(used - declared)} to its jaxcal.data metadata"
  assert declared <= set(DATA_FIXTURES), f"{path.name}: unknown data sets {sorted(declared)}"


def test_start_here_uses_only_the_public_api():
  nbformat = pytest.importorskip("nbformat")
  nb = nbformat.read(NB_DIR / "start_here.ipynb", as_version=4)
  code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
  assert "_src" not in code and "from jaxcal import" in code


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_stored_outputs_are_small_and_hold_no_error(path):
  """Outputs may be stored (they render where code is browsed); never a traceback."""
  nbformat = pytest.importorskip("nbformat")
  nb = nbformat.read(path, as_version=4)
  outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
  assert not [o for o in outputs if o.output_type == "error"], f"{path.name} stores an error"
  assert path.stat().st_size < 1_000_000, f"{path.name}: outputs too large (lower the dpi)"
