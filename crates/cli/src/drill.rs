//! `callgate drill`: the committed-load staircase against running
//! instances (`--instances`, behind your balancer) or against two it
//! spawns on loopback (`--spawn 2`: Postgres, the simulators, two servers
//! and the production HAProxy configuration), ending in a signed receipt;
//! `callgate drill verify` checks one; `callgate drill keygen` makes the
//! signing key. docs/drill.md is the operator's guide.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use callgate::config::Config;
use callgate::server::Running;
use callgate_drill::target::{Dialing, Instance};
use callgate_drill::{Drill, Fixture, Revisions, Verdict};
use callgate_rig::haproxy::{Backend, Haproxy, HaproxyOpts};
use callgate_rig::{Database, InProcess, InProcessOptions};
use state_store::LocalOptions;

mod knee;

/// How long a spawned stack may take to stop.
const STOP_DEADLINE: Duration = Duration::from_secs(30);
/// How long HAProxy may take to see both spawned instances up.
const UP_WITHIN: Duration = Duration::from_secs(15);
/// The slow tool of a spawned stack: the simulator answers after this.
const SPAWNED_TOOL_DELAY_MS: u64 = 2_000;

#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct DrillArgs {
    #[command(subcommand)]
    cmd: Option<DrillCmd>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Debug, clap::Subcommand)]
enum DrillCmd {
    /// Check a receipt's signature and every session receipt it references
    /// (exit 0 sound, 1 not).
    Verify {
        /// `receipt.yaml`, or the drill's output folder.
        receipt: PathBuf,
        /// An instance's admin base URL: the referenced sessions are also
        /// compared with the ledger as it is now.
        #[arg(long)]
        instance: Option<String>,
        #[arg(long, env = "CALLGATE_DRILL_ADMIN_TOKEN", hide_env_values = true)]
        admin_token: Option<String>,
    },
    /// Write a new Ed25519 signing key (never overwrites one).
    Keygen { path: PathBuf },
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    /// The fixture.
    #[arg(long, default_value = "drills/voice-onboarding-v1.toml")]
    fixture: PathBuf,
    /// Admin base URLs of the instances, comma-separated
    /// (`http://10.0.0.11:9090,http://10.0.0.12:9090`).
    #[arg(long, value_delimiter = ',', conflicts_with = "spawn")]
    instances: Vec<String>,
    /// The balancer callers dial (`ws://lb:80`); with `--instances`.
    #[arg(long, requires = "instances")]
    balancer: Option<String>,
    /// Spawn this many instances on loopback (2: the shipped HAProxy
    /// configuration names two servers).
    #[arg(long)]
    spawn: Option<u32>,
    /// Where the receipt, runs and session receipts go.
    #[arg(long, default_value = "drill-out")]
    out: PathBuf,
    /// The Ed25519 key that signs the receipt (`callgate drill keygen`).
    #[arg(long, env = "CALLGATE_DRILL_SIGNING_KEY")]
    signing_key: Option<PathBuf>,
    /// Multiplies every step's hold (never below the fixture's `min_hold_s`).
    #[arg(long, default_value_t = 1.0)]
    hold_scale: f64,
    /// Overrides the fixture's `repeats`.
    #[arg(long)]
    repeats: Option<u32>,
    #[arg(long, env = "CALLGATE_DRILL_ADMIN_TOKEN", hide_env_values = true)]
    admin_token: Option<String>,
    #[arg(long, env = "CALLGATE_DRILL_PARTNER_KEY", hide_env_values = true)]
    partner_key: Option<String>,
    #[arg(long, env = "CALLGATE_DRILL_TWILIO_TOKEN", hide_env_values = true)]
    twilio_token: Option<String>,
    /// Routing configuration files whose SHA-256 the receipt records
    /// (HAProxy, Kamailio); the shipped ones by default.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "deploy/haproxy/haproxy.cfg,deploy/kamailio/kamailio.cfg"
    )]
    routing_config: Vec<PathBuf>,
    /// Server log filter for a spawned stack (logs go to stderr).
    #[arg(long, default_value = "error")]
    log: String,
    #[command(flatten)]
    knee: knee::KneeArgs,
}

/// Knee staircases run when `--repeats` is not given.
const KNEE_REPEATS: u32 = 3;

