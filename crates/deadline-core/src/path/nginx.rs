//! nginx's timers, read from a configuration or from `nginx -T` output.
//!
//! The grammar is nginx's own: directives end with `;`, blocks are `{ ... }`, `#` starts a
//! comment, arguments may be quoted with `"` or `'` (with `\` escapes), and `${name}` in a word
//! is a variable. A directive this reader does not know is skipped (nginx has hundreds); broken
//! syntax (a quote never closed, braces that do not match, a directive without its `;`) is an
//! error naming the file and line, as nginx's own `-t` would refuse it.
//!
//! Settings are inherited as nginx inherits them: a `proxy_*` directive at `http` or `server`
//! level applies to every `location` below that does not set its own, wherever in the block it
//! is written. A file whose top level holds `server` blocks (a `conf.d` snippet) is read as if
//! inside `http`. Every `location` with a `proxy_pass` gives the path its proxy timers, and
//! every `server` its client timers.
//!
//! `include` is followed through the caller's loader (this module reads no files). `nginx -T`
//! output, which holds every file after a `# configuration file PATH:` line, is split into those
//! files first, and its `include`s are found among them; lines are then the output's own.
//!
//! Why the retry rule looks at the peers: `proxy_next_upstream` (default `error timeout`) only
//! retries on *another* server, so it needs more than one. A literal address has one; an
//! `upstream` block has as many as its `server` lines; a host name may resolve to several (nginx
//! uses every address it resolves to), so it counts as several.

use std::collections::HashMap;
use std::time::Duration;

use super::{Hop, HopKind, Kind, Limit, Origin, ParseError, Role, TimeoutRetry, Timer};

/// How deep includes may nest before the reader gives up (a file including itself).
pub const MAX_INCLUDE_DEPTH: usize = 16;

/// How many files all includes together may bring in (files including each other by a glob
/// would otherwise grow without bound long before the depth limit).
pub const MAX_INCLUDED_FILES: usize = 4_096;

/// nginx's defaults for the timers this reader knows.
const DEFAULT_PROXY: Duration = Duration::from_secs(60);
const DEFAULT_KEEPALIVE: Duration = Duration::from_secs(75);
const DEFAULT_UPSTREAM_KEEPALIVE: Duration = Duration::from_secs(60);
const DEFAULT_CLIENT: Duration = Duration::from_secs(60);

/// Included files, as the loader returns them: each file's name and text.
pub type Loaded = Vec<(String, String)>;

/// Reads an nginx time: `ms`, `s`, `m`, `h`, `d`, `w`, several parts allowed (`1m30s`), a bare
/// number in seconds.
pub fn parse_time(text: &str) -> Option<Duration> {
    const UNITS: [(&str, Duration); 6] = [
        ("ms", Duration::from_millis(1)),
        ("s", Duration::from_secs(1)),
        ("m", Duration::from_secs(60)),
        ("h", Duration::from_secs(3_600)),
        ("d", Duration::from_secs(86_400)),
        ("w", Duration::from_secs(604_800)),
    ];
    super::parse_time(text, &UNITS, Duration::from_secs(1))
}

/// A directive, with its block if it has one.
#[derive(Debug, Clone)]
struct Directive {
    name: String,
    args: Vec<String>,
    file: String,
    line: u32,
    block: Option<Vec<Directive>>,
}

impl Directive {
    fn origin(&self) -> Origin {
        Origin::Line {
            file: self.file.clone(),
            line: self.line,
        }
    }

    fn default_here(&self) -> Origin {
        Origin::Default {
            file: self.file.clone(),
            line: self.line,
        }
    }

    fn error(&self, message: impl Into<String>) -> ParseError {
        ParseError {
            file: self.file.clone(),
            line: self.line,
            message: message.into(),
        }
    }
}

#[derive(Debug, PartialEq)]
enum Token {
    Word(String),
    Open,
    Close,
    Semi,
}

