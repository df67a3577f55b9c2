"""Layer 2: driving the tools. System packages (apt), Conan (home, profiles, builds), CTest,
the build step every command shares, and provenance (git, glslc, the flags a build really
used). Uses sam3d.core only."""
