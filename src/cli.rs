//! The command-line definition, and nothing else.
//!
//! This file depends only on clap, humantime, `crate::env`, `crate::exit` and `crate::printable`
//! (all std-only), so that the completion and man-page generators in `tests/generated.rs` can include
//! them with `#[path]` and render exactly what users see. Parsing helpers that clap calls (`parse_duration`) live here for
//! that reason.
//!
//! Layer 2 of the list in `lib.rs`.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum, ValueHint};

const ABOUT: &str = "A distributed lock for shell scripts, cron jobs and CI, backed by Redis";

const LONG_ABOUT: &str = "\
A distributed lock for shell scripts, cron jobs and CI, backed by Redis.

Every machine that reaches the same Redis sees the same locks. 'redlock exec' runs a command while \
it holds a lock and releases it when the command ends; the command is stopped if the lock is lost, \
and dies with redlock. Waiters queue in arrival order, and 'redlock status' shows who holds what, \
since when, and who waits.";

/// The examples a newcomer needs first, between the usage and the commands of `-h` and `--help`
/// (see `HELP_TEMPLATE`): `exec` from cron and from CI, and a lock held as long as a script
/// runs. Each line fits 80 columns (clap would wrap it).
const EXAMPLES: &str = "\
Examples:
  redlock exec nightly-backup -n -- /usr/local/sbin/backup.sh
      cron: one host at a time; while another host's run holds the lock, skip
      this one (exit 1; with -E 0 -q, quietly and as a success)
  redlock exec deploy-prod --wait 30m -- ./deploy.sh
      CI: wait up to 30 minutes for the running deploy to finish, then deploy
  T=$(redlock acquire migrate --while-pid $$) || exit
      a script: hold the lock until the script and what it started have ended";

/// clap's default layout with the examples (`before_help`) moved below the usage, so that they
/// come before the reference: the commands and the options.
const HELP_TEMPLATE: &str =
    "{about-with-newline}\n{usage-heading} {usage}\n\n{before-help}{all-args}{after-help}";

/// The text after `--help`: the duration syntax and the exit table from `exit::TABLE`.
///
/// Each entry is wrapped here, under its meaning, to fit 80 columns: clap would wrap a longer
/// line back to the margin, where its rest reads like another entry.
fn after_help() -> String {
    let mut s = String::from(
        "Durations are humantime values (500ms, 30s, 1m30s); a bare number means seconds;\n\
         at most 100 years.\n\n\
         Exit status:\n",
    );
    const INDENT: usize = 12;
    for (code, meaning) in crate::exit::TABLE {
        let mut line = format!("  {code:<9} ");
        for word in meaning.split(' ') {
            if line.len() > INDENT && line.chars().count() + 1 + word.chars().count() > 78 {
                s.push_str(line.trim_end());
                s.push('\n');
                line = " ".repeat(INDENT);
            } else if line.len() > INDENT {
                line.push(' ');
            }
            line.push_str(word);
        }
        s.push_str(&line);
        s.push('\n');
    }
    s
}

/// The text after `--help` (not `-h`): [`after_help`], then the environment variables from
/// `env::TABLE`, each name on a line of its own and its meaning indented below it.
fn after_long_help() -> String {
    let mut s = after_help();
    s.push_str("\nEnvironment:\n");
    for var in crate::env::TABLE {
        s.push_str(&format!("  {}\n", var.names));
        push_wrapped(&mut s, &crate::env::plain(var.meaning), 6);
    }
    s
}

/// Appends `text` in lines indented by `indent` that fit 78 columns (clap would wrap a longer
/// one back to the margin).
fn push_wrapped(s: &mut String, text: &str, indent: usize) {
    let mut line = " ".repeat(indent);
    for word in text.split(' ') {
        if line.len() > indent && line.chars().count() + 1 + word.chars().count() > 78 {
            s.push_str(&line);
            s.push('\n');
            line = " ".repeat(indent);
        } else if line.len() > indent {
            line.push(' ');
        }
        line.push_str(word);
    }
    s.push_str(&line);
    s.push('\n');
}