/// Splits `text` into tokens with their lines.
fn tokens(file: &str, text: &str, first_line: u32) -> Result<Vec<(Token, u32)>, ParseError> {
    let err = |line: u32, message: String| ParseError {
        file: file.to_owned(),
        line,
        message,
    };
    let mut out = Vec::new();
    let mut line = first_line;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\n' => line += 1,
            c if c.is_whitespace() => {}
            '#' => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        line += 1;
                        break;
                    }
                }
            }
            '{' => out.push((Token::Open, line)),
            '}' => out.push((Token::Close, line)),
            ';' => out.push((Token::Semi, line)),
            '"' | '\'' => {
                let start = line;
                let mut word = String::new();
                let mut closed = false;
                while let Some(d) = chars.next() {
                    match d {
                        '\\' => {
                            if let Some(e) = chars.next() {
                                if e == '\n' {
                                    line += 1;
                                }
                                word.push(e);
                            }
                        }
                        d if d == c => {
                            closed = true;
                            break;
                        }
                        d => {
                            if d == '\n' {
                                line += 1;
                            }
                            word.push(d);
                        }
                    }
                }
                if !closed {
                    return Err(err(start, format!("a {c} quote is never closed")));
                }
                out.push((Token::Word(word), start));
            }
            c => {
                // A word is named by the line it starts on (an escaped newline may follow).
                let start = line;
                let mut word = String::from(c);
                let mut in_var = false;
                let mut prev = c;
                while let Some(&d) = chars.peek() {
                    if in_var {
                        if d == '\n' {
                            return Err(err(line, format!("`${{` in {word:?} is never closed")));
                        }
                        in_var = d != '}';
                    } else if d.is_whitespace() || matches!(d, ';' | '{' | '}') {
                        if d == '{' && prev == '$' {
                            in_var = true;
                        } else {
                            break;
                        }
                    } else if d == '\\' {
                        word.push(d);
                        chars.next();
                        if let Some(e) = chars.next() {
                            if e == '\n' {
                                line += 1;
                            }
                            word.push(e);
                            prev = e;
                        }
                        continue;
                    }
                    word.push(d);
                    prev = d;
                    chars.next();
                }
                out.push((Token::Word(word), start));
            }
        }
    }
    Ok(out)
}

/// Turns tokens into directives (blocks nested).
fn directives(file: &str, tokens: Vec<(Token, u32)>) -> Result<Vec<Directive>, ParseError> {
    let err = |line: u32, message: String| ParseError {
        file: file.to_owned(),
        line,
        message,
    };
    // Blocks open: the directive that opened each and what it holds so far.
    let mut stack: Vec<(Directive, Vec<Directive>)> = Vec::new();
    let mut current: Vec<Directive> = Vec::new();
    let mut words: Vec<(String, u32)> = Vec::new();
    for (token, line) in tokens {
        match token {
            Token::Word(w) => words.push((w, line)),
            Token::Semi => {
                let mut parts = std::mem::take(&mut words).into_iter();
                let Some((name, line)) = parts.next() else {
                    return Err(err(line, "a `;` with no directive before it".into()));
                };
                current.push(Directive {
                    name,
                    args: parts.map(|(w, _)| w).collect(),
                    file: file.to_owned(),
                    line,
                    block: None,
                });
            }
            Token::Open => {
                let mut parts = std::mem::take(&mut words).into_iter();
                let Some((name, line)) = parts.next() else {
                    return Err(err(line, "a `{` with no directive before it".into()));
                };
                let opener = Directive {
                    name,
                    args: parts.map(|(w, _)| w).collect(),
                    file: file.to_owned(),
                    line,
                    block: None,
                };
                if stack.len() >= 64 {
                    return Err(err(line, "blocks nested more than 64 deep".into()));
                }
                stack.push((opener, std::mem::take(&mut current)));
            }
            Token::Close => {
                if let Some((name, line)) = words.first() {
                    return Err(err(
                        *line,
                        format!("directive {name:?} has no ending `;` before `}}`"),
                    ));
                }
                let Some((mut opener, outer)) = stack.pop() else {
                    return Err(err(line, "a `}` closes no block".into()));
                };
                opener.block = Some(std::mem::replace(&mut current, outer));
                current.push(opener);
            }
        }
    }
    if let Some((name, line)) = words.first() {
        return Err(err(
            *line,
            format!("directive {name:?} has no ending `;` (the file ends first)"),
        ));
    }
    if let Some((opener, _)) = stack.last() {
        return Err(err(
            opener.line,
            format!("the `{{` of {:?} is never closed", opener.name),
        ));
    }
    Ok(current)
}

