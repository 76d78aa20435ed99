//! Unit tests of the command socket's language (cli.rs).

use super::*;
use std::cell::RefCell;
use std::net::SocketAddr;
use tollgate_proxy::runtime::report::Info;

/// HAProxy's header, from the management guide (section 9.1), through `uweight`.
const HAPROXY_HEADER: &str = "# pxname,svname,qcur,qmax,scur,smax,slim,stot,bin,bout,dreq,dresp,ereq,econ,\
eresp,wretr,wredis,status,weight,act,bck,chkfail,chkdown,lastchg,downtime,qlimit,pid,iid,sid,throttle,lbtot,\
tracked,type,rate,rate_lim,rate_max,check_status,check_code,check_duration,hrsp_1xx,hrsp_2xx,hrsp_3xx,hrsp_4xx,\
hrsp_5xx,hrsp_other,hanafail,req_rate,req_rate_max,req_tot,cli_abrt,srv_abrt,comp_in,comp_out,comp_byp,comp_rsp,\
lastsess,last_chk,last_agt,qtime,ctime,rtime,ttime,agent_status,agent_code,agent_duration,check_desc,agent_desc,\
check_rise,check_fall,check_health,agent_rise,agent_fall,agent_health,addr,cookie,mode,algo,conn_rate,\
conn_rate_max,conn_tot,intercepted,dcon,dses,wrew,connect,reuse,cache_lookups,cache_hits,srv_icur,src_ilim,\
qtime_max,ctime_max,rtime_max,ttime_max,eint,idle_conn_cur,safe_conn_cur,used_conn_cur,need_conn_est,uweight,";

fn words(s: &str) -> Vec<String> {
    s.split(' ').map(String::from).collect()
}

fn one(line: &str) -> Command {
    let mut c = parse_line(line);
    assert_eq!(c.len(), 1, "{line}: {c:?}");
    c.remove(0)
}

fn server(name: &str, port: u16) -> ServerReport {
    ServerReport {
        name: name.into(),
        addr: format!("127.0.0.1:{port}"),
        fqdn: None,
        state: "ready",
        health: "unchecked",
        status: "no check",
        weight: 1,
        configured_weight: 1,
        backup: false,
        cookie: name.into(),
        sessions_cur: 0,
        sessions_max: 1,
        sessions_limit: None,
        sessions_total: 5,
        session_rate: 0,
        session_rate_max: 2,
        bytes_in: 100,
        bytes_out: 200,
        connect_errors: 0,
        connections_opened: 3,
        responses: Responses { r2xx: 5, ..Responses::default() },
        check: CheckReport {
            active: false,
            passive: false,
            last: None,
            last_ok: None,
            last_duration_ms: None,
            checks: 0,
            failed_checks: 0,
            downs: 0,
            consecutive_failures: 0,
        },
        last_change_sec: 42,
    }
}

fn report() -> Report {
    let servers = vec![server("s1", 8001), server("s2", 8002)];
    Report {
        info: Info {
            name: "tollgate",
            version: "0.1.0",
            pid: 4242,
            uptime_sec: 90_061,
            start_time: 1_700_000_000,
            workers: 2,
            max_connections: 10_000,
            current_connections: 1,
            total_connections: 10,
            total_requests: 12,
            connection_rate: 3,
            request_rate: 4,
            reloads: 0,
            pipes_max: 128,
            pipes_used: 3,
            pipes_free: 5,
            spliced_bytes: 1_000_000,
            config: "/etc/tollgate.toml".into(),
        },
        frontends: vec![FrontendReport {
            name: "web".into(),
            mode: "http",
            binds: vec!["127.0.0.1:80".into()],
            sessions_cur: 1,
            sessions_max: 2,
            sessions_limit: 10_000,
            sessions_total: 10,
            session_rate: 3,
            session_rate_max: 5,
            requests_total: 12,
            requests_h2_total: 0,
            requests_h3_total: 0,
            request_rate: 4,
            request_rate_max: 6,
            bytes_in: 1000,
            bytes_out: 2000,
            denied: 1,
            denied_connections: 0,
            request_errors: 2,
            duration: Default::default(),
            responses: Responses { r2xx: 10, r4xx: 2, ..Responses::default() },
        }],
        backends: vec![BackendReport {
            name: "b".into(),
            mode: "http",
            balance: "roundrobin".into(),
            status: "UP",
            servers_up: 2,
            sessions_cur: 0,
            sessions_max: 2,
            sessions_total: 10,
            session_rate: 0,
            session_rate_max: 4,
            queue_cur: 0,
            queue_max: 0,
            bytes_in: 200,
            bytes_out: 400,
            connect_errors: 0,
            response_time: Default::default(),
            connect_time: Default::default(),
            responses: Responses { r2xx: 10, ..Responses::default() },
            weight: 2,
            servers,
        }],
        caches: Vec::new(),
        acme: Vec::new(),
        etcd: None,
    }
}

/// A runtime over a report, recording changes and applying them.
struct Fake {
    report: RefCell<Report>,
    read_only: bool,
    changes: RefCell<Vec<(String, String, ServerChange)>>,
    /// `[[table]]`s; `clear table` empties one.
    tables: RefCell<Vec<CounterTableView>>,
}

impl Fake {
    fn new() -> Self {
        Fake {
            report: RefCell::new(report()),
            read_only: false,
            changes: RefCell::default(),
            tables: RefCell::new(vec![counter_table()]),
        }
    }
}

