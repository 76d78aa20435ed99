//! The command socket's language: HAProxy's runtime API (its "stats socket"),
//! for what Tollgate has, so that scripts written for HAProxy work unchanged.
//! docs/admin.md ("Command socket") documents it.
//!
//! This module is the pure core, with no I/O: [`parse_line`] turns a line into
//! [`Command`]s, [`Session::run_line`] runs them against a [`Runtime`] (the live
//! server, or a fake in tests) and returns the exact bytes to send back, and the
//! `show_*` functions format a [`Report`] as HAProxy prints it. socket.rs reads
//! lines from the Unix socket and writes what comes back.
//!
//! Semantics follow HAProxy 2.x/3.x:
//! - one line holds one or more commands separated by `;`; words are separated by
//!   spaces or tabs; a backslash escapes the next character (`\;`, `\ `, `\\`);
//! - each command's output is followed by an empty line (the end-of-output mark);
//!   in prompt mode the last one of a line is followed by the `> ` prompt;
//! - non-interactive mode (the default) closes the connection after the first
//!   line; `prompt` switches to interactive mode with a prompt;
//! - errors are HAProxy's messages ("No such backend.", "Permission denied", ...)
//!   and an unknown command gets the list of commands, never a dropped connection.

use super::cli_servers::{self, ServerAdmin};
use super::{ControlError, CounterTableView, NewServer, ServerChange};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::LazyLock;
use std::time::Duration;
use tollgate_config::CliLevel;
use tollgate_proxy::lb::AdminState;
use tollgate_proxy::runtime::report::{BackendReport, CheckReport, FrontendReport, Report, Responses, ServerReport};

/// The longest line read (HAProxy's default `tune.bufsize`); a longer one is
/// refused with [`LINE_TOO_LONG`] and the connection closed.
pub const MAX_LINE: usize = 16 * 1024;

/// The answer to a line longer than [`MAX_LINE`] (HAProxy's first sentence).
pub const LINE_TOO_LONG: &str = "The command line is too big for the buffer size.\n";

/// Idle time after which a session is closed, until `set timeout cli` changes
/// it (HAProxy's `stats timeout` default).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest `set timeout cli` honoured (HAProxy keeps timeouts in signed
/// 32-bit milliseconds: about 24.8 days). Longer values are cut to it.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(2_147_483);

/// `show stat` columns, comma-separated, in HAProxy's order: the fixed fields of
/// the management guide (section 9.1) from `pxname` to `uweight`, the same in
/// HAProxy 2.4 to 3.x. Later columns vary between HAProxy versions and are not
/// printed.
pub const STAT_HEADER: &str = "\
pxname,svname,qcur,qmax,scur,smax,slim,stot,bin,bout,dreq,dresp,ereq,econ,eresp,wretr,wredis,status,\
weight,act,bck,chkfail,chkdown,lastchg,downtime,qlimit,pid,iid,sid,throttle,lbtot,tracked,type,rate,\
rate_lim,rate_max,check_status,check_code,check_duration,hrsp_1xx,hrsp_2xx,hrsp_3xx,hrsp_4xx,hrsp_5xx,\
hrsp_other,hanafail,req_rate,req_rate_max,req_tot,cli_abrt,srv_abrt,comp_in,comp_out,comp_byp,comp_rsp,\
lastsess,last_chk,last_agt,qtime,ctime,rtime,ttime,agent_status,agent_code,agent_duration,check_desc,\
agent_desc,check_rise,check_fall,check_health,agent_rise,agent_fall,agent_health,addr,cookie,mode,algo,\
conn_rate,conn_rate_max,conn_tot,intercepted,dcon,dses,wrew,connect,reuse,cache_lookups,cache_hits,\
srv_icur,src_ilim,qtime_max,ctime_max,rtime_max,ttime_max,eint,idle_conn_cur,safe_conn_cur,used_conn_cur,\
need_conn_est,uweight";

/// [`STAT_HEADER`]'s column names.
static STAT_COLUMNS: LazyLock<Vec<&'static str>> = LazyLock::new(|| STAT_HEADER.split(',').collect());

/// `show servers state` header (format version 1), HAProxy's columns.
pub const SERVERS_STATE_HEADER: &str = "1\n# be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state \
srv_uweight srv_iweight srv_time_since_last_change srv_check_status srv_check_result srv_check_health \
srv_check_state srv_agent_state bk_f_forced_id srv_f_forced_id srv_fqdn srv_port srvrecord srv_use_ssl \
srv_check_port srv_check_addr srv_agent_addr srv_agent_port\n";

// HAProxy's messages.
const PERMISSION_DENIED: &str = "Permission denied\n";
const REQUIRE_TARGET: &str = "Require 'backend/server'.\n";
const NO_BACKEND: &str = "No such backend.\n";
const NO_SERVER: &str = "No such server.\n";
const NO_PROXY: &str = "No such proxy.\n";
const CANT_FIND_BACKEND: &str = "Can't find backend.\n";
const BAD_STATE: &str = "'set server <srv> state' expects 'ready', 'drain' and 'maint'.\n";
const SET_SERVER_USAGE: &str = "'set server <srv>' only supports 'agent', 'health', 'state', 'weight', 'addr', \
'fqdn', 'check-addr', 'check-port', 'ssl' and 'agent-addr'.\n";
const STATIC_WEIGHT: &str = "Backend is using a static LB algorithm and only accepts weights '0%' and '100%'.\n";

/// One command of a line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Nothing between two `;` (or an empty line): no output.
    Empty,
    /// `help [words]`: the commands, or those starting with `words`.
    Help(Vec<String>),
    /// `prompt [n|i|p|timed]`.
    Prompt(PromptArg),
    /// `quit`: close at once.
    Quit,
    /// `echo <text>`.
    Echo(String),
    ShowVersion,
    ShowInfo,
    ShowStat(StatFilter),
    /// `show servers state [<backend>]`.
    ShowServersState(Option<String>),
    /// `show table [<name>]`: the backends' stick tables and the `[[table]]`s.
    ShowTable(Option<String>),
    /// `clear table <name>`: a `[[table]]` emptied.
    ClearTable(String),
    ShowBackend,
    /// `set server B/S state|weight ...`, `set weight B/S W`, `enable server B/S`,
    /// `disable server B/S`. `target` is "backend/server" as typed; it is
    /// resolved (and refused) before the operation's own errors are told, as
    /// HAProxy does.
    SetServer {
        target: String,
        op: ServerOp,
    },
    /// `get weight B/S`.
    GetWeight(String),
    /// `add server B/S ADDR:PORT [weight W] [maxconn N] [backup] [check]`:
    /// the server as typed, or why it cannot be.
    AddServer {
        target: String,
        spec: Result<NewServer, String>,
    },
    /// `del server B/S`.
    DelServer(String),
    /// `shutdown sessions server B/S`.
    ShutdownSessions(String),
    /// `set timeout cli <delay>`.
    SetTimeoutCli(Duration),
    /// A command understood but refused as typed: the message to print.
    Error(String),
    /// No such command: the words typed.
    Unknown(Vec<String>),
}

