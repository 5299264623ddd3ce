//! Shared generators: buffer lengths relative to what a shape needs,
//! dimensions from the usual to the overflowing, and data with NaN,
//! infinities or huge values mixed in.

use proptest::prelude::*;

/// Buffers are never made longer than this many elements: a length a
/// shape needs beyond it is an overflow case, given a short buffer.
pub const CAP: usize = 1 << 18;

/// A buffer length relative to the length the shape needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Len {
    Exact,
    Short(u8),
    Long(u8),
    Empty,
}

impl Len {
    /// The length to allocate for `need` elements (`None`: the need
    /// overflowed `usize`).
    pub fn of(self, need: Option<usize>) -> usize {
        let need = match need {
            Some(n) if n <= CAP => n,
            // Too big to allocate (or overflowed): some short buffer.
            _ => return if self == Len::Empty { 0 } else { 64 },
        };
        match self {
            Len::Exact => need,
            Len::Short(d) => need.saturating_sub(d as usize),
            Len::Long(d) => need + d as usize,
            Len::Empty => 0,
        }
    }
}

/// Mostly exact, sometimes short, long or empty.
pub fn len() -> impl Strategy<Value = Len> + Clone {
    len_weighted(14)
}

/// Exact `exact` times in `exact + 5`, else short, long or empty.
pub fn len_weighted(exact: u32) -> impl Strategy<Value = Len> + Clone {
    prop_oneof![
        exact => Just(Len::Exact),
        2 => (1u8..=3).prop_map(Len::Short),
        2 => (1u8..=9).prop_map(Len::Long),
        1 => Just(Len::Empty),
    ]
}

/// Dimensions whose products overflow `usize` (or need more than any
/// buffer the tests make).
pub fn huge() -> impl Strategy<Value = usize> {
    prop_oneof![
        Just(usize::MAX),
        Just(usize::MAX / 2 + 1),
        Just(1usize << 32),
        Just((1usize << 62) + 7),
        (1usize << 24)..(1usize << 40),
    ]
}

/// Any dimension: usually small, sometimes zero or huge.
pub fn wild_dim() -> impl Strategy<Value = usize> {
    prop_oneof![10 => 1usize..=70, 2 => Just(0usize), 2 => huge()]
}

/// Values to mix into otherwise ordinary data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Special {
    None,
    NaN,
    Inf,
    NegInf,
    /// Finite but large enough to overflow f16 (or a dot product in f32).
    Huge,
}

pub fn special() -> impl Strategy<Value = Special> {
    prop_oneof![
        16 => Just(Special::None),
        1 => Just(Special::NaN),
        1 => Just(Special::Inf),
        1 => Just(Special::NegInf),
        1 => Just(Special::Huge),
    ]
}

/// [`special`] when `on`, else always [`Special::None`].
pub fn special_if(on: bool) -> BoxedStrategy<Special> {
    if on { special().boxed() } else { Just(Special::None).boxed() }
}

impl Special {
    pub fn value(self) -> Option<f32> {
        match self {
            Special::None => None,
            Special::NaN => Some(f32::NAN),
            Special::Inf => Some(f32::INFINITY),
            Special::NegInf => Some(f32::NEG_INFINITY),
            Special::Huge => Some(3.0e38),
        }
    }
}

/// The bulk data of a case comes from a seed (the strategy shrinks shapes;
/// the values themselves need not shrink): the suite's [`Rng`], plus what
/// the properties add here.
pub use crate::common::Rng;

impl Rng {
    /// `n` values in [-1, 1), with `special` written at one to three places.
    pub fn data(&mut self, n: usize, special: Special) -> Vec<f32> {
        let mut v = self.vec_f32(n);
        self.inject(&mut v, special);
        v
    }
    /// Writes `special` at one to three random places of `v`.
    pub fn inject(&mut self, v: &mut [f32], special: Special) {
        if let (Some(x), false) = (special.value(), v.is_empty()) {
            for _ in 0..1 + self.below(3) {
                let at = self.below(v.len());
                v[at] = x;
            }
        }
    }
    /// Positive scales around 0.03.
    pub fn scales(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| 0.01 + 0.02 * (self.f32() + 1.0)).collect()
    }
}

/// `a * b` in `usize`, or `None`.
pub fn mul(a: usize, b: usize) -> Option<usize> {
    a.checked_mul(b)
}
