//! Tests of the filters' bytes (`bloom.rs`).

use super::*;

#[test]
fn a_header_round_trips_and_damage_is_named() {
    let h = Header {
        params: Params {
            error_rate: 0.001,
            capacity: 1000,
            expansion: 0,
        },
        items: 7,
        item_bytes: 70,
        generation: 3,
    };
    let b = h.encode();
    assert_eq!(b.len(), HEADER_LEN);
    assert_eq!(Header::decode(&b).unwrap(), h);
    let mut cut = b.clone();
    cut.pop();
    assert!(Header::decode(&cut).unwrap_err().contains("damaged"));
    let mut version = b.clone();
    version[0] = 9;
    assert!(Header::decode(&version).unwrap_err().contains("version 9"));
    let mut capacity = b.clone();
    capacity[9..17].copy_from_slice(&0u64.to_le_bytes());
    assert!(Header::decode(&capacity)
        .unwrap_err()
        .contains("capacity 0"));
    // Every byte changed: decodes or is refused by name, never panics.
    for i in 0..b.len() {
        for x in [0u8, 1, 0x7f, 0xff] {
            let mut d = b.clone();
            d[i] = x;
            if let Err(e) = Header::decode(&d) {
                assert!(e.contains("damaged"), "{e}");
            }
        }
    }
}

#[test]
fn item_keys_of_two_generations_never_meet() {
    assert_ne!(item_key(1, b"x"), item_key(2, b"x"));
    assert!(item_key(1, b"\xff\xff").as_slice() < item_key(2, b"").as_slice());
    assert_eq!(&header_key(b"k")[..], b"hk");
}
