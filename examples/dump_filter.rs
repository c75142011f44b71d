//! Decodes filter blocks and prints what they hold.
//!
//! `cargo run --release --example dump_filter -- PATH [--json]`
//!
//! Exit 0 when everything read is valid; exit 1 with one line `error: <what is wrong>` on
//! stderr otherwise.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

/// Decode a filter block file and print its parameters.
#[derive(Parser)]
#[command(about)]
struct Args {
    /// A filter block file (`*.filter`).
    path: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match lsm_bloom::inspect::inspect_path(&args.path) {
        Ok(report) if args.json => match serde_json::to_string_pretty(&report) {
            Ok(json) => {
                println!("{json}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: cannot encode JSON: {e}");
                ExitCode::FAILURE
            }
        },
        Ok(report) => {
            println!("{}: {report}", args.path.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