impl Command {
    /// The level a socket needs to run it (HAProxy's: reading statistics is
    /// for every level, stick tables for operators, changes for admins).
    pub fn level(&self) -> CliLevel {
        match self {
            Command::SetServer { .. }
            | Command::AddServer { .. }
            | Command::DelServer(_)
            | Command::ShutdownSessions(_)
            | Command::ClearTable(_) => CliLevel::Admin,
            Command::ShowTable(_) => CliLevel::Operator,
            _ => CliLevel::User,
        }
    }
}

/// What `set server` changes, or why it cannot (the message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerOp {
    State(Result<AdminState, String>),
    Weight(Result<Weight, String>),
    /// `addr IP [port PORT]`.
    Addr(Result<(std::net::IpAddr, Option<u16>), String>),
    /// An operation Tollgate does not have, or none: the message.
    Invalid(String),
}

/// A weight as typed: absolute (0..=256), or a percentage of the configured
/// weight (the result capped at 256).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Weight {
    Absolute(u32),
    Percent(u32),
}

impl Weight {
    /// The weight to set on a server configured with `initial`.
    pub fn resolve(self, initial: u32) -> u32 {
        match self {
            Weight::Absolute(w) => w,
            Weight::Percent(p) => (u64::from(initial) * u64::from(p) / 100).min(256) as u32,
        }
    }
}

/// `prompt`'s argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptArg {
    /// No argument: prompt mode, or back to non-interactive from prompt mode.
    Toggle,
    NonInteractive,
    Interactive,
    Prompt,
    /// Prompt mode, and toggle the uptime shown in the prompt.
    Timed,
}

/// `show stat [{<iid>|<proxy>} <type> <sid>] [up|no-maint]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatFilter {
    pub proxy: ProxySel,
    /// Bit mask: 1 frontends, 2 backends, 4 servers.
    pub types: u32,
    /// A server id (`sid`), or every server.
    pub sid: Option<u32>,
    /// `up`: only servers UP or unchecked (no DOWN nor MAINT ones).
    pub up: bool,
    /// `no-maint`: no server in MAINT.
    pub no_maint: bool,
}

impl Default for StatFilter {
    fn default() -> Self {
        StatFilter { proxy: ProxySel::All, types: 7, sid: None, up: false, no_maint: false }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProxySel {
    All,
    /// A proxy id (`iid`).
    Id(u32),
    Name(String),
}

/// Splits a line into its commands (on `;` not escaped by a backslash) and
/// parses each.
pub fn parse_line(line: &str) -> Vec<Command> {
    let mut commands = Vec::new();
    let mut current = String::new();
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                current.push('\\');
                if let Some(n) = chars.next() {
                    current.push(n);
                }
            }
            ';' => commands.push(parse_command(&split_words(&std::mem::take(&mut current)))),
            _ => current.push(c),
        }
    }
    commands.push(parse_command(&split_words(&current)));
    commands
}

/// Words separated by spaces or tabs; a backslash makes the next character part
/// of the word (`\\` is a backslash).
fn split_words(command: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = command.chars();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' => {
                if let Some(w) = word.take() {
                    words.push(w);
                }
            }
            '\\' => {
                let w = word.get_or_insert_with(String::new);
                if let Some(n) = chars.next() {
                    w.push(n);
                }
            }
            _ => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    words
}

/// Parses one command's words.
pub fn parse_command(words: &[String]) -> Command {
    let w: Vec<&str> = words.iter().map(String::as_str).collect();
    let arg = |i: usize| w.get(i).copied().unwrap_or("");
    match w.as_slice() {
        [] => Command::Empty,
        ["help", rest @ ..] => Command::Help(rest.iter().map(|s| s.to_string()).collect()),
        ["prompt", ..] => Command::Prompt(match arg(1) {
            "n" => PromptArg::NonInteractive,
            "i" => PromptArg::Interactive,
            "p" => PromptArg::Prompt,
            "timed" => PromptArg::Timed,
            _ => PromptArg::Toggle,
        }),
        ["quit", ..] => Command::Quit,
        ["echo", rest @ ..] => Command::Echo(rest.join(" ")),
        ["show", "version", ..] => Command::ShowVersion,
        ["show", "info", rest @ ..] => match unsupported_format(rest) {
            Some(f) => Command::Error(format!("Tollgate prints 'show info' in the default format only, not '{f}'.\n")),
            None => Command::ShowInfo,
        },
        ["show", "stat", rest @ ..] => parse_show_stat(rest),
        ["show", "servers", "state", ..] => Command::ShowServersState(w.get(3).map(|s| s.to_string())),
        ["show", "table", ..] => Command::ShowTable(w.get(2).map(|s| s.to_string())),
        ["clear", "table", name] => Command::ClearTable(name.to_string()),
        ["clear", "table", ..] => {
            Command::Error("Tollgate clears a whole table: 'clear table <table>' (no key or data filter).\n".into())
        }
        ["show", "backend", ..] => Command::ShowBackend,
        ["set", "server", ..] => {
            let op = match arg(3) {
                "state" => ServerOp::State(parse_state(arg(4))),
                "weight" => ServerOp::Weight(parse_weight(arg(4))),
                "addr" => ServerOp::Addr(cli_servers::parse_addr(w.get(4..).unwrap_or_default())),
                op @ ("agent" | "agent-addr" | "agent-port" | "agent-send" | "health" | "fqdn" | "check-addr"
                | "check-port" | "ssl" | "maxconn") => ServerOp::Invalid(format!(
                    "'set server <srv> {op}' is not supported by Tollgate, which supports 'state', 'weight' and \
                     'addr'.\n"
                )),
                _ => ServerOp::Invalid(SET_SERVER_USAGE.into()),
            };
            Command::SetServer { target: arg(2).into(), op }
        }
        ["set", "weight", ..] => {
            Command::SetServer { target: arg(2).into(), op: ServerOp::Weight(parse_weight(arg(3))) }
        }
        ["enable", "server", ..] => {
            Command::SetServer { target: arg(2).into(), op: ServerOp::State(Ok(AdminState::Ready)) }
        }
        ["disable", "server", ..] => {
            Command::SetServer { target: arg(2).into(), op: ServerOp::State(Ok(AdminState::Maint)) }
        }
        ["get", "weight", ..] => Command::GetWeight(arg(2).into()),
        ["add", "server", rest @ ..] => {
            let (target, spec) = cli_servers::parse_add(rest);
            Command::AddServer { target, spec }
        }
        ["del", "server", ..] => Command::DelServer(arg(2).into()),
        ["shutdown", "sessions", "server", ..] => Command::ShutdownSessions(arg(3).into()),
        ["set", "timeout", ..] => {
            if arg(2) != "cli" {
                return Command::Error("'set timeout' only supports 'cli'.\n".into());
            }
            match parse_timeout(arg(3)) {
                Ok(d) => Command::SetTimeoutCli(d),
                Err(e) => Command::Error(e),
            }
        }
        _ => Command::Unknown(words.to_vec()),
    }
}

