//! `weft`: start and stop a local cluster, move files in and out, inspect layouts.
//!
//! # Code map
//!
//! The `weft` tool: `run.rs` (`weft run PROGRAM`: execs it with libweft_posix.so in
//! `LD_PRELOAD`), `cluster/` (up/down in `mod.rs`, status in `status.rs`, pid and log files under the home;
//! `up` makes the home's `cluster.key` before any server starts and gives it to the
//! standalone servers (`--key`); status says how the cluster is secured and shows each
//! server's protocol version and build, or `refused` for a server that rejects the key),
//! `weft key create FILE` (in `main.rs`); `weft status` describes the cluster a client
//! uses (`--home`, else `$WEFT_META`, asking that manager for its servers, else the home),
//! each server's metrics URL, and `--web` the status page's; `up` gives every server a
//! loopback metrics endpoint and records it in the description; `down` of a cluster that
//! answers without pid files (an MPI job's) says how to stop it. `top_cmd.rs`: `weft top`,
//! weft-metrics' view every second or `--once`. `counts.rs`: the options of `weft
//! up` and `weft bench`, and the numeric options of every other command (those whose
//! parser gives a number, found from the parser's type; tests/numeric_options.txt lists
//! them and a unit test keeps the list whole), take a value starting with `-` as their
//! value and refuse a negative one saying what they take (`--io` 1..=64), not clap's
//! "unexpected argument".
//! `tree_copy.rs`: `put -r` and `get -r`, a file at a time through `put`/`get`.
//! `admin.rs`: chmod, chown, chgrp, touch, du, find over a tree walked a listing page at
//! a time, and relative Weft paths (`-C`, `$WEFT_CWD`; `in_cwd` in `main.rs` makes every
//! command's Weft paths absolute before it runs).
//! `files.rs` (ls, stat, mkdir, rm, mv, put, get, cat, layout, df): `put` creates the
//! file under a hidden temporary name in the target's directory with the source's mode
//! under the umask (`-`: standard input, created 0666 under the umask, and the target must
//! name the file), and renames it over the target once written and synced (removing it
//! on failure, SIGINT or SIGTERM); `ls -l` lists an entry whose attributes or objects are
//! missing marked `?`, reports it and fails at the end, as GNU ls does, and lists a
//! directory whose io server or cache manager is down too: the sizes that need that
//! server shown as `?` (with a cache manager down, every file in the cache tier: its last
//! bytes may be on any manager), the server named once on stderr
//! (`Client::fill_sizes_partial`); so do `ls -l FILE` and `stat` of a file with an object
//! on such a server (its other attributes are the manager's; `stat` says `Size: ?` and
//! fails naming the server); `rm` refuses `/`
//! before removing anything (GNU rm's --preserve-root); `mkdir` and `mv` say the
//! manager's refusals with the paths given (its messages name directories by inode);
//! `get` names the local file in write and sync errors and fails on a failed fsync, and
//! replaces an existing regular local file only once the whole copy is synced (it copies to
//! a hidden sibling `.NAME.weft-get-PID`, created exclusively, `-N` added when a killed
//! earlier get with the same pid left that name, and renames it over, keeping the old
//! file's mode;
//! failure, SIGINT or SIGTERM leave the old file as it was); `df`
//! exits 2 when an io server does not answer, as `status` does; `main.rs` names the io
//! server of a transport error by looking its address up in the cluster (`io server 2:
//! cannot connect to ...`). Sizes and ranges of
//! options (`--stripe-size`, `--cache-memory`, `--capability-lifetime-ms`) are checked
//! where clap parses them (`main.rs`), so nothing is sent or started with a value the
//! servers would refuse. `escape.rs`:
//! names holding control or bidirectional-text characters or bytes that are not UTF-8
//! are printed shell-escaped (`'a'$'\n''b'`), as GNU ls prints them on a terminal.
//! `output.rs`: the crate's `println!`; a closed standard output (`weft stat | head`)
//! ends the program by SIGPIPE, quietly. `progress.rs`.
//! `trace_cmd.rs`: `weft trace show` and `weft trace synth`; `weft sim` is weft-bench's
//! `simulate.rs`. `netemu.rs`: `weft up --emulate-network RATE[,LATENCY]`: a bridge
//! `weft-<id>` and, per server, a namespace `weft-<id>-<server>` joined to it by a veth
//! link of the same name (`eth0` inside), in a /22 of 10.213.0.0/16 that no host address
//! or route touches, shaped both ways with tc (tbf; netem's delay first where the kernel
//! has it, else the record says why not); the servers are spawned into their namespaces
//! (`setns` before exec), listen on their namespace's address and get no Unix socket, so
//! clients cross the links over TCP. The record (`netemu.toml`) stays in the home: `weft
//! down` removes the network, a restart makes it again. Making and sweeping hold
//! `/run/weft-netemu.lock` (`up` until its servers run); a set whose namespaces hold no
//! process is stale (`weft down --stale-networks`, and every emulated `up`, remove it).

/// `println!` that ends the program as a closed pipe ends GNU tools (`weft stat | head`:
/// quietly, by SIGPIPE) instead of panicking; shadows std's in every module below.
macro_rules! println {
    () => {
        $crate::output::line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::output::line(format_args!($($arg)*))
    };
}

mod admin;
mod backup_cmd;
mod check_cmd;
mod cluster;
mod counts;
mod escape;
mod files;
mod migrate_cmd;
mod mpi_env;
mod netemu;
mod output;
mod progress;
mod quota_cmd;
mod rebuild_cmd;
mod run;
mod scrub_cmd;
mod server_cmd;
mod top_cmd;
mod trace_cmd;
mod tree_copy;

use anyhow::Result;
use clap::{Args as ClapArgs, CommandFactory, FromArgMatches, Parser, Subcommand};
use std::path::PathBuf;
use weft_client::{Client, LayoutRequest};

#[derive(Parser, Debug)]
#[command(
    name = "weft",
    version = weft_build_info::version!(),
    about = "Weft, a parallel file system for HPC clusters: start a cluster, store and read files.",
    after_help = "Quick start:\n  weft up                      start 1 metadata + 4 io servers on this machine\n  weft put data.bin /          store a file, striped over the io servers\n  weft ls -l /                 list it\n  weft get /data.bin copy.bin  read it back\n  weft status                  see the servers\n  weft down                    stop the cluster (data is kept)\n\n\
Clients find the cluster through $WEFT_META=host:port (the metadata manager), else\n$WEFT_HOME/cluster.toml, else ~/.weft/cluster.toml; and its key through $WEFT_KEY (a file),\nelse cluster.key beside that cluster.toml."
)]
struct Cli {
    /// The current Weft directory: relative Weft paths are taken against it (default:
    /// $WEFT_CWD, else /).
    #[arg(short = 'C', long = "directory", global = true, value_name = "DIR")]
    directory: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(ClapArgs, Debug, Clone)]
