"""The generated mutation campaign: single-site mutants derived mechanically from native/src/.

native/mutants.toml keeps the changes this module does not make (docs/mutation.md). This
module writes mutants nobody chose: every site of five kinds in native/src/*.cpp and
*.h, found on the source with comments, string and character literals and preprocessor lines
blanked out (so nothing there is mutated):

- ``relational``: each comparison ``a OP b`` (OP one of < <= > >= == !=, written with a space on
  both sides, as clang-format writes a comparison and never a template bracket) becomes its
  boundary (< and <=, > and >=) and its negation (< and >=, <= and >, == and !=);
- ``condition``: each ``if (...)`` and ``while (...)`` condition negated, forced true and forced
  false (a condition declaring a variable is left alone: it has no such form; one that is a
  single comparison is not negated here: its relational mutant is that negation);
- ``counter``: each statement ``x += y;``, ``x -= y;``, ``++x;``, ``x++;``, ``--x;``, ``x--;``
  removed (it becomes the empty statement ``;``);
- ``call``: each statement that is one call of a GGML entry point (``s.ggml.*``, ``ggml_*``)
  or of a function of the core (one defined or declared at namespace scope in native/src/,
  which includes the ring and event helpers) removed;
- ``off-by-one``: each ``+ 1`` and ``- 1`` dropped, and each ordering comparison's right-hand
  side made one more or one less, the way its boundary mutant does not (< and >= get ``- 1``,
  <= and > get ``+ 1``; a right-hand side that is not a number, such as ``nullptr`` or an enum
  value, gets none).

Each mutant has the shape of a curated one (mutants.py): `find`, whole lines that occur once in
the file (the site's lines, widened by a line above or below until unique), and `replace`. Its
name is ``<file>-<kind>-<hash>``, the hash of the file, the kind, the site's lines before and
after (whitespace collapsed) and, for identical sites, their order: moving code does not rename
a mutant, editing its line does.

A mutant runs in the variants of VARIANTS in order and goes on to the next only while it
survives: killed in any (a failing test, including a hang past the per-test timeout), it is
killed. release and cpu-asan are built first (unless --no-build) and must be there;
vulkan-ubsan, for the paths only a Vulkan backend takes, runs where it is built and is skipped
with a message where not. Results are cached in
build/mutants/generated-cache.json, keyed by the variant, the mutant, the content of the file
it mutates and of the test sources: a rerun builds only the mutants of files (or tests) that
changed. native/mutants-equivalent.toml lists the mutants that no test can kill because they
change no behaviour the contract (docs/contract.md) states, each with its reason; they are not
run, and do not count in the score: killed / (generated - equivalent - did not build).

A killed mutant stays killed while the test that killed it does not change: beside each result
the cache keeps a kill record keyed without the test sources, valid while the killer's own file
(the one .cpp under native/tests defining its ``TEST``/``TEST_F``/``TEST_P``; native/fuzz for
``Fuzz.*``) and the tests' shared files (headers, native/testing, native/sanitizers, the
CMakeLists) are unchanged.
So after a new test only the survivors, and the mutants killed in the files that changed, run
again. A killer that names no such file (a sanitizer canary, no report) keeps no kill record.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
import tomllib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tabulate import tabulate

from ..core import paths, variants
from . import mutants

SOURCES = Path("native") / "src"
EQUIVALENTS = Path("native") / "mutants-equivalent.toml"
# The variants a mutant runs in, in order; it goes on to the next only while it survives.
VARIANTS = ("release", "cpu-asan", "vulkan-ubsan")
# Built by the command (unless --no-build) and required; the others run only where built already.
REQUIRED = ("release", "cpu-asan")
# What a cached result depends on besides the mutated file: the tests and how they are built.
TEST_SOURCES = (
    Path("native") / "tests",
    Path("native") / "testing",
    Path("native") / "fuzz",
    Path("native") / "sanitizers",
    Path("native") / "CMakeLists.txt",
)
TEST_CASES = Path("native") / "tests"  # the .cpp files here that define test cases
FUZZ = Path("native") / "fuzz"  # the Fuzz.* tests' sources (the target, its model and seeds)
# Bumped when the rules above change what a mutant is (cached results are then stale).
GENERATOR_VERSION = 1
KINDS = ("relational", "condition", "counter", "call", "off-by-one")
VERDICTS = ("killed", "equivalent", "survived", "did not build")

_NEGATE = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "==": "!=", "!=": "=="}
_BOUNDARY = {"<": "<=", "<=": "<", ">": ">=", ">=": ">"}
_ONE_MORE_OR_LESS = {"<": " - 1", ">=": " - 1", "<=": " + 1", ">": " + 1"}
_KEYWORDS = {
    "if",
    "while",
    "for",
    "switch",
    "return",
    "sizeof",
    "catch",
    "do",
    "else",
    "case",
    "throw",
    "delete",
    "new",
    "static_assert",
    "alignof",
    "decltype",
    "using",
    "typedef",
    "template",
    "namespace",
    "struct",
    "class",
    "enum",
    "goto",
    "break",
    "continue",
    "default",
}


class GeneratedError(mutants.MutantError):
    """A campaign that cannot run as asked (the message says what to change)."""


@dataclass(frozen=True)
class Generated:
    name: str
    file: str  # native/src/<file>, relative to the checkout
    line: int  # the site's first line today (not part of the name)
    kind: str
    find: str
    replace: str
    before: str  # the site's lines as they are, stripped
    after: str  # the same lines mutated, stripped

    @property
    def change(self) -> str:
        return f"`{self.before}` -> `{self.after}`"


# ---------------------------------------------------------------- reading C++


def mask(text: str) -> str:
    """`text` with comments, string and character literals and preprocessor lines (with their
    continuation lines) replaced by spaces; newlines and every other character keep their place."""
    out = list(text)
    n = len(text)
    i = 0
    line_start = True

    def blank(a: int, b: int) -> None:
        for k in range(a, min(b, n)):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        ch = text[i]
        if line_start and ch == "#":
            j = i
            while j < n and not (text[j] == "\n" and text[j - 1] != "\\"):
                j += 1
            blank(i, j)
            i = j
            continue
        if ch == "\n":
            line_start = True
            i += 1
            continue
        if ch in " \t":
            i += 1
            continue
        line_start = False
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            blank(i, j)
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            blank(i, j)
            i = j
        elif ch == "R" and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^()\\ ]{0,16})\(', text[i:])
            if m:
                close = ")" + m.group(1) + '"'
                j = text.find(close, i + m.end())
                j = n if j < 0 else j + len(close)
                blank(i, j)
                i = j
            else:
                i += 1
        elif ch == '"' or (ch == "'" and not (i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_"))):
            j = i + 1
            while j < n and text[j] != ch and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            blank(i, j + 1)
            i = j + 1
        else:
            i += 1
    return "".join(out)


def _match_close(masked: str, at: int) -> int:
    """The index of the bracket closing the one at `at` (-1: none)."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    stack = []
    for k in range(at, len(masked)):
        c = masked[k]
        if c in pairs:
            stack.append(pairs[c])
        elif c in ")]}":
            if not stack or stack.pop() != c:
                return -1
            if not stack:
                return k
    return -1


