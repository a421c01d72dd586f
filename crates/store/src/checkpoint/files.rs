//! Checkpoint files in the data directory: their names (`{lsn:020}.checkpoint`, and the
//! temporary `.checkpoint.tmp` of a write in progress), listing them, removing temporaries and
//! superseded ones.

use std::cmp::Reverse;
use std::path::{Path, PathBuf};

use crate::error::StoreError;
use wharf_wal::{Lsn, Storage};

const SUFFIX: &str = ".checkpoint";
const TMP_SUFFIX: &str = ".checkpoint.tmp";

/// Name of the checkpoint covering the log through `lsn`: `{lsn:020}.checkpoint`.
pub fn file_name(lsn: Lsn) -> String {
    format!("{:020}{SUFFIX}", lsn.0)
}

/// Name of the temporary file a checkpoint through `lsn` is written to before its rename.
pub(super) fn temporary_file_name(lsn: Lsn) -> String {
    format!("{:020}{TMP_SUFFIX}", lsn.0)
}

/// The Lsn a checkpoint file name covers; `None` for any other file (temporary ones too).
pub fn parse_file_name(name: &str) -> Option<Lsn> {
    let digits = name.strip_suffix(SUFFIX)?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().map(Lsn)
}

fn is_temporary(name: &str) -> bool {
    name.strip_suffix(TMP_SUFFIX)
        .is_some_and(|digits| parse_file_name(&format!("{digits}{SUFFIX}")).is_some())
}

pub(super) fn io_err(path: &Path) -> impl Fn(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_owned(),
        source,
    }
}

/// The checkpoint files of `dir`, newest first (by the Lsn in their names).
///
/// # Errors
/// The directory cannot be listed.
pub fn list(storage: &dyn Storage, dir: &Path) -> Result<Vec<(Lsn, PathBuf)>, StoreError> {
    let names = storage.list(dir).map_err(io_err(dir))?;
    let mut found: Vec<(Lsn, PathBuf)> = names
        .iter()
        .filter_map(|n| parse_file_name(n).map(|lsn| (lsn, dir.join(n))))
        .collect();
    found.sort_unstable_by_key(|f| Reverse(f.0));
    Ok(found)
}

/// Removes temporary checkpoint files (a write cut short by a crash; never renamed, so never
/// in use), durably.
///
/// # Errors
/// The directory cannot be listed or synced, or a file cannot be removed.
pub fn remove_temporaries(storage: &dyn Storage, dir: &Path) -> Result<(), StoreError> {
    let names = storage.list(dir).map_err(io_err(dir))?;
    let mut removed = false;
    for name in names.iter().filter(|n| is_temporary(n)) {
        let path = dir.join(name);
        tracing::warn!(path = %path.display(), "removing a checkpoint never completed");
        storage.remove(&path).map_err(io_err(&path))?;
        removed = true;
    }
    if removed {
        storage.sync_dir(dir).map_err(io_err(dir))?;
    }
    Ok(())
}

/// Removes the checkpoints older than `lsn` (superseded once the one at `lsn` is durable).
///
/// # Errors
/// The directory cannot be listed or synced, or a file cannot be removed.
pub fn remove_older(storage: &dyn Storage, dir: &Path, lsn: Lsn) -> Result<(), StoreError> {
    let older: Vec<_> = list(storage, dir)?
        .into_iter()
        .filter(|(l, _)| *l < lsn)
        .collect();
    for (_, path) in &older {
        storage.remove(path).map_err(io_err(path))?;
    }
    if !older.is_empty() {
        storage.sync_dir(dir).map_err(io_err(dir))?;
    }
    Ok(())
}
