//! The Debian packages of this build, installed the way a site installs them and used
//! from the installed files only, never the build tree: `make deb-packages` (run by
//! `make test` after the build) leaves them in target/debian; this test installs them
//! with `dpkg --root` into an empty directory and there runs `weft up` (with the
//! installed weftd), a put and a get, an MPI program doing MPI_File_write_all on a
//! `weft:` file with the installed libweft_mpiio.so preloaded, the C API test program
//! built with `pkg-config --cflags --libs weft` and with CMake's `find_package(Weft)`,
//! and `weft down`.
//!
//! Needs dpkg, mpicc/mpirun (Open MPI), pkg-config and cmake (scripts/install-deps.sh).

mod common;

use common::{output_ok, weft_ok};
use std::path::{Path, PathBuf};
use std::process::Command;
use weft_testkit::{ClusterOptions, TestCluster};

const VERSION: &str = env!("CARGO_PKG_VERSION");
/// Seconds an MPI run or a C test program may take before it counts as hung.
const RUN_TIMEOUT_S: &str = "120";
const PACKAGES: [&str; 5] = [
    "weft",
    "libweft",
    "libweft-dev",
    "weft-mpiio-openmpi",
    "weft-mpiio-mpich",
];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn source(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/packages")
        .join(name)
}

fn run(command: &mut Command, what: &str) -> String {
    output_ok(
        command
            .output()
            .unwrap_or_else(|e| panic!("starting {what}: {e}")),
        what,
    )
}

/// target/debian/<package>_<version>-1_<arch>.deb, made from the binaries this test
/// run is checking (a package older than the build would test stale files).
fn package_file(name: &str) -> PathBuf {
    let dir = weft_testkit::bin_dir().join("../debian");
    let prefix = format!("{name}_{VERSION}-1_");
    let found: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}: run `make deb-packages` (make test does)", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let file = p.file_name().unwrap().to_string_lossy();
            file.starts_with(&prefix) && file.ends_with(".deb")
        })
        .collect();
    assert_eq!(
        found.len(),
        1,
        "one {prefix}*.deb in {}: {found:?}",
        dir.display()
    );
    let built = std::fs::metadata(weft_testkit::bin("weft"))
        .unwrap()
        .modified()
        .unwrap();
    let packaged = std::fs::metadata(&found[0]).unwrap().modified().unwrap();
    assert!(
        packaged >= built,
        "{} is older than the build: run `make deb-packages`",
        found[0].display()
    );
    found[0].clone()
}

fn control_field(deb: &Path, field: &str) -> String {
    run(
        Command::new("dpkg-deb").arg("-f").arg(deb).arg(field),
        "dpkg-deb -f",
    )
    .trim()
    .to_owned()
}

/// The packages installed with dpkg into an empty root of their own. Their
/// dependencies are this machine's (libc, fuse3, Open MPI), so dpkg is told not to look
/// for them in the empty root.
fn install_packages(root: &Path) {
    let admin = root.join("var/lib/dpkg");
    for dir in ["info", "updates", "triggers"] {
        std::fs::create_dir_all(admin.join(dir)).unwrap();
    }
    std::fs::write(admin.join("status"), "").unwrap();
    // weft's postinst makes the service user in ROOT/etc (systemd-sysusers --root): the
    // scripts run without a chroot (the root has no shell), with DPKG_ROOT set.
    std::fs::create_dir_all(root.join("etc")).unwrap();
    run(
        Command::new("dpkg")
            .arg(format!("--root={}", root.display()))
            .args([
                "--force-depends",
                "--force-not-root",
                "--force-script-chrootless",
                "-i",
            ])
            .args(PACKAGES.map(package_file)),
        "dpkg --root -i",
    );
    let listed = run(
        Command::new("dpkg-query")
            .arg(format!("--admindir={}", admin.display()))
            .args(["-W", "-f=${Package} ${Version} ${Status}\n"]),
        "dpkg-query",
    );
    for name in PACKAGES {
        assert!(
            listed.contains(&format!("{name} {VERSION}-1 install ok installed")),
            "{name} not installed:\n{listed}"
        );
    }
}