fn unsupported_format<'a>(args: &[&'a str]) -> Option<&'a str> {
    args.iter().find(|a| matches!(**a, "typed" | "json")).copied()
}

fn parse_show_stat(args: &[&str]) -> Command {
    if let Some(f) = unsupported_format(args) {
        return Command::Error(format!("Tollgate prints 'show stat' as CSV only, not '{f}'.\n"));
    }
    let mut filter = StatFilter::default();
    let mut rest = args;
    // `{<iid>|<proxy>} <type> <sid>`, as HAProxy: three words, numbers read as
    // atoi() does, -1 for "all".
    if let [px, ty, sid, tail @ ..] = args
        && !matches!(*px, "up" | "no-maint")
    {
        filter.proxy = match atoi(px) {
            0 => ProxySel::Name(px.to_string()),
            n if n < 0 => ProxySel::All,
            n => ProxySel::Id(u32::try_from(n).unwrap_or(u32::MAX)),
        };
        filter.types = match atoi(ty) {
            n if n < 0 => 7,
            n => (n & 7) as u32,
        };
        filter.sid = u32::try_from(atoi(sid)).ok();
        rest = tail;
    }
    for a in rest {
        match *a {
            "up" => filter.up = true,
            "no-maint" => filter.no_maint = true,
            _ => {}
        }
    }
    Command::ShowStat(filter)
}

/// C's atoi(): optional sign, leading digits, 0 when there are none.
fn atoi(s: &str) -> i64 {
    let (neg, digits) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let n = digits
        .bytes()
        .take_while(u8::is_ascii_digit)
        .fold(0i64, |n, d| n.saturating_mul(10).saturating_add(i64::from(d - b'0')));
    if neg { -n } else { n }
}

fn parse_state(s: &str) -> Result<AdminState, String> {
    match s {
        "ready" => Ok(AdminState::Ready),
        "drain" => Ok(AdminState::Drain),
        "maint" => Ok(AdminState::Maint),
        _ => Err(BAD_STATE.into()),
    }
}

/// HAProxy's weight syntax: `N` (0..=256) or `N%` of the configured weight, read
/// as strtol() does, with HAProxy's messages.
pub fn parse_weight(s: &str) -> Result<Weight, String> {
    if s.is_empty() {
        return Err("Require <weight> or <weight%>.\n".into());
    }
    let (neg, body) = match s.as_bytes()[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let ndigits = body.bytes().take_while(u8::is_ascii_digit).count();
    if ndigits == 0 {
        return Err("Empty weight string empty or preceded by garbage\n".into());
    }
    let magnitude = body[..ndigits].bytes().fold(0i64, |n, d| n.saturating_mul(10).saturating_add(i64::from(d - b'0')));
    let w = if neg { -magnitude } else { magnitude };
    let rest = &body[ndigits..];
    if rest == "%" {
        if w < 0 {
            return Err("Relative weight must be positive.\n".into());
        }
        return Ok(Weight::Percent(w.min(25_600) as u32));
    }
    if !(0..=256).contains(&w) {
        return Err("Absolute weight can only be between 0 and 256 inclusive.\n".into());
    }
    if !rest.is_empty() {
        return Err("Trailing garbage in weight string\n".into());
    }
    Ok(Weight::Absolute(w as u32))
}

/// HAProxy's time syntax with seconds as the default unit: `N`, `Nus`, `Nms`,
/// `Ns`, `Nm`, `Nh`, `Nd`, rounded up to whole seconds; at least one second.
pub fn parse_timeout(s: &str) -> Result<Duration, String> {
    if s.is_empty() {
        return Err("Expects an integer value.\n".into());
    }
    let invalid = || "Invalid timeout value.\n".to_string();
    let ndigits = s.bytes().take_while(u8::is_ascii_digit).count();
    let value = s[..ndigits].bytes().fold(0u128, |n, d| n.saturating_mul(10).saturating_add(u128::from(d - b'0')));
    // (multiplier, divisor) to seconds.
    let (mul, div): (u128, u128) = match &s[ndigits..] {
        "" | "s" => (1, 1),
        "us" => (1, 1_000_000),
        "ms" => (1, 1_000),
        "m" => (60, 1),
        "h" => (3_600, 1),
        "d" => (86_400, 1),
        _ => return Err(invalid()),
    };
    let secs = value.saturating_mul(mul).div_ceil(div);
    if secs < 1 || secs > u128::from(u32::MAX) {
        return Err(invalid());
    }
    Ok(Duration::from_secs(secs as u64).min(MAX_TIMEOUT))
}

// ---------------------------------------------------------------------------
// Running commands.

/// What `show` prints: the report, and what the config says beyond it.
#[derive(Debug, Clone)]
pub struct View {
    pub report: Report,
    /// Per backend name.
    pub backends: HashMap<String, BackendConf>,
}

/// A backend's configuration as the formats need it.
#[derive(Debug, Clone, Default)]
pub struct BackendConf {
    pub check: Option<CheckConf>,
    /// The persistence cookie's name, if the backend has one.
    pub cookie: Option<String>,
    /// Its stick table (`stick = { on = "source" }`), if it has one.
    pub stick: Option<StickView>,
}

/// A stick table as `show table` prints it: its size, and its entries (the
/// client's address, the server's id and name, milliseconds left).
#[derive(Debug, Clone, Default)]
pub struct StickView {
    pub size: usize,
    pub entries: Vec<(std::net::IpAddr, usize, String, u64)>,
}

/// A backend's active health check.
#[derive(Debug, Clone, Copy)]
pub struct CheckConf {
    /// An HTTP check (layer 7) rather than a TCP connect (layer 4).
    pub layer7: bool,
    pub rise: u32,
    pub fall: u32,
}

/// The live server, as the commands use it.
pub trait Runtime {
    fn view(&self) -> Result<View, ControlError>;
    /// `admin.read_only`: changes are refused.
    fn read_only(&self) -> bool;
    fn set_server(&self, backend: &str, server: &str, change: ServerChange) -> Result<(), ControlError>;
    /// Adding, deleting and moving servers, and shutting their sessions.
    fn servers(&self) -> &dyn ServerAdmin;
    /// The `[[table]]`s of counters, each with up to `limit` entries.
    fn counter_tables(&self, limit: usize) -> Result<Vec<CounterTableView>, ControlError>;
    /// Empties a `[[table]]`: how many entries went.
    fn clear_table(&self, name: &str) -> Result<usize, ControlError>;
}

/// How a session reads its next line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// One line, then the connection closes (the default).
    NonInteractive,
    /// Line after line, no prompt.
    Interactive,
    /// Line after line, each answer followed by the `> ` prompt.
    Prompt,
}

