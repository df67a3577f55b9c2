import glob
import os
import subprocess
import sys

from conan import ConanFile
from conan.errors import ConanException
from conan.tools.cmake import CMake, CMakeToolchain, cmake_layout
from conan.tools.files import check_sha256, copy, rm, rmdir, unzip

required_conan_version = ">=2.5"


class GgmlConan(ConanFile):
    name = "ggml"
    description = "GGML tensor library, built from the libggml-python source distribution"
    license = "MIT"
    homepage = "https://github.com/ggml-org/ggml"
    topics = ("ggml", "vulkan", "tensor")
    package_type = "shared-library"
    settings = "os", "arch", "compiler", "build_type"
    options = {"vulkan": [True, False]}
    default_options = {"vulkan": False}

    def layout(self):
        cmake_layout(self, src_folder="src")

    def validate(self):
        if self.settings.os != "Linux":
            raise ConanException("this recipe builds GGML for Linux only")

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
            "GGML_SANITIZE_ADDRESS": "Address" in sanitizer,
            "GGML_SANITIZE_UNDEFINED": "UndefinedBehavior" in sanitizer,
            "CMAKE_EXPORT_COMPILE_COMMANDS": True,
        })
        inc = self.conf.get("user.sam3d:vulkan_include_dir")
        if self.options.vulkan and inc:
            tc.cache_variables["Vulkan_INCLUDE_DIR"] = inc
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
        ggml = self.cpp_info.components["ggml"]
        ggml.set_property("cmake_target_name", "ggml::ggml")
        ggml.libs = ["ggml"]
        ggml.requires = ["ggml-base", *backends]
