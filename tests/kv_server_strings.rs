//! `kv_server`'s read-modify-write string commands against Redis itself: the same random
//! stream of INCR, DECR, INCRBY, DECRBY, INCRBYFLOAT, APPEND, GETSET, SETRANGE, GETRANGE,
//! MSETNX, COPY, RENAME and RENAMENX, with SET (plain and with an absolute expiry), GET,
//! STRLEN, DEL, EXISTS, PEXPIRETIME (whether a command kept the expiry) and SELECT among them,
//! on values that are integers, floats, near the integer limits, or text, with bad arguments
//! too, goes to a `kv_server` and to Debian's `redis-server`; every reply must be equal byte for
//! byte. INCRBYFLOAT runs on keys of its own holding small values, and its increments are
//! exact in binary: it computes in `f64` where Redis uses `long double` (`strings.rs`), so on
//! values past 2^53 the last digits differ.
//!
//! Needs `redis-server`: skipped without it, unless `LSM_BLOOM_REQUIRE_REDIS_SERVER=1`.

mod common;

use std::time::{SystemTime, UNIX_EPOCH};

use common::kv::*;
use common::redis::{pair, Pair};
use common::Rng;

fn pick<'a>(rng: &mut Rng, from: &[&'a str]) -> &'a str {
    from[rng.below(from.len() as u64) as usize]
}

/// One random command; `at` an absolute expiry (ms) far ahead, the same for both servers.
fn random_command(rng: &mut Rng, at: u64) -> Vec<String> {
    let key = |rng: &mut Rng| format!("k{}", rng.below(5));
    let k = key(rng);
    let value = |rng: &mut Rng| -> String {
        pick(
            rng,
            &[
                "0",
                "7",
                "-3",
                "10.5",
                "abc",
                "",
                "9223372036854775806",
                "-9223372036854775807",
                "01",
                "+1",
                " 5",
                "2.75",
                "1e3",
                "x1",
            ],
        )
        .to_string()
    };
    let int = |rng: &mut Rng| -> String {
        pick(
            rng,
            &[
                "1",
                "-1",
                "0",
                "5",
                "-2",
                "100",
                "9223372036854775807",
                "-9223372036854775808",
                "x",
                "1.5",
                "",
                "-0",
            ],
        )
        .to_string()
    };
    let offset = |rng: &mut Rng| -> String {
        pick(rng, &["0", "1", "3", "-1", "-3", "10", "-100", "x", "100"]).to_string()
    };
    let words: Vec<String> = match rng.below(24) {
        0 | 1 => vec!["SET".into(), k, value(rng)],
        2 => vec![
            "SET".into(),
            k,
            value(rng),
            "PXAT".into(),
            (at + rng.below(5) * 1000).to_string(),
        ],
        3 => vec!["GET".into(), k],
        4 | 5 => vec![pick(rng, &["INCR", "DECR"]).into(), k],
        6 | 7 => vec![pick(rng, &["INCRBY", "DECRBY"]).into(), k, int(rng)],
        // Floats on keys of their own, holding small values only (see the module docs).
        8 => {
            let f = format!("f{}", rng.below(3));
            match rng.below(4) {
                0 => vec![
                    "SET".into(),
                    f,
                    pick(rng, &["1.5", "-2", "abc", "0"]).into(),
                ],
                1 => vec!["GET".into(), f],
                _ => vec![
                    "INCRBYFLOAT".into(),
                    f,
                    pick(rng, &["0.5", "-1.25", "3", "x", "", " 1", "2.5e1", "-0.75"]).into(),
                ],
            }
        }
        9 => vec!["APPEND".into(), k, pick(rng, &["1", "ab", "", "-"]).into()],
        10 => vec!["GETSET".into(), k, value(rng)],
        11 | 12 => vec!["GETRANGE".into(), k, offset(rng), offset(rng)],
        13 => vec![
            "SETRANGE".into(),
            k,
            offset(rng),
            pick(rng, &["zz", "", "q"]).into(),
        ],
        14 => {
            let mut w = vec!["MSETNX".into()];
            for _ in 0..1 + rng.below(3) {
                w.push(key(rng));
                w.push(value(rng));
            }
            if rng.below(8) == 0 {
                w.pop();
            }
            w
        }
        15 => vec![pick(rng, &["RENAME", "RENAMENX"]).into(), k, key(rng)],
        16 => {
            let mut w = vec!["COPY".into(), k, key(rng)];
            for _ in 0..rng.below(3) {
                match rng.below(4) {
                    0 => w.push("REPLACE".into()),
                    1 => w.extend(["DB".into(), pick(rng, &["0", "1", "99", "x"]).into()]),
                    2 => w.push("BAD".into()),
                    _ => {}
                }
            }
            w
        }
        17 => vec!["STRLEN".into(), k],
        18 => vec!["PEXPIRETIME".into(), k],
        19 => vec![pick(rng, &["DEL", "EXISTS"]).into(), k],
        20 => vec!["SELECT".into(), pick(rng, &["0", "1"]).into()],
        21 => vec![pick(
            rng,
            &[
                "INCR", "INCRBY", "APPEND", "GETRANGE", "SETRANGE", "RENAME", "COPY", "MSETNX",
            ],
        )
        .into()],
        _ => vec!["GET".into(), k],
    };
    words
}

