//! The process's log output: installed once, by the binary, never by the
//! server library.

/// Installs the tracing subscriber (text or JSON, to stderr) once; `RUST_LOG`
/// overrides `filter`.
pub fn init(format: &str, filter: &str) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = if format == "json" {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}
