//! `weft sim TRACE_DIR`: the trace-driven cache simulator (weft-trace) from the command
//! line: reads every trace of a directory, replays the aggregated and the original
//! (collective-I/O-aware) reference streams through the cache tier's policies for each
//! cache size, and prints a table (or JSON), writing an SVG plot of hit rate against
//! cache size, one line per policy and stream. `weft bench cio` runs it on the
//! workloads' traces.

use std::path::{Path, PathBuf};

use anyhow::{bail, ensure, Context, Result};
use clap::Args;
use serde::Serialize;
use weft_cache::PolicyKind;
use weft_trace::refs::{self, Ops, RefOptions, Refs};
use weft_trace::sim::{self, MappingKind, SimConfig, Stream, Unrequested};

use crate::plot::{Figure, Panel, XAxis};
use crate::report::Table;

/// Largest trace file read (whole, into memory).
pub const TRACE_FILE_BYTES_MAX: u64 = 4 << 30;
/// Most trace files in one directory.
pub const TRACE_FILES_MAX: usize = 65_536;
/// Most cache sizes in one run.
pub const CACHE_SIZES_MAX: usize = 64;

pub const LONG_ABOUT: &str = "Replays the traces in TRACE_DIR (every *.wtrace file: one per process, \
recorded with WEFT_TRACE=DIR or the weft_trace hint, or made by `weft trace synth`) through the cache \
tier's replacement policies, for each cache size: the aggregated stream (the requests sent to Weft after \
collective aggregation: what a cache sees today) and the original stream (each process's own requests \
in their time order: collective-I/O-aware caching, where blocks that aggregation fetched but no process \
asked for are admitted cold, or not at all). Prints hit rate, byte hit rate and the blocks fetched that \
no process asked for, per size, policy and stream, and writes an SVG plot of hit rate against cache size. \
--json prints a JSON object instead of the table (its `results` rows have policy, stream, cache_bytes, \
hit_rate and more).\n\nExample:\n  weft sim traces/ --policy lru,arc --cache-sizes 4M,16M,64M";

#[derive(Args, Debug, Clone)]
pub struct SimArgs {
    /// A directory of traces (or one trace file).
    pub trace_dir: PathBuf,
    /// Policies, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "lru,lfu,fifo,arc,s3fifo")]
    pub policy: Vec<String>,
    /// Streams, comma separated: aggregated, original.
    #[arg(long, value_delimiter = ',', default_value = "aggregated,original")]
    pub stream: Vec<String>,
    /// What the original stream does with blocks no process asked for: cold
    /// (admitted at the cold end), none (not admitted); comma separated.
    #[arg(long, value_delimiter = ',', default_value = "cold,none")]
    pub unrequested: Vec<String>,
    /// Cache sizes of the whole tier (e.g. 4M,16M,1G). Default: nine sizes from 1/16 to
    /// 2x the data the processes touched.
    #[arg(long, value_delimiter = ',', value_parser = crate::parse_size_arg)]
    pub cache_sizes: Vec<u64>,
    /// Block size. Default: the largest stripe size of the traced files.
    #[arg(long, value_parser = crate::parse_size_arg)]
    pub block_size: Option<u64>,
    /// Cache managers the capacity and blocks are split over.
    #[arg(long, default_value_t = 1)]
    pub managers: u32,
    /// How blocks are dealt to managers: hashed (block x to manager x mod N) or aligned
    /// (the same, blocks being stripes).
    #[arg(long, default_value = "hashed")]
    pub mapping: String,
    /// Requests that count: reads, writes or all.
    #[arg(long, default_value = "reads")]
    pub ops: String,
    /// Print JSON instead of the table.
    #[arg(long)]
    pub json: bool,
    /// The SVG plot.
    #[arg(long, default_value = "weft-sim.svg", value_name = "FILE")]
    pub svg: PathBuf,
    /// Write no plot.
    #[arg(long)]
    pub no_svg: bool,
    /// Simulations run at once. Default: the machine's cores.
    #[arg(long)]
    pub threads: Option<usize>,
}

/// One row of the results.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub policy: String,
    pub stream: String,
    /// The original stream's admission of blocks no process asked for.
    pub unrequested: Option<String>,
    pub cache_bytes: u64,
    /// The cache size over the data the processes touched.
    pub cache_fraction: f64,
    pub capacity_blocks_per_manager: u64,
    pub hit_rate: f64,
    pub byte_hit_rate: f64,
    pub references: u64,
    pub hits: u64,
    pub misses: u64,
    pub unasked_blocks_fetched: u64,
}

