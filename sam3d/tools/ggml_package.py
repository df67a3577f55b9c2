"""The record of a variant's GGML package: written by its build, read by what uses the build later.

Every Conan invocation holds the Conan home's lock (conan_lock.py: Conan's cache is not safe for
concurrent use), a build for its whole `conan build`, GGML's compile included. A command that
only packs what is built (the bundle) must not wait behind another clone's build, so it never
asks Conan: conan.build() records what it needs about the variant's GGML package once a build
has succeeded, still inside its lock span, from the graph Conan wrote for that very build
(`conan build --format=json --out-file`). The record is build/<variant>/<build
type>/ggml-package.json (RECORD), written atomically (core/files.write_atomic): the reference,
recipe revision, package_id, package revision, package folder and the names of the files in
the package's lib/ folder.

read() asks nothing of Conan and takes no lock; it refuses a record that no longer describes
the build folder, with NotBuilt naming the variant's build command, when there is
- no record: the variant was not built since this record exists, or its last build failed (a
  build removes the record when it starts and writes it only once `conan build` succeeded);
- a record of another schema (SCHEMA_ID);
- another recipe state: the record keeps recipe_sha256(), the SHA-256 of the GGML recipe's
  files (conan/recipes/ggml/) when the build exported it. Conan's recipe revision is a hash of
  the same files (the exported conanfile.py and conandata.yml), so another digest here means
  this checkout would build another revision. A revision another clone exported to the shared
  cache does not count: this build folder was built against its own;
- a package folder, or a library the record lists, that is gone (`conan remove`, a new cache).
A changed profile (the variant's flags, the compiler) is not seen: it leaves the build folder's
own binaries as stale as the record, and `nox -s build` refreshes both.
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
from . import system

NAME = "ggml"
RECIPE = Path("conan") / "recipes" / NAME
RECORD = "ggml-package.json"
SCHEMA_ID = "sam3d-ggml-package/1"

_TEXT = {"type": "string", "minLength": 1}
SCHEMA = {
    "type": "object",
    "required": ["schema", "ref", "recipe_revision", "package_id", "package_revision", "package_folder", "libs",
                 "recipe_sha256"],
    "properties": {
        "schema": {"const": SCHEMA_ID},
        "ref": _TEXT, "recipe_revision": _TEXT, "package_id": _TEXT, "package_revision": _TEXT,
        "package_folder": _TEXT,
        "libs": {"type": "array", "items": _TEXT},
        "recipe_sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
    },
}


@dataclass(frozen=True)
class Record:
    """What a variant's build used of GGML (the fields are the record's keys): ``ref`` is
    ggml/<version>; ``libs`` are the names of the files in the package's lib/ folder."""

    ref: str
    recipe_revision: str
    package_id: str
    package_revision: str
    package_folder: Path
    libs: tuple[str, ...]
    recipe_sha256: str

    @property
    def lib_dir(self) -> Path:
        return self.package_folder / "lib"


def path(v: Variant) -> Path:
    return paths.build_dir(v.name, v.build_type) / RECORD


def recipe_sha256() -> str:
    """SHA-256 over this checkout's GGML recipe: "<sha256> <name>" per file (sha256sum's lines,
    names relative to conan/recipes/ggml/, sorted; Python's __pycache__ left out)."""
    folder = paths.root() / RECIPE
    files = sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    lines = "".join(f"{system.sha256_file(p)}  {p.relative_to(folder)}\n" for p in files)
    return hashlib.sha256(lines.encode()).hexdigest()


def _ggml_node(graph: Path) -> dict:
    """GGML's node in a `--format=json` graph file (the host context's: the one linked)."""
    nodes = read_json(graph)["graph"]["nodes"].values()
    found = [n for n in nodes if n.get("name") == NAME and n.get("context") == "host"]
    if len(found) != 1:
        raise Sam3dError(f"{graph}: {len(found)} {NAME} packages in the build's graph (want 1): the core's "
                         "conanfile.py must require GGML once")
    return found[0]


def discard(v: Variant) -> None:
    """Remove the variant's record: a build starts, and its build folder is no longer the last one's."""
    path(v).unlink(missing_ok=True)


def write(v: Variant, graph: Path, recipe: str) -> Record:
    """Record the GGML package of the variant's build from the graph file its `conan build
    --format=json --out-file` wrote, once the build has succeeded; ``recipe`` is
    recipe_sha256() as it was when the build exported the recipe (the recipe may be edited
    while GGML compiles)."""
    node = _ggml_node(graph)
    folder = Path(node["immutable_package_folder"])
    rec = Record(ref=node["ref"].split("#", 1)[0], recipe_revision=node["rrev"], package_id=node["package_id"],
                 package_revision=node["prev"], package_folder=folder,
                 libs=tuple(sorted(p.name for p in (folder / "lib").iterdir() if not p.is_dir())),
                 recipe_sha256=recipe)
    doc = {"schema": SCHEMA_ID, **asdict(rec), "package_folder": str(folder), "libs": list(rec.libs)}
    write_atomic(path(v), json.dumps(doc, indent=1) + "\n")
    return rec


def read(v: Variant) -> Record:
    """The variant's record, when it still describes its build folder's GGML (the module's
    rules); NotBuilt naming the variant's build command otherwise. No Conan call, no lock."""
    p, rebuild = path(v), f"nox -s build -- {v.name}"
    if not p.is_file():
        raise NotBuilt(f"{p} is missing: build the variant first ({rebuild})")
    try:
        doc = check_schema(read_json(p, NotBuilt), SCHEMA, str(p), NotBuilt)
    except NotBuilt as e:
        raise NotBuilt(f"{e}; rebuild the variant ({rebuild})") from None
    keys = {f.name: doc[f.name] for f in fields(Record)}
    rec = Record(**keys | {"package_folder": Path(doc["package_folder"]), "libs": tuple(doc["libs"])})
    if rec.recipe_sha256 != recipe_sha256():
        raise NotBuilt(f"{p}: the GGML recipe ({RECIPE}/) changed since the variant was built: rebuild it ({rebuild})")
    gone = [f for f in (rec.package_folder, *(rec.lib_dir / name for name in rec.libs)) if not f.exists()]
    if gone:
        raise NotBuilt(f"{p}: {gone[0]} of its GGML package ({rec.ref}:{rec.package_id}) is gone from the Conan "
                       f"cache: rebuild the variant ({rebuild})")
    return rec
