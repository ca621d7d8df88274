//! Generates the `callgate.dialog.v1` client from `proto/dialog.proto` with
//! protox (pure Rust, no system `protoc`). Client only: the server side lives
//! in the simulator, which compiles the proto itself.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let proto_dir = manifest.join("../../proto");
    println!(
        "cargo:rerun-if-changed={}",
        proto_dir.join("dialog.proto").display()
    );
    let fds = protox::compile(["dialog.proto"], [&proto_dir])?;
    tonic_prost_build::configure()
        .build_server(false)
        .build_client(true)
        .compile_fds(fds)?;
    Ok(())
}