/// A `[[table]]` keyed by address with one entry.
fn counter_table() -> CounterTableView {
    let counters = ["conn_cur", "conn_cnt", "conn_rate", "http_req_cnt", "http_req_rate"];
    CounterTableView {
        name: "clients".into(),
        key: "src".into(),
        kind: "ip",
        size: 100,
        used: 1,
        period_ms: 10_000,
        expire_ms: 60_000,
        refused: 0,
        entries: vec![tollgate_proxy::runtime::control::CounterEntry {
            key: "10.0.0.9".into(),
            expire_ms: 59_000,
            counters: counters.iter().zip([2, 5, 5, 40, 12]).map(|(k, v)| (*k, v)).collect(),
        }],
    }
}

impl Runtime for Fake {
    fn view(&self) -> Result<View, ControlError> {
        Ok(View { report: self.report.borrow().clone(), backends: HashMap::new() })
    }
    fn read_only(&self) -> bool {
        self.read_only
    }
    fn set_server(&self, backend: &str, server: &str, change: ServerChange) -> Result<(), ControlError> {
        self.changes.borrow_mut().push((backend.into(), server.into(), change));
        let mut r = self.report.borrow_mut();
        let s = r.backends.iter_mut().flat_map(|b| b.servers.iter_mut()).find(|s| s.name == server).unwrap();
        if let Some(w) = change.weight {
            s.weight = w;
        }
        if let Some(st) = change.state {
            s.state = st.as_str();
        }
        Ok(())
    }
    fn servers(&self) -> &dyn ServerAdmin {
        self
    }
    fn counter_tables(&self, limit: usize) -> Result<Vec<CounterTableView>, ControlError> {
        let mut t = self.tables.borrow().clone();
        t.iter_mut().for_each(|t| t.entries.truncate(limit));
        Ok(t)
    }
    fn clear_table(&self, name: &str) -> Result<usize, ControlError> {
        let mut tables = self.tables.borrow_mut();
        let t = tables.iter_mut().find(|t| t.name == name).ok_or_else(|| ControlError::NoTable(name.into()))?;
        let n = t.entries.len();
        t.entries.clear();
        t.used = 0;
        Ok(n)
    }
}

impl ServerAdmin for Fake {
    fn add_server(&self, backend: &str, new: NewServer) -> Result<(), ControlError> {
        let mut r = self.report.borrow_mut();
        let b = r.backends.iter_mut().find(|b| b.name == backend).unwrap();
        if b.servers.iter().any(|s| s.name == new.name) {
            return Err(ControlError::ServerExists { backend: backend.into(), server: new.name });
        }
        let mut s = server(&new.name, new.addr.port());
        s.state = if new.disabled { "maint" } else { "ready" };
        b.servers.push(s);
        Ok(())
    }
    fn del_server(&self, backend: &str, server: &str) -> Result<(), ControlError> {
        let mut r = self.report.borrow_mut();
        let b = r.backends.iter_mut().find(|b| b.name == backend).unwrap();
        let i = b.servers.iter().position(|s| s.name == server).unwrap();
        if b.servers[i].state != "maint" {
            return Err(ControlError::NotInMaintenance);
        }
        b.servers.remove(i);
        Ok(())
    }
    fn set_server_addr(&self, _: &str, server: &str, addr: SocketAddr) -> Result<SocketAddr, ControlError> {
        let mut r = self.report.borrow_mut();
        let s = r.backends.iter_mut().flat_map(|b| b.servers.iter_mut()).find(|s| s.name == server).unwrap();
        let was = s.addr.parse().unwrap();
        s.addr = addr.to_string();
        Ok(was)
    }
    fn shutdown_sessions(&self, backend: &str, server: &str) -> Result<(), ControlError> {
        self.changes.borrow_mut().push((backend.into(), format!("shutdown {server}"), ServerChange::default()));
        Ok(())
    }
}

fn run(session: &mut Session, rt: &Fake, line: &str) -> Output {
    session.run_line(line, rt)
}

/// Parses HAProxy's CSV as a consumer does: header names, then rows keyed by them.
fn parse_csv(text: &str) -> (Vec<String>, Vec<HashMap<String, String>>) {
    let mut lines = text.lines();
    let header = lines.next().unwrap().strip_prefix("# ").unwrap();
    let names: Vec<String> = header.split(',').map(String::from).collect();
    let rows = lines
        .filter(|l| !l.is_empty())
        .map(|l| {
            let fields: Vec<&str> = l.split(',').collect();
            assert_eq!(fields.len(), names.len(), "row {l}");
            names.iter().cloned().zip(fields.iter().map(|f| f.to_string())).collect()
        })
        .collect();
    (names, rows)
}