struct HomeArg {
    /// Cluster home (cluster.toml, logs, data). Default: $WEFT_HOME, else ~/.weft.
    #[arg(long, value_name = "DIR")]
    home: Option<PathBuf>,
}

impl HomeArg {
    fn resolve(&self) -> PathBuf {
        self.home.clone().unwrap_or_else(weft_config::home_dir)
    }
}

#[derive(ClapArgs, Debug, Clone, Default)]
struct LayoutArgs {
    /// Stripe size, bytes (suffixes K, M, G accepted), e.g. 64K or 1M; 512 to 1G.
    #[arg(long, value_name = "BYTES", value_parser = parse_stripe_size_arg)]
    stripe_size: Option<u64>,
    /// Number of io servers to stripe over (0 = all).
    #[arg(long, value_name = "N")]
    stripe_count: Option<u32>,
    /// Index of the first io server (PVFS "base"). Default: the directory's, else the
    /// cluster's, else each new file the next server in turn.
    #[arg(long, value_name = "N")]
    first_server: Option<u32>,
    /// Caching mode: none (clients talk to the io servers), cached (all data I/O goes
    /// through the cluster's cache tier) or delegated (through delegates with
    /// server-aligned file domains). Default: the directory's, else the cluster's.
    #[arg(long, value_name = "MODE")]
    cache: Option<weft_layout::CacheMode>,
    /// Copies of the data: plain (one) or replicas=N (N copies of every stripe on N
    /// distinct io servers; reads and writes go on with one of them down).
    #[arg(long, value_name = "KIND")]
    redundancy: Option<weft_layout::Redundancy>,
}

impl LayoutArgs {
    fn request(&self) -> LayoutRequest {
        LayoutRequest {
            cache: self.cache,
            stripe_size_bytes: self.stripe_size,
            stripe_count: self.stripe_count,
            first_server: self.first_server,
            redundancy: self.redundancy,
        }
    }
    fn is_set(&self) -> bool {
        self.stripe_size.is_some()
            || self.stripe_count.is_some()
            || self.first_server.is_some()
            || self.cache.is_some()
            || self.redundancy.is_some()
    }
}

fn parse_auto_rebuild_arg(s: &str) -> Result<String, String> {
    weft_config::parse_auto_rebuild(Some(s)).map(|_| s.trim().to_owned())
}

fn parse_size_arg(s: &str) -> Result<u64, String> {
    // "-1" or "-1M": say what a size is.
    weft_config::parse_size(s).map_err(|e| match s.trim_start().starts_with('-') {
        true => format!("{e}: a size is 0 or more bytes, with a K, M or G suffix if wanted"),
        false => e,
    })
}

/// A size within `range`, which `says` as a user writes it; checked where it is parsed,
/// so that nothing is sent or started with a size the servers would refuse.
fn parse_size_within(
    s: &str,
    range: std::ops::RangeInclusive<u64>,
    says: std::fmt::Arguments,
) -> Result<u64, String> {
    // "-1M" is no size either; say what is one.
    let bytes = weft_config::parse_size(s).map_err(|e| format!("{e}: {says}"))?;
    if !range.contains(&bytes) {
        return Err(format!("{says}, not {bytes}"));
    }
    Ok(bytes)
}

/// A stripe size: out of range, the manager refused the request only as malformed
/// ("invalid stripe size"), and `weft up` only after starting its servers.
fn parse_stripe_size_arg(s: &str) -> Result<u64, String> {
    use weft_layout::stripe::{STRIPE_SIZE_BYTES_MAX as MAX, STRIPE_SIZE_BYTES_MIN as MIN};
    parse_size_within(
        s,
        MIN..=MAX,
        format_args!("a stripe size is {MIN} bytes to 1G ({MAX} bytes)"),
    )
}

/// `weft up --cache-memory`: out of range, every cache manager exited at startup and
/// `weft up` failed only then.
fn parse_cache_memory_arg(s: &str) -> Result<u64, String> {
    let (min, max) = (
        weft_config::CACHE_MEMORY_BYTES_MIN,
        weft_cm::CACHE_MEMORY_BYTES_MAX,
    );
    parse_size_within(
        s,
        min..=max,
        format_args!("a cache manager holds 1M ({min} bytes) to 1T ({max} bytes)"),
    )
}

/// `weft up --capability-lifetime-ms`: the range the servers accept, checked before any
/// of them starts.
fn parse_capability_lifetime_arg(s: &str) -> Result<u64, String> {
    let ms: u64 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a number of milliseconds"))?;
    if !(1_000..=3_600_000).contains(&ms) {
        return Err(format!(
            "a capability lifetime is 1000 to 3600000 ms (1 s to an hour), not {ms}"
        ));
    }
    Ok(ms)
}

