//! Run-time CPU feature detection (and, deprecated, proof tokens per tier:
//! no kernel API takes them, every kernel call checks the features itself).
//!
//! Detection runs once per process ([`Features::detected`]); what the crate
//! uses is [`Features::current`]: the detected set minus whatever was turned
//! off through `KLEIDIAI_DISABLE` or [`disable`]. Overrides can only remove
//! tiers, never add one, and anything unknown counts as absent. A word of
//! `KLEIDIAI_DISABLE` naming no tier is ignored with a warning on stderr
//! (see [`DISABLE_ENV`]).
//!
//! ```
//! use kleidiai::cpu::{CpuFeature, Features};
//! let f = Features::current();
//! println!("{f}");
//! if let Some(svl) = f.sme_vector_bytes().filter(|_| f.has(CpuFeature::Sme2)) {
//!     println!("SME2 kernels run here at {} bits", svl * 8);
//! }
//! assert!(!Features::none().has(CpuFeature::Neon));
//! ```

use core::fmt;
use core::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

pub use kleidiai_sys::CpuFeature;

/// Environment variable naming tiers to switch off, comma-separated: any of
/// `neon dotprod i8mm fp16 bf16 sve sve2 sve2p1 sme sme2 sme2p1`, or `all`
/// (every kernel off: only the portable reference path runs).
///
/// Read once per process, with detection. A word that names no tier (or a
/// value that is not UTF-8) prints one warning to stderr naming the unknown
/// words, the accepted names and the tiers switched off; the known words
/// still apply and the unknown ones are ignored (`KLEIDIAI_DISABLE=sme2,sme3`
/// switches SME2 off and warns about `sme3`). [`disable_env_error`] returns
/// the same text.
pub const DISABLE_ENV: &str = "KLEIDIAI_DISABLE";

const fn bit(f: CpuFeature) -> u32 {
    1 << (f as u32)
}

/// A set of CPU features plus the vector lengths that go with them.
///
/// Values come only from detection or from removing features from a detected
/// set, so a `Features` never claims more than the CPU has.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Features {
    bits: u32,
    sve_vl: usize,
    sme_svl: usize,
}