/// What to send back for one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    pub text: String,
    /// Close the connection once `text` is sent.
    pub close: bool,
}

/// One connection's state.
#[derive(Debug, Clone)]
pub struct Session {
    /// What the socket's clients may do (`admin.socket`'s `level`).
    pub level: CliLevel,
    pub mode: Mode,
    /// `prompt timed`: the uptime in the prompt.
    pub timed: bool,
    /// Idle time before the connection is closed (`set timeout cli`).
    pub timeout: Duration,
}

impl Default for Session {
    fn default() -> Self {
        Session { level: CliLevel::Admin, mode: Mode::NonInteractive, timed: false, timeout: DEFAULT_TIMEOUT }
    }
}

impl Session {
    /// Runs every command of `line` and returns what to send back.
    pub fn run_line(&mut self, line: &str, rt: &dyn Runtime) -> Output {
        let commands = parse_line(line);
        let last = commands.len() - 1;
        let mut text = String::new();
        for (i, command) in commands.into_iter().enumerate() {
            if command == Command::Quit {
                return Output { text, close: true };
            }
            text.push_str(&self.execute(command, rt));
            // The end-of-output mark: an empty line; in prompt mode the prompt
            // after the last command of the line.
            match self.mode {
                Mode::Prompt if i == last => self.push_prompt(&mut text, rt),
                _ => text.push('\n'),
            }
        }
        Output { text, close: self.mode == Mode::NonInteractive }
    }

    fn push_prompt(&self, text: &mut String, rt: &dyn Runtime) {
        text.push('\n');
        if self.timed {
            let up = rt.view().map(|v| v.report.info.uptime_sec).unwrap_or(0);
            let _ = write!(text, "[{}:{:02}:{:02}:{:02}]", up / 86_400, (up / 3_600) % 24, (up / 60) % 60, up % 60);
        }
        text.push_str("> ");
    }

    /// One command's output: empty, or lines that each end with `\n`.
    fn execute(&mut self, command: Command, rt: &dyn Runtime) -> String {
        if command.level() > self.level {
            return PERMISSION_DENIED.into();
        }
        match command {
            Command::Empty | Command::Quit => String::new(),
            Command::Help(words) => usage(&words, true, self.level),
            Command::Unknown(words) => usage(&words, false, self.level),
            Command::Prompt(arg) => {
                self.mode = match (arg, self.mode) {
                    (PromptArg::Toggle, Mode::Prompt) | (PromptArg::NonInteractive, _) => Mode::NonInteractive,
                    (PromptArg::Interactive, _) => Mode::Interactive,
                    (PromptArg::Timed, _) => {
                        self.timed = !self.timed;
                        Mode::Prompt
                    }
                    (PromptArg::Toggle | PromptArg::Prompt, _) => Mode::Prompt,
                };
                String::new()
            }
            Command::Echo(text) => format!("{text}\n"),
            Command::ShowVersion => format!("{}\n", env!("CARGO_PKG_VERSION")),
            Command::ShowInfo => with_view(rt, |v| show_info(&v.report)),
            Command::ShowStat(filter) => with_view(rt, |v| show_stat(v, &filter)),
            Command::ShowServersState(backend) => with_view(rt, |v| show_servers_state(v, backend.as_deref())),
            Command::ShowTable(name) => with_view(rt, |v| show_table(v, name.as_deref(), rt)),
            Command::ClearTable(_) if rt.read_only() => PERMISSION_DENIED.into(),
            Command::ClearTable(name) => match rt.clear_table(&name) {
                Ok(_) => String::new(),
                Err(ControlError::NoTable(_)) => "No such table\n".into(),
                Err(e) => control_error(&e),
            },
            Command::ShowBackend => with_view(rt, |v| show_backend(&v.report)),
            Command::GetWeight(target) => with_view(rt, |v| match find_server(&v.report, &target) {
                Ok((_, s)) => format!("{} (initial {})\n", s.weight, s.configured_weight),
                Err(e) => e.into(),
            }),
            Command::SetServer { target, op } => set_server(rt, &target, op),
            Command::AddServer { target, spec } if !rt.read_only() => with_view(rt, |v| {
                cli_servers::add(rt.servers(), |b| v.report.backends.iter().any(|x| x.name == b), &target, spec)
            }),
            Command::DelServer(target) if !rt.read_only() => with_view(rt, |v| match find_server(&v.report, &target) {
                Ok((b, s)) => cli_servers::del(rt.servers(), &b.name, &s.name),
                Err(e) => e.into(),
            }),
            Command::ShutdownSessions(target) if !rt.read_only() => {
                with_view(rt, |v| match find_server(&v.report, &target) {
                    Ok((b, s)) => cli_servers::shutdown(rt.servers(), &b.name, &s.name),
                    Err(e) => e.into(),
                })
            }
            Command::AddServer { .. } | Command::DelServer(_) | Command::ShutdownSessions(_) => {
                PERMISSION_DENIED.into()
            }
            Command::SetTimeoutCli(d) => {
                self.timeout = d;
                String::new()
            }
            Command::Error(message) => message,
        }
    }
}

