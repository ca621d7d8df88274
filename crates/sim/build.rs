//! Compiles `proto/dialog.proto` for the dialog simulator with protox (pure
//! Rust, no system `protoc`). The simulator generates its own server so it
//! shares no code with callgate.

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
        .build_server(true)
        .build_client(false)
        .compile_fds(fds)?;
    Ok(())
}
