"""A rank's interval arrays moved to a file of their own, read back one member at a time.

The batch parent keeps one ``RankInput`` per rank until the cross-rank pass. Most of a
record is the issuing thread's host timeline (``activity``: one (starts, ends) pair per
attribution category, ~16 B per disjoint host interval), the union of its compute
kernels and its waits: ~11 % of a synthetic trace's raw JSON, so ranks × that grew the
parent past workers × one trace. Only the cross-rank "why" (the straggler's late
windows) and ``waits.infer`` read them, one rank and one category at a time.

``spill`` writes those arrays to an uncompressed ``.npz`` in a temporary folder and puts
in their place mappings that read a member from the file on every access and keep
nothing: the parent holds ranks × a few hundred bytes, and the arrays it reads are the
same arrays (the file stores them exactly), so every result is unchanged. The file goes
when the last object reading it does; the folder when its last file does. Pickling a
spilled record gives the arrays back in memory (a file path means nothing elsewhere).
"""
from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from collections.abc import Mapping, Sequence

import numpy as np

# Records whose arrays are smaller than this stay in memory (a file costs more).
SPILL_MIN_BYTES = 64 << 10


class _Folder:
    """A temporary folder removed when no spill file refers to it any more."""

    def __init__(self):
        self.path = tempfile.mkdtemp(prefix="traceread-ranks-")
        weakref.finalize(self, shutil.rmtree, self.path, True)


class _File:
    """One record's arrays (``np.savez``, uncompressed); removed with its last reader."""

    def __init__(self, folder: _Folder, arrays: dict[str, np.ndarray]):
        self.folder = folder   # keeps the folder alive while this file is
        fd, self.path = tempfile.mkstemp(dir=folder.path, suffix=".npz")
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez(f, **arrays)
        except BaseException:
            _unlink(self.path)   # a full disk leaves no half-written file behind
            raise
        weakref.finalize(self, _unlink, self.path)

    def read(self, key: str) -> np.ndarray:
        with np.load(self.path, allow_pickle=False) as z:
            return z[key]


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


class SpilledPair(Sequence):
    """(starts, ends) read from the file on each access."""

    def __init__(self, file: _File, key: str):
        self._file, self._key = file, key

    def __getitem__(self, i):
        if isinstance(i, slice):
            return tuple(self)[i]
        if i not in (0, 1, -1, -2):
            raise IndexError(i)
        return self._file.read(f"{self._key}.{'se'[i % 2]}")

    def __len__(self) -> int:
        return 2

    def __reduce__(self):
        return tuple, (tuple(self),)


class SpilledMap(Mapping):
    """{key: (starts, ends)} of a spill file, plus small values kept in memory."""

    def __init__(self, file: _File, prefix: str, keys: list[str], kept: dict | None = None):
        self._file, self._prefix, self._keys = file, prefix, list(keys)
        self._kept = dict(kept or {})

    def __getitem__(self, key):
        if key in self._kept:
            return self._kept[key]
        if key not in self._keys:
            raise KeyError(key)
        pair = SpilledPair(self._file, f"{self._prefix}{self._keys.index(key)}")
        return pair[0], pair[1]

    def __iter__(self):
        return iter(self._keys + [k for k in self._kept if k not in self._keys])

    def __len__(self) -> int:
        return len(self._keys) + sum(k not in self._keys for k in self._kept)

    def __reduce__(self):
        return dict, (dict(self.items()),)


def _is_pair(v) -> bool:
    return (isinstance(v, tuple) and len(v) == 2
            and all(isinstance(x, np.ndarray) and x.ndim == 1 for x in v))


def _nbytes(ri) -> int:
    pairs = list(ri.activity.values()) + [ri.gpu_compute] + [
        v for v in (ri.waits or {}).values() if _is_pair(v)]
    return sum(x.nbytes for p in pairs if _is_pair(p) for x in p)


_folder_ref = None


def _folder() -> _Folder:
    """The process's spill folder (a new one once every file of the last is gone)."""
    global _folder_ref
    f = _folder_ref() if _folder_ref is not None else None
    if f is None:
        f = _Folder()
        _folder_ref = weakref.ref(f)
    return f


def spill(ri, min_bytes: int | None = None) -> bool:
    """Move ``ri``'s activity, GPU compute and wait intervals to a file (in place); False
    when they are already spilled or smaller than ``min_bytes`` (``SPILL_MIN_BYTES``)."""
    min_bytes = SPILL_MIN_BYTES if min_bytes is None else min_bytes
    if isinstance(ri.activity, SpilledMap) or not _is_pair(ri.gpu_compute) or _nbytes(ri) < min_bytes:
        return False
    waits = dict(ri.waits or {})
    wait_keys = [k for k, v in waits.items() if _is_pair(v)]
    cats = list(ri.activity)
    arrays = {}
    for prefix, keys, src in (("a", cats, ri.activity), ("w", wait_keys, waits)):
        for j, k in enumerate(keys):
            arrays[f"{prefix}{j}.s"], arrays[f"{prefix}{j}.e"] = src[k]
    arrays["g.s"], arrays["g.e"] = ri.gpu_compute
    try:
        file = _File(_folder(), arrays)
    except OSError:   # no room or no temporary folder: keep this rank's arrays in memory
        return False
    ri.activity = SpilledMap(file, "a", cats)
    ri.gpu_compute = SpilledPair(file, "g")
    if ri.waits:
        ri.waits = SpilledMap(file, "w", wait_keys, {k: v for k, v in waits.items() if k not in wait_keys})
    return True


__all__ = ["spill", "SpilledMap", "SpilledPair", "SPILL_MIN_BYTES"]