/// What `redlock --version` says after the name: the version, then the git commit (when built
/// from a checkout) and the target, from `build.rs` (`-V` and the man pages: the version alone).
/// The first word after the name stays the version, for scripts.
const LONG_VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("REDLOCK_BUILD"), ")");

/// The command line as `redlock` parses it: [`Cli`], except that a subcommand's help leaves out
/// the global options (they are still accepted there) for one line that names them and points
/// to `redlock --help`, so that the subcommand's own options come first and stay few.
pub fn command() -> clap::Command {
    let globals = GlobalArgs::augment_args(clap::Command::new("globals"));
    let ids: Vec<clap::Id> = globals
        .get_arguments()
        .map(|a| a.get_id().clone())
        .collect();
    let names: Vec<String> = globals
        .get_arguments()
        .filter_map(|a| match (a.get_short(), a.get_long()) {
            (Some(s), Some(l)) => Some(format!("-{s}/--{l}")),
            (None, Some(l)) => Some(format!("--{l}")),
            _ => None,
        })
        .collect();
    let pointer = format!(
        "Global options ({}), before or after the subcommand: see 'redlock --help'.",
        names.join(", ")
    );
    let mut cmd = Cli::command().long_version(LONG_VERSION);
    // Building copies the global options into every subcommand; only then can they be hidden.
    cmd.build();
    cmd.mut_subcommands(|sub| {
        if sub.get_name() == "help" {
            return sub;
        }
        let after = match sub.get_after_help() {
            Some(text) => format!("{pointer}\n\n{text}"),
            None => pointer.clone(),
        };
        sub.mut_args(|a| {
            let hide = ids.contains(a.get_id()) || a.is_hide_set();
            a.hide(hide)
        })
        .after_help(after)
    })
}

/// Parses the process's command line as [`command`] would.
///
/// A command line that parses is parsed with the plain [`Cli`] definition, which clap builds
/// only as far as the subcommand used; [`command`]'s changes are to help text alone, and making
/// them builds every subcommand: that was a fifth of the instructions of `redlock exec KEY --
/// true`. Anything else (an error, `--help`, `--version`) is parsed again with [`command`], whose
/// output it is.
pub fn parse() -> Result<Cli, clap::Error> {
    parse_from(std::env::args_os())
}

/// Parses the command line `args` (the program's name first) as [`command`] would: see [`parse`].
pub fn parse_from<I, T>(args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    let mut plain = Cli::command().long_version(LONG_VERSION);
    if let Ok(matches) = plain.try_get_matches_from_mut(&args)
        && let Ok(cli) = Cli::from_arg_matches(&matches)
    {
        // Freeing the definition and the matches costs a tenth of a short `exec`'s instructions;
        // the process ends soon after, and with it their memory (a few tens of KiB, once).
        std::mem::forget(plain);
        std::mem::forget(matches);
        return Ok(cli);
    }
    let mut cmd = command();
    let matches = cmd.try_get_matches_from_mut(&args)?;
    Cli::from_arg_matches(&matches).map_err(|e| e.format(&mut cmd))
}

/// The subcommand named on the command line `args` (without the program name), found as clap
/// finds it: past the global options and their values. `None` before a subcommand is named.
pub fn subcommand_in(cmd: &clap::Command, args: &[OsString]) -> Option<String> {
    let takes_value = |a: &clap::Arg| a.get_action().takes_values();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let arg = arg.to_str()?;
        if arg == "--" {
            return None;
        }
        if let Some(long) = arg.strip_prefix("--") {
            let value_follows = !long.contains('=')
                && cmd
                    .get_arguments()
                    .any(|a| a.get_long() == Some(long) && takes_value(a));
            if value_follows {
                args.next();
            }
        } else if let Some(shorts) = arg.strip_prefix('-').filter(|s| !s.is_empty()) {
            // Bundled flags (-qv); an option that takes a value ends the bundle, and takes the
            // next argument unless its value is attached (-uURL).
            for (i, c) in shorts.char_indices() {
                if cmd
                    .get_arguments()
                    .any(|a| a.get_short() == Some(c) && takes_value(a))
                {
                    if i + c.len_utf8() == shorts.len() {
                        args.next();
                    }
                    break;
                }
            }
        } else {
            return cmd.find_subcommand(arg).map(|s| s.get_name().to_string());
        }
    }
    None
}

