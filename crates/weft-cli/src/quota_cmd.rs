//! `weft quota`: show and set user, group and project quotas (as Lustre's `lfs quota`,
//! `lfs setquota` and `lfs project`), and recount usage.

use crate::admin::{group_id, user_id};
use crate::cluster::human_bytes;
use anyhow::{bail, Result};
use weft_client::Client;
use weft_proto::quota::{QuotaGrace, QuotaKind, QuotaLimits, QuotaReport};

#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct QuotaArgs {
    #[command(subcommand)]
    pub command: Option<QuotaCommand>,
    #[command(flatten)]
    pub who: Who,
    /// One JSON object per id instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// Whose quota: one of -u, -g, -p.
#[derive(clap::Args, Debug, Default)]
pub struct Who {
    /// A user (name or number).
    #[arg(short = 'u', long = "user", value_name = "USER", group = "who")]
    pub user: Option<String>,
    /// A group (name or number).
    #[arg(short = 'g', long = "group", value_name = "GROUP", group = "who")]
    pub group: Option<String>,
    /// A project (number).
    #[arg(short = 'p', long = "project", value_name = "PROJECT", group = "who")]
    pub project: Option<u32>,
}

#[derive(clap::Subcommand, Debug)]
pub enum QuotaCommand {
    /// Set an id's limits (root or the file system's owner): `weft quota set -u alice -B 10G -I 100000`.
    /// A limit of 0 removes it; limits not given stay as they are.
    Set {
        #[command(flatten)]
        who: Who,
        /// Soft limit of bytes (K, M, G, T suffixes): refused after the grace period.
        #[arg(short = 'b', long = "bytes-soft", value_name = "BYTES", value_parser = crate::parse_size_arg)]
        bytes_soft: Option<u64>,
        /// Hard limit of bytes: refused at once.
        #[arg(short = 'B', long = "bytes-hard", value_name = "BYTES", value_parser = crate::parse_size_arg)]
        bytes_hard: Option<u64>,
        /// Soft limit of files (inodes: files, directories, symlinks).
        #[arg(short = 'i', long = "files-soft", value_name = "N")]
        files_soft: Option<u64>,
        /// Hard limit of files.
        #[arg(short = 'I', long = "files-hard", value_name = "N")]
        files_hard: Option<u64>,
    },
    /// Set how long a user, group or project may stay over a soft limit (seconds) for
    /// every id of that kind: `weft quota grace -u -b 86400 -i 86400`.
    Grace {
        /// Users' grace periods.
        #[arg(short = 'u', long = "user", group = "kind")]
        user: bool,
        /// Groups' grace periods.
        #[arg(short = 'g', long = "group", group = "kind")]
        group: bool,
        /// Projects' grace periods.
        #[arg(short = 'p', long = "project", group = "kind")]
        project: bool,
        /// Grace of the soft limit of bytes, in seconds.
        #[arg(short = 'b', long = "bytes", value_name = "SECONDS")]
        bytes: Option<u64>,
        /// Grace of the soft limit of files, in seconds.
        #[arg(short = 'i', long = "files", value_name = "SECONDS")]
        files: Option<u64>,
    },
    /// Show a file's or directory's project, or give it one with -p (with -r,
    /// everything below a directory too); what is made in a directory takes its
    /// project (as `lfs project -p ID -r -s DIR`).
    Project {
        /// The project to give (0: none; root or the file system's owner).
        #[arg(short = 'p', long = "project", value_name = "PROJECT")]
        project: Option<u32>,
        /// Also everything below the directory.
        #[arg(short = 'r', requires = "project")]
        recursive: bool,
        /// Files and directories.
        #[arg(required = true)]
        paths: Vec<String>,
    },
    /// Settle every file's bytes from the io servers and count every id's usage again
    /// from the namespace (root or the file system's owner).
    Recount,
}

impl Who {
    fn ids(&self, client: &Client) -> Result<Vec<(QuotaKind, u32)>> {
        Ok(match (&self.user, &self.group, self.project) {
            (Some(user), _, _) => vec![(QuotaKind::User, user_id(user)?)],
            (_, Some(group), _) => vec![(QuotaKind::Group, group_id(group)?)],
            (_, _, Some(project)) => vec![(QuotaKind::Project, project)],
            (None, None, None) => {
                // The caller's own: its user and groups, as `lfs quota` without -u/-g.
                let cred = client.cred();
                let mut ids = vec![(QuotaKind::User, cred.uid), (QuotaKind::Group, cred.gid)];
                for &g in &cred.groups {
                    if !ids.contains(&(QuotaKind::Group, g)) {
                        ids.push((QuotaKind::Group, g));
                    }
                }
                ids
            }
        })
    }
}

