//! Decodes filter blocks and prints what they hold: a filter block file, an SSTable (its filter
//! block plus table properties), or a database directory (every live table's filter, per
//! level, plus totals).
//!
//! `cargo run --release --example dump_filter -- PATH [--json]`
//!
//! Exit 0 when everything read is valid; exit 1 with one line `error: <what is wrong>` on
//! stderr otherwise (for a table or database whose filter is damaged, the report of what could
//! be read is still printed on stdout).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

/// Decode filter blocks (from a filter file, an SSTable or a database directory).
#[derive(Parser)]
#[command(about)]
struct Args {
    /// A filter block file, an SSTable (`*.sst`) or a database directory.
    path: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let report = match lsm_bloom::inspect::inspect_path(&args.path) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    if args.json {
        match serde_json::to_string_pretty(&report) {
            Ok(json) => println!("{json}"),
            Err(e) => {
                eprintln!("error: cannot encode JSON: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        print!("{}: {report}", args.path.display());
    }
    let problems = report.problems();
    match problems.first() {
        None => ExitCode::SUCCESS,
        Some(first) if problems.len() == 1 => {
            eprintln!("error: {first}");
            ExitCode::FAILURE
        }
        Some(first) => {
            eprintln!(
                "error: {} invalid filter blocks; first: {first}",
                problems.len()
            );
            ExitCode::FAILURE
        }
    }
}
