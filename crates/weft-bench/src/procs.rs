//! Benchmark client processes and the pipes that synchronise them: the parent starts
//! P copies of the running binary, sends every phase's "go" to all of them back to
//! back (the barrier), and collects one answer line per worker before the next phase.
//!
//! The protocol is one text line per message: a command from the parent on the
//! worker's stdin; `ok [fields]` or `error <message>` from the worker on its stdout.
//! Worker stdout carries nothing else; stderr is inherited for diagnostics.

use anyhow::{anyhow, bail, Context, Result};
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

struct Worker {
    rank: u32,
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

/// Running workers, killed if still running when dropped (on any error path).
pub struct Workers {
    workers: Vec<Worker>,
}

impl Workers {
    /// Starts `procs` workers as `<this exe> bench <subcommand> <args_for(rank)>` and
    /// waits for each one's first `ok` (it is set up and connected).
    pub fn spawn(subcommand: &str, procs: u32, args_for: impl Fn(u32) -> Vec<OsString>) -> Result<Workers> {
        Workers::spawn_in(subcommand, procs, None, args_for)
    }

    /// As `spawn`, the workers finding their cluster in `home` (WEFT_HOME, and no
    /// WEFT_META) when one is given, else as the environment says.
    pub fn spawn_in(
        subcommand: &str,
        procs: u32,
        home: Option<&std::path::Path>,
        args_for: impl Fn(u32) -> Vec<OsString>,
    ) -> Result<Workers> {
        let exe = std::env::current_exe().context("finding the running executable")?;
        let mut workers = Workers { workers: Vec::new() };
        for rank in 0..procs {
            let mut command = Command::new(&exe);
            if let Some(home) = home {
                command
                    .env("WEFT_HOME", home)
                    .env_remove("WEFT_META")
                    .env_remove("WEFT_KEY");
            }
            let mut child = command
                .arg("bench")
                .arg(subcommand)
                .args(args_for(rank))
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .with_context(|| format!("starting worker {rank} ({})", exe.display()))?;
            let stdin = child.stdin.take().expect("piped");
            let stdout = BufReader::new(child.stdout.take().expect("piped"));
            workers.workers.push(Worker {
                rank,
                child,
                stdin,
                stdout,
            });
        }
        workers.replies().context("starting the workers")?;
        Ok(workers)
    }

    /// Sends `command` to every worker, then collects every answer (the fields after
    /// `ok`, in rank order). Returns them with the parent's wall time from the first
    /// send to the last answer.
    pub fn step(&mut self, command: &str) -> Result<(Vec<String>, Duration)> {
        let started = Instant::now();
        self.send_all(command)?;
        let replies = self.replies()?;
        Ok((replies, started.elapsed()))
    }

    fn send_all(&mut self, command: &str) -> Result<()> {
        let line = format!("{command}\n");
        for w in &mut self.workers {
            w.stdin
                .write_all(line.as_bytes())
                .and_then(|()| w.stdin.flush())
                .map_err(|e| anyhow!("worker {}: cannot send {command:?}: {e}", w.rank))?;
        }
        Ok(())
    }

    fn replies(&mut self) -> Result<Vec<String>> {
        let mut out = Vec::with_capacity(self.workers.len());
        for w in &mut self.workers {
            let mut line = String::new();
            let n = w
                .stdout
                .read_line(&mut line)
                .with_context(|| format!("reading from worker {}", w.rank))?;
            if n == 0 {
                let status = w.child.wait().map(|s| s.to_string()).unwrap_or_default();
                bail!("worker {} exited without answering ({status})", w.rank);
            }
            let line = line.trim_end();
            if let Some(fields) = line.strip_prefix("ok") {
                out.push(fields.trim().to_owned());
            } else if let Some(message) = line.strip_prefix("error ") {
                bail!("worker {}: {message}", w.rank);
            } else {
                bail!("worker {}: unexpected answer {line:?}", w.rank);
            }
        }
        Ok(out)
    }

    /// Tells every worker to quit and checks that all exit cleanly.
    pub fn finish(mut self) -> Result<()> {
        self.send_all("quit")?;
        for w in &mut self.workers {
            let status = w.child.wait()?;
            if !status.success() {
                bail!("worker {} exited with {status}", w.rank);
            }
        }
        Ok(())
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for w in &mut self.workers {
            if let Ok(None) = w.child.try_wait() {
                let _ = w.child.kill();
                let _ = w.child.wait();
            }
        }
    }
}

/// The worker's side: runs `setup`, answers `ok` (ready), then answers each command
/// line from stdin with `handle`'s fields, until `quit` or the end of input. An error
/// is sent to the parent as one line, then returned.
pub fn serve<S>(
    setup: impl FnOnce() -> Result<S>,
    mut handle: impl FnMut(&mut S, &str) -> Result<String>,
) -> Result<()> {
    let mut stdout = std::io::stdout().lock();
    let mut answer = |line: String| -> Result<()> {
        stdout.write_all(line.as_bytes())?;
        stdout.write_all(b"\n")?;
        stdout.flush()?;
        Ok(())
    };
    let fail = |answer: &mut dyn FnMut(String) -> Result<()>, e: anyhow::Error| {
        let message = format!("{e:#}").replace('\n', " ");
        let _ = answer(format!("error {message}"));
        Err(e)
    };
    let mut state = match setup() {
        Ok(s) => s,
        Err(e) => return fail(&mut answer, e),
    };
    answer("ok".into())?;
    for line in std::io::stdin().lock().lines() {
        let line = line?;
        let command = line.trim();
        if command == "quit" {
            return Ok(());
        }
        match handle(&mut state, command) {
            Ok(fields) => answer(format!("ok {fields}"))?,
            Err(e) => return fail(&mut answer, e),
        }
    }
    Ok(())
}
