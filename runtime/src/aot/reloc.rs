//! The relocations the cpu backend's objects use, applied in place.
//!
//! Cranelift writes position-independent objects: on aarch64 every symbol
//! (a constant's data, a math helper) is reached through the GOT
//! (`R_AARCH64_ADR_GOT_PAGE` + `R_AARCH64_LD64_GOT_LO12_NC`), on x86-64
//! through `GOTPCREL` loads. The other common static relocations are
//! handled too, so objects from other code generators load; any other type
//! is refused by name. `S` is the symbol's address, `A` the addend, `P`
//! the place, `G` the address of the symbol's GOT slot (ELF for the Arm
//! Architecture, 5.7; System V x86-64 psABI, 4.4).

/// What a relocation computes, resolved to addresses.
pub struct Fixup {
    pub r_type: u32,
    /// The place being patched.
    pub place: *mut u8,
    /// `S + A`.
    pub target: u64,
    /// `G + A`, when the relocation goes through the GOT.
    pub got: Option<u64>,
}

pub mod aarch64 {
    pub const ABS64: u32 = 257;
    pub const PREL64: u32 = 260;
    pub const PREL32: u32 = 261;
    pub const ADR_PREL_PG_HI21: u32 = 275;
    pub const ADD_ABS_LO12_NC: u32 = 277;
    pub const LDST8_ABS_LO12_NC: u32 = 278;
    pub const JUMP26: u32 = 282;
    pub const CALL26: u32 = 283;
    pub const LDST16_ABS_LO12_NC: u32 = 284;
    pub const LDST32_ABS_LO12_NC: u32 = 285;
    pub const LDST64_ABS_LO12_NC: u32 = 286;
    pub const LDST128_ABS_LO12_NC: u32 = 299;
    pub const ADR_GOT_PAGE: u32 = 311;
    pub const LD64_GOT_LO12_NC: u32 = 312;
}

pub mod x86_64 {
    pub const R64: u32 = 1;
    pub const PC32: u32 = 2;
    pub const PLT32: u32 = 4;
    pub const GOTPCREL: u32 = 9;
    pub const GOTPCRELX: u32 = 41;
    pub const REX_GOTPCRELX: u32 = 42;
}

/// Whether relocation `r_type` of `arch` goes through the GOT.
pub fn uses_got(arch: object::Architecture, r_type: u32) -> bool {
    match arch {
        object::Architecture::Aarch64 => {
            matches!(r_type, aarch64::ADR_GOT_PAGE | aarch64::LD64_GOT_LO12_NC)
        }
        object::Architecture::X86_64 => matches!(
            r_type,
            x86_64::GOTPCREL | x86_64::GOTPCRELX | x86_64::REX_GOTPCRELX
        ),
        _ => false,
    }
}

/// Whether relocation `r_type` of `arch` is a call or jump that may need a
/// stub to reach a symbol outside the object.
pub fn is_branch(arch: object::Architecture, r_type: u32) -> bool {
    match arch {
        object::Architecture::Aarch64 => matches!(r_type, aarch64::CALL26 | aarch64::JUMP26),
        object::Architecture::X86_64 => r_type == x86_64::PLT32,
        _ => false,
    }
}

fn page(a: u64) -> i64 {
    (a & !0xfff) as i64
}

/// Applies one relocation.
///
/// # Safety
///
/// `f.place` must point to writable bytes of the mapped object, 4 or 8 of
/// them as the relocation type needs.
pub unsafe fn apply(arch: object::Architecture, f: &Fixup) -> Result<(), String> {
    let p = f.place as u64;
    let s = f.target;
    let got = || {
        f.got
            .ok_or_else(|| format!("relocation {} has no GOT slot", f.r_type))
    };
    match arch {
        object::Architecture::Aarch64 => apply_aarch64(f, p, s, got),
        object::Architecture::X86_64 => apply_x86_64(f, p, s, got),
        other => Err(format!("objects for {other:?} cannot be loaded")),
    }
}

unsafe fn patch32(place: *mut u8, f: impl Fn(u32) -> u32) {
    let w = place.cast::<u32>().read_unaligned();
    place.cast::<u32>().write_unaligned(f(w));
}

fn fits(v: i64, bits: u32) -> bool {
    let lim = 1i64 << (bits - 1);
    (-lim..lim).contains(&v)
}