def _operand_end(masked: str, at: int) -> int:
    """Where the right-hand operand starting at `at` ends: a closing bracket, `;`, `,`, `?`, `:`,
    `&&`, `||` or a newline at its depth."""
    depth = 0
    k = at
    while k < len(masked):
        c = masked[k]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            if depth == 0:
                break
            depth -= 1
        elif depth == 0 and (
            c in ";,?:\n"
            and not masked.startswith("::", k)
            and not masked.startswith("::", k - 1)
            or masked.startswith(" && ", k)
            or masked.startswith(" || ", k)
        ):
            break
        elif c == "\n":
            return -1
        k += 1
    while k > at and masked[k - 1] == " ":
        k -= 1
    return k


def _numeric(operand: str) -> bool:
    """Whether one more or one less of `operand` is still a number of the same kind (not a
    pointer literal, a boolean, an enum value or a status)."""
    o = operand.strip()
    if not o or o in ("nullptr", "true", "false", "NULL"):
        return False
    if re.search(r"::[A-Z]\w*$", o):  # Enum::Value
        return False
    if re.fullmatch(r"(SAM3D|GGML)_(OK|ERR_\w+|STATUS_\w+|FALLBACK_\w+|TYPE_\w+|OP_\w+)", o):
        return False
    return True


def core_functions(texts: dict[str, str]) -> set[str]:
    """Names of the functions the core defines or declares at namespace scope (a line starting
    at column 0 with a return type and the name before `(`), member functions defined as
    Class::name included."""
    names: set[str] = set()
    for text in texts.values():
        for line in mask(text).splitlines():
            m = re.match(
                r"(?:(?:inline|static|constexpr|template\s*<[^>]*>)\s+)*[A-Za-z_][\w:<>,\s\*&]*?[\s\*&:](\w+)\(", line
            )
            if m and line[:1].isalpha() and line.split()[0] not in _KEYWORDS:
                names.add(m.group(1))
    return names - _KEYWORDS


