"""`python -m sam3d` and the `sam3d` console script: the command line (sam3d/cli/), imported
inside run() so that a Ctrl-C while its modules load is one line and exit 130, as a Ctrl-C
while a command runs is (cli/main.py)."""

import sys


def run() -> int:
    try:
        from .cli import main
    except KeyboardInterrupt:
        command = next((a for a in sys.argv[1:] if not a.startswith("-")), "")
        print(f"sam3d{' ' + command if command else ''}: interrupted", file=sys.stderr)
        return 130
    return main()


if __name__ == "__main__":
    sys.exit(run())
