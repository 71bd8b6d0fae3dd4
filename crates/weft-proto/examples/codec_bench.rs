//! Encode and decode times of the hot messages: the derived codec against a frozen
//! copy of the hand-written one it replaced (below, `hand`), measured alternately in
//! the same run. Prints ns/op of each and the ratio derived/hand-written (median of
//! the rounds, with min and max). `cargo run --release -p weft-proto --example
//! codec_bench [iterations [rounds]]`.

use std::hint::black_box;
use std::time::Instant;

use weft_layout::{CacheMode, InodeId, Layout, ServerId};
use weft_proto::codec::{DecodeError, Reader, Wire, Writer};
use weft_proto::msg::{decode_result, encode_result, Request, Response, ViewId};
use weft_proto::types::*;
use weft_proto::Name;

/// The hand-written codec of these messages as it was before `#[derive(Wire)]`.
mod hand {
    use super::*;
    use weft_layout::stripe::{STRIPE_COUNT_MAX, STRIPE_SIZE_BYTES_MAX, STRIPE_SIZE_BYTES_MIN};

    fn cred(w: &mut Writer, c: &Cred) {
        w.u32(c.uid);
        w.u32(c.gid);
        w.seq(&c.groups);
    }

    fn cred_decode(r: &mut Reader<'_>) -> Result<Cred, DecodeError> {
        let uid = r.u32()?;
        let gid = r.u32()?;
        let groups: Vec<u32> = r.seq()?;
        if groups.len() > GROUPS_MAX {
            return Err(DecodeError::TooLarge {
                what: "group list",
                len: groups.len() as u64,
                max: GROUPS_MAX as u64,
            });
        }
        Ok(Cred { uid, gid, groups })
    }

    fn striping_decode(r: &mut Reader<'_>) -> Result<Striping, DecodeError> {
        let s = Striping {
            stripe_size_bytes: r.u64()?,
            stripe_count: r.u32()?,
            server_index: r.u32()?,
        };
        if !(STRIPE_SIZE_BYTES_MIN..=STRIPE_SIZE_BYTES_MAX).contains(&s.stripe_size_bytes)
            || s.stripe_count == 0
            || s.stripe_count as usize > STRIPE_COUNT_MAX
            || s.server_index >= s.stripe_count
        {
            return Err(DecodeError::Invalid {
                what: "striping",
                value: s.stripe_size_bytes,
            });
        }
        Ok(s)
    }

    fn striping(w: &mut Writer, s: &Striping) {
        w.u64(s.stripe_size_bytes);
        w.u32(s.stripe_count);
        w.u32(s.server_index);
    }

    fn range_decode(r: &mut Reader<'_>) -> Result<Range, DecodeError> {
        let range = Range {
            offset: r.u64()?,
            len: r.u64()?,
        };
        weft_layout::stripe::check_range(range.offset, range.len).map_err(|_| DecodeError::Invalid {
            what: "range end (offset + length overflows)",
            value: range.offset,
        })?;
        Ok(range)
    }

    pub fn encode_request(req: &Request) -> Vec<u8> {
        let mut w = Writer::default();
        match req {
            Request::Read {
                inode,
                striping: s,
                ranges,
            }
            | Request::Write {
                inode,
                striping: s,
                ranges,
            } => {
                w.u64(inode.0);
                striping(&mut w, s);
                w.u32(ranges.len() as u32);
                for r in ranges {
                    w.u64(r.offset);
                    w.u64(r.len);
                }
            }
            Request::ReadView {
                inode,
                striping: s,
                view,
                view_offset,
                len,
            } => {
                w.u64(inode.0);
                striping(&mut w, s);
                w.u32(view.0);
                w.u64(*view_offset);
                w.u64(*len);
            }
            Request::Lookup {
                cred: c,
                parent,
                name,
            } => {
                cred(&mut w, c);
                w.u64(parent.0);
                w.bytes(name.as_bytes());
            }
            Request::GetAttr { cred: c, inode } => {
                cred(&mut w, c);
                w.u64(inode.0);
            }
            other => unreachable!("not a hot message: {other:?}"),
        }
        w.bytes
    }