/// The deprecated proof-token getters of [`Features`], each `$name` giving
/// its `$token` where the tier may run: by `$body` (with `$f` the
/// features), or for a token named after its [`CpuFeature`], whenever the
/// features have it.
macro_rules! token_getters {
    ($($(#[$doc:meta])* $name:ident -> $token:ident $(= |$f:ident| $body:expr)?;)+) => {
        $(
            $(#[$doc])*
            #[deprecated(note = "no kernel API takes proof tokens; use Features::has or *_vector_bytes")]
            #[allow(deprecated)] // builds the deprecated token
            pub fn $name(&self) -> Option<$token> {
                token_getters!(@body self, $token $(, |$f| $body)?)
            }
        )+
    };
    (@body $s:ident, $token:ident) => {
        $s.has(CpuFeature::$token).then_some($token(()))
    };
    (@body $s:ident, $token:ident, |$f:ident| $body:expr) => {{
        let $f = $s;
        $body
    }};
}

impl Features {
    /// The empty set: no kernel can run (the reference path is used).
    pub const fn none() -> Features {
        Features { bits: 0, sve_vl: 0, sme_svl: 0 }
    }

    /// What the CPU offers, detected once per process. Ignores overrides.
    #[inline]
    pub fn detected() -> Features {
        static DETECTED: OnceLock<Features> = OnceLock::new();
        *DETECTED.get_or_init(|| {
            let raw = detect::detect();
            let (mask, warning) = disable_env();
            // Once per process (this runs once): words naming no tier are
            // said, never silently dropped nor taken as "everything off".
            if let Some(w) = warning {
                use std::io::Write as _;
                let _ = writeln!(std::io::stderr(), "{w}");
            }
            raw.without_mask(mask)
        })
    }

    /// What the crate may use now: [`Features::detected`] (already minus
    /// `KLEIDIAI_DISABLE`) minus everything [`disable`] switched off.
    #[inline]
    pub fn current() -> Features {
        // DISABLED is stored closed under dependents (see `disable`).
        Features::detected().without_closed_mask(DISABLED.load(Ordering::Relaxed))
    }

    /// Whether `f` is present.
    pub const fn has(&self, f: CpuFeature) -> bool {
        self.bits & bit(f) != 0
    }

    /// Whether every feature of `fs` is present.
    pub fn has_all(&self, fs: &[CpuFeature]) -> bool {
        fs.iter().all(|f| self.has(*f))
    }

    /// This set without `fs` (and without what depends on them: removing
    /// `sve` removes `sve2` and `sve2p1`, removing `sme` removes `sme2`...).
    #[must_use]
    pub fn without(&self, fs: &[CpuFeature]) -> Features {
        self.without_mask(fs.iter().fold(0, |m, f| m | bit(*f)))
    }

    fn without_mask(&self, mask: u32) -> Features {
        self.without_closed_mask(close_under_dependents(mask))
    }

    /// `without_mask` for a mask already closed under dependents.
    fn without_closed_mask(&self, mask: u32) -> Features {
        let bits = self.bits & !mask;
        Features {
            bits,
            sve_vl: if bits & bit(CpuFeature::Sve) != 0 { self.sve_vl } else { 0 },
            sme_svl: if bits & bit(CpuFeature::Sme) != 0 { self.sme_svl } else { 0 },
        }
    }

    /// The SVE vector length in bytes, when SVE is present.
    pub const fn sve_vector_bytes(&self) -> Option<usize> {
        if self.has(CpuFeature::Sve) && self.sve_vl != 0 { Some(self.sve_vl) } else { None }
    }

    /// The SME streaming vector length in bytes, when SME is present.
    pub const fn sme_vector_bytes(&self) -> Option<usize> {
        if self.has(CpuFeature::Sme) && self.sme_svl != 0 { Some(self.sme_svl) } else { None }
    }

    /// The features present, in [`CpuFeature::ALL`] order.
    pub fn iter(&self) -> impl Iterator<Item = CpuFeature> + '_ {
        CpuFeature::ALL.into_iter().filter(|f| self.has(*f))
    }

    token_getters! {
        /// Proof that FEAT_DotProd kernels may run.
        dotprod -> Dotprod;
        /// Proof that FEAT_I8MM kernels may run.
        i8mm -> I8mm;
        /// Proof that FEAT_FP16 kernels may run.
        fp16 -> Fp16;
        /// Proof that FEAT_BF16 kernels may run.
        bf16 -> Bf16;
        /// Proof that SVE kernels may run, with the vector length.
        sve -> Sve = |f| f.sve_vector_bytes().map(|vl| Sve { vector_bytes: vl });
        /// Proof that SVE2.1 kernels may run.
        sve2p1 -> Sve2p1 = |f| (f.has(CpuFeature::Sve2p1) && f.sve_vl != 0).then_some(Sve2p1(()));
        /// Proof that SME kernels may run, with the streaming vector length.
        sme -> Sme = |f| f.sme_vector_bytes().map(|svl| Sme { vector_bytes: svl });
        /// Proof that SME2 kernels may run, with the streaming vector length.
        sme2 -> Sme2 = |f| {
            if f.has(CpuFeature::Sme2) { f.sme().map(|s| Sme2 { vector_bytes: s.vector_bytes }) } else { None }
        };
    }

    #[cfg(test)]
    pub(crate) fn synthetic(fs: &[CpuFeature], sve_vl: usize, sme_svl: usize) -> Features {
        Features { bits: fs.iter().fold(0, |m, f| m | bit(*f)), sve_vl, sme_svl }
    }
}

impl fmt::Debug for Features {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Features")
            .field("features", &self.iter().map(|x| x.name()).collect::<Vec<_>>())
            .field("sve_vector_bytes", &self.sve_vector_bytes())
            .field("sme_vector_bytes", &self.sme_vector_bytes())
            .finish()
    }
}

impl fmt::Display for Features {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.iter().map(|x| x.name()).collect();
        if names.is_empty() {
            f.write_str("none")?;
        } else {
            f.write_str(&names.join(" "))?;
        }
        if let Some(vl) = self.sve_vector_bytes() {
            write!(f, " (SVE VL {} bits)", vl * 8)?;
        }
        if let Some(svl) = self.sme_vector_bytes() {
            write!(f, " (SME SVL {} bits)", svl * 8)?;
        }
        Ok(())
    }
}

/// Removing a feature removes what is built on it.
fn close_under_dependents(mut mask: u32) -> u32 {
    use CpuFeature::*;
    let deps: [(CpuFeature, &[CpuFeature]); 4] = [
        (Neon, &[Fp16, Bf16, Dotprod, I8mm, Sve, Sve2, Sve2p1, Sme, Sme2, Sme2p1]),
        (Sve, &[Sve2, Sve2p1]),
        (Sve2, &[Sve2p1]),
        (Sme, &[Sme2, Sme2p1]),
    ];
    for _ in 0..2 {
        for (f, dependents) in deps {
            if mask & bit(f) != 0 {
                for d in dependents {
                    mask |= bit(*d);
                }
            }
        }
    }
    if mask & bit(Sme2) != 0 {
        mask |= bit(Sme2p1);
    }
    mask
}