#[test]
fn packages_declare_what_they_need() {
    let depends = |name: &str| control_field(&package_file(name), "Depends");
    assert!(depends("weft").contains("fuse3"), "weft: {}", depends("weft"));
    // The Open MPI runtime, found by dpkg-shlibdeps from libweft_mpiio.so's libmpi.so.40.
    assert!(
        depends("weft-mpiio-openmpi").contains("libopenmpi3"),
        "weft-mpiio-openmpi: {}",
        depends("weft-mpiio-openmpi")
    );
    // MPICH's runtime (libmpich.so.12), for the MPICH build beside it.
    assert!(
        depends("weft-mpiio-mpich").contains("libmpich12"),
        "weft-mpiio-mpich: {}",
        depends("weft-mpiio-mpich")
    );
    // The header belongs to exactly this library: Cargo.toml of weft-capi names the
    // version by hand, and this fails when it falls behind the workspace's.
    assert_eq!(depends("libweft-dev"), format!("libweft (= {VERSION}-1)"));
    assert_eq!(
        control_field(&package_file("weft-mpiio-openmpi"), "Provides"),
        "weft-mpiio"
    );
}

#[test]
fn installed_packages_run_a_cluster_mpi_io_and_c_programs() {
    let root_dir = tempfile::Builder::new().prefix("weft-root-").tempdir().unwrap();
    let root = root_dir.path();
    install_packages(root);
    let usr = root.join("usr");
    for file in [
        "bin/weft",
        "bin/weftd",
        "lib/libweft.so",
        "lib/libweft_posix.so",
        "lib/libweft_mpiio.so",
        "bin/weft-delegate",
        "lib/libweft_mpiio_mpich.so",
        "bin/weft-delegate-mpich",
        "include/weft.h",
        "lib/pkgconfig/weft.pc",
        "lib/cmake/Weft/WeftConfig.cmake",
        "lib/cmake/Weft/WeftConfigVersion.cmake",
        "lib/systemd/system/weftd@.service",
        "lib/systemd/system/weft.target",
        "lib/sysusers.d/weft.conf",
        "share/doc/weft/examples/cluster.toml",
        // README.md's links into the guide resolve in the installed documentation.
        "share/doc/weft/docs/src/operations.md",
        "share/doc/weft/docs/src/internals/index.md",
    ] {
        assert!(
            usr.join(file).is_file(),
            "the packages did not install usr/{file}"
        );
    }

    // `weft up` of the installed weft starts the installed weftd (next to it).
    let cluster = TestCluster::start_from(&usr.join("bin"), &ClusterOptions::default());
    let installed_weftd = usr.join("bin/weftd").canonicalize().unwrap();
    for id in 0..=4 {
        let pid = cluster
            .pid(id)
            .unwrap_or_else(|| panic!("server {id} is not running"));
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap();
        assert_eq!(exe, installed_weftd, "server {id} runs {}", exe.display());
    }
    let version = weft_ok(&cluster, &["--version"]);
    assert!(version.starts_with(&format!("weft {VERSION} (git ")), "{version}");

    // put / get with the installed weft.
    let scratch = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..3_000_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let local = scratch.path().join("data.bin");
    std::fs::write(&local, &data).unwrap();
    weft_ok(&cluster, &["put", local.to_str().unwrap(), "/data.bin"]);
    let back = scratch.path().join("back.bin");
    weft_ok(&cluster, &["get", "/data.bin", back.to_str().unwrap()]);
    assert!(
        std::fs::read(&back).unwrap() == data,
        "weft get returned other bytes than put stored"
    );

    // The installed weft names each installed MPI-IO library for its MPI.
    for (mpi, lib) in [
        ("openmpi", "libweft_mpiio.so"),
        ("mpich", "libweft_mpiio_mpich.so"),
    ] {
        let env = weft_ok(&cluster, &["mpi-env", "--mpi", mpi]);
        let expected = format!(
            "export LD_PRELOAD={}",
            usr.join("lib").join(lib).canonicalize().unwrap().display()
        );
        assert!(
            env.lines().any(|l| l == expected),
            "weft mpi-env --mpi {mpi}:\n{env}"
        );
    }
    service_files_of_the_installed_package(root, scratch.path());
    manual_pages_of_the_installed_package(&usr);
    readme_links_resolve_in_the_installed_documentation(&usr);
    mpi_io_through_the_installed_library(&cluster, &usr, scratch.path());
    c_programs_built_against_the_installed_library(&cluster, &usr, scratch.path());

    let stopped = weft_ok(&cluster, &["down"]);
    assert!(stopped.contains("stopped 5"), "{stopped}");
    assert!(
        (0..=4).all(|id| cluster.pid(id).is_none()),
        "servers left running after weft down"
    );
}

