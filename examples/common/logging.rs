//! What the binaries among the examples (`kv_server`, `replication_bench`) share to print the
//! store's `tracing` events: a `tracing-subscriber` writing to stderr.

/// Prints events to stderr, filtered by `RUST_LOG`, or by `default` (an `EnvFilter`
/// directive such as `info,openraft=warn`) when it is unset or invalid.
pub fn init(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}
