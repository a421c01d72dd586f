//! The byte cursors every record is written and read through (storage-format.md,
//! "Primitives"): [`Enc`] appends little-endian fields, [`Dec`] reads them back checking what
//! is left of the payload before every read, so a damaged length cannot make it allocate or
//! read past the end (S-ERR-2).

use bytes::Bytes;

use super::error::{DecodeError, EncodeError};
use wharf_broker::MessageId;
use wharf_wal::le;

/// Names (vhost, exchange, queue, routing key, table keys, short properties) carry a `u16`
/// length; texts (policy pattern and definition, string values, bodies) a `u32` one.
const NAME_BYTES_MAX: usize = u16::MAX as usize;

/// Appends little-endian fields to a record payload.
pub(super) struct Enc<'a> {
    pub(super) out: &'a mut Vec<u8>,
    /// `Some` when a message body, always the last field of its record, is to be left out of
    /// `out` and handed over by reference instead (S-BIG-3): it is put here.
    pub(super) tail: Option<Bytes>,
}

impl<'a> Enc<'a> {
    /// An encoder writing every field into `out`.
    pub(super) fn new(out: &'a mut Vec<u8>) -> Self {
        Enc { out, tail: None }
    }

    /// An encoder writing every field into `out` but a message body, left in `tail`.
    pub(super) fn leaving_body(out: &'a mut Vec<u8>) -> Self {
        Enc {
            out,
            tail: Some(Bytes::new()),
        }
    }

    /// A message body: its length, then its bytes (or, when leaving the body out, only its
    /// length; the bytes go to `tail`, to follow `out` in the record).
    pub(super) fn body(&mut self, body: &Bytes) -> Result<(), EncodeError> {
        if self.tail.is_none() {
            return self.bytes32("body", body);
        }
        let len = u32::try_from(body.len()).map_err(|_| EncodeError::TooLong {
            field: "body",
            len: body.len(),
            max: u32::MAX as usize,
        })?;
        self.u32(len);
        self.tail = Some(body.clone());
        Ok(())
    }

    pub(super) fn u8(&mut self, v: u8) {
        self.out.push(v);
    }
    pub(super) fn u16(&mut self, v: u16) {
        le::put_u16(self.out, v);
    }
    pub(super) fn u32(&mut self, v: u32) {
        le::put_u32(self.out, v);
    }
    pub(super) fn u64(&mut self, v: u64) {
        le::put_u64(self.out, v);
    }
    pub(super) fn bool(&mut self, v: bool) {
        self.u8(u8::from(v));
    }
    pub(super) fn name(&mut self, field: &'static str, s: &str) -> Result<(), EncodeError> {
        let len = u16::try_from(s.len()).map_err(|_| EncodeError::TooLong {
            field,
            len: s.len(),
            max: NAME_BYTES_MAX,
        })?;
        self.u16(len);
        self.out.extend_from_slice(s.as_bytes());
        Ok(())
    }
    pub(super) fn bytes32(&mut self, field: &'static str, b: &[u8]) -> Result<(), EncodeError> {
        let len = u32::try_from(b.len()).map_err(|_| EncodeError::TooLong {
            field,
            len: b.len(),
            max: u32::MAX as usize,
        })?;
        self.u32(len);
        self.out.extend_from_slice(b);
        Ok(())
    }
    pub(super) fn count(&mut self, field: &'static str, n: usize) -> Result<(), EncodeError> {
        let n = u32::try_from(n).map_err(|_| EncodeError::TooLong {
            field,
            len: n,
            max: u32::MAX as usize,
        })?;
        self.u32(n);
        Ok(())
    }
    pub(super) fn names(
        &mut self,
        field: &'static str,
        names: &[String],
    ) -> Result<(), EncodeError> {
        self.count(field, names.len())?;
        for n in names {
            self.name(field, n)?;
        }
        Ok(())
    }
    pub(super) fn ids(&mut self, ids: &[MessageId]) -> Result<(), EncodeError> {
        self.count("id list", ids.len())?;
        for id in ids {
            self.u64(id.0);
        }
        Ok(())
    }
}

/// Reads fields from a record payload; every read checks what is left first.
pub(super) struct Dec<'a> {
    /// The buffer `buf` is a slice of, when the caller has one: bodies are then shared slices
    /// of it instead of copies.
    pub(super) owner: Option<&'a Bytes>,
    pub(super) buf: &'a [u8],
    pub(super) at: usize,
    pub(super) kind: u8,
}

