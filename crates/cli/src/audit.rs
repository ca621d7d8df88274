//! `callgate audit`: checks the session ledger for broken invariants (the
//! checks are `state_store::audit`, the config-driven run is
//! `callgate::audit_http`) and says so in its exit status.
//!
//! What it never does: migrate or write to the database — it reads one
//! snapshot over one connection.
//!
//! How to drive it: `callgate audit --config callgate.toml [--json]`.
//! Exit 0: `0 violations`; exit 1: one line (or JSON object) per
//! violation, each with its session id; exit 2: the audit could not run
//! (bad configuration, Postgres unreachable or too slow).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::SystemTime;

use callgate::audit_http;

#[derive(clap::Args)]
pub struct AuditArgs {
    /// Configuration file (the `[database]` section and `[call]` bounds are used).
    #[arg(long, short, env = "CALLGATE_CONFIG")]
    config: Option<PathBuf>,
    /// Print `{violations: [...], checked_at}` instead of one line per violation.
    #[arg(long)]
    json: bool,
}

/// Could not audit: distinct from "violations found" (1).
const CANNOT_AUDIT: u8 = 2;

pub async fn run(args: AuditArgs) -> anyhow::Result<ExitCode> {
    let cfg = match callgate::config::Config::load(args.config.as_deref()) {
        Ok(cfg) => cfg,
        Err(e) => return Ok(cannot_audit(&anyhow::Error::from(e))),
    };
    crate::logging::init(&cfg.log.format, "warn");
    let checked_at = SystemTime::now();
    let found = match audit_http::audit_with_config(&cfg).await {
        Ok(found) => found,
        Err(e) => return Ok(cannot_audit(&e)),
    };
    if args.json {
        println!("{}", audit_http::render_json(&found, checked_at));
    } else {
        print!("{}", audit_http::render_text(&found));
    }
    Ok(if found.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn cannot_audit(e: &anyhow::Error) -> ExitCode {
    eprintln!("callgate audit: {e:#}");
    ExitCode::from(CANNOT_AUDIT)
}
