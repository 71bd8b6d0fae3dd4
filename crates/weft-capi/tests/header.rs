//! The committed header, include/weft.h, is what cbindgen makes of the code now, and it
//! compiles on its own as C99 and as C++.
//!
//! The header is generated here rather than in build.rs: a build script would have to
//! write into the source tree (or leave the header in an OUT_DIR that C builds cannot
//! name), and would run cbindgen on every build. Committing it keeps every ABI change
//! visible in review; this test keeps it from going stale.

use std::path::{Path, PathBuf};
use std::process::Command;

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn committed_header() -> PathBuf {
    crate_dir().join("include").join("weft.h")
}

fn generate() -> Vec<u8> {
    let dir = crate_dir();
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("reading cbindgen.toml");
    let bindings = cbindgen::Builder::new()
        .with_config(config)
        .with_src(dir.join("src").join("lib.rs"))
        .generate()
        .expect("cbindgen could not generate weft.h");
    let mut out = Vec::new();
    bindings.write(&mut out);
    out
}

#[test]
fn committed_header_is_up_to_date() {
    let generated = generate();
    let path = committed_header();
    let committed = std::fs::read(&path).unwrap_or_default();
    if generated == committed {
        return;
    }
    if std::env::var_os("WEFT_UPDATE_HEADER").is_some() {
        std::fs::write(&path, &generated).expect("writing include/weft.h");
        eprintln!("wrote {}", path.display());
        return;
    }
    let fresh = std::env::temp_dir().join(format!("weft-{}.h", std::process::id()));
    std::fs::write(&fresh, &generated).expect("writing the generated header");
    panic!(
        "{} is stale: the C ABI changed. Regenerate it with\n  \
         WEFT_UPDATE_HEADER=1 cargo test --release -p weft-capi --test header\n\
         and commit it (the generated header is in {} for a diff).",
        path.display(),
        fresh.display()
    );
}

fn compile_alone(compiler: &str, args: &[&str]) {
    let dir = tempfile::tempdir().expect("tempdir");
    let source = dir.path().join("only_weft.c");
    std::fs::write(
        &source,
        "#include \"weft.h\"\n#include \"weft.h\"\nint main(void) { return weft_version() == 0; }\n",
    )
    .unwrap();
    let include = committed_header().parent().unwrap().to_path_buf();
    let out = Command::new(compiler)
        .args(args)
        .args(["-Wall", "-Wextra", "-Werror", "-fsyntax-only", "-I"])
        .arg(&include)
        .arg(Path::new(&source))
        .output()
        .unwrap_or_else(|e| panic!("running {compiler} (a C compiler is needed, as for `make build`): {e}"));
    assert!(
        out.status.success(),
        "weft.h does not compile alone with {compiler} {args:?}:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn header_compiles_alone_as_c99_and_cpp() {
    compile_alone("cc", &["-std=c99", "-pedantic"]);
    compile_alone("c++", &["-x", "c++", "-std=c++11", "-pedantic"]);
}