/// Parses a `KLEIDIAI_DISABLE` value: the mask of the words naming a tier
/// (or `all`), and the words naming none.
fn parse_disable_list(s: &str) -> (u32, Vec<String>) {
    let mut mask = 0;
    let mut unknown = Vec::new();
    for word in s.split([',', ' ']).map(str::trim).filter(|w| !w.is_empty()) {
        let word = word.to_ascii_lowercase();
        if word == "all" {
            mask |= bit(CpuFeature::Neon);
            continue;
        }
        match CpuFeature::ALL.iter().find(|f| f.name() == word) {
            Some(f) => mask |= bit(*f),
            None => unknown.push(word),
        }
    }
    (mask, unknown)
}

/// `KLEIDIAI_DISABLE` from the environment (not UTF-8: read lossily, so the
/// damaged word is reported): the mask to remove, and the warning when a
/// word names no tier.
fn disable_env() -> (u32, Option<String>) {
    let Some(raw) = std::env::var_os(DISABLE_ENV) else { return (0, None) };
    let value = raw.to_string_lossy();
    let (mask, unknown) = parse_disable_list(&value);
    if unknown.is_empty() {
        return (mask, None);
    }
    let words: Vec<String> = unknown.iter().map(|w| format!("`{w}`")).collect();
    let known: Vec<&str> = CpuFeature::ALL.iter().map(|f| f.name()).chain(["all"]).collect();
    let off: Vec<&str> = CpuFeature::ALL.iter().filter(|f| mask & bit(**f) != 0).map(|f| f.name()).collect();
    let off = if off.is_empty() { "nothing".to_string() } else { off.join(",") };
    let warning = format!(
        "kleidiai: {DISABLE_ENV}='{value}': ignoring {} (no such tier; accepted: {}); switching off: {off}",
        words.join(", "),
        known.join(", "),
    );
    (mask, Some(warning))
}

static DISABLED: AtomicU32 = AtomicU32::new(0);

/// The features switched off now ([`disable`]), as a mask: with the detected
/// set, which never changes, it determines [`Features::current`].
#[inline]
pub(crate) fn disabled_mask() -> u32 {
    DISABLED.load(Ordering::Relaxed)
}

/// What [`Features::current`] is while the disabled mask is `mask`.
pub(crate) fn features_with_disabled(mask: u32) -> Features {
    Features::detected().without_closed_mask(mask)
}

/// Switches tiers off for the rest of the process (a kill switch; there is
/// no way to switch a tier back on that detection did not find). Dependents
/// go too: disabling [`CpuFeature::Sme`] also disables SME2.
///
/// ```
/// use kleidiai::cpu::{disable, CpuFeature, Features};
/// disable(&[CpuFeature::Sme2]);
/// assert!(!Features::current().has(CpuFeature::Sme2));
/// ```
pub fn disable(fs: &[CpuFeature]) {
    let mask = close_under_dependents(fs.iter().fold(0, |m, f| m | bit(*f)));
    DISABLED.fetch_or(mask, Ordering::Relaxed);
}

/// The warning about `KLEIDIAI_DISABLE` (printed once to stderr when
/// detection reads it): the words that name no tier, ignored, the accepted
/// names and what was switched off. `None` when the variable is unset or
/// every word is understood.
pub fn disable_env_error() -> Option<String> {
    disable_env().1
}

macro_rules! plain_token {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[deprecated(note = "proof tokens are taken by no kernel API; they leave the public API in the next release")]
        #[derive(Clone, Copy, Debug)]
        pub struct $name(());
    };
}
plain_token!(
    /// Proof that FEAT_DotProd is present (and not disabled).
    Dotprod
);
plain_token!(
    /// Proof that FEAT_I8MM is present (and not disabled).
    I8mm
);
plain_token!(
    /// Proof that FEAT_FP16 is present (and not disabled).
    Fp16
);
plain_token!(
    /// Proof that FEAT_BF16 is present (and not disabled).
    Bf16
);
plain_token!(
    /// Proof that FEAT_SVE2p1 is present (and not disabled).
    Sve2p1
);

