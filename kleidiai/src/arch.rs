//! The crate's own platform code, outside the kernel engine: the operating
//! system's answers CPU detection reads (`getauxval`, `prctl`, `sysctl`) and
//! the instructions the crate writes by hand (vector-length reads, the f32
//! non-finite filters, the f16 widening transpose). Each function here is
//! safe: it checks what its instructions need (the feature, the bounds)
//! itself, so the `unsafe` of everything but kernel calls
//! ([`families::engine`](crate::families::engine)) and ggml's raw operands
//! ([`ggml`](crate::ggml)) lives in this one file.
// Off aarch64 only the portable callers remain.
#![cfg_attr(not(target_arch = "aarch64"), allow(dead_code))]

/// Bits of Linux's `<asm/hwcap.h>` (`AT_HWCAP`, then `AT_HWCAP2`, kept
/// 64-bit: SME2 is bit 37).
#[cfg(all(target_arch = "aarch64", any(target_os = "linux", target_os = "android")))]
pub(crate) mod hwcap {
    pub(crate) const FP: u64 = 1 << 0;
    pub(crate) const ASIMD: u64 = 1 << 1;
    pub(crate) const ASIMDHP: u64 = 1 << 10;
    pub(crate) const ASIMDDP: u64 = 1 << 20;
    pub(crate) const SVE: u64 = 1 << 22;
    pub(crate) const SVE2: u64 = 1 << 1;
    pub(crate) const I8MM: u64 = 1 << 13;
    pub(crate) const BF16: u64 = 1 << 14;
    pub(crate) const SME: u64 = 1 << 23;
    pub(crate) const SVE2P1: u64 = 1 << 36;
    pub(crate) const SME2: u64 = 1 << 37;
    pub(crate) const SME2P1: u64 = 1 << 38;
}

/// `AT_HWCAP` and `AT_HWCAP2` of this process.
#[cfg(all(target_arch = "aarch64", any(target_os = "linux", target_os = "android")))]
pub(crate) fn hwcaps() -> (u64, u64) {
    // SAFETY: getauxval has no preconditions; unknown keys return 0.
    unsafe { (libc::getauxval(libc::AT_HWCAP), libc::getauxval(libc::AT_HWCAP2)) }
}

/// What the operating system reports of the extensions this file's own
/// instructions need, read once per process. This is what makes them
/// sound, whatever the crate's policy (`cpu::Features`,
/// which never holds more) lets callers use.
#[cfg(target_arch = "aarch64")]
#[derive(Clone, Copy)]
struct Os {
    sve: bool,
    sve2p1: bool,
    sme: bool,
}

#[cfg(target_arch = "aarch64")]
#[inline]
fn os() -> Os {
    static OS: std::sync::OnceLock<Os> = std::sync::OnceLock::new();
    *OS.get_or_init(|| {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        {
            let (h, h2) = hwcaps();
            let sve = h & hwcap::SVE != 0;
            Os { sve, sve2p1: sve && h2 & hwcap::SVE2P1 != 0, sme: h2 & hwcap::SME != 0 }
        }
        // Apple cores have no SVE outside streaming mode.
        #[cfg(target_vendor = "apple")]
        {
            Os { sve: false, sve2p1: false, sme: sysctl_flag("hw.optional.arm.FEAT_SME") }
        }
        #[cfg(not(any(target_os = "linux", target_os = "android", target_vendor = "apple")))]
        {
            Os { sve: false, sve2p1: false, sme: false }
        }
    })
}

/// The SVE vector length in bytes Linux reports for this thread, or 0 when
/// it reports none (no SVE).
#[cfg(all(target_arch = "aarch64", any(target_os = "linux", target_os = "android")))]
pub(crate) fn prctl_sve_vector_bytes() -> usize {
    const PR_SVE_GET_VL: libc::c_int = 51;
    const PR_SVE_VL_LEN_MASK: libc::c_int = 0xffff;
    // SAFETY: PR_SVE_GET_VL takes no pointer arguments; on error (no SVE)
    // it returns -1.
    let r = unsafe { libc::prctl(PR_SVE_GET_VL, 0, 0, 0, 0) };
    if r > 0 { (r & PR_SVE_VL_LEN_MASK) as usize } else { 0 }
}