#[derive(Subcommand, Debug)]
enum KeyAction {
    /// Write a new key to FILE (mode 0600); refuses to overwrite one.
    Create {
        /// Where to write the key (refused if it exists).
        file: PathBuf,
    },
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Start a whole cluster on this machine in the background (or restart a stopped one).
    #[command(
        long_about = "Start a whole cluster on this machine in the background: one metadata manager and --io io \
servers, on free ports of 127.0.0.1, with data and logs under the home directory. If the home already holds a \
cluster that is stopped, `weft up` starts it again with its data."
    )]
    Up {
        #[command(flatten)]
        home: HomeArg,
        /// Number of io servers.
        #[arg(long = "io", default_value_t = 4, value_name = "N",
              value_parser = counts::Count::<u32>::new(1, cluster::IO_SERVERS_MAX.into()))]
        io_servers: u32,
        /// Objects the metadata manager precreates on the io servers per refill of its
        /// pool, so that creates need no round trip to them (0: create each file's
        /// objects at its create; at most 4096, more is taken as 4096); doubled, up to
        /// 4096, for a set of servers whose creates empty the pool before its refill
        /// comes back. Default: the manager's (128).
        #[arg(long, value_name = "N")]
        precreate: Option<u32>,
        /// The metadata manager's rebuilder: once an io server that missed writes to
        /// replicated files answers again, their stale pieces are copied back to it
        /// from the other copies in the background, at most this many bytes per
        /// second (K, M, G suffixes; at least 1M), or `off` (then `weft rebuild` by
        /// hand). Default 100M.
        #[arg(long, value_name = "RATE|off", value_parser = parse_auto_rebuild_arg)]
        auto_rebuild: Option<String>,
        /// Default stripe size of new files (K, M, G suffixes accepted; 512 to 1G).
        #[arg(long, default_value = "64K", value_name = "BYTES", value_parser = parse_stripe_size_arg)]
        stripe_size: u64,
        /// Default number of io servers per file (0 = all).
        #[arg(long, default_value_t = 0, value_name = "N")]
        stripe_count: u32,
        /// The cache tier: `none`; `colocated` (a cache manager in every io server,
        /// caching that server's stripes: collective I/O becomes disk-directed); or a
        /// number N of separate cache managers (Clusterfile's two-phase placement).
        #[arg(long, default_value = "none", value_name = "none|colocated|N")]
        cache: cluster::CachePlacement,
        /// Whose identity requests act with: owner (every request acts as the user
        /// who owns the cluster key, whatever it claims) or claimed (as the uid and
        /// groups it claims: every holder of the key is trusted with any identity;
        /// only for clients that are all trusted, such as a root mount serving
        /// several local users) or munge (each connection brings a MUNGE credential
        /// and its requests act as the uid and gid it vouches for; needs munged).
        #[arg(long, default_value = "owner", value_name = "owner|claimed|munge")]
        identity: weft_config::IdentityMode,
        /// For benchmarks only: io servers and cache managers serve every holder of
        /// the key by inode number, without the capabilities the manager issues after
        /// its permission checks (to measure what capabilities cost).
        #[arg(long)]
        insecure_no_capabilities: bool,
        /// How long a capability the manager issues is valid (milliseconds, 1000 to
        /// 3600000): the longest a chmod or chown takes to reach an io server that
        /// missed its revocation. Default 60000.
        #[arg(long, value_name = "MS", value_parser = parse_capability_lifetime_arg)]
        capability_lifetime_ms: Option<u64>,
        /// The metadata manager's grace after a restart (milliseconds, at most 600000):
        /// for this long it grants only the locks mounts held before and reclaim (see
        /// `weftd --lock-grace-ms`); other lock requests wait for it. Default 10000;
        /// it ends once every mount recorded as holding locks has reclaimed them, and
        /// there is none when no mount is (no lock held at a crash or `weft down`).
        #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(..=weft_config::LOCK_GRACE_MS_MAX))]
        lock_grace_ms: Option<u64>,
        /// How long the metadata manager may hold an acknowledged operation before a
        /// durable commit (milliseconds, at most 10000; see `weftd --commit-interval-ms`
        /// and the guide's docs/src/consistency.md). Default 5; 0: durable before answered.
        #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(..=weft_config::COMMIT_INTERVAL_MS_MAX))]
        commit_interval_ms: Option<u64>,
        /// Memory of each cache manager (K, M, G suffixes; 1M to 1T), default 512M.
        #[arg(long, value_name = "BYTES", value_parser = parse_cache_memory_arg)]
        cache_memory: Option<u64>,
        /// Replacement policy of the cache managers: lru, lfu, fifo, arc (default), s3fifo.
        #[arg(long, value_name = "POLICY")]
        cache_policy: Option<String>,
        /// How blocks map onto cache managers: aligned (a block to the manager of the io
        /// server holding it; for separate managers, a count that is a factor or
        /// multiple of the stripe count) or hashed (block x to manager x mod n).
        /// Default: aligned for colocated, hashed for separate managers.
        #[arg(long, value_name = "aligned|hashed")]
        cache_mapping: Option<weft_layout::CacheMapping>,
        /// Caching mode of new files unless a directory or create says otherwise:
        /// none, cached, delegated. Default: cached when there is a cache tier.
        #[arg(long, value_name = "MODE")]
        cache_default: Option<weft_layout::CacheMode>,
        /// A cluster-like network: every server in its own network namespace behind a
        /// veth link shaped with tc to RATE in each direction (tbf), with LATENCY of
        /// one-way delay where the kernel has tc's netem (said when it has not); clients
        /// reach the servers over TCP. E.g. 1gbit,50us. Needs root and iproute2; `weft
        /// down` removes the namespaces and links.
        #[arg(long, value_name = "RATE[,LATENCY]")]
        emulate_network: Option<weft_config::netemu::NetworkSpec>,
        /// Every server started gets this command's standard input and exits at its
        /// end (weftd --exit-on-stdin-eof): given the read end of a pipe, the cluster
        /// lives while the write end is open, and ends with the process holding it
        /// however that dies (the test harness's guard against servers outliving a
        /// killed test).
        #[arg(long)]
        tie_to_stdin: bool,
    },
    /// Stop the local cluster (its data is kept), and remove its emulated network if any.
    Down {
        #[command(flatten)]
        home: HomeArg,
        /// Instead: remove every emulated network (weft-* namespaces and links) whose
        /// servers are all gone, left by a killed `weft up` or test.
        #[arg(long)]
        stale_networks: bool,
    },
    /// List every server of the cluster a client uses (--home, else $WEFT_META, else
    /// $WEFT_HOME or ~/.weft): role, address, pid, state, bytes stored, metrics URL.
    Status {
        #[command(flatten)]
        home: HomeArg,
        /// Print the URL of the status page the metadata manager serves, and nothing else.
        #[arg(long)]
        web: bool,
    },
    /// A live view of the cluster: each server's throughput, operations, latency, cache
    /// hit rate and dirty bytes, and the busiest files and jobs, from the servers'
    /// metrics; refreshed every second.
    Top(top_cmd::TopArgs),
    /// List a directory (default /).
    Ls {
        /// Long listing: mode, links, owner, size, time.
        #[arg(short = 'l')]
        long: bool,
        /// Directories (their entries are listed) or files; default /.
        paths: Vec<String>,
    },
    /// Show a file's or directory's attributes and layout.
    Stat {
        /// One or more paths; as stat(1), a path that fails is reported and the others
        /// are still shown (exit status 1).
        #[arg(required = true)]
        paths: Vec<String>,
    },
    /// Create directories.
    Mkdir {
        /// Create missing parents; existing directories are fine.
        #[arg(short = 'p')]
        parents: bool,
        /// Permission bits in octal (e.g. 750), not masked by the umask; default 777
        /// under the umask, as mkdir(1).
        #[arg(short = 'm', long, value_name = "MODE", value_parser = files::parse_mode)]
        mode: Option<u32>,
        /// Directories to create (absolute Weft paths).
        #[arg(required = true)]
        paths: Vec<String>,
    },
    /// Remove files (and with -r, directories and their contents).
    Rm {
        /// Remove directories and everything under them (never the root, /).
        #[arg(short = 'r')]
        recursive: bool,
        /// Files (or, with -r, directories) to remove.
        #[arg(required = true)]
        paths: Vec<String>,
    },
    /// Rename or move (atomic; an existing target file is replaced).
    Mv {
        /// What to move.
        from: String,
        /// The new name, or an existing directory to move FROM into (keeping its name).
        to: String,
    },
    /// Copy a local file into Weft (into a directory if PATH is one), then sync it.
    Put {
        /// Copy a local directory and everything in it (as cp -r: into PATH under its
        /// own name if PATH is a directory, else as PATH); symbolic links stay links.
        #[arg(short = 'r', long)]
        recursive: bool,
        /// The local file to copy; `-` reads standard input (then PATH must name the
        /// file, not a directory).
        local: String,
        /// The Weft file to write (replaced whole if it exists), or a directory to put
        /// LOCAL into under its own name.
        path: String,
        #[command(flatten)]
        layout: LayoutArgs,
    },
    /// Copy a Weft file to a local file.
    Get {
        /// Copy a Weft directory and everything in it (as cp -r: into LOCAL under its
        /// own name if LOCAL is a directory, else as LOCAL).
        #[arg(short = 'r', long)]
        recursive: bool,
        /// The Weft file to copy.
        path: String,
        /// The local file to write (an existing one is replaced once the whole copy is
        /// synced, and left as it was if the get fails), or a directory to get PATH into
        /// under its own name.
        local: String,
    },
    /// Write files to standard output.
    Cat {
        /// Weft files, written one after the other.
        #[arg(required = true)]
        paths: Vec<String>,
    },
    /// Change permission bits (octal such as 750, or symbolic such as u+x,go-w).
    Chmod {
        /// Change the entries under directories too (symbolic links are left alone).
        #[arg(short = 'R')]
        recursive: bool,
        /// The mode: octal (0 to 7777) or symbolic clauses, comma separated: who (u, g,
        /// o, a; none is all), then +, - or =, then r, w, x, X, s, t (the umask is not
        /// applied).
        #[arg(value_parser = admin::parse_mode_change, allow_hyphen_values = true)]
        mode: admin::ModeChange,
        /// Files and directories to change.
        #[arg(required = true)]
        paths: Vec<String>,
    },
    /// Change owner and group (root only, or the owner to a group it belongs to).
    Chown {
        /// Change the entries under directories too.
        #[arg(short = 'R')]
        recursive: bool,
        /// OWNER, OWNER:GROUP, OWNER: or :GROUP; names from this machine's user and group
        /// databases, or numbers.
        owner: String,
        /// Files and directories to change.
        #[arg(required = true)]
        paths: Vec<String>,
    },
    /// Change group.
    Chgrp {
        /// Change the entries under directories too.
        #[arg(short = 'R')]
        recursive: bool,
        /// A group name from this machine's database, or a number.
        group: String,
        /// Files and directories to change.
        #[arg(required = true)]
        paths: Vec<String>,
    },
    /// Set access and modification times to now, creating empty files where none are.
    Touch {
        /// Do not create missing files.
        #[arg(short = 'c', long = "no-create")]
        no_create: bool,
        /// Files to touch (created empty where missing, unless -c; the missing files of one
        /// directory are made together, one request to the manager per 256 names).
        #[arg(required = true)]
        paths: Vec<String>,
    },
    /// Space used under each path, per directory (KiB, as du).
    Du {
        /// One total per path.
        #[arg(short = 's')]
        summary: bool,
        /// Sizes as 1.5K, 234M, 2.0G.
        #[arg(short = 'H', long = "human-readable")]
        human: bool,
        /// Count file sizes rather than allocated blocks.
        #[arg(long)]
        apparent_size: bool,
        /// Default: the current Weft directory.
        paths: Vec<String>,
    },
    /// Find entries by name, type, size, age or stripe count, as find(1) and `lfs find`.
    #[command(
        long_about = "Find entries under each PATH (default: the current Weft directory) that pass every test \
given, and print their paths.\n\nExamples:\n  weft find /data --name '*.h5' --size +1G\n  \
weft find /scratch --type f --mtime +30\n  weft find / --stripe-count 1 --type f"
    )]
    Find {
        /// Where to look.
        paths: Vec<String>,
        /// Names matching this shell pattern (quote it: `'*.h5'`).
        #[arg(long)]
        name: Option<String>,
        /// f (file), d (directory), l (symbolic link), p, s, c or b.
        #[arg(long = "type", value_parser = admin::parse_kind)]
        kind: Option<weft_client::FileKind>,
        /// Files larger (+N), smaller (-N) or exactly N bytes; K, M, G, T suffixes.
        #[arg(long, value_parser = admin::parse_size_test, allow_hyphen_values = true)]
        size: Option<(std::cmp::Ordering, u64)>,
        /// Modified more than (+N), less than (-N) or exactly N whole days ago.
        #[arg(long, value_parser = admin::parse_days_test, allow_hyphen_values = true)]
        mtime: Option<(std::cmp::Ordering, i64)>,
        /// Files striped over exactly N io servers.
        #[arg(long, value_name = "N")]
        stripe_count: Option<u32>,
        /// Descend at most N levels below each PATH (0: the paths themselves).
        #[arg(long, value_name = "N")]
        maxdepth: Option<u32>,
    },
    /// Show a file's layout, or set a directory's default layout for new files.
    #[command(
        long_about = "Show a file's layout (stripe size, stripe count, first server, servers), or with --set \
set a directory's default layout, inherited by files created in it (and by new subdirectories).\n\nExamples:\n  \
weft layout /data/out.h5\n  weft layout --set --stripe-size 1M --stripe-count 2 /data\n  \
weft layout --set --redundancy replicas=2 /data/safe.bin   (a path that does not exist: an empty file is made)\n  \
weft layout --clear /data"
    )]
    Layout {
        /// A file (its layout is shown) or a directory (its default for new files).
        path: String,
        /// Set the directory's default layout from the --stripe-* and --cache options.
        #[arg(long)]
        set: bool,
        /// Remove the directory's default layout (new files use the cluster default).
        #[arg(long, conflicts_with = "set")]
        clear: bool,
        #[command(flatten)]
        layout: LayoutArgs,
    },
    /// Copy replicated files' stale pieces back from fresh copies and mark them fresh.
    #[command(
        long_about = "Copy the stale pieces of replicated files (replicas=N layouts) back from a fresh copy \
and clear their stale marks, so that the files are fully redundant again. A piece is stale when its io \
server missed writes (it was down or unreachable); `weft layout FILE` shows stale pieces as `(stale)`. \
Writes to the file may go on during the rebuild: a chunk a write reaches meanwhile is copied again, and \
a piece a writer marks stale again is copied again.\n\nExamples:\n  \
weft rebuild /data/safe.bin            (one file)\n  \
weft rebuild                           (every file with a stale piece; root)\n  \
weft rebuild --server 2                (every stale piece on io server 2)\n  \
weft rebuild --server 2 --missing      (io server 2's disk was replaced by an empty one)\n  \
weft rebuild --rate 200M               (at most 200 MB/s)"
    )]
    Rebuild(rebuild_cmd::RebuildArgs),
    /// Compare the copies of replicated files, and repair those that differ.
    #[command(
        long_about = "Read every fresh copy of each stripe slot of replicated files (replicas=N \
layouts) and compare them, chunk by chunk, so that a copy that went wrong unnoticed is found while another \
still has the right bytes. Stale copies are left to `weft rebuild`. Writes may go on: a chunk a write \
reaches meanwhile is read again, and a difference counts only if it lasts 2 s with no write arriving. \
Without checksums a scrub cannot tell which copy is right: with --repair the slot's first fresh copy (its \
primary, unless that is stale) is kept and the other rebuilt from it. Exits non-zero when copies differ \
(and were not all repaired). Run it from cron or a systemd timer for a schedule.\n\nExamples:\n  \
weft scrub /data/safe.bin              (one file)\n  \
weft scrub --rate 100M /data           (every replicated file under /data, at most 100 MB/s)\n  \
weft scrub --repair /data/safe.bin     (rebuild the copies that differ)"
    )]
    Scrub(scrub_cmd::ScrubArgs),
    /// Show and set user, group and project quotas (bytes and files).
    #[command(
        long_about = "Show and set quotas of bytes and files per user, group and project, as Lustre's \
lfs quota, lfs setquota and lfs project. A file counts for its owner, its group and its project; what is \
made in a directory takes its project. Over a hard limit, or over a soft limit for longer than the grace \
period, creates and writes fail with EDQUOT (\"Disk quota exceeded\").\n\nExamples:\n  \
weft quota                              (your own user and groups)\n  \
weft quota -u alice                     (root, or alice herself)\n  \
weft quota set -u alice -b 9G -B 10G -i 90000 -I 100000\n  \
weft quota set -p 42 -B 1T              (project 42)\n  \
weft quota project -p 42 -r /proj/x     (give /proj/x and all below it project 42)\n  \
weft quota grace -u -b 86400            (users may stay over soft limits of bytes for a day)\n  \
weft quota recount                      (count every id's usage again)"
    )]
    Quota(quota_cmd::QuotaArgs),
    /// Restripe files in place (new stripe size, count, servers or redundancy), keeping
    /// their inode, attributes and extended attributes.
    #[command(
        long_about = "Copy each file's bytes into objects of a new layout and switch the file to it atomically (as Lustre's `lfs migrate`): readers see the old layout or the new, writers wait during the copy, handles opened before the switch get ESTALE (reopen). Fields not given keep the file's own; a file keeps its caching mode (a file in the cache tier migrates too: the cache managers write its unsynced blocks back first).\n\nExamples:\n  weft migrate --stripe-count 4 /data/big.bin\n  weft migrate -r --stripe-size 4M /data/run1"
    )]
    Migrate(migrate_cmd::MigrateArgs),
    /// Io servers: adding one to the running cluster, their states, and draining one
    /// (its files moved off it, online).
    #[command(subcommand)]
    Server(server_cmd::ServerCommand),
    /// Save the metadata manager's namespace to FILE while the cluster runs (one
    /// committed state, with its checksum and versions; see the guide's operations page).
    Backup(backup_cmd::BackupArgs),
    /// Put a backup back on a stopped metadata manager (refuses a damaged or
    /// incompatible file, and a running manager).
    Restore(backup_cmd::RestoreArgs),
    /// Health check: servers answer with this version, space, stale pieces, and the
    /// namespace against the io servers' objects (exit status 1 if something is wrong).
    Check(check_cmd::CheckArgs),
    /// Show namespace counts and each io server's space (exit status 2 if one does not
    /// answer).
    Df,
    /// Benchmarks that compare Weft with a local-file baseline in the same run.
    Bench(weft_bench::BenchArgs),
    /// Trace-driven cache simulation: hit rates of the aggregated and the original
    /// (collective-I/O-aware) request streams of recorded traces, per policy and size.
    #[command(long_about = weft_bench::simulate::LONG_ABOUT)]
    Sim(weft_bench::simulate::SimArgs),
    /// Traces of Weft clients (WEFT_TRACE=DIR): show one, or generate a workload's.
    Trace(trace_cmd::TraceArgs),
    /// Mount Weft at MOUNTPOINT through FUSE, for any program (in the background).
    #[command(
        long_about = "Mount Weft at MOUNTPOINT through FUSE, so that unmodified programs (ls, cp, tar, dd, \
MPI-IO) use it. Returns once the mount is usable, leaving a daemon to serve it; --foreground serves in this \
process until unmounted or interrupted. A mount by root serves every user, each acting with their own \
permissions.\n\nThe daemon's messages (why an operation failed with EIO, which server was not reached) go to \
$XDG_STATE_HOME/weft/mount-NAME.log when XDG_STATE_HOME is set, else /var/log/weft/mount-NAME.log for root and \
~/.local/state/weft/mount-NAME.log for other users, NAME being the mountpoint with its slashes as dashes \
(/mnt/weft: mount-mnt-weft.log; a hash of the path is appended when the mountpoint has dashes or other \
characters, so that /a-b and /a/b get different logs); weft mount prints the path. The log holds at most 8 MiB, then becomes \
NAME.log.1 (replacing the older one) and starts again, so at most 16 MiB are kept. --log FILE puts it \
elsewhere (bounded the same way); --no-log discards the messages; --foreground writes them to standard error.\n\nFile layouts are the extended attribute user.weft.layout.\n\nExamples:\n  weft mount /mnt/weft\n  \
getfattr -n user.weft.layout /mnt/weft/data.bin\n  setfattr -n user.weft.layout -v \"stripe_size=1M stripe_count=2\" \
/mnt/weft/dir\n  weft umount /mnt/weft"
    )]
    Mount {
        /// An existing directory to mount Weft on.
        mountpoint: PathBuf,
        /// Serve in this process instead of a background daemon.
        #[arg(short = 'f', long)]
        foreground: bool,
        /// FUSE worker threads (requests served in parallel; 1 to 64, others taken as the nearest).
        #[arg(long, default_value_t = weft_fuse::THREADS_DEFAULT, value_name = "N")]
        threads: usize,
        /// How long the kernel caches attributes and names, milliseconds.
        #[arg(long, default_value_t = 1000, value_name = "MS")]
        attr_timeout_ms: u64,
        /// How long the kernel keeps names and attributes that only the manager changes
        /// (directories, symbolic links, files nobody is writing), milliseconds, while
        /// the mount hears the manager's feed of what other clients change; another
        /// client's change still shows within the attribute timeout. 0: no leases.
        #[arg(long, default_value_t = weft_fuse::LEASE_DEFAULT.as_millis() as u64, value_name = "MS")]
        lease_ms: u64,
        /// Keep file data cached across opens (faster re-reads; another client's changes
        /// may not be seen).
        #[arg(long)]
        keep_cache: bool,
        /// For tests: how long after a lookup checked for an open (the last step of an
        /// open's path walk) the same thread's open of that file goes by it instead of
        /// checking again, milliseconds (at most the attribute timeout; 0: never).
        #[arg(long, default_value_t = 5, value_name = "MS", hide = true)]
        walk_window_ms: u64,
        /// Where the background daemon writes its messages (at most 8 MiB, then one
        /// rotation to FILE.1). Default: $XDG_STATE_HOME/weft/mount-NAME.log, else
        /// /var/log/weft/ for root and ~/.local/state/weft/ for others.
        #[arg(long, value_name = "FILE", conflicts_with = "no_log")]
        log: Option<PathBuf>,
        /// Discard the background daemon's messages instead of logging them.
        #[arg(long)]
        no_log: bool,
    },
    /// Make a cluster key for a cluster set up by hand (`weft up` makes its own).
    #[command(
        long_about = "Make a cluster key: 32 random bytes, written as hex to FILE with mode 0600. Every server and \
client of a cluster must hold the same key (servers: cluster.key beside cluster.toml, key_file there, or \
weftd --key; clients: $WEFT_KEY, else beside cluster.toml). Copy it to every machine over a secure channel \
and keep it readable by its owner only. An existing FILE is never overwritten."
    )]
    Key {
        #[command(subcommand)]
        action: KeyAction,
    },
    /// Print how to run MPI programs on weft: files (LD_PRELOAD of libweft_mpiio.so for
    /// Open MPI or libweft_mpiio_mpich.so for MPICH, mpirun/mpiexec lines, linking, hints).
    MpiEnv {
        /// The MPI the programs use: `openmpi` or `mpich`. Default: $WEFT_MPI, else the
        /// implementation of the `mpiexec` on PATH, else openmpi.
        #[arg(long, value_name = "openmpi|mpich")]
        mpi: Option<String>,
    },
    /// Run an unmodified program with libweft_posix.so: its reads and writes of files in
    /// a Weft mount go to the io servers natively, not through FUSE.
    #[command(long_about = run::LONG_ABOUT)]
    Run {
        /// Append the library's counters (files served, bytes read and written natively)
        /// to FILE at the exit of every process of the program (WEFT_POSIX_STATS).
        #[arg(long, value_name = "FILE")]
        stats: Option<PathBuf>,
        /// The program to run (found on PATH).
        program: String,
        /// Its arguments.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Unmount a Weft mount.
    Umount {
        /// Where Weft is mounted.
        mountpoint: PathBuf,
        /// Detach now even if busy; the mount ends when its last open file closes.
        #[arg(short = 'l', long)]
        lazy: bool,
    },
}