# ---------------------------------------------------------------- sites


@dataclass
class _Site:
    kind: str
    start: int  # the changed span of the file's text
    end: int
    text: str  # what replaces it


def _statements(masked: str):
    """(start, end) of each simple statement beginning a line: its first character follows `;`,
    `{` or `}` (comments aside), it ends at the first `;` at its depth and holds no brace."""
    for m in re.finditer(r"(?m)^[ \t]*(?=\S)", masked):
        start = m.end()
        prev = masked[:start].rstrip()
        if prev and prev[-1] not in ";{}":
            continue
        depth = 0
        k = start
        while k < len(masked):
            c = masked[k]
            if c in "([":
                depth += 1
            elif c in ")]":
                depth -= 1
            elif c in "{}" and depth == 0:
                k = -1
                break
            elif c == ";" and depth == 0:
                break
            k += 1
        if k > start and k < len(masked):
            yield start, k + 1


def sites(text: str, helpers: set[str]) -> list[_Site]:
    masked = mask(text)
    out: list[_Site] = []
    # relational (and the off-by-one of an ordering comparison's right-hand side)
    for m in re.finditer(r"(?<=[^\s]) (<=|>=|==|!=|<|>) (?=[^\s=<>])", masked):
        op, a, b = m.group(1), m.start(1), m.end(1)
        if masked[m.start() - 1] in "<>=!" or masked[b + 1] in "<>=":
            continue
        for to in (_BOUNDARY.get(op), _NEGATE[op]):
            if to:
                out.append(_Site("relational", a, b, to))
        if op in _ONE_MORE_OR_LESS:
            e = _operand_end(masked, b + 1)
            if e > b + 1 and _numeric(masked[b + 1 : e]):
                out.append(_Site("off-by-one", e, e, _ONE_MORE_OR_LESS[op]))
    # conditions
    for m in re.finditer(r"\b(if|while) \(", masked):
        op = m.end() - 1
        close = _match_close(masked, op)
        if close < 0:
            continue
        cond = masked[op + 1 : close]
        if (
            ";" in cond
            or re.match(r"\s*(const\s+)?[\w:<>]+[\s\*&]+\w+\s*=[^=]", cond)
            or cond.strip() in ("true", "false")
        ):
            continue
        # A condition that is one comparison is negated by its relational mutant already.
        single = len(re.findall(r" (<=|>=|==|!=|<|>) ", cond)) == 1 and not re.search(r"&&|\|\||\?|!", cond)
        if not single:
            out.append(_Site("condition", op + 1, close, f"!({text[op + 1 : close]})"))
        out.append(_Site("condition", op + 1, close, "true"))
        out.append(_Site("condition", op + 1, close, "false"))
    # statements: counters and calls removed
    for start, end in _statements(masked):
        stmt = masked[start : end - 1].strip()
        first = re.match(r"[A-Za-z_]\w*", stmt)
        if first and first.group(0) in _KEYWORDS:
            continue
        counter = re.fullmatch(r"(\+\+|--)[\w.\->\[\]]+|[\w.\->\[\]]+(\+\+|--)", stmt) is not None or _top_level(
            stmt, (" += ", " -= ")
        )
        if counter:
            out.append(_Site("counter", start, end, ";"))
            continue
        call = re.match(r"((?:[A-Za-z_]\w*(?:\.|->|::))*)([A-Za-z_]\w*)\(", stmt)
        if call and _match_close(stmt, call.end() - 1) == len(stmt) - 1:
            path, name = call.group(1), call.group(2)
            if ".ggml." in "." + path or name.startswith("ggml_") or name in helpers:
                out.append(_Site("call", start, end, ";"))
    # + 1 and - 1 dropped
    for m in re.finditer(r"(?<=[\w)\]]) [+-] 1(?![\w.'])", masked):
        out.append(_Site("off-by-one", m.start(), m.end(), ""))
    return out


