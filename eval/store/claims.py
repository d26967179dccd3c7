"""Claims between processes on the items of one configuration: parallel jobs that share a config
hash (Top-K in an m sweep, an AR baseline shared by several methods, a job requeued while its first
run still ends) compute each row once.

A job claims (configuration, item) before it generates the item's turns, and holds the claim until
they are stored. A claim is a POSIX record lock on one byte of a hidden file in the configuration's
folder (:data:`CLAIMS`; the byte: a hash of the suite and item id), so it ends with the process that
holds it, however that process ends (a killed or requeued job leaves nothing to clean up), and it
works across the machines of a cluster on a file system that supports locks (NFS does; a Lustre mount
needs its ``flock`` option). Where the file system refuses locks, the run says so once and goes on
unclaimed, as before.

The run loop (:mod:`eval.measure.loop`) tries each unit's claim without waiting; a unit another
process holds is put off to the end, then waited for, and its stored rows are read again after the
claim is taken: what the other process stored is reused, not computed again.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import zlib
from pathlib import Path

log = logging.getLogger(__name__)

#: the claims file of a configuration's folder (hidden: no reader of rows lists it)
CLAIMS = ".claims"
#: errors that mean "another process holds it"
_BUSY = (errno.EACCES, errno.EAGAIN)


def _byte(suite: str, item_id: object) -> int:
    """The byte an item's claim locks (two items on one byte only wait for each other)."""
    return zlib.crc32(f"{suite}\0{item_id}".encode()) & 0x7FFFFFFF


class Claims:
    """This process's claims: one open claims file per configuration folder (POSIX locks are the
    process's, and closing any descriptor of the file would drop them all: each file is opened once)."""

    def __init__(self) -> None:
        self._files: dict[Path, int] = {}
        self._unsupported = False

    def _fd(self, cdir: Path) -> int | None:
        if self._unsupported:
            return None
        if cdir not in self._files:
            self._files[cdir] = os.open(cdir / CLAIMS, os.O_RDWR | os.O_CREAT, 0o644)
        return self._files[cdir]

    def take(self, cdir: Path, suite: str, item_id: object, wait: bool = False) -> bool:
        """Claim (cdir, item): True once held; False when another process holds it (``wait=False``)."""
        fd = self._fd(cdir)
        if fd is None:
            return True
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB), 1, _byte(suite, item_id))
        except OSError as e:
            if e.errno in _BUSY and not wait:
                return False
            if e.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                log.warning("the file system of %s refuses locks (%s): parallel jobs of one configuration may "
                            "compute a row twice", cdir, e.strerror)
                self._unsupported = True
                return True
            raise
        return True

    def release(self, cdir: Path, suite: str, item_id: object) -> None:
        fd = None if self._unsupported else self._files.get(cdir)
        if fd is not None:
            fcntl.lockf(fd, fcntl.LOCK_UN, 1, _byte(suite, item_id))

    def close(self) -> None:
        """Every claim of this process ends."""
        for fd in self._files.values():
            os.close(fd)
        self._files.clear()