/// A deprecated proof token with a vector length, read by its
/// `vector_bytes` (documented by `$len`).
macro_rules! vl_token {
    ($(#[$doc:meta])* $name:ident, $len:literal) => {
        $(#[$doc])*
        #[deprecated(note = "proof tokens are taken by no kernel API; they leave the public API in the next release")]
        #[derive(Clone, Copy, Debug)]
        pub struct $name {
            vector_bytes: usize,
        }
        #[allow(deprecated)] // the deprecated token's own accessors
        impl $name {
            #[doc = $len]
            pub fn vector_bytes(&self) -> usize {
                self.vector_bytes
            }
        }
    };
}
vl_token!(
    /// Proof that SVE is present, with its vector length.
    Sve,
    "SVE vector length in bytes."
);
vl_token!(
    /// Proof that SME is present, with its streaming vector length.
    Sme,
    "Streaming vector length in bytes."
);
vl_token!(
    /// Proof that SME2 is present, with the streaming vector length.
    Sme2,
    "Streaming vector length in bytes."
);
#[allow(deprecated)] // the deprecated token's own accessors
impl Sme2 {
    /// An SME2 CPU is an SME CPU.
    pub fn sme(&self) -> Sme {
        Sme { vector_bytes: self.vector_bytes }
    }
}

mod detect {
    use super::{Features, bit};
    #[allow(unused_imports)]
    use kleidiai_sys::CpuFeature::{self, *};

    #[cfg(all(target_arch = "aarch64", any(target_os = "linux", target_os = "android")))]
    pub fn detect() -> Features {
        use crate::arch::hwcap::{
            ASIMD as HWCAP_ASIMD, ASIMDDP as HWCAP_ASIMDDP, ASIMDHP as HWCAP_ASIMDHP, BF16 as HWCAP2_BF16,
            FP as HWCAP_FP, I8MM as HWCAP2_I8MM, SME as HWCAP2_SME, SME2 as HWCAP2_SME2, SME2P1 as HWCAP2_SME2P1,
            SVE as HWCAP_SVE, SVE2 as HWCAP2_SVE2, SVE2P1 as HWCAP2_SVE2P1,
        };

        let (hwcap, hwcap2) = crate::arch::hwcaps();
        let mut bits = 0u32;
        let mut set = |cond: bool, f: CpuFeature| {
            if cond {
                bits |= bit(f);
            }
        };
        let neon = hwcap & HWCAP_FP != 0 && hwcap & HWCAP_ASIMD != 0;
        set(neon, Neon);
        set(neon && hwcap & HWCAP_ASIMDHP != 0, Fp16);
        set(neon && hwcap & HWCAP_ASIMDDP != 0, Dotprod);
        set(neon && hwcap2 & HWCAP2_I8MM != 0, I8mm);
        set(neon && hwcap2 & HWCAP2_BF16 != 0, Bf16);
        let sve = neon && hwcap & HWCAP_SVE != 0;
        set(sve, Sve);
        set(sve && hwcap2 & HWCAP2_SVE2 != 0, Sve2);
        set(sve && hwcap2 & HWCAP2_SVE2 != 0 && hwcap2 & HWCAP2_SVE2P1 != 0, Sve2p1);
        let sme = neon && hwcap2 & HWCAP2_SME != 0;
        set(sme, Sme);
        set(sme && hwcap2 & HWCAP2_SME2 != 0, Sme2);
        set(sme && hwcap2 & HWCAP2_SME2 != 0 && hwcap2 & HWCAP2_SME2P1 != 0, Sme2p1);

        let sve_vl = if sve { crate::arch::prctl_sve_vector_bytes() } else { 0 };
        let sme_svl = if sme { crate::arch::rdsvl_bytes() } else { 0 };
        finish(bits, sve_vl, sme_svl)
    }

    #[cfg(all(target_arch = "aarch64", target_vendor = "apple"))]
    pub fn detect() -> Features {
        use crate::arch::sysctl_flag as sysctl;
        let mut bits = bit(Neon);
        let mut set = |name: &str, f: CpuFeature| {
            if sysctl(name) {
                bits |= bit(f);
            }
        };
        set("hw.optional.arm.FEAT_FP16", Fp16);
        set("hw.optional.arm.FEAT_DotProd", Dotprod);
        set("hw.optional.arm.FEAT_I8MM", I8mm);
        set("hw.optional.arm.FEAT_BF16", Bf16);
        set("hw.optional.arm.FEAT_SME", Sme);
        set("hw.optional.arm.FEAT_SME2", Sme2);
        set("hw.optional.arm.FEAT_SME2p1", Sme2p1);
        // Apple cores have no SVE outside streaming mode.
        let sme_svl = if bits & bit(Sme) != 0 { crate::arch::rdsvl_bytes() } else { 0 };
        finish(bits, 0, sme_svl)
    }

    #[cfg(not(all(
        target_arch = "aarch64",
        any(target_os = "linux", target_os = "android", target_vendor = "apple")
    )))]
    pub fn detect() -> Features {
        Features::none()
    }

    /// Drops any tier whose vector length could not be read: unknown means off.
    #[allow(dead_code)]
    fn finish(mut bits: u32, sve_vl: usize, sme_svl: usize) -> Features {
        if sve_vl == 0 {
            bits &= !(bit(Sve) | bit(Sve2) | bit(Sve2p1));
        }
        if sme_svl == 0 {
            bits &= !(bit(Sme) | bit(Sme2) | bit(Sme2p1));
        }
        Features { bits, sve_vl, sme_svl }
    }
}