#[derive(Debug, Parser)]
#[command(
    name = "redlock",
    version,
    about = ABOUT,
    long_about = LONG_ABOUT,
    before_help = EXAMPLES,
    after_help = after_help(),
    after_long_help = after_long_help(),
    help_template = HELP_TEMPLATE,
    propagate_version = true,
    max_term_width = 100
)]
pub struct Cli {
    #[command(flatten, next_help_heading = "Global options")]
    pub global: GlobalArgs,

    #[command(subcommand)]
    pub command: Command,
}

/// Options that every subcommand accepts (before or after the subcommand name).
#[derive(Debug, Args)]
pub struct GlobalArgs {
    /// Redis server URL: redis://, rediss:// (TLS), redis+unix:// or unix://; repeat for a quorum
    ///
    /// Defaults to $REDLOCK_URL (comma-separated for several), then $REDIS_URL, then
    /// redis://127.0.0.1:6379. An ACL user and password may be given in the URL
    /// (redis://user:pass@host:6379/0); they are never printed. Two or more URLs (independent
    /// masters) make a Redlock quorum: a lock is held when a majority of them granted it; the first
    /// URL also keeps the queue of waiters. With --cluster they are seed nodes of a Redis Cluster;
    /// with --sentinel, Sentinels.
    #[arg(short = 'u', long = "url", value_name = "URL", global = true)]
    pub url: Vec<String>,