#[test]
fn parses_every_command() {
    let target = |op| Command::SetServer { target: "b/s1".into(), op };
    let cases = [
        ("", Command::Empty),
        ("help", Command::Help(vec![])),
        ("help show", Command::Help(vec!["show".into()])),
        ("prompt", Command::Prompt(PromptArg::Toggle)),
        ("prompt i", Command::Prompt(PromptArg::Interactive)),
        ("prompt n", Command::Prompt(PromptArg::NonInteractive)),
        ("prompt p", Command::Prompt(PromptArg::Prompt)),
        ("prompt timed", Command::Prompt(PromptArg::Timed)),
        ("quit", Command::Quit),
        ("echo hello  world", Command::Echo("hello world".into())),
        ("show version", Command::ShowVersion),
        ("show info", Command::ShowInfo),
        ("show stat", Command::ShowStat(StatFilter::default())),
        ("show servers state", Command::ShowServersState(None)),
        ("show servers state b", Command::ShowServersState(Some("b".into()))),
        ("show backend", Command::ShowBackend),
        ("set server b/s1 state ready", target(ServerOp::State(Ok(AdminState::Ready)))),
        ("set server b/s1 state drain", target(ServerOp::State(Ok(AdminState::Drain)))),
        ("set server b/s1 state maint", target(ServerOp::State(Ok(AdminState::Maint)))),
        ("set server b/s1 state up", target(ServerOp::State(Err(BAD_STATE.into())))),
        ("set server b/s1 weight 7", target(ServerOp::Weight(Ok(Weight::Absolute(7))))),
        ("set server b/s1 weight 50%", target(ServerOp::Weight(Ok(Weight::Percent(50))))),
        ("set weight b/s1 3", target(ServerOp::Weight(Ok(Weight::Absolute(3))))),
        ("disable server b/s1", target(ServerOp::State(Ok(AdminState::Maint)))),
        ("enable server b/s1", target(ServerOp::State(Ok(AdminState::Ready)))),
        ("set server b/s1 frob", target(ServerOp::Invalid(SET_SERVER_USAGE.into()))),
        ("get weight b/s1", Command::GetWeight("b/s1".into())),
        ("set timeout cli 30", Command::SetTimeoutCli(Duration::from_secs(30))),
        ("set timeout cli 1d", Command::SetTimeoutCli(Duration::from_secs(86_400))),
        ("set timeout client 3", Command::Error("'set timeout' only supports 'cli'.\n".into())),
        ("show frobs", Command::Unknown(words("show frobs"))),
        ("SHOW INFO", Command::Unknown(words("SHOW INFO"))),
    ];
    for (line, want) in cases {
        assert_eq!(one(line), want, "{line:?}");
    }
    assert!(
        matches!(one("set server b/s1 health up"), Command::SetServer { op: ServerOp::Invalid(m), .. } if m.contains("not supported"))
    );
    assert!(matches!(one("show stat typed"), Command::Error(m) if m.contains("CSV only")));
    assert!(matches!(one("show info json"), Command::Error(m) if m.contains("default format")));
}

