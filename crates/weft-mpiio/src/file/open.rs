//! Opening a file collectively: rank 0 opens (or creates) it and agrees the hints,
//! the shared pointer and the handoff every other rank opens with; the aggregators.

use super::*;

/// Rank 0's hints (defaults, $WEFT_HINTS, then `info`) on every rank.
pub(super) fn shared_hints(comm: &Comm, base: Option<&Hints>, info: Handle) -> Result<Hints> {
    let mut text = String::new();
    if comm.rank() == 0 {
        text = root_hints(base, info).to_text();
    }
    Hints::from_text(&comm.bcast_text(text, 0)?)
}

/// The hints of rank 0: `base` (or the defaults and $WEFT_HINTS), then `info`. Rank 0
/// must reach the broadcast that follows whatever happens: an unreadable info object or
/// hint is a warning, not an error.
pub(super) fn root_hints(base: Option<&Hints>, info: Handle) -> Hints {
    let mut hints = match base {
        Some(h) => h.clone(),
        None => Hints::from_env().unwrap_or_else(|e| {
            eprintln!("weft-mpiio: {e}; using the default hints");
            Hints::default()
        }),
    };
    let entries = mpi::info_entries(info).unwrap_or_else(|e| {
        eprintln!("weft-mpiio: reading the info object: {e}; its hints are ignored");
        Vec::new()
    });
    for (k, v) in entries {
        if let Err(e) = hints.set(&k, &v) {
            eprintln!("weft-mpiio: {e}; hint ignored");
        }
    }
    hints
}

/// Rank 0's part of a collective open: creates (MPI_MODE_CREATE) or opens the file and
/// makes the open's shared file pointer at the manager; returns the handle and the
/// pointer's id.
pub(super) fn root_open(
    client: &Client,
    path: &str,
    name: &str,
    mode: i32,
    write: bool,
    hints: &Hints,
) -> Result<(File, crate::shared_id::SharedId)> {
    let file = if mode & amode::CREATE != 0 {
        // A striping factor over the io servers this client knows asks the manager
        // again: some may have joined since (`weft server add`).
        let mut io_servers = client.cluster_info().io_servers.len();
        if hints.striping_factor.is_some_and(|f| f as usize > io_servers) {
            if let Ok(cluster) = client.refresh_cluster() {
                io_servers = cluster.io_servers.len();
            }
        }
        let options = CreateOptions {
            exclusive: mode & amode::EXCL != 0,
            truncate: false,
            layout: hints.layout_request(io_servers),
            ..CreateOptions::default()
        };
        client.create(path, &options).map_err(MpiioError::from)?
    } else {
        client
            .open(
                path,
                &OpenOptions {
                    write,
                    create: None,
                    truncate: false,
                },
            )
            .map_err(|e| {
                let mut e = MpiioError::from(e);
                e.message = format!("{name}: {}", e.message);
                e
            })?
    };
    let shared = crate::shared_id::new_pointer(client, path)?;
    Ok((file, shared))
}

/// What rank 0 broadcasts at open: its error (class and message), or the hints, the
/// shared file pointer's id and the handle's handoff (`File::handoff`).
pub(super) struct OpenOutcome;

impl OpenOutcome {
    pub(super) fn encode_ok(hints: &Hints, shared: crate::shared_id::SharedId, handoff: &[u8]) -> Vec<u8> {
        let text = hints.to_text();
        let mut out = vec![0u8];
        out.extend_from_slice(&shared.open.to_le_bytes());
        out.extend_from_slice(&shared.incarnation.to_le_bytes());
        out.extend_from_slice(&(text.len() as u64).to_le_bytes());
        out.extend_from_slice(text.as_bytes());
        out.extend_from_slice(handoff);
        out
    }

    pub(super) fn encode_err(e: &MpiioError) -> Vec<u8> {
        let mut out = vec![1u8];
        out.extend_from_slice(&(e.class as i32).to_le_bytes());
        out.extend_from_slice(e.message.as_bytes());
        out
    }

