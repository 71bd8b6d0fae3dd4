//! A trace as text, one line per record (`weft trace show`): the header, files with
//! their striping and where their data goes, views, and requests with their time
//! (seconds since the trace's start), side, call, shape and the io servers or cache
//! managers they reach. Pieces and ranges are listed up to a limit.

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write;
use std::sync::Arc;

use weft_layout::view::View;

use crate::format::{FileRecord, Reader, Record, RequestRecord, Shape, Side, TargetKind, TraceError};

/// Ranges of one request looked at to find its targets; past this it is "all".
const TARGET_RANGES_MAX: usize = 4096;

/// What [`show`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub records: u64,
    pub requests: u64,
    /// The error that stopped decoding early, if one did.
    pub error: Option<TraceError>,
}

/// Writes `bytes` as text through `emit`, one line per call, listing at most
/// `pieces_max` pieces or ranges per request. A damaged tail is reported as the last
/// line (and in the summary); a bad header is an error.
pub fn show(bytes: &[u8], pieces_max: usize, emit: &mut dyn FnMut(&str)) -> Result<Summary, TraceError> {
    let mut reader = Reader::new(bytes)?;
    let h = reader.header().clone();
    let start = h.start_unix_ns;
    emit(&format!(
        "weft trace, format {}: {} pid {} on {}, started at {}.{:09} s (Unix time)",
        crate::format::FORMAT_VERSION,
        h.rank.map_or("process".to_string(), |r| format!("rank {r}")),
        h.pid,
        h.host,
        start / 1_000_000_000,
        start % 1_000_000_000
    ));
    let mut files: HashMap<u64, FileRecord> = HashMap::new();
    let mut views: HashMap<u32, Arc<View>> = HashMap::new();
    let mut summary = Summary::default();
    for record in reader.by_ref() {
        let record = match record {
            Ok(r) => r,
            Err(e) => {
                emit(&format!("error: {e}; nothing after it is shown"));
                summary.error = Some(e);
                break;
            }
        };
        summary.records += 1;
        let mut line = String::new();
        match &record {
            Record::File(f) => {
                let _ = write!(
                    line,
                    "file {} {}: {} stripes of {} B; data to {} {} in units of {} B",
                    f.inode,
                    f.path,
                    f.stripe_count,
                    f.stripe_size_bytes,
                    f.target_count,
                    targets_name(f.target_kind),
                    f.target_unit_bytes
                );
                files.insert(f.inode, f.clone());
            }
            Record::View { view, inode, decoded } => {
                let t = decoded.filetype();
                let _ = write!(
                    line,
                    "view {view} of file {inode}: displacement {}, filetype of {} B in an extent of {} B",
                    decoded.displacement(),
                    t.size_bytes(),
                    t.extent()
                );
                views.insert(*view, decoded.clone());
            }
            Record::Note(text) => {
                let _ = write!(line, "note: {text}");
            }
            Record::Request(r) => {
                summary.requests += 1;
                request_lines(r, start, &files, &views, pieces_max, emit);
                continue;
            }
        }
        emit(&line);
    }
    if reader.skipped > 0 {
        emit(&format!("({} records of unknown kinds skipped)", reader.skipped));
    }
    Ok(summary)
}

fn targets_name(kind: TargetKind) -> &'static str {
    match kind {
        TargetKind::IoServers => "io servers",
        TargetKind::CacheManagers => "cache managers",
    }
}

