//! What a mount (and the FUSE floor) asks the kernel for at INIT: the largest request
//! and the requests kept in flight in the background.

use fuser::KernelConfig;

/// Largest read or write request the kernel sends (`max_write`, and readahead): 4 MiB,
/// 1 MiB per io server of a default layout, where 1 MiB requests gave 0.2-0.3x the
/// native client's sequential read (each request pays a kernel round trip and a
/// fan-out to the servers). Kernels cap it at `fs.fuse.max_pages_limit` pages (256,
/// 1 MiB, unless raised: a root mount raises it, see `mount`).
pub const REQUEST_BYTES_MAX: u32 = 4 << 20;

/// Requests the kernel keeps in flight in the background (readahead, async reads).
const BACKGROUND_REQUESTS_MAX: u16 = 64;

/// The request size and background limits a Weft mount (and the FUSE floor) asks the
/// kernel for at INIT. Each is best effort: an older kernel keeps its own limit.
pub(crate) fn request_limits(config: &mut KernelConfig) {
    let _ = config.set_max_write(REQUEST_BYTES_MAX);
    let _ = config.set_max_readahead(REQUEST_BYTES_MAX);
    let _ = config.set_max_background(BACKGROUND_REQUESTS_MAX);
    let _ = config.set_congestion_threshold(BACKGROUND_REQUESTS_MAX * 3 / 4);
}

/// Whether the mount makes a read pool (`weft_rpc::shm::Pool`): unless
/// `WEFT_READ_POOL=0` (or the transport is forced off shared memory,
/// `WEFT_TRANSPORT=unix|tcp`, which `Pool::install` heeds).
pub(crate) fn read_pool_wanted() -> bool {
    std::env::var("WEFT_READ_POOL").as_deref() != Ok("0")
}
