use super::*;

#[test]
fn sme_setting_parses_like_ggml() {
    assert_eq!(SmeSetting::from_env_value(None), (SmeSetting::Auto, None));
    assert_eq!(SmeSetting::from_env_value(Some("0")).0, SmeSetting::Off);
    assert_eq!(SmeSetting::from_env_value(Some("2")).0, SmeSetting::Cap(2));
    assert_eq!(SmeSetting::from_env_value(Some(" +3")).0, SmeSetting::Cap(3));
    for bad in ["", "x", "2x", "-1", "99999999999"] {
        let (s, w) = SmeSetting::from_env_value(Some(bad));
        assert_eq!(s, SmeSetting::Auto, "{bad}");
        assert!(w.is_some(), "{bad}");
    }
}

/// f32_rows' quick answer is its detailed one's: the same sizes when
/// both accept, both refuse otherwise (edges of every condition).
#[test]
fn f32_rows_quick_path_agrees_with_its_checks() {
    let (mut both, mut refused) = (0, 0);
    for ne0 in [-1i64, 0, 1, 3, 1 << 61, i64::MAX] {
        for ne1 in [0i64, 1, 2, 5] {
            for ne2 in [1i64, 2, 3] {
                for ne3 in [0i64, 1, 2] {
                    let ne = [ne0, ne1, ne2, ne3];
                    let row = (ne0.max(0) as usize).wrapping_mul(4);
                    for nb0 in [2usize, 4] {
                        for nb1 in [row.wrapping_sub(4), row, row.wrapping_add(8), usize::MAX / 2] {
                            let batch = row.wrapping_add(nb1.wrapping_mul(ne1.max(1) as usize - 1));
                            for nb2 in [batch.wrapping_sub(4), batch, batch.wrapping_add(16)] {
                                let end = batch.wrapping_add(nb2.wrapping_mul(ne2 as usize - 1));
                                for len in [0, end.wrapping_sub(1), end, end.wrapping_add(1), usize::MAX] {
                                    let nb = [nb0, nb1, nb2, nb2];
                                    let quick = f32_rows(ne, nb, len, "t");
                                    let slow = f32_rows_refused(ne, nb, len, "t");
                                    assert_eq!(
                                        quick.as_ref().ok(),
                                        slow.as_ref().ok(),
                                        "ne {ne:?} nb {nb:?} len {len}"
                                    );
                                    if quick.is_ok() { both += 1 } else { refused += 1 }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    assert!(both > 100 && refused > 1000, "accepted {both}, refused {refused}");
}

#[test]
fn lhs_rows_split_like_ggml() {
    // m = 32, mr = 4, 2 threads: 16 rows each.
    assert_eq!(lhs_rows(32, 4, 2, 0), 0..16);
    assert_eq!(lhs_rows(32, 4, 2, 1), 16..32);
    // m = 5, mr = 4, 3 threads: only 2 can pack (2 row groups).
    assert_eq!(lhs_rows(5, 4, 3, 0), 0..4);
    assert_eq!(lhs_rows(5, 4, 3, 1), 4..5);
    assert!(lhs_rows(5, 4, 3, 2).is_empty());
    // m = 1: thread 0 only.
    assert_eq!(lhs_rows(1, 1, 2, 0), 0..1);
    assert!(lhs_rows(1, 1, 2, 1).is_empty());
    // Every row exactly once.
    for m in 1..40 {
        for mr in [1, 4, 8, 16] {
            for t in 1..5 {
                let mut next = 0;
                for i in 0..t {
                    let r = lhs_rows(m, mr, t, i);
                    if !r.is_empty() {
                        assert_eq!(r.start, next);
                        assert_eq!(r.start % mr, 0);
                        next = r.end;
                    }
                }
                assert_eq!(next, m, "m {m} mr {mr} t {t}");
            }
        }
    }
}

use crate::ggml::tests::{f32_tensor, f32_tensor_mut, weights_tensor};
use crate::ggml::{GgmlWeights, MulMatScratch, TensorMut, q4_0_as_bytes, q8_0_as_bytes, quantize_q4_0, quantize_q8_0};
use crate::par::Parallelism;
use crate::testing::{Rng, bit_identical};
use std::sync::Barrier;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A team of std threads: a Barrier and an atomic counter.
struct StdTeam<'a> {
    ith: usize,
    nth: usize,
    barrier: &'a Barrier,
    counter: &'a AtomicUsize,
}

// SAFETY: std's Barrier waits for all nth threads and synchronises
// memory; the counter is atomic and shared.
unsafe impl ThreadTeam for StdTeam<'_> {
    fn ith(&self) -> usize {
        self.ith
    }
    fn nth(&self) -> usize {
        self.nth
    }
    fn barrier(&self) {
        self.barrier.wait();
    }
    fn chunk_set(&self, value: usize) {
        self.counter.store(value, Ordering::Relaxed);
    }
    fn chunk_add(&self, delta: usize) -> usize {
        self.counter.fetch_add(delta, Ordering::Relaxed)
    }
}

/// The bytes of weights `w` (rows of `k`) as ggml keeps them in `typ`.
fn weights_bytes(typ: GgmlType, w: &[f32], k: usize) -> Vec<u8> {
    match typ {
        GgmlType::Q4_0 => q4_0_as_bytes(&quantize_q4_0(w, k).unwrap()).to_vec(),
        GgmlType::Q8_0 => q8_0_as_bytes(&quantize_q8_0(w, k).unwrap()).to_vec(),
        GgmlType::F32 => w.iter().flat_map(|v| v.to_le_bytes()).collect(),
        GgmlType::F16 => w.iter().flat_map(|v| half::f16::from_f32(*v).to_le_bytes()).collect(),
    }
}

/// `src0` repacked for this CPU (automatic SME), or None when no kernel of
/// ggml's table takes it here.
fn repacked(src0: &Tensor<'_>) -> Option<ThreadedWeights> {
    let size = ThreadedWeights::packed_size(src0.typ, src0.ne, SmeSetting::Auto).ok()?;
    Some(ThreadedWeights::repack(src0, SmeSetting::Auto, crate::AlignedBuf::zeroed(size)).unwrap())
}

/// Random `n x k` weights of `typ` [`repacked`].
fn threaded(typ: GgmlType, n: usize, k: usize, rng: &mut Rng) -> Option<ThreadedWeights> {
    let wb = weights_bytes(typ, &rng.vec_f32(n * k), k);
    repacked(&weights_tensor(typ, n, k, &wb))
}

/// Runs `test` on random `n x k` weights (a 2-D tensor) of each type ggml's
/// threaded path takes (Q4_0, Q8_0, F32, drawn in turn from seed `seed`),
/// with the generator.
fn each_type(seed: u64, n: usize, k: usize, mut test: impl FnMut(GgmlType, Tensor<'_>, &mut Rng)) {
    let mut rng = Rng::new(seed);
    for typ in [GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::F32] {
        let wb = weights_bytes(typ, &rng.vec_f32(n * k), k);
        test(typ, weights_tensor(typ, n, k, &wb), &mut rng);
    }
}

/// [`each_type`] on `72 x 64` weights [`repacked`]; a type no kernel of
/// ggml's table takes here is skipped, with a note naming `what`.
fn each_threaded(seed: u64, what: &str, mut test: impl FnMut(GgmlType, &ThreadedWeights, &mut Rng)) {
    each_type(seed, 72, 64, |typ, src0, rng| match repacked(&src0) {
        Some(w) => test(typ, &w, rng),
        None => println!("{what} {typ:?}: no kernel of ggml's table on this CPU (nothing to run)"),
    });
}

/// `m` random F32 rows of `k` values from `rng`, as bytes and as an
/// aligned copy.
fn activations(rng: &mut Rng, k: usize, m: usize) -> (Vec<u8>, crate::AlignedBuf) {
    let x: Vec<u8> = rng.vec_f32(k * m).iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut src = crate::AlignedBuf::zeroed(x.len());
    src.as_mut_slice().copy_from_slice(&x);
    (x, src)
}

/// `mul_mat` on `nth` std threads; the dst bytes.
fn run(w: &ThreadedWeights, x: &[u8], m: usize, nth: usize) -> Vec<f32> {
    let (k, n) = w.dims();
    let src1 = f32_tensor(k, m, x);
    let mut dst = vec![0u8; 4 * m * n];
    let mut work = vec![0u8; w.work_size(m).unwrap() + 64];
    let (dne, dnb) = ([n as i64, m as i64, 1, 1], [4, 4 * n, 4 * n * m, 4 * n * m]);
    let (barrier, counter) = (Barrier::new(nth), AtomicUsize::new(0));
    {
        let (db, wb) = (SharedBytes::from_slice(&mut dst), SharedBytes::from_slice(&mut work));
        std::thread::scope(|s| {
            for ith in 0..nth {
                let (db, wb, src1, barrier, counter) = (&db, &wb, &src1, &barrier, &counter);
                s.spawn(move || {
                    let team = StdTeam { ith, nth, barrier, counter };
                    w.mul_mat(src1, dne, dnb, db, wb, &team, 4).unwrap();
                });
            }
        });
    }
    dst.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

thread_local! {
    pub(super) static REPLAYED: core::cell::Cell<usize> = const { core::cell::Cell::new(0) };
}

/// The steady state: a call equal to the thread's last one on the same
/// weights replays it (new activations, same buffers) with the bits of
/// the checked path; any difference in the arguments runs the checked
/// path again, and a bad argument is still refused.
#[test]
fn an_identical_call_replays_with_the_same_bits() {
    each_threaded(77, "replay", |typ, w, rng| {
        let (k, n) = w.dims();
        for m in [1, 3] {
            let mut x = vec![0u8; 4 * k * m];
            let mut dst = vec![0u8; 4 * m * n];
            let mut work = vec![0u8; w.work_size(m).unwrap()];
            let src_nb = [4, 4 * k, 4 * k * m, 4 * k * m];
            let (dne, dnb) = ([n as i64, m as i64, 1, 1], [4, 4 * n, 4 * n * m, 4 * n * m]);
            let call = |x: &[u8], dst: &mut [u8], work: &mut [u8]| {
                let src1 = Tensor { typ: GgmlType::F32, ne: [k as i64, m as i64, 1, 1], nb: src_nb, data: x };
                let (db, wk) = (SharedBytes::from_slice(dst), SharedBytes::from_slice(work));
                let before = REPLAYED.with(|c| c.get());
                let r = w.mul_mat(&src1, dne, dnb, &db, &wk, &SingleThread::default(), 4);
                (r, REPLAYED.with(|c| c.get()) > before)
            };
            let mut outs = Vec::new();
            for round in 0..3 {
                let v = rng.vec_f32(k * m);
                x.copy_from_slice(&v.iter().flat_map(|f| f.to_le_bytes()).collect::<Vec<u8>>());
                let (r, replayed) = call(&x, &mut dst, &mut work);
                r.unwrap();
                assert_eq!(replayed, round > 0, "{typ:?} m={m} round {round}");
                // The same activations in fresh buffers: the checked path.
                let mut d2 = vec![0u8; 4 * m * n];
                let mut w2 = vec![0u8; w.work_size(m).unwrap() + 64];
                let (r2, replayed2) = call(&x.clone(), &mut d2, &mut w2);
                r2.unwrap();
                assert!(!replayed2, "{typ:?} m={m}: other buffers, other key");
                assert_eq!(dst, d2, "{typ:?} m={m} round {round}: replay and checked path differ");
                outs.push(dst.clone());
                // Back to the first buffers: kept again by the last call, so
                // the next round checks again (then replays).
                let (r3, _) = call(&x, &mut dst, &mut work);
                r3.unwrap();
            }
            assert_ne!(outs[0], outs[1], "{typ:?}: new activations, new outputs");
            // The raw lane (the deprecated replay half of the C ABI's):
            // the kept call again, by its parts.
            let raw = |x: &[u8], dst: &mut [u8], work: &mut [u8], mult: usize| {
                let src = ([k as i64, m as i64, 1, 1], src_nb, TestSrc::Bytes(x));
                w.raw_test_call(Lane::Again, src, (dne, dnb, TestDst::Bytes(dst)), work, mult)
            };
            let kept = dst.clone();
            dst.fill(0);
            assert!(matches!(raw(&x, &mut dst, &mut work, 4), Some(Ok(()))), "{typ:?} m={m}: raw lane");
            assert_eq!(dst, kept, "{typ:?} m={m}: raw lane bits");
            let (wl, dl) = (work.len(), dst.len());
            assert!(raw(&x, &mut dst[..dl - 4], &mut work, 4).is_none(), "{typ:?}: other dst, no replay");
            assert!(raw(&x, &mut dst, &mut work[..wl / 2], 4).is_none() || wl == 0, "{typ:?}: other work");
            assert!(raw(&x[..x.len() - 4], &mut dst, &mut work, 4).is_none(), "{typ:?}: other src1");
            // mul_mat_raw (the C ABI's): the kept call replays, a short dst is refused.
            let raw_all = |x: &[u8], dst: &mut [u8], work: &mut [u8]| {
                let src = ([k as i64, m as i64, 1, 1], src_nb, TestSrc::Bytes(x));
                w.raw_test_call(Lane::Raw, src, (dne, dnb, TestDst::Bytes(dst)), work, 4).expect("a checked lane")
            };
            raw_all(&x, &mut dst, &mut work).unwrap();
            let before = REPLAYED.with(|c| c.get());
            dst.fill(0);
            raw_all(&x, &mut dst, &mut work).unwrap();
            assert_eq!(REPLAYED.with(|c| c.get()), before + 1, "{typ:?} m={m}: mul_mat_raw replays");
            assert_eq!(dst, kept, "{typ:?} m={m}: mul_mat_raw bits");
            assert!(raw_all(&x, &mut dst[..dl - 4], &mut work).is_err(), "{typ:?}: short dst refused");
            // The work size, asked again and for another m, from its cache.
            assert_eq!(w.work_size(m).unwrap(), w.work_size(m).unwrap());
            assert_eq!(w.work_size(m + 7).unwrap(), w.plan(m + 7, 1, 1).work);
            assert_eq!(w.work_size(m).unwrap(), w.plan(m, 1, 1).work);
            // An output one value short: another key, and refused.
            let short = dst.len() - 4;
            let (r, replayed) = call(&x, &mut dst[..short], &mut work);
            assert!(r.is_err() && !replayed, "{typ:?} m={m}: short dst {r:?}");
            if !work.is_empty() {
                // A work buffer one byte short, likewise.
                let short = work.len() - 1;
                let (r, replayed) = call(&x, &mut dst, &mut work[..short]);
                assert!(r.is_err() && !replayed, "{typ:?} m={m}: short work buffer {r:?}");
            }
        }
    });
}

/// Weights of one class (type, shape and kernels) share a thread's kept
/// call: ggml's prompt makes one call per tensor, and a tensor's first call
/// with the shapes and buffers another tensor of its class passed with
/// replays those checks, with the bits of its own checked path. The
/// addresses are checked on every call (overlapping buffers that match the
/// key are still refused), and weights of another class check again.
#[test]
fn weights_of_one_class_share_the_kept_call() {
    let mut rng = Rng::new(91);
    let replays = || REPLAYED.with(|c| c.get());
    for typ in [GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::F32] {
        let k = 64;
        let mut make = |n: usize| threaded(typ, n, k, &mut rng);
        let (Some(a), Some(b), Some(c)) = (make(72), make(72), make(80)) else {
            println!("class replay {typ:?}: no kernel of ggml's table on this CPU (nothing to replay)");
            continue;
        };
        assert!(a.class <= MAX_CLASSES as u64, "{typ:?}: the class list is full ({MAX_CLASSES}) in this test process");
        assert_eq!(a.class, b.class, "{typ:?}: same shape and kernels, one class");
        assert!(matches!(b.last_work, WorkCell::Class(_)), "{typ:?}: a listed class shares its work-size cell");
        assert_ne!(a.class, c.class, "{typ:?}: another n, another class");
        let n = 72;
        for m in [1, 3] {
            let (x, src) = activations(&mut rng, k, m);
            let mut dst = crate::AlignedBuf::zeroed(4 * m * n);
            let mut work = crate::AlignedBuf::zeroed(a.work_size(m).unwrap().max(1));
            assert_eq!(a.work_size(m).unwrap(), b.work_size(m).unwrap());
            let src_nb = [4, 4 * k, 4 * k * m, 4 * k * m];
            let raw = |w: &ThreadedWeights, s: TestSrc<'_>, d: TestDst<'_>, wk: &mut [u8]| {
                let n = w.dims().1;
                let (dne, dnb) = ([n as i64, m as i64, 1, 1], [4, 4 * n, 4 * n * m, 4 * n * m]);
                let src1 = ([k as i64, m as i64, 1, 1], src_nb, s);
                w.raw_test_call(Lane::Raw, src1, (dne, dnb, d), wk, 4).expect("a checked lane")
            };
            let ws = a.work_size(m).unwrap();
            // src1, dst and work: the first buffers (their addresses each call).
            macro_rules! first {
                () => {
                    (
                        TestSrc::Bytes(src.as_slice()),
                        TestDst::Bytes(&mut dst.as_mut_slice()[..4 * m * n]),
                        &mut work.as_mut_slice()[..ws],
                    )
                };
            }
            let (s, d, wk) = first!();
            raw(&a, s, d, wk).unwrap();
            let out_a = dst.as_slice().to_vec();
            // b's first call: a's checks, replayed.
            let before = replays();
            let (s, d, wk) = first!();
            raw(&b, s, d, wk).unwrap();
            assert_eq!(replays(), before + 1, "{typ:?} m={m}: b replays a's call");
            let out_b = dst.as_slice().to_vec();
            assert_ne!(out_a, out_b, "{typ:?} m={m}: other weights, other outputs");
            // b's checked path (another work length, another key): the same bits.
            let mut d2 = vec![0u8; 4 * m * n];
            let mut w2 = vec![0u8; a.work_size(m).unwrap() + 64];
            let before = replays();
            raw(&b, TestSrc::Bytes(&x), TestDst::Bytes(&mut d2), &mut w2).unwrap();
            assert_eq!(replays(), before, "{typ:?} m={m}: another work length checks");
            assert_eq!(d2, out_b, "{typ:?} m={m}: replay and checked path differ");
            // Back to the first buffers (kept again), then src1 at dst's
            // address: the same key (lengths, alignment), overlapping, refused.
            let (s, d, wk) = first!();
            raw(&a, s, d, wk).unwrap();
            dst.as_mut_slice().fill(7);
            let before = replays();
            assert!(x.len() <= 4 * m * n, "src1's bytes fit in dst's");
            let (_, d, wk) = first!();
            let r = raw(&b, TestSrc::AtDst(x.len()), d, wk);
            assert!(matches!(r, Err(Error::InvalidArgument(ref e)) if e.contains("overlap")), "{typ:?} m={m}: {r:?}");
            assert_eq!(replays(), before, "{typ:?} m={m}: an overlap does not replay");
            assert!(dst.as_slice().iter().all(|v| *v == 7), "{typ:?} m={m}: nothing written");
            // A NULL dst with the kept key's lengths: refused, not replayed.
            let (s, d, wk) = first!();
            raw(&a, s, d, wk).unwrap();
            let (s, _, wk) = first!();
            let r = raw(&b, s, TestDst::Null(4 * m * n), wk);
            assert!(matches!(r, Err(Error::Null { what: "dst data" })), "{typ:?} m={m}: {r:?}");
            // Weights of another class: their own checks.
            let mut dc = vec![0u8; 4 * m * 80];
            let mut wc = vec![0u8; c.work_size(m).unwrap()];
            let before = replays();
            raw(&c, TestSrc::Bytes(&x), TestDst::Bytes(&mut dc), &mut wc).unwrap();
            assert_eq!(replays(), before, "{typ:?} m={m}: another class checks");
        }
    }
}

/// `RawOperands::SPAN` lengths (the C ABI's `kairs_ggml_mul_mat_nb`): the
/// bits of the same call with the lengths given, a replay of the kept call,
/// and every address check on the spans (an overlap and a NULL pointer with
/// the kept key refused, nothing written; a bad shape named as such).
#[test]
fn span_lengths_check_and_replay_like_given_ones() {
    let replays = || REPLAYED.with(|c| c.get());
    each_threaded(53, "spans", |typ, w, rng| {
        let (k, n) = w.dims();
        for m in [1, 3] {
            let (x, src) = activations(rng, k, m);
            let mut dst = crate::AlignedBuf::zeroed(4 * m * n);
            let mut work = crate::AlignedBuf::zeroed(w.work_size(m).unwrap().max(1));
            let (ne1, nb1) = ([k as i64, m as i64, 1, 1], [4, 4 * k, 4 * k * m, 4 * k * m]);
            let (dne, dnb) = ([n as i64, m as i64, 1, 1], [4, 4 * n, 4 * n * m, 4 * n * m]);
            // Lengths given (`span` false) or as RawOperands::SPAN.
            let ops = |ne1: &[i64; 4], span: bool, s: TestSrc<'_>, d: TestDst<'_>, wk: &mut [u8]| {
                let lane = Lane::Operands(span);
                w.raw_test_call(lane, (*ne1, nb1, s), (dne, dnb, d), wk, 4).expect("a checked lane")
            };
            let span = true;
            let ws = w.work_size(m).unwrap();
            // src1, dst and work: this test's buffers (their addresses each call).
            macro_rules! bufs {
                () => {
                    (TestSrc::Bytes(src.as_slice()), TestDst::Bytes(dst.as_mut_slice()), &mut work.as_mut_slice()[..ws])
                };
            }
            // Given lengths, then spans: the same bits; spans again: a replay.
            let mut given = vec![0u8; 4 * m * n];
            let (_, _, wk) = bufs!();
            ops(&ne1, false, TestSrc::Bytes(&x), TestDst::Bytes(&mut given), wk).unwrap();
            let (s, d, wk) = bufs!();
            ops(&ne1, span, s, d, wk).unwrap();
            assert_eq!(dst.as_slice(), &given[..], "{typ:?} m={m}: spans and given lengths differ");
            dst.as_mut_slice().fill(0);
            let before = replays();
            let (s, d, wk) = bufs!();
            ops(&ne1, span, s, d, wk).unwrap();
            assert_eq!(replays(), before + 1, "{typ:?} m={m}: the span call replays");
            assert_eq!(dst.as_slice(), &given[..], "{typ:?} m={m}: replayed bits");
            // src1 at dst's address (the kept key: spans, alignment): refused.
            dst.as_mut_slice().fill(7);
            let before = replays();
            let (_, d, wk) = bufs!();
            let r = ops(&ne1, span, TestSrc::AtDst(x.len()), d, wk);
            assert!(matches!(r, Err(Error::InvalidArgument(ref e)) if e.contains("overlap")), "{typ:?} m={m}: {r:?}");
            assert_eq!(replays(), before, "{typ:?} m={m}: an overlap does not replay");
            assert!(dst.as_slice().iter().all(|v| *v == 7), "{typ:?} m={m}: nothing written");
            // Kept again, then a NULL src1 with the kept key: refused.
            let (s, d, wk) = bufs!();
            ops(&ne1, span, s, d, wk).unwrap();
            let (_, d, wk) = bufs!();
            let r = ops(&ne1, span, TestSrc::Null(x.len()), d, wk);
            assert!(matches!(r, Err(Error::Null { what: "src1 data" })), "{typ:?} m={m}: {r:?}");
            // A shape no layout spans (an empty dimension): the shape is named, not an overlap.
            let (s, d, wk) = bufs!();
            let r = ops(&[k as i64, m as i64, 1, 0], span, s, d, wk);
            assert!(matches!(r, Err(Error::ShapeMismatch { .. })), "{typ:?} m={m}: {r:?}");
        }
    });
}

/// 4-D activations (`ne[3]` > 1; ggml's path takes them for F32 weights):
/// every `[i2, i3]` slice gets the bits of the same rows alone as a 2-D call,
/// with gaps between batches and between groups; a replay gives the same
/// bits; groups that overlap are refused as a shape.
#[test]
fn four_d_activations_give_the_bits_of_their_slices() {
    each_threaded(61, "4-D", |typ, w, rng| {
        let ((k, n), m, ne2, ne3) = (w.dims(), 3, 2, 3);
        let nb2 = 4 * k * m + 64;
        let nb1 = [4, 4 * k, nb2, nb2 * ne2 + 128];
        let span = (ne3 - 1) * nb1[3] + (ne2 - 1) * nb2 + 4 * k * m;
        let x: Vec<u8> = rng.vec_f32(span / 4).iter().flat_map(|v| v.to_le_bytes()).collect();
        let ne = [k as i64, m as i64, ne2 as i64, ne3 as i64];
        let (dne, dnb) = ([n as i64, m as i64, ne2 as i64, ne3 as i64], [4, 4 * n, 4 * n * m, 4 * n * m * ne2]);
        let mut work = vec![0u8; w.work_size(m).unwrap() + 64];
        let call = |ne: [i64; 4],
                    nb: [usize; 4],
                    x: &[u8],
                    dne: [i64; 4],
                    dnb: [usize; 4],
                    dst: &mut [u8],
                    work: &mut [u8]| {
            let src1 = Tensor { typ: GgmlType::F32, ne, nb, data: x };
            let (db, wk) = (SharedBytes::from_slice(dst), SharedBytes::from_slice(work));
            w.mul_mat(&src1, dne, dnb, &db, &wk, &SingleThread::default(), 4)
        };
        let mut dst = vec![0u8; 4 * n * m * ne2 * ne3];
        call(ne, nb1, &x, dne, dnb, &mut dst, &mut work).unwrap();
        let before = REPLAYED.with(|c| c.get());
        let mut again = vec![0u8; dst.len()];
        call(ne, nb1, &x, dne, dnb, &mut again, &mut work).unwrap();
        // (Another dst buffer: a replay only when its address has the same alignment.)
        if REPLAYED.with(|c| c.get()) > before {
            assert_eq!(again, dst, "{typ:?}: the replayed 4-D call");
        }
        for i3 in 0..ne3 {
            for i2 in 0..ne2 {
                let at = i3 * nb1[3] + i2 * nb2;
                let rows = &x[at..at + 4 * k * m];
                let (sne, snb) = ([k as i64, m as i64, 1, 1], [4, 4 * k, 4 * k * m, 4 * k * m]);
                let (one_ne, one_nb) = ([n as i64, m as i64, 1, 1], [4, 4 * n, 4 * n * m, 4 * n * m]);
                let mut one = vec![0u8; 4 * n * m];
                call(sne, snb, rows, one_ne, one_nb, &mut one, &mut work).unwrap();
                let d = (i3 * ne2 + i2) * 4 * n * m;
                assert_eq!(&dst[d..d + 4 * n * m], &one[..], "{typ:?}: slice [{i2}, {i3}]");
            }
        }
        // Groups overlapping their predecessor: refused as a shape, nothing written.
        let mut untouched = vec![7u8; dst.len()];
        let r = call(ne, [4, 4 * k, nb2, nb2], &x, dne, dnb, &mut untouched, &mut work);
        assert!(matches!(r, Err(Error::ShapeMismatch { .. })), "{typ:?}: {r:?}");
        assert!(untouched.iter().all(|v| *v == 7), "{typ:?}: nothing written");
    });
}

#[test]
fn threads_give_the_bits_of_the_kernel_ggml_chooses() {
    let (n, k) = (136, 64);
    each_type(31, n, k, |typ, src0, rng| {
        let ggml = GgmlWeights::repack(&src0).unwrap();
        let size = ThreadedWeights::packed_size(typ, src0.ne, SmeSetting::Auto);
        // Taken exactly where ggml's path has a kernel for this CPU.
        assert_eq!(size.is_ok(), !ggml.layouts().is_empty(), "{typ:?}: {size:?} vs {:?}", ggml.layouts());
        let Ok(size) = size else { return };
        let w = ThreadedWeights::repack(&src0, SmeSetting::Auto, crate::AlignedBuf::zeroed(size)).unwrap();
        // Only the payloads: ggml's layouts, back to back, 64-byte aligned.
        let lens = ggml.slot_bytes();
        assert_eq!(size, lens.iter().fold(0, |end, l| align64(end) + l), "{typ:?}: payloads only");
        assert_eq!(w.slots.len(), lens.len());
        let mut at = 0;
        for (s, len) in w.slots.iter().zip(&lens) {
            assert_eq!(s.rhs().as_bytes().len(), *len);
            assert_eq!(s.rhs().as_bytes().as_ptr() as usize % 64, 0, "{typ:?}: layouts 64-byte aligned");
            assert!(s.rhs().is_shared(), "{typ:?}: the handle views the caller's memory");
            at = align64(at) + len;
        }
        assert_eq!(at, size);
        let layouts: Vec<_> = ggml.layouts();
        assert_eq!(w.layouts(), layouts, "{typ:?}: the layouts of GgmlWeights::repack");
        let neon = ThreadedWeights::packed_size(typ, src0.ne, SmeSetting::Off)
            .ok()
            .map(|size| ThreadedWeights::repack(&src0, SmeSetting::Off, crate::AlignedBuf::zeroed(size)).unwrap());
        for m in [1, 5, 130] {
            let x: Vec<u8> = rng.vec_f32(m * k).iter().flat_map(|v| v.to_le_bytes()).collect();
            // One thread: GgmlWeights::mul_mat's bits (same first layout).
            let one = run(&w, &x, m, 1);
            let mut want = vec![0u8; 4 * m * n];
            let src1 = f32_tensor(k, m, &x);
            let mut d = f32_tensor_mut(n, m, &mut want);
            ggml.mul_mat(&src1, &mut d, Parallelism::Sequential, &mut MulMatScratch::default()).unwrap();
            let want: Vec<f32> = want.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
            assert!(bit_identical(&one, &want), "{typ:?} m={m}: 1 thread differs from GgmlWeights::mul_mat");
            for nth in [2, 3] {
                let got = run(&w, &x, m, nth);
                let sme = w.slots[0].gemm().info().is_sme();
                let hybrid = typ != GgmlType::F32 && sme && w.slots.len() > 1 && m >= 128;
                let other = match (&neon, typ != GgmlType::F32 && sme) {
                    (Some(nw), true) => run(nw, &x, m, 1),
                    _ => one.clone(),
                };
                if hybrid {
                    // Each column from the SME or the NEON kernel.
                    let from = |v: &[f32], j: usize| (0..m).all(|i| got[i * n + j].to_bits() == v[i * n + j].to_bits());
                    assert!((0..n).all(|j| from(&one, j) || from(&other, j)), "{typ:?} m={m} nth={nth}: hybrid");
                } else {
                    // Below ggml's hybrid size, more threads than the SME
                    // cap run the non-SME layout; F32 runs its one layout.
                    assert!(bit_identical(&got, &other), "{typ:?} m={m} nth={nth}: {}", w.kernel_for(m, 0, nth));
                }
            }
        }
    });
}

/// Memory `off` bytes into an aligned buffer (misaligned when `off % 64
/// != 0`) that shows its bytes to the test when dropped.
struct Spy {
    buf: crate::AlignedBuf,
    off: usize,
    seen: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
}
impl AsRef<[u8]> for Spy {
    fn as_ref(&self) -> &[u8] {
        &self.buf.as_slice()[self.off..]
    }
}
impl AsMut<[u8]> for Spy {
    fn as_mut(&mut self) -> &mut [u8] {
        &mut self.buf.as_mut_slice()[self.off..]
    }
}
impl Drop for Spy {
    fn drop(&mut self) {
        *self.seen.lock().unwrap() = self.as_ref().to_vec();
    }
}

#[test]
fn repack_refuses_wrong_sizes_and_alignment_before_writing() {
    let (n, k) = (72, 64);
    each_type(33, n, k, |typ, src0, rng| {
        let Ok(size) = ThreadedWeights::packed_size(typ, src0.ne, SmeSetting::Auto) else {
            // No kernel here: repack says so whatever the memory.
            let r = ThreadedWeights::repack(&src0, SmeSetting::Auto, crate::AlignedBuf::zeroed(1 << 20));
            assert!(matches!(r, Err(Error::Unsupported { .. })), "{typ:?}: {r:?}");
            return;
        };
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let spy = |len: usize, off: usize| Spy {
            buf: crate::AlignedBuf::from_bytes(&vec![0xA5; len + off]),
            off,
            seen: seen.clone(),
        };
        let untouched = |from: usize| seen.lock().unwrap()[from..].iter().all(|v| *v == 0xA5);
        // One byte short.
        let r = ThreadedWeights::repack(&src0, SmeSetting::Auto, spy(size - 1, 0));
        assert!(matches!(r, Err(Error::ByteLength { .. })), "{typ:?}: {r:?}");
        assert!(untouched(0), "{typ:?}: nothing written");
        // Misaligned, room enough.
        for off in [1, 4, 32] {
            let r = ThreadedWeights::repack(&src0, SmeSetting::Auto, spy(size, off));
            assert!(matches!(r, Err(Error::Misaligned { .. })), "{typ:?} +{off}: {r:?}");
            assert!(untouched(0), "{typ:?} +{off}: nothing written");
        }
        assert!(ThreadedWeights::repack(&src0, SmeSetting::Auto, Vec::<u8>::new()).is_err());
        // Weights of another type or shape, or a truncated tensor.
        let short = Tensor { data: &src0.data[..src0.data.len() - 1], ..src0 };
        let three_d = Tensor { ne: [k as i64, n as i64 / 2, 2, 1], ..src0 };
        let f16 = Tensor { typ: GgmlType::F16, ..src0 };
        for bad in [short, three_d, f16] {
            assert!(ThreadedWeights::repack(&bad, SmeSetting::Auto, spy(size, 0)).is_err(), "{typ:?}");
            assert!(untouched(0), "{typ:?}: nothing written");
        }
        // Room beyond the payloads is left as it was; the same bits either way.
        let big = ThreadedWeights::repack(&src0, SmeSetting::Auto, spy(size + 200, 0)).unwrap();
        let exact = ThreadedWeights::repack(&src0, SmeSetting::Auto, crate::AlignedBuf::zeroed(size)).unwrap();
        assert_eq!(big.layouts(), exact.layouts());
        for (a, b) in big.slots.iter().zip(&exact.slots) {
            assert_eq!(a.rhs().as_bytes(), b.rhs().as_bytes(), "{typ:?}: same payloads");
        }
        let x: Vec<u8> = rng.vec_f32(3 * k).iter().flat_map(|v| v.to_le_bytes()).collect();
        assert!(bit_identical(&run(&big, &x, 3, 2), &run(&exact, &x, 3, 2)), "{typ:?}");
        drop(big);
        assert!(untouched(size), "{typ:?}: bytes after the payloads written");
        assert!(!untouched(0));
    });
}

/// The per-thread memory of F16 kernel resolutions answers exactly what
/// resolving again answers, for other shapes and other features too.
#[test]
fn f16_kernel_resolution_is_remembered_exactly() {
    let name = kernel_table(GgmlType::F16)[0].0;
    let all = Features::current();
    let no_sme = all.without(&[CpuFeature::Sme]);
    for (n, k) in [(72, 64), (64, 72), (72, 64), (8, 8), (72 + 8, 64)] {
        for f in [all, no_sme, all] {
            let a = PartKernel::for_f16_per_call(name, n, k, &f);
            let b = PartKernel::for_f16_per_call(name, n, k, &f);
            match (a, b) {
                (Ok(a), Ok(b)) => {
                    assert_eq!((a.info().name, a.rhs_len(), a.nr()), (b.info().name, b.rhs_len(), b.nr()));
                    assert!(f.has(CpuFeature::Sme2), "resolved without SME2");
                }
                (Err(a), Err(b)) => {
                    assert_eq!(a, b);
                    assert!(!f.has(CpuFeature::Sme2), "{a}");
                }
                (a, b) => panic!("n={n} k={k}: {a:?} then {b:?}"),
            }
        }
    }
}

#[test]
fn f16_per_call_gives_the_bits_of_ggmls_f16_kernel() {
    use crate::ggml::F16PerCall;
    let mut rng = Rng::new(32);
    let (n, k, ne02) = (72, 64, 2);
    let w: Vec<u8> = rng.vec_f32(ne02 * n * k).iter().flat_map(|v| half::f16::from_f32(*v).to_le_bytes()).collect();
    let ne0 = [k as i64, n as i64, ne02 as i64, 1];
    let src0 =
        Tensor { typ: GgmlType::F16, ne: ne0, nb: Tensor::contiguous_strides(GgmlType::F16, ne0).unwrap(), data: &w };
    let ggml = GgmlWeights::repack(&src0).unwrap();
    let runs = F16PerCall::kernel(SmeSetting::Auto).is_some();
    // Where ggml's path packs F16 per call: an SME2 bf16 kernel runs here.
    assert_eq!(runs, ggml.kernel_for(2).is_some_and(|k| k.contains("bf16")), "{:?}", ggml.layouts());
    assert!(F16PerCall::kernel(SmeSetting::Off).is_none(), "GGML_KLEIDIAI_SME=0 switches it off");
    if !runs {
        println!("F16 per call: no SME2 bf16 kernel on this CPU (nothing to run)");
    }
    for (m, ne12) in [(1, 2), (5, 2), (33, 4)] {
        let x: Vec<u8> = rng.vec_f32(ne12 * m * k).iter().flat_map(|v| v.to_le_bytes()).collect();
        let ne1 = [k as i64, m as i64, ne12 as i64, 1];
        let src1 = Tensor {
            typ: GgmlType::F32,
            ne: ne1,
            nb: Tensor::contiguous_strides(GgmlType::F32, ne1).unwrap(),
            data: &x,
        };
        let accepted = F16PerCall::accepts((src0.ne, src0.nb), (src1.ne, src1.nb), SmeSetting::Auto);
        assert_eq!(accepted, runs && m > 1, "m = {m}: ggml takes F16 with more than one row only");
        if !accepted {
            continue;
        }
        let dne = [n as i64, m as i64, ne12 as i64, 1];
        let dnb = Tensor::contiguous_strides(GgmlType::F32, dne).unwrap();
        let mut want = vec![0u8; 4 * n * m * ne12];
        let mut d = TensorMut { typ: GgmlType::F32, ne: dne, nb: dnb, data: &mut want };
        ggml.mul_mat(&src1, &mut d, Parallelism::Sequential, &mut MulMatScratch::default()).unwrap();
        for nth in [1, 2, 3] {
            let mut dst = vec![0u8; want.len()];
            let mut work = vec![0u8; F16PerCall::work_size(src0.ne, src1.ne, SmeSetting::Auto).unwrap()];
            let (barrier, counter) = (Barrier::new(nth), AtomicUsize::new(0));
            {
                let (db, wb) = (SharedBytes::from_slice(&mut dst), SharedBytes::from_slice(&mut work));
                std::thread::scope(|s| {
                    for ith in 0..nth {
                        let (db, wb, src0, src1, barrier, counter) = (&db, &wb, &src0, &src1, &barrier, &counter);
                        s.spawn(move || {
                            let team = StdTeam { ith, nth, barrier, counter };
                            F16PerCall::mul_mat(src0, src1, dne, dnb, db, wb, &team, SmeSetting::Auto).unwrap();
                        });
                    }
                });
            }
            assert!(dst == want, "m = {m}, ne12 = {ne12}, {nth} threads: not GgmlWeights::mul_mat's bits");
        }
    }
}

/// `get_rows` on a team: each thread writes its share of the rows, the
/// weights' rows as f32, and nothing between them; a bad row index, too
/// small a row stride and a short dst are refused.
#[test]
fn get_rows_on_threads_gives_the_weight_rows() {
    each_threaded(71, "get_rows", |typ, w, _| {
        let (k, n) = w.dims();
        let rows = [0i32, 5, n as i32 - 1, 3, 7];
        let stride = 4 * k + 8;
        let mut dst = crate::AlignedBuf::zeroed(stride * rows.len());
        {
            let d = SharedBytes::from_slice(dst.as_mut_slice());
            std::thread::scope(|s| {
                for ith in 0..2 {
                    let (d, rows) = (&d, &rows);
                    s.spawn(move || w.get_rows(rows, d, stride, ith, 2).unwrap());
                }
            });
        }
        let mut want = vec![0f32; k];
        for (i, r) in rows.iter().enumerate() {
            w.weights.row(*r as usize, &mut want).unwrap();
            let bytes = &dst.as_slice()[i * stride..(i + 1) * stride];
            let got: Vec<f32> =
                bytes[..4 * k].chunks_exact(4).map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]])).collect();
            assert!(bit_identical(&got, &want), "{typ:?}: row {i} (weights row {r})");
            assert!(bytes[4 * k..].iter().all(|v| *v == 0), "{typ:?}: bytes after row {i} written");
        }
        let d = SharedBytes::from_slice(dst.as_mut_slice());
        assert!(w.get_rows(&[n as i32], &d, stride, 0, 1).is_err(), "{typ:?}: row index n");
        assert!(w.get_rows(&rows, &d, 4 * k - 4, 0, 1).is_err(), "{typ:?}: rows overlapping");
        assert!(w.get_rows(&rows, &d, stride, 2, 2).is_err(), "{typ:?}: thread 2 of 2");
        let mut short = crate::AlignedBuf::zeroed(stride * 2);
        let r = w.get_rows(&rows, &SharedBytes::from_slice(short.as_mut_slice()), stride, 0, 1);
        assert!(matches!(r, Err(Error::ByteLength { .. })), "{typ:?}: short dst {r:?}");
    });
}