def _top_level(stmt: str, ops: tuple[str, ...]) -> bool:
    depth = 0
    for k, c in enumerate(stmt):
        if c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
        elif depth == 0 and any(stmt.startswith(o, k) for o in ops):
            return True
    return False


# ---------------------------------------------------------------- mutants


def _norm(s: str) -> str:
    return " ".join(s.split())


def mutants_of(rel: str, text: str, helpers: set[str]) -> list[Generated]:
    """The generated mutants of one file (`rel`: its path in the checkout)."""
    stem = Path(rel).name.replace(".cpp", "").replace(".", "-")
    starts = [0] + [m.end() for m in re.finditer("\n", text)]
    out: list[Generated] = []
    seen: Counter[str] = Counter()
    for site in sites(text, helpers):
        # the site's whole lines
        a = text.rfind("\n", 0, site.start) + 1
        b = text.find("\n", site.end if site.end > site.start else site.start)
        b = len(text) if b < 0 else b
        before_lines = text[a:b]
        after_lines = text[a : site.start] + site.text + text[site.end : b]
        if before_lines == after_lines:
            continue
        # widen to whole lines above and below until `find` occurs once
        lo, hi = a, b
        up = True
        while text.count(text[lo:hi]) != 1:
            if up and lo > 0:
                lo = text.rfind("\n", 0, lo - 1) + 1
            elif hi < len(text):
                nxt = text.find("\n", hi + 1)
                hi = len(text) if nxt < 0 else nxt
            elif lo > 0:
                lo = text.rfind("\n", 0, lo - 1) + 1
            up = not up
        find = text[lo:hi]
        replace = text[lo : site.start] + site.text + text[site.end : hi]
        key = f"{rel}|{site.kind}|{_norm(before_lines)}|{_norm(after_lines)}"
        seen[key] += 1
        digest = hashlib.sha256(f"{key}|{seen[key]}".encode()).hexdigest()[:8]
        line = next(i for i in range(len(starts) - 1, -1, -1) if starts[i] <= a) + 1
        out.append(
            Generated(
                f"{stem}-{site.kind}-{digest}",
                rel,
                line,
                site.kind,
                find,
                replace,
                _norm(before_lines),
                _norm(after_lines),
            )
        )
    return out


def source_files(root: Path | None = None) -> list[str]:
    root = root or paths.root()
    return sorted(
        str(p.relative_to(root)) for p in (root / SOURCES).rglob("*") if p.is_file() and p.suffix in (".cpp", ".h")
    )


def generate(files: list[str] | None = None, root: Path | None = None) -> list[Generated]:
    """Every generated mutant of native/src/ (or of `files`, paths in the checkout)."""
    root = root or paths.root()
    every = source_files(root)
    texts = {f: (root / f).read_text() for f in every}
    helpers = core_functions(texts)
    chosen = every
    if files:
        unknown = [f for f in files if f not in texts]
        if unknown:
            raise GeneratedError(
                f"--file {', '.join(unknown)}: not a .cpp or .h file of {SOURCES}/; files: {', '.join(every)}"
            )
        chosen = [f for f in every if f in files]
    out: list[Generated] = []
    for f in chosen:
        out.extend(mutants_of(f, texts[f], helpers))
    return out


def shard(ms: list[Generated], spec: str) -> list[Generated]:
    """The mutants of piece K of N (`spec` "K/N"), chosen by each name's hash: a mutant stays in
    its piece when others come and go."""
    m = re.fullmatch(r"(\d+)/(\d+)", spec)
    if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
        raise GeneratedError(f"--shard {spec!r}: write K/N with 1 <= K <= N (e.g. --shard 2/4)")
    k, n = int(m.group(1)), int(m.group(2))
    return [g for g in ms if int(g.name.rsplit("-", 1)[1], 16) % n == k - 1]


# ---------------------------------------------------------------- equivalents


