"""Sphinx configuration of the API reference generated from the docstrings (the `docs` extra):

    python -m sphinx -W --keep-going -b html docs/sphinx build/docs

CI builds it with warnings as errors (scripts/test.sh). The guide pages of docs/ (Markdown, read with
MyST) come in through the stubs of docs/sphinx/guide/, one per page and of the same name, so links
between the pages resolve as they do on disk. The docstrings are plain text written for
`help()` (tables, formulas, code), not reStructuredText, so each is shown as a literal block:
no docstring can break the build or be silently mangled."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

project = "aclnn_gpu"
author = "aclnn_gpu developers"
extensions = ["sphinx.ext.autodoc", "myst_parser"]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
myst_heading_anchors = 3                 # docs/HCCL.md links to API.md#9-hccl-collectives
# Links from the guide to files outside docs/ (the README, bench/README.md, CHANGELOG.md) name files of
# the repository, not pages of this build; tests/test_docs.py checks that every such link names a file.
suppress_warnings = ["myst.xref_missing"]
root_doc = "index"
exclude_patterns: list[str] = []
html_theme = "alabaster"
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"members": True, "undoc-members": True}
os.environ.setdefault("ACLNN_GPU_DEVICE", "cpu")   # importing the package never needs a GPU


def _docstring_as_literal_block(app, what, name, obj, options, lines):
    if any(line.strip() for line in lines):
        lines[:] = ["::", ""] + ["   " + line for line in lines] + [""]


def setup(app):
    app.connect("autodoc-process-docstring", _docstring_as_literal_block)
