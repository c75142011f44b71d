//! The options record: round trips, damage, conversions, and each merge rule of `resolve`.

use super::*;
use crate::filter::FilterKind;

fn budget_store() -> Options {
    Options::default().with_filters(Some(Filters::Budget(FilterBudget::bits_per_key(8.0))))
}

fn prefixed() -> StoredOptions {
    StoredOptions::of(
        &Options::default()
            .with_prefix_filters(Some(PrefixFilters::with(PrefixExtractor::fixed(3)))),
    )
}

#[test]
fn records_round_trip_and_every_damage_is_refused() {
    let o = Options::default()
        .with_filters(Some(
            Filters::fixed(FilterPolicy::bits_per_key(FilterKind::Ribbon, 7.5)).without_on(0),
        ))
        .with_prefix_filters(Some(PrefixFilters::only(PrefixExtractor::delimiter(
            b':', 2,
        ))));
    let data = StoredOptions::of(&o);
    let bytes = encode(&data).unwrap();
    let path = Path::new("OPTIONS");
    assert_eq!(decode(path, &bytes).unwrap(), data);
    for i in 0..bytes.len() {
        for bit in [0x01u8, 0x80] {
            let mut b = bytes.clone();
            b[i] ^= bit;
            assert!(decode(path, &b).is_err(), "flip at {i} accepted");
        }
    }
    for len in 0..bytes.len() {
        assert!(
            decode(path, &bytes[..len]).is_err(),
            "cut at {len} accepted"
        );
    }
    let mut longer = bytes.clone();
    longer.push(0);
    assert!(decode(path, &longer).is_err());
}

#[test]
fn a_record_holding_invalid_options_is_refused_naming_them() {
    let o = Options::default().with_filters(Some(Filters::fixed(FilterPolicy::bits_per_key(
        FilterKind::Blocked,
        -3.0,
    ))));
    let bytes = encode(&StoredOptions::of(&o)).unwrap();
    let e = decode(Path::new("d/OPTIONS"), &bytes)
        .unwrap_err()
        .to_string();
    assert!(e.contains("d/OPTIONS") && e.contains("not valid"), "{e}");
    // No whole-key filters and no prefix rule: not a setting `Options` can hold.
    let mut data = StoredOptions::of(&Options::default());
    data.prefix.whole_key_filtering = false;
    let e = decode(Path::new("d/OPTIONS"), &encode(&data).unwrap())
        .unwrap_err()
        .to_string();
    assert!(e.contains("no whole-key filters"), "{e}");
}

#[test]
fn every_setting_converts_to_its_record_and_back() {
    let ribbon = FilterPolicy::bits_per_key(FilterKind::Ribbon, 7.0);
    for f in [
        Filters::default(),
        Filters::Budget(FilterBudget::total_bytes(1 << 20)),
        Filters::fixed(ribbon),
        Filters::fixed(ribbon)
            .without_on(0)
            .with_level(3, Some(FilterPolicy::default())),
        Filters::None,
    ] {
        assert_eq!(Filters::from(&FilterChoice::from(&f)), f);
    }
    for p in [
        PrefixFilters::None,
        PrefixFilters::with(PrefixExtractor::fixed(4)),
        PrefixFilters::only(PrefixExtractor::delimiter(b'/', 2)),
    ] {
        assert_eq!(PrefixFilters::try_from(&PrefixChoice::from(p)), Ok(p));
    }
    // A record of no policy but on one level (written before `Filters`) reads as the
    // same filters: that level's policy, none on every other.
    let old = FilterChoice {
        policy: None,
        per_level: [(2, Some(ribbon))].into(),
        budget: None,
    };
    let f = Filters::from(&old);
    let levels: Vec<_> = (0..MAX_LEVELS).map(|l| f.policy_for_level(l)).collect();
    let mut want = vec![None; MAX_LEVELS];
    want[2] = Some(ribbon);
    assert_eq!(levels, want);
}