/// Whether the integer sysctl `name` is nonzero (false when absent).
#[cfg(all(target_arch = "aarch64", target_vendor = "apple"))]
pub(crate) fn sysctl_flag(name: &str) -> bool {
    let Ok(cname) = std::ffi::CString::new(name) else { return false };
    let mut value: libc::c_int = 0;
    let mut len = core::mem::size_of::<libc::c_int>();
    // SAFETY: `value` and `len` are valid for writes of `len` bytes; the
    // name is NUL-terminated; no new value is written.
    let r = unsafe {
        libc::sysctlbyname(cname.as_ptr(), (&mut value as *mut libc::c_int).cast(), &mut len, core::ptr::null_mut(), 0)
    };
    r == 0 && value != 0
}

/// What the one instruction `$inst` (an `.inst` word) writes to x0, as
/// usize; it must touch neither memory nor flags (in an `unsafe` block
/// that says why the instruction exists here).
#[cfg(target_arch = "aarch64")]
macro_rules! x0_of {
    ($inst:literal) => {{
        let x: u64;
        core::arch::asm!($inst, out("x0") x, options(nomem, nostack, preserves_flags));
        x as usize
    }};
}

/// The SME streaming vector length in bytes of the calling thread now
/// (`RDSVL`; never `CNTB`, an SVE instruction that faults on SME-only cores
/// such as Apple M4), 0 when the operating system reports no SME.
#[cfg(target_arch = "aarch64")]
#[inline]
pub(crate) fn rdsvl_bytes() -> usize {
    vector_bytes(true)
}

/// The SVE vector length in bytes of the calling thread now (`RDVL`), 0
/// when the operating system reports no SVE.
#[cfg(target_arch = "aarch64")]
#[inline]
pub(crate) fn rdvl_bytes() -> usize {
    vector_bytes(false)
}

/// [`rdsvl_bytes`] (`streaming`) or [`rdvl_bytes`].
#[cfg(target_arch = "aarch64")]
#[inline(always)]
fn vector_bytes(streaming: bool) -> usize {
    let os = os();
    if !(if streaming { os.sme } else { os.sve }) {
        return 0;
    }
    // SAFETY: the operating system reports SME for RDSVL, SVE for RDVL
    // (checked above), so the instruction exists; each reads a system value
    // into x0 and touches neither memory nor flags.
    unsafe {
        if streaming {
            // rdsvl x0, #1
            x0_of!(".inst 0x04bf5820")
        } else {
            // rdvl x0, #1
            x0_of!(".inst 0x04bf5020")
        }
    }
}

/// `asm!` of an f32 filter ([`fmla_filter_neon`], [`fmla_filter_sve`]): the
/// template and operands given (ending in a comma), then what both write:
/// the lanes' sum in v0 into `$acc`, the other accumulators (v1-v3) and the
/// loaded values (v16-v31); no stack, no memory written.
#[cfg(target_arch = "aarch64")]
macro_rules! filter_asm {
    ($acc:ident; $($args:tt)*) => {
        core::arch::asm!(
            $($args)*
            out("v0") $acc,
            out("v1") _, out("v2") _, out("v3") _,
            out("v16") _, out("v17") _, out("v18") _, out("v19") _,
            out("v20") _, out("v21") _, out("v22") _, out("v23") _,
            out("v24") _, out("v25") _, out("v26") _, out("v27") _,
            out("v28") _, out("v29") _, out("v30") _, out("v31") _,
            options(nostack, readonly),
        )
    };
}