impl<'a> Dec<'a> {
    /// A decoder over `buf`, a payload of record kind `kind`, copying what it keeps.
    pub(super) fn new(buf: &'a [u8], kind: u8) -> Self {
        Dec {
            owner: None,
            buf,
            at: 0,
            kind,
        }
    }

    pub(super) fn err(&self, what: &'static str) -> DecodeError {
        DecodeError {
            kind: self.kind,
            offset: self.at,
            what,
        }
    }
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], DecodeError> {
        let end = self.at.checked_add(n).ok_or_else(|| self.err(what))?;
        let bytes = self.buf.get(self.at..end).ok_or_else(|| self.err(what))?;
        self.at = end;
        Ok(bytes)
    }
    pub(super) fn u8(&mut self, what: &'static str) -> Result<u8, DecodeError> {
        let b = *self.buf.get(self.at).ok_or_else(|| self.err(what))?;
        self.at += 1;
        Ok(b)
    }
    pub(super) fn u16(&mut self, what: &'static str) -> Result<u16, DecodeError> {
        let v = le::u16_at(self.buf, self.at).ok_or_else(|| self.err(what))?;
        self.at += size_of::<u16>();
        Ok(v)
    }
    pub(super) fn u32(&mut self, what: &'static str) -> Result<u32, DecodeError> {
        let v = le::u32_at(self.buf, self.at).ok_or_else(|| self.err(what))?;
        self.at += size_of::<u32>();
        Ok(v)
    }
    pub(super) fn u64(&mut self, what: &'static str) -> Result<u64, DecodeError> {
        let v = le::u64_at(self.buf, self.at).ok_or_else(|| self.err(what))?;
        self.at += size_of::<u64>();
        Ok(v)
    }
    pub(super) fn bool(&mut self, what: &'static str) -> Result<bool, DecodeError> {
        match self.u8(what)? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(self.err("boolean byte other than 0 or 1")),
        }
    }
    /// A flags byte whose bits outside `known` must be zero.
    pub(super) fn flags(&mut self, known: u8, what: &'static str) -> Result<u8, DecodeError> {
        let f = self.u8(what)?;
        if f & !known != 0 {
            return Err(self.err("reserved flag bit set"));
        }
        Ok(f)
    }
    fn utf8(&self, bytes: &[u8]) -> Result<String, DecodeError> {
        std::str::from_utf8(bytes)
            .map(str::to_owned)
            .map_err(|_| self.err("string is not UTF-8"))
    }
    /// A `name`'s bytes stepped over (length checked, content not: its full decode checks
    /// it).
    pub(super) fn skip_name(&mut self, what: &'static str) -> Result<(), DecodeError> {
        let n = usize::from(self.u16(what)?);
        self.take(n, what).map(|_| ())
    }

    pub(super) fn name(&mut self, what: &'static str) -> Result<String, DecodeError> {
        let len = self.u16(what)?;
        let bytes = self.take(usize::from(len), what)?;
        self.utf8(bytes)
    }
    /// `u32` length + bytes; the length is checked against what is left before copying.
    pub(super) fn bytes32(&mut self, what: &'static str) -> Result<&'a [u8], DecodeError> {
        let len = self.u32(what)?;
        let len = usize::try_from(len).map_err(|_| self.err(what))?;
        self.take(len, what)
    }
    pub(super) fn text(&mut self, what: &'static str) -> Result<String, DecodeError> {
        let bytes = self.bytes32(what)?;
        self.utf8(bytes)
    }
    /// A count of items each at least `item_bytes_min` long, checked against what is left so
    /// that a damaged count cannot make us allocate or loop beyond the payload.
    pub(super) fn count(
        &mut self,
        item_bytes_min: usize,
        what: &'static str,
    ) -> Result<usize, DecodeError> {
        let n = usize::try_from(self.u32(what)?).map_err(|_| self.err(what))?;
        let left = self.buf.len().saturating_sub(self.at);
        match n.checked_mul(item_bytes_min) {
            Some(need) if need <= left => Ok(n),
            _ => Err(self.err("count larger than the record")),
        }
    }
    pub(super) fn names(&mut self, what: &'static str) -> Result<Vec<String>, DecodeError> {
        let n = self.count(size_of::<u16>(), what)?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(self.name(what)?);
        }
        Ok(out)
    }
    pub(super) fn ids(&mut self) -> Result<Vec<MessageId>, DecodeError> {
        let n = self.count(size_of::<u64>(), "id list")?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(MessageId(self.u64("message id")?));
        }
        Ok(out)
    }
    pub(super) fn finish(&self) -> Result<(), DecodeError> {
        if self.at == self.buf.len() {
            Ok(())
        } else {
            Err(self.err("trailing bytes after the record"))
        }
    }
}
