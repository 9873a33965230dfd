//! A received file's writer: a file sent in pieces is written past the page
//! cache (`O_DIRECT`), everything else through it.
//!
//! A receiver writes every byte of a push once and reads it back only if a
//! later run resumes from it, so caching the pieces of a large file buys
//! nothing and costs twice: the copy into freshly allocated page-cache
//! pages (on a host with many receivers, or a virtual machine whose freed
//! memory goes back to its host, the largest cost of receiving), then the
//! writeback of all of it at the flush. Direct writes go from the received
//! message's memory to the disk as the pieces arrive, and leave the host's
//! page cache to its applications. Where direct writes are refused (a
//! filesystem without them, such as an older `tmpfs`, or a buffer the
//! device cannot take), the file is written through the cache instead:
//! the outcome is the same bytes.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd as _;
use std::os::unix::fs::{FileExt as _, OpenOptionsExt as _};
use std::path::Path;

/// Offsets, lengths and addresses of direct writes are multiples of this
/// (the page size; every block device's logical block size divides it).
const ALIGN: usize = 4096;
/// The bounce buffer for a piece whose memory is not aligned.
const BOUNCE: usize = 4 << 20;

/// A file being received.
pub(crate) struct FileWriter {
    file: File,
    /// Whether writes still go past the page cache.
    direct: bool,
    /// Aligned memory for pieces whose own is not (made when first needed).
    bounce: Vec<u8>,
}

impl FileWriter {
    /// Create the file at `path` (which must not exist), for direct writes
    /// if `direct` and the filesystem has them.
    pub(crate) fn create(path: &Path, direct: bool) -> io::Result<FileWriter> {
        let open = |flags| {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .custom_flags(flags)
                .open(path)
        };
        if direct {
            match open(libc::O_DIRECT) {
                Ok(file) => return Ok(FileWriter::buffered(file).direct()),
                // A filesystem without direct writes: the file is not made.
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
                Err(e) => return Err(e),
            }
        }
        open(0).map(FileWriter::buffered)
    }

    /// Write `file` through the page cache.
    pub(crate) fn buffered(file: File) -> FileWriter {
        FileWriter {
            file,
            direct: false,
            bounce: Vec::new(),
        }
    }

    fn direct(mut self) -> Self {
        self.direct = true;
        self
    }

    /// Write `bytes` at `offset`: the aligned part past the cache while it
    /// can be, the rest (a file's unaligned end) through it.
    pub(crate) fn write_at(&mut self, bytes: &[u8], offset: u64) -> io::Result<()> {
        if !self.direct || !offset.is_multiple_of(ALIGN as u64) {
            return self.write_buffered(bytes, offset);
        }
        let aligned = bytes.len() / ALIGN * ALIGN;
        let (head, tail) = bytes.split_at(aligned);
        match self.write_direct(head, offset) {
            Ok(()) => {}
            // The device refuses this memory or size: the same bytes
            // through the cache (what was written directly is rewritten).
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                return self.write_buffered(bytes, offset);
            }
            Err(e) => return Err(e),
        }
        if tail.is_empty() {
            Ok(())
        } else {
            self.write_buffered(tail, offset + aligned as u64)
        }
    }

    /// `bytes` (a multiple of [`ALIGN`] long) at the aligned `offset`, past
    /// the cache: from their own memory if it is aligned, else through the
    /// bounce buffer.
    fn write_direct(&mut self, bytes: &[u8], offset: u64) -> io::Result<()> {
        if bytes.as_ptr().align_offset(ALIGN) == 0 {
            return self.file.write_all_at(bytes, offset);
        }
        if self.bounce.is_empty() {
            self.bounce = vec![0; BOUNCE + ALIGN];
        }
        let start = self.bounce.as_ptr().align_offset(ALIGN);
        let bounce = &mut self.bounce[start..start + BOUNCE];
        let mut at = offset;
        for chunk in bytes.chunks(BOUNCE) {
            bounce[..chunk.len()].copy_from_slice(chunk);
            self.file.write_all_at(&bounce[..chunk.len()], at)?;
            at += chunk.len() as u64;
        }
        Ok(())
    }

    /// `bytes` at `offset` through the page cache, from now on.
    fn write_buffered(&mut self, bytes: &[u8], offset: u64) -> io::Result<()> {
        if self.direct {
            clear_direct(&self.file)?;
            self.direct = false;
            self.bounce = Vec::new();
        }
        self.file.write_all_at(bytes, offset)
    }

    /// The file.
    pub(crate) fn into_file(self) -> File {
        self.file
    }
}

/// Have `file`'s writes go through the page cache from now on.
fn clear_direct(file: &File) -> io::Result<()> {
    let fd = file.as_raw_fd();
    // SAFETY: `fd` is `file`'s, open for the calls; F_GETFL and F_SETFL
    // read and set its status flags only.
    #[allow(unsafe_code)]
    let rc = unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags < 0 {
            flags
        } else {
            libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_DIRECT)
        }
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Start writing `file`'s dirty pages back, without waiting: its flush
/// later finds most of them on disk.
pub(crate) fn start_writeback(file: &File) {
    // SAFETY: `file`'s descriptor, open for the call; the whole file (a
    // length of 0 is "to the end"). A hint: its failure changes nothing
    // (the flush writes whatever is still dirty).
    #[allow(unsafe_code)]
    unsafe {
        libc::sync_file_range(file.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scratch::ScratchDir;

    /// Bytes `0..len` of a pattern no two nearby offsets share.
    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 + i / 4093) as u8).collect()
    }

    #[test]
    fn every_way_of_writing_lands_the_same_bytes() {
        let dir = ScratchDir::new("direct-writes");
        let data = pattern(3 * BOUNCE + 3 * ALIGN + 123);
        // Aligned and not, whole pieces and an unaligned end, memory
        // aligned or not (the bounce buffer), direct or buffered.
        for (name, direct, skew, cuts) in [
            ("direct-aligned", true, 0, vec![BOUNCE, 2 * BOUNCE]),
            ("direct-skewed", true, 1, vec![BOUNCE, 2 * BOUNCE]),
            ("direct-odd-cut", true, 0, vec![BOUNCE + 17, 2 * BOUNCE]),
            ("buffered", false, 1, vec![5, BOUNCE]),
        ] {
            let path = dir.join(name);
            let mut writer = FileWriter::create(&path, direct).unwrap();
            // Memory of the same bytes starting `skew` bytes into a buffer
            // whose own start is aligned or not.
            let mut backing = vec![0u8; data.len() + ALIGN + 1];
            let at = backing.as_ptr().align_offset(ALIGN) + skew;
            backing[at..at + data.len()].copy_from_slice(&data);
            let memory = &backing[at..at + data.len()];
            let mut from = 0;
            for &to in cuts.iter().chain([&data.len()]) {
                writer.write_at(&memory[from..to], from as u64).unwrap();
                from = to;
            }
            drop(writer.into_file());
            assert_eq!(std::fs::read(&path).unwrap(), data, "{name}");
        }
    }

    #[test]
    fn a_file_that_exists_is_never_written() {
        let dir = ScratchDir::new("direct-exists");
        let path = dir.join("there");
        std::fs::write(&path, b"keep").unwrap();
        for direct in [true, false] {
            assert!(FileWriter::create(&path, direct).is_err());
        }
        assert_eq!(std::fs::read(&path).unwrap(), b"keep");
    }
}
