"""Writing output files without destroying anything (docs/robustness.md, "Output files").

Every command that writes a file goes through here, so the rules hold everywhere:

* **identity, not names**: an output is refused when it *is* one of the inputs
  (``os.path.samefile``: same device and inode, so hardlinks, symlinks and symlinked
  directories are seen through), or an existing trace inside an input directory;
* **never through a symlink**: an output path that is a symbolic link to a regular file
  (or to nothing) is refused -- writing would change a file the user did not name.
  A link to a terminal or pipe (``/dev/stdout``) is fine;
* **atomic**: the data goes to a temporary file in the target's own directory, renamed
  over the target only when complete (a new inode: a file hardlinked to the old
  target keeps its bytes). A failed write (disk full, file-size limit, a bug) leaves
  the previous output as it was and no temporary behind;
* **a directory of outputs** (``batch``) is staged: every file and sub-directory is
  built beside its target and all are swapped in at the end, so a failure keeps the
  previous run's outputs;
* **devices and pipes** are written in place from a private temporary copy: a library
  that removes its output on failure cannot remove the device node;
* **the umask is honoured**: a new file gets ``0666 & ~umask`` (``mkstemp``'s 0600 is
  not kept), a replaced file keeps its own mode;
* **no parent directories are created**: only the directory the user named.
"""
from __future__ import annotations

import errno
import os
import shutil
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator

from .errors import TraceError


# --------------------------------------------------------------------------- checks

def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """True when ``a`` and ``b`` are the same file (device and inode); False when either is missing."""
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        return False


def refuse_inputs(path: str | os.PathLike, inputs: Iterable[str | os.PathLike]) -> None:
    """TraceError when writing ``path`` would overwrite an input.

    An input file: the output is that file (by identity). An input directory: the
    output is an existing trace file inside it (by name or content).
    """
    path = str(path)
    for src in inputs:
        src = str(src)
        if "://" in src:
            continue
        if same_file(src, path):
            raise TraceError(path, f"is an input of this command (the same file as {src}): "
                                   "refusing to overwrite it")
        if os.path.isdir(src) and _trace_inside(path, src):
            raise TraceError(path, f"is a trace inside the input directory {src}: "
                                   "refusing to overwrite it")


def _trace_inside(path: str, directory: str) -> bool:
    if not os.path.isfile(path):
        return False
    real, top = os.path.realpath(path), os.path.realpath(directory)
    if os.path.commonpath([real, top]) != top:
        return False
    from .readers.detect import is_trace_candidate

    return is_trace_candidate(real, os.path.basename(real))


def _kind(path: str) -> str:
    """'new', 'regular' or 'special' (a device, FIFO, socket: written in place)."""
    try:
        lst = os.lstat(path)
    except FileNotFoundError:
        return "new"
    except OSError as e:
        raise write_error(path, e) from None
    try:
        st = os.stat(path)
    except OSError:
        st = None
    if st is not None and not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
        return "special"
    if stat.S_ISLNK(lst.st_mode):
        raise TraceError(path, "is a symbolic link: refusing to write through it "
                               "(remove the link or name its target)")
    if stat.S_ISDIR(lst.st_mode):
        raise TraceError(path, "is a directory, not a file")
    return "regular"


def write_error(path: str | os.PathLike, e: OSError) -> TraceError:
    """An OSError while writing ``path`` as one line that says what went wrong."""
    path = str(path)
    parent = os.path.dirname(os.path.abspath(path))
    if e.errno == errno.ENOENT and not os.path.isdir(parent):
        return TraceError(path, f"cannot write: directory {parent} does not exist")
    if e.errno == errno.ENOTDIR:
        return TraceError(path, "cannot write: a part of the path is a file, not a directory")
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return TraceError(path, "disk full while writing")
    if e.errno == errno.EFBIG:
        return TraceError(path, "file too large (file-size limit) while writing")
    if e.errno in (errno.EACCES, errno.EPERM):
        return TraceError(path, "cannot write: permission denied")
    if e.errno == errno.EROFS:
        return TraceError(path, "cannot write: read-only file system")
    return TraceError(path, f"cannot write: {e.strerror or e}")


# --------------------------------------------------------------------------- modes

def umask() -> int:
    """The process umask: from /proc (Linux), else set and put back at once."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def _settle_mode(tmp: str, target: str) -> None:
    """``tmp`` gets the mode ``target`` has, or a new file's mode under the umask."""
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode)
    except OSError:
        mode = 0o666 & ~umask()
    os.chmod(tmp, mode)


# --------------------------------------------------------------------------- one file

def _temp_beside(target: str, directory: bool = False) -> str:
    where = os.path.dirname(os.path.abspath(target))
    prefix = f".{os.path.basename(target)}."
    try:
        if directory:
            return tempfile.mkdtemp(dir=where, prefix=prefix, suffix=".tmp")
        fd, tmp = tempfile.mkstemp(dir=where, prefix=prefix, suffix=".tmp")
        os.close(fd)
        return tmp
    except OSError as e:
        raise write_error(target, e) from None


def _remove(path: str) -> None:
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)
    except FileNotFoundError:
        pass


@contextmanager
def atomic_file(path: str | os.PathLike, inputs: Iterable[str] = ()) -> Iterator[str]:
    """Yield a temporary path to write; it becomes ``path`` only when the block succeeds.

    Checks first (before anything is opened or the input is read): ``path`` is none
    of ``inputs``, not a symlink to a file, not a directory. OSErrors become one-line
    TraceErrors; any failure removes the temporary and leaves ``path`` as it was.
    """
    path = str(path)
    refuse_inputs(path, inputs)
    if _kind(path) == "special":
        with _special(path) as tmp:
            yield tmp
        return
    tmp = _temp_beside(path)
    try:
        yield tmp
        _settle_mode(tmp, path)
        if _kind(path) == "special":  # replaced by a device meanwhile: never rename over it
            raise TraceError(path, "changed into a special file while writing")
        os.replace(tmp, path)
    except OSError as e:
        raise write_error(path, e) from None
    finally:
        _remove(tmp)


