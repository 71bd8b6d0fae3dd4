//! Extent locks held by this client (MPI-IO's atomic mode): the file's byte ranges of
//! an access locked at every io server holding some of them, shared for reads and
//! exclusive for writes, and released after the access (see weft-iod's `extent_lock`).
//!
//! Deadlock is avoided by order: every client takes a file's locks server by server in
//! increasing `ServerId`, holding what it has while it waits for the next, so no two
//! clients wait for each other in a cycle. A server never parks a request: a conflict is
//! answered `Busy`, and the client tries again after a growing pause, up to its request
//! timeout, then gives up with an error (never a hang). Locks go with the connection:
//! a client that dies loses them.

use crate::error::ClientError;
use crate::file::File;
use std::time::{Duration, Instant};
use weft_proto::msg::{LockStats, Request, Response, LOCK_RANGES_MAX};
use weft_proto::{ErrorCode, Range};

const RETRY_PAUSE_MIN: Duration = Duration::from_micros(50);
const RETRY_PAUSE_MAX: Duration = Duration::from_millis(5);

/// Locks held on one file; released by [`ExtentLock::release`] (or, failing that, when
/// dropped).
#[must_use = "an extent lock is held until released"]
pub struct ExtentLock<'a> {
    file: &'a File,
    /// (io server index in the file's layout, token), in the order taken.
    held: Vec<(usize, u64)>,
}

/// `ranges` (file offset, length) cut by the file's striping: per io server index, the
/// sorted, merged file ranges it holds, at most `LOCK_RANGES_MAX` (the closest merged
/// first: a lock may cover more bytes than the access, never fewer).
pub fn ranges_per_server(
    layout: &weft_layout::Layout,
    ranges: &[(u64, u64)],
) -> Result<Vec<Vec<Range>>, ClientError> {
    let mut per: Vec<Vec<(u64, u64)>> = vec![Vec::new(); layout.servers.len()];
    for &(offset, len) in ranges.iter().filter(|r| r.1 > 0) {
        let pieces = layout
            .pieces(offset, len)
            .map_err(|e| ClientError::InvalidArgument(format!("locking bytes at {offset}: {e}")))?;
        for p in pieces {
            per[p.server_index].push((p.file_offset, p.len));
        }
    }
    Ok(per.into_iter().map(|v| merged(v, LOCK_RANGES_MAX)).collect())
}

/// Sorts and merges `v` where ranges touch or overlap, then closes the smallest gaps
/// until at most `max` ranges remain.
fn merged(mut v: Vec<(u64, u64)>, max: usize) -> Vec<Range> {
    v.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(v.len());
    for (offset, len) in v {
        match out.last_mut() {
            Some(last) if offset <= last.0 + last.1 => {
                let end = (last.0 + last.1).max(offset + len);
                last.1 = end - last.0;
            }
            _ => out.push((offset, len)),
        }
    }
    if out.len() > max {
        // Close exactly the `len - max` smallest gaps (ties by position).
        let mut gaps: Vec<(u64, usize)> = out
            .windows(2)
            .enumerate()
            .map(|(i, w)| (w[1].0 - (w[0].0 + w[0].1), i))
            .collect();
        gaps.sort_unstable();
        let mut close = vec![false; out.len()];
        for &(_, i) in &gaps[..out.len() - max] {
            close[i + 1] = true;
        }
        let mut closed: Vec<(u64, u64)> = Vec::with_capacity(max);
        for (i, (offset, len)) in out.into_iter().enumerate() {
            match closed.last_mut() {
                Some(last) if close[i] => last.1 = offset + len - last.0,
                _ => closed.push((offset, len)),
            }
        }
        out = closed;
    }
    debug_assert!(out.len() <= max);
    out.into_iter()
        .map(|(offset, len)| Range { offset, len })
        .collect()
}

impl File {
    /// Locks the file bytes `ranges` (file offset, length): `exclusive` for a write,
    /// shared for a read. Waits while others hold overlapping locks, up to the client's
    /// request timeout; then fails with `TimedOut`, holding nothing.
    pub fn lock_extents(
        &self,
        ranges: &[(u64, u64)],
        exclusive: bool,
    ) -> Result<ExtentLock<'_>, ClientError> {
        let layout = self
            .attr()
            .layout
            .as_ref()
            .expect("checked when the file was opened");
        let per = ranges_per_server(layout, ranges)?;
        let mut order: Vec<usize> = (0..per.len()).filter(|&i| !per[i].is_empty()).collect();
        order.sort_by_key(|&i| layout.servers[i]);
        let mut lock = ExtentLock {
            file: self,
            held: Vec::with_capacity(order.len()),
        };
        let timeout = self.inner.pool.timeouts().request;
        let deadline = Instant::now() + timeout;
        for index in order {
            let token = self.lock_on(index, &per[index], exclusive, deadline, timeout)?;
            lock.held.push((index, token));
        }
        Ok(lock)
    }

    fn lock_on(
        &self,
        index: usize,
        ranges: &[Range],
        exclusive: bool,
        deadline: Instant,
        timeout: Duration,
    ) -> Result<u64, ClientError> {
        let addr = &self.io_addrs[index];
        let mut pause = RETRY_PAUSE_MIN;
        let mut attempt = 0u32;
        loop {
            let request = Request::ExtentLock {
                inode: self.attr().inode,
                exclusive,
                attempt,
                ranges: ranges.to_vec(),
            };
            match self.inner.pool.call(addr, &request, &[]) {
                Ok((Response::Token(token), _)) => return Ok(token),
                Ok((other, _)) => return Err(crate::error::unexpected(&other)),
                Err(e) => {
                    let e = ClientError::from(e);
                    if e.code() != ErrorCode::Busy {
                        return Err(e.context(&self.path));
                    }
                    if Instant::now() >= deadline {
                        return Err(ClientError::refused(
                            ErrorCode::TimedOut,
                            format!(
                                "{}: waited {} ms (the client's timeout) for an extent lock at io server {addr}: {}",
                                self.path,
                                timeout.as_millis(),
                                match e {
                                    ClientError::Refused { message, .. } => message,
                                    other => other.to_string(),
                                }
                            ),
                        ));
                    }
                }
            }
            attempt = attempt.saturating_add(1);
            // A pause with some jitter, so that waiting clients do not retry in step.
            let jitter = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos() as u64)
                % (pause.as_nanos() as u64 + 1);
            let sleep = pause / 2 + Duration::from_nanos(jitter / 2);
            std::thread::sleep(sleep.min(deadline.saturating_duration_since(Instant::now())));
            pause = (pause * 2).min(RETRY_PAUSE_MAX);
        }
    }
}