/// Not given: the recorded setting is used and reported as kept.
#[test]
fn a_setting_not_given_takes_the_record() {
    let (o, r) = resolve(
        Options::default(),
        Some(&StoredOptions::of(&budget_store())),
    );
    assert_eq!(
        o.filters,
        Some(Filters::Budget(FilterBudget::bits_per_key(8.0)))
    );
    assert_eq!(
        (o.prefix_filters, o.compression),
        (Some(PrefixFilters::None), Some(Compressions::NONE))
    );
    assert!(r.record_found && r.changed.is_empty());
    assert_eq!(r.kept.len(), 1);
    assert!(r.kept[0].1.contains("budget of 8 bits/key"), "{:?}", r.kept);
    // A recorded prefix rule goes beside a budget given now: the budget plans both.
    let (o, r) = resolve(budget_store(), Some(&prefixed()));
    assert!(o.validate().is_ok());
    assert_eq!(
        o.prefix_filters,
        Some(PrefixFilters::with(PrefixExtractor::fixed(3)))
    );
    assert_eq!((r.kept.len(), r.changed.len()), (1, 1), "{r:?}");
    // No record: the defaults where nothing is given.
    let (o, r) = resolve(Options::default(), None);
    assert!(!r.record_found && o.filters == Some(Filters::default()));
}

/// Given: it replaces the record, reported as a change; the same as recorded, nothing.
#[test]
fn a_setting_given_replaces_the_record() {
    let stored = StoredOptions::of(&budget_store());
    let given = Options::default().with_filters(Some(Filters::fixed(FilterPolicy::bits_per_key(
        FilterKind::Standard,
        12.0,
    ))));
    let (o, r) = resolve(given, Some(&stored));
    assert_eq!(o.filters().budget(), None);
    assert_eq!(r.changed.len(), 1);
    assert!(
        r.changed[0].now.contains("standard Bloom 12 bits/key"),
        "{:?}",
        r.changed
    );
    let (_, r) = resolve(budget_store(), Some(&stored));
    assert!(r.kept.is_empty() && r.changed.is_empty(), "{r:?}");
    // No filters at all, given: none, whatever was recorded.
    let none = Options::default().with_filters(Some(Filters::None));
    let (o, _) = resolve(none, Some(&stored));
    assert_eq!(o.filters, Some(Filters::None));
}

/// Given as the default: the default, on purpose, whatever was recorded.
#[test]
fn a_setting_can_be_set_back_to_its_default() {
    let lz4_budget =
        StoredOptions::of(&budget_store().with_compression(Some(Compression::Lz4.into())));
    let given = Options::default()
        .with_filters(Some(Filters::default()))
        .with_compression(Some(Compressions::default()));
    let (o, r) = resolve(given, Some(&lz4_budget));
    assert_eq!(o.filters, Some(Filters::default()));
    assert_eq!(o.compression_for_level(3), Compression::None);
    let settings: Vec<&str> = r.changed.iter().map(|c| c.setting.as_str()).collect();
    assert_eq!(settings, ["filter", "compression"], "{r:?}");
    // And a prefix rule dropped on purpose.
    let given = Options::default().with_prefix_filters(Some(PrefixFilters::None));
    let (o, r) = resolve(given, Some(&prefixed()));
    assert_eq!(o.prefix_filters, Some(PrefixFilters::None));
    assert_eq!(r.changed.len(), 1, "{r:?}");
}

/// A recorded setting that cannot go with the options given gives way to its default,
/// alone: the others recorded are kept.
#[test]
fn a_conflicting_recorded_setting_gives_way_alone() {
    // Recorded LZ4, a budget and a prefix rule; table format 2 given now cannot hold LZ4.
    let stored = StoredOptions::of(
        &budget_store()
            .with_compression(Some(Compression::Lz4.into()))
            .with_prefix_filters(Some(PrefixFilters::with(PrefixExtractor::fixed(3)))),
    );
    let v2 = Options::default().with_table_format_version(2);
    let (o, r) = resolve(v2, Some(&stored));
    assert!(o.validate().is_ok());
    assert_eq!(o.compression, Some(Compressions::NONE));
    assert_eq!(o.filters, budget_store().filters);
    assert_eq!(o.prefix_filters().rule(), Some(PrefixExtractor::fixed(3)));
    let kept: Vec<&str> = r.kept.iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(kept, ["filter", "prefix"], "{r:?}");
    assert_eq!(r.changed.len(), 1, "{r:?}");
    assert!(r.changed[0].now.contains("cannot be combined"), "{r:?}");
    // Table format 1 cannot hold prefix filters either: the prefix rule gives way too,
    // and the budget is still kept.
    let v1 = Options::default().with_table_format_version(1);
    let (o, r) = resolve(v1, Some(&stored));
    assert!(o.validate().is_ok());
    assert_eq!(o.prefix_filters, Some(PrefixFilters::None));
    assert_eq!(o.filters, budget_store().filters);
    let changed: Vec<&str> = r.changed.iter().map(|c| c.setting.as_str()).collect();
    assert_eq!(changed, ["prefix", "compression"], "{r:?}");
}