/// The files of `nginx -T` output, each with the line its text starts on; `None` when `text`
/// is a plain configuration.
fn split_dump(text: &str) -> Option<Vec<(String, u32, String)>> {
    let mut files: Vec<(String, u32, String)> = Vec::new();
    // Split keeping each line's own ending, so the files' lines are exactly the output's.
    for (i, line) in text.split_inclusive('\n').enumerate() {
        let marker = line
            .trim_end_matches(['\n', '\r'])
            .strip_prefix("# configuration file ")
            .and_then(|rest| rest.strip_suffix(':'));
        match (marker, files.last_mut()) {
            (Some(path), _) => files.push((path.to_owned(), i as u32 + 2, String::new())),
            (None, Some((_, _, body))) => body.push_str(line),
            (None, None) => {}
        }
    }
    (!files.is_empty()).then_some(files)
}

/// Whether `name` matches the glob `pattern` (`*` and `?`; no classes), as an `include`
/// pattern matches file names.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    let (mut pi, mut ni, mut star, mut mark) = (0, 0, None, 0);
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ni;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ni = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// Where the includes of a configuration come from.
enum Source<'a> {
    /// The caller's loader: `(pattern, including file)` to the files it names.
    Loader(&'a mut dyn FnMut(&str, &str) -> Result<Loaded, String>),
    /// The files of `nginx -T` output (name, first line, text), and the output's own name.
    Dump(&'a [(String, u32, String)], &'a str),
}

/// Parses one file's text and splices its includes in.
fn parse_file(
    name: &str,
    text: &str,
    first_line: u32,
    source: &mut Source<'_>,
    depth: usize,
    included: &mut usize,
) -> Result<Vec<Directive>, ParseError> {
    let parsed = directives(name, tokens(name, text, first_line)?)?;
    expand(parsed, source, depth, included)
}

fn expand(
    parsed: Vec<Directive>,
    source: &mut Source<'_>,
    depth: usize,
    included: &mut usize,
) -> Result<Vec<Directive>, ParseError> {
    let mut out = Vec::with_capacity(parsed.len());
    for mut d in parsed {
        if d.name == "include" && d.block.is_none() {
            let [pattern] = d.args.as_slice() else {
                return Err(d.error("include takes one file or pattern"));
            };
            if depth >= MAX_INCLUDE_DEPTH {
                return Err(d.error(format!(
                    "includes nest more than {MAX_INCLUDE_DEPTH} deep (a file including itself?)"
                )));
            }
            let files: Vec<(String, u32, String)> = match source {
                Source::Loader(load) => load(pattern, &d.file)
                    .map_err(|e| d.error(format!("include {pattern}: {e}")))?
                    .into_iter()
                    .map(|(name, text)| (name, 1, text))
                    .collect(),
                Source::Dump(files, _) => {
                    let found: Vec<_> = files
                        .iter()
                        .filter(|(name, _, _)| {
                            name == pattern
                                || name.ends_with(&format!("/{pattern}"))
                                || glob_match(pattern, name)
                                || glob_match(&format!("*/{pattern}"), name)
                        })
                        .cloned()
                        .collect();
                    if found.is_empty() && !pattern.contains(['*', '?', '[']) {
                        return Err(d.error(format!(
                            "include {pattern}: not among the files of this nginx -T output"
                        )));
                    }
                    found
                }
            };
            *included += files.len();
            if *included > MAX_INCLUDED_FILES {
                return Err(d.error(format!(
                    "includes bring in more than {MAX_INCLUDED_FILES} files (files including each other?)"
                )));
            }
            for (name, first_line, text) in files {
                let shown = match source {
                    Source::Dump(_, dump) => (*dump).to_owned(),
                    Source::Loader(_) => name,
                };
                out.extend(parse_file(
                    &shown,
                    &text,
                    first_line,
                    source,
                    depth + 1,
                    included,
                )?);
            }
            continue;
        }
        if let Some(block) = d.block.take() {
            d.block = Some(expand(block, source, depth, included)?);
        }
        out.push(d);
    }
    Ok(out)
}