fn main() {
    // Packagers: `weft --generate-man-pages DIR` writes weft.1 and a page per subcommand.
    if let Some(dir) = weft_man::requested(std::env::args_os().skip(1)) {
        weft_man::write_and_exit("weft", Cli::command(), &dir);
    }
    let matches = counts::checked(Cli::command())
        .try_get_matches()
        .unwrap_or_else(|e| counts::explain(e).exit());
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let given = given_flags(&matches);
    let command = match in_cwd(cli.command, cli.directory.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("weft: {e:#}");
            std::process::exit(2);
        }
    };
    let result = run(command, &given);
    flush_releases();
    // A benchmark interrupted by a signal: its signal thread is stopping the clusters
    // and exits with 128 + the signal; an error the servers' going caused here is not
    // this run's to report (it raced that exit before, giving status 1).
    while weft_bench::stopping_on_signal() {
        std::thread::park();
    }
    if let Err(e) = result {
        if e.chain().any(output::is_broken_pipe) {
            output::die_of_broken_pipe();
        }
        eprintln!("weft: {e:#}");
        std::process::exit(1);
    }
}

/// The options of the subcommand that were given on the command line (not defaults),
/// by their long names: `weft up` on an existing cluster refuses the ones it cannot
/// apply rather than ignoring them.
fn given_flags(matches: &clap::ArgMatches) -> Vec<String> {
    let Some((_, sub)) = matches.subcommand() else {
        return Vec::new();
    };
    sub.ids()
        .filter(|id| sub.value_source(id.as_str()) == Some(clap::parser::ValueSource::CommandLine))
        .map(|id| id.as_str().replace('_', "-"))
        .collect()
}

