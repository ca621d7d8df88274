//! `deploy/kubernetes/` read as Kubernetes would read it. Both overlays
//! (`websocket`, `sip`) are rendered from the shared `base` (by
//! [`kustomize`], and compared with `kubectl kustomize` where it is
//! installed); every manifest and both renderings pass strict schema
//! validation for Kubernetes 1.30 and the newest `kubernetes-validate`
//! ships; and the relations an operator would otherwise find out about in
//! production are checked: the grace period outlasts preStop plus the
//! drain the mounted configuration sets (which callgate itself loads, with
//! the pod's environment, and validates), the probes and ports match the
//! listeners, the requests cover the configured capacity at the benchmarked
//! cost (`docs/benchmarks.md`), the pod runs as the image's user, every
//! secret it reads is in the example, and the only surface the pod's
//! configuration leaves open is the one the NetworkPolicy (or, for the
//! host-network SIP pods, the node firewall) closes.
#![allow(clippy::unwrap_used)] // tests may unwrap: a failure is the assertion

mod bench;
mod kustomize;
mod pod;

use std::path::{Path, PathBuf};
use std::time::Duration;

use yaml_rust2::Yaml;

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn k8s() -> PathBuf {
    repo().join("deploy/kubernetes")
}

/// `kustomize build` of an overlay, checked against `kubectl kustomize`
/// when that is installed (the renderer must agree with the real one).
pub fn render(overlay: &str) -> Vec<Yaml> {
    let dir = k8s().join(overlay);
    let ours = kustomize::build(&dir).unwrap_or_else(|e| panic!("{overlay}: {e}"));
    let Ok(out) = std::process::Command::new("kubectl")
        .arg("kustomize")
        .arg(&dir)
        .output()
    else {
        return ours; // no kubectl here: the renderer's own tests stand
    };
    assert!(out.status.success(), "kubectl kustomize {overlay}: {out:?}");
    let theirs =
        yaml_rust2::YamlLoader::load_from_str(&String::from_utf8_lossy(&out.stdout)).unwrap();
    let sorted = |docs: &[Yaml]| {
        let mut v: Vec<String> = docs
            .iter()
            .map(|d| kustomize::canonical(d).to_string())
            .collect();
        v.sort();
        v
    };
    assert_eq!(
        sorted(&ours),
        sorted(&theirs),
        "{overlay}: our rendering differs from kubectl kustomize"
    );
    ours
}

pub fn of_kind<'a>(docs: &'a [Yaml], kind: &str) -> &'a Yaml {
    let found: Vec<_> = docs
        .iter()
        .filter(|d| d["kind"].as_str() == Some(kind))
        .collect();
    assert_eq!(found.len(), 1, "exactly one {kind}");
    found[0]
}

