//! Decodes filter blocks and prints what they hold: a filter block file, a range filter block
//! file (FORMAT.md §9: its keys, design range and promised rates), an SSTable (its filter
//! block plus table properties), or a database directory (every live table's filter, per
//! level, plus totals).
//!
//! `cargo run --release --example dump_filter -- PATH [--json] [--budget-bits-per-key B |
//!  --budget-bytes N] [--budget-kind KIND]`
//!
//! For a database directory, each level line shows its filter kinds, the bits/key its tables
//! were written with (a budget's allocation, when the store ran with one), filter bytes and
//! expected FPR. When the store runs with a filter budget, its options record (`OPTIONS`,
//! FORMAT.md §6) holds it, and the per-level allocation `Options::filter_budget` makes for the
//! directory's current shape is printed too; `--budget-...` shows another budget's instead.
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
    /// A filter block file, a range filter block file, an SSTable (`*.sst`) or a database
    /// directory.
    path: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Show the allocation of a filter budget of this many bits/key on average.
    #[arg(long, conflicts_with = "budget_bytes")]
    budget_bits_per_key: Option<f64>,
    /// Show the allocation of a filter budget of this many bytes in all.
    #[arg(long)]
    budget_bytes: Option<u64>,
    /// One filter kind for every level of the budget (default: blocked above the largest
    /// level, ribbon from it down).
    #[arg(long)]
    budget_kind: Option<lsm_bloom::FilterKind>,
    /// The store's `memtable_size` in bytes (the budget plans level 0 from it).
    #[arg(long, default_value_t = 8 << 20)]
    memtable_bytes: u64,
    /// The store's `l0_compaction_trigger`.
    #[arg(long, default_value_t = 4)]
    l0_compaction_trigger: usize,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let mut budget = match (args.budget_bits_per_key, args.budget_bytes) {
        (Some(b), _) => Some(lsm_bloom::FilterBudget::bits_per_key(b)),
        (None, Some(n)) => Some(lsm_bloom::FilterBudget::total_bytes(n)),
        (None, None) => None,
    };
    if let (Some(b), Some(kind)) = (budget.as_mut(), args.budget_kind) {
        *b = b.with_kind(kind);
    }
    let budget = budget.map(|budget| lsm_bloom::inspect::BudgetArgs {
        budget,
        memtable_bytes: args.memtable_bytes,
        l0_compaction_trigger: args.l0_compaction_trigger,
    });
    let report = match lsm_bloom::inspect::inspect_path_with_budget(&args.path, budget.as_ref()) {
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