impl crate::Client {
    /// Each io server's extent-lock counts since it started: (address, counts), in the
    /// cluster description's order.
    pub fn lock_stats(&self) -> Result<Vec<(String, LockStats)>, ClientError> {
        self.inner
            .cluster()
            .io_servers
            .iter()
            .map(|s| {
                let addr = self.inner.io_addr(s.id)?;
                match self.inner.pool.call(&addr, &Request::LockStats, &[]) {
                    Ok((Response::LockStats(st), _)) => Ok((addr, st)),
                    Ok((other, _)) => Err(crate::error::unexpected(&other)),
                    Err(e) => Err(ClientError::from(e)),
                }
            })
            .collect()
    }
}

impl ExtentLock<'_> {
    /// Io servers holding a part of this lock.
    pub fn servers(&self) -> usize {
        self.held.len()
    }

    /// Releases every part of the lock. An error (a part that lapsed, or whose
    /// connection broke while it was held) means another client may have reached the
    /// bytes meanwhile: the access was not atomic.
    pub fn release(mut self) -> Result<(), ClientError> {
        self.release_all()
    }

    fn release_all(&mut self) -> Result<(), ClientError> {
        let mut first = Ok(());
        while let Some((index, token)) = self.held.pop() {
            let request = Request::ExtentUnlock {
                inode: self.file.attr().inode,
                token,
            };
            let result = match self
                .file
                .inner
                .pool
                .call(&self.file.io_addrs[index], &request, &[])
            {
                Ok((Response::Done, _)) => Ok(()),
                Ok((other, _)) => Err(crate::error::unexpected(&other)),
                Err(e) => Err(ClientError::from(e).context(&self.file.path)),
            };
            if first.is_ok() {
                first = result;
            }
        }
        first
    }
}

impl Drop for ExtentLock<'_> {
    fn drop(&mut self) {
        // Released on every path, errors included; a failed unlock here has no one to
        // tell, and the server drops the lock with the connection in any case.
        let _ = self.release_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_layout::ServerId;

    fn layout(servers: usize, stripe: u64) -> weft_layout::Layout {
        weft_layout::Layout {
            stripe_size_bytes: stripe,
            servers: (0..servers as u32).map(ServerId).collect(),
            replication: Default::default(),
        }
    }

    fn naive_cover(per: &[Vec<Range>], byte: u64, stripe: u64, servers: u64) -> bool {
        let server = ((byte / stripe) % servers) as usize;
        per[server]
            .iter()
            .any(|r| r.offset <= byte && byte < r.offset + r.len)
    }

    #[test]
    fn every_byte_is_locked_at_its_server() {
        let l = layout(3, 10);
        let ranges = [(5u64, 30u64), (47, 2), (100, 1), (31, 4)];
        let per = ranges_per_server(&l, &ranges).unwrap();
        for &(o, n) in &ranges {
            for b in o..o + n {
                assert!(naive_cover(&per, b, 10, 3), "byte {b}");
            }
        }
        // Server 0 holds stripes 0, 3, 6, 9, ...: [5,10) and [30,35); [100,101) on 1.
        assert_eq!(
            per[0],
            vec![Range { offset: 5, len: 5 }, Range { offset: 30, len: 5 }]
        );
        assert_eq!(per[1].last(), Some(&Range { offset: 100, len: 1 }));
    }

    #[test]
    fn too_many_ranges_close_the_smallest_gaps() {
        let mut v: Vec<(u64, u64)> = (0..5000u64).map(|i| (i * 10 + (i % 7), 1)).collect();
        v.reverse();
        let m = merged(v.clone(), 100);
        assert_eq!(m.len(), 100);
        for (o, _) in v {
            assert!(m.iter().any(|r| r.offset <= o && o < r.offset + r.len));
        }
        assert_eq!(
            merged(vec![(0, 5), (5, 5), (20, 1)], 1),
            vec![Range { offset: 0, len: 21 }]
        );
    }
}
