//! Standard output as GNU tools treat it: a reader that went away (`weft ls | head`)
//! ends the program quietly, as SIGPIPE would, never with a panic or an error message.

use std::io::Write;

/// Writes one line to standard output (the `println!` of this crate).
pub fn line(args: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    let written = out.write_fmt(args).and_then(|()| out.write_all(b"\n"));
    if let Err(e) = written {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            die_of_broken_pipe();
        }
        eprintln!("weft: writing to standard output: {e}");
        std::process::exit(1);
    }
}

/// True for the error of a write to a closed pipe, wherever it sits in an error chain.
pub fn is_broken_pipe(e: &(dyn std::error::Error + 'static)) -> bool {
    e.downcast_ref::<std::io::Error>()
        .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
}

/// Ends the process by SIGPIPE, which Rust ignores: the shell sees what it sees of
/// `cat` or `ls` writing into a closed pipe (status 141, no message).
pub fn die_of_broken_pipe() -> ! {
    // SAFETY: restoring the default action of a signal and raising it.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        libc::raise(libc::SIGPIPE);
    }
    std::process::exit(141)
}