impl Row {
    /// "arc original (cold)", "lru aggregated".
    pub fn series(&self) -> String {
        match &self.unrequested {
            Some(u) => format!("{} {} ({u})", self.policy, self.stream),
            None => format!("{} {}", self.policy, self.stream),
        }
    }
}

/// A series' mean over the cache sizes, against aggregated LRU (the seed's baseline).
#[derive(Debug, Clone, Serialize)]
pub struct SeriesSummary {
    pub series: String,
    pub mean_hit_rate: f64,
    /// (mean of this series / mean of aggregated LRU) - 1.
    pub improvement_of_mean: Option<f64>,
    /// Mean over the sizes of (this / aggregated LRU - 1), sizes where aggregated LRU
    /// hits nothing left out.
    pub mean_improvement: Option<f64>,
    pub sizes_compared: usize,
}

/// Everything `weft sim` found.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub traces: String,
    pub processes: usize,
    pub original_requests: u64,
    pub sent_requests: u64,
    pub block_size_bytes: u64,
    pub touched_bytes: u64,
    pub managers: u32,
    pub mapping: String,
    pub ops: String,
    pub notes: Vec<String>,
    pub results: Vec<Row>,
    pub summary: Vec<SeriesSummary>,
}

/// The trace files of `path`: the file itself, or a directory's `*.wtrace` files.
pub fn read_traces(path: &Path) -> Result<Vec<(String, Vec<u8>)>> {
    let files: Vec<PathBuf> = if path.is_dir() {
        let mut v: Vec<PathBuf> = std::fs::read_dir(path)
            .with_context(|| format!("reading {}", path.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "wtrace"))
            .collect();
        v.sort();
        v
    } else {
        vec![path.to_owned()]
    };
    ensure!(!files.is_empty(), "{}: no *.wtrace files", path.display());
    ensure!(
        files.len() <= TRACE_FILES_MAX,
        "{}: more than {TRACE_FILES_MAX} traces",
        path.display()
    );
    files
        .into_iter()
        .map(|f| {
            let len = std::fs::metadata(&f)
                .with_context(|| format!("reading {}", f.display()))?
                .len();
            ensure!(
                len <= TRACE_FILE_BYTES_MAX,
                "{}: {len} bytes, more than the {TRACE_FILE_BYTES_MAX} a trace may have",
                f.display()
            );
            let bytes = std::fs::read(&f).with_context(|| format!("reading {}", f.display()))?;
            Ok((
                f.file_name().unwrap_or_default().to_string_lossy().into_owned(),
                bytes,
            ))
        })
        .collect()
}

/// Writes traces into `dir`, first removing the *.wtrace files already there.
pub fn write_traces(dir: &Path, traces: &[(String, Vec<u8>)]) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for entry in std::fs::read_dir(dir)? {
        let p = entry?.path();
        if p.extension().is_some_and(|x| x == "wtrace") {
            std::fs::remove_file(&p).with_context(|| format!("removing {}", p.display()))?;
        }
    }
    for (name, bytes) in traces {
        let p = dir.join(name);
        std::fs::write(&p, bytes).with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(())
}

fn parse_list<T: std::str::FromStr<Err = E>, E: std::fmt::Display>(values: &[String]) -> Result<Vec<T>> {
    let mut out = Vec::new();
    for v in values {
        match v.trim().parse::<T>() {
            Ok(x) => out.push(x),
            Err(e) => bail!("{e}"),
        }
    }
    Ok(out)
}

