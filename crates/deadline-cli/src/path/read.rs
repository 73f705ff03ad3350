//! Reading each hop: configuration files and their includes, a service's `/deadline/limits`,
//! a database's settings. Every failure names the input and, for a file, the line.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use deadline::path::service::{PG_SETTINGS, PgSetting, ServiceLimits, parse_pg_time, postgres_hop};
use deadline::path::{Hop, haproxy, nginx};

use super::Input;

/// How long a service or database may take to answer.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// The hop of one input.
pub(super) async fn hop(input: &Input) -> anyhow::Result<Hop> {
    match input {
        Input::Budget(ms) => Ok(Hop::budget(positive(*ms, "--budget")?)),
        Input::Balancer(ms) => Ok(Hop::balancer(positive(*ms, "--balancer-idle")?)),
        Input::Nginx(file) => {
            let text = read_text(file).context("--nginx")?;
            let name = file.display().to_string();
            nginx::parse(&name, &text, &mut load_include).map_err(|e| anyhow!("--nginx: {e}"))
        }
        Input::Haproxy(file) => {
            let text = read_text(file).context("--haproxy")?;
            haproxy::parse(&file.display().to_string(), &text)
                .map_err(|e| anyhow!("--haproxy: {e}"))
        }
        Input::Service(url) => service(url)
            .await
            .with_context(|| format!("--service {url}")),
        Input::Postgres(url) => postgres(url).await.context("--postgres"),
    }
}

fn positive(ms: u64, flag: &str) -> anyhow::Result<Duration> {
    if ms == 0 {
        bail!("{flag} must be at least 1 ms");
    }
    Ok(Duration::from_millis(ms))
}

/// A file's text, with an error naming it.
fn read_text(file: &Path) -> anyhow::Result<String> {
    let bytes = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    String::from_utf8(bytes).map_err(|_| anyhow!("{} is not UTF-8 text", file.display()))
}

/// The files an nginx `include pattern` in file `from` names: relative to `from`'s directory,
/// with `*` and `?` expanded in the file name (nginx sorts the matches; none is no error).
fn load_include(pattern: &str, from: &str) -> Result<nginx::Loaded, String> {
    let base = Path::new(from).parent().unwrap_or(Path::new(""));
    let path = base.join(pattern);
    let is_glob = |s: &str| s.contains(['*', '?', '[']);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    if is_glob(&dir.to_string_lossy()) || name.contains('[') {
        return Err(
            "a pattern in a directory name, or a [class], is not supported: give the files".into(),
        );
    }
    let files: Vec<PathBuf> = if is_glob(&name) {
        let entries =
            std::fs::read_dir(&dir).map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
        let mut found: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .filter(|e| nginx::glob_match(&name, &e.file_name().to_string_lossy()))
            .map(|e| e.path())
            .filter(|p| p.is_file())
            .collect();
        found.sort();
        found
    } else {
        vec![path]
    };
    files
        .into_iter()
        .map(|file| {
            let text = read_text(&file).map_err(|e| format!("{e:#}"))?;
            Ok((file.display().to_string(), text))
        })
        .collect()
}

/// The hop of the deadline service at `url`, from its `GET /deadline/limits`.
async fn service(url: &str) -> anyhow::Result<Hop> {
    let base = url.trim_end_matches('/');
    let limits_url = format!("{base}/deadline/limits");
    let client = reqwest::Client::builder()
        .timeout(READ_TIMEOUT)
        .build()
        .context("making the HTTP client")?;
    let answer = client
        .get(&limits_url)
        .send()
        .await
        .with_context(|| format!("GET {limits_url}"))?;
    let status = answer.status();
    let body = answer
        .bytes()
        .await
        .with_context(|| format!("GET {limits_url}"))?;
    if !status.is_success() {
        bail!("GET {limits_url} answered {status}: is it a deadline service's admin address?");
    }
    let limits: ServiceLimits = serde_json::from_slice(&body)
        .with_context(|| format!("GET {limits_url} answered no service limits"))?;
    Ok(limits.hop(&limits_url))
}

/// The hop of the PostgreSQL database at `url`: the timeout settings a session there sees (and
/// their sources), and every override in `pg_db_role_setting`.
async fn postgres(url: &str) -> anyhow::Result<Hop> {
    let shown = crate::redact::redacted(url);
    let mut config: tokio_postgres::Config = url
        .parse()
        .map_err(|e| anyhow!("invalid PostgreSQL connection URL ({e})"))?;
    config.connect_timeout(READ_TIMEOUT);
    let (client, connection) =
        tokio::time::timeout(READ_TIMEOUT, config.connect(tokio_postgres::NoTls))
            .await
            .map_err(|_| anyhow!("no answer from {shown} within {} s", READ_TIMEOUT.as_secs()))?
            .with_context(|| format!("cannot connect to {shown}"))?;
    let task = tokio::spawn(connection);
    let names: Vec<&str> = PG_SETTINGS.iter().map(|(name, _, _)| *name).collect();
    let result = tokio::time::timeout(READ_TIMEOUT, settings(&client, &names))
        .await
        .map_err(|_| anyhow!("{shown} did not answer within {} s", READ_TIMEOUT.as_secs()))
        .and_then(|r| r.with_context(|| format!("reading the settings of {shown}")));
    drop(client);
    task.abort();
    Ok(postgres_hop(&shown, &result?))
}

async fn settings(
    client: &tokio_postgres::Client,
    names: &[&str],
) -> anyhow::Result<Vec<PgSetting>> {
    let mut out = Vec::new();
    let rows = client
        .query(
            "SELECT name, setting, COALESCE(unit, ''), source FROM pg_settings \
             WHERE name = ANY($1) ORDER BY array_position($1, name)",
            &[&names],
        )
        .await?;
    for row in rows {
        let (name, value, unit, source): (String, String, String, String) =
            (row.get(0), row.get(1), row.get(2), row.get(3));
        let millis = parse_pg_time(&format!("{value}{}", if unit == "ms" { "" } else { &unit }))
            .ok_or_else(|| anyhow!("{name} = {value:?} {unit:?} is not a time"))?;
        out.push(PgSetting {
            name,
            millis: u64::try_from(millis.as_millis()).unwrap_or(u64::MAX),
            source,
            scope: String::new(),
        });
    }
    let rows = client
        .query(
            "SELECT COALESCE(r.rolname, ''), COALESCE(d.datname, ''), s.setconfig \
             FROM pg_db_role_setting s \
             LEFT JOIN pg_roles r ON r.oid = s.setrole \
             LEFT JOIN pg_database d ON d.oid = s.setdatabase \
             ORDER BY 1, 2",
            &[],
        )
        .await?;
    for row in rows {
        let (role, database, config): (String, String, Vec<String>) =
            (row.get(0), row.get(1), row.get(2));
        let scope = match (role.is_empty(), database.is_empty()) {
            (false, false) => format!("role {role} database {database}"),
            (false, true) => format!("role {role}"),
            (true, false) => format!("database {database}"),
            (true, true) => "every role and database".to_owned(),
        };
        for entry in config {
            let Some((name, value)) = entry.split_once('=') else {
                continue;
            };
            if !names.contains(&name) {
                continue;
            }
            let millis = parse_pg_time(value)
                .ok_or_else(|| anyhow!("{name} = {value:?} ({scope}) is not a time"))?;
            out.push(PgSetting {
                name: name.to_owned(),
                millis: u64::try_from(millis.as_millis()).unwrap_or(u64::MAX),
                source: format!("pg_db_role_setting, {scope}"),
                scope: scope.clone(),
            });
        }
    }
    Ok(out)
}
