//! Files' sizes and data stamps asked by several threads at once share requests.
//!
//! Every open through the mount asks each io server of the file for its object's size
//! and change stamp (close-to-open: `Client::attr_stamped`). Many processes opening
//! small files at once (mdtest's read phase, a build) sent one `ObjStamp` per open to
//! every io server, though the request takes a list. Here, as a metadata manager's group
//! commit does: while one thread's requests are on their way, the threads that come meanwhile
//! queue their files; when its answers are in, one of them sends the whole queue, one
//! request per io server, and each takes its own answer.
//!
//! Freshness is as before: a file's requests are sent only after its caller queued it,
//! so every answer is from after the call began (what close-to-open asks of an open).
//! Files are batched only with files on the same servers (the same layout's servers, and
//! the cache tier or not), so a stalled server holds up only the files it holds, which
//! would wait for it anyway; a batch that fails is asked again file by file, so that one
//! file's unreachable server fails only the opens of files on it.

use crate::client::DataStamp;
use crate::error::ClientError;
use std::collections::HashMap;
use std::sync::{Condvar, Mutex};
use weft_layout::ServerId;
use weft_proto::Attr;

/// Most files in one batch; the rest wait for the next.
pub(crate) const BATCH_FILES_MAX: usize = 64;

/// What a batch answered for one file: its attributes with size, blocks and times
/// filled in, its data stamp, and whether its objects are gone from every server.
pub(crate) type Stamped = (Attr, Option<DataStamp>, bool);

enum Answer {
    Done(Stamped),
    /// A batch of this file alone failed so.
    Failed(ClientError),
    /// A batch of several failed: ask again alone.
    Alone,
}

/// Files batched together: on the same servers, in the cache tier or not.
type Key = (Vec<ServerId>, bool);

fn key_of(attr: &Attr) -> Key {
    (
        attr.layout
            .as_ref()
            .map(|l| l.servers.clone())
            .unwrap_or_default(),
        attr.cache.uses_tier(),
    )
}

#[derive(Default)]
struct Group {
    queue: Vec<(u64, Attr)>,
    /// A batch of the group is on its way.
    running: bool,
}

#[derive(Default)]
struct State {
    next_ticket: u64,
    /// Groups with files queued or a batch on its way (others are removed).
    groups: HashMap<Key, Group>,
    answers: HashMap<u64, Answer>,
}

impl State {
    /// The group's batch is over: the next may start; a group with nothing left goes.
    fn ended(&mut self, key: &Key) {
        if let Some(group) = self.groups.get_mut(key) {
            group.running = false;
            if group.queue.is_empty() {
                self.groups.remove(key);
            }
        }
    }
}

#[derive(Default)]
pub(crate) struct StampBatch {
    state: Mutex<State>,
    answered: Condvar,
}

/// Ends a batch whose requests panicked: its files are asked again alone, and the
/// next batch may start (the batch's own end clears `tickets`).
struct Running<'a> {
    batch: &'a StampBatch,
    key: &'a Key,
    tickets: Vec<u64>,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        if self.tickets.is_empty() {
            return;
        }
        let mut state = self.batch.lock();
        for ticket in self.tickets.drain(..) {
            state.answers.insert(ticket, Answer::Alone);
        }
        state.ended(self.key);
        drop(state);
        self.batch.answered.notify_all();
    }
}

