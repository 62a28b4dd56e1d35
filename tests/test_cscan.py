"""The native chunk decoder (readers/_cscan.c) equals the msgspec path bit for bit.

Chunk level: the C scanner's Chunk is compared field by field with the
Python decode of the same bytes (and it must *accept* real traces -- a decoder
that declines everything would pass any table test). Table level: the
streaming read with each decoder equals the small-file path. Bad input: the
scanner never crashes, and declines (hands to Python) everything Python
rejects.
"""
from __future__ import annotations

import dataclasses
import gzip
import json
import os
import random
from pathlib import Path

import numpy as np
import pytest

from conftest import CORPUS, FIXTURES, corpus_or_skip
from test_stream import KINETO_FIXTURES, assert_same
from traceread.readers import _native
from traceread.readers import common
from traceread.readers import stream as S
from traceread.synth.kineto import ERAS, write_kineto
from traceread.synth.scenarios import launch_bound

native = pytest.mark.skipif(not _native.available(), reason="native decoder not built")


@pytest.fixture
def use(monkeypatch):
    def set_decoder(name: str) -> None:
        monkeypatch.setenv(_native.ENV, name)
    return set_decoder


def _same(a, b, where="chunk"):
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        assert type(a) is type(b) and a.dtype == b.dtype and np.array_equal(a, b), where
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{where}[{i}]")
    elif isinstance(a, dict):
        assert list(a) == list(b), where  # same keys, same order
        for k in a:
            _same(a[k], b[k], f"{where}.{k}")
    else:
        assert type(a) is type(b) and a == b, (where, a, b)


FIELDS = tuple(f.name for f in dataclasses.fields(common.Chunk))


def compare(buf, exact: bool = False) -> str:
    """'native' when the scanner decoded buf exactly as Python does, 'declined' when
    it handed buf to Python. Fails when it accepted something different."""
    try:
        want, err = _python(buf, exact), None
    except Exception as e:  # noqa: BLE001 - whatever Python raises, C must decline
        want, err = None, e
    res = _native._cscan.scan(buf, exact, False, _native._ext())
    if res is None:
        return "declined"
    assert err is None, f"scanner accepted input Python rejects: {err!r}"
    got = _native._chunk(res, _native._ext())
    for f in FIELDS:
        _same(getattr(want, f), getattr(got, f), f)
    return "native"


def _python(buf, exact):
    saved = os.environ.get(_native.ENV)
    os.environ[_native.ENV] = "python"
    try:
        return S.decode_chunk(buf, exact)
    finally:
        if saved is None:
            del os.environ[_native.ENV]
        else:
            os.environ[_native.ENV] = saved


def chunks(raw: bytes, chunk_bytes: int):
    start = S.find_array_start(raw[:S._HEAD_SCAN])
    end = S.find_array_end(raw, start, raw[:start - 1])
    for a, b in S._split(raw, start, end, chunk_bytes):
        yield S._wrap(memoryview(raw)[a:b])


