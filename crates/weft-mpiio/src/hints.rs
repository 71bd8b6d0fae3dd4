//! Hints: ROMIO's keys plus Weft's, from defaults, then the file named by $WEFT_HINTS
//! (ROMIO_HINTS format, "key value" per line), then the info objects of open,
//! set_view and set_info. Rank 0's result is broadcast so that every rank of a file
//! runs the same collective method with the same parameters.

use weft_client::{CacheMode, LayoutRequest, Redundancy};

use crate::error::{ErrorClass, MpiioError, Result};

/// Largest collective buffer per aggregator (and per pipeline slot). One round moves
/// at most this much per aggregator; MPI counts are ints, so keep it well below 2 GiB.
pub const CB_BUFFER_SIZE_MAX: u64 = 256 << 20;
/// Deepest I/O queue of the pipelined methods.
pub const PIPELINE_DEPTH_MAX: usize = 64;

/// The collective method (`weft_cb_method`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Auto,
    TwoPhase,
    Interleaved,
    Pipelined,
    InterleavedPipelined,
    StripeAligned,
    Independent,
    ServerDirected,
}

impl Method {
    pub const ALL: [Method; 8] = [
        Method::Auto,
        Method::TwoPhase,
        Method::Interleaved,
        Method::Pipelined,
        Method::InterleavedPipelined,
        Method::StripeAligned,
        Method::Independent,
        Method::ServerDirected,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Method::Auto => "auto",
            Method::TwoPhase => "two_phase",
            Method::Interleaved => "interleaved",
            Method::Pipelined => "pipelined",
            Method::InterleavedPipelined => "interleaved_pipelined",
            Method::StripeAligned => "stripe_aligned",
            Method::Independent => "independent",
            Method::ServerDirected => "server_directed",
        }
    }

    pub fn parse(s: &str) -> Option<Method> {
        Method::ALL.into_iter().find(|m| m.name() == s)
    }
}

/// The order in which `server_directed` visits the cache managers
/// (`weft_cm_schedule`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmSchedule {
    /// Clusterfile's: at step j, process i sends to manager (i + j) mod n.
    Decentralised,
    /// Every manager at once, one thread each.
    AllAtOnce,
    /// Every process visits manager 0, then 1, then 2, ...
    InOrder,
}

impl CmSchedule {
    pub const ALL: [CmSchedule; 3] = [
        CmSchedule::Decentralised,
        CmSchedule::AllAtOnce,
        CmSchedule::InOrder,
    ];

    pub fn name(self) -> &'static str {
        match self {
            CmSchedule::Decentralised => "decentralised",
            CmSchedule::AllAtOnce => "all_at_once",
            CmSchedule::InOrder => "in_order",
        }
    }

    pub fn parse(s: &str) -> Option<CmSchedule> {
        CmSchedule::ALL.into_iter().find(|m| m.name() == s)
    }
}

/// ROMIO's enable / disable / automatic switches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Switch {
    Enable,
    Disable,
    Automatic,
}

impl Switch {
    fn parse(s: &str) -> Option<Switch> {
        match s {
            "enable" => Some(Switch::Enable),
            "disable" => Some(Switch::Disable),
            "automatic" => Some(Switch::Automatic),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Switch::Enable => "enable",
            Switch::Disable => "disable",
            Switch::Automatic => "automatic",
        }
    }
}