def load_equivalents(generated: list[Generated], path: Path | None = None) -> dict[str, str]:
    """name -> reason from native/mutants-equivalent.toml, each name checked against the mutants
    generated from the whole tree (`generated`)."""
    path = path or paths.root() / EQUIVALENTS
    if not path.is_file():
        return {}
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise GeneratedError(f"{path}: {e}") from None
    names = {g.name for g in generated}
    out: dict[str, str] = {}
    for i, e in enumerate(data.get("equivalent", [])):
        name, reason = e.get("name"), str(e.get("reason", "")).strip()
        where = f"{path.name}: equivalent[{i}] {name!r}"
        if not name or name not in names:
            raise GeneratedError(
                f"{where}: no generated mutant has this name (its line changed?): list the "
                "mutants with `python -m sam3d mutants --generated --dry-run` and rename or "
                "remove the entry"
            )
        if name in out:
            raise GeneratedError(f"{where}: listed twice")
        if len(reason) < 30 or re.search(r"hard to test|cannot be tested|untestable", reason, re.I):
            raise GeneratedError(
                f"{where}: give a reason a reviewer can check (why no behaviour the contract "
                "states changes), not a note that it is hard to test"
            )
        out[name] = reason
    return out


# ---------------------------------------------------------------- cache


def _digest_paths(root: Path, rels) -> str:
    h = hashlib.sha256()
    for rel in rels:
        p = root / rel
        files = sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p] if p.is_file() else []
        for f in files:
            h.update(str(f.relative_to(root)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def cache_key(g: Generated, variant: str, tests_digest: str, root: Path | None = None) -> str:
    """The key of a result: the mutant in its file, the variant and `tests_digest` ("" for the key
    of a kill record, which names its own tests)."""
    root = root or paths.root()
    h = hashlib.sha256()
    for part in (str(GENERATOR_VERSION), variant, g.name, g.find, g.replace, tests_digest):
        h.update(part.encode() + b"\0")
    h.update((root / g.file).read_bytes())
    return h.hexdigest()


_TEST_MACRO = re.compile(r"^\s*TEST(?:_F|_P)?\s*\(\s*(\w+)\s*,\s*(\w+)\s*\)", re.M)
_INSTANTIATE = re.compile(r"^\s*INSTANTIATE_TEST_SUITE_P\s*\(\s*\w+\s*,\s*(\w+)\s*,", re.M)
# A CTest name of a GoogleTest case: [Instantiation/]Suite.Case[/param]
_CASE_NAME = re.compile(r"(?:\w+/)?(\w+)\.(\w+)(?:/\S+)?")


class Killers:
    """What a killed verdict depends on: for each killer (a CTest name), the digest of the file
    that defines it (with the files instantiating its suite, for a TEST_P) and of the tests'
    shared files; None where no one file defines it, or where it failed by timing out (a hang
    may be load: such a kill is run again after any test change). A test case file's helpers
    are its own; shared ones live in headers or native/testing."""

    def __init__(self, root: Path):
        self.root = root
        self.cases: dict[tuple[str, str], list[Path]] = {}
        self.instantiated: dict[str, list[Path]] = {}
        shared: list[Path] = []
        for rel in TEST_SOURCES:
            p = root / rel
            for f in sorted(x for x in p.rglob("*") if x.is_file()) if p.is_dir() else [p] if p.is_file() else []:
                if FUZZ in f.relative_to(root).parents:
                    continue
                text = f.read_text(errors="replace") if f.suffix == ".cpp" else ""
                found = _TEST_MACRO.findall(text)
                if found and TEST_CASES in f.relative_to(root).parents:
                    for case in found:
                        self.cases.setdefault(case, []).append(f)
                    for suite in set(_INSTANTIATE.findall(text)):
                        self.instantiated.setdefault(suite, []).append(f)
                else:
                    shared.append(f)
        self.shared = _digest_paths(root, [f.relative_to(root) for f in shared])
        self.fuzz = _digest_paths(root, [FUZZ])
        self.memo: dict[str, str | None] = {}
        self.files: dict[Path, str] = {}  # a case file's digest, read once however many killers it defines

    def digest(self, killer: str) -> str | None:
        if killer not in self.memo:
            self.memo[killer] = self._digest(killer)
        return self.memo[killer]

    def _digest(self, killer: str) -> str | None:
        if killer.endswith(mutants.TIMED_OUT):
            return None
        m = _CASE_NAME.fullmatch(killer)
        files = self.cases.get(m.groups()) if m else None
        if files is None and killer.startswith("Fuzz."):
            own = self.fuzz
        elif not files or len(files) != 1:
            return None
        else:
            own_files = sorted(set(files) | set(self.instantiated.get(m.group(1), [])))
            own = "\0".join(self._file(f) for f in own_files)
        return hashlib.sha256(f"{killer}\0{own}\0{self.shared}".encode()).hexdigest()

    def _file(self, f: Path) -> str:
        if f not in self.files:
            self.files[f] = _digest_paths(self.root, [f.relative_to(self.root)])
        return self.files[f]


def _kept_kill(cache: Cache, key: str, killers: Killers) -> dict | None:
    """The kill record under `key` if its killer's tests are as they were."""
    rec = cache.get("kill:" + key)
    if rec is None or not rec.get("killers") or rec.get("killer_digest") != killers.digest(rec["killers"][0]):
        return None
    return rec


def _keep_kill(cache: Cache, key: str, hit: dict, killers: Killers) -> None:
    """Records a killed verdict under `key` with its first killer's digest; drops the record of
    any other verdict, or of a killer without a digest (a run that no longer kills must not
    leave an older kill behind)."""
    killed = hit.get("verdict") == "killed" and hit.get("killers")
    d = killers.digest(hit["killers"][0]) if killed else None
    rec = cache.get("kill:" + key)
    if d is None:
        if rec is not None:
            cache.drop("kill:" + key)
    elif rec is None or rec.get("killer_digest") != d:
        cache.put("kill:" + key, {**hit, "killer_digest": d})


class Cache:
    """Results by cache key, in a JSON file written after each result (an interrupted run keeps
    what it found)."""

    def __init__(self, path: Path):
        self.path = path
        try:
            self.data: dict[str, dict] = json.loads(path.read_text()) if path.is_file() else {}
        except (OSError, json.JSONDecodeError):
            self.data = {}

    def get(self, key: str) -> dict | None:
        return self.data.get(key)

    def put(self, key: str, result: dict) -> None:
        self.data[key] = result
        self._write()

    def drop(self, key: str) -> None:
        self.data.pop(key, None)
        self._write()

    def _write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1, sort_keys=True))
        tmp.replace(self.path)


