"""Every shell command of the on-call runbooks (`docs/runbooks/*.md`, ```bash blocks) runs
against a real `playback` pipeline, so the runbooks cannot rot.

`weir ...` lines run in-process through `spark_jobs.cli.main` (sharing the session's Spark, so
the suite stays fast); any other line runs in bash with WEIR_HOME set. A trailing `# exit 0|1`
lists the exit codes that are normal for a line, otherwise only 0 is. Every block is run even
after a failure, and the test fails naming each failed line, its runbook and its output; an
unknown `weir` subcommand or shell command is reported as such.
"""

from __future__ import annotations

import io
import os
import re
import shlex
import shutil
import subprocess
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import pytest

from spark_jobs import cli

REPO = Path(__file__).resolve().parents[2]
RUNBOOKS = REPO / "docs" / "runbooks"
BLOCK = re.compile(r"^```bash\n(.*?)^```", re.S | re.M)
EXIT_NOTE = re.compile(r"\s+#\s*exit\s+([\d|]+)\s*$")
REQUIRED = ("stream-down", "lagging-or-stalled", "corrupted-checkpoint", "bad-deploy-rewind",
            "data-quality-failure", "backfill-date-range", "full-refresh")


@dataclass(frozen=True)
class Command:
    runbook: str
    line: str
    allowed: tuple[int, ...]


def commands(path: Path) -> list[Command]:
    """The commands of a runbook's bash blocks: continuation lines joined, comments dropped."""
    out = []
    for block in BLOCK.findall(path.read_text(encoding="utf-8")):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            note = EXIT_NOTE.search(line)
            allowed = tuple(int(c) for c in note.group(1).split("|")) if note else (0,)
            out.append(Command(path.stem, EXIT_NOTE.sub("", line), allowed))
    return out


def in_process(line: str) -> list[str] | None:
    """argv of a plain `weir ...` line (no pipes, redirections or variables), else None."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    tokens = list(lexer)
    if not tokens or tokens[0] != "weir":
        return None
    if any(set(t) <= set("|&;<>()") for t in tokens) or "$" in line or "`" in line:
        return None
    return tokens[1:]


def run(command: Command, env: dict[str, str]) -> tuple[int, str]:
    argv = in_process(command.line)
    if argv is not None:
        if not argv or argv[0] not in cli.COMMANDS:
            return 127, f"unknown command `weir {argv[0] if argv else ''}` (not in spark_jobs.cli.COMMANDS)"
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            try:
                code = cli.main(argv)
            except SystemExit as exit_:          # argparse: unknown option, bad value
                code = int(exit_.code or 0)
            except Exception as crash:           # a stack trace is a failure of the runbook too
                import traceback

                code, err = 1, io.StringIO("".join(traceback.format_exception(crash))[-3000:])
        return code, (out.getvalue() + err.getvalue())[-3000:]
    first = shlex.split(command.line)[0]
    if shutil.which(first, path=env["PATH"]) is None and first not in ("cd", "export", "echo", "test"):
        return 127, f"unknown shell command `{first}`"
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", command.line], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    return done.returncode, (done.stdout + done.stderr)[-3000:]


@pytest.fixture(scope="module")
def pipeline_home(spark, tmp_path_factory):
    """A `playback` pipeline that has run once and has a backup, in its own WEIR_HOME; every
    runbook of the module runs against it in turn."""
    from spark_jobs.generator import generate

    root = tmp_path_factory.mktemp("runbooks") / "weir"
    root.mkdir()
    saved = {k: os.environ.get(k) for k in ("WEIR_HOME",)}
    partitions = spark.conf.get("spark.sql.shuffle.partitions")
    os.environ["WEIR_HOME"] = str(root)
    try:
        generate(root / "landing" / "playback", files=2, sessions_per_file=4, seed=7)
        assert cli.main(["run", "playback", "--once"]) == 0
        assert cli.main(["checkpoint", "backup", "playback", "--reason", "runbook test"]) == 0
        yield root
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", partitions)   # `weir run` sets the pipeline's
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def test_every_required_runbook_exists_and_has_commands():
    for name in REQUIRED:
        path = RUNBOOKS / f"{name}.md"
        assert path.is_file(), f"missing runbook {path}"
        assert commands(path), f"{path} has no ```bash commands"


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_runbook_commands_run(name, pipeline_home):
    env = {**os.environ, "WEIR_HOME": str(pipeline_home),
           "PATH": f"{REPO / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    failures = []
    for command in commands(RUNBOOKS / f"{name}.md"):
        code, output = run(command, env)
        if code not in command.allowed:
            failures.append(f"[{command.runbook}] `{command.line}` exited {code} "
                            f"(allowed {command.allowed}):\n{output}")
    assert not failures, "\n\n".join(failures)
