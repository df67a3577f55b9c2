"""The one error base type. Every error a sam3d command reports is a Sam3dError (its message
names what is wrong and how to fix it); the CLI prints it as one line, with no traceback."""

from __future__ import annotations


class Sam3dError(Exception):
    """An error the user can act on: bad input, a missing prerequisite, a failed tool."""


class NotBuilt(Sam3dError):
    """A variant's build output (build folder, driver, compile_commands.json) is missing; the
    message names the build command."""


class Terminated(BaseException):
    """SIGTERM, raised where the command is (cli/main.py installs the handler), so that it
    unwinds like a Ctrl-C: what it was writing is cleaned up (core/files.py staged_folder)."""
