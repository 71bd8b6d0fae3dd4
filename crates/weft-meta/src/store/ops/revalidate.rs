//! `revalidate`: checks that a path a client resolved earlier still holds, name by name,
//! in one snapshot. A mount runs it when a cached name is used to open a file, so that a
//! name another client removed, renamed or replaced is looked up afresh.

use super::super::access::MAY_EXECUTE;
use super::super::names::check_name;
use super::super::{MetaStore, Namespace};
use super::child_record;
use weft_proto::msg::REVALIDATE_STEPS_MAX;
use weft_proto::{Attr, Cred, ErrorCode, PathStep, WireError};

impl MetaStore {
    /// The attributes of the last step's child, if every step still holds: `parent` is
    /// a directory the caller may search and its entry `name` names `child`. `Stale`
    /// names the first step that no longer holds.
    pub fn revalidate(&self, cred: &Cred, steps: &[PathStep]) -> Result<Attr, WireError> {
        if steps.is_empty() || steps.len() > REVALIDATE_STEPS_MAX {
            return Err(WireError::new(
                ErrorCode::InvalidArgument,
                format!(
                    "a revalidated path has 1 to {REVALIDATE_STEPS_MAX} steps, not {}",
                    steps.len()
                ),
            ));
        }
        for step in steps {
            check_name(step.name.as_bytes())?;
        }
        self.read(|ns| {
            for step in steps {
                let stale = || {
                    WireError::new(
                        ErrorCode::Stale,
                        format!(
                            "entry {:?} of directory {} no longer names inode {}",
                            step.name, step.parent, step.child
                        ),
                    )
                };
                let found = match ns.directory(cred, step.parent, MAY_EXECUTE) {
                    Ok(_) => ns.entry(step.parent, step.name.as_bytes())?,
                    Err(e) if matches!(e.code, ErrorCode::Stale | ErrorCode::NotDirectory) => {
                        return Err(stale())
                    }
                    Err(e) => return Err(e),
                };
                if found.map(|(child, _)| child) != Some(step.child) {
                    return Err(stale());
                }
            }
            let last = steps.last().expect("checked non-empty");
            Ok(child_record(ns, last.parent, last.name.as_bytes(), last.child)?.attr(last.child))
        })
    }
}