#[test]
fn semicolons_chain_commands_and_backslashes_escape() {
    assert_eq!(parse_line("show info;show stat"), vec![Command::ShowInfo, Command::ShowStat(StatFilter::default())]);
    assert_eq!(parse_line("prompt; ;quit"), vec![Command::Prompt(PromptArg::Toggle), Command::Empty, Command::Quit]);
    assert_eq!(parse_line(" \t show \t backend "), vec![Command::ShowBackend]);
    assert_eq!(parse_line(r"echo a\;b"), vec![Command::Echo("a;b".into())]);
    assert_eq!(parse_line(r"echo a\ \ b c\\d"), vec![Command::Echo(r"a  b c\d".into())]);
    assert_eq!(parse_line(r"echo x\"), vec![Command::Echo("x".into())]);
}

#[test]
fn weights_read_as_haproxy_does() {
    assert_eq!(parse_weight("0"), Ok(Weight::Absolute(0)));
    assert_eq!(parse_weight("256"), Ok(Weight::Absolute(256)));
    assert_eq!(parse_weight("+3"), Ok(Weight::Absolute(3)));
    assert_eq!(parse_weight("150%"), Ok(Weight::Percent(150)));
    assert_eq!(parse_weight("99999999999999999999%"), Ok(Weight::Percent(25_600)));
    let err = |s: &str| parse_weight(s).unwrap_err();
    assert_eq!(err(""), "Require <weight> or <weight%>.\n");
    assert_eq!(err("x"), "Empty weight string empty or preceded by garbage\n");
    assert_eq!(err("-5%"), "Relative weight must be positive.\n");
    assert_eq!(err("257"), "Absolute weight can only be between 0 and 256 inclusive.\n");
    assert_eq!(err("-1"), "Absolute weight can only be between 0 and 256 inclusive.\n");
    assert_eq!(err("5x"), "Trailing garbage in weight string\n");
    assert_eq!(err("50%%"), "Trailing garbage in weight string\n");
    // Percentages of the configured weight, capped at 256.
    assert_eq!(Weight::Percent(50).resolve(10), 5);
    assert_eq!(Weight::Percent(200).resolve(3), 6);
    assert_eq!(Weight::Percent(25_600).resolve(100), 256);
    assert_eq!(Weight::Percent(0).resolve(100), 0);
    assert_eq!(Weight::Absolute(9).resolve(100), 9);
}

#[test]
fn timeouts_read_as_haproxy_does() {
    let ok = |s: &str| parse_timeout(s).unwrap().as_secs();
    assert_eq!(ok("10"), 10);
    assert_eq!(ok("30s"), 30);
    assert_eq!(ok("2m"), 120);
    assert_eq!(ok("1h"), 3600);
    assert_eq!(ok("1d"), 86_400);
    assert_eq!(ok("1500ms"), 2, "rounded up");
    assert_eq!(ok("1us"), 1);
    assert_eq!(ok("365d"), MAX_TIMEOUT.as_secs());
    assert_eq!(parse_timeout(""), Err("Expects an integer value.\n".into()));
    for bad in ["0", "0s", "abc", "5x", "5 s", "10dd", "99999999999999999999999"] {
        assert_eq!(parse_timeout(bad), Err("Invalid timeout value.\n".into()), "{bad}");
    }
}

#[test]
fn show_stat_filters_parse_as_haproxy() {
    let f = |line| match one(line) {
        Command::ShowStat(f) => f,
        other => panic!("{other:?}"),
    };
    assert_eq!(f("show stat -1 4 -1"), StatFilter { types: 4, ..StatFilter::default() });
    assert_eq!(
        f("show stat b 2 -1 up"),
        StatFilter { proxy: ProxySel::Name("b".into()), types: 2, up: true, ..StatFilter::default() }
    );
    assert_eq!(f("show stat 2 -1 1"), StatFilter { proxy: ProxySel::Id(2), sid: Some(1), ..StatFilter::default() });
    assert_eq!(f("show stat no-maint"), StatFilter { no_maint: true, ..StatFilter::default() });
}

#[test]
fn csv_header_is_haproxys_column_order() {
    let out = show_stat(&View { report: report(), backends: HashMap::new() }, &StatFilter::default());
    assert_eq!(out.lines().next().unwrap(), HAPROXY_HEADER);
    // A parser that splits on commas sees as many fields in every row as in
    // the header (each line ends with a comma, as HAProxy's do).
    let (names, rows) = parse_csv(&out);
    assert_eq!(names.len(), STAT_COLUMNS.len() + 1);
    assert_eq!(rows.len(), 4, "FRONTEND, s1, s2, BACKEND");
    assert!(out.ends_with(",\n"), "the empty line comes from the session");
}

#[test]
fn csv_rows_carry_the_counters_with_haproxys_types_and_statuses() {
    let mut r = report();
    r.backends[0].servers[1].status = "DRAIN";
    r.backends[0].servers[1].state = "drain";
    r.backends[0].servers[1].backup = true;
    r.backends[0].servers[1].check.last = Some("HTTP status 503, body lacks \"ok\"".into());
    let (_, rows) = parse_csv(&show_stat(&View { report: r, backends: HashMap::new() }, &StatFilter::default()));
    let fe = &rows[0];
    assert_eq!((fe["pxname"].as_str(), fe["svname"].as_str(), fe["type"].as_str()), ("web", "FRONTEND", "0"));
    assert_eq!(fe["status"], "OPEN");
    assert_eq!((fe["stot"].as_str(), fe["req_tot"].as_str(), fe["hrsp_2xx"].as_str()), ("10", "12", "10"));
    assert_eq!((fe["dreq"].as_str(), fe["ereq"].as_str(), fe["slim"].as_str()), ("1", "2", "10000"));
    assert_eq!((fe["iid"].as_str(), fe["sid"].as_str(), fe["pid"].as_str()), ("1", "0", "1"));
    assert_eq!(fe["qcur"], "", "frontends have no queue: empty, as HAProxy");
    let s1 = &rows[1];
    assert_eq!((s1["pxname"].as_str(), s1["svname"].as_str(), s1["type"].as_str()), ("b", "s1", "2"));
    assert_eq!((s1["status"].as_str(), s1["weight"].as_str(), s1["stot"].as_str()), ("no check", "1", "5"));
    assert_eq!((s1["act"].as_str(), s1["bck"].as_str(), s1["sid"].as_str()), ("1", "0", "1"));
    assert_eq!((s1["iid"].as_str(), s1["addr"].as_str(), s1["lastchg"].as_str()), ("2", "127.0.0.1:8001", "42"));
    assert_eq!((s1["check_status"].as_str(), s1["chkfail"].as_str()), ("", ""), "no check: empty");
    assert_eq!(s1["connect"], "3");
    let s2 = &rows[2];
    assert_eq!((s2["status"].as_str(), s2["act"].as_str(), s2["bck"].as_str()), ("DRAIN", "0", "1"));
    let be = &rows[3];
    assert_eq!((be["svname"].as_str(), be["type"].as_str(), be["status"].as_str()), ("BACKEND", "1", "UP"));
    assert_eq!((be["act"].as_str(), be["bck"].as_str(), be["weight"].as_str()), ("1", "0", "1"));
    assert_eq!((be["stot"].as_str(), be["algo"].as_str(), be["sid"].as_str()), ("10", "roundrobin", "0"));
}

#[test]
fn csv_quotes_text_with_commas_and_quotes() {
    assert_eq!(csv_field("plain"), "plain");
    assert_eq!(csv_field("a,b"), "\"a,b\"");
    assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
    assert_eq!(csv_field("two\nlines"), "two lines");
}

#[test]
fn show_stat_reports_checks_in_haproxys_terms() {
    let mut r = report();
    let check = |text: &str, ok: bool| CheckReport {
        active: true,
        passive: false,
        last: Some(text.into()),
        last_ok: Some(ok),
        last_duration_ms: Some(3),
        checks: 9,
        failed_checks: 1,
        downs: 1,
        consecutive_failures: 0,
    };
    r.backends[0].servers[0].check = check("HTTP status 200", true);
    r.backends[0].servers[0].status = "UP";
    r.backends[0].servers[0].health = "up";
    r.backends[0].servers[1].check = check("connection refused", false);
    r.backends[0].servers[1].status = "DOWN";
    r.backends[0].servers[1].health = "down";
    let conf = BackendConf {
        check: Some(CheckConf { layer7: true, rise: 2, fall: 3 }),
        cookie: Some("SRV".into()),
        stick: None,
    };
    let v = View { report: r, backends: HashMap::from([("b".to_string(), conf)]) };
    let (_, rows) = parse_csv(&show_stat(&v, &StatFilter::default()));
    let (s1, s2, be) = (&rows[1], &rows[2], &rows[3]);
    assert_eq!((s1["check_status"].as_str(), s1["check_code"].as_str()), ("L7OK", "200"));
    assert_eq!((s1["check_desc"].as_str(), s1["check_duration"].as_str()), ("Layer7 check passed", "3"));
    assert_eq!((s1["check_rise"].as_str(), s1["check_fall"].as_str(), s1["check_health"].as_str()), ("2", "3", "4"));
    assert_eq!((s1["chkfail"].as_str(), s1["chkdown"].as_str()), ("1", "1"));
    assert_eq!((s1["cookie"].as_str(), be["cookie"].as_str()), ("s1", "SRV"));
    assert_eq!((s2["check_status"].as_str(), s2["check_health"].as_str()), ("L4CON", "0"));
    assert_eq!(s2["last_chk"], "connection refused");
    assert_eq!((be["act"].as_str(), be["weight"].as_str()), ("1", "1"));

    let view = |text: &str, ok: bool, layer7: bool| {
        CheckView::of(&check(text, ok), Some(CheckConf { layer7, rise: 1, fall: 1 })).map(|v| (v.code, v.num))
    };
    assert_eq!(view("TCP connect ok", true, false), Some(("L4OK", 6)));
    assert_eq!(view("HTTP status 503", false, true), Some(("L7STS", 17)));
    assert_eq!(view("timeout after 2s", false, true), Some(("L7TOUT", 12)));
    assert_eq!(view("timeout after 2s", false, false), Some(("L4TOUT", 7)));
    assert_eq!(view("connect timed out", false, true), Some(("L4TOUT", 7)));
    assert_eq!(view("invalid HTTP response (bad)", false, true), Some(("L7RSP", 13)));
    assert_eq!(view("connection reset", false, true), Some(("L4CON", 8)));
    let fresh = CheckReport { last: None, last_ok: None, ..check("", true) };
    assert_eq!(CheckView::of(&fresh, Some(CheckConf { layer7: true, rise: 1, fall: 1 })).map(|v| v.code), Some("INI"));
    assert_eq!(CheckView::of(&check("x", true), None), None, "no check configured");
}

#[test]
fn show_stat_filters_rows() {
    let mut r = report();
    r.backends[0].servers[1].status = "MAINT";
    let v = View { report: r, backends: HashMap::new() };
    let names = |filter: StatFilter| -> Vec<String> {
        let (_, rows) = parse_csv(&show_stat(&v, &filter));
        rows.iter().map(|r| format!("{}/{}", r["pxname"], r["svname"])).collect()
    };
    assert_eq!(names(StatFilter { types: 4, ..StatFilter::default() }), ["b/s1", "b/s2"]);
    assert_eq!(names(StatFilter { types: 1, ..StatFilter::default() }), ["web/FRONTEND"]);
    assert_eq!(names(StatFilter { proxy: ProxySel::Id(2), ..StatFilter::default() }), ["b/s1", "b/s2", "b/BACKEND"]);
    assert_eq!(names(StatFilter { sid: Some(2), types: 4, ..StatFilter::default() }), ["b/s2"]);
    assert_eq!(names(StatFilter { up: true, types: 4, ..StatFilter::default() }), ["b/s1"]);
    assert_eq!(names(StatFilter { no_maint: true, types: 4, ..StatFilter::default() }), ["b/s1"]);
    let f = StatFilter { proxy: ProxySel::Name("nope".into()), ..StatFilter::default() };
    assert_eq!(show_stat(&v, &f), "No such proxy.\n");
}

#[test]
fn show_info_uses_haproxys_field_names() {
    let out = show_info(&report());
    let fields: Vec<(&str, &str)> = out.lines().map(|l| l.split_once(": ").unwrap()).collect();
    let get = |k: &str| fields.iter().find(|(n, _)| *n == k).map(|(_, v)| *v).unwrap();
    assert_eq!(fields[0], ("Name", "tollgate"));
    assert_eq!(fields[1], ("Version", "0.1.0"));
    assert_eq!(get("Uptime"), "1d 1h01m01s");
    assert_eq!(get("Uptime_sec"), "90061");
    assert_eq!((get("Pid"), get("Nbthread"), get("Maxconn")), ("4242", "2", "10000"));
    assert_eq!((get("CurrConns"), get("CumConns"), get("CumReq"), get("ConnRate")), ("1", "10", "12", "3"));
    assert_eq!((get("Maxpipes"), get("PipesUsed"), get("PipesFree")), ("128", "3", "5"));
    assert_eq!(get("TotalSplicedBytesOut"), "1000000");
    // HAProxy's order: Pid before Uptime, CumReq after CumConns.
    let pos = |k: &str| fields.iter().position(|(n, _)| *n == k).unwrap();
    assert!(pos("Pid") < pos("Uptime") && pos("Maxconn") < pos("CurrConns") && pos("CumConns") < pos("CumReq"));
    assert!(!out.contains("\n\n"), "no empty line inside an output");
}

#[test]
fn show_servers_state_uses_haproxys_numbers() {
    let mut r = report();
    r.backends[0].servers[0].state = "drain";
    r.backends[0].servers[1].state = "maint";
    r.backends[0].servers[1].weight = 0;
    let v = View { report: r, backends: HashMap::new() };
    let out = show_servers_state(&v, None);
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("1"));
    let header: Vec<&str> = lines.next().unwrap().strip_prefix("# ").unwrap().split(' ').collect();
    assert_eq!(header.len(), 25);
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(' ').collect()).collect();
    assert_eq!(rows.len(), 2);
    for row in &rows {
        assert_eq!(row.len(), header.len());
    }
    let field = |row: &Vec<&str>, name: &str| row[header.iter().position(|h| *h == name).unwrap()].to_string();
    assert_eq!(field(&rows[0], "be_id"), "2");
    assert_eq!(field(&rows[0], "be_name"), "b");
    assert_eq!(field(&rows[0], "srv_name"), "s1");
    assert_eq!(field(&rows[0], "srv_addr"), "127.0.0.1");
    assert_eq!(field(&rows[0], "srv_port"), "8001");
    assert_eq!(field(&rows[0], "srv_op_state"), "2");
    assert_eq!(field(&rows[0], "srv_admin_state"), "8", "forced drain");
    assert_eq!(field(&rows[1], "srv_op_state"), "0", "maintenance stops it");
    assert_eq!(field(&rows[1], "srv_admin_state"), "1", "forced maintenance");
    assert_eq!((field(&rows[1], "srv_uweight"), field(&rows[1], "srv_iweight")), ("0".into(), "1".into()));
    assert_eq!(field(&rows[1], "srv_time_since_last_change"), "42");
    assert_eq!(show_servers_state(&v, Some("b")), out);
    assert_eq!(show_servers_state(&v, Some("x")), "Can't find backend.\n");
}