/// Every YAML file under `deploy/kubernetes` that is a manifest (not a
/// kustomization or a patch one references).
fn manifest_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "yaml") {
                out.push(p);
            }
        }
    }
    let mut all = Vec::new();
    walk(&k8s(), &mut all);
    let mut patches = Vec::new();
    for k in all.iter().filter(|p| p.ends_with("kustomization.yaml")) {
        let doc = kustomize::load(k).unwrap().remove(0);
        for p in doc["patches"].as_vec().into_iter().flatten() {
            if let Some(path) = p["path"].as_str() {
                patches.push(k.parent().unwrap().join(path));
            }
        }
    }
    all.retain(|p| !p.ends_with("kustomization.yaml") && !patches.contains(p));
    all.sort();
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_manifest_and_both_overlays_pass_strict_validation_for_1_30_and_the_newest() {
    let tool = callgate_tests::python_venv()
        .await
        .join("bin/kubernetes-validate");

    let scratch =
        std::env::temp_dir().join(format!("callgate-k8s-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&scratch).unwrap();
    let mut files = manifest_files();
    assert!(files.len() >= 8, "{files:?}");
    for overlay in ["websocket", "sip"] {
        let f = scratch.join(format!("{overlay}.yaml"));
        std::fs::write(&f, kustomize::emit(&render(overlay))).unwrap();
        files.push(f);
    }

    // The newest version it ships is its default.
    let help = std::process::Command::new(&tool)
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let newest = help
        .split("Defaults to ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("no default version in: {help}"))
        .to_owned();
    for version in ["1.30.0", newest.as_str()] {
        let out = tokio::process::Command::new(&tool)
            .args(["--strict", "--quiet", "-k", version])
            .args(&files)
            .output();
        let out = tokio::time::timeout(Duration::from_secs(120), out)
            .await
            .unwrap()
            .unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "Kubernetes {version}:\n{said}");
        // A kind it has no schema for is a warning, not a pass.
        assert!(
            !said.contains("WARN") && !said.contains("ERROR"),
            "Kubernetes {version}:\n{said}"
        );
    }
    std::fs::remove_dir_all(&scratch).unwrap();
}

#[test]
fn both_overlays_drain_instead_of_dropping_calls() {
    for overlay in ["websocket", "sip"] {
        let docs = render(overlay);
        for d in &docs {
            assert!(d["apiVersion"].as_str().is_some(), "{overlay}: apiVersion");
            assert!(d["metadata"]["name"].as_str().is_some(), "{overlay}: name");
        }
        let pod = pod::Pod::of(&docs);
        let c = pod.container();
        let cfg = pod.config();
        assert_eq!(c["name"].as_str(), Some("callgate"));
        let args: Vec<&str> = c["args"]
            .as_vec()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        assert_eq!(args, ["serve", "--config", "/etc/callgate/callgate.toml"]);

        // The grace period covers preStop, the whole drain and a margin.
        let grace = pod.spec["terminationGracePeriodSeconds"].as_i64().unwrap();
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
            "{overlay}: terminationGracePeriodSeconds {grace} must exceed preStop {pre_stop} + drain {drain} + 30 s"
        );

        // Probes: start-up allows migrations, readiness is admission,
        // liveness ignores the drain; all on the call port, which serves them.
        assert_eq!(i64::from(cfg.server.listen.port()), pod.port("http"));
        for (probe, path) in [
            ("startupProbe", "/healthz"),
            ("readinessProbe", "/readyz"),
            ("livenessProbe", "/healthz"),
        ] {
            assert_eq!(
                c[probe]["httpGet"]["path"].as_str(),
                Some(path),
                "{overlay} {probe}"
            );
            assert_eq!(
                c[probe]["httpGet"]["port"].as_str(),
                Some("http"),
                "{overlay} {probe}"
            );
        }
        let startup = &c["startupProbe"];
        let startup_s = startup["periodSeconds"].as_i64().unwrap()
            * startup["failureThreshold"].as_i64().unwrap();
        assert!(
            startup_s >= 30,
            "{overlay}: {startup_s} s for migrations and the reclaim"
        );
        assert_eq!(c["readinessProbe"]["failureThreshold"].as_i64(), Some(1));

        // Every listener the configuration opens is a declared port.
        assert_eq!(
            cfg.server.admin_listen.map(|a| i64::from(a.port())),
            Some(pod.port("admin"))
        );
        assert!(cfg.agent.enabled);
        assert_eq!(i64::from(cfg.agent.listen.port()), pod.port("agent"));

        // A rollout never takes capacity away; the Services and the budget
        // select exactly the Deployment's pods.
        let deploy = of_kind(&docs, "Deployment");
        let rolling = &deploy["spec"]["strategy"]["rollingUpdate"];
        assert_eq!(rolling["maxUnavailable"].as_i64(), Some(0));
        assert!(rolling["maxSurge"].as_i64().unwrap() >= 1);
        let labels = &deploy["spec"]["template"]["metadata"]["labels"];
        assert_eq!(&deploy["spec"]["selector"]["matchLabels"], labels);
        for s in docs
            .iter()
            .filter(|d| d["kind"].as_str() == Some("Service"))
        {
            assert_eq!(
                &s["spec"]["selector"], labels,
                "{overlay}: {:?}",
                s["metadata"]["name"]
            );
            for p in s["spec"]["ports"].as_vec().unwrap() {
                pod.port(p["targetPort"].as_str().unwrap());
            }
        }
        let pdb = of_kind(&docs, "PodDisruptionBudget");
        assert_eq!(&pdb["spec"]["selector"]["matchLabels"], labels);
        assert_eq!(pdb["spec"]["maxUnavailable"].as_i64(), Some(1));
        // The headless Service keeps draining pods resolvable for HAProxy.
        let pods = docs
            .iter()
            .find(|d| d["metadata"]["name"].as_str() == Some("callgate-pods"))
            .unwrap();
        assert_eq!(pods["spec"]["clusterIP"].as_str(), Some("None"));
        assert_eq!(
            pods["spec"]["publishNotReadyAddresses"].as_bool(),
            Some(true)
        );
    }
}

#[test]
fn the_requests_cover_the_configured_capacity_at_the_benchmarked_cost() {
    let figures = bench::Figures::published();
    let text = std::fs::read_to_string(k8s().join("base/deployment.yaml")).unwrap();
    // The manifest states the figures it was sized from.
    for stated in figures.as_stated() {
        assert!(
            text.contains(&stated),
            "deployment.yaml does not state {stated:?} ({figures:?})"
        );
    }
    for overlay in ["websocket", "sip"] {
        let docs = render(overlay);
        let pod = pod::Pod::of(&docs);
        let calls = f64::from(pod.capacity());
        let res = &pod.container()["resources"];
        let cpu_m = pod::millicores(res["requests"]["cpu"].as_str().unwrap());
        let mem_mib = pod::mebibytes(res["requests"]["memory"].as_str().unwrap());
        let need_cpu = calls * figures.mcpu_per_call;
        assert!(
            cpu_m >= need_cpu,
            "{overlay}: {cpu_m}m CPU < {calls} calls x {:.2} mCPU",
            figures.mcpu_per_call
        );
        let need_calls = calls * figures.rss_kib_per_call / 1024.0;
        let surge = figures.surge_peak_mib * (calls / figures.surge_capacity).max(1.0);
        assert!(
            mem_mib >= need_calls,
            "{overlay}: {mem_mib} MiB < {need_calls:.1} MiB of calls"
        );
        assert!(
            mem_mib >= 2.0 * surge,
            "{overlay}: {mem_mib} MiB < twice the surge peak {surge:.1} MiB"
        );
        // Burstable on purpose: memory limited at the request (never
        // overcommitted, evicted last), CPU not limited (no throttling gaps).
        assert_eq!(
            res["limits"]["memory"], res["requests"]["memory"],
            "{overlay}"
        );
        assert!(
            res["limits"]["cpu"].is_badvalue(),
            "{overlay}: a CPU limit throttles audio"
        );
    }
}

#[test]
fn the_pod_runs_as_the_images_user_with_nothing_to_escalate() {
    let image = pod::Image::read(&repo().join("Dockerfile"));
    for overlay in ["websocket", "sip"] {
        let docs = render(overlay);
        let pod = pod::Pod::of(&docs);
        let sc = &pod.spec["securityContext"];
        assert_eq!(sc["runAsNonRoot"].as_bool(), Some(true));
        assert_eq!(
            sc["runAsUser"].as_i64(),
            Some(image.uid),
            "the Dockerfile's USER"
        );
        assert_eq!(
            sc["runAsGroup"].as_i64(),
            Some(image.gid),
            "the Dockerfile's USER"
        );
        assert_eq!(
            sc["seccompProfile"]["type"].as_str(),
            Some("RuntimeDefault")
        );
        let c = pod.container();
        let csc = &c["securityContext"];
        assert_eq!(csc["allowPrivilegeEscalation"].as_bool(), Some(false));
        assert_eq!(csc["readOnlyRootFilesystem"].as_bool(), Some(true));
        assert_eq!(csc["capabilities"]["drop"][0].as_str(), Some("ALL"));
        assert!(
            csc["capabilities"]["add"].is_badvalue(),
            "{overlay}: no capability added"
        );
        assert!(csc["privileged"].as_bool() != Some(true));
        for p in c["ports"].as_vec().unwrap() {
            let proto = p["protocol"].as_str().unwrap_or("TCP").to_ascii_lowercase();
            let port = format!("{}/{proto}", p["containerPort"].as_i64().unwrap());
            assert!(
                image.exposes.contains(&port),
                "{overlay}: {port} not in the Dockerfile's EXPOSE {:?}",
                image.exposes
            );
        }
        assert!(
            c["image"].as_str().unwrap().starts_with("callgate:"),
            "the Dockerfile's image"
        );
    }
}

#[test]
fn every_secret_the_pod_reads_is_in_the_example_and_every_example_key_is_read() {
    let example = pod::Secrets::example();
    for overlay in ["websocket", "sip"] {
        let docs = render(overlay);
        let pod = pod::Pod::of(&docs);
        let mut read = pod.secret_keys();
        read.sort();
        let mut listed = example.keys();
        listed.sort();
        assert_eq!(
            read, listed,
            "{overlay}: the Secrets the pod reads vs secret.example.yaml"
        );
        // Nothing secret in the ConfigMap.
        let toml = pod.config_text();
        for key in [
            "admin_token",
            "auth_token",
            "shared_key_secret",
            "api_key",
            "key_sha256",
            "url =",
        ] {
            assert!(
                !toml.contains(key),
                "{overlay}: {key} belongs in the Secret"
            );
        }
    }
}

#[test]
fn the_only_open_surface_is_the_one_the_network_closes() {
    // The WebSocket pods: callgate warns only about the agent port, and the
    // NetworkPolicy admits every declared port from a named source only.
    let docs = render("websocket");
    let pod = pod::Pod::of(&docs);
    let cfg = pod.config();
    let open: Vec<_> = cfg.exposures().iter().map(|e| e.key).collect();
    assert_eq!(open, ["agent.listen"], "websocket: {:?}", cfg.exposures());
    assert!(!cfg.sip.enabled);
    let policy = of_kind(&docs, "NetworkPolicy");
    assert_eq!(
        &policy["spec"]["podSelector"]["matchLabels"],
        &pod.template["metadata"]["labels"]
    );
    assert_eq!(policy["spec"]["policyTypes"][0].as_str(), Some("Ingress"));
    let mut covered = Vec::new();
    for rule in policy["spec"]["ingress"].as_vec().unwrap() {
        let from = rule["from"].as_vec().expect("every rule names its sources");
        assert!(!from.is_empty());
        for p in rule["ports"].as_vec().unwrap() {
            covered.push(p["port"].as_str().unwrap().to_owned());
        }
    }
    let mut declared: Vec<String> = pod.container()["ports"]
        .as_vec()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_owned())
        .collect();
    covered.sort();
    declared.sort();
    assert_eq!(
        covered, declared,
        "every port has its rule, and only its sources"
    );
    // The Ingress routes the two upgrade paths to the call port and nothing else.
    let ingress = of_kind(&docs, "Ingress");
    assert!(
        ingress["spec"]["tls"][0]["secretName"].as_str().is_some(),
        "TLS: Twilio needs wss://"
    );
    let paths: Vec<_> = ingress["spec"]["rules"][0]["http"]["paths"]
        .as_vec()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["path"].as_str().unwrap(),
                p["backend"]["service"]["port"]["name"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        paths,
        [("/v1/media-stream", "http"), ("/v1/partner/stream", "http")]
    );

    // The SIP pods: the node's network, one per node, SIP on with the
    // node's address and only the proxy trusted.
    let docs = render("sip");
    let pod = pod::Pod::of(&docs);
    let cfg = pod.config();
    let open: Vec<_> = cfg.exposures().iter().map(|e| e.key).collect();
    assert_eq!(open, ["agent.listen"], "sip: {:?}", cfg.exposures());
    assert!(cfg.sip.enabled);
    assert_eq!(cfg.sip.advertise_ip, Some(pod::HOST_IP.parse().unwrap()));
    assert!(!cfg.sip.trusted_peers.is_empty());
    assert_eq!(pod.spec["hostNetwork"].as_bool(), Some(true));
    assert_eq!(
        pod.spec["dnsPolicy"].as_str(),
        Some("ClusterFirstWithHostNet")
    );
    let anti = &pod.spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        [0];
    assert_eq!(anti["topologyKey"].as_str(), Some("kubernetes.io/hostname"));
    assert_eq!(
        &anti["labelSelector"]["matchLabels"],
        &pod.template["metadata"]["labels"]
    );
    assert_eq!(pod.port("sip-udp"), i64::from(cfg.sip.listen.port()));
    assert_eq!(pod.port("sip-tcp"), i64::from(cfg.sip.listen.port()));
    assert!(
        pod.spec["nodeSelector"]
            .as_hash()
            .is_some_and(|h| !h.is_empty())
    );
    assert!(
        docs.iter()
            .all(|d| d["kind"].as_str() != Some("NetworkPolicy")),
        "it would not apply to host-network pods"
    );
}
