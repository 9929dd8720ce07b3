"""The ``jobs`` console script.  Only the frame for now: a later issue adds the commands
(status, list, add, remove, ...) on top of ``jobs.open``."""

from __future__ import annotations

import sys

USAGE = """\
usage: jobs COMMAND [ARGS...]

A job queue on FoundationDB (or its embedded SQLite engine).

The store is chosen by $JOBS_STORE (sqlite:PATH, memory:, fdb:[CLUSTER_FILE]).

commands:
  help        show this message

No other commands exist yet.
"""

COMMANDS: dict = {}  # name -> function(argv) -> exit status; filled in by a later issue


def main(argv: list[str] | None = None) -> int:
    """Run the command named in ``argv`` (default ``sys.argv[1:]``); returns the exit
    status: 0 for help, 2 for a missing or unknown command (argparse's convention)."""
    args = sys.argv[1:] if argv is None else list(argv)
    if args and args[0] in ("help", "-h", "--help"):
        sys.stdout.write(USAGE)
        return 0
    if not args:
        sys.stderr.write(USAGE)
        return 2
    command = COMMANDS.get(args[0])
    if command is None:
        sys.stderr.write(USAGE + f"\njobs: unknown command {args[0]!r}\n")
        return 2
    return command(args[1:])


if __name__ == "__main__":
    sys.exit(main())