unsafe fn apply_aarch64(
    f: &Fixup,
    p: u64,
    s: u64,
    got: impl Fn() -> Result<u64, String>,
) -> Result<(), String> {
    use aarch64::*;
    let adrp = |place: *mut u8, delta: i64| -> Result<(), String> {
        let imm = delta >> 12;
        if !fits(imm, 21) {
            return Err("ADRP target beyond 4 GiB".to_string());
        }
        let imm = imm as u32;
        patch32(place, |w| {
            (w & 0x9f00_001f) | ((imm & 0x3) << 29) | (((imm >> 2) & 0x7ffff) << 5)
        });
        Ok(())
    };
    let lo12 = |place: *mut u8, value: u64, shift: u32| {
        let imm = ((value & 0xfff) >> shift) as u32;
        patch32(place, |w| (w & !(0xfff << 10)) | (imm << 10));
    };
    match f.r_type {
        ABS64 => f.place.cast::<u64>().write_unaligned(s),
        PREL64 => f.place.cast::<u64>().write_unaligned(s.wrapping_sub(p)),
        PREL32 => {
            let d = s.wrapping_sub(p) as i64;
            if !fits(d, 32) {
                return Err("PREL32 target out of range".to_string());
            }
            f.place.cast::<i32>().write_unaligned(d as i32);
        }
        ADR_PREL_PG_HI21 => adrp(f.place, page(s) - page(p))?,
        ADD_ABS_LO12_NC | LDST8_ABS_LO12_NC => lo12(f.place, s, 0),
        LDST16_ABS_LO12_NC => lo12(f.place, s, 1),
        LDST32_ABS_LO12_NC => lo12(f.place, s, 2),
        LDST64_ABS_LO12_NC => lo12(f.place, s, 3),
        LDST128_ABS_LO12_NC => lo12(f.place, s, 4),
        CALL26 | JUMP26 => {
            let d = s.wrapping_sub(p) as i64;
            if d & 3 != 0 || !fits(d >> 2, 26) {
                return Err("branch target beyond 128 MiB".to_string());
            }
            let imm = ((d >> 2) as u32) & 0x03ff_ffff;
            patch32(f.place, |w| (w & 0xfc00_0000) | imm);
        }
        ADR_GOT_PAGE => adrp(f.place, page(got()?) - page(p))?,
        LD64_GOT_LO12_NC => lo12(f.place, got()?, 3),
        other => return Err(format!("unsupported aarch64 relocation type {other}")),
    }
    Ok(())
}

unsafe fn apply_x86_64(
    f: &Fixup,
    p: u64,
    s: u64,
    got: impl Fn() -> Result<u64, String>,
) -> Result<(), String> {
    use x86_64::*;
    let pc32 = |target: u64| -> Result<(), String> {
        let d = target.wrapping_sub(p) as i64;
        if !fits(d, 32) {
            return Err("PC-relative target beyond 2 GiB".to_string());
        }
        f.place.cast::<i32>().write_unaligned(d as i32);
        Ok(())
    };
    match f.r_type {
        R64 => f.place.cast::<u64>().write_unaligned(s),
        PC32 | PLT32 => pc32(s)?,
        GOTPCREL | GOTPCRELX | REX_GOTPCRELX => pc32(got()?)?,
        other => return Err(format!("unsupported x86-64 relocation type {other}")),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adrp_and_lo12_encode_the_page_and_offset() {
        // adrp x0, 0 ; ldr x0, [x0]
        let mut code = [0x9000_0000u32, 0xf940_0000];
        let base = code.as_mut_ptr() as u64;
        let target = (base & !0xfff) + 0x3000 + 0x128;
        let got_slot = target;
        let place0 = code.as_mut_ptr().cast::<u8>();
        let place1 = unsafe { place0.add(4) };
        unsafe {
            apply(
                object::Architecture::Aarch64,
                &Fixup {
                    r_type: aarch64::ADR_GOT_PAGE,
                    place: place0,
                    target: 0,
                    got: Some(got_slot),
                },
            )
            .unwrap();
            apply(
                object::Architecture::Aarch64,
                &Fixup {
                    r_type: aarch64::LD64_GOT_LO12_NC,
                    place: place1,
                    target: 0,
                    got: Some(got_slot),
                },
            )
            .unwrap();
        }
        // ADRP immediate = 3 pages: immlo = 3 & 3, immhi = 0.
        assert_eq!(code[0], 0x9000_0000 | (3 << 29));
        // LDR (64-bit) scaled offset 0x128 / 8 = 0x25.
        assert_eq!(code[1], 0xf940_0000 | (0x25 << 10));
    }

    #[test]
    fn out_of_range_branches_are_refused() {
        let mut code = [0x9400_0000u32];
        let place = code.as_mut_ptr().cast::<u8>();
        let far = place as u64 + (1 << 28);
        let r = unsafe {
            apply(
                object::Architecture::Aarch64,
                &Fixup {
                    r_type: aarch64::CALL26,
                    place,
                    target: far,
                    got: None,
                },
            )
        };
        assert!(r.unwrap_err().contains("128 MiB"));
    }
}
