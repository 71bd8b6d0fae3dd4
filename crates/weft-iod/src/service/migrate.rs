//! `MigrateObject`: the steps of a migration at this server (`crate::migrate` says
//! what each does and why).

use super::*;
use weft_proto::msg::migrate_step;

impl IoService {
    /// The name an object is set aside under while its file migrates.
    pub(super) fn set_aside(&self, inode: InodeId) -> std::path::PathBuf {
        self.objects.path_of(inode).with_extension("migrated")
    }

    pub(super) fn migrate_object(
        &self,
        inode: InodeId,
        temp: InodeId,
        striping: Option<Striping>,
        step: u8,
    ) -> Result<Response, WireError> {
        let failed = |what: &str, e: std::io::Error| io_error(e, inode, what);
        match step {
            migrate_step::FREEZE => Ok(Response::Stamp(self.migrations.freeze(inode)?)),
            migrate_step::CHECK => Ok(Response::Stamp(self.migrations.epoch(inode))),
            migrate_step::THAW => {
                self.migrations.thaw(inode);
                Ok(Response::Done)
            }
            migrate_step::ADOPT => {
                if inode == temp {
                    return Err(WireError::new(
                        ErrorCode::InvalidArgument,
                        format!("inode {inode} cannot migrate into itself"),
                    ));
                }
                let object = self.objects.path_of(inode);
                let new = self.objects.path_of(temp);
                if striping.is_some() && !new.exists() {
                    return Err(WireError::new(
                        ErrorCode::NotFound,
                        format!("inode {temp} (the new layout's file) has no object on this io server"),
                    ));
                }
                // Fenced first, durably: a read checked before it reads the old object
                // (see `Migrations::read_key`), and a restart keeps the fence of
                // objects renamed below.
                self.migrations.fence(inode, striping)?;
                // A server new to the file has no old object to set aside.
                if let Err(e) = self
                    .objects
                    .rename_file(&object, &self.set_aside(inode), &[inode])
                {
                    let _ = self.migrations.unfence(inode, true);
                    return Err(failed("migrate (setting the old object aside)", e));
                }
                if striping.is_some() {
                    if let Err(e) = self.objects.rename_file(&new, &object, &[inode, temp]) {
                        // Unfenced only once the old object is back (else the undo the
                        // manager sends next must still find the fence).
                        if self
                            .objects
                            .rename_file(&self.set_aside(inode), &object, &[inode])
                            .is_ok()
                        {
                            let _ = self.migrations.unfence(inode, true);
                        }
                        return Err(failed("migrate (adopting the new object)", e));
                    }
                }
                Ok(Response::Done)
            }
            migrate_step::UNDO => {
                // Idempotent (the manager repeats it until it succeeds everywhere, also
                // after a restart of either side). Without a fence nothing was adopted
                // here: the object under the file's name is the file's own, whatever
                // became of the new file's.
                if !self.migrations.fenced(inode) {
                    return Ok(Response::Done);
                }
                let object = self.objects.path_of(inode);
                let new = self.objects.path_of(temp);
                // Adopted here: the new object has the file's name and none is left
                // under the new file's.
                if striping.is_some() && !new.exists() && object.exists() {
                    self.objects
                        .rename_file(&object, &new, &[inode, temp])
                        .map_err(|e| failed("migrate (undo: giving the new object back)", e))?;
                }
                self.objects
                    .rename_file(&self.set_aside(inode), &object, &[inode])
                    .map_err(|e| failed("migrate (undo: restoring the old object)", e))?;
                self.migrations.unfence(inode, true)?;
                Ok(Response::Done)
            }
            migrate_step::DROP => {
                match std::fs::remove_file(self.set_aside(inode)) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(failed("migrate (removing the old object)", e)),
                }
                Ok(Response::Done)
            }
            other => Err(WireError::new(
                ErrorCode::InvalidArgument,
                format!("migrate step {other}: steps are 1 to {}", migrate_step::LAST),
            )),
        }
    }
}
