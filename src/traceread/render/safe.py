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
_OTHER = "\x7f-\x9f\u2028\u2029\ud800-\udfff" + FORMAT_CHARS
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


def for_display(a):
    """A shallow copy of Analysis ``a`` for the text report: its verdict's prose (which
    quotes op, kernel and file names) made one inert line per string. ``a`` itself
    and everything JSON reads keep the exact names."""
    import copy

    shown = copy.copy(a)
    # the inductor kernel names in its strings shortened too (``short_names_in``)
    shown.verdict = _each_string(a.verdict, lambda v: short_names_in(name(v)))
    return shown
