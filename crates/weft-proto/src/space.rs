//! The space a full file system keeps, agreed between the metadata manager and the io
//! servers: no user can fill a file system so far that removing files (which is how
//! space comes back) fails for everyone.
//!
//! The manager refuses operations that grow its database (creates, mkdir, links,
//! xattrs) once less than [`meta_reserve_bytes`] of its file system is free; removals
//! and renames still commit into that room. An io server refuses writes once less than
//! [`io_reserve_bytes`] of its file system is free, twice the manager's share, so that
//! when data and database share a file system (`weft up`'s default home) data never
//! takes the manager's room. As ext4 keeps blocks for root.

const MIB: u64 = 1 << 20;

/// Bytes of a file system of `total` bytes kept for the metadata manager's removals:
/// 2 % of it, at least 1 MiB and at most 64 MiB, and never more than a quarter of a
/// tiny one.
pub fn meta_reserve_bytes(total: u64) -> u64 {
    (total / 50).clamp(MIB, 64 * MIB).min(total / 4)
}

/// Free bytes under which an io server refuses writes: twice the manager's share.
pub fn io_reserve_bytes(total: u64) -> u64 {
    2 * meta_reserve_bytes(total)
}

/// "12.0 MiB", for the messages that tell how much is free and kept.
pub fn human(bytes: u64) -> String {
    if bytes >= MIB {
        format!("{:.1} MiB", bytes as f64 / MIB as f64)
    } else {
        format!("{} KiB", bytes / 1024)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reserve_scales_with_the_file_system_and_the_io_servers_keep_more() {
        assert_eq!(meta_reserve_bytes(8 * MIB), MIB);
        assert_eq!(meta_reserve_bytes(2 * MIB), MIB / 2);
        assert_eq!(meta_reserve_bytes(1000 * MIB), 20 * MIB);
        assert_eq!(meta_reserve_bytes(1 << 40), 64 * MIB);
        for total in [0, MIB, 20 * MIB, 1 << 40] {
            assert!(io_reserve_bytes(total) >= meta_reserve_bytes(total));
        }
    }
}
