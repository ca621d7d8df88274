//! One rendered pod as the kubelet would start it: its Deployment template,
//! the configuration it mounts and the environment it would get (values
//! from `secret.example.yaml`, the downward API filled with example
//! values), loaded by callgate itself.

use std::collections::BTreeMap;
use std::path::Path;

use callgate::config::Config;
use yaml_rust2::Yaml;

use super::{k8s, kustomize, of_kind};

/// What the downward API gives in these checks.
pub const HOST_IP: &str = "10.0.0.21";
const POD_NAME: &str = "callgate-7d9f8c6b5-x2k4q";

pub struct Pod<'a> {
    pub template: &'a Yaml,
    pub spec: &'a Yaml,
    config_map: &'a Yaml,
}

impl<'a> Pod<'a> {
    pub fn of(docs: &'a [Yaml]) -> Self {
        let template = &of_kind(docs, "Deployment")["spec"]["template"];
        let spec = &template["spec"];
        let name = spec["volumes"][0]["configMap"]["name"].as_str().unwrap();
        let config_map = docs
            .iter()
            .find(|d| {
                d["kind"].as_str() == Some("ConfigMap")
                    && d["metadata"]["name"].as_str() == Some(name)
            })
            .expect("the ConfigMap the pod mounts");
        let pod = Pod {
            template,
            spec,
            config_map,
        };
        assert_eq!(
            pod.container()["volumeMounts"][0]["mountPath"].as_str(),
            Some("/etc/callgate")
        );
        pod
    }