    /// Read the Redis password from FILE (its first line, at most 4 KiB); overrides the URL and
    /// $REDLOCK_PASSWORD
    ///
    /// A FIFO or pipe works too (--password-file <(vault read ...)); redlock warns when others may
    /// read FILE.
    #[arg(
        long,
        value_name = "FILE",
        global = true,
        env = "REDLOCK_PASSWORD_FILE"
    )]
    pub password_file: Option<PathBuf>,

    /// PEM file with the CA certificate(s) that signed the server's certificate (rediss://)
    #[arg(long, value_name = "FILE", global = true, env = "REDLOCK_TLS_CA")]
    pub tls_ca: Option<PathBuf>,

    /// PEM file with a client certificate for mutual TLS (rediss://, needs --tls-key)
    #[arg(
        long,
        value_name = "FILE",
        global = true,
        env = "REDLOCK_TLS_CERT",
        requires = "tls_key"
    )]
    pub tls_cert: Option<PathBuf>,

    /// PEM file with the private key of --tls-cert
    #[arg(
        long,
        value_name = "FILE",
        global = true,
        env = "REDLOCK_TLS_KEY",
        requires = "tls_cert"
    )]
    pub tls_key: Option<PathBuf>,

    /// The URLs are seed nodes of a Redis Cluster (the lock's keys share one hash slot)
    #[arg(
        long,
        global = true,
        env = "REDLOCK_CLUSTER",
        action = clap::ArgAction::SetTrue,
        value_parser = parse_switch
    )]
    pub cluster: bool,

    /// The URLs are Sentinels: lock on the master they know as MASTER, found anew by every command
    #[arg(long, value_name = "MASTER", global = true, env = "REDLOCK_SENTINEL")]
    pub sentinel: Option<String>,

    /// Namespace for every Redis key redlock uses
    #[arg(
        long,
        value_name = "P",
        env = "REDLOCK_PREFIX",
        default_value = "redlock:",
        global = true
    )]
    pub prefix: String,

    /// Keep a lock's record (fence counter, last holder) for DUR after its last use
    ///
    /// The record (the `PREFIX{NAME}:meta` hash) expires DUR after the lock's TTL and its
    /// waiters' leases run out, as they stood at the last acquisition, renewal or waiter's
    /// attempt: never while the lock is held or waited for. Fences keep increasing without it (a
    /// fence is never below the server's clock in microseconds); `status` no longer shows the
    /// last holder of a lock idle that long.
    #[arg(
        long,
        value_name = "DUR",
        env = "REDLOCK_META_TTL",
        default_value = "30days",
        value_parser = parse_ttl,
        global = true
    )]
    pub meta_ttl: Duration,

    /// Keep the last N events of each lock in its history (`redlock log`); 0 keeps none
    ///
    /// The history (the stream `PREFIX{NAME}:log`) is written by the scripts that take, release
    /// and force a lock, and by `exec` when it loses one; it expires with the lock's record
    /// (--meta-ttl). A lower N trims older entries at the next write; 0 writes none (existing
    /// entries stay until they expire). From 100 up the trim drops whole stream nodes (Redis's
    /// `MAXLEN ~`): at least N entries are kept, and at most one node more (100 by default).
    #[arg(
        long,
        value_name = "N",
        env = "REDLOCK_LOG_MAX",
        default_value_t = 1000,
        value_parser = clap::value_parser!(u64).range(0..=1_000_000_000),
        global = true
    )]
    pub log_max: u64,

    /// Give up connecting to Redis after DUR
    #[arg(long, value_name = "DUR", default_value = "2s", value_parser = parse_duration, global = true)]
    pub connect_timeout: Duration,

    /// Give up on a Redis reply after DUR (a silent server never means a hang); with several
    /// --url it bounds each server's reply, so keep it well under --ttl
    #[arg(long, value_name = "DUR", default_value = "2s", value_parser = parse_duration, global = true)]
    pub io_timeout: Duration,

    /// Print nothing on stderr except errors (and whom `release --force` evicted)
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,

    /// Log every Redis round trip to stderr
    #[arg(short, long, global = true)]
    pub verbose: bool,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Take a lock, run a command while renewing it, release it when the command exits
    ///
    /// If redlock dies, even by kill -9, the command gets SIGTERM, and the lock frees itself
    /// within its TTL. On macOS (no parent-death signal, child subreaper or /proc) a watchdog
    /// process stops the command instead: a kill of both (killall -9 redlock) leaves it running
    /// unlocked, as consul lock and etcdctl lock leave theirs; what the command left running is
    /// stopped (--max-runtime, --preemptible) only if redlock leads its process group (setsid, a
    /// terminal's job) and it stayed there; and a Ctrl-C reaches the command twice, the
    /// terminal's and the one redlock passes on.
    #[command(
        override_usage = "redlock exec [OPTIONS] <KEY> -- CMD [ARGS...]\n       \
                          redlock exec [OPTIONS] <KEY> -c <SHELL-COMMAND>",
        after_help = "Examples:\n  \
        redlock exec nightly-backup -n -- ./backup.sh\n  \
        redlock exec deploy-prod --wait 30m -- ./deploy.sh\n  \
        redlock exec report -c 'make report && mail -s done ops < report.txt'"
    )]
    Exec(ExecArgs),

    /// Take a lock and print its token (the lock stays held after redlock exits)
    #[command(
        after_help = "Example:\n  REDLOCK_TOKEN=$(redlock acquire migrate --ttl 5m) || exit\n  \
        export REDLOCK_TOKEN    # release and extend read it (argv shows in ps)\n  \
        trap 'redlock release migrate' EXIT"
    )]
    Acquire(AcquireArgs),

    /// Release a lock held with TOKEN (never someone else's)
    Release(ReleaseArgs),

    /// Reset the TTL of a lock held with TOKEN (an expired lock is never brought back)
    Extend(ExtendArgs),

    /// Show who holds locks: the named KEYs, or every lock under the prefix
    #[command(
        after_help = "Example (cron, for node_exporter's textfile collector; write, then move):\n  \
        d=/var/lib/node_exporter/textfile\n  \
        redlock -q status --format prometheus deploy backup >$d/redlock.prom.$$ &&\n    \
        mv $d/redlock.prom.$$ $d/redlock.prom"
    )]
    Status(StatusArgs),

    /// Show a lock's history: who took it, when, how long they waited and held it, how it ended
    #[command(after_help = "Examples:\n  redlock log deploy-prod --since 24h\n  \
        redlock log deploy-prod --follow --json >> deploy-prod.events")]
    Log(LogArgs),

    /// Wait until a lock is free, without taking it or joining its queue
    #[command(after_help = "Example:\n  redlock wait deploy-prod --wait 30m && ./smoke-tests.sh")]
    Wait(WaitArgs),
}

