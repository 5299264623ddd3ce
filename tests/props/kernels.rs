//! The kernels against the reference, where they run (aarch64; the host
//! runs the same cases on the portable reference, counted separately): a
//! bulk of cheap calls on small weights of every kind (mostly valid, each
//! compared with the family reference; the rest invalid, each an `Err`),
//! and a few shapes that cross whole tiles at every vector length the
//! matrix runs.
//!
//! The widest tiles at SVL 512: mr = 2VL = 32 rows (f32/f16/bf16 SME
//! kernels), nr = 4VL = 64 columns (int8/int4 SME kernels), and 16VL = 256
//! columns for the f32 SME2 GEMV. Tile-crossing GEMM shapes have m in
//! 97..=112 and n in 193..=224 (beyond 3 tiles of each); GEMV shapes have
//! m = 1 and n in 769..=800; k spans 3 or 4 quantisation blocks (96 to 256)
//! or 97 to 160 for formats without blocks. Their outputs must also be the
//! same bits with 1, 2 and 3 threads.

use crate::ensure;
use crate::harness::{self, Cases, check};
use crate::strat::{self, Len, Rng, Special};
use crate::weights::{
    Buf, Call, ClampSpec, Draw, Kind, OwnedW, Served, WSpec, bias_f32, call_from, check_call, dense, format_valid,
    operation_valid, pack_known_issue, supported, wspec_of,
};
use kleidiai::Parallelism;
use kleidiai::weights::{DType, PackOptions, PackedWeights, Scratch};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

/// Small valid shapes; one buffer in about ten the wrong length.
const BULK: Draw = Draw { n: (1, 16), blocks: (1, 3), k: (1, 48), wild: 0, exact: Some(45), specials: false };
/// GEMM shapes beyond 3 tiles of the widest kernels at SVL 512.
const TILES_GEMM: Draw = Draw { n: (193, 224), blocks: (3, 4), k: (97, 160), wild: 0, exact: None, specials: false };
/// GEMV shapes beyond 3 tiles of the widest GEMV kernel at SVL 512.
const TILES_GEMV: Draw = Draw { n: (769, 800), ..TILES_GEMM };
/// Every buffer exact (the tile cases are valid calls; one invalid call
/// each is made on purpose).
fn exact() -> impl Strategy<Value = Len> + Clone {
    Just(Len::Exact)
}

/// Weights of one of `kinds` (activation type drawn from the kind's own),
/// with calls from `calls`.
fn case(
    kinds: &'static [Kind],
    d: Draw,
    calls: BoxedStrategy<Vec<Call>>,
) -> impl Strategy<Value = (WSpec, DType, Vec<Call>, u64)> {
    proptest::sample::select(kinds).prop_flat_map(move |kind| {
        (wspec_of(kind, d), proptest::sample::select(kind.activations()), calls.clone(), any::<u64>())
    })
}

/// Packs `s` for `act` activations with the default options: an `Err`
/// exactly when the weights are invalid. The packed weights of valid ones.
fn pack(s: &WSpec, owned: &OwnedW, act: DType) -> Result<Option<PackedWeights>, TestCaseError> {
    let valid = format_valid(s) && supported(s.kind, act) && operation_valid(s);
    let packed = PackedWeights::pack(&owned.view(), &PackOptions { activation: act, ..PackOptions::default() });
    harness::count(valid);
    match packed {
        Err(e) if valid => match pack_known_issue(s, &e) {
            Some(id) => {
                harness::known_issue(id, &format!("{:?} n={} k={} bl={}: {e}", s.kind, s.n, s.k, s.bl)).map(|()| None)
            }
            None => Err(TestCaseError::fail(format!("valid weights refused: {e}"))),
        },
        Err(_) => Ok(None),
        Ok(_) if !valid => Err(TestCaseError::fail(format!("invalid weights accepted: {:?}", s))),
        Ok(p) => Ok(Some(p)),
    }
}