    pub fn decode_request(opcode: u16, body: &[u8]) -> Result<Request, DecodeError> {
        let mut r = Reader::new(body);
        let r = &mut r;
        let req = match opcode {
            42 | 43 => {
                let inode = InodeId(r.u64()?);
                let striping = striping_decode(r)?;
                let n = r.u32()? as usize;
                if n > weft_proto::msg::RANGES_MAX {
                    return Err(DecodeError::TooLarge {
                        what: "range list",
                        len: n as u64,
                        max: weft_proto::msg::RANGES_MAX as u64,
                    });
                }
                let mut ranges = Vec::with_capacity(n.min(r.remaining()));
                for _ in 0..n {
                    ranges.push(range_decode(r)?);
                }
                if opcode == 42 {
                    Request::Write {
                        inode,
                        striping,
                        ranges,
                    }
                } else {
                    Request::Read {
                        inode,
                        striping,
                        ranges,
                    }
                }
            }
            51 => {
                let inode = InodeId(r.u64()?);
                let striping = striping_decode(r)?;
                let view = ViewId(r.u32()?);
                let view_offset = r.u64()?;
                let len = r.u64()?;
                if view_offset.checked_add(len).is_none() {
                    return Err(DecodeError::Invalid {
                        what: "view interval end (offset + length overflows)",
                        value: view_offset,
                    });
                }
                Request::ReadView {
                    inode,
                    striping,
                    view,
                    view_offset,
                    len,
                }
            }
            12 => Request::Lookup {
                cred: cred_decode(r)?,
                parent: InodeId(r.u64()?),
                name: Name::new(r.bytes_max(4096)?.to_vec()),
            },
            13 => Request::GetAttr {
                cred: cred_decode(r)?,
                inode: InodeId(r.u64()?),
            },
            other => return Err(DecodeError::UnknownOpcode(other)),
        };
        r.finish()?;
        Ok(req)
    }

    fn timespec(w: &mut Writer, t: &Timespec) {
        w.i64(t.secs);
        w.u32(t.nanos);
    }

    fn timespec_decode(r: &mut Reader<'_>) -> Result<Timespec, DecodeError> {
        let secs = r.i64()?;
        let nanos = r.u32()?;
        if nanos >= 1_000_000_000 {
            return Err(DecodeError::Invalid {
                what: "nanoseconds",
                value: nanos as u64,
            });
        }
        Ok(Timespec { secs, nanos })
    }

    pub fn encode_response(resp: &Response) -> Vec<u8> {
        let mut w = Writer::default();
        w.u8(0);
        match resp {
            Response::Bytes(n) => {
                w.u8(8);
                w.u64(*n);
            }
            Response::Attr(a) => {
                w.u8(3);
                w.u64(a.inode.0);
                w.u8(a.kind as u8);
                w.u32(a.mode);
                w.u32(a.uid);
                w.u32(a.gid);
                w.u32(a.nlink);
                w.u64(a.size);
                timespec(&mut w, &a.atime);
                timespec(&mut w, &a.mtime);
                timespec(&mut w, &a.ctime);
                w.opt(&a.layout);
                a.cache.encode(&mut w);
                w.opt(&a.dir_layout);
                w.u64(a.rdev);
                w.u64(a.blocks);
            }
            other => unreachable!("not a hot message: {other:?}"),
        }
        w.bytes
    }

    pub fn decode_response(body: &[u8]) -> Result<Response, DecodeError> {
        let mut r = Reader::new(body);
        let r = &mut r;
        if r.u8()? != 0 {
            return Err(DecodeError::Invalid {
                what: "result tag",
                value: 1,
            });
        }
        let resp = match r.u8()? {
            8 => Response::Bytes(r.u64()?),
            3 => Response::Attr(Attr {
                inode: InodeId(r.u64()?),
                kind: FileKind::from_code(r.u8()?).ok_or(DecodeError::Invalid {
                    what: "file kind",
                    value: 0,
                })?,
                mode: r.u32()?,
                uid: r.u32()?,
                gid: r.u32()?,
                nlink: r.u32()?,
                size: r.u64()?,
                atime: timespec_decode(r)?,
                mtime: timespec_decode(r)?,
                ctime: timespec_decode(r)?,
                layout: r.opt()?,
                cache: CacheMode::decode(r)?,
                dir_layout: r.opt()?,
                rdev: r.u64()?,
                blocks: r.u64()?,
            }),
            v => {
                return Err(DecodeError::Invalid {
                    what: "response tag",
                    value: v as u64,
                })
            }
        };
        r.finish()?;
        Ok(resp)
    }
}

fn striping() -> Striping {
    Striping {
        stripe_size_bytes: 1 << 20,
        stripe_count: 8,
        server_index: 3,
    }
}

fn cred() -> Cred {
    Cred {
        uid: 1000,
        gid: 100,
        groups: vec![4, 24, 27, 100],
    }
}