def _raw(path: Path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def assert_native_everywhere(path: Path, chunk_bytes: int = 1 << 20) -> int:
    n = 0
    for buf in chunks(_raw(path), chunk_bytes):
        for exact in (False, True):
            assert compare(buf, exact) == "native", (path.name, exact)
        n += 1
    return n


# --- chunk level: fixtures, synthetic eras, corpus -------------------------------

@native
@pytest.mark.parametrize("path", [p for p in KINETO_FIXTURES if "_et." not in p.name],
                         ids=lambda p: p.name)
def test_fixture_chunks_decode_natively_and_equal(path):
    assert assert_native_everywhere(path, chunk_bytes=64 << 10) >= 1


@native
@pytest.mark.parametrize("era", ERAS)
def test_synthetic_era_chunks_decode_natively_and_equal(tmp_path, era):
    trace, _ = launch_bound(steps=3, ops_per_step=40)
    path = write_kineto(trace, tmp_path / f"e{era}.json", era=era)
    assert assert_native_everywhere(path, chunk_bytes=4096) > 3


def _corpus_kineto() -> list[str]:
    manifest = CORPUS / "MANIFEST.tsv"
    if not manifest.is_file():
        return []
    rows = [line.split("\t") for line in manifest.read_text().splitlines()[1:]]
    return [r[0] for r in rows if len(r) > 6 and r[6].startswith("kineto")]


# A quick cross-section in the default run; the whole corpus under -m slow.
CORPUS_QUICK = (
    "AMD-AGI__TraceLens/tests/traces/mi300/resnet_act_checkpoint.json.gz",
    "pytorch__kineto/tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
)


@native
@pytest.mark.corpus
@pytest.mark.parametrize("rel", CORPUS_QUICK, ids=lambda r: Path(r).name[:40])
def test_corpus_chunks_decode_natively_and_equal(rel):
    src = corpus_or_skip() / rel
    if not src.is_file():
        pytest.skip(f"{rel} not in this corpus")
    assert_native_everywhere(src)


@native
@pytest.mark.slow
@pytest.mark.corpus
@pytest.mark.parametrize("rel", _corpus_kineto() or ["(no corpus)"], ids=lambda r: r[-50:])
def test_every_corpus_kineto_file_natively_equal(rel):
    src = corpus_or_skip() / rel
    assert assert_native_everywhere(src) >= 1


# --- table level, each decoder ----------------------------------------------------

@pytest.mark.parametrize("decoder", ["python", pytest.param("native", marks=native)])
@pytest.mark.parametrize("path", KINETO_FIXTURES[:6], ids=lambda p: p.name)
def test_stream_table_equals_small_path_with_each_decoder(use, decoder, path):
    use(decoder)
    assert_same(path, chunk_bytes=4096, workers=1)


@pytest.mark.parametrize("decoder", ["python", pytest.param("native", marks=native)])
@pytest.mark.parametrize("era", ERAS)
def test_every_era_with_each_decoder(tmp_path, use, decoder, era):
    use(decoder)
    trace, _ = launch_bound(steps=3, ops_per_step=40)
    path = write_kineto(trace, tmp_path / f"e{era}.json.gz", era=era)
    assert_same(path, chunk_bytes=512, workers=1)


@native
def test_process_pool_with_native_decoder(tmp_path, use):
    use("native")
    raw = gzip.decompress((FIXTURES / "kineto" / "tracelens_b200_eager_trace.json.gz").read_bytes())
    path = tmp_path / "t.json"
    path.write_bytes(raw)
    assert len(assert_same(path, chunk_bytes=256 << 10, workers=2)) > 20_000


@native
def test_epoch_float_timestamps_exact_on_native_path(tmp_path, use):
    # PyTorch 2.0-2.3: float epoch µs with ns decimals; > 3 decimals round half-even
    use("native")
    ts = ["1700000000123456.377", "1700000000123457.0005", "1700000000123458.0015",
          "1700000000123459.9999", "1.700000000123460377e15"]
    events = [{"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": f"@{i}",
               "dur": 1.5} for i in range(len(ts))]
    text = json.dumps({"traceEvents": events})
    for i, t in enumerate(ts):
        text = text.replace(f'"@{i}"', t)
    path = tmp_path / "epoch.json"
    path.write_text(text)
    t = assert_same(path, chunk_bytes=64, workers=1)
    assert t.meta.extra["exact_ts_decode"] is True
    assert t.table.column("ts").to_pylist()[:4] == [
        1700000000123456377, 1700000000123457000, 1700000000123458002, 1700000000123460000]


# --- crafted events: accepted and equal, or declined -------------------------------

def _chunk(*events: str) -> bytes:
    return ("[" + ",".join(events) + "]").encode()


ACCEPTED = [
    '{"ph":"X","name":"a","cat":"c","pid":1,"tid":2,"ts":10,"dur":1}',
    '{"ph":"X","name":"caf\\u00e9 \\ud83d\\ude00 \\"q\\" \\\\ \\/ \\n","ts":1.5,"dur":0.001}',
    '{"ph":"X","name":"\u00e9t\u00e9","ts":-12.25,"dur":null,"pid":"Spans","tid":"stream 7"}',
    '{"ph":"X","ts":1e3,"dur":2.5E-1,"pid":" -12 ","tid":"007"}',
    '{"ph":"X","ts":123456789012.3456,"dur":0.00049,"pid":1.9,"tid":-1.9}',
    '{"ph":"i","ts":5,"s":"t","args":{"External id":"17","correlation":"0x0","device":3.7}}',
    '{"ph":"X","ts":5,"args":{"bytes":"1024","kind":"DtoD","direction":7,"stream":null}}',
    '{"ph":"X","ts":5,"args":{"size":2048,"kind":null}}',
    '{"ph":"X","ts":5,"args":{"Collective name":"allreduce","In msg nelems":10,'
    '"Out msg nelems":"10","dtype":"Float","Group size":8,"Process Group Name":"0",'
    '"Process Group Description":"default_pg","Process Group ID":1.0}}',
    '{"ph":"X","ts":5,"args":{"Collective name":3,"Group size":null}}',
    '{"ph":"M","name":"process_name","pid":3,"tid":0,"args":{"name":"python"}}',
    '{"ph":"M","name":"process_labels","pid":"x","args":{"labels":"CPU","name":1.5}}',
    '{"ph":"M","name":null}',
    '{"ph":"s","id":1,"args":[1,{"a":[]}],"pid":true,"ts":"x"}',
    '{"ph":"X","args":{"Input Dims":[[1,2],[3]],"Input type":["float",""]},"ts":1}',
    '{"ph":"B","ts":4599999999999999,"cat":null,"dur":-4599999999999.999}',
    '{"ph":"E","ts":0.000,"name":""}',
    '{"ph":"X","cat":"c","unknown":{"deep":[[[[{"x":"\\u0000"}]]]]},"ts":2}',
    # issue 12's argument columns (decoded when _kineto_decode has them, else skipped)
    '{"ph":"X","ts":3,"args":{"Input Dims":[[2, 3], []],"Input type":["float", "Sc\\u00e4lar"],'
    '"Concrete Inputs":["", "1"],"flops":120}}',
    '{"ph":"X","ts":3,"args":{"Input Dims":null,"Flops":7.0,"Input type":"x"}}',
    '{"ph":"X","ts":3,"args":{"Input Dims":[],"flops":null,"Flops":"12"}}',
    '{"ph":"X","ts":3,"args":{"grid":[1, 2, 3],"block":[128,1,1],"registers per thread":32,'
    '"shared memory":0,"est. achieved occupancy %":12.5}}',
    '{"ph":"i","ts":3,"args":{"Bytes":-512,"Total Allocated":1024,"Total Reserved":2048,'
    '"Device Id":0}}',
    '{"ph":"i","ts":3,"args":{"Bytes":null,"Total Allocated":1024}}',
]

DECLINED = [
    '{"ph":"X","pid":true}',                       # ValidationError in msgspec
    '{"ph":"X","ts":"12"}',
    '{"ph":"X","dur":"1"}',
    '{"ph":"X","args":[1]}',
    '{"ph":"Z"}',
    '{"name":"no ph"}',
    '{"ph":"X","name":5}',                          # name column keeps objects
    '{"ph":"X","ph":"X"}',                          # duplicate key
    '{"ph":"X","\\u0070id":3}',                     # escaped key
    '{"ph":"X","pid":123456789012345678901}',       # big int
    '{"ph":"X","ts":1e400}',
    '{"ph":"X","ts":4611686018427388}',             # beyond +-2**62 ns: Python's call
    '{"ph":"X","ts":1,"dur":-4.7e15}',
    '{"ph":"X","args":{"External id":"+5"}}',       # int() vs the regex
    '{"ph":"X","pid":"\u0663"}',                    # a Unicode digit
    '{"ph":"X","args":{"kind":[1]},"ts":1}',
    '{"ph":"X","name":"\\ud800"}',                  # lone surrogate
    '{"ph":"X","x":"a\x01b"}',                      # raw control char
    '{"ph":"X"},',                                  # trailing comma
    '{"ph":"X",}',
    '{"ph":"X","ts":01}',
    '{"ph":"X","ts":1.}',
    '{"ph":"X","ts":-}',
    '{"ph":"X","x":tru}',
    '5',
]


@native
@pytest.mark.parametrize("event", ACCEPTED)
@pytest.mark.parametrize("exact", [False, True], ids=["float", "exact"])
def test_crafted_events_decode_natively_and_equal(event, exact):
    buf = _chunk(event, event.replace('"ts"', '"ts0"'), event)
    assert compare(buf, exact) == "native"


@native
@pytest.mark.parametrize("event", DECLINED)
def test_odd_events_are_handed_to_python(event):
    good = '{"ph":"X","name":"ok","ts":1}'
    assert compare(_chunk(good, event, good)) == "declined"


@native
def test_invalid_utf8_only_matters_where_python_builds_a_str():
    skipped = b'[{"ph":"X","other":"\xff\xfe","ts":1}]'
    assert compare(skipped) == "native"
    for used in (b'[{"ph":"X","name":"\xff","ts":1}]',
                 b'[{"ph":"X","ts":1,"args":{"dtype":"\xc0\x80"}}]'):
        assert compare(used) == "declined"


# --- malformed input: never a crash, never a different answer ------------------------

def _sample_chunk() -> bytes:
    events = [json.loads(e) for e in ACCEPTED if '"ph":"s"' not in e]
    return json.dumps(events, indent=1, ensure_ascii=False).encode()


@native
def test_every_truncation_is_declined_or_equal():
    buf = _sample_chunk()
    outcomes = {compare(buf[:i]) for i in range(len(buf))}
    assert outcomes == {"declined"}
    assert compare(buf) == "native"


@native
def test_random_corruption_never_crashes_or_differs():
    rng = random.Random(14)
    base = _sample_chunk()
    seen = set()
    for _ in range(3000):
        b = bytearray(base)
        for _ in range(rng.randint(1, 4)):
            op = rng.random()
            i = rng.randrange(len(b))
            if op < 0.4:
                b[i] = rng.randrange(256)
            elif op < 0.7:
                b[i:i] = bytes([rng.choice(b'{}[]",:\\0123456789.eE-+ntfu\x00\x80')])
            else:
                del b[i:i + rng.randint(1, 8)]
        seen.add(compare(bytes(b)))
    assert seen == {"native", "declined"}


# The scanner reads `"key": value` / `"key":value` and a value's ',' / '}' with
# byte compares, every other spacing through the whitespace masks: all must agree.
COLON_GAPS = [":", ": ", " :", " : ", ":  ", ":\n", ":\t", ":\r\n   ", "\n:\n"]


@native
@pytest.mark.parametrize("colon", COLON_GAPS, ids=repr)
@pytest.mark.parametrize("comma", [",", ", ", " ,", ",\n  ", "\t,\t"], ids=repr)
def test_any_spacing_around_colons_and_commas_is_equal(colon, comma):
    events = [json.loads(e) for e in ACCEPTED if '"ph":"s"' not in e]
    buf = json.dumps(events, separators=(comma, colon), ensure_ascii=False).encode()
    assert compare(buf) == "native"
    assert compare(buf, exact=True) == "native"


@native
@pytest.mark.parametrize("colon", [":", ": ", " : "], ids=repr)
def test_truncation_next_to_a_colon_is_declined(colon):
    ev = '{"ph"%s"X","name"%s"a","ts"%s1,"args"%s{"External id"%s7}}' % ((colon,) * 5)
    buf = ("[" + ev + "]").encode()
    assert compare(buf) == "native"
    for i in range(len(buf)):
        assert compare(buf[:i]) == "declined", buf[:i]


@native
def test_corrupted_repeats_of_one_event_never_differ():
    """Keys are first compared with the previous object's: a key that differs from it
    by one byte, a quote or an escape must take the full scan (or decline)."""
    ev = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 8, "ts": 10.5,
          "dur": 2, "args": {"External id": 3, "Ev Idx": 1, "kind": "k", "": 0}}
    base = json.dumps([ev] * 6, indent=1).encode()
    assert compare(base) == "native"
    rng = random.Random(24)
    second = base.index(b'"ph"', 10)
    seen = set()
    for _ in range(1500):
        b = bytearray(base)
        i = rng.randrange(second, len(b))
        op = rng.random()
        if op < 0.5:
            b[i] = rng.choice(b'"\\:x \x01\xc3{}')
        elif op < 0.75:
            b[i:i] = bytes([rng.choice(b'"\\a: ')])
        else:
            del b[i]
        seen.add(compare(bytes(b)))
    assert seen == {"native", "declined"}