/// How to take a lock: shared by `acquire` and `exec`.
#[derive(Debug, Args)]
pub struct LockArgs {
    /// Lock lifetime: it frees itself DUR after it was taken or renewed (exec renews every TTL/3)
    #[arg(long, value_name = "DUR", default_value = "30s", value_parser = parse_ttl, allow_hyphen_values = true)]
    pub ttl: Duration,

    /// Wait at most DUR for a busy lock (default: until it is free; first come, first served)
    #[arg(short, long, value_name = "DUR", value_parser = parse_duration, allow_hyphen_values = true)]
    pub wait: Option<Duration>,

    /// Do not wait: fail at once if the lock is busy
    #[arg(short = 'n', long, conflicts_with = "wait")]
    pub no_wait: bool,

    /// Exit status when the lock is busy (not acquired); 0 makes a skipped cron run succeed
    #[arg(short = 'E', long, value_name = "N", default_value_t = 1)]
    pub conflict_exit_code: u8,

    /// Describe the holder in 'redlock status' (default: the command line); secrets show as ***
    #[arg(long, value_name = "TEXT")]
    pub note: Option<String>,

    /// After acquiring, wait (up to --io-timeout) until N replicas have the lock, or fail
    #[arg(long, value_name = "N", default_value_t = 0, hide_default_value = true)]
    pub wait_replicas: u32,

    /// Lock even on a server that may evict it: maxmemory-policy allkeys-* (refused without this)
    #[arg(
        long,
        env = "REDLOCK_ALLOW_EVICTION",
        action = clap::ArgAction::SetTrue,
        value_parser = parse_switch
    )]
    pub allow_eviction: bool,

    /// Let up to N holders in at once; exec's command gets its place in REDLOCK_SLOT (0 to N-1)
    #[arg(
        long,
        value_name = "N",
        value_parser = clap::value_parser!(u32).range(1..=MAX_SLOTS as i64),
        conflicts_with_all = ["pool", "shared"]
    )]
    pub slots: Option<u32>,

    /// One holder per named resource; exec's command gets the one it holds in REDLOCK_RESOURCE
    #[arg(long, value_name = "NAME,...", value_parser = parse_pool, conflicts_with = "shared")]
    pub pool: Option<Pool>,

    /// Hold it shared: any number of --shared holders, or one without (a writer, who goes first)
    #[arg(long)]
    pub shared: bool,

    /// Make earlier --supersede waiters give up (exit -E); a later one makes this one give up
    #[arg(long)]
    pub supersede: bool,

    /// Go ahead of the waiters without --preempt; stop a --preemptible holder (it exits 75)
    #[arg(long)]
    pub preempt: bool,

    /// Once held, a --preempt waiter may stop the command (acquire: needs --while-pid)
    #[arg(long)]
    pub preemptible: bool,
}

/// The most holders `--slots` and `--pool` allow.
pub const MAX_SLOTS: u32 = 1000;

/// The names of `--pool`, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pool(pub Vec<String>);

#[derive(Debug, Args)]
pub struct AcquireArgs {
    /// Name of the lock
    pub key: String,

    #[command(flatten)]
    pub lock: LockArgs,

    /// What to print on stdout
    #[arg(long, value_enum, default_value_t = Format::Token)]
    pub format: Format,