impl StampBatch {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `attr` stamped by `ask` (which fills in sizes and stamps of a list of files, one
    /// request per io server), sent together with those of other threads asking
    /// meanwhile.
    pub(crate) fn ask(
        &self,
        attr: Attr,
        ask: impl Fn(&mut [Attr], &mut [Option<DataStamp>]) -> Result<Vec<bool>, ClientError>,
    ) -> Result<Stamped, ClientError> {
        let key = key_of(&attr);
        let mut state = self.lock();
        let ticket = state.next_ticket;
        state.next_ticket += 1;
        state
            .groups
            .entry(key.clone())
            .or_default()
            .queue
            .push((ticket, attr.clone()));
        loop {
            match state.answers.remove(&ticket) {
                Some(Answer::Done(stamped)) => return Ok(stamped),
                Some(Answer::Failed(e)) => return Err(e),
                Some(Answer::Alone) => {
                    drop(state);
                    return stamp_alone(attr, &ask);
                }
                None => {}
            }
            // Unanswered, the file is queued in its group, which is there until then.
            let group = state.groups.entry(key.clone()).or_default();
            if group.running {
                state = self.answered.wait(state).unwrap_or_else(|e| e.into_inner());
                continue;
            }
            // No batch on its way: this thread sends the oldest files queued (its own is
            // among them, or in a later batch it sends: queued and not answered, it is
            // still in the queue, which nothing else takes from).
            group.running = true;
            let take = group.queue.len().min(BATCH_FILES_MAX);
            let batch: Vec<(u64, Attr)> = group.queue.drain(..take).collect();
            drop(state);
            let mut running = Running {
                batch: self,
                key: &key,
                tickets: batch.iter().map(|(t, _)| *t).collect(),
            };
            let (tickets, mut attrs): (Vec<u64>, Vec<Attr>) = batch.into_iter().unzip();
            let mut stamps = vec![None; attrs.len()];
            let answers = ask(&mut attrs, &mut stamps);
            let mut ended = self.lock();
            match answers {
                Ok(missing) if missing.len() == tickets.len() => {
                    for (((ticket, attr), stamp), missing) in
                        tickets.into_iter().zip(attrs).zip(stamps).zip(missing)
                    {
                        ended.answers.insert(ticket, Answer::Done((attr, stamp, missing)));
                    }
                }
                // Failed: a file alone has its answer (asked again, an unreachable server
                // would cost a second timeout); each of several is asked again alone.
                Err(e) if tickets.len() == 1 => {
                    ended.answers.insert(tickets[0], Answer::Failed(e));
                }
                _ => {
                    for ticket in tickets {
                        ended.answers.insert(ticket, Answer::Alone);
                    }
                }
            }
            // Answered and ended under one lock: the guard has nothing left to do.
            ended.ended(&key);
            running.tickets.clear();
            drop(ended);
            self.answered.notify_all();
            drop(running);
            state = self.lock();
        }
    }
}

fn stamp_alone(
    attr: Attr,
    ask: &impl Fn(&mut [Attr], &mut [Option<DataStamp>]) -> Result<Vec<bool>, ClientError>,
) -> Result<Stamped, ClientError> {
    let mut attrs = [attr];
    let mut stamps = [None];
    let missing = ask(&mut attrs, &mut stamps)?;
    let [attr] = attrs;
    let [stamp] = stamps;
    Ok((attr, stamp, missing.first().copied().unwrap_or(false)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Barrier};
    use weft_layout::{CacheMode, InodeId};
    use weft_proto::{FileKind, Timespec};

    fn file(inode: u64) -> Attr {
        Attr {
            inode: InodeId(inode),
            kind: FileKind::File,
            mode: 0o644,
            uid: 0,
            gid: 0,
            nlink: 1,
            size: 0,
            atime: Timespec::default(),
            mtime: Timespec::default(),
            ctime: Timespec::default(),
            layout: None,
            cache: CacheMode::default(),
            dir_layout: None,
            rdev: 0,
            blocks: 0,
        }
    }

    /// Threads asking while a batch is on its way are sent together in the next one,
    /// each answered with its own file; a failed batch is asked again file by file.
    #[test]
    fn asks_meanwhile_share_the_next_batch_and_a_failed_batch_goes_file_by_file() {
        let batch = Arc::new(StampBatch::default());
        let calls = Arc::new(AtomicUsize::new(0));
        let threads = 6;
        let started = Arc::new(Barrier::new(threads + 1));
        let release = Arc::new(Barrier::new(2));
        // Thread 0's batch is held until every other thread has queued.
        let first = {
            let (batch, calls, release) = (batch.clone(), calls.clone(), release.clone());
            std::thread::spawn(move || {
                batch
                    .ask(file(100), |attrs, _| {
                        calls.fetch_add(1, Ordering::SeqCst);
                        release.wait();
                        attrs[0].size = 100;
                        Ok(vec![false])
                    })
                    .unwrap()
            })
        };
        let key = key_of(&file(100));
        while !batch.lock().groups.get(&key).is_some_and(|g| g.running) {
            std::thread::yield_now();
        }
        let others: Vec<_> = (1..=threads as u64)
            .map(|k| {
                let (batch, calls, started) = (batch.clone(), calls.clone(), started.clone());
                std::thread::spawn(move || {
                    started.wait();
                    batch
                        .ask(file(100 + k), |attrs, _| {
                            calls.fetch_add(1, Ordering::SeqCst);
                            for a in attrs.iter_mut() {
                                a.size = a.inode.0;
                            }
                            Ok(vec![false; attrs.len()])
                        })
                        .unwrap()
                })
            })
            .collect();
        started.wait();
        while batch.lock().groups.get(&key).map_or(0, |g| g.queue.len()) < threads {
            std::thread::yield_now();
        }
        release.wait();
        assert_eq!(first.join().unwrap().0.size, 100);
        for (k, t) in others.into_iter().enumerate() {
            let (attr, _, missing) = t.join().unwrap();
            assert_eq!(
                attr.size,
                101 + k as u64,
                "each thread gets its own file's answer"
            );
            assert!(!missing);
        }
        assert_eq!(
            calls.load(Ordering::SeqCst),
            2,
            "one batch for the 6 that came meanwhile"
        );

        // A failing batch of two: each asked again alone.
        let fails = Arc::new(AtomicUsize::new(0));
        let f = fails.clone();
        let ask = move |attrs: &mut [Attr], _: &mut [Option<DataStamp>]| {
            if attrs.len() > 1 {
                f.fetch_add(1, Ordering::SeqCst);
                return Err(ClientError::refused(weft_proto::ErrorCode::Io, "down"));
            }
            attrs[0].size = 7;
            Ok(vec![false])
        };
        batch
            .lock()
            .groups
            .entry(key.clone())
            .or_default()
            .queue
            .push((u64::MAX, file(1)));
        let (attr, _, _) = batch.ask(file(2), &ask).unwrap();
        assert_eq!(attr.size, 7);
        assert_eq!(fails.load(Ordering::SeqCst), 1);
        assert!(matches!(
            batch.lock().answers.remove(&u64::MAX),
            Some(Answer::Alone)
        ));
    }

    /// A batch held up (a stalled io server) holds up only files on the same servers:
    /// a file on other servers is sent at once, in a batch of its own. Fails if every
    /// file waited for the one batch on its way.
    #[test]
    fn a_batch_on_its_way_holds_up_only_files_on_the_same_servers() {
        use weft_layout::{Layout, ServerId};
        let on = |inode: u64, server: u32| Attr {
            layout: Some(Layout {
                stripe_size_bytes: 65536,
                servers: vec![ServerId(server)],
            }),
            ..file(inode)
        };
        let batch = Arc::new(StampBatch::default());
        let release = Arc::new(Barrier::new(2));
        let stalled = {
            let (batch, release) = (batch.clone(), release.clone());
            std::thread::spawn(move || {
                batch
                    .ask(on(1, 1), |_, _| {
                        release.wait();
                        Ok(vec![false])
                    })
                    .unwrap()
            })
        };
        while !batch
            .lock()
            .groups
            .get(&key_of(&on(1, 1)))
            .is_some_and(|g| g.running)
        {
            std::thread::yield_now();
        }
        // Answered while server 1's batch is still out (else this never returns).
        let (other, _, _) = batch
            .ask(on(2, 2), |attrs, _| {
                attrs[0].size = 22;
                Ok(vec![false])
            })
            .unwrap();
        assert_eq!(other.size, 22);
        release.wait();
        stalled.join().unwrap();
        assert!(batch.lock().groups.is_empty(), "groups with nothing queued go");
    }
}