/// The vector lengths of the calling thread now (0 without SVE, SME).
#[cfg(target_arch = "aarch64")]
pub(crate) use crate::arch::{rdsvl_bytes, rdvl_bytes};

#[cfg(test)]
mod tests {
    use super::{CpuFeature, Features, bit, parse_disable_list};
    use CpuFeature::*;

    #[test]
    fn disable_list_parsing() {
        let none: Vec<String> = Vec::new();
        assert_eq!(parse_disable_list(""), (0, none.clone()));
        assert_eq!(parse_disable_list("sme2, sve"), (bit(Sme2) | bit(Sve), none.clone()));
        assert_eq!(parse_disable_list("ALL"), (bit(Neon), none));
        // Unknown words are returned (for the warning); the known ones apply.
        assert_eq!(parse_disable_list("sme3"), (0, vec!["sme3".to_string()]));
        assert_eq!(parse_disable_list("sme2,Warp-Drive"), (bit(Sme2), vec!["warp-drive".to_string()]));
    }

    #[test]
    fn removal_takes_dependents() {
        let all = Features::synthetic(&CpuFeature::ALL, 32, 32);
        let no_sme = all.without(&[Sme]);
        assert!(!no_sme.has(Sme) && !no_sme.has(Sme2) && !no_sme.has(Sme2p1));
        assert!(no_sme.has(Sve2p1) && no_sme.sme_vector_bytes().is_none() && !no_sme.has(Sme2));
        let no_sve = all.without(&[Sve]);
        assert!(!no_sve.has(Sve2) && !no_sve.has(Sve2p1) && no_sve.sve_vector_bytes().is_none());
        assert!(no_sve.has(Sme2) && no_sve.sme_vector_bytes().is_some(), "SME does not need non-streaming SVE");
        let nothing = all.without(&[Neon]);
        assert_eq!(nothing.iter().count(), 0);
    }

    #[test]
    fn vector_lengths_follow_features() {
        let f = Features::synthetic(&[Neon, Dotprod, Sme], 0, 64);
        assert!(f.has(Dotprod) && !f.has(I8mm));
        assert_eq!(f.sme_vector_bytes(), Some(64));
        assert!(!f.has(Sme2));
        assert!(f.sve_vector_bytes().is_none());
    }

    /// The deprecated tokens keep working until they leave the API.
    #[test]
    #[allow(deprecated)]
    fn deprecated_tokens_still_follow_features() {
        let f = Features::synthetic(&[Neon, Dotprod, Sme, Sme2], 16, 64);
        assert!(f.dotprod().is_some() && f.i8mm().is_none() && f.fp16().is_none() && f.bf16().is_none());
        assert_eq!(f.sme2().map(|t| (t.vector_bytes(), t.sme().vector_bytes())), Some((64, 64)));
        assert_eq!(f.sme().map(|t| t.vector_bytes()), Some(64));
        assert!(f.sve().is_none() && f.sve2p1().is_none(), "SVE is not in the set");
        let g = Features::synthetic(&[Neon, Sve], 32, 0);
        assert_eq!(g.sve().map(|t| t.vector_bytes()), Some(32));
        assert!(g.sme().is_none() && g.sme2().is_none());
    }

    #[test]
    fn detection_is_consistent() {
        let f = Features::detected();
        if cfg!(not(target_arch = "aarch64")) {
            assert_eq!(f, Features::none());
        }
        assert!(Features::current().bits & !f.bits == 0, "overrides never add features");
        if let Some(vl) = f.sve_vector_bytes() {
            assert!(vl >= 16 && vl % 16 == 0 && vl <= 256, "SVE VL {vl}");
        }
        if let Some(svl) = f.sme_vector_bytes() {
            assert!(svl >= 16 && svl.is_power_of_two() && svl <= 256, "SVL {svl}");
        }
    }
}
