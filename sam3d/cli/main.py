"""`python -m sam3d <command>`: what the nox sessions and CI call.

Each command prints progress ("[i/n] variant: step"), writes its logs under build/logs/,
and ends with a one-line summary; the exit status is non-zero when any step failed. Every
error a command reports is a Sam3dError, printed by main() as one line (exit status 2).
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
from pathlib import Path

from .. import __version__
from ..core.errors import Sam3dError, Terminated
from ..results import gate


def _at_least(minimum: int):
    """An argparse type: an integer >= minimum."""

    def parse(text: str) -> int:
        n = int(text)
        if n < minimum:
            raise argparse.ArgumentTypeError(f"{text}: must be >= {minimum}")
        return n

    return parse


def _kinds(text: str) -> tuple[str, ...]:
    """An argparse type: a comma-separated list of gate.UNMET's kinds."""
    kinds = tuple(k for k in text.split(",") if k)
    wrong = [k for k in kinds if k not in gate.UNMET]
    if wrong or not kinds:
        raise argparse.ArgumentTypeError(f"{text}: expected one or more of {', '.join(gate.UNMET)}, comma-separated")
    return kinds


def _fraction(zero: bool, example: str):
    """An argparse type: a number below 1 and at least 0 (``zero``) or above 0 (a significance
    level of 0 would make every row "no change")."""

    def parse(text: str) -> float:
        try:
            x = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text}: not a number") from None
        if not (0 <= x < 1 if zero else 0 < x < 1):
            raise argparse.ArgumentTypeError(f"{text}: must be {'>=' if zero else '>'} 0 and < 1 ({example})")
        return x

    return parse


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sam3d", description=__doc__.splitlines()[0])
    p.add_argument("--version", action="version", version=f"sam3d {__version__}")
    commands = p.add_subparsers(dest="command", required=True)

    def command(name: str, text: str) -> argparse.ArgumentParser:
        """A command whose one-line help is also the description its own --help shows."""
        return commands.add_parser(name, help=text, description=text)

    force = {
        "action": "store_true",
        "help": "replace an existing evidence folder of that name, once the new one is complete",
    }

    s = command(
        "variants", "list the variants (--json: as records; sam3d.ci builds the CI matrix from the same records)"
    )
    s.add_argument(
        "variants",
        nargs="*",
        metavar="VARIANT",
        help="variant names (default: every variant; `sam3d variants` lists them)",
    )
    s.add_argument(
        "--json",
        action="store_true",
        help="print the variants as JSON records (the registry's "
        "fields and roles, what sam3d.ci builds the CI matrix from; built_here: whether this checkout's "
        "build folder holds a finished build)",
    )
    s.set_defaults(func="variants")

    s = command(
        "build",
        "build GGML and the core in each variant named (the default set's variants that run here "
        "when none is: CUDA ones only with an NVIDIA GPU)",
    )
    s.add_argument(
        "variants",
        nargs="*",
        metavar="VARIANT",
        help="variant names (default: the default set's variants that run here)",
    )
    s.set_defaults(func="build")

    s = command(
        "clean",
        "remove the build folders (build/ and mutmut's mutants/; only build/VARIANT/ for the "
        "variants named); never generated/ (the evidence) nor .venv",
    )
    s.add_argument("variants", nargs="*", metavar="VARIANT", help="variant names (default: all of build/)")
    s.add_argument(
        "--caches",
        action="store_true",
        help="also the caches every clone here shares (compiler "
        "cache, Conan home, toolkits): the next build starts from nothing",
    )
    s.set_defaults(func="clean")

    s = command(
        "publish",
        "upload each variant's GGML and core packages to the Conan remote "
        "(SAM3D_CONAN_REMOTE; the default set when no variant is named)",
    )
    s.add_argument("variants", nargs="*", metavar="VARIANT", help="variant names (default: the default set)")
    s.set_defaults(func="publish")

    s = command(
        "ctest",
        "build, then run a CTest label in each variant named (the default set's variants that "
        "run here when none is: CUDA ones only with an NVIDIA GPU)",
    )
    s.add_argument(
        "variants",
        nargs="*",
        metavar="VARIANT",
        help="variant names (default: the default set's variants that run here)",
    )
    s.add_argument(
        "-L",
        "--label",
        default="normal",
        help="a CTest label of every variant named (default normal; "
        "`ctest --print-labels` in a build folder lists them)",
    )
    s.add_argument("--sanitizers-only", action="store_true", help="only the variants with a sanitizer")
    s.add_argument("--no-build", action="store_true", help="test the build folders as they are: no Conan call, no lock")
    s.add_argument(
        "--vulkan-validation",
        action="store_true",
        help="only the Vulkan variants, each under the Khronos validation layer with synchronization "
        "validation; a message fails its test, and so does the suite unless its canary is "
        "reported (docs/gpu-checks.md)",
    )
    s.set_defaults(func="ctest")

    s = command(
        "package",
        "`conan create .` on each variant's profile (default release): the sam3d-core package and its test_package",
    )
    s.add_argument("variants", nargs="*", metavar="VARIANT", help="variant names (default: release)")
    s.set_defaults(func="package")

    s = command("report", "render result files/folders into one table and an evidence folder")
    s.add_argument("paths", nargs="+", metavar="PATH", help="result files, or folders searched recursively")
    s.add_argument("--name", help="the evidence folder's name (default report-<date>-<time>)")
    s.add_argument("--out", metavar="DIR", help="where the evidence folder goes (default generated/diagnostics)")
    s.add_argument("--force", **force)
    s.add_argument(
        "--format",
        choices=("markdown", "json"),
        default="markdown",
        help="stdout: the table (markdown) or its rows as JSON, numbers as numbers (docs/schemas/report.schema.json)",
    )
    s.set_defaults(func="report")

    s = command(
        "compare",
        "compare two runs (B against A): medians and a Mann-Whitney U test per "
        "row; refuses different profiles or machines unless --force",
    )
    s.add_argument("a", metavar="A", help="folder (or file) of the baseline run")
    s.add_argument("b", metavar="B", help="folder (or file) of the run compared with it")
    s.add_argument(
        "--fail-on",
        choices=sorted(gate.FAIL_ON),
        help="exit 1 when a row is slower, faster, "
        "or either (any); and, unless --accept names it, when a row is on one side only, a result "
        "failed or a side is not accepted evidence",
    )
    s.add_argument(
        "--accept",
        type=_kinds,
        default=(),
        metavar="KIND[,KIND...]",
        help=f"with --fail-on, what lets the gate pass anyway: {', '.join(gate.UNMET)}",
    )
    s.add_argument(
        "--min-effect",
        type=_fraction(True, "0.05 = 5%"),
        default=gate.MIN_EFFECT,
        help=f"smallest change of B/A that counts, as a share (default {gate.MIN_EFFECT:g} = 5%%)",
    )
    s.add_argument(
        "--alpha",
        type=_fraction(False, "e.g. 0.05"),
        default=gate.ALPHA,
        help=f"significance level of the test (default {gate.ALPHA:g})",
    )
    s.add_argument("--force", action="store_true", help="compare runs of different profiles or machines anyway")
    s.add_argument(
        "--format",
        choices=("markdown", "json"),
        default="markdown",
        help="stdout: the comparison (markdown) or its rows as JSON, numbers as numbers "
        "(docs/schemas/comparison.schema.json)",
    )
    s.set_defaults(func="compare")

    s = command(
        "bench",
        "build, then run the transfer benchmark in each variant and backend; "
        "writes generated/diagnostics/<run-name>/; with no variant named, the default "
        "set's variants that run here (CUDA ones only with an NVIDIA GPU)",
    )
    s.add_argument(
        "variants",
        nargs="*",
        metavar="VARIANT",
        help="variant names (default: the default set's variants that run here)",
    )
    s.add_argument("--name", help="run name, the evidence folder's name (default: bench-<UTC time>)")
    s.add_argument("--images", type=_at_least(1), default=20, help="timed images per batching mode (default 20)")
    s.add_argument("--warmups", type=_at_least(0), default=5, help="warm-up images per batching mode (default 5)")
    s.add_argument("--no-build", action="store_true", help="measure the drivers already built")
    s.add_argument(
        "--modes",
        help="driver modes (`sam3d_bench --list-modes` lists them; off and staged "
        "required), e.g. off,staged,zerocopy,queued (default off,staged)",
    )
    s.add_argument("--transfer-only", action="store_true", help="replay the transfers without compute")
    s.add_argument(
        "--duplex",
        help="the batched sessions' duplex mode, downloads on a second backend of the device "
        "(sam3d_bench --duplex, one of those its --list-modes lists; default: the driver's)",
    )
    s.add_argument("--force", **force)
    s.set_defaults(func="bench")

    s = command(
        "bundle", "pack the GPU variants into a relocatable bundle for a machine with only a GPU driver and python3"
    )
    s.add_argument("variants", nargs="*", metavar="VARIANT", help="GPU variants (default: those with the bundle role)")
    s.add_argument(
        "--limit-mib",
        type=_at_least(0),
        metavar="MIB",
        help="above this many MiB compressed, one bundle per variant (default: what one transfer to the "
        "GPU machine carries, docs/gpu.md; 0: always one bundle)",
    )
    s.add_argument("--no-build", action="store_true", help="pack the variants already built: no Conan call, no lock")
    s.set_defaults(func="bundle")

    s = command("fuzz", "build the fuzz variant, then run the libFuzzer target of the C API")
    s.add_argument("--max-total-time", type=_at_least(1), metavar="S", help="stop after S seconds")
    s.add_argument("--runs", type=_at_least(1), metavar="N", help="stop after N inputs")
    s.add_argument("--no-build", action="store_true", help="run the target already built")
    s.set_defaults(func="fuzz")

    s = command("device-import", "wrap the bundle runner's raw files into result files and render them")
    s.add_argument(
        "raw",
        type=Path,
        nargs="+",
        metavar="DIR",
        help="the folder run.pyz wrote (--out); several: the runs of one matrix split over several "
        "run.pyz commands (per variant, per checker), imported into one evidence folder",
    )
    s.add_argument("--name", help="the evidence folder's name (default device-<GPU hostname>)")
    s.add_argument("--force", **force)
    s.set_defaults(func="device_import")

    s = command(
        "mutants",
        "apply each mutant of native/mutants.toml to a scratch copy of the core, "
        "build it and run the normal suite; every mutant must be killed",
    )
    s.add_argument(
        "mutants",
        nargs="*",
        metavar="MUTANT",
        help="mutant names (default: all; with --python, mutmut's names, globs allowed)",
    )
    s.add_argument(
        "--python",
        action="store_true",
        help="instead: mutmut over sam3d/results/; fails below its target score or on a survivor not "
        "listed as equivalent (docs/benchmark.md, \"The arithmetic under mutation\")",
    )
    s.add_argument(
        "--jobs",
        type=_at_least(1),
        default=2,
        metavar="N",
        help="with --python: mutmut's workers (default %(default)s)",
    )
    s.add_argument(
        "--last",
        action="store_true",
        help="with --python: score the verdicts mutmut keeps in mutants/ without running it",
    )
    s.add_argument("--variant", action="append", metavar="VARIANT", help="only the mutants of this variant")
    s.add_argument("--list", metavar="FILE", help="the mutant list (default native/mutants.toml)")
    s.add_argument(
        "--no-build", action="store_true", help="use the variants' build folders as they are (no Conan build first)"
    )
    s.add_argument(
        "--generated",
        action="store_true",
        help="run the generated campaign instead: single-site mutants derived from native/src/ "
        "(docs/mutation.md), each in release, cpu-asan and vulkan-ubsan in turn while it survives "
        "(the first two built unless --no-build; vulkan-ubsan only where built), cached by file "
        "and tests; exit 1 when a mutant survives",
    )
    s.add_argument(
        "--file",
        action="append",
        metavar="FILE",
        help="with --generated: only the mutants of this file (native/src/ring.cpp; repeatable)",
    )
    s.add_argument("--shard", metavar="K/N", help="with --generated: only piece K of N (by each name's hash)")
    s.add_argument("--dry-run", action="store_true", help="with --generated: list the mutants, run nothing")
    s.add_argument("--fresh", action="store_true", help="with --generated: ignore the cached results")
    s.set_defaults(func="mutants")

    s = command(
        "generate",
        "write the files and page parts derived from the code (the variant registry, "
        "the sessions, these commands, the result schema)",
    )
    s.add_argument("--check", action="store_true", help="write nothing; exit 1 naming each derived file that differs")
    s.set_defaults(func="generate")
    return p


def _terminate(signum: int, frame: object) -> None:
    raise Terminated()


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    try:
        commands = importlib.import_module(".commands", __package__)  # what --help and --version never load
        return getattr(commands, f"cmd_{args.func}")(args)
    except Sam3dError as e:  # the one handler: every error a command reports, as one line
        print(f"sam3d {args.command}: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # a file or folder the command cannot use (it names it): one line too
        print(f"sam3d {args.command}: {e.filename or ''}{': ' if e.filename else ''}{e.strerror or e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader went away (`sam3d variants | head -1`): nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except KeyboardInterrupt:
        print(f"sam3d {args.command}: interrupted", file=sys.stderr)
        return 130
    except Terminated:
        print(f"sam3d {args.command}: terminated", file=sys.stderr)
        return 128 + signal.SIGTERM