/// The fast filter of f32's non-finite scan
/// (`Finite::all_finite` of `weights::non_finite`)
/// in NEON over the first `v.len() / 64 * 64` values: `acc = acc + x * y`
/// per lane over pairs of vectors, 64 values a round (four four-register
/// loads, 8 `fmla`, 2 loop instructions), then the lanes' sum. A NaN or an
/// infinity among them makes the sum NaN or infinite; a finite sum proves
/// every value it covered finite.
#[cfg(target_arch = "aarch64")]
pub(crate) fn fmla_filter_neon(v: &[f32]) -> f32 {
    let rounds = v.len() / 64;
    let acc: f32;
    // SAFETY: NEON is part of the aarch64 baseline (every target this crate
    // builds for has it); the loop runs `rounds` times and each round loads
    // 64 f32 values at `p` and moves `p` past them, so it reads
    // `rounds * 64 <= v.len()` values of `v` and nothing else (no round when
    // `rounds` is 0); registers written are declared (v0-v3, v16-v31, the
    // flags); no memory is written.
    unsafe {
        filter_asm!(
            acc;
            "movi v0.16b, #0",
            "movi v1.16b, #0",
            "movi v2.16b, #0",
            "movi v3.16b, #0",
            "cbz {n}, 2f",
            "1:",
            "ld1 {{ v16.4s, v17.4s, v18.4s, v19.4s }}, [{p}], #64",
            "ld1 {{ v20.4s, v21.4s, v22.4s, v23.4s }}, [{p}], #64",
            "ld1 {{ v24.4s, v25.4s, v26.4s, v27.4s }}, [{p}], #64",
            "ld1 {{ v28.4s, v29.4s, v30.4s, v31.4s }}, [{p}], #64",
            "fmla v0.4s, v16.4s, v17.4s",
            "fmla v1.4s, v18.4s, v19.4s",
            "fmla v2.4s, v20.4s, v21.4s",
            "fmla v3.4s, v22.4s, v23.4s",
            "fmla v0.4s, v24.4s, v25.4s",
            "fmla v1.4s, v26.4s, v27.4s",
            "fmla v2.4s, v28.4s, v29.4s",
            "fmla v3.4s, v30.4s, v31.4s",
            "subs {n}, {n}, #1",
            "b.ne 1b",
            "2:",
            "fadd v0.4s, v0.4s, v1.4s",
            "fadd v2.4s, v2.4s, v3.4s",
            "fadd v0.4s, v0.4s, v2.4s",
            "faddp v0.4s, v0.4s, v0.4s",
            "faddp s0, v0.2s",
            p = inout(reg) v.as_ptr() => _,
            n = inout(reg) rounds => _,
        );
    }
    acc
}