fn with_view(rt: &dyn Runtime, f: impl FnOnce(&View) -> String) -> String {
    match rt.view() {
        Ok(v) => f(&v),
        Err(e) => control_error(&e),
    }
}

/// `show table`: each backend's stick table and each `[[table]]`, HAProxy's
/// summary line (`# table: NAME, type: ip, size:N, used:N`), in name order;
/// with a table named, its entries too: a stick table's
/// (`0xN: key=ADDR use=0 exp=MS server_id=ID server_key=NAME`), or a counter
/// table's (`0xN: key=KEY use=CONN_CUR exp=MS conn_cur=N conn_rate(PERIOD)=N ...`).
fn show_table(v: &View, name: Option<&str>, rt: &dyn Runtime) -> String {
    let counters = match rt.counter_tables(if name.is_some() { MAX_SHOWN } else { 0 }) {
        Ok(t) => t,
        Err(e) => return control_error(&e),
    };
    let mut summary: Vec<(String, String)> = Vec::new();
    for (b, conf) in &v.backends {
        if let Some(t) = &conf.stick {
            summary.push((b.clone(), format!("# table: {b}, type: ip, size:{}, used:{}\n", t.size, t.entries.len())));
        }
    }
    for t in &counters {
        let line = format!("# table: {}, type: {}, size:{}, used:{}\n", t.name, t.kind, t.size, t.used);
        summary.push((t.name.clone(), line));
    }
    summary.sort();
    if let Some(n) = name {
        summary.retain(|(t, _)| t == n);
        if summary.is_empty() {
            return "No such table\n".into();
        }
    }
    let mut out = String::new();
    for (table, line) in summary {
        out += &line;
        if name.is_none() {
            continue;
        }
        if let Some(t) = v.backends.get(&table).and_then(|c| c.stick.as_ref()) {
            for (i, (ip, id, server, left)) in t.entries.iter().enumerate() {
                out += &format!("{:#x}: key={ip} use=0 exp={left} server_id={id} server_key={server}\n", i + 1);
            }
        } else if let Some(t) = counters.iter().find(|t| t.name == table) {
            for (i, e) in t.entries.iter().enumerate() {
                let cur = e.counters.iter().find(|(k, _)| *k == "conn_cur").map_or(0, |(_, v)| *v);
                out += &format!("{:#x}: key={} use={cur} exp={}", i + 1, e.key, e.expire_ms);
                for (k, v) in &e.counters {
                    match k.strip_suffix("_rate") {
                        Some(_) => out += &format!(" {k}({})={v}", t.period_ms),
                        None => out += &format!(" {k}={v}"),
                    }
                }
                out.push('\n');
            }
        }
    }
    out + "\n"
}

/// The most entries `show table <name>` prints (the admin API pages further).
const MAX_SHOWN: usize = 10_000;

/// A refusal from the live server, in HAProxy's words where it has them.
fn control_error(e: &ControlError) -> String {
    match e {
        ControlError::NoBackend(_) => NO_BACKEND.into(),
        ControlError::NoServer { .. } => NO_SERVER.into(),
        ControlError::ReadOnly => PERMISSION_DENIED.into(),
        other => format!("{other}.\n"),
    }
}

/// `set server` and its aliases, checked in HAProxy's order: the permission,
/// the server, then the operation.
fn set_server(rt: &dyn Runtime, target: &str, op: ServerOp) -> String {
    if rt.read_only() {
        return PERMISSION_DENIED.into();
    }
    with_view(rt, |v| {
        let (backend, server) = match find_server(&v.report, target) {
            Ok(found) => found,
            Err(e) => return e.into(),
        };
        let change = match op {
            ServerOp::Invalid(message)
            | ServerOp::State(Err(message))
            | ServerOp::Weight(Err(message))
            | ServerOp::Addr(Err(message)) => {
                return message;
            }
            ServerOp::Addr(Ok(to)) => {
                let (names, now) = ((&*backend.name, &*server.name), (&*server.addr, server.fqdn.as_deref()));
                return cli_servers::set_addr(rt.servers(), names, now, to);
            }
            ServerOp::State(Ok(state)) => ServerChange { state: Some(state), weight: None },
            ServerOp::Weight(Ok(w)) => {
                let weight = w.resolve(server.configured_weight);
                if backend.balance == "static-rr" && weight != 0 && weight != server.configured_weight {
                    return STATIC_WEIGHT.into();
                }
                ServerChange { state: None, weight: Some(weight) }
            }
        };
        match rt.set_server(&backend.name, &server.name, change) {
            Ok(()) => String::new(),
            Err(e) => control_error(&e),
        }
    })
}

/// Resolves "backend/server" (each a name or `#id`) as HAProxy does.
pub(crate) fn find_server<'a>(
    report: &'a Report,
    target: &str,
) -> Result<(&'a BackendReport, &'a ServerReport), &'static str> {
    let (be, sv) = match target.split_once('/') {
        Some((b, s)) if !b.is_empty() && !s.is_empty() => (b, s),
        _ => return Err(REQUIRE_TARGET),
    };
    let first_backend_id = report.frontends.len() + 1;
    let backend = match be.strip_prefix('#') {
        Some(id) => id
            .parse::<usize>()
            .ok()
            .and_then(|id| id.checked_sub(first_backend_id))
            .and_then(|i| report.backends.get(i)),
        None => report.backends.iter().find(|b| b.name == be),
    }
    .ok_or(NO_BACKEND)?;
    let server = match sv.strip_prefix('#') {
        Some(id) => id.parse::<usize>().ok().and_then(|id| id.checked_sub(1)).and_then(|i| backend.servers.get(i)),
        None => backend.servers.iter().find(|s| s.name == sv),
    }
    .ok_or(NO_SERVER)?;
    Ok((backend, server))
}

