import os
import time

from conan.tools.files import save

from conan import ConanFile


class TinylibConan(ConanFile):
    """A stand-in for GGML in the Conan tests: a source step writing into its source folder and a
    build of about a second, so concurrent runs overlap; it prints "tinylib: compiling"."""

    name = "tinylib"
    version = "0.1"
    settings = "os", "arch", "compiler", "build_type"
    options = {"vulkan": [True, False]}
    default_options = {"vulkan": False}

    def source(self):
        save(self, os.path.join(self.source_folder, "tiny.c"), "int tiny(void) { return 42; }\n")

    def build(self):
        self.output.info("tinylib: compiling")
        time.sleep(1)
        with open(os.path.join(self.source_folder, "tiny.c")) as f:
            save(self, os.path.join(self.build_folder, "libtiny.txt"), f.read())

    def package(self):
        save(
            self,
            os.path.join(self.package_folder, "lib", "libtiny.txt"),
            open(os.path.join(self.build_folder, "libtiny.txt")).read(),
        )