/// Connects to the cluster the environment names. When its metadata manager does not
/// answer at all (a stopped cluster, a stale WEFT_META), says so and what to do rather
/// than only "cannot connect to ADDR".
fn connect() -> Result<Client> {
    let client = Client::from_env().map_err(|e| match &e {
        weft_client::ClientError::Transport(rpc)
            if rpc.is_transport() || matches!(rpc, weft_rpc::RpcError::TimedOut { .. }) =>
        {
            anyhow::anyhow!(
                "{e}: the cluster's metadata manager does not answer; is the cluster running? \
                 (`weft status` shows its servers, `weft up` starts a local one)"
            )
        }
        _ => e.into(),
    })?;
    let mut connected = CONNECTED.lock().unwrap_or_else(|p| p.into_inner());
    if connected.len() < CONNECTED_MAX {
        connected.push(client.clone());
    }
    Ok(client)
}

/// Every client `connect` made: before the process exits, the write capabilities they
/// gave back at their last closes are sent (in the background until then), so that the
/// manager vouches for what this command wrote at once rather than when those expire.
static CONNECTED: std::sync::Mutex<Vec<Client>> = std::sync::Mutex::new(Vec::new());
/// Most clients kept for that (a command connects once or twice).
const CONNECTED_MAX: usize = 8;

