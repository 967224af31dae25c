"""Text from runs, targets and specs on a page: one escaping function per output format.

Whoever controls a target or a campaign directory writes what its runs record: the kernel
release (``uname -r``), a knob's read-back value and the platform's names in ``meta.json``,
the metric names, units and error texts in ``result.json``, the labels of a spec. On a page
that text is text, never markup: every renderer passes it through the function of its
output format where it enters the page, and leaves its own markup around it alone, so a
page of ordinary names is the same, byte for byte, as it was unescaped.

=================  ===============================================================
:func:`html`       HTML element content and attribute values
:func:`markdown`   Markdown text, table cells included (Markdown renders HTML)
:func:`code_span`  a Markdown inline code span holding the text as it is
:func:`latex`      LaTeX text
:func:`one_line`   one line of a plain-text table (control characters shown escaped)
:func:`script`     JSON text inside an HTML ``<script>`` element
:func:`mathtext`   matplotlib text (a ``$`` pair would be parsed as math)
:func:`hv_title`   a holoviews title (a format string; a layout's is HTML as well)
=================  ===============================================================
"""

from __future__ import annotations

import html as _html
import re

from lisa_ext import errors

__all__ = ["code_span", "html", "hv_title", "latex", "markdown", "mathtext", "one_line", "script"]

#: what ends a line for a Markdown renderer or a reader: a newline would end a table row
_LINE_BREAKS = re.compile(r"[\r\n\v\f\x1c-\x1e\x85\u2028\u2029]+")
#: Markdown: the backslash (an escape of our own must not be undone), then what makes a cell
#: boundary (|), a code span (`), a link ([ ]), math ($: GitHub and Jupyter render it) or HTML
_MARKDOWN = {"\\": "\\\\", "|": "\\|", "`": "\\`", "[": "\\[", "]": "\\]", "$": "\\$", "&": "&amp;",
             "<": "&lt;", ">": "&gt;"}
_MARKDOWN_RE = re.compile("|".join(re.escape(c) for c in _MARKDOWN))
_LATEX = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
          "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}
_LATEX_RE = re.compile("|".join(re.escape(c) for c in _LATEX))


def html(text: object) -> str:
    """``text`` as HTML text: ``& < > " '`` as entities, so it is safe in element content and
    in a quoted attribute value alike."""
    return _html.escape(str(text), quote=True)


def markdown(text: object) -> str:
    """``text`` as Markdown text on one line: ``\\ | ` [ ] $`` backslash-escaped (no cell
    boundary, code span, link or math of its own), ``& < >`` as entities (no HTML), line
    breaks as one space (a table row stays one row). Emphasis characters (``*``, ``_``) are left:
    they change how a name looks, not what the page holds."""
    flat = _LINE_BREAKS.sub(" ", str(text))
    return _MARKDOWN_RE.sub(lambda m: _MARKDOWN[m.group(0)], flat)


def code_span(text: object) -> str:
    """``text`` on one line as a Markdown inline code span: its delimiters are one backtick
    more than its longest run of backticks (CommonMark), padded with a space where the text
    would otherwise touch them or lose its own edge spaces. Inside, nothing is markup."""
    flat = _LINE_BREAKS.sub(" ", str(text))
    fence = "`" * (max((len(run) for run in re.findall("`+", flat)), default=0) + 1)
    edges = flat[:1] + flat[-1:]
    padded = not flat or "`" in edges or (flat[0] == flat[-1] == " " and flat.strip() != "")
    pad = " " if padded else ""
    return f"{fence}{pad}{flat}{pad}{fence}"


def latex(text: object) -> str:
    """``text`` as LaTeX text on one line: ``& % $ # _ { } ~ ^ \\`` escaped, line breaks as
    one space (a blank line would end a paragraph, a newline a tabular row's cell)."""
    flat = _LINE_BREAKS.sub(" ", str(text))
    return _LATEX_RE.sub(lambda m: _LATEX[m.group(0)], flat)


def one_line(text: object) -> str:
    """``text`` as one line of a plain-text table: every control character (newline, tab,
    a terminal's escape sequence) written as its Python escape, so a name cannot add a row
    of its own or drive the terminal it is printed on (the rule of every error message,
    :func:`lisa_ext.errors.one_line`)."""
    return errors.one_line(str(text))


def script(text: str) -> str:
    """JSON ``text`` inside an HTML ``<script>`` element: ``</`` and ``<!--`` spelled with a
    backslash (the same JSON to JavaScript), so no string in it can end the element or
    switch the HTML parser into a script comment."""
    return text.replace("</", "<\\/").replace("<!--", "<\\!--")


def mathtext(text: object) -> str:
    """``text`` as matplotlib text: each ``$`` escaped, so no part of it is parsed as math (a
    formula matplotlib cannot parse fails the whole drawing); matplotlib shows ``\\$`` as
    ``$``."""
    return str(text).replace("$", "\\$")


def hv_title(text: object, *, layout: bool = False) -> str:
    """``text`` as a holoviews ``title`` option, which holoviews formats (``{label}``): its
    braces doubled; a ``layout``'s title, which holoviews' bokeh backend shows as HTML, is
    HTML-escaped first."""
    shown = html(text) if layout else str(text)
    return shown.replace("{", "{{").replace("}", "}}")
