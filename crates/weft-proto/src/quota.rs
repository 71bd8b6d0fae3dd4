//! Quotas: the limits a manager keeps per user, group and project, the usage it counts
//! against them, and the pure rule of when an allocation is refused (Lustre's and
//! ext4's soft limit with a grace period, hard limit at once).
//!
//! A limit of 0 means none. Usage counts inodes (every file, directory and symlink an
//! id owns) and bytes (the bytes allocated on the io servers for its files' objects,
//! as `du` counts them, every copy of a replicated file included). An id over its soft
//! limit is refused once it has stayed over it for the grace period; over its hard
//! limit, at once. Refusals are `ErrorCode::QuotaExceeded` (errno EDQUOT).

use weft_wire_derive::Wire;

/// Whose quota: a file is charged to its owner, its group and its project.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Wire)]
#[wire(tag_what = "quota kind")]
#[repr(u8)]
pub enum QuotaKind {
    User = 0,
    Group = 1,
    Project = 2,
}

impl QuotaKind {
    pub const ALL: [QuotaKind; 3] = [QuotaKind::User, QuotaKind::Group, QuotaKind::Project];

    /// "user", "group", "project".
    pub fn name(self) -> &'static str {
        match self {
            QuotaKind::User => "user",
            QuotaKind::Group => "group",
            QuotaKind::Project => "project",
        }
    }
}

/// Grace period of soft limits until one is set (Lustre's default: a week).
pub const GRACE_DEFAULT_S: u64 = 7 * 24 * 3600;
/// Longest grace period accepted (ten years).
pub const GRACE_MAX_S: u64 = 10 * 365 * 24 * 3600;

/// An id's limits; 0 is no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Wire)]
pub struct QuotaLimits {
    pub bytes_soft: u64,
    pub bytes_hard: u64,
    pub inodes_soft: u64,
    pub inodes_hard: u64,
}

impl QuotaLimits {
    /// No limit at all.
    pub fn is_none(&self) -> bool {
        *self == QuotaLimits::default()
    }

    /// A soft limit above its hard limit is refused (a clear error for the caller).
    pub fn check(&self) -> Result<(), String> {
        for (what, soft, hard) in [
            ("bytes", self.bytes_soft, self.bytes_hard),
            ("files", self.inodes_soft, self.inodes_hard),
        ] {
            if soft != 0 && hard != 0 && soft > hard {
                return Err(format!(
                    "soft limit of {what} ({soft}) is above its hard limit ({hard})"
                ));
            }
        }
        Ok(())
    }
}

/// An id's usage and since when it is over each soft limit (Unix ms, 0: not over).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Wire)]
pub struct QuotaUsage {
    pub bytes: u64,
    pub inodes: u64,
    pub bytes_over_since_ms: u64,
    pub inodes_over_since_ms: u64,
}

/// Grace periods of one kind's soft limits (seconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Wire)]
pub struct QuotaGrace {
    pub bytes_s: u64,
    pub inodes_s: u64,
}

impl Default for QuotaGrace {
    fn default() -> Self {
        QuotaGrace {
            bytes_s: GRACE_DEFAULT_S,
            inodes_s: GRACE_DEFAULT_S,
        }
    }
}

/// `QuotaGet`, `QuotaSet`: one id's quota as the manager holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Wire)]
pub struct QuotaReport {
    pub kind: QuotaKind,
    pub id: u32,
    pub limits: QuotaLimits,
    pub usage: QuotaUsage,
    pub grace: QuotaGrace,
    /// The manager's clock when it answered (Unix ms), for the grace left.
    pub now_ms: u64,
}

/// Bytes or inodes, for messages and the grace rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    Bytes,
    Inodes,
}

impl QuotaUsage {
    fn of(&self, resource: Resource) -> (u64, u64) {
        match resource {
            Resource::Bytes => (self.bytes, self.bytes_over_since_ms),
            Resource::Inodes => (self.inodes, self.inodes_over_since_ms),
        }
    }

    /// Sets the usage of `resource` to `value` at `now_ms`, starting or ending the
    /// time over the soft limit of `limits`.
    pub fn set(&mut self, resource: Resource, value: u64, limits: &QuotaLimits, now_ms: u64) {
        let (soft, count, since) = match resource {
            Resource::Bytes => (limits.bytes_soft, &mut self.bytes, &mut self.bytes_over_since_ms),
            Resource::Inodes => (
                limits.inodes_soft,
                &mut self.inodes,
                &mut self.inodes_over_since_ms,
            ),
        };
        *count = value;
        if soft == 0 || value <= soft {
            *since = 0;
        } else if *since == 0 {
            *since = now_ms.max(1);
        }
    }
}

