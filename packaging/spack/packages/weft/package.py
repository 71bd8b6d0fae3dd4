# Spack recipe for Weft, kept in Weft's repository (packaging/spack). A site adds the
# repository with `spack repo add <weft>/packaging/spack`; packaging/README.md has the
# whole procedure, including building from a local clone with `spack develop`.

import spack
from spack.package import *

# Spack 0.23 (release) and later give a package its C compiler only through a
# dependency on the "c" virtual; older versions (0.22, the 0.23 development line
# before it) give every package a compiler and know no "c" provider.
_VERSION = spack.spack_version_info
_LANGUAGE_VIRTUALS = _VERSION[:2] >= (1, 0) or (_VERSION[:3] >= (0, 23, 0) and len(_VERSION) == 3)


class Weft(Package):
    """Weft, a parallel file system for HPC clusters: files striped over io servers,
    noncontiguous access by views, collective I/O in the file system. Installs the weft
    tool, the weftd server, libweft.so with weft.h, weft.pc and WeftConfig.cmake, and
    libweft_mpiio.so (MPI-IO on weft: files) for the chosen MPI."""

    # Weft has no public download location yet. A site builds from its own clone
    # (spack develop, see packaging/README.md) or from a release tarball placed in a
    # Spack mirror as weft/weft-<version>.tar.gz, added here with its sha256:
    #   version("0.1.0", sha256="...")
    url = "https://weft.invalid/releases/weft-0.1.0.tar.gz"
    license("Apache-2.0")

    # The development line, for `spack develop weft@=main` on a local clone.
    version("main")

    # Any MPI: the C half of libweft_mpiio.so is compiled with the MPI's own mpicc
    # against its mpi.h (Rust sees MPI objects only as opaque integers), so Open MPI,
    # MPICH, Cray MPICH, MVAPICH and Intel MPI all work through the `mpi` virtual.
    variant(
        "mpi",
        default=True,
        description="Build libweft_mpiio.so (MPI-IO on weft: files) against the spec's MPI",
    )
    variant(
        "fuse",
        default=True,
        description="Depend on libfuse 3's fusermount3, which users other than root need "
        "for weft mount (the FUSE adapter itself is pure Rust and always built)",
    )

    # rust-version of the workspace's Cargo.toml.
    depends_on("rust@1.90:", type="build")
    if _LANGUAGE_VIRTUALS:
        # The cc crate (MPI-IO's C half) and rustc's linker.
        depends_on("c", type="build")
    depends_on("mpi", when="+mpi")
    # fusermount3 must be setuid root to serve other users: sites usually declare the
    # system's libfuse as an external rather than build it.
    depends_on("libfuse@3:+utils", type="run", when="+fuse")

    def crates(self):
        """The workspace crates this spec builds (weft-mpiio links MPI; the others do not)."""
        crates = ["weft-cli", "weft-server", "weft-capi"]
        if self.spec.satisfies("+mpi"):
            crates.append("weft-mpiio")
        return crates

    def setup_build_environment(self, env):
        env.set("CARGO_TARGET_DIR", join_path(self.stage.source_path, "target"))
        if self.spec.satisfies("+mpi"):
            # weft-mpiio's build.rs compiles its C half with the MPI's compiler wrapper.
            env.set("MPICC", self.spec["mpi"].mpicc)

    def install(self, spec, prefix):
        source = self.stage.source_path
        arguments = ["build", "--release", "--locked"]
        for crate in self.crates():
            arguments += ["-p", crate]
        with working_dir(source):
            cargo(*arguments)
            # The layout every way of installing Weft shares (make install, make deb).
            installer = Executable(join_path(source, "packaging", "install.sh"))
            options = ["--prefix", prefix, "--target-dir", join_path(source, "target", "release")]
            if spec.satisfies("~mpi"):
                # A development tree may hold a libweft_mpiio.so of an earlier spec.
                options.append("--no-mpiio")
            installer(*options)

    def setup_run_environment(self, env):
        if self.spec.satisfies("+mpi"):
            # Built against this spec's MPI whatever its name: `weft mpi-env` prints this
            # library instead of guessing one from the mpiexec on PATH.
            env.set("WEFT_MPIIO_LIB", join_path(self.prefix.lib, "libweft_mpiio.so"))

    def test_version(self):
        """weft and weftd print their version and git revision"""
        for program in ("weft", "weftd"):
            out = Executable(join_path(self.prefix.bin, program))("--version", output=str.split)
            assert out.startswith(program + " ") and "(git " in out, out

    def test_pkg_config(self):
        """weft.pc names the installed library"""
        pkg_config = which("pkg-config", required=True)
        env["PKG_CONFIG_PATH"] = self.prefix.lib.pkgconfig
        libs = pkg_config("--libs", "weft", output=str.split)
        assert "-L" + self.prefix.lib in libs and "-lweft" in libs, libs
