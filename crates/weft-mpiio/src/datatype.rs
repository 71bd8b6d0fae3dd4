//! MPI derived datatypes decoded into weft-layout datatype trees, through
//! MPI_Type_get_envelope/get_contents: named, dup, contiguous, vector, hvector,
//! indexed, hindexed, indexed_block, hindexed_block, struct, subarray, darray, resized
//! (and Fortran 90 parameterised types, which are named in all but name).

use std::sync::Arc;

use weft_layout::view::{Datatype, Distribution, Field, Order};

use crate::error::{ErrorClass, MpiioError, Result};
use crate::mpi::{self, Combiner, Constant, Handle};

/// Deepest MPI type nesting decoded (weft-layout bounds its own trees too).
const NESTING_MAX: usize = 32;

/// The weft-layout tree of MPI datatype `t`.
pub fn decode(t: Handle) -> Result<Arc<Datatype>> {
    decode_at(t, 0)
}

fn type_error(message: String) -> MpiioError {
    MpiioError::new(ErrorClass::Type, message)
}

fn count(v: i32, what: &str) -> Result<u64> {
    u64::try_from(v).map_err(|_| type_error(format!("negative {what} {v} in a datatype")))
}

fn counts(v: &[i32], what: &str) -> Result<Vec<u64>> {
    v.iter().map(|&x| count(x, what)).collect()
}

fn decode_at(t: Handle, depth: usize) -> Result<Arc<Datatype>> {
    if depth > NESTING_MAX {
        return Err(type_error(format!(
            "datatype nested deeper than {NESTING_MAX} levels"
        )));
    }
    let contents = mpi::type_contents(t)?;
    // Children first; free them whatever happens next.
    let children: Vec<Result<Arc<Datatype>>> =
        contents.types.iter().map(|&c| decode_at(c, depth + 1)).collect();
    for &c in &contents.types {
        mpi::free_if_derived(c);
    }
    let child = |k: usize| -> Result<Arc<Datatype>> {
        children
            .get(k)
            .cloned()
            .unwrap_or_else(|| Err(type_error("datatype without its base type".into())))
    };
    let ints = &contents.ints;
    let addrs = &contents.addrs;
    let int = |k: usize| -> Result<i32> {
        ints.get(k)
            .copied()
            .ok_or_else(|| type_error("datatype contents too short".into()))
    };
    let tree = match contents.combiner {
        Combiner::Named | Combiner::F90 => {
            let size = mpi::type_size(t)?;
            let (lb, extent) = mpi::type_extent(t)?;
            let bytes = Datatype::bytes(size as u64)?;
            if lb == 0 && extent == size {
                bytes
            } else {
                Datatype::resized(&bytes, lb, extent)?
            }
        }
        Combiner::Dup => child(0)?,
        Combiner::Contiguous => Datatype::contiguous(count(int(0)?, "count")?, &child(0)?)?,
        Combiner::Vector => Datatype::vector(
            count(int(0)?, "count")?,
            count(int(1)?, "block length")?,
            i64::from(int(2)?),
            &child(0)?,
        )?,
        Combiner::Hvector => Datatype::hvector(
            count(int(0)?, "count")?,
            count(int(1)?, "block length")?,
            addrs[0],
            &child(0)?,
        )?,
        Combiner::Indexed => {
            let n = count(int(0)?, "count")? as usize;
            let lens = counts(slice(ints, 1, n)?, "block length")?;
            let displs: Vec<i64> = slice(ints, 1 + n, n)?.iter().map(|&d| i64::from(d)).collect();
            Datatype::indexed(&lens, &displs, &child(0)?)?
        }
        Combiner::Hindexed => {
            let n = count(int(0)?, "count")? as usize;
            let lens = counts(slice(ints, 1, n)?, "block length")?;
            Datatype::hindexed(&lens, slice(addrs, 0, n)?, &child(0)?)?
        }
        Combiner::IndexedBlock => {
            let n = count(int(0)?, "count")? as usize;
            let displs: Vec<i64> = slice(ints, 2, n)?.iter().map(|&d| i64::from(d)).collect();
            Datatype::indexed_block(count(int(1)?, "block length")?, &displs, &child(0)?)?
        }
        Combiner::HindexedBlock => {
            let n = count(int(0)?, "count")? as usize;
            Datatype::hindexed_block(count(int(1)?, "block length")?, slice(addrs, 0, n)?, &child(0)?)?
        }
        Combiner::Struct => {
            let n = count(int(0)?, "count")? as usize;
            let lens = counts(slice(ints, 1, n)?, "block length")?;
            let displs = slice(addrs, 0, n)?;
            let mut fields = Vec::with_capacity(n);
            for k in 0..n {
                fields.push(Field {
                    block_len: lens[k],
                    displacement_bytes: displs[k],
                    datatype: child(k)?,
                });
            }
            Datatype::structure(&fields)?
        }
        Combiner::Subarray => {
            let n = count(int(0)?, "dimension count")? as usize;
            let sizes = counts(slice(ints, 1, n)?, "size")?;
            let subsizes = counts(slice(ints, 1 + n, n)?, "subsize")?;
            let starts = counts(slice(ints, 1 + 2 * n, n)?, "start")?;
            let order = order_of(int(1 + 3 * n)?)?;
            Datatype::subarray(&sizes, &subsizes, &starts, order, &child(0)?)?
        }
        Combiner::Darray => {
            let size = count(int(0)?, "process count")?;
            let rank = count(int(1)?, "rank")?;
            let n = count(int(2)?, "dimension count")? as usize;
            let gsizes = counts(slice(ints, 3, n)?, "global size")?;
            let distribs = slice(ints, 3 + n, n)?;
            let dargs = slice(ints, 3 + 2 * n, n)?;
            let psizes = counts(slice(ints, 3 + 3 * n, n)?, "process grid size")?;
            let order = order_of(int(3 + 4 * n)?)?;
            let mut distributions = Vec::with_capacity(n);
            for k in 0..n {
                distributions.push(distribution_of(distribs[k], dargs[k])?);
            }
            Datatype::darray(size, rank, &gsizes, &distributions, &psizes, order, &child(0)?)?
        }
        Combiner::Resized => Datatype::resized(&child(0)?, addrs[0], addrs[1])?,
        Combiner::Unknown => {
            return Err(type_error(
                "a datatype constructor weft-mpiio does not decode (deprecated or unknown combiner)".into(),
            ))
        }
    };
    Ok(tree)
}

fn slice<T>(v: &[T], start: usize, n: usize) -> Result<&[T]> {
    v.get(start..start + n)
        .ok_or_else(|| type_error("datatype contents too short".into()))
}

fn order_of(v: i32) -> Result<Order> {
    if v == mpi::constant(Constant::OrderC) {
        Ok(Order::C)
    } else if v == mpi::constant(Constant::OrderFortran) {
        Ok(Order::Fortran)
    } else {
        Err(type_error(format!("unknown array order {v}")))
    }
}

fn distribution_of(distrib: i32, darg: i32) -> Result<Distribution> {
    let arg = if darg == mpi::constant(Constant::DistributeDfltDarg) {
        None
    } else {
        Some(count(darg, "distribution argument")?)
    };
    if distrib == mpi::constant(Constant::DistributeBlock) {
        Ok(Distribution::Block(arg))
    } else if distrib == mpi::constant(Constant::DistributeCyclic) {
        Ok(Distribution::Cyclic(arg))
    } else if distrib == mpi::constant(Constant::DistributeNone) {
        Ok(Distribution::None)
    } else {
        Err(type_error(format!("unknown distribution {distrib}")))
    }
}
