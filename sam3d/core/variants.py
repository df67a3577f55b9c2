"""The build variants: the one list that nox sessions, Conan profiles, CI and the table read.

Each variant is one Conan profile (``sam3d-<name>``), one build folder
(``build/<name>/``) and one set of GGML binaries with its own package_id, because the
sanitizer is the Conan setting ``compiler.sanitizer`` (see conan/settings_user.yml) and the
Vulkan and CUDA backends are the ``vulkan`` and ``cuda`` options of both the ``ggml`` and
``sam3d-core`` recipes.

The variant set: CPU ASan+UBSan+LSan, CPU TSan, Vulkan UBSan, a clean -O2 release, and the CUDA
pair (-O2 release; ASan+UBSan+LSan on the host code). Adding one here adds its Conan profile,
build folder, CI jobs (sam3d/ci.py), GPU bundle entry and table rows.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import Sam3dError

# compiler.sanitizer value (conan/settings_user.yml) -> the -fsanitize= list (GCC and Clang alike).
SANITIZER_FLAGS: dict[str, str] = {
    "Address": "address",
    "UndefinedBehavior": "undefined",
    "AddressUndefinedBehavior": "address,undefined",
    "Thread": "thread",
}


@dataclass(frozen=True)
class Variant:
    """One build variant.

    name: the profile, preset and build-folder name.
    build_type: Conan's ``build_type`` setting (CMake's CMAKE_BUILD_TYPE).
    opt_flags: exactly the optimisation/debug flags every C and C++ file of GGML and the
        core compiles with (they replace CMake's per-build-type defaults).
    sanitizer: Conan's ``compiler.sanitizer`` setting, or None.
    vulkan: whether GGML's Vulkan backend is built (the CPU backend always is).
    compiler: Conan's ``compiler`` setting: "gcc" or "clang" (the distribution's default
        version of each, as the Debian packages g++ and clang install it); for CUDA variants
        also nvcc's host compiler.
    cuda: whether GGML's CUDA backend is built (with the toolkit of ci/cuda-toolkit.lock).
    cuda_architectures: CMAKE_CUDA_ARCHITECTURES of GGML's CUDA backend (the ggml recipe's
        ``cuda_architectures`` option): "90-real" is SASS for H100/H200 only, which loads on
        any driver that supports the toolkit's CUDA 13.0 (PTX from a newer nvcc would not);
        other GPUs need their own, e.g. "80-real;90-real".
    default_local: whether the variant is in the default local set (commands and nox sessions
        that name no variant, .ci/run); every variant is built by name and in the CI matrix.
    """

    name: str
    summary: str
    build_type: str
    opt_flags: tuple[str, ...]
    sanitizer: str | None = None
    vulkan: bool = False
    compiler: str = "gcc"
    cuda: bool = False
    cuda_architectures: str = "90-real"
    default_local: bool = True

    @property
    def backends(self) -> tuple[str, ...]:
        """GGML backends the variant runs on, as results name them (the driver's --backend
        value is the lower-case name)."""
        return ("CPU",) + (("Vulkan",) if self.vulkan else ()) + (("CUDA",) if self.cuda else ())

    @property
    def gpu(self) -> bool:
        """Whether the variant has a GPU backend (the device tests, the GPU bundle)."""
        return self.vulkan or self.cuda

    @property
    def sanitize_flags(self) -> tuple[str, ...]:
        """-fsanitize flags for compile and link; UBSan stays recoverable (made fatal at run time)."""
        if self.sanitizer is None:
            return ()
        return (f"-fsanitize={SANITIZER_FLAGS[self.sanitizer]}",)

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
        san = tuple(f"-fsanitize={s}" for s in SANITIZER_FLAGS[self.sanitizer].split(",")) if self.sanitizer else ()
        host = tuple(f for f in self.config_flags if f not in own) + san
        return own + tuple(f"-Xcompiler={f}" for f in host)

    @property
    def asan(self) -> bool:
        return self.sanitizer is not None and "Address" in self.sanitizer

    @property
    def ubsan(self) -> bool:
        return self.sanitizer is not None and "UndefinedBehavior" in self.sanitizer

    @property
    def tsan(self) -> bool:
        return self.sanitizer == "Thread"

    @property
    def fuzz(self) -> bool:
        """Whether the libFuzzer target is built (native/CMakeLists.txt: Clang with ASan)."""
        return self.compiler == "clang" and self.asan

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
        sanitizer="AddressUndefinedBehavior",
        # libFuzzer comes with Clang: the fuzz target (native/fuzz) is built in this variant.
        compiler="clang",
    ),
    Variant(
        name="cpu-tsan",
        summary="CPU backend, TSan (GGML instrumented too, without OpenMP), -O1 -g",
        build_type="Debug",
        opt_flags=("-O1", "-g"),
        sanitizer="Thread",
        # GCC 12: its TSan runtime (libtsan2) comes with g++ itself.
    ),
    Variant(
        name="vulkan-ubsan",
        summary="Vulkan (+CPU) backends, UBSan (GGML instrumented too), -O2 -g, Clang",
        build_type="RelWithDebInfo",
        opt_flags=("-O2", "-g"),
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
        vulkan=True,
    ),
    Variant(
        name="cuda-release",
        summary="CPU and CUDA backends, no instrumentation, -O2; SASS for the CUDA architectures (90-real)",
        build_type="Release",
        opt_flags=("-O2",),
        cuda=True,
    ),
    Variant(
        name="cuda-asan",
        summary="CPU and CUDA backends, ASan+UBSan+LSan on the host code (GGML's too; device code not "
                "instrumented), -O1 -g, frame pointers",
        build_type="Debug",
        opt_flags=("-O1", "-g", "-fno-omit-frame-pointer"),
        sanitizer="AddressUndefinedBehavior",
        cuda=True,
        # Its GGML compiles as long as cuda-release's: with it the default set's first build on
        # 2 cores would pass .ci/run's 80 minutes (README, "Build times"). Built by name, and
        # always in the CI matrix.
        default_local=False,
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
    raise UnknownVariant(f"unknown variant {name!r}; valid variants: {', '.join(NAMES)}")


def select(names: list[str] | tuple[str, ...] | None) -> list[Variant]:
    """The variants named (the default local set when none are named: every variant with
    default_local), in list order; fails on the first unknown name."""
    if not names:
        return [v for v in VARIANTS if v.default_local]
    chosen = [get(n) for n in names]
    return [v for v in VARIANTS if v in chosen]


def sanitizer_variants() -> list[Variant]:
    return [v for v in VARIANTS if v.sanitizer is not None]


def gpu_variants() -> list[Variant]:
    """The variants with a GPU backend (Vulkan or CUDA): the device session, the GPU bundle and
    the CI's GPU job take them from here."""
    return [v for v in VARIANTS if v.gpu]


def records(vs: list[Variant] | tuple[Variant, ...] | None = None) -> list[dict]:
    """The variants as JSON records (`python -m sam3d variants --json` prints them; the CI
    matrix is built from them): name, summary, build_type, sanitizer, vulkan, cuda,
    cuda_architectures (None without CUDA), backends, compile_flags, default_local. All
    variants when ``vs`` is None."""
    return [{"name": v.name, "summary": v.summary, "build_type": v.build_type, "sanitizer": v.sanitizer,
             "vulkan": v.vulkan, "cuda": v.cuda, "cuda_architectures": v.cuda_architectures if v.cuda else None,
             "backends": list(v.backends), "compile_flags": list(v.compile_flags),
             "default_local": v.default_local}
            for v in (VARIANTS if vs is None else vs)]
