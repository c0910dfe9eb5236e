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
