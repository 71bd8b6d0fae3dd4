//! Tying a home's servers to the life of one process: the test harness's clusters and
//! the ones `weft bench` starts for itself. The process holds a pipe's only write end;
//! every server it starts reads the pipe (`weft up --tie-to-stdin`, `weftd
//! --exit-on-stdin-eof`) and exits at its end, which comes when the process dies,
//! however it dies (SIGKILL included: the kernel closes the write end). A sweeper reading
//! the same pipe then continues stopped servers, ends the processes recorded with
//! [`HomeTie::spawn`] (SIGTERM), waits for them all, and removes the home.
//!
//! A pipe rather than PR_SET_PDEATHSIG: that fires when the spawning *thread* ends (a
//! test's helper thread), and `weft up`'s servers are not this process's children.

use std::io::{PipeReader, PipeWriter};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// Seconds the sweeper waits for the home's processes to end before removing it anyway.
pub const SWEEP_WAIT_SECONDS: u32 = 10;

/// The sweeper's script; `$0` is the home, `$1` the seconds to wait. It ignores the
/// terminal's signals (Ctrl-C reaches the whole foreground group, the sweeper too, and
/// it must outlive its owner), reads to the pipe's end, sends SIGCONT to every server of
/// `run/*.pid` (a stopped server reads nothing) and SIGCONT then SIGTERM to every process
/// of `run/*.tied` (ones that do not read the pipe, mpirun say), waits for them (a zombie
/// counts as gone) and removes the home.
const SWEEPER: &str = r#"trap '' INT TERM HUP
cat >/dev/null
pids=
for f in "$0"/run/*.pid "$0"/run/*.tied; do
  if [ -f "$f" ]; then pids="$pids $(cat "$f")"; fi
done
terms=
for f in "$0"/run/*.tied; do
  if [ -f "$f" ]; then terms="$terms $(cat "$f")"; fi
done
if [ -n "$pids" ]; then kill -CONT $pids 2>/dev/null; fi
if [ -n "$terms" ]; then kill -TERM $terms 2>/dev/null; fi
i=0
while [ $i -lt $(($1 * 5)) ]; do
  alive=
  for p in $pids; do
    if kill -0 "$p" 2>/dev/null && ! grep -q '^[^)]*) Z' /proc/"$p"/stat 2>/dev/null; then alive=1; fi
  done
  [ -z "$alive" ] && break
  sleep 0.2
  i=$((i + 1))
done
rm -rf "$0""#;

/// The tie of one home to this process; see the module's comment. Dropping it (or
/// [`HomeTie::release`]) without stopping the servers first ends them too: their pipe
/// ends and the sweeper removes the home.
pub struct HomeTie {
    home: PathBuf,
    read: PipeReader,
    /// The only write end: close-on-exec (std makes pipes so), so no child inherits it.
    write: Option<PipeWriter>,
    sweeper: Option<Child>,
}

impl HomeTie {
    /// Ties `home` (which must exist) to this process and starts its sweeper (`sh`).
    pub fn new(home: &Path) -> std::io::Result<HomeTie> {
        let (read, write) = std::io::pipe()?;
        let sweeper = Command::new("sh")
            .arg("-c")
            .arg(SWEEPER)
            .arg(home)
            .arg(SWEEP_WAIT_SECONDS.to_string())
            .stdin(Stdio::from(read.try_clone()?))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                std::io::Error::new(
                    e.kind(),
                    format!("starting the sweeper of {} (sh): {e}", home.display()),
                )
            })?;
        Ok(HomeTie {
            home: home.to_path_buf(),
            read,
            write: Some(write),
            sweeper: Some(sweeper),
        })
    }

    /// A standard input for a process that is to end with this one: `weft up
    /// --tie-to-stdin`, `weftd --exit-on-stdin-eof`.
    pub fn stdin(&self) -> std::io::Result<Stdio> {
        Ok(Stdio::from(self.read.try_clone()?))
    }

    /// Spawns `command` with [`HomeTie::stdin`] and records its pid in the home's
    /// `run/tied-PID.tied`, so that the sweeper also ends it (SIGTERM) and waits for it:
    /// for processes that do not read the pipe themselves. [`HomeTie::forget`] it once
    /// it was waited for, so that a later process with its pid is not signalled.
    pub fn spawn(&self, command: &mut Command) -> std::io::Result<Child> {
        let child = command.stdin(self.stdin()?).spawn()?;
        let run = self.home.join("run");
        let recorded = std::fs::create_dir_all(&run)
            .and_then(|()| std::fs::write(self.record(child.id()), format!("{}\n", child.id())));
        if let Err(e) = recorded {
            let mut child = child;
            let _ = child.kill();
            let _ = child.wait();
            return Err(std::io::Error::new(
                e.kind(),
                format!("recording a process in {}: {e}", run.display()),
            ));
        }
        Ok(child)
    }

    /// The process `pid` of [`HomeTie::spawn`] has been waited for.
    pub fn forget(&self, pid: u32) {
        let _ = std::fs::remove_file(self.record(pid));
    }

    fn record(&self, pid: u32) -> PathBuf {
        self.home.join("run").join(format!("tied-{pid}.tied"))
    }

    /// The home's processes were stopped by their owner: the sweeper has nothing to do
    /// (the owner removes the home), so it is killed rather than left waiting on pids,
    /// and the pipe is closed.
    pub fn release(&mut self) {
        if let Some(mut sweeper) = self.sweeper.take() {
            let _ = sweeper.kill();
            let _ = sweeper.wait();
        }
        self.write = None;
    }

    /// Closes the write end without killing the sweeper: the home's processes end and
    /// the sweeper removes the home, as if this process had died (for tests of that).
    pub fn end(&mut self) -> Option<Child> {
        self.write = None;
        self.sweeper.take()
    }
}

impl Drop for HomeTie {
    fn drop(&mut self) {
        self.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// A recorded process that ignores its input is ended (SIGTERM) at the pipe's end,
    /// and the home is removed after it; a released tie touches neither.
    #[test]
    fn the_sweeper_ends_recorded_processes_and_removes_the_home() {
        let base = std::env::temp_dir().join(format!("weft-tie-test-{}", std::process::id()));
        let home = base.join("home");
        std::fs::create_dir_all(&home).unwrap();
        let mut tie = HomeTie::new(&home).unwrap();
        let mut sleeper = tie.spawn(Command::new("sleep").arg("600")).unwrap();
        let sweeper = tie.end().unwrap();
        let started = Instant::now();
        let status = sleeper.wait().unwrap();
        assert!(!status.success(), "sleep 600 ended by itself?");
        let mut sweeper = sweeper;
        sweeper.wait().unwrap();
        assert!(started.elapsed() < Duration::from_secs(SWEEP_WAIT_SECONDS as u64));
        assert!(!home.exists(), "the home was left");

        std::fs::create_dir_all(&home).unwrap();
        let mut tie = HomeTie::new(&home).unwrap();
        let mut sleeper = tie.spawn(Command::new("sleep").arg("600")).unwrap();
        tie.release();
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            sleeper.try_wait().unwrap().is_none(),
            "a released tie ended its process"
        );
        assert!(home.exists(), "a released tie removed the home");
        sleeper.kill().unwrap();
        sleeper.wait().unwrap();
        std::fs::remove_dir_all(&base).unwrap();
    }
}