/// Why `adding` more of `resource` is refused for an id with `limits` and `usage`, or
/// `None` if it is not: the hard limit would be passed, or the usage has been over the
/// soft limit longer than the grace period. `adding` 0 asks whether the id may go on
/// writing at all (a hard limit reached refuses it).
pub fn refusal(
    resource: Resource,
    adding: u64,
    limits: &QuotaLimits,
    usage: &QuotaUsage,
    grace: &QuotaGrace,
    now_ms: u64,
) -> Option<String> {
    let (hard, soft, grace_s) = match resource {
        Resource::Bytes => (limits.bytes_hard, limits.bytes_soft, grace.bytes_s),
        Resource::Inodes => (limits.inodes_hard, limits.inodes_soft, grace.inodes_s),
    };
    let (used, since) = usage.of(resource);
    let what = match resource {
        Resource::Bytes => "bytes",
        Resource::Inodes => "files",
    };
    let after = used.saturating_add(adding.max(1));
    if hard != 0 && after > hard {
        return Some(format!("{used} {what} used of a hard limit of {hard}"));
    }
    if soft != 0 && used >= soft && since != 0 && now_ms >= since.saturating_add(grace_s.saturating_mul(1000))
    {
        return Some(format!(
            "{used} {what} used, over the soft limit of {soft} for longer than the grace period of {grace_s} s"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(soft: u64, hard: u64) -> QuotaLimits {
        QuotaLimits {
            bytes_soft: soft,
            bytes_hard: hard,
            inodes_soft: soft,
            inodes_hard: hard,
        }
    }

    #[test]
    fn hard_limits_refuse_the_allocation_that_passes_them() {
        let l = limits(0, 3);
        let grace = QuotaGrace::default();
        let mut u = QuotaUsage::default();
        for used in 0..3 {
            u.set(Resource::Inodes, used, &l, 10);
            assert_eq!(
                refusal(Resource::Inodes, 1, &l, &u, &grace, 10),
                None,
                "at {used}"
            );
        }
        u.set(Resource::Inodes, 3, &l, 10);
        assert!(refusal(Resource::Inodes, 1, &l, &u, &grace, 10).is_some());
        // Writing at all: refused once the hard limit is reached.
        u.set(Resource::Bytes, 3, &l, 10);
        assert!(refusal(Resource::Bytes, 0, &l, &u, &grace, 10).is_some());
        u.set(Resource::Bytes, 2, &l, 10);
        assert_eq!(refusal(Resource::Bytes, 0, &l, &u, &grace, 10), None);
    }

    #[test]
    fn soft_limits_refuse_only_after_the_grace_period() {
        let l = limits(2, 0);
        let grace = QuotaGrace {
            bytes_s: 5,
            inodes_s: 5,
        };
        let mut u = QuotaUsage::default();
        u.set(Resource::Inodes, 3, &l, 1_000);
        assert_eq!(u.inodes_over_since_ms, 1_000);
        assert_eq!(refusal(Resource::Inodes, 1, &l, &u, &grace, 5_999), None);
        assert!(refusal(Resource::Inodes, 1, &l, &u, &grace, 6_000).is_some());
        // Still over: the clock keeps running from the first time.
        u.set(Resource::Inodes, 4, &l, 7_000);
        assert_eq!(u.inodes_over_since_ms, 1_000);
        // Back under: the grace starts afresh next time.
        u.set(Resource::Inodes, 2, &l, 8_000);
        assert_eq!(u.inodes_over_since_ms, 0);
        assert_eq!(refusal(Resource::Inodes, 1, &l, &u, &grace, 9_000), None);
    }

    #[test]
    fn no_limit_never_refuses_and_soft_above_hard_is_refused() {
        let u = QuotaUsage {
            bytes: u64::MAX,
            inodes: u64::MAX,
            ..Default::default()
        };
        let grace = QuotaGrace::default();
        assert_eq!(
            refusal(Resource::Bytes, 1, &QuotaLimits::default(), &u, &grace, 1),
            None
        );
        assert!(limits(5, 4).check().is_err());
        assert!(limits(4, 4).check().is_ok());
        assert!(limits(5, 0).check().is_ok());
    }
}
