"""Sphinx configuration of the backprop-systolic documentation (``make docs``)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

project = "backprop-systolic"
author = "the backprop-systolic developers"
copyright = "the backprop-systolic developers"

extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon"]
# the docstrings' "Parameters" and "Members" sections are NumPy style: "name : type", then
# the description indented (a component's "Members" are its ports)
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_custom_sections = [("Members", "params_style")]
source_suffix = {".md": "markdown"}
root_doc = "index"
# the measurement archives and the JSON twins of the results pages are not pages
exclude_patterns = ["synth/**", "**/*.json", "results/boards/**", "results/training/**",
                    "_build", "Thumbs.db", ".DS_Store"]

myst_enable_extensions = ["colon_fence", "dollarmath"]
myst_heading_anchors = 3
# a link to a page or anchor that does not exist is a warning, and make docs fails on it;
# so is a {py:...} reference of a page that names no documented object (nitpicky), while the
# docstrings' own references to other objects stay lenient (_pages_only below)
nitpicky = True

autodoc_member_order = "bysource"
autodoc_default_options = {"members": True, "show-inheritance": True}

html_theme = "furo"
html_title = "backprop-systolic"
# the navigation lists pages and their sections, not every documented object (a smaller
# toctree on every page: a faster build)
toc_object_entries = False


def _own_members_only(app, what, name, obj, skip, options):
    """A module documents what it defines, not what it imports (documented where defined)."""
    module = getattr(obj, "__module__", None)
    if what == "module" and module and app.env.temp_data.get("autodoc:module") not in (
            None, module):
        return True
    return skip


def _pages_only(app, domain, node):
    """Nitpicky for the pages, not the docstrings: a docstring names private helpers and
    other libraries' classes (Amaranth, numpy) the site does not document."""
    source = node.source or ""
    return not (source.endswith(".md") and Path(source).resolve().is_relative_to(_DOCS))


_DOCS = Path(__file__).resolve().parent


def setup(app):
    app.connect("warn-missing-reference", _pages_only)
    app.connect("autodoc-skip-member", _own_members_only)