pub fn run(client: &Client, args: QuotaArgs) -> Result<()> {
    match args.command {
        None => {
            for (kind, id) in args.who.ids(client)? {
                show(&client.quota(kind, id)?, args.json);
            }
        }
        Some(QuotaCommand::Set {
            who,
            bytes_soft,
            bytes_hard,
            files_soft,
            files_hard,
        }) => {
            let ids = who.ids(client)?;
            let [(kind, id)] = ids.as_slice() else {
                bail!("weft quota set needs one of -u USER, -g GROUP, -p PROJECT");
            };
            if who.user.is_none() && who.group.is_none() && who.project.is_none() {
                bail!("weft quota set needs one of -u USER, -g GROUP, -p PROJECT");
            }
            if [bytes_soft, bytes_hard, files_soft, files_hard]
                .iter()
                .all(Option::is_none)
            {
                bail!("weft quota set needs at least one of -b, -B, -i, -I");
            }
            let old = client.quota(*kind, *id)?.limits;
            let limits = QuotaLimits {
                bytes_soft: bytes_soft.unwrap_or(old.bytes_soft),
                bytes_hard: bytes_hard.unwrap_or(old.bytes_hard),
                inodes_soft: files_soft.unwrap_or(old.inodes_soft),
                inodes_hard: files_hard.unwrap_or(old.inodes_hard),
            };
            show(&client.set_quota(*kind, *id, limits)?, args.json);
        }
        Some(QuotaCommand::Grace {
            user,
            group,
            project,
            bytes,
            files,
        }) => {
            let kind = match (user, group, project) {
                (true, _, _) => QuotaKind::User,
                (_, true, _) => QuotaKind::Group,
                (_, _, true) => QuotaKind::Project,
                _ => bail!("weft quota grace needs one of -u, -g, -p"),
            };
            if bytes.is_none() && files.is_none() {
                bail!("weft quota grace needs -b SECONDS, -i SECONDS or both");
            }
            let old = client.quota(kind, 0)?.grace;
            let grace = QuotaGrace {
                bytes_s: bytes.unwrap_or(old.bytes_s),
                inodes_s: files.unwrap_or(old.inodes_s),
            };
            let report = client.set_quota_grace(kind, grace)?;
            println!(
                "{} grace periods: bytes {} s, files {} s",
                kind.name(),
                report.grace.bytes_s,
                report.grace.inodes_s
            );
        }
        Some(QuotaCommand::Project {
            project,
            recursive,
            paths,
        }) => {
            for path in &paths {
                let id = client.project(path, project, recursive)?;
                println!("{id}\t{path}");
            }
        }
        Some(QuotaCommand::Recount) => {
            client.quota_recount()?;
            println!("quota usage recounted");
        }
    }
    Ok(())
}

/// "3.0 MiB" for a limit, "-" for none.
fn limit(value: u64, bytes: bool) -> String {
    match (value, bytes) {
        (0, _) => "-".into(),
        (v, true) => human_bytes(v),
        (v, false) => v.to_string(),
    }
}

/// What is left of the grace since `since_ms` ("6d23h", "none" once over), or "-".
fn grace_left(since_ms: u64, grace_s: u64, now_ms: u64) -> String {
    if since_ms == 0 {
        return "-".into();
    }
    let end = since_ms.saturating_add(grace_s.saturating_mul(1000));
    if now_ms >= end {
        return "none".into();
    }
    let left = (end - now_ms) / 1000;
    match left {
        s if s >= 86_400 => format!("{}d{}h", s / 86_400, s % 86_400 / 3600),
        s if s >= 3600 => format!("{}h{}m", s / 3600, s % 3600 / 60),
        s => format!("{}m{}s", s / 60, s % 60),
    }
}

fn show(r: &QuotaReport, json: bool) {
    let (l, u) = (&r.limits, &r.usage);
    if json {
        println!(
            "{{\"kind\":\"{}\",\"id\":{},\"bytes\":{},\"bytes_soft\":{},\"bytes_hard\":{},\"bytes_over_since_ms\":{},\
             \"files\":{},\"files_soft\":{},\"files_hard\":{},\"files_over_since_ms\":{},\"grace_bytes_s\":{},\"grace_files_s\":{}}}",
            r.kind.name(),
            r.id,
            u.bytes,
            l.bytes_soft,
            l.bytes_hard,
            u.bytes_over_since_ms,
            u.inodes,
            l.inodes_soft,
            l.inodes_hard,
            u.inodes_over_since_ms,
            r.grace.bytes_s,
            r.grace.inodes_s
        );
        return;
    }
    println!(
        "{} {}: bytes {}{} (soft {}, hard {}, grace left {}); files {}{} (soft {}, hard {}, grace left {})",
        r.kind.name(),
        r.id,
        human_bytes(u.bytes),
        if u.bytes_over_since_ms != 0 { "*" } else { "" },
        limit(l.bytes_soft, true),
        limit(l.bytes_hard, true),
        grace_left(u.bytes_over_since_ms, r.grace.bytes_s, r.now_ms),
        u.inodes,
        if u.inodes_over_since_ms != 0 { "*" } else { "" },
        limit(l.inodes_soft, false),
        limit(l.inodes_hard, false),
        grace_left(u.inodes_over_since_ms, r.grace.inodes_s, r.now_ms),
    );
}
