//! `callgate serve --check` as an operator (or a manifest test) runs it:
//! the real binary, the shipped file and the environment, nothing started.
//! It names every surface the configuration leaves open, says the
//! configuration is valid and exits 0; a configuration `serve` would refuse
//! exits 1 with the reason.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn check(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_callgate"));
    cmd.arg("serve")
        .arg("--check")
        .args(args)
        .current_dir(repo());
    for (k, _) in std::env::vars() {
        if k.starts_with("CALLGATE_") {
            cmd.env_remove(k);
        }
    }
    cmd.envs(env.iter().copied());
    cmd.output().expect("run callgate serve --check")
}

fn warnings(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("warning: "))
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_shipped_file_is_valid_and_names_its_two_open_surfaces() {
    let out = check(&["--config", "config/callgate.toml"], &[]);
    assert!(out.status.success(), "{out:?}");
    let w = warnings(&out);
    assert_eq!(w.len(), 2, "{w:?}");
    assert!(w[0].contains("close it with server.admin_token"), "{w:?}");
    assert!(w[1].contains("close it with twilio.auth_token"), "{w:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("configuration valid: config/callgate.toml (2 warnings)"),
        "{stdout}"
    );
}

#[test]
fn secrets_from_the_environment_close_surfaces_even_when_all_digits() {
    let env = [
        ("CALLGATE_SERVER__ADMIN_TOKEN", "0123456789"),
        ("CALLGATE_TWILIO__AUTH_TOKEN", "true"),
    ];
    let out = check(&["--config", "config/callgate.toml"], &env);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(warnings(&out), Vec::<String>::new());
    assert!(String::from_utf8_lossy(&out.stdout).contains("(0 warnings)"));
}

#[test]
fn an_open_sip_listener_is_named_until_trusted_peers_are_set() {
    let sip = [
        ("CALLGATE_SIP__ENABLED", "true"),
        ("CALLGATE_SIP__ADVERTISE_IP", "192.0.2.20"),
    ];
    let open = check(&[], &sip);
    assert!(open.status.success(), "{open:?}");
    assert!(
        warnings(&open)
            .iter()
            .any(|w| w.contains("sip.trusted_peers")),
        "{open:?}"
    );
    let closed = check(
        &[],
        &[
            sip[0],
            sip[1],
            ("CALLGATE_SIP__TRUSTED_PEERS", "[192.0.2.10]"),
        ],
    );
    assert!(closed.status.success(), "{closed:?}");
    assert!(
        !warnings(&closed)
            .iter()
            .any(|w| w.contains("sip.trusted_peers")),
        "{closed:?}"
    );
}

#[test]
fn a_configuration_serve_would_refuse_exits_1_with_the_reason() {
    let bad = std::env::temp_dir().join(format!("callgate-check-{}.toml", std::process::id()));
    std::fs::write(&bad, "[admission]\nmax_concurent_calls = 10\n").unwrap();
    let out = check(&["--config", bad.to_str().unwrap()], &[]);
    std::fs::remove_file(&bad).unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("max_concurent_calls"), "{stderr}");
    assert!(out.stdout.is_empty(), "{out:?}");
}

#[test]
fn a_deliberate_fault_is_a_warning_of_its_own() {
    let env = [
        ("CALLGATE_SERVER__ADMIN_TOKEN", "t"),
        ("CALLGATE_TWILIO__AUTH_TOKEN", "t"),
        ("CALLGATE_FAULTS__LEAK_PERMITS", "true"),
    ];
    let out = check(&["--config", "config/callgate.toml"], &env);
    assert!(out.status.success(), "{out:?}");
    let w = warnings(&out);
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].contains("deliberate fault faults.leak_permits is on"),
        "{w:?}"
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("(1 warning)"));
}