    /// Keep the lock (renewed every TTL/3) while PID and the work it started run
    ///
    /// A detached keeper renews the lock for as long as PID (usually the calling script, $$) and
    /// the work it started run, and releases it once they have all ended (however PID ended, even
    /// by SIGKILL); `redlock release` with the token stops it. The work is PID's process group
    /// when PID leads one (cron, CI runners, setsid and terminals start a script so): its steps
    /// and background jobs. Otherwise (acquire warns) it is PID's descendants as scans of the
    /// process table find them, every 500ms: best effort, run the script with setsid for the full
    /// guarantee. If the lock is lost (or preempted, with --preemptible), or the keeper gets
    /// SIGTERM, it stops PID and its work as --on-lost says (SIGKILL after --kill-after), keeping
    /// the lock until they have ended (a lost lock cannot be kept). On macOS (no pidfds or
    /// /proc), PID is known by its pid and start time and its work by ps; the keeper's warnings
    /// reach a terminal or a file, not a pipe; status cannot show a holder gone; a release
    /// reaches the keeper through Redis.
    #[arg(long, value_name = "PID", value_parser = clap::value_parser!(i32).range(1..))]
    pub while_pid: Option<i32>,

    /// With --while-pid: what the keeper does to PID and its work if the lock is lost or preempted
    #[arg(long, value_enum, value_name = "ACTION", default_value_t = PidOnLost::Term, requires = "while_pid")]
    pub on_lost: PidOnLost,

    /// With --while-pid: SIGKILL PID's work if it still runs DUR after the keeper's SIGTERM
    #[arg(long, value_name = "DUR", default_value = KILL_AFTER, value_parser = parse_duration, requires = "while_pid")]
    pub kill_after: Duration,
}

/// The grace `--kill-after` gives after a SIGTERM, by default: exec's and acquire's.
pub const KILL_AFTER: &str = "10s";

/// What `acquire --while-pid`'s keeper does to PID when the lock is lost or preempted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PidOnLost {
    /// Send SIGTERM to PID and its work (SIGKILL after --kill-after), so nothing runs unprotected
    Term,
    /// Send SIGKILL to PID and its work
    Kill,
    /// Only warn (on the keeper's stderr, and in the lock's history); SIGTERM releases at once
    Ignore,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// The token alone, for T=$(redlock acquire KEY)
    Token,
    /// REDLOCK_KEY=, REDLOCK_TOKEN= and REDLOCK_FENCE= lines (and REDLOCK_SLOT=, REDLOCK_RESOURCE=
    /// with --slots or --pool), for v=$(...) || exit; eval "$v"
    Env,
    /// One JSON object
    Json,
}

#[derive(Debug, Args)]
pub struct ReleaseArgs {
    /// Name of the lock
    pub key: String,

    // Optional for clap (REDLOCK_TOKEN may stand in for it): without either, `release` says
    // what is missing and where a token comes from, which clap's generic message cannot.
    /// Token printed by `acquire`
    #[arg(env = "REDLOCK_TOKEN", hide_env_values = true)]
    pub token: Option<String>,

    /// Delete the lock whoever holds it, and print the previous holder
    #[arg(long)]
    pub force: bool,

    /// With --force: release only if the lock is still held with fence N, as `status` shows it (exit 3 otherwise)
    #[arg(
        long,
        value_name = "N",
        requires = "force",
        conflicts_with = "if_token"
    )]
    pub if_fence: Option<i64>,

    /// With --force: release only if the holder's token starts with FINGERPRINT, the 8 hex digits `status` shows, or more of the token (exit 3 otherwise)
    #[arg(long, value_name = "FINGERPRINT", requires = "force")]
    pub if_token: Option<String>,
}

#[derive(Debug, Args)]
pub struct ExtendArgs {
    /// Name of the lock
    pub key: String,

    // Optional for clap, as for `release`.
    /// Token printed by `acquire`
    #[arg(env = "REDLOCK_TOKEN", hide_env_values = true)]
    pub token: Option<String>,

