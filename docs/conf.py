"""Sphinx configuration of the backprop-systolic documentation (``make docs``)."""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

project = "backprop-systolic"
author = "the backprop-systolic developers"
copyright = "the backprop-systolic developers"

extensions = ["myst_parser", "sphinx.ext.autodoc"]
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


# Docstrings are reStructuredText written for readers of the source first: one whose layout
# docutils cannot parse (an indented table or literal without its blank line) is shown
# verbatim instead of failing the build, so every docstring is on its page.
import re  # noqa: E402

from docutils.frontend import get_default_settings  # noqa: E402
from docutils.parsers.rst import Parser  # noqa: E402
from docutils.utils import Reporter, new_document  # noqa: E402

_ROLE = re.compile(r":[\w:.-]+:`([^`]*)`")
_PARSER = Parser()
_SETTINGS = get_default_settings(Parser)
_SETTINGS.report_level = Reporter.WARNING_LEVEL
_SETTINGS.halt_level = Reporter.SEVERE_LEVEL + 1
_SETTINGS.warning_stream = False
#: the docstrings shown verbatim (``BPSA_DOCS_VERBATIM=1`` lists them at the end)
VERBATIM = []


def _parses(lines):
    """Whether docutils parses the docstring without a warning (roles made literals: the
    check is of the layout, Sphinx resolves the roles)."""
    doctree = new_document("<docstring>", _SETTINGS)
    _PARSER.parse(_ROLE.sub(r"``\1``", "\n".join(lines)), doctree)
    return not any(m["level"] >= Reporter.WARNING_LEVEL
                   for m in doctree.findall(lambda n: n.tagname == "system_message"))


def _verbatim_unless_valid(app, what, name, obj, options, lines):
    if lines and not _parses(lines):
        VERBATIM.append(name)
        lines[:] = ["::", ""] + ["    " + line for line in lines] + [""]


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


def _list_verbatim(app, exception):
    if os.environ.get("BPSA_DOCS_VERBATIM"):
        print(f"{len(VERBATIM)} docstrings shown verbatim:", *VERBATIM, sep="\n  ")


def setup(app):
    app.connect("build-finished", _list_verbatim)
    app.connect("warn-missing-reference", _pages_only)
    app.connect("autodoc-process-docstring", _verbatim_unless_valid)
    app.connect("autodoc-skip-member", _own_members_only)
