"""The record of a variant's GGML package: written by its build, read by what uses the build later.

Every Conan invocation holds the Conan home's lock (conan_lock.py: Conan's cache is not safe for
concurrent use), a build for its whole `conan build`, GGML's compile included. A command that
only packs what is built (the bundle) must not wait behind another clone's build, so it never
asks Conan: conan.build() records what it needs about the variant's GGML package once a build
has succeeded, still inside its lock span, from the graph Conan wrote for that very build
(`conan build --format=json --out-file`). The record is build/<variant>/<build
type>/ggml-package.json (RECORD), written atomically (core/files.write_atomic): the reference,
recipe revision, package_id, package revision, package folder, the names of the files in the
package's lib/ folder, and the package's settings, options and conf as its package_id has them
(the graph node's "info").

read() asks nothing of Conan and takes no lock; it refuses a record that no longer describes
the build folder, with NotBuilt naming the variant's build command, when there is
- no record: the variant was not built since this record exists, its last build failed, or a
  build of it is running (a build removes the record when it starts and writes it only once
  `conan build` succeeded);
- a record of another schema (SCHEMA_ID);
- another recipe state: the record keeps recipe_sha256(), the SHA-256 of the files Conan
  exports of the GGML recipe (EXPORTED) as they were when the build started. Conan's recipe
  revision is a hash of the same files (conandata.yml as the recipe index trims it to the
  version), so another digest here means this checkout would build another revision. A revision
  another clone's index gave the shared cache does not count: this build folder was built
  against its own;
- a package that is not the binary the variant asks for now (expected()): another build type,
  compiler, sanitizer, os.glibc (a remote configured or not since), Vulkan or CUDA option,
  CUDA architectures, or for a CUDA variant another toolkit (ci/cuda-toolkit.lock changed);
- a package folder, or a library the record lists, that is gone (`conan remove`, a new cache).
The rest of a changed profile (the variant's flags, the compiler's version) is not seen: it
leaves the build folder's own binaries as stale as the record, and `nox -s build` refreshes both.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from ..core import paths
from ..core.errors import NotBuilt, Sam3dError
from ..core.files import check_schema, read_json, write_atomic
from ..core.variants import Variant
from . import conan_lock, conan_remote, cuda, system

NAME = "ggml"
# The recipe in the checkout's recipe index (conan_remote.INDEX): config.yml names its versions
# and their folder, all/ (conan-center-index's layout), which holds the recipe and its test_package/.
CONFIG = conan_remote.INDEX / "recipes" / NAME / "config.yml"
RECIPE = CONFIG.parent / "all"
# What `conan export` copies of the recipe folder: conanfile.py and conandata.yml, and what a
# recipe's exports and exports_sources name (the GGML recipe names none).
EXPORTED = ("conandata.yml", "conanfile.py")
RECORD = "ggml-package.json"
SCHEMA_ID = "sam3d-ggml-package/2"
TOOLKIT_CONF = "user.sam3d:cuda_toolkit_id"

_TEXT = {"type": "string", "minLength": 1}
_VALUES = {"type": "object", "additionalProperties": {"type": "string"}}
SCHEMA = {
    "type": "object",
    "required": [
        "schema",
        "ref",
        "recipe_revision",
        "package_id",
        "package_revision",
        "package_folder",
        "libs",
        "recipe_sha256",
        "settings",
        "options",
        "conf",
    ],
    "properties": {
        "schema": {"const": SCHEMA_ID},
        "ref": _TEXT,
        "recipe_revision": _TEXT,
        "package_id": _TEXT,
        "package_revision": _TEXT,
        "package_folder": _TEXT,
        "libs": {"type": "array", "items": _TEXT},
        "recipe_sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
        "settings": _VALUES,
        "options": _VALUES,
        "conf": _VALUES,
    },
}
# What write() takes of a `conan build --format=json` graph (Conan 2): its nodes, and of GGML's
# node the package's identity, folder and info.
GRAPH_SCHEMA = {
    "type": "object",
    "required": ["graph"],
    "properties": {
        "graph": {
            "type": "object",
            "required": ["nodes"],
            "properties": {"nodes": {"type": "object", "additionalProperties": {"type": "object"}}},
        }
    },
}
NODE_SCHEMA = {
    "type": "object",
    "required": ["ref", "rrev", "package_id", "prev", "immutable_package_folder", "info"],
    "properties": {
        "ref": _TEXT,
        "rrev": _TEXT,
        "package_id": _TEXT,
        "prev": _TEXT,
        "immutable_package_folder": _TEXT,
        "info": {
            "type": "object",
            "required": ["settings", "options"],
            "properties": {"settings": _VALUES, "options": _VALUES, "conf": _VALUES},
        },
    },
}


@dataclass(frozen=True)
class Record:
    """What a variant's build used of GGML (the fields are the record's keys): ``ref`` is
    ggml/<version>; ``libs`` are the names of the files in the package's lib/ folder;
    ``settings``, ``options`` and ``conf`` are the package's info (what its package_id hashes)."""

    ref: str
    recipe_revision: str
    package_id: str
    package_revision: str
    package_folder: Path
    libs: tuple[str, ...]
    recipe_sha256: str
    settings: dict[str, str]
    options: dict[str, str]
    conf: dict[str, str]

    @property
    def lib_dir(self) -> Path:
        return self.package_folder / "lib"

    def value(self, key: str) -> str | None:
        """The package's value of an expected() key ("settings.<name>", "options.<name>",
        "conf.<name>"), None when unset."""
        group, name = key.split(".", 1)
        return getattr(self, group).get(name)


