//! The power-loss file system against what a power cut may leave: synced bytes and synced
//! directory entries kept, a new directory only once its parent is synced, unsynced tails and
//! truncations as `UnsyncedTail` says, whole pages or zeros, and the cut at the operation chosen.

use super::*;

fn restored(fs: &PowerLossFs, from: &Path, tail: UnsyncedTail, seed: u64) -> Vec<String> {
    let to = tempfile::tempdir().unwrap();
    fs.write_durable(from, to.path(), tail, seed).unwrap();
    let mut out: Vec<String> = std::fs::read_dir(to.path())
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            let data = std::fs::read(&p).unwrap();
            format!(
                "{}={}",
                p.file_name().unwrap().to_string_lossy(),
                String::from_utf8_lossy(&data)
            )
        })
        .collect();
    out.sort();
    out
}

/// A directory made with `create_dir` and everything in it is gone after a power loss
/// until its parent is synced, however synced its files are.
#[test]
fn a_new_directory_survives_only_once_its_parent_is_synced() {
    let root = tempfile::tempdir().unwrap();
    let d = root.path().join("store");
    let fs = PowerLossFs::new();
    fs.create_dir(&d).unwrap();
    let mut a = fs.create(&d.join("a"), CreateMode::New).unwrap();
    a.write_all(b"one").unwrap();
    a.sync().unwrap();
    fs.sync_dir(&d).unwrap();
    assert_eq!(
        restored(&fs, &d, UnsyncedTail::Dropped, 1),
        Vec::<String>::new()
    );
    fs.sync_dir(root.path()).unwrap();
    assert_eq!(restored(&fs, &d, UnsyncedTail::Dropped, 1), ["a=one"]);
}

#[test]
fn only_synced_bytes_and_synced_entries_survive() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let fs = PowerLossFs::new();
    let mut a = fs.create(&d.join("a"), CreateMode::New).unwrap();
    a.write_all(b"one").unwrap();
    a.sync().unwrap();
    a.write_all(b"two").unwrap();
    // The entry is not durable yet.
    assert_eq!(
        restored(&fs, d, UnsyncedTail::Dropped, 1),
        Vec::<String>::new()
    );
    fs.sync_dir(d).unwrap();
    assert_eq!(restored(&fs, d, UnsyncedTail::Dropped, 1), ["a=one"]);
    // Rename and remove are undone until the directory is synced again.
    let mut b = fs.create(&d.join("b"), CreateMode::New).unwrap();
    b.write_all(b"bee").unwrap();
    b.sync().unwrap();
    fs.rename(&d.join("b"), &d.join("a")).unwrap();
    assert_eq!(restored(&fs, d, UnsyncedTail::Dropped, 1), ["a=one"]);
    fs.sync_dir(d).unwrap();
    assert_eq!(restored(&fs, d, UnsyncedTail::Dropped, 1), ["a=bee"]);
    fs.remove_file(&d.join("a")).unwrap();
    assert_eq!(restored(&fs, d, UnsyncedTail::Dropped, 1), ["a=bee"]);
    fs.sync_dir(d).unwrap();
    assert_eq!(
        restored(&fs, d, UnsyncedTail::Dropped, 1),
        Vec::<String>::new()
    );
    // The first file's handle still writes (to an unlinked inode): nothing comes back.
    a.write_all(b"three").unwrap();
    assert_eq!(
        restored(&fs, d, UnsyncedTail::RandomPrefix, 2),
        Vec::<String>::new()
    );
}

#[test]
fn unsynced_tails_and_truncations() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let fs = PowerLossFs::new();
    let mut f = fs.create(&d.join("f"), CreateMode::Truncate).unwrap();
    f.write_all(b"synced|").unwrap();
    f.sync().unwrap();
    fs.sync_dir(d).unwrap();
    f.write_all(b"0123456789").unwrap();
    let mut lengths = std::collections::BTreeSet::new();
    for seed in 0..200 {
        let got = restored(&fs, d, UnsyncedTail::RandomPrefix, seed);
        let data = got[0].strip_prefix("f=").unwrap();
        assert!("synced|0123456789".starts_with(data) && data.starts_with("synced|"));
        lengths.insert(data.len());
    }
    assert_eq!(lengths.len(), 11, "every prefix of the tail is possible");
    // A truncation below the synced bytes is durable only after a sync.
    f.truncate(3).unwrap();
    assert_eq!(
        restored(&fs, d, UnsyncedTail::RandomPrefix, 7),
        ["f=synced|"]
    );
    f.sync().unwrap();
    assert_eq!(restored(&fs, d, UnsyncedTail::RandomPrefix, 7), ["f=syn"]);
    // Re-creating with truncation: the old bytes stay until a sync.
    let mut g = fs.create(&d.join("f"), CreateMode::Truncate).unwrap();
    g.write_all(b"new").unwrap();
    assert_eq!(restored(&fs, d, UnsyncedTail::Dropped, 7), ["f=syn"]);
    g.sync().unwrap();
    assert_eq!(restored(&fs, d, UnsyncedTail::Dropped, 7), ["f=new"]);
}

#[test]
fn random_pages_keep_whole_pages_or_zeros() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let fs = PowerLossFs::new();
    let mut f = fs.create(&d.join("f"), CreateMode::New).unwrap();
    f.write_all(&[1u8; 100]).unwrap();
    f.sync().unwrap();
    fs.sync_dir(d).unwrap();
    f.write_all(&[2u8; 3 * PAGE]).unwrap();
    let mut shapes = std::collections::BTreeSet::new();
    for seed in 0..64 {
        let to = tempfile::tempdir().unwrap();
        fs.write_durable(d, to.path(), UnsyncedTail::RandomPages, seed)
            .unwrap();
        let data = std::fs::read(to.path().join("f")).unwrap();
        assert_eq!(&data[..100], &[1u8; 100][..]);
        // Page boundaries by file offset: 100..4096, then whole pages, then the rest.
        let bounds = [100, PAGE, 2 * PAGE, 3 * PAGE, 3 * PAGE + 100];
        assert!(bounds.contains(&data.len()), "{}", data.len());
        let pages: Vec<bool> = bounds
            .windows(2)
            .filter(|w| w[1] <= data.len())
            .map(|w| {
                let page = &data[w[0]..w[1]];
                assert!(page.iter().all(|&b| b == 2) || page.iter().all(|&b| b == 0));
                page[0] == 2
            })
            .collect();
        assert!(pages.last().is_none_or(|&kept| kept), "ends at a kept page");
        shapes.insert(pages);
    }
    assert!(shapes.len() > 6, "{shapes:?}");
}

#[test]
fn the_power_goes_at_the_chosen_operation() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let fs = PowerLossFs::new();
    fs.cut_at(3);
    let mut f = fs.create(&d.join("f"), CreateMode::New).unwrap(); // 1
    f.write_all(b"abc").unwrap(); // 2
    assert_eq!(f.sync().unwrap_err().raw_os_error(), Some(5)); // 3
    assert!(fs.is_cut());
    assert!(fs.sync_dir(d).is_err());
    assert!(f.write_all(b"def").is_err());
    assert_eq!(
        std::fs::read(d.join("f")).unwrap(),
        b"abc",
        "nothing after the cut"
    );
    assert_eq!(fs.ops(), 5);
    // Adopting a directory takes every file there as durable.
    std::fs::write(d.join("g"), b"gee").unwrap();
    let fs = PowerLossFs::adopting(d).unwrap();
    assert_eq!(
        restored(&fs, d, UnsyncedTail::Dropped, 0),
        ["f=abc", "g=gee"]
    );
}
