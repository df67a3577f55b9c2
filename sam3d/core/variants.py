"""The variant registry: every fact that depends on a build variant or a sanitizer.

Each variant is one Conan profile (``sam3d-<name>``), one build folder (``build/<name>/``)
and one set of GGML binaries with its own package_id, because the sanitizer is the Conan
setting ``compiler.sanitizer`` and the Vulkan and CUDA backends are the ``vulkan`` and
``cuda`` options of both the ``ggml`` and ``sam3d-core`` recipes.

What reads it:
- SANITIZERS (one entry per sanitizer) and SANITIZER_SETTINGS (each ``compiler.sanitizer``
  value and the sanitizers it turns on): the -fsanitize= flags of the profiles, the GGML
  switches (conan/recipes/ggml/all/conanfile.py makes the same choice; a test compares them), the
  runtime options every test run and the GPU bundle use (device/host.py sanitizer_env), the
  canaries native/tests/CMakeLists.txt adds (a test compares them), the suppression files and
  what their entries may name (a test checks every entry).
- VARIANTS: each entry declares its roles (ROLES): the default set, the CI matrix, the GPU
  bundle, the device session, the fuzz target. Nothing infers a role from a variant's flags.

Derived files are written by `python -m sam3d generate` (sam3d/cli/generate.py):
conan/settings_user.yml and the generated parts of README.md and docs/; `generate --check`
and tests/test_generated.py fail when one drifts from this module. So adding a variant is one
entry in VARIANTS, then `python -m sam3d generate`; adding a sanitizer is one entry in
SANITIZERS (and SANITIZER_SETTINGS), its canary source in native/tests/canaries/ and its
suppression file in native/sanitizers/, then `python -m sam3d generate`.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import Sam3dError


@dataclass(frozen=True)
class Sanitizer:
    """One sanitizer as every part of the project uses it.

    key: its name here (SANITIZER_SETTINGS lists keys).
    title: its name in tables ("ASan + LSan").
    conan: its part of a ``compiler.sanitizer`` value (a value is its sanitizers' parts in
        SANITIZERS order: "Address" + "UndefinedBehavior").
    fsanitize: its -fsanitize= name (GCC and Clang alike).
    ggml_switch: GGML's CMake switch that instruments GGML with it; with CUDA the switch stays
        off and the profile's flags carry the sanitizer (nvcc refuses GGML's -fsanitize=).
    runtime: (environment variable, options) pairs every run of an instrumented binary gets;
        ``{suppressions}`` is the path of its suppression file. Any report is fatal.
    cuda_runtime: options added to those variables in a variant with GGML's CUDA backend.
    vulkan_preload: a library every run of a variant with this sanitizer and GGML's Vulkan backend
        preloads (LD_PRELOAD; `sam3d ctest`, the test presets and the GPU bundle's run.pyz alike):
        the CMake target of that name (native/sanitizers/, built in every such variant), packed in
        the bundle's lib/ of the variant.
    canary: (name, report pattern): native/tests/canaries/<name>.cpp, a CTest pair that passes
        only when the sanitizer stops it with that report; the pattern ends in the canary's own
        function, so it matches only a symbolized report.
    symbolizer_env: the variable naming the runtime's external symbolizer (compiler-rt's
        ``<TOOL>_SYMBOLIZER_PATH``); Clang variants' runs set it (tools/ctest.py test_env).
    suppressions: its suppression file in native/sanitizers/.
    may_suppress: what an entry of that file may name (a regular expression over the entry's
        frame or library), and in words; each entry follows a comment giving its upstream cause.
    """

    key: str
    title: str
    conan: str
    fsanitize: str
    ggml_switch: str
    runtime: tuple[tuple[str, str], ...]
    canary: tuple[str, str]
    symbolizer_env: str
    suppressions: str
    may_suppress: tuple[str, str]
    cuda_runtime: tuple[tuple[str, str], ...] = ()
    vulkan_preload: str = ""


SANITIZERS: tuple[Sanitizer, ...] = (
    Sanitizer(
        key="address",
        title="ASan + LSan",
        conan="Address",
        fsanitize="address",
        ggml_switch="GGML_SANITIZE_ADDRESS",
        runtime=(
            (
                "ASAN_OPTIONS",
                "halt_on_error=1:abort_on_error=0:detect_leaks=1:strict_string_checks=1:"
                "detect_stack_use_after_return=1:check_initialization_order=1",
            ),
            ("LSAN_OPTIONS", "suppressions={suppressions}:print_suppressions=0"),
        ),
        # The CUDA driver maps memory in ASan's shadow gap, which ASan's protected gap refuses
        # (google/sanitizers#629): cuInit fails without this.
        cuda_runtime=(("ASAN_OPTIONS", "protect_shadow_gap=0"),),
        # The Vulkan loader unloads NVIDIA's driver modules before LeakSanitizer's check at exit,
        # leaving the driver's allocations in frames of no module, which no suppression can name
        # (docs/gpu.md, "vulkan-asan on NVIDIA"): a dlclose that keeps them mapped.
        vulkan_preload="sam3d_keep_loaded",
        canary=("leak", "LeakSanitizer: detected memory leaks.* in leak_on_purpose"),
        symbolizer_env="ASAN_SYMBOLIZER_PATH",
        suppressions="lsan.supp",
        may_suppress=(
            r"libcuda\b|libcudart|libcublas|libnvidia-|libvulkan_lvp|libVkLayer_khronos_validation|"
            r"^ggml_backend_vk_reg_get_device$",
            "frames in libcuda, libcudart, libcublas or libnvidia-* (NVIDIA's driver and runtime), in "
            "libvulkan_lvp (Mesa's lavapipe), in libVkLayer_khronos_validation (the Khronos validation "
            "layer, validation runs only), or GGML's Vulkan device registry "
            "(ggml_backend_vk_reg_get_device), whose devices outlive the static vector holding them",
        ),
    ),
    Sanitizer(
        key="undefined",
        title="UBSan",
        conan="UndefinedBehavior",
        fsanitize="undefined",
        ggml_switch="GGML_SANITIZE_UNDEFINED",
        # Compiled recoverable (so suppressions work), made fatal here.
        runtime=(("UBSAN_OPTIONS", "halt_on_error=1:print_stacktrace=1:suppressions={suppressions}"),),
        canary=("ub", "runtime error: signed integer overflow.* in overflow_on_purpose"),
        symbolizer_env="UBSAN_SYMBOLIZER_PATH",
        suppressions="ubsan.supp",
        may_suppress=(r"ggml", "GGML's frames or libraries"),
    ),
    Sanitizer(
        key="thread",
        title="TSan",
        conan="Thread",
        fsanitize="thread",
        ggml_switch="GGML_SANITIZE_THREAD",
        # Exits on the first report; shows where both mutexes of a lock-order inversion were taken.
        runtime=(("TSAN_OPTIONS", "halt_on_error=1:second_deadlock_stack=1:suppressions={suppressions}"),),
        canary=("race", "WARNING: ThreadSanitizer: data race.* in store_racing"),
        symbolizer_env="TSAN_SYMBOLIZER_PATH",
        suppressions="tsan.supp",
        may_suppress=(r"ggml", "GGML's frames"),
    ),
)

# compiler.sanitizer values (conan/settings_user.yml is generated from this) -> the sanitizers
# each turns on.
SANITIZER_SETTINGS: dict[str, tuple[str, ...]] = {
    "Address": ("address",),
    "UndefinedBehavior": ("undefined",),
    "AddressUndefinedBehavior": ("address", "undefined"),
    "Thread": ("thread",),
}

# The folder of the suppression files (Sanitizer.suppressions).
SUPPRESSIONS_DIR = "native/sanitizers"


def sanitizer(key: str) -> Sanitizer:
    (s,) = (s for s in SANITIZERS if s.key == key)
    return s


def sanitizers_of(setting: str | None) -> tuple[Sanitizer, ...]:
    """The sanitizers a ``compiler.sanitizer`` value turns on (none for None)."""
    return tuple(sanitizer(k) for k in SANITIZER_SETTINGS[setting]) if setting else ()


def sanitizer_runtime() -> dict[str, dict[str, list[list[str]]]]:
    """The runtime options of every ``compiler.sanitizer`` value, as device/host.py reads them
    (the GPU bundle carries this as JSON): {value: {"env": [[variable, options]], "cuda":
    [[variable, options added with CUDA]]}}, ``{dir}`` standing for the suppressions folder."""
    return {
        setting: {
            "env": [
                [var, opts.replace("{suppressions}", "{dir}/" + s.suppressions)]
                for s in sanitizers_of(setting)
                for var, opts in s.runtime
            ],
            "cuda": [[var, opts] for s in sanitizers_of(setting) for var, opts in s.cuda_runtime],
        }
        for setting in SANITIZER_SETTINGS
    }


# The roles a variant declares (Variant.roles), and what each puts it into.
DEFAULT = "default"
CI = "ci"
BUNDLE = "bundle"
DEVICE = "device"
FUZZ = "fuzz"
ROLES: dict[str, str] = {
    DEFAULT: "the default set: commands and nox sessions that name no variant, .ci/run",
    CI: "the CI matrix (.github/workflows/variants.yml): a job per container",
    BUNDLE: "the GPU bundle (nox -s bundle) and the CI's GPU job",
    DEVICE: "the device session (nox -s device: ctest -L device)",
    FUZZ: "the libFuzzer target's variant (nox -s fuzz, the CI's fuzz job)",
}


@dataclass(frozen=True)
class Variant:
    """One build variant.

    name: the profile, preset and build-folder name.
    summary: one line on what it is for.
    build_type: Conan's ``build_type`` setting (CMake's CMAKE_BUILD_TYPE).
    opt_flags: exactly the optimisation/debug flags every C and C++ file of GGML and the
        core compiles with (they replace CMake's per-build-type defaults).
    roles: the roles it declares (ROLES); every entry names its own.
    sanitizer: Conan's ``compiler.sanitizer`` setting (a key of SANITIZER_SETTINGS), or None.
    vulkan: whether GGML's Vulkan backend is built (the CPU backend always is).
    compiler: Conan's ``compiler`` setting: "gcc" or "clang" (the distribution's default
        version of each, as the Debian packages g++ and clang install it); for CUDA variants
        also nvcc's host compiler.
    cuda: whether GGML's CUDA backend is built (with the toolkit of ci/cuda-toolkit.lock).
    cuda_architectures: CMAKE_CUDA_ARCHITECTURES of GGML's CUDA backend (the ggml recipe's
        ``cuda_architectures`` option): "90-real" is SASS for H100/H200 only, which loads on
        any driver that supports the toolkit's CUDA 13.0 (PTX from a newer nvcc would not);
        other GPUs need their own, e.g. "80-real;90-real".
    built: False for a variant declared but not yet built and tested: it takes no role that
        puts it into a default command, .ci/run or CI, and is built by name only.
    """

    name: str
    summary: str
    build_type: str
    opt_flags: tuple[str, ...]
    roles: tuple[str, ...]
    sanitizer: str | None = None
    vulkan: bool = False
    compiler: str = "gcc"
    cuda: bool = False
    cuda_architectures: str = "90-real"
    built: bool = True

    @property
    def backends(self) -> tuple[str, ...]:
        """GGML backends the variant runs on, as results name them (the driver's --backend
        value is the lower-case name)."""
        return ("CPU",) + (("Vulkan",) if self.vulkan else ()) + (("CUDA",) if self.cuda else ())

    @property
    def gpu(self) -> bool:
        """Whether the variant has a GPU backend (what the device tests and the bundle need)."""
        return self.vulkan or self.cuda

    @property
    def sanitizers(self) -> tuple[Sanitizer, ...]:
        return sanitizers_of(self.sanitizer)

    @property
    def sanitize_flags(self) -> tuple[str, ...]:
        """-fsanitize flags for compile and link; UBSan stays recoverable (made fatal at run time)."""
        if not self.sanitizers:
            return ()
        return ("-fsanitize=" + ",".join(s.fsanitize for s in self.sanitizers),)

    @property
    def config_flags(self) -> tuple[str, ...]:
        """CMAKE_<LANG>_FLAGS_<BUILD_TYPE>: opt_flags, plus -DNDEBUG for non-Debug builds as CMake does."""
        return self.opt_flags + (() if self.build_type == "Debug" else ("-DNDEBUG",))

    @property
    def compile_flags(self) -> tuple[str, ...]:
        """Every flag the variant adds to each C/C++ compile line."""
        return self.config_flags + self.sanitize_flags

    @property
    def cuda_flags(self) -> tuple[str, ...]:
        """CMAKE_CUDA_FLAGS_<BUILD_TYPE> for GGML's .cu files: the variant's config flags as nvcc
        takes them (-O<n>, -g and -D are nvcc's own; any other goes to the host compiler through
        -Xcompiler), and the sanitizers on the host code only (device code is not instrumented).
        nvcc's -O and -g are host-side: device code is optimised by ptxas as always and carries
        no device debug info (-G is never given)."""
        own = tuple(f for f in self.config_flags if f.startswith(("-O", "-D")) or f == "-g")
        # -Xcompiler splits its value at commas: one -fsanitize= per sanitizer.
        san = tuple(f"-fsanitize={s.fsanitize}" for s in self.sanitizers)
        host = tuple(f for f in self.config_flags if f not in own) + san
        return own + tuple(f"-Xcompiler={f}" for f in host)

    @property
    def ggml_switches(self) -> dict[str, bool]:
        """GGML's sanitizer switches as the ggml recipe sets them: on for the variant's
        sanitizers, all off with CUDA (the profile's flags carry them: GGML's switches add
        -fsanitize= to every language of its folders, and nvcc refuses it)."""
        return {s.ggml_switch: s in self.sanitizers and not self.cuda for s in SANITIZERS}

    @property
    def preloads(self) -> tuple[str, ...]:
        """The CMake targets (native/sanitizers/) its runs on GPU machines preload: each of its
        sanitizers' vulkan_preload, with Vulkan."""
        return tuple(s.vulkan_preload for s in self.sanitizers if s.vulkan_preload) if self.vulkan else ()

    @property
    def canaries(self) -> tuple[tuple[str, str], ...]:
        """The sanitizer canaries of its normal suite: (name, report pattern)."""
        return tuple(s.canary for s in self.sanitizers)

    @property
    def asan(self) -> bool:
        return sanitizer("address") in self.sanitizers

    @property
    def ubsan(self) -> bool:
        return sanitizer("undefined") in self.sanitizers

    @property
    def tsan(self) -> bool:
        return sanitizer("thread") in self.sanitizers

    @property
    def default_local(self) -> bool:
        """In the default set (the DEFAULT role)."""
        return DEFAULT in self.roles

    @property
    def fuzz(self) -> bool:
        """The variant the fuzz target is run in (the FUZZ role)."""
        return FUZZ in self.roles

    @property
    def profile_name(self) -> str:
        return f"sam3d-{self.name}"


