//! The part of `kustomize build` the manifests use, so the overlays can be
//! rendered where no `kubectl` is installed: a kustomization's `resources`
//! (manifest files, or directories holding a kustomization) and its
//! `patches` of JSON 6902 operations (`add`, `replace`, `remove`, `test`)
//! aimed at one resource by kind and name. Any other field, operation or a
//! patch that matches nothing is an error, never a silent skip — a renderer
//! that ignored what it cannot do would validate manifests nobody applies.
//! Where `kubectl` is on the PATH the tests also compare against
//! `kubectl kustomize`.

use std::path::Path;

use yaml_rust2::{Yaml, YamlLoader};

/// Every resource `kustomize build dir` would print, in the order they were
/// listed.
pub fn build(dir: &Path) -> Result<Vec<Yaml>, String> {
    let file = dir.join("kustomization.yaml");
    let k = load(&file)?
        .into_iter()
        .next()
        .ok_or_else(|| format!("{}: empty", file.display()))?;
    let fields = k
        .as_hash()
        .ok_or_else(|| format!("{}: not a mapping", file.display()))?;
    for key in fields.keys() {
        let key = key.as_str().unwrap_or_default();
        if !matches!(key, "apiVersion" | "kind" | "resources" | "patches") {
            return Err(format!("{}: `{key}` is not rendered here", file.display()));
        }
    }
    let mut out = Vec::new();
    for r in k["resources"].as_vec().map_or(&[][..], Vec::as_slice) {
        let path = dir.join(r.as_str().ok_or("a resource that is not a path")?);
        if path.is_dir() {
            out.extend(build(&path)?);
        } else {
            out.extend(load(&path)?);
        }
    }
    for p in k["patches"].as_vec().map_or(&[][..], Vec::as_slice) {
        patch(dir, p, &mut out)?;
    }
    Ok(out)
}

/// Every document of a YAML file.
pub fn load(path: &Path) -> Result<Vec<Yaml>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    YamlLoader::load_from_str(&text).map_err(|e| format!("{}: not YAML: {e}", path.display()))
}

fn patch(dir: &Path, p: &Yaml, docs: &mut [Yaml]) -> Result<(), String> {
    let (kind, name) = (&p["target"]["kind"], &p["target"]["name"]);
    let ops = match (p["path"].as_str(), p["patch"].as_str()) {
        (Some(file), None) => load(&dir.join(file))?
            .into_iter()
            .next()
            .unwrap_or(Yaml::Null),
        (None, Some(text)) => YamlLoader::load_from_str(text)
            .map_err(|e| format!("inline patch: {e}"))?
            .into_iter()
            .next()
            .unwrap_or(Yaml::Null),
        _ => return Err("a patch needs exactly one of `path` and `patch`".into()),
    };
    let ops = ops
        .as_vec()
        .ok_or("only JSON 6902 patches (a list of operations)")?;
    let mut hit = 0;
    for doc in docs.iter_mut() {
        if &doc["kind"] == kind && &doc["metadata"]["name"] == name {
            for op in ops {
                apply(doc, op)?;
            }
            hit += 1;
        }
    }
    if hit == 0 {
        return Err(format!(
            "patch target {kind:?}/{name:?} matches no resource"
        ));
    }
    Ok(())
}

/// One JSON 6902 operation on `doc`.
pub fn apply(doc: &mut Yaml, op: &Yaml) -> Result<(), String> {
    let path = op["path"].as_str().ok_or("an operation without a path")?;
    let mut tokens: Vec<String> = path
        .strip_prefix('/')
        .ok_or_else(|| format!("`{path}` is not a JSON pointer"))?
        .split('/')
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect();
    let last = tokens.pop().unwrap_or_default();
    let parent = walk(doc, &tokens).ok_or_else(|| format!("`{path}`: no such parent"))?;
    let value = || match &op["value"] {
        Yaml::BadValue => Err(format!("`{path}`: the operation needs a value")),
        v => Ok(v.clone()),
    };
    match (op["op"].as_str(), parent) {
        (Some("add"), Yaml::Array(a)) => {
            let i = if last == "-" {
                a.len()
            } else {
                index(&last, a.len() + 1, path)?
            };
            a.insert(i, value()?);
        }
        (Some("add"), Yaml::Hash(h)) => {
            h.insert(Yaml::String(last), value()?);
        }
        (Some("replace"), parent) => *child(parent, &last, path)? = value()?,
        (Some("remove"), Yaml::Array(a)) => {
            let i = index(&last, a.len(), path)?;
            a.remove(i);
        }
        (Some("remove"), Yaml::Hash(h)) => {
            h.remove(&Yaml::String(last))
                .ok_or_else(|| format!("`{path}`: nothing to remove"))?;
        }
        (Some("test"), parent) => {
            if *child(parent, &last, path)? != value()? {
                return Err(format!("`{path}`: test failed"));
            }
        }
        (op, _) => {
            return Err(format!(
                "`{path}`: operation {op:?} on a scalar or not rendered here"
            ));
        }
    }
    Ok(())
}