/// The commands, as `help` lists them: keywords, usage, description.
const USAGE: &[(&[&str], &str, &str)] = &[
    (
        &["add", "server"],
        "add server <bk>/<srv> <addr>:<port> ...",
        "create a new server (in maintenance: 'enable server' it)",
    ),
    (&["clear", "table"], "clear table <table>", "remove all entries from a table"),
    (&["del", "server"], "del server <bk>/<srv>", "remove a server in maintenance with no session"),
    (
        &["disable", "server"],
        "disable server <bk>/<srv>",
        "disable a server for maintenance (use 'set server' instead)",
    ),
    (&["echo"], "echo <text>", "print text to output"),
    (&["enable", "server"], "enable server <bk>/<srv>", "enable a disabled server (use 'set server' instead)"),
    (&["get", "weight"], "get weight <bk>/<srv>", "report a server's current weight"),
    (&["set", "server"], "set server <bk>/<srv> [opts]", "change a server's state, weight or address"),
    (&["set", "timeout"], "set timeout [cli] <delay>", "change a timeout setting"),
    (&["set", "weight"], "set weight <bk>/<srv> (DEPRECATED)", "change a server's weight (use 'set server' instead)"),
    (&["show", "backend"], "show backend", "list backends in the current running config"),
    (&["show", "info"], "show info", "report information about the running process"),
    (
        &["show", "servers", "state"],
        "show servers state [<backend>]",
        "dump volatile server information (all or for a single backend)",
    ),
    (&["show", "stat"], "show stat [px type sid] [up|no-maint]", "report counters for each proxy and server"),
    (&["show", "table"], "show table [<table>]", "report table usage stats or dump this table's contents"),
    (&["show", "version"], "show version", "show version of the current process"),
    (&["shutdown", "sessions", "server"], "shutdown sessions server <bk>/<srv>", "kill sessions on a server"),
];

/// Commands listed last, whatever matched (as HAProxy does).
const ALWAYS: &[(&str, &str, &str)] = &[
    ("help", "help [<command>]", "list matching or all commands"),
    ("prompt", "prompt [n|i|p|timed]", "toggle interactive mode with prompt"),
    ("quit", "quit", "disconnect"),
];

/// HAProxy's usage message: for `help` (`is_help`), or for an unknown command,
/// listing the commands that start with the words that matched.
/// Only the commands `level` may run are listed.
fn usage(words: &[String], is_help: bool, level: CliLevel) -> String {
    let matched = |kw: &[&str]| kw.iter().zip(words).take_while(|(k, w)| **k == w.as_str()).count();
    let allowed = |kw: &[&str]| {
        let kw: Vec<String> = kw.iter().map(|k| k.to_string()).collect();
        parse_command(&kw).level() <= level
    };
    let usable = || USAGE.iter().filter(|(kw, ..)| allowed(kw));
    let length =
        usable().map(|(kw, ..)| matched(kw)).chain(ALWAYS.iter().map(|(kw, ..)| matched(&[kw]))).max().unwrap_or(0);
    let mut out = if is_help {
        "The following commands are valid at this level:\n".to_string()
    } else {
        let first = words.first().map_or("", String::as_str);
        format!("Unknown command: '{first}', but maybe one of the following ones is a better match:\n")
    };
    let listed = usable().filter(|(kw, ..)| matched(kw) == length).map(|(_, u, d)| (u, d));
    for (usage, desc) in listed.chain(ALWAYS.iter().map(|(_, u, d)| (u, d))) {
        let _ = writeln!(out, "  {usage:<40}: {desc}");
    }
    out
}

// ---------------------------------------------------------------------------
// Formats.

/// `show info`: "Key: value" lines with HAProxy's field names and order, for
/// the fields Tollgate has (HAProxy leaves out empty fields too).
pub fn show_info(r: &Report) -> String {
    let i = &r.info;
    let up = i.uptime_sec;
    let uptime = format!("{}d {}h{:02}m{:02}s", up / 86_400, (up % 86_400) / 3_600, (up % 3_600) / 60, up % 60);
    let bytes_out: u64 = r.frontends.iter().map(|f| f.bytes_out).sum();
    let fields: [(&str, String); 21] = [
        ("Name", i.name.to_string()),
        ("Version", i.version.to_string()),
        ("Nbthread", i.workers.to_string()),
        ("Nbproc", "1".into()),
        ("Process_num", "1".into()),
        ("Pid", i.pid.to_string()),
        ("Uptime", uptime),
        ("Uptime_sec", up.to_string()),
        ("Maxconn", i.max_connections.to_string()),
        ("Hard_maxconn", i.max_connections.to_string()),
        ("CurrConns", i.current_connections.to_string()),
        ("CumConns", i.total_connections.to_string()),
        ("CumReq", i.total_requests.to_string()),
        ("Maxpipes", i.pipes_max.to_string()),
        ("PipesUsed", i.pipes_used.to_string()),
        ("PipesFree", i.pipes_free.to_string()),
        ("ConnRate", i.connection_rate.to_string()),
        ("SessRate", i.connection_rate.to_string()),
        ("TotalBytesOut", bytes_out.to_string()),
        ("TotalSplicedBytesOut", i.spliced_bytes.to_string()),
        ("Start_time_sec", i.start_time.to_string()),
    ];
    let mut out = String::new();
    for (name, value) in fields {
        let _ = writeln!(out, "{name}: {}", one_line(&value));
    }
    out
}

/// `show backend`.
pub fn show_backend(r: &Report) -> String {
    let mut out = "# name\n".to_string();
    for b in &r.backends {
        let _ = writeln!(out, "{}", one_line(&b.name));
    }
    out
}

/// A `show stat` row: one value per column, empty unless set.
struct Row(Vec<String>);

impl Row {
    fn new() -> Self {
        Row(vec![String::new(); STAT_COLUMNS.len()])
    }

    fn set(&mut self, column: &str, value: impl std::fmt::Display) {
        match STAT_COLUMNS.iter().position(|c| *c == column) {
            Some(i) => self.0[i] = csv_field(&value.to_string()),
            None => debug_assert!(false, "no column {column}"),
        }
    }

    fn set_responses(&mut self, r: &Responses) {
        self.set("hrsp_1xx", r.r1xx);
        self.set("hrsp_2xx", r.r2xx);
        self.set("hrsp_3xx", r.r3xx);
        self.set("hrsp_4xx", r.r4xx);
        self.set("hrsp_5xx", r.r5xx);
        self.set("hrsp_other", r.other);
    }

    /// Every field followed by a comma, as HAProxy writes them.
    fn write(&self, out: &mut String) {
        for f in &self.0 {
            out.push_str(f);
            out.push(',');
        }
        out.push('\n');
    }
}

/// HAProxy's CSV quoting: double quotes only around text with a comma or a
/// quote, quotes doubled. Line breaks become spaces (an output never holds an
/// empty line).
fn csv_field(s: &str) -> String {
    let s = one_line(s);
    if s.contains([',', '"']) { format!("\"{}\"", s.replace('"', "\"\"")) } else { s }
}

