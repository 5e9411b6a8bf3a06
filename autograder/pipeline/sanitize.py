"""Learner output is data: no script, no active HTML or SVG, in any output or in a learner's markdown. Sanitized by
bleach (html5lib) in time linear in its size, within bounds past which it is shown as text; a learner's markdown cell
over `MAX_MARKDOWN_BYTES` (or past `MAX_MARKDOWN_TOTAL` of them) is replaced by a note that says so."""
from __future__ import annotations

import html
import re
import secrets
from collections import deque
from typing import Any

import bleach
from bleach import html5lib_shim
from bleach._vendor.html5lib import treebuilders
from bleach._vendor.html5lib.treewalkers.base import TEXT
from bleach.css_sanitizer import CSSSanitizer
from nbconvert.preprocessors.sanitize import SanitizeHTML

from autograder.notebooks import nbgrader_meta

# What a learner's HTML and markdown may hold: bleach's defaults (links of http, https and mailto only) and the
# tags of text and tables, and the course's own hints' `<details><summary>`; no script, style, SVG, frame, form, event
# handler, or image fetched from anywhere (a learner's images are image/png outputs).
TAGS = sorted({*bleach.ALLOWED_TAGS, "p", "div", "span", "br", "hr", "pre", "h1", "h2", "h3", "h4", "h5", "h6",
               "table", "thead", "tbody", "tr", "th", "td", "sub", "sup", "del", "dl", "dt", "dd", "details",
               "summary"})
ATTRIBUTES = {**bleach.ALLOWED_ATTRIBUTES, "td": ["colspan", "rowspan"], "th": ["colspan", "rowspan"]}

# Markdown makes links and images of its own, `[x](javascript:...)` and `[x]: url`, its scheme even written as
# character references, which no HTML sanitizer sees: a zero-width space after the `]` leaves them as text.
MARKDOWN_LINK = re.compile(r"\](?=[(:])")

# Code and math in a learner's markdown are shown as written, not read as HTML, and an HTML sanitizer that escapes
# their `<`, `>` and `&` changes them (`$a<b$` reaches MathJax as `a&lt;b`, `` `j <= i` `` shows `&lt;=`, and
# `a<b and c>d` in a code block becomes a <b> tag). They are taken out before the sanitizer and put back after it,
# in its text (never inside a tag it kept), each `<` or `&` that could start a tag or a character reference followed
# by a space (math, where TeX ignores it) or a zero-width one (code): text in any renderer, even one that does not
# read them as code or math. A fenced code block that every renderer reads as one (`fenced`) is put back whole.
# Found as nbconvert's markdown finds them: a fenced code block, a code span or a formula of at most MAX_LITERAL
# characters (a longer one is sanitized as HTML); and so are the `>` that start a blockquote.
MAX_LITERAL = 2_000
LITERALS = re.compile(
    r"^[ \t]*(?P<ticks>`{3,}|~{3,})[^\n]*\n(?P<block>.*?)(?:^[ \t]*(?P=ticks)[`~]*[ \t]*$|\Z)"
    r"|^(?P<quote>[ \t]{0,3}>(?:[ \t]*>)*)"
    r"|(?<!`)(?P<run>`+)(?P<code>.{1,MAX}?)(?<!`)(?P=run)(?!`)"
    r"|(?<!\\)\$\$(?P<dmath>.{1,MAX}?)(?<!\\)\$\$"
    r"|(?<![$\\])\$(?P<math>.{1,MAX}?)(?<![$\\])\$"
    r"|(?<!\\)\\\\\[(?P<bmath>.{1,MAX}?)(?<!\\)\\\\\]"
    r"|(?<!\\)\\\\\((?P<pmath>.{1,MAX}?)(?<!\\)\\\\\)"
    r"|\\begin\{(?P<env>[a-z]*\*?)\}(?P<ebody>.{0,MAX}?)\\end\{(?P=env)\}".replace("MAX", str(MAX_LITERAL)),
    re.M | re.S)
CODE = ("block", "quote", "code")
MATH = ("dmath", "math", "bmath", "pmath", "ebody")
MARKUP = re.compile(r"[<&](?=[A-Za-z/!?#])")
FENCE = re.compile(r" {0,3}(?:`{3}|~{3})")

# A learner's markdown cell is notes, tens of KiB at most (the course's longest markdown cell: 2.5 KB); past these a
# cell is not shown (nor parsed here, nor rendered in the feedback), and a note in its place says so.
MAX_MARKDOWN_BYTES = 128 << 10          # one markdown cell of the learner's
MAX_MARKDOWN_TOTAL = 1 << 20            # all of them, in notebook order
TOO_LONG = ("**Grader's note:** this markdown cell held {size:,} KiB of text, over the {cap:,} KiB a markdown cell may "
            "hold: it is not shown.")
