"""Learner output is data: no script, no active HTML or SVG, in any output or in a learner's markdown."""
from __future__ import annotations

import re

import bleach
from nbconvert.preprocessors.sanitize import SanitizeHTML

from autograder.notebooks import nbgrader_meta

# What a learner's HTML and markdown may hold: bleach's defaults (links of http, https and mailto only) and the
# tags of text and tables; no script, style, SVG, frame, form, event handler, or image fetched from anywhere
# (a learner's images are image/png outputs).
TAGS = sorted({*bleach.ALLOWED_TAGS, "p", "div", "span", "br", "hr", "pre", "h1", "h2", "h3", "h4", "h5", "h6",
               "table", "thead", "tbody", "tr", "th", "td", "sub", "sup", "del", "dl", "dt", "dd"})
ATTRIBUTES = {**bleach.ALLOWED_ATTRIBUTES, "td": ["colspan", "rowspan"], "th": ["colspan", "rowspan"]}


# Markdown makes links and images of its own, `[x](javascript:...)` and `[x]: url`, its scheme even written as
# character references, which no HTML sanitizer sees: a zero-width space after the `]` leaves them as text.


# Markdown makes links and images of its own, `[x](javascript:...)` and `[x]: url`, its scheme even written as
# character references, which no HTML sanitizer sees: a zero-width space after the `]` leaves them as text.
MARKDOWN_LINK = re.compile(r"\](?=[(:])")


def sanitize(nb):
    """Learner output is data: no script, no active HTML or SVG, in any output or in a learner's markdown."""
    cleaner = SanitizeHTML(tags=TAGS, attributes=ATTRIBUTES)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            if not nbgrader_meta(cell).get("locked"):     # a locked one is the course's, restored from the release
                cell.source = cleaner.sanitize_html_tags(MARKDOWN_LINK.sub("]\u200b", cell.source))
            continue
        cleaner.preprocess_cell(cell, {}, i)
