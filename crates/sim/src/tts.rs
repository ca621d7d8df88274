//! Placeholder — being written (see the helper brief).
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct TtsSimConfig {}

#[derive(Debug, Clone)]
pub struct TtsSim {}

impl TtsSim {
    pub fn new(_cfg: TtsSimConfig) -> Self {
        TtsSim {}
    }
    pub async fn serve(self, _l: TcpListener, _c: CancellationToken) -> anyhow::Result<()> {
        Ok(())
    }
}
