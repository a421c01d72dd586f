//! Writes the fuzz targets' seed corpora (`fuzz/seeds/<target>/`) from what a short
//! simulated run leaves on its disk: whole data directories (`store_recovery`), checkpoint
//! files (`checkpoint_decode`) and single store records (`store_record`). Run by hand:
//! `WHARF_FUZZ_CORPUS=fuzz/seeds cargo test -p wharf-sim --test sim -- --ignored seeds`.

use std::path::{Path, PathBuf};

use wharf_sim::World;
use wharf_wal::{RecordRef, RecoveryMode, Storage, scan};

const DATA: &str = "/sim/data";

fn write(dir: &Path, target: &str, name: &str, bytes: &[u8]) {
    let d = dir.join(target);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join(name), bytes).unwrap();
}

#[test]
#[ignore = "writes the fuzz corpora; run by hand"]
fn seeds_for_the_fuzz_targets() {
    let out = PathBuf::from(std::env::var("WHARF_FUZZ_CORPUS").expect("WHARF_FUZZ_CORPUS"));
    for (seed, steps) in [(11u64, 40u64), (12, 80), (13, 25)] {
        let mut world = World::new(seed).unwrap();
        for _ in 0..steps {
            world.step().unwrap();
        }
        let sim = world.disk().sim().clone();
        let dir = Path::new(DATA);
        let mut names = sim.list(dir).unwrap();
        names.sort();
        let mut whole = Vec::new();
        for name in &names {
            let bytes = sim.file_bytes(&dir.join(name)).unwrap();
            if name.ends_with(".checkpoint") {
                write(&out, "checkpoint_decode", &format!("{seed}-{name}"), &bytes);
            }
            whole.extend_from_slice(b"FILE");
            whole.extend_from_slice(name.as_bytes());
            whole.push(0);
            whole.extend_from_slice(&bytes);
            whole.extend_from_slice(b"WSEP");
        }
        whole.truncate(whole.len().saturating_sub(4));
        if whole.len() < 64 * 1024 {
            write(&out, "store_recovery", &format!("run-{seed}"), &whole);
        }
        let mut n = 0;
        let _ = scan(&sim, dir, RecoveryMode::Salvage, &mut |r: RecordRef<'_>| {
            n += 1;
            if n % 3 == 0 && r.payload.len() < 2048 {
                let mut rec = vec![r.kind];
                rec.extend_from_slice(r.payload);
                write(&out, "store_record", &format!("{seed}-{n}"), &rec);
            }
            Ok(())
        });
    }
}