/// Packs `s` ([`pack`]); for valid weights, runs `f` with what
/// [`check_call`] needs, and a RNG seeded with `seed`.
fn packed(
    s: &WSpec,
    act: DType,
    seed: u64,
    f: impl FnOnce(&Served<'_>, &mut Rng, &mut Scratch) -> Result<(), TestCaseError>,
) -> Result<(), TestCaseError> {
    let owned = OwnedW::build(s);
    let Some(packed) = pack(s, &owned, act)? else { return Ok(()) };
    let w = owned.view();
    let (wd, bias) = (dense(&w), bias_f32(&w));
    let served = Served { s, w: &w, packed: &packed, act, op: true, dense: &wd, bias: bias.as_deref() };
    f(&served, &mut Rng::new(seed), &mut Scratch::default())
}

/// The bulk: every call on freshly packed small weights checked.
fn bulk(name: &str, kinds: &'static [Kind], cases: Cases) {
    let m = prop_oneof![3 => Just(1usize), 8 => 2usize..=8, 1 => Just(0usize)];
    let calls = proptest::collection::vec(call_from(m, strat::len_weighted(45), Just(Special::None)), 1..=2);
    check(name, cases, case(kinds, BULK, calls.boxed()), |(s, act, calls, seed)| {
        packed(&s, act, seed, |served, rng, scratch| {
            for c in &calls {
                check_call(served, c, rng, scratch)?;
            }
            Ok(())
        })
    });
}

const FLOAT: &[Kind] = &[Kind::F32, Kind::F16, Kind::Bf16];
const QUANTISED: &[Kind] = &[Kind::Int8, Kind::Q8_0, Kind::Int4, Kind::Blocks, Kind::Q4_0, Kind::Asym];

#[test]
fn small_float_weights_match_reference() {
    bulk("kernels::small_float_weights_match_reference", FLOAT, Cases::new(4_000, 6_000));
}

#[test]
fn small_quantised_weights_match_reference() {
    bulk("kernels::small_quantised_weights_match_reference", QUANTISED, Cases::new(4_000, 6_000));
}

/// Shapes crossing whole tiles: one valid call on one thread compared with
/// the reference, the same call on 2 and 3 threads giving the same bits,
/// and the call with an output one element short refused.
#[test]
fn tile_crossing_shapes() {
    // One valid call on one thread: types as packed, a valid clamp.
    let one = |m: std::ops::RangeInclusive<usize>| {
        call_from(m, exact(), Just(Special::None))
            .prop_map(|c| {
                let clamp = if c.clamp.clamp().1 { c.clamp } else { ClampSpec::None };
                vec![Call { threads: 0, x_type: None, y_type: None, clamp, ..c }]
            })
            .boxed()
    };
    let all: &'static [Kind] = &Kind::ALL;
    let strategy = prop_oneof![
        3 => case(all, TILES_GEMM, one(97..=112)),
        1 => case(all, TILES_GEMV, one(1..=1)),
    ];
    check("kernels::tile_crossing_shapes", Cases::new(40, 24), strategy, |(s, act, calls, seed)| {
        packed(&s, act, seed, |served, rng, scratch| {
            let (c, p) = (&calls[0], served.packed);
            let Some((x, y1)) = check_call(served, c, rng, scratch)? else {
                return Err(TestCaseError::fail("a tile-crossing call was not valid"));
            };
            let (m, clamp) = (c.m, c.clamp.clamp().0);
            for threads in [2, 3] {
                let mut y = Buf::new(act, &vec![0.0; m * s.n]);
                let r = p.matmul(m, x.act(), y.out(), clamp, Parallelism::Rayon(threads), scratch);
                harness::count(true);
                ensure!(r.is_ok(), "{threads} threads: {}", r.unwrap_err());
                let same = y.to_f32().iter().zip(&y1).all(|(a, b)| a.to_bits() == b.to_bits());
                ensure!(same, "{:?}/{act:?} m={m} n={} k={}: {threads} threads change the result", s.kind, s.n, s.k);
            }
            let mut short = Buf::new(act, &vec![0.0; m * s.n - 1]);
            let r = p.matmul(m, x.act(), short.out(), clamp, Parallelism::Sequential, scratch);
            harness::count(false);
            ensure!(r.is_err(), "an output one element short accepted");
            Ok(())
        })
    });
}
