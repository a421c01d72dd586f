//! The identities of the log: [`Lsn`] (a record's place in the total order), [`SegmentId`]
//! (a segment file) and [`Position`] (where a frame starts). Leaf: depends on nothing.

/// Log sequence number: the position of a record in the log's total order. The first record
/// is `Lsn(1)`; `Lsn(0)` means "none" (e.g. nothing durable yet). Strictly increasing by one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Lsn(pub u64);

impl Lsn {
    /// The Lsn after this one.
    #[must_use]
    pub fn next(self) -> Lsn {
        Lsn(self.0 + 1)
    }
}

impl std::fmt::Display for Lsn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Identifies a segment file (`{id:020}.wal`). Increasing with time; ids of deleted segments
/// are never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct SegmentId(pub u64);

impl SegmentId {
    /// The id after this one.
    #[must_use]
    pub fn next(self) -> SegmentId {
        SegmentId(self.0 + 1)
    }
}

impl std::fmt::Display for SegmentId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Where a record's frame starts: its segment and the byte offset in that file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Position {
    /// The segment.
    pub segment: SegmentId,
    /// Byte offset of the frame in the segment file.
    pub offset: u64,
}