#[test]
fn non_interactive_runs_one_line_and_closes() {
    let rt = Fake::new();
    let mut s = Session::default();
    let out = run(&mut s, &rt, "show backend");
    assert_eq!(out, Output { text: "# name\nb\n\n".into(), close: true });
    // Several commands: each output followed by the empty line.
    let out = run(&mut Session::default(), &rt, "echo one;echo two");
    assert_eq!(out.text, "one\n\ntwo\n\n");
    // `set server` succeeds silently: only the end-of-output mark.
    let out = run(&mut Session::default(), &rt, "set server b/s1 state drain");
    assert_eq!(out, Output { text: "\n".into(), close: true });
    assert_eq!(rt.report.borrow().backends[0].servers[0].state, "drain");
}

#[test]
fn prompt_mode_answers_line_after_line() {
    let rt = Fake::new();
    let mut s = Session::default();
    let out = run(&mut s, &rt, "prompt");
    assert_eq!(out, Output { text: "\n> ".into(), close: false });
    let out = run(&mut s, &rt, "set timeout cli 1d");
    assert_eq!(out, Output { text: "\n> ".into(), close: false });
    assert_eq!(s.timeout, Duration::from_secs(86_400));
    let out = run(&mut s, &rt, "get weight b/s1");
    assert_eq!(out.text, "1 (initial 1)\n\n> ");
    // Pipelined: empty line between, prompt after the last.
    let out = run(&mut s, &rt, "echo a;echo b");
    assert_eq!(out.text, "a\n\nb\n\n> ");
    let out = run(&mut s, &rt, "");
    assert_eq!(out.text, "\n> ");
    // `quit` closes at once, without output for what follows.
    let out = run(&mut s, &rt, "echo bye;quit;echo never");
    assert_eq!(out, Output { text: "bye\n\n".into(), close: true });
    // `prompt` again goes back to non-interactive: the line ends the session.
    let mut s = Session { mode: Mode::Prompt, ..Session::default() };
    assert_eq!(run(&mut s, &rt, "prompt"), Output { text: "\n".into(), close: true });
    let mut s = Session::default();
    assert_eq!(run(&mut s, &rt, "prompt i;echo x"), Output { text: "\nx\n\n".into(), close: false });
    let mut s = Session::default();
    let out = run(&mut s, &rt, "prompt timed");
    assert_eq!(out.text, "\n[1:01:01:01]> ");
}