/// The fast filter of f32's non-finite scan in SVE over all of `v`, when
/// the caller may use SVE (`sve`: the crate's policy, `Features::current`)
/// and the operating system reports it, and the thread's vector
/// holds at least 8 values (256 bits; at 128 the NEON loop's four-register
/// loads do better): `acc = acc + x * y` over pairs of vectors, 8 vectors a
/// round (8 loads, 4 `fmla`, 3 loop instructions: 128 values in 15
/// instructions at 512 bits; with SVE2.1's four-register loads 16 vectors a
/// round in 4 loads, 8 `fmla`, 3 loop instructions, then one of 8 if at
/// least 8 are left), the tail under a predicate (`x * x`), then the lanes'
/// sum. Finite proves every value finite, as in [`fmla_filter_neon`]. None
/// when SVE is not used.
/// SVE2.1's loads are used when `sve2p1` allows them and the operating
/// system reports SVE2.1.
#[cfg(target_arch = "aarch64")]
pub(crate) fn fmla_filter_sve(v: &[f32], sve: bool, sve2p1: bool) -> Option<f32> {
    let os = os();
    if !(sve && os.sve) {
        return None;
    }
    let (acc, ran): (f32, u64);
    // The scan: rounds of 2^`$shift` vectors from `{p}` (the loads
    // `$load` into z16 and up, the `fmla`s `$fmla` into z0-z3, `$addvl`
    // past them), then `$half` (8 vectors, once, when at least 8 are left;
    // none where the round is 8), then the tail, after `$setup`, in the
    // extension `$ext`.
    macro_rules! scan {
        (
            $ext:literal, $setup:literal, $shift:literal, $addvl:literal,
            [$($load:literal),+], [$($fmla:literal),+], [$($half:literal),*]
        ) => {
            filter_asm!(
                acc;
                $ext,
                "cntw {vl}",
                "mov {ran}, #0",
                "cmp {vl}, #8",
                "b.lo 9f",
                "mov z0.s, #0",
                "mov z1.s, #0",
                "mov z2.s, #0",
                "mov z3.s, #0",
                "ptrue p0.s",
                $setup,
                concat!("lsl {step}, {vl}, #", $shift),
                "subs {n}, {n}, {step}",
                "b.lo 2f",
                "1:",
                $($load,)+
                $($fmla,)+
                $addvl,
                "subs {n}, {n}, {step}",
                "b.hs 1b",
                "2:",
                "add {n}, {n}, {step}",
                $($half,)*
                "mov {i}, #0",
                "whilelo p1.s, {i}, {n}",
                "b.eq 4f",
                "3:",
                "ld1w {{ z16.s }}, p1/z, [{p}, {i}, lsl #2]",
                "fmla z0.s, p1/m, z16.s, z16.s",
                "incw {i}",
                "whilelo p1.s, {i}, {n}",
                "b.mi 3b",
                "4:",
                "fadd z0.s, z0.s, z1.s",
                "fadd z2.s, z2.s, z3.s",
                "fadd z0.s, z0.s, z2.s",
                "faddv s0, p0, z0.s",
                "mov {ran}, #1",
                "9:",
                p = inout(reg) v.as_ptr() => _,
                n = inout(reg) v.len() => _,
                vl = out(reg) _,
                step = out(reg) _,
                i = out(reg) _,
                ran = out(reg) ran,
                out("p0") _, out("p1") _, out("p8") _,
            )
        };
    }
    // SAFETY: the operating system reports SVE (checked above), and SVE2.1
    // for the four-register loads (checked before them); the loads read `v.len()` f32 values from
    // `v.as_ptr()` (whole vectors while at least a round, then 8, of them
    // remain, then predicated by `whilelo` to the remaining count), nothing
    // past the slice; registers written are declared (z0-z3 and z16-z31
    // through their v halves, p0, p1, p8, the flags); no memory is written.
    unsafe {
        if sve2p1 && os.sve2p1 {
            scan!(
                ".arch_extension sve2p1",
                "ptrue pn8.s",
                "4",
                "addvl {p}, {p}, #16",
                [
                    "ld1w {{ z16.s - z19.s }}, pn8/z, [{p}]",
                    "ld1w {{ z20.s - z23.s }}, pn8/z, [{p}, #4, mul vl]",
                    "ld1w {{ z24.s - z27.s }}, pn8/z, [{p}, #8, mul vl]",
                    "ld1w {{ z28.s - z31.s }}, pn8/z, [{p}, #12, mul vl]"
                ],
                [
                    "fmla z0.s, p0/m, z16.s, z17.s",
                    "fmla z1.s, p0/m, z18.s, z19.s",
                    "fmla z2.s, p0/m, z20.s, z21.s",
                    "fmla z3.s, p0/m, z22.s, z23.s",
                    "fmla z0.s, p0/m, z24.s, z25.s",
                    "fmla z1.s, p0/m, z26.s, z27.s",
                    "fmla z2.s, p0/m, z28.s, z29.s",
                    "fmla z3.s, p0/m, z30.s, z31.s"
                ],
                [
                    "lsl {step}, {vl}, #3",
                    "cmp {n}, {step}",
                    "b.lo 5f",
                    "ld1w {{ z16.s - z19.s }}, pn8/z, [{p}]",
                    "ld1w {{ z20.s - z23.s }}, pn8/z, [{p}, #4, mul vl]",
                    "fmla z0.s, p0/m, z16.s, z17.s",
                    "fmla z1.s, p0/m, z18.s, z19.s",
                    "fmla z2.s, p0/m, z20.s, z21.s",
                    "fmla z3.s, p0/m, z22.s, z23.s",
                    "addvl {p}, {p}, #8",
                    "sub {n}, {n}, {step}",
                    "5:"
                ]
            );
        } else {
            scan!(
                ".arch_extension sve",
                "",
                "3",
                "addvl {p}, {p}, #8",
                [
                    "ld1w {{ z16.s }}, p0/z, [{p}]",
                    "ld1w {{ z17.s }}, p0/z, [{p}, #1, mul vl]",
                    "ld1w {{ z18.s }}, p0/z, [{p}, #2, mul vl]",
                    "ld1w {{ z19.s }}, p0/z, [{p}, #3, mul vl]",
                    "ld1w {{ z20.s }}, p0/z, [{p}, #4, mul vl]",
                    "ld1w {{ z21.s }}, p0/z, [{p}, #5, mul vl]",
                    "ld1w {{ z22.s }}, p0/z, [{p}, #6, mul vl]",
                    "ld1w {{ z23.s }}, p0/z, [{p}, #7, mul vl]"
                ],
                [
                    "fmla z0.s, p0/m, z16.s, z17.s",
                    "fmla z1.s, p0/m, z18.s, z19.s",
                    "fmla z2.s, p0/m, z20.s, z21.s",
                    "fmla z3.s, p0/m, z22.s, z23.s"
                ],
                []
            );
        }
    }
    (ran != 0).then_some(acc)
}

