//! `weft top`: a live view of the cluster a client uses (every server's throughput,
//! operations, latency, cache hit rate, dirty bytes; the busiest files and jobs), from
//! the servers' metrics endpoints, refreshed every interval. As top does: on a terminal
//! the view is redrawn in place (the alternate screen) until `q`, Ctrl-C or `-n`
//! views; into a pipe or file each view is one line of JSON, so `weft top | jq` and
//! logging work; `--once` prints one view (rates over one interval) for scripts.

use anyhow::{Context, Result};
use clap::Args as ClapArgs;
use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use weft_metrics::collect::{targets, Watch};
use weft_metrics::top::View;
use weft_rpc::{ClientAuth, ClusterKey, ConnectionPool, Timeouts};

#[derive(ClapArgs, Debug)]
#[command(after_help = "Keys (on a terminal): q quits (Ctrl-C too).\n\
Into a pipe or a file each view is one line of JSON (the --json form): `weft top -n 10 > views.jsonl`.")]
pub struct TopArgs {
    /// Print one view, with rates over one interval, and exit (2 if a server is down).
    #[arg(long)]
    once: bool,
    /// Print the view as JSON (what the status page reads); the default when the
    /// output is not a terminal.
    #[arg(long)]
    json: bool,
    /// Milliseconds between views (100 to 3,600,000).
    #[arg(long, default_value_t = 1000, value_name = "MS",
          value_parser = clap::value_parser!(u64).range(100..=3_600_000))]
    interval_ms: u64,
    /// Stop after N views (top's -n); default: until q or Ctrl-C.
    #[arg(short = 'n', long, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..))]
    iterations: Option<u64>,
}

/// Longest wait for one server's metrics.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(2);

/// Set by SIGINT/SIGTERM while the terminal is ours: the loop leaves it as it found it.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_interrupt(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

pub fn run(args: TopArgs) -> Result<()> {
    let meta = weft_config::meta_address()?;
    let key = weft_config::client_key_path()?;
    let auth = ClientAuth::cluster(ClusterKey::load(&key)?);
    let pool = ConnectionPool::new(
        "weft top",
        auth,
        Timeouts {
            connect: SCRAPE_TIMEOUT,
            request: SCRAPE_TIMEOUT,
        },
    );
    let (cluster, servers) = targets(&pool, &meta)
        .with_context(|| format!("asking the metadata manager at {meta} for its servers"))?;
    let mut watch = Watch::new(&pool, servers, true);
    let interval = Duration::from_millis(args.interval_ms);
    let on_terminal = !args.once && std::io::stdout().is_terminal();
    let json = args.json || !on_terminal && !args.once;
    let iterations = if args.once { Some(1) } else { args.iterations };
    // The screen and the keyboard, while the views are drawn in place.
    let screen = if on_terminal && !json {
        Some(Screen::take())
    } else {
        None
    };
    watch.round(&pool, SCRAPE_TIMEOUT);
    let mut last = Instant::now();
    let mut shown = 0u64;
    loop {
        let wait = interval.saturating_sub(last.elapsed());
        match &screen {
            Some(screen) if screen.wait_for_quit(wait) => return Ok(()),
            Some(_) => {}
            None => std::thread::sleep(wait),
        }
        let observed = watch.round(&pool, SCRAPE_TIMEOUT);
        let seconds = last.elapsed().as_secs_f64();
        last = Instant::now();
        let view = View::between(&cluster, &observed, seconds);
        let mut out = std::io::stdout().lock();
        if json {
            // One line per view: a pipe reads them one by one.
            writeln!(out, "{}", view.to_json().replace('\n', " "))?;
        } else if screen.is_some() {
            // Home and clear, then the view: the terminal shows it in place.
            write!(out, "\x1b[H\x1b[2J{}", view.render_text().replace('\n', "\r\n"))?;
            write!(out, "\r\n(q quits)")?;
        } else {
            out.write_all(view.render_text().as_bytes())?;
        }
        out.flush()?;
        shown += 1;
        if args.once {
            if view.servers.iter().any(|s| s.state != "up") {
                std::process::exit(2);
            }
            return Ok(());
        }
        if iterations.is_some_and(|n| shown >= n) {
            return Ok(());
        }
    }
}

/// The terminal while `weft top` draws on it: the alternate screen, no cursor, keys
/// read one by one without echo; put back as found when dropped (also after Ctrl-C,
/// which is caught for that).
struct Screen {
    saved: Option<libc::termios>,
}

impl Screen {
    fn take() -> Screen {
        let mut saved = None;
        // SAFETY: tcgetattr/tcsetattr on descriptor 0 with a termios we own.
        unsafe {
            let mut attrs: libc::termios = std::mem::zeroed();
            if libc::isatty(0) == 1 && libc::tcgetattr(0, &mut attrs) == 0 {
                let mut raw = attrs;
                raw.c_lflag &= !(libc::ICANON | libc::ECHO);
                raw.c_cc[libc::VMIN] = 0;
                raw.c_cc[libc::VTIME] = 0;
                if libc::tcsetattr(0, libc::TCSANOW, &raw) == 0 {
                    saved = Some(attrs);
                }
            }
            let handler = on_interrupt as extern "C" fn(libc::c_int) as libc::sighandler_t;
            libc::signal(libc::SIGINT, handler);
            libc::signal(libc::SIGTERM, handler);
        }
        let mut out = std::io::stdout().lock();
        let _ = write!(out, "\x1b[?1049h\x1b[?25l");
        let _ = out.flush();
        Screen { saved }
    }

    /// Waits up to `wait` for `q`, Ctrl-C or SIGTERM: whether the view should end.
    fn wait_for_quit(&self, wait: Duration) -> bool {
        let until = Instant::now() + wait;
        loop {
            if INTERRUPTED.load(Ordering::SeqCst) {
                return true;
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            if self.saved.is_none() {
                // No keyboard (stdin is not a terminal): only signals end the view.
                std::thread::sleep(left.min(Duration::from_millis(100)));
                continue;
            }
            let mut poll = libc::pollfd {
                fd: 0,
                events: libc::POLLIN,
                revents: 0,
            };
            let ms = left.as_millis().clamp(1, 100) as libc::c_int;
            // SAFETY: one pollfd we own.
            let ready = unsafe { libc::poll(&mut poll, 1, ms) };
            if ready > 0 {
                let mut key = [0u8; 16];
                // SAFETY: reading into our own buffer.
                let n = unsafe { libc::read(0, key.as_mut_ptr().cast(), key.len()) };
                if n > 0 && key[..n as usize].iter().any(|&k| k == b'q' || k == b'Q') {
                    return true;
                }
                if n == 0 {
                    // The terminal hung up.
                    return true;
                }
            }
        }
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        let mut out = std::io::stdout().lock();
        let _ = write!(out, "\x1b[?25h\x1b[?1049l");
        let _ = out.flush();
        if let Some(attrs) = &self.saved {
            // SAFETY: putting back the attributes read in `take`.
            unsafe {
                libc::tcsetattr(0, libc::TCSANOW, attrs);
            }
        }
    }
}