VARIANTS: tuple[Variant, ...] = (
    Variant(
        name="cpu-asan",
        summary="CPU backend, ASan+UBSan+LSan (GGML instrumented too), -O1 -g, frame pointers, Clang; "
        "with the libFuzzer target",
        build_type="Debug",
        opt_flags=("-O1", "-g", "-fno-omit-frame-pointer"),
        roles=(DEFAULT, CI, FUZZ),
        sanitizer="AddressUndefinedBehavior",
        # libFuzzer comes with Clang (Debian's libclang-rt-<major>-dev): native/CMakeLists.txt
        # builds the fuzz target where the compiler is Clang with ASan.
        compiler="clang",
    ),
    Variant(
        name="cpu-tsan",
        summary="CPU backend, TSan (GGML instrumented too, without OpenMP), -O1 -g",
        build_type="Debug",
        opt_flags=("-O1", "-g"),
        roles=(DEFAULT, CI),
        sanitizer="Thread",
        # GCC 12: its TSan runtime (libtsan2) comes with g++ itself.
    ),
    Variant(
        name="vulkan-ubsan",
        summary="Vulkan (+CPU) backends, UBSan (GGML instrumented too), -O2 -g, Clang",
        build_type="RelWithDebInfo",
        opt_flags=("-O2", "-g"),
        roles=(DEFAULT, CI, BUNDLE, DEVICE),
        sanitizer="UndefinedBehavior",
        vulkan=True,
        # GCC 12 with -fsanitize=undefined -O2 -g had not finished ggml-vulkan.cpp after 62 CPU
        # minutes on this project's 2-core machines; Clang 14 compiles it in under 3 minutes.
        compiler="clang",
    ),
    Variant(
        name="release",
        summary="CPU and Vulkan backends, no instrumentation, -O2",
        build_type="Release",
        opt_flags=("-O2",),
        roles=(DEFAULT, CI, BUNDLE, DEVICE),
        vulkan=True,
    ),
    Variant(
        name="cuda-release",
        summary="CPU and CUDA backends, no instrumentation, -O2; SASS for the CUDA architectures (90-real)",
        build_type="Release",
        opt_flags=("-O2",),
        roles=(DEFAULT, CI, BUNDLE, DEVICE),
        cuda=True,
    ),
    Variant(
        name="cuda-asan",
        summary="CPU and CUDA backends, ASan+UBSan+LSan on the host code (GGML's too; device code not "
        "instrumented), -O1 -g, frame pointers",
        build_type="Debug",
        opt_flags=("-O1", "-g", "-fno-omit-frame-pointer"),
        # Not in the default set: its GGML compiles as long as cuda-release's, and with it the
        # default set's first build on 2 cores would pass .ci/run's 80 minutes
        # (docs/getting-started.md, "Build times"). Built by name, and always in the CI matrix.
        roles=(CI, BUNDLE, DEVICE),
        sanitizer="AddressUndefinedBehavior",
        cuda=True,
    ),
    Variant(
        name="vulkan-asan",
        summary="Vulkan (+CPU) backends, ASan+UBSan+LSan (GGML's Vulkan host code too), -O1 -g, frame pointers, Clang",
        build_type="Debug",
        opt_flags=("-O1", "-g", "-fno-omit-frame-pointer"),
        # Not in the default set: its first build took 889 s on 2 cores (GGML's ggml-vulkan.cpp
        # under ASan alone about 9 minutes), which with the default set's would pass .ci/run's 80
        # minutes (docs/getting-started.md, "Build times"). Built by name, and always in the CI
        # matrix. Clang, as vulkan-ubsan (ggml-vulkan.cpp under GCC's sanitizers is slow); with
        # Clang and ASan, native/CMakeLists.txt builds the fuzz target here too, while cpu-asan
        # keeps the fuzz role. Its runs preload the address sanitizer's vulkan_preload, without
        # which LeakSanitizer cannot name NVIDIA's driver modules (docs/gpu.md, "vulkan-asan on NVIDIA").
        roles=(CI, BUNDLE, DEVICE),
        sanitizer="AddressUndefinedBehavior",
        vulkan=True,
        compiler="clang",
    ),
)

