"""Sphinx configuration of the jaxcal API documentation.

Build (what .ci/run does, warnings are errors):
  python -m sphinx -W --keep-going -b html docs docs/_build/html

Sphinx with autodoc + napoleon, as the anchor libraries (optax, chex, flax,
JAX) do: the pages are generated from the docstrings of the public modules,
which are written in Google style (``Args:`` / ``Returns:``), and their
examples are the doctests the test suite runs.
"""

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # document this checkout, not another installed copy

import jax  # noqa: E402
from sphinx.util.typing import stringify_annotation  # noqa: E402

import jaxcal  # noqa: E402

project = "jaxcal"
author = "The jaxcal authors"
copyright = "2026, The jaxcal authors"
release = jaxcal.__version__
version = ".".join(release.split(".")[:2])

extensions = [
  "sphinx.ext.autodoc",
  "sphinx.ext.napoleon",
  "sphinx.ext.mathjax",
  "sphinx.ext.viewcode",
  "myst_parser",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build"]
myst_heading_anchors = 3

# autodoc: members in each public module's __all__, in source order, with the
# signature as inspect.signature reports it.
autodoc_default_options = {"members": True, "member-order": "bysource", "undoc-members": False}
autodoc_typehints = "signature"
autodoc_mock_imports: list[str] = []
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
napoleon_attr_annotations = True

html_theme = "furo"
html_title = f"jaxcal {release}"
html_static_path: list[str] = []
# "Attributes:" sections become :ivar: fields, so a NamedTuple or dataclass
# field is described once (in its class), not twice.
napoleon_use_ivar = True


def _skip_namedtuple_aliases(app, what, name, obj, skip, options):
  """Hides the ``Alias for field number N`` members of NamedTuples."""
  doc = getattr(obj, "__doc__", None) or ""
  if doc.startswith("Alias for field number"):
    return True
  return None


def _equations_as_literal_blocks(app, what, name, obj, options, lines):
  """Renders the docstrings' indented equation blocks as literal text.

  jaxcal's docstrings write equations as plain text, indented under the
  paragraph that introduces them. reStructuredText would read such a block
  as a quotation and parse ``|x|``, ``*`` or ``a_`` in it as markup; here a
  paragraph followed by a blank line and a more indented block (not a
  doctest, directive or field) gets the ``::`` that makes the block literal.
  """

  def indent(s):
    return len(s) - len(s.lstrip())

  for i in range(len(lines) - 2):
    intro, blank, block = lines[i], lines[i + 1], lines[i + 2]
    if not intro.strip() or blank.strip() or not block.strip():
      continue
    head = intro.lstrip()
    if head.startswith((".. ", ":", ">>>", "- ", "* ")) or intro.rstrip().endswith("::"):
      continue
    if indent(block) <= indent(intro) or block.lstrip().startswith((">>>", ".. ", ":")):
      continue
    # "text:" + ":" shows "text:"; "text" + " ::" shows "text" (rST drops a lone "::").
    lines[i] = intro.rstrip() + (":" if intro.rstrip().endswith(":") else " ::")


#: jax.typing.ArrayLike is a Union at run time; signatures show its name.
_ALIASES = {
  stringify_annotation(jax.typing.ArrayLike, mode): "~jax.typing.ArrayLike"
  for mode in ("smart", "fully-qualified-except-typing")
}


def _short_type_aliases(app, what, name, obj, options, signature, return_annotation):
  for long, short in _ALIASES.items():
    signature = signature and signature.replace(long, short)
    return_annotation = return_annotation and return_annotation.replace(long, short)
  return signature, return_annotation


def setup(app):
  app.connect("autodoc-process-signature", _short_type_aliases)
  app.connect("autodoc-skip-member", _skip_namedtuple_aliases)
  app.connect("autodoc-process-docstring", _equations_as_literal_blocks)
