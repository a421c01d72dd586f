//! [`Io`]: the process's streams, as `wharfctl` talks to them (tests pass buffers).

use std::io::{Read, Write};

/// What the process has to talk to.
pub struct Io<'a> {
    /// Standard output.
    pub out: &'a mut dyn Write,
    /// Standard error.
    pub err: &'a mut dyn Write,
    /// Standard input (for `import_definitions -`).
    pub input: &'a mut dyn Read,
}
