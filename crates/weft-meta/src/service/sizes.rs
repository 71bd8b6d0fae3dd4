//! The measurer: asks the io servers for the sizes of files that became quiet, and
//! keeps them under the manager's vouch (see `crate::sizes`).

use super::*;
use crate::sizes::Measured;
use weft_proto::{ObjStamped, Striping};

/// How long the measurer gathers releases before a round: files closed together are
/// asked about in one request per io server.
const GATHER: Duration = Duration::from_millis(10);

/// Handle of the measurer thread: stops it when dropped.
pub struct MeasurerHandle {
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for MeasurerHandle {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl MetaService {
    /// Starts the measurer: rounds of `measure_sizes` while files become quiet, until
    /// the handle or the service is dropped.
    pub fn spawn_measurer(self: &Arc<Self>) -> MeasurerHandle {
        let service: Weak<MetaService> = Arc::downgrade(self);
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::Builder::new()
            .name("weft-meta-sizes".into())
            .spawn(move || loop {
                if stopping.load(Ordering::Relaxed) {
                    return;
                }
                let Some(service) = service.upgrade() else {
                    return;
                };
                let first = service.sizes.take(Duration::from_millis(200));
                if first.is_empty() {
                    continue;
                }
                std::thread::sleep(GATHER);
                let mut inodes = first;
                inodes.extend(service.sizes.take(Duration::ZERO));
                service.measure_sizes(&inodes);
            })
            .expect("spawning the size measurer");
        MeasurerHandle {
            stop,
            thread: Some(thread),
        }
    }

    /// Measures `inodes` (files that became quiet): their vouches first, then one
    /// `ObjStamp` per io server for all of them, and keeps each answer whose vouch did
    /// not move meanwhile. Returns the files whose sizes are now known.
    pub fn measure_sizes(&self, inodes: &[InodeId]) -> usize {
        let Some(writers) = self.writers.get() else {
            return 0;
        };
        let now = unix_ms();
        let vouched: Vec<(InodeId, u64)> = inodes
            .iter()
            .filter_map(|&inode| writers.vouch(inode, now).map(|v| (inode, v)))
            .collect();
        if vouched.is_empty() {
            return 0;
        }
        let only: Vec<InodeId> = vouched.iter().map(|(i, _)| *i).collect();
        let files = match self.store.file_layouts(&only) {
            Ok(files) => files,
            Err(error) => {
                eprintln!("weftd meta: reading the layouts of files to measure: {error}");
                return 0;
            }
        };
        let vouch_of: HashMap<InodeId, u64> = vouched.into_iter().collect();
        // Per io server, (file index, object striping) of each object there.
        let mut by_server: BTreeMap<ServerId, Vec<(usize, Striping)>> = BTreeMap::new();
        for (k, (_, layout)) in files.iter().enumerate() {
            // A replicated file's slot is asked of its first fresh copy: a stale one
            // missed writes (a failure leaves the file unmeasured; stats then ask).
            for index in 0..layout.servers.len() {
                let server = layout.fresh_slot_servers(index)[0];
                by_server.entry(server).or_default().push((
                    k,
                    Striping {
                        stripe_size_bytes: layout.stripe_size_bytes,
                        stripe_count: layout.servers.len() as u32,
                        server_index: index as u32,
                    },
                ));
            }
        }
        let answers: Vec<Mutex<Vec<ObjStamped>>> = files.iter().map(|_| Mutex::new(Vec::new())).collect();
        let failed: Vec<std::sync::atomic::AtomicBool> = files
            .iter()
            .map(|_| std::sync::atomic::AtomicBool::new(false))
            .collect();
        let servers: Vec<ServerId> = by_server.keys().copied().collect();
        self.on_each_server(&servers, |server| {
            let objects = &by_server[&server];
            for batch in objects.chunks(BATCH_INODES_MAX) {
                let items: Vec<(InodeId, Striping)> = batch.iter().map(|(k, s)| (files[*k].0, *s)).collect();
                match self.objects.object_stamps(server, &items) {
                    Ok(stamped) => {
                        for ((k, _), object) in batch.iter().zip(stamped) {
                            answers[*k].lock().unwrap_or_else(|p| p.into_inner()).push(object);
                        }
                    }
                    Err(_) => {
                        // Not known then: its stats ask the io servers, as before.
                        for (k, _) in batch {
                            failed[*k].store(true, Ordering::Relaxed);
                        }
                    }
                }
            }
            Ok(())
        });
        let now = unix_ms();
        let mut known = 0;
        for (k, (inode, layout)) in files.into_iter().enumerate() {
            let objects = answers[k].lock().unwrap_or_else(|p| p.into_inner()).clone();
            if failed[k].load(Ordering::Relaxed) || objects.len() != layout.servers.len() {
                continue;
            }
            let vouch = vouch_of[&inode];
            // The vouch taken before asking, still the same after the answers: no
            // write capability was granted, nor a size or time set, in between.
            if writers.vouch(inode, now) != Some(vouch) {
                continue;
            }
            if let Some(measured) = Measured::of(vouch, layout, &objects) {
                self.sizes.learnt(inode, measured);
                known += 1;
            }
        }
        known
    }

    /// Files whose sizes are known, stats answered with one, files measured.
    pub fn size_counts(&self) -> (usize, u64, u64) {
        self.sizes.counts()
    }
}