fn request_lines(
    r: &RequestRecord,
    start: u64,
    files: &HashMap<u64, FileRecord>,
    views: &HashMap<u32, Arc<View>>,
    pieces_max: usize,
    emit: &mut dyn FnMut(&str),
) {
    let seconds = r.time_ns.wrapping_sub(start) as i64 as f64 / 1e9;
    let mut line = format!("{seconds:+.6} s ");
    if let Some(rank) = r.rank {
        let _ = write!(line, "rank {rank} ");
    }
    let _ = write!(
        line,
        "{} {}{}{}",
        match r.flags.side() {
            Side::Original => "original",
            Side::Sent => "sent",
        },
        if r.flags.write() { "write" } else { "read" },
        if r.flags.collective() { " collective" } else { "" },
        if r.flags.continued() { " (continued)" } else { "" },
    );
    if let Some(call) = r.call {
        let _ = write!(line, " call {:x}:{}", call.handle, call.seq);
    }
    let _ = write!(line, " file {}", r.inode);
    // The ranges, lazily: a view's pieces or the runs' ranges.
    let ranges: Box<dyn Iterator<Item = (u64, u64)> + '_> = match &r.shape {
        Shape::View {
            view,
            view_offset,
            len,
        } => {
            let _ = write!(line, " view {view} [{view_offset}, +{len})");
            match views.get(view).map(|v| v.pieces(*view_offset, *len)) {
                Some(Ok(pieces)) => Box::new(pieces.map(|p| (p.file_offset, p.len))),
                Some(Err(e)) => {
                    let _ = write!(line, " (bad interval: {e})");
                    Box::new(std::iter::empty())
                }
                None => {
                    let _ = write!(line, " (view not recorded)");
                    Box::new(std::iter::empty())
                }
            }
        }
        Shape::Runs(runs) => {
            let bytes: u64 = runs.iter().map(|x| x.bytes()).sum();
            let ranges: u64 = runs.iter().map(|x| x.count).sum();
            let _ = write!(line, " {} runs, {ranges} ranges, {bytes} B", runs.len());
            Box::new(runs.iter().flat_map(|x| x.ranges()))
        }
    };
    let file = files.get(&r.inode);
    let mut targets = BTreeSet::new();
    let mut all = false;
    let mut listed = Vec::new();
    let mut count = 0usize;
    for (offset, len) in ranges {
        if listed.len() < pieces_max {
            listed.push((offset, len));
        }
        if let Some(f) = file {
            if count < TARGET_RANGES_MAX && !all {
                let unit = f.target_unit_bytes;
                if len / unit >= u64::from(f.target_count) {
                    all = true;
                } else {
                    let mut at = offset;
                    while at < offset + len && targets.len() < TARGET_RANGES_MAX {
                        targets.insert(f.target_of(at));
                        at = (at / unit + 1).saturating_mul(unit);
                    }
                }
            } else {
                all = all || count >= TARGET_RANGES_MAX;
            }
        }
        count += 1;
        if count > TARGET_RANGES_MAX && listed.len() >= pieces_max {
            break;
        }
    }
    if let Some(f) = file {
        let kind = targets_name(f.target_kind);
        if all || targets.len() == f.target_count as usize {
            let _ = write!(line, " -> all {} {kind}", f.target_count);
        } else {
            let list: Vec<String> = targets.iter().map(u32::to_string).collect();
            let _ = write!(line, " -> {kind} {}", list.join(","));
        }
    }
    emit(&line);
    if let Shape::Runs(runs) = &r.shape {
        for run in runs.iter().take(pieces_max) {
            if run.count == 1 {
                emit(&format!("    {}+{}", run.offset, run.len));
            } else {
                emit(&format!(
                    "    {}+{} x{} stride {}",
                    run.offset, run.len, run.count, run.stride
                ));
            }
        }
        if runs.len() > pieces_max {
            emit(&format!("    ... {} more runs", runs.len() - pieces_max));
        }
    } else {
        for (offset, len) in &listed {
            emit(&format!("    {offset}+{len}"));
        }
        if count > listed.len() {
            emit(&format!("    ... more pieces (listed {})", listed.len()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{encode_header, CallId, Encoder, Flags, Header};
    use crate::runs::Run;
    use weft_layout::view::Datatype;

    #[test]
    fn a_trace_reads_as_text() {
        let h = Header {
            rank: Some(1),
            pid: 5,
            host: "n1".into(),
            start_unix_ns: 1_000_000_000,
        };
        let mut out = encode_header(&h);
        let mut e = Encoder::new(&h);
        let file = FileRecord {
            inode: 8,
            path: "/t".into(),
            stripe_size_bytes: 100,
            stripe_count: 4,
            target_kind: TargetKind::IoServers,
            target_unit_bytes: 100,
            target_count: 4,
        };
        e.record(&Record::File(file), &mut out);
        let view = View::new(
            0,
            Datatype::vector(3, 1, 4, &Datatype::bytes(10).unwrap()).unwrap(),
        )
        .unwrap();
        e.record(
            &Record::View {
                view: 1,
                inode: 8,
                decoded: Arc::new(view),
            },
            &mut out,
        );
        e.record(
            &Record::Request(RequestRecord {
                time_ns: 1_500_000_000,
                flags: Flags(Flags::COLLECTIVE),
                inode: 8,
                rank: Some(1),
                call: Some(CallId { handle: 255, seq: 3 }),
                shape: Shape::View {
                    view: 1,
                    view_offset: 0,
                    len: 30,
                },
            }),
            &mut out,
        );
        e.record(
            &Record::Request(RequestRecord {
                time_ns: 1_600_000_000,
                flags: Flags(Flags::SENT | Flags::COLLECTIVE),
                inode: 8,
                rank: None,
                call: Some(CallId { handle: 255, seq: 3 }),
                shape: Shape::Runs(vec![Run::new(100, 50, 200, 2).unwrap()]),
            }),
            &mut out,
        );
        let mut lines = Vec::new();
        let summary = show(&out, 10, &mut |l| lines.push(l.to_string())).unwrap();
        assert_eq!(summary.requests, 2);
        assert!(lines[0].contains("rank 1 pid 5 on n1"), "{}", lines[0]);
        assert!(lines[1].contains("file 8 /t: 4 stripes of 100 B"), "{}", lines[1]);
        assert!(lines[3]
            .starts_with("+0.500000 s rank 1 original read collective call ff:3 file 8 view 1 [0, +30)"));
        // Pieces at 0, 40, 80: stripes 0 and 0 of servers 0 (0..100) -> server 0 only.
        assert!(lines[3].ends_with("-> io servers 0"), "{}", lines[3]);
        assert_eq!(&lines[4..7], &["    0+10", "    40+10", "    80+10"]);
        assert!(lines[7]
            .contains("sent read collective call ff:3 file 8 1 runs, 2 ranges, 100 B -> io servers 1,3"));
        assert_eq!(lines[8], "    100+50 x2 stride 200");
        // A cut trace shows what it holds and says where it stopped.
        let mut lines = Vec::new();
        let summary = show(&out[..out.len() - 2], 10, &mut |l| lines.push(l.to_string())).unwrap();
        assert!(summary.error.is_some());
        assert!(lines.last().unwrap().starts_with("error: trace ends inside"));
    }
}
