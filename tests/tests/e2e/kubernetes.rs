//! `deploy/kubernetes/` read as Kubernetes would read it, checked against
//! how callgate drains: the grace period outlasts preStop plus the drain
//! the mounted configuration sets (which callgate itself loads and
//! validates), readiness is `/readyz` and liveness `/healthz` on the
//! container's HTTP port, a rollout never takes capacity away, and the
//! Service and the PodDisruptionBudget select the Deployment's pods.
#![allow(clippy::unwrap_used)] // tests may unwrap: a failure is the assertion

use std::path::{Path, PathBuf};

use yaml_rust2::{Yaml, YamlLoader};

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/kubernetes")
}

/// Every document of every manifest, with the file it came from.
fn documents() -> Vec<(String, Yaml)> {
    let mut out = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let docs = YamlLoader::load_from_str(&text)
            .unwrap_or_else(|e| panic!("{}: not YAML: {e}", f.display()));
        for d in docs {
            out.push((f.display().to_string(), d));
        }
    }
    out
}

fn of_kind(docs: &[(String, Yaml)], kind: &str) -> Yaml {
    let found: Vec<_> = docs
        .iter()
        .filter(|(_, d)| d["kind"].as_str() == Some(kind))
        .collect();
    assert_eq!(found.len(), 1, "exactly one {kind} in deploy/kubernetes");
    found[0].1.clone()
}

/// The container port named `name`.
fn port(container: &Yaml, name: &str) -> i64 {
    container["ports"]
        .as_vec()
        .unwrap()
        .iter()
        .find(|p| p["name"].as_str() == Some(name))
        .and_then(|p| p["containerPort"].as_i64())
        .unwrap_or_else(|| panic!("no container port {name}"))
}

#[test]
fn the_manifests_match_how_callgate_drains() {
    let docs = documents();
    for (file, d) in &docs {
        assert!(d["apiVersion"].as_str().is_some(), "{file}: apiVersion");
        assert!(d["metadata"]["name"].as_str().is_some(), "{file}: name");
    }
    let deploy = of_kind(&docs, "Deployment");
    let pod = &deploy["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    assert_eq!(c["name"].as_str(), Some("callgate"));

    // The configuration the pod mounts is one callgate accepts.
    let config_map = of_kind(&docs, "ConfigMap");
    let toml = config_map["data"]["callgate.toml"].as_str().unwrap();
    let tmp = std::env::temp_dir().join(format!("callgate-k8s-{}.toml", std::process::id()));
    std::fs::write(&tmp, toml).unwrap();
    let cfg = callgate::config::Config::load(Some(&tmp));
    std::fs::remove_file(&tmp).unwrap();
    let cfg = cfg.unwrap_or_else(|e| panic!("the ConfigMap's callgate.toml: {e}"));
    let args: Vec<&str> = c["args"]
        .as_vec()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(args, ["serve", "--config", "/etc/callgate/callgate.toml"]);
    assert_eq!(
        c["volumeMounts"][0]["mountPath"].as_str(),
        Some("/etc/callgate")
    );
    assert_eq!(
        pod["volumes"][0]["configMap"]["name"].as_str(),
        config_map["metadata"]["name"].as_str()
    );

    // The grace period covers preStop, the whole drain and a margin.
    let grace = pod["terminationGracePeriodSeconds"].as_i64().unwrap();
    let pre_stop = c["lifecycle"]["preStop"]["sleep"]["seconds"]
        .as_i64()
        .expect("a preStop sleep");
    assert!(
        (1..=30).contains(&pre_stop),
        "preStop stays short: {pre_stop}"
    );
    let drain = i64::try_from(cfg.drain.deadline_s).unwrap();
    assert!(
        grace >= pre_stop + drain + 30,
        "terminationGracePeriodSeconds {grace} must exceed preStop {pre_stop} + drain {drain} + 30 s"
    );

    // Probes: readiness is admission, liveness ignores the drain.
    let http = port(c, "http");
    assert_eq!(i64::from(cfg.server.listen.port()), http);
    assert_eq!(
        c["readinessProbe"]["httpGet"]["path"].as_str(),
        Some("/readyz")
    );
    assert_eq!(
        c["readinessProbe"]["httpGet"]["port"].as_str(),
        Some("http")
    );
    assert_eq!(
        c["livenessProbe"]["httpGet"]["path"].as_str(),
        Some("/healthz")
    );
    if cfg.agent.enabled {
        assert_eq!(i64::from(cfg.agent.listen.port()), port(c, "agent"));
    }

    // A rollout never takes capacity away.
    let rolling = &deploy["spec"]["strategy"]["rollingUpdate"];
    assert_eq!(rolling["maxUnavailable"].as_i64(), Some(0));
    assert!(rolling["maxSurge"].as_i64().unwrap() >= 1);

    // The Service and the budget select exactly the Deployment's pods.
    let labels = &deploy["spec"]["template"]["metadata"]["labels"];
    assert_eq!(&deploy["spec"]["selector"]["matchLabels"], labels);
    let service = of_kind(&docs, "Service");
    assert_eq!(&service["spec"]["selector"], labels);
    assert_eq!(
        service["spec"]["ports"][0]["targetPort"].as_str(),
        Some("http")
    );
    let pdb = of_kind(&docs, "PodDisruptionBudget");
    assert_eq!(&pdb["spec"]["selector"]["matchLabels"], labels);
    assert_eq!(pdb["spec"]["maxUnavailable"].as_i64(), Some(1));
}
