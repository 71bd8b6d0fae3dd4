//! The version string of Weft's programs: "0.1.0 (git 1a2b3c4)".
//!
//! A binary crate uses this crate twice: as a build-dependency, whose [`emit`] (called
//! from its build.rs) finds the git revision and hands it to the compiler, and as a
//! dependency, whose [`version!`] macro builds the string in the binary. The revision is
//! `$WEFT_GIT_REVISION` when set (a packager building from a tarball knows it), else
//! `git rev-parse --short HEAD` when the crate is part of a git checkout, else the
//! `GIT_REVISION` file at the top of a release tarball (`make dist` writes it), else
//! "unknown".
//!
//! # Code map
//!
//! The version string of the binaries, "0.1.0 (git 1a2b3c4)": `emit()` for build.rs (the
//! revision from `$WEFT_GIT_REVISION`, else `git rev-parse --short HEAD` when the crate is
//! tracked by a git checkout, else the tarball's `GIT_REVISION`, else "unknown") and the
//! `version!()` macro. Used by weft-cli and weft-server (`--version`, and weftd's build in
//! `ServerInfo`); no dependencies.

use std::path::Path;
use std::process::Command;

/// The variable the revision is passed in, from the environment to build.rs and from
/// build.rs to the compiler.
pub const REVISION_VARIABLE: &str = "WEFT_GIT_REVISION";

/// `"<package version> (git <revision>)"` of the crate that calls it; the crate's build.rs
/// must call [`emit`].
#[macro_export]
macro_rules! version {
    () => {
        concat!(
            env!("CARGO_PKG_VERSION"),
            " (git ",
            env!("WEFT_GIT_REVISION"),
            ")"
        )
    };
}

/// For build.rs: sets `WEFT_GIT_REVISION` for the compiler and asks cargo to run the
/// build script again when the checkout moves to another commit.
pub fn emit() {
    println!("cargo:rerun-if-env-changed={REVISION_VARIABLE}");
    let revision = match std::env::var(REVISION_VARIABLE) {
        Ok(r) if !r.trim().is_empty() => r.trim().to_owned(),
        _ => {
            let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());
            let manifest_dir = Path::new(&manifest_dir);
            git_revision(manifest_dir)
                .or_else(|| tarball_revision(manifest_dir))
                .unwrap_or_else(|| "unknown".into())
        }
    };
    println!("cargo:rustc-env={REVISION_VARIABLE}={revision}");
}

/// The short revision of HEAD, if `crate_dir` is tracked by a git checkout. A tarball
/// unpacked inside some other repository (a Spack stage under a site's git tree) is
/// not tracked by it, so that repository's revision is never taken for Weft's.
fn git_revision(crate_dir: &Path) -> Option<String> {
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git")
            .arg("-C")
            .arg(crate_dir)
            .args(args)
            .output()
            .ok()?;
        let text = String::from_utf8(out.stdout).ok()?;
        (out.status.success() && !text.trim().is_empty()).then(|| text.trim().to_owned())
    };
    git(&["ls-files", "--error-unmatch", "Cargo.toml"])?;
    let revision = git(&["rev-parse", "--short", "HEAD"])?;
    // HEAD names the branch; the branch file (or packed-refs) names the commit. Watching
    // only files that exist: cargo reruns a script whose watched file is missing every time.
    let mut watched = vec![git(&["rev-parse", "--git-path", "HEAD"])];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(git(&["rev-parse", "--git-path", &branch]));
    }
    watched.push(git(&["rev-parse", "--git-path", "packed-refs"]));
    for path in watched.into_iter().flatten() {
        let path = crate_dir.join(path);
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
    Some(revision)
}

/// The name of the file a release tarball (`make dist`) names its revision in, at the
/// top of the tree.
pub const REVISION_FILE: &str = "GIT_REVISION";

/// The revision in the `GIT_REVISION` file of the workspace `crate_dir` is in (the
/// crate's directory or one of the two above it: `crates/NAME` of the workspace).
fn tarball_revision(crate_dir: &Path) -> Option<String> {
    let file = crate_dir
        .ancestors()
        .take(3)
        .map(|dir| dir.join(REVISION_FILE))
        .find(|file| file.is_file())?;
    println!("cargo:rerun-if-changed={}", file.display());
    let text = std::fs::read_to_string(file).ok()?;
    let revision = text.trim();
    // A short hex revision; anything else is not ours to print.
    (!revision.is_empty() && revision.len() <= 40 && revision.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| revision.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_outside_any_checkout_has_no_revision() {
        // Like an unpacked release tarball: a Cargo.toml that no repository tracks.
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("Cargo.toml"), "[package]\n").unwrap();
        assert_eq!(git_revision(dir.path()), None);
    }

    #[test]
    fn a_tarball_names_its_revision_in_its_top_directory() {
        let top = tempfile::tempdir().unwrap();
        let crate_dir = top.path().join("crates/weft-cli");
        std::fs::create_dir_all(&crate_dir).unwrap();
        assert_eq!(tarball_revision(&crate_dir), None);
        std::fs::write(top.path().join(REVISION_FILE), "1a2b3c4\n").unwrap();
        assert_eq!(tarball_revision(&crate_dir).as_deref(), Some("1a2b3c4"));
        std::fs::write(top.path().join(REVISION_FILE), "not a revision\n").unwrap();
        assert_eq!(tarball_revision(&crate_dir), None);
    }

    #[test]
    fn a_crate_of_a_checkout_has_its_head_revision() {
        let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
        let head = Command::new("git")
            .arg("-C")
            .arg(crate_dir)
            .args(["rev-parse", "--short", "HEAD"])
            .output()
            .ok()
            .filter(|out| out.status.success());
        // Built from a tarball, this crate is no checkout's: then it has no revision.
        let expected = head.map(|out| String::from_utf8(out.stdout).unwrap().trim().to_owned());
        assert_eq!(git_revision(crate_dir), expected);
    }
}
