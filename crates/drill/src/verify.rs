//! `callgate drill verify`: a receipt's signature, and every session
//! receipt it references — against the copy beside it, and (given an
//! instance) against the ledger as it is now.

use std::path::Path;

use serde_json::Value;

use crate::error::DrillError;
use crate::knee;
use crate::receipt::{Receipt, receipt_digest};
use crate::sign;
use crate::target::Instance;

/// What a verification found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verified {
    /// The signer's public key (hex).
    pub signed_by: String,
    pub verdict: String,
    /// Session receipts checked against their copies.
    pub copies: usize,
    /// Session receipts checked against the ledger.
    pub ledger: usize,
    /// Everything that did not match, one line each; empty when sound.
    pub problems: Vec<String>,
}

impl Verified {
    pub fn sound(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Verifies `dir/receipt.yaml` (or the receipt file `path` names, its
/// folder beside it): the signature first — a receipt that fails it is
/// not read further — then each referenced session.
///
/// # Errors
/// The receipt cannot be read, or its signature or shape is wrong.
pub async fn folder(path: &Path, ledger: Option<&Instance>) -> Result<Verified, DrillError> {
    let (dir, file) = if path.is_dir() {
        (path.to_path_buf(), path.join("receipt.yaml"))
    } else {
        let dir = path.parent().unwrap_or(Path::new(".")).to_path_buf();
        (dir, path.to_path_buf())
    };
    let text = std::fs::read_to_string(&file)
        .map_err(|e| DrillError::Receipt(format!("{}: {e}", file.display())))?;
    let body = sign::verify(&text).map_err(|e| DrillError::Receipt(e.to_string()))?;
    if kind_of(body).as_deref() == Some(knee::KIND) {
        return knee_folder(&dir, body);
    }
    let receipt: Receipt = serde_yaml_ng::from_str(body)
        .map_err(|e| DrillError::Receipt(format!("the signed body does not parse: {e}")))?;
    let mut out = Verified {
        signed_by: receipt.signed_by.clone(),
        verdict: format!("{:?}", receipt.decision.verdict).to_lowercase(),
        ..Verified::default()
    };
    for (family, w) in &receipt.worst_sessions {
        let copy = dir.join(&w.receipt);
        match read_json(&copy) {
            Ok(v) if receipt_digest(&v) == w.receipt_sha256 => out.copies += 1,
            Ok(_) => out.problems.push(format!(
                "{family}: {} differs from the receipt it was signed with",
                w.receipt
            )),
            Err(e) => out.problems.push(format!("{family}: {e}")),
        }
        if let Some(instance) = ledger {
            match instance.receipt(&w.session_id).await {
                Ok(v) if receipt_digest(&v) == w.receipt_sha256 => out.ledger += 1,
                Ok(_) => out.problems.push(format!(
                    "{family}: session {} no longer matches its ledger row",
                    w.session_id
                )),
                Err(e) => out.problems.push(format!(
                    "{family}: session {} could not be read: {e}",
                    w.session_id
                )),
            }
        }
    }
    Ok(out)
}

/// The `kind:` a signed body names, if it parses at all.
fn kind_of(body: &str) -> Option<String> {
    let v: serde_yaml_ng::Value = serde_yaml_ng::from_str(body).ok()?;
    v.get("kind")?.as_str().map(str::to_string)
}

/// A knee receipt: its staircase files against their digests.
fn knee_folder(dir: &Path, body: &str) -> Result<Verified, DrillError> {
    let receipt: knee::KneeReceipt = serde_yaml_ng::from_str(body)
        .map_err(|e| DrillError::Receipt(format!("the signed body does not parse: {e}")))?;
    let (copies, problems) = receipt.check_files(dir);
    Ok(Verified {
        signed_by: receipt.signed_by.clone(),
        verdict: format!(
            "knee {} calls, recommended cap {} ({})",
            receipt.finding.knee,
            receipt.finding.recommended_max_concurrent_calls,
            if receipt.finding.found {
                "found"
            } else {
                "not found: a floor"
            }
        ),
        copies,
        ledger: 0,
        problems,
    })
}

fn read_json(path: &Path) -> Result<Value, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}
