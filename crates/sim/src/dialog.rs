//! Placeholder — being written (see the helper brief).
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct DialogSimConfig {}

#[derive(Debug, Clone)]
pub struct DialogSim {}

impl DialogSim {
    pub fn new(_cfg: DialogSimConfig) -> Self {
        DialogSim {}
    }
    pub async fn serve_grpc(self, _l: TcpListener, _c: CancellationToken) -> anyhow::Result<()> {
        Ok(())
    }
    pub async fn serve_http(self, _l: TcpListener, _c: CancellationToken) -> anyhow::Result<()> {
        Ok(())
    }
}