    /// New lifetime, counted from now
    #[arg(long, value_name = "DUR", value_parser = parse_ttl, allow_hyphen_values = true)]
    pub ttl: Duration,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Locks to show (default: every lock under the prefix)
    pub keys: Vec<String>,

    /// What to print: a table for people, JSON, or metrics in the Prometheus text format (exit
    /// 0 whether the locks are held or free)
    #[arg(long, value_enum, value_name = "FORMAT", default_value_t = StatusFormat::Table)]
    pub format: StatusFormat,

    /// Print JSON instead of a table: short for --format json
    #[arg(long, conflicts_with = "format")]
    pub json: bool,

    /// Show whole tokens instead of fingerprints
    #[arg(long)]
    pub show_token: bool,

    /// List the waiters of every lock too (named locks always list theirs, in queue order, below
    /// the table: who, what, for how long, until when; JSON always has them, under "queue")
    #[arg(long)]
    pub queue: bool,

    /// Keep watching until Ctrl-C: on a terminal, redraw the table on every change and each
    /// second; with --json, print one JSON object per change (JSON Lines); otherwise, one line
    /// per change
    #[arg(long)]
    pub watch: bool,
}

/// What `status` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StatusFormat {
    /// A table (and below it, the waiters and a quorum's nodes)
    Table,
    /// One JSON array, an object per lock
    Json,
    /// The Prometheus text format (0.0.4), for node_exporter's textfile collector
    Prometheus,
}

impl StatusArgs {
    /// The format asked for, `--json` included.
    pub fn format(&self) -> StatusFormat {
        if self.json {
            StatusFormat::Json
        } else {
            self.format
        }
    }
}

#[derive(Debug, Args)]
pub struct WaitArgs {
    /// Name of the lock
    pub key: String,

    /// Wait at most DUR (default: until it is free)
    #[arg(short, long, value_name = "DUR", value_parser = parse_duration, allow_hyphen_values = true)]
    pub wait: Option<Duration>,

    /// Exit status when --wait runs out with the lock still busy
    #[arg(short = 'E', long, value_name = "N", default_value_t = 1)]
    pub conflict_exit_code: u8,
}

#[derive(Debug, Args)]
pub struct LogArgs {
    /// Name of the lock
    pub key: String,

    /// Only events of the last DUR (by the server's clock)
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub since: Option<Duration>,

    /// At most the N most recent events (all that are kept, up to --log-max, by default)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1_000_000_000))]
    pub limit: Option<u64>,

    /// Then keep printing events as they are written, until interrupted (exit 130 on Ctrl-C)
    #[arg(short, long)]
    pub follow: bool,

    /// One JSON object per event and line (JSON Lines) instead of text
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ExecArgs {
    /// Name of the lock
    pub key: String,

    #[command(flatten)]
    pub lock: LockArgs,

    /// What to do with the command if the lock is lost while it runs
    #[arg(long, value_enum, value_name = "ACTION", default_value_t = OnLost::Term)]
    pub on_lost: OnLost,

    /// SIGKILL the command if it still runs DUR after a SIGTERM or SIGINT (passed on, or sent)
    #[arg(long, value_name = "DUR", default_value = KILL_AFTER, value_parser = parse_duration)]
    pub kill_after: Duration,

    /// Stop the command after it held the lock for DUR (SIGTERM, then SIGKILL) and exit 124
    #[arg(long, value_name = "DUR", value_parser = parse_limit)]
    pub max_runtime: Option<Duration>,

    /// Warn (stderr, and the lock's history) once the command has held the lock for DUR
    #[arg(long, value_name = "DUR", value_parser = parse_limit)]
    pub warn_after: Option<Duration>,

    /// When exec ends, append one JSON line about the run to FILE (- for stdout)
    #[arg(long, value_name = "FILE", value_hint = ValueHint::FilePath)]
    pub report: Option<std::path::PathBuf>,

    /// Run this shell command with /bin/sh -c instead of CMD
    #[arg(
        short = 'c',
        long = "command",
        value_name = "SHELL-COMMAND",
        conflicts_with = "cmd"
    )]
    pub shell_command: Option<String>,

    // Optional for clap: without it and without -c, `exec` says that the command is missing and
    // where it goes, which clap's generic message cannot.
    /// The command to run, and its arguments (after --)
    #[arg(
        value_name = "CMD",
        trailing_var_arg = true,
        value_hint = ValueHint::CommandWithArguments
    )]
    pub cmd: Vec<OsString>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnLost {
    /// SIGTERM, then SIGKILL after --kill-after
    Term,
    /// SIGKILL at once
    Kill,
    /// Warn and let the command finish
    Ignore,
}