@native
def test_scan_takes_any_buffer_and_rejects_non_buffers():
    assert _native._cscan.scan(memoryview(b"[]"), False)[0] == 0
    assert _native._cscan.scan(bytearray(b" [ ] \n"), True)[0] == 0
    assert _native._cscan.scan(b"", False) is None
    with pytest.raises(TypeError):
        _native._cscan.scan("[]", False)


# --- choosing the decoder ---------------------------------------------------------------

def test_env_forces_the_python_decoder(use):
    use("python")
    assert not _native.wanted()
    assert _native.decode(b'[{"ph":"X","ts":1}]', False) is None
    assert "python" in _native.decoder_name()


@native
def test_native_is_the_default_where_built(monkeypatch):
    monkeypatch.delenv(_native.ENV, raising=False)
    assert _native.wanted()
    assert _native.decoder_name().startswith("native")
    assert _native.decode(b'[{"ph":"X","ts":1}]', False).n == 1


def test_native_required_but_missing_is_an_error(use, monkeypatch):
    use("native")
    monkeypatch.setattr(_native, "_cscan", None)
    with pytest.raises(RuntimeError, match="not built"):
        _native.wanted()
    monkeypatch.setenv(_native.ENV, "")
    assert _native.decoder_name().startswith("python")


def test_version_names_the_decoder(use):
    from click.testing import CliRunner

    from traceread.cli import main

    use("python")
    out = CliRunner().invoke(main, ["--version"]).output
    assert "traceread, version" in out and "decoder: python" in out


