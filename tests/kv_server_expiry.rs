//! `kv_server`'s expiry commands against Redis itself: the same random stream of SET (with
//! EX|PX|EXAT|PXAT|KEEPTTL, NX|XX, GET), SETEX, PSETEX, GETEX, EXPIRE, PEXPIRE, EXPIREAT,
//! PEXPIREAT (NX|XX|GT|LT), TTL, PTTL, EXPIRETIME, PEXPIRETIME, PERSIST, GET, DEL and EXISTS,
//! with bad arguments among them, goes to a `kv_server` and to Debian's `redis-server`, and
//! every reply must be equal byte for byte — the relative times (TTL, PTTL and the
//! expiry times of keys given relative ones) within a clock tolerance.
//!
//! Keys are made to expire while the stream runs by absolute expiries on a 100 ms grid, the
//! same for both servers; a command is never sent within 5 ms of a grid point, so both
//! servers see a key on the same side of its expiry. Relative expiries are long whole seconds
//! (they test what is stored and reported, not the moment of expiry), set 50 ms off the
//! grid, so that TTL and EXPIRETIME, in seconds, must be equal too; PTTL and PEXPIRETIME may
//! differ by the milliseconds between the two servers' readings.
//!
//! Needs `redis-server` (`apt-get install redis-server`): skipped without it, unless
//! `LSM_BLOOM_REQUIRE_REDIS_SERVER=1` (as `.ci/run` sets).

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::kv::*;
use common::redis::{pair, Pair};
use common::Rng;

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// The grid absolute expiries lie on (ms).
const GRID: u64 = 100;