    pub fn container(&self) -> &'a Yaml {
        &self.spec["containers"][0]
    }

    /// The container port named `name`.
    pub fn port(&self, name: &str) -> i64 {
        self.container()["ports"]
            .as_vec()
            .unwrap()
            .iter()
            .find(|p| p["name"].as_str() == Some(name))
            .and_then(|p| p["containerPort"].as_i64())
            .unwrap_or_else(|| panic!("no container port {name}"))
    }

    pub fn config_text(&self) -> String {
        self.config_map["data"]["callgate.toml"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// The environment the container would start with.
    pub fn env(&self) -> Vec<(String, String)> {
        let secrets = Secrets::example();
        let mut out = Vec::new();
        let c = self.container();
        for e in c["env"].as_vec().unwrap() {
            let name = e["name"].as_str().unwrap().to_owned();
            let from = &e["valueFrom"];
            let value = if let Some(v) = e["value"].as_str() {
                v.to_owned()
            } else if let Some(field) = from["fieldRef"]["fieldPath"].as_str() {
                match field {
                    "metadata.name" => POD_NAME.to_owned(),
                    "status.hostIP" => HOST_IP.to_owned(),
                    other => panic!("{name}: no example value for {other}"),
                }
            } else {
                let r = &from["secretKeyRef"];
                let (secret, key) = (r["name"].as_str().unwrap(), r["key"].as_str().unwrap());
                secrets.value(secret, key)
            };
            out.push((name, value));
        }
        for f in c["envFrom"].as_vec().into_iter().flatten() {
            let secret = f["secretRef"]["name"].as_str().unwrap();
            out.extend(secrets.0[secret].clone());
        }
        out
    }

    /// The configuration callgate loads from the mounted file and `env`.
    pub fn config(&self) -> Config {
        let tmp = std::env::temp_dir().join(format!(
            "callgate-k8s-{}.toml",
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::write(&tmp, self.config_text()).unwrap();
        let cfg = Config::load_with_env(Some(&tmp), self.env());
        std::fs::remove_file(&tmp).unwrap();
        cfg.unwrap_or_else(|e| panic!("the pod's configuration: {e}"))
    }

    /// The calls the pod admits at once, as its gate derives it.
    pub fn capacity(&self) -> u32 {
        let gate = callgate::app::gate_config(&self.config());
        admission::Capacity::derive(gate.capacity, &gate.ceilings).calls
    }

    /// `secret/key` for every key the pod reads (all of an `envFrom`'s).
    pub fn secret_keys(&self) -> Vec<String> {
        let secrets = Secrets::example();
        let c = self.container();
        let mut out: Vec<String> = c["env"]
            .as_vec()
            .unwrap()
            .iter()
            .map(|e| &e["valueFrom"]["secretKeyRef"])
            .filter(|r| r.as_hash().is_some())
            .map(|r| {
                format!(
                    "{}/{}",
                    r["name"].as_str().unwrap(),
                    r["key"].as_str().unwrap()
                )
            })
            .collect();
        for f in c["envFrom"].as_vec().into_iter().flatten() {
            let secret = f["secretRef"]["name"].as_str().unwrap();
            let keys = secrets
                .0
                .get(secret)
                .unwrap_or_else(|| panic!("{secret} not in the example"));
            out.extend(keys.iter().map(|(k, _)| format!("{secret}/{k}")));
        }
        out
    }
}

/// `secret.example.yaml`: Secret name → its keys and example values.
pub struct Secrets(BTreeMap<String, Vec<(String, String)>>);

impl Secrets {
    pub fn example() -> Self {
        let docs = kustomize::load(&k8s().join("secret.example.yaml")).unwrap();
        let mut out = BTreeMap::new();
        for d in docs {
            assert_eq!(d["kind"].as_str(), Some("Secret"));
            let keys = d["stringData"]
                .as_hash()
                .unwrap()
                .iter()
                .map(|(k, v)| {
                    (
                        k.as_str().unwrap().to_owned(),
                        v.as_str().unwrap().to_owned(),
                    )
                })
                .collect();
            out.insert(d["metadata"]["name"].as_str().unwrap().to_owned(), keys);
        }
        Secrets(out)
    }

    pub fn keys(&self) -> Vec<String> {
        self.0
            .iter()
            .flat_map(|(s, keys)| keys.iter().map(move |(k, _)| format!("{s}/{k}")))
            .collect()
    }

    fn value(&self, secret: &str, key: &str) -> String {
        let keys = self
            .0
            .get(secret)
            .unwrap_or_else(|| panic!("Secret {secret} not in the example"));
        keys.iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("{secret}/{key} not in the example"))
    }
}

/// The final stage of the Dockerfile: its numeric user and exposed ports.
pub struct Image {
    pub uid: i64,
    pub gid: i64,
    pub exposes: Vec<String>,
}

impl Image {
    pub fn read(path: &Path) -> Self {
        let text = std::fs::read_to_string(path).unwrap();
        let last = text.rsplit("\nFROM ").next().unwrap();
        let mut image = Image {
            uid: -1,
            gid: -1,
            exposes: Vec::new(),
        };
        for line in last.lines() {
            if let Some(user) = line.strip_prefix("USER ") {
                let (u, g) = user.trim().split_once(':').expect("USER uid:gid");
                (image.uid, image.gid) = (u.parse().unwrap(), g.parse().unwrap());
            } else if let Some(ports) = line.strip_prefix("EXPOSE ") {
                image
                    .exposes
                    .extend(ports.split_whitespace().map(str::to_owned));
            }
        }
        assert!(image.uid > 0 && image.gid > 0, "a numeric non-root USER");
        image
    }
}

/// `500m` → 500, `2` → 2000.
pub fn millicores(q: &str) -> f64 {
    q.strip_suffix('m').map_or_else(
        || q.parse::<f64>().unwrap() * 1000.0,
        |m| m.parse().unwrap(),
    )
}

/// `256Mi` → 256, `1Gi` → 1024, `300M` → 286.1, bytes otherwise.
pub fn mebibytes(q: &str) -> f64 {
    let units = [
        ("Ki", 1024.0),
        ("Mi", 1024.0 * 1024.0),
        ("Gi", 1024.0 * 1024.0 * 1024.0),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
    ];
    let (n, unit) = units
        .iter()
        .find_map(|(s, f)| q.strip_suffix(s).map(|n| (n, *f)))
        .unwrap_or((q, 1.0));
    n.parse::<f64>().unwrap() * unit / (1024.0 * 1024.0)
}

#[test]
fn quantities_read_as_kubernetes_reads_them() {
    assert_eq!(millicores("500m"), 500.0);
    assert_eq!(millicores("1.5"), 1500.0);
    assert_eq!(mebibytes("256Mi"), 256.0);
    assert_eq!(mebibytes("1Gi"), 1024.0);
    assert_eq!(mebibytes("1048576"), 1.0);
    assert!((mebibytes("300M") - 286.1).abs() < 0.1);
}