fn flush_releases() {
    let clients = std::mem::take(&mut *CONNECTED.lock().unwrap_or_else(|p| p.into_inner()));
    for client in clients {
        client.flush_releases(std::time::Duration::from_secs(2));
    }
}

/// An error from an io server names which one: the transport says only its address
/// ("cannot connect to 127.0.0.1:44825"), which a user cannot tie to `weft status`'s
/// rows. Errors that name the server already, or no io server, are left as they are.
fn name_io_server(client: &Client, e: anyhow::Error) -> anyhow::Error {
    use weft_rpc::RpcError;
    let addr = e
        .chain()
        .find_map(|cause| match cause.downcast_ref::<weft_client::ClientError>()? {
            weft_client::ClientError::Transport(
                RpcError::Connect { addr, .. }
                | RpcError::Disconnected { addr, .. }
                | RpcError::TimedOut { addr, .. }
                | RpcError::Protocol { addr, .. }
                | RpcError::Remote { addr, .. }
                | RpcError::ProtocolVersion { addr, .. }
                | RpcError::Authentication { addr, .. },
            ) => Some(addr.clone()),
            _ => None,
        });
    // The address may carry the way it was reached: "127.0.0.1:44793 (via unix:PATH)".
    let server = addr.and_then(|addr| {
        let first = addr.split_whitespace().next().unwrap_or_default().to_owned();
        client
            .cluster_info()
            .io_servers
            .iter()
            .find(|s| s.addr == first || s.socket.as_deref() == Some(first.as_str()))
            .map(|s| s.id)
    });
    match server {
        Some(id) if !format!("{e:#}").contains(&format!("io server {id}")) => {
            e.context(format!("io server {id}"))
        }
        _ => e,
    }
}