/// The effective hints of one open file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hints {
    pub cb_buffer_size: u64,
    /// Number of aggregators; `None`: every process (see docs/src/mpi-io.md).
    pub cb_nodes: Option<usize>,
    /// "*:N": N aggregators per host. Empty: not set.
    pub cb_config_list: String,
    pub romio_cb_read: Switch,
    pub romio_cb_write: Switch,
    pub romio_ds_read: Switch,
    pub romio_ds_write: Switch,
    pub ind_rd_buffer_size: u64,
    pub ind_wr_buffer_size: u64,
    pub striping_unit: Option<u64>,
    pub striping_factor: Option<u32>,
    pub method: Method,
    pub pipeline_depth: usize,
    /// `weft_trace`: the directory each process records its requests into (default
    /// `$WEFT_TRACE`); `None`: not traced.
    pub trace: Option<String>,
    /// `weft_cio_aware`: collective reads carry the processes' original pattern to the
    /// cache tier, whose replacement then uses it (see `collective::pattern`).
    pub cio_aware: bool,
    /// `weft_cb_predict`: whether a collective call under `auto` may skip gathering the
    /// ranks' extents and go independent at once when the previous collective calls of
    /// the file did not interleave (see `collective::no_exchange`): `automatic` after
    /// [`crate::collective::no_exchange::STREAK_AUTOMATIC`] such calls in a row,
    /// `enable` after one, `disable` never.
    pub cb_predict: Switch,
    /// `weft_cache`: the caching mode of a file this open creates; `None`: the
    /// directory's default, else the cluster's.
    pub cache: Option<CacheMode>,
    /// `weft_redundancy`: the redundancy of a file this open creates (`plain`,
    /// `replicas=N`); `None`: the directory's default, else the cluster's.
    pub redundancy: Option<Redundancy>,
    pub cm_schedule: CmSchedule,
    /// `weft_delegates` (or `$WEFT_DELEGATES`): job-scoped delegates started for the
    /// file at open (see `spawn`); `None` or 0: none.
    pub delegates: Option<u32>,
    /// `weft_delegate_mapping=any`: keep the asked count of job-scoped delegates even
    /// when it is neither a factor nor a multiple of the file's stripe count (to
    /// measure the unaligned case); `aligned` (default) adjusts it.
    pub delegate_mapping_any: bool,
    /// `weft_delegate_memory`: bytes of file data each job-scoped delegate holds.
    pub delegate_memory: Option<u64>,
    /// `weft_delegate_hosts`: where to start them (MPI_Comm_spawn's "host" info, comma
    /// separated); default: the MPI library's choice among the job's hosts.
    pub delegate_hosts: Option<String>,
    /// `weft_write_behind`: independent writes outside atomic mode wait in a bounded
    /// per-handle buffer, merged, until a sync, close or anything that observes them
    /// (see `behind`). Default on.
    pub write_behind: bool,
    /// `weft_write_behind_size`: bytes that buffer holds per file handle.
    pub write_behind_size: u64,
    /// `weft_read_ahead`: independent reads whose pattern repeats (sequential or a
    /// constant stride) are served from a window read ahead of them (see `behind`).
    pub read_ahead: bool,
    /// `weft_read_ahead_size`: the largest window per file handle (a stream's windows
    /// start at 1 MiB and double up to it). Default 4 MiB.
    pub read_ahead_size: u64,
}

/// Largest `weft_write_behind_size` and `weft_read_ahead_size`.
pub const BEHIND_SIZE_MAX: u64 = 1 << 30;

impl Default for Hints {
    fn default() -> Self {
        Hints {
            cb_buffer_size: 16 << 20,
            cb_nodes: None,
            cb_config_list: String::new(),
            romio_cb_read: Switch::Automatic,
            romio_cb_write: Switch::Automatic,
            romio_ds_read: Switch::Automatic,
            romio_ds_write: Switch::Automatic,
            ind_rd_buffer_size: 4 << 20,
            ind_wr_buffer_size: 512 << 10,
            striping_unit: None,
            striping_factor: None,
            method: Method::Auto,
            pipeline_depth: 4,
            trace: None,
            cio_aware: false,
            cb_predict: Switch::Automatic,
            cache: None,
            redundancy: None,
            cm_schedule: CmSchedule::Decentralised,
            delegates: None,
            delegate_mapping_any: false,
            delegate_memory: None,
            delegate_hosts: None,
            write_behind: true,
            write_behind_size: 4 << 20,
            read_ahead: true,
            read_ahead_size: 4 << 20,
        }
    }
}

/// Most job-scoped delegates one open may start.
pub const DELEGATES_MAX: u64 = 1024;
/// Bounds of `weft_delegate_memory` (bytes): weftd's own bounds of a cache manager.
const DELEGATE_MEMORY_MIN: u64 = 1 << 20;
const DELEGATE_MEMORY_MAX: u64 = 1 << 40;

fn bad(key: &str, value: &str, why: &str) -> MpiioError {
    MpiioError::new(ErrorClass::InfoValue, format!("hint {key}={value}: {why}"))
}