def path(v: Variant) -> Path:
    return paths.build_dir(v.name, v.build_type) / RECORD


def recipe_sha256() -> str:
    """SHA-256 over what Conan exports of this checkout's GGML recipe (EXPORTED): the output of
    `sha256sum conandata.yml conanfile.py` in conan/recipes/ggml/all/, so a file there that Conan
    does not export (an editor's swap file, test_package/) changes nothing."""
    folder = paths.root() / RECIPE
    lines = "".join(f"{system.sha256_file(folder / name)}  {name}\n" for name in EXPORTED)
    return hashlib.sha256(lines.encode()).hexdigest()


def expected(v: Variant) -> dict[str, str | None]:
    """What the variant asks of its GGML binary now, keyed as Record.value() reads the package's
    info (None: unset): the settings and options of its profile that differ between variants
    (conan.profile_text), os.glibc when a remote is configured (conan_remote.glibc_setting), and
    for a CUDA variant the toolkit id the recipe's package_id() adds, the folder name
    cuda.install_dir() derives from ci/cuda-toolkit.lock (nothing is installed)."""
    return {
        "settings.build_type": v.build_type,
        "settings.compiler": v.compiler,
        "settings.compiler.sanitizer": v.sanitizer,
        "settings.os.glibc": conan_remote.glibc_setting(),
        "options.vulkan": str(v.vulkan),
        "options.cuda": str(v.cuda),
        "options.cuda_architectures": v.cuda_architectures if v.cuda else None,
        f"conf.{TOOLKIT_CONF}": cuda.install_dir()[0].name if v.cuda else None,
    }


# The fix for a graph without what write() takes: it was not written by the Conan this checkout pins.
_NOT_CONANS = (
    "; not the graph of `conan build --format=json` of the Conan that requirements.lock pins: "
    "build through ci/bootstrap.sh (ci/bootstrap.sh python -m sam3d build)"
)


def _ggml_node(graph: Path, error: type[Sam3dError]) -> dict:
    """GGML's node in a `--format=json` graph file (the host context's: the one linked)."""
    doc = check_schema(read_json(graph, error), GRAPH_SCHEMA, str(graph), error, _NOT_CONANS)
    found = [n for n in doc["graph"]["nodes"].values() if n.get("name") == NAME and n.get("context") == "host"]
    if len(found) != 1:
        raise error(
            f"{graph}: {len(found)} {NAME} packages in the build's graph (want 1): the core's "
            "conanfile.py must require GGML once"
        )
    return found[0]


