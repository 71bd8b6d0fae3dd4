//! `weft top` as top behaves: into a pipe each view is one line of JSON and `-n` ends
//! it (before, a pipe got the terminal's escape codes and the view never ended); on a
//! terminal `q` quits and leaves the terminal as it was (before, only Ctrl-C ended it,
//! inside the redrawn screen).

use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::Stdio;
use std::time::{Duration, Instant};
use weft_testkit::{ClusterOptions, TestCluster};

#[test]
fn into_a_pipe_each_view_is_one_json_line_and_n_ends_it() {
    let cluster = TestCluster::start();
    let out = cluster
        .command("weft")
        .args(["top", "-n", "3", "--interval-ms", "200"])
        .stdin(Stdio::null())
        .output()
        .expect("running weft top");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!stdout.contains('\x1b'), "escape codes into a pipe: {stdout:?}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{stdout}");
    for line in lines {
        let view: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not one JSON view per line ({e}): {line}"));
        let servers = view["servers"].as_array().expect("a servers array");
        // One manager and the testkit's io servers, all up.
        assert_eq!(
            servers.len() as u32,
            ClusterOptions::default().io_servers + 1,
            "{line}"
        );
        assert!(servers.iter().all(|s| s["state"] == "up"), "{line}");
    }

    let refused = cluster.weft(&["top", "--interval-ms", "5"]);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("100"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
}

#[test]
fn on_a_terminal_q_quits_and_the_terminal_is_left_as_found() {
    let cluster = TestCluster::start();
    let (mut master, mut slave) = (-1, -1);
    // SAFETY: openpty fills two descriptors we then own.
    let opened = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(opened, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both were just opened and are owned by nothing else.
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    let before = attributes(&slave);
    let mut child = cluster
        .command("weft")
        .args(["top", "--interval-ms", "200"])
        .stdin(slave.try_clone().unwrap())
        .stdout(slave.try_clone().unwrap())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running weft top");
    let mut screen = std::fs::File::from(master.try_clone().unwrap());
    // Non-blocking reads, so that a top that never draws fails the test, not hangs it.
    // SAFETY: fcntl on a descriptor we own.
    unsafe { libc::fcntl(master.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) };
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !String::from_utf8_lossy(&seen).contains("(q quits)") {
        if Instant::now() > deadline {
            let shown = String::from_utf8_lossy(&seen);
            let tail: String = shown
                .chars()
                .skip(shown.chars().count().saturating_sub(400))
                .collect();
            panic!("no view with the q hint drawn; the screen's last bytes: {tail:?}");
        }
        let mut buf = [0u8; 4096];
        match screen.read(&mut buf) {
            Ok(n) => seen.extend_from_slice(&buf[..n]),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
    assert!(
        String::from_utf8_lossy(&seen).contains("\x1b[?1049h"),
        "the view is not drawn on the alternate screen"
    );
    std::io::Write::write_all(&mut screen, b"q").unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("weft top did not quit on q");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "weft top exited {status}");
    let after = attributes(&slave);
    assert_eq!(
        after.c_lflag & (libc::ICANON | libc::ECHO),
        before.c_lflag & (libc::ICANON | libc::ECHO),
        "the terminal was left without line editing or echo"
    );
    let mut rest = [0u8; 4096];
    let n = screen.read(&mut rest).unwrap_or(0);
    seen.extend_from_slice(&rest[..n]);
    assert!(
        String::from_utf8_lossy(&seen).contains("\x1b[?1049l"),
        "the alternate screen was not left"
    );
}

fn attributes(fd: &OwnedFd) -> libc::termios {
    // SAFETY: tcgetattr into a termios we own, on a descriptor we own.
    unsafe {
        let mut attrs: libc::termios = std::mem::zeroed();
        assert_eq!(libc::tcgetattr(fd.as_raw_fd(), &mut attrs), 0);
        attrs
    }
}