/// The longest duration any option takes: 100 years, for all alike. Refused where it is parsed,
/// so that no deadline or sum computed from a user's durations (`now + --kill-after`,
/// `--io-timeout * 4`, ...) can overflow the clock, wherever the code computes it; no option
/// needs more (an option left out means no limit where one makes sense).
pub const MAX_DURATION: Duration = Duration::from_secs(100 * YEAR_SECS);

/// A year as humantime counts it (365.25 days), so that `100y` is allowed.
const YEAR_SECS: u64 = 31_557_600;

/// Parses a humantime duration (`500ms`, `1m30s`); a bare number means seconds, as `flock -w`.
/// At most [`MAX_DURATION`].
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    match parse_any_duration(s)? {
        Some(d) if d <= MAX_DURATION => Ok(d),
        _ => Err(format!(
            "'{s}' is too long; a duration is at most 100 years"
        )),
    }
}

/// Any duration, or `None` for a number of seconds too large for one.
fn parse_any_duration(s: &str) -> Result<Option<Duration>, String> {
    let t = s.trim();
    if t.is_empty() {
        return Err("empty duration; use e.g. 30s, 500ms or 1m30s".into());
    }
    if t.starts_with('-') {
        return Err(format!("'{s}' is negative; durations are 0 or more"));
    }
    if t.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        let secs: f64 = t
            .parse()
            .map_err(|_| format!("'{s}' is not a number of seconds"))?;
        return Ok(Duration::try_from_secs_f64(secs).ok());
    }
    humantime::parse_duration(t)
        .map(Some)
        .map_err(|e| format!("'{s}' is not a duration ({e}); use e.g. 30s, 500ms or 1m30s"))
}

/// An on/off switch from the environment: 1, true, yes, on / 0, false, no, off; empty is off.
pub fn parse_switch(s: &str) -> Result<bool, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "" | "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(format!("'{s}' is not on or off; use 1 or 0")),
    }
}

/// A time limit (`--max-runtime`, `--warn-after`): a duration above zero (no limit: leave the
/// option out).
pub fn parse_limit(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err(format!(
            "'{s}' is no time at all; leave the option out for no limit"
        ));
    }
    Ok(d)
}

/// `--pool`: names separated by commas, each non-empty, printable and unique.
pub fn parse_pool(s: &str) -> Result<Pool, String> {
    let names: Vec<String> = s.split(',').map(str::to_string).collect();
    if names.len() > MAX_SLOTS as usize {
        return Err(format!(
            "{} names; a pool has at most {MAX_SLOTS}",
            names.len()
        ));
    }
    for (i, name) in names.iter().enumerate() {
        if name.is_empty() {
            return Err(format!(
                "'{s}' has an empty name; separate names with single commas"
            ));
        }
        if let Some(why) = crate::printable::unsafe_in_name(name) {
            return Err(format!(
                "the name '{}' contains {why}",
                crate::printable::printable(name)
            ));
        }
        if names[..i].contains(name) {
            return Err(format!("'{name}' is in the pool twice"));
        }
    }
    Ok(Pool(names))
}

/// A TTL: a duration of at least one millisecond (Redis counts expiry in milliseconds).
pub fn parse_ttl(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d < Duration::from_millis(1) {
        return Err(format!("'{s}' is too short; a TTL must be at least 1ms"));
    }
    Ok(d)
}
