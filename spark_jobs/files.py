"""Files written whole or not at all, for the state Weir keeps on a POSIX filesystem."""

from __future__ import annotations

import os
import uuid
from pathlib import Path


def _synced_sibling(final: Path, payload: bytes, mode: int | None = None) -> Path:
    """`payload` in a temporary sibling of `final`, fsynced (created with `mode` when given)."""
    tmp = final.with_name(f".{final.name}.{uuid.uuid4().hex}.tmp")
    with open(tmp, "wb", opener=None if mode is None else (
            lambda name, flags: os.open(name, flags, mode))) as out:
        out.write(payload)
        out.flush()
        os.fsync(out.fileno())
    return tmp


def replace_atomically(final: Path, payload: bytes, mode: int | None = None) -> None:
    """Write `final` whole, replacing what it held: readers never see half a file (nor, with
    `mode`, a file more open than `mode`)."""
    os.replace(_synced_sibling(final, payload, mode), final)


def create_exclusively(final: Path, payload: bytes) -> bool:
    """Write `final` whole, and only if no file of that name exists yet: the synced sibling is
    hard-linked to the name (a link, unlike a rename, refuses to replace a file), and the folder is
    fsynced so the new name survives a crash. False when the name was taken."""
    tmp = _synced_sibling(final, payload)
    try:
        os.link(tmp, final)
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)
    folder = os.open(final.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)
    return True