/// Reads the nginx configuration `text` (named `file`) into a hop. `load(pattern, from)`
/// returns the files an `include pattern` in file `from` names (each name and text), or why
/// it cannot; it is not called for `nginx -T` output, whose files are all in `text`.
pub fn parse(
    file: &str,
    text: &str,
    load: &mut dyn FnMut(&str, &str) -> Result<Loaded, String>,
) -> Result<Hop, ParseError> {
    let tree = match split_dump(text) {
        Some(files) => {
            let mut source = Source::Dump(&files, file);
            let (_, first_line, main) = &files[0];
            parse_file(file, main, *first_line, &mut source, 0, &mut 0)?
        }
        None => parse_file(file, text, 1, &mut Source::Loader(load), 0, &mut 0)?,
    };
    let mut reader = Reader {
        hop: Hop::new(format!("nginx {file}"), HopKind::Nginx),
        upstreams: HashMap::new(),
    };
    reader.collect_upstreams(&tree)?;
    reader.block(&tree, &Inherited::default(), "")?;
    Ok(reader.hop)
}

/// A setting's value and where it was read.
type Setting<T> = Option<(T, Origin)>;

/// The settings a block passes to the blocks inside it.
#[derive(Debug, Clone, Default)]
struct Inherited {
    read: Setting<Duration>,
    send: Setting<Duration>,
    connect: Setting<Duration>,
    next_upstream: Setting<Vec<String>>,
    next_upstream_timeout: Setting<Duration>,
    keepalive: Setting<Duration>,
    client_header: Setting<Duration>,
    client_body: Setting<Duration>,
    send_client: Setting<Duration>,
}

/// An `upstream` block: its servers and pooled connections.
#[derive(Debug, Clone)]
struct Upstream {
    servers: usize,
    /// `keepalive N` (pooled connections), with `keepalive_timeout` (default 60 s).
    keepalive: Option<(Duration, Origin)>,
}

struct Reader {
    hop: Hop,
    upstreams: HashMap<String, Upstream>,
}

fn time_arg(d: &Directive) -> Result<Duration, ParseError> {
    let [value] = d.args.as_slice() else {
        return Err(d.error(format!("{} takes one time", d.name)));
    };
    parse_time(value).ok_or_else(|| d.error(format!("invalid time {value:?} in {}", d.name)))
}