NAMES: tuple[str, ...] = tuple(v.name for v in VARIANTS)


class UnknownVariant(Sam3dError, ValueError):
    pass


def get(name: str) -> Variant:
    """The variant called ``name``; UnknownVariant lists the valid names otherwise."""
    for v in VARIANTS:
        if v.name == name:
            return v
    raise UnknownVariant(f"unknown variant {name!r}; valid variants: {', '.join(v.name for v in VARIANTS)}")


def with_role(role: str) -> list[Variant]:
    """The variants that declare ``role``, in list order."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}")
    return [v for v in VARIANTS if role in v.roles]


def select(names: list[str] | tuple[str, ...] | None) -> list[Variant]:
    """The variants named (the default set when none are named), in list order; fails on the
    first unknown name."""
    if not names:
        return with_role(DEFAULT)
    chosen = [get(n) for n in names]
    return [v for v in VARIANTS if v in chosen]


def sanitizer_variants() -> list[Variant]:
    """Every variant with a sanitizer (what `ctest --sanitizers-only` may pick from)."""
    return [v for v in VARIANTS if v.sanitizer is not None]


def gpu_variants() -> list[Variant]:
    """The variants with a GPU backend (Vulkan or CUDA): those a bundle can carry."""
    return [v for v in VARIANTS if v.gpu]


def problems(vs: tuple[Variant, ...] | list[Variant] | None = None) -> list[str]:
    """What is wrong with the registry (empty when nothing): names, settings and roles."""
    vs = VARIANTS if vs is None else tuple(vs)
    out = []
    for s in SANITIZERS:
        if [x.key for x in SANITIZERS].count(s.key) != 1:
            out.append(f"sanitizer {s.key}: declared twice")
    for setting, keys in SANITIZER_SETTINGS.items():
        if setting != "".join(sanitizer(k).conan for k in sorted(keys, key=[s.key for s in SANITIZERS].index)):
            out.append(f"compiler.sanitizer {setting}: not its sanitizers' parts in order ({', '.join(keys)})")
    names = [v.name for v in vs]
    for v in vs:
        if names.count(v.name) != 1:
            out.append(f"{v.name}: declared twice")
        if v.sanitizer is not None and v.sanitizer not in SANITIZER_SETTINGS:
            out.append(f"{v.name}: compiler.sanitizer {v.sanitizer!r} is not in SANITIZER_SETTINGS")
        if v.compiler not in ("gcc", "clang"):
            out.append(f"{v.name}: compiler {v.compiler!r}: gcc or clang")
        unknown = set(v.roles) - set(ROLES)
        if unknown:
            out.append(f"{v.name}: unknown roles {sorted(unknown)}")
        if {BUNDLE, DEVICE} & set(v.roles) and not v.gpu:
            out.append(f"{v.name}: the bundle and device roles need a GPU backend")
        if FUZZ in v.roles and not (v.compiler == "clang" and v.asan):
            out.append(f"{v.name}: the fuzz role needs Clang with ASan (native/CMakeLists.txt builds the target there)")
        if not v.built and {DEFAULT, CI, BUNDLE, DEVICE, FUZZ} & set(v.roles):
            out.append(f"{v.name}: not yet built, so no role")
    fuzz = [v.name for v in vs if FUZZ in v.roles]
    if len(fuzz) != 1:
        out.append(f"{len(fuzz)} variants declare the fuzz role ({', '.join(fuzz) or 'none'}): want 1")
    return out


def records(vs: list[Variant] | tuple[Variant, ...] | None = None) -> list[dict]:
    """The variants as JSON records (`python -m sam3d variants --json` prints them; the CI
    matrix is built from them): name, summary, build_type, compiler, sanitizer, vulkan, cuda,
    cuda_architectures (None without CUDA), backends, compile_flags, roles, default_local,
    built. All variants when ``vs`` is None."""
    return [
        {
            "name": v.name,
            "summary": v.summary,
            "build_type": v.build_type,
            "compiler": v.compiler,
            "sanitizer": v.sanitizer,
            "vulkan": v.vulkan,
            "cuda": v.cuda,
            "cuda_architectures": v.cuda_architectures if v.cuda else None,
            "backends": list(v.backends),
            "compile_flags": list(v.compile_flags),
            "roles": list(v.roles),
            "default_local": v.default_local,
            "built": v.built,
        }
        for v in (VARIANTS if vs is None else vs)
    ]