def discard(v: Variant) -> None:
    """Remove the variant's record: a build starts, and its build folder is no longer the last one's."""
    path(v).unlink(missing_ok=True)


def write(v: Variant, graph: Path, recipe: str, error: type[Sam3dError] = Sam3dError) -> Record:
    """Record the GGML package of the variant's build from the graph file its `conan build
    --format=json --out-file` wrote, once the build has succeeded; ``recipe`` is
    recipe_sha256() as it was when the build exported the recipe (the recipe may be edited
    while GGML compiles). A graph that lacks what the record takes is ``error`` in one line."""
    rebuild = f"python -m sam3d build {v.name}"
    node = check_schema(_ggml_node(graph, error), NODE_SCHEMA, f"{graph}: {NAME}'s node", error, _NOT_CONANS)
    folder = Path(node["immutable_package_folder"])
    if not (folder / "lib").is_dir():
        raise error(
            f"{graph}: {NAME}'s package {folder} has no lib/ folder: the GGML recipe's package() must "
            f"copy its libraries there ({RECIPE}/conanfile.py), then rebuild ({rebuild})"
        )
    info = node["info"]
    rec = Record(
        ref=node["ref"].split("#", 1)[0],
        recipe_revision=node["rrev"],
        package_id=node["package_id"],
        package_revision=node["prev"],
        package_folder=folder,
        libs=tuple(sorted(p.name for p in (folder / "lib").iterdir() if not p.is_dir())),
        recipe_sha256=recipe,
        settings=dict(info["settings"]),
        options=dict(info["options"]),
        conf=dict(info.get("conf", {})),
    )
    doc = {"schema": SCHEMA_ID, **asdict(rec), "package_folder": str(folder), "libs": list(rec.libs)}
    write_atomic(path(v), json.dumps(doc, indent=1) + "\n")
    return rec


def read(v: Variant) -> Record:
    """The variant's record, when it still describes its build folder's GGML (the module's
    rules); NotBuilt naming the variant's build command otherwise. No Conan call, no lock."""
    p, rebuild = path(v), f"python -m sam3d build {v.name}"
    if not p.is_file():
        pid = conan_lock.live_holder_in(paths.conan_home(), paths.root())  # each build holds it meanwhile
        running = f" (or a build of it is running: PID {pid} of this clone holds the Conan lock)" if pid else ""
        raise NotBuilt(f"{p} is missing{running}: build the variant first ({rebuild})")
    try:
        doc = check_schema(read_json(p, NotBuilt), SCHEMA, str(p), NotBuilt)
    except NotBuilt as e:
        raise NotBuilt(f"{e}; rebuild the variant ({rebuild})") from None
    keys = {f.name: doc[f.name] for f in fields(Record)}
    rec = Record(**keys | {"package_folder": Path(doc["package_folder"]), "libs": tuple(doc["libs"])})
    if rec.recipe_sha256 != recipe_sha256():
        raise NotBuilt(f"{p}: the GGML recipe ({RECIPE}/) changed since the variant was built: rebuild it ({rebuild})")
    for key, want in expected(v).items():
        if rec.value(key) != want:
            raise NotBuilt(
                f"{p}: its GGML package ({rec.ref}:{rec.package_id}) has {key}={_shown(rec.value(key))}, "
                f"the variant asks for {_shown(want)} now: rebuild it ({rebuild})"
            )
    gone = [f for f in (rec.package_folder, *(rec.lib_dir / name for name in rec.libs)) if not f.exists()]
    if gone:
        raise NotBuilt(
            f"{p}: {gone[0]} of its GGML package ({rec.ref}:{rec.package_id}) is gone from the Conan "
            f"cache: rebuild the variant ({rebuild})"
        )
    return rec


def _shown(value: str | None) -> str:
    return "(unset)" if value is None else repr(value)