/// The pieces a site runs Weft as a system service with: the license in every
/// package's copyright file, the service user made by weft's postinst, weftd@.service
/// and weft.target accepted by systemd (`systemd-analyze verify`, which reports unknown
/// keys, bad values and a missing ExecStart binary on stderr), and the example
/// /etc/weft/cluster.toml valid for weftd.
fn service_files_of_the_installed_package(root: &Path, scratch: &Path) {
    for name in PACKAGES {
        let copyright = std::fs::read_to_string(root.join(format!("usr/share/doc/{name}/copyright")))
            .unwrap_or_else(|e| panic!("{name}: no copyright file: {e}"));
        assert!(
            copyright.contains("License: Apache-2.0")
                && copyright.contains("TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION")
                && !copyright.contains("Copyright information missing"),
            "{name}'s copyright file lacks the license text or the copyright line:\n{}",
            &copyright[..copyright.len().min(400)]
        );
    }
    let passwd = std::fs::read_to_string(root.join("etc/passwd")).unwrap_or_default();
    assert!(
        passwd
            .lines()
            .any(|l| l.starts_with("weft:") && l.ends_with(":/usr/sbin/nologin")),
        "weft's postinst did not make the service user weft in the root's /etc/passwd:\n{passwd}"
    );

    // The units as installed, with the installed weftd's path in ExecStart (the unit
    // names /usr/bin/weftd, which is in the test's root, not on this machine).
    let units = root.join("usr/lib/systemd/system");
    let unit_dir = scratch.join("units");
    std::fs::create_dir_all(&unit_dir).unwrap();
    let weftd = root.join("usr/bin/weftd");
    for unit in ["weftd@.service", "weft.target"] {
        let text = std::fs::read_to_string(units.join(unit)).unwrap();
        if unit == "weftd@.service" {
            assert!(
                text.contains("ExecStart=/usr/bin/weftd --config /etc/weft/cluster.toml --id %i"),
                "weftd@.service does not start the installed weftd:\n{text}"
            );
        }
        std::fs::write(
            unit_dir.join(unit),
            text.replace("/usr/bin/weftd", weftd.to_str().unwrap()),
        )
        .unwrap();
    }
    let verify = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(unit_dir.join("weftd@0.service"))
        .arg(unit_dir.join("weft.target"))
        .output()
        .expect("systemd-analyze (package systemd, installed by make deps)");
    let stderr = String::from_utf8_lossy(&verify.stderr);
    assert!(
        verify.status.success() && stderr.trim().is_empty(),
        "systemd-analyze verify weftd@0.service weft.target: {}\n{stderr}",
        verify.status
    );

    // The example description weftd@N reads: valid, every server with a data directory
    // under the units' StateDirectory, both keys named.
    let example = root.join("usr/share/doc/weft/examples/cluster.toml");
    let config = weft_config::ClusterConfig::load(&example)
        .unwrap_or_else(|e| panic!("the example cluster.toml: {e}"));
    config.validate().expect("the example cluster.toml validates");
    for server in &config.servers {
        let dir = config.data_dir(server, Path::new("/etc/weft"));
        assert!(
            dir.starts_with("/var/lib/weft/"),
            "server {} keeps data in {}",
            server.id,
            dir.display()
        );
    }
    assert_eq!(config.key_path(&example), Path::new("/etc/weft/cluster.key"));
    assert_eq!(
        config.capability_key_path(&example).as_deref(),
        Some(Path::new("/etc/weft/capability.key"))
    );
}

/// Every link of the installed README.md into the guide (`](docs/src/X.md...)`)
/// names a file the package installed beside it.
fn readme_links_resolve_in_the_installed_documentation(usr: &Path) {
    let doc = usr.join("share/doc/weft");
    let readme = std::fs::read_to_string(doc.join("README.md")).expect("the installed README.md");
    let targets: Vec<&str> = readme
        .split("](")
        .skip(1)
        .filter_map(|rest| rest.split([')', '#']).next())
        .filter(|target| target.starts_with("docs/"))
        .collect();
    assert!(targets.len() >= 5, "README.md links into the guide: {targets:?}");
    for target in targets {
        assert!(
            doc.join(target).is_file(),
            "README.md links to {target}, which the package did not install in {}",
            doc.display()
        );
    }
}