#[test]
fn set_server_checks_in_haproxys_order_with_haproxys_messages() {
    let rt = Fake::new();
    let reply = |line: &str| run(&mut Session::default(), &rt, line).text;
    let cases = [
        ("set server b state drain", "Require 'backend/server'.\n\n"),
        ("set server b/ state drain", "Require 'backend/server'.\n\n"),
        ("set server", "Require 'backend/server'.\n\n"),
        ("set server x/s1 state drain", "No such backend.\n\n"),
        ("set server x/s1 state bogus", "No such backend.\n\n"),
        ("set server b/s9 state drain", "No such server.\n\n"),
        ("set server b/s1 state bogus", "'set server <srv> state' expects 'ready', 'drain' and 'maint'.\n\n"),
        ("set server b/s1 weight 300", "Absolute weight can only be between 0 and 256 inclusive.\n\n"),
        ("set server b/s1 weight", "Require <weight> or <weight%>.\n\n"),
        ("set server b/s1", &format!("{SET_SERVER_USAGE}\n")),
        ("get weight b/s9", "No such server.\n\n"),
        ("get weight", "Require 'backend/server'.\n\n"),
        ("set timeout cli", "Expects an integer value.\n\n"),
    ];
    for (line, want) in cases {
        assert_eq!(reply(line), want, "{line}");
    }
    assert!(rt.changes.borrow().is_empty(), "nothing changed by refused commands");

    assert_eq!(reply("set server b/s1 weight 4"), "\n");
    assert_eq!(reply("get weight b/s1"), "4 (initial 1)\n\n");
    rt.report.borrow_mut().backends[0].servers[1].configured_weight = 10;
    assert_eq!(reply("set weight b/s2 50%"), "\n");
    assert_eq!(reply("get weight b/s2"), "5 (initial 10)\n\n");
    // `#id` names a backend (proxy id) or a server (id in its backend).
    assert_eq!(reply("disable server #2/#2"), "\n");
    assert_eq!(reply("enable server b/#1"), "\n");
    assert_eq!(reply("get weight #1/s1"), "No such backend.\n\n", "#1 is the frontend");
    let changes = rt.changes.borrow();
    let got: Vec<(&str, Option<AdminState>, Option<u32>)> =
        changes.iter().map(|(_, s, c)| (s.as_str(), c.state, c.weight)).collect();
    assert_eq!(
        got,
        [
            ("s1", None, Some(4)),
            ("s2", None, Some(5)),
            ("s2", Some(AdminState::Maint), None),
            ("s1", Some(AdminState::Ready), None),
        ]
    );
}

#[test]
fn static_rr_only_takes_zero_or_the_configured_weight() {
    let rt = Fake::new();
    rt.report.borrow_mut().backends[0].balance = "static-rr".into();
    let reply = |line: &str| run(&mut Session::default(), &rt, line).text;
    assert_eq!(reply("set server b/s1 weight 5"), format!("{STATIC_WEIGHT}\n"));
    assert_eq!(reply("set server b/s1 weight 0%"), "\n");
    assert_eq!(reply("set server b/s1 weight 100%"), "\n");
    assert_eq!(rt.changes.borrow().len(), 2);
}

