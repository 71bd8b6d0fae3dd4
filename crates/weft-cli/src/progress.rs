//! A one-line progress display on stderr for long transfers, shown only on a terminal
//! (or when WEFT_PROGRESS=1) so that scripts and logs stay clean.

use crate::cluster::human_bytes;
use std::io::Write;
use std::time::{Duration, Instant};

/// Transfers smaller than this finish too fast to need a display.
const SHOW_FROM_BYTES: u64 = 32 << 20;

pub struct Progress {
    label: String,
    total: u64,
    started: Instant,
    last_draw: Instant,
    enabled: bool,
}

impl Progress {
    pub fn new(label: &str, total: u64) -> Progress {
        // SAFETY: isatty only inspects the descriptor.
        let tty = unsafe { libc::isatty(2) } == 1;
        let forced = std::env::var("WEFT_PROGRESS").is_ok_and(|v| v == "1");
        let now = Instant::now();
        Progress {
            label: label.to_owned(),
            total,
            started: now,
            last_draw: now,
            enabled: forced || (tty && total >= SHOW_FROM_BYTES),
        }
    }

    pub fn set(&mut self, done: u64) {
        if !self.enabled || self.last_draw.elapsed() < Duration::from_millis(200) {
            return;
        }
        self.last_draw = Instant::now();
        self.draw(done, false);
    }

    pub fn finish(&mut self, done: u64) {
        if self.enabled {
            self.draw(done, true);
        }
    }

    fn draw(&self, done: u64, last: bool) {
        let secs = self.started.elapsed().as_secs_f64().max(1e-6);
        let rate = human_bytes((done as f64 / secs) as u64);
        let percent = if self.total == 0 {
            100.0
        } else {
            done as f64 * 100.0 / self.total as f64
        };
        let width = 30usize;
        let filled = ((percent / 100.0) * width as f64) as usize;
        let bar: String = (0..width).map(|i| if i < filled { '#' } else { '.' }).collect();
        let mut err = std::io::stderr().lock();
        let _ = write!(
            err,
            "\r{} [{bar}] {percent:5.1}% {} / {} {rate}/s{}",
            self.label,
            human_bytes(done),
            human_bytes(self.total),
            if last { "\n" } else { "" }
        );
        let _ = err.flush();
    }
}
