//! A relocatable ELF object loaded into this process: its sections mapped,
//! its relocations applied, its code made executable.
//!
//! One anonymous mapping holds, in order: the executable sections and a
//! stub per external function that a direct branch calls (page-aligned,
//! then read+execute), and the data sections and the GOT (read+write).
//! Keeping everything in one mapping keeps every PC-relative reference
//! within range (ADRP: ±4 GiB, branches: ±128 MiB on aarch64). Symbols the
//! object does not define are looked up in the resolver's table (the math
//! helpers); an unknown one is an error naming it.

use std::collections::HashMap;
use std::ptr::NonNull;

use object::{
    Object, ObjectSection, ObjectSymbol, RelocationFlags, RelocationTarget, SectionIndex,
    SectionKind, SymbolIndex,
};

use super::icache::flush_icache;
use super::reloc::{apply, is_branch, uses_got, Fixup};

/// The machine this process runs on, as `object` names it.
pub fn host_architecture() -> object::Architecture {
    if cfg!(target_arch = "aarch64") {
        object::Architecture::Aarch64
    } else if cfg!(target_arch = "x86_64") {
        object::Architecture::X86_64
    } else {
        object::Architecture::Unknown
    }
}

/// A stub that jumps to an absolute address: on aarch64
/// `ldr x16, #8; br x16; .quad addr`, on x86-64 `jmp *0(%rip); .quad addr`.
const STUB_BYTES: usize = 16;

fn write_stub(arch: object::Architecture, at: *mut u8, addr: u64) {
    let mut stub = [0u8; STUB_BYTES];
    match arch {
        object::Architecture::Aarch64 => {
            stub[0..4].copy_from_slice(&0x5800_0050u32.to_le_bytes()); // ldr x16, #8
            stub[4..8].copy_from_slice(&0xd61f_0200u32.to_le_bytes()); // br x16
            stub[8..16].copy_from_slice(&addr.to_le_bytes());
        }
        _ => {
            stub[0..6].copy_from_slice(&[0xff, 0x25, 0, 0, 0, 0]); // jmp *0(%rip)
            stub[6..14].copy_from_slice(&addr.to_le_bytes());
        }
    }
    // SAFETY: `at` points to STUB_BYTES writable bytes of the mapping.
    unsafe { std::ptr::copy_nonoverlapping(stub.as_ptr(), at, STUB_BYTES) };
}

/// The loaded object. Its code lives as long as this value.
pub struct LoadedObject {
    map: NonNull<u8>,
    len: usize,
    symbols: HashMap<String, usize>,
}