fn number(key: &str, value: &str, min: u64, max: u64) -> Result<u64> {
    let range = || format!("must be a whole number in [{min}, {max}]");
    let n: u64 = value.trim().parse().map_err(|_| bad(key, value, &range()))?;
    if n < min || n > max {
        return Err(bad(key, value, &range()));
    }
    Ok(n)
}

/// An `enable` / `disable` hint.
fn on_off(key: &str, value: &str) -> Result<bool> {
    match value.trim() {
        "enable" | "true" => Ok(true),
        "disable" | "false" => Ok(false),
        _ => Err(bad(key, value, "expected enable or disable")),
    }
}

impl Hints {
    /// Defaults, then $WEFT_TRACE, then $WEFT_HINTS.
    pub fn from_env() -> Result<Hints> {
        let mut hints = Hints::default();
        if let Ok(dir) = std::env::var("WEFT_TRACE") {
            if !dir.is_empty() {
                hints.set("weft_trace", &dir)?;
            }
        }
        if let Ok(n) = std::env::var("WEFT_DELEGATES") {
            if !n.is_empty() {
                hints.set("weft_delegates", &n)?;
            }
        }
        if let Ok(path) = std::env::var("WEFT_HINTS") {
            let text = std::fs::read_to_string(&path)
                .map_err(|e| MpiioError::new(ErrorClass::InfoValue, format!("WEFT_HINTS={path}: {e}")))?;
            for warning in hints.apply_hints_file(&text) {
                eprintln!("weft-mpiio: WEFT_HINTS={path}: {warning}");
            }
        }
        Ok(hints)
    }

    /// A hints file (`WEFT_HINTS`) by ROMIO's rules: lines of "key value", blank lines
    /// and '#' comments skipped, the first line of a key wins over later ones, and a
    /// value that cannot be used is ignored (its warning returned), never an error.
    pub fn apply_hints_file(&mut self, text: &str) -> Vec<String> {
        let mut seen = std::collections::HashSet::new();
        let mut warnings = Vec::new();
        for (number, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (key, value) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
            if !seen.insert(key.to_owned()) {
                warnings.push(format!(
                    "line {}: {key} given again; the first one holds",
                    number + 1
                ));
                continue;
            }
            if let Err(e) = self.set(key, value.trim()) {
                warnings.push(format!("line {}: {e}; hint ignored", number + 1));
            }
        }
        warnings
    }

    /// The layout the striping hints ask for, cut to what the cluster can give (MPI: a
    /// hint that cannot be honoured is ignored): a factor beyond its `io_servers` is cut
    /// to their number, a unit outside Weft's stripe sizes is left to the default.
    pub fn layout_request(&self, io_servers: usize) -> LayoutRequest {
        use weft_layout::stripe::{STRIPE_SIZE_BYTES_MAX, STRIPE_SIZE_BYTES_MIN};
        LayoutRequest {
            cache: self.cache,
            stripe_size_bytes: self
                .striping_unit
                .filter(|u| (STRIPE_SIZE_BYTES_MIN..=STRIPE_SIZE_BYTES_MAX).contains(u)),
            // A replicated file needs a distinct server for every copy of every slot.
            stripe_count: self.striping_factor.map(|f| {
                let copies = self.redundancy.map_or(1, |r| r.copies());
                f.min((io_servers / copies).max(1) as u32)
            }),
            first_server: None,
            redundancy: self.redundancy,
        }
    }

