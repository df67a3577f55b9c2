import os
import re

import yaml
from conan.tools.cmake import CMake, CMakeDeps, CMakeToolchain, cmake_layout
from conan.tools.files import copy

from conan import ConanFile

required_conan_version = ">=2.5"


class Sam3dCoreConan(ConanFile):
    """The SAM3D batched-transfer core: a C API over GGML's backend API (native/)."""

    name = "sam3d-core"
    description = "Batched GGML tensor transfers through one bounded, reusable pinned host buffer"
    license = "MIT"
    package_type = "static-library"
    settings = "os", "arch", "compiler", "build_type"
    options = {"vulkan": [True, False], "cuda": [True, False], "fPIC": [True, False]}
    default_options = {"vulkan": False, "cuda": False, "fPIC": True}
    exports_sources = "native/*", "cmake/*", "LICENSE"
    # The one GGML version: the only entry of the GGML recipe's config.yml in the project's
    # local-recipes-index (conan/recipes/; sam3d/tools/conan.py reads the same), exported with this
    # recipe so `conan create` finds it too.
    exports = "conan/recipes/ggml/config.yml"

    def set_version(self):
        # The one version: SAM3D_CORE_VERSION of the public header (docs/contract.md, "API versions").
        header = os.path.join(self.recipe_folder, "native", "include", "sam3d", "transfer.h")
        with open(header) as f:
            (self.version,) = re.findall(r'^#define SAM3D_CORE_VERSION "([0-9.]+)"$', f.read(), re.M)

    def layout(self):
        cmake_layout(self, src_folder="native")

    def requirements(self):
        # The variant's profile sets ggml/*:vulkan and ggml/*:cuda to this package's options.
        with open(os.path.join(self.recipe_folder, "conan", "recipes", "ggml", "config.yml")) as f:
            (ggml_version,) = yaml.safe_load(f)["versions"]
        self.requires(f"ggml/{ggml_version}", transitive_headers=True)

    def generate(self):
        tc = CMakeToolchain(self)
        tc.cache_variables["SAM3D_VULKAN"] = bool(self.options.vulkan)
        tc.cache_variables["SAM3D_CUDA"] = bool(self.options.cuda)
        tc.cache_variables["CMAKE_EXPORT_COMPILE_COMMANDS"] = True
        tc.cache_variables["BUILD_TESTING"] = not self.conf.get("tools.build:skip_test", check_type=bool)
        tc.generate()
        CMakeDeps(self).generate()

    def build(self):
        cmake = CMake(self)
        cmake.configure()
        cmake.build()

    def package(self):
        copy(self, "LICENSE", self.source_folder + "/..", os.path.join(self.package_folder, "licenses"))
        CMake(self).install()

    def package_info(self):
        self.cpp_info.set_property("cmake_file_name", "sam3d-core")
        self.cpp_info.set_property("cmake_target_name", "sam3d::core")
        self.cpp_info.libs = ["sam3d_core"]
        self.cpp_info.requires = (
            ["ggml::ggml-base", "ggml::ggml-cpu"]
            + (["ggml::ggml-vulkan"] if self.options.vulkan else [])
            + (["ggml::ggml-cuda"] if self.options.cuda else [])
        )
        if self.settings.os in ("Linux", "FreeBSD"):
            self.cpp_info.system_libs = ["pthread"]  # the staged copies' worker threads
        self.cpp_info.defines = (["SAM3D_VULKAN=1"] if self.options.vulkan else []) + (
            ["SAM3D_CUDA=1"] if self.options.cuda else []
        )
