"""Secrets stay off a spark-submit command line: every `--conf KEY=VALUE` whose key names a secret
(as Spark's own redaction pattern does) moves into a properties file readable by its owner only,
passed with `--extra-properties-file`. A command line is world-readable (`ps`, /proc); that
file is not.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

SECRET_KEY = re.compile(r"secret|password|passwd|token|access[.]?key|jaas|credential", re.IGNORECASE)
OPTION = "--extra-properties-file"
PRIVATE_FILE = 0o600
PRIVATE_FOLDER = 0o700
_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\f": "\\f"}


def properties_escape(text: str, *, key: bool = False) -> str:
    """`text` as java.util.Properties reads it back (Spark loads the file with it): backslashes
    and line breaks escaped, and in a key the separators too; a value's leading space kept."""
    out = "".join(_ESCAPES.get(c, f"\\{c}" if key and c in "=: #!" else c) for c in text)
    return "\\" + out if not key and out.startswith(" ") else out


def private_folder(path: Path) -> Path:
    """Create `path` if needed and make it its owner's only."""
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(PRIVATE_FOLDER)
    return path


def move_secret_conf(command: list[str], properties_file: Path) -> list[str]:
    """`command` without its secret `--conf` pairs, which go to `properties_file` (0600), passed
    right after the spark-submit binary. Without secrets, the command as given (and no file)."""
    kept: list[str] = []
    secrets: list[tuple[str, str]] = []
    args = iter(command)
    for arg in args:
        if arg == "--conf":
            pair = next(args, "")
            key, _, value = pair.partition("=")
            if SECRET_KEY.search(key):
                secrets.append((key, value))
                continue
            kept += [arg, pair]
        else:
            kept.append(arg)
    if not secrets:
        properties_file.unlink(missing_ok=True)
        return kept
    private_folder(properties_file.parent)
    text = "".join(f"{properties_escape(k, key=True)}={properties_escape(v)}\n" for k, v in secrets)
    fd = os.open(properties_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)
    properties_file.chmod(PRIVATE_FILE)      # a file left by an older launch keeps its old mode
    return [kept[0], OPTION, str(properties_file), *kept[1:]]