fn one_line(s: &str) -> String {
    s.replace(['\n', '\r'], " ")
}

/// Whether a server takes new traffic (HAProxy counts these in `act`/`bck`).
fn serving(s: &ServerReport) -> bool {
    s.status == "UP" || s.status == "no check"
}

/// `show stat`: the CSV header and one row per frontend, server and backend,
/// in HAProxy's order (frontends, then each backend's servers and its BACKEND
/// row). Proxies are numbered as HAProxy does: frontends from 1 in config
/// order, then the backends; servers from 1 within their backend.
pub fn show_stat(v: &View, filter: &StatFilter) -> String {
    let r = &v.report;
    let nfe = r.frontends.len();
    let selected = |iid: usize, name: &str| match &filter.proxy {
        ProxySel::All => true,
        ProxySel::Id(id) => *id as usize == iid,
        ProxySel::Name(n) => n == name,
    };
    if let ProxySel::Name(n) = &filter.proxy
        && !r.frontends.iter().any(|f| &f.name == n)
        && !r.backends.iter().any(|b| &b.name == n)
    {
        return NO_PROXY.into();
    }
    let mut out = format!("# {STAT_HEADER},\n");
    for (i, f) in r.frontends.iter().enumerate() {
        if filter.types & 1 != 0 && selected(i + 1, &f.name) {
            frontend_row(f, i + 1).write(&mut out);
        }
    }
    for (j, b) in r.backends.iter().enumerate() {
        let iid = nfe + j + 1;
        if !selected(iid, &b.name) {
            continue;
        }
        let conf = v.backends.get(&b.name).cloned().unwrap_or_default();
        if filter.types & 4 != 0 {
            for (k, s) in b.servers.iter().enumerate() {
                let hidden = (filter.up && (s.status == "DOWN" || s.status == "MAINT"))
                    || (filter.no_maint && s.status == "MAINT")
                    || filter.sid.is_some_and(|sid| sid as usize != k + 1);
                if !hidden {
                    server_row(&b.name, s, iid, k + 1, &conf).write(&mut out);
                }
            }
        }
        if filter.types & 2 != 0 {
            backend_row(b, iid, &conf).write(&mut out);
        }
    }
    out
}

/// What every `show stat` row has.
struct Common<'a> {
    pxname: &'a str,
    svname: &'a str,
    iid: usize,
    sid: usize,
    /// 0 frontend, 1 backend, 2 server.
    kind: u8,
    status: &'a str,
    /// Current, most and total sessions.
    sessions: (u64, u64, u64),
    /// Bytes in and out.
    bytes: (u64, u64),
    /// Sessions per second, and the most.
    rate: (u64, u64),
    responses: &'a Responses,
}

impl Row {
    fn with(c: Common) -> Row {
        let mut row = Row::new();
        row.set("pxname", c.pxname);
        row.set("svname", c.svname);
        row.set("scur", c.sessions.0);
        row.set("smax", c.sessions.1);
        row.set("stot", c.sessions.2);
        row.set("bin", c.bytes.0);
        row.set("bout", c.bytes.1);
        row.set("status", c.status);
        row.set("pid", 1);
        row.set("iid", c.iid);
        row.set("sid", c.sid);
        row.set("type", c.kind);
        row.set("rate", c.rate.0);
        row.set("rate_max", c.rate.1);
        row.set_responses(c.responses);
        row.set("mode", "http");
        row
    }
}

fn frontend_row(f: &FrontendReport, iid: usize) -> Row {
    let mut row = Row::with(Common {
        pxname: &f.name,
        svname: "FRONTEND",
        iid,
        sid: 0,
        kind: 0,
        status: "OPEN",
        sessions: (f.sessions_cur, f.sessions_max, f.sessions_total),
        bytes: (f.bytes_in, f.bytes_out),
        rate: (f.session_rate, f.session_rate_max),
        responses: &f.responses,
    });
    row.set("slim", f.sessions_limit);
    row.set("dreq", f.denied);
    row.set("dcon", f.denied_connections);
    row.set("ereq", f.request_errors);
    row.set("rate_lim", 0);
    row.set("req_rate", f.request_rate);
    row.set("req_rate_max", f.request_rate_max);
    row.set("req_tot", f.requests_total);
    row.set("conn_rate", f.session_rate);
    row.set("conn_rate_max", f.session_rate_max);
    row.set("conn_tot", f.sessions_total);
    row
}

fn server_row(backend: &str, s: &ServerReport, iid: usize, sid: usize, conf: &BackendConf) -> Row {
    let mut row = Row::with(Common {
        pxname: backend,
        svname: &s.name,
        iid,
        sid,
        kind: 2,
        status: s.status,
        sessions: (s.sessions_cur, s.sessions_max, s.sessions_total),
        bytes: (s.bytes_in, s.bytes_out),
        rate: (s.session_rate, s.session_rate_max),
        responses: &s.responses,
    });
    row.set("qcur", 0);
    row.set("qmax", 0);
    if let Some(limit) = s.sessions_limit {
        row.set("slim", limit);
    }
    row.set("econ", s.connect_errors);
    row.set("weight", s.weight);
    row.set("act", u8::from(!s.backup));
    row.set("bck", u8::from(s.backup));
    if s.check.active || s.check.passive {
        row.set("chkfail", s.check.failed_checks);
        row.set("chkdown", s.check.downs);
    }
    row.set("lastchg", s.last_change_sec);
    row.set("lbtot", s.sessions_total);
    if let (Some(check), Some(cc)) = (CheckView::of(&s.check, conf.check), conf.check) {
        row.set("check_status", check.code);
        if let Some(code) = check.http_code {
            row.set("check_code", code);
        }
        if let Some(ms) = s.check.last_duration_ms {
            row.set("check_duration", ms);
        }
        if let Some(text) = &s.check.last {
            row.set("last_chk", text);
        }
        row.set("check_desc", check.desc);
        row.set("check_rise", cc.rise);
        row.set("check_fall", cc.fall);
        row.set("check_health", check_health(s, cc));
    }
    row.set("addr", &s.addr);
    if conf.cookie.is_some() {
        row.set("cookie", &s.cookie);
    }
    row.set("connect", s.connections_opened);
    row.set("uweight", s.weight);
    row
}

