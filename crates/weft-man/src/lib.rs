//! Manual pages of Weft's programs, written from the clap definitions that give their
//! `--help`, so a page never disagrees with its program.
//!
//! Each program calls [`requested`] before it parses its arguments: given
//! `--generate-man-pages DIR` as its only arguments, it writes its pages into DIR (one
//! for the program, one per subcommand, `weft-put.1` for `weft put`, as git's pages
//! are named) with [`write_pages`] and exits ([`write_and_exit`]). The flag is not shown in `--help`: it is
//! for packagers (`packaging/install.sh` and `make deb` run it), not for users.

use std::ffi::OsString;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// The flag a program is run with to write its pages.
pub const FLAG: &str = "--generate-man-pages";

/// The directory to write the pages into, when the program's arguments (without the
/// program's name) are exactly `--generate-man-pages DIR`; else `None`.
pub fn requested(args: impl IntoIterator<Item = OsString>) -> Option<PathBuf> {
    let mut args = args.into_iter();
    match (args.next(), args.next(), args.next()) {
        (Some(flag), Some(dir), None) if flag == FLAG => Some(PathBuf::from(dir)),
        _ => None,
    }
}

/// Writes the pages of `cmd` (section 1) into `dir`, which is made if missing: the
/// program's own page and one per visible subcommand, recursively. Returns the files
/// written, the program's page first.
pub fn write_pages(cmd: clap::Command, dir: &Path) -> io::Result<Vec<PathBuf>> {
    fs::create_dir_all(dir)?;
    let mut cmd = cmd;
    // Fills in bin names, usage strings and the global flags of subcommands.
    cmd.build();
    let mut written = Vec::new();
    let name = cmd.get_name().to_string();
    write_one(&cmd, &name, dir, &mut written)?;
    Ok(written)
}

/// What a program does when [`requested`] says so: writes the pages of `cmd` into
/// `dir`, says how many, and exits (status 1, with the reason, when it cannot).
pub fn write_and_exit(program: &str, cmd: clap::Command, dir: &Path) -> ! {
    match write_pages(cmd, dir) {
        Ok(pages) => {
            println!(
                "{program}: {} manual pages written in {}",
                pages.len(),
                dir.display()
            );
            std::process::exit(0)
        }
        Err(e) => {
            eprintln!("{program}: cannot write manual pages in {}: {e}", dir.display());
            std::process::exit(1)
        }
    }
}

fn write_one(cmd: &clap::Command, page: &str, dir: &Path, written: &mut Vec<PathBuf>) -> io::Result<()> {
    let path = dir.join(format!("{page}.1"));
    let mut roff = Vec::new();
    // The page's title is its file name (weft-put); the synopsis keeps the command as
    // typed (weft put), which `build` put in the bin name.
    clap_mangen::Man::new(cmd.clone().name(page.to_string())).render(&mut roff)?;
    fs::write(&path, roff)?;
    written.push(path);
    for sub in cmd.get_subcommands() {
        if sub.is_hide_set() || sub.get_name() == "help" {
            continue;
        }
        write_one(sub, &format!("{page}-{}", sub.get_name()), dir, written)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Arg, Command};

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn requested_only_for_the_flag_and_one_directory() {
        assert_eq!(requested(os(&[FLAG, "/tmp/m"])), Some(PathBuf::from("/tmp/m")));
        assert_eq!(requested(os(&[FLAG])), None);
        assert_eq!(requested(os(&[FLAG, "a", "b"])), None);
        assert_eq!(requested(os(&["put", FLAG])), None);
        assert_eq!(requested(os(&[])), None);
    }

    #[test]
    fn one_page_per_visible_subcommand_named_as_git_names_them() {
        let cmd = Command::new("tool")
            .about("A tool.")
            .subcommand(
                Command::new("put").about("Store a file.").arg(
                    Arg::new("stripe-size")
                        .long("stripe-size")
                        .help("Stripe size, bytes."),
                ),
            )
            .subcommand(Command::new("key").subcommand(Command::new("create").about("Write a new key.")))
            .subcommand(Command::new("secret").hide(true));
        let dir = tempfile::tempdir().unwrap();
        let written = write_pages(cmd, dir.path()).unwrap();
        let names: Vec<String> = written
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["tool.1", "tool-put.1", "tool-key.1", "tool-key-create.1"]);
        let put = fs::read_to_string(dir.path().join("tool-put.1")).unwrap();
        assert!(put.starts_with(".ie"), "{put}");
        assert!(put.contains(".TH tool-put 1"), "{put}");
        assert!(put.contains("Store a file."), "{put}");
        assert!(put.contains("stripe\\-size"), "{put}");
        // The synopsis shows the command as typed.
        assert!(put.contains("tool put"), "{put}");
    }
}