pub async fn run(args: DrillArgs) -> anyhow::Result<ExitCode> {
    match args.cmd {
        Some(DrillCmd::Verify {
            receipt,
            instance,
            admin_token,
        }) => verify(&receipt, instance.as_deref(), admin_token).await,
        Some(DrillCmd::Keygen { path }) => {
            let public = callgate_drill::sign::keygen(&path)?;
            println!("wrote {} (public key {public})", path.display());
            Ok(ExitCode::SUCCESS)
        }
        None => drill(args.run).await,
    }
}

async fn verify(
    path: &Path,
    instance: Option<&str>,
    token: Option<String>,
) -> anyhow::Result<ExitCode> {
    callgate::ensure_tls_provider();
    let ledger = instance.map(|u| Instance::new(u, token)).transpose()?;
    let v = callgate_drill::verify::folder(path, ledger.as_ref()).await?;
    println!("signature: valid (ed25519, key {})", v.signed_by);
    println!("decision: {}", v.verdict);
    println!(
        "evidence: {} files match the digests signed with the receipt",
        v.copies
    );
    if ledger.is_some() {
        println!("session receipts: {} match the ledger", v.ledger);
    }
    for p in &v.problems {
        println!("problem: {p}");
    }
    Ok(if v.sound() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

async fn drill(args: RunArgs) -> anyhow::Result<ExitCode> {
    callgate::ensure_tls_provider();
    let Some(key_path) = &args.signing_key else {
        bail!("--signing-key is required (make one with `callgate drill keygen PATH`)");
    };
    let key = callgate_drill::sign::load_key(key_path)
        .context("the signing key (make one with `callgate drill keygen PATH`)")?;
    if args.knee.find_knee {
        return find_knee(&args, &key).await;
    }
    let text = std::fs::read_to_string(&args.fixture)
        .with_context(|| format!("reading {}", args.fixture.display()))?;
    let mut fixture = Fixture::from_toml(&text)?;
    if let Some(r) = args.repeats {
        fixture.repeats = r;
        fixture.validate()?;
    }
    let revisions = revisions(&args.routing_config);
    let receipt = match args.spawn {
        Some(n) => spawned(n, &args, fixture, text, revisions, &key).await?,
        None => {
            let Some(balancer) = args.balancer.clone() else {
                bail!("give --instances with --balancer, or --spawn 2");
            };
            let instances = args
                .instances
                .iter()
                .map(|u| Instance::new(u, args.admin_token.clone()))
                .collect::<Result<Vec<_>, _>>()?;
            let dialing = Dialing {
                balancer,
                twilio_token: args.twilio_token.clone(),
                partner_key: args.partner_key.clone(),
                sip: None,
            };
            let d = Drill {
                fixture,
                fixture_text: text,
                dialing,
                instances,
                hold_scale: args.hold_scale,
                revisions,
                progress: true,
            };
            d.run(&args.out, &key).await?
        }
    };
    println!("receipt: {}", args.out.join("receipt.yaml").display());
    println!(
        "decision: {:?}: {}",
        receipt.decision.verdict, receipt.decision.reason
    );
    Ok(match receipt.decision.verdict {
        Verdict::Promote | Verdict::Limited => ExitCode::SUCCESS,
        Verdict::Hold | Verdict::Rollback => ExitCode::FAILURE,
    })
}

/// `--find-knee`: the staircase against one squeezed instance it starts.
async fn find_knee(args: &RunArgs, key: &ed25519_dalek::SigningKey) -> anyhow::Result<ExitCode> {
    crate::logging::init("text", &args.log);
    let repeats = args.repeats.unwrap_or(KNEE_REPEATS);
    if repeats == 0 || repeats > callgate_drill::fixture::MAX_REPEATS {
        bail!(
            "--repeats lies within 1..={}",
            callgate_drill::fixture::MAX_REPEATS
        );
    }
    let client = revisions(&[]).client;
    let r = knee::run(&args.knee, repeats, client, &args.out, key).await?;
    println!("receipt: {}", args.out.join("receipt.yaml").display());
    println!("knees per staircase: {:?}", r.finding.knees);
    println!("{}", r.finding.summary);
    Ok(if r.finding.knee > 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The client's `git describe` (the package version outside a checkout)
/// and each routing file's SHA-256.
fn revisions(routing: &[PathBuf]) -> Revisions {
    let client = std::process::Command::new("git")
        .args(["describe", "--always", "--dirty", "--tags"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| format!("callgate {}", env!("CARGO_PKG_VERSION")));
    let routing = routing
        .iter()
        .filter_map(|p| {
            let bytes = std::fs::read(p).ok()?;
            Some((p.display().to_string(), sha256(&bytes)))
        })
        .collect();
    Revisions {
        client,
        servers: Default::default(),
        routing,
    }
}

fn sha256(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `--spawn 2`: Postgres, the simulators, two servers sharing them, and
/// HAProxy in front; the drill; then everything stopped.
async fn spawned(
    n: u32,
    args: &RunArgs,
    fixture: Fixture,
    text: String,
    revisions: Revisions,
    key: &ed25519_dalek::SigningKey,
) -> anyhow::Result<callgate_drill::Receipt> {
    if n != 2 {
        bail!("--spawn takes 2: the shipped HAProxy configuration names two servers");
    }
    crate::logging::init("text", &args.log);
    let partner_key = format!("drill-{}", uuid::Uuid::new_v4().simple());
    let stack = Stack::start(&partner_key).await?;
    let admin = |r: &Running| Instance::new(&format!("http://{}", r.addr), None);
    let d = Drill {
        fixture,
        fixture_text: text,
        dialing: Dialing {
            balancer: format!("ws://{}", stack.lb.frontend()),
            twilio_token: None,
            partner_key: Some(partner_key),
            sip: None,
        },
        instances: vec![admin(&stack.a.server)?, admin(&stack.b)?],
        hold_scale: args.hold_scale,
        revisions,
        progress: true,
    };
    // Interrupted (Ctrl-C, or SIGTERM), the stack is still stopped: no
    // Postgres or HAProxy is left behind. No receipt is written then.
    let receipt = tokio::select! {
        r = d.run(&args.out, key) => r.map_err(anyhow::Error::from),
        sig = callgate_rig::stop_requested() => {
            callgate_rig::force_on_second_signal();
            Err(anyhow::anyhow!("interrupted ({}): the drill was stopped before its receipt", signal_name(sig)))
        }
    };
    stack.stop().await;
    receipt
}

fn signal_name(sig: std::io::Result<callgate_rig::StopSignal>) -> &'static str {
    sig.map_or("a signal", callgate_rig::StopSignal::name)
}

struct Stack {
    a: InProcess,
    b: Running,
    lb: Haproxy,
}

impl Stack {
    async fn start(partner_key: &str) -> anyhow::Result<Stack> {
        let database = Database::local(LocalOptions::default()).await?;
        let mut opts = InProcessOptions::new(format!("drill-a-{}", std::process::id()));
        opts.sim.dialog.tool_delay_ms = SPAWNED_TOOL_DELAY_MS;
        let key = partner_key.to_string();
        let a = InProcess::start(database, opts, move |c| drill_config(c, &key)).await?;
        let mut cfg = (*a.server.app.cfg()).clone();
        cfg.server.instance = format!("drill-b-{}", std::process::id());
        cfg.server.listen = "127.0.0.1:0".parse()?;
        cfg.agent.listen = "127.0.0.1:0".parse()?;
        let b = callgate::server::start(cfg, None).await?;
        let backend = |r: &Running| -> anyhow::Result<Backend> {
            Ok(Backend {
                http: r.addr,
                agent_port: r.agent_addr.context("agent enabled")?.port(),
            })
        };
        let lb = Haproxy::start([backend(&a.server)?, backend(&b)?], &HaproxyOpts::default())
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        lb.wait_for("both up", UP_WITHIN, |s| s.iter().all(|s| s.status == "UP"))
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok(Stack { a, b, lb })
    }

    async fn stop(self) {
        drop(self.lb);
        let _ = self.b.shutdown(STOP_DEADLINE).await;
        if let Err(e) = self.a.stop(STOP_DEADLINE).await {
            eprintln!("callgate drill: stopping the spawned stack: {e:#}");
        }
    }
}

/// A spawned instance: its agent answers HAProxy, the drill's partner is
/// known, everything else on embedded defaults.
fn drill_config(c: &mut Config, partner_key: &str) {
    use sha2::Digest as _;
    c.agent.enabled = true;
    c.agent.listen = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    let digest = sha2::Sha256::digest(partner_key.as_bytes());
    c.partners.insert(
        "drill".into(),
        callgate::config::PartnerConfig {
            key_sha256: digest.iter().map(|b| format!("{b:02x}")).collect(),
            max_concurrent_calls: None,
            transfer_target: None,
        },
    );
}
