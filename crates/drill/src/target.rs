//! What the drill is pointed at: the balancer callers dial, and each
//! instance's operator surface (`/admin/*`, `/v1/sessions`), asked with
//! bounded requests.

use std::time::Duration;

use serde_json::Value;

use crate::error::DrillError;

/// Bound on every request to an instance.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Where callers dial and with which credentials.
#[derive(Clone)]
pub struct Dialing {
    /// `ws://host:port` of the balancer (HAProxy's frontend): Twilio
    /// streams go to `/v1/media-stream`, partner calls to
    /// `/v1/partner/stream`.
    pub balancer: String,
    /// Twilio auth token: when set, upgrades carry `X-Twilio-Signature`.
    pub twilio_token: Option<String>,
    /// The partner API key partner calls present.
    pub partner_key: Option<String>,
    /// Places the SIP legs; `None`: no SIP leg runs (named in the receipt).
    pub sip: Option<std::sync::Arc<dyn crate::sip::SipDialer>>,
}

impl std::fmt::Debug for Dialing {
    /// Credentials stay out of logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dialing")
            .field("balancer", &self.balancer)
            .field("sip", &self.sip.is_some())
            .finish_non_exhaustive()
    }
}

impl Dialing {
    pub fn twilio_url(&self) -> String {
        format!("{}/v1/media-stream", self.balancer.trim_end_matches('/'))
    }

    pub fn partner_url(&self) -> String {
        format!("{}/v1/partner/stream", self.balancer.trim_end_matches('/'))
    }
}

/// One instance's operator surface.
#[derive(Debug, Clone)]
pub struct Instance {
    /// `http://host:port` of its admin listener.
    pub admin: String,
    token: Option<String>,
    http: reqwest::Client,
}

impl Instance {
    /// # Errors
    /// The HTTP client cannot be built (no TLS provider).
    pub fn new(admin: &str, token: Option<String>) -> Result<Instance, DrillError> {
        let http = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .build()
            .map_err(|e| DrillError::instance(admin, e))?;
        Ok(Instance {
            admin: admin.trim_end_matches('/').to_string(),
            token,
            http,
        })
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let req = self.http.request(method, format!("{}{path}", self.admin));
        match &self.token {
            Some(t) => req.bearer_auth(t),
            None => req,
        }
    }

    async fn json(&self, path: &str) -> Result<Value, DrillError> {
        let resp = self
            .request(reqwest::Method::GET, path)
            .send()
            .await
            .map_err(|e| DrillError::instance(&self.admin, format!("GET {path}: {e}")))?;
        let status = resp.status();
        let text = resp.text().await.unwrap_or_default();
        if !status.is_success() {
            let what = format!("GET {path}: {status}: {}", text.trim());
            return Err(DrillError::instance(&self.admin, what));
        }
        serde_json::from_str(&text)
            .map_err(|e| DrillError::instance(&self.admin, format!("GET {path}: {e}")))
    }

    /// `GET /admin/status`.
    ///
    /// # Errors
    /// No answer, a refusal or a body that is not JSON.
    pub async fn status(&self) -> Result<Value, DrillError> {
        self.json("/admin/status").await
    }

    /// `GET /admin/audit`: the violations of the whole ledger.
    ///
    /// # Errors
    /// As [`Instance::status`].
    pub async fn audit(&self) -> Result<Vec<Value>, DrillError> {
        let body = self.json("/admin/audit").await?;
        Ok(body["violations"].as_array().cloned().unwrap_or_default())
    }

    /// `GET /v1/sessions?carrier_call_id=…`: the sessions the carrier id was
    /// recorded under.
    ///
    /// # Errors
    /// As [`Instance::status`].
    pub async fn lookup(&self, carrier_call_id: &str) -> Result<Vec<Value>, DrillError> {
        let path = format!("/v1/sessions?carrier_call_id={carrier_call_id}");
        let body = self.json(&path).await?;
        Ok(body["sessions"].as_array().cloned().unwrap_or_default())
    }

    /// `GET /v1/sessions/{id}`: the session's receipt.
    ///
    /// # Errors
    /// As [`Instance::status`].
    pub async fn receipt(&self, session_id: &str) -> Result<Value, DrillError> {
        self.json(&format!("/v1/sessions/{session_id}")).await
    }

    async fn post(&self, path: &str) -> Result<(u16, String), DrillError> {
        let resp = self
            .request(reqwest::Method::POST, path)
            .send()
            .await
            .map_err(|e| DrillError::instance(&self.admin, format!("POST {path}: {e}")))?;
        let status = resp.status().as_u16();
        Ok((status, resp.text().await.unwrap_or_default()))
    }

    /// `POST /admin/drain`.
    ///
    /// # Errors
    /// No answer, or an answer other than 202.
    pub async fn drain(&self) -> Result<(), DrillError> {
        match self.post("/admin/drain").await? {
            (202, _) => Ok(()),
            (s, body) => Err(DrillError::instance(
                &self.admin,
                format!("POST /admin/drain: {s}: {}", body.trim()),
            )),
        }
    }

    /// `POST /admin/undrain`; `Ok(false)` when the instance refused (409:
    /// its drain already finished, or it was not draining).
    ///
    /// # Errors
    /// No answer, or an answer other than 200 or 409.
    pub async fn undrain(&self) -> Result<bool, DrillError> {
        match self.post("/admin/undrain").await? {
            (200, _) => Ok(true),
            (409, _) => Ok(false),
            (s, body) => Err(DrillError::instance(
                &self.admin,
                format!("POST /admin/undrain: {s}: {}", body.trim()),
            )),
        }
    }
}