TOO_MUCH = ("**Grader's note:** this markdown cell is past the {cap:,} KiB that all your markdown cells may hold "
            "together: it is not shown.")

# What the HTML parser may spend on a learner's markup (html5lib, as the HTML standard says, rescans its stack of
# open elements for each tag, reopens every pending formatting element (b, code, em, ...) before each run of text,
# and builds a tag, an attribute or a comment by appending to it one piece at a time). Past one of these bounds the
# whole text is shown as text, escaped; honest HTML nests a few elements deep and writes each tag in a few pieces.
MAX_DEPTH = 64              # open elements
MAX_FORMATTING = 16         # formatting elements open or pending (the standard keeps 3 alike)
MAX_PIECES = 4096           # steps of the tokenizer within one tag, comment or doctype
MAX_GROWTH = 8              # the sanitized text against the learner's (an `&` becomes `&amp;`: 5)

TYPES = html5lib_shim.constants.tokenTypes
CHARACTERS, SPACE, PARSE_ERROR = TYPES["Characters"], TYPES["SpaceCharacters"], TYPES["ParseError"]
START, EMPTY = TYPES["StartTag"], TYPES["EmptyTag"]
VOID = html5lib_shim.constants.voidElements
FORMATTING = {name for _, name in html5lib_shim.constants.formattingElements}


def sanitize(nb):
    """Learner output is data: no script, no active HTML or SVG, in any output or in a learner's markdown."""
    cleaner = Sanitizer(tags=TAGS, attributes=ATTRIBUTES)
    left = MAX_MARKDOWN_TOTAL
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            if not nbgrader_meta(cell).get("locked"):     # a locked one is the course's, restored from the release
                source, left = capped(cell.source, left)
                cell.source = markdown(source, cleaner)
            continue
        cleaner.preprocess_cell(cell, {}, i)


def markdown(source: str, cleaner: Sanitizer) -> str:
    """A learner's markdown sanitized, its code and math (LITERALS) kept as written, made inert."""
    literals: dict[str, tuple[str, str]] = {}
    nonce = "literal" + secrets.token_hex(8)

    def take(m: re.Match) -> str:
        group = next(g for g in (*CODE, *MATH) if m.group(g) is not None)
        if not any(c in m.group(group) for c in "<>&"):
            return m.group(0)
        key = f"{nonce}x{len(literals)}x"
        literals[key] = group, m.group(group)
        start, end = m.span(group)
        return m.group(0)[:start - m.start()] + key + m.group(0)[end - m.start():]

    masked = LITERALS.sub(take, source) if nonce not in source else source
    clean = cleaner.sanitize_html_tags(MARKDOWN_LINK.sub("]\u200b", masked))
    if not literals:
        return clean
    put: list[str] = []
    pre = clean.find("<pre")

    def back(m: re.Match) -> str:
        if m.group(1) is None:                      # a tag the sanitizer kept: a literal inside it stays out
            return m.group(0)
        put.append(m.group(0))
        group, text = literals.get(m.group(0), ("", m.group(0)))
        if group == "block" and fenced(clean, m.start(), pre):
            return text
        space = " " if group in MATH else "\u200b"
        return MARKUP.sub(lambda c: c.group(0) + space, MARKDOWN_LINK.sub("]\u200b", text))

    done = re.sub(rf"""<(?:[^>"']|"[^"]*"|'[^']*')*>|({nonce}x\d+x)""", back, clean)
    if sorted(put) != sorted(literals):               # one lost, repeated or in a tag: sanitized as HTML, whole
        return cleaner.sanitize_html_tags(MARKDOWN_LINK.sub("]\u200b", source))
    return done


def fenced(clean: str, at: int, pre: int) -> bool:
    """Whether the text of a fenced code block at `at` of sanitized markdown is read as code by any markdown renderer,
    and can stay as written: its fence, indented at most 3 spaces (more, it is a line of indented code, which the
    next line that is not indented ends), starts after a blank line (which ends any HTML block the sanitizer left but
    a <pre>'s), and no <pre> comes before it."""
    if not 0 < at <= len(clean) or clean[at - 1] != "\n" or 0 <= pre < at:
        return False
    fence = clean.rfind("\n", 0, at - 1) + 1
    if not FENCE.match(clean, fence):
        return False
    return fence == 0 or not clean[clean.rfind("\n", 0, fence - 1) + 1:fence].strip()


