"""Text that is safe to show on a terminal.

A trace names its kernels, ops, devices, NVTX ranges and files as it likes, and those
names reach the terminal. An ESC there starts a control sequence: OSC 52 writes the
clipboard, OSC 0 the window title, CSI clears the screen or moves the cursor; C1
controls (U+0080-U+009F) do the same on terminals that take 8-bit controls; a
newline or carriage return in a name forges a line of our own output. So:

* ``name(text)``: one name, always one line. Every C0 control (tab and newline too),
  DEL, C1 control, Unicode line / paragraph separator, every format character
  (category Cf: the bidi marks, embeddings, overrides and isolates U+200E/F, U+061C,
  U+202A-E, U+2066-9, zero-width characters, U+FFF9-FFFB interlinear annotation...)
  and a lone surrogate (a file-name byte that is not UTF-8) becomes a visible escape
  (``\\x1b``, ``\\n``, ``\\u202e``, ``\\xff`` for the byte 0xff of a name).
* ``text(report)``: a whole rendered report. The same, except that ``\\t`` and ``\\n``
  are its own layout and stay.

* ``short(name, w)`` / ``short_names_in(prose)``: a name fitted to a terminal column,
  an inductor kernel keeping the tail that tells it apart.

* ``xml(text)``: a name as XML 1.0 character data or attribute value (the SVG flame graph):
  ``name()`` first (C0 controls, U+FFFE/U+FFFF and lone surrogates are not XML
  characters at all: one makes the whole document unreadable), then ``&<>"'`` escaped.
* ``html(text)``: a name (or any string) as HTML text or attribute value: ``xml()``, so no
  bidi control, control character or noncharacter reaches the page raw;
  ``html_block(text)`` keeps the newlines of a ``<pre>`` block; ``bdi(text)`` isolates a
  name's direction from the text around it (``<bdi>``).
* ``folded(frame)``: one frame of a collapsed stack (``a;b;c 123``): ``name()``, and its
  separator ``;`` made ``,``.

JSON needs neither: ``json.dumps`` escapes every control itself and the values stay exact.
"""
from __future__ import annotations

import re

# Unicode category Cf (format characters: bidi marks, embeddings, overrides, isolates,
# zero-width characters, interlinear annotation, tags...), Unicode 15; a test checks it
# against the running Python's unicodedata.
FORMAT_CHARS = ("\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u180e"
                "\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb"
                "\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3"
                "\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f")
# the rest: C1, line/paragraph separators, lone surrogates (undecodable file-name bytes)
_OTHER = "\x7f-\x9f\u2028\u2029\ud800-\udfff\ufdd0-\ufdef\ufffe\uffff" + FORMAT_CHARS
_NAME_BAD = re.compile("[\x00-\x1f" + _OTHER + "]")
_TEXT_BAD = re.compile("[\x00-\x08\x0b-\x1f" + _OTHER + "]")
_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(m: re.Match) -> str:
    c = m.group()
    if c in _SHORT:
        return _SHORT[c]
    o = ord(c)
    if 0xDC80 <= o <= 0xDCFF:       # os.fsdecode's stand-in for a name's byte o - 0xDC00
        return f"\\x{o - 0xDC00:02x}"
    if o < 0x100:
        return f"\\x{o:02x}"
    return f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}"


def encodable(value) -> str:
    """``value`` as text every UTF-8 writer takes: only its lone surrogates (the bytes of
    a file name that are not UTF-8) become ``\\xNN``; the rest is kept byte for byte. For
    machine formats (CSV, HTML, JSON), which keep their bytes."""
    from ..errors import display_path

    return display_path(value if isinstance(value, str) else str(value))