impl Reader {
    fn collect_upstreams(&mut self, tree: &[Directive]) -> Result<(), ParseError> {
        for d in tree {
            let Some(block) = &d.block else { continue };
            match d.name.as_str() {
                "http" => self.collect_upstreams(block)?,
                "upstream" => {
                    let [name] = d.args.as_slice() else {
                        return Err(d.error("upstream takes one name"));
                    };
                    let servers = block.iter().filter(|s| s.name == "server").count();
                    let pooled = block.iter().any(|s| s.name == "keepalive");
                    let timeout = block.iter().find(|s| s.name == "keepalive_timeout");
                    let keepalive = match (pooled, timeout) {
                        (false, _) => None,
                        (true, Some(t)) => Some((time_arg(t)?, t.origin())),
                        (true, None) => Some((DEFAULT_UPSTREAM_KEEPALIVE, d.default_here())),
                    };
                    self.upstreams
                        .insert(name.clone(), Upstream { servers, keepalive });
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Reads the settings of one block over what it inherits, then the blocks inside.
    fn block(
        &mut self,
        block: &[Directive],
        inherited: &Inherited,
        scope: &str,
    ) -> Result<(), ParseError> {
        let mut here = inherited.clone();
        let mut proxy_pass = None;
        for d in block.iter().filter(|d| d.block.is_none()) {
            let slot = match d.name.as_str() {
                "proxy_read_timeout" => &mut here.read,
                "proxy_send_timeout" => &mut here.send,
                "proxy_connect_timeout" => &mut here.connect,
                "proxy_next_upstream_timeout" => &mut here.next_upstream_timeout,
                "client_header_timeout" => &mut here.client_header,
                "client_body_timeout" => &mut here.client_body,
                "send_timeout" => &mut here.send_client,
                "keepalive_timeout" => {
                    // `keepalive_timeout TIMEOUT [HEADER_TIMEOUT]`.
                    let Some(value) = d.args.first() else {
                        return Err(d.error("keepalive_timeout takes a time"));
                    };
                    let t = parse_time(value).ok_or_else(|| {
                        d.error(format!("invalid time {value:?} in keepalive_timeout"))
                    })?;
                    here.keepalive = Some((t, d.origin()));
                    continue;
                }
                "proxy_next_upstream" => {
                    if d.args.is_empty() {
                        return Err(d.error("proxy_next_upstream takes at least one condition"));
                    }
                    here.next_upstream = Some((d.args.clone(), d.origin()));
                    continue;
                }
                "proxy_pass" => {
                    let [target] = d.args.as_slice() else {
                        return Err(d.error("proxy_pass takes one URL"));
                    };
                    proxy_pass = Some((target.clone(), d));
                    continue;
                }
                _ => continue,
            };
            *slot = Some((time_arg(d)?, d.origin()));
        }
        if let Some((target, d)) = proxy_pass {
            self.proxied(&here, &target, d, scope);
        }
        for d in block {
            let Some(inner) = &d.block else { continue };
            match d.name.as_str() {
                "http" => self.block(inner, &here, scope)?,
                "server" => {
                    let listen = inner
                        .iter()
                        .find(|l| l.name == "listen")
                        .and_then(|l| l.args.first())
                        .map_or("(no listen)", String::as_str);
                    let scope = format!("server {listen}");
                    self.server_timers(inner, &here, d, &scope)?;
                    self.block(inner, &here, &scope)?;
                }
                "location" => {
                    let scope = format!("{scope} location {}", d.args.join(" "));
                    self.block(inner, &here, scope.trim())?;
                }
                // `upstream` is read apart; `events`, `stream`, `map`, `if`, `types`, ... hold
                // nothing this reader needs.
                _ => {}
            }
        }
        Ok(())
    }

    fn timer(&mut self, name: &str, kind: Kind, role: Role, setting: (Limit, Origin), scope: &str) {
        self.hop.timers.push(Timer {
            name: name.to_owned(),
            kind,
            role,
            limit: setting.0,
            origin: setting.1,
            scope: scope.to_owned(),
        });
    }

    /// The client timers of a `server` block (its own settings over what it inherits).
    fn server_timers(
        &mut self,
        block: &[Directive],
        inherited: &Inherited,
        server: &Directive,
        scope: &str,
    ) -> Result<(), ParseError> {
        // The block's own settings, read here so the server's timers see them.
        let mut here = inherited.clone();
        for d in block.iter().filter(|d| d.block.is_none()) {
            let slot = match d.name.as_str() {
                "client_header_timeout" => &mut here.client_header,
                "client_body_timeout" => &mut here.client_body,
                "send_timeout" => &mut here.send_client,
                "keepalive_timeout" => {
                    let value = d.args.first().map(String::as_str).unwrap_or_default();
                    let t = parse_time(value).ok_or_else(|| {
                        d.error(format!("invalid time {value:?} in keepalive_timeout"))
                    })?;
                    here.keepalive = Some((t, d.origin()));
                    continue;
                }
                _ => continue,
            };
            *slot = Some((time_arg(d)?, d.origin()));
        }
        let or_default = |s: &Setting<Duration>, d: Duration| match s {
            Some((t, o)) => (Limit::After(*t), o.clone()),
            None => (Limit::After(d), server.default_here()),
        };
        // `keepalive_timeout 0` turns keep-alive off: no idle connection to race.
        let keepalive = or_default(&here.keepalive, DEFAULT_KEEPALIVE);
        if keepalive.0 != Limit::After(Duration::ZERO) {
            self.timer(
                "keepalive_timeout",
                Kind::KeepAlive,
                Role::Caller,
                keepalive,
                scope,
            );
        }
        for (name, setting) in [
            ("client_header_timeout", &here.client_header),
            ("client_body_timeout", &here.client_body),
            ("send_timeout", &here.send_client),
        ] {
            let value = or_default(setting, DEFAULT_CLIENT);
            self.timer(name, Kind::Inactivity, Role::Caller, value, scope);
        }
        Ok(())
    }

    /// The proxy timers and retries of a block with `proxy_pass`.
    fn proxied(&mut self, here: &Inherited, target: &str, pass: &Directive, scope: &str) {
        let or_default = |s: &Setting<Duration>| match s {
            Some((t, o)) => (Limit::After(*t), o.clone()),
            None => (Limit::After(DEFAULT_PROXY), pass.default_here()),
        };
        let scope = if scope.is_empty() {
            format!("proxy_pass {target}")
        } else {
            scope.to_owned()
        };
        self.timer(
            "proxy_connect_timeout",
            Kind::Connect,
            Role::Callee,
            or_default(&here.connect),
            &scope,
        );
        self.timer(
            "proxy_read_timeout",
            Kind::Inactivity,
            Role::Waits,
            or_default(&here.read),
            &scope,
        );
        self.timer(
            "proxy_send_timeout",
            Kind::Inactivity,
            Role::Callee,
            or_default(&here.send),
            &scope,
        );
        let host = target
            .split_once("://")
            .map_or(target, |(_, rest)| rest)
            .split(['/', '?'])
            .next()
            .unwrap_or_default();
        let upstream = self.upstreams.get(host).cloned();
        if let Some((t, origin)) = upstream.as_ref().and_then(|u| u.keepalive.clone()) {
            self.timer(
                "keepalive_timeout (upstream)",
                Kind::KeepAlive,
                Role::Callee,
                (Limit::After(t), origin),
                &scope,
            );
        }
        let peers = match &upstream {
            Some(u) => Some(u.servers),
            None if host.contains('$') => None,
            None if is_literal_address(host) => Some(1),
            // A host name may resolve to several addresses, and nginx uses them all.
            None => None,
        };
        let (conditions, origin) = match &here.next_upstream {
            Some((c, o)) => (c.clone(), o.clone()),
            None => (vec!["error".into(), "timeout".into()], pass.default_here()),
        };
        let on_timeout =
            conditions.iter().any(|c| c == "timeout") && !conditions.iter().any(|c| c == "off");
        if on_timeout && peers != Some(1) {
            let cap = match &here.next_upstream_timeout {
                Some((t, _)) if !t.is_zero() => Limit::After(*t),
                _ => Limit::Unlimited,
            };
            self.hop.retries.push(TimeoutRetry {
                directive: format!("proxy_next_upstream {}", conditions.join(" ")),
                origin,
                cap,
                scope,
            });
        }
    }
}

/// Whether `host` (with its port) is an IP address or a unix socket: one peer.
fn is_literal_address(host: &str) -> bool {
    if host.starts_with("unix:") || host.starts_with('[') {
        return true;
    }
    let addr = host.rsplit_once(':').map_or(host, |(a, _)| a);
    addr.parse::<std::net::Ipv4Addr>().is_ok()
}