def capped(source: str, left: int) -> tuple[str, int]:
    """(a learner's markdown, or the note that it was over the caps; what is left of MAX_MARKDOWN_TOTAL after it)."""
    size = len(source.encode("utf-8", "surrogatepass"))
    if size > MAX_MARKDOWN_BYTES:
        return TOO_LONG.format(size=size >> 10, cap=MAX_MARKDOWN_BYTES >> 10), left
    if size > left:
        return TOO_MUCH.format(cap=MAX_MARKDOWN_TOTAL >> 10), 0
    return source, left - size


class Sanitizer(SanitizeHTML):
    """nbconvert's SanitizeHTML: bleach's Cleaner (one for the whole notebook) over html5lib, whose tree builder
    (`Tree`) and walker (`Walker`) do linear work, and whose tokenizer (`BoundedTokenizer`) stops past the bounds
    above; the text is then shown as text, escaped, as it is when its sanitized form would be over MAX_GROWTH times
    its size."""

    def sanitize_html_tags(self, html_str):
        if getattr(self, "_cleaner", None) is None:
            self._cleaner = bleach.Cleaner(tags=self.tags, attributes=self.attributes, strip=self.strip,
                                           strip_comments=self.strip_comments,
                                           css_sanitizer=CSSSanitizer(allowed_css_properties=self.styles))
            self._cleaner.parser = BoundedParser(tags=self._cleaner.tags, strip=self._cleaner.strip,
                                                 consume_entities=False, namespaceHTMLElements=False, tree=Tree)
            self._cleaner.walker = Walker
        try:
            clean = self._cleaner.clean(html_str)
        except OverBound:
            return html.escape(html_str, quote=False)
        if len(clean) > MAX_GROWTH * len(html_str) + 1024:
            return html.escape(html_str, quote=False)
        return clean


class OverBound(Exception):
    """A learner's markup is past one of the parser's bounds."""


# -- the tree: what made the sanitizer quadratic ----------------------------------------------------------------
class Text:
    """An element's text or tail as html5lib's tree builder grows it: `element.text += data` for each token of
    characters, each a copy of all the text so far. html5lib's tokenizer emits one such token for each `<` or `&`
    that starts no tag or entity, and bleach one for each tag it escapes: n of them in a row cost n copies of up to n
    characters (1 MiB of `<`: 31 s, 4 MiB: minutes). Here the pieces are kept, and joined once, when read."""

    __slots__ = ("parts",)

    def __init__(self, text: str = ""):
        self.parts = [text] if text else []

    def __iadd__(self, more):
        if more:
            self.parts.append(str(more))
        return self

    def __radd__(self, before):                  # an element's text moved to another (`reparentChildren`)
        if not isinstance(before, str):
            return NotImplemented
        text = Text(before)
        text += self
        return text

    def __bool__(self):
        return bool(self.parts)

    def __str__(self):
        if len(self.parts) > 1:
            self.parts = ["".join(self.parts)]
        return self.parts[0] if self.parts else ""


ETree: Any = treebuilders.getTreeBuilder("etree")          # classes made by a function, as html5lib makes them
ETreeWalker: Any = html5lib_shim.getTreeWalker("etree")


class Element(ETree.elementClass):
    """html5lib's element of an ElementTree, whose text grows as a `Text`, and which finds the child it inserts before
    from its end (the parser inserts before the table it is in, its parent's last child) instead of copying the list
    of its children and searching it from the start."""

    def insertText(self, data, insertBefore=None):
        element = self._element
        if not len(element):
            target, attr = element, "text"
        elif insertBefore is None:
            target, attr = element[-1], "tail"
        else:
            i = place(element, insertBefore._element)
            target, attr = (element[i - 1], "tail") if i > 0 else (element, "text")
        text = getattr(target, attr)
        if not isinstance(text, Text):
            setattr(target, attr, text := Text(text or ""))
        text += data

    def insertBefore(self, node, refNode):
        self._element.insert(place(self._element, refNode._element), node._element)
        node.parent = self


def place(parent, child) -> int:
    """The index of `child` among the children of `parent`, searched from the last."""
    for i in range(len(parent) - 1, -1, -1):
        if parent[i] is child:
            return i
    raise ValueError("not a child")


class Tree(ETree):
    """html5lib's tree builder of ElementTrees, with `Element`."""

    elementClass = Element