def cache_path() -> Path:
    return paths.root() / "build" / "mutants" / "generated-cache.json"


# ---------------------------------------------------------------- running


@dataclass
class Result:
    mutant: Generated
    verdict: str = "survived"  # killed | equivalent | survived | did not build
    variants: list[str] = field(default_factory=list)  # where it ran (cached or not)
    killed_in: str = ""
    killers: list[str] = field(default_factory=list)
    seconds: float = 0.0  # building and testing it, cached runs included
    reason: str = ""


def available(names: list[str], progress=print) -> list[str]:
    """The variants of `names` whose build folder exists; a missing required one stops the run."""
    out = []
    for name in names:
        v = variants.get(name)
        presets = paths.build_dir(v.name, v.build_type) / "generators" / "CMakePresets.json"
        if presets.is_file():
            out.append(name)
        elif name in REQUIRED:
            raise GeneratedError(
                f"{presets} is missing: build {name} first (python -m sam3d build {name}), or leave it "
                f"out by naming the variants to run (--variant release)"
            )
        else:
            progress(
                f"mutants: {name} is not built ({presets} is missing): skipped; its mutants run in "
                f"{', '.join(n for n in names if n != name)} only (build it with python -m sam3d build {name})"
            )
    return out


def run(
    selected: list[Generated],
    equivalents: dict[str, str],
    variant_names: list[str],
    fresh: bool = False,
    progress=print,
) -> list[Result]:
    """Runs each selected mutant in each variant in turn while it survives; cached results are
    reused unless `fresh`."""
    root = paths.root()
    tests_digest = _digest_paths(root, TEST_SOURCES)
    by_killer = Killers(root)
    cache = Cache(cache_path())
    results = {g.name: Result(g) for g in selected}
    for g in selected:
        if g.name in equivalents:
            results[g.name].verdict = "equivalent"
            results[g.name].reason = equivalents[g.name]
    pending = [g for g in selected if g.name not in equivalents]
    for vname in variant_names:
        todo: list[tuple[Generated, str]] = []
        for g in pending:
            key = cache_key(g, vname, tests_digest, root)
            kill_key = cache_key(g, vname, "", root)
            hit = None if fresh else cache.get(key) or _kept_kill(cache, kill_key, by_killer)
            if hit is None:
                todo.append((g, key, kill_key))
            else:
                _keep_kill(cache, kill_key, hit, by_killer)
                _record(results[g.name], vname, hit)
        cached = len(pending) - len(todo)
        progress(f"mutants: {vname}: {len(pending)} mutants, {cached} from the cache, {len(todo)} to build")
        if todo:
            with mutants.Scratch(variants.get(vname), "generated-mutants", progress) as scratch:
                for i, (g, key, kill_key) in enumerate(todo, 1):
                    t0 = time.monotonic()
                    built, killers, passed = scratch.trial(g.file, g.find, g.replace, g.name, stop_on_failure=True)
                    verdict = "did not build" if not built else "killed" if killers else "survived"
                    hit = {"verdict": verdict, "killers": killers[:5], "seconds": round(time.monotonic() - t0, 1)}
                    cache.put(key, hit)
                    _keep_kill(cache, kill_key, hit, by_killer)
                    _record(results[g.name], vname, hit)
                    progress(
                        f"mutants: {vname} [{i}/{len(todo)}] {g.name} ({g.file}:{g.line}): {verdict}"
                        f"{' by ' + killers[0] if killers else ''} ({hit['seconds']:.0f} s)"
                    )
        pending = [g for g in pending if results[g.name].verdict == "survived"]
    return [results[g.name] for g in selected]