/// Runs the simulations `args` asks for on the traces in memory.
pub fn simulate(traces: &[(String, Vec<u8>)], args: &SimArgs) -> Result<Report> {
    let policies: Vec<PolicyKind> = parse_list(&args.policy)?;
    let streams: Vec<Stream> = parse_list(&args.stream)?;
    let unrequested: Vec<Unrequested> = parse_list(&args.unrequested)?;
    let mapping: MappingKind = args.mapping.parse().map_err(anyhow::Error::msg)?;
    let ops: Ops = args.ops.parse().map_err(anyhow::Error::msg)?;
    ensure!(
        !policies.is_empty() && !streams.is_empty(),
        "no policy or no stream to simulate"
    );
    ensure!(
        !streams.contains(&Stream::Original) || !unrequested.is_empty(),
        "--unrequested: name cold, none or both"
    );
    ensure!(args.managers >= 1, "--managers must be at least 1");
    ensure!(
        args.cache_sizes.len() <= CACHE_SIZES_MAX,
        "at most {CACHE_SIZES_MAX} cache sizes"
    );
    let inputs: Vec<(String, &[u8])> = traces.iter().map(|(n, b)| (n.clone(), &b[..])).collect();
    let refs: Refs = refs::build(
        &inputs,
        &RefOptions {
            block_size_bytes: args.block_size,
            ops,
            ..RefOptions::default()
        },
    )?;
    ensure!(
        !refs.original.is_empty() || !refs.aggregated.is_empty(),
        "the traces hold no {} to simulate",
        match ops {
            Ops::Reads => "reads (--ops all counts writes too)",
            Ops::Writes => "writes",
            Ops::All => "requests",
        }
    );
    let sizes = if args.cache_sizes.is_empty() {
        sim::default_sizes(refs.touched_bytes(), refs.block_size_bytes, args.managers)
    } else {
        args.cache_sizes.clone()
    };
    let mut configs = Vec::new();
    for &policy in &policies {
        for &stream in &streams {
            let modes: &[Unrequested] = match stream {
                Stream::Aggregated => &[Unrequested::Cold],
                Stream::Original => &unrequested,
            };
            for &u in modes {
                for &cache_bytes in &sizes {
                    configs.push(SimConfig {
                        policy,
                        stream,
                        unrequested: u,
                        cache_bytes,
                        managers: args.managers,
                        mapping,
                    });
                }
            }
        }
    }
    for c in &configs {
        sim::check(&refs, c)?;
    }
    let threads = args.threads.unwrap_or_else(crate::report::host_cpus).max(1);
    let results = sim::simulate_all(&refs, &configs, threads);
    let touched = refs.touched_bytes().max(1) as f64;
    let mut rows = Vec::new();
    for (c, r) in configs.iter().zip(results) {
        let r = r?;
        rows.push(Row {
            policy: c.policy.to_string(),
            stream: c.stream.as_str().to_owned(),
            unrequested: (c.stream == Stream::Original).then(|| c.unrequested.as_str().to_owned()),
            cache_bytes: c.cache_bytes,
            cache_fraction: c.cache_bytes as f64 / touched,
            capacity_blocks_per_manager: r.capacity_blocks,
            hit_rate: r.hit_rate(),
            byte_hit_rate: r.byte_hit_rate(),
            references: r.references,
            hits: r.hits,
            misses: r.misses(),
            unasked_blocks_fetched: r.unasked_fetched,
        });
    }
    let summary = summarise(&rows);
    Ok(Report {
        traces: String::new(),
        processes: refs.processes,
        original_requests: refs.original_requests,
        sent_requests: refs.sent_requests,
        block_size_bytes: refs.block_size_bytes,
        touched_bytes: refs.touched_bytes(),
        managers: args.managers,
        mapping: args.mapping.clone(),
        ops: args.ops.clone(),
        notes: refs.notes,
        results: rows,
        summary,
    })
}

/// Each series' mean hit rate and its improvement over aggregated LRU.
pub fn summarise(rows: &[Row]) -> Vec<SeriesSummary> {
    let mut series: Vec<String> = Vec::new();
    for r in rows {
        if !series.contains(&r.series()) {
            series.push(r.series());
        }
    }
    let baseline: Vec<&Row> = rows.iter().filter(|r| r.series() == "lru aggregated").collect();
    let mean = |v: &[&Row]| v.iter().map(|r| r.hit_rate).sum::<f64>() / v.len().max(1) as f64;
    let base_mean = (!baseline.is_empty()).then(|| mean(&baseline));
    series
        .into_iter()
        .map(|name| {
            let mine: Vec<&Row> = rows.iter().filter(|r| r.series() == name).collect();
            let m = mean(&mine);
            let mut per_size = Vec::new();
            for r in &mine {
                if let Some(b) = baseline.iter().find(|b| b.cache_bytes == r.cache_bytes) {
                    if b.hit_rate > 0.0 {
                        per_size.push(r.hit_rate / b.hit_rate - 1.0);
                    }
                }
            }
            SeriesSummary {
                series: name,
                mean_hit_rate: m,
                improvement_of_mean: base_mean.filter(|b| *b > 0.0).map(|b| m / b - 1.0),
                mean_improvement: (!per_size.is_empty())
                    .then(|| per_size.iter().sum::<f64>() / per_size.len() as f64),
                sizes_compared: per_size.len(),
            }
        })
        .collect()
}

fn percent(v: Option<f64>) -> String {
    v.map_or("-".into(), |x| format!("{:+.1}%", x * 100.0))
}

