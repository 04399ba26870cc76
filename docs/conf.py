"""Sphinx configuration of the backprop-systolic documentation (``make docs``)."""

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
# a link to a page or anchor that does not exist is a warning, and make docs fails on it

autodoc_member_order = "bysource"
autodoc_default_options = {"members": True, "show-inheritance": True}

html_theme = "furo"
html_title = "backprop-systolic"


# Docstrings are reStructuredText written for readers of the source first: one whose layout
# docutils cannot parse (an indented table or literal without its blank line) is shown
# verbatim instead of failing the build, so every docstring is on its page.
import re  # noqa: E402

from docutils.core import publish_doctree  # noqa: E402
from docutils.utils import Reporter  # noqa: E402

_ROLE = re.compile(r":[\w:.-]+:`([^`]*)`")


def _parses(lines):
    text = _ROLE.sub(r"``\1``", "\n".join(lines))
    doctree = publish_doctree(text, settings_overrides={
        "report_level": Reporter.WARNING_LEVEL, "halt_level": Reporter.SEVERE_LEVEL + 1,
        "warning_stream": False})
    messages = [m for m in doctree.findall(lambda n: n.tagname == "system_message")
                if m["level"] >= Reporter.WARNING_LEVEL]
    return not messages


def _verbatim_unless_valid(app, what, name, obj, options, lines):
    if lines and not _parses(lines):
        lines[:] = ["::", ""] + ["    " + line for line in lines] + [""]


def _own_members_only(app, what, name, obj, skip, options):
    """A module documents what it defines, not what it imports (documented where defined)."""
    module = getattr(obj, "__module__", None)
    if what == "module" and module and app.env.temp_data.get("autodoc:module") not in (
            None, module):
        return True
    return skip


def setup(app):
    app.connect("autodoc-process-docstring", _verbatim_unless_valid)
    app.connect("autodoc-skip-member", _own_members_only)