/// The command with its Weft paths made absolute against the current Weft directory
/// (`-C`, else $WEFT_CWD, else /); du and find without paths take that directory, and
/// so does ls when one is given.
fn in_cwd(mut command: Command, cwd: Option<&str>) -> Result<Command> {
    let given = cwd.is_some() || std::env::var_os("WEFT_CWD").is_some();
    let one = |p: &mut String| -> Result<()> {
        *p = admin::absolute(p, cwd)?;
        Ok(())
    };
    let all = |ps: &mut Vec<String>, default_here: bool| -> Result<()> {
        if ps.is_empty() && default_here {
            ps.push(".".to_string());
        }
        ps.iter_mut().try_for_each(one)
    };
    match &mut command {
        Command::Ls { paths, .. } => all(paths, given)?,
        Command::Du { paths, .. } | Command::Find { paths, .. } => all(paths, true)?,
        Command::Stat { paths }
        | Command::Cat { paths }
        | Command::Mkdir { paths, .. }
        | Command::Rm { paths, .. }
        | Command::Chmod { paths, .. }
        | Command::Chown { paths, .. }
        | Command::Chgrp { paths, .. }
        | Command::Touch { paths, .. } => all(paths, false)?,
        Command::Mv { from, to } => {
            one(from)?;
            one(to)?;
        }
        Command::Put { path, .. } | Command::Get { path, .. } | Command::Layout { path, .. } => one(path)?,
        Command::Rebuild(args) => args.path.iter_mut().try_for_each(one)?,
        Command::Scrub(args) => args.paths.iter_mut().try_for_each(one)?,
        Command::Quota(quota_cmd::QuotaArgs {
            command: Some(quota_cmd::QuotaCommand::Project { paths, .. }),
            ..
        }) => all(paths, false)?,
        Command::Migrate(args) => args.paths.iter_mut().try_for_each(one)?,
        _ => {}
    }
    Ok(command)
}