@contextmanager
def _special(path: str) -> Iterator[str]:
    """A device or pipe: write a private temporary, then copy it into ``path`` as is."""
    fd, tmp = tempfile.mkstemp(prefix="traceread-out-")
    os.close(fd)
    try:
        yield tmp
        with open(tmp, "rb") as src, open(path, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    except OSError as e:
        raise write_error(path, e) from None
    finally:
        _remove(tmp)


@contextmanager
def atomic_stream(path: str | os.PathLike, mode: str = "w", inputs: Iterable[str] = (),
                  **open_kw) -> Iterator:
    """``atomic_file`` that yields an open file object (``mode`` 'w' or 'wb')."""
    if "b" not in mode:
        open_kw.setdefault("encoding", "utf-8")
    with atomic_file(path, inputs) as tmp:
        with open(tmp, mode, **open_kw) as f:
            yield f


def write_bytes(path: str | os.PathLike, data: bytes, inputs: Iterable[str] = ()) -> None:
    with atomic_stream(path, "wb", inputs) as f:
        f.write(data)


def write_text(path: str | os.PathLike, data: str, inputs: Iterable[str] = ()) -> None:
    from .errors import display_path   # a name's bytes that are not UTF-8 become \xNN

    with atomic_stream(path, "w", inputs, newline="") as f:
        f.write(display_path(data))


# --------------------------------------------------------------------------- directories

def make_dir(path: str | os.PathLike) -> Path:
    """Create the directory the user named (not its parents); an existing one is fine."""
    p = Path(path)
    try:
        if p.is_symlink() and not p.is_dir():
            raise TraceError(p, "is a symbolic link to nothing: not following it")
        p.mkdir(exist_ok=True)
    except FileExistsError:
        raise TraceError(p, "exists and is not a directory") from None
    except OSError as e:
        raise write_error(p, e) from None
    if not p.is_dir():
        raise TraceError(p, "exists and is not a directory")
    return p


class Staging:
    """A set of outputs inside one directory, built beside their targets and swapped in together.

    ``file(name)`` / ``dir(name)`` give a temporary path for ``OUT/name``; ``commit()``
    renames them all into place (a replaced directory is removed only after its
    successor is in place); leaving the ``with`` block without ``commit()`` -- a
    failure -- removes the temporaries and keeps every previous output.
    """

    def __init__(self, out: str | os.PathLike, inputs: Iterable[str] = ()):
        self.out = Path(out)
        self.inputs = list(inputs)
        self.files: dict[str, str] = {}
        self.dirs: dict[str, str] = {}

    def __enter__(self) -> "Staging":
        return self

    def __exit__(self, kind, err, tb) -> None:
        for tmp in list(self.files.values()) + list(self.dirs.values()):
            _remove(tmp)
        if isinstance(err, OSError):  # a write into a temporary failed: say which output
            raise write_error(self.out, err) from None

    def target(self, name: str) -> str:
        return str(self.out / name)

    def file(self, name: str) -> str:
        target = self.target(name)
        refuse_inputs(target, self.inputs)
        if _kind(target) == "special":
            raise TraceError(target, "is a device or pipe, not a regular file: not replacing it")
        self.files[name] = tmp = _temp_beside(target)
        return tmp

    def dir(self, name: str) -> str:
        target = self.target(name)
        if os.path.islink(target):
            raise TraceError(target, "is a symbolic link: refusing to write through it")
        self.dirs[name] = tmp = _temp_beside(target, directory=True)
        os.chmod(tmp, 0o777 & ~umask())
        return tmp

    def commit(self) -> None:
        try:
            for name, tmp in self.files.items():
                target = self.target(name)
                _settle_mode(tmp, target)
                os.replace(tmp, target)
            for name, tmp in self.dirs.items():
                _swap_dir(tmp, self.target(name))
        except OSError as e:
            raise write_error(self.out, e) from None
        self.files, self.dirs = {}, {}


def _swap_dir(new: str, target: str) -> None:
    """Put directory ``new`` at ``target``; the old one is removed once ``new`` is there."""
    if not os.path.lexists(target):
        os.rename(new, target)
        return
    old = _temp_beside(target, directory=True)
    os.rmdir(old)
    os.rename(target, old)
    try:
        os.rename(new, target)
    except OSError:
        os.rename(old, target)  # put the previous one back
        raise
    shutil.rmtree(old, ignore_errors=True)



def fresh_file(path: str | os.PathLike, inputs: Iterable[str] = (), **open_kw):
    """A new, empty file at ``path``, open for writing, for a file that grows while the
    command runs (``batch``'s partial summary): created beside and renamed into place
    at once -- a new inode, so whatever ``path`` was (a hardlink of another file) keeps
    its bytes; a symlink, directory, device or input at ``path`` is refused."""
    path = str(path)
    refuse_inputs(path, inputs)
    if _kind(path) == "special":
        raise TraceError(path, "is a device or pipe, not a regular file: not replacing it")
    tmp = _temp_beside(path)
    try:
        _settle_mode(tmp, path)
        f = open(tmp, "w", **open_kw)
        os.replace(tmp, path)
    except OSError as e:
        _remove(tmp)
        raise write_error(path, e) from None
    return f