    /// `Err` for a blob that does not parse; `Ok(Err)` for rank 0's error.
    #[allow(clippy::type_complexity)]
    pub(super) fn decode(blob: &[u8]) -> Result<Result<(Hints, crate::shared_id::SharedId, Vec<u8>)>> {
        let bad = || MpiioError::new(ErrorClass::Intern, "a damaged open broadcast from rank 0");
        let (&tag, rest) = blob.split_first().ok_or_else(bad)?;
        let u64_at = |b: &[u8], at: usize| -> Result<u64> {
            b.get(at..at + 8)
                .map(|s| u64::from_le_bytes(s.try_into().expect("8 bytes")))
                .ok_or_else(bad)
        };
        match tag {
            0 => {
                let shared = crate::shared_id::SharedId {
                    open: u64_at(rest, 0)?,
                    incarnation: u64_at(rest, 8)?,
                };
                let len = usize::try_from(u64_at(rest, 16)?).map_err(|_| bad())?;
                let text = rest
                    .get(24..24usize.checked_add(len).ok_or_else(bad)?)
                    .ok_or_else(bad)?;
                let hints = Hints::from_text(&String::from_utf8_lossy(text))?;
                Ok(Ok((hints, shared, rest[24 + len..].to_vec())))
            }
            1 => {
                let class = rest.get(..4).ok_or_else(bad)?;
                let class = i32::from_le_bytes(class.try_into().expect("4 bytes"));
                Ok(Err(MpiioError::new(
                    ErrorClass::from_code(class).unwrap_or(ErrorClass::Other),
                    String::from_utf8_lossy(&rest[4..]).into_owned(),
                )))
            }
            _ => Err(bad()),
        }
    }
}

/// `agree` over `local`, and whether `flag` is set on any rank, in one allreduce.
pub(super) fn agree_and_any(comm: &Comm, local: Result<()>, flag: bool) -> Result<(Result<()>, bool)> {
    let mine = local.as_ref().err().map_or(0, |e| e.class as i64);
    let mut v = [mine, i64::from(flag)];
    comm.allreduce(&mut v, mpi::Op::Max)?;
    let outcome = match (v[0], local) {
        (0, local) => local,
        (worst, Err(e)) if e.class as i64 == worst => Err(e),
        (worst, _) => Err(MpiioError::new(
            ErrorClass::from_code(worst as i32).unwrap_or(ErrorClass::Other),
            "the collective call failed on another rank",
        )),
    };
    Ok((outcome, v[1] != 0))
}

/// Whether cb_config_list asks for aggregators per host (`*:N`), which needs the
/// ranks' host names.
pub(super) fn per_host_aggregators(hints: &Hints) -> bool {
    hints.cb_config_list.trim().starts_with("*:")
}

/// The aggregator ranks from cb_config_list ("*:N" per host) and cb_nodes.
pub(super) fn aggregators_of(comm: &Comm, hints: &Hints) -> Result<Vec<usize>> {
    let size = comm.size();
    let mut ranks: Vec<usize> = (0..size).collect();
    let per_host = hints.cb_config_list.trim().strip_prefix("*:").map(|n| {
        if n == "*" {
            Some(usize::MAX)
        } else {
            n.parse::<usize>().ok()
        }
    });
    if let Some(per_host) = per_host {
        let per_host = per_host.unwrap_or(1).max(1);
        let name = mpi::processor_name();
        let hash = name.bytes().fold(0xcbf29ce484222325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
        });
        let hosts = comm.allgather(&[hash as i64])?;
        let mut taken: std::collections::HashMap<i64, usize> = Default::default();
        ranks.retain(|&r| {
            let n = taken.entry(hosts[r]).or_default();
            *n += 1;
            *n <= per_host
        });
    }
    if let Some(n) = hints.cb_nodes {
        ranks = spread(n, ranks.len()).into_iter().map(|i| ranks[i]).collect();
    }
    Ok(ranks)
}

