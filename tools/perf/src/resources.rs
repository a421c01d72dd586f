//! What a broker costs in memory and disk, read from outside: its resident set size from
//! `/proc/<pid>/status` (Linux) and a directory's size the way `du` counts it (allocated blocks)
//! and the way `du --apparent-size` does (file lengths). Parsing and accounting are pure and
//! tested; the two readers are thin. Depends on std only.

use std::collections::HashSet;
use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use serde::Serialize;

/// Bytes per block of `st_blocks` (POSIX fixes the unit at 512 whatever the file system's block).
pub const STAT_BLOCK_BYTES: u64 = 512;
/// One MiB, for reports.
pub const MIB: u64 = 1024 * 1024;

/// Resident set size of process `pid` in bytes, or `None` if it is gone or has no `VmRSS`.
pub fn rss_bytes(pid: u32) -> Option<u64> {
    parse_vm_rss(&fs::read_to_string(format!("/proc/{pid}/status")).ok()?)
}

/// `VmRSS:   12345 kB` out of a `/proc/<pid>/status` text, in bytes.
pub fn parse_vm_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let mut fields = line.get("VmRSS:".len()..)?.split_whitespace();
    let value: u64 = fields.next()?.parse().ok()?;
    match fields.next()? {
        "kB" => value.checked_mul(1024),
        _ => None,
    }
}

/// A directory tree's size.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DirSize {
    /// Bytes of allocated blocks (what `du` reports; what the disk really holds).
    pub allocated_bytes: u64,
    /// Sum of file lengths (`du --apparent-size`; sparse holes count, unwritten tails do not).
    pub apparent_bytes: u64,
    /// Regular files counted.
    pub files: u64,
}

/// One file as the accounting sees it.
#[derive(Clone, Copy, Debug)]
pub struct FileEntry {
    /// Device and inode: a file reached through two hard links is counted once, as `du` does.
    pub id: (u64, u64),
    /// `st_size`.
    pub len: u64,
    /// `st_blocks` (512-byte units).
    pub blocks: u64,
}

/// Sums files into a [`DirSize`], each (device, inode) once.
#[derive(Debug, Default)]
pub struct SizeAccount {
    seen: HashSet<(u64, u64)>,
    size: DirSize,
}

impl SizeAccount {
    /// Counts one file unless it was counted already.
    pub fn add(&mut self, entry: FileEntry) {
        if !self.seen.insert(entry.id) {
            return;
        }
        self.size.allocated_bytes = self
            .size
            .allocated_bytes
            .saturating_add(entry.blocks.saturating_mul(STAT_BLOCK_BYTES));
        self.size.apparent_bytes = self.size.apparent_bytes.saturating_add(entry.len);
        self.size.files += 1;
    }

    /// The total so far.
    pub fn total(&self) -> DirSize {
        self.size
    }
}

/// Size of every regular file under `root` (not following symbolic links). A file that vanishes
/// while the tree is walked (a segment deleted by compaction) is skipped, not an error; a
/// missing `root` is size zero.
pub fn dir_size(root: &Path) -> io::Result<DirSize> {
    let mut account = SizeAccount::default();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        for entry in entries {
            let entry = entry?;
            let meta = match entry.path().symlink_metadata() {
                Ok(meta) => meta,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            if meta.is_dir() {
                pending.push(entry.path());
            } else if meta.is_file() {
                account.add(FileEntry {
                    id: (meta.dev(), meta.ino()),
                    len: meta.len(),
                    blocks: meta.blocks(),
                });
            }
        }
    }
    Ok(account.total())
}

/// Bytes as MiB, for text reports.
#[expect(
    clippy::cast_precision_loss,
    reason = "byte counts stay far below 2^52 in any report"
)]
pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / MIB as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vm_rss_is_read_in_kilobytes() {
        let status = "Name:\twharf\nVmPeak:\t 999 kB\nVmRSS:\t  204800 kB\nThreads:\t3\n";
        assert_eq!(parse_vm_rss(status), Some(200 * MIB));
    }

    #[test]
    fn vm_rss_missing_or_odd_is_none() {
        assert_eq!(parse_vm_rss("Name:\tzombie\nState:\tZ\n"), None);
        assert_eq!(parse_vm_rss("VmRSS:\t12 MB\n"), None);
        assert_eq!(parse_vm_rss("VmRSS:\tlots kB\n"), None);
        assert_eq!(parse_vm_rss("VmRSS:\n"), None);
    }

    #[test]
    fn reads_its_own_rss() {
        let rss = rss_bytes(std::process::id()).unwrap();
        assert!(rss > 0);
    }

    #[test]
    fn hard_links_count_once_and_blocks_are_512_bytes() {
        let mut account = SizeAccount::default();
        let file = |ino, len, blocks| FileEntry {
            id: (1, ino),
            len,
            blocks,
        };
        // A preallocated segment: 4 MiB allocated, 1 MiB written.
        account.add(file(10, MIB, 8192));
        // A sparse file: 1 GiB apparent, 8 blocks allocated.
        account.add(file(11, 1024 * MIB, 8));
        // The first file again through a hard link.
        account.add(file(10, MIB, 8192));
        let total = account.total();
        assert_eq!(total.files, 2);
        assert_eq!(total.allocated_bytes, 4 * MIB + 4096);
        assert_eq!(total.apparent_bytes, 1025 * MIB);
    }

    #[test]
    fn the_same_inode_on_another_device_is_another_file() {
        let mut account = SizeAccount::default();
        for dev in [1, 2] {
            account.add(FileEntry {
                id: (dev, 7),
                len: 100,
                blocks: 8,
            });
        }
        assert_eq!(account.total().files, 2);
        assert_eq!(account.total().apparent_bytes, 200);
    }

    #[test]
    fn walks_a_real_tree_and_a_missing_one_is_empty() {
        let root = std::env::temp_dir().join(format!("wharf-perf-size-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(root.join("sub")).unwrap();
        fs::write(root.join("a"), vec![1u8; 10_000]).unwrap();
        fs::write(root.join("sub/b"), vec![2u8; 5]).unwrap();
        fs::hard_link(root.join("a"), root.join("sub/a-again")).unwrap();
        let size = dir_size(&root).unwrap();
        fs::remove_dir_all(&root).unwrap();
        assert_eq!(size.files, 2);
        assert_eq!(size.apparent_bytes, 10_005);
        assert!(size.allocated_bytes >= 10_000, "{size:?}");
        assert_eq!(dir_size(&root).unwrap(), DirSize::default());
    }
}
