"""The log folder on disk: which files are data, and how a Parquet file is written and read safely.

**Which files are data** (one rule for every reader, the fingerprint and the decision log; the
convention of Spark, Hive and Arrow's dataset discovery): a regular file whose name ends with
``.parquet`` in any case, unless its name or a folder between it and the log root starts with
``.`` or ``_`` (``_temporary/``, ``_SUCCESS``, the decision log's ``.part-….tmp`` files) or a
folder on its way is a ``date=`` partition whose name is not a calendar date. A named pipe or a
device is never opened (reading it would hang). A symbolic link (to a folder or a file) is
followed only when its target lies inside the log folder; a link leading outside it (e.g.
``date=2026-01-03 → /``) is not followed and is named as skipped. :func:`scan_log_folder`
returns every file that looks like data but is not read, with the reason, and the checks name it.

**Writing** (:func:`write_parquet_atomic`) is atomic and stores Parquet page checksums;
**reading** (:data:`READ_OPTIONS`) verifies them: a flipped bit is an error naming the file.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import stat
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

__all__ = [
    "READ_OPTIONS",
    "LogFolder",
    "SkippedFile",
    "check_regular_file",
    "is_hidden",
    "link_outside",
    "looks_like_data",
    "make_private_folder",
    "partition_date",
    "remove_stale_temporaries",
    "scan_log_folder",
    "write_parquet_atomic",
]

READ_OPTIONS = {"page_checksum_verification": True}
_DATE_FOLDER = re.compile(r"^date=(.*)$")
_SUFFIX = ".parquet"
TEMP_SUFFIX = ".tmp"


@dataclass(frozen=True)
class SkippedFile:
    """A file that looks like data but is not read, and why."""

    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path} ({self.reason})"


@dataclass(frozen=True)
class LogFolder:
    """The data files of a log folder (sorted by relative path) and the files skipped."""

    files: tuple[Path, ...]
    skipped: tuple[SkippedFile, ...] = ()


def is_hidden(name: str) -> bool:
    """Whether a file or folder name is hidden or temporary (``.`` or ``_`` prefix)."""
    return name.startswith((".", "_"))


def looks_like_data(name: str) -> bool:
    """Whether a file name ends with ``.parquet`` (case-insensitive)."""
    return name.lower().endswith(_SUFFIX)


def partition_date(name: str) -> tuple[_dt.date | None, str | None]:
    """The date of a ``date=YYYY-MM-DD`` folder name.

    Returns
    -------
    date : datetime.date or None
        The partition's date; None for a name that is not a ``date=`` partition, or is invalid.
    problem : str or None
        Why a ``date=`` name is invalid (None when valid or not a ``date=`` folder).
    """
    match = _DATE_FOLDER.match(name)
    if match is None:
        return None, None
    value = match.group(1)
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}", value):
        try:
            return _dt.date.fromisoformat(value), None
        except ValueError as exc:
            return None, f"partition folder {name!r} is not a valid date ({exc})"
    return None, f"partition folder {name!r} is not a date=YYYY-MM-DD name"


def _file_kind(mode: int) -> str:
    for test, kind in (
        (stat.S_ISFIFO, "a named pipe"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a folder"),
    ):
        if test(mode):
            return kind
    return "not a regular file"


def check_regular_file(path: str | Path) -> Path:
    """Return ``path`` when it is a regular file (symlinks followed).

    Raises
    ------
    FileNotFoundError
        When it does not exist.
    ValueError
        When it is a named pipe, a device or a socket (reading it could block forever).
    """
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise FileNotFoundError(f"log {path} does not exist") from None
    if not stat.S_ISREG(mode):
        raise ValueError(
            f"log {path} is {_file_kind(mode)}, not a regular file: give a Parquet or CSV file "
            "or a folder of them"
        )
    return path


def _outside(path: Path, base: str) -> str | None:
    """The reason a symbolic link at ``path`` is not followed (its target is outside ``base``)."""
    if not os.path.islink(path):
        return None  # inside: its folder was (every link on the way is checked)
    real = os.path.realpath(path)
    if real == base or real.startswith(base.rstrip(os.sep) + os.sep):
        return None
    try:
        target = os.readlink(path)
    except OSError:
        target = real
    return f"a symbolic link to {target}, outside the log folder {base}: not followed"


def link_outside(path: str | Path, root: str | Path) -> str | None:
    """Why ``path`` is not followed: a symbolic link whose target is outside the folder ``root``.

    Returns
    -------
    str or None
        ``"a symbolic link to <target>, outside the log folder <root>: not followed"``; None
        when ``path`` is not a link or its target is inside ``root``.
    """
    return _outside(Path(path), os.path.realpath(root))


def _data_looking(folder: Path, reason: str, seen: set[str], base: str) -> list[SkippedFile]:
    """Every data-looking file below a folder that is skipped as a whole."""
    out = []
    for sub, dirs, names in os.walk(folder, followlinks=True):
        real = os.path.realpath(sub)
        if real in seen:
            dirs[:] = []
            continue
        seen.add(real)
        dirs[:] = sorted(d for d in dirs if _outside(Path(sub) / d, base) is None)
        out += [
            SkippedFile(str(Path(sub) / n), reason)
            for n in sorted(names)
            if looks_like_data(n) and _outside(Path(sub) / n, base) is None
        ]
    return out


def scan_log_folder(root: str | Path, *, within: str | Path | None = None) -> LogFolder:
    """Apply the data-file rule (module docstring) to a folder.

    Symlinked folders and files are followed when their target is inside the log folder, each
    real folder once (a symlink loop ends there); a link leading outside is skipped, named.

    Parameters
    ----------
    root : str or Path
        The log folder.
    within : str or Path or None, default=None
        The log folder whose inside links may lead to, when ``root`` is one of its partitions;
        default ``root`` itself.

    Returns
    -------
    LogFolder
        Data files sorted by their path relative to ``root``, and the skipped data-looking files.
    """
    root = Path(root)
    base = os.path.realpath(root if within is None else within)
    files: list[Path] = []
    skipped: list[SkippedFile] = []
    if within is not None and (reason := _outside(root, base)) is not None:
        return LogFolder((), (SkippedFile(str(root), reason),))
    seen: set[str] = set()
    for sub, dirs, names in os.walk(root, followlinks=True):
        real = os.path.realpath(sub)
        if real in seen:  # a symlink loop, or a folder linked twice
            dirs[:] = []
            continue
        seen.add(real)
        keep = []
        for d in sorted(dirs):
            _, problem = partition_date(d)
            if (outside := _outside(Path(sub) / d, base)) is not None:
                skipped.append(SkippedFile(str(Path(sub) / d), outside))
                continue
            if is_hidden(d):
                reason = f"inside {d}/: folders starting with '.' or '_' are not data"
            elif problem is not None:
                reason = problem
            else:
                keep.append(d)
                continue
            skipped += _data_looking(Path(sub) / d, reason, set(seen), base)
        dirs[:] = keep
        for name in sorted(names):
            if not looks_like_data(name):
                continue
            path = Path(sub) / name
            if (outside := _outside(path, base)) is not None:
                skipped.append(SkippedFile(str(path), outside))
                continue
            if is_hidden(name):
                skipped.append(
                    SkippedFile(str(path), "names starting with '.' or '_' are not data")
                )
                continue
            try:
                mode = os.stat(path).st_mode
            except OSError as exc:  # a dangling symlink
                skipped.append(SkippedFile(str(path), f"cannot be opened ({exc.strerror})"))
                continue
            if not stat.S_ISREG(mode):
                skipped.append(SkippedFile(str(path), f"{_file_kind(mode)}, not a regular file"))
                continue
            files.append(path)
    files.sort(key=lambda p: p.relative_to(root).as_posix())
    skipped.sort(key=lambda s: s.path)
    return LogFolder(tuple(files), tuple(skipped))


def make_private_folder(path: str | Path) -> Path:
    """Create ``path`` and its missing parents as ``0700`` folders (owner only; umask ignored).

    Folders that already exist keep their mode.
    """
    target = path = Path(path)
    missing = []
    while not path.exists() and path != path.parent:
        missing.append(path)
        path = path.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:  # created concurrently
            continue
        os.chmod(folder, 0o700)
    return target


def write_parquet_atomic(table: pa.Table, target: str | Path, *, mode: int | None = None) -> Path:
    """Write a Parquet file with page checksums, atomically (temp file, fsync, rename, fsync).

    The temporary file is ``.<name>.<random>.tmp`` in the target's folder (hidden: never
    read as data), so the rename never crosses file systems. A writer killed at any moment
    leaves the target absent or complete, and at most a hidden temporary file.

    Parameters
    ----------
    table : pyarrow.Table
        The rows (schema metadata included).
    target : str or Path
        The final file name.
    mode : int or None, default=None
        Permission bits of the file, exactly (e.g. ``0o600``: the decision log holds request
        features); None follows the umask.

    Returns
    -------
    Path
        ``target``.
    """
    target = Path(target)
    temp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}{TEMP_SUFFIX}")
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(temp, flags, 0o666 if mode is None else mode)
        if mode is not None:
            os.fchmod(fd, mode)  # the umask may only remove bits; this is exact
        with open(fd, "wb") as fh:
            pq.write_table(table, fh, write_page_checksum=True)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    _fsync_folder(target.parent)
    return target


_TEMP_NAME = re.compile(r"^\..+\.parquet\.[0-9a-f]{8}\.tmp$", re.IGNORECASE)


def remove_stale_temporaries(folder: str | Path, older_than: float = 3600.0) -> list[Path]:
    """Remove the temporary files a killed :func:`write_parquet_atomic` left in ``folder``.

    Only names of its own pattern (``.<name>.parquet.<8 hex>.tmp``) last modified more than
    ``older_than`` seconds ago: a live writer's temporary file is never that old.

    Returns
    -------
    list of Path
        The files removed.
    """
    removed = []
    now = time.time()
    for entry in os.scandir(folder):
        if not (_TEMP_NAME.match(entry.name) and entry.is_file(follow_symlinks=False)):
            continue
        try:
            if now - entry.stat(follow_symlinks=False).st_mtime > older_than:
                os.unlink(entry.path)
                removed.append(Path(entry.path))
        except FileNotFoundError:  # removed by another process meanwhile
            continue
    return removed


def _fsync_folder(folder: Path) -> None:
    """Make a rename in ``folder`` durable (a no-op where folders cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