impl Drop for LoadedObject {
    fn drop(&mut self) {
        // SAFETY: the mapping was made by `mmap` with this length and is
        // unmapped once.
        unsafe { libc::munmap(self.map.as_ptr().cast(), self.len) };
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

fn align_up(x: usize, a: usize) -> usize {
    x.div_ceil(a.max(1)) * a.max(1)
}

impl LoadedObject {
    /// Loads `bytes`, an ELF relocatable object for this machine, resolving
    /// undefined symbols with `resolve`.
    pub fn load(
        bytes: &[u8],
        resolve: &dyn Fn(&str) -> Option<u64>,
    ) -> Result<LoadedObject, String> {
        let file = object::File::parse(bytes).map_err(|e| format!("not an object file: {e}"))?;
        let arch = file.architecture();
        if arch != host_architecture() {
            return Err(format!(
                "the object is for {arch:?}, this machine is {:?}",
                host_architecture()
            ));
        }
        let page = page_size();
        // Layout: executable sections, stubs, (page) data sections, GOT.
        let mut offsets: HashMap<SectionIndex, usize> = HashMap::new();
        let mut cursor = 0usize;
        let loadable = |kind: SectionKind| {
            matches!(
                kind,
                SectionKind::Text
                    | SectionKind::Data
                    | SectionKind::ReadOnlyData
                    | SectionKind::ReadOnlyDataWithRel
                    | SectionKind::ReadOnlyString
                    | SectionKind::UninitializedData
            )
        };
        for s in file.sections().filter(|s| s.kind() == SectionKind::Text) {
            cursor = align_up(cursor, s.align() as usize);
            offsets.insert(s.index(), cursor);
            cursor += s.size() as usize;
        }
        // Stubs for direct branches to symbols outside the object, and GOT
        // slots for every symbol a GOT relocation names.
        let mut stubs: HashMap<SymbolIndex, usize> = HashMap::new();
        let mut got: HashMap<SymbolIndex, usize> = HashMap::new();
        for s in file.sections().filter(|s| loadable(s.kind())) {
            for (_, r) in s.relocations() {
                let (RelocationFlags::Elf { r_type }, RelocationTarget::Symbol(sym)) =
                    (r.flags(), r.target())
                else {
                    return Err(format!(
                        "section {}: a relocation that is not an ELF symbol relocation",
                        s.name().unwrap_or("?")
                    ));
                };
                let external = file
                    .symbol_by_index(sym)
                    .map_err(|e| e.to_string())?
                    .is_undefined();
                if is_branch(arch, r_type) && external {
                    let n = stubs.len();
                    stubs.entry(sym).or_insert(n);
                }
                if uses_got(arch, r_type) {
                    let n = got.len();
                    got.entry(sym).or_insert(n);
                }
            }
        }
        cursor = align_up(cursor, 16);
        let stubs_at = cursor;
        cursor += stubs.len() * STUB_BYTES;
        let code_len = align_up(cursor.max(1), page);
        cursor = code_len;
        for s in file
            .sections()
            .filter(|s| s.kind() != SectionKind::Text && loadable(s.kind()))
        {
            cursor = align_up(cursor, s.align() as usize);
            offsets.insert(s.index(), cursor);
            cursor += s.size() as usize;
        }
        cursor = align_up(cursor, 8);
        let got_at = cursor;
        cursor += got.len() * 8;
        let len = align_up(cursor.max(1), page);

        // SAFETY: an anonymous private mapping; checked for failure below.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return Err(format!(
                "cannot map {len} bytes: {}",
                std::io::Error::last_os_error()
            ));
        }
        let loaded = LoadedObject {
            map: NonNull::new(raw.cast()).ok_or("mmap returned null")?,
            len,
            symbols: HashMap::new(),
        };
        let base = loaded.map.as_ptr();
        let at = |off: usize| -> *mut u8 {
            // SAFETY: every offset computed above lies inside the mapping.
            unsafe { base.add(off) }
        };
        for s in file.sections() {
            let Some(&off) = offsets.get(&s.index()) else {
                continue;
            };
            if s.kind() == SectionKind::UninitializedData {
                continue; // the mapping is zeroed
            }
            let data = s.data().map_err(|e| e.to_string())?;
            // SAFETY: the section's bytes fit at its offset by construction.
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), at(off), data.len()) };
        }

        // Symbol addresses.
        let mut loaded = loaded;
        let address = |sym: SymbolIndex| -> Result<u64, String> {
            let s = file.symbol_by_index(sym).map_err(|e| e.to_string())?;
            if s.is_undefined() {
                let name = s.name().map_err(|e| e.to_string())?;
                return resolve(name).ok_or_else(|| {
                    format!("undefined symbol `{name}` (not a helper this runtime provides)")
                });
            }
            let section = s
                .section_index()
                .ok_or_else(|| format!("symbol {:?} is in no section", s.name()))?;
            let off = offsets.get(&section).ok_or_else(|| {
                format!("symbol {:?} is in a section that is not loaded", s.name())
            })?;
            Ok(at(*off) as u64 + s.address())
        };
        for (&sym, &slot) in &got {
            let a = address(sym)?;
            // SAFETY: the GOT slots lie inside the mapping, 8-byte aligned.
            unsafe { at(got_at + 8 * slot).cast::<u64>().write(a) };
        }
        for (&sym, &slot) in &stubs {
            write_stub(arch, at(stubs_at + STUB_BYTES * slot), address(sym)?);
        }
        for s in file.sections() {
            let Some(&off) = offsets.get(&s.index()) else {
                continue;
            };
            for (r_off, r) in s.relocations() {
                let (RelocationFlags::Elf { r_type }, RelocationTarget::Symbol(sym)) =
                    (r.flags(), r.target())
                else {
                    unreachable!("checked when the layout was made");
                };
                let target = match stubs.get(&sym) {
                    Some(&slot) if is_branch(arch, r_type) => {
                        at(stubs_at + STUB_BYTES * slot) as u64
                    }
                    _ => address(sym)?,
                };
                let fixup = Fixup {
                    r_type,
                    place: at(off + r_off as usize),
                    target: target.wrapping_add_signed(r.addend()),
                    got: got.get(&sym).map(|&slot| {
                        (at(got_at + 8 * slot) as u64).wrapping_add_signed(r.addend())
                    }),
                };
                // SAFETY: the place lies inside the mapped section.
                unsafe { apply(arch, &fixup) }.map_err(|e| {
                    format!("section {} + {r_off:#x}: {e}", s.name().unwrap_or("?"))
                })?;
            }
        }
        for s in file.symbols() {
            if s.is_definition() && s.is_global() {
                let name = s.name().map_err(|e| e.to_string())?.to_string();
                let a = address(s.index())?;
                loaded.symbols.insert(name, (a - base as u64) as usize);
            }
        }
        // SAFETY: the code pages are the mapping's first `code_len` bytes.
        let rc =
            unsafe { libc::mprotect(base.cast(), code_len, libc::PROT_READ | libc::PROT_EXEC) };
        if rc != 0 {
            return Err(format!(
                "cannot make the code executable: {}",
                std::io::Error::last_os_error()
            ));
        }
        flush_icache(base, code_len);
        Ok(loaded)
    }

    /// The address of the global symbol `name` the object defines.
    pub fn symbol(&self, name: &str) -> Option<*const u8> {
        self.symbols.get(name).map(|&off| {
            // SAFETY: symbol offsets lie inside the mapping.
            unsafe { self.map.as_ptr().add(off) as *const u8 }
        })
    }
}
