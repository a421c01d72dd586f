#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::time::Duration;

use super::power_cut::PowerCut;
use super::*;
use wharf_wal::Storage;

#[test]
fn durations_of_the_fixture_protocol() {
    let ms = |t: &str| parse_duration(t).map(|d| d.as_millis());
    assert_eq!(ms("250ms"), Ok(250));
    assert_eq!(ms("10s"), Ok(10_000));
    assert_eq!(ms("30m"), Ok(1_800_000));
    assert_eq!(ms("1h"), Ok(3_600_000));
    assert_eq!(ms("2d"), Ok(172_800_000));
    assert_eq!(ms("1h30m"), Ok(5_400_000));
    assert_eq!(ms(" 5s "), Ok(5_000));
    for bad in [
        "",
        "30",
        "m",
        "5x",
        "1.5h",
        "-1s",
        "5 s",
        "99999999999999999999d",
        "1h h",
    ] {
        assert!(parse_duration(bad).is_err(), "{bad:?} accepted");
    }
}

#[test]
fn clock_commands_parse_and_refuse_garbage() {
    assert_eq!(
        ClockCommand::parse("advance 30m"),
        Ok(ClockCommand::Advance(Duration::from_secs(1800)))
    );
    assert_eq!(
        ClockCommand::parse("set 1767225600000\n"),
        Ok(ClockCommand::Set(1_767_225_600_000))
    );
    assert_eq!(ClockCommand::parse("  now "), Ok(ClockCommand::Now));
    for bad in [
        "",
        "advance",
        "advance 30",
        "set soon",
        "now please",
        "rewind 5s",
    ] {
        assert!(ClockCommand::parse(bad).is_err(), "{bad:?} accepted");
    }
}

#[test]
fn power_cut_on_real_files_undoes_exactly_what_was_not_synced() {
    let dir = TempDataDir::create().unwrap();
    let cut = PowerCut::default();
    let disk = cut.storage();
    let kept = dir.path().join("kept");
    let f = disk.create_new(&kept).unwrap();
    f.write_all_at(b"synced--", 0).unwrap();
    f.sync_data().unwrap();
    disk.sync_dir(dir.path()).unwrap();
    f.write_all_at(b"SYNCED", 0).unwrap(); // overwrites synced bytes
    f.write_all_at(b"+tail", 8).unwrap(); // grows the file
    let fresh = dir.path().join("fresh"); // its directory entry is never synced
    disk.create_new(&fresh)
        .unwrap()
        .write_all_at(b"x", 0)
        .unwrap();
    cut.power_loss().unwrap();
    assert_eq!(std::fs::read(&kept).unwrap(), b"synced--");
    assert!(!fresh.exists());
    assert!(
        f.write_all_at(b"late", 0).is_err(),
        "the dead run cannot write"
    );
    assert!(disk.create_new(&fresh).is_err());
    // The next run works, and a second cut keeps what it synced.
    let next = cut.storage();
    let g = next.open(&kept, true).unwrap();
    g.set_len(4).unwrap();
    g.sync_all().unwrap();
    g.write_all_at(b"more", 4).unwrap();
    cut.power_loss().unwrap();
    assert_eq!(std::fs::read(&kept).unwrap(), b"sync");
}

#[test]
fn temp_data_dir_is_removed_on_drop() {
    let dir = TempDataDir::create().unwrap();
    let path = dir.path().to_owned();
    std::fs::write(path.join("f"), b"x").unwrap();
    let other = TempDataDir::create().unwrap();
    assert_ne!(other.path(), path);
    drop(dir);
    assert!(!path.exists());
}
