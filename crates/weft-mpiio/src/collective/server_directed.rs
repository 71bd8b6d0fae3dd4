//! `server_directed`: Clusterfile's collective I/O. No exchange among the processes:
//!
//! 1. each rank's MPI view is the view set on its file handle (registered with each
//!    server of the file's data layout at its first use there, once per view change);
//! 2. each rank sends its own interval of the view straight to the servers holding its
//!    bytes (for a cached file its cache managers; for an uncached one the io servers)
//!    as (view id, interval) requests, and each server scatters into or gathers from
//!    its blocks: the servers do the work the aggregators do in two-phase I/O;
//! 3. the order of the sends is the decentralised schedule (`weft_cm_schedule`): at
//!    step j, rank i sends to server (i + j) mod n, so that the servers are busy with
//!    different ranks at once without the ranks agreeing on anything;
//! 4. a read returns what lies before the end of the file;
//! 5. the caller agrees on the error among the ranks, as for every collective call.
//!
//! With a colocated cache tier (a cache manager in every io server, blocks = stripes)
//! this is disk-directed I/O: the data crosses the network once. With separate cache
//! managers it is Clusterfile's two-phase I/O: io server to manager, manager to rank,
//! with the scatter/gather spread over the managers. A hot read (blocks still in the
//! tier from an earlier write or read) does not reach the io servers at all.
//!
//! A view too large to register falls back to list I/O, still without an exchange.

use weft_client::Schedule;

use super::{Context, Method, Request};
use crate::error::Result;
use crate::hints::CmSchedule;

/// `server_directed`.
pub struct ServerDirected;

/// The client's schedule for this rank.
fn schedule(ctx: &Context<'_>) -> Schedule {
    match ctx.hints.cm_schedule {
        CmSchedule::Decentralised => Schedule::Decentralised {
            rank: ctx.comm.rank(),
        },
        CmSchedule::AllAtOnce => Schedule::AllAtOnce,
        CmSchedule::InOrder => Schedule::InOrder,
    }
}

impl Method for ServerDirected {
    fn name(&self) -> &'static str {
        "server_directed"
    }

    fn write(&self, ctx: &Context<'_>, request: &Request, data: &[u8]) -> Result<()> {
        if request.bytes() == 0 {
            return Ok(());
        }
        if request.view_on_file {
            ctx.file
                .write_view_scheduled(request.view_offset(), data, schedule(ctx))?;
        } else {
            ctx.file.write_list(request.pieces(), data)?;
        }
        Ok(())
    }

    fn read(&self, ctx: &Context<'_>, request: &Request, data: &mut [u8]) -> Result<u64> {
        if request.bytes() == 0 {
            return Ok(u64::MAX);
        }
        if !request.view_on_file {
            // List reads give zeros past the end of file; the size says where it is.
            ctx.file.read_list(request.pieces(), data)?;
            return Ok(ctx.file.size()?);
        }
        let n = ctx
            .file
            .read_view_scheduled(request.view_offset(), data, schedule(ctx))?;
        data[n..].fill(0);
        Ok(request.end_after(n as u64))
    }
}
