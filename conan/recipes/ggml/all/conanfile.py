import glob
import os
import subprocess
import sys

from conan import ConanFile
from conan.errors import ConanException, ConanInvalidConfiguration
from conan.tools.cmake import CMake, CMakeToolchain, cmake_layout
from conan.tools.files import check_sha256, copy, rm, rmdir, unzip

required_conan_version = ">=2.5"


class GgmlConan(ConanFile):
    name = "ggml"
    description = "GGML tensor library, built from the libggml-python source distribution"
    license = "MIT"
    homepage = "https://github.com/ggml-org/ggml"
    topics = ("ggml", "vulkan", "cuda", "tensor")
    package_type = "shared-library"
    settings = "os", "arch", "compiler", "build_type"
    # cuda_architectures: CMAKE_CUDA_ARCHITECTURES (e.g. "90-real", or "80-real;90-real").
    options = {"vulkan": [True, False], "cuda": [True, False], "cuda_architectures": ["ANY"]}
    default_options = {"vulkan": False, "cuda": False, "cuda_architectures": "90-real"}

    def configure(self):
        if not self.options.cuda:
            self.options.rm_safe("cuda_architectures")

    def layout(self):
        cmake_layout(self, src_folder="src")

    def _cuda_toolkit(self):
        """The CUDA toolkit root (bin/nvcc, include/, lib/): the conf user.sam3d:cuda_toolkit,
        which sam3d's profiles set to the wheels of ci/cuda-toolkit.lock installed in its cache."""
        root = self.conf.get("user.sam3d:cuda_toolkit")
        if not root:
            raise ConanInvalidConfiguration(
                "ggml/*:cuda=True needs the conf user.sam3d:cuda_toolkit (the CUDA toolkit root): "
                "build through `python -m sam3d build`, which installs ci/cuda-toolkit.lock and sets it")
        return root

    def validate(self):
        if self.settings.os != "Linux":
            raise ConanException("this recipe builds GGML for Linux only")
        if self.options.cuda:
            self._cuda_toolkit()

    def package_id(self):
        # The toolkit's identity (its versions and the lock's hash; not its path, which differs
        # per machine) is part of the CUDA binaries' package_id.
        if self.info.options.get_safe("cuda"):
            self.info.conf.define("user.sam3d:cuda_toolkit_id", self.conf.get("user.sam3d:cuda_toolkit_id"))

    def source(self):
        data = self.conan_data["sources"][self.version]
        spec = f"{data['pypi_name']}=={data['pypi_version']}"
        dl = os.path.join(self.source_folder, "_sdist")
        # pip resolves the name through the machine's configured index; no address is written here.
        # --no-binary names this package only, so the build requirements pip installs for its
        # metadata step stay wheels (":all:" would compile CMake from source).
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", data["pypi_name"],
               "--disable-pip-version-check", "-q", "-d", dl, spec]
        self.output.info(f"fetching {spec} (sdist) with pip")
        result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode != 0:
            raise ConanException(f"pip could not download {spec}:\n{result.stderr.strip()}")
        found = glob.glob(os.path.join(dl, "*.tar.gz"))
        if len(found) != 1:
            raise ConanException(f"expected one sdist of {spec} in {dl}, found {found}")
        # Conan's check_sha256 raises with the expected and the computed hash.
        check_sha256(self, found[0], data["sha256"])
        unzip(self, found[0], destination=self.source_folder, strip_root=True)
        rmdir(self, dl)

    def generate(self):
        sanitizer = str(self.settings.get_safe("compiler.sanitizer") or "")
        tc = CMakeToolchain(self)
        tc.cache_variables.update({
            "BUILD_SHARED_LIBS": True,
            "GGML_NATIVE": False,           # binaries travel to other machines (the GPU host)
            "GGML_BACKEND_DL": False,
            "GGML_CPU": True,
            "GGML_VULKAN": bool(self.options.vulkan),
            "GGML_OPENMP": False,           # GGML's own thread pool: no libgomp to ship
            "GGML_CCACHE": False,
            "GGML_BUILD_TESTS": False,
            "GGML_BUILD_EXAMPLES": False,
            # GGML's own switches add -fsanitize= to every language of its folders, and nvcc
            # refuses it: with CUDA the profile's flags carry the sanitizers instead (C and C++
            # through tools.build:cflags/cxxflags, the host code of the .cu files through
            # -Xcompiler in CMAKE_CUDA_FLAGS_<BUILD_TYPE>, every link through the link flags).
            "GGML_SANITIZE_ADDRESS": "Address" in sanitizer and not self.options.cuda,
            "GGML_SANITIZE_UNDEFINED": "UndefinedBehavior" in sanitizer and not self.options.cuda,
            "GGML_SANITIZE_THREAD": sanitizer == "Thread" and not self.options.cuda,
            "GGML_CUDA": bool(self.options.cuda),
            "CMAKE_EXPORT_COMPILE_COMMANDS": True,
        })
        inc = self.conf.get("user.sam3d:vulkan_include_dir")
        if self.options.vulkan and inc:
            tc.cache_variables["Vulkan_INCLUDE_DIR"] = inc
        if self.options.cuda:
            root = self._cuda_toolkit()
            tc.cache_variables.update({
                "CUDAToolkit_ROOT": root,
                "CMAKE_CUDA_COMPILER": os.path.join(root, "bin", "nvcc"),
                "CMAKE_CUDA_ARCHITECTURES": str(self.options.cuda_architectures),
                "GGML_CUDA_FA": False,      # no flash attention: the replay needs none
                # The toolkit's wheels have no libcuda.so to link against (it comes with the
                # driver): GGML's pool without virtual memory management needs no driver API.
                "GGML_CUDA_NO_VMM": True,
                "GGML_CUDA_NCCL": False,    # one process, at most two GPUs: no NCCL to find or ship
                # One CUDA runtime in the process, the shared one libggml-cuda.so links (CMake's
                # default would also link libcudart_static.a into it).
                "CMAKE_CUDA_RUNTIME_LIBRARY": "Shared",
            })
            cxx = (self.conf.get("tools.build:compiler_executables", check_type=dict) or {}).get("cpp")
            if cxx:
                tc.cache_variables["CMAKE_CUDA_HOST_COMPILER"] = cxx
        tc.generate()

    def build(self):
        cmake = CMake(self)
        cmake.configure(build_script_folder="ggml")
        cmake.build()

    def package(self):
        copy(self, "LICENSE", self.source_folder, os.path.join(self.package_folder, "licenses"))
        CMake(self).install()
        rmdir(self, os.path.join(self.package_folder, "lib", "cmake"))
        rmdir(self, os.path.join(self.package_folder, "lib", "pkgconfig"))
        rm(self, "*.la", os.path.join(self.package_folder, "lib"))
        # The exact compile lines, so the variant's flags can be checked on GGML itself.
        copy(self, "compile_commands.json", self.build_folder, os.path.join(self.package_folder, "res"))

    def package_info(self):
        self.cpp_info.set_property("cmake_file_name", "ggml")
        self.cpp_info.set_property("cmake_target_name", "ggml::all")
        base = self.cpp_info.components["ggml-base"]
        base.set_property("cmake_target_name", "ggml::ggml-base")
        base.libs = ["ggml-base"]
        base.system_libs = ["m", "pthread", "dl"]
        cpu = self.cpp_info.components["ggml-cpu"]
        cpu.set_property("cmake_target_name", "ggml::ggml-cpu")
        cpu.libs = ["ggml-cpu"]
        cpu.requires = ["ggml-base"]
        backends = ["ggml-cpu"]
        if self.options.vulkan:
            vk = self.cpp_info.components["ggml-vulkan"]
            vk.set_property("cmake_target_name", "ggml::ggml-vulkan")
            vk.libs = ["ggml-vulkan"]
            vk.requires = ["ggml-base"]
            vk.system_libs = ["vulkan"]
            backends.append("ggml-vulkan")
        if self.options.cuda:
            cu = self.cpp_info.components["ggml-cuda"]
            cu.set_property("cmake_target_name", "ggml::ggml-cuda")
            # libggml-cuda.so needs the CUDA runtime and cuBLAS: consumers link them from the
            # toolkit of their own conf (so executables get its lib/ in their run path); the GPU
            # machine provides its own (sam3d/running/bundle_run.py finds them).
            cu.libs = ["ggml-cuda", "cudart", "cublas"]
            cu.libdirs = ["lib"]
            root = self.conf.get("user.sam3d:cuda_toolkit")
            if root:
                cu.libdirs.append(os.path.join(root, "lib"))
            cu.requires = ["ggml-base"]
            backends.append("ggml-cuda")
        ggml = self.cpp_info.components["ggml"]
        ggml.set_property("cmake_target_name", "ggml::ggml")
        ggml.libs = ["ggml"]
        ggml.requires = ["ggml-base", *backends]
