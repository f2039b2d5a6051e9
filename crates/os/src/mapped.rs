//! Read-only file maps for trace readers, so that crates outside the boundary need no
//! `unsafe` to stream a large file without reading it into memory.

use std::fs::File;
use std::io;
use std::ops::Deref;
use std::path::Path;

/// A whole file mapped read-only. Empty files are represented without a map.
pub struct MappedFile {
    map: Option<memmap2::Mmap>,
}

impl MappedFile {
    /// Maps `path` read-only.
    pub fn open(path: &Path) -> io::Result<MappedFile> {
        let file = File::open(path)?;
        if file.metadata()?.len() == 0 {
            return Ok(MappedFile { map: None });
        }
        // SAFETY: the map is read-only and private. If another process truncates the file
        // while it is mapped, reads past the new end fault (SIGBUS); like every tool that
        // maps its input, we accept that for files the user asked us to read, and the
        // crash handler names the file when it happens.
        let map = unsafe { memmap2::Mmap::map(&file) }?;
        crate::crash::note_mapped(path);
        // Readers go front to back once: ask for aggressive read-ahead. Only a hint, so a
        // platform that refuses it loses nothing but speed.
        #[cfg(unix)]
        let _ = map.advise(memmap2::Advice::Sequential);
        Ok(MappedFile { map: Some(map) })
    }
}

impl MappedFile {
    /// Lets the pages wholly before byte `end` go from memory: a reader that goes front to
    /// back then keeps resident only what is ahead of it, not the whole file. They stay
    /// mapped: touched again, they are read in again from the file. Only a hint to the
    /// kernel; where it is refused, they stay resident.
    pub fn release_before(&mut self, end: usize) {
        const PAGE: usize = 4096;
        let Some(map) = &self.map else { return };
        let len = end.min(map.len()) / PAGE * PAGE;
        if len == 0 {
            return;
        }
        #[cfg(unix)]
        // SAFETY: `&mut self` means no borrow of the mapped bytes is alive across this
        // call. The map is read-only and private, so its pages are never written and hold
        // no copy of their own: dropping them loses nothing, and a later read faults them
        // in from the file again (the same bytes, as long as nobody rewrites the file, the
        // caveat every map has; see `open`). The range starts at the map's page-aligned
        // start and lies within it.
        let _ = unsafe { map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, 0, len) };
    }
}

impl Deref for MappedFile {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.map.as_deref().unwrap_or(&[])
    }
}