fn mib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / (1u64 << 20) as f64)
}

/// The results as a table, then the summary.
pub fn render(report: &Report) -> String {
    let mut out = format!(
        "{}: {} processes, {} original and {} sent requests; blocks of {} B, {} MiB touched, {} manager(s), {} mapping, {}\n",
        report.traces,
        report.processes,
        report.original_requests,
        report.sent_requests,
        report.block_size_bytes,
        mib(report.touched_bytes),
        report.managers,
        report.mapping,
        report.ops
    );
    for n in &report.notes {
        out += &format!("note: {n}\n");
    }
    let mut t = Table::new(&[
        "policy",
        "stream",
        "cache MiB",
        "x touched",
        "hit rate",
        "byte hit rate",
        "references",
        "hits",
        "unasked fetched",
    ]);
    for r in &report.results {
        t.row(vec![
            r.policy.clone(),
            match &r.unrequested {
                Some(u) => format!("{} ({u})", r.stream),
                None => r.stream.clone(),
            },
            mib(r.cache_bytes),
            format!("{:.3}", r.cache_fraction),
            format!("{:.4}", r.hit_rate),
            format!("{:.4}", r.byte_hit_rate),
            r.references.to_string(),
            r.hits.to_string(),
            r.unasked_blocks_fetched.to_string(),
        ]);
    }
    out += &t.render();
    let mut s = Table::new(&[
        "series",
        "mean hit rate",
        "vs aggregated LRU (of means)",
        "vs aggregated LRU (mean per size)",
        "sizes",
    ]);
    for x in &report.summary {
        s.row(vec![
            x.series.clone(),
            format!("{:.4}", x.mean_hit_rate),
            percent(x.improvement_of_mean),
            percent(x.mean_improvement),
            x.sizes_compared.to_string(),
        ]);
    }
    out += "\n";
    out += &s.render();
    out
}

/// Hit rate against cache size (MiB, logarithmic), one line per series (policy,
/// stream and admission of unasked blocks); aggregated LRU is the seed's baseline.
pub fn figure(title: &str, rows: &[Row]) -> Figure {
    let mut panel = Panel::lines(
        "hit rate vs cache size",
        "cache size (MiB)",
        "hit rate",
        XAxis::Log2,
    );
    for r in rows {
        panel.point(
            &r.series(),
            r.cache_bytes as f64 / (1u64 << 20) as f64,
            r.hit_rate,
        );
    }
    Figure {
        title: title.to_owned(),
        panels: vec![panel],
    }
}

/// Draws [`figure`] into `path`.
pub fn write_svg(path: &Path, title: &str, rows: &[Row]) -> Result<()> {
    crate::plot::draw(path, &figure(title, rows))
}

/// `weft sim`.
pub fn run(args: &SimArgs) -> Result<()> {
    let traces = read_traces(&args.trace_dir)?;
    let mut report = simulate(&traces, args)?;
    report.traces = args.trace_dir.display().to_string();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", render(&report));
    }
    if !args.no_svg {
        let title = format!("hit rate vs cache size: {}", args.trace_dir.display());
        write_svg(&args.svg, &title, &report.results)?;
        if !args.json {
            println!("plot: {}", args.svg.display());
        }
    }
    Ok(())
}

#[cfg(test)]
mod figure_tests {
    use super::*;

    fn row(policy: &str, stream: &str, unrequested: Option<&str>, mib: u64, hit_rate: f64) -> Row {
        Row {
            policy: policy.into(),
            stream: stream.into(),
            unrequested: unrequested.map(String::from),
            cache_bytes: mib << 20,
            cache_fraction: 0.5,
            capacity_blocks_per_manager: 1,
            hit_rate,
            byte_hit_rate: hit_rate,
            references: 10,
            hits: 5,
            misses: 5,
            unasked_blocks_fetched: 0,
        }
    }

    #[test]
    fn the_figure_plots_hit_rate_against_cache_size_per_series() {
        let rows = vec![
            row("lru", "aggregated", None, 1, 0.1),
            row("lru", "aggregated", None, 4, 0.3),
            row("arc", "original", Some("cold"), 1, 0.2),
            row("arc", "original", Some("cold"), 4, 0.6),
        ];
        let f = figure("t", &rows);
        let names: Vec<&str> = f.panels[0].series.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["lru aggregated", "arc original (cold)"]);
        assert_eq!(f.panels[0].series[1].points, [(1.0, 0.2), (4.0, 0.6)]);
        crate::plot::assert_draws(&f);
    }
}