    /// Lines of "key value"; blank lines and lines starting with '#' are skipped.
    pub fn apply_text(&mut self, text: &str) -> Result<()> {
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (key, value) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
            self.set(key, value.trim())?;
        }
        Ok(())
    }

    /// Applies one key. Keys this layer does not know are ignored, as MPI asks.
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        let switch =
            |v: &str| Switch::parse(v).ok_or_else(|| bad(key, v, "expected enable, disable or automatic"));
        match key {
            "cb_buffer_size" => self.cb_buffer_size = number(key, value, 1, CB_BUFFER_SIZE_MAX)?,
            "cb_nodes" => self.cb_nodes = Some(number(key, value, 1, 1 << 20)? as usize),
            "cb_config_list" => self.cb_config_list = value.to_owned(),
            "romio_cb_read" => self.romio_cb_read = switch(value)?,
            "romio_cb_write" => self.romio_cb_write = switch(value)?,
            "romio_ds_read" => self.romio_ds_read = switch(value)?,
            "romio_ds_write" => self.romio_ds_write = switch(value)?,
            "weft_cb_predict" => self.cb_predict = switch(value)?,
            "ind_rd_buffer_size" => {
                self.ind_rd_buffer_size = number(key, value, 1, CB_BUFFER_SIZE_MAX)?
            }
            "ind_wr_buffer_size" => {
                self.ind_wr_buffer_size = number(key, value, 1, CB_BUFFER_SIZE_MAX)?
            }
            "striping_unit" => self.striping_unit = Some(number(key, value, 1, 1 << 30)?),
            "striping_factor" => self.striping_factor = Some(number(key, value, 1, 1024)? as u32),
            "weft_cb_method" => {
                self.method = Method::parse(value).ok_or_else(|| {
                    bad(key, value, "expected auto, two_phase, interleaved, pipelined, interleaved_pipelined, stripe_aligned, independent or server_directed")
                })?
            }
            "weft_cache" => {
                self.cache = Some(
                    value
                        .parse::<CacheMode>()
                        .map_err(|_| bad(key, value, "expected none, cached or delegated"))?,
                )
            }
            "weft_redundancy" => {
                self.redundancy = Some(value.parse::<Redundancy>().map_err(|e| bad(key, value, &e))?)
            }
            "weft_cm_schedule" => {
                self.cm_schedule = CmSchedule::parse(value)
                    .ok_or_else(|| bad(key, value, "expected decentralised, all_at_once or in_order"))?
            }
            "weft_pipeline_depth" => {
                self.pipeline_depth = number(key, value, 1, PIPELINE_DEPTH_MAX as u64)? as usize
            }
            "weft_trace" => {
                self.trace = match value.trim() {
                    "" | "disable" | "false" => None,
                    dir if dir.contains('\n') => return Err(bad(key, value, "a directory name on one line")),
                    dir => Some(dir.to_owned()),
                }
            }
            "weft_delegates" => self.delegates = Some(number(key, value, 0, DELEGATES_MAX)? as u32),
            "weft_delegate_mapping" => {
                self.delegate_mapping_any = match value.trim() {
                    "aligned" => false,
                    "any" => true,
                    _ => return Err(bad(key, value, "expected aligned or any")),
                }
            }
            "weft_delegate_memory" => {
                self.delegate_memory = Some(number(key, value, DELEGATE_MEMORY_MIN, DELEGATE_MEMORY_MAX)?)
            }
            "weft_delegate_hosts" => {
                self.delegate_hosts = match value.trim() {
                    "" => None,
                    hosts if hosts.contains(char::is_whitespace) => {
                        return Err(bad(key, value, "host names separated by commas, no spaces"))
                    }
                    hosts => Some(hosts.to_owned()),
                }
            }
            "weft_write_behind" => self.write_behind = on_off(key, value)?,
            "weft_write_behind_size" => self.write_behind_size = number(key, value, 1, BEHIND_SIZE_MAX)?,
            "weft_read_ahead" => self.read_ahead = on_off(key, value)?,
            "weft_read_ahead_size" => self.read_ahead_size = number(key, value, 1, BEHIND_SIZE_MAX)?,
            "weft_cio_aware" => {
                self.cio_aware = match value.trim() {
                    "true" | "enable" => true,
                    "false" | "disable" => false,
                    _ => return Err(bad(key, value, "expected true or false")),
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// The effective values, as MPI_File_get_info returns them.
    pub fn entries(&self, aggregators: usize) -> Vec<(String, String)> {
        let mut out = vec![
            ("cb_buffer_size".to_owned(), self.cb_buffer_size.to_string()),
            ("cb_nodes".to_owned(), aggregators.to_string()),
        ];
        if !self.cb_config_list.is_empty() {
            out.push(("cb_config_list".into(), self.cb_config_list.clone()));
        }
        out.extend([
            ("romio_cb_read".into(), self.romio_cb_read.name().into()),
            ("romio_cb_write".into(), self.romio_cb_write.name().into()),
            ("romio_ds_read".into(), self.romio_ds_read.name().into()),
            ("romio_ds_write".into(), self.romio_ds_write.name().into()),
            ("ind_rd_buffer_size".into(), self.ind_rd_buffer_size.to_string()),
            ("ind_wr_buffer_size".into(), self.ind_wr_buffer_size.to_string()),
        ]);
        if let Some(u) = self.striping_unit {
            out.push(("striping_unit".into(), u.to_string()));
        }
        if let Some(f) = self.striping_factor {
            out.push(("striping_factor".into(), f.to_string()));
        }
        out.push(("weft_cb_method".into(), self.method.name().into()));
        out.push(("weft_pipeline_depth".into(), self.pipeline_depth.to_string()));
        if let Some(dir) = &self.trace {
            out.push(("weft_trace".into(), dir.clone()));
        }
        out.push(("weft_cio_aware".into(), self.cio_aware.to_string()));
        out.push(("weft_cb_predict".into(), self.cb_predict.name().into()));
        if let Some(mode) = self.cache {
            out.push(("weft_cache".into(), mode.name().into()));
        }
        if let Some(r) = self.redundancy {
            out.push(("weft_redundancy".into(), r.to_string()));
        }
        out.push(("weft_cm_schedule".into(), self.cm_schedule.name().into()));
        let switch = |on: bool| if on { "enable" } else { "disable" }.to_owned();
        out.push(("weft_write_behind".into(), switch(self.write_behind)));
        out.push((
            "weft_write_behind_size".into(),
            self.write_behind_size.to_string(),
        ));
        out.push(("weft_read_ahead".into(), switch(self.read_ahead)));
        out.push(("weft_read_ahead_size".into(), self.read_ahead_size.to_string()));
        if let Some(n) = self.delegates {
            out.push(("weft_delegates".into(), n.to_string()));
            let mapping = if self.delegate_mapping_any {
                "any"
            } else {
                "aligned"
            };
            out.push(("weft_delegate_mapping".into(), mapping.into()));
            if let Some(bytes) = self.delegate_memory {
                out.push(("weft_delegate_memory".into(), bytes.to_string()));
            }
            if let Some(hosts) = &self.delegate_hosts {
                out.push(("weft_delegate_hosts".into(), hosts.clone()));
            }
        }
        out
    }

    /// Text form for the broadcast from rank 0 (parsed back by `apply_text`).
    pub fn to_text(&self) -> String {
        let mut text = String::new();
        for (k, v) in self.entries(self.cb_nodes.unwrap_or(0)) {
            if k == "cb_nodes" && self.cb_nodes.is_none() {
                continue;
            }
            text.push_str(&format!("{k} {v}\n"));
        }
        text
    }

    pub fn from_text(text: &str) -> Result<Hints> {
        let mut hints = Hints::default();
        hints.apply_text(text)?;
        Ok(hints)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Regression: a key given twice in a WEFT_HINTS file took its last value (ROMIO keeps
    // the first), and one bad value made the whole file ignored.
    #[test]
    fn a_hints_file_keeps_the_first_of_a_key_and_skips_bad_values() {
        let mut h = Hints::default();
        let warnings = h.apply_hints_file(
            "cb_nodes 2\nromio_cb_write banana\ncb_nodes 5\n# cb_buffer_size 1\nind_rd_buffer_size 4096\n",
        );
        assert_eq!(h.cb_nodes, Some(2));
        assert_eq!(h.romio_cb_write, Hints::default().romio_cb_write);
        assert_eq!(h.ind_rd_buffer_size, 4096);
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].contains("line 2"), "{warnings:?}");
        assert!(
            warnings[1].contains("line 3") && warnings[1].contains("first"),
            "{warnings:?}"
        );
    }

    // Regression: striping_factor larger than the number of io servers made
    // MPI_File_open fail with MPI_ERR_ARG; MPI says such a hint is ignored.
    #[test]
    fn striping_hints_are_cut_to_what_the_cluster_has() {
        let mut h = Hints::default();
        h.apply_text("striping_factor 64\nstriping_unit 16\n").unwrap();
        let r = h.layout_request(4);
        assert_eq!(r.stripe_count, Some(4));
        assert_eq!(r.stripe_size_bytes, None);
        h.apply_text("striping_factor 3\nstriping_unit 1048576\n")
            .unwrap();
        let r = h.layout_request(4);
        assert_eq!((r.stripe_count, r.stripe_size_bytes), (Some(3), Some(1 << 20)));
    }

    #[test]
    fn text_round_trip_keeps_every_value() {
        let mut h = Hints::default();
        h.apply_text("# comment\ncb_buffer_size 1048576\ncb_nodes 3\nromio_cb_write disable\nweft_cb_method interleaved_pipelined\nweft_pipeline_depth 8\nweft_cache cached\nweft_cm_schedule in_order\nstriping_unit 65536\nstriping_factor 2\ncb_config_list *:2\nweft_trace /tmp/my traces\nweft_cio_aware true\nweft_cb_predict disable\nweft_delegates 3\nweft_delegate_mapping any\nweft_delegate_memory 2097152\nweft_delegate_hosts a,b\nweft_write_behind disable\nweft_write_behind_size 65536\nweft_read_ahead disable\nweft_read_ahead_size 4096\n")
            .unwrap();
        assert_eq!(
            (
                h.write_behind,
                h.write_behind_size,
                h.read_ahead,
                h.read_ahead_size
            ),
            (false, 65536, false, 4096)
        );
        assert_eq!(h.trace.as_deref(), Some("/tmp/my traces"));
        assert!(h.cio_aware);
        assert_eq!(h.cb_predict, Switch::Disable);
        assert_eq!(h.cb_buffer_size, 1 << 20);
        assert_eq!(h.cb_nodes, Some(3));
        assert_eq!(h.method, Method::InterleavedPipelined);
        assert_eq!(h.romio_cb_write, Switch::Disable);
        assert_eq!(h.cache, Some(CacheMode::Cached));
        assert_eq!(h.cm_schedule, CmSchedule::InOrder);
        assert_eq!(
            (
                h.delegates,
                h.delegate_mapping_any,
                h.delegate_memory,
                h.delegate_hosts.as_deref()
            ),
            (Some(3), true, Some(2 << 20), Some("a,b"))
        );
        assert_eq!(Hints::from_text(&h.to_text()).unwrap(), h);
    }

    #[test]
    fn bad_values_are_info_value_errors() {
        let mut h = Hints::default();
        assert_eq!(
            h.set("weft_cb_method", "fastest").unwrap_err().class,
            ErrorClass::InfoValue
        );
        assert_eq!(
            h.set("cb_buffer_size", "0").unwrap_err().class,
            ErrorClass::InfoValue
        );
        assert_eq!(
            h.set("romio_cb_read", "yes").unwrap_err().class,
            ErrorClass::InfoValue
        );
        assert_eq!(
            h.set("weft_cb_predict", "always").unwrap_err().class,
            ErrorClass::InfoValue
        );
        assert_eq!(
            h.set("weft_cio_aware", "maybe").unwrap_err().class,
            ErrorClass::InfoValue
        );
        h.set("weft_trace", "disable").unwrap();
        assert_eq!(
            h.set("weft_cache", "hot").unwrap_err().class,
            ErrorClass::InfoValue
        );
        assert_eq!(
            h.set("weft_cm_schedule", "random").unwrap_err().class,
            ErrorClass::InfoValue
        );
        for (key, value) in [
            ("weft_delegates", "1025"),
            ("weft_delegate_mapping", "round_robin"),
            ("weft_delegate_memory", "1000"),
            ("weft_delegate_hosts", "a, b"),
        ] {
            assert_eq!(
                h.set(key, value).unwrap_err().class,
                ErrorClass::InfoValue,
                "{key}={value}"
            );
        }
        // A number out of range, negative or too large for 64 bits says the range.
        for value in ["0", "-1", "99999999999999999999"] {
            let message = h.set("cb_nodes", value).unwrap_err().to_string();
            assert!(message.contains("whole number in [1, 1048576]"), "{message}");
        }
        // Unknown keys are ignored.
        h.set("some_other_key", "1").unwrap();
        assert_eq!(h, Hints::default());
    }
}