#[test]
fn read_only_refuses_changes_before_anything_else() {
    let rt = Fake { read_only: true, ..Fake::new() };
    let reply = |line: &str| run(&mut Session::default(), &rt, line).text;
    for line in
        ["set server b/s1 state drain", "set server nope/x weight 1", "disable server b/s1", "set weight b/s1 2"]
    {
        assert_eq!(reply(line), "Permission denied\n\n", "{line}");
    }
    assert!(rt.changes.borrow().is_empty());
    assert_eq!(reply("get weight b/s1"), "1 (initial 1)\n\n", "reading is allowed");
    assert!(reply("show stat").starts_with("# pxname,"));
}

#[test]
fn unknown_commands_get_the_usage_message() {
    let rt = Fake::new();
    let reply = |line: &str| run(&mut Session::default(), &rt, line);
    let out = reply("frobnicate now");
    assert!(out.close);
    assert!(
        out.text.starts_with("Unknown command: 'frobnicate', but maybe one of the following ones is a better match:\n"),
        "{}",
        out.text
    );
    assert!(out.text.contains("  show stat") && out.text.contains("  set server") && out.text.contains("  quit"));
    assert!(out.text.ends_with(": disconnect\n\n"));
    // A known first word narrows the list.
    let out = reply("show frobs").text;
    assert!(out.starts_with("Unknown command: 'show', but maybe"), "{out}");
    assert!(out.contains("  show info") && !out.contains("  set server"), "{out}");
    let out = reply("help").text;
    assert!(out.starts_with("The following commands are valid at this level:\n"));
    for (_, usage, _) in USAGE {
        assert!(out.contains(usage), "{usage}");
    }
    let out = reply("help set").text;
    assert!(out.contains("  set server") && !out.contains("  show info"), "{out}");
    // The usage lines are aligned as HAProxy's: descriptions from column 43.
    let out = reply("help").text;
    for line in out.lines().skip(1).filter(|l| !l.is_empty()) {
        assert_eq!(line.find(": "), Some(42), "{line}");
    }
    assert!(out.contains("  get weight <bk>/<srv>                   : report a server's current weight\n"));
    assert!(out.contains("  quit                                    : disconnect\n"));
    // No empty line inside an output: the end-of-output mark stays unambiguous.
    assert!(!reply("help").text.trim_end_matches('\n').contains("\n\n"));
}

#[test]
fn never_panics_on_odd_input() {
    let rt = Fake::new();
    let long = "x".repeat(MAX_LINE);
    for line in [
        "\u{0}",
        ";;;;",
        "\\",
        "set server /",
        "set server b/s1 weight -99999999999999999999999%",
        "set weight #99999999999999999999/#-1 1",
        "show stat 99999999999999999999 -99999999999 x",
        "prompt \u{1F600}",
        "get weight b/s1/extra",
        long.as_str(),
    ] {
        let out = run(&mut Session::default(), &rt, line);
        assert!(out.text.ends_with('\n') || out.text.ends_with("> "), "{line:?}");
    }
}

#[test]
fn show_backend_lists_names() {
    assert_eq!(show_backend(&report()), "# name\nb\n");
}

/// `show table`: HAProxy's summary line per stick table, and with a backend
/// named its entries; a backend without one is no table.
#[test]
fn show_table_lists_the_stick_tables_and_one_tables_entries() {
    let stick = StickView {
        size: 1000,
        entries: vec![
            ("10.0.0.1".parse().unwrap(), 1, "s1".into(), 29_500),
            ("10.0.0.2".parse().unwrap(), 2, "s2".into(), 12_000),
        ],
    };
    let conf = |stick| BackendConf { check: None, cookie: None, stick };
    let v = View {
        report: report(),
        backends: HashMap::from([
            ("web".to_string(), conf(Some(stick))),
            ("api".to_string(), conf(Some(StickView { size: 10, entries: vec![] }))),
            ("static".to_string(), conf(None)),
        ]),
    };
    let rt = Fake::new();
    assert_eq!(
        show_table(&v, None, &rt),
        "# table: api, type: ip, size:10, used:0\n# table: clients, type: ip, size:100, used:1\n\
         # table: web, type: ip, size:1000, used:2\n\n"
    );
    assert_eq!(
        show_table(&v, Some("web"), &rt),
        "# table: web, type: ip, size:1000, used:2\n\
         0x1: key=10.0.0.1 use=0 exp=29500 server_id=1 server_key=s1\n\
         0x2: key=10.0.0.2 use=0 exp=12000 server_id=2 server_key=s2\n\n"
    );
    assert_eq!(show_table(&v, Some("static"), &rt), "No such table\n");
    // A [[table]]'s entries: its counters, rates with their period.
    assert_eq!(
        show_table(&v, Some("clients"), &rt),
        "# table: clients, type: ip, size:100, used:1\n\
         0x1: key=10.0.0.9 use=2 exp=59000 conn_cur=2 conn_cnt=5 conn_rate(10000)=5 http_req_cnt=40 \
         http_req_rate(10000)=12\n\n"
    );
    assert_eq!(parse_line("show table web"), vec![Command::ShowTable(Some("web".into()))]);
    assert_eq!(parse_line("show table"), vec![Command::ShowTable(None)]);
}

