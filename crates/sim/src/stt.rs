//! Placeholder — being written (see the helper brief).
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct SttSimConfig {}

#[derive(Debug, Clone)]
pub struct SttSim {}

impl SttSim {
    pub fn new(_cfg: SttSimConfig) -> Self {
        SttSim {}
    }
    pub async fn serve(self, _l: TcpListener, _c: CancellationToken) -> anyhow::Result<()> {
        Ok(())
    }
}