fn attr() -> Attr {
    Attr {
        inode: InodeId(12345),
        kind: FileKind::File,
        mode: 0o644,
        uid: 1000,
        gid: 100,
        nlink: 1,
        size: 1 << 30,
        atime: Timespec::now(),
        mtime: Timespec::now(),
        ctime: Timespec::now(),
        layout: Some(Layout {
            stripe_size_bytes: 1 << 20,
            servers: (0..8).map(ServerId).collect(),
            replication: Default::default(),
        }),
        cache: CacheMode::None,
        dir_layout: None,
        rdev: 0,
        blocks: 2 << 20,
    }
}

/// ns per encode + decode of `f` over `iterations`.
fn time(iterations: u32, mut f: impl FnMut()) -> f64 {
    let start = Instant::now();
    for _ in 0..iterations {
        f();
    }
    start.elapsed().as_nanos() as f64 / iterations as f64
}

fn main() {
    let iterations: u32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(200_000);
    let rounds: usize = std::env::args().nth(2).and_then(|a| a.parse().ok()).unwrap_or(11);
    let requests = vec![
        (
            "Read, 1 range",
            Request::Read {
                inode: InodeId(7),
                striping: striping(),
                ranges: vec![Range {
                    offset: 1 << 20,
                    len: 1 << 20,
                }],
            },
        ),
        (
            "Write, 64 ranges",
            Request::Write {
                inode: InodeId(7),
                striping: striping(),
                ranges: (0..64)
                    .map(|i| Range {
                        offset: i * 8192,
                        len: 4096,
                    })
                    .collect(),
            },
        ),
        (
            "ReadView",
            Request::ReadView {
                inode: InodeId(7),
                striping: striping(),
                view: ViewId(3),
                view_offset: 1 << 24,
                len: 1 << 20,
            },
        ),
        (
            "Lookup",
            Request::Lookup {
                cred: cred(),
                parent: InodeId(1),
                name: "checkpoint.0001.h5".into(),
            },
        ),
        (
            "GetAttr",
            Request::GetAttr {
                cred: cred(),
                inode: InodeId(12345),
            },
        ),
    ];
    let responses = vec![
        ("Bytes", Response::Bytes(1 << 20)),
        ("Attr", Response::Attr(attr())),
    ];

    println!(
        "{:<22} {:>12} {:>12} {:>24}",
        "message (enc+dec)", "hand ns/op", "derived ns/op", "derived/hand min med max"
    );
    let report = |name: &str, hand: &mut dyn FnMut(), derived: &mut dyn FnMut()| {
        let (mut hs, mut ds, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        // Alternated, the order swapped every round, so that neither codec always
        // runs on a warmer cache or a quieter machine.
        for round in 0..rounds {
            let (h, d) = if round % 2 == 0 {
                let h = time(iterations, &mut *hand);
                (h, time(iterations, &mut *derived))
            } else {
                let d = time(iterations, &mut *derived);
                (time(iterations, &mut *hand), d)
            };
            hs.push(h);
            ds.push(d);
            ratios.push(d / h);
        }
        let med = |v: &mut Vec<f64>| {
            v.sort_by(|a, b| a.total_cmp(b));
            v[v.len() / 2]
        };
        let (h, d) = (med(&mut hs), med(&mut ds));
        let r = med(&mut ratios);
        println!(
            "{name:<22} {h:>12.1} {d:>12.1} {:>8.2} {r:>7.2} {:>7.2}",
            ratios[0],
            ratios[ratios.len() - 1]
        );
    };
    for (name, req) in &requests {
        let opcode = req.opcode() as u16;
        // Both codecs write the same bytes: the comparison is of equal work.
        assert_eq!(hand::encode_request(req), req.encode_body(), "{name}");
        report(
            name,
            &mut || {
                let body = hand::encode_request(black_box(req));
                black_box(hand::decode_request(opcode, &body).unwrap());
            },
            &mut || {
                let body = black_box(req).encode_body();
                black_box(Request::decode(opcode, &body).unwrap());
            },
        );
    }
    for (name, resp) in &responses {
        let result = Ok(resp.clone());
        assert_eq!(hand::encode_response(resp), encode_result(&result), "{name}");
        report(
            name,
            &mut || {
                let body = hand::encode_response(black_box(resp));
                black_box(hand::decode_response(&body).unwrap());
            },
            &mut || {
                let body = encode_result(black_box(&result));
                black_box(decode_result(&body).unwrap().unwrap());
            },
        );
    }
}
