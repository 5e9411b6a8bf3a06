"""A Sphinx extension: each line of highlighted code is its own box, so that a long line wraps under itself.

The book's code cells wrap long lines instead of scrolling sideways (book/_static/book.css). Wrapped as plain text, a
line's continuation starts at column 0 and breaks Python's indentation on the page. Here Pygments' HTML keeps each
line in a `span.line` that holds its indentation (`--indent`, in characters), and the style gives every
continuation a hanging indent: the line's own indentation and four more. The text, its copy button and a reader's
copy and paste are unchanged: the newlines stay between the lines.
"""
import html
import re

from pygments.formatters import HtmlFormatter

TAG = re.compile(r"<[^>]*>")
NEWLINE = re.compile(r"\n((?:</span>)*)$")          # a line's newline, inside the tags that close on it (`hll`)


class LineBoxes(HtmlFormatter):
    """Pygments' HTML formatter, with each line of code in `<span class="line" style="--indent: Nch">`."""

    def wrap(self, source):
        return super().wrap(self._lines(source))

    @staticmethod
    def _lines(source):
        for kind, line in source:
            if kind != 1:
                yield kind, line
                continue
            body = NEWLINE.sub(r"\1", line)
            end = "\n" if body != line else ""
            text = html.unescape(TAG.sub("", body))
            indent = len(text) - len(text.lstrip(" "))
            yield 1, f'<span class="line" style="--indent: {indent}ch">{body}</span>{end}'


def setup(app):
    from sphinx.highlighting import PygmentsBridge

    PygmentsBridge.html_formatter = LineBoxes
    return {"parallel_read_safe": True, "parallel_write_safe": True}