/// Manual pages: weft.1, weftd.1 and one per subcommand that `weft --help` lists
/// (weft-put.1 for `weft put`), gzipped, each accepted by groff with all warnings on,
/// and each telling what its command does (the first line of its --help).
fn manual_pages_of_the_installed_package(usr: &Path) {
    let man1 = usr.join("share/man/man1");
    let help = run(Command::new(usr.join("bin/weft")).arg("--help"), "weft --help");
    let commands: Vec<String> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        // A command's name is indented by two; wrapped descriptions by more.
        .filter(|l| !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|name| name != "help")
        .collect();
    assert!(commands.len() > 10, "no command list in weft --help:\n{help}");
    let mut pages = vec!["weft".to_string(), "weftd".to_string()];
    pages.extend(commands.iter().map(|c| format!("weft-{c}")));
    for page in &pages {
        let file = man1.join(format!("{page}.1.gz"));
        assert!(file.is_file(), "no manual page {}", file.display());
        let roff = run(Command::new("zcat").arg(&file), "zcat");
        assert!(
            roff.contains(&format!(".TH {page} 1")),
            "{} is not the page of {page}:\n{}",
            file.display(),
            &roff[..roff.len().min(300)]
        );
        let rendered = Command::new("groff")
            .args(["-man", "-Tutf8", "-ww", "-z"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut child| {
                use std::io::Write;
                child.stdin.take().unwrap().write_all(roff.as_bytes())?;
                child.wait_with_output()
            })
            .expect("groff (package groff-base, installed by make deps)");
        let warnings = String::from_utf8_lossy(&rendered.stderr);
        assert!(
            rendered.status.success() && warnings.trim().is_empty(),
            "groff on {page}.1: {}\n{warnings}",
            rendered.status
        );
    }
    // The page of a subcommand says what the command's --help says it does.
    let put_help = run(
        Command::new(usr.join("bin/weft")).args(["put", "--help"]),
        "weft put --help",
    );
    let summary = put_help.lines().next().unwrap().trim_end_matches('.');
    let put_page = run(Command::new("zcat").arg(man1.join("weft-put.1.gz")), "zcat");
    let first_words: String = summary.split_whitespace().take(4).collect::<Vec<_>>().join(" ");
    assert!(
        put_page.contains(&first_words),
        "weft-put.1 does not say what `weft put --help` says ({first_words:?})"
    );
}

fn mpi_io_through_the_installed_library(cluster: &TestCluster, usr: &Path, scratch: &Path) {
    let program = scratch.join("mpiio_write_all");
    run(
        Command::new("mpicc")
            .args(["-O2", "-Wall", "-Werror", "-o"])
            .arg(&program)
            .arg(source("mpiio_write_all.c")),
        "mpicc mpiio_write_all.c",
    );
    let (ranks, block) = (4usize, 300_000usize);
    let mut mpirun = Command::new("timeout");
    mpirun
        .args([
            "-k",
            "5",
            RUN_TIMEOUT_S,
            "mpirun",
            "--oversubscribe",
            "--bind-to",
            "none",
        ])
        .args(["-np", &ranks.to_string()])
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        // Nothing of the build tree (cargo test's LD_LIBRARY_PATH) reaches the ranks.
        .env_remove("LD_LIBRARY_PATH")
        .arg("-x")
        .arg(format!(
            "LD_PRELOAD={}",
            usr.join("lib/libweft_mpiio.so").display()
        ));
    for (k, v) in cluster.env() {
        mpirun.arg("-x").arg(format!("{k}={v}"));
    }
    let said = run(
        mpirun
            .arg(&program)
            .args(["weft:/mpi-out.dat", &block.to_string()]),
        "mpirun mpiio_write_all",
    );
    assert!(said.contains("4 ranks wrote"), "{said}");
    // The file is on Weft (not a local file named "weft:..."), with every rank's block.
    let back = scratch.join("mpi.dat");
    weft_ok(cluster, &["get", "/mpi-out.dat", back.to_str().unwrap()]);
    let bytes = std::fs::read(&back).unwrap();
    assert_eq!(bytes.len(), ranks * block);
    for (at, &b) in bytes.iter().enumerate() {
        let (rank, k) = (at / block, at % block);
        assert_eq!(b as usize, (rank * 131 + k * 7) % 256, "byte {at} (rank {rank})");
    }
}

fn c_programs_built_against_the_installed_library(cluster: &TestCluster, usr: &Path, scratch: &Path) {
    let test_source = workspace().join("crates/weft-capi/c/weft_capi_test.c");
    let lib_dir = usr.join("lib");

    // pkg-config: --define-prefix takes the prefix from where weft.pc is, so the flags
    // name this root, not the /usr the package was made for.
    let flags = run(
        Command::new("pkg-config")
            .env("PKG_CONFIG_PATH", usr.join("lib/pkgconfig"))
            .args(["--define-prefix", "--cflags", "--libs", "weft"]),
        "pkg-config weft",
    );
    assert!(
        flags.contains(&format!("-I{}", usr.join("include").display())),
        "{flags}"
    );
    let modversion = run(
        Command::new("pkg-config")
            .env("PKG_CONFIG_PATH", usr.join("lib/pkgconfig"))
            .args(["--modversion", "weft"]),
        "pkg-config --modversion weft",
    );
    assert_eq!(modversion.trim(), VERSION);
    let with_pkg_config = scratch.join("capi_pkg_config");
    run(
        Command::new("cc")
            .args(["-std=c99", "-O2", "-o"])
            .arg(&with_pkg_config)
            .arg(&test_source)
            .args(flags.split_whitespace()),
        "cc with pkg-config flags",
    );
    run_against(cluster, &with_pkg_config, usr, Some(&lib_dir));

    // CMake: find_package(Weft <this version>) through CMAKE_PREFIX_PATH; the imported
    // target carries the library's full path, so the program runs without
    // LD_LIBRARY_PATH (CMake's build rpath).
    let configure = |build: &Path, version: &str| {
        Command::new("cmake")
            .arg("-S")
            .arg(source(""))
            .arg("-B")
            .arg(build)
            .arg(format!("-DCMAKE_PREFIX_PATH={}", usr.display()))
            .arg(format!("-DWEFT_VERSION={version}"))
            .arg(format!("-DWEFT_CAPI_TEST_SOURCE={}", test_source.display()))
            .output()
            .expect("running cmake (install cmake)")
    };
    let build = scratch.join("cmake-build");
    output_ok(configure(&build, VERSION), "cmake configure");
    run(Command::new("cmake").arg("--build").arg(&build), "cmake --build");
    run_against(cluster, &build.join("weft_capi_test"), usr, None);
    // The version file refuses a version this installation is not.
    let refused = configure(&scratch.join("cmake-too-new"), "99.0");
    assert!(
        !refused.status.success() && String::from_utf8_lossy(&refused.stderr).contains("Weft"),
        "find_package(Weft 99.0) accepted version {VERSION}"
    );
}

/// Runs the C API test program against the cluster, after checking that it loads the
/// installed libweft.so (through LD_LIBRARY_PATH, or CMake's rpath when `None`).
fn run_against(cluster: &TestCluster, program: &Path, usr: &Path, library_path: Option<&Path>) {
    // cargo test puts target/release on LD_LIBRARY_PATH, which would win over the
    // installed library: the programs get only the path asked for.
    let with_env = |c: &mut Command| {
        match library_path {
            Some(dir) => c.env("LD_LIBRARY_PATH", dir),
            None => c.env_remove("LD_LIBRARY_PATH"),
        };
    };
    let mut ldd = Command::new("ldd");
    with_env(&mut ldd);
    let linked = run(ldd.arg(program), "ldd");
    let installed = format!("libweft.so => {} ", usr.join("lib/libweft.so").display());
    assert!(
        linked.contains(&installed),
        "{} does not load the installed libweft.so:\n{linked}",
        program.display()
    );
    let mut c = Command::new("timeout");
    c.args(["-k", "5", RUN_TIMEOUT_S])
        .arg(program)
        .env_remove("WEFT_META");
    with_env(&mut c);
    for (k, v) in cluster.env() {
        c.env(k, v);
    }
    run(&mut c, &program.display().to_string());
}
