//! Pipelined two-phase (Tsujita et al.), for reads and for writes: the I/O of each
//! window runs on a helper thread with a queue of `weft_pipeline_depth` windows, while
//! the calling thread exchanges the next rounds. Only the calling thread calls MPI (so
//! MPI_THREAD_SINGLE/FUNNELED programs are fine); the helper does Weft I/O only. The
//! executor itself lives in [`super::engine`]; this module names the two methods that
//! use it.

use super::engine::Executor;
use super::interleaved::Interleaved;
use super::two_phase::TwoPhase;

/// `pipelined`: ROMIO's file domains with the I/O overlapped.
pub fn pipelined(depth: usize) -> TwoPhase {
    TwoPhase {
        executor: Executor::Pipelined { depth },
    }
}

/// `interleaved_pipelined`: round-robin chunks with the I/O overlapped.
pub fn interleaved_pipelined(depth: usize) -> Interleaved {
    Interleaved {
        executor: Executor::Pipelined { depth },
    }
}
