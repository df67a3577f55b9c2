"""Nox sessions: thin wrappers over `python -m sam3d` (the logic lives in the sam3d package).

Each session is one function running sam3d commands of sam3d/cli/main.py (one, except `tests`:
build, pytest, ctest); a new command (for example a mutation run) gets its session here, next
to the others (docs/architecture.md). The sessions table of docs/commands.md is generated from
this file (`python -m sam3d generate`).

Sessions run in the environment made by ci/bootstrap.sh from requirements.lock, so every
tool is the locked one. Arguments after `--` go straight to the sam3d command, e.g.
`nox -s build -- cpu-asan` or `nox -s bench -- --images 5 release`.
"""

import importlib.util
import os
import shutil
import sys
from pathlib import Path

import nox
import nox.virtualenv

nox.needs_version = ">=2024.3.2"
nox.options.default_venv_backend = "none"
# The cheapest useful session: lint builds nothing and checks every Python file and the duplicates
# in seconds; the others build GGML first (minutes to half an hour on 2 cores).
nox.options.sessions = ["lint"]
# No session makes an environment (venv_backend "none"), so uv is never used: tell nox so
# instead of letting it probe for uv and log "uv binary not found." in every session.
nox.virtualenv.HAS_UV, nox.virtualenv.UV = False, "uv"
nox.virtualenv.UV_VERSION = nox.virtualenv.version.Version("0")


def _check_env(session: nox.Session) -> None:
    """Stops the session at once, in one line, unless it runs in ci/bootstrap.sh's environment
    (the sam3d package importable and this interpreter first on PATH as `python`)."""
    python = shutil.which("python")
    here = Path(sys.executable).parent
    if (
        importlib.util.find_spec("sam3d") is None
        or python is None
        or Path(python).parent.resolve() != here.resolve()
        or not os.environ.get("VIRTUAL_ENV")
    ):
        session.error(
            "not in the project's environment: run `ci/bootstrap.sh nox ...` "
            f"(e.g. ci/bootstrap.sh nox -s {session.name})"
        )


def _sam3d(session: nox.Session, *args: str) -> None:
    _check_env(session)
    session.run("python", "-m", "sam3d", *args, *session.posargs, external=True)


@nox.session(tags=["build"])
def build(session: nox.Session) -> None:
    """Build GGML and the core in the default set's variants that run here (or the ones named).

    Without an NVIDIA GPU the CUDA variants are left out, in one line that says so."""
    _sam3d(session, "build")


@nox.session(tags=["publish"])
def publish(session: nox.Session) -> None:
    """Upload the GGML and core packages of the default set's variants (or the ones named) to the Conan remote."""
    _sam3d(session, "publish")


@nox.session(tags=["test"])
def sanitize(session: nox.Session) -> None:
    """Run `ctest -L normal` in the default set's sanitizer variants (or the ones named); any report fails."""
    _sam3d(session, "ctest", "--sanitizers-only", "-L", "normal")


@nox.session(tags=["test"])
def validate(session: nox.Session) -> None:
    """Run `ctest -L normal` in the Vulkan variants under the Khronos validation layer; a message fails its test.

    The default set's Vulkan variants, or the ones named."""
    _sam3d(session, "ctest", "--vulkan-validation", "-L", "normal")


@nox.session(tags=["test"])
def tests(session: nox.Session) -> None:
    """Build the variants that run here, run the pytest suite, then `ctest -L normal` in the uninstrumented ones.

    Three commands: `sam3d build`, pytest (arguments after `--` go to it) and `sam3d ctest`; the
    sanitize session tests the default set's sanitizer variants. Without an NVIDIA GPU the CUDA
    variants are left out, in one line that says so."""
    _check_env(session)
    from sam3d.core.variants import select  # the registry; importable once _check_env passed
    from sam3d.tools.build import runs_here

    session.run("python", "-m", "sam3d", "build", external=True)
    session.run(
        "python", "-m", "pytest", "tests", "--junitxml=build/reports/pytest.xml", *session.posargs, external=True
    )
    here, _ = runs_here(select(None))
    session.run(
        "python", "-m", "sam3d", "ctest", "-L", "normal", *(v.name for v in here if not v.sanitizer), external=True
    )


@nox.session(tags=["lint"])
def lint(session: nox.Session) -> None:
    """Lint (ruff check), formatting (ruff format --check) and duplicate code (jscpd); builds nothing.

    Their settings: [tool.ruff] in pyproject.toml, .jscpd.json. `ruff format` and
    `ruff check --fix` write the fixes."""
    _check_env(session)
    session.run("ruff", "check", ".", external=True)
    session.run("ruff", "format", "--check", ".", external=True)
    session.run("ci/jscpd/node_modules/.bin/jscpd", "--config", ".jscpd.json", external=True)


@nox.session(tags=["clean"])
def clean(session: nox.Session) -> None:
    """Remove the build folders (`-- VARIANT` for one; `-- --caches` also the shared compiler cache and Conan home)."""
    _sam3d(session, "clean")


@nox.session(tags=["fuzz"])
def fuzz(session: nox.Session) -> None:
    """Build the variant with the fuzz role and fuzz the C API over native/fuzz's seeds (`-- --max-total-time 600`).

    A failing input lands in build/fuzz/artifacts/."""
    _sam3d(session, "fuzz")


@nox.session(tags=["bench"])
def bench(session: nox.Session) -> None:
    """Build, then benchmark the variants into one table and an evidence folder.

    With no variant named, the default set's variants that run here: a CUDA variant only where
    there is an NVIDIA GPU (one line names what was left out). The evidence goes to
    generated/diagnostics/<run-name>/ (e.g. `-- --images 5 release`)."""
    _sam3d(session, "bench")


@nox.session(tags=["report"])
def report(session: nox.Session) -> None:
    """Render result files or evidence folders into the one table (`python -m sam3d report`)."""
    _sam3d(session, "report")


@nox.session(tags=["device"])
def device(session: nox.Session) -> None:
    """Run `ctest -L device` in the variants with the device role on a GPU machine with the build tools.

    The variants come from the registry (sam3d/core/variants.py). Without a GPU every case reports
    "skipped: no GPU"."""
    _check_env(session)
    from sam3d.core.variants import DEVICE, with_role  # the registry; importable once _check_env passed

    _sam3d(session, "ctest", "-L", "device", *(v.name for v in with_role(DEVICE)))


@nox.session(tags=["bundle"])
def bundle(session: nox.Session) -> None:
    """Pack the variants with the bundle role (or the GPU variants named) into build/bundle/sam3d-device.tar.gz.

    One bundle per variant instead when one would pass 64 MiB compressed.

    That machine needs only its driver and python3; bring its results back with
    `python -m sam3d device-import`."""
    _sam3d(session, "bundle")


@nox.session(tags=["mutants"])
def mutants(session: nox.Session) -> None:
    """Mutation check of the core: every mutant in native/mutants.toml must be killed by its variant's normal suite.

    Ends with a table of the killers; a CI workflow job (too long for .ci/run). With
    `-- --generated [--file F] [--shard K/N]`: the generated campaign over native/src/ instead,
    ending with its report and mutation score (docs/mutation.md). `-- --python`: mutmut over
    sam3d/results/ instead (score >= 90%, every survivor killed or listed as equivalent)."""
    _sam3d(session, "mutants")