class Walker(ETreeWalker):
    """html5lib's walker of the tree, which finds an element's place among its siblings again when it leaves it
    (`list(parent).index(element)`: a table of n rows cost n² steps), with that place kept on its stack instead, and
    each text as a string."""

    def getNodeDetails(self, node):
        details = super().getNodeDetails(node)
        return (details[0], str(details[1])) if details[0] == TEXT else details

    def getFirstChild(self, node):
        element, key, parents, flag = node if isinstance(node, tuple) else (node, None, [], None)
        if flag in ("text", "tail"):
            return None
        if element.text:
            return element, key, parents, "text"
        return self._child(element, key, parents)

    def getNextSibling(self, node):
        if not isinstance(node, tuple):
            return None
        element, key, parents, flag = node
        if flag == "text":
            return self._child(element, key, parents)
        if element.tail and flag != "tail":
            return element, key, parents, "tail"
        if key < len(parents[-1][0]) - 1:
            return parents[-1][0][key + 1], key + 1, parents, None
        return None

    def getParentNode(self, node):
        if not isinstance(node, tuple):
            return None
        element, key, parents, flag = node
        if flag == "text":
            return (element, key, parents, None) if parents else element
        parent, place = parents.pop()
        return (parent, place, parents, None) if parents else parent

    @staticmethod
    def _child(element, key, parents):
        if not len(element):
            return None
        parents.append((element, key))
        return element[0], 0, parents, None


# -- the tokens: bounds on the parser's work ----------------------------------------------------------------------
class Pieces(html5lib_shim.HTMLTokenizer):
    """html5lib's tokenizer loop (`HTMLTokenizer.__iter__`), which stops (OverBound) past MAX_PIECES steps within one
    tag, comment or doctype: each step appends a piece to it (`token["name"] += data`, a copy of all of it so far).
    The input stream's errors (an invalid code point each) are dropped, not handed on one by one from the front of
    their list, each a shift of the rest: the parser only records them."""

    def __iter__(self):
        self.tokenQueue: deque = deque([])
        pieces = 0
        while self.state():
            if self.stream.errors:
                self.stream.errors.clear()
            pieces += 1
            while self.tokenQueue:
                token = self.tokenQueue.popleft()
                if token["type"] != PARSE_ERROR:
                    pieces = 0
                yield token
            if pieces > MAX_PIECES:
                raise OverBound(f"a tag, comment or doctype of over {MAX_PIECES} pieces")


class BoundedTokenizer(html5lib_shim.BleachHTMLTokenizer, Pieces):
    """bleach's tokenizer over `Pieces`, which hands each run of text to the parser at once, and stops (OverBound) at
    a start tag past MAX_DEPTH open elements or MAX_FORMATTING formatting ones.

    The parser sees the tokens it would have seen had the run been read at once (a run starts at a token of
    characters, which spaces continue, so the newline that a `<pre>` drops still comes first on its own), and one
    step for it instead of one per character. Parse errors are not handed on: the parser only records them, each with
    its position found by a scan of the input, and the tree is the same without them; nor a lone NUL, which the
    parser drops in every place that the allowed tags can lead to. The parser's stacks are those after the tokens
    handed on so far: the run held back can reopen at most MAX_FORMATTING elements."""

    def __iter__(self):
        run: list[str] = []
        tree = self.parser.tree
        for token in super().__iter__():
            kind = token["type"]
            if kind == PARSE_ERROR or (kind == CHARACTERS and token["data"] == "\0"):
                continue
            if kind == CHARACTERS or (kind == SPACE and run):
                run.append(token["data"])
                continue
            if run:
                yield {"type": CHARACTERS, "data": "".join(run)}
                run = []
            if kind in (START, EMPTY) and token["name"] not in VOID and (
                    len(tree.openElements) >= MAX_DEPTH or len(tree.activeFormattingElements) >= MAX_FORMATTING):
                raise OverBound(f"over {MAX_DEPTH} open elements or {MAX_FORMATTING} formatting ones")
            yield token
        if run:
            yield {"type": CHARACTERS, "data": "".join(run)}


class BoundedParser(html5lib_shim.BleachHTMLParser):
    """bleach's parser, with `BoundedTokenizer` (bleach's `_parse`, which names its tokenizer)."""

    def _parse(self, stream, innerHTML=False, container="div", scripting=True, **kwargs):
        self.innerHTMLMode = innerHTML
        self.container = container
        self.scripting = scripting
        self.tokenizer = BoundedTokenizer(stream=stream, consume_entities=self.consume_entities, parser=self,
                                          **kwargs)
        self.reset()
        try:
            self.mainLoop()
        except html5lib_shim.ReparseException:
            self.reset()
            self.mainLoop()