def _record(r: Result, vname: str, hit: dict) -> None:
    r.variants.append(vname)
    r.seconds += hit.get("seconds", 0.0)
    if hit["verdict"] in ("killed", "did not build"):
        r.verdict = hit["verdict"]
        r.killed_in = vname if hit["verdict"] == "killed" else ""
        r.killers = list(hit.get("killers", []))


# ---------------------------------------------------------------- report


def score(results: list[Result]) -> tuple[int, int, float | None]:
    """(killed, counted, killed / counted): counted excludes equivalent and did-not-build mutants."""
    n = Counter(r.verdict for r in results)
    counted = len(results) - n["equivalent"] - n["did not build"]
    return n["killed"], counted, (n["killed"] / counted if counted else None)


def report(results: list[Result], variant_names: list[str], wall_s: float) -> str:
    rows = []
    by_file: dict[str, list[Result]] = {}
    for r in results:
        by_file.setdefault(r.mutant.file, []).append(r)
    for f, rs in sorted(by_file.items()):
        n = Counter(r.verdict for r in rs)
        k, c, s = score(rs)
        rows.append(
            [
                f,
                len(rs),
                n["killed"],
                n["equivalent"],
                n["survived"],
                n["did not build"],
                f"{100 * s:.1f}%" if s is not None else "-",
            ]
        )
    n = Counter(r.verdict for r in results)
    k, c, s = score(results)
    rows.append(
        [
            "all",
            len(results),
            n["killed"],
            n["equivalent"],
            n["survived"],
            n["did not build"],
            f"{100 * s:.1f}%" if s is not None else "-",
        ]
    )
    lines = [
        tabulate(
            rows,
            headers=["file", "generated", "killed", "equivalent", "survived", "did not build", "score"],
            tablefmt="pipe",
        ),
        "",
    ]
    by_kind = Counter((r.mutant.kind, r.verdict) for r in results)
    lines.append(
        "by kind: "
        + "; ".join(
            f"{kind} {sum(by_kind[(kind, v)] for v in VERDICTS)} ({by_kind[(kind, 'survived')]} survived)"
            for kind in KINDS
            if any(by_kind[(kind, v)] for v in VERDICTS)
        )
    )
    only_late = [r for r in results if r.verdict == "killed" and r.killed_in and r.killed_in != variant_names[0]]
    if only_late:
        lines.append(
            f"killed only after {variant_names[0]}: "
            + ", ".join(f"{r.mutant.name} (in {r.killed_in})" for r in only_late)
        )
    survivors = [r for r in results if r.verdict == "survived"]
    if survivors:
        lines += [
            "",
            f"survivors ({len(survivors)}; each needs a test against docs/contract.md, or an entry "
            f"with its reason in {EQUIVALENTS}):",
        ]
        for r in sorted(survivors, key=lambda r: (r.mutant.file, r.mutant.line)):
            lines.append(
                f"- {r.mutant.name} {r.mutant.file}:{r.mutant.line} ({r.mutant.kind}, ran in "
                f"{', '.join(r.variants)}): {r.mutant.change}"
            )
    busy = sum(r.seconds for r in results)
    lines += [
        "",
        f"mutation score: {k}/{c} = {100 * s:.1f}%" if s is not None else "mutation score: -",
        f"wall time: {wall_s:.0f} s this run; {busy:.0f} s building and testing these mutants in "
        f"{', '.join(variant_names)} (cached results included)",
    ]
    return "\n".join(lines)
