"""The documentation site (docs/): one API page per public module.

The build itself (Sphinx, warnings as errors) runs in .ci/run:
``python -m sphinx -W --keep-going -b html docs docs/_build/html``.
"""

import importlib
import pathlib
import re

import pytest

import jaxcal

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def public_modules() -> set[str]:
  """``jaxcal/<name>.py`` files that are not private, plus the lazy submodules."""
  files = {p.stem for p in (ROOT / "jaxcal").glob("*.py") if not p.stem.startswith("_")}
  return files | set(jaxcal._SUBMODULES)


def test_every_public_module_has_an_api_page():
  missing = sorted(m for m in public_modules() if not (DOCS / "api" / f"{m}.rst").is_file())
  assert not missing, (
    f"no API page for {missing}: add docs/api/<name>.rst holding a title and "
    "'.. automodule:: jaxcal.<name>'"
  )


@pytest.mark.parametrize("page", sorted((DOCS / "api").glob("*.rst")), ids=lambda p: p.stem)
def test_api_page_documents_an_importable_module(page):
  (module,) = re.findall(r"^\.\. automodule:: (\S+)$", page.read_text(), flags=re.M)
  assert module == f"jaxcal.{page.stem}"
  assert importlib.import_module(module).__all__


def test_quick_start_is_taken_from_the_readme():
  readme = (ROOT / "README.md").read_text()
  start, end = "<!-- docs:quickstart:start -->", "<!-- docs:quickstart:end -->"
  assert readme.count(start) == readme.count(end) == 1 and readme.index(start) < readme.index(end)
  quick = (DOCS / "quickstart.md").read_text()
  assert f":start-after: {start}" in quick and f":end-before: {end}" in quick
  assert "pip install -e '.[dev]'" in readme[readme.index(start) : readme.index(end)]


def test_one_page_per_paper():
  pages = {p.stem for p in (DOCS / "papers").glob("*.md")} - {"index"}
  assert len(pages) == 5
  index = (DOCS / "papers" / "index.md").read_text()
  assert all(f"\n{p}\n" in index for p in pages), "list every paper page in papers/index.md"
  for p in pages:
    text = (DOCS / "papers" / f"{p}.md").read_text()
    assert "## What jaxcal implements" in text and "jaxcal." in text


# Public helpers that read, write, name or format, and compute nothing a paper
# defines: their docstrings need no ``Reference:`` (CONTRIBUTING.md).
NO_PAPER = {
  "data": {"dataset_dir", "load_predictions", "load_split", "looks_like_probs"},
  "plots": {"savefig"},
  "recalibrate": {"fit", "fit_function", "load", "save", "methods"},
  "report": {"find_models", "write_report"},
  "streaming": {"merge_across_processes"},
  "train": {"evaluate", "make_model", "predict", "to_float_images", "train_epoch", "MLP"},
}


def _public_callables():
  import inspect

  for m in sorted(jaxcal._SUBMODULES):
    mod = importlib.import_module(f"jaxcal.{m}")
    for name in mod.__all__:
      obj = getattr(mod, name)
      if inspect.isfunction(obj) or inspect.isclass(obj):
        yield m, name, obj


def test_public_docstrings_have_summary_args_returns_example_and_reference():
  """Each public function and class: a one-line summary, Args naming every parameter,
  Returns (functions), an Example, and a paper ``Reference:`` (but :data:`NO_PAPER`)."""
  import inspect

  problems = []
  for m, name, obj in _public_callables():
    doc = inspect.getdoc(obj) or ""
    where = f"jaxcal.{m}.{name}"
    if not doc or not doc.split("\n", 1)[0].strip():
      problems.append(f"{where}: no one-line summary")
      continue
    if inspect.isclass(obj):
      fields = getattr(obj, "_fields", ())
      missing = [f for f in fields if not re.search(rf"^\s+{f}\b", doc, flags=re.M)]
      if fields and ("Attributes:" not in doc or missing):
        problems.append(f"{where}: Attributes do not describe {missing or list(fields)}")
      continue
    params = [
      p.name
      for p in inspect.signature(obj).parameters.values()
      if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    args = doc.split("Args:", 1)[1] if "Args:" in doc else ""
    undocumented = [p for p in params if not re.search(rf"^\s+(\w+, )*{p}\b", args, flags=re.M)]
    if undocumented:
      problems.append(f"{where}: Args do not describe {undocumented}")
    for section in ("Returns:", "Example"):
      if section not in doc and not (section == "Returns:" and "Yields:" in doc):
        problems.append(f"{where}: no {section}")
    if name not in NO_PAPER.get(m, ()) and not name.startswith("format_"):
      if "Reference" not in doc:
        problems.append(f"{where}: no Reference (the paper, section, equation)")
  assert not problems, "\n".join(problems)


def test_public_methods_document_their_arguments_and_returns():
  """Each public method of a public class (its own docstring or the one it inherits): a
  one-line summary, Args naming every parameter and a Returns section (``merge``,
  ``Scores.empty``, ``Recalibrator.apply`` and the LoCal Net's methods had none)."""
  import inspect

  problems = []
  seen = set()
  for m, name, cls in _public_callables():
    if not inspect.isclass(cls) or cls in seen or not cls.__module__.startswith("jaxcal"):
      continue
    seen.add(cls)
    # its own methods and those it inherits from jaxcal's (private) bases
    own = {}
    for base in reversed(cls.__mro__):
      if base.__module__.startswith("jaxcal"):
        own.update(vars(base))
    for attr, raw in own.items():
      if attr.startswith("_") and attr != "__call__":
        continue
      fn = raw.__func__ if isinstance(raw, classmethod | staticmethod) else raw
      if not inspect.isfunction(fn) or not fn.__module__.startswith("jaxcal"):
        continue  # generated (dataclass ``replace``, NamedTuple helpers)
      params = [
        p.name
        for p in inspect.signature(fn).parameters.values()
        if p.name not in ("self", "cls") and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
      ]
      doc = inspect.getdoc(getattr(cls, attr)) or ""
      where = f"jaxcal.{m}.{name}.{attr}"
      if not doc.split("\n", 1)[0].strip():
        problems.append(f"{where}: no one-line summary")
        continue
      if not params:
        continue
      args = doc.split("Args:", 1)[1] if "Args:" in doc else ""
      undocumented = [p for p in params if not re.search(rf"^\s+(\w+, )*{p}\b", args, flags=re.M)]
      if undocumented:
        problems.append(f"{where}: Args do not describe {undocumented}")
      if "Returns:" not in doc:
        problems.append(f"{where}: no Returns")
  assert not problems, "\n".join(problems)