/// An absolute expiry in whole seconds an hour ahead (ms): never reached while a test runs.
fn an_hour_ahead() -> u64 {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    (now.as_millis() as u64 / 1000 + 3_600) * 1000
}

#[test]
fn string_commands_answer_as_redis_does() {
    let dir = tempfile::tempdir().unwrap();
    let Some(Pair {
        redis: _redis,
        server,
        mut ours,
        mut theirs,
        ..
    }) = pair(dir.path())
    else {
        return;
    };
    let at = an_hour_ahead();
    let mut rng = Rng::new(58);
    let steps = if common::thorough() { 20_000 } else { 5_000 };
    let (mut integers, mut errors) = (0, 0);
    for step in 0..steps {
        let cmd = random_command(&mut rng, at);
        let args: Vec<&[u8]> = cmd.iter().map(|w| w.as_bytes()).collect();
        let (a, b) = (call(&mut ours, &args), call(&mut theirs, &args));
        assert_eq!(
            String::from_utf8_lossy(&a),
            String::from_utf8_lossy(&b),
            "step {step}: {cmd:?}"
        );
        integers += usize::from(cmd[0].starts_with("INCR") && a.starts_with(b":"));
        errors += usize::from(a.starts_with(b"-"));
    }
    // The stream must have reached both the sums and the errors.
    assert!(integers > 50, "only {integers} increments succeeded");
    assert!(errors > 100, "only {errors} errors");
    eprintln!("{steps} commands: {integers} increments, {errors} errors, all equal");
    stop(server);
}

/// The same stream sent as pipelines of up to 24 commands: a pipeline's runs of SETs and
/// counters are committed together (`Values::run_many`), each command seeing the ones before it.
#[test]
fn pipelined_string_commands_answer_as_redis_does() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let Some(Pair {
        redis: _redis,
        server,
        mut ours,
        mut theirs,
        ..
    }) = pair(dir.path())
    else {
        return;
    };
    let at = an_hour_ahead();
    let mut rng = Rng::new(5858);
    let pipelines = if common::thorough() { 2_000 } else { 400 };
    let mut counted = 0;
    for p in 0..pipelines {
        let cmds: Vec<Vec<String>> = (0..1 + rng.below(24))
            .map(|_| match rng.below(3) {
                // Mostly counters and plain SETs, so that runs form.
                0 => vec!["INCR".into(), format!("k{}", rng.below(3))],
                1 => vec![
                    "SET".into(),
                    format!("k{}", rng.below(3)),
                    ["1", "x", "9223372036854775807"][rng.below(3) as usize].into(),
                ],
                _ => random_command(&mut rng, at),
            })
            .collect();
        let bytes: Vec<u8> = cmds
            .iter()
            .flat_map(|c| command(&c.iter().map(|w| w.as_bytes()).collect::<Vec<_>>()))
            .collect();
        ours.write_all(&bytes).unwrap();
        theirs.write_all(&bytes).unwrap();
        for c in &cmds {
            let (a, b) = (reply(&mut ours), reply(&mut theirs));
            assert_eq!(
                String::from_utf8_lossy(&a),
                String::from_utf8_lossy(&b),
                "pipeline {p}: {c:?} of {cmds:?}"
            );
            counted += usize::from(c[0] == "INCR" && a.starts_with(b":"));
        }
    }
    assert!(counted > 200, "only {counted} INCRs counted");
    stop(server);
}