def test_read_streams_smaller_files_with_the_native_decoder(use):
    use("python")
    assert S.stream_min_bytes() == S.STREAM_MIN_BYTES
    if _native.available():
        use("native")
        assert S.stream_min_bytes() == S.STREAM_MIN_BYTES_NATIVE < S.STREAM_MIN_BYTES


@native
@pytest.mark.parametrize("body", [b"", b"  \n", b'{"ph":"X","ts":1}', b' {"ph":"X","ts":1} ,\n{"ph":"i"} '])
def test_bare_scan_equals_bracketed(body):
    a = _native._cscan.scan(b"[" + body + b"]", False)
    b = _native._cscan.scan(body, False, True)
    assert a is not None and b is not None and a[0] == b[0]
    _same(_native._chunk(a).arrays, _native._chunk(b).arrays)


@native
@pytest.mark.parametrize("body", [b",", b'{"ph":"X"},', b'[{"ph":"X"}]', b'{"ph":"X"}]'])
def test_bare_scan_declines_what_the_brackets_make_invalid(body):
    assert _native._cscan.scan(body, False, True) is None


def test_scanner_covers_what_the_python_decode_reads():
    # Fails when _kineto_decode / Chunk gain a field _cscan.c does not read (the
    # scanner then switches itself off): teach _cscan.c the field, then update
    # _native.SCANNED.
    assert _native.stale() == ""


def test_a_stale_scanner_switches_itself_off(monkeypatch):
    monkeypatch.setattr(_native, "_STALE", ["args keys"])
    monkeypatch.delenv(_native.ENV, raising=False)
    assert not _native.wanted() and not _native.available()
    assert "out of date" in _native.decoder_name() or "not built" in _native.decoder_name()


def test_chunk_fields_with_defaults_do_not_stale_the_scanner(monkeypatch):
    flagged = dataclasses.make_dataclass("Chunk", [("python_only_flag", bool, False)],
                                         bases=(common.Chunk,))
    monkeypatch.setattr(common, "Chunk", flagged)
    assert _native.stale() == ""
    required = dataclasses.make_dataclass("Chunk", [("new_column", dict)], bases=(common.Chunk,),
                                          kw_only=True)
    monkeypatch.setattr(common, "Chunk", required)
    assert "chunk fields" in _native.stale()
