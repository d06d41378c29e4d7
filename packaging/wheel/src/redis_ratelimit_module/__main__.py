"""The command line: ``redis-ratelimit-module path`` (or ``python -m redis_ratelimit_module
path``) prints the library's absolute path, for a loadmodule line:

    redis-server --loadmodule "$(redis-ratelimit-module path)"
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from . import PLATFORM, __version__, path


def main(argv: Sequence[str] | None = None, prog: str = "redis-ratelimit-module") -> int:
    """Runs the command line with argv (default: sys.argv[1:]); returns the exit status."""
    parser = argparse.ArgumentParser(
        prog=prog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="The redis-ratelimit module (libredis_ratelimit.so), installed by pip.",
        epilog='Start a server with it: redis-server --loadmodule "$(%s path)"' % prog,
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"redis-ratelimit-module {__version__} ({PLATFORM})",
    )
    commands = parser.add_subparsers(dest="command", metavar="command")
    commands.add_parser("path", help="print the absolute path of libredis_ratelimit.so")
    args = parser.parse_args(argv)
    if args.command != "path":
        parser.print_help(sys.stderr)
        return 2
    try:
        print(path())
    except FileNotFoundError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(prog="python -m redis_ratelimit_module"))