impl MpiFile {
    /// MPI_File_open (collective over `comm`).
    pub fn open(
        comm: Handle,
        name: &str,
        mode: i32,
        info: Handle,
        errhandler: Handle,
    ) -> Result<Box<MpiFile>> {
        let comm = Comm::dup_for_file(comm)?;
        let checked = (|| -> Result<(String, Client)> {
            let access = mode & (amode::RDONLY | amode::RDWR | amode::WRONLY);
            if access.count_ones() != 1 {
                return Err(MpiioError::new(
                    ErrorClass::Amode,
                    "exactly one of MPI_MODE_RDONLY, MPI_MODE_RDWR, MPI_MODE_WRONLY is required",
                ));
            }
            if access == amode::RDONLY && mode & (amode::CREATE | amode::EXCL) != 0 {
                return Err(MpiioError::new(
                    ErrorClass::Amode,
                    "MPI_MODE_RDONLY with MPI_MODE_CREATE or MPI_MODE_EXCL",
                ));
            }
            Ok((weft_path(name)?, client()?))
        })();
        let write = mode & (amode::RDWR | amode::WRONLY) != 0;
        // Rank 0 alone asks the manager (creates or opens the file, makes the shared
        // file pointer) and broadcasts what it got, hints included: one broadcast and
        // one agreement in all, whatever the number of processes, where every rank
        // asking the manager cost a round trip each and five collective rounds.
        let mut root_file = None;
        let outcome = if comm.rank() == 0 {
            let hints = root_hints(None, info);
            let opened = checked
                .as_ref()
                .map_err(Clone::clone)
                .and_then(|(path, client)| root_open(client, path, name, mode, write, &hints));
            let blob = match opened {
                Ok((file, shared)) => {
                    // With rank 0's capability: the other ranks (the same user's) need
                    // no grant of their own from the manager before their first I/O.
                    let blob = OpenOutcome::encode_ok(&hints, shared, &file.handoff_with_capability());
                    root_file = Some(file);
                    blob
                }
                Err(e) => OpenOutcome::encode_err(&e),
            };
            comm.bcast_bytes(blob, 0)
        } else {
            comm.bcast_bytes(Vec::new(), 0)
        }
        .and_then(|blob| OpenOutcome::decode(&blob));
        let opened = outcome.and_then(|outcome| {
            let (hints, shared, handoff) = outcome?;
            let (path, client) = checked?;
            let file = match root_file.take() {
                Some(file) => file,
                None => client.open_handoff(&handoff, &path, write).map_err(|e| {
                    let mut e = MpiioError::from(e);
                    e.message = format!("{name}: {}", e.message);
                    e
                })?,
            };
            Ok((path, client, hints, shared, file))
        });
        let (path, client, hints, shared_id, mut file) = agree(&comm, opened)?;
        // Before anything else uses the handle: its data may go to delegates of its own.
        let delegates = crate::spawn::start(&comm, &file, &client, &hints, name)?;
        let kind = match &delegates {
            Some(d) => {
                file.use_delegates(&d.addrs, &d.job_key)
                    .map_err(MpiioError::from)?;
                Some("job-scoped")
            }
            None => (file.cache_mode() == weft_client::CacheMode::Delegated).then_some("persistent"),
        };
        if let (Some(kind), true) = (kind, print_hints() && comm.rank() == 0) {
            let addrs = file.data_addrs();
            eprintln!(
                "weft-mpiio: {name}: {} {kind} delegates: {}",
                addrs.len(),
                addrs.join(" ")
            );
        }
        crate::trace::attach(&comm, &hints, &mut file)?;
        // MPI_MODE_APPEND: every individual file pointer starts at the end of the file (in
        // bytes: the view at open is the whole file, etype MPI_BYTE). It positions, it
        // does not make later writes appends (MPI has no such mode).
        let position = if mode & amode::APPEND != 0 {
            agree(&comm, file.size().map_err(MpiioError::from))?
        } else {
            0
        };
        // Without a per-host cb_config_list the aggregators are worked out locally from
        // hints every rank holds alike: nothing to agree on.
        let aggregators = if per_host_aggregators(&hints) {
            agree(&comm, aggregators_of(&comm, &hints))?
        } else {
            aggregators_of(&comm, &hints)?
        };
        if print_hints() && comm.rank() == 0 {
            let entries: Vec<String> = with_cache_mode(hints.entries(aggregators.len()), &file)
                .into_iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            eprintln!("weft-mpiio: {name}: hints {}", entries.join(" "));
        }
        let byte = mpi::type_byte();
        Ok(Box::new(MpiFile {
            comm,
            file,
            delegates,
            path,
            shared_id,
            shared_used: Default::default(),
            external32: Default::default(),
            amode: mode,
            errhandler: AtomicUsize::new(errhandler),
            state: Mutex::new(State {
                hints,
                aggregators,
                view: View::contiguous(),
                etype: byte,
                filetype: byte,
                etype_size: 1,
                position,
                view_on_file: true,
                overlapping: false,
                atomic: false,
                history: History::default(),
                buffered: Buffered::default(),
            }),
            behind: Default::default(),
        }))
    }
}