/// `clear table <name>`: admin level; the table's entries go.
#[test]
fn clear_table_empties_a_counter_table() {
    let rt = Fake::new();
    assert_eq!(parse_line("clear table clients"), vec![Command::ClearTable("clients".into())]);
    assert_eq!(Command::ClearTable("x".into()).level(), CliLevel::Admin);
    let mut admin = Session::default();
    assert_eq!(run(&mut admin, &rt, "clear table clients").text, "\n");
    assert!(rt.tables.borrow()[0].entries.is_empty());
    assert_eq!(run(&mut admin, &rt, "clear table nope").text, "No such table\n\n");
    assert!(run(&mut admin, &rt, "clear table clients key 1.2.3.4").text.contains("clears a whole table"));
    let mut operator = Session { level: CliLevel::Operator, ..Session::default() };
    assert_eq!(run(&mut operator, &rt, "clear table clients").text, "Permission denied\n\n");
}

#[test]
fn add_del_addr_and_shutdown_in_haproxys_words() {
    let new = |name: &str, port| NewServer {
        name: name.into(),
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
        weight: None,
        maxconn: None,
        backup: false,
        check: false,
        disabled: true,
    };
    assert_eq!(
        one("add server b/s3 127.0.0.1:8003 weight 2 maxconn 10 backup check"),
        Command::AddServer {
            target: "b/s3".into(),
            spec: Ok(NewServer { weight: Some(2), maxconn: Some(10), backup: true, check: true, ..new("s3", 8003) })
        }
    );
    let bad = |line: &str| match one(line) {
        Command::AddServer { spec: Err(e), .. } => e,
        other => panic!("{line}: {other:?}"),
    };
    assert!(bad("add server b/s3 app.local:80").contains("is not an address and port"));
    assert!(bad("add server b/s3").contains("'add server' expects"));
    assert!(bad("add server b/s3 127.0.0.1:80 weight 300").contains("between 0 and 256"));
    assert!(bad("add server b/s3 127.0.0.1:80 slowstart 10s").contains("unknown keyword 'slowstart'"));
    assert_eq!(one("del server b/s1"), Command::DelServer("b/s1".into()));
    assert_eq!(one("shutdown sessions server b/s1"), Command::ShutdownSessions("b/s1".into()));
    assert_eq!(
        one("set server b/s1 addr 10.0.0.1 port 81"),
        Command::SetServer { target: "b/s1".into(), op: ServerOp::Addr(Ok(("10.0.0.1".parse().unwrap(), Some(81)))) }
    );
    assert!(matches!(one("set server b/s1 addr app.local"), Command::SetServer { op: ServerOp::Addr(Err(_)), .. }));

    let rt = Fake::new();
    let mut s = Session::default();
    assert_eq!(run(&mut s, &rt, "add server b/s3 127.0.0.1:8003").text, "New server registered.\n\n");
    assert_eq!(
        run(&mut s, &rt, "add server b/s3 127.0.0.1:8003").text,
        "Already exists a server with the same name in backend.\n\n"
    );
    assert_eq!(run(&mut s, &rt, "add server nope/s3 127.0.0.1:8003").text, "No such backend.\n\n");
    // Added in maintenance, as HAProxy does; deleted only so.
    assert_eq!(run(&mut s, &rt, "del server b/s3").text, "Server deleted.\n\n");
    assert_eq!(run(&mut s, &rt, "del server b/s1").text, "Only servers in maintenance mode can be deleted.\n\n");
    assert_eq!(run(&mut s, &rt, "del server b/nope").text, "No such server.\n\n");
    assert_eq!(
        run(&mut s, &rt, "set server b/s1 addr 10.0.0.1 port 81").text,
        "IP changed from '127.0.0.1' to '10.0.0.1', port changed from '8001' to '81' by 'stats socket command'\n\n"
    );
    assert_eq!(
        run(&mut s, &rt, "set server b/s1 addr 10.0.0.2").text,
        "IP changed from '10.0.0.1' to '10.0.0.2' by 'stats socket command'\n\n"
    );
    assert_eq!(run(&mut s, &rt, "set server b/s1 addr 10.0.0.2").text, "no need to change the addr, port\n\n");
    assert_eq!(run(&mut s, &rt, "shutdown sessions server b/s2").text, "\n");
    assert_eq!(rt.changes.borrow().last().map(|c| c.1.clone()), Some("shutdown s2".to_string()));
    let ro = Fake { read_only: true, ..Fake::new() };
    assert_eq!(run(&mut s, &ro, "del server b/s1").text, "Permission denied\n\n");
}

/// A socket's level: `user` reads statistics, `operator` also stick tables,
/// `admin` changes servers; `help` lists what the level may run.
#[test]
fn levels_gate_commands_and_help() {
    let rt = Fake::new();
    let mut user = Session { level: CliLevel::User, ..Session::default() };
    for line in [
        "set server b/s1 state drain",
        "disable server b/s1",
        "set weight b/s1 2",
        "show table",
        "add server b/x 127.0.0.1:1",
        "del server b/s1",
        "shutdown sessions server b/s1",
    ] {
        assert_eq!(run(&mut user, &rt, line).text, "Permission denied\n\n", "{line}");
    }
    assert!(rt.changes.borrow().is_empty());
    assert!(run(&mut user, &rt, "show stat").text.starts_with("# pxname,"));
    let help = run(&mut user, &rt, "help").text;
    assert!(help.contains("show stat") && !help.contains("set server") && !help.contains("show table"), "{help}");
    let mut operator = Session { level: CliLevel::Operator, ..Session::default() };
    assert_eq!(run(&mut operator, &rt, "set server b/s1 state drain").text, "Permission denied\n\n");
    assert_ne!(run(&mut operator, &rt, "show table").text, "Permission denied\n\n");
    assert!(run(&mut operator, &rt, "help").text.contains("show table"));
    let mut admin = Session::default();
    assert_eq!(run(&mut admin, &rt, "set server b/s1 state drain").text, "\n");
    assert!(run(&mut admin, &rt, "help").text.contains("add server <bk>/<srv>"));
}