fn backend_row(b: &BackendReport, iid: usize, conf: &BackendConf) -> Row {
    let active = b.servers.iter().filter(|s| serving(s) && !s.backup).count();
    let backup = b.servers.iter().filter(|s| serving(s) && s.backup).count();
    // HAProxy's total weight: the active servers', or the backups' when no
    // active server is left.
    let weight: u64 =
        b.servers.iter().filter(|s| serving(s) && s.backup == (active == 0)).map(|s| u64::from(s.weight)).sum();
    let mut row = Row::with(Common {
        pxname: &b.name,
        svname: "BACKEND",
        iid,
        sid: 0,
        kind: 1,
        status: b.status,
        sessions: (b.sessions_cur, b.sessions_max, b.sessions_total),
        bytes: (b.bytes_in, b.bytes_out),
        rate: (b.session_rate, b.session_rate_max),
        responses: &b.responses,
    });
    row.set("qcur", b.queue_cur);
    row.set("qmax", b.queue_max);
    row.set("econ", b.connect_errors);
    row.set("weight", weight);
    row.set("act", active);
    row.set("bck", backup);
    row.set("lbtot", b.sessions_total);
    row.set("req_tot", b.sessions_total);
    if let Some(cookie) = &conf.cookie {
        row.set("cookie", cookie);
    }
    row.set("algo", &b.balance);
    row.set("connect", b.servers.iter().map(|s| s.connections_opened).sum::<u64>());
    row.set("uweight", weight);
    row
}

/// The last active check in HAProxy's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CheckView {
    /// `check_status`: L4OK, L7STS, ...
    code: &'static str,
    /// `check_desc`.
    desc: &'static str,
    /// The number `show servers state` prints (HAProxy's HCHK_STATUS_*).
    num: u8,
    /// `check_code`: the HTTP status, for layer 7 results.
    http_code: Option<u16>,
}

impl CheckView {
    /// `None` when the server has no active check.
    fn of(c: &CheckReport, conf: Option<CheckConf>) -> Option<CheckView> {
        let conf = conf.filter(|_| c.active)?;
        let view = |code, desc, num, http_code| Some(CheckView { code, desc, num, http_code });
        let Some(text) = &c.last else {
            return view("INI", "Initializing", 1, None);
        };
        let ok = c.last_ok.unwrap_or(false);
        // check.rs words each result; "HTTP status N" carries the status.
        let http_code = text
            .strip_prefix("HTTP status ")
            .and_then(|rest| rest.split(|ch: char| !ch.is_ascii_digit()).next())
            .and_then(|digits| digits.parse::<u16>().ok());
        if ok {
            return match http_code {
                Some(code) => view("L7OK", "Layer7 check passed", 15, Some(code)),
                None => view("L4OK", "Layer4 check passed", 6, None),
            };
        }
        if let Some(code) = http_code {
            return view("L7STS", "Layer7 wrong status", 17, Some(code));
        }
        let layer4_error = [
            "connection refused",
            "connection reset",
            "connection aborted",
            "host unreachable",
            "network unreachable",
            "address not available",
        ];
        if text == "connect timed out" || (text.starts_with("timeout after") && !conf.layer7) {
            view("L4TOUT", "Layer4 timeout", 7, None)
        } else if text.starts_with("timeout after") {
            view("L7TOUT", "Layer7 timeout", 12, None)
        } else if layer4_error.contains(&text.as_str()) || !conf.layer7 {
            view("L4CON", "Layer4 connection problem", 8, None)
        } else {
            view("L7RSP", "Layer7 invalid response", 13, None)
        }
    }
}

/// HAProxy's check health counter: `rise + fall - 1` when fully UP, down by
/// one per failed check; 0 when DOWN.
fn check_health(s: &ServerReport, c: CheckConf) -> u32 {
    if s.health == "down" {
        return 0;
    }
    let top = c.rise + c.fall.max(1) - 1;
    top - s.check.consecutive_failures.min(c.fall.max(1) - 1)
}

/// `show servers state [<backend>]`: format version 1, HAProxy's numbers
/// (`srv_op_state` 0 stopped / 2 running; `srv_admin_state` bit flags 0x01
/// forced maintenance, 0x08 forced drain).
pub fn show_servers_state(v: &View, backend: Option<&str>) -> String {
    let r = &v.report;
    if let Some(name) = backend
        && !r.backends.iter().any(|b| b.name == name)
    {
        return CANT_FIND_BACKEND.into();
    }
    let mut out = SERVERS_STATE_HEADER.to_string();
    for (j, b) in r.backends.iter().enumerate() {
        if backend.is_some_and(|name| name != b.name) {
            continue;
        }
        let conf = v.backends.get(&b.name).cloned().unwrap_or_default();
        for (k, s) in b.servers.iter().enumerate() {
            // A name without an address yet: HAProxy's 0.0.0.0, the name's port.
            let (fqdn, fqdn_port) = match s.fqdn.as_deref().and_then(|f| f.rsplit_once(':')) {
                Some((host, port)) => (one_line(host), port.parse().unwrap_or(0)),
                None => ("-".into(), 0),
            };
            let (ip, port) = match s.addr.parse::<std::net::SocketAddr>() {
                Ok(a) => (a.ip().to_string(), a.port()),
                Err(_) => ("0.0.0.0".into(), fqdn_port),
            };
            let op_state = if s.state == "maint" || s.health == "down" { 0 } else { 2 };
            let admin_state = match s.state {
                "maint" => 0x01,
                "drain" => 0x08,
                _ => 0,
            };
            let (check_status, check_result, check_health, check_state) =
                match (CheckView::of(&s.check, conf.check), conf.check) {
                    (Some(view), Some(cc)) => {
                        let result = match s.check.last_ok {
                            Some(true) => 3,
                            Some(false) => 2,
                            None => 0,
                        };
                        // CHK_ST_CONFIGURED | CHK_ST_ENABLED.
                        (view.num, result, check_health(s, cc), 0x06)
                    }
                    _ => (1, 0, 0, 0),
                };
            let _ = writeln!(
                out,
                "{be_id} {be} {srv_id} {srv} {ip} {op_state} {admin_state} {uweight} {iweight} {since} \
                 {check_status} {check_result} {check_health} {check_state} 0 0 0 {fqdn} {port} - 0 0 - - 0",
                be_id = r.frontends.len() + j + 1,
                be = one_line(&b.name),
                srv_id = k + 1,
                srv = one_line(&s.name),
                uweight = s.weight,
                iweight = s.configured_weight,
                since = s.last_change_sec,
            );
        }
    }
    out
}

#[cfg(test)]
#[path = "cli_tests.rs"]
mod tests;