/// A store recorded with the fixed default policy (before the budget was the default)
/// keeps it when reopened with nothing given.
#[test]
fn a_recorded_fixed_policy_is_kept() {
    let old = StoredOptions::of(
        &Options::default().with_filters(Some(Filters::fixed(FilterPolicy::default()))),
    );
    assert_eq!(old.filter.budget, None);
    let (o, r) = resolve(Options::default(), Some(&old));
    assert_eq!(o.filters, Some(Filters::fixed(FilterPolicy::default())));
    assert_eq!(r.kept.len(), 1, "{r:?}");
    assert!(r.kept[0].1.contains("blocked Bloom 10 bits/key"), "{r:?}");
    let new = StoredOptions::of(&Options::default());
    let (o, r) = resolve(Options::default(), Some(&new));
    assert_eq!(o.filters, Some(Filters::default()));
    assert!(r.kept.is_empty() && r.changed.is_empty(), "{r:?}");
}

/// Range filters: recorded, taken by a reopen that does not give them, replaced by one that
/// does; numbers that are no policy refuse the record; a recorded policy that the table
/// format given cannot hold gives way alone.
#[test]
fn range_filters_are_recorded_and_merged_like_the_other_settings() {
    let policy = RangePolicy::bits_per_key(14.0, 64).unwrap();
    let ranged = budget_store().with_range_filters(Some(RangeFilters::On(policy)));
    let data = StoredOptions::of(&ranged);
    assert_eq!(
        data.range,
        Some(RangeChoice::Fixed {
            bits_per_key: 14.0,
            max_range: 64
        })
    );
    let path = Path::new("d/OPTIONS");
    assert_eq!(decode(path, &encode(&data).unwrap()).unwrap(), data);
    let (o, r) = resolve(Options::default(), Some(&data));
    assert_eq!(o.range_filters, Some(RangeFilters::On(policy)));
    assert!(r.changed.is_empty(), "{r:?}");
    assert!(
        r.kept
            .iter()
            .any(|(s, t)| s == "range"
                && t == "range filters of 14 bits/key for ranges up to 64 points"),
        "{r:?}"
    );
    let (o, r) = resolve(
        Options::default().with_range_filters(Some(RangeFilters::None)),
        Some(&data),
    );
    assert_eq!(o.range_filters, Some(RangeFilters::None));
    assert_eq!(r.changed.len(), 1, "{r:?}");
    assert_eq!(r.changed[0].now, "no range filters");
    // Format 3 tables cannot hold them: the recorded setting gives way, the budget stays.
    let (o, r) = resolve(Options::default().with_table_format_version(3), Some(&data));
    assert!(o.validate().is_ok());
    assert_eq!(o.range_filters, Some(RangeFilters::None));
    assert_eq!(o.filters, ranged.filters);
    assert_eq!(r.changed.len(), 1, "{r:?}");
    assert!(r.changed[0].now.contains("cannot be combined"), "{r:?}");
    for (bits, range) in [(2.0, 32), (12.0, 0), (f64::NAN, 8)] {
        let mut bad = data.clone();
        bad.range = Some(RangeChoice::Fixed {
            bits_per_key: bits,
            max_range: range,
        });
        let e = decode(path, &encode(&bad).unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.contains("d/OPTIONS") && e.contains("not valid"), "{e}");
    }
}
