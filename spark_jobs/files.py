"""Files written whole or not at all, for the state Weir keeps on a POSIX filesystem."""

from __future__ import annotations

import os
import uuid
from pathlib import Path


def create_exclusively(final: Path, payload: bytes) -> bool:
    """Write `final` whole, and only if no file of that name exists yet: a temporary sibling is
    written and fsynced, then hard-linked to the name (a link, unlike a rename, refuses to replace
    a file), and the folder is fsynced so the new name survives a crash. False when the name was
    taken."""
    tmp = final.with_name(f".{final.name}.{uuid.uuid4().hex}.tmp")
    with open(tmp, "wb") as out:
        out.write(payload)
        out.flush()
        os.fsync(out.fileno())
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