fn index(token: &str, below: usize, path: &str) -> Result<usize, String> {
    token
        .parse::<usize>()
        .ok()
        .filter(|i| *i < below)
        .ok_or_else(|| format!("`{path}`: no index {token}"))
}

fn child<'a>(parent: &'a mut Yaml, token: &str, path: &str) -> Result<&'a mut Yaml, String> {
    match parent {
        Yaml::Array(a) => {
            let i = index(token, a.len(), path)?;
            Ok(&mut a[i])
        }
        Yaml::Hash(h) => h
            .get_mut(&Yaml::String(token.to_owned()))
            .ok_or_else(|| format!("`{path}`: no such member")),
        _ => Err(format!("`{path}`: a scalar has no members")),
    }
}

fn walk<'a>(mut at: &'a mut Yaml, tokens: &[String]) -> Option<&'a mut Yaml> {
    for t in tokens {
        at = child(at, t, "").ok()?;
    }
    Some(at)
}

/// A resource as plain JSON (maps sorted), for comparing renderings that
/// order keys differently.
pub fn canonical(y: &Yaml) -> serde_json::Value {
    use serde_json::Value;
    match y {
        Yaml::Hash(h) => Value::Object(
            h.iter()
                .map(|(k, v)| (k.as_str().unwrap_or_default().to_owned(), canonical(v)))
                .collect(),
        ),
        Yaml::Array(a) => Value::Array(a.iter().map(canonical).collect()),
        Yaml::String(s) => Value::String(s.clone()),
        Yaml::Integer(i) => Value::from(*i),
        Yaml::Real(r) => r.parse::<f64>().map_or(Value::Null, Value::from),
        Yaml::Boolean(b) => Value::Bool(*b),
        _ => Value::Null,
    }
}

/// The resources as one multi-document YAML stream.
pub fn emit(docs: &[Yaml]) -> String {
    let mut out = String::new();
    for d in docs {
        let mut one = String::new();
        yaml_rust2::YamlEmitter::new(&mut one)
            .dump(d)
            .expect("emit YAML");
        out.push_str(&one);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(text: &str) -> Yaml {
        YamlLoader::load_from_str(text).unwrap().remove(0)
    }

    fn op(text: &str) -> Yaml {
        doc(text)
    }

    #[test]
    fn add_appends_inserts_and_sets_and_replace_and_remove_need_a_target() {
        let mut d = doc("spec: {ports: [a, c], env: {}}");
        apply(&mut d, &op("{op: add, path: /spec/ports/-, value: d}")).unwrap();
        apply(&mut d, &op("{op: add, path: /spec/ports/1, value: b}")).unwrap();
        apply(
            &mut d,
            &op("{op: add, path: /spec/hostNetwork, value: true}"),
        )
        .unwrap();
        apply(&mut d, &op("{op: replace, path: /spec/ports/0, value: A}")).unwrap();
        apply(&mut d, &op("{op: remove, path: /spec/env}")).unwrap();
        apply(&mut d, &op("{op: test, path: /spec/ports/3, value: d}")).unwrap();
        assert_eq!(d, doc("spec: {ports: [A, b, c, d], hostNetwork: true}"));

        for bad in [
            "{op: replace, path: /spec/missing, value: 1}",
            "{op: remove, path: /spec/ports/9}",
            "{op: add, path: /nowhere/x, value: 1}",
            "{op: add, path: /spec/ports/7, value: x}",
            "{op: add, path: /spec/ports/-}",
            "{op: move, path: /spec/ports/0}",
            "{op: test, path: /spec/ports/0, value: z}",
            "{op: add, path: spec, value: 1}",
        ] {
            assert!(apply(&mut d.clone(), &op(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn pointer_tokens_unescape_slash_and_tilde() {
        let mut d = doc("metadata: {annotations: {}}");
        let o = op("{op: add, path: /metadata/annotations/a~1b~0c, value: v}");
        apply(&mut d, &o).unwrap();
        assert_eq!(d["metadata"]["annotations"]["a/b~c"].as_str(), Some("v"));
    }

    #[test]
    fn canonical_form_ignores_key_order_only() {
        assert_eq!(
            canonical(&doc("{a: 1, b: [x, y]}")),
            canonical(&doc("{b: [x, y], a: 1}"))
        );
        assert_ne!(
            canonical(&doc("{b: [y, x]}")),
            canonical(&doc("{b: [x, y]}"))
        );
        let round = emit(&[doc("{s: \"true\", n: 5, t: \"a\\nb\"}")]);
        assert_eq!(
            canonical(&YamlLoader::load_from_str(&round).unwrap()[0]),
            canonical(&doc("{s: \"true\", n: 5, t: \"a\\nb\"}"))
        );
    }
}
