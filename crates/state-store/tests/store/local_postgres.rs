//! The throwaway cluster: a real postmaster on a private socket, gone after
//! `stop()`.

use crate::common;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_postgres_reports_its_postmaster_and_cleans_up() {
    let pg = common::start_pg();
    let pid = pg.pid().unwrap();
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap();
    assert!(comm.starts_with("postgres"), "pid {pid} is {comm:?}");
    let dir = pg.socket_dir().to_path_buf();
    assert!(dir.exists());
    pg.stop().unwrap();
    assert!(!dir.exists());
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists() || {
            // The postmaster may linger as a zombie for a moment; it must not
            // be running.
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            stat.contains(") Z")
        }
    );
}