/// Waits until the clock is at least 5 ms from a grid point and from the middle between two:
/// a key expiring on the grid then lies on the same side of its expiry for both servers, and
/// no time left in seconds (or expiry time in seconds) lies near a half second, where the two
/// servers' readings could round apart (`mid_grid`).
fn away_from_the_grid() {
    loop {
        let off = now_ms() % GRID;
        if (5..45).contains(&off) || (55..95).contains(&off) {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Waits until the clock is in the middle between two grid points: a relative expiry of whole
/// seconds set now falls 50 ms off the grid, so its time left in seconds is never read near a
/// half second (`away_from_the_grid`).
fn mid_grid() {
    loop {
        let off = now_ms() % GRID;
        if (49..=51).contains(&off) {
            return;
        }
        std::thread::sleep(Duration::from_micros(500));
    }
}

/// Whether `cmd` sets an expiry relative to now.
fn relative(cmd: &[Vec<u8>]) -> bool {
    let name = cmd[0].to_ascii_uppercase();
    matches!(
        name.as_slice(),
        b"SETEX" | b"PSETEX" | b"EXPIRE" | b"PEXPIRE"
    ) || cmd[1..]
        .iter()
        .any(|w| matches!(w.to_ascii_uppercase().as_slice(), b"EX" | b"PX"))
}

/// One random command of the stream (`t` a few grid points ahead, for absolute expiries).
fn random_command(rng: &mut Rng) -> Vec<Vec<u8>> {
    let key = format!("k{}", rng.below(6));
    let grid_ms = (now_ms() / GRID + 1 + rng.below(8)) * GRID;
    let long_s = 1_000 + rng.below(1_000); // relative expiries: long, never reached
    let opt_expiry = |rng: &mut Rng| -> Vec<String> {
        match rng.below(9) {
            0 => vec!["EX".into(), long_s.to_string()],
            1 => vec!["PX".into(), (long_s * 1000).to_string()],
            2 => vec!["EXAT".into(), (grid_ms / 1000 + 1).to_string()],
            3 => vec!["PXAT".into(), grid_ms.to_string()],
            4 => vec!["KEEPTTL".into()],
            5 => vec!["PXAT".into(), (grid_ms - 10 * GRID * 10).to_string()], // past
            6 => vec![
                "EX".into(),
                ["0", "-5", "x", "1.5", "9223372036854775807"][rng.below(5) as usize].into(),
            ],
            _ => vec![],
        }
    };
    let words: Vec<String> = match rng.below(22) {
        0..=3 => {
            let mut w = vec!["SET".into(), key, format!("v{}", rng.below(100))];
            for _ in 0..rng.below(3) {
                match rng.below(4) {
                    0 => w.push("NX".into()),
                    1 => w.push("XX".into()),
                    2 => w.push("GET".into()),
                    _ => w.extend(opt_expiry(rng)),
                }
            }
            w
        }
        4 => vec![
            "SETEX".into(),
            key,
            ["100", "0", "-1", "abc"][rng.below(4) as usize].into(),
            "v".into(),
        ],
        5 => vec![
            "PSETEX".into(),
            key,
            ["100000", "0", "x"][rng.below(3) as usize].into(),
            "v".into(),
        ],
        6 | 7 => {
            let mut w = vec!["GETEX".into(), key];
            match rng.below(4) {
                0 => w.push("PERSIST".into()),
                1 => {}
                _ => w.extend(opt_expiry(rng)),
            }
            w
        }
        8..=11 => {
            let (cmd, t) = match rng.below(5) {
                0 => ("EXPIRE", long_s.to_string()),
                1 => ("PEXPIRE", (long_s * 1000).to_string()),
                2 => ("EXPIREAT", (grid_ms / 1000 + 1).to_string()),
                3 => ("PEXPIREAT", grid_ms.to_string()),
                _ => (
                    "EXPIRE",
                    ["-1", "0", "x", "99999999999999999"][rng.below(4) as usize].to_string(),
                ),
            };
            let mut w = vec![cmd.into(), key, t];
            for _ in 0..rng.below(3) {
                w.push(["NX", "XX", "GT", "LT", "nx", "bad"][rng.below(6) as usize].into());
            }
            w
        }
        12 => vec!["TTL".into(), key],
        13 => vec!["PTTL".into(), key],
        14 => vec!["EXPIRETIME".into(), key],
        15 => vec!["PEXPIRETIME".into(), key],
        16 => vec!["PERSIST".into(), key],
        17 | 18 => vec!["GET".into(), key],
        19 => vec!["DEL".into(), key],
        20 => match rng.below(2) {
            0 => vec!["EXISTS".into(), key],
            _ => vec!["SET".into(), key, "kept".into(), "KEEPTTL".into()],
        },
        _ => vec![["TTL", "EXPIRE", "SETEX", "GETEX"][rng.below(4) as usize].into()],
    };
    words.into_iter().map(String::into_bytes).collect()
}

/// An integer reply's value.
fn int(reply: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(reply.strip_prefix(b":")?).ok()?;
    s.trim_end().parse().ok()
}

/// Whether two replies to `cmd` agree: equal bytes, or for the commands that report a time
/// left (or an expiry set relative to now), integers within the clock tolerance.
fn agree(cmd: &[u8], ours: &[u8], theirs: &[u8]) -> bool {
    if ours == theirs {
        return true;
    }
    let tolerance = match cmd.to_ascii_uppercase().as_slice() {
        b"PTTL" | b"PEXPIRETIME" => 10,
        _ => return false,
    };
    match (int(ours), int(theirs)) {
        (Some(a), Some(b)) if a >= 0 && b >= 0 => (a - b).abs() <= tolerance,
        _ => false,
    }
}

#[test]
fn expiry_commands_answer_as_redis_does() {
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
    let mut rng = Rng::new(57);
    let steps = if std::env::var_os("LSM_BLOOM_THOROUGH").is_some() {
        4_000
    } else {
        2_000
    };
    let (mut expired_reads, mut differing_times) = (0, 0);
    for step in 0..steps {
        if rng.below(40) == 0 {
            std::thread::sleep(Duration::from_millis(rng.below(250)));
        }
        let cmd = random_command(&mut rng);
        let args: Vec<&[u8]> = cmd.iter().map(Vec::as_slice).collect();
        match relative(&cmd) {
            true => mid_grid(),
            false => away_from_the_grid(),
        }
        let (a, b) = (call(&mut ours, &args), call(&mut theirs, &args));
        let shown: Vec<String> = cmd
            .iter()
            .map(|w| String::from_utf8_lossy(w).into())
            .collect();
        assert!(
            agree(&cmd[0], &a, &b),
            "step {step}: {shown:?}\n kv_server: {:?}\n     redis: {:?}",
            String::from_utf8_lossy(&a),
            String::from_utf8_lossy(&b)
        );
        differing_times += usize::from(a != b);
        expired_reads += usize::from(cmd[0] == b"GET" && a == b"$-1\r\n");
    }
    // The stream must have reached keys gone, and not only agreed on what is trivial.
    assert!(expired_reads > 20, "only {expired_reads} GETs found no key");
    eprintln!("{steps} commands; {differing_times} time replies within tolerance, not equal");
    stop(server);
}

/// A pipeline's SETs with an expiry are committed together with the plain ones
/// (`Values::set_many`); each keeps its own expiry, and one whose expiry is bad runs alone
/// with its own error, as in Redis.
#[test]
fn pipelined_sets_with_expiries_answer_as_redis_does() {
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
    mid_grid();
    let past = (now_ms() - 10_000).to_string();
    let cmds: Vec<Vec<&[u8]>> = vec![
        vec![b"SET", b"a", b"1"],
        vec![b"SET", b"b", b"2", b"EX", b"100"],
        vec![b"SET", b"c", b"3", b"px", b"200000"],
        vec![b"SET", b"d", b"4", b"EX", b"0"],
        vec![b"SET", b"e", b"5", b"PXAT", past.as_bytes()],
        vec![b"SET", b"a", b"6", b"EX", b"300"],
        vec![b"SET", b"f", b"7", b"EX", b"x"],
    ];
    let pipeline: Vec<u8> = cmds.iter().flat_map(|c| command(c)).collect();
    for s in [&mut ours, &mut theirs] {
        s.write_all(&pipeline).unwrap();
    }
    for c in &cmds {
        let (a, b) = (reply(&mut ours), reply(&mut theirs));
        assert_eq!(a, b, "{:?}", String::from_utf8_lossy(&c.concat()));
    }
    away_from_the_grid();
    for k in [b"a", b"b", b"c", b"d", b"e", b"f"] {
        for cmd in [&b"GET"[..], b"TTL", b"PTTL"] {
            let (a, b) = (call(&mut ours, &[cmd, k]), call(&mut theirs, &[cmd, k]));
            assert!(agree(cmd, &a, &b), "{cmd:?} {k:?}: {a:?} vs {b:?}");
        }
    }
    stop(server);
}

/// INFO's `# Keyspace` line counts the keys with an expiry (`expires=`), per database, with
/// their mean time left (`avg_ttl`, sampled), and `# Stats` names `expired_keys` (the store's
/// `expired_entries_dropped`).
#[test]
fn info_counts_keys_with_an_expiry() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let server = start(dir.path(), port);
    let mut s = connect(port);
    for (k, ex) in [
        ("a", None),
        ("b", Some("100")),
        ("c", Some("200")),
        ("d", None),
    ] {
        let mut cmd: Vec<&[u8]> = vec![b"SET", k.as_bytes(), b"v"];
        if let Some(ex) = ex {
            cmd.extend([&b"EX"[..], ex.as_bytes()]);
        }
        assert_eq!(call(&mut s, &cmd), b"+OK\r\n");
    }
    assert_eq!(call(&mut s, &[b"SELECT", b"2"]), b"+OK\r\n");
    assert_eq!(call(&mut s, &[b"SETEX", b"e", b"50", b"v"]), b"+OK\r\n");
    let info = String::from_utf8(call(&mut s, &[b"INFO"])).unwrap();
    let line = |p: &str| info.lines().find(|l| l.starts_with(p)).map(str::to_string);
    // `avg_ttl`: the mean milliseconds left of the keys with an expiry (all of them sampled
    // here): 150 s in db0, 50 s in db2, less what passed since the writes.
    let avg = |db: &str, keys: &str| {
        let l = line(db).unwrap_or_else(|| panic!("no {db} line: {info}"));
        let rest = l
            .strip_prefix(&format!("{db}{keys},avg_ttl="))
            .unwrap_or_else(|| {
                panic!("{l}");
            });
        rest.parse::<u64>().unwrap()
    };
    let ms = avg("db0:", "keys=4,expires=2");
    assert!((140_000..=150_000).contains(&ms), "db0 avg_ttl {ms}");
    let ms = avg("db2:", "keys=1,expires=1");
    assert!((40_000..=50_000).contains(&ms), "db2 avg_ttl {ms}");
    assert_eq!(
        line("expired_keys:").as_deref(),
        Some("expired_keys:0"),
        "{info}"
    );
    stop(server);
}
