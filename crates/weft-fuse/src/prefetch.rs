//! Write capabilities asked for in the background.
//!
//! A file's small writes are kept here until its close (see `behind`), and the first
//! request that carries them to the io servers needs a write capability from the
//! manager: one more round trip on the close's path for every file `tar x` makes. At
//! the first kept write of a file this mount created, one thread asks for it instead,
//! while the writer goes on (its next calls are answered here); by the close it is
//! usually held. Nothing changes in what is checked: the manager makes the same
//! permission check for the same handle, and a chmod or chown still revokes it.

use crate::open_file::OpenFile;
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};

/// Asks waiting at once; past this the asking is left to the writes themselves.
const WAITING_MAX: usize = 256;

#[derive(Default)]
pub struct Prefetch {
    /// The asking thread's queue, started at the first ask; `None` if it could not be.
    sender: Mutex<Option<SyncSender<Arc<OpenFile>>>>,
}

impl Prefetch {
    /// Asks for `open`'s write capability in the background (see the module docs).
    pub fn ask(&self, open: Arc<OpenFile>) {
        let mut sender = self.sender.lock().expect("prefetch queue poisoned");
        if sender.is_none() {
            let (tx, rx) = sync_channel::<Arc<OpenFile>>(WAITING_MAX);
            let started = std::thread::Builder::new()
                .name("weft-fuse-grants".into())
                .spawn(move || {
                    for open in rx {
                        open.file.prepare_writing();
                    }
                });
            if let Err(e) = started {
                eprintln!("weft-fuse: cannot start the capability thread ({e}); writes ask themselves");
                return;
            }
            *sender = Some(tx);
        }
        if let Some(tx) = sender.as_ref() {
            match tx.try_send(open) {
                Ok(()) | Err(TrySendError::Full(_)) => {}
                Err(TrySendError::Disconnected(_)) => *sender = None,
            }
        }
    }
}