fn run(command: Command, given: &[String]) -> Result<()> {
    match command {
        Command::Up {
            home,
            io_servers,
            precreate,
            auto_rebuild,
            stripe_size,
            stripe_count,
            cache,
            cache_memory,
            cache_policy,
            cache_mapping,
            cache_default,
            identity,
            insecure_no_capabilities,
            capability_lifetime_ms,
            lock_grace_ms,
            commit_interval_ms,
            emulate_network,
            tie_to_stdin,
        } => {
            if let Some(p) = &cache_policy {
                p.parse::<weft_cache::PolicyKind>()?;
            }
            cluster::up(&cluster::UpOptions {
                home: home.resolve(),
                io_servers,
                precreate,
                auto_rebuild,
                stripe_size,
                stripe_count,
                cache,
                cache_settings: weft_config::CacheSettings {
                    default: cache_default.map(|m| m.name().to_owned()),
                    mapping: cache_mapping.map(|m| m.name().to_owned()),
                    block_size: 0,
                    memory: cache_memory,
                    policy: cache_policy,
                },
                identity,
                capabilities: !insecure_no_capabilities,
                capability_lifetime_ms,
                lock_grace_ms,
                commit_interval_ms,
                network: emulate_network,
                given: given.to_vec(),
                tie_to_stdin,
            })
        }
        Command::Down {
            stale_networks: true, ..
        } => cluster::down_stale_networks(),
        Command::Down { home, .. } => {
            // A client's cluster is $WEFT_META's when it is set: `weft down` must not
            // answer "nothing to stop" about another cluster (the home's) then.
            let meta = std::env::var("WEFT_META").ok().filter(|m| !m.is_empty());
            match (home.home, meta) {
                (None, Some(meta)) => cluster::down_meta(&weft_config::home_dir(), &meta),
                (home, _) => cluster::down(&HomeArg { home }.resolve()),
            }
        }
        Command::Status { home, web } => {
            if !cluster::status(&cluster::StatusOf::choose(home.home), web)? {
                std::process::exit(2);
            }
            Ok(())
        }
        Command::Ls { long, paths } => {
            let client = connect()?;
            files::ls(&client, &paths, long).map_err(|e| name_io_server(&client, e))
        }
        Command::Stat { paths } => {
            let client = connect()?;
            let mut failed = false;
            for path in &paths {
                if let Err(e) = files::stat(&client, path).map_err(|e| name_io_server(&client, e)) {
                    eprintln!("weft: {e:#}");
                    failed = true;
                }
            }
            if failed {
                std::process::exit(1);
            }
            Ok(())
        }
        Command::Mkdir { parents, paths, mode } => files::mkdir(&connect()?, &paths, parents, mode),
        Command::Rm { recursive, paths } => files::rm(&connect()?, &paths, recursive),
        Command::Mv { from, to } => files::mv(&connect()?, &from, &to),
        Command::Put {
            recursive: true,
            local,
            path,
            layout,
        } => {
            if local == "-" {
                anyhow::bail!("put -r copies a directory; standard input is not one");
            }
            let client = connect()?;
            tree_copy::put_tree(&client, &local, &path, layout.request())
                .map_err(|e| name_io_server(&client, e))
        }
        Command::Put {
            local, path, layout, ..
        } => {
            let client = connect()?;
            files::put(&client, &local, &path, layout.request()).map_err(|e| name_io_server(&client, e))
        }
        Command::Get {
            recursive: true,
            path,
            local,
        } => {
            let client = connect()?;
            tree_copy::get_tree(&client, &path, &local).map_err(|e| name_io_server(&client, e))
        }
        Command::Get { path, local, .. } => {
            let client = connect()?;
            files::get(&client, &path, &local).map_err(|e| name_io_server(&client, e))
        }
        Command::Cat { paths } => {
            let client = connect()?;
            files::cat(&client, &paths).map_err(|e| name_io_server(&client, e))
        }
        Command::Chmod {
            recursive,
            mode,
            paths,
        } => admin::chmod(&connect()?, &mode, &paths, recursive),
        Command::Chown {
            recursive,
            owner,
            paths,
        } => {
            let (uid, gid) = admin::parse_owner(&owner)?;
            admin::chown(&connect()?, uid, gid, &paths, recursive)
        }
        Command::Chgrp {
            recursive,
            group,
            paths,
        } => {
            let gid = admin::group_id(&group)?;
            admin::chown(&connect()?, None, Some(gid), &paths, recursive)
        }
        Command::Touch { no_create, paths } => admin::touch(&connect()?, &paths, no_create),
        Command::Du {
            summary,
            human,
            apparent_size,
            paths,
        } => {
            let client = connect()?;
            admin::du(&client, &paths, summary, human, apparent_size).map_err(|e| name_io_server(&client, e))
        }
        Command::Find {
            paths,
            name,
            kind,
            size,
            mtime,
            stripe_count,
            maxdepth,
        } => {
            let client = connect()?;
            let filter = admin::FindFilter {
                name,
                kind,
                size,
                mtime_days: mtime,
                stripe_count,
                max_depth: maxdepth.map(|d| d as usize),
            };
            admin::find(&client, &paths, &filter).map_err(|e| name_io_server(&client, e))
        }
        Command::Layout {
            path,
            set,
            clear,
            layout,
        } => {
            if set && !layout.is_set() {
                anyhow::bail!(
                    "--set needs at least one of --stripe-size, --stripe-count, --first-server, --cache, --redundancy"
                );
            }
            if !set && layout.is_set() {
                anyhow::bail!(
                    "--stripe-size, --stripe-count, --first-server, --cache and --redundancy go with --set (a \
                     directory's default for new files, or a new empty file; a file's layout is fixed \
                     when it is created)"
                );
            }
            files::layout(&connect()?, &path, set.then(|| layout.request()), clear)
        }
        Command::Rebuild(args) => {
            let client = connect()?;
            rebuild_cmd::run(&client, args).map_err(|e| name_io_server(&client, e))
        }
        Command::Scrub(args) => {
            let client = connect()?;
            scrub_cmd::run(&client, args).map_err(|e| name_io_server(&client, e))
        }
        Command::Quota(args) => quota_cmd::run(&connect()?, args),
        Command::Migrate(args) => {
            let client = connect()?;
            migrate_cmd::run(&client, args).map_err(|e| name_io_server(&client, e))
        }
        Command::Server(command) => {
            let client = connect()?;
            server_cmd::run(&client, command).map_err(|e| name_io_server(&client, e))
        }
        Command::Backup(args) => backup_cmd::backup(&args),
        Command::Restore(args) => backup_cmd::restore(&args),
        Command::Check(args) => check_cmd::run(&args),
        Command::Df => files::df(&connect()?),
        Command::Top(args) => top_cmd::run(args),
        Command::Bench(args) => weft_bench::run(args),
        Command::Sim(args) => weft_bench::simulate::run(&args),
        Command::Trace(args) => trace_cmd::run(args),
        Command::Mount {
            mountpoint,
            foreground,
            threads,
            attr_timeout_ms,
            lease_ms,
            keep_cache,
            walk_window_ms,
            log,
            no_log,
        } => {
            let log = match (log, no_log) {
                (_, true) => weft_fuse::MountLog::Off,
                (Some(file), false) => weft_fuse::MountLog::File(file),
                (None, false) => weft_fuse::MountLog::Default,
            };
            let options = weft_fuse::MountOptions {
                threads,
                attr_ttl: std::time::Duration::from_millis(attr_timeout_ms),
                lease: std::time::Duration::from_millis(lease_ms.min(3_600_000)),
                keep_cache,
                log,
                walk_window: std::time::Duration::from_millis(walk_window_ms),
                ..weft_fuse::MountOptions::new(mountpoint)
            };
            // Background mounting forks: nothing before this point starts a thread.
            if foreground {
                Ok(weft_fuse::mount_foreground(&options)?)
            } else {
                Ok(weft_fuse::mount_background(&options)?)
            }
        }
        Command::Key {
            action: KeyAction::Create { file },
        } => {
            if file.exists() {
                anyhow::bail!("{} exists; a key is never overwritten (remove it first if you mean to replace it: every server and client then needs the new one)", file.display());
            }
            weft_rpc::ClusterKey::load_or_create(&file)?;
            println!(
                "created the cluster key {} (mode 0600): copy it to every server and client machine",
                file.display()
            );
            Ok(())
        }
        Command::MpiEnv { mpi } => mpi_env::print(mpi.as_deref()),
        Command::Run { stats, program, args } => run::run(&program, &args, stats),
        Command::Umount { mountpoint, lazy } => Ok(weft_fuse::unmount(&mountpoint, lazy)?),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every positional argument of the file and cluster commands says in `--help` what
    /// it is (`weft get <PATH> <LOCAL>` listed both with no words, so which is which
    /// was left to guess).
    #[test]
    fn every_positional_argument_has_help() {
        fn check(command: &clap::Command, name: &str, missing: &mut Vec<String>) {
            for arg in command.get_positionals() {
                if arg.get_help().is_none() && arg.get_possible_values().is_empty() {
                    missing.push(format!("{name} <{}>", arg.get_id()));
                }
            }
            for sub in command.get_subcommands() {
                // Benchmarks are weft-bench's own tree.
                if sub.get_name() != "bench" {
                    check(sub, &format!("{name} {}", sub.get_name()), missing);
                }
            }
        }
        let mut missing = Vec::new();
        check(&Cli::command(), "weft", &mut missing);
        assert!(missing.is_empty(), "without help: {missing:?}");
    }
}