def encodable_all(value):
    """``value`` with every string inside it (dict keys too) ``encodable``."""
    if isinstance(value, str):
        return encodable(value)
    if isinstance(value, dict):
        return {encodable_all(k): encodable_all(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(encodable_all(v) for v in value)
    return value


def name(value) -> str:
    """``value`` as one terminal-safe line: every control character made visible."""
    s = str(value)
    return _NAME_BAD.sub(_escape, s) if _NAME_BAD.search(s) else s


def xml(value) -> str:
    """``value`` as well-formed XML 1.0 text or attribute content, one inert line."""
    from html import escape

    return escape(name(value), quote=True)


def html(value) -> str:
    """``value`` as HTML text or attribute content: one inert line, ``&<>"'`` escaped."""
    return xml(value)


def html_block(value) -> str:
    """A multi-line text for ``<pre>``: ``text()`` (its newlines and tabs stay), escaped."""
    from html import escape

    return escape(text(value), quote=True)


def bdi(value) -> str:
    """A name as HTML text in its own ``<bdi>``: a right-to-left name cannot reorder the
    numbers and words around it."""
    return f"<bdi>{html(value)}</bdi>"


def folded(frame) -> str:
    """One frame of a collapsed-stack line: one inert line without the ``;`` separator."""
    return name(frame).replace(";", ",")


def text(value) -> str:
    """A rendered report made terminal-safe; its tabs and newlines stay layout."""
    s = str(value)
    return _TEXT_BAD.sub(_escape, s) if _TEXT_BAD.search(s) else s


# An inductor kernel's name lists every op it fuses (real traces of the corpus: up to 115
# characters, triton_poi_fused__to_copy_arange_cat_..._unsqueeze_view_12); what tells two
# such kernels apart is the tail (the kernel's index, or a hash), so shortening keeps it.
_INDUCTOR = re.compile(r"\btriton_(?:poi|red|per|tem|for|unk)_fused_\w+")
# the kept tail: "_" + an index or a hash (up to 16 characters, a digit among them); a name
# cut short before it reached its tail (a lever's ncu command) ends in an op, and is cut at its end
_TAIL = re.compile(r"_(?=[0-9a-z]*[0-9])[0-9a-z]{1,16}$")
INDUCTOR_W = 40    # an inductor name quoted inside prose


def short(value, w: int) -> str:
    """``value`` as one terminal-safe line of at most ``w`` characters (runs of spaces
    squeezed). An inductor fused kernel loses the middle of its op list and keeps its
    head and tail (``triton_poi_fused__to_copy_ara…_12``); any other name its end."""
    s = name(re.sub(" +", " ", str(value).strip(" ")))
    if len(s) <= w:
        return s
    tail = _TAIL.search(s)
    if _INDUCTOR.fullmatch(s) and tail and w - 1 - len(tail.group()) >= 16:
        return s[: w - 1 - len(tail.group())] + "…" + tail.group()
    return s[: w - 1] + "…"


# a name a command takes (ncu --kernel-name, rocprof-compute -k) stays whole: it is copied
_IN_PROSE = re.compile(r"(?<!--kernel-name )(?<!--kernel-name regex:\^)(?<!-k )"
                       + _INDUCTOR.pattern)


def short_names_in(value: str, w: int = INDUCTOR_W) -> str:
    """Prose with every inductor kernel name in it ``short()``-ened to ``w`` characters
    (the text report's verdict and levers; JSON keeps the whole name), except where a
    command quotes it."""
    return _IN_PROSE.sub(lambda m: short(m.group(), w), value)


def names(df, columns=("name", "Name", "Range", "Operation", "short_name")):
    """A copy of DataFrame ``df`` whose text columns among ``columns`` are ``name()``-escaped."""
    todo = [c for c in columns if c in getattr(df, "columns", ())]
    if not todo:
        return df
    df = df.copy()
    for c in todo:
        df[c] = df[c].map(lambda v: name(v) if isinstance(v, str) else v)
    return df


def _each_string(value, fn):
    """``value`` with ``fn`` applied to every string inside it (dicts, lists, tuples)."""
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, dict):
        return {k: _each_string(v, fn) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_each_string(v, fn) for v in value)
    return value


def strings(value):
    """``value`` with every string inside it (dicts, lists, tuples) made ``name()``-safe."""
    return _each_string(value, name)


def inert(value):
    """``value`` with every string inside it ``name()``-escaped: dict keys and values, list
    and tuple items, and every text column (and text index) of a DataFrame inside it. The
    one escaping step between an analysis and the text report: a section cannot forget a
    name, whichever field it reads it from."""
    if isinstance(value, str):
        return name(value)
    if isinstance(value, dict):
        return {inert(k): inert(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)) and type(value) in (list, tuple):
        return type(value)(inert(v) for v in value)
    if _is_frame(value):
        return _inert_frame(value)
    return value


def _is_frame(value) -> bool:
    return type(value).__name__ == "DataFrame" and hasattr(value, "select_dtypes")


def _inert_frame(df):
    """A copy of DataFrame ``df`` whose string cells (object columns, the index) are escaped;
    ``df`` itself when none needs it (most do not: the check is one scan)."""
    text = [c for c in df.columns if df[c].dtype == object or str(df[c].dtype) in ("string", "category")]
    bad = [c for c in text if df[c].map(lambda v: isinstance(v, str) and _NAME_BAD.search(v) is not None
                                        ).any()]
    index_bad = df.index.dtype == object and any(isinstance(v, str) and _NAME_BAD.search(v)
                                                 for v in df.index)
    if not bad and not index_bad:
        return df
    df = df.copy()
    for c in bad:
        df[c] = df[c].astype(object).map(lambda v: name(v) if isinstance(v, str) else v)
    if index_bad:
        df.index = [name(v) if isinstance(v, str) else v for v in df.index]
    df.attrs = inert(dict(df.attrs))
    return df


def for_display(a):
    """A shallow copy of Analysis ``a`` for the text report: every string of every field
    it reads (the verdict's prose, the utilization record's device name, the gaps' op
    names, the DataFrames' name columns...) made one inert line (``inert``). ``a``
    itself and everything JSON reads keep the exact names."""
    import copy
    import dataclasses

    shown = copy.copy(a)
    keep = {"trace", "replay_graph", "facts", "window"}   # read for numbers, never shown
    for f in dataclasses.fields(a) if dataclasses.is_dataclass(a) else ():
        if f.name not in keep and f.name != "verdict":
            setattr(shown, f.name, inert(getattr(a, f.name)))
    shown.meta = _inert_meta(a.meta) if hasattr(a, "meta") else None
    # the inductor kernel names in its strings shortened too (``short_names_in``)
    shown.verdict = _each_string(a.verdict, lambda v: short_names_in(name(v)))
    return shown


def _inert_meta(meta):
    """A copy of TraceMeta ``meta`` with its strings (devices, process names, extras) escaped."""
    import copy
    import dataclasses

    if not dataclasses.is_dataclass(meta):
        return meta
    shown = copy.copy(meta)
    for f in dataclasses.fields(meta):
        v = getattr(meta, f.name)
        if f.name != "path" and isinstance(v, (str, dict, list, tuple)):
            setattr(shown, f.name, inert(v))
    return shown