/// The 4 x 4 blocks of `weights::f16_kxn::f16_rows_to_f32_kxn`
/// (`n` rows of `k` little-endian f16 values in `src`, rows `stride` bytes
/// apart, into `kxn[i * n + j]` = row `j` value `i`): rows `0..n / 4 * 4`
/// by values `0..k / 4 * 4`, four 8-byte loads, `fcvtl` (base AdvSIMD: no
/// FP16 extension; it converts exactly as `fcvt` does), a register
/// transpose and four 16-byte stores each. Returns those two extents; the
/// caller converts the rest. Panics unless `stride >= 2 * k`, `src` holds
/// every row and `kxn` holds `k * n` values (a checked caller has checked
/// them).
#[cfg(target_arch = "aarch64")]
pub(crate) fn f16_blocks_to_f32_kxn(src: &[u8], stride: usize, n: usize, k: usize, kxn: &mut [f32]) -> (usize, usize) {
    use core::arch::aarch64::{
        float32x4_t, uint16x4_t, vld1_u8, vreinterpret_u16_u8, vreinterpretq_f32_f64, vreinterpretq_f64_f32, vst1q_f32,
        vtrn1q_f32, vtrn1q_f64, vtrn2q_f32, vtrn2q_f64,
    };

    let (n4, k4) = (n / 4 * 4, k / 4 * 4);
    if n4 == 0 || k4 == 0 {
        return (0, 0);
    }
    assert!(stride >= 2 * k && src.len() >= (n - 1) * stride + 2 * k && kxn.len() >= k * n);
    let (s, d) = (src.as_ptr(), kxn.as_mut_ptr());
    for j in (0..n4).step_by(4) {
        for i in (0..k4).step_by(4) {
            // SAFETY: rows j..j+4 < n4 <= n and values i..i+4 <= k4 <= k:
            // each 8-byte load starts at (j + r) * stride + 2 * i and ends
            // by (n - 1) * stride + 2 * k <= src.len(); each 16-byte store
            // covers kxn[(i + c) * n + j .. + 4], ending by (k - 1) * n + n
            // = k * n <= kxn.len() (both asserted above). u8 loads and
            // vst1q_f32 need no alignment beyond the element's. `fcvtl`
            // (four f16 values to f32) is one register-to-register
            // instruction of base AdvSIMD (every aarch64 CPU has it); no
            // memory, no stack, no flags.
            unsafe {
                let row = |r: usize| {
                    let h: uint16x4_t = vreinterpret_u16_u8(vld1_u8(s.add((j + r) * stride + 2 * i)));
                    let f: float32x4_t;
                    core::arch::asm!("fcvtl {f:v}.4s, {h:v}.4h", f = lateout(vreg) f, h = in(vreg) h,
                        options(pure, nomem, nostack, preserves_flags));
                    f
                };
                let (a, b, c, e) = (row(0), row(1), row(2), row(3));
                let (ab0, ab1) = (vtrn1q_f32(a, b), vtrn2q_f32(a, b));
                let (ce0, ce1) = (vtrn1q_f32(c, e), vtrn2q_f32(c, e));
                let lo = |x: float32x4_t, y: float32x4_t| {
                    vreinterpretq_f32_f64(vtrn1q_f64(vreinterpretq_f64_f32(x), vreinterpretq_f64_f32(y)))
                };
                let hi = |x: float32x4_t, y: float32x4_t| {
                    vreinterpretq_f32_f64(vtrn2q_f64(vreinterpretq_f64_f32(x), vreinterpretq_f64_f32(y)))
                };
                vst1q_f32(d.add(i * n + j), lo(ab0, ce0));
                vst1q_f32(d.add((i + 1) * n + j), lo(ab1, ce1));
                vst1q_f32(d.add((i + 2) * n + j), hi(ab0, ce0));
                vst1q_f32(d.add((i + 3) * n + j), hi(ab1, ce1));
            }
        }
    }
    (n4, k4)
}
